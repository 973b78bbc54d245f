/*
 * Entry points of src/api/ that a context answers through its ops table
 * (src/api/context.c) rather than as exported symbols: libibverbs' inline wrappers
 * and the exported functions that dispatch through ibv_context.ops call them.
 */
#ifndef SWV_API_OPS_H
#define SWV_API_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/* memory windows, type 1 and 2B (mw.c) */
struct ibv_mw *swv_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int swv_dealloc_mw(struct ibv_mw *mw);
int swv_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);
/* query.c; attr sizes are the caller's */
int swv_query_port(struct ibv_context *ibctx, uint8_t port_num, struct ibv_port_attr *attr,
		   size_t attr_len);
int swv_query_device_ex(struct ibv_context *ibctx, const struct ibv_query_device_ex_input *input,
			struct ibv_device_attr_ex *attr, size_t attr_size);
/* qp.c: ibv_create_qp_ex beyond a plain PD */
struct ibv_qp *swv_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
/* cq_ex.c: extended CQs (NULL + errno) and the completion clock */
struct ibv_cq_ex *swv_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
int swv_query_rt_values(struct ibv_context *ctx, struct ibv_values_ex *values);

#endif
