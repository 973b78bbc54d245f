/*
 * The receive story of a context (docs/design.md, "The progress loop"): the calls its
 * progress loop makes (progress/progress.h). Owner: transport.
 *
 *  - rx: each datagram is checked (swv_pkt_parse_ex: CRC or MAC trailer, headers;
 *    rx_bad_crc / rx_malformed), a doorbell of the intra-host link is told apart,
 *    then demultiplexed by its destination QPN on the endpoint it came in on
 *    (swv_ctx_qp_lookup; a group's socket hands QPN 0xffffff to swv_mcast_deliver;
 *    nothing there: rx_no_qp). Consecutive packets for one QP go to swv_qp_rx_batch
 *    together (one lock hold, one coalesced ACK), where the responder or the
 *    completer takes them.
 *  - begin: the ACKs an application's pass left for later (swv_qp_ack_now).
 *  - timers: the QPs of ctx->qp_list whose timer_deadline has come run swv_qp_timer.
 *  - after: swv_trig_run (triggered operations are issued outside every lock).
 *  - watch: the netdev watch (swv_netdev_process); a change of the port's state is an
 *    async event, PORT_ACTIVE or PORT_ERR.
 *
 * swv_ctx_open takes this table from the api layer (src/api/context.c), so core, below
 * the transport, never names it.
 */
#ifndef SWV_TRANSPORT_RECEIVE_H
#define SWV_TRANSPORT_RECEIVE_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "progress/progress.h"

struct swv_context;
struct swv_endpoint;
struct swv_pkt;
struct swv_qp;

/* Owner argument: the struct swv_context whose progress loop it is. */
extern const struct swv_progress_ops swv_receive_ops;

/* ---- the per-QP demux (qp->lock not held on entry) ---- */

void swv_qp_rx(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src);
/* n packets for qp in arrival order (pkts[i] from srcs[i]) under one lock hold, with
 * the responder's ACKs coalesced over the batch. ack_later: the coalesced ACK may stay
 * pending when the batch completed a receive; true when it did (the caller then sees
 * that swv_qp_ack_now runs by its next pass). */
bool swv_qp_rx_batch(struct swv_qp *qp, const struct swv_pkt *const *pkts,
		     const struct sockaddr_in *const *srcs, unsigned n, bool ack_later);
/* Send the ACK a batch left pending, if the QP still answers requests (also before a
 * QP is destroyed; qp->lock not held). */
void swv_qp_ack_now(struct swv_qp *qp);
/* A datagram of a multicast group qp is attached to, with the group's MGID. */
void swv_qp_rx_mcast(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src,
		     const uint8_t mgid[16]);
/* One datagram from a multicast group's socket (core/mcast.h), for QPN 0xffffff: to
 * every QP attached. False when it does not name the group's MGID (another MGID on
 * the same IP group, or no MGID at all): no QP here is attached to its group. */
bool swv_mcast_deliver(struct swv_context *ctx, struct swv_endpoint *ep, const struct swv_pkt *pkt,
		       const struct sockaddr_in *src);

#endif
