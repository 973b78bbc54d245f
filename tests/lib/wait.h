/*
 * Bounded waits on a counter another thread advances. The machine may be loaded, so a
 * test never assumes a thread ran within a fixed time: it waits for the effect, with a
 * limit far beyond any scheduling delay, and fails only when the limit passes.
 */
#ifndef SWV_TEST_WAIT_H
#define SWV_TEST_WAIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define SWVT_WAIT_LIMIT_NS 5000000000ull

static inline uint64_t swvt_wait_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Until *c >= v (exact: false) or *c == v (exact: true); false once the limit passed. */
static inline bool swvt_wait_counter(_Atomic uint64_t *c, uint64_t v, bool exact)
{
	const uint64_t until = swvt_wait_now_ns() + SWVT_WAIT_LIMIT_NS;
	for (;;) {
		uint64_t now = atomic_load(c);
		if (exact ? now == v : now >= v)
			return true;
		if (swvt_wait_now_ns() > until)
			return false;
		usleep(100);
	}
}

static inline bool swvt_wait_at_least(_Atomic uint64_t *c, uint64_t v)
{
	return swvt_wait_counter(c, v, false);
}

static inline bool swvt_wait_eq(_Atomic uint64_t *c, uint64_t v)
{
	return swvt_wait_counter(c, v, true);
}

#endif
