/*
 * Responder (rxe's resp): checks PSN, executes SEND / RDMA WRITE / RDMA READ / atomics
 * against receive WQEs and memory, acknowledges, and keeps read/atomic replay state
 * for duplicates. Owner: responder. Called with qp->lock held.
 */
#ifndef SWV_TRANSPORT_RESPONDER_H
#define SWV_TRANSPORT_RESPONDER_H

#include <stdbool.h>
#include <stdint.h>

struct swv_qp;
struct swv_pkt;

#define SWV_MAX_RD_ATOMIC 16 /* max_qp_rd_atom / max_dest_rd_atomic limit (power of two) */

/* Saved READ/atomic request for replay of duplicates. */
struct swv_resp_res {
	bool valid, is_atomic;
	uint32_t first_psn, last_psn;
	uint64_t va;
	uint32_t rkey, len;
	uint64_t atomic_orig;
	uint8_t atomic_opcode;
	uint64_t atomic_swap_add, atomic_cmp;
};

struct swv_resp_state {
	uint32_t epsn;        /* expected PSN */
	uint32_t msn;         /* 24-bit message sequence number */
	bool nak_sent;        /* sequence NAK sent for the current gap */
	/* in-progress inbound message */
	uint8_t last_opcode;  /* to check FIRST/MIDDLE/LAST sequencing; 0xff = none */
	uint64_t msg_off;     /* bytes placed so far */
	uint64_t write_va;    /* RDMA WRITE target of the current message */
	uint32_t write_rkey, write_len;
	bool have_rwqe;       /* a receive WQE is held for the current SEND */
	uint64_t rwqe_wr_id;
	/* replay ring */
	struct swv_resp_res res[SWV_MAX_RD_ATOMIC];
	uint32_t res_next;
};

/* Handle one request packet (RC/UC/UD). */
void swv_resp_rx(struct swv_qp *qp, const struct swv_pkt *pkt);
/* Reset responder state (RESET, INIT->RTR with a new rq_psn). */
void swv_resp_reset(struct swv_qp *qp);

#endif
