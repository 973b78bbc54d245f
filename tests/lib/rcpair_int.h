/*
 * What unit tests look at inside an RC pair side (rcpair.h): its port's endpoint, the
 * intra-host link's counts, and packets forged with the library's own builder. Unit
 * tests only: this needs the internal headers of src/.
 */
#ifndef SWV_TEST_RCPAIR_INT_H
#define SWV_TEST_RCPAIR_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "link/endpoint.h"
#include "link/shm.h"
#include "rcpair.h"

/* Port 1's endpoint of s's context. */
struct swv_endpoint *swvt_rc_ep(const struct swvt_rc_side *s);
/* The CPU-time clock of s's context's progress thread. */
clockid_t swvt_rc_progress_clock(const struct swvt_rc_side *s);
/* The counts of that endpoint's intra-host link (it must have one). */
struct swv_shm_stats swvt_rc_shm_stats(const struct swvt_rc_side *s);
/* One RC packet of opcode op (SWV_OP_WRITE_ONLY or SWV_OP_READ_REQUEST) flagged placed,
 * with no payload, from a's endpoint to b's QP at psn: a RETH for 8 bytes at b->buf
 * under rkey, ACK requested. udp: a datagram from a's socket (where nobody can have
 * placed anything); else sent as a's endpoint sends (the ring when there is one). */
void swvt_rc_send_forged(const struct swvt_rc_side *a, const struct swvt_rc_side *b, uint8_t op,
			 uint32_t psn, uint32_t rkey, bool udp);
/* The same with the RETH's va and length given (a WRITE_MIDDLE or _LAST carries no
 * RETH: they are then unused). */
void swvt_rc_send_forged_at(const struct swvt_rc_side *a, const struct swvt_rc_side *b, uint8_t op,
			    uint32_t psn, uint32_t rkey, uint64_t va, uint32_t len, bool udp);
/* Exits with 77 (the skip code of the direct placement tests) when the environment
 * turns the intra-host link or its direct placement off. */
void swvt_rc_need_direct(void);

#endif
