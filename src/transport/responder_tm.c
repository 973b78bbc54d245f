/*
 * Responder side of tag matching (core/srq.h, docs/design.md "Tag matching"): what
 * of a SEND lands in the WQE the TMH chose, and how that WQE completes.
 *
 *   PLAIN       IBV_WC_RECV, the whole message (a SEND without a TMH).
 *   NO_TAG      IBV_WC_TM_NO_TAG, the whole message, TMH included.
 *   UNEXPECTED  IBV_WC_TM_RECV without TM flags, the whole message, TMH included
 *               (software matches it; its tag is in the payload, tm_info is 0).
 *   EAGER       IBV_WC_TM_RECV, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, tm_info =
 *               the TMH's tag and app_ctx; the payload after the TMH.
 *   RNDV        nothing of the request lands; the tagged buffer completes twice
 *               (requester.c swv_req_tm_rndv): IBV_WC_TM_MATCH at once, then, once
 *               the READ of the RVH's buffer has placed the data,
 *               IBV_WC_TM_DATA_VALID. A buffer too small for the RVH's length, or a
 *               device out of room for the READ, hands the request to software:
 *               IBV_WC_TM_RNDV_INCOMPLETE with the TMH and RVH placed in the buffer.
 * Every receive counts once on the RECV counter, when its data is in place.
 */
#include <infiniband/tm_types.h>
#include <string.h>

#include "core/context.h"
#include "core/cq.h"
#include "core/mr.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "core/srq.h"
#include "transport/responder_int.h"
#include "transport/tm.h"

void swv_resp_tm_payload(struct swv_qp *qp, uint32_t cls, const uint8_t **payload, uint32_t *paylen)
{
	const struct swv_tm_match *m = qp->tm_match;

	if (m->kind == SWV_TM_RNDV) {
		*paylen = 0;
	} else if (m->kind == SWV_TM_EAGER && (cls & SWV_OPF_FIRST)) {
		/* the TMH was checked to be there when the buffer was matched */
		*payload += SWV_TM_HDR_LEN;
		*paylen -= SWV_TM_HDR_LEN;
	}
}

/* The request goes to software: its headers in the buffer, as the data would be. */
static void rndv_incomplete(struct swv_qp *qp, struct swv_completion *c)
{
	const struct swv_tm_match *m = qp->tm_match;
	const struct swv_recv_wqe *w = qp->resp->rwqe;
	uint32_t n = (uint32_t)sizeof(m->hdr);

	c->wc.status = IBV_WC_TM_RNDV_INCOMPLETE;
	c->wc.wc_flags |= IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID;
	if (n > w->length)
		c->wc.status = IBV_WC_LOC_LEN_ERR;
	else if (swv_mr_scatter(qp->ctx, qp->srq->pd, w->sge, w->num_sge, 0, m->hdr, n))
		c->wc.status = IBV_WC_LOC_PROT_ERR; /* a bad lkey, or memory that faulted */
	c->wc.byte_len = n;
	c->bytes = n;
}

/* A matched rendezvous request: the MATCH completion, then the READ of the sender's
 * buffer into the tagged one, over this QP, behind what the application posted. False
 * when the device cannot (the buffer is too small, the QP cannot send, its device
 * slots are all in use): software gets the request. */
static bool rndv_start(struct swv_qp *qp, struct swv_completion *c)
{
	const struct swv_tm_match *m = qp->tm_match;
	const struct swv_recv_wqe *w = qp->resp->rwqe;

	if (m->rndv_len > w->length || qp->state != IBV_QPS_RTS ||
	    qp->tm_sq_held >= SWV_TM_SQ_EXTRA)
		return false;
	struct swv_completion mc = *c;
	mc.slot = SWV_CNTR_NSLOTS; /* the receive counts once, with its data */
	mc.wc.wc_flags |= IBV_WC_TM_MATCH;
	mc.wc.byte_len = 0;
	mc.bytes = 0;
	if (swv_complete(qp, &mc) == ENOSPC) {
		swv_qp_cq_overflow(qp, mc.cq);
		return true;
	}
	struct swv_send_wqe *s = swv_tm_wqe_new(qp, SWV_TM_WQE_READ, m->handle);
	s->wr_id = w->wr_id;
	s->opcode = IBV_WR_RDMA_READ;
	s->remote_addr = m->rndv_va;
	s->rkey = m->rndv_rkey;
	s->length = m->rndv_len;
	s->num_sge = w->num_sge;
	memcpy(s->sge, w->sge, w->num_sge * sizeof(struct ibv_sge));
	memcpy(s->sge + w->num_sge, m->hdr, sizeof(m->hdr)); /* for the FIN */
	swv_tm_wqe_post(qp);
	qp->tm_kick = true; /* sent once the request is handled (transport/receive.c) */
	return true;
}

bool swv_resp_tm_complete(struct swv_qp *qp, struct swv_completion *c)
{
	const struct swv_tm_match *m = qp->tm_match;

	switch (m->kind) {
	case SWV_TM_PLAIN:
		return false;
	case SWV_TM_NO_TAG:
		c->wc.opcode = IBV_WC_TM_NO_TAG;
		return false;
	case SWV_TM_UNEXPECTED:
		c->wc.opcode = IBV_WC_TM_RECV;
		return false;
	case SWV_TM_EAGER:
		c->wc.opcode = IBV_WC_TM_RECV;
		c->wc.wc_flags |= IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID;
		c->tm = m->info;
		return false;
	case SWV_TM_RNDV:
		c->wc.opcode = IBV_WC_TM_RECV;
		c->tm = m->info;
		if (rndv_start(qp, c))
			return true;
		rndv_incomplete(qp, c);
		return false;
	}
	return false;
}
