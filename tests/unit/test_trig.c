/*
 * Counters that drive work: triggered WRs (swv_post_send_triggered), triggered
 * counter operations (swv_triggered_cntr_op), cancellation, the error rule and
 * swv_comp_cntr_wait_many, on RC QPs of one context connected to each other.
 *
 * Whether a WR was issued is read from the QP's ring (sq.tail) and its reservation
 * (trig_held): a triggered WR enters the ring in the call that made it due (the
 * runner of ibv_inc_comp_cntr, or of the progress path), so "not before" is checked
 * at the moment the count is below the threshold, without any timing.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "cntr.h"
#include "inproc.h"
#include "core/comp_cntr.h"
#include "core/qp.h"

#define OP_WR	 IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE
#define OP_RWR	 IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE
#define TMO_MS	 10000
#define BUF_SIZE (1 << 16)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static uint8_t *buf;
static struct ibv_mr *mr;

static int attach(struct ibv_qp *qp, struct ibv_comp_cntr *c, uint32_t mask)
{
	struct ibv_qp_attach_comp_cntr_attr a = {.comp_mask = 0, .op_mask = mask};
	return ibv_qp_attach_comp_cntr(qp, c, &a);
}

static struct ibv_qp *make_qp(uint32_t send_wr)
{
	struct ibv_qp_init_attr ia = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = send_wr,
		    .max_recv_wr = 16,
		    .max_send_sge = 2,
		    .max_recv_sge = 2},
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK_PTR(qp);
	return qp;
}

/* A connected pair a -> b; a's RDMA WRITEs counted by *wr_cntr (if asked). */
static void make_pair(struct ibv_qp **a, struct ibv_qp **b, uint32_t send_wr,
		      struct ibv_comp_cntr *wr_cntr)
{
	*a = make_qp(send_wr);
	*b = make_qp(16);
	if (wr_cntr)
		CHECK_OK(attach(*a, wr_cntr, OP_WR));
	swvt_pair_to_init(*a);
	swvt_pair_to_init(*b);
	swvt_pair_connect(*a, *b);
}

static void destroy_pair(struct ibv_qp *a, struct ibv_qp *b)
{
	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_qp(b));
}

static struct ibv_comp_cntr *cntr(void)
{
	return swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
}

/* An 8-byte WRITE of buf[src_off] to buf[dst_off]. */
static struct ibv_send_wr write_wr(struct ibv_sge *sge, uint64_t wr_id, size_t src_off,
				   size_t dst_off, unsigned flags)
{
	sge->addr = (uintptr_t)(buf + src_off);
	sge->length = 8;
	sge->lkey = mr->lkey;
	struct ibv_send_wr wr = {
	    .wr_id = wr_id,
	    .sg_list = sge,
	    .num_sge = 1,
	    .opcode = IBV_WR_RDMA_WRITE,
	    .send_flags = flags,
	};
	wr.wr.rdma.remote_addr = (uintptr_t)(buf + dst_off);
	wr.wr.rdma.rkey = mr->rkey;
	return wr;
}

static void post_trig_write(struct ibv_qp *qp, struct ibv_comp_cntr *t, uint64_t thr,
			    uint64_t wr_id, size_t src_off, size_t dst_off, unsigned flags)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&sge, wr_id, src_off, dst_off, flags), *bad;
	CHECK_OK(swv_post_send_triggered(qp, &wr, t, thr, &bad));
}

static uint32_t sq_tail(struct ibv_qp *qp)
{
	struct swv_qp *q = to_swv_qp(qp);
	pthread_mutex_lock(&q->lock);
	uint32_t t = q->sq.tail;
	pthread_mutex_unlock(&q->lock);
	return t;
}

static uint32_t held(struct ibv_qp *qp)
{
	return atomic_load(&to_swv_qp(qp)->trig_held);
}

static uint64_t ring_wr_id(struct ibv_qp *qp, uint32_t idx)
{
	struct swv_qp *q = to_swv_qp(qp);
	pthread_mutex_lock(&q->lock);
	uint64_t id = ((struct swv_send_wqe *)swv_wq_slot(&q->sq, idx))->wr_id;
	pthread_mutex_unlock(&q->lock);
	return id;
}

static struct ibv_wc poll_one(void)
{
	struct ibv_wc wc;
	for (int i = 0; i < 10000000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0);
		if (n == 1)
			return wc;
		if ((i & 1023) == 1023)
			usleep(100);
	}
	CHECK(!"no completion");
	return wc;
}

static void cq_empty(void)
{
	struct ibv_wc wc;
	CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);
}

/* ---- a reader that sees the effect sees the count at the threshold ---- */

struct reader {
	struct ibv_comp_cntr *t, *effect;
	uint64_t thr;
	_Atomic bool stop;
	uint64_t seen_effect;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	while (!atomic_load(&r->stop)) {
		/* Effect first (the triggered WRITE counted as done, which implies its
		 * data placed), then the count: the effect happens after the count
		 * reached the threshold, so having seen it the count must be there. */
		uint64_t v = swvt_cntr_read(r->effect);
		uint64_t c = swvt_cntr_read(r->t);
		if (v != 0) {
			CHECK(c >= r->thr);
			r->seen_effect++;
		}
	}
	return NULL;
}

static void test_fires_once_at_threshold(void)
{
	struct ibv_comp_cntr *t = cntr(), *wc_cntr = cntr();
	struct ibv_qp *a, *b;
	make_pair(&a, &b, 16, wc_cntr);
	memset(buf, 0, 64);
	uint64_t pattern = 0x1122334455667788ull;
	memcpy(buf, &pattern, 8);

	struct reader r = {.t = t, .effect = wc_cntr, .thr = 5};
	pthread_t th;
	CHECK_OK(pthread_create(&th, NULL, reader_main, &r));

	uint32_t tail0 = sq_tail(a);
	post_trig_write(a, t, 5, 42, 0, 8, 0);
	CHECK_EQ(held(a), 1);
	for (int i = 1; i < 5; i++) {
		CHECK_OK(ibv_inc_comp_cntr(t, 1));
		/* below the threshold: not in the ring, still reserved */
		CHECK_EQ(sq_tail(a), tail0);
		CHECK_EQ(held(a), 1);
	}
	CHECK_OK(ibv_inc_comp_cntr(t, 1)); /* 5: issued by this very call */
	CHECK_EQ(sq_tail(a), tail0 + 1);
	CHECK_EQ(held(a), 0);
	CHECK_OK(swv_comp_cntr_wait(wc_cntr, 1, TMO_MS));
	CHECK(memcmp(buf + 8, &pattern, 8) == 0);

	/* Exactly once: more increments issue nothing; a plain WRITE after them is the
	 * only other one counted. */
	CHECK_OK(ibv_inc_comp_cntr(t, 10));
	CHECK_OK(ibv_set_comp_cntr(t, 100));
	CHECK_EQ(sq_tail(a), tail0 + 1);
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&sge, 43, 0, 16, IBV_SEND_SIGNALED), *bad;
	CHECK_OK(ibv_post_send(a, &wr, &bad));
	struct ibv_wc w = poll_one();
	CHECK_EQ(w.wr_id, 43);
	CHECK_EQ(w.status, IBV_WC_SUCCESS);
	CHECK_EQ(swvt_cntr_read(wc_cntr), 2);
	cq_empty();

	atomic_store(&r.stop, true);
	CHECK_OK(pthread_join(th, NULL));
	destroy_pair(a, b);
	CHECK_OK(ibv_destroy_comp_cntr(t));
	CHECK_OK(ibv_destroy_comp_cntr(wc_cntr));
}

/* ---- order: thresholds posted out of order, a jump past several ---- */

static void test_order_and_jump(void)
{
	struct ibv_comp_cntr *t = cntr(), *wc_cntr = cntr(), *x = cntr();
	struct ibv_qp *a, *b;
	make_pair(&a, &b, 16, wc_cntr);
	uint32_t tail0 = sq_tail(a);

	/* thresholds 3, 1, 2, 2 (the two 2s in post order), then one jump to 3 */
	post_trig_write(a, t, 3, 3, 0, 8, 0);
	post_trig_write(a, t, 1, 1, 0, 8, 0);
	post_trig_write(a, t, 2, 21, 0, 8, 0);
	post_trig_write(a, t, 2, 22, 0, 8, 0);
	/* counter SETs on x in threshold order: x ends at the last one's value */
	CHECK_OK(swv_triggered_cntr_op(t, 3, x, SWV_TRIG_CNTR_SET, 30));
	CHECK_OK(swv_triggered_cntr_op(t, 1, x, SWV_TRIG_CNTR_SET, 10));
	CHECK_OK(swv_triggered_cntr_op(t, 2, x, SWV_TRIG_CNTR_SET, 20));
	CHECK_EQ(held(a), 4);
	CHECK_OK(ibv_inc_comp_cntr(t, 3));
	CHECK_EQ(sq_tail(a), tail0 + 4);
	CHECK_EQ(ring_wr_id(a, tail0 + 0), 1);
	CHECK_EQ(ring_wr_id(a, tail0 + 1), 21);
	CHECK_EQ(ring_wr_id(a, tail0 + 2), 22);
	CHECK_EQ(ring_wr_id(a, tail0 + 3), 3);
	CHECK_EQ(swvt_cntr_read(x), 30);
	CHECK_OK(swv_comp_cntr_wait(wc_cntr, 4, TMO_MS));

	/* Fired from the completion path: triggers on the WRITE counter itself, at
	 * 5..8, reached by the four plain WRITEs' acknowledgements (progress path). */
	struct ibv_comp_cntr *y = cntr();
	for (uint64_t k = 5; k <= 8; k++)
		CHECK_OK(swv_triggered_cntr_op(wc_cntr, k, y, SWV_TRIG_CNTR_ADD, k));
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge;
		struct ibv_send_wr wr = write_wr(&sge, 100 + (uint64_t)i, 0, 16, 0), *bad;
		CHECK_OK(ibv_post_send(a, &wr, &bad));
	}
	CHECK_OK(swv_comp_cntr_wait(y, 5 + 6 + 7 + 8, TMO_MS));
	CHECK_EQ(swvt_cntr_read(wc_cntr), 8);

	destroy_pair(a, b);
	CHECK_OK(ibv_destroy_comp_cntr(t));
	CHECK_OK(ibv_destroy_comp_cntr(wc_cntr));
	CHECK_OK(ibv_destroy_comp_cntr(x));
	CHECK_OK(ibv_destroy_comp_cntr(y));
}

/* ---- chains A -> B -> C -> WR, driven by the network ---- */

static void test_chain(void)
{
	struct ibv_comp_cntr *a_wr = cntr(), *b = cntr(), *c = cntr(), *done = cntr(),
			     *rwr = cntr();
	struct ibv_qp *qa, *qb;
	make_pair(&qa, &qb, 16, a_wr);
	CHECK_OK(ibv_destroy_qp(qb)); /* b needs a remote-write counter: rebuild */
	qb = make_qp(16);
	CHECK_OK(attach(qb, rwr, OP_RWR));
	swvt_pair_to_init(qb);
	{
		/* reconnect qa to the new qb: qa back to RESET first */
		struct ibv_qp_attr at = {.qp_state = IBV_QPS_RESET};
		CHECK_OK(ibv_modify_qp(qa, &at, IBV_QP_STATE));
		swvt_pair_to_init(qa);
		swvt_pair_connect(qa, qb);
	}
	memset(buf, 0, 64);
	uint64_t p1 = 0xa1a1a1a1a1a1a1a1ull, p2 = 0xb2b2b2b2b2b2b2b2ull;
	memcpy(buf + 32, &p1, 8);
	memcpy(buf + 40, &p2, 8);

	/* first WRITE acknowledged -> b += 1 -> c = 7 -> the second WRITE goes */
	CHECK_OK(swv_triggered_cntr_op(a_wr, 1, b, SWV_TRIG_CNTR_ADD, 1));
	CHECK_OK(swv_triggered_cntr_op(b, 1, c, SWV_TRIG_CNTR_SET, 7));
	post_trig_write(qa, c, 7, 2, 40, 8, 0);
	CHECK_OK(swv_triggered_cntr_op(a_wr, 2, done, SWV_TRIG_CNTR_ADD, 1));
	CHECK_EQ(ibv_destroy_comp_cntr(b), EBUSY); /* triggers wait on it */
	CHECK_EQ(ibv_destroy_comp_cntr(c), EBUSY);
	post_trig_write(qa, a_wr, 0, 1, 32, 0, 0); /* threshold 0: issued at once */
	/* the process sleeps in one wait for the end of the pipeline */
	CHECK_OK(swv_comp_cntr_wait(done, 1, TMO_MS));
	CHECK_EQ(swvt_cntr_read(b), 1);
	CHECK_EQ(swvt_cntr_read(c), 7);
	CHECK_OK(swv_comp_cntr_wait(rwr, 2, TMO_MS));
	CHECK(memcmp(buf + 0, &p1, 8) == 0);
	CHECK(memcmp(buf + 8, &p2, 8) == 0);

	destroy_pair(qa, qb);
	CHECK_OK(ibv_destroy_comp_cntr(b));
	CHECK_OK(ibv_destroy_comp_cntr(c));
	CHECK_OK(ibv_destroy_comp_cntr(a_wr));
	CHECK_OK(ibv_destroy_comp_cntr(done));
	CHECK_OK(ibv_destroy_comp_cntr(rwr));
}

/* ---- cancel before and after firing; the reserved slots ---- */

static void test_cancel(void)
{
	struct ibv_comp_cntr *t = cntr(), *wc_cntr = cntr(), *x = cntr();
	struct ibv_qp *a, *b;
	make_pair(&a, &b, 4, wc_cntr);
	uint32_t tail0 = sq_tail(a);
	uint64_t n = 99;

	/* Held WRs take their slots: 4 held, a plain post is ENOMEM. */
	for (uint64_t i = 0; i < 4; i++)
		post_trig_write(a, t, 10, i, 0, 8, 0);
	CHECK_OK(swv_triggered_cntr_op(t, 10, x, SWV_TRIG_CNTR_ADD, 1));
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&sge, 50, 0, 8, IBV_SEND_SIGNALED), *bad;
	CHECK_EQ(ibv_post_send(a, &wr, &bad), ENOMEM);
	CHECK(bad == &wr);
	CHECK_EQ(swv_post_send_triggered(a, &wr, t, 1, &bad), ENOMEM);

	/* Cancel before: all five dropped, no completion, nothing counted, slots back. */
	CHECK_OK(swv_cancel_triggered(t, &n));
	CHECK_EQ(n, 5);
	CHECK_EQ(held(a), 0);
	CHECK_OK(ibv_inc_comp_cntr(t, 20));
	CHECK_EQ(sq_tail(a), tail0);
	CHECK_EQ(swvt_cntr_read(x), 0);
	CHECK_OK(ibv_post_send(a, &wr, &bad));
	struct ibv_wc w = poll_one();
	CHECK_EQ(w.wr_id, 50);
	CHECK_EQ(w.status, IBV_WC_SUCCESS);
	cq_empty();
	CHECK_EQ(swvt_cntr_read(wc_cntr), 1);

	/* Cancel after firing: nothing to cancel, the WR completes normally. */
	post_trig_write(a, t, 21, 60, 0, 8, IBV_SEND_SIGNALED);
	CHECK_OK(ibv_inc_comp_cntr(t, 1));
	CHECK_OK(swv_cancel_triggered(t, &n));
	CHECK_EQ(n, 0);
	w = poll_one();
	CHECK_EQ(w.wr_id, 60);
	CHECK_EQ(w.status, IBV_WC_SUCCESS);
	CHECK_EQ(swvt_cntr_read(wc_cntr), 2);
	CHECK_OK(swv_cancel_triggered(t, NULL));

	destroy_pair(a, b);
	CHECK_OK(ibv_destroy_comp_cntr(t));
	CHECK_OK(ibv_destroy_comp_cntr(wc_cntr));
	CHECK_OK(ibv_destroy_comp_cntr(x));
}

/* ---- QP error before the threshold; RESET and destroy drop ---- */

static void test_qp_error_flushes(void)
{
	struct ibv_comp_cntr *t = cntr(), *wc_cntr = cntr();
	struct ibv_qp *a, *b;
	make_pair(&a, &b, 16, wc_cntr);
	post_trig_write(a, t, 5, 70, 0, 8, 0); /* unsignaled: errors give a CQE anyway */
	post_trig_write(a, t, 6, 71, 0, 8, IBV_SEND_SIGNALED);
	cq_empty();
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(a, &at, IBV_QP_STATE));
	struct ibv_wc w = poll_one();
	CHECK_EQ(w.wr_id, 70);
	CHECK_EQ(w.status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(w.qp_num, a->qp_num);
	w = poll_one();
	CHECK_EQ(w.wr_id, 71);
	CHECK_EQ(w.status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(held(a), 0);
	CHECK_EQ(swvt_cntr_read_err(wc_cntr), 2);
	CHECK_EQ(swvt_cntr_read(wc_cntr), 0);
	/* the threshold comes later: nothing more */
	CHECK_OK(ibv_inc_comp_cntr(t, 10));
	cq_empty();
	/* posted to a QP in ERR: flushed at once, as ibv_post_send does */
	post_trig_write(a, t, 100, 72, 0, 8, 0);
	w = poll_one();
	CHECK_EQ(w.wr_id, 72);
	CHECK_EQ(w.status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(swvt_cntr_read_err(wc_cntr), 3);

	/* RESET drops without completion; destroy too. */
	at.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(a, &at, IBV_QP_STATE));
	swvt_pair_to_init(a);
	at.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(b, &at, IBV_QP_STATE));
	swvt_pair_to_init(b);
	swvt_pair_connect(a, b);
	post_trig_write(a, t, 200, 73, 0, 8, 0);
	at.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(a, &at, IBV_QP_STATE));
	CHECK_EQ(held(a), 0);
	CHECK_OK(ibv_inc_comp_cntr(t, 200));
	cq_empty();
	swvt_pair_to_init(a);
	struct ibv_qp_attr rt = {.qp_state = IBV_QPS_RESET};
	CHECK_OK(ibv_modify_qp(b, &rt, IBV_QP_STATE));
	swvt_pair_to_init(b);
	swvt_pair_connect(a, b);
	post_trig_write(a, t, 1000, 74, 0, 8, 0);
	CHECK_EQ(ibv_destroy_comp_cntr(t), EBUSY);
	destroy_pair(a, b);
	cq_empty();
	CHECK_OK(ibv_destroy_comp_cntr(t)); /* its trigger went with the QP */
	CHECK_OK(ibv_destroy_comp_cntr(wc_cntr));
}

/* ---- the error rule: the trigger counter's error count changes ---- */

static void test_error_rule(void)
{
	struct ibv_comp_cntr *t = cntr(), *wc_cntr = cntr(), *b = cntr(), *c = cntr();
	struct ibv_qp *a, *qb;
	make_pair(&a, &qb, 16, wc_cntr);
	uint32_t tail0 = sq_tail(a);

	/* an error counted before the post does not concern the trigger */
	CHECK_OK(ibv_inc_err_comp_cntr(t, 1));
	post_trig_write(a, t, 3, 80, 0, 8, 0);
	CHECK_OK(swv_triggered_cntr_op(t, 3, b, SWV_TRIG_CNTR_ADD, 5));
	CHECK_OK(swv_triggered_cntr_op(b, 5, c, SWV_TRIG_CNTR_ADD, 1));
	cq_empty();
	CHECK_OK(ibv_inc_comp_cntr(t, 1));
	/* one after: the WR is flushed, never issued; b and then c see an error */
	CHECK_OK(ibv_inc_err_comp_cntr(t, 1));
	struct ibv_wc w = poll_one();
	CHECK_EQ(w.wr_id, 80);
	CHECK_EQ(w.status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(sq_tail(a), tail0);
	CHECK_EQ(held(a), 0);
	CHECK_EQ(swvt_cntr_read_err(wc_cntr), 1);
	CHECK_EQ(swvt_cntr_read(b), 0);
	CHECK_EQ(swvt_cntr_read_err(b), 1);
	CHECK_EQ(swvt_cntr_read_err(c), 1);
	CHECK_EQ(swvt_cntr_read(c), 0);
	/* reaching the threshold later changes nothing */
	CHECK_OK(ibv_inc_comp_cntr(t, 5));
	CHECK_EQ(swvt_cntr_read(b), 0);
	cq_empty();

	destroy_pair(a, qb);
	CHECK_OK(ibv_destroy_comp_cntr(t));
	CHECK_OK(ibv_destroy_comp_cntr(wc_cntr));
	CHECK_OK(ibv_destroy_comp_cntr(b));
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

/* ---- argument checks ---- */

static void test_errnos(void)
{
	struct ibv_comp_cntr *t = cntr();
	struct ibv_context *other = swvt_open_first_device();
	struct ibv_comp_cntr *o = swvt_cntr_create(other, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_qp *a, *b;
	make_pair(&a, &b, 16, NULL);
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&sge, 1, 0, 8, 0), *bad = (void *)1;

	CHECK_EQ(swv_post_send_triggered(a, &wr, t, 1, NULL), EINVAL);
	CHECK_EQ(swv_post_send_triggered(a, NULL, t, 1, &bad), EINVAL);
	CHECK(bad == NULL);
	CHECK_EQ(swv_post_send_triggered(NULL, &wr, t, 1, &bad), EINVAL);
	CHECK(bad == &wr);
	CHECK_EQ(swv_post_send_triggered(a, &wr, NULL, 1, &bad), EINVAL);
	CHECK_EQ(swv_post_send_triggered(a, &wr, o, 1, &bad), EINVAL);
	wr.opcode = (enum ibv_wr_opcode)99;
	CHECK_EQ(swv_post_send_triggered(a, &wr, t, 1, &bad), EINVAL);
	CHECK(bad == &wr);
	wr.opcode = IBV_WR_RDMA_WRITE;
	struct ibv_qp *fresh = make_qp(4); /* RESET */
	CHECK_EQ(swv_post_send_triggered(fresh, &wr, t, 1, &bad), EINVAL);
	CHECK_OK(ibv_destroy_qp(fresh));
	CHECK_EQ(held(a), 0);

	CHECK_EQ(swv_triggered_cntr_op(NULL, 1, t, SWV_TRIG_CNTR_ADD, 1), EINVAL);
	CHECK_EQ(swv_triggered_cntr_op(t, 1, NULL, SWV_TRIG_CNTR_ADD, 1), EINVAL);
	CHECK_EQ(swv_triggered_cntr_op(t, 1, o, SWV_TRIG_CNTR_ADD, 1), EINVAL);
	CHECK_EQ(swv_triggered_cntr_op(t, 1, t, (enum swv_trig_cntr_op)7, 1), EINVAL);
	CHECK_EQ(swv_cancel_triggered(NULL, NULL), EINVAL);

	struct swv_comp_cntr_wait_entry e[2] = {{t, 1, 0}, {NULL, 1, 0}};
	unsigned idx = 77;
	CHECK_EQ(swv_comp_cntr_wait_many(NULL, 1, 0, 0, &idx), EINVAL);
	CHECK_EQ(swv_comp_cntr_wait_many(e, 0, 0, 0, &idx), EINVAL);
	CHECK_EQ(swv_comp_cntr_wait_many(e, 1, 0, 0, NULL), EINVAL);
	CHECK_EQ(swv_comp_cntr_wait_many(e, 1, 2, 0, &idx), EINVAL);
	CHECK_EQ(swv_comp_cntr_wait_many(e, SWV_COMP_CNTR_WAIT_MANY_MAX + 1, 0, 0, &idx), EINVAL);
	CHECK_EQ(swv_comp_cntr_wait_many(e, 2, 0, 0, &idx), EINVAL);
	CHECK_EQ(idx, 1);

	destroy_pair(a, b);
	CHECK_OK(ibv_destroy_comp_cntr(t));
	CHECK_OK(ibv_destroy_comp_cntr(o));
	CHECK_OK(ibv_close_device(other));
}

/* ---- wait on many counters ---- */

struct later {
	struct ibv_comp_cntr *c;
	bool err;
	uint64_t amount;
};

static void *later_main(void *arg)
{
	struct later *l = arg;
	usleep(20000); /* a delay, not synchronisation: the result holds either way */
	if (l->err)
		CHECK_OK(ibv_inc_err_comp_cntr(l->c, l->amount));
	else
		CHECK_OK(ibv_inc_comp_cntr(l->c, l->amount));
	return NULL;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void test_wait_many(void)
{
	struct ibv_comp_cntr *c[4];
	for (int i = 0; i < 4; i++)
		c[i] = cntr();
	struct swv_comp_cntr_wait_entry e[4];
	for (int i = 0; i < 4; i++)
		e[i] = (struct swv_comp_cntr_wait_entry){c[i], (uint64_t)(i + 1) * 10, 0};
	unsigned idx = 99;

	/* timeout, none reached */
	uint64_t t0 = now_ms();
	CHECK_EQ(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ANY, 50, &idx), ETIMEDOUT);
	CHECK(now_ms() - t0 >= 50);
	CHECK_EQ(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ANY, 0, &idx), ETIMEDOUT);

	/* any: a sleeper woken by counter 2 reaching 30 gets index 2 */
	CHECK_OK(ibv_inc_comp_cntr(c[1], 19)); /* below its 20 */
	struct later l = {c[2], false, 30};
	pthread_t th;
	CHECK_OK(pthread_create(&th, NULL, later_main, &l));
	CHECK_OK(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ANY, TMO_MS, &idx));
	CHECK_EQ(idx, 2);
	CHECK_OK(pthread_join(th, NULL));
	/* already reached: the lowest index reached */
	CHECK_OK(ibv_inc_comp_cntr(c[1], 1));
	CHECK_OK(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ANY, 0, &idx));
	CHECK_EQ(idx, 1);

	/* all: times out naming the first open entry, then completes */
	CHECK_EQ(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ALL, 10, &idx), ETIMEDOUT);
	CHECK_EQ(idx, 0);
	CHECK_OK(ibv_inc_comp_cntr(c[0], 10));
	CHECK_EQ(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ALL, 0, &idx), ETIMEDOUT);
	CHECK_EQ(idx, 3);
	struct later l3 = {c[3], false, 40};
	CHECK_OK(pthread_create(&th, NULL, later_main, &l3));
	CHECK_OK(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ALL, TMO_MS, &idx));
	CHECK_OK(pthread_join(th, NULL));

	/* an error change wakes a sleeper: EIO, its index */
	for (int i = 0; i < 4; i++)
		e[i].threshold = 1000;
	struct later le = {c[1], true, 1};
	CHECK_OK(pthread_create(&th, NULL, later_main, &le));
	CHECK_EQ(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ANY, TMO_MS, &idx), EIO);
	CHECK_EQ(idx, 1);
	CHECK_OK(pthread_join(th, NULL));
	/* at entry too, for all as for any; err_base read now makes it quiet again */
	CHECK_EQ(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ALL, TMO_MS, &idx), EIO);
	CHECK_EQ(idx, 1);
	e[1].err_base = swvt_cntr_read_err(c[1]);
	CHECK_EQ(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ANY, 0, &idx), ETIMEDOUT);

	/* the counter fd keeps working beside it */
	int fd = swv_comp_cntr_get_fd(c[0]);
	CHECK(fd >= 0);
	CHECK_OK(swv_comp_cntr_arm(c[0], 15));
	struct later l0 = {c[0], false, 5};
	e[0].threshold = 15;
	CHECK_OK(pthread_create(&th, NULL, later_main, &l0));
	CHECK_OK(swv_comp_cntr_wait_many(e, 4, SWV_COMP_CNTR_WAIT_ANY, TMO_MS, &idx));
	CHECK_EQ(idx, 0);
	CHECK_OK(pthread_join(th, NULL));
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	CHECK_EQ(poll(&pfd, 1, TMO_MS), 1);

	for (int i = 0; i < 4; i++)
		CHECK_OK(ibv_destroy_comp_cntr(c[i]));
}

/* ---- concurrency: many threads increment, chains fire exactly ---- */

#define NTHREADS 4
#define NINC	 2000

static void *inc_main(void *arg)
{
	for (int i = 0; i < NINC; i++)
		CHECK_OK(ibv_inc_comp_cntr(arg, 1));
	return NULL;
}

static void test_concurrent(void)
{
	struct ibv_comp_cntr *t = cntr(), *x = cntr(), *y = cntr(), *wc_cntr = cntr();
	struct ibv_qp *a, *b;
	make_pair(&a, &b, 256, wc_cntr);
	/* every 100 increments of t: x += 1, and a WRITE; x's every 10: y += 1 */
	for (uint64_t k = 1; k <= NTHREADS * NINC / 100; k++) {
		CHECK_OK(swv_triggered_cntr_op(t, k * 100, x, SWV_TRIG_CNTR_ADD, 1));
		post_trig_write(a, t, k * 100, k, 0, 8, 0);
	}
	for (uint64_t k = 1; k <= NTHREADS * NINC / 1000; k++)
		CHECK_OK(swv_triggered_cntr_op(x, k * 10, y, SWV_TRIG_CNTR_ADD, 1));
	pthread_t th[NTHREADS];
	for (int i = 0; i < NTHREADS; i++)
		CHECK_OK(pthread_create(&th[i], NULL, inc_main, t));
	for (int i = 0; i < NTHREADS; i++)
		CHECK_OK(pthread_join(th[i], NULL));
	CHECK_EQ(swvt_cntr_read(t), NTHREADS * NINC);
	CHECK_EQ(swvt_cntr_read(x), NTHREADS * NINC / 100);
	CHECK_EQ(swvt_cntr_read(y), NTHREADS * NINC / 1000);
	CHECK_OK(swv_comp_cntr_wait(wc_cntr, NTHREADS * NINC / 100, TMO_MS));
	CHECK_EQ(held(a), 0);
	destroy_pair(a, b);
	CHECK_OK(ibv_destroy_comp_cntr(t));
	CHECK_OK(ibv_destroy_comp_cntr(x));
	CHECK_OK(ibv_destroy_comp_cntr(y));
	CHECK_OK(ibv_destroy_comp_cntr(wc_cntr));
}

/* Cancel racing the increments: every operation either fired or was dropped, exactly
 * once (x counts the fired counter ops, the ring the fired WRs). */
#define NRACE 200

struct racer {
	struct ibv_comp_cntr *t;
	_Atomic bool started;
};

static void *race_inc_main(void *arg)
{
	struct racer *r = arg;
	atomic_store(&r->started, true);
	for (int i = 0; i < 2 * NRACE; i++)
		CHECK_OK(ibv_inc_comp_cntr(r->t, 1));
	return NULL;
}

static void test_cancel_race(void)
{
	struct ibv_comp_cntr *t = cntr(), *x = cntr(), *wc_cntr = cntr();
	struct ibv_qp *a, *b;
	make_pair(&a, &b, NRACE + 8, wc_cntr);
	uint32_t tail0 = sq_tail(a);
	for (uint64_t k = 1; k <= NRACE; k++) {
		CHECK_OK(swv_triggered_cntr_op(t, 2 * k, x, SWV_TRIG_CNTR_ADD, 1));
		post_trig_write(a, t, 2 * k - 1, k, 0, 8, 0);
	}
	struct racer r = {.t = t};
	pthread_t th;
	CHECK_OK(pthread_create(&th, NULL, race_inc_main, &r));
	while (!atomic_load(&r.started))
		sched_yield();
	uint64_t n = 0;
	CHECK_OK(swv_cancel_triggered(t, &n));
	CHECK_OK(pthread_join(th, NULL));
	uint64_t fired_wr = sq_tail(a) - tail0, fired_op = swvt_cntr_read(x);
	CHECK_EQ(fired_wr + fired_op + n, 2 * NRACE);
	CHECK_EQ(held(a), 0);
	/* what fired completes; what was dropped never counts */
	CHECK_OK(swv_comp_cntr_wait(wc_cntr, fired_wr, TMO_MS));
	CHECK_EQ(swvt_cntr_read(wc_cntr), fired_wr);
	CHECK_EQ(swvt_cntr_read_err(wc_cntr), 0);
	destroy_pair(a, b);
	CHECK_OK(ibv_destroy_comp_cntr(t));
	CHECK_OK(ibv_destroy_comp_cntr(x));
	CHECK_OK(ibv_destroy_comp_cntr(wc_cntr));
}

int main(void)
{
	ctx = swvt_open_first_device();
	pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	CHECK_PTR(cq);
	mr = swvt_reg_buf(pd, BUF_SIZE,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	buf = mr->addr;

	test_fires_once_at_threshold();
	test_order_and_jump();
	test_chain();
	test_cancel();
	test_qp_error_flushes();
	test_error_rule();
	test_errnos();
	test_wait_many();
	test_concurrent();
	test_cancel_race();

	swvt_dereg_buf(mr);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	printf("test_trig: ok\n");
	return 0;
}
