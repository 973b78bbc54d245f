/*
 * SRQ verbs, one process: argument checks and exact errnos of create/modify/query/
 * destroy/post_srq_recv/create_srq_ex, the caps reported back, resize keeping posted
 * WQEs in order, QPs created on an SRQ (no RQ, receive caps 0, post_recv refused,
 * ibv_destroy_srq EBUSY while they exist), and the SRQ types it refuses.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "inproc.h"
#include "core/limits.h"
#include "core/srq.h"

struct env {
	struct ibv_context *ctx, *ctx2;
	struct ibv_pd *pd, *pd2;
	struct ibv_cq *cq, *cq2;
	uint8_t *buf;
	struct ibv_mr *mr;
};

static struct ibv_srq *mk_srq(struct env *e, uint32_t max_wr, uint32_t max_sge)
{
	struct ibv_srq_init_attr a = {.srq_context = e, .attr = {.max_wr = max_wr, .max_sge = max_sge}};
	struct ibv_srq *s = ibv_create_srq(e->pd, &a);
	CHECK_PTR(s);
	return s;
}

static int post1(struct ibv_srq *s, struct env *e, uint64_t wr_id, int nsge, struct ibv_recv_wr **bad)
{
	struct ibv_sge sge[4];
	for (int i = 0; i < 4; i++)
		sge[i] = (struct ibv_sge){(uintptr_t)e->buf + 64 * (unsigned)i, 64, e->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = sge, .num_sge = nsge}, *ignored;
	return ibv_post_srq_recv(s, &wr, bad ? bad : &ignored);
}

static void test_caps(struct env *e)
{
	struct ibv_device_attr a;
	CHECK_OK(ibv_query_device(e->ctx, &a));
	CHECK_EQ(a.max_srq, SWV_MAX_SRQ);
	CHECK_EQ(a.max_srq_wr, SWV_SRQ_MAX_WR);
	CHECK_EQ(a.max_srq_sge, SWV_SRQ_MAX_SGE);
	CHECK(a.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
}

static void test_create(struct env *e)
{
	struct ibv_srq_init_attr a = {.attr = {.max_wr = 16, .max_sge = 2}};
	CHECK_NULL_ERRNO(ibv_create_srq(NULL, &a), EINVAL);
	CHECK_NULL_ERRNO(ibv_create_srq(e->pd, NULL), EINVAL);
	a.attr.max_wr = 0;
	CHECK_NULL_ERRNO(ibv_create_srq(e->pd, &a), EINVAL);
	a.attr.max_wr = SWV_SRQ_MAX_WR + 1;
	CHECK_NULL_ERRNO(ibv_create_srq(e->pd, &a), EINVAL);
	a.attr.max_wr = 16;
	a.attr.max_sge = SWV_SRQ_MAX_SGE + 1;
	CHECK_NULL_ERRNO(ibv_create_srq(e->pd, &a), EINVAL);

	/* The largest SRQ; caps come back as provided; srq_limit is not armed by create. */
	a.attr = (struct ibv_srq_attr){.max_wr = SWV_SRQ_MAX_WR, .max_sge = SWV_SRQ_MAX_SGE,
				       .srq_limit = 5};
	a.srq_context = (void *)0x1234;
	struct ibv_srq *s = ibv_create_srq(e->pd, &a);
	CHECK_PTR(s);
	CHECK_EQ(a.attr.max_wr, SWV_SRQ_MAX_WR);
	CHECK_EQ(a.attr.max_sge, SWV_SRQ_MAX_SGE);
	CHECK_EQ(a.attr.srq_limit, 0);
	CHECK(s->context == e->ctx && s->pd == e->pd && s->srq_context == (void *)0x1234);
	struct ibv_srq_attr q;
	memset(&q, 0xff, sizeof(q));
	CHECK_OK(ibv_query_srq(s, &q));
	CHECK_EQ(q.max_wr, SWV_SRQ_MAX_WR);
	CHECK_EQ(q.max_sge, SWV_SRQ_MAX_SGE);
	CHECK_EQ(q.srq_limit, 0);
	CHECK_OK(ibv_destroy_srq(s));

	/* an SRQ holds its PD */
	struct ibv_pd *pd3 = ibv_alloc_pd(e->ctx);
	CHECK_PTR(pd3);
	a.attr = (struct ibv_srq_attr){.max_wr = 2, .max_sge = 1};
	s = ibv_create_srq(pd3, &a);
	CHECK_PTR(s);
	CHECK_EQ(ibv_dealloc_pd(pd3), EBUSY);
	CHECK_OK(ibv_destroy_srq(s));
	CHECK_OK(ibv_dealloc_pd(pd3));

	/* max_sge 0: one SGE is provided, and said so */
	a.attr = (struct ibv_srq_attr){.max_wr = 1, .max_sge = 0};
	s = ibv_create_srq(e->pd, &a);
	CHECK_PTR(s);
	CHECK_EQ(a.attr.max_sge, 1);
	CHECK_OK(ibv_destroy_srq(s));

	CHECK_EQ(ibv_query_srq(NULL, &q), EINVAL);
	CHECK_EQ(ibv_destroy_srq(NULL), EINVAL);
}

static void test_modify(struct env *e)
{
	struct ibv_srq *s = mk_srq(e, 8, 2);
	struct ibv_srq_attr a = {0}, q;

	CHECK_EQ(ibv_modify_srq(NULL, &a, IBV_SRQ_LIMIT), EINVAL);
	CHECK_EQ(ibv_modify_srq(s, NULL, IBV_SRQ_LIMIT), EINVAL);
	CHECK_EQ(ibv_modify_srq(s, &a, 1 << 2), EINVAL); /* unknown mask bit */
	CHECK_EQ(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT | (1 << 5)), EINVAL);
	CHECK_OK(ibv_modify_srq(s, &a, 0)); /* nothing to change */

	/* arm: limit <= max_wr */
	a.srq_limit = 9;
	CHECK_EQ(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT), EINVAL);
	a.srq_limit = 8;
	CHECK_OK(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT));
	a.srq_limit = 3;
	CHECK_OK(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT));
	CHECK_OK(ibv_query_srq(s, &q));
	CHECK_EQ(q.srq_limit, 3);

	/* resize: 1..max, not below the WQEs posted, not below the armed limit */
	for (int i = 0; i < 5; i++)
		CHECK_OK(post1(s, e, 100 + (uint64_t)i, 1, NULL));
	a.max_wr = 0;
	CHECK_EQ(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR), EINVAL);
	a.max_wr = SWV_SRQ_MAX_WR + 1;
	CHECK_EQ(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR), EINVAL);
	a.max_wr = 4; /* 5 posted */
	CHECK_EQ(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR), EINVAL);
	a.max_wr = 5;
	a.srq_limit = 6; /* both at once: the new limit must fit the new size */
	CHECK_EQ(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
	CHECK_OK(ibv_query_srq(s, &q));
	CHECK_EQ(q.max_wr, 8); /* a refused modify changes nothing */
	CHECK_EQ(q.srq_limit, 3);
	a.max_wr = 5;
	CHECK_OK(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR));
	CHECK_OK(ibv_query_srq(s, &q));
	CHECK_EQ(q.max_wr, 5);
	CHECK_EQ(q.max_sge, 2);
	struct ibv_recv_wr *bad = NULL;
	CHECK_EQ(post1(s, e, 999, 1, &bad), ENOMEM); /* full at the new size */
	CHECK_EQ(bad->wr_id, 999);
	a.max_wr = 1000; /* grow: the posted WQEs keep their order */
	CHECK_OK(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR));
	for (int i = 5; i < 12; i++)
		CHECK_OK(post1(s, e, 100 + (uint64_t)i, 2, NULL));
	struct swv_srq *ss = to_swv_srq(s);
	CHECK_EQ(swv_srq_count(ss), 12);
	struct swv_recv_wqe *w = malloc(swv_srq_wqe_size(ss->max_sge));
	CHECK_PTR(w);
	for (int i = 0; i < 12; i++) {
		CHECK(swv_srq_take(ss, w));
		CHECK_EQ(w->wr_id, 100 + (uint64_t)i);
		CHECK_EQ(w->num_sge, i < 5 ? 1 : 2);
		CHECK_EQ(w->length, i < 5 ? 64 : 128);
	}
	CHECK(!swv_srq_take(ss, w));
	free(w);
	/* the limit (3) was armed while 12 were posted: taking them crossed it once,
	 * which disarmed it (the event itself is checked in test_srq_resp) */
	CHECK_OK(ibv_query_srq(s, &q));
	CHECK_EQ(q.srq_limit, 0);
	/* 0 disarms */
	a.srq_limit = 0;
	CHECK_OK(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT));
	CHECK_OK(ibv_destroy_srq(s));
}

static void test_post(struct env *e)
{
	struct ibv_srq *s = mk_srq(e, 3, 2);
	struct ibv_recv_wr *bad = (void *)1;

	/* too many SGEs */
	CHECK_EQ(post1(s, e, 1, 3, &bad), EINVAL);
	CHECK_EQ(bad->wr_id, 1);
	/* SGEs promised but no list */
	struct ibv_recv_wr nolist = {.wr_id = 2, .num_sge = 1};
	CHECK_EQ(ibv_post_srq_recv(s, &nolist, &bad), EINVAL);
	CHECK(bad == &nolist);
	struct ibv_recv_wr neg = {.wr_id = 3, .num_sge = -1};
	CHECK_EQ(ibv_post_srq_recv(s, &neg, &bad), EINVAL);
	CHECK_EQ(swv_srq_count(to_swv_srq(s)), 0);

	/* a chain stops at the first bad WR; the ones before it are posted */
	struct ibv_sge sge = {(uintptr_t)e->buf, 64, e->mr->lkey};
	struct ibv_recv_wr w[4];
	for (int i = 0; i < 4; i++)
		w[i] = (struct ibv_recv_wr){.wr_id = 10 + (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					    .next = i < 3 ? &w[i + 1] : NULL};
	w[2].num_sge = 3;
	bad = NULL;
	CHECK_EQ(ibv_post_srq_recv(s, &w[0], &bad), EINVAL);
	CHECK(bad == &w[2]);
	CHECK_EQ(swv_srq_count(to_swv_srq(s)), 2);
	/* full: ENOMEM at the WR that does not fit */
	w[2].num_sge = 0; /* zero SGEs is a valid (zero-length) receive */
	bad = NULL;
	CHECK_EQ(ibv_post_srq_recv(s, &w[2], &bad), ENOMEM);
	CHECK(bad == &w[3]);
	CHECK_EQ(swv_srq_count(to_swv_srq(s)), 3);
	/* no bad_wr pointer: EINVAL before anything else (rxe's rule for receive queues) */
	CHECK_EQ(ibv_post_srq_recv(s, &w[3], NULL), EINVAL);
	/* the op refuses a NULL SRQ rather than dereferencing it */
	CHECK_EQ(e->ctx->ops.post_srq_recv(NULL, &w[3], &bad), EINVAL);
	CHECK(bad == &w[3]);
	CHECK_OK(ibv_destroy_srq(s)); /* posted WQEs go with it */
}

static struct ibv_qp *mk_qp(struct env *e, struct ibv_srq *srq, enum ibv_qp_type type,
			    struct ibv_qp_init_attr *ia)
{
	memset(ia, 0, sizeof(*ia));
	ia->send_cq = e->cq;
	ia->recv_cq = e->cq;
	ia->srq = srq;
	ia->qp_type = type;
	ia->cap = (struct ibv_qp_cap){.max_send_wr = 4, .max_recv_wr = 77, .max_send_sge = 1,
				      .max_recv_sge = 3};
	return ibv_create_qp(e->pd, ia);
}

static void test_qp_on_srq(struct env *e)
{
	struct ibv_srq *s = mk_srq(e, 16, 2);
	struct ibv_qp_init_attr ia;

	struct ibv_qp *qps[3];
	const enum ibv_qp_type types[3] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
	for (int i = 0; i < 3; i++) {
		qps[i] = mk_qp(e, s, types[i], &ia);
		CHECK_PTR(qps[i]);
		/* no RQ of its own: the receive caps say 0 */
		CHECK_EQ(ia.cap.max_recv_wr, 0);
		CHECK_EQ(ia.cap.max_recv_sge, 0);
		CHECK(qps[i]->srq == s);
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		CHECK_OK(ibv_query_qp(qps[i], &qa, IBV_QP_CAP, &qi));
		CHECK(qi.srq == s);
		CHECK_EQ(qi.cap.max_recv_wr, 0);
		CHECK_EQ(qa.cap.max_recv_wr, 0);
	}
	/* receives go to the SRQ, not the QP */
	struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				   .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	CHECK_OK(ibv_modify_qp(qps[0], &init,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	struct ibv_sge sge = {(uintptr_t)e->buf, 64, e->mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
	CHECK_EQ(ibv_post_recv(qps[0], &rw, &bad), EINVAL);
	CHECK(bad == &rw);

	/* a RECV counter may be attached to an SRQ QP (comp-cntr.md: the SRQ is its RQ) */
	struct ibv_comp_cntr_init_attr ca = {0};
	struct ibv_comp_cntr *cc = ibv_create_comp_cntr(e->ctx, &ca);
	CHECK_PTR(cc);
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_RECV};
	CHECK_OK(ibv_qp_attach_comp_cntr(qps[1], cc, &at));

	/* the SRQ outlives its QPs */
	CHECK_EQ(ibv_destroy_srq(s), EBUSY);
	CHECK_OK(ibv_destroy_qp(qps[0]));
	CHECK_OK(ibv_destroy_qp(qps[1]));
	CHECK_EQ(ibv_destroy_srq(s), EBUSY);
	CHECK_OK(post1(s, e, 5, 1, NULL)); /* still usable after a refused destroy */
	CHECK_OK(ibv_destroy_qp(qps[2]));
	CHECK_OK(ibv_destroy_comp_cntr(cc));
	CHECK_OK(ibv_destroy_srq(s));

	/* an SRQ of another context */
	struct ibv_srq_init_attr a2 = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *s2 = ibv_create_srq(e->pd2, &a2);
	CHECK_PTR(s2);
	CHECK_NULL_ERRNO(mk_qp(e, s2, IBV_QPT_RC, &ia), EINVAL);
	CHECK_OK(ibv_destroy_srq(s2));
}

static void test_srq_ex_and_xrc(struct env *e)
{
	struct ibv_srq_init_attr_ex x;
	/* basic, through the verbs_context op (a mask beyond PD|TYPE) */
	memset(&x, 0, sizeof(x));
	x.attr.max_wr = 4;
	x.attr.max_sge = 1;
	x.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ;
	x.srq_type = IBV_SRQT_BASIC;
	x.pd = e->pd;
	x.cq = e->cq;
	struct ibv_srq *s = ibv_create_srq_ex(e->ctx, &x);
	CHECK_PTR(s);
	CHECK_EQ(x.attr.max_wr, 4);
	uint32_t num = 0;
	/* every SRQ has a number, as mlx5 gives (only XRC SRQs can be addressed by it) */
	CHECK_OK(ibv_get_srq_num(s, &num));
	CHECK(num != 0);
	CHECK_OK(ibv_destroy_srq(s));
	/* the plain inline path */
	x.comp_mask = IBV_SRQ_INIT_ATTR_PD;
	s = ibv_create_srq_ex(e->ctx, &x);
	CHECK_PTR(s);
	CHECK_OK(ibv_destroy_srq(s));
	/* without a PD, or one of another context */
	x.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(e->ctx, &x), EINVAL);
	x.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
	x.pd = e->pd2;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(e->ctx, &x), EINVAL);
	x.pd = e->pd;
	/* unknown bits; bad sizes still checked */
	x.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_RESERVED;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(e->ctx, &x), EINVAL);
	x.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
	x.attr.max_wr = 0;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(e->ctx, &x), EINVAL);
	x.attr.max_wr = 4;
	/* An XRC SRQ needs its XRC domain (tests/unit/test_xrc_objects.c has the rest); a
	 * tag-matching SRQ its tm_cap (tests/mp/test_tm.c has the rest) */
	x.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ |
		      IBV_SRQ_INIT_ATTR_XRCD;
	x.srq_type = IBV_SRQT_XRC;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(e->ctx, &x), EINVAL);
	x.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ |
		      IBV_SRQ_INIT_ATTR_TM;
	x.srq_type = IBV_SRQT_TM;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(e->ctx, &x), EINVAL);

	/* an XRC TGT QP belongs to a domain, not a PD: ibv_create_qp cannot make one */
	struct ibv_qp_init_attr ia;
	CHECK_NULL_ERRNO(mk_qp(e, NULL, IBV_QPT_XRC_RECV, &ia), EINVAL);
}

int main(void)
{
	struct env e;
	memset(&e, 0, sizeof(e));
	e.ctx = swvt_open_first_device();
	e.ctx2 = swvt_open_first_device();
	e.pd = ibv_alloc_pd(e.ctx);
	e.pd2 = ibv_alloc_pd(e.ctx2);
	CHECK(e.pd && e.pd2);
	e.cq = ibv_create_cq(e.ctx, 64, NULL, NULL, 0);
	CHECK_PTR(e.cq);
	e.buf = calloc(1, 4096);
	CHECK_PTR(e.buf);
	e.mr = ibv_reg_mr(e.pd, e.buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(e.mr);

	test_caps(&e);
	test_create(&e);
	test_modify(&e);
	test_post(&e);
	test_qp_on_srq(&e);
	test_srq_ex_and_xrc(&e);

	CHECK_OK(ibv_dereg_mr(e.mr));
	CHECK_OK(ibv_destroy_cq(e.cq));
	CHECK_OK(ibv_dealloc_pd(e.pd));
	CHECK_OK(ibv_dealloc_pd(e.pd2));
	CHECK_OK(ibv_close_device(e.ctx));
	CHECK_OK(ibv_close_device(e.ctx2));
	free(e.buf);
	printf("test_srq: OK\n");
	return 0;
}
