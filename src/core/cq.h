/*
 * Completion queues and completion channels. Owner: core.
 * A CQ is a ring of ibv_wc written by producers (progress thread, posting threads)
 * and drained by ibv_poll_cq without system calls.
 *
 * Events: an armed CQ that receives a matching completion disarms itself and queues
 * one event on its channel: the CQ goes on the channel's 'ready' list (counted in
 * ch_pending) and one token is added to the channel's eventfd (semaphore mode), which
 * is what the application polls or blocks on. ibv_get_cq_event takes a token and pops
 * a CQ; a token whose event was withdrawn by ibv_destroy_cq is skipped. So a destroyed
 * CQ can never be returned by a later ibv_get_cq_event.
 *
 * Lock order: cq->lock (mutex, ring only) is never held while taking any other
 * lock; ch->lock protects the ready list, cq->ch_pending and cq->comp_events_reported;
 * ibcq.mutex/cond carry comp_events_completed exactly as in rdma-core.
 */
#ifndef SWV_CORE_CQ_H
#define SWV_CORE_CQ_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/list.h"

struct swv_pd;

struct swv_cq_ex;

struct swv_comp_channel {
	struct ibv_comp_channel ibch; /* ibch.fd = eventfd (EFD_SEMAPHORE): one token per event */
	int wfd;                      /* the same eventfd (kept for symmetry; not separately owned) */
	_Atomic unsigned users;       /* CQs bound to it: destroy is EBUSY while > 0 */
	pthread_mutex_t lock;         /* protects ready and the CQs' ch_pending / events_reported */
	struct swv_list ready;        /* CQs with undelivered events, oldest first */
};

struct swv_cq {
	struct ibv_cq_ex ibcq; /* struct ibv_cq is its prefix; ex ops set by create_cq_ex */
	/* Protects ring, size, head, tail, notify, overflow. A mutex, not a spinlock: on
	 * oversubscribed CPUs a spinner can burn its whole time slice waiting for a
	 * preempted holder. head and tail change only under it; they are atomics so that
	 * ibv_poll_cq can see an empty ring without taking the lock (tail is stored with
	 * release after the CQE is written, so a poller that sees it and then takes the
	 * lock finds the CQE). */
	pthread_mutex_t lock;
	struct ibv_wc *ring;
	uint32_t size;     /* ring slots (power of two); capacity = ibcq.cqe = size */
	_Atomic uint32_t head; /* next to poll */
	_Atomic uint32_t tail; /* next to fill */
	int notify;        /* 0, or armed: 1 = any completion, 2 = solicited only */
	bool overflow;
	struct swv_comp_channel *channel;
	_Atomic unsigned users; /* QPs/SRQs referencing it: destroy is EBUSY while > 0 */
	/* under channel->lock */
	struct swv_list ch_entry;     /* in channel->ready while ch_pending > 0 */
	unsigned ch_pending;          /* events queued, not yet taken by ibv_get_cq_event */
	uint32_t comp_events_reported; /* events handed to the application */
	/* Extended CQs (cq_ex.c), NULL for ibv_create_cq CQs: the polling state of the
	 * ibv_cq_ex callbacks, and each ring slot's completion time (ts[i] goes with
	 * ring[i], written by swv_cq_push, under lock) when timestamps were asked for. */
	struct swv_cq_ex *ex;
	uint64_t *ts;
	/* Extended CQs with IBV_WC_EX_WITH_TM_INFO: each slot's tag-matching info (tm[i]
	 * goes with ring[i], as ts), set once at creation. */
	struct ibv_wc_tm_info *tm;
	uint32_t async_events_reported; /* CQ async events handed out; under ctx->async.lock */
	/* The parent domain it was created with (ibv_create_cq_ex), whose allocator gave
	 * the ring when ring_custom; NULL: the ring is calloc'd. */
	struct swv_pd *pd;
	bool ring_custom;
};

static inline struct swv_cq *to_swv_cq(struct ibv_cq *cq)
{
	return (struct swv_cq *)cq;
}

/* Producer: append one completion; fires the channel if armed. Returns 0, or ENOSPC
 * when the CQ is full (the CQE is lost; the caller must move the QP to ERR and raise
 * IBV_EVENT_CQ_ERR). Safe from any thread. */
int swv_cq_push(struct swv_cq *cq, const struct ibv_wc *wc, bool solicited);
/* The same with the CQE's tag-matching info (NULL: none; kept only by a CQ that has
 * cq->tm), counting the completion on cntr (NULL: none) inside the CQ's critical
 * section: a thread that polls the CQE then reads the counter finds it counted, and
 * one that reads the count then polls finds the CQE (comp-cntr.md "Visibility"). */
int swv_cq_push_counted(struct swv_cq *cq, const struct ibv_wc *wc, bool solicited,
			const struct ibv_wc_tm_info *tm, struct ibv_comp_cntr *cntr,
			uint64_t bytes);

/* ibv_context_ops entries. */
int swv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int swv_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* Lifecycle (src/api/cq.c wraps these). create: NULL + errno. */
struct swv_cq *swv_cq_create(struct ibv_context *ibctx, int cqe, void *cq_context,
			     struct swv_comp_channel *ch, int comp_vector);
/* 0, or EBUSY while QPs use it. Waits until every event handed out was acked. */
int swv_cq_destroy(struct swv_cq *cq);
/* Right after create: take the ring from parent domain pd's allocator (core/pd.h) and
 * hold a use of pd. 0 or ENOMEM (the CQ is unchanged then). */
int swv_cq_set_pd(struct swv_cq *cq, struct swv_pd *pd);
/* 0, or EINVAL (bad size, fewer slots than queued completions), ENOMEM. */
int swv_cq_resize(struct swv_cq *cq, int cqe);
/* Number of completions queued (tests, tools). */
uint32_t swv_cq_count(struct swv_cq *cq);

/* ibv_poll_cq with each CQE's completion time in ts[] (ts NULL: as ibv_poll_cq; else
 * the CQ must have timestamps). Returns the number taken, or -1 on bad arguments. */
int swv_cq_poll_ts(struct swv_cq *cq, int num_entries, struct ibv_wc *wc, uint64_t *ts);
/* ... and each CQE's tag-matching info in tm[] (tm NULL, or the CQ must have cq->tm). */
int swv_cq_poll_ext(struct swv_cq *cq, int num_entries, struct ibv_wc *wc, uint64_t *ts,
		    struct ibv_wc_tm_info *tm);
/* Record a completion time for every CQE from now on (cq_ex.c, at creation).
 * 0 or ENOMEM. */
int swv_cq_enable_timestamps(struct swv_cq *cq);
/* Discard the CQEs of QP qpn still queued, keeping the others in order (a QP moved
 * to RESET or destroyed, as the mlx4/mlx5 providers clean their CQs). */
void swv_cq_clean(struct swv_cq *cq, uint32_t qpn);

#endif
