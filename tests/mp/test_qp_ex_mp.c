/*
 * The ibv_wr_* API and extended CQs between two processes, over the real UDP path.
 *
 * RC: the parent posts one batch (a 64 KiB WRITE spanning many packets, unsignaled; a
 * SEND_WITH_IMM with inline data; a READ of what it just wrote; a FETCH_AND_ADD) and
 * checks its completions and results. The child polls its receive CQ, an extended CQ
 * with completion timestamps, through start/next/end_poll: the SEND arrives after the
 * WRITE's data (RC order), with its immediate, inline bytes, the parent's QPN and a
 * timestamp inside the window the child watched. Then a batch with an op swverbs
 * lacks fails as a whole: the child's memory stays untouched.
 *
 * UD: the parent sends three datagrams through wr_set_ud_addr (one inline, one with
 * an immediate) in one batch; the child reads them with the extended CQ's readers
 * (src_qp, byte_len incl. the 40-byte GRH area, wc_flags, imm).
 */
#include <arpa/inet.h>
#include <time.h>

#include "harness.h"

#define TMO        10000
#define WRITE_OFF  0
#define WRITE_LEN  (64u * 1024)
#define RECV_OFF   (512u * 1024)
#define ATOMIC_OFF (768u * 1024)
#define READ_OFF   (256u * 1024)
#define ALL_RC_OPS                                                                                 \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |          \
	 IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |                           \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Replace the harness's QP (created plain, left in RESET) by one created with send
 * ops, and its receive CQ by an extended CQ with timestamps; then connect as the
 * harness does. */
static struct ibv_cq_ex *use_ex(struct swvt *t, uint64_t ops)
{
	CHECK_OK(ibv_destroy_qp(t->qp));
	CHECK(t->rcq != t->scq);
	CHECK_OK(ibv_destroy_cq(t->rcq));
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 256,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(t->ctx, &ca);
	CHECK_PTR(cqx);
	t->rcq = ibv_cq_ex_to_cq(cqx);
	struct ibv_qp_init_attr_ex a = {
		.send_cq = t->scq, .recv_cq = t->rcq, .qp_type = t->opts.qp_type,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 2,
			.max_recv_sge = 2, .max_inline_data = 128},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = t->pd, .send_ops_flags = ops,
	};
	t->qp = ibv_create_qp_ex(t->ctx, &a);
	CHECK_PTR(t->qp);
	CHECK_PTR(ibv_qp_to_qp_ex(t->qp));
	t->local.qpn = t->qp->qp_num;
	swvt_to_init(t);
	swvt_exchange(t);
	swvt_connect(t);
	return cqx;
}

/* Next completion from an extended CQ (a whole start/end session per call). */
static void poll_ex(struct ibv_cq_ex *c, uint64_t *wr_id, enum ibv_wc_status *st)
{
	struct ibv_poll_cq_attr pa = {0};
	uint64_t end = mono_ns() + (uint64_t)TMO * 1000000;
	int rc;
	while ((rc = ibv_start_poll(c, &pa)) == ENOENT)
		CHECK(mono_ns() < end);
	CHECK_OK(rc);
	*wr_id = c->wr_id;
	*st = c->status;
}

/* ---- RC ---- */

static void rc_parent(struct swvt *t, void *arg)
{
	use_ex(t, ALL_RC_OPS);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(t->qp);
	struct ibv_wc wc[4];

	swvt_fill(t->buf + WRITE_OFF, WRITE_LEN, 7);
	uint8_t msg[100];
	swvt_fill(msg, sizeof(msg), 8);
	swvt_barrier(t); /* the child's receive is posted */

	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = 0; /* unsignaled */
	ibv_wr_rdma_write(x, t->remote.rkey, t->remote.addr + WRITE_OFF);
	ibv_wr_set_sge(x, t->mr->lkey, (uintptr_t)t->buf + WRITE_OFF, WRITE_LEN);
	x->wr_id = 2;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(x, htonl(0x5eed));
	ibv_wr_set_inline_data(x, msg, sizeof(msg));
	memset(msg, 0, sizeof(msg)); /* copied by the setter */
	x->wr_id = 3;
	ibv_wr_rdma_read(x, t->remote.rkey, t->remote.addr + WRITE_OFF);
	ibv_wr_set_sge(x, t->mr->lkey, (uintptr_t)t->buf + READ_OFF, WRITE_LEN);
	x->wr_id = 4;
	ibv_wr_atomic_fetch_add(x, t->remote.rkey, t->remote.addr + ATOMIC_OFF, 3);
	ibv_wr_set_sge(x, t->mr->lkey, (uintptr_t)t->buf + ATOMIC_OFF, 8);
	CHECK_OK(ibv_wr_complete(x));
	swvt_poll_n(t->scq, wc, 3, TMO);
	for (int i = 0; i < 3; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, (uint64_t)i + 2);
	}
	CHECK_EQ(wc[1].byte_len, WRITE_LEN);
	CHECK(memcmp(t->buf + READ_OFF, t->buf + WRITE_OFF, WRITE_LEN) == 0);
	CHECK_EQ(*(uint64_t *)(t->buf + ATOMIC_OFF), 1000);
	swvt_barrier(t);

	/* A batch with an op swverbs lacks (TSO, a raw-packet op) posts nothing, not even
	 * the good WRITE. */
	ibv_wr_start(x);
	x->wr_id = 5;
	ibv_wr_rdma_write(x, t->remote.rkey, t->remote.addr + WRITE_OFF);
	ibv_wr_set_sge(x, t->mr->lkey, (uintptr_t)t->buf + READ_OFF + 1, 4096);
	ibv_wr_send_tso(x, t->buf, 14, 1000);
	CHECK_EQ(ibv_wr_complete(x), EOPNOTSUPP);
	swvt_expect_empty(t->scq, 100);
	swvt_barrier(t); /* the child checks its memory */
}

static void rc_child(struct swvt *t, void *arg)
{
	struct ibv_cq_ex *c = use_ex(t, IBV_QP_EX_WITH_SEND);
	*(uint64_t *)(t->buf + ATOMIC_OFF) = 1000;
	swvt_post_recv(t, 77, RECV_OFF, 4096);
	uint64_t t0 = mono_ns();
	swvt_barrier(t);

	uint64_t wr_id;
	enum ibv_wc_status st;
	poll_ex(c, &wr_id, &st);
	uint64_t t1 = mono_ns();
	CHECK_EQ(st, IBV_WC_SUCCESS);
	CHECK_EQ(wr_id, 77);
	CHECK_EQ(ibv_wc_read_opcode(c), IBV_WC_RECV);
	CHECK_EQ(ibv_wc_read_byte_len(c), 100);
	CHECK(ibv_wc_read_wc_flags(c) & IBV_WC_WITH_IMM);
	CHECK_EQ(ntohl(ibv_wc_read_imm_data(c)), 0x5eed);
	CHECK_EQ(ibv_wc_read_qp_num(c), t->qp->qp_num);
	CHECK_EQ(ibv_wc_read_src_qp(c), t->remote.qpn);
	uint64_t ts = ibv_wc_read_completion_ts(c);
	CHECK(ts >= t0 && ts <= t1);
	CHECK_EQ(ibv_next_poll(c), ENOENT);
	ibv_end_poll(c);
	/* RC order: the WRITE before the SEND is all there. */
	CHECK_EQ(swvt_verify(t->buf + WRITE_OFF, WRITE_LEN, 7), (size_t)-1);
	CHECK_EQ(swvt_verify(t->buf + RECV_OFF, 100, 8), (size_t)-1);
	swvt_barrier(t);
	swvt_barrier(t); /* the parent's refused batch */
	CHECK_EQ(swvt_verify(t->buf + WRITE_OFF, WRITE_LEN, 7), (size_t)-1);
	CHECK_EQ(*(uint64_t *)(t->buf + ATOMIC_OFF), 1003);
	printf("rc: one batch of WRITE/SEND_IMM inline/READ/FAA; cq_ex receive with "
	       "timestamp; refused batch left no trace\n");
}

/* ---- UD ---- */

static void ud_parent(struct swvt *t, void *arg)
{
	use_ex(t, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(t->qp);
	struct ibv_wc wc[3];
	swvt_fill(t->buf, 3000, 21);
	swvt_barrier(t);
	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED;
	x->wr_id = 10;
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, t->ah, t->remote.qpn, t->remote.qkey);
	ibv_wr_set_sge(x, t->mr->lkey, (uintptr_t)t->buf, 1000);
	x->wr_id = 11;
	ibv_wr_send_imm(x, htonl(11));
	ibv_wr_set_ud_addr(x, t->ah, t->remote.qpn, t->remote.qkey);
	ibv_wr_set_inline_data(x, t->buf + 1000, 64);
	x->wr_id = 12;
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, t->ah, t->remote.qpn, t->remote.qkey);
	ibv_wr_set_sge(x, t->mr->lkey, (uintptr_t)t->buf + 2000, 0);
	CHECK_OK(ibv_wr_complete(x));
	swvt_poll_n(t->scq, wc, 3, TMO);
	for (int i = 0; i < 3; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, 10 + (uint64_t)i);
	}
	/* A send without an address is refused as ibv_post_send refuses it. */
	ibv_wr_start(x);
	ibv_wr_send(x);
	CHECK_EQ(ibv_wr_complete(x), EINVAL);
	swvt_barrier(t);
}

static void ud_child(struct swvt *t, void *arg)
{
	struct ibv_cq_ex *c = use_ex(t, IBV_QP_EX_WITH_SEND);
	for (int i = 0; i < 3; i++)
		swvt_post_recv(t, 20 + (uint64_t)i, RECV_OFF + (uint64_t)i * 8192, 8192);
	swvt_barrier(t);
	uint32_t want_len[3] = {1000, 64, 0};
	for (int i = 0; i < 3; i++) {
		uint64_t wr_id;
		enum ibv_wc_status st;
		poll_ex(c, &wr_id, &st);
		CHECK_EQ(st, IBV_WC_SUCCESS);
		CHECK_EQ(wr_id, 20 + (uint64_t)i);
		CHECK_EQ(ibv_wc_read_opcode(c), IBV_WC_RECV);
		CHECK_EQ(ibv_wc_read_src_qp(c), t->remote.qpn);
		CHECK_EQ(ibv_wc_read_qp_num(c), t->qp->qp_num);
		unsigned flags = ibv_wc_read_wc_flags(c);
		/* UD: the first 40 bytes of a receive are the GRH area, counted always. */
		CHECK_EQ(ibv_wc_read_byte_len(c), want_len[i] + 40);
		if (i == 1) {
			CHECK(flags & IBV_WC_WITH_IMM);
			CHECK_EQ(ntohl(ibv_wc_read_imm_data(c)), 11);
		}
		ibv_end_poll(c);
	}
	uint8_t want[1064];
	swvt_fill(want, sizeof(want), 21);
	CHECK(memcmp(t->buf + RECV_OFF + 40, want, 1000) == 0);
	CHECK(memcmp(t->buf + RECV_OFF + 8192 + 40, want + 1000, 64) == 0);
	swvt_barrier(t);
	printf("ud: batch of 3 datagrams through wr_set_ud_addr (sge, inline+imm, empty)\n");
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.stop_at = IBV_QPS_RESET; /* use_ex() replaces the QP and connects */
	o.shared_cq = false;
	if (swvt_run(&o, rc_parent, rc_child, NULL))
		return 1;
	swvt_opts_default(&o);
	o.stop_at = IBV_QPS_RESET;
	o.shared_cq = false;
	o.qp_type = IBV_QPT_UD;
	if (swvt_run(&o, ud_parent, ud_child, NULL))
		return 1;
	printf("ok\n");
	return 0;
}
