/*
 * SRQ behaviour the sender can see, and the SRQ's async events, two processes:
 *  1. an empty SRQ makes the responder RNR-NAK: the send stays pending (infinite
 *     rnr_retry) until the receiver posts, then completes and the data arrives;
 *  2. with rnr_retry 0 the same send fails with IBV_WC_RNR_RETRY_EXC_ERR and nothing
 *     is received;
 *  3. the limit event: armed at 4 with 6 posted, it comes exactly when a receive leaves
 *     3, once, naming the SRQ; the limit reads back 0 (disarmed); re-armed, it comes
 *     again at the next crossing;
 *  4. a receiving QP moved to ERR reports Last WQE Reached and flushes nothing from
 *     the SRQ: the WQEs posted before stay for the other QP, which receives into them
 *     in order.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_srq_util.h"

#define LEN  2500 /* three packets at MTU 1024 */
#define SLOT 4096

static void check_data(struct swvt *t, uint64_t wr_id, uint32_t seed)
{
	size_t bad = swvt_verify(t->buf + wr_id * SLOT, LEN, seed);
	if (bad != (size_t)-1) {
		fprintf(stderr, "wr %llu: byte %zu differs\n", (unsigned long long)wr_id, bad);
		exit(1);
	}
}

static void sender(struct swvt *t, void *arg)
{
	struct srqt s;
	const uint8_t rnr[2] = {7, 0}; /* QP 0 waits forever, QP 1 gives up at once */
	struct ibv_wc wc;

	srqt_create(&s, t, 2, false, 0);
	srqt_connect(&s, rnr);
	for (uint32_t k = 0; k < 16; k++)
		swvt_fill(t->buf + (uint64_t)k * SLOT, LEN, 0x700 + k);

	/* 1. RNR, then recovery once the receiver posts */
	srqt_send(&s, 0, 100, 0, LEN);
	swvt_expect_empty(s.scq, 300);
	swvt_send_u64(t, 1); /* "still pending" */
	swvt_poll_n(s.scq, &wc, 1, 10000);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 100);
	swvt_barrier(t);

	/* 2. no RNR retries allowed */
	srqt_send(&s, 1, 101, SLOT, LEN);
	swvt_poll_n(s.scq, &wc, 1, 10000);
	CHECK_WC(wc, IBV_WC_RNR_RETRY_EXC_ERR);
	CHECK_EQ(wc.wr_id, 101);
	swvt_barrier(t);

	/* 3. six sends, one at a time, for the limit checks */
	for (uint32_t k = 0; k < 6; k++) {
		CHECK_EQ(swvt_recv_u64(t), k); /* receiver ready for message k */
		srqt_send(&s, 0, 200 + k, (uint64_t)(2 + k) * SLOT, LEN);
		swvt_poll_n(s.scq, &wc, 1, 10000);
		CHECK_WC(wc, IBV_WC_SUCCESS);
	}
	swvt_barrier(t);

	/* 4. after the receiver's QP 1 went to ERR, three more on QP 0 */
	swvt_barrier(t);
	for (uint32_t k = 0; k < 3; k++)
		srqt_send(&s, 0, 300 + k, (uint64_t)(8 + k) * SLOT, LEN);
	struct ibv_wc w3[3];
	swvt_poll_n(s.scq, w3, 3, 10000);
	for (int k = 0; k < 3; k++)
		CHECK_WC(w3[k], IBV_WC_SUCCESS);
	swvt_barrier(t);
	srqt_destroy(&s);
}

static void receiver(struct swvt *t, void *arg)
{
	struct srqt s;
	struct ibv_wc wc;
	struct ibv_async_event ev;

	srqt_create(&s, t, 2, true, 16);
	srqt_connect(&s, NULL);

	/* 1. the SRQ is empty: the send must wait */
	CHECK_EQ(swvt_recv_u64(t), 1);
	swvt_expect_empty(s.rcq, 10);
	srqt_post(&s, 0, 0, SLOT);
	swvt_poll_n(s.rcq, &wc, 1, 10000);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc.qp_num, s.qp[0]->qp_num);
	CHECK_EQ(wc.wr_id, 0);
	CHECK_EQ(wc.byte_len, LEN);
	check_data(t, 0, 0x700);
	swvt_barrier(t);

	/* 2. the sender gave up: nothing arrived */
	swvt_barrier(t);
	swvt_expect_empty(s.rcq, 10);

	/* 3. limit 4 with 6 posted (wr 2..7) */
	for (uint64_t k = 2; k < 8; k++)
		srqt_post(&s, k, k * SLOT, SLOT);
	struct ibv_srq_attr lim = {.srq_limit = 4}, q;
	CHECK_OK(ibv_modify_srq(s.srq, &lim, IBV_SRQ_LIMIT));
	for (uint32_t k = 0; k < 6; k++) {
		swvt_send_u64(t, k);
		swvt_poll_n(s.rcq, &wc, 1, 10000);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.qp_num, s.qp[0]->qp_num);
		CHECK_EQ(wc.wr_id, 2 + k);
		check_data(t, wc.wr_id, 0x700 + 2 + k);
		/* left after this receive: 5 - k. The event is queued when the WQE is
		 * taken, before its completion, so it is there by now if it is due. */
		uint32_t left = 5 - k;
		bool due = left == 3 || left == 1;
		bool got = srqt_event(t, due ? 2000 : 0, &ev);
		if (got != due) {
			fprintf(stderr, "limit event %s with %u WQEs left\n",
				got ? "unexpected" : "missing", left);
			exit(1);
		}
		if (got) {
			CHECK_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
			CHECK(ev.element.srq == s.srq);
			CHECK_OK(ibv_query_srq(s.srq, &q));
			CHECK_EQ(q.srq_limit, 0); /* one-shot */
		}
		if (left == 2) { /* re-arm below the count: fires at the next receive */
			lim.srq_limit = 2;
			CHECK_OK(ibv_modify_srq(s.srq, &lim, IBV_SRQ_LIMIT));
		}
	}
	CHECK(!srqt_event(t, 0, &ev));
	swvt_barrier(t);

	/* 4. three WQEs posted, then QP 1 enters ERR: Last WQE Reached, no flush */
	for (uint64_t k = 8; k < 11; k++)
		srqt_post(&s, k, k * SLOT, SLOT);
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(s.qp[1], &err, IBV_QP_STATE));
	CHECK(srqt_event(t, 2000, &ev));
	CHECK_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
	CHECK(ev.element.qp == s.qp[1]);
	swvt_expect_empty(s.rcq, 50);
	swvt_barrier(t);
	struct ibv_wc w3[3];
	swvt_poll_n(s.rcq, w3, 3, 10000);
	for (int k = 0; k < 3; k++) {
		CHECK_WC(w3[k], IBV_WC_SUCCESS);
		CHECK_EQ(w3[k].qp_num, s.qp[0]->qp_num);
		CHECK_EQ(w3[k].wr_id, 8 + (uint64_t)k);
		check_data(t, w3[k].wr_id, 0x700 + 8 + (uint32_t)k);
	}
	CHECK(!srqt_event(t, 0, &ev));
	swvt_barrier(t);
	srqt_destroy(&s);
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.buf_size = 16 * SLOT;
	o.min_rnr_timer = 1;
	int rc = swvt_run(&o, receiver, sender, NULL);
	if (!rc)
		printf("test_srq_events: OK\n");
	return rc;
}
