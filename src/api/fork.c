/*
 * fork() support. rdma-core needs ibv_fork_init so that a child's copy-on-write does
 * not leave the parent's registered pages pinned under the HCA's DMA while the
 * parent's page table moves to fresh copies. swverbs has no DMA: registered memory
 * is ordinary process memory that the progress thread reaches with memcpy through
 * the parent's own page table, so whatever fork() does to the pages, the parent's
 * transfers land where the parent reads them. Protection is therefore never needed:
 * the calls succeed and report IBV_FORK_UNNEEDED, exactly as libibverbs does on a
 * kernel that copies DMA pages at fork.
 *
 * (A child process inherits no progress thread, so it cannot use the parent's
 * contexts; with hardware it cannot either. It opens its own.)
 */
#include <stddef.h>

#include <infiniband/verbs.h>

#include "util/compiler.h"

/* Not in the public header (rdma-core keeps them in its private driver.h), but
 * exported at IBVERBS_1.1 and imported by old binaries. */
SWV_EXPORT int ibv_dontfork_range(void *base, size_t size);
SWV_EXPORT int ibv_dofork_range(void *base, size_t size);

SWV_EXPORT int ibv_fork_init(void)
{
	return 0;
}

SWV_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

/* Nothing to mark: no range is ever pinned. Any range, even an empty one, is fine. */
SWV_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

SWV_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}
