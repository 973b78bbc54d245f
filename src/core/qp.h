/*
 * Queue pairs: the verbs object, its work queues and the state machine. Owner: qp.
 *
 * Locking: qp->lock protects every field below it except cntr[] (written by attach
 * under qp->lock while the QP is in RESET/INIT -- no traffic can run then -- and read
 * lock-free on the data path). Posting threads (post_send/post_recv) and the progress
 * thread (rx, timers) take qp->lock; nothing else is held while taking it except
 * cq->lock, which nests inside it.
 */
#ifndef SWV_CORE_QP_H
#define SWV_CORE_QP_H

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/completion.h"
#include "transport/auth.h"
#include "transport/packet.h"
#include "transport/requester.h"
#include "transport/responder.h"
#include "util/list.h"

struct swv_context;
struct swv_endpoint;
struct swv_pd;
struct swv_mw;
struct swv_cq;
struct swv_srq;
struct swv_tm_match;
struct swv_wr_batch;
struct swv_xrcd;

/* One posted send work request, copied at post time. SGEs (or inline bytes) follow. */
struct swv_send_wqe {
	uint64_t wr_id;
	enum ibv_wr_opcode opcode;
	unsigned send_flags;
	uint32_t imm_data; /* network order; or the rkey to invalidate */
	uint64_t remote_addr;
	uint32_t rkey;
	uint64_t compare_add, swap;
	uint32_t ud_remote_qpn, ud_remote_qkey;
	uint32_t xrc_srqn; /* XRC INI: wr.qp_type.xrc.remote_srqn, sent in XRCETH */
	struct sockaddr_in ud_dst;
	uint8_t ud_deth_rsvd; /* SWV_DETH_* bits and SL, from the AH (transport/packet.h) */
	uint8_t ud_mgid[16];  /* SWV_DETH_MGID: the AH's DGID, sent in front of the payload */
	uint32_t length;   /* total payload bytes */
	uint32_t num_sge;  /* 0 when inline */
	bool signaled;     /* CQE due on success */
	/* transport state, owned by the requester/completer */
	uint32_t first_psn, last_psn, npkts;
	uint32_t state;    /* enum swv_wqe_state (requester.h) */
	uint32_t status;   /* enum ibv_wc_status once state == SWV_WQE_ERROR */
	bool read_requested;   /* READ: a request went out (later ones are retries) */
	bool placed;	       /* RDMA WRITE: its bytes were placed directly (requester.c) */
	uint32_t read_req_end; /* READ: byte offset the latest request asked up to */
	uint64_t atomic_orig;
	/* BIND_MW: the window's handle, the rkey asked for (in rkey) and the bind, copied
	 * at post: the window is found again by its handle when the bind executes */
	uint32_t mw_handle;
	uint32_t bind_lkey; /* bind.mr's lkey: the MR is found again by it, never through bind.mr */
	struct ibv_mw_bind_info bind;
	/* Tag matching (transport/responder_tm.c): a WQE the device posted itself on a
	 * QP of a TM SRQ -- a rendezvous READ into tagged buffer tm_handle (the TMH and
	 * RVH follow its SGEs) or the FIN after it -- completes there, never on the send
	 * CQ or a counter. SWV_TM_WQE_NONE for every application WR. */
	uint8_t tm_op;
	uint32_t tm_handle;
	union {
		struct ibv_sge sge[0];
		uint8_t inline_data[0];
	};
};

enum { SWV_TM_WQE_NONE, SWV_TM_WQE_READ, SWV_TM_WQE_FIN };
/* Send slots a QP of a TM SRQ has beyond max_send_wr for those WQEs. */
#define SWV_TM_SQ_EXTRA 16

struct swv_recv_wqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t length; /* sum of SGE lengths */
	struct ibv_sge sge[];
};

/* A ring of fixed-size WQE slots. head = oldest, tail = next free; used = tail - head. */
struct swv_wq {
	uint8_t *buf;
	uint32_t stride;  /* bytes per slot */
	uint32_t nslots;  /* power of two >= max_wr */
	uint32_t max_wr;  /* capacity promised to the user */
	uint32_t max_sge;
	uint32_t head, tail;
	bool buf_custom; /* buf came from the PD's allocator (core/pd.h) */
};

static inline void *swv_wq_slot(const struct swv_wq *q, uint32_t idx)
{
	return q->buf + (size_t)(idx & (q->nslots - 1)) * q->stride;
}
static inline uint32_t swv_wq_used(const struct swv_wq *q)
{
	return q->tail - q->head;
}

/* Validate one receive WR and append it to a receive ring (a QP's RQ or an SRQ; the
 * caller holds the ring's lock). Returns 0, EINVAL (bad SGE count or list) or ENOMEM
 * (ring full). */
int swv_wq_post_recv(struct swv_wq *q, const struct ibv_recv_wr *wr);

struct swv_qp {
	/* ibv_qp_ex, then the rest of rdma-core 65's verbs_qp layout (ibv_qp_ex is 360
	 * bytes there: 44's 352 plus wr_flush), so ibv_qp_to_qp_ex and anything peeking
	 * at verbs_qp.comp_mask (+360) see what they expect (static assert in qp_ex.c). */
	struct ibv_qp_ex qpx;
	uint32_t verbs_comp_mask; /* +360: bit 1 (VERBS_QP_EX) when created with send_ops */
	struct ibv_xrcd *verbs_xrcd; /* +368 */
	/* ibv_wr_* batch builder (qp_ex.c); NULL unless created with send ops. */
	struct swv_wr_batch *wr_batch;

	struct swv_context *ctx;
	struct swv_endpoint *ep;
	struct swv_pd *pd;
	struct swv_cq *scq, *rcq;
	struct swv_srq *srq;
	/* XRC (core/xrcd.h): the QP runs as RC internally (type is IBV_QPT_RC) with XRC
	 * opcodes on the wire. An INI QP sends with XRCETH; a TGT QP (xrcd set, no PD and
	 * no CQs of its own) takes pd, srq and rcq from the SRQ each request names,
	 * holding a reference on that SRQ until the next names another, the QP goes or
	 * the SRQ is destroyed (swv_xrc_srq_unlink clears the three). */
	enum { SWV_XRC_NONE, SWV_XRC_INI, SWV_XRC_TGT } xrc;
	struct swv_xrcd *xrcd;
	/* TGT QPs and ibv_open_qp (core/xrcd.h), under swv_xrc_lock. A TGT QP: its entry
	 * in the domain's TGT list, the handles opened on it, whether its creator
	 * destroyed its own handle (it lives on for the opened ones and raises no async
	 * event, tgt_orphan also read under lock), and its registry file (-1: none; 0 is
	 * set by swv_xrc_tgt_link). An opened handle:
	 * open_real is the TGT QP, open_entry its place in the QP's open_list. */
	struct swv_list tgt_entry, open_list, open_entry;
	struct swv_qp *open_real;
	bool tgt_orphan, tgt_linked;
	int tgt_reg_fd;
	uint32_t qpn;
	struct swv_list ctx_entry; /* in ctx->qp_list, under ctx->qp_lock */

	/* counters, see comment at the top */
	struct ibv_comp_cntr *cntr[SWV_CNTR_NSLOTS];

	/* Triggered WRs (core/trig.h): the list under ctx->trig_lock; trig_held = send
	 * slots they reserve (post_send counts them as used); trig_gen, under lock,
	 * bumped by RESET so a trigger due before it is dropped. */
	struct swv_list trig_list;
	_Atomic uint32_t trig_held;
	uint32_t trig_gen;

	/* progress thread reads it without the lock to find the next timer */
	_Atomic uint64_t timer_deadline; /* absolute ns, 0 = none */

	pthread_mutex_t lock;
	enum ibv_qp_type type;
	enum ibv_qp_state state;
	bool sq_sig_all;
	struct ibv_qp_cap cap;
	struct ibv_qp_attr attr;   /* as ibv_query_qp reports it */
	struct sockaddr_in peer;   /* RC/UC: resolved from the AV at INIT->RTR (port from dest QPN) */
	uint32_t mtu;              /* path MTU in bytes */
	uint16_t pkey;             /* the port's P_Key at attr.pkey_index: sent and checked */
	struct swv_auth_qp auth;   /* authenticated mode: MAC keys (transport/auth.h) */
	bool dt_published;	   /* listed in its inbox's placement table (swv_qp_dt_update) */

	struct swv_wq sq;
	struct swv_wq rq;          /* unused (no slots) when srq != NULL */
	/* SRQ QPs: the WQE the responder took from the SRQ (core/srq.h), copied here so it
	 * belongs to this QP until it completes; srq_rwqe_valid while it is held. Sized
	 * for the SRQ's max_sge. Responder state, under lock. */
	struct swv_recv_wqe *srq_rwqe;
	bool srq_rwqe_valid;
	/* Tag-matching SRQ QPs: how srq_rwqe was chosen (core/srq.h), under lock. */
	struct swv_tm_match *tm_match;
	/* ... the send slots the device's own WQEs hold (SWV_TM_SQ_EXTRA at most), and
	 * whether the responder just posted one for the requester to send. */
	uint32_t tm_sq_held;
	bool tm_kick;

	struct swv_req_state req;   /* requester + completer */
	struct swv_resp_state resp; /* responder */

	/* packets dropped by swv_qp_rx (wrong source, wrong state, wrong transport) */
	_Atomic uint64_t rx_dropped;
	/* packets dropped by swv_qp_rx because their P_Key does not match qp->pkey
	 * (also added to the context's bad_pkey_cntr) */
	_Atomic uint64_t rx_bad_pkey;

	/* UD multicast (core/mcast.h): groups attached (under ctx->mcast_lock; destroy
	 * refuses with EBUSY while any), and the MGID of the group whose datagram is
	 * being received (under qp->lock, NULL for a unicast one: the GRH's DGID). */
	unsigned nmcast;
	const uint8_t *rx_mgid;

	/* async events about this QP handed to the application; under ctx->async.lock
	 * (core/async.h: destroy waits until that many were acked) */
	uint32_t async_reported;
};

static inline struct swv_qp *to_swv_qp(struct ibv_qp *qp)
{
	return (struct swv_qp *)qp;
}

/* UD destination of a send WQE from wr.ud (ibv_post_send, ibv_wr_set_ud_addr): the AH's
 * IP, the port named by remote_qpn, the Q_Key for DETH and the AH's GRH/SL. The Q_Key's
 * high bit gets no special meaning (rxe does not implement the "use the QP's own Q_Key"
 * rule either). Returns 0 or EINVAL (no AH, an AH of another context, QPN > 24 bits). */
int swv_send_wqe_set_ud(struct swv_qp *qp, struct swv_send_wqe *w, struct ibv_ah *ah,
			uint32_t remote_qpn, uint32_t remote_qkey);

/* ibv_context_ops entries. */
int swv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int swv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* swv_post_send_triggered after the argument checks: each WR is checked as post_send
 * checks it, takes a send slot and is held until cntr's count reaches threshold
 * (core/trig.h). Returns 0 or the errno of the first WR not posted (*bad). */
struct swv_comp_cntr;
int swv_qp_post_triggered(struct swv_qp *qp, struct ibv_send_wr *wr, struct swv_comp_cntr *cntr,
			  uint64_t threshold, struct ibv_send_wr **bad);

/* Progress thread entry points (qp->lock not held on entry). */
/* A datagram of a multicast group qp is attached to, with the group's MGID. */
void swv_qp_rx_mcast(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src,
		     const uint8_t mgid[16]);
void swv_qp_rx(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src);
/* n packets for qp in arrival order (pkts[i] from srcs[i]) under one lock hold, with
 * the responder's ACKs coalesced over the batch. */
void swv_qp_rx_batch(struct swv_qp *qp, const struct swv_pkt *const *pkts,
		     const struct sockaddr_in *const *srcs, unsigned n);
void swv_qp_timer(struct swv_qp *qp, uint64_t now_ns);

/* Move to ERR (qp->lock held): flush both queues with IBV_WC_WR_FLUSH_ERR (through
 * swv_complete, so counters see the errors). The error that caused it has been
 * reported through a CQE, so no async event is raised (as rxe and the IB rule for
 * errors reported by completion). Idempotent: in ERR it flushes what is queued. */
void swv_qp_to_error(struct swv_qp *qp);
/* List the QP in its inbox's placement table (link/shm.h, swv_shm_dt_qp) while it takes
 * requests a sender may place directly, withdraw it otherwise; returns once no
 * placement allowed by the old entry is under way. qp->lock held. */
void swv_qp_dt_update(struct swv_qp *qp);

/* A completion could not be reported because cq overflowed (swv_complete returned
 * ENOSPC; qp->lock held): raise IBV_EVENT_CQ_ERR on the CQ and IBV_EVENT_QP_FATAL on
 * the QP (the error could not be reported through a completion), then swv_qp_to_error. */
void swv_qp_cq_overflow(struct swv_qp *qp, struct swv_cq *cq);

/* Object lifetime (src/api/qp.c calls these after checking its arguments). pd is NULL
 * for an XRC TGT QP (attr->xrcd names its domain). */
struct swv_qp *swv_qp_create(struct swv_pd *pd, struct ibv_qp_init_attr_ex *attr, int *err);
int swv_qp_modify(struct swv_qp *qp, struct ibv_qp_attr *attr, int mask);
int swv_qp_query(struct swv_qp *qp, struct ibv_qp_attr *attr, struct ibv_qp_init_attr *init);
int swv_qp_destroy(struct swv_qp *qp);
/* verbs_context.create_qp_ex */
struct ibv_qp *swv_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);

/* State machine (qp_state.c): roce-wire.md 6.2. */
/* Required / optional attribute masks for cur -> next (STATE included in required);
 * returns false when the transition is invalid. */
bool swv_qp_transition_masks(enum ibv_qp_type type, enum ibv_qp_state cur,
			     enum ibv_qp_state next, int *req, int *opt);
/* IBV_QP_STATE .. IBV_QP_DEST_QPN: the attribute bits ibv_modify_qp knows; any other
 * bit is EOPNOTSUPP (the kernel's IB_QP_ATTR_STANDARD_BITS). */
#define SWV_QP_ATTR_STANDARD_BITS ((unsigned)IBV_QP_DEST_QPN * 2 - 1)
/* ib_modify_qp_is_ok: 0 or EINVAL. */
int swv_qp_check_mask(enum ibv_qp_type type, enum ibv_qp_state cur, enum ibv_qp_state next,
		      int mask);

/* Arm/cancel the QP timer (qp->lock held): updates timer_deadline and kicks the
 * progress thread if it would sleep past it. */
void swv_qp_set_timer(struct swv_qp *qp, uint64_t deadline_ns);

/* Transmit one packet of this QP to its peer (or dst for UD): builds pad + CRC.
 * Returns 0 or a positive errno. */
int swv_qp_xmit(struct swv_qp *qp, const struct sockaddr_in *dst, const uint8_t *hdr,
		size_t hdr_len, const void *payload, uint32_t paylen);

#endif
