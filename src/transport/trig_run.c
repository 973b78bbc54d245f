/*
 * Triggered operations, the issuing half (core/trig.h keeps the lists): a due send WR
 * enters the send queue and the requester, a flushed one completes in error, a
 * counter operation is applied.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/async.h"
#include "core/comp_cntr.h"
#include "core/completion.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/qp.h"
#include "core/trig.h"
#include "link/endpoint.h"
#include "transport/qp_transport.h"
#include "transport/requester.h"
#include "util/compiler.h"

/* qp->lock held: a held WR completes with IBV_WC_WR_FLUSH_ERR (errors always give a
 * CQE), counted as an error by the QP's counter for its kind. */
static void complete_flushed(struct swv_qp *qp, struct swv_trig *t)
{
	const struct swv_send_wqe *w = (const struct swv_send_wqe *)t->wqe;
	struct swv_completion c = {
	    .slot = swv_req_cntr_slot(w->opcode),
	    .cq = qp->scq,
	    .wc = {.wr_id = w->wr_id,
		   .status = IBV_WC_WR_FLUSH_ERR,
		   .opcode = swv_req_wc_opcode(w->opcode),
		   .qp_num = qp->qpn},
	};
	if (swv_complete(qp, &c))
		swv_async_event(qp->ctx, IBV_EVENT_CQ_ERR, &qp->scq->ibcq);
}

/* qp->lock held: the WR leaves its reserved slot for the ring, as if posted now. */
static void issue_wr(struct swv_qp *qp, struct swv_trig *t)
{
	struct swv_send_wqe *w = swv_wq_slot(&qp->sq, qp->sq.tail);
	memcpy(w, t->wqe, qp->sq.stride);
	qp->sq.tail++;
	atomic_fetch_sub(&qp->trig_held, 1);
	swv_progress_sq_add(&qp->ctx->progress, 1);
	if (qp->state == IBV_QPS_ERR) {
		swv_qp_to_error(qp);
	} else if (qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD) {
		swv_ep_batch_begin();
		swv_req_post(qp);
		swv_ep_batch_end();
	}
}

static void run_one(struct swv_trig *t)
{
	switch (t->kind) {
	case SWV_TRIG_WR: {
		struct swv_qp *qp = t->qp;
		pthread_mutex_lock(&qp->lock);
		if (t->qp_gen != qp->trig_gen || qp->state < IBV_QPS_RTS) {
			/* A RESET came between due and issue: dropped, as RESET drops. */
			atomic_fetch_sub(&qp->trig_held, 1);
		} else if (t->flush) {
			atomic_fetch_sub(&qp->trig_held, 1);
			complete_flushed(qp, t);
		} else {
			issue_wr(qp, t);
		}
		pthread_mutex_unlock(&qp->lock);
		break;
	}
	case SWV_TRIG_KIND_ADD:
		if (t->flush)
			swv_comp_cntr_add(t->dst, true, 1);
		else
			swv_comp_cntr_add(t->dst, false, t->value);
		break;
	case SWV_TRIG_KIND_SET:
		if (t->flush)
			swv_comp_cntr_add(t->dst, true, 1);
		else
			swv_comp_cntr_store(t->dst, false, t->value);
		break;
	}
}

void swv_trig_run(struct swv_context *ctx)
{
	if (swv_likely(atomic_load_explicit(&ctx->trig_nready, memory_order_acquire) == 0))
		return;
	/* One runner at a time keeps the queue's order; a thread that finds another
	 * running waits for it, then runs what is left (possibly nothing). */
	pthread_mutex_lock(&ctx->trig_run_lock);
	struct swv_trig *t;
	while ((t = swv_trig_next_ready(ctx))) {
		run_one(t); /* may queue more: they run in this loop */
		swv_trig_retire(ctx, t);
	}
	pthread_mutex_unlock(&ctx->trig_run_lock);
}

void swv_trig_qp_flush(struct swv_qp *qp)
{
	struct swv_context *ctx = qp->ctx;
	struct swv_list out, *pos;

	if (atomic_load(&qp->trig_held) == 0)
		return;
	swv_trig_qp_take(qp, &out);
	/* Outside trig_lock: a completion updates a counter, which may come back here. */
	swv_list_for_each(pos, &out) {
		struct swv_trig *t = swv_list_entry(pos, struct swv_trig, entry);
		atomic_fetch_sub(&qp->trig_held, 1);
		complete_flushed(qp, t);
	}
	swv_trig_free_list(ctx, &out);
}
