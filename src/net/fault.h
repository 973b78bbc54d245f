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

/* NULL when SWVERBS_FAULT is unset or empty. */
struct swv_fault *swv_fault_create_from_env(void);
struct swv_fault *swv_fault_create(const char *spec); /* for tests; NULL + errno on error */
void swv_fault_destroy(struct swv_fault *f);

#endif
