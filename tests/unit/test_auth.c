/*
 * Authenticated wire mode (docs/wire.md, "Authenticated mode").
 *
 * 1. SipHash-2-4 against the 64 reference vectors of its specification (key 00..0f,
 *    message 00..n-1, n = 0..63), one-shot and fed in every split of the input.
 * 2. Per-pair keys: each direction of each QP pair gets its own key.
 * 3. Packet trailers: swv_pkt_build_tail_mac / swv_pkt_mac_ok / swv_pkt_parse_ex.
 * 4. Configuration: auth_key= and auth_key_file=.
 * 5. Over the real UDP path, on a device with a secret: the test plays the connected
 *    peer (a plain UDP socket at the address and port the QP's dest QPN names), so a
 *    forged packet has the right IP:port, the right PSN and a valid CRC -- and is
 *    still dropped and counted (nothing executed, completed or answered) when its
 *    trailer is the CRC, a MAC under another secret, a MAC of another pair or
 *    direction, or a MAC over other bytes. The same packet with the right MAC is
 *    acted on, and what swverbs sends back carries the MAC of its own direction.
 *    Covered: RC WRITE (and its ACK), UC WRITE, UD SEND, and at an RC requester a
 *    READ response, an atomic ACK, an ACK and a NAK.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "core/qp.h"
#include "inproc.h"
#include "rawpeer.h"
#include "net/config.h"
#include "transport/auth.h"
#include "transport/crc.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "util/clock.h"

#define SECRET_HEX  "000102030405060708090a0b0c0d0e0f"
#define OTHER_HEX   "f00102030405060708090a0b0c0d0e0f"
#define AETH_ACK    0x1f
#define AETH_ACCESS 0x62 /* NAK: remote access error */

/* SipHash-2-4 reference outputs (the specification's vectors), as little-endian words. */
static const uint64_t sip_vectors[64] = {
    0x726fdb47dd0e0e31ull, 0x74f839c593dc67fdull, 0x0d6c8009d9a94f5aull, 0x85676696d7fb7e2dull,
    0xcf2794e0277187b7ull, 0x18765564cd99a68dull, 0xcbc9466e58fee3ceull, 0xab0200f58b01d137ull,
    0x93f5f5799a932462ull, 0x9e0082df0ba9e4b0ull, 0x7a5dbbc594ddb9f3ull, 0xf4b32f46226bada7ull,
    0x751e8fbc860ee5fbull, 0x14ea5627c0843d90ull, 0xf723ca908e7af2eeull, 0xa129ca6149be45e5ull,
    0x3f2acc7f57c29bdbull, 0x699ae9f52cbe4794ull, 0x4bc1b3f0968dd39cull, 0xbb6dc91da77961bdull,
    0xbed65cf21aa2ee98ull, 0xd0f2cbb02e3b67c7ull, 0x93536795e3a33e88ull, 0xa80c038ccd5ccec8ull,
    0xb8ad50c6f649af94ull, 0xbce192de8a85b8eaull, 0x17d835b85bbb15f3ull, 0x2f2e6163076bcfadull,
    0xde4daaaca71dc9a5ull, 0xa6a2506687956571ull, 0xad87a3535c49ef28ull, 0x32d892fad841c342ull,
    0x7127512f72f27cceull, 0xa7f32346f95978e3ull, 0x12e0b01abb051238ull, 0x15e034d40fa197aeull,
    0x314dffbe0815a3b4ull, 0x027990f029623981ull, 0xcadcd4e59ef40c4dull, 0x9abfd8766a33735cull,
    0x0e3ea96b5304a7d0ull, 0xad0c42d6fc585992ull, 0x187306c89bc215a9ull, 0xd4a60abcf3792b95ull,
    0xf935451de4f21df2ull, 0xa9538f0419755787ull, 0xdb9acddff56ca510ull, 0xd06c98cd5c0975ebull,
    0xe612a3cb9ecba951ull, 0xc766e62cfcadaf96ull, 0xee64435a9752fe72ull, 0xa192d576b245165aull,
    0x0a8787bf8ecb74b2ull, 0x81b3e73d20b49b6full, 0x7fa8220ba3b2eceaull, 0x245731c13ca42499ull,
    0xb78dbfaf3a8d83bdull, 0xea1ad565322a1a0bull, 0x60e61c23a3795013ull, 0x6606d7e446282b93ull,
    0x6ca4ecb15c5f91e1ull, 0x9f626da15c9625f3ull, 0xe51b38608ef25f57ull, 0x958a324ceb064572ull,
};

static void test_siphash_vectors(void)
{
	uint8_t kb[16], msg[64];
	struct swv_sip_key k;

	for (unsigned i = 0; i < 16; i++)
		kb[i] = (uint8_t)i;
	for (unsigned i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	swv_sip_key_from_bytes(&k, kb);
	CHECK_EQ(k.k0, 0x0706050403020100ull);
	CHECK_EQ(k.k1, 0x0f0e0d0c0b0a0908ull);
	for (unsigned n = 0; n < 64; n++) {
		CHECK_EQ(swv_siphash24(&k, msg, n), sip_vectors[n]);
		/* any two-way and three-way split of the input */
		for (unsigned a = 0; a <= n; a++)
			for (unsigned b = a; b <= n; b++) {
				struct swv_siphash s;
				swv_siphash_init(&s, &k);
				swv_siphash_update(&s, msg, a);
				swv_siphash_update(&s, msg + a, b - a);
				swv_siphash_update(&s, msg + b, n - b);
				CHECK_EQ(swv_siphash_final(&s), sip_vectors[n]);
			}
	}
	/* byte by byte */
	struct swv_siphash s;
	swv_siphash_init(&s, &k);
	for (unsigned i = 0; i < 63; i++)
		swv_siphash_update(&s, msg + i, 1);
	CHECK_EQ(swv_siphash_final(&s), sip_vectors[63]);
}

static struct swv_sip_key secret_key(const char *hex)
{
	uint8_t b[16];
	for (unsigned i = 0; i < 16; i++) {
		char x[3] = {hex[2 * i], hex[2 * i + 1], 0};
		b[i] = (uint8_t)strtoul(x, NULL, 16);
	}
	struct swv_sip_key k;
	swv_sip_key_from_bytes(&k, b);
	return k;
}

static struct in_addr ip4(const char *s)
{
	struct in_addr a;
	CHECK_EQ(inet_pton(AF_INET, s, &a), 1);
	return a;
}

static bool key_eq(const struct swv_sip_key *a, const struct swv_sip_key *b)
{
	return a->k0 == b->k0 && a->k1 == b->k1;
}

static void test_derive(void)
{
	struct swv_sip_key s = secret_key(SECRET_HEX), o = secret_key(OTHER_HEX);
	struct in_addr a = ip4("10.0.0.1"), b = ip4("10.0.0.2");
	struct swv_sip_key ab, ba, ab2, abq, ab_o;

	swv_auth_derive(&s, a, 0x123401, b, 0x567801, &ab);
	swv_auth_derive(&s, b, 0x567801, a, 0x123401, &ba);
	swv_auth_derive(&s, a, 0x123401, b, 0x567801, &ab2);
	swv_auth_derive(&s, a, 0x123401, b, 0x567802, &abq);
	swv_auth_derive(&o, a, 0x123401, b, 0x567801, &ab_o);
	CHECK(key_eq(&ab, &ab2));   /* deterministic: both ends compute it */
	CHECK(!key_eq(&ab, &ba));   /* each direction its own key */
	CHECK(!key_eq(&ab, &abq));  /* another QP, another key */
	CHECK(!key_eq(&ab, &ab_o)); /* another secret, another key */
	CHECK(ab.k0 != ab.k1);

	/* A QP's keys: tx is self->peer, rx peer->self. */
	struct swv_auth_qp q;
	uint8_t sb[16];
	for (unsigned i = 0; i < 16; i++)
		sb[i] = (uint8_t)i;
	swv_auth_qp_init(&q, sb, a, false);
	CHECK(q.on && !q.ready);
	struct sockaddr_in peer = {.sin_family = AF_INET, .sin_addr = b};
	CHECK(swv_auth_tx_key(&q, &peer, NULL, NULL) == NULL); /* no key before RTR */
	swv_auth_qp_attach(&q, 0x123401, &peer, 0x567801);
	CHECK(q.ready);
	CHECK(key_eq(&q.tx, &ab));
	CHECK(key_eq(&q.rx, &ba));
	CHECK(swv_auth_tx_key(&q, &peer, NULL, NULL) == &q.tx);
	swv_auth_qp_init(&q, NULL, a, false);
	CHECK(!q.on);
	CHECK(swv_auth_tx_key(&q, &peer, NULL, NULL) == NULL);
}

/* A RETH WRITE_ONLY with 5 bytes of payload (pad 3) built with trailer key k. */
static size_t build_write(uint8_t *d, const struct swv_sip_key *k)
{
	static const uint8_t data[5] = {1, 2, 3, 4, 5};
	struct swv_pkt p = {.opcode = SWV_OP_RC | SWV_OP_WRITE_ONLY,
			    .dqpn = 0x4242,
			    .psn = 77,
			    .ackreq = true,
			    .reth_va = 0x1000,
			    .reth_rkey = 0x99,
			    .reth_len = 5,
			    .paylen = 5};
	size_t h = swv_pkt_build_hdr(d, &p);
	CHECK(h > 0);
	memcpy(d + h, data, 5);
	size_t t = swv_pkt_build_tail_mac(k, d, h, d + h, 5, d + h + 5);
	CHECK_EQ(t, 3 + 4);
	return h + 5 + t;
}

static void test_trailer(void)
{
	struct swv_sip_key k = secret_key(SECRET_HEX), o = secret_key(OTHER_HEX);
	uint8_t d[128], c[128];
	struct swv_pkt p;

	size_t n = build_write(d, &k);
	size_t m = build_write(c, NULL);
	CHECK_EQ(n, m);
	CHECK(!memcmp(d, c, n - 4)); /* only the trailer differs */
	/* the MAC is SipHash over what the CRC covers, low 32 bits, LSB first */
	uint8_t masked[128];
	memcpy(masked, d, n - 4);
	masked[4] = 0xff;
	uint32_t tag = (uint32_t)swv_siphash24(&k, masked, n - 4);
	CHECK_EQ((uint32_t)d[n - 4] | (uint32_t)d[n - 3] << 8 | (uint32_t)d[n - 2] << 16 |
		     (uint32_t)d[n - 1] << 24,
		 tag);
	CHECK(swv_pkt_mac_ok(&k, d, n));
	CHECK(!swv_pkt_mac_ok(&o, d, n));
	CHECK(!swv_pkt_mac_ok(&k, c, n)); /* a CRC is not a MAC */
	CHECK(!swv_pkt_mac_ok(NULL, d, n));
	CHECK(!swv_pkt_mac_ok(&k, d, 15));
	/* BTH byte 4 (FECN/BECN) is masked, as for the CRC; every other bit counts */
	d[4] ^= 0xc0;
	CHECK(swv_pkt_mac_ok(&k, d, n));
	d[4] ^= 0xc0;
	for (size_t i = 0; i < n; i++)
		for (unsigned bit = 0; bit < 8; bit++) {
			if (i == 4)
				continue;
			d[i] ^= (uint8_t)(1u << bit);
			CHECK(!swv_pkt_mac_ok(&k, d, n));
			d[i] ^= (uint8_t)(1u << bit);
		}
	/* parse: CRC mode refuses a MAC trailer as a bad CRC; MAC mode parses it (the
	 * QP checks the MAC) and keeps a view of the whole datagram */
	CHECK_EQ(swv_pkt_parse(d, n, &p), EBADMSG);
	CHECK_EQ(swv_pkt_parse_ex(d, n, false, &p), EBADMSG);
	CHECK_OK(swv_pkt_parse_ex(d, n, true, &p));
	CHECK(p.wire == d);
	CHECK_EQ(p.wire_len, n);
	CHECK_EQ(p.psn, 77);
	CHECK_EQ(p.paylen, 5);
	CHECK_OK(swv_pkt_parse(c, n, &p));
	CHECK(p.wire == c);
	/* structural checks still apply in MAC mode */
	CHECK_EQ(swv_pkt_parse_ex(d, n - 1, true, &p), EINVAL);
	d[1] |= 0x01; /* TVer */
	CHECK_EQ(swv_pkt_parse_ex(d, n, true, &p), EINVAL);
	d[1] &= (uint8_t)~0x01;
	/* invalid input to the builder: as swv_pkt_build_tail */
	CHECK_EQ(swv_pkt_build_tail_mac(&k, d, 8, d, 5, c), 0);
	CHECK_EQ(swv_pkt_build_tail_mac(&k, d, 28, NULL, 5, c), 0);
	CHECK_EQ(swv_pkt_build_tail_mac(&k, d, 28, d, 5, NULL), 0);
}

static void test_config(void)
{
	struct swv_dev_config d;
	char spec[256], path[] = "/tmp/swv_auth_keyXXXXXX";

	CHECK_OK(swv_config_parse_spec("a=127.0.0.1", &d));
	CHECK(!d.auth); /* off by default */
	CHECK_OK(swv_config_parse_spec("a=127.0.0.1,auth_key=" SECRET_HEX, &d));
	CHECK(d.auth);
	for (unsigned i = 0; i < 16; i++)
		CHECK_EQ(d.auth_key[i], i);
	CHECK_OK(swv_config_parse_spec("a=127.0.0.1,roce,auth_key=0x" OTHER_HEX ",mtu=1024", &d));
	CHECK(d.auth);
	CHECK_EQ(d.auth_key[0], 0xf0);
	static const char *const bad[] = {
	    "a=127.0.0.1,auth_key",
	    "a=127.0.0.1,auth_key=",
	    "a=127.0.0.1,auth_key=00010203",			       /* 32 bits */
	    "a=127.0.0.1,auth_key=" SECRET_HEX "00",		       /* 136 bits */
	    "a=127.0.0.1,auth_key=g00102030405060708090a0b0c0d0e0f",   /* not hex */
	    "a=127.0.0.1,auth_key=" SECRET_HEX ",auth_key=" OTHER_HEX, /* twice */
	    "a=127.0.0.1,auth_key_file=/nonexistent/swv-key",
	    "a=127.0.0.1,auth_key_file=",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(swv_config_parse_spec(bad[i], &d) != 0);

	int fd = mkstemp(path);
	CHECK(fd >= 0);
	static const char text[] = "  " OTHER_HEX "\n# generated by head -c16 /dev/urandom\n";
	CHECK_EQ(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
	close(fd);
	snprintf(spec, sizeof(spec), "a=127.0.0.1,auth_key_file=%s", path);
	CHECK_OK(swv_config_parse_spec(spec, &d));
	CHECK(d.auth);
	CHECK_EQ(d.auth_key[0], 0xf0);
	CHECK_EQ(d.auth_key[15], 0x0f);
	snprintf(spec, sizeof(spec), "a=127.0.0.1,auth_key=%s,auth_key_file=%s", SECRET_HEX, path);
	CHECK(swv_config_parse_spec(spec, &d) != 0);
	fd = open(path, O_WRONLY | O_TRUNC);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, "0011\n", 5), 5);
	close(fd);
	snprintf(spec, sizeof(spec), "a=127.0.0.1,auth_key_file=%s", path);
	CHECK(swv_config_parse_spec(spec, &d) != 0);
	unlink(path);
}

/* ---- over the wire ---- */

static struct swvt_rawpeer rp; /* the connected peer, the device, PD, CQ and buffer */

/* How the forger seals a packet. */
enum seal {
	SEAL_CRC,	 /* a valid CRC: what a host without the secret can produce */
	SEAL_OTHER,	 /* the right pair's MAC under another secret */
	SEAL_WRONG_PAIR, /* the right secret, the key of another QP pair */
	SEAL_REVERSE,	 /* the right secret, the key of the opposite direction */
	SEAL_TAMPERED,	 /* the right MAC, then one payload/header bit changed */
	SEAL_RIGHT,
	NSEALS,
};
static const char *const seal_name[NSEALS] = {"CRC",	     "other secret", "other pair",
					      "reverse dir", "tampered",     "right MAC"};

/* Build p for qp, seal it and send it from the peer socket. */
static void peer_send(struct ibv_qp *qp, struct swv_pkt *p, const void *payload, enum seal how)
{
	uint8_t d[SWV_MAX_HDR_LEN + SWVT_RAWPEER_MAXPAY + SWV_MAX_TAIL_LEN];
	struct swv_sip_key s = secret_key(how == SEAL_OTHER ? OTHER_HEX : SECRET_HEX), k;
	struct in_addr lo = rp.addr;
	size_t h = swvt_rawpeer_build(qp, p, payload, d);
	if (how == SEAL_WRONG_PAIR)
		swv_auth_derive(&s, lo, swvt_rawpeer_qpn(&rp) + 1, lo, qp->qp_num, &k);
	else if (how == SEAL_REVERSE)
		swv_auth_derive(&s, lo, qp->qp_num, lo, swvt_rawpeer_qpn(&rp), &k);
	else
		swv_auth_derive(&s, lo, swvt_rawpeer_qpn(&rp), lo, qp->qp_num, &k);
	size_t t = swv_pkt_build_tail_mac(how == SEAL_CRC ? NULL : &k, d, h, d + h, p->paylen,
					  d + h + p->paylen);
	CHECK(t > 0);
	size_t n = h + p->paylen + t;
	if (how == SEAL_TAMPERED)
		d[n - 5] ^= 0x01; /* last byte before the trailer */
	swvt_rawpeer_sendto(&rp, qp, d, n);
}

/* The next packet swverbs sent to the peer (fails after 10 s), flow control skipped;
 * it must carry the MAC of the direction qp -> peer (and so fails as a CRC). */
static void peer_recv(struct ibv_qp *qp, struct swv_pkt *p, uint8_t *d, size_t size)
{
	struct swv_sip_key s = secret_key(SECRET_HEX), k;
	swv_auth_derive(&s, rp.addr, qp->qp_num, rp.addr, swvt_rawpeer_qpn(&rp), &k);
	do {
		size_t n = swvt_rawpeer_recv(&rp, d, size);
		CHECK_EQ(swv_pkt_parse(d, n, p), EBADMSG);
		CHECK_OK(swv_pkt_parse_ex(d, n, true, p));
		CHECK(swv_pkt_mac_ok(&k, d, n));
	} while (p->opcode == SWV_OP_FLOW_CONTROL);
}

/* The request with this opcode and PSN from qp, skipping flow control and resends of
 * earlier requests (an RC requester without an ACK sends tail-loss probes, even with
 * no ACK timer). */
static void peer_recv_req(struct ibv_qp *qp, struct swv_pkt *p, uint8_t *d, size_t size,
			  uint8_t opcode, uint32_t psn)
{
	do
		peer_recv(qp, p, d, size);
	while (swv_psn_cmp(p->psn, psn) < 0);
	CHECK_EQ(p->opcode, opcode);
	CHECK_EQ(p->psn, psn);
}

/* Nothing waiting at the peer but flow control and, when 'pending' is given, resends
 * of that request or earlier ones (see peer_recv_req). */
static void peer_expect_nothing(const struct swv_pkt *pending)
{
	uint8_t d[512];
	struct swv_pkt p;
	ssize_t n;
	while ((n = recv(rp.fd, d, sizeof(d), MSG_DONTWAIT)) > 0) {
		CHECK_OK(swv_pkt_parse_ex(d, (size_t)n, true, &p));
		if (p.opcode == SWV_OP_FLOW_CONTROL)
			continue;
		CHECK(pending);
		CHECK(p.flags & SWV_OPF_REQUEST);
		CHECK(swv_psn_cmp(p.psn, pending->psn) <= 0);
	}
	CHECK_EQ(n, -1);
}

/* Bounded wait for the QP's MAC drop count to reach want; no completion meanwhile. */
static void wait_bad_mac(struct ibv_qp *qp, uint64_t want, const char *what)
{
	_Atomic uint64_t *c = &to_swv_qp(qp)->auth->rx_bad;
	struct ibv_wc wc;
	uint64_t until = swv_now_ns() + 10000000000ull;
	while (atomic_load(c) < want) {
		int n = ibv_poll_cq(rp.cq, 1, &wc); /* also runs a receive pass */
		if (swv_now_ns() > until || n != 0) {
			fprintf(stderr, "packet sealed with %s: %s\n", what,
				n ? "completed something" : "not counted as a bad MAC");
			exit(1);
		}
		usleep(100);
	}
	CHECK_EQ(atomic_load(c), want);
}

/* Every forgery of p is dropped and counted; the checker (may be NULL) sees that it
 * had no effect. */
static void send_forgeries(struct ibv_qp *qp, struct swv_pkt *p, const void *payload,
			   void (*untouched)(void), const struct swv_pkt *pending)
{
	uint64_t base = atomic_load(&to_swv_qp(qp)->auth->rx_bad);
	for (enum seal s = SEAL_CRC; s < SEAL_RIGHT; s++) {
		peer_send(qp, p, payload, s);
		wait_bad_mac(qp, base + s + 1, seal_name[s]);
		if (untouched)
			untouched();
	}
	peer_expect_nothing(pending); /* no ACK or NAK for a dropped packet */
	CHECK_EQ(atomic_load(&to_swv_qp(qp)->rx_dropped), 0);
}

static void buf_zero8(void)
{
	static const uint8_t zero[8];
	if (memcmp(rp.buf, zero, sizeof(zero))) {
		fprintf(stderr, "a forged packet was executed\n");
		exit(1);
	}
}

/* RC or UC RDMA WRITE_ONLY from the peer. */
static void test_write(enum ibv_qp_type type)
{
	struct ibv_qp *qp = swvt_rawpeer_qp(&rp, type, 0);
	swvt_rawpeer_connect(&rp, qp, type, false);
	uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	struct swv_pkt p = swvt_rawpeer_write_only(&rp, type, sizeof(data));
	memset(rp.buf, 0, 64);
	send_forgeries(qp, &p, data, buf_zero8, NULL);

	peer_send(qp, &p, data, SEAL_RIGHT);
	if (type == IBV_QPT_RC) {
		uint8_t d[256];
		struct swv_pkt ack;
		peer_recv(qp, &ack, d, sizeof(d)); /* checks its MAC */
		swvt_rawpeer_check_ack(&ack, 0, 1); /* MSN 1: nothing else was executed */
	} else {
		swvt_rawpeer_wait_buf(&rp, data, sizeof(data));
	}
	CHECK(!memcmp(rp.buf, data, sizeof(data)));
	CHECK_EQ(atomic_load(&to_swv_qp(qp)->auth->rx_bad), SEAL_RIGHT);
	CHECK_OK(ibv_destroy_qp(qp));
}

/* UD SEND_ONLY from the peer's port: the key is that of (source address, DETH source
 * QPN) -> this QP. */
static void test_ud(void)
{
	struct ibv_qp *qp = swvt_rawpeer_ud_receiver(&rp, 0);
	uint8_t data[16] = "authenticated";
	struct swv_pkt p = swvt_rawpeer_ud_send_only(&rp, sizeof(data));
	send_forgeries(qp, &p, data, NULL, NULL); /* wait_bad_mac fails on a completion */
	peer_send(qp, &p, data, SEAL_RIGHT);
	swvt_rawpeer_expect_ud_recv(&rp, data, sizeof(data));

	/* a UD send from the QP to the peer's QPN carries the MAC of that pair */
	struct ibv_ah_attr aa;
	swvt_local_ah_attr(rp.ctx, &aa);
	struct ibv_ah *ah = ibv_create_ah(rp.pd, &aa);
	CHECK_PTR(ah);
	struct ibv_sge sge = {(uintptr_t)rp.buf, 16, rp.mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 8,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bsw;
	sw.wr.ud.ah = ah;
	sw.wr.ud.remote_qpn = swvt_rawpeer_qpn(&rp);
	sw.wr.ud.remote_qkey = 0x11111111;
	CHECK_OK(ibv_post_send(qp, &sw, &bsw));
	uint8_t d[256];
	struct swv_pkt got;
	peer_recv(qp, &got, d, sizeof(d));
	CHECK_EQ(got.opcode, SWV_OP_UD | SWV_OP_SEND_ONLY);
	CHECK_EQ(got.deth_sqpn, qp->qp_num);
	struct ibv_wc wc = swvt_rawpeer_wait_wc(&rp);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 8);
	CHECK_OK(ibv_destroy_ah(ah));
	CHECK_OK(ibv_destroy_qp(qp));
}

static void buf_zero_resp(void)
{
	CHECK_EQ(rp.buf[0], 0);
}

/* RC requester: a READ response, an atomic ACK, a NAK and an ACK forged are not acted
 * on (nothing placed, no completion, the QP stays up); sealed right, they are. */
static void test_responses(void)
{
	struct ibv_qp *qp = swvt_rawpeer_qp(&rp, IBV_QPT_RC, 0);
	swvt_rawpeer_connect(&rp, qp, IBV_QPT_RC, true);
	uint8_t d[512];
	struct swv_pkt req, p;
	struct ibv_wc wc;
	peer_expect_nothing(NULL);
	memset(rp.buf, 0, 64);

	/* READ response */
	swvt_rawpeer_post(&rp, qp, IBV_WR_RDMA_READ, 1, 0);
	peer_recv_req(qp, &req, d, sizeof(d), SWV_OP_RC | SWV_OP_READ_REQUEST, 0);
	uint8_t data[8] = {9, 8, 7, 6, 5, 4, 3, 2};
	p = (struct swv_pkt){.opcode = SWV_OP_RC | SWV_OP_READ_RESP_ONLY,
			     .psn = 0,
			     .aeth_syndrome = AETH_ACK,
			     .aeth_msn = 1,
			     .paylen = sizeof(data)};
	send_forgeries(qp, &p, data, buf_zero_resp, &req);
	peer_send(qp, &p, data, SEAL_RIGHT);
	wc = swvt_rawpeer_wait_wc(&rp);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
	CHECK(!memcmp(rp.buf, data, sizeof(data)));

	/* atomic ACK of a FETCH_ADD */
	memset(rp.buf, 0, 64);
	swvt_rawpeer_post(&rp, qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 2, 5);
	peer_recv_req(qp, &req, d, sizeof(d), SWV_OP_RC | SWV_OP_FETCH_ADD, 1);
	p = (struct swv_pkt){.opcode = SWV_OP_RC | SWV_OP_ATOMIC_ACK,
			     .psn = 1,
			     .aeth_syndrome = AETH_ACK,
			     .aeth_msn = 2,
			     .atmack_orig = 0x0102030405060708ull};
	send_forgeries(qp, &p, NULL, buf_zero_resp, &req);
	peer_send(qp, &p, NULL, SEAL_RIGHT);
	wc = swvt_rawpeer_wait_wc(&rp);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 2);
	uint64_t orig;
	memcpy(&orig, rp.buf, 8);
	CHECK_EQ(orig, 0x0102030405060708ull);

	/* a SEND: a forged NAK would end it (and the QP) in error, a forged ACK would
	 * complete it; neither does. The right ACK completes it. */
	swvt_rawpeer_post(&rp, qp, IBV_WR_SEND, 3, 0);
	peer_recv_req(qp, &req, d, sizeof(d), SWV_OP_RC | SWV_OP_SEND_ONLY, 2);
	p = (struct swv_pkt){.opcode = SWV_OP_RC | SWV_OP_ACK,
			     .psn = 2,
			     .aeth_syndrome = AETH_ACCESS,
			     .aeth_msn = 2};
	send_forgeries(qp, &p, NULL, NULL, &req);
	p.aeth_syndrome = AETH_ACK;
	p.aeth_msn = 3;
	send_forgeries(qp, &p, NULL, NULL, &req);
	peer_send(qp, &p, NULL, SEAL_RIGHT);
	wc = swvt_rawpeer_wait_wc(&rp);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 3);
	CHECK_EQ(atomic_load(&to_swv_qp(qp)->auth->rx_bad), 4 * SEAL_RIGHT);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK_OK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia));
	CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
	CHECK_OK(ibv_destroy_qp(qp));
}

int main(void)
{
	test_siphash_vectors();
	test_derive();
	test_trailer();
	test_config();

	/* This test owns its device: one with a secret. */
	unsetenv("SWVERBS_CONFIG");
	setenv("SWVERBS_DEVICES", "swvau=127.0.0.1,auth_key=" SECRET_HEX, 1);
	swvt_rawpeer_open(&rp);

	test_write(IBV_QPT_RC);
	test_write(IBV_QPT_UC);
	test_ud();
	test_responses();

	swvt_rawpeer_close(&rp);
	printf("test_auth: ok\n");
	return 0;
}
