/*
 * ibv_destroy_qp of a QP with an async event handed out and not yet acknowledged waits
 * for the ack (as rdma-core). Meanwhile the event's handler may still use the QP it was
 * given -- query or modify it -- and must get an answer, never a crash: the QP's
 * transport state (qp->req/resp/auth) lives until the wait is over.
 */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "check.h"
#include "core/async.h"
#include "core/context.h"
#include "core/qp.h"

static void *destroy_thread(void *arg)
{
	return (void *)(intptr_t)ibv_destroy_qp(arg);
}

/* glibc: a thread waiting on c holds a reference in __wrefs (bits 3 and up). This is
 * how the test knows the destroying thread has gone as far as the wait for the ack. */
static bool has_waiter(pthread_cond_t *c)
{
	return __atomic_load_n(&c->__data.__wrefs, __ATOMIC_ACQUIRE) >> 3 != 0;
}

static void run(struct ibv_context *ib, enum ibv_qp_type type)
{
	struct ibv_pd *pd = ibv_alloc_pd(ib);
	CHECK_PTR(pd);
	struct ibv_cq *cq = ibv_create_cq(ib, 16, NULL, NULL, 0);
	CHECK_PTR(cq);
	struct ibv_qp_init_attr ia = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
	    .qp_type = type,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK_PTR(qp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
		   (type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
	CHECK_OK(ibv_modify_qp(qp, &a, mask));

	/* An event for the QP, taken by the application and not acknowledged yet. */
	swv_async_event(to_swv_ctx(ib), IBV_EVENT_COMM_EST, qp);
	struct ibv_async_event ev;
	CHECK_OK(ibv_get_async_event(ib, &ev));
	CHECK_EQ(ev.event_type, IBV_EVENT_COMM_EST);
	CHECK(ev.element.qp == qp);

	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, destroy_thread, qp));
	while (!has_waiter(&qp->cond))
		sched_yield();

	/* The handler still holds the QP: it answers. */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK_OK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi));
	CHECK_EQ(qa.qp_state, IBV_QPS_INIT);
	struct ibv_qp_attr e = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(qp, &e, IBV_QP_STATE));

	ibv_ack_async_event(&ev);
	void *rc;
	CHECK_OK(pthread_join(t, &rc));
	CHECK_EQ((int)(intptr_t)rc, 0);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
}

int main(void)
{
	unsetenv("SWVERBS_CONFIG");
	setenv("SWVERBS_DEVICES", "de0=127.0.0.1/8", 1);
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK_PTR(l);
	struct ibv_context *ib = ibv_open_device(l[0]);
	CHECK_PTR(ib);
	run(ib, IBV_QPT_RC);
	run(ib, IBV_QPT_UD);
	CHECK_OK(ibv_close_device(ib));
	ibv_free_device_list(l);
	printf("test_qp_destroy_event: OK\n");
	return 0;
}
