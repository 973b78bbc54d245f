/*
 * RC error paths between two processes (roce-wire.md 5):
 *  - bad lkey on a SEND              -> IBV_WC_LOC_PROT_ERR, QP in ERR, rest flushed
 *  - bad rkey / out of bounds / missing remote right on WRITE and READ
 *                                    -> IBV_WC_REM_ACCESS_ERR, nothing written remotely
 *  - receive buffer too small        -> REM_INV_REQ_ERR on both sides
 *  - no receive posted, finite rnr_retry -> IBV_WC_RNR_RETRY_EXC_ERR
 *  - peer process killed             -> IBV_WC_RETRY_EXC_ERR within the timeout bound
 * After every error every outstanding WR flushes (IBV_WC_WR_FLUSH_ERR), on both queues,
 * even unsignaled ones, and each WR completes exactly once.
 */
#include <arpa/inet.h>
#include <unistd.h>

#include "harness.h"

#define TMO 10000

/* Post 'n' receives and 'n' unsignaled SENDs that must all flush. */
static void post_followers(struct swvt *t, int n, uint64_t base)
{
	for (int i = 0; i < n; i++)
		swvt_post_recv(t, base + i, 8192, 64);
	for (int i = 0; i < n; i++)
		swvt_post_send(t, base + 100 + i, IBV_WR_SEND, 0, 16, 0, 0);
}

/* Collect completions until n arrived; check each wr_id in [base, base+n) of the
 * receives and [base+100, base+100+n) of the sends flushed exactly once. */
static void expect_flushed(struct swvt *t, int n, uint64_t base)
{
	struct ibv_wc wc[64];
	int seen_r[32] = {0}, seen_s[32] = {0};
	swvt_poll_n(t->rcq, wc, n, TMO);
	for (int i = 0; i < n; i++) {
		CHECK_WC(wc[i], IBV_WC_WR_FLUSH_ERR);
		CHECK(wc[i].wr_id >= base && wc[i].wr_id < base + (uint64_t)n);
		CHECK_EQ(wc[i].opcode, IBV_WC_RECV);
		CHECK_EQ(seen_r[wc[i].wr_id - base]++, 0);
	}
	swvt_poll_n(t->scq, wc, n, TMO);
	for (int i = 0; i < n; i++) {
		CHECK_WC(wc[i], IBV_WC_WR_FLUSH_ERR);
		CHECK_EQ(wc[i].wr_id, base + 100 + (uint64_t)i); /* send flushes in order */
		CHECK_EQ(seen_s[i]++, 0);
	}
	swvt_expect_empty(t->scq, 20);
	swvt_expect_empty(t->rcq, 1);
}

static void query_state(struct swvt *t, enum ibv_qp_state want)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK_OK(ibv_query_qp(t->qp, &a, IBV_QP_STATE, &ia));
	CHECK_EQ(a.qp_state, want);
}

/* ---- bad lkey ---- */

static void lkey_req(struct swvt *t, void *arg)
{
	struct ibv_wc wc;
	struct ibv_sge sge = {(uintptr_t)t->buf, 32, t->mr->lkey ^ 0x5a5a0000};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND}, *bad; /* unsignaled: errors still report */
	/* Receives queued before the error flush too. */
	swvt_post_recv(t, 10, 8192, 64);
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	swvt_poll_n(t->scq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_EQ(wc.qp_num, t->qp->qp_num);
	query_state(t, IBV_QPS_ERR);
	swvt_poll_n(t->rcq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(wc.wr_id, 10);
	/* Posting in ERR is accepted and flushes. */
	post_followers(t, 3, 20);
	expect_flushed(t, 3, 20);
	swvt_barrier(t);
	(void)arg;
}

static void lkey_resp(struct swvt *t, void *arg)
{
	/* Nothing reached us: the bad SGE failed before any packet left. */
	swvt_post_recv(t, 1, 0, 64);
	swvt_barrier(t);
	swvt_expect_empty(t->rcq, 50);
	query_state(t, IBV_QPS_RTS);
	(void)arg;
}

/* ---- remote access errors ---- */

enum acc_case { ACC_BAD_RKEY, ACC_OOB, ACC_NO_RIGHT, ACC_READ_BAD_RKEY, ACC_READ_OOB, ACC_N };

static void acc_req(struct swvt *t, void *arg)
{
	enum acc_case c = *(enum acc_case *)arg;
	struct ibv_wc wc;
	swvt_fill(t->buf, 4096, 99);
	struct ibv_sge sge = {(uintptr_t)t->buf, 4096, t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 5, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad;
	wr.wr.rdma.remote_addr = t->remote.addr;
	wr.wr.rdma.rkey = t->remote.rkey;
	switch (c) {
	case ACC_BAD_RKEY:
		wr.wr.rdma.rkey ^= 0x00010000;
		break;
	case ACC_OOB: /* runs 1 byte past the end of the peer's MR */
		wr.wr.rdma.remote_addr = t->remote.addr + t->remote.size - 4095;
		break;
	case ACC_NO_RIGHT: /* the peer's MR has no REMOTE_WRITE (opts below) */
		break;
	case ACC_READ_BAD_RKEY:
		wr.opcode = IBV_WR_RDMA_READ;
		wr.wr.rdma.rkey ^= 0x00010000;
		break;
	case ACC_READ_OOB:
		wr.opcode = IBV_WR_RDMA_READ;
		wr.wr.rdma.remote_addr = t->remote.addr - 8;
		break;
	default:
		break;
	}
	if (wr.opcode == IBV_WR_RDMA_READ)
		memset(t->buf, 0xcd, 4096);
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	/* Followers behind the failing WR: they flush. */
	post_followers(t, 4, 40);
	swvt_poll_n(t->scq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_REM_ACCESS_ERR);
	CHECK_EQ(wc.wr_id, 5);
	query_state(t, IBV_QPS_ERR);
	expect_flushed(t, 4, 40);
	if (wr.opcode == IBV_WR_RDMA_READ)
		for (int i = 0; i < 4096; i++)
			CHECK_EQ(t->buf[i], 0xcd); /* nothing was placed locally */
	swvt_barrier(t);
	(void)arg;
}

static void acc_resp(struct swvt *t, void *arg)
{
	/* The responder refused: nothing written anywhere in our buffer, and its QP is
	 * in ERR with its posted receives flushed. */
	swvt_post_recv(t, 77, 0, 64);
	swvt_barrier(t);
	struct ibv_wc wc;
	swvt_poll_n(t->rcq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(wc.wr_id, 77);
	for (size_t i = 0; i < t->opts.buf_size; i++)
		if (t->buf[i]) {
			fprintf(stderr, "responder byte %zu changed\n", i);
			CHECK(0);
		}
	query_state(t, IBV_QPS_ERR);
	(void)arg;
}

/* ---- receive buffer too small ---- */

static void small_req(struct swvt *t, void *arg)
{
	struct ibv_wc wc;
	swvt_barrier(t); /* receive posted */
	swvt_post_send(t, 9, IBV_WR_SEND, 0, 2000, 0, IBV_SEND_SIGNALED);
	post_followers(t, 2, 60);
	swvt_poll_n(t->scq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_REM_INV_REQ_ERR);
	CHECK_EQ(wc.wr_id, 9);
	expect_flushed(t, 2, 60);
	swvt_barrier(t);
	(void)arg;
}

static void small_resp(struct swvt *t, void *arg)
{
	struct ibv_wc wc[2];
	swvt_post_recv(t, 1, 0, 1000); /* 2000 bytes will come */
	swvt_post_recv(t, 2, 1024, 4000);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, 2, TMO);
	/* rxe: the receive completes with REM_INV_REQ_ERR (roce-wire.md 5.2); the one
	 * behind it flushes. */
	CHECK_WC(wc[0], IBV_WC_REM_INV_REQ_ERR);
	CHECK_EQ(wc[0].wr_id, 1);
	CHECK_WC(wc[1], IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(wc[1].wr_id, 2);
	query_state(t, IBV_QPS_ERR);
	swvt_barrier(t);
	(void)arg;
}

/* ---- RNR retries exhausted ---- */

static void rnr_req(struct swvt *t, void *arg)
{
	struct ibv_wc wc;
	uint64_t t0 = swvt_now_ms();
	swvt_post_send(t, 3, IBV_WR_SEND, 0, 100, 0, IBV_SEND_SIGNALED);
	post_followers(t, 2, 80);
	swvt_poll_n(t->scq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_RNR_RETRY_EXC_ERR);
	CHECK_EQ(wc.wr_id, 3);
	/* rnr_retry 2 -> 3 attempts, each answered by an RNR NAK of min_rnr_timer 14
	 * (1.28 ms): at least two waits. */
	uint64_t dt = swvt_now_ms() - t0;
	CHECK(dt >= 2);
	expect_flushed(t, 2, 80);
	swvt_barrier(t);
	(void)arg;
}

static void rnr_resp(struct swvt *t, void *arg)
{
	/* No receive posted: RNR NAKs only, the responder QP stays usable. */
	swvt_barrier(t);
	swvt_expect_empty(t->rcq, 1);
	query_state(t, IBV_QPS_RTS);
	(void)arg;
}

/* RNR with infinite retries, then a receive arrives: the SEND goes through. */
static void rnr_ok_req(struct swvt *t, void *arg)
{
	struct ibv_wc wc;
	swvt_fill(t->buf, 300, 5);
	swvt_post_send(t, 4, IBV_WR_SEND, 0, 300, 0, IBV_SEND_SIGNALED);
	swvt_expect_empty(t->scq, 30); /* RNR-waiting */
	swvt_barrier(t);               /* peer posts its receive now */
	swvt_poll_n(t->scq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	swvt_barrier(t);
	(void)arg;
}

static void rnr_ok_resp(struct swvt *t, void *arg)
{
	struct ibv_wc wc;
	swvt_barrier(t);
	swvt_post_recv(t, 1, 0, 300);
	swvt_poll_n(t->rcq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 300);
	CHECK_EQ(swvt_verify(t->buf, 300, 5), (size_t)-1);
	swvt_barrier(t);
	(void)arg;
}

/* ---- peer killed ---- */

/* The peer is killed, so nothing ever answers: RETRY_EXC_ERR for the head after
 * retry_cnt retries, i.e. (retry_cnt + 1) ACK timeouts -- never sooner, and for 7 too
 * (a count, not "infinite"); the followers flush. *arg is the opcode of the head. */
static void dead_req(struct swvt *t, void *arg)
{
	const enum ibv_wr_opcode op = *(const enum ibv_wr_opcode *)arg;
	const uint64_t tmo_us = (4096ull << t->opts.timeout) / 1000;
	const uint64_t bound_ms = (t->opts.retry_cnt + 1) * tmo_us / 1000;
	struct ibv_wc wc;
	swvt_kill_peer(t);
	uint64_t t0 = swvt_now_ms();
	swvt_post_send(t, 6, op, 0, 5000, 0, IBV_SEND_SIGNALED);
	post_followers(t, 2, 90);
	/* scheduling slack on a loaded 2-core machine: seconds, never a hang */
	swvt_poll_n(t->scq, &wc, 1, (int)bound_ms + 10000);
	uint64_t dt = swvt_now_ms() - t0;
	CHECK_WC(wc, IBV_WC_RETRY_EXC_ERR);
	CHECK_EQ(wc.wr_id, 6);
	CHECK(dt + 1 >= bound_ms);
	CHECK(dt < bound_ms + 5000);
	expect_flushed(t, 2, 90);
	printf("test_rc_errors: dead peer, op %d retry_cnt %u: RETRY_EXC_ERR after %llu ms "
	       "(bound %llu ms)\n",
	       (int)op, t->opts.retry_cnt, (unsigned long long)dt, (unsigned long long)bound_ms);
}

static void dead_resp(struct swvt *t, void *arg)
{
	pause(); /* killed by the parent */
	(void)t;
	(void)arg;
}

int main(void)
{
	struct swvt_opts o;
	int rc;

	swvt_opts_default(&o);
	o.buf_size = 65536;
	if ((rc = swvt_run(&o, lkey_req, lkey_resp, NULL)))
		return rc;

	for (enum acc_case c = 0; c < ACC_N; c++) {
		swvt_opts_default(&o);
		o.buf_size = 65536;
		if (c == ACC_NO_RIGHT)
			o.mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
		if ((rc = swvt_run(&o, acc_req, acc_resp, &c))) {
			fprintf(stderr, "access case %d failed\n", c);
			return rc;
		}
	}

	swvt_opts_default(&o);
	o.buf_size = 65536;
	if ((rc = swvt_run(&o, small_req, small_resp, NULL)))
		return rc;

	swvt_opts_default(&o);
	o.buf_size = 65536;
	o.rnr_retry = 2;
	o.min_rnr_timer = 14;
	if ((rc = swvt_run(&o, rnr_req, rnr_resp, NULL)))
		return rc;

	swvt_opts_default(&o);
	o.buf_size = 65536;
	o.rnr_retry = 7;
	o.min_rnr_timer = 1;
	if ((rc = swvt_run(&o, rnr_ok_req, rnr_ok_resp, NULL)))
		return rc;

	static const uint8_t retry_cnts[] = {0, 3, 7};
	static const enum ibv_wr_opcode dead_ops[] = {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ};
	for (size_t i = 0; i < sizeof(retry_cnts); i++) {
		for (size_t k = 0; k < 2; k++) {
			swvt_opts_default(&o);
			o.buf_size = 65536;
			o.timeout = 12; /* 16.8 ms */
			o.retry_cnt = retry_cnts[i];
			enum ibv_wr_opcode op = dead_ops[k];
			if ((rc = swvt_run(&o, dead_req, dead_resp, &op)))
				return rc;
		}
	}
	return 0;
}
