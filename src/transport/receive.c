/*
 * The receive story of a context, top to bottom: the progress loop hands over what
 * its endpoints received (receive_rx); each packet is parsed and checked, grouped
 * per destination QP and demultiplexed (swv_qp_rx_batch), and the per-QP demux
 * checks that it may reach that QP (source, transport, P_Key, MAC, state) and gives
 * it to the responder (requests), the completer (responses) or UC flow control.
 * The loop's rx and timers calls run under its work lock, so the receive state
 * below has one user at a time.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/mcast.h"
#include "core/qp.h"
#include "core/trig.h"
#include "link/endpoint.h"
#include "link/shm.h"
#include "net/addr.h"
#include "transport/auth.h"
#include "transport/flowctl.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/qp_transport.h"
#include "transport/receive.h"
#include "transport/requester.h"
#include "transport/responder.h"
#include "util/compiler.h"

#define RX_GROUP      64 /* packets for one QP handed over under one lock hold */
#define ACK_LATER_MAX 16 /* QPs whose ACK an application pass may leave for later */

struct swv_receive {
	struct swv_context *ctx;
	/* ACKs left for later (docs/design.md, "The ACK with the answer"): an
	 * application's pass that completed a receive from a socket does not send the ACK
	 * before returning; the QP's next packet takes it out in front of itself
	 * (swv_txrun_send), else the next pass or iteration (receive_begin) does. Named
	 * by endpoint and QPN and looked up again then, so a QP destroyed meanwhile is
	 * simply not found. */
	bool ack_later_ok; /* this batch is an application's pass under the lease */
	unsigned nlater;
	struct {
		struct swv_endpoint *ep;
		uint32_t qpn;
	} later[ACK_LATER_MAX];
	/* consecutive packets for the same QP, parsed, not yet handed over */
	struct swv_qp *gqp;
	struct swv_endpoint *gep;
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
	if (r->gn) {
		bool later = r->ack_later_ok && r->nlater < ACK_LATER_MAX;
		if (swv_qp_rx_batch(r->gqp, r->gp, r->gs, r->gn, later)) {
			r->later[r->nlater].ep = r->gep;
			r->later[r->nlater].qpn = r->gqp->qpn;
			r->nlater++;
			/* If the application calls no more, the thread sends it when it
			 * next looks at the lease: it wakes then anyway, so this costs no
			 * system call. */
			struct swv_progress *pr = &r->ctx->progress;
			swv_progress_kick_lazy(
			    pr, atomic_load_explicit(&pr->drive_until, memory_order_relaxed));
		}
	}
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
	/* A record of the ring may carry no ICRC (docs/design.md, "No ICRC on the ring"):
	 * only its sender says so, so a MAC'd or a sealed packet is still checked. */
	rc = swv_pkt_parse_ex(rp->buf, rp->len, ctx->cfg->auth || rp->unchecked, &pkt);
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
	r->gep = ep;
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
	struct swv_progress *pr = &r->ctx->progress;
	unsigned got = 0;

	/* Only for a socket's packets: there the ACK is a system call on the way to the
	 * application's answer; on the intra-host ring it costs less than keeping it
	 * (measured, docs/performance.md "the ACK behind the answer"). */
	r->ack_later_ok = !ring && atomic_load_explicit(&pr->drive_until, memory_order_relaxed) &&
			  !swv_progress_is_self(pr);
	for (unsigned i = 0; i < n; i++)
		got += rx_dispatch(r, ep, &pkts[i], ring);
	group_flush(r);
	return got;
}

/* The ACKs the last passes left for later, before anything new is received. */
static void receive_begin(void *owner)
{
	struct swv_receive *r = owner;

	for (unsigned i = 0; i < r->nlater; i++) {
		struct swv_qp *qp = swv_ctx_qp_lookup(r->ctx, r->later[i].ep, r->later[i].qpn);
		if (qp)
			swv_qp_ack_now(qp);
	}
	r->nlater = 0;
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
		uint64_t d = atomic_load(&qp->timer_deadline); /* seq_cst: swv_qp_set_timer */
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
    .begin = receive_begin,
    .timers = receive_timers,
    .after = receive_after,
    .watch = receive_watch,
};

/* ---- per-QP demux ---- */

static bool same_peer(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/* The partition check, for every QP type and every packet that passed the source
 * and transport checks (requests, responses, flow control), in rxe's order: a packet
 * outside the QP's partition is dropped and counted as a P_Key violation. */
static bool pkey_ok(struct swv_qp *qp, const struct swv_pkt *pkt)
{
	if (swv_likely(swv_pkey_match(pkt->pkey, qp->pkey)))
		return true;
	atomic_fetch_add_explicit(&qp->rx_bad_pkey, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&qp->ctx->bad_pkey_cntr, 1, memory_order_relaxed);
	return false;
}

/* One packet, qp->lock held. */
static void qp_rx_locked(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src)
{
	bool request = pkt->flags & SWV_OPF_REQUEST;
	bool response = pkt->flags & SWV_OPF_RESPONSE;
	enum ibv_qp_state st = qp->state;

	if (pkt->flags & SWV_OPF_FLOWCTL) {
		/* UC credit / probe from the connected peer (transport/flowctl.h) */
		if (qp->type != IBV_QPT_UC || !same_peer(src, &qp->peer) ||
		    !swv_qp_takes_requests(st))
			goto drop;
		if (!swv_auth_rx_ok(qp->auth, pkt, src) || !pkey_ok(qp, pkt))
			return;
		if (swv_fc_rx_control(qp, pkt))
			swv_req_run(qp);
		return;
	}
	uint8_t tp = swv_opcode_transport(pkt->opcode);
	struct swv_pkt rc_view;
	if (qp->xrc != SWV_XRC_NONE) {
		/* XRC: only the connected peer, XRC opcodes only -- requests for a TGT QP,
		 * responses for an INI QP. From here on the RC machinery handles the packet
		 * as the RC operation it is (the TGT responder reads xrc_srqn). */
		if (tp != SWV_OP_XRC || !same_peer(src, &qp->peer) ||
		    (qp->xrc == SWV_XRC_TGT ? !request : !response))
			goto drop;
		rc_view = *pkt;
		rc_view.opcode = pkt->opcode & SWV_OP_OPERATION_MASK;
		rc_view.flags = swv_opcode(rc_view.opcode)->flags;
		pkt = &rc_view;
		tp = SWV_OP_RC;
	}
	switch (qp->type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
		/* Connected: only the peer set at RTR may talk to this QP (DESIGN.md 4; rxe
		 * checks the addresses for RC and UC alike), and only with its opcodes. */
		if (tp != (qp->type == IBV_QPT_RC ? SWV_OP_RC : SWV_OP_UC) ||
		    !same_peer(src, &qp->peer))
			goto drop;
		break;
	case IBV_QPT_UD:
		/* Anyone may send, UD opcodes only. The DETH source QPN must name the UDP
		 * port the datagram came from: a reply addressed from this receive (AH from
		 * the WC, remote_qpn = src_qp) goes there. */
		if (tp != SWV_OP_UD || swv_qpn_port(pkt->deth_sqpn) != ntohs(src->sin_port))
			goto drop;
		break;
	default:
		goto drop;
	}
	if (!swv_auth_rx_ok(qp->auth, pkt, src) || !pkey_ok(qp, pkt))
		return;
	if (request) {
		if (!swv_qp_takes_requests(st))
			goto drop;
		/* UC: every data packet consumed counts towards the sender's credit,
		 * whatever the responder makes of it. UD uses the source for the GRH
		 * area and wc.slid. */
		swv_fc_rx_data(qp, pkt->psn);
		swv_resp_rx_from(qp, pkt, src);
		if (qp->tm_kick) { /* a rendezvous READ to send (transport/tm.h) */
			qp->tm_kick = false;
			/* The READ may be read directly and complete in this call, sending
			 * the FIN, which must not reach the sender before the ACK of the SEND
			 * it answers (its SEND completion comes first on hardware, and
			 * pyverbs' test_tm_rndv polls in that order): the transmit path sends
			 * the pending ACK in front of the READ request (swv_txrun_send). */
			swv_req_run(qp);
		}
	} else if (response) {
		if (st != IBV_QPS_RTS && st != IBV_QPS_SQD)
			goto drop;
		swv_comp_rx(qp, pkt);
	} else {
		goto drop;
	}
	return;
drop:
	atomic_fetch_add_explicit(&qp->rx_dropped, 1, memory_order_relaxed);
}

bool swv_qp_rx_batch(struct swv_qp *qp, const struct swv_pkt *const *pkts,
		     const struct sockaddr_in *const *srcs, unsigned n, bool ack_later)
{
	pthread_mutex_lock(&qp->lock);
	/* One lock hold for the batch; the responder sends one ACK for the batch's
	 * latest AckReq instead of one per packet (ACKs are cumulative), and the small
	 * datagrams the batch produces (ACKs, requests the completer lets out, small READ
	 * responses) leave in one sendmmsg before the lock is released. */
	swv_ep_batch_begin();
	/* held responses first: this batch's answers must not overtake them (the ring may
	 * have room again: the peer is running) */
	if (qp->resp->tx_retry_at && swv_qp_takes_requests(qp->state))
		swv_resp_tx_resume(qp);
	qp->resp->ack_defer = true;
	qp->resp->recv_done = false;
	for (unsigned i = 0; i < n; i++)
		qp_rx_locked(qp, pkts[i], srcs[i]);
	qp->resp->ack_defer = false;
	/* A receive completed: the application is about to learn of it and may answer
	 * at once. The ACK may then wait to leave with that answer, in front of it and in
	 * the same system call (ack_later; swv_txrun_send; receive_begin). Not while
	 * responses are held: the ACK must leave after them (swv_resp_send keeps it as
	 * tx_ack), and left pending it would go in front of them once they resume. */
	bool later = ack_later && qp->resp->ack_pending && qp->resp->recv_done &&
		     !qp->resp->tx_retry_at;
	if (!later)
		swv_resp_flush_ack(qp);
	swv_ep_batch_end();
	pthread_mutex_unlock(&qp->lock);
	return later;
}

void swv_qp_ack_now(struct swv_qp *qp)
{
	if (!qp->resp)
		return; /* never had transport state */
	pthread_mutex_lock(&qp->lock);
	if (qp->resp->ack_pending && swv_qp_takes_requests(qp->state)) {
		swv_ep_batch_begin();
		swv_resp_flush_ack(qp);
		swv_ep_batch_end();
	}
	pthread_mutex_unlock(&qp->lock);
}

void swv_qp_rx_mcast(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src,
		     const uint8_t mgid[16])
{
	pthread_mutex_lock(&qp->lock);
	qp->rx_mgid = mgid;
	qp_rx_locked(qp, pkt, src);
	qp->rx_mgid = NULL;
	pthread_mutex_unlock(&qp->lock);
}

void swv_qp_rx(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src)
{
	(void)swv_qp_rx_batch(qp, &pkt, &src, 1, false);
}

/* A multicast datagram: a copy to every QP attached to the group (core/mcast.h). */
bool swv_mcast_deliver(struct swv_context *ctx, struct swv_endpoint *ep, const struct swv_pkt *pkt,
		       const struct sockaddr_in *src)
{
	struct swv_mcast_grp *g = (struct swv_mcast_grp *)ep;
	(void)ctx;
	/* Two MGIDs can share one IP group: as hardware matches the GRH DGID, only the
	 * datagrams that name this group's MGID are for its QPs (transport/packet.h). */
	if (!pkt->mgid || memcmp(pkt->mgid, g->mgid, sizeof(g->mgid)))
		return false;
	/* Every QP attached gets its copy, the sender's own QP too when it is attached
	 * (mlx5 without IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, rxe); QPs that are not
	 * attached never see the datagram (docs/wire.md). */
	for (unsigned i = 0; i < SWV_MCAST_MAX_QP_ATTACH; i++) {
		struct swv_qp *qp = atomic_load_explicit(&g->qps[i], memory_order_acquire);
		if (qp)
			swv_qp_rx_mcast(qp, pkt, src, g->mgid);
	}
	return true;
}
