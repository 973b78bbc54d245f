/* The transmit path (see txrun.h). */
#include "transport/txrun.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/qp.h"
#include "link/endpoint.h"
#include "transport/auth.h"
#include "transport/qp_transport.h"
#include "transport/responder.h"
#include "util/compiler.h"
#include "util/log.h"

/* The per-thread run of up to SWV_EP_GSO_MAX_SEGS packets. */
struct txrun_long {
	struct swv_txrun r;
	struct iovec iov[3 * SWV_EP_GSO_MAX_SEGS];
	struct swv_txslot slot[SWV_EP_GSO_MAX_SEGS];
	uint8_t stage[SWV_EP_GSO_MAX_BYTES];
};

static pthread_key_t run_key;
static pthread_once_t run_once = PTHREAD_ONCE_INIT;
static bool run_key_ok;

static void run_key_init(void)
{
	run_key_ok = pthread_key_create(&run_key, free) == 0;
}

static void run_reset(struct swv_txrun *r, struct swv_qp *qp, const struct sockaddr_in *dst)
{
	r->qp = qp;
	r->to = dst ? dst : &qp->peer;
	r->n = 0;
	r->seg = r->total = r->staged = 0;
	r->closed = r->unsealed = false;
	r->iovcnt = 0;
}

struct swv_txrun *swv_txrun_begin(struct swv_qp *qp, const struct sockaddr_in *dst)
{
	pthread_once(&run_once, run_key_init);
	if (!run_key_ok)
		return NULL;
	struct txrun_long *l = pthread_getspecific(run_key);
	if (!l) {
		l = malloc(sizeof(*l));
		if (!l)
			return NULL;
		if (pthread_setspecific(run_key, l)) {
			free(l);
			return NULL;
		}
		l->r.cap = SWV_EP_GSO_MAX_SEGS;
		l->r.iov = l->iov;
		l->r.slot = l->slot;
		l->r.stage = l->stage;
		l->r.stage_cap = sizeof(l->stage);
	}
	run_reset(&l->r, qp, dst);
	return &l->r;
}

unsigned swv_txrun_count(const struct swv_txrun *r)
{
	return r->n;
}

/* Whether a packet of w bytes on the wire may join the run (the GSO rule). */
static bool shape_ok(const struct swv_txrun *r, size_t w)
{
	if (!w || r->n == r->cap || r->total + w > SWV_EP_GSO_MAX_BYTES)
		return false;
	return r->n == 0 || (!r->closed && w <= r->seg);
}

bool swv_txrun_fits(const struct swv_txrun *r, uint8_t opcode, uint32_t paylen)
{
	return shape_ok(r, swv_pkt_wire_len(opcode, paylen));
}

uint8_t *swv_txrun_stage(struct swv_txrun *r, uint32_t paylen)
{
	if (!r->stage || paylen > r->stage_cap - r->staged)
		return NULL;
	return r->stage + r->staged;
}

bool swv_txrun_add(struct swv_txrun *r, const struct swv_pkt *p)
{
	/* the length from the header built (an ACKNOWLEDGE's SACK map is a body too) */
	if (r->n == r->cap || (p->paylen && !p->payload))
		return false;
	uint8_t *hdr = r->slot[r->n].hdr, *tail = r->slot[r->n].tail;
	size_t hlen = swv_pkt_build_hdr(hdr, p);
	if (!hlen)
		return false;
	/* UD in authenticated mode: the key of this destination and DestQP */
	struct swv_sip_key ud_key;
	const struct swv_sip_key *key = swv_auth_tx_key(r->qp->auth, r->to, hdr, &ud_key);
	/* No MAC and an inbox here: the destination is likely on the intra-host link,
	 * where the CRC is not checked; swv_txrun_send computes it if not. */
	struct swv_txslot *sl = &r->slot[r->n];
	sl->unsealed = !key && r->qp->ep && r->qp->ep->shm;
	size_t tlen = sl->unsealed ? swv_pkt_build_tail_unsealed(hdr, hlen, p->paylen, tail)
				   : swv_pkt_build_tail_mac(key, hdr, hlen, p->payload, p->paylen,
							    tail);
	if (!tlen)
		return false;
	size_t w = hlen + p->paylen + tlen;
	if (!shape_ok(r, w))
		return false;
	r->iov[r->iovcnt].iov_base = hdr;
	r->iov[r->iovcnt++].iov_len = hlen;
	if (p->paylen) {
		r->iov[r->iovcnt].iov_base = (void *)p->payload;
		r->iov[r->iovcnt++].iov_len = p->paylen;
		if (r->stage && p->payload == r->stage + r->staged)
			r->staged += p->paylen;
	}
	r->iov[r->iovcnt].iov_base = tail;
	r->iov[r->iovcnt++].iov_len = tlen;
	if (sl->unsealed) {
		sl->hlen = (uint8_t)hlen;
		sl->paylen = p->paylen;
		sl->payload = p->payload;
		r->unsealed = true;
	}
	if (r->n == 0)
		r->seg = w;
	else if (w < r->seg)
		r->closed = true;
	r->total += w;
	r->n++;
	return true;
}

/* The run takes UDP: every packet gets its ICRC (same tail length). */
static void seal(struct swv_txrun *r)
{
	if (!r->unsealed)
		return;
	for (unsigned i = 0; i < r->n; i++) {
		struct swv_txslot *sl = &r->slot[i];
		if (sl->unsealed)
			(void)swv_pkt_build_tail(sl->hdr, sl->hlen, sl->payload, sl->paylen,
						 sl->tail);
		sl->unsealed = false;
	}
	r->unsealed = false;
}

int swv_txrun_send(struct swv_txrun *r, unsigned *nsent)
{
	*nsent = 0;
	if (r->n == 0)
		return 0;
	/* A deferred ACK leaves before any later packet of its QP: the wire keeps the
	 * order things were decided in, so a peer sees its SEND acknowledged before the
	 * answer it provoked (transport/receive.c, swv_qp_rx_batch). */
	if (r->qp->resp && r->qp->resp->ack_pending)
		swv_resp_flush_ack(r->qp);
	enum swv_xmit_path path = r->unsealed ? SWV_XMIT_RING : SWV_XMIT_ANY;
	int rc = swv_qp_xmit(r->qp, r->to, r->iov, r->iovcnt, r->seg, r->n, path, nsent);
	if (rc == ENOTCONN && path == SWV_XMIT_RING) {
		seal(r);
		rc = swv_qp_xmit(r->qp, r->to, r->iov, r->iovcnt, r->seg, r->n, SWV_XMIT_UDP,
				 nsent);
	}
	if (swv_likely(!rc))
		return 0;
	if (!swv_ep_left(rc))
		return EAGAIN; /* a full socket or ring: retry later */
	/* Anything else is a lost packet: the reliability protocol recovers it (an RC
	 * requester's ACK timeout, a dead path ending in RETRY_EXC_ERR), as on a real link;
	 * an unreliable service does not report it. */
	swv_log(SWV_LOG_DEBUG, "qp %#x: transmit failed: %s", r->qp->qpn, strerror(rc));
	return rc;
}

int swv_tx_pkt(struct swv_qp *qp, const struct sockaddr_in *dst, const struct swv_pkt *p)
{
	struct iovec iov[3];
	struct swv_txslot slot;
	struct swv_txrun r = {.cap = 1, .iov = iov, .slot = &slot};
	unsigned nsent;

	run_reset(&r, qp, dst);
	if (swv_unlikely(!swv_txrun_add(&r, p))) {
		swv_log(SWV_LOG_ERR, "qp %#x: cannot build opcode %#x", qp->qpn, p->opcode);
		return EINVAL;
	}
	return swv_txrun_send(&r, &nsent);
}
