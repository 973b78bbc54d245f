/*
 * Send work request opcodes (IBV_WR_*): what each one is, which QP types may post it,
 * which fields of ibv_send_wr it reads, and which wire opcodes carry it. Posting
 * (transport/post.c), the requester and completions all ask this table.
 */
#ifndef SWV_TRANSPORT_WR_OPCODE_H
#define SWV_TRANSPORT_WR_OPCODE_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/completion.h"
#include "transport/opcode.h"

enum swv_wr_flag {
	/* Family: what travels on the wire (none for the local operations). */
	SWV_WRF_SEND = 1u << 0,
	SWV_WRF_WRITE = 1u << 1,
	SWV_WRF_READ = 1u << 2,
	SWV_WRF_ATOMIC = 1u << 3, /* COMPARE_SWAP / FETCH_ADD: 8 bytes back in the SGE */
	SWV_WRF_ATOMIC_WRITE = 1u << 4,
	SWV_WRF_FLUSH = 1u << 5,
	SWV_WRF_LOCAL = 1u << 6, /* BIND_MW, LOCAL_INV: executed by the requester, nothing sent */
	/* Holds one of the initiator's max_rd_atomic resources until its response. */
	SWV_WRF_RD_ATOMIC = 1u << 7,
	SWV_WRF_IMM = 1u << 8, /* imm_data goes out as ImmDt */
	SWV_WRF_INV = 1u << 9, /* invalidate_rkey goes out as IETH */
	/* Remote fields read at post: wr.rdma (remote_addr, rkey) or wr.atomic (remote_addr,
	 * rkey, compare_add, swap). */
	SWV_WRF_RDMA_FIELDS = 1u << 10,
	SWV_WRF_ATOMIC_FIELDS = 1u << 11,
	/* Only from the ibv_wr_* builder (transport/qp_ex.c): ibv_send_wr has no fields for it. */
	SWV_WRF_BUILDER = 1u << 12,
	/* IBV_SEND_INLINE refused: it writes locally (READ, atomics) or carries no data. */
	SWV_WRF_NO_INLINE = 1u << 13,
};

/* Where a packet sits in its message: index of swv_wr_opcode_info.wire. */
enum swv_wr_pos { SWV_WR_ONLY, SWV_WR_FIRST, SWV_WR_MIDDLE, SWV_WR_LAST };

struct swv_wr_opcode_info {
	const char *name;	 /* "SEND", ...; NULL = not a send opcode swverbs performs */
	uint32_t flags;		 /* SWV_WRF_* */
	uint16_t qp_types;	 /* SWV_QPT_BIT() of the QP types that may post it; an XRC INI QP
				  * is checked as IBV_QPT_XRC_SEND */
	uint8_t wire[4];	 /* operation (opcode bits 4:0) by enum swv_wr_pos; the transport
				  * prefix is the QP's */
	enum ibv_wc_opcode wc;	 /* its completion's opcode */
	enum swv_cntr_slot slot; /* the completion counter slot it counts in */
	uint32_t qp_ex_op;	 /* its IBV_QP_EX_WITH_* bit (transport/qp_ex.c) */
};

/* Entries for IBV_WR_RDMA_WRITE .. IBV_WR_ATOMIC_WRITE. */
#define SWV_WR_OPCODES 16
extern const struct swv_wr_opcode_info swv_wr_opcode_table[SWV_WR_OPCODES];

/* The entry of op; for an opcode outside the table the empty one of IBV_WR_TSO (which
 * swverbs does not perform): no name, no flags, no QP type, IBV_WC_SEND, SWV_CNTR_SEND. */
static inline const struct swv_wr_opcode_info *swv_wr_opcode(uint32_t op)
{
	return &swv_wr_opcode_table[op < SWV_WR_OPCODES ? op : IBV_WR_TSO];
}

/* True when a QP of type t may post op (EINVAL at post otherwise, as rxe's "bad wr
 * opcode for qp type"). */
static inline bool swv_wr_opcode_allowed(enum ibv_qp_type t, uint32_t op)
{
	return (unsigned)t < 16 && (swv_wr_opcode(op)->qp_types & SWV_QPT_BIT(t)) != 0;
}

static inline bool swv_wr_is(uint32_t op, uint32_t flags)
{
	return (swv_wr_opcode(op)->flags & flags) != 0;
}

/* Operation bits of the wire opcode for packet k of npkts (SEND/WRITE families; the
 * others are single-packet). */
static inline uint8_t swv_wr_wire_op(uint32_t op, uint32_t k, uint32_t npkts)
{
	bool first = k == 0, last = k + 1 == npkts;
	enum swv_wr_pos pos = first && last ? SWV_WR_ONLY
			      : first	    ? SWV_WR_FIRST
			      : last	    ? SWV_WR_LAST
					    : SWV_WR_MIDDLE;

	return swv_wr_opcode(op)->wire[pos];
}

#endif
