/*
 * Provider-aware buffers (rdma-core 65): ibv_alloc_buf lets the provider choose how
 * memory for a PD is allocated (e.g. memory shared with the host in a confidential
 * guest), ibv_reg_buf_mr registers a range of it. For swverbs the right memory is
 * ordinary process memory -- that is what its MRs are -- so the buffer is a private
 * anonymous mapping and registration is the ordinary MR path (core/mr.c), with the
 * checks the API adds: the registering PD must be the allocating PD, and the range
 * must lie inside the buffer (EINVAL otherwise).
 *
 * As with any MR, the buffer must outlive the MRs registered on it: ibv_free_buf
 * unmaps the memory, and swverbs does not pin pages behind the application's back.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "api/buf.h"

#include "core/context.h"
#include "core/mr.h"
#include "core/pd.h"
#include "util/compiler.h"

struct ibv_buf {
	struct ibv_pd *pd;
	void *addr;
	size_t size; /* bytes usable by the caller */
	size_t map_len;
};

SWV_EXPORT void *ibv_alloc_buf(struct ibv_pd *pd, size_t size, struct ibv_buf **buf)
{
	if (!pd || !buf || size == 0) {
		errno = EINVAL;
		return NULL;
	}
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	if (size > SIZE_MAX - page) {
		errno = ENOMEM;
		return NULL;
	}
	struct ibv_buf *b = calloc(1, sizeof(*b));
	if (!b) {
		errno = ENOMEM;
		return NULL;
	}
	b->map_len = (size + page - 1) & ~(page - 1);
	b->addr =
	    mmap(NULL, b->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b->addr == MAP_FAILED) {
		int e = errno;
		free(b);
		errno = e;
		return NULL;
	}
	b->pd = pd;
	b->size = size;
	*buf = b;
	return b->addr;
}

SWV_EXPORT void ibv_free_buf(struct ibv_buf *buf)
{
	if (!buf)
		return;
	munmap(buf->addr, buf->map_len);
	free(buf);
}

/* [addr, addr + length) lies inside [buf->addr, buf->addr + buf->size), overflow-safe. */
static bool range_ok(const struct ibv_buf *buf, const void *addr, size_t length)
{
	uintptr_t base = (uintptr_t)buf->addr, a = (uintptr_t)addr;
	return a >= base && a - base <= buf->size && length <= buf->size - (a - base);
}

SWV_EXPORT struct ibv_mr *ibv_reg_buf_mr(struct ibv_pd *pd, struct ibv_buf *buf, void *addr,
					 size_t length, int access)
{
	if (!pd || !buf || !addr || length == 0 || pd != buf->pd || !range_ok(buf, addr, length)) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_mr *mr = swv_mr_register(to_swv_ctx(pd->context), to_swv_pd(pd), addr, length,
					    (uintptr_t)addr, (unsigned)access);
	return mr ? &mr->ibmr : NULL;
}

bool swv_buf_range_ok(const struct ibv_pd *pd, const struct ibv_buf *buf, const void *addr,
		      size_t length)
{
	return pd && buf && addr && length && pd == buf->pd && range_ok(buf, addr, length);
}

/* swverbs buffers are anonymous mappings, not DMA-bufs: there is nothing to export
 * (as ibv_dm_export_dmabuf_fd, src/api/dm.c). */
SWV_EXPORT int ibv_export_buf_dmabuf_fd(struct ibv_buf *buf)
{
	errno = buf ? EOPNOTSUPP : EINVAL;
	return -1;
}
