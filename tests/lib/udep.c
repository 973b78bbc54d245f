#include "udep.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

void swvt_udep_open(struct swvt_udep *e, struct ibv_context *ctx, struct ibv_pd *pd, unsigned slots,
		    size_t slot, uint32_t qkey)
{
	memset(e, 0, sizeof(*e));
	e->slots = slots;
	e->slot = slot;
	e->cq = ibv_create_cq(ctx, (int)(4 * slots), NULL, NULL, 0);
	CHECK_PTR(e->cq);
	struct ibv_qp_init_attr ia = {
	    .send_cq = e->cq,
	    .recv_cq = e->cq,
	    .qp_type = IBV_QPT_UD,
	    .cap = {
		.max_send_wr = slots, .max_recv_wr = slots, .max_send_sge = 1, .max_recv_sge = 1}};
	e->qp = ibv_create_qp(pd, &ia);
	CHECK_PTR(e->qp);
	e->buf = calloc(slots, slot);
	CHECK_PTR(e->buf);
	e->mr = ibv_reg_mr(pd, e->buf, slots * slot, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(e->mr);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey};
	CHECK_OK(
	    ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
	a.qp_state = IBV_QPS_RTR;
	CHECK_OK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	CHECK_OK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

void swvt_udep_close(struct swvt_udep *e)
{
	CHECK_OK(ibv_destroy_qp(e->qp));
	CHECK_OK(ibv_dereg_mr(e->mr));
	CHECK_OK(ibv_destroy_cq(e->cq));
	free(e->buf);
}

void swvt_udep_post_recvs(struct swvt_udep *e, unsigned n)
{
	CHECK(n <= e->slots);
	for (unsigned i = 0; i < n; i++) {
		uint8_t *p = e->buf + (size_t)i * e->slot;
		memset(p, 0xee, e->slot);
		struct ibv_sge sge = {(uintptr_t)p, (uint32_t)e->slot, e->mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK_OK(ibv_post_recv(e->qp, &wr, &bad));
	}
}
