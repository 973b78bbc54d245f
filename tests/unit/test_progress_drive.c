/*
 * Whoever waits makes progress (docs/design.md). Two contexts of the first device: the
 * initiator's QPs write to QPs of a target context whose application never calls the
 * library. With the initiator's progress thread kept from receiving (the internal
 * test hook swv_progress_test_norx), each way of learning of completions -- a
 * ibv_read_comp_cntr loop, swv_comp_cntr_wait with a timeout, ibv_poll_cq, the
 * extended CQ's start_poll -- must still see RC WRITEs complete, receiving the ACKs
 * itself. And an empty poll on a context with nothing to receive makes no receive
 * system call at all (the receive-call statistic stays put), while one with work in
 * flight does. And an application polling in a tight loop does not keep the progress
 * thread waiting for the work lock (a mutex is not fair: the poller re-took it before
 * the woken thread ran, and the thread's timers waited as long as the loop ran).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cntr.h"
#include "core/comp_cntr.h"
#include "core/context.h"
#include "inproc.h"
#include "util/clock.h"

#define BUF	65536
#define NWR	100 /* WRITEs per round, below max_send_wr */
#define WR_LEN	64
#define HANG_NS 60000000000ull /* hang guard */

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
};

static struct side ini, tgt;
static struct ibv_cq_ex *cqx;		   /* initiator: extended CQ for the qx pair */
static struct ibv_qp *qa, *qb, *qxa, *qxb; /* a->b plain CQ pair, xa->xb extended CQ */
static struct ibv_comp_cntr *cw;	   /* qa's RDMA WRITE counter */
static unsigned round_no;

static struct swv_progress *ipr(void)
{
	return &to_swv_ctx(ini.ctx)->progress;
}

static uint64_t app_calls(void)
{
	return atomic_load(&ipr()->rx_calls_app);
}

static uint64_t thread_calls(void)
{
	return atomic_load(&ipr()->rx_calls_thread);
}

static void side_open(struct side *s)
{
	s->ctx = swvt_open_first_device();
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK_PTR(s->pd);
	s->cq = ibv_create_cq(s->ctx, 1024, NULL, NULL, 0);
	CHECK_PTR(s->cq);
	s->mr = swvt_reg_buf(
	    s->pd, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

static void side_close(struct side *s)
{
	swvt_dereg_buf(s->mr);
	CHECK_OK(ibv_destroy_cq(s->cq));
	CHECK_OK(ibv_dealloc_pd(s->pd));
	CHECK_OK(ibv_close_device(s->ctx));
}

static struct ibv_qp *rc_qp(struct side *s, struct ibv_cq *scq)
{
	struct ibv_qp_init_attr a = {
	    .send_cq = scq,
	    .recv_cq = s->cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 256, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &a);
	CHECK_PTR(qp);
	return qp;
}

/* NWR RDMA WRITEs of WR_LEN bytes from qp into the target buffer, each carrying this
 * round's byte pattern. */
static void post_writes(struct ibv_qp *qp, bool signaled)
{
	uint8_t *src = ini.mr->addr, pat = (uint8_t)(++round_no);
	memset(src, pat, (size_t)NWR * WR_LEN);
	for (unsigned i = 0; i < NWR; i++) {
		struct ibv_sge sge = {(uintptr_t)src + i * WR_LEN, WR_LEN, ini.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = i,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = signaled ? IBV_SEND_SIGNALED : 0},
				   *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)tgt.mr->addr + i * WR_LEN;
		wr.wr.rdma.rkey = tgt.mr->rkey;
		CHECK_OK(ibv_post_send(qp, &wr, &bad));
	}
}

/* Counting contract: the writes counted (or completed) are in the target's memory. */
static void check_placed(void)
{
	const uint8_t *dst = tgt.mr->addr;
	for (size_t i = 0; i < (size_t)NWR * WR_LEN; i++)
		CHECK_EQ(dst[i], (uint8_t)round_no);
}

/* A hang guard, not a timing assertion: says where things stood, then fails. */
static void hang_guard(uint64_t t0)
{
	if (swv_now_ns() - t0 < HANG_NS)
		return;
	fprintf(stderr, "stuck: sq_outstanding %lld muted %d receive calls app %llu thread %llu\n",
		(long long)atomic_load(&ipr()->sq_outstanding), (int)atomic_load(&ipr()->muted),
		(unsigned long long)app_calls(), (unsigned long long)thread_calls());
	exit(1);
}

/* ---- with the initiator's progress thread not receiving ---- */

static void test_norx_counter_read(void)
{
	uint64_t t0 = thread_calls(), a0 = app_calls(), base = swvt_cntr_read(cw);
	post_writes(qa, false);
	uint64_t start = swv_now_ns();
	while (swvt_cntr_read(cw) - base < NWR)
		hang_guard(start);
	CHECK_EQ(swvt_cntr_read(cw) - base, NWR);
	CHECK_EQ(swvt_cntr_read_err(cw), 0);
	check_placed();
	CHECK_EQ(thread_calls(), t0); /* the reader received the ACKs, not the thread */
	CHECK(app_calls() > a0);
}

static void test_norx_wait(void)
{
	uint64_t t0 = thread_calls(), base = swvt_cntr_read(cw);
	post_writes(qa, false);
	uint64_t start = swv_now_ns();
	int rc;
	/* Each call drives progress while it spins; asleep, nobody would. */
	while ((rc = swv_comp_cntr_wait(cw, base + NWR, 1)) == ETIMEDOUT)
		hang_guard(start);
	CHECK_EQ(rc, 0);
	/* A zero timeout still makes one receive pass (here: no more to do). */
	CHECK_EQ(swv_comp_cntr_wait(cw, base + NWR, 0), 0);
	check_placed();
	CHECK_EQ(thread_calls(), t0);
}

static void test_norx_poll_cq(void)
{
	uint64_t t0 = thread_calls();
	struct ibv_wc wc[16];
	unsigned got = 0;
	post_writes(qa, true);
	uint64_t start = swv_now_ns();
	while (got < NWR) {
		int n = ibv_poll_cq(ini.cq, 16, wc);
		CHECK(n >= 0);
		for (int i = 0; i < n; i++)
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
		got += (unsigned)n;
		hang_guard(start);
	}
	CHECK_EQ(got, NWR);
	check_placed();
	CHECK_EQ(thread_calls(), t0);
}

static void test_norx_cq_ex(void)
{
	uint64_t t0 = thread_calls();
	struct ibv_poll_cq_attr pa = {0};
	unsigned got = 0;
	post_writes(qxa, true);
	uint64_t start = swv_now_ns();
	while (got < NWR) {
		int rc = ibv_start_poll(cqx, &pa);
		if (rc == ENOENT) {
			hang_guard(start);
			continue;
		}
		CHECK_EQ(rc, 0);
		do {
			CHECK_EQ(cqx->status, IBV_WC_SUCCESS);
			got++;
		} while ((rc = ibv_next_poll(cqx)) == 0); /* next_poll drives too */
		CHECK_EQ(rc, ENOENT);
		ibv_end_poll(cqx);
		hang_guard(start);
	}
	CHECK_EQ(got, NWR);
	check_placed();
	CHECK_EQ(thread_calls(), t0);
}

/* ---- idle: no receive call ---- */

/* Polls until a long run of them made no receive call (readiness: packets received a
 * moment ago make receiving worthwhile for a while), then checks that many more empty
 * polls, counter reads and zero-timeout waits make none either. */
static void test_idle_no_syscall(void)
{
	struct ibv_wc wc;
	uint64_t start = swv_now_ns();
	/* What is still on its way (answers to probes of WRITEs completed since; packets
	 * the muted thread left queued) is processed first, on both ends: the quiet polls
	 * below then see only the hot window lapse, not a late packet arrive. */
	(void)swv_progress_settle(&to_swv_ctx(tgt.ctx)->progress, true);
	(void)swv_progress_settle(&to_swv_ctx(ini.ctx)->progress, true);
	for (unsigned quiet = 0; quiet < 1000;) {
		uint64_t c = app_calls();
		CHECK_EQ(ibv_poll_cq(ini.cq, 1, &wc), 0);
		quiet = app_calls() == c ? quiet + 1 : 0;
		hang_guard(start);
	}
	CHECK_EQ(atomic_load(&ipr()->sq_outstanding), 0);
	uint64_t a0 = app_calls(), p0 = atomic_load(&ipr()->app_passes);
	struct ibv_poll_cq_attr pa = {0};
	for (unsigned i = 0; i < 100000; i++) {
		CHECK_EQ(ibv_poll_cq(ini.cq, 1, &wc), 0);
		(void)swvt_cntr_read(cw);
		(void)swvt_cntr_read_err(cw);
	}
	for (unsigned i = 0; i < 1000; i++) {
		CHECK_EQ(ibv_start_poll(cqx, &pa), ENOENT);
		CHECK_EQ(swv_comp_cntr_wait(cw, UINT64_MAX, 0), ETIMEDOUT);
	}
	CHECK_EQ(app_calls(), a0);
	CHECK_EQ(atomic_load(&ipr()->app_passes), p0);
}

/* Work in flight makes an empty poll receive: a WRITE to a QP that never answers
 * (left in INIT) stays outstanding, so every empty poll makes a pass. A tight loop of
 * them holds the driver's lease, and the progress thread, woken by that QP's timers
 * (its tail-loss probes, from 1 ms on), mutes its sockets. The ACK timeout is 4.3 s
 * (timeout 20): retry_cnt 7 is finite, and the WRITE must stay outstanding through
 * the test even under a sanitizer on a loaded machine (8 x 4.3 s). The lease is made
 * 200 ms long here: with the real 100 us one, a thread that got the CPU only while the
 * polling loop was preempted (two busy cores, a sanitizer) found it lapsed at each
 * look and never muted before the ACK timeouts ran out. Then the application
 * stops calling the library altogether: the lease lapses and the thread must take
 * receiving back, completing WRITEs on the other QP by itself (watched through the
 * internal load, which drives nothing). Destroying the silent QP drops its WQE from
 * the outstanding count, and the context is idle again. */
static void test_inflight_then_takeover(void)
{
	struct ibv_qp *qs = rc_qp(&ini, ini.cq), *qdead = rc_qp(&tgt, tgt.cq);
	swvt_pair_to_init(qs);
	swvt_pair_to_init(qdead);
	swvt_pair_to_rtr(qs, qdead->qp_num);
	swvt_pair_to_rts(qs, 20);
	/* its source lies past what post_writes rewrites: probes resend it meanwhile */
	struct ibv_sge sge = {(uintptr_t)ini.mr->addr + BUF - 8, 8, ini.mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)tgt.mr->addr + BUF - 8;
	wr.wr.rdma.rkey = tgt.mr->rkey;
	CHECK_OK(ibv_post_send(qs, &wr, &bad));
	CHECK_EQ(atomic_load(&ipr()->sq_outstanding), 1);

	struct ibv_wc wc;
	swv_progress_test_lease(&to_swv_ctx(ini.ctx)->progress, 200000000ull);
	uint64_t a0 = app_calls(), start = swv_now_ns();
	for (unsigned i = 0; i < 1000; i++)
		CHECK_EQ(ibv_poll_cq(ini.cq, 1, &wc), 0);
	CHECK(app_calls() > a0); /* empty polls receive now */
	while (!atomic_load(&ipr()->muted)) {
		CHECK_EQ(ibv_poll_cq(ini.cq, 1, &wc), 0);
		hang_guard(start);
	}

	struct swv_comp_cntr *c = to_swv_cntr(cw);
	uint64_t base = swv_comp_cntr_load(c, false), t0 = thread_calls();
	post_writes(qa, false);
	start = swv_now_ns();
	while (swv_comp_cntr_load(c, false) - base < NWR) {
		usleep(100);
		hang_guard(start);
	}
	check_placed();
	CHECK(thread_calls() > t0);
	swv_progress_test_lease(&to_swv_ctx(ini.ctx)->progress, SWV_PROGRESS_LEASE_NS);

	CHECK_OK(ibv_destroy_qp(qs));
	CHECK_OK(ibv_destroy_qp(qdead));
	CHECK_EQ(atomic_load(&ipr()->sq_outstanding), 0);
}

static _Atomic bool spin_stop;
static _Atomic uint64_t spin_epoch; /* the thread's epoch at the spinner's first pass */

/* An application thread receiving in a tight loop, as a busy poller does. */
static void *spinner(void *arg)
{
	struct swv_context *c = arg;
	while (!atomic_load(&spin_stop))
		if (swv_progress_assist(&c->progress) >= 0) {
			atomic_store(&spin_epoch, atomic_load(&ipr()->epoch));
			break;
		}
	return NULL;
}

static void test_thread_not_starved(void)
{
	struct swv_context *c = to_swv_ctx(ini.ctx);
	swv_progress_release(&c->progress); /* no lease left by the tests before */
	swv_progress_test_hold(&c->progress);
	uint64_t e0 = atomic_load(&ipr()->epoch), start = swv_now_ns();
	swv_progress_kick(&c->progress, swv_now_ns()); /* the thread wakes and wants the lock */
	while (!atomic_load(&ipr()->thread_waiting)) {
		usleep(100);
		hang_guard(start);
	}
	pthread_t t;
	atomic_store(&spin_epoch, 0);
	atomic_store(&spin_stop, false);
	CHECK_OK(pthread_create(&t, NULL, spinner, c));
	usleep(1000); /* let it spin (either way: the check below does not depend on it) */
	swv_progress_test_release(&c->progress);
	while (!atomic_load(&spin_epoch)) {
		usleep(100);
		hang_guard(start);
	}
	atomic_store(&spin_stop, true);
	CHECK_OK(pthread_join(t, NULL));
	/* the poller's first pass came after the waiting thread's iteration */
	CHECK(atomic_load(&spin_epoch) > e0);
}

int main(void)
{
	side_open(&ini);
	side_open(&tgt);
	struct ibv_cq_init_attr_ex xa = {.cqe = 1024, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN};
	cqx = ibv_create_cq_ex(ini.ctx, &xa);
	CHECK_PTR(cqx);
	qa = rc_qp(&ini, ini.cq);
	qb = rc_qp(&tgt, tgt.cq);
	qxa = rc_qp(&ini, ibv_cq_ex_to_cq(cqx));
	qxb = rc_qp(&tgt, tgt.cq);
	cw = swvt_cntr_create(ini.ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE};
	CHECK_OK(ibv_qp_attach_comp_cntr(qa, cw, &at));
	swvt_pair_to_init(qa);
	swvt_pair_to_init(qb);
	swvt_pair_to_init(qxa);
	swvt_pair_to_init(qxb);
	swvt_pair_connect(qa, qb);
	swvt_pair_connect(qxa, qxb);

	test_idle_no_syscall(); /* connected, receive buffers registered, nothing sent */

	swv_progress_test_norx(&to_swv_ctx(ini.ctx)->progress, true);
	test_norx_counter_read();
	test_norx_wait();
	test_norx_poll_cq();
	test_norx_cq_ex();
	swv_progress_test_norx(&to_swv_ctx(ini.ctx)->progress, false);

	test_idle_no_syscall(); /* after traffic */
	test_inflight_then_takeover();
	test_idle_no_syscall();
	test_thread_not_starved();

	CHECK_OK(ibv_destroy_qp(qa));
	CHECK_OK(ibv_destroy_qp(qxa));
	CHECK_OK(ibv_destroy_qp(qb));
	CHECK_OK(ibv_destroy_qp(qxb));
	CHECK_OK(ibv_destroy_comp_cntr(cw));
	CHECK_OK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)));
	side_close(&ini);
	side_close(&tgt);
	return 0;
}
