/*
 * IB transport opcode table: which headers each opcode carries and what it means.
 * Owner: transport/wire. Values from roce-wire.md section 2.2.
 */
#ifndef SWV_TRANSPORT_OPCODE_H
#define SWV_TRANSPORT_OPCODE_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

enum swv_opcode {
	SWV_OP_RC = 0x00,
	SWV_OP_UC = 0x20,
	SWV_OP_UD = 0x60,
	SWV_OP_XRC = 0xa0, /* XRC: the RC operations; requests carry an XRCETH */

	SWV_OP_SEND_FIRST = 0x00,
	SWV_OP_SEND_MIDDLE = 0x01,
	SWV_OP_SEND_LAST = 0x02,
	SWV_OP_SEND_LAST_IMM = 0x03,
	SWV_OP_SEND_ONLY = 0x04,
	SWV_OP_SEND_ONLY_IMM = 0x05,
	SWV_OP_WRITE_FIRST = 0x06,
	SWV_OP_WRITE_MIDDLE = 0x07,
	SWV_OP_WRITE_LAST = 0x08,
	SWV_OP_WRITE_LAST_IMM = 0x09,
	SWV_OP_WRITE_ONLY = 0x0a,
	SWV_OP_WRITE_ONLY_IMM = 0x0b,
	SWV_OP_READ_REQUEST = 0x0c,
	SWV_OP_READ_RESP_FIRST = 0x0d,
	SWV_OP_READ_RESP_MIDDLE = 0x0e,
	SWV_OP_READ_RESP_LAST = 0x0f,
	SWV_OP_READ_RESP_ONLY = 0x10,
	SWV_OP_ACK = 0x11,
	SWV_OP_ATOMIC_ACK = 0x12,
	SWV_OP_CMP_SWAP = 0x13,
	SWV_OP_FETCH_ADD = 0x14,
	SWV_OP_SEND_LAST_INV = 0x16,
	SWV_OP_SEND_ONLY_INV = 0x17,
	/* IBTA 1.5 (as Linux rxe): FLUSH carries FETH then RETH; ATOMIC_WRITE a RETH and
	 * the 8 bytes to write; both are answered by an ACK. */
	SWV_OP_FLUSH = 0x1c,
	SWV_OP_ATOMIC_WRITE = 0x1d,

	/* Manufacturer-specific range (prefix 0xe0): swverbs' UC flow control
	 * (transport/flowctl.h, docs/wire.md). */
	SWV_OP_FLOW_CONTROL = 0xe0,

	SWV_OP_TRANSPORT_MASK = 0xe0, /* bits 7:5: RC / UC / UD prefix */
	SWV_OP_OPERATION_MASK = 0x1f, /* bits 4:0: operation within the transport */
};

/* Extension header sizes in bytes (roce-wire.md 2.3). */
#define SWV_RETH_LEN   16
#define SWV_AETH_LEN   4
#define SWV_ATMETH_LEN 28
#define SWV_ATMACK_LEN 8
#define SWV_DETH_LEN   8
#define SWV_IMM_LEN    4
#define SWV_IETH_LEN   4
#define SWV_XRCETH_LEN 4
#define SWV_FETH_LEN   4

/* FETH: placement type (IBV_FLUSH_GLOBAL | IBV_FLUSH_PERSISTENT) in bits 3:0,
 * selectivity (IBV_FLUSH_RANGE / IBV_FLUSH_MR) in bits 5:4. */
#define SWV_FETH_PLT_MASK  0x0fu
#define SWV_FETH_SEL_SHIFT 4
#define SWV_FETH_SEL_MASK  0x30u

/* Header presence bits and opcode properties. */
enum swv_opflag {
	SWV_HDR_RETH = 1u << 0,
	SWV_HDR_AETH = 1u << 1,
	SWV_HDR_ATMETH = 1u << 2,
	SWV_HDR_ATMACK = 1u << 3,
	SWV_HDR_DETH = 1u << 4,
	SWV_HDR_IMM = 1u << 5,
	SWV_HDR_IETH = 1u << 6,
	SWV_HDR_FETH = 1u << 7,

	SWV_OPF_PAYLOAD = 1u << 8,   /* may carry payload */
	SWV_OPF_REQUEST = 1u << 9,   /* handled by the responder */
	SWV_OPF_RESPONSE = 1u << 10, /* handled by the completer */
	/* Position in a message. Single-packet opcodes (ONLY, READ request, atomics, ACKs)
	 * carry both FIRST and LAST; test (flags & SWV_OPF_ONLY) == SWV_OPF_ONLY. */
	SWV_OPF_FIRST = 1u << 11,
	SWV_OPF_MIDDLE = 1u << 12,
	SWV_OPF_LAST = 1u << 13,
	SWV_OPF_ONLY = SWV_OPF_FIRST | SWV_OPF_LAST,
	/* Operation family: SEND (incl. with imm/inv), RDMA WRITE, RDMA READ request and
	 * responses, atomic request and ATOMIC_ACKNOWLEDGE. */
	SWV_OPF_SEND = 1u << 14,
	SWV_OPF_WRITE = 1u << 15,
	SWV_OPF_READ = 1u << 16,
	SWV_OPF_ATOMIC = 1u << 17,
	SWV_OPF_ACK = 1u << 18,	    /* ACKNOWLEDGE (ACK/NAK/RNR NAK) and ATOMIC_ACKNOWLEDGE */
	SWV_OPF_FLOWCTL = 1u << 19, /* swverbs UC flow control: neither request nor response */
	SWV_OPF_FLUSH = 1u << 20,
	SWV_OPF_ATOMIC_WRITE = 1u << 21,
	/* A header, though above the properties: bits 0-7 are the other headers. */
	SWV_HDR_XRCETH = 1u << 22, /* right after BTH */
	/* The request takes a receive WQE at this packet: a SEND's first packet, a WRITE with
	 * immediate at its last (the only one that says "with immediate"). */
	SWV_OPF_RWQE = 1u << 23,
	SWV_OPF_CMPSWAP = 1u << 24, /* the atomic is COMPARE_SWAP (else FETCH_ADD) */
	/* What the responder answers as an RDMA WRITE: acknowledged, replayed (never
	 * re-executed), kept past a gap and counted as RDMA WRITEs are -- ATOMIC_WRITE and
	 * FLUSH included. */
	SWV_OPF_WRITE_LIKE = SWV_OPF_WRITE | SWV_OPF_FLUSH | SWV_OPF_ATOMIC_WRITE,
};

/* QP types that carry an opcode (swv_opcode_info.qp_types): bit IBV_QPT_* set. XRC opcodes
 * travel between XRC_SEND and XRC_RECV QPs; the demux (transport/receive.c) hands their requests to
 * the target as RC operations. */
#define SWV_QPT_BIT(t) ((uint16_t)(1u << (t)))

struct swv_opcode_info {
	const char *name; /* e.g. "RC_SEND_ONLY"; NULL = opcode not supported by swverbs */
	uint32_t flags;   /* SWV_HDR_* | SWV_OPF_* */
	uint8_t hdr_len;  /* BTH + extension headers, bytes */
	uint16_t qp_types; /* SWV_QPT_BIT() of each QP type that carries it */
};

extern const struct swv_opcode_info swv_opcode_table[256];

static inline const struct swv_opcode_info *swv_opcode(uint8_t op)
{
	return &swv_opcode_table[op];
}

/* True when swverbs implements opcode op (RC, UC, UD, XRC and its flow-control opcode; not
 * RD/CNP/...). */
static inline int swv_opcode_supported(uint8_t op)
{
	return swv_opcode_table[op].name != 0;
}

/* True when a QP of type t carries opcode op. */
static inline bool swv_opcode_carried_by(uint8_t op, enum ibv_qp_type t)
{
	return (unsigned)t < 16 && (swv_opcode_table[op].qp_types & SWV_QPT_BIT(t)) != 0;
}

/* The flags of op when it is a request a QP of type t serves, else 0 (wrong transport
 * prefix, a response or flow-control opcode, UC READ, ...). The responder trusts nothing
 * but this byte's table entry. */
static inline uint32_t swv_opcode_request(enum ibv_qp_type t, uint8_t op)
{
	uint32_t f = swv_opcode_table[op].flags;

	return (f & SWV_OPF_REQUEST) && swv_opcode_carried_by(op, t) ? f : 0;
}

/* Transport prefix of an opcode: SWV_OP_RC, SWV_OP_UC, SWV_OP_UD or SWV_OP_XRC for supported
 * ones. */
static inline uint8_t swv_opcode_transport(uint8_t op)
{
	return op & SWV_OP_TRANSPORT_MASK;
}

#endif
