/*
 * Tag-matching message headers, with rdma-core's names and layout: a tag-matching
 * SEND starts with a struct ibv_tmh; a rendezvous request follows it with a struct
 * ibv_rvh naming the sender's buffer. Every field is big-endian on the wire.
 */
#ifndef SWV_INFINIBAND_TM_TYPES_H
#define SWV_INFINIBAND_TM_TYPES_H

#include <linux/types.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ibv_tmh_op {
	IBV_TMH_NO_TAG = 0,
	IBV_TMH_RNDV = 1,
	IBV_TMH_FIN = 2,
	IBV_TMH_EAGER = 3,
};

struct ibv_tmh {
	uint8_t opcode; /* enum ibv_tmh_op */
	uint8_t reserved[3];
	__be32 app_ctx; /* opaque to the receiver's device; ibv_wc_tm_info.priv */
	__be64 tag;
};

struct ibv_rvh {
	__be64 va;
	__be32 rkey;
	__be32 len;
};

#ifdef __cplusplus
}
#endif

#endif
