/*
 * Compile-time checks of the ABI facts unmodified Debian clients rely on
 * (docs/reference/verbs-clients.md 1.4-1.5, x86_64). They hold without
 * Debian's header installed; a violation breaks the build.
 *
 * rdma-core 65 grew three structs relative to 44 (the release those facts were
 * measured on): ibv_port_attr and ibv_qp_ex at the end, verbs_context at the
 * front. For those the 44 size is checked as the offset of the first new
 * member, or (verbs_context) as the distance from query_port to the end.
 */
#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>
#include <stdio.h>

#define SZ(t, n)        _Static_assert(sizeof(t) == (n), "sizeof " #t)
#define OFF(t, f, n)    _Static_assert(offsetof(t, f) == (n), "offsetof " #t "." #f)
/* Offset of a verbs_context member relative to the embedded ibv_context. */
#define VREL(f) ((long)offsetof(struct verbs_context, f) - (long)offsetof(struct verbs_context, context))
#define VOFF(f, n)      _Static_assert(VREL(f) == (n), "verbs_context." #f " relative to context")
/* Minimum vctx->sz for which verbs_get_ctx_op() accepts op f: its distance
 * from the end, the same in every version since ops only grow at the top. */
#define VMINSZ(f, n)    _Static_assert(sizeof(struct verbs_context) - offsetof(struct verbs_context, f) == (n), \
				       "min sz for " #f)

/* 1.5.1 core objects */
SZ(struct ibv_device, 664);
OFF(struct ibv_device, _ops, 0);
OFF(struct ibv_device, node_type, 16);
OFF(struct ibv_device, transport_type, 20);
OFF(struct ibv_device, name, 24);
OFF(struct ibv_device, dev_name, 88);
OFF(struct ibv_device, dev_path, 152);
OFF(struct ibv_device, ibdev_path, 408);

SZ(struct ibv_context, 328);
OFF(struct ibv_context, device, 0);
OFF(struct ibv_context, ops, 8);
SZ(struct ibv_context_ops, 256);
OFF(struct ibv_context, cmd_fd, 264);
OFF(struct ibv_context, async_fd, 268);
OFF(struct ibv_context, num_comp_vectors, 272);
OFF(struct ibv_context, mutex, 280);
OFF(struct ibv_context, abi_compat, 320);

/* verbs_context: 648 bytes from query_port (the 44 start) to the end. */
_Static_assert(sizeof(struct verbs_context) - offsetof(struct verbs_context, query_port) == 648,
	       "verbs_context 44 part");
_Static_assert(sizeof(struct verbs_context) == 696, "verbs_context 65 size");
OFF(struct verbs_context, query_port, 48);
VOFF(sz, -8);
VOFF(context, 0);
_Static_assert(offsetof(struct verbs_context, context) + sizeof(struct ibv_context) ==
	       sizeof(struct verbs_context), "ibv_context is the last member");

SZ(struct ibv_pd, 16);
OFF(struct ibv_pd, handle, 8);

SZ(struct ibv_mr, 48);
OFF(struct ibv_mr, pd, 8);
OFF(struct ibv_mr, addr, 16);
OFF(struct ibv_mr, length, 24);
OFF(struct ibv_mr, handle, 32);
OFF(struct ibv_mr, lkey, 36);
OFF(struct ibv_mr, rkey, 40);

SZ(struct ibv_comp_channel, 16);
OFF(struct ibv_comp_channel, fd, 8);
OFF(struct ibv_comp_channel, refcnt, 12);

SZ(struct ibv_cq, 128);
OFF(struct ibv_cq, channel, 8);
OFF(struct ibv_cq, cq_context, 16);
OFF(struct ibv_cq, handle, 24);
OFF(struct ibv_cq, cqe, 28);
OFF(struct ibv_cq, mutex, 32);
OFF(struct ibv_cq, cond, 72);
OFF(struct ibv_cq, comp_events_completed, 120);
OFF(struct ibv_cq, async_events_completed, 124);

SZ(struct ibv_cq_ex, 288);
OFF(struct ibv_cq_ex, comp_mask, 128);
OFF(struct ibv_cq_ex, status, 132);
OFF(struct ibv_cq_ex, wr_id, 136);

SZ(struct ibv_srq, 128);
OFF(struct ibv_srq, srq_context, 8);
OFF(struct ibv_srq, pd, 16);
OFF(struct ibv_srq, handle, 24);
OFF(struct ibv_srq, mutex, 32);
OFF(struct ibv_srq, cond, 72);
OFF(struct ibv_srq, events_completed, 120);

SZ(struct ibv_qp, 160);
OFF(struct ibv_qp, qp_context, 8);
OFF(struct ibv_qp, pd, 16);
OFF(struct ibv_qp, send_cq, 24);
OFF(struct ibv_qp, recv_cq, 32);
OFF(struct ibv_qp, srq, 40);
OFF(struct ibv_qp, handle, 48);
OFF(struct ibv_qp, qp_num, 52);
OFF(struct ibv_qp, state, 56);
OFF(struct ibv_qp, qp_type, 60);
OFF(struct ibv_qp, mutex, 64);
OFF(struct ibv_qp, cond, 104);
OFF(struct ibv_qp, events_completed, 152);

/* ibv_qp_ex: 352 bytes in 44; 65 appends wr_flush. */
OFF(struct ibv_qp_ex, qp_base, 0);
OFF(struct ibv_qp_ex, comp_mask, 160);
OFF(struct ibv_qp_ex, wr_id, 168);
OFF(struct ibv_qp_ex, wr_flags, 176);
OFF(struct ibv_qp_ex, wr_flush, 352);
SZ(struct ibv_qp_ex, 360);

SZ(struct ibv_ah, 24);
OFF(struct ibv_ah, pd, 8);
OFF(struct ibv_ah, handle, 16);
SZ(struct ibv_mw, 32);
SZ(struct ibv_xrcd, 8);
SZ(struct ibv_wq, 152);
SZ(struct ibv_gid_entry, 32);
OFF(struct ibv_gid_entry, gid, 0);
OFF(struct ibv_gid_entry, gid_index, 16);
OFF(struct ibv_gid_entry, port_num, 20);
OFF(struct ibv_gid_entry, gid_type, 24);
OFF(struct ibv_gid_entry, ndev_ifindex, 28);
SZ(union ibv_gid, 16);
SZ(struct ibv_async_event, 16);
OFF(struct ibv_async_event, element, 0);
OFF(struct ibv_async_event, event_type, 8);
SZ(pthread_mutex_t, 40);
SZ(pthread_cond_t, 48);

/* Structures the data path and the clients fill or read by value. */
SZ(struct ibv_wc, 48);
OFF(struct ibv_wc, status, 8);
OFF(struct ibv_wc, opcode, 12);
OFF(struct ibv_wc, byte_len, 20);
OFF(struct ibv_wc, imm_data, 24);
OFF(struct ibv_wc, qp_num, 28);
OFF(struct ibv_wc, src_qp, 32);
OFF(struct ibv_wc, wc_flags, 36);
OFF(struct ibv_wc, slid, 42);
SZ(struct ibv_send_wr, 128);
OFF(struct ibv_send_wr, wr.rdma.remote_addr, 40);
OFF(struct ibv_send_wr, wr.atomic.rkey, 64);
OFF(struct ibv_send_wr, qp_type.xrc.remote_srqn, 72);
OFF(struct ibv_send_wr, bind_mw.bind_info, 96);
SZ(struct ibv_recv_wr, 32);
SZ(struct ibv_sge, 16);
SZ(struct ibv_qp_attr, 144);
SZ(struct ibv_qp_init_attr, 64);
SZ(struct ibv_qp_init_attr_ex, 136);
SZ(struct ibv_device_attr, 232);
SZ(struct ibv_device_attr_ex, 400);
SZ(struct ibv_ah_attr, 32);
/* ibv_port_attr: 52 bytes in 44 (the port_attr_len 44 binaries pass). */
OFF(struct ibv_port_attr, port_cap_flags2, 48);
OFF(struct ibv_port_attr, active_speed_ex, 52);
SZ(struct ibv_port_attr, 56);

/* 1.5.2 ibv_context_ops, as ibv_context offsets */
OFF(struct ibv_context, ops.alloc_mw, 64);
OFF(struct ibv_context, ops.bind_mw, 72);
OFF(struct ibv_context, ops.dealloc_mw, 80);
OFF(struct ibv_context, ops._compat_create_cq, 88);
OFF(struct ibv_context, ops.poll_cq, 96);
OFF(struct ibv_context, ops.req_notify_cq, 104);
OFF(struct ibv_context, ops.post_srq_recv, 168);
OFF(struct ibv_context, ops.post_send, 208);
OFF(struct ibv_context, ops.post_recv, 216);
OFF(struct ibv_context, ops._compat_async_event, 256);

/* 1.5.3 verbs_context ops relative to the ibv_context, and minimum sz */
VOFF(query_port, -320);
VOFF(advise_mr, -312);
VOFF(alloc_null_mr, -304);
VOFF(read_counters, -296);
VOFF(attach_counters_point_flow, -288);
VOFF(create_counters, -280);
VOFF(destroy_counters, -272);
VOFF(reg_dm_mr, -264);
VOFF(alloc_dm, -256);
VOFF(free_dm, -248);
VOFF(modify_flow_action_esp, -240);
VOFF(destroy_flow_action, -232);
VOFF(create_flow_action_esp, -224);
VOFF(modify_qp_rate_limit, -216);
VOFF(alloc_parent_domain, -208);
VOFF(dealloc_td, -200);
VOFF(alloc_td, -192);
VOFF(modify_cq, -184);
VOFF(post_srq_ops, -176);
VOFF(destroy_rwq_ind_table, -168);
VOFF(create_rwq_ind_table, -160);
VOFF(destroy_wq, -152);
VOFF(modify_wq, -144);
VOFF(create_wq, -136);
VOFF(query_rt_values, -128);
VOFF(create_cq_ex, -120);
VOFF(priv, -112);
VOFF(query_device_ex, -104);
VOFF(ibv_destroy_flow, -96);
VOFF(ABI_placeholder2, -88);
VOFF(ibv_create_flow, -80);
VOFF(ABI_placeholder1, -72);
VOFF(open_qp, -64);
VOFF(create_qp_ex, -56);
VOFF(get_srq_num, -48);
VOFF(create_srq_ex, -40);
VOFF(open_xrcd, -32);
VOFF(close_xrcd, -24);
VOFF(_ABI_placeholder3, -16);
VOFF(alloc_dmah, -328);
VOFF(dealloc_dmah, -336);
VOFF(reg_mr_ex, -344);
VOFF(dm_export_dmabuf_fd, -352);
VOFF(alloc_buf, -360);
VOFF(free_buf, -368);
VMINSZ(query_port, 648);
VMINSZ(advise_mr, 640);
VMINSZ(alloc_null_mr, 632);
VMINSZ(reg_dm_mr, 592);
VMINSZ(alloc_dm, 584);
VMINSZ(free_dm, 576);
VMINSZ(modify_cq, 512);
VMINSZ(create_cq_ex, 448);
VMINSZ(query_device_ex, 432);
VMINSZ(create_qp_ex, 384);
VMINSZ(get_srq_num, 376);
VMINSZ(create_srq_ex, 368);
VMINSZ(open_xrcd, 360);

/* ibv_cq_ex function pointers */
OFF(struct ibv_cq_ex, start_poll, 144);
OFF(struct ibv_cq_ex, next_poll, 152);
OFF(struct ibv_cq_ex, end_poll, 160);
OFF(struct ibv_cq_ex, read_opcode, 168);
OFF(struct ibv_cq_ex, read_vendor_err, 176);
OFF(struct ibv_cq_ex, read_byte_len, 184);
OFF(struct ibv_cq_ex, read_imm_data, 192);
OFF(struct ibv_cq_ex, read_qp_num, 200);
OFF(struct ibv_cq_ex, read_src_qp, 208);
OFF(struct ibv_cq_ex, read_wc_flags, 216);
OFF(struct ibv_cq_ex, read_slid, 224);
OFF(struct ibv_cq_ex, read_sl, 232);
OFF(struct ibv_cq_ex, read_dlid_path_bits, 240);
OFF(struct ibv_cq_ex, read_completion_ts, 248);
OFF(struct ibv_cq_ex, read_cvlan, 256);
OFF(struct ibv_cq_ex, read_flow_tag, 264);
OFF(struct ibv_cq_ex, read_tm_info, 272);
OFF(struct ibv_cq_ex, read_completion_wallclock_ns, 280);

/* 1.5.4 ibv_qp_ex function pointers */
OFF(struct ibv_qp_ex, wr_atomic_cmp_swp, 184);
OFF(struct ibv_qp_ex, wr_atomic_fetch_add, 192);
OFF(struct ibv_qp_ex, wr_bind_mw, 200);
OFF(struct ibv_qp_ex, wr_local_inv, 208);
OFF(struct ibv_qp_ex, wr_rdma_read, 216);
OFF(struct ibv_qp_ex, wr_rdma_write, 224);
OFF(struct ibv_qp_ex, wr_rdma_write_imm, 232);
OFF(struct ibv_qp_ex, wr_send, 240);
OFF(struct ibv_qp_ex, wr_send_imm, 248);
OFF(struct ibv_qp_ex, wr_send_inv, 256);
OFF(struct ibv_qp_ex, wr_send_tso, 264);
OFF(struct ibv_qp_ex, wr_set_ud_addr, 272);
OFF(struct ibv_qp_ex, wr_set_xrc_srqn, 280);
OFF(struct ibv_qp_ex, wr_set_inline_data, 288);
OFF(struct ibv_qp_ex, wr_set_inline_data_list, 296);
OFF(struct ibv_qp_ex, wr_set_sge, 304);
OFF(struct ibv_qp_ex, wr_set_sge_list, 312);
OFF(struct ibv_qp_ex, wr_start, 320);
OFF(struct ibv_qp_ex, wr_complete, 328);
OFF(struct ibv_qp_ex, wr_abort, 336);
OFF(struct ibv_qp_ex, wr_atomic_write, 344);

/* ibv_dm: memcpy callbacks called inline */
OFF(struct ibv_dm, memcpy_to_dm, 8);
OFF(struct ibv_dm, memcpy_from_dm, 16);

/* Completion counters: the rdma-core 65 structs of comp-cntr.md Part 1. */
SZ(struct ibv_comp_cntr_caps, 16);
OFF(struct ibv_comp_cntr_caps, max_counters, 8);
OFF(struct ibv_comp_cntr_caps, supported_qp_attach_ops, 12);
SZ(struct ibv_comp_cntr, 16);
OFF(struct ibv_comp_cntr, handle, 8);
SZ(struct ibv_comp_cntr_init_attr, 12);
OFF(struct ibv_comp_cntr_init_attr, type, 4);
OFF(struct ibv_comp_cntr_init_attr, flags, 8);
SZ(struct ibv_qp_attach_comp_cntr_attr, 8);
OFF(struct ibv_qp_attach_comp_cntr_attr, op_mask, 4);

/* Values the inline paths and clients depend on. */
_Static_assert(IBV_ACCESS_OPTIONAL_RANGE == 0x3ff00000, "optional access range");
_Static_assert(IBV_ACCESS_RELAXED_ORDERING == 0x100000, "relaxed ordering bit");
_Static_assert(IBV_QP_INIT_ATTR_PD == 1 && IBV_QP_INIT_ATTR_SEND_OPS_FLAGS == 0x40, "qp init mask");
_Static_assert(IBV_WC_RECV == 128 && IBV_WC_RECV_RDMA_WITH_IMM == 129, "wc opcodes");
_Static_assert(IBV_WR_ATOMIC_WRITE == 15 && IBV_WR_FLUSH == 14, "wr opcodes");
_Static_assert(IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE == 0x20, "comp cntr op bits");
_Static_assert(IBV_COMP_CNTR_TYPE_WRS == 0 && IBV_COMP_CNTR_TYPE_BYTES == 1, "comp cntr types");

/* Tag matching: the headers on the wire (rdma-core's tm_types.h) */
SZ(struct ibv_tmh, 16);
OFF(struct ibv_tmh, app_ctx, 4);
OFF(struct ibv_tmh, tag, 8);
SZ(struct ibv_rvh, 16);
OFF(struct ibv_rvh, rkey, 8);
OFF(struct ibv_rvh, len, 12);

int main(void)
{
	/* Everything above is checked by the compiler; reaching here means the
	 * build of this file succeeded. */
	printf("PASS: %zu-byte verbs_context, %zu-byte ibv_context, ABI facts hold\n",
	       sizeof(struct verbs_context), sizeof(struct ibv_context));
	return 0;
}
