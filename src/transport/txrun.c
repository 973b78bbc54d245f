/* Packet runs for UDP GSO sends (see txrun.h). */
#include "transport/txrun.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "link/endpoint.h"
#include "transport/packet.h"
#include "util/compiler.h"

struct swv_txrun {
	unsigned n;         /* packets */
	size_t seg;         /* wire length of the first packet: the GSO segment size */
	size_t total;       /* bytes of all packets */
	bool closed;        /* a shorter packet was added: it must stay the last */
	int iovcnt;
	size_t staged;      /* bytes of the staging area in use */
	struct iovec iov[3 * SWV_EP_GSO_MAX_SEGS];
	uint8_t hdr[SWV_EP_GSO_MAX_SEGS][SWV_MAX_HDR_LEN];
	uint8_t tail[SWV_EP_GSO_MAX_SEGS][SWV_MAX_TAIL_LEN + 1];
	uint8_t stage[SWV_EP_GSO_MAX_BYTES];
};

static pthread_key_t run_key;
static pthread_once_t run_once = PTHREAD_ONCE_INIT;
static bool run_key_ok;

static void run_key_init(void)
{
	run_key_ok = pthread_key_create(&run_key, free) == 0;
}

struct swv_txrun *swv_txrun_begin(void)
{
	pthread_once(&run_once, run_key_init);
	if (!run_key_ok)
		return NULL;
	struct swv_txrun *r = pthread_getspecific(run_key);
	if (!r) {
		r = malloc(sizeof(*r));
		if (!r)
			return NULL;
		if (pthread_setspecific(run_key, r)) {
			free(r);
			return NULL;
		}
	}
	r->n = 0;
	r->seg = r->total = r->staged = 0;
	r->closed = false;
	r->iovcnt = 0;
	return r;
}

unsigned swv_txrun_count(const struct swv_txrun *r)
{
	return r->n;
}

bool swv_txrun_fits(const struct swv_txrun *r, uint8_t opcode, uint32_t paylen)
{
	size_t w = swv_pkt_wire_len(opcode, paylen);
	if (!w || r->n == SWV_EP_GSO_MAX_SEGS || r->total + w > SWV_EP_GSO_MAX_BYTES)
		return false;
	return r->n == 0 || (!r->closed && w <= r->seg);
}

uint8_t *swv_txrun_stage(struct swv_txrun *r, uint32_t paylen)
{
	if (paylen > sizeof(r->stage) - r->staged)
		return NULL;
	return r->stage + r->staged;
}

bool swv_txrun_add(struct swv_txrun *r, const struct swv_pkt *p)
{
	if (!swv_txrun_fits(r, p->opcode, p->paylen) || (p->paylen && !p->payload))
		return false;
	uint8_t *hdr = r->hdr[r->n], *tail = r->tail[r->n];
	size_t hlen = swv_pkt_build_hdr(hdr, p);
	if (!hlen)
		return false;
	size_t tlen = swv_pkt_build_tail_mac(p->mac_key, hdr, hlen, p->payload, p->paylen, tail);
	if (!tlen)
		return false;
	size_t w = hlen + p->paylen + tlen;
	r->iov[r->iovcnt].iov_base = hdr;
	r->iov[r->iovcnt++].iov_len = hlen;
	if (p->paylen) {
		r->iov[r->iovcnt].iov_base = (void *)p->payload;
		r->iov[r->iovcnt++].iov_len = p->paylen;
		if (p->payload == r->stage + r->staged)
			r->staged += p->paylen;
	}
	r->iov[r->iovcnt].iov_base = tail;
	r->iov[r->iovcnt++].iov_len = tlen;
	if (r->n == 0)
		r->seg = w;
	else if (w < r->seg)
		r->closed = true;
	r->total += w;
	r->n++;
	return true;
}

int swv_txrun_send(struct swv_txrun *r, struct swv_endpoint *ep, const struct sockaddr_in *dst,
		   unsigned *nsent)
{
	*nsent = 0;
	if (r->n == 0)
		return 0;
	if (swv_unlikely(dst->sin_port == 0)) {
		*nsent = r->n; /* UDP port 0 (QPN 0): gone, as in swv_qp_xmit */
		return 0;
	}
	return swv_ep_send_gso(ep, dst, r->iov, r->iovcnt, r->seg, r->n, nsent);
}
