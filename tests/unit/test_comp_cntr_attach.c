/*
 * ibv_qp_attach_comp_cntr: the seven checks in their documented order, attach in
 * every QP state, overlap rules, several counters per QP and one counter on many
 * QPs, implicit detach on QP destroy, destroy-while-attached, the per-type op
 * matrix, and a loopback RC pair in one process that checks counting end to end.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "cntr.h"
#include "inproc.h"
#include "core/comp_cntr.h"
#include "core/qp.h"

#define OP_SEND   IBV_QP_ATTACH_COMP_CNTR_OP_SEND
#define OP_RECV   IBV_QP_ATTACH_COMP_CNTR_OP_RECV
#define OP_RD     IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_READ
#define OP_RRD    IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ
#define OP_WR     IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE
#define OP_RWR    IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE
#define OP_AT     SWV_QP_ATTACH_COMP_CNTR_OP_ATOMIC
#define OP_RAT    SWV_QP_ATTACH_COMP_CNTR_OP_REMOTE_ATOMIC
#define TMO_MS    10000

static const uint32_t all_bits[8] = {OP_SEND, OP_RECV, OP_RD, OP_RRD, OP_WR, OP_RWR, OP_AT, OP_RAT};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static uint8_t *buf;
static struct ibv_mr *mr;
#define BUF_SIZE (1 << 20)

static int attach(struct ibv_qp *qp, struct ibv_comp_cntr *c, uint32_t mask)
{
	struct ibv_qp_attach_comp_cntr_attr a = {.comp_mask = 0, .op_mask = mask};
	return ibv_qp_attach_comp_cntr(qp, c, &a);
}

static struct ibv_qp *make_qp_type(enum ibv_qp_type type, uint32_t send_wr, uint32_t recv_wr)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = type,
		.cap = {.max_send_wr = send_wr, .max_recv_wr = recv_wr,
			.max_send_sge = 2, .max_recv_sge = 2},
	};
	return ibv_create_qp(pd, &ia);
}

static struct ibv_qp *make_qp(uint32_t send_wr, uint32_t recv_wr)
{
	struct ibv_qp *qp = make_qp_type(IBV_QPT_RC, send_wr, recv_wr);
	CHECK_PTR(qp);
	return qp;
}

static void to_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
}

static void test_argument_order(void)
{
	struct ibv_qp *qp = make_qp(16, 16);
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_qp_attach_comp_cntr_attr a = {.op_mask = OP_SEND};

	/* 1: NULL arguments */
	CHECK_EQ(ibv_qp_attach_comp_cntr(NULL, c, &a), EINVAL);
	CHECK_EQ(ibv_qp_attach_comp_cntr(qp, NULL, &a), EINVAL);
	CHECK_EQ(ibv_qp_attach_comp_cntr(qp, c, NULL), EINVAL);
	CHECK_EQ(ibv_qp_attach_comp_cntr(NULL, NULL, NULL), EINVAL);

	/* 2: a counter of another context (same device) */
	struct ibv_context *ctx2 = ibv_open_device(ctx->device);
	CHECK_PTR(ctx2);
	struct ibv_comp_cntr_init_attr ia = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_comp_cntr *other = ibv_create_comp_cntr(ctx2, &ia);
	CHECK_PTR(other);
	CHECK_EQ(attach(qp, other, OP_SEND), EINVAL);

	/* 3: comp_mask */
	a.comp_mask = 1;
	CHECK_EQ(ibv_qp_attach_comp_cntr(qp, c, &a), EINVAL);
	a.comp_mask = 0x80000000u;
	CHECK_EQ(ibv_qp_attach_comp_cntr(qp, c, &a), EINVAL);
	a.comp_mask = 0;

	/* 4: op_mask empty; 5: bits the device does not know are unsupported (ENOTSUP,
	 * rdma-core's manual page), alone or with known ones */
	CHECK_EQ(attach(qp, c, 0), EINVAL);
	CHECK_EQ(attach(qp, c, 1u << 6), EOPNOTSUPP);
	CHECK_EQ(attach(qp, c, 1u << 15), EOPNOTSUPP);
	CHECK_EQ(attach(qp, c, 1u << 18), EOPNOTSUPP);
	CHECK_EQ(attach(qp, c, 0x80000000u), EOPNOTSUPP);
	CHECK_EQ(attach(qp, c, OP_SEND | (1u << 7)), EOPNOTSUPP);
	CHECK_EQ(attach(qp, c, OP_AT | (1u << 20)), EOPNOTSUPP);

	/* Nothing above attached anything: every bit is still free. */
	CHECK_OK(attach(qp, c, OP_SEND));
	/* 2 before 7: the other context's counter on an owned bit is EINVAL */
	CHECK_EQ(attach(qp, other, OP_SEND), EINVAL);
	/* 3 before 7, 5 before 7 */
	a.comp_mask = 1;
	CHECK_EQ(ibv_qp_attach_comp_cntr(qp, c, &a), EINVAL);
	a.comp_mask = 0;
	CHECK_EQ(attach(qp, c, OP_SEND | (1u << 6)), EOPNOTSUPP);
	CHECK_EQ(attach(qp, c, OP_SEND), EBUSY);

	/* 5 before 6 and 7: a QP without send queue, moved to RTS, with SEND */
	struct ibv_qp *nosq = make_qp(0, 16);
	struct ibv_comp_cntr *c2 = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	CHECK_EQ(attach(nosq, c2, OP_SEND), EOPNOTSUPP);
	CHECK_OK(attach(nosq, c2, OP_RECV | OP_RWR | OP_RRD | OP_RAT));
	/* 3 before 5, 4 before 5; an unknown bit with a kind the QP cannot count is
	 * EOPNOTSUPP either way */
	a.comp_mask = 2;
	a.op_mask = OP_SEND;
	CHECK_EQ(ibv_qp_attach_comp_cntr(nosq, c2, &a), EINVAL);
	a.comp_mask = 0;
	CHECK_EQ(attach(nosq, c2, 0), EINVAL);
	CHECK_EQ(attach(nosq, c2, OP_SEND | (1u << 8)), EOPNOTSUPP);
	/* 5 before 7: SEND | RECV with RECV owned */
	CHECK_EQ(attach(nosq, c2, OP_SEND | OP_RECV), EOPNOTSUPP);
	swvt_pair_to_init(nosq);
	/* 6 before 7 needs a state past INIT: see test_states. Here 5 before 6: */
	struct ibv_qp *peer = make_qp(16, 16);
	swvt_pair_to_init(peer);
	swvt_pair_connect(nosq, peer);
	CHECK_EQ(attach(nosq, c2, OP_SEND), EOPNOTSUPP);
	CHECK_EQ(attach(nosq, c2, OP_WR | OP_RD | OP_AT), EOPNOTSUPP);
	/* 6 before 7 */
	CHECK_EQ(attach(nosq, c2, OP_RECV), EINVAL);
	CHECK_EQ(attach(nosq, c, OP_RWR), EINVAL);

	/* A failed attach changes nothing: SEND|RECV with RECV owned leaves SEND free. */
	struct ibv_qp *q3 = make_qp(16, 16);
	CHECK_OK(attach(q3, c, OP_RECV));
	CHECK_EQ(attach(q3, c2, OP_SEND | OP_RECV), EBUSY);
	CHECK_OK(attach(q3, c2, OP_SEND));

	CHECK_OK(ibv_destroy_qp(q3));
	CHECK_OK(ibv_destroy_qp(peer));
	CHECK_OK(ibv_destroy_qp(nosq));
	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_destroy_comp_cntr(c));
	CHECK_OK(ibv_destroy_comp_cntr(c2));
	CHECK_OK(ibv_destroy_comp_cntr(other));
	CHECK_OK(ibv_close_device(ctx2));
}

static void test_states(void)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_qp *a = make_qp(16, 16), *b = make_qp(16, 16);

	/* RESET */
	CHECK_OK(attach(a, c, OP_SEND));
	/* INIT */
	swvt_pair_to_init(a);
	swvt_pair_to_init(b);
	CHECK_OK(attach(a, c, OP_RECV));
	CHECK_OK(attach(b, c, OP_RWR));
	/* RTR */
	swvt_pair_to_rtr(a, b->qp_num);
	CHECK_EQ(attach(a, c, OP_WR), EINVAL);
	CHECK_EQ(attach(a, c, OP_SEND), EINVAL); /* state (6) before overlap (7) */
	/* RTS */
	swvt_pair_to_rtr(b, a->qp_num);
	swvt_pair_to_rts(a, 14);
	swvt_pair_to_rts(b, 14);
	CHECK_EQ(attach(a, c, OP_WR), EINVAL);
	CHECK_EQ(attach(b, c, OP_RWR), EINVAL);
	/* ERR */
	to_err(a);
	CHECK_EQ(attach(a, c, OP_RD), EINVAL);
	/* Back to RESET: attach works again (the earlier attachments stay). */
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RESET};
	CHECK_OK(ibv_modify_qp(a, &r, IBV_QP_STATE));
	CHECK_OK(attach(a, c, OP_RD));
	CHECK_EQ(attach(a, c, OP_SEND), EBUSY);

	/* ERR straight from INIT (RESET -> ERR is not a valid transition) */
	struct ibv_qp *e = make_qp(16, 16);
	swvt_pair_to_init(e);
	to_err(e);
	CHECK_EQ(attach(e, c, OP_SEND), EINVAL);

	CHECK_EQ(ibv_destroy_comp_cntr(c), EBUSY);
	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_qp(b));
	CHECK_OK(ibv_destroy_qp(e));
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

static void test_overlap_and_sharing(void)
{
	struct ibv_comp_cntr *c1 = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_comp_cntr *c2 = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_BYTES);
	struct ibv_comp_cntr *c3 = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_qp *qp = make_qp(16, 16);

	CHECK_OK(attach(qp, c1, OP_SEND | OP_RECV));
	CHECK_EQ(attach(qp, c2, OP_RECV), EBUSY);         /* another counter */
	CHECK_EQ(attach(qp, c1, OP_RECV), EBUSY);         /* the same counter */
	CHECK_EQ(attach(qp, c1, OP_SEND | OP_RECV), EBUSY);
	CHECK_EQ(attach(qp, c2, OP_WR | OP_SEND), EBUSY); /* partial overlap */
	CHECK_OK(attach(qp, c1, OP_WR));                  /* same counter, disjoint bits */
	CHECK_OK(attach(qp, c2, OP_RD | OP_RRD));
	CHECK_OK(attach(qp, c3, OP_AT | OP_RAT));
	CHECK_EQ(attach(qp, c3, OP_RAT), EBUSY);
	CHECK_OK(attach(qp, c3, OP_RWR));
	/* All eight kinds owned now. */
	for (int i = 0; i < 8; i++)
		CHECK_EQ(attach(qp, c1, all_bits[i]), EBUSY);

	/* One counter on many QPs; destroy is EBUSY until the last QP is gone, and the
	 * counter stays usable meanwhile. */
	enum { NQ = 10 };
	struct ibv_comp_cntr *m = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_qp *q[NQ];
	for (int i = 0; i < NQ; i++) {
		q[i] = make_qp(16, 16);
		if (i & 1)
			swvt_pair_to_init(q[i]);
		CHECK_OK(attach(q[i], m, OP_SEND | OP_RWR));
		if (i == 3) /* twice on one QP, disjoint bits */
			CHECK_OK(attach(q[i], m, OP_RECV));
	}
	CHECK_OK(ibv_inc_comp_cntr(m, 5));
	for (int i = 0; i < NQ; i++) {
		CHECK_EQ(ibv_destroy_comp_cntr(m), EBUSY);
		CHECK_EQ(swvt_cntr_read(m), 5 + (uint64_t)i); /* still usable after EBUSY */
		CHECK_OK(ibv_inc_comp_cntr(m, 1));
		CHECK_OK(ibv_destroy_qp(q[i]));
	}
	CHECK_OK(ibv_destroy_comp_cntr(m));

	/* Implicit detach: once the QP is gone, each counter may be destroyed. */
	CHECK_EQ(ibv_destroy_comp_cntr(c1), EBUSY);
	CHECK_EQ(ibv_destroy_comp_cntr(c2), EBUSY);
	CHECK_EQ(ibv_destroy_comp_cntr(c3), EBUSY);
	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_destroy_comp_cntr(c1));
	CHECK_OK(ibv_destroy_comp_cntr(c2));
	CHECK_OK(ibv_destroy_comp_cntr(c3));
}

/* ---- the per-type matrix (check 5) ---- */

/* Bits a QP of this type/queues accepts (comp-cntr.md, attach check 5). */
static uint32_t expected_ok(enum ibv_qp_type type, bool sq, bool rq)
{
	uint32_t ok;
	switch (type) {
	case IBV_QPT_RC:
		ok = 0x3f | OP_AT | OP_RAT;
		break;
	case IBV_QPT_UC:
		ok = OP_SEND | OP_RECV | OP_WR | OP_RWR;
		break;
	case IBV_QPT_UD:
		ok = OP_SEND | OP_RECV;
		break;
	default:
		ok = 0;
	}
	if (!sq)
		ok &= ~(uint32_t)(OP_SEND | OP_RD | OP_WR | OP_AT);
	if (!rq)
		ok &= ~(uint32_t)OP_RECV;
	return ok;
}

static void check_matrix_on(struct ibv_qp *qp, enum ibv_qp_type type, bool sq, bool rq,
			    void (*release)(struct ibv_qp *))
{
	uint32_t ok = expected_ok(type, sq, rq);
	for (int i = 0; i < 8; i++) {
		struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
		int want = (ok & all_bits[i]) ? 0 : EOPNOTSUPP;
		int got = attach(qp, c, all_bits[i]);
		if (got != want) {
			fprintf(stderr, "type %d sq %d rq %d bit %#x: got %d want %d\n", type, sq, rq,
				all_bits[i], got, want);
			exit(1);
		}
		release(qp); /* detach so the next bit starts clean */
		CHECK_OK(ibv_destroy_comp_cntr(c));
	}
	/* A mask mixing a supported and an unsupported bit attaches nothing. */
	if (ok != 0 && ok != (0x3fu | OP_AT | OP_RAT)) {
		struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
		uint32_t some_ok = ok & -ok, some_bad = 0;
		for (int i = 0; i < 8 && !some_bad; i++)
			if (!(ok & all_bits[i]))
				some_bad = all_bits[i];
		CHECK_EQ(attach(qp, c, some_ok | some_bad), EOPNOTSUPP);
		CHECK_OK(ibv_destroy_comp_cntr(c)); /* not attached */
	}
}

/* A QP object built by hand: UC/UD/SRQ QPs cannot all be created through the API
 * (yet), and check 5 only reads the type, the caps and the SRQ pointer. */
static struct swv_qp *fake_qp(enum ibv_qp_type type, uint32_t send_wr, uint32_t recv_wr, bool srq)
{
	struct swv_qp *qp = calloc(1, sizeof(*qp));
	CHECK_PTR(qp);
	pthread_mutex_init(&qp->lock, NULL);
	qp->type = type;
	qp->state = IBV_QPS_RESET;
	qp->cap.max_send_wr = send_wr;
	qp->cap.max_recv_wr = recv_wr;
	qp->srq = srq ? (struct swv_srq *)(uintptr_t)0x1000 : NULL; /* never dereferenced */
	qp->qpx.qp_base.context = ctx;
	qp->qpx.qp_base.qp_type = type;
	return qp;
}

static void fake_release(struct ibv_qp *qp)
{
	swv_comp_cntr_detach_qp(to_swv_qp(qp));
}

static void real_release(struct ibv_qp *qp)
{
	/* A real QP detaches only by being destroyed: the caller recreates it. */
	(void)qp;
}

static void test_type_matrix(void)
{
	static const enum ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD,
						 IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV,
						 IBV_QPT_RAW_PACKET, IBV_QPT_DRIVER};
	for (unsigned t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		for (int v = 0; v < 5; v++) {
			/* both queues / no SQ / no RQ / SRQ as RQ / SRQ and no SQ */
			uint32_t s = (v == 1 || v == 4) ? 0 : 8, r = (v == 2 || v >= 3) ? 0 : 8;
			bool srq = v >= 3;
			struct swv_qp *qp = fake_qp(types[t], s, r, srq);
			check_matrix_on(&qp->qpx.qp_base, types[t], s != 0, r != 0 || srq,
					fake_release);
			pthread_mutex_destroy(&qp->lock);
			free(qp);
		}
	}

	/* The same on real QPs of every type the device can create. */
	static const enum ibv_qp_type real[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
	for (unsigned t = 0; t < 3; t++) {
		for (int v = 0; v < 3; v++) {
			uint32_t s = v == 1 ? 0 : 8, r = v == 2 ? 0 : 8;
			struct ibv_qp *probe = make_qp_type(real[t], s, r);
			if (!probe) {
				printf("SKIP real-QP matrix for qp_type %d (sq %u rq %u): create: %s\n",
				       real[t], s, r, strerror(errno));
				continue;
			}
			CHECK_OK(ibv_destroy_qp(probe));
			uint32_t ok = expected_ok(real[t], s != 0, r != 0);
			for (int i = 0; i < 8; i++) {
				struct ibv_qp *qp = make_qp_type(real[t], s, r);
				CHECK_PTR(qp);
				struct ibv_comp_cntr *c =
				    swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
				CHECK_EQ(attach(qp, c, all_bits[i]), (ok & all_bits[i]) ? 0 : EOPNOTSUPP);
				real_release(qp);
				CHECK_OK(ibv_destroy_qp(qp));
				CHECK_OK(ibv_destroy_comp_cntr(c));
			}
		}
	}
}

/* ---- end to end on a loopback RC pair ---- */

static void post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t off, uint32_t len,
		 uint64_t remote_off, bool signaled, uint64_t wr_id)
{
	struct ibv_sge sge = {(uintptr_t)buf + off, len, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = signaled ? IBV_SEND_SIGNALED : 0}, *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = (uintptr_t)buf + remote_off;
		wr.wr.atomic.rkey = mr->rkey;
		wr.wr.atomic.compare_add = 1;
		wr.wr.atomic.swap = 2;
	} else {
		wr.wr.rdma.remote_addr = (uintptr_t)buf + remote_off;
		wr.wr.rdma.rkey = mr->rkey;
	}
	CHECK_OK(ibv_post_send(qp, &wr, &bad));
}

static void post_recv(struct ibv_qp *qp, uint64_t off, uint32_t len)
{
	struct ibv_sge sge = {(uintptr_t)buf + off, len, mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = off, .sg_list = &sge, .num_sge = 1}, *bad;
	CHECK_OK(ibv_post_recv(qp, &wr, &bad));
}

static int drain_cq(void)
{
	struct ibv_wc wc[16];
	int n, total = 0;
	while ((n = ibv_poll_cq(cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++)
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
		total += n;
	}
	CHECK(n == 0);
	return total;
}

static void test_loopback_counting(void)
{
	struct ibv_qp *a = make_qp(64, 64), *b = make_qp(64, 64);
	/* requester side on a: one WRS counter per kind; responder side on b: WRS
	 * counters, and a BYTES counter for RECV */
	struct ibv_comp_cntr *send = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS),
			     *wr = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS),
			     *rd_ = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS),
			     *at = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS),
			     *recv_b = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_BYTES),
			     *rwr = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS),
			     *rrd = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS),
			     *rat = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	CHECK_OK(attach(a, send, OP_SEND));
	swvt_pair_to_init(a);
	swvt_pair_to_init(b);
	CHECK_OK(attach(a, wr, OP_WR));
	CHECK_OK(attach(a, rd_, OP_RD));
	CHECK_OK(attach(a, at, OP_AT));
	CHECK_OK(attach(b, recv_b, OP_RECV));
	CHECK_OK(attach(b, rwr, OP_RWR));
	CHECK_OK(attach(b, rrd, OP_RRD));
	CHECK_OK(attach(b, rat, OP_RAT));
	swvt_pair_connect(a, b);

	enum { N = 20 };
	/* SENDs, half unsignaled: sizes 100..119 bytes */
	uint64_t bytes = 0;
	for (int i = 0; i < N; i++)
		post_recv(b, 65536 + (uint64_t)i * 4096, 4096);
	for (int i = 0; i < N; i++) {
		post(a, IBV_WR_SEND, 0, 100 + (uint32_t)i, 0, i & 1, (uint64_t)i);
		bytes += 100 + (uint64_t)i;
	}
	CHECK_OK(swv_comp_cntr_wait(send, N, TMO_MS));
	CHECK_OK(swv_comp_cntr_wait(recv_b, bytes, TMO_MS));
	CHECK_EQ(swvt_cntr_read(send), N);
	CHECK_EQ(swvt_cntr_read(recv_b), bytes);

	/* RDMA WRITEs (unsignaled) a -> b, 3000 bytes each (3 packets at MTU 1024) */
	for (int i = 0; i < N; i++)
		post(a, IBV_WR_RDMA_WRITE, 0, 3000, 262144 + (uint64_t)i * 4096, false, 0);
	CHECK_OK(swv_comp_cntr_wait(wr, N, TMO_MS));
	CHECK_OK(swv_comp_cntr_wait(rwr, N, TMO_MS));
	/* RDMA READs and atomics, signaled */
	for (int i = 0; i < N; i++)
		post(a, IBV_WR_RDMA_READ, 8192, 2500, 262144, true, 0);
	for (int i = 0; i < N; i++)
		post(a, i & 1 ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP, 16384, 8,
		     524288, true, 0);
	CHECK_OK(swv_comp_cntr_wait(rd_, N, TMO_MS));
	CHECK_OK(swv_comp_cntr_wait(at, N, TMO_MS));
	CHECK_OK(swv_comp_cntr_wait(rrd, N, TMO_MS));
	CHECK_OK(swv_comp_cntr_wait(rat, N, TMO_MS));

	/* Exact, on the right counters only; CQEs only for the signaled ones. */
	CHECK_EQ(swvt_cntr_read(send), N);
	CHECK_EQ(swvt_cntr_read(wr), N);
	CHECK_EQ(swvt_cntr_read(rd_), N);
	CHECK_EQ(swvt_cntr_read(at), N);
	CHECK_EQ(swvt_cntr_read(recv_b), bytes);
	CHECK_EQ(swvt_cntr_read(rwr), N);
	CHECK_EQ(swvt_cntr_read(rrd), N);
	CHECK_EQ(swvt_cntr_read(rat), N);
	struct ibv_comp_cntr *all[] = {send, wr, rd_, at, recv_b, rwr, rrd, rat};
	for (unsigned i = 0; i < 8; i++)
		CHECK_EQ(swvt_cntr_read_err(all[i]), 0);
	CHECK_EQ(drain_cq(), N / 2 + N /* recv */ + N + N);

	/* Flush: receives still posted on b when it enters ERR complete with
	 * IBV_WC_WR_FLUSH_ERR and add to the error count of b's RECV counter only. */
	for (int i = 0; i < 5; i++)
		post_recv(b, 65536, 64);
	to_err(b);
	for (int t = 0; t < 5000 && swvt_cntr_read_err(recv_b) < 5; t++)
		usleep(1000);
	CHECK_EQ(swvt_cntr_read_err(recv_b), 5);
	CHECK_EQ(swvt_cntr_read(recv_b), bytes);
	for (unsigned i = 0; i < 8; i++)
		if (all[i] != recv_b)
			CHECK_EQ(swvt_cntr_read_err(all[i]), 0);

	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_qp(b));
	for (unsigned i = 0; i < 8; i++)
		CHECK_OK(ibv_destroy_comp_cntr(all[i]));
}

int main(void)
{
	ctx = swvt_open_first_device();
	pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	CHECK_PTR(cq);
	mr = swvt_reg_buf(pd, BUF_SIZE,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	buf = mr->addr;

	test_argument_order();
	test_states();
	test_overlap_and_sharing();
	test_type_matrix();
	test_loopback_counting();

	swvt_dereg_buf(mr);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	printf("test_comp_cntr_attach: ok\n");
	return 0;
}
