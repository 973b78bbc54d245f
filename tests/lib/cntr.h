/*
 * Completion-counter helpers shared by the unit and multi-process tests (public API
 * only); any failure fails the test.
 */
#ifndef SWV_TEST_CNTR_H
#define SWV_TEST_CNTR_H

#include <infiniband/verbs.h>
#include <stdint.h>

#include "check.h"

static inline struct ibv_comp_cntr *swvt_cntr_create(struct ibv_context *ctx,
						     enum ibv_comp_cntr_type type)
{
	struct ibv_comp_cntr_init_attr a = {.type = type};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(ctx, &a);
	CHECK_PTR(c);
	return c;
}

/* The completion (or error) count. The output starts poisoned, so a read that
 * succeeds without writing it shows. */
static inline uint64_t swvt_cntr_read(struct ibv_comp_cntr *c)
{
	uint64_t v = 0xdeadbeef;
	CHECK_OK(ibv_read_comp_cntr(c, &v));
	return v;
}

static inline uint64_t swvt_cntr_read_err(struct ibv_comp_cntr *c)
{
	uint64_t v = 0xdeadbeef;
	CHECK_OK(ibv_read_err_comp_cntr(c, &v));
	return v;
}

#endif
