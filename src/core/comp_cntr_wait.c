/*
 * Completion counters: blocking waits (futex) and the pollable eventfd.
 *
 * Lost wake-up freedom rests on two store->load pairs, all seq_cst (comp_cntr.h):
 *   updater: add value; load watchers; [notify:] load wake_at; load value
 *   waiter : watchers++; load wake_seq; min(wake_at, thr); load value; futex_wait
 * and notify resets wake_at before bumping wake_seq, so a registration that the
 * reset erased is always followed by a wake_seq change the waiter will notice.
 */
#include "core/comp_cntr.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/context.h"
#include "core/trig.h"
#include "util/clock.h"
#include "util/log.h"

/* Spin this long before sleeping: covers completions that are microseconds away
 * without a futex round trip, yet is short enough not to matter for CPU time. While
 * the spin's receive passes keep finding packets it goes on, up to SWV_CNTR_SPIN_MAX_NS:
 * the waiter is then doing the transport's work itself, which beats sleeping and
 * waking the progress thread for it. */
#define SWV_CNTR_SPIN_NS     10000ull
#define SWV_CNTR_SPIN_MAX_NS 200000ull

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

static void futex_wake_all(_Atomic uint32_t *word)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Sleep while *word == val, until the absolute CLOCK_MONOTONIC deadline (ns), or
 * forever when deadline_ns == 0. Spurious returns are fine: the caller re-checks. */
static void futex_wait_until(_Atomic uint32_t *word, uint32_t val, uint64_t deadline_ns)
{
	struct timespec ts, *tsp = NULL;
	if (deadline_ns) {
		ts.tv_sec = (time_t)(deadline_ns / 1000000000ull);
		ts.tv_nsec = (long)(deadline_ns % 1000000000ull);
		tsp = &ts;
	}
	/* WAIT_BITSET takes an absolute timeout on CLOCK_MONOTONIC. */
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET_PRIVATE, val, tsp, NULL,
		FUTEX_BITSET_MATCH_ANY);
}

/* Sleepers of swv_comp_cntr_wait_many, on any counter of the process: they sleep on
 * multi_seq, and a notify that wakes a counter's sleepers also bumps it while any
 * exist (multi_waiters, seq_cst like the rest). A counter's nwaiters and wake_at count
 * them too, so the rules above hold for them unchanged. */
static _Atomic uint32_t multi_seq, multi_waiters;

void swv_comp_cntr_notify(struct swv_comp_cntr *c, bool err_changed)
{
	uint64_t ta = atomic_load(&c->trig_at);
	if (ta != UINT64_MAX && (err_changed || atomic_load(c->comp) >= ta))
		swv_trig_cntr_update(c); /* queues due triggers (core/trig.h) */
	if (atomic_load(&c->nwaiters) != 0) {
		uint64_t at = atomic_load(&c->wake_at);
		if (err_changed || (at != UINT64_MAX && atomic_load(c->comp) >= at)) {
			/* Reset before bumping: see the comment at the top. */
			atomic_store(&c->wake_at, UINT64_MAX);
			atomic_fetch_add(&c->wake_seq, 1);
			futex_wake_all(&c->wake_seq);
			if (atomic_load(&multi_waiters) != 0) {
				atomic_fetch_add(&multi_seq, 1);
				futex_wake_all(&multi_seq);
			}
		}
	}
	if ((atomic_load(&c->fd_state) & 3) != SWV_CNTR_FD_IDLE)
		swv_comp_cntr_fd_notify(c);
}

/* Lower wake_at to thr unless it is already lower. */
static void wake_at_min(struct swv_comp_cntr *c, uint64_t thr)
{
	uint64_t cur = atomic_load(&c->wake_at);
	while (cur > thr && !atomic_compare_exchange_weak(&c->wake_at, &cur, thr))
		;
}

int swv_comp_cntr_wait_impl(struct swv_comp_cntr *c, uint64_t threshold, uint64_t err0,
			    int timeout_ms)
{
	struct swv_context *ctx = to_swv_ctx(c->ibcntr.context);
	const uint64_t start = swv_now_ns();
	const uint64_t deadline = timeout_ms < 0 ? 0 : start + (uint64_t)timeout_ms * 1000000ull;
	uint64_t progressed = start;
	int ret;

	/* Phase 1: a short spin with plain acquire loads; whoever waits makes progress,
	 * so every 64th look (the first included: a zero timeout still drives once) runs
	 * a receive pass for the counter's context when one is wanted. */
	for (unsigned i = 0;; i++) {
		if (atomic_load_explicit(c->comp, memory_order_acquire) >= threshold)
			return 0;
		if (atomic_load_explicit(c->err, memory_order_acquire) != err0)
			return EIO;
		if ((i & 63) == 0) {
			int done = swv_progress_drive(&ctx->progress);
			if (done < 0)
				sched_yield(); /* the receiver may be preempted on this core */
			if (atomic_load_explicit(c->comp, memory_order_acquire) >= threshold)
				return 0;
			if (atomic_load_explicit(c->err, memory_order_acquire) != err0)
				return EIO;
			uint64_t now = swv_now_ns();
			if (done > 0)
				progressed = now;
			if (deadline && now >= deadline)
				return ETIMEDOUT;
			if (now - progressed >= SWV_CNTR_SPIN_NS ||
			    now - start >= SWV_CNTR_SPIN_MAX_NS)
				break;
		}
		cpu_relax();
	}

	/* Phase 2: sleep on the futex; updaters wake us once they see wake_at reached
	 * or the error count change. Asleep, this thread cannot receive: the progress
	 * thread must (swv_progress_release wakes it if it left that to a driver). */
	swv_progress_release(&ctx->progress);
	atomic_fetch_add(&c->nwaiters, 1);
	atomic_fetch_add(&c->watchers, 1);
	for (;;) {
		uint32_t seq = atomic_load(&c->wake_seq);
		wake_at_min(c, threshold);
		if (atomic_load(c->comp) >= threshold) {
			ret = 0;
			break;
		}
		if (atomic_load(c->err) != err0) {
			ret = EIO;
			break;
		}
		if (deadline && swv_now_ns() >= deadline) {
			ret = ETIMEDOUT;
			break;
		}
		futex_wait_until(&c->wake_seq, seq, deadline);
	}
	atomic_fetch_sub(&c->watchers, 1);
	atomic_fetch_sub(&c->nwaiters, 1);
	return ret;
}

/* ---- waiting on many counters ---- */

/* Entry i's state: 0 reached, EIO error count changed, EAGAIN neither. */
static int entry_state(const struct swv_cntr_wait_entry *e)
{
	struct swv_comp_cntr *c = e->cntr;
	if (atomic_load_explicit(c->err, memory_order_acquire) != e->err_base)
		return EIO;
	if (atomic_load_explicit(c->comp, memory_order_acquire) >= e->threshold)
		return 0;
	return EAGAIN;
}

/* Does the wait end? Errors first (lowest index), then the condition. For 'all',
 * *first_open is the lowest entry not yet reached (the index a timeout reports). */
static int many_check(const struct swv_cntr_wait_entry *e, unsigned n, bool all, unsigned *index,
		      unsigned *first_open)
{
	unsigned open = n, hit = n;
	for (unsigned i = 0; i < n; i++) {
		int s = entry_state(&e[i]);
		if (s == EIO) {
			*index = i;
			return EIO;
		}
		if (s == 0 && hit == n)
			hit = i;
		if (s != 0 && open == n)
			open = i;
	}
	*first_open = open;
	if (!all && hit < n) {
		*index = hit;
		return 0;
	}
	if (all && open == n) {
		*index = 0;
		return 0;
	}
	return EAGAIN;
}

int swv_comp_cntr_wait_many_impl(const struct swv_cntr_wait_entry *e, unsigned n, bool all,
				 int timeout_ms, unsigned *index)
{
	const uint64_t start = swv_now_ns();
	const uint64_t deadline = timeout_ms < 0 ? 0 : start + (uint64_t)timeout_ms * 1000000ull;
	unsigned open = 0;
	int ret;

	/* Phase 1: as swv_comp_cntr_wait, a short spin that drives progress for the
	 * counters' contexts (each distinct one, one after the other). */
	for (unsigned i = 0;; i++) {
		ret = many_check(e, n, all, index, &open);
		if (ret != EAGAIN)
			return ret;
		if ((i & 63) == 0) {
			struct swv_context *last = NULL;
			for (unsigned k = 0; k < n; k++) {
				struct swv_context *ctx = to_swv_ctx(e[k].cntr->ibcntr.context);
				if (ctx != last && swv_progress_drive(&ctx->progress) < 0)
					sched_yield();
				last = ctx;
			}
			ret = many_check(e, n, all, index, &open);
			if (ret != EAGAIN)
				return ret;
			uint64_t now = swv_now_ns();
			if (deadline && now >= deadline) {
				*index = all ? open : 0;
				return ETIMEDOUT;
			}
			if (now - start >= SWV_CNTR_SPIN_NS)
				break;
		}
		cpu_relax();
	}

	/* Phase 2: registered on every counter as a sleeper (so their updates wake it),
	 * asleep on the process-wide multi_seq. */
	for (unsigned k = 0; k < n; k++) {
		struct swv_comp_cntr *c = e[k].cntr;
		swv_progress_release(&to_swv_ctx(c->ibcntr.context)->progress);
		atomic_fetch_add(&c->nwaiters, 1);
		atomic_fetch_add(&c->watchers, 1);
	}
	atomic_fetch_add(&multi_waiters, 1);
	for (;;) {
		uint32_t seq = atomic_load(&multi_seq);
		/* Ask for a wake at the thresholds still open ('all': reached counters
		 * would otherwise wake us on every update). */
		for (unsigned k = 0; k < n; k++)
			if (!all || entry_state(&e[k]) != 0)
				wake_at_min(e[k].cntr, e[k].threshold);
		ret = many_check(e, n, all, index, &open);
		if (ret != EAGAIN)
			break;
		if (deadline && swv_now_ns() >= deadline) {
			*index = all ? open : 0;
			ret = ETIMEDOUT;
			break;
		}
		futex_wait_until(&multi_seq, seq, deadline);
	}
	atomic_fetch_sub(&multi_waiters, 1);
	for (unsigned k = 0; k < n; k++) {
		atomic_fetch_sub(&e[k].cntr->watchers, 1);
		atomic_fetch_sub(&e[k].cntr->nwaiters, 1);
	}
	return ret;
}

/* ---- eventfd ---- */

static inline uint64_t fd_state_make(uint64_t gen, enum swv_cntr_fd_mode mode)
{
	return gen << 2 | (uint64_t)mode;
}

static void efd_signal(int efd)
{
	uint64_t one = 1;
	/* Non-blocking eventfd: cannot block; EAGAIN would need 2^64-2 pending signals. */
	if (write(efd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		swv_log(SWV_LOG_WARN, "comp_cntr: eventfd write failed (errno %d)\n", errno);
}

static void efd_drain(int efd)
{
	uint64_t v;
	while (read(efd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		;
}

/* THRESH mode: fire once if the condition holds and this exact arming is still
 * current (the CAS on fd_state with its generation decides). */
static void fd_try_fire(struct swv_comp_cntr *c, uint64_t state)
{
	uint64_t thr = atomic_load(&c->fd_threshold);
	uint64_t base = atomic_load(&c->fd_err_base);
	if (atomic_load(c->comp) < thr && atomic_load(c->err) == base)
		return;
	if (atomic_compare_exchange_strong(&c->fd_state, &state,
					   fd_state_make(state >> 2, SWV_CNTR_FD_IDLE))) {
		efd_signal(c->efd);
		atomic_fetch_sub(&c->watchers, 1);
	}
}

void swv_comp_cntr_fd_notify(struct swv_comp_cntr *c)
{
	uint64_t s = atomic_load(&c->fd_state);
	switch ((enum swv_cntr_fd_mode)(s & 3)) {
	case SWV_CNTR_FD_CHANGE:
		efd_signal(c->efd);
		break;
	case SWV_CNTR_FD_THRESH:
		fd_try_fire(c, s);
		break;
	default:
		break;
	}
}

/* fd_lock held. Returns 0 or errno. */
static int fd_ensure(struct swv_comp_cntr *c)
{
	if (c->efd >= 0)
		return 0;
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0)
		return errno;
	c->efd = fd;
	return 0;
}

/* fd_lock held: switch to 'mode' with a fresh generation. */
static void fd_set_mode(struct swv_comp_cntr *c, enum swv_cntr_fd_mode mode, uint64_t threshold)
{
	uint64_t old = atomic_load(&c->fd_state);
	uint64_t gen = (old >> 2) + 1;

	/* Retire the current arming first so the data path can no longer fire it.
	 * If it was active we inherit its 'watchers' reference (only a successful CAS
	 * from that exact state drops it, and the exchange makes that impossible). */
	old = atomic_exchange(&c->fd_state, fd_state_make(gen, SWV_CNTR_FD_IDLE));
	bool had_ref = (old & 3) != SWV_CNTR_FD_IDLE;
	if (mode == SWV_CNTR_FD_IDLE) {
		if (had_ref)
			atomic_fetch_sub(&c->watchers, 1);
		return;
	}
	if (!had_ref)
		atomic_fetch_add(&c->watchers, 1);
	atomic_store(&c->fd_threshold, threshold);
	atomic_store(&c->fd_err_base, atomic_load(c->err));
	uint64_t s = fd_state_make(gen + 1, mode);
	atomic_store(&c->fd_state, s);
	/* An update that ran before the store above did not see this arming; check
	 * ourselves whether the threshold is already met. */
	if (mode == SWV_CNTR_FD_THRESH)
		fd_try_fire(c, s);
}

int swv_comp_cntr_fd_impl(struct swv_comp_cntr *c)
{
	/* The fd is for blocking in poll/read, where no library code runs to receive. */
	swv_progress_release(&to_swv_ctx(c->ibcntr.context)->progress);
	pthread_mutex_lock(&c->fd_lock);
	bool created = c->efd < 0;
	int ret = fd_ensure(c);
	if (ret == 0 && created)
		fd_set_mode(c, SWV_CNTR_FD_CHANGE, 0);
	int fd = c->efd;
	pthread_mutex_unlock(&c->fd_lock);
	return ret ? -ret : fd;
}

int swv_comp_cntr_arm_impl(struct swv_comp_cntr *c, uint64_t threshold)
{
	/* as swv_comp_cntr_fd_impl */
	swv_progress_release(&to_swv_ctx(c->ibcntr.context)->progress);
	pthread_mutex_lock(&c->fd_lock);
	int ret = fd_ensure(c);
	if (ret == 0) {
		/* Stop the old arming, drop readiness it may have left, then arm anew:
		 * after arm returns the fd is readable only because of this arming. */
		fd_set_mode(c, SWV_CNTR_FD_IDLE, 0);
		efd_drain(c->efd);
		fd_set_mode(c, threshold ? SWV_CNTR_FD_THRESH : SWV_CNTR_FD_CHANGE, threshold);
	}
	pthread_mutex_unlock(&c->fd_lock);
	return ret;
}

void swv_comp_cntr_fd_close(struct swv_comp_cntr *c)
{
	if (c->efd >= 0) {
		close(c->efd);
		c->efd = -1;
	}
}
