/*
 * Completer (rxe's comp): consumes ACK / NAK / RDMA READ responses / ATOMIC ACKs,
 * retires send WQEs strictly in posting order, places READ data and atomic results,
 * and drives retries: go-back-N on a sequence NAK, on the local ACK timeout and on a
 * lost READ/atomic response; RNR waits. Any progress reloads both retry counters.
 */
#include <errno.h>
#include <string.h>

#include "core/async.h"
#include "core/context.h"
#include "core/mr.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/requester.h"
#include "transport/wr_opcode.h"
#include "util/clock.h"
#include "util/log.h"

/* RNR timer code -> microseconds (roce-wire.md 3; code 25 is 61.44 ms). */
static const uint32_t rnr_us[32] = {
	655360, 10,    20,    30,    40,    60,    80,    120,   160,   240,   320,
	480,    640,   960,   1280,  1920,  2560,  3840,  5120,  7680,  10240, 15360,
	20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
};

static struct swv_send_wqe *head_wqe(struct swv_qp *qp)
{
	if (qp->sq.head == qp->req->started)
		return NULL; /* nothing started and incomplete */
	return swv_wq_slot(&qp->sq, qp->sq.head);
}

/* Complete the head; false when the QP is now in ERR (error status or CQ overflow). */
static bool comp_head(struct swv_qp *qp, int status)
{
	if (swv_req_complete_head(qp, status)) {
		swv_qp_cq_overflow(qp, qp->scq);
		return false;
	}
	if (status != IBV_WC_SUCCESS) {
		swv_qp_to_error(qp);
		return false;
	}
	return true;
}

/* Go-back-N: the cursor returns to the oldest incomplete WQE; its acknowledged
 * packets are skipped, later WQEs are resent with the same PSNs. */
static void rewind_cursor(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	r->cur = qp->sq.head;
	r->cur_pkt = 0;
	r->rd_atomic_outstanding = 0;
	r->pkts_since_ackreq = 0;
	r->sr_pending = r->sr_active = false; /* the go-back-N resends that packet too */
	r->sack_q_n = 0;		      /* and every hole a SACK map named */
	r->rd_rereq_psn = r->una_psn;	      /* and asks for every READ response again */
	r->rd_far = false;
	struct swv_send_wqe *w = head_wqe(qp);
	if (w && !swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC)) {
		uint32_t acked = (r->una_psn - w->first_psn) & SWV_PSN_MASK;
		r->cur_pkt = acked < w->npkts ? acked : w->npkts - 1;
	}
}

/* Timing statistics: the interval under way took this recovery (SWV_REC_*). */
static void rec_mark(struct swv_req_state *r, uint8_t kind)
{
	if (r->rec_kind < kind)
		r->rec_kind = kind;
}

/* The next tail-loss probe, later than the last (see swv_req_probe_ns). */
static void arm_probe(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	if (r->probe_backoff < 8)
		r->probe_backoff++;
	uint64_t p = swv_req_probe_ns(qp);
	r->probe_at = p ? swv_now_ns() + p : 0;
}

/* A retry caused by a timeout, a sequence NAK or a lost response: counts against
 * retry_cnt, which is a count for every value 0-7 (only rnr_retry 7 means infinite,
 * docs/responder.md "Retry rules"). False when retries are exhausted (the head WQE
 * completed with RETRY_EXC_ERR and the QP is in ERR). */
static bool retry_charge(struct swv_qp *qp, const char *why)
{
	struct swv_req_state *r = qp->req;
	r->n_retries++;
	swv_log(SWV_LOG_DEBUG, "qp %#x: retry (%s) from psn %#x, head %u cur %u tail %u, left %u",
		qp->qpn, why, r->una_psn, qp->sq.head, r->cur, qp->sq.tail, r->retry_left);
	if (r->retry_left == 0) {
		comp_head(qp, IBV_WC_RETRY_EXC_ERR);
		return false;
	}
	r->retry_left--;
	r->round_open = true; /* see evidence_charge */
	r->round_una = r->una_psn;
	r->round_hi = r->sent_psn;
	r->backlog_mark = 0; /* what the resend puts on the ring is a new question */
	uint64_t tmo = swv_ack_timeout_ns(qp);
	r->ack_deadline = tmo ? swv_now_ns() + tmo : 0;
	r->rtt_at = 0; /* Karn: an ACK after a resend times no one transmission */
	arm_probe(qp); /* in case this resend is lost too */
	return true;
}

/* The retry that evidence of a loss at psn -- a sequence NAK, an implied NAK, the NAK
 * of a SACK map -- spends: one per recovery round. After a charged retry from una, all
 * the evidence the packets then in flight (below round_hi) can still bring names that
 * same loss, however late each copy comes (past every hold-off while a lost READ or
 * atomic response blocks the head), so until una advances it resends, as asked, but
 * spends nothing; an ACK timeout still charges and starts a new round, which keeps a
 * dead peer's bound. Evidence past round_hi names a PSN first sent after the retry:
 * a new loss. As rxe's completer, which starts one retry and ignores further NAKs
 * until a response makes progress or its timer fires. 1: a retry was spent; 0: none
 * (inside the round); -1: retries exhausted, the QP is in ERR. */
static int evidence_charge(struct swv_qp *qp, uint32_t psn, const char *why)
{
	struct swv_req_state *r = qp->req;
	if (r->round_open && r->una_psn == r->round_una && swv_psn_cmp(psn, r->round_hi) < 0) {
		swv_log(SWV_LOG_DEBUG,
			"qp %#x: %s at psn %#x: inside the round from %#x to %#x, no retry",
			qp->qpn, why, psn, r->round_una, r->round_hi);
		r->n_round_free++;
		r->rtt_at = 0; /* Karn: what it resends was sent before */
		return 0;
	}
	return retry_charge(qp, why) ? 1 : -1;
}

static void cwnd_halve(struct swv_req_state *r)
{
	uint32_t floor = SWV_MIN(SWV_CWND_MIN, r->window);
	r->cwnd = r->cwnd / 2 > floor ? r->cwnd / 2 : floor;
}

static bool retry(struct swv_qp *qp, const char *why)
{
	if (!retry_charge(qp, why))
		return false;
	cwnd_halve(qp->req);
	rewind_cursor(qp);
	return true;
}

/* A go-back-N for evidence at psn: the window halves once per round. */
static void retry_evidence(struct swv_qp *qp, uint32_t psn, const char *why)
{
	int c = evidence_charge(qp, psn, why);
	if (c < 0)
		return;
	if (c > 0)
		cwnd_halve(qp->req);
	rewind_cursor(qp);
}

/* Selective repeat for a sequence NAK at psn inside the head SEND/WRITE: the same retry
 * as a go-back-N costs, but only psn is resent (swv_req_run) and the cursor goes on.
 * The window stays: one resent packet adds no load to the path, and every reordered
 * packet makes the responder NAK, so halving here would shrink the window under mere
 * reordering. */
static void retry_selective(struct swv_qp *qp, uint32_t psn)
{
	struct swv_req_state *r = qp->req;
	if (evidence_charge(qp, psn, "sequence NAK, selective") < 0)
		return;
	r->sr_pending = true;
	r->sr_active = true;
	r->sr_probe = false;
	r->sr_psn = psn;
	r->sr_hi = r->sent_psn;
}

/* An ACK while a selective resend is outstanding. The responder executes in order, so
 * an ACK for exactly the resent PSN while PSNs sent before the resend (which reached
 * the responder first) stay unacknowledged says it did not keep them: it has no
 * reorder buffer (as Linux rxe), or they were all lost too. Go back N from there,
 * without another retry -- the NAK paid for this recovery. An ACK past the resent PSN
 * shows that what followed it was kept (or that the NAKed packet had only been
 * reordered): nothing more to learn. */
static void selective_answer(struct swv_qp *qp, uint32_t psn)
{
	struct swv_req_state *r = qp->req;
	if (r->sr_pending || swv_psn_cmp(psn, r->sr_psn) < 0)
		return;
	r->sr_active = false;
	if (psn != r->sr_psn || swv_psn_cmp(r->una_psn, r->sr_hi) >= 0 || !head_wqe(qp))
		return;
	swv_log(SWV_LOG_DEBUG, "qp %#x: ACK %#x after resending it, sent to %#x: go-back-N%s",
		qp->qpn, psn, r->sr_hi, r->sr_probe ? " (probe)" : "");
	rewind_cursor(qp);
	if (r->sr_probe)
		return; /* see below */
	/* Only the answer to a NAK says the peer keeps nothing: it NAKed p because a later
	 * packet had reached it. A probe's answer may just find a peer that has not read
	 * the rest yet (a loaded host's receiver falls milliseconds behind): the rest is
	 * resent, but the next NAKs still try selective repeat -- taking the peer for one
	 * without a reorder buffer halved the window at each of them. */
	r->n_sr_fallbacks++;
	r->sr_gbn_left = SWV_SR_GBN_AFTER_FALLBACK;
}

/* How long after an implied-NAK retry further implied NAKs are taken as echoes of the
 * loss already acted on: every response in flight when the retry began repeats the
 * same evidence. Twice the smoothed round trip, so a loss in the retry's own answer is
 * acted on soon after that answer could have arrived; at least 200 us, at most an
 * eighth of the ACK timeout (1 ms without a timer), which also applies before a round
 * trip was measured. */
static uint64_t implied_holdoff_ns(const struct swv_qp *qp)
{
	uint64_t tmo = swv_ack_timeout_ns(qp);
	uint64_t max = tmo ? tmo / 8 : 1000000;
	uint64_t h = qp->req->srtt_ns ? 2 * qp->req->srtt_ns : max;
	if (h < 200000)
		h = 200000;
	return h < max ? h : max;
}

/* An implied NAK: a response for a later PSN (psn) while the head READ/atomic still
 * misses its own, a gap inside the head READ's responses, or a sequence NAK past them.
 * After the retry it causes, further implied NAKs are echoes while the hold-off runs
 * and while echoes remain: at most one response per PSN that was in flight past psn
 * (a long READ burst outlasts any round-trip estimate). Progress re-arms the rule at
 * once; a silence meanwhile is the tail-loss probe's. One lost response used to cost a
 * retry per later response and so end the connection (docs/responder.md "Retry
 * rules"). */
/* What an implied NAK does: 1 when it took a retry, 2 when it acts inside the round
 * under way without one (evidence_charge), 0 for an echo (or while an RNR NAK is
 * waited out): nothing to resend, -1 when retries are exhausted (the QP is in ERR).
 * at is the PSN whose answer is the evidence (psn, or psn - 1 for an answer that
 * acknowledges psn - 1). */
static int implied_charge(struct swv_qp *qp, uint32_t psn, uint32_t at, const char *why)
{
	struct swv_req_state *r = qp->req;
	uint64_t now = swv_now_ns();
	if (r->rnr_until)
		return 0; /* the RNR wait ends in a resend from the oldest PSN anyway */
	if (r->implied_retry_at) {
		bool young = now - r->implied_retry_at < implied_holdoff_ns(qp);
		if (young || r->implied_echoes) {
			if (r->implied_echoes)
				r->implied_echoes--;
			r->n_dup_resp++;
			return 0;
		}
	}
	r->implied_retry_at = now;
	r->implied_echoes = swv_psn_cmp(r->sent_psn, psn) > 0
				    ? ((r->sent_psn - psn) & SWV_PSN_MASK) - 1
				    : 0;
	int c = evidence_charge(qp, at, why);
	return c ? c : 2;
}

static void implied_nak(struct swv_qp *qp, uint32_t psn, uint32_t at, const char *why)
{
	int c = implied_charge(qp, psn, at, why);
	if (c > 0) {
		if (c == 1)
			cwnd_halve(qp->req);
		rewind_cursor(qp);
	}
}

/* A SACK map (docs/wire.md, "Selective ACK"; docs/responder.md, "Retry rules") whose
 * first missing PSN, base, lies in the head SEND/WRITE: base (only for a sequence NAK,
 * nak) and every SEND/WRITE PSN the map shows missing below the highest PSN it holds
 * are queued for resending at once (swv_req_run), each unless it was resent that way
 * within the hold-off (it is still on its way: each hole goes out once per round trip,
 * however many maps name it). The retry is the NAK's, as for a plain one, and spent
 * only when base goes out again; the other holes ride along free, at most a window
 * per hold-off, and the ACK timeout still runs. The map only makes resends sooner:
 * PSNs past the cursor (sent anyway) or past what was sent are ignored, and nothing
 * completes but by the cumulative ACK. */
static void sack_resend(struct swv_qp *qp, const struct swv_pkt *pkt, uint32_t psn, bool nak)
{
	struct swv_req_state *r = qp->req;
	uint32_t top = 0, i = qp->sq.head;
	uint32_t now_us = (uint32_t)(swv_now_ns() / 1000);
	uint32_t hold_us = (uint32_t)(implied_holdoff_ns(qp) / 1000);
	uint32_t limit = swv_req_cursor_psn(qp);

	if (nak)
		r->n_sack_naks++;
	rec_mark(r, SWV_REC_NAK);
	for (uint32_t b = 0; b < pkt->sack_len * 8u; b++)
		if (pkt->sack_map[b / 8] >> (b % 8) & 1)
			top = b + 1;
	for (uint32_t b = nak ? 0 : 1; b <= top; b++) {
		/* b = 0 is psn itself; b > 0 is map bit b - 1, PSN psn + b */
		if (b && pkt->sack_map[(b - 1) / 8] >> ((b - 1) % 8) & 1)
			continue;
		uint32_t q = swv_psn_add(psn, b);
		if (swv_psn_cmp(q, limit) >= 0 || swv_psn_cmp(q, r->sent_psn) >= 0)
			break;
		struct swv_send_wqe *w = NULL;
		for (; i != r->started; i++) {
			w = swv_wq_slot(&qp->sq, i);
			if (w->npkts && swv_psn_cmp(q, w->last_psn) <= 0)
				break;
		}
		if (i == r->started)
			break;
		if (swv_psn_cmp(q, w->first_psn) < 0 || swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC) ||
		    w->state != SWV_WQE_STARTED)
			continue;
		uint32_t slot = q & (SWV_MAX_UNACKED_PSNS - 1);
		if (r->sack_tag[slot] == (q | SWV_RD_SEEN) && now_us - r->sack_us[slot] < hold_us)
			continue;
		if (r->sack_q_n == SWV_MAX_UNACKED_PSNS)
			break;
		if (q == psn && evidence_charge(qp, psn, "sequence NAK, SACK") < 0)
			return;
		r->sack_q[r->sack_q_n++] = q;
		r->sack_tag[slot] = q | SWV_RD_SEEN;
		r->sack_us[slot] = now_us;
		if (r->rtt_at && swv_psn_cmp(q, r->rtt_psn) <= 0)
			r->rtt_at = 0; /* Karn: the ACK that would time it now answers a resend */
	}
}

/* An ACK with a map: the responder holds packets past psn + 1, the gap its NAK named
 * (or, for the update it sends between NAKs, the PSN the NAK already acknowledged up
 * to); the holes opened since go out now. */
static void sack_ack(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	struct swv_req_state *r = qp->req;
	struct swv_send_wqe *w = head_wqe(qp);
	uint32_t gap = swv_psn_add(pkt->psn, 1);
	if (w && !swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC) && !r->rnr_until && !r->sr_gbn_left &&
	    swv_psn_cmp(gap, w->first_psn) >= 0 && swv_psn_cmp(gap, w->last_psn) <= 0)
		sack_resend(qp, pkt, gap, false);
}

/* ------------------------------------------------- selective repeat for READ responses */

static bool rd_seen(const struct swv_req_state *r, uint32_t psn)
{
	return r->rd_seen[psn & (SWV_MAX_UNACKED_PSNS - 1)] == (psn | SWV_RD_SEEN);
}

/* An answer for end - 1 arrived: the responder executed every request before end. */
static void rd_hi_raise(struct swv_req_state *r, uint32_t end)
{
	if (!r->rd_hi_valid || swv_psn_cmp(end, r->rd_hi) > 0) {
		r->rd_hi = end;
		r->rd_hi_valid = true;
	}
}

/* Ask again for the response PSNs in [from, to) that are missing from the READs the
 * responder executed and the cursor has passed (it asks for the others itself): one
 * READ request per run of missing PSNs inside one READ. With 'send' false only counts
 * the runs. Only PSNs within SWV_MAX_UNACKED_PSNS of una_psn are known (rd_seen). */
static unsigned read_rerequest(struct swv_qp *qp, uint32_t from, uint32_t to, bool send)
{
	struct swv_req_state *r = qp->req;
	unsigned runs = 0;

	if (swv_psn_cmp(from, r->una_psn) < 0)
		from = r->una_psn;
	for (uint32_t i = qp->sq.head; i != r->started && (int32_t)(i - r->cur) < 0; i++) {
		struct swv_send_wqe *w = swv_wq_slot(&qp->sq, i);
		if (w->npkts == 0 || w->opcode != IBV_WR_RDMA_READ)
			continue; /* a local operation, a SEND/WRITE or an atomic */
		if (w->state != SWV_WQE_STARTED || swv_psn_cmp(w->first_psn, to) >= 0 ||
		    !swv_req_read_executed(qp, w))
			break;
		uint32_t lo = swv_psn_cmp(w->first_psn, from) > 0 ? w->first_psn : from;
		uint32_t end = swv_psn_add(w->last_psn, 1);
		uint32_t hi = swv_psn_cmp(end, to) < 0 ? end : to;
		if (i == qp->sq.head) {
			uint32_t placed = swv_psn_add(w->first_psn, r->read_off / qp->mtu);
			if (swv_psn_cmp(placed, lo) > 0)
				lo = placed;
		}
		for (uint32_t p = lo; swv_psn_cmp(p, hi) < 0;) {
			if (swv_psn_diff(p, r->una_psn) >= (int32_t)SWV_MAX_UNACKED_PSNS)
				return runs;
			if (rd_seen(r, p)) {
				p = swv_psn_add(p, 1);
				continue;
			}
			uint32_t q = swv_psn_add(p, 1);
			while (swv_psn_cmp(q, hi) < 0 && !rd_seen(r, q)) {
				/* nothing past the window was placed (handle_read_resp
				 * drops it): the run goes on to hi */
				if (swv_psn_diff(q, r->una_psn) >= (int32_t)SWV_MAX_UNACKED_PSNS) {
					q = hi;
					break;
				}
				q = swv_psn_add(q, 1);
			}
			runs++;
			if (send) {
				uint32_t n = (q - p) & SWV_PSN_MASK;
				if (r->rtt_at && swv_psn_diff(r->rtt_psn, p) >= 0 &&
				    swv_psn_diff(r->rtt_psn, q) < 0)
					r->rtt_at = 0; /* Karn: that PSN is asked for twice now */
				(void)swv_req_read_again(qp, w, p, n); /* refused = lost */
			}
			p = q;
		}
	}
	return runs;
}

/* The cursor goes back to PSN psn -- the start of a READ/atomic, or a packet of a
 * SEND/WRITE -- past the head (the responder executed everything before psn): what
 * follows is sent again, what precedes is not. Nothing when the cursor is not past it. */
static void rewind_cursor_to(struct swv_qp *qp, uint32_t psn)
{
	struct swv_req_state *r = qp->req;
	uint32_t rd = 0;

	for (uint32_t i = qp->sq.head; i != r->started && (int32_t)(i - r->cur) < 0; i++) {
		struct swv_send_wqe *w = swv_wq_slot(&qp->sq, i);
		if (w->npkts && swv_psn_cmp(psn, w->first_psn) >= 0 &&
		    swv_psn_cmp(psn, w->last_psn) <= 0) {
			r->cur = i;
			r->cur_pkt = swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC)
					 ? 0
					 : (psn - w->first_psn) & SWV_PSN_MASK;
			r->rd_atomic_outstanding = rd;
			r->pkts_since_ackreq = 0;
			return;
		}
		if (w->npkts && swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC))
			rd++;
	}
}

/* A probe with an executed READ at the head: the cursor goes back to the first WQE
 * the responder may not have seen -- not an executed READ, nor a SEND/WRITE before
 * rd_hi (whose ACK the answers to the READ re-requests bring) -- if the cursor is past
 * it. */
static void probe_unexecuted(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;

	for (uint32_t i = qp->sq.head; i != r->started && (int32_t)(i - r->cur) < 0; i++) {
		struct swv_send_wqe *w = swv_wq_slot(&qp->sq, i);
		if (!w->npkts)
			continue;
		if (w->opcode == IBV_WR_RDMA_READ ? swv_req_read_executed(qp, w)
						  : !swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC) &&
							swv_psn_cmp(w->last_psn, r->rd_hi) < 0)
			continue;
		rewind_cursor_to(qp, w->first_psn);
		return;
	}
}

/* A sequence NAK for the first PSN of a READ the cursor has passed: that request was
 * lost, and the responder keeps the requests that followed it (a reorder buffer,
 * docs/responder.md), so that READ alone is sent again, in full. A peer that kept
 * nothing (Linux rxe drops past a gap) answers it and then nothing more: the tail-loss
 * probe resends from the first request it did not execute. False when psn does not
 * start such a READ. */
static bool read_request_again(struct swv_qp *qp, uint32_t psn)
{
	struct swv_req_state *r = qp->req;

	for (uint32_t i = qp->sq.head; i != r->started && (int32_t)(i - r->cur) < 0; i++) {
		struct swv_send_wqe *w = swv_wq_slot(&qp->sq, i);
		if (!w->npkts || swv_psn_cmp(psn, w->first_psn) > 0)
			continue;
		if (psn != w->first_psn || w->opcode != IBV_WR_RDMA_READ ||
		    w->state != SWV_WQE_STARTED)
			return false;
		if (r->rtt_at && swv_psn_diff(r->rtt_psn, w->first_psn) >= 0 &&
		    swv_psn_diff(r->rtt_psn, w->last_psn) <= 0)
			r->rtt_at = 0;
		(void)swv_req_read_again(qp, w, psn, w->npkts); /* refused = lost */
		return true;
	}
	return false;
}

/* Evidence that responses before psn were lost while the head is a READ: a response,
 * ACK or sequence NAK ('nak': the request at psn was lost too) for a later PSN, all
 * of which say the responder executed everything before psn. Only the missing response
 * PSNs of the READs before it are asked for again, and for a NAK the requests from psn
 * on are resent; the retry this spends follows the implied-NAK rule (one per loss
 * event, echoes free), the window stays. Anything else -- an atomic at the head --
 * goes back N as before. */
static void lost_response(struct swv_qp *qp, uint32_t psn, bool nak, const char *why)
{
	struct swv_req_state *r = qp->req;
	struct swv_send_wqe *h = head_wqe(qp);
	uint32_t at = nak ? psn : (psn - 1) & SWV_PSN_MASK; /* the PSN answered */

	if (!h || h->opcode != IBV_WR_RDMA_READ) {
		implied_nak(qp, psn, at, why);
		return;
	}
	if (r->rnr_until)
		return;
	rd_hi_raise(r, psn);
	uint32_t from = swv_psn_cmp(r->rd_rereq_psn, r->una_psn) > 0 ? r->rd_rereq_psn : r->una_psn;
	unsigned runs = read_rerequest(qp, from, psn, false);
	if (swv_psn_cmp(psn, r->rd_rereq_psn) > 0)
		r->rd_rereq_psn = psn;
	if (!runs && !nak)
		return; /* asked for already */
	if (implied_charge(qp, psn, at, why) < 0)
		return;
	if (runs)
		read_rerequest(qp, from, psn, true);
	if (nak && !read_request_again(qp, psn))
		rewind_cursor_to(qp, psn);
}

static void progress_made(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	uint32_t acked = (r->una_psn - r->cwnd_una) & SWV_PSN_MASK;
	uint32_t grow = acked / 2 ? acked / 2 : 1;
	r->cwnd = r->cwnd < r->window && r->window - r->cwnd > grow ? r->cwnd + grow : r->window;
	r->cwnd_una = r->una_psn;
	r->retry_left = qp->attr.retry_cnt;
	r->rnr_left = qp->attr.rnr_retry;
	r->backlog_mark = 0;
	r->backlog_waits = 0;
	r->implied_retry_at = 0;
	r->round_open = false; /* the next loss is a new one */
	if (r->rd_hi_valid && swv_psn_cmp(r->una_psn, r->rd_hi) >= 0)
		r->rd_hi_valid = false; /* every READ before it completed */
	uint64_t now = swv_now_ns(), tmo = swv_ack_timeout_ns(qp);
	if (r->rtt_at && swv_psn_cmp(r->una_psn, r->rtt_psn) > 0) {
		uint64_t sample = now - r->rtt_at;
		r->srtt_ns = r->srtt_ns ? (7 * r->srtt_ns + sample) / 8 : sample;
		r->rtt_at = 0;
	}
	bool busy = head_wqe(qp) != NULL;
	if (r->rec_since) {
		uint64_t dt = now - r->rec_since;
		r->n_rec[r->rec_kind]++;
		r->rec_ns[r->rec_kind] += dt;
		if (dt > r->rec_max_ns[r->rec_kind])
			r->rec_max_ns[r->rec_kind] = dt;
	}
	r->rec_since = busy ? now : 0;
	r->rec_kind = SWV_REC_NONE;
	uint64_t probe = swv_req_probe_ns(qp);
	r->probe_backoff = 0;
	r->ack_deadline = busy && tmo ? now + tmo : 0;
	r->probe_at = busy && probe ? now + probe : 0;
}

/* Refresh una_psn from the head WQE (after WQEs retired). */
static void set_una_from_head(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	struct swv_send_wqe *w = head_wqe(qp);
	uint32_t una;
	if (!w)
		una = r->next_psn;
	else if (w->opcode == IBV_WR_RDMA_READ)
		una = swv_psn_add(w->first_psn, r->read_off / qp->mtu);
	else
		una = w->first_psn;
	if (swv_psn_cmp(una, r->una_psn) > 0)
		r->una_psn = una;
}

static void on_progress(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	set_una_from_head(qp);
	progress_made(qp);
	/* acknowledged past the NAKed PSN: a NAK for it 2^24 PSNs on is new */
	if (r->seq_nak_valid && swv_psn_cmp(r->una_psn, r->seq_nak_psn) > 0)
		r->seq_nak_valid = false;
}

enum retire_result { RETIRE_OK, RETIRE_LOST, RETIRE_ERR };

/* The responder executes in PSN order, so a response for psn proves every earlier
 * request executed: complete SEND/WRITE WQEs that end before psn (or at it when
 * 'inclusive'). A READ/atomic there still waiting means its response was lost. */
static enum retire_result retire(struct swv_qp *qp, uint32_t psn, bool inclusive, bool *progress)
{
	struct swv_send_wqe *w;
	while ((w = head_wqe(qp))) {
		if (w->state == SWV_WQE_ERROR) {
			comp_head(qp, (int)w->status);
			return RETIRE_ERR;
		}
		int32_t d = swv_psn_cmp(w->last_psn, psn);
		if (inclusive ? d > 0 : d >= 0)
			break;
		if (swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC))
			return RETIRE_LOST;
		*progress = true;
		if (!comp_head(qp, IBV_WC_SUCCESS))
			return RETIRE_ERR;
	}
	/* A locally failed WQE right behind the retired ones completes now. */
	if (qp->sq.head != qp->sq.tail) {
		w = swv_wq_slot(&qp->sq, qp->sq.head);
		if (w->state == SWV_WQE_ERROR) {
			comp_head(qp, (int)w->status);
			return RETIRE_ERR;
		}
	}
	return RETIRE_OK;
}

static int nak_status(uint8_t code)
{
	switch (code) {
	case 1:
		return IBV_WC_REM_INV_REQ_ERR;
	case 2:
		return IBV_WC_REM_ACCESS_ERR;
	default:
		return IBV_WC_REM_OP_ERR; /* 3, and rxe's default for 4 and reserved codes */
	}
}

static void handle_ack(struct swv_qp *qp, const struct swv_pkt *pkt, bool *progress)
{
	struct swv_req_state *r = qp->req;
	uint32_t psn = pkt->psn;
	uint8_t syn = pkt->aeth_syndrome;
	enum retire_result rr;

	switch (syn & 0x60) {
	case 0x00: /* ACK */
		rr = retire(qp, psn, true, progress);
		if (rr == RETIRE_ERR)
			return;
		if (rr == RETIRE_LOST) {
			if (*progress) {
				on_progress(qp);
				*progress = false;
			}
			lost_response(qp, swv_psn_add(psn, 1), false, "lost response");
			return;
		}
		{
			struct swv_send_wqe *w = head_wqe(qp);
			if (w && !swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC) &&
			    swv_psn_cmp(psn, w->first_psn) >= 0 &&
			    swv_psn_cmp(swv_psn_add(psn, 1), r->una_psn) > 0) {
				r->una_psn = swv_psn_add(psn, 1); /* part of a multi-packet message */
				*progress = true;
			}
		}
		if (pkt->sack_map)
			sack_ack(qp, pkt);
		return;

	case 0x20: { /* RNR NAK: the request at psn found no receive WQE */
		rr = retire(qp, psn, false, progress);
		if (rr == RETIRE_ERR)
			return;
		if (rr == RETIRE_LOST) {
			implied_nak(qp, psn, psn, "lost response");
			return;
		}
		struct swv_send_wqe *w = head_wqe(qp);
		if (!w || swv_psn_cmp(psn, w->first_psn) < 0 || swv_psn_cmp(psn, w->last_psn) > 0)
			return; /* stale */
		if (r->rnr_until && psn == r->rnr_psn) {
			/* a copy of the RNR NAK being waited out: nothing was resent
			 * since, so it must not count against rnr_retry again */
			r->n_dup_resp++;
			return;
		}
		if (*progress) {
			r->retry_left = qp->attr.retry_cnt;
			r->rnr_left = qp->attr.rnr_retry;
			*progress = false;
		}
		r->n_rnr_naks++;
		if (qp->attr.rnr_retry != 7) {
			if (r->rnr_left == 0) {
				comp_head(qp, IBV_WC_RNR_RETRY_EXC_ERR);
				return;
			}
			r->rnr_left--;
		}
		if (swv_psn_cmp(psn, r->una_psn) > 0)
			r->una_psn = psn;
		rewind_cursor(qp);
		/* the wait ends in a new transmission of everything from una: loss evidence
		 * after it is a new loss, or RNR and sequence NAKs taking turns at one PSN
		 * would never spend retry_cnt (the RNR NAK stops the ACK timeout) */
		r->round_open = false;
		r->rnr_psn = psn;
		r->rnr_until = swv_now_ns() + (uint64_t)rnr_us[syn & 0x1f] * 1000;
		r->ack_deadline = 0; /* no ACK timeout while waiting out the RNR delay */
		r->probe_at = 0;
		return;
	}

	case 0x60: { /* NAK */
		uint8_t code = syn & 0x1f;
		if (code == 0 && r->seq_nak_valid && psn == r->seq_nak_psn &&
		    swv_now_ns() - r->seq_nak_at < implied_holdoff_ns(qp)) {
			/* A copy of the NAK already acted on, arriving within the hold-off
			 * (the responder NAKs a gap again only after our resend reached it,
			 * docs/responder.md "Retry rules"): its go-back-N is under way.
			 * Retrying again would resend the window twice and spend a retry on
			 * nothing -- with a few duplicated NAKs, retry_cnt ran out while
			 * every packet was getting through. */
			r->n_dup_resp++;
			return;
		}
		rr = retire(qp, psn, false, progress);
		if (rr == RETIRE_ERR)
			return;
		if (code == 0 && r->rnr_until) {
			/* a late sequence NAK while an RNR NAK is waited out (the responder
			 * sends none in that state): what it retired stands, the retry it asks
			 * for is the RNR wait's */
			r->n_dup_resp++;
			return;
		}
		if (code == 0) {
			/* PSN sequence error: everything before psn arrived; go back to it. */
			r->n_seq_naks++;
			if (rr == RETIRE_OK && swv_psn_cmp(psn, r->una_psn) > 0) {
				struct swv_send_wqe *w = head_wqe(qp);
				if (w && !swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC)) {
					/* packets of the head message arrived: progress,
					 * like the ACK case, so the retry counters reload */
					r->una_psn = psn;
					*progress = true;
				}
			}
			if (*progress) {
				set_una_from_head(qp);
				progress_made(qp);
				*progress = false;
			}
			rec_mark(r, SWV_REC_NAK); /* the interval after what it retired */
			r->seq_nak_valid = true;
			r->seq_nak_psn = psn;
			r->seq_nak_at = swv_now_ns();
			if (rr == RETIRE_LOST) {
				/* the responder executed the head READ/atomic (it NAKs a later
				 * PSN): its response is what was lost, the same evidence the
				 * responses after it give; one retry serves both losses */
				lost_response(qp, psn, true, "lost response (sequence NAK)");
				return;
			}
			struct swv_send_wqe *w = head_wqe(qp);
			if (w && w->opcode == IBV_WR_RDMA_READ && psn == w->first_psn &&
			    !r->read_off && !swv_req_read_executed(qp, w)) {
				/* the head READ's request was lost: it alone again (the
				 * responder kept what followed, see read_request_again) */
				if (evidence_charge(qp, psn, "sequence NAK, READ request") >= 0)
					(void)read_request_again(qp, psn);
				return;
			}
			if (w && !swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC) &&
			    swv_psn_cmp(psn, w->first_psn) >= 0 &&
			    swv_psn_cmp(psn, w->last_psn) <= 0) {
				if (!r->sr_gbn_left && pkt->sack_map) {
					sack_resend(qp, pkt, psn, true);
					return;
				}
				if (!r->sr_gbn_left) {
					retry_selective(qp, psn);
					return;
				}
				r->sr_gbn_left--; /* the peer drops past a gap (selective_answer) */
			}
			retry_evidence(qp, psn, "sequence NAK");
			return;
		}
		/* Invalid request / remote access / remote operational error: the WQE
		 * completes with the error and the QP moves to ERR. */
		if (head_wqe(qp))
			comp_head(qp, nak_status(code));
		return;
	}
	default:
		return; /* reserved syndrome: ignore */
	}
}

/* The in-flight WQE whose PSNs hold psn (local operations have none), or NULL. */
static struct swv_send_wqe *wqe_of_psn(struct swv_qp *qp, uint32_t psn)
{
	struct swv_req_state *r = qp->req;
	for (uint32_t i = qp->sq.head; i != r->started; i++) {
		struct swv_send_wqe *w = swv_wq_slot(&qp->sq, i);
		if (!w->npkts)
			continue;
		if (swv_psn_cmp(psn, w->first_psn) < 0)
			return NULL;
		if (swv_psn_cmp(psn, w->last_psn) <= 0)
			return w;
	}
	return NULL;
}

/* Move the head READ's placed prefix over the responses placed past it; complete it
 * when whole, and then the WQEs after it that are answered (READs whose responses all
 * arrived, SEND/WRITEs before psn or rd_hi). An atomic before rd_hi was answered while
 * the READ held the head, and that answer was not kept: it is asked for again at once
 * (the responder replays it, executing nothing twice) rather than at the next probe. */
static void read_advance(struct swv_qp *qp, uint32_t psn, bool *progress)
{
	struct swv_req_state *r = qp->req;
	struct swv_send_wqe *h;

	if (r->rd_hi_valid && swv_psn_cmp(r->rd_hi, psn) > 0)
		psn = r->rd_hi; /* the responder executed everything before rd_hi */
	while ((h = head_wqe(qp)) && h->opcode == IBV_WR_RDMA_READ) {
		uint32_t before = r->read_off;
		while (r->read_off < h->length &&
		       rd_seen(r, swv_psn_add(h->first_psn, r->read_off / qp->mtu)))
			r->read_off = (uint32_t)SWV_MIN((uint64_t)r->read_off + qp->mtu, h->length);
		bool done = h->length ? r->read_off == h->length : rd_seen(r, h->first_psn);
		if (r->read_off != before) {
			r->una_psn = swv_psn_add(h->first_psn, r->read_off / qp->mtu);
			*progress = true;
		}
		if (!done) {
			/* a retry chunk (send_packet) is in: ask for the next one */
			if (before < h->read_req_end && r->read_off >= h->read_req_end)
				rewind_cursor(qp);
			return;
		}
		*progress = true;
		if (!comp_head(qp, IBV_WC_SUCCESS))
			return;
		enum retire_result rr = retire(qp, psn, false, progress);
		if (rr == RETIRE_ERR)
			return;
		if (rr == RETIRE_LOST && (h = head_wqe(qp)) &&
		    swv_wr_is(h->opcode, SWV_WRF_ATOMIC)) {
			if (r->rtt_at && swv_psn_cmp(r->rtt_psn, h->first_psn) >= 0)
				r->rtt_at = 0; /* Karn: sent twice from here on */
			rewind_cursor_to(qp, h->first_psn);
		}
	}
}

/* Responses were dropped for being past the window (rd_far): once the window reaches
 * the first of them, ask for them all again at once, one request per run (the
 * responder had sent them: no loss, no retry). Waiting for the tail-loss probe cost a
 * READ longer than the window two or more probe intervals per loss in it. */
static void read_far(struct swv_qp *qp)
{
	struct swv_req_state *r = qp->req;
	struct swv_send_wqe *h = head_wqe(qp);
	if (!r->rd_hi_valid || !h || h->opcode != IBV_WR_RDMA_READ) {
		r->rd_far = false; /* answered since, or gone back N */
		return;
	}
	uint32_t from = swv_psn_cmp(r->rd_rereq_psn, r->una_psn) > 0 ? r->rd_rereq_psn : r->una_psn;
	if (swv_psn_diff(from, r->una_psn) >= (int32_t)SWV_MAX_UNACKED_PSNS)
		return; /* the window has not moved to them yet */
	r->rd_far = false;
	if (swv_psn_cmp(from, r->rd_hi) < 0) {
		read_rerequest(qp, from, r->rd_hi, true);
		r->rd_rereq_psn = r->rd_hi;
	}
}

/* A READ response is placed where it belongs, in the head READ or a later one
 * (selective repeat: a lost response costs only itself, docs/responder.md "Retry
 * rules"); a gap before it asks again for the missing PSNs alone (lost_response). */
static void handle_read_resp(struct swv_qp *qp, const struct swv_pkt *pkt, bool *progress)
{
	struct swv_req_state *r = qp->req;
	uint32_t psn = pkt->psn;
	enum retire_result rr = retire(qp, psn, false, progress);
	if (rr == RETIRE_ERR)
		return;
	struct swv_send_wqe *h = head_wqe(qp);
	if (rr == RETIRE_LOST && h->opcode != IBV_WR_RDMA_READ) {
		implied_nak(qp, psn, psn, "lost response"); /* an atomic's: go back N */
		return;
	}
	struct swv_send_wqe *w = h ? wqe_of_psn(qp, psn) : NULL;
	if (!w) {
		r->n_dup_resp++;
		return;
	}
	if (w->opcode != IBV_WR_RDMA_READ) {
		/* A READ response inside the PSNs of a non-READ WQE. */
		if (w == h)
			comp_head(qp, IBV_WC_FATAL_ERR);
		else if (rr == RETIRE_LOST)
			implied_nak(qp, psn, psn, "lost response");
		else
			r->n_dup_resp++;
		return;
	}
	uint32_t k = (psn - w->first_psn) & SWV_PSN_MASK;
	uint64_t off = (uint64_t)k * qp->mtu;
	bool last = pkt->opcode == SWV_OP_READ_RESP_LAST || pkt->opcode == SWV_OP_READ_RESP_ONLY;
	bool final = psn == w->last_psn;
	/* LAST/ONLY may end a retry before the end of the message; every packet but the
	 * message's last is a full PMTU */
	if (off > w->length || pkt->paylen != (final ? w->length - off : qp->mtu) ||
	    (final && !last)) {
		swv_log(SWV_LOG_DEBUG,
			"qp %#x: read response op %#x psn %#x len %u at %llu of %u refused",
			qp->qpn, pkt->opcode, psn, pkt->paylen, (unsigned long long)off, w->length);
		r->n_dup_resp++; /* malformed for this READ: ignore, a retry recovers */
		return;
	}
	if ((w == h && off < r->read_off) || rd_seen(r, psn)) {
		r->n_dup_resp++; /* placed already */
		return;
	}
	if (swv_psn_diff(psn, r->una_psn) >= (int32_t)SWV_MAX_UNACKED_PSNS) {
		/* too far ahead to record (a READ longer than the window, behind a loss):
		 * asked for again once the window reaches it (read_far) */
		rd_hi_raise(r, swv_psn_add(psn, 1));
		r->rd_far = true;
		r->n_dup_resp++;
		return;
	}
	if (pkt->paylen) {
		int rc = swv_mr_scatter(qp->ctx, swv_req_wqe_pd(qp, w), w->sge, w->num_sge, off,
					pkt->payload, pkt->paylen);
		if (rc) {
			if (w == h) {
				comp_head(qp, IBV_WC_LOC_PROT_ERR);
			} else {
				/* completes with it once every WQE before it did */
				w->state = SWV_WQE_ERROR;
				w->status = IBV_WC_LOC_PROT_ERR;
			}
			return;
		}
	}
	r->rd_seen[psn & (SWV_MAX_UNACKED_PSNS - 1)] = psn | SWV_RD_SEEN;
	rd_hi_raise(r, swv_psn_add(psn, 1));
	read_advance(qp, psn, progress);
	if (qp->state == IBV_QPS_ERR || !head_wqe(qp))
		return;
	if (*progress) {
		/* the progress (reloading the retry counters) comes before the gap's retry */
		on_progress(qp);
		*progress = false;
	}
	h = head_wqe(qp);
	if (r->rd_far)
		read_far(qp);
	if (h->opcode == IBV_WR_RDMA_READ || swv_psn_cmp(h->last_psn, psn) < 0)
		lost_response(qp, swv_psn_add(psn, 1), false, "read response gap");
}

static void handle_atomic_ack(struct swv_qp *qp, const struct swv_pkt *pkt, bool *progress)
{
	struct swv_req_state *r = qp->req;
	uint32_t psn = pkt->psn;
	if ((pkt->aeth_syndrome & 0x60) != 0) {
		handle_ack(qp, pkt, progress); /* a NAK carried in an atomic ACK */
		return;
	}
	enum retire_result rr = retire(qp, psn, false, progress);
	if (rr == RETIRE_ERR)
		return;
	if (rr == RETIRE_LOST) {
		if (*progress) {
			on_progress(qp);
			*progress = false;
		}
		lost_response(qp, swv_psn_add(psn, 1), false, "lost response");
		return;
	}
	struct swv_send_wqe *w = head_wqe(qp);
	if (!w || w->first_psn != psn) {
		r->n_dup_resp++;
		return;
	}
	if (!swv_wr_is(w->opcode, SWV_WRF_ATOMIC)) {
		comp_head(qp, IBV_WC_FATAL_ERR);
		return;
	}
	/* The original remote value lands in the SGE in host order (as rxe). */
	uint64_t orig = pkt->atmack_orig;
	w->atomic_orig = orig;
	if (swv_mr_scatter(qp->ctx, qp->pd, w->sge, w->num_sge, 0, &orig, sizeof(orig))) {
		comp_head(qp, IBV_WC_LOC_PROT_ERR);
		return;
	}
	r->una_psn = swv_psn_add(psn, 1);
	*progress = true;
	comp_head(qp, IBV_WC_SUCCESS);
}

void swv_comp_rx(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	struct swv_req_state *r = qp->req;
	bool progress = false;

	/* Only responses for PSNs in flight: [una, sent). Anything else is a duplicate
	 * or stale packet. */
	if (pkt->opcode == SWV_OP_ACK && (pkt->aeth_syndrome & 0x60) == 0 && pkt->sack_map &&
	    swv_psn_add(pkt->psn, 1) == r->una_psn) {
		/* the responder's map update, an ACK for ePSN - 1: the NAK before it moved
		 * una to ePSN already, so it acknowledges nothing; only its map is news */
		sack_ack(qp, pkt);
		swv_req_run(qp);
		swv_req_update_timer(qp);
		return;
	}
	if (swv_psn_cmp(pkt->psn, r->una_psn) < 0 || swv_psn_cmp(pkt->psn, r->sent_psn) >= 0) {
		/* Not even a READ response the peer keeps replaying restarts the ACK
		 * timeout: only progress does, so answers that never help (a replay of
		 * what was placed, a response of the wrong size) cannot keep a QP alive
		 * past (retry_cnt + 1) timeouts. */
		swv_log(SWV_LOG_DEBUG, "qp %#x: response op %#x psn %#x outside [%#x, %#x)", qp->qpn,
			pkt->opcode, pkt->psn, r->una_psn, r->sent_psn);
		r->n_dup_resp++;
		return;
	}
	/* A READ that became the head while its responses were all placed already (the
	 * WQEs before it were retired by an ACK) completes now; any answer for psn says
	 * the responder executed what precedes psn. */
	struct swv_send_wqe *h = head_wqe(qp);
	if (h && h->opcode == IBV_WR_RDMA_READ && pkt->opcode != SWV_OP_READ_RESP_FIRST &&
	    pkt->opcode != SWV_OP_READ_RESP_MIDDLE && pkt->opcode != SWV_OP_READ_RESP_LAST &&
	    pkt->opcode != SWV_OP_READ_RESP_ONLY) {
		read_advance(qp, pkt->psn, &progress);
		if (qp->state == IBV_QPS_ERR)
			return;
	}
	switch (pkt->opcode) {
	case SWV_OP_ACK:
		handle_ack(qp, pkt, &progress);
		break;
	case SWV_OP_ATOMIC_ACK:
		handle_atomic_ack(qp, pkt, &progress);
		break;
	case SWV_OP_READ_RESP_FIRST:
	case SWV_OP_READ_RESP_MIDDLE:
	case SWV_OP_READ_RESP_LAST:
	case SWV_OP_READ_RESP_ONLY:
		handle_read_resp(qp, pkt, &progress);
		break;
	default:
		r->n_dup_resp++;
		return;
	}
	if (qp->state == IBV_QPS_ERR)
		return;
	h = head_wqe(qp);
	if (h && h->opcode == IBV_WR_RDMA_READ) {
		read_advance(qp, pkt->psn, &progress);
		if (qp->state == IBV_QPS_ERR)
			return;
	}
	if (progress)
		on_progress(qp);
	if (r->sr_active && pkt->opcode == SWV_OP_ACK && (pkt->aeth_syndrome & 0x60) == 0)
		selective_answer(qp, pkt->psn);
	swv_req_run(qp);
	swv_req_update_timer(qp);
}

void swv_req_timer(struct swv_qp *qp, uint64_t now)
{
	struct swv_req_state *r = qp->req;

	if (r->rnr_until && now >= r->rnr_until)
		r->rnr_until = 0; /* the cursor was rewound when the RNR NAK came */
	/* Held back by our own link (a full socket buffer or ring: EAGAIN): */
	bool tx_blocked = r->xmit_retry_at != 0;
	if (r->xmit_retry_at && now >= r->xmit_retry_at)
		r->xmit_retry_at = 0;
	swv_fc_tx_timer(qp, now);
	if (r->probe_at && now >= r->probe_at) {
		r->probe_at = 0;
		if (head_wqe(qp) && !r->rnr_until) {
			/* tail-loss probe: resend from the oldest unacknowledged PSN without
			 * spending a retry; the ACK timeout, still running, bounds a dead peer */
			struct swv_send_wqe *w = head_wqe(qp);
			r->n_probes++;
			rec_mark(r, SWV_REC_PROBE);
			r->rtt_at = 0;
			if (r->round_open && r->una_psn == r->round_una)
				r->round_hi = r->sent_psn; /* what it resends joins the round */
			if (!swv_wr_is(w->opcode, SWV_WRF_RD_ATOMIC) &&
			    swv_psn_cmp(r->sent_psn, r->una_psn) > 0 && !r->sr_gbn_left) {
				/* the head is a SEND/WRITE: resend its oldest unacknowledged
				 * packet alone (AckReq); the answer tells what else is missing
				 * -- an ACK for just that PSN sends the rest (selective_answer) */
				r->sr_pending = r->sr_active = r->sr_probe = true;
				r->sr_psn = r->una_psn;
				r->sr_hi = r->sent_psn;
			} else if (w->opcode == IBV_WR_RDMA_READ && swv_req_read_executed(qp, w)) {
				/* a READ the responder executed: ask again only for the
				 * responses still missing, and resend from the first request
				 * it may not have seen */
				read_rerequest(qp, r->una_psn, r->sent_psn, true);
				r->rd_rereq_psn = r->sent_psn;
				r->rd_far = false;
				probe_unexecuted(qp);
			} else {
				rewind_cursor(qp);
			}
			arm_probe(qp);
		}
	}
	if (r->ack_deadline && now >= r->ack_deadline) {
		r->ack_deadline = 0;
		bool unread = head_wqe(qp) && !tx_blocked && qp->ep &&
			      r->backlog_waits < SWV_BACKLOG_MAX_WAITS &&
			      swv_ep_backlog(qp->ep, &qp->peer, &r->backlog_mark);
		r->backlog_waits += unread;
		if (head_wqe(qp) && (tx_blocked || unread)) {
			/* Not the peer's silence: what it has not answered could not leave
			 * (the intra-host ring of a busy or stopped receiver), or has not been
			 * taken off its ring yet (a receiver not scheduled: nothing is lost on a
			 * ring), docs/responder.md "Retry rules". A retry for packets that have
			 * not arrived must not spend retry_cnt; wait another timeout. A dead
			 * receiver's ring is neither refused nor counted as unread (link/shm.h),
			 * and unread packets excuse a bounded number of timeouts, so its peer
			 * still ends in RETRY_EXC_ERR. */
			uint64_t tmo = swv_ack_timeout_ns(qp);
			r->ack_deadline = tmo ? now + tmo : 0;
		} else if (head_wqe(qp)) {
			r->n_timeouts++;
			rec_mark(r, SWV_REC_TIMEOUT);
			if (!retry(qp, "ack timeout"))
				return;
		}
	}
	swv_req_run(qp);
	if (qp->state != IBV_QPS_ERR)
		swv_req_update_timer(qp);
}
