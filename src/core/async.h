/* Asynchronous events (ibv_get_async_event). Owner: core. */
#ifndef SWV_CORE_ASYNC_H
#define SWV_CORE_ASYNC_H

#include <infiniband/verbs.h>

struct swv_context;

/* Which member of ibv_async_event.element an event type uses. */
enum swv_async_kind {
	SWV_ASYNC_CQ,
	SWV_ASYNC_QP,
	SWV_ASYNC_SRQ,
	SWV_ASYNC_WQ,
	SWV_ASYNC_PORT,
	SWV_ASYNC_DEVICE,
};
enum swv_async_kind swv_async_kind_of(enum ibv_event_type type);

/* Queue an event for ctx->async_fd. element is the QP/CQ/SRQ pointer or port number
 * as struct ibv_async_event describes. Safe from any thread; never blocks (an event
 * is dropped and logged if the application never reads them). */
void swv_async_event(struct swv_context *ctx, enum ibv_event_type type, void *element);

/*
 * Acknowledgement follows rdma-core: ibv_ack_async_event bumps the object's
 * async_events_completed (CQ) or events_completed (QP, SRQ, WQ) under the object's
 * mutex and signals its cond, so destroy paths can wait for outstanding events.
 * ibv_get_async_event counts CQ events handed out in swv_cq.async_events_reported;
 * swv_cq_destroy waits for both counts to match.
 */

#endif
