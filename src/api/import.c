/*
 * Object import (ibv_import_device/pd/mr/dm). In the kernel, import shares one uverbs
 * file between contexts, and objects are found by their handle. swverbs' objects are
 * memory of the process that made them, so import works within the process: a
 * context's cmd_fd is a dup of a memfd of its own, ibv_import_device maps the fd's
 * inode back to that context and returns an importer sharing its state (core/context.h
 * has the ownership rule), and ibv_import_pd/mr/dm find the object by handle among
 * the shared state's objects. An fd of another process names nothing here:
 * EOPNOTSUPP, what libibverbs answers for a provider that cannot import.
 *
 * Errnos: a cmd_fd fstat refuses, EINVAL (as libibverbs); no object with the handle,
 * ENOENT (the kernel's handle lookup); NULL arguments rdma-core would dereference,
 * EINVAL. An imported object is released by ibv_unimport_*, which never destroys it;
 * its creator's ibv_dealloc_pd/ibv_dereg_mr/ibv_free_dm does (and the same calls on
 * the import answer EINVAL: the object keeps one owner).
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include <infiniband/verbs.h>

#include "core/context.h"
#include "core/dm.h"
#include "core/mr.h"
#include "core/pd.h"
#include "util/compiler.h"

SWV_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	struct swv_context *imp = swv_ctx_import(cmd_fd);
	return imp ? &imp->vctx.context : NULL;
}

SWV_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_pd *imp = calloc(1, sizeof(*imp));
	if (!imp) {
		errno = ENOMEM;
		return NULL;
	}
	struct swv_context *ctx = to_swv_ctx(context);
	struct swv_list *pos;
	pthread_mutex_lock(&ctx->pd_lock);
	swv_list_for_each(pos, &ctx->pd_list)
	{
		struct swv_pd *pd = swv_list_entry(pos, struct swv_pd, entry);
		if (pd->ibpd.handle == pd_handle) {
			imp->shared = pd;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->pd_lock);
	if (!imp->shared) {
		free(imp);
		errno = ENOENT;
		return NULL;
	}
	imp->ibpd.context = context;
	imp->ibpd.handle = pd_handle;
	swv_list_init(&imp->entry);
	return &imp->ibpd;
}

SWV_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_mr *imp = swv_mr_import(to_swv_ctx(pd->context), pd, mr_handle);
	return imp ? &imp->ibmr : NULL;
}

SWV_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	return swv_dm_import(context, dm_handle);
}

/* Unimport frees the import struct alone. An object that is not an import (made by
 * ibv_alloc_pd/ibv_reg_mr/ibv_alloc_dm) is its owner's and is left alone. */
SWV_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
	if (pd && swv_pd_raw(pd)->shared)
		free(swv_pd_raw(pd));
}

SWV_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
	if (mr && ((struct swv_mr *)mr)->shared)
		free(mr);
}

SWV_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
	if (dm)
		swv_dm_unimport(dm);
}
