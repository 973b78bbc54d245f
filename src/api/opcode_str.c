/*
 * ibv_wr_opcode_str (rdma-core 65). The other ibv_*_str helpers are core's
 * (src/api/strings.c); this one arrived later, with the same conventions: a fixed
 * table, rdma-core's wording, "unknown" for anything else.
 */
#include <infiniband/verbs.h>

#include "util/compiler.h"

SWV_EXPORT const char *ibv_wr_opcode_str(enum ibv_wr_opcode opcode)
{
	static const char *const names[] = {
	    [IBV_WR_RDMA_WRITE] = "rdma-write",
	    [IBV_WR_RDMA_WRITE_WITH_IMM] = "rdma-write-with-imm",
	    [IBV_WR_SEND] = "send",
	    [IBV_WR_SEND_WITH_IMM] = "send-with-imm",
	    [IBV_WR_RDMA_READ] = "rdma-read",
	    [IBV_WR_ATOMIC_CMP_AND_SWP] = "atomic-cmp-and-swp",
	    [IBV_WR_ATOMIC_FETCH_AND_ADD] = "atomic-fetch-and-add",
	    [IBV_WR_LOCAL_INV] = "local-inv",
	    [IBV_WR_BIND_MW] = "bind-mw",
	    [IBV_WR_SEND_WITH_INV] = "send-with-inv",
	    [IBV_WR_TSO] = "tso",
	    [IBV_WR_DRIVER1] = "driver1",
	    [IBV_WR_FLUSH] = "flush",
	    [IBV_WR_ATOMIC_WRITE] = "atomic-write",
	};
	/* 12 and 13 are unassigned: the table has holes, which read as "unknown". */
	if ((unsigned)opcode >= SWV_ARRAY_SIZE(names) || !names[opcode])
		return "unknown";
	return names[opcode];
}
