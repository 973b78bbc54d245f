/*
 * Fault-safe access to application memory (core/memsafe.h).
 *
 * Recovery: each guarded access records, in a thread-local pointer, a sigjmp_buf and
 * the range of application memory it touches, does the plain memcpy/atomic, and clears
 * the pointer. The SIGSEGV/SIGBUS handler (installed once, on the first device open)
 * jumps back only for a fault the kernel raised (si_code > 0) on this thread while its
 * guard was armed and at an address inside that range; everything else is handed to the
 * handler that was there before, with that handler's SA_SIGINFO convention and mask, so
 * the application's and the sanitizers' handlers keep working, and a process without
 * one still dies of the signal. The common path costs a sigsetjmp that saves no mask
 * (no system call) and two thread-local stores; the mask is restored, on the fault path
 * only, from the ucontext the kernel saved.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "core/memsafe.h"
#include "util/tsan.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ  22
#define MADV_POPULATE_WRITE 23
#endif

/* Faults are matched against the touched range widened to 4 KiB boundaries: a wide
 * access that straddles a page reports an address in the range either way. */
#define GUARD_GRAIN 4096u

struct guard {
	sigjmp_buf env;
	uintptr_t lo, hi; /* inclusive */
	sigset_t mask;	  /* the thread's mask when it faulted, restored after the jump */
};

/* initial-exec: the handler must not reach the TLS block through __tls_get_addr. */
static __thread struct guard *cur_guard __attribute__((tls_model("initial-exec")));

static struct sigaction prev_segv, prev_bus;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static size_t page_size = 4096;
static bool populate_ok;

static struct sigaction *prev_of(int sig)
{
	return sig == SIGBUS ? &prev_bus : &prev_segv;
}

/* The signal was not ours: do what the previous disposition would have done. */
static void chain(int sig, siginfo_t *si, void *uc)
{
	struct sigaction *p = prev_of(sig);
	struct sigaction act = *p;
	bool kernel_fault = si && si->si_code > 0;

	if (act.sa_flags & SA_RESETHAND) {
		memset(p, 0, sizeof(*p));
		p->sa_handler = SIG_DFL;
	}
	if (!(act.sa_flags & SA_SIGINFO) &&
	    (act.sa_handler == SIG_DFL || act.sa_handler == SIG_IGN)) {
		if (act.sa_handler == SIG_IGN && !kernel_fault)
			return; /* a sent signal the process ignores */
		/* Default action (a fault cannot be ignored either): reinstate it; returning
		 * re-executes the faulting instruction, a sent signal is sent again. */
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigemptyset(&dfl.sa_mask);
		sigaction(sig, &dfl, NULL);
		if (!kernel_fault)
			raise(sig);
		return;
	}
	/* Run it under the mask it asked for. */
	sigset_t mask = act.sa_mask, old;
	if (!(act.sa_flags & SA_NODEFER))
		sigaddset(&mask, sig);
	pthread_sigmask(SIG_BLOCK, &mask, &old);
	if (act.sa_flags & SA_NODEFER) {
		sigset_t s;
		sigemptyset(&s);
		sigaddset(&s, sig);
		pthread_sigmask(SIG_UNBLOCK, &s, NULL);
	}
	if (act.sa_flags & SA_SIGINFO)
		act.sa_sigaction(sig, si, uc);
	else
		act.sa_handler(sig);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
	struct guard *g = cur_guard;

	if (g && si && si->si_code > 0 && (uintptr_t)si->si_addr >= g->lo &&
	    (uintptr_t)si->si_addr <= g->hi) {
		cur_guard = NULL;
		if (uc) {
			g->mask = ((ucontext_t *)uc)->uc_sigmask;
		} else {
			pthread_sigmask(SIG_SETMASK, NULL, &g->mask);
			sigdelset(&g->mask, sig);
		}
		siglongjmp(g->env, 1);
	}
	chain(sig, si, uc);
}

static void init_once(void)
{
	long ps = sysconf(_SC_PAGESIZE);
	if (ps > 0)
		page_size = (size_t)ps;

	/* MADV_POPULATE_* (Linux 5.14) answers EINVAL on older kernels for any range. */
	void *p = mmap(NULL, page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED) {
		populate_ok = madvise(p, page_size, MADV_POPULATE_WRITE) == 0;
		munmap(p, page_size);
	}

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	/* SA_ONSTACK: a stack overflow still reaches the previous handler on its
	 * alternate stack, if the thread has one (ASan's does). */
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &prev_segv);
	sigaction(SIGBUS, &sa, &prev_bus);
}

void swv_memsafe_init(void)
{
	pthread_once(&once, init_once);
}

enum gop { GOP_COPY, GOP_CAS, GOP_FADD };

/* The atomics themselves, out of ThreadSanitizer's sight: its atomic operations take an
 * internal lock around the access, which a fault's jump would leave held (the next
 * atomic on that word then deadlocks). They are a peer's DMA to it anyway. */
static __attribute__((noinline, no_sanitize("thread"))) uint64_t
app_atomic(enum gop op, uint64_t *p, uint64_t a, uint64_t b)
{
	if (op == GOP_FADD)
		return __atomic_fetch_add(p, a, __ATOMIC_SEQ_CST);
	uint64_t expected = b;
	__atomic_compare_exchange_n(p, &expected, a, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return expected; /* the value found, swapped or not */
}

/* One guarded access. noinline: the sigsetjmp frame must be this function's own, and
 * nothing the caller keeps in registers may live across the jump. */
static __attribute__((noinline)) int guarded(enum gop op, void *dst, const void *src, size_t n,
					     uintptr_t app, bool remote, uint64_t a, uint64_t b,
					     uint64_t *orig)
{
	struct guard g;

	g.lo = app & ~(uintptr_t)(GUARD_GRAIN - 1);
	g.hi = (app + (n - 1)) | (GUARD_GRAIN - 1);
	if (g.hi < app)
		g.hi = UINTPTR_MAX;
	if (sigsetjmp(g.env, 0)) {
		/* Back from the handler: SIGSEGV/SIGBUS is still blocked. */
		pthread_sigmask(SIG_SETMASK, &g.mask, NULL);
#ifndef SWV_TSAN
		(void)remote;
#else
		/* ThreadSanitizer clears the thread's ignore state to run a handler and
		 * restores it when the handler returns, which a jump skips: the BEGIN
		 * below is already undone. */
#endif
		return EFAULT;
	}
	cur_guard = &g;
	atomic_signal_fence(memory_order_seq_cst);
	if (remote)
		SWV_REMOTE_ACCESS_BEGIN();
	switch (op) {
	case GOP_COPY:
		memcpy(dst, src, n);
		break;
	case GOP_CAS:
	case GOP_FADD:
		*orig = app_atomic(op, dst, a, b);
		break;
	}
	if (remote)
		SWV_REMOTE_ACCESS_END();
	atomic_signal_fence(memory_order_seq_cst);
	cur_guard = NULL;
	return 0;
}

int swv_copy_to_app(void *dst, const void *src, size_t n, bool remote)
{
	if (n == 0)
		return 0;
	return guarded(GOP_COPY, dst, src, n, (uintptr_t)dst, remote, 0, 0, NULL);
}

int swv_copy_from_app(void *dst, const void *src, size_t n, bool remote)
{
	if (n == 0)
		return 0;
	return guarded(GOP_COPY, dst, src, n, (uintptr_t)src, remote, 0, 0, NULL);
}

int swv_atomic_app(uint64_t *p, bool cmp_swap, uint64_t swap_add, uint64_t cmp, uint64_t *orig)
{
	uint64_t found = 0;
	int rc = guarded(cmp_swap ? GOP_CAS : GOP_FADD, p, NULL, sizeof(*p), (uintptr_t)p, true,
			 swap_add, cmp, &found);
	if (!rc)
		*orig = found;
	return rc;
}

/* ---- registration-time check ---- */

/* Every page of [lo, hi) mapped (mincore fails with ENOMEM on a hole). */
static bool all_mapped(uintptr_t lo, uintptr_t hi)
{
	unsigned char vec[256];

	while (lo < hi) {
		size_t n = (hi - lo) / page_size;
		if (n > sizeof(vec))
			n = sizeof(vec);
		if (mincore((void *)lo, n * page_size, vec))
			return false;
		lo += n * page_size;
	}
	return true;
}

int swv_mem_check(const void *addr, size_t len, bool write)
{
	swv_memsafe_init();
	if (!populate_ok)
		return swv_mem_check_maps(addr, len, write);

	uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)(page_size - 1);
	uintptr_t last = (uintptr_t)addr + (len - 1);
	uintptr_t hi = (last | (page_size - 1)) + 1;
	if (hi == 0)
		return EFAULT; /* the last page of the address space is never user memory */
	/* Faulting the pages in is what a device's pinning (get_user_pages) does; it
	 * fails exactly where the device's would: a hole (ENOMEM), no permission or an
	 * I/O mapping (EINVAL), a page that would raise SIGBUS (EFAULT, EHWPOISON). */
	for (int tries = 0;; tries++) {
		if (!madvise((void *)lo, hi - lo, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ))
			return 0;
		if (errno == EINTR && tries < 16)
			continue;
		if (errno == ENOMEM && all_mapped(lo, hi))
			return ENOMEM; /* out of memory, not a hole */
		return EFAULT;
	}
}

int swv_mem_check_maps(const void *addr, size_t len, bool write)
{
	uintptr_t cur = (uintptr_t)addr, last = cur + (len - 1);
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	bool line_start = true;
	int rc = EFAULT;

	if (!f)
		return 0;
	/* Lines are sorted by address: walk them while they cover [cur, last]. */
	while (fgets(line, sizeof(line), f)) {
		bool fresh = line_start;
		unsigned long s, e;
		char perm[5];

		line_start = strchr(line, '\n') != NULL;
		if (!fresh || sscanf(line, "%lx-%lx %4s", &s, &e, perm) != 3)
			continue; /* the tail of a long line */
		if (e <= cur)
			continue;
		if (s > cur || perm[0] != 'r' || (write && perm[1] != 'w'))
			break; /* a hole, or a mapping without the right */
		if (e - 1 >= last) {
			rc = 0;
			break;
		}
		cur = e;
	}
	fclose(f);
	return rc;
}
