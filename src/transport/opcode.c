/*
 * IB transport opcode table (roce-wire.md 2.2): the headers each opcode carries, in
 * which role it travels and where it sits in a message. Parsing and building are driven
 * entirely by this table, so a header can never be read for an opcode that lacks it.
 *
 * Supported: every RC, UC and UD opcode, and swverbs' UC flow-control packet in the
 * manufacturer range. RD (no Linux implementation) and CNP are left empty (name NULL)
 * and therefore rejected on receive.
 */
#include "transport/opcode.h"

/* Header sizes (roce-wire.md 2.3). */
enum {
	BTH = 12,
	RETH = 16,
	AETH = 4,
	ATMETH = 28,
	ATMACK = 8,
	DETH = 8,
	IMM = 4,
	IETH = 4,
	FETH = 4,
};

/* Common property groups. */
#define REQ_DATA (SWV_OPF_PAYLOAD | SWV_OPF_REQUEST)
#define RSP_DATA (SWV_OPF_PAYLOAD | SWV_OPF_RESPONSE)

/* SEND and RDMA WRITE opcodes exist in both RC (prefix 0x00) and UC (prefix 0x20). */
#define RC_UC_ENTRIES(pfx, P)                                                                      \
	[(pfx) | SWV_OP_SEND_FIRST] = {P "SEND_FIRST", REQ_DATA | SWV_OPF_SEND | SWV_OPF_FIRST,   \
				       BTH},                                                       \
	[(pfx) | SWV_OP_SEND_MIDDLE] = {P "SEND_MIDDLE",                                           \
					REQ_DATA | SWV_OPF_SEND | SWV_OPF_MIDDLE, BTH},            \
	[(pfx) | SWV_OP_SEND_LAST] = {P "SEND_LAST", REQ_DATA | SWV_OPF_SEND | SWV_OPF_LAST, BTH}, \
	[(pfx) | SWV_OP_SEND_LAST_IMM] = {P "SEND_LAST_WITH_IMMEDIATE",                            \
					  SWV_HDR_IMM | REQ_DATA | SWV_OPF_SEND | SWV_OPF_LAST,    \
					  BTH + IMM},                                              \
	[(pfx) | SWV_OP_SEND_ONLY] = {P "SEND_ONLY", REQ_DATA | SWV_OPF_SEND | SWV_OPF_ONLY, BTH}, \
	[(pfx) | SWV_OP_SEND_ONLY_IMM] = {P "SEND_ONLY_WITH_IMMEDIATE",                            \
					  SWV_HDR_IMM | REQ_DATA | SWV_OPF_SEND | SWV_OPF_ONLY,    \
					  BTH + IMM},                                              \
	[(pfx) | SWV_OP_WRITE_FIRST] = {P "RDMA_WRITE_FIRST",                                      \
					SWV_HDR_RETH | REQ_DATA | SWV_OPF_WRITE | SWV_OPF_FIRST,   \
					BTH + RETH},                                               \
	[(pfx) | SWV_OP_WRITE_MIDDLE] = {P "RDMA_WRITE_MIDDLE",                                    \
					 REQ_DATA | SWV_OPF_WRITE | SWV_OPF_MIDDLE, BTH},          \
	[(pfx) | SWV_OP_WRITE_LAST] = {P "RDMA_WRITE_LAST",                                        \
				       REQ_DATA | SWV_OPF_WRITE | SWV_OPF_LAST, BTH},              \
	[(pfx) | SWV_OP_WRITE_LAST_IMM] = {P "RDMA_WRITE_LAST_WITH_IMMEDIATE",                     \
					   SWV_HDR_IMM | REQ_DATA | SWV_OPF_WRITE | SWV_OPF_LAST,  \
					   BTH + IMM},                                             \
	[(pfx) | SWV_OP_WRITE_ONLY] = {P "RDMA_WRITE_ONLY",                                        \
				       SWV_HDR_RETH | REQ_DATA | SWV_OPF_WRITE | SWV_OPF_ONLY,     \
				       BTH + RETH},                                                \
	[(pfx) | SWV_OP_WRITE_ONLY_IMM] = {                                                        \
		P "RDMA_WRITE_ONLY_WITH_IMMEDIATE",                                                \
		SWV_HDR_RETH | SWV_HDR_IMM | REQ_DATA | SWV_OPF_WRITE | SWV_OPF_ONLY,              \
		BTH + RETH + IMM}

const struct swv_opcode_info swv_opcode_table[256] = {
    RC_UC_ENTRIES(SWV_OP_RC, "RC_"),
    RC_UC_ENTRIES(SWV_OP_UC, "UC_"),

    /* RC only: READ, atomics, acknowledgements, SEND with invalidate. */
    [SWV_OP_READ_REQUEST] = {"RC_RDMA_READ_REQUEST",
			     SWV_HDR_RETH | SWV_OPF_REQUEST | SWV_OPF_READ | SWV_OPF_ONLY,
			     BTH + RETH},
    [SWV_OP_READ_RESP_FIRST] = {"RC_RDMA_READ_RESPONSE_FIRST",
				SWV_HDR_AETH | RSP_DATA | SWV_OPF_READ | SWV_OPF_FIRST, BTH + AETH},
    [SWV_OP_READ_RESP_MIDDLE] = {"RC_RDMA_READ_RESPONSE_MIDDLE",
				 RSP_DATA | SWV_OPF_READ | SWV_OPF_MIDDLE, BTH},
    [SWV_OP_READ_RESP_LAST] = {"RC_RDMA_READ_RESPONSE_LAST",
			       SWV_HDR_AETH | RSP_DATA | SWV_OPF_READ | SWV_OPF_LAST, BTH + AETH},
    [SWV_OP_READ_RESP_ONLY] = {"RC_RDMA_READ_RESPONSE_ONLY",
			       SWV_HDR_AETH | RSP_DATA | SWV_OPF_READ | SWV_OPF_ONLY, BTH + AETH},
    [SWV_OP_ACK] = {"RC_ACKNOWLEDGE", SWV_HDR_AETH | SWV_OPF_RESPONSE | SWV_OPF_ACK | SWV_OPF_ONLY,
		    BTH + AETH},
    [SWV_OP_ATOMIC_ACK] = {"RC_ATOMIC_ACKNOWLEDGE",
			   SWV_HDR_AETH | SWV_HDR_ATMACK | SWV_OPF_RESPONSE | SWV_OPF_ACK |
			       SWV_OPF_ATOMIC | SWV_OPF_ONLY,
			   BTH + AETH + ATMACK},
    [SWV_OP_CMP_SWAP] = {"RC_COMPARE_SWAP",
			 SWV_HDR_ATMETH | SWV_OPF_REQUEST | SWV_OPF_ATOMIC | SWV_OPF_ONLY,
			 BTH + ATMETH},
    [SWV_OP_FETCH_ADD] = {"RC_FETCH_ADD",
			  SWV_HDR_ATMETH | SWV_OPF_REQUEST | SWV_OPF_ATOMIC | SWV_OPF_ONLY,
			  BTH + ATMETH},
    [SWV_OP_SEND_LAST_INV] = {"RC_SEND_LAST_WITH_INVALIDATE",
			      SWV_HDR_IETH | REQ_DATA | SWV_OPF_SEND | SWV_OPF_LAST, BTH + IETH},
    [SWV_OP_SEND_ONLY_INV] = {"RC_SEND_ONLY_WITH_INVALIDATE",
			      SWV_HDR_IETH | REQ_DATA | SWV_OPF_SEND | SWV_OPF_ONLY, BTH + IETH},
    [SWV_OP_FLUSH] = {"RC_FLUSH",
		      SWV_HDR_FETH | SWV_HDR_RETH | SWV_OPF_REQUEST | SWV_OPF_FLUSH | SWV_OPF_ONLY,
		      BTH + FETH + RETH},
    [SWV_OP_ATOMIC_WRITE] = {"RC_ATOMIC_WRITE",
			     SWV_HDR_RETH | REQ_DATA | SWV_OPF_ATOMIC_WRITE | SWV_OPF_ONLY,
			     BTH + RETH},

    /* UD: only SEND_ONLY[_WITH_IMMEDIATE], always with a DETH (before ImmDt). */
    [SWV_OP_UD | SWV_OP_SEND_ONLY] = {"UD_SEND_ONLY",
				      SWV_HDR_DETH | REQ_DATA | SWV_OPF_SEND | SWV_OPF_ONLY,
				      BTH + DETH},
    [SWV_OP_UD | SWV_OP_SEND_ONLY_IMM] = {"UD_SEND_ONLY_WITH_IMMEDIATE",
					  SWV_HDR_DETH | SWV_HDR_IMM | REQ_DATA | SWV_OPF_SEND |
					      SWV_OPF_ONLY,
					  BTH + DETH + IMM},

    /* UC flow control (transport/flowctl.h): BTH + an 8-byte payload. */
    [SWV_OP_FLOW_CONTROL] = {"SWV_UC_FLOW_CONTROL",
			     SWV_OPF_PAYLOAD | SWV_OPF_FLOWCTL | SWV_OPF_ONLY, BTH},
};
