/*
 * The one service libswverbs gives swverbs' librdmacm (src/rdmacm/) beyond the verbs
 * API: ordering between a QP's packets and the CM's messages, which travel on other
 * sockets. Exported at a private version node (libswverbs.map), not API.
 */
#include <infiniband/verbs.h>

#include "core/context.h"
#include "progress/progress.h"
#include "util/compiler.h"

SWV_EXPORT void swv_cm_settle(struct ibv_context *ctx);

/*
 * Called before the CM sends a DREQ or DREP, and before it hands an application a
 * DISCONNECTED event. On an adapter, what a QP sent before the CM message reaches the
 * peer first (the kernel's CM and the QP share the port and the path), and the peer's
 * adapter has processed it (its CQEs written) by the time its CM reports the
 * disconnect. Here both orders need help: packets the fault injector holds leave now,
 * and a receive pass over the context's ports processes every packet that already
 * arrived (an ACK in the inbox or socket completes its send before the application
 * learns of the DISCONNECTED that would make it flush).
 */
void swv_cm_settle(struct ibv_context *ctx)
{
	if (!ctx)
		return;
	(void)swv_progress_settle(&to_swv_ctx(ctx)->progress, true);
}
