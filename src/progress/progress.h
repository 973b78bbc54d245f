/*
 * The per-context progress thread (DESIGN.md section 5). Owner: core/progress.
 *
 * It receives and validates every packet, dispatches it to the QP (swv_qp_rx),
 * runs QP timers (swv_qp_timer), releases packets held by the fault injector, reads
 * the netdev watch (port state changes become PORT_ACTIVE/PORT_ERR events), and
 * sleeps in epoll_pwait2 (ns resolution, for 10 us RNR timers) until a socket is
 * readable, the doorbell eventfd is kicked or the earliest deadline comes.
 *
 * Threading rules
 *  - One iteration = wake, receive/dispatch, timer scan, flush delayed packets,
 *    compute the next deadline. 'seq' is odd while an iteration runs and even while
 *    the thread sleeps (or has exited); QP pointers and table entries read during an
 *    iteration are only used within it.
 *  - Timers: every iteration walks ctx->qp_list (under ctx->qp_lock) and reads each
 *    QP's timer_deadline, so a QP only has to store its deadline and then call
 *    swv_progress_kick(ctx, deadline) -- always, it is cheap: one CAS at most and a
 *    syscall only when the thread would otherwise sleep past the deadline.
 *    swv_qp_timer must clear or advance timer_deadline: a deadline left in the past
 *    makes the thread spin on that QP. Kicks are wake-up hints, not a timer queue: a
 *    deadline only survives if it is also stored where the thread looks every
 *    iteration (a QP's timer_deadline, the fault injector's hold queue).
 *  - swv_progress_sync: after unpublishing an object (seq_cst store), waits until
 *    no iteration that could have seen it is still running (futex on 'seq').
 */
#ifndef SWV_PROGRESS_PROGRESS_H
#define SWV_PROGRESS_PROGRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct swv_context;
struct swv_endpoint;

struct swv_progress {
	pthread_t thread;
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
	_Atomic uint64_t epoch;        /* loop iterations completed (statistics) */
	_Atomic uint64_t last_iter_ns; /* when the last iteration looked at the clock (tests) */
	/* Held by whoever receives and dispatches packets: the thread for each whole
	 * iteration, an application thread for one swv_progress_assist pass. 'seq' is odd
	 * exactly while it is held, and 'rx' (receive buffers) is used only under it.
	 * Lock order: work_lock, then qp->lock, then cq->lock. */
	pthread_mutex_t work_lock;
	struct swv_progress_rx *rx;
	_Atomic uint32_t seq;          /* odd during an iteration; futex word for sync */
	_Atomic uint32_t sync_waiters; /* threads blocked in swv_progress_sync */
	/* Bumped (release) once an endpoint is fully set up, before it joins epoll; read
	 * (acquire) after every wait. The kernel already orders epoll_ctl before the event,
	 * but C11 (and ThreadSanitizer) need this edge to see the endpoint's fields. */
	_Atomic uint32_t ep_gen;
	/* receive statistics (progress thread writes, anyone reads) */
	_Atomic uint64_t rx_packets, rx_bad_crc, rx_malformed, rx_no_qp;
	_Atomic uint64_t wakeups;      /* eventfd writes by kicks (statistics) */
	_Atomic uint64_t timer_arms;   /* timerfd arms by swv_progress_arm (statistics) */
};

/* Create the epoll set, the doorbell and the thread. Returns 0 or a positive errno
 * (everything undone on failure). */
int swv_progress_start(struct swv_context *ctx);
/* Stop and join the thread, close its fds. Idempotent; safe after a failed start. */
void swv_progress_stop(struct swv_context *ctx);
/* Add a socket to the epoll set (any thread; takes effect at once). Returns 0 or errno. */
int swv_progress_add_endpoint(struct swv_context *ctx, struct swv_endpoint *ep);
/* Ask the thread to run timers by deadline_ns (absolute monotonic); wakes it only if
 * it sleeps past that. Safe from any thread, including the progress thread. */
void swv_progress_kick(struct swv_context *ctx, uint64_t deadline_ns);
/* Like swv_progress_kick, but a hint that need not wake the thread now: a deadline
 * more than SWV_PROGRESS_ARM_SLACK_NS away is handed to a timerfd instead (one syscall,
 * no context switch; none at all while an earlier arm is pending), so a posting
 * thread that arms the ACK timer for every message does not wake the progress thread
 * for each of them. Same guarantee: an iteration runs at or after deadline_ns, no
 * later than the deadline plus scheduling delay. Safe from any thread. */
#define SWV_PROGRESS_ARM_SLACK_NS 1000000ull
void swv_progress_arm(struct swv_context *ctx, uint64_t deadline_ns);
/* Return once the thread has finished any packet or timer work begun before the
 * call (used before freeing a QP it may be touching). From the progress thread
 * itself it returns at once (the caller is that work). */
void swv_progress_sync(struct swv_context *ctx);
bool swv_progress_is_self(struct swv_context *ctx);
/* Application-assisted progress: if nobody is receiving for ctx right now, receive and
 * dispatch what its sockets hold, without blocking. Called by ibv_poll_cq on an empty
 * CQ, so a busy-polling application completes its own work instead of waiting for the
 * progress thread to be scheduled (on a machine with few cores, a poller can starve it
 * for milliseconds). Returns the number of packets processed, or -1 if another thread
 * holds the work lock -- the caller should then yield the CPU, because that holder may
 * be waiting for the very core the caller spins on. Never call it while holding a QP
 * or CQ lock. */
int swv_progress_assist(struct swv_context *ctx);

#endif
