/*
 * libFuzzer target: the packet parser, the opcode table and the header/trailer builders.
 *
 * Each input is used three ways:
 *  1. parsed as received (almost always a CRC mismatch, which must be reported as such);
 *  2. parsed again with its last 4 bytes replaced by the right CRC, so that the checks
 *     behind the CRC (length, TVer, opcode, pad, header lengths) see every mutation;
 *  3. read as the fields of a struct swv_pkt and built: what the builder accepts must
 *     parse back to the same fields.
 * A packet that parses must describe itself inside the buffer, agree with the opcode
 * table, and survive build(parse(x)) -> parse unchanged. Any violation aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/crc.h"
#include "transport/opcode.h"
#include "transport/packet.h"

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "fuzz_packet: " __VA_ARGS__);                                      \
		fputc('\n', stderr);                                                               \
		abort();                                                                           \
	} while (0)

/* The CRC a sender would have put at the end of buf[0, len - 4). */
static void fix_crc(uint8_t *buf, size_t len)
{
	uint8_t bth[SWV_BTH_LEN];

	memcpy(bth, buf, SWV_BTH_LEN);
	bth[4] = 0xff; /* masked, as the ICRC masks it (packet.h) */
	uint32_t crc = swv_crc32(0, bth, SWV_BTH_LEN);
	crc = swv_crc32(crc, buf + SWV_BTH_LEN, len - SWV_BTH_LEN - SWV_CRC_LEN);
	uint8_t *c = buf + len - SWV_CRC_LEN;
	c[0] = (uint8_t)crc;
	c[1] = (uint8_t)(crc >> 8);
	c[2] = (uint8_t)(crc >> 16);
	c[3] = (uint8_t)(crc >> 24);
}

/* The header fields the wire carries, i.e. what must survive a rebuild. */
static int same_fields(const struct swv_pkt *a, const struct swv_pkt *b)
{
	uint32_t f = a->flags;
	if (a->opcode != b->opcode || a->flags != b->flags || a->se != b->se ||
	    a->migreq != b->migreq || a->ackreq != b->ackreq || a->padcnt != b->padcnt ||
	    a->dqpn != b->dqpn || a->psn != b->psn || a->paylen != b->paylen ||
	    a->placed != b->placed || a->sack != b->sack)
		return 0;
	/* an ACKNOWLEDGE's SACK map (packet.h) */
	if (!a->sack_map != !b->sack_map || a->sack_len != b->sack_len ||
	    (a->sack_map && memcmp(a->sack_map, b->sack_map, a->sack_len)))
		return 0;
	/* pkey 0 is invalid in IB and sent as the default (packet.h) */
	if ((a->pkey ? a->pkey : SWV_PKEY_DEFAULT) != (b->pkey ? b->pkey : SWV_PKEY_DEFAULT))
		return 0;
	if ((f & SWV_HDR_DETH) && (a->deth_qkey != b->deth_qkey || a->deth_rsvd != b->deth_rsvd ||
				   a->deth_sqpn != b->deth_sqpn))
		return 0;
	if ((f & SWV_HDR_RETH) && (a->reth_va != b->reth_va || a->reth_rkey != b->reth_rkey ||
				   a->reth_len != b->reth_len))
		return 0;
	if ((f & SWV_HDR_AETH) &&
	    (a->aeth_syndrome != b->aeth_syndrome || a->aeth_msn != b->aeth_msn))
		return 0;
	if ((f & SWV_HDR_ATMACK) && a->atmack_orig != b->atmack_orig)
		return 0;
	if ((f & SWV_HDR_ATMETH) &&
	    (a->atm_va != b->atm_va || a->atm_rkey != b->atm_rkey ||
	     a->atm_swap_add != b->atm_swap_add || a->atm_cmp != b->atm_cmp))
		return 0;
	if ((f & SWV_HDR_IMM) && a->imm != b->imm)
		return 0;
	if ((f & SWV_HDR_IETH) && a->ieth_rkey != b->ieth_rkey)
		return 0;
	if ((f & SWV_HDR_FETH) && a->feth != b->feth)
		return 0;
	if ((f & SWV_HDR_XRCETH) && a->xrc_srqn != b->xrc_srqn)
		return 0;
	return a->paylen == 0 || memcmp(a->payload, b->payload, a->paylen) == 0;
}

/* The opcodes whose SWV_BTH_SACK bit means "a SACK map follows" (packet.h): ACKNOWLEDGE. */
static int sack_carrier(uint8_t opcode)
{
	uint32_t f = swv_opcode(opcode)->flags;
	return (f & SWV_OPF_ACK) && !(f & SWV_HDR_ATMACK);
}

/* Build p into a datagram (header | payload | pad | CRC) and parse it back into *out.
 * Returns the datagram length, 0 if the builder refused p. */
static size_t build(const struct swv_pkt *p, uint8_t *dgram, size_t room, struct swv_pkt *out)
{
	uint8_t hdr[SWV_MAX_HDR_LEN], tail[SWV_MAX_TAIL_LEN];
	size_t hl = swv_pkt_build_hdr(hdr, p);
	if (!hl)
		return 0;
	const struct swv_opcode_info *oi = swv_opcode(p->opcode);
	if (!oi->name || hl != oi->hdr_len)
		FAIL("opcode %#x: built header %zu bytes, table says %u", p->opcode, hl,
		     oi->hdr_len);
	size_t tl = swv_pkt_build_tail(hdr, hl, p->payload, p->paylen, tail);
	if (tl < SWV_CRC_LEN || tl > SWV_MAX_TAIL_LEN || (tl - SWV_CRC_LEN + p->paylen) % 4)
		FAIL("opcode %#x paylen %u: tail %zu bytes", p->opcode, p->paylen, tl);
	size_t len = hl + p->paylen + tl;
	if (len > room)
		FAIL("built %zu bytes, room %zu", len, room);
	/* wire_len sizes requests and responses; an ACK's map is not a payload */
	if (!(p->sack && sack_carrier(p->opcode)) && swv_pkt_wire_len(p->opcode, p->paylen) != len)
		FAIL("opcode %#x: wire_len %zu, built %zu", p->opcode,
		     swv_pkt_wire_len(p->opcode, p->paylen), len);
	memcpy(dgram, hdr, hl);
	if (p->paylen)
		memcpy(dgram + hl, p->payload, p->paylen);
	memcpy(dgram + hl + p->paylen, tail, tl);
	int rc = swv_pkt_parse(dgram, len, out);
	if (rc)
		FAIL("opcode %#x: a built packet does not parse (%d)", p->opcode, rc);
	return len;
}

/* A parsed packet must stay inside the buffer and agree with the opcode table. */
static void check_parsed(const uint8_t *buf, size_t len, const struct swv_pkt *p)
{
	const struct swv_opcode_info *oi = swv_opcode(p->opcode);

	if (!oi->name || p->opcode != buf[0] || p->flags != oi->flags)
		FAIL("opcode %#x: parsed as unsupported or with the wrong flags", buf[0]);
	if (len < (size_t)oi->hdr_len + SWV_CRC_LEN || len % 4)
		FAIL("opcode %#x: accepted %zu bytes", p->opcode, len);
	/* a datagram's MGID (packet.h) is the start of a DETH packet's payload */
	size_t mgid = p->mgid ? SWV_MGID_LEN : 0;
	if (p->mgid && (!(oi->flags & SWV_HDR_DETH) || !(p->deth_rsvd & SWV_DETH_MGID) ||
			p->mgid != buf + oi->hdr_len))
		FAIL("an MGID where there is none");
	if (!p->mgid && (oi->flags & SWV_HDR_DETH) && (p->deth_rsvd & SWV_DETH_MGID))
		FAIL("the MGID bit without an MGID");
	/* an ACKNOWLEDGE with the SACK bit has a 4..64-byte map after the AETH and no
	 * payload; no other packet has a map */
	size_t map = p->sack_map ? p->sack_len : 0;
	if (p->sack_map &&
	    (!sack_carrier(p->opcode) || !p->sack || p->sack_map != buf + oi->hdr_len || map < 4 ||
	     map > SWV_SACK_MAX_LEN || map % 4 || p->paylen || p->padcnt))
		FAIL("a SACK map where there is none, or malformed");
	if (!p->sack_map && sack_carrier(p->opcode) && p->sack)
		FAIL("the SACK bit on an ACK without a map");
	if (p->sack != !!(buf[8] & SWV_BTH_SACK) || p->placed != !!(buf[8] & SWV_BTH_PLACED))
		FAIL("BTH byte 8 bits not as parsed");
	if (p->payload != buf + oi->hdr_len + mgid + map)
		FAIL("payload does not start after the headers");
	if ((size_t)oi->hdr_len + mgid + map + p->paylen + p->padcnt + SWV_CRC_LEN != len)
		FAIL("payload %u + pad %u does not fill the datagram", p->paylen, p->padcnt);
	if (p->paylen && !(oi->flags & SWV_OPF_PAYLOAD))
		FAIL("payload on an opcode without one");
	if (p->padcnt > 3 || p->dqpn > SWV_QPN_MASK || p->psn > SWV_PSN_MASK ||
	    p->deth_sqpn > SWV_QPN_MASK || p->aeth_msn > 0xffffff || p->xrc_srqn > SWV_QPN_MASK)
		FAIL("field out of range");
	if (swv_opcode_transport(p->opcode) != SWV_OP_RC &&
	    swv_opcode_transport(p->opcode) != SWV_OP_UC &&
	    swv_opcode_transport(p->opcode) != SWV_OP_UD &&
	    swv_opcode_transport(p->opcode) != SWV_OP_XRC && !(oi->flags & SWV_OPF_FLOWCTL))
		FAIL("opcode %#x of no transport accepted", p->opcode);
}

/* Round trip: rebuild what was parsed; it must parse to the same fields. */
static void round_trip(const struct swv_pkt *p)
{
	static uint8_t dgram[65536 + 64];
	struct swv_pkt q;
	if (p->paylen > 65536)
		return;
	/* the builder takes the MGID as the first payload bytes, as a sender gives it */
	struct swv_pkt b = *p;
	if (p->mgid) {
		b.payload = p->mgid;
		b.paylen += SWV_MGID_LEN;
	}
	if (p->sack_map) { /* and an ACK's SACK map as its payload */
		b.payload = p->sack_map;
		b.paylen = p->sack_len;
	}
	if (!build(&b, dgram, sizeof(dgram), &q))
		FAIL("opcode %#x: the builder refuses a packet the parser accepted", p->opcode);
	if (!same_fields(p, &q) || !p->mgid != !q.mgid ||
	    (p->mgid && memcmp(p->mgid, q.mgid, SWV_MGID_LEN)))
		FAIL("opcode %#x: fields changed in build(parse(x))", p->opcode);
}

static void parse_one(const uint8_t *buf, size_t len, int crc_ok)
{
	struct swv_pkt p;
	memset(&p, 0xa5, sizeof(p)); /* untouched on failure */
	struct swv_pkt before = p;
	int rc = swv_pkt_parse(buf, len, &p);
	if (rc) {
		if (rc != EINVAL && rc != EBADMSG)
			FAIL("unexpected error %d", rc);
		if (crc_ok && rc == EBADMSG)
			FAIL("CRC fixed, yet EBADMSG");
		if (memcmp(&p, &before, sizeof(p)))
			FAIL("*out written on failure");
		return;
	}
	check_parsed(buf, len, &p);
	round_trip(&p);
}

static uint64_t take(const uint8_t **d, size_t *n, unsigned bytes)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < bytes; i++) {
		v <<= 8;
		if (*n) {
			v |= **d;
			(*d)++;
			(*n)--;
		}
	}
	return v;
}

/* The input as builder fields: whatever the builder accepts must parse back. */
static void build_from_fields(const uint8_t *d, size_t n)
{
	static uint8_t dgram[4096 + 64];
	struct swv_pkt p, q;
	memset(&p, 0, sizeof(p));
	p.opcode = (uint8_t)take(&d, &n, 1);
	uint8_t bits = (uint8_t)take(&d, &n, 1);
	p.se = bits & 1;
	p.migreq = bits & 2;
	p.ackreq = bits & 4;
	p.pkey = (uint16_t)take(&d, &n, 2);
	/* a bit above 24 now and then: the builder must refuse, not truncate */
	p.dqpn = (uint32_t)take(&d, &n, 4) & ((bits & 8) ? 0x1ffffffu : 0xffffffu);
	p.psn = (uint32_t)take(&d, &n, 4) & ((bits & 16) ? 0x1ffffffu : 0xffffffu);
	p.deth_qkey = (uint32_t)take(&d, &n, 4);
	p.deth_rsvd = (uint8_t)take(&d, &n, 1);
	p.deth_sqpn = (uint32_t)take(&d, &n, 4) & ((bits & 32) ? 0x1ffffffu : 0xffffffu);
	p.reth_va = take(&d, &n, 8);
	p.reth_rkey = (uint32_t)take(&d, &n, 4);
	p.reth_len = (uint32_t)take(&d, &n, 4);
	p.aeth_syndrome = (uint8_t)take(&d, &n, 1);
	p.aeth_msn = (uint32_t)take(&d, &n, 4) & ((bits & 64) ? 0x1ffffffu : 0xffffffu);
	p.atmack_orig = take(&d, &n, 8);
	p.atm_va = take(&d, &n, 8);
	p.atm_rkey = (uint32_t)take(&d, &n, 4);
	p.atm_swap_add = take(&d, &n, 8);
	p.atm_cmp = take(&d, &n, 8);
	p.imm = (uint32_t)take(&d, &n, 4);
	p.ieth_rkey = (uint32_t)take(&d, &n, 4);
	p.feth = (uint32_t)take(&d, &n, 4);
	p.xrc_srqn = (uint32_t)take(&d, &n, 4) & ((bits & 128) ? 0x1ffffffu : 0xffffffu);
	uint8_t bits2 = (uint8_t)take(&d, &n, 1);
	p.placed = bits2 & 1;
	p.sack = bits2 & 2;
	p.payload = d;
	p.paylen = (uint32_t)(n > 4096 ? 4096 : n);
	/* DETH's MGID bit (packet.h) frames the first SWV_MGID_LEN payload bytes as the
	 * datagram's MGID, which the parser takes off the payload; a sender sets it only
	 * with an MGID there. */
	int mgid = (swv_opcode(p.opcode)->flags & SWV_HDR_DETH) && (p.deth_rsvd & SWV_DETH_MGID);
	if (mgid && p.paylen < SWV_MGID_LEN) {
		p.deth_rsvd &= (uint8_t)~SWV_DETH_MGID;
		mgid = 0;
	}

	/* SWV_BTH_SACK on an ACKNOWLEDGE: the payload given is its SACK map, 4..64 bytes in
	 * whole words (packet.h); the builder refuses any other length, and a body
	 * without the bit */
	int map = swv_opcode_supported(p.opcode) && sack_carrier(p.opcode) && p.sack;
	int body_ok = map ? p.paylen >= 4 && p.paylen <= SWV_SACK_MAX_LEN && p.paylen % 4 == 0
			  : !p.paylen || (swv_opcode(p.opcode)->flags & SWV_OPF_PAYLOAD);

	size_t len = build(&p, dgram, sizeof(dgram), &q);
	int valid =
	    swv_opcode_supported(p.opcode) && body_ok && p.dqpn <= SWV_QPN_MASK &&
	    p.psn <= SWV_PSN_MASK &&
	    (!(swv_opcode(p.opcode)->flags & SWV_HDR_DETH) || p.deth_sqpn <= SWV_QPN_MASK) &&
	    (!(swv_opcode(p.opcode)->flags & SWV_HDR_XRCETH) || p.xrc_srqn <= SWV_QPN_MASK) &&
	    (!(swv_opcode(p.opcode)->flags & SWV_HDR_AETH) || p.aeth_msn <= 0xffffff);
	if (!len != !valid)
		FAIL("opcode %#x: builder %s a packet it should %s", p.opcode,
		     len ? "accepted" : "refused", len ? "refuse" : "accept");
	if (!len)
		return;
	p.flags = swv_opcode(p.opcode)->flags;
	p.padcnt = (uint8_t)((0u - p.paylen) & 3u);
	if (!mgid != !q.mgid || (mgid && memcmp(q.mgid, p.payload, SWV_MGID_LEN)))
		FAIL("opcode %#x: the MGID did not come back", p.opcode);
	if (mgid) {
		p.payload += SWV_MGID_LEN;
		p.paylen -= SWV_MGID_LEN;
	}
	if (map) {
		if (!q.sack_map || q.sack_len != p.paylen ||
		    memcmp(q.sack_map, p.payload, p.paylen))
			FAIL("opcode %#x: the SACK map did not come back", p.opcode);
		p.sack_map = p.payload;
		p.sack_len = (uint8_t)p.paylen;
		p.payload += p.paylen;
		p.paylen = 0;
		p.padcnt = 0;
	}
	if (!same_fields(&p, &q))
		FAIL("opcode %#x: fields changed in parse(build(x))", p.opcode);
	check_parsed(dgram, len, &q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t copy[65536 + 64];

	if (size > sizeof(copy))
		return 0;
	/* Exactly size bytes on the heap: ASan sees any read past the datagram. */
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	parse_one(buf, size, 0);
	if (size >= SWV_BTH_LEN + SWV_CRC_LEN) {
		fix_crc(buf, size);
		parse_one(buf, size, 1);
	}
	free(buf);
	memcpy(copy, data, size);
	build_from_fields(copy, size);

	/* The opcode table: every supported opcode's header length is what its header
	 * bits add up to (a wrong entry would make the parser read past a header). */
	static int table_checked;
	if (!table_checked) {
		table_checked = 1;
		for (unsigned op = 0; op < 256; op++) {
			const struct swv_opcode_info *oi = swv_opcode((uint8_t)op);
			if (!oi->name)
				continue;
			unsigned f = oi->flags, l = SWV_BTH_LEN;
			l += (f & SWV_HDR_DETH) ? SWV_DETH_LEN : 0;
			l += (f & SWV_HDR_RETH) ? SWV_RETH_LEN : 0;
			l += (f & SWV_HDR_AETH) ? SWV_AETH_LEN : 0;
			l += (f & SWV_HDR_ATMACK) ? SWV_ATMACK_LEN : 0;
			l += (f & SWV_HDR_ATMETH) ? SWV_ATMETH_LEN : 0;
			l += (f & SWV_HDR_IMM) ? SWV_IMM_LEN : 0;
			l += (f & SWV_HDR_IETH) ? SWV_IETH_LEN : 0;
			l += (f & SWV_HDR_FETH) ? SWV_FETH_LEN : 0;
			l += (f & SWV_HDR_XRCETH) ? SWV_XRCETH_LEN : 0;
			if (l != oi->hdr_len || l > SWV_MAX_HDR_LEN)
				FAIL("opcode %#x (%s): table hdr_len %u, headers add up to %u", op,
				     oi->name, oi->hdr_len, l);
		}
	}
	return 0;
}
