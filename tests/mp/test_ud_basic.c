/*
 * UD between two processes on an IB-style port (addressed by LID, and by GID) and on a
 * RoCE-style port: every byte of every message after the 40-byte GRH area, immediates,
 * the GRH area itself, wc.src_qp / slid / sl / wc_flags, a reply through an address
 * handle made from the receive completion, Q_Key filtering, the larger-than-MTU rule
 * (IBTA C10-93.1.1 as rxe: no packet, no error), unsignaled sends, opcodes UD does not
 * have (EINVAL at post), and exact SEND/RECV counters on both sides.
 *
 * parent = sender S, child = receiver R (R also answers once, through the AH from WC).
 * The two sides use different devices (different IPs, so different LIDs/GIDs).
 */
#include <arpa/inet.h>

#include "harness.h"
#include "test_uu_util.h"

#define TMO  10000
#define SLOT 8192          /* one receive (40 + up to 4096 + slack) per slot */
#define SRC  (512u * 1024) /* sender's source data area */

struct mode {
	const char *name, *dev_s, *dev_r;
	enum swvt_addr_mode addr;
	bool roce;
};

static const struct mode modes[] = {
	{"ib, LID-addressed (no GRH)", "ud1", "ud2", SWVT_ADDR_LID, false},
	{"ib, GID-addressed (GRH)", "ud1", "ud2", SWVT_ADDR_GID, false},
	{"roce (always a GRH)", "ur1", "ur2", SWVT_ADDR_GID, true},
};

static uint32_t port_mtu(struct swvt *t)
{
	return 128u << t->port_attr.active_mtu;
}

static bool expect_grh(const struct mode *m)
{
	return m->roce || m->addr == SWVT_ADDR_GID;
}

/* ---- sender side helpers ---- */

static int post_ud(struct swvt *t, struct ibv_ah *ah, uint32_t qkey, uint64_t wr_id, uint64_t off,
		   uint32_t len, unsigned flags, bool imm, uint32_t immv)
{
	struct ibv_sge sge = {(uintptr_t)t->buf + off, len, t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
				 .send_flags = flags, .imm_data = htonl(immv)}, *bad = NULL;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = t->remote.qpn;
	wr.wr.ud.remote_qkey = qkey;
	int rc = ibv_post_send(t->qp, &wr, &bad);
	if (rc)
		CHECK(bad == &wr);
	return rc;
}

/* A signaled send that must complete successfully (UD: once handed to the wire). */
static void send_ok(struct swvt *t, struct ibv_ah *ah, uint32_t qkey, uint64_t wr_id, uint64_t off,
		    uint32_t len, unsigned flags, bool imm, uint32_t immv)
{
	struct ibv_wc wc;
	CHECK_OK(post_ud(t, ah, qkey, wr_id, off, len, flags | IBV_SEND_SIGNALED, imm, immv));
	swvt_poll_n(t->scq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, wr_id);
	CHECK_EQ(wc.opcode, IBV_WC_SEND);
	CHECK_EQ(wc.byte_len, len);
	CHECK_EQ(wc.qp_num, t->qp->qp_num);
}

/* ---- receiver side helpers ---- */

static void post_slot(struct swvt *t, uint64_t wr_id, unsigned slot, uint32_t len)
{
	memset(t->buf + (size_t)slot * SLOT, 0xee, SLOT);
	swvt_post_recv(t, wr_id, (uint64_t)slot * SLOT, len);
}

/* The 40 bytes in front of the payload: an IPv4 header after 20 zero bytes on RoCE (as
 * rxe), an IB GRH with both GIDs on an IB port when the sender used a GRH, untouched
 * otherwise. */
static void check_grh_area(struct swvt *t, const struct mode *m, const uint8_t *g, bool grh)
{
	if (!grh) {
		for (int i = 0; i < 40; i++)
			CHECK_EQ(g[i], 0xee);
		return;
	}
	if (m->roce) {
		for (int i = 0; i < 20; i++)
			CHECK_EQ(g[i], 0);
		CHECK_EQ(g[20], 0x45);   /* IPv4, 20-byte header */
		CHECK_EQ(g[29], 17);     /* UDP */
		CHECK(memcmp(g + 32, t->remote.gid + 12, 4) == 0); /* source: the sender */
		CHECK(memcmp(g + 36, t->local.gid + 12, 4) == 0);  /* destination: us */
		return;
	}
	CHECK_EQ(g[0] >> 4, 6);
	CHECK_EQ(g[6], 0x1b); /* next header: IBA transport */
	CHECK(memcmp(g + 8, t->remote.gid, 16) == 0);
	CHECK(memcmp(g + 24, t->local.gid, 16) == 0);
}

static void check_recv(struct swvt *t, const struct mode *m, const struct ibv_wc *wc,
		       uint64_t wr_id, unsigned slot, uint32_t len, uint32_t seed, bool imm,
		       uint32_t immv, uint8_t sl)
{
	const uint8_t *b = t->buf + (size_t)slot * SLOT;
	bool grh = expect_grh(m);
	CHECK_WC(*wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc->wr_id, wr_id);
	CHECK_EQ(wc->opcode, IBV_WC_RECV);
	CHECK_EQ(wc->byte_len, 40 + len); /* the GRH area always counts */
	CHECK_EQ(wc->qp_num, t->qp->qp_num);
	CHECK_EQ(wc->src_qp, t->remote.qpn);
	CHECK_EQ(!!(wc->wc_flags & IBV_WC_GRH), grh);
	CHECK_EQ(!!(wc->wc_flags & IBV_WC_WITH_IMM), imm);
	if (imm)
		CHECK_EQ(ntohl(wc->imm_data), immv);
	CHECK_EQ(wc->slid, m->roce ? 0 : t->remote.lid);
	CHECK_EQ(wc->sl, m->roce ? 2 : sl); /* RoCE: network header type IPv4, as mlx5 */
	CHECK_EQ(wc->pkey_index, 0);
	check_grh_area(t, m, b, grh);
	CHECK_EQ(swvt_verify(b + 40, len, seed), (size_t)-1);
	CHECK_EQ(b[40 + len], 0xee); /* nothing past the message */
}

/* ---- the test ---- */

static const unsigned ud_flags[] = {0, IBV_SEND_SOLICITED, IBV_SEND_INLINE, 0, 0, 0};

static void sender(struct swvt *t, void *arg)
{
	const struct mode *m = arg;
	struct uu_cntrs u;
	struct ibv_wc wc[8];
	uint32_t mtu = port_mtu(t);
	const uint32_t sizes[] = {0, 1, 7, 100, mtu - 1, mtu};

	uu_attach(t, &u);
	swvt_connect(t); /* RTR (+ AH to the peer), RTS */
	uint32_t qkey = t->remote.qkey;

	/* 1. One message of each size, alternately with an immediate. */
	swvt_barrier(t); /* receives posted */
	for (unsigned i = 0; i < 6; i++) {
		swvt_fill(t->buf + SRC, sizes[i], 10 + i);
		unsigned f = (ud_flags[i] & IBV_SEND_INLINE) && sizes[i] > t->init_attr.cap.max_inline_data
				     ? 0
				     : ud_flags[i];
		send_ok(t, t->ah, qkey, 100 + i, SRC, sizes[i], f, i & 1, 0xa000 + i);
		u.exp[U_SEND]++;
	}
	swvt_barrier(t); /* receiver verified */

	/* 2. Two SGEs through an AH with SL 5 (the IB receiver reports the SL). */
	struct ibv_ah_attr aa;
	swvt_fill_ah_attr(t, &aa);
	aa.sl = 5;
	struct ibv_ah *ah5 = ibv_create_ah(t->pd, &aa);
	CHECK_PTR(ah5);
	swvt_fill(t->buf + SRC, 300, 20);
	swvt_barrier(t);
	{
		struct ibv_sge sge[2] = {{(uintptr_t)t->buf + SRC, 100, t->mr->lkey},
					 {(uintptr_t)t->buf + SRC + 100, 200, t->mr->lkey}};
		struct ibv_send_wr wr = {.wr_id = 200, .sg_list = sge, .num_sge = 2,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		wr.wr.ud.ah = ah5;
		wr.wr.ud.remote_qpn = t->remote.qpn;
		wr.wr.ud.remote_qkey = qkey;
		CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
		swvt_poll_n(t->scq, wc, 1, TMO);
		CHECK_WC(wc[0], IBV_WC_SUCCESS);
		CHECK_EQ(wc[0].byte_len, 300);
		u.exp[U_SEND]++;
	}
	CHECK_OK(ibv_destroy_ah(ah5));
	swvt_barrier(t);

	/* 3. A wrong Q_Key is dropped by the receiver, and so is a datagram to a QP
	 * number that does not exist there; the sender cannot tell either. */
	swvt_barrier(t); /* one receive posted */
	swvt_fill(t->buf + SRC, 64, 30);
	send_ok(t, t->ah, qkey ^ 1, 300, SRC, 64, 0, false, 0);
	{
		uint32_t real = t->remote.qpn;
		t->remote.qpn = real ^ 0x80; /* same socket, an empty slot */
		send_ok(t, t->ah, qkey, 302, SRC, 64, 0, false, 0);
		t->remote.qpn = real;
	}
	swvt_fill(t->buf + SRC + 4096, 64, 31);
	send_ok(t, t->ah, qkey, 301, SRC + 4096, 64, 0, false, 0);
	u.exp[U_SEND] += 3;
	swvt_barrier(t);

	/* 4. Larger than the port MTU: completes successfully, nothing is sent. */
	swvt_barrier(t); /* one receive posted, big enough for mtu + 64 */
	swvt_fill(t->buf + SRC, mtu + 1, 40);
	send_ok(t, t->ah, qkey, 400, SRC, mtu + 1, 0, false, 0);
	swvt_fill(t->buf + SRC + 8192, 33, 41);
	send_ok(t, t->ah, qkey, 401, SRC + 8192, 33, 0, false, 0);
	u.exp[U_SEND] += 2;
	swvt_barrier(t);

	/* 5. The receiver answers through an AH made from its receive completion. */
	memset(t->buf, 0xee, SLOT);
	swvt_post_recv(t, 500, 0, 40 + 256);
	swvt_barrier(t);
	swvt_fill(t->buf + SRC, 128, 50);
	send_ok(t, t->ah, qkey, 501, SRC, 128, 0, true, 0x5150);
	u.exp[U_SEND]++;
	swvt_poll_n(t->rcq, wc, 1, TMO);
	check_recv(t, m, &wc[0], 500, 0, 64, 51, true, 0x5151, 0);
	u.exp[U_RECV]++;
	swvt_barrier(t);

	/* 6. Unsignaled sends complete silently (and count). */
	swvt_barrier(t); /* six receives posted */
	for (unsigned i = 0; i < 6; i++) {
		swvt_fill(t->buf + SRC + i * 256, 200, 60 + i);
		CHECK_OK(post_ud(t, t->ah, qkey, 600 + i, SRC + i * 256, 200,
				 i == 5 ? IBV_SEND_SIGNALED : 0, false, 0));
	}
	swvt_poll_n(t->scq, wc, 1, TMO);
	CHECK_WC(wc[0], IBV_WC_SUCCESS);
	CHECK_EQ(wc[0].wr_id, 605);
	u.exp[U_SEND] += 6;
	swvt_barrier(t);

	/* 7. What UD cannot do is refused at post (EINVAL, bad_wr names it). */
	static const enum ibv_wr_opcode not_ud[] = {
		IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
		IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_SEND_WITH_INV,
		IBV_WR_LOCAL_INV, IBV_WR_BIND_MW};
	for (unsigned i = 0; i < sizeof(not_ud) / sizeof(not_ud[0]); i++) {
		struct ibv_sge sge = {(uintptr_t)t->buf + SRC, 8, t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 700 + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = not_ud[i], .send_flags = IBV_SEND_SIGNALED},
				   *bad = NULL;
		wr.wr.ud.ah = t->ah;
		wr.wr.ud.remote_qpn = t->remote.qpn;
		wr.wr.ud.remote_qkey = qkey;
		CHECK_EQ(ibv_post_send(t->qp, &wr, &bad), EINVAL);
		CHECK(bad == &wr);
	}
	CHECK_EQ(post_ud(t, NULL, qkey, 710, SRC, 8, IBV_SEND_SIGNALED, false, 0), EINVAL);
	{
		/* A good WR before a bad one is posted; the bad one and later are not. */
		struct ibv_sge sge = {(uintptr_t)t->buf + SRC, 16, t->mr->lkey};
		struct ibv_send_wr w2 = {.wr_id = 712, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
		struct ibv_send_wr w1 = {.wr_id = 711, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
					 .next = &w2}, *bad = NULL;
		w1.wr.ud.ah = w2.wr.ud.ah = t->ah;
		w1.wr.ud.remote_qpn = w2.wr.ud.remote_qpn = t->remote.qpn;
		w1.wr.ud.remote_qkey = w2.wr.ud.remote_qkey = qkey;
		swvt_fill(t->buf + SRC, 16, 71);
		swvt_barrier(t); /* receive posted */
		CHECK_EQ(ibv_post_send(t->qp, &w1, &bad), EINVAL);
		CHECK(bad == &w2);
		swvt_poll_n(t->scq, wc, 1, TMO);
		CHECK_WC(wc[0], IBV_WC_SUCCESS);
		CHECK_EQ(wc[0].wr_id, 711);
		u.exp[U_SEND]++;
		swvt_expect_empty(t->scq, 100);
	}
	swvt_barrier(t);

	/* 8. Counters: exactly what completed, on both sides. */
	uu_check(&u, "sender", TMO);
	swvt_barrier(t);
	uu_release_after_qp(t, &u);
}

static void receiver(struct swvt *t, void *arg)
{
	const struct mode *m = arg;
	struct uu_cntrs u;
	struct ibv_wc wc[8];
	uint32_t mtu = port_mtu(t);
	const uint32_t sizes[] = {0, 1, 7, 100, mtu - 1, mtu};

	uu_attach(t, &u);
	swvt_connect(t);

	/* 1 */
	for (unsigned i = 0; i < 6; i++)
		post_slot(t, 100 + i, i, 40 + mtu);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, 6, TMO);
	for (unsigned i = 0; i < 6; i++)
		check_recv(t, m, &wc[i], 100 + i, i, sizes[i], 10 + i, i & 1, 0xa000 + i, 0);
	u.exp[U_RECV] += 6;
	swvt_barrier(t);

	/* 2 */
	post_slot(t, 200, 0, 40 + 300);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, 1, TMO);
	check_recv(t, m, &wc[0], 200, 0, 300, 20, false, 0, 5);
	u.exp[U_RECV]++;
	swvt_barrier(t);

	/* 3: only the second message arrives, in the one receive posted */
	post_slot(t, 300, 0, 40 + 64);
	swvt_barrier(t);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, 1, TMO);
	check_recv(t, m, &wc[0], 300, 0, 64, 31, false, 0, 0);
	swvt_expect_empty(t->rcq, 100);
	u.exp[U_RECV]++;

	/* 4: the oversized message never arrives; the small one takes the receive */
	post_slot(t, 400, 0, 40 + mtu + 64);
	swvt_barrier(t);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, 1, TMO);
	check_recv(t, m, &wc[0], 400, 0, 33, 41, false, 0, 0);
	swvt_expect_empty(t->rcq, 100);
	u.exp[U_RECV]++;

	/* 5: answer through the AH from the completion */
	post_slot(t, 500, 1, 40 + 256);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, 1, TMO);
	check_recv(t, m, &wc[0], 500, 1, 128, 50, true, 0x5150, 0);
	u.exp[U_RECV]++;
	struct ibv_grh *grh = (struct ibv_grh *)(t->buf + SLOT);
	struct ibv_ah_attr from;
	CHECK_OK(ibv_init_ah_from_wc(t->ctx, 1, &wc[0], grh, &from));
	if (expect_grh(m)) {
		CHECK_EQ(from.is_global, 1);
		CHECK(memcmp(from.grh.dgid.raw, t->remote.gid, 16) == 0);
	} else {
		CHECK_EQ(from.is_global, 0);
		CHECK_EQ(from.dlid, t->remote.lid);
	}
	struct ibv_ah *back = ibv_create_ah_from_wc(t->pd, &wc[0], grh, 1);
	CHECK_PTR(back);
	swvt_fill(t->buf + SRC, 64, 51);
	struct ibv_sge sge = {(uintptr_t)t->buf + SRC, 64, t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 550, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				 .imm_data = htonl(0x5151)}, *bad;
	wr.wr.ud.ah = back;
	wr.wr.ud.remote_qpn = wc[0].src_qp;
	wr.wr.ud.remote_qkey = t->remote.qkey;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	swvt_poll_n(t->scq, wc, 1, TMO);
	CHECK_WC(wc[0], IBV_WC_SUCCESS);
	CHECK_EQ(wc[0].wr_id, 550);
	u.exp[U_SEND]++;
	CHECK_OK(ibv_destroy_ah(back));
	swvt_barrier(t);

	/* 6 */
	for (unsigned i = 0; i < 6; i++)
		post_slot(t, 600 + i, i, 40 + 200);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, 6, TMO);
	for (unsigned i = 0; i < 6; i++)
		check_recv(t, m, &wc[i], 600 + i, i, 200, 60 + i, false, 0, 0);
	u.exp[U_RECV] += 6;
	swvt_barrier(t);

	/* 7: only the good half of the chain arrives */
	post_slot(t, 711, 0, 40 + 64);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, 1, TMO);
	check_recv(t, m, &wc[0], 711, 0, 16, 71, false, 0, 0);
	u.exp[U_RECV]++;
	swvt_barrier(t);

	/* 8 */
	swvt_expect_empty(t->rcq, 50);
	uu_check(&u, "receiver", TMO);
	swvt_barrier(t);
	uu_release_after_qp(t, &u);
}

int main(void)
{
	/* Two IB-style devices (LIDs 1, 2; MTU 4096 from loopback) and two RoCE-style ones
	 * with a smaller MTU, set before any process opens a device. */
	setenv("SWVERBS_DEVICES",
	       "ud1=127.0.0.1/8;ud2=127.0.0.2/8;ur1=127.0.0.3/8,roce,mtu=1024;"
	       "ur2=127.0.0.4/8,roce,mtu=1024",
	       1);
	for (unsigned i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		struct swvt_opts o;
		swvt_opts_default(&o);
		o.qp_type = IBV_QPT_UD;
		o.dev_name = modes[i].dev_s;
		o.child_dev_name = modes[i].dev_r;
		o.addr_mode = modes[i].addr;
		o.stop_at = IBV_QPS_INIT; /* counters attach in INIT, then swvt_connect */
		o.max_inline_data = 64;
		o.qkey = 0x11111111u + i;
		if (swvt_run(&o, sender, receiver, (void *)&modes[i]))
			return 1;
		printf("%s: ok\n", modes[i].name);
	}
	return 0;
}
