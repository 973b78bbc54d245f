/* Two-process test harness; see harness.h. Public verbs API only. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OOB_TIMEOUT_MS 30000

uint64_t swvt_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const char *swvt_wc_status_str(enum ibv_wc_status s)
{
	/* ibv_wc_status_str exists too, but a test must still print something useful if
	 * the library under test gets it wrong. */
	static const char *const names[] = {
		"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
		"WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR",
		"REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR",
		"RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR",
		"INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR",
		"GENERAL_ERR", "TM_ERR", "TM_RNDV_INCOMPLETE",
	};
	if ((unsigned)s < sizeof(names) / sizeof(names[0]))
		return names[s];
	return "?";
}

void swvt_opts_default(struct swvt_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->port = 1;
	o->qp_type = IBV_QPT_RC;
	o->addr_mode = SWVT_ADDR_AUTO;
	o->path_mtu = IBV_MTU_1024;
	/* 268 ms: retry_cnt 7 is finite, so (7 + 1) x the timeout must outlast the
	 * longest time a loaded 2-core CI machine leaves a process unscheduled */
	o->timeout = 16;
	o->retry_cnt = 7;
	o->rnr_retry = 7;
	o->min_rnr_timer = 1;
	o->max_rd_atomic = 4;
	o->max_dest_rd_atomic = 4;
	o->qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		       IBV_ACCESS_REMOTE_ATOMIC;
	o->stop_at = IBV_QPS_RTS;
	o->max_send_wr = 256;
	o->max_recv_wr = 256;
	o->max_send_sge = 4;
	o->max_recv_sge = 4;
	o->buf_size = (1u << 20) + 4096;
	o->mr_access = o->qp_access;
	o->cqe = 1024;
	o->watchdog_s = 60;
	o->qkey = 0x11111111;
}

/* ---- out-of-band channel ---- */

static void oob_wait(struct swvt *t, short ev)
{
	struct pollfd p = {.fd = t->sock, .events = ev};
	int r;
	do {
		r = poll(&p, 1, OOB_TIMEOUT_MS);
	} while (r < 0 && errno == EINTR);
	if (r == 0) {
		fprintf(stderr, "harness[%d]: out-of-band channel timed out\n", t->role);
		exit(1);
	}
	CHECK(r > 0);
}

void swvt_send(struct swvt *t, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		oob_wait(t, POLLOUT);
		ssize_t n = send(t->sock, p, len, MSG_NOSIGNAL);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			fprintf(stderr, "harness[%d]: peer went away (send: %s)\n", t->role,
				strerror(errno));
			exit(1);
		}
		p += n;
		len -= (size_t)n;
	}
}

void swvt_recv(struct swvt *t, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		oob_wait(t, POLLIN);
		ssize_t n = recv(t->sock, p, len, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			fprintf(stderr, "harness[%d]: peer went away (recv: %s)\n", t->role,
				n == 0 ? "EOF" : strerror(errno));
			exit(1);
		}
		p += n;
		len -= (size_t)n;
	}
}

void swvt_send_u64(struct swvt *t, uint64_t v)
{
	swvt_send(t, &v, sizeof(v));
}

uint64_t swvt_recv_u64(struct swvt *t)
{
	uint64_t v;
	swvt_recv(t, &v, sizeof(v));
	return v;
}

void swvt_barrier(struct swvt *t)
{
	uint32_t mine = 0xba771e5u, theirs = 0;
	swvt_send(t, &mine, sizeof(mine));
	swvt_recv(t, &theirs, sizeof(theirs));
	CHECK_EQ(theirs, mine);
}

/* ---- pattern ---- */

static uint8_t pattern_byte(uint32_t seed, size_t i)
{
	uint32_t x = seed * 2654435761u ^ (uint32_t)(i * 40503u) ^ (uint32_t)(i >> 8);
	x ^= x >> 13;
	x *= 0x5bd1e995u;
	return (uint8_t)(x >> 24);
}

void swvt_fill(void *buf, size_t len, uint32_t seed)
{
	uint8_t *p = buf;
	for (size_t i = 0; i < len; i++)
		p[i] = pattern_byte(seed, i);
}

size_t swvt_verify(const void *buf, size_t len, uint32_t seed)
{
	const uint8_t *p = buf;
	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern_byte(seed, i))
			return i;
	return (size_t)-1;
}

/* ---- verbs setup ---- */

static struct ibv_device *pick_device(struct ibv_device **list, int n, const char *name)
{
	if (!name)
		name = getenv("SWVT_DEVICE");
	if (!name || !*name)
		return n > 0 ? list[0] : NULL;
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			return list[i];
	return NULL;
}

void swvt_setup(struct swvt *t)
{
	const struct swvt_opts *o = &t->opts;
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK_PTR(list);
	const char *name = (t->role == 1 && o->child_dev_name) ? o->child_dev_name : o->dev_name;
	struct ibv_device *dev = pick_device(list, n, name);
	if (!dev) {
		fprintf(stderr, "harness: no device %s\n", name ? name : "");
		exit(1);
	}
	t->ctx = ibv_open_device(dev);
	CHECK_PTR(t->ctx);
	ibv_free_device_list(list);
	CHECK_OK(ibv_query_port(t->ctx, o->port, &t->port_attr));

	t->pd = ibv_alloc_pd(t->ctx);
	CHECK_PTR(t->pd);
	if (o->comp_channel) {
		t->channel = ibv_create_comp_channel(t->ctx);
		CHECK_PTR(t->channel);
	}
	t->scq = ibv_create_cq(t->ctx, o->cqe, NULL, t->channel, 0);
	CHECK_PTR(t->scq);
	if (o->shared_cq) {
		t->rcq = t->scq;
	} else {
		t->rcq = ibv_create_cq(t->ctx, o->cqe, NULL, t->channel, 0);
		CHECK_PTR(t->rcq);
	}

	size_t sz = (o->buf_size + 4095) & ~(size_t)4095;
	CHECK_OK(posix_memalign((void **)&t->buf, 4096, sz ? sz : 4096));
	memset(t->buf, 0, sz);
	t->mr = ibv_reg_mr(t->pd, t->buf, o->buf_size, (int)o->mr_access);
	CHECK_PTR(t->mr);

	struct ibv_qp_init_attr ia = {
		.send_cq = t->scq,
		.recv_cq = t->rcq,
		.cap = {.max_send_wr = o->max_send_wr,
			.max_recv_wr = o->max_recv_wr,
			.max_send_sge = o->max_send_sge,
			.max_recv_sge = o->max_recv_sge,
			.max_inline_data = o->max_inline_data},
		.qp_type = o->qp_type,
		.sq_sig_all = o->sq_sig_all,
	};
	t->qp = ibv_create_qp(t->pd, &ia);
	CHECK_PTR(t->qp);
	t->init_attr = ia;

	t->local.lid = t->port_attr.lid;
	union ibv_gid gid;
	CHECK_OK(ibv_query_gid(t->ctx, o->port, 0, &gid));
	memcpy(t->local.gid, gid.raw, 16);
	t->local.qpn = t->qp->qp_num;
	if (o->psn) {
		t->local.psn = o->psn & 0xffffff;
	} else {
		srand48((long)getpid() ^ (long)swvt_now_ms());
		t->local.psn = (uint32_t)lrand48() & 0xffffff;
	}
	t->local.addr = (uint64_t)(uintptr_t)t->buf;
	t->local.rkey = t->mr->rkey;
	t->local.size = o->buf_size;
	t->local.qkey = o->qkey;
}

void swvt_to_init(struct swvt *t)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = t->opts.port,
		.qp_access_flags = t->opts.qp_access,
		.qkey = t->opts.qkey,
	};
	if (t->opts.qp_type == IBV_QPT_UD) {
		CHECK_OK(ibv_modify_qp(t->qp, &a,
				       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
		return;
	}
	CHECK_OK(ibv_modify_qp(t->qp, &a,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

void swvt_exchange(struct swvt *t)
{
	/* Parent speaks first so both directions cannot block each other. */
	if (t->role == 0) {
		swvt_send(t, &t->local, sizeof(t->local));
		swvt_recv(t, &t->remote, sizeof(t->remote));
	} else {
		swvt_recv(t, &t->remote, sizeof(t->remote));
		swvt_send(t, &t->local, sizeof(t->local));
	}
}

void swvt_fill_ah_attr(struct swvt *t, struct ibv_ah_attr *ah)
{
	bool gid = t->opts.addr_mode == SWVT_ADDR_GID ||
		   (t->opts.addr_mode == SWVT_ADDR_AUTO &&
		    t->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET);
	memset(ah, 0, sizeof(*ah));
	ah->port_num = t->opts.port;
	ah->dlid = t->remote.lid;
	if (gid) {
		ah->is_global = 1;
		memcpy(ah->grh.dgid.raw, t->remote.gid, 16);
		ah->grh.sgid_index = 0;
		ah->grh.hop_limit = 64;
	}
}

void swvt_to_rtr(struct swvt *t)
{
	const struct swvt_opts *o = &t->opts;
	if (o->qp_type == IBV_QPT_UD) {
		struct ibv_qp_attr ud = {.qp_state = IBV_QPS_RTR};
		CHECK_OK(ibv_modify_qp(t->qp, &ud, IBV_QP_STATE));
		struct ibv_ah_attr ah;
		swvt_fill_ah_attr(t, &ah);
		if (t->ah)
			CHECK_OK(ibv_destroy_ah(t->ah));
		t->ah = ibv_create_ah(t->pd, &ah);
		CHECK_PTR(t->ah);
		return;
	}
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = o->path_mtu,
		.dest_qp_num = t->remote.qpn,
		.rq_psn = t->remote.psn,
		.max_dest_rd_atomic = o->max_dest_rd_atomic,
		.min_rnr_timer = o->min_rnr_timer,
	};
	swvt_fill_ah_attr(t, &a.ah_attr);
	if (o->qp_type == IBV_QPT_UC) {
		CHECK_OK(ibv_modify_qp(t->qp, &a,
				       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN));
		return;
	}
	CHECK_OK(ibv_modify_qp(t->qp, &a,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER));
}

void swvt_to_rts(struct swvt *t)
{
	const struct swvt_opts *o = &t->opts;
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.sq_psn = t->local.psn,
		.timeout = o->timeout,
		.retry_cnt = o->retry_cnt,
		.rnr_retry = o->rnr_retry,
		.max_rd_atomic = o->max_rd_atomic,
	};
	if (o->qp_type == IBV_QPT_UC || o->qp_type == IBV_QPT_UD) {
		CHECK_OK(ibv_modify_qp(t->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
		return;
	}
	CHECK_OK(ibv_modify_qp(t->qp, &a,
			       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
}

void swvt_connect(struct swvt *t)
{
	swvt_to_rtr(t);
	swvt_to_rts(t);
	swvt_barrier(t);
}

void swvt_teardown(struct swvt *t)
{
	if (t->qp)
		CHECK_OK(ibv_destroy_qp(t->qp));
	if (t->ah)
		CHECK_OK(ibv_destroy_ah(t->ah));
	if (t->mr)
		CHECK_OK(ibv_dereg_mr(t->mr));
	if (t->rcq && t->rcq != t->scq)
		CHECK_OK(ibv_destroy_cq(t->rcq));
	if (t->scq)
		CHECK_OK(ibv_destroy_cq(t->scq));
	if (t->channel)
		CHECK_OK(ibv_destroy_comp_channel(t->channel));
	if (t->pd)
		CHECK_OK(ibv_dealloc_pd(t->pd));
	if (t->ctx)
		CHECK_OK(ibv_close_device(t->ctx));
	free(t->buf);
	t->qp = NULL;
	t->ah = NULL;
	t->mr = NULL;
	t->scq = t->rcq = NULL;
	t->channel = NULL;
	t->pd = NULL;
	t->ctx = NULL;
	t->buf = NULL;
}

/* ---- completions ---- */

int swvt_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms)
{
	int got = 0;
	uint64_t deadline = swvt_now_ms() + (uint64_t)timeout_ms;
	unsigned idle = 0;
	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0) {
			fprintf(stderr, "harness: ibv_poll_cq returned %d\n", r);
			exit(1);
		}
		if (r > 0) {
			got += r;
			idle = 0;
			continue;
		}
		if (swvt_now_ms() >= deadline)
			break;
		/* Spin briefly, then back off so parallel tests do not starve each other. */
		if (++idle > 1000)
			usleep(50);
	}
	return got;
}

void swvt_poll_n_at(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms,
		    const char *file, int line)
{
	int got = swvt_poll(cq, wc, n, timeout_ms);
	if (got != n) {
		fprintf(stderr, "%s:%d: [pid %d] expected %d completions within %d ms, got %d\n",
			file, line, (int)getpid(), n, timeout_ms, got);
		for (int i = 0; i < got; i++)
			fprintf(stderr, "  wc[%d] wr_id %llu status %s opcode %d\n", i,
				(unsigned long long)wc[i].wr_id, swvt_wc_status_str(wc[i].status),
				wc[i].opcode);
		exit(1);
	}
}

void swvt_expect_empty(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc;
	int got = swvt_poll(cq, &wc, 1, ms);
	if (got) {
		fprintf(stderr, "harness: unexpected completion wr_id %llu status %s\n",
			(unsigned long long)wc.wr_id, swvt_wc_status_str(wc.status));
		exit(1);
	}
}

struct ibv_cq *swvt_wait_cq_event(struct swvt *t, int timeout_ms, bool may_timeout)
{
	CHECK(t->channel);
	struct pollfd p = {.fd = t->channel->fd, .events = POLLIN};
	int r;
	do {
		r = poll(&p, 1, timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r == 0) {
		if (may_timeout)
			return NULL;
		fprintf(stderr, "harness: no completion event within %d ms\n", timeout_ms);
		exit(1);
	}
	CHECK(r > 0);
	struct ibv_cq *cq = NULL;
	void *cq_ctx = NULL;
	CHECK_OK(ibv_get_cq_event(t->channel, &cq, &cq_ctx));
	ibv_ack_cq_events(cq, 1);
	return cq;
}

void swvt_post_recv(struct swvt *t, uint64_t wr_id, uint64_t off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)t->buf + off, .length = len, .lkey = t->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
	CHECK_OK(ibv_post_recv(t->qp, &wr, &bad));
}

void swvt_post_send(struct swvt *t, uint64_t wr_id, enum ibv_wr_opcode op, uint64_t off,
		    uint32_t len, uint64_t remote_off, unsigned flags)
{
	struct ibv_sge sge = {.addr = (uintptr_t)t->buf + off, .length = len, .lkey = t->mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = flags,
	}, *bad = NULL;
	if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ) {
		wr.wr.rdma.remote_addr = t->remote.addr + remote_off;
		wr.wr.rdma.rkey = t->remote.rkey;
	} else if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = t->remote.addr + remote_off;
		wr.wr.atomic.rkey = t->remote.rkey;
	}
	if (t->opts.qp_type == IBV_QPT_UD) {
		wr.wr.ud.ah = t->ah;
		wr.wr.ud.remote_qpn = t->remote.qpn;
		wr.wr.ud.remote_qkey = t->remote.qkey;
	}
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
}

void swvt_kill_peer(struct swvt *t)
{
	CHECK(t->role == 0);
	CHECK_OK(kill(t->peer_pid, SIGKILL));
	int st;
	pid_t r;
	do {
		r = waitpid(t->peer_pid, &st, 0);
	} while (r < 0 && errno == EINTR);
	CHECK_EQ(r, t->peer_pid);
	t->peer_gone = true;
}

/* ---- run ---- */

static void run_side(struct swvt *t, swvt_fn fn, void *arg)
{
	swvt_setup(t);
	if (t->opts.stop_at >= IBV_QPS_INIT)
		swvt_to_init(t);
	swvt_exchange(t);
	if (t->opts.stop_at >= IBV_QPS_RTR)
		swvt_to_rtr(t);
	if (t->opts.stop_at >= IBV_QPS_RTS)
		swvt_to_rts(t);
	swvt_barrier(t);
	fn(t, arg);
	/* Neither side destroys its QP while the other may still need answers from it. */
	if (!t->peer_gone)
		swvt_barrier(t);
	swvt_teardown(t);
}

static int reap_child(pid_t pid, int timeout_s)
{
	uint64_t deadline = swvt_now_ms() + (uint64_t)timeout_s * 1000;
	int st = 0;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			perror("harness: waitpid");
			return 1;
		}
		if (swvt_now_ms() > deadline) {
			fprintf(stderr, "harness: child %d did not exit; killing it\n", (int)pid);
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return 1;
		}
		usleep(1000);
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (WIFEXITED(st))
		fprintf(stderr, "harness: child failed with exit status %d\n", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		fprintf(stderr, "harness: child killed by signal %d\n", WTERMSIG(st));
	return 1;
}

int swvt_run(const struct swvt_opts *o, swvt_fn parent_fn, swvt_fn child_fn, void *arg)
{
	int sv[2];
	fflush(stdout);
	fflush(stderr);
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) ? errno : 0);
	pid_t parent = getpid();
	pid_t pid = fork();
	CHECK(pid >= 0);

	struct swvt t;
	memset(&t, 0, sizeof(t));
	t.opts = *o;

	if (pid == 0) {
		/* Child: die with the parent, and never outlive the watchdog. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		alarm((unsigned)o->watchdog_s);
		close(sv[0]);
		t.role = 1;
		t.sock = sv[1];
		t.peer_pid = parent;
		run_side(&t, child_fn, arg);
		close(t.sock);
		fflush(stdout);
		fflush(stderr);
		_exit(0);
	}

	close(sv[1]);
	t.role = 0;
	t.sock = sv[0];
	t.peer_pid = pid;
	/* SIGALRM's default action kills the parent; the child then dies with it
	 * (PDEATHSIG) and ctest sees the failure. */
	alarm((unsigned)o->watchdog_s);
	run_side(&t, parent_fn, arg);
	close(t.sock);
	int rc = t.peer_gone ? 0 : reap_child(pid, o->watchdog_s);
	alarm(0);
	return rc;
}
