/* Fault-safe copies (core/memsafe.c) and how they share SIGSEGV/SIGBUS with the rest of
 * the process: a fault inside a guarded copy of application memory is an EFAULT return;
 * every other fault reaches the handler that was installed before the first device was
 * opened (SA_SIGINFO or plain), with its address, or the default action when there was
 * none; the signal mask is what it was after a recovered fault. */
#include <infiniband/verbs.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/memsafe.h"

static size_t pg;
static sigjmp_buf app_env;
static volatile sig_atomic_t app_segv, app_bus;
static void *volatile app_addr;

static void app_segv_handler(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	app_segv++;
	app_addr = si->si_addr;
	CHECK_EQ(sig, SIGSEGV);
	siglongjmp(app_env, 1);
}

static void app_bus_handler(int sig)
{
	app_bus++;
	CHECK_EQ(sig, SIGBUS);
	siglongjmp(app_env, 1);
}

static uint8_t *map_none(void)
{
	void *p = mmap(NULL, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	return p;
}

/* A page whose access raises SIGBUS: a shared mapping past the end of an empty file. */
static uint8_t *map_sigbus(void)
{
	FILE *f = tmpfile();
	CHECK_PTR(f);
	void *p = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
	CHECK(p != MAP_FAILED);
	fclose(f);
	return p;
}

static void open_device(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK_PTR(l);
	CHECK_PTR(l[0]);
	struct ibv_context *c = ibv_open_device(l[0]);
	CHECK_PTR(c); /* installs swverbs' handlers; kept open, the test only needs that */
	ibv_free_device_list(l);
}

/* Without a handler of the application's, a guarded fault is still recovered and an
 * unguarded one still kills (default action, or the sanitizer's report). */
static void test_default_action(void)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		open_device();
		uint8_t *none = map_none(), buf[8] = {0};
		CHECK_EQ(swv_copy_to_app(none, buf, sizeof(buf), true), EFAULT);
		CHECK_EQ(swv_copy_from_app(buf, none, sizeof(buf), false), EFAULT);
		fprintf(stderr, "(expected) unguarded fault in the child now:\n");
		*(volatile uint8_t *)none = 1;
		_exit(42); /* survived: wrong */
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	if (WIFEXITED(st)) {
		/* a sanitizer reports and exits non-zero; 42 means no signal happened */
		CHECK(WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 42);
	} else {
		CHECK(WIFSIGNALED(st));
		CHECK(WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGABRT);
	}
}

static void test_chaining(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = app_segv_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	CHECK_OK(sigaction(SIGSEGV, &sa, NULL));
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = app_bus_handler;
	sigemptyset(&sa.sa_mask);
	CHECK_OK(sigaction(SIGBUS, &sa, NULL));

	open_device();
	uint8_t *none = map_none(), *bus = map_sigbus();
	uint8_t buf[64];
	memset(buf, 0x5a, sizeof(buf));

	/* An unguarded fault goes to the application's handler, with its address. */
	if (!sigsetjmp(app_env, 1)) {
		(void)*(volatile uint8_t *)(none + 10);
		CHECK(0);
	}
	CHECK_EQ(app_segv, 1);
	CHECK(app_addr == none + 10);

	/* Guarded copies recover, the application never hears of it. */
	for (int i = 0; i < 100; i++) {
		CHECK_EQ(swv_copy_to_app(none + 100, buf, sizeof(buf), i & 1), EFAULT);
		CHECK_EQ(swv_copy_from_app(buf, none, sizeof(buf), i & 1), EFAULT);
		uint64_t orig = 3;
		CHECK_EQ(swv_atomic_app((uint64_t *)none, i & 1, 1, 0, &orig), EFAULT);
		CHECK_EQ(orig, 3);
		CHECK_EQ(swv_copy_from_app(buf, bus, sizeof(buf), false), EFAULT); /* SIGBUS */
		CHECK_EQ(swv_copy_to_app(bus + 8, buf, 8, true), EFAULT);
	}
	CHECK_EQ(app_segv, 1);
	CHECK_EQ(app_bus, 0);

	/* A copy that reaches past its own range: a copy from a good application buffer
	 * into a bad internal one is a bug of swverbs', not a fault to hide. */
	static uint8_t good[64];
	if (!sigsetjmp(app_env, 1)) {
		(void)swv_copy_from_app(none, good, sizeof(good), false);
		CHECK(0);
	}
	CHECK_EQ(app_segv, 2);
	CHECK(app_addr == none);

	/* SIGBUS outside a guard: the plain handler. */
	if (!sigsetjmp(app_env, 1)) {
		(void)*(volatile uint8_t *)bus;
		CHECK(0);
	}
	CHECK_EQ(app_bus, 1);

	/* A sent SIGSEGV is not a fault, guarded or not: the application's. */
	if (!sigsetjmp(app_env, 1)) {
		raise(SIGSEGV);
		CHECK(0);
	}
	CHECK_EQ(app_segv, 3);

	/* Good copies still copy; the mask is clean after all of it. */
	uint8_t dst[64] = {0};
	CHECK_OK(swv_copy_to_app(dst, buf, sizeof(dst), true));
	CHECK(memcmp(dst, buf, sizeof(dst)) == 0);
	uint64_t w = 10, orig = 0;
	CHECK_OK(swv_atomic_app(&w, false, 5, 0, &orig));
	CHECK_EQ(orig, 10);
	CHECK_EQ(w, 15);
	CHECK_OK(swv_atomic_app(&w, true, 99, 15, &orig));
	CHECK_EQ(orig, 15);
	CHECK_EQ(w, 99);
	CHECK_OK(swv_copy_to_app(dst, buf, 0, false));
	sigset_t cur;
	CHECK_OK(pthread_sigmask(SIG_SETMASK, NULL, &cur));
	CHECK(!sigismember(&cur, SIGSEGV) && !sigismember(&cur, SIGBUS));
	munmap(none, pg);
	munmap(bus, pg);
}

int main(void)
{
	pg = (size_t)sysconf(_SC_PAGESIZE);
	test_default_action();
	test_chaining();
	printf("test_memsafe: OK\n");
	return 0;
}
