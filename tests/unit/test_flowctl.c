/*
 * UC flow control (transport/flowctl.c) on its own: the sender's credit, blocking,
 * probing, refusing a credit beyond any window and giving up on a silent peer; the
 * receiver's CREDITs every quarter window, duplicates and losses, and its answer to a
 * PROBE; old and malformed control packets; PSN wrap; QP types that are not
 * flow-controlled. swv_qp_xmit (the link boundary) is modelled here (the linker takes it before
 * the library's): every control packet sent is parsed back with the real parser.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "transport/flowctl.h"
#include "transport/opcode.h"
#include "transport/packet.h"

static struct {
	int n;
	uint8_t type;
	uint32_t value, dqpn;
} sent;

int swv_qp_xmit(struct swv_qp *qp, const struct sockaddr_in *to, const struct iovec *iov,
		int iovcnt, size_t seg, unsigned npkts, enum swv_xmit_path path,
		unsigned *nsent)
{
	uint8_t dgram[128];
	size_t len = 0;
	struct swv_pkt p;
	uint32_t be;

	(void)seg;
	CHECK(path == SWV_XMIT_ANY); /* no inbox here: no ring-only attempt */
	CHECK(to == &qp->peer); /* to the connected peer */
	CHECK_EQ(npkts, 1u);
	for (int i = 0; i < iovcnt; i++) {
		CHECK(len + iov[i].iov_len <= sizeof(dgram));
		memcpy(dgram + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	*nsent = 1;
	CHECK_OK(swv_pkt_parse(dgram, len, &p));
	CHECK_EQ(p.opcode, SWV_OP_FLOW_CONTROL);
	CHECK(p.flags & SWV_OPF_FLOWCTL);
	CHECK_EQ(p.paylen, SWV_FC_PAYLOAD_LEN);
	CHECK(p.payload[1] == 0 && p.payload[2] == 0 && p.payload[3] == 0);
	memcpy(&be, p.payload + 4, 4);
	sent.n++;
	sent.type = p.payload[0];
	sent.value = ntohl(be);
	sent.dqpn = p.dqpn;
	return 0;
}

/* A control packet as the peer would send it. */
static struct swv_pkt ctl(uint8_t type, uint32_t value, uint8_t *buf)
{
	struct swv_pkt p;
	uint32_t be = htonl(value);
	memset(&p, 0, sizeof(p));
	memset(buf, 0, SWV_FC_PAYLOAD_LEN);
	buf[0] = type;
	memcpy(buf + 4, &be, 4);
	p.opcode = SWV_OP_FLOW_CONTROL;
	p.flags = swv_opcode(SWV_OP_FLOW_CONTROL)->flags;
	p.payload = buf;
	p.paylen = SWV_FC_PAYLOAD_LEN;
	return p;
}

/* One QP at a time: its transport state lives here. */
static struct swv_qp_transport qp_tp;

static void init_qp(struct swv_qp *qp, enum ibv_qp_type type, enum ibv_qp_state state, uint32_t psn)
{
	memset(qp, 0, sizeof(*qp));
	memset(&qp_tp, 0, sizeof(qp_tp));
	swv_qp_transport_attach(qp, &qp_tp);
	qp->type = type;
	qp->state = state;
	qp->mtu = 1024;
	qp->attr.dest_qp_num = 0x12345; /* no endpoint: the window is the maximum */
	qp->attr.sq_psn = qp->attr.rq_psn = psn;
	swv_fc_tx_reset(qp);
	swv_fc_rx_reset(qp);
}

#define PSN(x) ((x)&SWV_PSN_MASK)

static void test_sender(void)
{
	struct swv_qp qp;
	uint8_t buf[SWV_FC_PAYLOAD_LEN];
	const uint32_t p0 = 0xfffffe; /* the PSNs wrap during the test */
	init_qp(&qp, IBV_QPT_UC, IBV_QPS_RTS, p0);
	memset(&sent, 0, sizeof(sent));

	/* Entering RTS tells the receiver where the sender starts. */
	swv_fc_tx_start(&qp);
	CHECK_EQ(sent.n, 1);
	CHECK_EQ(sent.type, SWV_FC_PROBE);
	CHECK_EQ(sent.value, p0);
	CHECK_EQ(sent.dqpn, 0x12345);

	/* The implicit initial credit, then nothing. */
	CHECK_EQ(swv_fc_tx_room(&qp, p0), SWV_FC_INITIAL);
	CHECK_EQ(swv_fc_tx_room(&qp, PSN(p0 + 1)), SWV_FC_INITIAL - 1);
	swv_fc_tx_sent(&qp, PSN(p0 + SWV_FC_INITIAL));
	uint32_t next = PSN(p0 + SWV_FC_INITIAL);
	CHECK_EQ(qp.req->fc.next, next);
	CHECK_EQ(swv_fc_tx_room(&qp, next), 0);

	/* Blocked: a probe is due SWV_FC_PROBE_NS later, carrying the next PSN. */
	swv_fc_tx_blocked(&qp);
	uint64_t t0 = qp.req->fc.blocked_since, due = qp.req->fc.probe_at;
	CHECK(t0 != 0 && due == t0 + SWV_FC_PROBE_NS);
	CHECK_EQ(qp.req->fc.n_blocked, 1);
	swv_fc_tx_blocked(&qp); /* again while armed: nothing changes */
	CHECK_EQ(qp.req->fc.probe_at, due);
	swv_fc_tx_timer(&qp, due - 1);
	CHECK_EQ(sent.n, 1);
	swv_fc_tx_timer(&qp, due);
	CHECK_EQ(sent.n, 2);
	CHECK_EQ(sent.type, SWV_FC_PROBE);
	CHECK_EQ(sent.value, next);
	CHECK_EQ(qp.req->fc.n_probes, 2);
	CHECK_EQ(qp.req->fc.probe_at, 0);
	CHECK_EQ(swv_fc_tx_room(&qp, next), 0); /* a live peer is waited for */
	swv_fc_tx_blocked(&qp);			/* what the requester does next */
	CHECK_EQ(qp.req->fc.n_blocked, 1);	/* the same wait */

	/* A CREDIT that opens no room is kept but ends no wait. */
	struct swv_pkt p = ctl(SWV_FC_CREDIT, next, buf);
	CHECK(!swv_fc_rx_control(&qp, &p));
	CHECK_EQ(qp.req->fc.blocked_since, t0);
	/* One that does ends it: the caller is told to run the requester. */
	p = ctl(SWV_FC_CREDIT, PSN(next + 100), buf);
	CHECK(swv_fc_rx_control(&qp, &p));
	CHECK_EQ(swv_fc_tx_room(&qp, next), 100);
	CHECK_EQ(qp.req->fc.probe_at, 0);
	CHECK_EQ(qp.req->fc.blocked_since, 0);
	/* An older or repeated CREDIT changes nothing (and wakes nobody). */
	p = ctl(SWV_FC_CREDIT, PSN(next + 50), buf);
	CHECK(!swv_fc_rx_control(&qp, &p));
	p = ctl(SWV_FC_CREDIT, PSN(next + 100), buf);
	CHECK(!swv_fc_rx_control(&qp, &p));
	CHECK_EQ(swv_fc_tx_room(&qp, next), 100);
	/* A newer one while not waiting raises the limit without a wake-up. */
	p = ctl(SWV_FC_CREDIT, PSN(next + 200), buf);
	CHECK(!swv_fc_rx_control(&qp, &p));
	CHECK_EQ(swv_fc_tx_room(&qp, next), 200);
	/* Malformed: wrong length, unknown type. */
	p = ctl(SWV_FC_CREDIT, PSN(next + 900), buf);
	p.paylen = 4;
	CHECK(!swv_fc_rx_control(&qp, &p));
	p = ctl(7, PSN(next + 900), buf);
	CHECK(!swv_fc_rx_control(&qp, &p));
	CHECK_EQ(swv_fc_tx_room(&qp, next), 200);
	/* Beyond anything a receiver grants: the sides disagree on PSNs. Not taken; a
	 * probe tells the receiver where this sender is. */
	int n0 = sent.n;
	qp.req->fc.last_probe = 0;
	p = ctl(SWV_FC_CREDIT, PSN(next + SWV_FC_MAX_WINDOW + SWV_FC_INITIAL + 1), buf);
	CHECK(!swv_fc_rx_control(&qp, &p));
	CHECK_EQ(swv_fc_tx_room(&qp, next), 200);
	CHECK_EQ(sent.n, n0 + 1);
	CHECK_EQ(sent.type, SWV_FC_PROBE);
	CHECK_EQ(sent.value, next);
	/* The largest grant possible is taken. */
	p = ctl(SWV_FC_CREDIT, PSN(next + SWV_FC_MAX_WINDOW + SWV_FC_INITIAL), buf);
	CHECK(!swv_fc_rx_control(&qp, &p));
	CHECK_EQ(swv_fc_tx_room(&qp, next), SWV_FC_MAX_WINDOW + SWV_FC_INITIAL);

	/* A silent peer: blocked for SWV_FC_DEAD_NS, each probe lets SWV_FC_INITIAL go. */
	next = PSN(next + SWV_FC_MAX_WINDOW + SWV_FC_INITIAL);
	swv_fc_tx_sent(&qp, next);
	CHECK_EQ(swv_fc_tx_room(&qp, next), 0);
	swv_fc_tx_blocked(&qp);
	t0 = qp.req->fc.blocked_since;
	int probes = 0;
	for (uint64_t now = t0 + SWV_FC_PROBE_NS; now < t0 + SWV_FC_DEAD_NS;
	     now += 100 * SWV_FC_PROBE_NS) {
		qp.req->fc.probe_at = now;
		swv_fc_tx_timer(&qp, now);
		probes++;
		CHECK_EQ(swv_fc_tx_room(&qp, next), 0);
	}
	qp.req->fc.probe_at = t0 + SWV_FC_DEAD_NS;
	swv_fc_tx_timer(&qp, t0 + SWV_FC_DEAD_NS);
	CHECK_EQ(swv_fc_tx_room(&qp, next), SWV_FC_INITIAL);
	CHECK_EQ(sent.type, SWV_FC_PROBE);
	CHECK_EQ(sent.value, next);
	CHECK(probes >= 10);

	/* CREDIT is for a sending QP: ignored in RTR. */
	init_qp(&qp, IBV_QPT_UC, IBV_QPS_RTR, p0);
	p = ctl(SWV_FC_CREDIT, PSN(p0 + 1000), buf);
	CHECK(!swv_fc_rx_control(&qp, &p));
	CHECK_EQ(swv_fc_tx_room(&qp, p0), SWV_FC_INITIAL);
}

static void test_receiver(void)
{
	struct swv_qp qp;
	uint8_t buf[SWV_FC_PAYLOAD_LEN];
	const uint32_t p0 = 0xffff00;
	const uint32_t w = SWV_FC_MAX_WINDOW; /* no socket: the largest window */
	init_qp(&qp, IBV_QPT_UC, IBV_QPS_RTR, p0);
	memset(&sent, 0, sizeof(sent));

	/* The first packet already opens the window beyond the implicit credit. */
	swv_fc_rx_data(&qp, p0);
	CHECK_EQ(sent.n, 1);
	CHECK_EQ(sent.type, SWV_FC_CREDIT);
	CHECK_EQ(sent.value, PSN(p0 + 1 + w));
	/* Then one CREDIT per quarter window consumed (the PSNs wrap on the way). */
	for (uint32_t i = 1; i <= 2 * w; i++)
		swv_fc_rx_data(&qp, PSN(p0 + i));
	CHECK_EQ(sent.n, 1 + 8);
	CHECK_EQ(sent.value, PSN(p0 + 2 * w + 1 + w));
	CHECK_EQ(qp.resp->fc.n_credits, 9);
	uint32_t next = PSN(p0 + 2 * w + 1);
	CHECK_EQ(qp.resp->fc.next, next);

	/* Duplicates and late packets cost nothing. */
	swv_fc_rx_data(&qp, PSN(next - 1));
	swv_fc_rx_data(&qp, PSN(next - 500));
	CHECK_EQ(qp.resp->fc.next, next);
	CHECK_EQ(sent.n, 9);
	/* Lost packets stop holding credit when a later one arrives. */
	swv_fc_rx_data(&qp, PSN(next + w / 2));
	CHECK_EQ(qp.resp->fc.next, PSN(next + w / 2 + 1));
	CHECK_EQ(sent.n, 10);
	CHECK_EQ(sent.value, PSN(next + w / 2 + 1 + w));

	/* A PROBE sets the position and is answered. */
	next = PSN(next + 12345);
	struct swv_pkt p = ctl(SWV_FC_PROBE, next, buf);
	CHECK(!swv_fc_rx_control(&qp, &p));
	CHECK_EQ(sent.n, 11);
	CHECK_EQ(sent.type, SWV_FC_CREDIT);
	CHECK_EQ(sent.value, PSN(next + w));
	CHECK_EQ(qp.resp->fc.next, next);
}

static void test_other_types(void)
{
	static const enum ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UD};
	uint8_t buf[SWV_FC_PAYLOAD_LEN];
	for (unsigned i = 0; i < 2; i++) {
		struct swv_qp qp;
		init_qp(&qp, types[i], IBV_QPS_RTS, 0);
		memset(&sent, 0, sizeof(sent));
		swv_fc_tx_start(&qp);
		CHECK_EQ(swv_fc_tx_room(&qp, 0), UINT32_MAX);
		swv_fc_tx_sent(&qp, 1000);
		CHECK_EQ(swv_fc_tx_room(&qp, 1000), UINT32_MAX);
		for (uint32_t k = 0; k < 10000; k++)
			swv_fc_rx_data(&qp, k);
		struct swv_pkt p = ctl(SWV_FC_PROBE, 5, buf);
		CHECK(!swv_fc_rx_control(&qp, &p));
		CHECK_EQ(sent.n, 0);
	}
}

int main(void)
{
	test_sender();
	test_receiver();
	test_other_types();
	printf("test_flowctl: OK\n");
	return 0;
}
