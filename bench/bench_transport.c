/*
 * bench_transport: the swverbs data path against raw UDP on the same machine, in one run.
 *
 * Two processes (fork) talk over loopback; a socketpair carries the control messages
 * and the QP exchange. Measured in this order:
 *   baseline  raw UDP: one process sends 4 KiB datagrams as fast as it can (sendmmsg),
 *             the other receives them (recvmmsg): bandwidth and datagram rate at the
 *             receiver; then a ping-pong of 8-byte datagrams (blocking recv): latency.
 *   swverbs   one RC connection on the default device (or -d NAME), MTU 4096:
 *             RDMA WRITE bandwidth at 64 KiB and 1 MiB, SEND bandwidth at 64 KiB,
 *             RDMA READ bandwidth at 64 KiB, the rate of 8-byte WRITEs (unsignaled, one
 *             in SIG_EVERY signaled) and the latency of an 8-byte SEND/RECV ping-pong.
 *   auth      the cost of the authenticated wire mode (docs/wire.md): the 8-byte WRITE
 *             rate and the 64 KiB WRITE bandwidth on the device above and on one with a
 *             secret (-a NAME, default "swvauth"), measured alternately, ratio printed.
 *             Without SWVERBS_CONFIG / SWVERBS_DEVICES the benchmark configures both:
 *             swv0 on 127.0.0.1 (the default device) and swvauth on 127.0.0.2 with a
 *             secret drawn for the run.
 * Bandwidths are compared with the UDP bandwidth, the 8-byte WRITE rate with the UDP
 * datagram rate, latencies with the UDP ping-pong. The posting side busy-polls its CQ,
 * as perftest does. Each test runs for a fixed time (-t seconds, default 1.2).
 *
 *   usage: bench_transport [-d device] [-a auth-device] [-t seconds] [-o test,...]
 *   tests: udp,udplat,w64k,w1m,s64k,r64k,wrate,lat,auth (default: all)
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "bench_clock.h"
#include "rc_conn.h"

#define WHO	     "bench_transport" /* in error messages */
#define UDP_PAYLOAD  4096
#define UDP_BATCH    32
#define LAT_SIZE     8
#define BUF_SIZE     (16u << 20)
#define RQ_DEPTH     512
#define SQ_DEPTH     1024
#define SIG_EVERY    64
#define RD_ATOMIC    16
#define TMO_NS       (60ull * 1000000000ull)

enum test { T_UDP, T_UDPLAT, T_W64K, T_W1M, T_S64K, T_R64K, T_WRATE, T_LAT, T_AUTH, NTESTS };
static const char *const test_name[NTESTS] = {"udp",  "udplat", "w64k", "w1m", "s64k",
					      "r64k", "wrate",	"lat",	"auth"};
static const char *auth_dev = "swvauth";
#define AUTH_ROUNDS 3

static double seconds = 1.2;

static void die(const char *what, int err)
{
	rc_die(WHO, what, err);
}

/* CPU time of this process's swverbs progress threads (named "swv-progress"), read
 * through the per-thread CPU clock Linux derives from a thread id. It measures what
 * the transport itself costs, independently of how busy the machine is. */
static uint64_t progress_cpu_ns(void)
{
	uint64_t sum = 0;
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = 0;
		fclose(f);
		if (strncmp(comm, "swv-progress", 12))
			continue;
		pid_t tid = (pid_t)atoi(e->d_name);
		clockid_t cid = (clockid_t)((~(unsigned)tid << 3) | 6); /* CPUCLOCK_SCHED */
		struct timespec ts;
		if (clock_gettime(cid, &ts) == 0)
			sum += (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	closedir(d);
	return sum;
}

static void send_u64(int sock, uint64_t v)
{
	rc_xfer(WHO, sock, &v, sizeof(v), true);
}

static uint64_t recv_u64(int sock)
{
	uint64_t v;
	rc_xfer(WHO, sock, &v, sizeof(v), false);
	return v;
}

/* ------------------------------------------------------------------ raw UDP */

static int udp_socket(uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket", errno);
	int sz = 4 << 20;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl))
		die("bind", errno);
	*port = ntohs(sa.sin_port);
	return fd;
}

static struct sockaddr_in lo_addr(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	return sa;
}

struct udp_result {
	double mibs, dgrams_per_s, lat_us;
};

/* Receiver: counts datagrams from the first one until the sender says it stopped. */
static void udp_bw_target(int ctl)
{
	uint16_t port;
	int fd = udp_socket(&port);
	static uint8_t bufs[UDP_BATCH][UDP_PAYLOAD];
	struct mmsghdr m[UDP_BATCH];
	struct iovec iov[UDP_BATCH];
	uint64_t n = 0, bytes = 0, t_first = 0, t_last = 0;

	send_u64(ctl, port);
	for (;;) {
		struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = ctl, .events = POLLIN}};
		if (poll(p, 2, 1000) < 0 && errno != EINTR)
			die("poll", errno);
		if (p[0].revents & POLLIN) {
			for (int i = 0; i < UDP_BATCH; i++) {
				iov[i] = (struct iovec){bufs[i], UDP_PAYLOAD};
				m[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[i], .msg_iovlen = 1}};
			}
			int r = recvmmsg(fd, m, UDP_BATCH, MSG_DONTWAIT, NULL);
			if (r > 0) {
				t_last = clock_ns(CLOCK_MONOTONIC);
				if (!t_first)
					t_first = t_last;
				n += (uint64_t)r;
				for (int i = 0; i < r; i++)
					bytes += m[i].msg_len;
			}
			continue;
		}
		if (p[1].revents & POLLIN)
			break; /* the sender is done and nothing is left to read */
	}
	(void)recv_u64(ctl);
	send_u64(ctl, n);
	send_u64(ctl, bytes);
	send_u64(ctl, t_last - t_first);
	close(fd);
}

static struct udp_result udp_bw_initiator(int ctl)
{
	uint16_t port = (uint16_t)recv_u64(ctl);
	uint16_t myport;
	int fd = udp_socket(&myport);
	struct sockaddr_in dst = lo_addr(port);
	static uint8_t buf[UDP_PAYLOAD];
	struct mmsghdr m[UDP_BATCH];
	struct iovec iov = {buf, UDP_PAYLOAD};
	uint64_t sent = 0;

	memset(buf, 0xa5, sizeof(buf));
	for (int i = 0; i < UDP_BATCH; i++)
		m[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &dst, .msg_namelen = sizeof(dst),
						    .msg_iov = &iov, .msg_iovlen = 1}};
	uint64_t t_end = clock_ns(CLOCK_MONOTONIC) + (uint64_t)(seconds * 1e9);
	while (clock_ns(CLOCK_MONOTONIC) < t_end) {
		int r = sendmmsg(fd, m, UDP_BATCH, 0);
		if (r < 0 && errno != ENOBUFS && errno != EAGAIN && errno != EINTR)
			die("sendmmsg", errno);
		if (r > 0)
			sent += (uint64_t)r;
	}
	struct timespec settle = {0, 50 * 1000000};
	nanosleep(&settle, NULL);
	send_u64(ctl, sent);
	uint64_t n = recv_u64(ctl), bytes = recv_u64(ctl), t = recv_u64(ctl);
	close(fd);
	struct udp_result r = {0};
	if (t) {
		r.mibs = (double)bytes / ((double)t / 1e9) / (1024.0 * 1024.0);
		r.dgrams_per_s = (double)n / ((double)t / 1e9);
	}
	printf("  udp 4 KiB stream: %" PRIu64 " sent, %" PRIu64 " received (%.1f%% lost)\n", sent,
	       n, sent ? 100.0 * (double)(sent - n) / (double)sent : 0.0);
	return r;
}

static void udp_lat_target(int ctl)
{
	uint16_t port;
	int fd = udp_socket(&port);
	uint8_t buf[64];
	struct sockaddr_in from;
	socklen_t fl;

	send_u64(ctl, port);
	for (;;) {
		fl = sizeof(from);
		ssize_t r = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			die("recvfrom", errno);
		}
		if (r == 1)
			break; /* the initiator's stop marker */
		if (sendto(fd, buf, (size_t)r, 0, (struct sockaddr *)&from, fl) < 0)
			die("sendto", errno);
	}
	close(fd);
}

static double udp_lat_initiator(int ctl)
{
	uint16_t port = (uint16_t)recv_u64(ctl), myport;
	int fd = udp_socket(&myport);
	struct sockaddr_in dst = lo_addr(port);
	uint8_t buf[64] = {0};
	uint64_t iters = 0;
	struct timeval tv = {1, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

	uint64_t t0 = clock_ns(CLOCK_MONOTONIC), t_end = t0 + (uint64_t)(seconds * 0.5e9), t;
	do {
		if (sendto(fd, buf, LAT_SIZE, 0, (struct sockaddr *)&dst, sizeof(dst)) < 0)
			die("sendto", errno);
		if (recv(fd, buf, sizeof(buf), 0) != LAT_SIZE)
			die("udp ping-pong reply", errno ? errno : EIO);
		iters++;
		t = clock_ns(CLOCK_MONOTONIC);
	} while (t < t_end);
	(void)sendto(fd, buf, 1, 0, (struct sockaddr *)&dst, sizeof(dst));
	close(fd);
	return (double)(t - t0) / 1e3 / (double)iters / 2.0; /* one way, as perftest reports */
}

/* ------------------------------------------------------------------ swverbs */

struct side {
	struct rc_conn rc;
	int ctl;
	uint64_t recv_posted; /* receive WRs posted so far (wr_id sequence) */
	uint32_t recv_out;    /* receive WRs posted and not completed */
};

static void setup(struct side *s, const char *devname)
{
	struct rc_conn_attr ra = {
	    .dev = devname,
	    .send_cqe = 4 * SQ_DEPTH,
	    .recv_cqe = 4 * RQ_DEPTH,
	    .len = BUF_SIZE,
	    .mr_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	    .qp_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	    .rd_atomic = RD_ATOMIC,
	    .cap = {.max_send_wr = SQ_DEPTH,
		    .max_recv_wr = RQ_DEPTH,
		    .max_send_sge = 1,
		    .max_recv_sge = 1,
		    .max_inline_data = 64},
	};
	rc_conn_open(&s->rc, WHO, &ra);
}

static void post_recv(struct side *s, uint32_t size)
{
	uint64_t i = s->recv_posted++;
	struct ibv_sge sge = {(uintptr_t)s->rc.buf + (i * size) % (BUF_SIZE - size + 1) / 64 * 64,
			      size, s->rc.mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
	int ret = ibv_post_recv(s->rc.qp, &wr, &bad);
	if (ret)
		die("post_recv", ret);
	s->recv_out++;
}

static void post_send(struct side *s, enum ibv_wr_opcode op, uint64_t id, uint32_t size,
		      uint32_t slot, unsigned flags, uint32_t imm)
{
	struct ibv_sge sge = {(uintptr_t)s->rc.buf + (uint64_t)slot * size, size, s->rc.mr->lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = flags, .imm_data = htonl(imm)},
			   *bad;
	wr.wr.rdma.remote_addr = s->rc.peer.addr + (uint64_t)slot * size;
	wr.wr.rdma.rkey = s->rc.peer.rkey;
	int ret = ibv_post_send(s->rc.qp, &wr, &bad);
	if (ret)
		die("post_send", ret);
}

static int poll_ok(struct ibv_cq *cq, struct ibv_wc *wc, int n, const char *what)
{
	int r = ibv_poll_cq(cq, n, wc);
	if (r < 0)
		die("poll_cq", EIO);
	for (int i = 0; i < r; i++)
		if (wc[i].status != IBV_WC_SUCCESS) {
			fprintf(stderr, "bench_transport: %s completion: %s\n", what,
				ibv_wc_status_str(wc[i].status));
			exit(1);
		}
	return r;
}

/* Target of SEND streams and ping-pongs: receives until a SEND with immediate 1. */
static void target_recv_until_stop(struct side *s, uint32_t size, bool echo)
{
	struct ibv_wc wc[64];
	uint64_t t_end = clock_ns(CLOCK_MONOTONIC) + TMO_NS, empty = 0;
	for (;;) {
		int n = poll_ok(s->rc.rcq, wc, 64, "receive");
		for (int i = 0; i < n; i++) {
			bool stop = (wc[i].wc_flags & IBV_WC_WITH_IMM) && ntohl(wc[i].imm_data) == 1;
			s->recv_out--;
			post_recv(s, size);
			if (echo) {
				post_send(s, IBV_WR_SEND, 0, size, 0, IBV_SEND_SIGNALED, 0);
				struct ibv_wc sw;
				while (!poll_ok(s->rc.scq, &sw, 1, "echo send"))
					;
			}
			if (stop)
				return;
		}
		if (!n && (++empty & 4095) == 0 && clock_ns(CLOCK_MONOTONIC) > t_end)
			die("target: stop message missing", ETIMEDOUT);
	}
}

struct rdma_result {
	double mibs, msgs_per_s, cpu_pct, lat_us;
	uint64_t msgs;         /* messages (or round trips) measured */
	uint64_t prog_cpu_ns;  /* progress-thread CPU of both processes during the test */
};

/* Stream op of 'size' with up to 'window' in flight, every 'sig_every'th WR signaled. */
static struct rdma_result stream(struct side *s, enum ibv_wr_opcode op, uint32_t size,
				 uint32_t window, uint32_t sig_every)
{
	struct ibv_wc wc[64];
	uint32_t nslots = BUF_SIZE / size < window ? BUF_SIZE / size : window;
	uint64_t posted = 0, done = 0, empty = 0;
	uint64_t t0 = clock_ns(CLOCK_MONOTONIC), c0 = proc_cpu_ns();
	uint64_t t_stop = t0 + (uint64_t)(seconds * 1e9), t_dead = t0 + TMO_NS, t = t0;
	bool stopping = false;

	while (!stopping || done < posted) {
		while (!stopping && posted - done < window) {
			bool last = false;
			if ((posted & 15) == 0 && (t = clock_ns(CLOCK_MONOTONIC)) >= t_stop)
				last = stopping = true;
			/* The stream ends on a signaled WR so 'done' catches up exactly. */
			bool sig = last || (posted + 1) % sig_every == 0;
			enum ibv_wr_opcode o = op;
			if (last && op == IBV_WR_SEND)
				o = IBV_WR_SEND_WITH_IMM; /* tells the target to stop */
			post_send(s, o, posted, size, (uint32_t)(posted % nslots),
				  sig ? IBV_SEND_SIGNALED : 0, last ? 1 : 0);
			posted++;
		}
		int n = poll_ok(s->rc.scq, wc, 64, "send");
		for (int i = 0; i < n; i++)
			done = wc[i].wr_id + 1; /* completions in order; covers the unsignaled */
		/* The clock is read rarely: it is not free, and this loop is what is measured. */
		if (!n && (++empty & 4095) == 0 && clock_ns(CLOCK_MONOTONIC) > t_dead)
			die("initiator: completions missing", ETIMEDOUT);
	}
	t = clock_ns(CLOCK_MONOTONIC) - t0;
	uint64_t c = proc_cpu_ns() - c0;
	struct rdma_result r = {
		.mibs = (double)posted * size / ((double)t / 1e9) / (1024.0 * 1024.0),
		.msgs_per_s = (double)posted / ((double)t / 1e9),
		.cpu_pct = 100.0 * (double)c / (double)t,
		.msgs = posted,
	};
	return r;
}

static struct rdma_result pingpong(struct side *s, uint32_t size)
{
	struct ibv_wc wc[4];
	uint64_t iters = 0, empty = 0;
	uint64_t t0 = clock_ns(CLOCK_MONOTONIC), c0 = proc_cpu_ns();
	uint64_t t_stop = t0 + (uint64_t)(seconds * 0.5e9), t_dead = t0 + TMO_NS, t;
	bool last = false;

	do {
		t = clock_ns(CLOCK_MONOTONIC);
		last = t >= t_stop;
		post_send(s, last ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, iters, size, 0,
			  IBV_SEND_SIGNALED | IBV_SEND_INLINE, last ? 1 : 0);
		bool got_send = false, got_recv = false;
		while (!got_send || !got_recv) {
			if (!got_send && poll_ok(s->rc.scq, wc, 1, "send"))
				got_send = true;
			if (!got_recv && poll_ok(s->rc.rcq, wc, 1, "receive")) {
				got_recv = true;
				s->recv_out--;
				post_recv(s, size);
			}
			if ((++empty & 4095) == 0 && clock_ns(CLOCK_MONOTONIC) > t_dead)
				die("ping-pong: reply missing", ETIMEDOUT);
		}
		iters++;
	} while (!last);
	t = clock_ns(CLOCK_MONOTONIC) - t0;
	uint64_t c = proc_cpu_ns() - c0;
	struct rdma_result r = {
		.msgs_per_s = (double)iters / ((double)t / 1e9),
		.lat_us = (double)t / 1e3 / (double)iters / 2.0,
		.cpu_pct = 100.0 * (double)c / (double)t,
		.msgs = iters,
	};
	return r;
}

/* ------------------------------------------------------------------ driver */

static void target(int ctl, const char *dev, const bool *want)
{
	if (want[T_UDP])
		udp_bw_target(ctl);
	if (want[T_UDPLAT])
		udp_lat_target(ctl);

	struct side s = {.ctl = ctl};
	setup(&s, dev);
	rc_conn_exchange(&s.rc, ctl, true);
	rc_conn_connect(&s.rc);
	for (;;) {
		uint64_t t = recv_u64(ctl);
		if (t == NTESTS)
			break;
		if (t == T_AUTH) {
			/* A second connection, on the device with a secret; the streams on
			 * both are one-sided WRITEs, so this side only keeps them up. */
			struct side a = {.ctl = ctl};
			setup(&a, auth_dev);
			rc_conn_exchange(&a.rc, ctl, true);
			rc_conn_connect(&a.rc);
			send_u64(ctl, 1);
			/* Per measured stream: this side's progress-thread CPU (it receives,
			 * checks and places every packet, and acknowledges). */
			while (recv_u64(ctl)) {
				uint64_t c0 = progress_cpu_ns();
				send_u64(ctl, 1);
				(void)recv_u64(ctl); /* stream finished */
				send_u64(ctl, progress_cpu_ns() - c0);
			}
			ibv_destroy_qp(a.rc.qp);
			rc_conn_close(&a.rc);
			continue;
		}
		if (t == T_S64K || t == T_LAT) {
			uint32_t size = t == T_S64K ? 65536 : LAT_SIZE;
			while (s.recv_out < RQ_DEPTH)
				post_recv(&s, size);
			send_u64(ctl, 1); /* receives are posted */
			target_recv_until_stop(&s, size, t == T_LAT);
			/* Receives still posted are flushed when the QP is destroyed; later
			 * tests of this kind post new ones behind them. */
		} else {
			send_u64(ctl, 1);
		}
		uint64_t c0 = progress_cpu_ns();
		(void)recv_u64(ctl); /* initiator started */
		(void)recv_u64(ctl); /* initiator finished */
		send_u64(ctl, progress_cpu_ns() - c0);
	}
	ibv_destroy_qp(s.rc.qp);
	rc_conn_close(&s.rc);
}

/* One stream of the auth comparison, with the target's progress-thread CPU. */
static struct rdma_result auth_stream(struct side *s, int ctl, uint32_t size, uint32_t window,
				      uint32_t sig_every)
{
	send_u64(ctl, 1);
	(void)recv_u64(ctl);
	struct rdma_result r = stream(s, IBV_WR_RDMA_WRITE, size, window, sig_every);
	send_u64(ctl, 1);
	r.prog_cpu_ns = recv_u64(ctl);
	return r;
}

/* Best of the rounds: the highest rate (the least disturbed run on a shared machine)
 * and the least target CPU per message. */
static void auth_keep(struct rdma_result *best, const struct rdma_result *r, bool first)
{
	double cpu = (double)r->prog_cpu_ns / (double)(r->msgs ? r->msgs : 1);
	double bcpu = (double)best->prog_cpu_ns / (double)(best->msgs ? best->msgs : 1);
	if (first) {
		*best = *r;
		return;
	}
	if (r->msgs_per_s > best->msgs_per_s) {
		best->msgs_per_s = r->msgs_per_s;
		best->mibs = r->mibs;
	}
	if (cpu < bcpu) {
		best->prog_cpu_ns = r->prog_cpu_ns;
		best->msgs = r->msgs;
	}
}

static void row(const char *name, double v, const char *unit, double base, bool lower_better)
{
	if (base > 0)
		printf("%-34s %12.1f %-8s %8.3fx%s\n", name, v, unit, v / base,
		       lower_better ? "  (lower is better)" : "");
	else
		printf("%-34s %12.1f %-8s\n", name, v, unit);
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	bool want[NTESTS];
	int opt;

	for (int i = 0; i < NTESTS; i++)
		want[i] = true;
	while ((opt = getopt(argc, argv, "d:a:t:o:")) != -1) {
		if (opt == 'd') {
			dev = optarg;
		} else if (opt == 'a') {
			auth_dev = optarg;
		} else if (opt == 't') {
			seconds = atof(optarg);
			if (seconds <= 0)
				seconds = 1.2;
		} else if (opt == 'o') {
			for (int i = 0; i < NTESTS; i++)
				want[i] = false;
			char *list = strdup(optarg), *save = NULL;
			for (char *tok = strtok_r(list, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				int k;
				for (k = 0; k < NTESTS && strcmp(tok, test_name[k]); k++)
					;
				if (k == NTESTS) {
					fprintf(stderr, "unknown test '%s'\n", tok);
					return 2;
				}
				want[k] = true;
			}
			free(list);
		} else {
			fprintf(
			    stderr,
			    "usage: %s [-d device] [-a auth-device] [-t seconds] [-o test,...]\n",
			    argv[0]);
			return 2;
		}
	}

	/* The auth comparison needs a device with a secret next to the default one; both
	 * processes read the configuration after the fork, from this environment. */
	const char *cfg_file = getenv("SWVERBS_CONFIG"), *cfg_list = getenv("SWVERBS_DEVICES");
	if (want[T_AUTH] && !(cfg_file && *cfg_file) && !(cfg_list && *cfg_list)) {
		uint8_t key[16];
		char spec[160], hex[33];
		if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
			die("getrandom", errno);
		for (int i = 0; i < 16; i++)
			snprintf(hex + 2 * i, 3, "%02x", key[i]);
		snprintf(spec, sizeof(spec), "swv0=127.0.0.1/8;%s=127.0.0.2/8,auth_key=%s",
			 auth_dev, hex);
		setenv("SWVERBS_DEVICES", spec, 1);
	}

	int ctl;
	pid_t pid = rc_fork(WHO, &ctl);
	if (pid == 0) {
		alarm(300); /* never outlive a stuck run */
		target(ctl, dev, want);
		_exit(0);
	}
	alarm(300);

	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	double load[1] = {0};
	if (getloadavg(load, 1) < 1)
		load[0] = -1;
	printf("bench_transport: %.1f s per test, %ld CPUs, load average %.2f at start\n", seconds,
	       ncpu, load[0]);

	struct udp_result ub = {0};
	double udp_lat = 0;
	if (want[T_UDP]) {
		ub = udp_bw_initiator(ctl);
	}
	if (want[T_UDPLAT])
		udp_lat = udp_lat_initiator(ctl);

	struct side s = {.ctl = ctl};
	setup(&s, dev);
	rc_conn_exchange(&s.rc, ctl, false);
	rc_conn_connect(&s.rc);
	for (int i = 0; i < RQ_DEPTH; i++)
		post_recv(&s, LAT_SIZE); /* for the ping-pong replies */

	struct rdma_result rr[NTESTS];
	/* auth: [0] rate plain, [1] rate auth, [2] 64 KiB plain, [3] 64 KiB auth */
	struct rdma_result ra[4];
	memset(rr, 0, sizeof(rr));
	memset(ra, 0, sizeof(ra));
	for (int t = T_W64K; t < NTESTS; t++) {
		if (!want[t])
			continue;
		if (t == T_AUTH) {
			struct side a = {.ctl = ctl};
			send_u64(ctl, (uint64_t)t);
			setup(&a, auth_dev);
			rc_conn_exchange(&a.rc, ctl, false);
			rc_conn_connect(&a.rc);
			(void)recv_u64(ctl); /* target connected */
			/* Plain and authenticated runs alternate, AUTH_ROUNDS times, so that
			 * whatever else the machine does weighs on both alike. */
			for (int round = 0; round < AUTH_ROUNDS; round++) {
				struct rdma_result r[4];
				r[0] = auth_stream(&s, ctl, 8, 512, SIG_EVERY);
				r[1] = auth_stream(&a, ctl, 8, 512, SIG_EVERY);
				r[2] = auth_stream(&s, ctl, 65536, 64, 1);
				r[3] = auth_stream(&a, ctl, 65536, 64, 1);
				for (int k = 0; k < 4; k++)
					auth_keep(&ra[k], &r[k], round == 0);
			}
			send_u64(ctl, 0);
			ibv_destroy_qp(a.rc.qp);
			rc_conn_close(&a.rc);
			continue;
		}
		send_u64(ctl, (uint64_t)t);
		(void)recv_u64(ctl); /* target ready */
		send_u64(ctl, 1);    /* starting (the target samples its CPU clocks) */
		uint64_t pc0 = progress_cpu_ns();
		switch (t) {
		case T_W64K:
			rr[t] = stream(&s, IBV_WR_RDMA_WRITE, 65536, 64, 1);
			break;
		case T_W1M:
			rr[t] = stream(&s, IBV_WR_RDMA_WRITE, 1u << 20, 8, 1);
			break;
		case T_S64K:
			rr[t] = stream(&s, IBV_WR_SEND, 65536, 64, 1);
			break;
		case T_R64K:
			rr[t] = stream(&s, IBV_WR_RDMA_READ, 65536, RD_ATOMIC, 1);
			break;
		case T_WRATE:
			rr[t] = stream(&s, IBV_WR_RDMA_WRITE, 8, 512, SIG_EVERY);
			break;
		case T_LAT:
			rr[t] = pingpong(&s, LAT_SIZE);
			break;
		}
		uint64_t pc = progress_cpu_ns() - pc0;
		send_u64(ctl, 1);
		rr[t].prog_cpu_ns = pc + recv_u64(ctl);
	}
	send_u64(ctl, NTESTS);

	printf("\n%-34s %12s %-8s %9s\n", "test", "value", "unit", "vs UDP");
	if (want[T_UDP]) {
		row("udp 4 KiB datagrams (baseline)", ub.mibs, "MiB/s", 0, false);
		row("udp 4 KiB datagram rate", ub.dgrams_per_s, "pkt/s", 0, false);
	}
	if (want[T_UDPLAT])
		row("udp 8 B ping-pong (one way)", udp_lat, "us", 0, false);
	static const char *const label[NTESTS] = {
		[T_W64K] = "RC WRITE 64 KiB", [T_W1M] = "RC WRITE 1 MiB",
		[T_S64K] = "RC SEND 64 KiB", [T_R64K] = "RC READ 64 KiB",
		[T_WRATE] = "RC WRITE 8 B rate", [T_LAT] = "RC SEND/RECV 8 B ping-pong"};
	for (int t = T_W64K; t < T_AUTH; t++) {
		if (!want[t])
			continue;
		char name[64];
		if (t == T_WRATE) {
			snprintf(name, sizeof(name), "%s (1/%d signaled)", label[t], SIG_EVERY);
			row(name, rr[t].msgs_per_s, "msg/s", ub.dgrams_per_s, false);
		} else if (t == T_LAT) {
			snprintf(name, sizeof(name), "%s (one way)", label[t]);
			row(name, rr[t].lat_us, "us", udp_lat, true);
		} else {
			row(label[t], rr[t].mibs, "MiB/s", ub.mibs, false);
		}
	}
	if (want[T_AUTH]) {
		double c[4];
		for (int k = 0; k < 4; k++)
			c[k] =
			    (double)ra[k].prog_cpu_ns / 1e3 / (double)(ra[k].msgs ? ra[k].msgs : 1);
		printf("\n%-34s %12s %-8s %9s   (best of %d alternating rounds)\n",
		       "authenticated mode", "value", "unit", "vs plain", AUTH_ROUNDS);
		row("RC WRITE 8 B rate, plain", ra[0].msgs_per_s, "msg/s", 0, false);
		row("RC WRITE 8 B rate, auth", ra[1].msgs_per_s, "msg/s", ra[0].msgs_per_s, false);
		row("RC WRITE 64 KiB, plain", ra[2].mibs, "MiB/s", 0, false);
		row("RC WRITE 64 KiB, auth", ra[3].mibs, "MiB/s", ra[2].mibs, false);
		row("  target CPU per 8 B WRITE, plain", c[0], "us", 0, false);
		row("  target CPU per 8 B WRITE, auth", c[1], "us", c[0], true);
		row("  target CPU per MiB (64 KiB), plain", c[2] * 16, "us", 0, false);
		row("  target CPU per MiB (64 KiB), auth", c[3] * 16, "us", c[2] * 16, true);
	}
	printf("initiator CPU (process, %% of one core):");
	for (int t = T_W64K; t < T_AUTH; t++)
		if (want[t])
			printf(" %s %.0f%%", test_name[t], rr[t].cpu_pct);
	printf("\n");
	/* What the transport costs, whatever else runs on the machine: CPU time of both
	 * progress threads per message (and per MiB for the bandwidth tests). */
	printf("progress-thread CPU, both processes:");
	for (int t = T_W64K; t < T_AUTH; t++) {
		if (!want[t] || !rr[t].msgs)
			continue;
		double us = (double)rr[t].prog_cpu_ns / 1e3 / (double)rr[t].msgs;
		static const uint32_t sz[NTESTS] = {[T_W64K] = 65536, [T_W1M] = 1u << 20,
						    [T_S64K] = 65536, [T_R64K] = 65536};
		if (sz[t])
			printf(" %s %.0f us/MiB", test_name[t], us * (1048576.0 / sz[t]));
		else
			printf(" %s %.2f us/msg", test_name[t], us);
	}
	printf("\n");

	ibv_destroy_qp(s.rc.qp);
	rc_conn_close(&s.rc);

	int st;
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		die("target process failed", EIO);
	return 0;
}
