/*
 * UD multicast between processes: one sender and three receiver processes on one host,
 * each receiver's UD QP attached to the group (MGID -> IPv4 group, docs/wire.md "UD
 * multicast").
 *  1. Every receiver gets every datagram sent to QPN 0xffffff through an AH whose DGID
 *     is the MGID: every payload byte, the GRH area (DGID = MGID, SGID = the sender's
 *     GID), IBV_WC_GRH, src_qp = the sender's QP, immediates.
 *  2. A QP that is not attached (the sender's own, and a second QP in a receiver's
 *     process) receives nothing; a second QP of the sender's process that is attached
 *     receives like the others (the group's socket is shared per context).
 *  3. Receiver 2 detaches and stops receiving; the other two still receive. While
 *     attached its QP cannot be destroyed (EBUSY); a second detach is EINVAL.
 *  4. The sender attaches its own QP: it receives its own datagrams then (mlx5's
 *     default, without IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).
 * Processes coordinate through pipes; a receiver that misses data fails by timeout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "harness.h"
#include "udep.h"

#define NRECV 3
#define NMSG  8
#define NSLOT 64
#define SLOT  4096
#define QKEY  0x1234567u
#define TMO   10000

static union ibv_gid mgid;
static bool roce; /* RoCE-style device: the GRH area holds an IPv4 header */
static const uint16_t mlid = 0xc001;

static uint32_t msg_len(unsigned round, unsigned i)
{
	return 1 + (round * 977 + i * 311) % 2000;
}

/* n datagrams of round 'round', in order, each checked byte by byte. */
static void expect_round(struct swvt_udep *e, unsigned round, unsigned n,
			 const uint8_t sender_gid[16], uint32_t sender_qpn)
{
	struct ibv_wc wc[NMSG];
	CHECK(n <= NMSG);
	swvt_poll_n(e->cq, wc, (int)n, TMO);
	for (unsigned i = 0; i < n; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].opcode, IBV_WC_RECV);
		CHECK_EQ(wc[i].wr_id, i);
		CHECK_EQ(wc[i].qp_num, e->qp->qp_num);
		CHECK_EQ(wc[i].src_qp, sender_qpn);
		uint32_t len = msg_len(round, i);
		CHECK_EQ(wc[i].byte_len, 40 + len);
		CHECK(wc[i].wc_flags & IBV_WC_GRH);
		CHECK(wc[i].wc_flags & IBV_WC_WITH_IMM);
		CHECK_EQ(ntohl(wc[i].imm_data), round << 16 | i);
		const uint8_t *area = e->buf + (size_t)i * SLOT;
		if (roce) {
			/* IPv4 header at +20: source = the sender, destination = the group */
			const uint8_t group[4] = {239, mgid.raw[13], mgid.raw[14], mgid.raw[15]};
			CHECK_EQ(area[20], 0x45);
			CHECK(memcmp(area + 32, sender_gid + 12, 4) == 0);
			CHECK(memcmp(area + 36, group, 4) == 0);
		} else {
			const struct ibv_grh *grh = (const struct ibv_grh *)area;
			CHECK(memcmp(grh->dgid.raw, mgid.raw, 16) == 0);
			CHECK(memcmp(grh->sgid.raw, sender_gid, 16) == 0);
		}
		CHECK_EQ(swvt_verify(e->buf + (size_t)i * SLOT + 40, len, round * 100 + i),
			 (size_t)-1);
		CHECK_EQ(e->buf[(size_t)i * SLOT + 40 + len], 0xee); /* nothing beyond */
	}
}

static void send_round(struct swvt_udep *e, struct ibv_ah *ah, unsigned round)
{
	struct ibv_wc wc[NMSG];
	for (unsigned i = 0; i < NMSG; i++) {
		uint32_t len = msg_len(round, i);
		uint8_t *src = e->buf + (size_t)(32 + i) * SLOT;
		swvt_fill(src, len, round * 100 + i);
		struct ibv_sge sge = {(uintptr_t)src, len, e->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1000 + i,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_SEND_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED,
					 .imm_data = htonl(round << 16 | i)},
				   *bad;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = 0xffffff;
		wr.wr.ud.remote_qkey = QKEY;
		CHECK_OK(ibv_post_send(e->qp, &wr, &bad));
	}
	swvt_poll_n(e->cq, wc, NMSG, TMO);
	for (unsigned i = 0; i < NMSG; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].opcode, IBV_WC_SEND);
	}
}

/* Pipe protocol: each receiver writes a byte to 'up' when ready for a round; the
 * parent writes a byte to each receiver's 'down' to start the next step. */
static void put(int fd, char c)
{
	CHECK_EQ(write(fd, &c, 1), 1);
}

static char get(int fd)
{
	char c = 0;
	CHECK_EQ(read(fd, &c, 1), 1);
	return c;
}

struct hello {
	uint8_t gid[16];
	uint32_t qpn;
};

static void receiver(int idx, int up, int down)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l && l[0]);
	struct ibv_context *ctx = ibv_open_device(l[0]);
	CHECK_PTR(ctx);
	ibv_free_device_list(l);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct swvt_udep e, idle;
	swvt_udep_open(&e, ctx, pd, NSLOT, SLOT, QKEY);
	swvt_udep_open(&idle, ctx, pd, NSLOT, SLOT,
		       QKEY); /* same process, not attached: never receives */
	swvt_udep_post_recvs(&idle, 4);

	struct hello h;
	CHECK_EQ(read(down, &h, sizeof(h)), (ssize_t)sizeof(h));

	/* round 1 */
	swvt_udep_post_recvs(&e, NMSG);
	CHECK_OK(ibv_attach_mcast(e.qp, &mgid, mlid));
	CHECK_OK(ibv_attach_mcast(e.qp, &mgid, mlid)); /* twice: still one membership */
	put(up, 'r');
	expect_round(&e, 1, NMSG, h.gid, h.qpn);
	put(up, 'd');

	/* round 2: receiver 2 leaves */
	CHECK_EQ(get(down), 'g');
	swvt_udep_post_recvs(&e, NMSG);
	if (idx == 2) {
		CHECK_EQ(ibv_destroy_qp(e.qp), EBUSY); /* attached: the kernel refuses */
		CHECK_OK(ibv_detach_mcast(e.qp, &mgid, mlid));
		CHECK_EQ(ibv_detach_mcast(e.qp, &mgid, mlid), EINVAL);
	}
	put(up, 'r');
	if (idx != 2)
		expect_round(&e, 2, NMSG, h.gid, h.qpn);
	put(up, 'd');
	/* Every other member has its datagrams by now, and the kernel hands a multicast
	 * datagram to every member socket at send time: none came for the one that left. */
	CHECK_EQ(get(down), 'e');
	if (idx == 2)
		swvt_expect_empty(e.cq, 200);
	swvt_expect_empty(idle.cq, 1);
	put(up, 'k');

	CHECK_EQ(get(down), 'q');
	if (idx != 2)
		CHECK_OK(ibv_detach_mcast(e.qp, &mgid, mlid));
	swvt_udep_close(&idle);
	swvt_udep_close(&e);
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	exit(0);
}

static int scenario(void)
{
	/* A group of this run alone (the suite may run this test twice at once). */
	unsigned tag = (unsigned)getpid() & 0xffffff;
	static const uint8_t prefix[] = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff};
	memset(&mgid, 0, sizeof(mgid));
	memcpy(mgid.raw, prefix, sizeof(prefix));
	mgid.raw[13] = (uint8_t)(tag >> 16);
	mgid.raw[14] = (uint8_t)(tag >> 8);
	mgid.raw[15] = (uint8_t)tag;

	int up[NRECV][2], down[NRECV][2];
	pid_t pid[NRECV];
	for (int r = 0; r < NRECV; r++) {
		CHECK_OK(pipe(up[r]));
		CHECK_OK(pipe(down[r]));
		pid[r] = fork();
		CHECK(pid[r] >= 0);
		if (pid[r] == 0) {
			alarm(60);
			receiver(r, up[r][1], down[r][0]);
		}
	}
	alarm(90);

	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l && l[0]);
	struct ibv_context *ctx = ibv_open_device(l[0]);
	CHECK_PTR(ctx);
	ibv_free_device_list(l);
	struct ibv_device_attr da;
	CHECK_OK(ibv_query_device(ctx, &da));
	CHECK(da.max_mcast_grp > 0 && da.max_mcast_qp_attach >= 2);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct swvt_udep s, s2;
	swvt_udep_open(&s, ctx, pd, NSLOT, SLOT, QKEY);
	swvt_udep_open(&s2, ctx, pd, NSLOT, SLOT, QKEY); /* the sender's process has a member too */
	swvt_udep_post_recvs(&s, NMSG);

	struct hello h = {.qpn = s.qp->qp_num};
	union ibv_gid g;
	CHECK_OK(ibv_query_gid(ctx, 1, 0, &g));
	memcpy(h.gid, g.raw, 16);
	for (int r = 0; r < NRECV; r++)
		CHECK_EQ(write(down[r][1], &h, sizeof(h)), (ssize_t)sizeof(h));

	struct ibv_ah_attr aa = {.is_global = 1, .dlid = mlid, .port_num = 1};
	aa.grh.dgid = mgid;
	aa.grh.hop_limit = 1;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK_PTR(ah);

	/* round 1: three receiver processes and s2 */
	swvt_udep_post_recvs(&s2, NMSG);
	CHECK_OK(ibv_attach_mcast(s2.qp, &mgid, mlid));
	for (int r = 0; r < NRECV; r++)
		CHECK_EQ(get(up[r][0]), 'r');
	send_round(&s, ah, 1);
	expect_round(&s2, 1, NMSG, h.gid, h.qpn);
	for (int r = 0; r < NRECV; r++)
		CHECK_EQ(get(up[r][0]), 'd');
	swvt_expect_empty(s.cq, 1); /* not attached: its own datagrams are not for it */

	/* round 2: receiver 2 has left */
	for (int r = 0; r < NRECV; r++)
		put(down[r][1], 'g');
	swvt_udep_post_recvs(&s2, NMSG);
	for (int r = 0; r < NRECV; r++)
		CHECK_EQ(get(up[r][0]), 'r');
	send_round(&s, ah, 2);
	expect_round(&s2, 2, NMSG, h.gid, h.qpn);
	for (int r = 0; r < NRECV; r++)
		CHECK_EQ(get(up[r][0]), 'd');
	for (int r = 0; r < NRECV; r++)
		put(down[r][1], 'e');
	for (int r = 0; r < NRECV; r++)
		CHECK_EQ(get(up[r][0]), 'k');

	/* round 3: the sender's QP attached receives its own datagrams */
	CHECK_OK(ibv_attach_mcast(s.qp, &mgid, mlid));
	swvt_udep_post_recvs(&s2, NMSG);
	struct ibv_wc wc[2 * NMSG];
	for (unsigned i = 0; i < NMSG; i++) {
		uint32_t len = msg_len(3, i);
		uint8_t *src = s.buf + (size_t)(32 + i) * SLOT;
		swvt_fill(src, len, 300 + i);
		struct ibv_sge sge = {(uintptr_t)src, len, s.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1000 + i,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_SEND_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED,
					 .imm_data = htonl(3u << 16 | i)},
				   *bad;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = 0xffffff;
		wr.wr.ud.remote_qkey = QKEY;
		CHECK_OK(ibv_post_send(s.qp, &wr, &bad));
	}
	/* s's CQ holds its NMSG send completions and NMSG receives, in any interleaving */
	swvt_poll_n(s.cq, wc, 2 * NMSG, TMO);
	unsigned nsend = 0, nrecv = 0;
	for (unsigned i = 0; i < 2 * NMSG; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		if (wc[i].opcode == IBV_WC_SEND) {
			nsend++;
			continue;
		}
		CHECK_EQ(wc[i].opcode, IBV_WC_RECV);
		CHECK_EQ(wc[i].wr_id, nrecv);
		CHECK_EQ(wc[i].src_qp, s.qp->qp_num);
		uint32_t len = msg_len(3, nrecv);
		CHECK_EQ(wc[i].byte_len, 40 + len);
		CHECK_EQ(swvt_verify(s.buf + (size_t)nrecv * SLOT + 40, len, 300 + nrecv),
			 (size_t)-1);
		nrecv++;
	}
	CHECK_EQ(nsend, NMSG);
	CHECK_EQ(nrecv, NMSG);
	expect_round(&s2, 3, NMSG, h.gid, h.qpn);

	for (int r = 0; r < NRECV; r++)
		put(down[r][1], 'q');
	int bad = 0;
	for (int r = 0; r < NRECV; r++) {
		int st;
		CHECK_EQ(waitpid(pid[r], &st, 0), pid[r]);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "receiver %d failed (status %#x)\n", r, st);
			bad = 1;
		}
	}
	CHECK_OK(ibv_detach_mcast(s.qp, &mgid, mlid));
	CHECK_OK(ibv_detach_mcast(s2.qp, &mgid, mlid));
	CHECK_OK(ibv_destroy_ah(ah));
	swvt_udep_close(&s2);
	swvt_udep_close(&s);
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	return bad;
}

/* Each scenario in a process of its own: the device list is read once per process. */
static int run(const char *devices, bool is_roce)
{
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		setenv("SWVERBS_DEVICES", devices, 1);
		roce = is_roce;
		exit(scenario());
	}
	int st;
	CHECK_EQ(waitpid(p, &st, 0), p);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "%s: failed (status %#x)\n", devices, st);
		return 1;
	}
	printf("%s: 3 receivers, one leaves, sender attached: ok\n", devices);
	fflush(stdout); /* before the next fork */
	return 0;
}

int main(void)
{
	return run("mc0=127.0.0.1/8", false) || run("mc1=127.0.0.1/8,roce", true);
}
