/*
 * ibv_post_send / ibv_post_recv (ibv_context_ops). Work requests are validated and
 * copied into the QP's rings; the posting thread then transmits directly what the
 * window allows (the progress thread owns retransmission).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/ah.h"
#include "core/context.h"
#include "core/limits.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "transport/qp_ex.h"
#include "core/comp_cntr.h"
#include "core/trig.h"
#include "net/addr.h"
#include "link/endpoint.h"
#include "transport/packet.h"
#include "transport/requester.h"
#include "transport/responder.h"
#include "transport/wr_opcode.h"

#define KNOWN_SEND_FLAGS (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE)

/* ATOMIC_WRITE and FLUSH come only from the ibv_wr_* builder (qp_ex.c), as in
 * rdma-core, where ibv_send_wr has no fields for their value or placement; the builder
 * stages them in wr.atomic: remote_addr, rkey, and for ATOMIC_WRITE the 8 bytes in
 * swap, for FLUSH the length in compare_add and type | level << 8 in swap. */
static int check_ibta15_wr(const struct ibv_send_wr *wr, bool builder, uint64_t *len_out)
{
	if (!builder)
		return EINVAL;
	if (wr->send_flags & IBV_SEND_INLINE)
		return EINVAL;
	if (wr->opcode == IBV_WR_ATOMIC_WRITE) {
		if (wr->wr.atomic.remote_addr & 7)
			return EINVAL; /* as the other atomics */
		*len_out = 8;
		return 0;
	}
	uint64_t type = wr->wr.atomic.swap & 0xff, level = wr->wr.atomic.swap >> 8;
	if (!type || (type & ~(uint64_t)(IBV_FLUSH_GLOBAL | IBV_FLUSH_PERSISTENT)) ||
	    level > IBV_FLUSH_MR || wr->wr.atomic.compare_add > UINT32_MAX)
		return EINVAL;
	*len_out = 0; /* moves no data */
	return 0;
}

/* The checks rxe (provider and kernel) makes at post time; all are EINVAL. A type 1
 * window is bound only through ibv_bind_mw (type1_bind), never by a WR of the
 * application (IBA: type 1 binds are a verb, type 2 binds a work request). */
static int check_send_wr(struct swv_qp *qp, const struct ibv_send_wr *wr, uint64_t *len_out,
			 bool type1_bind, bool builder)
{
	const struct swv_wr_opcode_info *op = swv_wr_opcode(wr->opcode);

	/* An XRC INI QP is an RC QP inside, but posts only what XRC has opcodes for: the
	 * table's IBV_QPT_XRC_SEND column (what the ibv_wr_* builder offers it too). */
	if (!swv_wr_opcode_allowed(qp->xrc == SWV_XRC_INI ? IBV_QPT_XRC_SEND : qp->type,
				   wr->opcode))
		return EINVAL;
	/* An XRC TGT QP has no send queue; an INI QP's SRQ number has 24 bits (XRCETH). */
	if (qp->xrc == SWV_XRC_TGT ||
	    (qp->xrc == SWV_XRC_INI && wr->qp_type.xrc.remote_srqn > 0xffffff))
		return EINVAL;
	if (wr->send_flags & ~(unsigned)KNOWN_SEND_FLAGS)
		return EINVAL;
	if (op->flags & SWV_WRF_BUILDER)
		return check_ibta15_wr(wr, builder, len_out);
	if (op->flags & SWV_WRF_LOCAL) {
		if (wr->opcode == IBV_WR_BIND_MW) {
			const struct ibv_mw *mw = wr->bind_mw.mw;
			const struct ibv_mr *mr = wr->bind_mw.bind_info.mr;
			if (!mw || mw->context != qp->qpx.qp_base.context ||
			    (mw->type == IBV_MW_TYPE_1) != type1_bind)
				return EINVAL;
			if (mr && mr->context != qp->qpx.qp_base.context)
				return EINVAL;
		}
		if (wr->send_flags & IBV_SEND_INLINE)
			return EINVAL; /* no data to carry */
		*len_out = 0;	       /* the gather list, if any, is not used */
		return 0;
	}
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	if (wr->num_sge > 0 && !wr->sg_list)
		return EINVAL;
	uint64_t len = 0;
	for (int i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > SWV_MAX_MSG_SIZE)
		return EINVAL;

	if ((op->flags & SWV_WRF_ATOMIC) && (len != 8 || (wr->wr.atomic.remote_addr & 7)))
		return EINVAL;
	if (wr->send_flags & IBV_SEND_INLINE) {
		/* Inline carries local data only: not for READ (it writes locally) nor
		 * atomics (their result lands in the SGE). */
		if (op->flags & SWV_WRF_NO_INLINE)
			return EINVAL;
		if (len > qp->cap.max_inline_data)
			return EINVAL;
	}
	*len_out = len;
	return 0;
}

static void copy_send_wr(struct swv_qp *qp, struct swv_send_wqe *w, const struct ibv_send_wr *wr,
			 uint32_t len)
{
	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->send_flags = wr->send_flags;
	w->tm_op = SWV_TM_WQE_NONE;
	w->imm_data = wr->imm_data;
	w->xrc_srqn = qp->xrc == SWV_XRC_INI ? wr->qp_type.xrc.remote_srqn : 0;
	w->remote_addr = 0;
	w->rkey = 0;
	w->compare_add = w->swap = 0;
	uint32_t f = swv_wr_opcode(wr->opcode)->flags;
	if (f & SWV_WRF_RDMA_FIELDS) {
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
	} else if (f & SWV_WRF_ATOMIC_FIELDS) {
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
	} else if (wr->opcode == IBV_WR_BIND_MW) {
		w->mw_handle = wr->bind_mw.mw->handle;
		w->bind_lkey = wr->bind_mw.bind_info.mr ? wr->bind_mw.bind_info.mr->lkey : 0;
		w->rkey = wr->bind_mw.rkey;
		w->bind = wr->bind_mw.bind_info;
	}
	if (f & SWV_WRF_LOCAL) {
		/* nothing to gather: the WQE is the operation */
		w->length = 0;
		w->num_sge = 0;
		w->signaled = qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
		w->first_psn = w->last_psn = w->npkts = 0;
		w->state = SWV_WQE_POSTED;
		w->status = IBV_WC_SUCCESS;
		w->atomic_orig = 0;
		w->read_requested = false;
		w->read_req_end = 0;
		return;
	}
	w->length = len;
	w->signaled = qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
	w->first_psn = w->last_psn = w->npkts = 0;
	w->state = SWV_WQE_POSTED;
	w->status = IBV_WC_SUCCESS;
	w->atomic_orig = 0;
	w->read_requested = false;
	w->read_req_end = 0;
	w->placed = false;
	if (wr->send_flags & IBV_SEND_INLINE) {
		/* The application may reuse its buffers as soon as post returns. */
		uint32_t off = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			if (!wr->sg_list[i].length)
				continue; /* UCX posts empty SGEs with addr 0: no memcpy from NULL */
			memcpy(w->inline_data + off, (const void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
		w->num_sge = 0;
	} else {
		w->num_sge = (uint32_t)wr->num_sge;
		if (wr->num_sge)
			memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
	}
}

int swv_send_wqe_set_ud(struct swv_qp *qp, struct swv_send_wqe *w, struct ibv_ah *ibah,
			uint32_t remote_qpn, uint32_t remote_qkey)
{
	if (!ibah || ibah->context != qp->qpx.qp_base.context || remote_qpn > SWV_QPN_MASK)
		return EINVAL;
	/* Copied now: the WQE does not depend on the AH once posted. */
	const struct swv_ah *ah = to_swv_ah(ibah);
	w->ud_dst = ah->dst;
	w->ud_dst.sin_port = htons(swv_qpn_port(remote_qpn));
	w->ud_remote_qpn = remote_qpn;
	w->ud_remote_qkey = remote_qkey;
	w->ud_deth_rsvd = (uint8_t)((ah->attr.is_global ? SWV_DETH_GRH : 0) |
				    (ah->attr.sl & SWV_DETH_SL_MASK));
	if (ah->attr.is_global && swv_gid_is_mcast(ah->attr.grh.dgid.raw)) {
		w->ud_deth_rsvd |= SWV_DETH_MGID;
		memcpy(w->ud_mgid, ah->attr.grh.dgid.raw, sizeof(w->ud_mgid));
	}
	return 0;
}

/* Slots taken: the ring's WQEs and the triggered WRs still held (core/trig.h). */
static uint32_t sq_used(struct swv_qp *qp)
{
	/* the device's own (tag matching) WQEs have slots of their own */
	return swv_wq_used(&qp->sq) - qp->tm_sq_held +
	       atomic_load_explicit(&qp->trig_held, memory_order_relaxed);
}

/* For ibv_wr_complete (qp_ex.c): every WR of the chain, and the send queue's room for
 * all of them, checked before any is queued, so a bad batch posts nothing. */
static int check_batch(struct swv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	uint32_t room = qp->sq.max_wr - sq_used(qp);
	for (uint32_t n = 0; wr; wr = wr->next, n++) {
		uint64_t len;
		int err = check_send_wr(qp, wr, &len, false, true);
		if (!err && n >= room)
			err = ENOMEM;
		if (!err && qp->type == IBV_QPT_UD) {
			struct swv_send_wqe probe; /* only the checks of set_ud matter here */
			err = swv_send_wqe_set_ud(qp, &probe, wr->wr.ud.ah, wr->wr.ud.remote_qpn,
						  wr->wr.ud.remote_qkey);
		}
		if (err) {
			*bad = wr;
			return err;
		}
	}
	return 0;
}

static int post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad,
		     bool all_or_nothing, bool type1_bind);

int swv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return post_send(ibqp, wr, bad, false, false);
}

int swv_post_send_batch(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return post_send(ibqp, wr, bad, true, false);
}

int swv_post_bind_type1(struct ibv_qp *ibqp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	return post_send(ibqp, wr, &bad, false, true);
}

static int post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad,
		     bool all_or_nothing, bool type1_bind)
{
	/* As rxe's provider: no bad_wr pointer or an empty list is EINVAL, and nothing
	 * is posted (there is nowhere to report which WR failed). */
	if (!bad)
		return EINVAL;
	*bad = NULL;
	if (!wr)
		return EINVAL;
	if (!ibqp) {
		*bad = wr;
		return EINVAL;
	}
	struct swv_qp *qp = to_swv_qp(ibqp);
	int err = 0;
	bool posted = false;

	pthread_mutex_lock(&qp->lock);
	/* rxe refuses sends before RTS (roce-wire.md 5.1); ERR accepts and flushes. */
	if (qp->state < IBV_QPS_RTS) {
		err = EINVAL;
		*bad = wr;
		goto out;
	}
	if (all_or_nothing) {
		err = check_batch(qp, wr, bad);
		if (err)
			goto out;
	}
	for (; wr; wr = wr->next) {
		uint64_t len;
		err = check_send_wr(qp, wr, &len, type1_bind, all_or_nothing);
		if (!err && sq_used(qp) >= qp->sq.max_wr)
			err = ENOMEM;
		if (err) {
			*bad = wr;
			break;
		}
		struct swv_send_wqe *w = swv_wq_slot(&qp->sq, qp->sq.tail);
		copy_send_wr(qp, w, wr, (uint32_t)len);
		if (qp->type == IBV_QPT_UD) {
			err = swv_send_wqe_set_ud(qp, w, wr->wr.ud.ah, wr->wr.ud.remote_qpn,
						  wr->wr.ud.remote_qkey);
			if (err) {
				*bad = wr; /* the slot is not committed */
				break;
			}
		}
		qp->sq.tail++;
		swv_progress_sq_add(&qp->ctx->progress, 1);
		posted = true;
		if (qp->state == IBV_QPS_ERR)
			swv_qp_to_error(qp); /* flushes it right away */
	}
	if (posted && (qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD)) {
		swv_ep_batch_begin(); /* a list of small WRs leaves in one system call */
		swv_req_post(qp);
		/* An ACK the last receive left pending (transport/receive.c,
		 * swv_qp_rx_batch) went out in front of the request, in the same batch
		 * (swv_txrun_send); if the request could not leave yet, it goes now. */
		swv_resp_flush_ack(qp);
		swv_ep_batch_end();
	}
out:
	pthread_mutex_unlock(&qp->lock);
	/* UC/UD WRs complete as they are sent: triggers may be due. */
	swv_trig_run(qp->ctx);
	return err;
}

int swv_qp_post_triggered(struct swv_qp *qp, struct ibv_send_wr *wr, struct swv_comp_cntr *cntr,
			  uint64_t threshold, struct ibv_send_wr **bad)
{
	int err = 0;

	pthread_mutex_lock(&qp->lock);
	if (qp->state < IBV_QPS_RTS) {
		err = EINVAL;
		*bad = wr;
		goto out;
	}
	for (; wr; wr = wr->next) {
		uint64_t len;
		struct swv_trig *t = NULL;
		err = check_send_wr(qp, wr, &len, false, false);
		if (!err && sq_used(qp) >= qp->sq.max_wr)
			err = ENOMEM;
		if (!err && !(t = swv_trig_alloc(qp->sq.stride)))
			err = ENOMEM;
		if (!err) {
			struct swv_send_wqe *w = (struct swv_send_wqe *)t->wqe;
			copy_send_wr(qp, w, wr, (uint32_t)len);
			if (qp->type == IBV_QPT_UD)
				err = swv_send_wqe_set_ud(qp, w, wr->wr.ud.ah, wr->wr.ud.remote_qpn,
							  wr->wr.ud.remote_qkey);
		}
		if (err) {
			free(t);
			*bad = wr;
			break;
		}
		t->kind = SWV_TRIG_WR;
		t->src = cntr;
		t->threshold = threshold;
		t->qp = qp;
		t->qp_gen = qp->trig_gen;
		atomic_fetch_add(&qp->trig_held, 1); /* its slot, from now on */
		swv_trig_hold(qp->ctx, t);
	}
	if (qp->state == IBV_QPS_ERR)
		swv_qp_to_error(qp); /* held or not, they flush at once */
out:
	pthread_mutex_unlock(&qp->lock);
	swv_trig_run(qp->ctx); /* a threshold already reached fires now */
	return err;
}

int swv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	if (!bad)
		return EINVAL; /* as post_send */
	*bad = NULL;
	if (!wr)
		return EINVAL;
	if (!ibqp) {
		*bad = wr;
		return EINVAL;
	}
	struct swv_qp *qp = to_swv_qp(ibqp);
	int err = 0;

	pthread_mutex_lock(&qp->lock);
	if (qp->state == IBV_QPS_RESET || qp->srq || qp->xrc != SWV_XRC_NONE) {
		err = EINVAL;
		*bad = wr;
		goto out;
	}
	for (; wr; wr = wr->next) {
		err = swv_wq_post_recv(&qp->rq, wr);
		if (err) {
			*bad = wr;
			break;
		}
		if (qp->state == IBV_QPS_ERR)
			swv_qp_to_error(qp);
	}
out:
	pthread_mutex_unlock(&qp->lock);
	return err;
}
