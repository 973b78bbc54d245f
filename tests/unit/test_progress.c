/* The progress thread with no QPs: start/stop, kicks (timed wake, one syscall per
 * sleep), sync, and the receive path's validation counters. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "core/context.h"
#include "core/qp.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "util/clock.h"
#include "wait.h"

static struct swv_context *ctx;

static uint64_t epoch(void)
{
	return atomic_load(&ctx->progress.epoch);
}

static void test_kick_timed(uint64_t delay_ns)
{
	/* The thread settles into an indefinite sleep and stays there: no busy loop. */
	CHECK(swvt_wait_eq(&ctx->progress.sleep_until, UINT64_MAX));
	uint64_t e0 = epoch();
	usleep(2000);
	CHECK_EQ(epoch(), e0);

	uint64_t t0 = swv_now_ns();
	swv_progress_kick(&ctx->progress, t0 + delay_ns);
	/* Woken at once by the eventfd; an iteration must then run at or after the
	 * deadline (immediately if the wake came late, else after a timed sleep). */
	CHECK(swvt_wait_at_least(&ctx->progress.last_iter_ns, t0 + delay_ns));
	CHECK(epoch() >= e0 + 1 || atomic_load(&ctx->progress.seq) & 1);
	/* Back to an indefinite sleep: the kick is consumed. */
	CHECK(swvt_wait_eq(&ctx->progress.sleep_until, UINT64_MAX));
	uint64_t e1 = epoch();
	usleep(5000);
	CHECK_EQ(epoch(), e1);
}

static void test_kick_coalesce(void)
{
	uint64_t w0 = atomic_load(&ctx->progress.wakeups);
	uint64_t d = swv_now_ns() + 200000000ull; /* 200 ms */
	swv_progress_kick(&ctx->progress, d);
	swv_progress_kick(&ctx->progress, d);	  /* same deadline: no second syscall */
	swv_progress_kick(&ctx->progress, d + 1); /* later deadline: nothing to do */
	CHECK_EQ(atomic_load(&ctx->progress.wakeups), w0 + 1);
	/* The thread now sleeps to d; an earlier kick must wake it again. */
	CHECK(swvt_wait_eq(&ctx->progress.sleep_until, d));
	swv_progress_kick(&ctx->progress, d - 100000000ull);
	CHECK_EQ(atomic_load(&ctx->progress.wakeups), w0 + 2);
	/* Kicks while the thread runs are picked up without a syscall (from itself). */
	usleep(300000);
}

static void *syncer(void *arg)
{
	for (int i = 0; i < 2000; i++) {
		swv_progress_sync(&ctx->progress);
		if (i % 16 == 0)
			swv_progress_kick(&ctx->progress, swv_now_ns());
	}
	return NULL;
}

static void test_sync(void)
{
	CHECK(!swv_progress_is_self(&ctx->progress));
	swv_progress_sync(&ctx->progress); /* sleeping thread: returns at once */
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		CHECK_OK(pthread_create(&th[i], NULL, syncer, NULL));
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
}

static void send_raw(int s, uint16_t port, const void *buf, size_t len)
{
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
	to.sin_addr = ctx->cfg->addr;
	CHECK_EQ(sendto(s, buf, len, 0, (struct sockaddr *)&to, sizeof(to)), (ssize_t)len);
}

static void test_rx_validation(void)
{
	struct swv_progress *pr = &ctx->progress;
	uint16_t port = ctx->ports[0]->ep.port;
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(s >= 0);

	uint64_t pk0 = atomic_load(&pr->rx_packets), mal0 = atomic_load(&pr->rx_malformed),
		 crc0 = atomic_load(&pr->rx_bad_crc), noqp0 = atomic_load(&pr->rx_no_qp);

	/* Garbage and a truncated packet: malformed. */
	send_raw(s, port, "hello", 5);
	uint8_t zeros[3] = {0};
	send_raw(s, port, zeros, sizeof(zeros));
	CHECK(swvt_wait_at_least(&pr->rx_malformed, mal0 + 2));

	/* A well-formed RC SEND_ONLY to a QPN of this socket with no QP: counted, dropped. */
	struct swv_pkt p = {.opcode = SWV_OP_RC | SWV_OP_SEND_ONLY,
			    .dqpn = swv_qpn_make(port, 17),
			    .psn = 5,
			    .paylen = 4};
	uint8_t pkt[SWV_MAX_HDR_LEN + 4 + 7];
	size_t h = swv_pkt_build_hdr(pkt, &p);
	CHECK(h > 0);
	memcpy(pkt + h, "data", 4);
	size_t t = swv_pkt_build_tail(pkt, h, pkt + h, 4, pkt + h + 4);
	CHECK(t > 0);
	send_raw(s, port, pkt, h + 4 + t);
	CHECK(swvt_wait_at_least(&pr->rx_no_qp, noqp0 + 1));

	/* The same packet addressed to another socket's QPN: misrouted, no QP. */
	p.dqpn = swv_qpn_make((uint16_t)(port + 1), 17);
	h = swv_pkt_build_hdr(pkt, &p);
	memcpy(pkt + h, "data", 4);
	t = swv_pkt_build_tail(pkt, h, pkt + h, 4, pkt + h + 4);
	send_raw(s, port, pkt, h + 4 + t);
	CHECK(swvt_wait_at_least(&pr->rx_no_qp, noqp0 + 2));

	/* Corrupt one payload byte: bad CRC. */
	pkt[h] ^= 1;
	send_raw(s, port, pkt, h + 4 + t);
	CHECK(swvt_wait_at_least(&pr->rx_bad_crc, crc0 + 1));

	CHECK(swvt_wait_at_least(&pr->rx_packets, pk0 + 5));
	CHECK_EQ(atomic_load(&pr->rx_malformed), mal0 + 2);
	CHECK_EQ(atomic_load(&pr->rx_no_qp), noqp0 + 2);
	CHECK_EQ(atomic_load(&pr->rx_bad_crc), crc0 + 1);
	close(s);
}

/* QPN table without traffic: alloc/free on fake QPs never reached by packets/timers. */
static void test_qpn_table(void)
{
	enum { N = 300 }; /* > one socket's 256 slots */
	static struct swv_qp qps[N], a, b, c;
	uint32_t qpn[N], qa, qb, qc;
	struct swv_endpoint *ep[N], *e;

	/* A freed QPN is not handed out again while fresh slots remain. */
	CHECK_OK(swv_ctx_qpn_alloc(ctx, &a, &qa, &e));
	CHECK_OK(swv_ctx_qpn_alloc(ctx, &b, &qb, &e));
	swv_ctx_qpn_free(ctx, &a, qa);
	CHECK_OK(swv_ctx_qpn_alloc(ctx, &c, &qc, &e));
	CHECK(qc != qa && qc != qb);
	swv_ctx_qpn_free(ctx, &b, qb);
	swv_ctx_qpn_free(ctx, &c, qc);
	CHECK(swv_list_empty(&ctx->qp_list));
	for (int i = 0; i < N; i++) {
		atomic_init(&qps[i].timer_deadline, 0);
		CHECK_OK(swv_ctx_qpn_alloc(ctx, &qps[i], &qpn[i], &ep[i]));
		CHECK_EQ(swv_qpn_port(qpn[i]), ep[i]->port);
		CHECK(qpn[i] <= 0xfffffe && qpn[i] > 1);
		CHECK(swv_ctx_qp_lookup(ctx, ep[i], qpn[i]) == &qps[i]);
		for (int j = 0; j < i; j++)
			CHECK(qpn[i] != qpn[j]);
	}
	CHECK_EQ(ctx->nports, 2);
	CHECK(ep[0] != ep[N - 1]);
	/* Wrong socket for a QPN: no match. */
	CHECK(swv_ctx_qp_lookup(ctx, ep[N - 1], qpn[0]) == NULL);
	swv_ctx_qpn_free(ctx, &qps[3], qpn[3]);
	CHECK(swv_ctx_qp_lookup(ctx, ep[3], qpn[3]) == NULL);
	for (int i = 0; i < N; i++)
		if (i != 3)
			swv_ctx_qpn_free(ctx, &qps[i], qpn[i]);
	CHECK(swv_list_empty(&ctx->qp_list));
}

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK_PTR(l);
	struct ibv_context *ib = ibv_open_device(l[0]);
	CHECK_PTR(ib);
	ctx = to_swv_ctx(ib);
	CHECK(ctx->progress.started);

	test_kick_timed(20000000ull); /* 20 ms */
	test_kick_timed(100000ull);   /* 100 us: needs sub-millisecond sleeps */
	test_kick_coalesce();
	test_sync();
	test_rx_validation();
	test_qpn_table();

	CHECK_OK(ibv_close_device(ib));
	/* Start/stop churn. */
	for (int i = 0; i < 30; i++) {
		ib = ibv_open_device(l[0]);
		CHECK_PTR(ib);
		swv_progress_kick(&to_swv_ctx(ib)->progress, swv_now_ns() + 1000);
		swv_progress_sync(&to_swv_ctx(ib)->progress);
		CHECK_OK(ibv_close_device(ib));
	}
	ibv_free_device_list(l);
	printf("test_progress: OK\n");
	return 0;
}
