/* Port state from the netdev (src/net/netdev.c), through the public API: in a network
 * namespace of its own, the test takes lo down and up and checks that every open
 * context gets IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE for port 1, in order and
 * once per change, and that ibv_query_port reads DOWN/Disabled, then ACTIVE/LinkUp.
 * Two devices: 127.0.0.1 (the address lo holds) and 127.0.0.2 (covered by lo's
 * subnet only), configured while lo is down: they exist, their ports read DOWN.
 * Needs CAP_SYS_ADMIN for the namespace: skips (77) without it. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

#define NCTX 3

static void set_lo(bool up)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0);
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	CHECK(ioctl(fd, SIOCGIFFLAGS, &ifr) == 0);
	if (up)
		ifr.ifr_flags |= IFF_UP;
	else
		ifr.ifr_flags &= ~IFF_UP;
	CHECK(ioctl(fd, SIOCSIFFLAGS, &ifr) == 0);
	close(fd);
}

/* The next async event of ctx within 5 s (a missing event fails, it does not hang). */
static enum ibv_event_type next_event(struct ibv_context *ctx)
{
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	struct ibv_async_event ev;

	CHECK(poll(&p, 1, 5000) == 1);
	CHECK_OK(ibv_get_async_event(ctx, &ev));
	enum ibv_event_type t = ev.event_type;
	CHECK(t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_PORT_ACTIVE);
	CHECK_EQ(ev.element.port_num, 1);
	ibv_ack_async_event(&ev);
	return t;
}

/* Nothing more is queued on ctx (after a short grace for a stray duplicate). */
static void no_event(struct ibv_context *ctx)
{
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	CHECK_EQ(poll(&p, 1, 200), 0);
}

static void check_port(struct ibv_context *ctx, bool active)
{
	struct ibv_port_attr pa;

	CHECK_OK(ibv_query_port(ctx, 1, &pa));
	if (active) {
		CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
		CHECK_EQ(pa.phys_state, 5); /* LinkUp */
	} else {
		CHECK_EQ(pa.state, IBV_PORT_DOWN);
		CHECK_EQ(pa.phys_state, 3); /* Disabled: the interface is down */
	}
}

int main(void)
{
	/* Before any thread exists: unshare moves only the calling thread. */
	if (unshare(CLONE_NEWNET)) {
		printf("*** SKIPPED: test_netdev needs a network namespace of its own "
		       "(unshare(CLONE_NEWNET): %s; run as root) ***\n",
		       strerror(errno));
		return 77;
	}
	/* A new namespace's lo is down without addresses; up once gives it 127.0.0.1/8,
	 * which it keeps when it goes down again. The devices are configured and opened
	 * while lo is down. */
	set_lo(true);
	set_lo(false);
	unsetenv("SWVERBS_CONFIG");
	setenv("SWVERBS_DEVICES", "swt0=127.0.0.1/8;swt1=127.0.0.2/8,roce", 1);
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK_PTR(l);
	CHECK_EQ(n, 2);

	/* ctx[0], ctx[1] on swt0, ctx[2] on swt1. */
	struct ibv_context *ctx[NCTX + 1];
	for (int i = 0; i < NCTX; i++) {
		ctx[i] = ibv_open_device(l[i == NCTX - 1 ? 1 : 0]);
		CHECK_PTR(ctx[i]);
		check_port(ctx[i], false);
		no_event(ctx[i]);
	}
	set_lo(true);
	for (int i = 0; i < NCTX; i++) {
		CHECK_EQ(next_event(ctx[i]), IBV_EVENT_PORT_ACTIVE);
		check_port(ctx[i], true);
		no_event(ctx[i]);
	}

	int nopen = NCTX;
	for (int round = 0; round < 2; round++) {
		set_lo(false);
		for (int i = 0; i < nopen; i++) {
			CHECK_EQ(next_event(ctx[i]), IBV_EVENT_PORT_ERR);
			check_port(ctx[i], false); /* the event comes after the new state */
		}
		if (round == 0) {
			/* A context opened while the link is down starts DOWN, and gets
			 * only the change that follows. */
			ctx[nopen] = ibv_open_device(l[0]);
			CHECK_PTR(ctx[nopen]);
			check_port(ctx[nopen], false);
			nopen++;
		}
		for (int i = 0; i < nopen; i++)
			no_event(ctx[i]); /* one event per change */
		set_lo(true);
		for (int i = 0; i < nopen; i++) {
			CHECK_EQ(next_event(ctx[i]), IBV_EVENT_PORT_ACTIVE);
			check_port(ctx[i], true);
		}
		for (int i = 0; i < nopen; i++)
			no_event(ctx[i]);
	}

	/* Closing with a port event still queued (unread) is clean. */
	set_lo(false);
	set_lo(true);
	for (int i = 0; i < nopen; i++)
		CHECK_OK(ibv_close_device(ctx[i]));
	ibv_free_device_list(l);
	printf("test_netdev: OK\n");
	return 0;
}
