/*
 * XRC objects in one process: ibv_open_xrcd's errnos (as the kernel's open_xrcd),
 * concurrent O_EXCL openers in several processes (one makes the domain),
 * handles of one file naming one domain (an SRQ made on one handle takes the messages
 * of a TGT QP made on another), close EBUSY while used, XRC SRQ and QP creation rules
 * and errnos, the XRC state-transition masks, posting rules, the QP types swverbs-stat
 * shows, ibv_open_qp (errnos; handles in this context and another; traffic through a TGT
 * QP its creator destroyed; a counter attached through a handle counts the QP's
 * receives). Traffic between processes is tests/mp/test_xrc.c, ibv_open_qp
 * of another process's TGT QP tests/mp/test_xrc_open.c.
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
#include "inproc.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "transport/stat.h"

static struct ibv_xrcd *xopen(struct ibv_context *ctx, uint32_t mask, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {.comp_mask = mask, .fd = fd, .oflags = oflags};
	return ibv_open_xrcd(ctx, &a);
}

#define FD_OFL (IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS)

static struct ibv_srq *xsrq(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_xrcd *x,
			    struct ibv_cq *cq, uint32_t mask)
{
	struct ibv_srq_init_attr_ex a = {.attr = {.max_wr = 8, .max_sge = 1},
					 .comp_mask = mask,
					 .srq_type = IBV_SRQT_XRC,
					 .pd = pd,
					 .xrcd = x,
					 .cq = cq};
	return ibv_create_srq_ex(ctx, &a);
}

#define SRQ_ALL                                                                                    \
	(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |                  \
	 IBV_SRQ_INIT_ATTR_PD)

static struct ibv_qp *tgt_qp(struct ibv_context *ctx, struct ibv_xrcd *x)
{
	struct ibv_qp_init_attr_ex a = {
	    .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x};
	return ibv_create_qp_ex(ctx, &a);
}

static struct ibv_qp *ini_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex a = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .qp_type = IBV_QPT_XRC_SEND,
	    .cap = {.max_send_wr = 8, .max_send_sge = 1, .max_recv_wr = 8},
	    .comp_mask = IBV_QP_INIT_ATTR_PD,
	    .pd = pd};
	return ibv_create_qp_ex(ctx, &a);
}

/* INI -> TGT on this context, the masks each half takes. */
static void connect_xrc(struct ibv_context *ctx, struct ibv_qp *ini, struct ibv_qp *tgt)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	CHECK_OK(ibv_modify_qp(ini, &a, init));
	CHECK_OK(ibv_modify_qp(tgt, &a, init));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	swvt_local_ah_attr(ctx, &a.ah_attr);
	int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	a.dest_qp_num = tgt->qp_num;
	CHECK_OK(ibv_modify_qp(ini, &a, rtr));
	a.dest_qp_num = ini->qp_num;
	CHECK_EQ(ibv_modify_qp(tgt, &a, rtr), EINVAL); /* a TGT QP needs the responder's */
	CHECK_OK(ibv_modify_qp(tgt, &a, rtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK_EQ(ibv_modify_qp(ini, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN), EINVAL);
	CHECK_OK(ibv_modify_qp(ini, &a,
			       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
	CHECK_OK(ibv_modify_qp(tgt, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN));
}

static struct ibv_wc poll1(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (int i = 0; i < 5000000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0);
		if (n == 1)
			return wc;
		if (i > 1000)
			usleep(10);
	}
	fprintf(stderr, "no completion\n");
	exit(1);
}

static void test_open_close(struct ibv_context *ctx, const char *path)
{
	CHECK_NULL_ERRNO(xopen(ctx, IBV_XRCD_INIT_ATTR_FD, -1, O_CREAT), EINVAL);
	CHECK_NULL_ERRNO(xopen(ctx, FD_OFL | IBV_XRCD_INIT_ATTR_RESERVED, -1, O_CREAT), EOPNOTSUPP);
	CHECK_NULL_ERRNO(xopen(ctx, FD_OFL, -1, 0), EINVAL); /* fd -1 makes a new one */
	CHECK_NULL_ERRNO(xopen(ctx, FD_OFL, -1, O_RDWR | O_CREAT), EINVAL);
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	int closed = dup(fd);
	CHECK(closed >= 0);
	CHECK_OK(close(closed));
	CHECK_NULL_ERRNO(xopen(ctx, FD_OFL, closed, O_CREAT), EBADF);
	CHECK_NULL_ERRNO(xopen(ctx, FD_OFL, fd, 0), ENOENT); /* none yet, none made */
	struct ibv_xrcd *a = xopen(ctx, FD_OFL, fd, O_CREAT | O_EXCL);
	CHECK_PTR(a);
	CHECK(a->context == ctx);
	CHECK_NULL_ERRNO(xopen(ctx, FD_OFL, fd, O_CREAT | O_EXCL), EEXIST);
	int fd2 = open(path, O_RDONLY); /* another file description, the same inode */
	CHECK(fd2 >= 0);
	struct ibv_xrcd *b = xopen(ctx, FD_OFL, fd2, 0);
	CHECK_PTR(b);
	CHECK(b != a);
	CHECK_OK(ibv_close_xrcd(a));
	CHECK_NULL_ERRNO(xopen(ctx, FD_OFL, fd, O_CREAT | O_EXCL), EEXIST); /* b holds it */
	CHECK_OK(ibv_close_xrcd(b));
	CHECK_NULL_ERRNO(xopen(ctx, FD_OFL, fd, 0), ENOENT); /* the last close ended it */
	/* two anonymous domains are two */
	struct ibv_xrcd *n1 = xopen(ctx, FD_OFL, -1, O_CREAT),
			*n2 = xopen(ctx, FD_OFL, -1, O_CREAT);
	CHECK(n1 && n2);
	CHECK_OK(ibv_close_xrcd(n1));
	CHECK_OK(ibv_close_xrcd(n2));
	CHECK_OK(close(fd));
	CHECK_OK(close(fd2));
}

static void test_objects(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_xrcd *x = xopen(ctx, FD_OFL, -1, O_CREAT);
	CHECK_PTR(x);
	/* an XRC SRQ needs its domain and its CQ (and a PD, as every SRQ) */
	CHECK_NULL_ERRNO(xsrq(ctx, pd, x, cq, SRQ_ALL & ~IBV_SRQ_INIT_ATTR_CQ), EINVAL);
	CHECK_NULL_ERRNO(xsrq(ctx, pd, x, cq, SRQ_ALL & ~IBV_SRQ_INIT_ATTR_XRCD), EINVAL);
	CHECK_NULL_ERRNO(xsrq(ctx, pd, NULL, cq, SRQ_ALL), EINVAL);
	CHECK_NULL_ERRNO(xsrq(ctx, pd, x, NULL, SRQ_ALL), EINVAL);
	CHECK_NULL_ERRNO(xsrq(ctx, pd, x, cq, SRQ_ALL & ~IBV_SRQ_INIT_ATTR_PD), EINVAL);
	struct ibv_srq *s1 = xsrq(ctx, pd, x, cq, SRQ_ALL), *s2 = xsrq(ctx, pd, x, cq, SRQ_ALL);
	CHECK(s1 && s2);
	uint32_t n1 = 0, n2 = 0;
	CHECK_OK(ibv_get_srq_num(s1, &n1));
	CHECK_OK(ibv_get_srq_num(s2, &n2));
	CHECK(n1 && n2 && n1 != n2 && n1 <= 0xffffff && n2 <= 0xffffff);
	CHECK_EQ(ibv_close_xrcd(x), EBUSY);
	CHECK_EQ(ibv_destroy_cq(cq), EBUSY); /* the SRQs complete on it */

	/* a TGT QP: a domain, no PD, no CQ, no queues */
	struct ibv_qp_init_attr_ex ta = {
	    .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &ta), EINVAL);
	ta.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &ta), EINVAL); /* no xrcd given */
	struct ibv_qp *t = tgt_qp(ctx, x);
	CHECK_PTR(t);
	CHECK(t->qp_type == IBV_QPT_XRC_RECV && !t->pd && !t->send_cq && !t->recv_cq && !t->srq);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK_OK(ibv_query_qp(t, &qa, 0, &qi));
	CHECK_EQ(qi.qp_type, IBV_QPT_XRC_RECV);
	CHECK_EQ(qi.cap.max_send_wr, 0);
	CHECK_EQ(qi.cap.max_recv_wr, 0);
	CHECK_EQ(ibv_destroy_srq(s1), 0); /* no TGT QP has delivered into it */
	CHECK_EQ(ibv_close_xrcd(x), EBUSY);

	/* an INI QP: a PD and a send CQ; no receive queue whatever was asked */
	struct ibv_qp_init_attr_ex ia = {.qp_type = IBV_QPT_XRC_SEND,
					 .cap = {.max_send_wr = 4, .max_send_sge = 1},
					 .comp_mask = IBV_QP_INIT_ATTR_PD,
					 .pd = pd};
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &ia), EINVAL); /* no send CQ */
	struct ibv_qp *i = ini_qp(ctx, pd, cq);
	CHECK_PTR(i);
	CHECK(i->qp_type == IBV_QPT_XRC_SEND && !i->recv_cq && i->send_cq == cq);
	CHECK_OK(ibv_query_qp(i, &qa, 0, &qi));
	CHECK_EQ(qi.qp_type, IBV_QPT_XRC_SEND);
	CHECK_EQ(qi.cap.max_recv_wr, 0);
	CHECK_EQ(qi.cap.max_send_wr, 8);

	/* swverbs-stat names the halves, and a TGT QP's missing CQs are null (the
	 * snapshot dereferenced them) */
	size_t len;
	char *js = swv_stat_snapshot(1, &len);
	CHECK_PTR(js);
	CHECK(strstr(js, "\"XRC_INI\"") && strstr(js, "\"XRC_TGT\""));
	CHECK(strstr(js, "\"send_cq\":null,\"recv_cq\":null")); /* the TGT QP has none */
	CHECK(strstr(js, "\"send_cq\":0,\"recv_cq\":null"));	/* the INI QP a send CQ */
	free(js);
	js = swv_stat_snapshot(0, &len); /* the table */
	CHECK(js && strstr(js, "XRC_TGT"));
	free(js);

	CHECK_OK(ibv_destroy_qp(i));
	CHECK_OK(ibv_destroy_qp(t));
	CHECK_OK(ibv_destroy_srq(s2));
	CHECK_OK(ibv_close_xrcd(x));
}

/* Handles of one file are one domain: an SRQ on handle a takes what a TGT QP made on
 * handle b delivers; through a TGT QP of another domain the same SRQ number is a
 * remote access error; the SRQ can be destroyed while the TGT QP lives. */
/* An INI QP takes RC's ops but those XRC has no opcode for (ATOMIC_WRITE, FLUSH) and the
 * memory-window ones and SEND_WITH_INV. */
static void test_ini_ops(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex a = {
	    .send_cq = cq,
	    .qp_type = IBV_QPT_XRC_SEND,
	    .cap = {.max_send_wr = 8, .max_send_sge = 1},
	    .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
	    .pd = pd,
	    .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ |
			      IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a);
	CHECK_PTR(qp);
	CHECK_OK(ibv_destroy_qp(qp));
	static const uint64_t refused[] = {IBV_QP_EX_WITH_ATOMIC_WRITE, IBV_QP_EX_WITH_FLUSH,
					   IBV_QP_EX_WITH_BIND_MW, IBV_QP_EX_WITH_LOCAL_INV,
					   IBV_QP_EX_WITH_SEND_WITH_INV};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		a.send_ops_flags = IBV_QP_EX_WITH_SEND | refused[i];
		CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &a), EOPNOTSUPP);
	}
}

static void test_one_domain(struct ibv_context *ctx, struct ibv_pd *pd, const char *path)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0),
		      *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq && scq);
	int fa = open(path, O_RDONLY), fb = open(path, O_RDONLY);
	CHECK(fa >= 0 && fb >= 0);
	struct ibv_xrcd *a = xopen(ctx, FD_OFL, fa, O_CREAT), *b = xopen(ctx, FD_OFL, fb, O_CREAT);
	struct ibv_xrcd *other = xopen(ctx, FD_OFL, -1, O_CREAT);
	CHECK(a && b && other);
	char *buf = calloc(1, 4096);
	CHECK_PTR(buf);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(mr);
	struct ibv_srq *s = xsrq(ctx, pd, a, cq, SRQ_ALL);
	CHECK_PTR(s);
	uint32_t srqn;
	CHECK_OK(ibv_get_srq_num(s, &srqn));
	struct ibv_sge rs = {(uintptr_t)buf + 2048, 2048, mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 77, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK_OK(ibv_post_srq_recv(s, &rw, &rbad));

	struct ibv_qp *ini = ini_qp(ctx, pd, scq), *tgt = tgt_qp(ctx, b);
	CHECK(ini && tgt);
	connect_xrc(ctx, ini, tgt);
	memcpy(buf, "xrc-one-domain", 15);
	struct ibv_sge ss = {(uintptr_t)buf, 15, mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 5,
				 .sg_list = &ss,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	sw.qp_type.xrc.remote_srqn = srqn;
	CHECK_OK(ibv_post_send(ini, &sw, &sbad));
	struct ibv_wc wc = poll1(scq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	wc = poll1(cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 77);
	CHECK_EQ(wc.qp_num, tgt->qp_num);
	CHECK_EQ(wc.byte_len, 15);
	CHECK(memcmp(buf + 2048, "xrc-one-domain", 15) == 0);
	/* what an INI QP does not do is refused at post, nothing sent */
	static const enum ibv_wr_opcode not_xrc[] = {IBV_WR_SEND_WITH_INV, IBV_WR_LOCAL_INV};
	for (size_t i = 0; i < sizeof(not_xrc) / sizeof(not_xrc[0]); i++) {
		struct ibv_send_wr bw = sw;
		bw.opcode = not_xrc[i];
		bw.invalidate_rkey = 0x1234;
		CHECK_EQ(ibv_post_send(ini, &bw, &sbad), EINVAL);
		CHECK(sbad == &bw);
	}
	CHECK_EQ(ibv_poll_cq(scq, 1, &wc), 0);
	struct ibv_qp *ini2 = ini_qp(ctx, pd, scq), *tgt2 = tgt_qp(ctx, other);
	CHECK(ini2 && tgt2);
	connect_xrc(ctx, ini2, tgt2);
	CHECK_OK(ibv_post_srq_recv(s, &rw, &rbad));
	CHECK_OK(ibv_post_send(ini2, &sw, &sbad));
	wc = poll1(scq);
	CHECK_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
	CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);

	/* the SRQ a TGT QP delivered into can go while the QP lives, as on a device;
	 * its number then names nothing */
	CHECK_OK(ibv_destroy_srq(s));
	CHECK_OK(ibv_post_send(ini, &sw, &sbad));
	wc = poll1(scq);
	CHECK_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);

	CHECK_OK(ibv_destroy_qp(ini));
	CHECK_OK(ibv_destroy_qp(tgt));
	CHECK_OK(ibv_destroy_qp(ini2));
	CHECK_OK(ibv_destroy_qp(tgt2));
	CHECK_OK(ibv_close_xrcd(a));
	CHECK_OK(ibv_close_xrcd(b));
	CHECK_OK(ibv_close_xrcd(other));
	CHECK_OK(ibv_dereg_mr(mr));
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_destroy_cq(scq));
	CHECK_OK(close(fa));
	CHECK_OK(close(fb));
	free(buf);
}

#define OPEN_ALL (IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE)

static struct ibv_qp *xopen_qp(struct ibv_context *ctx, uint32_t mask, struct ibv_xrcd *x,
			       uint32_t qpn, enum ibv_qp_type type)
{
	struct ibv_qp_open_attr a = {.comp_mask = mask, .qp_num = qpn, .xrcd = x, .qp_type = type};
	return ibv_open_qp(ctx, &a);
}

/* One message from ini to SRQ s (number srqn), delivered through TGT QP number tgtn. */
static void xrc_send(struct ibv_qp *ini, struct ibv_cq *scq, struct ibv_srq *s, uint32_t srqn,
		     struct ibv_cq *rcq, struct ibv_mr *mr, uint32_t tgtn, const char *msg)
{
	char *buf = mr->addr;
	size_t len = strlen(msg) + 1;
	memset(buf + 2048, 0, 64);
	struct ibv_sge rs = {(uintptr_t)buf + 2048, 64, mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 9, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK_OK(ibv_post_srq_recv(s, &rw, &rbad));
	memcpy(buf, msg, len);
	struct ibv_sge ss = {(uintptr_t)buf, (uint32_t)len, mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 3,
				 .sg_list = &ss,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	sw.qp_type.xrc.remote_srqn = srqn;
	CHECK_OK(ibv_post_send(ini, &sw, &sbad));
	struct ibv_wc wc = poll1(scq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	wc = poll1(rcq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 9);
	CHECK_EQ(wc.qp_num, tgtn);
	CHECK_EQ(wc.byte_len, len);
	CHECK(memcmp(buf + 2048, msg, len) == 0);
}

/* ibv_open_qp in this process, as the kernel's open_qp: the errnos; a handle (no PD, CQ
 * or queues) that modifies and queries the TGT QP; handles in another context of the
 * process; the QP lives on, delivering, after its creator destroyed it and closed its
 * XRCD, until its last handle goes; then its number names nothing. */
static void test_open_qp(struct ibv_context *ctx, struct ibv_pd *pd, const char *path)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0),
		      *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq && scq);
	int fa = open(path, O_RDONLY), fb = open(path, O_RDONLY);
	CHECK(fa >= 0 && fb >= 0);
	struct ibv_xrcd *a = xopen(ctx, FD_OFL, fa, O_CREAT), *b = xopen(ctx, FD_OFL, fb, O_CREAT);
	struct ibv_xrcd *other = xopen(ctx, FD_OFL, -1, O_CREAT);
	CHECK(a && b && other);
	struct ibv_mr *mr = swvt_reg_buf(pd, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_srq *s = xsrq(ctx, pd, b, cq, SRQ_ALL);
	CHECK_PTR(s);
	uint32_t srqn;
	CHECK_OK(ibv_get_srq_num(s, &srqn));
	struct ibv_qp *tgt = tgt_qp(ctx, a), *ini = ini_qp(ctx, pd, scq);
	CHECK(tgt && ini);
	uint32_t n = tgt->qp_num;

	CHECK_NULL_ERRNO(
	    xopen_qp(ctx, OPEN_ALL | IBV_QP_OPEN_ATTR_RESERVED, b, n, IBV_QPT_XRC_RECV),
	    EOPNOTSUPP);
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL & ~IBV_QP_OPEN_ATTR_XRCD, b, n, IBV_QPT_XRC_RECV),
			 EINVAL);
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL & ~IBV_QP_OPEN_ATTR_NUM, b, n, IBV_QPT_XRC_RECV),
			 EINVAL);
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL & ~IBV_QP_OPEN_ATTR_TYPE, b, n, IBV_QPT_XRC_RECV),
			 EINVAL);
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL, b, n, IBV_QPT_RC), EINVAL);
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL, b, n, IBV_QPT_XRC_SEND), EINVAL);
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL, other, n, IBV_QPT_XRC_RECV), EINVAL);
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL, b, ini->qp_num, IBV_QPT_XRC_RECV), EINVAL);
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL, b, 0xfffff0, IBV_QPT_XRC_RECV), EINVAL);
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL, NULL, n, IBV_QPT_XRC_RECV), EINVAL);

	/* another context of this process, on the same file: its own handle */
	struct ibv_context *ctx2 = swvt_open_first_device();
	CHECK_PTR(ctx2);
	int fc = open(path, O_RDONLY);
	CHECK(fc >= 0);
	struct ibv_xrcd *c2 = xopen(ctx2, FD_OFL, fc, 0);
	CHECK_PTR(c2);
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL, c2, n, IBV_QPT_XRC_RECV), EINVAL); /* not ctx's */
	struct ibv_qp *h2 = xopen_qp(ctx2, OPEN_ALL, c2, n, IBV_QPT_XRC_RECV);
	CHECK_PTR(h2);
	CHECK(h2->context == ctx2 && h2->qp_num == n);

	struct ibv_qp_open_attr oa = {.comp_mask = OPEN_ALL | IBV_QP_OPEN_ATTR_CONTEXT,
				      .qp_num = n,
				      .xrcd = b,
				      .qp_context = (void *)0x5eed,
				      .qp_type = IBV_QPT_XRC_RECV};
	struct ibv_qp *h = ibv_open_qp(ctx, &oa);
	CHECK_PTR(h);
	CHECK(h != tgt && h->qp_num == n && h->qp_type == IBV_QPT_XRC_RECV && h->context == ctx);
	CHECK(h->qp_context == (void *)0x5eed && !h->pd && !h->send_cq && !h->recv_cq && !h->srq);
	CHECK_EQ(h->state, IBV_QPS_UNKNOWN);
	CHECK_EQ(ibv_close_xrcd(b), EBUSY); /* the handle (and the SRQ) use it */
	/* a handle has no queues */
	struct ibv_send_wr sw = {.opcode = IBV_WR_SEND}, *sbad;
	CHECK_EQ(ibv_post_send(h, &sw, &sbad), EINVAL);
	struct ibv_recv_wr rw = {.num_sge = 0}, *rbad;
	CHECK_EQ(ibv_post_recv(h, &rw, &rbad), EINVAL);

	/* the handle brings the TGT QP up: the QP's state is what its handles see */
	connect_xrc(ctx, ini, h);
	CHECK_EQ(h->state, IBV_QPS_RTS);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK_OK(ibv_query_qp(tgt, &qa, IBV_QP_STATE, &qi));
	CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
	CHECK_OK(ibv_query_qp(h2, &qa, IBV_QP_STATE, &qi));
	CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
	CHECK_EQ(qi.qp_type, IBV_QPT_XRC_RECV);
	xrc_send(ini, scq, s, srqn, cq, mr, n, "through the creator's QP");

	/* the creator goes, handle and XRCD: the QP stays with the opened handles */
	CHECK_OK(ibv_destroy_qp(tgt));
	CHECK_OK(ibv_close_xrcd(a));
	xrc_send(ini, scq, s, srqn, cq, mr, n, "after the creator destroyed it");
	CHECK_OK(ibv_query_qp(h, &qa, IBV_QP_STATE, &qi));
	CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
	CHECK_OK(ibv_destroy_qp(h)); /* h2 remains */
	CHECK_EQ(ibv_close_xrcd(c2), EBUSY);
	xrc_send(ini, scq, s, srqn, cq, mr, n, "one handle left");
	struct ibv_qp *h3 = xopen_qp(ctx, OPEN_ALL, b, n, IBV_QPT_XRC_RECV);
	CHECK_PTR(h3); /* still in the domain */
	CHECK_OK(ibv_destroy_qp(h2));
	xrc_send(ini, scq, s, srqn, cq, mr, n, "the last handle");
	CHECK_OK(ibv_destroy_qp(h3)); /* the last: the QP goes */
	CHECK_NULL_ERRNO(xopen_qp(ctx, OPEN_ALL, b, n, IBV_QPT_XRC_RECV), EINVAL);

	CHECK_OK(ibv_destroy_qp(ini));
	CHECK_OK(ibv_destroy_srq(s));
	CHECK_OK(ibv_close_xrcd(b));
	CHECK_OK(ibv_close_xrcd(c2));
	CHECK_OK(ibv_close_xrcd(other));
	CHECK_OK(ibv_close_device(ctx2));
	swvt_dereg_buf(mr);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_destroy_cq(scq));
	CHECK_OK(close(fa));
	CHECK_OK(close(fb));
	CHECK_OK(close(fc));
}

static int attach_cntr(struct ibv_qp *qp, struct ibv_comp_cntr *c, uint32_t mask)
{
	struct ibv_qp_attach_comp_cntr_attr a = {.op_mask = mask};
	return ibv_qp_attach_comp_cntr(qp, c, &a);
}

static uint64_t cntr_value(struct ibv_comp_cntr *c)
{
	uint64_t v;
	CHECK_OK(ibv_read_comp_cntr(c, &v));
	return v;
}

/* A counter attached through an ibv_open_qp handle is the TGT QP's: it counts the
 * QP's receives, the QP's other handles and its creator see the kind as taken
 * (EBUSY), its state decides (EINVAL once RTS), and once the QP is gone the counter
 * is free to destroy. A counter of another context than the QP's is refused. */
static void test_open_qp_cntr(struct ibv_context *ctx, struct ibv_pd *pd, const char *path)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0),
		      *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq && scq);
	int fa = open(path, O_RDONLY);
	CHECK(fa >= 0);
	struct ibv_xrcd *x = xopen(ctx, FD_OFL, fa, O_CREAT);
	CHECK_PTR(x);
	struct ibv_mr *mr = swvt_reg_buf(pd, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_srq *s = xsrq(ctx, pd, x, cq, SRQ_ALL);
	CHECK_PTR(s);
	uint32_t srqn;
	CHECK_OK(ibv_get_srq_num(s, &srqn));
	struct ibv_qp *tgt = tgt_qp(ctx, x), *ini = ini_qp(ctx, pd, scq);
	CHECK(tgt && ini);
	uint32_t n = tgt->qp_num;
	struct ibv_qp *h = xopen_qp(ctx, OPEN_ALL, x, n, IBV_QPT_XRC_RECV);
	CHECK_PTR(h);

	struct ibv_context *ctx2 = swvt_open_first_device();
	CHECK_PTR(ctx2);
	int fb = open(path, O_RDONLY);
	CHECK(fb >= 0);
	struct ibv_xrcd *x2 = xopen(ctx2, FD_OFL, fb, 0);
	CHECK_PTR(x2);
	struct ibv_qp *h2 = xopen_qp(ctx2, OPEN_ALL, x2, n, IBV_QPT_XRC_RECV);
	CHECK_PTR(h2);
	struct ibv_comp_cntr_init_attr ia = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(ctx, &ia),
			     *c2 = ibv_create_comp_cntr(ctx2, &ia);
	CHECK(c && c2);

	/* ctx2's counter on a QP of ctx, through ctx2's handle */
	CHECK_EQ(attach_cntr(h2, c2, IBV_QP_ATTACH_COMP_CNTR_OP_RECV), EINVAL);
	/* a handle has no send queue, nor has the QP */
	CHECK_EQ(attach_cntr(h, c, IBV_QP_ATTACH_COMP_CNTR_OP_SEND), EOPNOTSUPP);
	CHECK_OK(attach_cntr(h, c, IBV_QP_ATTACH_COMP_CNTR_OP_RECV));
	/* the kind is the QP's now, whichever handle asks */
	CHECK_EQ(attach_cntr(tgt, c, IBV_QP_ATTACH_COMP_CNTR_OP_RECV), EBUSY);
	CHECK_EQ(attach_cntr(h, c, IBV_QP_ATTACH_COMP_CNTR_OP_RECV), EBUSY);

	connect_xrc(ctx, ini, h);
	CHECK_EQ(attach_cntr(h, c, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE), EINVAL);
	CHECK_EQ(cntr_value(c), 0);
	xrc_send(ini, scq, s, srqn, cq, mr, n, "counted through the handle");
	CHECK_EQ(cntr_value(c), 1);
	CHECK_OK(ibv_destroy_qp(tgt));
	xrc_send(ini, scq, s, srqn, cq, mr, n, "the creator gone");
	CHECK_EQ(cntr_value(c), 2);
	CHECK_EQ(ibv_destroy_comp_cntr(c), EBUSY); /* the QP lives on for h and h2 */
	CHECK_OK(ibv_destroy_qp(h));
	CHECK_OK(ibv_destroy_qp(h2)); /* the last handle: the QP goes */
	CHECK_OK(ibv_destroy_comp_cntr(c));
	CHECK_OK(ibv_destroy_comp_cntr(c2));

	CHECK_OK(ibv_destroy_qp(ini));
	CHECK_OK(ibv_destroy_srq(s));
	CHECK_OK(ibv_close_xrcd(x));
	CHECK_OK(ibv_close_xrcd(x2));
	CHECK_OK(ibv_close_device(ctx2));
	swvt_dereg_buf(mr);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_destroy_cq(scq));
	CHECK_OK(close(fa));
	CHECK_OK(close(fb));
}

/* Openers in several processes at once: exactly one O_CREAT|O_EXCL makes the domain,
 * every other one finds it (EEXIST), as one kernel object would decide. */
#define NRACE 6
static void test_excl_race(const char *path)
{
	int ready[2], go[2], res[2], done[2];
	CHECK(pipe(ready) == 0 && pipe(go) == 0 && pipe(res) == 0 && pipe(done) == 0);
	pid_t pid[NRACE];
	for (int i = 0; i < NRACE; i++) {
		pid[i] = fork();
		CHECK(pid[i] >= 0);
		if (pid[i] == 0) {
			struct ibv_context *c = swvt_open_first_device();
			int fd = open(path, O_RDONLY);
			char b = 0;
			if (!c || fd < 0 || write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 1)
				_exit(2);
			errno = 0;
			struct ibv_xrcd *x = xopen(c, FD_OFL, fd, O_CREAT | O_EXCL);
			int e = x ? 0 : errno;
			if (write(res[1], &e, sizeof(e)) != sizeof(e) || read(done[0], &b, 1) != 1)
				_exit(2);
			if (x && ibv_close_xrcd(x))
				_exit(3);
			ibv_close_device(c);
			_exit(0);
		}
	}
	char b = 0;
	for (int i = 0; i < NRACE; i++)
		CHECK(read(ready[0], &b, 1) == 1);
	for (int i = 0; i < NRACE; i++)
		CHECK(write(go[1], &b, 1) == 1);
	int made = 0, found = 0;
	for (int i = 0; i < NRACE; i++) {
		int e;
		CHECK(read(res[0], &e, sizeof(e)) == sizeof(e));
		made += e == 0;
		found += e == EEXIST;
	}
	CHECK_EQ(made, 1);
	CHECK_EQ(found, NRACE - 1);
	for (int i = 0; i < NRACE; i++)
		CHECK(write(done[1], &b, 1) == 1);
	for (int i = 0; i < NRACE; i++) {
		int st;
		CHECK(waitpid(pid[i], &st, 0) == pid[i]);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	int fds[] = {ready[0], ready[1], go[0], go[1], res[0], res[1], done[0], done[1]};
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		close(fds[i]);
}

static void test_masks(void)
{
	int req, opt;
	CHECK(swv_qp_transition_masks(IBV_QPT_XRC_SEND, IBV_QPS_INIT, IBV_QPS_RTR, &req, &opt));
	CHECK_EQ(req, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
	CHECK_EQ(opt & (IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);
	CHECK(swv_qp_transition_masks(IBV_QPT_XRC_RECV, IBV_QPS_RTR, IBV_QPS_RTS, &req, &opt));
	CHECK_EQ(req, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN);
	CHECK_EQ(opt & (IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC), 0);
	CHECK(swv_qp_transition_masks(IBV_QPT_XRC_RECV, IBV_QPS_INIT, IBV_QPS_RTR, &req, NULL));
	CHECK_EQ(req, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int main(void)
{
	char path[] = "/tmp/swv-xrc-unit.XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	test_excl_race(path); /* forks: before this process opens a device */
	struct ibv_context *ctx = swvt_open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(pd && cq);

	test_masks();
	test_open_close(ctx, path);
	test_objects(ctx, pd, cq);
	test_ini_ops(ctx, pd, cq);
	test_one_domain(ctx, pd, path);
	test_open_qp(ctx, pd, path);
	test_open_qp_cntr(ctx, pd, path);

	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	unlink(path);
	printf("test_xrc_objects: OK\n");
	return 0;
}
