/*
 * Responder internals shared by responder*.c and their unit tests. Owner: responder.
 * The pure helpers (sequencing, length rules, resource ring) have no
 * side effects so tests can check them directly.
 */
#ifndef SWV_TRANSPORT_RESPONDER_INT_H
#define SWV_TRANSPORT_RESPONDER_INT_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/completion.h"
#include "core/limits.h"
#include "transport/opcode.h"
#include "transport/responder.h"

struct swv_qp;
struct swv_pkt;

/* Outcome of checking/executing one request (how it is answered depends on the QP type). */
enum swv_resp_err {
	SWV_RESP_OK = 0,
	SWV_RESP_ERR_INV_REQ,  /* NAK 0x61: sequence, QP access flags, misaligned atomic,
				* max_dest_rd_atomic 0, length rules, receive buffer too small */
	SWV_RESP_ERR_ACCESS,   /* NAK 0x62: R_Key / PD / bounds / MR rights */
	SWV_RESP_ERR_RWQE,     /* NAK 0x63: malformed receive WQE (bad SGE) */
	SWV_RESP_ERR_RWQE_PROT, /* NAK 0x63: the receive buffer faulted (unmapped or not
				 * writable since registration): LOC_PROT_ERR on its WQE */
	SWV_RESP_ERR_RNR,      /* no receive WQE */
	SWV_RESP_ERR_CQ,       /* receive CQ overflow: QP -> ERR, no NAK */
	SWV_RESP_ERR_INV_RKEY, /* SEND_WITH_INV whose R_Key cannot be invalidated */
	SWV_RESP_DROP,         /* drop silently */
};

enum swv_resp_seq {
	SWV_SEQ_OK = 0,
	SWV_SEQ_MISSING_FIRST, /* MIDDLE/LAST with no message in progress */
	SWV_SEQ_MISSING_LAST,  /* a new message (or other kind) while one is in progress */
};

#define SWV_AETH_ACK        0x1f /* ACK, credit field "unlimited" */
#define SWV_AETH_RNR        0x20 /* | min_rnr_timer */
#define SWV_AETH_NAK_PSN    0x60
#define SWV_AETH_NAK_INV    0x61
#define SWV_AETH_NAK_ACCESS 0x62
#define SWV_AETH_NAK_OP     0x63

/* Held responses (swv_resp_state.tx_retry_at): the first retry after this, doubling */
#define SWV_RESP_HOLD_MIN_NS 8000ull
#define SWV_RESP_HOLD_MAX_NS 1000000ull

/* cls below: the opcode's wire-table flags as swv_opcode_request() (transport/opcode.h)
 * gives them for the QP's type. */
/* Sequencing: cur = SWV_OPF_SEND / SWV_OPF_WRITE while a message is in progress, else 0. */
enum swv_resp_seq swv_resp_check_seq(uint32_t cur, uint32_t cls);
/* Per-packet payload size rule for SEND/WRITE packets (roce-wire.md 7.2). */
bool swv_resp_paylen_ok(uint32_t cls, uint32_t paylen, uint32_t mtu);
/* Packets (and PSNs) a READ of len bytes takes: max(1, ceil(len / mtu)). */
uint32_t swv_resp_read_npkts(uint32_t len, uint32_t mtu);
/* Replay ring size for a max_dest_rd_atomic value: power of two, 1..SWV_MAX_RD_ATOMIC. */
uint32_t swv_resp_ring_size(uint32_t max_dest_rd_atomic);
/* Find the saved resource whose [first_psn, last_psn] holds psn, or NULL. */
struct swv_resp_res *swv_resp_res_find(struct swv_resp_state *s, uint32_t psn);
/* Take the next ring slot (overwrites the oldest); fill it, then publish it. */
struct swv_resp_res *swv_resp_res_alloc(struct swv_resp_state *s, uint32_t ring);
/* Mark r valid and retire any older entry whose PSN range overlaps it. */
void swv_resp_res_publish(struct swv_resp_state *s, struct swv_resp_res *r);

/* Path MTU in bytes the responder checks against. */
uint32_t swv_resp_mtu(const struct swv_qp *qp);
/* Send ACK / NAK / ATOMIC_ACK / READ response (RC). Returns 0 or the transmit error;
 * callers treat a failure like packet loss (the requester retries). */
int swv_resp_send(struct swv_qp *qp, uint8_t opcode, uint32_t psn, uint8_t syndrome,
		   uint64_t atomic_orig, const void *payload, uint32_t paylen);
/* Count a remote operation (no CQE) on slot: ok adds bytes, !ok adds to the error count. */
void swv_resp_remote_done(struct swv_qp *qp, enum swv_cntr_slot slot, bool ok, uint64_t bytes);

/* responder_read.c: new READ / atomic (checks done up to the QP access flags). */
/* The answer to a refused swv_mr_remote_* access (rc EACCES or EFAULT): ERR_ACCESS;
 * a fault is counted in stats.remote_faults (the NAK path counts remote_refused). */
enum swv_resp_err swv_resp_refused(struct swv_qp *qp, int rc);
enum swv_resp_err swv_resp_read(struct swv_qp *qp, const struct swv_pkt *pkt);
enum swv_resp_err swv_resp_atomic(struct swv_qp *qp, const struct swv_pkt *pkt, uint32_t cls);
/* Duplicates (PSN before epsn). */
void swv_resp_read_dup(struct swv_qp *qp, const struct swv_pkt *pkt);

/* Tag matching (responder_tm.c; core/srq.h): the part of a SEND packet's payload
 * that lands in the chosen WQE (a matched eager message without its TMH, a matched
 * rendezvous request none), and the receive completion by kind -- true when a matched
 * rendezvous went on with the device's READ and its WQE must not complete now. */
void swv_resp_tm_payload(struct swv_qp *qp, uint32_t cls, const uint8_t **payload,
			 uint32_t *paylen);
bool swv_resp_tm_complete(struct swv_qp *qp, struct swv_completion *c);
void swv_resp_atomic_dup(struct swv_qp *qp, const struct swv_pkt *pkt);

#endif
