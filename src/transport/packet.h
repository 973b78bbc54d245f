/*
 * Packet layout (roce-wire.md): BTH | ext headers | payload | pad | CRC32 (LSB first).
 * Owner: transport/wire.
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
#define SWV_PSN_MASK     0xffffffu
#define SWV_PKEY_DEFAULT 0xffff

/* Parsed view of one packet. Multi-byte fields in host order except imm (kept in
 * network order, exactly as ibv_send_wr.imm_data / ibv_wc.imm_data carry it). */
struct swv_pkt {
	uint8_t opcode;
	bool se, migreq, ackreq;
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
	uint32_t imm;  /* network order */
	uint32_t ieth_rkey;

	const uint8_t *payload;
	uint32_t paylen; /* excludes pad */
};

/* Validate and parse a received datagram: length vs opcode headers, TVer 0, known
 * opcode, pad, CRC. Returns 0, or a positive errno (EBADMSG for a bad CRC, EINVAL for
 * a malformed packet). The parsed payload points into buf. */
int swv_pkt_parse(const uint8_t *buf, size_t len, struct swv_pkt *out);

/* Write BTH + the opcode's extension headers from *p into hdr (>= SWV_MAX_HDR_LEN).
 * padcnt is computed from p->paylen. Returns the header length. */
size_t swv_pkt_build_hdr(uint8_t *hdr, const struct swv_pkt *p);

/* Compute the trailer for hdr|payload|pad (pad bytes are zero and implied by
 * padcnt) and store pad + CRC into tail (room for 3 + 4 bytes). Returns the number of
 * tail bytes to append (pad + 4). */
size_t swv_pkt_build_tail(const uint8_t *hdr, size_t hdr_len, const void *payload,
			  uint32_t paylen, uint8_t *tail);

static inline int32_t swv_psn_cmp(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 8);
}
static inline uint32_t swv_psn_add(uint32_t a, uint32_t n)
{
	return (a + n) & SWV_PSN_MASK;
}

#endif
