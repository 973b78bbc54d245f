/* Asynchronous events (ibv_get_async_event). Owner: core. */
#ifndef SWV_CORE_ASYNC_H
#define SWV_CORE_ASYNC_H

#include <infiniband/verbs.h>

struct swv_context;

/* Queue an event for ctx->async_fd. element is the QP/CQ/SRQ pointer or port number
 * as struct ibv_async_event describes. Safe from any thread; never blocks (an event
 * is dropped and logged if the application never reads them). */
void swv_async_event(struct swv_context *ctx, enum ibv_event_type type, void *element);

#endif
