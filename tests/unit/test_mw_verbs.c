/*
 * The errnos of the memory-window, ATOMIC_WRITE and FLUSH verbs (as rdma-core and rxe
 * return them), in one process: two RC QPs of one context connected to each other.
 *  - ibv_alloc_mw: type 1 and 2; any other type EINVAL; a PD with windows is EBUSY
 *  - ibv_bind_mw (type 1): EINVAL for a type 2 window, an unbind with a range, a
 *    zero-based window, an MR without MW_BIND, a range outside the MR; EPERM for an MR
 *    of another PD (libibverbs); the key becomes ibv_inc_rkey of the old one
 *  - ibv_post_send: BIND_MW with no window or a type 1 window, inline local operations,
 *    ATOMIC_WRITE and FLUSH (builder only) are EINVAL
 *  - the builder: wr_bind_mw without bind info, wr_atomic_write without a value or
 *    misaligned, wr_flush with a bad type, level or length: EINVAL from wr_complete
 *  - completions: a type 2 bind from a QP of another PD is IBV_WC_MW_BIND_ERR
 *    (C10-72); ibv_dereg_mr of an MR with a bound window is EINVAL until LOCAL_INV,
 *    and so is ibv_rereg_mr (IBV_REREG_MR_ERR_CMD)
 *  - type 2B: a window bound on QP a answers a's peer, and refuses a WRITE that
 *    arrives on another QP of the same PD (IBV_WC_REM_ACCESS_ERR)
 *  - order: a WRITE, a bind and an invalidation posted as one list complete in that
 *    order (the local operations wait for the WRITE's ACK)
 *  - a bind posted while the QP is drained (SQD) whose MR is deregistered before it
 *    executes completes with IBV_WC_MW_BIND_ERR (and touches no freed memory)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "inproc.h"

#define TMO_MS 5000

static struct ibv_context *ctx;
static struct ibv_cq *cq;

/* An RC QP in INIT with these extended-QP operations: 16 WRs of one SGE each way. */
static struct ibv_qp *mk_qp(struct ibv_pd *pd, uint64_t ops)
{
	struct ibv_qp_cap cap = {
	    .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1};
	struct ibv_qp *qp = swvt_rc_qp_ex(ctx, pd, cq, cap, ops);
	swvt_pair_to_init(qp);
	return qp;
}

static int post(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, wr, &bad);
	if (rc)
		CHECK(bad == wr);
	return rc;
}

int main(void)
{
	const uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW |
			     IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_ATOMIC_WRITE |
			     IBV_QP_EX_WITH_FLUSH;
	ctx = swvt_open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	CHECK_PTR(pd2);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK_PTR(cq);
	struct ibv_mr *mr = swvt_reg_buf(pd, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mr *nobind = swvt_reg_buf(pd, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *other = swvt_reg_buf(pd2, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	uint64_t base = (uintptr_t)mr->addr;

	/* ---- alloc ---- */
	struct ibv_device_attr da;
	CHECK_OK(ibv_query_device(ctx, &da));
	CHECK(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	CHECK(da.max_mw > 0);
	errno = 0;
	CHECK(!ibv_alloc_mw(pd, (enum ibv_mw_type)3) && errno == EINVAL);
	errno = 0;
	CHECK(!ibv_alloc_mw(pd, (enum ibv_mw_type)0) && errno == EINVAL);
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK_PTR(mw1);
	CHECK_PTR(mw2);
	CHECK(mw1->type == IBV_MW_TYPE_1 && mw2->type == IBV_MW_TYPE_2);
	CHECK(mw1->pd == pd && mw1->context == ctx);
	CHECK(mw1->rkey && mw2->rkey && mw1->rkey != mw2->rkey);
	CHECK(mw1->rkey != mr->rkey && mw1->rkey != mr->lkey);
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY); /* windows (and MRs) still use it */

	struct ibv_qp *a = mk_qp(pd, ops), *b = mk_qp(pd, ops), *c = mk_qp(pd2, ops);
	struct ibv_qp *d = mk_qp(pd2, ops), *e = mk_qp(pd, ops), *f = mk_qp(pd, ops);
	swvt_pair_connect(a, b);
	swvt_pair_connect(c, d);
	swvt_pair_connect(e, f);

	/* ---- ibv_bind_mw ---- */
	struct ibv_mw_bind mb = {.wr_id = 1, .send_flags = IBV_SEND_SIGNALED};
	mb.bind_info = (struct ibv_mw_bind_info){mr, base, 4096, IBV_ACCESS_REMOTE_WRITE};
	CHECK_EQ(ibv_bind_mw(a, mw2, &mb), EINVAL); /* type 2: WRs only */
	mb.bind_info.mr = NULL;
	CHECK_EQ(ibv_bind_mw(a, mw1, &mb), EINVAL); /* unbind with a range */
	mb.bind_info.mr = other;
	mb.bind_info.addr = (uintptr_t)other->addr;
	CHECK_EQ(ibv_bind_mw(a, mw1, &mb), EPERM); /* MR of another PD */
	mb.bind_info = (struct ibv_mw_bind_info){mr, base, 4096,
						 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED};
	CHECK_EQ(ibv_bind_mw(a, mw1, &mb), EINVAL); /* o10-36.2.2 */
	mb.bind_info =
	    (struct ibv_mw_bind_info){nobind, (uintptr_t)nobind->addr, 64, IBV_ACCESS_REMOTE_READ};
	CHECK_EQ(ibv_bind_mw(a, mw1, &mb), EINVAL); /* C10-73 */
	mb.bind_info = (struct ibv_mw_bind_info){mr, base + 65536 - 8, 16, IBV_ACCESS_REMOTE_READ};
	CHECK_EQ(ibv_bind_mw(a, mw1, &mb), EINVAL); /* C10-75 */
	mb.bind_info.addr = base - 8;
	CHECK_EQ(ibv_bind_mw(a, mw1, &mb), EINVAL);
	struct ibv_wc wc; /* nothing was posted: nothing completes */
	CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);
	uint32_t k = mw1->rkey;
	mb.bind_info = (struct ibv_mw_bind_info){mr, base, 4096, IBV_ACCESS_REMOTE_READ};
	CHECK_OK(ibv_bind_mw(a, mw1, &mb));
	CHECK_EQ(mw1->rkey, ibv_inc_rkey(k));
	wc = swvt_poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 1);
	CHECK_EQ(wc.qp_num, a->qp_num);
	/* unbind: no MR, no range */
	mb.bind_info = (struct ibv_mw_bind_info){NULL, 0, 0, 0};
	CHECK_OK(ibv_bind_mw(a, mw1, &mb));
	wc = swvt_poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW);

	/* ---- ibv_post_send ---- */
	struct ibv_send_wr w = {.wr_id = 2, .opcode = IBV_WR_BIND_MW};
	w.bind_mw.bind_info = (struct ibv_mw_bind_info){mr, base, 64, IBV_ACCESS_REMOTE_READ};
	CHECK_EQ(post(a, &w), EINVAL); /* no window */
	w.bind_mw.mw = mw1;
	CHECK_EQ(post(a, &w), EINVAL); /* type 1: ibv_bind_mw only */
	w.bind_mw.mw = mw2;
	w.send_flags = IBV_SEND_INLINE;
	CHECK_EQ(post(a, &w), EINVAL);
	w.opcode = IBV_WR_LOCAL_INV;
	CHECK_EQ(post(a, &w), EINVAL);
	w.send_flags = 0;
	uint64_t buf8 = 0;
	struct ibv_sge sge = {(uintptr_t)&buf8, 8, 0};
	struct ibv_send_wr aw = {.opcode = IBV_WR_ATOMIC_WRITE, .sg_list = &sge, .num_sge = 1};
	CHECK_EQ(post(a, &aw), EINVAL); /* ibv_wr_atomic_write only */
	aw.opcode = IBV_WR_FLUSH;
	aw.num_sge = 0;
	CHECK_EQ(post(a, &aw), EINVAL); /* ibv_wr_flush only */
	CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);

	/* ---- the builder ---- */
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	ibv_wr_start(x);
	ibv_wr_bind_mw(x, mw2, ibv_inc_rkey(mw2->rkey), NULL);
	CHECK_EQ(ibv_wr_complete(x), EINVAL);
	struct ibv_mw_bind_info bi = {mr, base, 64, IBV_ACCESS_REMOTE_READ};
	ibv_wr_start(x);
	ibv_wr_bind_mw(x, mw1, ibv_inc_rkey(mw1->rkey), &bi); /* type 1 */
	CHECK_EQ(ibv_wr_complete(x), EINVAL);
	ibv_wr_start(x);
	ibv_wr_atomic_write(x, 1, base, NULL);
	CHECK_EQ(ibv_wr_complete(x), EINVAL);
	ibv_wr_start(x);
	ibv_wr_atomic_write(x, 1, base + 4, &buf8);
	CHECK_EQ(ibv_wr_complete(x), EINVAL);
	static const struct {
		uint8_t type, level;
		size_t len;
	} bad_flush[] = {{0, IBV_FLUSH_RANGE, 8},
			 {4, IBV_FLUSH_RANGE, 8},
			 {IBV_FLUSH_GLOBAL, 2, 8},
			 {IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE, (size_t)UINT32_MAX + 1}};
	for (size_t i = 0; i < sizeof(bad_flush) / sizeof(bad_flush[0]); i++) {
		ibv_wr_start(x);
		ibv_wr_flush(x, 1, base, bad_flush[i].len, bad_flush[i].type, bad_flush[i].level);
		CHECK_EQ(ibv_wr_complete(x), EINVAL);
	}
	CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);

	/* ---- completions ---- */
	/* type 2 bound from a QP of another PD: C10-72 */
	w = (struct ibv_send_wr){
	    .wr_id = 3, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
	w.bind_mw.mw = mw2;
	w.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	w.bind_mw.bind_info = (struct ibv_mw_bind_info){
	    mr, base, 64, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE};
	CHECK_OK(post(c, &w));
	wc = swvt_poll_one(cq);
	CHECK(wc.status == IBV_WC_MW_BIND_ERR && wc.wr_id == 3 && wc.qp_num == c->qp_num);
	/* on its own PD's QP it binds; the MR cannot go while it is bound */
	uint32_t k2 = mw2->rkey;
	CHECK_OK(post(a, &w));
	wc = swvt_poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW);
	CHECK_EQ(mw2->rkey, ibv_inc_rkey(k2));
	CHECK_EQ(ibv_dereg_mr(mr), EINVAL);
	errno = 0;
	CHECK_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND),
		 IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EINVAL);
	/* 2B: through a (from its peer b) yes, through e (from f) no */
	memset(nobind->addr, 0x5c, 16);
	struct ibv_sge ws = {(uintptr_t)nobind->addr, 16, nobind->lkey};
	struct ibv_send_wr ww = {.wr_id = 5,
				 .sg_list = &ws,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	ww.wr.rdma.remote_addr = base;
	ww.wr.rdma.rkey = mw2->rkey;
	CHECK_OK(post(b, &ww));
	wc = swvt_poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 5);
	CHECK(((uint8_t *)mr->addr)[15] == 0x5c);
	memset(nobind->addr, 0x7d, 16);
	ww.wr_id = 6;
	CHECK_OK(post(f, &ww));
	wc = swvt_poll_one(cq);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 6);
	CHECK(((uint8_t *)mr->addr)[0] == 0x5c);
	struct ibv_send_wr li = {
	    .wr_id = 4, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED};
	li.invalidate_rkey = mw2->rkey;
	CHECK_OK(post(a, &li));
	wc = swvt_poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV && wc.wr_id == 4);

	/* WRITE (to b's side of an MR with remote write), BIND_MW, LOCAL_INV in one list */
	struct ibv_mr *rw =
	    swvt_reg_buf(pd, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_send_wr l3[3];
	struct ibv_sge s3 = {(uintptr_t)nobind->addr, 2048, nobind->lkey};
	memset(l3, 0, sizeof(l3));
	l3[0] = (struct ibv_send_wr){.wr_id = 10,
				     .sg_list = &s3,
				     .num_sge = 1,
				     .opcode = IBV_WR_RDMA_WRITE,
				     .send_flags = IBV_SEND_SIGNALED,
				     .next = &l3[1]};
	l3[0].wr.rdma.remote_addr = (uintptr_t)rw->addr;
	l3[0].wr.rdma.rkey = rw->rkey;
	l3[1] = (struct ibv_send_wr){
	    .wr_id = 11, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED, .next = &l3[2]};
	l3[1].bind_mw.mw = mw2;
	l3[1].bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	l3[1].bind_mw.bind_info = (struct ibv_mw_bind_info){mr, base, 64, IBV_ACCESS_REMOTE_READ};
	l3[2] = (struct ibv_send_wr){
	    .wr_id = 12, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED};
	l3[2].invalidate_rkey = (mw2->rkey & ~0xffu) | (ibv_inc_rkey(mw2->rkey) & 0xffu);
	CHECK_OK(post(a, l3));
	for (uint64_t id = 10; id <= 12; id++) {
		wc = swvt_poll_one(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == id);
	}
	swvt_dereg_buf(rw);

	/* SQD holds the bind back; its MR goes; back in RTS the bind finds no MR */
	struct ibv_mr *gone = swvt_reg_buf(pd, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_SQD};
	CHECK_OK(ibv_modify_qp(a, &qa, IBV_QP_STATE));
	w = (struct ibv_send_wr){
	    .wr_id = 20, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
	w.bind_mw.mw = mw2;
	w.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	w.bind_mw.bind_info =
	    (struct ibv_mw_bind_info){gone, (uintptr_t)gone->addr, 64, IBV_ACCESS_REMOTE_READ};
	CHECK_OK(post(a, &w));
	CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0); /* not executed in SQD */
	swvt_dereg_buf(gone);
	qa.qp_state = IBV_QPS_RTS;
	CHECK_OK(ibv_modify_qp(a, &qa, IBV_QP_STATE));
	wc = swvt_poll_one(cq);
	CHECK(wc.status == IBV_WC_MW_BIND_ERR && wc.wr_id == 20);

	CHECK_OK(ibv_dealloc_mw(mw1));
	CHECK_OK(ibv_dealloc_mw(mw2));
	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_qp(b));
	CHECK_OK(ibv_destroy_qp(c));
	CHECK_OK(ibv_destroy_qp(d));
	CHECK_OK(ibv_destroy_qp(e));
	CHECK_OK(ibv_destroy_qp(f));
	swvt_dereg_buf(mr); /* no window bound any more */
	swvt_dereg_buf(nobind);
	swvt_dereg_buf(other);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_dealloc_pd(pd2));
	CHECK_OK(ibv_close_device(ctx));
	printf("test_mw_verbs: OK\n");
	return 0;
}
