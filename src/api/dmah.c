/*
 * DMA handles (rdma-core 65): PCIe TLP processing hints (steering tag for a CPU,
 * processing hint, memory type) attached to memory registered with ibv_reg_mr_ex.
 * They tell a PCIe device where its DMA writes should land in the cache hierarchy.
 * swverbs has no PCIe function and no DMA, so there is nothing to steer: these go
 * through the verbs_context ops like libibverbs, and swverbs leaves the ops NULL,
 * which answers EOPNOTSUPP.
 */
#include <errno.h>
#include <stddef.h>

#include <infiniband/verbs.h>

#include "util/compiler.h"

SWV_EXPORT struct ibv_dmah *ibv_alloc_dmah(struct ibv_context *context,
					   struct ibv_dmah_init_attr *attr)
{
	if (!context || !attr) {
		errno = EINVAL;
		return NULL;
	}
	struct verbs_context *vctx = verbs_get_ctx_op(context, alloc_dmah);
	if (!vctx) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct ibv_dmah *dmah = vctx->alloc_dmah(context, attr);
	if (dmah)
		dmah->context = context;
	return dmah;
}

SWV_EXPORT int ibv_dealloc_dmah(struct ibv_dmah *dmah)
{
	if (!dmah || !dmah->context)
		return EINVAL;
	struct verbs_context *vctx = verbs_get_ctx_op(dmah->context, dealloc_dmah);
	if (!vctx)
		return EOPNOTSUPP;
	return vctx->dealloc_dmah(dmah);
}
