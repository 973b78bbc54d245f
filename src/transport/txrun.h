/*
 * Packet runs: several IB packets of one QP, built back to back and handed to the
 * endpoint as one UDP GSO send (swv_ep_send_gso). Owner: transport (data path).
 *
 * Every packet of a run is complete on its own (BTH, its extension headers, payload,
 * pad, CRC), so the receiver sees exactly the datagrams a packet-by-packet sender
 * would have produced. The GSO rule shapes a run: every packet has the wire length of
 * the first, except the last, which may be shorter; swv_txrun_fits says whether one
 * more packet can join. At most SWV_EP_GSO_MAX_SEGS packets and SWV_EP_GSO_MAX_BYTES
 * bytes.
 *
 * A run is per thread (no lock; the caller holds its QP's lock while building and
 * sending), obtained with swv_txrun_begin and valid until the next begin on that
 * thread. Payloads can be gathered straight into the run's staging area
 * (swv_txrun_stage) or left where they are (the caller keeps them alive until
 * swv_txrun_send returns).
 */
#ifndef SWV_TRANSPORT_TXRUN_H
#define SWV_TRANSPORT_TXRUN_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct swv_endpoint;
struct swv_pkt;
struct swv_txrun;

/* This thread's run, emptied. NULL only when out of memory (send packet by packet). */
struct swv_txrun *swv_txrun_begin(void);
/* Packets in the run. */
unsigned swv_txrun_count(const struct swv_txrun *r);
/* Whether a packet with this opcode and payload length may join the run. */
bool swv_txrun_fits(const struct swv_txrun *r, uint8_t opcode, uint32_t paylen);
/* Room for the next packet's payload (paylen bytes) in the staging area, or NULL. */
uint8_t *swv_txrun_stage(struct swv_txrun *r, uint32_t paylen);
/* Append the packet described by p (header fields, p->payload / p->paylen; flags and
 * padcnt are ignored): builds its headers, pad and CRC. If p->payload is the pointer
 * swv_txrun_stage returned, the staging area is consumed. Returns false (nothing
 * added) when it does not fit or the header is invalid. */
bool swv_txrun_add(struct swv_txrun *r, const struct swv_pkt *p);
/* Send the run to dst. Returns 0 or an errno as swv_ep_send_gso, with *nsent the
 * packets that went out (in order, from the first). The run is left as it was. */
int swv_txrun_send(struct swv_txrun *r, struct swv_endpoint *ep, const struct sockaddr_in *dst,
		   unsigned *nsent);

#endif
