/*
 * ibv_reg_mr_ex (rdma-core 65): every registration variant in one call, selected by
 * mr_init_attr->comp_mask. swverbs serves the variants it has through the ordinary MR
 * path (core/mr.c), exactly as ibv_reg_mr_iova2 would:
 *   ADDR (+ IOVA)         process memory, iova = addr unless IOVA is given;
 *   FD / FD_OFFSET        a dma-buf: EOPNOTSUPP, as ibv_reg_dmabuf_mr (no importer);
 *   DMAH                  a DMA handle: EOPNOTSUPP (ibv_alloc_dmah never gives one);
 *   ADDR + BUF            a range of an ibv_alloc_buf buffer, as ibv_reg_buf_mr
 *                         (IOVA too: the buffer is ordinary memory, any iova works);
 *   any other bit         EOPNOTSUPP (a newer header's option swverbs does not know).
 * ADDR and FD together, or neither, is EINVAL (one memory source is required).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "api/buf.h"
#include "core/context.h"
#include "core/mr.h"
#include "core/pd.h"
#include "util/compiler.h"

#define KNOWN_MASK                                                                                 \
	(IBV_REG_MR_MASK_IOVA | IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_FD |                        \
	 IBV_REG_MR_MASK_FD_OFFSET | IBV_REG_MR_MASK_DMAH | IBV_REG_MR_MASK_BUF)

SWV_EXPORT struct ibv_mr *ibv_reg_mr_ex(struct ibv_pd *pd, struct ibv_mr_init_attr *attr)
{
	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	uint64_t mask = attr->comp_mask;
	bool by_addr = mask & IBV_REG_MR_MASK_ADDR;
	bool by_fd = mask & (IBV_REG_MR_MASK_FD | IBV_REG_MR_MASK_FD_OFFSET);
	if (by_addr == by_fd) {
		errno = EINVAL;
		return NULL;
	}
	if ((mask & ~(uint64_t)KNOWN_MASK) || by_fd || (mask & IBV_REG_MR_MASK_DMAH)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	uint64_t iova = (mask & IBV_REG_MR_MASK_IOVA) ? attr->iova : (uintptr_t)attr->addr;
	if ((mask & IBV_REG_MR_MASK_BUF) &&
	    !swv_buf_range_ok(pd, attr->buf, attr->addr, attr->length)) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_mr *mr = swv_mr_register(to_swv_ctx(pd->context), to_swv_pd(pd), attr->addr,
					    attr->length, iova, (unsigned)attr->access);
	return mr ? &mr->ibmr : NULL;
}
