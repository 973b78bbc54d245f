/*
 * The receive story of a context: check, demultiplex to the QP (transport/receive.h).
 * Every call runs on the context's progress loop: rx and timers under its work lock,
 * so the state below has one user at a time.
 */
#include <errno.h>
#include <stdlib.h>

#include "core/context.h"
#include "core/mcast.h"
#include "core/qp.h"
#include "core/trig.h"
#include "link/endpoint.h"
#include "link/shm.h"
#include "transport/packet.h"
#include "transport/receive.h"
#include "util/compiler.h"

#define RX_GROUP 64 /* packets for one QP handed over under one lock hold */

struct swv_receive {
	struct swv_context *ctx;
	/* consecutive packets for the same QP, parsed, not yet handed over */
	struct swv_qp *gqp;
	unsigned gn;
	struct swv_pkt gpk[RX_GROUP];
	const struct swv_pkt *gp[RX_GROUP];
	const struct sockaddr_in *gs[RX_GROUP];
	struct swv_qp **due; /* QPs whose timer is due, collected under qp_lock */
	size_t due_cap;
};

/* Single writer (whoever holds the work lock): a plain load+store is enough and avoids a
 * locked instruction per packet. */
static inline void stat_inc(_Atomic uint64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

static void group_flush(struct swv_receive *r)
{
	if (r->gn)
		swv_qp_rx_batch(r->gqp, r->gp, r->gs, r->gn);
	r->gn = 0;
	r->gqp = NULL;
}

/* Check one datagram and queue it for its QP (false: it was a doorbell); consecutive packets for
 * one QP are handed over together (one lock hold, one coalesced ACK: swv_qp_rx_batch). They point
 * into the receive buffers, so the group is handed over before the batch ends. */
static bool rx_dispatch(struct swv_receive *r, struct swv_endpoint *ep, struct swv_rx_pkt *rp,
			bool ring)
{
	struct swv_context *ctx = r->ctx;
	struct swv_progress *pr = &ctx->progress;
	struct swv_pkt pkt;
	int rc;

	if (swv_unlikely(swv_shm_is_doorbell(rp->buf, rp->len))) {
		/* A wake-up for the inbox (link/shm.h), not a packet. The sender cleared the
		 * inbox's "sleeping" flag for it, so a doorbell an application pass took from
		 * the socket must still wake the thread: otherwise it would sleep on with no
		 * sender ringing again. It re-arms and sleeps if there is nothing to do. */
		if (!swv_progress_is_self(pr))
			swv_progress_kick(pr, 0);
		return false;
	}
	rc = swv_pkt_parse_ex(rp->buf, rp->len, ctx->cfg->auth, &pkt);
	if (rc) {
		stat_inc(rc == EBADMSG ? &pr->rx_bad_crc : &pr->rx_malformed);
		return true;
	}
	/* Only a sender on the intra-host link can have placed a payload; elsewhere the
	 * bit is reserved and ignored, as a real adapter does (docs/wire.md). */
	pkt.placed &= ring;
	if (swv_unlikely(ep->mcast)) {
		/* A group's socket: for QPN 0xffffff only, to every QP attached. */
		group_flush(r);
		if (pkt.dqpn != SWV_MCAST_QPN || !swv_mcast_deliver(ctx, ep, &pkt, &rp->src))
			stat_inc(&pr->rx_no_qp);
		return true;
	}
	/* The QPN names its socket: a packet for another port's QPN is misrouted. */
	struct swv_qp *qp = swv_ctx_qp_lookup(ctx, ep, pkt.dqpn);
	if (!qp) {
		stat_inc(&pr->rx_no_qp);
		return true;
	}
	if (qp != r->gqp || r->gn == RX_GROUP)
		group_flush(r);
	r->gqp = qp;
	r->gpk[r->gn] = pkt;
	r->gp[r->gn] = &r->gpk[r->gn];
	r->gs[r->gn] = &rp->src;
	r->gn++;
	return true;
}

static unsigned receive_rx(void *owner, struct swv_endpoint *ep, struct swv_rx_pkt *pkts,
			   unsigned n, bool ring)
{
	struct swv_receive *r = owner;
	unsigned got = 0;

	for (unsigned i = 0; i < n; i++)
		got += rx_dispatch(r, ep, &pkts[i], ring);
	group_flush(r);
	return got;
}

/* Run due QP timers; returns the earliest future deadline (UINT64_MAX if none). */
static uint64_t receive_timers(void *owner, uint64_t now)
{
	struct swv_receive *r = owner;
	struct swv_context *ctx = r->ctx;
	uint64_t next = UINT64_MAX;
	size_t ndue = 0;
	struct swv_list *pos;

	pthread_mutex_lock(&ctx->qp_lock);
	swv_list_for_each(pos, &ctx->qp_list)
	{
		struct swv_qp *qp = swv_list_entry(pos, struct swv_qp, ctx_entry);
		uint64_t d = atomic_load_explicit(&qp->timer_deadline, memory_order_acquire);
		if (!d)
			continue;
		if (d > now) {
			next = SWV_MIN(next, d);
			continue;
		}
		if (ndue == r->due_cap) {
			size_t cap = r->due_cap ? r->due_cap * 2 : 64;
			struct swv_qp **n = realloc(r->due, cap * sizeof(*n));
			if (!n) {
				next = now; /* retry the rest on the next iteration */
				break;
			}
			r->due = n;
			r->due_cap = cap;
		}
		r->due[ndue++] = qp;
	}
	pthread_mutex_unlock(&ctx->qp_lock);

	/* Outside qp_lock: the timer takes qp->lock and may transmit. The QPs cannot be
	 * freed before this iteration ends (swv_ctx_qpn_free syncs on it). */
	for (size_t i = 0; i < ndue; i++) {
		swv_qp_timer(r->due[i], now);
		uint64_t d = atomic_load_explicit(&r->due[i]->timer_deadline, memory_order_acquire);
		if (d)
			next = SWV_MIN(next, d);
	}
	return next;
}

static void receive_after(void *owner)
{
	struct swv_receive *r = owner;
	swv_trig_run(r->ctx);
}

/* The port's interface changed between active and not: tell the application, as a
 * device does, on the context's async queue (port 1, the only port). */
static void port_changed(void *arg, bool active)
{
	swv_async_event(arg, active ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR,
			(void *)(uintptr_t)1);
}

static void receive_watch(void *owner)
{
	struct swv_receive *r = owner;
	swv_netdev_process(&r->ctx->netdev, port_changed, r->ctx);
}

static void *receive_open(void *arg)
{
	struct swv_receive *r = calloc(1, sizeof(*r));
	if (!r) {
		errno = ENOMEM;
		return NULL;
	}
	r->ctx = arg;
	return r;
}

static void receive_close(void *owner)
{
	struct swv_receive *r = owner;
	free(r->due);
	free(r);
}

const struct swv_progress_ops swv_receive_ops = {
    .open = receive_open,
    .close = receive_close,
    .rx = receive_rx,
    .timers = receive_timers,
    .after = receive_after,
    .watch = receive_watch,
};
