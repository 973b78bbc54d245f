/*
 * XRC between two processes that share an XRC domain through a file (each opens the
 * same file and passes its descriptor to ibv_open_xrcd, as the kernel shares an XRCD
 * by inode).
 *
 * - The registry spans processes: the first opener uses O_CREAT|O_EXCL; the other
 *   process then gets EEXIST for O_CREAT|O_EXCL and opens the existing domain with no
 *   flag; once both have closed it, an open without O_CREAT is ENOENT.
 * - The receiver has two XRC SRQs (A, B) on the shared domain, each with its own CQ,
 *   and a third (C) on a domain of its own; three XRC TGT QPs on the shared domain.
 *   The sender has three XRC INI QPs, one per TGT QP.
 * - Traffic on INI 1 -> TGT 1: SENDs of 0 bytes to several MTUs alternating between
 *   SRQ A and SRQ B by SRQ number (wr.qp_type.xrc.remote_srqn), then an RDMA WRITE
 *   (rkey checked against SRQ A's PD) and a SEND that follows it (ibv_wr_send with
 *   ibv_wr_set_xrc_srqn). Every receive
 *   completes on the CQ of the SRQ it was addressed to, with wc.qp_num = TGT 1, in
 *   order, with every byte right; the written bytes are there.
 * - Errors: INI 2 names an SRQ number nobody has -> IBV_WC_REM_INV_REQ_ERR (NAK
 *   Invalid Request) and TGT 2 goes to ERR; INI 3 names SRQ C, of another XRC domain
 *   -> IBV_WC_REM_ACCESS_ERR (NAK Remote Access Error), TGT 3 goes to ERR, and
 *   nothing reaches C.
 * - Counters count exactly: SEND and RDMA_WRITE on INI 1, the error count of a SEND
 *   counter on INI 2 and 3; RECV and REMOTE_RDMA_WRITE on TGT 1.
 * - ibv_close_xrcd is EBUSY while an SRQ or TGT QP uses the domain.
 * Run again with the fault injector dropping, duplicating and reordering packets.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define NMSG	 12 /* SENDs before the WRITE, alternating A and B */
#define SLOT	 8192
#define WOFF	 (64 * SLOT) /* receiver: where the RDMA WRITE lands */
#define WLEN	 6000
#define BAD_SRQN 0xfffff0u

static char xrc_file[64];

static uint32_t msg_len(int k)
{
	static const uint32_t sizes[] = {0, 8, 1000, 1024, 1025, 3000, 4096 + 7, 8192};
	return sizes[k % (sizeof(sizes) / sizeof(sizes[0]))];
}

/* what the receiver tells the sender, and back */
struct xinfo {
	uint32_t qpn[3], psn[3];
	uint32_t srqn[3]; /* A, B, C */
};

static struct ibv_xrcd *open_xrcd(struct swvt *t, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {.comp_mask =
					   IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
				       .fd = fd,
				       .oflags = oflags};
	return ibv_open_xrcd(t->ctx, &a);
}

static struct ibv_comp_cntr *cntr(struct swvt *t)
{
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(t->ctx, &ca);
	CHECK_PTR(c);
	return c;
}

static void attach(struct ibv_qp *qp, struct ibv_comp_cntr *c, uint32_t ops)
{
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = ops};
	CHECK_OK(ibv_qp_attach_comp_cntr(qp, c, &at));
}

static void check_cntr(struct ibv_comp_cntr *c, uint64_t ok, uint64_t err)
{
	uint64_t v, e;
	CHECK_OK(ibv_read_comp_cntr(c, &v));
	CHECK_OK(ibv_read_err_comp_cntr(c, &e));
	CHECK_EQ(v, ok);
	CHECK_EQ(e, err);
}

static void to_init(struct swvt *t, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
				.port_num = t->opts.port,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	CHECK_OK(ibv_modify_qp(
	    qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

/* The RC masks (perftest's): the bits for the other half an XRC QP ignores, the bits
 * for its own half it requires. */
static void connect_qp(struct swvt *t, struct ibv_qp *qp, bool tgt, uint32_t dqpn, uint32_t rpsn,
		       uint32_t spsn)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
				.path_mtu = t->opts.path_mtu,
				.dest_qp_num = dqpn,
				.rq_psn = rpsn,
				.max_dest_rd_atomic = 1,
				.min_rnr_timer = 1};
	swvt_fill_ah_attr(t, &a.ah_attr);
	int m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (tgt)
		CHECK_EQ(ibv_modify_qp(qp, &a, m), EINVAL); /* a TGT QP needs the responder's */
	/* the responder attributes: required for a TGT QP, ignored by an INI QP (as the
	 * kernel strips them; perftest passes them) */
	CHECK_OK(ibv_modify_qp(qp, &a, m | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = spsn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	m = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
	if (!tgt)
		CHECK_EQ(ibv_modify_qp(qp, &a, m), EINVAL); /* an INI QP needs the requester's */
	/* the requester attributes: required for an INI QP, ignored by a TGT QP */
	CHECK_OK(ibv_modify_qp(qp, &a,
			       m | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
}

static void send_to(struct swvt *t, struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t srqn,
		    uint64_t wr_id, uint64_t off, uint32_t len, uint64_t raddr)
{
	struct ibv_sge sge = {(uintptr_t)t->buf + off, len, t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;
	wr.qp_type.xrc.remote_srqn = srqn;
	if (op == IBV_WR_RDMA_WRITE) {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = t->remote.rkey;
	}
	CHECK_OK(ibv_post_send(qp, &wr, &bad));
}

static bool faults; /* the run under SWVERBS_FAULT */

/* A refused request ends in the NAK's status; under packet faults a lost NAK ends in
 * RETRY_EXC_ERR instead (the TGT QP is in ERR by then and answers nothing more). */
static void check_refused(const struct ibv_wc *wc, enum ibv_wc_status want)
{
	if (faults && wc->status == IBV_WC_RETRY_EXC_ERR)
		return;
	CHECK_WC(*wc, want);
}

static void sender(struct swvt *t, void *arg)
{
	(void)arg;
	int fd = open(xrc_file, O_RDONLY);
	CHECK(fd >= 0);
	/* first in: the domain does not exist yet */
	struct ibv_xrcd *x = open_xrcd(t, fd, O_CREAT | O_EXCL);
	CHECK_PTR(x);
	swvt_barrier(t); /* the receiver opens it now */
	swvt_barrier(t);
	/* both hold a descriptor: the inode (and the domain) lives on without the name, and
	 * a run that fails leaves no file behind */
	unlink(xrc_file);

	struct ibv_cq *cq = ibv_create_cq(t->ctx, 256, NULL, NULL, 0);
	CHECK_PTR(cq);
	struct ibv_qp *ini[3];
	for (int i = 0; i < 3; i++) {
		/* INI 1 also takes the ibv_wr_* API (ibv_wr_set_xrc_srqn) */
		struct ibv_qp_init_attr_ex ia = {.send_cq = cq,
						 .qp_type = IBV_QPT_XRC_SEND,
						 .cap = {.max_send_wr = 64, .max_send_sge = 1},
						 .comp_mask =
						     IBV_QP_INIT_ATTR_PD |
						     (i == 0 ? IBV_QP_INIT_ATTR_SEND_OPS_FLAGS : 0),
						 .pd = t->pd,
						 .send_ops_flags = IBV_QP_EX_WITH_SEND};
		ini[i] = ibv_create_qp_ex(t->ctx, &ia);
		CHECK_PTR(ini[i]);
		CHECK_EQ(ini[i]->qp_type, IBV_QPT_XRC_SEND);
		to_init(t, ini[i]);
	}
	struct ibv_comp_cntr *c_send = cntr(t), *c_write = cntr(t), *c_err = cntr(t);
	attach(ini[0], c_send, IBV_QP_ATTACH_COMP_CNTR_OP_SEND);
	attach(ini[0], c_write, IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE);
	attach(ini[1], c_err, IBV_QP_ATTACH_COMP_CNTR_OP_SEND);
	attach(ini[2], c_err, IBV_QP_ATTACH_COMP_CNTR_OP_SEND);
	/* an INI QP has no receive side to count */
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_RECV};
	CHECK_EQ(ibv_qp_attach_comp_cntr(ini[0], c_err, &at), EOPNOTSUPP);

	struct xinfo mine = {0}, theirs;
	for (int i = 0; i < 3; i++) {
		mine.qpn[i] = ini[i]->qp_num;
		mine.psn[i] = (uint32_t)lrand48() & 0xffffff;
	}
	swvt_send(t, &mine, sizeof(mine));
	swvt_recv(t, &theirs, sizeof(theirs));
	for (int i = 0; i < 3; i++)
		connect_qp(t, ini[i], false, theirs.qpn[i], theirs.psn[i], mine.psn[i]);
	swvt_barrier(t); /* the receiver's WQEs are posted */

	/* a receive queue it does not have, a send without the SRQ number's 24 bits */
	struct ibv_recv_wr rwr = {.wr_id = 1}, *rbad = NULL;
	CHECK_EQ(ibv_post_recv(ini[0], &rwr, &rbad), EINVAL);
	struct ibv_sge sge = {(uintptr_t)t->buf, 8, t->mr->lkey};
	struct ibv_send_wr bwr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
	bwr.qp_type.xrc.remote_srqn = 1u << 24;
	CHECK_EQ(ibv_post_send(ini[0], &bwr, &bad), EINVAL);

	for (int k = 0; k < NMSG; k++) {
		swvt_fill(t->buf + (uint64_t)k * SLOT, msg_len(k), 0x7700u + (uint32_t)k);
		send_to(t, ini[0], IBV_WR_SEND, theirs.srqn[k % 2], (uint64_t)k, (uint64_t)k * SLOT,
			msg_len(k), 0);
	}
	swvt_fill(t->buf + WOFF, WLEN, 0x7799u);
	send_to(t, ini[0], IBV_WR_RDMA_WRITE, theirs.srqn[0], 100, WOFF, WLEN,
		t->remote.addr + WOFF);
	/* the SEND after the WRITE, through the ibv_wr_* API */
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(ini[0]);
	CHECK_PTR(qx);
	ibv_wr_start(qx);
	qx->wr_id = 101;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_xrc_srqn(qx, theirs.srqn[0]);
	ibv_wr_set_sge(qx, t->mr->lkey, (uintptr_t)t->buf, 0);
	CHECK_OK(ibv_wr_complete(qx));
	struct ibv_wc wc[NMSG + 2];
	swvt_poll_n(cq, wc, NMSG + 2, 30000);
	for (int k = 0; k < NMSG + 2; k++) {
		CHECK_WC(wc[k], IBV_WC_SUCCESS);
		CHECK_EQ(wc[k].qp_num, ini[0]->qp_num);
	}
	check_cntr(c_send, NMSG + 1, 0);
	check_cntr(c_write, 1, 0);

	/* an SRQ number nobody has */
	send_to(t, ini[1], IBV_WR_SEND, BAD_SRQN, 200, 0, 8, 0);
	swvt_poll_n(cq, wc, 1, 30000);
	check_refused(&wc[0], IBV_WC_REM_INV_REQ_ERR);
	CHECK_EQ(wc[0].qp_num, ini[1]->qp_num);
	/* an SRQ of another XRC domain */
	send_to(t, ini[2], IBV_WR_SEND, theirs.srqn[2], 300, 0, 8, 0);
	swvt_poll_n(cq, wc, 1, 30000);
	check_refused(&wc[0], IBV_WC_REM_ACCESS_ERR);
	CHECK_EQ(wc[0].qp_num, ini[2]->qp_num);
	check_cntr(c_err, 0, 2);
	swvt_barrier(t); /* the receiver checks its side */
	swvt_barrier(t);

	for (int i = 0; i < 3; i++)
		CHECK_OK(ibv_destroy_qp(ini[i]));
	CHECK_OK(ibv_destroy_comp_cntr(c_send));
	CHECK_OK(ibv_destroy_comp_cntr(c_write));
	CHECK_OK(ibv_destroy_comp_cntr(c_err));
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_close_xrcd(x));
	swvt_barrier(t); /* both closed: the domain is gone */
	errno = 0;
	CHECK(open_xrcd(t, fd, 0) == NULL && errno == ENOENT);
	CHECK_OK(close(fd));
}

static struct ibv_srq *xrc_srq(struct swvt *t, struct ibv_xrcd *x, struct ibv_cq *cq, uint32_t *num)
{
	struct ibv_srq_init_attr_ex a = {.attr = {.max_wr = 64, .max_sge = 1},
					 .comp_mask = IBV_SRQ_INIT_ATTR_TYPE |
						      IBV_SRQ_INIT_ATTR_XRCD |
						      IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
					 .srq_type = IBV_SRQT_XRC,
					 .pd = t->pd,
					 .xrcd = x,
					 .cq = cq};
	struct ibv_srq *s = ibv_create_srq_ex(t->ctx, &a);
	CHECK_PTR(s);
	CHECK_OK(ibv_get_srq_num(s, num));
	return s;
}

static void post_srq(struct swvt *t, struct ibv_srq *s, uint64_t wr_id, uint64_t off)
{
	struct ibv_sge sge = {(uintptr_t)t->buf + off, SLOT, t->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
	CHECK_OK(ibv_post_srq_recv(s, &wr, &bad));
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK_OK(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia));
	CHECK_EQ(ia.qp_type, IBV_QPT_XRC_RECV);
	return a.qp_state;
}

static void receiver(struct swvt *t, void *arg)
{
	(void)arg;
	int fd = open(xrc_file, O_RDONLY);
	CHECK(fd >= 0);
	swvt_barrier(t); /* the sender has opened the domain */
	errno = 0;
	CHECK(open_xrcd(t, fd, O_CREAT | O_EXCL) == NULL && errno == EEXIST);
	struct ibv_xrcd *x = open_xrcd(t, fd, 0); /* it exists: no O_CREAT needed */
	CHECK_PTR(x);
	swvt_barrier(t);
	struct ibv_xrcd *other = open_xrcd(t, -1, O_CREAT); /* a domain of its own */
	CHECK_PTR(other);

	struct ibv_cq *cqa = ibv_create_cq(t->ctx, 256, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(t->ctx, 256, NULL, NULL, 0);
	struct ibv_cq *cqc = ibv_create_cq(t->ctx, 256, NULL, NULL, 0);
	CHECK(cqa && cqb && cqc);
	struct xinfo mine = {0}, theirs;
	struct ibv_srq *sa = xrc_srq(t, x, cqa, &mine.srqn[0]);
	struct ibv_srq *sb = xrc_srq(t, x, cqb, &mine.srqn[1]);
	struct ibv_srq *sc = xrc_srq(t, other, cqc, &mine.srqn[2]);
	CHECK(mine.srqn[0] != mine.srqn[1] && mine.srqn[1] != mine.srqn[2]);
	CHECK_EQ(ibv_close_xrcd(other), EBUSY); /* SRQ C uses it */

	struct ibv_qp *tgt[3];
	for (int i = 0; i < 3; i++) {
		struct ibv_qp_init_attr_ex ia = {
		    .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x};
		tgt[i] = ibv_create_qp_ex(t->ctx, &ia);
		CHECK_PTR(tgt[i]);
		CHECK(tgt[i]->pd == NULL && tgt[i]->send_cq == NULL && tgt[i]->recv_cq == NULL);
		to_init(t, tgt[i]);
	}
	struct ibv_comp_cntr *c_recv = cntr(t), *c_rwrite = cntr(t);
	attach(tgt[0], c_recv, IBV_QP_ATTACH_COMP_CNTR_OP_RECV);
	attach(tgt[0], c_rwrite, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE);
	/* a TGT QP has no send queue to count */
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_SEND};
	CHECK_EQ(ibv_qp_attach_comp_cntr(tgt[1], c_recv, &at), EOPNOTSUPP);

	for (int i = 0; i < 3; i++) {
		mine.qpn[i] = tgt[i]->qp_num;
		mine.psn[i] = (uint32_t)lrand48() & 0xffffff;
	}
	swvt_recv(t, &theirs, sizeof(theirs));
	swvt_send(t, &mine, sizeof(mine));
	for (int i = 0; i < 3; i++)
		connect_qp(t, tgt[i], true, theirs.qpn[i], theirs.psn[i], mine.psn[i]);
	/* SRQ A takes the even messages and the final SEND, B the odd ones: slot k */
	for (int k = 0; k < NMSG; k += 2)
		post_srq(t, sa, (uint64_t)k, (uint64_t)k * SLOT);
	post_srq(t, sa, NMSG, (uint64_t)NMSG * SLOT);
	for (int k = 1; k < NMSG; k += 2)
		post_srq(t, sb, (uint64_t)k, (uint64_t)k * SLOT);
	post_srq(t, sc, 999, (uint64_t)(NMSG + 1) * SLOT);
	memset(t->buf + WOFF, 0, WLEN);
	/* a TGT QP neither sends nor has a receive queue of its own */
	struct ibv_recv_wr rwr = {.wr_id = 1}, *rbad = NULL;
	CHECK_EQ(ibv_post_recv(tgt[0], &rwr, &rbad), EINVAL);
	struct ibv_send_wr swr = {.opcode = IBV_WR_SEND}, *sbad = NULL;
	CHECK_EQ(ibv_post_send(tgt[0], &swr, &sbad), EINVAL);
	swvt_barrier(t);

	/* each SRQ's receives on its own CQ, in order, on TGT 1 */
	struct ibv_wc wc;
	for (int k = 0; k <= NMSG; k++) {
		bool on_a = k % 2 == 0 || k == NMSG;
		swvt_poll_n(on_a ? cqa : cqb, &wc, 1, 30000);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_RECV);
		CHECK_EQ(wc.qp_num, tgt[0]->qp_num);
		CHECK_EQ(wc.wr_id, (uint64_t)k);
		if (k == NMSG) {
			CHECK_EQ(wc.byte_len, 0);
			break;
		}
		CHECK_EQ(wc.byte_len, msg_len(k));
		size_t bad =
		    swvt_verify(t->buf + (uint64_t)k * SLOT, msg_len(k), 0x7700u + (uint32_t)k);
		if (bad != (size_t)-1) {
			fprintf(stderr, "message %d: byte %zu differs\n", k, bad);
			exit(1);
		}
	}
	/* the WRITE executed before the SEND that followed it */
	CHECK_EQ(swvt_verify(t->buf + WOFF, WLEN, 0x7799u), (size_t)-1);
	swvt_barrier(t); /* the sender has seen both errors */
	check_cntr(c_recv, NMSG + 1, 0);
	check_cntr(c_rwrite, 1, 0);
	CHECK_EQ(qp_state(tgt[0]), IBV_QPS_RTS);
	CHECK_EQ(qp_state(tgt[1]), IBV_QPS_ERR);
	CHECK_EQ(qp_state(tgt[2]), IBV_QPS_ERR);
	swvt_expect_empty(cqa, 0);
	swvt_expect_empty(cqb, 0);
	swvt_expect_empty(cqc, 0); /* nothing of another domain's TGT QP reached C */
	swvt_barrier(t);

	CHECK_EQ(ibv_close_xrcd(x), EBUSY);
	for (int i = 0; i < 3; i++)
		CHECK_OK(ibv_destroy_qp(tgt[i]));
	CHECK_OK(ibv_destroy_srq(sa));
	CHECK_OK(ibv_destroy_srq(sb));
	CHECK_OK(ibv_destroy_srq(sc)); /* its WQE goes with it, uncompleted */
	CHECK_OK(ibv_destroy_comp_cntr(c_recv));
	CHECK_OK(ibv_destroy_comp_cntr(c_rwrite));
	CHECK_OK(ibv_close_xrcd(other));
	CHECK_OK(ibv_close_xrcd(x));
	CHECK_OK(ibv_destroy_cq(cqa));
	CHECK_OK(ibv_destroy_cq(cqb));
	CHECK_OK(ibv_destroy_cq(cqc));
	swvt_barrier(t);
	CHECK_OK(close(fd));
}

/* A fresh file for each run (the sender unlinks it once both sides hold it open). */
static void make_file(void)
{
	snprintf(xrc_file, sizeof(xrc_file), "/tmp/swv-xrc-test.XXXXXX");
	int fd = mkstemp(xrc_file);
	CHECK(fd >= 0);
	close(fd);
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.buf_size = 80 * SLOT;
	make_file();
	int rc = swvt_run(&o, sender, receiver, NULL);
	unlink(xrc_file); /* if a side failed before the sender's unlink */
	/* the same under loss, duplication and reordering: XRC requests go through RC's
	 * retransmission and reorder buffer with their XRCETH */
	if (!rc && !getenv("SWVERBS_FAULT")) {
		setenv("SWVERBS_FAULT", "seed=7,drop=3,dup=3,reorder=3", 1);
		faults = true;
		printf("with packet faults\n");
		make_file();
		rc = swvt_run(&o, sender, receiver, NULL);
		unlink(xrc_file);
		unsetenv("SWVERBS_FAULT");
	}
	if (!rc)
		printf("test_xrc: OK\n");
	return rc;
}
