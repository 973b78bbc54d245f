/*
 * An rdma_cm connection whose QPs are the application's own, as pyverbs'
 * test_rdmacm_async_traffic_external_qp makes it: each side creates its CQ and QP on
 * cm_id->pd (librdmacm gives every id its device's PD), moves the QP itself with
 * rdma_init_qp_attr -- the passive side before rdma_accept, the active side after
 * CONNECT_RESPONSE, then rdma_establish -- and names it by conn_param.qp_num. The
 * attributes the passive side gets before its accept come from the REQ, as the
 * kernel's CM gives them: the peer's retry and RNR retry counts and its depths (with
 * zeros there, the passive side's first SEND to a receiver that had not posted yet
 * ended at once in RNR_RETRY_EXC_ERR). Then messages both ways, every byte checked.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"

#define LEN	   1024
#define MSGS	   10
#define RETRY	   5
#define RNR_RETRY  5
#define RESOURCES  1
#define INIT_DEPTH 1

struct side {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t buf[2 * LEN]; /* receive into the first half, send from the second */
};

static struct rdma_cm_event *expect(struct side *s, enum rdma_cm_event_type t)
{
	struct rdma_cm_event *e;
	CHECK(rdma_get_cm_event(s->ch, &e) == 0);
	if (e->event != t) {
		fprintf(stderr, "event %s, expected %s\n", rdma_event_str(e->event),
			rdma_event_str(t));
		exit(1);
	}
	return e;
}

/* The CQ, QP and MR on the id's own PD, as pyverbs makes them: QP(cmid.pd, ...). */
static void make_qp(struct side *s, struct rdma_cm_id *id)
{
	CHECK(id->pd != NULL);
	CHECK(id->pd->context == id->verbs);
	s->cq = ibv_create_cq(id->verbs, 2 * MSGS, NULL, NULL, 0);
	CHECK(s->cq);
	struct ibv_qp_init_attr a = {
	    .send_cq = s->cq,
	    .recv_cq = s->cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	s->qp = ibv_create_qp(id->pd, &a);
	CHECK(s->qp);
	s->mr = ibv_reg_mr(id->pd, s->buf, 2 * LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(s->mr);
}

/* INIT, RTR, RTS with what rdma_init_qp_attr answers; the RTS attributes must be the
 * connection's (both sides asked for RETRY and RNR_RETRY, depth 1 each way). */
static void move_qp(struct side *s, struct rdma_cm_id *id)
{
	static const enum ibv_qp_state st[] = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS};
	for (unsigned i = 0; i < 3; i++) {
		struct ibv_qp_attr qa;
		int mask = 0;
		memset(&qa, 0, sizeof(qa));
		qa.qp_state = st[i];
		CHECK(rdma_init_qp_attr(id, &qa, &mask) == 0);
		if (st[i] == IBV_QPS_INIT)
			CHECK(qa.qp_access_flags & IBV_ACCESS_REMOTE_READ);
		if (st[i] == IBV_QPS_RTR) {
			CHECK((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && qa.max_dest_rd_atomic == 1);
			/* the kernel CM's RNR NAK timer: 0 = 655.36 ms */
			CHECK((mask & IBV_QP_MIN_RNR_TIMER) && qa.min_rnr_timer == 0);
		}
		if (st[i] == IBV_QPS_RTS) {
			CHECK((mask & IBV_QP_RETRY_CNT) && qa.retry_cnt == RETRY);
			CHECK((mask & IBV_QP_RNR_RETRY) && qa.rnr_retry == RNR_RETRY);
			CHECK((mask & IBV_QP_MAX_QP_RD_ATOMIC) && qa.max_rd_atomic == 1);
		}
		CHECK(ibv_modify_qp(s->qp, &qa, mask) == 0);
	}
}

static struct rdma_conn_param param(struct side *s)
{
	struct rdma_conn_param p = {.responder_resources = RESOURCES,
				    .initiator_depth = INIT_DEPTH,
				    .retry_count = RETRY,
				    .rnr_retry_count = RNR_RETRY,
				    .qp_num = s->qp->qp_num};
	return p;
}

static void post_recv(struct side *s)
{
	struct ibv_sge sge = {(uintptr_t)s->buf, LEN, s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
	CHECK(ibv_post_recv(s->qp, &wr, &bad) == 0);
}

static void post_send(struct side *s, int seed)
{
	for (int i = 0; i < LEN; i++)
		s->buf[LEN + i] = (uint8_t)(i * 13 + seed);
	struct ibv_sge sge = {(uintptr_t)(s->buf + LEN), LEN, s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 2,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	CHECK(ibv_post_send(s->qp, &wr, &bad) == 0);
}

static void wait_wc(struct side *s, uint64_t wr_id)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0)
		;
	CHECK(n == 1);
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id) {
		fprintf(stderr, "wr_id %llu: %s\n", (unsigned long long)wc.wr_id,
			ibv_wc_status_str(wc.status));
		exit(1);
	}
	if (wr_id == 1)
		CHECK(wc.byte_len == LEN);
}

static void check_buf(struct side *s, int seed)
{
	for (int i = 0; i < LEN; i++)
		CHECK(s->buf[i] == (uint8_t)(i * 13 + seed));
}

static void teardown(struct side *s, struct rdma_cm_id *id)
{
	CHECK(ibv_dereg_mr(s->mr) == 0);
	CHECK(ibv_destroy_qp(s->qp) == 0);
	CHECK(ibv_destroy_cq(s->cq) == 0);
	CHECK(rdma_destroy_id(id) == 0);
}

static int server(int ready, int go)
{
	static struct side s;
	s.ch = rdma_create_event_channel();
	CHECK(s.ch);
	CHECK(rdma_create_id(s.ch, &s.id, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in sin = {.sin_family = AF_INET};
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(rdma_bind_addr(s.id, (struct sockaddr *)&sin) == 0);
	CHECK(rdma_listen(s.id, 1) == 0);
	uint16_t port = ntohs(rdma_get_src_port(s.id));
	CHECK(write(ready, &port, sizeof(port)) == sizeof(port));
	struct rdma_cm_event *e = expect(&s, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *child = e->id;
	CHECK(e->param.conn.qp_num != 0);
	CHECK(rdma_ack_cm_event(e) == 0);
	make_qp(&s, child);
	move_qp(&s, child); /* before the accept, as pyverbs does */
	struct rdma_conn_param p = param(&s);
	CHECK(rdma_accept(child, &p) == 0);
	e = expect(&s, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(rdma_ack_cm_event(e) == 0);

	post_recv(&s);
	char c = 1;
	CHECK(write(ready, &c, 1) == 1);
	for (int i = 0; i < MSGS; i++) {
		wait_wc(&s, 1);
		check_buf(&s, 2 * i);
		post_recv(&s);
		post_send(&s, 2 * i + 1);
		wait_wc(&s, 2);
	}
	CHECK(read(go, &c, 1) == 1); /* the client has the last reply */
	CHECK(rdma_disconnect(child) == 0);
	e = expect(&s, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_ack_cm_event(e) == 0);
	teardown(&s, child);
	CHECK(rdma_destroy_id(s.id) == 0);
	rdma_destroy_event_channel(s.ch);
	return 0;
}

int main(void)
{
	struct swvt_child srv;
	swvt_child_start(&srv, server);
	uint16_t port;
	CHECK(read(srv.up, &port, sizeof(port)) == sizeof(port));

	static struct side s;
	s.ch = rdma_create_event_channel();
	CHECK(s.ch);
	CHECK(rdma_create_id(s.ch, &s.id, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(port)};
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(rdma_resolve_addr(s.id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(rdma_ack_cm_event(expect(&s, RDMA_CM_EVENT_ADDR_RESOLVED)) == 0);
	CHECK(rdma_resolve_route(s.id, 2000) == 0);
	CHECK(rdma_ack_cm_event(expect(&s, RDMA_CM_EVENT_ROUTE_RESOLVED)) == 0);
	make_qp(&s, s.id);
	struct rdma_conn_param p = param(&s);
	CHECK(rdma_connect(s.id, &p) == 0);
	struct rdma_cm_event *e = expect(&s, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(e->param.conn.qp_num != 0);
	CHECK(rdma_ack_cm_event(e) == 0);
	move_qp(&s, s.id);
	CHECK(rdma_establish(s.id) == 0);

	char c;
	CHECK(read(srv.up, &c, 1) == 1); /* the server's first receive is posted */
	/* Each receive is posted before the SEND it answers (pyverbs posts it after its
	 * SEND completed, which leaves the reply to RNR retries: timing-dependent). */
	for (int i = 0; i < MSGS; i++) {
		post_recv(&s);
		post_send(&s, 2 * i);
		wait_wc(&s, 2);
		wait_wc(&s, 1);
		check_buf(&s, 2 * i + 1);
	}
	CHECK(write(srv.down, &c, 1) == 1);
	e = expect(&s, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_ack_cm_event(e) == 0);
	teardown(&s, s.id);
	rdma_destroy_event_channel(s.ch);
	swvt_child_wait(&srv);
	printf("ok: external QPs moved with rdma_init_qp_attr (passive before accept), "
	       "%d messages each way verified\n",
	       MSGS);
	return 0;
}
