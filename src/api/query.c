/*
 * Device, port, GID and P_Key queries. Values are derived from the device's
 * configuration, so they are stable for the life of the process and consistent
 * with each other (GUID embeds the IP, LID = host part, GID[0] = fe80::GUID or
 * ::ffff:IP) -- except the port's state, which follows the network interface that
 * carries the device's address (net/netdev.h).
 */
#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "api/ops.h"
#include "core/context.h"
#include "core/limits.h"
#include "core/cq_ex.h"
#include "util/compiler.h"

static void fill_device_attr(const struct swv_context *ctx, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "swverbs %d.%d", 0, 1);
	a->node_guid = htobe64(ctx->dev->guid);
	a->sys_image_guid = htobe64(ctx->dev->guid);
	a->max_mr_size = SWV_DEV_MAX_MR_SIZE;
	a->page_size_cap = 4096 | (2u << 20) | (1u << 30); /* any page size: no pinning */
	a->vendor_id = SWV_DEV_VENDOR_ID;
	a->vendor_part_id = SWV_DEV_VENDOR_PART;
	a->hw_ver = 1;
	a->max_qp = SWV_MAX_QP;
	a->max_qp_wr = SWV_QP_MAX_WR;
	/* Only what the transport really does: RNR NAKs, a system image GUID, and AV port
	 * numbers checked (swv_av_resolve rejects port_num != 1). */
	a->device_cap_flags =
		IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_UD_AV_PORT_ENFORCE;
	/* Packets outside a QP's partition are dropped and counted (ibv_port_attr) */
	a->device_cap_flags |= IBV_DEVICE_BAD_PKEY_CNTR;
	/* SRQs, resizable with ibv_modify_srq(IBV_SRQ_MAX_WR) (core/srq.h) */
	a->device_cap_flags |= IBV_DEVICE_SRQ_RESIZE;
	a->max_srq = SWV_MAX_SRQ;
	a->max_srq_wr = SWV_SRQ_MAX_WR;
	a->max_srq_sge = SWV_SRQ_MAX_SGE;
	a->max_sge = SWV_QP_MAX_SGE;
	a->max_sge_rd = SWV_QP_MAX_SGE;
	a->max_cq = SWV_DEV_MAX_CQ;
	a->max_cqe = SWV_DEV_MAX_CQE;
	a->max_mr = SWV_DEV_MAX_MR;
	a->max_pd = SWV_DEV_MAX_PD;
	a->max_qp_rd_atom = SWV_MAX_RD_ATOMIC;
	a->max_qp_init_rd_atom = SWV_MAX_RD_ATOMIC;
	a->max_res_rd_atom = SWV_MAX_QP * SWV_MAX_RD_ATOMIC;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_ah = SWV_DEV_MAX_AH;
	/* Memory windows of type 1 and 2 (core/mr.h): a type 2 window answers only the
	 * QP it is bound to, and that QP's PD is the window's, so the 2A (QP) and 2B
	 * (QP and PD) checks are one here. Windows share the MR table's keys. */
	a->device_cap_flags |=
	    IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
	a->max_mw = SWV_DEV_MAX_MR;
	a->max_mcast_grp = SWV_MCAST_MAX_GRP;
	a->max_mcast_qp_attach = SWV_MCAST_MAX_QP_ATTACH;
	a->max_total_mcast_qp_attach = SWV_MCAST_MAX_GRP * SWV_MCAST_MAX_QP_ATTACH;
	/* No EE: 0 says so. */
	a->max_pkeys = ctx->cfg->npkeys;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
}

SWV_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)
{
	if (!context || !device_attr)
		return EINVAL;
	fill_device_attr(to_swv_ctx(context), device_attr);
	return 0;
}

int swv_query_device_ex(struct ibv_context *ibctx, const struct ibv_query_device_ex_input *input,
			struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex ex;

	if (!ibctx || !attr || attr_size < sizeof(struct ibv_device_attr))
		return EINVAL;
	if (input && input->comp_mask)
		return EINVAL;
	memset(&ex, 0, sizeof(ex));
	fill_device_attr(to_swv_ctx(ibctx), &ex.orig_attr);
	/* The 64-bit flags extend the 32-bit ones, with IBTA 1.5's FLUSH (both placement
	 * types: core/mr.h says what persistent means here) and ATOMIC_WRITE. */
	ex.device_cap_flags_ex = ex.orig_attr.device_cap_flags | IB_UVERBS_DEVICE_FLUSH_GLOBAL |
				 IB_UVERBS_DEVICE_FLUSH_PERSISTENT | IB_UVERBS_DEVICE_ATOMIC_WRITE;
	/* Completion timestamps (core/cq_ex.h): a 1 GHz clock, all 64 bits valid. */
	ex.completion_timestamp_mask = SWV_TIMESTAMP_MASK;
	ex.hca_core_clock = SWV_HCA_CORE_CLOCK_KHZ;
	/* On-demand paging (core/mr.h): no page is ever pinned, every copy is fault-safe,
	 * so every operation of every transport can target ODP memory, and the implicit
	 * whole-address-space MR is one table entry like any other. */
	ex.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	ex.odp_caps.per_transport_caps.rc_odp_caps =
	    IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
	    IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	ex.odp_caps.per_transport_caps.uc_odp_caps =
	    IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE;
	ex.odp_caps.per_transport_caps.ud_odp_caps =
	    IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
	/* XRC is RC inside (INI sends, TGT responds into XRC SRQs): RC's set, no RQ. */
	ex.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
			  IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	ex.max_dm_size = SWV_DEV_MAX_DM_SIZE; /* per context (core/dm.h) */
	/* Tag matching on RC (core/srq.h). */
	ex.tm_caps.max_rndv_hdr_size = SWV_TM_MAX_RNDV_HDR;
	ex.tm_caps.max_num_tags = SWV_TM_MAX_NUM_TAGS;
	ex.tm_caps.flags = IBV_TM_CAP_RC;
	ex.tm_caps.max_ops = SWV_TM_MAX_OPS;
	ex.tm_caps.max_sge = SWV_TM_MAX_SGE;
	/* No TSO, RSS, packet pacing, CQ moderation: all left 0. */
	ex.phys_port_cnt_ex = ex.orig_attr.phys_port_cnt;
	/* The caller's struct may be older (shorter) or newer (longer) than ours. */
	memset(attr, 0, attr_size);
	memcpy(attr, &ex, SWV_MIN(attr_size, sizeof(ex)));
	return 0;
}

static enum ibv_mtu mtu_enum(uint32_t bytes)
{
	if (bytes >= 4096)
		return IBV_MTU_4096;
	if (bytes >= 2048)
		return IBV_MTU_2048;
	if (bytes >= 1024)
		return IBV_MTU_1024;
	if (bytes >= 512)
		return IBV_MTU_512;
	return IBV_MTU_256;
}

/* IB PortPhysicalState values (IBTA 14.2.5.6, ibv_port_attr.phys_state). */
enum {
	PHYS_POLLING = 2,
	PHYS_DISABLED = 3,
	PHYS_LINK_UP = 5,
};

static void fill_port_attr(const struct swv_context *ctx, struct ibv_port_attr *a)
{
	const struct swv_dev_config *cfg = ctx->cfg;
	bool ib = cfg->link == SWV_LINK_IB;
	uint32_t nd = swv_netdev_flags(&ctx->netdev);

	memset(a, 0, sizeof(*a));
	/* As rxe: ACTIVE/LinkUp while the interface is up with carrier; DOWN otherwise,
	 * Polling if it is up but has no carrier, Disabled if it is down. */
	if (swv_netdev_flags_active(nd)) {
		a->state = IBV_PORT_ACTIVE;
		a->phys_state = PHYS_LINK_UP;
	} else {
		a->state = IBV_PORT_DOWN;
		a->phys_state = (nd & SWV_NETDEV_UP) ? PHYS_POLLING : PHYS_DISABLED;
	}
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = mtu_enum(cfg->mtu_bytes);
	a->gid_tbl_len = SWV_GID_TBL_LEN;
	a->port_cap_flags = IBV_PORT_SYS_IMAGE_GUID_SUP | (ib ? 0 : IBV_PORT_IP_BASED_GIDS);
	a->max_msg_sz = SWV_MAX_MSG_SIZE;
	a->pkey_tbl_len = cfg->npkeys;
	a->bad_pkey_cntr = atomic_load_explicit(&ctx->bad_pkey_cntr, memory_order_relaxed);
	/* IB: the IP subnet is the IB subnet, LID = host part; the device acts as its own
	 * subnet manager at LID 1. RoCE ports have no LIDs. */
	a->lid = ib ? swv_lid_from_ip(cfg, cfg->addr) : 0;
	a->sm_lid = ib ? 1 : 0;
	a->lmc = 0;
	a->max_vl_num = 1; /* VL0 only */
	a->subnet_timeout = ib ? 18 : 0;
	a->active_width = 2; /* 4X */
	a->active_speed = 4; /* QDR: 4X QDR = 40 Gb/s, a plausible figure for a software link */
	a->link_layer = ib ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
}

int swv_query_port(struct ibv_context *ibctx, uint8_t port_num, struct ibv_port_attr *attr,
		   size_t attr_len)
{
	struct ibv_port_attr pa;

	if (!ibctx || !attr || port_num != 1)
		return EINVAL;
	fill_port_attr(to_swv_ctx(ibctx), &pa);
	memset(attr, 0, attr_len);
	memcpy(attr, &pa, SWV_MIN(attr_len, sizeof(pa)));
	return 0;
}

/* The legacy export fills rdma-core's 48-byte _compat_ibv_port_attr: everything up to
 * port_cap_flags2. The inline ibv_query_port only calls it when the verbs_context is
 * absent, which never happens with swverbs contexts, but old binaries call it too. */
SWV_EXPORT int(ibv_query_port)(struct ibv_context *context, uint8_t port_num,
			       struct _compat_ibv_port_attr *port_attr)
{
	return swv_query_port(context, port_num, (struct ibv_port_attr *)port_attr,
			      offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* GID table entry idx: 0 = the device GID, others empty (returns false). */
static bool gid_entry(const struct swv_context *ctx, uint32_t idx, uint8_t gid[16])
{
	if (idx != 0)
		return false;
	swv_gid_of_device(ctx->cfg, gid);
	return true;
}

SWV_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
			     union ibv_gid *gid)
{
	if (!context || !gid || port_num != 1 || index < 0 || index >= SWV_GID_TBL_LEN) {
		errno = EINVAL;
		return -1;
	}
	/* As rdma-core: an empty entry reads as the zero GID, not as an error. */
	if (!gid_entry(to_swv_ctx(context), (uint32_t)index, gid->raw))
		memset(gid, 0, sizeof(*gid));
	return 0;
}

static void fill_gid_entry(const struct swv_context *ctx, uint32_t idx, const uint8_t raw[16],
			   struct ibv_gid_entry *e)
{
	memset(e, 0, sizeof(*e));
	memcpy(e->gid.raw, raw, 16);
	e->gid_index = idx;
	e->port_num = 1;
	e->gid_type = ctx->cfg->link == SWV_LINK_IB ? IBV_GID_TYPE_IB : IBV_GID_TYPE_ROCE_V2;
	e->ndev_ifindex = 0; /* no kernel netdev is bound to a swverbs port */
}

SWV_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
				 uint32_t gid_index, struct ibv_gid_entry *entry, uint32_t flags,
				 size_t entry_size)
{
	uint8_t raw[16];

	if (!context || !entry || flags || entry_size < sizeof(struct ibv_gid_entry) ||
	    port_num != 1 || gid_index >= SWV_GID_TBL_LEN)
		return EINVAL;
	struct swv_context *ctx = to_swv_ctx(context);
	if (!gid_entry(ctx, gid_index, raw))
		return ENODATA;
	fill_gid_entry(ctx, gid_index, raw, entry);
	return 0;
}

SWV_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
					size_t max_entries, uint32_t flags, size_t entry_size)
{
	uint8_t raw[16];
	size_t n = 0;

	if (!context || flags || entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	struct swv_context *ctx = to_swv_ctx(context);
	for (uint32_t i = 0; i < SWV_GID_TBL_LEN; i++) {
		if (!gid_entry(ctx, i, raw))
			continue;
		/* Too small a buffer is an error, not a truncation (rdma-core). */
		if (n >= max_entries || !entries)
			return -EINVAL;
		fill_gid_entry(ctx, i, raw,
			       (struct ibv_gid_entry *)((char *)entries + n * entry_size));
		n++;
	}
	return (ssize_t)n;
}

/* For ibv_query_gid_type (src/api/misc.c): 0 = IB/RoCEv1, 1 = RoCEv2, -1 + errno. */
int swv_query_gid_type_sysfs(struct ibv_context *context, uint8_t port_num, unsigned index)
{
	uint8_t raw[16];

	if (!context || port_num != 1 || index >= SWV_GID_TBL_LEN) {
		errno = EINVAL;
		return -1;
	}
	struct swv_context *ctx = to_swv_ctx(context);
	/* As rdma-core: an empty entry reports IB/RoCEv1. */
	if (!gid_entry(ctx, index, raw))
		return 0;
	return ctx->cfg->link == SWV_LINK_IB ? 0 : 1;
}

SWV_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
			      __be16 *pkey)
{
	if (!context || !pkey || port_num != 1 || index < 0 ||
	    (unsigned)index >= to_swv_ctx(context)->cfg->npkeys) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(swv_ctx_pkey(to_swv_ctx(context), (unsigned)index));
	return 0;
}

SWV_EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	if (!context || port_num != 1) {
		errno = EINVAL;
		return -1;
	}
	/* An exact match, membership bit included, as rdma-core's table walk. */
	const struct swv_context *ctx = to_swv_ctx(context);
	for (unsigned i = 0; i < ctx->cfg->npkeys; i++)
		if (pkey == htobe16(ctx->cfg->pkeys[i]))
			return (int)i;
	errno = ENOENT;
	return -1;
}
