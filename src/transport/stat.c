/*
 * Live introspection server (transport/stat.h). The rules are in the header; this file
 * holds the registry of open contexts, the server thread and the snapshot.
 */
#include "core/limits.h"
#include "transport/stat.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/comp_cntr.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "link/shm.h"
#include "util/log.h"

/* ---- registry and server lifetime ----
 * srv_lock serialises starting and stopping the thread (register/unregister only;
 * the thread never takes it). reg_lock protects reg[]/nreg and is held by the
 * thread for a whole snapshot. Order: srv_lock, then reg_lock. */
static pthread_mutex_t srv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct swv_context **reg;
static size_t nreg, reg_cap;
static pthread_t srv_thread;
static bool srv_running;		     /* under srv_lock */
static int srv_listen = -1, srv_stopfd = -1; /* under srv_lock; the thread reads its copies */
static int stat_off = -1;		     /* SWVERBS_STAT=0; -1 = not read yet (srv_lock) */
static bool atfork_done;

/* ---- growable text buffer ---- */
struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

__attribute__((format(printf, 2, 3))) static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	for (;;) {
		va_list ap;
		size_t room = b->cap - b->len;
		va_start(ap, fmt);
		int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = true;
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = SWV_MAX(b->cap * 2, b->len + (size_t)n + 256);
		char *np = realloc(b->p, cap);
		if (!np) {
			b->oom = true;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
}

/* A string from the configuration or the process name, as a JSON string body: the
 * snapshot must parse whatever a device was named. */
static void sb_json_str(struct sbuf *b, const char *str)
{
	for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
		if (*p == '"' || *p == '\\')
			sb_printf(b, "\\%c", *p);
		else if (*p < 0x20 || *p >= 0x7f)
			sb_printf(b, "\\u%04x", *p);
		else
			sb_printf(b, "%c", *p);
	}
}

/* ---- snapshot ---- */
#define NO_CNTR UINT32_MAX

struct qp_snap {
	uint32_t qpn, dest_qpn;
	enum ibv_qp_type type;
	enum ibv_qp_state state;
	struct sockaddr_in peer;
	uint32_t sq_psn, una_psn, epsn, mtu;
	uint32_t sq_used, sq_max, rq_used, rq_max;
	bool srq;
	unsigned scq, rcq; /* indexes into ctx_snap.cq */
	uint8_t retry_cnt, retry_left, rnr_retry, rnr_left;
	uint64_t pkts, retries, timeouts, seq_naks_rx, rnr_naks_rx, probes, sel_resends;
	uint64_t sack_naks_rx, holes_resent;
	struct swv_resp_stats resp;
	uint64_t rx_dropped, rx_bad_pkey, auth_bad;
	uint32_t cntr[SWV_CNTR_NSLOTS]; /* attached counter handles, NO_CNTR = none */
};

struct cq_snap {
	const struct swv_cq *cq; /* identity only, never dereferenced after the QP walk */
	uint32_t cqe, used;
};

struct cntr_snap {
	uint32_t handle;
	enum ibv_comp_cntr_type type;
	uint64_t comp, err, max_value;
	uint32_t nattach;
	bool app_memory;
};

struct ep_snap {
	uint16_t port;
	uint64_t udp_tx, gso_segs, rx_truncated, rx_gro_excess;
	bool shm;
	struct swv_shm_stats shm_st;
};

struct ctx_snap {
	const struct swv_dev_config *cfg;
	unsigned dev_index;
	uint32_t netdev_flags;
	uint64_t rx_packets, rx_bad_crc, rx_malformed, rx_no_qp, bad_pkey, iterations;
	uint64_t rx_calls_thread, rx_calls_app, wakeups;
	bool muted, asleep; /* the progress thread: sockets out of its set; in its wait */
	struct ep_snap ep[SWV_MAX_QP_PORTS];
	unsigned nep;
	struct qp_snap *qp;
	size_t nqp;
	struct cq_snap *cq;
	size_t ncq;
	struct cntr_snap *cntr;
	size_t ncntr;
	bool oom;
};

#define NO_CQ UINT32_MAX /* an XRC QP's missing CQ (JSON null) */

static unsigned cq_index(struct ctx_snap *s, size_t *cap, struct swv_cq *cq)
{
	if (!cq)
		return NO_CQ;
	for (size_t i = 0; i < s->ncq; i++)
		if (s->cq[i].cq == cq)
			return (unsigned)i;
	if (s->ncq == *cap) {
		size_t n = *cap ? *cap * 2 : 8;
		struct cq_snap *p = realloc(s->cq, n * sizeof(*p));
		if (!p) {
			s->oom = true;
			return UINT32_MAX;
		}
		s->cq = p;
		*cap = n;
	}
	/* cq->lock nests inside qp_lock (it nests inside everything): size moves on resize */
	pthread_mutex_lock((pthread_mutex_t *)&cq->lock);
	s->cq[s->ncq].cq = cq;
	s->cq[s->ncq].cqe = (uint32_t)cq->ibcq.cqe;
	s->cq[s->ncq].used = atomic_load(&cq->tail) - atomic_load(&cq->head);
	pthread_mutex_unlock((pthread_mutex_t *)&cq->lock);
	return (unsigned)s->ncq++;
}

static void snap_qp(struct qp_snap *q, struct swv_qp *qp)
{
	q->qpn = qp->qpn;
	q->type = qp->qpx.qp_base.qp_type; /* XRC halves by their own name */
	q->state = qp->state;
	q->dest_qpn = qp->attr.dest_qp_num;
	q->peer = qp->peer;
	q->sq_psn = qp->req->next_psn;
	q->una_psn = qp->req->una_psn;
	q->epsn = qp->resp->epsn;
	q->mtu = qp->mtu;
	q->sq_used = swv_wq_used(&qp->sq);
	q->sq_max = qp->sq.max_wr;
	q->srq = qp->srq != NULL;
	q->rq_used = q->srq ? 0 : swv_wq_used(&qp->rq);
	q->rq_max = q->srq ? 0 : qp->rq.max_wr;
	q->retry_cnt = qp->attr.retry_cnt;
	q->rnr_retry = qp->attr.rnr_retry;
	q->retry_left = qp->req->retry_left;
	q->rnr_left = qp->req->rnr_left;
	q->pkts = qp->req->n_pkts;
	q->retries = qp->req->n_retries;
	q->timeouts = qp->req->n_timeouts;
	q->seq_naks_rx = qp->req->n_seq_naks;
	q->rnr_naks_rx = qp->req->n_rnr_naks;
	q->probes = qp->req->n_probes;
	q->sel_resends = qp->req->n_sel_resends;
	q->sack_naks_rx = qp->req->n_sack_naks;
	q->holes_resent = qp->req->n_holes_resent;
	q->resp = qp->resp->stats;
	q->rx_dropped = atomic_load_explicit(&qp->rx_dropped, memory_order_relaxed);
	q->rx_bad_pkey = atomic_load_explicit(&qp->rx_bad_pkey, memory_order_relaxed);
	q->auth_bad = atomic_load_explicit(&qp->auth->rx_bad, memory_order_relaxed);
	/* cntr[] is written under qp->lock (attach/detach); a counter stays alive while
	 * attached (destroy is EBUSY), so its handle can be read here */
	for (unsigned s = 0; s < SWV_CNTR_NSLOTS; s++)
		q->cntr[s] = qp->cntr[s] ? qp->cntr[s]->handle : NO_CNTR;
}

static void snap_ctx(struct ctx_snap *s, struct swv_context *ctx)
{
	struct swv_progress *pr = &ctx->progress;
	size_t qcap = 0, ccap = 0;
	struct swv_list *pos;

	memset(s, 0, sizeof(*s));
	s->cfg = ctx->cfg;
	s->dev_index = ctx->dev->index;
	s->netdev_flags = swv_netdev_flags(&ctx->netdev);
	s->rx_packets = atomic_load_explicit(&pr->rx_packets, memory_order_relaxed);
	s->rx_bad_crc = atomic_load_explicit(&pr->rx_bad_crc, memory_order_relaxed);
	s->rx_malformed = atomic_load_explicit(&pr->rx_malformed, memory_order_relaxed);
	s->rx_no_qp = atomic_load_explicit(&pr->rx_no_qp, memory_order_relaxed);
	s->iterations = atomic_load_explicit(&pr->epoch, memory_order_relaxed);
	s->rx_calls_thread = atomic_load_explicit(&pr->rx_calls_thread, memory_order_relaxed);
	s->rx_calls_app = atomic_load_explicit(&pr->rx_calls_app, memory_order_relaxed);
	s->wakeups = atomic_load_explicit(&pr->wakeups, memory_order_relaxed);
	s->muted = atomic_load_explicit(&pr->muted, memory_order_relaxed);
	s->asleep = atomic_load_explicit(&pr->sleep_until, memory_order_relaxed) != 0;
	s->bad_pkey = atomic_load_explicit(&ctx->bad_pkey_cntr, memory_order_relaxed);

	/* The endpoints' receive statistics are plain fields of whoever receives, i.e.
	 * written under work_lock; ports[] under qp_lock (nested, the thread's order). */
	pthread_mutex_lock(&pr->work_lock);
	pthread_mutex_lock(&ctx->qp_lock);
	s->nep = ctx->nports;
	for (unsigned i = 0; i < ctx->nports; i++) {
		struct swv_endpoint *ep = &ctx->ports[i]->ep;
		struct ep_snap *e = &s->ep[i];
		e->port = ep->port;
		e->udp_tx = atomic_load_explicit(&ep->udp_tx, memory_order_relaxed);
		e->gso_segs = atomic_load_explicit(&ep->tx_gso_segs, memory_order_relaxed);
		e->rx_truncated = ep->rx_truncated;
		e->rx_gro_excess = ep->rx_gro_excess;
		e->shm = ep->shm != NULL;
		if (ep->shm)
			swv_shm_get_stats(ep->shm, &e->shm_st);
	}
	pthread_mutex_unlock(&ctx->qp_lock);
	pthread_mutex_unlock(&pr->work_lock);

	/* QPs: qp_lock keeps each listed QP alive (destroy unlinks it under qp_lock
	 * first); each qp->lock is held only for the copy. */
	pthread_mutex_lock(&ctx->qp_lock);
	swv_list_for_each(pos, &ctx->qp_list)
	{
		struct swv_qp *qp = swv_list_entry(pos, struct swv_qp, ctx_entry);
		if (s->nqp == qcap) {
			size_t n = qcap ? qcap * 2 : 16;
			struct qp_snap *p = realloc(s->qp, n * sizeof(*p));
			if (!p) {
				s->oom = true;
				break;
			}
			s->qp = p;
			qcap = n;
		}
		struct qp_snap *q = &s->qp[s->nqp++];
		pthread_mutex_lock(&qp->lock);
		snap_qp(q, qp);
		struct swv_cq *scq = qp->scq;
		/* an XRC INI QP's rcq is its scq inside; it has no receive CQ */
		struct swv_cq *rcq = qp->xrc == SWV_XRC_INI ? NULL : qp->rcq;
		pthread_mutex_unlock(&qp->lock);
		/* a CQ outlives the QPs that use it (destroy is EBUSY while they do) */
		q->scq = cq_index(s, &ccap, scq);
		q->rcq = cq_index(s, &ccap, rcq);
	}
	pthread_mutex_unlock(&ctx->qp_lock);

	pthread_mutex_lock(&ctx->cntr_lock);
	size_t kcap = 0;
	swv_list_for_each(pos, &ctx->cntr_list)
	{
		struct swv_comp_cntr *c = swv_list_entry(pos, struct swv_comp_cntr, ctx_entry);
		if (s->ncntr == kcap) {
			size_t n = kcap ? kcap * 2 : 8;
			struct cntr_snap *p = realloc(s->cntr, n * sizeof(*p));
			if (!p) {
				s->oom = true;
				break;
			}
			s->cntr = p;
			kcap = n;
		}
		struct cntr_snap *cs = &s->cntr[s->ncntr++];
		cs->handle = c->ibcntr.handle;
		cs->type = c->type;
		cs->comp = swv_comp_cntr_load(c, false);
		cs->err = swv_comp_cntr_load(c, true);
		cs->max_value = c->max_value;
		cs->nattach = atomic_load_explicit(&c->nattach, memory_order_relaxed);
		cs->app_memory = c->app_memory;
	}
	pthread_mutex_unlock(&ctx->cntr_lock);
}

static void free_ctx_snap(struct ctx_snap *s)
{
	free(s->qp);
	free(s->cq);
	free(s->cntr);
}

/* ---- names ---- */
/* A CQ index as JSON: the number, or null for none. */
static const char *cq_ref(char buf[12], unsigned i)
{
	if (i == NO_CQ)
		return "null";
	snprintf(buf, 12, "%u", i);
	return buf;
}

static const char *qp_type_str(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC:
		return "RC";
	case IBV_QPT_UC:
		return "UC";
	case IBV_QPT_UD:
		return "UD";
	case IBV_QPT_XRC_SEND:
		return "XRC_INI";
	case IBV_QPT_XRC_RECV:
		return "XRC_TGT";
	default:
		return "OTHER";
	}
}

static const char *qp_state_str(enum ibv_qp_state st)
{
	static const char *const n[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
	return (unsigned)st < SWV_ARRAY_SIZE(n) ? n[st] : "UNKNOWN";
}

static const char *const slot_name[SWV_CNTR_NSLOTS] = {
    "SEND",   "RECV",	      "RDMA_READ", "REMOTE_RDMA_READ", "RDMA_WRITE", "REMOTE_RDMA_WRITE",
    "ATOMIC", "REMOTE_ATOMIC"};

static uint32_t slot_bit(unsigned s)
{
	return s < 6		      ? 1u << s
	       : s == SWV_CNTR_ATOMIC ? SWV_CNTR_OP_EXT_ATOMIC
				      : SWV_CNTR_OP_EXT_REMOTE_AT;
}

static uint16_t lid_of(const struct swv_dev_config *cfg)
{
	uint32_t host = ntohl(cfg->addr.s_addr);
	uint32_t mask = cfg->prefix_len >= 32 ? 0 : 0xffffffffu >> cfg->prefix_len;
	return (uint16_t)(host & mask);
}

/* Packet totals of a context: the per-QP counters summed over the QPs open now
 * (a destroyed QP takes its counts with it) plus the context's own. */
struct port_tot {
	uint64_t tx_pkts, req_pkts, retransmits, timeouts, seq_naks_rx, rnr_naks_rx, rnr_naks_tx;
	uint64_t seq_naks_tx, err_naks_tx, psn_dropped, duplicates, src_state, auth_bad;
	uint64_t remote_refused, remote_faults, truncated, gro_excess, shm_corrupt, udp_tx;
	uint64_t shm_tx, shm_rx, direct_tx;
};

static void port_totals(const struct ctx_snap *s, struct port_tot *t)
{
	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < s->nqp; i++) {
		const struct qp_snap *q = &s->qp[i];
		t->req_pkts += q->pkts;
		t->retransmits += q->retries + q->probes + q->sel_resends + q->holes_resent;
		t->timeouts += q->timeouts;
		t->seq_naks_rx += q->seq_naks_rx;
		t->rnr_naks_rx += q->rnr_naks_rx;
		t->rnr_naks_tx += q->resp.rnr_naks;
		t->seq_naks_tx += q->resp.seq_naks;
		t->err_naks_tx += q->resp.err_naks;
		t->psn_dropped += q->resp.dropped + q->resp.rob_dups + q->resp.rob_full;
		t->duplicates += q->resp.duplicates;
		t->src_state += q->rx_dropped;
		t->auth_bad += q->auth_bad;
		t->remote_refused += q->resp.remote_refused;
		t->remote_faults += q->resp.remote_faults;
	}
	for (unsigned i = 0; i < s->nep; i++) {
		t->truncated += s->ep[i].rx_truncated;
		t->gro_excess += s->ep[i].rx_gro_excess;
		t->udp_tx += s->ep[i].udp_tx + s->ep[i].gso_segs;
		t->shm_corrupt += s->ep[i].shm_st.rx_corrupt;
		t->shm_tx += s->ep[i].shm_st.tx_pkts;
		t->shm_rx += s->ep[i].shm_st.rx_pkts;
		t->direct_tx += s->ep[i].shm_st.direct_tx;
	}
	t->tx_pkts = t->udp_tx + t->shm_tx;
}

#define U(x) ((unsigned long long)(x))

static void json_ctx(struct sbuf *b, const struct ctx_snap *s)
{
	char ip[INET_ADDRSTRLEN];
	struct port_tot t;

	port_totals(s, &t);
	inet_ntop(AF_INET, &s->cfg->addr, ip, sizeof(ip));
	sb_printf(b, "{\"device\":\"");
	sb_json_str(b, s->cfg->name);
	sb_printf(b,
		  "\",\"dev_index\":%u,\"addr\":\"%s\",\"link_layer\":\"%s\","
		  "\"lid\":%u,\"mtu\":%u,\"port\":{\"num\":1,\"state\":\"%s\",",
		  s->dev_index, ip, s->cfg->link == SWV_LINK_ETH ? "Ethernet" : "InfiniBand",
		  s->cfg->link == SWV_LINK_ETH ? 0u : lid_of(s->cfg), s->cfg->mtu_bytes,
		  swv_netdev_flags_active(s->netdev_flags) ? "ACTIVE" : "DOWN");
	sb_printf(b,
		  "\"rx_packets\":%llu,\"tx_packets\":%llu,\"tx_udp\":%llu,"
		  "\"tx_shm\":%llu,\"rx_shm\":%llu,\"tx_direct\":%llu,\"requester_packets\":%llu,"
		  "\"retransmits\":%llu,"
		  "\"ack_timeouts\":%llu,\"seq_naks_received\":%llu,\"rnr_naks_received\":%llu,"
		  "\"seq_naks_sent\":%llu,\"rnr_naks_sent\":%llu,\"err_naks_sent\":%llu,"
		  "\"duplicates\":%llu,\"remote_refused\":%llu,\"remote_faults\":%llu,",
		  U(s->rx_packets), U(t.tx_pkts), U(t.udp_tx), U(t.shm_tx), U(t.shm_rx),
		  U(t.direct_tx), U(t.req_pkts), U(t.retransmits), U(t.timeouts), U(t.seq_naks_rx),
		  U(t.rnr_naks_rx), U(t.seq_naks_tx), U(t.rnr_naks_tx), U(t.err_naks_tx),
		  U(t.duplicates), U(t.remote_refused), U(t.remote_faults));
	sb_printf(
	    b,
	    "\"drops\":{\"bad_crc\":%llu,\"malformed\":%llu,\"unknown_qp\":%llu,"
	    "\"bad_pkey\":%llu,\"source_or_state\":%llu,\"bad_mac\":%llu,"
	    "\"psn_window\":%llu,\"truncated\":%llu,\"gro_excess\":%llu,\"shm_corrupt\":%llu}},",
	    U(s->rx_bad_crc), U(s->rx_malformed), U(s->rx_no_qp), U(s->bad_pkey), U(t.src_state),
	    U(t.auth_bad), U(t.psn_dropped), U(t.truncated), U(t.gro_excess), U(t.shm_corrupt));
	sb_printf(b,
		  "\"progress\":{\"iterations\":%llu,\"rx_calls_thread\":%llu,"
		  "\"rx_calls_app\":%llu,\"wakeups\":%llu,\"muted\":%s,\"asleep\":%s},"
		  "\"sockets\":[",
		  U(s->iterations), U(s->rx_calls_thread), U(s->rx_calls_app), U(s->wakeups),
		  s->muted ? "true" : "false", s->asleep ? "true" : "false");
	for (unsigned i = 0; i < s->nep; i++) {
		const struct ep_snap *e = &s->ep[i];
		sb_printf(b, "%s{\"udp_port\":%u,\"intra_host_link\":%s", i ? "," : "", e->port,
			  e->shm ? "true" : "false");
		if (e->shm)
			sb_printf(b, ",\"inbox_backlog\":%llu,\"inbox_armed\":%s",
				  U(e->shm_st.rx_backlog), e->shm_st.armed ? "true" : "false");
		sb_printf(b, "}");
	}
	sb_printf(b, "],\"qps\":[");
	for (size_t i = 0; i < s->nqp; i++) {
		const struct qp_snap *q = &s->qp[i];
		char pip[INET_ADDRSTRLEN] = "", scqs[12], rcqs[12];
		bool conn = q->type != IBV_QPT_UD && q->peer.sin_family == AF_INET;
		if (conn)
			inet_ntop(AF_INET, &q->peer.sin_addr, pip, sizeof(pip));
		sb_printf(b, "%s{\"qpn\":%u,\"type\":\"%s\",\"state\":\"%s\",", i ? "," : "",
			  q->qpn, qp_type_str(q->type), qp_state_str(q->state));
		if (conn)
			sb_printf(b, "\"peer\":{\"addr\":\"%s\",\"udp_port\":%u,\"qpn\":%u},", pip,
				  ntohs(q->peer.sin_port), q->dest_qpn);
		else
			sb_printf(b, "\"peer\":null,");
		sb_printf(b,
			  "\"sq_psn\":%u,\"una_psn\":%u,\"expected_psn\":%u,\"path_mtu\":%u,"
			  "\"send_outstanding\":%u,\"max_send_wr\":%u,\"recv_posted\":%u,"
			  "\"max_recv_wr\":%u,\"srq\":%s,\"send_cq\":%s,\"recv_cq\":%s,"
			  "\"retry_cnt\":%u,\"retries_left\":%u,\"rnr_retry\":%u,\"rnr_retries_"
			  "left\":%u,",
			  q->sq_psn, q->una_psn, q->epsn, q->mtu, q->sq_used, q->sq_max, q->rq_used,
			  q->rq_max, q->srq ? "true" : "false", cq_ref(scqs, q->scq),
			  cq_ref(rcqs, q->rcq), q->retry_cnt, q->retry_left, q->rnr_retry,
			  q->rnr_left);
		sb_printf(b,
			  "\"tx_packets\":%llu,\"retransmits\":%llu,\"retries\":%llu,\"ack_"
			  "timeouts\":%llu,"
			  "\"probes\":%llu,\"selective_resends\":%llu,\"seq_naks_received\":%llu,"
			  "\"rnr_naks_received\":%llu,\"sack_naks_received\":%llu,"
			  "\"holes_resent\":%llu,",
			  U(q->pkts), U(q->retries + q->probes + q->sel_resends + q->holes_resent),
			  U(q->retries), U(q->timeouts), U(q->probes), U(q->sel_resends),
			  U(q->seq_naks_rx), U(q->rnr_naks_rx), U(q->sack_naks_rx),
			  U(q->holes_resent));
		sb_printf(
		    b,
		    "\"responder\":{\"executed\":%llu,\"duplicates\":%llu,\"read_replays\":%llu,"
		    "\"atomic_replays\":%llu,\"seq_naks_sent\":%llu,\"rnr_naks_sent\":%llu,"
		    "\"err_naks_sent\":%llu,\"dropped\":%llu,\"reorder_kept\":%llu,"
		    "\"reorder_drained\":%llu,\"sack_naks_sent\":%llu,\"sack_acks_sent\":%llu,"
		    "\"responses_held\":%llu},"
		    "\"remote_refused\":%llu,\"remote_faults\":%llu,"
		    "\"rx_dropped\":%llu,\"rx_bad_pkey\":%llu,\"rx_bad_mac\":%llu,\"counters\":{",
		    U(q->resp.executed), U(q->resp.duplicates), U(q->resp.read_replays),
		    U(q->resp.atomic_replays), U(q->resp.seq_naks), U(q->resp.rnr_naks),
		    U(q->resp.err_naks), U(q->resp.dropped + q->resp.rob_dups + q->resp.rob_full),
		    U(q->resp.rob_kept), U(q->resp.rob_drained), U(q->resp.sack_naks),
		    U(q->resp.sack_acks), U(q->resp.tx_held), U(q->resp.remote_refused),
		    U(q->resp.remote_faults),
		    U(q->rx_dropped), U(q->rx_bad_pkey), U(q->auth_bad));
		bool first = true;
		for (unsigned k = 0; k < SWV_CNTR_NSLOTS; k++) {
			if (q->cntr[k] == NO_CNTR)
				continue;
			sb_printf(b, "%s\"%s\":%u", first ? "" : ",", slot_name[k], q->cntr[k]);
			first = false;
		}
		sb_printf(b, "}}");
	}
	sb_printf(b, "],\"cqs\":[");
	for (size_t i = 0; i < s->ncq; i++)
		sb_printf(b, "%s{\"id\":%zu,\"cqe\":%u,\"used\":%u}", i ? "," : "", i, s->cq[i].cqe,
			  s->cq[i].used);
	sb_printf(b, "],\"counters\":[");
	for (size_t i = 0; i < s->ncntr; i++) {
		const struct cntr_snap *c = &s->cntr[i];
		uint32_t mask = 0;
		sb_printf(b,
			  "%s{\"handle\":%u,\"type\":\"%s\",\"completions\":%llu,\"errors\":%llu,"
			  "\"max_value\":%llu,\"app_memory\":%s,\"attached\":%u,\"qps\":[",
			  i ? "," : "", c->handle,
			  c->type == IBV_COMP_CNTR_TYPE_BYTES ? "BYTES" : "WRS", U(c->comp),
			  U(c->err), U(c->max_value), c->app_memory ? "true" : "false", c->nattach);
		bool first = true;
		for (size_t j = 0; j < s->nqp; j++) {
			uint32_t qmask = 0;
			for (unsigned k = 0; k < SWV_CNTR_NSLOTS; k++)
				if (s->qp[j].cntr[k] == c->handle)
					qmask |= slot_bit(k);
			if (!qmask)
				continue;
			mask |= qmask;
			sb_printf(b, "%s{\"qpn\":%u,\"op_mask\":%u}", first ? "" : ",",
				  s->qp[j].qpn, qmask);
			first = false;
		}
		sb_printf(b, "],\"op_mask\":%u,\"ops\":[", mask);
		first = true;
		for (unsigned k = 0; k < SWV_CNTR_NSLOTS; k++) {
			if (!(mask & slot_bit(k)))
				continue;
			sb_printf(b, "%s\"%s\"", first ? "" : ",", slot_name[k]);
			first = false;
		}
		sb_printf(b, "]}");
	}
	sb_printf(b, "]}");
}

static void text_ctx(struct sbuf *b, const struct ctx_snap *s)
{
	char ip[INET_ADDRSTRLEN];
	struct port_tot t;

	port_totals(s, &t);
	inet_ntop(AF_INET, &s->cfg->addr, ip, sizeof(ip));
	sb_printf(b, "  context: device %s (%s, %s), port 1 %s, mtu %u\n", s->cfg->name, ip,
		  s->cfg->link == SWV_LINK_ETH ? "Ethernet" : "InfiniBand",
		  swv_netdev_flags_active(s->netdev_flags) ? "ACTIVE" : "DOWN", s->cfg->mtu_bytes);
	sb_printf(b,
		  "    packets: rx %llu tx %llu retransmitted %llu timeouts %llu naks rx seq %llu "
		  "rnr %llu / tx seq %llu rnr %llu err %llu, remote refused %llu\n",
		  U(s->rx_packets), U(t.tx_pkts), U(t.retransmits), U(t.timeouts), U(t.seq_naks_rx),
		  U(t.rnr_naks_rx), U(t.seq_naks_tx), U(t.rnr_naks_tx), U(t.err_naks_tx),
		  U(t.remote_refused));
	sb_printf(
	    b,
	    "    dropped: crc %llu malformed %llu unknown-qp %llu pkey %llu source/state %llu "
	    "mac %llu psn-window %llu duplicate %llu truncated %llu\n",
	    U(s->rx_bad_crc), U(s->rx_malformed), U(s->rx_no_qp), U(s->bad_pkey), U(t.src_state),
	    U(t.auth_bad), U(t.psn_dropped), U(t.duplicates), U(t.truncated + t.gro_excess));
	sb_printf(b, "    progress thread: %s%s\n", s->asleep ? "asleep" : "running",
		  s->muted ? ", muted (an application thread receives)" : "");
	for (unsigned i = 0; i < s->nep; i++)
		if (s->ep[i].shm)
			sb_printf(b, "    inbox of port %u: %llu bytes not yet taken, %s\n",
				  s->ep[i].port, U(s->ep[i].shm_st.rx_backlog),
				  s->ep[i].shm_st.armed ? "armed" : "not armed");
	if (s->nqp) {
		sb_printf(b, "    %-8s %-4s %-5s %-21s %-8s %-8s %-8s %5s %5s %7s %6s %6s %7s\n",
			  "QPN", "TYPE", "STATE", "PEER", "PEER-QPN", "SQ-PSN", "EXP-PSN", "SQ",
			  "RQ", "RETRANS", "RNR", "REFUSE", "CNTRS");
		for (size_t i = 0; i < s->nqp; i++) {
			const struct qp_snap *q = &s->qp[i];
			char peer[40] = "-", pqpn[16] = "-", cn[64] = "";
			if (q->type != IBV_QPT_UD && q->peer.sin_family == AF_INET) {
				char pip[INET_ADDRSTRLEN];
				inet_ntop(AF_INET, &q->peer.sin_addr, pip, sizeof(pip));
				snprintf(peer, sizeof(peer), "%s:%u", pip, ntohs(q->peer.sin_port));
				snprintf(pqpn, sizeof(pqpn), "%#x", q->dest_qpn);
			}
			size_t cl = 0;
			for (unsigned k = 0; k < SWV_CNTR_NSLOTS && cl < sizeof(cn) - 12; k++)
				if (q->cntr[k] != NO_CNTR)
					cl += (size_t)snprintf(cn + cl, sizeof(cn) - cl, "%s%u",
							       cl ? "," : "", q->cntr[k]);
			sb_printf(b,
				  "    %-#8x %-4s %-5s %-21s %-8s %-8u %-8u %5u %5u %7llu %6llu "
				  "%6llu %7s\n",
				  q->qpn, qp_type_str(q->type), qp_state_str(q->state), peer, pqpn,
				  q->sq_psn, q->epsn, q->sq_used, q->rq_used,
				  U(q->retries + q->probes + q->sel_resends + q->holes_resent),
				  U(q->rnr_naks_rx + q->resp.rnr_naks), U(q->resp.remote_refused),
				  cl ? cn : "-");
		}
	}
	for (size_t i = 0; i < s->ncq; i++)
		sb_printf(b, "    cq %zu: %u/%u used\n", i, s->cq[i].used, s->cq[i].cqe);
	for (size_t i = 0; i < s->ncntr; i++) {
		const struct cntr_snap *c = &s->cntr[i];
		char ops[160] = "";
		size_t ol = 0;
		for (unsigned k = 0; k < SWV_CNTR_NSLOTS; k++) {
			bool on = false;
			for (size_t j = 0; j < s->nqp && !on; j++)
				on = s->qp[j].cntr[k] == c->handle;
			if (on)
				ol += (size_t)snprintf(ops + ol, sizeof(ops) - ol, "%s%s",
						       ol ? "|" : "", slot_name[k]);
		}
		sb_printf(b, "    counter %u (%s): completions %llu errors %llu, ops %s\n",
			  c->handle, c->type == IBV_COMP_CNTR_TYPE_BYTES ? "bytes" : "wrs",
			  U(c->comp), U(c->err), ol ? ops : "-");
	}
}

static const char *comm_name(char *buf, size_t len)
{
	FILE *f = fopen("/proc/self/comm", "re");
	buf[0] = 0;
	if (f) {
		if (fgets(buf, (int)len, f))
			buf[strcspn(buf, "\n")] = 0;
		fclose(f);
	}
	/* the process name is the application's: keep it JSON- and terminal-safe */
	for (char *p = buf; *p; p++)
		if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20 ||
		    (unsigned char)*p >= 0x7f)
			*p = '?';
	return buf;
}

char *swv_stat_snapshot(int json, size_t *len)
{
	struct sbuf b = {0};
	char comm[64];

	comm_name(comm, sizeof(comm));
	if (json)
		sb_printf(&b, "{\"pid\":%d,\"uid\":%u,\"comm\":\"%s\",\"contexts\":[",
			  (int)getpid(), (unsigned)getuid(), comm);
	else
		sb_printf(&b, "process %d (%s)\n", (int)getpid(), comm);
	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < nreg; i++) {
		struct ctx_snap s;
		snap_ctx(&s, reg[i]);
		if (json) {
			sb_printf(&b, "%s", i ? "," : "");
			json_ctx(&b, &s);
		} else {
			text_ctx(&b, &s);
		}
		b.oom |= s.oom;
		free_ctx_snap(&s);
	}
	pthread_mutex_unlock(&reg_lock);
	if (json)
		sb_printf(&b, "]}\n");
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	*len = b.len;
	return b.p;
}

/* ---- the server ---- */
static void serve(int fd)
{
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	char req[16];
	size_t got = 0;

	/* An abstract socket has no file permissions: the peer's uid is the check. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) || cr.uid != geteuid())
		return;
	/* A client that says nothing or stops reading cannot hold the thread for long. */
	struct timeval tv = {.tv_sec = 2};
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (got < sizeof(req) - 1) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 2000) <= 0)
			return;
		ssize_t n = read(fd, req + got, sizeof(req) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		if (memchr(req, '\n', got))
			break;
	}
	req[got] = 0;
	req[strcspn(req, "\r\n")] = 0;
	int json = !strcmp(req, "json");
	if (!json && strcmp(req, "text"))
		return;
	size_t len = 0;
	char *out = swv_stat_snapshot(json, &len);
	for (size_t off = 0; out && off < len;) {
		ssize_t n = send(fd, out + off, len - off, MSG_NOSIGNAL);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	free(out);
}

struct srv_args {
	int lfd, stopfd;
};

static void *srv_main(void *arg)
{
	struct srv_args a = *(struct srv_args *)arg;
	free(arg);
	for (;;) {
		struct pollfd p[2] = {{.fd = a.lfd, .events = POLLIN},
				      {.fd = a.stopfd, .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		int fd = accept4(a.lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		serve(fd);
		close(fd);
	}
	return NULL;
}

/* A forked child has no server thread and must not keep the parent's socket open (it
 * would answer for nobody); the registry's contexts are the parent's (fork.c). */
static void stat_atfork_child(void)
{
	pthread_mutex_init(&srv_lock, NULL);
	pthread_mutex_init(&reg_lock, NULL);
	if (srv_listen >= 0)
		close(srv_listen);
	if (srv_stopfd >= 0)
		close(srv_stopfd);
	srv_listen = srv_stopfd = -1;
	srv_running = false;
	free(reg);
	reg = NULL;
	nreg = reg_cap = 0;
}

static void srv_start(void)
{
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct srv_args *a = malloc(sizeof(*a));

	if (lfd < 0 || efd < 0 || !a)
		goto fail;
	/* Abstract name: nothing to clean up when the process dies. */
	int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "swverbs-stat.%u.%d",
			 (unsigned)geteuid(), (int)getpid());
	socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	if (bind(lfd, (struct sockaddr *)&sa, sl) || listen(lfd, 8)) {
		swv_log(SWV_LOG_WARN, "swverbs-stat socket: %s (not observable)", strerror(errno));
		goto fail;
	}
	a->lfd = lfd;
	a->stopfd = efd;
	/* The thread takes no signal meant for the application (the fault signals stay
	 * deliverable: they are synchronous). */
	sigset_t all, old;
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&srv_thread, NULL, srv_main, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		swv_log(SWV_LOG_WARN, "swverbs-stat thread: %s (not observable)", strerror(rc));
		goto fail;
	}
	pthread_setname_np(srv_thread, "swv-stat");
	srv_listen = lfd;
	srv_stopfd = efd;
	srv_running = true;
	return;
fail:
	free(a);
	if (lfd >= 0)
		close(lfd);
	if (efd >= 0)
		close(efd);
}

static void srv_stop(void)
{
	uint64_t one = 1;
	if (write(srv_stopfd, &one, sizeof(one)) < 0)
		swv_log(SWV_LOG_WARN, "swverbs-stat stop: %s", strerror(errno));
	pthread_join(srv_thread, NULL);
	close(srv_listen);
	close(srv_stopfd);
	srv_listen = srv_stopfd = -1;
	srv_running = false;
}

void swv_stat_register(struct swv_context *ctx)
{
	pthread_mutex_lock(&srv_lock);
	if (stat_off < 0) {
		const char *e = getenv("SWVERBS_STAT");
		stat_off = e && !strcmp(e, "0");
	}
	if (stat_off) {
		pthread_mutex_unlock(&srv_lock);
		return;
	}
	if (!atfork_done) {
		pthread_atfork(NULL, NULL, stat_atfork_child);
		atfork_done = true;
	}
	pthread_mutex_lock(&reg_lock);
	if (nreg == reg_cap) {
		size_t cap = reg_cap ? reg_cap * 2 : 4;
		struct swv_context **n = realloc(reg, cap * sizeof(*n));
		if (n) {
			reg = n;
			reg_cap = cap;
		}
	}
	/* Out of memory: this context is simply not shown. */
	if (nreg < reg_cap)
		reg[nreg++] = ctx;
	pthread_mutex_unlock(&reg_lock);
	if (!srv_running && nreg)
		srv_start();
	pthread_mutex_unlock(&srv_lock);
}

void swv_stat_unregister(struct swv_context *ctx)
{
	pthread_mutex_lock(&srv_lock);
	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < nreg; i++)
		if (reg[i] == ctx) {
			reg[i] = reg[--nreg];
			break;
		}
	size_t left = nreg;
	if (!left) {
		free(reg);
		reg = NULL;
		reg_cap = 0;
	}
	pthread_mutex_unlock(&reg_lock);
	/* The last context gone: no thread outlives the devices (nor a library unload). */
	if (!left && srv_running)
		srv_stop();
	pthread_mutex_unlock(&srv_lock);
}
