/*
 * swverbs-stat against what the processes know (transport/stat.h, docs/man/swverbs-stat.1.md).
 *
 * 1. Two processes with a device open, one of them with SWVERBS_STAT=0: the tool lists
 *    the other and not that one, and -p on it fails.
 * 2. Two processes with connected RC QPs and an attached counter each, under injected
 *    loss (SWVERBS_FAULT=seed=1,drop=5): the requester streams RDMA WRITEs, then one
 *    WRITE with a bad rkey. Each process runs `swverbs-stat -j -p <itself>` and checks
 *    the JSON (parsed by python3's json module) against its own view: the QP's state
 *    (ibv_query_qp), its peer QPN, the counter's values (ibv_read_comp_cntr) and op
 *    mask, retransmissions > 0 on the requester, and the refused access on the target;
 *    -w refreshes with one JSON array per line.
 */
#include <inttypes.h>
#include <signal.h>
#include <sys/wait.h>

#include "harness.h"

#ifndef SWV_STAT_TOOL
#error "SWV_STAT_TOOL: path of the built swverbs-stat"
#endif

#define N    400 /* WRITEs: at 5% drop, none lost has probability 0.95^400 ~ 1e-9 */
#define WLEN 64
#define TMO  30000

/* Reads the tool's JSON, validates it, and prints one line per QP and counter for C. */
static const char checker[] =
    "import json,subprocess,sys\n"
    "r=subprocess.run(sys.argv[1:],stdout=subprocess.PIPE,check=True)\n"
    "d=json.loads(r.stdout)\n"
    "assert isinstance(d,list) and len(d)==1, d\n"
    "p=d[0]\n"
    "print(\"pid\",p[\"pid\"])\n"
    "for c in p[\"contexts\"]:\n"
    "  "
    "print(\"port\",c[\"port\"][\"retransmits\"],c[\"port\"][\"remote_refused\"],c[\"port\"]["
    "\"state\"])\n"
    "  for q in c[\"qps\"]:\n"
    "    print(\"qp\",q[\"qpn\"],q[\"state\"],q[\"retransmits\"],q[\"remote_refused\"],\n"
    "          (q[\"peer\"] or {}).get(\"qpn\",0))\n"
    "  for k in c[\"counters\"]:\n"
    "    print(\"cntr\",k[\"handle\"],k[\"completions\"],k[\"errors\"],k[\"op_mask\"])\n";

struct seen {
	int pid;
	int nctx, nqp, ncntr;
	uint64_t port_retrans, port_refused;
	uint32_t qpn, peer_qpn;
	char state[16];
	uint64_t retrans, refused;
	uint32_t handle, op_mask;
	uint64_t comp, err;
};

static void run_checker(int pid, struct seen *s)
{
	char cmd[4096];
	memset(s, 0, sizeof(*s));
	/* the script goes through the shell in single quotes: it holds none itself */
	snprintf(cmd, sizeof(cmd), "python3 -c '%s' %s -j -p %d", checker, SWV_STAT_TOOL, pid);
	FILE *f = popen(cmd, "r");
	CHECK(f != NULL);
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "pid ", 4)) {
			CHECK(sscanf(line, "pid %d", &s->pid) == 1);
		} else if (!strncmp(line, "port ", 5)) {
			char st[16];
			CHECK(sscanf(line, "port %" SCNu64 " %" SCNu64 " %15s", &s->port_retrans,
				     &s->port_refused, st) == 3);
			CHECK(!strcmp(st, "ACTIVE"));
			s->nctx++;
		} else if (!strncmp(line, "qp ", 3)) {
			CHECK(sscanf(line, "qp %u %15s %" SCNu64 " %" SCNu64 " %u", &s->qpn,
				     s->state, &s->retrans, &s->refused, &s->peer_qpn) == 5);
			s->nqp++;
		} else if (!strncmp(line, "cntr ", 5)) {
			CHECK(sscanf(line, "cntr %u %" SCNu64 " %" SCNu64 " %u", &s->handle,
				     &s->comp, &s->err, &s->op_mask) == 4);
			s->ncntr++;
		} else {
			fprintf(stderr, "unexpected checker output: %s", line);
			CHECK(0);
		}
	}
	int st = pclose(f);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "swverbs-stat -j -p %d: the JSON check failed (status %#x)\n", pid,
			st);
		CHECK(0);
	}
	CHECK_EQ(s->pid, pid);
	CHECK_EQ(s->nctx, 1);
	CHECK_EQ(s->nqp, 1);
	CHECK_EQ(s->ncntr, 1);
}

/* -w: two refreshes, each a JSON array of this one process on a line of its own. The
 * tool dies of SIGPIPE once head has its two lines. */
static void check_watch(void)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "%s -w 0.05 -j -p %d | head -n 2 | python3 -c 'import json,sys\n"
		 "l=sys.stdin.read().splitlines()\n"
		 "assert len(l)==2, l\n"
		 "for x in l:\n"
		 "  d=json.loads(x)\n"
		 "  assert len(d)==1 and d[0][\"pid\"]==%d, d\n'",
		 SWV_STAT_TOOL, (int)getpid(), (int)getpid());
	int st = system(cmd);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "swverbs-stat -w: the JSON check failed (status %#x)\n", st);
		CHECK(0);
	}
}

static const char *state_name(enum ibv_qp_state st)
{
	static const char *const n[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
	return (unsigned)st < 7 ? n[st] : "?";
}

/* What the process itself knows, against the tool's report. */
static void check_self(struct swvt *t, struct ibv_comp_cntr *c, uint32_t op_mask, struct seen *s)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	uint64_t comp, err;

	run_checker(getpid(), s);
	CHECK_OK(ibv_query_qp(t->qp, &a, IBV_QP_STATE, &ia));
	CHECK_OK(ibv_read_comp_cntr(c, &comp));
	CHECK_OK(ibv_read_err_comp_cntr(c, &err));
	CHECK_EQ(s->qpn, t->qp->qp_num);
	CHECK_EQ(s->peer_qpn, t->remote.qpn);
	if (strcmp(s->state, state_name(a.qp_state))) {
		fprintf(stderr, "swverbs-stat says QP state %s, ibv_query_qp %s\n", s->state,
			state_name(a.qp_state));
		CHECK(0);
	}
	CHECK_EQ(s->handle, c->handle);
	CHECK_EQ(s->op_mask, op_mask);
	/* nothing counts after these reads: the traffic is over when this runs */
	CHECK_EQ(s->comp, comp);
	CHECK_EQ(s->err, err);
	CHECK_EQ(s->port_retrans, s->retrans);
	CHECK_EQ(s->port_refused, s->refused);
}

static struct ibv_comp_cntr *attach(struct swvt *t, uint32_t op)
{
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(t->ctx, &ca);
	CHECK_PTR(c);
	struct ibv_qp_attach_comp_cntr_attr aa = {.op_mask = op};
	CHECK_OK(ibv_qp_attach_comp_cntr(t->qp, c, &aa));
	return c;
}

static void requester(struct swvt *t, void *arg)
{
	static struct ibv_wc wc[N];
	const uint32_t op = IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE;
	struct ibv_comp_cntr *c = attach(t, op);
	struct seen s;

	swvt_connect(t);
	for (int i = 0; i < N; i++)
		swvt_post_send(t, (uint64_t)i, IBV_WR_RDMA_WRITE, (uint64_t)i * WLEN, WLEN,
			       (uint64_t)i * WLEN, IBV_SEND_SIGNALED);
	swvt_poll_n(t->scq, wc, N, TMO);
	for (int i = 0; i < N; i++)
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
	swvt_barrier(t); /* 1: all written */

	check_self(t, c, op, &s);
	check_watch();
	CHECK_EQ(s.comp, (uint64_t)N);
	CHECK(!strcmp(s.state, "RTS"));
	if (s.retrans == 0) {
		fprintf(stderr, "no retransmission reported under 5%% drop\n");
		CHECK(0);
	}
	swvt_barrier(t); /* 2: the target checked its view */

	/* A WRITE the target must refuse: a key it never handed out. */
	struct ibv_sge sge = {(uintptr_t)t->buf, WLEN, t->mr->lkey};
	struct ibv_send_wr wr = {
	    .wr_id = 999,
	    .sg_list = &sge,
	    .num_sge = 1,
	    .opcode = IBV_WR_RDMA_WRITE,
	    .send_flags = IBV_SEND_SIGNALED,
	    .wr.rdma = {.remote_addr = t->remote.addr, .rkey = t->remote.rkey ^ 0x5a5a5a5a}};
	struct ibv_send_wr *bad;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	swvt_poll_n(t->scq, wc, 1, TMO);
	/* The target NAKs it and its QP goes to ERR; if the injector drops that NAK, the
	 * resends meet a QP in ERR and the requester runs out of retries instead. */
	if (wc[0].status != IBV_WC_RETRY_EXC_ERR)
		CHECK_WC(wc[0], IBV_WC_REM_ACCESS_ERR);
	swvt_barrier(t); /* 3: refused */

	check_self(t, c, op, &s);
	CHECK(!strcmp(s.state, "ERR"));
	CHECK_EQ(s.comp, (uint64_t)N);
	swvt_barrier(t); /* 4: the target checked */
	(void)arg;
	/* the harness destroys the QP first; the counter is detached with it */
	ibv_destroy_qp(t->qp);
	t->qp = NULL;
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

static void target(struct swvt *t, void *arg)
{
	const uint32_t op = IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE;
	struct ibv_comp_cntr *c = attach(t, op);
	struct seen s;
	uint64_t v = 0;

	swvt_connect(t);
	swvt_barrier(t); /* 1 */
	/* remote WRITEs count when placed; the requester's completions followed the ACKs */
	CHECK_OK(ibv_read_comp_cntr(c, &v));
	CHECK_EQ(v, (uint64_t)N);
	check_self(t, c, op, &s);
	CHECK_EQ(s.comp, (uint64_t)N);
	CHECK(!strcmp(s.state, "RTS"));
	CHECK_EQ(s.refused, 0);
	swvt_barrier(t); /* 2 */
	swvt_barrier(t); /* 3: the requester got its error: the refusal was counted first */
	check_self(t, c, op, &s);
	/* a lost NAK makes the requester send the WRITE again: refused again, or dropped */
	CHECK(s.refused >= 1);
	CHECK_EQ(s.comp, (uint64_t)N);
	/* what the target itself knows of it: its counter's error count, its QP in ERR
	 * (check_self compared both with the report) */
	CHECK(s.err >= 1);
	CHECK(!strcmp(s.state, "ERR"));
	swvt_barrier(t); /* 4 */
	(void)arg;
	ibv_destroy_qp(t->qp);
	t->qp = NULL;
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

/* ---- 1: SWVERBS_STAT=0 ---- */

/* Fork a process that opens a device (with SWVERBS_STAT=0 if hidden), writes one byte
 * on ready, and waits for the write end of 'hold' to close. */
static pid_t spawn_holder(bool hidden, int ready_fd_out[1], int *hold_w)
{
	int ready[2], hold[2];
	CHECK_OK(pipe(ready));
	CHECK_OK(pipe(hold));
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(ready[0]);
		close(hold[1]);
		if (hidden)
			setenv("SWVERBS_STAT", "0", 1);
		else
			unsetenv("SWVERBS_STAT");
		struct ibv_device **l = ibv_get_device_list(NULL);
		if (!l || !l[0])
			_exit(3);
		struct ibv_context *ctx = ibv_open_device(l[0]);
		if (!ctx)
			_exit(4);
		/* the socket is listening once ibv_open_device returned */
		char b = 1, x;
		if (write(ready[1], &b, 1) != 1)
			_exit(5);
		while (read(hold[0], &x, 1) > 0)
			;
		ibv_close_device(ctx);
		ibv_free_device_list(l);
		_exit(0);
	}
	close(ready[1]);
	close(hold[0]);
	char b;
	CHECK_EQ(read(ready[0], &b, 1), 1);
	close(ready[0]);
	ready_fd_out[0] = -1;
	*hold_w = hold[1];
	return pid;
}

static bool listed(pid_t pid)
{
	char cmd[512], line[64];
	bool found = false;
	snprintf(cmd, sizeof(cmd), "%s -l", SWV_STAT_TOOL);
	FILE *f = popen(cmd, "r");
	CHECK(f != NULL);
	while (fgets(line, sizeof(line), f))
		if (atoi(line) == pid)
			found = true;
	CHECK_EQ(pclose(f), 0);
	return found;
}

static int query_status(pid_t pid)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s -j -p %d >/dev/null 2>&1", SWV_STAT_TOOL, (int)pid);
	int st = system(cmd);
	CHECK(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void test_hidden(void)
{
	int dummy[1], hw_vis, hw_hid;
	pid_t vis = spawn_holder(false, dummy, &hw_vis);
	pid_t hid = spawn_holder(true, dummy, &hw_hid);

	CHECK(listed(vis));
	CHECK(!listed(hid));
	CHECK_EQ(query_status(vis), 0);
	CHECK(query_status(hid) != 0);

	close(hw_vis);
	close(hw_hid);
	int st;
	CHECK_EQ(waitpid(vis, &st, 0), vis);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(waitpid(hid, &st, 0), hid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* the last context closed: the socket is gone with it */
	CHECK(!listed(vis));
}

int main(void)
{
	if (system("python3 -c 'import json' >/dev/null 2>&1")) {
		fprintf(stderr, "test_stat: SKIPPED, python3 is needed to parse the JSON\n");
		return 77;
	}
	test_hidden();

	struct swvt_opts o;
	swvt_opts_default(&o);
	o.stop_at = IBV_QPS_INIT; /* attach the counters, then connect */
	o.max_send_wr = N + 1;
	o.cqe = 2 * N;
	o.buf_size = (size_t)N * WLEN + 4096;
	/* both processes inherit it; it forces UDP between them */
	setenv("SWVERBS_FAULT", "seed=1,drop=5", 1);
	return swvt_run(&o, requester, target, NULL);
}
