/*
 * The single completion path (DESIGN.md 7, comp-cntr.md "What is counted").
 *
 * Order is part of the counter contract: the caller has placed the data; the CQE is
 * written here first; the counter's release increment comes last, so a reader that
 * observes the count also observes the data and the CQE.
 */
#include <errno.h>

#include "core/comp_cntr.h"
#include "core/completion.h"
#include "core/cq.h"
#include "core/qp.h"

int swv_complete(struct swv_qp *qp, const struct swv_completion *c)
{
	int rc = 0;
	bool ok = c->wc.status == IBV_WC_SUCCESS;

	if (c->cq)
		rc = swv_cq_push_tm(c->cq, &c->wc, c->solicited, &c->tm);

	/* cntr[] is written by attach only while the QP is in RESET/INIT (no traffic),
	 * so a plain load suffices here. The WR completed even when its CQE was lost to
	 * an overflow, so it is still counted. */
	struct ibv_comp_cntr *cntr = (unsigned)c->slot < SWV_CNTR_NSLOTS ? qp->cntr[c->slot] : NULL;
	if (cntr)
		swv_comp_cntr_complete(cntr, ok, ok ? c->bytes : 0);
	return rc;
}
