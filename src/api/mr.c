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
	if (mr)
		mr->ibmr.context = ibpd->context; /* an imported PD's: the importing context */
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
	if (mr->shared)
		return EINVAL; /* an import: the creator deregisters, ibv_unimport_mr releases */
	return swv_mr_deregister(to_swv_ctx(ibmr->context), mr);
}

/* rdma-core's contract: 0, or a negative IBV_REREG_MR_ERR_* code with errno set. Which
 * code follows rdma-core's ibv_rereg_mr: what libibverbs checks itself (flags outside
 * the supported set, CHANGE_TRANSLATION without an address or length, access given
 * without CHANGE_ACCESS) is IBV_REREG_MR_ERR_INPUT; everything the provider and kernel
 * refuse (no flag at all, bad access flags, a PD of another context, a range that
 * cannot be registered) is IBV_REREG_MR_ERR_CMD, with the command's errno. The MR is
 * unchanged either way. Arguments rdma-core would dereference (NULL MR; CHANGE_PD
 * without a PD) are IBV_REREG_MR_ERR_INPUT instead of a crash. */
SWV_EXPORT int ibv_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *pd, void *addr,
			    size_t length, int access)
{
	if (!ibmr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) ||
	    ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	int rc = 0;
	if (!flags || ((flags & IBV_REREG_MR_CHANGE_PD) && pd->context != ibmr->context))
		rc = EINVAL; /* the kernel: no flags; PD handle not found */
	struct swv_mr *mr = swv_container_of(ibmr, struct swv_mr, ibmr);
	if (mr->shared)
		rc = EINVAL; /* an import is only a name for its creator's MR */
	if (!rc)
		rc = swv_mr_rereg(to_swv_ctx(ibmr->context), mr, flags,
				  (flags & IBV_REREG_MR_CHANGE_PD) ? to_swv_pd(pd) : NULL, addr,
				  length, (unsigned)access);
	if (rc) {
		errno = rc;
		return IBV_REREG_MR_ERR_CMD;
	}
	return 0;
}
