/*
 * swverbs-demo: completion counters, end to end, in two processes.
 *
 * The program forks. The parent is the INITIATOR, the child the TARGET; both use the
 * same swverbs device (by default the loopback device every machine has) and talk
 * over real UDP, exactly as two hosts would.
 *
 *   initiator                                   target
 *   ---------                                   ------
 *   counter "tx" counts its RDMA WRITEs         counter "rx" counts RDMA WRITEs that
 *                                               land in its memory
 *   posts N unsignaled RDMA WRITEs: no CQE      sleeps in swv_comp_cntr_wait_ex(rx, N)
 *   is ever generated, it never polls a CQ;     - no CQ, no polling, no message from
 *   it learns what finished from "tx" alone     the initiator - then checks every byte
 *
 * Both print their counts, error counts and throughput, and the program exits 0 when
 * the target found all N * size bytes in place.
 *
 *   usage: swverbs-demo [-n writes] [-s bytes] [-d device]
 *
 * Build against swverbs: cc demo.c $(pkg-config --cflags --libs swverbs)
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

#include <infiniband/swverbs.h> /* swv_comp_cntr_wait; includes <infiniband/verbs.h> */
#include <infiniband/verbs.h>

#define WAIT_MS 30000 /* give up if the other side is gone */

static void die(const char *who, const char *what, int err)
{
	fprintf(stderr, "[%s] %s: %s\n", who, what, strerror(err));
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The bytes every write carries: a pattern the target can check, a function of the
 * position in the target's buffer. */
static uint8_t pattern(uint64_t pos)
{
	return (uint8_t)((pos * 2654435761u) >> 13);
}

/* What the two sides exchange before they can talk: the usual verbs handshake. */
struct endpoint_info {
	uint16_t lid;
	union ibv_gid gid;
	uint32_t qpn, psn;
	uint64_t addr; /* target only: where the initiator may write */
	uint32_t rkey;
};

/* Everything one side owns. */
struct side {
	const char *name;
	struct ibv_context *ctx;
	struct ibv_port_attr port;
	struct ibv_pd *pd;
	struct ibv_cq *cq; /* a QP needs one; this demo never polls it */
	struct ibv_qp *qp;
	struct ibv_comp_cntr *cntr;
	uint8_t *buf;
	size_t len;
	struct ibv_mr *mr;
	struct endpoint_info me, peer;
};

static void exchange(int sock, struct side *s, bool first)
{
	/* One side writes first so the two never wait on each other. */
	if (first && write(sock, &s->me, sizeof(s->me)) != sizeof(s->me))
		die(s->name, "write", errno);
	if (read(sock, &s->peer, sizeof(s->peer)) != sizeof(s->peer))
		die(s->name, "read", errno ? errno : EPIPE);
	if (!first && write(sock, &s->me, sizeof(s->me)) != sizeof(s->me))
		die(s->name, "write", errno);
}

/* Open the device, register the buffer, create the QP and the counter, and attach
 * the counter while the QP is still in RESET (attaching is allowed only in RESET
 * or INIT, before any traffic). */
static void setup(struct side *s, const char *devname, uint32_t op_mask, int remote_access)
{
	int n, ret;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n == 0)
		die(s->name, "no swverbs device", errno ? errno : ENODEV);
	struct ibv_device *dev = list[0];
	for (int i = 0; devname && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), devname))
			dev = list[i];
	s->ctx = ibv_open_device(dev);
	ibv_free_device_list(list);
	if (!s->ctx)
		die(s->name, "ibv_open_device", errno);
	if ((ret = ibv_query_port(s->ctx, 1, &s->port)))
		die(s->name, "ibv_query_port", ret);

	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	if (!s->pd || !s->cq)
		die(s->name, "pd/cq", errno);
	s->buf = aligned_alloc(4096, (s->len + 4095) & ~(size_t)4095);
	if (!s->buf)
		die(s->name, "buffer", ENOMEM);
	memset(s->buf, 0, s->len);
	s->mr = ibv_reg_mr(s->pd, s->buf, s->len, IBV_ACCESS_LOCAL_WRITE | remote_access);
	if (!s->mr)
		die(s->name, "ibv_reg_mr", errno);

	struct ibv_qp_init_attr qa = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0, /* unsignaled unless a WR asks: counters count them anyway */
		.cap = {.max_send_wr = 256, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
	};
	s->qp = ibv_create_qp(s->pd, &qa);
	if (!s->qp)
		die(s->name, "ibv_create_qp", errno);

	/* The counter: a plain work-request counter ... */
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	s->cntr = ibv_create_comp_cntr(s->ctx, &ca);
	if (!s->cntr)
		die(s->name, "ibv_create_comp_cntr", errno);
	/* ... told which operations of this QP to count. */
	struct ibv_qp_attach_comp_cntr_attr aa = {.op_mask = op_mask};
	if ((ret = ibv_qp_attach_comp_cntr(s->qp, s->cntr, &aa)))
		die(s->name, "ibv_qp_attach_comp_cntr", ret);

	union ibv_gid gid;
	if ((ret = ibv_query_gid(s->ctx, 1, 0, &gid)))
		die(s->name, "ibv_query_gid", ret);
	s->me = (struct endpoint_info){.lid = s->port.lid, .gid = gid, .qpn = s->qp->qp_num,
				       .psn = (uint32_t)getpid() & 0xffffff,
				       .addr = (uintptr_t)s->buf, .rkey = s->mr->rkey};
}

/* The standard RC connection: RESET -> INIT -> RTR -> RTS. */
static void connect_qp(struct side *s)
{
	int ret;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	if ((ret = ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						    IBV_QP_ACCESS_FLAGS)))
		die(s->name, "modify to INIT", ret);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = s->peer.qpn;
	a.rq_psn = s->peer.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = s->peer.lid;
	if (s->port.link_layer == IBV_LINK_LAYER_ETHERNET) { /* RoCE-style port: GID routed */
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = s->peer.gid;
		a.ah_attr.grh.hop_limit = 64;
	}
	if ((ret = ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		die(s->name, "modify to RTR", ret);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = s->me.psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if ((ret = ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
						    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						    IBV_QP_MAX_QP_RD_ATOMIC)))
		die(s->name, "modify to RTS", ret);
}

static void report(struct side *s, uint64_t nwrites, size_t size, double secs)
{
	uint64_t done = 0, errs = 0;
	ibv_read_comp_cntr(s->cntr, &done);
	ibv_read_err_comp_cntr(s->cntr, &errs);
	double mib = (double)nwrites * (double)size / (1024.0 * 1024.0);
	printf("[%s] counter: %" PRIu64 " completed, %" PRIu64 " errors; %.1f MiB in %.3f s = "
	       "%.1f MiB/s, %.0f writes/s\n",
	       s->name, done, errs, mib, secs, mib / secs, (double)nwrites / secs);
}

static void teardown(struct side *s)
{
	/* The QP first: destroying it detaches the counter, which may then go. */
	ibv_destroy_qp(s->qp);
	ibv_destroy_comp_cntr(s->cntr);
	ibv_dereg_mr(s->mr);
	ibv_destroy_cq(s->cq);
	ibv_dealloc_pd(s->pd);
	ibv_close_device(s->ctx);
	free(s->buf);
}

static int initiator(int sock, const char *dev, uint64_t n, size_t size)
{
	struct side s = {.name = "initiator", .len = n * size};
	setup(&s, dev, IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE, 0);
	for (uint64_t i = 0; i < s.len; i++)
		s.buf[i] = pattern(i); /* the source: write i carries bytes [i*size, (i+1)*size) */
	exchange(sock, &s, true);
	connect_qp(&s);
	char go;
	if (read(sock, &go, 1) != 1) /* the target is connected and waiting */
		die(s.name, "read", EPIPE);

	const uint64_t depth = 255; /* writes in flight: the send queue holds 256 */
	double t0 = now_s();
	for (uint64_t i = 0; i < n; i++) {
		/* Room in the send queue? The counter says how many writes finished:
		 * wait until no more than depth - 1 are outstanding. */
		if (i >= depth) {
			int ret = swv_comp_cntr_wait_ex(s.cntr, i - depth + 1, 0, WAIT_MS);
			if (ret)
				die(s.name, "waiting for send-queue room", ret);
		}
		struct ibv_sge sge = {.addr = (uintptr_t)s.buf + i * size, .length = (uint32_t)size,
				      .lkey = s.mr->lkey};
		struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = 0 /* unsignaled: no CQE */}, *bad;
		wr.wr.rdma.remote_addr = s.peer.addr + i * size;
		wr.wr.rdma.rkey = s.peer.rkey;
		int ret = ibv_post_send(s.qp, &wr, &bad);
		if (ret)
			die(s.name, "ibv_post_send", ret);
	}
	/* All n acknowledged by the target's device: the data is in its memory.
	 * (_ex with error base 0: fail at once if any write failed, even one whose
	 * error was counted before this call.) */
	int ret = swv_comp_cntr_wait_ex(s.cntr, n, 0, WAIT_MS);
	double secs = now_s() - t0;
	if (ret)
		die(s.name, ret == EIO ? "a write failed" : "waiting for the last write", ret);
	report(&s, n, size, secs);

	char verdict = 0;
	if (read(sock, &verdict, 1) != 1) /* the target checked every byte */
		verdict = 0;
	teardown(&s);
	return verdict == 'y' ? 0 : 1;
}

static int target(int sock, const char *dev, uint64_t n, size_t size)
{
	struct side s = {.name = "target", .len = n * size};
	setup(&s, dev, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE);
	exchange(sock, &s, false);
	connect_qp(&s);
	if (write(sock, "g", 1) != 1)
		die(s.name, "write", errno);

	/* Sleep until n writes have landed. No CQ, no polling loop: the library wakes us
	 * when the count reaches n (or at once, with EIO, if one was refused: the error
	 * count left 0, the base we pass). */
	double t0 = now_s();
	int ret = swv_comp_cntr_wait_ex(s.cntr, n, 0, WAIT_MS);
	double secs = now_s() - t0;
	if (ret)
		die(s.name, ret == EIO ? "a write failed" : "waiting for the writes", ret);
	report(&s, n, size, secs);

	/* Count n observed => the data of all n writes is visible: check every byte. */
	uint64_t bad = 0;
	for (uint64_t i = 0; i < s.len; i++)
		bad += s.buf[i] != pattern(i);
	if (bad)
		printf("[target] %" PRIu64 " of %zu bytes WRONG\n", bad, s.len);
	else
		printf("[target] all %zu bytes verified\n", s.len);
	char verdict = bad ? 'n' : 'y';
	if (write(sock, &verdict, 1) != 1)
		die(s.name, "write", errno);
	teardown(&s);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	uint64_t n = 4096;
	size_t size = 4096;
	const char *dev = NULL;
	int opt;
	while ((opt = getopt(argc, argv, "n:s:d:h")) != -1) {
		switch (opt) {
		case 'n':
			n = strtoull(optarg, NULL, 0);
			break;
		case 's':
			size = strtoull(optarg, NULL, 0);
			break;
		case 'd':
			dev = optarg;
			break;
		default:
			fprintf(stderr, "usage: %s [-n writes] [-s bytes] [-d device]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (n == 0 || size == 0 || size > (1u << 30) || n > (1ull << 32) / size * 4) {
		fprintf(stderr, "n and size must be positive, n * size at most 16 GiB\n");
		return 2;
	}
	printf("swverbs-demo: %" PRIu64 " unsignaled RDMA WRITEs of %zu bytes, tracked by "
	       "completion counters only\n", n, size);
	fflush(stdout);

	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("demo", "socketpair", errno);
	pid_t pid = fork();
	if (pid < 0)
		die("demo", "fork", errno);
	if (pid == 0) {
		close(sv[0]);
		int r = target(sv[1], dev, n, size);
		fflush(stdout);
		_exit(r);
	}
	close(sv[1]);
	int rc = initiator(sv[0], dev, n, size);
	int st = 0;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		rc = 1;
	printf("swverbs-demo: %s\n", rc ? "FAILED" : "success");
	return rc;
}
