/*
 * QP state machine: the transition / attribute-mask table (roce-wire.md 6.2, the
 * kernel's qp_state_table) and ibv_modify_qp's validation and effects.
 */
#include <errno.h>
#include <string.h>

#include "core/ah.h"
#include "core/async.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/limits.h"
#include "core/qp.h"
#include "core/trig.h"
#include "net/addr.h"
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
		qp->req.retry_left = a->retry_cnt;
	}
	if (mask & IBV_QP_RNR_RETRY) {
		q->rnr_retry = a->rnr_retry;
		qp->req.rnr_left = a->rnr_retry;
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
		swv_auth_qp_attach(&qp->auth, qp->qpn, &qp->peer, qp->attr.dest_qp_num);

	if (next == cur && next != IBV_QPS_SQD)
		goto out;

	switch (next) {
	case IBV_QPS_RESET:
		/* Work requests are discarded without completions, as on real devices. */
		swv_progress_sq_add(&qp->ctx->progress, -(int64_t)swv_wq_used(&qp->sq));
		qp->sq.head = qp->sq.tail;
		qp->tm_sq_held = 0;
		qp->rq.head = qp->rq.tail;
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
		qp->req.sqd_event_pending = false;
		swv_req_run(qp);
		break;
	case IBV_QPS_SQD:
		/* New WQEs are not started; those in flight finish. The requester raises
		 * IBV_EVENT_SQ_DRAINED once nothing is outstanding. */
		if (cur == IBV_QPS_RTS) {
			qp->state = IBV_QPS_SQD;
			qp->req.sqd_event_pending = qp->attr.en_sqd_async_notify != 0;
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
