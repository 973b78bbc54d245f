/* ibv_open_device / ibv_close_device: the context (core/context.h), with the ops the
 * transport answers and its introspection (transport/stat.h). */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "api/ops.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/dm.h"
#include "core/mr.h"
#include "core/pd.h"
#include "core/srq.h"
#include "core/xrcd.h"
#include "transport/qp_transport.h"
#include "transport/receive.h"
#include "transport/stat.h"
#include "util/compiler.h"

/* Every op a context answers, in one table copied into each context ibv_open_device
 * opens (an imported context copies its primary's). NULL is "not supported". */
static const struct verbs_context swv_ops = {
	.context.ops = {
		.poll_cq = swv_poll_cq,
		.req_notify_cq = swv_req_notify_cq,
		.post_send = swv_post_send,
		.post_recv = swv_post_recv,
		.post_srq_recv = swv_post_srq_recv,
		.alloc_mw = swv_alloc_mw,
		.dealloc_mw = swv_dealloc_mw,
		.bind_mw = swv_bind_mw,
	},
	.query_port = swv_query_port,
	.query_device_ex = swv_query_device_ex,
	.create_qp_ex = swv_create_qp_ex,
	.open_qp = swv_open_qp,
	/* basic, XRC and tag-matching SRQs (core/srq.h); SRQ numbers (core/xrcd.h) */
	.create_srq_ex = swv_create_srq_ex,
	.post_srq_ops = swv_post_srq_ops,
	.get_srq_num = swv_get_srq_num,
	.open_xrcd = swv_open_xrcd,
	.close_xrcd = swv_close_xrcd,
	.create_cq_ex = swv_create_cq_ex,
	.query_rt_values = swv_query_rt_values,
	.advise_mr = swv_advise_mr, /* ODP prefetch (core/mr.h) */
	.alloc_dm = swv_alloc_dm,
	.free_dm = swv_free_dm,
	.reg_dm_mr = swv_reg_dm_mr,
	.alloc_parent_domain = swv_alloc_parent_domain,
	.alloc_td = swv_alloc_td,
	.dealloc_td = swv_dealloc_td,
};

static void set_ops(struct verbs_context *v)
{
	/* Every member before sz is an op, but for libibverbs' private pointer, which
	 * this library does not use (NULL in both). */
	memcpy(v, &swv_ops, offsetof(struct verbs_context, sz));
	v->context.ops = swv_ops.context.ops;
}

SWV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	if (!device || !swv_device_valid(device)) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_context *ctx = swv_ctx_open(to_swv_device(device), &swv_receive_ops);
	if (!ctx)
		return NULL;
	set_ops(&ctx->vctx);
	swv_ctx_publish(ctx);	/* importable from now on: an importer copies the ops */
	swv_stat_register(ctx); /* swverbs-stat can see it from now on */
	return &ctx->vctx.context;
}

SWV_EXPORT int ibv_close_device(struct ibv_context *context)
{
	if (!context)
		return EINVAL;
	/* This ibv_context only: the state goes with the last one sharing it. */
	struct swv_context *last;
	int rc = swv_ctx_release(swv_ctx_raw(context), &last);
	if (last) {
		/* Before anything is torn down; waits for a snapshot that is reading it. */
		swv_stat_unregister(last);
		swv_ctx_close(last);
	}
	return rc;
}
