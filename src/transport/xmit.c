/* swv_qp_xmit: the link boundary of the transmit path (transport/txrun.h). */
#include "core/qp.h"
#include "link/endpoint.h"
#include "transport/qp_transport.h"
#include "util/compiler.h"

int swv_qp_xmit(struct swv_qp *qp, const struct sockaddr_in *to, const struct iovec *iov,
		int iovcnt, size_t seg, unsigned npkts, enum swv_xmit_path path, unsigned *nsent)
{
	/* Destination QPN 0 names UDP port 0, which no socket can have: the packets go
	 * nowhere, as ones sent to an absent QP would (an RC requester then retries until
	 * its retry count is exhausted). sendmsg() would refuse the port with EINVAL. */
	if (swv_unlikely(to->sin_port == 0)) {
		*nsent = npkts;
		return 0;
	}
	if (path == SWV_XMIT_RING)
		return swv_ep_send_ring(qp->ep, to, iov, iovcnt, seg, npkts, nsent);
	if (path == SWV_XMIT_UDP)
		return swv_ep_send_udp(qp->ep, to, iov, iovcnt, seg, npkts, nsent);
	if (npkts >= 2)
		return swv_ep_send_gso(qp->ep, to, iov, iovcnt, seg, npkts, nsent);
	int rc = swv_ep_send(qp->ep, to, iov, iovcnt);
	*nsent = swv_ep_left(rc); /* as swv_ep_send_gso counts a packet lost on the way */
	return rc;
}
