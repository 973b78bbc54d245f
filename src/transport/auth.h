/*
 * Authenticated wire mode (docs/wire.md, "Authenticated mode"). Owner: transport/wire.
 *
 * With a 128-bit secret configured on a device (auth_key= / auth_key_file=,
 * docs/configuration.md), the trailing 32-bit check of every packet is not the CRC but
 * a MAC: SipHash-2-4 under a per-direction key, truncated to its low 32 bits, over the
 * bytes the CRC would cover (BTH byte 4 masked). The key of the direction
 * (src IPv4, src QPN) -> (dst IPv4, dst QPN) is derived from the secret, so a tag valid
 * for one QP pair (or one direction of it) is useless on any other.
 *
 * SipHash-2-4 is implemented here from its published specification (Aumasson and
 * Bernstein, "SipHash: a fast short-input PRF", 2012); tests/unit/test_auth.c checks
 * the 64 reference vectors.
 */
#ifndef SWV_TRANSPORT_AUTH_H
#define SWV_TRANSPORT_AUTH_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SWV_AUTH_KEY_LEN 16 /* bytes of secret: a SipHash key */

struct swv_sip_key {
	uint64_t k0, k1; /* the 16 key bytes read as two little-endian words */
};

/* Incremental SipHash-2-4 (any split of the input gives the one-shot result). */
struct swv_siphash {
	uint64_t v0, v1, v2, v3;
	uint64_t tail; /* up to 7 bytes not yet absorbed, little-endian */
	unsigned ntail;
	uint64_t len; /* bytes absorbed in all */
};

void swv_sip_key_from_bytes(struct swv_sip_key *k, const uint8_t bytes[SWV_AUTH_KEY_LEN]);
void swv_siphash_init(struct swv_siphash *s, const struct swv_sip_key *k);
void swv_siphash_update(struct swv_siphash *s, const void *buf, size_t len);
uint64_t swv_siphash_final(struct swv_siphash *s);
uint64_t swv_siphash24(const struct swv_sip_key *k, const void *buf, size_t len);

/* The key of the direction (src_ip, src_qpn) -> (dst_ip, dst_qpn) under secret:
 * two SipHash outputs over a label byte and both identities (a PRF used as a KDF). */
void swv_auth_derive(const struct swv_sip_key *secret, struct in_addr src_ip, uint32_t src_qpn,
		     struct in_addr dst_ip, uint32_t dst_qpn, struct swv_sip_key *out);

/*
 * A QP's authentication state (embedded in struct swv_qp, under qp->lock except
 * rx_bad). 'on' from creation when its device has a secret; RC/UC derive both
 * directions' keys when the peer becomes known (swv_auth_qp_attach at RTR); UD derives
 * the key of each packet from the remote identity it carries (destination AH + QPN on
 * send, source address + DETH source QPN on receive, the receiving QPN being the
 * packet's DestQP).
 */
struct swv_auth_qp {
	bool on;      /* the device has a secret: MACs sent, MACs required */
	bool ready;   /* connected QP: tx/rx keys derived for the current peer */
	bool per_pkt; /* UD: a key per remote identity */
	struct swv_sip_key secret;
	struct in_addr self_ip;
	uint32_t self_qpn;
	struct swv_sip_key tx, rx;
	_Atomic uint64_t rx_bad; /* packets dropped for a missing or wrong MAC */
};

/* At QP creation, before it is published: secret NULL = the device has none (CRC
 * mode); self_ip is the device's address (its sockets' source address). */
void swv_auth_qp_init(struct swv_auth_qp *a, const uint8_t *secret, struct in_addr self_ip,
		      bool ud);
/* When the peer is set (INIT->RTR, or an AV/dest QPN change later), qp->lock held:
 * records the QP's own QPN and, for RC/UC, derives the keys of both directions with
 * the peer (address and QPN). */
void swv_auth_qp_attach(struct swv_auth_qp *a, uint32_t self_qpn, const struct sockaddr_in *peer,
			uint32_t peer_qpn);

/* The key for a packet this QP sends to dst with header hdr (BTH DestQP = the remote
 * QPN), or NULL for a CRC trailer (auth off; or a connected QP not yet attached, whose
 * packets the peer will then drop). UD derives into *scratch. */
const struct swv_sip_key *swv_auth_tx_key(const struct swv_auth_qp *a,
					  const struct sockaddr_in *dst, const uint8_t *hdr,
					  struct swv_sip_key *scratch);

struct swv_pkt;
/* Whether a received packet may be acted on: true when auth is off; otherwise its
 * trailer must be the MAC under the key of the direction it claims (RC/UC: the peer
 * -> this QP; UD: src address and DETH source QPN -> this QP). A packet that fails is
 * counted in rx_bad. qp->lock held. */
bool swv_auth_rx_ok(struct swv_auth_qp *a, const struct swv_pkt *pkt,
		    const struct sockaddr_in *src);

#endif
