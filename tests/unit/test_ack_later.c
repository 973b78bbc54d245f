/*
 * The ACK with the answer (docs/design.md): an application's pass that completes a
 * receive from a socket leaves the RC ACK pending; the QP's next request takes it out
 * in front of itself, in the same batch, else the next pass does, else the progress
 * thread when the lease ends.
 *
 * One context over UDP (SWVERBS_SHM=0: only a socket's packets are answered later),
 * QPs a <-> b, the progress thread kept from receiving (swv_progress_test_norx), so
 * only the test's poll loops receive, and the lease taken for the loop before each
 * exchange (whether a loop's passes come close enough together to take it depends on
 * the machine).
 *  - answer: b's RECV is polled with its ACK still pending; b's own SEND then takes
 *    it out (pending no more right after ibv_post_send), and a sees both: its SEND
 *    completion first (the ACK left in front of the answer, as a device's does: a
 *    program polling one CQ learns its SEND is done before the reply to it has come),
 *    then its RECV; b's SEND completes by a's ACK, which a's next pass sent.
 *  - bound: the application stops calling the library after its RECV; the ACK still
 *    leaves, with no call from the test (the thread sends it when the lease ends, or
 *    earlier when a's timer wakes it: a's tail-loss probe, 250 us, comes before the
 *    test's 20 ms lease ends, where the library's own lease, 100 us, comes first).
 *  - a QP destroyed with its ACK pending, or moved to ERR or RESET: the ACK leaves
 *    first, and the peer's SEND completes successfully (under ASan: a later pass
 *    touches nothing freed).
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/context.h"
#include "core/qp.h"
#include "inproc.h"
#include "transport/responder.h"
#include "util/clock.h"

#define HANG_NS	     60000000000ull /* hang guard */
#define LEASE_NS     10000000000ull
#define SHORT_LEASE  20000000ull

static struct swvt_dev dev;
static struct ibv_cq *cq;
static struct ibv_mr *mr;

static struct swv_progress *pr(void)
{
	return &to_swv_ctx(dev.ctx)->progress;
}

static bool ack_pending(struct ibv_qp *ibqp)
{
	struct swv_qp *qp = to_swv_qp(ibqp);
	pthread_mutex_lock(&qp->lock);
	bool p = qp->resp->ack_pending;
	pthread_mutex_unlock(&qp->lock);
	return p;
}

/* b's ACK is still pending, unless the thread ran an iteration since epoch e0 (each
 * begins by sending what was left for later, so it may have sent it: legitimately).
 * The thread bumps 'epoch' before 'seq' turns even, so a flush that happened before
 * the look at the ACK shows in one of the two read after it. */
static bool left_for_later(struct ibv_qp *b, uint64_t e0)
{
	if (ack_pending(b))
		return true;
	uint32_t seq = atomic_load(&pr()->seq);
	return (seq & 1) || atomic_load(&pr()->epoch) != e0;
}

static struct ibv_qp *rc_qp(void)
{
	struct ibv_qp_init_attr a = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 16, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(dev.pd, &a);
	CHECK_PTR(qp);
	swvt_pair_to_init(qp);
	return qp;
}

static void post_recv(struct ibv_qp *qp)
{
	struct ibv_sge sge = {(uintptr_t)mr->addr + 4096, 64, mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = qp->qp_num, .sg_list = &sge, .num_sge = 1}, *bad;
	CHECK_OK(ibv_post_recv(qp, &wr, &bad));
}

static void post_send(struct ibv_qp *qp)
{
	struct ibv_sge sge = {(uintptr_t)mr->addr, 8, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = qp->qp_num,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	CHECK_OK(ibv_post_send(qp, &wr, &bad));
}

/* Poll until a successful completion of opcode op for QP qp; *others counts the other
 * completions seen meanwhile (each successful). */
static void wait_wc(struct ibv_qp *qp, enum ibv_wc_opcode op, unsigned *others)
{
	struct ibv_wc wc;
	uint64_t start = swv_now_ns();
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0);
		if (n) {
			CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			if (wc.opcode == op && wc.qp_num == qp->qp_num)
				return;
			++*others;
		}
		CHECK(swv_now_ns() - start < HANG_NS);
	}
}

/* Poll until each wanted completion came once (successful, in any order), nothing
 * else; each one's 'seen' says when (1 for the first polled). */
struct want {
	struct ibv_qp *qp;
	enum ibv_wc_opcode op;
	unsigned seen;
};

static void wait_all(struct want *w, unsigned n)
{
	struct ibv_wc wc;
	uint64_t start = swv_now_ns();
	for (unsigned k = 0; k < n; k++)
		w[k].seen = 0;
	for (unsigned left = n; left;) {
		int got = ibv_poll_cq(cq, 1, &wc);
		CHECK(got >= 0);
		CHECK(swv_now_ns() - start < HANG_NS);
		if (!got)
			continue;
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		unsigned i = 0;
		while (i < n && (w[i].seen || w[i].qp->qp_num != wc.qp_num || w[i].op != wc.opcode))
			i++;
		CHECK(i < n); /* wanted, and not seen before */
		w[i].seen = n - --left;
	}
}

static void take_lease(uint64_t ns)
{
	atomic_store(&pr()->drive_until, swv_now_ns() + ns);
}

static void test_answer(struct ibv_qp *a, struct ibv_qp *b)
{
	unsigned others = 0;
	post_recv(b);
	post_recv(a);
	take_lease(LEASE_NS);
	uint64_t e0 = atomic_load(&pr()->epoch);
	post_send(a);
	wait_wc(b, IBV_WC_RECV, &others);
	CHECK(left_for_later(b, e0)); /* b's application learnt of the RECV first */
	post_send(b);
	CHECK(!ack_pending(b)); /* it left with b's SEND */
	/* a's RECV, a's SEND (b's ACK) and b's SEND (a's ACK, which a left pending for
	 * its next pass); b's ACK went in front of b's SEND, so a's SEND completes
	 * before a's RECV, and before b's SEND, which a acknowledges after both */
	struct want w[] = {{a, IBV_WC_RECV, 0}, {a, IBV_WC_SEND, 0}, {b, IBV_WC_SEND, 0}};
	wait_all(w, 3);
	CHECK_EQ(w[1].seen, 1u);
	CHECK_EQ(others, 0u);
	swv_progress_release(pr());
}

static void test_bound(struct ibv_qp *a, struct ibv_qp *b)
{
	unsigned others = 0;
	post_recv(b);
	take_lease(SHORT_LEASE);
	uint64_t e0 = atomic_load(&pr()->epoch);
	post_send(a);
	wait_wc(b, IBV_WC_RECV, &others);
	CHECK(left_for_later(b, e0));
	/* No more calls: the thread sends it when the lease has ended. */
	uint64_t start = swv_now_ns();
	while (ack_pending(b)) {
		CHECK(swv_now_ns() - start < HANG_NS);
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
	wait_wc(a, IBV_WC_SEND, &others);
	CHECK_EQ(others, 0u);
	swv_progress_release(pr());
}

/* b's ACK pending, then b destroyed, moved to ERR or to RESET: the ACK leaves first,
 * as a device's had left long before, so a's SEND completes successfully. */
enum gone { DESTROY, TO_ERR, TO_RESET };

static void test_gone(enum gone how)
{
	struct ibv_qp *a = rc_qp(), *b = rc_qp();
	unsigned others = 0;
	swvt_pair_connect(a, b);
	post_recv(b);
	take_lease(LEASE_NS);
	uint64_t e0 = atomic_load(&pr()->epoch);
	post_send(a);
	wait_wc(b, IBV_WC_RECV, &others);
	CHECK(left_for_later(b, e0));
	if (how == DESTROY) {
		CHECK_OK(ibv_destroy_qp(b));
	} else {
		struct ibv_qp_attr qa = {.qp_state = how == TO_ERR ? IBV_QPS_ERR : IBV_QPS_RESET};
		CHECK_OK(ibv_modify_qp(b, &qa, IBV_QP_STATE));
		CHECK(!ack_pending(b));
	}
	wait_wc(a, IBV_WC_SEND, &others);
	CHECK_EQ(others, 0u);
	swv_progress_release(pr());
	CHECK_OK(ibv_destroy_qp(a));
	if (how != DESTROY)
		CHECK_OK(ibv_destroy_qp(b));
}

int main(void)
{
	/* before the first device opens: only a socket's packets are answered later */
	CHECK_OK(setenv("SWVERBS_SHM", "0", 1));
	dev = swvt_dev_open();
	cq = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	CHECK_PTR(cq);
	mr = swvt_reg_buf(dev.pd, 16384, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp *a = rc_qp(), *b = rc_qp();
	swvt_pair_connect(a, b);

	swv_progress_test_norx(pr(), true);
	test_answer(a, b);
	test_bound(a, b);
	test_gone(DESTROY);
	test_gone(TO_ERR);
	test_gone(TO_RESET);
	swv_progress_test_norx(pr(), false);

	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_qp(b));
	CHECK_OK(ibv_destroy_cq(cq));
	swvt_dereg_buf(mr);
	swvt_dev_close(&dev);
	printf("ok\n");
	return 0;
}
