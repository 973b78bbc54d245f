/* Devices, contexts and queries: list/open/close, the verbs_context ABI markers, and
 * the assertions pyverbs' test_device makes on device and port attributes. */
#include <dirent.h>
#include <endian.h>
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/context.h"
#include "net/addr.h"
#include "transport/responder.h"

int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned idx, unsigned *type);

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

static void test_config_error(void)
{
	/* pthread_once: a bad configuration must be the first one this process sees. */
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		setenv("SWVERBS_DEVICES", "not a spec!!", 1);
		errno = 0;
		struct ibv_device **l = ibv_get_device_list(NULL);
		_exit(l == NULL && errno == EINVAL ? 0 : 1);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_list(struct ibv_device ***out, int *n)
{
	struct ibv_device **l = ibv_get_device_list(n);
	CHECK_PTR(l);
	CHECK_EQ(*n, 2);
	CHECK(l[2] == NULL);
	CHECK(strcmp(ibv_get_device_name(l[0]), "swt0") == 0);
	CHECK(strcmp(ibv_get_device_name(l[1]), "swt1") == 0);
	CHECK_EQ(ibv_get_device_index(l[0]), 0);
	CHECK_EQ(ibv_get_device_index(l[1]), 1);
	for (int i = 0; i < 2; i++) {
		struct swv_device *d = to_swv_device(l[i]);
		CHECK_EQ(l[i]->node_type, IBV_NODE_CA);
		CHECK_EQ(l[i]->transport_type, IBV_TRANSPORT_IB);
		CHECK(strncmp(l[i]->ibdev_path, "/sys/class/infiniband/", 22) == 0);
		CHECK(d->verbs_device_ops == NULL);
		/* GUID in network order, embedding the IP. */
		CHECK_EQ(be64toh(ibv_get_device_guid(l[i])), swv_guid_from_ip(d->cfg->addr));
		CHECK(ibv_get_device_guid(l[i]) != 0);
	}
	/* Foreign pointers are refused, not dereferenced. */
	struct ibv_device fake;
	memset(&fake, 0, sizeof(fake));
	errno = 0;
	CHECK(ibv_get_device_name(&fake) == NULL && errno == EINVAL);
	CHECK_EQ(ibv_get_device_index(&fake), -1);
	errno = 0;
	CHECK(ibv_open_device(&fake) == NULL && errno == EINVAL);
	*out = l;
}

static void test_context_abi(struct ibv_context *ctx)
{
	struct verbs_context *v = verbs_get_ctx(ctx);
	CHECK_PTR(v);
	CHECK(ctx->abi_compat == (void *)UINTPTR_MAX);
	CHECK_EQ(v->sz, sizeof(struct verbs_context));
	CHECK(v->query_port && v->query_device_ex);
	CHECK(v->create_cq_ex && v->query_rt_values); /* extended CQs, the completion clock */
	CHECK(ctx->ops.poll_cq && ctx->ops.req_notify_cq && ctx->ops.post_send &&
	      ctx->ops.post_recv && ctx->ops.post_srq_recv);
	CHECK_EQ(ctx->num_comp_vectors, 1);
	CHECK(ctx->async_fd >= 0);
	struct ibv_cq_init_attr_ex cqa = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_CVLAN};
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &cqa) == NULL && errno == EOPNOTSUPP); /* no raw packet */
}

static void test_query_device(struct ibv_context *ctx, struct ibv_device *dev)
{
	struct ibv_device_attr a;
	CHECK_OK(ibv_query_device(ctx, &a));
	CHECK(a.vendor_id != 0);
	CHECK_EQ(a.vendor_id, 0xffffff);
	CHECK(a.node_guid != 0 && a.sys_image_guid != 0);
	CHECK(a.node_guid == ibv_get_device_guid(dev));
	CHECK(a.max_mr_size > 4096);
	CHECK(a.page_size_cap >= 4096);
	CHECK(a.max_qp > 0 && a.max_qp_wr > 0 && a.max_sge > 0 && a.max_cq > 0 && a.max_cqe > 0 &&
	      a.max_mr > 0 && a.max_pd > 0 && a.max_pkeys > 0);
	CHECK_EQ(a.max_qp_rd_atom, SWV_MAX_RD_ATOMIC);
	CHECK_EQ(a.max_qp_init_rd_atom, SWV_MAX_RD_ATOMIC);
	CHECK_EQ(a.atomic_cap, IBV_ATOMIC_HCA);
	CHECK_EQ(a.phys_port_cnt, 1);
	/* SRQs: the limits core/srq.h enforces, resizable */
	CHECK(a.max_srq > 0 && a.max_srq_wr == 16384 && a.max_srq_sge == 32);
	CHECK(a.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
	CHECK(strncmp(a.fw_ver, "swverbs", 7) == 0);

	struct ibv_device_attr_ex ax;
	memset(&ax, 0x5a, sizeof(ax));
	CHECK_OK(ibv_query_device_ex(ctx, NULL, &ax));
	CHECK(memcmp(&ax.orig_attr, &a, sizeof(a)) == 0);
	CHECK_EQ(ax.phys_port_cnt_ex, a.phys_port_cnt);
	CHECK_EQ(ax.odp_caps.general_caps, IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT);
	/* Completion timestamps: a 1 GHz clock (1 tick = 1 ns), 64 valid bits. */
	CHECK(ax.completion_timestamp_mask == UINT64_MAX);
	CHECK_EQ(ax.hca_core_clock, 1000000);
	/* the 32-bit flags, and IBTA 1.5's FLUSH and ATOMIC_WRITE above them */
	CHECK(ax.device_cap_flags_ex ==
	      (a.device_cap_flags | IB_UVERBS_DEVICE_FLUSH_GLOBAL |
	       IB_UVERBS_DEVICE_FLUSH_PERSISTENT | IB_UVERBS_DEVICE_ATOMIC_WRITE));
	CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
	CHECK(a.max_mw > 0);
	CHECK_EQ(ax.max_dm_size, 1u << 20); /* device memory (core/dm.h) */
	struct ibv_values_ex rt = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	struct timespec mono;
	CHECK_OK(ibv_query_rt_values_ex(ctx, &rt));
	clock_gettime(CLOCK_MONOTONIC, &mono);
	CHECK_EQ(rt.comp_mask, IBV_VALUES_MASK_RAW_CLOCK);
	CHECK_EQ(rt.raw_clock.tv_sec, 0); /* ticks in tv_nsec, as mlx5 reports them */
	uint64_t now = (uint64_t)mono.tv_sec * 1000000000ull + (uint64_t)mono.tv_nsec;
	CHECK((uint64_t)rt.raw_clock.tv_nsec <= now &&
	      now - (uint64_t)rt.raw_clock.tv_nsec < 1000000000ull);
	rt.comp_mask = IBV_VALUES_MASK_RESERVED;
	CHECK_EQ(ibv_query_rt_values_ex(ctx, &rt), EINVAL);
	struct ibv_query_device_ex_input in = {.comp_mask = 1};
	CHECK_EQ(ibv_query_device_ex(ctx, &in, &ax), EINVAL);
	/* An older caller's smaller struct: only its bytes are written. */
	unsigned char small[sizeof(struct ibv_device_attr) + 16];
	memset(small, 0x77, sizeof(small));
	CHECK_OK(verbs_get_ctx(ctx)->query_device_ex(ctx, NULL, (void *)small,
						      sizeof(struct ibv_device_attr)));
	CHECK_EQ(small[sizeof(struct ibv_device_attr)], 0x77);
	CHECK_EQ(verbs_get_ctx(ctx)->query_device_ex(ctx, NULL, (void *)small, 16), EINVAL);
	CHECK_EQ(ibv_query_device(NULL, &a), EINVAL);
}

static void test_query_port(struct ibv_context *ctx, bool ib)
{
	struct swv_context *sctx = to_swv_ctx(ctx);
	struct ibv_port_attr pa;

	CHECK_OK(ibv_query_port(ctx, 1, &pa));
	CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
	CHECK_EQ(pa.phys_state, 5);
	CHECK_EQ(pa.max_mtu, IBV_MTU_4096);
	CHECK(pa.active_mtu >= IBV_MTU_256 && pa.active_mtu <= pa.max_mtu);
	CHECK(pa.max_msg_sz > 0x1000);
	CHECK_EQ(pa.pkey_tbl_len, 1);
	CHECK_EQ(pa.gid_tbl_len, 2);
	CHECK_EQ(pa.active_width, 2);
	CHECK(pa.active_speed == 4);
	if (ib) {
		CHECK_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
		CHECK_EQ(pa.lid, swv_lid_from_ip(sctx->cfg, sctx->cfg->addr));
		CHECK(pa.lid != 0);
		CHECK_EQ(pa.sm_lid, 1);
	} else {
		CHECK_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
		CHECK_EQ(pa.lid, 0);
		CHECK(pa.port_cap_flags & IBV_PORT_IP_BASED_GIDS);
	}
	CHECK_EQ(ibv_query_port(ctx, 2, &pa), EINVAL);
	CHECK_EQ(ibv_query_port(ctx, 0, &pa), EINVAL);
	CHECK_EQ(ibv_query_port(ctx, 7, &pa), EINVAL);

	/* The legacy export fills exactly the 48-byte compat struct. */
	unsigned char buf[sizeof(struct ibv_port_attr) + 8];
	memset(buf, 0xee, sizeof(buf));
	CHECK_OK((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)buf));
	CHECK_EQ(buf[48], 0xee);
	struct ibv_port_attr *lp = (struct ibv_port_attr *)buf;
	CHECK_EQ(lp->state, IBV_PORT_ACTIVE);
	CHECK_EQ(lp->link_layer, pa.link_layer);
}

static void test_gids(struct ibv_context *ctx, bool ib)
{
	struct swv_context *sctx = to_swv_ctx(ctx);
	union ibv_gid g;
	uint8_t expect[16];
	struct in_addr ip;

	swv_gid_of_device(sctx->cfg, expect);
	CHECK_OK(ibv_query_gid(ctx, 1, 0, &g));
	CHECK(memcmp(g.raw, expect, 16) == 0);
	CHECK(swv_ip_from_gid(g.raw, &ip) && ip.s_addr == sctx->cfg->addr.s_addr);
	if (ib)
		CHECK(g.raw[0] == 0xfe && g.raw[1] == 0x80);
	else
		CHECK(g.raw[10] == 0xff && g.raw[11] == 0xff);
	/* Empty entry reads as zero GID; out of range and bad port fail. */
	memset(&g, 1, sizeof(g));
	CHECK_OK(ibv_query_gid(ctx, 1, 1, &g));
	for (int i = 0; i < 16; i++)
		CHECK_EQ(g.raw[i], 0);
	CHECK_EQ(ibv_query_gid(ctx, 1, 2, &g), -1);
	CHECK_EQ(ibv_query_gid(ctx, 2, 0, &g), -1);
	CHECK_EQ(ibv_query_gid(ctx, 1, -1, &g), -1);

	struct ibv_gid_entry e;
	CHECK_OK(ibv_query_gid_ex(ctx, 1, 0, &e, 0));
	CHECK(memcmp(e.gid.raw, expect, 16) == 0);
	CHECK_EQ(e.gid_index, 0);
	CHECK_EQ(e.port_num, 1);
	CHECK_EQ(e.gid_type, ib ? IBV_GID_TYPE_IB : IBV_GID_TYPE_ROCE_V2);
	CHECK_EQ(ibv_query_gid_ex(ctx, 1, 1, &e, 0), ENODATA); /* pyverbs: positive ENODATA */
	CHECK_EQ(ibv_query_gid_ex(ctx, 1, 2, &e, 0), EINVAL);
	CHECK_EQ(ibv_query_gid_ex(ctx, 2, 0, &e, 0), EINVAL);
	CHECK_EQ(ibv_query_gid_ex(ctx, 1, 0, &e, 1), EINVAL);
	CHECK_EQ(_ibv_query_gid_ex(ctx, 1, 0, &e, 0, 8), EINVAL);

	struct ibv_gid_entry tab[4];
	CHECK_EQ(ibv_query_gid_table(ctx, tab, 0, 0), -EINVAL); /* pyverbs: negative */
	CHECK_EQ(ibv_query_gid_table(ctx, tab, 4, 0), 1);
	CHECK(memcmp(tab[0].gid.raw, expect, 16) == 0);
	CHECK_EQ(ibv_query_gid_table(ctx, tab, 4, 1), -EINVAL);
	/* A larger entry_size (newer caller) strides correctly. */
	unsigned char big[2][48];
	CHECK_EQ(_ibv_query_gid_table(ctx, (void *)big, 2, 0, 48), 1);
	CHECK(memcmp(big[0], expect, 16) == 0);

	unsigned type = 99;
	CHECK_OK(ibv_query_gid_type(ctx, 1, 0, &type));
	CHECK_EQ(type, ib ? 0 : 1);
	CHECK_OK(ibv_query_gid_type(ctx, 1, 1, &type));
	CHECK_EQ(type, 0);
	CHECK_EQ(ibv_query_gid_type(ctx, 1, 5, &type), -1);

	__be16 pkey = 0;
	CHECK_OK(ibv_query_pkey(ctx, 1, 0, &pkey));
	CHECK_EQ(be16toh(pkey), 0xffff);
	CHECK_EQ(ibv_query_pkey(ctx, 1, 1, &pkey), -1);
	CHECK_EQ(ibv_query_pkey(ctx, 2, 0, &pkey), -1);
	CHECK_EQ(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)), 0);
	CHECK_EQ(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)), -1);
}

static void test_open_close_loop(struct ibv_device *dev)
{
	int before = count_fds();
	for (int i = 0; i < 50; i++) {
		struct ibv_context *ctx = ibv_open_device(dev);
		CHECK_PTR(ctx);
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		CHECK_PTR(pd);
		CHECK_OK(ibv_dealloc_pd(pd));
		CHECK_OK(ibv_close_device(ctx));
	}
	CHECK_EQ(count_fds(), before);
	/* Two contexts on one device at once are independent. */
	struct ibv_context *a = ibv_open_device(dev), *b = ibv_open_device(dev);
	CHECK_PTR(a);
	CHECK_PTR(b);
	CHECK(to_swv_ctx(a)->ports[0]->ep.port != to_swv_ctx(b)->ports[0]->ep.port);
	CHECK_OK(ibv_close_device(a));
	CHECK_OK(ibv_close_device(b));
}

int main(void)
{
	test_config_error();

	unsetenv("SWVERBS_CONFIG");
	setenv("SWVERBS_DEVICES", "swt0=127.0.0.1/8;swt1=127.0.0.2/8,roce", 1);
	struct ibv_device **l;
	int n;
	test_list(&l, &n);

	for (int i = 0; i < n; i++) {
		bool ib = i == 0;
		struct ibv_context *ctx = ibv_open_device(l[i]);
		CHECK_PTR(ctx);
		CHECK(ctx->device == l[i]);
		test_context_abi(ctx);
		test_query_device(ctx, l[i]);
		test_query_port(ctx, ib);
		test_gids(ctx, ib);
		CHECK_OK(ibv_close_device(ctx));
	}
	test_open_close_loop(l[0]);
	struct ibv_device *first = l[0];
	ibv_free_device_list(l);

	/* The list is only an array: devices outlive it. */
	struct ibv_device **l2 = ibv_get_device_list(NULL);
	CHECK_PTR(l2);
	CHECK(l2[0] == first);
	ibv_free_device_list(l2);
	printf("test_device: OK\n");
	return 0;
}
