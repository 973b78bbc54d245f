/*
 * UC flow control: credit granted by the receiving QP, spent by the sending QP.
 * The protocol and its reasons are in flowctl.h.
 */
#include <arpa/inet.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

#include "core/qp.h"
#include "transport/qp_transport.h"
#include "link/endpoint.h"
#include "transport/flowctl.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/txrun.h"
#include "util/clock.h"
#include "util/log.h"

static void fc_send(struct swv_qp *qp, enum swv_fc_type type, uint32_t psn)
{
	uint8_t payload[SWV_FC_PAYLOAD_LEN] = {(uint8_t)type};
	uint32_t be = htonl(psn & SWV_PSN_MASK);
	struct swv_pkt p;

	memcpy(payload + 4, &be, sizeof(be));
	memset(&p, 0, sizeof(p));
	p.opcode = SWV_OP_FLOW_CONTROL;
	p.pkey = qp->pkey;
	p.dqpn = qp->attr.dest_qp_num;
	p.payload = payload;
	p.paylen = SWV_FC_PAYLOAD_LEN;
	/* A lost control packet is covered by the next one (values are absolute PSNs) or
	 * by the sender's probe timer. */
	(void)swv_tx_pkt(qp, NULL, &p);
}

/* ---- sending side ---- */

static void probe(struct swv_qp *qp, uint64_t now_ns)
{
	struct swv_fc_tx *t = &qp->req->fc;
	t->last_probe = now_ns;
	t->n_probes++;
	fc_send(qp, SWV_FC_PROBE, t->next);
}

void swv_fc_tx_reset(struct swv_qp *qp)
{
	struct swv_fc_tx *t = &qp->req->fc;
	memset(t, 0, sizeof(*t));
	t->next = qp->attr.sq_psn & SWV_PSN_MASK;
	t->limit = swv_psn_add(t->next, SWV_FC_INITIAL);
}

void swv_fc_tx_start(struct swv_qp *qp)
{
	/* Tell the receiver where this sender starts: it may be left from an earlier
	 * connection, and its answer opens the full window at once. */
	if (qp->type == IBV_QPT_UC)
		probe(qp, swv_now_ns());
}

uint32_t swv_fc_tx_room(const struct swv_qp *qp, uint32_t psn)
{
	if (qp->type != IBV_QPT_UC)
		return UINT32_MAX;
	int32_t room = swv_psn_diff(qp->req->fc.limit, psn);
	return room > 0 ? (uint32_t)room : 0;
}

void swv_fc_tx_sent(struct swv_qp *qp, uint32_t end)
{
	if (qp->type == IBV_QPT_UC)
		qp->req->fc.next = end & SWV_PSN_MASK;
}

void swv_fc_tx_blocked(struct swv_qp *qp)
{
	struct swv_fc_tx *t = &qp->req->fc;
	if (t->probe_at)
		return;
	uint64_t now = swv_now_ns();
	if (!t->blocked_since) {
		t->blocked_since = now;
		t->n_blocked++;
	}
	t->probe_at = now + SWV_FC_PROBE_NS;
}

void swv_fc_tx_timer(struct swv_qp *qp, uint64_t now_ns)
{
	struct swv_fc_tx *t = &qp->req->fc;
	if (!t->probe_at || now_ns < t->probe_at)
		return;
	t->probe_at = 0;
	if (!t->blocked_since || swv_fc_tx_room(qp, t->next))
		return;
	if (now_ns - t->blocked_since >= SWV_FC_DEAD_NS)
		t->limit = swv_psn_add(t->next, SWV_FC_INITIAL); /* silent peer: go on */
	probe(qp, now_ns);
}

static bool rx_credit(struct swv_qp *qp, uint32_t limit)
{
	struct swv_fc_tx *t = &qp->req->fc;
	if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)
		return false;
	int32_t ahead = swv_psn_diff(limit, t->next);
	if (ahead > (int32_t)(SWV_FC_MAX_WINDOW + SWV_FC_INITIAL)) {
		/* More than any receiver grants: it counts other PSNs than ours. Ignore it
		 * and tell it where we are (at most once per probe interval). */
		uint64_t now = swv_now_ns();
		if (now - t->last_probe >= SWV_FC_PROBE_NS)
			probe(qp, now);
		return false;
	}
	if (swv_psn_diff(limit, t->limit) <= 0)
		return false; /* old or repeated */
	t->limit = limit;
	if (ahead <= 0)
		return false;
	t->blocked_since = 0;
	if (!t->probe_at)
		return false;
	t->probe_at = 0;
	return true; /* it was waiting for exactly this */
}

/* ---- receiving side ---- */

void swv_fc_rx_reset(struct swv_qp *qp)
{
	struct swv_fc_rx *f = &qp->resp->fc;
	int rcvbuf = 0;
	socklen_t sl = sizeof(rcvbuf);

	memset(f, 0, sizeof(*f));
	f->next = qp->attr.rq_psn & SWV_PSN_MASK;
	f->granted = swv_psn_add(f->next, SWV_FC_INITIAL);
	f->buf_pkts = SWV_FC_MAX_WINDOW;
	/* Half the receive buffer, in full packets; a datagram costs about twice its size
	 * in kernel accounting (as compute_window assumes for RC). */
	if (qp->ep && getsockopt(qp->ep->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &sl) == 0 &&
	    rcvbuf > 0) {
		uint64_t per_pkt = 2ull * (qp->mtu + SWV_MAX_HDR_LEN + 64);
		uint64_t fit = (uint64_t)rcvbuf / per_pkt / 2;
		if (fit < f->buf_pkts)
			f->buf_pkts = (uint32_t)fit;
	}
}

/* The credit kept open: the buffer's share of the QPs on the socket now. */
static uint32_t window(const struct swv_qp *qp)
{
	uint32_t w = qp->resp->fc.buf_pkts;
	unsigned nqps = qp->ep ? atomic_load_explicit(&qp->ep->nqps, memory_order_relaxed) : 1;
	if (nqps > 1)
		w /= nqps;
	return w < SWV_FC_MIN_WINDOW   ? SWV_FC_MIN_WINDOW
	       : w > SWV_FC_MAX_WINDOW ? SWV_FC_MAX_WINDOW
				       : w;
}

static void grant(struct swv_qp *qp, uint32_t w)
{
	struct swv_fc_rx *f = &qp->resp->fc;
	f->granted = swv_psn_add(f->next, w);
	f->n_credits++;
	fc_send(qp, SWV_FC_CREDIT, f->granted);
}

void swv_fc_rx_data(struct swv_qp *qp, uint32_t psn)
{
	struct swv_fc_rx *f = &qp->resp->fc;
	if (qp->type != IBV_QPT_UC)
		return;
	if (swv_psn_diff(psn, f->next) >= 0)
		f->next = swv_psn_add(psn, 1);
	/* A CREDIT per quarter window consumed: few control packets, and the sender
	 * never runs dry while the receiver keeps up. */
	uint32_t w = window(qp);
	if (swv_psn_diff(swv_psn_add(f->next, w), f->granted) >= (int32_t)(w > 4 ? w / 4 : 1))
		grant(qp, w);
}

bool swv_fc_rx_control(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	uint32_t be;

	if (qp->type != IBV_QPT_UC || pkt->paylen != SWV_FC_PAYLOAD_LEN)
		return false;
	memcpy(&be, pkt->payload + 4, sizeof(be));
	uint32_t psn = ntohl(be) & SWV_PSN_MASK;
	switch (pkt->payload[0]) {
	case SWV_FC_CREDIT:
		return rx_credit(qp, psn);
	case SWV_FC_PROBE:
		qp->resp->fc.next = psn;
		grant(qp, window(qp));
		return false;
	default:
		return false;
	}
}
