/*
 * Completion counters (comp-cntr.md). Owner: counters.
 *
 * Each counter holds a completion count and an error count, 64-bit, cache-line
 * aligned, either in the object itself or at application-supplied addresses
 * (swv_create_comp_cntr_ext). Updates are lock-free atomic adds with release order;
 * reads are acquire loads. Values live modulo max_value + 1.
 *
 * Waking: an update pays for wake-ups only when someone watches the counter
 * ('watchers' != 0): a thread sleeping in swv_comp_cntr_wait, or an armed fd.
 * The update does its add and then loads 'watchers'; a watcher increments
 * 'watchers' and then loads the values. Both sides use sequentially consistent
 * operations so at least one of them sees the other (no lost wake-up). On x86 a
 * seq_cst read-modify-write is the same locked instruction as a release one and a
 * seq_cst load is a plain load, so the data path pays nothing for this.
 */
#ifndef SWV_CORE_COMP_CNTR_H
#define SWV_CORE_COMP_CNTR_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "progress/progress.h"
#include "util/compiler.h"
#include "util/list.h"

struct swv_qp;
struct swv_context;

/* The eventfd's mode (low 2 bits of fd_state; the rest is a generation number
 * bumped by every arm so a stale threshold check cannot fire a newer arming). */
enum swv_cntr_fd_mode {
	SWV_CNTR_FD_IDLE = 0,   /* no fd, or a threshold arming already fired */
	SWV_CNTR_FD_CHANGE = 1, /* every update signals the fd */
	SWV_CNTR_FD_THRESH = 2, /* signal once: count >= fd_threshold or err != fd_err_base */
};

struct swv_comp_cntr {
	/* ---- first cache line: read by the data path, written only at create ---- */
	struct ibv_comp_cntr ibcntr; /* context, handle: what the application holds */
	_Atomic uint64_t *comp;      /* completion count: &own[0] or application memory */
	_Atomic uint64_t *err;       /* error count: &own[1] or application memory */
	uint64_t max_value;          /* 2^k - 1; values live modulo max_value + 1 */
	enum ibv_comp_cntr_type type;
	bool narrow;                 /* max_value != UINT64_MAX: increments use a CAS loop */
	bool app_memory;             /* values at application-supplied addresses */
	struct swv_progress *pr;     /* the context's: a still read asks it first (read) */
	/* futex waiters + 1 while the fd is in CHANGE or THRESH mode. The data path
	 * loads it after each update and takes the slow notify path only when != 0. */
	_Atomic uint32_t watchers;

	/* ---- second cache line: waiting and attachment bookkeeping ---- */
	_Alignas(SWV_CACHELINE) _Atomic uint32_t nattach; /* QP op slots this counter owns;
							   * destroy is EBUSY while > 0 */
	_Atomic uint32_t nwaiters;   /* threads asleep (or about to sleep) on wake_seq */
	_Atomic uint32_t wake_seq;   /* futex word: bumped before every futex wake */
	_Atomic uint64_t wake_at;    /* smallest threshold a sleeper waits for;
				      * UINT64_MAX = none (notify skips the futex wake) */

	/* fd support. fd_lock serializes creating the eventfd and arming; the data path
	 * never takes it (it only reads fd_state/fd_threshold/fd_err_base and CASes
	 * fd_state from THRESH to IDLE when it fires). */
	pthread_mutex_t fd_lock;
	int efd;                       /* -1 until swv_comp_cntr_get_fd / arm; written under
					* fd_lock, read by the data path only after it saw a
					* non-IDLE fd_state (which is published after efd) */
	_Atomic uint64_t fd_state;     /* generation << 2 | enum swv_cntr_fd_mode */
	_Atomic uint64_t fd_threshold; /* for THRESH; written before fd_state is published */
	_Atomic uint64_t fd_err_base;  /* error count when armed */

	struct swv_list ctx_entry;     /* in ctx->cntr_list, under ctx->cntr_lock */

	/* Triggered operations (core/trig.h; under ctx->trig_lock except trig_at):
	 * those held on this counter (sorted by threshold, then post order), whether
	 * they hold a watcher reference, how many triggers wait on or target it
	 * (destroy is EBUSY while > 0), and the smallest held threshold, which the
	 * slow notify path compares (UINT64_MAX: none). */
	struct swv_list trig_list;
	bool trig_watch;
	uint32_t trig_refs;
	_Atomic uint64_t trig_at;

	/* ---- readers' hint (swv_comp_cntr_read): its own line, written only by threads
	 * reading the counter, so neither the data path nor waiters share it ----
	 * rd[0] for the completion count, rd[1] for the error count: the value the last
	 * read returned and how many reads in a row returned it. Relaxed and racy on
	 * purpose: concurrent readers may lose each other's updates, which only shifts
	 * when the next receive pass happens. */
	_Alignas(SWV_CACHELINE) struct {
		_Atomic uint64_t last;
		_Atomic uint32_t still;
	} rd[2];

	/* ---- the values when not in application memory: their own line ---- */
	_Alignas(SWV_CACHELINE) _Atomic uint64_t own[2];
};

static inline struct swv_comp_cntr *to_swv_cntr(struct ibv_comp_cntr *c)
{
	return swv_container_of(c, struct swv_comp_cntr, ibcntr);
}

/* Op bits accepted by attach: the six upstream bits and the two extension bits. */
#define SWV_CNTR_OP_UPSTREAM      0x3fu
#define SWV_CNTR_OP_EXT_ATOMIC    (1u << 16)
#define SWV_CNTR_OP_EXT_REMOTE_AT (1u << 17)
#define SWV_CNTR_OP_ALL           (SWV_CNTR_OP_UPSTREAM | SWV_CNTR_OP_EXT_ATOMIC | SWV_CNTR_OP_EXT_REMOTE_AT)

/* ---- object (core/comp_cntr.c) ---- */

/* Create a counter on ctx. comp_addr/err_addr: application memory for the two
 * values, or NULL for the counter's own storage. Arguments are already validated
 * by the API layer. Returns NULL and sets errno (ENOMEM: max_counters reached or
 * out of memory). */
struct swv_comp_cntr *swv_comp_cntr_create(struct swv_context *ctx, enum ibv_comp_cntr_type type,
					   uint64_t *comp_addr, uint64_t *err_addr);
/* Returns 0 or EBUSY (still attached to a QP). */
int swv_comp_cntr_destroy(struct swv_comp_cntr *c);

/* Plain store / atomic add (wrapping) / acquire load. value <= max_value is checked
 * by the caller. Stores and adds wake watchers. */
void swv_comp_cntr_store(struct swv_comp_cntr *c, bool err, uint64_t value);
void swv_comp_cntr_add(struct swv_comp_cntr *c, bool err, uint64_t amount);
static inline uint64_t swv_comp_cntr_load(const struct swv_comp_cntr *c, bool err)
{
	return atomic_load_explicit(err ? c->err : c->comp, memory_order_acquire);
}

/* ibv_read_comp_cntr / ibv_read_err_comp_cntr: the value, and -- whoever waits makes
 * progress -- once it has stood still for SWV_CNTR_READ_STILL reads in a row, one
 * swv_progress_drive for the counter's context (which is also every attached QP's:
 * attach refuses a QP of another context). On an idle context (nothing in flight,
 * nothing received lately) a read is loads only, no store and no pass; while work is
 * in flight it is a few loads and a compare, and stores only when the value moved. */
#define SWV_CNTR_READ_STILL 64
/* Both store the value in *value and return 0, so that the API functions end in a
 * tail call: the common read needs no stack frame (bench_cntr's read row). */
int swv_comp_cntr_read_still(struct swv_comp_cntr *c, bool err, uint64_t *value);
static inline int swv_comp_cntr_read(struct swv_comp_cntr *c, bool err, uint64_t *value)
{
	uint64_t v = swv_comp_cntr_load(c, err);
	_Atomic uint64_t *last = &c->rd[err].last;
	_Atomic uint32_t *still = &c->rd[err].still;

	*value = v;
	/* Nothing in flight and nothing received lately: no pass could be wanted
	 * (swv_progress_maybe_wanted), so the read is loads only. The hint below may go
	 * stale meanwhile, which costs at most one read counted as moving. */
	if (!swv_progress_maybe_wanted(c->pr))
		return 0;
	if (swv_likely(v != atomic_load_explicit(last, memory_order_relaxed))) {
		atomic_store_explicit(last, v, memory_order_relaxed);
		atomic_store_explicit(still, 0, memory_order_relaxed);
		return 0;
	}
	uint32_t s = atomic_load_explicit(still, memory_order_relaxed) + 1;
	if (swv_likely(s < SWV_CNTR_READ_STILL)) {
		atomic_store_explicit(still, s, memory_order_relaxed);
		return 0;
	}
	return swv_comp_cntr_read_still(c, err, value);
}

/* Map an attach op_mask to slot bits (bit i = enum swv_cntr_slot i). */
uint32_t swv_comp_cntr_mask_to_slots(uint32_t op_mask);

/* ibv_qp_attach_comp_cntr after the argument checks 1-4 (comp-cntr.md): checks 5-7
 * under qp->lock and fills qp->cntr[]. Returns 0, EOPNOTSUPP, EINVAL or EBUSY. */
int swv_comp_cntr_attach(struct swv_qp *qp, struct swv_comp_cntr *c, uint32_t op_mask);

/* Data path, in two steps so the first can sit inside a CQ's critical section:
 * count one completed work request of 'bytes' payload (ok=false adds 1 to the error
 * count), then wake the counter's waiters and fds, if any. Neither blocks nor
 * allocates; the signal may make a system call, so it comes after any lock is
 * released. cntr may be NULL (no-op). */
void swv_comp_cntr_count(struct ibv_comp_cntr *cntr, bool ok, uint64_t bytes);
void swv_comp_cntr_signal(struct ibv_comp_cntr *cntr, bool ok);
/* Both, for a completion without a CQE. */
void swv_comp_cntr_complete(struct ibv_comp_cntr *cntr, bool ok, uint64_t bytes);

/* QP destroy: drop this QP's attachments (the counters' attach counts). Called once
 * the QP can no longer complete anything. */
void swv_comp_cntr_detach_qp(struct swv_qp *qp);

/* Context close: release every counter the context still owns. */
void swv_comp_cntr_release_all(struct swv_context *ctx);

/* Slow path of every update: someone watches (watchers != 0). */
void swv_comp_cntr_notify(struct swv_comp_cntr *c, bool err_changed);

/* ---- waiting and fds (core/comp_cntr_wait.c) ---- */

/* Block until count >= threshold (0), the error count differs from err_base (EIO),
 * or timeout_ms passes (ETIMEDOUT); timeout_ms < 0 waits forever. */
int swv_comp_cntr_wait_impl(struct swv_comp_cntr *c, uint64_t threshold, uint64_t err_base,
			    int timeout_ms);
/* Many counters (swv_comp_cntr_wait_many after its checks): until any (all = false)
 * or every (all) entry's count is >= its threshold (0; *index = the lowest such entry
 * for any, 0 for all), an entry's error count differs from its err_base (EIO; *index =
 * the lowest such entry), or timeout_ms passes (ETIMEDOUT; *index = for all, the
 * lowest entry not reached, else 0). */
struct swv_cntr_wait_entry {
	struct swv_comp_cntr *cntr;
	uint64_t threshold, err_base;
};
int swv_comp_cntr_wait_many_impl(const struct swv_cntr_wait_entry *e, unsigned n, bool all,
				 int timeout_ms, unsigned *index);
/* The counter's eventfd (created on first use, CHANGE mode). Returns fd or -errno. */
int swv_comp_cntr_fd_impl(struct swv_comp_cntr *c);
/* threshold 0 = CHANGE mode; else one-shot THRESH mode. Returns 0 or errno. */
int swv_comp_cntr_arm_impl(struct swv_comp_cntr *c, uint64_t threshold);
/* The fd part of notify. */
void swv_comp_cntr_fd_notify(struct swv_comp_cntr *c);
/* Close the eventfd (destroy). */
void swv_comp_cntr_fd_close(struct swv_comp_cntr *c);

#endif
