/*
 * The progress loop and its thread. See progress.h for the threading rules; the
 * invariants that make QP freeing safe are spelled out next to 'seq' below. What a
 * datagram means and what a timer does is the owner's (pr->ops): this file only
 * receives, sleeps and wakes.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "link/shm.h"
#include "link/endpoint.h"
#include "progress/progress.h"
#include "util/clock.h"
#include "util/compiler.h"
#include "util/log.h"

#define RX_BATCH  32 /* datagrams per recvmmsg (each up to 64 KiB when GRO coalesced) */
#define RX_ROUNDS 8  /* batches per readable socket per iteration: fairness between sockets */
#define MAX_EVENTS 64
#define TIMER_TAG  ((void *)1) /* epoll data of the timerfd (endpoints are real pointers) */
#define WATCH_TAG  ((void *)2) /* epoll data of the watched fd (ops->watch) */

/* Single writer (the progress thread): a plain load+store is enough and avoids a
 * locked instruction per packet. */
static inline void stat_inc(_Atomic uint64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Receive state shared by the thread and assisting application threads; used only
 * under pr->work_lock. */
struct swv_progress_rx {
	struct swv_ep_rx rx; /* receive buffers and per-packet descriptors */
	/* per endpoint: ep->udp_tx when an application pass last received from its socket */
	uint64_t udp_seen[SWV_PROGRESS_MAX_EPS];
	unsigned app_pass; /* application passes run (selects the periodic socket look) */
};

/* The receive endpoints registered so far; eps[0..n) may be read without a lock. */
static unsigned eps_count(struct swv_progress *pr)
{
	return atomic_load_explicit(&pr->neps, memory_order_acquire);
}

/* Hand a batch to the owner (work_lock held); returns its packet count. */
static unsigned rx_batch(struct swv_progress *pr, struct swv_endpoint *ep, struct swv_rx_pkt *pkts,
			 unsigned n, bool ring)
{
	unsigned got = pr->ops->rx(pr->owner, ep, pkts, n, ring);
	atomic_store_explicit(&pr->rx_packets,
			      atomic_load_explicit(&pr->rx_packets, memory_order_relaxed) + got,
			      memory_order_relaxed);
	return got;
}

/* Returns the number of packets dispatched (doorbells are not packets: one that arrives
 * late must not make the context look busy); each receive call is counted in *calls
 * (work_lock held: one writer at a time). */
static int rx_endpoint(struct swv_progress *pr, struct swv_endpoint *ep, struct swv_progress_rx *st,
		       _Atomic uint64_t *calls, int rounds)
{
	int total = 0;
	for (int round = 0; round < rounds; round++) {
		/* One descriptor per IB packet: a GRO-coalesced datagram is split here. */
		stat_inc(calls);
		int n = swv_ep_recv_segs(ep, &st->rx);
		if (n > 0)
			total += (int)rx_batch(pr, ep, st->rx.segs, (unsigned)n, false);
		if (st->rx.ndgrams < st->rx.nbufs)
			break; /* drained; level-triggered epoll reports any remainder */
	}
	return total;
}

/* Dispatch what ep's inbox on the intra-host link holds; returns the packet count. The
 * packets are read in place, so each batch is handed over before its ring space is
 * given back. */
#define RX_SHM_BATCH 64
static int rx_shm(struct swv_progress *pr, struct swv_endpoint *ep, struct swv_progress_rx *st,
		  _Atomic uint64_t *calls, int rounds)
{
	int total = 0;
	if (!ep->shm)
		return 0;
	for (int round = 0; round < rounds; round++) {
		int n = swv_shm_rx_take(ep->shm, st->rx.segs, RX_SHM_BATCH);
		if (n) {
			stat_inc(calls);
			(void)rx_batch(pr, ep, st->rx.segs, (unsigned)n, true);
		}
		swv_shm_rx_release(ep->shm);
		total += n;
		if (n < RX_SHM_BATCH)
			break;
	}
	return total;
}

/* The inboxes of the receive endpoints: arm them before the thread sleeps (true if
 * one holds packets already: do not sleep), or disarm them. */
static bool shm_arm_all(struct swv_progress *pr, bool on)
{
	bool busy = false;
	unsigned n = eps_count(pr);
	for (unsigned i = 0; i < n; i++)
		busy |= swv_shm_arm(pr->eps[i]->shm, on);
	return busy;
}

/* Enter/leave a unit of receive work (work_lock held): seq odd while inside. */
static void work_begin(struct swv_progress *pr)
{
	atomic_fetch_add(&pr->seq, 1);
	(void)atomic_load_explicit(&pr->ep_gen, memory_order_acquire);
}

static void work_end(struct swv_progress *pr)
{
	atomic_fetch_add(&pr->seq, 1);
	if (atomic_load(&pr->sync_waiters))
		futex_wake_all(&pr->seq);
}

/* Release what the fault injectors hold that is due at now; returns the earliest
 * deadline still held (UINT64_MAX if none). Only endpoints with an injector hold. */
static uint64_t flush_held(struct swv_progress *pr, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	unsigned n = eps_count(pr);
	for (unsigned i = 0; i < n; i++) {
		if (!pr->eps[i]->fault)
			continue;
		uint64_t d = swv_ep_flush_delayed(pr->eps[i], now);
		if (d)
			next = SWV_MIN(next, d);
	}
	return next;
}

static int wait_events(struct swv_progress *pr, struct epoll_event *evs, uint64_t deadline)
{
	static _Atomic bool no_pwait2;
	struct timespec ts, *tsp = NULL;
	int n;

	if (deadline != UINT64_MAX) {
		uint64_t now = swv_now_ns();
		uint64_t d = deadline > now ? deadline - now : 0;
		ts.tv_sec = (time_t)(d / 1000000000ull);
		ts.tv_nsec = (long)(d % 1000000000ull);
		tsp = &ts;
	}
	if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
		n = epoll_pwait2(pr->epfd, evs, MAX_EVENTS, tsp, NULL);
		if (n >= 0 || errno != ENOSYS)
			return n;
		atomic_store(&no_pwait2, true); /* kernel < 5.11: millisecond timeouts */
	}
	int ms = -1;
	if (tsp) {
		uint64_t tot = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		uint64_t m = (tot + 999999) / 1000000; /* round up: never fire early */
		ms = m > INT_MAX ? INT_MAX : (int)m;
	}
	return epoll_wait(pr->epfd, evs, MAX_EVENTS, ms);
}

/* Receive work was done at 'now': packets are expected for a while (work_lock held). */
static void rx_hot(struct swv_progress *pr, uint64_t now)
{
	atomic_store_explicit(&pr->rx_hot_until, now + SWV_PROGRESS_HOT_NS, memory_order_relaxed);
}

/* Add (EPOLL_CTL_ADD) or remove (DEL) every receive endpoint's socket to/from the
 * thread's epoll set. Removal rather than an empty event mask: a muted socket must not
 * wake the thread even with an error queued (the driver's receive pass drains it).
 * ENOENT and EEXIST are expected: a socket opened meanwhile joins the set by itself
 * (swv_progress_add_endpoint), and the event loop removes it again while muted. */
static void set_interest(struct swv_progress *pr, bool on)
{
	unsigned n = eps_count(pr);

	for (unsigned i = 0; i < n; i++) {
		struct swv_endpoint *ep = pr->eps[i];
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ep};
		if (epoll_ctl(pr->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, ep->fd, &ev) &&
		    errno != ENOENT && errno != EEXIST)
			swv_log(SWV_LOG_ERR, "progress: epoll_ctl(%s): %s", on ? "add" : "del",
				strerror(errno));
	}
}

/* Before sleeping: mute the sockets while an application thread holds the driver's
 * lease (or the test hook says so), unmute them once it has lapsed or was released.
 * Returns the deadline to sleep to: 'next', or the lease's end when that is earlier,
 * so the thread looks again when the lease may have lapsed. */
static uint64_t mute_update(struct swv_progress *pr, bool *muted, unsigned *held, uint64_t next)
{
	bool norx = atomic_load_explicit(&pr->test_norx, memory_order_relaxed);

	if (!*muted) {
		if (!norx &&
		    atomic_load_explicit(&pr->drive_until, memory_order_relaxed) <= swv_now_ns())
			return next; /* the common case: nobody drives */
		/* Published before drive_until is read again: a releaser that stores 0 and
		 * then finds muted false knows this read will see its 0. */
		atomic_store(&pr->muted, true);
		set_interest(pr, false);
		*muted = true;
	}
	if (norx)
		return next;
	uint64_t du = atomic_load(&pr->drive_until), now = swv_now_ns();
	if (du > now) {
		/* Each look at a lease still held is a context switch, on two cores one
		 * that an application spinning there pays for; a holder that keeps
		 * renewing is looked at less often, up to SWV_PROGRESS_LEASE_STRETCH
		 * doublings (its passes run the timers; a release wakes the thread). */
		uint64_t lease = atomic_load_explicit(&pr->lease_ns, memory_order_relaxed);
		uint64_t at = *held ? SWV_MAX(du, now + (lease << *held)) : du;
		if (*held < SWV_PROGRESS_LEASE_STRETCH)
			++*held;
		return SWV_MIN(next, at);
	}
	*held = 0;
	set_interest(pr, true); /* level-triggered: anything queued meanwhile shows at once */
	atomic_store(&pr->muted, false);
	*muted = false;
	return next;
}

/* *a = min(*a, v), atomically (seq_cst). */
static void lower_to(_Atomic uint64_t *a, uint64_t v)
{
	uint64_t cur = atomic_load(a);
	while (v < cur && !atomic_compare_exchange_weak(a, &cur, v))
		;
}

/* ops->timers at now, work_lock held, by the thread or an application pass. timers_due
 * is emptied before the scan, and an arm stores its QP's deadline before it reads
 * timers_due (all seq_cst, transport/qp_timer.c): either the scan sees that deadline
 * or the arm sees the emptied value and lowers it. What the scan answers goes back
 * as a minimum, since an arm may have lowered timers_due meanwhile. */
static void run_timers(struct swv_progress *pr, uint64_t now)
{
	(void)atomic_exchange(&pr->timers_due, UINT64_MAX);
	lower_to(&pr->timers_due, pr->ops->timers(pr->owner, now));
}

static void *progress_main(void *arg)
{
	struct swv_progress *pr = arg;
	struct epoll_event evs[MAX_EVENTS];
	struct swv_progress_rx *st = pr->rx;
	uint64_t next = UINT64_MAX; /* earliest timer or kicked deadline */
	bool muted = false;	    /* sockets out of the epoll set (mute_update) */
	unsigned held = 0;	    /* looks in a row that found the lease held (mute_update) */
	uint64_t spin_until = 0;    /* poll the inboxes without sleeping until then */

	for (;;) {
		uint64_t sleep_to = mute_update(pr, &muted, &held, next);
		bool norx = atomic_load_explicit(&pr->test_norx, memory_order_relaxed);
		/* Shortly after inbox traffic, unmuted, poll instead of sleeping: a doorbell
		 * costs the sender a system call and this thread a wake-up (docs/design.md,
		 * "The thread polls a while before it sleeps"). Announced as no sleep, so
		 * that no kicker or arm pays a system call to wake a thread that polls. */
		bool spin = !muted && !norx && spin_until && swv_now_ns() < spin_until;
		if (spin)
			sleep_to = 0;
		else
			spin_until = 0; /* lapsed (or muted): no clock read until traffic again */
		/* Muted by a lease, the thread leaves the timers to its holder (timers_due). */
		bool own_timers = !muted || norx;
		/* Announce the deadline we will sleep to, then look at 'pending' (and at
		 * 'timers_due' when the timers are ours): a kicker or arm either sees our
		 * sleep_until (and wakes us) or we see its deadline (seq_cst on both sides). */
		for (;;) {
			atomic_store(&pr->sleep_until, sleep_to);
			uint64_t p = atomic_load(&pr->pending);
			if (own_timers)
				p = SWV_MIN(p, atomic_load(&pr->timers_due));
			if (p >= sleep_to)
				break;
			sleep_to = next = p;
		}
		if (atomic_load(&pr->stop))
			break;
		/* Unmuted, the thread is the inboxes' only reader: ask senders for a doorbell
		 * before sleeping (muted, a driver polls them and no doorbell is wanted). */
		bool armed = !muted && !norx && !spin;
		if (armed && shm_arm_all(pr, true))
			sleep_to = 0;
		int n = wait_events(pr, evs, sleep_to);
		if (armed)
			(void)shm_arm_all(pr, false);
		atomic_store(&pr->sleep_until, 0);
		if (atomic_load(&pr->stop))
			break;
		/* Woken only to look at the lease (no event, no deadline due): no work. */
		if (n == 0 && !own_timers && swv_now_ns() < next)
			continue;

		/* The watch (the context's netdev: a resync after an overrun waits for the
		 * kernel) runs outside the work section, so nothing else waits for it. */
		for (int i = 0; i < n; i++)
			if (evs[i].data.ptr == WATCH_TAG)
				pr->ops->watch(pr->owner);

		/* seq odd: from here on this iteration may hold QP pointers. A QP unpublished
		 * (seq_cst) before this increment is invisible to it; one unpublished after is
		 * waited for by swv_progress_sync until seq turns even again. */
		if (pthread_mutex_trylock(&pr->work_lock)) {
			atomic_store_explicit(&pr->thread_waiting, true, memory_order_relaxed);
			pthread_mutex_lock(&pr->work_lock);
			atomic_store_explicit(&pr->thread_waiting, false, memory_order_relaxed);
		}
		work_begin(pr);
		pr->ops->begin(pr->owner);

		uint64_t taken = atomic_exchange(&pr->pending, UINT64_MAX);
		uint64_t now = swv_now_ns();
		atomic_store_explicit(&pr->last_iter_ns, now, memory_order_relaxed);
		next = taken > now ? taken : UINT64_MAX;

		for (int i = 0; i < n; i++) {
			struct swv_endpoint *ep = evs[i].data.ptr;
			if (!ep) {
				uint64_t v;
				while (read(pr->evfd, &v, sizeof(v)) > 0)
					;
				continue;
			}
			if (evs[i].data.ptr == TIMER_TAG) {
				/* Disarmed before the timer scan below: an arm that saw the
				 * old value stored its QP deadline before, so the scan sees
				 * it; a later arm finds UINT64_MAX and arms again. */
				uint64_t v;
				pthread_mutex_lock(&pr->timer_lock);
				while (read(pr->tfd, &v, sizeof(v)) > 0)
					;
				atomic_store(&pr->timer_at, UINT64_MAX);
				pthread_mutex_unlock(&pr->timer_lock);
				continue;
			}
			if (evs[i].data.ptr == WATCH_TAG)
				continue; /* done above */
			if (muted && !ep->mcast) {
				/* A socket opened while muted joined the set by itself (a
				 * group's socket stays: only this thread receives from it). */
				(void)epoll_ctl(pr->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
				if (atomic_load_explicit(&pr->test_norx, memory_order_relaxed))
					continue;
			}
			if (rx_endpoint(pr, ep, st, &pr->rx_calls_thread, RX_ROUNDS) > 0)
				rx_hot(pr, now);
		}
		if (!atomic_load_explicit(&pr->test_norx, memory_order_relaxed)) {
			unsigned np = eps_count(pr), got = 0;
			for (unsigned i = 0; i < np; i++)
				got += (unsigned)rx_shm(pr, pr->eps[i], st, &pr->rx_calls_thread,
							RX_ROUNDS);
			if (got) {
				rx_hot(pr, now);
				spin_until = now + SWV_PROGRESS_SPIN_NS;
			}
		}
		now = swv_now_ns();
		next = SWV_MIN(next, flush_held(pr, now));
		/* A polling pass scans the QPs' timers only when one is due (timers_due). */
		if (!spin || atomic_load(&pr->timers_due) <= now)
			run_timers(pr, now);

		/* Release: what this iteration did with an endpoint (a receive from its
		 * socket) happens before a swv_progress_quiesce that sees the new value
		 * returns and its caller closes the socket. */
		atomic_fetch_add_explicit(&pr->epoch, 1, memory_order_release);
		work_end(pr);
		pthread_mutex_unlock(&pr->work_lock);
		/* The context issues here the triggers this iteration's completions made due
		 * (or that another thread queued and kicked us for), outside every lock. */
		pr->ops->after(pr->owner);
	}
	return NULL;
}

/* One receive pass over every receive endpoint, work_lock held (released here). An
 * endpoint that takes all its traffic through its inbox gets a receive system call only
 * when needed (all_sockets: always). */
static int pass_locked(struct swv_progress *pr, bool all_sockets, bool release_held,
		       int *from_sockets, uint64_t *now_out)
{
	struct swv_endpoint *const *eps = pr->eps;
	int done = 0, socks = 0;

	work_begin(pr);
	pr->ops->begin(pr->owner);
	unsigned n = eps_count(pr);
	struct swv_progress_rx *st = pr->rx;
	bool periodic = (st->app_pass++ & 15) == 0;
	/* A settling pass (all_sockets) must take everything that has arrived, as an
	 * iteration of the thread would. */
	unsigned rounds = all_sockets ? RX_ROUNDS : 1;
	for (unsigned i = 0; i < n; i++) {
		/* One batch per source (here and from the socket below) unless settling:
		 * the caller gets back to its own loop -- an application reposts the
		 * receives it polled --
		 * before more is consumed. RX_ROUNDS batches per pass took up to 512 receive
		 * WQEs while an ACK went out after each batch, so a SEND target reposting
		 * what it polled ran out of a 256-deep RQ (an RNR NAK, then the window sent
		 * again). The thread, which nobody waits on, keeps RX_ROUNDS. */
		done += rx_shm(pr, eps[i], st, &pr->rx_calls_app, rounds);
		/* A port whose traffic all goes through its inbox needs no receive system
		 * call on every pass: only when it sent UDP since the last look (replies come
		 * the way requests went), or now and then for strays (a doorbell, a peer that
		 * cannot map the inbox). */
		uint64_t tx = atomic_load_explicit(&eps[i]->udp_tx, memory_order_relaxed);
		if (all_sockets || !eps[i]->shm || tx != st->udp_seen[i] || periodic) {
			st->udp_seen[i] = tx;
			socks += rx_endpoint(pr, eps[i], st, &pr->rx_calls_app, rounds);
		}
	}
	/* Then what the fault injector holds (answers of this pass included) leaves now,
	 * whatever its deadline. */
	for (unsigned i = 0; release_held && i < n; i++)
		(void)swv_ep_flush_delayed(eps[i], UINT64_MAX);
	stat_inc(&pr->app_passes);
	done += socks;
	uint64_t now = swv_now_ns();
	if (done > 0)
		rx_hot(pr, now);
	/* The timers that came: the thread, muted while this thread holds the lease,
	 * leaves them to its passes (timers_due). */
	if (atomic_load_explicit(&pr->timers_due, memory_order_relaxed) <= now)
		run_timers(pr, now);
	work_end(pr);
	pthread_mutex_unlock(&pr->work_lock);
	pr->ops->after(pr->owner); /* as the thread does after an iteration */
	if (from_sockets)
		*from_sockets = socks;
	if (now_out)
		*now_out = now;
	return done;
}

/* swv_progress_assist; *from_sockets: how many of the packets came from sockets, *now:
 * the clock as the pass read it (a caller that needs the time takes it from there: a
 * clock read is a good part of an empty poll). */
static int assist_pass(struct swv_progress *pr, int *from_sockets, uint64_t *now)
{
	if (!pr->started)
		return 0;
	/* The thread waits for the lock: let it have it (see thread_waiting), it receives */
	if (atomic_load_explicit(&pr->thread_waiting, memory_order_relaxed) ||
	    pthread_mutex_trylock(&pr->work_lock))
		return -1; /* someone is receiving already */
	return pass_locked(pr, false, false, from_sockets, now);
}

int swv_progress_assist(struct swv_progress *pr)
{
	return assist_pass(pr, NULL, NULL);
}

int swv_progress_settle(struct swv_progress *pr, bool release_held)
{
	if (!pr->started || swv_progress_is_self(pr))
		return 0;
	/* Waits for a pass under way: it may have looked at a port before the packet
	 * that matters arrived there. Ours starts after the call, so it sees it. */
	pthread_mutex_lock(&pr->work_lock);
	return pass_locked(pr, true, release_held, NULL, NULL);
}

/* Something the application posted can still complete: a send WQE outstanding or a
 * receive posted. */
static bool awaits_completion(struct swv_progress *pr)
{
	return atomic_load_explicit(&pr->sq_outstanding, memory_order_relaxed) > 0 ||
	       atomic_load_explicit(&pr->rq_posted, memory_order_relaxed) > 0;
}

/* Progress is wanted: send WQEs outstanding, or packets received recently. */
static bool drive_wanted(struct swv_progress *pr)
{
	if (atomic_load_explicit(&pr->sq_outstanding, memory_order_relaxed) > 0)
		return true;
	uint64_t hot = atomic_load_explicit(&pr->rx_hot_until, memory_order_relaxed);
	if (!hot)
		return false;
	if (swv_now_ns() < hot)
		return true;
	/* Lapsed: clear it (unless a pass just renewed it) so idle polls skip the clock. */
	atomic_compare_exchange_strong_explicit(&pr->rx_hot_until, &hot, 0, memory_order_relaxed,
						memory_order_relaxed);
	return false;
}

int swv_progress_drive(struct swv_progress *pr)
{
	if (!pr->started)
		return 0;
	if (!drive_wanted(pr)) {
		/* A driver whose reason to receive ended hands receiving back at once. */
		if (atomic_load_explicit(&pr->drive_until, memory_order_relaxed))
			swv_progress_release(pr);
		return 0;
	}
	int socks = 0;
	uint64_t now = 0;
	int done = assist_pass(pr, &socks, &now);
	if (done < 0)
		return done;
	/* The pass took packets from a socket and now nothing the application posted can
	 * complete (it retired the last send WQE; no receive is posted): what still comes
	 * from that peer -- a WRITE, which makes no completion here -- only the thread
	 * will receive, because the caller need not call the library again. ib_write_lat
	 * polls its send CQ until its WRITE is acknowledged, then spins on memory for the
	 * peer's WRITE: a held lease delayed that WRITE by the lease's length. Not for
	 * traffic from the intra-host inbox: there the peer may place a WRITE itself, and an
	 * unmuted thread asks every peer for a doorbell per message (docs/design.md, "The
	 * thread steps aside"). */
	if (socks > 0 && !awaits_completion(pr)) {
		swv_progress_release(pr);
		return done;
	}
	/* Passes in a tight loop hold the lease; occasional ones do not, so an
	 * application that polls now and then never delays the thread's receiving. */
	uint64_t prev = atomic_exchange_explicit(&pr->last_drive_ns, now, memory_order_relaxed);
	if (now - prev < SWV_PROGRESS_BUSY_GAP_NS) {
		uint64_t du = atomic_load_explicit(&pr->drive_until, memory_order_relaxed);
		uint64_t lease = atomic_load_explicit(&pr->lease_ns, memory_order_relaxed);
		if (du < now + lease - lease / 8)
			atomic_store_explicit(&pr->drive_until, now + lease, memory_order_relaxed);
	}
	return done;
}

void swv_progress_release(struct swv_progress *pr)
{
	if (!pr->started || !atomic_load_explicit(&pr->drive_until, memory_order_relaxed))
		return;
	atomic_store(&pr->drive_until, 0);
	/* See 'muted' in progress.h: the thread either sees the 0 or is woken here. */
	if (atomic_load(&pr->muted))
		swv_progress_kick(pr, 0);
}

void swv_progress_test_norx(struct swv_progress *pr, bool on)
{
	atomic_store(&pr->test_norx, on);
	swv_progress_kick(pr, 0);
	while (on && !atomic_load(&pr->muted)) {
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
}

void swv_progress_test_lease(struct swv_progress *pr, uint64_t ns)
{
	atomic_store(&pr->lease_ns, ns);
}

void swv_progress_test_hold(struct swv_progress *pr)
{
	pthread_mutex_lock(&pr->work_lock);
	work_begin(pr);
}

void swv_progress_test_rx(struct swv_progress *pr, struct swv_endpoint *ep, struct swv_rx_pkt *pkts,
			  unsigned n)
{
	if (n)
		(void)rx_batch(pr, ep, pkts, n, false);
}

void swv_progress_test_release(struct swv_progress *pr)
{
	work_end(pr);
	pthread_mutex_unlock(&pr->work_lock);
}

static void rx_state_free(struct swv_progress_rx *st)
{
	if (!st)
		return;
	swv_ep_rx_free(&st->rx);
	free(st);
}

int swv_progress_start(struct swv_progress *pr, const struct swv_progress_ops *ops, void *arg,
		       int watch_fd)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	sigset_t all, old;
	int rc;

	pr->started = false;
	pr->ops = ops;
	pr->owner = NULL;
	atomic_init(&pr->neps, 0);
	pr->evfd = -1;
	pr->tfd = -1;
	atomic_init(&pr->timer_at, UINT64_MAX);
	atomic_init(&pr->stop, false);
	atomic_init(&pr->sleep_until, 0); /* "awake": kicks before the first sleep only record */
	atomic_init(&pr->pending, UINT64_MAX);
	atomic_init(&pr->timers_due, UINT64_MAX);
	atomic_init(&pr->thread_waiting, false);
	atomic_init(&pr->seq, 0);
	atomic_init(&pr->sync_waiters, 0);
	atomic_init(&pr->sq_outstanding, 0);
	atomic_init(&pr->rq_posted, 0);
	atomic_init(&pr->rx_hot_until, 0);
	atomic_init(&pr->drive_until, 0);
	atomic_init(&pr->last_drive_ns, 0);
	atomic_init(&pr->lease_ns, SWV_PROGRESS_LEASE_NS);
	atomic_init(&pr->muted, false);
	atomic_init(&pr->test_norx, false);

	pr->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (pr->epfd < 0)
		return errno;
	pr->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (pr->evfd < 0) {
		rc = errno;
		goto err;
	}
	if (epoll_ctl(pr->epfd, EPOLL_CTL_ADD, pr->evfd, &ev)) {
		rc = errno;
		goto err;
	}
	pr->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (pr->tfd < 0) {
		rc = errno;
		goto err;
	}
	struct epoll_event tev = {.events = EPOLLIN, .data.ptr = TIMER_TAG};
	if (epoll_ctl(pr->epfd, EPOLL_CTL_ADD, pr->tfd, &tev)) {
		rc = errno;
		goto err;
	}
	/* The watched fd (opened before us, closed after us by the owner). */
	if (watch_fd >= 0) {
		struct epoll_event nev = {.events = EPOLLIN, .data.ptr = WATCH_TAG};
		if (epoll_ctl(pr->epfd, EPOLL_CTL_ADD, watch_fd, &nev)) {
			rc = errno;
			goto err;
		}
	}
	pr->rx = calloc(1, sizeof(*pr->rx));
	if (!pr->rx || swv_ep_rx_init(&pr->rx->rx, RX_BATCH)) {
		free(pr->rx);
		pr->rx = NULL;
		rc = ENOMEM;
		goto err;
	}
	errno = 0;
	pr->owner = ops->open(arg);
	if (!pr->owner) {
		rc = errno ? errno : ENOMEM;
		goto err;
	}
	pthread_mutex_init(&pr->timer_lock, NULL);
	pthread_mutex_init(&pr->work_lock, NULL);
	pthread_mutex_init(&pr->ep_lock, NULL);
	/* The thread takes no signals: the application's handlers run in its threads.
	 * Except the faults its copies into application memory may raise: a fault with
	 * SIGSEGV/SIGBUS blocked kills the process instead of reaching core/memsafe.c. */
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&pr->thread, NULL, progress_main, pr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		pthread_mutex_destroy(&pr->timer_lock);
		pthread_mutex_destroy(&pr->work_lock);
		pthread_mutex_destroy(&pr->ep_lock);
		goto err;
	}
	/* Named for perf/top/gdb; "swv-progress" fits the 15-character limit. */
	(void)pthread_setname_np(pr->thread, "swv-progress");
	pr->started = true;
	return 0;
err:
	if (pr->owner)
		ops->close(pr->owner);
	pr->owner = NULL;
	rx_state_free(pr->rx);
	pr->rx = NULL;
	if (pr->tfd >= 0)
		close(pr->tfd);
	if (pr->evfd >= 0)
		close(pr->evfd);
	close(pr->epfd);
	pr->evfd = pr->epfd = pr->tfd = -1;
	return rc;
}

void swv_progress_stop(struct swv_progress *pr)
{
	if (pr->started) {
		uint64_t one = 1;
		atomic_store(&pr->stop, true);
		if (write(pr->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			swv_log(SWV_LOG_ERR, "progress stop: eventfd write: %s", strerror(errno));
		pthread_join(pr->thread, NULL);
		pr->started = false;
		pthread_mutex_destroy(&pr->timer_lock);
		pthread_mutex_destroy(&pr->work_lock);
		pthread_mutex_destroy(&pr->ep_lock);
		rx_state_free(pr->rx);
		pr->rx = NULL;
		pr->ops->close(pr->owner);
		pr->owner = NULL;
		atomic_store(&pr->neps, 0);
	}
	if (pr->tfd >= 0)
		close(pr->tfd);
	if (pr->evfd >= 0)
		close(pr->evfd);
	if (pr->epfd >= 0)
		close(pr->epfd);
	pr->evfd = pr->epfd = pr->tfd = -1;
}

int swv_progress_add_endpoint(struct swv_progress *pr, struct swv_endpoint *ep)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ep};
	int rc = 0;

	if (!ep)
		return EINVAL;
	pthread_mutex_lock(&pr->ep_lock);
	unsigned n = atomic_load_explicit(&pr->neps, memory_order_relaxed);
	if (!ep->mcast && n == SWV_PROGRESS_MAX_EPS) {
		rc = ENOSPC;
		goto out;
	}
	swv_ep_enable_gro(ep); /* only this thread receives: it splits coalesced datagrams */
	atomic_fetch_add_explicit(&pr->ep_gen, 1, memory_order_release);
	if (epoll_ctl(pr->epfd, EPOLL_CTL_ADD, ep->fd, &ev)) {
		rc = errno;
		goto out;
	}
	/* A group's socket is in the epoll set only; any other is a receive endpoint. */
	if (!ep->mcast) {
		pr->eps[n] = ep;
		atomic_store_explicit(&pr->neps, n + 1, memory_order_release);
	}
out:
	pthread_mutex_unlock(&pr->ep_lock);
	return rc;
}

void swv_progress_del_endpoint(struct swv_progress *pr, struct swv_endpoint *ep)
{
	(void)epoll_ctl(pr->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
}

void swv_progress_quiesce(struct swv_progress *pr)
{
	if (!pr->started || swv_progress_is_self(pr))
		return;
	/* An iteration that was running (or had its events already) ends by bumping the
	 * epoch; one that starts later cannot see what was removed before this load. */
	uint64_t e = atomic_load_explicit(&pr->epoch, memory_order_acquire);
	while (atomic_load_explicit(&pr->epoch, memory_order_acquire) == e) {
		swv_progress_kick(pr, 0);
		struct timespec ts = {.tv_nsec = 20000};
		nanosleep(&ts, NULL);
	}
}

/* Wake the thread if it sleeps past deadline_ns. Only the caller that moves
 * sleep_until to 0 writes: one syscall per sleep. */
static void wake_by(struct swv_progress *pr, uint64_t deadline_ns)
{
	uint64_t s = atomic_load(&pr->sleep_until);
	if (deadline_ns < s && atomic_compare_exchange_strong(&pr->sleep_until, &s, 0)) {
		uint64_t one = 1;
		if (write(pr->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			swv_log(SWV_LOG_ERR, "progress kick: eventfd write: %s", strerror(errno));
		atomic_fetch_add_explicit(&pr->wakeups, 1, memory_order_relaxed);
	}
}

void swv_progress_kick(struct swv_progress *pr, uint64_t deadline_ns)
{
	lower_to(&pr->pending, deadline_ns);
	wake_by(pr, deadline_ns);
}

/* Muted by a lease (the test hook aside): the thread then reads 'pending' and
 * 'timers_due' when it next looks at the lease, and it stores muted = false before it
 * reads them once more, so a caller that finds it muted after lowering one of them
 * need not wake it (seq_cst on both sides). */
static bool lease_muted(struct swv_progress *pr)
{
	return atomic_load(&pr->muted) &&
	       !atomic_load_explicit(&pr->test_norx, memory_order_relaxed);
}

void swv_progress_kick_lazy(struct swv_progress *pr, uint64_t deadline_ns)
{
	lower_to(&pr->pending, deadline_ns);
	if (!lease_muted(pr))
		wake_by(pr, deadline_ns);
}

void swv_progress_arm(struct swv_progress *pr, uint64_t deadline_ns)
{
	lower_to(&pr->timers_due, deadline_ns);
	/* Muted: the holder's passes run the timer. */
	if (lease_muted(pr))
		return;
	uint64_t s = atomic_load(&pr->sleep_until);
	/* Awake (0): it reads 'timers_due' before sleeping (or, about to mute, leaves it
	 * to the lease's holder). Asleep to no later: nothing. */
	if (deadline_ns >= s)
		return;
	/* Already armed to fire by then (the common case while traffic flows): nothing. */
	if (atomic_load(&pr->timer_at) <= deadline_ns)
		return;
	uint64_t now = swv_now_ns();
	if (!pr->started || deadline_ns < now + SWV_PROGRESS_ARM_SLACK_NS) {
		wake_by(pr, deadline_ns);
		return;
	}
	pthread_mutex_lock(&pr->timer_lock);
	if (deadline_ns < atomic_load(&pr->timer_at)) {
		struct itimerspec its = {
			.it_value = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
				     .tv_nsec = (long)(deadline_ns % 1000000000ull)}};
		if (timerfd_settime(pr->tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0) {
			atomic_store(&pr->timer_at, deadline_ns);
			atomic_fetch_add_explicit(&pr->timer_arms, 1, memory_order_relaxed);
		} else {
			pthread_mutex_unlock(&pr->timer_lock);
			wake_by(pr, deadline_ns);
			return;
		}
	}
	pthread_mutex_unlock(&pr->timer_lock);
}

void swv_progress_sync(struct swv_progress *pr)
{
	if (!pr->started || swv_progress_is_self(pr))
		return;
	uint32_t s = atomic_load(&pr->seq);
	if (!(s & 1))
		return; /* sleeping: the next iteration starts after our unpublish */
	atomic_fetch_add(&pr->sync_waiters, 1);
	while (atomic_load(&pr->seq) == s)
		futex_wait(&pr->seq, s);
	atomic_fetch_sub(&pr->sync_waiters, 1);
}

bool swv_progress_is_self(struct swv_progress *pr)
{
	return pr->started && pthread_equal(pthread_self(), pr->thread);
}
