/*
 * ibv_open_qp of a TGT QP of another process. The owner (this process) and a peer open
 * one XRC domain through one file. A TGT QP belongs to the domain, and swverbs knows
 * that another process's TGT QP exists (core/xrcd.h), but cannot deliver between
 * processes: opening it answers EOPNOTSUPP, while a number no TGT QP of the domain has
 * answers EINVAL, as the kernel's open_qp does. Checked:
 *  - the peer's ibv_open_qp of the owner's two TGT QPs: EOPNOTSUPP; of a QP number
 *    nobody has, of the owner's INI QP and of its own INI QP: EINVAL; of its own TGT
 *    QP: a handle;
 *  - once the owner destroyed TGT QP 1: EINVAL for it, still EOPNOTSUPP for TGT 2;
 *  - once the owner exited without destroying TGT 2: EINVAL for it too.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define OPEN_ALL (IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE)

static char path[] = "/tmp/swv-xrc-open.XXXXXX";

static struct ibv_context *open_first(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l && l[0]);
	struct ibv_context *ctx = ibv_open_device(l[0]);
	CHECK_PTR(ctx);
	ibv_free_device_list(l);
	return ctx;
}

static struct ibv_xrcd *open_xrcd(struct ibv_context *ctx, int *fd, int oflags)
{
	*fd = open(path, O_RDONLY);
	CHECK(*fd >= 0);
	struct ibv_xrcd_init_attr a = {.comp_mask =
					   IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
				       .fd = *fd,
				       .oflags = oflags};
	struct ibv_xrcd *x = ibv_open_xrcd(ctx, &a);
	CHECK_PTR(x);
	return x;
}

static struct ibv_qp *tgt_qp(struct ibv_context *ctx, struct ibv_xrcd *x)
{
	struct ibv_qp_init_attr_ex a = {
	    .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a);
	CHECK_PTR(qp);
	return qp;
}

static struct ibv_qp *ini_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex a = {.send_cq = cq,
					.qp_type = IBV_QPT_XRC_SEND,
					.cap = {.max_send_wr = 1, .max_send_sge = 1},
					.comp_mask = IBV_QP_INIT_ATTR_PD,
					.pd = pd};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a);
	CHECK_PTR(qp);
	return qp;
}

/* errno of ibv_open_qp(qpn) (0: a handle, destroyed again at once) */
static int try_open(struct ibv_context *ctx, struct ibv_xrcd *x, uint32_t qpn)
{
	struct ibv_qp_open_attr a = {
	    .comp_mask = OPEN_ALL, .qp_num = qpn, .xrcd = x, .qp_type = IBV_QPT_XRC_RECV};
	errno = 0;
	struct ibv_qp *h = ibv_open_qp(ctx, &a);
	if (!h) {
		CHECK(errno != 0);
		return errno;
	}
	CHECK_EQ(h->qp_num, qpn);
	CHECK_OK(ibv_destroy_qp(h));
	return 0;
}

struct owner_info {
	uint32_t tgt[2], ini;
};

static void put(int fd, char c)
{
	CHECK_EQ(write(fd, &c, 1), 1);
}

static char get(int fd)
{
	char c = 0;
	CHECK_EQ(read(fd, &c, 1), 1);
	return c;
}

static void peer(int up, int down)
{
	struct owner_info oi;
	CHECK_EQ(read(down, &oi, sizeof(oi)), (ssize_t)sizeof(oi));
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(pd && cq);
	int fd;
	struct ibv_xrcd *x = open_xrcd(ctx, &fd, 0); /* the owner's domain */
	struct ibv_qp *own = tgt_qp(ctx, x), *ini = ini_qp(ctx, pd, cq);

	CHECK_EQ(try_open(ctx, x, oi.tgt[0]), EOPNOTSUPP);
	CHECK_EQ(try_open(ctx, x, oi.tgt[1]), EOPNOTSUPP);
	CHECK_EQ(try_open(ctx, x, 0xfffff0), EINVAL);
	CHECK_EQ(try_open(ctx, x, oi.ini), EINVAL);
	CHECK_EQ(try_open(ctx, x, ini->qp_num), EINVAL);
	CHECK_EQ(try_open(ctx, x, own->qp_num), 0);
	put(up, '1');

	CHECK_EQ(get(down), '2'); /* TGT 1 destroyed */
	CHECK_EQ(try_open(ctx, x, oi.tgt[0]), EINVAL);
	CHECK_EQ(try_open(ctx, x, oi.tgt[1]), EOPNOTSUPP);
	put(up, '3');

	CHECK_EQ(get(down), '4'); /* the owner has exited */
	CHECK_EQ(try_open(ctx, x, oi.tgt[1]), EINVAL);

	CHECK_OK(ibv_destroy_qp(own));
	CHECK_OK(ibv_destroy_qp(ini));
	CHECK_OK(ibv_close_xrcd(x));
	CHECK_OK(close(fd));
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	exit(0);
}

/* The owner: two TGT QPs and an INI QP; destroys TGT 1 when told, then exits holding
 * TGT 2 (a process that dies leaves no TGT QP behind). */
static void owner(int up, int down, int to_peer)
{
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(pd && cq);
	int fd;
	struct ibv_xrcd *x = open_xrcd(ctx, &fd, O_CREAT);
	struct ibv_qp *t1 = tgt_qp(ctx, x), *t2 = tgt_qp(ctx, x), *ini = ini_qp(ctx, pd, cq);
	struct owner_info oi = {.tgt = {t1->qp_num, t2->qp_num}, .ini = ini->qp_num};
	CHECK_EQ(write(to_peer, &oi, sizeof(oi)), (ssize_t)sizeof(oi));
	CHECK_EQ(get(down), '1');
	CHECK_OK(ibv_destroy_qp(t1));
	put(up, '2');
	CHECK_EQ(get(down), '3');
	_exit(0); /* t2, the domain and the context are left to the process's end */
}

int main(void)
{
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	alarm(60);
	/* pipes: peer -> main, main -> peer; owner -> main, main -> owner */
	int p_up[2], p_down[2], o_up[2], o_down[2];
	CHECK(pipe(p_up) == 0 && pipe(p_down) == 0 && pipe(o_up) == 0 && pipe(o_down) == 0);
	pid_t pp = fork();
	CHECK(pp >= 0);
	if (pp == 0) {
		alarm(60); /* not inherited: a stuck child must end too */
		peer(p_up[1], p_down[0]);
	}
	pid_t op = fork();
	CHECK(op >= 0);
	if (op == 0) {
		alarm(60);
		owner(o_up[1], o_down[0], p_down[1]);
	}
	/* relay: the peer's checks alternate with the owner's steps */
	CHECK_EQ(get(p_up[0]), '1');
	put(o_down[1], '1');
	CHECK_EQ(get(o_up[0]), '2');
	put(p_down[1], '2');
	CHECK_EQ(get(p_up[0]), '3');
	put(o_down[1], '3');
	int st;
	CHECK_EQ(waitpid(op, &st, 0), op);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	put(p_down[1], '4');
	CHECK_EQ(waitpid(pp, &st, 0), pp);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	unlink(path);
	printf("ibv_open_qp of another process's TGT QP: EOPNOTSUPP while it lives, EINVAL "
	       "after: ok\n");
	return 0;
}
