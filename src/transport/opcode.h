/*
 * IB transport opcode table: which headers each opcode carries and what it means.
 * Owner: transport/wire. Values from roce-wire.md section 2.2.
 */
#ifndef SWV_TRANSPORT_OPCODE_H
#define SWV_TRANSPORT_OPCODE_H

#include <stdint.h>

enum swv_opcode {
	SWV_OP_RC = 0x00,
	SWV_OP_UC = 0x20,
	SWV_OP_UD = 0x60,

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
};

struct swv_opcode_info {
	const char *name; /* e.g. "RC_SEND_ONLY"; NULL = opcode not supported by swverbs */
	uint32_t flags;   /* SWV_HDR_* | SWV_OPF_* */
	uint8_t hdr_len;  /* BTH + extension headers, bytes */
};

extern const struct swv_opcode_info swv_opcode_table[256];

static inline const struct swv_opcode_info *swv_opcode(uint8_t op)
{
	return &swv_opcode_table[op];
}

/* True when swverbs implements opcode op (RC, UC, UD and its flow-control opcode; not
 * RD/CNP/...). */
static inline int swv_opcode_supported(uint8_t op)
{
	return swv_opcode_table[op].name != 0;
}

/* Transport prefix of an opcode: SWV_OP_RC, SWV_OP_UC or SWV_OP_UD for supported ones. */
static inline uint8_t swv_opcode_transport(uint8_t op)
{
	return op & SWV_OP_TRANSPORT_MASK;
}

#endif
