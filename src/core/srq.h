/*
 * Shared receive queues. Owner: srq.
 *
 * An SRQ is a ring of receive WQEs (the same struct swv_recv_wqe a QP's own RQ holds)
 * that any number of QPs created with init_attr.srq draw from. The responder of a QP
 * takes the oldest WQE with swv_srq_take(), which copies it out into the QP's own
 * storage (swv_qp.srq_rwqe) under the SRQ lock: the WQE then belongs to that QP alone
 * -- a multi-packet SEND keeps it until its last packet, its completion carries that
 * QP's number and goes through swv_complete() on that QP (counters count RECV there),
 * and if that QP enters the error state it completes with IBV_WC_WR_FLUSH_ERR on that
 * QP. WQEs still in the SRQ are never flushed by a QP's error: they stay for the other
 * QPs (IB semantics; rxe does the same), and are released with the SRQ.
 *
 * Locking: srq->lock protects wq (ring and indices), limit and max_wr. It is taken by
 * posting threads (ibv_post_srq_recv), by the progress thread inside qp->lock
 * (swv_srq_take), and by modify/query. Order: qp->lock -> srq->lock -> the context's
 * async-event lock (the limit event is raised with srq->lock held); a TM SRQ's list
 * operations also write their CQEs under it (-> cq->lock, the channel's lock). Nothing
 * else is taken under srq->lock. users is atomic (QP create/destroy).
 */
#ifndef SWV_CORE_SRQ_H
#define SWV_CORE_SRQ_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/qp.h"

struct swv_context;
struct swv_cq;
struct swv_pd;
struct swv_xrcd;

struct swv_tm;

struct swv_srq {
	struct ibv_srq ibsrq; /* must be first: the application's handle */
	struct swv_context *ctx;
	struct swv_pd *pd;    /* receive WQE lkeys are checked against this PD */
	_Atomic unsigned users; /* QPs attached: destroy is EBUSY while > 0 */
	uint32_t max_sge;     /* immutable after create (sizes every QP's WQE copy) */
	uint32_t async_reported; /* events handed out; under ctx->async.lock (core/async.h) */

	pthread_mutex_t lock; /* see above */
	struct swv_wq wq;     /* wq.max_wr = capacity promised (max_wr), changes on resize */
	uint32_t limit;       /* armed SRQ limit, 0 = not armed (one-shot) */

	/* Immutable after create. srqn: ibv_get_srq_num. XRC SRQs (core/xrcd.h): their
	 * domain handle, the CQ their receives complete on (an XRC TGT QP has none), and
	 * the entry in the domain's SRQ list (under swv_xrc_lock). */
	uint32_t srqn;
	struct swv_xrcd *xrcd;
	struct swv_cq *cq;
	struct swv_list xrc_entry;
	/* Tag-matching SRQs (IBV_SRQT_TM, core/srq_tm.c): the matching list and the
	 * unexpected-message counters, under lock; NULL for other types. cq (above) is
	 * the CQ every receive and list operation of a TM SRQ completes on. */
	struct swv_tm *tm;
};

static inline struct swv_srq *to_swv_srq(struct ibv_srq *srq)
{
	return (struct swv_srq *)srq;
}

/* Size of one WQE copy with max_sge SGEs (struct swv_recv_wqe + SGEs). */
static inline size_t swv_srq_wqe_size(uint32_t max_sge)
{
	return sizeof(struct swv_recv_wqe) + (size_t)max_sge * sizeof(struct ibv_sge);
}

/* ibv_create_srq / the BASIC part of create_srq_ex: NULL + errno. attr->max_wr and
 * max_sge are updated to what the SRQ provides. */
struct swv_srq *swv_srq_create(struct swv_pd *pd, struct ibv_srq_attr *attr, void *srq_context);
int swv_srq_modify(struct swv_srq *srq, const struct ibv_srq_attr *attr, int mask);
int swv_srq_query(struct swv_srq *srq, struct ibv_srq_attr *attr);
/* 0, or EBUSY while a QP uses it. Waits for the acknowledgement of every async event
 * handed out about it, as rdma-core does. */
int swv_srq_destroy(struct swv_srq *srq);

/* ibv_context_ops.post_srq_recv and verbs_context.create_srq_ex. */
int swv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct ibv_srq *swv_create_srq_ex(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *attr);

/*
 * Responder (qp->lock held): move the oldest WQE into *out (room for srq->max_sge SGEs).
 * Returns false when the SRQ is empty (the request gets an RNR NAK, as with an empty
 * RQ). Raises IBV_EVENT_SRQ_LIMIT_REACHED, once, when the take leaves fewer WQEs than
 * the armed limit, and disarms the limit.
 */
bool swv_srq_take(struct swv_srq *srq, struct swv_recv_wqe *out);
/* The same with srq->lock held. */
bool swv_srq_take_locked(struct swv_srq *srq, struct swv_recv_wqe *out);

/*
 * Tag matching (core/srq_tm.c). A TM SRQ holds, besides its ordinary WQEs, up to
 * max_num_tags tagged buffers added by ibv_post_srq_ops. A SEND that reaches a QP of
 * a TM SRQ starts with a TMH (infiniband/tm_types.h); at its first packet the
 * responder calls swv_srq_tm_take instead of swv_srq_take, which picks the WQE:
 *   EAGER/RNDV whose tag matches an eligible tagged buffer (oldest added first,
 *   (TMH.tag & mask) == (tag & mask)): that buffer (wr_id = recv_wr_id), kind EAGER
 *   (the TMH is not placed) or RNDV (nothing of the message is placed; the
 *   responder fetches the data the RVH names);
 *   EAGER/RNDV matching nothing: an ordinary WQE, kind UNEXPECTED (whole message
 *   placed, the device's unexpected count grows and matching of buffers added from
 *   now on is held until software reports that count: IBV_OPS_TM_SYNC);
 *   NO_TAG: an ordinary WQE, kind NO_TAG;
 *   anything else (shorter than a TMH, FIN, unknown opcode): an ordinary WQE, kind
 *   PLAIN (an IBV_WC_RECV, as on any SRQ).
 * Returns false, consuming nothing, when an ordinary WQE is needed and none is posted.
 */
#define SWV_TM_HDR_LEN	    16		    /* struct ibv_tmh */
#define SWV_TM_RVH_LEN	    16		    /* struct ibv_rvh */

enum swv_tm_kind { SWV_TM_PLAIN, SWV_TM_NO_TAG, SWV_TM_UNEXPECTED, SWV_TM_EAGER, SWV_TM_RNDV };

struct swv_tm_match {
	enum swv_tm_kind kind;
	uint32_t handle;			      /* EAGER/RNDV: the tagged buffer taken */
	struct ibv_wc_tm_info info;		      /* EAGER/RNDV: the TMH's tag and app_ctx */
	uint8_t hdr[SWV_TM_HDR_LEN + SWV_TM_RVH_LEN]; /* RNDV: the TMH and RVH as sent */
	uint64_t rndv_va;			      /* RNDV: the RVH */
	uint32_t rndv_rkey, rndv_len;
};

bool swv_srq_tm_take(struct swv_srq *srq, const uint8_t *payload, uint32_t paylen,
		     struct swv_recv_wqe *out, struct swv_tm_match *m);
/* verbs_context.post_srq_ops. */
int swv_post_srq_ops(struct ibv_srq *srq, struct ibv_ops_wr *wr, struct ibv_ops_wr **bad);
/* create_srq_ex for IBV_SRQT_TM (srq.c checked the common attributes): NULL + errno. */
struct swv_srq *swv_srq_tm_create(struct swv_pd *pd, struct swv_cq *cq,
				  struct ibv_srq_init_attr_ex *attr);
void swv_srq_tm_free(struct swv_srq *srq);

/* Number of WQEs posted and not yet taken (tests, tools). */
uint32_t swv_srq_count(struct swv_srq *srq);

#endif
