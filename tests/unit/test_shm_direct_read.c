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
#include <sys/mman.h>
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
	struct ibv_comp_cntr *rr; /* REMOTE_RDMA_READ on qp */
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
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	s->rr = ibv_create_comp_cntr(s->ctx, &ca);
	CHECK(s->rr);
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask =
						      IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ};
	CHECK_OK(ibv_qp_attach_comp_cntr(s->qp, s->rr, &at));
	swvt_pair_to_init(s->qp);
}

static void side_close(struct side *s)
{
	CHECK_OK(ibv_destroy_qp(s->qp));
	CHECK_OK(ibv_destroy_comp_cntr(s->rr));
	if (s->mr)
		CHECK_OK(ibv_dereg_mr(s->mr));
	munmap(s->buf, BUF);
	CHECK_OK(ibv_destroy_cq(s->cq));
	CHECK_OK(ibv_dealloc_pd(s->pd));
	CHECK_OK(ibv_close_device(s->ctx));
}

static void pair_close(struct side *a, struct side *b)
{
	side_close(a);
	side_close(b);
}

/* a and b connected; b's responder has max_dest READ resources (0: none). */
static void pair_open(struct side *a, struct side *b, int b_access, uint8_t b_max_dest)
{
	side_open(a, RW);
	side_open(b, b_access);
	if (b_max_dest == 4) {
		swvt_pair_connect(a->qp, b->qp);
		return;
	}
	swvt_pair_to_rtr(a->qp, b->qp->qp_num);
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR,
				.path_mtu = IBV_MTU_1024,
				.dest_qp_num = a->qp->qp_num,
				.max_dest_rd_atomic = b_max_dest,
				.min_rnr_timer = 1};
	swvt_local_ah_attr(b->ctx, &r.ah_attr);
	CHECK_OK(ibv_modify_qp(b->qp, &r,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER));
	swvt_pair_to_rts(a->qp, 14);
	swvt_pair_to_rts(b->qp, 14);
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

struct qstat {
	uint64_t req_placed_reads, resp_placed_reads, err_naks;
	uint32_t epsn;
};

static struct qstat qstat(struct side *s)
{
	struct swv_qp *q = to_swv_qp(s->qp);
	pthread_mutex_lock(&q->lock);
	struct qstat st = {q->req.n_placed_reads, q->resp.stats.placed_reads,
			   q->resp.stats.err_naks, q->resp.epsn};
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
static void wait_resp_placed(struct side *b, uint64_t n)
{
	uint64_t until = swv_now_ns() + LIMIT;
	while (qstat(b).resp_placed_reads < n)
		CHECK(swv_now_ns() < until);
	CHECK_EQ(qstat(b).resp_placed_reads, n);
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

static void wr_init(struct side *s, struct ibv_send_wr *wr, struct ibv_sge *sge,
		    enum ibv_wr_opcode op, uint32_t off, uint32_t len, uint64_t raddr,
		    uint32_t rkey)
{
	*sge = (struct ibv_sge){(uintptr_t)s->buf + off, len, s->mr->lkey};
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = off;
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->opcode = op;
	wr->send_flags = IBV_SEND_SIGNALED;
	wr->wr.rdma.remote_addr = raddr;
	wr->wr.rdma.rkey = rkey;
}

static void post(struct side *s, enum ibv_wr_opcode op, uint32_t off, uint32_t len, uint64_t raddr,
		 uint32_t rkey)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	wr_init(s, &wr, &sge, op, off, len, raddr, rkey);
	CHECK_OK(ibv_post_send(s->qp, &wr, &bad));
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed);
}

/* One zero-length SEND from a to b, both completions taken: the first request of a
 * connection is never placed (only an acknowledged one shows the responder expects the
 * requester's PSNs). */
static void warm(struct side *a, struct side *b)
{
	struct ibv_recv_wr rw = {.wr_id = 1}, *rbad;
	CHECK_OK(ibv_post_recv(b->qp, &rw, &rbad));
	struct ibv_send_wr wr = {.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
	CHECK_OK(ibv_post_send(a->qp, &wr, &bad));
	CHECK_EQ(wait_wc(a->cq).status, IBV_WC_SUCCESS);
	CHECK_EQ(wait_wc(b->cq).status, IBV_WC_SUCCESS);
}

static void read_placed(void)
{
	struct side a, b;
	pair_open(&a, &b, RW, 4);
	CHECK(port0(&a)->shm && port0(&b)->shm);
	warm(&a, &b);
	fill(b.buf, BUF, 3);
	memset(a.buf, 0, BUF);
	static const uint32_t sizes[] = {2, 8, 100, 1000, 1024};
	const unsigned n = sizeof(sizes) / sizeof(sizes[0]);
	uint32_t off = 0;
	for (unsigned i = 0; i < n; i++) {
		struct swv_shm_stats s0 = stats(&a);
		struct qstat q0 = qstat(&a);
		post(&a, IBV_WR_RDMA_READ, off, sizes[i], (uintptr_t)b.buf + off + 7, b.mr->rkey);
		struct ibv_wc wc = wait_wc(a.cq);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
		CHECK_EQ(wc.byte_len, sizes[i]);
		CHECK_EQ(wc.wr_id, off);
		CHECK(!memcmp(a.buf + off, b.buf + off + 7, sizes[i]));
		CHECK_EQ(stats(&a).direct_rd, s0.direct_rd + 1);
		CHECK_EQ(qstat(&a).req_placed_reads, q0.req_placed_reads + 1);
		off += 2048;
	}
	wait_resp_placed(&b, n);
	CHECK_EQ(cntr(b.rr, false), n);
	CHECK_EQ(cntr(b.rr, true), 0);

	/* a chain: each read directly in turn, completed in posting order */
	struct ibv_sge sg[3];
	struct ibv_send_wr wr[3], *bad;
	for (unsigned i = 0; i < 3; i++) {
		wr_init(&a, &wr[i], &sg[i], IBV_WR_RDMA_READ, 20000 + i * 100, 64,
			(uintptr_t)b.buf + 30000 + i * 100, b.mr->rkey);
		if (i)
			wr[i - 1].next = &wr[i];
	}
	uint64_t d0 = stats(&a).direct_rd;
	CHECK_OK(ibv_post_send(a.qp, wr, &bad));
	for (unsigned i = 0; i < 3; i++) {
		struct ibv_wc wc = wait_wc(a.cq);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(wc.wr_id, 20000 + i * 100);
		CHECK(!memcmp(a.buf + 20000 + i * 100, b.buf + 30000 + i * 100, 64));
	}
	CHECK_EQ(stats(&a).direct_rd, d0 + 3);
	wait_resp_placed(&b, n + 3);

	/* more than the path MTU (1024) and zero bytes: the ring */
	d0 = stats(&a).direct_rd;
	post(&a, IBV_WR_RDMA_READ, 40000, 5000, (uintptr_t)b.buf + 1, b.mr->rkey);
	struct ibv_wc wc = wait_wc(a.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(!memcmp(a.buf + 40000, b.buf + 1, 5000));
	post(&a, IBV_WR_RDMA_READ, 0, 0, (uintptr_t)b.buf, b.mr->rkey);
	CHECK_EQ(wait_wc(a.cq).status, IBV_WC_SUCCESS);
	CHECK_EQ(stats(&a).direct_rd, d0);
	/* the ring path counts before its response leaves: already there */
	CHECK_EQ(cntr(b.rr, false), n + 3 + 2);
	CHECK_EQ(qstat(&b).resp_placed_reads, n + 3);
	pair_close(&a, &b);
	fprintf(stderr, "ok   read_placed\n");
}

/* One refused READ on a fresh, warmed pair: its status, nothing read directly, a's
 * buffer untouched, b's REMOTE_RDMA_READ error count 1. how: 1 bad rkey, 2 past the
 * MR's end. */
static void refused(int b_access, bool qp_no_read, uint8_t max_dest, int how,
		    enum ibv_wc_status want)
{
	struct side a, b;
	side_open(&a, RW);
	side_open(&b, b_access);
	if (qp_no_read) {
		struct ibv_qp_attr at = {.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
		CHECK_OK(ibv_modify_qp(b.qp, &at, IBV_QP_ACCESS_FLAGS));
	}
	/* pair_open's connect, on the sides opened here */
	if (max_dest == 4) {
		swvt_pair_connect(a.qp, b.qp);
	} else {
		swvt_pair_to_rtr(a.qp, b.qp->qp_num);
		struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR,
					.path_mtu = IBV_MTU_1024,
					.dest_qp_num = a.qp->qp_num,
					.max_dest_rd_atomic = max_dest,
					.min_rnr_timer = 1};
		swvt_local_ah_attr(b.ctx, &r.ah_attr);
		CHECK_OK(ibv_modify_qp(b.qp, &r,
				       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
		swvt_pair_to_rts(a.qp, 14);
		swvt_pair_to_rts(b.qp, 14);
	}
	warm(&a, &b);
	memset(a.buf, 0x5a, BUF);
	fill(b.buf, BUF, 4);
	uint64_t raddr = (uintptr_t)b.buf + 100;
	uint32_t rkey = b.mr->rkey;
	if (how == 1)
		rkey ^= 0x80; /* not a key of b */
	if (how == 2)
		raddr = (uintptr_t)b.buf + BUF - 32; /* runs past the MR's end */
	uint64_t d0 = stats(&a).direct_rd;
	post(&a, IBV_WR_RDMA_READ, 0, 64, raddr, rkey);
	struct ibv_wc wc = wait_wc(a.cq);
	CHECK_EQ(wc.status, want);
	CHECK_EQ(stats(&a).direct_rd, d0);
	CHECK_EQ(qstat(&a).req_placed_reads, 0);
	for (size_t i = 0; i < BUF; i++)
		CHECK_EQ(a.buf[i], 0x5a);
	CHECK_EQ(cntr(b.rr, false), 0);
	CHECK_EQ(cntr(b.rr, true), 1);
	pair_close(&a, &b);
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
	struct side a, b;
	pair_open(&a, &b, RW, 4);
	warm(&a, &b);
	fill(b.buf, BUF, 6);
	memset(a.buf, 0x5a, BUF);
	struct ibv_mr *ro = ibv_reg_mr(a.pd, a.buf, BUF, 0); /* local read only */
	CHECK(ro);
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	wr_init(&a, &wr, &sge, IBV_WR_RDMA_READ, 0, 64, (uintptr_t)b.buf + 64, b.mr->rkey);
	sge.lkey = bad_lkey ? a.mr->lkey ^ 0x80 : ro->lkey;
	CHECK_OK(ibv_post_send(a.qp, &wr, &bad));
	struct ibv_wc wc = wait_wc(a.cq);
	CHECK_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(qstat(&a).req_placed_reads, 0);
	for (size_t i = 0; i < BUF; i++)
		CHECK_EQ(a.buf[i], 0x5a);
	CHECK_OK(ibv_dereg_mr(ro));
	pair_close(&a, &b);
}

static void read_local_errors(void)
{
	local_refused(false);
	local_refused(true);
	fprintf(stderr, "ok   read_local_errors\n");
}

static void read_ordering(void)
{
	struct side a, b;
	pair_open(&a, &b, RW, 4);
	warm(&a, &b);
	memset(b.buf, 0x11, BUF);
	/* a WRITE of three packets (the ring) and a READ of its bytes, posted together: the
	 * READ is behind unacknowledged PSNs, so it goes to the responder, which executes
	 * it after the WRITE */
	fill(a.buf, 3000, 5);
	struct ibv_sge sg[2];
	struct ibv_send_wr wr[2], *bad;
	wr_init(&a, &wr[0], &sg[0], IBV_WR_RDMA_WRITE, 0, 3000, (uintptr_t)b.buf + 8192,
		b.mr->rkey);
	wr_init(&a, &wr[1], &sg[1], IBV_WR_RDMA_READ, 10000, 1000, (uintptr_t)b.buf + 8192 + 1500,
		b.mr->rkey);
	wr[0].next = &wr[1];
	uint64_t d0 = stats(&a).direct_rd;
	CHECK_OK(ibv_post_send(a.qp, wr, &bad));
	CHECK_EQ(wait_wc(a.cq).wr_id, 0);
	struct ibv_wc wc = wait_wc(a.cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 10000);
	CHECK(!memcmp(a.buf + 10000, a.buf + 1500, 1000));
	CHECK_EQ(stats(&a).direct_rd, d0);
	/* once that is acknowledged, the next READ is read directly */
	post(&a, IBV_WR_RDMA_READ, 20000, 64, (uintptr_t)b.buf + 8192, b.mr->rkey);
	CHECK_EQ(wait_wc(a.cq).status, IBV_WC_SUCCESS);
	CHECK(!memcmp(a.buf + 20000, a.buf, 64));
	CHECK_EQ(stats(&a).direct_rd, d0 + 1);
	pair_close(&a, &b);
	fprintf(stderr, "ok   read_ordering\n");
}

struct streamer {
	struct side *a;
	uint64_t raddr;
	uint32_t rkey;
	_Atomic uint64_t done;
	_Atomic bool bad; /* a successful READ returned bytes written after dereg */
	enum ibv_wc_status last;
};

static void *stream(void *arg)
{
	struct streamer *st = arg;
	for (;;) {
		memset(st->a->buf, 0, 256);
		post(st->a, IBV_WR_RDMA_READ, 0, 256, st->raddr, st->rkey);
		struct ibv_wc wc = wait_wc(st->a->cq);
		st->last = wc.status;
		if (wc.status != IBV_WC_SUCCESS)
			return NULL;
		for (int i = 0; i < 256; i++)
			if (st->a->buf[i] != 0x11)
				atomic_store(&st->bad, true);
		atomic_fetch_add(&st->done, 1);
	}
}

static void read_dereg(void)
{
	for (int round = 0; round < 10; round++) {
		struct side a, b;
		pair_open(&a, &b, RW, 4);
		warm(&a, &b);
		memset(b.buf, 0x11, BUF);
		struct streamer st = {
		    .a = &a, .raddr = (uintptr_t)b.buf + 4096, .rkey = b.mr->rkey};
		uint64_t d0 = stats(&a).direct_rd;
		pthread_t t;
		CHECK_OK(pthread_create(&t, NULL, stream, &st));
		uint64_t until = swv_now_ns() + LIMIT;
		while (atomic_load(&st.done) < 50 + (uint64_t)round * 20)
			CHECK(swv_now_ns() < until);
		CHECK_OK(ibv_dereg_mr(b.mr));
		b.mr = NULL;
		/* the buffer is the application's again: reused at once */
		memset(b.buf, 0xee, BUF);
		CHECK_OK(pthread_join(t, NULL));
		CHECK(!atomic_load(&st.bad));
		/* refused by the responder, or (a READ read just before the dereg whose
		 * request the responder then refused: its QP went to ERR) the next one
		 * finds nobody answering */
		CHECK(st.last == IBV_WC_REM_ACCESS_ERR || st.last == IBV_WC_RETRY_EXC_ERR);
		CHECK(stats(&a).direct_rd > d0);
		pair_close(&a, &b);
	}
	fprintf(stderr, "ok   read_dereg\n");
}

/* A READ_REQUEST flagged placed, from a's endpoint to b's QP at b's expected PSN. */
static void send_forged_read(struct side *a, struct side *b, uint32_t psn, uint32_t rkey, bool udp)
{
	struct swv_pkt p = {.opcode = SWV_OP_RC | SWV_OP_READ_REQUEST,
			    .dqpn = b->qp->qp_num,
			    .psn = psn,
			    .ackreq = true,
			    .placed = true,
			    .reth_va = (uintptr_t)b->buf,
			    .reth_rkey = rkey,
			    .reth_len = 8};
	p.flags = swv_opcode(p.opcode)->flags;
	uint8_t pkt[SWV_MAX_HDR_LEN + 8];
	size_t h = swv_pkt_build_hdr(pkt, &p);
	CHECK(h > 0);
	size_t t = swv_pkt_build_tail(pkt, h, NULL, 0, pkt + h);
	CHECK(t > 0);
	struct sockaddr_in to = swv_ep_sockaddr(port0(b));
	if (udp) {
		CHECK_EQ(sendto(port0(a)->fd, pkt, h + t, 0, (struct sockaddr *)&to, sizeof(to)),
			 (ssize_t)(h + t));
	} else {
		struct iovec iov = {pkt, h + t};
		CHECK_OK(swv_ep_send(port0(a), &to, &iov, 1));
	}
}

static void read_forged(void)
{
	/* through the ring, a bad rkey: refused as any READ */
	struct side a, b;
	pair_open(&a, &b, RW, 4);
	warm(&a, &b);
	struct qstat q0 = qstat(&b);
	uint64_t tx0 = stats(&a).tx_pkts;
	send_forged_read(&a, &b, q0.epsn, b.mr->rkey ^ 0x80, false);
	CHECK_EQ(stats(&a).tx_pkts, tx0 + 1); /* it went through the ring */
	uint64_t until = swv_now_ns() + LIMIT;
	while (qstat(&b).err_naks == q0.err_naks)
		CHECK(swv_now_ns() < until);
	CHECK_EQ(qstat(&b).resp_placed_reads, 0);
	CHECK_EQ(cntr(b.rr, true), 1);
	CHECK_EQ(cntr(b.rr, false), 0);
	pair_close(&a, &b);

	/* over UDP, a good rkey: nobody can have read it, so it is a plain READ */
	pair_open(&a, &b, RW, 4);
	warm(&a, &b);
	q0 = qstat(&b);
	send_forged_read(&a, &b, q0.epsn, b.mr->rkey, true);
	until = swv_now_ns() + LIMIT;
	while (qstat(&b).epsn == q0.epsn)
		CHECK(swv_now_ns() < until);
	while (cntr(b.rr, false) != 1)
		CHECK(swv_now_ns() < until);
	CHECK_EQ(qstat(&b).resp_placed_reads, 0);
	CHECK_EQ(qstat(&b).err_naks, q0.err_naks);
	pair_close(&a, &b);
	fprintf(stderr, "ok   read_forged\n");
}

/* The inbox names a pid that is no longer its owner's (the owner died and the pid was
 * reused): here a child of fork, whose copy of b's buffer holds the old bytes. Nothing
 * may be read from (or placed into) that process: the READ returns b's bytes. */
static void read_pid_reused(void)
{
	struct side a, b;
	pair_open(&a, &b, RW, 4);
	memset(b.buf, 0x11, BUF);
	int go[2];
	CHECK_OK(pipe(go));
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		char c;
		close(go[1]);
		(void)!read(go[0], &c, 1); /* until the parent is done */
		_exit(0);
	}
	close(go[0]);
	swv_shm_test_set_owner_pid(port0(&b)->shm, pid);
	warm(&a, &b); /* a attaches to b's inbox now */
	memset(b.buf, 0x22, BUF);
	uint64_t d0 = stats(&a).direct_rd;
	post(&a, IBV_WR_RDMA_READ, 0, 64, (uintptr_t)b.buf + 128, b.mr->rkey);
	CHECK_EQ(wait_wc(a.cq).status, IBV_WC_SUCCESS);
	for (int i = 0; i < 64; i++)
		CHECK_EQ(a.buf[i], 0x22);
	CHECK_EQ(stats(&a).direct_rd, d0);
	close(go[1]);
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	swv_shm_test_set_owner_pid(port0(&b)->shm, getpid());
	pair_close(&a, &b);
	fprintf(stderr, "ok   read_pid_reused\n");
}

static void read_switch(void)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		setenv("SWVERBS_SHM_DIRECT", "0", 1);
		CHECK(!swv_shm_direct_enabled());
		struct side a, b;
		pair_open(&a, &b, RW, 4);
		CHECK(port0(&a)->shm); /* the ring stays */
		warm(&a, &b);
		fill(b.buf, 100, 5);
		for (int i = 0; i < 3; i++) {
			post(&a, IBV_WR_RDMA_READ, 0, 100, (uintptr_t)b.buf, b.mr->rkey);
			CHECK_EQ(wait_wc(a.cq).status, IBV_WC_SUCCESS);
			CHECK(!memcmp(a.buf, b.buf, 100));
		}
		CHECK_EQ(stats(&a).direct_rd, 0);
		CHECK_EQ(qstat(&a).req_placed_reads, 0);
		CHECK(stats(&a).tx_pkts > 0);
		CHECK_EQ(cntr(b.rr, false), 3);
		pair_close(&a, &b);
		_exit(0);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(stderr, "ok   read_switch\n");
}

int main(void)
{
	read_switch(); /* forks before the switch is read in this process */
	if (!swv_shm_direct_enabled()) {
		fprintf(stderr, "skip: the intra-host link or its direct placement is off\n");
		return 77;
	}
	read_placed();
	read_errors();
	read_local_errors();
	read_ordering();
	read_dereg();
	read_forged();
	read_pid_reused();
	return 0;
}
