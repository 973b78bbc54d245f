/*
 * Device memory (ibv_alloc_dm & co.) is reached through the inline wrappers over the
 * verbs_context ops of core/dm.h. Exporting it as a dma-buf answers EOPNOTSUPP: its
 * pages are the library's anonymous memory, which no dma-buf exporter stands behind.
 */
#include <errno.h>
#include <stddef.h>

#include <infiniband/verbs.h>

#include "util/compiler.h"

SWV_EXPORT int ibv_dm_export_dmabuf_fd(struct ibv_dm *dm)
{
	errno = dm ? EOPNOTSUPP : EINVAL;
	return -1;
}
