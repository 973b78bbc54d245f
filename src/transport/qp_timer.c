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
	/* seq_cst, as the scan's load (receive_timers): whoever runs the timers empties
	 * the progress loop's 'timers_due' and then scans, while this stores and then
	 * reads 'timers_due' (swv_progress_arm), so one of the two sees the other. */
	uint64_t old = atomic_exchange(&qp->timer_deadline, deadline_ns);
	/* From any thread, the progress thread too: a deadline it sets after its scan
	 * (in ops->after, a triggered WR posted) must still reach 'timers_due'. A far
	 * deadline from a posting thread (the ACK timeout armed for every message) is
	 * handed to the timerfd rather than waking the thread (swv_progress_arm). */
	if (deadline_ns && deadline_ns != old)
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
