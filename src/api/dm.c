/*
 * Device memory (ibv_alloc_dm & co.) is on-NIC memory; swverbs has none. The
 * allocation path is the inline ibv_alloc_dm over vctx->alloc_dm, which swverbs
 * leaves NULL (EOPNOTSUPP), and ibv_query_device_ex reports max_dm_size = 0. No
 * ibv_dm can therefore exist, and exporting one as a dma-buf answers EOPNOTSUPP.
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
