/*
 * Queue pairs: create/query/destroy, the error state and flush, and the progress
 * thread's entry points (receive dispatch, timers). Posting is in qp_post.c and the
 * state machine in qp_state.c.
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
#include "core/qp_ex.h"
#include "net/addr.h"
#include "link/endpoint.h"
#include "link/shm.h"
#include "progress/progress.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/requester.h"
#include "transport/responder.h"
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
	swv_req_reset(qp);
	swv_auth_qp_init(&qp->auth, ctx->cfg->auth ? ctx->cfg->auth_key : NULL, ctx->cfg->addr,
			 qp->type == IBV_QPT_UD);

	/* Everything the progress thread may look at is initialised: publish. */
	rc = swv_ctx_qpn_alloc(ctx, qp, &qp->qpn, &qp->ep);
	if (rc)
		goto fail_lock;
	ib->qp_num = qp->qpn;
	ib->handle = qp->qpn;

	if (tgt) {
		atomic_fetch_add(&qp->xrcd->users, 1);
		swv_xrc_tgt_link(qp); /* ibv_open_qp finds it from now on */
	} else {
		atomic_fetch_add(&pd->users, 1);
		atomic_fetch_add(&qp->scq->users, 1);
		atomic_fetch_add(&qp->rcq->users, 1);
	}
	if (qp->srq)
		atomic_fetch_add(&qp->srq->users, 1); /* ibv_destroy_srq: EBUSY until destroyed */
	attr->cap = cap;
	return qp;

fail_lock:
	pthread_cond_destroy(&ib->cond);
	pthread_mutex_destroy(&ib->mutex);
	pthread_mutex_destroy(&qp->lock);
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

int swv_qp_destroy(struct swv_qp *qp)
{
	struct swv_context *ctx = qp->ctx;
	if (qp->open_real) {
		/* A handle of ibv_open_qp; the QP goes with its last handle. */
		struct swv_qp *real = swv_xrc_qp_close(qp);
		return real ? swv_qp_destroy(real) : 0;
	}
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
	if (qp->dt_published) {
		swv_shm_dt_qp(ctx->ports[0]->ep.shm, qp->qpn, NULL);
		qp->dt_published = false;
	}
	pthread_mutex_unlock(&qp->lock);
	/* After this the progress thread cannot touch the QP (it syncs). */
	swv_ctx_qpn_free(ctx, qp, qp->qpn);
	swv_comp_cntr_detach_qp(qp);
	swv_mw_qp_gone(ctx, qp->qpn); /* its number may name another QP later */
	/* Its send WQEs still queued are no longer outstanding (progress.h). */
	pthread_mutex_lock(&qp->lock);
	swv_progress_sq_add(&ctx->progress, -(int64_t)swv_wq_used(&qp->sq));
	qp->sq.head = qp->sq.tail;
	pthread_mutex_unlock(&qp->lock);
	if (qp->type == IBV_QPT_UC)
		swv_log(SWV_LOG_DEBUG,
			"qp %#x: flow control: %llu waits for credit, %llu probes, %llu credits "
			"granted",
			qp->qpn, (unsigned long long)qp->req.fc.n_blocked,
			(unsigned long long)qp->req.fc.n_probes,
			(unsigned long long)qp->resp.fc.n_credits);
	if (qp->type == IBV_QPT_RC)
		swv_log(
		    SWV_LOG_DEBUG,
		    "qp %#x: requester: %llu packets, %llu tail-loss probes, %llu retries (%llu "
		    "ACK timeouts, %llu sequence NAKs, %llu RNR NAKs; %llu free in a round), "
		    "%llu duplicate "
		    "responses, %llu selective resends (%llu fell back to go-back-N), %llu READ "
		    "re-requests, %llu SACK NAKs received, %llu holes resent; responder: "
		    "%llu sequence NAKs sent (%llu with a SACK map, %llu SACK ACKs), %llu packets "
		    "kept past a gap (%llu copies, %llu too far ahead), responses held %llu times",
		    qp->qpn, (unsigned long long)qp->req.n_pkts,
		    (unsigned long long)qp->req.n_probes, (unsigned long long)qp->req.n_retries,
		    (unsigned long long)qp->req.n_timeouts, (unsigned long long)qp->req.n_seq_naks,
		    (unsigned long long)qp->req.n_rnr_naks,
		    (unsigned long long)qp->req.n_round_free,
		    (unsigned long long)qp->req.n_dup_resp,
		    (unsigned long long)qp->req.n_sel_resends,
		    (unsigned long long)qp->req.n_sr_fallbacks,
		    (unsigned long long)qp->req.n_read_rereqs,
		    (unsigned long long)qp->req.n_sack_naks,
		    (unsigned long long)qp->req.n_holes_resent,
		    (unsigned long long)qp->resp.stats.seq_naks,
		    (unsigned long long)qp->resp.stats.sack_naks,
		    (unsigned long long)qp->resp.stats.sack_acks,
		    (unsigned long long)qp->resp.stats.rob_kept,
		    (unsigned long long)qp->resp.stats.rob_dups,
		    (unsigned long long)qp->resp.stats.rob_full,
		    (unsigned long long)qp->resp.stats.tx_held);
	if (qp->type == IBV_QPT_RC) {
		static const char *const kind[SWV_REC_KINDS] = {"no recovery", "NAK/SACK",
								"tail-loss probe", "ACK timeout"};
		const struct swv_req_state *r = &qp->req;
		for (int k = 0; k < SWV_REC_KINDS; k++)
			if (r->n_rec[k])
				swv_log(SWV_LOG_DEBUG,
					"qp %#x: progress after %s: %llu times, %.3f ms in all, "
					"mean %.1f us, max %.1f us",
					qp->qpn, kind[k], (unsigned long long)r->n_rec[k],
					(double)r->rec_ns[k] / 1e6,
					(double)r->rec_ns[k] / 1e3 / (double)r->n_rec[k],
					(double)r->rec_max_ns[k] / 1e3);
	}
	if (qp->type == IBV_QPT_RC || qp->type == IBV_QPT_UC)
		swv_log(SWV_LOG_DEBUG,
			"qp %#x: %llu remote accesses refused (bad R_Key, bounds, rights or "
			"fault), %llu of them faulted",
			qp->qpn, (unsigned long long)qp->resp.stats.remote_refused,
			(unsigned long long)qp->resp.stats.remote_faults);
	if (qp->auth.on)
		swv_log(SWV_LOG_DEBUG, "qp %#x: %llu packets refused for a missing or wrong MAC",
			qp->qpn, (unsigned long long)atomic_load(&qp->auth.rx_bad));
	/* Its completions still queued go with it, as mlx4/mlx5 clean a destroyed QP's
	 * CQEs: a later poll never returns a QP number that no longer exists. */
	swv_cq_clean(qp->rcq, qp->qpn);
	if (qp->scq != qp->rcq)
		swv_cq_clean(qp->scq, qp->qpn);
	swv_qp_ex_fini(qp);
	/* Nothing raises events for it any more: withdraw the unread ones and wait for
	 * the acknowledgement of those handed out (core/async.h, as rdma-core). */
	struct ibv_qp *ib = &qp->qpx.qp_base;
	swv_async_wait_acked(&ib->mutex, &ib->cond, &ib->events_completed,
			     swv_async_withdraw(ctx, SWV_ASYNC_QP, ib));

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
	swv_resp_release(qp);

	pthread_cond_destroy(&qp->qpx.qp_base.cond);
	pthread_mutex_destroy(&qp->qpx.qp_base.mutex);
	pthread_mutex_destroy(&qp->lock);
	swv_pd_buf_free(qp->pd, qp->sq.buf, SWV_RES_TYPE_QP_SQ, qp->sq.buf_custom);
	swv_pd_buf_free(qp->pd, qp->rq.buf, SWV_RES_TYPE_QP_RQ, qp->rq.buf_custom);
	free(qp);
	return 0;
}

int swv_qp_query(struct swv_qp *qp, struct ibv_qp_attr *attr, struct ibv_qp_init_attr *init)
{
	pthread_mutex_lock(&qp->lock);
	*attr = qp->attr;
	attr->qp_state = qp->state;
	attr->cur_qp_state = qp->state;
	attr->cap = qp->cap;
	/* Current PSNs, as rxe reports them. */
	if (qp->state >= IBV_QPS_RTS && qp->state != IBV_QPS_ERR)
		attr->sq_psn = qp->req.next_psn;
	if (qp->state >= IBV_QPS_RTR && qp->state != IBV_QPS_ERR)
		attr->rq_psn = qp->resp.epsn;
	attr->sq_draining = qp->state == IBV_QPS_SQD &&
			    (qp->req.cur != qp->sq.head || qp->req.sqd_event_pending);
	pthread_mutex_unlock(&qp->lock);

	memset(init, 0, sizeof(*init));
	init->qp_context = qp->qpx.qp_base.qp_context;
	init->send_cq = qp->qpx.qp_base.send_cq;
	init->recv_cq = qp->qpx.qp_base.recv_cq;
	init->srq = qp->qpx.qp_base.srq;
	init->cap = qp->cap;
	init->qp_type = qp->qpx.qp_base.qp_type; /* XRC QPs run as RC inside */
	init->sq_sig_all = qp->sq_sig_all;
	return 0;
}

/* ---- error state ---- */

static void flush_rq(struct swv_qp *qp)
{
	bool overflow = false;
	if (qp->srq) {
		/* Only the WQE this QP took (a message in progress) is flushed here; the
		 * WQEs still in the SRQ stay for its other QPs (core/srq.h). */
		if (swv_resp_flush_srq(qp))
			swv_async_event(qp->ctx, IBV_EVENT_CQ_ERR, &qp->rcq->ibcq);
		return;
	}
	while (qp->rq.head != qp->rq.tail) {
		struct swv_recv_wqe *w = swv_wq_slot(&qp->rq, qp->rq.head);
		struct swv_completion c = {
			.slot = SWV_CNTR_RECV,
			.cq = qp->rcq,
			.wc = {.wr_id = w->wr_id,
			       .status = IBV_WC_WR_FLUSH_ERR,
			       .opcode = IBV_WC_RECV,
			       .qp_num = qp->qpn},
		};
		qp->rq.head++;
		if (swv_complete(qp, &c) && !overflow) {
			overflow = true;
			swv_async_event(qp->ctx, IBV_EVENT_CQ_ERR, &qp->rcq->ibcq);
		}
	}
}

void swv_qp_dt_update(struct swv_qp *qp)
{
	/* Only the context's first port carries the MR entries (core/mr.c), so only its
	 * QPs are listed; the others take every payload through the ring. */
	if (!qp->ctx || !qp->ctx->ports[0])
		return;
	struct swv_endpoint *ep0 = &qp->ctx->ports[0]->ep;
	if (qp->ep != ep0 || !ep0->shm)
		return;
	bool on =
	    qp->type == IBV_QPT_RC && qp->xrc == SWV_XRC_NONE && qp->pd && !qp->auth.on &&
	    (qp->state == IBV_QPS_RTR || qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD) &&
	    (qp->attr.qp_access_flags & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)) &&
	    qp->mtu >= 256 && qp->mtu <= 4096;
	if (!on && !qp->dt_published)
		return;
	/* A responder without READ/atomic resources refuses every READ (invalid
	 * request): published without the right, so a sender never reads there. */
	unsigned access = qp->attr.qp_access_flags;
	if (!qp->attr.max_dest_rd_atomic)
		access &= ~(unsigned)(IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	struct swv_shm_dt_qp_info in = {.access = access,
					.dest_qpn = qp->attr.dest_qp_num,
					.pkey = qp->pkey,
					.mtu = qp->mtu,
					.pd = (uintptr_t)swv_pd_prot(qp->pd),
					.peer = qp->peer};
	swv_shm_dt_qp(ep0->shm, qp->qpn, on ? &in : NULL);
	qp->dt_published = on;
}

void swv_qp_to_error(struct swv_qp *qp)
{
	bool overflow = false;
	bool entering = qp->state != IBV_QPS_ERR;
	qp->state = IBV_QPS_ERR;
	qp->qpx.qp_base.state = IBV_QPS_ERR;
	swv_qp_dt_update(qp);
	/* An overflowing CQ loses the flush CQEs (reported once); the counters still
	 * see every flushed WR. */
	while (qp->sq.head != qp->sq.tail)
		if (swv_req_complete_head(qp, IBV_WC_WR_FLUSH_ERR) && !overflow) {
			overflow = true;
			swv_async_event(qp->ctx, IBV_EVENT_CQ_ERR, &qp->scq->ibcq);
		}
	/* Held triggered WRs reserve slots behind the ring's: they flush after it. */
	swv_trig_qp_flush(qp);
	flush_rq(qp);
	/* IB: a QP attached to an SRQ that enters the error state reports Last WQE
	 * Reached once it will take no more WQEs from the SRQ -- here, at once (its held
	 * WQE was just flushed), so the application knows it may destroy the QP. */
	if (entering && qp->srq && !qp->tgt_orphan)
		swv_async_event(qp->ctx, IBV_EVENT_QP_LAST_WQE_REACHED, &qp->qpx.qp_base);
	qp->req.rnr_until = 0;
	qp->req.ack_deadline = 0;
	qp->req.xmit_retry_at = 0;
	qp->req.fc.probe_at = 0;
	qp->resp.tx_retry_at = 0; /* held responses are never sent in ERR */
	qp->resp.tx_ack = false;
	swv_qp_set_timer(qp, 0);
}

void swv_qp_cq_overflow(struct swv_qp *qp, struct swv_cq *cq)
{
	swv_log(SWV_LOG_WARN, "qp %#x: CQ overflow, QP moves to the error state", qp->qpn);
	swv_async_event(qp->ctx, IBV_EVENT_CQ_ERR, &cq->ibcq);
	if (qp->state != IBV_QPS_ERR && !qp->tgt_orphan)
		swv_async_event(qp->ctx, IBV_EVENT_QP_FATAL, &qp->qpx.qp_base);
	swv_qp_to_error(qp);
}

/* ---- timers ---- */

void swv_qp_set_timer(struct swv_qp *qp, uint64_t deadline_ns)
{
	uint64_t old = atomic_exchange_explicit(&qp->timer_deadline, deadline_ns,
						memory_order_release);
	/* The progress thread re-reads deadlines after running a timer; kicking it from
	 * itself is unnecessary. From a posting thread, a far deadline (the ACK timeout
	 * armed for every message) is handed to the progress thread's timerfd rather
	 * than waking it (swv_progress_arm). */
	if (deadline_ns && deadline_ns != old && !swv_progress_is_self(&qp->ctx->progress))
		swv_progress_arm(&qp->ctx->progress, deadline_ns);
}

/* States in which a QP takes requests (and flow control) from its peer. */
static bool takes_requests(enum ibv_qp_state st)
{
	return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD;
}

void swv_qp_timer(struct swv_qp *qp, uint64_t now_ns)
{
	pthread_mutex_lock(&qp->lock);
	swv_ep_batch_begin(); /* a retransmission of small packets leaves in one call */
	bool responds = takes_requests(qp->state);
	if (responds && qp->resp.tx_retry_at && now_ns >= qp->resp.tx_retry_at)
		swv_resp_tx_resume(qp);
	if (qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD)
		swv_req_timer(qp, now_ns);
	else
		swv_qp_set_timer(qp, responds ? qp->resp.tx_retry_at : 0);
	swv_ep_batch_end();
	pthread_mutex_unlock(&qp->lock);
}

/* ---- receive ---- */

static bool same_peer(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}


/* The partition check, for every QP type and every packet that passed the source
 * and transport checks (requests, responses, flow control), in rxe's order: a packet
 * outside the QP's partition is dropped and counted as a P_Key violation. */
static bool pkey_ok(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	if (swv_likely(swv_pkey_match(pkt->pkey, qp->pkey)))
		return true;
	atomic_fetch_add_explicit(&qp->rx_bad_pkey, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&qp->ctx->bad_pkey_cntr, 1, memory_order_relaxed);
	return false;
}

/* One packet, qp->lock held. */
static void qp_rx_locked(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src)
{
	bool request = pkt->flags & SWV_OPF_REQUEST;
	bool response = pkt->flags & SWV_OPF_RESPONSE;
	enum ibv_qp_state st = qp->state;

	if (pkt->flags & SWV_OPF_FLOWCTL) {
		/* UC credit / probe from the connected peer (transport/flowctl.h) */
		if (qp->type != IBV_QPT_UC || !same_peer(src, &qp->peer) || !takes_requests(st))
			goto drop;
		if (!swv_auth_rx_ok(&qp->auth, pkt, src) || !pkey_ok(qp, pkt))
			return;
		if (swv_fc_rx_control(qp, pkt))
			swv_req_run(qp);
		return;
	}
	uint8_t tp = swv_opcode_transport(pkt->opcode);
	struct swv_pkt rc_view;
	if (qp->xrc != SWV_XRC_NONE) {
		/* XRC: only the connected peer, XRC opcodes only -- requests for a TGT QP,
		 * responses for an INI QP. From here on the RC machinery handles the packet
		 * as the RC operation it is (the TGT responder reads xrc_srqn). */
		if (tp != SWV_OP_XRC || !same_peer(src, &qp->peer) ||
		    (qp->xrc == SWV_XRC_TGT ? !request : !response))
			goto drop;
		rc_view = *pkt;
		rc_view.opcode = pkt->opcode & SWV_OP_OPERATION_MASK;
		rc_view.flags = swv_opcode(rc_view.opcode)->flags;
		pkt = &rc_view;
		tp = SWV_OP_RC;
	}
	switch (qp->type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
		/* Connected: only the peer set at RTR may talk to this QP (DESIGN.md 4; rxe
		 * checks the addresses for RC and UC alike), and only with its opcodes. */
		if (tp != (qp->type == IBV_QPT_RC ? SWV_OP_RC : SWV_OP_UC) ||
		    !same_peer(src, &qp->peer))
			goto drop;
		break;
	case IBV_QPT_UD:
		/* Anyone may send, UD opcodes only. The DETH source QPN must name the UDP
		 * port the datagram came from: a reply addressed from this receive (AH from
		 * the WC, remote_qpn = src_qp) goes there. */
		if (tp != SWV_OP_UD || swv_qpn_port(pkt->deth_sqpn) != ntohs(src->sin_port))
			goto drop;
		break;
	default:
		goto drop;
	}
	if (!swv_auth_rx_ok(&qp->auth, pkt, src) || !pkey_ok(qp, pkt))
		return;
	if (request) {
		if (!takes_requests(st))
			goto drop;
		/* UC: every data packet consumed counts towards the sender's credit,
		 * whatever the responder makes of it. UD uses the source for the GRH
		 * area and wc.slid. */
		swv_fc_rx_data(qp, pkt->psn);
		swv_resp_rx_from(qp, pkt, src);
		if (qp->tm_kick) { /* a rendezvous READ to send (transport/tm.h) */
			qp->tm_kick = false;
			/* The rendezvous SEND's ACK first: the READ may be read directly and
			 * complete in this call, sending the FIN, which must not reach the
			 * sender before the ACK of the SEND it answers (its SEND completion
			 * comes first on hardware, and pyverbs' test_tm_rndv polls in that
			 * order). */
			swv_resp_flush_ack(qp);
			swv_req_run(qp);
		}
	} else if (response) {
		if (st != IBV_QPS_RTS && st != IBV_QPS_SQD)
			goto drop;
		swv_comp_rx(qp, pkt);
	} else {
		goto drop;
	}
	return;
drop:
	atomic_fetch_add_explicit(&qp->rx_dropped, 1, memory_order_relaxed);
}

void swv_qp_rx_batch(struct swv_qp *qp, const struct swv_pkt *const *pkts,
		     const struct sockaddr_in *const *srcs, unsigned n)
{
	pthread_mutex_lock(&qp->lock);
	/* One lock hold for the batch; the responder sends one ACK for the batch's
	 * latest AckReq instead of one per packet (ACKs are cumulative), and the small
	 * datagrams the batch produces (ACKs, requests the completer lets out, small READ
	 * responses) leave in one sendmmsg before the lock is released. */
	swv_ep_batch_begin();
	/* held responses first: this batch's answers must not overtake them (the ring may
	 * have room again: the peer is running) */
	if (qp->resp.tx_retry_at && takes_requests(qp->state))
		swv_resp_tx_resume(qp);
	qp->resp.ack_defer = true;
	for (unsigned i = 0; i < n; i++)
		qp_rx_locked(qp, pkts[i], srcs[i]);
	qp->resp.ack_defer = false;
	swv_resp_flush_ack(qp);
	swv_ep_batch_end();
	pthread_mutex_unlock(&qp->lock);
}

void swv_qp_rx_mcast(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src,
		     const uint8_t mgid[16])
{
	pthread_mutex_lock(&qp->lock);
	qp->rx_mgid = mgid;
	qp_rx_locked(qp, pkt, src);
	qp->rx_mgid = NULL;
	pthread_mutex_unlock(&qp->lock);
}

void swv_qp_rx(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src)
{
	swv_qp_rx_batch(qp, &pkt, &src, 1);
}
