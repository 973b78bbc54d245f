/*
 * Coalesced ACKs and the MSN never leave work requests uncompleted: bursts of
 * unsignaled SENDs and WRITEs (only the last signaled), and one 512 KiB WRITE whose
 * 512 packets are acknowledged only where the requester asked (AckReq), all complete;
 * the responder sees every message exactly once (receive CQEs, REMOTE_RDMA_WRITE
 * counter) and the requester's counters count the unsignaled WRs too.
 */
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NB       200
#define BIG_OFF  (256u << 10)
#define BIG_LEN  (512u << 10)

static struct ibv_comp_cntr *cntr_on(struct swvt *t, uint32_t op)
{
	struct ibv_comp_cntr_init_attr a = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(t->ctx, &a);
	CHECK_PTR(c);
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = op};
	CHECK_OK(ibv_qp_attach_comp_cntr(t->qp, c, &at));
	return c;
}

static uint64_t cntr(struct ibv_comp_cntr *c)
{
	uint64_t v, e;
	CHECK_OK(ibv_read_comp_cntr(c, &v));
	CHECK_OK(ibv_read_err_comp_cntr(c, &e));
	CHECK_EQ(e, 0);
	return v;
}

static uint32_t len_of(int i)
{
	return (uint32_t)(1 + (i * 389) % 1200); /* 1 or 2 packets at MTU 1024 */
}

static void requester(struct swvt *t, void *arg)
{
	struct ibv_comp_cntr *cs = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_SEND);
	struct ibv_comp_cntr *cw = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE);
	struct ibv_wc wc;
	swvt_connect(t);

	for (int i = 0; i < NB; i++) {
		swvt_fill(t->buf + (size_t)i * 1280, len_of(i), 300 + (uint32_t)i);
		swvt_post_send(t, (uint64_t)i, IBV_WR_SEND, (uint64_t)i * 1280, len_of(i), 0,
			       i == NB - 1 ? IBV_SEND_SIGNALED : 0);
	}
	swvt_poll_n(t->scq, &wc, 1, 10000);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, NB - 1);
	CHECK_EQ(cntr(cs), NB);

	for (int i = 0; i < NB; i++)
		swvt_post_send(t, (uint64_t)i, IBV_WR_RDMA_WRITE, (uint64_t)i * 1280, len_of(i),
			       (uint64_t)i * 1280, i == NB - 1 ? IBV_SEND_SIGNALED : 0);
	swvt_poll_n(t->scq, &wc, 1, 10000);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(cntr(cw), NB);

	swvt_fill(t->buf + BIG_OFF, BIG_LEN, 4242);
	swvt_post_send(t, 999, IBV_WR_RDMA_WRITE, BIG_OFF, BIG_LEN, BIG_OFF, IBV_SEND_SIGNALED);
	swvt_poll_n(t->scq, &wc, 1, 20000);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 999);
	CHECK_EQ(cntr(cw), NB + 1);
	swvt_expect_empty(t->scq, 50);
	swvt_send_u64(t, 1);
	CHECK_EQ(swvt_recv_u64(t), 1);
}

static void responder(struct swvt *t, void *arg)
{
	struct ibv_comp_cntr *cw = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE);
	struct ibv_comp_cntr *cv = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_RECV);
	uint8_t *rbuf = malloc(NB * 1280);
	CHECK_PTR(rbuf);
	struct ibv_mr *mr = ibv_reg_mr(t->pd, rbuf, NB * 1280, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(mr);
	for (int i = 0; i < NB; i++) {
		struct ibv_sge sge = {(uintptr_t)rbuf + (size_t)i * 1280, 1280, mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK_OK(ibv_post_recv(t->qp, &wr, &bad));
	}
	swvt_connect(t);
	CHECK_EQ(swvt_recv_u64(t), 1);

	/* the counters first: observing the counts makes the placed data visible
	 * (release increment after placement, acquire read), which is what lets this
	 * thread read memory the progress thread wrote */
	CHECK_EQ(cntr(cv), NB);
	CHECK_EQ(cntr(cw), NB + 1);
	struct ibv_wc wc[NB];
	swvt_poll_n(t->rcq, wc, NB, 5000);
	for (int i = 0; i < NB; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, i);
		CHECK_EQ(wc[i].byte_len, len_of(i));
		CHECK_EQ(swvt_verify(rbuf + (size_t)i * 1280, len_of(i), 300 + (uint32_t)i), (size_t)-1);
		CHECK_EQ(swvt_verify(t->buf + (size_t)i * 1280, len_of(i), 300 + (uint32_t)i), (size_t)-1);
	}
	swvt_expect_empty(t->rcq, 50);
	CHECK_EQ(swvt_verify(t->buf + BIG_OFF, BIG_LEN, 4242), (size_t)-1);
	swvt_send_u64(t, 1);
	CHECK_OK(ibv_dereg_mr(mr));
	free(rbuf);
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.stop_at = IBV_QPS_INIT;
	o.max_recv_wr = NB;
	o.cqe = 1024;
	return swvt_run(&o, requester, responder, NULL);
}
