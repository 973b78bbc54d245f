/*
 * The single completion path (DESIGN.md 7, comp-cntr.md "What is counted").
 *
 * Order is part of the counter contract: the caller has placed the data; the CQE is
 * written first; the counter's release increment comes last, so a reader that
 * observes the count also observes the data and the CQE. With a CQE the increment
 * happens inside the CQ's critical section (swv_cq_push_counted), so the converse
 * holds too: a poller that took the CQE finds it counted.
 */
#include <errno.h>

#include "core/comp_cntr.h"
#include "core/completion.h"
#include "core/cq.h"
#include "core/qp.h"

int swv_complete(struct swv_qp *qp, const struct swv_completion *c)
{
	const bool ok = c->wc.status == IBV_WC_SUCCESS;
	const uint64_t bytes = ok ? c->bytes : 0;

	/* cntr[] is written by attach only while the QP is in RESET/INIT (no traffic),
	 * so a plain load suffices here. */
	struct ibv_comp_cntr *cntr = (unsigned)c->slot < SWV_CNTR_NSLOTS ? qp->cntr[c->slot] : NULL;
	if (c->cq)
		return swv_cq_push_counted(c->cq, &c->wc, c->solicited, &c->tm, cntr, bytes);
	swv_comp_cntr_complete(cntr, ok, bytes);
	return 0;
}
