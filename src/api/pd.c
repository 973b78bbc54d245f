/* Protection domains. A PD is a tag: MRs, QPs, AHs, SRQs, CQs and parent domains hold
 * a use count on it, and deallocation is refused with EBUSY while any remain, as the
 * kernel does. ibv_dealloc_pd frees parent domains too (core/pd.h). */
#include <errno.h>
#include <stdlib.h>

#include "core/context.h"
#include "core/pd.h"
#include "util/compiler.h"

SWV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->ibpd.context = context;
	atomic_init(&pd->users, 0);
	return &pd->ibpd;
}

SWV_EXPORT int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	if (!ibpd)
		return EINVAL;
	struct swv_pd *pd = to_swv_pd(ibpd);
	if (atomic_load(&pd->users))
		return EBUSY;
	swv_pd_release(pd); /* a parent domain lets go of its PD and TD */
	free(pd);
	return 0;
}
