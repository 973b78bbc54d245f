/*
 * Device memory between two processes (core/dm.h): each side allocates 8 KiB of device
 * memory and registers bytes 1024..5119 of it as a zero-based MR (IOVA 0 = DM byte
 * 1024). Every byte is checked through ibv_memcpy_from_dm / ibv_memcpy_to_dm:
 *  - RDMA WRITE from host memory into the remote DM (target at IOVA 100)
 *  - RDMA READ from the remote DM (source at IOVA 2048) into host memory
 *  - RDMA READ from the remote DM into the local DM (local zero-based SGE)
 *  - SEND from the local DM into a host receive buffer
 *  - fetch-and-add on a word of the remote DM
 *  - RDMA WRITE one byte past the remote DM MR -> IBV_WC_REM_ACCESS_ERR, the DM
 *    outside the MR untouched, the responder's receive flushed
 * The completion counters of both sides count exactly.
 */
#include <errno.h>

#include "test_cntr_util.h"

#define TMO    20000
#define DM_LEN 8192
#define MR_OFF 1024
#define MR_LEN 4096
#define ACC                                                                                        \
	(IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static void post_one(struct swvt *t, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	wr->wr_id = 1;
	wr->num_sge = 1;
	wr->send_flags = IBV_SEND_SIGNALED;
	CHECK_OK(ibv_post_send(t->qp, wr, &bad));
}

static void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st)
{
	struct ibv_wc wc;
	swvt_poll_n(cq, &wc, 1, TMO);
	CHECK_WC(wc, st);
	CHECK_EQ(wc.wr_id, wr_id);
}

static void dm_fill(struct ibv_dm *dm, uint64_t off, size_t len, uint32_t seed)
{
	uint8_t *tmp = malloc(len);
	CHECK_PTR(tmp);
	swvt_fill(tmp, len, seed);
	CHECK_OK(ibv_memcpy_to_dm(dm, off, tmp, len));
	free(tmp);
}

static bool dm_verify(struct ibv_dm *dm, uint64_t off, size_t len, uint32_t seed)
{
	uint8_t *tmp = malloc(len);
	CHECK_PTR(tmp);
	CHECK_OK(ibv_memcpy_from_dm(tmp, dm, off, len));
	bool ok = swvt_verify(tmp, len, seed) == (size_t)-1;
	free(tmp);
	return ok;
}

static void requester(struct swvt *t, struct ibv_dm *dm, struct ibv_mr *mr, struct cntr_side *s,
		      uint32_t rkey)
{
	/* host -> remote DM at IOVA 100 */
	swvt_fill(t->buf, 1500, 11);
	cntr_publish_local_writes(t);
	struct ibv_sge sge = {(uintptr_t)t->buf, 1500, t->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .opcode = IBV_WR_RDMA_WRITE};
	wr.wr.rdma.remote_addr = 100;
	wr.wr.rdma.rkey = rkey;
	post_one(t, &wr);
	expect_wc(t->scq, 1, IBV_WC_SUCCESS);
	s->exp[K_WR]++;
	swvt_barrier(t); /* A: the responder checks its DM */

	/* remote DM IOVA 2048 -> host */
	sge.addr = (uintptr_t)t->buf + 8192;
	sge.length = 1500;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = 2048;
	post_one(t, &wr);
	expect_wc(t->scq, 1, IBV_WC_SUCCESS);
	CHECK_EQ(swvt_verify(t->buf + 8192, 1500, 12), (size_t)-1);
	/* remote DM IOVA 2048 -> local DM IOVA 500 (DM byte 1524) */
	sge.addr = 500;
	sge.lkey = mr->lkey;
	post_one(t, &wr);
	expect_wc(t->scq, 1, IBV_WC_SUCCESS);
	CHECK(dm_verify(dm, MR_OFF + 500, 1500, 12));
	s->exp[K_RD] += 2;

	/* local DM -> remote host receive: the bytes just read */
	wr.opcode = IBV_WR_SEND;
	post_one(t, &wr);
	expect_wc(t->scq, 1, IBV_WC_SUCCESS);
	s->exp[K_SEND]++;

	/* fetch-and-add at remote DM IOVA 4000 */
	sge.addr = (uintptr_t)t->buf + 16384;
	sge.length = 8;
	sge.lkey = t->mr->lkey;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = 4000;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = 7;
	post_one(t, &wr);
	expect_wc(t->scq, 1, IBV_WC_SUCCESS);
	uint64_t orig;
	memcpy(&orig, t->buf + 16384, 8);
	CHECK_EQ(orig, 40);
	s->exp[K_AT]++;

	/* one byte past the MR (IOVA 4096 is DM byte 5120: device memory, not the MR's) */
	sge.addr = (uintptr_t)t->buf;
	sge.length = 16;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = MR_LEN - 15;
	wr.wr.rdma.rkey = rkey;
	post_one(t, &wr);
	expect_wc(t->scq, 1, IBV_WC_REM_ACCESS_ERR);
	s->exp_err[K_WR]++;
}

static void responder(struct swvt *t, struct ibv_dm *dm, struct cntr_side *s)
{
	swvt_barrier(t); /* A */
	CHECK(dm_verify(dm, MR_OFF + 100, 1500, 11));
	/* before it and after it, nothing changed */
	uint8_t z[100];
	CHECK_OK(ibv_memcpy_from_dm(z, dm, MR_OFF, 100));
	for (int i = 0; i < 100; i++)
		CHECK_EQ(z[i], 0);
	s->exp[K_RWR]++;
	s->exp[K_RRD] += 2;
	s->exp[K_RAT]++;

	expect_wc(t->rcq, 800, IBV_WC_SUCCESS);
	CHECK_EQ(swvt_verify(t->buf + 4096, 1500, 12), (size_t)-1);
	s->exp[K_RECV]++;
	expect_wc(t->rcq, 900, IBV_WC_WR_FLUSH_ERR);
	s->exp_err[K_RWR]++;
	s->exp_err[K_RECV]++;
	uint64_t v;
	CHECK_OK(ibv_memcpy_from_dm(&v, dm, MR_OFF + 4000, 8));
	CHECK_EQ(v, 47);
	/* the refused WRITE placed nothing, inside the MR or past it */
	CHECK_OK(ibv_memcpy_from_dm(z, dm, MR_OFF + MR_LEN - 16, 32));
	for (int i = 0; i < 32; i++)
		CHECK_EQ(z[i], 0xee);
}

static void side(struct swvt *t, void *arg)
{
	(void)arg;
	const bool req = t->role == 0;
	struct cntr_side s;

	cntr_attach_all(t, &s, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_alloc_dm_attr at = {.length = DM_LEN, .log_align_req = 3};
	struct ibv_dm *dm = ibv_alloc_dm(t->ctx, &at);
	CHECK_PTR(dm);
	uint8_t *zero = calloc(1, DM_LEN);
	CHECK_PTR(zero);
	CHECK_OK(ibv_memcpy_to_dm(dm, 0, zero, DM_LEN));
	free(zero);
	struct ibv_mr *mr = ibv_reg_dm_mr(t->pd, dm, MR_OFF, MR_LEN, ACC);
	CHECK_PTR(mr);
	if (!req) {
		dm_fill(dm, MR_OFF + 2048, 1500, 12);
		uint64_t v = 40;
		CHECK_OK(ibv_memcpy_to_dm(dm, MR_OFF + 4000, &v, 8));
		uint8_t ee[32];
		memset(ee, 0xee, sizeof(ee));
		CHECK_OK(ibv_memcpy_to_dm(dm, MR_OFF + MR_LEN - 16, ee, sizeof(ee)));
		swvt_post_recv(t, 800, 4096, 2048);
		swvt_post_recv(t, 900, 0, 64);
	}
	swvt_connect(t);
	swvt_send_u64(t, mr->rkey);
	uint32_t rkey = (uint32_t)swvt_recv_u64(t);
	if (req)
		requester(t, dm, mr, &s, rkey);
	else
		responder(t, dm, &s);
	cntr_check_side(&s, req ? "requester" : "responder", TMO);
	swvt_barrier(t);
	CHECK_EQ(ibv_free_dm(dm), EBUSY);
	CHECK_OK(ibv_dereg_mr(mr));
	CHECK_OK(ibv_free_dm(dm));
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.buf_size = 65536;
	o.stop_at = IBV_QPS_INIT;
	return swvt_run(&o, side, side, NULL);
}
