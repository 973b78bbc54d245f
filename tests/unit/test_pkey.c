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
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "core/qp.h"
#include "rawpeer.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "util/clock.h"

#define IDX_FULL    0 /* 0xffff */
#define IDX_LIMITED 1 /* 0x7fff */

static struct swvt_rawpeer rp; /* the connected peer, the device, PD, CQ and buffer */

/* Build p with BTH P_Key pkey (the builder would turn 0 into 0xffff, so the field is
 * written by hand before the CRC) and send it from the peer socket to qp. */
static void peer_send(struct ibv_qp *qp, struct swv_pkt *p, uint16_t pkey, const void *payload)
{
	uint8_t d[SWV_MAX_HDR_LEN + SWVT_RAWPEER_MAXPAY + SWV_MAX_TAIL_LEN];
	size_t h = swvt_rawpeer_build(qp, p, payload, d);
	d[2] = (uint8_t)(pkey >> 8);
	d[3] = (uint8_t)pkey;
	size_t t = swv_pkt_build_tail(d, h, d + h, p->paylen, d + h + p->paylen);
	CHECK(t > 0);
	swvt_rawpeer_sendto(&rp, qp, d, h + p->paylen + t);
}

/* The next packet swverbs sent to the peer (fails after 10 s), UC flow control
 * (credit for the peer) skipped. */
static void peer_recv(struct swv_pkt *p, uint8_t *d, size_t size)
{
	do
		CHECK_OK(swv_pkt_parse(d, swvt_rawpeer_recv(&rp, d, size), p));
	while (p->opcode == SWV_OP_FLOW_CONTROL);
}

/* Nothing but flow control waiting at the peer. */
static void peer_expect_nothing(void)
{
	uint8_t d[512];
	struct swv_pkt p;
	ssize_t n;
	while ((n = recv(rp.fd, d, sizeof(d), MSG_DONTWAIT)) > 0) {
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
	while ((n = recv(rp.fd, d, sizeof(d), MSG_DONTWAIT)) > 0) {
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
	CHECK_OK(ibv_query_port(rp.ctx, 1, &pa));
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
		CHECK_EQ(ibv_poll_cq(rp.cq, 1, &wc), 0); /* also runs a receive pass */
		usleep(100);
	}
	CHECK_EQ(atomic_load(c), want);
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
	struct ibv_qp *qp = swvt_rawpeer_qp(&rp, type, idx);
	swvt_rawpeer_connect(&rp, qp, type, false);
	uint16_t own = idx == IDX_FULL ? 0xffff : 0x7fff;
	uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8}, zero[8] = {0};
	struct swv_pkt p = swvt_rawpeer_write_only(&rp, type, sizeof(data));
	memset(rp.buf, 0, 64);
	uint32_t port0 = port_bad_pkey();

	for (unsigned i = 0; i < nbad; i++) {
		peer_send(qp, &p, bad[i].pkey, data);
		wait_bad_pkey(qp, i + 1);
		if (memcmp(rp.buf, zero, sizeof(zero))) {
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
		swvt_rawpeer_check_ack(&ack, 0, 1);
		CHECK_EQ(ack.pkey, own);
		CHECK_EQ(ack.dqpn, swvt_rawpeer_qpn(&rp));
	} else {
		swvt_rawpeer_wait_buf(&rp, data, sizeof(data));
	}
	CHECK(!memcmp(rp.buf, data, sizeof(data)));
	CHECK_EQ(atomic_load(&to_swv_qp(qp)->rx_bad_pkey), nbad);
	CHECK_OK(ibv_destroy_qp(qp));
}

/* UD SEND_ONLY from the peer's port (DETH source QPN names it): bad keys give no
 * receive completion, a matching key does. */
static void test_ud(uint16_t idx, const struct bad_key *bad, unsigned nbad, uint16_t good)
{
	struct ibv_qp *qp = swvt_rawpeer_ud_receiver(&rp, idx);
	uint8_t data[16] = "partitioned";
	struct swv_pkt p = swvt_rawpeer_ud_send_only(&rp, sizeof(data));

	for (unsigned i = 0; i < nbad; i++) {
		peer_send(qp, &p, bad[i].pkey, data);
		wait_bad_pkey(qp, i + 1); /* fails on a completion */
	}
	peer_send(qp, &p, good, data);
	swvt_rawpeer_expect_ud_recv(&rp, data, sizeof(data));
	CHECK_EQ(atomic_load(&to_swv_qp(qp)->rx_bad_pkey), nbad);
	CHECK_OK(ibv_destroy_qp(qp));
}

/* RC requester: its READ request and SEND carry the QP's P_Key; a READ response
 * and an ACK with a bad key are dropped (no completion, nothing placed), the same
 * responses with a matching key complete the work requests. */
static void test_responses(uint16_t idx, uint16_t bad_key, uint16_t good)
{
	struct ibv_qp *qp = swvt_rawpeer_qp(&rp, IBV_QPT_RC, idx);
	swvt_rawpeer_connect(&rp, qp, IBV_QPT_RC, true);
	uint16_t own = idx == IDX_FULL ? 0xffff : 0x7fff;
	uint8_t d[512];
	struct swv_pkt req, p;
	struct ibv_wc wc;
	peer_expect_nothing();
	memset(rp.buf, 0, 64);

	swvt_rawpeer_post(&rp, qp, IBV_WR_RDMA_READ, 1, 0);
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
	CHECK_EQ(rp.buf[0], 0);
	peer_send(qp, &p, good, data);
	wc = swvt_rawpeer_wait_wc(&rp);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
	CHECK(!memcmp(rp.buf, data, sizeof(data)));

	/* a SEND, ACKed first with the bad key, then with the good one */
	swvt_rawpeer_post(&rp, qp, IBV_WR_SEND, 2, 0);
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
	wc = swvt_rawpeer_wait_wc(&rp);
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

	struct ibv_context *ctx = rp.ctx;
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
	    .send_cq = rp.cq,
	    .recv_cq = rp.cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(rp.pd, &ia);
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
	swvt_rawpeer_open(&rp);

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

	swvt_rawpeer_close(&rp);
	printf("ok\n");
	return 0;
}
