/*
 * QP state machine: the transition / attribute-mask table (roce-wire.md 6.2, the
 * kernel's qp_state_table), ibv_modify_qp's validation and its effects on the
 * requester and responder, ibv_query_qp, the error state and its flush, and whether
 * the QP is listed for direct placement.
 */
#include <errno.h>
#include <string.h>

#include "core/ah.h"
#include "core/async.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/limits.h"
#include "core/qp.h"
#include "core/pd.h"
#include "core/trig.h"
#include "link/shm.h"
#include "net/addr.h"
#include "net/config.h"
#include "transport/qp_ex.h"
#include "transport/qp_transport.h"
#include "transport/requester.h"
#include "transport/responder.h"
#include "util/log.h"

enum { T_RC, T_UC, T_UD, T_N };

struct trans {
	bool valid;
	int req[T_N]; /* without IBV_QP_STATE */
	int opt[T_N];
};

#define RC_UC_UD(a, b, c) {a, b, c}

/* Optional masks repeated by several transitions. */
#define OPT_TO_RTS_RC (IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |                  \
		       IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE)
#define OPT_TO_RTS_UC (IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |                  \
		       IBV_QP_PATH_MIG_STATE)
#define OPT_TO_RTS_UD (IBV_QP_CUR_STATE | IBV_QP_QKEY)

static const struct trans table[IBV_QPS_ERR + 1][IBV_QPS_ERR + 1] = {
	[IBV_QPS_RESET] = {
		[IBV_QPS_RESET] = {.valid = true},
		/* IB: any state may be moved to ERR, RESET included (nothing to flush
		 * there). Departure from roce-wire.md 6.2 and today's kernel table, see
		 * docs/design.md "QP state machine". */
		[IBV_QPS_ERR] = {.valid = true},
		[IBV_QPS_INIT] = {
			.valid = true,
			.req = RC_UC_UD(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
					IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
					IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
		},
	},
	[IBV_QPS_INIT] = {
		[IBV_QPS_RESET] = {.valid = true},
		[IBV_QPS_ERR] = {.valid = true},
		[IBV_QPS_INIT] = {
			.valid = true,
			.opt = RC_UC_UD(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
					IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
					IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
		},
		[IBV_QPS_RTR] = {
			.valid = true,
			.req = RC_UC_UD(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
					IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
					0),
			.opt = RC_UC_UD(IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
					IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
					IBV_QP_PKEY_INDEX | IBV_QP_QKEY),
		},
	},
	[IBV_QPS_RTR] = {
		[IBV_QPS_RESET] = {.valid = true},
		[IBV_QPS_ERR] = {.valid = true},
		[IBV_QPS_RTS] = {
			.valid = true,
			.req = RC_UC_UD(IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
						IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
					IBV_QP_SQ_PSN, IBV_QP_SQ_PSN),
			.opt = RC_UC_UD(OPT_TO_RTS_RC, OPT_TO_RTS_UC, OPT_TO_RTS_UD),
		},
	},
	[IBV_QPS_RTS] = {
		[IBV_QPS_RESET] = {.valid = true},
		[IBV_QPS_ERR] = {.valid = true},
		[IBV_QPS_RTS] = {
			.valid = true,
			.opt = RC_UC_UD(OPT_TO_RTS_RC, OPT_TO_RTS_UC, OPT_TO_RTS_UD),
		},
		[IBV_QPS_SQD] = {
			.valid = true,
			.opt = RC_UC_UD(IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_EN_SQD_ASYNC_NOTIFY,
					IBV_QP_EN_SQD_ASYNC_NOTIFY),
		},
	},
	[IBV_QPS_SQD] = {
		[IBV_QPS_RESET] = {.valid = true},
		[IBV_QPS_ERR] = {.valid = true},
		[IBV_QPS_RTS] = {
			.valid = true,
			.opt = RC_UC_UD(OPT_TO_RTS_RC, OPT_TO_RTS_UC, OPT_TO_RTS_UD),
		},
		[IBV_QPS_SQD] = {
			.valid = true,
			.opt = RC_UC_UD(IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
						IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
						IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ALT_PATH |
						IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
						IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE,
					IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
						IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE,
					IBV_QP_PKEY_INDEX | IBV_QP_QKEY),
		},
	},
	[IBV_QPS_SQE] = {
		[IBV_QPS_RESET] = {.valid = true},
		[IBV_QPS_ERR] = {.valid = true},
		[IBV_QPS_RTS] = {
			.valid = true,
			.opt = RC_UC_UD(0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS,
					IBV_QP_CUR_STATE | IBV_QP_QKEY),
		},
	},
	[IBV_QPS_ERR] = {
		[IBV_QPS_RESET] = {.valid = true},
		[IBV_QPS_ERR] = {.valid = true},
	},
};

static int type_index(enum ibv_qp_type type)
{
	switch (type) {
	case IBV_QPT_RC:
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV:
		return T_RC;
	case IBV_QPT_UC:
		return T_UC;
	case IBV_QPT_UD:
		return T_UD;
	default:
		return -1;
	}
}

bool swv_qp_transition_masks(enum ibv_qp_type type, enum ibv_qp_state cur,
			     enum ibv_qp_state next, int *req, int *opt)
{
	int t = type_index(type);
	if (t < 0 || (unsigned)cur > IBV_QPS_ERR || (unsigned)next > IBV_QPS_ERR)
		return false;
	const struct trans *tr = &table[cur][next];
	if (!tr->valid)
		return false;
	/* Reported with IBV_QP_STATE included, as roce-wire.md 6.2 lists them. */
	int rq = tr->req[t], op = tr->opt[t];
	/* XRC as the kernel's table has it: the RC masks, less what a half has no use
	 * for -- an INI QP never responds (INIT->RTR without MAX_DEST_RD_ATOMIC and
	 * MIN_RNR_TIMER), a TGT QP never requests (RTR->RTS without RETRY_CNT,
	 * RNR_RETRY and MAX_QP_RD_ATOMIC). swv_qp_modify drops those bits first. */
	int drop = 0;
	if (type == IBV_QPT_XRC_SEND)
		drop = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	else if (type == IBV_QPT_XRC_RECV)
		drop = IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	rq &= ~drop;
	op &= ~drop;
	if (req)
		*req = rq | IBV_QP_STATE;
	if (opt)
		*opt = op;
	return true;
}

int swv_qp_check_mask(enum ibv_qp_type type, enum ibv_qp_state cur, enum ibv_qp_state next,
		      int mask)
{
	int req, opt;
	if (!swv_qp_transition_masks(type, cur, next, &req, &opt))
		return EINVAL;
	/* A transition is requested with IBV_QP_STATE; without it the state stays and
	 * cur -> cur must be a valid transition for the bits given. */
	if (!(mask & IBV_QP_STATE))
		req &= ~IBV_QP_STATE;
	if ((mask & req) != req)
		return EINVAL;
	if (mask & ~(req | opt | IBV_QP_STATE))
		return EINVAL;
	if ((mask & IBV_QP_CUR_STATE) && cur != IBV_QPS_RTR && cur != IBV_QPS_RTS &&
	    cur != IBV_QPS_SQD && cur != IBV_QPS_SQE)
		return EINVAL;
	return 0;
}

/* ---- ibv_modify_qp ---- */

static uint32_t mtu_bytes(enum ibv_mtu m)
{
	return (m >= IBV_MTU_256 && m <= IBV_MTU_4096) ? 128u << m : 0;
}

/* Every value check, before anything changes (a failed modify leaves the QP as is). */
static int check_values(struct swv_qp *qp, const struct ibv_qp_attr *a, int mask,
			struct sockaddr_in *peer)
{
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index >= qp->ctx->cfg->npkeys)
		return EINVAL; /* beyond the port's P_Key table */
	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return EINVAL;
	if ((mask & IBV_QP_PATH_MTU)) {
		uint32_t m = mtu_bytes(a->path_mtu);
		if (!m || m > qp->ctx->cfg->mtu_bytes)
			return EINVAL;
	}
	if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
		return EINVAL;
	if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
		return EINVAL;
	if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
		return EINVAL;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
		return EINVAL;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > SWV_MAX_RD_ATOMIC)
		return EINVAL;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > SWV_MAX_RD_ATOMIC)
		return EINVAL;
	/* QPN 0 (the SMI QP) is accepted, as rxe and HCAs accept it; it names UDP port
	 * 0, where swv_qp_xmit sends nothing, so such a QP simply reaches no one. */
	if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > SWV_QPN_MASK)
		return EINVAL;
	if ((mask & IBV_QP_PATH_MIG_STATE) && a->path_mig_state > IBV_MIG_ARMED)
		return EINVAL;
	/* No automatic path migration: a device without APM rejects an alternate path,
	 * as the kernel does on RoCE ports. */
	if (mask & IBV_QP_ALT_PATH)
		return EINVAL;
	if (mask & IBV_QP_AV) {
		struct in_addr ip;
		if (a->ah_attr.port_num != 0 && a->ah_attr.port_num != 1)
			return EINVAL;
		if (swv_av_resolve(qp->ctx, &a->ah_attr, &ip))
			return EINVAL;
		uint32_t dqpn = (mask & IBV_QP_DEST_QPN) ? a->dest_qp_num : qp->attr.dest_qp_num;
		memset(peer, 0, sizeof(*peer));
		peer->sin_family = AF_INET;
		peer->sin_addr = ip;
		peer->sin_port = htons(swv_qpn_port(dqpn));
	}
	return 0;
}

static void apply_values(struct swv_qp *qp, const struct ibv_qp_attr *a, int mask,
			 const struct sockaddr_in *peer)
{
	struct ibv_qp_attr *q = &qp->attr;
	if (mask & IBV_QP_PKEY_INDEX) {
		q->pkey_index = a->pkey_index;
		qp->pkey = swv_ctx_pkey(qp->ctx, a->pkey_index);
	}
	if (mask & IBV_QP_PORT)
		q->port_num = a->port_num;
	if (mask & IBV_QP_ACCESS_FLAGS)
		q->qp_access_flags = a->qp_access_flags;
	if (mask & IBV_QP_QKEY)
		q->qkey = a->qkey;
	if (mask & IBV_QP_PATH_MTU) {
		q->path_mtu = a->path_mtu;
		qp->mtu = mtu_bytes(a->path_mtu);
	}
	if (mask & IBV_QP_TIMEOUT)
		q->timeout = a->timeout;
	if (mask & IBV_QP_RETRY_CNT) {
		q->retry_cnt = a->retry_cnt;
		qp->req->retry_left = a->retry_cnt;
	}
	if (mask & IBV_QP_RNR_RETRY) {
		q->rnr_retry = a->rnr_retry;
		qp->req->rnr_left = a->rnr_retry;
	}
	if (mask & IBV_QP_MIN_RNR_TIMER)
		q->min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		q->max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		q->max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (mask & IBV_QP_RQ_PSN)
		q->rq_psn = a->rq_psn & SWV_PSN_MASK;
	if (mask & IBV_QP_SQ_PSN)
		q->sq_psn = a->sq_psn & SWV_PSN_MASK;
	if (mask & IBV_QP_DEST_QPN) {
		q->dest_qp_num = a->dest_qp_num;
		qp->peer.sin_port = htons(swv_qpn_port(a->dest_qp_num));
	}
	if (mask & IBV_QP_AV) {
		q->ah_attr = a->ah_attr;
		q->ah_attr.port_num = 1;
		qp->peer = *peer;
	}
	if (mask & IBV_QP_PATH_MIG_STATE)
		q->path_mig_state = a->path_mig_state;
	if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY)
		q->en_sqd_async_notify = a->en_sqd_async_notify;
}

int swv_qp_modify(struct swv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	int err;
	struct sockaddr_in peer;

	/* Mask bits beyond the last standard attribute (IBV_QP_DEST_QPN) are unknown to
	 * this device: EOPNOTSUPP before anything else, as the kernel's modify_qp
	 * (attr_mask & ~IB_QP_ATTR_STANDARD_BITS) and rdma-core's ibv_cmd_modify_qp (from
	 * IBV_QP_RATE_LIMIT on) answer. Known bits a transition does not allow stay
	 * EINVAL (swv_qp_check_mask). */
	if ((unsigned)mask & ~SWV_QP_ATTR_STANDARD_BITS)
		return EOPNOTSUPP;
	/* An XRC half ignores the attributes of the half it is not, as the kernel strips
	 * them before checking (uverbs' modify_qp_mask): perftest passes the RC masks. */
	if (qp->xrc == SWV_XRC_INI)
		mask &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	else if (qp->xrc == SWV_XRC_TGT)
		mask &= ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);

	pthread_mutex_lock(&qp->lock);
	enum ibv_qp_state cur = qp->state;
	enum ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;

	if ((unsigned)next > IBV_QPS_ERR) {
		err = EINVAL;
		goto out;
	}
	/* The caller's idea of the current state must be right. */
	if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) {
		err = EINVAL;
		goto out;
	}
	err = swv_qp_check_mask(qp->qpx.qp_base.qp_type, cur, next, mask);
	if (!err)
		err = check_values(qp, attr, mask, &peer);
	if (err) {
		swv_log(SWV_LOG_DEBUG, "qp %#x: modify %d->%d mask %#x rejected", qp->qpn, cur,
			next, mask);
		goto out;
	}

	apply_values(qp, attr, mask, &peer);
	if (next == IBV_QPS_RTR || (mask & (IBV_QP_AV | IBV_QP_DEST_QPN)))
		swv_auth_qp_attach(qp->auth, qp->qpn, &qp->peer, qp->attr.dest_qp_num);

	if (next == cur && next != IBV_QPS_SQD)
		goto out;

	/* Likewise before RESET (ERR: swv_qp_to_error). */
	if (next == IBV_QPS_RESET && swv_qp_takes_requests(cur))
		swv_resp_flush_ack(qp);
	switch (next) {
	case IBV_QPS_RESET:
		/* Work requests are discarded without completions, as on real devices. */
		swv_progress_sq_add(&qp->ctx->progress, -(int64_t)swv_wq_used(&qp->sq));
		qp->sq.head = qp->sq.tail;
		qp->tm_sq_held = 0;
		swv_wq_retire(&qp->rq, swv_wq_used(&qp->rq));
		swv_trig_qp_drop(qp);
		qp->state = IBV_QPS_RESET;
		swv_req_reset(qp);
		swv_resp_reset(qp);
		swv_qp_set_timer(qp, 0);
		/* Its completions still queued are discarded too, as the mlx4/mlx5
		 * providers clean the QP's CQEs from both CQs on RESET: a QP brought back
		 * ERR -> RESET -> RTS must not hand out flush CQEs of its previous life
		 * (pyverbs test_mr_rereg_pd/_addr poll right after such a restart). */
		swv_cq_clean(qp->rcq, qp->qpn);
		if (qp->scq != qp->rcq)
			swv_cq_clean(qp->scq, qp->qpn);
		break;
	case IBV_QPS_INIT:
		qp->state = IBV_QPS_INIT;
		break;
	case IBV_QPS_RTR:
		qp->state = IBV_QPS_RTR;
		swv_resp_reset(qp);
		break;
	case IBV_QPS_RTS:
		if (cur == IBV_QPS_RTR) {
			swv_req_reset(qp);
			swv_fc_tx_start(qp);
		}
		qp->state = IBV_QPS_RTS;
		qp->req->sqd_event_pending = false;
		swv_req_run(qp);
		break;
	case IBV_QPS_SQD:
		/* New WQEs are not started; those in flight finish. The requester raises
		 * IBV_EVENT_SQ_DRAINED once nothing is outstanding. */
		if (cur == IBV_QPS_RTS) {
			qp->state = IBV_QPS_SQD;
			qp->req->sqd_event_pending = qp->attr.en_sqd_async_notify != 0;
		}
		swv_req_run(qp);
		break;
	case IBV_QPS_ERR:
		swv_qp_to_error(qp);
		break;
	default:
		break;
	}
out:
	if (!err) {
		qp->qpx.qp_base.state = qp->state;
		swv_qp_dt_update(qp);
	}
	pthread_mutex_unlock(&qp->lock);
	/* A flush may have made triggers due (their counter's error count changed). */
	swv_trig_run(qp->ctx);
	return err;
}

int swv_qp_query(struct swv_qp *qp, struct ibv_qp_attr *attr, struct ibv_qp_init_attr *init)
{
	pthread_mutex_lock(&qp->lock);
	*attr = qp->attr;
	attr->qp_state = qp->state;
	attr->cur_qp_state = qp->state;
	attr->cap = qp->cap;
	/* Current PSNs, as rxe reports them. */
	if (qp->state >= IBV_QPS_RTS && qp->state != IBV_QPS_ERR)
		attr->sq_psn = qp->req->next_psn;
	if (qp->state >= IBV_QPS_RTR && qp->state != IBV_QPS_ERR)
		attr->rq_psn = qp->resp->epsn;
	attr->sq_draining = qp->state == IBV_QPS_SQD &&
			    (qp->req->cur != qp->sq.head || qp->req->sqd_event_pending);
	pthread_mutex_unlock(&qp->lock);

	memset(init, 0, sizeof(*init));
	init->qp_context = qp->qpx.qp_base.qp_context;
	init->send_cq = qp->qpx.qp_base.send_cq;
	init->recv_cq = qp->qpx.qp_base.recv_cq;
	init->srq = qp->qpx.qp_base.srq;
	init->cap = qp->cap;
	init->qp_type = qp->qpx.qp_base.qp_type; /* XRC QPs run as RC inside */
	init->sq_sig_all = qp->sq_sig_all;
	return 0;
}

/* ---- error state ---- */

static void flush_rq(struct swv_qp *qp)
{
	bool overflow = false;
	if (qp->srq) {
		/* Only the WQE this QP took (a message in progress) is flushed here; the
		 * WQEs still in the SRQ stay for its other QPs (core/srq.h). */
		if (swv_resp_flush_srq(qp))
			swv_async_event(qp->ctx, IBV_EVENT_CQ_ERR, &qp->rcq->ibcq);
		return;
	}
	while (qp->rq.head != qp->rq.tail) {
		struct swv_recv_wqe *w = swv_wq_slot(&qp->rq, qp->rq.head);
		struct swv_completion c = {
			.slot = SWV_CNTR_RECV,
			.cq = qp->rcq,
			.wc = {.wr_id = w->wr_id,
			       .status = IBV_WC_WR_FLUSH_ERR,
			       .opcode = IBV_WC_RECV,
			       .qp_num = qp->qpn},
		};
		swv_wq_retire(&qp->rq, 1);
		if (swv_complete(qp, &c) && !overflow) {
			overflow = true;
			swv_async_event(qp->ctx, IBV_EVENT_CQ_ERR, &qp->rcq->ibcq);
		}
	}
}

void swv_qp_dt_update(struct swv_qp *qp)
{
	/* Only the context's first port carries the MR entries (core/mr.c), so only its
	 * QPs are listed; the others take every payload through the ring. */
	if (!qp->ctx || !qp->ctx->ports[0])
		return;
	struct swv_endpoint *ep0 = &qp->ctx->ports[0]->ep;
	if (qp->ep != ep0 || !ep0->shm)
		return;
	bool on =
	    !qp->dt_closed && qp->type == IBV_QPT_RC && qp->xrc == SWV_XRC_NONE && qp->pd &&
	    !qp->auth->on &&
	    (qp->state == IBV_QPS_RTR || qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD) &&
	    (qp->attr.qp_access_flags & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)) &&
	    qp->mtu >= 256 && qp->mtu <= 4096;
	if (!on && !qp->dt_published)
		return;
	/* A responder without READ/atomic resources refuses every READ (invalid
	 * request): published without the right, so a sender never reads there. */
	unsigned access = qp->attr.qp_access_flags;
	if (!qp->attr.max_dest_rd_atomic)
		access &= ~(unsigned)(IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	struct swv_shm_dt_qp_info in = {.access = access,
					.dest_qpn = qp->attr.dest_qp_num,
					.pkey = qp->pkey,
					.mtu = qp->mtu,
					.pd = (uintptr_t)swv_pd_prot(qp->pd),
					.peer = qp->peer};
	swv_shm_dt_qp(ep0->shm, qp->qpn, on ? &in : NULL);
	qp->dt_published = on;
}

void swv_qp_to_error(struct swv_qp *qp)
{
	bool overflow = false;
	bool entering = qp->state != IBV_QPS_ERR;
	/* An ACK left for later (transport/receive.c) acknowledges what was received and
	 * completed: it leaves before the QP stops answering, as a device's had. */
	if (entering && swv_qp_takes_requests(qp->state))
		swv_resp_flush_ack(qp);
	qp->resp->ack_pending = false;
	qp->state = IBV_QPS_ERR;
	qp->qpx.qp_base.state = IBV_QPS_ERR;
	swv_qp_dt_update(qp);
	/* An overflowing CQ loses the flush CQEs (reported once); the counters still
	 * see every flushed WR. */
	while (qp->sq.head != qp->sq.tail)
		if (swv_req_complete_head(qp, IBV_WC_WR_FLUSH_ERR) && !overflow) {
			overflow = true;
			swv_async_event(qp->ctx, IBV_EVENT_CQ_ERR, &qp->scq->ibcq);
		}
	/* Held triggered WRs reserve slots behind the ring's: they flush after it. */
	swv_trig_qp_flush(qp);
	flush_rq(qp);
	/* IB: a QP attached to an SRQ that enters the error state reports Last WQE
	 * Reached once it will take no more WQEs from the SRQ -- here, at once (its held
	 * WQE was just flushed), so the application knows it may destroy the QP. */
	if (entering && qp->srq && !qp->tgt_orphan)
		swv_async_event(qp->ctx, IBV_EVENT_QP_LAST_WQE_REACHED, &qp->qpx.qp_base);
	qp->req->rnr_until = 0;
	qp->req->ack_deadline = 0;
	qp->req->xmit_retry_at = 0;
	qp->req->fc.probe_at = 0;
	qp->resp->tx_retry_at = 0; /* held responses are never sent in ERR */
	qp->resp->tx_ack = false;
	swv_qp_set_timer(qp, 0);
}

void swv_qp_cq_overflow(struct swv_qp *qp, struct swv_cq *cq)
{
	swv_log(SWV_LOG_WARN, "qp %#x: CQ overflow, QP moves to the error state", qp->qpn);
	swv_async_event(qp->ctx, IBV_EVENT_CQ_ERR, &cq->ibcq);
	if (qp->state != IBV_QPS_ERR && !qp->tgt_orphan)
		swv_async_event(qp->ctx, IBV_EVENT_QP_FATAL, &qp->qpx.qp_base);
	swv_qp_to_error(qp);
}

/* ---- creation and destroy ---- */

int swv_qp_transport_init(struct swv_qp *qp)
{
	int rc = swv_qp_transport_alloc(qp);
	if (rc)
		return rc;
	const struct swv_dev_config *cfg = qp->ctx->cfg;
	swv_req_reset(qp);
	swv_auth_qp_init(qp->auth, cfg->auth ? cfg->auth_key : NULL, cfg->addr,
			 qp->type == IBV_QPT_UD);
	return 0;
}

/* What the QP's requester and responder did, in the debug log when it goes. */
static void log_stats(struct swv_qp *qp)
{
	if (qp->type == IBV_QPT_UC)
		swv_log(SWV_LOG_DEBUG,
			"qp %#x: flow control: %llu waits for credit, %llu probes, %llu credits "
			"granted",
			qp->qpn, (unsigned long long)qp->req->fc.n_blocked,
			(unsigned long long)qp->req->fc.n_probes,
			(unsigned long long)qp->resp->fc.n_credits);
	if (qp->type == IBV_QPT_RC)
		swv_log(
		    SWV_LOG_DEBUG,
		    "qp %#x: requester: %llu packets, %llu tail-loss probes, %llu retries (%llu "
		    "ACK timeouts, %llu sequence NAKs, %llu RNR NAKs; %llu free in a round), "
		    "%llu duplicate "
		    "responses, %llu selective resends (%llu fell back to go-back-N), %llu READ "
		    "re-requests, %llu SACK NAKs received, %llu holes resent; responder: "
		    "%llu sequence NAKs sent (%llu with a SACK map, %llu SACK ACKs), %llu packets "
		    "kept past a gap (%llu copies, %llu too far ahead), responses held %llu times",
		    qp->qpn, (unsigned long long)qp->req->n_pkts,
		    (unsigned long long)qp->req->n_probes, (unsigned long long)qp->req->n_retries,
		    (unsigned long long)qp->req->n_timeouts,
		    (unsigned long long)qp->req->n_seq_naks,
		    (unsigned long long)qp->req->n_rnr_naks,
		    (unsigned long long)qp->req->n_round_free,
		    (unsigned long long)qp->req->n_dup_resp,
		    (unsigned long long)qp->req->n_sel_resends,
		    (unsigned long long)qp->req->n_sr_fallbacks,
		    (unsigned long long)qp->req->n_read_rereqs,
		    (unsigned long long)qp->req->n_sack_naks,
		    (unsigned long long)qp->req->n_holes_resent,
		    (unsigned long long)qp->resp->stats.seq_naks,
		    (unsigned long long)qp->resp->stats.sack_naks,
		    (unsigned long long)qp->resp->stats.sack_acks,
		    (unsigned long long)qp->resp->stats.rob_kept,
		    (unsigned long long)qp->resp->stats.rob_dups,
		    (unsigned long long)qp->resp->stats.rob_full,
		    (unsigned long long)qp->resp->stats.tx_held);
	if (qp->type == IBV_QPT_RC) {
		static const char *const kind[SWV_REC_KINDS] = {"no recovery", "NAK/SACK",
								"tail-loss probe", "ACK timeout"};
		const struct swv_req_state *r = qp->req;
		for (int k = 0; k < SWV_REC_KINDS; k++)
			if (r->n_rec[k])
				swv_log(SWV_LOG_DEBUG,
					"qp %#x: progress after %s: %llu times, %.3f ms in all, "
					"mean %.1f us, max %.1f us",
					qp->qpn, kind[k], (unsigned long long)r->n_rec[k],
					(double)r->rec_ns[k] / 1e6,
					(double)r->rec_ns[k] / 1e3 / (double)r->n_rec[k],
					(double)r->rec_max_ns[k] / 1e3);
	}
	if (qp->type == IBV_QPT_RC || qp->type == IBV_QPT_UC)
		swv_log(SWV_LOG_DEBUG,
			"qp %#x: %llu remote accesses refused (bad R_Key, bounds, rights or "
			"fault), %llu of them faulted",
			qp->qpn, (unsigned long long)qp->resp->stats.remote_refused,
			(unsigned long long)qp->resp->stats.remote_faults);
	if (qp->auth->on)
		swv_log(SWV_LOG_DEBUG, "qp %#x: %llu packets refused for a missing or wrong MAC",
			qp->qpn, (unsigned long long)atomic_load(&qp->auth->rx_bad));
}

void swv_qp_transport_fini(struct swv_qp *qp)
{
	if (!qp->req)
		return;
	log_stats(qp);
	swv_qp_ex_fini(qp);
	swv_qp_transport_free(qp);
}
