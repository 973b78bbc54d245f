/*
 * Triggered operations (docs/counters.md, "Counters that drive work"): a send WR or a
 * counter operation held until a completion counter's count reaches a threshold.
 *
 * Data and locks
 *  - ctx->trig_lock (a leaf: nothing is taken while it is held, and no counter is
 *    updated under it, because an update may come back here) protects every list
 *    below: each counter's held triggers (swv_comp_cntr.trig_list, sorted by
 *    threshold, then post order), each QP's triggers (swv_qp.trig_list), the
 *    context's ready queue (ctx->trig_ready, FIFO), trig_watch/trig_refs of counters
 *    and the state of every trigger. It may be taken under qp->lock and cq->lock.
 *  - A counter update that reaches a held threshold (or changes the error count) only
 *    moves the due triggers, in order, to the ready queue: the update may run under
 *    another QP's lock (the completion path), so issuing there could deadlock or
 *    recurse. The ready queue is then run by swv_trig_run at a point where the caller
 *    holds no lock: the end of post_send, of ibv_inc/set_comp_cntr, of modify_qp, of a
 *    receive pass (the progress thread's or a driving application thread's). Moving a
 *    trigger to the queue also kicks the progress thread, so a queued trigger is
 *    always run even if its pusher reaches no such point.
 *  - ctx->trig_run_lock is held by the one thread running the queue (so triggers are
 *    issued in queue order) and by QP destroy, which then knows no runner still holds
 *    a trigger of that QP. Order: trig_run_lock -> qp->lock -> cq->lock -> trig_lock.
 *  - A held WR reserves its send-queue slot: qp->trig_held counts them and post_send
 *    checks used + trig_held against max_send_wr. It is incremented under qp->lock,
 *    decremented when the WR enters the ring (under qp->lock) or is dropped.
 *  - A counter with held triggers counts one watcher (watchers += 1 while its
 *    list is not empty, trig_watch) and publishes its smallest held threshold in trig_at, so the
 *    data path takes the slow notify path only then. Poster: store trig_at,
 *    watchers++, then load the counts; updater: add, load watchers, load trig_at --
 *    all seq_cst, so one of the two sees the other (as for waiters, comp_cntr.h).
 */
#ifndef SWV_CORE_TRIG_H
#define SWV_CORE_TRIG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/qp.h"
#include "util/list.h"

struct swv_comp_cntr;
struct swv_context;

enum swv_trig_kind {
	SWV_TRIG_WR,	   /* a send WR for qp */
	SWV_TRIG_KIND_ADD, /* add value to dst */
	SWV_TRIG_KIND_SET, /* set dst to value */
};

enum swv_trig_state {
	SWV_TRIG_HELD,	  /* on src->trig_list, waiting */
	SWV_TRIG_READY,	  /* on ctx->trig_ready: due, or to be flushed */
	SWV_TRIG_RUNNING, /* taken off every list by the runner */
};

struct swv_trig {
	struct swv_list entry;	  /* src->trig_list or ctx->trig_ready */
	struct swv_list qp_entry; /* qp->trig_list (WR triggers while HELD/READY) */
	struct swv_comp_cntr *src;
	uint64_t threshold;
	uint64_t err_base; /* src's error count when posted: any change flushes */
	uint64_t seq;	   /* post order, for equal thresholds */
	enum swv_trig_kind kind;
	enum swv_trig_state state;
	bool flush; /* src's error count changed first: complete as an error */
	/* SWV_TRIG_WR */
	struct swv_qp *qp;
	uint32_t qp_gen; /* qp->trig_gen when posted: a RESET since drops it */
	/* counter ops */
	struct swv_comp_cntr *dst;
	uint64_t value;
	/* SWV_TRIG_WR: the WQE as post_send built it (qp->sq.stride bytes) */
	_Alignas(8) unsigned char wqe[];
};

/* A trigger of kind SWV_TRIG_WR with room for qp's WQE, zeroed; NULL on ENOMEM. */
struct swv_trig *swv_trig_alloc(size_t wqe_bytes);

/* Hold t (fields filled, src set) on src: takes trig_lock, links it, records the error
 * base, and queues it at once if the threshold is already reached. For WR triggers the
 * caller holds qp->lock and has counted t in qp->trig_held. */
void swv_trig_hold(struct swv_context *ctx, struct swv_trig *t);

/* Counter update slow path (comp_cntr notify): queue what is due on c. */
void swv_trig_cntr_update(struct swv_comp_cntr *c);

/* For the runner (src/transport/trig_run.c), holding ctx->trig_run_lock: take the oldest ready
 * trigger off every list (RUNNING), NULL when none; then, once it was issued, drop
 * its references, free it and count it done. */
struct swv_trig *swv_trig_next_ready(struct swv_context *ctx);
void swv_trig_retire(struct swv_context *ctx, struct swv_trig *t);
/* qp->lock held: move every HELD or READY trigger of qp onto out (initialised
 * here), in post order; then free such a list (no lock held but qp->lock). */
void swv_trig_qp_take(struct swv_qp *qp, struct swv_list *out);
void swv_trig_free_list(struct swv_context *ctx, struct swv_list *l);

/* qp->lock held: RESET drops its held WRs without completions. */
void swv_trig_qp_drop(struct swv_qp *qp);
/* QP destroy, no lock held: drop its WRs and wait out a runner that holds one. */
void swv_trig_qp_destroy(struct swv_qp *qp);

/* swv_cancel_triggered: drop every trigger still held on c (not those already due).
 * Returns how many were dropped. */
uint64_t swv_trig_cancel(struct swv_comp_cntr *c);

/* Counter destroy: true while triggers wait on c or target it. */
bool swv_trig_cntr_busy(struct swv_comp_cntr *c);

/* Context close: free whatever is left. */
void swv_trig_release_all(struct swv_context *ctx);

#endif
