/*
 * Device context: construction/destruction and the QP-number table.
 *
 * Threading: ctx->qp_lock serialises QPN allocation/free, port creation and qp_list
 * changes. The progress thread reads port slots lock-free (seq_cst loads) and takes
 * qp_lock only to walk qp_list; swv_ctx_qpn_free pairs its seq_cst slot clear with
 * swv_progress_sync so the QP can be freed once it returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/comp_cntr.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/cq_ex.h"
#include "core/limits.h"
#include "core/mcast.h"
#include "core/dm.h"
#include "core/mr.h"
#include "core/pd.h"
#include "core/qp.h"
#include "core/trig.h"
#include "core/srq.h"
#include "core/xrcd.h"
#include "net/fault.h"
#include "util/log.h"

/* The primaries whose ident_fd can be imported, linked by import_entry. The lock also
 * covers every primary's refs, imports and the closed flags (core/context.h). */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct swv_list registry = {&registry, &registry};

static bool same_file(int a, int b)
{
	struct stat sa, sb;
	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

static bool fault_env_set(void)
{
	const char *s = getenv("SWVERBS_FAULT");
	return s && *s;
}

static void port_free(struct swv_qp_port *p)
{
	swv_ep_close(&p->ep);
	if (p->fault)
		swv_fault_destroy(p->fault);
	free(p);
}

/* The fault injector held a packet (delay/reorder): make sure the progress thread
 * wakes by its release time to call swv_ep_flush_delayed. (Added by net.) */
static void port_hold_kick(void *ctx, uint64_t deadline_ns)
{
	swv_progress_kick(&((struct swv_context *)ctx)->progress, deadline_ns);
}

/* Open one more UDP socket for QPNs. Called with qp_lock held (or before the context
 * is visible). Returns the port or NULL + errno. */
static struct swv_qp_port *port_open(struct swv_context *ctx)
{
	struct swv_qp_port *p = calloc(1, sizeof(*p));
	int rc;
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	errno = 0;
	p->fault = swv_fault_create_from_env();
	if (!p->fault && fault_env_set()) {
		rc = errno ? errno : EINVAL;
		swv_log(SWV_LOG_ERR, "SWVERBS_FAULT is malformed; refusing to open the device");
		free(p);
		errno = rc;
		return NULL;
	}
	rc = swv_ep_open(&p->ep, ctx->cfg->addr, p->fault);
	if (rc == 0 && p->ep.port == 0xffff) {
		/* Port 65535 would make slot 255 the multicast QPN 0xffffff: take another
		 * port while still holding this one, so the kernel cannot hand it back. */
		struct swv_endpoint other;
		rc = swv_ep_open(&other, ctx->cfg->addr, p->fault);
		swv_ep_close(&p->ep);
		if (rc == 0)
			p->ep = other;
	}
	if (rc) {
		swv_log(SWV_LOG_ERR, "%s: cannot open a UDP socket: %s", ctx->cfg->name, strerror(rc));
		if (p->fault)
			swv_fault_destroy(p->fault);
		free(p);
		errno = rc;
		return NULL;
	}
	if (p->fault)
		swv_ep_set_hold_cb(&p->ep, port_hold_kick, ctx);
	else
		(void)swv_ep_attach_shm(&p->ep); /* without an inbox the port is UDP only */
	rc = swv_progress_add_endpoint(&ctx->progress, &p->ep);
	if (rc) {
		port_free(p);
		errno = rc;
		return NULL;
	}
	return p;
}

/* Every port is one receive endpoint of the context's progress loop. */
_Static_assert(SWV_MAX_QP_PORTS <= SWV_PROGRESS_MAX_EPS, "ports beyond the progress loop's");

struct swv_context *swv_ctx_open(struct swv_device *dev, const struct swv_progress_ops *rx_ops)
{
	struct swv_context *ctx = calloc(1, sizeof(*ctx));
	int rc;

	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	ctx->dev = dev;
	ctx->cfg = dev->cfg;
	pthread_mutex_init(&ctx->qp_lock, NULL);
	pthread_mutex_init(&ctx->mcast_lock, NULL);
	swv_list_init(&ctx->qp_list);
	pthread_mutex_init(&ctx->cntr_lock, NULL);
	pthread_mutex_init(&ctx->trig_lock, NULL);
	pthread_mutex_init(&ctx->trig_run_lock, NULL);
	swv_list_init(&ctx->trig_ready);
	swv_list_init(&ctx->cntr_list);
	pthread_mutex_init(&ctx->dm_lock, NULL);
	swv_list_init(&ctx->dm_list);
	pthread_mutex_init(&ctx->pd_lock, NULL);
	swv_list_init(&ctx->pd_list);
	swv_list_init(&ctx->imports);
	swv_list_init(&ctx->import_entry);
	ctx->ident_fd = -1;
	ctx->refs = 1;

	struct ibv_context *ib = &ctx->vctx.context;
	ib->device = &dev->ibdev;
	/* No kernel command channel exists; -1 until the context is up (see below). */
	ib->cmd_fd = -1;
	ib->num_comp_vectors = 1;
	pthread_mutex_init(&ib->mutex, NULL);
	/* Marks the verbs_context as present for the inline wrappers; sz makes every
	 * op in range so a NULL op cleanly reads as "not supported". The ops themselves
	 * are the api layer's table (src/api/context.c), set before the context is
	 * handed to the program. */
	ib->abi_compat = (void *)UINTPTR_MAX;
	ctx->vctx.sz = sizeof(ctx->vctx);

	/* Async events: a queue whose events destroy can withdraw (core/async.h);
	 * async_fd is what programs poll. */
	rc = swv_async_init(&ctx->async, &ib->async_fd);
	if (rc)
		goto err_pipe;

	rc = swv_mr_table_init(&ctx->mrs);
	if (rc)
		goto err_mr;
	/* Port state follows the interface (net/netdev.h); best effort, never fails.
	 * Opened before the progress thread, which watches its socket. */
	swv_netdev_open(&ctx->netdev, ctx->cfg->addr);
	rc = swv_progress_start(&ctx->progress, rx_ops, ctx, ctx->netdev.fd);
	if (rc)
		goto err_progress;
	/* Under qp_lock, which ports[] and nports change under: the progress thread runs
	 * already (the netdev watch can wake it at once). */
	pthread_mutex_lock(&ctx->qp_lock);
	ctx->ports[0] = port_open(ctx);
	if (ctx->ports[0])
		ctx->nports = 1;
	else
		rc = errno;
	pthread_mutex_unlock(&ctx->qp_lock);
	if (!ctx->ports[0])
		goto err_port;
	ctx->fault = ctx->ports[0]->fault;
	/* cmd_fd carries no commands; it names the context: a dup of a memfd of its own,
	 * whose inode ibv_import_device maps back to it (programs dup() cmd_fd before
	 * importing, as pyverbs' test_shared_pd does). Without a memfd the context still
	 * works, with /dev/null (or -1) and nothing to import. */
	ctx->ident_fd = memfd_create("swverbs-context", MFD_CLOEXEC);
	if (ctx->ident_fd >= 0)
		ib->cmd_fd = fcntl(ctx->ident_fd, F_DUPFD_CLOEXEC, 0);
	else
		ib->cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	/* Not importable yet: swv_ctx_publish, once the api layer set the ops. */
	return ctx;

err_port:
	swv_progress_stop(&ctx->progress);
err_progress:
	swv_netdev_close(&ctx->netdev);
	swv_mr_table_destroy(&ctx->mrs);
err_mr:
	swv_async_fini(&ctx->async);
err_pipe:
	pthread_mutex_destroy(&ib->mutex);
	pthread_mutex_destroy(&ctx->pd_lock);
	pthread_mutex_destroy(&ctx->cntr_lock);
	pthread_mutex_destroy(&ctx->trig_lock);
	pthread_mutex_destroy(&ctx->trig_run_lock);
	pthread_mutex_destroy(&ctx->qp_lock);
	pthread_mutex_destroy(&ctx->mcast_lock);
	pthread_mutex_destroy(&ctx->dm_lock);
	free(ctx);
	errno = rc;
	return NULL;
}

void swv_ctx_publish(struct swv_context *ctx)
{
	if (ctx->ident_fd < 0 || ctx->vctx.context.cmd_fd < 0)
		return;
	/* The lock orders the ops' stores before any importer's copy of them. */
	pthread_mutex_lock(&registry_lock);
	swv_list_add_tail(&registry, &ctx->import_entry);
	pthread_mutex_unlock(&registry_lock);
}

void swv_ctx_close(struct swv_context *ctx)
{
	/* The thread goes first: nothing may receive, run timers or complete after. */
	swv_progress_stop(&ctx->progress);
	swv_netdev_close(&ctx->netdev); /* its reader, the progress thread, is gone */
	swv_trig_release_all(ctx);
	swv_comp_cntr_release_all(ctx);
	swv_mcast_close_all(ctx);
	for (unsigned i = 0; i < ctx->nports; i++)
		port_free(ctx->ports[i]);
	swv_mr_table_destroy(&ctx->mrs);
	/* After the QPs and MRs, which used it (the MRs counted in dm->users). */
	swv_dm_release_all(ctx);
	/* PDs the application did not deallocate are the context's (after the MR
	 * table, whose teardown still counts on them); ibv_dealloc_pd is the other way
	 * out, never both: it takes the PD off pd_list. */
	struct swv_list *pos, *tmp;
	swv_list_for_each_safe(pos, tmp, &ctx->pd_list)
	{
		struct swv_pd *pd = swv_list_entry(pos, struct swv_pd, entry);
		swv_list_del(&pd->entry);
		free(pd);
	}
	swv_async_fini(&ctx->async);
	/* Out of the registry before ident_fd closes (its inode may then be reused). */
	pthread_mutex_lock(&registry_lock);
	swv_list_del(&ctx->import_entry);
	swv_list_init(&ctx->import_entry);
	swv_list_for_each_safe(pos, tmp, &ctx->imports)
	{
		struct swv_context *imp = swv_list_entry(pos, struct swv_context, import_entry);
		swv_list_del(&imp->import_entry);
		if (!imp->closed && imp->vctx.context.cmd_fd >= 0)
			close(imp->vctx.context.cmd_fd);
		pthread_mutex_destroy(&imp->vctx.context.mutex);
		free(imp);
	}
	pthread_mutex_unlock(&registry_lock);
	if (!ctx->closed && ctx->vctx.context.cmd_fd >= 0)
		close(ctx->vctx.context.cmd_fd);
	if (ctx->ident_fd >= 0)
		close(ctx->ident_fd);
	pthread_mutex_destroy(&ctx->pd_lock);
	pthread_mutex_destroy(&ctx->vctx.context.mutex);
	pthread_mutex_destroy(&ctx->cntr_lock);
	pthread_mutex_destroy(&ctx->trig_lock);
	pthread_mutex_destroy(&ctx->trig_run_lock);
	pthread_mutex_destroy(&ctx->qp_lock);
	pthread_mutex_destroy(&ctx->mcast_lock);
	pthread_mutex_destroy(&ctx->dm_lock);
	free(ctx);
}

int swv_ctx_release(struct swv_context *raw, struct swv_context **last_out)
{
	*last_out = NULL;
	struct swv_context *p = raw->primary ? raw->primary : raw;
	pthread_mutex_lock(&registry_lock);
	if (raw->closed) {
		pthread_mutex_unlock(&registry_lock);
		return EINVAL;
	}
	raw->closed = true;
	/* The descriptor goes now, as an ibv_close_device closes it; the memory stays
	 * with the primary (objects made through this context may still point at it). */
	if (raw->vctx.context.cmd_fd >= 0)
		close(raw->vctx.context.cmd_fd);
	bool last = --p->refs == 0;
	if (last) {
		/* Under the same lock as the count: an import may not find a context whose
		 * close has begun (it would take a reference on memory being freed). */
		swv_list_del(&p->import_entry);
		swv_list_init(&p->import_entry);
	}
	pthread_mutex_unlock(&registry_lock);
	if (last)
		*last_out = p;
	return 0;
}

struct swv_context *swv_ctx_import(int cmd_fd)
{
	struct stat st;
	if (fstat(cmd_fd, &st)) {
		errno = EINVAL; /* rdma-core: an fd fstat refuses is EINVAL */
		return NULL;
	}
	struct swv_context *imp = calloc(1, sizeof(*imp));
	if (!imp) {
		errno = ENOMEM;
		return NULL;
	}
	struct swv_context *p = NULL;
	struct swv_list *pos;
	pthread_mutex_lock(&registry_lock);
	swv_list_for_each(pos, &registry)
	{
		struct swv_context *c = swv_list_entry(pos, struct swv_context, import_entry);
		if (same_file(c->ident_fd, cmd_fd)) {
			p = c;
			break;
		}
	}
	if (!p) {
		pthread_mutex_unlock(&registry_lock);
		free(imp);
		errno = EOPNOTSUPP; /* another process's context, or no context's fd */
		return NULL;
	}
	/* The primary's ops, device and async_fd, with a mutex and cmd_fd of its own. */
	imp->vctx = p->vctx;
	imp->primary = p;
	imp->ident_fd = -1;
	struct ibv_context *ib = &imp->vctx.context;
	pthread_mutex_init(&ib->mutex, NULL);
	ib->cmd_fd = cmd_fd;
	p->refs++;
	swv_list_add_tail(&p->imports, &imp->import_entry);
	pthread_mutex_unlock(&registry_lock);
	return imp;
}

int swv_ctx_qpn_alloc(struct swv_context *ctx, struct swv_qp *qp, uint32_t *qpn,
		      struct swv_endpoint **ep)
{
	struct swv_qp_port *p = NULL;
	int rc = 0;

	pthread_mutex_lock(&ctx->qp_lock);
	for (unsigned i = 0; i < ctx->nports; i++) {
		if (ctx->ports[i]->ep.nqps < SWV_QPN_SLOTS) {
			p = ctx->ports[i];
			break;
		}
	}
	if (!p) {
		if (ctx->nports == SWV_MAX_QP_PORTS) {
			rc = ENOMEM;
			goto out;
		}
		p = port_open(ctx);
		if (!p) {
			rc = ENOMEM;
			goto out;
		}
		ctx->ports[ctx->nports++] = p;
	}
	/* Round-robin from the last allocation: a just-freed QPN is not reused while
	 * the peer may still have packets for the old QP in flight. */
	for (unsigned n = 0; n < SWV_QPN_SLOTS; n++) {
		unsigned s = (p->next + n) % SWV_QPN_SLOTS;
		if (atomic_load_explicit(&p->slot[s], memory_order_relaxed))
			continue;
		p->next = s + 1;
		p->ep.nqps++;
		*qpn = swv_qpn_make(p->ep.port, s);
		*ep = &p->ep;
		swv_list_add_tail(&ctx->qp_list, &qp->ctx_entry);
		atomic_store_explicit(&p->slot[s], qp, memory_order_seq_cst);
		goto out;
	}
	rc = ENOMEM; /* unreachable: nqps < SWV_QPN_SLOTS guarantees a free slot */
out:
	pthread_mutex_unlock(&ctx->qp_lock);
	return rc;
}

static struct swv_qp_port *port_of_qpn(struct swv_context *ctx, uint32_t qpn)
{
	for (unsigned i = 0; i < ctx->nports; i++)
		if (ctx->ports[i]->ep.port == swv_qpn_port(qpn))
			return ctx->ports[i];
	return NULL;
}

void swv_ctx_qpn_free(struct swv_context *ctx, struct swv_qp *qp, uint32_t qpn)
{
	pthread_mutex_lock(&ctx->qp_lock);
	struct swv_qp_port *p = port_of_qpn(ctx, qpn);
	if (p && atomic_load_explicit(&p->slot[swv_qpn_slot(qpn)], memory_order_relaxed) == qp) {
		/* seq_cst pairs with the progress thread's seq_cst iteration start (see
		 * swv_progress_sync). Sockets stay open until close: the port is part of
		 * QPNs peers may still hold. */
		atomic_store_explicit(&p->slot[swv_qpn_slot(qpn)], NULL, memory_order_seq_cst);
		p->ep.nqps--;
		swv_list_del(&qp->ctx_entry);
	}
	pthread_mutex_unlock(&ctx->qp_lock);
	swv_progress_sync(&ctx->progress);
}

struct swv_qp *swv_ctx_qp_lookup(struct swv_context *ctx, struct swv_endpoint *ep, uint32_t qpn)
{
	if (swv_qpn_port(qpn) != ep->port)
		return NULL;
	struct swv_qp_port *p = swv_container_of(ep, struct swv_qp_port, ep);
	return atomic_load_explicit(&p->slot[swv_qpn_slot(qpn)], memory_order_seq_cst);
}
