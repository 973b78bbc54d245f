/* ibv_open_device / ibv_close_device. */
#include <errno.h>

#include "core/context.h"
#include "transport/receive.h"
#include "util/compiler.h"

SWV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	if (!device || !swv_device_valid(device)) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_context *ctx = swv_ctx_open(to_swv_device(device), &swv_receive_ops);
	return ctx ? &ctx->vctx.context : NULL;
}

SWV_EXPORT int ibv_close_device(struct ibv_context *context)
{
	if (!context)
		return EINVAL;
	/* This ibv_context only: the state goes with the last one sharing it. */
	return swv_ctx_release(swv_ctx_raw(context));
}
