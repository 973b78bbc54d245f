/*
 * The ibv_qp_ex posting API (ibv_wr_*) on a loopback RC pair in one process: every
 * op with its data checked at the peer, every setter, wr_id/wr_flags read at each
 * wr_<op>, batches of mixed ops, and atomicity: a batch that fails in wr_complete
 * (a bad setter, an op the QP was not created with, an op swverbs lacks, too long
 * for the send queue, a bad state) posts nothing at all.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "check.h"
#include "inproc.h"
#include "core/qp.h"

#define BUF_SIZE (1 << 20)
#define TMO_MS   10000
#define ALL_RC_OPS                                                                                 \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |          \
	 IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |                           \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static uint8_t *abuf, *bbuf; /* requester's and responder's memory */
static struct ibv_mr *amr, *bmr;

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void poll_n(struct ibv_wc *wc, int n)
{
	int got = 0;
	uint64_t end = now_ms() + TMO_MS;
	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		CHECK(r >= 0);
		got += r;
		if (!r && now_ms() > end) {
			fprintf(stderr, "timeout: %d of %d completions\n", got, n);
			exit(1);
		}
	}
}

static void expect_empty(int ms)
{
	struct ibv_wc wc;
	uint64_t end = now_ms() + (uint64_t)ms;
	while (now_ms() < end)
		CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);
}

/* The completion with this wr_id among wc[0..n) (order between the two QPs' CQEs
 * on the shared CQ is not fixed). */
static struct ibv_wc *find(struct ibv_wc *wc, int n, uint64_t wr_id)
{
	for (int i = 0; i < n; i++)
		if (wc[i].wr_id == wr_id)
			return &wc[i];
	fprintf(stderr, "no completion with wr_id %llu\n", (unsigned long long)wr_id);
	exit(1);
}

static struct ibv_qp *make_qp(uint64_t ops, uint32_t send_wr, uint32_t sge, uint32_t inl)
{
	struct ibv_qp_cap cap = {.max_send_wr = send_wr,
				 .max_recv_wr = 64,
				 .max_send_sge = sge,
				 .max_recv_sge = 4,
				 .max_inline_data = inl};
	return swvt_rc_qp_ex(ctx, pd, cq, cap, ops);
}

static void post_recv(struct ibv_qp *qp, uint64_t wr_id, uint8_t *p, uint32_t len)
{
	struct ibv_sge s = {(uintptr_t)p, len, bmr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1}, *bad;
	CHECK_OK(ibv_post_recv(qp, &wr, &bad));
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static uint32_t sq_used(struct ibv_qp *qp)
{
	struct swv_qp *q = to_swv_qp(qp);
	pthread_mutex_lock(&q->lock);
	uint32_t n = swv_wq_used(&q->sq);
	pthread_mutex_unlock(&q->lock);
	return n;
}

/* One signaled SEND of abuf[0, len), alone in its batch. */
static void send_one(struct ibv_qp_ex *x, uint64_t wr_id, uint32_t len)
{
	ibv_wr_start(x);
	x->wr_id = wr_id;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, len);
	CHECK_OK(ibv_wr_complete(x));
}

/* ---- every op, every setter ---- */

static void test_ops(struct ibv_qp *a, struct ibv_qp *b)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	struct ibv_wc wc[8];

	/* SEND from one SGE. */
	fill(abuf, 3000, 1);
	post_recv(b, 100, bbuf, 4096);
	send_one(x, 1, 3000);
	poll_n(wc, 2);
	struct ibv_wc *s = find(wc, 2, 1), *r = find(wc, 2, 100);
	CHECK_EQ(s->status, IBV_WC_SUCCESS);
	CHECK_EQ(s->opcode, IBV_WC_SEND);
	CHECK_EQ(s->qp_num, a->qp_num);
	CHECK_EQ(r->status, IBV_WC_SUCCESS);
	CHECK_EQ(r->opcode, IBV_WC_RECV);
	CHECK_EQ(r->byte_len, 3000);
	CHECK(memcmp(abuf, bbuf, 3000) == 0);

	/* SEND_WITH_IMM, inline: the source is scribbled right after the setter, before
	 * wr_complete; the peer must get the bytes as they were at the setter. */
	uint8_t src[48];
	fill(src, sizeof(src), 9);
	uint8_t want[48];
	memcpy(want, src, sizeof(src));
	post_recv(b, 101, bbuf, 4096);
	ibv_wr_start(x);
	x->wr_id = 2;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(x, htonl(0xabcd1234));
	ibv_wr_set_inline_data(x, src, sizeof(src));
	memset(src, 0, sizeof(src));
	CHECK_OK(ibv_wr_complete(x));
	poll_n(wc, 2);
	r = find(wc, 2, 101);
	CHECK_EQ(find(wc, 2, 2)->status, IBV_WC_SUCCESS);
	CHECK_EQ(r->opcode, IBV_WC_RECV);
	CHECK(r->wc_flags & IBV_WC_WITH_IMM);
	CHECK_EQ(ntohl(r->imm_data), 0xabcd1234);
	CHECK_EQ(r->byte_len, sizeof(want));
	CHECK(memcmp(bbuf, want, sizeof(want)) == 0);

	/* Inline from a list of three buffers, gathered in order. */
	uint8_t p1[5] = {1, 2, 3, 4, 5}, p2[1] = {6}, p3[10] = {7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	struct ibv_data_buf list[3] = {{p1, 5}, {p2, 1}, {p3, 10}};
	post_recv(b, 102, bbuf, 4096);
	ibv_wr_start(x);
	x->wr_id = 3;
	ibv_wr_send(x);
	ibv_wr_set_inline_data_list(x, 3, list);
	CHECK_OK(ibv_wr_complete(x));
	poll_n(wc, 2);
	CHECK_EQ(find(wc, 2, 102)->byte_len, 16);
	for (int i = 0; i < 16; i++)
		CHECK_EQ(bbuf[i], i + 1);

	/* RDMA WRITE gathered from an SGE list (three pieces, across an MTU). */
	fill(abuf, 5000, 3);
	memset(bbuf, 0, 8192);
	struct ibv_sge g[3] = {{(uintptr_t)abuf, 100, amr->lkey},
			       {(uintptr_t)abuf + 100, 2900, amr->lkey},
			       {(uintptr_t)abuf + 3000, 2000, amr->lkey}};
	ibv_wr_start(x);
	x->wr_id = 4;
	ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)bbuf + 16);
	ibv_wr_set_sge_list(x, 3, g);
	CHECK_OK(ibv_wr_complete(x));
	poll_n(wc, 1);
	CHECK_EQ(wc[0].wr_id, 4);
	CHECK_EQ(wc[0].opcode, IBV_WC_RDMA_WRITE);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK(memcmp(bbuf + 16, abuf, 5000) == 0);
	CHECK_EQ(bbuf[15], 0);
	CHECK_EQ(bbuf[16 + 5000], 0);

	/* RDMA WRITE_WITH_IMM: the peer consumes a receive and sees the immediate. */
	post_recv(b, 103, bbuf, 0);
	fill(abuf, 64, 5);
	ibv_wr_start(x);
	x->wr_id = 5;
	ibv_wr_rdma_write_imm(x, bmr->rkey, (uintptr_t)bbuf + 9000, htonl(77));
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 64);
	CHECK_OK(ibv_wr_complete(x));
	poll_n(wc, 2);
	r = find(wc, 2, 103);
	CHECK_EQ(r->opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(ntohl(r->imm_data), 77);
	CHECK_EQ(find(wc, 2, 5)->opcode, IBV_WC_RDMA_WRITE);
	CHECK(memcmp(bbuf + 9000, abuf, 64) == 0);

	/* RDMA READ scattered into two pieces. */
	fill(bbuf + 20000, 3000, 11);
	memset(abuf, 0, 8192);
	struct ibv_sge rg[2] = {{(uintptr_t)abuf + 10, 1000, amr->lkey},
				{(uintptr_t)abuf + 4000, 2000, amr->lkey}};
	ibv_wr_start(x);
	x->wr_id = 6;
	ibv_wr_rdma_read(x, bmr->rkey, (uintptr_t)bbuf + 20000);
	ibv_wr_set_sge_list(x, 2, rg);
	CHECK_OK(ibv_wr_complete(x));
	poll_n(wc, 1);
	CHECK_EQ(wc[0].wr_id, 6);
	CHECK_EQ(wc[0].opcode, IBV_WC_RDMA_READ);
	CHECK_EQ(wc[0].byte_len, 3000);
	CHECK(memcmp(abuf + 10, bbuf + 20000, 1000) == 0);
	CHECK(memcmp(abuf + 4000, bbuf + 21000, 2000) == 0);

	/* Atomics: fetch-and-add then compare-and-swap (hit and miss). */
	uint64_t *target = (uint64_t *)(bbuf + 32768), *old = (uint64_t *)(abuf + 32768);
	*target = 1000;
	ibv_wr_start(x);
	x->wr_id = 7;
	ibv_wr_atomic_fetch_add(x, bmr->rkey, (uintptr_t)target, 5);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)old, 8);
	CHECK_OK(ibv_wr_complete(x));
	poll_n(wc, 1);
	CHECK_EQ(wc[0].opcode, IBV_WC_FETCH_ADD);
	CHECK_EQ(*old, 1000);
	CHECK_EQ(*target, 1005);
	ibv_wr_start(x);
	x->wr_id = 8;
	ibv_wr_atomic_cmp_swp(x, bmr->rkey, (uintptr_t)target, 1005, 42);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)old, 8);
	x->wr_id = 9;
	ibv_wr_atomic_cmp_swp(x, bmr->rkey, (uintptr_t)target, 1005, 43); /* misses */
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)old + 8, 8);
	CHECK_OK(ibv_wr_complete(x));
	poll_n(wc, 2);
	CHECK_EQ(wc[0].wr_id, 8);
	CHECK_EQ(wc[0].opcode, IBV_WC_COMP_SWAP);
	CHECK_EQ(wc[1].wr_id, 9);
	CHECK_EQ(old[0], 1005);
	CHECK_EQ(old[1], 42);
	CHECK_EQ(*target, 42);

	/* Zero-length WRITE and an empty batch. */
	ibv_wr_start(x);
	x->wr_id = 10;
	ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 0);
	CHECK_OK(ibv_wr_complete(x));
	poll_n(wc, 1);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(wc[0].byte_len, 0);
	ibv_wr_start(x);
	CHECK_OK(ibv_wr_complete(x));
	expect_empty(50);
	printf("ops: send, send_imm, inline (one and list), write (list), write_imm, read, "
	       "atomics ok\n");
}

/* wr_id and wr_flags are taken at each wr_<op>; later changes do not reach it. */
static void test_batch(struct ibv_qp *a, struct ibv_qp *b)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	struct ibv_wc wc[16];

	post_recv(b, 200, bbuf, 4096);
	post_recv(b, 201, bbuf + 4096, 4096);
	fill(abuf, 256, 21);
	*(uint64_t *)(bbuf + 40000) = 7;
	ibv_wr_start(x);
	x->wr_id = 20;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 100);
	x->wr_id = 21;
	x->wr_flags = 0; /* unsignaled: no CQE */
	ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)bbuf + 30000);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 256);
	x->wr_id = 22;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
	ibv_wr_rdma_read(x, bmr->rkey, (uintptr_t)bbuf + 30000);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf + 1000, 256);
	x->wr_id = 23;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(x, bmr->rkey, (uintptr_t)bbuf + 40000, 1);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf + 2000, 8);
	x->wr_id = 24;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
	ibv_wr_send_imm(x, htonl(5));
	ibv_wr_set_inline_data(x, abuf, 10);
	x->wr_id = 999; /* after the last op: reaches nothing */
	x->wr_flags = 0;
	CHECK_OK(ibv_wr_complete(x));
	poll_n(wc, 6);
	/* The requester's CQEs come in posting order. */
	uint64_t order[4];
	int k = 0;
	for (int i = 0; i < 6; i++)
		if (wc[i].qp_num == a->qp_num) {
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
			order[k++] = wc[i].wr_id;
		}
	CHECK_EQ(k, 4);
	CHECK(order[0] == 20 && order[1] == 22 && order[2] == 23 && order[3] == 24);
	CHECK_EQ(find(wc, 6, 201)->byte_len, 10);
	CHECK(memcmp(abuf + 1000, abuf, 256) == 0); /* READ saw the WRITE (fence) */
	CHECK_EQ(*(uint64_t *)(abuf + 2000), 7);
	CHECK_EQ(*(uint64_t *)(bbuf + 40000), 8);
	expect_empty(50);
	printf("batch: 5 mixed WRs, wr_id/wr_flags per op, unsignaled skipped ok\n");
}

/* What expect_nothing_posted looks at: 0xee over bbuf[50000, 50064), where the batches
 * under test write, and a receive (wr_id 250) on b. */
static void arm_nothing_posted(struct ibv_qp *b)
{
	memset(bbuf + 50000, 0xee, 64);
	post_recv(b, 250, bbuf + 60000, 4096);
}

/* A batch that fails in wr_complete posts nothing: no CQE, no remote change, the
 * posted receive is still there for the next good SEND. */
static void expect_nothing_posted(struct ibv_qp *a, struct ibv_qp *b)
{
	struct ibv_wc wc[2];
	expect_empty(100);
	CHECK_EQ(sq_used(a), 0);
	for (int i = 0; i < 64; i++)
		CHECK_EQ(bbuf[50000 + i], 0xee);
	/* The receive posted before the bad batch is consumed by this SEND. */
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	send_one(x, 300, 8);
	poll_n(wc, 2);
	CHECK_EQ(find(wc, 2, 250)->status, IBV_WC_SUCCESS);
	CHECK_EQ(find(wc, 2, 300)->status, IBV_WC_SUCCESS);
	expect_empty(20);
}

/* Stage a good SEND and a good WRITE (into bbuf + 50000), then 'bad', then another
 * good WRITE: wr_complete must return 'want' and post none of them. */
static void bad_batch(struct ibv_qp *a, struct ibv_qp *b, void (*bad)(struct ibv_qp_ex *),
		      int want, const char *what)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	arm_nothing_posted(b);
	fill(abuf, 64, 33);
	ibv_wr_start(x);
	x->wr_id = 240;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 64);
	x->wr_id = 241;
	ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)bbuf + 50000);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 64);
	bad(x);
	x->wr_id = 243;
	ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)bbuf + 50000);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 32);
	int rc = ibv_wr_complete(x);
	if (rc != want) {
		fprintf(stderr, "bad batch (%s): wr_complete %d, expected %d\n", what, rc, want);
		exit(1);
	}
	expect_nothing_posted(a, b);
}

static struct ibv_mw_bind_info bind_info;
static uint64_t atomic_wr_data;
static void bad_sge_list(struct ibv_qp_ex *x)
{
	struct ibv_sge g[5] = {{(uintptr_t)abuf, 1, amr->lkey}, {(uintptr_t)abuf, 1, amr->lkey},
			       {(uintptr_t)abuf, 1, amr->lkey}, {(uintptr_t)abuf, 1, amr->lkey},
			       {(uintptr_t)abuf, 1, amr->lkey}};
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 5, g); /* max_send_sge is 4 */
}
static void bad_inline_len(struct ibv_qp_ex *x)
{
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, abuf, 4096); /* beyond max_inline_data */
}
static void bad_inline_read(struct ibv_qp_ex *x)
{
	ibv_wr_rdma_read(x, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_inline_data(x, abuf, 8); /* READ writes locally: never inline */
}
static void bad_flags(struct ibv_qp_ex *x)
{
	x->wr_flags = 1u << 20;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 8);
	x->wr_flags = IBV_SEND_SIGNALED;
}
static void bad_atomic_len(struct ibv_qp_ex *x)
{
	ibv_wr_atomic_fetch_add(x, bmr->rkey, (uintptr_t)bbuf + 32768, 1);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 4); /* atomics move 8 bytes */
}
static void bad_ud_addr(struct ibv_qp_ex *x)
{
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, NULL, 1, 2); /* an RC QP has no per-WR address */
}
static void bad_xrc(struct ibv_qp_ex *x)
{
	ibv_wr_send(x);
	ibv_wr_set_xrc_srqn(x, 5);
}
static void bad_setter_first(struct ibv_qp_ex *x)
{
	/* wr_abort/wr_start again, then a setter with no op before it. */
	ibv_wr_abort(x);
	ibv_wr_start(x);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 8);
}
static void bad_bind_mw(struct ibv_qp_ex *x)
{
	ibv_wr_bind_mw(x, NULL, 1, &bind_info);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 8); /* must not land on WR 241 */
}
static void bad_local_inv(struct ibv_qp_ex *x)
{
	ibv_wr_local_inv(x, 1);
}
static void bad_send_inv(struct ibv_qp_ex *x)
{
	ibv_wr_send_inv(x, 1);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 8);
}
static void bad_tso(struct ibv_qp_ex *x)
{
	ibv_wr_send_tso(x, abuf, 14, 1000);
}
static void bad_atomic_write(struct ibv_qp_ex *x)
{
	ibv_wr_atomic_write(x, bmr->rkey, (uintptr_t)bbuf, &atomic_wr_data);
}
static void bad_flush(struct ibv_qp_ex *x)
{
	ibv_wr_flush(x, bmr->rkey, (uintptr_t)bbuf, 8, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
}

static void test_atomicity(struct ibv_qp *a, struct ibv_qp *b)
{
	struct {
		void (*fn)(struct ibv_qp_ex *);
		int err;
		const char *what;
	} cases[] = {
		{bad_sge_list, EINVAL, "too many SGEs"},
		{bad_inline_len, EINVAL, "inline beyond max_inline_data"},
		{bad_inline_read, EINVAL, "inline READ"},
		{bad_flags, EINVAL, "unknown wr_flags bit"},
		{bad_atomic_len, EINVAL, "atomic of 4 bytes"},
		{bad_ud_addr, EINVAL, "wr_set_ud_addr on RC"},
		{bad_xrc, EINVAL, "wr_set_xrc_srqn"}, /* not an XRC send QP */
		{bad_setter_first, EINVAL, "setter before any op"},
		/* memory-window ops exist, but this QP was not created with them */
		{bad_bind_mw, EINVAL, "wr_bind_mw (op not requested)"},
		{bad_local_inv, EINVAL, "wr_local_inv (op not requested)"},
		{bad_send_inv, EINVAL, "wr_send_inv (op not requested)"},
		{bad_tso, EOPNOTSUPP, "wr_send_tso"},
		{bad_atomic_write, EINVAL, "wr_atomic_write (op not requested)"},
		{bad_flush, EINVAL, "wr_flush (op not requested)"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		/* bad_setter_first aborts the good WRs itself: nothing may be posted
		 * either way. */
		bad_batch(a, b, cases[i].fn, cases[i].err, cases[i].what);
	}

	/* wr_abort drops the batch; without wr_start, complete is EINVAL and abort is
	 * harmless. */
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	arm_nothing_posted(b);
	ibv_wr_start(x);
	x->wr_id = 260;
	ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)bbuf + 50000);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 64);
	ibv_wr_abort(x);
	CHECK_EQ(ibv_wr_complete(x), EINVAL);
	ibv_wr_abort(x);
	expect_nothing_posted(a, b);

	/* wr_start again before completing (a misuse): the open batch is dropped, the
	 * thread does not hang on its own builder lock. */
	arm_nothing_posted(b);
	ibv_wr_start(x);
	ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)bbuf + 50000);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 64);
	ibv_wr_start(x);
	CHECK_OK(ibv_wr_complete(x));
	expect_nothing_posted(a, b);
	printf("atomicity: %zu kinds of bad batch post nothing; abort ok\n",
	       sizeof(cases) / sizeof(cases[0]));
}

/* An op the QP was not created with is refused (EINVAL), the batch with it posts
 * nothing; the ops it was created with work. */
static void test_ops_mask(void)
{
	struct ibv_qp *s = make_qp(IBV_QP_EX_WITH_SEND, 8, 1, 0);
	struct ibv_qp *t = make_qp(ALL_RC_OPS, 8, 1, 0);
	swvt_pair_to_init(s);
	swvt_pair_to_init(t);
	swvt_pair_connect(s, t);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(s);
	struct ibv_wc wc[2];
	memset(bbuf + 50000, 0xee, 64);
	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 8);
	ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)bbuf + 50000);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 64);
	CHECK_EQ(ibv_wr_complete(x), EINVAL);
	expect_empty(100);
	CHECK_EQ(bbuf[50000], 0xee);
	ibv_wr_start(x);
	ibv_wr_send_imm(x, 0);
	CHECK_EQ(ibv_wr_complete(x), EINVAL);
	ibv_wr_start(x);
	ibv_wr_atomic_cmp_swp(x, bmr->rkey, (uintptr_t)bbuf, 0, 0);
	CHECK_EQ(ibv_wr_complete(x), EINVAL);
	/* The op it has. */
	struct ibv_sge sg = {(uintptr_t)bbuf, 64, bmr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 400, .sg_list = &sg, .num_sge = 1}, *badr;
	CHECK_OK(ibv_post_recv(t, &rw, &badr));
	send_one(x, 401, 8);
	poll_n(wc, 2);
	CHECK_EQ(find(wc, 2, 401)->status, IBV_WC_SUCCESS);
	CHECK_OK(ibv_destroy_qp(s));
	CHECK_OK(ibv_destroy_qp(t));
	printf("send_ops_flags: ops not requested are EINVAL, nothing posted\n");
}

/* Stage n signaled SENDs, wr_id first_id, first_id + 1, ..., as one batch; returns what
 * wr_complete says. */
static int send_batch(struct ibv_qp_ex *x, int n, uint64_t first_id)
{
	ibv_wr_start(x);
	for (int i = 0; i < n; i++) {
		x->wr_id = first_id + (uint64_t)i;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(x);
	}
	return ibv_wr_complete(x);
}

/* The send queue's room is checked for the whole batch; longer than max_send_wr is
 * refused while staging; the QP state rules are post_send's. */
static void test_room_and_states(void)
{
	struct ibv_wc wc[16];
	/* d sends to e, which never leaves INIT: d's WRs stay outstanding (timeout 0 =
	 * no ACK timer), so the send queue fills. */
	struct ibv_qp *d = make_qp(ALL_RC_OPS, 8, 1, 0);
	struct ibv_qp *e = make_qp(ALL_RC_OPS, 8, 1, 0);
	swvt_pair_to_init(d);
	swvt_pair_to_init(e);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(d);

	/* INIT: nothing can be posted (EINVAL, as ibv_post_send). */
	CHECK_EQ(send_batch(x, 1, 0), EINVAL);
	swvt_pair_to_rtr(d, e->qp_num);
	swvt_pair_to_rts(d, 0);

	/* Longer than the queue can ever hold: refused while staging. */
	CHECK_EQ(send_batch(x, 9, 0), ENOMEM);
	CHECK_EQ(sq_used(d), 0);

	CHECK_OK(send_batch(x, 6, 500));
	CHECK_EQ(sq_used(d), 6);
	/* Room for 2: a batch of 3 posts nothing, a batch of 2 fits. */
	CHECK_EQ(send_batch(x, 3, 0), ENOMEM);
	CHECK_EQ(sq_used(d), 6);
	CHECK_OK(send_batch(x, 2, 506));
	CHECK_EQ(sq_used(d), 8);
	expect_empty(50);

	/* ERR: everything outstanding flushes, and a batch posted now is accepted and
	 * flushed at once, as ibv_post_send does in ERR. */
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(d, &at, IBV_QP_STATE));
	poll_n(wc, 8);
	for (int i = 0; i < 8; i++) {
		CHECK_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
		CHECK_EQ(wc[i].wr_id, 500 + (uint64_t)i);
	}
	ibv_wr_start(x);
	x->wr_id = 600;
	ibv_wr_send(x);
	x->wr_id = 601;
	ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)bbuf);
	CHECK_OK(ibv_wr_complete(x));
	poll_n(wc, 2);
	CHECK(wc[0].wr_id == 600 && wc[1].wr_id == 601);
	CHECK(wc[0].status == IBV_WC_WR_FLUSH_ERR && wc[1].status == IBV_WC_WR_FLUSH_ERR);
	CHECK_OK(ibv_destroy_qp(d));
	CHECK_OK(ibv_destroy_qp(e));
	printf("room and states: whole-batch ENOMEM, INIT EINVAL, ERR flushes ok\n");
}

static void test_create(void)
{
	/* Every pointer set (the ibv_wr_* inlines call them unchecked); comp_mask of
	 * verbs_qp says VERBS_QP_EX; a QP without send ops has no ibv_qp_ex. */
	struct ibv_qp *q = make_qp(IBV_QP_EX_WITH_SEND, 4, 1, 0);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(q);
	CHECK(x == (struct ibv_qp_ex *)q);
	CHECK_FNS_SET(x, wr_atomic_cmp_swp, 22);
	CHECK(to_swv_qp(q)->verbs_comp_mask & 2u);
	CHECK_OK(ibv_destroy_qp(q));

	struct ibv_qp_init_attr plain = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = 1, .max_recv_wr = 1}};
	q = ibv_create_qp(pd, &plain);
	CHECK_PTR(q);
	CHECK(ibv_qp_to_qp_ex(q) == NULL);
	CHECK_OK(ibv_destroy_qp(q));
	CHECK(ibv_qp_to_qp_ex(NULL) == NULL);

	/* Ops a type cannot do: EOPNOTSUPP (UD has SENDs only, UC no READ/atomics). */
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd, .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE,
	};
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &a) && errno == EOPNOTSUPP);
	a.qp_type = IBV_QPT_UC;
	a.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ;
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &a) && errno == EOPNOTSUPP);
	a.send_ops_flags = IBV_QP_EX_WITH_FLUSH; /* RC only */
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &a) && errno == EOPNOTSUPP);
	a.qp_type = IBV_QPT_RC;
	a.send_ops_flags = IBV_QP_EX_WITH_TSO;
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &a) && errno == EOPNOTSUPP);
	a.send_ops_flags = 1ull << 40;
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &a) && errno == EOPNOTSUPP);
	printf("create: every wr_* set, VERBS_QP_EX, unsupported ops refused\n");
}

int main(void)
{
	ctx = swvt_open_first_device();
	pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	cq = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	CHECK_PTR(cq);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;
	amr = swvt_reg_buf(pd, BUF_SIZE, acc);
	bmr = swvt_reg_buf(pd, BUF_SIZE, acc);
	abuf = amr->addr;
	bbuf = bmr->addr;

	test_create();
	struct ibv_qp *a = make_qp(ALL_RC_OPS, 16, 4, 64);
	struct ibv_qp *b = make_qp(ALL_RC_OPS, 16, 4, 64);
	swvt_pair_to_init(a);
	swvt_pair_to_init(b);
	swvt_pair_connect(a, b);
	test_ops(a, b);
	test_batch(a, b);
	test_atomicity(a, b);
	test_ops_mask();
	test_room_and_states();

	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_qp(b));
	swvt_dereg_buf(amr);
	swvt_dereg_buf(bmr);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	printf("ok\n");
	return 0;
}
