/*
 * Device limits: everything ibv_query_device(_ex) and ibv_query_port report, and what
 * the modules enforce against, in one place. api/query.c reports these; the module
 * owning each object checks them (QP caps: core/qp.c, transport/qp_state.c; CQ size:
 * core/cq.c; MR/MW count: core/mr.c; SRQ: core/srq.c; TM: core/srq_tm.c; multicast:
 * core/mcast.c; DM: core/dm.c; message size: transport/post.c and the responder).
 * Configured per device instead, in net/config.h (net/ is below core/): the number of
 * completion counters (max_cntrs=, SWV_DEFAULT_MAX_CNTRS) and the P_Key table
 * (SWV_MAX_PKEYS).
 */
#ifndef SWV_CORE_LIMITS_H
#define SWV_CORE_LIMITS_H

#include "net/addr.h"

/* QPs per context (max_qp): each of up to 64 UDP sockets carries SWV_QPN_SLOTS QPNs
 * (net/addr.h), 64 x 256 = 16384. */
#define SWV_MAX_QP_PORTS 64
#define SWV_MAX_QP	 (SWV_MAX_QP_PORTS * SWV_QPN_SLOTS)

/* Per queue (max_qp_wr, max_sge, max_sge_rd): the most ibv_create_qp's caps may ask. */
#define SWV_QP_MAX_WR  16384
#define SWV_QP_MAX_SGE 32
/* Inline data shares a send WQE's SGE area (core/qp.c): the most a QP may ask for,
 * 256 bytes being what 16 SGEs (16 x 16 bytes) would take. */
#define SWV_QP_MAX_INLINE 256
/* Message size (port max_msg_sz): 2^31, the IB limit the 32-bit RETH DMA length
 * serves; checked at post and on every RETH the responder receives. */
#define SWV_MAX_MSG_SIZE (1u << 31)
/* READ/atomic resources (max_qp_rd_atom, max_qp_init_rd_atom; max_res_rd_atom is
 * this per QP): the size of the responder's replay ring, a power of two. */
#define SWV_MAX_RD_ATOMIC 16

/* Shared receive queues (max_srq per context, max_srq_wr, max_srq_sge). */
#define SWV_MAX_SRQ	65536
#define SWV_SRQ_MAX_WR	16384
#define SWV_SRQ_MAX_SGE 32

/* Tag matching on RC SRQs (tm_caps). */
#define SWV_TM_MAX_NUM_TAGS 1024	    /* tags in the list at once */
#define SWV_TM_MAX_OPS	    1024	    /* outstanding list operations */
#define SWV_TM_MAX_SGE	    SWV_SRQ_MAX_SGE /* also bounded by the SRQ's max_sge */
#define SWV_TM_MAX_RNDV_HDR 64		    /* max_rndv_hdr_size: TMH + RVH + 32 */

/* CQs (max_cq, max_cqe). The number of CQs is advertised, not counted: memory bounds
 * it. A CQ's size is checked at create and resize. */
#define SWV_DEV_MAX_CQ	65536
#define SWV_DEV_MAX_CQE (1 << 20)

/* Memory regions and windows (max_mr, max_mw share the key table): 16-bit key index,
 * index 0 unused. */
#define SWV_DEV_MAX_MR 65535
/* max_mr_size: a user-space VA range can never exceed it. */
#define SWV_DEV_MAX_MR_SIZE (1ull << 46)

/* PDs and AHs (max_pd, max_ah): advertised, not counted -- memory bounds them. */
#define SWV_DEV_MAX_PD 65536
#define SWV_DEV_MAX_AH 65536

/* Device memory per context (max_dm_size): pages the library maps for itself. */
#define SWV_DEV_MAX_DM_SIZE (1ull << 20)

/* UD multicast (max_mcast_grp, max_mcast_qp_attach; max_total_mcast_qp_attach is the
 * product): fixed tables in the context and in each group. */
#define SWV_MCAST_MAX_GRP	64
#define SWV_MCAST_MAX_QP_ATTACH 56

/* GID table per port (gid_tbl_len): [0] = the device GID, [1] empty. */
#define SWV_GID_TBL_LEN 2

#endif
