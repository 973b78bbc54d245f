/*
 * The per-context progress thread (DESIGN.md section 5). Owner: core/progress.
 *
 * It receives and validates every packet, dispatches it to the QP (swv_qp_rx),
 * runs QP timers (swv_qp_timer), releases packets held by the fault injector, and
 * sleeps in epoll_wait until a socket is readable, the doorbell eventfd is kicked or
 * the earliest deadline comes.
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
	int epfd;                      /* sockets + evfd */
	int evfd;                      /* doorbell */
	_Atomic bool stop;
	_Atomic uint64_t sleep_until;  /* ns deadline the thread sleeps to; UINT64_MAX = none */
	_Atomic uint64_t epoch;        /* loop iterations completed, for swv_progress_sync */
	/* receive statistics (progress thread writes, anyone reads) */
	_Atomic uint64_t rx_packets, rx_bad_crc, rx_malformed, rx_no_qp;
};

int swv_progress_start(struct swv_context *ctx);
void swv_progress_stop(struct swv_context *ctx);
int swv_progress_add_endpoint(struct swv_context *ctx, struct swv_endpoint *ep);
/* Ask the thread to run timers by deadline_ns (absolute monotonic); wakes it only if
 * it sleeps past that. */
void swv_progress_kick(struct swv_context *ctx, uint64_t deadline_ns);
/* Return once the thread has finished any packet or timer work begun before the
 * call (used before freeing a QP it may be touching). Must not be called from the
 * progress thread itself. */
void swv_progress_sync(struct swv_context *ctx);
bool swv_progress_is_self(struct swv_context *ctx);

#endif
