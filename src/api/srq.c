/*
 * Exported SRQ entry points: argument checks and errno conventions (ibv_create_srq
 * returns NULL + errno, the others 0 or a positive errno); the work is in
 * src/core/srq.c. ibv_post_srq_recv is inline and reaches ctx->ops.post_srq_recv;
 * ibv_create_srq_ex is inline too and sends basic SRQs on a PD here, anything else
 * to verbs_context.create_srq_ex (core/srq.c: XRC and tag-matching SRQs).
 * ibv_get_srq_num goes to verbs_context.get_srq_num (core/xrcd.c).
 */
#include <errno.h>
#include <stddef.h>

#include <infiniband/verbs.h>

#include "core/pd.h"
#include "core/srq.h"
#include "util/compiler.h"

SWV_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
					  struct ibv_srq_init_attr *srq_init_attr)
{
	if (!pd || !srq_init_attr) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_srq *srq =
		swv_srq_create(to_swv_pd(pd), &srq_init_attr->attr, srq_init_attr->srq_context);
	if (srq)
		srq->ibsrq.context = pd->context; /* an imported PD's: the importing context */
	return srq ? &srq->ibsrq : NULL;
}

SWV_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask)
{
	if (!srq || !srq_attr)
		return EINVAL;
	return swv_srq_modify(to_swv_srq(srq), srq_attr, srq_attr_mask);
}

SWV_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr)
{
	if (!srq || !srq_attr)
		return EINVAL;
	return swv_srq_query(to_swv_srq(srq), srq_attr);
}

SWV_EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	if (!srq)
		return EINVAL;
	return swv_srq_destroy(to_swv_srq(srq));
}
