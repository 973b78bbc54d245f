/* Address handles: a resolved peer IP plus the attributes the application gave. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/ah.h"
#include "core/context.h"
#include "core/pd.h"
#include "util/compiler.h"

SWV_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct in_addr ip;

	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	int rc = swv_av_resolve(to_swv_ctx(pd->context), attr, &ip);
	if (rc) {
		errno = rc;
		return NULL;
	}
	struct swv_ah *ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	ah->ibah.context = pd->context;
	ah->ibah.pd = pd;
	ah->attr = *attr;
	ah->dst.sin_family = AF_INET;
	ah->dst.sin_addr = ip;
	atomic_fetch_add(&to_swv_pd(pd)->users, 1);
	return &ah->ibah;
}

SWV_EXPORT int ibv_destroy_ah(struct ibv_ah *ibah)
{
	if (!ibah)
		return EINVAL;
	struct swv_ah *ah = to_swv_ah(ibah);
	atomic_fetch_sub(&to_swv_pd(ibah->pd)->users, 1);
	free(ah);
	return 0;
}
