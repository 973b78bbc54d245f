/*
 * Shared helpers of the SRQ multi-process tests (tests/mp/test_srq_*.c), public API
 * only. The harness connects one QP pair per side; these tests add their own set of
 * RC pairs: on the receiving side N QPs that all take their receive WQEs from one SRQ
 * and complete on one receive CQ, on the sending side N plain QPs, pair i connected
 * to pair i. The harness buffer and MR carry the data.
 */
#ifndef SWV_TEST_SRQ_UTIL_H
#define SWV_TEST_SRQ_UTIL_H

#include <infiniband/verbs.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SRQT_MAX_QP 8

struct srqt {
	struct swvt *t;
	int nqp;
	bool receiver;
	struct ibv_srq *srq; /* receiver only */
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp[SRQT_MAX_QP];
	uint32_t lpsn[SRQT_MAX_QP];
	struct {
		uint32_t qpn[SRQT_MAX_QP], psn[SRQT_MAX_QP];
	} remote;
};

/* Create the QPs (in RESET) and, on the receiver, the SRQ (max_wr srq_wr, 2 SGEs). */
static inline void srqt_create(struct srqt *s, struct swvt *t, int nqp, bool receiver,
			       uint32_t srq_wr)
{
	memset(s, 0, sizeof(*s));
	s->t = t;
	s->nqp = nqp;
	s->receiver = receiver;
	s->scq = ibv_create_cq(t->ctx, 1024, NULL, NULL, 0);
	s->rcq = ibv_create_cq(t->ctx, 1024, NULL, NULL, 0);
	CHECK(s->scq && s->rcq);
	if (receiver) {
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = srq_wr, .max_sge = 2}};
		s->srq = ibv_create_srq(t->pd, &sa);
		CHECK_PTR(s->srq);
		CHECK_EQ(sa.attr.max_wr, srq_wr);
	}
	for (int i = 0; i < nqp; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = s->scq, .recv_cq = s->rcq, .srq = s->srq, .qp_type = IBV_QPT_RC,
			.cap = {.max_send_wr = 256, .max_recv_wr = receiver ? 0 : 16,
				.max_send_sge = 2, .max_recv_sge = 2},
		};
		s->qp[i] = ibv_create_qp(t->pd, &ia);
		CHECK_PTR(s->qp[i]);
		if (receiver)
			CHECK_EQ(ia.cap.max_recv_wr, 0); /* the SRQ is its receive queue */
		s->lpsn[i] = ((uint32_t)lrand48() & 0xffffff);
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = t->opts.port,
					.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
							   IBV_ACCESS_REMOTE_WRITE};
		CHECK_OK(ibv_modify_qp(s->qp[i], &a,
				       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS));
	}
}

/* Swap QPNs/PSNs with the peer, then RTR and RTS every QP. rnr_retry[i] (NULL: 7,
 * infinite) is the sender's; the receiver's min_rnr_timer is opts.min_rnr_timer. */
static inline void srqt_connect(struct srqt *s, const uint8_t *rnr_retry)
{
	struct swvt *t = s->t;
	uint32_t mine[2 * SRQT_MAX_QP], theirs[2 * SRQT_MAX_QP];
	for (int i = 0; i < s->nqp; i++) {
		mine[i] = s->qp[i]->qp_num;
		mine[SRQT_MAX_QP + i] = s->lpsn[i];
	}
	if (t->role == 0) {
		swvt_send(t, mine, sizeof(mine));
		swvt_recv(t, theirs, sizeof(theirs));
	} else {
		swvt_recv(t, theirs, sizeof(theirs));
		swvt_send(t, mine, sizeof(mine));
	}
	for (int i = 0; i < s->nqp; i++) {
		s->remote.qpn[i] = theirs[i];
		s->remote.psn[i] = theirs[SRQT_MAX_QP + i];
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = t->opts.path_mtu,
			.dest_qp_num = s->remote.qpn[i], .rq_psn = s->remote.psn[i],
			.max_dest_rd_atomic = 1, .min_rnr_timer = t->opts.min_rnr_timer,
		};
		swvt_fill_ah_attr(t, &a.ah_attr);
		CHECK_OK(ibv_modify_qp(s->qp[i], &a,
				       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					       IBV_QP_MIN_RNR_TIMER));
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = s->lpsn[i];
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = rnr_retry ? rnr_retry[i] : 7;
		a.max_rd_atomic = 1;
		CHECK_OK(ibv_modify_qp(s->qp[i], &a,
				       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					       IBV_QP_MAX_QP_RD_ATOMIC));
	}
	swvt_barrier(t);
}

/* Index of the local QP with this number, or -1. */
static inline int srqt_index(const struct srqt *s, uint32_t qpn)
{
	for (int i = 0; i < s->nqp; i++)
		if (s->qp[i]->qp_num == qpn)
			return i;
	return -1;
}

/* Post one SRQ receive of len bytes at off in the harness buffer, split over 2 SGEs. */
static inline void srqt_post(struct srqt *s, uint64_t wr_id, uint64_t off, uint32_t len)
{
	uint32_t half = len / 2;
	struct ibv_sge sge[2] = {
		{(uintptr_t)s->t->buf + off, half, s->t->mr->lkey},
		{(uintptr_t)s->t->buf + off + half, len - half, s->t->mr->lkey},
	};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = sge, .num_sge = 2}, *bad = NULL;
	CHECK_OK(ibv_post_srq_recv(s->srq, &wr, &bad));
}

/* Post one signaled SEND of len bytes from off on QP i. */
static inline void srqt_send(struct srqt *s, int i, uint64_t wr_id, uint64_t off, uint32_t len)
{
	struct ibv_sge sge = {(uintptr_t)s->t->buf + off, len, s->t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;
	CHECK_OK(ibv_post_send(s->qp[i], &wr, &bad));
}

/* Wait up to ms for an async event; false on timeout. Acks it. */
static inline bool srqt_event(struct swvt *t, int ms, struct ibv_async_event *out)
{
	struct pollfd p = {.fd = t->ctx->async_fd, .events = POLLIN};
	int r = poll(&p, 1, ms);
	CHECK(r >= 0);
	if (r == 0)
		return false;
	struct ibv_async_event ev;
	CHECK_OK(ibv_get_async_event(t->ctx, &ev) ? errno : 0);
	*out = ev;
	ibv_ack_async_event(&ev);
	return true;
}

static inline void srqt_destroy(struct srqt *s)
{
	if (s->srq)
		CHECK_EQ(ibv_destroy_srq(s->srq), EBUSY); /* its QPs still exist */
	for (int i = 0; i < s->nqp; i++)
		CHECK_OK(ibv_destroy_qp(s->qp[i]));
	if (s->srq)
		CHECK_OK(ibv_destroy_srq(s->srq));
	CHECK_OK(ibv_destroy_cq(s->scq));
	CHECK_OK(ibv_destroy_cq(s->rcq));
}

#endif
