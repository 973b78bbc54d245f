/*
 * Object import (ibv_import_device/pd/mr/dm) shares a device context and its
 * objects between processes: one process passes its command fd, the others import
 * objects by kernel handle. Those objects live in the kernel's uverbs layer. swverbs
 * has no kernel objects: a context, PD or MR is memory of the process that made it
 * (and the MR table, keys and progress thread with it), so another process has
 * nothing it could attach to. Every import therefore answers EOPNOTSUPP, which is what
 * libibverbs answers for a provider without import support; pyverbs' shared-PD test
 * skips on it.
 */
#include <errno.h>
#include <stddef.h>

#include <infiniband/verbs.h>

#include "util/compiler.h"

SWV_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	/* A swverbs context's cmd_fd carries no commands (it is /dev/null), so there
	 * is no kernel context behind any fd to import. */
	errno = cmd_fd < 0 ? EBADF : EOPNOTSUPP;
	return NULL;
}

SWV_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	(void)pd_handle;
	errno = context ? EOPNOTSUPP : EINVAL;
	return NULL;
}

SWV_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)mr_handle;
	errno = pd ? EOPNOTSUPP : EINVAL;
	return NULL;
}

SWV_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	(void)dm_handle;
	errno = context ? EOPNOTSUPP : EINVAL;
	return NULL;
}

/*
 * Unimport releases the user-space copy of an imported object without destroying it.
 * No import ever succeeds, so no argument can be an imported object; in particular an
 * object made by ibv_alloc_pd/ibv_reg_mr must not be freed behind its owner's back.
 * Nothing to do.
 */
SWV_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

SWV_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

SWV_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}
