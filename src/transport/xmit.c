/* swv_qp_xmit: one packet of a QP onto its UDP endpoint (headers | payload | pad+CRC). */
#include <sys/uio.h>

#include "core/qp.h"
#include "transport/qp_transport.h"
#include "link/endpoint.h"
#include "transport/packet.h"
#include "util/compiler.h"

int swv_qp_xmit(struct swv_qp *qp, const struct sockaddr_in *dst, const uint8_t *hdr,
		size_t hdr_len, const void *payload, uint32_t paylen)
{
	const struct sockaddr_in *to = dst ? dst : &qp->peer;
	/* Destination QPN 0 names UDP port 0, which no socket can have: the packet goes
	 * nowhere, as one sent to an absent QP would (an RC requester then retries until
	 * its retry count is exhausted). sendto() would refuse the port with EINVAL. */
	if (swv_unlikely(to->sin_port == 0))
		return 0;
	uint8_t tail[8];
	struct swv_sip_key ud_key;
	size_t tail_len = swv_pkt_build_tail_mac(swv_auth_tx_key(qp->auth, to, hdr, &ud_key), hdr,
						 hdr_len, payload, paylen, tail);
	/* Gathered straight from the caller's buffers: no copy of the payload. */
	struct iovec iov[3];
	int n = 0;
	iov[n].iov_base = (void *)hdr;
	iov[n++].iov_len = hdr_len;
	if (paylen) {
		iov[n].iov_base = (void *)payload;
		iov[n++].iov_len = paylen;
	}
	iov[n].iov_base = tail;
	iov[n++].iov_len = tail_len;
	return swv_ep_send(qp->ep, to, iov, n);
}
