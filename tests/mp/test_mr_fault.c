/*
 * Registered memory that the application unmaps or write-protects after registration,
 * two processes. A device pins the pages, so nothing it does can fault; swverbs copies
 * with the CPU, and such an access must end in error completions, never a signal
 * (docs/responder.md, "Memory that faults"):
 *  - RDMA WRITE into a page made read-only (mprotect) / unmapped (munmap)
 *                        -> requester IBV_WC_REM_ACCESS_ERR, responder QP in ERR
 *  - RDMA READ from an unmapped page        -> the same
 *  - SEND into a receive buffer that was unmapped
 *                        -> requester IBV_WC_REM_OP_ERR, the receive IBV_WC_LOC_PROT_ERR
 *  - SEND from / RDMA READ into the requester's own unmapped page
 *                        -> IBV_WC_LOC_PROT_ERR at the requester, the responder unharmed
 *  - UC RDMA WRITE into an unmapped page    -> dropped, the next WRITE lands
 * Both processes survive, and the completion counters of both sides count exactly the
 * errors (and flushes) each case implies.
 */
#include <errno.h>
#include <sys/mman.h>

#include "mapping.h"
#include "test_cntr_util.h"

#define TMO 20000

enum fcase {
	WRITE_RO,
	WRITE_UNMAPPED,
	READ_UNMAPPED,
	SEND_UNMAPPED,
	LOCAL_SEND_UNMAPPED,
	LOCAL_READ_UNMAPPED,
	UC_WRITE_UNMAPPED,
	NCASES
};
static const char *const case_name[NCASES] = {
    "RDMA WRITE into a read-only page",	  "RDMA WRITE into an unmapped page",
    "RDMA READ from an unmapped page",	  "SEND into an unmapped receive buffer",
    "SEND from an unmapped local page",	  "RDMA READ into an unmapped local page",
    "UC RDMA WRITE into an unmapped page"};

/* Each side's extra region: 4 pages, all registered with every right; page 1 is the
 * one that goes bad, the others stay good. */
struct region {
	uint8_t *mem;
	struct ibv_mr *mr;
	size_t pg;
};

static void region_setup(struct swvt *t, struct region *r)
{
	r->pg = (size_t)sysconf(_SC_PAGESIZE);
	r->mem = swvt_map_isolated(4 * r->pg);
	memset(r->mem, 0x77, 4 * r->pg);
	r->mr = ibv_reg_mr(t->pd, r->mem, 4 * r->pg,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK_PTR(r->mr);
}

/* The unmapped page is still a hole (nothing was mapped into it meanwhile). */
static void check_hole(const struct region *r)
{
	unsigned char v;
	errno = 0;
	CHECK(mincore(r->mem + r->pg, r->pg, &v) == -1 && errno == ENOMEM);
}

static void region_spoil(struct region *r, bool unmap)
{
	if (unmap)
		CHECK_OK(munmap(r->mem + r->pg, r->pg));
	else
		CHECK_OK(mprotect(r->mem + r->pg, r->pg, PROT_READ));
}

static void post_one(struct swvt *t, enum ibv_wr_opcode op, uint64_t laddr, uint32_t lkey,
		     uint64_t raddr, uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = {laddr, len, lkey};
	struct ibv_send_wr wr = {.wr_id = 1,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
}

static void post_recv_at(struct swvt *t, uint64_t wr_id, uint64_t addr, uint32_t lkey, uint32_t len)
{
	struct ibv_sge sge = {addr, len, lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
	CHECK_OK(ibv_post_recv(t->qp, &wr, &bad));
}

static enum ibv_qp_state qp_state(struct swvt *t)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK_OK(ibv_query_qp(t->qp, &a, IBV_QP_STATE, &ia));
	return a.qp_state;
}

static void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st)
{
	struct ibv_wc wc;
	swvt_poll_n(cq, &wc, 1, TMO);
	CHECK_WC(wc, st);
	CHECK_EQ(wc.wr_id, wr_id);
}

static void requester(struct swvt *t, struct region *r, struct cntr_side *s, enum fcase c,
		      uint64_t raddr, uint32_t rkey)
{
	const size_t pg = r->pg;
	uint64_t good = (uintptr_t)r->mem, bad_local = (uintptr_t)r->mem + pg + 64;
	uint64_t bad_remote = raddr + pg + 64;

	swvt_fill(r->mem, 256, 3);
	switch (c) {
	case WRITE_RO:
	case WRITE_UNMAPPED:
		post_one(t, IBV_WR_RDMA_WRITE, good, r->mr->lkey, bad_remote, rkey, 256);
		expect_wc(t->scq, 1, IBV_WC_REM_ACCESS_ERR);
		s->exp_err[K_WR] = 1;
		break;
	case READ_UNMAPPED:
		post_one(t, IBV_WR_RDMA_READ, good + 2 * pg, r->mr->lkey, bad_remote, rkey, 3000);
		expect_wc(t->scq, 1, IBV_WC_REM_ACCESS_ERR);
		CHECK_EQ(r->mem[2 * pg], 0x77); /* nothing placed */
		s->exp_err[K_RD] = 1;
		break;
	case SEND_UNMAPPED:
		post_one(t, IBV_WR_SEND, good, r->mr->lkey, 0, 0, 256);
		/* NAK remote operational error: the responder's buffer failed it */
		expect_wc(t->scq, 1, IBV_WC_REM_OP_ERR);
		s->exp_err[K_SEND] = 1;
		break;
	case LOCAL_SEND_UNMAPPED:
		region_spoil(r, true);
		post_one(t, IBV_WR_SEND, bad_local, r->mr->lkey, 0, 0, 256);
		expect_wc(t->scq, 1, IBV_WC_LOC_PROT_ERR);
		s->exp_err[K_SEND] = 1;
		break;
	case LOCAL_READ_UNMAPPED:
		region_spoil(r, true);
		post_one(t, IBV_WR_RDMA_READ, bad_local, r->mr->lkey, raddr, rkey, 256);
		expect_wc(t->scq, 1, IBV_WC_LOC_PROT_ERR);
		s->exp_err[K_RD] = 1;
		break;
	case UC_WRITE_UNMAPPED:
		/* UC completes once sent; the responder drops it and takes the next one */
		post_one(t, IBV_WR_RDMA_WRITE, good, r->mr->lkey, bad_remote, rkey, 256);
		expect_wc(t->scq, 1, IBV_WC_SUCCESS);
		swvt_barrier(t); /* the responder saw the refusal */
		post_one(t, IBV_WR_RDMA_WRITE, good, r->mr->lkey, raddr + 2 * pg, rkey, 256);
		expect_wc(t->scq, 1, IBV_WC_SUCCESS);
		s->exp[K_WR] = 2;
		break;
	default:
		break;
	}
	CHECK_EQ(qp_state(t), c == UC_WRITE_UNMAPPED ? IBV_QPS_RTS : IBV_QPS_ERR);
}

static void responder(struct swvt *t, struct region *r, struct cntr_side *s, enum fcase c)
{
	const size_t pg = r->pg;
	switch (c) {
	case WRITE_RO:
	case WRITE_UNMAPPED:
		expect_wc(t->rcq, 900, IBV_WC_WR_FLUSH_ERR);
		s->exp_err[K_RWR] = 1;
		s->exp_err[K_RECV] = 1;
		if (c == WRITE_RO)
			for (size_t i = 0; i < pg; i++)
				CHECK_EQ(r->mem[pg + i], 0x77);
		break;
	case READ_UNMAPPED:
		expect_wc(t->rcq, 900, IBV_WC_WR_FLUSH_ERR);
		s->exp_err[K_RRD] = 1;
		s->exp_err[K_RECV] = 1;
		break;
	case SEND_UNMAPPED:
		expect_wc(t->rcq, 800, IBV_WC_LOC_PROT_ERR);
		expect_wc(t->rcq, 900, IBV_WC_WR_FLUSH_ERR);
		s->exp_err[K_RECV] = 2;
		break;
	case LOCAL_SEND_UNMAPPED:
		break; /* nothing left the requester */
	case LOCAL_READ_UNMAPPED:
		s->exp[K_RRD] = 1; /* served; the requester could not place it */
		break;
	case UC_WRITE_UNMAPPED: {
		uint64_t deadline = swvt_now_ms() + TMO;
		while (swvt_cntr_read_err(s->c[K_RWR]) < 1 && swvt_now_ms() < deadline)
			usleep(200);
		CHECK_EQ(swvt_cntr_read_err(s->c[K_RWR]), 1);
		swvt_barrier(t);
		CHECK_OK(swv_comp_cntr_wait(s->c[K_RWR], 1, TMO));
		CHECK_EQ(swvt_verify(r->mem + 2 * pg, 256, 3), (size_t)-1);
		s->exp[K_RWR] = 1;
		s->exp_err[K_RWR] = 1;
		break;
	}
	default:
		break;
	}
	bool to_err = c <= SEND_UNMAPPED;
	CHECK_EQ(qp_state(t), to_err ? IBV_QPS_ERR : IBV_QPS_RTS);
}

static void side(struct swvt *t, void *arg)
{
	const enum fcase c = *(const enum fcase *)arg;
	const bool req = t->role == 0;
	struct cntr_side s;
	struct region r;

	if (c == UC_WRITE_UNMAPPED) {
		/* UC has no READ or atomics: those counters stay unattached (and at 0) */
		for (int k = 0; k < NK; k++) {
			s.c[k] = swvt_cntr_create(t->ctx, IBV_COMP_CNTR_TYPE_WRS);
			s.exp[k] = s.exp_err[k] = 0;
			struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = cntr_bit[k]};
			if (k == K_SEND || k == K_RECV || k == K_WR || k == K_RWR)
				CHECK_OK(ibv_qp_attach_comp_cntr(t->qp, s.c[k], &at));
		}
	} else {
		cntr_attach_all(t, &s, IBV_COMP_CNTR_TYPE_WRS);
	}
	region_setup(t, &r);
	if (!req) {
		if (c == SEND_UNMAPPED) /* into the page that goes away */
			post_recv_at(t, 800, (uintptr_t)r.mem + r.pg + 128, r.mr->lkey, 1024);
		post_recv_at(t, 900, (uintptr_t)r.mem + 3 * r.pg, r.mr->lkey, 1024);
	}
	swvt_connect(t);
	swvt_send_u64(t, (uintptr_t)r.mem);
	swvt_send_u64(t, r.mr->rkey);
	uint64_t raddr = swvt_recv_u64(t);
	uint32_t rkey = (uint32_t)swvt_recv_u64(t);
	if (!req && c != LOCAL_SEND_UNMAPPED && c != LOCAL_READ_UNMAPPED)
		region_spoil(&r, c != WRITE_RO);
	swvt_barrier(t); /* the memory went bad after registration */

	if (req)
		requester(t, &r, &s, c, raddr, rkey);
	else
		responder(t, &r, &s, c);
	cntr_check_side(&s, case_name[c], TMO);
	if (req ? c == LOCAL_SEND_UNMAPPED || c == LOCAL_READ_UNMAPPED
		: c != WRITE_RO && c != LOCAL_SEND_UNMAPPED && c != LOCAL_READ_UNMAPPED)
		check_hole(&r);
	swvt_barrier(t);
	CHECK_OK(ibv_dereg_mr(r.mr));
	munmap(r.mem, 4 * r.pg); /* what is left of it */
}

int main(void)
{
	for (enum fcase c = 0; c < NCASES; c++) {
		struct swvt_opts o;
		swvt_opts_default(&o);
		o.buf_size = 65536;
		o.stop_at = IBV_QPS_INIT;
		if (c == UC_WRITE_UNMAPPED)
			o.qp_type = IBV_QPT_UC;
		fprintf(stderr, "case: %s\n", case_name[c]);
		int rc = swvt_run(&o, side, side, &c);
		if (rc) {
			fprintf(stderr, "case failed: %s\n", case_name[c]);
			return rc;
		}
	}
	return 0;
}
