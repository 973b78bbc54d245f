/*
 * Device objects: one per configured device, created once per process by the first
 * ibv_get_device_list and never freed (the list is what callers free). Owner: core.
 *
 * Unmodified programs load vendor libraries (libmlx5, libefa) that read the
 * rdma-core verbs_device wrapper around ibv_device, so a device is laid out as a
 * 712-byte verbs_device whose ops (+664) and sysfs (+696) pointers are NULL.
 */
#ifndef SWV_CORE_DEVICE_H
#define SWV_CORE_DEVICE_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

#include "net/config.h"

struct swv_device {
	struct ibv_device ibdev;          /* must be first (664 bytes) */
	void *verbs_device_ops;           /* +664: always NULL */
	uint8_t verbs_device_rest[40];    /* +672..711: refcount, entry, sysfs, core_support = 0 */
	const struct swv_dev_config *cfg; /* immutable after load */
	unsigned index;                   /* ibv_get_device_index */
	uint64_t guid;                    /* host order */
};

/* The limits ibv_query_device advertises are in core/limits.h. */
/* Where user space ends, for the implicit ODP MR (core/mr.c): x86-64 user addresses
 * are below 2^47 (with 5-level paging only for mappings asked for above), and an
 * access above it is out of the MR's bounds -- a non-canonical address would raise a
 * #GP that names no fault address, which the fault-safe copies cannot attribute. */
#if defined(__x86_64__)
#define SWV_USER_VA_LIMIT (1ull << 47)
#else
#define SWV_USER_VA_LIMIT (1ull << 48)
#endif
#define SWV_DEV_VENDOR_ID    0xffffff       /* rxe's "no vendor": claims nobody's hardware */
#define SWV_DEV_VENDOR_PART  0x5357         /* "SW" */

_Static_assert(sizeof(struct ibv_device) == 664, "ibv_device layout");

static inline struct swv_device *to_swv_device(struct ibv_device *d)
{
	return (struct swv_device *)d;
}

/* The process-wide configuration and device array (loaded once, thread-safe). */
const struct swv_config *swv_config_get(void);
/* Returns 0 and the device array, or a positive errno if the configuration is bad. */
int swv_devices_get(struct swv_device **devs, unsigned *n);
/* True if d is one of this process's swverbs devices (guards against foreign or
 * stale pointers handed to the exported functions). */
bool swv_device_valid(const struct ibv_device *d);

#endif
