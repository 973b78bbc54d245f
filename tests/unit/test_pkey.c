/*
 * P_Key enforcement on receive, over the real UDP path. The device is given the P_Key
 * table {0xffff, 0x7fff} (full and limited member of the default partition). The test
 * plays the connected peer itself: a plain UDP socket whose port the QP's dest QPN
 * names, so crafted packets come from exactly the address and port the QP accepts.
 * For RC and UC WRITEs, UD SENDs, and the responses (READ response, ACK) an RC
 * requester waits for, a packet with a P_Key outside the QP's partition -- 0x0000,
 * another partition (0x1234), or limited (0x7fff) at a limited QP -- is dropped and
 * counted (per QP, and in ibv_query_port's bad_pkey_cntr) without executing anything,
 * while the same packet with a matching P_Key is executed. Packets swverbs sends carry
 * the P_Key at the QP's pkey_index.
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "core/qp.h"
#include "inproc.h"
#include "net/addr.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "util/clock.h"

#define IDX_FULL    0 /* 0xffff */
#define IDX_LIMITED 1 /* 0x7fff */
#define PEER_SLOT   1

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static uint8_t *buf;
static int peer; /* the connected peer: a plain UDP socket */
static uint16_t peer_port;

static uint32_t peer_qpn(void)
{
	return swv_qpn_make(peer_port, PEER_SLOT);
}

static void open_peer(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	struct timeval tv = {.tv_sec = 10};

	peer = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(peer >= 0);
	CHECK_OK(bind(peer, (struct sockaddr *)&a, sizeof(a)));
	CHECK_OK(getsockname(peer, (struct sockaddr *)&a, &len));
	CHECK_OK(setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	peer_port = ntohs(a.sin_port);
}

/* Build p with BTH P_Key pkey (the builder would turn 0 into 0xffff, so the field is
 * written by hand before the CRC) and send it from the peer socket to qp. */
static void peer_send(struct ibv_qp *qp, struct swv_pkt *p, uint16_t pkey, const void *payload)
{
	uint8_t d[SWV_MAX_HDR_LEN + 256 + SWV_MAX_TAIL_LEN];
	CHECK(p->paylen <= 256);
	p->dqpn = qp->qp_num;
	size_t h = swv_pkt_build_hdr(d, p);
	CHECK(h > 0);
	d[2] = (uint8_t)(pkey >> 8);
	d[3] = (uint8_t)pkey;
	if (p->paylen)
		memcpy(d + h, payload, p->paylen);
	size_t t = swv_pkt_build_tail(d, h, d + h, p->paylen, d + h + p->paylen);
	CHECK(t > 0);
	struct sockaddr_in to = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons(swv_qpn_port(qp->qp_num))};
	size_t n = h + p->paylen + t;
	CHECK_EQ(sendto(peer, d, n, 0, (struct sockaddr *)&to, sizeof(to)), (ssize_t)n);
}

/* The next packet swverbs sent to the peer (fails after 10 s), UC flow control
 * (credit for the peer) skipped. */
static void peer_recv(struct swv_pkt *p, uint8_t *d, size_t size)
{
	do {
		ssize_t n = recv(peer, d, size, 0);
		CHECK(n > 0);
		CHECK_OK(swv_pkt_parse(d, (size_t)n, p));
	} while (p->opcode == SWV_OP_FLOW_CONTROL);
}

/* Nothing but flow control waiting at the peer. */
static void peer_expect_nothing(void)
{
	uint8_t d[512];
	struct swv_pkt p;
	ssize_t n;
	while ((n = recv(peer, d, sizeof(d), MSG_DONTWAIT)) > 0) {
		CHECK_OK(swv_pkt_parse(d, (size_t)n, &p));
		CHECK_EQ(p.opcode, SWV_OP_FLOW_CONTROL);
	}
	CHECK_EQ(n, -1);
}

/* Take what the QP resent before the peer's answer reached it (a tail-loss probe of a
 * request already answered: the requester may resend it at any time before the ACK,
 * and a loaded machine makes that likely): each must be a request of this QP with a
 * PSN the test answered. Called after the QP is destroyed, so nothing more comes. */
static void peer_drain_resends(uint32_t last_psn)
{
	uint8_t d[512];
	struct swv_pkt p;
	ssize_t n;
	while ((n = recv(peer, d, sizeof(d), MSG_DONTWAIT)) > 0) {
		CHECK_OK(swv_pkt_parse(d, (size_t)n, &p));
		if (p.opcode == SWV_OP_FLOW_CONTROL)
			continue;
		CHECK(p.opcode == (SWV_OP_RC | SWV_OP_SEND_ONLY) ||
		      p.opcode == (SWV_OP_RC | SWV_OP_READ_REQUEST));
		CHECK(p.psn <= last_psn);
	}
	CHECK_EQ(n, -1);
}

static uint32_t port_bad_pkey(void)
{
	struct ibv_port_attr pa;
	CHECK_OK(ibv_query_port(ctx, 1, &pa));
	return pa.bad_pkey_cntr;
}

/* Bounded wait for the QP's P_Key drop count to reach want (the progress thread or a
 * poll pass receives the packet some time after sendto). */
static void wait_bad_pkey(struct ibv_qp *qp, uint64_t want)
{
	_Atomic uint64_t *c = &to_swv_qp(qp)->rx_bad_pkey;
	struct ibv_wc wc;
	uint64_t until = swv_now_ns() + 10000000000ull;
	while (atomic_load(c) < want) {
		CHECK(swv_now_ns() < until);
		CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0); /* also runs a receive pass */
		usleep(100);
	}
	CHECK_EQ(atomic_load(c), want);
}

static struct ibv_qp *mk_qp(enum ibv_qp_type type, uint16_t pkey_index)
{
	struct ibv_qp_init_attr ia = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .qp_type = type,
	    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK_PTR(qp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = pkey_index, .port_num = 1};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (type == IBV_QPT_UD) {
		a.qkey = 0x11111111;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				    (type == IBV_QPT_RC ? IBV_ACCESS_REMOTE_READ : 0);
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	CHECK_OK(ibv_modify_qp(qp, &a, mask));
	return qp;
}

/* INIT -> RTR (-> RTS) connected to the peer socket; PSNs start at 0. */
static void connect_qp(struct ibv_qp *qp, enum ibv_qp_type type, bool rts)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
				.path_mtu = IBV_MTU_1024,
				.dest_qp_num = peer_qpn(),
				.max_dest_rd_atomic = 1,
				.min_rnr_timer = 1};
	int mask = IBV_QP_STATE;
	if (type != IBV_QPT_UD) {
		swvt_local_ah_attr(ctx, &a.ah_attr);
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	}
	if (type == IBV_QPT_RC)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK_OK(ibv_modify_qp(qp, &a, mask));
	if (!rts)
		return;
	/* timeout 0: no ACK timer, so nothing is retransmitted while the test waits */
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTS, .max_rd_atomic = 1};
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (type == IBV_QPT_RC)
		mask |=
		    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	CHECK_OK(ibv_modify_qp(qp, &r, mask));
}

struct bad_key {
	uint16_t pkey;
	const char *why;
};

/* RC or UC RDMA WRITE_ONLY at a QP with pkey_index idx: every bad key is dropped and
 * counted, the buffer stays untouched (and RC sends no ACK); then a matching key is
 * executed (and RC ACKs it with MSN 1 -- nothing else was executed -- carrying the
 * QP's own P_Key). */
static void test_write(enum ibv_qp_type type, uint16_t idx, const struct bad_key *bad,
		       unsigned nbad, uint16_t good)
{
	struct ibv_qp *qp = mk_qp(type, idx);
	connect_qp(qp, type, false);
	uint16_t own = idx == IDX_FULL ? 0xffff : 0x7fff;
	uint8_t tr = type == IBV_QPT_RC ? SWV_OP_RC : SWV_OP_UC;
	uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8}, zero[8] = {0};
	struct swv_pkt p = {.opcode = tr | SWV_OP_WRITE_ONLY,
			    .ackreq = true,
			    .psn = 0,
			    .reth_va = (uintptr_t)buf,
			    .reth_rkey = mr->rkey,
			    .reth_len = sizeof(data),
			    .paylen = sizeof(data)};
	memset(buf, 0, 64);
	uint32_t port0 = port_bad_pkey();

	for (unsigned i = 0; i < nbad; i++) {
		peer_send(qp, &p, bad[i].pkey, data);
		wait_bad_pkey(qp, i + 1);
		if (memcmp(buf, zero, sizeof(zero))) {
			fprintf(stderr, "P_Key %#x (%s) executed\n", bad[i].pkey, bad[i].why);
			exit(1);
		}
		CHECK_EQ(port_bad_pkey(), port0 + i + 1);
	}
	peer_expect_nothing(); /* no ACK or NAK for a dropped packet */
	CHECK_EQ(atomic_load(&to_swv_qp(qp)->rx_dropped), 0);

	peer_send(qp, &p, good, data);
	if (type == IBV_QPT_RC) {
		uint8_t d[256];
		struct swv_pkt ack;
		peer_recv(&ack, d, sizeof(d));
		CHECK_EQ(ack.opcode, SWV_OP_RC | SWV_OP_ACK);
		CHECK_EQ(ack.aeth_syndrome & 0xe0, 0); /* ACK (any credit count), not a NAK */
		CHECK_EQ(ack.psn, 0);
		CHECK_EQ(ack.aeth_msn, 1);
		CHECK_EQ(ack.pkey, own);
		CHECK_EQ(ack.dqpn, peer_qpn());
	} else {
		uint64_t until = swv_now_ns() + 10000000000ull;
		while (memcmp(buf, data, sizeof(data))) {
			CHECK(swv_now_ns() < until);
			usleep(100);
		}
	}
	CHECK(!memcmp(buf, data, sizeof(data)));
	CHECK_EQ(atomic_load(&to_swv_qp(qp)->rx_bad_pkey), nbad);
	CHECK_OK(ibv_destroy_qp(qp));
}

/* UD SEND_ONLY from the peer's port (DETH source QPN names it): bad keys give no
 * receive completion, a matching key does. */
static void test_ud(uint16_t idx, const struct bad_key *bad, unsigned nbad, uint16_t good)
{
	struct ibv_qp *qp = mk_qp(IBV_QPT_UD, idx);
	connect_qp(qp, IBV_QPT_UD, true);
	struct ibv_sge sge = {(uintptr_t)buf, 256, mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *bw;
	CHECK_OK(ibv_post_recv(qp, &rw, &bw));
	uint8_t data[16] = "partitioned";
	struct swv_pkt p = {.opcode = SWV_OP_UD | SWV_OP_SEND_ONLY,
			    .deth_qkey = 0x11111111,
			    .deth_sqpn = peer_qpn(),
			    .paylen = sizeof(data)};
	struct ibv_wc wc;

	for (unsigned i = 0; i < nbad; i++) {
		peer_send(qp, &p, bad[i].pkey, data);
		wait_bad_pkey(qp, i + 1); /* fails on a completion */
	}
	peer_send(qp, &p, good, data);
	uint64_t until = swv_now_ns() + 10000000000ull;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		CHECK(swv_now_ns() < until);
		usleep(100);
	}
	CHECK_EQ(n, 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 7);
	CHECK_EQ(wc.byte_len, 40 + sizeof(data));
	CHECK(!memcmp(buf + 40, data, sizeof(data)));
	CHECK_EQ(atomic_load(&to_swv_qp(qp)->rx_bad_pkey), nbad);
	CHECK_OK(ibv_destroy_qp(qp));
}

/* RC requester: its READ request and SEND carry the QP's P_Key; a READ response
 * and an ACK with a bad key are dropped (no completion, nothing placed), the same
 * responses with a matching key complete the work requests. */
static void test_responses(uint16_t idx, uint16_t bad_key, uint16_t good)
{
	struct ibv_qp *qp = mk_qp(IBV_QPT_RC, idx);
	connect_qp(qp, IBV_QPT_RC, true);
	uint16_t own = idx == IDX_FULL ? 0xffff : 0x7fff;
	uint8_t d[512];
	struct swv_pkt req, p;
	struct ibv_wc wc;
	struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_READ,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bw;
	peer_expect_nothing();
	wr.wr.rdma.remote_addr = 0x10000;
	wr.wr.rdma.rkey = 0x1234;
	memset(buf, 0, 64);

	CHECK_OK(ibv_post_send(qp, &wr, &bw));
	peer_recv(&req, d, sizeof(d));
	CHECK_EQ(req.opcode, SWV_OP_RC | SWV_OP_READ_REQUEST);
	CHECK_EQ(req.pkey, own);
	CHECK_EQ(req.psn, 0);

	uint8_t data[8] = {9, 8, 7, 6, 5, 4, 3, 2};
	p = (struct swv_pkt){.opcode = SWV_OP_RC | SWV_OP_READ_RESP_ONLY,
			     .psn = 0,
			     .aeth_syndrome = 0,
			     .aeth_msn = 1,
			     .paylen = sizeof(data)};
	peer_send(qp, &p, bad_key, data);
	wait_bad_pkey(qp, 1);
	CHECK_EQ(buf[0], 0);
	peer_send(qp, &p, good, data);
	uint64_t until = swv_now_ns() + 10000000000ull;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		CHECK(swv_now_ns() < until);
		usleep(100);
	}
	CHECK_EQ(n, 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
	CHECK(!memcmp(buf, data, sizeof(data)));

	/* a SEND, ACKed first with the bad key, then with the good one */
	wr = (struct ibv_send_wr){.wr_id = 2,
				  .sg_list = &sge,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED};
	CHECK_OK(ibv_post_send(qp, &wr, &bw));
	do /* past resends of the READ request answered late (peer_drain_resends) */
		peer_recv(&req, d, sizeof(d));
	while (req.opcode == (SWV_OP_RC | SWV_OP_READ_REQUEST) && req.psn == 0);
	CHECK_EQ(req.opcode, SWV_OP_RC | SWV_OP_SEND_ONLY);
	CHECK_EQ(req.pkey, own);
	CHECK_EQ(req.psn, 1);
	p = (struct swv_pkt){.opcode = SWV_OP_RC | SWV_OP_ACK, .psn = 1, .aeth_msn = 2};
	peer_send(qp, &p, bad_key, NULL);
	wait_bad_pkey(qp, 2); /* fails on a completion */
	peer_send(qp, &p, good, NULL);
	until = swv_now_ns() + 10000000000ull;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		CHECK(swv_now_ns() < until);
		usleep(100);
	}
	CHECK_EQ(n, 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 2);
	CHECK_EQ(atomic_load(&to_swv_qp(qp)->rx_bad_pkey), 2);
	CHECK_OK(ibv_destroy_qp(qp));
	peer_drain_resends(1);
}

static void test_table(void)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	__be16 k;

	CHECK_OK(ibv_query_device(ctx, &da));
	CHECK_EQ(da.max_pkeys, 2);
	CHECK(da.device_cap_flags & IBV_DEVICE_BAD_PKEY_CNTR);
	CHECK_OK(ibv_query_port(ctx, 1, &pa));
	CHECK_EQ(pa.pkey_tbl_len, 2);
	CHECK_OK(ibv_query_pkey(ctx, 1, 0, &k));
	CHECK_EQ(be16toh(k), 0xffff);
	CHECK_OK(ibv_query_pkey(ctx, 1, 1, &k));
	CHECK_EQ(be16toh(k), 0x7fff);
	CHECK_EQ(ibv_query_pkey(ctx, 1, 2, &k), -1);
	CHECK_EQ(ibv_get_pkey_index(ctx, 1, htobe16(0x7fff)), 1);
	CHECK_EQ(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)), 0);
	CHECK_EQ(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)), -1);
	/* pkey_index beyond the table: refused */
	struct ibv_qp_init_attr ia = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK_PTR(qp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 2, .port_num = 1};
	CHECK_EQ(ibv_modify_qp(
		     qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
		 EINVAL);
	CHECK_OK(ibv_destroy_qp(qp));
}

int main(void)
{
	/* This test owns its device: a P_Key table with a full and a limited key. */
	unsetenv("SWVERBS_CONFIG");
	setenv("SWVERBS_DEVICES", "swvpk=127.0.0.1,pkeys=0xffff:0x7fff", 1);
	ctx = swvt_open_first_device();
	pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK_PTR(cq);
	mr = swvt_reg_buf(
	    pd, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	buf = mr->addr;
	open_peer();

	test_table();

	/* A full-member QP: the invalid key, another partition; 0x7fff (limited) is
	 * accepted, since the QP is a full member. */
	static const struct bad_key at_full[] = {
	    {0x0000, "invalid P_Key"},
	    {0x8000, "invalid P_Key, full bit"},
	    {0x1234, "another partition"},
	    {0x9234, "another partition, full"},
	};
	/* A limited-member QP: a limited packet may not reach it either. */
	static const struct bad_key at_limited[] = {
	    {0x0000, "invalid P_Key"},
	    {0x1234, "another partition"},
	    {0x7fff, "limited to limited"},
	};
	test_write(IBV_QPT_RC, IDX_FULL, at_full, 4, 0xffff);
	test_write(IBV_QPT_RC, IDX_FULL, at_full, 4, 0x7fff);
	test_write(IBV_QPT_RC, IDX_LIMITED, at_limited, 3, 0xffff);
	test_write(IBV_QPT_UC, IDX_FULL, at_full, 4, 0xffff);
	test_write(IBV_QPT_UC, IDX_LIMITED, at_limited, 3, 0xffff);
	test_ud(IDX_FULL, at_full, 4, 0xffff);
	test_ud(IDX_LIMITED, at_limited, 3, 0xffff);
	test_responses(IDX_FULL, 0x1234, 0xffff);
	test_responses(IDX_LIMITED, 0x7fff, 0xffff);

	close(peer);
	swvt_dereg_buf(mr);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	printf("ok\n");
	return 0;
}
