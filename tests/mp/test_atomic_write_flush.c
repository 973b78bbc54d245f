/*
 * IBTA 1.5 operations between two processes, through the ibv_wr_* API:
 *  - ATOMIC_WRITE: one batch of a 64 KiB WRITE and an 8-byte ATOMIC_WRITE of a flag;
 *    the target, watching the flag in its memory, finds the whole WRITE placed the
 *    moment the flag appears (ordered after prior WRITEs); a FETCH_ADD then returns
 *    exactly the 8 bytes written (atomic with respect to other atomics); a misaligned
 *    one fails the batch (EINVAL); a bad rkey -> IBV_WC_REM_ACCESS_ERR
 *  - FLUSH: a WRITE then a FLUSH (global, range) completes with IBV_WC_FLUSH after the
 *    data is placed; persistent over the whole MR; an MR without the flush right ->
 *    IBV_WC_REM_ACCESS_ERR; a QP without the flush access flag at the target ->
 *    IBV_WC_REM_INV_REQ_ERR (rxe's check)
 *  - counters exact on both sides: ATOMIC_WRITE and FLUSH count as RDMA_WRITE at the
 *    requester and REMOTE_RDMA_WRITE at the responder
 */
#include <unistd.h>

#include "harness.h"
#include "test_cntr_util.h"

#define TMO	 10000
#define DATA_LEN (64u * 1024)
#define FLAG_OFF (128u * 1024)
#define MR2_OFF	 (192u * 1024)
#define OPS                                                                                        \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |                         \
	 IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_FLUSH)

enum tcase { C_AW, C_FLUSH, C_FLUSH_QP, C_N };
static const char *const case_name[C_N] = {"atomic write", "flush", "flush without QP right"};

static const uint64_t FLAG = 0x1122334455667788ull;

/* Replace the harness's QP (left in RESET) by an extended one with OPS; attach the
 * counters; connect. */
static void use_ex(struct swvt *t, struct cntr_side *cs)
{
	CHECK_OK(ibv_destroy_qp(t->qp));
	struct ibv_qp_init_attr_ex a = {
	    .send_cq = t->scq,
	    .recv_cq = t->rcq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 2, .max_recv_sge = 2},
	    .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
	    .pd = t->pd,
	    .send_ops_flags = OPS,
	};
	t->qp = ibv_create_qp_ex(t->ctx, &a);
	CHECK_PTR(t->qp);
	t->local.qpn = t->qp->qp_num;
	cntr_attach_all(t, cs, IBV_COMP_CNTR_TYPE_WRS);
	swvt_to_init(t);
	swvt_exchange(t);
	swvt_connect(t);
}

static struct ibv_wc poll1(struct swvt *t)
{
	struct ibv_wc wc;
	swvt_poll_n(t->scq, &wc, 1, TMO);
	return wc;
}

static void initiator(struct swvt *t, void *arg)
{
	enum tcase c = *(enum tcase *)arg;
	struct cntr_side cs;
	use_ex(t, &cs);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(t->qp);
	uint64_t base = t->remote.addr;
	uint32_t rk = t->remote.rkey;
	struct ibv_wc wc;

	swvt_fill(t->buf, DATA_LEN, c == C_AW ? 5 : 9);
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = 0; /* unsignaled: the next WR's completion covers it */
	ibv_wr_rdma_write(x, rk, base);
	ibv_wr_set_sge(x, t->mr->lkey, (uintptr_t)t->buf, DATA_LEN);
	x->wr_id = 2;
	x->wr_flags = IBV_SEND_SIGNALED;
	if (c == C_AW) {
		uint64_t flag = FLAG;
		ibv_wr_atomic_write(x, rk, base + FLAG_OFF, &flag);
		flag = 0; /* the value was taken at the call */
	} else {
		ibv_wr_flush(x, rk, base, DATA_LEN, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
	}
	CHECK_OK(ibv_wr_complete(x));
	wc = poll1(t);
	if (c == C_FLUSH_QP) {
		/* the target's QP lacks IBV_ACCESS_FLUSH_GLOBAL: an invalid request */
		CHECK_WC(wc, IBV_WC_REM_INV_REQ_ERR);
		cs.exp[K_WR] = 1, cs.exp_err[K_WR] = 1;
		cntr_check_side(&cs, "initiator", TMO);
		swvt_send_u64(t, 99);
		return;
	}
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 2);
	CHECK_EQ(wc.opcode, c == C_AW ? IBV_WC_ATOMIC_WRITE : IBV_WC_FLUSH);
	if (c == C_AW)
		CHECK_EQ(wc.byte_len, 8);
	swvt_send_u64(t, 1);
	CHECK_EQ(swvt_recv_u64(t), 2);

	if (c == C_AW) {
		/* the value an atomic finds is the one written, all 8 bytes */
		ibv_wr_start(x);
		x->wr_id = 3;
		ibv_wr_atomic_fetch_add(x, rk, base + FLAG_OFF, 1);
		ibv_wr_set_sge(x, t->mr->lkey, (uintptr_t)t->buf + FLAG_OFF, 8);
		CHECK_OK(ibv_wr_complete(x));
		wc = poll1(t);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		uint64_t orig;
		memcpy(&orig, t->buf + FLAG_OFF, 8);
		CHECK_EQ(orig, FLAG);
		/* misaligned: the batch fails, nothing is posted */
		uint64_t v = 1;
		ibv_wr_start(x);
		ibv_wr_atomic_write(x, rk, base + FLAG_OFF + 4, &v);
		CHECK_EQ(ibv_wr_complete(x), EINVAL);
		swvt_expect_empty(t->scq, 20);
		/* a bad rkey */
		ibv_wr_start(x);
		x->wr_id = 4;
		ibv_wr_atomic_write(x, rk ^ 0x01000000, base + FLAG_OFF, &v);
		CHECK_OK(ibv_wr_complete(x));
		wc = poll1(t);
		CHECK_WC(wc, IBV_WC_REM_ACCESS_ERR);
		cs.exp[K_WR] = 2, cs.exp_err[K_WR] = 1, cs.exp[K_AT] = 1;
	} else {
		/* persistent, over the whole MR (va and length are not looked at) */
		ibv_wr_start(x);
		x->wr_id = 3;
		ibv_wr_flush(x, rk, 0, 0, IBV_FLUSH_PERSISTENT, IBV_FLUSH_MR);
		CHECK_OK(ibv_wr_complete(x));
		wc = poll1(t);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_FLUSH);
		/* bad type: the batch fails */
		ibv_wr_start(x);
		ibv_wr_flush(x, rk, base, 8, 0, IBV_FLUSH_RANGE);
		CHECK_EQ(ibv_wr_complete(x), EINVAL);
		/* an MR registered without IBV_ACCESS_FLUSH_GLOBAL */
		uint32_t rk2 = (uint32_t)swvt_recv_u64(t);
		ibv_wr_start(x);
		x->wr_id = 4;
		ibv_wr_flush(x, rk2, base + MR2_OFF, 64, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
		CHECK_OK(ibv_wr_complete(x));
		wc = poll1(t);
		CHECK_WC(wc, IBV_WC_REM_ACCESS_ERR);
		cs.exp[K_WR] = 3, cs.exp_err[K_WR] = 1;
	}
	cntr_check_side(&cs, "initiator", TMO);
	swvt_send_u64(t, 99);
}

static void target(struct swvt *t, void *arg)
{
	enum tcase c = *(enum tcase *)arg;
	struct cntr_side cs;
	struct ibv_mr *mr2 = NULL;

	memset(t->buf, 0, t->opts.buf_size);
	use_ex(t, &cs);
	if (c == C_AW) {
		/* watch the flag: when it is there, so is every byte of the WRITE before it */
		const uint64_t *flag = (const uint64_t *)(t->buf + FLAG_OFF);
		uint64_t end = swvt_now_ms() + TMO;
		for (;;) {
			uint64_t v = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
			if (v == FLAG)
				break;
			CHECK_EQ(v, 0); /* never a torn value */
			CHECK(swvt_now_ms() < end);
		}
		CHECK_EQ(swvt_verify(t->buf, DATA_LEN, 5), (size_t)-1);
	}
	if (c == C_FLUSH_QP) {
		CHECK_EQ(swvt_recv_u64(t), 99);
		cs.exp[K_RWR] = 1, cs.exp_err[K_RWR] = 1;
		cntr_check_side(&cs, "target", TMO);
		return;
	}
	CHECK_EQ(swvt_recv_u64(t), 1);
	if (c == C_FLUSH)
		CHECK_EQ(swvt_verify(t->buf, DATA_LEN, 9), (size_t)-1); /* placed */
	swvt_send_u64(t, 2);
	if (c == C_FLUSH) {
		mr2 = ibv_reg_mr(t->pd, t->buf + MR2_OFF, 4096,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		CHECK_PTR(mr2);
		swvt_send_u64(t, mr2->rkey);
	}
	CHECK_EQ(swvt_recv_u64(t), 99);
	if (c == C_AW) {
		uint64_t v;
		memcpy(&v, t->buf + FLAG_OFF, 8);
		CHECK_EQ(v, FLAG + 1); /* the FETCH_ADD; the refused write left it */
		cs.exp[K_RWR] = 2, cs.exp_err[K_RWR] = 1, cs.exp[K_RAT] = 1;
	} else {
		cs.exp[K_RWR] = 3, cs.exp_err[K_RWR] = 1;
	}
	cntr_check_side(&cs, "target", TMO);
	if (mr2)
		CHECK_OK(ibv_dereg_mr(mr2));
}

int main(void)
{
	struct swvt_opts o;

	for (enum tcase c = 0; c < C_N; c++) {
		swvt_opts_default(&o);
		o.buf_size = 256 * 1024;
		o.stop_at = IBV_QPS_RESET; /* use_ex replaces the QP */
		o.mr_access |= IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT;
		if (c != C_FLUSH_QP)
			o.qp_access |= IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT;
		if (swvt_run(&o, initiator, target, &c)) {
			fprintf(stderr, "case %s failed\n", case_name[c]);
			return 1;
		}
		printf("%s: ok\n", case_name[c]);
	}
	return 0;
}
