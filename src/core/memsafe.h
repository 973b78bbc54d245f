/*
 * Fault-safe access to application memory (docs/design.md, "Memory safety boundary").
 *
 * An HCA pins registered pages, so what the application does to its mappings later
 * (munmap, mprotect) cannot make the device fault. swverbs cannot pin: it copies with
 * the CPU, in the progress thread or a posting thread. These routines make such a copy
 * end in an error instead of a SIGSEGV/SIGBUS that would kill the process:
 * a fault raised while a copy runs on application memory returns EFAULT from the copy
 * (a thread-local sigjmp_buf armed only around the copy); any other fault goes to the
 * handler that was installed before swverbs' (the application's, a sanitizer's, or the
 * default action). Only core/mr.c calls them.
 */
#ifndef SWV_CORE_MEMSAFE_H
#define SWV_CORE_MEMSAFE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Install the SIGSEGV/SIGBUS handlers (once per process; later calls do nothing). */
void swv_memsafe_init(void);

/* Whether [addr, addr + len) is mapped in full and readable, and writable too when
 * 'write': 0, EFAULT (a hole, no permission, or a page that cannot be faulted in), or
 * ENOMEM (all mapped, but memory ran out while faulting it in). The pages are faulted
 * in (writably for 'write'), as a device's pinning would. len > 0, no wrap. */
int swv_mem_check(const void *addr, size_t len, bool write);
/* The same answer read from /proc/self/maps alone (no fault-in): the fallback for
 * kernels without MADV_POPULATE_*, exposed for its unit test. 0 when /proc cannot be
 * read (the copies stay guarded either way). */
int swv_mem_check_maps(const void *addr, size_t len, bool write);

/* memcpy, except that a fault on the application side (dst for _to_app, src for
 * _from_app) returns EFAULT; some bytes may have been copied. 0 on success.
 * 'remote' hides the copy from ThreadSanitizer as a peer's DMA (util/tsan.h). */
int swv_copy_to_app(void *dst, const void *src, size_t n, bool remote);
int swv_copy_from_app(void *dst, const void *src, size_t n, bool remote);
/* 8-byte atomic on application memory p (8-aligned): compare-and-swap when cmp_swap
 * (swap_add = the new value), else fetch-and-add; *orig = the value found. 0 or EFAULT
 * (memory untouched then). */
int swv_atomic_app(uint64_t *p, bool cmp_swap, uint64_t swap_add, uint64_t cmp, uint64_t *orig);

#endif
