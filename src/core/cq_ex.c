/*
 * ibv_cq_ex callbacks (see cq_ex.h). Every callback a program may reach through the
 * ibv_start_poll / ibv_wc_read_* inlines is set, since they call them unchecked.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cq.h"
#include "core/cq_ex.h"

static inline struct swv_cq_ex *ex_of(struct ibv_cq_ex *cqx)
{
	return to_swv_cq(ibv_cq_ex_to_cq(cqx))->ex;
}

/* Take the next completion off the ring into ex->wc; publish status and wr_id in
 * the ibv_cq_ex, where programs read them directly. */
static int take(struct ibv_cq_ex *cqx)
{
	struct swv_cq *cq = to_swv_cq(ibv_cq_ex_to_cq(cqx));
	struct swv_cq_ex *x = cq->ex;

	if (swv_cq_poll_ext(cq, 1, &x->wc, cq->ts ? &x->ts : NULL, cq->tm ? &x->tm : NULL) != 1)
		return ENOENT;
	cqx->status = x->wc.status;
	cqx->wr_id = x->wc.wr_id;
	return 0;
}

static int start_poll(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
	/* No poll attribute is defined yet; a set bit asks for something unknown. */
	if (attr && attr->comp_mask)
		return EINVAL;
	return take(cqx);
}

static int next_poll(struct ibv_cq_ex *cqx)
{
	return take(cqx);
}

static void end_poll(struct ibv_cq_ex *cqx)
{
	/* Completions were consumed as they were taken; no lock is held. */
	(void)cqx;
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->wc.opcode;
}

static uint32_t read_vendor_err(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->wc.vendor_err;
}

static uint32_t read_byte_len(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->wc.byte_len;
}

static __be32 read_imm_data(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->wc.imm_data;
}

static uint32_t read_qp_num(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->wc.qp_num;
}

static uint32_t read_src_qp(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->wc.src_qp;
}

static unsigned int read_wc_flags(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->wc.wc_flags;
}

static uint32_t read_slid(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->wc.slid;
}

static uint8_t read_sl(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->wc.sl;
}

static uint8_t read_dlid_path_bits(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->wc.dlid_path_bits;
}

static uint64_t read_completion_ts(struct ibv_cq_ex *cqx)
{
	return ex_of(cqx)->ts; /* 1 GHz ticks; 0 when the CQ records no timestamps */
}

static uint64_t read_completion_wallclock_ns(struct ibv_cq_ex *cqx)
{
	uint64_t ts = ex_of(cqx)->ts;
	if (!ts)
		return 0;
	/* Convert the monotonic stamp with the current realtime offset, as providers
	 * convert their free-running clock through the kernel's clock info. */
	struct timespec mono, real;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	clock_gettime(CLOCK_REALTIME, &real);
	int64_t off = ((int64_t)real.tv_sec - (int64_t)mono.tv_sec) * 1000000000ll +
		      ((int64_t)real.tv_nsec - (int64_t)mono.tv_nsec);
	return ts + (uint64_t)off;
}

/* Raw packet (CVLAN stripping) and flow steering (flow tags) do not exist on
 * swverbs, so creating a CQ with these flags is EOPNOTSUPP; the readers still answer
 * (nothing stripped, no tag). */
static uint16_t read_cvlan(struct ibv_cq_ex *cqx)
{
	return 0;
}

static uint32_t read_flow_tag(struct ibv_cq_ex *cqx)
{
	return 0;
}

/* The TMH's tag and app_ctx of a matched message (IBV_WC_TM_RECV with
 * IBV_WC_TM_MATCH), 0 for any other CQE and on a CQ created without TM_INFO. */
static void read_tm_info(struct ibv_cq_ex *cqx, struct ibv_wc_tm_info *tm_info)
{
	if (tm_info)
		*tm_info = ex_of(cqx)->tm;
}

int swv_cq_ex_setup(struct swv_cq *cq, uint64_t wc_flags)
{
	struct swv_cq_ex *x = calloc(1, sizeof(*x));
	if (!x)
		return ENOMEM;
	if (wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)) {
		int rc = swv_cq_enable_timestamps(cq);
		if (rc) {
			free(x);
			return rc;
		}
	}
	if (wc_flags & IBV_WC_EX_WITH_TM_INFO) {
		cq->tm = calloc(cq->size, sizeof(*cq->tm));
		if (!cq->tm) {
			free(x);
			return ENOMEM; /* cq->ts, if set, goes with the CQ */
		}
	}
	x->wc_flags = wc_flags;
	cq->ex = x;

	struct ibv_cq_ex *c = &cq->ibcq;
	c->start_poll = start_poll;
	c->next_poll = next_poll;
	c->end_poll = end_poll;
	c->read_opcode = read_opcode;
	c->read_vendor_err = read_vendor_err;
	c->read_byte_len = read_byte_len;
	c->read_imm_data = read_imm_data;
	c->read_qp_num = read_qp_num;
	c->read_src_qp = read_src_qp;
	c->read_wc_flags = read_wc_flags;
	c->read_slid = read_slid;
	c->read_sl = read_sl;
	c->read_dlid_path_bits = read_dlid_path_bits;
	c->read_completion_ts = read_completion_ts;
	c->read_cvlan = read_cvlan;
	c->read_flow_tag = read_flow_tag;
	c->read_tm_info = read_tm_info;
	c->read_completion_wallclock_ns = read_completion_wallclock_ns;
	return 0;
}
