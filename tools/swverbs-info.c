/*
 * swverbs-info: what `ibv_devinfo -v` shows, for swverbs devices, plus what only
 * swverbs knows: where the configuration came from, each device's IPv4 subnet and how
 * LIDs/GIDs derive from it, and the completion-counter capabilities.
 * Public API only (<infiniband/verbs.h>, <infiniband/swverbs.h>).
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>

static const char *mtu_str(enum ibv_mtu m)
{
	switch (m) {
	case IBV_MTU_256: return "256";
	case IBV_MTU_512: return "512";
	case IBV_MTU_1024: return "1024";
	case IBV_MTU_2048: return "2048";
	case IBV_MTU_4096: return "4096";
	default: return "invalid";
	}
}

static const char *link_str(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
	case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
	default: return "Unknown";
	}
}

static void print_guid(const char *label, __be64 g)
{
	uint64_t v = be64toh(g);
	printf("\t%-24s%04x:%04x:%04x:%04x\n", label, (unsigned)(v >> 48) & 0xffff,
	       (unsigned)(v >> 32) & 0xffff, (unsigned)(v >> 16) & 0xffff, (unsigned)v & 0xffff);
}

/* Completion counters: owned by the counters engineer, who may extend this section. */
static void print_comp_cntr_caps(struct ibv_context *ctx)
{
	struct swv_comp_cntr_caps caps;
	int rc = swv_query_comp_cntr_caps(ctx, &caps, sizeof(caps));
	printf("\tcompletion counters:\n");
	if (rc) {
		printf("\t\tnot available (%s)\n", strerror(rc));
		return;
	}
	printf("\t\t%-22s%u\n", "max_counters:", caps.max_counters);
	printf("\t\t%-22s0x%llx\n", "max_value:", (unsigned long long)caps.max_value);
	printf("\t\t%-22s0x%x\n", "qp_attach_ops:", caps.supported_qp_attach_ops);
	/* The same bits by name (1 << 16 and 1 << 17 are the swverbs atomic bits). */
	static const struct {
		uint32_t bit;
		const char *name;
	} ops[] = {{IBV_QP_ATTACH_COMP_CNTR_OP_SEND, "SEND"},
		   {IBV_QP_ATTACH_COMP_CNTR_OP_RECV, "RECV"},
		   {IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_READ, "RDMA_READ"},
		   {IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ, "REMOTE_RDMA_READ"},
		   {IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE, "RDMA_WRITE"},
		   {IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE, "REMOTE_RDMA_WRITE"},
		   {SWV_QP_ATTACH_COMP_CNTR_OP_ATOMIC, "ATOMIC(swv)"},
		   {SWV_QP_ATTACH_COMP_CNTR_OP_REMOTE_ATOMIC, "REMOTE_ATOMIC(swv)"}};
	printf("\t\t%-22s", "");
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (caps.supported_qp_attach_ops & ops[i].bit)
			printf("%s ", ops[i].name);
	printf("\n");
	printf("\t\t%-22s%s%s%s%s%s%s\n", "features:",
	       caps.flags & SWV_COMP_CNTR_CAP_TYPE_BYTES ? "bytes " : "",
	       caps.flags & SWV_COMP_CNTR_CAP_WAIT ? "wait " : "",
	       caps.flags & SWV_COMP_CNTR_CAP_FD ? "fd " : "",
	       caps.flags & SWV_COMP_CNTR_CAP_APP_MEMORY ? "app-memory " : "",
	       caps.flags & SWV_COMP_CNTR_CAP_TRIGGERED ? "triggered " : "",
	       caps.flags & SWV_COMP_CNTR_CAP_WAIT_MANY ? "wait-many" : "");
}

static int print_device(struct ibv_device *dev, int verbose)
{
	struct swv_device_config cfg;
	struct ibv_device_attr a;
	struct ibv_port_attr pa;
	char ip[INET_ADDRSTRLEN];
	int rc;

	printf("hca_id:\t%s\n", ibv_get_device_name(dev));
	rc = swv_query_device_config(dev, &cfg, sizeof(cfg));
	if (rc) {
		printf("\tnot a swverbs device (%s)\n", strerror(rc));
		return 1;
	}
	struct in_addr in = {.s_addr = cfg.ipv4};
	inet_ntop(AF_INET, &in, ip, sizeof(ip));
	printf("\t%-24s%s/%u\n", "address:", ip, cfg.prefix_len);
	printf("\t%-24s%s\n", "presentation:",
	       cfg.link == SWV_DEVICE_LINK_IB ? "ib (LID = host part of the address)"
					      : "roce (RoCEv2 GID ::ffff:address)");
	printf("\t%-24s%s\n", "packet check:",
	       (cfg.flags & SWV_DEVICE_CFG_AUTH) ? "MAC (authenticated mode, per-pair keys)"
						 : "CRC-32");

	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx) {
		printf("\tcannot open: %s\n", strerror(errno));
		return 1;
	}
	rc = ibv_query_device(ctx, &a);
	if (rc) {
		printf("\tibv_query_device: %s\n", strerror(rc));
		ibv_close_device(ctx);
		return 1;
	}
	printf("\t%-24s%s\n", "transport:", "InfiniBand (0)");
	printf("\t%-24s%s\n", "fw_ver:", a.fw_ver);
	print_guid("node_guid:", a.node_guid);
	print_guid("sys_image_guid:", a.sys_image_guid);
	printf("\t%-24s0x%06x\n", "vendor_id:", a.vendor_id);
	printf("\t%-24s0x%x\n", "vendor_part_id:", a.vendor_part_id);
	printf("\t%-24s0x%x\n", "hw_ver:", a.hw_ver);
	printf("\t%-24s%u\n", "phys_port_cnt:", a.phys_port_cnt);
	printf("\t%-24s%d\n", "num_comp_vectors:", ctx->num_comp_vectors);
	if (verbose) {
		printf("\t%-24s0x%llx\n", "max_mr_size:", (unsigned long long)a.max_mr_size);
		printf("\t%-24s0x%llx\n", "page_size_cap:", (unsigned long long)a.page_size_cap);
		printf("\t%-24s%d\n", "max_qp:", a.max_qp);
		printf("\t%-24s%d\n", "max_qp_wr:", a.max_qp_wr);
		printf("\t%-24s0x%08x\n", "device_cap_flags:", a.device_cap_flags);
		printf("\t%-24s%d\n", "max_sge:", a.max_sge);
		printf("\t%-24s%d\n", "max_sge_rd:", a.max_sge_rd);
		printf("\t%-24s%d\n", "max_cq:", a.max_cq);
		printf("\t%-24s%d\n", "max_cqe:", a.max_cqe);
		printf("\t%-24s%d\n", "max_mr:", a.max_mr);
		printf("\t%-24s%d\n", "max_pd:", a.max_pd);
		printf("\t%-24s%d\n", "max_qp_rd_atom:", a.max_qp_rd_atom);
		printf("\t%-24s%d\n", "max_qp_init_rd_atom:", a.max_qp_init_rd_atom);
		printf("\t%-24s%d\n", "max_res_rd_atom:", a.max_res_rd_atom);
		printf("\t%-24s%s\n", "atomic_cap:",
		       a.atomic_cap == IBV_ATOMIC_HCA ? "ATOMIC_HCA (1)" : "other");
		printf("\t%-24s%d\n", "max_ah:", a.max_ah);
		printf("\t%-24s%d\n", "max_srq:", a.max_srq);
		printf("\t%-24s%d\n", "max_pkeys:", a.max_pkeys);
		printf("\t%-24s%d\n", "local_ca_ack_delay:", a.local_ca_ack_delay);
	}

	for (uint8_t port = 1; port <= a.phys_port_cnt; port++) {
		rc = ibv_query_port(ctx, port, &pa);
		if (rc) {
			printf("\tport %u: ibv_query_port: %s\n", port, strerror(rc));
			continue;
		}
		printf("\t\tport:\t%u\n", port);
		printf("\t\t\t%-20s%s (%d)\n", "state:", ibv_port_state_str(pa.state), pa.state);
		printf("\t\t\t%-20s%s (%d)\n", "max_mtu:", mtu_str(pa.max_mtu), pa.max_mtu);
		printf("\t\t\t%-20s%s (%d)\n", "active_mtu:", mtu_str(pa.active_mtu), pa.active_mtu);
		printf("\t\t\t%-20s%u\n", "sm_lid:", pa.sm_lid);
		printf("\t\t\t%-20s%u\n", "port_lid:", pa.lid);
		printf("\t\t\t%-20s0x%02x\n", "port_lmc:", pa.lmc);
		printf("\t\t\t%-20s%s\n", "link_layer:", link_str(pa.link_layer));
		if (verbose) {
			printf("\t\t\t%-20s%u\n", "max_msg_sz:", pa.max_msg_sz);
			printf("\t\t\t%-20s0x%08x\n", "port_cap_flags:", pa.port_cap_flags);
			printf("\t\t\t%-20s%u\n", "pkey_tbl_len:", pa.pkey_tbl_len);
			printf("\t\t\t%-20s%d\n", "gid_tbl_len:", pa.gid_tbl_len);
		}
		for (int i = 0; i < pa.gid_tbl_len; i++) {
			struct ibv_gid_entry e;
			rc = ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0);
			if (rc == ENODATA)
				continue; /* empty entry */
			if (rc) {
				printf("\t\t\tGID[%3d]: error %s\n", i, strerror(rc));
				continue;
			}
			char g[INET6_ADDRSTRLEN];
			inet_ntop(AF_INET6, e.gid.raw, g, sizeof(g));
			printf("\t\t\tGID[%3d]:\t\t%s%s\n", i, g,
			       e.gid_type == IBV_GID_TYPE_ROCE_V2 ? ", RoCE v2" : "");
		}
	}
	print_comp_cntr_caps(ctx);
	ibv_close_device(ctx);
	return 0;
}

static void usage(const char *argv0)
{
	printf("Usage: %s [-d device] [-v] [-l]\n"
	       "  -d, --ib-dev=DEV   show only DEV\n"
	       "  -v, --verbose      all device and port attributes\n"
	       "  -l, --list         list device names only\n"
	       "Devices come from SWVERBS_CONFIG / SWVERBS_DEVICES (docs/configuration.md).\n",
	       argv0);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"ib-dev", required_argument, NULL, 'd'},
					     {"verbose", no_argument, NULL, 'v'},
					     {"list", no_argument, NULL, 'l'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *want = NULL;
	int verbose = 0, list = 0, c, n, rc = 0;

	while ((c = getopt_long(argc, argv, "d:vlh", opts, NULL)) != -1) {
		switch (c) {
		case 'd': want = optarg; break;
		case 'v': verbose = 1; break;
		case 'l': list = 1; break;
		case 'h': usage(argv[0]); return 0;
		default: usage(argv[0]); return 2;
		}
	}
	struct ibv_device **devs = ibv_get_device_list(&n);
	if (!devs) {
		fprintf(stderr, "swverbs-info: no devices: %s (set SWVERBS_LOG=1 for the reason)\n",
			strerror(errno));
		return 1;
	}
	if (n > 0) {
		struct swv_device_config cfg;
		if (!swv_query_device_config(devs[0], &cfg, sizeof(cfg)))
			printf("configuration: %s\n", cfg.source);
	}
	int shown = 0;
	for (int i = 0; i < n; i++) {
		if (want && strcmp(want, ibv_get_device_name(devs[i])))
			continue;
		shown++;
		if (list) {
			printf("    %s\n", ibv_get_device_name(devs[i]));
			continue;
		}
		rc |= print_device(devs[i], verbose);
		printf("\n");
	}
	ibv_free_device_list(devs);
	if (want && !shown) {
		fprintf(stderr, "swverbs-info: device '%s' not found\n", want);
		return 1;
	}
	if (!n)
		printf("no swverbs devices\n");
	return rc;
}
