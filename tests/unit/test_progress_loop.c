/* The progress loop on its own, with no context: an owner's table of calls
 * (struct swv_progress_ops) is all it runs. Received datagrams reach ops->rx with their
 * bytes (from the thread and from a settling application pass), the deadline
 * ops->timers answers brings the loop back to run it, ops->after follows the work, the
 * watched fd reaches ops->watch, the owner's state is opened once and closed by stop, a
 * failed open fails the start with its errno, and the receive endpoints are bounded.
 * While an application pass holds the lease, a deadline armed comes to that pass's
 * ops->timers and the muted thread does not wake for it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "link/endpoint.h"
#include "progress/progress.h"
#include "util/clock.h"
#include "wait.h"

struct owner {
	int opened, closed;
	int watch_fd; /* read end of the pipe the loop watches */
	_Atomic uint64_t rx_calls, rx_pkts;
	_Atomic bool rx_from_thread;   /* a batch was handed over on the loop's thread */
	_Atomic bool rx_bad;	       /* a batch arrived that was not as sent */
	_Atomic uint64_t deadline;     /* the owner's timer: 0 = none */
	_Atomic uint64_t timer_ran_at; /* the 'now' the timer ran at */
	_Atomic bool timer_on_thread;  /* ... on the loop's thread */
	_Atomic uint64_t after_calls, watch_calls, begin_calls;
	_Atomic uint32_t begun_seq; /* pr->seq when ops->begin last ran (work_lock held) */
	struct swv_progress *pr;
};

static void *o_open(void *arg)
{
	struct owner *o = arg;
	o->opened++;
	return o;
}

static void o_close(void *owner)
{
	((struct owner *)owner)->closed++;
}

static unsigned o_rx(void *owner, struct swv_endpoint *ep, struct swv_rx_pkt *pkts, unsigned n,
		     bool ring)
{
	struct owner *o = owner;
	(void)ep;
	for (unsigned i = 0; i < n; i++)
		if (ring || pkts[i].len != 8 || memcmp(pkts[i].buf, "datagram", 8))
			atomic_store(&o->rx_bad, true);
	/* every pass begins with ops->begin: in the same work section ('seq' unchanged) */
	if (atomic_load(&o->begun_seq) != atomic_load(&o->pr->seq))
		atomic_store(&o->rx_bad, true);
	if (swv_progress_is_self(o->pr))
		atomic_store(&o->rx_from_thread, true);
	atomic_fetch_add(&o->rx_calls, 1);
	atomic_fetch_add(&o->rx_pkts, n);
	return n;
}

static uint64_t o_timers(void *owner, uint64_t now)
{
	struct owner *o = owner;
	uint64_t d = atomic_load(&o->deadline);
	if (!d)
		return UINT64_MAX;
	if (d > now)
		return d; /* not yet: the loop must come back by then */
	atomic_store(&o->timer_ran_at, now);
	atomic_store(&o->timer_on_thread, swv_progress_is_self(o->pr));
	atomic_store(&o->deadline, 0); /* ran: clear it, or the loop would spin */
	return UINT64_MAX;
}

static void o_begin(void *owner)
{
	struct owner *o = owner;
	atomic_store(&o->begun_seq, atomic_load(&o->pr->seq));
	atomic_fetch_add(&o->begin_calls, 1);
}

static void o_after(void *owner)
{
	atomic_fetch_add(&((struct owner *)owner)->after_calls, 1);
}

static void o_watch(void *owner)
{
	struct owner *o = owner;
	char c;
	while (read(o->watch_fd, &c, 1) == 1)
		;
	atomic_fetch_add(&o->watch_calls, 1);
}

static const struct swv_progress_ops ops = {
    .open = o_open,
    .close = o_close,
    .rx = o_rx,
    .begin = o_begin,
    .timers = o_timers,
    .after = o_after,
    .watch = o_watch,
};

static void *fail_open(void *arg)
{
	(void)arg;
	errno = EMFILE;
	return NULL;
}

static void never_close(void *owner)
{
	CHECK(owner == NULL); /* a state never opened is never closed */
}

static const struct swv_progress_ops failing_ops = {
    .open = fail_open,
    .close = never_close,
    .rx = o_rx,
    .begin = o_begin,
    .timers = o_timers,
    .after = o_after,
    .watch = o_watch,
};

static void send_to(int s, const struct swv_endpoint *ep)
{
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(ep->port)};
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK_EQ(sendto(s, "datagram", 8, 0, (struct sockaddr *)&to, sizeof(to)), (ssize_t)8);
}

int main(void)
{
	static struct swv_progress pr, failed;
	static struct owner o, of;
	struct in_addr lo = {.s_addr = htonl(INADDR_LOOPBACK)};
	int pfd[2];

	/* A failed open fails the start with its errno and leaves nothing to stop. */
	CHECK_EQ(swv_progress_start(&failed, &failing_ops, &of, -1), EMFILE);
	CHECK(!failed.started);
	swv_progress_stop(&failed);

	CHECK_OK(pipe2(pfd, O_NONBLOCK | O_CLOEXEC));
	o.watch_fd = pfd[0];
	o.pr = &pr;
	CHECK_OK(swv_progress_start(&pr, &ops, &o, pfd[0]));
	CHECK_EQ(o.opened, 1);
	CHECK(pr.owner == &o);

	/* The watched fd. */
	CHECK_EQ(write(pfd[1], "w", 1), (ssize_t)1);
	CHECK(swvt_wait_at_least(&o.watch_calls, 1));

	/* A datagram on a registered endpoint reaches ops->rx on the loop's thread, and the
	 * loop counts what ops->rx reported as packets. */
	static struct swv_endpoint ep;
	CHECK_OK(swv_ep_open(&ep, lo, NULL));
	CHECK_OK(swv_progress_add_endpoint(&pr, &ep));
	CHECK_EQ(atomic_load(&pr.neps), 1u);
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(s >= 0);
	send_to(s, &ep);
	CHECK(swvt_wait_at_least(&o.rx_pkts, 1));
	CHECK(swvt_wait_at_least(&pr.rx_packets, 1));
	CHECK(atomic_load(&o.rx_from_thread));
	CHECK(swvt_wait_at_least(&o.after_calls, 1));

	/* A settling pass takes what arrived before it, whoever receives it: counted
	 * once settle returns, and followed by ops->after. */
	uint64_t pk = atomic_load(&o.rx_pkts);
	uint64_t after = atomic_load(&o.after_calls);
	send_to(s, &ep);
	send_to(s, &ep);
	(void)swv_progress_settle(&pr, false);
	CHECK_EQ(atomic_load(&o.rx_pkts), pk + 2);
	CHECK(atomic_load(&o.after_calls) > after);
	CHECK(atomic_load(&o.begin_calls) >= atomic_load(&o.after_calls));
	CHECK(!atomic_load(&o.rx_bad));

	/* The owner's deadline runs once due, though the kick only woke the loop now: the
	 * loop sleeps to what ops->timers answered. */
	uint64_t d = swv_now_ns() + 20000000ull; /* 20 ms */
	atomic_store(&o.deadline, d);
	swv_progress_kick(&pr, 0);
	CHECK(swvt_wait_at_least(&o.timer_ran_at, d));
	CHECK_EQ(atomic_load(&o.deadline), 0);
	CHECK(atomic_load(&o.timer_on_thread));

	/* An application thread that drives in a tight loop holds the lease (long here,
	 * so that it cannot lapse on a loaded machine); once the thread has muted, a
	 * deadline armed is run by the driver's pass, and the thread, which never
	 * iterates meanwhile, was not woken for it. */
	swv_progress_test_lease(&pr, 600000000000ull);
	swv_progress_sq_add(&pr, 1); /* something in flight: drives are wanted */
	(void)swv_progress_drive(&pr);
	(void)swv_progress_drive(&pr); /* back to back: the lease */
	swv_progress_kick(&pr, 0);     /* the thread looks, and mutes */
	uint64_t start = swv_now_ns();
	while (!atomic_load(&pr.muted) || !atomic_load(&pr.sleep_until)) { /* muted, asleep */
		(void)swv_progress_drive(&pr);
		CHECK(swv_now_ns() - start < 60000000000ull);
	}
	uint64_t e0 = atomic_load(&pr.epoch);
	d = swv_now_ns() + 2000000ull; /* 2 ms */
	atomic_store(&o.deadline, d);
	swv_progress_arm(&pr, d);
	while (atomic_load(&o.timer_ran_at) < d) {
		(void)swv_progress_drive(&pr);
		CHECK(swv_now_ns() - start < 60000000000ull);
	}
	CHECK(!atomic_load(&o.timer_on_thread));
	/* a thread woken for the deadline would have iterated by now */
	while (swv_now_ns() < d + 20000000ull)
		(void)swv_progress_drive(&pr);
	CHECK_EQ(atomic_load(&pr.epoch), e0);
	CHECK(atomic_load(&pr.muted));
	swv_progress_sq_add(&pr, -1);
	swv_progress_release(&pr);
	swv_progress_test_lease(&pr, SWV_PROGRESS_LEASE_NS);

	/* The receive endpoints are bounded; a group's socket does not count. */
	static struct swv_endpoint more[SWV_PROGRESS_MAX_EPS];
	for (unsigned i = 1; i < SWV_PROGRESS_MAX_EPS; i++) {
		CHECK_OK(swv_ep_open(&more[i], lo, NULL));
		CHECK_OK(swv_progress_add_endpoint(&pr, &more[i]));
	}
	CHECK_EQ(atomic_load(&pr.neps), (unsigned)SWV_PROGRESS_MAX_EPS);
	CHECK_OK(swv_ep_open(&more[0], lo, NULL));
	CHECK_EQ(swv_progress_add_endpoint(&pr, &more[0]), ENOSPC);
	CHECK_EQ(swv_progress_add_endpoint(&pr, NULL), EINVAL);
	/* Still receiving on the last one registered. */
	pk = atomic_load(&o.rx_pkts);
	send_to(s, &more[SWV_PROGRESS_MAX_EPS - 1]);
	(void)swv_progress_settle(&pr, false);
	CHECK_EQ(atomic_load(&o.rx_pkts), pk + 1);

	/* Stop closes the owner's state once; a second stop does nothing. */
	swv_progress_stop(&pr);
	CHECK_EQ(o.closed, 1);
	swv_progress_stop(&pr);
	CHECK_EQ(o.closed, 1);
	CHECK_EQ(o.opened, 1);

	close(s);
	for (unsigned i = 0; i < SWV_PROGRESS_MAX_EPS; i++)
		swv_ep_close(&more[i]);
	swv_ep_close(&ep);
	close(pfd[0]);
	close(pfd[1]);
	printf("test_progress_loop: OK\n");
	return 0;
}
