/*
 * Triggered WRs between two processes, posted up front and run by swverbs alone: a
 * token relayed N times. Process A's WRITE k (k >= 1) forwards what B's WRITE k-1
 * put into A's slot k-1, and is triggered by A's REMOTE_RDMA_WRITE counter reaching
 * k; B's WRITE k forwards A's slot k back, triggered by B's counter reaching k + 1.
 * A WRITE issued before its threshold would forward a slot not yet written (zeroes),
 * so every slot on both sides holding the token shows each of the 2N triggers fired
 * after its data arrived; the counters must be exact (N each: retransmissions and
 * duplicates never count), and a triggered counter operation at the end
 * (A.rwr = N -> done += 1) ends the one wait each side sleeps in. Plain, then with 5%
 * drop + 2% duplicates.
 */
#include "test_cntr_util.h"

#define N     300
#define SLOT  64u
#define TOKEN ((size_t)N * SLOT) /* A's initial token, after the slots */
#define TMO   60000

static void fill_token(uint8_t *p)
{
	for (unsigned i = 0; i < SLOT; i++)
		p[i] = (uint8_t)(0xa5 ^ (i * 7));
}

static void post_trig(struct swvt *t, struct ibv_comp_cntr *trig, uint64_t thr, size_t src,
		      size_t dst_slot)
{
	struct ibv_sge sge = {
	    .addr = (uintptr_t)(t->buf + src), .length = SLOT, .lkey = t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = dst_slot,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE},
			   *bad;
	wr.wr.rdma.remote_addr = t->remote.addr + dst_slot * SLOT;
	wr.wr.rdma.rkey = t->remote.rkey;
	CHECK_OK(swv_post_send_triggered(t->qp, &wr, trig, thr, &bad));
}

static void side(struct swvt *t, void *arg)
{
	const bool a = t->role == 0;
	struct ibv_comp_cntr *rwr = swvt_cntr_create(t->ctx, IBV_COMP_CNTR_TYPE_WRS),
			     *wr = swvt_cntr_create(t->ctx, IBV_COMP_CNTR_TYPE_WRS),
			     *done = swvt_cntr_create(t->ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask =
						      IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE};
	CHECK_OK(ibv_qp_attach_comp_cntr(t->qp, rwr, &at));
	at.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE;
	CHECK_OK(ibv_qp_attach_comp_cntr(t->qp, wr, &at));
	memset(t->buf, 0, TOKEN + SLOT);
	if (a)
		fill_token(t->buf + TOKEN);
	swvt_connect(t);

	/* The whole pipeline, up front. B first posts, then A (so A's first WRITE, which
	 * goes at once, meets B's pipeline in place either way: a trigger whose
	 * threshold is already reached when posted fires at once). */
	CHECK_OK(swv_triggered_cntr_op(rwr, N, done, SWV_TRIG_CNTR_ADD, 1));
	if (!a) {
		for (size_t k = 0; k < N; k++)
			post_trig(t, rwr, k + 1, k * SLOT, k);
		swvt_barrier(t);
	} else {
		swvt_barrier(t);
		for (size_t k = 0; k < N; k++)
			post_trig(t, rwr, k, k == 0 ? TOKEN : (k - 1) * SLOT, k);
	}

	/* One wait: the pipeline's end, or an error on either counter. */
	struct swv_comp_cntr_wait_entry e[3] = {
	    {done, 1, 0}, {rwr, UINT64_MAX, 0}, {wr, UINT64_MAX, 0}};
	unsigned idx = 99;
	int r = swv_comp_cntr_wait_many(e, 3, SWV_COMP_CNTR_WAIT_ANY, TMO, &idx);
	if (r)
		fprintf(stderr, "[%s] wait_many: %d index %u, rwr %llu/%llu wr %llu/%llu\n",
			a ? "A" : "B", r, idx, (unsigned long long)swvt_cntr_read(rwr),
			(unsigned long long)swvt_cntr_read_err(rwr),
			(unsigned long long)swvt_cntr_read(wr),
			(unsigned long long)swvt_cntr_read_err(wr));
	CHECK_OK(r);
	CHECK_EQ(idx, 0);
	CHECK_EQ(swvt_cntr_read(rwr), N);
	/* Our own last WRITE is acknowledged only after the peer placed it. */
	CHECK_OK(swv_comp_cntr_wait(wr, N, TMO));
	swvt_barrier(t); /* both sides done: nothing more may arrive */
	CHECK_EQ(swvt_cntr_read(rwr), N);
	CHECK_EQ(swvt_cntr_read(wr), N);
	CHECK_EQ(swvt_cntr_read_err(rwr), 0);
	CHECK_EQ(swvt_cntr_read_err(wr), 0);
	CHECK_EQ(swvt_cntr_read(done), 1);

	uint8_t tok[SLOT];
	fill_token(tok);
	for (size_t k = 0; k < N; k++) {
		if (memcmp(t->buf + k * SLOT, tok, SLOT) != 0) {
			fprintf(stderr, "[%s] slot %zu does not hold the token\n", a ? "A" : "B",
				k);
			exit(1);
		}
	}
	swvt_barrier(t);
	CHECK_OK(ibv_destroy_qp(t->qp));
	t->qp = NULL;
	CHECK_OK(ibv_destroy_comp_cntr(rwr));
	CHECK_OK(ibv_destroy_comp_cntr(wr));
	CHECK_OK(ibv_destroy_comp_cntr(done));
	printf("[%s] %d triggered WRITEs relayed the token\n", a ? "A" : "B", N);
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.stop_at = IBV_QPS_INIT;
	o.max_send_wr = N + 16;
	o.watchdog_s = 100;
	unsetenv("SWVERBS_FAULT");
	if (swvt_run(&o, side, side, NULL))
		return 1;
	printf("plain: ok\n");
	setenv("SWVERBS_FAULT", "seed=1313,drop=5,dup=2", 1);
	o.timeout = 16; /* as test_cntr_util.h: exact counting under loss, not fast give-up */
	int rc = swvt_run(&o, side, side, NULL);
	unsetenv("SWVERBS_FAULT");
	if (!rc)
		printf("fault (drop 5%%, dup 2%%): ok\n");
	return rc;
}
