/*
 * Responder under duplicated and delayed packets (SWVERBS_FAULT dup=50 + delay):
 * duplicate SENDs and WRITEs are never executed twice, duplicate READs are replayed
 * with the right data, duplicate atomics return the saved value and modify the target
 * exactly once, and the responder's counters count every operation exactly once.
 *
 * Parent = requester, child = responder. The responder's buffer layout:
 */
#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define N          48
#define NSEQ       64
#define RECV_OFF   0u          /* N + 8 receive buffers of 4096 bytes */
#define WRITE_OFF  (256u << 10) /* N write targets, 4096 bytes apart */
#define READ_OFF   (512u << 10) /* 64 KiB read source */
#define READ_SEED  99u
#define ATOMIC_OFF (640u << 10)
#define SEQ_OFF    (ATOMIC_OFF + 64)
#define ADD        3u

static uint32_t write_len(int i)
{
	return (uint32_t)(1 + (i * 977) % 3000); /* 1..3000: 1 to 3 packets at MTU 1024 */
}
static uint32_t send_len(int i)
{
	return (uint32_t)((i * 613) % 4000); /* 0..3999 */
}

static struct ibv_comp_cntr *cntr_on(struct swvt *t, uint32_t op)
{
	struct ibv_comp_cntr_init_attr a = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(t->ctx, &a);
	CHECK_PTR(c);
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = op};
	CHECK_OK(ibv_qp_attach_comp_cntr(t->qp, c, &at));
	return c;
}

static void expect_cntr(struct ibv_comp_cntr *c, uint64_t want, const char *what)
{
	uint64_t v = 0, e = 0;
	CHECK_OK(ibv_read_comp_cntr(c, &v));
	CHECK_OK(ibv_read_err_comp_cntr(c, &e));
	if (v != want || e != 0) {
		fprintf(stderr, "%s counter: %llu (errors %llu), expected %llu\n", what,
			(unsigned long long)v, (unsigned long long)e, (unsigned long long)want);
		exit(1);
	}
}

static void wait_sends(struct swvt *t, int n, enum ibv_wr_opcode op)
{
	struct ibv_wc wc[N];
	swvt_poll_n(t->scq, wc, n, 20000);
	for (int i = 0; i < n; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].opcode, op == IBV_WR_SEND                 ? IBV_WC_SEND
				       : op == IBV_WR_RDMA_WRITE         ? IBV_WC_RDMA_WRITE
				       : op == IBV_WR_RDMA_READ          ? IBV_WC_RDMA_READ
									 : IBV_WC_FETCH_ADD);
	}
}

static void requester(struct swvt *t, void *arg)
{
	uint8_t *b = t->buf;
	swvt_connect(t);

	/* WRITEs of 1..3 packets, each with its own pattern */
	for (int i = 0; i < N; i++) {
		swvt_fill(b + WRITE_OFF + (size_t)i * 4096, write_len(i), 1000 + (uint32_t)i);
		swvt_post_send(t, (uint64_t)i, IBV_WR_RDMA_WRITE, WRITE_OFF + (uint64_t)i * 4096,
			       write_len(i), WRITE_OFF + (uint64_t)i * 4096, IBV_SEND_SIGNALED);
	}
	wait_sends(t, N, IBV_WR_RDMA_WRITE);

	/* NSEQ 8-byte WRITEs of increasing values to one slot: a duplicate executed late
	 * would put an older value back */
	for (int k = 0; k < NSEQ; k++) {
		uint64_t v = (uint64_t)k + 1;
		memcpy(b + SEQ_OFF + 8 + (size_t)k * 8, &v, 8);
		swvt_post_send(t, (uint64_t)k, IBV_WR_RDMA_WRITE, SEQ_OFF + 8 + (uint64_t)k * 8, 8,
			       SEQ_OFF, k == NSEQ - 1 ? IBV_SEND_SIGNALED : 0);
	}
	wait_sends(t, 1, IBV_WR_RDMA_WRITE);

	/* SENDs of 0..3999 bytes */
	for (int i = 0; i < N; i++) {
		swvt_fill(b + RECV_OFF + (size_t)i * 4096, send_len(i), 2000 + (uint32_t)i);
		swvt_post_send(t, (uint64_t)i, IBV_WR_SEND, RECV_OFF + (uint64_t)i * 4096, send_len(i),
			       0, IBV_SEND_SIGNALED);
	}
	wait_sends(t, N, IBV_WR_SEND);

	/* READs of 1500 bytes (2 response packets) from the responder's pattern */
	memset(b + READ_OFF, 0, 64 << 10);
	for (int i = 0; i < N; i++)
		swvt_post_send(t, (uint64_t)i, IBV_WR_RDMA_READ, READ_OFF + (uint64_t)i * 1500, 1500,
			       (uint64_t)READ_OFF + (uint64_t)i * 1000, IBV_SEND_SIGNALED);
	wait_sends(t, N, IBV_WR_RDMA_READ);
	uint8_t *expect = malloc(64 << 10);
	CHECK_PTR(expect);
	swvt_fill(expect, 64 << 10, READ_SEED);
	for (int i = 0; i < N; i++)
		if (memcmp(b + READ_OFF + (size_t)i * 1500, expect + (size_t)i * 1000, 1500)) {
			fprintf(stderr, "READ %d returned wrong data\n", i);
			exit(1);
		}
	free(expect);

	/* fetch-and-add ADD, N times: the originals must be exactly 0, ADD, 2*ADD, ... */
	for (int i = 0; i < N; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)b + ATOMIC_OFF + 1024 + (size_t)i * 8,
				      .length = 8, .lkey = t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		wr.wr.atomic.remote_addr = t->remote.addr + ATOMIC_OFF;
		wr.wr.atomic.rkey = t->remote.rkey;
		wr.wr.atomic.compare_add = ADD;
		CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	}
	wait_sends(t, N, IBV_WR_ATOMIC_FETCH_AND_ADD);
	bool seen[N] = {false};
	for (int i = 0; i < N; i++) {
		uint64_t orig;
		memcpy(&orig, b + ATOMIC_OFF + 1024 + (size_t)i * 8, 8);
		CHECK(orig % ADD == 0 && orig / ADD < N);
		CHECK(!seen[orig / ADD]);
		seen[orig / ADD] = true;
	}

	swvt_send_u64(t, 1); /* done: the responder checks its side */
	CHECK_EQ(swvt_recv_u64(t), 1);
}

static void responder(struct swvt *t, void *arg)
{
	uint8_t *b = t->buf;
	struct ibv_comp_cntr *cw = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE);
	struct ibv_comp_cntr *cr = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ);
	struct ibv_comp_cntr *ca = cntr_on(t, SWV_QP_ATTACH_COMP_CNTR_OP_REMOTE_ATOMIC);
	struct ibv_comp_cntr *cv = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_RECV);

	swvt_fill(b + READ_OFF, 64 << 10, READ_SEED);
	memset(b + ATOMIC_OFF, 0, 128);
	/* more receives than SENDs: a re-executed duplicate would consume one */
	for (int i = 0; i < N + 8; i++)
		swvt_post_recv(t, (uint64_t)i, RECV_OFF + (uint64_t)i * 4096, 4096);
	swvt_connect(t);

	CHECK_EQ(swvt_recv_u64(t), 1);
	expect_cntr(cw, N + NSEQ, "REMOTE_RDMA_WRITE");
	expect_cntr(cr, N, "REMOTE_RDMA_READ");
	expect_cntr(ca, N, "REMOTE_ATOMIC");
	expect_cntr(cv, N, "RECV");
	for (int i = 0; i < N; i++) {
		size_t bad = swvt_verify(b + WRITE_OFF + (size_t)i * 4096, write_len(i),
					 1000 + (uint32_t)i);
		if (bad != (size_t)-1) {
			fprintf(stderr, "WRITE %d wrong at byte %zu\n", i, bad);
			exit(1);
		}
	}
	uint64_t v;
	memcpy(&v, b + SEQ_OFF, 8);
	CHECK_EQ(v, NSEQ);
	memcpy(&v, b + ATOMIC_OFF, 8);
	CHECK_EQ(v, (uint64_t)N * ADD);

	struct ibv_wc wc[N];
	swvt_poll_n(t->rcq, wc, N, 5000);
	for (int i = 0; i < N; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, i); /* in order, one receive per SEND */
		CHECK_EQ(wc[i].opcode, IBV_WC_RECV);
		CHECK_EQ(wc[i].byte_len, send_len(i));
		CHECK_EQ(swvt_verify(b + RECV_OFF + (size_t)i * 4096, send_len(i), 2000 + (uint32_t)i),
			 (size_t)-1);
	}
	swvt_expect_empty(t->rcq, 200);
	swvt_send_u64(t, 1);
	/* the counters stay attached until the QP is destroyed at teardown */
	(void)cw;
}

int main(void)
{
	/* every packet in both directions has a 50% chance of a duplicate; some are
	 * delayed, so duplicates also arrive after later packets */
	setenv("SWVERBS_FAULT", "seed=12345,dup=50,delay=10,delay_us=400", 1);
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.stop_at = IBV_QPS_INIT;
	o.timeout = 16; /* finite retries: tolerate a peer unscheduled for ~2 s */
	return swvt_run(&o, requester, responder, NULL);
}
