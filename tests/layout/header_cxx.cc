// The public header must be usable from C++ (rdma-core's is): this file is
// only compiled (-fsyntax-only), never run.
#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>

int swv_cxx_check(struct ibv_pd *pd, void *buf, int access);
int swv_cxx_check(struct ibv_pd *pd, void *buf, int access)
{
	struct ibv_port_attr pa;
	struct ibv_mr *a = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *b = ibv_reg_mr(pd, buf, 64, access);
	struct ibv_comp_cntr_caps caps;

	return ibv_query_port(pd->context, 1, &pa) + (a == b) +
	       ibv_query_comp_cntr_caps(pd->context, &caps);
}
