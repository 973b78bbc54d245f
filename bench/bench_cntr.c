/*
 * bench_cntr: completion counters versus completion-queue polling.
 *
 * Two processes on one swverbs device (default: loopback), one RC connection. The
 * initiator streams RDMA WRITEs or SENDs with at most WINDOW in flight and learns
 * which finished in one of three ways:
 *   cq    every WR signaled; completions polled from the CQ (the baseline);
 *   cntr  WRs unsignaled; an attached counter read with ibv_read_comp_cntr in a loop;
 *   wait  WRs unsignaled; swv_comp_cntr_wait_ex sleeps until room frees up.
 * For each op and size (8 B, 4 KiB, 64 KiB) it prints message rate, bandwidth and CPU
 * time per operation (posting thread, and the whole initiator process including its
 * progress thread), each also as a ratio to the cq baseline of the same run.
 * Then: the cost of ibv_read_comp_cntr against a plain 64-bit load.
 *
 *   usage: bench_cntr [-d device] [-q]     (-q: fewer operations, for a smoke run)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>

#include "bench_clock.h"

int swv_bench_empty_read(struct ibv_comp_cntr *c, uint64_t *value); /* anchor_empty.c */
#include "rc_conn.h"

#define WHO	"bench_cntr" /* in error messages */
#define WINDOW  128
#define RQ      256
#define MAXSIZE 65536u
#define TMO_MS  60000

enum mode { M_CQ, M_CNTR, M_WAIT, NMODES };
static const char *const mode_name[NMODES] = {"cq", "cntr", "wait"};

static void die(const char *what, int err)
{
	rc_die(WHO, what, err);
}

struct side {
	struct rc_conn rc;
	struct ibv_comp_cntr *c_send, *c_write, *c_recv;
	int sock;
};

/* One RC QP on a buffer of RQ slots of MAXSIZE, with a counter for each of SEND, RDMA
 * WRITE and RECV attached in RESET. */
static void setup(struct side *s, const char *devname)
{
	int ret;
	struct rc_conn_attr ra = {
	    .dev = devname,
	    .send_cqe = 4096,
	    .recv_cqe = 4096,
	    .len = (size_t)RQ * MAXSIZE,
	    .mr_access = IBV_ACCESS_REMOTE_WRITE,
	    .qp_access = IBV_ACCESS_REMOTE_WRITE,
	    .rd_atomic = 1,
	    .cap = {.max_send_wr = 256, .max_recv_wr = RQ, .max_send_sge = 1, .max_recv_sge = 1},
	};
	rc_conn_open(&s->rc, WHO, &ra);
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	s->c_send = ibv_create_comp_cntr(s->rc.ctx, &ca);
	s->c_write = ibv_create_comp_cntr(s->rc.ctx, &ca);
	s->c_recv = ibv_create_comp_cntr(s->rc.ctx, &ca);
	if (!s->c_send || !s->c_write || !s->c_recv)
		die("create_comp_cntr", errno);
	struct ibv_qp_attach_comp_cntr_attr a = {.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_SEND};
	if ((ret = ibv_qp_attach_comp_cntr(s->rc.qp, s->c_send, &a)))
		die("attach", ret);
	a.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE;
	if ((ret = ibv_qp_attach_comp_cntr(s->rc.qp, s->c_write, &a)))
		die("attach", ret);
	a.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_RECV;
	if ((ret = ibv_qp_attach_comp_cntr(s->rc.qp, s->c_recv, &a)))
		die("attach", ret);
}

/* One measurement, described to the target before it starts. */
struct job {
	uint32_t op; /* IBV_WR_RDMA_WRITE or IBV_WR_SEND; 0xffffffff = quit */
	uint32_t size;
	uint64_t count;
};

struct result {
	double rate, mibs, thr_us, proc_us;
};

static uint64_t cntr_value(struct ibv_comp_cntr *c)
{
	uint64_t v;
	ibv_read_comp_cntr(c, &v);
	return v;
}

/* Target for SEND: keep RQ receives posted, reposting as the CQ drains. */
static void post_recv(struct side *s, uint64_t i, uint32_t size)
{
	struct ibv_sge sge = {(uintptr_t)s->rc.buf + (i % RQ) * MAXSIZE, size, s->rc.mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
	int ret = ibv_post_recv(s->rc.qp, &wr, &bad);
	if (ret)
		die("post_recv", ret);
}

static void target_loop(struct side *s)
{
	for (;;) {
		struct job j;
		rc_xfer(WHO, s->sock, &j, sizeof(j), false);
		if (j.op == 0xffffffffu)
			return;
		uint64_t posted = 0, got = 0;
		if (j.op == IBV_WR_SEND)
			for (; posted < RQ && posted < j.count; posted++)
				post_recv(s, posted, j.size);
		char ok = 'r';
		rc_xfer(WHO, s->sock, &ok, 1, true);
		if (j.op == IBV_WR_SEND) {
			struct ibv_wc wc[64];
			uint64_t t_end = clock_ns(CLOCK_MONOTONIC) + (uint64_t)TMO_MS * 1000000ull;
			while (got < j.count) {
				int n = ibv_poll_cq(s->rc.rcq, 64, wc);
				if (n < 0)
					die("poll_cq", EIO);
				for (int i = 0; i < n; i++) {
					if (wc[i].status != IBV_WC_SUCCESS)
						die("recv completion", EIO);
					got++;
					if (posted < j.count)
						post_recv(s, posted++, j.size);
				}
				if (!n && clock_ns(CLOCK_MONOTONIC) > t_end)
					die("target: receives missing", ETIMEDOUT);
			}
		}
		ok = 'd';
		rc_xfer(WHO, s->sock, &ok, 1, true);
	}
}

static struct result run(struct side *s, const struct job *j, enum mode m)
{
	char ack;
	rc_xfer(WHO, s->sock, (void *)j, sizeof(*j), true);
	rc_xfer(WHO, s->sock, &ack, 1, false); /* receives posted */

	struct ibv_comp_cntr *c = j->op == IBV_WR_SEND ? s->c_send : s->c_write;
	const uint64_t base = cntr_value(c);
	struct ibv_wc wc[64];
	uint64_t done = 0;
	const uint64_t t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID),
		       p0 = proc_cpu_ns();
	const uint64_t t_end = t0 + (uint64_t)TMO_MS * 1000000ull;

	for (uint64_t i = 0; i < j->count || done < j->count;) {
		/* post while the window has room */
		while (i < j->count && i - done < WINDOW) {
			struct ibv_sge sge = {(uintptr_t)s->rc.buf + (i % RQ) * MAXSIZE, j->size,
					      s->rc.mr->lkey};
			struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1,
						 .opcode = (enum ibv_wr_opcode)j->op,
						 .send_flags = m == M_CQ ? IBV_SEND_SIGNALED : 0},
					   *bad;
			wr.wr.rdma.remote_addr = s->rc.peer.addr + (i % RQ) * MAXSIZE;
			wr.wr.rdma.rkey = s->rc.peer.rkey;
			int ret = ibv_post_send(s->rc.qp, &wr, &bad);
			if (ret)
				die("post_send", ret);
			i++;
		}
		/* learn what finished */
		if (m == M_CQ) {
			int n = ibv_poll_cq(s->rc.scq, 64, wc);
			if (n < 0)
				die("poll_cq", EIO);
			for (int k = 0; k < n; k++)
				if (wc[k].status != IBV_WC_SUCCESS)
					die("send completion", EIO);
			done += (uint64_t)n;
		} else if (m == M_CNTR) {
			done = cntr_value(c) - base;
		} else {
			/* sleep until the oldest in-flight WR (or the last) completed */
			uint64_t want = i < j->count ? i - WINDOW + 1 : j->count;
			int ret = swv_comp_cntr_wait_ex(c, base + want, 0, TMO_MS);
			if (ret)
				die("swv_comp_cntr_wait", ret);
			done = cntr_value(c) - base;
		}
		if (clock_ns(CLOCK_MONOTONIC) > t_end)
			die("initiator: completions missing", ETIMEDOUT);
	}
	const uint64_t t = clock_ns(CLOCK_MONOTONIC) - t0,
		       ct = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0, pt = proc_cpu_ns() - p0;
	rc_xfer(WHO, s->sock, &ack, 1, false); /* target done */

	uint64_t errs;
	ibv_read_err_comp_cntr(c, &errs);
	if (errs)
		die("errors counted", EIO);
	struct result r = {
		.rate = (double)j->count / ((double)t / 1e9),
		.mibs = (double)j->count * j->size / ((double)t / 1e9) / (1024.0 * 1024.0),
		.thr_us = (double)ct / 1e3 / (double)j->count,
		.proc_us = (double)pt / 1e3 / (double)j->count,
	};
	return r;
}

/* Best of 'reps' by message rate: less noise on a shared machine. */
static struct result best(struct side *s, const struct job *j, enum mode m, int reps)
{
	struct result b = {0};
	for (int k = 0; k < reps; k++) {
		struct result r = run(s, j, m);
		if (r.rate > b.rate)
			b = r;
	}
	return b;
}

static void bench_reads(void)
{
	const uint64_t N = 200000000ull;
	struct ibv_context *ctx = rc_open_device(WHO, NULL);
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(ctx, &ca);
	_Alignas(64) static uint64_t appmem[8];
	struct swv_comp_cntr_init_attr_ext xa = {.type = IBV_COMP_CNTR_TYPE_WRS,
						 .comp_count_addr = &appmem[0]};
	struct ibv_comp_cntr *ac = swv_create_comp_cntr_ext(ctx, &xa);
	if (!c || !ac)
		die("create_comp_cntr", errno);
	ibv_set_comp_cntr(c, 1);
	ibv_set_comp_cntr(ac, 1);

	volatile uint64_t plain = 1;
	uint64_t sum = 0, v;
	uint64_t t0 = clock_ns(CLOCK_MONOTONIC);
	for (uint64_t i = 0; i < N; i++)
		sum += plain;
	uint64_t t_plain = clock_ns(CLOCK_MONOTONIC) - t0;
	t0 = clock_ns(CLOCK_MONOTONIC);
	for (uint64_t i = 0; i < N; i++) {
		ibv_read_comp_cntr(c, &v);
		sum += v;
	}
	uint64_t t_read = clock_ns(CLOCK_MONOTONIC) - t0;
	volatile uint64_t *vp = &appmem[0];
	t0 = clock_ns(CLOCK_MONOTONIC);
	for (uint64_t i = 0; i < N; i++)
		sum += *vp;
	uint64_t t_app = clock_ns(CLOCK_MONOTONIC) - t0;
	t0 = clock_ns(CLOCK_MONOTONIC);
	for (uint64_t i = 0; i < N; i++) {
		swv_bench_empty_read(c, &v);
		sum += v;
	}
	uint64_t t_empty = clock_ns(CLOCK_MONOTONIC) - t0;
	if (sum != 4 * N)
		die("read check", EIO);
	printf("\ncounter reads (%" PRIu64 " each):\n", N);
	printf("  %-40s %6.2f ns/read  (1.00x)\n", "plain 64-bit load (volatile)", (double)t_plain / N);
	printf("  %-40s %6.2f ns/read  (%.2fx)\n", "ibv_read_comp_cntr", (double)t_read / N,
	       (double)t_read / t_plain);
	printf("  %-40s %6.2f ns/read  (%.2fx)\n", "app-memory counter, plain load",
	       (double)t_app / N, (double)t_app / t_plain);
	printf("  %-40s %6.2f ns/call  (%.2fx)\n", "empty exported function, same signature",
	       (double)t_empty / N, (double)t_empty / t_plain);
	printf("  ibv_read_comp_cntr / empty exported function: %.2fx\n", (double)t_read / t_empty);
	ibv_destroy_comp_cntr(c);
	ibv_destroy_comp_cntr(ac);
	ibv_close_device(ctx);
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	bool quick = false;
	int opt;
	while ((opt = getopt(argc, argv, "d:q")) != -1) {
		if (opt == 'd')
			dev = optarg;
		else if (opt == 'q')
			quick = true;
		else {
			fprintf(stderr, "usage: %s [-d device] [-q]\n", argv[0]);
			return 2;
		}
	}

	int ctl;
	pid_t pid = rc_fork(WHO, &ctl);
	struct side s = {0};
	setup(&s, dev);
	s.sock = ctl;
	rc_conn_exchange(&s.rc, s.sock, pid == 0);
	rc_conn_connect(&s.rc);
	if (pid == 0) {
		target_loop(&s);
		_exit(0);
	}

	static const uint32_t sizes[] = {8, 4096, 65536};
	static const uint32_t ops[] = {IBV_WR_RDMA_WRITE, IBV_WR_SEND};
	const char *shm = getenv("SWVERBS_SHM");
	printf("bench_cntr: window %d, RC, MTU 4096, %s; ratios are against 'cq' of the same row "
	       "group\n",
	       WINDOW, shm && !strcmp(shm, "0") ? "UDP (SWVERBS_SHM=0)" : "intra-host link");
	printf("%-10s %6s %-5s %11s %9s %9s %9s %9s %10s %10s\n", "op", "size", "mode", "msgs/s",
	       "MiB/s", "thr us/op", "all us/op", "rate x", "thr cpu x", "all cpu x");
	for (unsigned o = 0; o < 2; o++) {
		for (unsigned z = 0; z < 3; z++) {
			uint64_t count = sizes[z] <= 8 ? 40000 : sizes[z] <= 4096 ? 20000 : 2000;
			if (quick)
				count /= 10;
			struct job j = {.op = ops[o], .size = sizes[z], .count = count};
			(void)run(&s, &j, M_CQ); /* warm up */
			struct result r[NMODES];
			for (int m = 0; m < NMODES; m++)
				r[m] = best(&s, &j, (enum mode)m, quick ? 1 : 3);
			for (int m = 0; m < NMODES; m++)
				printf("%-10s %6u %-5s %11.0f %9.1f %9.2f %9.2f %9.2f %10.2f %10.2f\n",
				       ops[o] == IBV_WR_SEND ? "SEND" : "RDMA_WRITE", sizes[z],
				       mode_name[m], r[m].rate, r[m].mibs, r[m].thr_us, r[m].proc_us,
				       r[m].rate / r[M_CQ].rate, r[m].thr_us / r[M_CQ].thr_us,
				       r[m].proc_us / r[M_CQ].proc_us);
		}
	}
	struct job quit = {.op = 0xffffffffu};
	rc_xfer(WHO, s.sock, &quit, sizeof(quit), true);
	int st;
	waitpid(pid, &st, 0);
	bench_reads();
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
