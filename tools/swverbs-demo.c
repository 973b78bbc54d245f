/*
 * swverbs-demo: completion counters, end to end, in two processes.
 *
 * The program forks. The parent is the INITIATOR, the child the TARGET; both use the
 * same swverbs device (by default the loopback device every machine has) and talk
 * through the device's link as two hosts would: shared memory between processes of
 * one host (UDP with SWVERBS_SHM=0), the same packets and checks either way.
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
 * Build against swverbs: cc swverbs-demo.c rc_conn.c $(pkg-config --cflags --libs swverbs)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/swverbs.h> /* swv_comp_cntr_wait; includes <infiniband/verbs.h> */
#include <infiniband/verbs.h>

#include "rc_conn.h" /* device, PD, CQ, buffer, QP and the RC handshake */

#define WAIT_MS 30000 /* give up if the other side is gone */

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

/* Everything one side owns: the RC connection (rc_conn.h: device, PD, CQ, buffer and
 * MR, QP, and what the two sides exchanged) and the counter. */
struct side {
	const char *name;
	struct rc_conn rc;
	struct ibv_comp_cntr *cntr;
};

/* Open the device, register the buffer, create the QP and the counter, and attach
 * the counter while the QP is still in RESET (attaching is allowed only in RESET
 * or INIT, before any traffic). */
static void setup(struct side *s, const char *devname, size_t len, uint32_t op_mask,
		  int remote_access)
{
	/* The QP's send queue signals only WRs that ask (none here): counters count
	 * unsignaled WRs anyway. A QP needs a CQ; this demo never polls it. */
	struct rc_conn_attr ra = {
	    .dev = devname,
	    .send_cqe = 16,
	    .len = len,
	    .mr_access = remote_access,
	    .qp_access = IBV_ACCESS_REMOTE_WRITE,
	    .rd_atomic = 1,
	    .cap = {.max_send_wr = 256, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
	};
	rc_conn_open(&s->rc, s->name, &ra);

	/* The counter: a plain work-request counter ... */
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	s->cntr = ibv_create_comp_cntr(s->rc.ctx, &ca);
	if (!s->cntr)
		rc_die(s->name, "ibv_create_comp_cntr", errno);
	/* ... told which operations of this QP to count. */
	struct ibv_qp_attach_comp_cntr_attr aa = {.op_mask = op_mask};
	int ret = ibv_qp_attach_comp_cntr(s->rc.qp, s->cntr, &aa);
	if (ret)
		rc_die(s->name, "ibv_qp_attach_comp_cntr", ret);
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
	ibv_destroy_qp(s->rc.qp);
	ibv_destroy_comp_cntr(s->cntr);
	rc_conn_close(&s->rc); /* the rest: MR, CQ, PD, device, buffer */
}

static int initiator(int sock, const char *dev, uint64_t n, size_t size)
{
	struct side s = {.name = "initiator"};
	setup(&s, dev, n * size, IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE, 0);
	/* The source: write i carries bytes [i*size, (i+1)*size). */
	for (uint64_t i = 0; i < n * size; i++)
		s.rc.buf[i] = pattern(i);
	rc_conn_exchange(&s.rc, sock, true);
	rc_conn_connect(&s.rc);
	char go;
	if (read(sock, &go, 1) != 1) /* the target is connected and waiting */
		rc_die(s.name, "read", EPIPE);

	const uint64_t depth = 255; /* writes in flight: the send queue holds 256 */
	double t0 = now_s();
	for (uint64_t i = 0; i < n; i++) {
		/* Room in the send queue? The counter says how many writes finished:
		 * wait until no more than depth - 1 are outstanding. */
		if (i >= depth) {
			int ret = swv_comp_cntr_wait_ex(s.cntr, i - depth + 1, 0, WAIT_MS);
			if (ret)
				rc_die(s.name, "waiting for send-queue room", ret);
		}
		struct ibv_sge sge = {.addr = (uintptr_t)s.rc.buf + i * size,
				      .length = (uint32_t)size,
				      .lkey = s.rc.mr->lkey};
		struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = 0 /* unsignaled: no CQE */}, *bad;
		wr.wr.rdma.remote_addr = s.rc.peer.addr + i * size;
		wr.wr.rdma.rkey = s.rc.peer.rkey;
		int ret = ibv_post_send(s.rc.qp, &wr, &bad);
		if (ret)
			rc_die(s.name, "ibv_post_send", ret);
	}
	/* All n acknowledged by the target's device: the data is in its memory.
	 * (_ex with error base 0: fail at once if any write failed, even one whose
	 * error was counted before this call.) */
	int ret = swv_comp_cntr_wait_ex(s.cntr, n, 0, WAIT_MS);
	double secs = now_s() - t0;
	if (ret)
		rc_die(s.name, ret == EIO ? "a write failed" : "waiting for the last write", ret);
	report(&s, n, size, secs);

	char verdict = 0;
	if (read(sock, &verdict, 1) != 1) /* the target checked every byte */
		verdict = 0;
	teardown(&s);
	return verdict == 'y' ? 0 : 1;
}

static int target(int sock, const char *dev, uint64_t n, size_t size)
{
	struct side s = {.name = "target"};
	const size_t len = n * size;
	setup(&s, dev, len, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE);
	rc_conn_exchange(&s.rc, sock, false);
	rc_conn_connect(&s.rc);
	if (write(sock, "g", 1) != 1)
		rc_die(s.name, "write", errno);

	/* Sleep until n writes have landed. No CQ, no polling loop: the library wakes us
	 * when the count reaches n (or at once, with EIO, if one was refused: the error
	 * count left 0, the base we pass). */
	double t0 = now_s();
	int ret = swv_comp_cntr_wait_ex(s.cntr, n, 0, WAIT_MS);
	double secs = now_s() - t0;
	if (ret)
		rc_die(s.name, ret == EIO ? "a write failed" : "waiting for the writes", ret);
	report(&s, n, size, secs);

	/* Count n observed => the data of all n writes is visible: check every byte. */
	uint64_t bad = 0;
	for (uint64_t i = 0; i < len; i++)
		bad += s.rc.buf[i] != pattern(i);
	if (bad)
		printf("[target] %" PRIu64 " of %zu bytes WRONG\n", bad, len);
	else
		printf("[target] all %zu bytes verified\n", len);
	char verdict = bad ? 'n' : 'y';
	if (write(sock, &verdict, 1) != 1)
		rc_die(s.name, "write", errno);
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

	int ctl;
	pid_t pid = rc_fork("demo", &ctl);
	if (pid == 0) {
		int r = target(ctl, dev, n, size);
		fflush(stdout);
		_exit(r);
	}
	int rc = initiator(ctl, dev, n, size);
	int st = 0;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		rc = 1;
	printf("swverbs-demo: %s\n", rc ? "FAILED" : "success");
	return rc;
}
