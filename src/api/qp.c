/*
 * Exported QP entry points: argument checks and errno conventions; the work is in
 * src/core/qp*.c. ibv_create_qp returns NULL + errno; the others return 0 or a
 * positive errno, as libibverbs does.
 */
#include <errno.h>
#include <string.h>

#include "core/context.h"
#include "core/cq.h"
#include "core/pd.h"
#include "core/qp.h"
#include "util/compiler.h"

/* Create attributes swverbs understands (the rest answer EOPNOTSUPP). */
#define SUPPORTED_COMP_MASK (IBV_QP_INIT_ATTR_PD)

struct ibv_qp *swv_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	if (!ctx || !attr || !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd ||
	    attr->pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	/* Extended send ops (ibv_qp_ex), create flags, XRC, RSS, source QPN: not yet. */
	if (attr->comp_mask & ~(uint32_t)SUPPORTED_COMP_MASK) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	int err = 0;
	struct swv_qp *qp = swv_qp_create(to_swv_pd(attr->pd), attr, &err);
	if (!qp) {
		errno = err;
		return NULL;
	}
	return &qp->qpx.qp_base;
}

SWV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_qp_init_attr_ex ex;
	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, attr, sizeof(*attr)); /* ibv_qp_init_attr is a prefix of _ex */
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd;
	struct ibv_qp *qp = swv_create_qp_ex(pd->context, &ex);
	if (qp)
		attr->cap = ex.cap; /* the caps really provided */
	return qp;
}

SWV_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	if (!qp || !attr)
		return EINVAL;
	return swv_qp_modify(to_swv_qp(qp), attr, attr_mask);
}

SWV_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			    struct ibv_qp_init_attr *init_attr)
{
	/* attr_mask is a hint; every attribute is returned, as providers do. */
	if (!qp || !attr || !init_attr)
		return EINVAL;
	return swv_qp_query(to_swv_qp(qp), attr, init_attr);
}

SWV_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	if (!qp)
		return EINVAL;
	return swv_qp_destroy(to_swv_qp(qp));
}

SWV_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	/* Only a QP created with send ops has a usable ibv_qp_ex; none can be yet. */
	if (!qp)
		return NULL;
	struct swv_qp *q = to_swv_qp(qp);
	if (!(q->verbs_comp_mask & 2u))
		return NULL;
	return &q->qpx;
}

SWV_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
					  uint32_t flags)
{
	/* Placement is a memcpy per packet, which gives no ordering guarantee a reader
	 * could poll on; answer "not in order" (also for the capability query), as
	 * libibverbs does for providers without the feature. */
	(void)qp;
	(void)op;
	(void)flags;
	return 0;
}
