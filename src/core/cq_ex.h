/*
 * Extended CQs (ibv_create_cq_ex) and the device clock. Owner: cq_ex.
 *
 * An extended CQ is an ordinary swverbs CQ (same ring, same producers, usable with
 * ibv_poll_cq through ibv_cq_ex_to_cq) whose ibv_cq_ex callbacks are set. start_poll
 * and next_poll each take one completion off the ring into cq->ex->wc, so a polling
 * session holds no lock: the application may post (and the progress thread may
 * complete) between start_poll and end_poll, as ibv_rc_pingpong -t does. ENOENT means
 * the ring is empty; next_poll may be called again after it.
 *
 * The clock: completion timestamps count nanoseconds of CLOCK_MONOTONIC, taken when
 * the CQE is written (swv_cq_push, swv_now_ns). ibv_query_device_ex reports it as a 1 GHz core
 * clock (hca_core_clock = 1000000 kHz) with a full 64-bit completion_timestamp_mask,
 * and ibv_query_rt_values_ex reads the same clock.
 */
#ifndef SWV_CORE_CQ_EX_H
#define SWV_CORE_CQ_EX_H

#include <infiniband/verbs.h>
#include <stdint.h>

struct swv_cq;

#define SWV_HCA_CORE_CLOCK_KHZ 1000000ull /* 1 tick = 1 ns */
#define SWV_TIMESTAMP_MASK     UINT64_MAX

/* wc_flags an extended CQ provides. CVLAN and FLOW_TAG need raw packet QPs or flow
 * steering, which swverbs does not have; TM_INFO is tag matching (core/srq.h). */
#define SWV_CQ_EX_WC_FLAGS                                                                         \
	(IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |                             \
	 IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK | IBV_WC_EX_WITH_TM_INFO)

struct swv_cq_ex {
	uint64_t wc_flags;
	struct ibv_wc wc; /* the completion the read_* callbacks describe */
	uint64_t ts;      /* its completion time (0 without timestamps) */
	struct ibv_wc_tm_info tm; /* its tag-matching info (0 without TM_INFO) */
};

/* Make cq extended: allocate cq->ex (and cq->ts when wc_flags asks for timestamps)
 * and set every ibv_cq_ex callback. 0 or ENOMEM. wc_flags must be within
 * SWV_CQ_EX_WC_FLAGS (the caller checks). */
int swv_cq_ex_setup(struct swv_cq *cq, uint64_t wc_flags);

#endif
