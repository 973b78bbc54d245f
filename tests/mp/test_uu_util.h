/* Shared helpers of the UC/UD multi-process tests (tests/mp/test_u[cd]_*.c); public API
 * plus the swverbs counter wait. */
#ifndef SWV_TEST_UU_UTIL_H
#define SWV_TEST_UU_UTIL_H

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include "harness.h"
#include "cntr.h"

/* One WRS counter per upstream op bit a UC/UD QP performs, with the exact values it must
 * reach. UD attaches SEND and RECV, UC also RDMA_WRITE and REMOTE_RDMA_WRITE. */
enum { U_SEND, U_RECV, U_WR, U_RWR, U_N };

struct uu_cntrs {
	struct ibv_comp_cntr *c[U_N]; /* NULL = not attached */
	uint64_t exp[U_N];
};

static const uint32_t uu_bit[U_N] = {
	IBV_QP_ATTACH_COMP_CNTR_OP_SEND, IBV_QP_ATTACH_COMP_CNTR_OP_RECV,
	IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE};
static const char *const uu_name[U_N] = {"SEND", "RECV", "RDMA_WRITE", "REMOTE_RDMA_WRITE"};

/* Attach the counters the QP's type performs (QP in RESET or INIT). */
static inline void uu_attach(struct swvt *t, struct uu_cntrs *u)
{
	int n = t->opts.qp_type == IBV_QPT_UD ? 2 : U_N;
	memset(u, 0, sizeof(*u));
	for (int k = 0; k < n; k++) {
		u->c[k] = swvt_cntr_create(t->ctx, IBV_COMP_CNTR_TYPE_WRS);
		struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = uu_bit[k]};
		CHECK_OK(ibv_qp_attach_comp_cntr(t->qp, u->c[k], &at));
	}
}

/* Wait until every attached counter reached its expected count, then require exactly
 * that count and no errors. */
static inline void uu_check_at(struct uu_cntrs *u, const char *where, int timeout_ms,
			       const char *file, int line)
{
	uint64_t deadline = swvt_now_ms() + (uint64_t)timeout_ms;
	int bad = 0;
	for (int k = 0; k < U_N; k++) {
		if (!u->c[k])
			continue;
		uint64_t left = deadline > swvt_now_ms() ? deadline - swvt_now_ms() : 0;
		(void)swv_comp_cntr_wait(u->c[k], u->exp[k], (int)left);
		uint64_t v, e;
		CHECK_OK(ibv_read_comp_cntr(u->c[k], &v));
		CHECK_OK(ibv_read_err_comp_cntr(u->c[k], &e));
		if (v != u->exp[k] || e != 0) {
			fprintf(stderr, "%s:%d: [pid %d] %s: counter %s = %llu (err %llu), expected %llu\n",
				file, line, (int)getpid(), where, uu_name[k], (unsigned long long)v,
				(unsigned long long)e, (unsigned long long)u->exp[k]);
			bad = 1;
		}
	}
	if (bad)
		exit(1);
}
#define uu_check(u, where, tmo) uu_check_at(u, where, tmo, __FILE__, __LINE__)

/* Counters are destroyed after the QP (an attached counter cannot go away). */
static inline void uu_release_after_qp(struct swvt *t, struct uu_cntrs *u)
{
	CHECK_OK(ibv_destroy_qp(t->qp));
	t->qp = NULL;
	for (int k = 0; k < U_N; k++)
		if (u->c[k])
			CHECK_OK(ibv_destroy_comp_cntr(u->c[k]));
}

#endif
