/* Provider-aware buffers (src/api/buf.c), for ibv_reg_mr_ex's IBV_REG_MR_MASK_BUF. */
#ifndef SWV_API_BUF_H
#define SWV_API_BUF_H

#include <stdbool.h>
#include <stddef.h>

#include <infiniband/verbs.h>

/* True when buf was allocated on pd and [addr, addr + length) lies inside it. */
bool swv_buf_range_ok(const struct ibv_pd *pd, const struct ibv_buf *buf, const void *addr,
		      size_t length);

#endif
