/*
 * RDMA READ read directly on the intra-host link (src/transport/requester.c
 * direct_read_ok, src/link/shm.h swv_shm_direct with read, docs/design.md "The
 * intra-host link"): two contexts of this process, RC.
 *
 *  read_placed    one-packet READs (2 B .. the path MTU) after the connection's first
 *                 request are read by the requester itself and complete at once: the
 *                 link's read count and the requester's move, the responder counts
 *                 each as placed, the bytes are exact, the target's REMOTE_RDMA_READ
 *                 counter counts each once; a chain of READs completes in order; a READ
 *                 larger than the path MTU and a zero-length READ take the ring.
 *  read_errors    a bad rkey, out of bounds, an MR without REMOTE_READ, a QP without
 *                 REMOTE_READ, a responder without READ resources (max_dest_rd_atomic
 *                 0): the statuses of the ring (REM_ACCESS_ERR / REM_INV_REQ_ERR),
 *                 nothing read directly, the local buffer untouched, the target's
 *                 error count moved once.
 *  read_local_errors  a READ into a local MR without LOCAL_WRITE, or with a bad
 *                 lkey: LOC_PROT_ERR as on the ring, never completed as read directly.
 *  read_ordering  a READ behind an unacknowledged WRITE of the same bytes is not read
 *                 directly (it would overtake the WRITE): it returns the WRITE's bytes.
 *  read_dereg     an MR deregistered while one-packet READs stream from it: no READ
 *                 completes successfully with bytes written into the buffer after
 *                 ibv_dereg_mr returned, and the stream ends in an error.
 *  read_forged    a READ request flagged placed from a hostile sender skips no check: a
 *                 bad rkey through the ring is NAKed and counted as a refused read; a
 *                 flagged READ over UDP is an ordinary READ (answered with data, not
 *                 counted as placed).
 *  read_pid_reused  the inbox's owner pid names another process (the owner died,
 *                 its pid was reused): nothing is read from that process.
 *  read_switch    SWVERBS_SHM_DIRECT=0: READs take the ring (a child process: the
 *                 switch is read once).
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "link/shm.h"
#include "rcpair.h"
#include "rcpair_int.h"
#include "transport/opcode.h"
#include "util/clock.h"

#define BUF   SWVT_RC_BUF
#define RW    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define LIMIT SWVT_RC_LIMIT_NS

/* Every side counts the READs its responder executes. */
static const struct swvt_rc_opts RD_CNTR = {.cntr_ops =
						IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ};

struct qstat {
	uint64_t req_placed_reads, resp_placed_reads, err_naks;
	uint32_t epsn;
};

static struct qstat qstat(struct swvt_rc_side *s)
{
	struct swv_qp *q = to_swv_qp(s->qp);
	pthread_mutex_lock(&q->lock);
	struct qstat st = {q->req->n_placed_reads, q->resp->stats.placed_reads,
			   q->resp->stats.err_naks, q->resp->epsn};
	pthread_mutex_unlock(&q->lock);
	return st;
}

static uint64_t cntr(struct ibv_comp_cntr *c, bool err)
{
	uint64_t v;
	CHECK_OK(err ? ibv_read_err_comp_cntr(c, &v) : ibv_read_comp_cntr(c, &v));
	return v;
}

/* The target's responder takes the placed request after the requester completed the
 * READ: wait until its count reaches n, then it must be n exactly. */
static void wait_resp_placed(struct swvt_rc_side *b, uint64_t n)
{
	uint64_t until = swv_now_ns() + LIMIT;
	while (qstat(b).resp_placed_reads < n)
		CHECK(swv_now_ns() < until);
	CHECK_EQ(qstat(b).resp_placed_reads, n);
}

static void read_placed(void)
{
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, &RD_CNTR, &RD_CNTR, NULL);
	CHECK(swvt_rc_ep(&a)->shm && swvt_rc_ep(&b)->shm);
	swvt_rc_warm(&a, &b);
	swvt_rc_fill(b.buf, BUF, 3);
	memset(a.buf, 0, BUF);
	static const uint32_t sizes[] = {2, 8, 100, 1000, 1024};
	const unsigned n = sizeof(sizes) / sizeof(sizes[0]);
	uint32_t off = 0;
	for (unsigned i = 0; i < n; i++) {
		struct swv_shm_stats s0 = swvt_rc_shm_stats(&a);
		struct qstat q0 = qstat(&a);
		swvt_rc_post(&a, IBV_WR_RDMA_READ, off, sizes[i], (uintptr_t)b.buf + off + 7,
			     b.mr->rkey, 0);
		struct ibv_wc wc = swvt_rc_wait_wc(a.cq);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
		CHECK_EQ(wc.byte_len, sizes[i]);
		CHECK_EQ(wc.wr_id, off);
		CHECK(!memcmp(a.buf + off, b.buf + off + 7, sizes[i]));
		CHECK_EQ(swvt_rc_shm_stats(&a).direct_rd, s0.direct_rd + 1);
		CHECK_EQ(qstat(&a).req_placed_reads, q0.req_placed_reads + 1);
		off += 2048;
	}
	wait_resp_placed(&b, n);
	CHECK_EQ(cntr(b.cntr, false), n);
	CHECK_EQ(cntr(b.cntr, true), 0);

	/* a chain: each read directly in turn, completed in posting order */
	struct ibv_sge sg[3];
	struct ibv_send_wr wr[3], *bad;
	for (unsigned i = 0; i < 3; i++) {
		swvt_rc_wr(&a, &wr[i], &sg[i], IBV_WR_RDMA_READ, 20000 + i * 100, 64,
			   (uintptr_t)b.buf + 30000 + i * 100, b.mr->rkey);
		if (i)
			wr[i - 1].next = &wr[i];
	}
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_rd;
	CHECK_OK(ibv_post_send(a.qp, wr, &bad));
	for (unsigned i = 0; i < 3; i++) {
		struct ibv_wc wc = swvt_rc_wait_wc(a.cq);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(wc.wr_id, 20000 + i * 100);
		CHECK(!memcmp(a.buf + 20000 + i * 100, b.buf + 30000 + i * 100, 64));
	}
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_rd, d0 + 3);
	wait_resp_placed(&b, n + 3);

	/* more than the path MTU (1024) and zero bytes: the ring */
	d0 = swvt_rc_shm_stats(&a).direct_rd;
	swvt_rc_post(&a, IBV_WR_RDMA_READ, 40000, 5000, (uintptr_t)b.buf + 1, b.mr->rkey, 0);
	struct ibv_wc wc = swvt_rc_wait_wc(a.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(!memcmp(a.buf + 40000, b.buf + 1, 5000));
	swvt_rc_post(&a, IBV_WR_RDMA_READ, 0, 0, (uintptr_t)b.buf, b.mr->rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_rd, d0);
	/* the ring path counts before its response leaves: already there */
	CHECK_EQ(cntr(b.cntr, false), n + 3 + 2);
	CHECK_EQ(qstat(&b).resp_placed_reads, n + 3);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   read_placed\n");
}

/* One refused READ on a fresh, warmed pair: its status, nothing read directly, a's
 * buffer untouched, b's REMOTE_RDMA_READ error count 1. how: as swvt_rc_post_bad. */
static void refused(int b_access, bool qp_no_read, uint8_t max_dest, int how,
		    enum ibv_wc_status want)
{
	struct swvt_rc_side a, b;
	struct swvt_rc_opts ob = RD_CNTR;
	ob.mr_access = b_access;
	if (qp_no_read)
		ob.qp_access = IBV_ACCESS_REMOTE_WRITE;
	struct swvt_rc_conn c = SWVT_RC_CONN_DEFAULT;
	c.b_max_dest_rd_atomic = max_dest;
	swvt_rc_pair_open(&a, &b, &RD_CNTR, &ob, &c);
	swvt_rc_warm(&a, &b);
	memset(a.buf, 0x5a, BUF);
	swvt_rc_fill(b.buf, BUF, 4);
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_rd;
	swvt_rc_post_bad(&a, &b, IBV_WR_RDMA_READ, how, want);
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_rd, d0);
	CHECK_EQ(qstat(&a).req_placed_reads, 0);
	for (size_t i = 0; i < BUF; i++)
		CHECK_EQ(a.buf[i], 0x5a);
	CHECK_EQ(cntr(b.cntr, false), 0);
	CHECK_EQ(cntr(b.cntr, true), 1);
	swvt_rc_pair_close(&a, &b);
}

static void read_errors(void)
{
	refused(RW, false, 4, 1, IBV_WC_REM_ACCESS_ERR);
	refused(RW, false, 4, 2, IBV_WC_REM_ACCESS_ERR);
	refused(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, false, 4, 0,
		IBV_WC_REM_ACCESS_ERR);
	refused(RW, true, 4, 0, IBV_WC_REM_INV_REQ_ERR);
	refused(RW, false, 0, 0, IBV_WC_REM_INV_REQ_ERR);
	fprintf(stderr, "ok   read_errors\n");
}

/* A READ into a local buffer it may not write: the MR has no LOCAL_WRITE, or the lkey
 * is no key of a. Read directly or not, it must end as on the ring: LOC_PROT_ERR,
 * never a success, and the local bytes not written through that MR. */
static void local_refused(bool bad_lkey)
{
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, &RD_CNTR, &RD_CNTR, NULL);
	swvt_rc_warm(&a, &b);
	swvt_rc_fill(b.buf, BUF, 6);
	memset(a.buf, 0x5a, BUF);
	struct ibv_mr *ro = ibv_reg_mr(a.pd, a.buf, BUF, 0); /* local read only */
	CHECK(ro);
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	swvt_rc_wr(&a, &wr, &sge, IBV_WR_RDMA_READ, 0, 64, (uintptr_t)b.buf + 64, b.mr->rkey);
	sge.lkey = bad_lkey ? a.mr->lkey ^ 0x80 : ro->lkey;
	CHECK_OK(ibv_post_send(a.qp, &wr, &bad));
	struct ibv_wc wc = swvt_rc_wait_wc(a.cq);
	CHECK_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(qstat(&a).req_placed_reads, 0);
	for (size_t i = 0; i < BUF; i++)
		CHECK_EQ(a.buf[i], 0x5a);
	CHECK_OK(ibv_dereg_mr(ro));
	swvt_rc_pair_close(&a, &b);
}

static void read_local_errors(void)
{
	local_refused(false);
	local_refused(true);
	fprintf(stderr, "ok   read_local_errors\n");
}

static void read_ordering(void)
{
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, &RD_CNTR, &RD_CNTR, NULL);
	swvt_rc_warm(&a, &b);
	memset(b.buf, 0x11, BUF);
	/* a WRITE of three packets (the ring) and a READ of its bytes, posted together: the
	 * READ is behind unacknowledged PSNs, so it goes to the responder, which executes
	 * it after the WRITE */
	swvt_rc_fill(a.buf, 3000, 5);
	struct ibv_sge sg[2];
	struct ibv_send_wr wr[2], *bad;
	swvt_rc_wr(&a, &wr[0], &sg[0], IBV_WR_RDMA_WRITE, 0, 3000, (uintptr_t)b.buf + 8192,
		   b.mr->rkey);
	swvt_rc_wr(&a, &wr[1], &sg[1], IBV_WR_RDMA_READ, 10000, 1000,
		   (uintptr_t)b.buf + 8192 + 1500, b.mr->rkey);
	wr[0].next = &wr[1];
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_rd;
	CHECK_OK(ibv_post_send(a.qp, wr, &bad));
	CHECK_EQ(swvt_rc_wait_wc(a.cq).wr_id, 0);
	struct ibv_wc wc = swvt_rc_wait_wc(a.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 10000);
	CHECK(!memcmp(a.buf + 10000, a.buf + 1500, 1000));
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_rd, d0);
	/* once that is acknowledged, the next READ is read directly */
	swvt_rc_post(&a, IBV_WR_RDMA_READ, 20000, 64, (uintptr_t)b.buf + 8192, b.mr->rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	CHECK(!memcmp(a.buf + 20000, a.buf, 64));
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_rd, d0 + 1);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   read_ordering\n");
}

static void read_dereg(void)
{
	for (int round = 0; round < 10; round++) {
		struct swvt_rc_side a, b;
		swvt_rc_pair_open(&a, &b, &RD_CNTR, &RD_CNTR, NULL);
		swvt_rc_warm(&a, &b);
		memset(b.buf, 0x11, BUF);
		uint64_t d0 = swvt_rc_shm_stats(&a).direct_rd;
		struct swvt_rc_stream_end end =
		    swvt_rc_dereg_under_stream(&a, &b, IBV_WR_RDMA_READ, 50 + (uint64_t)round * 20);
		/* no successful READ returned bytes written after the dereg */
		CHECK(!end.bad);
		/* refused by the responder, or (a READ read just before the dereg whose
		 * request the responder then refused: its QP went to ERR) the next one
		 * finds nobody answering */
		CHECK(end.last == IBV_WC_REM_ACCESS_ERR || end.last == IBV_WC_RETRY_EXC_ERR);
		CHECK(swvt_rc_shm_stats(&a).direct_rd > d0);
		swvt_rc_pair_close(&a, &b);
	}
	fprintf(stderr, "ok   read_dereg\n");
}

static void read_forged(void)
{
	/* through the ring, a bad rkey: refused as any READ */
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, &RD_CNTR, &RD_CNTR, NULL);
	swvt_rc_warm(&a, &b);
	struct qstat q0 = qstat(&b);
	uint64_t tx0 = swvt_rc_shm_stats(&a).tx_pkts;
	swvt_rc_send_forged(&a, &b, SWV_OP_READ_REQUEST, q0.epsn, b.mr->rkey ^ 0x80, false);
	CHECK_EQ(swvt_rc_shm_stats(&a).tx_pkts, tx0 + 1); /* it went through the ring */
	uint64_t until = swv_now_ns() + LIMIT;
	while (qstat(&b).err_naks == q0.err_naks)
		CHECK(swv_now_ns() < until);
	CHECK_EQ(qstat(&b).resp_placed_reads, 0);
	CHECK_EQ(cntr(b.cntr, true), 1);
	CHECK_EQ(cntr(b.cntr, false), 0);
	swvt_rc_pair_close(&a, &b);

	/* over UDP, a good rkey: nobody can have read it, so it is a plain READ */
	swvt_rc_pair_open(&a, &b, &RD_CNTR, &RD_CNTR, NULL);
	swvt_rc_warm(&a, &b);
	q0 = qstat(&b);
	swvt_rc_send_forged(&a, &b, SWV_OP_READ_REQUEST, q0.epsn, b.mr->rkey, true);
	until = swv_now_ns() + LIMIT;
	while (qstat(&b).epsn == q0.epsn)
		CHECK(swv_now_ns() < until);
	while (cntr(b.cntr, false) != 1)
		CHECK(swv_now_ns() < until);
	CHECK_EQ(qstat(&b).resp_placed_reads, 0);
	CHECK_EQ(qstat(&b).err_naks, q0.err_naks);
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   read_forged\n");
}

static void read_switch_child(void)
{
	setenv("SWVERBS_SHM_DIRECT", "0", 1);
	CHECK(!swv_shm_direct_enabled());
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, &RD_CNTR, &RD_CNTR, NULL);
	CHECK(swvt_rc_ep(&a)->shm); /* the ring stays */
	swvt_rc_warm(&a, &b);
	swvt_rc_fill(b.buf, 100, 5);
	for (int i = 0; i < 3; i++) {
		swvt_rc_post(&a, IBV_WR_RDMA_READ, 0, 100, (uintptr_t)b.buf, b.mr->rkey, 0);
		CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
		CHECK(!memcmp(a.buf, b.buf, 100));
	}
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_rd, 0);
	CHECK_EQ(qstat(&a).req_placed_reads, 0);
	CHECK(swvt_rc_shm_stats(&a).tx_pkts > 0);
	CHECK_EQ(cntr(b.cntr, false), 3);
	swvt_rc_pair_close(&a, &b);
}

/* A child that waits until the parent closes its end. */
static int until_parent_done(int up, int down)
{
	char ch;
	(void)up;
	return read(down, &ch, 1) == 0 ? 0 : 1;
}

/* The inbox names a pid that is no longer its owner's (the owner died and the pid was
 * reused): here a child of fork, whose copy of b's buffer holds the old bytes. Nothing
 * may be read from (or placed into) that process: the READ returns b's bytes. */
static void read_pid_reused(void)
{
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, &RD_CNTR, &RD_CNTR, NULL);
	memset(b.buf, 0x11, BUF);
	struct swvt_child c;
	swvt_child_start(&c, until_parent_done);
	swv_shm_test_set_owner_pid(swvt_rc_ep(&b)->shm, c.pid);
	swvt_rc_warm(&a, &b); /* a attaches to b's inbox now */
	memset(b.buf, 0x22, BUF);
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_rd;
	swvt_rc_post(&a, IBV_WR_RDMA_READ, 0, 64, (uintptr_t)b.buf + 128, b.mr->rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	for (int i = 0; i < 64; i++)
		CHECK_EQ(a.buf[i], 0x22);
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_rd, d0);
	swvt_child_wait(&c);
	swv_shm_test_set_owner_pid(swvt_rc_ep(&b)->shm, getpid());
	swvt_rc_pair_close(&a, &b);
	fprintf(stderr, "ok   read_pid_reused\n");
}

static void read_switch(void)
{
	swvt_child_run(read_switch_child);
	fprintf(stderr, "ok   read_switch\n");
}

int main(void)
{
	read_switch(); /* forks before the switch is read in this process */
	swvt_rc_need_direct();
	read_placed();
	read_errors();
	read_local_errors();
	read_ordering();
	read_dereg();
	read_forged();
	read_pid_reused();
	return 0;
}
