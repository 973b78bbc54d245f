/*
 * Regression tests for defects of the intra-host link found in review (src/link/shm.c);
 * each failed on the code as reviewed. Run one with its name as the argument, all
 * without.
 *
 *  slot_leak     an endpoint that closes gives back its slot in every inbox it wrote
 *                to: the 33rd short-lived endpoint of one process still uses the link
 *                to a long-lived receiver.
 *  closing_sender  the last packet of a sender that closes at once is still its own
 *                (its slot is given back only once drained).
 *  port_reuse    a receiver SIGKILLed, its port bound again by a new inbox: a sender
 *                with a cached route learns the old inbox closed and reaches the new one.
 *  hostile_tail  a same-user process leaves a free slot with an unaligned tail: no
 *                sender writes past its ring's end.
 *  doorbell_lost a doorbell whose sendto fails leaves 'sleeping' set: the next sender
 *                rings.
 *  shm_full      /dev/shm full when a port opens: a refusal (UDP only), no SIGBUS.
 *  shm_full_sender  /dev/shm full when a sender first routes to an existing inbox: UDP,
 *                no SIGBUS.
 *  stalled_receiver  a live receiver that does not drain (stopped): after a bounded
 *                time a UD QP's datagrams to it are dropped as over UDP (by the UD
 *                requester, whatever the link), and its send queue moves; an RC QP's
 *                packets stay refused (EAGAIN) and its WQE outstanding.
 *  route_eviction  a port that has talked to SWV_SHM_MAX_PEERS destinations still
 *                reaches new ones through the link (idle routes are evicted), and an
 *                evicted route's slot is given back.
 *  route_churn   (guards the eviction; the reviewed code never evicted) two threads
 *                send through one port to more destinations than its table holds
 *                while routes are evicted under them: every packet reaches the
 *                receiver it was sent to.
 *  pid_namespace a sender in another PID namespace (same netns, /dev/shm, user) does not
 *                take a live receiver for a dead one (needs CAP_SYS_ADMIN; skipped
 *                without).
 *  fuzz_rx       garbage in every shared field never makes the receiver read outside
 *                the mapping.
 * One finding of that review is still open (docs/design.md, "The intra-host link"): a
 * same-user process that truncates an inbox can make its receiver fault.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "inproc.h"
#include "link/endpoint.h"
#include "link/shm.h"
#include "net/addr.h"
#include "transport/requester.h"
#include "util/clock.h"

/* The shared layout of shm.c (struct shm_hdr / shm_slot), as another process sees it. */
#define L_PAGE	    4096u
#define L_SLOT_SIZE 256u /* pid@0, addr@8, head@64, tail@128, placing@192 */
#define L_SLOTS_OFF L_PAGE
#define L_DT_OFF    (L_SLOTS_OFF + ((SWV_SHM_SLOTS * L_SLOT_SIZE + L_PAGE - 1) / L_PAGE * L_PAGE))
#define L_DT_SIZE   ((256u + 1024u) * 64u) /* the placement table: QP, then MR entries */
#define L_RINGS_OFF ((L_DT_OFF + L_DT_SIZE + L_PAGE - 1) / L_PAGE * L_PAGE)
#define L_SIZE	    (L_RINGS_OFF + (size_t)SWV_SHM_SLOTS * SWV_SHM_RING_BYTES)

static struct in_addr lo(void)
{
	struct in_addr a;
	a.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static void ep_open_shm(struct swv_endpoint *ep)
{
	CHECK_OK(swv_ep_open(ep, lo(), NULL));
	CHECK_OK(swv_ep_attach_shm(ep));
	CHECK(ep->shm);
}

/* Whether from routes to through the link (the route is let go at once). */
static bool routed(struct swv_shm_port *from, const struct sockaddr_in *to)
{
	struct swv_shm_peer *p = swv_shm_route(from, to);
	swv_shm_put(from, p);
	return p != NULL;
}

/* A 64-byte packet. */
static int send_one(struct swv_endpoint *from, const struct sockaddr_in *to)
{
	uint8_t pkt[64];
	memset(pkt, 0xa5, sizeof(pkt));
	struct iovec v = {pkt, sizeof(pkt)};
	return swv_ep_send(from, to, &v, 1);
}

static void inbox_path(char *buf, size_t len, uint16_t port)
{
	struct stat st;
	CHECK_OK(stat("/proc/self/ns/net", &st) ? errno : 0);
	snprintf(buf, len, "/dev/shm/swverbs.%u.%lu.%08x.%u", (unsigned)getuid(),
		 (unsigned long)st.st_ino, (unsigned)INADDR_LOOPBACK, port);
}

static uint8_t *map_inbox(uint16_t port)
{
	char path[160];
	inbox_path(path, sizeof(path), port);
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	uint8_t *m = mmap(NULL, L_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	CHECK(m != MAP_FAILED);
	return m;
}

static int failures;
#define EXPECT(cond, what)                                                                         \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s: %s\n", __func__, what);                          \
			failures++;                                                                \
		} else {                                                                           \
			fprintf(stderr, "ok   %s\n", __func__);                                    \
		}                                                                                  \
	} while (0)

static void slot_leak(void)
{
	struct swv_endpoint r;
	ep_open_shm(&r);
	struct sockaddr_in to = swv_ep_sockaddr(&r);
	int nrouted = 0;
	for (int i = 0; i < SWV_SHM_SLOTS + 8; i++) {
		struct swv_endpoint s;
		ep_open_shm(&s);
		if (routed(s.shm, &to))
			nrouted++;
		swv_ep_close(&s); /* one at a time: never more than one sender alive */
	}
	EXPECT(nrouted == SWV_SHM_SLOTS + 8,
	       "closed senders of a live process keep their slots: later senders fall back to UDP");
	swv_ep_close(&r);
}

/* A sender that closes right after its last packet (an ACK of the final message, then
 * ibv_close_device): the packet still arrives named as its own, not as from a freed
 * slot's null address (the receiver would drop it as from a stranger). */
static void closing_sender(void)
{
	struct swv_endpoint r, s;
	CHECK_OK(swv_ep_open(&r, lo(), NULL));
	struct swv_shm_port *rp = swv_shm_open(lo(), r.port, r.fd);
	CHECK(rp);
	ep_open_shm(&s);
	struct sockaddr_in to = swv_ep_sockaddr(&r), from = swv_ep_sockaddr(&s);
	CHECK(routed(s.shm, &to));
	CHECK_EQ(send_one(&s, &to), 0);
	swv_ep_close(&s);
	struct swv_rx_pkt got[4];
	int n = swv_shm_rx_take(rp, got, 4);
	CHECK_EQ(n, 1);
	EXPECT(got[0].src.sin_addr.s_addr == from.sin_addr.s_addr &&
		   got[0].src.sin_port == from.sin_port,
	       "the last packet of a closing sender arrives from no address");
	swv_shm_rx_release(rp);
	swv_shm_close(rp);
	swv_ep_close(&r);
}

static void port_reuse(void)
{
	int pfd[2];
	CHECK_OK(pipe(pfd) ? errno : 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct swv_endpoint r;
		ep_open_shm(&r);
		uint16_t port = r.port;
		CHECK(write(pfd[1], &port, sizeof(port)) == (ssize_t)sizeof(port));
		for (;;)
			pause(); /* SIGKILLed: no close, the inbox stays */
	}
	uint16_t port;
	CHECK(read(pfd[0], &port, sizeof(port)) == (ssize_t)sizeof(port));
	struct swv_endpoint s;
	ep_open_shm(&s);
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr = lo(), .sin_port = htons(port)};
	CHECK(routed(s.shm, &to));
	CHECK_OK(send_one(&s, &to));
	kill(pid, SIGKILL);
	CHECK_EQ(waitpid(pid, NULL, 0), pid);

	/* The port's new owner (bound exactly as swv_ep_open would, then its inbox). */
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	CHECK_OK(bind(fd, (struct sockaddr *)&to, sizeof(to)) ? errno : 0);
	struct swv_shm_port *n = swv_shm_open(lo(), port, fd);
	CHECK(n);

	int got = 0;
	uint64_t until = swv_now_ns() + 500000000ull; /* 5 miss TTLs */
	struct swv_rx_pkt pk[8];
	while (!got && swv_now_ns() < until) {
		(void)send_one(&s, &to);
		got += swv_shm_rx_take(n, pk, 8);
		swv_shm_rx_release(n);
		uint8_t b[256];
		ssize_t l;
		while ((l = recv(fd, b, sizeof(b), MSG_DONTWAIT)) >= 0)
			if (!swv_shm_is_doorbell(b, (size_t)l))
				got++;
		usleep(10000);
	}
	EXPECT(got > 0, "sends to a reused port vanish into the killed owner's ring");
	swv_shm_close(n);
	close(fd);
	swv_ep_close(&s);
	close(pfd[0]);
	close(pfd[1]);
}

static void hostile_tail(void)
{
	struct swv_endpoint r;
	ep_open_shm(&r);
	uint8_t *m = map_inbox(r.port);
	/* Slot 0 free (pid 0) with head = tail = 3 bytes before its ring's end. */
	_Atomic uint64_t *head = (_Atomic uint64_t *)(m + L_SLOTS_OFF + 64);
	_Atomic uint64_t *tail = (_Atomic uint64_t *)(m + L_SLOTS_OFF + 128);
	atomic_store(head, SWV_SHM_RING_BYTES - 3);
	atomic_store(tail, SWV_SHM_RING_BYTES - 3);
	uint8_t *ring1 = m + L_RINGS_OFF + SWV_SHM_RING_BYTES;
	uint8_t before[4];
	memcpy(before, ring1, sizeof(before));

	struct swv_endpoint s;
	ep_open_shm(&s);
	struct sockaddr_in to = swv_ep_sockaddr(&r);
	CHECK(routed(s.shm, &to));
	(void)send_one(&s, &to);
	/* A sound sender leaves a slot with such positions alone (and may claim ring 1,
	 * which it then writes legitimately); it must never write past ring 0's end. */
	_Atomic int32_t *pid0 = (_Atomic int32_t *)(m + L_SLOTS_OFF);
	EXPECT(atomic_load(pid0) == 0 || !memcmp(before, ring1, sizeof(before)),
	       "the sender wrote past the end of its ring (into ring 1; past the mapping for slot "
	       "31)");
	munmap(m, L_SIZE);
	swv_ep_close(&s);
	swv_ep_close(&r);
}

static void doorbell_lost(void)
{
	/* The receiver: an inbox with no progress thread; we play its thread. */
	struct swv_endpoint r;
	CHECK_OK(swv_ep_open(&r, lo(), NULL));
	struct swv_shm_port *rp = swv_shm_open(lo(), r.port, r.fd);
	CHECK(rp);
	struct sockaddr_in to = swv_ep_sockaddr(&r);

	/* Sender 1: a port whose doorbell cannot leave (its socket refuses to send: in
	 * real life EAGAIN/ENOBUFS from a send buffer full of its UDP traffic to remote
	 * hosts, or ENOMEM). */
	int bad = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	CHECK(bad >= 0);
	struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr = lo()};
	socklen_t sl = sizeof(any);
	CHECK_OK(bind(bad, (struct sockaddr *)&any, sizeof(any)) ? errno : 0);
	CHECK_OK(getsockname(bad, (struct sockaddr *)&any, &sl) ? errno : 0);
	struct sockaddr_in discard = {
	    .sin_family = AF_INET, .sin_addr = lo(), .sin_port = htons(9)};
	CHECK_OK(connect(bad, (struct sockaddr *)&discard, sizeof(discard)) ? errno : 0);
	CHECK_OK(shutdown(bad, SHUT_WR) ? errno : 0); /* every sendto now fails (EPIPE) */
	struct swv_shm_port *s1 = swv_shm_open(lo(), ntohs(any.sin_port), bad);
	CHECK(s1);
	struct swv_endpoint s2;
	ep_open_shm(&s2);

	/* Drain what is there, then arm and "sleep". */
	struct swv_rx_pkt pk[8];
	(void)swv_shm_rx_take(rp, pk, 8);
	swv_shm_rx_release(rp);
	CHECK(!swv_shm_arm(rp, true));

	uint8_t pkt[64];
	memset(pkt, 0x3c, sizeof(pkt));
	struct iovec v = {pkt, sizeof(pkt)};
	struct swv_shm_peer *p1 = swv_shm_route(s1, &to);
	CHECK(p1);
	CHECK_OK(swv_shm_send(s1, p1, &v, 1, 0, 1, false)); /* its doorbell is lost */
	CHECK_OK(send_one(&s2, &to));		     /* a healthy sender: rings? */

	int bells = 0;
	uint64_t until = swv_now_ns() + 200000000ull;
	while (!bells && swv_now_ns() < until) {
		uint8_t b[64];
		ssize_t l = recv(r.fd, b, sizeof(b), MSG_DONTWAIT);
		if (l >= 0 && swv_shm_is_doorbell(b, (size_t)l))
			bells++;
		else
			usleep(1000);
	}
	EXPECT(bells > 0, "a sleeping receiver with two rings holding packets got no doorbell");
	swv_ep_close(&s2);
	swv_shm_close(s1);
	close(bad);
	swv_shm_close(rp);
	swv_ep_close(&r);
}

/* A full /dev/shm: the inbox's header and slot pages are never allocated (only rings
 * are fallocated), so the first store into them faults. Runs in a user + mount
 * namespace with a 256 KiB tmpfs of its own on /dev/shm (skipped without). */
static int small_shm(void)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS))
		return 77;
	char map[64];
	int fd = open("/proc/self/setgroups", O_WRONLY);
	if (fd >= 0) {
		(void)!write(fd, "deny", 4);
		close(fd);
	}
	snprintf(map, sizeof(map), "%u %u 1", (unsigned)uid, (unsigned)uid);
	fd = open("/proc/self/uid_map", O_WRONLY);
	if (fd < 0 || write(fd, map, strlen(map)) < 0)
		return 77;
	close(fd);
	snprintf(map, sizeof(map), "%u %u 1", (unsigned)gid, (unsigned)gid);
	fd = open("/proc/self/gid_map", O_WRONLY);
	if (fd < 0 || write(fd, map, strlen(map)) < 0)
		return 77;
	close(fd);
	if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=256k"))
		return 77;
	return 0;
}

static void fill_shm(void)
{
	static uint8_t junk[4096];
	int fd = open("/dev/shm/fill", O_WRONLY | O_CREAT, 0600);
	while (fd >= 0 && write(fd, junk, sizeof(junk)) > 0)
		;
	if (fd >= 0)
		close(fd);
}

static void run_full(const char *fn, bool sender)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (small_shm())
			_exit(77);
		struct swv_endpoint r, s;
		if (sender) { /* both inboxes exist; then /dev/shm fills up */
			ep_open_shm(&r);
			ep_open_shm(&s);
			fill_shm();
			struct sockaddr_in to = swv_ep_sockaddr(&r);
			(void)routed(s.shm, &to); /* must answer NULL (UDP), not crash */
			swv_ep_close(&s);
		} else {
			fill_shm();
			CHECK_OK(swv_ep_open(&r, lo(), NULL));
			(void)swv_ep_attach_shm(&r); /* must refuse (UDP only), not crash */
		}
		swv_ep_close(&r);
		_exit(0);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
		fprintf(stderr, "skip %s: no user namespace\n", fn);
		return;
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		fprintf(stderr, "ok   %s\n", fn);
		return;
	}
	fprintf(stderr, "FAIL %s: %s\n", fn,
		WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS
		    ? (sender ? "first route to an inbox with /dev/shm full: SIGBUS (slot page "
				"never allocated)"
			      : "opening a port with /dev/shm full: SIGBUS (header page never "
				"allocated)")
		    : "failed");
	failures++;
}

/* A full /dev/shm: the inbox's header and slot pages are never allocated (only rings
 * are fallocated), so the first access to them faults. Runs in a user + mount
 * namespace with a 256 KiB tmpfs of its own on /dev/shm (skipped without one). */
static void shm_full(void)
{
	run_full(__func__, false);
}

static void shm_full_sender(void)
{
	run_full(__func__, true);
}

/* The QP's port stats, read as swverbs-stat does. */
static struct swv_shm_stats qp_shm_stats(struct ibv_qp *qp)
{
	struct swv_shm_stats st;
	swv_shm_get_stats(to_swv_qp(qp)->ep->shm, &st);
	return st;
}

static uint64_t ud_refused_drops(struct ibv_qp *qp)
{
	struct swv_qp *q = to_swv_qp(qp);
	pthread_mutex_lock(&q->lock);
	uint64_t n = q->req->n_ud_refused_drops;
	pthread_mutex_unlock(&q->lock);
	return n;
}

/* A receiver that is alive but does not drain (stopped: SIGSTOP, a debugger, ^Z) holds
 * its ring full for ever, and the link refuses (EAGAIN) every packet to it for ever.
 * Over UDP the same datagram is dropped at the full socket, so a UD QP moves on; on the
 * link its WQE stayed at the head of the SQ, retried every 50 us, and every later WQE
 * to every other destination waited behind it. The UD requester now drops a datagram
 * refused for longer than SWV_UD_REFUSED_DROP_NS; an RC QP keeps waiting. */
static void stalled_receiver(void)
{
	int pfd[2];
	CHECK_OK(pipe(pfd) ? errno : 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct swv_endpoint r;
		ep_open_shm(&r); /* no progress thread: nobody drains, as if stopped */
		CHECK(write(pfd[1], &r.port, sizeof(r.port)) == (ssize_t)sizeof(r.port));
		for (;;)
			pause();
	}
	uint16_t port;
	CHECK(read(pfd[0], &port, sizeof(port)) == (ssize_t)sizeof(port));

	struct swvt_dev d = swvt_dev_open();
	struct ibv_pd *pd = d.pd;
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 256, NULL, NULL, 0);
	CHECK_PTR(cq);
	enum { LEN = 2048, DEPTH = 64, N = 1024 }; /* N datagrams hold twice the ring */
	struct ibv_mr *mr = swvt_reg_buf(pd, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .qp_type = IBV_QPT_UD,
	    .cap = {.max_send_wr = DEPTH, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *ud = ibv_create_qp(pd, &ia);
	CHECK_PTR(ud);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
	CHECK_OK(
	    ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
	a.qp_state = IBV_QPS_RTR;
	CHECK_OK(ibv_modify_qp(ud, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_RTS;
	CHECK_OK(ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
	struct ibv_ah_attr aa;
	swvt_local_ah_attr(d.ctx, &aa);
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK_PTR(ah);

	/* N datagrams to the stalled port: each completes (sent or, once the ring is full
	 * and has refused long enough, dropped). */
	struct ibv_sge sge = {(uintptr_t)mr->addr, LEN, mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = swv_qpn_make(port, 1);
	wr.wr.ud.remote_qkey = 0x11111111;
	int posted = 0, done = 0;
	uint64_t until = swv_now_ns() + 20000000000ull;
	while (done < N && swv_now_ns() < until) {
		while (posted < N && posted - done < DEPTH) {
			wr.wr_id = (uint64_t)posted;
			CHECK_OK(ibv_post_send(ud, &wr, &bad));
			posted++;
		}
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(cq, 16, wc);
		CHECK(n >= 0);
		for (int i = 0; i < n; i++)
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
		done += n;
		if (!n)
			usleep(100);
	}
	CHECK(qp_shm_stats(ud).tx_full > 0); /* the link did refuse: the ring filled */
	EXPECT(done == N && ud_refused_drops(ud) > 0,
	       "a stalled live receiver holds a UD QP's send queue for ever");

	/* Connected traffic waits instead (RC retransmits; a UC sender holds credit): an RC
	 * SEND refused for several times the bound is neither completed nor failed. */
	ia.qp_type = IBV_QPT_RC;
	struct ibv_qp *rc = ibv_create_qp(pd, &ia);
	CHECK_PTR(rc);
	swvt_pair_to_init(rc);
	swvt_pair_to_rtr(rc, swv_qpn_make(port, 2));
	swvt_pair_to_rts(rc, 14);
	uint64_t refused = qp_shm_stats(rc).tx_full;
	wr.wr_id = 7;
	CHECK_OK(ibv_post_send(rc, &wr, &bad));
	uint64_t t0 = swv_now_ns();
	until = t0 + 20000000000ull;
	struct ibv_wc wc;
	int n = 0;
	while (n == 0 && swv_now_ns() < until &&
	       (swv_now_ns() - t0 < 3 * SWV_UD_REFUSED_DROP_NS ||
		qp_shm_stats(rc).tx_full == refused)) {
		n = ibv_poll_cq(cq, 1, &wc);
		usleep(1000);
	}
	CHECK(qp_shm_stats(rc).tx_full > refused);
	EXPECT(n == 0, "an RC packet to a stalled receiver was dropped instead of refused");
	struct ibv_qp_init_attr qia;
	CHECK_OK(ibv_query_qp(rc, &a, IBV_QP_STATE, &qia));
	CHECK_EQ(a.qp_state, IBV_QPS_RTS);

	kill(pid, SIGKILL);
	CHECK_EQ(waitpid(pid, NULL, 0), pid);
	char path[160];
	inbox_path(path, sizeof(path), port);
	(void)unlink(path);
	CHECK_OK(ibv_destroy_qp(rc));
	CHECK_OK(ibv_destroy_qp(ud));
	CHECK_OK(ibv_destroy_ah(ah));
	swvt_dereg_buf(mr);
	CHECK_OK(ibv_destroy_cq(cq));
	swvt_dev_close(&d);
	close(pfd[0]);
	close(pfd[1]);
}

/* A sender in another PID namespace (same user, network namespace and /dev/shm: a
 * container with --net=host --ipc=host, a pod's sidecar): kill(owner_pid, 0) there says
 * "no such process", so it takes a live inbox for one left by a killed process and
 * unlinks it -- every other sender loses the link to that receiver. */
static void pid_namespace(void)
{
	struct swv_endpoint r;
	ep_open_shm(&r);
	char path[160];
	inbox_path(path, sizeof(path), r.port);
	struct sockaddr_in to = swv_ep_sockaddr(&r);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWPID))
			_exit(77);
		pid_t g = fork(); /* pid 1 of the new namespace */
		if (g < 0)
			_exit(77);
		if (g == 0) {
			struct swv_endpoint s;
			ep_open_shm(&s);
			(void)routed(s.shm, &to);
			swv_ep_close(&s);
			_exit(0);
		}
		int st;
		waitpid(g, &st, 0);
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
		fprintf(stderr, "skip %s: cannot make a PID namespace\n", __func__);
		swv_ep_close(&r);
		return;
	}
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct stat sb;
	EXPECT(stat(path, &sb) == 0,
	       "a sender in another PID namespace unlinked a live receiver's inbox");
	swv_ep_close(&r);
}

/* Send one packet from s to r until it goes through the link (not UDP): at once for a
 * destination the table holds or has room for, after a wait for one that needs an idle
 * route evicted (until 'until'). Then the receiver takes it. Whether it went through
 * the link. */
static bool send_via_shm(struct swv_endpoint *s, struct swv_endpoint *r, uint64_t until)
{
	struct sockaddr_in to = swv_ep_sockaddr(r), from = swv_ep_sockaddr(s);
	for (;;) {
		struct swv_shm_stats b, a;
		swv_shm_get_stats(s->shm, &b);
		CHECK_OK(send_one(s, &to));
		swv_shm_get_stats(s->shm, &a);
		if (a.tx_pkts == b.tx_pkts + 1)
			break;
		uint8_t d[256]; /* it went as a datagram: take it off the socket */
		while (recv(r->fd, d, sizeof(d), MSG_DONTWAIT) >= 0)
			;
		if (swv_now_ns() > until)
			return false;
		usleep(1000);
	}
	struct swv_rx_pkt pk[4];
	CHECK_EQ(swv_shm_rx_take(r->shm, pk, 4), 1);
	CHECK(pk[0].src.sin_port == from.sin_port);
	swv_shm_rx_release(r->shm); /* drained: its ring is idle */
	return true;
}

/* Who holds slot 0 of the inbox of port: its claimer's pid, 0 when free. */
static int32_t slot0_pid(uint16_t port)
{
	uint8_t *m = map_inbox(port);
	int32_t pid = atomic_load((_Atomic int32_t *)(m + L_SLOTS_OFF));
	munmap(m, L_SIZE);
	return pid;
}

/* The per-port destination table (SWV_SHM_MAX_PEERS) never evicted: a long-lived port
 * that had talked to 64 destinations used UDP for every new one, for ever. Now the least
 * recently used destination, idle and drained, makes room and gives its slot back in
 * the receiver's inbox; an evicted destination comes back through the link too. */
static void route_eviction(void)
{
	enum { N = SWV_SHM_MAX_PEERS + 16 };
	struct swv_endpoint s, *r = calloc(N, sizeof(*r));
	CHECK_PTR(r);
	ep_open_shm(&s);
	for (int i = 0; i < N; i++)
		ep_open_shm(&r[i]);
	uint64_t until = swv_now_ns() + 20000000000ull;
	int via_shm = 0;
	for (int i = 0; i < N; i++)
		via_shm += send_via_shm(&s, &r[i], until);
	struct swv_shm_stats st;
	swv_shm_get_stats(s.shm, &st);
	EXPECT(via_shm == N && st.evictions == N - SWV_SHM_MAX_PEERS &&
		   st.peers == SWV_SHM_MAX_PEERS,
	       "past 64 destinations a port's new ones use UDP");
	int held = 0, freed = 0;
	for (int i = 0; i < N; i++) {
		int32_t pid = slot0_pid(r[i].port);
		held += pid == getpid();
		freed += pid == 0;
	}
	EXPECT(held == SWV_SHM_MAX_PEERS && freed == N - SWV_SHM_MAX_PEERS,
	       "an evicted destination's slot stays claimed in its receiver's inbox");
	/* every destination again: the evicted ones come back, each evicting another */
	via_shm = 0;
	for (int i = 0; i < N; i++)
		via_shm += send_via_shm(&s, &r[i], until);
	EXPECT(via_shm == N, "an evicted destination does not come back through the link");
	swv_ep_close(&s);
	for (int i = 0; i < N; i++)
		swv_ep_close(&r[i]);
	free(r);
}

/* Two threads send through one port to more destinations than its table holds, with
 * routes evictable as soon as they are drained, while this thread drains every
 * receiver: a route a sender holds is never given to another destination under it --
 * every packet arrives at the receiver it was sent to (on the link or over UDP) -- and
 * routes are evicted all along. Under ThreadSanitizer it also checks the hold/evict
 * protocol for races. */
enum { CHURN_N = SWV_SHM_MAX_PEERS + 16, CHURN_SENDS = 2000 };
struct churn {
	struct swv_endpoint *s, *r;
	unsigned seed;
	_Atomic int *running;
};

static void *churn_sender(void *arg)
{
	struct churn *c = arg;
	for (int k = 0; k < CHURN_SENDS; k++) {
		uint32_t i = (uint32_t)rand_r(&c->seed) % CHURN_N;
		uint8_t pkt[64];
		memset(pkt, 0, sizeof(pkt));
		memcpy(pkt, &i, sizeof(i)); /* the receiver it is for */
		struct iovec v = {pkt, sizeof(pkt)};
		struct sockaddr_in to = swv_ep_sockaddr(&c->r[i]);
		int rc;
		do {
			/* swv_ep_send's own steps, with a yield between them now and then: a
			 * route held while the other thread evicts */
			struct swv_shm_peer *p = swv_shm_route(c->s->shm, &to);
			if (p && k % 2)
				sched_yield();
			rc = p ? swv_shm_send(c->s->shm, p, &v, 1, 0, 1, false)
			       : swv_ep_send(c->s, &to, &v, 1);
			if (rc == EAGAIN)
				sched_yield(); /* a full ring: the drainer is behind */
		} while (rc == EAGAIN);
		CHECK_OK(rc);
	}
	atomic_fetch_sub(c->running, 1);
	return NULL;
}

/* Take what r[i] got on both links; count what was meant for another receiver. */
static int churn_drain(struct swv_endpoint *r, uint32_t i, int *got)
{
	int wrong = 0;
	struct swv_rx_pkt pk[64];
	int n = swv_shm_rx_take(r->shm, pk, 64);
	for (int k = 0; k < n; k++) {
		uint32_t to;
		memcpy(&to, pk[k].buf, sizeof(to));
		wrong += pk[k].len != 64 || to != i;
	}
	swv_shm_rx_release(r->shm);
	*got += n;
	uint8_t d[256];
	ssize_t l;
	while ((l = recv(r->fd, d, sizeof(d), MSG_DONTWAIT)) >= 0) {
		if (swv_shm_is_doorbell(d, (size_t)l))
			continue;
		uint32_t to;
		memcpy(&to, d, sizeof(to));
		wrong += l != 64 || to != i;
		(*got)++;
	}
	return wrong;
}

static void route_churn(void)
{
	struct swv_endpoint s, *r = calloc(CHURN_N, sizeof(*r));
	CHECK_PTR(r);
	ep_open_shm(&s);
	for (int i = 0; i < CHURN_N; i++) {
		ep_open_shm(&r[i]);
		int big = 4 << 20; /* no datagram lost at a receiver's socket */
		(void)setsockopt(r[i].fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	}
	swv_shm_test_set_idle(0);
	_Atomic int running = 2;
	struct churn c[2] = {{&s, r, 1, &running}, {&s, r, 2, &running}};
	pthread_t t[2];
	for (int k = 0; k < 2; k++)
		CHECK_OK(pthread_create(&t[k], NULL, churn_sender, &c[k]));
	int wrong = 0, got = 0;
	while (atomic_load(&running)) {
		for (uint32_t i = 0; i < CHURN_N; i++)
			wrong += churn_drain(&r[i], i, &got);
		sched_yield();
	}
	for (int k = 0; k < 2; k++)
		CHECK_OK(pthread_join(t[k], NULL));
	/* the last ones: every send has returned, the datagrams may still be in flight */
	uint64_t until = swv_now_ns() + 10000000000ull;
	while (got < 2 * CHURN_SENDS && swv_now_ns() < until) {
		for (uint32_t i = 0; i < CHURN_N; i++)
			wrong += churn_drain(&r[i], i, &got);
		if (got < 2 * CHURN_SENDS)
			usleep(1000);
	}
	swv_shm_test_set_idle(SWV_SHM_IDLE_NS);
	struct swv_shm_stats st;
	swv_shm_get_stats(s.shm, &st);
	CHECK_EQ(got, 2 * CHURN_SENDS);
	CHECK(st.evictions > 0);
	EXPECT(wrong == 0, "a packet reached another receiver than the one it was sent to");
	swv_ep_close(&s);
	for (int i = 0; i < CHURN_N; i++)
		swv_ep_close(&r[i]);
	free(r);
}

/* Not a defect (passes): garbage in every shared field and record of an inbox never
 * makes swv_shm_rx_take hand out a packet outside its ring. */
static void fuzz_rx(void)
{
	struct swv_endpoint r;
	CHECK_OK(swv_ep_open(&r, lo(), NULL));
	struct swv_shm_port *rp = swv_shm_open(lo(), r.port, r.fd);
	CHECK(rp);
	uint8_t *m = map_inbox(r.port);
	unsigned seed = 12345;
	int bad = 0;
	for (int it = 0; it < 20000; it++) {
		_Atomic uint32_t *nclaimed = (_Atomic uint32_t *)(m + 32);
		atomic_store(nclaimed, (uint32_t)rand_r(&seed) % 40);
		for (unsigned i = 0; i < 4; i++) {
			uint8_t *sl = m + L_SLOTS_OFF + i * L_SLOT_SIZE;
			uint64_t h = (uint64_t)rand_r(&seed) << 20 | (uint64_t)rand_r(&seed);
			uint64_t t = h + (uint64_t)(rand_r(&seed) % (2 * SWV_SHM_RING_BYTES));
			if (rand_r(&seed) & 1)
				h &= ~7ull, t &= ~7ull;
			atomic_store((_Atomic uint64_t *)(sl + 64), h);
			atomic_store((_Atomic uint64_t *)(sl + 128), t);
			uint8_t *ring = m + L_RINGS_OFF + (size_t)i * SWV_SHM_RING_BYTES;
			for (int k = 0; k < 16; k++) {
				uint32_t off = ((uint32_t)rand_r(&seed) % SWV_SHM_RING_BYTES) & ~7u;
				uint32_t v = rand_r(&seed) & 1 ? UINT32_MAX
							       : (uint32_t)rand_r(&seed) % 70000;
				memcpy(ring + off, &v, 4);
			}
			uint32_t off = (uint32_t)(h & (SWV_SHM_RING_BYTES - 1)) & ~7u;
			uint32_t v = (uint32_t)rand_r(&seed) % 70000;
			memcpy(ring + off, &v, 4);
		}
		struct swv_rx_pkt pk[64];
		int n = swv_shm_rx_take(rp, pk, 64);
		for (int k = 0; k < n; k++) {
			/* Every byte handed out is read: one outside the mapping faults. */
			volatile uint8_t sum = 0;
			if (pk[k].len > SWV_EP_MAX_DGRAM)
				bad++;
			for (size_t b = 0; b < pk[k].len; b++)
				sum += pk[k].buf[b];
			/* Records are 8-aligned inside a ring of the inbox mapping. */
			if (((uintptr_t)pk[k].buf & 7) != 0)
				bad++;
		}
		swv_shm_rx_release(rp);
	}
	EXPECT(bad == 0, "a packet handed out is misaligned or too long");
	munmap(m, L_SIZE);
	swv_shm_close(rp);
	swv_ep_close(&r);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} t[] = {{"slot_leak", slot_leak},
		 {"closing_sender", closing_sender},
		 {"port_reuse", port_reuse},
		 {"hostile_tail", hostile_tail},
		 {"doorbell_lost", doorbell_lost},
		 {"shm_full", shm_full},
		 {"shm_full_sender", shm_full_sender},
		 {"stalled_receiver", stalled_receiver},
		 {"pid_namespace", pid_namespace},
		 {"route_eviction", route_eviction},
		 {"route_churn", route_churn},
		 {"fuzz_rx", fuzz_rx}};
	signal(SIGPIPE, SIG_IGN);
	if (!swv_shm_enabled())
		return 77;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (argc < 2 || !strcmp(argv[1], t[i].name))
			t[i].fn();
	return failures ? 1 : 0;
}
