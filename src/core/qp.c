/*
 * Queue pairs, the verbs object: create (queues, caps, attributes), publish, destroy.
 * What runs the protocol over it -- posting, the state machine, the error flush, the
 * receive demux and timers -- is the transport's (src/transport/qp_transport.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/async.h"
#include "core/comp_cntr.h"
#include "core/completion.h"
#include "core/context.h"
#include "core/limits.h"
#include "core/mr.h"
#include "core/cq.h"
#include "core/pd.h"
#include "core/qp.h"
#include "core/srq.h"
#include "core/xrcd.h"
#include "core/trig.h"
#include "net/addr.h"
#include "link/endpoint.h"
#include "link/shm.h"
#include "progress/progress.h"
#include "util/log.h"

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

static int wq_init(struct swv_wq *q, struct swv_pd *pd, uint64_t type, uint32_t max_wr,
		   uint32_t stride, uint32_t max_sge)
{
	q->max_wr = max_wr;
	q->max_sge = max_sge;
	q->stride = (stride + 7) & ~7u;
	q->nslots = pow2_at_least(max_wr ? max_wr : 1);
	q->head = q->tail = 0;
	/* a parent domain's allocator provides the ring when it has one */
	q->buf = swv_pd_buf_alloc(pd, q->nslots, q->stride, type, &q->buf_custom);
	return q->buf ? 0 : ENOMEM;
}

static int check_caps(const struct ibv_qp_cap *cap, bool has_srq)
{
	if (cap->max_send_wr > SWV_QP_MAX_WR || cap->max_send_sge > SWV_QP_MAX_SGE ||
	    cap->max_inline_data > SWV_QP_MAX_INLINE)
		return EINVAL;
	if (!has_srq && (cap->max_recv_wr > SWV_QP_MAX_WR || cap->max_recv_sge > SWV_QP_MAX_SGE))
		return EINVAL;
	return 0;
}

struct swv_qp *swv_qp_create(struct swv_pd *pd, struct ibv_qp_init_attr_ex *attr, int *err)
{
	bool ini = attr->qp_type == IBV_QPT_XRC_SEND, tgt = attr->qp_type == IBV_QPT_XRC_RECV;
	/* attr->pd, not pd: an imported PD names its original, the QP is the importer's */
	struct ibv_context *ibctx = tgt ? attr->xrcd->context : attr->pd->context;
	struct swv_context *ctx = to_swv_ctx(ibctx);
	struct ibv_srq *srq_in = ini || tgt ? NULL : attr->srq; /* XRC QPs ignore it */
	struct swv_qp *qp = NULL;
	int rc;

	if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC &&
	    attr->qp_type != IBV_QPT_UD && !ini && !tgt) {
		/* Raw packet and driver QPs are not implemented; a device without them
		 * says so. */
		rc = (attr->qp_type == IBV_QPT_RAW_PACKET || attr->qp_type == IBV_QPT_DRIVER)
			 ? EOPNOTSUPP
			 : EINVAL;
		goto fail;
	}
	/* An XRC INI QP has a send CQ only, a TGT QP no CQ (its receives complete on
	 * the CQ of the SRQ each message names); neither has a receive queue. */
	if (!tgt && (!attr->send_cq || attr->send_cq->context != ibctx ||
		     (!ini && (!attr->recv_cq || attr->recv_cq->context != ibctx)))) {
		rc = EINVAL;
		goto fail;
	}
	/* tag matching is defined for RC only (tm_caps.flags: IBV_TM_CAP_RC) */
	if (srq_in &&
	    (srq_in->context != ibctx || (to_swv_srq(srq_in)->tm && attr->qp_type != IBV_QPT_RC))) {
		rc = EINVAL;
		goto fail;
	}
	rc = check_caps(&attr->cap, srq_in != NULL || ini || tgt);
	if (rc)
		goto fail;

	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		rc = ENOMEM;
		goto fail;
	}
	qp->ctx = ctx;
	qp->pd = pd;
	swv_list_init(&qp->trig_list);
	if (!tgt) {
		qp->scq = to_swv_cq(attr->send_cq);
		qp->rcq = ini ? qp->scq : to_swv_cq(attr->recv_cq);
	}
	qp->type = attr->qp_type;
	if (ini || tgt) {
		qp->type = IBV_QPT_RC;
		qp->xrc = ini ? SWV_XRC_INI : SWV_XRC_TGT;
		qp->xrcd = tgt ? to_swv_xrcd(attr->xrcd) : NULL;
		qp->verbs_xrcd = tgt ? attr->xrcd : NULL;
	}
	qp->state = IBV_QPS_RESET;
	qp->sq_sig_all = attr->sq_sig_all != 0;

	/* Inline data shares the WQE's SGE area: report whichever is larger, so an
	 * application gets all the inline room the slot really has (up to the max). */
	struct ibv_qp_cap cap = attr->cap;
	uint32_t sge_bytes = cap.max_send_sge * (uint32_t)sizeof(struct ibv_sge);
	if (cap.max_inline_data < sge_bytes)
		cap.max_inline_data = SWV_MIN(sge_bytes, SWV_QP_MAX_INLINE);
	uint32_t room = SWV_MAX(sge_bytes, cap.max_inline_data);
	if (srq_in || ini || tgt) {
		/* Receives come from the SRQ: no RQ of its own, and the caps say so (the
		 * requested receive caps are ignored, as rdma-core's providers report). */
		cap.max_recv_wr = 0;
		cap.max_recv_sge = 0;
	}
	if (tgt) {
		/* A TGT QP only responds. */
		memset(&cap, 0, sizeof(cap));
		room = 0;
	}
	qp->cap = cap;

	/* A QP of a TM SRQ: slots beyond max_send_wr for the device's rendezvous READs
	 * (the tagged buffer's SGEs, then the TMH and RVH) and FINs (core/qp.h). */
	struct swv_srq *tm_srq = srq_in && to_swv_srq(srq_in)->tm ? to_swv_srq(srq_in) : NULL;
	uint32_t sq_wr = cap.max_send_wr, sq_room = room;
	if (tm_srq) {
		sq_wr += SWV_TM_SQ_EXTRA;
		sq_room = SWV_MAX(room, tm_srq->max_sge * (uint32_t)sizeof(struct ibv_sge) +
					    SWV_TM_HDR_LEN + SWV_TM_RVH_LEN);
	}
	rc = wq_init(&qp->sq, pd, SWV_RES_TYPE_QP_SQ, sq_wr,
		     (uint32_t)sizeof(struct swv_send_wqe) + sq_room, cap.max_send_sge);
	qp->sq.max_wr = cap.max_send_wr; /* what the application may post */
	if (!rc && srq_in) {
		/* room for the one WQE the responder holds (core/srq.h) */
		qp->srq = to_swv_srq(srq_in);
		qp->srq_rwqe = malloc(swv_srq_wqe_size(qp->srq->max_sge));
		if (qp->srq->tm)
			qp->tm_match = calloc(1, sizeof(*qp->tm_match));
		rc = qp->srq_rwqe && (!qp->srq->tm || qp->tm_match) ? 0 : ENOMEM;
	} else if (!rc && tgt) {
		/* any of the domain's SRQs may be named: room for the most SGEs */
		qp->srq_rwqe = malloc(swv_srq_wqe_size(SWV_SRQ_MAX_SGE));
		rc = qp->srq_rwqe ? 0 : ENOMEM;
	} else if (!rc && !ini)
		rc = wq_init(&qp->rq, pd, SWV_RES_TYPE_QP_RQ, cap.max_recv_wr,
			     (uint32_t)sizeof(struct swv_recv_wqe) +
				 cap.max_recv_sge * (uint32_t)sizeof(struct ibv_sge),
			     cap.max_recv_sge);
	if (rc)
		goto fail_free;
	if (qp->rq.buf)
		qp->rq.posted = &ctx->progress.rq_posted;

	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutex_init(&qp->lock, &ma);
	pthread_mutexattr_destroy(&ma);

	struct ibv_qp *ib = &qp->qpx.qp_base;
	ib->context = ibctx;
	ib->qp_context = attr->qp_context;
	ib->pd = pd ? &pd->ibpd : NULL;
	ib->send_cq = tgt ? NULL : attr->send_cq;
	ib->recv_cq = ini || tgt ? NULL : attr->recv_cq;
	ib->srq = srq_in;
	ib->state = IBV_QPS_RESET;
	ib->qp_type = attr->qp_type;
	pthread_mutex_init(&ib->mutex, NULL);
	pthread_cond_init(&ib->cond, NULL);

	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.cur_qp_state = IBV_QPS_RESET;
	qp->attr.path_mtu = IBV_MTU_1024;
	qp->mtu = 1024;
	if (qp->type == IBV_QPT_UD) {
		/* UD has no path MTU attribute: messages are bounded by the port's active
		 * MTU (roce-wire.md 7.1), which is also what ibv_query_qp reports. */
		qp->mtu = ctx->cfg->mtu_bytes;
		for (enum ibv_mtu m = IBV_MTU_256; m <= IBV_MTU_4096; m++)
			if ((128u << m) == qp->mtu)
				qp->attr.path_mtu = m;
	}
	qp->attr.port_num = 1;
	qp->pkey = swv_ctx_pkey(ctx, 0); /* pkey_index 0 until a modify names another */
	qp->attr.path_mig_state = IBV_MIG_MIGRATED;
	qp->attr.cap = cap;
	attr->cap = cap;
	return qp;

fail_free:
	swv_pd_buf_free(pd, qp->sq.buf, SWV_RES_TYPE_QP_SQ, qp->sq.buf_custom);
	swv_pd_buf_free(pd, qp->rq.buf, SWV_RES_TYPE_QP_RQ, qp->rq.buf_custom);
	free(qp->srq_rwqe);
	free(qp->tm_match);
	free(qp);
fail:
	*err = rc;
	return NULL;
}

int swv_qp_publish(struct swv_qp *qp)
{
	struct ibv_qp *ib = &qp->qpx.qp_base;
	/* Everything the progress thread may look at is initialised: publish. */
	int rc = swv_ctx_qpn_alloc(qp->ctx, qp, &qp->qpn, &qp->ep);
	if (rc)
		return rc;
	ib->qp_num = qp->qpn;
	ib->handle = qp->qpn;

	if (qp->xrc == SWV_XRC_TGT) {
		atomic_fetch_add(&qp->xrcd->users, 1);
		swv_xrc_tgt_link(qp); /* ibv_open_qp finds it from now on */
	} else {
		atomic_fetch_add(&qp->pd->users, 1);
		atomic_fetch_add(&qp->scq->users, 1);
		atomic_fetch_add(&qp->rcq->users, 1);
	}
	if (qp->srq)
		atomic_fetch_add(&qp->srq->users, 1); /* ibv_destroy_srq: EBUSY until destroyed */
	return 0;
}

void swv_qp_discard(struct swv_qp *qp)
{
	pthread_cond_destroy(&qp->qpx.qp_base.cond);
	pthread_mutex_destroy(&qp->qpx.qp_base.mutex);
	pthread_mutex_destroy(&qp->lock);
	swv_pd_buf_free(qp->pd, qp->sq.buf, SWV_RES_TYPE_QP_SQ, qp->sq.buf_custom);
	swv_pd_buf_free(qp->pd, qp->rq.buf, SWV_RES_TYPE_QP_RQ, qp->rq.buf_custom);
	free(qp->srq_rwqe);
	free(qp->tm_match);
	free(qp);
}

int swv_qp_destroy_begin(struct swv_qp *qp, struct swv_qp **gone)
{
	*gone = NULL;
	if (qp->open_real) {
		/* A handle of ibv_open_qp; the QP goes with its last handle. */
		struct swv_qp *real = swv_xrc_qp_close(qp);
		return real ? swv_qp_destroy_begin(real, gone) : 0;
	}
	struct swv_context *ctx = qp->ctx;
	if (qp->xrc == SWV_XRC_TGT && swv_xrc_tgt_orphan(qp)) {
		/* Handles opened on it remain: the QP lives on for them, as a kernel TGT QP
		 * lives while any handle does. Only the creator's handle goes. */
		struct ibv_qp *ib = &qp->qpx.qp_base;
		swv_async_wait_acked(&ib->mutex, &ib->cond, &ib->events_completed,
				     swv_async_withdraw(ctx, SWV_ASYNC_QP, ib));
		return 0;
	}
	/* Still attached to a multicast group: EBUSY, as uverbs answers. */
	pthread_mutex_lock(&ctx->mcast_lock);
	unsigned nmcast = qp->nmcast;
	pthread_mutex_unlock(&ctx->mcast_lock);
	if (nmcast)
		return EBUSY;
	/* Its held triggered WRs go without completions, as its queued WRs do. */
	swv_trig_qp_destroy(qp);
	/* No placement through it outlives it, nor reaches a later QP of its number. */
	pthread_mutex_lock(&qp->lock);
	/* A modify by a handler of its async events during the wait below would list it
	 * again, past this point, for good. */
	qp->dt_closed = true;
	if (qp->dt_published) {
		swv_shm_dt_qp(ctx->ports[0]->ep.shm, qp->qpn, NULL);
		qp->dt_published = false;
	}
	pthread_mutex_unlock(&qp->lock);
	/* After this the progress thread cannot touch the QP (it syncs). */
	swv_ctx_qpn_free(ctx, qp, qp->qpn);
	swv_comp_cntr_detach_qp(qp);
	swv_mw_qp_gone(ctx, qp->qpn); /* its number may name another QP later */
	/* Its send WQEs still queued are no longer outstanding, its receive WQEs no
	 * longer posted (progress.h). */
	pthread_mutex_lock(&qp->lock);
	swv_progress_sq_add(&ctx->progress, -(int64_t)swv_wq_used(&qp->sq));
	qp->sq.head = qp->sq.tail;
	swv_wq_retire(&qp->rq, swv_wq_used(&qp->rq));
	pthread_mutex_unlock(&qp->lock);
	/* Nothing raises events for it any more: withdraw the unread ones and wait for
	 * the acknowledgement of those handed out (core/async.h, as rdma-core). Before
	 * the transport's fini: a handler holding such an event may still query or
	 * modify the QP, which needs its transport state. */
	struct ibv_qp *ib = &qp->qpx.qp_base;
	swv_async_wait_acked(&ib->mutex, &ib->cond, &ib->events_completed,
			     swv_async_withdraw(ctx, SWV_ASYNC_QP, ib));
	*gone = qp;
	return 0;
}

void swv_qp_free(struct swv_qp *qp)
{
	/* Its completions still queued go with it, as mlx4/mlx5 clean a destroyed QP's
	 * CQEs: a later poll never returns a QP number that no longer exists. */
	swv_cq_clean(qp->rcq, qp->qpn);
	if (qp->scq != qp->rcq)
		swv_cq_clean(qp->scq, qp->qpn);
	if (qp->xrc == SWV_XRC_TGT) {
		atomic_fetch_sub(&qp->xrcd->users, 1);
	} else {
		atomic_fetch_sub(&qp->pd->users, 1);
		atomic_fetch_sub(&qp->scq->users, 1);
		atomic_fetch_sub(&qp->rcq->users, 1);
	}
	/* A WQE it took from the SRQ and still held is released without a completion,
	 * like the WQEs of a destroyed QP's own RQ. */
	if (qp->xrc == SWV_XRC_TGT && qp->srq)
		swv_xrc_srq_put(qp->srq);
	else if (qp->srq)
		atomic_fetch_sub(&qp->srq->users, 1);
	free(qp->srq_rwqe);
	free(qp->tm_match);

	pthread_cond_destroy(&qp->qpx.qp_base.cond);
	pthread_mutex_destroy(&qp->qpx.qp_base.mutex);
	pthread_mutex_destroy(&qp->lock);
	swv_pd_buf_free(qp->pd, qp->sq.buf, SWV_RES_TYPE_QP_SQ, qp->sq.buf_custom);
	swv_pd_buf_free(qp->pd, qp->rq.buf, SWV_RES_TYPE_QP_RQ, qp->rq.buf_custom);
	free(qp);
}
