/*
 * Port state from the netdev. Owner: net.
 *
 * A swverbs port's state mirrors the network interface that carries the device's IP
 * address, the way the kernel's rxe follows its netdev (the state, not the
 * reachability: the kernel keeps delivering to a down interface's address locally, and
 * same-host traffic goes through lo whatever the interface does): the port is ACTIVE while the
 * interface is up (IFF_UP) and has carrier (IFF_LOWER_UP), DOWN otherwise. Each context watches the
 * interface through an rtnetlink socket of its own (NETLINK_ROUTE, group RTMGRP_LINK), which the
 * progress thread reads; every change of "active" is reported to a callback, which raises
 * IBV_EVENT_PORT_ACTIVE / IBV_EVENT_PORT_ERR on the context's async queue.
 *
 * The interface is found once, at open: the one holding the address (one that is up,
 * if several do, as the configuration chooses), or, for an address in a loopback subnet
 * that no interface holds (127.0.0.2), the interface whose host-scope address covers it
 * (lo). An interface that is deleted (or moved to another namespace) leaves the port
 * DOWN for the rest of the context's life; one created later, even with the same index,
 * is not adopted.
 *
 * Watching is best effort: if the socket cannot be opened or the interface not found,
 * the port simply stays ACTIVE (logged at debug level) and the context works as
 * before.
 *
 * Threading: fd is written by swv_netdev_open before the context is visible and stays
 * fixed until swv_netdev_close, which runs after the progress thread has stopped.
 * ifindex is written by open and then only by swv_netdev_process (set to 0 when the
 * interface goes away), and read only there. 'flags' has one writer at a time -- open,
 * then only the thread that calls swv_netdev_process (the progress thread) -- and is
 * read lock-free by anyone (ibv_query_port) with an atomic load.
 */
#ifndef SWV_NET_NETDEV_H
#define SWV_NET_NETDEV_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Bits of swv_netdev.flags: the interface's state as last seen. */
#define SWV_NETDEV_UP	   1u /* administratively up (IFF_UP) */
#define SWV_NETDEV_CARRIER 2u /* lower layer up (IFF_LOWER_UP: carrier) */

struct swv_netdev {
	int fd;			/* rtnetlink socket, non-blocking; -1 = not watched */
	int ifindex;		/* the watched interface; 0 = none (or gone) */
	_Atomic uint32_t flags; /* SWV_NETDEV_* (rules above) */
};

static inline bool swv_netdev_flags_active(uint32_t flags)
{
	return (flags & (SWV_NETDEV_UP | SWV_NETDEV_CARRIER)) ==
	       (SWV_NETDEV_UP | SWV_NETDEV_CARRIER);
}

/* Start watching the interface that carries addr and read its state. Never fails: on
 * any error nd->fd is -1 and the state stays "up with carrier". */
void swv_netdev_open(struct swv_netdev *nd, struct in_addr addr);
/* Close the socket (after the progress thread stopped). Idempotent. */
void swv_netdev_close(struct swv_netdev *nd);

/* The interface's state as last seen (SWV_NETDEV_* bits). Any thread. */
static inline uint32_t swv_netdev_flags(const struct swv_netdev *nd)
{
	return atomic_load_explicit(&nd->flags, memory_order_acquire);
}

/*
 * Read every pending rtnetlink message (nd->fd readable) and apply those about the
 * watched interface, in order. Each change of "active" (swv_netdev_flags_active) calls
 * changed(arg, active) after the new flags are stored, so a callback that raises an
 * event lets a reader that got the event query the new state. If the kernel dropped
 * messages (socket overrun) the state is read afresh. Never blocks.
 */
void swv_netdev_process(struct swv_netdev *nd, void (*changed)(void *arg, bool active), void *arg);

#endif
