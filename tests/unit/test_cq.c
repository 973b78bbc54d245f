/* CQ rings, notification, completion channels, overflow, resize and the
 * destroy-waits-for-acks rule. */
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "check.h"
#include "core/context.h"
#include "core/cq.h"

static struct ibv_context *ctx;

static void push_n(struct ibv_cq *cq, int n, uint64_t base, bool solicited)
{
	for (int i = 0; i < n; i++) {
		struct ibv_wc wc = {.wr_id = base + (uint64_t)i, .status = IBV_WC_SUCCESS};
		CHECK_OK(swv_cq_push(to_swv_cq(cq), &wc, solicited));
	}
}

static bool readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1;
}

static void test_create_args(void)
{
	struct ibv_device_attr da;
	CHECK_OK(ibv_query_device(ctx, &da));
	errno = 0;
	CHECK(ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL);
	CHECK(ibv_create_cq(ctx, -1, NULL, NULL, 0) == NULL && errno == EINVAL);
	CHECK(ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0) == NULL && errno == EINVAL);
	CHECK(ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors) == NULL && errno == EINVAL);
	CHECK(ibv_create_cq(ctx, 4, NULL, NULL, -1) == NULL && errno == EINVAL);
	CHECK(ibv_create_cq(NULL, 4, NULL, NULL, 0) == NULL && errno == EINVAL);
	struct ibv_cq *big = ibv_create_cq(ctx, da.max_cqe, NULL, NULL, 0);
	CHECK_PTR(big);
	CHECK(big->cqe >= da.max_cqe);
	CHECK_OK(ibv_destroy_cq(big));
	CHECK_EQ(ibv_destroy_cq(NULL), EINVAL);
}

static void test_ring(void)
{
	int ctxv = 7;
	struct ibv_cq *cq = ibv_create_cq(ctx, 5, &ctxv, NULL, 0);
	CHECK_PTR(cq);
	CHECK(cq->cqe >= 5);
	CHECK(cq->context == ctx && cq->cq_context == &ctxv && cq->channel == NULL);
	struct ibv_wc wc[16];
	CHECK_EQ(ibv_poll_cq(cq, 16, wc), 0);

	/* FIFO order across wrap-around. */
	uint64_t next_push = 0, next_poll = 0;
	for (int round = 0; round < 20; round++) {
		int k = 1 + round % 5;
		push_n(cq, k, next_push, false);
		next_push += (uint64_t)k;
		int got = ibv_poll_cq(cq, 3, wc);
		for (int i = 0; i < got; i++)
			CHECK_EQ(wc[i].wr_id, next_poll++);
		got = ibv_poll_cq(cq, 16, wc);
		for (int i = 0; i < got; i++)
			CHECK_EQ(wc[i].wr_id, next_poll++);
	}
	CHECK_EQ(next_poll, next_push);

	/* Overflow: exactly cqe entries fit, the next is refused, nothing is lost. */
	int cap = cq->cqe;
	push_n(cq, cap, 1000, false);
	struct ibv_wc extra = {.wr_id = 1};
	CHECK_EQ(swv_cq_push(to_swv_cq(cq), &extra, false), ENOSPC);
	CHECK(to_swv_cq(cq)->overflow);
	CHECK_EQ(ibv_poll_cq(cq, 16, wc), cap);
	CHECK_EQ(wc[cap - 1].wr_id, 1000 + (uint64_t)cap - 1);
	CHECK_EQ(ibv_poll_cq(cq, -1, wc), -1);
	CHECK_OK(ibv_destroy_cq(cq));
}

static void test_resize(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK_PTR(cq);
	push_n(cq, 3, 0, false);
	struct ibv_wc wc[64];
	CHECK_EQ(ibv_poll_cq(cq, 1, wc), 1); /* head moves so the copy must unwrap */
	push_n(cq, 2, 3, false);
	CHECK_OK(ibv_resize_cq(cq, 40));
	CHECK(cq->cqe >= 40);
	push_n(cq, 30, 5, false);
	CHECK_EQ(ibv_poll_cq(cq, 64, wc), 34);
	for (int i = 0; i < 34; i++)
		CHECK_EQ(wc[i].wr_id, (uint64_t)i + 1);
	/* Shrink below what is queued: refused, entries kept. */
	push_n(cq, 10, 100, false);
	CHECK_EQ(ibv_resize_cq(cq, 4), EINVAL);
	CHECK_EQ(ibv_resize_cq(cq, 0), EINVAL);
	CHECK_EQ(ibv_resize_cq(cq, (1 << 20) + 1), EINVAL);
	CHECK_OK(ibv_resize_cq(cq, 10));
	CHECK_EQ(ibv_poll_cq(cq, 64, wc), 10);
	CHECK_EQ(wc[9].wr_id, 109);
	CHECK_OK(ibv_destroy_cq(cq));
}

static void test_channel(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK_PTR(ch);
	CHECK(ch->context == ctx && ch->fd >= 0);
	int tag = 3;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, &tag, ch, 0);
	CHECK_PTR(cq);
	CHECK(cq->channel == ch);
	CHECK_EQ(ibv_destroy_comp_channel(ch), EBUSY);
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK_OK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK));

	struct ibv_cq *ev_cq;
	void *ev_ctx;
	struct ibv_wc wc[16];
	/* Not armed: no event. */
	push_n(cq, 1, 0, false);
	CHECK(!readable(ch->fd));
	errno = 0;
	CHECK_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
	CHECK_EQ(errno, EAGAIN);
	/* Armed: exactly one event for several completions. */
	CHECK_OK(ibv_req_notify_cq(cq, 0));
	push_n(cq, 3, 1, false);
	CHECK(readable(ch->fd));
	CHECK_OK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
	CHECK(ev_cq == cq && ev_ctx == &tag);
	CHECK(!readable(ch->fd));
	ibv_ack_cq_events(cq, 1);
	CHECK_EQ(ibv_poll_cq(cq, 16, wc), 4);

	/* Solicited only: unsolicited completions do not fire, a solicited one does. */
	CHECK_OK(ibv_req_notify_cq(cq, 1));
	push_n(cq, 2, 10, false);
	CHECK(!readable(ch->fd));
	push_n(cq, 1, 12, true);
	CHECK(readable(ch->fd));
	CHECK_OK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
	/* An "any" arm is not narrowed by a later solicited-only arm. */
	CHECK_OK(ibv_req_notify_cq(cq, 0));
	CHECK_OK(ibv_req_notify_cq(cq, 1));
	push_n(cq, 1, 13, false);
	CHECK_OK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
	ibv_ack_cq_events(cq, 2);
	CHECK_EQ(ibv_poll_cq(cq, 16, wc), 4);

	/* Two CQs on one channel: events come back per CQ. */
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 4, NULL, ch, 0);
	CHECK_PTR(cq2);
	CHECK_OK(ibv_req_notify_cq(cq, 0));
	CHECK_OK(ibv_req_notify_cq(cq2, 0));
	push_n(cq2, 1, 0, false);
	push_n(cq, 1, 0, false);
	CHECK_OK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
	CHECK(ev_cq == cq2 && ev_ctx == NULL);
	CHECK_OK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
	CHECK(ev_cq == cq);
	ibv_ack_cq_events(cq, 1);
	ibv_ack_cq_events(cq2, 1);

	/* A destroyed CQ's undelivered event is withdrawn, never returned later. */
	CHECK_OK(ibv_req_notify_cq(cq2, 0));
	push_n(cq2, 1, 0, false);
	CHECK(readable(ch->fd));
	CHECK_OK(ibv_destroy_cq(cq2));
	errno = 0;
	CHECK_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
	CHECK_EQ(errno, EAGAIN);

	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_destroy_comp_channel(ch));
	CHECK_EQ(ibv_destroy_comp_channel(NULL), EINVAL);
}

/* destroy_cq waits for the acks of events handed out; a blocked get_cq_event wakes. */
static struct ibv_cq *ack_cq;
static _Atomic int acked;

static void *late_acker(void *arg)
{
	usleep(100 * 1000);
	atomic_store(&acked, 1);
	ibv_ack_cq_events(ack_cq, 1);
	return NULL;
}

static void *pusher(void *arg)
{
	usleep(50 * 1000);
	push_n(arg, 1, 77, false);
	return NULL;
}

static void test_destroy_waits_for_ack(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK_PTR(ch);
	ack_cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	CHECK_PTR(ack_cq);
	CHECK_OK(ibv_req_notify_cq(ack_cq, 0));

	/* Blocking get (default fd mode) returns once a completion arrives. */
	pthread_t pt;
	CHECK_OK(pthread_create(&pt, NULL, pusher, ack_cq));
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK_OK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
	CHECK(ev_cq == ack_cq);
	pthread_join(pt, NULL);

	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, late_acker, NULL));
	CHECK_OK(ibv_destroy_cq(ack_cq)); /* must block until the ack */
	CHECK_EQ(atomic_load(&acked), 1);
	pthread_join(t, NULL);
	CHECK_OK(ibv_destroy_comp_channel(ch));
}

static void test_users_busy(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK_PTR(cq);
	atomic_fetch_add(&to_swv_cq(cq)->users, 1); /* as a QP would */
	CHECK_EQ(ibv_destroy_cq(cq), EBUSY);
	atomic_fetch_sub(&to_swv_cq(cq)->users, 1);
	CHECK_OK(ibv_destroy_cq(cq));
}

/* Concurrent producers and one consumer: nothing lost, nothing duplicated. */
enum { PROD = 3, PER = 20000 };
static void *producer(void *arg)
{
	struct ibv_cq *cq = ((void **)arg)[0];
	uint64_t id = (uint64_t)(uintptr_t)((void **)arg)[1];
	for (int i = 0; i < PER;) {
		struct ibv_wc wc = {.wr_id = id << 32 | (uint64_t)i};
		if (swv_cq_push(to_swv_cq(cq), &wc, false) == 0)
			i++;
	}
	return NULL;
}

static void test_concurrent(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK_PTR(cq);
	pthread_t th[PROD];
	void *args[PROD][2];
	for (int i = 0; i < PROD; i++) {
		args[i][0] = cq;
		args[i][1] = (void *)(uintptr_t)i;
		CHECK_OK(pthread_create(&th[i], NULL, producer, args[i]));
	}
	uint32_t next[PROD] = {0};
	int total = 0;
	struct ibv_wc wc[32];
	while (total < PROD * PER) {
		int n = ibv_poll_cq(cq, 32, wc);
		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			unsigned p = (unsigned)(wc[i].wr_id >> 32);
			CHECK(p < PROD);
			CHECK_EQ((uint32_t)wc[i].wr_id, next[p]); /* per-producer FIFO */
			next[p]++;
		}
		total += n;
	}
	for (int i = 0; i < PROD; i++)
		pthread_join(th[i], NULL);
	CHECK_OK(ibv_destroy_cq(cq));
}

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK_PTR(l);
	ctx = ibv_open_device(l[0]);
	CHECK_PTR(ctx);
	test_create_args();
	test_ring();
	test_resize();
	test_channel();
	test_destroy_waits_for_ack();
	test_users_busy();
	test_concurrent();
	CHECK_OK(ibv_close_device(ctx));
	ibv_free_device_list(l);
	printf("test_cq: OK\n");
	return 0;
}
