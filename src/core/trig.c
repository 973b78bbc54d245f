/*
 * Triggered operations: held lists and the ready queue. Rules: trig.h. Issuing what
 * is due is the transport's (src/transport/trig_run.c).
 */
#include "core/trig.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/comp_cntr.h"
#include "core/completion.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/async.h"
#include "core/qp.h"

struct swv_trig *swv_trig_alloc(size_t wqe_bytes)
{
	return calloc(1, sizeof(struct swv_trig) + wqe_bytes);
}

static struct swv_context *cntr_ctx(struct swv_comp_cntr *c)
{
	return to_swv_ctx(c->ibcntr.context);
}

/* trig_lock held: trig_at follows the head of c's list, and the counter holds one
 * watcher reference exactly while the list is not empty (trig_at first: trig.h). */
static void held_changed(struct swv_comp_cntr *c)
{
	bool want = !swv_list_empty(&c->trig_list);
	if (want)
		atomic_store(&c->trig_at,
			     swv_list_entry(c->trig_list.next, struct swv_trig, entry)->threshold);
	else
		atomic_store(&c->trig_at, UINT64_MAX);
	if (want != c->trig_watch) {
		c->trig_watch = want;
		if (want)
			atomic_fetch_add(&c->watchers, 1);
		else
			atomic_fetch_sub(&c->watchers, 1);
	}
}

/* trig_lock held: move what is due on c to the ready queue, in list order. An error
 * count that differs from a trigger's base makes it due as a flush. Returns true if
 * anything moved. */
static bool collect_due(struct swv_context *ctx, struct swv_comp_cntr *c)
{
	uint64_t comp = atomic_load(c->comp), err = atomic_load(c->err);
	struct swv_list *pos, *tmp;
	bool moved = false;

	swv_list_for_each_safe(pos, tmp, &c->trig_list) {
		struct swv_trig *t = swv_list_entry(pos, struct swv_trig, entry);
		if (t->err_base != err)
			t->flush = true;
		else if (t->threshold > comp)
			continue; /* later ones may still be flushes */
		swv_list_del(&t->entry);
		t->state = SWV_TRIG_READY;
		swv_list_add_tail(&ctx->trig_ready, &t->entry);
		atomic_fetch_add(&ctx->trig_nready, 1);
		moved = true;
	}
	held_changed(c);
	return moved;
}

void swv_trig_hold(struct swv_context *ctx, struct swv_trig *t)
{
	struct swv_comp_cntr *c = t->src;
	struct swv_list *pos;

	pthread_mutex_lock(&ctx->trig_lock);
	t->seq = ++ctx->trig_seq;
	t->state = SWV_TRIG_HELD;
	c->trig_refs++;
	if (t->dst)
		t->dst->trig_refs++;
	/* Sorted by threshold; equal thresholds keep post order. */
	swv_list_for_each(pos, &c->trig_list) {
		if (swv_list_entry(pos, struct swv_trig, entry)->threshold > t->threshold)
			break;
	}
	swv_list_add_tail(pos, &t->entry);
	if (t->kind == SWV_TRIG_WR)
		swv_list_add_tail(&t->qp->trig_list, &t->qp_entry);
	else
		swv_list_init(&t->qp_entry);
	held_changed(c);
	/* After watchers++ (see trig.h): an error counted before this load happened
	 * before the post and does not concern the trigger. */
	t->err_base = atomic_load(c->err);
	(void)collect_due(ctx, c); /* the poster runs the queue on its way out */
	pthread_mutex_unlock(&ctx->trig_lock);
}

void swv_trig_cntr_update(struct swv_comp_cntr *c)
{
	struct swv_context *ctx = cntr_ctx(c);
	bool moved;

	pthread_mutex_lock(&ctx->trig_lock);
	moved = !swv_list_empty(&c->trig_list) && collect_due(ctx, c);
	pthread_mutex_unlock(&ctx->trig_lock);
	if (moved)
		swv_progress_kick(&ctx->progress, 0); /* in case the updater reaches no run point */
}

/* trig_lock held: t leaves every list for good; its references go. */
static void trig_unref(struct swv_trig *t)
{
	t->src->trig_refs--;
	if (t->dst)
		t->dst->trig_refs--;
}

struct swv_trig *swv_trig_next_ready(struct swv_context *ctx)
{
	struct swv_trig *t = NULL;
	pthread_mutex_lock(&ctx->trig_lock);
	if (!swv_list_empty(&ctx->trig_ready)) {
		t = swv_list_entry(ctx->trig_ready.next, struct swv_trig, entry);
		swv_list_del(&t->entry);
		swv_list_del(&t->qp_entry);
		t->state = SWV_TRIG_RUNNING;
	}
	pthread_mutex_unlock(&ctx->trig_lock);
	return t;
}

void swv_trig_retire(struct swv_context *ctx, struct swv_trig *t)
{
	pthread_mutex_lock(&ctx->trig_lock);
	trig_unref(t);
	pthread_mutex_unlock(&ctx->trig_lock);
	free(t);
	/* Only now: a caller that finds the count at 0 knows that what it made due
	 * has been issued, by itself or by another runner. */
	atomic_fetch_sub_explicit(&ctx->trig_nready, 1, memory_order_release);
}

/* trig_lock held: unlink every HELD or READY trigger of qp onto 'out', in post order
 * (RUNNING ones belong to the runner). */
static void take_qp_triggers(struct swv_context *ctx, struct swv_qp *qp, struct swv_list *out)
{
	struct swv_list *pos, *tmp;
	swv_list_for_each_safe(pos, tmp, &qp->trig_list) {
		struct swv_trig *t = swv_list_entry(pos, struct swv_trig, qp_entry);
		swv_list_del(&t->qp_entry);
		swv_list_del(&t->entry);
		if (t->state == SWV_TRIG_HELD) {
			held_changed(t->src);
		} else {
			atomic_fetch_sub(&ctx->trig_nready, 1);
		}
		swv_list_add_tail(out, &t->entry);
	}
}

void swv_trig_free_list(struct swv_context *ctx, struct swv_list *l)
{
	struct swv_list *pos, *tmp;
	pthread_mutex_lock(&ctx->trig_lock);
	swv_list_for_each_safe(pos, tmp, l) {
		struct swv_trig *t = swv_list_entry(pos, struct swv_trig, entry);
		swv_list_del(&t->entry);
		trig_unref(t);
		free(t);
	}
	pthread_mutex_unlock(&ctx->trig_lock);
}

void swv_trig_qp_take(struct swv_qp *qp, struct swv_list *out)
{
	struct swv_context *ctx = qp->ctx;
	swv_list_init(out);
	pthread_mutex_lock(&ctx->trig_lock);
	take_qp_triggers(ctx, qp, out);
	pthread_mutex_unlock(&ctx->trig_lock);
}

void swv_trig_qp_drop(struct swv_qp *qp)
{
	struct swv_context *ctx = qp->ctx;
	struct swv_list out, *pos;

	qp->trig_gen++; /* those a runner holds now are dropped when it sees the QP */
	swv_list_init(&out);
	pthread_mutex_lock(&ctx->trig_lock);
	take_qp_triggers(ctx, qp, &out);
	pthread_mutex_unlock(&ctx->trig_lock);
	swv_list_for_each(pos, &out) atomic_fetch_sub(&qp->trig_held, 1);
	swv_trig_free_list(ctx, &out);
}

void swv_trig_qp_destroy(struct swv_qp *qp)
{
	struct swv_context *ctx = qp->ctx;
	/* Holding the run lock, no runner holds a trigger of this QP. */
	pthread_mutex_lock(&ctx->trig_run_lock);
	pthread_mutex_lock(&qp->lock);
	swv_trig_qp_drop(qp);
	pthread_mutex_unlock(&qp->lock);
	pthread_mutex_unlock(&ctx->trig_run_lock);
}

uint64_t swv_trig_cancel(struct swv_comp_cntr *c)
{
	struct swv_context *ctx = cntr_ctx(c);
	struct swv_list *pos, *tmp;
	uint64_t n = 0;

	pthread_mutex_lock(&ctx->trig_lock);
	swv_list_for_each_safe(pos, tmp, &c->trig_list) {
		struct swv_trig *t = swv_list_entry(pos, struct swv_trig, entry);
		swv_list_del(&t->entry);
		if (t->kind == SWV_TRIG_WR) {
			swv_list_del(&t->qp_entry);
			/* Under trig_lock, so QP destroy (which takes it) cannot have freed
			 * the QP: its triggers would have left this list first. */
			atomic_fetch_sub(&t->qp->trig_held, 1);
		}
		trig_unref(t);
		free(t);
		n++;
	}
	held_changed(c);
	pthread_mutex_unlock(&ctx->trig_lock);
	return n;
}

bool swv_trig_cntr_busy(struct swv_comp_cntr *c)
{
	struct swv_context *ctx = cntr_ctx(c);
	pthread_mutex_lock(&ctx->trig_lock);
	bool busy = c->trig_refs != 0;
	pthread_mutex_unlock(&ctx->trig_lock);
	return busy;
}

void swv_trig_release_all(struct swv_context *ctx)
{
	struct swv_list *pos, *tmp, *cp;

	pthread_mutex_lock(&ctx->trig_lock);
	swv_list_for_each_safe(pos, tmp, &ctx->trig_ready) {
		swv_list_del(pos);
		free(swv_list_entry(pos, struct swv_trig, entry));
	}
	atomic_store(&ctx->trig_nready, 0);
	swv_list_for_each(cp, &ctx->cntr_list) {
		struct swv_comp_cntr *c = swv_list_entry(cp, struct swv_comp_cntr, ctx_entry);
		swv_list_for_each_safe(pos, tmp, &c->trig_list) {
			swv_list_del(pos);
			free(swv_list_entry(pos, struct swv_trig, entry));
		}
		c->trig_refs = 0;
	}
	pthread_mutex_unlock(&ctx->trig_lock);
}
