/*
 * UC flow control: credits granted by the receiving QP, spent by the sending QP.
 * The protocol and its reasons are in flowctl.h.
 */
#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>

#include "core/qp.h"
#include "net/endpoint.h"
#include "transport/flowctl.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "util/clock.h"
#include "util/log.h"

#define FC_MIN_WINDOW 8u
#define FC_MAX_WINDOW 4096u

static int32_t fc_diff(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b);
}

static void fc_send(struct swv_qp *qp, enum swv_fc_type type, uint32_t value)
{
	uint8_t hdr[SWV_MAX_HDR_LEN];
	uint8_t payload[SWV_FC_PAYLOAD_LEN] = {(uint8_t)type};
	uint32_t be = htonl(value);
	struct swv_pkt p;

	memcpy(payload + 4, &be, sizeof(be));
	memset(&p, 0, sizeof(p));
	p.opcode = SWV_OP_FLOW_CONTROL;
	p.pkey = SWV_PKEY_DEFAULT;
	p.dqpn = qp->attr.dest_qp_num;
	p.paylen = SWV_FC_PAYLOAD_LEN;
	size_t hlen = swv_pkt_build_hdr(hdr, &p);
	/* A lost control packet is covered by the next one (values are cumulative) or by
	 * the sender's probe timer. */
	int rc = swv_qp_xmit(qp, NULL, hdr, hlen, payload, SWV_FC_PAYLOAD_LEN);
	if (rc)
		swv_log(SWV_LOG_DEBUG, "qp %#x: flow control packet not sent: %s", qp->qpn,
			strerror(rc));
}

/* ---- sending side ---- */

void swv_fc_tx_reset(struct swv_qp *qp)
{
	struct swv_fc_tx *t = &qp->req.fc;
	memset(t, 0, sizeof(*t));
	t->limit = SWV_FC_INITIAL;
}

uint32_t swv_fc_tx_room(const struct swv_qp *qp)
{
	const struct swv_fc_tx *t = &qp->req.fc;
	if (qp->type != IBV_QPT_UC)
		return UINT32_MAX;
	int32_t room = fc_diff(t->limit, t->sent);
	return room > 0 ? (uint32_t)room : 0;
}

void swv_fc_tx_sent(struct swv_qp *qp, uint32_t n)
{
	if (qp->type == IBV_QPT_UC)
		qp->req.fc.sent += n;
}

void swv_fc_tx_blocked(struct swv_qp *qp)
{
	struct swv_fc_tx *t = &qp->req.fc;
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
	struct swv_fc_tx *t = &qp->req.fc;
	if (!t->probe_at || now_ns < t->probe_at)
		return;
	t->probe_at = 0;
	if (swv_fc_tx_room(qp))
		return;
	if (!t->blocked_since)
		t->blocked_since = now_ns; /* a CREDIT came but brought no room */
	else if (now_ns - t->blocked_since >= SWV_FC_DEAD_NS)
		t->limit = t->sent + SWV_FC_INITIAL; /* silent peer: do not wait for it */
	t->n_probes++;
	fc_send(qp, SWV_FC_PROBE, t->sent);
}

/* ---- receiving side ---- */

void swv_fc_rx_reset(struct swv_qp *qp)
{
	struct swv_fc_rx *f = &qp->resp.fc;
	int rcvbuf = 0;
	socklen_t sl = sizeof(rcvbuf);
	uint32_t w = FC_MAX_WINDOW;

	memset(f, 0, sizeof(*f));
	f->granted = SWV_FC_INITIAL;
	/* Half the receive buffer, shared by the QPs on this socket; a datagram costs
	 * about twice its size in kernel accounting (as compute_window assumes for RC). */
	if (qp->ep && getsockopt(qp->ep->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &sl) == 0 &&
	    rcvbuf > 0) {
		uint64_t per_pkt = 2ull * (qp->mtu + SWV_MAX_HDR_LEN + 64);
		unsigned nqps = atomic_load_explicit(&qp->ep->nqps, memory_order_relaxed);
		uint64_t fit = (uint64_t)rcvbuf / per_pkt / 2 / (nqps ? nqps : 1);
		if (fit < w)
			w = (uint32_t)fit;
	}
	f->window = w < FC_MIN_WINDOW ? FC_MIN_WINDOW : w;
}

static void grant(struct swv_qp *qp)
{
	struct swv_fc_rx *f = &qp->resp.fc;
	f->granted = f->rcvd + f->window;
	f->n_credits++;
	fc_send(qp, SWV_FC_CREDIT, f->granted);
}

void swv_fc_rx_data(struct swv_qp *qp)
{
	struct swv_fc_rx *f = &qp->resp.fc;
	if (qp->type != IBV_QPT_UC)
		return;
	f->rcvd++;
	/* A CREDIT per quarter window consumed: few control packets, and the sender
	 * never runs dry while the receiver keeps up. */
	if (fc_diff(f->rcvd + f->window, f->granted) >= (int32_t)(f->window / 4))
		grant(qp);
}

bool swv_fc_rx_control(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	uint32_t be;

	if (qp->type != IBV_QPT_UC || pkt->paylen != SWV_FC_PAYLOAD_LEN)
		return false;
	memcpy(&be, pkt->payload + 4, sizeof(be));
	uint32_t value = ntohl(be);
	switch (pkt->payload[0]) {
	case SWV_FC_CREDIT: {
		struct swv_fc_tx *t = &qp->req.fc;
		if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)
			return false;
		t->blocked_since = 0; /* the peer is there */
		if (fc_diff(value, t->limit) <= 0)
			return false; /* old or repeated */
		t->limit = value;
		if (!t->probe_at)
			return false;
		t->probe_at = 0;
		return true; /* it was waiting for exactly this */
	}
	case SWV_FC_PROBE:
		qp->resp.fc.rcvd = value;
		grant(qp);
		return false;
	default:
		return false;
	}
}
