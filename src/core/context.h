/*
 * Device context (ibv_open_device). Owner: core.
 * Owns the UDP endpoints, the QP-number table, the MR table, the progress thread,
 * the async event queue, the netdev watch (port state) and the completion counters
 * created on it.
 */
#ifndef SWV_CORE_CONTEXT_H
#define SWV_CORE_CONTEXT_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/async.h"
#include "core/device.h"
#include "core/limits.h"
#include "core/mcast.h"
#include "core/mr.h"
#include "net/addr.h"
#include "link/endpoint.h"
#include "net/netdev.h"
#include "progress/progress.h"
#include "util/list.h"

struct swv_qp;
struct swv_fault;

/*
 * One UDP socket and the QPs whose QPN carries its port (QPN = port << 8 | slot).
 * Every slot of every port is usable: ports are never below 1024 so QPN 0 and 1 (the
 * special QPs) cannot occur, and a socket that happens to get port 65535 is replaced
 * so the multicast QPN 0xffffff is never handed out.
 */
struct swv_qp_port {
	struct swv_endpoint ep;
	struct swv_qp *_Atomic slot[SWV_QPN_SLOTS]; /* written under qp_lock, read lock-free */
	unsigned next;            /* under qp_lock: next slot to try, so QPNs are not reused at once */
	struct swv_fault *fault;  /* this socket's injector (NULL = off); owned here */
};

/*
 * Import (ibv_import_device). A context opened by ibv_open_device is a primary: it
 * owns all the state below. ibv_import_device makes an importer, a swv_context of
 * which only vctx (and primary, refs_entry, closed) is used: to_swv_ctx() of its
 * ibv_context answers the primary, so every object made or found through either
 * context is the primary's. Ownership: the primary owns its importers (on imports,
 * under the registry lock in core/context.c) and frees them with itself; refs counts
 * the ibv_contexts not yet closed (the primary's own and each importer's), and the
 * last ibv_close_device of any of them tears the primary down, once. ident_fd (a
 * memfd) is what a cmd_fd's fstat identity maps back to; the primary holds it open
 * until it is freed, so its inode cannot be reused while it is registered.
 */
struct swv_context {
	struct swv_context *primary;  /* importer: the context it shares; NULL in a primary */
	bool closed;		      /* ibv_close_device was called on this ibv_context */
	unsigned refs;		      /* primary: open ibv_contexts on it (registry lock) */
	int ident_fd;		      /* primary: the memfd behind every cmd_fd, or -1 */
	struct swv_list imports;      /* primary: its importers (registry lock) */
	struct swv_list import_entry; /* primary: in the registry; importer: in imports */

	struct swv_device *dev;
	const struct swv_dev_config *cfg;
	struct swv_fault *fault; /* = ports[0]->fault (not a separate owner), for tools/tests */

	pthread_mutex_t qp_lock; /* protects ports[], nports, slot writes, qp_list */
	struct swv_qp_port *ports[SWV_MAX_QP_PORTS];
	unsigned nports;
	struct swv_list qp_list; /* all QPs, for timer scans by the progress thread */

	struct swv_mr_table mrs;
	struct swv_progress progress;

	/* UD multicast groups joined (core/mcast.h), under mcast_lock */
	pthread_mutex_t mcast_lock;
	struct swv_mcast_grp *mcast[SWV_MCAST_MAX_GRP];

	struct swv_async_queue async; /* behind ibctx.async_fd (core/async.h) */
	_Atomic unsigned nsrq;        /* SRQs open on this context (max_srq) */
	_Atomic uint64_t dm_used;     /* bytes of device memory allocated (core/dm.h) */
	pthread_mutex_t dm_lock;      /* protects dm_list, next_dm_handle */
	struct swv_list dm_list;      /* live DMs: what close frees if the application did not */
	uint32_t next_dm_handle;      /* ibv_dm.handle of the next DM (ibv_import_dm) */
	/* packets its QPs dropped for a P_Key mismatch: ibv_query_port's bad_pkey_cntr */
	_Atomic uint32_t bad_pkey_cntr;
	/* The port's state: the interface that carries cfg->addr, watched by the
	 * progress thread, read by ibv_query_port (rules in net/netdev.h). */
	struct swv_netdev netdev;

	/* PDs by handle, for ibv_import_pd: every ibv_alloc_pd PD until its dealloc;
	 * the ones left at close are freed with the context */
	pthread_mutex_t pd_lock; /* protects pd_list, next_pd_handle */
	struct swv_list pd_list;
	uint32_t next_pd_handle;

	pthread_mutex_t cntr_lock; /* protects cntr_list, ncntrs, next_cntr_handle */
	struct swv_list cntr_list;
	uint32_t ncntrs, next_cntr_handle;

	/* Triggered operations (rules in core/trig.h): trig_lock over every trigger list
	 * and the ready queue; trig_run_lock held by the queue's one runner; trig_nready
	 * counts triggers queued or being run, for a lock-free "nothing to run". */
	pthread_mutex_t trig_lock, trig_run_lock;
	struct swv_list trig_ready;
	_Atomic uint32_t trig_nready;
	uint64_t trig_seq;

	/* Must be last: ibv_context is the last member of verbs_context, and programs
	 * reach the verbs_context by subtracting from the ibv_context pointer. */
	struct verbs_context vctx;
};

/* The swv_context this very ibv_context is (a primary or an importer). */
static inline struct swv_context *swv_ctx_raw(struct ibv_context *ibctx)
{
	return swv_container_of(ibctx, struct swv_context, vctx.context);
}

/* The context whose state ibctx uses: an importer's primary, else itself. */
static inline struct swv_context *to_swv_ctx(struct ibv_context *ibctx)
{
	struct swv_context *c = swv_ctx_raw(ibctx);
	return c->primary ? c->primary : c;
}

/* The P_Key at index of the port's table (host order), or 0 -- the invalid P_Key,
 * which matches nothing -- beyond its end. */
static inline uint16_t swv_ctx_pkey(const struct swv_context *ctx, unsigned index)
{
	return index < ctx->cfg->npkeys ? ctx->cfg->pkeys[index] : 0;
}

/* Create / destroy a context for dev (ibv_open_device / ibv_close_device). Its
 * progress loop runs rx_ops (the transport's receive story, which the api layer passes
 * in: core does not reach up to it) on the context. Open returns NULL + errno. Close
 * stops the progress thread first, then releases the netdev watch, counters, sockets,
 * leftover MRs and the async event queue. */
struct swv_context *swv_ctx_open(struct swv_device *dev, const struct swv_progress_ops *rx_ops);
/* Makes ctx importable (ibv_import_device of its cmd_fd). An importer copies the
 * context's verbs_context, so this comes after its ops are set, never in open. */
void swv_ctx_publish(struct swv_context *ctx);
void swv_ctx_close(struct swv_context *ctx);
/* ibv_close_device of one ibv_context (a primary or an importer): closes its cmd_fd;
 * when it was the last open one of its primary, *last is the primary, for the caller
 * to close (swv_ctx_close frees it with its importers), else NULL. 0, or EINVAL when
 * this ibv_context was closed already. */
int swv_ctx_release(struct swv_context *raw, struct swv_context **last);
/* ibv_import_device: a new importer of the primary whose cmd_fd cmd_fd is (a dup of);
 * it owns cmd_fd from then on. NULL + errno: EINVAL for an fd fstat refuses,
 * EOPNOTSUPP for an fd that is no cmd_fd of this process's contexts (another
 * process's, or another file), ENOMEM. */
struct swv_context *swv_ctx_import(int cmd_fd);

/* Allocate a QPN (and its slot) for qp; may open a new UDP socket. Returns 0 or
 * ENOMEM. The QP becomes visible to the progress thread immediately: the slot is
 * published and qp->ctx_entry is linked into ctx->qp_list here, so the caller must
 * have initialised everything swv_qp_rx / swv_qp_timer read (qp->lock, state, and
 * timer_deadline = 0) before calling. */
int swv_ctx_qpn_alloc(struct swv_context *ctx, struct swv_qp *qp, uint32_t *qpn,
		      struct swv_endpoint **ep);
/* Remove qp from the table and qp_list, then wait (swv_progress_sync) until the
 * progress thread no longer uses it. Call without qp->lock held. */
void swv_ctx_qpn_free(struct swv_context *ctx, struct swv_qp *qp, uint32_t qpn);
/* Progress thread: QP addressed by qpn on endpoint ep, or NULL. */
struct swv_qp *swv_ctx_qp_lookup(struct swv_context *ctx, struct swv_endpoint *ep, uint32_t qpn);

#endif
