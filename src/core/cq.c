/* Completion queue rings and completion-channel events (see cq.h for the rules). */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/async.h"
#include "core/comp_cntr.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/device.h"
#include "core/limits.h"
#include "core/pd.h"
#include "util/clock.h"
#include "util/log.h"

static uint32_t roundup_pow2(uint32_t v)
{
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

/* Queue one event for cq on its channel (cq->lock not held). */
static void channel_fire(struct swv_cq *cq)
{
	struct swv_comp_channel *ch = cq->channel;
	uint64_t one = 1;

	pthread_mutex_lock(&ch->lock);
	if (cq->ch_pending++ == 0)
		swv_list_add_tail(&ch->ready, &cq->ch_entry);
	pthread_mutex_unlock(&ch->lock);
	/* An eventfd counter cannot fill up in practice (2^64 - 2 tokens). */
	if (write(ch->ibch.fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		swv_log(SWV_LOG_ERR, "completion channel: eventfd write failed");
}

/* head/tail accessors: they change only under cq->lock (relaxed loads suffice there);
 * tail's release store publishes the CQE written before it to lock-free readers. */
static inline uint32_t ld(_Atomic uint32_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}

int swv_cq_push(struct swv_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	return swv_cq_push_counted(cq, wc, solicited, NULL, NULL, 0);
}

int swv_cq_push_counted(struct swv_cq *cq, const struct ibv_wc *wc, bool solicited,
			const struct ibv_wc_tm_info *tm, struct ibv_comp_cntr *cntr, uint64_t bytes)
{
	const bool ok = wc->status == IBV_WC_SUCCESS;
	bool fire = false;

	pthread_mutex_lock(&cq->lock);
	uint32_t tail = ld(&cq->tail);
	if (tail - ld(&cq->head) == cq->size) {
		cq->overflow = true;
		/* the WR completed even though its CQE is lost: still counted */
		swv_comp_cntr_count(cntr, ok, bytes);
		pthread_mutex_unlock(&cq->lock);
		swv_comp_cntr_signal(cntr, ok);
		return ENOSPC;
	}
	cq->ring[tail & (cq->size - 1)] = *wc;
	if (cq->ts) /* extended CQ with timestamps: when the CQE was written */
		cq->ts[tail & (cq->size - 1)] = swv_now_ns();
	if (cq->tm) { /* extended CQ with tag-matching info: every CQE gets one (0: none) */
		static const struct ibv_wc_tm_info none;
		cq->tm[tail & (cq->size - 1)] = tm ? *tm : none;
	}
	atomic_store_explicit(&cq->tail, tail + 1, memory_order_release);
	/* Counted before the lock is released: a poller takes this CQE only under the
	 * lock, so it finds the count already raised; a reader that sees the count sees the
	 * tail store before it (the increment is a release). */
	swv_comp_cntr_count(cntr, ok, bytes);
	if (cq->notify == 1 || (cq->notify == 2 && solicited)) {
		cq->notify = 0; /* one event per arm */
		fire = cq->channel != NULL;
	}
	pthread_mutex_unlock(&cq->lock);
	swv_comp_cntr_signal(cntr, ok);
	if (fire)
		channel_fire(cq);
	return 0;
}

static inline bool cq_empty(struct swv_cq *cq)
{
	return atomic_load_explicit(&cq->tail, memory_order_acquire) ==
	       atomic_load_explicit(&cq->head, memory_order_relaxed);
}

int swv_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
	return swv_cq_poll_ts(to_swv_cq(ibcq), num_entries, wc, NULL);
}

int swv_cq_poll_ts(struct swv_cq *cq, int num_entries, struct ibv_wc *wc, uint64_t *ts)
{
	return swv_cq_poll_ext(cq, num_entries, wc, ts, NULL);
}

int swv_cq_poll_ext(struct swv_cq *cq, int num_entries, struct ibv_wc *wc, uint64_t *ts,
		    struct ibv_wc_tm_info *tm)
{
	int n = 0;

	if (num_entries < 0 || (num_entries && !wc))
		return -1;
	/* Empty ring: no lock, no store (the common answer of a busy-polling loop). The
	 * poller then does the context's pending receive work itself when there is any
	 * and nobody else is doing it (swv_progress_drive: no system call while the
	 * context is idle), and looks once more; if someone else is receiving, it yields
	 * so a preempted holder can finish rather than wait out this thread's slice. */
	if (cq_empty(cq)) {
		int done = swv_progress_drive(&to_swv_ctx(cq->ibcq.context)->progress);
		if (done < 0)
			sched_yield();
		if (done <= 0 || cq_empty(cq))
			return 0;
	}
	pthread_mutex_lock(&cq->lock);
	uint32_t head = ld(&cq->head), tail = ld(&cq->tail);
	while (n < num_entries && head != tail) {
		if (ts)
			ts[n] = cq->ts[head & (cq->size - 1)];
		if (tm)
			tm[n] = cq->tm[head & (cq->size - 1)];
		wc[n++] = cq->ring[head & (cq->size - 1)];
		head++;
	}
	atomic_store_explicit(&cq->head, head, memory_order_relaxed);
	pthread_mutex_unlock(&cq->lock);
	return n;
}

int swv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct swv_cq *cq = to_swv_cq(ibcq);

	/* Arming precedes blocking on the channel's fd, where this thread cannot drive
	 * progress: the progress thread must receive again. */
	swv_progress_release(&to_swv_ctx(ibcq->context)->progress);
	pthread_mutex_lock(&cq->lock);
	/* Arming for "any" subsumes a pending "solicited only" arm, never the reverse. */
	if (!solicited_only)
		cq->notify = 1;
	else if (cq->notify == 0)
		cq->notify = 2;
	pthread_mutex_unlock(&cq->lock);
	return 0;
}

uint32_t swv_cq_count(struct swv_cq *cq)
{
	pthread_mutex_lock(&cq->lock);
	uint32_t n = ld(&cq->tail) - ld(&cq->head);
	pthread_mutex_unlock(&cq->lock);
	return n;
}

void swv_cq_clean(struct swv_cq *cq, uint32_t qpn)
{
	if (!cq)
		return; /* an XRC TGT QP before its first message has no CQ */
	pthread_mutex_lock(&cq->lock);
	uint32_t head = ld(&cq->head), tail = ld(&cq->tail), mask = cq->size - 1;
	/* Walk from the newest: keep the others, in order, packed toward the tail. */
	uint32_t keep = tail;
	for (uint32_t i = tail; i != head;) {
		i--;
		if (cq->ring[i & mask].qp_num == qpn)
			continue;
		keep--;
		if (keep != i) {
			cq->ring[keep & mask] = cq->ring[i & mask];
			if (cq->ts)
				cq->ts[keep & mask] = cq->ts[i & mask];
			if (cq->tm)
				cq->tm[keep & mask] = cq->tm[i & mask];
		}
	}
	/* Only head moves (forward), so a lock-free emptiness check stays safe. */
	atomic_store_explicit(&cq->head, keep, memory_order_relaxed);
	pthread_mutex_unlock(&cq->lock);
}

int swv_cq_enable_timestamps(struct swv_cq *cq)
{
	uint64_t *ts = calloc(cq->size, sizeof(*ts));
	if (!ts)
		return ENOMEM;
	pthread_mutex_lock(&cq->lock);
	cq->ts = ts;
	pthread_mutex_unlock(&cq->lock);
	return 0;
}

struct swv_cq *swv_cq_create(struct ibv_context *ibctx, int cqe, void *cq_context,
			     struct swv_comp_channel *ch, int comp_vector)
{
	if (!ibctx || cqe < 1 || cqe > SWV_DEV_MAX_CQE || comp_vector < 0 ||
	    comp_vector >= ibctx->num_comp_vectors || (ch && ch->ibch.context != ibctx)) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_cq *cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	cq->size = roundup_pow2((uint32_t)cqe);
	cq->ring = calloc(cq->size, sizeof(*cq->ring));
	if (!cq->ring) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&cq->lock, NULL);
	swv_list_init(&cq->ch_entry);
	cq->channel = ch;
	if (ch)
		atomic_fetch_add(&ch->users, 1);

	struct ibv_cq *ib = (struct ibv_cq *)&cq->ibcq;
	ib->context = ibctx;
	ib->channel = ch ? &ch->ibch : NULL;
	ib->cq_context = cq_context;
	ib->cqe = (int)cq->size;
	pthread_mutex_init(&ib->mutex, NULL);
	pthread_cond_init(&ib->cond, NULL);
	return cq;
}

int swv_cq_destroy(struct swv_cq *cq)
{
	struct ibv_cq *ib = (struct ibv_cq *)&cq->ibcq;
	uint32_t reported = 0;

	if (atomic_load(&cq->users))
		return EBUSY;
	if (cq->channel) {
		struct swv_comp_channel *ch = cq->channel;
		/* Withdraw undelivered events: their tokens are skipped by get_cq_event. */
		pthread_mutex_lock(&ch->lock);
		if (cq->ch_pending) {
			swv_list_del(&cq->ch_entry);
			cq->ch_pending = 0;
		}
		reported = cq->comp_events_reported;
		pthread_mutex_unlock(&ch->lock);
	}
	/* Unread CQ_ERR events about this CQ are withdrawn (core/async.h), so none can
	 * hand the application a freed CQ later; the ones it read must be acked. */
	uint32_t async_reported = swv_async_withdraw(to_swv_ctx(ib->context), SWV_ASYNC_CQ, ib);
	/* As rdma-core: wait until the application acked every event it was given. */
	pthread_mutex_lock(&ib->mutex);
	while (ib->comp_events_completed != reported ||
	       ib->async_events_completed != async_reported)
		pthread_cond_wait(&ib->cond, &ib->mutex);
	pthread_mutex_unlock(&ib->mutex);

	if (cq->channel)
		atomic_fetch_sub(&cq->channel->users, 1);
	pthread_cond_destroy(&ib->cond);
	pthread_mutex_destroy(&ib->mutex);
	pthread_mutex_destroy(&cq->lock);
	swv_pd_buf_free(cq->pd, cq->ring, SWV_RES_TYPE_CQ, cq->ring_custom);
	if (cq->pd)
		atomic_fetch_sub(&cq->pd->users, 1);
	free(cq->ts);
	free(cq->tm);
	free(cq->ex);
	free(cq);
	return 0;
}

int swv_cq_set_pd(struct swv_cq *cq, struct swv_pd *pd)
{
	bool custom;
	struct ibv_wc *ring =
	    swv_pd_buf_alloc(pd, cq->size, sizeof(*ring), SWV_RES_TYPE_CQ, &custom);
	if (!ring)
		return ENOMEM;
	free(cq->ring); /* nothing was ever pushed into it */
	cq->ring = ring;
	cq->ring_custom = custom;
	cq->pd = pd;
	atomic_fetch_add(&pd->users, 1);
	return 0;
}

int swv_cq_resize(struct swv_cq *cq, int cqe)
{
	if (cqe < 1 || cqe > SWV_DEV_MAX_CQE)
		return EINVAL;
	uint32_t size = roundup_pow2((uint32_t)cqe);
	bool custom;
	struct ibv_wc *ring =
	    swv_pd_buf_alloc(cq->pd, size, sizeof(*ring), SWV_RES_TYPE_CQ, &custom);
	/* Timestamps (extended CQs) move with their CQEs; cq->ts is set once, at
	 * creation, so reading it here without the lock is safe. */
	uint64_t *ts = cq->ts ? calloc(size, sizeof(*ts)) : NULL;
	struct ibv_wc_tm_info *tm = cq->tm ? calloc(size, sizeof(*tm)) : NULL;
	if (!ring || (cq->ts && !ts) || (cq->tm && !tm)) {
		swv_pd_buf_free(cq->pd, ring, SWV_RES_TYPE_CQ, custom);
		free(ts);
		free(tm);
		return ENOMEM;
	}

	pthread_mutex_lock(&cq->lock);
	uint32_t head = ld(&cq->head), n = ld(&cq->tail) - head;
	if (n > size) {
		pthread_mutex_unlock(&cq->lock);
		swv_pd_buf_free(cq->pd, ring, SWV_RES_TYPE_CQ, custom);
		free(ts);
		free(tm);
		return EINVAL; /* would drop completions */
	}
	for (uint32_t i = 0; i < n; i++) {
		ring[(head + i) & (size - 1)] = cq->ring[(head + i) & (cq->size - 1)];
		if (ts)
			ts[(head + i) & (size - 1)] = cq->ts[(head + i) & (cq->size - 1)];
		if (tm)
			tm[(head + i) & (size - 1)] = cq->tm[(head + i) & (cq->size - 1)];
	}
	struct ibv_wc *old = cq->ring;
	uint64_t *old_ts = cq->ts;
	struct ibv_wc_tm_info *old_tm = cq->tm;
	bool old_custom = cq->ring_custom;
	cq->ring = ring;
	cq->ring_custom = custom;
	if (ts)
		cq->ts = ts;
	if (tm)
		cq->tm = tm;
	cq->size = size;
	/* head and tail keep their values (the CQEs moved to the same slots modulo the
	 * new size): a lock-free reader comparing them is never misled. */
	cq->overflow = false;
	((struct ibv_cq *)&cq->ibcq)->cqe = (int)size;
	pthread_mutex_unlock(&cq->lock);
	swv_pd_buf_free(cq->pd, old, SWV_RES_TYPE_CQ, old_custom);
	if (ts)
		free(old_ts);
	if (tm)
		free(old_tm);
	return 0;
}
