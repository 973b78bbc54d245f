/* ibv_get_async_event / ibv_ack_async_event over the context's event queue (core/async.h). */
#include <errno.h>
#include <pthread.h>

#include "core/async.h"
#include "core/context.h"
#include "util/compiler.h"

SWV_EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	if (!context || !event) {
		errno = EINVAL;
		return -1;
	}
	/* Blocks unless the application made async_fd non-blocking (then EAGAIN). The
	 * event is counted on its object, whose destroy then waits for the ack. */
	return swv_async_get(to_swv_ctx(context), event);
}

static void ack_obj(pthread_mutex_t *m, pthread_cond_t *c, uint32_t *count)
{
	pthread_mutex_lock(m);
	(*count)++;
	pthread_cond_signal(c);
	pthread_mutex_unlock(m);
}

SWV_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	if (!event)
		return;
	switch (swv_async_kind_of(event->event_type)) {
	case SWV_ASYNC_CQ: {
		struct ibv_cq *cq = event->element.cq;
		if (cq)
			ack_obj(&cq->mutex, &cq->cond, &cq->async_events_completed);
		break;
	}
	case SWV_ASYNC_QP: {
		struct ibv_qp *qp = event->element.qp;
		if (qp)
			ack_obj(&qp->mutex, &qp->cond, &qp->events_completed);
		break;
	}
	case SWV_ASYNC_SRQ: {
		struct ibv_srq *srq = event->element.srq;
		if (srq)
			ack_obj(&srq->mutex, &srq->cond, &srq->events_completed);
		break;
	}
	case SWV_ASYNC_WQ: {
		struct ibv_wq *wq = event->element.wq;
		if (wq)
			ack_obj(&wq->mutex, &wq->cond, &wq->events_completed);
		break;
	}
	default:
		break; /* port and device events have no object */
	}
}
