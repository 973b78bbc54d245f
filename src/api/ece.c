/*
 * Enhanced Connection Establishment: vendor-specific options (ibv_ece.options,
 * identified by the provider's IEEE OUI in vendor_id) that two ends negotiate through
 * the CM. swverbs has no such options, so there is nothing to set or report: both
 * calls answer EOPNOTSUPP, as libibverbs does for providers without ECE. librdmacm
 * calls both during connection setup and treats EOPNOTSUPP as "no ECE".
 */
#include <errno.h>

#include <infiniband/verbs.h>

#include "util/compiler.h"

SWV_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	int rc = (!qp || !ece) ? EINVAL : EOPNOTSUPP;
	errno = rc;
	return rc;
}

SWV_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	/* libibverbs rejects a missing ECE or a zero vendor id before the provider. */
	int rc = (!qp || !ece || !ece->vendor_id) ? EINVAL : EOPNOTSUPP;
	errno = rc;
	return rc;
}
