/*
 * The librdmacm calls libfabric's verbs provider makes, in the order it makes them:
 * rdma_getaddrinfo with no node and no service (the addresses in the hints only, as
 * fi_getinfo with dest_addr asks), and rdma_create_ep without a channel followed by
 * rdma_migrate_id to the EQ's channel, then a connection and rdma_destroy_id. Each
 * failed before: getaddrinfo answered EINVAL, and destroy waited forever for the
 * ROUTE_RESOLVED event the synchronous id still held (alarm() turns that into a failure).
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

static struct sockaddr_in sin4(uint16_t port)
{
	struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(port)};
	s.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return s;
}

static void getaddrinfo_from_hints(void)
{
	struct rdma_addrinfo *res;
	errno = 0;
	CHECK(rdma_getaddrinfo(NULL, NULL, NULL, &res) == -1 && errno == EINVAL);

	struct sockaddr_in dst = sin4(4791), src = sin4(0);
	struct rdma_addrinfo h = {.ai_family = AF_INET,
				  .ai_qp_type = IBV_QPT_RC,
				  .ai_port_space = RDMA_PS_TCP,
				  .ai_dst_addr = (struct sockaddr *)&dst,
				  .ai_dst_len = sizeof(dst),
				  .ai_src_addr = (struct sockaddr *)&src,
				  .ai_src_len = sizeof(src)};
	CHECK(rdma_getaddrinfo(NULL, NULL, &h, &res) == 0);
	CHECK(res->ai_family == AF_INET && res->ai_qp_type == IBV_QPT_RC &&
	      res->ai_port_space == RDMA_PS_TCP && !(res->ai_flags & RAI_PASSIVE));
	CHECK(res->ai_dst_len == sizeof(dst) && !memcmp(res->ai_dst_addr, &dst, sizeof(dst)));
	CHECK(res->ai_src_len == sizeof(src) && !memcmp(res->ai_src_addr, &src, sizeof(src)));
	rdma_freeaddrinfo(res);

	/* A passive lookup of the source address alone (the listener's side). */
	struct rdma_addrinfo p = {.ai_flags = RAI_PASSIVE,
				  .ai_port_space = RDMA_PS_TCP,
				  .ai_src_addr = (struct sockaddr *)&src,
				  .ai_src_len = sizeof(src)};
	CHECK(rdma_getaddrinfo(NULL, NULL, &p, &res) == 0);
	CHECK((res->ai_flags & RAI_PASSIVE) && !res->ai_dst_addr && res->ai_src_len == sizeof(src));
	rdma_freeaddrinfo(res);

	/* With a node, a source address in the hints is kept for the active side. */
	CHECK(rdma_getaddrinfo("127.0.0.1", "4791", &h, &res) == 0);
	CHECK(res->ai_dst_addr && res->ai_src_len == sizeof(src));
	rdma_freeaddrinfo(res);
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t)
{
	struct rdma_cm_event *e;
	CHECK(rdma_get_cm_event(ch, &e) == 0);
	if (e->event != t) {
		fprintf(stderr, "got %s, wanted %s\n", rdma_event_str(e->event), rdma_event_str(t));
		exit(1);
	}
	return e;
}

static struct ibv_qp_init_attr qp_attr(void)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	return a;
}

static int server(int ready, int unused)
{
	alarm(120); /* not inherited: a client that failed leaves no server waiting */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_id *l;
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in a = sin4(0);
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&a) == 0);
	CHECK(rdma_listen(l, 1) == 0);
	uint16_t port = ntohs(rdma_get_src_port(l));
	CHECK(write(ready, &port, sizeof(port)) == sizeof(port));
	struct rdma_cm_event *e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *id = e->id;
	struct ibv_qp_init_attr qa = qp_attr();
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	CHECK(rdma_accept(id, &cp) == 0);
	rdma_ack_cm_event(e);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}

int main(void)
{
	alarm(120);
	getaddrinfo_from_hints();

	struct swvt_child srv;
	swvt_child_start(&srv, server);
	uint16_t pn;
	CHECK(read(srv.up, &pn, sizeof(pn)) == sizeof(pn));

	/* libfabric: fi_getinfo with dest_addr, then fi_endpoint -> rdma_create_ep with
	 * no PD and no QP attributes, then fi_ep_bind(eq) -> rdma_migrate_id. */
	struct sockaddr_in dst = sin4(pn);
	struct rdma_addrinfo h = {.ai_family = AF_INET,
				  .ai_port_space = RDMA_PS_TCP,
				  .ai_dst_addr = (struct sockaddr *)&dst,
				  .ai_dst_len = sizeof(dst)},
			     *res;
	CHECK(rdma_getaddrinfo(NULL, NULL, &h, &res) == 0);
	struct rdma_cm_id *id;
	CHECK(rdma_create_ep(&id, res, NULL, NULL) == 0);
	rdma_freeaddrinfo(res);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	CHECK(rdma_migrate_id(id, ch) == 0);
	CHECK(id->channel == ch && !id->event);

	struct ibv_qp_init_attr qa = qp_attr();
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	struct rdma_conn_param cp = {
	    .responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	CHECK(rdma_connect(id, &cp) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
	CHECK(rdma_disconnect(id) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0); /* hung here: the migrated id's old event */
	rdma_destroy_event_channel(ch);

	swvt_child_wait(&srv);
	puts("test_cm_libfabric: OK");
	return 0;
}
