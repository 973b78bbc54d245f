/*
 * Exported QP entry points: argument checks and errno conventions; the work is in
 * src/core/qp.c (the object) and src/transport/ (its protocol state, posting and
 * state changes). ibv_create_qp returns NULL + errno; the others return 0 or a
 * positive errno, as libibverbs does.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "api/ops.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/pd.h"
#include "core/qp.h"
#include "transport/qp_ex.h"
#include "transport/qp_transport.h"
#include "transport/receive.h"
#include "progress/progress.h"
#include "util/compiler.h"

/* Create attributes swverbs understands. TSO headers and RSS (indirection table, hash)
 * are features it does not have: EOPNOTSUPP. Bits beyond the known ones are EINVAL. */
#define KNOWN_COMP_MASK                                                                            \
	(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |             \
	 IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH | \
	 IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
#define SUPPORTED_COMP_MASK                                                                        \
	(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |             \
	 IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)

/* The object's teardown up to where nothing can reach it, the transport's state,
 * then the object. */
static int destroy_qp(struct swv_qp *qp)
{
	struct swv_qp *gone;
	int rc = swv_qp_destroy_begin(qp, &gone);
	if (rc || !gone)
		return rc;
	/* An ACK left for later acknowledges what was received: it leaves before the
	 * QP goes, as a device's would have left long before (transport/receive.h). */
	swv_qp_ack_now(gone);
	swv_qp_transport_fini(gone);
	swv_qp_free(gone);
	return 0;
}

struct ibv_qp *swv_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	if (!ctx || !attr || attr->comp_mask & ~(uint32_t)KNOWN_COMP_MASK) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_mask & ~(uint32_t)SUPPORTED_COMP_MASK) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* An XRC TGT QP belongs to an XRC domain instead of a PD; every other QP needs
	 * a PD. */
	bool tgt = attr->qp_type == IBV_QPT_XRC_RECV;
	if (tgt ? !(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd ||
		      attr->xrcd->context != ctx
		: !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd ||
		      attr->pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	/* No create flag (loopback blocking, scatter FCS, CVLAN stripping, source QPN,
	 * padding) is implemented; the mask with no flag set asks for nothing (rxe's
	 * answer to a flag is EOPNOTSUPP too). */
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	bool send_ops = attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	int err = 0;
	if (send_ops) {
		err = swv_qp_ex_check_ops(attr->qp_type, attr->send_ops_flags);
		if (err) {
			errno = err;
			return NULL;
		}
	}
	struct swv_qp *qp = swv_qp_create(tgt ? NULL : to_swv_pd(attr->pd), attr, &err);
	if (!qp) {
		errno = err;
		return NULL;
	}
	/* The transport's state before the QP is published: the progress thread may
	 * deliver to it from then on. */
	err = swv_qp_transport_init(qp);
	if (!err) {
		err = swv_qp_publish(qp);
		if (err)
			swv_qp_transport_fini(qp);
	}
	if (err) {
		swv_qp_discard(qp);
		errno = err;
		return NULL;
	}
	if (send_ops) {
		err = swv_qp_ex_init(qp, attr->send_ops_flags);
		if (err) {
			destroy_qp(qp);
			errno = err;
			return NULL;
		}
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

/*
 * Moving a QP to ERR flushes what it has outstanding. Packets that reached the device
 * before the call (an ACK waiting in the socket or the inbox) are processed first, as an
 * adapter has processed what came in on the wire before a later command. The peer's CM
 * DREQ comes on another socket to another thread: libfabric's RxM, disconnecting on it,
 * otherwise flushed a send whose ACK had arrived just before the DREQ. A pass another
 * thread has under way is waited for, then one more is run: the one under way may have
 * looked at the port before the ACK came.
 */
static void drain_before_err(struct swv_qp *q)
{
	(void)swv_progress_settle(&q->ctx->progress, false);
}

SWV_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	if (!qp || !attr)
		return EINVAL;
	struct swv_qp *q = to_swv_qp(qp);
	/* A handle of ibv_open_qp modifies the TGT QP it names (core/xrcd.h). */
	if (q->open_real)
		q = q->open_real;
	if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR &&
	    q->qpx.qp_base.state != IBV_QPS_ERR && q->qpx.qp_base.state != IBV_QPS_RESET)
		drain_before_err(q);
	int rc = swv_qp_modify(q, attr, attr_mask);
	if (!rc && q != to_swv_qp(qp) && (attr_mask & IBV_QP_STATE))
		qp->state = attr->qp_state; /* the handle's copy, as libibverbs keeps it */
	return rc;
}

SWV_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			    struct ibv_qp_init_attr *init_attr)
{
	/* attr_mask is a hint; every attribute is returned, as providers do. */
	if (!qp || !attr || !init_attr)
		return EINVAL;
	struct swv_qp *q = to_swv_qp(qp);
	return swv_qp_query(q->open_real ? q->open_real : q, attr, init_attr);
}

SWV_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	if (!qp)
		return EINVAL;
	return destroy_qp(to_swv_qp(qp));
}

SWV_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	/* As rdma-core: only a QP created with send ops (VERBS_QP_EX in verbs_qp's
	 * comp_mask) has a usable ibv_qp_ex; for the others this is NULL. */
	if (!qp)
		return NULL;
	struct swv_qp *q = to_swv_qp(qp);
	if (!(q->verbs_comp_mask & SWV_VERBS_QP_EX))
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
