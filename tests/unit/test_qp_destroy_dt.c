/*
 * ibv_destroy_qp withdraws the QP from its inbox's direct-placement table
 * (src/link/shm.h) before it waits for the acknowledgement of the QP's async events;
 * the handler holding such an event may still modify the QP (test_qp_destroy_event.c).
 * That modify must not list the QP again: a listing outliving the QP lets the peer's
 * sender place RDMA WRITEs straight into the memory of a QP that no longer exists.
 *
 * An RC pair over the intra-host link, b's QP listed (RTS, REMOTE_WRITE). b's QP is
 * destroyed while a handler holds a COMM_EST of it; the handler modifies it RTS -> RTS
 * during the wait: the QP stays withdrawn, and once the destroy returned, a WRITE
 * from a to b's old QP number is not placed (a's placement count stays, b's buffer
 * keeps its bytes).
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "core/async.h"
#include "core/context.h"
#include "core/qp.h"
#include "rcpair.h"
#include "rcpair_int.h"

static void *destroy_thread(void *arg)
{
	return (void *)(intptr_t)ibv_destroy_qp(arg);
}

/* glibc: a thread waiting on c holds a reference in __wrefs (bits 3 and up): the
 * destroying thread has reached the wait for the ack (as test_qp_destroy_event.c). */
static bool has_waiter(pthread_cond_t *c)
{
	return __atomic_load_n(&c->__data.__wrefs, __ATOMIC_ACQUIRE) >> 3 != 0;
}

static bool listed(struct ibv_qp *qp)
{
	struct swv_qp *q = to_swv_qp(qp);
	pthread_mutex_lock(&q->lock);
	bool on = q->dt_published;
	pthread_mutex_unlock(&q->lock);
	return on;
}

int main(void)
{
	swvt_rc_need_direct();
	struct swvt_rc_side a, b;
	swvt_rc_pair_open(&a, &b, NULL, NULL, NULL);
	CHECK(swvt_rc_ep(&a)->shm && swvt_rc_ep(&b)->shm);
	swvt_rc_warm(&a, &b);
	/* The pair places: one WRITE goes straight into b's buffer. */
	uint64_t d0 = swvt_rc_shm_stats(&a).direct_tx;
	swvt_rc_fill(a.buf, 64, 1);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)b.buf, b.mr->rkey, 0);
	CHECK_EQ(swvt_rc_wait_wc(a.cq).status, IBV_WC_SUCCESS);
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d0 + 1);
	CHECK(listed(b.qp));

	struct ibv_qp *qp = b.qp;
	swv_async_event(to_swv_ctx(b.ctx), IBV_EVENT_COMM_EST, qp);
	struct ibv_async_event ev;
	CHECK_OK(ibv_get_async_event(b.ctx, &ev));
	CHECK(ev.element.qp == qp);
	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, destroy_thread, qp));
	while (!has_waiter(&qp->cond))
		sched_yield();
	CHECK(!listed(qp)); /* withdrawn before the wait */
	/* The handler's modify: answered, and the QP not listed again. */
	struct ibv_qp_attr m = {.qp_state = IBV_QPS_RTS};
	CHECK_OK(ibv_modify_qp(qp, &m, IBV_QP_STATE));
	CHECK(!listed(qp));
	ibv_ack_async_event(&ev);
	void *rc;
	CHECK_OK(pthread_join(t, &rc));
	CHECK_EQ((int)(intptr_t)rc, 0);

	/* A WRITE to the gone QP's number: not placed, b's memory untouched (its MR
	 * is still registered); the request finds no QP and a's retries run out. */
	memset(b.buf + 4096, 0x5a, 64);
	uint64_t d1 = swvt_rc_shm_stats(&a).direct_tx;
	swvt_rc_fill(a.buf + 4096, 64, 2);
	swvt_rc_post(&a, IBV_WR_RDMA_WRITE, 4096, 64, (uintptr_t)b.buf + 4096, b.mr->rkey, 0);
	CHECK(swvt_rc_wait_wc(a.cq).status != IBV_WC_SUCCESS);
	CHECK_EQ(swvt_rc_shm_stats(&a).direct_tx, d1);
	for (unsigned i = 0; i < 64; i++)
		CHECK_EQ(b.buf[4096 + i], 0x5a);

	b.qp = NULL;
	CHECK_OK(ibv_destroy_qp(a.qp));
	CHECK_OK(ibv_dereg_mr(b.mr));
	CHECK_OK(ibv_dereg_mr(a.mr));
	a.mr = b.mr = NULL;
	/* what swvt_rc_side_close does after the QP */
	struct swvt_rc_side *s[2] = {&a, &b};
	for (int i = 0; i < 2; i++) {
		CHECK_OK(munmap(s[i]->buf, s[i]->len) ? errno : 0);
		CHECK_OK(ibv_destroy_cq(s[i]->cq));
		CHECK_OK(ibv_dealloc_pd(s[i]->pd));
		CHECK_OK(ibv_close_device(s[i]->ctx));
	}
	return 0;
}
