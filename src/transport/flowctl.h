/*
 * UC flow control (docs/wire.md, "UC flow control"). Owner: transport.
 *
 * Why: RC paces itself by its ACKs. UC has none, and a UDP "link" drops whatever the
 * receiving socket cannot hold, so a burst of large UC messages towards a receiver that
 * is not scheduled for a moment is lost -- where an IB link (credit-based link-level
 * flow control) or a RoCE fabric (PFC) would have made the sender wait. swverbs gives
 * each connected UC QP pair that lossless-link behaviour end to end: the receiving QP
 * grants credits as its progress thread consumes packets, and the sending QP sends no
 * packet beyond its credit. UC's own semantics are unchanged: a packet lost on the
 * wire, out of sequence or without a receive WQE still drops its message.
 *
 * Protocol: one swverbs-specific opcode (SWV_OP_FLOW_CONTROL, in the manufacturer
 * range) with a BTH addressed to the peer QP and an 8-byte payload: a type byte,
 * three zero bytes and a 32-bit big-endian value.
 *   CREDIT  receiver -> sender: the sender may have sent this many UC data packets
 *           in total (a cumulative limit, so a lost or repeated CREDIT is harmless).
 *   PROBE   sender -> receiver, when blocked for SWV_FC_PROBE_NS: the number sent so
 *           far. The receiver takes it as its own count -- packets lost on the way are
 *           forgiven, as IB's FCTBS resynchronises a link -- and answers with a CREDIT.
 * Both sides start from SWV_FC_INITIAL packets of implicit credit. Counts are modulo
 * 2^32. A sender blocked for SWV_FC_DEAD_NS without any CREDIT stops waiting for its peer:
 * each further probe interval lets SWV_FC_INITIAL packets go (a UC peer that is gone
 * loses them, as it would on a wire). UD is not flow-controlled: its messages are single
 * packets and its receivers are not known to the sender ahead of time.
 *
 * All functions are called with qp->lock held; the state lives in qp->req.fc (sending
 * side) and qp->resp.fc (receiving side).
 */
#ifndef SWV_TRANSPORT_FLOWCTL_H
#define SWV_TRANSPORT_FLOWCTL_H

#include <stdbool.h>
#include <stdint.h>

struct swv_qp;
struct swv_pkt;

#define SWV_FC_INITIAL	   16u		      /* implicit credit at RTS / RTR */
#define SWV_FC_PROBE_NS	   1000000ull	      /* blocked this long: probe */
#define SWV_FC_DEAD_NS	   (250 * 1000000ull) /* no CREDIT for this long: stop waiting */
#define SWV_FC_PAYLOAD_LEN 8

enum swv_fc_type {
	SWV_FC_CREDIT = 1,
	SWV_FC_PROBE = 2,
};

struct swv_fc_tx {
	uint32_t sent;		      /* UC data packets sent since RTS */
	uint32_t limit;		      /* packets may go while sent != limit (modulo 2^32) */
	uint64_t blocked_since;	      /* ns: out of credit, no CREDIT since; 0 = not waiting */
	uint64_t probe_at;	      /* ns: next probe while blocked; 0 = none armed */
	uint64_t n_blocked, n_probes; /* statistics */
};

struct swv_fc_rx {
	uint32_t rcvd;	    /* UC data packets consumed since RTR */
	uint32_t granted;   /* the latest limit sent to the peer */
	uint32_t window;    /* credit kept open beyond rcvd */
	uint64_t n_credits; /* statistics */
};

/* Sending side: reset (entering RTS), packets allowed now (UINT32_MAX when the QP is
 * not flow-controlled), n more sent, out of credit (arms the probe timer), and the
 * timer (probe, or give up waiting on a silent peer). */
void swv_fc_tx_reset(struct swv_qp *qp);
uint32_t swv_fc_tx_room(const struct swv_qp *qp);
void swv_fc_tx_sent(struct swv_qp *qp, uint32_t n);
void swv_fc_tx_blocked(struct swv_qp *qp);
void swv_fc_tx_timer(struct swv_qp *qp, uint64_t now_ns);

/* Receiving side: reset (entering RTR; sizes the window from the socket buffer and the
 * QPs sharing it), one UC data packet consumed (grants more credit every quarter
 * window), and a flow-control packet from the peer (CREDIT or PROBE). The last returns
 * true when a CREDIT ends the sender's wait: the caller runs the requester. */
void swv_fc_rx_reset(struct swv_qp *qp);
void swv_fc_rx_data(struct swv_qp *qp);
bool swv_fc_rx_control(struct swv_qp *qp, const struct swv_pkt *pkt);

#endif
