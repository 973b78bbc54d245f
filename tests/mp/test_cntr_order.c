/*
 * The ordering promise of comp-cntr.md: a reader that observes a count of N finds the
 * effects of all N counted operations in place. Two processes, RC, thousands of
 * operations each, the reader re-checking on every count it observes:
 *   A. target: REMOTE_RDMA_WRITE count n => the data of writes 0..n-1 is in memory;
 *   B. target: RECV count n => received data of messages 0..n-1 in place, and their
 *      n CQEs can be polled;
 *   C. initiator: RDMA_READ count n => the data of reads 0..n-1 is in place (checked
 *      by a second thread while the first one posts);
 *   D. target, the converse: after polling n receive CQEs, the RECV count is >= n.
 * Operations are unsignaled (except receives, which always complete with a CQE).
 * Plain, then with 5% drop + duplicates.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "test_cntr_util.h"

#define NA    2000 /* RDMA WRITEs */
#define NB    1000 /* SENDs */
#define NC    2000 /* RDMA READs */
#define ND    2000 /* SENDs of part D */
#define SLOT  2048u
#define TMO   30000
#define RQ    256  /* receives kept posted */
#define SRCQ  128  /* send source slots in flight */

#define A_OFF   0u          /* target: write slots, NA * SLOT (~4 MiB); initiator: read dst */
#define C_SRC   (4u << 20)  /* target: read source, 256 slots */
#define B_OFF   (6u << 20)  /* target: recv slots, RQ; initiator: send source, SRCQ */
#define BUFSZ   (7u << 20)

static uint32_t size_of(int j)
{
	return 1 + (uint32_t)(j * 131) % SLOT;
}

static void fail_order(const char *what, uint64_t seen, int j, size_t off)
{
	fprintf(stderr, "[pid %d] %s: count %llu observed, but operation %d is not in place "
			"(first bad byte at %zu)\n",
		(int)getpid(), what, (unsigned long long)seen, j, off);
	exit(1);
}

/* Keep at most 'depth' operations outstanding, using the counter itself. */
static void throttle(struct ibv_comp_cntr *c, int posted, int depth)
{
	if (posted >= depth)
		CHECK_OK(swv_comp_cntr_wait(c, (uint64_t)(posted - depth + 1), TMO));
}

static void post1(struct swvt *t, enum ibv_wr_opcode op, uint64_t off, uint32_t len,
		  uint64_t roff)
{
	struct ibv_sge sge = {(uintptr_t)t->buf + off, len, t->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = op}, *bad;
	wr.wr.rdma.remote_addr = t->remote.addr + roff;
	wr.wr.rdma.rkey = t->remote.rkey;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
}

/* C: the initiator's checker thread */
struct reader {
	struct swvt *t;
	struct ibv_comp_cntr *c;
	_Atomic int failed_at; /* -1 = fine */
};

static void *read_checker(void *p)
{
	struct reader *r = p;
	int verified = 0;
	uint64_t deadline = swvt_now_ms() + TMO;
	while (verified < NC) {
		uint64_t n = swvt_cntr_read(r->c);
		for (int j = verified; j < (int)n; j++) {
			size_t bad = swvt_verify(r->t->buf + A_OFF + (uint64_t)j * SLOT, size_of(j),
						 50000 + (uint32_t)(j % 256));
			if (bad != (size_t)-1)
				fail_order("RDMA_READ", n, j, bad);
		}
		verified = (int)n;
		if (swvt_now_ms() > deadline) {
			fprintf(stderr, "RDMA_READ checker: stuck at %d\n", verified);
			exit(1);
		}
	}
	return NULL;
}

static void side(struct swvt *t, void *arg)
{
	const bool init = t->role == 0;
	struct cntr_side s;
	cntr_attach_all(t, &s, IBV_COMP_CNTR_TYPE_WRS);
	if (!init)
		for (int j = 0; j < RQ; j++)
			swvt_post_recv(t, (uint64_t)j, B_OFF + (uint64_t)j * SLOT, SLOT);
	swvt_connect(t);

	/* ---- A: RDMA WRITE ---- */
	if (init) {
		for (int j = 0; j < NA; j++) {
			/* unique source and target slots: the source is never rewritten */
			swvt_fill(t->buf + A_OFF + (uint64_t)j * SLOT, size_of(j), 10000 + (uint32_t)j);
		}
		swvt_barrier(t);
		for (int j = 0; j < NA; j++) {
			throttle(s.c[K_WR], j, 200);
			post1(t, IBV_WR_RDMA_WRITE, A_OFF + (uint64_t)j * SLOT, size_of(j),
			      A_OFF + (uint64_t)j * SLOT);
		}
		CHECK_OK(swv_comp_cntr_wait(s.c[K_WR], NA, TMO));
	} else {
		swvt_barrier(t);
		int verified = 0;
		uint64_t deadline = swvt_now_ms() + TMO;
		while (verified < NA) {
			uint64_t n = swvt_cntr_read(s.c[K_RWR]);
			for (int j = verified; j < (int)n; j++) {
				size_t bad = swvt_verify(t->buf + A_OFF + (uint64_t)j * SLOT, size_of(j),
							 10000 + (uint32_t)j);
				if (bad != (size_t)-1)
					fail_order("REMOTE_RDMA_WRITE", n, j, bad);
			}
			verified = (int)n;
			CHECK(swvt_now_ms() < deadline);
		}
	}
	swvt_barrier(t);
	printf("[%s] A: %d RDMA WRITEs in order\n", init ? "initiator" : "target", NA);

	/* ---- B: SEND -> RECV ---- */
	if (init) {
		swvt_barrier(t);
		for (int j = 0; j < NB; j++) {
			/* source slot j % SRCQ is free once SEND j - SRCQ completed */
			throttle(s.c[K_SEND], j, SRCQ);
			uint64_t off = B_OFF + (uint64_t)(j % SRCQ) * SLOT;
			swvt_fill(t->buf + off, size_of(j), 20000 + (uint32_t)j);
			post1(t, IBV_WR_SEND, off, size_of(j), 0);
		}
		CHECK_OK(swv_comp_cntr_wait(s.c[K_SEND], NB, TMO));
	} else {
		swvt_barrier(t);
		int verified = 0, polled = 0;
		uint64_t deadline = swvt_now_ms() + TMO;
		struct ibv_wc wc[64];
		while (verified < NB) {
			uint64_t n = swvt_cntr_read(s.c[K_RECV]);
			if ((int)n == verified) {
				CHECK(swvt_now_ms() < deadline);
				continue;
			}
			/* The CQEs of the n counted receives are visible: one pass of polling,
			 * without waiting, must reach n. */
			int r;
			while ((r = ibv_poll_cq(t->rcq, 64, wc)) > 0) {
				for (int i = 0; i < r; i++) {
					CHECK_WC(wc[i], IBV_WC_SUCCESS);
					CHECK_EQ(wc[i].wr_id, (uint64_t)polled + (uint64_t)i);
				}
				polled += r;
			}
			CHECK(r == 0);
			if (polled < (int)n) {
				fprintf(stderr, "RECV: count %llu observed but only %d CQEs pollable\n",
					(unsigned long long)n, polled);
				exit(1);
			}
			for (int j = verified; j < (int)n; j++) {
				uint64_t off = B_OFF + (uint64_t)(j % RQ) * SLOT;
				size_t bad = swvt_verify(t->buf + off, size_of(j), 20000 + (uint32_t)j);
				if (bad != (size_t)-1)
					fail_order("RECV", n, j, bad);
				/* slot checked: post it again for message j + RQ */
				if (j + RQ < NB)
					swvt_post_recv(t, (uint64_t)(j + RQ), off, SLOT);
			}
			verified = (int)n;
		}
	}
	swvt_barrier(t);
	printf("[%s] B: %d SEND/RECV in order\n", init ? "initiator" : "target", NB);

	/* ---- C: RDMA READ, checked by a second thread on the initiator ---- */
	if (init) {
		memset(t->buf + A_OFF, 0, (size_t)NC * SLOT);
		swvt_barrier(t); /* target filled its read source */
		struct reader r = {.t = t, .c = s.c[K_RD]};
		pthread_t th;
		CHECK_OK(pthread_create(&th, NULL, read_checker, &r));
		for (int j = 0; j < NC; j++) {
			throttle(s.c[K_RD], j, 64);
			post1(t, IBV_WR_RDMA_READ, A_OFF + (uint64_t)j * SLOT, size_of(j),
			      C_SRC + (uint64_t)(j % 256) * SLOT);
		}
		CHECK_OK(pthread_join(th, NULL));
	} else {
		for (int j = 0; j < 256; j++)
			swvt_fill(t->buf + C_SRC + (uint64_t)j * SLOT, SLOT, 50000 + (uint32_t)j);
		cntr_publish_local_writes(t);
		swvt_barrier(t);
		CHECK_OK(swv_comp_cntr_wait(s.c[K_RRD], NC, TMO));
	}
	swvt_barrier(t);
	printf("[%s] C: %d RDMA READs in order\n", init ? "initiator" : "target", NC);

	/* ---- D: a CQE polled is a completion counted ---- */
	if (init) {
		swvt_barrier(t); /* the receives are posted */
		for (int j = 0; j < ND; j++) {
			throttle(s.c[K_SEND], NB + j, SRCQ);
			post1(t, IBV_WR_SEND, B_OFF + (uint64_t)(j % SRCQ) * SLOT, 8, 0);
		}
		CHECK_OK(swv_comp_cntr_wait(s.c[K_SEND], NB + ND, TMO));
	} else {
		for (int j = 0; j < RQ; j++)
			swvt_post_recv(t, (uint64_t)j, B_OFF + (uint64_t)j * SLOT, SLOT);
		swvt_barrier(t);
		int polled = 0;
		uint64_t deadline = swvt_now_ms() + TMO;
		struct ibv_wc wc[64];
		while (polled < ND) {
			int r = ibv_poll_cq(t->rcq, 64, wc);
			CHECK(r >= 0);
			if (r == 0) {
				CHECK(swvt_now_ms() < deadline);
				continue;
			}
			uint64_t n = swvt_cntr_read(s.c[K_RECV]) - NB;
			if (n < (uint64_t)(polled + r)) {
				fprintf(stderr, "RECV: %d CQEs polled but the count says %llu\n",
					polled + r, (unsigned long long)n);
				exit(1);
			}
			for (int i = 0; i < r; i++, polled++) {
				CHECK_WC(wc[i], IBV_WC_SUCCESS);
				CHECK_EQ(wc[i].wr_id, (uint64_t)(polled % RQ));
				if (polled + RQ < ND)
					swvt_post_recv(t, wc[i].wr_id, B_OFF + wc[i].wr_id * SLOT,
						       SLOT);
			}
		}
	}
	swvt_barrier(t);
	printf("[%s] D: %d receive CQEs counted when polled\n", init ? "initiator" : "target", ND);

	/* And the totals are exact. */
	if (init) {
		s.exp[K_WR] = NA;
		s.exp[K_SEND] = NB + ND;
		s.exp[K_RD] = NC;
	} else {
		s.exp[K_RWR] = NA;
		s.exp[K_RECV] = NB + ND;
		s.exp[K_RRD] = NC;
	}
	cntr_check_side(&s, "totals", TMO);
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.stop_at = IBV_QPS_INIT;
	o.buf_size = BUFSZ;
	o.max_send_wr = 256;
	o.max_recv_wr = RQ;
	o.cqe = 2048;
	o.watchdog_s = 100;
	return cntr_run_plain_and_faulty(&o, side, side, NULL);
}
