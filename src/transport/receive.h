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

#include "progress/progress.h"

/* Owner argument: the struct swv_context whose progress loop it is. */
extern const struct swv_progress_ops swv_receive_ops;

#endif
