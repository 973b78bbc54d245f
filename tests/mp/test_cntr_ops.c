/*
 * Completion counters over the real UDP path, two processes, RC: for every
 * operation kind, N operations (signaled and unsignaled mixed, sizes from 0 to
 * several MTUs) leave exactly N (or exactly their bytes, for BYTES counters) on the
 * counter owning that kind, on each side, and nothing on any other counter; CQEs
 * appear only for the signaled ones. Then all again with 5% loss and duplicates.
 */
#include <arpa/inet.h>

#include "test_cntr_util.h"

#define N   64
#define TMO 20000

/* Buffer layout (both sides) */
#define SRC_OFF   0u                 /* outgoing payloads, slot i at + i * SLOT */
#define RECV_OFF  (1u << 20)         /* receive buffers */
#define WRITE_OFF (2u << 20)         /* RDMA WRITE targets */
#define READ_OFF  (3u << 20)         /* RDMA READ: remote source here, local destination */
#define ATOM_OFF  (4u << 20)         /* atomic words */
#define SLOT      8192u
#define BUF_SIZE  (5u << 20)

static uint32_t size_of(int i)
{
	return (uint32_t)(i * 797) % 5000; /* 0 .. 4999: zero, sub-MTU and multi-packet */
}

static bool signaled(int i)
{
	return i % 3 == 0;
}

static int nsignaled(void)
{
	int s = 0;
	for (int i = 0; i < N; i++)
		s += signaled(i);
	return s;
}

struct ctx {
	enum ibv_comp_cntr_type type;
};

static uint64_t amount(const struct ctx *x, uint64_t bytes)
{
	return x->type == IBV_COMP_CNTR_TYPE_BYTES ? bytes : 1;
}

static void post_recvs(struct swvt *t)
{
	for (int i = 0; i < N; i++)
		swvt_post_recv(t, 500 + (uint64_t)i, RECV_OFF + (uint64_t)i * SLOT, SLOT);
}

/* Requester: post N operations of 'op', then wait for the signaled CQEs only. */
static void post_ops(struct swvt *t, enum ibv_wr_opcode op, uint32_t seed)
{
	for (int i = 0; i < N; i++) {
		uint32_t len = size_of(i);
		uint64_t off = SRC_OFF + (uint64_t)i * SLOT, roff = 0;
		struct ibv_sge sge = {(uintptr_t)t->buf + off, len, t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					 .opcode = op,
					 .send_flags = signaled(i) ? IBV_SEND_SIGNALED : 0}, *bad;
		switch (op) {
		case IBV_WR_SEND:
		case IBV_WR_SEND_WITH_IMM:
			swvt_fill(t->buf + off, len, seed + (uint32_t)i);
			wr.imm_data = htonl((uint32_t)i);
			break;
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			swvt_fill(t->buf + off, len, seed + (uint32_t)i);
			roff = WRITE_OFF + (uint64_t)i * SLOT;
			wr.imm_data = htonl((uint32_t)i);
			break;
		case IBV_WR_RDMA_READ:
			sge.addr = (uintptr_t)t->buf + READ_OFF + (uint64_t)i * SLOT;
			roff = READ_OFF + (uint64_t)i * SLOT;
			break;
		default: /* atomics */
			sge.addr = (uintptr_t)t->buf + SRC_OFF + (uint64_t)i * 8;
			sge.length = 8;
			roff = ATOM_OFF + (uint64_t)(i % 8) * 8;
			wr.wr.atomic.compare_add = 1;
			wr.wr.atomic.swap = 5;
			break;
		}
		if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			wr.wr.atomic.remote_addr = t->remote.addr + roff;
			wr.wr.atomic.rkey = t->remote.rkey;
		} else {
			wr.wr.rdma.remote_addr = t->remote.addr + roff;
			wr.wr.rdma.rkey = t->remote.rkey;
		}
		CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	}
	struct ibv_wc wc[N];
	swvt_poll_n(t->scq, wc, nsignaled(), TMO);
	for (int i = 0; i < nsignaled(); i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK(signaled((int)wc[i].wr_id));
	}
	swvt_expect_empty(t->scq, 5);
}

/* Responder: collect the N receive CQEs; return the sum of byte_len. */
static uint64_t poll_recvs(struct swvt *t, uint32_t seed, bool check_data)
{
	struct ibv_wc wc[N];
	uint64_t bytes = 0;
	swvt_poll_n(t->rcq, wc, N, TMO);
	for (int i = 0; i < N; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		int idx = (int)(wc[i].wr_id - 500);
		CHECK_EQ(wc[i].byte_len, size_of(idx));
		bytes += wc[i].byte_len;
		if (check_data)
			CHECK_EQ(swvt_verify(t->buf + RECV_OFF + (uint64_t)idx * SLOT, size_of(idx),
					     seed + (uint32_t)idx),
				 (size_t)-1);
	}
	return bytes;
}

static uint64_t total_bytes(void)
{
	uint64_t b = 0;
	for (int i = 0; i < N; i++)
		b += size_of(i);
	return b;
}

static void side(struct swvt *t, void *arg)
{
	const struct ctx *x = arg;
	const bool req = t->role == 0; /* the parent is the requester, except in the last phase */
	struct cntr_side s;
	char where[64];

	/* QP is in INIT (stop_at): attach, then connect. */
	cntr_attach_all(t, &s, x->type);
	swvt_connect(t);

	/* 1. SEND and SEND_WITH_IMM, parent -> child */
	for (int imm = 0; imm < 2; imm++) {
		uint32_t seed = 1000 + (uint32_t)imm * 100;
		if (!req)
			post_recvs(t);
		swvt_barrier(t);
		if (req) {
			post_ops(t, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, seed);
			s.exp[K_SEND] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? total_bytes() : N;
		} else {
			uint64_t b = poll_recvs(t, seed, true);
			s.exp[K_RECV] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? b : N;
		}
		snprintf(where, sizeof(where), "SEND%s", imm ? "_WITH_IMM" : "");
		cntr_check_side(&s, where, TMO);
		swvt_barrier(t);
	}

	/* 2. RDMA WRITE, parent -> child: no receive consumed, no CQE at the target */
	swvt_barrier(t);
	if (req) {
		post_ops(t, IBV_WR_RDMA_WRITE, 2000);
		s.exp[K_WR] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? total_bytes() : N;
	} else {
		s.exp[K_RWR] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? total_bytes() : N;
	}
	cntr_check_side(&s, "RDMA_WRITE", TMO);
	if (!req) {
		/* Count reached => all data in place (comp-cntr.md visibility rule). */
		for (int i = 0; i < N; i++)
			CHECK_EQ(swvt_verify(t->buf + WRITE_OFF + (uint64_t)i * SLOT, size_of(i),
					     2000 + (uint32_t)i),
				 (size_t)-1);
		swvt_expect_empty(t->rcq, 5);
	}
	swvt_barrier(t);

	/* 3. RDMA WRITE_WITH_IMM: counted as REMOTE_RDMA_WRITE and as RECV at the target */
	if (!req)
		post_recvs(t);
	swvt_barrier(t);
	if (req) {
		post_ops(t, IBV_WR_RDMA_WRITE_WITH_IMM, 3000);
		s.exp[K_WR] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? total_bytes() : N;
	} else {
		uint64_t b = poll_recvs(t, 0, false);
		s.exp[K_RECV] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? b : N;
		s.exp[K_RWR] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? total_bytes() : N;
	}
	cntr_check_side(&s, "RDMA_WRITE_WITH_IMM", TMO);
	swvt_barrier(t);

	/* 4. RDMA READ, parent reads the child's READ area */
	if (!req)
		for (int i = 0; i < N; i++)
			swvt_fill(t->buf + READ_OFF + (uint64_t)i * SLOT, size_of(i), 4000 + (uint32_t)i);
	if (!req)
		cntr_publish_local_writes(t);
	swvt_barrier(t);
	if (req) {
		post_ops(t, IBV_WR_RDMA_READ, 0);
		s.exp[K_RD] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? total_bytes() : N;
	} else {
		s.exp[K_RRD] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? total_bytes() : N;
	}
	cntr_check_side(&s, "RDMA_READ", TMO);
	if (req)
		for (int i = 0; i < N; i++)
			CHECK_EQ(swvt_verify(t->buf + READ_OFF + (uint64_t)i * SLOT, size_of(i),
					     4000 + (uint32_t)i),
				 (size_t)-1);
	swvt_barrier(t);

	/* 5. Atomics, compare-and-swap and fetch-and-add alternating */
	swvt_barrier(t);
	if (req) {
		post_ops(t, IBV_WR_ATOMIC_FETCH_AND_ADD, 0);
		post_ops(t, IBV_WR_ATOMIC_CMP_AND_SWP, 0);
		s.exp[K_AT] += amount(x, 8) * 2 * N;
	} else {
		s.exp[K_RAT] += amount(x, 8) * 2 * N;
	}
	cntr_check_side(&s, "ATOMIC", TMO);
	swvt_barrier(t);

	/* 6. SEND the other way: the child is the requester now */
	if (req)
		post_recvs(t);
	swvt_barrier(t);
	if (!req) {
		post_ops(t, IBV_WR_SEND, 6000);
		s.exp[K_SEND] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? total_bytes() : N;
	} else {
		uint64_t b = poll_recvs(t, 6000, true);
		s.exp[K_RECV] += x->type == IBV_COMP_CNTR_TYPE_BYTES ? b : N;
	}
	cntr_check_side(&s, "SEND (reverse)", TMO);
	swvt_barrier(t);

	/* Quiet period: nothing changes afterwards (no late double counting from
	 * retransmissions or duplicates). */
	usleep(100000);
	cntr_check_side(&s, "after quiet period", TMO);
	/* Counters are released with the context at teardown (the QP keeps them
	 * attached until then). */
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.stop_at = IBV_QPS_INIT;
	o.buf_size = BUF_SIZE;
	o.cqe = 1024;

	static struct ctx wrs = {IBV_COMP_CNTR_TYPE_WRS}, bytes = {IBV_COMP_CNTR_TYPE_BYTES};
	printf("WRS counters\n");
	if (cntr_run_plain_and_faulty(&o, side, side, &wrs))
		return 1;
	printf("BYTES counters\n");
	if (cntr_run_plain_and_faulty(&o, side, side, &bytes))
		return 1;
	return 0;
}
