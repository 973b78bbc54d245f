/*
 * Memory windows: the ibv_context_ops behind rdma-core's inline ibv_alloc_mw,
 * ibv_dealloc_mw and ibv_bind_mw. The window and every check of a bind live in
 * core/mr.c; a bind executes from the send queue (transport/requester.c).
 */
#include <errno.h>
#include <string.h>

#include "api/ops.h"
#include "core/context.h"
#include "core/mr.h"
#include "core/pd.h"
#include "core/qp.h"
#include "transport/qp_ex.h"
#include "util/compiler.h"

struct ibv_mw *swv_alloc_mw(struct ibv_pd *ibpd, enum ibv_mw_type type)
{
	if (!ibpd) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_mw *mw = swv_mw_alloc(to_swv_ctx(ibpd->context), to_swv_pd(ibpd), type);
	return mw ? &mw->ibmw : NULL;
}

int swv_dealloc_mw(struct ibv_mw *ibmw)
{
	if (!ibmw)
		return EINVAL;
	swv_mw_dealloc(to_swv_ctx(ibmw->context), to_swv_mw(ibmw));
	return 0;
}

/* Type 1 (libibverbs checked the type, an unbind with a range, and the PDs): the
 * checks rxe's provider makes before posting (EINVAL), then one IBV_WR_BIND_MW on the
 * QP with the next key (ibv_inc_rkey), which becomes the window's rkey once posted.
 * What only the bind itself can tell completes with IBV_WC_MW_BIND_ERR. */
int swv_bind_mw(struct ibv_qp *qp, struct ibv_mw *ibmw, struct ibv_mw_bind *mw_bind)
{
	if (!qp || !ibmw || !mw_bind || qp->context != ibmw->context)
		return EINVAL;
	const struct ibv_mw_bind_info *bi = &mw_bind->bind_info;
	if (bi->mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return EINVAL; /* o10-36.2.2 */
	if (bi->mr) {
		uint64_t start = (uintptr_t)bi->mr->addr;
		if (!(to_swv_mr(bi->mr)->access & IBV_ACCESS_MW_BIND) || bi->addr < start ||
		    bi->length > bi->mr->length || bi->addr - start > bi->mr->length - bi->length)
			return EINVAL;
	}
	struct ibv_send_wr wr;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = mw_bind->wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = mw_bind->send_flags;
	wr.bind_mw.mw = ibmw;
	wr.bind_mw.rkey = ibv_inc_rkey(ibmw->rkey);
	wr.bind_mw.bind_info = *bi;
	int rc = swv_post_bind_type1(qp, &wr);
	if (!rc)
		ibmw->rkey = wr.bind_mw.rkey;
	return rc;
}
