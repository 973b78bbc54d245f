/*
 * Shared receive queues (rules and locking in srq.h).
 *
 * Errors follow rdma-core and rxe: create checks max_wr 1..SWV_SRQ_MAX_WR and
 * max_sge <= SWV_SRQ_MAX_SGE (EINVAL; 0 becomes 1); srq_limit is ignored at create, as
 * ibv_create_srq(3) says (query reports 0 until ibv_modify_srq arms it). Modify takes
 * IBV_SRQ_LIMIT (arm; 0 disarms; above max_wr is EINVAL) and IBV_SRQ_MAX_WR (resize:
 * IBV_DEVICE_SRQ_RESIZE is advertised; fewer slots than WQEs posted, or than an armed
 * limit, is EINVAL); other mask bits are EINVAL. Posting: too many SGEs EINVAL, full
 * ENOMEM, *bad_wr names the first WR not posted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/async.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/limits.h"
#include "core/pd.h"
#include "core/srq.h"
#include "core/xrcd.h"
#include "util/log.h"

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

/* A ring for max_wr WQEs of max_sge SGEs each. */
static int ring_alloc(struct swv_wq *q, struct swv_pd *pd, uint32_t max_wr, uint32_t max_sge)
{
	q->max_wr = max_wr;
	q->max_sge = max_sge;
	q->stride = ((uint32_t)swv_srq_wqe_size(max_sge) + 7) & ~7u;
	q->nslots = pow2_at_least(max_wr);
	q->head = q->tail = 0;
	q->buf = swv_pd_buf_alloc(pd, q->nslots, q->stride, SWV_RES_TYPE_SRQ, &q->buf_custom);
	return q->buf ? 0 : ENOMEM;
}

struct swv_srq *swv_srq_create(struct swv_pd *pd, struct ibv_srq_attr *attr, void *srq_context)
{
	struct swv_context *ctx = to_swv_ctx(pd->ibpd.context);
	struct swv_srq *srq;
	int rc;

	if (attr->max_wr < 1 || attr->max_wr > SWV_SRQ_MAX_WR || attr->max_sge > SWV_SRQ_MAX_SGE) {
		errno = EINVAL;
		return NULL;
	}
	/* No SGE at all would still take zero-length messages; give one, as rxe does
	 * (its minimum), and report it. */
	if (attr->max_sge < 1)
		attr->max_sge = 1;
	/* max_srq is a per-context limit, as a device's SRQ table is. */
	if (atomic_fetch_add(&ctx->nsrq, 1) >= SWV_MAX_SRQ) {
		atomic_fetch_sub(&ctx->nsrq, 1);
		errno = ENOMEM;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		rc = ENOMEM;
		goto err;
	}
	rc = ring_alloc(&srq->wq, pd, attr->max_wr, attr->max_sge);
	if (rc)
		goto err_free;
	srq->ctx = ctx;
	srq->wq.posted = &ctx->progress.rq_posted;
	srq->pd = pd;
	srq->max_sge = attr->max_sge;
	srq->srqn = swv_srq_num_alloc();
	pthread_mutex_init(&srq->lock, NULL);

	struct ibv_srq *ib = &srq->ibsrq;
	ib->context = pd->ibpd.context;
	ib->srq_context = srq_context;
	ib->pd = &pd->ibpd;
	ib->handle = 0;
	pthread_mutex_init(&ib->mutex, NULL);
	pthread_cond_init(&ib->cond, NULL);
	ib->events_completed = 0;

	atomic_fetch_add(&pd->users, 1);
	/* What the SRQ really provides (exactly what was asked); the limit is not armed
	 * by create. */
	attr->srq_limit = 0;
	return srq;

err_free:
	free(srq);
err:
	atomic_fetch_sub(&ctx->nsrq, 1);
	errno = rc;
	return NULL;
}

/* Resize the ring to max_wr WQEs keeping the posted ones in order (srq->lock held).
 * The responder copies WQEs out under the lock, so nothing points into the old ring. */
static int ring_resize(struct swv_srq *srq, uint32_t max_wr)
{
	struct swv_wq *q = &srq->wq, n;
	uint32_t used = swv_wq_used(q);

	if (max_wr < used)
		return EINVAL; /* would drop posted WQEs */
	int rc = ring_alloc(&n, srq->pd, max_wr, q->max_sge);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < used; i++)
		memcpy(swv_wq_slot(&n, i), swv_wq_slot(q, q->head + i), q->stride);
	n.tail = used;
	n.posted = q->posted; /* the same WQEs stay posted */
	swv_pd_buf_free(srq->pd, q->buf, SWV_RES_TYPE_SRQ, q->buf_custom);
	*q = n;
	return 0;
}

int swv_srq_modify(struct swv_srq *srq, const struct ibv_srq_attr *attr, int mask)
{
	int rc = 0;

	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	pthread_mutex_lock(&srq->lock);
	uint32_t max_wr = srq->wq.max_wr;
	if (mask & IBV_SRQ_MAX_WR) {
		if (attr->max_wr < 1 || attr->max_wr > SWV_SRQ_MAX_WR) {
			rc = EINVAL;
			goto out;
		}
		max_wr = attr->max_wr;
	}
	uint32_t limit = (mask & IBV_SRQ_LIMIT) ? attr->srq_limit : srq->limit;
	/* A limit can only be crossed if it fits in the queue (rxe: EINVAL). */
	if (limit > max_wr) {
		rc = EINVAL;
		goto out;
	}
	if ((mask & IBV_SRQ_MAX_WR) && max_wr != srq->wq.max_wr) {
		rc = ring_resize(srq, max_wr);
		if (rc)
			goto out;
	}
	/* Arming: the event fires when a take leaves fewer than limit WQEs; 0 disarms.
	 * Arming below the current count does not fire at once (the event is raised by a
	 * receive crossing the limit, as rxe does). */
	if (mask & IBV_SRQ_LIMIT)
		srq->limit = limit;
out:
	pthread_mutex_unlock(&srq->lock);
	return rc;
}

int swv_srq_query(struct swv_srq *srq, struct ibv_srq_attr *attr)
{
	pthread_mutex_lock(&srq->lock);
	attr->max_wr = srq->wq.max_wr;
	attr->max_sge = srq->max_sge;
	attr->srq_limit = srq->limit;
	pthread_mutex_unlock(&srq->lock);
	return 0;
}

int swv_srq_destroy(struct swv_srq *srq)
{
	struct ibv_srq *ib = &srq->ibsrq;

	/* A QP holds a reference from create to destroy; the IB rule is that the SRQ
	 * outlives its QPs. */
	if (srq->xrcd) {
		/* out of the domain first: no TGT QP can find it after this */
		if (swv_xrc_srq_unlink(srq))
			return EBUSY;
		atomic_fetch_sub(&srq->xrcd->users, 1);
		atomic_fetch_sub(&srq->cq->users, 1);
	} else if (atomic_load(&srq->users)) {
		return EBUSY;
	} else if (srq->tm) {
		atomic_fetch_sub(&srq->cq->users, 1);
		swv_srq_tm_free(srq);
	}
	/* No QP can take from it, so nothing raises events for it any more. */
	swv_async_wait_acked(&ib->mutex, &ib->cond, &ib->events_completed,
			     swv_async_withdraw(srq->ctx, SWV_ASYNC_SRQ, ib));
	atomic_fetch_sub(&srq->pd->users, 1);
	atomic_fetch_sub(&srq->ctx->nsrq, 1);
	pthread_cond_destroy(&ib->cond);
	pthread_mutex_destroy(&ib->mutex);
	pthread_mutex_destroy(&srq->lock);
	/* WQEs still posted are released without completions */
	swv_wq_retire(&srq->wq, swv_wq_used(&srq->wq));
	swv_pd_buf_free(srq->pd, srq->wq.buf, SWV_RES_TYPE_SRQ, srq->wq.buf_custom);
	free(srq);
	return 0;
}

int swv_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	/* As ibv_post_recv (rxe's provider checks a QP's RQ so, not an SRQ; one rule
	 * for both receive queues) */
	if (!bad)
		return EINVAL;
	*bad = NULL;
	if (!wr)
		return EINVAL;
	if (!ibsrq) {
		*bad = wr;
		return EINVAL;
	}
	struct swv_srq *srq = to_swv_srq(ibsrq);
	int err = 0;

	pthread_mutex_lock(&srq->lock);
	for (; wr; wr = wr->next) {
		err = swv_wq_post_recv(&srq->wq, wr);
		if (err) {
			*bad = wr;
			break;
		}
	}
	pthread_mutex_unlock(&srq->lock);
	return err;
}

bool swv_srq_take(struct swv_srq *srq, struct swv_recv_wqe *out)
{
	pthread_mutex_lock(&srq->lock);
	bool ok = swv_srq_take_locked(srq, out);
	pthread_mutex_unlock(&srq->lock);
	return ok;
}

bool swv_srq_take_locked(struct swv_srq *srq, struct swv_recv_wqe *out)
{
	struct swv_wq *q = &srq->wq;

	if (swv_wq_used(q) == 0)
		return false;
	const struct swv_recv_wqe *w = swv_wq_slot(q, q->head);
	/* post_srq_recv bounded num_sge by max_sge; out has room for max_sge SGEs */
	memcpy(out, w, swv_srq_wqe_size(SWV_MIN(w->num_sge, srq->max_sge)));
	swv_wq_retire(q, 1);
	if (srq->limit && swv_wq_used(q) < srq->limit) {
		/* One-shot: the application re-arms with ibv_modify_srq(IBV_SRQ_LIMIT). */
		srq->limit = 0;
		swv_async_event(srq->ctx, IBV_EVENT_SRQ_LIMIT_REACHED, &srq->ibsrq);
	}
	return true;
}

uint32_t swv_srq_count(struct swv_srq *srq)
{
	pthread_mutex_lock(&srq->lock);
	uint32_t n = swv_wq_used(&srq->wq);
	pthread_mutex_unlock(&srq->lock);
	return n;
}

struct ibv_srq *swv_create_srq_ex(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *attr)
{
	if (!ctx || !attr) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_RESERVED - 1)) {
		errno = EINVAL; /* bits this API version does not define */
		return NULL;
	}
	bool typed = attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE;
	if (typed && attr->srq_type > IBV_SRQT_TM) {
		errno = EINVAL;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd || attr->pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	bool xrc = typed && attr->srq_type == IBV_SRQT_XRC;
	/* A TM SRQ (core/srq_tm.c) needs its tm_cap and, as an XRC SRQ, the CQ all its
	 * completions go to (mlx5: EINVAL without them). */
	if (typed && attr->srq_type == IBV_SRQT_TM) {
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TM) ||
		    !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq ||
		    attr->cq->context != ctx) {
			errno = EINVAL;
			return NULL;
		}
		struct swv_srq *tsrq =
		    swv_srq_tm_create(to_swv_pd(attr->pd), to_swv_cq(attr->cq), attr);
		return tsrq ? &tsrq->ibsrq : NULL;
	}
	/* An XRC SRQ needs its domain and the CQ its receives complete on (the TGT QP
	 * that delivers into it has no CQ); a basic SRQ uses neither, and those bits are
	 * ignored for it, as the providers do. */
	if (xrc && (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd ||
		    attr->xrcd->context != ctx || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ||
		    !attr->cq || attr->cq->context != ctx)) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_srq *srq = swv_srq_create(to_swv_pd(attr->pd), &attr->attr, attr->srq_context);
	if (srq)
		srq->ibsrq.context = ctx; /* an imported PD's: the importing context */
	if (srq && xrc) {
		srq->xrcd = to_swv_xrcd(attr->xrcd);
		srq->cq = to_swv_cq(attr->cq);
		atomic_fetch_add(&srq->xrcd->users, 1);
		atomic_fetch_add(&srq->cq->users, 1);
		swv_xrc_srq_link(srq); /* last: TGT QPs can deliver into it from now on */
	}
	return srq ? &srq->ibsrq : NULL;
}
