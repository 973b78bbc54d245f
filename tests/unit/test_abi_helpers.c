/*
 * The exported entry points no other module owns (src/api/{rate,opcode_str,fork,sysfs,
 * kern_abi,import,ece,mcast,eth_l2,dmah,dm,port_speed,buf,mr_ex}.c) and XRC's entry: pure helpers
 * give rdma-core's answers (compared with the system libibverbs.so.1 when it is
 * installed), implemented calls work, unsupported features answer exactly EOPNOTSUPP,
 * and every call refuses NULL arguments.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if __has_include(<infiniband/sa.h>)
/* rdma-core's public header, found in the system include directory; it includes
 * <infiniband/verbs.h>, which resolves to swverbs' (already included). */
#include <infiniband/sa.h>
#define HAVE_SA_H 1
#endif

#include "check.h"
#include "core/mr.h"
#include "util/compiler.h"

/* Declared only in rdma-core's private headers. */
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
#ifdef HAVE_SA_H
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);
#endif

/* The system libibverbs, for answers to compare with; NULL if not installed. */
static void *sys_lib;

static void *sys_fn(const char *name, const char *version)
{
	return sys_lib ? dlvsym(sys_lib, name, version) : NULL;
}

static void test_rates(void)
{
	CHECK_EQ(ibv_rate_to_mult(IBV_RATE_5_GBPS), 2);
	CHECK_EQ(ibv_rate_to_mbps(IBV_RATE_5_GBPS), 5000);
	CHECK_EQ(mult_to_ibv_rate(2), IBV_RATE_5_GBPS);
	CHECK_EQ(mbps_to_ibv_rate(5000), IBV_RATE_5_GBPS);
	CHECK_EQ(ibv_rate_to_mult(IBV_RATE_25_GBPS), -1); /* not a multiple of 2.5 */
	CHECK_EQ(ibv_rate_to_mbps(IBV_RATE_25_GBPS), 25781);
	CHECK_EQ(mbps_to_ibv_rate(25781), IBV_RATE_25_GBPS);
	CHECK_EQ(ibv_rate_to_mult(IBV_RATE_1200_GBPS), 480);
	CHECK_EQ(ibv_rate_to_mbps(IBV_RATE_MAX), -1);
	CHECK_EQ(ibv_rate_to_mult((enum ibv_rate)99), -1);
	CHECK_EQ(mult_to_ibv_rate(0), IBV_RATE_MAX);
	CHECK_EQ(mult_to_ibv_rate(-4), IBV_RATE_MAX);
	CHECK_EQ(mbps_to_ibv_rate(4999), IBV_RATE_MAX);
	/* Round trips over every rate. */
	for (int r = IBV_RATE_2_5_GBPS; r <= IBV_RATE_1200_GBPS; r++) {
		CHECK_EQ(mbps_to_ibv_rate(ibv_rate_to_mbps(r)), r);
		if (ibv_rate_to_mult(r) > 0)
			CHECK_EQ(mult_to_ibv_rate(ibv_rate_to_mult(r)), r);
	}

	int (*s_to_mult)(int) = sys_fn("ibv_rate_to_mult", "IBVERBS_1.0");
	int (*s_to_mbps)(int) = sys_fn("ibv_rate_to_mbps", "IBVERBS_1.1");
	int (*s_from_mult)(int) = sys_fn("mult_to_ibv_rate", "IBVERBS_1.0");
	int (*s_from_mbps)(int) = sys_fn("mbps_to_ibv_rate", "IBVERBS_1.1");
	if (!s_to_mult || !s_to_mbps || !s_from_mult || !s_from_mbps) {
		printf("note: system libibverbs not found; rates not compared with it\n");
		return;
	}
	for (int r = -2; r < 40; r++) {
		CHECK_EQ(ibv_rate_to_mult(r), s_to_mult(r));
		CHECK_EQ(ibv_rate_to_mbps(r), s_to_mbps(r));
	}
	for (int m = -2; m <= 1000; m++)
		CHECK_EQ(mult_to_ibv_rate(m), s_from_mult(m));
	for (int r = IBV_RATE_2_5_GBPS; r <= IBV_RATE_1200_GBPS; r++) {
		int mbps = ibv_rate_to_mbps(r);
		for (int d = -1; d <= 1; d++)
			CHECK_EQ(mbps_to_ibv_rate(mbps + d), s_from_mbps(mbps + d));
	}
	printf("rates: same answers as the system libibverbs\n");
}

static void test_opcode_str(void)
{
	CHECK(strcmp(ibv_wr_opcode_str(IBV_WR_RDMA_WRITE), "rdma-write") == 0);
	CHECK(strcmp(ibv_wr_opcode_str(IBV_WR_SEND_WITH_IMM), "send-with-imm") == 0);
	CHECK(strcmp(ibv_wr_opcode_str(IBV_WR_ATOMIC_WRITE), "atomic-write") == 0);
	CHECK(strcmp(ibv_wr_opcode_str(IBV_WR_FLUSH), "flush") == 0);
	/* The holes (12, 13) and anything out of range. */
	CHECK(strcmp(ibv_wr_opcode_str((enum ibv_wr_opcode)12), "unknown") == 0);
	CHECK(strcmp(ibv_wr_opcode_str((enum ibv_wr_opcode)13), "unknown") == 0);
	CHECK(strcmp(ibv_wr_opcode_str((enum ibv_wr_opcode)16), "unknown") == 0);
	CHECK(strcmp(ibv_wr_opcode_str((enum ibv_wr_opcode) - 1), "unknown") == 0);
}

static void test_fork(void)
{
	CHECK_EQ(ibv_fork_init(), 0);
	CHECK_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
	char buf[64];
	CHECK_EQ(ibv_dontfork_range(buf, sizeof(buf)), 0);
	CHECK_EQ(ibv_dofork_range(buf, sizeof(buf)), 0);
	CHECK_EQ(ibv_dontfork_range(NULL, 0), 0);
}

static void write_file(const char *dir, const char *name, const char *data, size_t len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, data, len), (long long)len);
	close(fd);
}

static void test_sysfs(struct ibv_device *dev)
{
	/* SYSFS_PATH is read once per process: try it in a child first. */
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		setenv("SYSFS_PATH", "/tmp/fake-sys///", 1);
		_exit(strcmp(ibv_get_sysfs_path(), "/tmp/fake-sys") == 0 ? 0 : 1);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	const char *env = getenv("SYSFS_PATH");
	if (!env || !*env)
		CHECK(strcmp(ibv_get_sysfs_path(), "/sys") == 0);
	CHECK(ibv_get_sysfs_path() == ibv_get_sysfs_path()); /* stable pointer */

	char dir[] = "/tmp/swv-sysfs-XXXXXX";
	CHECK_PTR(mkdtemp(dir));
	write_file(dir, "nl", "abc\n", 4);
	write_file(dir, "nonl", "abc", 3);
	write_file(dir, "full", "abcdefgh", 8);
	write_file(dir, "empty", "", 0);

	int (*sys_read)(const char *, const char *, char *, size_t) =
	    sys_fn("ibv_read_sysfs_file", "IBVERBS_1.0");
	const char *names[] = {"nl", "nonl", "full", "empty", "missing"};
	for (size_t i = 0; i < SWV_ARRAY_SIZE(names); i++) {
		char a[8], b[8];
		memset(a, 'x', sizeof(a));
		memset(b, 'x', sizeof(b));
		errno = 0;
		int ra = ibv_read_sysfs_file(dir, names[i], a, sizeof(a));
		int ea = errno;
		if (ra >= 0)
			CHECK(strlen(a) == (size_t)ra);
		if (!sys_read)
			continue;
		errno = 0;
		int rb = sys_read(dir, names[i], b, sizeof(b));
		CHECK_EQ(ra, rb);
		if (ra > 0) /* (for an empty file rdma-core leaves buf as it was; we give "") */
			CHECK(memcmp(a, b, (size_t)ra + 1) == 0);
		else if (strcmp(names[i], "missing") == 0)
			CHECK_EQ(ea, errno);
	}
	char s[8];
	CHECK_EQ(ibv_read_sysfs_file(dir, "nl", s, sizeof(s)), 3);
	CHECK(strcmp(s, "abc") == 0);
	CHECK_EQ(ibv_read_sysfs_file(dir, "full", s, sizeof(s)), -1); /* cannot terminate */
	errno = 0;
	CHECK_EQ(ibv_read_sysfs_file(dir, "missing", s, sizeof(s)), -1);
	CHECK_EQ(errno, ENOENT);
	errno = 0;
	CHECK_EQ(ibv_read_sysfs_file(NULL, "nl", s, sizeof(s)), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(ibv_read_sysfs_file(dir, NULL, s, sizeof(s)), -1);
	CHECK_EQ(ibv_read_sysfs_file(dir, "nl", NULL, 4), -1);

	/* A swverbs device's files come from the generated tree (tests/unit/test_sysfs_tree.c),
	 * even where a real device of that name has some; a file it lacks is missing. */
	errno = 0;
	CHECK_EQ(ibv_read_sysfs_file(dev->ibdev_path, "board_id", s, sizeof(s)), -1);
	CHECK_EQ(errno, ENOENT);
	CHECK_EQ(ibv_read_sysfs_file(dev->dev_path, "abi_version", s, sizeof(s)), 1);
	CHECK(strcmp(s, "1") == 0);
	CHECK_EQ(ibv_read_sysfs_file(dev->ibdev_path, "node_type", s, sizeof(s)), 5);
	CHECK(strcmp(s, "1: CA") == 0);
	char sub[IBV_SYSFS_PATH_MAX + 8];
	snprintf(sub, sizeof(sub), "%s/ports", dev->ibdev_path);
	char t[16];
	CHECK_EQ(ibv_read_sysfs_file(sub, "1/gid_attrs/types/0", t, sizeof(t)), 10);
	CHECK(strcmp(t, "IB/RoCE v1") == 0);
	/* ... but a sibling whose name merely starts the same is not ours. */
	snprintf(sub, sizeof(sub), "%sX", dev->ibdev_path);
	errno = 0;
	CHECK_EQ(ibv_read_sysfs_file(sub, "board_id", s, sizeof(s)), -1);
	CHECK_EQ(errno, ENOENT); /* from open(): no such directory on this host */

	const char *rm[] = {"nl", "nonl", "full", "empty"};
	for (size_t i = 0; i < SWV_ARRAY_SIZE(rm); i++) {
		char p[512];
		snprintf(p, sizeof(p), "%s/%s", dir, rm[i]);
		unlink(p);
	}
	rmdir(dir);
}

static void test_kern_abi(void)
{
	struct ib_uverbs_qp_attr k;
	memset(&k, 0, sizeof(k));
	k.qp_state = IBV_QPS_RTS;
	k.cur_qp_state = IBV_QPS_RTR;
	k.path_mtu = IBV_MTU_2048;
	k.path_mig_state = IBV_MIG_ARMED;
	k.qkey = 0x11111111;
	k.rq_psn = 0x123456;
	k.sq_psn = 0x654321;
	k.dest_qp_num = 0xabcdef;
	k.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	k.max_send_wr = 1;
	k.max_recv_wr = 2;
	k.max_send_sge = 3;
	k.max_recv_sge = 4;
	k.max_inline_data = 5;
	for (int i = 0; i < 16; i++) {
		k.ah_attr.grh.dgid[i] = (uint8_t)i;
		k.alt_ah_attr.grh.dgid[i] = (uint8_t)(0xf0 | i);
	}
	k.ah_attr.grh.flow_label = 0xbeef;
	k.ah_attr.grh.sgid_index = 1;
	k.ah_attr.grh.hop_limit = 64;
	k.ah_attr.grh.traffic_class = 7;
	k.ah_attr.dlid = 0x1234;
	k.ah_attr.sl = 3;
	k.ah_attr.src_path_bits = 1;
	k.ah_attr.static_rate = IBV_RATE_40_GBPS;
	k.ah_attr.is_global = 1;
	k.ah_attr.port_num = 1;
	k.alt_ah_attr.dlid = 0x4321;
	k.alt_ah_attr.port_num = 2;
	k.pkey_index = 9;
	k.alt_pkey_index = 10;
	k.en_sqd_async_notify = 1;
	k.sq_draining = 1;
	k.max_rd_atomic = 16;
	k.max_dest_rd_atomic = 15;
	k.min_rnr_timer = 12;
	k.port_num = 1;
	k.timeout = 14;
	k.retry_cnt = 7;
	k.rnr_retry = 6;
	k.alt_port_num = 2;
	k.alt_timeout = 18;

	struct ibv_qp_attr a;
	memset(&a, 0xa5, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	ibv_copy_qp_attr_from_kern(&a, &k);
	CHECK_EQ(a.qp_state, IBV_QPS_INIT); /* the caller's, as in rdma-core */
	CHECK_EQ(a.cur_qp_state, IBV_QPS_RTR);
	CHECK_EQ(a.path_mtu, IBV_MTU_2048);
	CHECK_EQ(a.path_mig_state, IBV_MIG_ARMED);
	CHECK_EQ(a.qkey, 0x11111111);
	CHECK_EQ(a.rq_psn, 0x123456);
	CHECK_EQ(a.sq_psn, 0x654321);
	CHECK_EQ(a.dest_qp_num, 0xabcdef);
	CHECK_EQ(a.qp_access_flags, IBV_ACCESS_REMOTE_WRITE);
	CHECK_EQ(a.cap.max_send_wr, 1);
	CHECK_EQ(a.cap.max_recv_wr, 2);
	CHECK_EQ(a.cap.max_send_sge, 3);
	CHECK_EQ(a.cap.max_recv_sge, 4);
	CHECK_EQ(a.cap.max_inline_data, 5);
	for (int i = 0; i < 16; i++) {
		CHECK_EQ(a.ah_attr.grh.dgid.raw[i], i);
		CHECK_EQ(a.alt_ah_attr.grh.dgid.raw[i], 0xf0 | i);
	}
	CHECK_EQ(a.ah_attr.grh.flow_label, 0xbeef);
	CHECK_EQ(a.ah_attr.grh.sgid_index, 1);
	CHECK_EQ(a.ah_attr.grh.hop_limit, 64);
	CHECK_EQ(a.ah_attr.grh.traffic_class, 7);
	CHECK_EQ(a.ah_attr.dlid, 0x1234);
	CHECK_EQ(a.ah_attr.sl, 3);
	CHECK_EQ(a.ah_attr.src_path_bits, 1);
	CHECK_EQ(a.ah_attr.static_rate, IBV_RATE_40_GBPS);
	CHECK_EQ(a.ah_attr.is_global, 1);
	CHECK_EQ(a.ah_attr.port_num, 1);
	CHECK_EQ(a.alt_ah_attr.dlid, 0x4321);
	CHECK_EQ(a.alt_ah_attr.port_num, 2);
	CHECK_EQ(a.pkey_index, 9);
	CHECK_EQ(a.alt_pkey_index, 10);
	CHECK_EQ(a.en_sqd_async_notify, 1);
	CHECK_EQ(a.sq_draining, 1);
	CHECK_EQ(a.max_rd_atomic, 16);
	CHECK_EQ(a.max_dest_rd_atomic, 15);
	CHECK_EQ(a.min_rnr_timer, 12);
	CHECK_EQ(a.port_num, 1);
	CHECK_EQ(a.timeout, 14);
	CHECK_EQ(a.retry_cnt, 7);
	CHECK_EQ(a.rnr_retry, 6);
	CHECK_EQ(a.alt_port_num, 2);
	CHECK_EQ(a.alt_timeout, 18);
	ibv_copy_qp_attr_from_kern(NULL, &k); /* ignored, no crash */
	ibv_copy_ah_attr_from_kern(&a.ah_attr, NULL);

	/* The same conversion as the system library, byte for byte where it writes. */
	void (*sys_qp)(struct ibv_qp_attr *, struct ib_uverbs_qp_attr *) =
	    sys_fn("ibv_copy_qp_attr_from_kern", "IBVERBS_1.0");
	if (sys_qp) {
		struct ibv_qp_attr b;
		memset(&a, 0x5a, sizeof(a));
		memset(&b, 0x5a, sizeof(b));
		ibv_copy_qp_attr_from_kern(&a, &k);
		sys_qp(&b, &k);
		for (size_t i = 0; i < offsetof(struct ibv_qp_attr, rate_limit); i++)
			if (((uint8_t *)&a)[i] != ((uint8_t *)&b)[i])
				fprintf(stderr, "ibv_qp_attr byte %zu: ours %#x, system %#x\n", i,
					((uint8_t *)&a)[i], ((uint8_t *)&b)[i]);
		CHECK(memcmp(&a, &b, offsetof(struct ibv_qp_attr, rate_limit)) == 0);
	}

#ifdef HAVE_SA_H
	struct ib_user_path_rec kp, kp2;
	memset(&kp, 0, sizeof(kp));
	for (int i = 0; i < 16; i++) {
		kp.dgid[i] = (uint8_t)(i + 1);
		kp.sgid[i] = (uint8_t)(i + 100);
	}
	kp.dlid = htobe16(5);
	kp.slid = htobe16(6);
	kp.raw_traffic = 1;
	kp.flow_label = htobe32(0x12345);
	kp.reversible = 1;
	kp.mtu = IBV_MTU_4096;
	kp.pkey = htobe16(0xffff);
	kp.hop_limit = 3;
	kp.traffic_class = 4;
	kp.numb_path = 1;
	kp.sl = 2;
	kp.mtu_selector = 2;
	kp.rate_selector = 2;
	kp.rate = IBV_RATE_40_GBPS;
	kp.packet_life_time_selector = 2;
	kp.packet_life_time = 18;
	kp.preference = 1;
	struct ibv_sa_path_rec pr;
	memset(&pr, 0xee, sizeof(pr));
	ibv_copy_path_rec_from_kern(&pr, &kp);
	CHECK(memcmp(pr.dgid.raw, kp.dgid, 16) == 0);
	CHECK(memcmp(pr.sgid.raw, kp.sgid, 16) == 0);
	CHECK_EQ(be16toh(pr.dlid), 5);
	CHECK_EQ(be16toh(pr.slid), 6);
	CHECK_EQ(pr.raw_traffic, 1);
	CHECK_EQ(be32toh(pr.flow_label), 0x12345);
	CHECK_EQ(pr.reversible, 1);
	CHECK_EQ(pr.mtu, IBV_MTU_4096);
	CHECK_EQ(be16toh(pr.pkey), 0xffff);
	CHECK_EQ(pr.hop_limit, 3);
	CHECK_EQ(pr.traffic_class, 4);
	CHECK_EQ(pr.numb_path, 1);
	CHECK_EQ(pr.sl, 2);
	CHECK_EQ(pr.rate, IBV_RATE_40_GBPS);
	CHECK_EQ(pr.packet_life_time, 18);
	CHECK_EQ(pr.preference, 1);
	memset(&kp2, 0xcc, sizeof(kp2));
	ibv_copy_path_rec_to_kern(&kp2, &pr);
	CHECK(memcmp(&kp, &kp2, sizeof(kp)) == 0); /* round trip is exact */
	printf("kern_abi: path record round trip through <infiniband/sa.h>'s layout\n");
#endif
}

struct objs {
	struct ibv_context *ctx;
	struct ibv_pd *pd, *pd2;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static void open_objs(struct ibv_device *dev, struct objs *o)
{
	o->ctx = ibv_open_device(dev);
	CHECK_PTR(o->ctx);
	o->pd = ibv_alloc_pd(o->ctx);
	CHECK_PTR(o->pd);
	o->pd2 = ibv_alloc_pd(o->ctx);
	CHECK_PTR(o->pd2);
	o->cq = ibv_create_cq(o->ctx, 16, NULL, NULL, 0);
	CHECK_PTR(o->cq);
	struct ibv_qp_init_attr qa = {
	    .send_cq = o->cq,
	    .recv_cq = o->cq,
	    .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
	    .qp_type = IBV_QPT_RC,
	};
	o->qp = ibv_create_qp(o->pd, &qa);
	CHECK_PTR(o->qp);
}

static void close_objs(struct objs *o)
{
	CHECK_OK(ibv_destroy_qp(o->qp));
	CHECK_OK(ibv_destroy_cq(o->cq));
	CHECK_OK(ibv_dealloc_pd(o->pd2));
	CHECK_OK(ibv_dealloc_pd(o->pd));
	CHECK_OK(ibv_close_device(o->ctx));
}

static void test_unsupported(struct objs *o)
{
	/* Import works within the process (unit/test_import has it all); what is left
	 * here: the arguments rdma-core refuses, and unimport of an object that was not
	 * imported, which must leave it alone. */
	CHECK_NULL_ERRNO(ibv_import_device(-1), EINVAL);
	CHECK_NULL_ERRNO(ibv_import_device(0), EOPNOTSUPP);
	CHECK_NULL_ERRNO(ibv_import_pd(NULL, 1), EINVAL);
	CHECK_NULL_ERRNO(ibv_import_mr(NULL, 1), EINVAL);
	CHECK_NULL_ERRNO(ibv_import_dm(NULL, 1), EINVAL);
	ibv_unimport_pd(o->pd);
	ibv_unimport_pd(NULL);
	ibv_unimport_mr(NULL);
	ibv_unimport_dm(NULL);
	CHECK_EQ(o->pd->context, o->ctx);

	struct ibv_ece ece = {.vendor_id = 0x1234};
	CHECK_EQ(ibv_query_ece(o->qp, &ece), EOPNOTSUPP);
	CHECK_EQ(ibv_set_ece(o->qp, &ece), EOPNOTSUPP);
	CHECK_EQ(ibv_query_ece(o->qp, NULL), EINVAL);
	CHECK_EQ(ibv_query_ece(NULL, &ece), EINVAL);
	ece.vendor_id = 0;
	CHECK_EQ(ibv_set_ece(o->qp, &ece), EINVAL);

	union ibv_gid mgid = {.raw = {0xff, 0x12, 0x40, 0x1b}};
	/* Multicast is for UD QPs (unit/test_mcast has the rest): this RC QP is refused. */
	CHECK_EQ(ibv_attach_mcast(o->qp, &mgid, 0xc001), EINVAL);
	CHECK_EQ(ibv_detach_mcast(o->qp, &mgid, 0xc001), EINVAL);
	CHECK_EQ(ibv_attach_mcast(NULL, &mgid, 0xc001), EINVAL);
	CHECK_EQ(ibv_detach_mcast(o->qp, NULL, 0xc001), EINVAL);

	struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1};
	uint8_t mac[ETHERNET_LL_SIZE];
	uint16_t vid;
	CHECK_EQ(ibv_resolve_eth_l2_from_gid(o->ctx, &ah, mac, &vid), -EOPNOTSUPP);
	CHECK_EQ(ibv_resolve_eth_l2_from_gid(o->ctx, NULL, mac, &vid), -EINVAL);

	struct ibv_dmah_init_attr da = {0};
	CHECK_NULL_ERRNO(ibv_alloc_dmah(o->ctx, &da), EOPNOTSUPP);
	CHECK_NULL_ERRNO(ibv_alloc_dmah(NULL, &da), EINVAL);
	CHECK_NULL_ERRNO(ibv_alloc_dmah(o->ctx, NULL), EINVAL);
	struct ibv_dmah fake_dmah = {.context = o->ctx};
	CHECK_EQ(ibv_dealloc_dmah(&fake_dmah), EOPNOTSUPP);
	CHECK_EQ(ibv_dealloc_dmah(NULL), EINVAL);

	struct ibv_dm fake_dm = {.context = o->ctx};
	errno = 0;
	CHECK_EQ(ibv_dm_export_dmabuf_fd(&fake_dm), -1);
	CHECK_EQ(errno, EOPNOTSUPP);
	errno = 0;
	CHECK_EQ(ibv_dm_export_dmabuf_fd(NULL), -1);
	CHECK_EQ(errno, EINVAL);

	/* Basic SRQs work (tests/unit/test_srq.c); an XRC SRQ needs its domain, which
	 * opens (tests/unit/test_xrc_objects.c). */
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	CHECK_NULL_ERRNO(ibv_create_srq(NULL, &sa), EINVAL);
	struct ibv_srq_init_attr_ex sax = {
	    .attr = {.max_wr = 4, .max_sge = 1}, .comp_mask = IBV_SRQ_INIT_ATTR_PD, .pd = o->pd};
	sax.comp_mask |= IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ;
	sax.srq_type = IBV_SRQT_XRC;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(o->ctx, &sax), EINVAL);
	struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					.fd = -1, .oflags = O_CREAT};
	struct ibv_xrcd *xrcd = ibv_open_xrcd(o->ctx, &xa);
	CHECK_PTR(xrcd);
	CHECK_OK(ibv_close_xrcd(xrcd));
	CHECK_EQ(ibv_destroy_srq(NULL), EINVAL);
	CHECK_EQ(ibv_query_srq(NULL, NULL), EINVAL);
	CHECK_EQ(ibv_modify_srq(NULL, NULL, 0), EINVAL);
}

/* Every function pointer of an ibv_qp_ex is called unchecked by the ibv_wr_* inlines;
 * one the QP does not support must still point at something that fails cleanly. */
static void check_qp_ex(struct ibv_qp_ex *q)
{
	if (!q)
		return;
	void (*const fns[])(void) = {
	    (void (*)(void))q->wr_atomic_cmp_swp,
	    (void (*)(void))q->wr_atomic_fetch_add,
	    (void (*)(void))q->wr_bind_mw,
	    (void (*)(void))q->wr_local_inv,
	    (void (*)(void))q->wr_rdma_read,
	    (void (*)(void))q->wr_rdma_write,
	    (void (*)(void))q->wr_rdma_write_imm,
	    (void (*)(void))q->wr_send,
	    (void (*)(void))q->wr_send_imm,
	    (void (*)(void))q->wr_send_inv,
	    (void (*)(void))q->wr_send_tso,
	    (void (*)(void))q->wr_set_ud_addr,
	    (void (*)(void))q->wr_set_xrc_srqn,
	    (void (*)(void))q->wr_set_inline_data,
	    (void (*)(void))q->wr_set_inline_data_list,
	    (void (*)(void))q->wr_set_sge,
	    (void (*)(void))q->wr_set_sge_list,
	    (void (*)(void))q->wr_start,
	    (void (*)(void))q->wr_complete,
	    (void (*)(void))q->wr_abort,
	    (void (*)(void))q->wr_atomic_write,
	    (void (*)(void))q->wr_flush,
	};
	for (size_t i = 0; i < SWV_ARRAY_SIZE(fns); i++)
		if (!fns[i]) {
			fprintf(stderr, "ibv_qp_ex function pointer #%zu is NULL\n", i);
			CHECK(fns[i]);
		}
}

/*
 * verbs.h inlines call some pointers with no NULL check (verbs-clients.md 1.4): the
 * context ops for posting and polling always, and others only on objects that a
 * paired op creates. A context may leave a creating op NULL (EOPNOTSUPP), but then
 * nothing it would create can exist; if it sets the creating op, the unchecked ones
 * must be set too.
 */
static void test_unchecked_ops(struct objs *o)
{
	struct ibv_context *c = o->ctx;
	struct verbs_context *v = verbs_get_ctx(c);
	CHECK_PTR(v); /* abi_compat marks the extended context */
	CHECK(v->sz >= sizeof(*v) - offsetof(struct verbs_context, query_port));
	CHECK(c->ops.post_send && c->ops.post_recv && c->ops.poll_cq && c->ops.req_notify_cq);
	CHECK(c->ops.post_srq_recv); /* ibv_post_srq_recv: unchecked, even before SRQs exist */
	if (c->ops.alloc_mw)
		CHECK(c->ops.bind_mw && c->ops.dealloc_mw);
	if (v->open_xrcd)
		CHECK(v->close_xrcd); /* ibv_close_xrcd checks neither sz nor NULL */
	if (v->alloc_dm)
		CHECK(v->free_dm); /* and every ibv_dm must carry memcpy_to/from_dm */
	if (v->create_wq)
		CHECK(v->destroy_wq); /* and every ibv_wq must carry post_recv */
	if (v->alloc_dmah)
		CHECK(v->dealloc_dmah);
	if (v->create_flow_action_esp)
		CHECK(v->destroy_flow_action);
	if (v->create_counters)
		CHECK(v->destroy_counters);
	check_qp_ex(ibv_qp_to_qp_ex(o->qp));

	/* A QP created with send ops hands out an ibv_qp_ex whose every wr_* the inlines
	 * may call (pyverbs' test_qpex crashed on a NULL wr_atomic_write elsewhere). */
	struct ibv_qp_init_attr_ex xa = {
	    .send_cq = o->cq,
	    .recv_cq = o->cq,
	    .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
	    .qp_type = IBV_QPT_RC,
	    .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
	    .pd = o->pd,
	    .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(c, &xa);
	if (!qp) {
		CHECK_EQ(errno, EOPNOTSUPP);
		return;
	}
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qp);
	CHECK_PTR(qpx);
	check_qp_ex(qpx);
	CHECK_OK(ibv_destroy_qp(qp));
}

static void test_port_speed(struct objs *o)
{
	uint64_t speed = 0;
	struct ibv_port_attr pa;
	CHECK_OK(ibv_query_port(o->ctx, 1, &pa));
	CHECK_OK(ibv_query_port_speed(o->ctx, 1, &speed));
	/* 4X QDR = 40 Gb/s: agrees with what ibv_query_port says. */
	if (pa.active_width == 2 && pa.active_speed == 4)
		CHECK_EQ(speed, 400);
	CHECK(speed > 0);
	CHECK_EQ(ibv_query_port_speed(o->ctx, 2, &speed), EINVAL);
	CHECK_EQ(ibv_query_port_speed(o->ctx, 0, &speed), EINVAL);
	CHECK_EQ(ibv_query_port_speed(o->ctx, 257, &speed), EINVAL);
	CHECK_EQ(ibv_query_port_speed(NULL, 1, &speed), EINVAL);
	CHECK_EQ(ibv_query_port_speed(o->ctx, 1, NULL), EINVAL);
	printf("port_speed: %llu x 100 Mb/s\n", (unsigned long long)speed);
}

static void test_buf(struct objs *o)
{
	long page = sysconf(_SC_PAGESIZE);
	struct ibv_buf *buf = NULL;
	uint8_t *p = ibv_alloc_buf(o->pd, 2 * (size_t)page, &buf);
	CHECK_PTR(p);
	CHECK_PTR(buf);
	CHECK(((uintptr_t)p & ((uintptr_t)page - 1)) == 0);
	memset(p, 0x5c, 2 * (size_t)page); /* usable memory */

	struct ibv_mr *m1 = ibv_reg_buf_mr(o->pd, buf, p, (size_t)page, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(m1);
	struct ibv_mr *m2 =
	    ibv_reg_buf_mr(o->pd, buf, p + page, (size_t)page, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(m2);
	CHECK(m1->addr == p && m2->addr == p + page);
	CHECK_EQ(m1->length, page);
	CHECK(m1->lkey != m2->lkey);
	CHECK(m1->pd == o->pd);

	/* Wrong PD, past the end (by length and by offset), outside, empty: EINVAL. */
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(o->pd2, buf, p, (size_t)page, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(o->pd, buf, p, 3 * (size_t)page, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(o->pd, buf, p + page, 2 * (size_t)page, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(o->pd, buf, p - 1, 16, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(o->pd, buf, p + 2 * page, 1, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(o->pd, buf, p, SIZE_MAX, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(o->pd, buf, p, 0, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(o->pd, NULL, p, 16, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(NULL, buf, p, 16, 0), EINVAL);
	/* The MR path's own access checks still apply (REMOTE_WRITE needs LOCAL_WRITE). */
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(o->pd, buf, p, 16, IBV_ACCESS_REMOTE_WRITE), EINVAL);

	CHECK_EQ(ibv_dealloc_pd(o->pd), EBUSY); /* the MRs hold the PD */
	CHECK_OK(ibv_dereg_mr(m1));
	CHECK_OK(ibv_dereg_mr(m2));
	ibv_free_buf(buf);
	ibv_free_buf(NULL);

	struct ibv_buf *b2;
	CHECK_NULL_ERRNO(ibv_alloc_buf(o->pd, 0, &b2), EINVAL);
	CHECK_NULL_ERRNO(ibv_alloc_buf(NULL, 64, &b2), EINVAL);
	CHECK_NULL_ERRNO(ibv_alloc_buf(o->pd, 64, NULL), EINVAL);
	/* An odd size still gets usable memory of at least that size. */
	uint8_t *q = ibv_alloc_buf(o->pd, 100, &b2);
	CHECK_PTR(q);
	memset(q, 1, 100);
	struct ibv_mr *m3 = ibv_reg_buf_mr(o->pd, b2, q + 10, 90, 0);
	CHECK_PTR(m3);
	CHECK_NULL_ERRNO(ibv_reg_buf_mr(o->pd, b2, q + 10, 91, 0), EINVAL);
	CHECK_OK(ibv_dereg_mr(m3));
	ibv_free_buf(b2);
}

static void test_reg_mr_ex(struct objs *o)
{
	static uint8_t mem[8192];
	struct ibv_mr_init_attr a = {
	    .length = sizeof(mem),
	    .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
	    .comp_mask = IBV_REG_MR_MASK_ADDR,
	    .addr = mem,
	};
	struct ibv_mr *mr = ibv_reg_mr_ex(o->pd, &a);
	CHECK_PTR(mr);
	CHECK(mr->addr == mem);
	CHECK_EQ(mr->length, sizeof(mem));
	CHECK(mr->pd == o->pd && mr->context == o->ctx);
	struct swv_mr *smr = swv_container_of(mr, struct swv_mr, ibmr);
	CHECK_EQ(smr->iova, (uintptr_t)mem);
	CHECK_OK(ibv_dereg_mr(mr));

	/* With an IOVA, remote addresses are in that space. Optional access bits pass. */
	a.comp_mask |= IBV_REG_MR_MASK_IOVA;
	a.iova = 0x10000;
	a.access |= IBV_ACCESS_RELAXED_ORDERING;
	mr = ibv_reg_mr_ex(o->pd, &a);
	CHECK_PTR(mr);
	smr = swv_container_of(mr, struct swv_mr, ibmr);
	CHECK_EQ(smr->iova, 0x10000);
	CHECK_OK(ibv_dereg_mr(mr));

	/* dma-buf, DMA handles, unknown options: not supported. */
	struct ibv_mr_init_attr f = {.length = 4096, .comp_mask = IBV_REG_MR_MASK_FD, .fd = 0};
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(o->pd, &f), EOPNOTSUPP);
	f.comp_mask = IBV_REG_MR_MASK_FD | IBV_REG_MR_MASK_FD_OFFSET;
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(o->pd, &f), EOPNOTSUPP);
	struct ibv_dmah fake_dmah = {.context = o->ctx};
	struct ibv_mr_init_attr d = a;
	d.comp_mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_DMAH;
	d.dmah = &fake_dmah;
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(o->pd, &d), EOPNOTSUPP);
	/* BUF without a buffer handle (or a range outside it): EINVAL. */
	d.comp_mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_BUF;
	d.buf = NULL;
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(o->pd, &d), EINVAL);
	d.comp_mask = IBV_REG_MR_MASK_ADDR | (1u << 6);
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(o->pd, &d), EOPNOTSUPP);
	/* Exactly one memory source. */
	d.comp_mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_FD;
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(o->pd, &d), EINVAL);
	d.comp_mask = IBV_REG_MR_MASK_IOVA;
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(o->pd, &d), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(NULL, &a), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(o->pd, NULL), EINVAL);
	/* The MR path's checks apply: bad access combination, empty range. */
	d.comp_mask = IBV_REG_MR_MASK_ADDR;
	d.access = IBV_ACCESS_REMOTE_WRITE;
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(o->pd, &d), EINVAL);
}

int main(void)
{
	sys_lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!sys_lib)
		printf("note: system libibverbs.so.1 not loadable (%s); no comparisons\n",
		       dlerror());

	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK_PTR(list);
	CHECK(n >= 1);

	test_rates();
	test_opcode_str();
	test_fork();
	test_sysfs(list[0]);
	test_kern_abi();

	struct objs o;
	open_objs(list[0], &o);
	test_unsupported(&o);
	test_unchecked_ops(&o);
	test_port_speed(&o);
	test_buf(&o);
	test_reg_mr_ex(&o);
	close_objs(&o);
	ibv_free_device_list(list);
	if (sys_lib)
		dlclose(sys_lib);
	printf("ok\n");
	return 0;
}
