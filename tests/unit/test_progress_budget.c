/*
 * An application's receive pass takes one batch from the intra-host inbox, not all of
 * it: the thread that polls a CQ (or reads a counter) gets back to its own loop -- a
 * SEND target reposts the receives it polled -- before more receive WQEs are consumed.
 * A pass that emptied the inbox consumed up to 512 WQEs while ACKs went out after each
 * batch, so a target reposting what it polled ran out of its RQ (RNR NAKs).
 *
 * The target's progress thread is kept from receiving (the test hook), so its packets
 * wait in its inbox until this thread's passes take them.
 */
#include <stdio.h>
#include <infiniband/verbs.h>
#include <stdlib.h>

#include "check.h"
#include "core/context.h"
#include "rcpair.h"
#include "util/clock.h"

#define NSEND	 200 /* more than one batch (64), below every queue's depth */
#define SEND_LEN 8
#define BATCH	 64 /* RX_SHM_BATCH in progress.c */
#define HANG_NS	 60000000000ull

static void hang_guard(uint64_t t0, const char *what)
{
	if (swv_now_ns() - t0 < HANG_NS)
		return;
	fprintf(stderr, "stuck: %s\n", what);
	exit(1);
}

/* Poll cq until n successful completions of opcode op came. */
static void wait_cqes(struct ibv_cq *cq, int n, enum ibv_wc_opcode op, const char *what)
{
	struct ibv_wc wc[64];
	uint64_t t0 = swv_now_ns();
	for (int got = 0; got < n;) {
		int k = ibv_poll_cq(cq, 64, wc);
		CHECK(k >= 0);
		for (int i = 0; i < k; i++) {
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
			CHECK_EQ(wc[i].opcode, op);
		}
		got += k;
		hang_guard(t0, what);
	}
}

int main(void)
{
	/* queues deeper than NSEND; a buffer of one SEND_LEN slot per SEND */
	struct swvt_rc_opts o = {.buf_len = NSEND * SEND_LEN,
				 .mr_access = IBV_ACCESS_LOCAL_WRITE,
				 .cq_depth = 1024,
				 .max_wr = 256};
	struct swvt_rc_side ini, tgt;
	swvt_rc_pair_open(&ini, &tgt, &o, &o, NULL);
	struct swv_context *tctx = to_swv_ctx(tgt.ctx);
	if (!tctx->ports[0]->ep.shm) {
		printf("SKIP: no intra-host link (SWVERBS_SHM=0?): a UDP batch is datagrams\n");
		return 0;
	}

	for (unsigned i = 0; i < NSEND; i++) {
		struct ibv_sge sge = {(uintptr_t)tgt.mr->addr + i * SEND_LEN, SEND_LEN,
				      tgt.mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK_OK(ibv_post_recv(tgt.qp, &wr, &bad));
	}
	swv_progress_test_norx(&tctx->progress, true);

	/* One list: one requester run sends all of it into the target's inbox. */
	static struct ibv_sge sge[NSEND];
	static struct ibv_send_wr wr[NSEND];
	for (unsigned i = 0; i < NSEND; i++) {
		sge[i] = (struct ibv_sge){(uintptr_t)ini.mr->addr + i * SEND_LEN, SEND_LEN,
					  ini.mr->lkey};
		wr[i] = (struct ibv_send_wr){.wr_id = i,
					     .next = i + 1 < NSEND ? &wr[i + 1] : NULL,
					     .sg_list = &sge[i],
					     .num_sge = 1,
					     .opcode = IBV_WR_SEND,
					     .send_flags = IBV_SEND_SIGNALED};
	}
	struct ibv_send_wr *bad;
	CHECK_OK(ibv_post_send(ini.qp, wr, &bad));

	/* The first pass that finds packets takes one batch of them. */
	uint64_t t0 = swv_now_ns();
	int n;
	while ((n = swv_progress_assist(&tctx->progress)) == 0)
		hang_guard(t0, "no packet reached the target");
	CHECK(n > 0);
	if (n > BATCH) {
		fprintf(stderr, "one application pass took %d packets (at most %d)\n", n, BATCH);
		return 1;
	}

	/* Passes in a loop take the rest; every SEND lands once. */
	wait_cqes(tgt.cq, NSEND, IBV_WC_RECV, "target receives");
	swv_progress_test_norx(&tctx->progress, false);
	wait_cqes(ini.cq, NSEND, IBV_WC_SEND, "initiator completions");

	swvt_rc_pair_close(&ini, &tgt);
	return 0;
}
