/*
 * UD multicast. swverbs does not deliver multicast yet (ibv_query_device reports
 * max_mcast_grp = 0), so attaching a QP to a group answers EOPNOTSUPP, as the kernel
 * does for a device without multicast support (it checks support before the group or
 * the QP type). Clients that use multicast check max_mcast_grp first (pyverbs'
 * requires_mcast_support, perftest -M); ib_send_* only import the calls.
 *
 * When UD multicast is built (QP/transport), these move next to it.
 */
#include <errno.h>

#include <infiniband/verbs.h>

#include "util/compiler.h"

SWV_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)lid;
	if (!qp || !gid)
		return EINVAL;
	return EOPNOTSUPP;
}

SWV_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)lid;
	if (!qp || !gid)
		return EINVAL;
	return EOPNOTSUPP;
}
