/*
 * The receive story of the transport. A packet the progress loop has parsed and
 * checked is handed to the QP it names: the per-QP demux below checks that it may
 * reach that QP (source, transport, P_Key, MAC, state) and gives it to the
 * responder (requests), the completer (responses) or UC flow control.
 */
#include <stdatomic.h>
#include <string.h>

#include "core/context.h"
#include "core/mcast.h"
#include "core/qp.h"
#include "link/endpoint.h"
#include "net/addr.h"
#include "transport/auth.h"
#include "transport/flowctl.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/qp_transport.h"
#include "transport/requester.h"
#include "transport/responder.h"
#include "util/compiler.h"

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
			/* The rendezvous SEND's ACK first: the READ may be read directly and
			 * complete in this call, sending the FIN, which must not reach the
			 * sender before the ACK of the SEND it answers (its SEND completion
			 * comes first on hardware, and pyverbs' test_tm_rndv polls in that
			 * order). */
			swv_resp_flush_ack(qp);
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

void swv_qp_rx_batch(struct swv_qp *qp, const struct swv_pkt *const *pkts,
		     const struct sockaddr_in *const *srcs, unsigned n)
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
	for (unsigned i = 0; i < n; i++)
		qp_rx_locked(qp, pkts[i], srcs[i]);
	qp->resp->ack_defer = false;
	swv_resp_flush_ack(qp);
	swv_ep_batch_end();
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
	swv_qp_rx_batch(qp, &pkt, &src, 1);
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
