/*
 * Direct placement on the intra-host link (src/link/shm.h swv_shm_direct, docs/design.md
 * "The intra-host link"): two contexts of this process, RC.
 *
 *  placed        one-packet RDMA WRITEs (2 B .. the path MTU) after the connection's
 *                first request are placed by the sender: the placement count moves,
 *                the responder counts each as placed, bytes exact; a WRITE_WITH_IMM
 *                (its CQE) and a WRITE larger than the path MTU take the ring.
 *  errors        a bad rkey, out of bounds, an MR without REMOTE_WRITE, a QP without
 *                REMOTE_WRITE: IBV_WC_REM_ACCESS_ERR / REM_INV_REQ_ERR as on the ring,
 *                nothing placed, the target's memory untouched.
 *  dereg_stream  an MR deregistered while one-packet WRITEs stream into it: once
 *                ibv_dereg_mr returned, not one byte lands in the (reused) buffer.
 *  dead_placer   a sender (another process) inside a placement holds off ibv_dereg_mr
 *                while it lives, and not once it was killed.
 *  corrupt       a scribbled placement table: the sender stops placing and the WRITEs
 *                go through the ring, bytes exact.
 *  nondumpable   a process that made itself non-dumpable does not place into itself.
 *  switch_off    SWVERBS_SHM_DIRECT=0: the ring only (a child process: the switch is
 *                read once).
 *  two_processes the placement into another process (the real case): a child streams
 *                one-packet WRITEs into the parent's MR, every one placed, the last
 *                with an immediate; the parent's bytes and its responder's count.
 *  not_executed  a WRITE the responder would not execute is not placed: one whose PSN
 *                the responder does not expect (mismatched rq_psn), a WRITE_WITH_IMM
 *                drawing RNR; the target's memory stays untouched.
 *  forged_udp    a WRITE_ONLY flagged placed, with no payload, arriving over UDP (where
 *                nobody can have placed it): the reserved bit is ignored, so the empty
 *                payload against a RETH length is an invalid request (NAK, QP to ERR),
 *                never a WRITE counted as done.
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/context.h"
#include "core/qp.h"
#include "inproc.h"
#include "link/endpoint.h"
#include "link/shm.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "util/clock.h"

#define BUF   65536
#define RW    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define LIMIT 30000000000ull /* ns: what "never" means here */

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct ibv_qp *qp;
};

static void side_open(struct side *s, int mr_access)
{
	s->ctx = swvt_open_first_device();
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd);
	s->cq = ibv_create_cq(s->ctx, 256, NULL, NULL, 0);
	CHECK(s->cq);
	s->buf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(s->buf != MAP_FAILED);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF, mr_access);
	CHECK(s->mr);
	struct ibv_qp_init_attr ia = {
	    .send_cq = s->cq,
	    .recv_cq = s->cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1}};
	s->qp = ibv_create_qp(s->pd, &ia);
	CHECK(s->qp);
	swvt_pair_to_init(s->qp);
}

static void side_close(struct side *s)
{
	CHECK_OK(ibv_destroy_qp(s->qp));
	if (s->mr)
		CHECK_OK(ibv_dereg_mr(s->mr));
	munmap(s->buf, BUF);
	CHECK_OK(ibv_destroy_cq(s->cq));
	CHECK_OK(ibv_dealloc_pd(s->pd));
	CHECK_OK(ibv_close_device(s->ctx));
}

static void pair_open(struct side *a, struct side *b, int b_access)
{
	side_open(a, RW);
	side_open(b, b_access);
	swvt_pair_connect(a->qp, b->qp);
}

static void pair_open_unconnected(struct side *a, struct side *b)
{
	side_open(a, RW);
	side_open(b, RW);
}

static void pair_close(struct side *a, struct side *b)
{
	side_close(a);
	side_close(b);
}

static struct swv_endpoint *port0(struct side *s)
{
	return &to_swv_ctx(s->ctx)->ports[0]->ep;
}

static struct swv_shm_stats stats(struct side *s)
{
	struct swv_shm_stats st;
	swv_shm_get_stats(port0(s)->shm, &st);
	return st;
}

/* Responder's count of WRITEs it found placed (read under the QP's lock). */
static uint64_t resp_placed(struct side *s)
{
	struct swv_qp *q = to_swv_qp(s->qp);
	pthread_mutex_lock(&q->lock);
	uint64_t n = q->resp.stats.placed;
	pthread_mutex_unlock(&q->lock);
	return n;
}

static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	uint64_t until = swv_now_ns() + LIMIT;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(swv_now_ns() < until);
	CHECK_EQ(n, 1);
	return wc;
}

static void post_write(struct side *s, enum ibv_wr_opcode op, uint32_t off, uint32_t len,
		       uint64_t raddr, uint32_t rkey, uint32_t imm)
{
	struct ibv_sge sge = {(uintptr_t)s->buf + off, len, s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = off,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	CHECK_OK(ibv_post_send(s->qp, &wr, &bad));
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed);
}

/* One zero-length SEND from a to b, both completions taken: the first request of a
 * connection is never placed (only an acknowledged one shows the responder expects the
 * requester's PSNs), so tests that look at placements start with it. */
static void warm(struct side *a, struct side *b)
{
	struct ibv_recv_wr rw = {.wr_id = 1}, *rbad;
	CHECK_OK(ibv_post_recv(b->qp, &rw, &rbad));
	struct ibv_send_wr wr = {.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
	CHECK_OK(ibv_post_send(a->qp, &wr, &bad));
	CHECK_EQ(wait_wc(a->cq).status, IBV_WC_SUCCESS);
	CHECK_EQ(wait_wc(b->cq).status, IBV_WC_SUCCESS);
}

static void placed(void)
{
	struct side a, b;
	pair_open(&a, &b, RW);
	CHECK(port0(&a)->shm && port0(&b)->shm);
	warm(&a, &b);
	static const uint32_t sizes[] = {2, 8, 100, 1000, 1024};
	uint32_t off = 0;
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct swv_shm_stats s0 = stats(&a);
		uint64_t r0 = resp_placed(&b);
		fill(a.buf + off, sizes[i], i + 1);
		post_write(&a, IBV_WR_RDMA_WRITE, off, sizes[i], (uintptr_t)b.buf + off, b.mr->rkey,
			   0);
		struct ibv_wc wc = wait_wc(a.cq);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
		CHECK(!memcmp(a.buf + off, b.buf + off, sizes[i]));
		CHECK_EQ(stats(&a).direct_tx, s0.direct_tx + 1);
		CHECK_EQ(resp_placed(&b), r0 + 1);
		off += 2048;
	}
	/* WRITE_WITH_IMM: the ring (the responder may have to refuse it with RNR), the
	 * receive completes */
	struct ibv_sge rs = {(uintptr_t)b.buf, 1, b.mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 77, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK_OK(ibv_post_recv(b.qp, &rw, &rbad));
	uint64_t d0 = stats(&a).direct_tx;
	fill(a.buf + 20000, 300, 9);
	post_write(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 20000, 300, (uintptr_t)b.buf + 20000, b.mr->rkey,
		   0x1234);
	struct ibv_wc wc = wait_wc(a.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	wc = wait_wc(b.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(wc.wr_id, 77);
	CHECK_EQ(wc.byte_len, 300);
	CHECK_EQ(ntohl(wc.imm_data), 0x1234);
	CHECK(!memcmp(a.buf + 20000, b.buf + 20000, 300));
	CHECK_EQ(stats(&a).direct_tx, d0);
	/* more than the path MTU (1024): the ring */
	d0 = stats(&a).direct_tx;
	fill(a.buf + 30000, 5000, 3);
	post_write(&a, IBV_WR_RDMA_WRITE, 30000, 5000, (uintptr_t)b.buf + 30000, b.mr->rkey, 0);
	wc = wait_wc(a.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(!memcmp(a.buf + 30000, b.buf + 30000, 5000));
	CHECK_EQ(stats(&a).direct_tx, d0);
	pair_close(&a, &b);
	fprintf(stderr, "ok   placed\n");
}

/* One refused WRITE on a fresh pair: its status, nothing placed, b's memory intact. */
static void refused(int b_access, bool qp_no_write, int how, enum ibv_wc_status want)
{
	struct side a, b;
	side_open(&a, RW);
	side_open(&b, b_access);
	if (qp_no_write) {
		struct ibv_qp_attr at = {.qp_access_flags = IBV_ACCESS_REMOTE_READ};
		CHECK_OK(ibv_modify_qp(b.qp, &at, IBV_QP_ACCESS_FLAGS));
	}
	swvt_pair_connect(a.qp, b.qp);
	warm(&a, &b);
	memset(b.buf, 0x5a, BUF);
	fill(a.buf, 64, 1);
	uint64_t raddr = (uintptr_t)b.buf + 100;
	uint32_t rkey = b.mr->rkey;
	if (how == 1)
		rkey ^= 0x80; /* not a key of b */
	if (how == 2)
		raddr = (uintptr_t)b.buf + BUF - 32; /* runs past the MR's end */
	uint64_t d0 = stats(&a).direct_tx;
	post_write(&a, IBV_WR_RDMA_WRITE, 0, 64, raddr, rkey, 0);
	struct ibv_wc wc = wait_wc(a.cq);
	CHECK_EQ(wc.status, want);
	CHECK_EQ(stats(&a).direct_tx, d0);
	for (size_t i = 0; i < BUF; i++)
		CHECK_EQ(b.buf[i], 0x5a);
	pair_close(&a, &b);
}

static void errors(void)
{
	refused(RW, false, 1, IBV_WC_REM_ACCESS_ERR);
	refused(RW, false, 2, IBV_WC_REM_ACCESS_ERR);
	refused(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, false, 0, IBV_WC_REM_ACCESS_ERR);
	refused(RW, true, 0, IBV_WC_REM_INV_REQ_ERR);
	fprintf(stderr, "ok   errors\n");
}

struct streamer {
	struct side *a, *b;
	uint64_t raddr;
	uint32_t rkey;
	_Atomic uint64_t done;
	enum ibv_wc_status last;
};

static void *stream(void *arg)
{
	struct streamer *st = arg;
	memset(st->a->buf, 0x11, 256);
	for (;;) {
		post_write(st->a, IBV_WR_RDMA_WRITE, 0, 256, st->raddr, st->rkey, 0);
		struct ibv_wc wc = wait_wc(st->a->cq);
		st->last = wc.status;
		if (wc.status != IBV_WC_SUCCESS)
			return NULL;
		atomic_fetch_add(&st->done, 1);
	}
}

static void dereg_stream(void)
{
	for (int round = 0; round < 20; round++) {
		struct side a, b;
		pair_open(&a, &b, RW);
		struct streamer st = {
		    .a = &a, .b = &b, .raddr = (uintptr_t)b.buf + 4096, .rkey = b.mr->rkey};
		uint64_t d0 = stats(&a).direct_tx;
		pthread_t t;
		CHECK_OK(pthread_create(&t, NULL, stream, &st));
		/* let the stream run through the direct path for a while */
		uint64_t until = swv_now_ns() + LIMIT;
		while (atomic_load(&st.done) < 50 + (uint64_t)round * 20)
			CHECK(swv_now_ns() < until);
		CHECK_OK(ibv_dereg_mr(b.mr));
		b.mr = NULL;
		/* the buffer is the application's again: reused at once */
		memset(b.buf, 0xee, BUF);
		CHECK_OK(pthread_join(t, NULL));
		CHECK_EQ(st.last, IBV_WC_REM_ACCESS_ERR);
		for (size_t i = 0; i < BUF; i++)
			CHECK_EQ(b.buf[i], 0xee);
		CHECK(stats(&a).direct_tx > d0);
		pair_close(&a, &b);
	}
	fprintf(stderr, "ok   dereg_stream\n");
}

struct dereger {
	struct ibv_mr *mr;
	_Atomic bool returned;
};

static void *dereg_thread(void *arg)
{
	struct dereger *d = arg;
	CHECK_OK(ibv_dereg_mr(d->mr));
	atomic_store(&d->returned, true);
	return NULL;
}

static void dead_placer(void)
{
	struct side a, b;
	pair_open(&a, &b, RW);
	struct sockaddr_in to = swv_ep_sockaddr(port0(&b));
	uint32_t rkey = b.mr->rkey;
	int pfd[2];
	CHECK_OK(pipe(pfd) ? errno : 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* a sender of its own, announced inside a placement into b's MR, then
		 * stuck there until killed */
		struct swv_endpoint e;
		if (swv_ep_open(&e, to.sin_addr, NULL) || swv_ep_attach_shm(&e))
			_exit(2);
		struct swv_shm_peer *p = swv_shm_route(e.shm, &to);
		if (!p || swv_shm_test_mark_placing(p, rkey))
			_exit(3);
		(void)!write(pfd[1], "x", 1);
		for (;;)
			pause();
	}
	char c;
	CHECK_EQ(read(pfd[0], &c, 1), 1);
	uint64_t w0 = stats(&b).dt_waits;
	struct dereger d = {.mr = b.mr};
	b.mr = NULL;
	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, dereg_thread, &d));
	uint64_t until = swv_now_ns() + LIMIT;
	while (stats(&b).dt_waits == w0) /* dereg found the placement and waits */
		CHECK(swv_now_ns() < until);
	CHECK(!atomic_load(&d.returned)); /* the placer lives: dereg may not return */
	CHECK_OK(kill(pid, SIGKILL));
	int ws;
	CHECK_EQ(waitpid(pid, &ws, 0), pid);
	CHECK_OK(pthread_join(t, NULL)); /* a dead placer is not waited for */
	CHECK(atomic_load(&d.returned));
	close(pfd[0]);
	close(pfd[1]);
	pair_close(&a, &b);
	fprintf(stderr, "ok   dead_placer\n");
}

static void corrupt(void)
{
	struct side a, b;
	pair_open(&a, &b, RW);
	warm(&a, &b);
	fill(a.buf, 64, 4);
	post_write(&a, IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)b.buf, b.mr->rkey, 0);
	CHECK_EQ(wait_wc(a.cq).status, IBV_WC_SUCCESS);
	struct swv_shm_stats s0 = stats(&a);
	CHECK(s0.direct_tx >= 1);
	swv_shm_test_corrupt_table(port0(&b)->shm);
	for (int i = 0; i < 10; i++) {
		fill(a.buf + 1024, 512, 10 + i);
		post_write(&a, IBV_WR_RDMA_WRITE, 1024, 512, (uintptr_t)b.buf + 1024, b.mr->rkey,
			   0);
		CHECK_EQ(wait_wc(a.cq).status, IBV_WC_SUCCESS);
		CHECK(!memcmp(a.buf + 1024, b.buf + 1024, 512));
	}
	struct swv_shm_stats s1 = stats(&a);
	CHECK_EQ(s1.direct_tx, s0.direct_tx);
	CHECK_EQ(s1.direct_corrupt, s0.direct_corrupt + 1);
	pair_close(&a, &b);
	fprintf(stderr, "ok   corrupt\n");
}

static void switch_off(void)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		setenv("SWVERBS_SHM_DIRECT", "0", 1);
		CHECK(!swv_shm_direct_enabled());
		struct side a, b;
		pair_open(&a, &b, RW);
		CHECK(port0(&a)->shm); /* the ring stays */
		warm(&a, &b);
		fill(a.buf, 100, 5);
		post_write(&a, IBV_WR_RDMA_WRITE, 0, 100, (uintptr_t)b.buf, b.mr->rkey, 0);
		CHECK_EQ(wait_wc(a.cq).status, IBV_WC_SUCCESS);
		CHECK(!memcmp(a.buf, b.buf, 100));
		CHECK_EQ(stats(&a).direct_tx, 0);
		CHECK(stats(&a).tx_pkts > 0);
		pair_close(&a, &b);
		_exit(0);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(stderr, "ok   switch_off\n");
}

/* A process that made itself non-dumpable (other processes of its user may not write
 * it) does not place into itself: a process that can scribble its inboxes' tables
 * would otherwise steer its writes anywhere in it. */
static void nondumpable(void)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		CHECK_OK(prctl(PR_SET_DUMPABLE, 0));
		struct side a, b;
		pair_open(&a, &b, RW);
		warm(&a, &b);
		fill(a.buf, 100, 8);
		post_write(&a, IBV_WR_RDMA_WRITE, 0, 100, (uintptr_t)b.buf, b.mr->rkey, 0);
		CHECK_EQ(wait_wc(a.cq).status, IBV_WC_SUCCESS);
		CHECK(!memcmp(a.buf, b.buf, 100));
		CHECK_EQ(stats(&a).direct_tx, 0);
		pair_close(&a, &b);
		_exit(0);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(stderr, "ok   nondumpable\n");
}

#define XP_N 200

struct xp_info {
	uint32_t qpn, rkey;
	uint64_t addr;
};

static void two_processes(void)
{
	int c2p[2], p2c[2];
	CHECK_OK(pipe(c2p) ? errno : 0);
	CHECK_OK(pipe(p2c) ? errno : 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct side a;
		side_open(&a, RW);
		struct xp_info me = {.qpn = a.qp->qp_num}, peer;
		CHECK_EQ(write(c2p[1], &me, sizeof(me)), (ssize_t)sizeof(me));
		CHECK_EQ(read(p2c[0], &peer, sizeof(peer)), (ssize_t)sizeof(peer));
		swvt_pair_to_rtr(a.qp, peer.qpn);
		swvt_pair_to_rts(a.qp, 14);
		for (unsigned i = 0; i < XP_N; i++) {
			uint32_t off = (i % 16) * 64;
			fill(a.buf + off, 64, i);
			post_write(&a,
				   i + 1 < XP_N ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM,
				   off, 64, peer.addr + off, peer.rkey, i);
			CHECK_EQ(wait_wc(a.cq).status, IBV_WC_SUCCESS);
		}
		/* all but the first and the one with an immediate */
		CHECK_EQ(stats(&a).direct_tx, XP_N - 2);
		side_close(&a);
		_exit(0);
	}
	struct side b;
	side_open(&b, RW);
	struct ibv_sge rs = {(uintptr_t)b.buf, 1, b.mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 5, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK_OK(ibv_post_recv(b.qp, &rw, &rbad));
	struct xp_info me = {.qpn = b.qp->qp_num, .rkey = b.mr->rkey, .addr = (uintptr_t)b.buf},
		       peer;
	CHECK_EQ(read(c2p[0], &peer, sizeof(peer)), (ssize_t)sizeof(peer));
	swvt_pair_to_rtr(b.qp, peer.qpn);
	swvt_pair_to_rts(b.qp, 14);
	CHECK_EQ(write(p2c[1], &me, sizeof(me)), (ssize_t)sizeof(me));
	struct ibv_wc wc = wait_wc(b.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(ntohl(wc.imm_data), XP_N - 1);
	uint8_t want[64];
	for (unsigned k = 0; k < 16; k++) {
		fill(want, 64, k + (XP_N - 1 - k) / 16 * 16); /* each place's last WRITE */
		CHECK(!memcmp(b.buf + k * 64, want, 64));
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(resp_placed(&b), XP_N - 2);
	side_close(&b);
	for (int i = 0; i < 2; i++) {
		close(c2p[i]);
		close(p2c[i]);
	}
	fprintf(stderr, "ok   two_processes\n");
}

/* The responder's expected PSN and its invalid-request/access NAK count, under the lock. */
static void resp_psn_naks(struct side *s, uint32_t *epsn, uint64_t *naks)
{
	struct swv_qp *q = to_swv_qp(s->qp);
	pthread_mutex_lock(&q->lock);
	*epsn = q->resp.epsn;
	*naks = q->resp.stats.err_naks;
	pthread_mutex_unlock(&q->lock);
}

static void forged_udp(void)
{
	struct side a, b;
	pair_open(&a, &b, RW);
	memset(b.buf, 0x5a, 64);
	uint32_t e0, e;
	uint64_t n0, n;
	resp_psn_naks(&b, &e0, &n0);
	uint64_t placed0 = resp_placed(&b);

	struct swv_pkt p = {.opcode = SWV_OP_RC | SWV_OP_WRITE_ONLY,
			    .dqpn = b.qp->qp_num,
			    .psn = e0,
			    .ackreq = true,
			    .placed = true,
			    .reth_va = (uintptr_t)b.buf,
			    .reth_rkey = b.mr->rkey,
			    .reth_len = 8};
	p.flags = swv_opcode(p.opcode)->flags;
	uint8_t pkt[SWV_MAX_HDR_LEN + 8];
	size_t h = swv_pkt_build_hdr(pkt, &p);
	CHECK(h > 0);
	size_t t = swv_pkt_build_tail(pkt, h, NULL, 0, pkt + h);
	CHECK(t > 0);
	/* from a's socket: b's QP takes packets from its connected peer only */
	int fd = port0(&a)->fd;
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port0(&b)->port)};
	to.sin_addr = to_swv_ctx(b.ctx)->cfg->addr;
	CHECK_EQ(sendto(fd, pkt, h + t, 0, (struct sockaddr *)&to, sizeof(to)), (ssize_t)(h + t));

	/* executed one way or the other: the PSN moved on or a NAK went out */
	uint64_t until = swv_now_ns() + LIMIT;
	do {
		CHECK(swv_now_ns() < until);
		sched_yield();
		resp_psn_naks(&b, &e, &n);
	} while (e == e0 && n == n0);
	CHECK_EQ(n, n0 + 1);
	CHECK_EQ(e, e0);
	CHECK_EQ(resp_placed(&b), placed0);
	for (int i = 0; i < 64; i++)
		CHECK_EQ(b.buf[i], 0x5a);
	pair_close(&a, &b);
	fprintf(stderr, "ok   forged_udp\n");
}

/* a and b connected by hand: b expects rq_psn, a sends from 0 (a's RNR retries: rnr). */
static void connect_psn(struct side *a, struct side *b, uint32_t rq_psn, int rnr)
{
	swvt_pair_to_rtr(a->qp, b->qp->qp_num);
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR,
				.path_mtu = IBV_MTU_1024,
				.dest_qp_num = a->qp->qp_num,
				.rq_psn = rq_psn,
				.max_dest_rd_atomic = 4,
				.min_rnr_timer = 1};
	swvt_local_ah_attr(b->ctx, &r.ah_attr);
	CHECK_OK(ibv_modify_qp(b->qp, &r,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER));
	struct ibv_qp_attr t = {.qp_state = IBV_QPS_RTS,
				.timeout = 8,
				.retry_cnt = 1,
				.rnr_retry = (uint8_t)rnr,
				.max_rd_atomic = 4};
	CHECK_OK(ibv_modify_qp(a->qp, &t,
			       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
	swvt_pair_to_rts(b->qp, 14);
}

/* A WRITE the responder does not execute leaves its memory as it was, as on the ring:
 * one whose PSN the responder does not expect (its rq_psn is not a's sq_psn: dropped
 * as a duplicate, a's WRITE ends in RETRY_EXC_ERR), and a WRITE_WITH_IMM without a
 * receive WQE (RNR, a's WRITE ends in RNR_RETRY_EXC_ERR). */
static void not_executed(void)
{
	struct side a, b;
	pair_open_unconnected(&a, &b);
	connect_psn(&a, &b, 1000, 7);
	memset(b.buf, 0x5a, 256);
	fill(a.buf, 64, 6);
	uint64_t d0 = stats(&a).direct_tx;
	post_write(&a, IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)b.buf, b.mr->rkey, 0);
	CHECK_EQ(wait_wc(a.cq).status, IBV_WC_RETRY_EXC_ERR);
	CHECK_EQ(stats(&a).direct_tx, d0);
	for (int i = 0; i < 256; i++)
		CHECK_EQ(b.buf[i], 0x5a);
	pair_close(&a, &b);

	pair_open_unconnected(&a, &b);
	connect_psn(&a, &b, 0, 0);
	warm(&a, &b);
	/* the connection places: a plain WRITE does */
	d0 = stats(&a).direct_tx;
	post_write(&a, IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)b.buf + 1024, b.mr->rkey, 0);
	CHECK_EQ(wait_wc(a.cq).status, IBV_WC_SUCCESS);
	CHECK_EQ(stats(&a).direct_tx, d0 + 1);
	memset(b.buf, 0x5a, 256);
	post_write(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 64, (uintptr_t)b.buf, b.mr->rkey, 7);
	CHECK_EQ(wait_wc(a.cq).status, IBV_WC_RNR_RETRY_EXC_ERR);
	for (int i = 0; i < 256; i++)
		CHECK_EQ(b.buf[i], 0x5a);
	pair_close(&a, &b);
	fprintf(stderr, "ok   not_executed\n");
}

int main(void)
{
	switch_off(); /* forks before the switch is read in this process */
	if (!swv_shm_direct_enabled()) {
		fprintf(stderr, "skip: the intra-host link or its direct placement is off\n");
		return 77;
	}
	two_processes(); /* forks before any device is open in this process */
	nondumpable();
	placed();
	errors();
	dereg_stream();
	dead_placer();
	corrupt();
	forged_udp();
	not_executed();
	return 0;
}
