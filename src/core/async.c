/* Asynchronous events: struct ibv_async_event records through the context's pipe. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "core/async.h"
#include "core/context.h"
#include "util/log.h"

enum swv_async_kind swv_async_kind_of(enum ibv_event_type type)
{
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		return SWV_ASYNC_CQ;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return SWV_ASYNC_QP;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return SWV_ASYNC_SRQ;
	case IBV_EVENT_WQ_FATAL:
		return SWV_ASYNC_WQ;
	case IBV_EVENT_DEVICE_FATAL:
		return SWV_ASYNC_DEVICE;
	default:
		return SWV_ASYNC_PORT;
	}
}

void swv_async_event(struct swv_context *ctx, enum ibv_event_type type, void *element)
{
	struct ibv_async_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_type = type;
	switch (swv_async_kind_of(type)) {
	case SWV_ASYNC_CQ:
		ev.element.cq = element;
		break;
	case SWV_ASYNC_QP:
		ev.element.qp = element;
		break;
	case SWV_ASYNC_SRQ:
		ev.element.srq = element;
		break;
	case SWV_ASYNC_WQ:
		ev.element.wq = element;
		break;
	case SWV_ASYNC_PORT:
		ev.element.port_num = (int)(uintptr_t)element;
		break;
	case SWV_ASYNC_DEVICE:
		break;
	}
	/* One record < PIPE_BUF is written atomically; the write end is non-blocking so
	 * the progress thread never stalls on an application that ignores events. */
	ssize_t n = write(ctx->async_wfd, &ev, sizeof(ev));
	if (n != (ssize_t)sizeof(ev))
		swv_log(SWV_LOG_WARN, "async event %s dropped: %s", ibv_event_type_str(type),
			n < 0 ? strerror(errno) : "short write");
}
