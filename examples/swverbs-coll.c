/*
 * swverbs-coll: an offloaded binomial-tree broadcast and a dissemination barrier built
 * from triggered RDMA WRITEs and completion counters (docs/counters.md, "Counters that
 * drive work"), and the same algorithms driven by the CPU (wait, then post) for
 * comparison.
 *
 * N processes on this machine (forked here, 2..8; QP numbers exchanged through shared
 * memory), each with one context, a full mesh of RC QPs for the broadcast and another
 * for the barrier, and counters:
 *   b_rwr  REMOTE_RDMA_WRITE of every broadcast QP: the buffer arrived;
 *   b_wr   RDMA_WRITE of every broadcast QP: the forwards were acknowledged;
 *   d_rwr[p] REMOTE_RDMA_WRITE of the barrier QP from rank p: p's message of the round
 *          in which p sends to us (in a dissemination barrier each peer sends us in one
 *          round only, so one counter per peer tells the rounds apart);
 *   go     the root's start signal (ibv_inc_comp_cntr).
 * Broadcast k (k = 0, 1, ...), triggered: every rank posts, up front, its WRITEs to its
 * tree children (threshold b_rwr >= k + 1; the root's on go), its barrier round 0 (when
 * its broadcast part is done: b_wr >= (k + 1) * children, or for a leaf b_rwr >= k + 1)
 * and every later round j (d_rwr[from j - 1] >= k + 1), then sleeps in one wait: the
 * last round's counter >= k + 1. The broadcast alternates between two buffers so that
 * broadcast k + 1 cannot overwrite what a rank still checks of broadcast k.
 *
 *   swverbs-coll [-n ranks] [-c]      check: every byte at every rank, both variants,
 *                                     8 B, 1000 B, 64 KiB, 1 MiB (the CI test)
 *   swverbs-coll [-n ranks] -b        benchmark: time per broadcast + barrier and CPU
 *                                     time per rank, triggered vs CPU-driven
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>

#define MAXR	8
#define MAXSIZE (1u << 20)
#define FLAGS	(2 * (size_t)MAXSIZE) /* barrier landing + source, after two buffers */
#define TMO_MS	60000

struct info {
	uint16_t lid;
	union ibv_gid gid;
	uint32_t qpn_b[MAXR], qpn_d[MAXR];
	uint64_t addr;
	uint32_t rkey;
};

/* One page of shared memory, set up before the fork. */
struct shared {
	pthread_barrier_t bar;
	int n;
	struct info info[MAXR];
	double cpu_s[MAXR]; /* per rank, of the last measured run */
	double wall_s;	    /* the root's, of the last measured run */
};

struct rank {
	int r, n;
	struct shared *sh;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct ibv_qp *qb[MAXR], *qd[MAXR];
	struct ibv_comp_cntr *b_rwr, *b_wr, *d_wr, *d_rwr[MAXR], *go, *g[4];
	uint64_t k;  /* broadcasts done so far */
	uint64_t kt; /* of them triggered: go and g[] move only in those */
	int children[MAXR], nchildren, rounds;
};

static _Noreturn void die(const struct rank *R, const char *what, int err)
{
	fprintf(stderr, "swverbs-coll: rank %d: %s: %s\n", R ? R->r : -1, what, strerror(err));
	exit(1);
}

#define OK(call)                                                                                   \
	do {                                                                                       \
		int _e = (call);                                                                   \
		if (_e)                                                                            \
			die(R, #call, _e);                                                         \
	} while (0)

static struct ibv_comp_cntr *new_cntr(struct rank *R)
{
	struct ibv_comp_cntr_init_attr a = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(R->ctx, &a);
	if (!c)
		die(R, "ibv_create_comp_cntr", errno);
	return c;
}

static void attach(struct rank *R, struct ibv_qp *qp, struct ibv_comp_cntr *c, uint32_t op)
{
	struct ibv_qp_attach_comp_cntr_attr a = {.op_mask = op};
	OK(ibv_qp_attach_comp_cntr(qp, c, &a));
}

static struct ibv_qp *new_qp(struct rank *R)
{
	struct ibv_qp_init_attr ia = {
	    .send_cq = R->cq,
	    .recv_cq = R->cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 64, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp *qp = ibv_create_qp(R->pd, &ia);
	if (!qp)
		die(R, "ibv_create_qp", errno);
	struct ibv_qp_attr at = {
	    .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	OK(ibv_modify_qp(qp, &at,
			 IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	return qp;
}

static void connect_qp(struct rank *R, struct ibv_qp *qp, const struct info *peer, uint32_t qpn)
{
	struct ibv_port_attr port;
	OK(ibv_query_port(R->ctx, 1, &port));
	struct ibv_qp_attr at = {
	    .qp_state = IBV_QPS_RTR,
	    .path_mtu = IBV_MTU_4096,
	    .dest_qp_num = qpn,
	    .rq_psn = 0,
	    .max_dest_rd_atomic = 1,
	    .min_rnr_timer = 1,
	    .ah_attr = {.dlid = peer->lid, .port_num = 1},
	};
	if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		at.ah_attr.is_global = 1;
		at.ah_attr.grh.dgid = peer->gid;
		at.ah_attr.grh.hop_limit = 64;
	}
	OK(ibv_modify_qp(qp, &at,
			 IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	struct ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS,
				  .timeout = 14,
				  .retry_cnt = 7,
				  .rnr_retry = 7,
				  .sq_psn = 0,
				  .max_rd_atomic = 1};
	OK(ibv_modify_qp(qp, &rts,
			 IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

static void setup(struct rank *R)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		die(R, "no RDMA device", ENODEV);
	R->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!R->ctx)
		die(R, "ibv_open_device", errno);
	R->pd = ibv_alloc_pd(R->ctx);
	R->cq = ibv_create_cq(R->ctx, 1024, NULL, NULL, 0);
	size_t len = FLAGS + 4096;
	R->buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!R->pd || !R->cq || R->buf == MAP_FAILED)
		die(R, "resources", ENOMEM);
	R->mr = ibv_reg_mr(R->pd, R->buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!R->mr)
		die(R, "ibv_reg_mr", errno);

	R->b_rwr = new_cntr(R);
	R->b_wr = new_cntr(R);
	R->d_wr = new_cntr(R);
	R->go = new_cntr(R);
	for (int j = 0; j < 4; j++)
		R->g[j] = new_cntr(R);
	struct info *me = &R->sh->info[R->r];
	for (int p = 0; p < R->n; p++) {
		if (p == R->r)
			continue;
		R->qb[p] = new_qp(R);
		R->qd[p] = new_qp(R);
		R->d_rwr[p] = new_cntr(R);
		attach(R, R->qb[p], R->b_rwr, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE);
		attach(R, R->qb[p], R->b_wr, IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE);
		attach(R, R->qd[p], R->d_rwr[p], IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE);
		attach(R, R->qd[p], R->d_wr, IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE);
		me->qpn_b[p] = R->qb[p]->qp_num;
		me->qpn_d[p] = R->qd[p]->qp_num;
	}
	struct ibv_port_attr port;
	OK(ibv_query_port(R->ctx, 1, &port));
	me->lid = port.lid;
	OK(ibv_query_gid(R->ctx, 1, 0, &me->gid));
	me->addr = (uintptr_t)R->buf;
	me->rkey = R->mr->rkey;
	pthread_barrier_wait(&R->sh->bar); /* everyone's info is out */
	for (int p = 0; p < R->n; p++) {
		if (p == R->r)
			continue;
		const struct info *pi = &R->sh->info[p];
		connect_qp(R, R->qb[p], pi, pi->qpn_b[R->r]);
		connect_qp(R, R->qd[p], pi, pi->qpn_d[R->r]);
	}
	pthread_barrier_wait(&R->sh->bar); /* everyone is connected */

	/* Binomial tree rooted at 0: the children of r are r + m for the powers of two
	 * m > r (farthest subtree first); the parent is r minus its highest bit. */
	for (int m = 1; m < R->n; m <<= 1)
		R->rounds++;
	for (int m = 1 << (R->rounds - 1); m > R->r && m >= 1; m >>= 1)
		if (R->r + m < R->n)
			R->children[R->nchildren++] = R->r + m;
}

static void teardown(struct rank *R)
{
	for (int p = 0; p < R->n; p++) {
		if (p == R->r)
			continue;
		OK(ibv_destroy_qp(R->qb[p]));
		OK(ibv_destroy_qp(R->qd[p]));
		OK(ibv_destroy_comp_cntr(R->d_rwr[p]));
	}
	OK(ibv_destroy_comp_cntr(R->b_rwr));
	OK(ibv_destroy_comp_cntr(R->b_wr));
	OK(ibv_destroy_comp_cntr(R->d_wr));
	OK(ibv_destroy_comp_cntr(R->go));
	for (int j = 0; j < 4; j++)
		OK(ibv_destroy_comp_cntr(R->g[j]));
	OK(ibv_dereg_mr(R->mr));
	OK(ibv_destroy_cq(R->cq));
	OK(ibv_dealloc_pd(R->pd));
	OK(ibv_close_device(R->ctx));
}

/* A WRITE of len bytes at local offset off to the same offset at peer p, on qp. */
static void write_wr(struct rank *R, struct ibv_send_wr *wr, struct ibv_sge *sge, int p, size_t off,
		     size_t dst_off, uint32_t len)
{
	sge->addr = (uintptr_t)(R->buf + off);
	sge->length = len;
	sge->lkey = R->mr->lkey;
	memset(wr, 0, sizeof(*wr));
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->opcode = IBV_WR_RDMA_WRITE;
	wr->wr.rdma.remote_addr = R->sh->info[p].addr + dst_off;
	wr->wr.rdma.rkey = R->sh->info[p].rkey;
}

static void post(struct rank *R, struct ibv_qp *qp, struct ibv_send_wr *wr,
		 struct ibv_comp_cntr *trig, uint64_t thr)
{
	struct ibv_send_wr *bad;
	if (trig)
		OK(swv_post_send_triggered(qp, wr, trig, thr, &bad));
	else
		OK(ibv_post_send(qp, wr, &bad));
}

static void bcast_send(struct rank *R, int child, uint32_t size, struct ibv_comp_cntr *trig,
		       uint64_t thr)
{
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	size_t off = (R->k & 1) * (size_t)MAXSIZE;
	write_wr(R, &wr, &sge, child, off, off, size);
	post(R, R->qb[child], &wr, trig, thr);
}

static void barrier_send(struct rank *R, int j, struct ibv_comp_cntr *trig, uint64_t thr)
{
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	int to = (R->r + (1 << j)) % R->n;
	write_wr(R, &wr, &sge, to, FLAGS + 64, FLAGS, 8);
	post(R, R->qd[to], &wr, trig, thr);
}

static int from_of(const struct rank *R, int j)
{
	return (R->r - (1 << j) % R->n + R->n) % R->n;
}

static uint64_t val(struct ibv_comp_cntr *c)
{
	uint64_t v = 0;
	ibv_read_comp_cntr(c, &v);
	return v;
}

static void wait_cntr(struct rank *R, struct ibv_comp_cntr *c, uint64_t thr)
{
	int e = swv_comp_cntr_wait_ex(c, thr, 0, TMO_MS);
	if (e) {
		fprintf(stderr,
			"swverbs-coll: rank %d: broadcast %" PRIu64 ": b_rwr %" PRIu64
			" b_wr %" PRIu64 " g1 %" PRIu64 " g2 %" PRIu64 " g3 %" PRIu64 "\n",
			R->r, R->k, val(R->b_rwr), val(R->b_wr), val(R->g[1]), val(R->g[2]),
			val(R->g[3]));
		die(R, "waiting", e);
	}
}

/* Broadcast number R->k of size bytes, then a barrier: everything posted up front as
 * triggered WRITEs, then one wait. */
static void bcast_barrier_triggered(struct rank *R, uint32_t size)
{
	const uint64_t k1 = R->k + 1, t1 = R->kt + 1;
	for (int i = 0; i < R->nchildren; i++)
		bcast_send(R, R->children[i], size, R->r == 0 ? R->go : R->b_rwr,
			   R->r == 0 ? t1 : k1);
	/* Entering the barrier: our broadcast part is done (forwards acknowledged; a
	 * leaf: the buffer arrived). */
	struct ibv_comp_cntr *in = R->nchildren ? R->b_wr : R->b_rwr;
	uint64_t in_thr = R->nchildren ? k1 * (uint64_t)R->nchildren : k1;
	barrier_send(R, 0, in, in_thr);
	/* Round j is over when both our round j - 1 is over (stage j - 1) and round
	 * j - 1's message arrived: g[j] counts the two, one each per triggered
	 * broadcast, so g[j] >= 2 (kt + 1) is an AND of the two. Round j's message goes then, and
	 * the barrier is over at g[rounds]. */
	OK(swv_triggered_cntr_op(in, in_thr, R->g[1], SWV_TRIG_CNTR_ADD, 1));
	for (int j = 1; j <= R->rounds; j++) {
		OK(swv_triggered_cntr_op(R->d_rwr[from_of(R, j - 1)], k1, R->g[j],
					 SWV_TRIG_CNTR_ADD, 1));
		if (j < R->rounds) {
			barrier_send(R, j, R->g[j], 2 * t1);
			OK(swv_triggered_cntr_op(R->g[j], 2 * t1, R->g[j + 1], SWV_TRIG_CNTR_ADD,
						 1));
		}
	}
	if (R->r == 0)
		OK(ibv_inc_comp_cntr(R->go, 1));
	/* The one wait: the barrier is over, i.e. every rank entered it, i.e. every rank
	 * has its buffer (and forwarded it). Any error ends it (EIO). */
	wait_cntr(R, R->g[R->rounds], 2 * t1);
	R->k++;
	R->kt++;
}

/* The same algorithm driven by the CPU: wait for each step, then post the next. */
static void bcast_barrier_cpu(struct rank *R, uint32_t size)
{
	const uint64_t k1 = R->k + 1;
	if (R->r != 0)
		wait_cntr(R, R->b_rwr, k1);
	for (int i = 0; i < R->nchildren; i++)
		bcast_send(R, R->children[i], size, NULL, 0);
	if (R->nchildren)
		wait_cntr(R, R->b_wr, k1 * (uint64_t)R->nchildren);
	for (int j = 0; j < R->rounds; j++) {
		barrier_send(R, j, NULL, 0);
		wait_cntr(R, R->d_rwr[from_of(R, j)], k1);
	}
	R->k++;
}

static uint8_t pattern(uint64_t k, size_t i)
{
	return (uint8_t)((i * 131 + k * 17 + (i >> 8)) ^ 0x5a);
}

/* The root fills the buffer of broadcast R->k; everyone else checks it after. */
static void fill(struct rank *R, uint32_t size, uint64_t salt)
{
	uint8_t *b = R->buf + (R->k & 1) * (size_t)MAXSIZE;
	for (size_t i = 0; i < size; i++)
		b[i] = pattern(R->k + salt, i);
}

static void check(struct rank *R, uint32_t size, uint64_t salt)
{
	uint8_t *b = R->buf + (R->k & 1) * (size_t)MAXSIZE; /* R->k: the one just done */
	for (size_t i = 0; i < size; i++) {
		if (b[i] != pattern(R->k + salt, i)) {
			fprintf(stderr,
				"swverbs-coll: rank %d: broadcast %" PRIu64
				" of %u bytes: byte %zu "
				"is %#x, expected %#x\n",
				R->r, R->k, size, i, b[i], pattern(R->k + salt, i));
			exit(1);
		}
	}
}

static double cpu_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru); /* every thread: the progress thread's work counts */
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* iters broadcasts of size bytes with the chosen variant; verify each at every rank
 * when asked. Records the root's wall time and every rank's CPU time. */
static void run(struct rank *R, bool trig, uint32_t size, int iters, bool verify)
{
	const uint64_t salt = trig ? 1000 : 2000;
	pthread_barrier_wait(&R->sh->bar);
	double w0 = wall_now(), c0 = cpu_now();
	for (int i = 0; i < iters; i++) {
		if (R->r == 0 && verify)
			fill(R, size, salt);
		if (trig)
			bcast_barrier_triggered(R, size);
		else
			bcast_barrier_cpu(R, size);
		if (verify) {
			R->k--;
			check(R, size, salt);
			R->k++;
		}
	}
	double w = wall_now() - w0, c = cpu_now() - c0;
	R->sh->cpu_s[R->r] = c;
	if (R->r == 0)
		R->sh->wall_s = w;
	pthread_barrier_wait(&R->sh->bar);
}

static const uint32_t check_sizes[] = {8, 1000, 65536, MAXSIZE};
static const uint32_t bench_sizes[] = {8, 65536, MAXSIZE};

static void rank_main(struct rank *R, bool bench)
{
	setup(R);
	if (!bench) {
		for (size_t s = 0; s < sizeof(check_sizes) / sizeof(check_sizes[0]); s++) {
			run(R, true, check_sizes[s], 4, true);
			run(R, false, check_sizes[s], 4, true);
		}
	} else {
		for (size_t s = 0; s < sizeof(bench_sizes) / sizeof(bench_sizes[0]); s++) {
			uint32_t size = bench_sizes[s];
			int iters = size <= 65536 ? 300 : 40;
			double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}}; /* [trig][wall, cpu] */
			for (int round = 0; round < 3; round++) {
				for (int v = 0; v < 2; v++) {
					run(R, v == 0, size, iters, false);
					if (R->r == 0) {
						double cpu = 0;
						for (int p = 0; p < R->n; p++)
							cpu += R->sh->cpu_s[p];
						cpu /= R->n;
						double w = R->sh->wall_s / iters, cu = cpu / iters;
						if (w < best[v][0])
							best[v][0] = w;
						if (cu < best[v][1])
							best[v][1] = cu;
					}
				}
			}
			if (R->r == 0)
				printf("bench_coll: %d ranks, %7u B: broadcast+barrier %8.1f us "
				       "triggered, %8.1f us CPU-driven (time ratio triggered/CPU "
				       "%.2fx); CPU per rank %7.1f us vs %7.1f us (ratio %.2fx)\n",
				       R->n, size, best[0][0] * 1e6, best[1][0] * 1e6,
				       best[0][0] / best[1][0], best[0][1] * 1e6, best[1][1] * 1e6,
				       best[0][1] / best[1][1]);
			fflush(stdout);
		}
	}
	/* verify mode: the last check ran after the last barrier; nothing in flight */
	pthread_barrier_wait(&R->sh->bar);
	teardown(R);
}

int coll_main(int argc, char **argv, bool bench)
{
	int n = 4, opt;
	while ((opt = getopt(argc, argv, "n:bc")) != -1) {
		switch (opt) {
		case 'n':
			n = atoi(optarg);
			break;
		case 'b':
			bench = true;
			break;
		case 'c':
			bench = false;
			break;
		default:
			fprintf(stderr, "usage: %s [-n ranks (2..%d)] [-b | -c]\n", argv[0], MAXR);
			return 2;
		}
	}
	if (n < 2 || n > MAXR) {
		fprintf(stderr, "swverbs-coll: ranks must be 2..%d\n", MAXR);
		return 2;
	}
	struct shared *sh =
	    mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		die(NULL, "mmap", errno);
	pthread_barrierattr_t ba;
	pthread_barrierattr_init(&ba);
	pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
	pthread_barrier_init(&sh->bar, &ba, (unsigned)n);
	sh->n = n;
	fflush(stdout);
	pid_t pids[MAXR];
	for (int r = 0; r < n; r++) {
		pids[r] = fork();
		if (pids[r] < 0)
			die(NULL, "fork", errno);
		if (pids[r] == 0) {
			struct rank R = {.r = r, .n = n, .sh = sh};
			rank_main(&R, bench);
			_exit(0);
		}
	}
	int bad = 0;
	for (int r = 0; r < n; r++) {
		int st;
		if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "swverbs-coll: rank %d failed\n", r);
			bad = 1;
			/* the others would wait for it forever in the shared barrier */
			for (int q = 0; q < n; q++)
				if (q != r)
					kill(pids[q], SIGKILL);
		}
	}
	if (!bad && !bench)
		printf("swverbs-coll: %d ranks: binomial broadcast + dissemination barrier, "
		       "triggered and CPU-driven, 8 B to 1 MiB: every byte at every rank ok\n",
		       n);
	return bad;
}

#ifndef SWV_COLL_NO_MAIN
int main(int argc, char **argv)
{
	return coll_main(argc, argv, false);
}
#endif
