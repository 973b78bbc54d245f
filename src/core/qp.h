/*
 * Queue pairs: the verbs object, its work queues, caps and attributes. Owner: qp. The
 * protocol run over it (posting, the state machine, flush, receive, timers) and its
 * per-QP state are the transport's (transport/qp_transport.h).
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
#include "util/list.h"

struct swv_auth_qp;
struct swv_context;
struct swv_endpoint;
struct swv_pd;
struct swv_mw;
struct swv_req_state;
struct swv_resp_state;
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
	/* A receive ring's share of its context's posted-receive count (progress.h,
	 * rq_posted): +1 per WQE posted, -n when n leave (swv_wq_retire); NULL for a send
	 * queue. Changed under the ring's lock, like head and tail. */
	_Atomic int64_t *posted;
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
/* n receive WQEs leave the ring from its head (consumed, flushed or dropped; the
 * ring's lock held). Every receive ring's head moves only through here, so the
 * context's posted-receive count stays exact. */
static inline void swv_wq_retire(struct swv_wq *q, uint32_t n)
{
	q->head += n;
	if (q->posted)
		atomic_fetch_sub_explicit(q->posted, n, memory_order_relaxed);
}

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
	bool dt_published;	   /* listed in its inbox's placement table (swv_qp_dt_update) */
	bool dt_closed;		   /* destroy withdrew it: never listed again (under lock) */

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

	/* The transport's per-QP state (src/transport/qp_transport.h): one block the
	 * transport allocates when the QP is created and frees when it is destroyed,
	 * so this object does not depend on the protocol's types. Set before the QP is
	 * published; never NULL on a QP the progress thread can find. */
	struct swv_req_state *req;   /* requester + completer */
	struct swv_resp_state *resp; /* responder */
	struct swv_auth_qp *auth;    /* authenticated mode: MAC keys (transport/auth.h) */

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


/* Object lifetime. src/api/qp.c calls, after checking its arguments:
 * swv_qp_create, then the transport's init (transport/qp_transport.h), then
 * swv_qp_publish; on destroy swv_qp_destroy_begin, then the transport's fini, then
 * swv_qp_free. pd is NULL for an XRC TGT QP (attr->xrcd names its domain). */
/* The object, its queues and attributes, not yet reachable by the progress thread;
 * NULL and *err on failure. */
struct swv_qp *swv_qp_create(struct swv_pd *pd, struct ibv_qp_init_attr_ex *attr, int *err);
/* Give it a QP number (the progress thread finds it from now on) and take its
 * references. 0 or an errno; on failure the QP is still unpublished. */
int swv_qp_publish(struct swv_qp *qp);
/* Free a QP swv_qp_create made and swv_qp_publish did not publish. */
void swv_qp_discard(struct swv_qp *qp);
/* ibv_destroy_qp up to the point where nothing can reach the QP: 0 with *gone the
 * QP to finish (transport fini, then swv_qp_free), or with *gone NULL when only a
 * handle went (ibv_open_qp, an orphaned TGT QP); EBUSY while multicast groups are
 * attached. Returns once every async event handed out for the QP is acknowledged:
 * until then a handler may still use the QP, transport state included. */
int swv_qp_destroy_begin(struct swv_qp *qp, struct swv_qp **gone);
void swv_qp_free(struct swv_qp *qp);

#endif
