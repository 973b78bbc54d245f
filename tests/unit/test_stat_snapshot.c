/*
 * transport/stat: the snapshot of one process (swv_stat_snapshot) and its socket.
 *  - Two contexts; on one an RC pair with traffic, a UC QP, a UD QP, a QP on an SRQ, a
 *    QP in RESET and a counter attached for two ops: the JSON parses (python3's json
 *    module) and says what was built (types, states, peers, counter value and op mask,
 *    CQ depth and fill, the progress thread's state, each inbox's backlog and armed
 *    flag); the text table names every QP, the thread's state and the inboxes.
 *  - The socket answers a client of the same uid and, when the test runs as root, gives a
 *    client of another uid nothing; after the last close the socket is gone.
 */
#include <pthread.h>
#include <string.h>
#include <stdlib.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/qp.h"
#include "transport/stat.h"
#include "inproc.h"

static const char checker[] =
    "import json,sys\n"
    "d=json.load(sys.stdin)\n"
    "assert d[\"pid\"]==int(sys.argv[1]), d[\"pid\"]\n"
    "c=d[\"contexts\"]\n"
    "assert len(c)==2, len(c)\n"
    "c=[x for x in c if x[\"qps\"]]\n"
    "assert len(c)==1\n"
    "c=c[0]\n"
    "q={x[\"qpn\"]:x for x in c[\"qps\"]}\n"
    "rc_a,rc_b,uc,ud,sq,rs,cnt=map(int,sys.argv[2:9])\n"
    "assert q[rc_a][\"type\"]==\"RC\" and q[rc_a][\"state\"]==\"RTS\"\n"
    "assert q[rc_a][\"peer\"][\"qpn\"]==rc_b and q[rc_b][\"peer\"][\"qpn\"]==rc_a\n"
    "assert q[rc_a][\"counters\"]=={\"SEND\":cnt,\"RDMA_WRITE\":cnt}, q[rc_a][\"counters\"]\n"
    "assert q[rc_b][\"responder\"][\"executed\"]>=4\n"
    "assert q[uc][\"type\"]==\"UC\" and q[uc][\"state\"]==\"INIT\" and q[uc][\"peer\"] is None\n"
    "assert q[ud][\"type\"]==\"UD\" and q[ud][\"state\"]==\"RTS\" and q[ud][\"peer\"] is None\n"
    "assert q[sq][\"srq\"] is True and q[sq][\"max_recv_wr\"]==0\n"
    "assert q[rs][\"state\"]==\"RESET\"\n"
    "assert q[rc_b][\"recv_posted\"]==1, q[rc_b][\"recv_posted\"]\n"
    "k=[x for x in c[\"counters\"] if x[\"handle\"]==cnt][0]\n"
    "assert k[\"completions\"]==4 and k[\"errors\"]==0, k\n"
    "assert k[\"op_mask\"]==0x11 and k[\"ops\"]==[\"SEND\",\"RDMA_WRITE\"], k\n"
    "assert k[\"qps\"]==[{\"qpn\":rc_a,\"op_mask\":0x11}], k[\"qps\"]\n"
    "cq=c[\"cqs\"][q[rc_a][\"send_cq\"]]\n"
    "assert cq[\"cqe\"]>=64 and cq[\"used\"]==1, cq\n"
    "assert c[\"port\"][\"state\"]==\"ACTIVE\" and c[\"port\"][\"rx_packets\"]>0\n"
    "g=c[\"progress\"]\n"
    "assert type(g[\"muted\"]) is bool and type(g[\"asleep\"]) is bool, g\n"
    "s=c[\"sockets\"]\n"
    "assert s and all((\"inbox_backlog\" in e)==e[\"intra_host_link\"] for e in s), s\n"
    "assert all(type(e[\"inbox_backlog\"]) is int and type(e[\"inbox_armed\"]) is bool\n"
    "           for e in s if e[\"intra_host_link\"]), s\n"
    "assert int(sys.argv[9])==any(e[\"intra_host_link\"] for e in s), s\n"
    "assert "
    "set(c[\"port\"][\"drops\"])>={\"bad_crc\",\"malformed\",\"unknown_qp\",\"bad_pkey\",\"source_"
    "or_state\",\"psn_window\"}\n";

static struct ibv_qp *mk_qp(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type type,
			    struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {.send_cq = cq,
				     .recv_cq = cq,
				     .srq = srq,
				     .qp_type = type,
				     .cap = {.max_send_wr = 16,
					     .max_recv_wr = srq ? 0 : 16,
					     .max_send_sge = 1,
					     .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	CHECK_PTR(qp);
	return qp;
}

static void wait_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int got = 0;
	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		CHECK(r >= 0);
		got += r;
	}
}

/* The server's answer to a client of this process's uid (or of uid, forked, when >= 0):
 * the bytes it read. */
static size_t ask(const char *req, int as_uid, char *out, size_t cap)
{
	int pfd[2];
	CHECK_OK(pipe(pfd));
	pid_t me = getpid();
	unsigned srv_uid = (unsigned)geteuid();
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		if (as_uid >= 0 && setresuid((uid_t)as_uid, (uid_t)as_uid, (uid_t)as_uid))
			_exit(3);
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "swverbs-stat.%u.%d",
				 srv_uid, (int)me);
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0 ||
		    connect(fd, (struct sockaddr *)&sa,
			    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)))
			_exit(4);
		/* a refused client may find the connection closed already: no SIGPIPE, and
		 * a reset reads as the end */
		(void)send(fd, req, strlen(req), MSG_NOSIGNAL);
		char buf[4096];
		ssize_t r;
		while ((r = read(fd, buf, sizeof(buf))) > 0)
			if (write(pfd[1], buf, (size_t)r) != r)
				_exit(6);
		_exit(0);
	}
	close(pfd[1]);
	size_t len = 0;
	ssize_t r;
	while ((r = read(pfd[0], out + len, cap - 1 - len)) > 0)
		len += (size_t)r;
	out[len] = 0;
	close(pfd[0]);
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return len;
}

int main(void)
{
	struct ibv_context *ctx = swvt_open_first_device();
	struct ibv_context *ctx2 = swvt_open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK_PTR(cq);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK_PTR(srq);
	struct ibv_mr *mr =
	    swvt_reg_buf(pd, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

	struct ibv_qp *a = mk_qp(pd, cq, IBV_QPT_RC, NULL), *b = mk_qp(pd, cq, IBV_QPT_RC, NULL);
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *cnt = ibv_create_comp_cntr(ctx, &ca);
	CHECK_PTR(cnt);
	struct ibv_qp_attach_comp_cntr_attr aa = {.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_SEND |
							     IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE};
	CHECK_OK(ibv_qp_attach_comp_cntr(a, cnt, &aa));
	swvt_pair_to_init(a);
	swvt_pair_to_init(b);
	swvt_pair_connect(a, b);

	struct ibv_qp *uc = mk_qp(pd, cq, IBV_QPT_UC, NULL);
	swvt_pair_to_init(uc);
	struct ibv_qp *ud = mk_qp(pd, cq, IBV_QPT_UD, NULL);
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 7};
	CHECK_OK(
	    ibv_modify_qp(ud, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
	CHECK_OK(ibv_modify_qp(ud, &at, IBV_QP_STATE));
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	CHECK_OK(ibv_modify_qp(ud, &at, IBV_QP_STATE | IBV_QP_SQ_PSN));
	struct ibv_qp *sq = mk_qp(pd, cq, IBV_QPT_RC, srq);
	struct ibv_qp *rs = mk_qp(pd, cq, IBV_QPT_RC, NULL);

	/* a SEND and two WRITEs, all signaled, and two receives (one stays posted) */
	struct ibv_wc wc[4];
	for (int i = 0; i < 2; i++) {
		struct ibv_sge rsge = {(uintptr_t)mr->addr + 2048, 64, mr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = 100 + (uint64_t)i,
					  .sg_list = &rsge,
					  .num_sge = 1},
				   *rbad;
		CHECK_OK(ibv_post_recv(b, &rwr, &rbad));
	}
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = {(uintptr_t)mr->addr, 64, mr->lkey};
		struct ibv_send_wr wr = {.wr_id = (uint64_t)i,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = i ? IBV_WR_RDMA_WRITE : IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.rdma = {(uintptr_t)mr->addr + 1024, mr->rkey}},
				   *bad;
		CHECK_OK(ibv_post_send(a, &wr, &bad));
		if (i == 2)
			wait_cq(cq, 4, wc); /* 3 send completions and the receive */
	}
	/* the last WRITE's CQE stays in the CQ: the counter says it completed, and the
	 * completion ran under a's lock, so once that lock was free the CQE is there too */
	uint64_t v = 0;
	while (v < 4)
		CHECK_OK(ibv_read_comp_cntr(cnt, &v));
	pthread_mutex_lock(&to_swv_qp(a)->lock);
	pthread_mutex_unlock(&to_swv_qp(a)->lock);

	size_t len;
	char *js;
	js = swv_stat_snapshot(1, &len);
	CHECK_PTR(js);
	char cmd[8192];
	/* the intra-host link is on unless switched off (docs/design.md) */
	const char *shm_env = getenv("SWVERBS_SHM");
	bool shm = !shm_env || strcmp(shm_env, "0");
	snprintf(cmd, sizeof(cmd), "python3 -c '%s' %d %u %u %u %u %u %u %u %d", checker,
		 (int)getpid(), a->qp_num, b->qp_num, uc->qp_num, ud->qp_num, sq->qp_num,
		 rs->qp_num, cnt->handle, shm);
	FILE *f = popen(cmd, "w");
	CHECK(f != NULL);
	CHECK_EQ(fwrite(js, 1, len, f), len);
	int st = pclose(f);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "the JSON snapshot failed its check:\n%s\n", js);
		CHECK(0);
	}
	free(js);

	char *tx = swv_stat_snapshot(0, &len);
	CHECK_PTR(tx);
	struct ibv_qp *all[] = {a, b, uc, ud, sq, rs};
	for (unsigned i = 0; i < 6; i++) {
		char q[32];
		snprintf(q, sizeof(q), "%#x ", all[i]->qp_num);
		CHECK(strstr(tx, q) != NULL);
	}
	CHECK(strstr(tx, "ops SEND|RDMA_WRITE") != NULL);
	CHECK(strstr(tx, "progress thread: ") != NULL);
	CHECK((strstr(tx, "inbox of port ") != NULL) == shm);
	free(tx);

	/* over the socket: a client of this uid gets the same kind of answer */
	static char buf[1 << 20];
	CHECK(ask("json\n", -1, buf, sizeof(buf)) > 0);
	CHECK(!strncmp(buf, "{\"pid\":", 7));
	CHECK(ask("bogus\n", -1, buf, sizeof(buf)) == 0);
	if (geteuid() == 0) {
		CHECK_EQ(ask("json\n", 65534, buf, sizeof(buf)), 0); /* another uid: nothing */
	} else {
		fprintf(stderr,
			"test_stat_snapshot: not root, the other-uid refusal is NOT checked\n");
	}

	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_qp(b));
	CHECK_OK(ibv_destroy_qp(uc));
	CHECK_OK(ibv_destroy_qp(ud));
	CHECK_OK(ibv_destroy_qp(sq));
	CHECK_OK(ibv_destroy_qp(rs));
	CHECK_OK(ibv_destroy_comp_cntr(cnt));
	CHECK_OK(ibv_destroy_srq(srq));
	swvt_dereg_buf(mr);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	CHECK_OK(ibv_close_device(ctx2));
	printf("test_stat_snapshot: ok\n");
	return 0;
}
