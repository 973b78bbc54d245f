/*
 * Requester (rxe's req): turns send WQEs into packets. Segmentation by path MTU with
 * FIRST/MIDDLE/LAST/ONLY opcodes, RETH on the first WRITE packet, ImmDt on the last,
 * one PSN per packet (a READ takes one per response packet), AckReq on last packets
 * and every SWV_MAX_PKT_PER_ACK packets, a window of unacknowledged PSNs, the
 * max_rd_atomic limit and FENCE. See requester.h for the send-queue model.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "core/async.h"
#include "core/context.h"
#include "core/mr.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "core/srq.h"
#include "link/endpoint.h"
#include "link/shm.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/requester.h"
#include "transport/tm.h"
#include "transport/txrun.h"
#include "transport/wr_opcode.h"
#include "util/clock.h"
#include "util/log.h"

#define XMIT_RETRY_NS 50000ull /* socket buffer full: try again this much later */

static bool is_rd_atomic(uint32_t op)
{
	return swv_wr_is(op, SWV_WRF_RD_ATOMIC);
}

/* BIND_MW and LOCAL_INV send nothing: they execute when the requester reaches them in
 * the send queue (so what was posted after them goes out after they took effect) and
 * complete in queue order, right away when nothing before them is outstanding, else
 * when the WQE before them completes (swv_req_complete_head). */
static bool is_local(uint32_t op)
{
	return swv_wr_is(op, SWV_WRF_LOCAL);
}

static void fail_head(struct swv_qp *qp, int status);

/* Execute a local operation: 0, or the status it completes with (rxe's). */
static int exec_local(struct swv_qp *qp, struct swv_send_wqe *w)
{
	if (w->opcode == IBV_WR_BIND_MW)
		return swv_mw_bind(qp->ctx, qp->pd, qp->qpn, w->mw_handle, w->rkey, &w->bind,
				   w->bind_lkey);
	return swv_mw_invalidate(qp->ctx, qp->pd, qp->qpn, w->imm_data, false)
		   ? IBV_WC_LOC_QP_OP_ERR
		   : 0;
}

uint32_t swv_req_npkts(uint32_t opcode, uint32_t length, uint32_t mtu)
{
	if (swv_wr_is(opcode, SWV_WRF_ATOMIC))
		return 1;
	uint32_t n = (uint32_t)(((uint64_t)length + mtu - 1) / mtu);
	return n ? n : 1;
}

/* In-flight PSNs: SWV_MAX_UNACKED_PSNS, fewer when a window of full packets would not fit the
 * peer's socket buffer (taken to be like ours: the same library configures both).
 * Each datagram costs about twice its size in kernel accounting (skb truesize). */
static uint32_t compute_window(struct swv_qp *qp)
{
	int rcvbuf = 0;
	socklen_t sl = sizeof(rcvbuf);
	uint32_t w = SWV_MAX_UNACKED_PSNS;
	if (qp->ep && getsockopt(qp->ep->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &sl) == 0 &&
	    rcvbuf > 0) {
		uint64_t per_pkt = 2ull * (qp->mtu + SWV_MAX_HDR_LEN + 64);
		uint64_t fit = (uint64_t)rcvbuf / per_pkt;
		if (fit < w)
			w = fit < 4 ? 4 : (uint32_t)fit;
	}
	return w;
}

uint64_t swv_ack_timeout_ns(const struct swv_qp *qp)
{
	return qp->attr.timeout ? 4096ull << qp->attr.timeout : 0;
}

uint64_t swv_req_probe_ns(const struct swv_qp *qp)
{
	const struct swv_req_state *r = qp->req;
	uint64_t tmo = swv_ack_timeout_ns(qp);
	uint64_t max = tmo ? tmo / 4 : SWV_PROBE_MAX_NS;
	uint64_t p = r->srtt_ns ? 4 * r->srtt_ns : max, min = SWV_PROBE_MIN_NS;
	if (qp->sq.head != r->started) {
		const struct swv_send_wqe *w = swv_wq_slot(&qp->sq, qp->sq.head);
		/* so is a READ the responder executed: its probe asks again only for
		 * the responses still missing (completer.c) */
		if ((!is_rd_atomic(w->opcode) && !r->sr_gbn_left) ||
		    (w->opcode == IBV_WR_RDMA_READ && swv_req_read_executed(qp, w))) {
			/* a SEND/WRITE at the head is probed by resending one packet
			 * (completer.c): cheap enough to try after two round trips, or
			 * after SWV_PROBE_MIN_NS while none was measured (under loss the
			 * resends void every sample, and waiting the ACK timeout / 4 for
			 * each lost resend held a fresh QP at 5% drop to 30 MiB/s) */
			p = r->srtt_ns ? 2 * r->srtt_ns : SWV_PROBE_MIN_NS;
			min = SWV_PROBE_SEL_MIN_NS;
		}
	}
	if (p < min)
		p = min;
	p <<= r->probe_backoff;
	if (p > max)
		p = max;
	/* an ACK timeout this short retries sooner than a probe could help */
	return p >= min ? p : 0;
}

void swv_req_reset(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	memset(r, 0, sizeof(*r));
	r->next_psn = r->una_psn = r->sent_psn = qp->attr.sq_psn & SWV_PSN_MASK;
	r->cur = r->started = qp->sq.head;
	r->retry_left = qp->attr.retry_cnt;
	r->rnr_left = qp->attr.rnr_retry;
	r->window = compute_window(qp);
	r->cwnd = r->window;
	r->cwnd_una = r->una_psn;
	r->rd_rereq_psn = r->una_psn;
	swv_fc_tx_reset(qp);
}


void swv_req_update_timer(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	uint64_t d = 0;
	/* the QP's one timer also serves the responder's held responses */
	uint64_t c[6] = {r->ack_deadline, r->probe_at,	  r->rnr_until,
			 r->xmit_retry_at, r->fc.probe_at, qp->resp->tx_retry_at};
	for (int i = 0; i < 6; i++)
		if (c[i] && (!d || c[i] < d))
			d = c[i];
	swv_qp_set_timer(qp, d);
}

enum ibv_wc_opcode swv_req_wc_opcode(uint32_t op)
{
	return swv_wr_opcode(op)->wc;
}

enum swv_cntr_slot swv_req_cntr_slot(uint32_t op)
{
	return swv_wr_opcode(op)->slot;
}

static int complete_one(struct swv_qp *qp, int status)
{
	struct swv_req_state *r = qp->req;
	uint32_t idx = qp->sq.head;
	struct swv_send_wqe *w = swv_wq_slot(&qp->sq, idx);
	bool ok = status == IBV_WC_SUCCESS;
	uint32_t bytes = swv_wr_is(w->opcode, SWV_WRF_ATOMIC) ? 8 : w->length;

	struct swv_completion c = {
	    .slot = swv_req_cntr_slot(w->opcode),
	    /* Errors always produce a CQE, even for unsignaled WRs. */
	    .cq = (!ok || w->signaled) ? qp->scq : NULL,
	    .wc = {.wr_id = w->wr_id,
		   .status = (enum ibv_wc_status)status,
		   .opcode = swv_req_wc_opcode(w->opcode),
		   .byte_len = ok ? bytes : 0,
		   .qp_num = qp->qpn},
	    .bytes = bytes,
	};

	/* Keep the cursor bookkeeping consistent with the WQE leaving the queue. */
	if ((int32_t)(idx - r->cur) < 0) {
		if (is_rd_atomic(w->opcode) && r->rd_atomic_outstanding)
			r->rd_atomic_outstanding--;
	} else if (idx == r->cur) {
		r->cur = idx + 1;
		r->cur_pkt = 0;
	}
	if (idx == r->started)
		r->started = idx + 1;
	if (w->opcode == IBV_WR_RDMA_READ && w->state != SWV_WQE_POSTED) {
		/* its PSNs will come round again after 2^24: forget them -- every slot
		 * holding one, which for a READ longer than the slots is a later PSN
		 * than the slot's first use */
		uint32_t n = SWV_MIN(w->npkts, (uint32_t)SWV_MAX_UNACKED_PSNS);
		for (uint32_t k = 0; k < n; k++) {
			uint32_t psn = swv_psn_add(w->first_psn, k);
			uint32_t *slot = &r->rd_seen[psn & (SWV_MAX_UNACKED_PSNS - 1)];
			if ((*slot & SWV_RD_SEEN) &&
			    ((*slot - w->first_psn) & SWV_PSN_MASK) < w->npkts)
				*slot = 0;
		}
	}
	qp->sq.head = idx + 1;
	swv_progress_sq_add(&qp->ctx->progress, -1);
	r->read_off = 0;
	if (w->tm_op != SWV_TM_WQE_NONE)
		return swv_resp_tm_wqe_done(qp, w, status); /* the device's own (transport/tm.h) */
	return swv_complete(qp, &c);
}

int swv_req_complete_head(struct swv_qp *qp, int status)
{
	int rc = complete_one(qp, status);
	/* Local operations executed behind this WQE complete now, in order. */
	while (!rc && status == IBV_WC_SUCCESS && qp->sq.head != qp->sq.tail) {
		const struct swv_send_wqe *w = swv_wq_slot(&qp->sq, qp->sq.head);
		if (w->state != SWV_WQE_LOCAL_DONE)
			break;
		rc = complete_one(qp, IBV_WC_SUCCESS);
	}
	return rc;
}

/* The cursor reached local operation w (r->cur): execute it once and step past it.
 * False when the QP stops here (it failed, or completing it overflowed the CQ). */
static bool run_local(struct swv_qp *qp, struct swv_send_wqe *w)
{
	struct swv_req_state *r = qp->req;

	if (w->state == SWV_WQE_POSTED) {
		int st = exec_local(qp, w);
		/* No PSN of its own: it sits at the PSN before the next one, so an ACK of
		 * what precedes it covers it too. */
		w->npkts = 0;
		w->first_psn = w->last_psn = swv_psn_add(r->next_psn, SWV_PSN_MASK);
		if (r->started == r->cur)
			r->started = r->cur + 1;
		if (st) {
			w->state = SWV_WQE_ERROR;
			w->status = (uint32_t)st;
			if (qp->sq.head == r->cur)
				fail_head(qp, st);
			return false;
		}
		w->state = SWV_WQE_LOCAL_DONE;
	}
	r->cur++;
	r->cur_pkt = 0;
	if (qp->sq.head == r->cur - 1 && swv_req_complete_head(qp, IBV_WC_SUCCESS)) {
		swv_qp_cq_overflow(qp, qp->scq);
		return false;
	}
	return true;
}

/* PSN of the next packet the cursor would send for w. */
static uint32_t cursor_psn(const struct swv_qp *qp, const struct swv_send_wqe *w)
{
	const struct swv_req_state *r = qp->req;
	if (w->state == SWV_WQE_POSTED)
		return r->next_psn;
	if (w->opcode == IBV_WR_RDMA_READ && qp->sq.head == r->cur)
		return swv_psn_add(w->first_psn, r->read_off / qp->mtu);
	return swv_psn_add(w->first_psn, r->cur_pkt);
}

/* Header fields of packet k of a SEND/WRITE WQE (opcode, RETH, ImmDt, SE, AckReq after
 * 'since_ackreq' packets without one, paylen); returns the payload's offset in the
 * message. */
static uint64_t data_pkt_fields(const struct swv_qp *qp, const struct swv_send_wqe *w, uint32_t k,
				uint32_t since_ackreq, struct swv_pkt *p)
{
	bool first = k == 0, last = k + 1 == w->npkts;
	uint32_t f = swv_wr_opcode(w->opcode)->flags;
	bool imm = f & SWV_WRF_IMM, inv = f & SWV_WRF_INV, send = f & SWV_WRF_SEND;
	uint64_t off = (uint64_t)k * qp->mtu;
	p->paylen = (uint32_t)SWV_MIN((uint64_t)qp->mtu, w->length - off);
	p->opcode = swv_wr_wire_op(w->opcode, k, w->npkts);
	if (send) {
		if (last && inv)
			p->ieth_rkey = w->imm_data; /* ibv_send_wr.invalidate_rkey, host order */
	} else {
		if (first) {
			p->reth_va = w->remote_addr;
			p->reth_rkey = w->rkey;
			p->reth_len = w->length;
		}
	}
	if (last && imm)
		p->imm = w->imm_data;
	p->se = last && (send || imm) && (w->send_flags & IBV_SEND_SOLICITED);
	/* AckReq at least twice per window: with a window under SWV_MAX_PKT_PER_ACK
	 * (small socket buffers, or halved by losses) a full window must still ask */
	uint32_t every = SWV_MIN((uint32_t)SWV_MAX_PKT_PER_ACK, qp->req->cwnd / 2);
	p->ackreq = last || since_ackreq + 1 >= (every ? every : 1);
	if (qp->type != IBV_QPT_RC) {
		/* UC and UD: the same operations under their own transport prefix (UD only
		 * ever has SEND_ONLY[_WITH_IMM]); nobody acknowledges them. */
		p->opcode |= qp->type == IBV_QPT_UC ? SWV_OP_UC : SWV_OP_UD;
		p->ackreq = false;
	}
	if (qp->xrc == SWV_XRC_INI) {
		p->opcode |= SWV_OP_XRC; /* the RC operation, addressed to an XRC SRQ */
		p->xrc_srqn = w->xrc_srqn;
	}
	p->sack = qp->type == IBV_QPT_RC; /* we read SACK maps (docs/wire.md) */
	return off;
}

/* A WRITE of several packets placed whole (place_whole): at most what Linux moves in
 * one process_vm_writev (MAX_RW_COUNT, INT_MAX rounded down to a page: a longer one is
 * cut short, every time, and would take the ring after copying that much in vain),
 * gathered from at most this many local pieces. */
#define PLACE_MAX_MSG 0x7ffff000u
#define PLACE_MAX_IOV 64

/* Whether the payload of w's packet psn may be placed directly (docs/design.md, "The
 * intra-host link"): an RDMA WRITE of an RC QP at its first packet -- one packet up to
 * the path MTU, or several, all placed at once (place_whole) -- nothing before it
 * unacknowledged -- every earlier request of the QP executed by the responder, so the
 * placement cannot overtake one -- sent for the first time (a retransmission may
 * find the WRITE executed already, and a duplicate must not write again: it goes
 * through the ring with its payload, and the responder treats it as a duplicate), and
 * neither authenticated mode nor a fault injector (which never has an inbox) on the
 * QP's path. Something acknowledged since the send queue's PSN was set: only then is
 * the responder known to expect this PSN (with a mismatched rq_psn it would drop the
 * request as a duplicate or out of sequence, and placed bytes would land for a WRITE
 * that fails). Not WRITE_WITH_IMM: without a receive WQE the responder answers RNR and
 * its memory must stay untouched, which the sender cannot know beforehand. */
/* What direct WRITEs and direct READs both need: a plain RC QP on the intra-host link
 * without authenticated mode, psn the oldest unacknowledged and the next to send with
 * nothing of the send queue before it, and not the send queue's first PSN. */
static bool direct_ok(const struct swv_qp *qp, uint32_t psn)
{
	return qp->type == IBV_QPT_RC && qp->xrc == SWV_XRC_NONE && !qp->auth->on && qp->ep &&
	       qp->ep->shm && psn == qp->req->una_psn && psn == qp->req->sent_psn &&
	       psn != (qp->attr.sq_psn & SWV_PSN_MASK) && qp->sq.head == qp->req->cur;
}

static bool direct_write_ok(const struct swv_qp *qp, const struct swv_send_wqe *w, uint32_t psn)
{
	return w->opcode == IBV_WR_RDMA_WRITE && psn == w->first_psn && direct_ok(qp, psn) &&
	       (w->npkts == 1 ? w->length <= qp->mtu : w->length <= PLACE_MAX_MSG);
}

/* The placement request of w towards its peer, for a direct access with this right. */
static struct swv_shm_direct direct_desc(const struct swv_qp *qp, const struct swv_send_wqe *w,
					 unsigned access)
{
	return (struct swv_shm_direct){.dqpn = qp->attr.dest_qp_num,
				       .sqpn = qp->qpn,
				       .rkey = w->rkey,
				       .pkey = qp->pkey,
				       .access = access,
				       .va = w->remote_addr,
				       .read = access == IBV_ACCESS_REMOTE_READ};
}

/* Copy all of multi-packet WRITE w straight into the peer's memory, with one system
 * call from its SGEs (or inline bytes); true: every packet of it may go header-only,
 * flagged placed, when it leaves for the first time. The local checks of a gather
 * run on the whole message first: a bad lkey is not placed, and the ring's gather
 * reports it at its packet as before. */
static bool place_whole(struct swv_qp *qp, const struct swv_send_wqe *w)
{
	struct iovec iov[PLACE_MAX_IOV];
	int n;
	if (w->num_sge == 0 && (w->send_flags & IBV_SEND_INLINE)) {
		iov[0].iov_base = (void *)(uintptr_t)w->inline_data;
		iov[0].iov_len = w->length;
		n = 1;
	} else {
		n = swv_mr_gather_iov(qp->ctx, qp->pd, w->sge, w->num_sge, w->length, iov,
				      PLACE_MAX_IOV);
		if (n <= 0)
			return false;
	}
	struct swv_shm_direct d = direct_desc(qp, w, IBV_ACCESS_REMOTE_WRITE);
	d.pmtu = qp->mtu;
	d.iov = iov;
	d.iovcnt = n;
	if (swv_ep_direct(qp->ep, &qp->peer, &d, NULL, w->length))
		return false;
	qp->req->n_placed++;
	return true;
}

/* Whether packet psn of w goes header-only, flagged placed: w is a WRITE placed whole
 * and the packet leaves for the first time (a resent one carries its bytes again, the
 * same bytes: harmless, and no memory of what was placed is needed). */
static bool write_placed(const struct swv_qp *qp, const struct swv_send_wqe *w, uint32_t psn)
{
	return w->opcode == IBV_WR_RDMA_WRITE && w->npkts > 1 && w->placed &&
	       swv_psn_cmp(psn, qp->req->sent_psn) >= 0;
}

/* Copy the payload straight into the peer's memory; false: send it in the packet. */
static bool place_direct(struct swv_qp *qp, const struct swv_send_wqe *w, const void *payload,
			 uint32_t len)
{
	struct swv_shm_direct d = direct_desc(qp, w, IBV_ACCESS_REMOTE_WRITE);
	if (swv_ep_direct(qp->ep, &qp->peer, &d, (void *)(uintptr_t)payload, len))
		return false;
	qp->req->n_placed++;
	return true;
}

/* Whether READ w (PSN psn) may be read directly from the responder's memory and
 * completed here at once (docs/design.md, "The intra-host link", READ): the rules of
 * direct_write_ok -- RC, nothing of the QP unacknowledged (every earlier request
 * executed and retired, so the read overtakes nothing and its CQE follows every
 * earlier one), sent for the first time, something acknowledged since sq_psn was set
 * (the responder expects this PSN) -- and one response packet's worth, not empty (a
 * zero-length READ looks at no R_Key: it takes the ring). */
static bool direct_read_ok(const struct swv_qp *qp, const struct swv_send_wqe *w, uint32_t psn)
{
	return w->npkts == 1 && w->length && w->length <= qp->mtu && direct_ok(qp, psn);
}

struct swv_pd *swv_req_wqe_pd(const struct swv_qp *qp, const struct swv_send_wqe *w)
{
	return w->tm_op == SWV_TM_WQE_READ && qp->srq ? qp->srq->pd : qp->pd;
}

/* Read READ w's bytes straight from the peer's memory into its SGEs (at most one MTU,
 * through buf); false: nothing may be assumed about the SGEs' bytes (a READ's target
 * is undefined until it completes) and the READ takes the ring, whose responder and
 * completer then report what is wrong (a bad local SGE: the completer's LOC_PROT_ERR
 * when it scatters the response). */
static bool place_read(struct swv_qp *qp, const struct swv_send_wqe *w, uint8_t *buf)
{
	struct swv_shm_direct d = direct_desc(qp, w, IBV_ACCESS_REMOTE_READ);
	if (swv_ep_direct(qp->ep, &qp->peer, &d, buf, w->length))
		return false;
	return swv_mr_scatter(qp->ctx, swv_req_wqe_pd(qp, w), w->sge, w->num_sge, 0, buf,
			      w->length) == 0;
}

/* The fields every request packet of w carries: P_Key, destination QP, PSN; for UD
 * the destination and Q_Key of the WQE (post_send copied them from wr.ud) and a DETH
 * naming this QP as the source. */
static void req_pkt_init(const struct swv_qp *qp, const struct swv_send_wqe *w, uint32_t psn,
			 struct swv_pkt *p)
{
	memset(p, 0, sizeof(*p));
	p->pkey = qp->pkey;
	p->dqpn = qp->attr.dest_qp_num;
	p->psn = psn;
	if (qp->type == IBV_QPT_UD) {
		p->dqpn = w->ud_remote_qpn;
		p->deth_qkey = w->ud_remote_qkey;
		p->deth_sqpn = qp->qpn;
		p->deth_rsvd = w->ud_deth_rsvd;
	}
}

/* Whether w's payload is inline in the WQE (left there) rather than in its SGEs. */
static bool req_inline(const struct swv_send_wqe *w)
{
	return w->num_sge == 0 && (w->send_flags & IBV_SEND_INLINE);
}

/* The payload of a data packet (p->paylen bytes at offset off of w): inline data where
 * it is, else gathered from the SGEs into buf. Returns 0 or an ibv_wc_status. */
static int req_payload(struct swv_qp *qp, const struct swv_send_wqe *w, uint64_t off, uint8_t *buf,
		       struct swv_pkt *p)
{
	if (req_inline(w)) {
		p->payload = w->inline_data + off;
		return 0;
	}
	int rc = swv_mr_gather(qp->ctx, qp->pd, w->sge, w->num_sge, off, buf, p->paylen);
	if (rc)
		return rc;
	p->payload = buf;
	return 0;
}

/* Build and transmit packet k (PSN psn) of w, 'since' packets after the last AckReq.
 * Returns 0, EAGAIN (socket full: retry later), or minus an ibv_wc_status when the WQE
 * fails locally. */
static int send_packet(struct swv_qp *qp, struct swv_send_wqe *w, uint32_t psn, uint32_t k,
		       uint32_t since, bool *ackreq_out)
{
	struct swv_req_state *r = qp->req;
	uint8_t data[4096];
	struct swv_pkt p;
	req_pkt_init(qp, w, psn, &p);

	switch (w->opcode) {
	case IBV_WR_RDMA_READ: {
		/* A retry re-issues the READ for bytes not yet placed, with the VA advanced
		 * by whole PMTUs (roce-wire.md 4.4). The first request asks for the whole
		 * message (the responder counts it once); a retry asks for at most a
		 * window's worth, because every retry makes the responder replay all it
		 * asks for, and replaying the rest of a large READ at each loss would be
		 * quadratic. The next chunk is asked for when one completes. */
		uint32_t off = 0, len = w->length;
		if (w->read_requested && qp->sq.head == r->cur && r->read_off) {
			/* Only once a response arrived is the original known to have been
			 * executed (and its range saved for replays); before that a retry
			 * may be the first request the responder sees and must ask for
			 * the whole message. */
			off = r->read_off;
			len = (uint32_t)SWV_MIN((uint64_t)w->length - off,
						(uint64_t)SWV_MIN(r->cwnd, SWV_READ_WINDOW) * qp->mtu);
		}
		w->read_requested = true;
		w->read_req_end = off + len;
		p.opcode = swv_wr_wire_op(w->opcode, 0, 1);
		p.reth_va = w->remote_addr + off;
		p.reth_rkey = w->rkey;
		p.reth_len = len;
		p.ackreq = true;
		/* Read here, the request still goes to the responder (flagged placed) to
		 * take its PSN, be checked and counted; swv_req_run completes the READ
		 * once the request is on its way. */
		p.placed = direct_read_ok(qp, w, psn) && place_read(qp, w, data);
		break;
	}
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		p.opcode = swv_wr_wire_op(w->opcode, 0, 1);
		p.atm_va = w->remote_addr;
		p.atm_rkey = w->rkey;
		if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
			p.atm_swap_add = w->swap;
			p.atm_cmp = w->compare_add;
		} else {
			p.atm_swap_add = w->compare_add;
		}
		p.ackreq = true;
		break;
	case IBV_WR_ATOMIC_WRITE:
		/* RETH and the 8 bytes (copied into the WQE at post, in swap) */
		p.opcode = swv_wr_wire_op(w->opcode, 0, 1);
		p.reth_va = w->remote_addr;
		p.reth_rkey = w->rkey;
		p.reth_len = 8;
		p.payload = (const uint8_t *)&w->swap;
		p.paylen = 8;
		p.ackreq = true;
		break;
	case IBV_WR_FLUSH:
		/* FETH from swap (type | level << 8), the range's length in compare_add */
		p.opcode = swv_wr_wire_op(w->opcode, 0, 1);
		p.feth = (uint32_t)(w->swap & SWV_FETH_PLT_MASK) |
			 (uint32_t)(((w->swap >> 8) << SWV_FETH_SEL_SHIFT) & SWV_FETH_SEL_MASK);
		p.reth_va = w->remote_addr;
		p.reth_rkey = w->rkey;
		p.reth_len = (uint32_t)w->compare_add;
		p.ackreq = true;
		break;
	default: {
		uint64_t off = data_pkt_fields(qp, w, k, since, &p);
		if (w->opcode == IBV_WR_RDMA_WRITE && w->npkts > 1) {
			/* placed whole when its first packet leaves for the first time, and
			 * once: a first packet the full ring refused comes back here placed,
			 * and a resend of it (a probe) must not take the placement back from
			 * the packets still to leave for the first time */
			if (k == 0 && !w->placed)
				w->placed = direct_write_ok(qp, w, psn) && place_whole(qp, w);
			if (write_placed(qp, w, psn)) {
				p.placed = true;
				p.paylen = 0;
			}
		}
		if (p.paylen) {
			int rc = req_payload(qp, w, off, data, &p);
			if (rc)
				return -rc;
			/* placed once: a packet the full ring refused comes back placed */
			bool direct = w->npkts == 1 && direct_write_ok(qp, w, psn);
			if (direct && !w->placed)
				w->placed = place_direct(qp, w, p.payload, p.paylen);
			if (direct && w->placed) {
				p.placed = true;
				p.payload = NULL;
				p.paylen = 0;
			}
		}
		break;
	}
	}
	if (qp->xrc == SWV_XRC_INI && !(p.opcode & SWV_OP_XRC)) { /* READ and atomics */
		p.opcode |= SWV_OP_XRC;
		p.xrc_srqn = w->xrc_srqn;
	}
	p.sack = qp->type == IBV_QPT_RC;
	uint8_t mc[SWV_MGID_LEN + sizeof(data)];
	if (qp->type == IBV_QPT_UD && (p.deth_rsvd & SWV_DETH_MGID)) {
		/* To a multicast group: the MGID goes first (transport/packet.h) */
		memcpy(mc, w->ud_mgid, SWV_MGID_LEN);
		if (p.paylen)
			memcpy(mc + SWV_MGID_LEN, p.payload, p.paylen);
		p.payload = mc;
		p.paylen += SWV_MGID_LEN;
	}
	/* Anything but EAGAIN is a lost packet (swv_txrun_send): it counts as sent. */
	int rc = swv_tx_pkt(qp, qp->type == IBV_QPT_UD ? &w->ud_dst : NULL, &p);
	if (rc == EAGAIN)
		return EAGAIN;
	r->n_pkts++;
	*ackreq_out = p.ackreq;
	/* Only a request that left completes its placed READ: one lost on the way is
	 * retried as a plain READ (its PSN is then no longer sent_psn) and answered with
	 * data as ever. */
	r->read_placed = p.placed && p.opcode == SWV_OP_READ_REQUEST && !rc;
	return 0;
}

bool swv_req_read_executed(const struct swv_qp *qp, const struct swv_send_wqe *w)
{
	const struct swv_req_state *r = qp->req;
	return r->rd_hi_valid && w->state != SWV_WQE_POSTED &&
	       swv_psn_cmp(w->first_psn, r->rd_hi) < 0;
}

int swv_req_read_again(struct swv_qp *qp, struct swv_send_wqe *w, uint32_t psn, uint32_t npkts)
{
	struct swv_req_state *r = qp->req;
	struct swv_pkt p;
	uint64_t off = (uint64_t)((psn - w->first_psn) & SWV_PSN_MASK) * qp->mtu;

	req_pkt_init(qp, w, psn, &p);
	p.opcode = SWV_OP_READ_REQUEST;
	/* the VA advanced by whole PMTUs, as a mid-message retry (roce-wire.md 4.4) */
	p.reth_va = w->remote_addr + off;
	p.reth_rkey = w->rkey;
	p.reth_len = (uint32_t)SWV_MIN((uint64_t)npkts * qp->mtu, w->length - off);
	p.ackreq = true;
	p.sack = true;
	if (qp->xrc == SWV_XRC_INI) {
		p.opcode |= SWV_OP_XRC;
		p.xrc_srqn = w->xrc_srqn;
	}
	if (swv_tx_pkt(qp, NULL, &p) == EAGAIN)
		return EAGAIN;
	r->n_pkts++;
	r->n_read_rereqs++;
	return 0;
}

/* GSO fast path (docs/performance.md, "Transport"): up to 'room' packets of the
 * SEND/WRITE at the cursor, starting at cur_pkt (PSN psn), built back to back -- each a
 * complete packet with its own BTH, PSN and CRC -- and sent with one UDP_SEGMENT
 * sendmsg. Returns the number of packets that went out (the cursor is not moved),
 * 0 when none did (*again set if the socket was full), or minus an ibv_wc_status when
 * the first packet's payload cannot be gathered. */
static int send_data_run(struct swv_qp *qp, struct swv_send_wqe *w, uint32_t psn, uint32_t room,
			 bool *again)
{
	struct swv_req_state *r = qp->req;
	struct swv_txrun *run = swv_txrun_begin(qp, NULL);
	uint32_t since = r->pkts_since_ackreq;
	uint32_t since_after[SWV_EP_GSO_MAX_SEGS];

	*again = false;
	if (!run)
		return 0;
	for (uint32_t k = r->cur_pkt; k < w->npkts && swv_txrun_count(run) < room; k++) {
		struct swv_pkt p;
		req_pkt_init(qp, w, swv_psn_add(psn, k - r->cur_pkt), &p);
		uint64_t off = data_pkt_fields(qp, w, k, since, &p);
		if (write_placed(qp, w, p.psn)) {
			p.placed = true;
			p.paylen = 0;
		}
		if (!swv_txrun_fits(run, p.opcode, p.paylen))
			break;
		if (p.paylen) {
			uint8_t *dst = req_inline(w) ? NULL : swv_txrun_stage(run, p.paylen);
			if (!dst && !req_inline(w))
				break;
			int rc = req_payload(qp, w, off, dst, &p);
			if (rc) {
				if (swv_txrun_count(run) == 0)
					return -rc;
				break; /* send what was built; the next call reports it */
			}
		}
		if (!swv_txrun_add(run, &p))
			break;
		since = p.ackreq ? 0 : since + 1;
		since_after[swv_txrun_count(run) - 1] = since;
	}
	unsigned sent = 0;
	*again = swv_txrun_send(run, &sent) == EAGAIN; /* else lost, as in send_packet */
	if (sent)
		r->pkts_since_ackreq = since_after[sent - 1];
	r->n_pkts += sent;
	return (int)sent;
}

/* Whether the packets of w left at the cursor go out as one GSO run (send_data_run):
 * two or more of a SEND/WRITE, past a WRITE's FIRST, whose RETH makes it longer than
 * the rest. */
static bool gso_run_fits(const struct swv_qp *qp, const struct swv_send_wqe *w)
{
	const struct swv_req_state *r = qp->req;
	bool write_first = r->cur_pkt == 0 && swv_wr_is(w->opcode, SWV_WRF_WRITE);
	return !is_rd_atomic(w->opcode) && !write_first && w->npkts - r->cur_pkt >= 2 &&
	       swv_ep_gso_usable(qp->ep);
}

/* The head WQE failed locally (e.g. LOC_PROT_ERR while gathering): complete it and
 * move to ERR. Later WQEs flush. */
static void fail_head(struct swv_qp *qp, int status)
{
	if (swv_req_complete_head(qp, status))
		swv_qp_cq_overflow(qp, qp->scq);
	else
		swv_qp_to_error(qp);
}

static void check_sq_drained(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	if (qp->state == IBV_QPS_SQD && r->sqd_event_pending && qp->sq.head == r->started) {
		r->sqd_event_pending = false;
		swv_async_event(qp->ctx, IBV_EVENT_SQ_DRAINED, &qp->qpx.qp_base);
	}
}

/* The destination of a UD WQE as one number (IPv4 << 16 | port). */
static uint64_t ud_dst_key(const struct swv_send_wqe *w)
{
	return (uint64_t)ntohl(w->ud_dst.sin_addr.s_addr) << 16 | ntohs(w->ud_dst.sin_port);
}

/* The link refused (EAGAIN) the datagram of the UD WQE w: whether to drop it. A full
 * socket buffer, or the full ring of an intra-host receiver that stopped (SIGSTOP, a
 * debugger), can refuse for ever, and the WQE at the head of the send queue would hold
 * every later one, to every other destination. Once its destination has refused for
 * SWV_UD_REFUSED_DROP_NS (no datagram to it accepted since), the datagram is lost as an
 * unreliable datagram service loses it at a full buffer, and each later one to that
 * destination too until it accepts one again. RC and UC keep waiting: RC retransmits
 * anyway, and a UC sender's credit says the receiver has room. */
static bool ud_refused_drop(struct swv_qp *qp, const struct swv_send_wqe *w)
{
	struct swv_req_state *r = qp->req;
	uint64_t dst = ud_dst_key(w), now = swv_now_ns();
	if (!r->ud_refused_since || r->ud_refused_dst != dst) {
		r->ud_refused_since = now;
		r->ud_refused_dst = dst;
		return false;
	}
	if (now - r->ud_refused_since < SWV_UD_REFUSED_DROP_NS)
		return false;
	r->n_ud_refused_drops++;
	return true;
}

/* UC and UD (roce-wire.md 4.3, 7.2): nothing is acknowledged, so there is no window,
 * no ACK timer and no retry; UC packets wait for the receiver's credit (flowctl.h). The head WQE
 * gets its PSNs, its packets go out in order, and it completes -- CQE if signaled, SEND or
 * RDMA_WRITE counter -- as soon as its last packet has been handed to the socket (comp-cntr.md:
 * "UC/UD: handed to the wire"). The cursor is always the head: r->cur == sq.head, r->cur_pkt its
 * packets sent. A full socket leaves the rest to the progress thread (xmit_retry_at), except that a
 * UD datagram refused for too long is dropped (ud_refused_drop); any other transmit failure is a
 * packet lost on the wire, which an unreliable transport does not report. A local gather failure
 * completes the WQE with its status and the QP goes to ERR, as for RC. */
static void run_unreliable(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;

	r->xmit_retry_at = 0;
	while (qp->sq.head != qp->sq.tail && qp->state != IBV_QPS_ERR) {
		struct swv_send_wqe *w = swv_wq_slot(&qp->sq, qp->sq.head);
		r->cur = qp->sq.head;
		if (is_local(w->opcode)) {
			if (w->state == SWV_WQE_POSTED && qp->state == IBV_QPS_SQD)
				break;
			if (!run_local(qp, w))
				return;
			continue;
		}
		if (w->state == SWV_WQE_POSTED) {
			if (qp->state == IBV_QPS_SQD)
				break; /* SQD: finish what is in flight, start nothing new */
			w->npkts = swv_req_npkts(w->opcode, w->length, qp->mtu);
			r->cur_pkt = 0;
			if (qp->type == IBV_QPT_UD && w->length > qp->mtu) {
				/* Larger than the port MTU. IBTA C10-93.1.1, as rxe quotes and
				 * implements it: emit no packet and report no error -- the WQE
				 * takes one PSN and completes successfully. (Some HCAs report
				 * IBV_WC_LOC_LEN_ERR instead; swverbs follows the rule.) */
				w->npkts = 1;
				r->cur_pkt = 1;
			}
			w->first_psn = r->next_psn;
			w->last_psn = swv_psn_add(w->first_psn, w->npkts - 1);
			r->next_psn = swv_psn_add(r->next_psn, w->npkts);
			w->state = SWV_WQE_STARTED;
			r->started = qp->sq.head + 1;
		}
		while (r->cur_pkt < w->npkts) {
			uint32_t psn = swv_psn_add(w->first_psn, r->cur_pkt);
			uint32_t room = swv_fc_tx_room(qp, psn); /* UC: the receiver's credit */
			if (!room) {
				swv_fc_tx_blocked(qp);
				goto out;
			}
			if (room >= 2 && gso_run_fits(qp, w)) {
				bool again = false;
				int n = send_data_run(qp, w, psn, SWV_MIN(w->npkts - r->cur_pkt, room),
						      &again);
				if (n < 0) {
					fail_head(qp, -n);
					return;
				}
				r->cur_pkt += (uint32_t)n;
				swv_fc_tx_sent(qp, swv_psn_add(psn, (uint32_t)n));
				if (again) {
					r->xmit_retry_at = swv_now_ns() + XMIT_RETRY_NS;
					goto out;
				}
				if (n > 0)
					continue;
			}
			bool ackreq = false;
			int rc = send_packet(qp, w, psn, r->cur_pkt, r->pkts_since_ackreq, &ackreq);
			if (rc == EAGAIN && !(qp->type == IBV_QPT_UD && ud_refused_drop(qp, w))) {
				r->xmit_retry_at = swv_now_ns() + XMIT_RETRY_NS;
				goto out;
			}
			if (rc < 0) {
				fail_head(qp, -rc);
				return;
			}
			if (rc == 0 && r->ud_refused_since && qp->type == IBV_QPT_UD &&
			    r->ud_refused_dst == ud_dst_key(w))
				r->ud_refused_since = 0; /* it takes datagrams again */
			r->cur_pkt++;
			swv_fc_tx_sent(qp, swv_psn_add(psn, 1));
		}
		r->sent_psn = swv_psn_add(w->last_psn, 1);
		if (swv_req_complete_head(qp, IBV_WC_SUCCESS)) {
			swv_qp_cq_overflow(qp, qp->scq);
			return;
		}
	}
out:
	if (qp->state != IBV_QPS_ERR) {
		check_sq_drained(qp);
		swv_req_update_timer(qp);
	}
}

void swv_req_post(struct swv_qp *qp)
{
	const struct swv_req_state *r = qp->req;
	/* A posting thread transmits directly so that a message into an idle pipe leaves at
	 * once. With SWV_MAX_PKT_PER_ACK or more PSNs unacknowledged, one of them carries
	 * AckReq, so an ACK (or READ response, or the ACK timeout) is coming, and the
	 * progress thread runs the requester when it does; leaving the new work to it
	 * then costs no latency that matters and lets it go out in batches and GSO runs
	 * (one system call for many small messages) instead of one sendmsg per post. */
	if (qp->type == IBV_QPT_RC && !r->rnr_until && r->ack_deadline &&
	    ((r->sent_psn - r->una_psn) & SWV_PSN_MASK) >= SWV_MAX_PKT_PER_ACK)
		return;
	swv_req_run(qp);
}

/* The cursor's PSN: the next packet a (re)transmission would send. */
uint32_t swv_req_cursor_psn(const struct swv_qp *qp)
{
	const struct swv_req_state *r = qp->req;
	if (r->cur == qp->sq.tail)
		return r->next_psn;
	return cursor_psn(qp, swv_wq_slot(&qp->sq, r->cur));
}

/* Selective repeat: resend the one packet a sequence NAK asked for (sr_psn, in the
 * head SEND/WRITE), with AckReq so that its answer comes at once. Nothing to do if it
 * was acknowledged meanwhile or the cursor has not passed it (a go-back-N is resending
 * it anyway). Returns 0, EAGAIN, or minus a status (the WQE failed locally). */
static int resend_selective(struct swv_qp *qp, bool *sent)
{
	struct swv_req_state *r = qp->req;
	struct swv_send_wqe *w = NULL;
	bool ackreq = false;

	if (qp->sq.head != r->started)
		w = swv_wq_slot(&qp->sq, qp->sq.head);
	r->sr_pending = false;
	if (!w || is_rd_atomic(w->opcode) || w->state != SWV_WQE_STARTED ||
	    swv_psn_cmp(r->sr_psn, r->una_psn) < 0 || swv_psn_cmp(r->sr_psn, w->last_psn) > 0 ||
	    swv_psn_cmp(r->sr_psn, w->first_psn) < 0 ||
	    swv_psn_cmp(swv_req_cursor_psn(qp), r->sr_psn) <= 0) {
		r->sr_active = false;
		return 0;
	}
	int rc = send_packet(qp, w, r->sr_psn, (r->sr_psn - w->first_psn) & SWV_PSN_MASK,
			     SWV_MAX_PKT_PER_ACK, &ackreq);
	if (rc == EAGAIN) {
		r->sr_pending = true;
		return EAGAIN;
	}
	if (rc < 0) {
		r->sr_active = false;
		return rc;
	}
	r->n_sel_resends++;
	*sent = true;
	return 0;
}

/* Selective ACK: resend the holes a SACK map named (completer.c), in the order queued,
 * the last with AckReq. A hole acknowledged meanwhile, at or past the cursor (a
 * go-back-N is sending it anyway) or no longer in a SEND/WRITE in flight is skipped.
 * Returns 0, EAGAIN (the rest stays queued), or minus a status (the WQE of that PSN
 * failed locally: marked, or the head failed and the QP is in ERR). */
static int resend_sacked(struct swv_qp *qp, bool *sent)
{
	struct swv_req_state *r = qp->req;
	uint32_t cursor = swv_req_cursor_psn(qp), done = 0, i = qp->sq.head;
	int rc = 0;

	for (; done < r->sack_q_n; done++) {
		uint32_t q = r->sack_q[done];
		if (swv_psn_cmp(q, r->una_psn) < 0 || swv_psn_cmp(q, cursor) >= 0)
			continue;
		struct swv_send_wqe *w = NULL;
		if (i != r->started)
			w = swv_wq_slot(&qp->sq, i);
		if (!w || swv_psn_cmp(q, w->first_psn) < 0)
			i = qp->sq.head; /* queued out of order: look from the head again */
		for (; i != r->started; i++) {
			w = swv_wq_slot(&qp->sq, i);
			if (w->npkts && swv_psn_cmp(q, w->last_psn) <= 0)
				break;
		}
		if (i == r->started || swv_psn_cmp(q, w->first_psn) < 0 ||
		    is_rd_atomic(w->opcode) || w->state != SWV_WQE_STARTED)
			continue;
		bool ackreq = false;
		rc = send_packet(qp, w, q, (q - w->first_psn) & SWV_PSN_MASK,
				 done + 1 == r->sack_q_n ? SWV_MAX_PKT_PER_ACK : 0, &ackreq);
		if (rc == EAGAIN)
			break;
		if (rc < 0) {
			w->state = SWV_WQE_ERROR;
			w->status = (uint32_t)-rc;
			r->sack_q_n = 0;
			if (i == qp->sq.head)
				fail_head(qp, -rc);
			return rc;
		}
		r->n_holes_resent++;
		*sent = true;
	}
	memmove(r->sack_q, r->sack_q + done, (r->sack_q_n - done) * sizeof(r->sack_q[0]));
	r->sack_q_n -= done;
	return rc == EAGAIN ? EAGAIN : 0;
}

/* READ at the head was read directly and its request sent (send_packet): it is done,
 * as if its response had arrived. Nothing else is outstanding (direct_read_ok), so
 * no timer is armed for it and the responder's answer, carrying no data, finds the
 * PSN acknowledged already (a stale response). False when the QP stopped (a CQ
 * overflow). */
static bool complete_placed_read(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	r->una_psn = r->sent_psn;
	if (r->rd_hi_valid && swv_psn_cmp(r->una_psn, r->rd_hi) >= 0)
		r->rd_hi_valid = false;
	if (r->seq_nak_valid && swv_psn_cmp(r->una_psn, r->seq_nak_psn) > 0)
		r->seq_nak_valid = false;
	r->n_placed_reads++;
	if (swv_req_complete_head(qp, IBV_WC_SUCCESS)) {
		swv_qp_cq_overflow(qp, qp->scq);
		return false;
	}
	return true;
}

void swv_req_run(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	uint64_t tmo = swv_ack_timeout_ns(qp);
	uint32_t max_rd = qp->attr.max_rd_atomic ? qp->attr.max_rd_atomic : 1;
	const uint32_t first_new = r->sent_psn; /* PSNs from here on leave for the first time */
	bool sent = false;

	if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)
		return;
	if (qp->type != IBV_QPT_RC) {
		run_unreliable(qp);
		return;
	}
	if (r->rnr_until)
		return; /* the RNR wait ends in swv_req_timer */
	r->xmit_retry_at = 0;

	if (r->sr_pending) {
		int rc = resend_selective(qp, &sent);
		if (rc == EAGAIN) {
			r->xmit_retry_at = swv_now_ns() + XMIT_RETRY_NS;
			goto out;
		}
		if (rc < 0) {
			struct swv_send_wqe *w = swv_wq_slot(&qp->sq, qp->sq.head);
			w->state = SWV_WQE_ERROR;
			w->status = (uint32_t)-rc;
			fail_head(qp, -rc);
			return;
		}
	}

	if (r->sack_q_n) {
		int rc = resend_sacked(qp, &sent);
		if (rc == EAGAIN) {
			r->xmit_retry_at = swv_now_ns() + XMIT_RETRY_NS;
			goto out;
		}
		if (qp->state == IBV_QPS_ERR)
			return;
	}

	while (r->cur != qp->sq.tail && qp->state != IBV_QPS_ERR) {
		struct swv_send_wqe *w = swv_wq_slot(&qp->sq, r->cur);
		if (w->state == SWV_WQE_ERROR)
			break; /* completes (with its status) once it reaches the head */
		if (r->cur_pkt == 0) {
			if (w->state == SWV_WQE_POSTED && qp->state == IBV_QPS_SQD)
				break; /* SQD: finish what is in flight, start nothing new */
			if ((w->send_flags & IBV_SEND_FENCE) && r->rd_atomic_outstanding)
				break;
			if (is_rd_atomic(w->opcode) && r->rd_atomic_outstanding >= max_rd)
				break;
		}
		if (is_local(w->opcode)) {
			if (!run_local(qp, w))
				return;
			continue;
		}
		uint32_t psn = cursor_psn(qp, w);
		if (swv_psn_cmp(psn, swv_psn_add(r->una_psn, r->cwnd)) >= 0)
			break;
		/* A READ's responses take one PSN each and nothing paces them on the wire:
		 * issue it only if all the PSNs it asks for fit the READ window, unless it is the
		 * oldest thing outstanding (a READ larger than the window then runs alone).
		 * Otherwise a few large READs make the peer burst far more than the receive
		 * buffer holds, and every lost response sets off replays of all of them. */
		if (w->opcode == IBV_WR_RDMA_READ && r->cur_pkt == 0 && psn != r->una_psn) {
			uint32_t want = w->state == SWV_WQE_POSTED
						? swv_req_npkts(w->opcode, w->length, qp->mtu)
						: ((w->last_psn - psn) & SWV_PSN_MASK) + 1;
			uint32_t rw = SWV_MIN(r->cwnd, SWV_READ_WINDOW);
			if (want > rw ||
			    swv_psn_cmp(swv_psn_add(psn, want), swv_psn_add(r->una_psn, rw)) > 0)
				break;
		}
		if (w->state == SWV_WQE_POSTED) {
			/* First transmission: PSNs are assigned once and kept for retries. */
			w->npkts = swv_req_npkts(w->opcode, w->length, qp->mtu);
			w->first_psn = r->next_psn;
			w->last_psn = swv_psn_add(w->first_psn, w->npkts - 1);
			r->next_psn = swv_psn_add(r->next_psn, w->npkts);
			w->state = SWV_WQE_STARTED;
			r->started = r->cur + 1;
		}
		if (gso_run_fits(qp, w)) {
			uint32_t room = (swv_psn_add(r->una_psn, r->cwnd) - psn) & SWV_PSN_MASK;
			bool again = false;
			int n = send_data_run(qp, w, psn, room, &again);
			if (n < 0) {
				w->state = SWV_WQE_ERROR;
				w->status = (uint32_t)-n;
				if (qp->sq.head == r->cur)
					fail_head(qp, -n);
				break;
			}
			if (n > 0) {
				sent = true;
				uint32_t end = swv_psn_add(psn, (uint32_t)n);
				r->cur_pkt += (uint32_t)n;
				if (r->cur_pkt == w->npkts) {
					r->cur++;
					r->cur_pkt = 0;
				}
				if (swv_psn_cmp(end, r->sent_psn) > 0)
					r->sent_psn = end;
			}
			if (again) {
				r->xmit_retry_at = swv_now_ns() + XMIT_RETRY_NS;
				break;
			}
			if (n > 0)
				continue;
		}
		bool ackreq = false;
		int rc = send_packet(qp, w, psn, r->cur_pkt, r->pkts_since_ackreq, &ackreq);
		if (rc == EAGAIN) {
			r->xmit_retry_at = swv_now_ns() + XMIT_RETRY_NS;
			break;
		}
		if (rc < 0) {
			w->state = SWV_WQE_ERROR;
			w->status = (uint32_t)-rc;
			if (qp->sq.head == r->cur)
				fail_head(qp, -rc);
			break;
		}
		sent = true;
		r->pkts_since_ackreq = ackreq ? 0 : r->pkts_since_ackreq + 1;
		uint32_t end;
		if (is_rd_atomic(w->opcode)) {
			/* One request packet; the responses use the rest of its PSNs. */
			r->rd_atomic_outstanding++;
			end = swv_psn_add(w->last_psn, 1);
			r->cur++;
			r->cur_pkt = 0;
			if (r->read_placed) {
				/* nothing was outstanding before it (direct_read_ok) and
				 * nothing is now: no timer starts */
				r->read_placed = false;
				sent = false;
				if (swv_psn_cmp(end, r->sent_psn) > 0)
					r->sent_psn = end;
				if (!complete_placed_read(qp))
					return;
				continue;
			}
		} else {
			end = swv_psn_add(psn, 1);
			if (++r->cur_pkt == w->npkts) {
				r->cur++;
				r->cur_pkt = 0;
			}
		}
		if (swv_psn_cmp(end, r->sent_psn) > 0)
			r->sent_psn = end;
	}
	if (sent) {
		uint64_t now = swv_now_ns();
		/* The pipe was idle: the timers start; afterwards only progress and retries
		 * restart them, so that resends (a probe) never postpone the end of a QP
		 * whose peer is gone. A probe is armed while anything is outstanding. */
		if (tmo && !r->ack_deadline)
			r->ack_deadline = now + tmo;
		if (!r->rec_since)
			r->rec_since = now;
		if (!r->probe_at) {
			uint64_t probe = swv_req_probe_ns(qp);
			r->probe_at = probe ? now + probe : 0;
		}
		if (!r->rtt_at && swv_psn_cmp(r->sent_psn, first_new) > 0) {
			/* time the acknowledgement of the newest PSN, sent now for the first
			 * time (Karn: an ACK of a resent PSN answers which copy?) */
			r->rtt_psn = swv_psn_add(r->sent_psn, SWV_PSN_MASK);
			r->rtt_at = now;
		}
	}
out:
	if (qp->state != IBV_QPS_ERR) {
		check_sq_drained(qp);
		swv_req_update_timer(qp);
	}
}
