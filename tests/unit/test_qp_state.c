/*
 * QP state machine: the transition/attribute-mask table against roce-wire.md 6.2, and
 * ibv_modify_qp / ibv_create_qp / ibv_post_* argument and state checks on a real
 * context (two RC QPs of one process connected to each other over loopback).
 */
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "inproc.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "transport/responder.h"

static const enum ibv_qp_type types[3] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};

struct row {
	enum ibv_qp_state cur, next;
	int req[3], opt[3]; /* RC, UC, UD; req includes IBV_QP_STATE */
};

/* roce-wire.md 6.2, numbers as printed there. */
static const struct row rows[] = {
	{IBV_QPS_RESET, IBV_QPS_INIT, {0x39, 0x39, 0x71}, {0, 0, 0}},
	{IBV_QPS_INIT, IBV_QPS_INIT, {0x1, 0x1, 0x1}, {0x38, 0x38, 0x70}},
	{IBV_QPS_INIT, IBV_QPS_RTR, {0x129181, 0x101181, 0x1}, {0x4018, 0x4018, 0x50}},
	{IBV_QPS_RTR, IBV_QPS_RTS, {0x12E01, 0x10001, 0x10001}, {0x4C00A, 0x4400A, 0x42}},
	{IBV_QPS_RTS, IBV_QPS_RTS, {0x1, 0x1, 0x1}, {0x4C00A, 0x4400A, 0x42}},
	{IBV_QPS_RTS, IBV_QPS_SQD, {0x1, 0x1, 0x1}, {0x4, 0x4, 0x4}},
	{IBV_QPS_SQD, IBV_QPS_RTS, {0x1, 0x1, 0x1}, {0x4C00A, 0x4400A, 0x42}},
	{IBV_QPS_SQD, IBV_QPS_SQD, {0x1, 0x1, 0x1}, {0x6EEB8, 0x44098, 0x50}},
	{IBV_QPS_SQE, IBV_QPS_RTS, {0x1, 0x1, 0x1}, {0x0, 0xA, 0x42}},
	{IBV_QPS_RESET, IBV_QPS_RESET, {0x1, 0x1, 0x1}, {0, 0, 0}},
	{IBV_QPS_ERR, IBV_QPS_ERR, {0x1, 0x1, 0x1}, {0, 0, 0}},
};

static const struct row *find_row(enum ibv_qp_state cur, enum ibv_qp_state next)
{
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (rows[i].cur == cur && rows[i].next == next)
			return &rows[i];
	return NULL;
}

static void test_table(void)
{
	for (int t = 0; t < 3; t++) {
		for (int c = IBV_QPS_RESET; c <= IBV_QPS_ERR; c++) {
			for (int n = IBV_QPS_RESET; n <= IBV_QPS_ERR; n++) {
				int req = -1, opt = -1;
				bool ok = swv_qp_transition_masks(types[t], c, n, &req, &opt);
				const struct row *r = find_row(c, n);
				/* Always valid with STATE only: any state -> RESET or ERR
				 * (RESET -> ERR included, as IB allows). */
				bool to_reset_err = n == IBV_QPS_RESET || n == IBV_QPS_ERR;
				if (r) {
					CHECK(ok);
					CHECK_EQ(req, r->req[t]);
					CHECK_EQ(opt, r->opt[t]);
				} else if (to_reset_err) {
					CHECK(ok);
					CHECK_EQ(req, IBV_QP_STATE);
					CHECK_EQ(opt, 0);
				} else {
					if (ok)
						fprintf(stderr, "type %d %d->%d unexpectedly valid\n", t, c, n);
					CHECK(!ok);
				}
			}
		}
	}
	/* The explicitly invalid ones of 6.2. */
	CHECK(swv_qp_transition_masks(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_ERR, NULL, NULL));
	CHECK(!swv_qp_transition_masks(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RTR, NULL, NULL));
	CHECK(!swv_qp_transition_masks(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RTS, NULL, NULL));
	CHECK(!swv_qp_transition_masks(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTS, NULL, NULL));
	CHECK(!swv_qp_transition_masks(IBV_QPT_RC, IBV_QPS_ERR, IBV_QPS_RTS, NULL, NULL));
	CHECK(!swv_qp_transition_masks(IBV_QPT_RC, IBV_QPS_ERR, IBV_QPS_INIT, NULL, NULL));
	CHECK(!swv_qp_transition_masks(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTR, NULL, NULL));
	CHECK(!swv_qp_transition_masks(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTR, NULL, NULL));
	CHECK(
	    !swv_qp_transition_masks(IBV_QPT_RAW_PACKET, IBV_QPS_RESET, IBV_QPS_INIT, NULL, NULL));
	CHECK(!swv_qp_transition_masks(IBV_QPT_RC, IBV_QPS_UNKNOWN, IBV_QPS_RESET, NULL, NULL));
}

static void test_check_mask(void)
{
	/* Every required bit is required; every bit outside req|opt is refused. */
	for (int t = 0; t < 3; t++) {
		for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
			const struct row *r = &rows[i];
			int req = r->req[t], opt = r->opt[t];
			CHECK_EQ(swv_qp_check_mask(types[t], r->cur, r->next, req), 0);
			/* optional bits, minus CUR_STATE where the current state forbids it */
			int all = req | opt;
			if (r->cur != IBV_QPS_RTR && r->cur != IBV_QPS_RTS && r->cur != IBV_QPS_SQD &&
			    r->cur != IBV_QPS_SQE)
				all &= ~IBV_QP_CUR_STATE;
			CHECK_EQ(swv_qp_check_mask(types[t], r->cur, r->next, all), 0);
			for (int b = 1; b < 26; b++) { /* bit 0 is IBV_QP_STATE */
				int bit = 1 << b;
				if (req & bit)
					CHECK_EQ(swv_qp_check_mask(types[t], r->cur, r->next, req & ~bit),
						 EINVAL);
				else if (!(opt & bit))
					CHECK_EQ(swv_qp_check_mask(types[t], r->cur, r->next, req | bit),
						 EINVAL);
			}
		}
	}
	/* CUR_STATE only from RTR/RTS/SQD/SQE. */
	CHECK_EQ(swv_qp_check_mask(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS,
				   IBV_QP_STATE | IBV_QP_CUR_STATE), 0);
	/* Without IBV_QP_STATE: cur -> cur with the given bits. */
	CHECK_EQ(swv_qp_check_mask(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_MIN_RNR_TIMER), 0);
	CHECK_EQ(swv_qp_check_mask(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_TIMEOUT), EINVAL);
	CHECK_EQ(swv_qp_check_mask(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_INIT, IBV_QP_ACCESS_FLAGS), 0);
	CHECK_EQ(swv_qp_check_mask(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTR, IBV_QP_ACCESS_FLAGS),
		 EINVAL);
	CHECK_EQ(swv_qp_check_mask(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RESET, 0), 0);
	/* IBV_QP_CAP and RATE_LIMIT are in no RC transition. */
	CHECK_EQ(swv_qp_check_mask(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_CAP), EINVAL);
	CHECK_EQ(swv_qp_check_mask(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_RATE_LIMIT), EINVAL);
}

/* ---- verbs on a real context ---- */

struct env {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_port_attr port;
};

static struct ibv_qp *mkqp(struct env *e, uint32_t swr, uint32_t rwr, uint32_t sge,
			   uint32_t inl, int *err)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.cap = {.max_send_wr = swr, .max_recv_wr = rwr, .max_send_sge = sge,
			.max_recv_sge = sge, .max_inline_data = inl},
		.qp_type = IBV_QPT_RC,
	};
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp(e->pd, &ia);
	*err = qp ? 0 : errno;
	return qp;
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS);
}

static int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
static int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;

static void rtr_attr(struct env *e, struct ibv_qp_attr *a, uint32_t dqpn)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTR;
	a->path_mtu = IBV_MTU_1024;
	a->dest_qp_num = dqpn;
	a->rq_psn = 0x123456;
	a->max_dest_rd_atomic = 4;
	a->min_rnr_timer = 12;
	a->ah_attr.dlid = e->port.lid;
	a->ah_attr.port_num = 1;
}

static void rts_attr(struct ibv_qp_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTS;
	a->sq_psn = 0xabcdef;
	a->timeout = 14;
	a->retry_cnt = 7;
	a->rnr_retry = 7;
	a->max_rd_atomic = 4;
}

static void test_create(struct env *e)
{
	int err;
	struct ibv_qp *qp;
	CHECK(!mkqp(e, SWV_QP_MAX_WR + 1, 1, 1, 0, &err) && err == EINVAL);
	CHECK(!mkqp(e, 1, SWV_QP_MAX_WR + 1, 1, 0, &err) && err == EINVAL);
	CHECK(!mkqp(e, 1, 1, SWV_QP_MAX_SGE + 1, 0, &err) && err == EINVAL);
	CHECK(!mkqp(e, 1, 1, 1, SWV_QP_MAX_INLINE + 1, &err) && err == EINVAL);
	qp = mkqp(e, SWV_QP_MAX_WR, SWV_QP_MAX_WR, SWV_QP_MAX_SGE, SWV_QP_MAX_INLINE, &err);
	CHECK_PTR(qp);
	CHECK_OK(ibv_destroy_qp(qp));

	/* Caps come back as provided; query reports them too. */
	struct ibv_qp_init_attr ia = {.send_cq = e->cq, .recv_cq = e->cq,
				      .cap = {.max_send_wr = 10, .max_recv_wr = 20,
					      .max_send_sge = 3, .max_recv_sge = 2,
					      .max_inline_data = 100},
				      .qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	qp = ibv_create_qp(e->pd, &ia);
	CHECK_PTR(qp);
	CHECK_EQ(ia.cap.max_send_wr, 10);
	CHECK_EQ(ia.cap.max_recv_wr, 20);
	CHECK_EQ(ia.cap.max_send_sge, 3);
	CHECK_EQ(ia.cap.max_recv_sge, 2);
	CHECK(ia.cap.max_inline_data >= 100);
	CHECK_EQ(qp->state, IBV_QPS_RESET);
	CHECK_EQ(qp->qp_type, IBV_QPT_RC);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK_OK(ibv_query_qp(qp, &qa, 0, &qi));
	CHECK_EQ(qa.qp_state, IBV_QPS_RESET);
	CHECK_EQ(qi.cap.max_send_wr, 10);
	CHECK_EQ(qi.cap.max_recv_wr, 20);
	CHECK_EQ(qi.cap.max_inline_data, ia.cap.max_inline_data);
	CHECK_EQ(qi.sq_sig_all, 1);
	CHECK(qi.send_cq == e->cq && qi.recv_cq == e->cq);
	CHECK_EQ(qi.qp_type, IBV_QPT_RC);
	CHECK(ibv_qp_to_qp_ex(qp) == NULL);
	CHECK_OK(ibv_destroy_qp(qp));

	/* UC and UD: created with the same caps; UD reports the port MTU as its path MTU
	 * and moves with the UD masks (Q_Key at INIT, nothing at RTR, SQ PSN at RTS). */
	ia.qp_type = IBV_QPT_UC;
	qp = ibv_create_qp(e->pd, &ia);
	CHECK_PTR(qp);
	CHECK_EQ(qp->qp_type, IBV_QPT_UC);
	CHECK(ia.cap.max_inline_data >= 100);
	CHECK_OK(ibv_query_qp(qp, &qa, 0, &qi));
	CHECK_EQ(qi.qp_type, IBV_QPT_UC);
	CHECK_OK(ibv_destroy_qp(qp));
	ia.qp_type = IBV_QPT_UD;
	qp = ibv_create_qp(e->pd, &ia);
	CHECK_PTR(qp);
	CHECK_EQ(qp->qp_type, IBV_QPT_UD);
	CHECK_OK(ibv_query_qp(qp, &qa, 0, &qi));
	CHECK_EQ(qi.qp_type, IBV_QPT_UD);
	CHECK_EQ(qa.path_mtu, e->port.active_mtu);
	struct ibv_qp_attr ua = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x12345678,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	CHECK_EQ(ibv_modify_qp(qp, &ua, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						IBV_QP_ACCESS_FLAGS),
		 EINVAL); /* the RC/UC mask: no Q_Key, and access flags are not UD's */
	CHECK_EQ(ibv_modify_qp(qp, &ua, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), EINVAL);
	CHECK_OK(ibv_modify_qp(qp, &ua, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						IBV_QP_QKEY));
	ua.qp_state = IBV_QPS_RTR;
	CHECK_EQ(ibv_modify_qp(qp, &ua, IBV_QP_STATE | IBV_QP_AV), EINVAL); /* no AV on UD */
	CHECK_OK(ibv_modify_qp(qp, &ua, IBV_QP_STATE));
	ua.qp_state = IBV_QPS_RTS;
	ua.sq_psn = 77;
	CHECK_EQ(ibv_modify_qp(qp, &ua, IBV_QP_STATE), EINVAL); /* SQ PSN is required */
	CHECK_OK(ibv_modify_qp(qp, &ua, IBV_QP_STATE | IBV_QP_SQ_PSN));
	CHECK_OK(ibv_query_qp(qp, &qa, 0, &qi));
	CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
	CHECK_EQ(qa.qkey, 0x12345678);
	CHECK_OK(ibv_destroy_qp(qp));
	/* Raw packet QPs are not implemented: said honestly. */
	ia.qp_type = IBV_QPT_RAW_PACKET;
	errno = 0;
	CHECK(!ibv_create_qp(e->pd, &ia) && errno == EOPNOTSUPP);
	ia.qp_type = IBV_QPT_RC;
	ia.send_cq = NULL;
	errno = 0;
	CHECK(!ibv_create_qp(e->pd, &ia) && errno == EINVAL);
	errno = 0;
	CHECK(!ibv_create_qp(NULL, &ia) && errno == EINVAL);
	CHECK(!ibv_create_qp(e->pd, NULL) && errno == EINVAL);

	/* ibv_create_qp_ex: PD only works, and with send ops (the ibv_wr_* API) too. */
	struct ibv_qp_init_attr_ex iax = {.send_cq = e->cq, .recv_cq = e->cq,
					  .cap = {.max_send_wr = 1, .max_recv_wr = 1},
					  .qp_type = IBV_QPT_RC,
					  .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = e->pd};
	qp = ibv_create_qp_ex(e->ctx, &iax);
	CHECK_PTR(qp);
	CHECK(ibv_qp_to_qp_ex(qp) == NULL); /* not created with send ops */
	CHECK_OK(ibv_destroy_qp(qp));
	iax.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	iax.send_ops_flags = IBV_QP_EX_WITH_SEND;
	qp = ibv_create_qp_ex(e->ctx, &iax);
	CHECK_PTR(qp);
	CHECK(ibv_qp_to_qp_ex(qp) == (struct ibv_qp_ex *)qp);
	CHECK_OK(ibv_destroy_qp(qp));
	/* Send ops the device does not have (TSO; atomic write on UD) are refused, and
	 * so are create flags and unknown mask bits; an XRC domain means nothing to an RC
	 * QP (only a TGT QP uses one). */
	iax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO;
	errno = 0;
	CHECK(!ibv_create_qp_ex(e->ctx, &iax) && errno == EOPNOTSUPP);
	iax.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE;
	iax.qp_type = IBV_QPT_UD;
	errno = 0;
	CHECK(!ibv_create_qp_ex(e->ctx, &iax) && errno == EOPNOTSUPP);
	iax.qp_type = IBV_QPT_RC;
	iax.send_ops_flags = IBV_QP_EX_WITH_SEND;
	iax.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	iax.create_flags = 0; /* the mask with no flag asks for nothing */
	qp = ibv_create_qp_ex(e->ctx, &iax);
	CHECK_PTR(qp);
	CHECK_OK(ibv_destroy_qp(qp));
	iax.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	errno = 0;
	CHECK(!ibv_create_qp_ex(e->ctx, &iax) && errno == EOPNOTSUPP);
	iax.create_flags = 0;
	iax.comp_mask |= IBV_QP_INIT_ATTR_XRCD;
	qp = ibv_create_qp_ex(e->ctx, &iax);
	CHECK_PTR(qp);
	CHECK_OK(ibv_destroy_qp(qp));
	iax.comp_mask = IBV_QP_INIT_ATTR_PD | (1u << 20);
	errno = 0;
	CHECK(!ibv_create_qp_ex(e->ctx, &iax) && errno == EINVAL);

	/* A PD/CQ in use cannot go away. */
	qp = mkqp(e, 1, 1, 1, 0, &err);
	CHECK_PTR(qp);
	CHECK_EQ(ibv_dealloc_pd(e->pd), EBUSY);
	CHECK_EQ(ibv_destroy_cq(e->cq), EBUSY);
	CHECK_OK(ibv_destroy_qp(qp));
}

static void test_modify(struct env *e)
{
	int err;
	struct ibv_qp *a = mkqp(e, 4, 4, 1, 0, &err), *b = mkqp(e, 4, 4, 1, 0, &err);
	CHECK_PTR(a);
	CHECK_PTR(b);
	struct ibv_qp_attr at;
	struct ibv_send_wr swr = {.opcode = IBV_WR_SEND}, *sbad;
	struct ibv_recv_wr rwr = {.wr_id = 1}, *rbad;

	/* RESET: no posting at all. */
	CHECK_EQ(ibv_post_send(a, &swr, &sbad), EINVAL);
	CHECK(sbad == &swr);
	CHECK_EQ(ibv_post_recv(a, &rwr, &rbad), EINVAL);
	CHECK(rbad == &rwr);

	/* Invalid transitions / masks. */
	rts_attr(&at);
	CHECK_EQ(ibv_modify_qp(a, &at, rts_mask), EINVAL); /* RESET -> RTS */
	at.qp_state = IBV_QPS_ERR;
	CHECK_EQ(ibv_modify_qp(a, &at, IBV_QP_STATE | IBV_QP_PORT), EINVAL); /* RESET -> ERR + */
	at.qp_state = IBV_QPS_INIT;
	CHECK_EQ(ibv_modify_qp(a, &at, IBV_QP_STATE | IBV_QP_PORT), EINVAL); /* missing bits */
	at.port_num = 2;
	CHECK_EQ(ibv_modify_qp(a, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS), EINVAL);
	at.port_num = 1;
	at.pkey_index = 1;
	CHECK_EQ(ibv_modify_qp(a, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS), EINVAL);
	CHECK_OK(to_init(a));
	CHECK_OK(to_init(b));
	CHECK_EQ(a->state, IBV_QPS_INIT);

	/* INIT: post_recv yes, post_send no. */
	CHECK_EQ(ibv_post_send(a, &swr, &sbad), EINVAL);
	CHECK_OK(ibv_post_recv(a, &rwr, &rbad));

	/* INIT -> RTR value checks: each leaves the QP in INIT. */
	rtr_attr(e, &at, b->qp_num);
	at.path_mtu = IBV_MTU_4096; /* the device is configured with mtu=2048 */
	CHECK_EQ(ibv_modify_qp(a, &at, rtr_mask), EINVAL);
	rtr_attr(e, &at, b->qp_num);
	at.path_mtu = (enum ibv_mtu)6;
	CHECK_EQ(ibv_modify_qp(a, &at, rtr_mask), EINVAL);
	rtr_attr(e, &at, b->qp_num);
	at.max_dest_rd_atomic = SWV_MAX_RD_ATOMIC + 1;
	CHECK_EQ(ibv_modify_qp(a, &at, rtr_mask), EINVAL);
	rtr_attr(e, &at, b->qp_num);
	at.min_rnr_timer = 32;
	CHECK_EQ(ibv_modify_qp(a, &at, rtr_mask), EINVAL);
	rtr_attr(e, &at, b->qp_num);
	at.ah_attr.dlid = 0; /* unroutable */
	CHECK_EQ(ibv_modify_qp(a, &at, rtr_mask), EINVAL);
	rtr_attr(e, &at, b->qp_num);
	CHECK_EQ(ibv_modify_qp(a, &at, rtr_mask | IBV_QP_ALT_PATH), EINVAL);
	CHECK_EQ(ibv_modify_qp(a, &at, rtr_mask & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
	CHECK_EQ(a->state, IBV_QPS_INIT);
	CHECK_OK(ibv_modify_qp(a, &at, rtr_mask));
	rtr_attr(e, &at, a->qp_num);
	CHECK_OK(ibv_modify_qp(b, &at, rtr_mask));

	/* RTR: still no sends. */
	CHECK_EQ(ibv_post_send(a, &swr, &sbad), EINVAL);

	/* RTR -> RTS value checks. */
	rts_attr(&at);
	at.timeout = 32;
	CHECK_EQ(ibv_modify_qp(a, &at, rts_mask), EINVAL);
	rts_attr(&at);
	at.retry_cnt = 8;
	CHECK_EQ(ibv_modify_qp(a, &at, rts_mask), EINVAL);
	rts_attr(&at);
	at.rnr_retry = 8;
	CHECK_EQ(ibv_modify_qp(a, &at, rts_mask), EINVAL);
	rts_attr(&at);
	at.max_rd_atomic = SWV_MAX_RD_ATOMIC + 1;
	CHECK_EQ(ibv_modify_qp(a, &at, rts_mask), EINVAL);
	rts_attr(&at);
	at.cur_qp_state = IBV_QPS_INIT; /* wrong idea of the current state */
	CHECK_EQ(ibv_modify_qp(a, &at, rts_mask | IBV_QP_CUR_STATE), EINVAL);
	CHECK_EQ(a->state, IBV_QPS_RTR);
	rts_attr(&at);
	at.timeout = 31; /* the largest legal value */
	CHECK_OK(ibv_modify_qp(a, &at, rts_mask));
	rts_attr(&at);
	CHECK_OK(ibv_modify_qp(b, &at, rts_mask));

	/* Query reports what was set. */
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	CHECK_OK(ibv_query_qp(a, &q, IBV_QP_STATE, &qi));
	CHECK_EQ(q.qp_state, IBV_QPS_RTS);
	CHECK_EQ(q.path_mtu, IBV_MTU_1024);
	CHECK_EQ(q.dest_qp_num, b->qp_num);
	CHECK_EQ(q.timeout, 31);
	CHECK_EQ(q.retry_cnt, 7);
	CHECK_EQ(q.rnr_retry, 7);
	CHECK_EQ(q.max_rd_atomic, 4);
	CHECK_EQ(q.max_dest_rd_atomic, 4);
	CHECK_EQ(q.min_rnr_timer, 12);
	CHECK_EQ(q.sq_psn, 0xabcdef);
	CHECK_EQ(q.qp_access_flags, IBV_ACCESS_REMOTE_WRITE);
	CHECK_EQ(q.ah_attr.dlid, e->port.lid);
	CHECK_EQ(q.port_num, 1);

	/* RTS -> RTS with an optional attribute; a required-only one is refused. */
	at.min_rnr_timer = 3;
	CHECK_OK(ibv_modify_qp(a, &at, IBV_QP_MIN_RNR_TIMER));
	at.timeout = 3;
	CHECK_EQ(ibv_modify_qp(a, &at, IBV_QP_TIMEOUT), EINVAL);

	/* post_send argument checks in RTS. */
	uint8_t buf[64];
	struct ibv_mr *mr = ibv_reg_mr(e->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(mr);
	struct ibv_sge sge[3] = {{(uintptr_t)buf, 8, mr->lkey}, {(uintptr_t)buf, 8, mr->lkey},
				 {(uintptr_t)buf, 8, mr->lkey}};
	struct ibv_send_wr w = {.wr_id = 7, .sg_list = sge, .num_sge = 2, .opcode = IBV_WR_SEND};
	CHECK_EQ(ibv_post_send(a, &w, &sbad), EINVAL); /* 2 SGEs > max_send_sge 1 */
	w.num_sge = 1;
	w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	w.wr.atomic.remote_addr = 0x1004; /* unaligned */
	CHECK_EQ(ibv_post_send(a, &w, &sbad), EINVAL);
	w.wr.atomic.remote_addr = 0x1000;
	sge[0].length = 4; /* atomics are 8 bytes */
	CHECK_EQ(ibv_post_send(a, &w, &sbad), EINVAL);
	sge[0].length = 8;
	w.opcode = IBV_WR_SEND;
	w.send_flags = IBV_SEND_INLINE;
	sge[0].length = 64; /* > max_inline_data */
	CHECK_EQ(ibv_post_send(a, &w, &sbad), EINVAL);
	sge[0].length = 8;
	w.send_flags = 0;
	w.opcode = IBV_WR_TSO; /* not an RC opcode */
	CHECK_EQ(ibv_post_send(a, &w, &sbad), EINVAL);
	w.opcode = (enum ibv_wr_opcode)99;
	CHECK_EQ(ibv_post_send(a, &w, &sbad), EINVAL);
	CHECK(sbad == &w);

	/* SQ full: 4 slots; the peer has one receive posted at most, the rest wait in
	 * RNR retries (rnr_retry 7), so nothing completes in between. */
	w.opcode = IBV_WR_RDMA_READ;
	w.wr.rdma.remote_addr = 0;
	w.wr.rdma.rkey = 0;
	w.send_flags = IBV_SEND_FENCE; /* FENCE holds every READ behind the first */
	struct ibv_send_wr chain[5];
	for (int i = 0; i < 5; i++) {
		chain[i] = w;
		chain[i].wr_id = 100 + i;
		chain[i].next = i < 4 ? &chain[i + 1] : NULL;
	}
	chain[0].send_flags = 0;
	/* post-time queue accounting: 5 > max_send_wr 4 -> the fifth is refused */
	int rc = ibv_post_send(a, chain, &sbad);
	CHECK_EQ(rc, ENOMEM);
	CHECK(sbad == &chain[4]);

	/* RTS -> ERR flushes everything queued, then RESET -> INIT works again. */
	at.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(a, &at, IBV_QP_STATE));
	CHECK_EQ(a->state, IBV_QPS_ERR);
	struct ibv_wc wc[16];
	int n = 0, got;
	uint64_t seen = 0;
	for (int tries = 0; tries < 1000 && n < 5; tries++) {
		got = ibv_poll_cq(e->cq, 16 - n, wc + n);
		CHECK(got >= 0);
		n += got;
		if (!got)
			usleep(1000);
	}
	/* 4 READs (the first may have failed remotely before the flush -- it reads
	 * rkey 0 -- either way it completes with an error) + the INIT receive. */
	CHECK_EQ(n, 5);
	for (int i = 0; i < n; i++) {
		CHECK(wc[i].status != IBV_WC_SUCCESS);
		seen |= 1ull << (wc[i].wr_id & 63);
	}
	CHECK(seen & (1ull << 1)); /* the receive */
	for (int i = 0; i < 4; i++)
		CHECK(seen & (1ull << ((100 + i) & 63)));
	/* Posting in ERR is accepted and flushed. */
	w.opcode = IBV_WR_SEND;
	w.send_flags = 0;
	w.wr_id = 200;
	CHECK_OK(ibv_post_send(a, &w, &sbad));
	rwr.wr_id = 201;
	CHECK_OK(ibv_post_recv(a, &rwr, &rbad));
	n = 0;
	for (int tries = 0; tries < 1000 && n < 2; tries++) {
		got = ibv_poll_cq(e->cq, 2 - n, wc + n);
		n += got;
	}
	CHECK_EQ(n, 2);
	CHECK_EQ(wc[0].wr_id, 200);
	CHECK_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(wc[1].wr_id, 201);
	CHECK_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(wc[1].opcode, IBV_WC_RECV);
	/* ERR -> INIT is not a transition; ERR -> RESET -> INIT is. */
	CHECK_EQ(to_init(a), EINVAL);
	at.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(a, &at, IBV_QP_STATE));
	CHECK_OK(to_init(a));
	CHECK_OK(ibv_query_qp(a, &q, IBV_QP_STATE, &qi));
	CHECK_EQ(q.qp_state, IBV_QPS_INIT);

	/* Drain anything b produced (its NAKs), then clean up. */
	usleep(20000);
	while (ibv_poll_cq(e->cq, 16, wc) > 0)
		;
	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_qp(b));
	CHECK_OK(ibv_dereg_mr(mr));
}

int main(void)
{
	test_table();
	test_check_mask();

	/* A device whose port MTU is 2048, so a 4096 path MTU must be refused. */
	setenv("SWVERBS_DEVICES", "swq0=127.0.0.1/8,mtu=2048", 1);
	struct env e = {0};
	e.ctx = swvt_open_first_device();
	CHECK_OK(ibv_query_port(e.ctx, 1, &e.port));
	CHECK_EQ(e.port.active_mtu, IBV_MTU_2048);
	e.pd = ibv_alloc_pd(e.ctx);
	CHECK_PTR(e.pd);
	e.cq = ibv_create_cq(e.ctx, 64, NULL, NULL, 0);
	CHECK_PTR(e.cq);

	test_create(&e);
	test_modify(&e);

	CHECK_OK(ibv_destroy_cq(e.cq));
	CHECK_OK(ibv_dealloc_pd(e.pd));
	CHECK_OK(ibv_close_device(e.ctx));
	return 0;
}
