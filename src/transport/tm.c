/*
 * The WQEs a QP of a tag-matching SRQ posts itself (transport/tm.h): the rendezvous
 * READ into a tagged buffer completes that buffer with IBV_WC_TM_DATA_VALID on the
 * SRQ's CQ, counted once on the QP's RECV counter (the READ itself is no application
 * WR: no send CQE, no RDMA_READ count), and is followed by the FIN to the sender.
 * Kept apart from responder_tm.c so that the requester needs nothing of the SRQ.
 */
#include <infiniband/tm_types.h>
#include <string.h>

#include "core/context.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "core/srq.h"
#include "progress/progress.h"
#include "transport/tm.h"

/* A device-posted WQE at the send queue's tail (qp->lock held). */
struct swv_send_wqe *swv_tm_wqe_new(struct swv_qp *qp, uint8_t tm_op, uint32_t handle)
{
	struct swv_send_wqe *s = swv_wq_slot(&qp->sq, qp->sq.tail);
	memset(s, 0, sizeof(*s));
	s->state = SWV_WQE_POSTED;
	s->status = IBV_WC_SUCCESS;
	s->tm_op = tm_op;
	s->tm_handle = handle;
	return s;
}

void swv_tm_wqe_post(struct swv_qp *qp)
{
	qp->sq.tail++;
	qp->tm_sq_held++;
	swv_progress_sq_add(&qp->ctx->progress, 1);
}

int swv_resp_tm_wqe_done(struct swv_qp *qp, const struct swv_send_wqe *w, int status)
{
	struct swv_completion c;
	uint8_t hdr[SWV_TM_HDR_LEN + SWV_TM_RVH_LEN];
	bool ok = status == IBV_WC_SUCCESS;

	qp->tm_sq_held--;
	if (w->tm_op == SWV_TM_WQE_FIN)
		return 0; /* the sender learns of a failure from the QP's error */
	/* the slot may be taken by the FIN below: copy what is needed first */
	memcpy(hdr, w->sge + w->num_sge, sizeof(hdr));
	memset(&c, 0, sizeof(c));
	c.slot = SWV_CNTR_RECV;
	c.cq = qp->srq->cq;
	c.solicited = !ok;
	c.wc.wr_id = w->wr_id;
	c.wc.status = (enum ibv_wc_status)status;
	c.wc.opcode = IBV_WC_TM_RECV;
	c.wc.qp_num = qp->qpn;
	c.wc.src_qp = qp->attr.dest_qp_num;
	c.wc.slid = qp->attr.ah_attr.dlid;
	if (ok) {
		c.wc.wc_flags = IBV_WC_TM_DATA_VALID;
		c.wc.byte_len = w->length;
		c.bytes = w->length;
	}
	int rc = swv_complete(qp, &c);
	if (ok && qp->state == IBV_QPS_RTS && qp->tm_sq_held < SWV_TM_SQ_EXTRA) {
		/* The FIN: the request's TMH and RVH with opcode FIN, so the sender may
		 * release its buffer (rdma-core's tag_matching.md). */
		struct swv_send_wqe *f = swv_tm_wqe_new(qp, SWV_TM_WQE_FIN, 0);
		f->opcode = IBV_WR_SEND;
		f->send_flags = IBV_SEND_INLINE;
		f->length = sizeof(hdr);
		hdr[0] = IBV_TMH_FIN;
		memcpy(f->inline_data, hdr, sizeof(hdr));
		swv_tm_wqe_post(qp);
	}
	return rc;
}
