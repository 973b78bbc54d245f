/*
 * A disconnect never overtakes what the QP already did -- libfabric's RxM finalize
 * (fi_pingpong -e rdm): each side sends a last message, and the side that has the
 * other's closes at once. The survivor polls its CQ and, when it finds it empty,
 * reads its (non-blocking) event channel; on DISCONNECTED it destroys the QP at once,
 * so whatever it had not polled by then is lost (reported flushed, or never
 * received).
 *
 * The closing side (the client here) runs with the fault injector holding every
 * packet its QPs send for 5 s (SWVERBS_FAULT delay=100): its ACK of the server's
 * SEND and its own SEND are still held when it calls rdma_disconnect, as an ACK
 * overtaken by the CM's DREQ, which travels on a socket of its own. The server must
 * have polled both its SEND's completion and the client's SEND before it gets the
 * DISCONNECTED. Before the fix the DREQ left first and the server got the event with
 * nothing completed. Now the DREQ leaves after what the QP sent (an adapter sends
 * them in this order on the one path), and the DISCONNECTED is handed out after what
 * had arrived is processed and the CQ has been polled once more.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"

#define LEN	  512
#define WR_SEND	  1
#define WR_RECV	  2
#define HOLD_SPEC "seed=7,delay=100,delay_us=5000000"

struct side {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id; /* the connected id */
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t sbuf[LEN], rbuf[LEN];
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

static void make_qp(struct side *s, struct rdma_cm_id *id)
{
	s->cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	CHECK(s->cq);
	struct ibv_qp_init_attr a = {
	    .send_cq = s->cq,
	    .recv_cq = s->cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
	CHECK(rdma_create_qp(id, NULL, &a) == 0);
	s->mr = ibv_reg_mr(id->pd, s->sbuf, 2 * LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(s->mr);
	struct ibv_sge sge = {(uintptr_t)s->rbuf, LEN, s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = WR_RECV, .sg_list = &sge, .num_sge = 1}, *bad;
	CHECK(ibv_post_recv(id->qp, &wr, &bad) == 0);
}

static void post_send(struct side *s, int seed)
{
	for (int i = 0; i < LEN; i++)
		s->sbuf[i] = (uint8_t)(i * 11 + seed);
	struct ibv_sge sge = {(uintptr_t)s->sbuf, LEN, s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = WR_SEND,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	CHECK(ibv_post_send(s->id->qp, &wr, &bad) == 0);
}

static struct rdma_conn_param param(void)
{
	struct rdma_conn_param p = {
	    .responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	return p;
}

/* The surviving side. */
static int server(int ready, int posted)
{
	static struct side s;
	struct rdma_cm_id *l;
	s.ch = rdma_create_event_channel();
	CHECK(s.ch);
	CHECK(rdma_create_id(s.ch, &l, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in sin = {.sin_family = AF_INET};
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&sin) == 0);
	CHECK(rdma_listen(l, 1) == 0);
	uint16_t port = ntohs(rdma_get_src_port(l));
	CHECK(write(ready, &port, sizeof(port)) == sizeof(port));
	struct rdma_cm_event *e = expect(&s, RDMA_CM_EVENT_CONNECT_REQUEST);
	s.id = e->id;
	CHECK(rdma_ack_cm_event(e) == 0);
	make_qp(&s, s.id);
	struct rdma_conn_param p = param();
	CHECK(rdma_accept(s.id, &p) == 0);
	CHECK(rdma_ack_cm_event(expect(&s, RDMA_CM_EVENT_ESTABLISHED)) == 0);

	char c;
	CHECK(read(posted, &c, 1) == 1); /* the client's receive is posted */
	int fl = fcntl(s.ch->fd, F_GETFL);
	CHECK(fl >= 0 && fcntl(s.ch->fd, F_SETFL, fl | O_NONBLOCK) == 0);
	post_send(&s, 1);
	/* RxM's progress loop: the CQ first; only when it is empty, the event channel. */
	bool sent = false, got = false;
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(s.cq, 1, &wc);
		CHECK(n >= 0);
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "server: wr_id %llu: %s\n",
					(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
				return 1;
			}
			sent |= wc.wr_id == WR_SEND;
			got |= wc.wr_id == WR_RECV && wc.byte_len == LEN;
			continue;
		}
		struct rdma_cm_event *e;
		if (rdma_get_cm_event(s.ch, &e)) {
			CHECK(errno == EAGAIN);
			continue;
		}
		CHECK(e->event == RDMA_CM_EVENT_DISCONNECTED);
		CHECK(rdma_ack_cm_event(e) == 0);
		break;
	}
	/* On the event, the connection goes at once (what was not polled goes with it). */
	rdma_destroy_qp(s.id);
	if (!sent || !got) {
		fprintf(stderr, "server: DISCONNECTED before %s%s%s\n",
			sent ? "" : "its SEND's completion", !sent && !got ? " and " : "",
			got ? "" : "the client's SEND");
		return 1;
	}
	for (int i = 0; i < LEN; i++)
		CHECK(s.rbuf[i] == (uint8_t)(i * 11 + 2));
	CHECK(ibv_dereg_mr(s.mr) == 0);
	CHECK(ibv_destroy_cq(s.cq) == 0);
	CHECK(rdma_destroy_id(s.id) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(s.ch);
	return 0;
}

/* The closing side: everything its QP sends is held by the fault injector. */
static int client(uint16_t port, int posted)
{
	static struct side s;
	CHECK(setenv("SWVERBS_FAULT", HOLD_SPEC, 1) == 0);
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
	struct rdma_conn_param p = param();
	CHECK(rdma_connect(s.id, &p) == 0);
	CHECK(rdma_ack_cm_event(expect(&s, RDMA_CM_EVENT_ESTABLISHED)) == 0);
	char c = 1;
	CHECK(write(posted, &c, 1) == 1);

	/* The server's SEND arrives; its ACK is held. */
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(s.cq, 1, &wc)) == 0)
		;
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == WR_RECV);
	for (int i = 0; i < LEN; i++)
		CHECK(s.rbuf[i] == (uint8_t)(i * 11 + 1));
	/* Our last message, held too; then we close without waiting for it. */
	post_send(&s, 2);
	CHECK(rdma_disconnect(s.id) == 0);
	CHECK(rdma_ack_cm_event(expect(&s, RDMA_CM_EVENT_DISCONNECTED)) == 0);
	rdma_destroy_qp(s.id);
	CHECK(ibv_dereg_mr(s.mr) == 0);
	CHECK(ibv_destroy_cq(s.cq) == 0);
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
	CHECK(client(port, srv.down) == 0);
	swvt_child_wait(&srv);
	printf("ok: the held ACK and SEND were completed and polled before DISCONNECTED\n");
	return 0;
}
