/*
 * The transmit path: every packet a QP sends leaves through swv_txrun_add and
 * swv_txrun_send (docs/design.md, "One transmit path"). Owner: transport (data path).
 *
 * A run is one or more IB packets of one QP to one destination, each described by a
 * struct swv_pkt. swv_txrun_add builds its headers and its trailer (pad and CRC, or in
 * authenticated mode the MAC under the key of that destination); the payload stays
 * where it is and is gathered by iovec. On an endpoint with an inbox the CRC is left
 * out (zero) and computed only if the run cannot take the intra-host link, whose
 * receiver does not check it (docs/design.md, "No ICRC on the ring"). swv_txrun_send
 * applies the destination rules and hands the run to the link (swv_qp_xmit): a run of
 * one packet is a plain datagram, a longer one a UDP GSO send when the endpoint can.
 * Every packet is complete on its own (BTH, its extension headers, payload, pad, CRC),
 * so the receiver sees exactly the datagrams a packet-by-packet sender would have
 * produced. The GSO rule shapes a run:
 * every packet has the wire length of the first, except the last, which may be
 * shorter; swv_txrun_fits says whether one more packet can join. At most
 * SWV_EP_GSO_MAX_SEGS packets and SWV_EP_GSO_MAX_BYTES bytes.
 *
 * A long run is per thread (no lock; the caller holds its QP's lock while building and
 * sending), obtained with swv_txrun_begin and valid until the next begin on that
 * thread; payloads can be gathered straight into its staging area (swv_txrun_stage)
 * or left where they are (the caller keeps them alive until swv_txrun_send returns).
 * A single packet is swv_tx_pkt: a run of one on the caller's stack, so it may be sent
 * while a long run is being built.
 */
#ifndef SWV_TRANSPORT_TXRUN_H
#define SWV_TRANSPORT_TXRUN_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "transport/packet.h"

struct swv_qp;
struct swv_pkt;

struct swv_txslot {
	uint8_t hdr[SWV_MAX_HDR_LEN];
	uint8_t tail[SWV_MAX_TAIL_LEN + 1];
	/* Unsealed (pad and a zero ICRC): what the CRC is computed over should the run
	 * take UDP after all (swv_txrun_send). */
	bool unsealed;
	uint8_t hlen;
	uint32_t paylen;
	const void *payload;
};

struct swv_txrun {
	struct swv_qp *qp;
	const struct sockaddr_in *to; /* the UD address vector's, or the connected peer */
	unsigned n, cap;	      /* packets, room for packets */
	size_t seg;		      /* wire length of the first packet: the GSO segment size */
	size_t total;		      /* bytes of all packets */
	bool closed;		      /* a shorter packet was added: it must stay the last */
	bool unsealed;		      /* some packet carries no ICRC (swv_txrun_add) */
	int iovcnt;
	size_t staged, stage_cap; /* bytes of the staging area in use, its size */
	struct iovec *iov;	  /* 3 per packet: header | payload | tail */
	struct swv_txslot *slot;
	uint8_t *stage;
};

/* This thread's run for qp towards dst (NULL: the connected peer), emptied. NULL only
 * when out of memory (send packet by packet). */
struct swv_txrun *swv_txrun_begin(struct swv_qp *qp, const struct sockaddr_in *dst);
/* Packets in the run. */
unsigned swv_txrun_count(const struct swv_txrun *r);
/* Whether a packet with this opcode and payload length may join the run. */
bool swv_txrun_fits(const struct swv_txrun *r, uint8_t opcode, uint32_t paylen);
/* Room for the next packet's payload (paylen bytes) in the staging area, or NULL. */
uint8_t *swv_txrun_stage(struct swv_txrun *r, uint32_t paylen);
/* Append the packet described by p (header fields, p->payload / p->paylen; flags and
 * padcnt are ignored): builds its headers, pad and CRC or MAC. If p->payload is the
 * pointer swv_txrun_stage returned, the staging area is consumed. Returns false
 * (nothing added) when it does not fit or the header is invalid. */
bool swv_txrun_add(struct swv_txrun *r, const struct swv_pkt *p);
/* Send the run (swv_qp_xmit; destination QPN 0 goes nowhere there, every packet
 * counting as sent). Returns 0 when every
 * packet went; EAGAIN when the link refused for now (a full socket buffer or ring:
 * retry later from packet *nsent); another positive errno when the packets from
 * *nsent on were lost (logged here; for the reliability protocol a lost packet, as on
 * a real link). The run is left as it was. */
int swv_txrun_send(struct swv_txrun *r, unsigned *nsent);
/* One packet: a run of one (swv_txrun_add, swv_txrun_send). dst NULL: the connected
 * peer. Returns as swv_txrun_send, or EINVAL (logged) when p cannot be built. */
int swv_tx_pkt(struct swv_qp *qp, const struct sockaddr_in *dst, const struct swv_pkt *p);

#endif
