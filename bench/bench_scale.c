/*
 * bench_scale: what many RC QPs on one context cost.
 *
 * Two processes; each opens the device once (one context, one PD, one CQ, one registered
 * buffer) and creates N RC QPs with the default caps of ibv_rc_pingpong-like programs
 * (send/recv queues of 128, one SGE), connected one to one.
 *   RSS      resident memory of the initiator with 1,000 connected QPs, against the
 *            same process with the context open and no QP;
 *   rate     8-byte RDMA WRITEs spread round-robin over 1 and over 64 QPs (window 32
 *            per QP, every 16th signaled, the CQ busy-polled): message rate, and the
 *            ratio 64 QPs / 1 QP, which should stay >= 0.9.
 * Both are measured on the intra-host link and with SWVERBS_SHM=0 (UDP) in one run;
 * each rate is the median of ROUNDS runs, with the spread.
 *
 *   usage: bench_scale [-n QPS] [-r ROUNDS] [-t SECONDS]     (defaults 1000 3 1.0)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "bench_clock.h"
#include "rc_conn.h"

#define WHO    "bench_scale"
#define QDEPTH 128
#define WIN    32 /* WRITEs in flight per QP */
#define SIG    16 /* one in SIG signaled */
#define BUFLEN (1u << 20)
#define MAXQPS 4096

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_qp *qp[MAXQPS];
	unsigned n;
};

struct hello {
	uint16_t lid;
	union ibv_gid gid;
	uint64_t addr;
	uint32_t rkey, n;
	uint32_t qpn[MAXQPS];
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

static void side_open(struct side *s)
{
	s->ctx = rc_open_device(WHO, NULL);
	if (ibv_query_port(s->ctx, 1, &s->port) || ibv_query_gid(s->ctx, 1, 0, &s->gid))
		rc_die(WHO, "query port", errno);
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 4096, NULL, NULL, 0);
	if (!s->pd || !s->cq || posix_memalign((void **)&s->buf, 4096, BUFLEN))
		rc_die(WHO, "pd/cq/buffer", errno ? errno : ENOMEM);
	memset(s->buf, 0, BUFLEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUFLEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->mr)
		rc_die(WHO, "reg_mr", errno);
}

static void qps_create(struct side *s, unsigned n)
{
	struct ibv_qp_init_attr ia = {.send_cq = s->cq,
				      .recv_cq = s->cq,
				      .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = QDEPTH,
					      .max_recv_wr = QDEPTH,
					      .max_send_sge = 1,
					      .max_recv_sge = 1}};
	for (s->n = 0; s->n < n; s->n++) {
		s->qp[s->n] = ibv_create_qp(s->pd, &ia);
		if (!s->qp[s->n])
			rc_die(WHO, "create_qp", errno);
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
					.port_num = 1,
					.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
		if (ibv_modify_qp(s->qp[s->n], &a,
				  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS))
			rc_die(WHO, "INIT", errno);
	}
}

static void qps_connect(struct side *s, const struct hello *peer)
{
	for (unsigned i = 0; i < s->n; i++) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
					.path_mtu = IBV_MTU_4096,
					.dest_qp_num = peer->qpn[i],
					.rq_psn = 0,
					.max_dest_rd_atomic = 1,
					.min_rnr_timer = 1};
		a.ah_attr.port_num = 1;
		a.ah_attr.dlid = peer->lid;
		if (s->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
			a.ah_attr.is_global = 1;
			a.ah_attr.grh.dgid = peer->gid;
			a.ah_attr.grh.hop_limit = 64;
		}
		if (ibv_modify_qp(s->qp[i], &a,
				  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				      IBV_QP_MIN_RNR_TIMER))
			rc_die(WHO, "RTR", errno);
		struct ibv_qp_attr b = {.qp_state = IBV_QPS_RTS,
					.sq_psn = 0,
					.timeout = 14,
					.retry_cnt = 7,
					.rnr_retry = 7,
					.max_rd_atomic = 1};
		if (ibv_modify_qp(s->qp[i], &b,
				  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
			rc_die(WHO, "RTS", errno);
	}
}

static void exchange(struct side *s, int sock, struct hello *peer, bool first)
{
	static struct hello me;
	me.lid = s->port.lid;
	me.gid = s->gid;
	me.addr = (uintptr_t)s->buf;
	me.rkey = s->mr->rkey;
	me.n = s->n;
	for (unsigned i = 0; i < s->n; i++)
		me.qpn[i] = s->qp[i]->qp_num;
	rc_xfer(WHO, sock, first ? &me : peer, sizeof(me), first);
	rc_xfer(WHO, sock, first ? peer : &me, sizeof(me), !first);
}

static void qps_destroy(struct side *s)
{
	for (unsigned i = 0; i < s->n; i++)
		if (ibv_destroy_qp(s->qp[i]))
			rc_die(WHO, "destroy_qp", errno);
	s->n = 0;
}

/* 8-byte WRITEs over the first n QPs for secs seconds; returns messages per second. */
static double write_rate(struct side *s, const struct hello *peer, unsigned n, double secs)
{
	unsigned posted[MAXQPS] = {0}, done[MAXQPS] = {0};
	uint64_t total = 0;
	uint64_t t0 = clock_ns(CLOCK_MONOTONIC), end = t0 + (uint64_t)(secs * 1e9), now = t0;
	struct ibv_sge sge = {(uintptr_t)s->buf, 8, s->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad;
	wr.wr.rdma.remote_addr = peer->addr;
	wr.wr.rdma.rkey = peer->rkey;
	bool stopping = false;
	for (;;) {
		for (unsigned q = 0; q < n && !stopping; q++) {
			while (posted[q] - done[q] < WIN) {
				wr.wr_id = q;
				wr.send_flags =
				    (posted[q] % SIG == SIG - 1) ? IBV_SEND_SIGNALED : 0;
				if (ibv_post_send(s->qp[q], &wr, &bad))
					rc_die(WHO, "post_send", errno);
				posted[q]++;
			}
		}
		struct ibv_wc wc[32];
		int k = ibv_poll_cq(s->cq, 32, wc);
		if (k < 0)
			rc_die(WHO, "poll_cq", EIO);
		for (int i = 0; i < k; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				rc_die(WHO, ibv_wc_status_str(wc[i].status), EIO);
			done[wc[i].wr_id] += SIG;
			total += SIG;
		}
		if (!stopping) {
			now = clock_ns(CLOCK_MONOTONIC);
			if (now >= end) {
				stopping = true; /* drain: wait for every signaled WR */
				end = now;
			}
		}
		if (stopping) {
			bool idle = true;
			for (unsigned q = 0; q < n; q++)
				idle &= posted[q] == done[q];
			if (idle)
				break;
		}
	}
	return (double)total / ((double)(end - t0) / 1e9);
}

/* One pair of processes on the path the environment selects; prints its rows. */
static void run_path(const char *path, unsigned nqps, int rounds, double secs)
{
	int sock;
	pid_t pid = rc_fork(WHO, &sock);
	struct side s = {0};
	struct hello peer;
	side_open(&s);
	long rss0 = rss_kib();
	qps_create(&s, nqps);
	exchange(&s, sock, &peer, pid != 0);
	qps_connect(&s, &peer);
	char go = 0;
	rc_xfer(WHO, sock, &go, 1, pid != 0); /* both connected */
	rc_xfer(WHO, sock, &go, 1, pid == 0);
	if (pid == 0) { /* target: the library's progress thread does the work */
		rc_xfer(WHO, sock, &go, 1, false);
		qps_destroy(&s);
		_exit(0);
	}
	long rss1 = rss_kib();
	double r1[16], r64[16];
	for (int i = 0; i < rounds; i++) {
		r1[i] = write_rate(&s, &peer, 1, secs);
		r64[i] = write_rate(&s, &peer, 64 < nqps ? 64 : nqps, secs);
	}
	long rss2 = rss_kib();
	rc_xfer(WHO, sock, &go, 1, true);
	qps_destroy(&s);
	int st;
	waitpid(pid, &st, 0);
	qsort(r1, (size_t)rounds, sizeof(double), cmp_double);
	qsort(r64, (size_t)rounds, sizeof(double), cmp_double);
	double m1 = r1[rounds / 2], m64 = r64[rounds / 2];
	printf("%-4s RSS: context alone %ld KiB, with %u connected RC QPs %ld KiB (+%.1f KiB per "
	       "QP), after the traffic %ld KiB\n",
	       path, rss0, nqps, rss1, (double)(rss1 - rss0) / nqps, rss2);
	printf("%-4s 8 B WRITE rate, 1 QP:   %10.0f msg/s (%.0f..%.0f)\n", path, m1, r1[0],
	       r1[rounds - 1]);
	printf("%-4s 8 B WRITE rate, 64 QPs: %10.0f msg/s (%.0f..%.0f)  64/1 = %.2fx  [>= 0.9]\n",
	       path, m64, r64[0], r64[rounds - 1], m64 / m1);
}

int main(int argc, char **argv)
{
	unsigned nqps = 1000;
	int rounds = 3, o;
	double secs = 1.0;
	while ((o = getopt(argc, argv, "n:r:t:")) != -1) {
		if (o == 'n')
			nqps = (unsigned)atoi(optarg);
		else if (o == 'r')
			rounds = atoi(optarg);
		else if (o == 't')
			secs = atof(optarg);
		else {
			fprintf(stderr, "usage: %s [-n QPS] [-r ROUNDS] [-t SECONDS]\n", argv[0]);
			return 2;
		}
	}
	if (nqps < 64 || nqps > MAXQPS || rounds < 1 || rounds > 16 || secs <= 0) {
		fprintf(stderr, "%s: -n 64..%d, -r 1..16, -t > 0\n", WHO, MAXQPS);
		return 2;
	}
	printf("bench_scale: %u RC QPs per context, window %d per QP, median of %d\n", nqps, WIN,
	       rounds);
	const char *paths[2][2] = {{"shm", "1"}, {"udp", "0"}};
	for (int p = 0; p < 2; p++) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0)
			rc_die(WHO, "fork", errno);
		if (pid == 0) { /* SWVERBS_SHM is read once per process: a fresh one per path */
			setenv("SWVERBS_SHM", paths[p][1], 1);
			run_path(paths[p][0], nqps, rounds, secs);
			fflush(stdout);
			_exit(0);
		}
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
			rc_die(WHO, paths[p][0], EIO);
	}
	return 0;
}
