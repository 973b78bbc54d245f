/*
 * Send work request opcodes (transport/wr_opcode.h). Which QP types post what follows
 * the transports (docs/wire.md): UD only SENDs; UC adds RDMA WRITE and the local
 * memory-window operations (rxe: RC and UC); RC adds READ, atomics, SEND with
 * invalidate (the wire has only RC SEND_*_WITH_INVALIDATE), ATOMIC_WRITE and FLUSH. An
 * XRC INI QP posts SENDs, WRITEs, READ and the atomics -- XRC has no opcode for
 * ATOMIC_WRITE or FLUSH, and windows and SEND_WITH_INV are not built for XRC. The
 * ibv_wr_* builder offers each QP type the same set (transport/qp_ex.c).
 */
#include "transport/wr_opcode.h"

#define RC	SWV_QPT_BIT(IBV_QPT_RC)
#define UC	SWV_QPT_BIT(IBV_QPT_UC)
#define UD	SWV_QPT_BIT(IBV_QPT_UD)
#define XRC_INI SWV_QPT_BIT(IBV_QPT_XRC_SEND)

/* Property groups: READ and the atomics hold an rd_atomic resource and write locally;
 * the atomics read wr.atomic; ATOMIC_WRITE and FLUSH come staged in wr.atomic by the
 * builder. */
#define RD_ATOMIC  (SWV_WRF_RD_ATOMIC | SWV_WRF_NO_INLINE)
#define ATOMIC	   (SWV_WRF_ATOMIC | RD_ATOMIC | SWV_WRF_ATOMIC_FIELDS)
#define BUILDER_OP (SWV_WRF_ATOMIC_FIELDS | SWV_WRF_BUILDER | SWV_WRF_NO_INLINE)

/* A single-packet operation: the same wire opcode whatever the position. */
#define ONE(op)                                                                                    \
	{                                                                                          \
		op, op, op, op                                                                     \
	}

const struct swv_wr_opcode_info swv_wr_opcode_table[SWV_WR_OPCODES] = {
    [IBV_WR_SEND] = {"SEND",
		     SWV_WRF_SEND,
		     RC | UC | UD | XRC_INI,
		     {SWV_OP_SEND_ONLY, SWV_OP_SEND_FIRST, SWV_OP_SEND_MIDDLE, SWV_OP_SEND_LAST},
		     IBV_WC_SEND,
		     SWV_CNTR_SEND,
		     IBV_QP_EX_WITH_SEND},
    [IBV_WR_SEND_WITH_IMM] = {"SEND_WITH_IMM",
			      SWV_WRF_SEND | SWV_WRF_IMM,
			      RC | UC | UD | XRC_INI,
			      {SWV_OP_SEND_ONLY_IMM, SWV_OP_SEND_FIRST, SWV_OP_SEND_MIDDLE,
			       SWV_OP_SEND_LAST_IMM},
			      IBV_WC_SEND,
			      SWV_CNTR_SEND,
			      IBV_QP_EX_WITH_SEND_WITH_IMM},
    [IBV_WR_SEND_WITH_INV] = {"SEND_WITH_INV",
			      SWV_WRF_SEND | SWV_WRF_INV,
			      RC,
			      {SWV_OP_SEND_ONLY_INV, SWV_OP_SEND_FIRST, SWV_OP_SEND_MIDDLE,
			       SWV_OP_SEND_LAST_INV},
			      IBV_WC_SEND,
			      SWV_CNTR_SEND,
			      IBV_QP_EX_WITH_SEND_WITH_INV},
    [IBV_WR_RDMA_WRITE] = {"RDMA_WRITE",
			   SWV_WRF_WRITE | SWV_WRF_RDMA_FIELDS,
			   RC | UC | XRC_INI,
			   {SWV_OP_WRITE_ONLY, SWV_OP_WRITE_FIRST, SWV_OP_WRITE_MIDDLE,
			    SWV_OP_WRITE_LAST},
			   IBV_WC_RDMA_WRITE,
			   SWV_CNTR_RDMA_WRITE,
			   IBV_QP_EX_WITH_RDMA_WRITE},
    [IBV_WR_RDMA_WRITE_WITH_IMM] = {"RDMA_WRITE_WITH_IMM",
				    SWV_WRF_WRITE | SWV_WRF_IMM | SWV_WRF_RDMA_FIELDS,
				    RC | UC | XRC_INI,
				    {SWV_OP_WRITE_ONLY_IMM, SWV_OP_WRITE_FIRST, SWV_OP_WRITE_MIDDLE,
				     SWV_OP_WRITE_LAST_IMM},
				    IBV_WC_RDMA_WRITE,
				    SWV_CNTR_RDMA_WRITE,
				    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM},
    /* READ: one request whatever the length; the responses are the responder's */
    [IBV_WR_RDMA_READ] = {"RDMA_READ", SWV_WRF_READ | RD_ATOMIC | SWV_WRF_RDMA_FIELDS, RC | XRC_INI,
			  ONE(SWV_OP_READ_REQUEST), IBV_WC_RDMA_READ, SWV_CNTR_RDMA_READ,
			  IBV_QP_EX_WITH_RDMA_READ},
    [IBV_WR_ATOMIC_CMP_AND_SWP] = {"ATOMIC_CMP_AND_SWP", ATOMIC, RC | XRC_INI, ONE(SWV_OP_CMP_SWAP),
				   IBV_WC_COMP_SWAP, SWV_CNTR_ATOMIC,
				   IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP},
    [IBV_WR_ATOMIC_FETCH_AND_ADD] = {"ATOMIC_FETCH_AND_ADD", ATOMIC, RC | XRC_INI,
				     ONE(SWV_OP_FETCH_ADD), IBV_WC_FETCH_ADD, SWV_CNTR_ATOMIC,
				     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD},
    /* The builder stages both in wr.atomic: remote_addr, rkey, and for ATOMIC_WRITE
     * the 8 bytes in swap, for FLUSH the length in compare_add and type | level << 8
     * in swap. Counted as WRITEs: an 8-byte WRITE done atomically, and the FLUSH
     * that completes WRITEs (docs/counters.md). */
    [IBV_WR_ATOMIC_WRITE] = {"ATOMIC_WRITE", SWV_WRF_ATOMIC_WRITE | BUILDER_OP, RC,
			     ONE(SWV_OP_ATOMIC_WRITE), IBV_WC_ATOMIC_WRITE, SWV_CNTR_RDMA_WRITE,
			     IBV_QP_EX_WITH_ATOMIC_WRITE},
    [IBV_WR_FLUSH] = {"FLUSH", SWV_WRF_FLUSH | BUILDER_OP, RC, ONE(SWV_OP_FLUSH), IBV_WC_FLUSH,
		      SWV_CNTR_RDMA_WRITE, IBV_QP_EX_WITH_FLUSH},
    /* Local operations on a connected QP; they count as SENDs (docs/counters.md). */
    [IBV_WR_BIND_MW] = {"BIND_MW",
			SWV_WRF_LOCAL | SWV_WRF_NO_INLINE,
			RC | UC,
			{0},
			IBV_WC_BIND_MW,
			SWV_CNTR_SEND,
			IBV_QP_EX_WITH_BIND_MW},
    [IBV_WR_LOCAL_INV] = {"LOCAL_INV",
			  SWV_WRF_LOCAL | SWV_WRF_NO_INLINE,
			  RC | UC,
			  {0},
			  IBV_WC_LOCAL_INV,
			  SWV_CNTR_SEND,
			  IBV_QP_EX_WITH_LOCAL_INV},
};
