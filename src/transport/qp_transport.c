/*
 * The transport's per-QP state, the allocation alone (transport/qp_transport.h); what
 * creation and destroy do with it is in qp_state.c. Apart, so that the unit tests of
 * the requester and responder link it without the rest of the transport.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/qp.h"
#include "transport/qp_transport.h"

int swv_qp_transport_alloc(struct swv_qp *qp)
{
	struct swv_qp_transport *t = calloc(1, sizeof(*t));
	if (!t)
		return ENOMEM;
	swv_qp_transport_attach(qp, t);
	return 0;
}

void swv_qp_transport_free(struct swv_qp *qp)
{
	if (!qp->req)
		return;
	swv_resp_release(qp);
	free((char *)qp->req - offsetof(struct swv_qp_transport, req));
	qp->req = NULL;
	qp->resp = NULL;
	qp->auth = NULL;
}
