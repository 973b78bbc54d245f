/*
 * Waiting for remote traffic, two processes, RC: the target learns about incoming
 * RDMA WRITEs only through its REMOTE_RDMA_WRITE counter's fd (epoll, armed
 * threshold and change mode) and swv_comp_cntr_wait, which must report a refused
 * write (bad R_Key) with EIO at once. Plain, then with 5% drop + duplicates.
 */
#include <sys/epoll.h>

#include "test_cntr_util.h"

#define N    500
#define SZ   3000u /* three packets at MTU 1024 */
#define TMO  20000

static void write_one(struct swvt *t, uint64_t j, uint32_t rkey)
{
	struct ibv_sge sge = {(uintptr_t)t->buf + (j % 256) * 4096, SZ, t->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad;
	wr.wr.rdma.remote_addr = t->remote.addr + (j % 256) * 4096;
	wr.wr.rdma.rkey = rkey;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
}

static bool readable(int ep, int ms)
{
	struct epoll_event ev;
	int n = epoll_wait(ep, &ev, 1, ms);
	CHECK(n >= 0);
	return n == 1;
}

static void drain(int fd)
{
	uint64_t v;
	CHECK_EQ(read(fd, &v, sizeof(v)), (ssize_t)sizeof(v));
}

static void side(struct swvt *t, void *arg)
{
	const bool init = t->role == 0;
	struct cntr_side s;
	cntr_attach_all(t, &s, IBV_COMP_CNTR_TYPE_WRS);
	swvt_connect(t);
	struct ibv_comp_cntr *wr = s.c[K_WR], *rwr = s.c[K_RWR];

	/* 1. Armed threshold: one event, when all N writes have landed. */
	int fd = -1, ep = -1;
	if (!init) {
		fd = swv_comp_cntr_get_fd(rwr);
		CHECK(fd >= 0);
		ep = epoll_create1(0);
		CHECK(ep >= 0);
		struct epoll_event ev = {.events = EPOLLIN};
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) ? errno : 0);
		CHECK_OK(swv_comp_cntr_arm(rwr, N));
		CHECK(!readable(ep, 0));
	}
	swvt_barrier(t);
	if (init) {
		for (uint64_t j = 0; j < 256; j++)
			swvt_fill(t->buf + j * 4096, SZ, 7000 + (uint32_t)j);
		for (uint64_t j = 0; j < N; j++) {
			if (j >= 128)
				CHECK_OK(swv_comp_cntr_wait(wr, j - 127, TMO));
			write_one(t, j, t->remote.rkey);
		}
		CHECK_OK(swv_comp_cntr_wait(wr, N, TMO));
	} else {
		CHECK(readable(ep, TMO));
		CHECK_EQ(swvt_cntr_read(rwr), N); /* armed at N and nothing else is coming */
		for (uint64_t j = 0; j < 256; j++)
			CHECK_EQ(swvt_verify(t->buf + j * 4096, SZ, 7000 + (uint32_t)j), (size_t)-1);
		drain(fd);
		CHECK(!readable(ep, 0));
	}
	swvt_barrier(t);

	/* 2. Change mode: one write at a time, each makes the fd readable. */
	if (!init)
		CHECK_OK(swv_comp_cntr_arm(rwr, 0));
	swvt_barrier(t);
	for (uint64_t i = 1; i <= 20; i++) {
		if (init) {
			write_one(t, i, t->remote.rkey);
			CHECK_OK(swv_comp_cntr_wait(wr, N + i, TMO));
		} else {
			CHECK(readable(ep, TMO));
			drain(fd);
			/* readiness came from this write: the count already includes it */
			CHECK_EQ(swvt_cntr_read(rwr), N + i);
		}
		swvt_barrier(t);
	}

	/* 3. A refused write ends a wait with EIO, before its threshold. */
	const uint64_t base = N + 20, M = 50;
	swvt_barrier(t);
	if (init) {
		for (uint64_t j = 0; j < M; j++)
			write_one(t, j, t->remote.rkey);
		CHECK_OK(swv_comp_cntr_wait(wr, base + M, TMO));
		uint64_t e0 = swvt_cntr_read_err(wr);
		write_one(t, 0, t->remote.rkey ^ 0x3c3c0000u);
		/* The initiator's own RDMA_WRITE counter reports the NAK (or, under loss,
		 * the exhausted retries) the same way. The error may be counted before the
		 * wait starts: wait_ex with the count read before posting catches both. */
		CHECK_EQ(swv_comp_cntr_wait_ex(wr, base + M + 1, e0, TMO), EIO);
		CHECK_EQ(swvt_cntr_read_err(wr), 1);
	} else {
		uint64_t t0 = swvt_now_ms();
		/* no error had been counted before: base 0 */
		CHECK_EQ(swv_comp_cntr_wait_ex(rwr, base + M + 1000, 0, TMO), SWV_COMP_CNTR_WAIT_ERROR);
		CHECK(swvt_now_ms() - t0 < TMO);
		CHECK_EQ(swvt_cntr_read(rwr), base + M);
		CHECK_EQ(swvt_cntr_read_err(rwr), 1);
		close(ep);
	}
	swvt_barrier(t);
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.stop_at = IBV_QPS_INIT;
	o.retry_cnt = 3;
	return cntr_run_plain_and_faulty(&o, side, side, NULL);
}
