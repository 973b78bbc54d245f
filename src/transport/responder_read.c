/*
 * Responder, RC RDMA READ and atomics: execution, the responder-resource ring and the
 * replay of duplicates (roce-wire.md 4.3). A READ or atomic is executed once; a
 * duplicate is answered from the saved resource: READ data is read again from memory
 * (the requester asked for it again), an atomic returns the saved original value and
 * never touches memory a second time.
 */
#include <errno.h>
#include <string.h>

#include "core/completion.h"
#include "core/limits.h"
#include "core/mr.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "link/endpoint.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/requester.h"
#include "transport/responder.h"
#include "transport/responder_int.h"
#include "transport/txrun.h"
#include "util/clock.h"
#include "util/compiler.h"
#include "util/log.h"

/*
 * Send READ responses for [va, va+len) of resource r with PSNs psn, psn+1, ...
 * fresh: the response starts at the request's first PSN, so it opens with FIRST/ONLY;
 * otherwise it is a mid-message restart (the requester re-asked from a later PSN with
 * the VA advanced by whole MTUs) and continues with MIDDLE.../LAST, as rxe does.
 * REMOTE_RDMA_READ counts exactly once per request (r->counted), after the last byte
 * was read from memory and just before the last response leaves, so the requester
 * can never see its READ complete before the responder's counter moved. When the
 * link refuses a packet (a full ring or socket buffer) the rest is held, not dropped
 * (resp_hold): the requester would take the gap for a loss and spend a retry on it.
 */
/* The link refused the response with PSN psn: it and every later response of the QP
 * are held until tx_resume sends them, tried again after 8 us doubling to 1 ms (the
 * requester's process drains its ring as soon as it runs). */
static void resp_hold(struct swv_qp *qp, uint32_t psn)
{
	struct swv_resp_state *s = qp->resp;
	s->tx_psn = psn;
	s->tx_retry_at = swv_now_ns() + (SWV_RESP_HOLD_MIN_NS << s->tx_backoff);
	if ((SWV_RESP_HOLD_MIN_NS << s->tx_backoff) < SWV_RESP_HOLD_MAX_NS)
		s->tx_backoff++;
	s->stats.tx_held++;
	swv_req_update_timer(qp);
}

static enum swv_resp_err read_respond_each(struct swv_qp *qp, struct swv_resp_res *r,
					   uint64_t va, uint32_t len, uint32_t psn, bool fresh)
{
	uint8_t buf[4096];
	uint32_t mtu = swv_resp_mtu(qp);
	uint32_t n = swv_resp_read_npkts(len, mtu);
	uint64_t off = 0;

	for (uint32_t k = 0; k < n; k++) {
		uint32_t chunk = (uint32_t)SWV_MIN((uint64_t)mtu, len - off);
		uint8_t op;
		int rc;

		if (n == 1)
			op = fresh ? SWV_OP_READ_RESP_ONLY : SWV_OP_READ_RESP_LAST;
		else if (k == 0)
			op = fresh ? SWV_OP_READ_RESP_FIRST : SWV_OP_READ_RESP_MIDDLE;
		else if (k == n - 1)
			op = SWV_OP_READ_RESP_LAST;
		else
			op = SWV_OP_READ_RESP_MIDDLE;
		/* re-checked per packet: an MR deregistered meanwhile is never read */
		rc = chunk ? swv_mr_remote_read(qp->ctx, qp->pd, qp->qpn, r->rkey, va + off, buf,
						chunk)
			   : 0;
		if (rc)
			return swv_resp_refused(qp, rc);
		if (k == n - 1 && !r->counted && swv_psn_add(psn, k) == r->last_psn) {
			r->counted = true;
			swv_resp_remote_done(qp, SWV_CNTR_REMOTE_RDMA_READ, true, r->len);
		}
		rc = swv_resp_send(qp, SWV_OP_RC | op, swv_psn_add(psn, k), SWV_AETH_ACK, 0, buf,
				   chunk);
		if (rc == EAGAIN || rc == ENOBUFS) {
			resp_hold(qp, swv_psn_add(psn, k));
			break;
		}
		off += chunk;
	}
	return SWV_RESP_OK;
}

/* Opcode of response packet k of n (see read_respond_each). */
static uint8_t read_resp_op(uint32_t k, uint32_t n, bool fresh)
{
	if (n == 1)
		return fresh ? SWV_OP_READ_RESP_ONLY : SWV_OP_READ_RESP_LAST;
	if (k == 0)
		return fresh ? SWV_OP_READ_RESP_FIRST : SWV_OP_READ_RESP_MIDDLE;
	return k == n - 1 ? SWV_OP_READ_RESP_LAST : SWV_OP_READ_RESP_MIDDLE;
}

/* Send the run holding the response packets from PSN psn0 on; false when the link
 * refused one (the rest is held, as read_respond_each does). */
static bool read_flush(struct swv_qp *qp, struct swv_txrun *run, uint32_t psn0)
{
	unsigned sent = 0;
	/* anything but EAGAIN: lost like any datagram, the requester re-asks */
	if (swv_txrun_send(run, &sent) == EAGAIN) {
		resp_hold(qp, swv_psn_add(psn0, sent));
		return false;
	}
	return true;
}

/* read_respond_each with the packets grouped into GSO runs (transport/txrun.h): the
 * same packets, PSNs, data and counting, in fewer system calls. */
static enum swv_resp_err read_respond(struct swv_qp *qp, struct swv_resp_res *r, uint64_t va,
				      uint32_t len, uint32_t psn, bool fresh)
{
	uint32_t mtu = swv_resp_mtu(qp);
	uint32_t n = swv_resp_read_npkts(len, mtu);
	if (qp->resp->tx_retry_at && !qp->resp->tx_resuming)
		return SWV_RESP_OK; /* behind held responses: tx_resume sends it from r */
	struct swv_txrun *run =
	    n > 1 && swv_ep_gso_usable(qp->ep) ? swv_txrun_begin(qp, NULL) : NULL;
	uint64_t off = 0;
	uint32_t k0 = 0;

	if (!run)
		return read_respond_each(qp, r, va, len, psn, fresh);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t chunk = (uint32_t)SWV_MIN((uint64_t)mtu, len - off);
		struct swv_pkt p;

		memset(&p, 0, sizeof(p));
		p.opcode =
		    (qp->xrc == SWV_XRC_TGT ? SWV_OP_XRC : SWV_OP_RC) | read_resp_op(k, n, fresh);
		p.pkey = qp->pkey;
		p.dqpn = qp->attr.dest_qp_num & SWV_PSN_MASK;
		p.psn = swv_psn_add(psn, k);
		p.aeth_syndrome = SWV_AETH_ACK;
		p.aeth_msn = qp->resp->msn & SWV_PSN_MASK;
		p.paylen = chunk;
		if (!swv_txrun_fits(run, p.opcode, chunk)) {
			if (!read_flush(qp, run, swv_psn_add(psn, k0)))
				return SWV_RESP_OK;
			run = swv_txrun_begin(qp, NULL);
			k0 = k;
		}
		uint8_t *dst = swv_txrun_stage(run, chunk);
		/* re-checked per packet: an MR deregistered meanwhile is never read */
		int rc = !chunk ? 0
			 : !dst ? EACCES
				: swv_mr_remote_read(qp->ctx, qp->pd, qp->qpn, r->rkey, va + off,
						     dst, chunk);
		if (rc) {
			(void)read_flush(qp, run, swv_psn_add(psn, k0)); /* what was read goes out */
			return swv_resp_refused(qp, rc);
		}
		if (k == n - 1 && !r->counted && p.psn == r->last_psn) {
			r->counted = true;
			swv_resp_remote_done(qp, SWV_CNTR_REMOTE_RDMA_READ, true, r->len);
		}
		p.payload = dst;
		if (!swv_txrun_add(run, &p)) {
			swv_log(SWV_LOG_ERR, "responder: qp %#x cannot build opcode %#x\n", qp->qpn,
				p.opcode);
			return SWV_RESP_OK;
		}
		off += chunk;
	}
	(void)read_flush(qp, run, swv_psn_add(psn, k0));
	return SWV_RESP_OK;
}

enum swv_resp_err swv_resp_read(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	struct swv_resp_state *s = qp->resp;
	struct swv_resp_res *r;
	uint32_t n;

	/* rxe only refuses when no resources exist at all; beyond that the ring recycles */
	if (qp->attr.max_dest_rd_atomic == 0)
		return SWV_RESP_ERR_INV_REQ;
	if (pkt->reth_len > SWV_MAX_MSG_SIZE || pkt->paylen)
		return SWV_RESP_ERR_INV_REQ;
	/* zero-length READs do not look at the R_Key */
	if (pkt->reth_len &&
	    swv_mr_remote_check(qp->ctx, qp->pd, qp->qpn, pkt->reth_rkey, pkt->reth_va,
				pkt->reth_len, IBV_ACCESS_REMOTE_READ))
		return SWV_RESP_ERR_ACCESS;

	n = swv_resp_read_npkts(pkt->reth_len, swv_resp_mtu(qp));
	/* Read by the requester itself over the intra-host link (swv_pkt.placed): a
	 * one-response READ of 1..MTU bytes on a plain RC QP (the only kind a sender
	 * reads from) that passed every check above, as any READ must. It takes its PSN, MSN,
	 * resource and count as if its data were sent; the response carries none (the requester
	 * completed the READ already). The flag means nothing on any other READ, which is answered
	 * with data as ever, and a later duplicate of this one (never sent by the requester: it
	 * completed it) is answered from memory like any replay. */
	bool placed = pkt->placed && pkt->reth_len && n == 1 && qp->xrc == SWV_XRC_NONE;
	r = swv_resp_res_alloc(s, swv_resp_ring_size(qp->attr.max_dest_rd_atomic));
	r->is_atomic = false;
	r->first_psn = pkt->psn;
	r->last_psn = swv_psn_add(pkt->psn, n - 1);
	r->va = pkt->reth_va;
	r->rkey = pkt->reth_rkey;
	r->len = pkt->reth_len;
	swv_resp_res_publish(s, r);

	/* C9-148: a READ counts in the MSN when it arrives, so its responses carry it */
	r->msn = ++s->msn;
	/* the request consumed one PSN per response packet */
	s->epsn = swv_psn_add(pkt->psn, n);
	if (placed) {
		r->placed = true;
		r->counted = true;
		s->stats.placed_reads++;
		swv_resp_remote_done(qp, SWV_CNTR_REMOTE_RDMA_READ, true, r->len);
		swv_resp_send(qp, SWV_OP_RC | SWV_OP_READ_RESP_ONLY, pkt->psn, SWV_AETH_ACK, 0,
			      NULL, 0);
		return SWV_RESP_OK;
	}
	return read_respond(qp, r, r->va, r->len, pkt->psn, true);
}

/* The memory of a READ that executed went away before all its responses left (a
 * replay, or held responses): NAK as for a new READ; the QP goes to ERR. */
static void read_memory_gone(struct swv_qp *qp, uint32_t psn)
{
	struct swv_resp_state *s = qp->resp;
	s->stats.remote_refused++;
	s->stats.err_naks++;
	swv_resp_send(qp, SWV_OP_RC | SWV_OP_ACK, psn, SWV_AETH_NAK_ACCESS, 0, NULL, 0);
	s->cur = 0;
	swv_qp_to_error(qp);
}

void swv_resp_tx_resume(struct swv_qp *qp)
{
	struct swv_resp_state *s = qp->resp;
	uint32_t ring = swv_resp_ring_size(qp->attr.max_dest_rd_atomic);
	uint32_t mtu = swv_resp_mtu(qp);

	if (!s->tx_retry_at)
		return;
	/* In the order the resources were taken, which is PSN order: what is owed from
	 * tx_psn on. A resource is only reused by a READ/atomic that arrived after it, so
	 * the owed ones are all still here. resp_hold sets tx_retry_at again when the link
	 * refuses once more. */
	s->tx_retry_at = 0;
	s->tx_resuming = true;
	for (uint32_t i = s->res_next - ring; i != s->res_next && !s->tx_retry_at; i++) {
		struct swv_resp_res *r = &s->res[i & (ring - 1)];
		if (!r->valid || swv_psn_cmp(r->last_psn, s->tx_psn) < 0 ||
		    swv_psn_cmp(r->first_psn, s->epsn) >= 0)
			continue;
		s->tx_msn = r->msn;
		if (r->is_atomic || r->placed) {
			uint8_t op = r->is_atomic ? SWV_OP_ATOMIC_ACK : SWV_OP_READ_RESP_ONLY;
			int rc = swv_resp_send(qp, SWV_OP_RC | op, r->first_psn, SWV_AETH_ACK,
					       r->atomic_orig, NULL, 0);
			if (rc == EAGAIN || rc == ENOBUFS)
				resp_hold(qp, r->first_psn);
			continue;
		}
		uint32_t k = swv_psn_cmp(s->tx_psn, r->first_psn) > 0
				 ? (s->tx_psn - r->first_psn) & SWV_PSN_MASK
				 : 0;
		uint64_t off = (uint64_t)k * mtu;
		if (off > r->len)
			continue; /* not a PSN of this READ's responses */
		if (read_respond(qp, r, r->va + off, (uint32_t)(r->len - off),
				 swv_psn_add(r->first_psn, k), k == 0) != SWV_RESP_OK) {
			s->tx_resuming = false;
			s->tx_retry_at = 0;
			read_memory_gone(qp, r->first_psn); /* since the READ executed */
			return;
		}
	}
	s->tx_resuming = false;
	if (s->tx_retry_at)
		return;
	s->tx_backoff = 0;
	if (s->tx_ack) {
		s->tx_ack = false;
		swv_resp_send(qp, SWV_OP_RC | SWV_OP_ACK, s->tx_ack_psn, s->tx_ack_syndrome, 0, NULL,
			      0);
	}
}

void swv_resp_read_dup(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	struct swv_resp_state *s = qp->resp;
	struct swv_resp_res *r = swv_resp_res_find(s, pkt->psn);
	uint64_t va = pkt->reth_va, len = pkt->reth_len;
	uint32_t n;

	/* the retry must ask for (part of) what was read originally, with the same key;
	 * anything else is not a retry of that READ and is dropped */
	if (!r || r->is_atomic || pkt->reth_rkey != r->rkey || va < r->va || len > r->len ||
	    va - r->va > r->len - len) {
		swv_log(SWV_LOG_DEBUG, "responder: qp %#x drops duplicate READ psn %#x (%s)\n",
			qp->qpn, pkt->psn, r ? "not within the original" : "no resource");
		s->stats.dropped++;
		return;
	}
	n = swv_resp_read_npkts((uint32_t)len, swv_resp_mtu(qp));
	if (swv_psn_cmp(swv_psn_add(pkt->psn, n - 1), r->last_psn) > 0) {
		swv_log(SWV_LOG_DEBUG, "responder: qp %#x drops duplicate READ psn %#x (past last psn)\n",
			qp->qpn, pkt->psn);
		s->stats.dropped++;
		return;
	}
	swv_log(SWV_LOG_DEBUG, "responder: qp %#x replays READ psn %#x..%#x\n", qp->qpn, pkt->psn,
		swv_psn_add(pkt->psn, n - 1));
	s->stats.read_replays++;
	/* replays never count again (r->counted) */
	if (read_respond(qp, r, va, (uint32_t)len, pkt->psn, pkt->psn == r->first_psn) !=
	    SWV_RESP_OK) {
		read_memory_gone(qp, pkt->psn); /* since the original: as for a new READ */
	}
}

enum swv_resp_err swv_resp_atomic(struct swv_qp *qp, const struct swv_pkt *pkt, uint32_t cls)
{
	struct swv_resp_state *s = qp->resp;
	struct swv_resp_res *r;
	uint64_t orig = 0;
	int rc;

	if (qp->attr.max_dest_rd_atomic == 0)
		return SWV_RESP_ERR_INV_REQ;
	if (pkt->atm_va & 7) /* misaligned atomic: invalid request, not an access error */
		return SWV_RESP_ERR_INV_REQ;
	rc = swv_mr_remote_atomic(qp->ctx, qp->pd, qp->qpn, pkt->atm_rkey, pkt->atm_va,
				  (cls & SWV_OPF_CMPSWAP) != 0, pkt->atm_swap_add, pkt->atm_cmp,
				  &orig);
	if (rc == EINVAL)
		return SWV_RESP_ERR_INV_REQ;
	if (rc)
		return swv_resp_refused(qp, rc);

	r = swv_resp_res_alloc(s, swv_resp_ring_size(qp->attr.max_dest_rd_atomic));
	r->is_atomic = true;
	r->first_psn = r->last_psn = pkt->psn;
	r->va = pkt->atm_va;
	r->rkey = pkt->atm_rkey;
	r->len = 8;
	r->atomic_orig = orig;
	r->atomic_opcode = pkt->opcode;
	r->atomic_swap_add = pkt->atm_swap_add;
	r->atomic_cmp = pkt->atm_cmp;
	swv_resp_res_publish(s, r);

	r->msn = ++s->msn;
	swv_resp_remote_done(qp, SWV_CNTR_REMOTE_ATOMIC, true, 8);
	swv_resp_send(qp, SWV_OP_RC | SWV_OP_ATOMIC_ACK, pkt->psn, SWV_AETH_ACK, orig, NULL, 0);
	return SWV_RESP_OK;
}

void swv_resp_atomic_dup(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	struct swv_resp_state *s = qp->resp;
	struct swv_resp_res *r = swv_resp_res_find(s, pkt->psn);

	/* never execute twice: answer with the value the first execution returned */
	if (!r || !r->is_atomic || r->first_psn != pkt->psn || r->va != pkt->atm_va ||
	    r->rkey != pkt->atm_rkey || r->atomic_opcode != pkt->opcode) {
		s->stats.dropped++;
		return;
	}
	s->stats.atomic_replays++;
	swv_resp_send(qp, SWV_OP_RC | SWV_OP_ATOMIC_ACK, pkt->psn, SWV_AETH_ACK, r->atomic_orig,
		      NULL, 0);
}
