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
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/context.h"
#include "inproc.h"
#include "link/shm.h"
#include "link/endpoint.h"
#include "util/clock.h"

#define BUF 65536

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
};

static void side_open(struct side *s)
{
	s->ctx = swvt_open_first_device();
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd);
	s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
	CHECK(s->cq);
	s->mr = swvt_reg_buf(
	    s->pd, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_qp_init_attr ia = {
	    .send_cq = s->cq,
	    .recv_cq = s->cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1}};
	s->qp = ibv_create_qp(s->pd, &ia);
	CHECK(s->qp);
	swvt_pair_to_init(s->qp);
}

static void side_close(struct side *s)
{
	CHECK_OK(ibv_destroy_qp(s->qp));
	swvt_dereg_buf(s->mr);
	CHECK_OK(ibv_destroy_cq(s->cq));
	CHECK_OK(ibv_dealloc_pd(s->pd));
	CHECK_OK(ibv_close_device(s->ctx));
}

static struct swv_endpoint *port0(struct side *s)
{
	return &to_swv_ctx(s->ctx)->ports[0]->ep;
}

static void wait_wc(struct ibv_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	uint64_t until = swv_now_ns() + 30000000000ull;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(swv_now_ns() < until);
	CHECK_EQ(n, 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, op);
}

static void post(struct side *s, enum ibv_wr_opcode op, uint32_t off, uint32_t len,
		 const struct side *peer)
{
	struct ibv_sge sge = {(uintptr_t)s->mr->addr + off, len, s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = op,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)peer->mr->addr + off;
	wr.wr.rdma.rkey = peer->mr->rkey;
	CHECK_OK(ibv_post_send(s->qp, &wr, &bad));
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed);
}

/* 1 */
static void test_traffic(struct side *a, struct side *b)
{
	struct swv_endpoint *ea = port0(a), *eb = port0(b);
	CHECK(ea->shm && eb->shm);
	uint64_t udp_a = atomic_load(&ea->udp_tx), udp_b = atomic_load(&eb->udp_tx);

	uint8_t *pa = a->mr->addr, *pb = b->mr->addr;
	fill(pa, 20000, 1);
	post(a, IBV_WR_RDMA_WRITE, 0, 20000, b);
	wait_wc(a->cq, IBV_WC_RDMA_WRITE);
	CHECK(!memcmp(pa, pb, 20000));

	fill(pb + 32768, 9000, 2);
	post(a, IBV_WR_RDMA_READ, 32768, 9000, b);
	wait_wc(a->cq, IBV_WC_RDMA_READ);
	CHECK(!memcmp(pa + 32768, pb + 32768, 9000));

	struct ibv_sge rs = {(uintptr_t)pb + 50000, 4000, b->mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 9, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK_OK(ibv_post_recv(b->qp, &rw, &rbad));
	fill(pa + 50000, 4000, 3);
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

/* 2: a third endpoint of this process writes nonsense into its ring of b's inbox. */
static void test_corrupt(struct side *a, struct side *b)
{
	struct swv_endpoint *eb = port0(b), other;
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
	CHECK_OK(swv_shm_send(other.shm, p, &v, 1, 0, 1)); /* a sound record of junk bytes */
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
	CHECK_OK(swv_shm_send(other.shm, p, &v, 1, 0, 1));
	do {
		swv_shm_get_stats(eb->shm, &after);
		CHECK(swv_now_ns() < until);
	} while (after.rx_pkts == taken);
	CHECK_EQ(after.rx_corrupt, before.rx_corrupt + 1);
	swv_ep_close(&other);

	/* The link still carries a's traffic. */
	uint8_t *pa = a->mr->addr, *pb = b->mr->addr;
	fill(pa + 1000, 3000, 7);
	post(a, IBV_WR_RDMA_WRITE, 1000, 3000, b);
	wait_wc(a->cq, IBV_WC_RDMA_WRITE);
	CHECK(!memcmp(pa + 1000, pb + 1000, 3000));
}

/* 3 */
static void test_udp_destination(struct side *a)
{
	struct swv_endpoint *ea = port0(a);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(fd >= 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = ea->addr};
	socklen_t sl = sizeof(sa);
	CHECK_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
	CHECK_OK(getsockname(fd, (struct sockaddr *)&sa, &sl));
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

/* 4 */
static void test_switch_off(void)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		setenv("SWVERBS_SHM", "0", 1);
		struct side s;
		side_open(&s);
		CHECK(!swv_shm_enabled());
		CHECK(port0(&s)->shm == NULL);
		side_close(&s);
		_exit(0);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
	if (getenv("SWVERBS_SHM") && !strcmp(getenv("SWVERBS_SHM"), "0")) {
		test_switch_off();
		return 0;
	}
	test_switch_off(); /* forks before any device is open in this process */
	struct side a, b;
	side_open(&a);
	side_open(&b);
	swvt_pair_connect(a.qp, b.qp);
	test_traffic(&a, &b);
	test_corrupt(&a, &b);
	test_udp_destination(&a);
	side_close(&a);
	side_close(&b);
	return 0;
}
