/*
 * Packet build/parse (transport/packet.c).
 *
 *   test_packet               unit tests: byte-exact hand-written packet, round trip of
 *                             every opcode with random fields and payloads 0..4096,
 *                             every truncation and single-bit flip rejected, malformed
 *                             packets (valid CRC) rejected with EINVAL, input validation.
 *   test_packet --pcap FILE   write sample packets (Ethernet/IPv4/UDP to port
 *                             SWV_PCAP_PORT) for tests/compat/test_tshark.sh.
 */
#include <errno.h>
#include <stdint.h>

#include "check.h"
#include "transport/auth.h"
#include "transport/crc.h"
#include "transport/opcode.h"
#include "transport/packet.h"

#define SWV_PCAP_PORT 18515

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint32_t rnd(void)
{
	/* xorshift64*: deterministic so a failure reproduces */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
static uint64_t rnd64(void)
{
	return (uint64_t)rnd() << 32 | rnd();
}

static size_t unhex(const char *s, uint8_t *out)
{
	size_t n = 0;
	for (; s[0] && s[1]; s += 2) {
		unsigned v;
		CHECK(sscanf(s, "%2x", &v) == 1);
		out[n++] = (uint8_t)v;
	}
	return n;
}

/* Build a whole packet into buf; returns its length (0 if build refused). */
static size_t build(uint8_t *buf, const struct swv_pkt *p, const void *payload)
{
	size_t h = swv_pkt_build_hdr(buf, p);
	if (!h)
		return 0;
	if (p->paylen)
		memcpy(buf + h, payload, p->paylen);
	size_t t = swv_pkt_build_tail(buf, h, payload, p->paylen, buf + h + p->paylen);
	if (!t)
		return 0;
	return h + p->paylen + t;
}

/*
 * Recompute the trailing CRC the way the wire format defines it, written out here
 * without packet.c: zlib CRC-32 over the datagram minus its last 4 bytes, with BTH
 * byte 4 counted as 0xff, stored least-significant byte first. Lets a test make a
 * packet malformed yet intact, to hit the semantic checks behind the CRC check.
 */
static void reseal(uint8_t *buf, size_t len)
{
	uint8_t b4 = buf[4];
	buf[4] = 0xff;
	uint32_t crc = swv_crc32(0, buf, len - 4);
	buf[4] = b4;
	for (int i = 0; i < 4; i++)
		buf[len - 4 + i] = (uint8_t)(crc >> (8 * i));
}

/* roce-wire.md 1.3 transport part: RC RDMA_WRITE_ONLY, DestQP 0x11, AckReq, PSN
 * 0x123456, RETH{VA 0x7f0000001000, R_Key 0x1234, len 5}, "hello", PadCnt 3.
 * Trailer = swverbs CRC 0x905ef21e (computed independently with Python's
 * zlib.crc32 over these bytes with byte 4 = 0xff), least-significant byte first. */
static const char write_only_hex[] = "0a30ffff000000118012345600007f00000010000000123400000005"
				     "68656c6c6f000000"
				     "1ef25e90";

static void test_hand_written(void)
{
	uint8_t want[128], got[128];
	size_t n = unhex(write_only_hex, want);
	CHECK_EQ(n, 12 + 16 + 5 + 3 + 4);

	struct swv_pkt p = {
		.opcode = SWV_OP_RC | SWV_OP_WRITE_ONLY,
		.ackreq = true,
		.pkey = 0xffff,
		.dqpn = 0x11,
		.psn = 0x123456,
		.reth_va = 0x7f0000001000ull,
		.reth_rkey = 0x1234,
		.reth_len = 5,
		.paylen = 5,
	};
	memset(got, 0xaa, sizeof(got));
	CHECK_EQ(build(got, &p, "hello"), n);
	CHECK(memcmp(got, want, n) == 0);

	struct swv_pkt q;
	CHECK_OK(swv_pkt_parse(want, n, &q));
	CHECK_EQ(q.opcode, 0x0a);
	CHECK(!q.se && !q.migreq && q.ackreq);
	CHECK_EQ(q.padcnt, 3);
	CHECK_EQ(q.pkey, 0xffff);
	CHECK_EQ(q.dqpn, 0x11);
	CHECK_EQ(q.psn, 0x123456);
	CHECK_EQ(q.flags, swv_opcode(0x0a)->flags);
	CHECK_EQ(q.reth_va, 0x7f0000001000ull);
	CHECK_EQ(q.reth_rkey, 0x1234);
	CHECK_EQ(q.reth_len, 5);
	CHECK_EQ(q.paylen, 5);
	CHECK(q.payload == want + 28);
	CHECK(memcmp(q.payload, "hello", 5) == 0);

	/* FECN/BECN (BTH byte 4) may be set in flight: masked out of the CRC. */
	want[4] = 0xc0;
	CHECK_OK(swv_pkt_parse(want, n, &q));
	want[4] = 0;

	/* ImmDt stays in network order: wire bytes 11 22 33 44 <-> memory bytes. */
	uint8_t imm_wire[4] = {0x11, 0x22, 0x33, 0x44};
	struct swv_pkt s = {.opcode = SWV_OP_RC | SWV_OP_SEND_ONLY_IMM, .dqpn = 1, .psn = 2};
	memcpy(&s.imm, imm_wire, 4);
	n = build(got, &s, NULL);
	CHECK_EQ(n, 12 + 4 + 4);
	CHECK(memcmp(got + 12, imm_wire, 4) == 0);
	CHECK_EQ(got[2], 0xff); /* pkey 0 is sent as the default 0xffff */
	CHECK_EQ(got[3], 0xff);
	CHECK_OK(swv_pkt_parse(got, n, &q));
	CHECK(memcmp(&q.imm, imm_wire, 4) == 0);
}

static void random_fields(struct swv_pkt *p, uint8_t op, uint32_t paylen)
{
	memset(p, 0, sizeof(*p));
	p->opcode = op;
	p->se = rnd() & 1;
	p->migreq = rnd() & 1;
	p->ackreq = rnd() & 1;
	p->pkey = (uint16_t)(rnd() | 1); /* nonzero: 0 means "default" */
	p->dqpn = rnd() & SWV_QPN_MASK;
	p->psn = rnd() & SWV_PSN_MASK;
	p->reth_va = rnd64();
	p->reth_rkey = rnd();
	p->reth_len = rnd();
	p->aeth_syndrome = (uint8_t)rnd();
	p->aeth_msn = rnd() & 0xffffff;
	p->atm_va = rnd64();
	p->atm_rkey = rnd();
	p->atm_swap_add = rnd64();
	p->atm_cmp = rnd64();
	p->atmack_orig = rnd64();
	p->deth_qkey = rnd();
	p->deth_sqpn = rnd() & SWV_QPN_MASK;
	p->deth_rsvd = (uint8_t)(rnd() & ~SWV_DETH_MGID); /* the MGID bit: test_mgid */
	p->imm = rnd();
	p->ieth_rkey = rnd();
	p->xrc_srqn = rnd() & SWV_QPN_MASK;
	p->feth = rnd();
	p->paylen = paylen;
}

/* Parsed q must equal sent p for every field the opcode carries, zero elsewhere. */
static void check_same(const struct swv_pkt *p, const struct swv_pkt *q, const uint8_t *payload)
{
	uint32_t f = swv_opcode(p->opcode)->flags;
	CHECK_EQ(q->opcode, p->opcode);
	CHECK_EQ(q->flags, f);
	CHECK_EQ(q->se, p->se);
	CHECK_EQ(q->migreq, p->migreq);
	CHECK_EQ(q->ackreq, p->ackreq);
	CHECK_EQ(q->padcnt, (0u - p->paylen) & 3);
	CHECK_EQ(q->pkey, p->pkey);
	CHECK_EQ(q->dqpn, p->dqpn);
	CHECK_EQ(q->psn, p->psn);
#define FIELD(hdr, x) CHECK_EQ(q->x, (f & (hdr)) ? p->x : 0)
	FIELD(SWV_HDR_RETH, reth_va);
	FIELD(SWV_HDR_RETH, reth_rkey);
	FIELD(SWV_HDR_RETH, reth_len);
	FIELD(SWV_HDR_AETH, aeth_syndrome);
	FIELD(SWV_HDR_AETH, aeth_msn);
	FIELD(SWV_HDR_ATMETH, atm_va);
	FIELD(SWV_HDR_ATMETH, atm_rkey);
	FIELD(SWV_HDR_ATMETH, atm_swap_add);
	FIELD(SWV_HDR_ATMETH, atm_cmp);
	FIELD(SWV_HDR_ATMACK, atmack_orig);
	FIELD(SWV_HDR_DETH, deth_qkey);
	FIELD(SWV_HDR_DETH, deth_sqpn);
	FIELD(SWV_HDR_DETH, deth_rsvd);
	FIELD(SWV_HDR_IMM, imm);
	FIELD(SWV_HDR_IETH, ieth_rkey);
	FIELD(SWV_HDR_XRCETH, xrc_srqn);
	FIELD(SWV_HDR_FETH, feth);
#undef FIELD
	CHECK_EQ(q->paylen, p->paylen);
	CHECK(q->paylen == 0 || memcmp(q->payload, payload, q->paylen) == 0);
}

static uint8_t payload_src[4096];
static uint8_t pkt[SWV_MAX_HDR_LEN + 4096 + SWV_MAX_TAIL_LEN];

static void test_round_trip(void)
{
	int ops = 0;
	for (int op = 0; op < 256; op++) {
		const struct swv_opcode_info *oi = swv_opcode((uint8_t)op);
		if (!oi->name)
			continue;
		ops++;
		uint32_t maxlen = (oi->flags & SWV_OPF_PAYLOAD) ? 4096 : 0;
		for (uint32_t len = 0; len <= maxlen; len++) {
			struct swv_pkt p, q;
			random_fields(&p, (uint8_t)op, len);
			const uint8_t *pl = payload_src + (rnd() % (4097 - len));
			size_t n = build(pkt, &p, pl);
			CHECK_EQ(n, oi->hdr_len + len + ((0u - len) & 3) + 4);
			CHECK_EQ(n, swv_pkt_wire_len((uint8_t)op, len));
			CHECK_EQ(n % 4, 0);
			CHECK_EQ(pkt[0], op);
			CHECK_EQ(pkt[1] & 0x0f, 0); /* TVer */
			CHECK_EQ(pkt[4], 0);
			for (uint32_t i = 0; i < ((0u - len) & 3); i++)
				CHECK_EQ(pkt[oi->hdr_len + len + i], 0);
			CHECK_OK(swv_pkt_parse(pkt, n, &q));
			check_same(&p, &q, pl);
			CHECK(q.payload == pkt + oi->hdr_len);

			/* Gathered CRC (payload in 3 segments) gives the same trailer. */
			if (len % 61 == 0) {
				uint8_t tail[SWV_MAX_TAIL_LEN];
				uint32_t crc, a = len / 3, b = len / 2;
				CHECK_OK(swv_pkt_crc_begin(pkt, oi->hdr_len, len, &crc));
				crc = swv_crc32(crc, pl, a);
				crc = swv_crc32(crc, pl + a, b - a);
				crc = swv_crc32(crc, pl + b, len - b);
				size_t t = swv_pkt_crc_finish(crc, len, tail);
				CHECK_EQ(t, n - oi->hdr_len - len);
				CHECK(memcmp(tail, pkt + oi->hdr_len + len, t) == 0);
			}
		}
	}
	CHECK_EQ(ops, 63); /* 39 IB opcodes (FLUSH, ATOMIC_WRITE incl.), 23 XRC opcodes + UC
			    * flow control */
}

/* Every truncation and every single-bit flip of p must be rejected. */
static void corrupt_all(const struct swv_pkt *p, const uint8_t *pl)
{
	uint8_t buf[SWV_MAX_HDR_LEN + 64 + SWV_MAX_TAIL_LEN];
	struct swv_pkt q, sentinel;
	size_t n = build(buf, p, pl);
	CHECK(n > 0 && n <= sizeof(buf));
	CHECK_OK(swv_pkt_parse(buf, n, &q));

	memset(&sentinel, 0x5a, sizeof(sentinel));
	for (size_t len = 0; len < n; len++) {
		q = sentinel;
		int r = swv_pkt_parse(buf, len, &q);
		if (r != EINVAL && r != EBADMSG) {
			fprintf(stderr, "opcode 0x%02x paylen %u truncated to %zu: parse %d\n",
				p->opcode, p->paylen, len, r);
			exit(1);
		}
		CHECK(memcmp(&q, &sentinel, sizeof(q)) == 0); /* untouched on error */
	}
	for (size_t bit = 0; bit < n * 8; bit++) {
		if (bit / 8 == 4)
			continue; /* BTH byte 4 (FECN/BECN/resv) is deliberately not covered */
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		q = sentinel;
		int r = swv_pkt_parse(buf, n, &q);
		if (r != EBADMSG) {
			fprintf(stderr, "opcode 0x%02x paylen %u bit %zu flipped: parse %d\n",
				p->opcode, p->paylen, bit, r);
			exit(1);
		}
		CHECK(memcmp(&q, &sentinel, sizeof(q)) == 0);
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	/* Bits of byte 4 do not matter, the packet stays valid. */
	for (int bit = 0; bit < 8; bit++) {
		buf[4] ^= (uint8_t)(1u << bit);
		CHECK_OK(swv_pkt_parse(buf, n, &q));
		buf[4] ^= (uint8_t)(1u << bit);
	}
	/* Trailing garbage is a different (bad) packet, not a tolerated extension. */
	uint8_t longer[sizeof(buf) + 8];
	memcpy(longer, buf, n);
	memset(longer + n, 0, 8);
	for (size_t extra = 1; extra <= 8; extra++)
		CHECK(swv_pkt_parse(longer, n + extra, &q) != 0);
}

static void test_corruption(void)
{
	static const uint32_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 64};
	for (int op = 0; op < 256; op++) {
		const struct swv_opcode_info *oi = swv_opcode((uint8_t)op);
		if (!oi->name)
			continue;
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			if (sizes[i] && !(oi->flags & SWV_OPF_PAYLOAD))
				break;
			struct swv_pkt p;
			random_fields(&p, (uint8_t)op, sizes[i]);
			corrupt_all(&p, payload_src);
		}
	}
}

/* Intact (CRC-valid) but malformed packets: EINVAL. */
static void test_malformed(void)
{
	uint8_t buf[256];
	struct swv_pkt p, q;
	size_t n;

	/* TVer 1..15 */
	random_fields(&p, SWV_OP_RC | SWV_OP_SEND_ONLY, 8);
	n = build(buf, &p, payload_src);
	CHECK_OK(swv_pkt_parse(buf, n, &q));
	for (int tver = 1; tver < 16; tver++) {
		buf[1] = (uint8_t)((buf[1] & 0xf0) | tver);
		reseal(buf, n);
		CHECK_EQ(swv_pkt_parse(buf, n, &q), EINVAL);
	}
	buf[1] &= 0xf0;
	reseal(buf, n);
	CHECK_OK(swv_pkt_parse(buf, n, &q)); /* reseal itself is right */

	/* Every unsupported opcode, with room for any headers (and without). */
	for (int op = 0; op < 256; op++) {
		if (swv_opcode_supported((uint8_t)op))
			continue;
		memset(buf, 0, sizeof(buf));
		buf[0] = (uint8_t)op;
		buf[2] = buf[3] = 0xff;
		CHECK_EQ(n = 12 + 28 + 16 + 4, 60);
		reseal(buf, n);
		CHECK_EQ(swv_pkt_parse(buf, n, &q), EINVAL);
		reseal(buf, 16);
		CHECK_EQ(swv_pkt_parse(buf, 16, &q), EINVAL);
	}

	/* Payload (one word, two words) on every opcode that cannot carry one. */
	for (int op = 0; op < 256; op++) {
		const struct swv_opcode_info *oi = swv_opcode((uint8_t)op);
		if (!oi->name || (oi->flags & SWV_OPF_PAYLOAD))
			continue;
		random_fields(&p, (uint8_t)op, 0);
		n = build(buf, &p, NULL);
		CHECK_OK(swv_pkt_parse(buf, n, &q));
		for (size_t extra = 4; extra <= 8; extra += 4) {
			memset(buf + n - 4, 0x77, extra); /* payload where the CRC was */
			reseal(buf, n + extra);
			CHECK_EQ(swv_pkt_parse(buf, n + extra, &q), EINVAL);
		}
		/* A pad count without payload. */
		n = build(buf, &p, NULL);
		buf[1] |= 0x10;
		reseal(buf, n);
		CHECK_EQ(swv_pkt_parse(buf, n, &q), EINVAL);
		/* Shorter than its headers (but at least BTH + CRC). */
		for (size_t len = 16; len < oi->hdr_len + 4u; len += 4) {
			n = build(buf, &p, NULL);
			reseal(buf, len);
			CHECK_EQ(swv_pkt_parse(buf, len, &q), EINVAL);
		}
	}

	/* Payload opcode: pad count with zero payload. */
	random_fields(&p, SWV_OP_RC | SWV_OP_SEND_ONLY, 0);
	n = build(buf, &p, NULL);
	CHECK_EQ(n, 16);
	for (int pad = 1; pad < 4; pad++) {
		buf[1] = (uint8_t)((buf[1] & 0xcf) | pad << 4);
		reseal(buf, n);
		CHECK_EQ(swv_pkt_parse(buf, n, &q), EINVAL);
	}

	/* Datagram length not a multiple of 4 (payload without the pad it needs): PadCnt
	 * 0 and zero bytes, so only the length rule can reject it. */
	static const uint8_t zeros[8];
	random_fields(&p, SWV_OP_RC | SWV_OP_SEND_ONLY, 8);
	n = build(buf, &p, zeros); /* 12 + 8 + 4 */
	CHECK_EQ(n, 24);
	for (size_t len = 17; len < 28; len++) {
		reseal(buf, len);
		CHECK_EQ(swv_pkt_parse(buf, len, &q), len % 4 ? EINVAL : 0);
	}

	/* Pad count larger than the payload+pad area allows is impossible to encode
	 * (area >= 4 when non-empty), but PadCnt 3 over a 4-byte area leaves 1 byte. */
	random_fields(&p, SWV_OP_RC | SWV_OP_SEND_ONLY, 1);
	n = build(buf, &p, zeros);
	CHECK_OK(swv_pkt_parse(buf, n, &q));
	CHECK_EQ(q.paylen, 1);
	CHECK_EQ(q.padcnt, 3);

	/* Non-zero pad bytes. */
	random_fields(&p, SWV_OP_RC | SWV_OP_SEND_ONLY, 5);
	for (int i = 0; i < 3; i++) {
		n = build(buf, &p, payload_src);
		buf[12 + 5 + i] = 0x01;
		reseal(buf, n);
		CHECK_EQ(swv_pkt_parse(buf, n, &q), EINVAL);
	}

	/* Shorter than BTH + CRC, and NULL arguments. */
	for (size_t len = 0; len < 16; len++)
		CHECK_EQ(swv_pkt_parse(buf, len, &q), EINVAL);
	n = build(buf, &p, payload_src);
	CHECK_EQ(swv_pkt_parse(NULL, n, &q), EINVAL);
	CHECK_EQ(swv_pkt_parse(buf, n, NULL), EINVAL);
}

static void test_build_validation(void)
{
	uint8_t hdr[SWV_MAX_HDR_LEN], tail[SWV_MAX_TAIL_LEN];
	struct swv_pkt p;
	uint32_t crc;

	random_fields(&p, SWV_OP_RC | SWV_OP_SEND_ONLY, 0);
	CHECK_EQ(swv_pkt_build_hdr(NULL, &p), 0);
	CHECK_EQ(swv_pkt_build_hdr(hdr, NULL), 0);
	for (int op = 0; op < 256; op++) {
		if (swv_opcode_supported((uint8_t)op))
			continue;
		random_fields(&p, (uint8_t)op, 0);
		CHECK_EQ(swv_pkt_build_hdr(hdr, &p), 0);
		CHECK_EQ(swv_pkt_wire_len((uint8_t)op, 0), 0);
	}
	random_fields(&p, SWV_OP_ACK, 4);
	CHECK_EQ(swv_pkt_build_hdr(hdr, &p), 0); /* payload on ACK */
	CHECK_EQ(swv_pkt_wire_len(SWV_OP_ACK, 4), 0);
	CHECK_EQ(swv_pkt_wire_len(SWV_OP_ACK, 0), 20);
	p.paylen = 0;
	CHECK_EQ(swv_pkt_build_hdr(hdr, &p), 16);
	p.aeth_msn = 0x1000000;
	CHECK_EQ(swv_pkt_build_hdr(hdr, &p), 0);
	p.aeth_msn = 0xffffff;
	CHECK_EQ(swv_pkt_build_hdr(hdr, &p), 16);
	p.psn = 0x1000000;
	CHECK_EQ(swv_pkt_build_hdr(hdr, &p), 0);
	p.psn = 0;
	p.dqpn = 0x1000000;
	CHECK_EQ(swv_pkt_build_hdr(hdr, &p), 0);
	random_fields(&p, SWV_OP_UD | SWV_OP_SEND_ONLY, 0);
	p.deth_sqpn = 0x1000000;
	CHECK_EQ(swv_pkt_build_hdr(hdr, &p), 0);

	/* Tail: header length must be the opcode's, PadCnt must match paylen. */
	random_fields(&p, SWV_OP_RC | SWV_OP_WRITE_FIRST, 6);
	size_t h = swv_pkt_build_hdr(hdr, &p);
	CHECK_EQ(h, 28);
	CHECK_EQ(swv_pkt_build_tail(hdr, h, payload_src, 6, tail), 2 + 4);
	CHECK_EQ(swv_pkt_build_tail(hdr, h - 4, payload_src, 6, tail), 0);
	CHECK_EQ(swv_pkt_build_tail(hdr, 8, payload_src, 6, tail), 0);
	CHECK_EQ(swv_pkt_build_tail(hdr, h, payload_src, 7, tail), 0); /* pad 1 != 2 */
	CHECK_EQ(swv_pkt_build_tail(hdr, h, payload_src, 10, tail), 2 + 4); /* pad 2 too */
	CHECK_EQ(swv_pkt_build_tail(hdr, h, NULL, 6, tail), 0);
	CHECK_EQ(swv_pkt_build_tail(hdr, h, payload_src, 6, NULL), 0);
	CHECK_EQ(swv_pkt_build_tail(NULL, h, payload_src, 6, tail), 0);
	CHECK_EQ(swv_pkt_crc_begin(hdr, h, 7, &crc), EINVAL);
	CHECK_EQ(swv_pkt_crc_begin(hdr, h, 6, NULL), EINVAL);
	CHECK_EQ(swv_pkt_crc_begin(NULL, h, 6, &crc), EINVAL);
	CHECK_EQ(swv_pkt_crc_finish(0, 6, NULL), 0);
	hdr[0] = 0x1e; /* reserved: unsupported */
	CHECK_EQ(swv_pkt_build_tail(hdr, h, payload_src, 6, tail), 0);
	/* A payload on a no-payload opcode's header. */
	random_fields(&p, SWV_OP_READ_REQUEST, 0);
	h = swv_pkt_build_hdr(hdr, &p);
	CHECK_EQ(h, 28);
	CHECK_EQ(swv_pkt_build_tail(hdr, h, payload_src, 4, tail), 0);
	CHECK_EQ(swv_pkt_build_tail(hdr, h, NULL, 0, tail), 4);
}

/* ---- --pcap: sample packets for the tshark compatibility test ---- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void pcap_u32(FILE *f, uint32_t v)
{
	CHECK(fwrite(&v, 4, 1, f) == 1); /* native order; the magic tells readers which */
}

/* Wrap one swverbs datagram in Ethernet/IPv4/UDP and append it as a pcap record. */
static void pcap_packet(FILE *f, const struct swv_pkt *p, const void *payload, uint32_t ts)
{
	uint8_t frame[14 + 20 + 8 + SWV_MAX_HDR_LEN + 4096 + SWV_MAX_TAIL_LEN];
	uint8_t *eth = frame, *ip = frame + 14, *udp = ip + 20, *bth = udp + 8;
	size_t n = build(bth, p, payload);
	CHECK(n > 0);
	CHECK_OK(swv_pkt_parse(bth, n, &(struct swv_pkt){0}));

	static const uint8_t macs[12] = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1};
	memcpy(eth, macs, 12);
	put16(eth + 12, 0x0800);
	memset(ip, 0, 20);
	ip[0] = 0x45;
	put16(ip + 2, (uint16_t)(20 + 8 + n));
	put16(ip + 4, (uint16_t)ts);
	ip[6] = 0x40; /* DF */
	ip[8] = 64;
	ip[9] = 17;
	static const uint8_t addrs[8] = {127, 0, 0, 1, 127, 0, 0, 1};
	memcpy(ip + 12, addrs, 8);
	uint32_t sum = 0;
	for (int i = 0; i < 20; i += 2)
		sum += (uint32_t)ip[i] << 8 | ip[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	put16(ip + 10, (uint16_t)~sum);
	put16(udp, 0xc001);
	put16(udp + 2, SWV_PCAP_PORT);
	put16(udp + 4, (uint16_t)(8 + n));
	put16(udp + 6, 0); /* no UDP checksum (IPv4) */

	uint32_t caplen = (uint32_t)(14 + 20 + 8 + n);
	pcap_u32(f, 1700000000u + ts);
	pcap_u32(f, 0);
	pcap_u32(f, caplen);
	pcap_u32(f, caplen);
	CHECK(fwrite(frame, caplen, 1, f) == 1);
}

/*
 * The packets and field values below are mirrored, independently, as expected values
 * in tests/compat/test_tshark.sh: change both together.
 */
static int write_pcap(const char *path)
{
	FILE *f = fopen(path, "wb");
	CHECK_PTR(f);
	pcap_u32(f, 0xa1b2c3d4u);
	pcap_u32(f, 2u | 4u << 16); /* version 2.4 (major, minor as two u16) */
	pcap_u32(f, 0);             /* thiszone */
	pcap_u32(f, 0);             /* sigfigs */
	pcap_u32(f, 65535);         /* snaplen */
	pcap_u32(f, 1);             /* LINKTYPE_ETHERNET */

	static uint8_t data[4096];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)i;
	uint32_t ts = 1;
	uint8_t imm[4] = {0xde, 0xad, 0xbe, 0xef};

	/* 1: RC SEND_ONLY, 5 bytes + 3 pad */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x04, .ackreq = true, .dqpn = 0x000123,
					 .psn = 1, .paylen = 5},
		    "hello", ts++);
	/* 2: RC RDMA_WRITE_FIRST with RETH, 256 bytes */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x06, .dqpn = 0x000123, .psn = 0x10,
					 .reth_va = 0x7f0000001000ull, .reth_rkey = 0x1234,
					 .reth_len = 8192, .paylen = 256},
		    data, ts++);
	/* 3: RC RDMA_READ_REQUEST */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x0c, .ackreq = true, .dqpn = 0x000123,
					 .psn = 0x20, .reth_va = 0x2000, .reth_rkey = 0xabcd,
					 .reth_len = 4096},
		    NULL, ts++);
	/* 4: RC ACKNOWLEDGE */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x11, .dqpn = 0x000456, .psn = 0x20,
					 .aeth_syndrome = 0x1f, .aeth_msn = 5},
		    NULL, ts++);
	/* 5: RC COMPARE_SWAP */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x13, .ackreq = true, .dqpn = 0x000123,
					 .psn = 0x30, .atm_va = 0x10000, .atm_rkey = 0x5678,
					 .atm_swap_add = 0x1111222233334444ull,
					 .atm_cmp = 0x5555666677778888ull},
		    NULL, ts++);
	/* 6: RC ATOMIC_ACKNOWLEDGE */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x12, .dqpn = 0x000456, .psn = 0x30,
					 .aeth_syndrome = 0x1f, .aeth_msn = 6,
					 .atmack_orig = 0x0123456789abcdefull},
		    NULL, ts++);
	/* 7: UD SEND_ONLY_WITH_IMMEDIATE: DETH then ImmDt, 64 bytes */
	struct swv_pkt ud = {.opcode = 0x65, .se = true, .dqpn = 0x000789, .psn = 0x40,
			     .deth_qkey = 0x11111111, .deth_sqpn = 0x000abc, .paylen = 64};
	memcpy(&ud.imm, imm, 4);
	pcap_packet(f, &ud, data, ts++);
	/* 8: RC RDMA_READ_RESPONSE_ONLY, AETH, 7 bytes + 1 pad */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x10, .dqpn = 0x000456, .psn = 0x20,
					 .aeth_syndrome = 0x1f, .aeth_msn = 7, .paylen = 7},
		    data, ts++);
	/* 9: RC FETCH_ADD */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x14, .ackreq = true, .dqpn = 0x000123,
					 .psn = 0x31, .atm_va = 0x10008, .atm_rkey = 0x5678,
					 .atm_swap_add = 1},
		    NULL, ts++);
	/* 10: RC NAK (PSN sequence error) */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x11, .dqpn = 0x000456, .psn = 0x32,
					 .aeth_syndrome = 0x60, .aeth_msn = 8},
		    NULL, ts++);
	/* 11: RC SEND_ONLY_WITH_INVALIDATE */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x17, .dqpn = 0x000123, .psn = 0x33,
					 .ieth_rkey = 0xcafe, .paylen = 4},
		    data, ts++);
	/* 12: UC RDMA_WRITE_ONLY_WITH_IMMEDIATE */
	struct swv_pkt uc = {.opcode = 0x2b, .dqpn = 0x000321, .psn = 0xffffff,
			     .reth_va = 0x3000, .reth_rkey = 0x42, .reth_len = 2, .paylen = 2};
	memcpy(&uc.imm, imm, 4);
	pcap_packet(f, &uc, data, ts++);
	/* 13: UD SEND_ONLY: DETH only, 4096 bytes */
	pcap_packet(f, &(struct swv_pkt){.opcode = 0x64, .dqpn = 0x000789, .psn = 0x41,
					 .deth_qkey = 0x22222222, .deth_sqpn = 0x000abd, .paylen = 4096},
		    data, ts++);
	CHECK(fclose(f) == 0);
	return 0;
}

/* PSN arithmetic modulo 2^24: order (sign) and signed distance, across the wrap. */
/* SWV_DETH_MGID: the first 16 payload bytes are the MGID, taken off the payload; a
 * datagram with the bit and fewer than 16 payload bytes is malformed. */
static void test_mgid(void)
{
	for (uint32_t len = 0; len <= 40; len++) {
		struct swv_pkt p, q;
		random_fields(&p, SWV_OP_UD | SWV_OP_SEND_ONLY, len);
		p.deth_rsvd = SWV_DETH_MGID | SWV_DETH_GRH | 5;
		size_t n = build(pkt, &p, payload_src);
		CHECK(n > 0);
		if (len < SWV_MGID_LEN) {
			CHECK_EQ(swv_pkt_parse(pkt, n, &q), EINVAL);
			continue;
		}
		CHECK_OK(swv_pkt_parse(pkt, n, &q));
		CHECK(q.mgid == pkt + SWV_BTH_LEN + 8);
		CHECK(memcmp(q.mgid, payload_src, SWV_MGID_LEN) == 0);
		CHECK(q.payload == q.mgid + SWV_MGID_LEN);
		CHECK_EQ(q.paylen, len - SWV_MGID_LEN);
		CHECK_EQ(q.deth_rsvd, SWV_DETH_MGID | SWV_DETH_GRH | 5);
	}
	/* Without the bit: no MGID, the whole payload. */
	struct swv_pkt p, q;
	random_fields(&p, SWV_OP_UD | SWV_OP_SEND_ONLY, 20);
	size_t n = build(pkt, &p, payload_src);
	CHECK_OK(swv_pkt_parse(pkt, n, &q));
	CHECK(q.mgid == NULL);
	CHECK_EQ(q.paylen, 20);
}

/* Selective ACK (docs/wire.md): an ACKNOWLEDGE with SWV_BTH_SACK carries a 4..64-byte
 * map after the AETH, taken off the payload by the parser and covered by the CRC; the
 * bit alone on a request is a flag; a body on an ACK without it, or a map of a wrong
 * length, is malformed. */
static void test_sack(void)
{
	uint8_t op[2] = {SWV_OP_RC | SWV_OP_ACK, SWV_OP_XRC | SWV_OP_ACK};
	for (int o = 0; o < 2; o++) {
		for (uint32_t len = 0; len <= SWV_SACK_MAX_LEN + 8; len++) {
			struct swv_pkt p, q;
			random_fields(&p, op[o], 0);
			p.sack = true;
			p.aeth_syndrome = 0x60;
			p.paylen = len;
			size_t n = build(pkt, &p, payload_src);
			bool ok = len >= 4 && len <= SWV_SACK_MAX_LEN && len % 4 == 0;
			CHECK_EQ(n > 0, ok);
			if (!ok)
				continue;
			CHECK_EQ(n, (size_t)SWV_BTH_LEN + SWV_AETH_LEN + len + SWV_CRC_LEN);
			CHECK_EQ(pkt[8] & SWV_BTH_SACK, SWV_BTH_SACK);
			CHECK_OK(swv_pkt_parse(pkt, n, &q));
			CHECK(q.sack);
			CHECK(q.sack_map == pkt + SWV_BTH_LEN + SWV_AETH_LEN);
			CHECK_EQ(q.sack_len, len);
			CHECK(memcmp(q.sack_map, payload_src, len) == 0);
			CHECK_EQ(q.paylen, 0);
			CHECK_EQ(q.aeth_syndrome, 0x60);
			CHECK_EQ(q.psn, p.psn);
			/* the CRC covers the map */
			pkt[n - SWV_CRC_LEN - 1] ^= 1;
			CHECK_EQ(swv_pkt_parse(pkt, n, &q), EBADMSG);
		}
	}
	struct swv_pkt p, q;
	/* authenticated mode: the MAC covers the map and the bit */
	struct swv_sip_key key = {.k0 = 0x0706050403020100ull, .k1 = 0x0f0e0d0c0b0a0908ull};
	random_fields(&p, SWV_OP_RC | SWV_OP_ACK, 0);
	p.sack = true;
	p.paylen = 12;
	size_t h = swv_pkt_build_hdr(pkt, &p);
	CHECK(h > 0);
	memcpy(pkt + h, payload_src, 12);
	size_t t = swv_pkt_build_tail_mac(&key, pkt, h, payload_src, 12, pkt + h + 12);
	CHECK_EQ(t, SWV_CRC_LEN);
	size_t m = h + 12 + t;
	CHECK(swv_pkt_mac_ok(&key, pkt, m));
	CHECK_OK(swv_pkt_parse_ex(pkt, m, true, &q));
	CHECK_EQ(q.sack_len, 12);
	pkt[h + 5] ^= 0x10; /* a hole made to look held */
	CHECK(!swv_pkt_mac_ok(&key, pkt, m));
	pkt[h + 5] ^= 0x10;
	pkt[8] ^= SWV_BTH_SACK;
	CHECK(!swv_pkt_mac_ok(&key, pkt, m));
	/* no map: the bit is needed for a body, and a body for the bit */
	random_fields(&p, SWV_OP_RC | SWV_OP_ACK, 0);
	p.paylen = 8;
	CHECK_EQ(swv_pkt_build_hdr(pkt, &p), 0);
	p.sack = true;
	size_t n = build(pkt, &p, payload_src);
	CHECK(n > 0);
	pkt[8] &= (uint8_t)~SWV_BTH_SACK;
	reseal(pkt, n);
	CHECK_EQ(swv_pkt_parse(pkt, n, &q), EINVAL);
	random_fields(&p, SWV_OP_RC | SWV_OP_ACK, 0);
	n = build(pkt, &p, payload_src);
	pkt[8] |= SWV_BTH_SACK;
	reseal(pkt, n);
	CHECK_EQ(swv_pkt_parse(pkt, n, &q), EINVAL);
	/* an ATOMIC_ACKNOWLEDGE never carries a map */
	random_fields(&p, SWV_OP_RC | SWV_OP_ATOMIC_ACK, 0);
	p.sack = true;
	p.paylen = 4;
	CHECK_EQ(swv_pkt_build_hdr(pkt, &p), 0);
	/* on a request the bit is a flag, the payload is the payload */
	random_fields(&p, SWV_OP_RC | SWV_OP_WRITE_ONLY, 37);
	p.sack = true;
	n = build(pkt, &p, payload_src);
	CHECK(n > 0);
	CHECK_OK(swv_pkt_parse(pkt, n, &q));
	CHECK(q.sack);
	CHECK(q.sack_map == NULL);
	CHECK_EQ(q.paylen, 37);
	CHECK(memcmp(q.payload, payload_src, 37) == 0);
	/* and it is not the placed bit */
	CHECK(!q.placed);
	random_fields(&p, SWV_OP_RC | SWV_OP_WRITE_ONLY, 37);
	p.sack = false;
	n = build(pkt, &p, payload_src);
	CHECK_OK(swv_pkt_parse(pkt, n, &q));
	CHECK(!q.sack);
}

static void test_psn_math(void)
{
	CHECK_EQ(swv_psn_add(0xffffff, 1), 0);
	CHECK_EQ(swv_psn_add(0xfffffe, 5), 3);
	CHECK(swv_psn_cmp(0, 0xffffff) > 0);
	CHECK(swv_psn_cmp(0xffffff, 0) < 0);
	CHECK_EQ(swv_psn_cmp(7, 7), 0);
	CHECK_EQ(swv_psn_diff(0, 0xffffff), 1);
	CHECK_EQ(swv_psn_diff(0xffffff, 0), -1);
	CHECK_EQ(swv_psn_diff(3, 0xfffffe), 5);
	CHECK_EQ(swv_psn_diff(0x7fffff, 0), 0x7fffff);
	CHECK_EQ(swv_psn_diff(0x800000, 0), -0x800000);
	CHECK_EQ(swv_psn_diff(100, 100), 0);
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--pcap") == 0)
		return write_pcap(argv[2]);
	if (argc != 1) {
		fprintf(stderr, "usage: %s [--pcap FILE]\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < sizeof(payload_src); i++)
		payload_src[i] = (uint8_t)rnd();
	test_hand_written();
	test_round_trip();
	test_corruption();
	test_malformed();
	test_build_validation();
	test_mgid();
	test_sack();
	test_psn_math();
	printf("test_packet: OK\n");
	return 0;
}
