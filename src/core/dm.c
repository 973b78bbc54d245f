/* Device memory: pages of the library's own, copies in 4-byte words, zero-based MRs
 * registered in the ordinary MR table (core/dm.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/context.h"
#include "core/device.h"
#include "core/dm.h"
#include "core/limits.h"
#include "core/memsafe.h"
#include "core/mr.h"
#include "core/pd.h"

#define DM_MAX_LOG_ALIGN 12 /* the pages it lives in are the alignment on offer */

/* [off, off + len) inside the DM, in whole words: 0, EINVAL (misaligned) or EFAULT
 * (outside), as mlx5's copies answer. */
static int dm_range(const struct swv_dm *dm, uint64_t off, size_t len)
{
	if ((off | len) & 3)
		return EINVAL;
	if (off > dm->length || len > dm->length - off)
		return EFAULT;
	return 0;
}

static int dm_to(struct ibv_dm *ibdm, uint64_t off, const void *host, size_t len)
{
	struct swv_dm *dm = to_swv_dm(ibdm);
	int rc = dm_range(dm, off, len);
	if (rc || !len)
		return rc;
	/* the host buffer is the application's: a hole there is EFAULT, not a signal */
	return swv_copy_from_app(dm->buf + off, host, len, false);
}

static int dm_from(void *host, struct ibv_dm *ibdm, uint64_t off, size_t len)
{
	struct swv_dm *dm = to_swv_dm(ibdm);
	int rc = dm_range(dm, off, len);
	if (rc || !len)
		return rc;
	return swv_copy_to_app(host, dm->buf + off, len, false);
}

/* The one way a DM's memory goes back (ibv_free_dm, or context close). */
static void dm_destroy(struct swv_context *ctx, struct swv_dm *dm)
{
	atomic_fetch_sub(&ctx->dm_used, dm->length);
	munmap(dm->buf, dm->mapped);
	free(dm);
}

struct ibv_dm *swv_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr)
{
	if (!context || !attr || attr->comp_mask || !attr->length ||
	    attr->length > SWV_DEV_MAX_DM_SIZE || attr->log_align_req > DM_MAX_LOG_ALIGN) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_context *ctx = to_swv_ctx(context);
	/* reserve the bytes first: concurrent allocations never overcommit */
	uint64_t used = atomic_load(&ctx->dm_used);
	do {
		if (used + attr->length > SWV_DEV_MAX_DM_SIZE) {
			errno = ENOMEM;
			return NULL;
		}
	} while (!atomic_compare_exchange_weak(&ctx->dm_used, &used, used + attr->length));
	const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	struct swv_dm *dm = calloc(1, sizeof(*dm));
	size_t mapped = (attr->length + pg - 1) / pg * pg;
	void *buf =
	    dm ? mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
	       : MAP_FAILED;
	if (buf == MAP_FAILED) {
		free(dm);
		atomic_fetch_sub(&ctx->dm_used, attr->length);
		errno = ENOMEM;
		return NULL;
	}
	dm->buf = buf;
	dm->length = attr->length;
	dm->mapped = mapped;
	atomic_init(&dm->users, 0);
	dm->ibdm.context = context;
	dm->ibdm.memcpy_to_dm = dm_to;
	dm->ibdm.memcpy_from_dm = dm_from;
	dm->ibdm.comp_mask = 0;
	pthread_mutex_lock(&ctx->dm_lock);
	dm->ibdm.handle = ctx->next_dm_handle++; /* what ibv_import_dm finds it by */
	swv_list_add_tail(&ctx->dm_list, &dm->entry);
	pthread_mutex_unlock(&ctx->dm_lock);
	return &dm->ibdm;
}

int swv_free_dm(struct ibv_dm *ibdm)
{
	if (((struct swv_dm *)ibdm)->shared)
		return EINVAL; /* an import: the creator frees, ibv_unimport_dm releases */
	struct swv_dm *dm = to_swv_dm(ibdm);
	if (atomic_load(&dm->users))
		return EBUSY; /* the kernel refuses to free a DM that MRs still use */
	struct swv_context *ctx = to_swv_ctx(ibdm->context);
	pthread_mutex_lock(&ctx->dm_lock);
	swv_list_del(&dm->entry);
	pthread_mutex_unlock(&ctx->dm_lock);
	dm_destroy(ctx, dm);
	return 0;
}

void swv_dm_release_all(struct swv_context *ctx)
{
	struct swv_list *pos, *tmp;
	swv_list_for_each_safe(pos, tmp, &ctx->dm_list)
	{
		struct swv_dm *dm = swv_list_entry(pos, struct swv_dm, entry);
		swv_list_del(&dm->entry);
		dm_destroy(ctx, dm);
	}
}

struct ibv_mr *swv_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *ibdm, uint64_t off, size_t length,
			     unsigned int access)
{
	const unsigned allowed = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE |
				 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				 IBV_ACCESS_REMOTE_ATOMIC;
	if (!pd || !ibdm || ibdm->context != pd->context || !(access & IBV_ACCESS_ZERO_BASED) ||
	    (access & ~allowed)) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_dm *dm = to_swv_dm(ibdm);
	if (off > dm->length || length > dm->length - off) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_mr *mr = swv_mr_register_dm(to_swv_ctx(pd->context), to_swv_pd(pd),
					       dm->buf + off, length, access, &dm->users);
	return mr ? &mr->ibmr : NULL;
}

struct ibv_dm *swv_dm_import(struct ibv_context *context, uint32_t handle)
{
	struct swv_context *ctx = to_swv_ctx(context);
	struct swv_dm *imp = calloc(1, sizeof(*imp));
	if (!imp) {
		errno = ENOMEM;
		return NULL;
	}
	struct swv_list *pos;
	pthread_mutex_lock(&ctx->dm_lock);
	swv_list_for_each(pos, &ctx->dm_list)
	{
		struct swv_dm *dm = swv_list_entry(pos, struct swv_dm, entry);
		if (dm->ibdm.handle == handle) {
			imp->shared = dm;
			imp->ibdm = dm->ibdm; /* the copy ops, which go through to_swv_dm */
			break;
		}
	}
	pthread_mutex_unlock(&ctx->dm_lock);
	if (!imp->shared) {
		free(imp);
		errno = ENOENT; /* the kernel's answer to a handle it has no object for */
		return NULL;
	}
	imp->ibdm.context = context;
	swv_list_init(&imp->entry);
	return &imp->ibdm;
}

void swv_dm_unimport(struct ibv_dm *ibdm)
{
	struct swv_dm *imp = (struct swv_dm *)ibdm;
	if (imp->shared)
		free(imp); /* never the original: it is its creator's (or may be gone) */
}
