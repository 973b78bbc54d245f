/*
 * RC data path between two processes: SEND (with/without immediate), RDMA WRITE
 * (with/without immediate), RDMA READ, compare-and-swap and fetch-and-add, each
 * checked byte for byte, plus completion fields on both sides.
 */
#include <arpa/inet.h>

#include "harness.h"

#define TMO 10000

/* parent = requester, child = responder for every step; sizes straddle the MTU. */
static const uint32_t sizes[] = {0, 1, 7, 1023, 1024, 1025, 4096, 10000, 65536};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void requester(struct swvt *t, void *arg)
{
	struct ibv_wc wc[4];
	uint32_t seed = 100;

	/* SEND and SEND_WITH_IMM */
	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		swvt_fill(t->buf, sizes[i], seed);
		swvt_barrier(t); /* receive posted */
		struct ibv_sge sge = {(uintptr_t)t->buf, sizes[i], t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1000 + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = (i & 1) ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED,
					 .imm_data = htonl(0xabc000 + i)}, *bad;
		CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
		swvt_poll_n(t->scq, wc, 1, TMO);
		CHECK_WC(wc[0], IBV_WC_SUCCESS);
		CHECK_EQ(wc[0].wr_id, 1000 + i);
		CHECK_EQ(wc[0].opcode, IBV_WC_SEND);
		CHECK_EQ(wc[0].qp_num, t->qp->qp_num);
		swvt_barrier(t); /* receiver verified */
	}

	/* RDMA WRITE and WRITE_WITH_IMM into the peer's buffer at offset 4096 */
	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		swvt_fill(t->buf, sizes[i], seed);
		bool imm = i & 1;
		swvt_barrier(t);
		struct ibv_sge sge = {(uintptr_t)t->buf, sizes[i], t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 2000 + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED,
					 .imm_data = htonl(0xdef000 + i)}, *bad;
		wr.wr.rdma.remote_addr = t->remote.addr + 4096;
		wr.wr.rdma.rkey = t->remote.rkey;
		CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
		swvt_poll_n(t->scq, wc, 1, TMO);
		CHECK_WC(wc[0], IBV_WC_SUCCESS);
		CHECK_EQ(wc[0].wr_id, 2000 + i);
		CHECK_EQ(wc[0].opcode, IBV_WC_RDMA_WRITE);
		swvt_barrier(t);
	}

	/* RDMA READ of the peer's pattern at offset 8192 into ours at offset 4096 */
	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		memset(t->buf + 4096, 0xee, sizes[i] + 16);
		swvt_barrier(t); /* peer filled */
		struct ibv_sge sge = {(uintptr_t)t->buf + 4096, sizes[i], t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 3000 + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_READ,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		wr.wr.rdma.remote_addr = t->remote.addr + 8192;
		wr.wr.rdma.rkey = t->remote.rkey;
		CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
		swvt_poll_n(t->scq, wc, 1, TMO);
		CHECK_WC(wc[0], IBV_WC_SUCCESS);
		CHECK_EQ(wc[0].opcode, IBV_WC_RDMA_READ);
		CHECK_EQ(wc[0].byte_len, sizes[i]);
		CHECK_EQ(swvt_verify(t->buf + 4096, sizes[i], seed), (size_t)-1);
		CHECK_EQ(t->buf[4096 + sizes[i]], 0xee); /* nothing past the SGE */
		swvt_barrier(t);
	}

	/* Atomics on the peer's 8-byte word at offset 64, result into ours at 0 */
	uint64_t *res = (uint64_t *)t->buf;
	struct ibv_sge sge = {(uintptr_t)t->buf, 8, t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 4000, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.atomic.remote_addr = t->remote.addr + 64;
	wr.wr.atomic.rkey = t->remote.rkey;
	wr.wr.atomic.compare_add = 5;
	swvt_barrier(t); /* peer set the word to 1000 */
	*res = 0;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	swvt_poll_n(t->scq, wc, 1, TMO);
	CHECK_WC(wc[0], IBV_WC_SUCCESS);
	CHECK_EQ(wc[0].opcode, IBV_WC_FETCH_ADD);
	CHECK_EQ(*res, 1000);

	/* CAS that fails (compare 1 != 1005): returns the old value, no change */
	wr.wr_id = 4001;
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.compare_add = 1;
	wr.wr.atomic.swap = 77;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	swvt_poll_n(t->scq, wc, 1, TMO);
	CHECK_WC(wc[0], IBV_WC_SUCCESS);
	CHECK_EQ(wc[0].opcode, IBV_WC_COMP_SWAP);
	CHECK_EQ(*res, 1005);
	/* CAS that succeeds */
	wr.wr_id = 4002;
	wr.wr.atomic.compare_add = 1005;
	wr.wr.atomic.swap = 0x1122334455667788ull;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	swvt_poll_n(t->scq, wc, 1, TMO);
	CHECK_WC(wc[0], IBV_WC_SUCCESS);
	CHECK_EQ(*res, 1005);
	swvt_barrier(t); /* peer checks the word */
	(void)arg;
}

static void responder(struct swvt *t, void *arg)
{
	struct ibv_wc wc[4];
	uint32_t seed = 100;

	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		memset(t->buf, 0xee, sizes[i] + 16);
		swvt_post_recv(t, 500 + i, 0, sizes[i] + 16);
		swvt_barrier(t);
		swvt_poll_n(t->rcq, wc, 1, TMO);
		CHECK_WC(wc[0], IBV_WC_SUCCESS);
		CHECK_EQ(wc[0].wr_id, 500 + i);
		CHECK_EQ(wc[0].opcode, IBV_WC_RECV);
		CHECK_EQ(wc[0].byte_len, sizes[i]);
		CHECK_EQ(wc[0].qp_num, t->qp->qp_num);
		CHECK_EQ(wc[0].src_qp, t->remote.qpn);
		if (i & 1) {
			CHECK(wc[0].wc_flags & IBV_WC_WITH_IMM);
			CHECK_EQ(ntohl(wc[0].imm_data), 0xabc000 + i);
		} else {
			CHECK(!(wc[0].wc_flags & IBV_WC_WITH_IMM));
		}
		CHECK_EQ(swvt_verify(t->buf, sizes[i], seed), (size_t)-1);
		CHECK_EQ(t->buf[sizes[i]], 0xee);
		swvt_barrier(t);
	}

	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		bool imm = i & 1;
		memset(t->buf + 4096, 0xee, sizes[i] + 16);
		if (imm)
			swvt_post_recv(t, 600 + i, 0, 0);
		swvt_barrier(t);
		if (imm) {
			swvt_poll_n(t->rcq, wc, 1, TMO);
			CHECK_WC(wc[0], IBV_WC_SUCCESS);
			CHECK_EQ(wc[0].wr_id, 600 + i);
			CHECK_EQ(wc[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
			CHECK(wc[0].wc_flags & IBV_WC_WITH_IMM);
			CHECK_EQ(ntohl(wc[0].imm_data), 0xdef000 + i);
		}
		swvt_barrier(t); /* requester saw its completion: data is placed */
		CHECK_EQ(swvt_verify(t->buf + 4096, sizes[i], seed), (size_t)-1);
		CHECK_EQ(t->buf[4096 + sizes[i]], 0xee);
	}

	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		swvt_fill(t->buf + 8192, sizes[i], seed);
		swvt_barrier(t);
		swvt_barrier(t);
	}

	volatile uint64_t *word = (uint64_t *)(t->buf + 64);
	*word = 1000;
	swvt_barrier(t);
	swvt_barrier(t);
	CHECK_EQ(*word, 0x1122334455667788ull);
	swvt_expect_empty(t->rcq, 10);
	(void)arg;
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	int rc = swvt_run(&o, requester, responder, NULL);
	if (rc)
		return rc;
	/* Again with GID addressing and the smallest and largest MTUs. */
	o.addr_mode = SWVT_ADDR_GID;
	o.path_mtu = IBV_MTU_256;
	rc = swvt_run(&o, requester, responder, NULL);
	if (rc)
		return rc;
	o.addr_mode = SWVT_ADDR_LID;
	o.path_mtu = IBV_MTU_4096;
	rc = swvt_run(&o, requester, responder, NULL);
	if (rc)
		return rc;
	/* And under injected loss, duplication and reordering. */
	setenv("SWVERBS_FAULT", "seed=3,drop=5,dup=2,reorder=2", 0);
	o.path_mtu = IBV_MTU_1024;
	o.timeout = 16; /* finite retries: tolerate a peer unscheduled for ~2 s */
	return swvt_run(&o, requester, responder, NULL);
}
