/*
 * CQ and completion-channel entry points. ibv_create_cq_ex is reached through
 * vctx->create_cq_ex, which swverbs leaves NULL for now, so the inline wrapper
 * answers EOPNOTSUPP (pyverbs skips "Create Extended CQ is not supported").
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/context.h"
#include "core/cq.h"
#include "util/compiler.h"

SWV_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_comp_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	/* Semaphore mode: each read takes exactly one event token. Blocking unless the
	 * application sets O_NONBLOCK on ch->fd, as with rdma-core's channel fd. */
	ch->ibch.fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
	if (ch->ibch.fd < 0) {
		int e = errno;
		free(ch);
		errno = e;
		return NULL;
	}
	ch->wfd = ch->ibch.fd;
	ch->ibch.context = context;
	ch->ibch.refcnt = 0;
	pthread_mutex_init(&ch->lock, NULL);
	swv_list_init(&ch->ready);
	return &ch->ibch;
}

SWV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	if (!channel)
		return EINVAL;
	struct swv_comp_channel *ch = swv_container_of(channel, struct swv_comp_channel, ibch);
	if (atomic_load(&ch->users))
		return EBUSY;
	close(ch->ibch.fd);
	pthread_mutex_destroy(&ch->lock);
	free(ch);
	return 0;
}

SWV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
					struct ibv_comp_channel *channel, int comp_vector)
{
	struct swv_comp_channel *ch =
		channel ? swv_container_of(channel, struct swv_comp_channel, ibch) : NULL;
	struct swv_cq *cq = swv_cq_create(context, cqe, cq_context, ch, comp_vector);
	return cq ? (struct ibv_cq *)&cq->ibcq : NULL;
}

SWV_EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	if (!cq)
		return EINVAL;
	return swv_cq_destroy(to_swv_cq(cq));
}

SWV_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	if (!cq)
		return EINVAL;
	return swv_cq_resize(to_swv_cq(cq), cqe);
}

SWV_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
				void **cq_context)
{
	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	struct swv_comp_channel *ch = swv_container_of(channel, struct swv_comp_channel, ibch);
	/* This thread may block in read below: the progress thread receives meanwhile. */
	swv_progress_release(&to_swv_ctx(channel->context)->progress);
	for (;;) {
		uint64_t token;
		if (read(ch->ibch.fd, &token, sizeof(token)) != (ssize_t)sizeof(token))
			return -1; /* errno from read: EAGAIN when non-blocking and empty */
		pthread_mutex_lock(&ch->lock);
		if (swv_list_empty(&ch->ready)) {
			/* The event was withdrawn by ibv_destroy_cq: wait for the next one. */
			pthread_mutex_unlock(&ch->lock);
			continue;
		}
		struct swv_cq *c = swv_list_entry(ch->ready.next, struct swv_cq, ch_entry);
		if (--c->ch_pending == 0)
			swv_list_del(&c->ch_entry);
		c->comp_events_reported++;
		pthread_mutex_unlock(&ch->lock);
		*cq = (struct ibv_cq *)&c->ibcq;
		*cq_context = (*cq)->cq_context;
		return 0;
	}
}

SWV_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq || !nevents)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}
