/*
 * The intra-host link (src/link/shm.h, docs/design.md "The intra-host link").
 *
 *  1. Two contexts of this process: RC WRITEs, SENDs and READs between them go through
 *     the inboxes, byte for byte, and no datagram is sent on either port.
 *  2. The link's own checks: a record whose length claims more than the ring holds is
 *     dropped and counted, never read past; the same ring carries sound records
 *     afterwards, and a's traffic goes on.
 *  3. A destination without an inbox (a plain UDP socket) is routed to UDP, and a
 *     miss is remembered (no second lookup within SWV_SHM_MISS_TTL_NS).
 *  4. With SWVERBS_SHM=0 no port gets an inbox (checked in a child process, since the
 *     switch is read once per process).
 *  5. The backlog a requester's ACK timeout asks about (swv_ep_backlog): packets its
 *     live receiver has not taken yet count; once taken, or when the owner is dead,
 *     they do not (a dead peer must still end in RETRY_EXC_ERR).
 *  6. A ring-only send (swv_ep_send_ring, for packets without ICRC): its records say
 *     "unchecked", a plain send's do not, whatever the ring held before; towards a
 *     destination without an inbox it sends nothing and answers ENOTCONN.
 *  7. A UDP-only send (swv_ep_send_udp, the same run after that answer) takes UDP even
 *     towards a destination with an inbox: one datagram per packet at its socket, nothing
 *     in its ring; a run of the wrong shape is EINVAL, nothing sent.
 *  8. After inbox traffic the receiving progress thread polls for a while instead of
 *     sleeping (SWV_PROGRESS_SPIN_NS), then sleeps: over an idle 300 ms afterwards it
 *     uses a small part of a CPU (a thread that polled on would use most of one).
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "link/endpoint.h"
#include "link/shm.h"
#include "rcpair.h"
#include "rcpair_int.h"
#include "util/clock.h"

/* The queue depths these scenarios need; the buffer, access and QP state by default. */
static const struct swvt_rc_opts OPTS = {.cq_depth = 64, .max_wr = 32};

static void wait_wc(struct ibv_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc = swvt_rc_wait_wc(cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, op);
}

/* len bytes at off of s's buffer to (or, a READ, from) the same place of peer's. */
static void post(struct swvt_rc_side *s, enum ibv_wr_opcode op, uint32_t off, uint32_t len,
		 const struct swvt_rc_side *peer)
{
	swvt_rc_post(s, op, off, len, (uintptr_t)peer->buf + off, peer->mr->rkey, 0);
}

/* 1 */
static void test_traffic(struct swvt_rc_side *a, struct swvt_rc_side *b)
{
	struct swv_endpoint *ea = swvt_rc_ep(a), *eb = swvt_rc_ep(b);
	CHECK(ea->shm && eb->shm);
	uint64_t udp_a = atomic_load(&ea->udp_tx), udp_b = atomic_load(&eb->udp_tx);

	uint8_t *pa = a->mr->addr, *pb = b->mr->addr;
	swvt_rc_fill(pa, 20000, 1);
	post(a, IBV_WR_RDMA_WRITE, 0, 20000, b);
	wait_wc(a->cq, IBV_WC_RDMA_WRITE);
	CHECK(!memcmp(pa, pb, 20000));

	swvt_rc_fill(pb + 32768, 9000, 2);
	post(a, IBV_WR_RDMA_READ, 32768, 9000, b);
	wait_wc(a->cq, IBV_WC_RDMA_READ);
	CHECK(!memcmp(pa + 32768, pb + 32768, 9000));

	struct ibv_sge rs = {(uintptr_t)pb + 50000, 4000, b->mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 9, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK_OK(ibv_post_recv(b->qp, &rw, &rbad));
	swvt_rc_fill(pa + 50000, 4000, 3);
	post(a, IBV_WR_SEND, 50000, 4000, b);
	wait_wc(a->cq, IBV_WC_SEND);
	wait_wc(b->cq, IBV_WC_RECV);
	CHECK(!memcmp(pa + 50000, pb + 50000, 4000));

	struct swv_shm_stats sa, sb;
	swv_shm_get_stats(ea->shm, &sa);
	swv_shm_get_stats(eb->shm, &sb);
	CHECK(sa.tx_pkts > 0 && sb.tx_pkts > 0); /* requests one way, responses the other */
	CHECK(sa.rx_pkts > 0 && sb.rx_pkts > 0);
	CHECK_EQ(atomic_load(&ea->udp_tx), udp_a); /* not one datagram */
	CHECK_EQ(atomic_load(&eb->udp_tx), udp_b);
	CHECK_EQ(sb.rx_corrupt, 0);
}

/* 8 */
static uint64_t cpu_ns(clockid_t c)
{
	struct timespec ts;
	CHECK_OK(clock_gettime(c, &ts));
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void test_spin_ends(struct swvt_rc_side *a, struct swvt_rc_side *b)
{
	clockid_t cb = swvt_rc_progress_clock(b);
	for (int i = 0; i < 100; i++) { /* b's thread takes each WRITE from its inbox */
		post(a, IBV_WR_RDMA_WRITE, 0, 64, b);
		wait_wc(a->cq, IBV_WC_RDMA_WRITE);
	}
	/* Well past the spin: a window of wall time that a sleeping thread does not use. */
	struct timespec gap = {.tv_nsec = 20 * 1000000};
	nanosleep(&gap, NULL);
	uint64_t c0 = cpu_ns(cb), w0 = swv_now_ns();
	struct timespec idle = {.tv_nsec = 300 * 1000000};
	nanosleep(&idle, NULL);
	uint64_t used = cpu_ns(cb) - c0, wall = swv_now_ns() - w0;
	if (used * 10 >= wall)
		fprintf(stderr, "progress thread used %llu of %llu ns idle\n",
			(unsigned long long)used, (unsigned long long)wall);
	CHECK(used * 10 < wall);
}

/* 2: a third endpoint of this process writes nonsense into its ring of b's inbox. */
static void test_corrupt(struct swvt_rc_side *a, struct swvt_rc_side *b)
{
	struct swv_endpoint *eb = swvt_rc_ep(b), other;
	CHECK_OK(swv_ep_open(&other, eb->addr, NULL));
	CHECK_OK(swv_ep_attach_shm(&other));
	struct sockaddr_in to = swv_ep_sockaddr(eb);
	struct swv_shm_peer *p = swv_shm_route(other.shm, &to);
	CHECK(p != NULL);
	uint8_t pkt[64];
	memset(pkt, 0x5a, sizeof(pkt));
	struct iovec v = {pkt, sizeof(pkt)};
	struct swv_shm_stats before, after;
	swv_shm_get_stats(eb->shm, &before);
	CHECK_OK(swv_shm_send(other.shm, p, &v, 1, 0, 1, false)); /* a sound record of junk bytes */
	uint64_t until = swv_now_ns() + 30000000000ull;
	do { /* b's progress takes it; the parser drops it */
		swv_shm_get_stats(eb->shm, &after);
		CHECK(swv_now_ns() < until);
	} while (after.rx_pkts == before.rx_pkts);
	CHECK_EQ(after.rx_corrupt, before.rx_corrupt);
	/* Now a record that breaks the ring's structure: dropped and counted. Each use
	 * routes again: a send lets go of the route. */
	CHECK(swv_shm_route(other.shm, &to) == p);
	swv_shm_test_publish_bad(other.shm, p);
	do {
		swv_shm_get_stats(eb->shm, &after);
		CHECK(swv_now_ns() < until);
	} while (after.rx_corrupt == before.rx_corrupt);
	CHECK_EQ(after.rx_corrupt, before.rx_corrupt + 1);
	/* The same ring carries sound records afterwards. */
	uint64_t taken = after.rx_pkts;
	CHECK(swv_shm_route(other.shm, &to) == p);
	CHECK_OK(swv_shm_send(other.shm, p, &v, 1, 0, 1, false));
	do {
		swv_shm_get_stats(eb->shm, &after);
		CHECK(swv_now_ns() < until);
	} while (after.rx_pkts == taken);
	CHECK_EQ(after.rx_corrupt, before.rx_corrupt + 1);
	swv_ep_close(&other);

	/* The link still carries a's traffic. */
	uint8_t *pa = a->mr->addr, *pb = b->mr->addr;
	swvt_rc_fill(pa + 1000, 3000, 7);
	post(a, IBV_WR_RDMA_WRITE, 1000, 3000, b);
	wait_wc(a->cq, IBV_WC_RDMA_WRITE);
	CHECK(!memcmp(pa + 1000, pb + 1000, 3000));
}

/* A UDP socket on a port of its own at addr (no inbox), its address in *sa. */
static int udp_socket(struct in_addr addr, struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(fd >= 0);
	*sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr = addr};
	socklen_t sl = sizeof(*sa);
	CHECK_OK(bind(fd, (struct sockaddr *)sa, sizeof(*sa)));
	CHECK_OK(getsockname(fd, (struct sockaddr *)sa, &sl));
	return fd;
}

/* 3 */
static void test_udp_destination(struct swvt_rc_side *a)
{
	struct swv_endpoint *ea = swvt_rc_ep(a);
	struct sockaddr_in sa;
	int fd = udp_socket(ea->addr, &sa);
	CHECK(swv_shm_route(ea->shm, &sa) == NULL);
	CHECK(swv_shm_route(ea->shm, &sa) == NULL);
	/* swv_ep_send then sends a datagram, which the socket receives. */
	uint64_t u0 = atomic_load(&ea->udp_tx);
	uint8_t msg[16] = {1, 2, 3};
	struct iovec v = {msg, sizeof(msg)};
	CHECK_OK(swv_ep_send(ea, &sa, &v, 1));
	CHECK_EQ(atomic_load(&ea->udp_tx), u0 + 1);
	uint8_t got[32];
	CHECK_EQ(recv(fd, got, sizeof(got), 0), (ssize_t)sizeof(msg));
	CHECK(!memcmp(got, msg, sizeof(msg)));
	close(fd);
}

/* 5 */
static void test_backlog(void)
{
	struct in_addr lo = {htonl(INADDR_LOOPBACK)};
	struct swv_endpoint rx, tx;
	CHECK_OK(swv_ep_open(&rx, lo, NULL)); /* no progress thread: nobody takes its inbox */
	CHECK_OK(swv_ep_attach_shm(&rx));
	CHECK_OK(swv_ep_open(&tx, lo, NULL));
	CHECK_OK(swv_ep_attach_shm(&tx));
	struct sockaddr_in to = swv_ep_sockaddr(&rx);
	uint64_t mark = 0;
	CHECK(!swv_ep_backlog(&tx, &to, &mark)); /* nothing sent */
	uint8_t pkt[64] = {0};
	struct iovec v = {pkt, sizeof(pkt)};
	CHECK_OK(swv_ep_send(&tx, &to, &v, 1));
	mark = 0;
	CHECK(swv_ep_backlog(&tx, &to, &mark));
	CHECK(swv_ep_backlog(&tx, &to, &mark)); /* asking takes nothing */
	struct swv_rx_pkt got[4];
	CHECK_EQ(swv_shm_rx_take(rx.shm, got, 4), 1);
	swv_shm_rx_release(rx.shm);
	CHECK(!swv_ep_backlog(&tx, &to, &mark)); /* taken */
	/* What is written after the first ask (another QP streaming on the same ring)
	 * does not count: a receiver that takes is not a backlog, however busy the ring */
	CHECK_OK(swv_ep_send(&tx, &to, &v, 1));
	CHECK(!swv_ep_backlog(&tx, &to, &mark));
	mark = 0; /* a new question (after progress or a retry) */
	CHECK(swv_ep_backlog(&tx, &to, &mark));
	/* The owner dies (a child's pid, reaped): its unread ring is no backlog. */
	pid_t dead = fork();
	CHECK(dead >= 0);
	if (dead == 0)
		_exit(0);
	CHECK_EQ(waitpid(dead, NULL, 0), dead);
	swv_shm_test_set_owner_pid(rx.shm, (int32_t)dead);
	CHECK(!swv_ep_backlog(&tx, &to, &mark));
	swv_shm_test_set_owner_pid(rx.shm, (int32_t)getpid());
	/* Not reached through an inbox (a plain UDP destination): no backlog to know of. */
	struct sockaddr_in sa;
	int fd = udp_socket(lo, &sa);
	mark = 0;
	CHECK(!swv_ep_backlog(&tx, &sa, &mark));
	close(fd);
	swv_ep_close(&tx);
	swv_ep_close(&rx);
}

/* Two endpoints of this process on loopback, each with an inbox. */
static void open_pair(struct swv_endpoint *rx, struct swv_endpoint *tx)
{
	struct in_addr lo = {htonl(INADDR_LOOPBACK)};
	CHECK_OK(swv_ep_open(rx, lo, NULL));
	CHECK_OK(swv_ep_attach_shm(rx));
	CHECK_OK(swv_ep_open(tx, lo, NULL));
	CHECK_OK(swv_ep_attach_shm(tx));
}

/* 6 */
static void test_unchecked(void)
{
	struct in_addr lo = {htonl(INADDR_LOOPBACK)};
	struct swv_endpoint rx, tx;
	open_pair(&rx, &tx);
	struct sockaddr_in to = swv_ep_sockaddr(&rx);
	uint8_t pkt[2][64] = {{1}, {2}};
	struct iovec v = {pkt, sizeof(pkt)};
	unsigned nsent = 0;
	CHECK_OK(swv_ep_send_ring(&tx, &to, &v, 1, 64, 2, &nsent));
	CHECK_EQ(nsent, 2u);
	v.iov_len = 64;
	CHECK_OK(swv_ep_send(&tx, &to, &v, 1));
	struct swv_rx_pkt got[4];
	memset(got, 0xff, sizeof(got)); /* stale fields must not survive a take */
	CHECK_EQ(swv_shm_rx_take(rx.shm, got, 4), 3);
	CHECK(got[0].unchecked && got[1].unchecked && !got[2].unchecked);
	CHECK(got[0].buf[0] == 1 && got[1].buf[0] == 2 && got[2].buf[0] == 1);
	swv_shm_rx_release(rx.shm);
	/* a plain UDP destination: nothing sent */
	struct sockaddr_in sa;
	int fd = udp_socket(lo, &sa);
	nsent = 9;
	CHECK_EQ(swv_ep_send_ring(&tx, &sa, &v, 1, 0, 1, &nsent), ENOTCONN);
	CHECK_EQ(nsent, 0u);
	CHECK_OK(swv_ep_send(&tx, &sa, &v, 1)); /* UDP, and the only datagram there */
	uint8_t b[128];
	CHECK_EQ(recv(fd, b, sizeof(b), 0), 64);
	CHECK(recv(fd, b, sizeof(b), MSG_DONTWAIT) < 0);
	close(fd);
	swv_ep_close(&tx);
	swv_ep_close(&rx);
}

/* 7 */
static void test_udp_only(void)
{
	struct swv_endpoint rx, tx;
	open_pair(&rx, &tx);
	struct sockaddr_in to = swv_ep_sockaddr(&rx);
	uint8_t pkt[100];
	for (unsigned i = 0; i < sizeof(pkt); i++)
		pkt[i] = (uint8_t)i;
	struct iovec v = {pkt, sizeof(pkt)};
	unsigned nsent = 9;
	CHECK_EQ(swv_ep_send_udp(&tx, &to, &v, 1, 40, 2, &nsent), EINVAL); /* 3 packets */
	CHECK_EQ(nsent, 0u);
	CHECK_OK(swv_ep_send_udp(&tx, &to, &v, 1, 64, 2, &nsent));
	CHECK_EQ(nsent, 2u);
	v.iov_len = 10;
	CHECK_OK(swv_ep_send_udp(&tx, &to, &v, 1, 0, 1, &nsent)); /* one: seg not looked at */
	CHECK_EQ(nsent, 1u);
	static const size_t want[] = {64, 36, 10};
	uint8_t b[128];
	for (unsigned i = 0; i < 3; i++) {
		CHECK_EQ(recv(rx.fd, b, sizeof(b), 0), (ssize_t)want[i]);
		CHECK_EQ(b[0], i == 1 ? 64 : 0);
	}
	CHECK(recv(rx.fd, b, sizeof(b), MSG_DONTWAIT) < 0);
	struct swv_rx_pkt got[4];
	CHECK_EQ(swv_shm_rx_take(rx.shm, got, 4), 0);
	swv_shm_rx_release(rx.shm);
	swv_ep_close(&tx);
	swv_ep_close(&rx);
}

/* 4 */
static void switch_off_child(void)
{
	setenv("SWVERBS_SHM", "0", 1);
	struct swvt_rc_side s;
	swvt_rc_side_open(&s, &OPTS);
	CHECK(!swv_shm_enabled());
	CHECK(swvt_rc_ep(&s)->shm == NULL);
	swvt_rc_side_close(&s);
}

static void test_switch_off(void)
{
	swvt_child_run(switch_off_child);
}

int main(void)
{
	if (getenv("SWVERBS_SHM") && !strcmp(getenv("SWVERBS_SHM"), "0")) {
		test_switch_off();
		return 0;
	}
	test_switch_off(); /* forks before any device is open in this process */
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, &OPTS, &OPTS, NULL);
	test_traffic(&a, &b);
	test_corrupt(&a, &b);
	test_udp_destination(&a);
	test_spin_ends(&a, &b);
	swvt_rc_pair_close(&a, &b);
	test_backlog();
	test_unchecked();
	test_udp_only();
	return 0;
}
