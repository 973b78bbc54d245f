/*
 * UC between two processes: SEND and RDMA WRITE, with and without immediate, at sizes
 * around and far beyond the path MTU (segmented into FIRST/MIDDLE/LAST, never
 * acknowledged), checked byte for byte; send completions once the last packet is on the
 * wire; a SEND that finds no receive is lost, not retried (no RNR on UC); READ and atomics
 * refused at post (EINVAL); unsignaled WRs; exact SEND / RECV / RDMA_WRITE /
 * REMOTE_RDMA_WRITE counters on both sides. parent = requester, child = responder.
 */
#include <arpa/inet.h>

#include "harness.h"
#include "test_uu_util.h"

#define TMO 10000
#define WOFF (256u * 1024) /* WRITE target area in the responder's buffer */

static const uint32_t sizes[] = {0, 1, 7, 1023, 1024, 1025, 4096, 10000, 65536};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void post_one(struct swvt *t, uint64_t wr_id, enum ibv_wr_opcode op, uint64_t off,
		     uint32_t len, uint64_t roff, unsigned flags, uint32_t immv)
{
	struct ibv_sge sge = {(uintptr_t)t->buf + off, len, t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = flags, .imm_data = htonl(immv)}, *bad = NULL;
	wr.wr.rdma.remote_addr = t->remote.addr + roff;
	wr.wr.rdma.rkey = t->remote.rkey;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
}

static void wait_send(struct swvt *t, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len)
{
	struct ibv_wc wc;
	swvt_poll_n(t->scq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, wr_id);
	CHECK_EQ(wc.opcode, op);
	CHECK_EQ(wc.byte_len, len);
	CHECK_EQ(wc.qp_num, t->qp->qp_num);
}

static void requester(struct swvt *t, void *arg)
{
	struct uu_cntrs u;
	uint32_t seed = 1000;
	(void)arg;

	uu_attach(t, &u);
	swvt_connect(t);

	/* 1. SEND / SEND_WITH_IMM at every size. */
	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		bool imm = i & 1;
		swvt_fill(t->buf, sizes[i], seed);
		swvt_barrier(t); /* receive posted */
		post_one(t, 100 + i, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, 0, sizes[i], 0,
			 IBV_SEND_SIGNALED, 0xc000 + i);
		wait_send(t, 100 + i, IBV_WC_SEND, sizes[i]);
		u.exp[U_SEND]++;
		swvt_barrier(t); /* responder verified */
	}

	/* 2. RDMA WRITE / WRITE_WITH_IMM at every size. */
	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		bool imm = i & 1;
		swvt_fill(t->buf, sizes[i], seed);
		swvt_barrier(t);
		post_one(t, 200 + i, imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, 0,
			 sizes[i], WOFF, IBV_SEND_SIGNALED, 0xd000 + i);
		wait_send(t, 200 + i, IBV_WC_RDMA_WRITE, sizes[i]);
		u.exp[U_WR]++;
		swvt_barrier(t);
	}

	/* 3. No receive posted: the SEND is lost (UC has no RNR); the next one lands. */
	swvt_fill(t->buf, 3000, 300);
	swvt_barrier(t); /* nothing posted on purpose */
	post_one(t, 300, IBV_WR_SEND, 0, 3000, 0, IBV_SEND_SIGNALED, 0);
	wait_send(t, 300, IBV_WC_SEND, 3000);
	swvt_barrier(t); /* responder saw nothing, posts now */
	swvt_barrier(t);
	swvt_fill(t->buf + 8192, 3000, 301);
	post_one(t, 301, IBV_WR_SEND, 8192, 3000, 0, IBV_SEND_SIGNALED, 0);
	wait_send(t, 301, IBV_WC_SEND, 3000);
	u.exp[U_SEND] += 2;
	swvt_barrier(t);

	/* 4. Unsignaled: a mixed chain of 8, only the last signaled; all count. */
	{
		struct ibv_send_wr wrs[8], *bad = NULL;
		struct ibv_sge sge[8];
		for (int i = 0; i < 8; i++) {
			uint32_t len = 2000 + 100 * (uint32_t)i;
			swvt_fill(t->buf + (size_t)i * 4096, len, 400 + (uint32_t)i);
			sge[i] = (struct ibv_sge){(uintptr_t)t->buf + (size_t)i * 4096, len, t->mr->lkey};
			wrs[i] = (struct ibv_send_wr){
				.wr_id = 400 + (uint64_t)i, .sg_list = &sge[i], .num_sge = 1,
				.opcode = (i & 1) ? IBV_WR_RDMA_WRITE : IBV_WR_SEND,
				.send_flags = i == 7 ? IBV_SEND_SIGNALED : 0,
				.next = i < 7 ? &wrs[i + 1] : NULL};
			wrs[i].wr.rdma.remote_addr = t->remote.addr + WOFF + (uint64_t)i * 4096;
			wrs[i].wr.rdma.rkey = t->remote.rkey;
		}
		swvt_barrier(t); /* four receives posted */
		CHECK_OK(ibv_post_send(t->qp, wrs, &bad));
		wait_send(t, 407, IBV_WC_RDMA_WRITE, 2700);
		swvt_expect_empty(t->scq, 50);
		u.exp[U_SEND] += 4;
		u.exp[U_WR] += 4;
		swvt_barrier(t);
	}

	/* 5. What UC cannot do is refused at post. (UC has the local operations, as rxe:
	 * LOCAL_INV and BIND_MW are accepted; this BIND_MW is refused for the window it
	 * lacks.) */
	static const enum ibv_wr_opcode not_uc[] = {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
						    IBV_WR_ATOMIC_FETCH_AND_ADD,
						    IBV_WR_SEND_WITH_INV, IBV_WR_BIND_MW};
	for (unsigned i = 0; i < sizeof(not_uc) / sizeof(not_uc[0]); i++) {
		struct ibv_sge sge = {(uintptr_t)t->buf, 8, t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 500 + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = not_uc[i], .send_flags = IBV_SEND_SIGNALED},
				   *bad = NULL;
		wr.wr.atomic.remote_addr = t->remote.addr;
		wr.wr.atomic.rkey = t->remote.rkey;
		CHECK_EQ(ibv_post_send(t->qp, &wr, &bad), EINVAL);
		CHECK(bad == &wr);
	}
	swvt_expect_empty(t->scq, 50);

	/* 6. Counters. */
	uu_check(&u, "requester", TMO);
	swvt_barrier(t);
	uu_release_after_qp(t, &u);
}

static void responder(struct swvt *t, void *arg)
{
	struct uu_cntrs u;
	struct ibv_wc wc[8];
	uint32_t seed = 1000;
	(void)arg;

	uu_attach(t, &u);
	swvt_connect(t);

	/* 1 */
	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		bool imm = i & 1;
		memset(t->buf, 0xee, sizes[i] + 16);
		swvt_post_recv(t, 100 + i, 0, sizes[i] + 16);
		swvt_barrier(t);
		swvt_poll_n(t->rcq, wc, 1, TMO);
		CHECK_WC(wc[0], IBV_WC_SUCCESS);
		CHECK_EQ(wc[0].wr_id, 100 + i);
		CHECK_EQ(wc[0].opcode, IBV_WC_RECV);
		CHECK_EQ(wc[0].byte_len, sizes[i]);
		CHECK_EQ(wc[0].qp_num, t->qp->qp_num);
		CHECK_EQ(wc[0].src_qp, t->remote.qpn);
		CHECK_EQ(!!(wc[0].wc_flags & IBV_WC_WITH_IMM), imm);
		if (imm)
			CHECK_EQ(ntohl(wc[0].imm_data), 0xc000 + i);
		CHECK_EQ(swvt_verify(t->buf, sizes[i], seed), (size_t)-1);
		CHECK_EQ(t->buf[sizes[i]], 0xee);
		u.exp[U_RECV]++;
		swvt_barrier(t);
	}

	/* 2: plain WRITEs are seen through the REMOTE_RDMA_WRITE counter (a count of N
	 * makes the N messages' data visible); WRITE_WITH_IMM also through a receive. */
	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		bool imm = i & 1;
		memset(t->buf + WOFF, 0xee, sizes[i] + 16);
		if (imm)
			swvt_post_recv(t, 200 + i, 0, 16);
		swvt_barrier(t);
		u.exp[U_RWR]++;
		CHECK_OK(swv_comp_cntr_wait(u.c[U_RWR], u.exp[U_RWR], TMO));
		if (imm) {
			swvt_poll_n(t->rcq, wc, 1, TMO);
			CHECK_WC(wc[0], IBV_WC_SUCCESS);
			CHECK_EQ(wc[0].wr_id, 200 + i);
			CHECK_EQ(wc[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
			CHECK_EQ(wc[0].byte_len, sizes[i]);
			CHECK_EQ(ntohl(wc[0].imm_data), 0xd000 + i);
			u.exp[U_RECV]++;
		}
		CHECK_EQ(swvt_verify(t->buf + WOFF, sizes[i], seed), (size_t)-1);
		CHECK_EQ(t->buf[WOFF + sizes[i]], 0xee);
		swvt_barrier(t);
	}
	swvt_expect_empty(t->rcq, 20);

	/* 3 */
	swvt_barrier(t);
	swvt_barrier(t); /* the first SEND is on the wire */
	swvt_expect_empty(t->rcq, 100);
	memset(t->buf, 0xee, 4096);
	swvt_post_recv(t, 301, 0, 4096);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, 1, TMO);
	CHECK_WC(wc[0], IBV_WC_SUCCESS);
	CHECK_EQ(wc[0].wr_id, 301);
	CHECK_EQ(wc[0].byte_len, 3000);
	CHECK_EQ(swvt_verify(t->buf, 3000, 301), (size_t)-1);
	u.exp[U_RECV]++;
	swvt_barrier(t);

	/* 4: SENDs 0, 2, 4, 6 into four receives; WRITEs 1, 3, 5, 7 into WOFF + i*4096 */
	for (int i = 0; i < 8; i += 2)
		swvt_post_recv(t, 400 + (uint64_t)i, (uint64_t)i * 4096, 4096);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, 4, TMO);
	for (int k = 0; k < 4; k++) {
		int i = 2 * k;
		CHECK_WC(wc[k], IBV_WC_SUCCESS);
		CHECK_EQ(wc[k].wr_id, 400 + i);
		CHECK_EQ(wc[k].byte_len, 2000 + 100 * i);
		CHECK_EQ(swvt_verify(t->buf + (size_t)i * 4096, 2000 + 100 * (uint32_t)i, 400 + (uint32_t)i),
			 (size_t)-1);
	}
	u.exp[U_RECV] += 4;
	u.exp[U_RWR] += 4;
	CHECK_OK(swv_comp_cntr_wait(u.c[U_RWR], u.exp[U_RWR], TMO));
	for (int i = 1; i < 8; i += 2)
		CHECK_EQ(swvt_verify(t->buf + WOFF + (size_t)i * 4096, 2000 + 100 * (uint32_t)i,
				     400 + (uint32_t)i),
			 (size_t)-1);
	swvt_barrier(t);

	/* 6 */
	swvt_expect_empty(t->rcq, 20);
	uu_check(&u, "responder", TMO);
	swvt_barrier(t);
	uu_release_after_qp(t, &u);
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.qp_type = IBV_QPT_UC;
	o.path_mtu = IBV_MTU_1024;
	o.stop_at = IBV_QPS_INIT; /* counters attach in INIT, then swvt_connect */
	o.qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	return swvt_run(&o, requester, responder, NULL);
}
