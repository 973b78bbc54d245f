/*
 * Direct placement on the intra-host link (src/link/shm.h swv_shm_direct, docs/design.md
 * "The intra-host link"): two contexts of this process, RC.
 *
 *  placed        one-packet RDMA WRITEs (2 B .. the path MTU) after the connection's
 *                first request are placed by the sender: the placement count moves,
 *                the responder counts each as placed, bytes exact; a WRITE_WITH_IMM
 *                (its CQE) takes the ring.
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
 *  multi_placed  multi-packet WRITEs (1025 B .. 1 MiB, one SGE or three) placed whole:
 *                one placement each, every packet found placed by the responder, the
 *                target's REMOTE_RDMA_WRITE counter once per message, bytes exact; a
 *                multi-packet WRITE_WITH_IMM takes the ring.
 *  multi_errors  a bad rkey, a range past the MR's end in the last packet only, an MR
 *                or QP without REMOTE_WRITE, on a pair that places multi-packet
 *                WRITEs: the UDP path's status, nothing placed, memory untouched.
 *  multi_mtu_mismatch  a requester's path MTU below the responder's: the UDP
 *                path's invalid request, nothing placed, memory untouched.
 *  multi_psn_wrap  a placed WRITE whose PSNs wrap past 2^24 - 1: placed whole, bytes
 *                exact.
 *  multi_dereg_stream  4000-byte WRITEs streaming while the MR is deregistered: not a
 *                byte lands once ibv_dereg_mr returned.
 *  multi_probe   a 1 MiB WRITE (1024 packets, twice the PSNs a QP keeps unacknowledged)
 *                whose receiver reads nothing until the sender's tail-loss probe has
 *                resent the first packet: the packets that leave for the first time
 *                after it still go placed (the resent first packet once took the
 *                placement back, and half the message went through the ring again).
 *  multi_forged  FIRST/MIDDLE/LAST flagged placed that nobody placed, on the ring: the
 *                checks run and only the copy is skipped (a bad key NAKs); over UDP
 *                the flag is cleared and a header-only FIRST is an invalid request.
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "core/context.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "inproc.h"
#include "link/endpoint.h"
#include "link/shm.h"
#include "rcpair.h"
#include "rcpair_int.h"
#include "transport/opcode.h"
#include "util/clock.h"

#define BUF   SWVT_RC_BUF
#define RW    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define LIMIT SWVT_RC_LIMIT_NS

/* b's first n bytes still hold the 0x5a a scenario filled them with: nothing landed. */
static void check_untouched(const struct swvt_rc_side *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(b->buf[i], 0x5a);
}

/* Responder's count of WRITEs it found placed (read under the QP's lock). */
static uint64_t resp_placed(struct swvt_rc_side *s)
{
	struct swv_qp *q = to_swv_qp(s->qp);
	pthread_mutex_lock(&q->lock);
	uint64_t n = q->resp->stats.placed;
	pthread_mutex_unlock(&q->lock);
	return n;
}

static void placed(void)
{
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, NULL, NULL, NULL);
	CHECK(swvt_rc_ep(&a)->shm && swvt_rc_ep(&b)->shm);
	swvt_rc_warm(&a, &b);
	static const uint32_t sizes[] = {2, 8, 100, 1000, 1024};
	uint32_t off = 0;
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct swv_shm_stats s0 = swvt_rc_shm_stats(&a);
		uint64_t r0 = resp_placed(&b);
		swvt_rc_fill(a.buf + off, sizes[i], i + 1);
		swvt_rc_post(&a, IBV_WR_RDMA_WRITE, off, sizes[i], (uintptr_t)b.buf + off,
			     b.mr->rkey, 0);
		struct ibv_wc wc = swvt_rc_wait_wc(a.cq);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
		CHECK(!memcmp(a.buf + off, b.buf + off, sizes[i]));
		CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, s0.direct_tx + 1);
		CHECK_EQ(resp_placed(&b), r0 + 1);
		off += 2048;
	}
	/* WRITE_WITH_IMM: the ring (the responder may have to refuse it with RNR), the
	 * receive completes */
	struct ibv_sge rs = {(uintptr_t)b.buf, 1, b.mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 77, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK_OK(ibv_post_recv(b.qp, &rw, &rbad));
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_tx;
	swvt_rc_fill(a.buf + 20000, 300, 9);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 20000, 300, (uintptr_t)b.buf + 20000,
		     b.mr->rkey, 0x1234);
	struct ibv_wc wc = swvt_rc_wait_wc(a.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	wc = swvt_rc_wait_wc(b.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(wc.wr_id, 77);
	CHECK_EQ(wc.byte_len, 300);
	CHECK_EQ(ntohl(wc.imm_data), 0x1234);
	CHECK(!memcmp(a.buf + 20000, b.buf + 20000, 300));
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   placed\n");
}

static uint64_t cntr(struct ibv_comp_cntr *c)
{
	uint64_t v;
	CHECK_OK(ibv_read_comp_cntr(c, &v));
	return v;
}

#define MP_BUF ((1u << 20) + 65536)

/* Multi-packet WRITEs (path MTU 1024) placed whole: one placement per message, every
 * packet of it found placed by the responder, the target's REMOTE_RDMA_WRITE counter
 * once per message, bytes exact; from several SGEs too. A multi-packet
 * WRITE_WITH_IMM takes the ring. */
static void multi_placed(void)
{
	struct swvt_rc_side a, b;
	struct swvt_rc_opts oa = {.buf_len = MP_BUF},
			    ob = {.buf_len = MP_BUF,
				  .cntr_ops = IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE};
	swvt_rc_pair_open(&a, &b, &oa, &ob, NULL);
	swvt_rc_warm(&a, &b);
	static const uint32_t sizes[] = {1025, 2048, 5000, 65536 + 7, 1u << 20};
	uint64_t msgs = 0;
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t off = i & 1 ? 4096 : 0;
		struct swv_shm_stats s0 = swvt_rc_shm_stats(&a);
		uint64_t r0 = resp_placed(&b);
		swvt_rc_fill(a.buf + off, sizes[i], i + 11);
		swvt_rc_post(&a, IBV_WR_RDMA_WRITE, off, sizes[i], (uintptr_t)b.buf + off,
			     b.mr->rkey, 0);
		struct ibv_wc wc = swvt_rc_wait_wc(a.cq);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK(!memcmp(a.buf + off, b.buf + off, sizes[i]));
		CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, s0.direct_tx + 1);
		CHECK_EQ(resp_placed(&b), r0 + (sizes[i] + 1023) / 1024);
		CHECK_EQ(cntr(b.cntr), ++msgs);
	}
	/* three SGEs, 4500 bytes from scattered places into one range */
	struct ibv_sge sg[3] = {{(uintptr_t)a.buf + 100000, 1000, a.mr->lkey},
				{(uintptr_t)a.buf + 300001, 1500, a.mr->lkey},
				{(uintptr_t)a.buf + 500002, 2000, a.mr->lkey}};
	for (int k = 0; k < 3; k++)
		swvt_rc_fill((uint8_t *)(uintptr_t)sg[k].addr, sg[k].length, 40 + k);
	struct ibv_send_wr wr = {.wr_id = 5,
				 .sg_list = sg,
				 .num_sge = 3,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {(uintptr_t)b.buf + 700000, b.mr->rkey}},
			   *bad;
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_tx, r0 = resp_placed(&b);
	CHECK_OK(ibv_post_send(a.qp, &wr, &bad));
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	uint8_t *t = b.buf + 700000;
	for (int k = 0; k < 3; k++) {
		CHECK(!memcmp(t, (uint8_t *)(uintptr_t)sg[k].addr, sg[k].length));
		t += sg[k].length;
	}
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0 + 1);
	CHECK_EQ(resp_placed(&b), r0 + 5);
	CHECK_EQ(cntr(b.cntr), ++msgs);
	/* WRITE_WITH_IMM of several packets: the ring, as the one-packet one */
	struct ibv_sge rs = {(uintptr_t)b.buf, 1, b.mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 78, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK_OK(ibv_post_recv(b.qp, &rw, &rbad));
	d0 = swvt_rc_shm_stats(&a).direct_tx;
	r0 = resp_placed(&b);
	swvt_rc_fill(a.buf + 30000, 5000, 3);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 30000, 5000, (uintptr_t)b.buf + 30000,
		     b.mr->rkey, 0x55);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	struct ibv_wc wc = swvt_rc_wait_wc(b.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 5000);
	CHECK(!memcmp(a.buf + 30000, b.buf + 30000, 5000));
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0);
	CHECK_EQ(resp_placed(&b), r0);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   multi_placed\n");
}

/* A multi-packet WRITE the responder refuses, on a pair that has just placed one
 * whole: its status is the UDP path's, nothing of it is placed, b's memory untouched.
 * how: 1 a key that is not b's, 2 the range runs past the MR's end in its last packet
 * only, 3 the MR lacks REMOTE_WRITE, 4 the QP lacks it. */
static void multi_refused(int how, enum ibv_wc_status want)
{
	struct swvt_rc_side a, b;
	struct swvt_rc_opts ob = {0};
	if (how == 4)
		ob.qp_access = IBV_ACCESS_REMOTE_READ;
	swvt_rc_pair_open(&a, &b, NULL, &ob, NULL);
	swvt_rc_warm(&a, &b);
	uint32_t rkey = b.mr->rkey;
	struct ibv_mr *ro = NULL;
	if (how == 3) {
		/* a second MR over the buffer without the right */
		ro =
		    ibv_reg_mr(b.pd, b.buf, b.len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
		CHECK(ro);
		rkey = ro->rkey;
	}
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_tx;
	if (how != 4) {
		swvt_rc_fill(a.buf, 3000, 2);
		swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 3000, (uintptr_t)b.buf + 8192, b.mr->rkey,
			     0);
		CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
		CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0 + 1);
		d0++;
	}
	memset(b.buf, 0x5a, b.len);
	uint64_t r0 = resp_placed(&b);
	uint64_t va = (uintptr_t)b.buf + 100;
	if (how == 1)
		rkey ^= 0x80;
	if (how == 2)
		va = (uintptr_t)b.buf + b.len - 3500; /* packets 1-3 fit, the 4th does not */
	swvt_rc_fill(a.buf, 4000, 7);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 4000, va, rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, want);
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0);
	CHECK_EQ(resp_placed(&b), r0);
	check_untouched(&b, b.len);
	if (ro)
		CHECK_OK(ibv_dereg_mr(ro));
	swvt_rc_pair_close(&a, &b);
}

static void multi_errors(void)
{
	multi_refused(1, IBV_WC_REM_ACCESS_ERR);
	multi_refused(2, IBV_WC_REM_ACCESS_ERR);
	multi_refused(3, IBV_WC_REM_ACCESS_ERR);
	multi_refused(4, IBV_WC_REM_INV_REQ_ERR);
	fprintf(stderr, "ok   multi_errors\n");
}

/* A multi-packet WRITE from a QP whose path MTU (1024) is smaller than the
 * responder's (4096): the responder takes FIRST and MIDDLE packets of its own MTU only,
 * so the UDP path refuses the message at its FIRST (invalid request) before a byte
 * lands. Placed whole, it must be refused the same way: nothing placed, b's memory
 * untouched. One packet under both MTUs is unaffected (placed). */
static void multi_mtu_mismatch(void)
{
	struct swvt_rc_side a, b;
	struct swvt_rc_conn c = SWVT_RC_CONN_DEFAULT;
	c.b_path_mtu = IBV_MTU_4096;
	swvt_rc_pair_open(&a, &b, NULL, NULL, &c);
	swvt_rc_warm(&a, &b);
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_tx;
	swvt_rc_fill(a.buf, 1000, 3);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 1000, (uintptr_t)b.buf + 8192, b.mr->rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	CHECK(!memcmp(a.buf, b.buf + 8192, 1000));
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0 + 1);
	memset(b.buf, 0x5a, b.len);
	uint64_t r0 = resp_placed(&b);
	swvt_rc_fill(a.buf, 3000, 9);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 3000, (uintptr_t)b.buf + 100, b.mr->rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_REM_INV_REQ_ERR);
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0 + 1);
	CHECK_EQ(resp_placed(&b), r0);
	check_untouched(&b, b.len);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   multi_mtu_mismatch\n");
}

/* A WRITE placed whole whose PSNs wrap past 2^24 - 1 (a connection started just
 * below it): placed once, every packet found placed, bytes exact; the next one, all
 * past the wrap, too. */
static void multi_psn_wrap(void)
{
	struct swvt_rc_side a, b;
	struct swvt_rc_conn c = SWVT_RC_CONN_DEFAULT;
	c.a_sq_psn = c.b_rq_psn = 0xffffff - 10;
	swvt_rc_pair_open(&a, &b, NULL, NULL, &c);
	swvt_rc_warm(&a, &b);
	for (int i = 0; i < 2; i++) {
		uint64_t d0 = swvt_rc_shm_stats(&a).direct_tx, r0 = resp_placed(&b);
		swvt_rc_fill(a.buf, 32768, 60 + i);
		swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 32768, (uintptr_t)b.buf + 16384, b.mr->rkey,
			     0);
		CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
		CHECK(!memcmp(a.buf, b.buf + 16384, 32768));
		CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0 + 1);
		CHECK_EQ(resp_placed(&b), r0 + 32);
	}
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   multi_psn_wrap\n");
}

/* Multi-packet WRITEs streamed into an MR that is deregistered meanwhile: once
 * ibv_dereg_mr returned, not one byte lands in the (reused) buffer. */
static void multi_dereg_stream(void)
{
	for (int round = 0; round < 10; round++) {
		struct swvt_rc_side a, b;
		swvt_rc_pair_open(&a, &b, NULL, NULL, NULL);
		uint64_t d0 = swvt_rc_shm_stats(&a).direct_tx;
		uint64_t r0 = resp_placed(&b);
		struct swvt_rc_stream_end end = swvt_rc_dereg_under_stream_len(
		    &a, &b, IBV_WR_RDMA_WRITE, 30 + (uint64_t)round * 10, 4000);
		CHECK_EQ(end.last, IBV_WC_REM_ACCESS_ERR);
		for (size_t i = 0; i < BUF; i++)
			CHECK_EQ(b.buf[i], 0xee);
		CHECK(swvt_rc_shm_stats(&a).direct_tx > d0);
		CHECK(resp_placed(&b) > r0 + 4);
		swvt_rc_pair_close(&a, &b);
	}
	fprintf(stderr, "ok   multi_dereg_stream\n");
}

/* One refused WRITE on a fresh pair: its status, nothing placed, b's memory intact.
 * how: as swvt_rc_post_bad. */
static void refused(int b_access, bool qp_no_write, int how, enum ibv_wc_status want)
{
	struct swvt_rc_side a, b;
	struct swvt_rc_opts ob = {.mr_access = b_access,
				  .qp_access = qp_no_write ? IBV_ACCESS_REMOTE_READ : 0};
	swvt_rc_pair_open(&a, &b, NULL, &ob, NULL);
	swvt_rc_warm(&a, &b);
	memset(b.buf, 0x5a, BUF);
	swvt_rc_fill(a.buf, 64, 1);
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_tx;
	swvt_rc_post_bad(&a, &b, IBV_WR_RDMA_WRITE, how, want);
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0);
	check_untouched(&b, BUF);
	swvt_rc_pair_close(&a, &b);
}

static void errors(void)
{
	refused(RW, false, 1, IBV_WC_REM_ACCESS_ERR);
	refused(RW, false, 2, IBV_WC_REM_ACCESS_ERR);
	refused(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, false, 0, IBV_WC_REM_ACCESS_ERR);
	refused(RW, true, 0, IBV_WC_REM_INV_REQ_ERR);
	fprintf(stderr, "ok   errors\n");
}

static void dereg_stream(void)
{
	for (int round = 0; round < 20; round++) {
		struct swvt_rc_side a, b;
		swvt_rc_pair_open(&a, &b, NULL, NULL, NULL);
		uint64_t d0 = swvt_rc_shm_stats(&a).direct_tx;
		/* the stream runs through the direct path for a while before the dereg */
		struct swvt_rc_stream_end end = swvt_rc_dereg_under_stream(
		    &a, &b, IBV_WR_RDMA_WRITE, 50 + (uint64_t)round * 20);
		CHECK_EQ(end.last, IBV_WC_REM_ACCESS_ERR);
		for (size_t i = 0; i < BUF; i++)
			CHECK_EQ(b.buf[i], 0xee);
		CHECK(swvt_rc_shm_stats(&a).direct_tx > d0);
		swvt_rc_pair_close(&a, &b);
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
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, NULL, NULL, NULL);
	struct sockaddr_in to = swv_ep_sockaddr(swvt_rc_ep(&b));
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
	uint64_t w0 = swvt_rc_shm_stats(&b).dt_waits;
	struct dereger d = {.mr = b.mr};
	b.mr = NULL;
	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, dereg_thread, &d));
	uint64_t until = swv_now_ns() + LIMIT;
	while (swvt_rc_shm_stats(&b).dt_waits == w0) /* dereg found the placement and waits */
		CHECK(swv_now_ns() < until);
	CHECK(!atomic_load(&d.returned)); /* the placer lives: dereg may not return */
	CHECK_OK(kill(pid, SIGKILL));
	int ws;
	CHECK_EQ(waitpid(pid, &ws, 0), pid);
	CHECK_OK(pthread_join(t, NULL)); /* a dead placer is not waited for */
	CHECK(atomic_load(&d.returned));
	close(pfd[0]);
	close(pfd[1]);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   dead_placer\n");
}

static void corrupt(void)
{
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, NULL, NULL, NULL);
	swvt_rc_warm(&a, &b);
	swvt_rc_fill(a.buf, 64, 4);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)b.buf, b.mr->rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	struct swv_shm_stats s0 = swvt_rc_shm_stats(&a);
	CHECK(s0.direct_tx >= 1);
	swv_shm_test_corrupt_table(swvt_rc_ep(&b)->shm);
	for (int i = 0; i < 10; i++) {
		swvt_rc_fill(a.buf + 1024, 512, 10 + i);
		swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 1024, 512, (uintptr_t)b.buf + 1024, b.mr->rkey,
			     0);
		CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
		CHECK(!memcmp(a.buf + 1024, b.buf + 1024, 512));
	}
	struct swv_shm_stats s1 = swvt_rc_shm_stats(&a);
	CHECK_EQ(s1.direct_tx, s0.direct_tx);
	CHECK_EQ(s1.direct_corrupt, s0.direct_corrupt + 1);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   corrupt\n");
}

/* On a fresh warmed pair, one 100-byte WRITE goes through (bytes exact) without being
 * placed; ring_kept: the link's ring is there and carried it. */
static void write_not_placed(unsigned seed, bool ring_kept)
{
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, NULL, NULL, NULL);
	if (ring_kept)
		CHECK(swvt_rc_ep(&a)->shm);
	swvt_rc_warm(&a, &b);
	swvt_rc_fill(a.buf, 100, seed);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 100, (uintptr_t)b.buf, b.mr->rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	CHECK(!memcmp(a.buf, b.buf, 100));
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, 0);
	if (ring_kept)
		CHECK(swvt_rc_shm_stats(&a).tx_pkts > 0);
	swvt_rc_pair_close(&a, &b);
}

static void switch_off_child(void)
{
	setenv("SWVERBS_SHM_DIRECT", "0", 1);
	CHECK(!swv_shm_direct_enabled());
	write_not_placed(5, true); /* the ring stays */
}

static void switch_off(void)
{
	swvt_child_run(switch_off_child);
	fprintf(stderr, "ok   switch_off\n");
}

/* A process that made itself non-dumpable (other processes of its user may not write
 * it) does not place into itself: a process that can scribble its inboxes' tables
 * would otherwise steer its writes anywhere in it. */
static void nondumpable_child(void)
{
	CHECK_OK(prctl(PR_SET_DUMPABLE, 0));
	write_not_placed(8, false);
}

static void nondumpable(void)
{
	swvt_child_run(nondumpable_child);
	fprintf(stderr, "ok   nondumpable\n");
}

#define XP_N 200

struct xp_info {
	uint32_t qpn, rkey;
	uint64_t addr;
};

/* The sender: its QP number up, the parent's address down, then the WRITEs. */
static int xp_child(int up, int down)
{
	struct swvt_rc_side a;
	swvt_rc_side_open(&a, NULL);
	struct xp_info me = {.qpn = a.qp->qp_num}, peer;
	CHECK_EQ(write(up, &me, sizeof(me)), (ssize_t)sizeof(me));
	CHECK_EQ(read(down, &peer, sizeof(peer)), (ssize_t)sizeof(peer));
	swvt_pair_to_rtr(a.qp, peer.qpn);
	swvt_pair_to_rts(a.qp, 14);
	for (unsigned i = 0; i < XP_N; i++) {
		uint32_t off = (i % 16) * 64;
		swvt_rc_fill(a.buf + off, 64, i);
		swvt_rc_post(&a, i + 1 < XP_N ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM, off,
			     64, peer.addr + off, peer.rkey, i);
		CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	}
	/* all but the first and the one with an immediate */
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, XP_N - 2);
	swvt_rc_side_close(&a);
	return 0;
}

static void two_processes(void)
{
	struct swvt_child c;
	swvt_child_start(&c, xp_child);
	struct swvt_rc_side b;
	swvt_rc_side_open(&b, NULL);
	struct ibv_sge rs = {(uintptr_t)b.buf, 1, b.mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 5, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK_OK(ibv_post_recv(b.qp, &rw, &rbad));
	struct xp_info me = {.qpn = b.qp->qp_num, .rkey = b.mr->rkey, .addr = (uintptr_t)b.buf},
		       peer;
	CHECK_EQ(read(c.up, &peer, sizeof(peer)), (ssize_t)sizeof(peer));
	swvt_pair_to_rtr(b.qp, peer.qpn);
	swvt_pair_to_rts(b.qp, 14);
	CHECK_EQ(write(c.down, &me, sizeof(me)), (ssize_t)sizeof(me));
	struct ibv_wc wc = swvt_rc_wait_wc(b.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(ntohl(wc.imm_data), XP_N - 1);
	uint8_t want[64];
	for (unsigned k = 0; k < 16; k++) {
		swvt_rc_fill(want, 64, k + (XP_N - 1 - k) / 16 * 16); /* each place's last WRITE */
		CHECK(!memcmp(b.buf + k * 64, want, 64));
	}
	swvt_child_wait(&c);
	CHECK_EQ(resp_placed(&b), XP_N - 2);
	swvt_rc_side_close(&b);
	fprintf(stderr, "ok   two_processes\n");
}

/* The responder's expected PSN and its invalid-request/access NAK count, under the lock. */
static void resp_psn_naks(struct swvt_rc_side *s, uint32_t *epsn, uint64_t *naks)
{
	struct swv_qp *q = to_swv_qp(s->qp);
	pthread_mutex_lock(&q->lock);
	*epsn = q->resp->epsn;
	*naks = q->resp->stats.err_naks;
	pthread_mutex_unlock(&q->lock);
}

static void forged_udp(void)
{
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, NULL, NULL, NULL);
	memset(b.buf, 0x5a, 64);
	uint32_t e0, e;
	uint64_t n0, n;
	resp_psn_naks(&b, &e0, &n0);
	uint64_t placed0 = resp_placed(&b);

	/* from a's socket: b's QP takes packets from its connected peer only */
	swvt_rc_send_forged(&a, &b, SWV_OP_WRITE_ONLY, e0, b.mr->rkey, true);

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
	check_untouched(&b, 64);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   forged_udp\n");
}

/* Wait until b's responder took the PSNs up to want or sent a NAK. */
static void resp_wait(struct swvt_rc_side *b, uint32_t want, uint64_t n0, uint32_t *e, uint64_t *n)
{
	uint64_t until = swv_now_ns() + LIMIT;
	do {
		CHECK(swv_now_ns() < until);
		sched_yield();
		resp_psn_naks(b, e, n);
	} while (*e != want && *n == n0);
}

/* A multi-packet WRITE flagged placed that nobody placed (a hostile sender on the
 * ring): FIRST, MIDDLE, LAST of 3000 bytes without payload. The responder runs every
 * check as on the UDP path and only leaves out the copy: it takes the three PSNs,
 * counts the message once, and b's memory is untouched. The same forged with a key
 * that is not b's: NAK, the PSN stays. Over UDP the flag is cleared on receipt, so a
 * header-only FIRST is an invalid request. */
static void multi_forged(void)
{
	struct swvt_rc_side a, b;
	struct swvt_rc_opts ob = {.cntr_ops = IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE};
	swvt_rc_pair_open(&a, &b, NULL, &ob, NULL);
	swvt_rc_warm(&a, &b);
	memset(b.buf, 0x5a, BUF);
	uint32_t e0, e;
	uint64_t n0, n;
	resp_psn_naks(&b, &e0, &n0);
	uint64_t p0 = resp_placed(&b), c0 = cntr(b.cntr);
	uint64_t va = (uintptr_t)b.buf + 1000;
	swvt_rc_send_forged_at(&a, &b, SWV_OP_WRITE_FIRST, e0, b.mr->rkey, va, 3000, false);
	swvt_rc_send_forged_at(&a, &b, SWV_OP_WRITE_MIDDLE, e0 + 1, 0, 0, 0, false);
	swvt_rc_send_forged_at(&a, &b, SWV_OP_WRITE_LAST, e0 + 2, 0, 0, 0, false);
	resp_wait(&b, e0 + 3, n0, &e, &n);
	CHECK_EQ(n, n0);
	CHECK_EQ(e, e0 + 3);
	CHECK_EQ(resp_placed(&b), p0 + 3);
	CHECK_EQ(cntr(b.cntr), c0 + 1);
	check_untouched(&b, BUF);
	/* a key that is not b's: the checks run, NAK, nothing counted */
	e0 = e;
	swvt_rc_send_forged_at(&a, &b, SWV_OP_WRITE_FIRST, e0, b.mr->rkey ^ 0x80, va, 3000, false);
	resp_wait(&b, e0 + 1, n0, &e, &n);
	CHECK_EQ(n, n0 + 1);
	CHECK_EQ(e, e0);
	CHECK_EQ(resp_placed(&b), p0 + 3);
	CHECK_EQ(cntr(b.cntr), c0 + 1);
	swvt_rc_pair_close(&a, &b);

	swvt_rc_pair_open(&a, &b, NULL, NULL, NULL);
	memset(b.buf, 0x5a, BUF);
	resp_psn_naks(&b, &e0, &n0);
	p0 = resp_placed(&b);
	swvt_rc_send_forged_at(&a, &b, SWV_OP_WRITE_FIRST, e0, b.mr->rkey, (uintptr_t)b.buf, 3000,
			       true);
	resp_wait(&b, e0 + 1, n0, &e, &n);
	CHECK_EQ(n, n0 + 1);
	CHECK_EQ(e, e0);
	CHECK_EQ(resp_placed(&b), p0);
	check_untouched(&b, BUF);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   multi_forged\n");
}

/* A WRITE the responder does not execute leaves its memory as it was, as on the ring:
 * one whose PSN the responder does not expect (its rq_psn is not a's sq_psn: dropped
 * as a duplicate, a's WRITE ends in RETRY_EXC_ERR), and a WRITE_WITH_IMM without a
 * receive WQE (RNR, a's WRITE ends in RNR_RETRY_EXC_ERR). */
static void not_executed(void)
{
	struct swvt_rc_side a, b;
	/* b expects rq_psn, a sends from 0; a short ACK timeout, one retry */
	struct swvt_rc_conn c = SWVT_RC_CONN_DEFAULT;
	c.b_rq_psn = 1000;
	c.a_timeout = 8;
	c.a_retry_cnt = 1;
	swvt_rc_pair_open(&a, &b, NULL, NULL, &c);
	memset(b.buf, 0x5a, 256);
	swvt_rc_fill(a.buf, 64, 6);
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_tx;
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)b.buf, b.mr->rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_RETRY_EXC_ERR);
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0);
	check_untouched(&b, 256);
	swvt_rc_pair_close(&a, &b);

	/* the default ACK timeout and retry count again: the 1 ms / one retry above, kept
	 * here, ended the warm-up SEND in RETRY_EXC_ERR whenever b's progress thread waited
	 * 2 ms for a core (1 run in 10 beside a busy loop) */
	c = SWVT_RC_CONN_DEFAULT;
	c.a_rnr_retry = 0;
	swvt_rc_pair_open(&a, &b, NULL, NULL, &c);
	swvt_rc_warm(&a, &b);
	/* the connection places: a plain WRITE does */
	d0 = swvt_rc_shm_stats(&a).direct_tx;
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)b.buf + 1024, b.mr->rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0 + 1);
	memset(b.buf, 0x5a, 256);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 64, (uintptr_t)b.buf, b.mr->rkey, 7);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_RNR_RETRY_EXC_ERR);
	check_untouched(&b, 256);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   not_executed\n");
}

/* Tail-loss probes a has sent (read under its QP's lock). */
static uint64_t req_probes(struct swvt_rc_side *s)
{
	struct swv_qp *q = to_swv_qp(s->qp);
	pthread_mutex_lock(&q->lock);
	uint64_t n = q->req->n_probes;
	pthread_mutex_unlock(&q->lock);
	return n;
}

static void multi_probe(void)
{
	struct swvt_rc_side a, b;
	struct swvt_rc_opts o = {.buf_len = MP_BUF};
	swvt_rc_pair_open(&a, &b, &o, &o, NULL);
	swvt_rc_warm(&a, &b);
	struct swv_shm_stats s0 = swvt_rc_shm_stats(&a);
	uint64_t r0 = resp_placed(&b), p0 = req_probes(&a);
	swv_progress_test_norx(&to_swv_ctx(b.ctx)->progress, true);
	swvt_rc_fill(a.buf, 1u << 20, 5);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 1u << 20, (uintptr_t)b.buf, b.mr->rkey, 0);
	uint64_t until = swv_now_ns() + LIMIT;
	struct ibv_wc wc;
	while (req_probes(&a) == p0) {
		CHECK_EQ(ibv_poll_cq(a.cq, 1, &wc), 0); /* a drives its own context only */
		CHECK(swv_now_ns() < until);
	}
	swv_progress_test_norx(&to_swv_ctx(b.ctx)->progress, false);
	wc = swvt_rc_wait_wc(a.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(!memcmp(a.buf, b.buf, 1u << 20));
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, s0.direct_tx + 1);
	CHECK_EQ(resp_placed(&b), r0 + 1024);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   multi_probe\n");
}

int main(void)
{
	switch_off(); /* forks before the switch is read in this process */
	swvt_rc_need_direct();
	two_processes(); /* forks before any device is open in this process */
	nondumpable();
	placed();
	errors();
	dereg_stream();
	dead_placer();
	corrupt();
	forged_udp();
	not_executed();
	multi_placed();
	multi_errors();
	multi_mtu_mismatch();
	multi_psn_wrap();
	multi_dereg_stream();
	multi_probe();
	multi_forged();
	return 0;
}
