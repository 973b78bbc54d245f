/*
 * IB transport opcode table (roce-wire.md 2.2): the headers each opcode carries, in
 * which role it travels and where it sits in a message. Parsing and building are driven
 * entirely by this table, so a header can never be read for an opcode that lacks it.
 *
 * Supported: every RC, UC, UD and XRC opcode (RC's FLUSH and ATOMIC_WRITE included), and
 * swverbs' UC flow-control packet in the manufacturer range. RD (no Linux implementation),
 * CNP, and FLUSH/ATOMIC_WRITE under the XRC prefix (neither Linux nor the rxe XRC work
 * defines them) are left empty (name NULL) and therefore rejected on receive.
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
	XRCETH = 4,
	FETH = 4,
};

/* Which QP types carry an opcode, by transport prefix. */
#define RC_QP  SWV_QPT_BIT(IBV_QPT_RC)
#define UC_QP  SWV_QPT_BIT(IBV_QPT_UC)
#define UD_QP  SWV_QPT_BIT(IBV_QPT_UD)
#define XRC_QP (SWV_QPT_BIT(IBV_QPT_XRC_SEND) | SWV_QPT_BIT(IBV_QPT_XRC_RECV))

/* Common property groups. */
#define REQ_DATA (SWV_OPF_PAYLOAD | SWV_OPF_REQUEST)
#define RSP_DATA (SWV_OPF_PAYLOAD | SWV_OPF_RESPONSE)

/* SEND and RDMA WRITE opcodes exist in both RC (prefix 0x00) and UC (prefix 0x20). */
#define RC_UC_ENTRIES(pfx, P, X, XL, Q)                                                            \
	[(pfx) | SWV_OP_SEND_FIRST] = {P "SEND_FIRST",                                             \
				       X | REQ_DATA | SWV_OPF_SEND | SWV_OPF_FIRST | SWV_OPF_RWQE, \
				       BTH + XL, Q},                                               \
	[(pfx) | SWV_OP_SEND_MIDDLE] = {P "SEND_MIDDLE",                                           \
					X | REQ_DATA | SWV_OPF_SEND | SWV_OPF_MIDDLE,              \
					BTH + XL, Q},                                              \
	[(pfx) | SWV_OP_SEND_LAST] = {P "SEND_LAST",                                               \
				      X | REQ_DATA | SWV_OPF_SEND | SWV_OPF_LAST, BTH + XL, Q},    \
	[(pfx) | SWV_OP_SEND_LAST_IMM] = {P "SEND_LAST_WITH_IMMEDIATE",                            \
					  SWV_HDR_IMM | X | REQ_DATA | SWV_OPF_SEND | SWV_OPF_LAST, \
					  BTH + XL + IMM, Q},                                      \
	[(pfx) | SWV_OP_SEND_ONLY] = {P "SEND_ONLY",                                               \
				      X | REQ_DATA | SWV_OPF_SEND | SWV_OPF_ONLY | SWV_OPF_RWQE,   \
				      BTH + XL, Q},                                                \
	[(pfx) | SWV_OP_SEND_ONLY_IMM] = {P "SEND_ONLY_WITH_IMMEDIATE",                            \
					  SWV_HDR_IMM | X | REQ_DATA | SWV_OPF_SEND |              \
						  SWV_OPF_ONLY | SWV_OPF_RWQE,                     \
					  BTH + XL + IMM, Q},                                      \
	[(pfx) | SWV_OP_WRITE_FIRST] = {P "RDMA_WRITE_FIRST",                                      \
					SWV_HDR_RETH | X | REQ_DATA | SWV_OPF_WRITE | SWV_OPF_FIRST, \
					BTH + XL + RETH, Q},                                       \
	[(pfx) | SWV_OP_WRITE_MIDDLE] = {P "RDMA_WRITE_MIDDLE",                                    \
					 X | REQ_DATA | SWV_OPF_WRITE | SWV_OPF_MIDDLE,            \
					 BTH + XL, Q},                                             \
	[(pfx) | SWV_OP_WRITE_LAST] = {P "RDMA_WRITE_LAST",                                        \
				       X | REQ_DATA | SWV_OPF_WRITE | SWV_OPF_LAST, BTH + XL, Q},  \
	[(pfx) | SWV_OP_WRITE_LAST_IMM] = {P "RDMA_WRITE_LAST_WITH_IMMEDIATE",                     \
					   SWV_HDR_IMM | X | REQ_DATA | SWV_OPF_WRITE |            \
						   SWV_OPF_LAST | SWV_OPF_RWQE,                    \
					   BTH + XL + IMM, Q},                                     \
	[(pfx) | SWV_OP_WRITE_ONLY] = {P "RDMA_WRITE_ONLY",                                        \
				       SWV_HDR_RETH | X | REQ_DATA | SWV_OPF_WRITE | SWV_OPF_ONLY, \
				       BTH + XL + RETH, Q},                                        \
	[(pfx) | SWV_OP_WRITE_ONLY_IMM] = {                                                        \
		P "RDMA_WRITE_ONLY_WITH_IMMEDIATE",                                                \
		X | SWV_HDR_RETH | SWV_HDR_IMM | REQ_DATA | SWV_OPF_WRITE | SWV_OPF_ONLY |         \
		SWV_OPF_RWQE,                                                                      \
		BTH + XL + RETH + IMM, Q}

/* RC only (and XRC): READ, atomics, acknowledgements, SEND with invalidate. X and XL are
 * the XRCETH flag and length, which only requests carry. */
#define RC_ONLY_ENTRIES(pfx, P, X, XL, Q)                                                          \
	[(pfx) | SWV_OP_READ_REQUEST] = {P "RDMA_READ_REQUEST",                                    \
					 X | SWV_HDR_RETH | SWV_OPF_REQUEST | SWV_OPF_READ |       \
						 SWV_OPF_ONLY,                                     \
					 BTH + XL + RETH, Q},                                      \
	[(pfx) | SWV_OP_READ_RESP_FIRST] = {P "RDMA_READ_RESPONSE_FIRST",                          \
					    SWV_HDR_AETH | RSP_DATA | SWV_OPF_READ | SWV_OPF_FIRST, \
					    BTH + AETH, Q},                                        \
	[(pfx) | SWV_OP_READ_RESP_MIDDLE] = {P "RDMA_READ_RESPONSE_MIDDLE",                        \
					     RSP_DATA | SWV_OPF_READ | SWV_OPF_MIDDLE, BTH, Q},    \
	[(pfx) | SWV_OP_READ_RESP_LAST] = {P "RDMA_READ_RESPONSE_LAST",                            \
					   SWV_HDR_AETH | RSP_DATA | SWV_OPF_READ | SWV_OPF_LAST,  \
					   BTH + AETH, Q},                                         \
	[(pfx) | SWV_OP_READ_RESP_ONLY] = {P "RDMA_READ_RESPONSE_ONLY",                            \
					   SWV_HDR_AETH | RSP_DATA | SWV_OPF_READ | SWV_OPF_ONLY,  \
					   BTH + AETH, Q},                                         \
	[(pfx) | SWV_OP_ACK] = {P "ACKNOWLEDGE",                                                   \
				SWV_HDR_AETH | SWV_OPF_RESPONSE | SWV_OPF_ACK | SWV_OPF_ONLY,      \
				BTH + AETH, Q},                                                    \
	[(pfx) | SWV_OP_ATOMIC_ACK] = {P "ATOMIC_ACKNOWLEDGE",                                     \
				       SWV_HDR_AETH | SWV_HDR_ATMACK | SWV_OPF_RESPONSE |          \
					       SWV_OPF_ACK | SWV_OPF_ATOMIC | SWV_OPF_ONLY,        \
				       BTH + AETH + ATMACK, Q},                                    \
	[(pfx) | SWV_OP_CMP_SWAP] = {P "COMPARE_SWAP",                                             \
				     X | SWV_HDR_ATMETH | SWV_OPF_REQUEST | SWV_OPF_ATOMIC |       \
					     SWV_OPF_CMPSWAP | SWV_OPF_ONLY,                       \
				     BTH + XL + ATMETH, Q},                                        \
	[(pfx) | SWV_OP_FETCH_ADD] = {P "FETCH_ADD",                                               \
				      X | SWV_HDR_ATMETH | SWV_OPF_REQUEST | SWV_OPF_ATOMIC |      \
					      SWV_OPF_ONLY,                                        \
				      BTH + XL + ATMETH, Q},                                       \
	[(pfx) | SWV_OP_SEND_LAST_INV] = {P "SEND_LAST_WITH_INVALIDATE",                           \
					  X | SWV_HDR_IETH | REQ_DATA | SWV_OPF_SEND |             \
						  SWV_OPF_LAST,                                    \
					  BTH + XL + IETH, Q},                                     \
	[(pfx) | SWV_OP_SEND_ONLY_INV] = {P "SEND_ONLY_WITH_INVALIDATE",                           \
					  X | SWV_HDR_IETH | REQ_DATA | SWV_OPF_SEND |             \
						  SWV_OPF_ONLY | SWV_OPF_RWQE,                     \
					  BTH + XL + IETH, Q}

const struct swv_opcode_info swv_opcode_table[256] = {
	RC_UC_ENTRIES(SWV_OP_RC, "RC_", 0, 0, RC_QP),
	RC_UC_ENTRIES(SWV_OP_UC, "UC_", 0, 0, UC_QP),

	RC_ONLY_ENTRIES(SWV_OP_RC, "RC_", 0, 0, RC_QP),
	[SWV_OP_FLUSH] = {"RC_FLUSH",
			  SWV_HDR_FETH | SWV_HDR_RETH | SWV_OPF_REQUEST | SWV_OPF_FLUSH |
				  SWV_OPF_ONLY,
			  BTH + FETH + RETH, RC_QP},
	[SWV_OP_ATOMIC_WRITE] = {"RC_ATOMIC_WRITE",
				 SWV_HDR_RETH | REQ_DATA | SWV_OPF_ATOMIC_WRITE | SWV_OPF_ONLY,
				 BTH + RETH, RC_QP},

	/* XRC (IB spec, as rxe's and Wireshark's tables name them): the RC operations under
	 * prefix 0xa0; every request carries an XRCETH (the target SRQ number) after BTH,
	 * responses do not. No XRC FLUSH or ATOMIC_WRITE: 0xbc and 0xbd stay empty. */
	RC_UC_ENTRIES(SWV_OP_XRC, "XRC_", SWV_HDR_XRCETH, XRCETH, XRC_QP),
	RC_ONLY_ENTRIES(SWV_OP_XRC, "XRC_", SWV_HDR_XRCETH, XRCETH, XRC_QP),

	/* UD: only SEND_ONLY[_WITH_IMMEDIATE], always with a DETH (before ImmDt). */
	[SWV_OP_UD | SWV_OP_SEND_ONLY] = {"UD_SEND_ONLY",
					  SWV_HDR_DETH | REQ_DATA | SWV_OPF_SEND | SWV_OPF_ONLY |
						  SWV_OPF_RWQE,
					  BTH + DETH, UD_QP},
	[SWV_OP_UD | SWV_OP_SEND_ONLY_IMM] = {"UD_SEND_ONLY_WITH_IMMEDIATE",
					      SWV_HDR_DETH | SWV_HDR_IMM | REQ_DATA |
						      SWV_OPF_SEND | SWV_OPF_ONLY | SWV_OPF_RWQE,
					      BTH + DETH + IMM, UD_QP},

	/* UC flow control (transport/flowctl.h): BTH + an 8-byte payload. */
	[SWV_OP_FLOW_CONTROL] = {"SWV_UC_FLOW_CONTROL",
				 SWV_OPF_PAYLOAD | SWV_OPF_FLOWCTL | SWV_OPF_ONLY, BTH, UC_QP},
};
