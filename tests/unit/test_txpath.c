/*
 * The transmit path (transport/txrun.h) on its own, with the endpoint modelled here
 * (the linker takes these before the library's): a run of one packet leaves as one
 * plain datagram (swv_ep_send), a run of two or more as one GSO send; every packet is
 * framed whole (header, payload gathered where it is, pad, CRC, or the MAC of its
 * destination in authenticated mode, per packet for UD); destination QPN 0 reaches
 * no endpoint; EAGAIN/EWOULDBLOCK/ENOBUFS come back as EAGAIN (retry later), any other
 * error as a lost packet; an ACKNOWLEDGE's SACK map is a body a run takes; an ACK the
 * responder left pending leaves before any later packet of the QP. On an endpoint
 * with an inbox a run first tries the intra-host link with no ICRC (zero), and gets
 * its ICRC only when it takes UDP after all (swv_ep_send_udp: no second look at the
 * intra-host link); a MAC is never left out.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/qp.h"
#include "link/endpoint.h"
#include "transport/auth.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/qp_transport.h"
#include "transport/responder.h"
#include "transport/txrun.h"

/* ------------------------------------------------------------------ models */

static struct {
	int sends, gsos;       /* calls of swv_ep_send, swv_ep_send_gso */
	int rings;	       /* calls of swv_ep_send_ring */
	int udps;	       /* calls of swv_ep_send_udp */
	unsigned npkts;	       /* packets of the last call */
	size_t seg, len;       /* its segment size, its bytes */
	struct sockaddr_in to; /* its destination */
	uint8_t bytes[SWV_EP_GSO_MAX_BYTES];
} ep_log;
static int ep_rc;   /* what the next call returns */
static int ring_rc; /* what swv_ep_send_ring returns (ENOTCONN: no inbox there) */

static size_t gather(const struct iovec *iov, int iovcnt)
{
	size_t len = 0;
	for (int i = 0; i < iovcnt; i++) {
		CHECK(len + iov[i].iov_len <= sizeof(ep_log.bytes));
		memcpy(ep_log.bytes + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	return len;
}

int swv_ep_send(struct swv_endpoint *ep, const struct sockaddr_in *dst, const struct iovec *iov,
		int iovcnt)
{
	(void)ep;
	ep_log.sends++;
	ep_log.npkts = 1;
	ep_log.to = *dst;
	ep_log.len = gather(iov, iovcnt);
	ep_log.seg = ep_log.len;
	return ep_rc;
}

/* A run handed to UDP, counted in *calls. */
static int log_run(int *calls, const struct sockaddr_in *dst, const struct iovec *iov, int iovcnt,
		   size_t seg_size, unsigned nseg, unsigned *nsent)
{
	(*calls)++;
	ep_log.npkts = nseg;
	ep_log.to = *dst;
	ep_log.len = gather(iov, iovcnt);
	ep_log.seg = seg_size;
	*nsent = ep_rc ? 0 : nseg;
	return ep_rc;
}

int swv_ep_send_gso(struct swv_endpoint *ep, const struct sockaddr_in *dst, const struct iovec *iov,
		    int iovcnt, size_t seg_size, unsigned nseg, unsigned *nsent)
{
	(void)ep;
	return log_run(&ep_log.gsos, dst, iov, iovcnt, seg_size, nseg, nsent);
}

int swv_ep_send_udp(struct swv_endpoint *ep, const struct sockaddr_in *dst, const struct iovec *iov,
		    int iovcnt, size_t seg_size, unsigned nseg, unsigned *nsent)
{
	(void)ep;
	return log_run(&ep_log.udps, dst, iov, iovcnt, seg_size, nseg, nsent);
}

int swv_ep_send_ring(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		     const struct iovec *iov, int iovcnt, size_t seg_size, unsigned nseg,
		     unsigned *nsent)
{
	(void)ep;
	ep_log.rings++;
	*nsent = 0;
	if (ring_rc == ENOTCONN)
		return ENOTCONN;
	ep_log.npkts = nseg;
	ep_log.to = *dst;
	ep_log.len = gather(iov, iovcnt);
	ep_log.seg = nseg == 1 ? ep_log.len : seg_size;
	*nsent = ring_rc ? 0 : nseg;
	return ring_rc;
}

/* The responder's ACK flush, modelled: it records how many datagrams the link had
 * been given when it was asked, and sends nothing itself. */
static struct {
	int calls;
	int link_calls_before; /* sends + gsos at the (last) call */
} flush_log;

void swv_resp_flush_ack(struct swv_qp *qp)
{
	flush_log.calls++;
	flush_log.link_calls_before = ep_log.sends + ep_log.gsos + ep_log.udps;
	qp->resp->ack_pending = false;
}

/* ------------------------------------------------------------------ fixture */

static struct swv_qp qp;
static struct swv_qp_transport qp_tp;
static struct swv_endpoint ep;
static const uint8_t secret[SWV_AUTH_KEY_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static void setup(enum ibv_qp_type type, bool auth)
{
	memset(&qp, 0, sizeof(qp));
	memset(&qp_tp, 0, sizeof(qp_tp));
	memset(&ep_log, 0, sizeof(ep_log));
	memset(&flush_log, 0, sizeof(flush_log));
	ep_rc = 0;
	ring_rc = ENOTCONN;
	ep.shm = NULL;
	swv_qp_transport_attach(&qp, &qp_tp);
	qp.type = type;
	qp.qpn = 0x11;
	qp.ep = &ep;
	qp.attr.dest_qp_num = 0x22;
	qp.peer = (struct sockaddr_in){
	    .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002), .sin_port = htons(0x22)};
	struct in_addr self = {.s_addr = htonl(0x7f000001)};
	swv_auth_qp_init(qp.auth, auth ? secret : NULL, self, type == IBV_QPT_UD);
	swv_auth_qp_attach(qp.auth, qp.qpn, &qp.peer, qp.attr.dest_qp_num);
}

static struct swv_pkt pkt(uint8_t opcode, uint32_t psn, const void *payload, uint32_t paylen)
{
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = opcode;
	p.pkey = SWV_PKEY_DEFAULT;
	p.dqpn = qp.attr.dest_qp_num;
	p.psn = psn;
	p.payload = payload;
	p.paylen = paylen;
	return p;
}

/* Packet i of the last call, parsed (CRC checked unless mac). */
static struct swv_pkt sent_pkt(unsigned i, bool mac, const uint8_t **wire, size_t *len)
{
	struct swv_pkt p;
	CHECK(i < ep_log.npkts);
	size_t off = i * ep_log.seg;
	size_t l = i + 1 < ep_log.npkts ? ep_log.seg : ep_log.len - off;
	CHECK_OK(swv_pkt_parse_ex(ep_log.bytes + off, l, mac, &p));
	if (wire)
		*wire = ep_log.bytes + off;
	if (len)
		*len = l;
	return p;
}

/* ------------------------------------------------------------------ tests */

/* A single packet is one plain datagram to the peer, payload gathered as given. */
static void test_single(void)
{
	static const uint8_t data[100] = {7, 8, 9};
	setup(IBV_QPT_RC, false);
	struct swv_pkt p = pkt(SWV_OP_RC | SWV_OP_SEND_ONLY, 5, data, sizeof(data));
	CHECK_OK(swv_tx_pkt(&qp, NULL, &p));
	CHECK_EQ(ep_log.sends, 1);
	CHECK_EQ(ep_log.gsos, 0);
	CHECK_EQ(ep_log.to.sin_port, qp.peer.sin_port);
	CHECK_EQ(ep_log.len, swv_pkt_wire_len(p.opcode, p.paylen));
	struct swv_pkt q = sent_pkt(0, false, NULL, NULL);
	CHECK_EQ(q.psn, 5u);
	CHECK_EQ(q.dqpn, 0x22u);
	CHECK_EQ(q.paylen, (uint32_t)sizeof(data));
	CHECK(memcmp(q.payload, data, sizeof(data)) == 0);

	/* a run of one through begin/add/send is the same plain datagram */
	setup(IBV_QPT_RC, false);
	struct swv_txrun *r = swv_txrun_begin(&qp, NULL);
	CHECK_PTR(r);
	CHECK(swv_txrun_add(r, &p));
	unsigned n = 9;
	CHECK_OK(swv_txrun_send(r, &n));
	CHECK_EQ(n, 1u);
	CHECK_EQ(ep_log.sends, 1);
	CHECK_EQ(ep_log.gsos, 0);
	(void)sent_pkt(0, false, NULL, NULL);
}

/* Two or more packets: one GSO send, each segment a whole packet; the last shorter;
 * a staged payload is consumed, one left in place is gathered from where it is. */
static void test_run(void)
{
	static uint8_t data[3000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)i;
	setup(IBV_QPT_RC, false);
	struct swv_txrun *r = swv_txrun_begin(&qp, NULL);
	CHECK_PTR(r);
	uint8_t *st = swv_txrun_stage(r, 1024);
	CHECK_PTR(st);
	memcpy(st, data, 1024);
	struct swv_pkt p = pkt(SWV_OP_RC | SWV_OP_SEND_FIRST, 10, st, 1024);
	CHECK(swv_txrun_add(r, &p));
	CHECK(swv_txrun_stage(r, 1) == st + 1024); /* consumed */
	p = pkt(SWV_OP_RC | SWV_OP_SEND_MIDDLE, 11, data + 1024, 1024);
	CHECK(swv_txrun_add(r, &p));
	CHECK(swv_txrun_fits(r, SWV_OP_RC | SWV_OP_SEND_LAST, 952));
	p = pkt(SWV_OP_RC | SWV_OP_SEND_LAST, 12, data + 2048, 952);
	CHECK(swv_txrun_add(r, &p));
	/* after a shorter packet nothing may join: the GSO rule */
	CHECK(!swv_txrun_fits(r, SWV_OP_RC | SWV_OP_SEND_MIDDLE, 952));
	p = pkt(SWV_OP_RC | SWV_OP_SEND_MIDDLE, 13, data, 952);
	CHECK(!swv_txrun_add(r, &p));
	CHECK_EQ(swv_txrun_count(r), 3u);
	unsigned n = 0;
	CHECK_OK(swv_txrun_send(r, &n));
	CHECK_EQ(n, 3u);
	CHECK_EQ(ep_log.sends, 0);
	CHECK_EQ(ep_log.gsos, 1);
	CHECK_EQ(ep_log.npkts, 3u);
	CHECK_EQ(ep_log.seg, swv_pkt_wire_len(SWV_OP_RC | SWV_OP_SEND_FIRST, 1024));
	size_t off = 0;
	for (unsigned i = 0; i < 3; i++) {
		struct swv_pkt q = sent_pkt(i, false, NULL, NULL);
		CHECK_EQ(q.psn, 10u + i);
		CHECK(memcmp(q.payload, data + off, q.paylen) == 0);
		off += q.paylen;
	}
	CHECK_EQ(off, sizeof(data));
}

/* A deferred ACK (transport/responder.h) leaves before the next packet of its QP,
 * single or run, so the peer sees its request acknowledged before the answer; with
 * none pending the responder is not asked. */
static void test_ack_first(void)
{
	static const uint8_t data[2048];
	setup(IBV_QPT_RC, false);
	struct swv_pkt p = pkt(SWV_OP_RC | SWV_OP_SEND_ONLY, 5, data, 64);
	CHECK_OK(swv_tx_pkt(&qp, NULL, &p));
	CHECK_EQ(flush_log.calls, 0);

	qp.resp->ack_pending = true;
	CHECK_OK(swv_tx_pkt(&qp, NULL, &p));
	CHECK_EQ(flush_log.calls, 1);
	CHECK_EQ(flush_log.link_calls_before, 1); /* only the first SEND had gone */
	CHECK_EQ(ep_log.sends, 2);
	CHECK(!qp.resp->ack_pending);

	qp.resp->ack_pending = true;
	struct swv_txrun *r = swv_txrun_begin(&qp, NULL);
	CHECK_PTR(r);
	p = pkt(SWV_OP_RC | SWV_OP_SEND_FIRST, 6, data, 1024);
	CHECK(swv_txrun_add(r, &p));
	p = pkt(SWV_OP_RC | SWV_OP_SEND_LAST, 7, data + 1024, 1024);
	CHECK(swv_txrun_add(r, &p));
	unsigned n = 0;
	CHECK_OK(swv_txrun_send(r, &n));
	CHECK_EQ(n, 2u);
	CHECK_EQ(flush_log.calls, 2);
	CHECK_EQ(flush_log.link_calls_before, 2); /* before the run */
	CHECK_EQ(ep_log.gsos, 1);
}

/* Destination QPN 0 (UDP port 0): nothing reaches the endpoint, all counts as sent. */
static void test_qpn0(void)
{
	setup(IBV_QPT_UC, false);
	qp.attr.dest_qp_num = 0;
	qp.peer.sin_port = 0;
	struct swv_pkt p = pkt(SWV_OP_UC | SWV_OP_SEND_ONLY, 1, NULL, 0);
	p.dqpn = 0;
	CHECK_OK(swv_tx_pkt(&qp, NULL, &p));
	struct swv_txrun *r = swv_txrun_begin(&qp, NULL);
	static const uint8_t data[512];
	p = pkt(SWV_OP_UC | SWV_OP_SEND_MIDDLE, 2, data, sizeof(data));
	p.dqpn = 0;
	CHECK(swv_txrun_add(r, &p));
	p.psn = 3;
	CHECK(swv_txrun_add(r, &p));
	unsigned n = 0;
	CHECK_OK(swv_txrun_send(r, &n));
	CHECK_EQ(n, 2u);
	CHECK_EQ(ep_log.sends + ep_log.gsos, 0);
}

/* The link's errors: a full buffer is "retry later", anything else a lost packet. */
static void test_errors(void)
{
	static const int again[] = {EAGAIN, EWOULDBLOCK, ENOBUFS};
	static const uint8_t data[256];
	for (size_t i = 0; i < SWV_ARRAY_SIZE(again); i++) {
		setup(IBV_QPT_RC, false);
		ep_rc = again[i];
		struct swv_pkt p = pkt(SWV_OP_RC | SWV_OP_ACK, 1, NULL, 0);
		CHECK_EQ(swv_tx_pkt(&qp, NULL, &p), EAGAIN);
		struct swv_txrun *r = swv_txrun_begin(&qp, NULL);
		p = pkt(SWV_OP_RC | SWV_OP_SEND_MIDDLE, 2, data, sizeof(data));
		CHECK(swv_txrun_add(r, &p));
		CHECK(swv_txrun_add(r, &p));
		unsigned n = 9;
		CHECK_EQ(swv_txrun_send(r, &n), EAGAIN);
		CHECK_EQ(n, 0u);
	}
	setup(IBV_QPT_RC, false);
	ep_rc = EHOSTUNREACH;
	struct swv_txrun *r = swv_txrun_begin(&qp, NULL);
	struct swv_pkt p = pkt(SWV_OP_RC | SWV_OP_ACK, 1, NULL, 0);
	CHECK(swv_txrun_add(r, &p));
	unsigned n = 0;
	CHECK_EQ(swv_txrun_send(r, &n), EHOSTUNREACH);
	CHECK_EQ(n, 1u); /* it left, and was lost on the way */
	/* a packet that cannot be built is refused before the link */
	setup(IBV_QPT_RC, false);
	p = pkt(SWV_OP_RC | SWV_OP_ACK, 1, data, 8); /* an ACK with a body but no SACK */
	CHECK_EQ(swv_tx_pkt(&qp, NULL, &p), EINVAL);
	p = pkt(SWV_OP_RC | SWV_OP_SEND_ONLY, 1, NULL, 8); /* payload missing */
	CHECK_EQ(swv_tx_pkt(&qp, NULL, &p), EINVAL);
	CHECK_EQ(ep_log.sends + ep_log.gsos, 0);
}

/* An ACKNOWLEDGE carrying a SACK map goes out as one packet with its map. */
static void test_sack_ack(void)
{
	static const uint8_t map[8] = {0x05, 0, 0, 0, 0, 0, 0, 0x80};
	setup(IBV_QPT_RC, false);
	struct swv_pkt p = pkt(SWV_OP_RC | SWV_OP_ACK, 40, map, sizeof(map));
	p.sack = true;
	p.aeth_syndrome = 0x60; /* sequence NAK */
	CHECK_OK(swv_tx_pkt(&qp, NULL, &p));
	CHECK_EQ(ep_log.sends, 1);
	struct swv_pkt q = sent_pkt(0, false, NULL, NULL);
	CHECK(q.sack);
	CHECK_EQ(q.sack_len, (uint8_t)sizeof(map));
	CHECK(memcmp(q.sack_map, map, sizeof(map)) == 0);
}

/* Authenticated mode: a connected QP seals with its pair's key, a UD QP with the key
 * of each packet's destination address and DestQP. */
static void test_auth(void)
{
	static const uint8_t data[64] = {1};
	const uint8_t *wire;
	size_t len;
	struct swv_sip_key k;

	setup(IBV_QPT_RC, true);
	struct swv_txrun *r = swv_txrun_begin(&qp, NULL);
	struct swv_pkt p = pkt(SWV_OP_RC | SWV_OP_SEND_MIDDLE, 1, data, sizeof(data));
	CHECK(swv_txrun_add(r, &p));
	p.psn = 2;
	CHECK(swv_txrun_add(r, &p));
	unsigned n;
	CHECK_OK(swv_txrun_send(r, &n));
	CHECK_EQ(ep_log.gsos, 1);
	for (unsigned i = 0; i < 2; i++) {
		(void)sent_pkt(i, true, &wire, &len);
		CHECK(swv_pkt_mac_ok(&qp.auth->tx, wire, len));
		/* a CRC trailer would not parse as one */
		struct swv_pkt q;
		CHECK_EQ(swv_pkt_parse(wire, len, &q), EBADMSG);
	}

	setup(IBV_QPT_UD, true);
	struct swv_sip_key s;
	swv_sip_key_from_bytes(&s, secret);
	struct sockaddr_in dst[2] = {
	    {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000003), .sin_port = htons(0x33)},
	    {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000004), .sin_port = htons(0x44)},
	};
	for (int i = 0; i < 2; i++) {
		p = pkt(SWV_OP_UD | SWV_OP_SEND_ONLY, 7, data, sizeof(data));
		p.dqpn = 0x33 + 0x11 * (uint32_t)i;
		p.deth_qkey = 0x1234;
		p.deth_sqpn = qp.qpn;
		CHECK_OK(swv_tx_pkt(&qp, &dst[i], &p));
		CHECK_EQ(ep_log.to.sin_addr.s_addr, dst[i].sin_addr.s_addr);
		CHECK_EQ(ep_log.to.sin_port, dst[i].sin_port);
		(void)sent_pkt(0, true, &wire, &len);
		swv_auth_derive(&s, qp.auth->self_ip, qp.qpn, dst[i].sin_addr, p.dqpn, &k);
		CHECK(swv_pkt_mac_ok(&k, wire, len));
		swv_auth_derive(&s, qp.auth->self_ip, qp.qpn, dst[1 - i].sin_addr,
				0x33 + 0x11 * (1 - i), &k);
		CHECK(!swv_pkt_mac_ok(&k, wire, len));
	}
}

/* An endpoint with an inbox: a run goes to the ring unsealed (zero ICRC, everything
 * else as on UDP), and when the destination has no inbox it leaves by UDP with every
 * packet's ICRC computed; a full ring is EAGAIN, not a fall back to UDP. */
static void test_ring_unsealed(void)
{
	static uint8_t data[2100];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7);
	for (int take_udp = 0; take_udp < 2; take_udp++) {
		setup(IBV_QPT_RC, false);
		ep.shm = (struct swv_shm_port *)&ep; /* only tested for NULL by txrun */
		ring_rc = take_udp ? ENOTCONN : 0;
		struct swv_txrun *r = swv_txrun_begin(&qp, NULL);
		CHECK_PTR(r);
		struct swv_pkt p = pkt(SWV_OP_RC | SWV_OP_SEND_FIRST, 3, data, 1024);
		CHECK(swv_txrun_add(r, &p));
		p = pkt(SWV_OP_RC | SWV_OP_SEND_LAST, 4, data + 1024, 1021); /* padded */
		CHECK(swv_txrun_add(r, &p));
		unsigned n = 0;
		CHECK_OK(swv_txrun_send(r, &n));
		CHECK_EQ(n, 2u);
		CHECK_EQ(ep_log.rings, 1);
		/* UDP after the ring's ENOTCONN, without a second route lookup */
		CHECK_EQ(ep_log.udps, take_udp);
		CHECK_EQ(ep_log.sends + ep_log.gsos, 0);
		for (unsigned i = 0; i < 2; i++) {
			const uint8_t *wire;
			size_t len;
			struct swv_pkt q = sent_pkt(i, true, &wire, &len);
			CHECK_EQ(q.psn, 3u + i);
			CHECK(memcmp(q.payload, data + 1024 * i, q.paylen) == 0);
			static const uint8_t zero[SWV_CRC_LEN];
			bool crc_zero = memcmp(wire + len - SWV_CRC_LEN, zero, SWV_CRC_LEN) == 0;
			CHECK_EQ(crc_zero, !take_udp);
			/* on UDP the ICRC is the real one */
			CHECK_EQ(swv_pkt_parse_ex(wire, len, false, &q) == 0, (bool)take_udp);
		}
	}
	/* a full ring: EAGAIN, and nothing went by UDP */
	setup(IBV_QPT_RC, false);
	ep.shm = (struct swv_shm_port *)&ep;
	ring_rc = EAGAIN;
	struct swv_pkt p = pkt(SWV_OP_RC | SWV_OP_SEND_ONLY, 9, data, 64);
	CHECK_EQ(swv_tx_pkt(&qp, NULL, &p), EAGAIN);
	CHECK_EQ(ep_log.rings, 1);
	CHECK_EQ(ep_log.sends + ep_log.gsos + ep_log.udps, 0);
	/* authenticated mode: the MAC is always there, and no ring-only attempt is made */
	setup(IBV_QPT_RC, true);
	ep.shm = (struct swv_shm_port *)&ep;
	ring_rc = 0;
	CHECK_OK(swv_tx_pkt(&qp, NULL, &p));
	CHECK_EQ(ep_log.rings, 0);
	CHECK_EQ(ep_log.sends, 1);
	ep.shm = NULL;
}

int main(void)
{
	test_single();
	test_run();
	test_ack_first();
	test_qpn0();
	test_errors();
	test_sack_ack();
	test_auth();
	test_ring_unsealed();
	printf("test_txpath: OK\n");
	return 0;
}
