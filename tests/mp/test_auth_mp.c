/*
 * Authenticated wire mode between two processes (docs/wire.md, "Authenticated mode").
 *
 * Same secret on both devices: RC SEND, RDMA WRITE, RDMA READ (multi-packet, so the
 * GSO packet runs of requester and responder are sealed too), fetch-and-add and
 * compare-and-swap, every byte and atomic result verified; again under injected loss,
 * duplication and reordering (resends, sequence NAKs and duplicate ACKs are sealed as
 * well); UC WRITE and SEND; UD SEND.
 *
 * Different secrets, and a device with a secret against one without: an RC WRITE ends
 * in IBV_WC_RETRY_EXC_ERR as towards a dead peer and the target's memory is
 * untouched; UD SENDs never complete a receive. (Public API only; the drop counts
 * are checked by tests/unit/test_auth.c.)
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define TMO 10000

#define KEY_A "5a0c1e2f3b4d5e6f708192a3b4c5d6e7"
#define KEY_B "5a0c1e2f3b4d5e6f708192a3b4c5d6e8" /* one bit away */

static const uint32_t sizes[] = {0, 1, 7, 1024, 1025, 10000, 65536};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* ---- same secret: RC ---- */

static void rc_requester(struct swvt *t, void *arg)
{
	struct ibv_wc wc;
	uint32_t seed = 10;

	for (unsigned i = 0; i < NSIZES; i++, seed++) { /* SEND */
		swvt_fill(t->buf, sizes[i], seed);
		swvt_barrier(t); /* receive posted */
		swvt_post_send(t, 1, IBV_WR_SEND, 0, sizes[i], 0, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		swvt_barrier(t);
	}
	for (unsigned i = 0; i < NSIZES; i++, seed++) { /* WRITE */
		swvt_fill(t->buf, sizes[i], seed);
		swvt_post_send(t, 2, IBV_WR_RDMA_WRITE, 0, sizes[i], 131072, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		swvt_barrier(t); /* target verifies */
		swvt_barrier(t); /* verified: the area may be written again */
	}
	for (unsigned i = 0; i < NSIZES; i++, seed++) { /* READ */
		memset(t->buf + 262144, 0xee, sizes[i] + 1);
		swvt_barrier(t); /* target filled */
		swvt_post_send(t, 3, IBV_WR_RDMA_READ, 262144, sizes[i], 393216, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(swvt_verify(t->buf + 262144, sizes[i], seed), (size_t)-1);
		CHECK_EQ(t->buf[262144 + sizes[i]], 0xee);
		swvt_barrier(t); /* read: the target may refill */
	}
	/* atomics on the target's word at offset 64 (set to 1000), results at 0 */
	volatile uint64_t *res = (uint64_t *)t->buf;
	swvt_barrier(t);
	struct ibv_sge sge = {(uintptr_t)t->buf, 8, t->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 4,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.atomic.remote_addr = t->remote.addr + 64;
	wr.wr.atomic.rkey = t->remote.rkey;
	wr.wr.atomic.compare_add = 5;
	*res = 0;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	swvt_poll_n(t->scq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(*res, 1000);
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.compare_add = 1005;
	wr.wr.atomic.swap = 0x1122334455667788ull;
	CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
	swvt_poll_n(t->scq, &wc, 1, TMO);
	CHECK_WC(wc, IBV_WC_SUCCESS);
	CHECK_EQ(*res, 1005);
	swvt_barrier(t); /* target checks the word */
	(void)arg;
}

static void rc_target(struct swvt *t, void *arg)
{
	struct ibv_wc wc;
	uint32_t seed = 10;

	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		memset(t->buf, 0xee, sizes[i] + 1);
		swvt_post_recv(t, 1, 0, sizes[i] + 1);
		swvt_barrier(t);
		swvt_poll_n(t->rcq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.byte_len, sizes[i]);
		CHECK_EQ(swvt_verify(t->buf, sizes[i], seed), (size_t)-1);
		CHECK_EQ(t->buf[sizes[i]], 0xee);
		swvt_barrier(t);
	}
	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		swvt_barrier(t);
		CHECK_EQ(swvt_verify(t->buf + 131072, sizes[i], seed), (size_t)-1);
		swvt_barrier(t);
	}
	for (unsigned i = 0; i < NSIZES; i++, seed++) {
		swvt_fill(t->buf + 393216, sizes[i], seed);
		swvt_barrier(t);
		swvt_barrier(t);
	}
	volatile uint64_t *word = (uint64_t *)(t->buf + 64);
	*word = 1000;
	swvt_barrier(t);
	swvt_barrier(t);
	CHECK_EQ(*word, 0x1122334455667788ull);
	(void)arg;
}

/* ---- same secret: UC ---- */

static void uc_sender(struct swvt *t, void *arg)
{
	struct ibv_wc wc;

	for (unsigned i = 1; i < NSIZES; i++) {
		swvt_fill(t->buf, sizes[i], 100 + i);
		swvt_post_send(t, 1, IBV_WR_RDMA_WRITE, 0, sizes[i], 131072, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		swvt_barrier(t); /* receive posted */
		swvt_fill(t->buf, sizes[i], 200 + i);
		swvt_post_send(t, 2, IBV_WR_SEND, 0, sizes[i], 0, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		swvt_barrier(t); /* received and verified */
	}
	(void)arg;
}

static void uc_receiver(struct swvt *t, void *arg)
{
	struct ibv_wc wc;

	for (unsigned i = 1; i < NSIZES; i++) {
		memset(t->buf, 0, sizes[i]);
		swvt_post_recv(t, 1, 0, sizes[i]);
		swvt_barrier(t);
		/* The SEND follows the WRITE on the same QP: when it arrived, so had the
		 * WRITE (UC loses no packet on loopback without a fault injector). */
		swvt_poll_n(t->rcq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.byte_len, sizes[i]);
		CHECK_EQ(swvt_verify(t->buf, sizes[i], 200 + i), (size_t)-1);
		CHECK_EQ(swvt_verify(t->buf + 131072, sizes[i], 100 + i), (size_t)-1);
		swvt_barrier(t);
	}
	(void)arg;
}

/* ---- UD: same secret (verified data), or not (dropped and counted) ---- */

static const uint32_t ud_sizes[] = {0, 1, 100, 1024, 4096};
#define NUD (sizeof(ud_sizes) / sizeof(ud_sizes[0]))

static void ud_sender(struct swvt *t, void *arg)
{
	struct ibv_wc wc;

	for (unsigned i = 0; i < NUD; i++) {
		swvt_barrier(t); /* receive posted */
		swvt_fill(t->buf, ud_sizes[i], 300 + i);
		swvt_post_send(t, 1, IBV_WR_SEND, 0, ud_sizes[i], 0, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		swvt_barrier(t); /* received (or refused) */
	}
	(void)arg;
}

static void ud_receiver(struct swvt *t, void *arg)
{
	bool same = arg != NULL;
	struct ibv_wc wc;

	for (unsigned i = 0; i < NUD; i++) {
		memset(t->buf, 0, 40 + ud_sizes[i]);
		swvt_post_recv(t, 1, 0, 40 + ud_sizes[i]);
		swvt_barrier(t);
		if (same) {
			swvt_poll_n(t->rcq, &wc, 1, TMO);
			CHECK_WC(wc, IBV_WC_SUCCESS);
			CHECK_EQ(wc.byte_len, 40 + ud_sizes[i]);
			CHECK_EQ(swvt_verify(t->buf + 40, ud_sizes[i], 300 + i), (size_t)-1);
		}
		swvt_barrier(t);
	}
	if (!same) /* the sends completed at the sender; none reached a receive */
		swvt_expect_empty(t->rcq, 200);
}

/* ---- mismatched secrets: RC ends like a dead peer ---- */

static void mismatch_requester(struct swvt *t, void *arg)
{
	struct ibv_wc wc;

	swvt_fill(t->buf, 4096, 7);
	swvt_post_send(t, 9, IBV_WR_RDMA_WRITE, 0, 4096, 0, IBV_SEND_SIGNALED);
	/* retry_cnt 3 x 268 ms: well within the poll bound */
	swvt_poll_n(t->scq, &wc, 1, 30000);
	CHECK_WC(wc, IBV_WC_RETRY_EXC_ERR);
	CHECK_EQ(wc.wr_id, 9);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK_OK(ibv_query_qp(t->qp, &qa, IBV_QP_STATE, &qia));
	CHECK_EQ(qa.qp_state, IBV_QPS_ERR);
	swvt_barrier(t);
	(void)arg;
}

static void mismatch_target(struct swvt *t, void *arg)
{
	swvt_barrier(t); /* the requester gave up */
	static const uint8_t zero[4096];
	CHECK(!memcmp(t->buf, zero, sizeof(zero))); /* nothing placed */
	swvt_expect_empty(t->rcq, 10);
	(void)arg;
}

static int run(const char *what, enum ibv_qp_type type, const char *dev, const char *child_dev,
	       swvt_fn parent, swvt_fn child, void *arg, uint8_t retry_cnt)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.qp_type = type;
	o.dev_name = dev;
	o.child_dev_name = child_dev;
	o.retry_cnt = retry_cnt;
	o.path_mtu = IBV_MTU_4096;
	o.buf_size = 512 * 1024;
	int rc = swvt_run(&o, parent, child, arg);
	if (!rc)
		printf("%s: ok\n", what);
	return rc;
}

int main(void)
{
	unsetenv("SWVERBS_CONFIG");
	unsetenv("SWVERBS_FAULT");
	setenv("SWVERBS_DEVICES",
	       "au1=127.0.0.1/8,auth_key=" KEY_A ";au2=127.0.0.2/8,auth_key=" KEY_A
	       ";bu2=127.0.0.3/8,auth_key=" KEY_B ";pl2=127.0.0.4/8",
	       1);
	static int same = 1;
	if (run("RC, same secret", IBV_QPT_RC, "au1", "au2", rc_requester, rc_target, NULL, 7) ||
	    run("UC, same secret", IBV_QPT_UC, "au1", "au2", uc_sender, uc_receiver, NULL, 7) ||
	    run("UD, same secret", IBV_QPT_UD, "au1", "au2", ud_sender, ud_receiver, &same, 7) ||
	    run("UD, other secret", IBV_QPT_UD, "au1", "bu2", ud_sender, ud_receiver, NULL, 7) ||
	    run("RC, other secret: RETRY_EXC_ERR", IBV_QPT_RC, "au1", "bu2", mismatch_requester,
		mismatch_target, &same, 3) ||
	    run("RC, secret against none: RETRY_EXC_ERR", IBV_QPT_RC, "au1", "pl2",
		mismatch_requester, mismatch_target, NULL, 3))
		return 1;
	/* Resends, sequence NAKs and duplicates are sealed like first transmissions. */
	setenv("SWVERBS_FAULT", "seed=5,drop=3,dup=2,reorder=2", 1);
	if (run("RC, same secret, under loss/dup/reorder", IBV_QPT_RC, "au1", "au2", rc_requester,
		rc_target, NULL, 7))
		return 1;
	unsetenv("SWVERBS_FAULT");
	return 0;
}
