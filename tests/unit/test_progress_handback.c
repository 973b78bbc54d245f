/*
 * The driver's lease is handed back when nothing the application posted can complete
 * (docs/design.md, "The thread steps aside"), and the count that says so -- receive
 * WQEs posted on the context, progress.h rq_posted -- is exact.
 *
 * One context over UDP (SWVERBS_SHM=0: the hand-back is for traffic from sockets), its
 * progress thread kept from receiving (swv_progress_test_norx), so only the polling
 * loop receives, and a 10 s lease (swv_progress_test_lease), which the test takes for
 * the loop before each WRITE: it is still held when the test looks unless something
 * gave it back.
 *  - No receive posted: a tight poll loop waits for a signaled WRITE; the pass that
 *    retires it (its ACK came from the socket) gives the lease back. Without the rule
 *    the lease stays and the peer's next WRITE would wait for it to lapse.
 *  - A receive posted: the same loop keeps the lease (a SEND may come for it, and the
 *    application is polling for it).
 *  - rq_posted follows every way a receive WQE comes and goes: post (a failed post
 *    adds nothing), consumption by a SEND from a QP's RQ and from an SRQ, an SRQ
 *    resize, flush in ERR, RESET, and destroying a QP or an SRQ with WQEs posted.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/context.h"
#include "inproc.h"
#include "util/clock.h"

#define HANG_NS	 60000000000ull /* hang guard */
#define LEASE_NS 10000000000ull

static struct swvt_dev dev;
static struct ibv_cq *cq;
static struct ibv_mr *mr;

static struct swv_progress *pr(void)
{
	return &to_swv_ctx(dev.ctx)->progress;
}

static int64_t rq_posted(void)
{
	return atomic_load(&pr()->rq_posted);
}

static struct ibv_qp *rc_qp(struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .srq = srq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 16, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(dev.pd, &a);
	CHECK_PTR(qp);
	swvt_pair_to_init(qp);
	return qp;
}

static void post_recv(struct ibv_qp *qp, struct ibv_srq *srq, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct ibv_sge sge = {(uintptr_t)mr->addr + 4096, 64, mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK_OK(srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad));
	}
}

static void post_send(struct ibv_qp *qp, enum ibv_wr_opcode op)
{
	struct ibv_sge sge = {(uintptr_t)mr->addr, 8, mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)mr->addr + 8192;
	wr.wr.rdma.rkey = mr->rkey;
	CHECK_OK(ibv_post_send(qp, &wr, &bad));
}

/* Completions of cq until one of opcode op is seen (others are checked successful). */
static void wait_wc(enum ibv_wc_opcode op)
{
	for (;;) {
		struct ibv_wc wc = swvt_poll_one(cq);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		if (wc.opcode == op)
			return;
	}
}

/* One signaled WRITE a -> b, waited for by a poll loop that holds the lease from the
 * start (set here: whether a loop's passes come less than SWV_PROGRESS_BUSY_GAP_NS apart
 * depends on the machine, and under a sanitizer they may never). Returns drive_until
 * once the completion was seen. */
static uint64_t lease_after_write(struct ibv_qp *a)
{
	struct ibv_wc wc;
	int n;
	atomic_store(&pr()->drive_until, swv_now_ns() + LEASE_NS);
	post_send(a, IBV_WR_RDMA_WRITE);
	uint64_t start = swv_now_ns();
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		if (swv_now_ns() - start > HANG_NS) {
			fprintf(stderr, "stuck: sq_outstanding %lld\n",
				(long long)atomic_load(&pr()->sq_outstanding));
			exit(1);
		}
	}
	CHECK_EQ(n, 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
	return atomic_load(&pr()->drive_until);
}

static void test_handback(struct ibv_qp *a, struct ibv_qp *b)
{
	CHECK_EQ(rq_posted(), 0);
	CHECK_EQ(lease_after_write(a), 0); /* nothing left to complete: handed back */
	CHECK_EQ(lease_after_write(a), 0);

	post_recv(b, NULL, 1);
	CHECK_EQ(rq_posted(), 1);
	CHECK(lease_after_write(a) != 0); /* a receive is posted: kept */
	swv_progress_release(pr());
}

static void test_rq_posted(struct ibv_qp *a, struct ibv_qp *b)
{
	CHECK_EQ(rq_posted(), 1); /* b's, from test_handback */
	post_recv(a, NULL, 5);
	CHECK_EQ(rq_posted(), 6);

	/* a list that overflows a's RQ (8): the WRs before the failing one count */
	struct ibv_sge sge = {(uintptr_t)mr->addr + 4096, 64, mr->lkey};
	struct ibv_recv_wr wrs[4], *bad;
	for (unsigned i = 0; i < 4; i++)
		wrs[i] = (struct ibv_recv_wr){
		    .wr_id = i, .sg_list = &sge, .num_sge = 1, .next = i < 3 ? &wrs[i + 1] : NULL};
	CHECK_EQ(ibv_post_recv(a, wrs, &bad), ENOMEM);
	CHECK(bad == &wrs[3]);
	CHECK_EQ(rq_posted(), 9);

	post_send(b, IBV_WR_SEND); /* consumes one of a's */
	wait_wc(IBV_WC_RECV);
	CHECK_EQ(rq_posted(), 8);

	/* an SRQ: posted, resized, consumed, destroyed with WQEs still posted */
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(dev.pd, &sa);
	CHECK_PTR(srq);
	struct ibv_qp *s = rc_qp(srq), *t = rc_qp(NULL);
	swvt_pair_connect(s, t);
	post_recv(NULL, srq, 3);
	CHECK_EQ(rq_posted(), 11);
	struct ibv_srq_attr ra = {.max_wr = 16};
	CHECK_OK(ibv_modify_srq(srq, &ra, IBV_SRQ_MAX_WR));
	CHECK_EQ(rq_posted(), 11);
	post_send(t, IBV_WR_SEND);
	wait_wc(IBV_WC_RECV);
	CHECK_EQ(rq_posted(), 10);
	wait_wc(IBV_WC_SEND);
	CHECK_OK(ibv_destroy_qp(s));
	CHECK_OK(ibv_destroy_qp(t));
	CHECK_OK(ibv_destroy_srq(srq));
	CHECK_EQ(rq_posted(), 8);

	/* ERR flushes a's 7 (each a completion); RESET drops b's 1 */
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(a, &qa, IBV_QP_STATE));
	for (unsigned i = 0; i < 7; i++)
		CHECK_EQ(swvt_poll_one(cq).status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(rq_posted(), 1);
	qa.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(b, &qa, IBV_QP_STATE));
	CHECK_EQ(rq_posted(), 0);

	/* a QP destroyed with receives posted */
	struct ibv_qp *c = rc_qp(NULL);
	post_recv(c, NULL, 2);
	CHECK_EQ(rq_posted(), 2);
	CHECK_OK(ibv_destroy_qp(c));
	CHECK_EQ(rq_posted(), 0);
}

int main(void)
{
	/* before the first device opens: the hand-back is for traffic from sockets */
	CHECK_OK(setenv("SWVERBS_SHM", "0", 1));
	dev = swvt_dev_open();
	cq = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	CHECK_PTR(cq);
	mr =
	    swvt_reg_buf(dev.pd, 16384,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_qp *a = rc_qp(NULL), *b = rc_qp(NULL);
	swvt_pair_connect(a, b);

	swv_progress_test_norx(pr(), true);
	swv_progress_test_lease(pr(), LEASE_NS);
	test_handback(a, b);
	swv_progress_test_lease(pr(), SWV_PROGRESS_LEASE_NS);
	swv_progress_test_norx(pr(), false);
	test_rq_posted(a, b);

	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_qp(b));
	CHECK_OK(ibv_destroy_cq(cq));
	swvt_dereg_buf(mr);
	swvt_dev_close(&dev);
	printf("ok\n");
	return 0;
}
