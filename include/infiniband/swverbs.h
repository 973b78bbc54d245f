/*
 * swverbs extensions to the verbs API (prefix swv_). Usable from C and C++.
 *
 * Completion counters: the rdma-core 65 calls (ibv_create_comp_cntr & co., declared
 * in <infiniband/verbs.h>) plus, here,
 *   - two attach bits for atomics, and a capability query that reports them;
 *   - swv_comp_cntr_wait: block until a counter reaches a threshold;
 *   - swv_comp_cntr_get_fd / swv_comp_cntr_arm: a pollable fd per counter;
 *   - swv_create_comp_cntr_ext: a counter whose values live in application memory;
 *   - counters that drive work: triggered send WRs and triggered counter operations
 *     (swv_post_send_triggered, swv_triggered_cntr_op, swv_cancel_triggered), and
 *     waiting on many counters at once (swv_comp_cntr_wait_many).
 * Each call has a manual page (docs/man/). Link with -lswverbs.
 */
#ifndef INFINIBAND_SWVERBS_H
#define INFINIBAND_SWVERBS_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Extra ibv_qp_attach_comp_cntr_attr.op_mask bits, RC QPs only. They sit far above
 * the upstream bits (1 << 0 .. 1 << 5) so a future upstream bit cannot collide. */
#define SWV_QP_ATTACH_COMP_CNTR_OP_ATOMIC        (1u << 16) /* requester: CMP_SWP, FETCH_ADD */
#define SWV_QP_ATTACH_COMP_CNTR_OP_REMOTE_ATOMIC (1u << 17) /* responder: incoming atomics */

/* swv_comp_cntr_caps.flags */
enum swv_comp_cntr_cap_flags {
	SWV_COMP_CNTR_CAP_TYPE_BYTES = 1u << 0, /* IBV_COMP_CNTR_TYPE_BYTES supported */
	SWV_COMP_CNTR_CAP_WAIT = 1u << 1,       /* swv_comp_cntr_wait */
	SWV_COMP_CNTR_CAP_FD = 1u << 2,         /* swv_comp_cntr_get_fd, swv_comp_cntr_arm */
	SWV_COMP_CNTR_CAP_APP_MEMORY = 1u << 3, /* swv_create_comp_cntr_ext with addresses */
	SWV_COMP_CNTR_CAP_TRIGGERED = 1u << 4,  /* triggered WRs and counter operations */
	SWV_COMP_CNTR_CAP_WAIT_MANY = 1u << 5,  /* swv_comp_cntr_wait_many */
};

struct swv_comp_cntr_caps {
	uint64_t max_value;               /* values live modulo max_value + 1 */
	uint32_t max_counters;            /* per device context */
	uint32_t supported_qp_attach_ops; /* upstream bits | the two extension bits */
	uint32_t flags;                   /* enum swv_comp_cntr_cap_flags */
	uint32_t reserved;                /* 0 */
};

/* Like ibv_query_comp_cntr_caps, but reports the extension bits and features.
 * Zeroes caps_size bytes, then fails with EINVAL if caps_size is smaller than
 * struct swv_comp_cntr_caps. Returns 0 or an errno value. */
int swv_query_comp_cntr_caps(struct ibv_context *context, struct swv_comp_cntr_caps *caps,
			     size_t caps_size);

/* The errno value swv_comp_cntr_wait returns when the error count changed while it
 * waited. */
#define SWV_COMP_CNTR_WAIT_ERROR EIO

/* Wait until the completion count is >= threshold (returns 0), the error count
 * differs from its value at entry (EIO), or timeout_ms milliseconds pass
 * (ETIMEDOUT). timeout_ms < 0 waits forever, 0 only checks. Spins for a few
 * microseconds, then sleeps without using CPU. EINVAL: NULL counter or threshold
 * above max_value. */
int swv_comp_cntr_wait(struct ibv_comp_cntr *comp_cntr, uint64_t threshold, int timeout_ms);

/* Like swv_comp_cntr_wait, but EIO as soon as the error count differs from err_base,
 * also at entry. Read err_base (ibv_read_err_comp_cntr) before posting the work to
 * wait for, so that an error counted before the call is not missed. */
int swv_comp_cntr_wait_ex(struct ibv_comp_cntr *comp_cntr, uint64_t threshold, uint64_t err_base,
			  int timeout_ms);

/* The counter's event fd (non-blocking, close-on-exec, owned by the counter and
 * closed by ibv_destroy_comp_cntr; do not close it yourself). Created on the first
 * call, in change mode: it becomes readable whenever either value of the counter
 * changes. read(2) of 8 bytes returns a positive number and clears the readiness.
 * Returns the fd, or -1 with errno set. */
int swv_comp_cntr_get_fd(struct ibv_comp_cntr *comp_cntr);

/* Clear the fd's readiness and choose what makes it readable next:
 * threshold == 0: change mode (every change of either value), until re-armed;
 * threshold > 0 : one shot, once the completion count is >= threshold (at once if it
 *                 already is) or the error count changes; then quiet until re-armed.
 * Creates the fd if needed. Returns 0 or an errno value (EINVAL: NULL counter or
 * threshold above max_value). */
int swv_comp_cntr_arm(struct ibv_comp_cntr *comp_cntr, uint64_t threshold);

struct swv_comp_cntr_init_attr_ext {
	uint32_t comp_mask;            /* 0 */
	enum ibv_comp_cntr_type type;  /* IBV_COMP_CNTR_TYPE_WRS or _BYTES */
	uint32_t flags;                /* 0 */
	uint64_t *comp_count_addr;     /* completion count: application memory, or NULL */
	uint64_t *err_count_addr;      /* error count: application memory, or NULL */
};

/* ibv_create_comp_cntr with the two values at application-supplied addresses
 * (8-byte aligned; a 64-byte aligned line of their own is best). The library writes
 * 0 to both at create and updates them with atomic operations; the memory must stay
 * valid until ibv_destroy_comp_cntr. Returns NULL with errno set on failure. */
struct ibv_comp_cntr *swv_create_comp_cntr_ext(struct ibv_context *context,
					       struct swv_comp_cntr_init_attr_ext *attr);

/* ---- Counters that drive work (docs/counters.md, "Counters that drive work") ----
 *
 * A triggered operation is held by the device until the completion count of its
 * trigger counter is >= threshold, then performed once, by swverbs itself (the
 * application need not call anything): triggers on one counter fire in threshold
 * order (equal thresholds in post order), and a count that jumps past several fires
 * each. If the trigger counter's error count changes while an operation is held, the
 * operation does not fire: it completes as an error instead (a WR with
 * IBV_WC_WR_FLUSH_ERR, a counter operation adds 1 to its target's error count), so a
 * failure travels down a chain rather than being executed on. The trigger counter and
 * the QP or target counter must belong to one context. */

/* Post a chain of send WRs, each checked as ibv_post_send checks it and each taking
 * its send-queue slot at once, to be issued as if posted at the moment trig_cntr's
 * count reaches threshold (at once if it already has). A QP that enters the error
 * state first completes them with IBV_WC_WR_FLUSH_ERR; RESET and destroy drop them.
 * Returns 0 or an errno value with *bad_wr at the first WR not posted: EINVAL (NULL
 * argument, no WR, counter of another context, threshold above max_value, QP not in
 * RTS/SQD/SQE/ERR, a WR ibv_post_send refuses), ENOMEM (send queue full). */
int swv_post_send_triggered(struct ibv_qp *qp, struct ibv_send_wr *wr,
			    struct ibv_comp_cntr *trig_cntr, uint64_t threshold,
			    struct ibv_send_wr **bad_wr);

enum swv_trig_cntr_op {
	SWV_TRIG_CNTR_ADD = 0, /* add value to target's completion count (wrapping) */
	SWV_TRIG_CNTR_SET = 1, /* set target's completion count to value */
};

/* When trig_cntr's count reaches threshold, add value to / set target (Portals'
 * triggered CTInc / CTSet), which may fire target's own triggers: chains and trees run
 * without the application. Returns 0, EINVAL (NULL counter, counters of two
 * contexts, threshold above trig_cntr's max_value, unknown op, SET value above
 * target's max_value) or ENOMEM. */
int swv_triggered_cntr_op(struct ibv_comp_cntr *trig_cntr, uint64_t threshold,
			  struct ibv_comp_cntr *target, enum swv_trig_cntr_op op, uint64_t value);

/* Drop every operation still held on trig_cntr (WRs and counter operations): they
 * never happen, produce no completion and count nothing; held WRs free their send
 * slots. Operations whose threshold was already reached are not affected. Sets
 * *ncancelled (if not NULL) to how many were dropped. Returns 0 or EINVAL (NULL). */
int swv_cancel_triggered(struct ibv_comp_cntr *trig_cntr, uint64_t *ncancelled);

/* One counter of swv_comp_cntr_wait_many. */
struct swv_comp_cntr_wait_entry {
	struct ibv_comp_cntr *comp_cntr;
	uint64_t threshold; /* wait for count >= threshold */
	uint64_t err_base;  /* EIO once the error count differs from this */
};

/* swv_comp_cntr_wait_many flags */
#define SWV_COMP_CNTR_WAIT_ANY      0u /* until one entry is reached */
#define SWV_COMP_CNTR_WAIT_ALL      1u /* until every entry is reached */
#define SWV_COMP_CNTR_WAIT_MANY_MAX 4096u

/* Block until any (or, with SWV_COMP_CNTR_WAIT_ALL, every) of the n entries' counters
 * reaches its threshold (0; *index = the lowest entry reached for ANY, 0 for ALL), or
 * an entry's error count differs from its err_base (EIO at once, also at entry;
 * *index = the lowest such entry), or timeout_ms passes (ETIMEDOUT; *index = for ALL
 * the lowest entry not reached, else 0). timeout_ms < 0 waits forever, 0 only
 * checks. Counters may belong to different contexts; the counter fds keep working.
 * EINVAL: NULL entries/index/counter, n 0 or above SWV_COMP_CNTR_WAIT_MANY_MAX, an
 * unknown flag, a threshold above its counter's max_value (*index = that entry). */
int swv_comp_cntr_wait_many(const struct swv_comp_cntr_wait_entry *entries, unsigned n,
			    unsigned flags, int timeout_ms, unsigned *index);

/* The resource_type a parent domain's allocator is called with (ibv_alloc_parent_domain,
 * IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS): which queue the buffer holds. An allocator
 * may answer IBV_ALLOCATOR_USE_DEFAULT; its free is then not called for that buffer. */
#define SWV_RES_TYPE_QP_SQ ((0x5357ull << 32) | 1) /* a QP's send queue ring */
#define SWV_RES_TYPE_QP_RQ ((0x5357ull << 32) | 2) /* a QP's receive queue ring */
#define SWV_RES_TYPE_SRQ   ((0x5357ull << 32) | 3) /* an SRQ's ring (again at each resize) */
#define SWV_RES_TYPE_CQ                                                                            \
	((0x5357ull << 32) | 4) /* a CQ's ring (ibv_create_cq_ex with a                            \
				 * parent domain; again at each resize) */

/* How a swverbs device was configured (for swverbs-info and diagnostics). */
/* swv_device_config.flags */
#define SWV_DEVICE_CFG_AUTH 0x1 /* authenticated wire mode: packets end in a MAC */

enum swv_device_link {
	SWV_DEVICE_LINK_IB = 0,   /* InfiniBand-style port: LIDs, GID fe80::<guid> */
	SWV_DEVICE_LINK_ROCE = 1, /* RoCEv2-style port: Ethernet link layer, ::ffff:a.b.c.d */
};

struct swv_device_config {
	char source[256];        /* "default", "SWVERBS_DEVICES" or the configuration file */
	uint32_t ipv4;           /* the address the device binds, network byte order */
	uint32_t prefix_len;     /* IP subnet = IB subnet */
	uint32_t link;           /* enum swv_device_link */
	uint32_t mtu_bytes;      /* active MTU */
	uint32_t max_cntrs;      /* completion counters per context */
	uint32_t flags;		 /* SWV_DEVICE_CFG_* */
	uint64_t cntr_max_value; /* counters wrap at cntr_max_value + 1 */
};

/* Fill *cfg (zeroing cfg_size bytes first) for a device of ibv_get_device_list.
 * Returns 0, or EINVAL (not a swverbs device, NULL, or cfg_size too small). */
int swv_query_device_config(struct ibv_device *device, struct swv_device_config *cfg,
			    size_t cfg_size);

#ifdef __cplusplus
}
#endif

#endif
