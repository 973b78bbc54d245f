/*
 * Extended CQs: creation rules (wc_flags, flags, comp_mask, sizes), every callback
 * set, start_poll/next_poll/end_poll with ENOENT on an empty CQ and after the last
 * completion, the readers against what ibv_poll_cq reports, mixing both polling
 * styles on one CQ in order, completion timestamps (monotonic, inside the window of
 * the work, consistent with ibv_query_rt_values_ex, surviving a resize), and the
 * RESET rule: a QP moved to RESET (or destroyed) leaves no CQE behind, others'
 * CQEs keep their order.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "check.h"
#include "inproc.h"
#include "core/cq.h"

#define TMO_MS 10000

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_port_attr port;
static uint8_t *buf;
static struct ibv_mr *mr;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t real_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct ibv_qp *make_qp(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 64, .max_recv_wr = 64,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK_PTR(qp);
	return qp;
}

static void post_recv(struct ibv_qp *qp, uint64_t wr_id)
{
	struct ibv_sge s = {(uintptr_t)buf + 65536, 4096, mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1}, *bad;
	CHECK_OK(ibv_post_recv(qp, &wr, &bad));
}

static void post_send(struct ibv_qp *qp, uint64_t wr_id, uint32_t len, uint32_t imm)
{
	struct ibv_sge s = {(uintptr_t)buf, len, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1,
				 .opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm)},
			   *bad;
	CHECK_OK(ibv_post_send(qp, &wr, &bad));
}

/* Wait until the CQ holds n completions (without taking any). */
static void wait_count(struct ibv_cq_ex *cqx, uint32_t n)
{
	uint64_t end = mono_ns() + (uint64_t)TMO_MS * 1000000;
	while (swv_cq_count(to_swv_cq(ibv_cq_ex_to_cq(cqx))) < n)
		CHECK(mono_ns() < end);
}

static void test_create_rules(void)
{
	struct ibv_cq_init_attr_ex a = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *c = ibv_create_cq_ex(ctx, &a);
	CHECK_PTR(c);
	/* The inlines call every callback unchecked. */
	CHECK_FNS_SET(c, start_poll, 18);
	struct ibv_poll_cq_attr pa = {0};
	CHECK_EQ(ibv_start_poll(c, &pa), ENOENT);
	pa.comp_mask = 1;
	CHECK_EQ(ibv_start_poll(c, &pa), EINVAL);
	CHECK_EQ(ibv_wc_read_completion_ts(c), 0); /* no timestamps asked for */
	CHECK_EQ(ibv_wc_read_cvlan(c), 0);
	CHECK_EQ(ibv_wc_read_flow_tag(c), 0);
	struct ibv_wc_tm_info tm;
	memset(&tm, 0xff, sizeof(tm));
	ibv_wc_read_tm_info(c, &tm);
	CHECK_EQ(tm.tag, 0);
	CHECK(ibv_cq_ex_to_cq(c)->cqe >= 16);
	CHECK_OK(ibv_destroy_cq(ibv_cq_ex_to_cq(c)));

	uint64_t ok_flags[] = {0, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
			       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
			       IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
			       IBV_WC_EX_WITH_TM_INFO | IBV_WC_STANDARD_FLAGS};
	for (size_t i = 0; i < sizeof(ok_flags) / sizeof(ok_flags[0]); i++) {
		a.wc_flags = ok_flags[i];
		c = ibv_create_cq_ex(ctx, &a);
		CHECK_PTR(c);
		CHECK_OK(ibv_destroy_cq(ibv_cq_ex_to_cq(c)));
	}
	/* Raw packet, flow tags: not here. */
	uint64_t no_flags[] = {IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG, 1ull << 20};
	for (size_t i = 0; i < sizeof(no_flags) / sizeof(no_flags[0]); i++) {
		a.wc_flags = no_flags[i] | IBV_WC_EX_WITH_BYTE_LEN;
		errno = 0;
		CHECK(!ibv_create_cq_ex(ctx, &a) && errno == EOPNOTSUPP);
	}
	a.wc_flags = 0;
	a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED; /* a promise we need nothing for */
	c = ibv_create_cq_ex(ctx, &a);
	CHECK_PTR(c);
	CHECK_OK(ibv_destroy_cq(ibv_cq_ex_to_cq(c)));
	a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &a) && errno == EOPNOTSUPP);
	a.flags = 0;
	a.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD; /* a PD, not a parent domain */
	a.parent_domain = pd;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &a) && errno == EINVAL);
	a.comp_mask = 1u << 7;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &a) && errno == EINVAL);
	a.comp_mask = 0;
	struct ibv_device_attr da;
	CHECK_OK(ibv_query_device(ctx, &da));
	a.cqe = (uint32_t)da.max_cqe + 1;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &a) && errno == EINVAL);
	a.cqe = 0;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &a) && errno == EINVAL);
	a.cqe = 4;
	a.comp_vector = (uint32_t)ctx->num_comp_vectors;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &a) && errno == EINVAL);
	printf("create: callbacks, flags, masks, sizes\n");
}

/* Readers against ibv_poll_cq's view of the same kind of completions; ENOENT
 * semantics; mixing both polling styles keeps the order. */
static void test_poll(void)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = 64,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK};
	struct ibv_cq_ex *c = ibv_create_cq_ex(ctx, &a);
	CHECK_PTR(c);
	struct ibv_cq *cq = ibv_cq_ex_to_cq(c);
	struct ibv_qp *qa = make_qp(cq), *qb = make_qp(cq);
	swvt_pair_to_init(qa);
	swvt_pair_to_init(qb);
	swvt_pair_connect(qa, qb);

	/* One SEND_WITH_IMM: 2 completions (send on qa, receive on qb). */
	uint64_t t0 = mono_ns(), w0 = real_ns();
	post_recv(qb, 10);
	post_send(qa, 11, 100, 0x55);
	wait_count(c, 2);
	uint64_t t1 = mono_ns(), w1 = real_ns();
	struct ibv_poll_cq_attr pa = {0};
	uint64_t ts[2];
	bool seen_send = false, seen_recv = false;
	for (int i = 0; i < 2; i++) {
		CHECK_OK(i == 0 ? ibv_start_poll(c, &pa) : ibv_next_poll(c));
		CHECK_EQ(c->status, IBV_WC_SUCCESS);
		ts[i] = ibv_wc_read_completion_ts(c);
		CHECK(ts[i] >= t0 && ts[i] <= t1); /* 1 tick = 1 ns of CLOCK_MONOTONIC */
		uint64_t wall = ibv_wc_read_completion_wallclock_ns(c);
		CHECK(wall + 5000000 >= w0 && wall <= w1 + 5000000);
		CHECK_EQ(ibv_wc_read_vendor_err(c), 0);
		if (c->wr_id == 11) {
			seen_send = true;
			CHECK_EQ(ibv_wc_read_opcode(c), IBV_WC_SEND);
			CHECK_EQ(ibv_wc_read_qp_num(c), qa->qp_num);
		} else {
			CHECK_EQ(c->wr_id, 10);
			seen_recv = true;
			CHECK_EQ(ibv_wc_read_opcode(c), IBV_WC_RECV);
			CHECK_EQ(ibv_wc_read_byte_len(c), 100);
			CHECK(ibv_wc_read_wc_flags(c) & IBV_WC_WITH_IMM);
			CHECK_EQ(ntohl(ibv_wc_read_imm_data(c)), 0x55);
			CHECK_EQ(ibv_wc_read_qp_num(c), qb->qp_num);
			CHECK_EQ(ibv_wc_read_src_qp(c), qa->qp_num);
			CHECK_EQ(ibv_wc_read_sl(c), 0);
			CHECK_EQ(ibv_wc_read_dlid_path_bits(c), 0);
			if (port.link_layer == IBV_LINK_LAYER_INFINIBAND)
				CHECK_EQ(ibv_wc_read_slid(c), port.lid);
		}
	}
	CHECK(seen_send && seen_recv);
	CHECK(ts[1] >= ts[0]);
	/* After the last one: ENOENT, again and again, then end_poll. */
	CHECK_EQ(ibv_next_poll(c), ENOENT);
	CHECK_EQ(ibv_next_poll(c), ENOENT);
	ibv_end_poll(c);
	CHECK_EQ(ibv_start_poll(c, &pa), ENOENT);

	/* The raw clock agrees with the timestamps. */
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	CHECK_OK(ibv_query_rt_values_ex(ctx, &v));
	CHECK((uint64_t)v.raw_clock.tv_nsec >= ts[1]);

	/* Mixed: 3 SENDs = 6 completions, in the order the CQ got them. Take one with
	 * start_poll, two with ibv_poll_cq, the rest with start/next_poll. */
	for (int i = 0; i < 3; i++)
		post_recv(qb, 20 + (uint64_t)i);
	for (int i = 0; i < 3; i++)
		post_send(qa, 30 + (uint64_t)i, 8, 0);
	wait_count(c, 6);
	/* Reference order, read without consuming. */
	struct swv_cq *sc = to_swv_cq(cq);
	uint64_t ref[6];
	pthread_mutex_lock(&sc->lock);
	uint32_t h = atomic_load(&sc->head);
	for (int i = 0; i < 6; i++)
		ref[i] = sc->ring[(h + (uint32_t)i) & (sc->size - 1)].wr_id;
	pthread_mutex_unlock(&sc->lock);
	uint64_t got[6];
	CHECK_OK(ibv_start_poll(c, &pa));
	got[0] = c->wr_id;
	ibv_end_poll(c);
	struct ibv_wc wc[2];
	CHECK_EQ(ibv_poll_cq(cq, 2, wc), 2);
	got[1] = wc[0].wr_id;
	got[2] = wc[1].wr_id;
	CHECK_OK(ibv_start_poll(c, &pa));
	got[3] = c->wr_id;
	CHECK_OK(ibv_next_poll(c));
	got[4] = c->wr_id;
	CHECK_OK(ibv_next_poll(c));
	got[5] = c->wr_id;
	CHECK_EQ(ibv_next_poll(c), ENOENT);
	ibv_end_poll(c);
	for (int i = 0; i < 6; i++)
		CHECK_EQ(got[i], ref[i]);
	CHECK_EQ(ibv_poll_cq(cq, 2, wc), 0);

	/* An error completion: status set, wr_id right. qa to ERR with a receive
	 * posted: it flushes. */
	post_recv(qa, 40);
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(qa, &at, IBV_QP_STATE));
	wait_count(c, 1);
	CHECK_OK(ibv_start_poll(c, &pa));
	CHECK_EQ(c->status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(c->wr_id, 40);
	ibv_end_poll(c);

	/* Timestamps move with their CQEs through a resize. */
	at.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(qa, &at, IBV_QP_STATE));
	CHECK_OK(ibv_destroy_qp(qa));
	post_recv(qb, 50);
	post_recv(qb, 51);
	at.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(qb, &at, IBV_QP_STATE));
	wait_count(c, 2);
	uint64_t before = mono_ns();
	CHECK_OK(ibv_resize_cq(cq, 1000));
	CHECK(cq->cqe >= 1000);
	CHECK_OK(ibv_start_poll(c, &pa));
	CHECK_EQ(c->wr_id, 50);
	CHECK(ibv_wc_read_completion_ts(c) && ibv_wc_read_completion_ts(c) <= before);
	CHECK_OK(ibv_next_poll(c));
	CHECK_EQ(c->wr_id, 51);
	CHECK(ibv_wc_read_completion_ts(c) && ibv_wc_read_completion_ts(c) <= before);
	ibv_end_poll(c);
	CHECK_OK(ibv_destroy_qp(qb));
	CHECK_OK(ibv_destroy_cq(cq));
	printf("poll: readers, ENOENT, mixed with ibv_poll_cq in order, timestamps, resize\n");
}

/* RESET and destroy take the QP's queued CQEs with them; other QPs' stay in order. */
static void test_reset_cleans(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK_PTR(cq);
	struct ibv_qp *q1 = make_qp(cq), *q2 = make_qp(cq), *q3 = make_qp(cq);
	swvt_pair_to_init(q1);
	swvt_pair_to_init(q2);
	swvt_pair_to_init(q3);
	swvt_pair_connect(q1, q2); /* q3 stays in INIT */
	/* Interleave flush CQEs of q1 and q3 (receives flushed by ERR). */
	post_recv(q1, 1);
	post_recv(q3, 2);
	post_recv(q1, 3);
	post_recv(q3, 4);
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
	CHECK_OK(ibv_modify_qp(q3, &at, IBV_QP_STATE)); /* 2, 4 */
	CHECK_OK(ibv_modify_qp(q1, &at, IBV_QP_STATE)); /* 1, 3 */
	post_recv(q3, 5);                               /* flushed at once */
	CHECK_EQ(swv_cq_count(to_swv_cq(cq)), 5);
	at.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(q1, &at, IBV_QP_STATE));
	struct ibv_wc wc[8];
	CHECK_EQ(ibv_poll_cq(cq, 8, wc), 3);
	CHECK(wc[0].wr_id == 2 && wc[1].wr_id == 4 && wc[2].wr_id == 5);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(wc[i].qp_num, q3->qp_num);

	/* Destroy does the same. */
	post_recv(q3, 6);
	post_recv(q3, 7);
	CHECK_EQ(swv_cq_count(to_swv_cq(cq)), 2);
	CHECK_OK(ibv_destroy_qp(q3));
	CHECK_EQ(swv_cq_count(to_swv_cq(cq)), 0);
	CHECK_OK(ibv_destroy_qp(q1));
	CHECK_OK(ibv_destroy_qp(q2));
	CHECK_OK(ibv_destroy_cq(cq));
	printf("reset/destroy: the QP's CQEs go, others keep their order\n");
}

int main(void)
{
	ctx = swvt_open_first_device();
	CHECK_OK(ibv_query_port(ctx, 1, &port));
	pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	mr = swvt_reg_buf(pd, 1 << 17, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	buf = mr->addr;

	test_create_rules();
	test_poll();
	test_reset_cleans();

	swvt_dereg_buf(mr);
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
	printf("ok\n");
	return 0;
}
