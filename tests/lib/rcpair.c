/* An RC pair of two contexts of this process; see rcpair.h. */
#include "rcpair.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "harness.h"
#include "inproc.h"

void swvt_rc_side_open(struct swvt_rc_side *s, const struct swvt_rc_opts *o)
{
	static const struct swvt_rc_opts none;
	if (!o)
		o = &none;
	memset(s, 0, sizeof(*s));
	s->ctx = swvt_open_first_device();
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK_PTR(s->pd);
	s->cq = ibv_create_cq(s->ctx, o->cq_depth ? o->cq_depth : 256, NULL, NULL, 0);
	CHECK_PTR(s->cq);
	s->len = o->buf_len ? o->buf_len : SWVT_RC_BUF;
	s->buf = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(s->buf != MAP_FAILED);
	int access = o->mr_access ? o->mr_access
				  : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					IBV_ACCESS_REMOTE_READ;
	s->mr = ibv_reg_mr(s->pd, s->buf, s->len, access);
	CHECK_PTR(s->mr);
	uint32_t wrs = o->max_wr ? o->max_wr : 64;
	struct ibv_qp_init_attr ia = {
	    .send_cq = s->cq,
	    .recv_cq = s->cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = wrs, .max_recv_wr = wrs, .max_send_sge = 4, .max_recv_sge = 1}};
	s->qp = ibv_create_qp(s->pd, &ia);
	CHECK_PTR(s->qp);
	if (o->cntr_ops) {
		struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
		s->cntr = ibv_create_comp_cntr(s->ctx, &ca);
		CHECK_PTR(s->cntr);
		struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = o->cntr_ops};
		CHECK_OK(ibv_qp_attach_comp_cntr(s->qp, s->cntr, &at));
	}
	swvt_pair_to_init(s->qp);
	if (o->qp_access) {
		struct ibv_qp_attr at = {.qp_access_flags = (unsigned)o->qp_access};
		CHECK_OK(ibv_modify_qp(s->qp, &at, IBV_QP_ACCESS_FLAGS));
	}
}

void swvt_rc_side_close(struct swvt_rc_side *s)
{
	CHECK_OK(ibv_destroy_qp(s->qp));
	if (s->cntr)
		CHECK_OK(ibv_destroy_comp_cntr(s->cntr));
	if (s->mr)
		CHECK_OK(ibv_dereg_mr(s->mr));
	CHECK_OK(munmap(s->buf, s->len) ? errno : 0);
	CHECK_OK(ibv_destroy_cq(s->cq));
	CHECK_OK(ibv_dealloc_pd(s->pd));
	CHECK_OK(ibv_close_device(s->ctx));
}

void swvt_rc_connect(struct swvt_rc_side *a, struct swvt_rc_side *b, const struct swvt_rc_conn *c)
{
	struct swvt_rc_conn dflt = SWVT_RC_CONN_DEFAULT;
	if (!c)
		c = &dflt;
	swvt_pair_to_rtr(a->qp, b->qp->qp_num);
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR,
				.path_mtu = c->b_path_mtu ? c->b_path_mtu : IBV_MTU_1024,
				.dest_qp_num = a->qp->qp_num,
				.rq_psn = c->b_rq_psn,
				.max_dest_rd_atomic = c->b_max_dest_rd_atomic,
				.min_rnr_timer = 1};
	swvt_local_ah_attr(b->ctx, &r.ah_attr);
	CHECK_OK(ibv_modify_qp(b->qp, &r,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER));
	struct ibv_qp_attr t = {.qp_state = IBV_QPS_RTS,
				.sq_psn = c->a_sq_psn,
				.timeout = c->a_timeout,
				.retry_cnt = c->a_retry_cnt,
				.rnr_retry = c->a_rnr_retry,
				.max_rd_atomic = 4};
	CHECK_OK(ibv_modify_qp(a->qp, &t,
			       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
	swvt_pair_to_rts(b->qp, 14);
}

void swvt_rc_pair_open(struct swvt_rc_side *a, struct swvt_rc_side *b,
		       const struct swvt_rc_opts *oa, const struct swvt_rc_opts *ob,
		       const struct swvt_rc_conn *c)
{
	swvt_rc_side_open(a, oa);
	swvt_rc_side_open(b, ob);
	swvt_rc_connect(a, b, c);
}

void swvt_rc_pair_close(struct swvt_rc_side *a, struct swvt_rc_side *b)
{
	swvt_rc_side_close(a);
	swvt_rc_side_close(b);
}

struct ibv_wc swvt_rc_wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	uint64_t until = swvt_now_ms() + SWVT_RC_LIMIT_NS / 1000000;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(swvt_now_ms() < until);
	CHECK_EQ(n, 1);
	return wc;
}

void swvt_rc_wr(const struct swvt_rc_side *s, struct ibv_send_wr *wr, struct ibv_sge *sge,
		enum ibv_wr_opcode op, uint32_t off, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	*sge = (struct ibv_sge){(uintptr_t)s->buf + off, len, s->mr->lkey};
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = off;
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->opcode = op;
	wr->send_flags = IBV_SEND_SIGNALED;
	wr->wr.rdma.remote_addr = raddr;
	wr->wr.rdma.rkey = rkey;
}

void swvt_rc_post(const struct swvt_rc_side *s, enum ibv_wr_opcode op, uint32_t off, uint32_t len,
		  uint64_t raddr, uint32_t rkey, uint32_t imm)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	swvt_rc_wr(s, &wr, &sge, op, off, len, raddr, rkey);
	wr.imm_data = htonl(imm);
	CHECK_OK(ibv_post_send(s->qp, &wr, &bad));
}

void swvt_rc_post_bad(struct swvt_rc_side *a, const struct swvt_rc_side *b, enum ibv_wr_opcode op,
		      int how, enum ibv_wc_status want)
{
	uint64_t raddr = (uintptr_t)b->buf + 100;
	uint32_t rkey = b->mr->rkey;
	if (how == 1)
		rkey ^= 0x80; /* not a key of b */
	if (how == 2)
		raddr = (uintptr_t)b->buf + b->len - 32; /* runs past the MR's end */
	swvt_rc_post(a, op, 0, 64, raddr, rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a->cq).status, want);
}

void swvt_rc_warm(struct swvt_rc_side *a, struct swvt_rc_side *b)
{
	struct ibv_recv_wr rw = {.wr_id = 1}, *rbad;
	CHECK_OK(ibv_post_recv(b->qp, &rw, &rbad));
	struct ibv_send_wr wr = {.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
	CHECK_OK(ibv_post_send(a->qp, &wr, &bad));
	CHECK_EQ(swvt_rc_wait_wc(a->cq).status, IBV_WC_SUCCESS);
	CHECK_EQ(swvt_rc_wait_wc(b->cq).status, IBV_WC_SUCCESS);
}

struct stream {
	struct swvt_rc_side *a;
	enum ibv_wr_opcode op;
	uint64_t raddr;
	uint32_t rkey, len;
	_Atomic uint64_t done;
	_Atomic bool bad;
	enum ibv_wc_status last; /* read after the join */
};

static void *stream(void *arg)
{
	struct stream *st = arg;
	uint8_t *buf = st->a->buf;
	bool read = st->op == IBV_WR_RDMA_READ;
	if (!read)
		memset(buf, 0x11, st->len);
	for (;;) {
		if (read)
			memset(buf, 0, st->len);
		swvt_rc_post(st->a, st->op, 0, st->len, st->raddr, st->rkey, 0);
		struct ibv_wc wc = swvt_rc_wait_wc(st->a->cq);
		st->last = wc.status;
		if (wc.status != IBV_WC_SUCCESS)
			return NULL;
		for (uint32_t i = 0; read && i < st->len; i++)
			if (buf[i] != 0x11)
				atomic_store(&st->bad, true);
		atomic_fetch_add(&st->done, 1);
	}
}

struct swvt_rc_stream_end swvt_rc_dereg_under_stream(struct swvt_rc_side *a, struct swvt_rc_side *b,
						     enum ibv_wr_opcode op, uint64_t n)
{
	return swvt_rc_dereg_under_stream_len(a, b, op, n, 256);
}

struct swvt_rc_stream_end swvt_rc_dereg_under_stream_len(struct swvt_rc_side *a,
							 struct swvt_rc_side *b,
							 enum ibv_wr_opcode op, uint64_t n,
							 uint32_t len)
{
	struct stream st = {
	    .a = a, .op = op, .raddr = (uintptr_t)b->buf + 4096, .rkey = b->mr->rkey, .len = len};
	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, stream, &st));
	uint64_t until = swvt_now_ms() + SWVT_RC_LIMIT_NS / 1000000;
	while (atomic_load(&st.done) < n)
		CHECK(swvt_now_ms() < until);
	CHECK_OK(ibv_dereg_mr(b->mr));
	b->mr = NULL;
	memset(b->buf, 0xee, b->len);
	CHECK_OK(pthread_join(t, NULL));
	return (struct swvt_rc_stream_end){.last = st.last, .bad = atomic_load(&st.bad)};
}

void swvt_rc_fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed);
}
