/* Receive rings: the part of posting a receive WR that a QP's RQ and an SRQ share. */
#include <errno.h>

#include "core/qp.h"

int swv_wq_post_recv(struct swv_wq *q, const struct ibv_recv_wr *wr)
{
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_sge ||
	    (wr->num_sge > 0 && !wr->sg_list))
		return EINVAL;
	if (swv_wq_used(q) >= q->max_wr)
		return ENOMEM;
	struct swv_recv_wqe *w = swv_wq_slot(q, q->tail);
	uint64_t len = 0;
	w->wr_id = wr->wr_id;
	w->num_sge = (uint32_t)wr->num_sge;
	for (int i = 0; i < wr->num_sge; i++) {
		w->sge[i] = wr->sg_list[i];
		len += wr->sg_list[i].length;
	}
	/* Larger than any message can be: saturate (2^31 is the message limit). */
	w->length = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
	q->tail++;
	if (q->posted)
		atomic_fetch_add_explicit(q->posted, 1, memory_order_relaxed);
	return 0;
}
