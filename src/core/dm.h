/*
 * Device memory (ibv_alloc_dm, ibv_memcpy_to_dm/from_dm, ibv_reg_dm_mr). Owner: core.
 *
 * An HCA's device memory is on-chip memory the application reaches only through the
 * device: copies in and out, and MRs over it (zero-based: their IOVA 0 is the start of
 * the registered range) that RDMA operations use like any other. swverbs' device
 * memory is pages the library maps for itself, outside anything the application
 * allocated, so the application touches it only through these calls. Up to
 * SWV_DEV_MAX_DM_SIZE bytes per context (max_dm_size, core/limits.h). As mlx5's, copies take
 * offsets and lengths in whole 4-byte words.
 */
#ifndef SWV_CORE_DM_H
#define SWV_CORE_DM_H

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "util/list.h"

struct swv_context;

/* An imported DM (ibv_import_dm): a swv_dm of its own whose shared names the DM found
 * by handle; to_swv_dm answers that one. Ownership as for an imported PD (core/pd.h):
 * ibv_free_dm of the original (or the close of its context) frees the memory,
 * ibv_unimport_dm alone frees the import struct. */
struct swv_dm {
	struct ibv_dm ibdm;
	struct swv_dm *shared; /* an import: the DM it names; NULL otherwise */
	uint8_t *buf; /* 'mapped' bytes from mmap */
	size_t length, mapped;
	_Atomic unsigned users; /* MRs over it: ibv_free_dm is EBUSY while > 0 */
	struct swv_list entry;	/* in ctx->dm_list, under ctx->dm_lock */
};

static inline struct swv_dm *to_swv_dm(struct ibv_dm *dm)
{
	struct swv_dm *d = (struct swv_dm *)dm;
	return d && d->shared ? d->shared : d;
}

/* ibv_import_dm: the live DM of ctx's shared state with this handle; NULL + ENOENT. */
struct ibv_dm *swv_dm_import(struct ibv_context *context, uint32_t handle);
void swv_dm_unimport(struct ibv_dm *dm);

/* The verbs_context ops behind the inline wrappers. alloc: NULL + errno (EINVAL: no
 * attr, unknown comp_mask, length 0 or above max_dm_size, alignment above a page;
 * ENOMEM: the context's device memory is used up). free: 0 or EBUSY (MRs remain).
 * reg_dm_mr: NULL + errno (EINVAL: access without IBV_ACCESS_ZERO_BASED or with a
 * right device memory cannot have, range outside the DM, a DM of another context). */
struct ibv_dm *swv_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr);
int swv_free_dm(struct ibv_dm *dm);
struct ibv_mr *swv_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t dm_offset,
			     size_t length, unsigned int access);
/* Context close, after its MRs are gone: frees every DM the application did not
 * (the context owns them; ibv_free_dm is the other way out, never both). */
void swv_dm_release_all(struct swv_context *ctx);

#endif
