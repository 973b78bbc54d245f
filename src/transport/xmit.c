/* swv_qp_xmit: one packet of a QP onto its UDP endpoint (headers | payload | pad+CRC). */
#include <sys/uio.h>

#include "core/qp.h"
#include "net/endpoint.h"
#include "transport/packet.h"

int swv_qp_xmit(struct swv_qp *qp, const struct sockaddr_in *dst, const uint8_t *hdr,
		size_t hdr_len, const void *payload, uint32_t paylen)
{
	uint8_t tail[8];
	size_t tail_len = swv_pkt_build_tail(hdr, hdr_len, payload, paylen, tail);
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
	return swv_ep_send(qp->ep, dst ? dst : &qp->peer, iov, n);
}
