/*
 * The single completion path (DESIGN.md section 7). Every place that completes a work
 * request -- requester completion, receive completion, responder completion of an
 * incoming RDMA WRITE/READ/atomic, flush -- calls swv_complete(), which
 *   (a) writes the CQE if one is due, then
 *   (b) updates the counter that owns the op type on that QP (release order, so a
 *       reader that sees the count also sees the data and the CQE).
 * Owner: core (qp side). Called with the QP lock held.
 */
#ifndef SWV_CORE_COMPLETION_H
#define SWV_CORE_COMPLETION_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

struct swv_qp;
struct swv_cq;

/* Counter slot per op type; the index is the bit number in the attach op_mask
 * compressed: bits 0..5 are upstream, 6 and 7 stand for extension bits 16 and 17. */
enum swv_cntr_slot {
	SWV_CNTR_SEND = 0,
	SWV_CNTR_RECV = 1,
	SWV_CNTR_RDMA_READ = 2,
	SWV_CNTR_REMOTE_RDMA_READ = 3,
	SWV_CNTR_RDMA_WRITE = 4,
	SWV_CNTR_REMOTE_RDMA_WRITE = 5,
	SWV_CNTR_ATOMIC = 6,        /* SWV_QP_ATTACH_COMP_CNTR_OP_ATOMIC = 1 << 16 */
	SWV_CNTR_REMOTE_ATOMIC = 7, /* SWV_QP_ATTACH_COMP_CNTR_OP_REMOTE_ATOMIC = 1 << 17 */
	SWV_CNTR_NSLOTS = 8,
};

struct swv_completion {
	enum swv_cntr_slot slot;
	struct swv_cq *cq; /* CQE due on this CQ, or NULL (unsignaled success, remote op) */
	bool solicited;    /* for solicited-only CQ notification */
	struct ibv_wc wc;  /* status always set; the rest when cq != NULL */
	uint64_t bytes;    /* payload bytes, for BYTES counters (success only) */
	struct ibv_wc_tm_info tm; /* tag-matching info of the CQE (core/srq.h); 0: none */
};

/* Returns 0, or ENOSPC if the CQ overflowed (caller moves the QP to ERR). qp may be
 * NULL for a completion no QP owns (slot SWV_CNTR_NSLOTS: a TM SRQ's list operation). */
int swv_complete(struct swv_qp *qp, const struct swv_completion *c);

#endif
