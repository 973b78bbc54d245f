/* Memory registration entry points; the checks and the table live in core/mr.c. */
#include <errno.h>
#include <stdint.h>

#include "core/context.h"
#include "core/mr.h"
#include "core/pd.h"
#include "util/compiler.h"

static struct ibv_mr *reg(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova,
			  unsigned access)
{
	if (!ibpd) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_mr *mr = swv_mr_register(to_swv_ctx(ibpd->context), to_swv_pd(ibpd), addr,
					    length, iova, access);
	return mr ? &mr->ibmr : NULL;
}

SWV_EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

SWV_EXPORT struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length,
					    uint64_t iova, int access)
{
	return reg(pd, addr, length, iova, (unsigned)access);
}

SWV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
					   uint64_t iova, unsigned int access)
{
	return reg(pd, addr, length, iova, access);
}

/* No dma-buf importer: there is no device to DMA from a dma-buf. */
SWV_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
					    uint64_t iova, int fd, int access)
{
	errno = pd ? EOPNOTSUPP : EINVAL;
	return NULL;
}

SWV_EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	if (!ibmr)
		return EINVAL;
	struct swv_mr *mr = swv_container_of(ibmr, struct swv_mr, ibmr);
	swv_mr_deregister(to_swv_ctx(ibmr->context), mr);
	return 0;
}

/* rdma-core's contract: 0, or a negative IBV_REREG_MR_ERR_* code with errno set. */
SWV_EXPORT int ibv_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *pd, void *addr,
			    size_t length, int access)
{
	if (!ibmr || !flags || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if ((flags & IBV_REREG_MR_CHANGE_PD) && (!pd || pd->context != ibmr->context)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	struct swv_mr *mr = swv_container_of(ibmr, struct swv_mr, ibmr);
	int rc = swv_mr_rereg(to_swv_ctx(ibmr->context), mr, flags, pd ? to_swv_pd(pd) : NULL,
			      addr, length, (unsigned)access);
	if (rc) {
		errno = rc;
		return rc == EINVAL ? IBV_REREG_MR_ERR_INPUT : IBV_REREG_MR_ERR_CMD;
	}
	return 0;
}
