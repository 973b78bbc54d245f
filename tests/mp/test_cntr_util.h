/* Shared helpers of the tests/mp/test_cntr_*.c counter tests (public API only). */
#ifndef SWV_TEST_CNTR_UTIL_H
#define SWV_TEST_CNTR_UTIL_H

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "cntr.h"

/* One counter per operation kind, in bit order; the last two are swverbs' atomics. */
enum { K_SEND, K_RECV, K_RD, K_RRD, K_WR, K_RWR, K_AT, K_RAT, NK };

static const uint32_t cntr_bit[NK] = {
	IBV_QP_ATTACH_COMP_CNTR_OP_SEND,       IBV_QP_ATTACH_COMP_CNTR_OP_RECV,
	IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_READ,  IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ,
	IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE,
	SWV_QP_ATTACH_COMP_CNTR_OP_ATOMIC,     SWV_QP_ATTACH_COMP_CNTR_OP_REMOTE_ATOMIC,
};
static const char *const cntr_name[NK] = {"SEND", "RECV", "RDMA_READ", "REMOTE_RDMA_READ",
					  "RDMA_WRITE", "REMOTE_RDMA_WRITE", "ATOMIC",
					  "REMOTE_ATOMIC"};

/* The counters of one side and the values they must have. */
struct cntr_side {
	struct ibv_comp_cntr *c[NK];
	uint64_t exp[NK], exp_err[NK];
};

/* Create one counter per kind and attach it; the QP must be in RESET or INIT. */
static inline void cntr_attach_all(struct swvt *t, struct cntr_side *s, enum ibv_comp_cntr_type type)
{
	for (int k = 0; k < NK; k++) {
		s->c[k] = swvt_cntr_create(t->ctx, type);
		struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = cntr_bit[k]};
		CHECK_OK(ibv_qp_attach_comp_cntr(t->qp, s->c[k], &at));
		s->exp[k] = s->exp_err[k] = 0;
	}
}

/* Wait until every counter reached its expected values, then require them exactly:
 * nothing more on any counter, on either value. */
static inline void cntr_check_side(struct cntr_side *s, const char *where, int timeout_ms)
{
	uint64_t deadline = swvt_now_ms() + (uint64_t)timeout_ms;
	for (int k = 0; k < NK; k++) {
		/* Error counts: poll (a wait would return EIO on the first change). */
		while (swvt_cntr_read_err(s->c[k]) < s->exp_err[k] && swvt_now_ms() < deadline)
			usleep(200);
		uint64_t left = deadline > swvt_now_ms() ? deadline - swvt_now_ms() : 0;
		int r;
		do {
			r = swv_comp_cntr_wait(s->c[k], s->exp[k], (int)left);
			/* An expected error may be counted while we wait for the count. */
		} while (r == EIO && swvt_cntr_read_err(s->c[k]) <= s->exp_err[k]);
	}
	int bad = 0;
	for (int k = 0; k < NK; k++) {
		uint64_t v = swvt_cntr_read(s->c[k]), e = swvt_cntr_read_err(s->c[k]);
		if (v != s->exp[k] || e != s->exp_err[k]) {
			fprintf(stderr, "[pid %d] %s: counter %s = %llu/%llu err, expected %llu/%llu\n",
				(int)getpid(), where, cntr_name[k], (unsigned long long)v,
				(unsigned long long)e, (unsigned long long)s->exp[k],
				(unsigned long long)s->exp_err[k]);
			bad = 1;
		}
	}
	if (bad)
		exit(1);
}

/* After the application wrote memory that the peer will read by RDMA: the real
 * ordering comes through the peer's request (another process), which ThreadSanitizer
 * cannot see; taking and releasing the QP lock (ibv_query_qp) orders the writes
 * before the progress thread's next use of the QP in a way it can see. */
static inline void cntr_publish_local_writes(struct swvt *t)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK_OK(ibv_query_qp(t->qp, &a, IBV_QP_STATE, &ia));
}

/* Run 'body' twice: plainly, then with packet loss and duplication injected. */
static inline int cntr_run_plain_and_faulty(struct swvt_opts *o, swvt_fn parent, swvt_fn child,
					    void *arg)
{
	unsetenv("SWVERBS_FAULT");
	if (swvt_run(o, parent, child, arg))
		return 1;
	printf("plain: ok\n");
	/* 5% drop + 5% duplicates, seeded. ACK timeout 16 (268 ms a try, ~1 s before a
	 * finite retry_cnt gives up): on an oversubscribed 2-core CI machine a process can
	 * go unscheduled for over 160 ms, and these tests assert exact counting under
	 * loss, not how fast RC gives up on a silent peer (test_rc_errors covers that). */
	setenv("SWVERBS_FAULT", "seed=4242,drop=5,dup=5", 1);
	struct swvt_opts f = *o;
	f.timeout = 16;
	int rc = swvt_run(&f, parent, child, arg);
	unsetenv("SWVERBS_FAULT");
	if (!rc)
		printf("fault (drop 5%%, dup 5%%): ok\n");
	return rc;
}

#endif
