/* Address handles: a resolved peer IP plus the attributes the application gave. */
#include <endian.h>
#include <errno.h>
#include <stdbool.h>
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
	/* the PD itself, not an import of it: ibv_unimport_pd may free that first */
	ah->ibah.pd = &to_swv_pd(pd)->ibpd;
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

/* Address vector back to the sender of a received message. A RoCE-style port writes
 * an IPv4 header in the last 20 bytes of the 40-byte GRH area (as rxe does); an
 * IB-style port writes an IB GRH. The sender is addressed by LID when there is no GRH
 * (IB only: Ethernet ports have no LIDs). rdma-core contract: 0 or -1 with errno. */
SWV_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
				   struct ibv_wc *wc, struct ibv_grh *grh,
				   struct ibv_ah_attr *ah_attr)
{
	if (!context || !wc || !ah_attr || port_num != 1) {
		errno = EINVAL;
		return -1;
	}
	struct swv_context *ctx = to_swv_ctx(context);
	bool roce = ctx->cfg->link != SWV_LINK_IB;
	bool has_grh = (wc->wc_flags & IBV_WC_GRH) && grh;

	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->port_num = port_num;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	if (!has_grh) {
		if (roce) {
			errno = EINVAL;
			return -1;
		}
		ah_attr->dlid = wc->slid;
		return 0;
	}
	ah_attr->dlid = roce ? 0 : wc->slid;
	ah_attr->is_global = 1;
	ah_attr->grh.hop_limit = 0xff;

	union ibv_gid dgid_local;
	const uint8_t *raw = (const uint8_t *)grh;
	if (roce && (raw[20] >> 4) == 4) {
		/* IPv4 header: source address at +12, destination at +16. */
		memset(&ah_attr->grh.dgid, 0, sizeof(union ibv_gid));
		ah_attr->grh.dgid.raw[10] = ah_attr->grh.dgid.raw[11] = 0xff;
		memcpy(&ah_attr->grh.dgid.raw[12], raw + 20 + 12, 4);
		memset(&dgid_local, 0, sizeof(dgid_local));
		dgid_local.raw[10] = dgid_local.raw[11] = 0xff;
		memcpy(&dgid_local.raw[12], raw + 20 + 16, 4);
		ah_attr->grh.traffic_class = raw[21];
	} else {
		uint32_t vtf = be32toh(grh->version_tclass_flow);
		ah_attr->grh.dgid = grh->sgid;
		ah_attr->grh.flow_label = vtf & 0xfffff;
		ah_attr->grh.traffic_class = (uint8_t)(vtf >> 20);
		dgid_local = grh->dgid;
	}
	/* The local GID the message was sent to must be one of ours (index 0). */
	union ibv_gid ours;
	if (ibv_query_gid(context, port_num, 0, &ours) ||
	    memcmp(ours.raw, dgid_local.raw, sizeof(ours.raw))) {
		errno = EINVAL;
		return -1;
	}
	ah_attr->grh.sgid_index = 0;
	return 0;
}

SWV_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
						struct ibv_grh *grh, uint8_t port_num)
{
	struct ibv_ah_attr attr;

	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}
