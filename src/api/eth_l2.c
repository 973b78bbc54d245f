/*
 * ibv_resolve_eth_l2_from_gid: the destination MAC (and VLAN) for a RoCE address
 * vector, found by asking the kernel's neighbour table for the IP inside the GID.
 * Hardware RoCE providers need it to build Ethernet headers. A swverbs port has no
 * Ethernet link of its own (its packets are UDP datagrams the host stack routes), so
 * there is no neighbour entry that belongs to it and no MAC it would use: the call
 * fails with -EOPNOTSUPP. Like rdma-core's, it returns 0 or a negative errno.
 */
#include <errno.h>
#include <stddef.h>

#include <infiniband/verbs.h>

#include "util/compiler.h"

SWV_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
					   uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
	(void)vid; /* optional */
	if (!context || !attr || !eth_mac)
		return -EINVAL;
	return -EOPNOTSUPP;
}
