/* Protection domains. A PD is a tag: MRs, QPs, AHs, SRQs, CQs and parent domains hold
 * a use count on it, and deallocation is refused with EBUSY while any remain, as the
 * kernel does. ibv_dealloc_pd frees parent domains too (core/pd.h); imports are
 * released by ibv_unimport_pd (api/import.c). */
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
	/* A handle unique among the PDs of the shared state, for ibv_import_pd. */
	struct swv_context *ctx = to_swv_ctx(context);
	pthread_mutex_lock(&ctx->pd_lock);
	pd->ibpd.handle = ctx->next_pd_handle++;
	swv_list_add_tail(&ctx->pd_list, &pd->entry);
	pthread_mutex_unlock(&ctx->pd_lock);
	return &pd->ibpd;
}

SWV_EXPORT int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	if (!ibpd)
		return EINVAL;
	struct swv_pd *pd = swv_pd_raw(ibpd);
	if (pd->shared)
		return EINVAL; /* an import: the creator deallocates, ibv_unimport_pd releases */
	struct swv_context *ctx = to_swv_ctx(ibpd->context);
	pthread_mutex_lock(&ctx->pd_lock);
	if (atomic_load(&pd->users)) {
		pthread_mutex_unlock(&ctx->pd_lock);
		return EBUSY;
	}
	if (!pd->parent)
		swv_list_del(&pd->entry); /* no import can find it from now on */
	pthread_mutex_unlock(&ctx->pd_lock);
	swv_pd_release(pd); /* a parent domain lets go of its PD and TD */
	free(pd);
	return 0;
}
