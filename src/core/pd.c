/* Parent domains, thread domains and the queue buffers parent domains allocate
 * (core/pd.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/pd.h"
#include "util/compiler.h"

#define BUF_ALIGN 64 /* a cache line: rings are written by one thread, read by another */

struct swv_td {
	struct ibv_td ibtd;
	_Atomic unsigned users; /* parent domains holding it */
};

void *swv_pd_buf_alloc(struct swv_pd *pd, size_t n, size_t size, uint64_t type, bool *custom)
{
	*custom = false;
	if (size && n > SIZE_MAX / size)
		return NULL;
	if (pd && pd->alloc) {
		void *p = pd->alloc(&pd->ibpd, pd->pd_context, n * size, BUF_ALIGN, type);
		if (p != IBV_ALLOCATOR_USE_DEFAULT) {
			if (p) {
				/* an allocator's memory need not be zeroed; rings start empty */
				memset(p, 0, n * size);
				*custom = true;
			}
			return p;
		}
	}
	return calloc(n ? n : 1, size ? size : 1);
}

void swv_pd_buf_free(struct swv_pd *pd, void *p, uint64_t type, bool custom)
{
	if (!p)
		return;
	if (custom)
		pd->free(&pd->ibpd, pd->pd_context, p, type);
	else
		free(p);
}

struct ibv_pd *swv_alloc_parent_domain(struct ibv_context *context,
				       struct ibv_parent_domain_init_attr *attr)
{
	/* ALLOW_CC_UNPROTECTED_ALLOC lets a provider place buffers in memory a confidential
	 * guest shares with its host; swverbs' rings never leave the process: accepted,
	 * nothing changes. */
	const uint32_t known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			       IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT |
			       IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC;
	if (!context || !attr || !attr->pd || attr->pd->context != context ||
	    to_swv_pd(attr->pd)->parent || (attr->comp_mask & ~known) ||
	    ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) &&
	     (!attr->alloc || !attr->free)) ||
	    (attr->td && attr->td->context != context)) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->ibpd.context = context;
	pd->ibpd.handle = attr->pd->handle;
	atomic_init(&pd->users, 0);
	pd->parent = to_swv_pd(attr->pd);
	pd->td = attr->td;
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
		pd->alloc = attr->alloc;
		pd->free = attr->free;
	}
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
		pd->pd_context = attr->pd_context;
	atomic_fetch_add(&pd->parent->users, 1);
	if (pd->td)
		atomic_fetch_add(&swv_container_of(pd->td, struct swv_td, ibtd)->users, 1);
	return &pd->ibpd;
}

void swv_pd_release(struct swv_pd *pd)
{
	if (!pd->parent)
		return;
	atomic_fetch_sub(&pd->parent->users, 1);
	if (pd->td)
		atomic_fetch_sub(&swv_container_of(pd->td, struct swv_td, ibtd)->users, 1);
}

/* A thread domain promises that one thread at a time uses what it covers; swverbs'
 * locking does not depend on it, so it is only an object to hold. */
struct ibv_td *swv_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr)
{
	if (!context || !attr || attr->comp_mask) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_td *td = calloc(1, sizeof(*td));
	if (!td) {
		errno = ENOMEM;
		return NULL;
	}
	td->ibtd.context = context;
	atomic_init(&td->users, 0);
	return &td->ibtd;
}

int swv_dealloc_td(struct ibv_td *ibtd)
{
	struct swv_td *td = swv_container_of(ibtd, struct swv_td, ibtd);
	if (atomic_load(&td->users))
		return EBUSY;
	free(td);
	return 0;
}
