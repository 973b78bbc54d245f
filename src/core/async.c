/* Asynchronous events: the per-context queue behind ibv_context.async_fd (rules in async.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/async.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/qp.h"
#include "core/srq.h"
#include "util/compiler.h"
#include "util/log.h"

const char *swv_async_event_name(enum ibv_event_type event)
{
	static const char *const names[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
		[IBV_EVENT_DEVICE_SPEED_CHANGE] = "device speed change",
	};
	if ((unsigned)event >= SWV_ARRAY_SIZE(names) || !names[event])
		return "unknown";
	return names[event];
}

struct async_rec {
	struct swv_list entry; /* in queue->list */
	struct ibv_async_event ev;
};

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

int swv_async_init(struct swv_async_queue *q, int *async_fd)
{
	struct epoll_event e = {.events = EPOLLIN};
	int rc;

	pthread_mutex_init(&q->lock, NULL);
	swv_list_init(&q->list);
	q->n = 0;
	q->efd = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
	if (q->efd < 0) {
		rc = errno;
		goto err;
	}
	q->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (q->epfd < 0) {
		rc = errno;
		goto err_efd;
	}
	e.data.fd = q->efd;
	if (epoll_ctl(q->epfd, EPOLL_CTL_ADD, q->efd, &e)) {
		rc = errno;
		goto err_ep;
	}
	*async_fd = q->epfd;
	return 0;

err_ep:
	close(q->epfd);
err_efd:
	close(q->efd);
err:
	pthread_mutex_destroy(&q->lock);
	return rc;
}

void swv_async_fini(struct swv_async_queue *q)
{
	while (!swv_list_empty(&q->list)) {
		struct async_rec *r = swv_list_entry(q->list.next, struct async_rec, entry);
		swv_list_del(&r->entry);
		free(r);
	}
	close(q->epfd);
	close(q->efd);
	pthread_mutex_destroy(&q->lock);
}

void swv_async_event(struct swv_context *ctx, enum ibv_event_type type, void *element)
{
	struct swv_async_queue *q = &ctx->async;
	struct async_rec *r = calloc(1, sizeof(*r));
	uint64_t one = 1;

	if (!r) {
		swv_log(SWV_LOG_WARN, "async event %s dropped: out of memory",
			swv_async_event_name(type));
		return;
	}
	r->ev.event_type = type;
	switch (swv_async_kind_of(type)) {
	case SWV_ASYNC_CQ:
		r->ev.element.cq = element;
		break;
	case SWV_ASYNC_QP:
		r->ev.element.qp = element;
		break;
	case SWV_ASYNC_SRQ:
		r->ev.element.srq = element;
		break;
	case SWV_ASYNC_WQ:
		r->ev.element.wq = element;
		break;
	case SWV_ASYNC_PORT:
		r->ev.element.port_num = (int)(uintptr_t)element;
		break;
	case SWV_ASYNC_DEVICE:
		break;
	}
	pthread_mutex_lock(&q->lock);
	if (q->n >= SWV_ASYNC_MAX_QUEUED) {
		pthread_mutex_unlock(&q->lock);
		swv_log(SWV_LOG_WARN, "async event %s dropped: %u unread events queued",
			swv_async_event_name(type), SWV_ASYNC_MAX_QUEUED);
		free(r);
		return;
	}
	swv_list_add_tail(&q->list, &r->entry);
	q->n++;
	/* The token goes in under the lock, so "tokens + tokens taken by readers not yet
	 * past the lock == records queued" holds at every lock boundary. An eventfd
	 * cannot fill up with a few thousand tokens. */
	if (write(q->efd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		swv_log(SWV_LOG_ERR, "async event queue: eventfd write failed: %s", strerror(errno));
	pthread_mutex_unlock(&q->lock);
}

/* The "reported" count of the object an event is about (q->lock held), or NULL for
 * port and device events, which have no object. */
static uint32_t *reported_count(enum swv_async_kind kind, const void *obj)
{
	switch (kind) {
	case SWV_ASYNC_CQ:
		return &to_swv_cq((struct ibv_cq *)obj)->async_events_reported;
	case SWV_ASYNC_QP:
		return &to_swv_qp((struct ibv_qp *)obj)->async_reported;
	case SWV_ASYNC_SRQ:
		return &to_swv_srq((struct ibv_srq *)obj)->async_reported;
	default:
		return NULL; /* no WQ can exist (create_wq is not offered) */
	}
}

static const void *element_of(const struct ibv_async_event *ev)
{
	switch (swv_async_kind_of(ev->event_type)) {
	case SWV_ASYNC_CQ:
		return ev->element.cq;
	case SWV_ASYNC_QP:
		return ev->element.qp;
	case SWV_ASYNC_SRQ:
		return ev->element.srq;
	case SWV_ASYNC_WQ:
		return ev->element.wq;
	default:
		return NULL;
	}
}

int swv_async_get(struct swv_context *ctx, struct ibv_async_event *ev)
{
	struct swv_async_queue *q = &ctx->async;

	for (;;) {
		uint64_t token;

		if (read(q->efd, &token, sizeof(token)) == (ssize_t)sizeof(token)) {
			pthread_mutex_lock(&q->lock);
			if (swv_list_empty(&q->list)) {
				/* Its event was withdrawn after this token was taken. */
				pthread_mutex_unlock(&q->lock);
				continue;
			}
			struct async_rec *r = swv_list_entry(q->list.next, struct async_rec, entry);
			swv_list_del(&r->entry);
			q->n--;
			const void *obj = element_of(&r->ev);
			uint32_t *rep = obj ? reported_count(swv_async_kind_of(r->ev.event_type), obj)
					    : NULL;
			if (rep)
				(*rep)++;
			pthread_mutex_unlock(&q->lock);
			*ev = r->ev;
			free(r);
			return 0;
		}
		if (errno != EAGAIN)
			return -1;
		/* Nothing queued. The application's O_NONBLOCK on async_fd decides. */
		int fl = fcntl(q->epfd, F_GETFL);
		if (fl < 0)
			return -1;
		if (fl & O_NONBLOCK) {
			errno = EAGAIN;
			return -1;
		}
		struct epoll_event e;
		if (epoll_wait(q->epfd, &e, 1, -1) < 0 && errno != EINTR)
			return -1;
	}
}

uint32_t swv_async_withdraw(struct swv_context *ctx, enum swv_async_kind kind, const void *obj)
{
	struct swv_async_queue *q = &ctx->async;
	struct swv_list *it, *next;
	uint32_t reported = 0;

	pthread_mutex_lock(&q->lock);
	for (it = q->list.next; it != &q->list; it = next) {
		struct async_rec *r = swv_list_entry(it, struct async_rec, entry);
		uint64_t token;

		next = it->next;
		if (swv_async_kind_of(r->ev.event_type) != kind || element_of(&r->ev) != obj)
			continue;
		swv_list_del(&r->entry);
		q->n--;
		free(r);
		/* Take its token back. EAGAIN: a reader holds it and, finding one record
		 * fewer, goes back to waiting. */
		if (read(q->efd, &token, sizeof(token)) < 0 && errno != EAGAIN)
			swv_log(SWV_LOG_ERR, "async event queue: eventfd read failed: %s",
				strerror(errno));
	}
	uint32_t *rep = reported_count(kind, obj);
	if (rep)
		reported = *rep;
	pthread_mutex_unlock(&q->lock);
	return reported;
}

void swv_async_wait_acked(pthread_mutex_t *m, pthread_cond_t *c, const uint32_t *completed,
			  uint32_t reported)
{
	/* As rdma-core's destroy: wait until the application acked every event it was
	 * given (ibv_ack_async_event signals c under m). Wrap-safe comparison. */
	pthread_mutex_lock(m);
	while ((int32_t)(*completed - reported) < 0)
		pthread_cond_wait(c, m);
	pthread_mutex_unlock(m);
}
