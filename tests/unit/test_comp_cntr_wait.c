/*
 * Completion counters, swverbs extensions: swv_comp_cntr_wait (threshold, timeout,
 * error report, no CPU burn while asleep, no lost wake-ups), the counter fd with
 * epoll (change mode, armed threshold, errors), and a counter in a MAP_SHARED
 * mapping watched by another process with plain loads.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "cntr.h"
#include "inproc.h"
#include "core/comp_cntr.h"

static struct ibv_context *ctx;

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ms(void)
{
	return now_ns(CLOCK_MONOTONIC) / 1000000ull;
}

/* A helper thread that sleeps, then changes the counter. */
struct later {
	struct ibv_comp_cntr *c;
	int delay_ms;
	int what; /* 0: inc by amount, 1: inc_err, 2: data-path success, 3: set,
		   * 4: data-path error once a waiter sleeps */
	uint64_t amount;
	unsigned times;
	uint64_t done_ns; /* CLOCK_MONOTONIC when the last change was made */
};

static void *later_thread(void *p)
{
	struct later *l = p;
	for (unsigned i = 0; i < (l->times ? l->times : 1); i++) {
		usleep((useconds_t)l->delay_ms * 1000);
		switch (l->what) {
		case 0:
			CHECK_OK(ibv_inc_comp_cntr(l->c, l->amount));
			break;
		case 1:
			CHECK_OK(ibv_inc_err_comp_cntr(l->c, l->amount));
			break;
		case 2:
			swv_comp_cntr_complete(l->c, true, 0);
			break;
		case 3:
			CHECK_OK(ibv_set_comp_cntr(l->c, l->amount));
			break;
		default:
			/* 4: once a waiter sleeps on the futex, count an error */
			while (atomic_load(&to_swv_cntr(l->c)->nwaiters) == 0)
				usleep(100);
			swv_comp_cntr_complete(l->c, false, 0);
			break;
		}
	}
	l->done_ns = now_ns(CLOCK_MONOTONIC);
	return NULL;
}

static pthread_t start_later(struct later *l)
{
	pthread_t th;
	CHECK_OK(pthread_create(&th, NULL, later_thread, l));
	return th;
}

static void test_wait_args(void)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	CHECK_EQ(swv_comp_cntr_wait(NULL, 0, 0), EINVAL);
	/* Already reached, whatever the timeout. */
	CHECK_OK(swv_comp_cntr_wait(c, 0, 0));
	CHECK_OK(swv_comp_cntr_wait(c, 0, -1));
	CHECK_OK(ibv_set_comp_cntr(c, 10));
	CHECK_OK(swv_comp_cntr_wait(c, 10, 0));
	CHECK_OK(swv_comp_cntr_wait(c, 3, -1));
	/* timeout 0: a single check */
	CHECK_EQ(swv_comp_cntr_wait(c, 11, 0), ETIMEDOUT);
	/* A count already reached wins over an error count that changes. */
	CHECK_OK(ibv_inc_err_comp_cntr(c, 1));
	CHECK_OK(swv_comp_cntr_wait(c, 10, 100));
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

static void test_wait_timeout(void)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	uint64_t t0 = mono_ms();
	CHECK_EQ(swv_comp_cntr_wait(c, 1, 100), ETIMEDOUT);
	uint64_t dt = mono_ms() - t0;
	CHECK(dt >= 100);
	CHECK(dt < 5000); /* generous: a loaded CI machine */
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

static void test_wait_reached(void)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	/* By increments through the API, the data path and a plain set. */
	for (int what = 0; what <= 3; what++) {
		if (what == 1)
			continue; /* inc_err: test_wait_error */
		CHECK_OK(ibv_set_comp_cntr(c, 0));
		struct later l = {.c = c, .delay_ms = 20, .what = what, .amount = 5, .times = 5};
		if (what == 3)
			l.times = 1;
		pthread_t th = start_later(&l);
		uint64_t want = what == 0 ? 25 : 5;
		uint64_t t0 = mono_ms();
		CHECK_OK(swv_comp_cntr_wait(c, want, 10000));
		CHECK(mono_ms() - t0 < 9000);
		uint64_t v;
		CHECK_OK(ibv_read_comp_cntr(c, &v));
		CHECK(v >= want);
		CHECK_OK(pthread_join(th, NULL));
	}
	/* Forever (timeout < 0) also returns when reached. */
	CHECK_OK(ibv_set_comp_cntr(c, 0));
	struct later l = {.c = c, .delay_ms = 30, .what = 0, .amount = 1};
	pthread_t th = start_later(&l);
	CHECK_OK(swv_comp_cntr_wait(c, 1, -1));
	CHECK_OK(pthread_join(th, NULL));
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

static void test_wait_error(void)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	/* Errors counted before the wait began do not end it. */
	CHECK_OK(ibv_inc_err_comp_cntr(c, 4));
	CHECK_EQ(swv_comp_cntr_wait(c, 1, 20), ETIMEDOUT);
	CHECK_EQ(SWV_COMP_CNTR_WAIT_ERROR, EIO);

	/* An error counted while waiting ends it at once. The helper thread's error may
	 * land before the wait starts (a loaded machine): wait_ex with the error count
	 * read beforehand covers both, which is what the extra call is for. */
	uint64_t e0;
	CHECK_OK(ibv_read_err_comp_cntr(c, &e0));
	struct later l = {.c = c, .delay_ms = 30, .what = 1, .amount = 1};
	pthread_t th = start_later(&l);
	uint64_t t0 = mono_ms();
	CHECK_EQ(swv_comp_cntr_wait_ex(c, 1, e0, 10000), SWV_COMP_CNTR_WAIT_ERROR);
	CHECK(mono_ms() - t0 < 9000);
	CHECK_OK(pthread_join(th, NULL));

	/* A data-path failure reports the same way, with no timeout. */
	CHECK_OK(ibv_read_err_comp_cntr(c, &e0));
	th = start_later(&(struct later){.c = c, .delay_ms = 30, .what = 1, .amount = 1});
	CHECK_EQ(swv_comp_cntr_wait_ex(c, 1000, e0, -1), EIO);
	CHECK_OK(pthread_join(th, NULL));

	/* The plain wait: an error while it certainly sleeps (the helper waits until
	 * the waiter is registered) ends it with EIO. */
	th = start_later(&(struct later){.c = c, .delay_ms = 0, .what = 4});
	CHECK_EQ(swv_comp_cntr_wait(c, 1000, 10000), EIO);
	CHECK_OK(pthread_join(th, NULL));

	/* wait_ex: a difference already at entry is reported at once; a count already
	 * reached still wins; NULL is EINVAL. */
	CHECK_EQ(swv_comp_cntr_wait_ex(c, 1, e0, -1), EIO);
	CHECK_EQ(swv_comp_cntr_wait_ex(c, 1, e0, 0), EIO);
	CHECK_OK(ibv_set_comp_cntr(c, 5));
	CHECK_OK(swv_comp_cntr_wait_ex(c, 5, e0, -1));
	CHECK_EQ(swv_comp_cntr_wait_ex(NULL, 1, 0, 0), EINVAL);
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

/* A long wait sleeps: its thread's CPU time stays far below the wall time. */
static void test_wait_no_spin(void)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	uint64_t cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID), w0 = now_ns(CLOCK_MONOTONIC);
	CHECK_EQ(swv_comp_cntr_wait(c, 1, 300), ETIMEDOUT);
	uint64_t cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0, wall = now_ns(CLOCK_MONOTONIC) - w0;
	printf("wait 300 ms: wall %.1f ms, cpu %.3f ms\n", wall / 1e6, cpu / 1e6);
	CHECK(wall >= 300000000ull);
	CHECK(cpu < 30000000ull); /* < 10% of the wait, in practice ~0.1 ms */

	/* Same while a thread keeps changing the counter below the threshold: the
	 * waiter is not woken for updates that cannot satisfy it. */
	struct later l = {.c = c, .delay_ms = 1, .what = 0, .amount = 1, .times = 200};
	pthread_t th = start_later(&l);
	cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	CHECK_OK(swv_comp_cntr_wait(c, 200, 20000));
	cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	printf("wait for 200 slow increments: cpu %.3f ms\n", cpu / 1e6);
	CHECK(cpu < 30000000ull);
	CHECK_OK(pthread_join(th, NULL));
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

/* Wake-up latency of a sleeping waiter (printed; bounded only generously). */
static void test_wait_latency(void)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	enum { N = 41 };
	uint64_t lat[N];
	for (int i = 0; i < N; i++) {
		/* 5 ms is well past the spin phase: the waiter is asleep on the futex. */
		struct later l = {.c = c, .delay_ms = 5, .what = 2};
		pthread_t th = start_later(&l);
		CHECK_OK(swv_comp_cntr_wait(c, (uint64_t)i + 1, 10000));
		uint64_t t = now_ns(CLOCK_MONOTONIC);
		CHECK_OK(pthread_join(th, NULL));
		lat[i] = t > l.done_ns ? t - l.done_ns : 0;
	}
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++)
			if (lat[j] < lat[i]) {
				uint64_t x = lat[i];
				lat[i] = lat[j];
				lat[j] = x;
			}
	printf("wake-up latency: median %.1f us, max %.1f us\n", lat[N / 2] / 1e3, lat[N - 1] / 1e3);
	/* Not a speed assertion (that is the benchmark's job, and CI machines are loaded):
	 * only a sleeper that is not woken by the update at all, and finds out by some
	 * slow polling interval or its 10 s timeout, fails here. */
	CHECK(lat[N / 2] < 100000000ull);
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

/* Enough rounds to catch a lost wake-up, few enough for a loaded sanitizer run. */
#define PP_ROUNDS 5000

/* Ping-pong between two threads through two counters: any lost wake-up hangs
 * one side until its timeout and fails. */
struct pp {
	struct ibv_comp_cntr *mine, *theirs;
	int rounds;
	bool first;
};

static void *pp_thread(void *p)
{
	struct pp *a = p;
	for (int i = 1; i <= a->rounds; i++) {
		if (a->first) {
			CHECK_OK(ibv_inc_comp_cntr(a->mine, 1));
			CHECK_OK(swv_comp_cntr_wait(a->theirs, (uint64_t)i, 10000));
		} else {
			CHECK_OK(swv_comp_cntr_wait(a->theirs, (uint64_t)i, 10000));
			swv_comp_cntr_complete(a->mine, true, 0);
		}
	}
	return NULL;
}

static void test_wait_pingpong(void)
{
	struct ibv_comp_cntr *x = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS),
			     *y = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct pp a = {.mine = x, .theirs = y, .rounds = PP_ROUNDS, .first = true};
	struct pp b = {.mine = y, .theirs = x, .rounds = PP_ROUNDS, .first = false};
	pthread_t ta, tb;
	uint64_t t0 = mono_ms();
	CHECK_OK(pthread_create(&ta, NULL, pp_thread, &a));
	CHECK_OK(pthread_create(&tb, NULL, pp_thread, &b));
	CHECK_OK(pthread_join(ta, NULL));
	CHECK_OK(pthread_join(tb, NULL));
	uint64_t vx, vy;
	CHECK_OK(ibv_read_comp_cntr(x, &vx));
	CHECK_OK(ibv_read_comp_cntr(y, &vy));
	CHECK_EQ(vx, PP_ROUNDS);
	CHECK_EQ(vy, PP_ROUNDS);
	printf("ping-pong: %d rounds in %llu ms\n", PP_ROUNDS, (unsigned long long)(mono_ms() - t0));
	CHECK_OK(ibv_destroy_comp_cntr(x));
	CHECK_OK(ibv_destroy_comp_cntr(y));
}

/* Several waiters with different thresholds on one counter. */
struct waiter {
	struct ibv_comp_cntr *c;
	uint64_t thr, err_base;
	int ret;
};

static void *waiter_thread(void *p)
{
	struct waiter *w = p;
	w->ret = swv_comp_cntr_wait_ex(w->c, w->thr, w->err_base, 10000);
	return NULL;
}

static void test_wait_many(void)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct waiter w[6];
	pthread_t th[6];
	for (int i = 0; i < 6; i++) {
		w[i] = (struct waiter){.c = c, .thr = (uint64_t)(6 - i) * 10, .err_base = 0, .ret = -1};
		CHECK_OK(pthread_create(&th[i], NULL, waiter_thread, &w[i]));
	}
	usleep(20000);
	for (int i = 0; i < 60; i++) {
		swv_comp_cntr_complete(c, true, 0);
		if (i % 7 == 0)
			usleep(1000);
	}
	for (int i = 0; i < 6; i++) {
		CHECK_OK(pthread_join(th[i], NULL));
		CHECK_EQ(w[i].ret, 0);
	}
	/* An error wakes every waiter with EIO. */
	for (int i = 0; i < 6; i++) {
		w[i] = (struct waiter){.c = c, .thr = 1000 + (uint64_t)i, .err_base = 0, .ret = -1};
		CHECK_OK(pthread_create(&th[i], NULL, waiter_thread, &w[i]));
	}
	usleep(20000);
	swv_comp_cntr_complete(c, false, 0);
	for (int i = 0; i < 6; i++) {
		CHECK_OK(pthread_join(th[i], NULL));
		CHECK_EQ(w[i].ret, EIO);
	}
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

/* ---- fd ---- */

static int epfd_for(int fd)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0);
	struct epoll_event ev = {.events = EPOLLIN};
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) ? errno : 0);
	return ep;
}

static bool readable(int ep, int timeout_ms)
{
	struct epoll_event ev;
	int n = epoll_wait(ep, &ev, 1, timeout_ms);
	CHECK(n >= 0);
	return n == 1;
}

static void drain(int fd)
{
	uint64_t v = 0;
	CHECK_EQ(read(fd, &v, sizeof(v)), (ssize_t)sizeof(v));
	CHECK(v >= 1);
	/* Reading cleared the readiness. */
	CHECK_EQ(read(fd, &v, sizeof(v)), -1);
	CHECK_EQ(errno, EAGAIN);
}

static void test_fd(void)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);

	errno = 0;
	CHECK_EQ(swv_comp_cntr_get_fd(NULL), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(swv_comp_cntr_arm(NULL, 1), EINVAL);

	CHECK_OK(ibv_inc_comp_cntr(c, 3)); /* before the fd exists: no event */
	int fd = swv_comp_cntr_get_fd(c);
	CHECK(fd >= 0);
	CHECK_EQ(swv_comp_cntr_get_fd(c), fd); /* one fd per counter */
	int ep = epfd_for(fd);
	CHECK(!readable(ep, 0));

	/* Change mode: every kind of change makes it readable. */
	CHECK_OK(ibv_inc_comp_cntr(c, 1));
	CHECK(readable(ep, 1000));
	drain(fd);
	CHECK(!readable(ep, 0));
	swv_comp_cntr_complete(c, true, 0);
	swv_comp_cntr_complete(c, true, 0);
	CHECK(readable(ep, 1000));
	drain(fd);
	CHECK_OK(ibv_inc_err_comp_cntr(c, 1));
	CHECK(readable(ep, 1000));
	drain(fd);
	CHECK_OK(ibv_set_comp_cntr(c, 0));
	CHECK(readable(ep, 1000));
	drain(fd);

	/* A change made by another thread wakes a blocked epoll_wait. */
	struct later l = {.c = c, .delay_ms = 30, .what = 2};
	pthread_t th = start_later(&l);
	CHECK(readable(ep, 10000));
	CHECK_OK(pthread_join(th, NULL));
	drain(fd);

	/* Armed threshold: arming clears pending readiness; quiet below the threshold. */
	CHECK_OK(ibv_inc_comp_cntr(c, 1)); /* pending change event, value 2 */
	CHECK_OK(swv_comp_cntr_arm(c, 5));
	CHECK(!readable(ep, 0));
	CHECK_OK(ibv_inc_comp_cntr(c, 2)); /* 4 */
	CHECK(!readable(ep, 20));
	swv_comp_cntr_complete(c, true, 0); /* 5: crosses */
	CHECK(readable(ep, 1000));
	drain(fd);
	/* One shot: quiet afterwards until re-armed. */
	CHECK_OK(ibv_inc_comp_cntr(c, 10));
	CHECK_OK(ibv_inc_err_comp_cntr(c, 1));
	CHECK(!readable(ep, 20));

	/* Arming a threshold that is already met: readable at once. */
	CHECK_OK(swv_comp_cntr_arm(c, 15));
	CHECK(readable(ep, 0));
	drain(fd);

	/* An error count change fires an armed fd below the threshold. */
	CHECK_OK(swv_comp_cntr_arm(c, 1000));
	CHECK(!readable(ep, 0));
	swv_comp_cntr_complete(c, false, 0);
	CHECK(readable(ep, 1000));
	drain(fd);

	/* Re-arming replaces the previous threshold. */
	CHECK_OK(swv_comp_cntr_arm(c, 1000));
	CHECK_OK(swv_comp_cntr_arm(c, 20));
	CHECK_OK(ibv_inc_comp_cntr(c, 5)); /* 20 */
	CHECK(readable(ep, 1000));
	drain(fd);

	/* Threshold reached from another thread while blocked in epoll_wait. */
	CHECK_OK(swv_comp_cntr_arm(c, 30));
	struct later l2 = {.c = c, .delay_ms = 2, .what = 2, .times = 10};
	th = start_later(&l2);
	CHECK(readable(ep, 10000));
	uint64_t v;
	CHECK_OK(ibv_read_comp_cntr(c, &v));
	CHECK_EQ(v, 30); /* fired exactly at the crossing, not before */
	CHECK_OK(pthread_join(th, NULL));
	drain(fd);

	/* arm(0): back to change mode. */
	CHECK_OK(swv_comp_cntr_arm(c, 0));
	CHECK(!readable(ep, 0));
	CHECK_OK(ibv_inc_comp_cntr(c, 1));
	CHECK(readable(ep, 1000));
	drain(fd);

	close(ep);
	CHECK_OK(ibv_destroy_comp_cntr(c)); /* closes the fd */
	CHECK_EQ(fcntl(fd, F_GETFD), -1);
	CHECK_EQ(errno, EBADF);

	/* arm before get_fd creates the fd in armed mode. */
	c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	CHECK_OK(swv_comp_cntr_arm(c, 2));
	fd = swv_comp_cntr_get_fd(c);
	CHECK(fd >= 0);
	ep = epfd_for(fd);
	CHECK_OK(ibv_inc_comp_cntr(c, 1));
	CHECK(!readable(ep, 20));
	CHECK_OK(ibv_inc_comp_cntr(c, 1));
	CHECK(readable(ep, 1000));
	close(ep);
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

/* Many threshold crossings racing arming: every arming whose threshold is reached
 * fires exactly while the fd is watched (no lost fd wake-up). */
static void test_fd_race(void)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	int fd = swv_comp_cntr_get_fd(c);
	CHECK(fd >= 0);
	int ep = epfd_for(fd);
	struct later l = {.c = c, .delay_ms = 0, .what = 2, .times = 20000};
	pthread_t th = start_later(&l);
	for (uint64_t thr = 100; thr <= 20000; thr += 100) {
		CHECK_OK(swv_comp_cntr_arm(c, thr));
		CHECK(readable(ep, 10000));
		uint64_t v;
		CHECK_OK(ibv_read_comp_cntr(c, &v));
		CHECK(v >= thr);
	}
	CHECK_OK(pthread_join(th, NULL));
	close(ep);
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

/* ---- application memory, shared with another process ---- */

static void test_shared_mapping(void)
{
	enum { N = 100000, E = 37 };
	uint8_t *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(map != MAP_FAILED);
	memset(map, 0xee, 4096);
	uint64_t *comp = (uint64_t *)(map + 64), *err = (uint64_t *)(map + 128);
	struct swv_comp_cntr_init_attr_ext a = {
		.type = IBV_COMP_CNTR_TYPE_WRS, .comp_count_addr = comp, .err_count_addr = err};
	struct ibv_comp_cntr *c = swv_create_comp_cntr_ext(ctx, &a);
	CHECK_PTR(c);
	CHECK_EQ(*comp, 0);
	CHECK_EQ(*err, 0);

	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* The watcher: plain loads only, no library calls. */
		volatile uint64_t *vc = comp, *ve = err;
		uint64_t last = 0, deadline = mono_ms() + 30000;
		while (*vc != N || *ve != E) {
			uint64_t v = *vc;
			if (v < last || v > N) /* monotonic, never past the end */
				_exit(2);
			last = v;
			if (mono_ms() > deadline)
				_exit(3);
		}
		_exit(0);
	}
	for (int i = 0; i < N; i++) {
		if (i % 2)
			CHECK_OK(ibv_inc_comp_cntr(c, 1));
		else
			swv_comp_cntr_complete(c, true, 0);
		if (i < E)
			swv_comp_cntr_complete(c, false, 0);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st));
	CHECK_EQ(WEXITSTATUS(st), 0);
	uint64_t v;
	CHECK_OK(ibv_read_comp_cntr(c, &v));
	CHECK_EQ(v, N);
	CHECK_EQ(*comp, N);
	CHECK_EQ(map[63], 0xee); /* nothing written around the values */
	CHECK_EQ(map[72], 0xee);
	CHECK_OK(ibv_destroy_comp_cntr(c));
	/* After destroy the memory is the application's again, values left in place. */
	CHECK_EQ(*comp, N);
	CHECK_EQ(*err, E);
	munmap(map, 4096);
}

int main(void)
{
	ctx = swvt_open_first_device();

	test_wait_args();
	test_wait_timeout();
	test_wait_reached();
	test_wait_error();
	test_wait_no_spin();
	test_wait_latency();
	test_wait_pingpong();
	test_wait_many();
	test_fd();
	test_fd_race();
	test_shared_mapping();

	CHECK_OK(ibv_close_device(ctx));
	printf("test_comp_cntr_wait: ok\n");
	return 0;
}
