/*
 * UD multicast: a receiver matches the full MGID, not the IP group it travels on.
 * Two MGIDs with the same last three bytes share one IPv4 group (docs/wire.md, "UD
 * multicast"), so both groups' sockets get every datagram of either. A receiver process
 * has QP A attached to MGID 1, QP B to MGID 2 and QP C to both; the sender process
 * sends alternately to MGID 1 and MGID 2. A must receive exactly the MGID 1 datagrams,
 * B exactly the MGID 2 ones, in order and byte for byte, each with its own MGID as the
 * GRH DGID; C receives all of them, each once (in any order: its two groups are two
 * sockets). Datagrams from one sender reach one socket in order, so a datagram of the
 * other MGID that leaked into A or B would show up as the wrong payload in sequence (no
 * waiting for something not to arrive).
 * Also: a unicast UD datagram still carries no MGID and is received as before.
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

#define NMSG 6 /* per MGID */
#define NSLOT 32
#define SLOT 4096
#define QKEY 0x2345671u
#define TMO  10000

static union ibv_gid mgid[2];
static const uint16_t mlid = 0xc002;

/* Message i goes to MGID i % 2; its length and contents say which message it is. */
static uint32_t msg_len(unsigned i)
{
	return 1 + (i * 433) % 1500;
}

/* The n messages numbered first, first + step, ... received (in that order unless
 * any_order), each byte checked, each with the MGID it was sent to as the GRH DGID. */
static void expect(struct swvt_udep *e, unsigned first, unsigned step, unsigned n, uint32_t src_qpn,
		   bool any_order)
{
	struct ibv_wc wc[2 * NMSG];
	bool seen[2 * NMSG] = {false};
	CHECK(n <= 2 * NMSG);
	swvt_poll_n(e->cq, wc, (int)n, TMO);
	for (unsigned k = 0; k < n; k++) {
		unsigned i = first + k * step;
		if (any_order) {
			i = ntohl(wc[k].imm_data);
			CHECK(i < 2 * NMSG && !seen[i] && (i - first) % step == 0);
			seen[i] = true;
		}
		CHECK_WC(wc[k], IBV_WC_SUCCESS);
		CHECK_EQ(wc[k].opcode, IBV_WC_RECV);
		CHECK_EQ(wc[k].wr_id, k);
		CHECK_EQ(wc[k].src_qp, src_qpn);
		CHECK(wc[k].wc_flags & IBV_WC_WITH_IMM);
		CHECK_EQ(ntohl(wc[k].imm_data), i);
		CHECK_EQ(wc[k].byte_len, 40 + msg_len(i));
		const uint8_t *area = e->buf + (size_t)k * SLOT;
		const struct ibv_grh *grh = (const struct ibv_grh *)area;
		CHECK(memcmp(grh->dgid.raw, mgid[i % 2].raw, 16) == 0);
		CHECK_EQ(swvt_verify(area + 40, msg_len(i), 7000 + i), (size_t)-1);
		CHECK_EQ(area[40 + msg_len(i)], 0xee);
	}
}

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
	uint32_t qpn;	 /* the sender's QP */
	uint32_t uc_qpn; /* receiver -> sender: QP A, for the unicast datagram */
};

static struct ibv_context *open_first(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l && l[0]);
	struct ibv_context *ctx = ibv_open_device(l[0]);
	CHECK_PTR(ctx);
	ibv_free_device_list(l);
	return ctx;
}

static void receiver(int up, int down)
{
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct swvt_udep a, b, c;
	swvt_udep_open(&a, ctx, pd, NSLOT, SLOT, QKEY);
	swvt_udep_open(&b, ctx, pd, NSLOT, SLOT, QKEY);
	swvt_udep_open(&c, ctx, pd, NSLOT, SLOT, QKEY);
	swvt_udep_post_recvs(&a, NMSG);
	swvt_udep_post_recvs(&b, NMSG);
	swvt_udep_post_recvs(&c, 2 * NMSG);
	CHECK_OK(ibv_attach_mcast(a.qp, &mgid[0], mlid));
	CHECK_OK(ibv_attach_mcast(b.qp, &mgid[1], mlid));
	CHECK_OK(ibv_attach_mcast(c.qp, &mgid[0], mlid));
	CHECK_OK(ibv_attach_mcast(c.qp, &mgid[1], mlid));

	struct hello h;
	CHECK_EQ(read(down, &h, sizeof(h)), (ssize_t)sizeof(h));
	put(up, 'r');
	expect(&a, 0, 2, NMSG, h.qpn, false);
	expect(&b, 1, 2, NMSG, h.qpn, false);
	expect(&c, 0, 1, 2 * NMSG, h.qpn, true);

	/* Unicast to A: no MGID travels, the payload is whole. */
	for (int i = 0; i < 2; i++)
		CHECK_OK(ibv_detach_mcast(i ? c.qp : a.qp, &mgid[0], mlid));
	CHECK_OK(ibv_detach_mcast(b.qp, &mgid[1], mlid));
	CHECK_OK(ibv_detach_mcast(c.qp, &mgid[1], mlid));
	swvt_udep_post_recvs(&a, 1);
	struct hello back = {.uc_qpn = a.qp->qp_num};
	CHECK_EQ(write(up, &back, sizeof(back)), (ssize_t)sizeof(back));
	struct ibv_wc wc;
	swvt_poll_n(a.cq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 40 + 100u);
	CHECK_EQ(swvt_verify(a.buf + 40, 100, 99), (size_t)-1);
	CHECK_EQ(a.buf[40 + 100], 0xee);
	put(up, 'd');
	CHECK_EQ(get(down), 'q');

	swvt_udep_close(&a);
	swvt_udep_close(&b);
	swvt_udep_close(&c);
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	exit(0);
}

static void send_one(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, uint8_t *src,
		     struct ibv_ah *ah, uint32_t qpn, uint32_t len, uint32_t seed, uint32_t imm)
{
	swvt_fill(src, len, seed);
	struct ibv_sge sge = {(uintptr_t)src, len, mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED,
				 .imm_data = htonl(imm)},
			   *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = QKEY;
	CHECK_OK(ibv_post_send(qp, &wr, &bad));
	struct ibv_wc wc;
	swvt_poll_n(cq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_SUCCESS);
}

int main(void)
{
	/* Groups of this run alone; the two MGIDs differ only outside the last three
	 * bytes, so they map to one IPv4 group (239.t.t.t). */
	unsigned tag = (unsigned)getpid() & 0xffffff;
	static const uint8_t prefix[2][6] = {{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff},
					     {0xff, 0x12, 0x60, 0x1b, 0xff, 0xff}};
	for (int m = 0; m < 2; m++) {
		memset(&mgid[m], 0, sizeof(mgid[m]));
		memcpy(mgid[m].raw, prefix[m], sizeof(prefix[m]));
		mgid[m].raw[13] = (uint8_t)(tag >> 16);
		mgid[m].raw[14] = (uint8_t)(tag >> 8);
		mgid[m].raw[15] = (uint8_t)tag;
	}

	int up[2], down[2];
	CHECK_OK(pipe(up));
	CHECK_OK(pipe(down));
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		alarm(60);
		receiver(up[1], down[0]);
	}
	alarm(90);

	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct swvt_udep s;
	swvt_udep_open(&s, ctx, pd, NSLOT, SLOT, QKEY);
	struct hello h = {.qpn = s.qp->qp_num};
	CHECK_EQ(write(down[1], &h, sizeof(h)), (ssize_t)sizeof(h));
	CHECK_EQ(get(up[0]), 'r');

	struct ibv_ah *ah[2];
	for (int m = 0; m < 2; m++) {
		struct ibv_ah_attr aa = {.is_global = 1, .dlid = mlid, .port_num = 1};
		aa.grh.dgid = mgid[m];
		aa.grh.hop_limit = 1;
		ah[m] = ibv_create_ah(pd, &aa);
		CHECK_PTR(ah[m]);
	}
	for (unsigned i = 0; i < 2 * NMSG; i++)
		send_one(s.qp, s.cq, s.mr, s.buf + (size_t)(16 + i) * SLOT, ah[i % 2], 0xffffff,
			 msg_len(i), 7000 + i, i);

	struct hello back;
	CHECK_EQ(read(up[0], &back, sizeof(back)), (ssize_t)sizeof(back));
	struct ibv_ah_attr ua;
	memset(&ua, 0, sizeof(ua));
	ua.port_num = 1;
	struct ibv_port_attr pa;
	CHECK_OK(ibv_query_port(ctx, 1, &pa));
	ua.dlid = pa.lid;
	struct ibv_ah *uah = ibv_create_ah(pd, &ua);
	CHECK_PTR(uah);
	send_one(s.qp, s.cq, s.mr, s.buf + (size_t)30 * SLOT, uah, back.uc_qpn, 100, 99, 0);
	CHECK_EQ(get(up[0]), 'd');
	put(down[1], 'q');

	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_OK(ibv_destroy_ah(uah));
	for (int m = 0; m < 2; m++)
		CHECK_OK(ibv_destroy_ah(ah[m]));
	swvt_udep_close(&s);
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	printf("two MGIDs on one IP group: each QP receives only its own MGID's datagrams: ok\n");
	return 0;
}
