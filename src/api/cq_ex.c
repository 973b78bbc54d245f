/*
 * verbs_context.create_cq_ex and .query_rt_values (reached through the
 * ibv_create_cq_ex / ibv_query_rt_values_ex inlines). The CQ itself is the ordinary
 * one plus the ibv_cq_ex callbacks (src/core/cq_ex.c).
 */
#include <errno.h>
#include <stddef.h>

#include "api/ops.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/cq_ex.h"
#include "core/limits.h"
#include "core/pd.h"
#include "util/clock.h"
#include "util/compiler.h"

#define KNOWN_CQ_COMP_MASK (IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)

struct ibv_cq_ex *swv_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	if (!ctx || !attr) {
		errno = EINVAL;
		return NULL;
	}
	/* Unknown mask bits are EINVAL (the caller's struct says more than we know);
	 * known features swverbs lacks are EOPNOTSUPP, as mlx5 answers. */
	if (attr->comp_mask & ~(uint32_t)KNOWN_CQ_COMP_MASK) {
		errno = EINVAL;
		return NULL;
	}
	/* The PD given must be a parent domain of this context (mlx5: EINVAL otherwise);
	 * its allocator provides the ring (core/pd.h). */
	struct swv_pd *pd = NULL;
	if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
		pd = attr->parent_domain ? to_swv_pd(attr->parent_domain) : NULL;
		if (!pd || !pd->parent || pd->ibpd.context != ctx) {
			errno = EINVAL;
			return NULL;
		}
	}
	/* SINGLE_THREADED only promises the application serializes its polling, which
	 * needs nothing from us; IGNORE_OVERRUN (a CQ that may be overrun silently) is
	 * not offered: a full swverbs CQ is always reported. */
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->wc_flags & ~(uint64_t)SWV_CQ_EX_WC_FLAGS) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->cqe > (uint32_t)SWV_DEV_MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_comp_channel *ch =
		attr->channel ? swv_container_of(attr->channel, struct swv_comp_channel, ibch)
			      : NULL;
	/* Checks cqe, comp_vector and the channel's context (EINVAL) as ibv_create_cq. */
	struct swv_cq *cq = swv_cq_create(ctx, (int)attr->cqe, attr->cq_context, ch,
					  (int)attr->comp_vector);
	if (!cq)
		return NULL;
	int rc = pd ? swv_cq_set_pd(cq, pd) : 0;
	if (!rc)
		rc = swv_cq_ex_setup(cq, attr->wc_flags);
	if (rc) {
		swv_cq_destroy(cq);
		errno = rc;
		return NULL;
	}
	return &cq->ibcq;
}

int swv_query_rt_values(struct ibv_context *ctx, struct ibv_values_ex *values)
{
	if (!ctx || !values)
		return EINVAL;
	if (values->comp_mask & ~(uint32_t)IBV_VALUES_MASK_RAW_CLOCK)
		return EINVAL;
	uint32_t filled = 0;
	if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
		/* The raw clock in core-clock ticks, in tv_nsec with tv_sec 0 as mlx5
		 * reports it; at 1 GHz this is also a valid reading as sec*1e9 + nsec. */
		values->raw_clock.tv_sec = 0;
		values->raw_clock.tv_nsec = (long)swv_now_ns();
		filled |= IBV_VALUES_MASK_RAW_CLOCK;
	}
	values->comp_mask = filled;
	return 0;
}
