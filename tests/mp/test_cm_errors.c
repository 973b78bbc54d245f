/*
 * swverbs' librdmacm, the connection errors as the kernel reports them: a port nobody
 * listens on (REJECTED, status 8 = invalid service ID; UNREACHABLE for UD), an address
 * no swverbs device has (ADDR_ERROR; bind: ENODEV), a consumer reject with private
 * data (REJECTED 28), a listener destroyed with a request pending (REJECTED), a peer
 * killed while connected (DISCONNECTED), and a port bound again while a connection
 * accepted on it lives. Links the library directly, as a program built against it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* Waits (bounded: a lost event must fail the test, not hang it) for the next event. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int timeout_ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&p, 1, timeout_ms) == 1);
	struct rdma_cm_event *e;
	CHECK(rdma_get_cm_event(ch, &e) == 0);
	return e;
}

static void expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type, int status)
{
	struct rdma_cm_event *e = next_event(ch, 60000);
	if (e->event != type || e->status != status) {
		fprintf(stderr, "expected %s status %d, got %s status %d\n", rdma_event_str(type),
			status, rdma_event_str(e->event), e->status);
		exit(1);
	}
	CHECK(rdma_ack_cm_event(e) == 0);
}

static struct sockaddr_in addr(const char *ip, uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* A UDP port nobody has bound a moment ago. */
static uint16_t unused_port(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = addr("127.0.0.1", 0);
	socklen_t l = sizeof(a);
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&a, &l) == 0);
	close(fd);
	return ntohs(a.sin_port);
}

static struct ibv_qp_init_attr qp_attr(enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_type = t;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	return a;
}

/* An active id resolved towards 127.0.0.1:port, with a QP. */
static struct rdma_cm_id *active(struct rdma_event_channel *ch, uint16_t port,
				 enum rdma_port_space ps)
{
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, ps) == 0);
	struct sockaddr_in dst = addr("127.0.0.1", port);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	CHECK(rdma_resolve_route(id, 2000) == 0);
	expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	struct ibv_qp_init_attr a = qp_attr(ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC);
	CHECK(rdma_create_qp(id, NULL, &a) == 0);
	return id;
}

static struct rdma_cm_id *listener(struct rdma_event_channel *ch, uint16_t port)
{
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in a = addr("127.0.0.1", port);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0);
	CHECK(rdma_listen(id, 8) == 0);
	return id;
}

static void test_refused(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_id *id = active(ch, unused_port(), RDMA_PS_TCP);
	CHECK(rdma_connect(id, NULL) == 0);
	expect(ch, RDMA_CM_EVENT_REJECTED, 8);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);

	id = active(ch, unused_port(), RDMA_PS_UDP);
	CHECK(rdma_connect(id, NULL) == 0);
	expect(ch, RDMA_CM_EVENT_UNREACHABLE, 1);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("ok: refused port -> REJECTED 8 (RC), UNREACHABLE 1 (UD)\n");
}

static void test_unknown_addr(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	/* TEST-NET-1: no swverbs device has it, none routes to it. */
	struct sockaddr_in dst = addr("192.0.2.1", 7471);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	struct rdma_cm_event *e = next_event(ch, 60000);
	CHECK(e->event == RDMA_CM_EVENT_ADDR_ERROR && e->status < 0);
	rdma_ack_cm_event(e);
	CHECK(rdma_resolve_route(id, 2000) == -1 && errno == EINVAL);
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&dst) == -1 && errno == ENODEV);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("ok: unknown address -> ADDR_ERROR, bind ENODEV\n");
}

static void test_reject_and_pending(void)
{
	struct rdma_event_channel *lch = rdma_create_event_channel(),
				  *ch = rdma_create_event_channel();
	uint16_t port = unused_port();
	struct rdma_cm_id *l = listener(lch, port);
	struct rdma_cm_id *id = active(ch, port, RDMA_PS_TCP);
	struct rdma_conn_param cp = {.private_data = "hello",
				     .private_data_len = 6,
				     .responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7};
	CHECK(rdma_connect(id, &cp) == 0);
	struct rdma_cm_event *e = next_event(lch, 60000);
	CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST && e->listen_id == l);
	CHECK(e->param.conn.private_data_len >= 6 &&
	      !memcmp(e->param.conn.private_data, "hello", 6));
	struct rdma_cm_id *child = e->id;
	CHECK(rdma_reject(child, "no", 3) == 0);
	rdma_ack_cm_event(e);
	CHECK(rdma_destroy_id(child) == 0);
	e = next_event(ch, 60000);
	CHECK(e->event == RDMA_CM_EVENT_REJECTED && e->status == 28);
	CHECK(e->param.conn.private_data_len >= 3 && !memcmp(e->param.conn.private_data, "no", 3));
	rdma_ack_cm_event(e);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);

	/* A request the application never took: the listener's destroy rejects it. */
	id = active(ch, port, RDMA_PS_TCP);
	CHECK(rdma_connect(id, NULL) == 0);
	struct pollfd p = {.fd = lch->fd, .events = POLLIN};
	CHECK(poll(&p, 1, 60000) == 1);
	CHECK(rdma_destroy_id(l) == 0);
	e = next_event(ch, 60000);
	CHECK(e->event == RDMA_CM_EVENT_REJECTED);
	rdma_ack_cm_event(e);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	rdma_destroy_event_channel(lch);
	printf("ok: reject with private data -> REJECTED 28; listener destroyed -> REJECTED\n");
}

/* Connects to a forked server on port; the server's connection, then the port bound
 * again there; the server is killed and the client must see DISCONNECTED. */
static void test_peer_killed(void)
{
	uint16_t port = unused_port();
	int ready[2];
	CHECK(pipe(ready) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(ready[0]);
		struct rdma_event_channel *lch = rdma_create_event_channel();
		struct rdma_cm_id *l = listener(lch, port);
		CHECK(write(ready[1], "L", 1) == 1);
		struct rdma_cm_event *e = next_event(lch, 60000);
		CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST);
		struct rdma_cm_id *c = e->id;
		rdma_ack_cm_event(e);
		struct ibv_qp_init_attr a = qp_attr(IBV_QPT_RC);
		CHECK(rdma_create_qp(c, NULL, &a) == 0);
		CHECK(rdma_accept(c, NULL) == 0);
		expect(lch, RDMA_CM_EVENT_ESTABLISHED, 0);
		/* The kernel frees a port with its listener, though connections accepted
		 * on it live on: binding it again must work. */
		CHECK(rdma_destroy_id(l) == 0);
		l = listener(lch, port);
		CHECK(write(ready[1], "E", 1) == 1);
		for (;;)
			pause();
	}
	close(ready[1]);
	char b;
	CHECK(read(ready[0], &b, 1) == 1 && b == 'L');
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = active(ch, port, RDMA_PS_TCP);
	CHECK(rdma_connect(id, NULL) == 0);
	expect(ch, RDMA_CM_EVENT_ESTABLISHED, 0);
	CHECK(read(ready[0], &b, 1) == 1);
	CHECK(b == 'E'); /* else the server's child asserted: its rebind failed */
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
	expect(ch, RDMA_CM_EVENT_DISCONNECTED, 0);
	CHECK(rdma_disconnect(id) == 0);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("ok: port bound again under a live connection; peer killed -> DISCONNECTED\n");
}

int main(void)
{
	/* Fork before the library's CM thread exists. */
	test_peer_killed();
	test_refused();
	test_unknown_addr();
	test_reject_and_pending();
	return 0;
}
