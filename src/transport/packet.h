/*
 * Packet layout (roce-wire.md): BTH | ext headers | payload | pad | CRC32 (LSB first).
 * Owner: transport/wire. See docs/wire.md.
 *
 * swverbs deviation from RoCEv2: a UDP socket cannot see the IP header, so the trailing
 * CRC covers the transport headers, payload and pad only (BTH byte 4 masked to 0xff, as
 * the ICRC does), not a pseudo-LRH/IP/UDP header. Packets still dissect in Wireshark.
 */
#ifndef SWV_TRANSPORT_PACKET_H
#define SWV_TRANSPORT_PACKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SWV_BTH_LEN      12
#define SWV_CRC_LEN      4
#define SWV_MAX_HDR_LEN  (SWV_BTH_LEN + 28 + 4)
#define SWV_MAX_TAIL_LEN (3 + SWV_CRC_LEN) /* pad + CRC */
#define SWV_PSN_MASK     0xffffffu
#define SWV_QPN_MASK     0xffffffu
#define SWV_PKEY_DEFAULT 0xffff
#define SWV_BTH_PLACED	 0x40	/* BTH byte 8: swv_pkt.placed */
#define SWV_BTH_SACK	 0x20	/* BTH byte 8: swv_pkt.sack (docs/wire.md, "Selective ACK") */
/* An ACKNOWLEDGE with SWV_BTH_SACK carries a map of this many bytes at most (512 PSNs
 * past the NAK PSN: the reorder buffer's span), at least 4, a multiple of 4. */
#define SWV_SACK_MAX_LEN 64
#define SWV_PKEY_FULL	 0x8000 /* membership bit: full member (0 = limited) */

/* IB partition rule (rxe's pkey_match): the low 15 bits (the partition) are equal
 * and not 0 (0x0000/0x8000 are the invalid P_Key), and at least one of the two is a
 * full member: two limited members may not talk to each other. */
static inline bool swv_pkey_match(uint16_t a, uint16_t b)
{
	return (a & 0x7fff) && (a & 0x7fff) == (b & 0x7fff) && ((a | b) & SWV_PKEY_FULL);
}

/* DETH byte 4 is reserved in IB (sent 0, ignored on receive). A UDP datagram has no LRH
 * to say whether a GRH follows or which SL the sender used, so a swverbs UD sender puts
 * that here: SWV_DETH_GRH when its address vector had a GRH (is_global), and its SL in
 * the low 4 bits. An IB-style receiver reports them (IBV_WC_GRH, wc.sl); see docs/wire.md. */
#define SWV_DETH_GRH     0x80
#define SWV_DETH_SL_MASK 0x0f
/* A datagram to a multicast group: the IPv4 group address keeps only part of the MGID
 * (net/addr.h), so the sender sets this bit and the first SWV_MGID_LEN payload bytes are
 * the MGID, the GRH DGID hardware would match against the groups a QP is attached to.
 * The parser takes them off the payload into swv_pkt.mgid. */
#define SWV_DETH_MGID 0x40
#define SWV_MGID_LEN  16

/* Parsed view of one packet. Multi-byte fields in host order except imm (kept in
 * network order, exactly as ibv_send_wr.imm_data / ibv_wc.imm_data carry it).
 * Only the fields of the headers present (flags & SWV_HDR_*) are meaningful; the parser
 * zeroes the others. */
struct swv_pkt {
	uint8_t opcode;
	bool se, migreq, ackreq;
	/* BTH byte 8 bit 6 (reserved in IB; the UDP path never sets it): the payload of
	 * this WRITE was placed by the sender itself over the intra-host link (docs/wire.md);
	 * the packet carries none, and the responder checks and completes it as usual
	 * without copying. */
	bool placed;
	/* BTH byte 8 bit 5 (reserved in IB, ignored by rxe), swverbs' selective ACK
	 * (docs/wire.md): on an RC request, "this requester reads SACK maps"; on an
	 * ACKNOWLEDGE, "a SACK map follows the AETH" -- sack_map[0..sack_len), bit i (byte
	 * i / 8, bit i % 8, LSB first) set when the responder holds PSN psn + 1 + i. The
	 * parser takes the map off the payload (paylen 0); a sender gives it as the
	 * payload. On other opcodes the bit means nothing and is kept as read. */
	bool sack;
	const uint8_t *sack_map;
	uint8_t sack_len;
	uint8_t padcnt;
	uint16_t pkey;
	uint32_t dqpn, psn;
	uint32_t flags; /* swv_opcode_table[opcode].flags */

	uint64_t reth_va;
	uint32_t reth_rkey, reth_len;
	uint8_t aeth_syndrome;
	uint32_t aeth_msn;
	uint64_t atm_va;
	uint32_t atm_rkey;
	uint64_t atm_swap_add, atm_cmp;
	uint64_t atmack_orig;
	uint32_t deth_qkey, deth_sqpn;
	uint8_t deth_rsvd; /* DETH byte 4: reserved in IB; swverbs uses it, see SWV_DETH_* */
	uint32_t imm;  /* network order */
	uint32_t ieth_rkey;
	uint32_t xrc_srqn; /* XRCETH (XRC requests) */
	uint32_t feth;	   /* placement type | selectivity << SWV_FETH_SEL_SHIFT */
	const uint8_t *mgid; /* SWV_DETH_MGID: the datagram's MGID (points into buf), else NULL */

	const uint8_t *payload;
	uint32_t paylen; /* excludes pad */

	/* Parse: the whole datagram, for the QP's MAC check in authenticated mode. */
	const uint8_t *wire;
	uint32_t wire_len;
};

/* Validate and parse a received datagram. Checks, in order: length >= BTH + CRC, the
 * CRC (EBADMSG on mismatch: the datagram was corrupted), then length a multiple of 4,
 * TVer 0, opcode supported, length >= the opcode's headers + CRC, no payload/pad on an
 * opcode that cannot carry one, pad count consistent with the payload, pad bytes zero
 * (EINVAL for any of these: well-formed bytes but not a valid packet). Returns 0 or a
 * positive errno; *out is written only on success. The parsed payload points into buf.
 * Not checked here (the QP's job): transport prefix vs QP type, P_Key, PSN, Q_Key,
 * payload size vs PMTU, AETH syndrome meaning. */
int swv_pkt_parse(const uint8_t *buf, size_t len, struct swv_pkt *out);

/* As swv_pkt_parse, but with no_crc set the trailer is not checked, everything else
 * is: a device in authenticated mode (docs/wire.md), where the trailer is a MAC only
 * the QP can check (swv_pkt_mac_ok with the key of the pair), and a packet of the
 * intra-host link, which carries no ICRC (docs/design.md, "No ICRC on the ring"). */
int swv_pkt_parse_ex(const uint8_t *buf, size_t len, bool no_crc, struct swv_pkt *out);

/* Write BTH + the opcode's extension headers from *p into hdr (>= SWV_MAX_HDR_LEN).
 * padcnt is computed from p->paylen (p->padcnt and p->flags are ignored); TVer and BTH
 * byte 4 are written as 0; pkey 0 (invalid in IB) is sent as SWV_PKEY_DEFAULT.
 * Returns the header length, or 0 if the input is invalid: NULL pointers, unsupported
 * opcode, paylen > 0 on an opcode without payload, or a 24-bit field (dqpn, psn,
 * deth_sqpn, xrc_srqn, aeth_msn) out of range. */
size_t swv_pkt_build_hdr(uint8_t *hdr, const struct swv_pkt *p);

/* Compute the trailer for hdr|payload|pad (pad bytes are zero and implied by
 * padcnt) and store pad + CRC into tail (room for 3 + 4 bytes). Returns the number of
 * tail bytes to append (pad + 4), or 0 if the input is invalid (NULL pointers, hdr_len
 * not the opcode's header length, PadCnt in hdr not matching paylen). */
size_t swv_pkt_build_tail(const uint8_t *hdr, size_t hdr_len, const void *payload,
			  uint32_t paylen, uint8_t *tail);

/* As swv_pkt_build_tail, with the same checks and length, but the CRC is left zero: a
 * packet for the intra-host link, whose receiver does not check it. */
size_t swv_pkt_build_tail_unsealed(const uint8_t *hdr, size_t hdr_len, uint32_t paylen,
				   uint8_t *tail);

struct swv_sip_key;
/* Authenticated mode: as swv_pkt_build_tail, but the 32-bit trailer is the low half
 * of SipHash-2-4 under key over what the CRC covers (BTH byte 4 masked), stored
 * least-significant byte first. key NULL: the CRC, exactly swv_pkt_build_tail. */
size_t swv_pkt_build_tail_mac(const struct swv_sip_key *key, const uint8_t *hdr, size_t hdr_len,
			      const void *payload, uint32_t paylen, uint8_t *tail);
/* Whether the datagram buf[0..len) (len >= BTH + trailer) ends in the MAC under key. */
bool swv_pkt_mac_ok(const struct swv_sip_key *key, const uint8_t *buf, size_t len);

/*
 * Scatter-gather form of swv_pkt_build_tail, for a payload gathered from several SGEs
 * without copying it:
 *     uint32_t crc;
 *     if (swv_pkt_crc_begin(hdr, hdr_len, paylen, &crc)) -> invalid header
 *     for each segment: crc = swv_crc32(crc, seg, seg_len);   (segments sum to paylen)
 *     tail_len = swv_pkt_crc_finish(crc, paylen, tail);
 * swv_pkt_crc_begin validates like swv_pkt_build_tail and returns 0 or EINVAL;
 * swv_pkt_crc_finish absorbs the zero pad, writes pad + CRC into tail and returns
 * their length (0 if tail is NULL).
 */
int swv_pkt_crc_begin(const uint8_t *hdr, size_t hdr_len, uint32_t paylen, uint32_t *crc);
size_t swv_pkt_crc_finish(uint32_t crc, uint32_t paylen, uint8_t *tail);

/* Datagram length of a packet with this opcode and payload (headers + payload + pad +
 * CRC), or 0 for an unsupported opcode. */
size_t swv_pkt_wire_len(uint8_t opcode, uint32_t paylen);

static inline int32_t swv_psn_cmp(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 8);
}
/* Signed distance from PSN b to PSN a, modulo 2^24 (swv_psn_cmp only gives its sign). */
static inline int32_t swv_psn_diff(uint32_t a, uint32_t b)
{
	return swv_psn_cmp(a, b) >> 8;
}
static inline uint32_t swv_psn_add(uint32_t a, uint32_t n)
{
	return (a + n) & SWV_PSN_MASK;
}

#endif
