/* Device/context/PD/MR/CQ verbs through the shared libswverbs exactly as an
 * application links it: versioned exports, inline verbs.h paths, no leaks of fds. */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdlib.h>

#include "check.h"

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	CHECK_PTR(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void check_versions(void)
{
	static const char *const v[][2] = {
		{"ibv_get_device_list", "IBVERBS_1.1"},  {"ibv_open_device", "IBVERBS_1.1"},
		{"ibv_query_port", "IBVERBS_1.1"},       {"ibv_query_device", "IBVERBS_1.1"},
		{"ibv_reg_mr", "IBVERBS_1.1"},           {"ibv_reg_mr_iova2", "IBVERBS_1.8"},
		{"ibv_get_device_index", "IBVERBS_1.9"}, {"_ibv_query_gid_ex", "IBVERBS_1.11"},
		{"_ibv_query_gid_table", "IBVERBS_1.11"}, {"ibv_query_gid_type", "IBVERBS_PRIVATE_34"},
		{"ibv_create_comp_channel", "IBVERBS_1.0"}, {"ibv_resize_cq", "IBVERBS_1.1"},
		{"ibv_rereg_mr", "IBVERBS_1.1"},         {"ibv_get_async_event", "IBVERBS_1.1"},
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		void *p = dlvsym(RTLD_DEFAULT, v[i][0], v[i][1]);
		if (!p)
			fprintf(stderr, "missing %s@%s\n", v[i][0], v[i][1]);
		CHECK(p != NULL);
	}
}

int main(void)
{
	check_versions();
	int n = -1;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK_PTR(l);
	CHECK(n >= 1);
	struct ibv_device *dev = l[0];
	int fds = count_fds();

	for (int round = 0; round < 20; round++) {
		struct ibv_context *ctx = ibv_open_device(dev);
		CHECK_PTR(ctx);
		struct ibv_device_attr_ex ax;
		CHECK_OK(ibv_query_device_ex(ctx, NULL, &ax));
		CHECK(ax.orig_attr.vendor_id != 0 && ax.orig_attr.node_guid != 0);
		struct ibv_port_attr pa;
		CHECK_OK(ibv_query_port(ctx, 1, &pa));
		CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
		CHECK_EQ(ibv_query_port(ctx, 2, &pa), EINVAL);
		struct ibv_gid_entry e;
		CHECK_OK(ibv_query_gid_ex(ctx, 1, 0, &e, 0));
		CHECK_EQ(ibv_query_gid_ex(ctx, 1, 1, &e, 0), ENODATA);

		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		CHECK_PTR(pd);
		char *buf = malloc(4096);
		CHECK_PTR(buf);
		/* Non-constant access with an optional bit: the macro goes to reg_mr_iova2. */
		int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
		if (round & 1)
			access |= IBV_ACCESS_RELAXED_ORDERING;
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, access);
		CHECK_PTR(mr);
		CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);

		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		CHECK_PTR(ch);
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
		CHECK_PTR(cq);
		struct ibv_wc wc;
		CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);      /* inline ops.poll_cq */
		CHECK_OK(ibv_req_notify_cq(cq, 0));        /* inline ops.req_notify_cq */
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		CHECK_EQ(poll(&p, 1, 0), 0);
		CHECK_OK(ibv_resize_cq(cq, 64));
		CHECK_EQ(ibv_destroy_comp_channel(ch), EBUSY);
		CHECK_OK(ibv_destroy_cq(cq));
		CHECK_OK(ibv_destroy_comp_channel(ch));
		CHECK_OK(ibv_dereg_mr(mr));
		free(buf);
		CHECK_OK(ibv_dealloc_pd(pd));
		CHECK_OK(ibv_close_device(ctx));
	}
	CHECK_EQ(count_fds(), fds);
	ibv_free_device_list(l);
	printf("test_device_api: OK\n");
	return 0;
}
