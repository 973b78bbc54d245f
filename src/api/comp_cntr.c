/*
 * Exported completion-counter entry points: rdma-core 65's ibv_*_comp_cntr calls
 * (IBVERBS_1.18) and the swv_* extensions (SWVERBS_1.0). This layer validates
 * arguments in the order comp-cntr.md fixes; the object lives in core/comp_cntr.c.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>

#include "core/comp_cntr.h"
#include "core/context.h"
#include "core/qp.h"
#include "core/trig.h"
#include "transport/qp_transport.h"
#include "util/compiler.h"

static uint64_t ctx_max_value(const struct swv_context *ctx)
{
	return ctx->cfg->cntr_max_value ? ctx->cfg->cntr_max_value : UINT64_MAX;
}

SWV_EXPORT int _ibv_query_comp_cntr_caps(struct ibv_context *context,
					 struct ibv_comp_cntr_caps *caps, size_t caps_size)
{
	if (!context || !caps)
		return EINVAL;
	/* Zero what the caller says it has, then refuse a struct older than ours. */
	memset(caps, 0, caps_size);
	if (caps_size < sizeof(*caps))
		return EINVAL;
	const struct swv_context *ctx = to_swv_ctx(context);
	caps->max_value = ctx_max_value(ctx);
	caps->max_counters = ctx->cfg->max_cntrs;
	caps->supported_qp_attach_ops = SWV_CNTR_OP_UPSTREAM; /* extension bits: swv_query_* */
	return 0;
}

SWV_EXPORT int swv_query_comp_cntr_caps(struct ibv_context *context,
					struct swv_comp_cntr_caps *caps, size_t caps_size)
{
	if (!context || !caps)
		return EINVAL;
	memset(caps, 0, caps_size);
	if (caps_size < sizeof(*caps))
		return EINVAL;
	const struct swv_context *ctx = to_swv_ctx(context);
	caps->max_value = ctx_max_value(ctx);
	caps->max_counters = ctx->cfg->max_cntrs;
	caps->supported_qp_attach_ops = SWV_CNTR_OP_ALL;
	caps->flags = SWV_COMP_CNTR_CAP_TYPE_BYTES | SWV_COMP_CNTR_CAP_WAIT | SWV_COMP_CNTR_CAP_FD |
		      SWV_COMP_CNTR_CAP_APP_MEMORY | SWV_COMP_CNTR_CAP_TRIGGERED |
		      SWV_COMP_CNTR_CAP_WAIT_MANY;
	return 0;
}

/* Common tail of both creates: attribute checks after the NULL checks. */
static struct ibv_comp_cntr *create_common(struct ibv_context *context, uint32_t comp_mask,
					   enum ibv_comp_cntr_type type, uint32_t flags,
					   uint64_t *comp_addr, uint64_t *err_addr)
{
	if (comp_mask != 0 || flags != 0 ||
	    (type != IBV_COMP_CNTR_TYPE_WRS && type != IBV_COMP_CNTR_TYPE_BYTES)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (((uintptr_t)comp_addr & 7) || ((uintptr_t)err_addr & 7) ||
	    (comp_addr && comp_addr == err_addr)) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_comp_cntr *c = swv_comp_cntr_create(to_swv_ctx(context), type, comp_addr, err_addr);
	return c ? &c->ibcntr : NULL;
}

SWV_EXPORT struct ibv_comp_cntr *ibv_create_comp_cntr(struct ibv_context *context,
						      struct ibv_comp_cntr_init_attr *cc_attr)
{
	if (!context || !cc_attr) {
		errno = EINVAL;
		return NULL;
	}
	return create_common(context, cc_attr->comp_mask, cc_attr->type, cc_attr->flags, NULL,
			     NULL);
}

SWV_EXPORT struct ibv_comp_cntr *swv_create_comp_cntr_ext(struct ibv_context *context,
							  struct swv_comp_cntr_init_attr_ext *attr)
{
	if (!context || !attr) {
		errno = EINVAL;
		return NULL;
	}
	return create_common(context, attr->comp_mask, attr->type, attr->flags,
			     attr->comp_count_addr, attr->err_count_addr);
}

SWV_EXPORT int ibv_destroy_comp_cntr(struct ibv_comp_cntr *comp_cntr)
{
	if (!comp_cntr)
		return EINVAL;
	return swv_comp_cntr_destroy(to_swv_cntr(comp_cntr));
}

static int cntr_set(struct ibv_comp_cntr *comp_cntr, bool err, uint64_t value)
{
	if (!comp_cntr)
		return EINVAL;
	struct swv_comp_cntr *c = to_swv_cntr(comp_cntr);
	if (value > c->max_value)
		return EINVAL;
	swv_comp_cntr_store(c, err, value);
	swv_trig_run(to_swv_ctx(comp_cntr->context)); /* what the new value made due */
	return 0;
}

SWV_EXPORT int ibv_set_comp_cntr(struct ibv_comp_cntr *comp_cntr, uint64_t value)
{
	return cntr_set(comp_cntr, false, value);
}

SWV_EXPORT int ibv_set_err_comp_cntr(struct ibv_comp_cntr *comp_cntr, uint64_t value)
{
	return cntr_set(comp_cntr, true, value);
}

SWV_EXPORT int ibv_inc_comp_cntr(struct ibv_comp_cntr *comp_cntr, uint64_t amount)
{
	if (!comp_cntr)
		return EINVAL;
	swv_comp_cntr_add(to_swv_cntr(comp_cntr), false, amount);
	swv_trig_run(to_swv_ctx(comp_cntr->context));
	return 0;
}

SWV_EXPORT int ibv_inc_err_comp_cntr(struct ibv_comp_cntr *comp_cntr, uint64_t amount)
{
	if (!comp_cntr)
		return EINVAL;
	swv_comp_cntr_add(to_swv_cntr(comp_cntr), true, amount);
	swv_trig_run(to_swv_ctx(comp_cntr->context));
	return 0;
}

SWV_EXPORT int ibv_read_comp_cntr(struct ibv_comp_cntr *comp_cntr, uint64_t *value)
{
	if (!comp_cntr || !value)
		return EINVAL;
	return swv_comp_cntr_read(to_swv_cntr(comp_cntr), false, value);
}

SWV_EXPORT int ibv_read_err_comp_cntr(struct ibv_comp_cntr *comp_cntr, uint64_t *value)
{
	if (!comp_cntr || !value)
		return EINVAL;
	return swv_comp_cntr_read(to_swv_cntr(comp_cntr), true, value);
}

SWV_EXPORT int ibv_qp_attach_comp_cntr(struct ibv_qp *qp, struct ibv_comp_cntr *comp_cntr,
				       struct ibv_qp_attach_comp_cntr_attr *attr)
{
	/* comp-cntr.md, "Attach": checked in this order, first failure wins. */
	if (!qp || !comp_cntr || !attr)
		return EINVAL; /* 1 */
	if (qp->context != comp_cntr->context)
		return EINVAL; /* 2 */
	if (attr->comp_mask != 0)
		return EINVAL; /* 3 */
	if (attr->op_mask == 0)
		return EINVAL; /* 4 */
	/* 5: a bit this device does not know is unsupported: ENOTSUP (= EOPNOTSUPP), as
	 * rdma-core's manual page says for op_mask values outside the device's
	 * capabilities (docs/counters.md, "Errors"). */
	if (attr->op_mask & ~SWV_CNTR_OP_ALL)
		return EOPNOTSUPP;
	struct swv_qp *q = to_swv_qp(qp);
	/* A handle of ibv_open_qp attaches to the TGT QP it names, whose completions the
	 * data path counts (core/xrcd.h); that QP is its creator's context's, and a
	 * counter of another context could be freed under it (2 again). */
	if (q->open_real) {
		q = q->open_real;
		if (to_swv_ctx(comp_cntr->context) != q->ctx)
			return EINVAL;
	}
	/* 5 (the QP's kinds: EOPNOTSUPP), 6 (state: EINVAL), 7 (overlap: EBUSY) under
	 * qp->lock */
	return swv_comp_cntr_attach(q, to_swv_cntr(comp_cntr), attr->op_mask);
}

SWV_EXPORT int swv_comp_cntr_wait(struct ibv_comp_cntr *comp_cntr, uint64_t threshold,
				  int timeout_ms)
{
	if (!comp_cntr)
		return EINVAL;
	struct swv_comp_cntr *c = to_swv_cntr(comp_cntr);
	if (threshold > c->max_value)
		return EINVAL;
	/* Errors counted before the call do not end this wait. */
	return swv_comp_cntr_wait_impl(c, threshold, swv_comp_cntr_load(c, true), timeout_ms);
}

SWV_EXPORT int swv_comp_cntr_wait_ex(struct ibv_comp_cntr *comp_cntr, uint64_t threshold,
				     uint64_t err_base, int timeout_ms)
{
	if (!comp_cntr)
		return EINVAL;
	struct swv_comp_cntr *c = to_swv_cntr(comp_cntr);
	if (threshold > c->max_value)
		return EINVAL;
	return swv_comp_cntr_wait_impl(c, threshold, err_base, timeout_ms);
}

SWV_EXPORT int swv_comp_cntr_get_fd(struct ibv_comp_cntr *comp_cntr)
{
	if (!comp_cntr) {
		errno = EINVAL;
		return -1;
	}
	int r = swv_comp_cntr_fd_impl(to_swv_cntr(comp_cntr));
	if (r < 0) {
		errno = -r;
		return -1;
	}
	return r;
}

SWV_EXPORT int swv_comp_cntr_arm(struct ibv_comp_cntr *comp_cntr, uint64_t threshold)
{
	if (!comp_cntr)
		return EINVAL;
	struct swv_comp_cntr *c = to_swv_cntr(comp_cntr);
	if (threshold > c->max_value)
		return EINVAL;
	return swv_comp_cntr_arm_impl(c, threshold);
}

/* ---- counters that drive work (SWVERBS_1.1) ---- */

SWV_EXPORT int swv_post_send_triggered(struct ibv_qp *qp, struct ibv_send_wr *wr,
				       struct ibv_comp_cntr *trig_cntr, uint64_t threshold,
				       struct ibv_send_wr **bad_wr)
{
	/* As ibv_post_send: nowhere to report without bad_wr or a WR. */
	if (!bad_wr)
		return EINVAL;
	*bad_wr = NULL;
	if (!wr)
		return EINVAL;
	*bad_wr = wr;
	if (!qp || !trig_cntr || qp->context != trig_cntr->context)
		return EINVAL;
	if (threshold > to_swv_cntr(trig_cntr)->max_value)
		return EINVAL;
	*bad_wr = NULL;
	return swv_qp_post_triggered(to_swv_qp(qp), wr, to_swv_cntr(trig_cntr), threshold, bad_wr);
}

SWV_EXPORT int swv_triggered_cntr_op(struct ibv_comp_cntr *trig_cntr, uint64_t threshold,
				     struct ibv_comp_cntr *target, enum swv_trig_cntr_op op,
				     uint64_t value)
{
	if (!trig_cntr || !target || trig_cntr->context != target->context)
		return EINVAL;
	struct swv_comp_cntr *src = to_swv_cntr(trig_cntr), *dst = to_swv_cntr(target);
	if (threshold > src->max_value)
		return EINVAL;
	if (op != SWV_TRIG_CNTR_ADD && op != SWV_TRIG_CNTR_SET)
		return EINVAL;
	if (op == SWV_TRIG_CNTR_SET && value > dst->max_value)
		return EINVAL;
	struct swv_trig *t = swv_trig_alloc(0);
	if (!t)
		return ENOMEM;
	t->kind = op == SWV_TRIG_CNTR_SET ? SWV_TRIG_KIND_SET : SWV_TRIG_KIND_ADD;
	t->src = src;
	t->threshold = threshold;
	t->dst = dst;
	t->value = value;
	struct swv_context *ctx = to_swv_ctx(trig_cntr->context);
	swv_trig_hold(ctx, t);
	swv_trig_run(ctx); /* a threshold already reached fires now */
	return 0;
}

SWV_EXPORT int swv_cancel_triggered(struct ibv_comp_cntr *trig_cntr, uint64_t *ncancelled)
{
	if (!trig_cntr)
		return EINVAL;
	uint64_t n = swv_trig_cancel(to_swv_cntr(trig_cntr));
	if (ncancelled)
		*ncancelled = n;
	return 0;
}

SWV_EXPORT int swv_comp_cntr_wait_many(const struct swv_comp_cntr_wait_entry *entries, unsigned n,
				       unsigned flags, int timeout_ms, unsigned *index)
{
	if (!entries || !index || n == 0 || n > SWV_COMP_CNTR_WAIT_MANY_MAX ||
	    (flags & ~SWV_COMP_CNTR_WAIT_ALL))
		return EINVAL;
	struct swv_cntr_wait_entry small[16], *e = small;
	if (n > 16 && !(e = malloc(sizeof(*e) * n)))
		return ENOMEM;
	int ret = 0;
	for (unsigned i = 0; i < n; i++) {
		if (!entries[i].comp_cntr ||
		    entries[i].threshold > to_swv_cntr(entries[i].comp_cntr)->max_value) {
			*index = i;
			ret = EINVAL;
			break;
		}
		e[i].cntr = to_swv_cntr(entries[i].comp_cntr);
		e[i].threshold = entries[i].threshold;
		e[i].err_base = entries[i].err_base;
	}
	if (!ret)
		ret = swv_comp_cntr_wait_many_impl(e, n, flags & SWV_COMP_CNTR_WAIT_ALL, timeout_ms,
						   index);
	if (e != small)
		free(e);
	return ret;
}
