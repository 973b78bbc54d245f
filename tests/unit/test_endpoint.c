/* UDP endpoints: exchange, batching, truncation, dead peers, argument checks. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "link/endpoint.h"

#define NPKT 64

static uint8_t bufs[NPKT][SWV_EP_MAX_DGRAM];
static struct swv_rx_pkt pkts[NPKT];

static void reset_pkts(void)
{
	for (int i = 0; i < NPKT; i++) {
		memset(&pkts[i], 0, sizeof(pkts[i]));
		pkts[i].buf = bufs[i];
	}
}

static int send_seq(struct swv_endpoint *from, const struct sockaddr_in *dst, uint32_t seq,
		    size_t len)
{
	static uint8_t payload[65536];
	struct iovec iov[2];

	/* Two fragments, like header + payload. */
	for (size_t i = 0; i < len; i++)
		payload[i] = (uint8_t)(seq + i);
	memcpy(payload, &seq, sizeof(seq));
	iov[0].iov_base = payload;
	iov[0].iov_len = len < 4 ? len : 4;
	iov[1].iov_base = payload + iov[0].iov_len;
	iov[1].iov_len = len - iov[0].iov_len;
	return swv_ep_send(from, dst, iov, 2);
}

static void check_pkt(const struct swv_rx_pkt *p, uint32_t seq, size_t len)
{
	uint32_t got;
	CHECK_EQ(p->len, len);
	memcpy(&got, p->buf, 4);
	CHECK_EQ(got, seq);
	for (size_t i = 4; i < len; i++)
		CHECK_EQ(p->buf[i], (uint8_t)(seq + i));
}

/* Receive exactly `want` packets (loopback delivers synchronously, but be patient). */
static int recv_n(struct swv_endpoint *ep, int want)
{
	int got = 0;
	for (int spins = 0; got < want && spins < 1000; spins++) {
		int r = swv_ep_recv_batch(ep, pkts + got, want - got);
		CHECK(r >= 0);
		got += r;
		if (!r)
			usleep(1000);
	}
	return got;
}

static void test_open(struct swv_endpoint *a, struct swv_endpoint *b)
{
	struct in_addr lo = {htonl(INADDR_LOOPBACK)};
	CHECK_OK(swv_ep_open(a, lo, NULL));
	CHECK_OK(swv_ep_open(b, lo, NULL));
	CHECK(a->port != 0 && b->port != 0 && a->port != b->port);
	CHECK_EQ(a->addr.s_addr, lo.s_addr);
	CHECK(fcntl(a->fd, F_GETFL) & O_NONBLOCK);
	CHECK(fcntl(a->fd, F_GETFD) & FD_CLOEXEC);

	/* Buffers were enlarged as far as allowed (the kernel reports double). */
	long rmem_max = 0;
	FILE *f = fopen("/proc/sys/net/core/rmem_max", "r");
	if (f) {
		CHECK(fscanf(f, "%ld", &rmem_max) == 1);
		fclose(f);
	}
	int rcv = 0;
	socklen_t sl = sizeof(rcv);
	CHECK(getsockopt(a->fd, SOL_SOCKET, SO_RCVBUF, &rcv, &sl) == 0);
	long floor = rmem_max < (4 << 20) ? rmem_max : (4 << 20);
	CHECK(rcv >= floor);

	/* Nothing queued: 0, not an error. */
	reset_pkts();
	CHECK_EQ(swv_ep_recv_batch(b, pkts, NPKT), 0);

	/* Binding an address that is not ours fails cleanly and leaves a closed ep. */
	struct swv_endpoint c;
	struct in_addr far;
	inet_pton(AF_INET, "203.0.113.77", &far);
	CHECK(swv_ep_open(&c, far, NULL) != 0);
	CHECK(!c.is_open);
	swv_ep_close(&c);
}

static void test_exchange(struct swv_endpoint *a, struct swv_endpoint *b)
{
	struct sockaddr_in dst = swv_ep_sockaddr(b);

	for (uint32_t i = 0; i < 10; i++)
		CHECK_OK(send_seq(a, &dst, i, 100 + i));
	reset_pkts();
	CHECK_EQ(recv_n(b, 10), 10);
	for (uint32_t i = 0; i < 10; i++) {
		check_pkt(&pkts[i], i, 100 + i);
		CHECK_EQ(pkts[i].src.sin_family, AF_INET);
		CHECK_EQ(ntohs(pkts[i].src.sin_port), a->port);
		CHECK_EQ(pkts[i].src.sin_addr.s_addr, a->addr.s_addr);
	}
	CHECK_EQ(swv_ep_recv_batch(b, pkts, NPKT), 0);

	/* Full-size datagram and an empty one both pass. */
	CHECK_OK(send_seq(a, &dst, 77, SWV_EP_MAX_DGRAM));
	struct iovec empty = {NULL, 0};
	CHECK_OK(swv_ep_send(a, &dst, &empty, 1));
	reset_pkts();
	CHECK_EQ(recv_n(b, 2), 2);
	check_pkt(&pkts[0], 77, SWV_EP_MAX_DGRAM);
	CHECK_EQ(pkts[1].len, 0);
}

static void test_batch(struct swv_endpoint *a, struct swv_endpoint *b)
{
	struct sockaddr_in dst = swv_ep_sockaddr(b);
	const int total = 150;

	for (int i = 0; i < total; i++)
		CHECK_OK(send_seq(a, &dst, (uint32_t)i, 64));
	/* n caps each call; order is preserved across calls. */
	int seen = 0;
	reset_pkts();
	int r = swv_ep_recv_batch(b, pkts, 5);
	CHECK_EQ(r, 5);
	for (int i = 0; i < r; i++)
		check_pkt(&pkts[i], (uint32_t)seen++, 64);
	while (seen < total) {
		reset_pkts();
		r = swv_ep_recv_batch(b, pkts, NPKT);
		CHECK(r > 0 && r <= NPKT);
		for (int i = 0; i < r; i++)
			check_pkt(&pkts[i], (uint32_t)seen++, 64);
	}
	CHECK_EQ(swv_ep_recv_batch(b, pkts, NPKT), 0);
}

static void test_truncation(struct swv_endpoint *a, struct swv_endpoint *b)
{
	struct sockaddr_in dst = swv_ep_sockaddr(b);
	uint64_t trunc0 = b->rx_truncated;

	/* Oversized datagrams in between, at the start and at the end of a batch. */
	CHECK_OK(send_seq(a, &dst, 1000, SWV_EP_MAX_DGRAM + 1));
	CHECK_OK(send_seq(a, &dst, 1, 200));
	CHECK_OK(send_seq(a, &dst, 1001, 20000));
	CHECK_OK(send_seq(a, &dst, 1002, 60000));
	CHECK_OK(send_seq(a, &dst, 2, 300));
	CHECK_OK(send_seq(a, &dst, 3, 8));
	CHECK_OK(send_seq(a, &dst, 1003, SWV_EP_MAX_DGRAM + 100));
	reset_pkts();
	int got = recv_n(b, 3);
	CHECK_EQ(got, 3);
	check_pkt(&pkts[0], 1, 200);
	check_pkt(&pkts[1], 2, 300);
	check_pkt(&pkts[2], 3, 8);
	CHECK_EQ(swv_ep_recv_batch(b, pkts, NPKT), 0);
	CHECK_EQ(b->rx_truncated - trunc0, 4);
}

static void test_dead_peer(struct swv_endpoint *a, struct swv_endpoint *b)
{
	struct in_addr lo = {htonl(INADDR_LOOPBACK)};
	struct swv_endpoint c;
	CHECK_OK(swv_ep_open(&c, lo, NULL));
	struct sockaddr_in dead = swv_ep_sockaddr(&c);
	swv_ep_close(&c);
	CHECK(!c.is_open);
	swv_ep_close(&c); /* idempotent */

	/* Sending to a closed port never blocks; the loss may or may not be reported. */
	int rc = send_seq(a, &dead, 5, 50);
	CHECK(rc == 0 || rc == ECONNREFUSED);

	/* Make the kernel report ICMP port unreachable on this unconnected socket, the
	 * way it does for connected ones, and check reception survives it. */
	int on = 1;
	CHECK(setsockopt(a->fd, IPPROTO_IP, IP_RECVERR, &on, sizeof(on)) == 0);
	rc = send_seq(a, &dead, 6, 50);
	CHECK(rc == 0 || rc == ECONNREFUSED);
	struct pollfd pfd = {.fd = a->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 2000) == 1);
	CHECK(pfd.revents & POLLERR); /* the error is really pending */

	struct sockaddr_in dst = swv_ep_sockaddr(a);
	CHECK_OK(send_seq(b, &dst, 7, 70));
	CHECK_OK(send_seq(b, &dst, 8, 80));
	reset_pkts();
	CHECK_EQ(recv_n(a, 2), 2);
	check_pkt(&pkts[0], 7, 70);
	check_pkt(&pkts[1], 8, 80);
	/* Nothing left pending: no error, no error-queue entry, no data. */
	CHECK_EQ(swv_ep_recv_batch(a, pkts, NPKT), 0);
	pfd.revents = 0;
	CHECK_EQ(poll(&pfd, 1, 0), 0);

	/* An error alone (no data behind it) is swallowed too. */
	rc = send_seq(a, &dead, 9, 50);
	CHECK(rc == 0 || rc == ECONNREFUSED);
	CHECK(poll(&pfd, 1, 2000) == 1);
	CHECK_EQ(swv_ep_recv_batch(a, pkts, NPKT), 0);
	CHECK_EQ(poll(&pfd, 1, 0), 0);
	on = 0;
	CHECK(setsockopt(a->fd, IPPROTO_IP, IP_RECVERR, &on, sizeof(on)) == 0);
}

static void test_args(struct swv_endpoint *a)
{
	struct sockaddr_in dst = swv_ep_sockaddr(a);
	uint8_t x = 0;
	struct iovec iov = {&x, 1};
	struct swv_endpoint z;

	CHECK_EQ(swv_ep_open(NULL, dst.sin_addr, NULL), EINVAL);
	CHECK_EQ(swv_ep_send(NULL, &dst, &iov, 1), EINVAL);
	CHECK_EQ(swv_ep_send(a, NULL, &iov, 1), EINVAL);
	CHECK_EQ(swv_ep_send(a, &dst, NULL, 1), EINVAL);
	CHECK_EQ(swv_ep_send(a, &dst, &iov, 0), EINVAL);
	CHECK_EQ(swv_ep_send(a, &dst, &iov, -1), EINVAL);
	reset_pkts();
	CHECK_EQ(swv_ep_recv_batch(NULL, pkts, 1), -EINVAL);
	CHECK_EQ(swv_ep_recv_batch(a, NULL, 1), -EINVAL);
	CHECK_EQ(swv_ep_recv_batch(a, pkts, 0), -EINVAL);
	pkts[0].buf = NULL;
	CHECK_EQ(swv_ep_recv_batch(a, pkts, 1), -EINVAL);
	CHECK_EQ(swv_ep_flush_delayed(NULL, 0), 0);
	CHECK_EQ(swv_ep_flush_delayed(a, 0), 0); /* no injector */

	/* A zeroed endpoint is closed: close is a no-op (must not close fd 0). */
	memset(&z, 0, sizeof(z));
	bool fd0_open = fcntl(0, F_GETFD) != -1;
	swv_ep_close(&z);
	CHECK_EQ(fcntl(0, F_GETFD) != -1, fd0_open);
	reset_pkts();
	CHECK_EQ(swv_ep_send(&z, &dst, &iov, 1), EINVAL);
	CHECK_EQ(swv_ep_recv_batch(&z, pkts, 1), -EBADF);
	swv_ep_close(NULL);
}

/* Any thread may send: four senders, one receiver draining concurrently. */
struct sender {
	struct swv_endpoint *ep;
	struct sockaddr_in dst;
	uint32_t id;
};

#define PER_THREAD 500

static void *sender_main(void *arg)
{
	struct sender *s = arg;
	for (uint32_t i = 0; i < PER_THREAD; i++) {
		uint32_t v[2] = {s->id, i};
		struct iovec iov = {v, sizeof(v)};
		int rc;
		while ((rc = swv_ep_send(s->ep, &s->dst, &iov, 1)) == EAGAIN || rc == ENOBUFS)
			usleep(100);
		CHECK_OK(rc);
	}
	return NULL;
}

static void test_threads(struct swv_endpoint *a, struct swv_endpoint *b)
{
	pthread_t t[4];
	struct sender s[4];
	uint32_t next[4] = {0};
	int total = 0;

	for (uint32_t i = 0; i < 4; i++) {
		s[i] = (struct sender){a, swv_ep_sockaddr(b), i};
		CHECK(pthread_create(&t[i], NULL, sender_main, &s[i]) == 0);
	}
	for (int idle = 0; total < 4 * PER_THREAD && idle < 2000;) {
		reset_pkts();
		int r = swv_ep_recv_batch(b, pkts, NPKT);
		CHECK(r >= 0);
		if (!r) {
			idle++;
			usleep(500);
			continue;
		}
		idle = 0;
		for (int i = 0; i < r; i++) {
			uint32_t v[2];
			CHECK_EQ(pkts[i].len, sizeof(v));
			memcpy(v, pkts[i].buf, sizeof(v));
			CHECK(v[0] < 4);
			/* Per-sender order holds on loopback. */
			CHECK_EQ(v[1], next[v[0]]);
			next[v[0]]++;
			total++;
		}
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	/* Exact unless the receive buffer could not be enlarged (unprivileged, small
	 * rmem_max), where loopback may legitimately drop under a burst. */
	int rcv = 0;
	socklen_t sl = sizeof(rcv);
	CHECK(getsockopt(b->fd, SOL_SOCKET, SO_RCVBUF, &rcv, &sl) == 0);
	if (rcv >= (2 << 20))
		CHECK_EQ(total, 4 * PER_THREAD);
	else
		printf("test_endpoint: small SO_RCVBUF (%d): %d of %d received\n", rcv, total,
		       4 * PER_THREAD);
}

int main(void)
{
	struct swv_endpoint a, b;

	test_open(&a, &b);
	test_exchange(&a, &b);
	test_batch(&a, &b);
	test_truncation(&a, &b);
	test_dead_peer(&a, &b);
	test_args(&a);
	test_threads(&a, &b);
	swv_ep_close(&a);
	swv_ep_close(&b);
	printf("test_endpoint: ok\n");
	return 0;
}
