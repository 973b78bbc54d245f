/*
 * ibv_query_gid_type@IBVERBS_PRIVATE_34, called by ibv_devinfo -v. Its signature uses
 * enum ibv_gid_type_sysfs, which only rdma-core's private driver.h declares; this file
 * deliberately does not include verbs.h so the definition cannot clash with whatever
 * the public header declares. The enum (values 0 = IB/RoCEv1, 1 = RoCEv2, no negative
 * values) has unsigned int representation, so 'unsigned *' is ABI-identical.
 */
#include <stdint.h>

#include "util/compiler.h"

struct ibv_context;
int swv_query_gid_type_sysfs(struct ibv_context *context, uint8_t port_num, unsigned index);

SWV_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
				  unsigned int index, unsigned int *type);

SWV_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
				  unsigned int index, unsigned int *type)
{
	if (!type)
		return -1;
	int t = swv_query_gid_type_sysfs(context, port_num, index);
	if (t < 0)
		return -1;
	*type = (unsigned)t;
	return 0;
}
