/*
 * RDMA READ responses end to end: a 1 MiB READ (1024 response packets at MTU 1024,
 * 256 at 4096), a burst of READs beyond max_rd_atomic, and the same under 5% packet
 * loss, where the requester re-asks from the first missing PSN with the VA advanced
 * (mid-message restarts answered from the responder's saved resource). The data must
 * match and the responder's REMOTE_RDMA_READ counter must count each READ once.
 */
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define BIG   (1u << 20)
static uint32_t big = BIG; /* smaller under loss: go-back-N resends the rest of a READ per loss */
#define NR    16
#define SMALL 5000u

static struct ibv_comp_cntr *cntr_on(struct swvt *t, uint32_t op)
{
	struct ibv_comp_cntr_init_attr a = {.type = IBV_COMP_CNTR_TYPE_BYTES};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(t->ctx, &a);
	CHECK_PTR(c);
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = op};
	CHECK_OK(ibv_qp_attach_comp_cntr(t->qp, c, &at));
	return c;
}

static void requester(struct swvt *t, void *arg)
{
	struct ibv_wc wc[NR];
	swvt_connect(t);

	memset(t->buf, 0, BIG);
	swvt_post_send(t, 1, IBV_WR_RDMA_READ, 0, big, 0, IBV_SEND_SIGNALED);
	swvt_poll_n(t->scq, wc, 1, 30000);
	CHECK_WC(wc[0], IBV_WC_SUCCESS);
	CHECK_EQ(wc[0].byte_len, big);
	CHECK_EQ(swvt_verify(t->buf, big, 77), (size_t)-1);

	/* NR READs at once: more than max_rd_atomic outstanding at the requester, more
	 * than the responder's resource ring holds */
	memset(t->buf, 0, (size_t)NR * 65536);
	for (int i = 0; i < NR; i++)
		swvt_post_send(t, (uint64_t)i, IBV_WR_RDMA_READ, (uint64_t)i * 65536, SMALL,
			       (uint64_t)i * 4096, IBV_SEND_SIGNALED);
	swvt_poll_n(t->scq, wc, NR, 30000);
	uint8_t *expect = malloc(BIG);
	CHECK_PTR(expect);
	swvt_fill(expect, BIG, 77);
	for (int i = 0; i < NR; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, i);
		CHECK(memcmp(t->buf + (size_t)i * 65536, expect + (size_t)i * 4096, SMALL) == 0);
	}
	free(expect);
	swvt_send_u64(t, 1);
	CHECK_EQ(swvt_recv_u64(t), 1);
}

static void responder(struct swvt *t, void *arg)
{
	struct ibv_comp_cntr *cr = cntr_on(t, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ);
	swvt_fill(t->buf, BIG, 77);
	swvt_connect(t);
	CHECK_EQ(swvt_recv_u64(t), 1);
	uint64_t v, e;
	CHECK_OK(ibv_read_comp_cntr(cr, &v));
	CHECK_OK(ibv_read_err_comp_cntr(cr, &e));
	CHECK_EQ(e, 0);
	CHECK_EQ(v, (uint64_t)big + (uint64_t)NR * SMALL); /* BYTES counter: each READ once */
	swvt_expect_empty(t->rcq, 10);
	swvt_send_u64(t, 1);
}

int main(void)
{
	static const struct {
		enum ibv_mtu mtu;
		const char *fault;
		uint32_t big;
	} runs[] = {
		{IBV_MTU_1024, NULL, BIG},
		{IBV_MTU_4096, NULL, BIG},
		{IBV_MTU_256, NULL, BIG},
		{IBV_MTU_1024, "seed=99,drop=5", 256u << 10},
		{IBV_MTU_256, "seed=3,drop=2,dup=20", 64u << 10},
	};
	int rc = 0;
	for (unsigned i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		if (runs[i].fault)
			setenv("SWVERBS_FAULT", runs[i].fault, 1);
		else
			unsetenv("SWVERBS_FAULT");
		struct swvt_opts o;
		swvt_opts_default(&o);
		o.stop_at = IBV_QPS_INIT;
		o.path_mtu = runs[i].mtu;
		o.timeout = 16; /* finite retries: tolerate a peer unscheduled for ~2 s */
		big = runs[i].big;
		uint64_t t0 = swvt_now_ms();
		int r = swvt_run(&o, requester, responder, NULL);
		printf("READ %u B, mtu %d, fault %s: %s (%llu ms)\n", big, 128 << runs[i].mtu,
		       runs[i].fault ? runs[i].fault : "none", r ? "FAILED" : "ok",
		       (unsigned long long)(swvt_now_ms() - t0));
		rc |= r;
	}
	return rc;
}
