/*
 * The per-context progress loop and its thread (docs/design.md, "The progress loop").
 * Owner: progress. It knows endpoints (link/endpoint.h), its epoll set, a doorbell and a
 * timerfd, and nothing of packets, QPs or contexts: its owner registers a table of calls
 * at swv_progress_start (struct swv_progress_ops; the context's is the transport's
 * receive story, transport/receive.c) and the loop runs them.
 *
 * It receives every endpoint registered with it and hands each batch to ops->rx, runs
 * ops->timers, releases packets held by the fault injector, calls ops->watch when the
 * watched fd (the context's netdev watch) is readable, and sleeps in epoll_pwait2 (ns
 * resolution, for 10 us RNR timers) until a socket is readable, the doorbell eventfd is
 * kicked or the earliest deadline comes.
 *
 * Threading rules
 *  - One iteration = wake, receive/dispatch, timers, flush delayed packets, compute the
 *    next deadline, then ops->after outside every lock. 'seq' is odd while an
 *    iteration runs and even while the thread sleeps (or has exited); what the owner's
 *    calls look up during an iteration (QP pointers, table entries) is used only
 *    within it.
 *  - Timers: every iteration calls ops->timers, which looks at every deadline the
 *    owner keeps (the context's: each QP's timer_deadline), so a QP only has to store
 *    its deadline and then call swv_progress_kick(pr, deadline) -- always, it is
 *    cheap: one CAS at most and a syscall only when the thread would otherwise sleep
 *    past the deadline. ops->timers must clear or advance what it ran: a deadline left
 *    in the past makes the thread spin. Kicks are wake-up hints, not a timer queue: a
 *    deadline only survives if it is also stored where the thread looks every
 *    iteration (what ops->timers reads, the fault injector's hold queue).
 *  - swv_progress_sync: after unpublishing an object (seq_cst store), waits until
 *    no iteration that could have seen it is still running (futex on 'seq').
 *  - Application threads that wait for completions receive too (swv_progress_drive,
 *    under work_lock). While one does so in a tight loop it holds a lease, and the
 *    thread sleeps with its sockets out of its epoll set (muted) until the lease's
 *    end, a kick or a release; see the fields under "Who receives". The lease's
 *    holder runs the timers too: each of its passes runs ops->timers once
 *    'timers_due' has come, so a muted thread wakes for no QP deadline (each message
 *    arms one, and its ACK makes it stale long before it comes).
 */
#ifndef SWV_PROGRESS_PROGRESS_H
#define SWV_PROGRESS_PROGRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct swv_endpoint;
struct swv_rx_pkt;

/* What the owner of a loop registers (a static const table, every call set;
 * swv_progress_start). */
struct swv_progress_ops {
	/* The owner's state, passed to every call below, made from swv_progress_start's
	 * arg before the thread starts; NULL (errno set) makes the start fail. */
	void *(*open)(void *arg);
	/* Frees it, once the thread has ended (swv_progress_stop). */
	void (*close)(void *owner);
	/* A batch received on ep (ring: taken from its intra-host inbox, else from its
	 * socket), work_lock held: check each datagram and hand it to its destination
	 * before returning -- they point into receive buffers the next batch reuses.
	 * Returns how many of them were packets (the others were doorbells of the
	 * intra-host link, link/shm.h). */
	unsigned (*rx)(void *owner, struct swv_endpoint *ep, struct swv_rx_pkt *pkts, unsigned n,
		       bool ring);
	/* At the start of every application pass and every iteration of the thread,
	 * work_lock held, before anything is received: the owner sends what an earlier
	 * pass left for later (the context's: ACKs kept after a receive completion,
	 * transport/receive.c). */
	void (*begin)(void *owner);
	/* Run what is due at now (the thread, or an application pass once 'timers_due'
	 * has come; work_lock held); returns the earliest deadline still pending,
	 * UINT64_MAX for none. */
	uint64_t (*timers)(void *owner, uint64_t now);
	/* After each iteration of the thread and each application pass, outside every
	 * lock of the loop (the context issues its triggered operations here). */
	void (*after)(void *owner);
	/* The watched fd is readable (the thread, outside the work section: it may wait
	 * for the kernel and touches no QP). */
	void (*watch)(void *owner);
};

/* Receive endpoints (the context's ports) a loop can hold; core/context.c checks
 * that its SWV_MAX_QP_PORTS fits. */
#define SWV_PROGRESS_MAX_EPS 64

struct swv_progress {
	pthread_t thread;
	const struct swv_progress_ops *ops;
	void *owner; /* ops->open's result; both set by start before the thread exists */
	/* The receive endpoints (ports): eps[i] is written before neps is raised past i
	 * (release, under ep_lock), and entries never change or leave until stop, so
	 * readers load neps (acquire) and read eps[0..neps) without a lock. */
	pthread_mutex_t ep_lock;
	_Atomic unsigned neps;
	struct swv_endpoint *eps[SWV_PROGRESS_MAX_EPS];
	bool started;                  /* thread exists; written only by start/stop, which run
					* when no other thread uses the context (open/close) */
	int epfd;                      /* sockets + evfd */
	int evfd;                      /* doorbell */
	int tfd;                       /* timerfd: wakes the thread by a deadline that
					* swv_progress_arm chose not to wake it for now */
	pthread_mutex_t timer_lock;    /* serialises timer_at updates with timerfd_settime */
	_Atomic uint64_t timer_at;     /* absolute ns the timerfd is armed to; UINT64_MAX =
					* disarmed or already fired */
	_Atomic bool stop;
	/* ns deadline the thread sleeps to; UINT64_MAX = indefinitely; 0 = awake (an
	 * iteration is running and will look at 'pending' before it sleeps). */
	_Atomic uint64_t sleep_until;
	_Atomic uint64_t pending;      /* earliest deadline kicked since the thread looked */
	/* Earliest deadline of the owner's timers (swv_progress_arm; what ops->timers
	 * answered): whoever runs ops->timers empties it (UINT64_MAX) first and puts
	 * back what the scan answers (run_timers says why no deadline is lost). An unmuted thread sleeps no later than it; a muted one ignores
	 * it, because the lease's holder looks at it on every pass. */
	_Atomic uint64_t timers_due;
	_Atomic uint64_t epoch;        /* loop iterations completed: bumped with release at
					* the end of each, read with acquire by
					* swv_progress_quiesce (and statistics) */
	_Atomic uint64_t last_iter_ns; /* when the last iteration looked at the clock (tests) */
	/* Held by whoever receives and dispatches packets: the thread for each whole
	 * iteration, an application thread for one swv_progress_assist pass. 'seq' is odd
	 * exactly while it is held, and 'rx' (receive buffers) is used only under it.
	 * Lock order: work_lock, then qp->lock, then cq->lock. */
	pthread_mutex_t work_lock;
	/* The thread is waiting for work_lock: application passes (swv_progress_assist)
	 * then step aside instead of trying it. A mutex is not fair -- an application
	 * polling in a tight loop re-took the lock the moment it let go, before the woken
	 * thread ran, and kept the thread (its timers, its retransmissions) waiting for
	 * as long as the loop ran. Written by the thread only; read relaxed (a hint). */
	_Atomic bool thread_waiting;
	struct swv_progress_rx *rx;
	_Atomic uint32_t seq;          /* odd during an iteration; futex word for sync */
	_Atomic uint32_t sync_waiters; /* threads blocked in swv_progress_sync */
	/* Bumped (release) once an endpoint is fully set up, before it joins epoll; read
	 * (acquire) after every wait. The kernel already orders epoll_ctl before the event,
	 * but C11 (and ThreadSanitizer) need this edge to see the endpoint's fields. */
	_Atomic uint32_t ep_gen;
	/* receive statistics (written under work_lock, so by one thread at a time; anyone
	 * reads): rx_packets by the loop (what ops->rx reports), the drops by ops->rx */
	_Atomic uint64_t rx_packets, rx_bad_crc, rx_malformed, rx_no_qp;
	/* receive calls made by the thread: system calls, and takes from an inbox of the
	 * intra-host link that found packets (link/shm.h; an empty look is not counted) */
	_Atomic uint64_t rx_calls_thread;
	_Atomic uint64_t rx_calls_app;    /* ... by application threads (swv_progress_drive) */
	_Atomic uint64_t app_passes;      /* receive passes run by application threads */
	_Atomic uint64_t wakeups;      /* eventfd writes by kicks (statistics) */
	_Atomic uint64_t timer_arms;   /* timerfd arms by swv_progress_arm (statistics) */

	/* ---- Who receives (docs/design.md, "Whoever waits makes progress") ----
	 * Read on every empty poll and still counter read, hence a line of their own.
	 *
	 * sq_outstanding: send WQEs posted and not yet retired, over all QPs of the
	 * context (+1 per WQE queued by post_send, -1 when swv_req_complete_head retires
	 * one, -(tail - head) when RESET or destroy drops a queue); changed under the
	 * QP's lock, read lock-free. While > 0, ACKs or responses are on their way.
	 * rq_posted: receive WQEs posted and not yet consumed, over every RQ and SRQ of
	 * the context (kept by the rings themselves, core/qp.h swv_wq_retire; changed
	 * under each ring's lock, read lock-free). While both are 0 nothing the caller
	 * posted can complete, and a driver whose pass took packets from a socket hands
	 * receiving back (swv_progress_drive).
	 * rx_hot_until: ns until which packets are "expected soon": set to now +
	 * SWV_PROGRESS_HOT_NS by every receive pass that got packets (thread or
	 * application, under work_lock); a driver that finds it expired CASes it to 0 so
	 * that later idle polls need not read the clock.
	 * drive_until / last_drive_ns: the lease of an application thread that is
	 * receiving in a tight loop (passes less than SWV_PROGRESS_BUSY_GAP_NS apart):
	 * until drive_until the thread keeps its sockets out of its epoll set and leaves
	 * receiving to that driver. Written by drivers (relaxed: a hint); released (0,
	 * seq_cst) by a thread about to block, which then wakes the progress thread if
	 * 'muted' -- the thread stores muted = true (seq_cst) before it reads drive_until,
	 * so one of the two sees the other.
	 * lease_ns: the lease's length, SWV_PROGRESS_LEASE_NS (swv_progress_test_lease
	 * changes it). muted: the sockets are out of the thread's epoll set. Written only
	 * by the thread. */
	_Alignas(64) _Atomic int64_t sq_outstanding;
	_Atomic int64_t rq_posted;
	_Atomic uint64_t rx_hot_until;
	_Atomic uint64_t drive_until;
	_Atomic uint64_t last_drive_ns;
	_Atomic uint64_t lease_ns;
	_Atomic bool muted;
	/* Test hook (swv_progress_test_norx): the thread never receives. */
	_Atomic bool test_norx;
};

/* Create the epoll set, the doorbell and the thread, which runs ops (kept: a static
 * const table) on ops->open(arg); watch_fd (or -1) joins the epoll set for
 * ops->watch. Returns 0 or a positive errno (everything undone on failure). */
int swv_progress_start(struct swv_progress *pr, const struct swv_progress_ops *ops, void *arg,
		       int watch_fd);
/* Stop and join the thread, close the owner's state (ops->close) and the fds.
 * Idempotent; safe after a failed start. */
void swv_progress_stop(struct swv_progress *pr);
/* Add a socket to the epoll set (any thread; takes effect at once). An endpoint that is
 * not a multicast group's is a receive endpoint for good (a port: application passes
 * and the inbox loop read it too, mute takes it out of the set); ENOSPC beyond
 * SWV_PROGRESS_MAX_EPS of them. Returns 0 or errno. */
int swv_progress_add_endpoint(struct swv_progress *pr, struct swv_endpoint *ep);
/* Take a socket out of the epoll set (a multicast group's; the ports stay for the
 * loop's life). The thread may still hold an event for it: swv_progress_quiesce
 * before closing it. */
void swv_progress_del_endpoint(struct swv_progress *pr, struct swv_endpoint *ep);
/* Return once the thread has completed an iteration that began after the call: it no
 * longer holds anything it saw before (an epoll event of a removed socket, a QP
 * taken from a list). Wakes the thread for it. From the thread itself, returns at
 * once. Never call it while holding a QP or CQ lock or the work lock. */
void swv_progress_quiesce(struct swv_progress *pr);
/* Ask the thread to run timers by deadline_ns (absolute monotonic); wakes it only if
 * it sleeps past that. Safe from any thread, including the progress thread. */
void swv_progress_kick(struct swv_progress *pr, uint64_t deadline_ns);
/* Like swv_progress_kick, but a muted thread is not woken for it: it takes the
 * deadline at its next look at the lease (at most lease << SWV_PROGRESS_LEASE_STRETCH,
 * 800 us, after the last). For work that a pass of the lease's holder does anyway,
 * which the thread need only do once the holder stops calling. Safe from any thread. */
void swv_progress_kick_lazy(struct swv_progress *pr, uint64_t deadline_ns);
/* A deadline of the owner's timers (what ops->timers reads), stored there (seq_cst)
 * before the call: it joins 'timers_due'. A deadline more than
 * SWV_PROGRESS_ARM_SLACK_NS away is handed to a timerfd rather than waking the
 * thread now (one syscall, no context switch; none at all while an earlier arm is
 * pending), so a posting thread that arms the ACK timer for every message does not
 * wake the progress thread for each of them; none of that while the thread is muted
 * or awake. Guarantee: ops->timers runs at or after deadline_ns, in a pass of the
 * lease's holder or in an iteration of the thread, no later than the deadline plus
 * scheduling delay -- or, when the holder stops calling without releasing, than the
 * thread's next look at the lease (see swv_progress_kick_lazy). Safe from any
 * thread, the progress thread included (a deadline it sets after its own scan, in
 * ops->after, is kept so). */
#define SWV_PROGRESS_ARM_SLACK_NS 1000000ull
void swv_progress_arm(struct swv_progress *pr, uint64_t deadline_ns);
/* Return once the thread has finished any packet or timer work begun before the
 * call (used before freeing a QP it may be touching). From the progress thread
 * itself it returns at once (the caller is that work). */
void swv_progress_sync(struct swv_progress *pr);
bool swv_progress_is_self(struct swv_progress *pr);
/* One receive pass by an application thread: if nobody is receiving for pr right now,
 * receive and dispatch what its sockets hold, without blocking. Returns the number of
 * packets processed, or -1 if another thread holds the work lock. Unconditional (a
 * system call per socket); waiters call swv_progress_drive instead. Never call it
 * while holding a QP or CQ lock. */
int swv_progress_assist(struct swv_progress *pr);
/* Process everything that reached pr's endpoints before the call: waits for a pass under
 * way, then runs one of its own over every inbox and socket. release_held: then the
 * packets the fault injector holds for transmission leave at once. Returns the packet
 * count (0 from the progress thread itself, which is that pass). Never call it while
 * holding a QP or CQ lock. */
int swv_progress_settle(struct swv_progress *pr, bool release_held);

/* Whoever waits makes progress (docs/design.md): called by every call through which
 * an application learns of completions when it found nothing new (an empty
 * ibv_poll_cq / start_poll / next_poll, a counter read whose value stood still, the
 * spin of swv_comp_cntr_wait). Runs a receive pass only when progress is wanted --
 * send WQEs outstanding on the context, or packets received within the last
 * SWV_PROGRESS_HOT_NS -- so an idle poll makes no system call; a tight loop of
 * passes takes the lease that lets the progress thread sleep meanwhile, and a pass
 * that took packets from a socket, after which the context has neither send WQEs
 * outstanding nor receives posted, gives it back at once (what still arrives then is
 * for the thread). Returns as
 * swv_progress_assist (0 when no pass was wanted); on -1 the caller should yield the
 * CPU, because the holder may be waiting for the very core the caller spins on.
 * Never call it while holding a QP or CQ lock. */
#define SWV_PROGRESS_HOT_NS	 1000000ull /* packets "expected soon" after one came */
#define SWV_PROGRESS_LEASE_NS	 100000ull /* a driver's lease: the thread's takeover delay */
#define SWV_PROGRESS_SPIN_NS	 50000ull /* after inbox traffic: poll before sleeping */
#define SWV_PROGRESS_BUSY_GAP_NS 50000ull   /* passes closer than this are a tight loop */
/* A muted thread looks at a lease its holder keeps renewing less and less often, at
 * most every lease << SWV_PROGRESS_LEASE_STRETCH (800 us): the longest it takes to
 * notice that an application stopped calling without releasing (docs/design.md,
 * "The muted thread's looks"). */
#define SWV_PROGRESS_LEASE_STRETCH 3
int swv_progress_drive(struct swv_progress *pr);
/* The calling thread is about to block (futex, completion channel, counter fd) or
 * arms an event: give up any driver's lease so the progress thread receives again,
 * waking it if it sleeps with its sockets muted. Cheap when no lease is held. */
void swv_progress_release(struct swv_progress *pr);

/* Whether swv_progress_drive might run a pass: loads only, no clock. A lapsed
 * rx_hot_until still answers true until a drive clears it, so callers that skip the
 * drive on false must still drive now and then on true (the counter read does, every
 * SWV_CNTR_READ_STILL reads). */
static inline bool swv_progress_maybe_wanted(struct swv_progress *pr)
{
	/* One test of both words (a counter read is this and a load): a count below 0,
	 * which a retire racing its add can show for a moment, costs one pass at most. */
	uint64_t sq = (uint64_t)atomic_load_explicit(&pr->sq_outstanding, memory_order_relaxed);
	return (sq | atomic_load_explicit(&pr->rx_hot_until, memory_order_relaxed)) != 0;
}

/* Send WQEs queued (+n) or retired/dropped (-n) on a QP of the context (qp->lock held). */
static inline void swv_progress_sq_add(struct swv_progress *pr, int64_t n)
{
	atomic_fetch_add_explicit(&pr->sq_outstanding, n, memory_order_relaxed);
}

/* Test hook, internal (unit tests only; no public API or environment setting): with
 * on, the context's progress thread stops receiving for good -- its sockets leave its
 * epoll set and stay out -- while it still runs timers. Only application threads
 * (swv_progress_drive) then receive, which is what tests of "whoever waits makes
 * progress" need. Returns once the thread has muted its sockets. */
void swv_progress_test_norx(struct swv_progress *pr, bool on);
/* Test hook, internal: the context's driver lease becomes ns long. A test that needs
 * the thread muted by a polling loop sets one long enough that the thread, whenever
 * it gets a CPU on a loaded machine, still finds the lease held. */
void swv_progress_test_lease(struct swv_progress *pr, uint64_t ns);

/* Test hooks, internal (the fuzzers in tests/fuzz): hold the receive work section as
 * one thread iteration does -- while held nobody else receives and the thread runs no
 * timers -- and hand datagrams to the receive path exactly as a receive pass hands
 * them over (ops->rx: for a context, parse, QPN lookup on ep's socket, grouped per QP into
 * swv_qp_rx_batch).
 * pkts[i].buf must stay valid for the call; src is the sender's address as the socket
 * reported it. test_rx only between test_hold and test_release; neither may be called
 * while holding a QP or CQ lock, and no QP may be destroyed in between (destroy waits
 * for the section to end). */
void swv_progress_test_hold(struct swv_progress *pr);
void swv_progress_test_rx(struct swv_progress *pr, struct swv_endpoint *ep, struct swv_rx_pkt *pkts,
			  unsigned n);
void swv_progress_test_release(struct swv_progress *pr);

#endif
