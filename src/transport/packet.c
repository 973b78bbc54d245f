/*
 * Build and parse swverbs packets: BTH | extension headers | payload | pad | CRC.
 *
 * All header fields are big-endian on the wire (roce-wire.md 2), read and written
 * byte by byte so neither alignment nor host byte order matters. The trailing CRC is
 * the RoCEv2 ICRC restricted to what a UDP socket sees (see packet.h), stored
 * least-significant byte first as rxe stores the ICRC.
 *
 * The parser trusts nothing: every length is checked against the datagram before a
 * byte is read, and headers are decoded only for opcodes whose table entry lists them.
 */
#include "transport/packet.h"

#include <errno.h>
#include <string.h>

#include "transport/auth.h"
#include "transport/crc.h"
#include "transport/opcode.h"

#define BTH_BYTE4_MASK 0xff /* FECN, BECN, reserved: may change in flight, not covered */

static inline void put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}
static inline void put_be24(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 16);
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)v;
}
static inline void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	put_be24(p + 1, v);
}
static inline void put_be64(uint8_t *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}
static inline uint16_t get_be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}
static inline uint32_t get_be24(const uint8_t *p)
{
	return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}
static inline uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | get_be24(p + 1);
}
static inline uint64_t get_be64(const uint8_t *p)
{
	return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

static inline uint8_t pad_for(uint32_t paylen)
{
	return (uint8_t)((0u - paylen) & 3u);
}

static void put_trailer(uint8_t *t, uint32_t v)
{
	t[0] = (uint8_t)v;
	t[1] = (uint8_t)(v >> 8);
	t[2] = (uint8_t)(v >> 16);
	t[3] = (uint8_t)(v >> 24);
}

static uint32_t get_trailer(const uint8_t *t)
{
	return (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
}

/* CRC over the headers with BTH byte 4 replaced by 0xff, as the ICRC masks it. */
static uint32_t crc_masked_hdr(const uint8_t *hdr, size_t hdr_len)
{
	uint8_t bth[SWV_BTH_LEN];

	memcpy(bth, hdr, SWV_BTH_LEN);
	bth[4] = BTH_BYTE4_MASK;
	uint32_t crc = swv_crc32(0, bth, SWV_BTH_LEN);
	return swv_crc32(crc, hdr + SWV_BTH_LEN, hdr_len - SWV_BTH_LEN);
}

static const uint8_t zero_pad[3];

/* The opcodes that carry a SACK map when SWV_BTH_SACK is set: ACKNOWLEDGE (RC, XRC). */
static bool sack_carrier(uint32_t flags)
{
	return (flags & SWV_OPF_ACK) && !(flags & SWV_HDR_ATMACK);
}

static bool sack_len_ok(size_t len)
{
	return len >= 4 && len <= SWV_SACK_MAX_LEN && !(len & 3);
}

/* Whether paylen bytes may follow the headers of an opcode with these flags: a payload,
 * or an ACKNOWLEDGE's SACK map (sack: the bit is set; a map needs it). */
static bool body_ok(uint32_t flags, bool sack, uint32_t paylen)
{
	if (sack_carrier(flags) && sack)
		return sack_len_ok(paylen);
	return !paylen || (flags & SWV_OPF_PAYLOAD);
}

size_t swv_pkt_wire_len(uint8_t opcode, uint32_t paylen)
{
	const struct swv_opcode_info *oi = swv_opcode(opcode);

	if (!oi->name || (paylen && !(oi->flags & SWV_OPF_PAYLOAD)))
		return 0; /* requests and responses with payload; not an ACK's SACK map */
	return (size_t)oi->hdr_len + paylen + pad_for(paylen) + SWV_CRC_LEN;
}

size_t swv_pkt_build_hdr(uint8_t *hdr, const struct swv_pkt *p)
{
	if (!hdr || !p)
		return 0;
	const struct swv_opcode_info *oi = swv_opcode(p->opcode);
	uint32_t f = oi->flags;
	if (!oi->name || !body_ok(f, p->sack, p->paylen))
		return 0;
	/* 24-bit fields: refuse rather than silently truncate a caller's bug. */
	if (p->dqpn > SWV_QPN_MASK || p->psn > SWV_PSN_MASK)
		return 0;
	if ((f & SWV_HDR_DETH) && p->deth_sqpn > SWV_QPN_MASK)
		return 0;
	if ((f & SWV_HDR_XRCETH) && p->xrc_srqn > SWV_QPN_MASK)
		return 0;
	if ((f & SWV_HDR_AETH) && p->aeth_msn > 0xffffffu)
		return 0;

	hdr[0] = p->opcode;
	hdr[1] = (uint8_t)((p->se ? 0x80 : 0) | (p->migreq ? 0x40 : 0) | pad_for(p->paylen) << 4);
	put_be16(hdr + 2, p->pkey ? p->pkey : SWV_PKEY_DEFAULT);
	hdr[4] = 0;
	put_be24(hdr + 5, p->dqpn);
	hdr[8] = (p->ackreq ? 0x80 : 0) | (p->placed ? SWV_BTH_PLACED : 0) |
		 (p->sack ? SWV_BTH_SACK : 0);
	put_be24(hdr + 9, p->psn);

	/* Extension headers in wire order: XRCETH or DETH, FETH, RETH, AETH, AtomicAckETH,
	 * AtomicETH, ImmDt, IETH (no opcode carries two that would conflict). XRCETH: a
	 * reserved byte, then the 24-bit XRC SRQ number. */
	uint8_t *q = hdr + SWV_BTH_LEN;
	if (f & SWV_HDR_XRCETH) {
		put_be32(q, p->xrc_srqn);
		q += SWV_XRCETH_LEN;
	}
	if (f & SWV_HDR_DETH) {
		put_be32(q, p->deth_qkey);
		q[4] = p->deth_rsvd;
		put_be24(q + 5, p->deth_sqpn);
		q += SWV_DETH_LEN;
	}
	if (f & SWV_HDR_FETH) {
		put_be32(q, p->feth);
		q += SWV_FETH_LEN;
	}
	if (f & SWV_HDR_RETH) {
		put_be64(q, p->reth_va);
		put_be32(q + 8, p->reth_rkey);
		put_be32(q + 12, p->reth_len);
		q += SWV_RETH_LEN;
	}
	if (f & SWV_HDR_AETH) {
		q[0] = p->aeth_syndrome;
		put_be24(q + 1, p->aeth_msn);
		q += SWV_AETH_LEN;
	}
	if (f & SWV_HDR_ATMACK) {
		put_be64(q, p->atmack_orig);
		q += SWV_ATMACK_LEN;
	}
	if (f & SWV_HDR_ATMETH) {
		put_be64(q, p->atm_va);
		put_be32(q + 8, p->atm_rkey);
		put_be64(q + 12, p->atm_swap_add);
		put_be64(q + 20, p->atm_cmp);
		q += SWV_ATMETH_LEN;
	}
	if (f & SWV_HDR_IMM) {
		memcpy(q, &p->imm, SWV_IMM_LEN); /* already network order */
		q += SWV_IMM_LEN;
	}
	if (f & SWV_HDR_IETH) {
		put_be32(q, p->ieth_rkey);
		q += SWV_IETH_LEN;
	}
	return (size_t)(q - hdr); /* == oi->hdr_len (checked by test_packet) */
}

/* Whether a trailer may be built for hdr and a payload of paylen bytes. */
static bool tail_ok(const uint8_t *hdr, size_t hdr_len, uint32_t paylen)
{
	if (!hdr || hdr_len < SWV_BTH_LEN)
		return false;
	const struct swv_opcode_info *oi = swv_opcode(hdr[0]);
	return oi->name && hdr_len == oi->hdr_len &&
	       body_ok(oi->flags, hdr[8] & SWV_BTH_SACK, paylen) &&
	       ((hdr[1] >> 4) & 3) == pad_for(paylen);
}

int swv_pkt_crc_begin(const uint8_t *hdr, size_t hdr_len, uint32_t paylen, uint32_t *crc)
{
	if (!crc || !tail_ok(hdr, hdr_len, paylen))
		return EINVAL;
	*crc = crc_masked_hdr(hdr, hdr_len);
	return 0;
}

size_t swv_pkt_crc_finish(uint32_t crc, uint32_t paylen, uint8_t *tail)
{
	if (!tail)
		return 0;
	uint8_t pad = pad_for(paylen);

	crc = swv_crc32(crc, zero_pad, pad);
	memset(tail, 0, pad);
	/* Least-significant byte first, like rxe's ICRC. */
	put_trailer(tail + pad, crc);
	return (size_t)pad + SWV_CRC_LEN;
}

size_t swv_pkt_build_tail(const uint8_t *hdr, size_t hdr_len, const void *payload,
			  uint32_t paylen, uint8_t *tail)
{
	uint32_t crc;

	if (!tail || (paylen && !payload))
		return 0;
	if (swv_pkt_crc_begin(hdr, hdr_len, paylen, &crc))
		return 0;
	crc = swv_crc32(crc, payload, paylen);
	return swv_pkt_crc_finish(crc, paylen, tail);
}

size_t swv_pkt_build_tail_unsealed(const uint8_t *hdr, size_t hdr_len, uint32_t paylen,
				   uint8_t *tail)
{
	if (!tail || !tail_ok(hdr, hdr_len, paylen))
		return 0;
	uint8_t pad = pad_for(paylen);
	memset(tail, 0, (size_t)pad + SWV_CRC_LEN);
	return (size_t)pad + SWV_CRC_LEN;
}

/* SipHash state after the headers, BTH byte 4 masked as for the CRC. */
static void mac_hdr(struct swv_siphash *s, const struct swv_sip_key *key, const uint8_t *hdr,
		    size_t hdr_len)
{
	uint8_t bth[SWV_BTH_LEN];

	memcpy(bth, hdr, SWV_BTH_LEN);
	bth[4] = BTH_BYTE4_MASK;
	swv_siphash_init(s, key);
	swv_siphash_update(s, bth, SWV_BTH_LEN);
	swv_siphash_update(s, hdr + SWV_BTH_LEN, hdr_len - SWV_BTH_LEN);
}

size_t swv_pkt_build_tail_mac(const struct swv_sip_key *key, const uint8_t *hdr, size_t hdr_len,
			      const void *payload, uint32_t paylen, uint8_t *tail)
{
	uint32_t crc;
	struct swv_siphash s;

	if (!key)
		return swv_pkt_build_tail(hdr, hdr_len, payload, paylen, tail);
	if (!tail || (paylen && !payload))
		return 0;
	if (swv_pkt_crc_begin(hdr, hdr_len, paylen, &crc)) /* validation only */
		return 0;
	uint8_t pad = pad_for(paylen);
	mac_hdr(&s, key, hdr, hdr_len);
	swv_siphash_update(&s, payload, paylen);
	swv_siphash_update(&s, zero_pad, pad);
	memset(tail, 0, pad);
	put_trailer(tail + pad, (uint32_t)swv_siphash_final(&s));
	return (size_t)pad + SWV_CRC_LEN;
}

bool swv_pkt_mac_ok(const struct swv_sip_key *key, const uint8_t *buf, size_t len)
{
	struct swv_siphash s;

	if (!key || !buf || len < SWV_BTH_LEN + SWV_CRC_LEN)
		return false;
	mac_hdr(&s, key, buf, SWV_BTH_LEN);
	swv_siphash_update(&s, buf + SWV_BTH_LEN, len - SWV_BTH_LEN - SWV_CRC_LEN);
	uint32_t tag = (uint32_t)swv_siphash_final(&s);
	return tag == get_trailer(buf + len - SWV_CRC_LEN);
}

int swv_pkt_parse(const uint8_t *buf, size_t len, struct swv_pkt *out)
{
	return swv_pkt_parse_ex(buf, len, false, out);
}

int swv_pkt_parse_ex(const uint8_t *buf, size_t len, bool no_crc, struct swv_pkt *out)
{
	if (!buf || !out || len < SWV_BTH_LEN + SWV_CRC_LEN)
		return EINVAL;

	/* Integrity first: a corrupted datagram is reported as such (EBADMSG) whatever
	 * the corruption made its headers look like. A MAC is the QP's to check. */
	if (!no_crc) {
		uint32_t stored = get_trailer(buf + len - SWV_CRC_LEN);
		uint32_t crc = crc_masked_hdr(buf, SWV_BTH_LEN);
		crc = swv_crc32(crc, buf + SWV_BTH_LEN, len - SWV_BTH_LEN - SWV_CRC_LEN);
		if (crc != stored)
			return EBADMSG;
	}

	/* Headers and payload+pad are whole 32-bit words. */
	if (len & 3)
		return EINVAL;
	/* Opcode and flags byte read once: a packet of the intra-host link lies in memory
	 * another process can still write (link/shm.h), and every length below must follow
	 * from the opcode the packet is then taken to have. */
	const uint8_t op = __atomic_load_n(&buf[0], __ATOMIC_RELAXED);
	const uint8_t b1 = __atomic_load_n(&buf[1], __ATOMIC_RELAXED);
	if ((b1 & 0x0f) != 0) /* TVer */
		return EINVAL;
	const struct swv_opcode_info *oi = swv_opcode(op);
	if (!oi->name)
		return EINVAL;
	size_t hdr_len = oi->hdr_len;
	if (len < hdr_len + SWV_CRC_LEN)
		return EINVAL;
	size_t body = len - hdr_len - SWV_CRC_LEN; /* payload + pad, a multiple of 4 */
	uint8_t pad = (b1 >> 4) & 3;
	const uint8_t b8 = __atomic_load_n(&buf[8], __ATOMIC_RELAXED);
	const bool sack_map = sack_carrier(oi->flags) && (b8 & SWV_BTH_SACK);
	if (sack_map ? !sack_len_ok(body) || pad : !(oi->flags & SWV_OPF_PAYLOAD) && body)
		return EINVAL;
	if (pad && body == 0) /* pad without payload */
		return EINVAL;
	for (size_t i = 0; i < pad; i++)
		if (buf[hdr_len + body - pad + i])
			return EINVAL;
	if (body - pad > UINT32_MAX)
		return EINVAL;

	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = op;
	p.se = b1 & 0x80;
	p.migreq = b1 & 0x40;
	p.padcnt = pad;
	p.pkey = get_be16(buf + 2);
	p.dqpn = get_be24(buf + 5);
	p.ackreq = b8 & 0x80;
	p.placed = b8 & SWV_BTH_PLACED;
	p.sack = b8 & SWV_BTH_SACK;
	p.psn = get_be24(buf + 9);
	p.flags = oi->flags;

	const uint8_t *q = buf + SWV_BTH_LEN;
	if (p.flags & SWV_HDR_XRCETH) {
		p.xrc_srqn = get_be24(q + 1); /* byte 0 reserved: ignored */
		q += SWV_XRCETH_LEN;
	}
	if (p.flags & SWV_HDR_DETH) {
		p.deth_qkey = get_be32(q);
		p.deth_rsvd = q[4];
		p.deth_sqpn = get_be24(q + 5);
		q += SWV_DETH_LEN;
	}
	if (p.flags & SWV_HDR_FETH) {
		p.feth = get_be32(q);
		q += SWV_FETH_LEN;
	}
	if (p.flags & SWV_HDR_RETH) {
		p.reth_va = get_be64(q);
		p.reth_rkey = get_be32(q + 8);
		p.reth_len = get_be32(q + 12);
		q += SWV_RETH_LEN;
	}
	if (p.flags & SWV_HDR_AETH) {
		p.aeth_syndrome = q[0];
		p.aeth_msn = get_be24(q + 1);
		q += SWV_AETH_LEN;
	}
	if (p.flags & SWV_HDR_ATMACK) {
		p.atmack_orig = get_be64(q);
		q += SWV_ATMACK_LEN;
	}
	if (p.flags & SWV_HDR_ATMETH) {
		p.atm_va = get_be64(q);
		p.atm_rkey = get_be32(q + 8);
		p.atm_swap_add = get_be64(q + 12);
		p.atm_cmp = get_be64(q + 20);
		q += SWV_ATMETH_LEN;
	}
	if (p.flags & SWV_HDR_IMM) {
		memcpy(&p.imm, q, SWV_IMM_LEN); /* stays in network order */
		q += SWV_IMM_LEN;
	}
	if (p.flags & SWV_HDR_IETH) {
		p.ieth_rkey = get_be32(q);
		q += SWV_IETH_LEN;
	}
	if ((size_t)(q - buf) != hdr_len) /* table and decoder disagree: never trust */
		return EINVAL;
	p.payload = buf + hdr_len;
	p.paylen = (uint32_t)(body - pad);
	if (sack_map) {
		p.sack_map = p.payload;
		p.sack_len = (uint8_t)body;
		p.payload += body;
		p.paylen = 0;
	}
	if ((p.flags & SWV_HDR_DETH) && (p.deth_rsvd & SWV_DETH_MGID)) {
		if (p.paylen < SWV_MGID_LEN)
			return EINVAL;
		p.mgid = p.payload;
		p.payload += SWV_MGID_LEN;
		p.paylen -= SWV_MGID_LEN;
	}
	p.wire = buf;
	p.wire_len = (uint32_t)len;
	*out = p;
	return 0;
}
