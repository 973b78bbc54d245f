/*
 * Hardware-style tag matching over the real transport, two processes. The receiver
 * has one RC QP on a tag-matching SRQ whose CQ (extended, with TM_INFO) is also the
 * QP's send and receive CQ; the sender a plain RC QP. The receiver drives: it tells
 * the sender what to send (TMH opcode, tag, payload length) and checks, byte by
 * byte, where it landed and how it completed:
 *   matching in posting order with masks (eager, the TMH not placed, tm_info);
 *   unexpected messages (whole message in an ordinary SRQ WQE, no TM flags), a buffer
 *   added out of sync is held (ADD with TM_SYNC_REQ) until IBV_WR_TAG_SYNC reports
 *   the unexpected count;
 *   IBV_WR_TAG_DEL (then the tag is unexpected), DEL of a consumed buffer
 *   (IBV_WC_TM_ERR), NO_TAG (IBV_WC_TM_NO_TAG, not unexpected);
 *   rendezvous: TM_MATCH at once, the device's READ of the sender's 20000 bytes (many
 *   packets), TM_DATA_VALID, the FIN at the sender (TMH and RVH, opcode FIN); a
 *   buffer too small gets IBV_WC_TM_RNDV_INCOMPLETE with the headers in it;
 *   errors: post_srq_ops on a basic SRQ, more tags than max_num_tags, a handle that
 *   names nothing, an unknown opcode, too many SGEs, a TM SRQ beyond tm_caps, a UD
 *   QP on a TM SRQ;
 *   counters: every receive once on RECV (when its data is in place); the device's
 *   READ and FIN on no send-side slot of the receiver; the READ counts as a remote
 *   READ at the sender.
 * The SRQ is on a PD of its own, not the QP's: tagged buffers are the SRQ's for the
 * eager data and the device's READ alike.
 * Run once clean and once under packet faults.
 */
#include <endian.h>
#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cntr.h"
#include "harness.h"
#include "test_srq_util.h"

#define NTAGS	 8
#define SRQ_SGE	 2 /* the SRQ's max_sge: also a tagged buffer's */
#define RNDV_LEN 20000
#define SLOT	 32768
#define SEND_OFF 0	    /* sender: the message it sends */
#define RNDV_OFF (2 * SLOT) /* sender: the rendezvous data */
#define FIN_OFF	 (4 * SLOT) /* sender: where the FIN lands */
#define APP_CTX	 0xa5a5c3c3u

enum { CMD_SEND, CMD_END };

struct cmd {
	uint32_t op;
	uint8_t tmh_op;
	uint64_t tag;
	uint32_t len; /* payload after the TMH (EAGER/NO_TAG); RVH length (RNDV) */
};

static uint32_t seed_of(uint64_t tag, uint32_t len)
{
	return (uint32_t)(tag * 7919u) ^ len;
}

/* ---------------------------------------------------------------- sender */

static void sender(struct swvt *t, void *arg)
{
	bool lossy = getenv("SWVERBS_FAULT") != NULL; /* main's second pass */
	(void)arg;
	struct srqt s;
	memset(&s, 0, sizeof(s));
	s.t = t;
	s.nqp = 1;
	/* one CQ for both queues, as pyverbs' test_tm_rndv has: it shows the order of the
	 * SEND's completion and the FIN's */
	s.scq = s.rcq = ibv_create_cq(t->ctx, 64, NULL, NULL, 0);
	CHECK(s.scq);
	struct ibv_qp_init_attr ia = {
	    .send_cq = s.scq,
	    .recv_cq = s.rcq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
	s.qp[0] = ibv_create_qp(t->pd, &ia);
	CHECK_PTR(s.qp[0]);
	struct ibv_comp_cntr *rread = swvt_cntr_create(t->ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask =
						      IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ};
	CHECK_OK(ibv_qp_attach_comp_cntr(s.qp[0], rread, &at));
	s.lpsn[0] = (uint32_t)lrand48() & 0xffffff;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
				.port_num = t->opts.port,
				.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ};
	CHECK_OK(ibv_modify_qp(
	    s.qp[0], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	srqt_connect(&s, NULL);
	uint64_t nrndv = 0;

	for (;;) {
		struct cmd c;
		swvt_recv(t, &c, sizeof(c));
		if (c.op == CMD_END)
			break;
		uint8_t *m = t->buf + SEND_OFF;
		struct ibv_tmh tmh = {
		    .opcode = c.tmh_op, .app_ctx = htobe32(APP_CTX), .tag = htobe64(c.tag)};
		uint32_t len = (uint32_t)sizeof(tmh) + c.len;
		memcpy(m, &tmh, sizeof(tmh));
		if (c.tmh_op == IBV_TMH_RNDV) {
			struct ibv_rvh rvh = {.va = htobe64((uintptr_t)t->buf + RNDV_OFF),
					      .rkey = htobe32(t->mr->rkey),
					      .len = htobe32(c.len)};
			memcpy(m + sizeof(tmh), &rvh, sizeof(rvh));
			memcpy(m + sizeof(tmh) + sizeof(rvh), "metadata", 8);
			len = (uint32_t)(sizeof(tmh) + sizeof(rvh) + 8);
			swvt_fill(t->buf + RNDV_OFF, c.len, seed_of(c.tag, c.len));
			memset(t->buf + FIN_OFF, 0, 64);
			struct ibv_sge rs = {(uintptr_t)t->buf + FIN_OFF, 64, t->mr->lkey};
			struct ibv_recv_wr rw = {.wr_id = 0xf1, .sg_list = &rs, .num_sge = 1},
					   *rbad = NULL;
			CHECK_OK(ibv_post_recv(s.qp[0], &rw, &rbad));
		} else {
			swvt_fill(m + sizeof(tmh), c.len, seed_of(c.tag, c.len));
		}
		struct ibv_sge sge = {(uintptr_t)m, len, t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = c.tag,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED},
				   *bad = NULL;
		CHECK_OK(ibv_post_send(s.qp[0], &wr, &bad));
		bool fin_due = c.tmh_op == IBV_TMH_RNDV && c.len <= SLOT;
		struct ibv_wc got[2];
		swvt_poll_n(s.scq, got, fin_due ? 2 : 1, 20000);
		/* Matched with room, the device read the data and said FIN -- after the
		 * SEND's completion: the receiver ACKs the SEND before it reads (a READ it
		 * reads directly completes at once, and the FIN follows). Only a lossless
		 * link keeps that order: a lost ACK is resent after the FIN came. */
		int fin_at = fin_due && got[0].opcode == IBV_WC_RECV ? 0 : 1;
		CHECK(!fin_due || lossy || fin_at == 1);
		int send_at = fin_due ? 1 - fin_at : 0;
		CHECK_WC(got[send_at], IBV_WC_SUCCESS);
		CHECK_EQ(got[send_at].opcode, IBV_WC_SEND);
		if (fin_due) {
			struct ibv_wc wc = got[fin_at];
			CHECK_WC(wc, IBV_WC_SUCCESS);
			CHECK_EQ(wc.opcode, IBV_WC_RECV);
			CHECK_EQ(wc.wr_id, 0xf1);
			CHECK_EQ(wc.byte_len, sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh));
			struct ibv_tmh fin;
			memcpy(&fin, t->buf + FIN_OFF, sizeof(fin));
			CHECK_EQ(fin.opcode, IBV_TMH_FIN);
			CHECK_EQ(be64toh(fin.tag), c.tag);
			CHECK_EQ(be32toh(fin.app_ctx), APP_CTX);
			CHECK(!memcmp(t->buf + FIN_OFF + sizeof(fin), m + sizeof(fin),
				      sizeof(struct ibv_rvh)));
			nrndv++;
			CHECK_EQ(swvt_cntr_read(rread), nrndv);
		}
		uint32_t done = 1;
		swvt_send(t, &done, sizeof(done));
	}
	swvt_barrier(t);
	CHECK_OK(ibv_destroy_qp(s.qp[0]));
	CHECK_OK(ibv_destroy_comp_cntr(rread));
	CHECK_OK(ibv_destroy_cq(s.scq));
}

/* ---------------------------------------------------------------- receiver */

struct rx {
	struct swvt *t;
	struct ibv_cq_ex *cq;
	struct ibv_srq *srq;
	uint32_t unexp; /* unexpected messages handled */
	uint32_t qpn;
	/* The SRQ lives on a PD of its own (the QP's is t->pd): its buffers' lkeys are
	 * the SRQ's PD's, for eager data and the device's rendezvous READ alike. */
	struct ibv_pd *srq_pd;
	struct ibv_mr *srq_mr;
};

struct got {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	unsigned flags;
	uint32_t byte_len, qp_num;
	struct ibv_wc_tm_info tm;
};

static struct got poll1(struct rx *r)
{
	struct timespec t0, now;
	struct ibv_poll_cq_attr pa = {0};
	struct got g;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc;
	while ((rc = ibv_start_poll(r->cq, &pa)) == ENOENT) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec > 20) {
			fprintf(stderr, "receiver: no completion in 20 s\n");
			exit(1);
		}
	}
	CHECK_OK(rc);
	g.wr_id = r->cq->wr_id;
	g.status = r->cq->status;
	g.opcode = ibv_wc_read_opcode(r->cq);
	g.flags = ibv_wc_read_wc_flags(r->cq);
	g.byte_len = ibv_wc_read_byte_len(r->cq);
	g.qp_num = ibv_wc_read_qp_num(r->cq);
	memset(&g.tm, 0xee, sizeof(g.tm));
	ibv_wc_read_tm_info(r->cq, &g.tm);
	ibv_end_poll(r->cq);
	return g;
}

static void expect_empty(struct rx *r)
{
	struct ibv_poll_cq_attr pa = {0};
	CHECK_EQ(ibv_start_poll(r->cq, &pa), ENOENT);
}

/* One list operation (signaled unless flags say otherwise); returns post's result. */
static int op(struct rx *r, struct ibv_ops_wr *w)
{
	struct ibv_ops_wr *bad = NULL;
	int rc = ibv_post_srq_ops(r->srq, w, &bad);
	CHECK(rc ? bad == w : bad == NULL);
	return rc;
}

static void expect_op(struct rx *r, uint64_t wr_id, enum ibv_wc_opcode opc, enum ibv_wc_status st,
		      unsigned flags)
{
	struct got g = poll1(r);
	CHECK_EQ(g.wr_id, wr_id);
	CHECK_EQ(g.status, st);
	CHECK_EQ(g.opcode, opc);
	CHECK_EQ(g.flags, flags);
	CHECK_EQ(g.tm.tag, 0);
}

/* ADD a tagged buffer of len bytes at off (split in two SGEs); returns its handle. */
static uint32_t add(struct rx *r, uint64_t tag, uint64_t mask, uint64_t off, uint32_t len,
		    bool sync, unsigned want_flags)
{
	uint32_t half = len / 2;
	struct ibv_sge sge[2] = {{(uintptr_t)r->t->buf + off, half, r->srq_mr->lkey},
				 {(uintptr_t)r->t->buf + off + half, len - half, r->srq_mr->lkey}};
	struct ibv_ops_wr w = {.wr_id = 0xadd0 + tag,
			       .opcode = IBV_WR_TAG_ADD,
			       .flags = IBV_OPS_SIGNALED | (sync ? IBV_OPS_TM_SYNC : 0)};
	w.tm.unexpected_cnt = r->unexp;
	w.tm.handle = 0xffffffffu;
	w.tm.add.recv_wr_id = 0xb0 + tag;
	w.tm.add.sg_list = sge;
	w.tm.add.num_sge = 2;
	w.tm.add.tag = tag;
	w.tm.add.mask = mask;
	CHECK_OK(op(r, &w));
	CHECK(w.tm.handle < NTAGS);
	expect_op(r, 0xadd0 + tag, IBV_WC_TM_ADD, IBV_WC_SUCCESS, want_flags);
	return w.tm.handle;
}

static void del(struct rx *r, uint32_t h, enum ibv_wc_status st)
{
	struct ibv_ops_wr w = {.wr_id = 0xde1, .opcode = IBV_WR_TAG_DEL, .flags = IBV_OPS_SIGNALED};
	w.tm.handle = h;
	CHECK_OK(op(r, &w));
	expect_op(r, 0xde1, IBV_WC_TM_DEL, st, 0);
}

static void sync_(struct rx *r)
{
	struct ibv_ops_wr w = {
	    .wr_id = 0x5c, .opcode = IBV_WR_TAG_SYNC, .flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC};
	w.tm.unexpected_cnt = r->unexp;
	CHECK_OK(op(r, &w));
	expect_op(r, 0x5c, IBV_WC_TM_SYNC, IBV_WC_SUCCESS, 0);
}

static void send_cmd(struct rx *r, uint8_t tmh_op, uint64_t tag, uint32_t len)
{
	struct cmd c = {.op = CMD_SEND, .tmh_op = tmh_op, .tag = tag, .len = len};
	swvt_send(r->t, &c, sizeof(c));
	uint32_t done;
	swvt_recv(r->t, &done, sizeof(done));
}

/* The bytes the sender put after the TMH (or in its rendezvous buffer). */
static void check_data(const uint8_t *p, uint64_t tag, uint32_t len)
{
	uint8_t *want = malloc(len ? len : 1);
	CHECK_PTR(want);
	swvt_fill(want, len, seed_of(tag, len));
	CHECK(!memcmp(p, want, len));
	free(want);
}

/* A message whose TMH matched the buffer at off with recv_wr_id 0xb0 + btag. */
static void expect_matched(struct rx *r, uint64_t btag, uint64_t tag, uint64_t off, uint32_t len)
{
	struct got g = poll1(r);
	CHECK_EQ(g.status, IBV_WC_SUCCESS);
	CHECK_EQ(g.opcode, IBV_WC_TM_RECV);
	CHECK_EQ(g.wr_id, 0xb0 + btag);
	CHECK_EQ(g.flags, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID);
	CHECK_EQ(g.byte_len, len);
	CHECK_EQ(g.qp_num, r->qpn);
	CHECK_EQ(g.tm.tag, tag);
	CHECK_EQ(g.tm.priv, APP_CTX);
	check_data(r->t->buf + off, tag, len);
}

/* A message in an ordinary SRQ WQE (wr_id 0x0u + k, at off): whole, TMH included. */
static void expect_whole(struct rx *r, uint64_t wr_id, enum ibv_wc_opcode opc, uint8_t tmh_op,
			 uint64_t tag, uint64_t off, uint32_t len)
{
	struct got g = poll1(r);
	CHECK_EQ(g.status, IBV_WC_SUCCESS);
	CHECK_EQ(g.opcode, opc);
	CHECK_EQ(g.wr_id, wr_id);
	CHECK_EQ(g.flags, 0);
	CHECK_EQ(g.byte_len, sizeof(struct ibv_tmh) + len);
	CHECK_EQ(g.tm.tag, 0);
	struct ibv_tmh tmh;
	memcpy(&tmh, r->t->buf + off, sizeof(tmh));
	CHECK_EQ(tmh.opcode, tmh_op);
	CHECK_EQ(be64toh(tmh.tag), tag);
	check_data(r->t->buf + off + sizeof(tmh), tag, len);
}

static void post_plain(struct rx *r, uint64_t wr_id, uint64_t off)
{
	struct ibv_sge sge = {(uintptr_t)r->t->buf + off, SLOT, r->srq_mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
	CHECK_OK(ibv_post_srq_recv(r->srq, &wr, &bad));
}

static void errors(struct rx *r, struct ibv_device_attr_ex *dx, struct ibv_pd *pd)
{
	struct ibv_context *ctx = r->t->ctx;
	struct ibv_cq *cq = ibv_cq_ex_to_cq(r->cq);
	/* a TM SRQ beyond the device's tm_caps, or without its CQ */
	struct ibv_srq_init_attr_ex x = {
	    .attr = {.max_wr = 4, .max_sge = 1},
	    .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ |
			 IBV_SRQ_INIT_ATTR_TM,
	    .srq_type = IBV_SRQT_TM,
	    .pd = pd,
	    .cq = cq,
	    .tm_cap = {.max_num_tags = dx->tm_caps.max_num_tags + 1, .max_ops = 4}};
	errno = 0;
	CHECK(!ibv_create_srq_ex(ctx, &x) && errno == EINVAL);
	x.tm_cap.max_num_tags = 4;
	x.tm_cap.max_ops = dx->tm_caps.max_ops + 1;
	errno = 0;
	CHECK(!ibv_create_srq_ex(ctx, &x) && errno == EINVAL);
	x.tm_cap.max_ops = 4;
	x.comp_mask &= ~(uint32_t)IBV_SRQ_INIT_ATTR_CQ;
	errno = 0;
	CHECK(!ibv_create_srq_ex(ctx, &x) && errno == EINVAL);
	x.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
	struct ibv_srq *tsrq = ibv_create_srq_ex(ctx, &x);
	CHECK_PTR(tsrq);
	/* tag matching is RC only */
	struct ibv_qp_init_attr ua = {.send_cq = cq,
				      .recv_cq = cq,
				      .srq = tsrq,
				      .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 1, .max_send_sge = 1}};
	errno = 0;
	CHECK(!ibv_create_qp(pd, &ua) && errno == EINVAL);
	CHECK_OK(ibv_destroy_srq(tsrq));

	/* list operations on a basic SRQ */
	struct ibv_srq_init_attr ba = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *basic = ibv_create_srq(pd, &ba);
	CHECK_PTR(basic);
	struct ibv_ops_wr w = {.wr_id = 1, .opcode = IBV_WR_TAG_SYNC}, *bad = NULL;
	CHECK_EQ(ibv_post_srq_ops(basic, &w, &bad), EINVAL);
	CHECK(bad == &w);
	CHECK_OK(ibv_destroy_srq(basic));

	/* more tags than max_num_tags: the ninth of a chain fails, the eight before it
	 * are added and complete; *bad names the ninth */
	struct ibv_ops_wr chain[NTAGS + 1];
	struct ibv_sge sge = {(uintptr_t)r->t->buf, 64, r->t->mr->lkey};
	memset(chain, 0, sizeof(chain));
	for (int i = 0; i <= NTAGS; i++) {
		chain[i].wr_id = 0x100 + (uint64_t)i;
		chain[i].opcode = IBV_WR_TAG_ADD;
		chain[i].flags = IBV_OPS_SIGNALED;
		chain[i].next = i < NTAGS ? &chain[i + 1] : NULL;
		chain[i].tm.add.sg_list = &sge;
		chain[i].tm.add.num_sge = 1;
		chain[i].tm.add.tag = 0xdead0000 + (uint64_t)i;
		chain[i].tm.add.mask = ~0ull;
	}
	bad = NULL;
	CHECK_EQ(ibv_post_srq_ops(r->srq, chain, &bad), ENOMEM);
	CHECK(bad == &chain[NTAGS]);
	for (int i = 0; i < NTAGS; i++)
		expect_op(r, 0x100 + (uint64_t)i, IBV_WC_TM_ADD, IBV_WC_SUCCESS, 0);
	/* handles: beyond the list, and an unknown opcode, too many SGEs */
	struct ibv_ops_wr d = {.wr_id = 7, .opcode = IBV_WR_TAG_DEL, .flags = IBV_OPS_SIGNALED};
	d.tm.handle = NTAGS;
	CHECK_EQ(op(r, &d), EINVAL);
	d.tm.handle = UINT32_MAX;
	CHECK_EQ(op(r, &d), EINVAL);
	struct ibv_ops_wr u = {.wr_id = 8, .opcode = (enum ibv_ops_wr_opcode)77};
	CHECK_EQ(op(r, &u), EINVAL);
	/* delete all eight (each handle once; then it names nothing) */
	for (int i = 0; i < NTAGS; i++)
		del(r, chain[i].tm.handle, IBV_WC_SUCCESS);
	d.tm.handle = chain[0].tm.handle;
	CHECK_EQ(op(r, &d), EINVAL);
	struct ibv_sge many[SRQ_SGE + 1];
	for (int i = 0; i <= SRQ_SGE; i++)
		many[i] = sge;
	struct ibv_ops_wr a = {.wr_id = 9, .opcode = IBV_WR_TAG_ADD, .flags = IBV_OPS_SIGNALED};
	a.tm.add.sg_list = many;
	a.tm.add.num_sge = SRQ_SGE + 1;
	CHECK_EQ(op(r, &a), EINVAL);
	a.tm.add.num_sge = -1;
	CHECK_EQ(op(r, &a), EINVAL);
	expect_empty(r);
}

static void receiver(struct swvt *t, void *arg)
{
	(void)arg;
	struct ibv_device_attr_ex dx;
	CHECK_OK(ibv_query_device_ex(t->ctx, NULL, &dx));
	CHECK(dx.tm_caps.flags & IBV_TM_CAP_RC);
	CHECK(dx.tm_caps.max_num_tags >= NTAGS);
	CHECK(dx.tm_caps.max_ops >= NTAGS);
	CHECK(dx.tm_caps.max_sge >= 2);
	CHECK(dx.tm_caps.max_rndv_hdr_size >= sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh) + 8);

	struct rx r = {.t = t};
	r.srq_pd = ibv_alloc_pd(t->ctx);
	CHECK_PTR(r.srq_pd);
	r.srq_mr = ibv_reg_mr(r.srq_pd, t->buf, t->opts.buf_size, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(r.srq_mr);
	struct ibv_cq_init_attr_ex ca = {
	    .cqe = 256, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO};
	r.cq = ibv_create_cq_ex(t->ctx, &ca);
	CHECK_PTR(r.cq);
	struct ibv_cq *cq = ibv_cq_ex_to_cq(r.cq);
	struct ibv_srq_init_attr_ex x = {.attr = {.max_wr = 64, .max_sge = SRQ_SGE},
					 .comp_mask = IBV_SRQ_INIT_ATTR_TYPE |
						      IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ |
						      IBV_SRQ_INIT_ATTR_TM,
					 .srq_type = IBV_SRQT_TM,
					 .pd = r.srq_pd,
					 .cq = cq,
					 .tm_cap = {.max_num_tags = NTAGS, .max_ops = NTAGS}};
	r.srq = ibv_create_srq_ex(t->ctx, &x);
	CHECK_PTR(r.srq);

	/* one send WR of its own, so that send-side counters can be attached (pyverbs'
	 * test makes the QP with none: the device's WQEs have slots of their own) */
	struct srqt s;
	memset(&s, 0, sizeof(s));
	s.t = t;
	s.nqp = 1;
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .srq = r.srq,
				      .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_send_sge = 1}};
	s.qp[0] = ibv_create_qp(t->pd, &ia);
	CHECK_PTR(s.qp[0]);
	r.qpn = s.qp[0]->qp_num;
	struct ibv_comp_cntr *recv = swvt_cntr_create(t->ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_comp_cntr *sendside = swvt_cntr_create(t->ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_RECV};
	CHECK_OK(ibv_qp_attach_comp_cntr(s.qp[0], recv, &at));
	at.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_SEND | IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_READ;
	CHECK_OK(ibv_qp_attach_comp_cntr(s.qp[0], sendside, &at));
	s.lpsn[0] = (uint32_t)lrand48() & 0xffffff;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
				.port_num = t->opts.port,
				.qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
	CHECK_OK(ibv_modify_qp(
	    s.qp[0], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	srqt_connect(&s, NULL);

	errors(&r, &dx, t->pd);

	/* ordinary WQEs for what is not matched: wr_id 0x10 + k in slot 10 + k */
	for (int k = 0; k < 8; k++)
		post_plain(&r, 0x10 + (uint64_t)k, (uint64_t)(10 + k) * SLOT);
	uint64_t nrecv = 0;

	/* Posting order with masks: h1 (0x1xx) and h2 (exactly 0x100) both take 0x100,
	 * the older wins; h3 takes 0x2cd through its mask; then 0x100 finds h2. */
	add(&r, 0x100, 0xff00, 1 * SLOT, SLOT, false, 0);
	add(&r, 0x101, ~0ull, 2 * SLOT, SLOT, false, 0); /* tag 0x101: 0x100 misses it */
	uint32_t h2 = add(&r, 0x100 | (1ull << 40), 0xffff, 3 * SLOT, SLOT, false, 0);
	add(&r, 0x200, 0xf00, 4 * SLOT, SLOT, false, 0);
	send_cmd(&r, IBV_TMH_EAGER, 0x100, 3000);
	/* the CQE (written before the ACK the sender waited for) keeps its tm_info
	 * through a resize */
	CHECK_OK(ibv_resize_cq(cq, 512));
	expect_matched(&r, 0x100, 0x100, 1 * SLOT, 3000);
	send_cmd(&r, IBV_TMH_EAGER, 0x2cd, 5000); /* multi-packet */
	expect_matched(&r, 0x200, 0x2cd, 4 * SLOT, 5000);
	send_cmd(&r, IBV_TMH_EAGER, 0x100, 0);
	expect_matched(&r, 0x100 | (1ull << 40), 0x100, 3 * SLOT, 0);
	send_cmd(&r, IBV_TMH_EAGER, 0x101, 100);
	expect_matched(&r, 0x101, 0x101, 2 * SLOT, 100);
	nrecv += 4;
	CHECK_EQ(swvt_cntr_read(recv), nrecv);
	/* a consumed buffer's handle: DEL answers IBV_WC_TM_ERR, then names nothing */
	del(&r, h2, IBV_WC_TM_ERR);

	/* Unexpected: no tag matches; the whole message in an ordinary WQE. A buffer
	 * added before software reports the count is held: ADD says TM_SYNC_REQ and the
	 * same tag is unexpected again; after the SYNC it matches. */
	send_cmd(&r, IBV_TMH_EAGER, 0x999, 1000);
	expect_whole(&r, 0x10, IBV_WC_TM_RECV, IBV_TMH_EAGER, 0x999, 10 * SLOT, 1000);
	add(&r, 0x999, ~0ull, 5 * SLOT, SLOT, false, IBV_WC_TM_SYNC_REQ);
	send_cmd(&r, IBV_TMH_EAGER, 0x999, 2000);
	expect_whole(&r, 0x11, IBV_WC_TM_RECV, IBV_TMH_EAGER, 0x999, 11 * SLOT, 2000);
	r.unexp = 2;
	sync_(&r);
	send_cmd(&r, IBV_TMH_EAGER, 0x999, 300);
	expect_matched(&r, 0x999, 0x999, 5 * SLOT, 300);
	nrecv += 3;

	/* DEL: the tag is unexpected afterwards; an ADD that reports the count itself
	 * (IBV_OPS_TM_SYNC) is in sync */
	uint32_t h5 = add(&r, 0x555, ~0ull, 6 * SLOT, SLOT, true, 0);
	del(&r, h5, IBV_WC_SUCCESS);
	send_cmd(&r, IBV_TMH_EAGER, 0x555, 10);
	expect_whole(&r, 0x12, IBV_WC_TM_RECV, IBV_TMH_EAGER, 0x555, 12 * SLOT, 10);
	r.unexp = 3;
	nrecv++;

	/* NO_TAG: whole, IBV_WC_TM_NO_TAG, never unexpected (the count stays 3: this ADD
	 * is in sync) */
	send_cmd(&r, IBV_TMH_NO_TAG, 0x555, 64);
	expect_whole(&r, 0x13, IBV_WC_TM_NO_TAG, IBV_TMH_NO_TAG, 0x555, 13 * SLOT, 64);
	nrecv++;

	/* Rendezvous: MATCH, then the data the device READ (20 packets), DATA_VALID;
	 * the sender checks the FIN. Counted once, with the data. */
	memset(t->buf + 7 * SLOT, 0, SLOT); /* before the ADD hands the buffer over */
	add(&r, 0x777, ~0ull, 7 * SLOT, SLOT, true, 0);
	send_cmd(&r, IBV_TMH_RNDV, 0x777, RNDV_LEN);
	struct got g = poll1(&r);
	CHECK_EQ(g.status, IBV_WC_SUCCESS);
	CHECK_EQ(g.opcode, IBV_WC_TM_RECV);
	CHECK_EQ(g.wr_id, 0xb0 + 0x777);
	CHECK_EQ(g.flags, IBV_WC_TM_MATCH);
	CHECK_EQ(g.tm.tag, 0x777);
	CHECK_EQ(g.tm.priv, APP_CTX);
	g = poll1(&r);
	CHECK_EQ(g.status, IBV_WC_SUCCESS);
	CHECK_EQ(g.opcode, IBV_WC_TM_RECV);
	CHECK_EQ(g.wr_id, 0xb0 + 0x777);
	CHECK_EQ(g.flags, IBV_WC_TM_DATA_VALID);
	CHECK_EQ(g.byte_len, RNDV_LEN);
	CHECK_EQ(g.tm.tag, 0);
	check_data(t->buf + 7 * SLOT, 0x777, RNDV_LEN);
	nrecv++;
	CHECK_EQ(swvt_cntr_read(recv), nrecv);

	/* A one-packet rendezvous: on the intra-host link the device reads it directly,
	 * the READ completes and the FIN leaves within the handling of the request (the
	 * sender checks that the SEND's ACK came first). */
	memset(t->buf + 9 * SLOT, 0, SLOT);
	add(&r, 0x779, ~0ull, 9 * SLOT, SLOT, true, 0);
	send_cmd(&r, IBV_TMH_RNDV, 0x779, 512);
	g = poll1(&r);
	CHECK_EQ(g.status, IBV_WC_SUCCESS);
	CHECK_EQ(g.flags, IBV_WC_TM_MATCH);
	CHECK_EQ(g.tm.tag, 0x779);
	g = poll1(&r);
	CHECK_EQ(g.status, IBV_WC_SUCCESS);
	CHECK_EQ(g.opcode, IBV_WC_TM_RECV);
	CHECK_EQ(g.flags, IBV_WC_TM_DATA_VALID);
	CHECK_EQ(g.byte_len, 512);
	check_data(t->buf + 9 * SLOT, 0x779, 512);
	nrecv++;
	CHECK_EQ(swvt_cntr_read(recv), nrecv);

	/* a buffer too small for the RVH's length: software's, with the headers */
	add(&r, 0x778, ~0ull, 8 * SLOT, 100, true, 0);
	send_cmd(&r, IBV_TMH_RNDV, 0x778, SLOT + 1);
	g = poll1(&r);
	CHECK_EQ(g.status, IBV_WC_TM_RNDV_INCOMPLETE);
	CHECK_EQ(g.wr_id, 0xb0 + 0x778);
	CHECK_EQ(g.opcode, IBV_WC_TM_RECV);
	struct ibv_tmh th;
	struct ibv_rvh rv;
	memcpy(&th, t->buf + 8 * SLOT, sizeof(th));
	memcpy(&rv, t->buf + 8 * SLOT + sizeof(th), sizeof(rv));
	CHECK_EQ(th.opcode, IBV_TMH_RNDV);
	CHECK_EQ(be64toh(th.tag), 0x778);
	CHECK_EQ(be32toh(rv.len), SLOT + 1);
	CHECK_EQ(swvt_cntr_read_err(recv), 1); /* a receive that did not succeed */

	CHECK_EQ(swvt_cntr_read(recv), nrecv);
	CHECK_EQ(swvt_cntr_read(sendside), 0); /* the device's READ and FIN: no WRs */
	CHECK_EQ(swvt_cntr_read_err(sendside), 0);
	expect_empty(&r); /* no send-side CQE for them either */

	struct cmd end = {.op = CMD_END};
	swvt_send(t, &end, sizeof(end));
	swvt_barrier(t);
	CHECK_OK(ibv_destroy_qp(s.qp[0]));
	CHECK_OK(ibv_destroy_srq(r.srq));
	CHECK_OK(ibv_dereg_mr(r.srq_mr));
	CHECK_OK(ibv_dealloc_pd(r.srq_pd));
	CHECK_OK(ibv_destroy_comp_cntr(recv));
	CHECK_OK(ibv_destroy_comp_cntr(sendside));
	CHECK_OK(ibv_destroy_cq(cq));
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.buf_size = 20 * SLOT;
	int rc = swvt_run(&o, receiver, sender, NULL);
	/* again under loss, duplication and reordering: a retransmitted or duplicated
	 * SEND is matched once, the device's READ and FIN recover like any request */
	if (!getenv("SWVERBS_FAULT")) {
		setenv("SWVERBS_FAULT", "seed=7,drop=2,dup=2,reorder=2", 1);
		printf("with packet faults\n");
		rc |= swvt_run(&o, receiver, sender, NULL);
		unsetenv("SWVERBS_FAULT");
	}
	if (!rc)
		printf("test_tm: OK\n");
	return rc;
}
