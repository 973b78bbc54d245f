/* ibv_open_device / ibv_close_device: the context (core/context.h), with the ops the
 * transport answers and its introspection (transport/stat.h). */
#include <errno.h>

#include "core/context.h"
#include "transport/qp_transport.h"
#include "transport/receive.h"
#include "transport/stat.h"
#include "util/compiler.h"

SWV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	if (!device || !swv_device_valid(device)) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_context *ctx = swv_ctx_open(to_swv_device(device), &swv_receive_ops);
	if (!ctx)
		return NULL;
	/* Before any importer copies the ops (ibv_import_device). */
	ctx->vctx.context.ops.post_send = swv_post_send;
	ctx->vctx.context.ops.post_recv = swv_post_recv;
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
