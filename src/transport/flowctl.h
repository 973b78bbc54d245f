/*
 * UC flow control (docs/wire.md, "UC flow control"). Owner: transport.
 *
 * Why: RC paces itself by its ACKs. UC has none, and a UDP "link" drops whatever the
 * receiving socket cannot hold, so a burst of large UC messages towards a receiver that
 * is not scheduled for a moment is lost -- where an IB link (credit-based link-level
 * flow control) or a RoCE fabric (PFC) would have made the sender wait. swverbs gives
 * each connected UC QP pair that lossless-link behaviour end to end: the receiving QP
 * grants credit as its progress thread consumes packets, and the sending QP sends no
 * packet beyond its credit. UC's own semantics are unchanged: a packet lost on the
 * wire, out of sequence or without a receive WQE still drops its message.
 *
 * Credit is a PSN: the sender may send packets with PSNs before the limit. The receiver
 * sets the limit a window beyond the highest PSN it has consumed, so duplicates and late
 * packets cost nothing and a lost packet stops holding credit as soon as a later one
 * arrives. Both sides start from SWV_FC_INITIAL packets of implicit credit beyond the
 * connection's first PSN (sq_psn = the peer's rq_psn).
 *
 * Protocol: one swverbs-specific opcode (SWV_OP_FLOW_CONTROL, in the manufacturer
 * range) with a BTH addressed to the peer QP and an 8-byte payload: a type byte, three
 * zero bytes and a big-endian 32-bit value holding a PSN.
 *   CREDIT  receiver -> sender: the limit.
 *   PROBE   sender -> receiver: the PSN of the next packet to send. Sent on entering
 *           RTS, every SWV_FC_PROBE_NS while out of credit, and when a CREDIT does not
 *           fit the sender's PSNs (the two sides disagree, e.g. the sender's QP was
 *           reconnected while the receiver's was not). The receiver adopts it as its
 *           position and answers with a CREDIT.
 * A sender out of credit for SWV_FC_DEAD_NS stops waiting for its peer: each further
 * probe interval lets SWV_FC_INITIAL packets go (a UC peer that is gone loses them, as
 * it would on a wire). UD is not flow-controlled: its messages are single packets and
 * its receivers are not known to the sender ahead of time.
 *
 * All functions are called with qp->lock held; the state lives in qp->req->fc (sending
 * side) and qp->resp->fc (receiving side).
 */
#ifndef SWV_TRANSPORT_FLOWCTL_H
#define SWV_TRANSPORT_FLOWCTL_H

#include <stdbool.h>
#include <stdint.h>

struct swv_qp;
struct swv_pkt;

#define SWV_FC_INITIAL	   4u		       /* implicit credit, packets */
#define SWV_FC_MIN_WINDOW  4u		       /* credit a receiver keeps open, */
#define SWV_FC_MAX_WINDOW  4096u	       /* ... in packets */
#define SWV_FC_PROBE_NS	   1000000ull	       /* out of credit this long: probe */
#define SWV_FC_DEAD_NS	   (2000 * 1000000ull) /* ... this long: stop waiting */
#define SWV_FC_PAYLOAD_LEN 8

enum swv_fc_type {
	SWV_FC_CREDIT = 1,
	SWV_FC_PROBE = 2,
};

struct swv_fc_tx {
	uint32_t next;		      /* PSN of the next UC packet to send */
	uint32_t limit;		      /* PSNs before it may be sent */
	uint64_t blocked_since;	      /* ns: out of credit since; 0 = not waiting */
	uint64_t probe_at;	      /* ns: next probe while blocked; 0 = none armed */
	uint64_t last_probe;	      /* ns: when the last PROBE went out */
	uint64_t n_blocked, n_probes; /* statistics */
};

struct swv_fc_rx {
	uint32_t next;	    /* one past the highest PSN consumed (or the peer's probe) */
	uint32_t granted;   /* the latest limit sent to the peer */
	uint32_t buf_pkts;  /* packets the socket buffer is given for UC, all QPs together */
	uint64_t n_credits; /* statistics */
};

/* Sending side. Reset (sq_psn set), entering RTS (sends the first PROBE), packets that
 * may go now starting at PSN psn (UINT32_MAX when the QP is not flow-controlled), sent
 * up to (excluding) PSN end, out of credit (arms the probe timer), and the timer (probe,
 * or give up waiting on a silent peer). */
void swv_fc_tx_reset(struct swv_qp *qp);
void swv_fc_tx_start(struct swv_qp *qp);
uint32_t swv_fc_tx_room(const struct swv_qp *qp, uint32_t psn);
void swv_fc_tx_sent(struct swv_qp *qp, uint32_t end);
void swv_fc_tx_blocked(struct swv_qp *qp);
void swv_fc_tx_timer(struct swv_qp *qp, uint64_t now_ns);

/* Receiving side. Reset (entering RTR, rq_psn set; measures the socket buffer), one UC
 * data packet consumed (grants more credit every quarter window), and a flow-control
 * packet from the peer (CREDIT or PROBE). The last returns true when a CREDIT ends the
 * sender's wait: the caller runs the requester. */
void swv_fc_rx_reset(struct swv_qp *qp);
void swv_fc_rx_data(struct swv_qp *qp, uint32_t psn);
bool swv_fc_rx_control(struct swv_qp *qp, const struct swv_pkt *pkt);

#endif
