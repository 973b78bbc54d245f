/*
 * ibv_modify_qp to ERR first processes what already reached the device: an RC WRITE
 * whose ACK waits in the initiator's socket (or inbox) completes with success, it is not
 * flushed. Two contexts of the first device; the initiator's progress thread is kept
 * from receiving (the internal test hook swv_progress_test_norx) so the ACK is certain
 * to be waiting, unread, when the QP is moved to ERR. This is the order libfabric's RxM
 * met: the peer's ACK, then its CM DREQ on another socket and thread, then the
 * disconnect's move to ERR before the ACK was read -- the send came back flushed.
 */
#include <stdio.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/context.h"
#include "inproc.h"
#include "util/clock.h"

#define BUF	4096
#define HANG_NS 60000000000ull /* hang guard, not a timing assertion */

int main(void)
{
	struct ibv_context *ic = swvt_open_first_device(), *tc = swvt_open_first_device();
	struct ibv_pd *ip = ibv_alloc_pd(ic), *tp = ibv_alloc_pd(tc);
	CHECK_PTR(ip);
	CHECK_PTR(tp);
	struct ibv_cq *icq = ibv_create_cq(ic, 16, NULL, NULL, 0),
		      *tcq = ibv_create_cq(tc, 16, NULL, NULL, 0);
	CHECK_PTR(icq);
	CHECK_PTR(tcq);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *imr = swvt_reg_buf(ip, BUF, acc), *tmr = swvt_reg_buf(tp, BUF, acc);
	struct ibv_qp_init_attr a = {
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	a.send_cq = a.recv_cq = icq;
	struct ibv_qp *qa = ibv_create_qp(ip, &a);
	a.send_cq = a.recv_cq = tcq;
	struct ibv_qp *qb = ibv_create_qp(tp, &a);
	CHECK_PTR(qa);
	CHECK_PTR(qb);
	swvt_pair_to_init(qa);
	swvt_pair_to_init(qb);
	swvt_pair_connect(qa, qb);

	swv_progress_test_norx(&to_swv_ctx(ic)->progress, true);
	memset(imr->addr, 0x5a, BUF);
	struct ibv_sge sge = {(uintptr_t)imr->addr, BUF, imr->lkey};
	struct ibv_send_wr wr = {.wr_id = 7,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)tmr->addr;
	wr.wr.rdma.rkey = tmr->rkey;
	CHECK_OK(ibv_post_send(qa, &wr, &bad));
	/* The target places the WRITE, and its progress thread's batch (which sends the
	 * ACK before it ends) is over: the ACK is in the initiator's socket or inbox. */
	const volatile uint8_t *dst = tmr->addr;
	uint64_t t0 = swv_now_ns();
	while (dst[BUF - 1] != 0x5a) {
		if (swv_now_ns() - t0 > HANG_NS) {
			fprintf(stderr, "the WRITE never landed\n");
			return 1;
		}
	}
	swv_progress_sync(&to_swv_ctx(tc)->progress);

	struct ibv_qp_attr qattr = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(qa, &qattr, IBV_QP_STATE));
	struct ibv_wc wc;
	t0 = swv_now_ns();
	int n;
	while ((n = ibv_poll_cq(icq, 1, &wc)) == 0) {
		if (swv_now_ns() - t0 > HANG_NS) {
			fprintf(stderr, "no completion\n");
			return 1;
		}
	}
	CHECK_EQ(n, 1);
	CHECK_EQ(wc.wr_id, 7);
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "acknowledged WRITE completed with %s\n",
			ibv_wc_status_str(wc.status));
		return 1;
	}
	swv_progress_test_norx(&to_swv_ctx(ic)->progress, false);

	CHECK_OK(ibv_destroy_qp(qa));
	CHECK_OK(ibv_destroy_qp(qb));
	swvt_dereg_buf(imr);
	swvt_dereg_buf(tmr);
	CHECK_OK(ibv_destroy_cq(icq));
	CHECK_OK(ibv_destroy_cq(tcq));
	CHECK_OK(ibv_dealloc_pd(ip));
	CHECK_OK(ibv_dealloc_pd(tp));
	CHECK_OK(ibv_close_device(ic));
	CHECK_OK(ibv_close_device(tc));
	puts("test_qp_err_drain: OK");
	return 0;
}
