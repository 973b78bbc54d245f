/*
 * UD multicast: attach and detach (core/mcast.h has the rules and errnos; the wire
 * is in docs/wire.md, "UD multicast").
 */
#include <errno.h>

#include <infiniband/verbs.h>

#include "core/mcast.h"
#include "core/qp.h"
#include "util/compiler.h"

SWV_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return swv_mcast_attach(to_swv_qp(qp), gid->raw, lid);
}

SWV_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return swv_mcast_detach(to_swv_qp(qp), gid->raw, lid);
}
