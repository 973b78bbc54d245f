/* Parent and thread domains (core/pd.h): the errnos of ibv_alloc_parent_domain,
 * ibv_alloc_td / ibv_dealloc_td and ibv_dealloc_pd; the allocators called for exactly
 * the queue rings swverbs makes (QP send and receive rings, SRQ rings and their
 * resizes, rings of CQs created with the parent domain and their resizes), each
 * buffer freed once through the same pair; IBV_ALLOCATOR_USE_DEFAULT falls back to the
 * library without its free being called; protection across a PD and its parent
 * domains. Traffic through such rings between processes: tests/mp/test_parent_domain_mp.c. */
#include <errno.h>
#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "inproc.h"
#include "core/context.h"
#include "core/mr.h"
#include "core/pd.h"

#define NTYPES 4
static const uint64_t types[NTYPES] = {SWV_RES_TYPE_QP_SQ, SWV_RES_TYPE_QP_RQ, SWV_RES_TYPE_SRQ,
				       SWV_RES_TYPE_CQ};

/* What the allocators saw. */
struct book {
	struct ibv_pd *pd; /* the parent domain they must be called with */
	int allocs[NTYPES], frees[NTYPES], other;
	void *live[64];
	uint64_t live_type[64];
	int nlive;
	bool use_default;
};

static int type_idx(uint64_t t)
{
	for (int i = 0; i < NTYPES; i++)
		if (types[i] == t)
			return i;
	return -1;
}

static void *my_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
		      uint64_t type)
{
	struct book *b = pd_context;
	int i = type_idx(type);
	if (pd != b->pd || i < 0 || !size || !alignment || (alignment & (alignment - 1))) {
		b->other++;
		return NULL;
	}
	b->allocs[i]++;
	if (b->use_default)
		return IBV_ALLOCATOR_USE_DEFAULT;
	void *p = NULL;
	if (posix_memalign(&p, alignment, size))
		return NULL;
	memset(p, 0xa5, size); /* dirty: swverbs must clear it */
	CHECK(b->nlive < 64);
	b->live[b->nlive] = p;
	b->live_type[b->nlive++] = type;
	return p;
}

static void my_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t type)
{
	struct book *b = pd_context;
	int i = type_idx(type);
	if (pd != b->pd || i < 0) {
		b->other++;
		return;
	}
	for (int k = 0; k < b->nlive; k++)
		if (b->live[k] == ptr && b->live_type[k] == type) {
			b->live[k] = b->live[--b->nlive];
			b->live_type[k] = b->live_type[b->nlive];
			b->frees[i]++;
			free(ptr);
			return;
		}
	b->other++; /* a pointer it never gave, or given twice */
}

static void test_errnos(struct ibv_context *c, struct ibv_pd *pd)
{
	struct ibv_parent_domain_init_attr a = {.pd = pd};
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(c, NULL) && errno == EINVAL);
	a.pd = NULL;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(c, &a) && errno == EINVAL);
	a.pd = pd;
	a.comp_mask = 1u << 5;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(c, &a) && errno == EINVAL);
	a.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS; /* without the functions */
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(c, &a) && errno == EINVAL);
	a.alloc = my_alloc;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(c, &a) && errno == EINVAL);
	/* a PD of another context */
	struct swvt_dev d2 = swvt_dev_open();
	a.comp_mask = 0;
	a.pd = d2.pd;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(c, &a) && errno == EINVAL);
	/* a TD of another context */
	struct ibv_td_init_attr ta = {0};
	struct ibv_td *td2 = ibv_alloc_td(d2.ctx, &ta);
	CHECK_PTR(td2);
	a.pd = pd;
	a.td = td2;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(c, &a) && errno == EINVAL);
	CHECK_OK(ibv_dealloc_td(td2));
	swvt_dev_close(&d2);
	ta.comp_mask = 1;
	errno = 0;
	CHECK(!ibv_alloc_td(c, &ta) && errno == EINVAL);
	ta.comp_mask = 0;

	/* a parent domain of a parent domain */
	struct ibv_td *td = ibv_alloc_td(c, &ta);
	CHECK_PTR(td);
	a.td = td;
	struct ibv_pd *par = ibv_alloc_parent_domain(c, &a);
	CHECK_PTR(par);
	CHECK(par->context == c);
	a.pd = par;
	a.td = NULL;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(c, &a) && errno == EINVAL);
	/* it holds its PD and its TD */
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	CHECK_EQ(ibv_dealloc_td(td), EBUSY);
	/* and what is made on it holds it */
	static uint8_t buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(par, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(mr);
	CHECK_EQ(ibv_dealloc_pd(par), EBUSY);
	CHECK_OK(ibv_dereg_mr(mr));
	CHECK_OK(ibv_dealloc_pd(par));
	CHECK_OK(ibv_dealloc_td(td));
	/* ALLOW_CC_UNPROTECTED_ALLOC changes nothing */
	a.pd = pd;
	a.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC;
	par = ibv_alloc_parent_domain(c, &a);
	CHECK_PTR(par);
	CHECK_OK(ibv_dealloc_pd(par));
}

/* An MR of the PD serves its parent domains and the reverse; another PD's does not. */
static void test_protection(struct ibv_context *c, struct ibv_pd *pd)
{
	struct ibv_parent_domain_init_attr a = {.pd = pd};
	struct ibv_pd *p1 = ibv_alloc_parent_domain(c, &a), *p2 = ibv_alloc_parent_domain(c, &a);
	struct ibv_pd *other = ibv_alloc_pd(c);
	CHECK(p1 && p2 && other);
	static uint8_t buf[256];
	struct ibv_mr *on_pd =
	    ibv_reg_mr(pd, buf, 128, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *on_p1 =
	    ibv_reg_mr(p1, buf + 128, 128, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(on_pd && on_p1);
	CHECK(on_p1->pd == p1);
	struct swv_context *sc = to_swv_ctx(c);
	uint8_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	struct ibv_sge s_pd = {(uintptr_t)buf, 8, on_pd->lkey};
	struct ibv_sge s_p1 = {(uintptr_t)buf + 128, 8, on_p1->lkey};
	struct ibv_pd *all[3] = {pd, p1, p2};
	for (int i = 0; i < 3; i++) {
		struct swv_pd *q = to_swv_pd(all[i]);
		CHECK_OK(swv_mr_scatter(sc, q, &s_pd, 1, 0, x, 8));
		CHECK_OK(swv_mr_scatter(sc, q, &s_p1, 1, 0, x, 8));
		CHECK_OK(swv_mr_remote_write(sc, q, 0, on_pd->rkey, (uintptr_t)buf, x, 8));
		CHECK_OK(swv_mr_remote_write(sc, q, 0, on_p1->rkey, (uintptr_t)buf + 128, x, 8));
	}
	struct swv_pd *o = to_swv_pd(other);
	CHECK_EQ(swv_mr_scatter(sc, o, &s_pd, 1, 0, x, 8), IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(swv_mr_scatter(sc, o, &s_p1, 1, 0, x, 8), IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(swv_mr_remote_write(sc, o, 0, on_p1->rkey, (uintptr_t)buf + 128, x, 8), EACCES);
	CHECK_OK(ibv_dereg_mr(on_pd));
	CHECK_OK(ibv_dereg_mr(on_p1));
	CHECK_OK(ibv_dealloc_pd(p1));
	CHECK_OK(ibv_dealloc_pd(p2));
	CHECK_OK(ibv_dealloc_pd(other));
}

static void test_allocators(struct ibv_context *c, struct ibv_pd *pd, bool use_default)
{
	struct book b;
	memset(&b, 0, sizeof(b));
	b.use_default = use_default;
	struct ibv_parent_domain_init_attr a = {
	    .pd = pd,
	    .comp_mask =
		IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
	    .alloc = my_alloc,
	    .free = my_free,
	    .pd_context = &b,
	};
	struct ibv_pd *par = ibv_alloc_parent_domain(c, &a);
	CHECK_PTR(par);
	b.pd = par;

	/* a CQ of ibv_create_cq does not know parent domains: no call */
	struct ibv_cq *plain = ibv_create_cq(c, 16, NULL, NULL, 0);
	CHECK_PTR(plain);
	struct ibv_cq_init_attr_ex ca = {.cqe = 64,
					 .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
					 .parent_domain = par,
					 .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(c, &ca);
	CHECK_PTR(cq);
	CHECK_EQ(b.allocs[3], 1);
	CHECK_EQ(ibv_dealloc_pd(par), EBUSY); /* the CQ holds it */
	CHECK_OK(ibv_resize_cq(ibv_cq_ex_to_cq(cq), 200));
	CHECK_EQ(b.allocs[3], 2);
	CHECK_EQ(b.frees[3], use_default ? 0 : 1);

	struct ibv_qp_init_attr qa = {
	    .send_cq = plain,
	    .recv_cq = ibv_cq_ex_to_cq(cq),
	    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
	    .qp_type = IBV_QPT_RC};
	struct ibv_qp *qp = ibv_create_qp(par, &qa);
	CHECK_PTR(qp);
	CHECK_EQ(b.allocs[0], 1);
	CHECK_EQ(b.allocs[1], 1);
	CHECK(qp->pd == par);

	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 2}};
	struct ibv_srq *srq = ibv_create_srq(par, &sa);
	CHECK_PTR(srq);
	CHECK_EQ(b.allocs[2], 1);
	struct ibv_srq_attr sm = {.max_wr = 100};
	CHECK_OK(ibv_modify_srq(srq, &sm, IBV_SRQ_MAX_WR));
	CHECK_EQ(b.allocs[2], 2);
	CHECK_EQ(b.frees[2], use_default ? 0 : 1);
	/* a QP on the SRQ has no receive ring */
	qa.srq = srq;
	struct ibv_qp *qp2 = ibv_create_qp(par, &qa);
	CHECK_PTR(qp2);
	CHECK_EQ(b.allocs[0], 2);
	CHECK_EQ(b.allocs[1], 1);

	/* WQEs posted into the rings work as ever */
	static uint8_t buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(mr);
	struct ibv_sge sge = {(uintptr_t)buf, 64, mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 5, .sg_list = &sge, .num_sge = 1}, *bad;
	struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	CHECK_OK(ibv_modify_qp(
	    qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	CHECK_OK(ibv_post_recv(qp, &rw, &bad));
	CHECK_OK(ibv_post_srq_recv(srq, &rw, &bad));

	CHECK_OK(ibv_destroy_qp(qp2));
	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_destroy_srq(srq));
	CHECK_OK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)));
	CHECK_OK(ibv_destroy_cq(plain));
	CHECK_OK(ibv_dereg_mr(mr));
	/* every buffer given back once, through the same pair, nothing else asked */
	for (int i = 0; i < NTYPES; i++)
		CHECK_EQ(b.frees[i], use_default ? 0 : b.allocs[i]);
	CHECK_EQ(b.allocs[0], 2);
	CHECK_EQ(b.allocs[1], 1);
	CHECK_EQ(b.allocs[2], 2);
	CHECK_EQ(b.allocs[3], 2);
	CHECK_EQ(b.nlive, 0);
	CHECK_EQ(b.other, 0);
	CHECK_OK(ibv_dealloc_pd(par));
}

/* An allocator that fails makes the create fail with ENOMEM; nothing leaks. */
static void *null_alloc(struct ibv_pd *pd, void *ctx, size_t size, size_t al, uint64_t type)
{
	(void)pd, (void)ctx, (void)size, (void)al, (void)type;
	return NULL;
}
static void never_free(struct ibv_pd *pd, void *ctx, void *p, uint64_t type)
{
	(void)pd, (void)ctx, (void)p, (void)type;
	CHECK(0);
}

static void test_failing(struct ibv_context *c, struct ibv_pd *pd)
{
	struct ibv_parent_domain_init_attr a = {.pd = pd,
						.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS,
						.alloc = null_alloc,
						.free = never_free};
	struct ibv_pd *par = ibv_alloc_parent_domain(c, &a);
	CHECK_PTR(par);
	struct ibv_cq *cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	CHECK_PTR(cq);
	struct ibv_qp_init_attr qa = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
	    .qp_type = IBV_QPT_RC};
	errno = 0;
	CHECK(!ibv_create_qp(par, &qa) && errno == ENOMEM);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
	errno = 0;
	CHECK(!ibv_create_srq(par, &sa) && errno == ENOMEM);
	struct ibv_cq_init_attr_ex ca = {
	    .cqe = 8, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = par};
	errno = 0;
	CHECK(!ibv_create_cq_ex(c, &ca) && errno == ENOMEM);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(par)); /* nothing holds it */
}

int main(void)
{
	struct swvt_dev d = swvt_dev_open();
	test_errnos(d.ctx, d.pd);
	test_protection(d.ctx, d.pd);
	test_allocators(d.ctx, d.pd, false);
	test_allocators(d.ctx, d.pd, true);
	test_failing(d.ctx, d.pd);
	swvt_dev_close(&d);
	return 0;
}
