// <rdma/rdma_cma.h> and <rdma/rdma_verbs.h> must compile as C++ (-Wall -Wextra -Werror).
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

int main()
{
	struct rdma_cm_id id = {};
	return rdma_get_local_addr(&id) == rdma_get_peer_addr(&id);
}
