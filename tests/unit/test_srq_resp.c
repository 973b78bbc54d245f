/*
 * SRQ on the responder, deterministic: real objects (context, PD, MR, CQ, SRQ, QPs
 * made through the verbs), request packets handed to swv_resp_rx() directly under the
 * QP lock, as the progress thread does, so each step happens exactly when the test
 * says. Checks: a multi-packet SEND keeps its WQE while another QP takes the next one;
 * wc.qp_num names the receiving QP; data lands in the right buffers; counters count
 * RECV on that QP; an empty SRQ answers RNR and a later post recovers; the limit event
 * fires once when the count drops below the limit, and again after re-arming; a UC
 * message abandoned with an SRQ WQE completes it in error (rxe class E); RDMA WRITE
 * with immediate consumes an SRQ WQE; a QP entering ERR flushes only the WQE it holds
 * (the SRQ keeps the rest for other QPs) and reports Last WQE Reached once.
 * Then the async-event lifetime rules (core/async.h): an unread event about a
 * destroyed CQ/QP/SRQ is withdrawn (the fd stops being readable, nothing is returned
 * later), and destroy waits until a read event is acked.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cntr.h"
#include "inproc.h"
#include "core/async.h"
#include "core/context.h"
#include "core/qp.h"
#include "core/srq.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/responder.h"

#define BUF_SIZE (64 * 1024)
#define PSN0     100

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_srq *srq;
static struct ibv_mr *mr;
static uint8_t *buf;
static struct ibv_qp *peer; /* only an address for the ACKs/NAKs the responder sends */
static uint16_t lid;

static struct ibv_qp *mk_qp(enum ibv_qp_type type, struct ibv_comp_cntr *cntr)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = type,
		.cap = {.max_send_wr = 4, .max_send_sge = 1},
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK_PTR(qp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS));
	if (cntr) {
		struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_RECV};
		CHECK_OK(ibv_qp_attach_comp_cntr(qp, cntr, &at));
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp_num;
	a.rq_psn = PSN0;
	a.ah_attr.dlid = lid;
	a.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (type == IBV_QPT_RC) {
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 1;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	CHECK_OK(ibv_modify_qp(qp, &a, mask));
	return qp;
}

static void rx(struct ibv_qp *ibqp, uint8_t op, uint32_t psn, const void *payload, uint32_t len,
	       uint64_t va, uint32_t imm)
{
	struct swv_qp *qp = to_swv_qp(ibqp);
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = (uint8_t)((qp->type == IBV_QPT_UC ? SWV_OP_UC : SWV_OP_RC) | op);
	p.psn = psn;
	p.dqpn = qp->qpn;
	p.payload = payload;
	p.paylen = len;
	if (op == SWV_OP_WRITE_ONLY_IMM) {
		p.reth_va = va;
		p.reth_rkey = mr->rkey;
		p.reth_len = len;
		p.imm = imm;
	}
	pthread_mutex_lock(&qp->lock);
	swv_resp_rx(qp, &p);
	pthread_mutex_unlock(&qp->lock);
}

static void post(uint64_t wr_id, uint32_t off)
{
	/* two SGEs of 2 KiB each: a message spreads across both */
	struct ibv_sge sge[2] = {{(uintptr_t)buf + off, 2048, mr->lkey},
				 {(uintptr_t)buf + off + 2048, 2048, mr->lkey}};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = sge, .num_sge = 2}, *bad;
	CHECK_OK(ibv_post_srq_recv(srq, &wr, &bad));
}

static struct ibv_wc poll1(void)
{
	struct ibv_wc wc;
	int n = ibv_poll_cq(cq, 1, &wc);
	if (n != 1) {
		fprintf(stderr, "expected one completion, poll returned %d\n", n);
		exit(1);
	}
	return wc;
}

static void expect_wc(uint64_t wr_id, struct ibv_qp *qp, enum ibv_wc_status st,
		      enum ibv_wc_opcode opc, uint32_t len)
{
	struct ibv_wc wc = poll1();
	if (wc.wr_id != wr_id || wc.qp_num != qp->qp_num || wc.status != st) {
		fprintf(stderr, "wc wr_id %llu qp %#x status %d, expected %llu %#x %d\n",
			(unsigned long long)wc.wr_id, wc.qp_num, wc.status,
			(unsigned long long)wr_id, qp->qp_num, st);
		exit(1);
	}
	if (st == IBV_WC_SUCCESS) {
		CHECK_EQ(wc.opcode, opc);
		CHECK_EQ(wc.byte_len, len);
	}
}

static void expect_no_wc(void)
{
	struct ibv_wc wc;
	CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);
}

static bool async_ready(void)
{
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	int r = poll(&p, 1, 0);
	CHECK(r >= 0);
	return r == 1;
}

/* The next async event (async_fd is non-blocking here); false if none. */
static bool get_event(struct ibv_async_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	if (ibv_get_async_event(ctx, ev)) {
		CHECK_EQ(errno, EAGAIN);
		return false;
	}
	return true;
}

static struct ibv_async_event next_event(void)
{
	struct ibv_async_event ev;
	CHECK(get_event(&ev));
	return ev;
}

static void expect_event(enum ibv_event_type t, const void *elem)
{
	CHECK(async_ready());
	struct ibv_async_event ev = next_event();
	CHECK_EQ(ev.event_type, t);
	if (t == IBV_EVENT_SRQ_LIMIT_REACHED)
		CHECK(ev.element.srq == elem);
	else
		CHECK(ev.element.qp == elem);
	ibv_ack_async_event(&ev);
}

static void expect_no_event(void)
{
	struct ibv_async_event ev;
	CHECK(!async_ready());
	CHECK(!get_event(&ev));
}

static void fill(uint8_t *p, uint32_t len, uint8_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed + i * 7 + (i >> 8));
}

/* ---- destroy waiting for an ack, in a thread ---- */

struct destroyer {
	pthread_t th;
	int (*fn)(void *);
	void *obj;
	atomic_int done, rc;
};
static void *destroy_main(void *arg)
{
	struct destroyer *d = arg;
	atomic_store(&d->rc, d->fn(d->obj));
	atomic_store(&d->done, 1);
	return NULL;
}
static int destroy_qp(void *o) { return ibv_destroy_qp(o); }
static int destroy_srq(void *o) { return ibv_destroy_srq(o); }
static int destroy_cq(void *o) { return ibv_destroy_cq(o); }

/* Start destroy(obj) in a thread, check it is still waiting after 200 ms (an event
 * about obj was read and not acked), then ack and check it finishes with 0. */
static void destroy_waits_for_ack(int (*fn)(void *), void *obj, struct ibv_async_event *unacked)
{
	struct destroyer d = {.fn = fn, .obj = obj};
	CHECK_OK(pthread_create(&d.th, NULL, destroy_main, &d));
	usleep(200 * 1000);
	CHECK_EQ(atomic_load(&d.done), 0);
	ibv_ack_async_event(unacked);
	CHECK_OK(pthread_join(d.th, NULL));
	CHECK_EQ(atomic_load(&d.done), 1);
	CHECK_EQ(atomic_load(&d.rc), 0);
}

int main(void)
{
	ctx = swvt_open_first_device();
	struct ibv_port_attr pa;
	CHECK_OK(ibv_query_port(ctx, 1, &pa));
	lid = pa.lid;
	int fl = fcntl(ctx->async_fd, F_GETFL);
	CHECK_OK(fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK));

	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	CHECK(pd && cq);
	buf = aligned_alloc(4096, BUF_SIZE);
	CHECK_PTR(buf);
	memset(buf, 0, BUF_SIZE);
	mr = ibv_reg_mr(pd, buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK_PTR(mr);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 2}};
	srq = ibv_create_srq(pd, &sa);
	CHECK_PTR(srq);
	struct ibv_qp_init_attr pia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = {.max_send_wr = 1, .max_recv_wr = 1,
					       .max_send_sge = 1, .max_recv_sge = 1}};
	peer = ibv_create_qp(pd, &pia);
	CHECK_PTR(peer);
	struct ibv_comp_cntr_init_attr cia = {0};
	struct ibv_comp_cntr *cA = ibv_create_comp_cntr(ctx, &cia);
	struct ibv_comp_cntr *cB = ibv_create_comp_cntr(ctx, &cia);
	CHECK(cA && cB);
	struct ibv_qp *A = mk_qp(IBV_QPT_RC, cA), *B = mk_qp(IBV_QPT_RC, cB);
	struct ibv_qp *U = mk_qp(IBV_QPT_UC, NULL);
	struct swv_srq *S = to_swv_srq(srq);
	uint32_t pA = PSN0, pB = PSN0, pU = PSN0;

	static uint8_t a[2648], b[200], u[1324], w[100];
	fill(a, sizeof(a), 1);
	fill(b, sizeof(b), 2);
	fill(u, sizeof(u), 3);
	fill(w, sizeof(w), 4);

	/* 1. A's three-packet SEND holds WQE 1 while B's one-packet SEND takes WQE 2. */
	post(1, 0);
	post(2, 4096);
	post(3, 8192);
	rx(A, SWV_OP_SEND_FIRST, pA++, a, 1024, 0, 0);
	expect_no_wc();
	CHECK_EQ(swv_srq_count(S), 2);
	rx(B, SWV_OP_SEND_ONLY, pB++, b, sizeof(b), 0, 0);
	expect_wc(2, B, IBV_WC_SUCCESS, IBV_WC_RECV, sizeof(b));
	rx(A, SWV_OP_SEND_MIDDLE, pA++, a + 1024, 1024, 0, 0);
	expect_no_wc();
	rx(A, SWV_OP_SEND_LAST, pA++, a + 2048, 600, 0, 0);
	expect_wc(1, A, IBV_WC_SUCCESS, IBV_WC_RECV, sizeof(a));
	CHECK(memcmp(buf, a, sizeof(a)) == 0);
	CHECK(memcmp(buf + 4096, b, sizeof(b)) == 0);
	CHECK_EQ(swvt_cntr_read(cA), 1);
	CHECK_EQ(swvt_cntr_read(cB), 1);

	/* 2. Limit: armed at 4 with 5 posted; the take leaving 3 fires it, once. */
	for (uint64_t i = 4; i <= 7; i++)
		post(i, (uint32_t)(4096 * i));
	CHECK_EQ(swv_srq_count(S), 5);
	struct ibv_srq_attr lim = {.srq_limit = 4};
	CHECK_OK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT));
	expect_no_event();
	rx(B, SWV_OP_SEND_ONLY, pB++, b, 10, 0, 0); /* takes 3, leaves 4: not below */
	expect_wc(3, B, IBV_WC_SUCCESS, IBV_WC_RECV, 10);
	expect_no_event();
	rx(B, SWV_OP_SEND_ONLY, pB++, b, 10, 0, 0); /* leaves 3 < 4 */
	expect_wc(4, B, IBV_WC_SUCCESS, IBV_WC_RECV, 10);
	expect_event(IBV_EVENT_SRQ_LIMIT_REACHED, srq);
	expect_no_event();
	struct ibv_srq_attr q;
	CHECK_OK(ibv_query_srq(srq, &q));
	CHECK_EQ(q.srq_limit, 0); /* one-shot: disarmed */
	rx(B, SWV_OP_SEND_ONLY, pB++, b, 10, 0, 0); /* leaves 2: no new event */
	expect_wc(5, B, IBV_WC_SUCCESS, IBV_WC_RECV, 10);
	expect_no_event();
	lim.srq_limit = 2; /* re-arm (2 posted: not below yet) */
	CHECK_OK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT));
	rx(B, SWV_OP_SEND_ONLY, pB++, b, 10, 0, 0); /* leaves 1 < 2 */
	expect_wc(6, B, IBV_WC_SUCCESS, IBV_WC_RECV, 10);
	expect_event(IBV_EVENT_SRQ_LIMIT_REACHED, srq);
	expect_no_event();
	CHECK_EQ(swvt_cntr_read(cB), 5);

	/* 3. RNR: the last WQE goes to A, then the SRQ is empty. */
	rx(A, SWV_OP_SEND_ONLY, pA++, a, 64, 0, 0);
	expect_wc(7, A, IBV_WC_SUCCESS, IBV_WC_RECV, 64);
	uint64_t rnr0 = to_swv_qp(A)->resp->stats.rnr_naks;
	rx(A, SWV_OP_SEND_ONLY, pA, a, 64, 0, 0);
	expect_no_wc();
	CHECK_EQ(to_swv_qp(A)->resp->stats.rnr_naks, rnr0 + 1);
	CHECK_EQ(to_swv_qp(A)->resp->epsn, pA); /* the requester resends this PSN */
	CHECK_EQ(to_swv_qp(A)->state, IBV_QPS_RTR);
	post(8, 0);
	rx(A, SWV_OP_SEND_ONLY, pA++, a, 64, 0, 0); /* the resend finds a WQE */
	expect_wc(8, A, IBV_WC_SUCCESS, IBV_WC_RECV, 64);
	CHECK_EQ(to_swv_qp(A)->resp->stats.rnr_naks, rnr0 + 1);

	/* 4. UC: a message cut by a PSN gap gives its SRQ WQE back as an error
	 * completion on that QP (rxe class E); the QP carries on. */
	post(9, 4096);
	post(10, 8192);
	rx(U, SWV_OP_SEND_FIRST, pU++, u, 1024, 0, 0); /* takes 9 */
	pU += 3;                                       /* packets lost */
	rx(U, SWV_OP_SEND_FIRST, pU++, u, 1024, 0, 0); /* abandons 9, takes 10 */
	expect_wc(9, U, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, 0);
	rx(U, SWV_OP_SEND_LAST, pU++, u + 1024, 300, 0, 0);
	expect_wc(10, U, IBV_WC_SUCCESS, IBV_WC_RECV, sizeof(u));
	CHECK(memcmp(buf + 8192, u, sizeof(u)) == 0);
	CHECK_EQ(to_swv_qp(U)->state, IBV_QPS_RTR);

	/* 5. RDMA WRITE with immediate consumes an SRQ WQE on the QP it came in on. */
	post(11, 12288);
	rx(A, SWV_OP_WRITE_ONLY_IMM, pA++, w, sizeof(w), (uintptr_t)buf + 32768, htonl(0x1234));
	struct ibv_wc wc = poll1();
	CHECK_EQ(wc.wr_id, 11);
	CHECK_EQ(wc.qp_num, A->qp_num);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(wc.byte_len, sizeof(w));
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	CHECK_EQ(ntohl(wc.imm_data), 0x1234);
	CHECK(memcmp(buf + 32768, w, sizeof(w)) == 0);
	CHECK_EQ(swvt_cntr_read(cA), 4);

	/* 6. A enters ERR while holding WQE 12 (SEND in progress): 12 is flushed on A,
	 * 13 stays in the SRQ and B gets it; Last WQE Reached is reported once. */
	post(12, 16384);
	post(13, 20480);
	rx(A, SWV_OP_SEND_FIRST, pA++, a, 1024, 0, 0);
	CHECK_EQ(swv_srq_count(S), 1);
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(A, &err, IBV_QP_STATE));
	wc = poll1();
	CHECK_EQ(wc.wr_id, 12);
	CHECK_EQ(wc.qp_num, A->qp_num);
	CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
	expect_no_wc();
	CHECK_EQ(swv_srq_count(S), 1);
	expect_event(IBV_EVENT_QP_LAST_WQE_REACHED, A);
	CHECK_OK(ibv_modify_qp(A, &err, IBV_QP_STATE)); /* already in ERR: no new event */
	expect_no_event();
	rx(A, SWV_OP_SEND_ONLY, pA++, a, 10, 0, 0); /* a QP in ERR takes nothing */
	CHECK_EQ(swv_srq_count(S), 1);
	rx(B, SWV_OP_SEND_ONLY, pB++, b, 10, 0, 0);
	expect_wc(13, B, IBV_WC_SUCCESS, IBV_WC_RECV, 10);
	CHECK_EQ(swvt_cntr_read(cA), 4);
	CHECK_EQ(swvt_cntr_read_err(cA), 1); /* the flushed WQE, on the QP that held it */
	CHECK_EQ(swvt_cntr_read(cB), 6);
	CHECK_EQ(swvt_cntr_read_err(cB), 0);

	/* 7. Async events outliving their objects (core/async.h). */
	/* 7a. unread event about a QP that is destroyed: withdrawn with it */
	CHECK_OK(ibv_modify_qp(B, &err, IBV_QP_STATE));
	CHECK(async_ready());
	CHECK_OK(ibv_destroy_qp(B));
	expect_no_event(); /* not readable any more, and nothing to get */
	/* 7b. an event read and not acked: destroy waits for the ack */
	CHECK_OK(ibv_modify_qp(U, &err, IBV_QP_STATE));
	struct ibv_async_event ev = next_event();
	CHECK_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
	CHECK(ev.element.qp == U);
	destroy_waits_for_ack(destroy_qp, U, &ev);
	/* 7c. the same for an SRQ (its limit event) */
	struct ibv_qp *C = mk_qp(IBV_QPT_RC, NULL);
	post(14, 0);
	post(15, 4096);
	lim.srq_limit = 2;
	CHECK_OK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT));
	rx(C, SWV_OP_SEND_ONLY, PSN0, b, 10, 0, 0);
	expect_wc(14, C, IBV_WC_SUCCESS, IBV_WC_RECV, 10);
	ev = next_event();
	CHECK_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
	CHECK(ev.element.srq == srq);
	CHECK_OK(ibv_destroy_qp(C));
	CHECK_OK(ibv_destroy_qp(A));
	CHECK_OK(ibv_destroy_qp(peer));
	destroy_waits_for_ack(destroy_srq, srq, &ev);
	/* 7d. and for CQs (CQ_ERR, raised here directly): unread -> withdrawn,
	 * read -> destroy waits for the ack; events of other objects are untouched */
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_cq *cq3 = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(cq2 && cq3);
	swv_async_event(to_swv_ctx(ctx), IBV_EVENT_CQ_ERR, cq2);
	swv_async_event(to_swv_ctx(ctx), IBV_EVENT_PORT_ACTIVE, (void *)(uintptr_t)1);
	swv_async_event(to_swv_ctx(ctx), IBV_EVENT_CQ_ERR, cq2);
	swv_async_event(to_swv_ctx(ctx), IBV_EVENT_CQ_ERR, cq3);
	CHECK_OK(ibv_destroy_cq(cq2));
	ev = next_event();
	CHECK_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
	CHECK_EQ(ev.element.port_num, 1);
	ibv_ack_async_event(&ev);
	ev = next_event();
	CHECK_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
	CHECK(ev.element.cq == cq3);
	expect_no_event();
	destroy_waits_for_ack(destroy_cq, cq3, &ev);

	CHECK_OK(ibv_destroy_comp_cntr(cA));
	CHECK_OK(ibv_destroy_comp_cntr(cB));
	CHECK_OK(ibv_dereg_mr(mr));
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	free(buf);
	printf("test_srq_resp: OK\n");
	return 0;
}
