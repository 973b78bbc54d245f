/*
 * Seeded fault injector on the transmit path. Owner: net.
 * SWVERBS_FAULT="seed=N,drop=P,dup=P,reorder=P,corrupt=P,delay=P[,delay_us=U]" with P in
 * percent (may be fractional). Off (NULL injector) unless the variable is set, so the
 * data path pays one NULL test.
 */
#ifndef SWV_NET_FAULT_H
#define SWV_NET_FAULT_H

#include <stdint.h>
#include <sys/uio.h>
#include <netinet/in.h>

struct swv_fault;

/* NULL when SWVERBS_FAULT is unset or empty (errno = 0), or when it is malformed
 * (errno = EINVAL, reason logged): check errno to tell the two apart, or use
 * swv_fault_from_env. */
struct swv_fault *swv_fault_create_from_env(void);
struct swv_fault *swv_fault_create(const char *spec); /* for tests; NULL + errno on error */
void swv_fault_destroy(struct swv_fault *f);

/* Additions (net). Keys besides the documented ones: reorder_us=U, how long a
 * reordered packet waits for a successor before it is released anyway (default
 * 1000). Omitted probabilities are 0; seed defaults to 1. */

/* *out = injector, or NULL when SWVERBS_FAULT is unset/empty. Returns 0 or EINVAL. */
int swv_fault_from_env(struct swv_fault **out);

enum {
	SWV_FAULT_DROP = 1u << 0,
	SWV_FAULT_DUP = 1u << 1,
	SWV_FAULT_REORDER = 1u << 2,
	SWV_FAULT_CORRUPT = 1u << 3,
	SWV_FAULT_DELAY = 1u << 4,
};

struct swv_fault_decision {
	unsigned what;      /* SWV_FAULT_* bits; DROP excludes the others, DELAY excludes REORDER */
	uint64_t bit_rand;  /* picks the bit to flip when CORRUPT */
};

/* Draw the fate of the next packet. Thread-safe (the injector has its own lock, so
 * endpoints may share it); deterministic for a given seed and call sequence. */
void swv_fault_decide(struct swv_fault *f, struct swv_fault_decision *d);
uint64_t swv_fault_delay_ns(const struct swv_fault *f);
uint64_t swv_fault_reorder_timeout_ns(const struct swv_fault *f);

struct swv_fault_stats {
	uint64_t packets, dropped, duplicated, reordered, corrupted, delayed;
};
void swv_fault_get_stats(struct swv_fault *f, struct swv_fault_stats *st);

#endif
