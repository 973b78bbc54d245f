/*
 * SipHash-2-4 and the per-pair keys of the authenticated wire mode (see auth.h,
 * docs/wire.md "Authenticated mode").
 */
#include "transport/auth.h"

#include <endian.h>
#include <string.h>

#include "transport/opcode.h"
#include "transport/packet.h"

static inline uint64_t rotl64(uint64_t x, unsigned b)
{
	return (x << b) | (x >> (64 - b));
}

static inline uint64_t load_le64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

/* One SipRound (the ARX network of the specification, section 2). */
#define SIPROUND(s)                                                                                \
	do {                                                                                       \
		(s)->v0 += (s)->v1;                                                                \
		(s)->v1 = rotl64((s)->v1, 13);                                                     \
		(s)->v1 ^= (s)->v0;                                                                \
		(s)->v0 = rotl64((s)->v0, 32);                                                     \
		(s)->v2 += (s)->v3;                                                                \
		(s)->v3 = rotl64((s)->v3, 16);                                                     \
		(s)->v3 ^= (s)->v2;                                                                \
		(s)->v0 += (s)->v3;                                                                \
		(s)->v3 = rotl64((s)->v3, 21);                                                     \
		(s)->v3 ^= (s)->v0;                                                                \
		(s)->v2 += (s)->v1;                                                                \
		(s)->v1 = rotl64((s)->v1, 17);                                                     \
		(s)->v1 ^= (s)->v2;                                                                \
		(s)->v2 = rotl64((s)->v2, 32);                                                     \
	} while (0)

/* Compression: c = 2 rounds per 8-byte message word. */
static inline void absorb(struct swv_siphash *s, uint64_t m)
{
	s->v3 ^= m;
	SIPROUND(s);
	SIPROUND(s);
	s->v0 ^= m;
}

void swv_sip_key_from_bytes(struct swv_sip_key *k, const uint8_t bytes[SWV_AUTH_KEY_LEN])
{
	k->k0 = load_le64(bytes);
	k->k1 = load_le64(bytes + 8);
}

void swv_siphash_init(struct swv_siphash *s, const struct swv_sip_key *k)
{
	/* Initialisation constants: "somepseudorandomlygeneratedbytes". */
	s->v0 = k->k0 ^ 0x736f6d6570736575ull;
	s->v1 = k->k1 ^ 0x646f72616e646f6dull;
	s->v2 = k->k0 ^ 0x6c7967656e657261ull;
	s->v3 = k->k1 ^ 0x7465646279746573ull;
	s->tail = 0;
	s->ntail = 0;
	s->len = 0;
}

void swv_siphash_update(struct swv_siphash *s, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	if (!len)
		return;
	s->len += len;
	/* Complete a word left over from the previous call. */
	while (s->ntail && len) {
		s->tail |= (uint64_t)*p++ << (8 * s->ntail);
		len--;
		if (++s->ntail == 8) {
			absorb(s, s->tail);
			s->tail = 0;
			s->ntail = 0;
		}
	}
	if (s->ntail)
		return; /* all taken into the partial word */
	for (; len >= 8; p += 8, len -= 8)
		absorb(s, load_le64(p));
	for (size_t i = 0; i < len; i++)
		s->tail |= (uint64_t)p[i] << (8 * i);
	s->ntail = (unsigned)len;
}

uint64_t swv_siphash_final(struct swv_siphash *s)
{
	/* Last word: the remaining bytes, and the length mod 256 in the top byte. */
	absorb(s, s->tail | (s->len & 0xff) << 56);
	/* Finalisation: d = 4 rounds. */
	s->v2 ^= 0xff;
	SIPROUND(s);
	SIPROUND(s);
	SIPROUND(s);
	SIPROUND(s);
	return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

uint64_t swv_siphash24(const struct swv_sip_key *k, const void *buf, size_t len)
{
	struct swv_siphash s;
	swv_siphash_init(&s, k);
	swv_siphash_update(&s, buf, len);
	return swv_siphash_final(&s);
}

void swv_auth_derive(const struct swv_sip_key *secret, struct in_addr src_ip, uint32_t src_qpn,
		     struct in_addr dst_ip, uint32_t dst_qpn, struct swv_sip_key *out)
{
	/* label | "swv-auth1" | src IPv4 | src QPN (24 bits) | dst IPv4 | dst QPN, all
	 * big-endian. The label byte gives the two halves of the key independent PRF
	 * outputs; the direction is part of the input, so A->B and B->A differ. */
	uint8_t m[1 + 9 + 4 + 3 + 4 + 3];
	size_t n = 0;

	m[n++] = 0;
	memcpy(m + n, "swv-auth1", 9);
	n += 9;
	memcpy(m + n, &src_ip.s_addr, 4); /* network order already */
	n += 4;
	m[n++] = (uint8_t)(src_qpn >> 16);
	m[n++] = (uint8_t)(src_qpn >> 8);
	m[n++] = (uint8_t)src_qpn;
	memcpy(m + n, &dst_ip.s_addr, 4);
	n += 4;
	m[n++] = (uint8_t)(dst_qpn >> 16);
	m[n++] = (uint8_t)(dst_qpn >> 8);
	m[n++] = (uint8_t)dst_qpn;
	out->k0 = swv_siphash24(secret, m, n);
	m[0] = 1;
	out->k1 = swv_siphash24(secret, m, n);
}

void swv_auth_qp_init(struct swv_auth_qp *a, const uint8_t *secret, struct in_addr self_ip, bool ud)
{
	memset(a, 0, sizeof(*a));
	if (!secret)
		return;
	a->on = true;
	a->per_pkt = ud;
	swv_sip_key_from_bytes(&a->secret, secret);
	a->self_ip = self_ip;
}

void swv_auth_qp_attach(struct swv_auth_qp *a, uint32_t self_qpn, const struct sockaddr_in *peer,
			uint32_t peer_qpn)
{
	if (!a->on)
		return;
	a->self_qpn = self_qpn & SWV_QPN_MASK;
	if (a->per_pkt)
		return;
	peer_qpn &= SWV_QPN_MASK;
	swv_auth_derive(&a->secret, a->self_ip, a->self_qpn, peer->sin_addr, peer_qpn, &a->tx);
	swv_auth_derive(&a->secret, peer->sin_addr, peer_qpn, a->self_ip, a->self_qpn, &a->rx);
	a->ready = true;
}

static uint32_t bth_dqpn(const uint8_t *hdr)
{
	return (uint32_t)hdr[5] << 16 | (uint32_t)hdr[6] << 8 | hdr[7];
}

const struct swv_sip_key *swv_auth_tx_key(const struct swv_auth_qp *a,
					  const struct sockaddr_in *dst, const uint8_t *hdr,
					  struct swv_sip_key *scratch)
{
	if (!a->on)
		return NULL;
	if (!a->per_pkt)
		return a->ready ? &a->tx : NULL;
	if (!dst || !hdr || !scratch)
		return NULL;
	swv_auth_derive(&a->secret, a->self_ip, a->self_qpn, dst->sin_addr, bth_dqpn(hdr), scratch);
	return scratch;
}

bool swv_auth_rx_ok(struct swv_auth_qp *a, const struct swv_pkt *pkt, const struct sockaddr_in *src)
{
	if (!a->on)
		return true;
	struct swv_sip_key ud;
	const struct swv_sip_key *k = NULL;
	if (!a->per_pkt) {
		if (a->ready)
			k = &a->rx;
	} else if (pkt->flags & SWV_HDR_DETH) {
		swv_auth_derive(&a->secret, src->sin_addr, pkt->deth_sqpn, a->self_ip, pkt->dqpn,
				&ud);
		k = &ud;
	}
	if (k && swv_pkt_mac_ok(k, pkt->wire, pkt->wire_len))
		return true;
	atomic_fetch_add_explicit(&a->rx_bad, 1, memory_order_relaxed);
	return false;
}
