/*
 * Completion counters: the object, attachment to QPs and the data-path update.
 * Waiting and the eventfd live in comp_cntr_wait.c. Semantics: comp-cntr.md.
 */
#include "core/comp_cntr.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/completion.h"
#include "core/context.h"
#include "core/qp.h"
#include "core/trig.h"
#include "util/log.h"

/* ---- values ---- */

/* Add 'amount' modulo max_value + 1. With the full 64-bit range the hardware add
 * wraps by itself; a narrower range needs a CAS loop. seq_cst: see comp_cntr.h. */
static inline void cntr_value_add(struct swv_comp_cntr *c, _Atomic uint64_t *v, uint64_t amount)
{
	if (swv_likely(!c->narrow)) {
		atomic_fetch_add_explicit(v, amount, memory_order_seq_cst);
		return;
	}
	const uint64_t max = c->max_value;
	amount %= max + 1; /* max < UINT64_MAX here, so max + 1 does not overflow */
	uint64_t old = atomic_load_explicit(v, memory_order_relaxed), nv;
	do {
		/* old may exceed max only if application memory was scribbled on;
		 * reduce it rather than propagate garbage. */
		uint64_t cur = old > max ? old % (max + 1) : old;
		uint64_t room = max - cur;
		nv = amount <= room ? cur + amount : amount - room - 1;
	} while (!atomic_compare_exchange_weak_explicit(v, &old, nv, memory_order_seq_cst,
							memory_order_relaxed));
}

static inline void cntr_maybe_notify(struct swv_comp_cntr *c, bool err)
{
	if (swv_unlikely(atomic_load_explicit(&c->watchers, memory_order_seq_cst) != 0))
		swv_comp_cntr_notify(c, err);
}

void swv_comp_cntr_count(struct ibv_comp_cntr *cntr, bool ok, uint64_t bytes)
{
	if (!cntr)
		return;
	struct swv_comp_cntr *c = to_swv_cntr(cntr);
	if (swv_likely(ok))
		cntr_value_add(c, c->comp, c->type == IBV_COMP_CNTR_TYPE_BYTES ? bytes : 1);
	else
		cntr_value_add(c, c->err, 1);
}

void swv_comp_cntr_signal(struct ibv_comp_cntr *cntr, bool ok)
{
	if (cntr)
		cntr_maybe_notify(to_swv_cntr(cntr), !ok);
}

void swv_comp_cntr_complete(struct ibv_comp_cntr *cntr, bool ok, uint64_t bytes)
{
	swv_comp_cntr_count(cntr, ok, bytes);
	swv_comp_cntr_signal(cntr, ok);
}

void swv_comp_cntr_add(struct swv_comp_cntr *c, bool err, uint64_t amount)
{
	cntr_value_add(c, err ? c->err : c->comp, amount);
	cntr_maybe_notify(c, err);
}

void swv_comp_cntr_store(struct swv_comp_cntr *c, bool err, uint64_t value)
{
	/* A plain store: increments racing with it may be lost, as documented. */
	atomic_store_explicit(err ? c->err : c->comp, value, memory_order_seq_cst);
	cntr_maybe_notify(c, err);
}

/* Slow path of swv_comp_cntr_read: the value stood still for SWV_CNTR_READ_STILL reads. */
int swv_comp_cntr_read_still(struct swv_comp_cntr *c, bool err, uint64_t *value)
{
	_Atomic uint64_t *last = &c->rd[err].last;
	uint64_t v;

	atomic_store_explicit(&c->rd[err].still, 0, memory_order_relaxed);
	if (swv_progress_drive(&to_swv_ctx(c->ibcntr.context)->progress) < 0)
		sched_yield(); /* the receiver may be preempted on this very core */
	/* The pass may have completed work: report the count as it is now (the
	 * acquire load keeps the counting contract). */
	v = swv_comp_cntr_load(c, err);
	atomic_store_explicit(last, v, memory_order_relaxed);
	*value = v;
	return 0;
}

/* ---- create / destroy ---- */

static bool handle_in_use(struct swv_context *ctx, uint32_t handle)
{
	struct swv_list *pos;
	swv_list_for_each(pos, &ctx->cntr_list) {
		if (swv_list_entry(pos, struct swv_comp_cntr, ctx_entry)->ibcntr.handle == handle)
			return true;
	}
	return false;
}

struct swv_comp_cntr *swv_comp_cntr_create(struct swv_context *ctx, enum ibv_comp_cntr_type type,
					   uint64_t *comp_addr, uint64_t *err_addr)
{
	struct swv_comp_cntr *c = aligned_alloc(SWV_CACHELINE, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	memset(c, 0, sizeof(*c));
	c->ibcntr.context = &ctx->vctx.context;
	c->pr = &ctx->progress;
	c->type = type;
	c->max_value = ctx->cfg->cntr_max_value ? ctx->cfg->cntr_max_value : UINT64_MAX;
	c->narrow = c->max_value != UINT64_MAX;
	c->app_memory = comp_addr || err_addr;
	c->comp = comp_addr ? (_Atomic uint64_t *)comp_addr : &c->own[0];
	c->err = err_addr ? (_Atomic uint64_t *)err_addr : &c->own[1];
	/* A new counter starts at 0/0, application memory included. */
	atomic_store_explicit(c->comp, 0, memory_order_relaxed);
	atomic_store_explicit(c->err, 0, memory_order_relaxed);
	atomic_init(&c->wake_at, UINT64_MAX);
	atomic_init(&c->trig_at, UINT64_MAX);
	swv_list_init(&c->trig_list);
	c->efd = -1;
	pthread_mutex_init(&c->fd_lock, NULL);
	swv_list_init(&c->ctx_entry);

	pthread_mutex_lock(&ctx->cntr_lock);
	if (ctx->ncntrs >= ctx->cfg->max_cntrs) {
		pthread_mutex_unlock(&ctx->cntr_lock);
		pthread_mutex_destroy(&c->fd_lock);
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	/* Handles count up from 1; after 2^32 creations skip any still in use. */
	do {
		c->ibcntr.handle = ++ctx->next_cntr_handle;
	} while (c->ibcntr.handle == 0 || handle_in_use(ctx, c->ibcntr.handle));
	ctx->ncntrs++;
	swv_list_add_tail(&ctx->cntr_list, &c->ctx_entry);
	pthread_mutex_unlock(&ctx->cntr_lock);
	/* Publish the initial zeroes before the pointer escapes to other threads. */
	atomic_thread_fence(memory_order_release);
	return c;
}

static void cntr_free(struct swv_comp_cntr *c)
{
	swv_comp_cntr_fd_close(c);
	pthread_mutex_destroy(&c->fd_lock);
	free(c);
}

int swv_comp_cntr_destroy(struct swv_comp_cntr *c)
{
	struct swv_context *ctx = to_swv_ctx(c->ibcntr.context);

	/* nattach only grows under the owning QP's lock in attach, which needs the
	 * counter alive; a destroy racing an attach of the same counter is an
	 * application error, as for every verbs object. */
	pthread_mutex_lock(&ctx->cntr_lock);
	if (atomic_load(&c->nattach) != 0 || swv_trig_cntr_busy(c)) {
		pthread_mutex_unlock(&ctx->cntr_lock);
		return EBUSY;
	}
	swv_list_del(&c->ctx_entry);
	ctx->ncntrs--;
	pthread_mutex_unlock(&ctx->cntr_lock);
	cntr_free(c);
	return 0;
}

void swv_comp_cntr_release_all(struct swv_context *ctx)
{
	struct swv_list *pos, *tmp;

	pthread_mutex_lock(&ctx->cntr_lock);
	swv_list_for_each_safe(pos, tmp, &ctx->cntr_list) {
		struct swv_comp_cntr *c = swv_list_entry(pos, struct swv_comp_cntr, ctx_entry);
		swv_list_del(&c->ctx_entry);
		cntr_free(c);
	}
	ctx->ncntrs = 0;
	pthread_mutex_unlock(&ctx->cntr_lock);
}

/* ---- attach ---- */

uint32_t swv_comp_cntr_mask_to_slots(uint32_t op_mask)
{
	uint32_t slots = op_mask & SWV_CNTR_OP_UPSTREAM;
	if (op_mask & SWV_CNTR_OP_EXT_ATOMIC)
		slots |= 1u << SWV_CNTR_ATOMIC;
	if (op_mask & SWV_CNTR_OP_EXT_REMOTE_AT)
		slots |= 1u << SWV_CNTR_REMOTE_ATOMIC;
	return slots;
}

/* Slots the QP's transport and queues can perform (comp-cntr.md, attach check 5).
 * Requester operations need a send queue, RECV needs a receive queue (own or SRQ);
 * incoming RDMA and atomics need neither, as on hardware: a QP with no receive
 * queue can still be the target of RDMA WRITE and READ. */
static uint32_t qp_supported_slots(const struct swv_qp *qp)
{
	const uint32_t S = 1u << SWV_CNTR_SEND, R = 1u << SWV_CNTR_RECV,
		       RD = 1u << SWV_CNTR_RDMA_READ, RRD = 1u << SWV_CNTR_REMOTE_RDMA_READ,
		       WR = 1u << SWV_CNTR_RDMA_WRITE, RWR = 1u << SWV_CNTR_REMOTE_RDMA_WRITE,
		       AT = 1u << SWV_CNTR_ATOMIC, RAT = 1u << SWV_CNTR_REMOTE_ATOMIC;
	uint32_t ok;

	switch (qp->type) {
	case IBV_QPT_RC:
		ok = S | R | RD | RRD | WR | RWR | AT | RAT;
		break;
	case IBV_QPT_UC:
		ok = S | R | WR | RWR;
		break;
	case IBV_QPT_UD:
		ok = S | R;
		break;
	default:
		return 0;
	}
	if (qp->cap.max_send_wr == 0)
		ok &= ~(S | RD | WR | AT);
	/* An XRC TGT QP receives through the SRQs its requests name; an INI QP never
	 * responds (core/xrcd.h). */
	if (qp->cap.max_recv_wr == 0 && !qp->srq && qp->xrc != SWV_XRC_TGT)
		ok &= ~R;
	if (qp->xrc == SWV_XRC_INI)
		ok &= ~(RRD | RWR | RAT);
	return ok;
}

int swv_comp_cntr_attach(struct swv_qp *qp, struct swv_comp_cntr *c, uint32_t op_mask)
{
	const uint32_t slots = swv_comp_cntr_mask_to_slots(op_mask);
	int ret = 0;

	pthread_mutex_lock(&qp->lock);
	if (slots & ~qp_supported_slots(qp)) {
		ret = EOPNOTSUPP;
	} else if (qp->state != IBV_QPS_RESET && qp->state != IBV_QPS_INIT) {
		ret = EINVAL;
	} else {
		for (unsigned i = 0; i < SWV_CNTR_NSLOTS; i++) {
			if ((slots & (1u << i)) && qp->cntr[i]) {
				ret = EBUSY;
				break;
			}
		}
	}
	if (ret == 0) {
		/* Count the slots first so the counter is never seen attached by the data
		 * path without being counted; then publish the pointers. */
		atomic_fetch_add(&c->nattach, (uint32_t)__builtin_popcount(slots));
		for (unsigned i = 0; i < SWV_CNTR_NSLOTS; i++) {
			if (slots & (1u << i))
				__atomic_store_n(&qp->cntr[i], &c->ibcntr, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&qp->lock);
	return ret;
}

void swv_comp_cntr_detach_qp(struct swv_qp *qp)
{
	/* The QP can no longer complete anything: no data path reads cntr[] now. */
	for (unsigned i = 0; i < SWV_CNTR_NSLOTS; i++) {
		struct ibv_comp_cntr *ib = __atomic_exchange_n(&qp->cntr[i], NULL, __ATOMIC_ACQ_REL);
		if (ib)
			atomic_fetch_sub(&to_swv_cntr(ib)->nattach, 1);
	}
}
