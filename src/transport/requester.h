/*
 * Requester and completer (rxe's req/comp): turn send WQEs into packets, track PSNs,
 * consume ACK/NAK/read responses, retire WQEs, retransmit. Owner: requester.
 * All functions are called with qp->lock held.
 */
#ifndef SWV_TRANSPORT_REQUESTER_H
#define SWV_TRANSPORT_REQUESTER_H

#include <stdbool.h>
#include <stdint.h>

struct swv_qp;
struct swv_pkt;

struct swv_req_state {
	uint32_t next_psn;     /* PSN of the next new packet */
	uint32_t una_psn;      /* oldest unacknowledged PSN */
	uint32_t cur;          /* SQ index of the WQE being transmitted */
	uint32_t cur_pkt;      /* packets of 'cur' already sent */
	uint32_t rd_atomic_outstanding;
	uint8_t retry_left, rnr_left;
	uint64_t rnr_until;    /* ns; nonzero while waiting after an RNR NAK */
	uint32_t pkts_since_ackreq;
	/* read response placement */
	uint32_t read_off;     /* bytes of the head READ placed so far */
};

/* Transmit what the window allows. */
void swv_req_run(struct swv_qp *qp);
/* Handle an ACK / NAK / READ response / ATOMIC ACK. */
void swv_comp_rx(struct swv_qp *qp, const struct swv_pkt *pkt);
/* Local ACK timeout or RNR wait expiry. */
void swv_req_timer(struct swv_qp *qp, uint64_t now_ns);
/* Reset requester state (RESET, RTR->RTS with a new sq_psn). */
void swv_req_reset(struct swv_qp *qp);

#endif
