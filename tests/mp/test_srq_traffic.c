/*
 * SRQ over the real UDP path, two processes: the receiver's 4 RC QPs share one SRQ and
 * one receive CQ; the sender's 4 QPs send 20 messages each, interleaved, of sizes from
 * 0 to several MTUs (multi-packet SENDs in flight on several QPs at once). Every
 * receive must complete successfully on the QP its sender is connected to (wc.qp_num),
 * in that QP's send order, with byte_len and every byte right, in the WQE whose buffer
 * it names; RECV counters must count exactly the messages of the QPs they are attached
 * to (one counter on QP 0, one on QP 1, one shared by QPs 2 and 3). ibv_destroy_srq is EBUSY until its QPs are
 * gone. The run is repeated with the SRQ barely larger than the traffic in flight
 * (refilled as WQEs complete), which makes the receiver RNR and the sender retry, and
 * once more with the fault injector dropping, duplicating and reordering packets.
 */
#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_srq_util.h"

#define NQP  4
#define NMSG 20
#define SLOT 8192 /* receive buffer per WQE */

static uint32_t msg_len(int qp, int seq)
{
	static const uint32_t sizes[] = {0, 8, 1000, 1024, 1025, 3000, 4096 + 7, 8192};
	return sizes[(qp * 3 + seq) % (sizeof(sizes) / sizeof(sizes[0]))];
}

static uint32_t seed_of(int qp, int seq)
{
	return 0x5100u + (uint32_t)qp * 1000u + (uint32_t)seq;
}

struct run {
	uint32_t srq_wr; /* SRQ size on the receiver */
	int prepost;     /* WQEs posted before the sender starts */
};

static void sender(struct swvt *t, void *arg)
{
	const struct run *r = arg;
	struct srqt s;
	srqt_create(&s, t, NQP, false, 0);
	srqt_connect(&s, NULL);
	(void)r;
	/* each message from its own buffer area (NQP * NMSG * SLOT = 640 KiB) */
	for (int seq = 0; seq < NMSG; seq++)
		for (int i = 0; i < NQP; i++) {
			uint64_t off = (uint64_t)(i * NMSG + seq) * SLOT;
			swvt_fill(t->buf + off, msg_len(i, seq), seed_of(i, seq));
		}
	swvt_barrier(t);
	for (int seq = 0; seq < NMSG; seq++)
		for (int i = 0; i < NQP; i++)
			srqt_send(&s, i, (uint64_t)(i * NMSG + seq), (uint64_t)(i * NMSG + seq) * SLOT,
				  msg_len(i, seq));
	struct ibv_wc wc[NQP * NMSG];
	swvt_poll_n(s.scq, wc, NQP * NMSG, 60000);
	for (int k = 0; k < NQP * NMSG; k++)
		CHECK_WC(wc[k], IBV_WC_SUCCESS);
	swvt_barrier(t);
	srqt_destroy(&s);
}

static void receiver(struct swvt *t, void *arg)
{
	const struct run *r = arg;
	struct srqt s;
	srqt_create(&s, t, NQP, true, r->srq_wr);

	/* RECV counters, attached before RTR (RESET/INIT only): QPs 0 and 1 one each,
	 * QPs 2 and 3 one shared counter. A bit has one owner per QP. */
	struct ibv_comp_cntr *cnt[3];
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_qp_attach_comp_cntr_attr at = {.op_mask = IBV_QP_ATTACH_COMP_CNTR_OP_RECV};
	for (int c = 0; c < 3; c++) {
		cnt[c] = ibv_create_comp_cntr(t->ctx, &ca);
		CHECK_PTR(cnt[c]);
	}
	for (int i = 0; i < NQP; i++)
		CHECK_OK(ibv_qp_attach_comp_cntr(s.qp[i], cnt[i < 2 ? i : 2], &at));
	CHECK_EQ(ibv_qp_attach_comp_cntr(s.qp[0], cnt[2], &at), EBUSY);
	srqt_connect(&s, NULL);

	/* WQE k receives into slot k; with a small SRQ the rest are posted as
	 * completions free slots. */
	const int total = NQP * NMSG;
	int posted = 0;
	for (; posted < r->prepost; posted++)
		srqt_post(&s, (uint64_t)posted, (uint64_t)posted * SLOT, SLOT);
	swvt_barrier(t);

	int next_seq[NQP] = {0};
	for (int got = 0; got < total;) {
		struct ibv_wc wc;
		if (swvt_poll(s.rcq, &wc, 1, 30000) != 1) {
			fprintf(stderr, "receiver: %d of %d messages arrived\n", got, total);
			exit(1);
		}
		got++;
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_RECV);
		int j = srqt_index(&s, wc.qp_num);
		if (j < 0) {
			fprintf(stderr, "wc.qp_num %#x is none of the receiving QPs\n", wc.qp_num);
			exit(1);
		}
		/* pair j carries sender QP j's messages, in its order */
		int seq = next_seq[j]++;
		CHECK_EQ(wc.byte_len, msg_len(j, seq));
		CHECK_EQ(wc.src_qp, s.remote.qpn[j]);
		CHECK(wc.wr_id < (uint64_t)posted);
		size_t bad = swvt_verify(t->buf + wc.wr_id * SLOT, wc.byte_len, seed_of(j, seq));
		if (bad != (size_t)-1) {
			fprintf(stderr, "qp %d msg %d (wr %llu): byte %zu differs\n", j, seq,
				(unsigned long long)wc.wr_id, bad);
			exit(1);
		}
		if (posted < total) {
			srqt_post(&s, (uint64_t)posted, (uint64_t)posted * SLOT, SLOT);
			posted++;
		}
	}
	for (int j = 0; j < NQP; j++)
		CHECK_EQ(next_seq[j], NMSG);
	/* each receive counted once, on the QP it arrived on; none as an error */
	const uint64_t exp[3] = {NMSG, NMSG, 2 * NMSG};
	for (int c = 0; c < 3; c++) {
		uint64_t v, e;
		CHECK_OK(ibv_read_comp_cntr(cnt[c], &v));
		CHECK_OK(ibv_read_err_comp_cntr(cnt[c], &e));
		CHECK_EQ(v, exp[c]);
		CHECK_EQ(e, 0);
	}
	swvt_barrier(t);
	srqt_destroy(&s);
	for (int c = 0; c < 3; c++)
		CHECK_OK(ibv_destroy_comp_cntr(cnt[c]));
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.buf_size = NQP * NMSG * SLOT + 4096;
	o.min_rnr_timer = 1; /* 0.01 ms: RNR waits stay short */
	int rc = 0;

	/* all WQEs posted up front */
	struct run all = {.srq_wr = NQP * NMSG, .prepost = NQP * NMSG};
	printf("SRQ with every WQE posted\n");
	rc |= swvt_run(&o, receiver, sender, &all);
	/* a small SRQ refilled from completions: RNR NAKs and retries on the way */
	struct run tight = {.srq_wr = 6, .prepost = 6};
	printf("SRQ of 6 WQEs, refilled\n");
	rc |= swvt_run(&o, receiver, sender, &tight);
	/* the same under loss, duplication and reordering: a multi-packet SEND keeps its
	 * WQE through go-back-N retransmissions, a duplicate never takes another */
	if (!getenv("SWVERBS_FAULT")) {
		setenv("SWVERBS_FAULT", "seed=11,drop=2,dup=2,reorder=2", 1);
		printf("SRQ of 6 WQEs, refilled, with packet faults\n");
		rc |= swvt_run(&o, receiver, sender, &tight);
		unsetenv("SWVERBS_FAULT");
	}
	if (!rc)
		printf("test_srq_traffic: OK\n");
	return rc;
}
