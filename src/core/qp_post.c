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
#include "core/qp.h"
#include "core/qp_ex.h"
#include "core/comp_cntr.h"
#include "core/trig.h"
#include "net/addr.h"
#include "link/endpoint.h"
#include "transport/packet.h"
#include "transport/requester.h"

#define KNOWN_SEND_FLAGS (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE)

/* Opcodes each transport performs (roce-wire.md 2.2): UD only SENDs, UC adds RDMA WRITE,
 * RC adds READ and atomics. Anything else is EINVAL at post, as the kernel's rxe says
 * "bad wr opcode for qp type". */
static bool opcode_ok(enum ibv_qp_type type, enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return true;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return type == IBV_QPT_RC || type == IBV_QPT_UC;
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return type == IBV_QPT_RC;
	default:
		return false;
	}
}

/* The checks rxe (provider and kernel) makes at post time; all are EINVAL. */
static int check_send_wr(struct swv_qp *qp, const struct ibv_send_wr *wr, uint64_t *len_out)
{
	if (!opcode_ok(qp->type, wr->opcode))
		return EINVAL;
	/* An XRC TGT QP has no send queue; an INI QP's SRQ number has 24 bits (XRCETH). */
	if (qp->xrc == SWV_XRC_TGT ||
	    (qp->xrc == SWV_XRC_INI && wr->qp_type.xrc.remote_srqn > 0xffffff))
		return EINVAL;
	if (wr->send_flags & ~(unsigned)KNOWN_SEND_FLAGS)
		return EINVAL;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	if (wr->num_sge > 0 && !wr->sg_list)
		return EINVAL;
	uint64_t len = 0;
	for (int i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > SWV_MAX_MSG_SIZE)
		return EINVAL;

	bool atomic = wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		      wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
	if (atomic && (len != 8 || (wr->wr.atomic.remote_addr & 7)))
		return EINVAL;
	if (wr->send_flags & IBV_SEND_INLINE) {
		/* Inline carries local data only: not for READ (it writes locally) nor
		 * atomics (their result lands in the SGE). */
		if (atomic || wr->opcode == IBV_WR_RDMA_READ)
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
	w->imm_data = wr->imm_data;
	w->xrc_srqn = qp->xrc == SWV_XRC_INI ? wr->qp_type.xrc.remote_srqn : 0;
	w->remote_addr = 0;
	w->rkey = 0;
	w->compare_add = w->swap = 0;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
		break;
	default:
		break;
	}
	w->length = len;
	w->signaled = qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
	w->first_psn = w->last_psn = w->npkts = 0;
	w->state = SWV_WQE_POSTED;
	w->status = IBV_WC_SUCCESS;
	w->atomic_orig = 0;
	w->read_requested = false;
	w->read_req_end = 0;
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
	return 0;
}

/* Slots taken: the ring's WQEs and the triggered WRs still held (core/trig.h). */
static uint32_t sq_used(struct swv_qp *qp)
{
	return swv_wq_used(&qp->sq) + atomic_load_explicit(&qp->trig_held, memory_order_relaxed);
}

/* For ibv_wr_complete (qp_ex.c): every WR of the chain, and the send queue's room for
 * all of them, checked before any is queued, so a bad batch posts nothing. */
static int check_batch(struct swv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	uint32_t room = qp->sq.max_wr - sq_used(qp);
	for (uint32_t n = 0; wr; wr = wr->next, n++) {
		uint64_t len;
		int err = check_send_wr(qp, wr, &len);
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
		     bool all_or_nothing);

int swv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return post_send(ibqp, wr, bad, false);
}

int swv_post_send_batch(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return post_send(ibqp, wr, bad, true);
}

static int post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad,
		     bool all_or_nothing)
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
		err = check_send_wr(qp, wr, &len);
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
		err = check_send_wr(qp, wr, &len);
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
