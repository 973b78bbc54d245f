/*
 * On-demand paging between two processes (docs/design.md, "On-demand paging"). Each side
 * maps 4 pages and unmaps page 1 *before* registering, which only an ODP MR allows;
 * then SEND, RDMA WRITE, RDMA READ and a fetch-and-add run through ODP memory on both
 * sides (after ibv_advise_mr prefetches, with and without FLUSH), every byte checked,
 * and one last operation meets the hole:
 *  - explicit ODP MRs, RDMA WRITE into the remote hole
 *                       -> requester IBV_WC_REM_ACCESS_ERR, responder's receive flushed
 *  - the implicit MR (NULL, SIZE_MAX), RDMA READ from the remote hole -> the same
 *  - explicit ODP MRs, SEND into a receive buffer in the hole
 *                       -> requester IBV_WC_REM_OP_ERR, the receive IBV_WC_LOC_PROT_ERR
 * Nothing raises a signal; the completion counters of both sides count exactly.
 */
#include <errno.h>
#include <sys/mman.h>

#include "mapping.h"
#include "test_cntr_util.h"

#define TMO 20000
#define ALL                                                                                        \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |               \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND)

enum ocase { EXPLICIT_WRITE_HOLE, IMPLICIT_READ_HOLE, EXPLICIT_SEND_HOLE, NCASES };
static const char *const case_name[NCASES] = {"explicit ODP, WRITE into a hole",
					      "implicit ODP, READ from a hole",
					      "explicit ODP, SEND into a hole"};

struct region {
	uint8_t *mem;
	struct ibv_mr *mr;
	size_t pg;
};

static void region_setup(struct swvt *t, struct region *r, enum ocase c)
{
	r->pg = (size_t)sysconf(_SC_PAGESIZE);
	r->mem = swvt_map_isolated(4 * r->pg);
	CHECK_OK(munmap(r->mem + r->pg, r->pg)); /* a hole before registration */
	if (c == IMPLICIT_READ_HOLE)
		r->mr = ibv_reg_mr(t->pd, NULL, SIZE_MAX, ALL);
	else
		r->mr = ibv_reg_mr(t->pd, r->mem, 4 * r->pg, ALL);
	CHECK_PTR(r->mr);
}

static void post_one(struct swvt *t, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	wr->wr_id = 1;
	wr->num_sge = 1;
	wr->send_flags = IBV_SEND_SIGNALED;
	CHECK_OK(ibv_post_send(t->qp, wr, &bad));
}

static void post_recv_at(struct swvt *t, uint64_t wr_id, uint8_t *addr, uint32_t lkey, uint32_t len)
{
	struct ibv_sge sge = {(uintptr_t)addr, len, lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
	CHECK_OK(ibv_post_recv(t->qp, &wr, &bad));
}

static void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st)
{
	struct ibv_wc wc;
	swvt_poll_n(cq, &wc, 1, TMO);
	CHECK_WC(wc, st);
	CHECK_EQ(wc.wr_id, wr_id);
}

static enum ibv_qp_state qp_state(struct swvt *t)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK_OK(ibv_query_qp(t->qp, &a, IBV_QP_STATE, &ia));
	return a.qp_state;
}

#define FAA_OFF 4000 /* in page 0, 8-aligned */

static void requester(struct swvt *t, struct region *r, struct cntr_side *s, enum ocase c,
		      uint8_t *rmem, uint32_t rkey)
{
	const size_t pg = r->pg;
	uint32_t lkey = r->mr->lkey;

	/* Prefetch the pages the operations below use, both ways. */
	struct ibv_sge pf = {(uintptr_t)r->mem, (uint32_t)pg, lkey};
	CHECK_OK(ibv_advise_mr(t->pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pf, 1));
	pf.addr = (uintptr_t)r->mem + 2 * pg;
	CHECK_OK(ibv_advise_mr(t->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			       &pf, 1));
	/* the hole cannot be prefetched for sure, and says so only under FLUSH */
	pf.addr = (uintptr_t)r->mem + pg;
	CHECK_OK(ibv_advise_mr(t->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &pf, 1));
	CHECK_EQ(ibv_advise_mr(t->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			       &pf, 1),
		 EFAULT);

	swvt_fill(r->mem, 3000, 5);
	cntr_publish_local_writes(t);
	struct ibv_sge sge = {(uintptr_t)r->mem, 512, lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .opcode = IBV_WR_SEND};
	if (c != EXPLICIT_SEND_HOLE) {
		post_one(t, &wr);
		expect_wc(t->scq, 1, IBV_WC_SUCCESS);
		s->exp[K_SEND]++;
	}
	sge.length = 3000;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)rmem;
	wr.wr.rdma.rkey = rkey;
	post_one(t, &wr);
	expect_wc(t->scq, 1, IBV_WC_SUCCESS);
	s->exp[K_WR]++;
	swvt_barrier(t); /* A: the responder checks the WRITE */

	sge.addr = (uintptr_t)r->mem + 2 * pg;
	sge.length = 2000;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = (uintptr_t)rmem + 3 * pg;
	post_one(t, &wr);
	expect_wc(t->scq, 1, IBV_WC_SUCCESS);
	CHECK_EQ(swvt_verify(r->mem + 2 * pg, 2000, 7), (size_t)-1);
	s->exp[K_RD]++;

	sge.addr = (uintptr_t)r->mem + 2 * pg + 2048;
	sge.length = 8;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = (uintptr_t)rmem + FAA_OFF;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = 5;
	post_one(t, &wr);
	expect_wc(t->scq, 1, IBV_WC_SUCCESS);
	uint64_t orig;
	memcpy(&orig, r->mem + 2 * pg + 2048, 8);
	CHECK_EQ(orig, 1000);
	s->exp[K_AT]++;

	/* The last one meets the responder's hole. */
	sge.addr = (uintptr_t)r->mem;
	sge.length = 256;
	switch (c) {
	case EXPLICIT_WRITE_HOLE:
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = (uintptr_t)rmem + pg + 64;
		wr.wr.rdma.rkey = rkey;
		post_one(t, &wr);
		expect_wc(t->scq, 1, IBV_WC_REM_ACCESS_ERR);
		s->exp_err[K_WR]++;
		break;
	case IMPLICIT_READ_HOLE:
		wr.opcode = IBV_WR_RDMA_READ;
		wr.wr.rdma.remote_addr = (uintptr_t)rmem + pg + 64;
		wr.wr.rdma.rkey = rkey;
		memset(r->mem, 0x66, 256);
		post_one(t, &wr);
		expect_wc(t->scq, 1, IBV_WC_REM_ACCESS_ERR);
		CHECK_EQ(r->mem[0], 0x66); /* nothing placed */
		s->exp_err[K_RD]++;
		break;
	case EXPLICIT_SEND_HOLE:
		wr.opcode = IBV_WR_SEND;
		post_one(t, &wr);
		expect_wc(t->scq, 1, IBV_WC_REM_OP_ERR);
		s->exp_err[K_SEND]++;
		break;
	default:
		break;
	}
	CHECK_EQ(qp_state(t), IBV_QPS_ERR);
}

static void responder(struct swvt *t, struct region *r, struct cntr_side *s, enum ocase c)
{
	const size_t pg = r->pg;

	if (c != EXPLICIT_SEND_HOLE) {
		expect_wc(t->rcq, 800, IBV_WC_SUCCESS);
		CHECK_EQ(swvt_verify(r->mem + 2 * pg, 512, 5), (size_t)-1);
		s->exp[K_RECV]++;
	}
	swvt_barrier(t); /* A */
	CHECK_EQ(swvt_verify(r->mem, 3000, 5), (size_t)-1);
	s->exp[K_RWR]++;
	s->exp[K_RRD]++;
	s->exp[K_RAT]++;
	switch (c) {
	case EXPLICIT_WRITE_HOLE:
		expect_wc(t->rcq, 900, IBV_WC_WR_FLUSH_ERR);
		s->exp_err[K_RWR]++;
		s->exp_err[K_RECV]++;
		break;
	case IMPLICIT_READ_HOLE:
		expect_wc(t->rcq, 900, IBV_WC_WR_FLUSH_ERR);
		s->exp_err[K_RRD]++;
		s->exp_err[K_RECV]++;
		break;
	case EXPLICIT_SEND_HOLE:
		expect_wc(t->rcq, 800, IBV_WC_LOC_PROT_ERR);
		expect_wc(t->rcq, 900, IBV_WC_WR_FLUSH_ERR);
		s->exp_err[K_RECV] += 2;
		break;
	default:
		break;
	}
	uint64_t v;
	memcpy(&v, r->mem + FAA_OFF, 8);
	CHECK_EQ(v, 1005);
	CHECK_EQ(qp_state(t), IBV_QPS_ERR);
}

static void side(struct swvt *t, void *arg)
{
	const enum ocase c = *(const enum ocase *)arg;
	const bool req = t->role == 0;
	struct cntr_side s;
	struct region r;

	cntr_attach_all(t, &s, IBV_COMP_CNTR_TYPE_WRS);
	region_setup(t, &r, c);
	if (!req) {
		/* page 2 takes the SEND (or, in the SEND case, the hole does) */
		uint8_t *at = c == EXPLICIT_SEND_HOLE ? r.mem + r.pg + 128 : r.mem + 2 * r.pg;
		post_recv_at(t, 800, at, r.mr->lkey, 1024);
		post_recv_at(t, 900, r.mem + 3 * r.pg + 2048, r.mr->lkey, 1024);
		swvt_fill(r.mem + 3 * r.pg, 2000, 7);
		uint64_t v = 1000;
		memcpy(r.mem + FAA_OFF, &v, 8);
	}
	swvt_connect(t);
	swvt_send_u64(t, (uintptr_t)r.mem);
	swvt_send_u64(t, r.mr->rkey);
	uint8_t *rmem = (uint8_t *)(uintptr_t)swvt_recv_u64(t);
	uint32_t rkey = (uint32_t)swvt_recv_u64(t);

	if (req)
		requester(t, &r, &s, c, rmem, rkey);
	else
		responder(t, &r, &s, c);
	cntr_check_side(&s, case_name[c], TMO);
	swvt_barrier(t);
	CHECK_OK(ibv_dereg_mr(r.mr));
	munmap(r.mem, 4 * r.pg);
}

int main(void)
{
	for (enum ocase c = 0; c < NCASES; c++) {
		struct swvt_opts o;
		swvt_opts_default(&o);
		o.buf_size = 65536;
		o.stop_at = IBV_QPS_INIT;
		fprintf(stderr, "case: %s\n", case_name[c]);
		if (swvt_run(&o, side, side, &c)) {
			fprintf(stderr, "case failed: %s\n", case_name[c]);
			return 1;
		}
	}
	return 0;
}
