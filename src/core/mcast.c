/* UD multicast: groups, attach and detach (rules in core/mcast.h); delivery is the
 * transport's (src/transport/receive.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/limits.h"
#include "core/mcast.h"
#include "core/qp.h"
#include "net/addr.h"
#include "progress/progress.h"

/* The kernel's check (ib_attach_mcast): a multicast GID, a UD QP, and on an IB
 * link layer a multicast LID (0xffff is the permissive LID, not a group). */
static int check_args(struct swv_qp *qp, const uint8_t gid[16], uint16_t lid)
{
	if (!swv_gid_is_mcast(gid) || qp->type != IBV_QPT_UD)
		return EINVAL;
	if (qp->ctx->cfg->link == SWV_LINK_IB && (lid < 0xc000 || lid == 0xffff))
		return EINVAL;
	return 0;
}

static struct swv_mcast_grp *grp_find(struct swv_context *ctx, const uint8_t gid[16], unsigned *idx)
{
	for (unsigned i = 0; i < SWV_MCAST_MAX_GRP; i++) {
		struct swv_mcast_grp *g = ctx->mcast[i];
		if (g && !memcmp(g->mgid, gid, 16)) {
			if (idx)
				*idx = i;
			return g;
		}
	}
	return NULL;
}

static int grp_slot(const struct swv_mcast_grp *g, const struct swv_qp *qp)
{
	for (int i = 0; i < SWV_MCAST_MAX_QP_ATTACH; i++)
		if (atomic_load_explicit(&g->qps[i], memory_order_relaxed) == qp)
			return i;
	return -1;
}

static struct swv_mcast_grp *grp_open(struct swv_context *ctx, const uint8_t gid[16], int *rc)
{
	struct swv_mcast_grp *g = calloc(1, sizeof(*g));
	if (!g) {
		*rc = ENOMEM;
		return NULL;
	}
	memcpy(g->mgid, gid, 16);
	g->group = swv_mcast_group_of_gid(gid);
	*rc = swv_ep_open_mcast(&g->ep, ctx->cfg->addr, g->group, SWV_MCAST_PORT);
	if (*rc) {
		free(g);
		return NULL;
	}
	*rc = swv_progress_add_endpoint(&ctx->progress, &g->ep);
	if (*rc) {
		swv_ep_close(&g->ep);
		free(g);
		return NULL;
	}
	return g;
}

int swv_mcast_attach(struct swv_qp *qp, const uint8_t gid[16], uint16_t lid)
{
	struct swv_context *ctx = qp->ctx;
	int rc = check_args(qp, gid, lid);
	if (rc)
		return rc;
	if (ctx->cfg->auth)
		return EOPNOTSUPP;

	pthread_mutex_lock(&ctx->mcast_lock);
	struct swv_mcast_grp *g = grp_find(ctx, gid, NULL);
	if (g && grp_slot(g, qp) >= 0)
		goto out; /* attached already: success, as the kernel answers */
	if (g && g->nqps == SWV_MCAST_MAX_QP_ATTACH) {
		rc = ENOMEM;
		goto out;
	}
	if (!g) {
		unsigned i = 0;
		while (i < SWV_MCAST_MAX_GRP && ctx->mcast[i])
			i++;
		if (i == SWV_MCAST_MAX_GRP) {
			rc = ENOMEM;
			goto out;
		}
		g = grp_open(ctx, gid, &rc);
		if (!g)
			goto out;
		ctx->mcast[i] = g;
	}
	atomic_store_explicit(&g->qps[grp_slot(g, NULL)], qp, memory_order_release);
	g->nqps++;
	qp->nmcast++;
out:
	pthread_mutex_unlock(&ctx->mcast_lock);
	return rc;
}

int swv_mcast_detach(struct swv_qp *qp, const uint8_t gid[16], uint16_t lid)
{
	struct swv_context *ctx = qp->ctx;
	struct swv_mcast_grp *g, *gone = NULL;
	unsigned gi = 0;
	int rc = check_args(qp, gid, lid), slot;
	if (rc)
		return rc;

	pthread_mutex_lock(&ctx->mcast_lock);
	g = grp_find(ctx, gid, &gi);
	slot = g ? grp_slot(g, qp) : -1;
	if (slot < 0) {
		pthread_mutex_unlock(&ctx->mcast_lock);
		return EINVAL; /* not attached (uverbs and rxe say EINVAL) */
	}
	atomic_store_explicit(&g->qps[slot], NULL, memory_order_release);
	qp->nmcast--;
	if (--g->nqps == 0) {
		/* Leave the group now: no new datagram reaches the socket. */
		swv_progress_del_endpoint(&ctx->progress, &g->ep);
		ctx->mcast[gi] = NULL;
		gone = g;
	}
	/* Under the lock, so that a QP cannot be destroyed (nmcast is 0 already) while
	 * the thread may still deliver to it, nor the group's address be joined again
	 * before this socket is gone. */
	swv_progress_quiesce(&ctx->progress);
	if (gone) {
		swv_ep_close(&gone->ep);
		free(gone);
	}
	pthread_mutex_unlock(&ctx->mcast_lock);
	return 0;
}

void swv_mcast_close_all(struct swv_context *ctx)
{
	for (unsigned i = 0; i < SWV_MCAST_MAX_GRP; i++) {
		struct swv_mcast_grp *g = ctx->mcast[i];
		if (!g)
			continue;
		swv_ep_close(&g->ep);
		free(g);
		ctx->mcast[i] = NULL;
	}
}
