/*
 * Asynchronous events (ibv_get_async_event). Owner: core.
 *
 * Events wait in a per-context queue, not in a pipe, so that destroying an object can
 * withdraw the events about it that the application has not read yet: a record in a
 * pipe would later hand the application a pointer to freed memory. The rules follow
 * the kernel's uverbs (ib_uverbs_release_uevent + events_reported):
 *   - ibv_get_async_event counts each event it hands out on its object ("reported");
 *   - destroying a CQ/QP/SRQ withdraws its queued, unread events and then waits until
 *     the application acknowledged every reported one (events_completed, or
 *     async_events_completed for a CQ, bumped by ibv_ack_async_event under the
 *     object's mutex, signalled on its cond -- rdma-core's ABI fields).
 * So a pointer ibv_get_async_event returns stays valid until its event is acked.
 *
 * Readiness: ibv_context.async_fd is an epoll set that holds only the queue's eventfd
 * (non-blocking, semaphore mode, one token per queued record). Programs may poll it,
 * put it in their own epoll set, or make it non-blocking with fcntl, as with the
 * kernel's async file; swverbs' own eventfd stays non-blocking, so withdrawing an
 * event can also take its token back and the fd never reads as ready for an event
 * that is gone.
 */
#ifndef SWV_CORE_ASYNC_H
#define SWV_CORE_ASYNC_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>

#include "util/list.h"

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
/* The event's name in rdma-core's wording (ibv_event_type_str); "unknown" outside
 * the enum. */
const char *swv_async_event_name(enum ibv_event_type event);

/* Events beyond this many unread ones are dropped (and logged): an application that
 * never reads them must not make the library grow without bound. */
#define SWV_ASYNC_MAX_QUEUED 4096

/* The per-context queue (embedded in struct swv_context). */
struct swv_async_queue {
	/* Protects list and n, and the "reported" count of every object of the context
	 * (swv_cq.async_events_reported, swv_qp.async_reported, swv_srq.async_reported):
	 * handing an event out and counting it is one step, as is withdrawing. A leaf
	 * lock: nothing is taken while it is held. */
	pthread_mutex_t lock;
	struct swv_list list; /* queued events, oldest first */
	unsigned n;
	int efd;  /* eventfd, EFD_SEMAPHORE | EFD_NONBLOCK: tokens == queued records */
	int epfd; /* = ibv_context.async_fd, an epoll set holding efd (level-triggered) */
};

/* Set up q; *async_fd receives the descriptor for ibv_context.async_fd. 0 or errno. */
int swv_async_init(struct swv_async_queue *q, int *async_fd);
/* Free unread events and close the descriptors (context close). */
void swv_async_fini(struct swv_async_queue *q);

/* Queue an event. element is the QP/CQ/SRQ pointer or port number as struct
 * ibv_async_event describes. Safe from any thread (including with qp/srq/cq locks
 * held); never blocks. */
void swv_async_event(struct swv_context *ctx, enum ibv_event_type type, void *element);

/* ibv_get_async_event: 0, or -1 with errno (EAGAIN when async_fd was made
 * non-blocking and nothing is queued). Blocks otherwise; a signal handler that
 * returns does not end the wait (like a read restarted by SA_RESTART). */
int swv_async_get(struct swv_context *ctx, struct ibv_async_event *ev);

/*
 * Destroy side: withdraw every queued event about obj (of the given kind) and return
 * how many events about it were handed to the application. Call once nothing can raise
 * new events for obj any more. Then swv_async_wait_acked() with the object's mutex,
 * cond and completed count.
 */
uint32_t swv_async_withdraw(struct swv_context *ctx, enum swv_async_kind kind, const void *obj);
void swv_async_wait_acked(pthread_mutex_t *m, pthread_cond_t *c, const uint32_t *completed,
			  uint32_t reported);

#endif
