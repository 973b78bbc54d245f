/*
 * The transport's side of a QP: its per-QP state and what runs the protocol over the
 * QP object of core/qp.h (docs/design.md, "Where the QP object ends").
 *
 * core/qp.h is the verbs object: queues, attributes, CQs, counters. Everything that
 * knows the protocol -- posting into the requester, state changes that reset or
 * flush it, the receive demux, timers, direct placement, ibv_query_qp's PSNs -- is
 * here, in the layer above. The per-QP state (requester/completer, responder, MAC
 * keys) is one block reached through qp->req, qp->resp and qp->auth: allocated by
 * swv_qp_transport_init before the QP is published, freed by swv_qp_transport_fini
 * once nothing can reach the QP any more.
 */
#ifndef SWV_TRANSPORT_QP_TRANSPORT_H
#define SWV_TRANSPORT_QP_TRANSPORT_H

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/qp.h"
#include "transport/auth.h"
#include "transport/packet.h"
#include "transport/requester.h"
#include "transport/responder.h"

struct swv_qp_transport {
	struct swv_req_state req;
	struct swv_resp_state resp;
	struct swv_auth_qp auth;
};

/* Point qp at t (zeroed by the caller): for a QP built by hand, as the unit tests do. */
static inline void swv_qp_transport_attach(struct swv_qp *qp, struct swv_qp_transport *t)
{
	qp->req = &t->req;
	qp->resp = &t->resp;
	qp->auth = &t->auth;
}

/* QP creation, between swv_qp_create and swv_qp_publish (src/api/qp.c): allocate
 * the state, reset the requester, set up the MAC keys. 0 or ENOMEM. */
int swv_qp_transport_init(struct swv_qp *qp);
/* QP destroy, after swv_qp_destroy_begin: log the QP's transport statistics and free
 * the state (a NULL qp->req is a no-op, for a QP whose init failed). */
void swv_qp_transport_fini(struct swv_qp *qp);
/* The allocation alone, zeroed, and its release (responder buffers included). */
int swv_qp_transport_alloc(struct swv_qp *qp);
void swv_qp_transport_free(struct swv_qp *qp);

/* States in which a QP takes requests (and flow control) from its peer. */
static inline bool swv_qp_takes_requests(enum ibv_qp_state st)
{
	return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD;
}

/* ---- posting (post.c) ---- */

/* ibv_context_ops entries (src/api/context.c sets them). */
int swv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int swv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* UD destination of a send WQE from wr.ud (ibv_post_send, ibv_wr_set_ud_addr): the AH's
 * IP, the port named by remote_qpn, the Q_Key for DETH and the AH's GRH/SL. The Q_Key's
 * high bit gets no special meaning (rxe does not implement the "use the QP's own Q_Key"
 * rule either). Returns 0 or EINVAL (no AH, an AH of another context, QPN > 24 bits). */
int swv_send_wqe_set_ud(struct swv_qp *qp, struct swv_send_wqe *w, struct ibv_ah *ah,
			uint32_t remote_qpn, uint32_t remote_qkey);
/* swv_post_send_triggered after the argument checks: each WR is checked as post_send
 * checks it, takes a send slot and is held until cntr's count reaches threshold
 * (core/trig.h). Returns 0 or the errno of the first WR not posted (*bad). */
struct swv_comp_cntr;
int swv_qp_post_triggered(struct swv_qp *qp, struct ibv_send_wr *wr, struct swv_comp_cntr *cntr,
			  uint64_t threshold, struct ibv_send_wr **bad);

/* ---- state (qp_state.c) ---- */

int swv_qp_modify(struct swv_qp *qp, struct ibv_qp_attr *attr, int mask);
/* ibv_query_qp: the attributes, with the current PSNs as rxe reports them. */
int swv_qp_query(struct swv_qp *qp, struct ibv_qp_attr *attr, struct ibv_qp_init_attr *init);
/* State machine: roce-wire.md 6.2. Required / optional attribute masks for
 * cur -> next (STATE included in required); returns false when the transition is
 * invalid. */
bool swv_qp_transition_masks(enum ibv_qp_type type, enum ibv_qp_state cur, enum ibv_qp_state next,
			     int *req, int *opt);
/* IBV_QP_STATE .. IBV_QP_DEST_QPN: the attribute bits ibv_modify_qp knows; any other
 * bit is EOPNOTSUPP (the kernel's IB_QP_ATTR_STANDARD_BITS). */
#define SWV_QP_ATTR_STANDARD_BITS ((unsigned)IBV_QP_DEST_QPN * 2 - 1)
/* ib_modify_qp_is_ok: 0 or EINVAL. */
int swv_qp_check_mask(enum ibv_qp_type type, enum ibv_qp_state cur, enum ibv_qp_state next,
		      int mask);

/* Move to ERR (qp->lock held): flush both queues with IBV_WC_WR_FLUSH_ERR (through
 * swv_complete, so counters see the errors) and stop the requester's and responder's
 * timers. The error that caused it has been reported through a CQE, so no async
 * event is raised (as rxe and the IB rule for errors reported by completion).
 * Idempotent: in ERR it flushes what is queued. */
void swv_qp_to_error(struct swv_qp *qp);
/* A completion could not be reported because cq overflowed (swv_complete returned
 * ENOSPC; qp->lock held): raise IBV_EVENT_CQ_ERR on the CQ and IBV_EVENT_QP_FATAL on
 * the QP (the error could not be reported through a completion), then swv_qp_to_error. */
void swv_qp_cq_overflow(struct swv_qp *qp, struct swv_cq *cq);
/* List the QP in its inbox's placement table (link/shm.h, swv_shm_dt_qp) while it takes
 * requests a sender may place directly, withdraw it otherwise; returns once no
 * placement allowed by the old entry is under way. qp->lock held. */
void swv_qp_dt_update(struct swv_qp *qp);

/* ---- timers (qp_timer.c) ---- */

/* The receive story's timer scan (transport/receive.c): the QP's timer_deadline has
 * come; runs the requester's and responder's timers. qp->lock not held. */
void swv_qp_timer(struct swv_qp *qp, uint64_t now_ns);

/* Arm/cancel the QP timer (qp->lock held): updates timer_deadline and kicks the
 * progress thread if it would sleep past it. */
void swv_qp_set_timer(struct swv_qp *qp, uint64_t deadline_ns);

/* ---- transmit (xmit.c) ---- */

/* Hand npkts framed packets (iov, built by swv_txrun_add) of this QP to its link,
 * towards to: one plain datagram for one packet, else a GSO send of seg-byte segments
 * (swv_ep_send_gso). Destination QPN 0 (UDP port 0, which no socket can have) goes
 * nowhere, as a packet to an absent QP would: every packet counts as sent. Returns 0
 * or a positive errno, with *nsent the packets that left. path: SWV_XMIT_RING for
 * packets that carry no ICRC, so may leave only through the intra-host link (ENOTCONN,
 * nothing sent, when to is not reached through it: swv_ep_send_ring); SWV_XMIT_UDP for
 * the same run sealed after that answer (no second route lookup: swv_ep_send_udp).
 * Only swv_txrun_send calls it (transport/txrun.h). */
enum swv_xmit_path {
	SWV_XMIT_ANY,  /* the intra-host link if it reaches to, else UDP */
	SWV_XMIT_RING, /* the intra-host link or nothing */
	SWV_XMIT_UDP,  /* UDP, known not to be reached through the intra-host link */
};
struct iovec;
int swv_qp_xmit(struct swv_qp *qp, const struct sockaddr_in *to, const struct iovec *iov,
		int iovcnt, size_t seg, unsigned npkts, enum swv_xmit_path path, unsigned *nsent);

/* ---- triggered operations (trig_run.c; the lists are core/trig.h) ---- */

/* Issue the ready queue. Call with no lock held. Cheap when it is empty. On return,
 * every trigger queued before the call has been issued (by this thread, or by the
 * runner it waited for): ctx->trig_nready counts queued and running ones. */
void swv_trig_run(struct swv_context *ctx);

/* qp->lock held: the QP enters (or is in) ERR: its held WRs complete with
 * IBV_WC_WR_FLUSH_ERR (after the ring's), in post order. */
void swv_trig_qp_flush(struct swv_qp *qp);

#endif
