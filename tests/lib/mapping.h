/*
 * Anonymous mappings for tests that unmap pages of registered memory. A hole left by
 * munmap is where the kernel puts the next small mapping if it is the highest free gap
 * (a sanitizer's allocator maps all the time), and a test that writes into "unmapped"
 * memory would then hit someone else's page. Mapped far below everything else, the
 * region's holes are never the highest gap, so they stay holes.
 */
#ifndef SWV_TEST_MAPPING_H
#define SWV_TEST_MAPPING_H

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* len bytes (whole pages), readable and writable, zeroed; munmap when done, so the
 * next call finds the same place free. */
static inline uint8_t *swvt_map_isolated(size_t len)
{
	const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	void *probe = mmap(NULL, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(probe != MAP_FAILED);
	munmap(probe, pg);
	uintptr_t below = (uintptr_t)probe;
	for (uintptr_t gib = 16; gib < 80; gib++) {
		uintptr_t gap = gib << 30;
		if (below <= gap + len)
			break;
		uintptr_t hint = (below - gap - len) & ~(uintptr_t)(pg - 1);
		void *p = mmap((void *)hint, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (p != MAP_FAILED)
			return p;
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	return p;
}

#endif
