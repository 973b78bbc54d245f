/*
 * The ibv_qp_ex posting API (ibv_wr_start ... ibv_wr_complete). Owner: qp_ex.
 *
 * A QP created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS carries a batch builder
 * (struct swv_wr_batch, qp->wr_batch). wr_start opens a batch; each wr_<op> stages
 * one work request, reading qpx->wr_id and qpx->wr_flags at that moment; the
 * wr_set_* setters fill in the last staged one. wr_complete hands the whole batch to
 * swv_post_send_batch, which checks every request (the same checks ibv_post_send
 * makes) and the room for all of them before queueing any: a batch posts completely
 * or not at all. wr_abort drops it.
 *
 * The wr_* callbacks return nothing, so a bad call is remembered as the batch's
 * first error and reported by wr_complete (which then posts nothing), as rdma-core's
 * providers do.
 */
#ifndef SWV_TRANSPORT_QP_EX_H
#define SWV_TRANSPORT_QP_EX_H

#include <infiniband/verbs.h>
#include <stdint.h>

struct swv_qp;

/* rdma-core's verbs_qp.comp_mask bit saying the QP is an ibv_qp_ex (driver.h). */
#define SWV_VERBS_QP_EX (1u << 1)

/* Send ops this device performs for a QP type (0 for types it cannot create). */
uint64_t swv_qp_ex_supported_ops(enum ibv_qp_type type);

/* 0 when every bit of send_ops_flags is an op the type supports, else EOPNOTSUPP
 * (memory windows, invalidation, TSO, atomic write and flush are not implemented;
 * READ and atomics need RC, RDMA WRITE needs RC or UC). */
int swv_qp_ex_check_ops(enum ibv_qp_type type, uint64_t send_ops_flags);

/* Give qp its ibv_qp_ex: every wr_* pointer set, VERBS_QP_EX in verbs_qp.comp_mask,
 * the batch builder allocated. 0 or ENOMEM. Call once, right after swv_qp_create. */
int swv_qp_ex_init(struct swv_qp *qp, uint64_t send_ops_flags);

/* Free the batch builder (swv_qp_transport_fini calls it; no-op without one). */
void swv_qp_ex_fini(struct swv_qp *qp);

/* Defined in post.c: post a chain of send WRs all-or-nothing. Every WR is checked
 * as ibv_post_send checks it, and the send queue must have room for all of them,
 * before any is queued. Returns 0 or the errno ibv_post_send would return for the
 * first bad WR (*bad = that WR); nothing is posted then. */
int swv_post_send_batch(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
/* ibv_bind_mw: post the one IBV_WR_BIND_MW of a type 1 window (refused from any
 * other caller). 0 or the errno of ibv_post_send. */
int swv_post_bind_type1(struct ibv_qp *qp, struct ibv_send_wr *wr);

#endif
