/*
 * Memory windows between two processes. The target's MR has no remote rights at all
 * (LOCAL_WRITE | MW_BIND), so every remote access below goes through a window:
 *  - type 2 bound by IBV_WR_BIND_MW: the rkey keeps its upper 24 bits and takes the
 *    low 8 of the WR (ibv_inc_rkey); WRITE, READ and FETCH_ADD through it land in the
 *    window, byte for byte; LOCAL_INV, then the old rkey -> IBV_WC_REM_ACCESS_ERR;
 *    counters exact on both sides (BIND_MW and LOCAL_INV count as SEND)
 *  - remote invalidation: a 3-packet SEND_WITH_INV (IETH on its LAST) -> receive with
 *    IBV_WC_WITH_INV and the rkey, then the window refuses; SEND_WITH_INV of an MR's
 *    rkey -> REM_INV_REQ_ERR
 *  - zero-based window: offsets from the window's start; past its end refused
 *  - bounds and rights of the window (not of the MR): REM_ACCESS_ERR, nothing written
 *  - type 1: only ibv_bind_mw (a WR of the application is EINVAL, zero-based EINVAL,
 *    ibv_bind_mw of a type 2 window EINVAL); rebinding changes the key and the old one
 *    refuses; LOCAL_INV of a type 1 window -> IBV_WC_LOC_QP_OP_ERR
 *  - UC: a type 2 window bound on a UC QP takes a WRITE (verified when the SEND behind
 *    it arrives); a WRITE past its end is dropped, nothing lands
 *  - type 2 rules: a bound window cannot be bound again (IBV_WC_MW_BIND_ERR); the MR
 *    cannot be deregistered while a window is bound to it (EINVAL); deallocating a
 *    bound window makes its rkey refuse
 */
#include <unistd.h>

#include "harness.h"
#include "test_cntr_util.h"

#define TMO	10000
#define WIN_OFF 4096u /* the window starts here in the target's buffer */
#define WIN_LEN 4096u

enum mw_case {
	C_T2,
	C_REMOTE_INV,
	C_BAD_INV,
	C_ZB,
	C_OOB,
	C_RIGHTS,
	C_T1,
	C_T1_INV,
	C_T2_RULES,
	C_DEALLOC,
	C_UC,
	C_N
};

static const char *const case_name[C_N] = {
    "type 2", "remote invalidation",	"bad invalidation", "zero-based",    "bounds", "rights",
    "type 1", "type 1 not invalidated", "type 2 rules",	    "dealloc bound", "UC"};

/* The cases that happen at the target alone. */
static bool local_only(enum mw_case c)
{
	return c == C_T2_RULES || c == C_T1_INV;
}

static void query_state(struct swvt *t, enum ibv_qp_state want)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK_OK(ibv_query_qp(t->qp, &a, IBV_QP_STATE, &ia));
	CHECK_EQ(a.qp_state, want);
}

/* One RDMA op from the initiator's buffer at loff to (rkey, raddr); its status. */
static enum ibv_wc_status rdma(struct swvt *t, enum ibv_wr_opcode op, uint32_t rkey, uint64_t raddr,
			       uint64_t loff, uint32_t len, uint64_t add, struct ibv_wc *out)
{
	struct ibv_sge sge = {(uintptr_t)t->buf + loff, len, t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = op,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = add;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	struct ibv_wc wc;
	swvt_poll_n(t->scq, &wc, 1, TMO);
	if (out)
		*out = wc;
	return wc.status;
}

/* A type 2 bind WR on the target's QP over [WIN_OFF, +len) with 'access'. */
static void bind2(struct swvt *t, struct ibv_mw *mw, uint64_t off, uint64_t len, unsigned access,
		  bool signaled)
{
	struct ibv_send_wr wr = {.wr_id = 77,
				 .opcode = IBV_WR_BIND_MW,
				 .send_flags = signaled ? IBV_SEND_SIGNALED : 0},
			   *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info.mr = t->mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)t->buf + off;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = access;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
}

static void local_inv(struct swvt *t, uint32_t rkey, bool signaled)
{
	struct ibv_send_wr wr = {.wr_id = 88,
				 .opcode = IBV_WR_LOCAL_INV,
				 .send_flags = signaled ? IBV_SEND_SIGNALED : 0},
			   *bad;
	wr.invalidate_rkey = rkey;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
}

static struct ibv_wc expect_send_wc(struct swvt *t, enum ibv_wc_opcode op, enum ibv_wc_status st)
{
	struct ibv_wc wc;
	swvt_poll_n(t->scq, &wc, 1, TMO);
	CHECK_WC(wc, st);
	if (st == IBV_WC_SUCCESS)
		CHECK_EQ(wc.opcode, op);
	return wc;
}

static const unsigned RW = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

/* ---------------------------------------------------------------- initiator */

static void init_side(struct swvt *t, void *arg)
{
	enum mw_case c = *(enum mw_case *)arg;
	struct cntr_side cs;
	struct ibv_wc wc;

	if (c == C_T2) {
		cntr_attach_all(t, &cs, IBV_COMP_CNTR_TYPE_WRS);
		swvt_connect(t);
	}
	if (local_only(c))
		return;
	uint32_t rkey = (uint32_t)swvt_recv_u64(t);
	uint64_t win = t->remote.addr + WIN_OFF;

	switch (c) {
	case C_T2: {
		swvt_fill(t->buf, 3000, 7);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, win + 100, 0, 3000, 0, NULL),
			 IBV_WC_SUCCESS);
		memset(t->buf + 8192, 0, 3000);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_READ, rkey, win + 100, 8192, 3000, 0, NULL),
			 IBV_WC_SUCCESS);
		CHECK_EQ(swvt_verify(t->buf + 8192, 3000, 7), (size_t)-1);
		CHECK_EQ(rdma(t, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, win, 16384, 8, 5, NULL),
			 IBV_WC_SUCCESS);
		uint64_t orig;
		memcpy(&orig, t->buf + 16384, 8);
		CHECK_EQ(orig, 0x1000);
		swvt_send_u64(t, 1); /* done: the target checks and invalidates */
		CHECK_EQ(swvt_recv_u64(t), 2);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, win, 0, 16, 0, &wc),
			 IBV_WC_REM_ACCESS_ERR);
		query_state(t, IBV_QPS_ERR);
		cs.exp[K_WR] = 1, cs.exp_err[K_WR] = 1, cs.exp[K_RD] = 1, cs.exp[K_AT] = 1;
		cntr_check_side(&cs, "initiator", TMO);
		swvt_send_u64(t, 3);
		break;
	}
	case C_REMOTE_INV:
	case C_BAD_INV: {
		struct ibv_sge sge = {(uintptr_t)t->buf, 3000, t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 9,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_SEND_WITH_INV,
					 .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		swvt_fill(t->buf, 3000, 3);
		wr.invalidate_rkey = c == C_BAD_INV ? t->remote.rkey : rkey;
		CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
		swvt_poll_n(t->scq, &wc, 1, TMO);
		/* acknowledged: a failed invalidation is reported at the responder only */
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_SEND);
		CHECK_EQ(swvt_recv_u64(t), 1);
		if (c == C_REMOTE_INV)
			CHECK_EQ(rdma(t, IBV_WR_RDMA_READ, rkey, win, 0, 64, 0, NULL),
				 IBV_WC_REM_ACCESS_ERR);
		break;
	}
	case C_ZB:
		/* addresses are offsets into the window */
		swvt_fill(t->buf, 32, 11);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, 16, 0, 32, 0, NULL), IBV_WC_SUCCESS);
		memset(t->buf + 8192, 0, 64);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_READ, rkey, 16, 8192, 32, 0, NULL), IBV_WC_SUCCESS);
		CHECK_EQ(swvt_verify(t->buf + 8192, 32, 11), (size_t)-1);
		swvt_send_u64(t, 1);
		CHECK_EQ(swvt_recv_u64(t), 2);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, WIN_LEN - 8, 0, 16, 0, NULL),
			 IBV_WC_REM_ACCESS_ERR);
		break;
	case C_OOB:
		/* 8 bytes inside, 8 beyond the window (still inside the MR) */
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, win + WIN_LEN - 8, 0, 16, 0, NULL),
			 IBV_WC_REM_ACCESS_ERR);
		break;
	case C_RIGHTS:
		CHECK_EQ(rdma(t, IBV_WR_RDMA_READ, rkey, win, 8192, 64, 0, NULL), IBV_WC_SUCCESS);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, win, 0, 16, 0, NULL),
			 IBV_WC_REM_ACCESS_ERR);
		break;
	case C_T1: {
		swvt_fill(t->buf, 64, 21);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, win, 0, 64, 0, NULL), IBV_WC_SUCCESS);
		swvt_send_u64(t, 1);
		uint32_t rkey2 = (uint32_t)swvt_recv_u64(t);
		CHECK_EQ(rkey2, ibv_inc_rkey(rkey));
		swvt_fill(t->buf, 64, 22);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey2, win + WIN_LEN, 0, 64, 0, NULL),
			 IBV_WC_SUCCESS);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, win, 0, 64, 0, NULL),
			 IBV_WC_REM_ACCESS_ERR);
		swvt_send_u64(t, 2);
		break;
	}
	case C_DEALLOC:
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, win, 0, 64, 0, NULL), IBV_WC_SUCCESS);
		swvt_send_u64(t, 1);
		CHECK_EQ(swvt_recv_u64(t), 2);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, win, 0, 64, 0, NULL),
			 IBV_WC_REM_ACCESS_ERR);
		break;
	case C_UC:
		/* UC completes at transmission; the SEND behind each WRITE tells the target */
		swvt_fill(t->buf, 2000, 31);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, win + 8, 0, 2000, 0, NULL),
			 IBV_WC_SUCCESS);
		swvt_post_send(t, 40, IBV_WR_SEND, 0, 8, 0, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(swvt_recv_u64(t), 1);
		memset(t->buf, 0x42, 64);
		CHECK_EQ(rdma(t, IBV_WR_RDMA_WRITE, rkey, win + WIN_LEN - 8, 0, 64, 0, NULL),
			 IBV_WC_SUCCESS); /* sent; the target drops it */
		swvt_post_send(t, 41, IBV_WR_SEND, 0, 8, 0, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		break;
	default:
		break;
	}
	swvt_send_u64(t, 99); /* every status seen: the target may look at its memory */
}

/* ---------------------------------------------------------------- target */

static bool untouched(const uint8_t *p, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return false;
	return true;
}

static void target_side(struct swvt *t, void *arg)
{
	enum mw_case c = *(enum mw_case *)arg;
	struct cntr_side cs;
	struct ibv_wc wc;
	struct ibv_mw *mw = NULL;

	if (c == C_T2) {
		cntr_attach_all(t, &cs, IBV_COMP_CNTR_TYPE_WRS);
		swvt_connect(t);
	}
	memset(t->buf, 0xee, t->opts.buf_size);
	uint64_t v = 0x1000;
	memcpy(t->buf + WIN_OFF, &v, 8);

	if (c == C_T1) {
		mw = ibv_alloc_mw(t->pd, IBV_MW_TYPE_1);
		CHECK_PTR(mw);
		CHECK_EQ(mw->type, IBV_MW_TYPE_1);
		struct ibv_mw_bind b = {.wr_id = 5, .send_flags = IBV_SEND_SIGNALED};
		b.bind_info = (struct ibv_mw_bind_info){t->mr, (uintptr_t)t->buf + WIN_OFF, WIN_LEN,
							RW | IBV_ACCESS_ZERO_BASED};
		/* o10-36.2.2: never zero-based */
		CHECK_EQ(ibv_bind_mw(t->qp, mw, &b), EINVAL);
		/* a type 1 window is not bound by a WR of the application */
		struct ibv_send_wr wr = {.opcode = IBV_WR_BIND_MW}, *bad;
		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
		wr.bind_mw.bind_info = b.bind_info;
		wr.bind_mw.bind_info.mw_access_flags = RW;
		CHECK_EQ(ibv_post_send(t->qp, &wr, &bad), EINVAL);
		/* nor is a type 2 window bound by ibv_bind_mw */
		struct ibv_mw *mw2 = ibv_alloc_mw(t->pd, IBV_MW_TYPE_2);
		CHECK_PTR(mw2);
		b.bind_info.mw_access_flags = RW;
		CHECK_EQ(ibv_bind_mw(t->qp, mw2, &b), EINVAL);
		CHECK_OK(ibv_dealloc_mw(mw2));
		/* the bind, and the key it gives */
		uint32_t old = mw->rkey;
		CHECK_OK(ibv_bind_mw(t->qp, mw, &b));
		CHECK_EQ(mw->rkey, ibv_inc_rkey(old));
		CHECK((mw->rkey & ~0xffu) == (old & ~0xffu) && mw->rkey != old);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_BIND_MW);
		CHECK_EQ(wc.wr_id, 5);
		swvt_send_u64(t, mw->rkey);
		CHECK_EQ(swvt_recv_u64(t), 1);
		CHECK_EQ(swvt_verify(t->buf + WIN_OFF, 64, 21), (size_t)-1);
		/* rebind elsewhere: a new key; the old one refuses */
		b.bind_info.addr = (uintptr_t)t->buf + WIN_OFF + WIN_LEN;
		CHECK_OK(ibv_bind_mw(t->qp, mw, &b));
		expect_send_wc(t, IBV_WC_BIND_MW, IBV_WC_SUCCESS);
		swvt_send_u64(t, mw->rkey);
		CHECK_EQ(swvt_recv_u64(t), 2);
		CHECK_EQ(swvt_verify(t->buf + WIN_OFF, 64, 21), (size_t)-1);
		CHECK_EQ(swvt_verify(t->buf + WIN_OFF + WIN_LEN, 64, 22), (size_t)-1);
		CHECK_OK(ibv_dealloc_mw(mw)); /* bound: deallocating unbinds */
		CHECK_EQ(swvt_recv_u64(t), 99);
		return;
	}

	if (c == C_T1_INV) {
		/* o10-37.2.26: a type 1 window cannot be invalidated */
		mw = ibv_alloc_mw(t->pd, IBV_MW_TYPE_1);
		CHECK_PTR(mw);
		struct ibv_mw_bind b = {.wr_id = 5};
		b.bind_info =
		    (struct ibv_mw_bind_info){t->mr, (uintptr_t)t->buf + WIN_OFF, WIN_LEN, RW};
		CHECK_OK(ibv_bind_mw(t->qp, mw, &b)); /* unsignaled: no CQE */
		local_inv(t, mw->rkey, false);
		wc = expect_send_wc(t, IBV_WC_LOCAL_INV, IBV_WC_LOC_QP_OP_ERR);
		CHECK_EQ(wc.wr_id, 88); /* the failed WR, not the bind before it */
		swvt_expect_empty(t->scq, 20);
		query_state(t, IBV_QPS_ERR);
		CHECK_EQ(ibv_dereg_mr(t->mr), EINVAL);
		CHECK_OK(ibv_dealloc_mw(mw));
		return;
	}

	mw = ibv_alloc_mw(t->pd, IBV_MW_TYPE_2);
	CHECK_PTR(mw);
	CHECK_EQ(mw->type, IBV_MW_TYPE_2);
	uint32_t k0 = mw->rkey;
	unsigned acc = RW | IBV_ACCESS_REMOTE_ATOMIC;
	if (c == C_ZB)
		acc = RW | IBV_ACCESS_ZERO_BASED;
	if (c == C_RIGHTS)
		acc = IBV_ACCESS_REMOTE_READ;
	if (c == C_UC) { /* before the initiator learns the key: UC drops unexpected SENDs */
		swvt_post_recv(t, 50, 32768, 64);
		swvt_post_recv(t, 51, 32768 + 64, 64);
	}
	bind2(t, mw, WIN_OFF, WIN_LEN, acc, true);
	expect_send_wc(t, IBV_WC_BIND_MW, IBV_WC_SUCCESS);
	CHECK_EQ(mw->rkey, ibv_inc_rkey(k0));
	/* IBA 10.6.7.2.6 as rxe: not while a window is bound to the MR */
	CHECK_EQ(ibv_dereg_mr(t->mr), EINVAL);
	if (c != C_T2_RULES)
		swvt_send_u64(t, mw->rkey);

	switch (c) {
	case C_T2:
		CHECK_EQ(swvt_recv_u64(t), 1);
		memcpy(&v, t->buf + WIN_OFF, 8);
		CHECK_EQ(v, 0x1005);
		CHECK_EQ(swvt_verify(t->buf + WIN_OFF + 100, 3000, 7), (size_t)-1);
		CHECK(untouched(t->buf + WIN_OFF + 8, 92, 0xee));
		CHECK(untouched(t->buf + WIN_OFF + 3100, t->opts.buf_size - WIN_OFF - 3100, 0xee));
		local_inv(t, mw->rkey, true);
		expect_send_wc(t, IBV_WC_LOCAL_INV, IBV_WC_SUCCESS);
		swvt_send_u64(t, 2);
		CHECK_EQ(swvt_recv_u64(t), 3);
		query_state(t, IBV_QPS_ERR); /* the refused WRITE */
		cs.exp[K_SEND] = 2;	     /* BIND_MW and LOCAL_INV */
		cs.exp[K_RWR] = 1, cs.exp_err[K_RWR] = 1, cs.exp[K_RRD] = 1, cs.exp[K_RAT] = 1;
		cntr_check_side(&cs, "target", TMO);
		CHECK(untouched(t->buf + WIN_OFF + 8, 16, 0xee));
		break;
	case C_REMOTE_INV:
	case C_BAD_INV:
		swvt_post_recv(t, 31, 8192, 4096);
		swvt_poll_n(t->rcq, &wc, 1, TMO);
		if (c == C_BAD_INV) {
			CHECK_WC(wc, IBV_WC_REM_INV_REQ_ERR);
		} else {
			CHECK_WC(wc, IBV_WC_SUCCESS);
			CHECK_EQ(wc.opcode, IBV_WC_RECV);
			CHECK(wc.wc_flags & IBV_WC_WITH_INV);
			CHECK_EQ(wc.invalidated_rkey, mw->rkey);
			CHECK_EQ(wc.byte_len, 3000);
			CHECK_EQ(swvt_verify(t->buf + 8192, 3000, 3), (size_t)-1);
			/* invalidated: it may be bound again */
		}
		swvt_send_u64(t, 1);
		break;
	case C_ZB:
		CHECK_EQ(swvt_recv_u64(t), 1);
		CHECK_EQ(swvt_verify(t->buf + WIN_OFF + 16, 32, 11), (size_t)-1);
		CHECK(untouched(t->buf + WIN_OFF + 48, WIN_LEN, 0xee));
		swvt_send_u64(t, 2);
		break;
	case C_T2_RULES:
		/* o10-37.2.30: bound and valid, so not bound again */
		bind2(t, mw, WIN_OFF, 64, RW, false);
		expect_send_wc(t, IBV_WC_BIND_MW, IBV_WC_MW_BIND_ERR);
		query_state(t, IBV_QPS_ERR);
		break;
	case C_DEALLOC:
		CHECK_EQ(swvt_recv_u64(t), 1);
		CHECK_OK(ibv_dealloc_mw(mw));
		mw = NULL;
		swvt_send_u64(t, 2);
		break;
	case C_UC:
		swvt_poll_n(t->rcq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(swvt_verify(t->buf + WIN_OFF + 8, 2000, 31), (size_t)-1);
		swvt_send_u64(t, 1);
		swvt_poll_n(t->rcq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.wr_id, 51);
		CHECK(untouched(t->buf + WIN_OFF + WIN_LEN - 8, 64, 0xee));
		break;
	default:
		break;
	}
	if (!local_only(c))
		CHECK_EQ(swvt_recv_u64(t), 99);
	if (c == C_OOB || c == C_RIGHTS)
		CHECK(untouched(t->buf + WIN_OFF + 8, WIN_LEN + 8, 0xee));
	if (mw)
		CHECK_OK(ibv_dealloc_mw(mw));
}

int main(void)
{
	struct swvt_opts o;

	for (enum mw_case c = 0; c < C_N; c++) {
		swvt_opts_default(&o);
		o.buf_size = 65536;
		/* the target's MR grants no remote access by itself */
		o.mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
		if (c == C_T2)
			o.stop_at = IBV_QPS_INIT; /* counters attach before RTR */
		if (c == C_UC)
			o.qp_type = IBV_QPT_UC;
		if (swvt_run(&o, init_side, target_side, &c)) {
			fprintf(stderr, "case %s failed\n", case_name[c]);
			return 1;
		}
		printf("%s: ok\n", case_name[c]);
	}
	return 0;
}
