/* Monotonic time in nanoseconds: the one clock all timers use. */
#ifndef SWV_UTIL_CLOCK_H
#define SWV_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t swv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
