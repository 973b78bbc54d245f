/*
 * The QP timer: the requester's ACK/RNR/probe deadlines and the responder's held
 * responses share one deadline per QP, which the progress loop runs (core/qp.h).
 */
#include <stdatomic.h>

#include "core/context.h"
#include "core/qp.h"
#include "link/endpoint.h"
#include "progress/progress.h"
#include "transport/qp_transport.h"

void swv_qp_set_timer(struct swv_qp *qp, uint64_t deadline_ns)
{
	uint64_t old = atomic_exchange_explicit(&qp->timer_deadline, deadline_ns,
						memory_order_release);
	/* The progress thread re-reads deadlines after running a timer; kicking it from
	 * itself is unnecessary. From a posting thread, a far deadline (the ACK timeout
	 * armed for every message) is handed to the progress thread's timerfd rather
	 * than waking it (swv_progress_arm). */
	if (deadline_ns && deadline_ns != old && !swv_progress_is_self(&qp->ctx->progress))
		swv_progress_arm(&qp->ctx->progress, deadline_ns);
}

void swv_qp_timer(struct swv_qp *qp, uint64_t now_ns)
{
	pthread_mutex_lock(&qp->lock);
	swv_ep_batch_begin(); /* a retransmission of small packets leaves in one call */
	bool responds = swv_qp_takes_requests(qp->state);
	if (responds && qp->resp->tx_retry_at && now_ns >= qp->resp->tx_retry_at)
		swv_resp_tx_resume(qp);
	if (qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD)
		swv_req_timer(qp, now_ns);
	else
		swv_qp_set_timer(qp, responds ? qp->resp->tx_retry_at : 0);
	swv_ep_batch_end();
	pthread_mutex_unlock(&qp->lock);
}
