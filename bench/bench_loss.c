/*
 * bench_loss: how well RC keeps moving under injected loss, in one run.
 *
 * For each loss level -- none (two anchors, below), 1% and 5% drop, each with 2%
 * reordering (SWVERBS_FAULT, both processes) -- a fresh pair of processes connects one RC QP
 * (perftest's QP settings: ACK timeout 14, retry_cnt 7, MTU 4096) and measures, for a
 * fixed time each:
 *   rate   64-byte RDMA WRITEs, 256 in flight, one in 32 signaled: messages/s
 *   write  64 KiB RDMA WRITEs, 16 in flight: MiB/s
 *   read   64 KiB RDMA READs, 16 in flight: MiB/s
 * Two anchors: between two processes of one host a lossless QP travels over the
 * intra-host link (shared memory), while the loss levels cannot -- the fault injector
 * sits on the UDP path, and a device with SWVERBS_FAULT set does not attach the
 * intra-host link. So "lossless, UDP" runs through the injector with nothing injected:
 * the same link as the loss levels, the anchor of the loss-recovery ratio ("x UDP");
 * "lossless, intra-host" is what the same pair moves without the injector ("x
 * intra-host": link and loss together).
 * Every level runs -r times (default 3) in turn; the table prints the median, the
 * spread (min..max) and the median's ratios to the two lossless medians of the run.
 * The goals: rate and bandwidth >= 0.5x lossless at 1%, >= 0.25x at 5%.
 * A WR that fails (for instance RETRY_EXC_ERR) fails the benchmark.
 *
 *   usage: bench_loss [-d device] [-t seconds] [-r repeats] [-o test] [-l level]
 * -o 0/1/2 runs only rate/write/read, -l 2/3 only the 1%/5% level (with the two
 * anchors): quicker looks while tuning.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "bench_clock.h"
#include "rc_conn.h"

#define WHO	"bench_loss"
#define BUF	(4u << 20)
#define SLOTS	64 /* BUF / 64 KiB */
#define DEPTH	256
#define SIG	32
#define TMO_NS	(60ull * 1000000000ull)
#define MAXREP	15

enum test { T_RATE, T_WRITE, T_READ, NTESTS };
static const char *const test_name[NTESTS] = {"rate (64 B WRITE)", "write 64 KiB",
					      "read 64 KiB"};
static const char *const test_unit[NTESTS] = {"msg/s", "MiB/s", "MiB/s"};
static const struct {
	enum ibv_wr_opcode op;
	uint32_t size, depth, sig;
} test_shape[NTESTS] = {
	{IBV_WR_RDMA_WRITE, 64, DEPTH, SIG},
	{IBV_WR_RDMA_WRITE, 65536, 16, 1},
	{IBV_WR_RDMA_READ, 65536, 16, 1},
};

enum { L_SHM, L_UDP, NLEVELS = 4 }; /* the two lossless anchors, then 1% and 5% */
static const char *const level_name[NLEVELS] = {"lossless, intra-host", "lossless, UDP", "1% drop",
						"5% drop"};
/* L_UDP: an injector that injects nothing puts the pair on the UDP link */
static const char *const level_spec[NLEVELS] = {NULL, "seed=%u", "seed=%u,drop=1,reorder=2",
						"seed=%u,drop=5,reorder=2"};

static double seconds = 1.0;
static int only_test = -1, only_level = -1;

static void die(const char *what, int err)
{
	rc_die(WHO, what, err);
}

static void open_side(struct rc_conn *c, const char *dev, int ctl, bool first)
{
	struct rc_conn_attr a = {
		.dev = dev,
		.send_cqe = 2 * DEPTH,
		.len = BUF,
		.mr_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
		.qp_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
		.rd_atomic = 16,
		.cap = {.max_send_wr = DEPTH, .max_recv_wr = 1, .max_send_sge = 1,
			.max_recv_sge = 1},
	};
	a.dev = dev;
	rc_conn_open(c, WHO, &a);
	rc_conn_exchange(c, ctl, first);
	rc_conn_connect(c);
}

/* One test for 'seconds': a window of WRs kept full, every completion checked. */
static double run_test(struct rc_conn *c, enum test t)
{
	const uint32_t size = test_shape[t].size, depth = test_shape[t].depth;
	const uint32_t sig = test_shape[t].sig;
	struct ibv_wc wc[64];
	uint64_t posted = 0, done = 0;
	uint64_t t0 = clock_ns(CLOCK_MONOTONIC), t_stop = t0 + (uint64_t)(seconds * 1e9);
	uint64_t t_dead = t0 + TMO_NS, now = t0;
	bool stopping = false;

	while (!stopping || done < posted) {
		while (!stopping && posted - done < depth) {
			bool last = (posted & 15) == 0 && clock_ns(CLOCK_MONOTONIC) >= t_stop;
			uint32_t slot = (uint32_t)(posted % SLOTS);
			struct ibv_sge sge = {(uintptr_t)c->buf + (uint64_t)slot * 65536, size,
					      c->mr->lkey};
			struct ibv_send_wr wr = {.wr_id = posted, .sg_list = &sge, .num_sge = 1,
						 .opcode = test_shape[t].op}, *bad;
			/* the stream ends on a signaled WR so that 'done' catches up */
			if (last || (posted + 1) % sig == 0)
				wr.send_flags = IBV_SEND_SIGNALED;
			wr.wr.rdma.remote_addr = c->peer.addr + (uint64_t)slot * 65536;
			wr.wr.rdma.rkey = c->peer.rkey;
			int rc = ibv_post_send(c->qp, &wr, &bad);
			if (rc)
				die("ibv_post_send", rc);
			posted++;
			stopping = last;
		}
		int n = ibv_poll_cq(c->scq, 64, wc);
		if (n < 0)
			die("ibv_poll_cq", EIO);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, WHO ": %s: WR %llu failed: %s\n", test_name[t],
					(unsigned long long)wc[i].wr_id,
					ibv_wc_status_str(wc[i].status));
				exit(1);
			}
			done = wc[i].wr_id + 1;
		}
		if (!n && (now = clock_ns(CLOCK_MONOTONIC)) > t_dead)
			die("completions missing", ETIMEDOUT);
	}
	double s = (double)(clock_ns(CLOCK_MONOTONIC) - t0) / 1e9;
	if (t == T_RATE)
		return (double)posted / s;
	return (double)posted * size / s / (1024.0 * 1024.0);
}

/* One pair of processes at one loss level; fills res[NTESTS]. */
static void run_level(const char *dev, int level, unsigned seed, double *res)
{
	char spec[64];
	if (level_spec[level]) {
		snprintf(spec, sizeof(spec), level_spec[level], seed);
		setenv("SWVERBS_FAULT", spec, 1); /* both processes: read at device open */
	} else {
		unsetenv("SWVERBS_FAULT");
	}
	int ctl;
	pid_t pid = rc_fork(WHO, &ctl);
	if (pid == 0) {
		/* target: its memory is written and read; it only waits for the end */
		struct rc_conn c;
		char b;
		alarm(600);
		open_side(&c, dev, ctl, true);
		rc_xfer(WHO, ctl, &b, 1, false);
		ibv_destroy_qp(c.qp);
		rc_conn_close(&c);
		_exit(0);
	}
	struct rc_conn c;
	open_side(&c, dev, ctl, false);
	for (int t = 0; t < NTESTS; t++)
		res[t] = only_test < 0 || t == only_test ? run_test(&c, (enum test)t) : 0;
	char b = 0;
	rc_xfer(WHO, ctl, &b, 1, true);
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		die("target failed", ECHILD);
	close(ctl);
	ibv_destroy_qp(c.qp);
	rc_conn_close(&c);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	int reps = 3, opt;

	while ((opt = getopt(argc, argv, "d:t:r:o:l:")) != -1) {
		if (opt == 'd') {
			dev = optarg;
		} else if (opt == 'o' && atoi(optarg) >= 0 && atoi(optarg) < NTESTS) {
			only_test = atoi(optarg);
		} else if (opt == 'l' && atoi(optarg) > L_UDP && atoi(optarg) < NLEVELS) {
			only_level = atoi(optarg);
		} else if (opt == 't' && atof(optarg) > 0) {
			seconds = atof(optarg);
		} else if (opt == 'r' && atoi(optarg) > 0 && atoi(optarg) <= MAXREP) {
			reps = atoi(optarg);
		} else {
			fprintf(
			    stderr,
			    "usage: %s [-d device] [-t seconds] [-r 1..%d] [-o 0..2] [-l 2..3]\n",
			    argv[0], MAXREP);
			return 2;
		}
	}
	double load[1] = {-1};
	(void)getloadavg(load, 1);
	printf(WHO ": RC, MTU 4096, ACK timeout 14, retry_cnt 7; %.1f s per test, %d runs per "
		   "level, %ld CPUs, load average %.2f at start\n",
	       seconds, reps, sysconf(_SC_NPROCESSORS_ONLN), load[0]);

	static double res[NLEVELS][NTESTS][MAXREP];
	for (int r = 0; r < reps; r++)
		for (int l = 0; l < NLEVELS; l++) {
			double one[NTESTS];
			if (only_level > 0 && l > L_UDP && l != only_level)
				continue;
			run_level(dev, l, 1000u + (unsigned)r * 10u + (unsigned)l, one);
			for (int t = 0; t < NTESTS; t++)
				res[l][t][r] = one[t];
		}
	printf("%-18s %-20s %14s %26s %8s %12s\n", "test", "loss", "median", "spread (min..max)",
	       "x UDP", "x intra-host");
	for (int t = 0; t < NTESTS; t++) {
		double med[NLEVELS];
		for (int l = 0; l < NLEVELS; l++) {
			double *v = res[l][t];
			qsort(v, (size_t)reps, sizeof(*v), cmp_double);
			med[l] = reps % 2 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2;
		}
		for (int l = 0; l < NLEVELS; l++)
			printf("%-18s %-20s %10.0f %-5s %11.0f..%-11.0f %7.3fx %11.3fx\n",
			       test_name[t], level_name[l], med[l], test_unit[t], res[l][t][0],
			       res[l][t][reps - 1], med[L_UDP] > 0 ? med[l] / med[L_UDP] : 0.0,
			       med[L_SHM] > 0 ? med[l] / med[L_SHM] : 0.0);
	}
	return 0;
}
