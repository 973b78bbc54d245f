/*
 * Parent domains between two processes (core/pd.h). Each side makes a parent domain
 * over the harness's PD whose allocators hand out pieces of one arena (counting every
 * call), an extended CQ with it, and an RC QP on it, then runs SENDs both ways and
 * RDMA WRITEs with every byte checked (the MR is on the plain PD: protection is the
 * PD's). The rings are in the arena: posted work requests and completions are found
 * in the pieces handed out for them. At the end every piece was freed once, through
 * the same pair, with the type it was allocated with.
 */
#include <errno.h>
#include <infiniband/swverbs.h>
#include <sys/mman.h>

#include "harness.h"

#define TMO   20000
#define ARENA (4u << 20)
#define NMSG  16

struct piece {
	uint8_t *p;
	size_t len;
	uint64_t type;
	bool freed;
};

struct arena {
	struct ibv_pd *pd;
	uint8_t *base;
	size_t used;
	struct piece pc[16];
	int n, allocs, frees, bad;
};

static void *arena_alloc(struct ibv_pd *pd, void *ctx, size_t size, size_t align, uint64_t type)
{
	struct arena *a = ctx;
	if (pd != a->pd || !align || (align & (align - 1)) || a->n == 16) {
		a->bad++;
		return NULL;
	}
	size_t off = (a->used + align - 1) & ~(align - 1);
	if (off + size > ARENA)
		return NULL;
	a->used = off + size;
	a->allocs++;
	a->pc[a->n++] = (struct piece){a->base + off, size, type, false};
	return a->base + off;
}

static void arena_free(struct ibv_pd *pd, void *ctx, void *ptr, uint64_t type)
{
	struct arena *a = ctx;
	for (int i = 0; i < a->n; i++)
		if (a->pc[i].p == ptr && a->pc[i].type == type && !a->pc[i].freed && pd == a->pd) {
			a->pc[i].freed = true;
			a->frees++;
			return;
		}
	a->bad++;
}

/* Whether the 8 bytes of v occur in a piece of this type. */
static bool in_piece(const struct arena *a, uint64_t type, uint64_t v)
{
	for (int i = 0; i < a->n; i++) {
		if (a->pc[i].type != type)
			continue;
		for (size_t o = 0; o + 8 <= a->pc[i].len; o += 8)
			if (memcmp(a->pc[i].p + o, &v, 8) == 0)
				return true;
	}
	return false;
}

static int count(const struct arena *a, uint64_t type)
{
	int k = 0;
	for (int i = 0; i < a->n; i++)
		k += a->pc[i].type == type;
	return k;
}

static void post_recv(struct ibv_qp *qp, uint64_t wr_id, uint8_t *addr, uint32_t lkey)
{
	struct ibv_sge sge = {(uintptr_t)addr, 1024, lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
	CHECK_OK(ibv_post_recv(qp, &wr, &bad));
}

static void post_send(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, uint8_t *addr,
		      uint32_t lkey, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {(uintptr_t)addr, len, lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	CHECK_OK(ibv_post_send(qp, &wr, &bad));
}

#define WRID(role, i) (0x5057000000000000ull | ((uint64_t)(role) << 32) | (uint64_t)(i))

static void side(struct swvt *t, void *arg)
{
	(void)arg;
	struct arena a;
	memset(&a, 0, sizeof(a));
	a.base = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(a.base != MAP_FAILED);
	memset(a.base, 0xcc, ARENA);
	struct ibv_parent_domain_init_attr pa = {
	    .pd = t->pd,
	    .comp_mask =
		IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
	    .alloc = arena_alloc,
	    .free = arena_free,
	    .pd_context = &a,
	};
	struct ibv_pd *par = ibv_alloc_parent_domain(t->ctx, &pa);
	CHECK_PTR(par);
	a.pd = par;
	struct ibv_cq_init_attr_ex ca = {.cqe = 256,
					 .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
					 .parent_domain = par,
					 .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(t->ctx, &ca);
	CHECK_PTR(cqx);
	struct ibv_cq *cq = ibv_cq_ex_to_cq(cqx);
	CHECK_EQ(count(&a, SWV_RES_TYPE_CQ), 1);

	/* the harness's QP (RESET) gives way to one on the parent domain */
	CHECK_OK(ibv_destroy_qp(t->qp));
	struct ibv_qp_init_attr qa = t->init_attr;
	qa.send_cq = cq;
	qa.recv_cq = cq;
	t->qp = ibv_create_qp(par, &qa);
	CHECK_PTR(t->qp);
	CHECK_EQ(count(&a, SWV_RES_TYPE_QP_SQ), 1);
	CHECK_EQ(count(&a, SWV_RES_TYPE_QP_RQ), 1);
	CHECK_EQ(a.allocs, 3);
	t->local.qpn = t->qp->qp_num;
	swvt_exchange(t);
	swvt_to_init(t);
	for (int i = 0; i < NMSG; i++)
		post_recv(t->qp, WRID(t->role, i), t->buf + 65536 + (size_t)i * 1024, t->mr->lkey);
	/* the receive ring is the allocator's memory */
	CHECK(in_piece(&a, SWV_RES_TYPE_QP_RQ, WRID(t->role, NMSG - 1)));
	swvt_connect(t);

	/* SENDs both ways, then a WRITE each way */
	for (int i = 0; i < NMSG; i++) {
		uint8_t *src = t->buf + (size_t)i * 1024;
		swvt_fill(src, 1000, (uint32_t)(100 * t->role + i));
		post_send(t->qp, WRID(t->role, 100 + i), IBV_WR_SEND, src, t->mr->lkey, 1000, 0, 0);
	}
	CHECK(in_piece(&a, SWV_RES_TYPE_QP_SQ, WRID(t->role, 100 + NMSG - 1)));
	int sends = 0, recvs = 0;
	while (sends < NMSG || recvs < NMSG) {
		struct ibv_wc wc;
		swvt_poll_n(cq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		if (wc.opcode == IBV_WC_RECV) {
			int i = (int)(wc.wr_id & 0xffff);
			CHECK_EQ(wc.wr_id, WRID(t->role, i));
			CHECK_EQ(wc.byte_len, 1000);
			CHECK_EQ(swvt_verify(t->buf + 65536 + (size_t)i * 1024, 1000,
					     (uint32_t)(100 * (1 - t->role) + i)),
				 (size_t)-1);
			recvs++;
		} else {
			CHECK_EQ(wc.wr_id, WRID(t->role, 100 + sends));
			sends++;
		}
	}
	/* completions went through the CQ ring the allocator gave */
	CHECK(in_piece(&a, SWV_RES_TYPE_CQ, WRID(t->role, 100 + NMSG - 1)));
	swvt_barrier(t);

	swvt_fill(t->buf + 200000, 5000, 77 + (uint32_t)t->role);
	post_send(t->qp, WRID(t->role, 500), IBV_WR_RDMA_WRITE, t->buf + 200000, t->mr->lkey, 5000,
		  t->remote.addr + 300000, t->remote.rkey);
	struct ibv_wc wc;
	swvt_poll_n(cq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, WRID(t->role, 500));
	swvt_barrier(t);
	CHECK_EQ(swvt_verify(t->buf + 300000, 5000, 77 + (uint32_t)(1 - t->role)), (size_t)-1);
	swvt_barrier(t);

	/* a resize takes a new ring from the allocator and gives the old one back */
	CHECK_OK(ibv_resize_cq(cq, 1000));
	CHECK_EQ(count(&a, SWV_RES_TYPE_CQ), 2);
	CHECK_EQ(a.frees, 1);
	CHECK_EQ(ibv_dealloc_pd(par), EBUSY);
	CHECK_OK(ibv_destroy_qp(t->qp));
	t->qp = NULL;
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(par));
	CHECK_EQ(a.allocs, 4);
	CHECK_EQ(a.frees, 4);
	CHECK_EQ(a.bad, 0);
	munmap(a.base, ARENA);
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.stop_at = IBV_QPS_RESET;
	return swvt_run(&o, side, side, NULL);
}
