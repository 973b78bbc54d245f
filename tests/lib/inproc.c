/* In-process setup for unit tests; see inproc.h. */
#include "inproc.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

struct ibv_context *swvt_open_first_device(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK_PTR(list);
	CHECK(n >= 1);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK_PTR(ctx);
	ibv_free_device_list(list);
	return ctx;
}

struct swvt_dev swvt_dev_open(void)
{
	struct swvt_dev d = {.ctx = swvt_open_first_device()};
	d.pd = ibv_alloc_pd(d.ctx);
	CHECK_PTR(d.pd);
	return d;
}

void swvt_dev_close(struct swvt_dev *d)
{
	CHECK_OK(ibv_dealloc_pd(d->pd));
	CHECK_OK(ibv_close_device(d->ctx));
}

struct ibv_mr *swvt_reg_buf(struct ibv_pd *pd, size_t len, int access)
{
	void *buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
	CHECK_PTR(buf);
	memset(buf, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, access);
	CHECK_PTR(mr);
	return mr;
}

void swvt_dereg_buf(struct ibv_mr *mr)
{
	void *buf = mr->addr;
	CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
}

void swvt_pair_to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
				.port_num = 1,
				.qp_access_flags =
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
	CHECK_OK(ibv_modify_qp(
	    qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

void swvt_pair_to_rtr(struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
				.path_mtu = IBV_MTU_1024,
				.dest_qp_num = dest_qpn,
				.rq_psn = 0,
				.max_dest_rd_atomic = 4,
				.min_rnr_timer = 1};
	swvt_local_ah_attr(qp->context, &a.ah_attr);
	CHECK_OK(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER));
}

void swvt_local_ah_attr(struct ibv_context *ctx, struct ibv_ah_attr *ah)
{
	struct ibv_port_attr port;
	union ibv_gid gid;
	CHECK_OK(ibv_query_port(ctx, 1, &port));
	CHECK_OK(ibv_query_gid(ctx, 1, 0, &gid));
	memset(ah, 0, sizeof(*ah));
	ah->port_num = 1;
	ah->dlid = port.lid;
	if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		ah->is_global = 1;
		ah->grh.dgid = gid;
		ah->grh.hop_limit = 64;
	}
}

struct ibv_qp *swvt_rc_qp_ex(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq,
			     struct ibv_qp_cap cap, uint64_t send_ops)
{
	struct ibv_qp_init_attr_ex a = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = cap,
	    .comp_mask = IBV_QP_INIT_ATTR_PD | (send_ops ? IBV_QP_INIT_ATTR_SEND_OPS_FLAGS : 0),
	    .pd = pd,
	    .send_ops_flags = send_ops,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a);
	CHECK_PTR(qp);
	if (send_ops)
		CHECK_PTR(ibv_qp_to_qp_ex(qp));
	return qp;
}

struct ibv_wc swvt_poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	uint64_t spins = 0;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(++spins < 1000000000ull);
	CHECK_EQ(n, 1);
	return wc;
}

void swvt_pair_to_rts(struct ibv_qp *qp, uint8_t timeout)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS,
				.sq_psn = 0,
				.timeout = timeout,
				.retry_cnt = 7,
				.rnr_retry = 7,
				.max_rd_atomic = 4};
	CHECK_OK(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
}

void swvt_pair_connect(struct ibv_qp *a, struct ibv_qp *b)
{
	swvt_pair_to_rtr(a, b->qp_num);
	swvt_pair_to_rtr(b, a->qp_num);
	swvt_pair_to_rts(a, 14);
	swvt_pair_to_rts(b, 14);
}
