/*
 * Responder, RC/UC/UD request side (roce-wire.md 4.2, 4.3, 5.2, 7.2): PSN checking,
 * opcode sequencing, SEND placement into receive WQEs, RDMA WRITE placement, ACK/NAK
 * generation and the error rules. READ, atomics and their replay ring live in
 * responder_read.c.
 *
 * Order of checks for an in-order request, as rxe does it: opcode sequence, QP access
 * flags, resources (receive WQE / read-atomic resources), lengths, R_Key, execute.
 * Nothing is written to memory before every check that can refuse the packet passed,
 * and all memory access goes through core/mr.h.
 */
#include "core/limits.h"
#include "transport/responder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/completion.h"
#include "core/context.h"
#include "core/mr.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "core/srq.h"
#include "core/xrcd.h"
#include "net/addr.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/responder_int.h"
#include "transport/txrun.h"
#include "util/log.h"

/* ---------------------------------------------------------------- pure helpers */

enum swv_resp_seq swv_resp_check_seq(uint32_t cur, uint32_t cls)
{
	if (cur) {
		/* only MIDDLE or LAST of the same kind may follow FIRST/MIDDLE */
		if ((cls & cur) && !(cls & SWV_OPF_FIRST) &&
		    (cls & (SWV_OPF_MIDDLE | SWV_OPF_LAST)))
			return SWV_SEQ_OK;
		return SWV_SEQ_MISSING_LAST;
	}
	if ((cls & (SWV_OPF_SEND | SWV_OPF_WRITE_LIKE)) && !(cls & SWV_OPF_FIRST))
		return SWV_SEQ_MISSING_FIRST;
	return SWV_SEQ_OK;
}

bool swv_resp_paylen_ok(uint32_t cls, uint32_t paylen, uint32_t mtu)
{
	if (!(cls & (SWV_OPF_SEND | SWV_OPF_WRITE_LIKE)))
		return paylen == 0;
	if ((cls & SWV_OPF_ONLY) == SWV_OPF_ONLY)
		return paylen <= mtu;
	if (cls & (SWV_OPF_FIRST | SWV_OPF_MIDDLE))
		return paylen == mtu;
	return paylen >= 1 && paylen <= mtu; /* LAST */
}

uint32_t swv_resp_read_npkts(uint32_t len, uint32_t mtu)
{
	if (len == 0)
		return 1;
	return (uint32_t)(((uint64_t)len + mtu - 1) / mtu);
}

uint32_t swv_resp_ring_size(uint32_t max_dest_rd_atomic)
{
	uint32_t n = 1;

	while (n < max_dest_rd_atomic && n < SWV_MAX_RD_ATOMIC)
		n <<= 1;
	return n;
}

struct swv_resp_res *swv_resp_res_find(struct swv_resp_state *s, uint32_t psn)
{
	/* Scan every slot: the ring may have been sized differently when a slot was
	 * filled, and a stale-but-valid entry is still a correct answer for its PSNs. */
	for (unsigned i = 0; i < SWV_MAX_RD_ATOMIC; i++) {
		struct swv_resp_res *r = &s->res[i];

		if (r->valid && swv_psn_cmp(psn, r->first_psn) >= 0 &&
		    swv_psn_cmp(psn, r->last_psn) <= 0)
			return r;
	}
	return NULL;
}

struct swv_resp_res *swv_resp_res_alloc(struct swv_resp_state *s, uint32_t ring)
{
	struct swv_resp_res *r = &s->res[s->res_next & (ring - 1)];

	s->res_next++;
	memset(r, 0, sizeof(*r));
	return r;
}

void swv_resp_res_publish(struct swv_resp_state *s, struct swv_resp_res *r)
{
	/* An older entry whose PSNs overlap the new one is from a previous trip around
	 * the 24-bit PSN space (or a ring of another size): it must never answer a
	 * duplicate of the new request. */
	for (unsigned i = 0; i < SWV_MAX_RD_ATOMIC; i++) {
		struct swv_resp_res *o = &s->res[i];

		if (o == r || !o->valid)
			continue;
		if ((swv_psn_cmp(o->first_psn, r->first_psn) >= 0 &&
		     swv_psn_cmp(o->first_psn, r->last_psn) <= 0) ||
		    (swv_psn_cmp(r->first_psn, o->first_psn) >= 0 &&
		     swv_psn_cmp(r->first_psn, o->last_psn) <= 0))
			o->valid = false;
	}
	r->valid = true;
}

uint32_t swv_resp_mtu(const struct swv_qp *qp)
{
	if (qp->mtu >= 256 && qp->mtu <= 4096)
		return qp->mtu;
	if (qp->attr.path_mtu >= IBV_MTU_256 && qp->attr.path_mtu <= IBV_MTU_4096)
		return 128u << qp->attr.path_mtu;
	return 4096; /* UD before any path MTU: the largest the wire allows */
}

/* ---------------------------------------------------------------- output */

int swv_resp_send(struct swv_qp *qp, uint8_t opcode, uint32_t psn, uint8_t syndrome,
		  uint64_t atomic_orig, const void *payload, uint32_t paylen)
{
	struct swv_pkt p;
	int rc;

	struct swv_resp_state *s = qp->resp;
	uint8_t op = opcode & SWV_OP_OPERATION_MASK;

	if (s->tx_retry_at && !s->tx_resuming) {
		/* Responses are held (tx_retry_at): nothing overtakes them. READ and atomic
		 * responses leave from their resources; the latest ACK or sequence/RNR NAK is
		 * kept for after them. An error NAK goes now: the QP goes to ERR, the requester
		 * must learn why, and what is held is flushed anyway. */
		if (op != SWV_OP_ACK)
			return 0;
		if ((syndrome & 0x60) != 0x60 || syndrome == SWV_AETH_NAK_PSN) {
			s->tx_ack = true;
			s->tx_ack_syndrome = syndrome;
			s->tx_ack_psn = psn;
			return 0;
		}
	}
	/* A deferred ACK goes first, as before any packet of the QP (swv_txrun_send):
	 * responses leave in the order they were decided. */
	memset(&p, 0, sizeof(p));
	/* An XRC TGT QP answers under the XRC prefix (responses carry no XRCETH). */
	p.opcode = qp->xrc == SWV_XRC_TGT ? (uint8_t)((opcode & SWV_OP_OPERATION_MASK) | SWV_OP_XRC)
					  : opcode;
	p.pkey = qp->pkey;
	p.dqpn = qp->attr.dest_qp_num & SWV_PSN_MASK;
	p.psn = psn & SWV_PSN_MASK;
	p.aeth_syndrome = syndrome;
	p.aeth_msn = (s->tx_resuming ? s->tx_msn : s->msn) & SWV_PSN_MASK;
	p.atmack_orig = atomic_orig;
	p.payload = payload;
	p.paylen = paylen;
	/* an ACKNOWLEDGE with a body carries a SACK map (rc_seq_nak) */
	p.sack = op == SWV_OP_ACK && paylen;
	/* A lost packet is recovered by the requester's timer: nothing to undo here. EAGAIN
	 * (the link refused for now) lets the READ and atomic paths hold the response. */
	rc = swv_tx_pkt(qp, NULL, &p);
	return rc;
}

static void resp_ack(struct swv_qp *qp, uint8_t syndrome, uint32_t psn)
{
	swv_resp_send(qp, SWV_OP_RC | SWV_OP_ACK, psn, syndrome, 0, NULL, 0);
}

void swv_resp_flush_ack(struct swv_qp *qp)
{
	struct swv_resp_state *s = qp->resp;

	if (!s->ack_pending)
		return;
	s->ack_pending = false; /* before sending: swv_txrun_send flushes pending ACKs */
	resp_ack(qp, SWV_AETH_ACK, s->ack_psn);
}

void swv_resp_remote_done(struct swv_qp *qp, enum swv_cntr_slot slot, bool ok, uint64_t bytes)
{
	struct swv_completion c;

	memset(&c, 0, sizeof(c));
	c.slot = slot;
	c.cq = NULL; /* remote operations never produce a CQE at the responder */
	c.wc.status = ok ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR;
	c.wc.qp_num = qp->qpn;
	c.bytes = ok ? bytes : 0;
	swv_complete(qp, &c);
}

/* ---------------------------------------------------------------- receive WQEs */

/* Oldest posted receive WQE, or NULL. The WQE stays in the ring (head not advanced)
 * until it completes, so a multi-packet SEND can keep using it. With an SRQ the WQE
 * is moved out of the shared queue into this QP's own copy (core/srq.h), which then
 * serves the same purpose; NULL (an RNR NAK for RC) when the SRQ is empty. */
static struct swv_recv_wqe *rwqe_peek(struct swv_qp *qp)
{
	if (qp->srq) {
		/* a WQE already taken and not completed is this QP's: never take two */
		if (!qp->srq_rwqe_valid) {
			if (!swv_srq_take(qp->srq, qp->srq_rwqe))
				return NULL;
			qp->srq_rwqe_valid = true;
		}
		return qp->srq_rwqe;
	}
	if (!qp->rq.buf || swv_wq_used(&qp->rq) == 0)
		return NULL;
	return swv_wq_slot(&qp->rq, qp->rq.head);
}

/* A QP of a tag-matching SRQ (core/srq.h): the WQE is chosen by the TMH at the start
 * of the message's first packet, and qp->tm_match says how it was chosen. */
static bool qp_tm(const struct swv_qp *qp)
{
	return qp->srq && qp->srq->tm;
}

static struct swv_recv_wqe *rwqe_peek_tm(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	if (!qp->srq_rwqe_valid) {
		if (!swv_srq_tm_take(qp->srq, pkt->payload, pkt->paylen, qp->srq_rwqe,
				     qp->tm_match))
			return NULL;
		qp->srq_rwqe_valid = true;
	}
	return qp->srq_rwqe;
}

static void rwqe_hold(struct swv_resp_state *s, struct swv_recv_wqe *w)
{
	s->rwqe = w;
	s->have_rwqe = w != NULL;
	s->rwqe_wr_id = w ? w->wr_id : 0;
}

static bool rwqe_malformed(const struct swv_qp *qp, const struct swv_recv_wqe *w)
{
	/* post_recv wrote it, but never index past the slot on a corrupted count */
	return w->num_sge > (qp->srq ? qp->srq->max_sge : qp->rq.max_sge);
}

/* The PD the WQE's lkeys belong to: an SRQ's WQEs were posted for the SRQ's PD. */
static struct swv_pd *rwqe_pd(const struct swv_qp *qp)
{
	return qp->srq ? qp->srq->pd : qp->pd;
}

static void rwqe_wc_init(struct swv_qp *qp, struct swv_completion *c, enum ibv_wc_status st)
{
	memset(c, 0, sizeof(*c));
	c->slot = SWV_CNTR_RECV;
	c->cq = qp_tm(qp) ? qp->srq->cq : qp->rcq; /* a TM SRQ completes on its own CQ */
	c->solicited = true; /* errors always wake a solicited-only waiter */
	c->wc.wr_id = qp->resp->rwqe->wr_id;
	c->wc.status = st;
	c->wc.opcode = IBV_WC_RECV;
	c->wc.qp_num = qp->qpn;
	c->wc.src_qp = qp->attr.dest_qp_num;
	c->wc.slid = qp->attr.ah_attr.dlid; /* peer LID; 0 on a RoCE-style port */
	c->wc.sl = 0;
	c->wc.pkey_index = 0;
}

/* Retire the held WQE and complete it. Returns 0 or ENOSPC (CQ overflow). */
static int rwqe_finish(struct swv_qp *qp, struct swv_completion *c)
{
	/* everything needed is copied into *c: the slot may be reused once head moves */
	if (qp->srq)
		qp->srq_rwqe_valid = false; /* the copy is free for the next take */
	else
		swv_wq_retire(&qp->rq, 1);
	rwqe_hold(qp->resp, NULL);
	qp->resp->recv_done = true;
	return swv_complete(qp, c) == ENOSPC ? ENOSPC : 0;
}

static int rwqe_complete_err(struct swv_qp *qp, enum ibv_wc_status st)
{
	struct swv_completion c;

	if (!qp->resp->rwqe)
		return 0;
	rwqe_wc_init(qp, &c, st);
	return rwqe_finish(qp, &c);
}

/* A UC/UD message that cannot complete gives up its WQE. One from the QP's own RQ was
 * never retired and stays posted for the next message; one taken from an SRQ has
 * already left the SRQ, so it completes on this QP with st (rxe's class E rule for
 * UC/UD with an SRQ, roce-wire.md 5.2); the QP keeps its state. */
static void rwqe_abandon(struct swv_qp *qp, enum ibv_wc_status st)
{
	if (qp->srq && qp->resp->rwqe) {
		if (rwqe_complete_err(qp, st))
			swv_qp_cq_overflow(qp, qp->rcq);
		return;
	}
	rwqe_hold(qp->resp, NULL);
}

int swv_resp_flush_srq(struct swv_qp *qp)
{
	struct swv_completion c;
	struct swv_recv_wqe *w = qp->srq_rwqe;

	if (!qp->srq || !qp->srq_rwqe_valid)
		return 0;
	/* rwqe_wc_init reads resp.rwqe; the held copy is the one to flush */
	qp->resp->rwqe = w;
	rwqe_wc_init(qp, &c, IBV_WC_WR_FLUSH_ERR);
	qp->resp->cur = 0;
	return rwqe_finish(qp, &c);
}

/* ---------------------------------------------------------------- SEND / WRITE */

/* Why a scatter into receive WQE w failed: a bad lkey / PD / bounds / LOCAL_WRITE is a
 * malformed WQE; SGEs that pass those checks met memory that faulted, which an HCA
 * reports as a local protection error on the WQE (its DMA translation failed). */
static enum swv_resp_err rwqe_scatter_err(struct swv_qp *qp, const struct swv_recv_wqe *w)
{
	if (swv_mr_check_sges(qp->ctx, rwqe_pd(qp), w->sge, w->num_sge, IBV_ACCESS_LOCAL_WRITE))
		return SWV_RESP_ERR_RWQE;
	return SWV_RESP_ERR_RWQE_PROT;
}

enum swv_resp_err swv_resp_refused(struct swv_qp *qp, int rc)
{
	if (rc == EFAULT)
		qp->resp->stats.remote_faults++;
	return SWV_RESP_ERR_ACCESS;
}

static enum swv_resp_err resp_send_pkt(struct swv_qp *qp, const struct swv_pkt *pkt,
				       uint32_t cls, uint32_t mtu)
{
	struct swv_resp_state *s = qp->resp;
	struct swv_recv_wqe *w;
	struct swv_completion c;

	bool tm = qp_tm(qp);

	if (cls & SWV_OPF_FIRST) {
		w = tm ? rwqe_peek_tm(qp, pkt) : rwqe_peek(qp);
		if (!w)
			return SWV_RESP_ERR_RNR;
		rwqe_hold(s, w);
		s->msg_off = 0;
		if (rwqe_malformed(qp, w))
			return SWV_RESP_ERR_RWQE;
	}
	w = s->rwqe;
	if (!w) /* sequencing guarantees one; never scatter without it */
		return SWV_RESP_ERR_INV_REQ;
	if (!swv_resp_paylen_ok(cls, pkt->paylen, mtu))
		return SWV_RESP_ERR_INV_REQ;
	const uint8_t *payload = pkt->payload;
	uint32_t paylen = pkt->paylen;
	if (tm)
		swv_resp_tm_payload(qp, cls, &payload, &paylen);
	/* Receive buffer too small: rxe NAKs invalid request and completes the receive
	 * WQE with IBV_WC_REM_INV_REQ_ERR (roce-wire.md 5.2), which swverbs follows; a
	 * hardware HCA would report IBV_WC_LOC_LEN_ERR on this (receive) side. */
	if (s->msg_off + paylen > w->length)
		return SWV_RESP_ERR_INV_REQ;
	if (paylen &&
	    swv_mr_scatter(qp->ctx, rwqe_pd(qp), w->sge, w->num_sge, s->msg_off, payload, paylen))
		return rwqe_scatter_err(qp, w);
	s->msg_off += paylen;
	if (!(cls & SWV_OPF_LAST)) {
		s->cur = SWV_OPF_SEND;
		return SWV_RESP_OK;
	}
	s->cur = 0;
	/* Remote invalidation: only a type 2 window bound to this QP can be; anything
	 * else leaves the data placed, completes the receive with REM_INV_REQ_ERR and
	 * moves the QP to ERR without a NAK (5.2, rxe's class J). */
	if ((cls & SWV_HDR_IETH) &&
	    swv_mw_invalidate(qp->ctx, qp->pd, qp->qpn, pkt->ieth_rkey, true))
		return SWV_RESP_ERR_INV_RKEY;
	rwqe_wc_init(qp, &c, IBV_WC_SUCCESS);
	if (cls & SWV_HDR_IETH) {
		c.wc.invalidated_rkey = pkt->ieth_rkey;
		c.wc.wc_flags |= IBV_WC_WITH_INV;
	}
	c.solicited = pkt->se;
	c.wc.byte_len = (uint32_t)s->msg_off;
	c.bytes = s->msg_off;
	if (cls & SWV_HDR_IMM) {
		c.wc.imm_data = pkt->imm;
		c.wc.wc_flags |= IBV_WC_WITH_IMM;
	}
	s->msn++;
	if (tm && swv_resp_tm_complete(qp, &c)) {
		/* a matched rendezvous: the tagged buffer waits for its data */
		qp->srq_rwqe_valid = false;
		rwqe_hold(s, NULL);
		return SWV_RESP_OK;
	}
	if (rwqe_finish(qp, &c))
		return SWV_RESP_ERR_CQ;
	return SWV_RESP_OK;
}

static enum swv_resp_err resp_write_pkt(struct swv_qp *qp, const struct swv_pkt *pkt,
					uint32_t cls, uint32_t mtu)
{
	struct swv_resp_state *s = qp->resp;
	struct swv_completion c;
	uint64_t remaining;
	/* Placed by the sender (swv_pkt.placed): a WRITE packet without payload whose
	 * bytes are in place already -- an ONLY of the RETH length (1..MTU), a FIRST or
	 * MIDDLE of one MTU, a LAST of what remains of the message (1..MTU). Only the
	 * copy is skipped: every check below runs on that length as if the payload had
	 * come. The flag means nothing on any other packet, which is then checked as it
	 * is. */
	uint32_t paylen = pkt->paylen;
	bool placed = false;
	if (pkt->placed && pkt->paylen == 0) {
		uint64_t implied;
		if ((cls & SWV_OPF_ONLY) == SWV_OPF_ONLY)
			implied = pkt->reth_len;
		else if (cls & (SWV_OPF_FIRST | SWV_OPF_MIDDLE))
			implied = mtu;
		else /* LAST: sequencing guarantees a message under way */
			implied = s->write_len - s->msg_off;
		placed = implied && implied <= mtu;
		if (placed)
			paylen = (uint32_t)implied;
	}

	if (cls & SWV_OPF_RWQE) { /* WRITE_WITH_IMM: the receive WQE is checked first */
		struct swv_recv_wqe *w = rwqe_peek(qp);

		if (!w)
			return SWV_RESP_ERR_RNR;
		rwqe_hold(s, w);
		if (rwqe_malformed(qp, w))
			return SWV_RESP_ERR_RWQE;
	}
	if (!swv_resp_paylen_ok(cls, paylen, mtu))
		return SWV_RESP_ERR_INV_REQ;
	if (cls & SWV_OPF_FIRST) {
		if (pkt->reth_len > SWV_MAX_MSG_SIZE)
			return SWV_RESP_ERR_INV_REQ;
		s->write_va = pkt->reth_va;
		s->write_rkey = pkt->reth_rkey;
		s->write_len = pkt->reth_len;
		s->msg_off = 0;
	}
	/* the packets must add up to exactly the RETH length */
	remaining = s->write_len - s->msg_off;
	if (cls & SWV_OPF_LAST) {
		if (paylen != remaining)
			return SWV_RESP_ERR_INV_REQ;
	} else if (paylen >= remaining) {
		return SWV_RESP_ERR_INV_REQ;
	}
	/* the whole target range is validated once, before the first byte lands */
	if ((cls & SWV_OPF_FIRST) && s->write_len &&
	    swv_mr_remote_check(qp->ctx, qp->pd, qp->qpn, s->write_rkey, s->write_va, s->write_len,
				IBV_ACCESS_REMOTE_WRITE))
		return SWV_RESP_ERR_ACCESS;
	/* remote_write re-checks under the MR lock: a deregistration since FIRST
	 * refuses the packet rather than touching freed memory */
	if (pkt->paylen) {
		int rc = swv_mr_remote_write(qp->ctx, qp->pd, qp->qpn, s->write_rkey,
					     s->write_va + s->msg_off, pkt->payload, pkt->paylen);
		if (rc)
			return swv_resp_refused(qp, rc);
	} else if (placed && !(cls & SWV_OPF_FIRST)) {
		/* what remote_write would check of this packet (a dereg since FIRST) */
		int rc =
		    swv_mr_remote_check(qp->ctx, qp->pd, qp->qpn, s->write_rkey,
					s->write_va + s->msg_off, paylen, IBV_ACCESS_REMOTE_WRITE);
		if (rc)
			return swv_resp_refused(qp, rc);
	}
	s->msg_off += paylen;
	if (placed)
		s->stats.placed++;
	if (!(cls & SWV_OPF_LAST)) {
		s->cur = SWV_OPF_WRITE;
		return SWV_RESP_OK;
	}
	s->cur = 0;
	s->msn++;
	/* last byte placed: the message counts once, before it is acknowledged */
	swv_resp_remote_done(qp, SWV_CNTR_REMOTE_RDMA_WRITE, true, s->write_len);
	if (cls & SWV_HDR_IMM) {
		rwqe_wc_init(qp, &c, IBV_WC_SUCCESS);
		c.solicited = pkt->se;
		c.wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
		/* rxe and mlx5 report the RDMA WRITE length here (nothing lands in the
		 * receive buffer); BYTES counters on RECV add the same value. */
		c.wc.byte_len = s->write_len;
		c.bytes = s->write_len;
		c.wc.imm_data = pkt->imm;
		c.wc.wc_flags |= IBV_WC_WITH_IMM;
		if (rwqe_finish(qp, &c))
			return SWV_RESP_ERR_CQ;
	}
	return SWV_RESP_OK;
}

/* ATOMIC_WRITE (IBTA 1.5, as rxe): exactly 8 bytes, 8-aligned, with REMOTE_WRITE; the
 * store is atomic with respect to other atomics. Answered by the ACK of a WRITE. */
static enum swv_resp_err resp_atomic_write(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	uint64_t v;

	if (pkt->reth_len != 8 || pkt->paylen != 8)
		return SWV_RESP_ERR_INV_REQ;
	if (pkt->reth_va & 7)
		return SWV_RESP_ERR_INV_REQ; /* misaligned, as atomics */
	memcpy(&v, pkt->payload, 8);	     /* the requester's 8 bytes, stored as they are */
	int rc =
	    swv_mr_remote_atomic_write(qp->ctx, qp->pd, qp->qpn, pkt->reth_rkey, pkt->reth_va, v);
	if (rc == EINVAL)
		return SWV_RESP_ERR_INV_REQ;
	if (rc)
		return swv_resp_refused(qp, rc);
	qp->resp->msn++;
	swv_resp_remote_done(qp, SWV_CNTR_REMOTE_RDMA_WRITE, true, 8);
	return SWV_RESP_OK;
}

/* FLUSH: everything before it in PSN order is placed already (the responder executes
 * in order), so global visibility is a fence and persistence an msync of the range
 * (core/mr.h). Placement type and selectivity from FETH; rights from the MR. */
static enum swv_resp_err resp_flush(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	unsigned plt = pkt->feth & SWV_FETH_PLT_MASK;
	unsigned sel = (pkt->feth & SWV_FETH_SEL_MASK) >> SWV_FETH_SEL_SHIFT;

	if (!plt || (plt & ~(unsigned)(IBV_FLUSH_GLOBAL | IBV_FLUSH_PERSISTENT)) ||
	    sel > IBV_FLUSH_MR)
		return SWV_RESP_ERR_INV_REQ;
	int rc = swv_mr_remote_flush(qp->ctx, qp->pd, qp->qpn, pkt->reth_rkey, pkt->reth_va,
				     pkt->reth_len, plt, sel == IBV_FLUSH_MR);
	if (rc)
		return swv_resp_refused(qp, rc);
	qp->resp->msn++;
	swv_resp_remote_done(qp, SWV_CNTR_REMOTE_RDMA_WRITE, true, 0);
	return SWV_RESP_OK;
}

/* The QP right a FLUSH of placement type plt needs (rxe: the QP's access flags). */
static bool flush_allowed(unsigned acc, uint32_t feth)
{
	unsigned plt = feth & SWV_FETH_PLT_MASK;
	return !((plt & IBV_FLUSH_GLOBAL) && !(acc & IBV_ACCESS_FLUSH_GLOBAL)) &&
	       !((plt & IBV_FLUSH_PERSISTENT) && !(acc & IBV_ACCESS_FLUSH_PERSISTENT));
}

/* Checks and execution shared by RC and UC (rc selects RC's strictness). */
static enum swv_resp_err resp_execute(struct swv_qp *qp, const struct swv_pkt *pkt, uint32_t cls,
				      bool rc)
{
	struct swv_resp_state *s = qp->resp;
	unsigned acc = qp->attr.qp_access_flags;
	uint32_t mtu = swv_resp_mtu(qp);

	switch (swv_resp_check_seq(s->cur, cls)) {
	case SWV_SEQ_OK:
		break;
	case SWV_SEQ_MISSING_LAST:
		if (!rc && (cls & SWV_OPF_FIRST)) {
			/* UC: the previous message lost its end; it is abandoned (its
			 * receive WQE stays posted, or completes in error if it came
			 * from an SRQ) and this one starts afresh */
			s->cur = 0;
			rwqe_abandon(qp, IBV_WC_REM_INV_REQ_ERR);
			break;
		}
		return rc ? SWV_RESP_ERR_INV_REQ : SWV_RESP_DROP;
	case SWV_SEQ_MISSING_FIRST:
		return rc ? SWV_RESP_ERR_INV_REQ : SWV_RESP_DROP;
	}

	if ((cls & SWV_OPF_FLUSH)
		? !flush_allowed(acc, pkt->feth)
		: ((cls & SWV_OPF_WRITE_LIKE) && !(acc & IBV_ACCESS_REMOTE_WRITE)) ||
		      ((cls & SWV_OPF_READ) && !(acc & IBV_ACCESS_REMOTE_READ)) ||
		      ((cls & SWV_OPF_ATOMIC) && !(acc & IBV_ACCESS_REMOTE_ATOMIC)))
		return SWV_RESP_ERR_INV_REQ;

	if (cls & SWV_OPF_ATOMIC_WRITE)
		return resp_atomic_write(qp, pkt);
	if (cls & SWV_OPF_FLUSH)
		return resp_flush(qp, pkt);

	if (cls & SWV_OPF_READ)
		return swv_resp_read(qp, pkt);
	if (cls & SWV_OPF_ATOMIC)
		return swv_resp_atomic(qp, pkt, cls);
	if (cls & SWV_OPF_SEND)
		return resp_send_pkt(qp, pkt, cls, mtu);
	return resp_write_pkt(qp, pkt, cls, mtu);
}

static enum swv_cntr_slot remote_slot(uint32_t cls)
{
	if (cls & SWV_OPF_READ)
		return SWV_CNTR_REMOTE_RDMA_READ;
	if (cls & SWV_OPF_ATOMIC)
		return SWV_CNTR_REMOTE_ATOMIC;
	return SWV_CNTR_REMOTE_RDMA_WRITE;
}

/* ---------------------------------------------------------------- RC */

static void rc_error(struct swv_qp *qp, const struct swv_pkt *pkt, uint32_t cls,
		     enum swv_resp_err err)
{
	struct swv_resp_state *s = qp->resp;
	enum ibv_wc_status st;
	uint8_t syn = 0;

	swv_log(SWV_LOG_DEBUG, "responder: qp %#x opcode %#x psn %#x refused (%d)\n", qp->qpn,
		pkt->opcode, pkt->psn, (int)err);
	switch (err) {
	case SWV_RESP_OK:
		return;
	case SWV_RESP_DROP:
		s->stats.dropped++;
		return;
	case SWV_RESP_ERR_RNR:
		/* Not an error: the requester waits and resends from this PSN, so epsn
		 * stays. Later PSNs already in flight are dropped without a sequence NAK,
		 * which would only cut the requester's RNR wait short. */
		s->stats.rnr_naks++;
		s->nak_sent = true;
		resp_ack(qp, SWV_AETH_RNR | (qp->attr.min_rnr_timer & 0x1f), pkt->psn);
		return;
	case SWV_RESP_ERR_CQ:
		s->cur = 0;
		swv_qp_cq_overflow(qp, qp->rcq);
		return;
	case SWV_RESP_ERR_INV_REQ:
		syn = SWV_AETH_NAK_INV;
		st = IBV_WC_REM_INV_REQ_ERR;
		break;
	case SWV_RESP_ERR_ACCESS:
		s->stats.remote_refused++;
		syn = SWV_AETH_NAK_ACCESS;
		st = IBV_WC_REM_ACCESS_ERR;
		break;
	case SWV_RESP_ERR_RWQE:
		syn = SWV_AETH_NAK_OP;
		st = IBV_WC_LOC_QP_OP_ERR;
		break;
	case SWV_RESP_ERR_RWQE_PROT:
		syn = SWV_AETH_NAK_OP;
		st = IBV_WC_LOC_PROT_ERR;
		break;
	case SWV_RESP_ERR_INV_RKEY:
	default:
		st = IBV_WC_REM_INV_REQ_ERR;
		break;
	}
	/* a refused remote WRITE/READ/atomic moves that counter's error count */
	if (cls & (SWV_OPF_WRITE_LIKE | SWV_OPF_READ | SWV_OPF_ATOMIC))
		swv_resp_remote_done(qp, remote_slot(cls), false, 0);
	rwqe_complete_err(qp, st); /* CQ overflow changes nothing: ERR follows anyway */
	if (err == SWV_RESP_ERR_INV_RKEY) {
		if (pkt->ackreq)
			resp_ack(qp, SWV_AETH_ACK, pkt->psn);
	} else {
		s->stats.err_naks++;
		resp_ack(qp, syn, pkt->psn);
	}
	s->cur = 0;
	/* every row of 5.2 with a NAK 0x61..0x63 moves the responder QP to ERR */
	swv_qp_to_error(qp);
}

static void rc_duplicate(struct swv_qp *qp, const struct swv_pkt *pkt, uint32_t cls)
{
	struct swv_resp_state *s = qp->resp;

	s->stats.duplicates++;
	if (cls & (SWV_OPF_SEND | SWV_OPF_WRITE_LIKE)) {
		/* C9-105: never execute twice; re-acknowledge what was executed last,
		 * so a requester whose ACK was lost completes its WQEs */
		resp_ack(qp, SWV_AETH_ACK, swv_psn_add(s->epsn, SWV_PSN_MASK));
		return;
	}
	if (cls & SWV_OPF_READ)
		swv_resp_read_dup(qp, pkt);
	else if (cls & SWV_OPF_ATOMIC)
		swv_resp_atomic_dup(qp, pkt);
}

/* ---------------------------------------------------------------- RC reorder buffer */

struct swv_rob_ent {
	struct swv_pkt pkt; /* as parsed; payload points at data */
	uint32_t cls;
	uint8_t data[];
};

static void rob_free(struct swv_resp_state *s)
{
	if (!s->rob)
		return;
	for (unsigned i = 0; i < SWV_ROB_SLOTS; i++)
		free(s->rob->slot[i]);
	free(s->rob);
	s->rob = NULL;
	s->sack_dirty = false;
}

enum rob_keep { ROB_DROP, ROB_KEPT, ROB_DUP };

/* Keep a copy of an out-of-order SEND/WRITE packet or READ request (psn past epsn). */
static enum rob_keep rob_keep(struct swv_resp_state *s, const struct swv_pkt *pkt, uint32_t cls)
{
	struct swv_rob_ent **sl, *e;

	if (swv_psn_diff(pkt->psn, s->epsn) >= (int32_t)SWV_ROB_SLOTS) {
		s->stats.rob_full++;
		return ROB_DROP;
	}
	if (!s->rob) {
		s->rob = calloc(1, sizeof(*s->rob));
		if (!s->rob)
			return ROB_DROP;
	}
	sl = &s->rob->slot[pkt->psn & (SWV_ROB_SLOTS - 1)];
	if (*sl) {
		if ((*sl)->pkt.psn == pkt->psn) {
			s->stats.rob_dups++;
			return ROB_DUP;
		}
		/* a PSN of the range has a slot of its own: this one is behind epsn */
		free(*sl);
		*sl = NULL;
		s->rob->count--;
	}
	e = malloc(sizeof(*e) + pkt->paylen);
	if (!e)
		return ROB_DROP;
	e->pkt = *pkt;
	e->cls = cls;
	if (pkt->paylen)
		memcpy(e->data, pkt->payload, pkt->paylen);
	e->pkt.payload = pkt->paylen ? e->data : NULL;
	*sl = e;
	if (s->rob->count && swv_psn_diff(pkt->psn, s->rob->hi_psn) > 1)
		s->sack_dirty = true; /* a hole past what was kept: news for a SACK map */
	if (!s->rob->count++ || swv_psn_cmp(pkt->psn, s->rob->hi_psn) > 0)
		s->rob->hi_psn = pkt->psn;
	s->stats.rob_kept++;
	return ROB_KEPT;
}

/* Free entries no longer ahead of epsn (a READ moved epsn past its response PSNs,
 * which no SEND/WRITE may use); the buffer itself once empty. */
static void rob_sweep(struct swv_resp_state *s)
{
	for (unsigned i = 0; s->rob && s->rob->count && i < SWV_ROB_SLOTS; i++) {
		struct swv_rob_ent *e = s->rob->slot[i];

		if (e && swv_psn_cmp(e->pkt.psn, s->epsn) < 0) {
			free(e);
			s->rob->slot[i] = NULL;
			s->rob->count--;
		}
	}
	if (s->rob && !s->rob->count)
		rob_free(s);
}

/* The lowest PSN kept (past epsn): after a drain it is the one that exposes the new
 * gap. */
static uint32_t rob_lowest(const struct swv_resp_state *s)
{
	for (uint32_t i = 1; i < SWV_ROB_SLOTS; i++) {
		uint32_t psn = swv_psn_add(s->epsn, i);
		const struct swv_rob_ent *e = s->rob->slot[psn & (SWV_ROB_SLOTS - 1)];

		if (e && e->pkt.psn == psn)
			return psn;
	}
	return s->rob->hi_psn;
}

/* Execute the packet at epsn (an arrival or a kept one): every check and the
 * execution are the same for both. False when it was refused (rc_error answered). */
/* XRC TGT: the SRQ the request's XRCETH names becomes the QP's receive queue, and its
 * PD and CQ the QP's (core/xrcd.h). An SRQ number nobody has is an invalid request, an
 * SRQ of another XRC domain a remote access error (NAK, then the QP goes to ERR, as
 * for every NAK of that kind); a message in progress cannot change SRQ. */
static enum swv_resp_err xrc_target(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	struct swv_srq *srq;

	if (qp->srq && qp->srq->srqn == pkt->xrc_srqn)
		return SWV_RESP_OK;
	if (qp->srq_rwqe_valid)
		return SWV_RESP_ERR_INV_REQ;
	int rc = swv_xrc_srq_get(qp->xrcd->dom, qp->ctx, pkt->xrc_srqn, &srq);
	if (rc)
		return rc == EACCES ? SWV_RESP_ERR_ACCESS : SWV_RESP_ERR_INV_REQ;
	if (qp->srq)
		swv_xrc_srq_put(qp->srq);
	qp->srq = srq;
	qp->rcq = srq->cq;
	qp->pd = srq->pd;
	return SWV_RESP_OK;
}

static bool rc_exec(struct swv_qp *qp, const struct swv_pkt *pkt, uint32_t cls)
{
	struct swv_resp_state *s = qp->resp;
	enum swv_resp_err err;

	s->nak_sent = false;
	s->seq_nak = false;
	err = qp->xrc == SWV_XRC_TGT ? xrc_target(qp, pkt) : SWV_RESP_OK;
	if (err == SWV_RESP_OK)
		err = resp_execute(qp, pkt, cls, true);
	if (err != SWV_RESP_OK) {
		rc_error(qp, pkt, cls, err);
		return false;
	}
	s->stats.executed++;
	s->last_opcode = pkt->opcode;
	if (!(cls & SWV_OPF_READ)) /* a READ moved epsn past its response PSNs */
		s->epsn = swv_psn_add(pkt->psn, 1);
	else if (s->rob)
		rob_sweep(s);
	return true;
}

/* Run the kept packets that follow epsn, in PSN order. Returns how many executed, or
 * -1 when one was refused (rc_error answered it; what follows stays kept, as it would
 * have been dropped, until the requester resends). */
static int rob_drain(struct swv_qp *qp)
{
	struct swv_resp_state *s = qp->resp;
	int n = 0;

	while (s->rob && s->rob->count) {
		struct swv_rob_ent **sl = &s->rob->slot[s->epsn & (SWV_ROB_SLOTS - 1)];
		struct swv_rob_ent *e = *sl;

		if (!e)
			break;
		*sl = NULL;
		s->rob->count--;
		if (e->pkt.psn != s->epsn) { /* behind epsn (see rob_keep) */
			free(e);
			continue;
		}
		bool ok = rc_exec(qp, &e->pkt, e->cls);
		free(e);
		if (!ok)
			return -1;
		s->stats.rob_drained++;
		n++;
	}
	if (s->rob && !s->rob->count)
		rob_free(s);
	return n;
}

/* The plain ACK for psn: coalesced within a received batch (ack_defer) to one, for
 * its latest PSN. */
static void rc_ack(struct swv_qp *qp, uint32_t psn)
{
	struct swv_resp_state *s = qp->resp;

	if (s->ack_defer) {
		s->acks_coalesced += s->ack_pending;
		s->ack_pending = true;
		s->ack_psn = psn;
	} else {
		resp_ack(qp, SWV_AETH_ACK, psn);
	}
}

/* The SACK map of what the reorder buffer holds past epsn (docs/wire.md): bit i for
 * PSN epsn + 1 + i, as many 32-bit words as reach the highest PSN held. 0 when it
 * holds nothing. */
static uint32_t rob_sack_map(const struct swv_resp_state *s, uint8_t map[SWV_SACK_MAX_LEN])
{
	uint32_t top = 0;

	memset(map, 0, SWV_SACK_MAX_LEN);
	if (!s->rob || !s->rob->count)
		return 0;
	for (uint32_t i = 0; i + 1 < SWV_ROB_SLOTS && i < SWV_SACK_MAX_LEN * 8; i++) {
		uint32_t psn = swv_psn_add(s->epsn, i + 1);
		const struct swv_rob_ent *e = s->rob->slot[psn & (SWV_ROB_SLOTS - 1)];

		if (e && e->pkt.psn == psn) {
			map[i / 8] |= (uint8_t)(1u << (i % 8));
			top = i + 1;
		}
	}
	return top ? (top + 31) / 32 * 4 : 0;
}

/* The update of a SACK map between NAKs: an ACK for epsn - 1 (true: nothing past it
 * executed) with the map of what is kept past epsn. */
static void rc_sack_ack(struct swv_qp *qp)
{
	struct swv_resp_state *s = qp->resp;
	uint8_t map[SWV_SACK_MAX_LEN];
	uint32_t len = rob_sack_map(s, map);

	if (!len)
		return;
	s->stats.sack_acks++;
	s->sack_dirty = false;
	swv_resp_send(qp, SWV_OP_RC | SWV_OP_ACK, swv_psn_add(s->epsn, SWV_PSN_MASK), SWV_AETH_ACK,
		      0, map, len);
}

/* A sequence NAK for epsn; to a peer that reads them, with the map of what is kept past
 * it, so that it resends every hole at once instead of one per round trip. */
static void rc_seq_nak(struct swv_qp *qp, bool again)
{
	struct swv_resp_state *s = qp->resp;
	uint8_t map[SWV_SACK_MAX_LEN];
	uint32_t len = s->peer_sack ? rob_sack_map(s, map) : 0;

	swv_log(SWV_LOG_DEBUG, "responder: qp %#x expected psn %#x: NAK%s%s\n", qp->qpn, s->epsn,
		again ? " (again)" : "", len ? " with SACK map" : "");
	s->nak_sent = true;
	s->seq_nak = true;
	s->stats.seq_naks++;
	if (!len) {
		resp_ack(qp, SWV_AETH_NAK_PSN, s->epsn);
		return;
	}
	s->stats.sack_naks++;
	s->sack_dirty = false;
	swv_resp_send(qp, SWV_OP_RC | SWV_OP_ACK, s->epsn, SWV_AETH_NAK_PSN, 0, map, len);
}

static void rc_rx(struct swv_qp *qp, const struct swv_pkt *pkt, uint32_t cls)
{
	struct swv_resp_state *s = qp->resp;
	int32_t d = swv_psn_cmp(pkt->psn, s->epsn);
	bool ack;

	if (d > 0) {
		/* A SEND/WRITE packet or READ request is kept for when the gap fills, unless an RNR
		 * NAK is being waited out (the requester resends everything from epsn then). One
		 * sequence NAK per gap; once more when a packet not kept now (a copy of a kept one,
		 * or a READ/atomic) arrives at or below the one that exposed the gap: the requester
		 * went back and resent, and epsn was lost again (or the NAK was) -- without it that
		 * second loss waits for a probe or the ACK timeout. Reordering and duplicates of
		 * the original burst come above it or are kept now (never seen before), or (a copy
		 * of that very packet) come at once, where the requester takes the second NAK for a
		 * copy of the first. */
		enum rob_keep k = ROB_DROP;
		bool news = s->sack_dirty;

		if ((cls & (SWV_OPF_SEND | SWV_OPF_WRITE_LIKE | SWV_OPF_READ)) &&
		    (!s->nak_sent || s->seq_nak))
			k = rob_keep(s, pkt, cls);
		bool again =
		    s->seq_nak && k != ROB_KEPT && swv_psn_cmp(pkt->psn, s->nak_first_psn) <= 0;
		if (!s->nak_sent || again) {
			rc_seq_nak(qp, again);
			s->nak_first_psn = pkt->psn;
		} else if (k == ROB_KEPT && pkt->ackreq && s->seq_nak && s->peer_sack && news) {
			/* the requester asks for an answer (the end of a message or burst)
			 * and a hole opened since the last map, before the packet before
			 * this one (one packet of reordering is not taken for a hole): the
			 * map as it is now, on an ACK (a NAK would read as the responder
			 * asking for epsn again) -- holes the NAK, sent at the gap, could
			 * not know yet */
			rc_sack_ack(qp);
		} else if (k == ROB_DROP) {
			s->stats.dropped++;
		}
		return;
	}
	if (d < 0) {
		rc_duplicate(qp, pkt, cls);
		return;
	}
	if (!rc_exec(qp, pkt, cls))
		return;
	/* ACK where the requester asked (READ/atomic answered already) */
	ack = (cls & (SWV_OPF_SEND | SWV_OPF_WRITE_LIKE)) && pkt->ackreq;
	if (s->rob) {
		int n = rob_drain(qp);

		if (n < 0)
			return;
		/* what was kept executed: the requester learns it from this ACK */
		ack = ack || n > 0;
		if (s->rob) {
			/* kept packets wait behind a new gap: NAK it, which acknowledges
			 * everything before it as an ACK would */
			rc_seq_nak(qp, false);
			s->nak_first_psn = rob_lowest(s);
			return;
		}
	}
	if (ack)
		rc_ack(qp, swv_psn_add(s->epsn, SWV_PSN_MASK));
}

/* ---------------------------------------------------------------- UC */

static void uc_abandon(struct swv_qp *qp, enum ibv_wc_status st)
{
	struct swv_resp_state *s = qp->resp;

	/* the receive WQE of an unfinished SEND was never retired: the next message
	 * uses it again (what it received so far is overwritten); an SRQ's WQE
	 * completes with st instead (rwqe_abandon) */
	s->cur = 0;
	s->msg_off = 0;
	rwqe_abandon(qp, st);
}

static void uc_rx(struct swv_qp *qp, const struct swv_pkt *pkt, uint32_t cls)
{
	struct swv_resp_state *s = qp->resp;
	enum swv_resp_err err;

	/* UC never NAKs: a PSN gap loses the message in progress; resume at a FIRST/ONLY */
	if (s->drop_msg || pkt->psn != s->epsn) {
		if (!(cls & SWV_OPF_FIRST)) {
			s->drop_msg = true;
			uc_abandon(qp, IBV_WC_REM_INV_REQ_ERR);
			s->stats.dropped++;
			return;
		}
		s->drop_msg = false;
		uc_abandon(qp, IBV_WC_REM_INV_REQ_ERR);
	}
	err = resp_execute(qp, pkt, cls, false);
	switch (err) {
	case SWV_RESP_OK:
		s->stats.executed++;
		s->last_opcode = pkt->opcode;
		s->epsn = swv_psn_add(pkt->psn, 1);
		return;
	case SWV_RESP_ERR_RWQE:
	case SWV_RESP_ERR_RWQE_PROT:
		/* a local failure, not the sender's: like RC, the QP goes to ERR */
		rwqe_complete_err(qp, err == SWV_RESP_ERR_RWQE ? IBV_WC_LOC_QP_OP_ERR
							       : IBV_WC_LOC_PROT_ERR);
		s->cur = 0;
		swv_qp_to_error(qp);
		return;
	case SWV_RESP_ERR_CQ:
		s->cur = 0;
		swv_qp_cq_overflow(qp, qp->rcq);
		return;
	case SWV_RESP_ERR_INV_REQ:
	case SWV_RESP_ERR_ACCESS:
		if (err == SWV_RESP_ERR_ACCESS)
			s->stats.remote_refused++;
		if (cls & SWV_OPF_WRITE_LIKE)
			swv_resp_remote_done(qp, SWV_CNTR_REMOTE_RDMA_WRITE, false, 0);
		/* fall through */
	default:
		/* drop the rest of the message; a held receive WQE stays posted */
		s->stats.dropped++;
		uc_abandon(qp, err == SWV_RESP_ERR_ACCESS ? IBV_WC_REM_ACCESS_ERR
							  : IBV_WC_REM_INV_REQ_ERR);
		s->drop_msg = true;
		s->epsn = swv_psn_add(pkt->psn, 1);
		return;
	}
}

/* ---------------------------------------------------------------- UD */

static uint16_t ip_csum(const uint8_t *h, size_t len)
{
	uint32_t sum = 0;

	for (size_t i = 0; i + 1 < len; i += 2)
		sum += (uint32_t)h[i] << 8 | h[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

/* The 40 bytes in front of every UD receive (roce-wire.md 8): on a RoCE-style port
 * 20 zero bytes then an IPv4 header, as rxe writes it; on an IB-style port an IB GRH
 * whose GIDs are the swverbs GIDs of both ends (the group's MGID as DGID for a
 * multicast datagram, the group's address as the IPv4 destination on RoCE), so ibv_init_ah_from_wc
 * finds its way back to the sender either way. */
static void ud_build_grh(struct swv_qp *qp, const struct swv_pkt *pkt,
			 const struct sockaddr_in *src, uint8_t grh[40])
{
	const struct swv_dev_config *cfg = qp->ctx ? qp->ctx->cfg : NULL;
	uint32_t tlen =
	    (uint32_t)(SWV_BTH_LEN + 8 + ((pkt->opcode & 0x1f) == SWV_OP_SEND_ONLY_IMM ? 4 : 0) +
		       (pkt->mgid ? SWV_MGID_LEN : 0) + pkt->paylen +
		       ((-(pkt->paylen + (pkt->mgid ? SWV_MGID_LEN : 0))) & 3) + SWV_CRC_LEN);

	memset(grh, 0, 40);
	if (cfg && cfg->link == SWV_LINK_ETH) {
		uint8_t *ip = grh + 20;
		uint16_t tot = (uint16_t)(20 + 8 + tlen), cs;

		ip[0] = 0x45;
		ip[2] = tot >> 8;
		ip[3] = tot & 0xff;
		ip[6] = 0x40; /* DF */
		ip[8] = 64;   /* TTL */
		ip[9] = 17;   /* UDP */
		if (src)
			memcpy(ip + 12, &src->sin_addr, 4);
		if (qp->rx_mgid) {
			struct in_addr g = swv_mcast_group_of_gid(qp->rx_mgid);
			memcpy(ip + 16, &g, 4);
		} else {
			memcpy(ip + 16, &cfg->addr, 4);
		}
		cs = ip_csum(ip, 20);
		ip[10] = cs >> 8;
		ip[11] = cs & 0xff;
		return;
	}
	grh[0] = 0x60; /* IP version 6, traffic class 0, flow label 0 */
	grh[4] = (uint8_t)(tlen >> 8);
	grh[5] = (uint8_t)tlen;
	grh[6] = 0x1b; /* next header: IBA transport */
	grh[7] = 64;   /* hop limit */
	if (src) {
		uint64_t guid = swv_guid_from_ip(src->sin_addr);

		grh[8] = 0xfe;
		grh[9] = 0x80;
		for (int i = 0; i < 8; i++)
			grh[16 + i] = (uint8_t)(guid >> (56 - 8 * i));
	}
	if (qp->rx_mgid)
		memcpy(grh + 24, qp->rx_mgid, 16); /* a multicast datagram: DGID = MGID */
	else if (cfg)
		swv_gid_of_device(cfg, grh + 24);
}

static void ud_rx(struct swv_qp *qp, const struct swv_pkt *pkt, uint32_t cls,
		  const struct sockaddr_in *src)
{
	struct swv_resp_state *s = qp->resp;
	struct swv_recv_wqe *w;
	struct swv_completion c;
	uint8_t grh[40];

	/* UD never answers: every refusal is a silent drop, as rxe does (a hardware HCA
	 * would complete a too-small receive with IBV_WC_LOC_LEN_ERR instead) */
	if (pkt->deth_qkey != qp->attr.qkey || pkt->paylen > swv_resp_mtu(qp)) {
		s->stats.dropped++;
		return;
	}
	w = rwqe_peek(qp);
	if (!w) {
		s->stats.dropped++;
		return;
	}
	rwqe_hold(s, w);
	if (rwqe_malformed(qp, w)) {
		rwqe_complete_err(qp, IBV_WC_LOC_QP_OP_ERR);
		swv_qp_to_error(qp);
		return;
	}
	if (sizeof(grh) + (uint64_t)pkt->paylen > w->length) {
		rwqe_abandon(qp, IBV_WC_REM_INV_REQ_ERR);
		s->stats.dropped++;
		return;
	}
	/* RoCE: every packet has an IP header, so a GRH always (rxe). IB: only when the
	 * sender's address vector had one, which a swverbs sender marks in DETH
	 * (transport/packet.h); without it the 40-byte area is left as it was, as an HCA
	 * leaves it, and byte_len still counts it. */
	bool roce = qp->ctx && qp->ctx->cfg && qp->ctx->cfg->link == SWV_LINK_ETH;
	bool has_grh = roce || (pkt->deth_rsvd & SWV_DETH_GRH);
	if (has_grh)
		ud_build_grh(qp, pkt, src, grh);
	struct swv_pd *wpd = rwqe_pd(qp);
	if ((has_grh && swv_mr_scatter(qp->ctx, wpd, w->sge, w->num_sge, 0, grh, sizeof(grh))) ||
	    (pkt->paylen && swv_mr_scatter(qp->ctx, wpd, w->sge, w->num_sge, sizeof(grh),
					   pkt->payload, pkt->paylen))) {
		rwqe_complete_err(qp, rwqe_scatter_err(qp, w) == SWV_RESP_ERR_RWQE
					  ? IBV_WC_LOC_QP_OP_ERR
					  : IBV_WC_LOC_PROT_ERR);
		swv_qp_to_error(qp);
		return;
	}
	rwqe_wc_init(qp, &c, IBV_WC_SUCCESS);
	c.solicited = pkt->se;
	c.wc.byte_len = (uint32_t)sizeof(grh) + pkt->paylen;
	c.bytes = c.wc.byte_len;
	c.wc.src_qp = pkt->deth_sqpn;
	c.wc.wc_flags = has_grh ? IBV_WC_GRH : 0;
	c.wc.slid = 0;
	if (src && qp->ctx && qp->ctx->cfg && qp->ctx->cfg->link == SWV_LINK_IB)
		c.wc.slid = swv_lid_from_ip(qp->ctx->cfg, src->sin_addr);
	/* IB: the sender's SL (its LRH would carry it). RoCE: the network header type, as
	 * mlx5 reports it there (2 = IPv4, the only kind swverbs receives; rxe reports 0);
	 * UCX's ud_verbs reads it to find the destination address in the GRH area. */
	c.wc.sl = roce ? 2 : (uint8_t)(pkt->deth_rsvd & SWV_DETH_SL_MASK);
	if (cls & SWV_HDR_IMM) {
		c.wc.imm_data = pkt->imm;
		c.wc.wc_flags |= IBV_WC_WITH_IMM;
	}
	s->stats.executed++;
	if (rwqe_finish(qp, &c))
		swv_qp_cq_overflow(qp, qp->rcq);
}

/* ---------------------------------------------------------------- entry points */

/* Defensive re-validation of what the parser promised, against the opcode byte. */
static bool pkt_consistent(const struct swv_pkt *pkt, uint32_t cls)
{
	if (pkt->paylen && (!(cls & SWV_OPF_PAYLOAD) || !pkt->payload))
		return false;
	if (pkt->paylen > 4096)
		return false;
	return (pkt->psn & ~SWV_PSN_MASK) == 0;
}

void swv_resp_rx_from(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src)
{
	uint32_t cls;

	/* requests are served from RTR on; in ERR (and before RTR) they vanish */
	if (qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD &&
	    qp->state != IBV_QPS_SQE)
		return;
	cls = swv_opcode_request(qp->type, pkt->opcode);
	if (!cls || !pkt_consistent(pkt, cls)) {
		qp->resp->stats.dropped++;
		return;
	}
	switch (qp->type) {
	case IBV_QPT_RC:
		if (pkt->sack)
			qp->resp->peer_sack = true;
		rc_rx(qp, pkt, cls);
		break;
	case IBV_QPT_UC:
		uc_rx(qp, pkt, cls);
		break;
	case IBV_QPT_UD:
		ud_rx(qp, pkt, cls, src);
		break;
	default:
		break;
	}
}

void swv_resp_rx(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	swv_resp_rx_from(qp, pkt, NULL);
}

void swv_resp_release(struct swv_qp *qp)
{
	rob_free(qp->resp);
}

void swv_resp_reset(struct swv_qp *qp)
{
	rob_free(qp->resp);
	memset(qp->resp, 0, sizeof(*qp->resp));
	/* RESET: a WQE taken from an SRQ and not completed is dropped (rxe too) */
	qp->srq_rwqe_valid = false;
	qp->resp->epsn = qp->attr.rq_psn & SWV_PSN_MASK;
	qp->resp->last_opcode = 0xff;
	swv_fc_rx_reset(qp);
}
