/* Address-vector resolution: LID or GID -> the peer's IPv4 (net/addr.h derives both). */
#include <errno.h>

#include "core/ah.h"
#include "core/context.h"
#include "core/device.h"
#include "net/addr.h"

int swv_av_resolve(struct swv_context *ctx, const struct ibv_ah_attr *av, struct in_addr *ip)
{
	if (!ctx || !av || !ip || av->port_num != 1)
		return EINVAL;
	if (av->is_global) {
		/* The source GID must be a populated entry of our table (only index 0). */
		if (av->grh.sgid_index != 0)
			return EINVAL;
		/* A multicast DGID names its IP group (net/addr.h); the DLID (a multicast
		 * LID on IB-style ports) does not matter here. */
		if (swv_gid_is_mcast(av->grh.dgid.raw)) {
			*ip = swv_mcast_group_of_gid(av->grh.dgid.raw);
			return 0;
		}
		return swv_ip_from_gid(av->grh.dgid.raw, ip) ? 0 : EINVAL;
	}
	/* RoCE ports have no LIDs: a GRH is mandatory, as on Ethernet hardware. */
	if (ctx->cfg->link != SWV_LINK_IB)
		return EINVAL;
	return swv_ip_from_lid(ctx->cfg, av->dlid, ip) ? 0 : EINVAL;
}
