/*
 * Errnos that must match rdma-core / Linux rxe, one table per call:
 *  - ibv_post_send / ibv_post_recv / ibv_post_srq_recv with no WR list or no bad_wr
 *    pointer: EINVAL, nothing posted (rxe's provider);
 *  - ibv_modify_qp: RESET -> ERR is a valid transition (nothing to flush), and back to
 *    RESET; mask bits beyond IBV_QP_DEST_QPN are EOPNOTSUPP (the kernel's
 *    IB_QP_ATTR_STANDARD_BITS), before any other check; dest_qp_num 0 is accepted and
 *    such a QP reaches no one (RC: retry exhaustion, UC/UD: sent into the void);
 *  - ibv_rereg_mr: IBV_REREG_MR_ERR_INPUT for what libibverbs checks itself,
 *    IBV_REREG_MR_ERR_CMD (with the errno) for what the provider/kernel refuse;
 *  - ibv_qp_attach_comp_cntr: an op bit the device does not know is EOPNOTSUPP
 *    (ENOTSUP, rdma-core's manual page), op_mask 0 EINVAL.
 */
#include <errno.h>
#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/qp.h"
#include "inproc.h"
#include "link/endpoint.h"
#include "util/clock.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;

#define ALL_ACCESS                                                                                 \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |               \
	 IBV_ACCESS_REMOTE_ATOMIC)

static struct ibv_qp *mk_qp(enum ibv_qp_type type, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .srq = srq,
				      .qp_type = type,
				      .cap = {.max_send_wr = 8,
					      .max_recv_wr = srq ? 0 : 8,
					      .max_send_sge = 1,
					      .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK_PTR(qp);
	return qp;
}

static void to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (qp->qp_type == IBV_QPT_UD) {
		a.qkey = 0x11111111;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags =
		    ALL_ACCESS &
		    ~(qp->qp_type == IBV_QPT_UC ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
						: 0);
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	CHECK_OK(ibv_modify_qp(qp, &a, mask));
}

/* INIT -> RTR -> RTS towards dest_qpn on this host; RC: ACK timeout ~8 us (swverbs
 * may round it up), one retry. */
static void to_rts(struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
				.path_mtu = IBV_MTU_1024,
				.dest_qp_num = dest_qpn,
				.max_dest_rd_atomic = 1,
				.min_rnr_timer = 1};
	int mask = IBV_QP_STATE;
	if (qp->qp_type != IBV_QPT_UD) {
		swvt_local_ah_attr(ctx, &a.ah_attr);
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	}
	if (qp->qp_type == IBV_QPT_RC)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK_OK(ibv_modify_qp(qp, &a, mask));
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTS,
				.timeout = 1,
				.retry_cnt = 1,
				.rnr_retry = 1,
				.max_rd_atomic = 1};
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC)
		mask |=
		    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	CHECK_OK(ibv_modify_qp(qp, &r, mask));
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK_OK(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia));
	return a.qp_state;
}

static int poll_one(struct ibv_wc *wc, int timeout_ms)
{
	uint64_t until = swv_now_ns() + (uint64_t)timeout_ms * 1000000u;
	int n;
	while ((n = ibv_poll_cq(cq, 1, wc)) == 0 && swv_now_ns() < until)
		usleep(100);
	CHECK(n >= 0);
	return n;
}

/* ---- post with no list / no bad_wr ---- */

enum post_kind { POST_SEND, POST_RECV, POST_SRQ_RECV };

static void test_post_null(void)
{
	static const struct {
		enum post_kind kind;
		bool null_list, null_bad;
		int want;
	} rows[] = {
	    {POST_SEND, true, false, EINVAL},	  {POST_SEND, false, true, EINVAL},
	    {POST_SEND, true, true, EINVAL},	  {POST_SEND, false, false, 0},
	    {POST_RECV, true, false, EINVAL},	  {POST_RECV, false, true, EINVAL},
	    {POST_RECV, true, true, EINVAL},	  {POST_RECV, false, false, 0},
	    {POST_SRQ_RECV, true, false, EINVAL}, {POST_SRQ_RECV, false, true, EINVAL},
	    {POST_SRQ_RECV, true, true, EINVAL},  {POST_SRQ_RECV, false, false, 0},
	};
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK_PTR(srq);
	struct ibv_qp *qp = mk_qp(IBV_QPT_UD, NULL);
	to_init(qp);
	to_rts(qp, 0);
	struct ibv_ah_attr aa = {.port_num = 1};
	struct ibv_port_attr port;
	CHECK_OK(ibv_query_port(ctx, 1, &port));
	aa.dlid = port.lid;
	if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		aa.is_global = 1;
		CHECK_OK(ibv_query_gid(ctx, 1, 0, &aa.grh.dgid));
	}
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK_PTR(ah);
	struct ibv_sge sge = {(uintptr_t)mr->addr, 64, mr->lkey};
	unsigned posted_recv = 0, posted_srq = 0, sent = 0;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct ibv_send_wr swr = {.wr_id = i,
					  .sg_list = &sge,
					  .num_sge = 1,
					  .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED};
		swr.wr.ud.ah = ah;
		swr.wr.ud.remote_qpn = 0; /* QPN 0: nowhere (see test_dest_qpn_zero) */
		swr.wr.ud.remote_qkey = 0x11111111;
		struct ibv_recv_wr rwr = {.wr_id = i, .sg_list = &sge, .num_sge = 1};
		struct ibv_send_wr *sbad = (void *)1;
		struct ibv_recv_wr *rbad = (void *)1;
		int got;
		switch (rows[i].kind) {
		case POST_SEND:
			got = ibv_post_send(qp, rows[i].null_list ? NULL : &swr,
					    rows[i].null_bad ? NULL : &sbad);
			if (!rows[i].null_bad)
				CHECK(sbad == NULL); /* no WR failed */
			sent += got == 0;
			break;
		case POST_RECV:
			got = ibv_post_recv(qp, rows[i].null_list ? NULL : &rwr,
					    rows[i].null_bad ? NULL : &rbad);
			if (!rows[i].null_bad)
				CHECK(rbad == NULL);
			posted_recv += got == 0;
			break;
		default:
			got = ibv_post_srq_recv(srq, rows[i].null_list ? NULL : &rwr,
						rows[i].null_bad ? NULL : &rbad);
			if (!rows[i].null_bad)
				CHECK(rbad == NULL);
			posted_srq += got == 0;
			break;
		}
		if (got != rows[i].want) {
			fprintf(stderr, "post row %zu: got %d, want %d\n", i, got, rows[i].want);
			exit(1);
		}
	}
	/* Only the good rows posted anything: one send completion, and moving the QP to
	 * ERR flushes exactly one receive. */
	struct ibv_wc wc;
	CHECK_EQ(poll_one(&wc, 10000), 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_SEND);
	struct ibv_qp_attr e = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(qp, &e, IBV_QP_STATE));
	CHECK_EQ(poll_one(&wc, 10000), 1);
	CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(wc.opcode, IBV_WC_RECV);
	CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);
	CHECK_EQ(sent, 1);
	CHECK_EQ(posted_recv, 1);
	CHECK_EQ(posted_srq, 1);
	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_destroy_ah(ah));
	CHECK_OK(ibv_destroy_srq(srq));
}

/* ---- modify_qp ---- */

static void test_reset_to_err(void)
{
	static const enum ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK_PTR(srq);
	for (unsigned s = 0; s < 2; s++) {
		for (unsigned t = 0; t < 3; t++) {
			struct ibv_qp *qp = mk_qp(types[t], s ? srq : NULL);
			struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
			struct ibv_wc wc;
			CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
			CHECK_EQ(qp_state(qp), IBV_QPS_ERR);
			CHECK_EQ(qp->state, IBV_QPS_ERR);
			CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0); /* nothing to flush */
			a.qp_state = IBV_QPS_RESET;
			CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
			CHECK_EQ(qp_state(qp), IBV_QPS_RESET);
			to_init(qp); /* and usable again */
			CHECK_EQ(qp_state(qp), IBV_QPS_INIT);
			CHECK_OK(ibv_destroy_qp(qp));
		}
	}
	CHECK_OK(ibv_destroy_srq(srq));
}

static void test_unknown_mask_bits(void)
{
	static const struct {
		enum ibv_qp_state from; /* the QP's state */
		enum ibv_qp_state to;
		int mask;
		int want;
	} rows[] = {
	    /* bits beyond IBV_QP_DEST_QPN: EOPNOTSUPP, whatever else is wrong */
	    {IBV_QPS_RESET, IBV_QPS_INIT, 1 << 21, EOPNOTSUPP},
	    {IBV_QPS_RESET, IBV_QPS_INIT, 1 << 24, EOPNOTSUPP},
	    {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_RATE_LIMIT, EOPNOTSUPP},
	    {IBV_QPS_RESET, IBV_QPS_INIT, 1 << 26, EOPNOTSUPP},
	    {IBV_QPS_RESET, IBV_QPS_INIT, 1 << 30, EOPNOTSUPP},
	    {IBV_QPS_RESET, IBV_QPS_INIT, (int)0x80000000u, EOPNOTSUPP},
	    {IBV_QPS_RESET, IBV_QPS_INIT,
	     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | (1 << 22),
	     EOPNOTSUPP},
	    {IBV_QPS_RESET, IBV_QPS_RTS, IBV_QP_STATE | (1 << 23), EOPNOTSUPP},
	    {IBV_QPS_INIT, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_RATE_LIMIT, EOPNOTSUPP},
	    /* known bits a transition does not take: EINVAL */
	    {IBV_QPS_RESET, IBV_QPS_INIT,
	     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_CAP,
	     EINVAL},
	    {IBV_QPS_RESET, IBV_QPS_INIT,
	     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_DEST_QPN,
	     EINVAL},
	    {IBV_QPS_RESET, IBV_QPS_RTS, IBV_QP_STATE, EINVAL},
	    /* and the standard bits alone still work */
	    {IBV_QPS_RESET, IBV_QPS_INIT,
	     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct ibv_qp *qp = mk_qp(IBV_QPT_RC, NULL);
		if (rows[i].from == IBV_QPS_INIT)
			to_init(qp);
		struct ibv_qp_attr a = {.qp_state = rows[i].to,
					.port_num = 1,
					.qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
		int got = ibv_modify_qp(qp, &a, rows[i].mask);
		if (got != rows[i].want) {
			fprintf(stderr, "mask row %zu (%#x): got %d, want %d\n", i,
				(unsigned)rows[i].mask, got, rows[i].want);
			exit(1);
		}
		CHECK_EQ(qp_state(qp), got ? rows[i].from : rows[i].to);
		CHECK_OK(ibv_destroy_qp(qp));
	}
}

/* dest_qp_num 0 is accepted; what the QP sends goes nowhere. */
static void test_dest_qpn_zero(void)
{
	struct ibv_sge sge = {(uintptr_t)mr->addr, 4096, mr->lkey};
	struct ibv_wc wc;

	/* RC: the SEND is never acknowledged; the requester gives up after its retries */
	struct ibv_qp *rc = mk_qp(IBV_QPT_RC, NULL);
	to_init(rc);
	to_rts(rc, 0);
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	CHECK_OK(ibv_query_qp(rc, &q, IBV_QP_DEST_QPN, &qi));
	CHECK_EQ(q.dest_qp_num, 0);
	/* 4 KiB: several packets, so the multi-packet (GSO) send path sees port 0 too */
	struct ibv_send_wr wr = {.wr_id = 1,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	struct swv_endpoint *ep = to_swv_qp(rc)->ep;
	bool gso = swv_ep_gso_usable(ep);
	CHECK_OK(ibv_post_send(rc, &wr, &bad));
	CHECK_EQ(poll_one(&wc, 60000), 1);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
	CHECK_EQ(qp_state(rc), IBV_QPS_ERR);
	/* Nothing was handed to the socket: a GSO send to port 0 fails with EINVAL, which
	 * the endpoint would take for "no UDP_SEGMENT here" and stop using GSO for every
	 * QP on the socket. */
	CHECK_EQ(swv_ep_gso_usable(ep), gso);
	CHECK_OK(ibv_destroy_qp(rc));

	/* UC: an RDMA WRITE into the void completes once sent */
	struct ibv_qp *uc = mk_qp(IBV_QPT_UC, NULL);
	to_init(uc);
	to_rts(uc, 0);
	wr = (struct ibv_send_wr){.wr_id = 2,
				  .sg_list = &sge,
				  .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED};
	wr.wr.rdma.remote_addr = 0x1000;
	wr.wr.rdma.rkey = 1;
	CHECK_OK(ibv_post_send(uc, &wr, &bad));
	CHECK_EQ(poll_one(&wc, 60000), 1);
	CHECK_EQ(wc.wr_id, 2);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_OK(ibv_destroy_qp(uc));
}

/* ---- rereg_mr ---- */

static void test_rereg(void)
{
	static uint8_t buf[256], buf2[256];
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK_PTR(pd2);
	struct ibv_context *ctx2 = ibv_open_device(ctx->device);
	CHECK_PTR(ctx2);
	struct ibv_pd *other = ibv_alloc_pd(ctx2);
	CHECK_PTR(other);
	enum { PD_NONE, PD_SAME, PD_OTHER_CTX };
	static const struct {
		int flags;
		int pd;
		bool addr; /* buf2, else NULL */
		size_t len;
		int access;
		int want, want_errno;
	} rows[] = {
	    /* libibverbs' own checks: INPUT */
	    {1 << 3, PD_NONE, false, 0, 0, IBV_REREG_MR_ERR_INPUT, EINVAL},
	    {IBV_REREG_MR_CHANGE_ACCESS | (1 << 7), PD_NONE, false, 0, IBV_ACCESS_LOCAL_WRITE,
	     IBV_REREG_MR_ERR_INPUT, EINVAL},
	    {IBV_REREG_MR_CHANGE_TRANSLATION, PD_NONE, false, 64, 0, IBV_REREG_MR_ERR_INPUT,
	     EINVAL},
	    {IBV_REREG_MR_CHANGE_TRANSLATION, PD_NONE, true, 0, 0, IBV_REREG_MR_ERR_INPUT, EINVAL},
	    {IBV_REREG_MR_CHANGE_PD, PD_SAME, false, 0, IBV_ACCESS_LOCAL_WRITE,
	     IBV_REREG_MR_ERR_INPUT, EINVAL}, /* access without CHANGE_ACCESS */
	    {IBV_REREG_MR_CHANGE_PD, PD_NONE, false, 0, 0, IBV_REREG_MR_ERR_INPUT, EINVAL},
	    /* the provider's / kernel's refusals: CMD, with their errno */
	    {0, PD_NONE, false, 0, 0, IBV_REREG_MR_ERR_CMD, EINVAL},
	    {IBV_REREG_MR_CHANGE_ACCESS, PD_NONE, false, 0, IBV_ACCESS_REMOTE_WRITE,
	     IBV_REREG_MR_ERR_CMD, EINVAL},
	    {IBV_REREG_MR_CHANGE_ACCESS, PD_NONE, false, 0,
	     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC | (1 << 12), IBV_REREG_MR_ERR_CMD,
	     EINVAL},
	    {IBV_REREG_MR_CHANGE_PD, PD_OTHER_CTX, false, 0, 0, IBV_REREG_MR_ERR_CMD, EINVAL},
	    {IBV_REREG_MR_CHANGE_TRANSLATION, PD_NONE, true, (size_t)-1, 0, IBV_REREG_MR_ERR_CMD,
	     EINVAL},
	    /* valid ones */
	    {IBV_REREG_MR_CHANGE_ACCESS, PD_NONE, false, 0,
	     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND, 0, 0},
	    {IBV_REREG_MR_CHANGE_ACCESS, PD_NONE, false, 0, IBV_ACCESS_REMOTE_READ, 0, 0},
	    {IBV_REREG_MR_CHANGE_PD, PD_SAME, false, 0, 0, 0, 0},
	    {IBV_REREG_MR_CHANGE_TRANSLATION, PD_NONE, true, sizeof(buf2), 0, 0, 0},
	};
	struct ibv_mr *m = ibv_reg_mr(pd, buf, sizeof(buf), ALL_ACCESS);
	CHECK_PTR(m);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct ibv_pd *p = rows[i].pd == PD_SAME	? pd2
				   : rows[i].pd == PD_OTHER_CTX ? other
								: NULL;
		void *old_addr = m->addr;
		struct ibv_pd *old_pd = m->pd;
		errno = 0;
		int got = ibv_rereg_mr(m, rows[i].flags, p, rows[i].addr ? buf2 : NULL, rows[i].len,
				       rows[i].access);
		if (got != rows[i].want || (got && errno != rows[i].want_errno)) {
			fprintf(stderr, "rereg row %zu: got %d errno %d, want %d errno %d\n", i,
				got, errno, rows[i].want, rows[i].want_errno);
			exit(1);
		}
		if (got) { /* refused: the MR is as it was */
			CHECK(m->addr == old_addr);
			CHECK(m->pd == old_pd);
		}
	}
	CHECK(m->pd == pd2);
	CHECK(m->addr == buf2);
	CHECK_OK(ibv_dereg_mr(m));
	CHECK_OK(ibv_dealloc_pd(other));
	CHECK_OK(ibv_close_device(ctx2));
	CHECK_OK(ibv_dealloc_pd(pd2));
}

/* ---- attach counters ---- */

static void test_attach_bits(void)
{
	static const struct {
		uint32_t op_mask;
		int want;
	} rows[] = {
	    {0, EINVAL},
	    {1u << 6, EOPNOTSUPP},
	    {1u << 15, EOPNOTSUPP},
	    {1u << 18, EOPNOTSUPP},
	    {0x80000000u, EOPNOTSUPP},
	    {IBV_QP_ATTACH_COMP_CNTR_OP_SEND | (1u << 6), EOPNOTSUPP},
	    {SWV_QP_ATTACH_COMP_CNTR_OP_ATOMIC | (1u << 20), EOPNOTSUPP},
	    {IBV_QP_ATTACH_COMP_CNTR_OP_SEND, 0},
	    {SWV_QP_ATTACH_COMP_CNTR_OP_REMOTE_ATOMIC, 0},
	    {IBV_QP_ATTACH_COMP_CNTR_OP_SEND, EBUSY},
	};
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(ctx, &ca);
	CHECK_PTR(c);
	struct ibv_qp *qp = mk_qp(IBV_QPT_RC, NULL);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct ibv_qp_attach_comp_cntr_attr a = {.op_mask = rows[i].op_mask};
		int got = ibv_qp_attach_comp_cntr(qp, c, &a);
		if (got != rows[i].want) {
			fprintf(stderr, "attach row %zu (%#x): got %d, want %d\n", i,
				rows[i].op_mask, got, rows[i].want);
			exit(1);
		}
	}
	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

int main(void)
{
	ctx = swvt_open_first_device();
	pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK_PTR(cq);
	mr = swvt_reg_buf(pd, 4096, ALL_ACCESS);

	test_post_null();
	test_reset_to_err();
	test_unknown_mask_bits();
	test_dest_qpn_zero();
	test_rereg();
	test_attach_bits();

	swvt_dereg_buf(mr);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	printf("ok\n");
	return 0;
}
