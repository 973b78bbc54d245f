/*
 * swverbs' librdmacm used directly, as rdma_server/rdma_client use librdmacm: the
 * synchronous endpoint API (rdma_getaddrinfo, rdma_create_ep, rdma_get_request,
 * rdma_accept and rdma_connect without a channel) and the <rdma/rdma_verbs.h> helpers,
 * two processes. The server's accept private data names a buffer the client fills
 * with RDMA WRITE; a SEND each way; every byte checked.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"

#define LEN 4096

struct target {
	uint64_t addr;
	uint32_t rkey;
} __attribute__((packed));

static struct ibv_qp_init_attr attr(void)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	a.sq_sig_all = 1;
	return a;
}

static void fill(uint8_t *b, int seed)
{
	for (int i = 0; i < LEN; i++)
		b[i] = (uint8_t)(i * 7 + seed);
}

static int server(int ready, int unused)
{
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP}, *res;
	/* Port 0: the listener gets a free one and tells the client. */
	CHECK(rdma_getaddrinfo("127.0.0.1", "0", &hints, &res) == 0);
	struct ibv_qp_init_attr a = attr();
	struct rdma_cm_id *l, *id;
	CHECK(rdma_create_ep(&l, res, NULL, &a) == 0);
	rdma_freeaddrinfo(res);
	CHECK(rdma_listen(l, 1) == 0);
	uint16_t port = ntohs(rdma_get_src_port(l));
	CHECK(port != 0);
	CHECK(write(ready, &port, sizeof(port)) == sizeof(port));
	CHECK(rdma_get_request(l, &id) == 0);
	CHECK(id->qp && id->recv_cq && id->send_cq);
	static uint8_t msg[LEN], wbuf[LEN], expect[LEN];
	struct ibv_mr *mr = rdma_reg_msgs(id, msg, LEN), *wmr = rdma_reg_write(id, wbuf, LEN);
	CHECK(mr && wmr);
	CHECK(rdma_post_recv(id, NULL, msg, LEN, mr) == 0);
	struct target t = {(uint64_t)(uintptr_t)wbuf, wmr->rkey};
	struct rdma_conn_param cp = {.private_data = &t,
				     .private_data_len = sizeof(t),
				     .responder_resources = 1,
				     .initiator_depth = 1,
				     .rnr_retry_count = 7};
	CHECK(rdma_accept(id, &cp) == 0);
	struct ibv_wc wc;
	CHECK(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
	      wc.byte_len == LEN);
	fill(expect, 1);
	CHECK(!memcmp(msg, expect, LEN)); /* the SEND */
	fill(expect, 2);
	CHECK(!memcmp(wbuf, expect, LEN)); /* the WRITE, ordered before the SEND */
	fill(msg, 3);
	CHECK(rdma_post_send(id, NULL, msg, LEN, mr, 0) == 0);
	CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS);
	CHECK(rdma_disconnect(id) == 0);
	CHECK(rdma_dereg_mr(mr) == 0 && rdma_dereg_mr(wmr) == 0);
	rdma_destroy_ep(id);
	rdma_destroy_ep(l);
	return 0;
}

int main(void)
{
	struct swvt_child srv;
	swvt_child_start(&srv, server);
	uint16_t pn;
	CHECK(read(srv.up, &pn, sizeof(pn)) == sizeof(pn));
	char port[16];
	snprintf(port, sizeof(port), "%u", pn);
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *res;
	CHECK(rdma_getaddrinfo("127.0.0.1", port, &hints, &res) == 0);
	struct ibv_qp_init_attr a = attr();
	struct rdma_cm_id *id;
	CHECK(rdma_create_ep(&id, res, NULL, &a) == 0);
	rdma_freeaddrinfo(res);
	static uint8_t msg[LEN], wsrc[LEN], expect[LEN];
	struct ibv_mr *mr = rdma_reg_msgs(id, msg, LEN), *smr = rdma_reg_msgs(id, wsrc, LEN);
	CHECK(mr && smr);
	CHECK(rdma_post_recv(id, NULL, msg, LEN, mr) == 0);
	struct rdma_conn_param cp = {
	    .responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	CHECK(rdma_connect(id, &cp) == 0);
	/* A synchronous id keeps its last event: ESTABLISHED, with the accept's data. */
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED);
	struct target t;
	CHECK(id->event->param.conn.private_data_len >= sizeof(t));
	memcpy(&t, id->event->param.conn.private_data, sizeof(t));
	fill(wsrc, 2);
	CHECK(rdma_post_write(id, NULL, wsrc, LEN, smr, 0, t.addr, t.rkey) == 0);
	fill(msg, 1);
	struct ibv_mr *m2 = mr;
	static uint8_t out[LEN];
	memcpy(out, msg, LEN);
	struct ibv_mr *omr = rdma_reg_msgs(id, out, LEN);
	CHECK(omr);
	CHECK(rdma_post_send(id, NULL, out, LEN, omr, 0) == 0);
	struct ibv_wc wc;
	CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS);
	CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS);
	CHECK(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
	      wc.byte_len == LEN);
	fill(expect, 3);
	CHECK(!memcmp(msg, expect, LEN));
	CHECK(rdma_disconnect(id) == 0);
	CHECK(rdma_dereg_mr(m2) == 0 && rdma_dereg_mr(smr) == 0 && rdma_dereg_mr(omr) == 0);
	rdma_destroy_ep(id);
	swvt_child_wait(&srv);
	printf("ok: synchronous endpoints, accept private data, WRITE + SEND both ways verified\n");
	return 0;
}
