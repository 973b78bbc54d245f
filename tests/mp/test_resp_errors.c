/*
 * Responder error paths over the real UDP path, each scenario on a fresh QP pair
 * (parent = requester, child = responder):
 *  - remote access errors (range past the MR, wrong R_Key, MR without the right) give
 *    IBV_WC_REM_ACCESS_ERR, leave the responder's memory untouched (guard bytes),
 *    move the responder QP to ERR and add to its REMOTE_* counter's error count;
 *  - a QP without REMOTE_WRITE / REMOTE_READ / REMOTE_ATOMIC gives IBV_WC_REM_INV_REQ_ERR;
 *  - a receive buffer too small: IBV_WC_REM_INV_REQ_ERR on both sides (rxe behaviour);
 *  - no receive posted: RNR NAKs until the receive is posted late, then success;
 *  - after a first request was acknowledged (so that on the intra-host link a one-packet
 *    READ is read directly by the requester, src/transport/requester.c): a wrong R_Key,
 *    a range past the MR's end and a QP without REMOTE_READ keep the statuses above,
 *    and READs that succeed are each counted once by the target's REMOTE_RDMA_READ
 *    counter (which, for a READ read directly, moves when the target's responder takes
 *    the request: the target waits for it).
 */
#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>
#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define GUARD_OFF  (512u << 10) /* 64 KiB guarded region on the responder */
#define GUARD_LEN  (64u << 10)
#define GUARD_BYTE 0xa5

enum scenario {
	S_WRITE_PAST_END,
	S_READ_BAD_RKEY,
	S_ATOMIC_NO_MR_RIGHT,
	S_WRITE_NO_QP_RIGHT,
	S_READ_NO_QP_RIGHT,
	S_ATOMIC_NO_QP_RIGHT,
	S_RECV_TOO_SMALL,
	S_RNR_SEND,
	S_RNR_WRITE_IMM,
	S_WARM_READ_BAD_RKEY,
	S_WARM_READ_PAST_END,
	S_WARM_READ_NO_QP_RIGHT,
	S_WARM_READS,
	S_COUNT
};

struct side_info {
	uint64_t addr;
	uint32_t rkey;
};

static struct ibv_comp_cntr *cntr_on(struct swvt *t, uint32_t op)
{
	struct ibv_comp_cntr_init_attr a = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(t->ctx, &a);
	CHECK_PTR(c);
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = op};
	CHECK_OK(ibv_qp_attach_comp_cntr(t->qp, c, &at));
	return c;
}

static void post_wr(struct swvt *t, enum ibv_wr_opcode op, uint64_t laddr, uint32_t len,
		    uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = laddr, .length = len, .lkey = t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 42, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	if (op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_IMM)
		wr.imm_data = htobe32(0x1234);
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
}

static enum ibv_wc_status one_completion(struct ibv_cq *cq, uint64_t wr_id)
{
	struct ibv_wc wc;
	swvt_poll_n(cq, &wc, 1, 10000);
	CHECK_EQ(wc.wr_id, wr_id);
	return wc.status;
}

#define WARM_OFF      (256u << 10) /* the warm-up WRITE's and the good READs' bytes */
#define WARM_READS    100
#define WARM_READ_LEN 64

static void requester(struct swvt *t, void *arg)
{
	enum scenario s = *(enum scenario *)arg;
	struct side_info ro;
	uint64_t guard = t->remote.addr + GUARD_OFF;
	uint64_t l = (uintptr_t)t->buf;

	swvt_connect(t);
	swvt_recv(t, &ro, sizeof(ro)); /* the responder's read-only MR */
	if (s >= S_WARM_READ_BAD_RKEY) {
		/* acknowledged: the READs after it may be read directly */
		post_wr(t, IBV_WR_RDMA_WRITE, l, 64, t->remote.addr + WARM_OFF, t->remote.rkey);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_SUCCESS);
	}
	switch (s) {
	case S_WRITE_PAST_END:
		/* starts inside the MR, ends 32 bytes past it */
		post_wr(t, IBV_WR_RDMA_WRITE, l, 64, t->remote.addr + t->remote.size - 32,
			t->remote.rkey);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_REM_ACCESS_ERR);
		break;
	case S_READ_BAD_RKEY:
		post_wr(t, IBV_WR_RDMA_READ, l, 64, guard, t->remote.rkey ^ 0x10000);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_REM_ACCESS_ERR);
		break;
	case S_ATOMIC_NO_MR_RIGHT:
		post_wr(t, IBV_WR_ATOMIC_FETCH_AND_ADD, l, 8, ro.addr, ro.rkey);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_REM_ACCESS_ERR);
		break;
	case S_WRITE_NO_QP_RIGHT:
		post_wr(t, IBV_WR_RDMA_WRITE, l, 64, guard, t->remote.rkey);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_REM_INV_REQ_ERR);
		break;
	case S_READ_NO_QP_RIGHT:
		post_wr(t, IBV_WR_RDMA_READ, l, 64, guard, t->remote.rkey);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_REM_INV_REQ_ERR);
		break;
	case S_ATOMIC_NO_QP_RIGHT:
		post_wr(t, IBV_WR_ATOMIC_FETCH_AND_ADD, l, 8, guard, t->remote.rkey);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_REM_INV_REQ_ERR);
		break;
	case S_RECV_TOO_SMALL:
		post_wr(t, IBV_WR_SEND, l, 100, 0, 0);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_REM_INV_REQ_ERR);
		break;
	case S_RNR_SEND:
		swvt_fill(t->buf, 3000, 7);
		post_wr(t, IBV_WR_SEND, l, 3000, 0, 0);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_SUCCESS);
		break;
	case S_RNR_WRITE_IMM:
		swvt_fill(t->buf, 3000, 8);
		post_wr(t, IBV_WR_RDMA_WRITE_WITH_IMM, l, 3000, t->remote.addr + 8192, t->remote.rkey);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_SUCCESS);
		break;
	case S_WARM_READ_BAD_RKEY:
		post_wr(t, IBV_WR_RDMA_READ, l, 64, guard, t->remote.rkey ^ 0x10000);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_REM_ACCESS_ERR);
		break;
	case S_WARM_READ_PAST_END:
		post_wr(t, IBV_WR_RDMA_READ, l, 64, t->remote.addr + t->remote.size - 32,
			t->remote.rkey);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_REM_ACCESS_ERR);
		break;
	case S_WARM_READ_NO_QP_RIGHT:
		post_wr(t, IBV_WR_RDMA_READ, l, 64, guard, t->remote.rkey);
		CHECK_EQ(one_completion(t->scq, 42), IBV_WC_REM_INV_REQ_ERR);
		break;
	case S_WARM_READS:
		/* one at a time, each from its own place in the responder's pattern */
		for (uint32_t i = 0; i < WARM_READS; i++) {
			memset(t->buf, 0, WARM_READ_LEN);
			post_wr(t, IBV_WR_RDMA_READ, l, WARM_READ_LEN,
				t->remote.addr + WARM_OFF + 4096 + i * 100, t->remote.rkey);
			CHECK_EQ(one_completion(t->scq, 42), IBV_WC_SUCCESS);
			CHECK_EQ(swvt_verify(t->buf, WARM_READ_LEN, 9 + i), (size_t)-1);
		}
		break;
	default:
		CHECK(0);
	}
	swvt_send_u64(t, 1);
	CHECK_EQ(swvt_recv_u64(t), 1);
}

static void expect_guard_intact(struct swvt *t)
{
	for (uint32_t i = 0; i < GUARD_LEN; i++)
		if (t->buf[GUARD_OFF + i] != GUARD_BYTE) {
			fprintf(stderr, "guarded byte %u changed to %#x\n", i, t->buf[GUARD_OFF + i]);
			exit(1);
		}
	/* and the last bytes of the MR, which the past-the-end WRITE aimed at */
	for (size_t i = t->opts.buf_size - 64; i < t->opts.buf_size; i++)
		CHECK_EQ(t->buf[i], GUARD_BYTE);
}

static void expect_qp_err(struct swvt *t)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	uint64_t deadline = swvt_now_ms() + 2000;
	do {
		CHECK_OK(ibv_query_qp(t->qp, &a, IBV_QP_STATE, &ia));
		if (a.qp_state == IBV_QPS_ERR)
			return;
		usleep(1000);
	} while (swvt_now_ms() < deadline);
	CHECK_EQ(a.qp_state, IBV_QPS_ERR);
}

static void expect_cntr(struct ibv_comp_cntr *c, uint64_t comp, uint64_t err)
{
	uint64_t v, e;
	CHECK_OK(ibv_read_comp_cntr(c, &v));
	CHECK_OK(ibv_read_err_comp_cntr(c, &e));
	CHECK_EQ(v, comp);
	CHECK_EQ(e, err);
}

/* Wait (bounded) until c's count reaches comp, then it must be exactly comp, err. */
static void wait_cntr(struct ibv_comp_cntr *c, uint64_t comp, uint64_t err)
{
	uint64_t v, deadline = swvt_now_ms() + 10000;
	do {
		CHECK_OK(ibv_read_comp_cntr(c, &v));
		if (v >= comp)
			break;
		usleep(1000);
	} while (swvt_now_ms() < deadline);
	expect_cntr(c, comp, err);
}

static void set_qp_access(struct swvt *t, unsigned access)
{
	struct ibv_qp_attr a = {.qp_access_flags = access};
	CHECK_OK(ibv_modify_qp(t->qp, &a, IBV_QP_ACCESS_FLAGS));
}

static void responder(struct swvt *t, void *arg)
{
	enum scenario s = *(enum scenario *)arg;
	unsigned all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		       IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_comp_cntr *cw = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE);
	struct ibv_comp_cntr *cr = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ);
	struct ibv_comp_cntr *ca = cntr_on(t, SWV_QP_ATTACH_COMP_CNTR_OP_REMOTE_ATOMIC);
	struct ibv_comp_cntr *cv = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_RECV);
	/* a second MR over the guarded region that allows remote reads only */
	struct ibv_mr *ro = ibv_reg_mr(t->pd, t->buf + GUARD_OFF, GUARD_LEN, IBV_ACCESS_REMOTE_READ);
	CHECK_PTR(ro);
	struct side_info roi = {(uintptr_t)t->buf + GUARD_OFF, ro->rkey};
	struct ibv_wc wc;

	memset(t->buf + GUARD_OFF, GUARD_BYTE, GUARD_LEN);
	memset(t->buf + t->opts.buf_size - 4096, GUARD_BYTE, 4096);
	if (s == S_WRITE_NO_QP_RIGHT)
		set_qp_access(t, all & ~IBV_ACCESS_REMOTE_WRITE);
	if (s == S_READ_NO_QP_RIGHT || s == S_WARM_READ_NO_QP_RIGHT)
		set_qp_access(t, all & ~IBV_ACCESS_REMOTE_READ);
	if (s == S_WARM_READS)
		for (uint32_t i = 0; i < WARM_READS; i++)
			swvt_fill(t->buf + WARM_OFF + 4096 + i * 100, WARM_READ_LEN, 9 + i);
	if (s == S_ATOMIC_NO_QP_RIGHT)
		set_qp_access(t, all & ~IBV_ACCESS_REMOTE_ATOMIC);
	if (s == S_RECV_TOO_SMALL)
		swvt_post_recv(t, 77, 0, 16);
	swvt_connect(t);
	swvt_send(t, &roi, sizeof(roi));

	if (s == S_RNR_SEND || s == S_RNR_WRITE_IMM) {
		/* the request arrives first and is RNR NAKed until this receive exists */
		usleep(300 * 1000);
		swvt_expect_empty(t->rcq, 1);
		swvt_post_recv(t, 5, 0, 4096);
	}
	CHECK_EQ(swvt_recv_u64(t), 1);

	switch (s) {
	case S_WRITE_PAST_END:
	case S_WRITE_NO_QP_RIGHT:
		expect_guard_intact(t);
		expect_qp_err(t);
		expect_cntr(cw, 0, 1);
		break;
	case S_READ_BAD_RKEY:
	case S_READ_NO_QP_RIGHT:
		expect_qp_err(t);
		expect_cntr(cr, 0, 1);
		break;
	case S_ATOMIC_NO_MR_RIGHT:
	case S_ATOMIC_NO_QP_RIGHT:
		expect_guard_intact(t);
		expect_qp_err(t);
		expect_cntr(ca, 0, 1);
		break;
	case S_RECV_TOO_SMALL:
		/* rxe completes the receive with REM_INV_REQ_ERR (a hardware HCA would
		 * say LOC_LEN_ERR); the QP is in ERR, nothing else is posted */
		swvt_poll_n(t->rcq, &wc, 1, 5000);
		CHECK_EQ(wc.wr_id, 77);
		CHECK_WC(wc, IBV_WC_REM_INV_REQ_ERR);
		expect_qp_err(t);
		expect_cntr(cv, 0, 1);
		CHECK_EQ(t->buf[16], 0); /* nothing past the 16-byte buffer */
		break;
	case S_RNR_SEND:
		swvt_poll_n(t->rcq, &wc, 1, 5000);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.wr_id, 5);
		CHECK_EQ(wc.byte_len, 3000);
		CHECK_EQ(swvt_verify(t->buf, 3000, 7), (size_t)-1);
		expect_cntr(cv, 1, 0);
		break;
	case S_RNR_WRITE_IMM:
		swvt_poll_n(t->rcq, &wc, 1, 5000);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.wr_id, 5);
		CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
		CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
		CHECK_EQ(be32toh(wc.imm_data), 0x1234);
		CHECK_EQ(wc.byte_len, 3000);
		CHECK_EQ(swvt_verify(t->buf + 8192, 3000, 8), (size_t)-1);
		expect_cntr(cw, 1, 0);
		expect_cntr(cv, 1, 0);
		break;
	case S_WARM_READ_BAD_RKEY:
	case S_WARM_READ_PAST_END:
	case S_WARM_READ_NO_QP_RIGHT:
		expect_guard_intact(t);
		expect_qp_err(t);
		expect_cntr(cw, 1, 0);
		expect_cntr(cr, 0, 1);
		break;
	case S_WARM_READS:
		wait_cntr(cr, WARM_READS, 0);
		expect_cntr(cw, 1, 0);
		break;
	default:
		CHECK(0);
	}
	swvt_send_u64(t, 1);
	CHECK_OK(ibv_dereg_mr(ro));
}

static const char *names[S_COUNT] = {
    "write past the MR end",
    "read with a wrong rkey",
    "atomic on an MR without the right",
    "write without QP REMOTE_WRITE",
    "read without QP REMOTE_READ",
    "atomic without QP REMOTE_ATOMIC",
    "receive buffer too small",
    "RNR then SEND",
    "RNR then WRITE_WITH_IMM",
    "warm: read with a wrong rkey",
    "warm: read past the MR end",
    "warm: read without QP REMOTE_READ",
    "warm: reads counted once",
};

int main(int argc, char **argv)
{
	int rc = 0;
	for (int s = 0; s < S_COUNT; s++) {
		if (argc > 1 && atoi(argv[1]) != s)
			continue;
		struct swvt_opts o;
		swvt_opts_default(&o);
		o.stop_at = IBV_QPS_INIT;
		o.min_rnr_timer = 1; /* 0.01 ms */
		o.rnr_retry = 7;     /* infinite */
		o.watchdog_s = 30;
		enum scenario sc = (enum scenario)s;
		int r = swvt_run(&o, requester, responder, &sc);
		printf("%-40s %s\n", names[s], r ? "FAILED" : "ok");
		rc |= r;
	}
	return rc;
}
