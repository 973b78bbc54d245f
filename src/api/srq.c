/*
 * Shared receive queues are not built yet: ibv_query_device reports max_srq = 0 and
 * creating one answers EOPNOTSUPP, as libibverbs does for a provider without SRQ
 * support (ibv_srq_pingpong then prints "Couldn't create SRQ"; perftest --use-srq
 * fails the same way). The inline ibv_create_srq_ex sends basic SRQs here too, and
 * the XRC kind through vctx->create_srq_ex, which swverbs leaves NULL (EOPNOTSUPP).
 *
 * Since no SRQ can exist, the other calls can only be handed a foreign pointer; they
 * refuse without touching it. ibv_post_srq_recv is inline and calls
 * ctx->ops.post_srq_recv, which core sets to a function answering EOPNOTSUPP.
 *
 * This file is a placeholder: whoever builds SRQs replaces it (core/srq*.c plus the
 * real entry points).
 */
#include <errno.h>
#include <stddef.h>

#include <infiniband/verbs.h>

#include "util/compiler.h"

SWV_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
					  struct ibv_srq_init_attr *srq_init_attr)
{
	errno = (pd && srq_init_attr) ? EOPNOTSUPP : EINVAL;
	return NULL;
}

SWV_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask)
{
	(void)srq_attr_mask;
	return (srq && srq_attr) ? EOPNOTSUPP : EINVAL;
}

SWV_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr)
{
	return (srq && srq_attr) ? EOPNOTSUPP : EINVAL;
}

SWV_EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	return srq ? EOPNOTSUPP : EINVAL;
}
