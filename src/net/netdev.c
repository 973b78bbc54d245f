/*
 * Port state from the netdev: the interface that carries the device's address, found
 * and watched through rtnetlink (rules in netdev.h).
 *
 * Two kinds of socket: the context's watching socket (subscribed to RTMGRP_LINK, read
 * by the progress thread, never written), and short-lived query sockets for the
 * requests made at open and after an overrun (address dump, one link), so a request's
 * replies never mix with notifications.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdalign.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "net/addr.h"
#include "net/netdev.h"
#include "util/log.h"

/* Receive buffer: one datagram of link notifications or of a dump's replies. A link
 * message with statistics is a few KiB; a datagram that does not fit is handled as an
 * overrun (state read afresh). */
#define NL_BUF 32768

struct nl_buf {
	alignas(struct nlmsghdr) char b[NL_BUF];
};

static uint32_t flags_of_ifi(unsigned int ifi_flags)
{
	return ((ifi_flags & IFF_UP) ? SWV_NETDEV_UP : 0) |
	       ((ifi_flags & IFF_LOWER_UP) ? SWV_NETDEV_CARRIER : 0);
}

/* Each whole netlink message in buf[0..len), in order. fn returns false to stop. */
static void for_each_msg(const char *buf, size_t len,
			 bool (*fn)(const struct nlmsghdr *h, void *arg), void *arg)
{
	size_t off = 0;

	while (len - off >= sizeof(struct nlmsghdr)) {
		const struct nlmsghdr *h = (const struct nlmsghdr *)(const void *)(buf + off);
		if (h->nlmsg_len < sizeof(*h) || h->nlmsg_len > len - off)
			return; /* malformed: drop the rest of the datagram */
		if (!fn(h, arg))
			return;
		off += NLMSG_ALIGN(h->nlmsg_len);
		if (off > len)
			return;
	}
}

/* The link message's ifinfomsg, or NULL if h is not a complete link message. */
static const struct ifinfomsg *link_msg(const struct nlmsghdr *h)
{
	if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK)
		return NULL;
	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct ifinfomsg)))
		return NULL;
	return NLMSG_DATA(h);
}

/* ---- requests on a query socket ---- */

static int query_socket(void)
{
	struct timeval tv = {.tv_sec = 2};
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);

	if (fd < 0)
		return -1;
	/* The kernel answers every request at once; the timeout only keeps a context
	 * open from hanging on a kernel that does not. */
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

struct reply_ctx {
	uint32_t seq;
	bool done;
	int err; /* positive errno from an NLMSG_ERROR reply */
	bool (*fn)(const struct nlmsghdr *h, void *arg);
	void *arg;
};

static bool on_reply(const struct nlmsghdr *h, void *arg)
{
	struct reply_ctx *rc = arg;

	if (h->nlmsg_seq != rc->seq)
		return true; /* not ours (cannot happen on a query socket; harmless) */
	if (h->nlmsg_type == NLMSG_DONE) {
		rc->done = true;
		return false;
	}
	if (h->nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e = NLMSG_DATA(h);
		if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error)
			rc->err = -e->error;
		rc->done = true;
		return false;
	}
	if (rc->fn && !rc->fn(h, rc->arg)) {
		rc->done = true;
		return false;
	}
	if (!(h->nlmsg_flags & NLM_F_MULTI)) {
		rc->done = true; /* a single reply (not a dump) */
		return false;
	}
	return true;
}

/* Send one request (header + payload) and hand each reply message to fn until the
 * request is answered. Returns 0 or a positive errno. */
static int nl_request(int fd, uint16_t type, uint16_t flags, const void *payload, size_t plen,
		      bool (*fn)(const struct nlmsghdr *h, void *arg), void *arg)
{
	static _Atomic uint32_t next_seq = 1;
	struct {
		struct nlmsghdr h;
		alignas(NLMSG_ALIGNTO) char p[64];
	} req;
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	struct reply_ctx rc = {.seq = atomic_fetch_add(&next_seq, 1), .fn = fn, .arg = arg};
	struct nl_buf buf;

	if (plen > sizeof(req.p))
		return EINVAL;
	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = NLMSG_LENGTH(plen);
	req.h.nlmsg_type = type;
	req.h.nlmsg_flags = NLM_F_REQUEST | flags;
	req.h.nlmsg_seq = rc.seq;
	memcpy(NLMSG_DATA(&req.h), payload, plen);
	if (sendto(fd, &req, req.h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return errno;
	while (!rc.done) {
		ssize_t n = recv(fd, buf.b, sizeof(buf.b), MSG_TRUNC);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? ETIMEDOUT : errno;
		}
		if ((size_t)n > sizeof(buf.b))
			return EMSGSIZE; /* a reply did not fit: its messages are incomplete */
		for_each_msg(buf.b, (size_t)n, on_reply, &rc);
	}
	return rc.err;
}

/* Which interface carries the address: one holding it, else one whose host-scope
 * (loopback) address has a subnet that covers it -- as swv_local_if_of_ip decides.
 * Several may hold it; swv_netdev_open then prefers one that is up, as config does. */
#define MAX_EXACT 8
struct addr_find {
	uint32_t want;	      /* host order */
	int exact[MAX_EXACT]; /* ifindices holding want, in dump order */
	unsigned nexact;
	int covering; /* ifindex of a host-scope address whose subnet holds want */
};

static bool on_addr(const struct nlmsghdr *h, void *arg)
{
	struct addr_find *af = arg;
	const struct ifaddrmsg *ifa = NLMSG_DATA(h);
	uint32_t local = 0, address = 0;
	bool have_local = false, have_address = false;

	if (h->nlmsg_type != RTM_NEWADDR || h->nlmsg_len < NLMSG_LENGTH(sizeof(*ifa)) ||
	    ifa->ifa_family != AF_INET)
		return true;
	size_t off = NLMSG_LENGTH(NLMSG_ALIGN(sizeof(*ifa)));
	const char *base = (const char *)h;
	while (h->nlmsg_len - off >= sizeof(struct rtattr)) {
		const struct rtattr *rta = (const struct rtattr *)(const void *)(base + off);
		if (rta->rta_len < sizeof(*rta) || rta->rta_len > h->nlmsg_len - off)
			break;
		if (rta->rta_len >= RTA_LENGTH(4)) {
			if (rta->rta_type == IFA_LOCAL) {
				memcpy(&local, RTA_DATA(rta), 4);
				have_local = true;
			} else if (rta->rta_type == IFA_ADDRESS) {
				memcpy(&address, RTA_DATA(rta), 4);
				have_address = true;
			}
		}
		off += RTA_ALIGN(rta->rta_len);
		if (off > h->nlmsg_len)
			break;
	}
	if (!have_local && !have_address)
		return true;
	/* IFA_LOCAL is the interface's own address; IFA_ADDRESS the peer's on a
	 * point-to-point link, and the same as IFA_LOCAL elsewhere. */
	uint32_t have = ntohl(have_local ? local : address);
	if (have == af->want && af->nexact < MAX_EXACT)
		af->exact[af->nexact++] = (int)ifa->ifa_index;
	uint32_t mask = swv_netmask(ifa->ifa_prefixlen);
	if (ifa->ifa_scope == RT_SCOPE_HOST && (have & mask) == (af->want & mask) && !af->covering)
		af->covering = (int)ifa->ifa_index;
	return true;
}

struct link_find {
	int ifindex;
	bool found;
	uint32_t flags;
};

static bool on_link(const struct nlmsghdr *h, void *arg)
{
	struct link_find *lf = arg;
	const struct ifinfomsg *ifi = link_msg(h);

	if (ifi && h->nlmsg_type == RTM_NEWLINK && ifi->ifi_index == lf->ifindex) {
		lf->flags = flags_of_ifi(ifi->ifi_flags);
		lf->found = true;
	}
	return true;
}

/* The current state of ifindex. Returns 0, ENODEV if the kernel says the interface is
 * gone, or another positive errno (the state is then unknown). */
static int query_link(int qfd, int ifindex, uint32_t *flags)
{
	struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
	struct link_find lf = {.ifindex = ifindex};
	int rc = nl_request(qfd, RTM_GETLINK, 0, &ifi, sizeof(ifi), on_link, &lf);

	if (rc)
		return rc;
	if (!lf.found)
		return EPROTO; /* answered without the link message */
	*flags = lf.flags;
	return 0;
}

void swv_netdev_open(struct swv_netdev *nd, struct in_addr addr)
{
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = RTMGRP_LINK};
	struct ifaddrmsg ifa = {.ifa_family = AF_INET};
	struct addr_find af = {.want = ntohl(addr.s_addr)};
	char ip[INET_ADDRSTRLEN];
	const char *why;
	uint32_t flags;
	int fd, qfd = -1, ifindex, rc;

	nd->fd = -1;
	nd->ifindex = 0;
	atomic_init(&nd->flags, SWV_NETDEV_UP | SWV_NETDEV_CARRIER);
	inet_ntop(AF_INET, &addr, ip, sizeof(ip));

	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0) {
		why = "cannot open an rtnetlink socket";
		rc = errno;
		goto fail;
	}
	/* Subscribed before the first look: a change after that look is queued on fd
	 * too, and applying a state twice changes nothing. */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		why = "cannot subscribe to link changes";
		rc = errno;
		goto fail;
	}
	qfd = query_socket();
	if (qfd < 0) {
		why = "cannot open an rtnetlink socket";
		rc = errno;
		goto fail;
	}
	rc = nl_request(qfd, RTM_GETADDR, NLM_F_DUMP, &ifa, sizeof(ifa), on_addr, &af);
	if (rc) {
		why = "cannot list addresses";
		goto fail;
	}
	ifindex = af.nexact ? af.exact[0] : af.covering;
	if (!ifindex) {
		why = "no interface carries the address";
		rc = ENOENT;
		goto fail;
	}
	rc = query_link(qfd, ifindex, &flags);
	if (rc) {
		why = "cannot read the interface state";
		goto fail;
	}
	/* The address on several interfaces: the device uses one that is up (the
	 * config's choice, swv_local_if_of_ip), so that is the one to follow. */
	for (unsigned i = 1; i < af.nexact && !(flags & SWV_NETDEV_UP); i++) {
		uint32_t f;
		if (query_link(qfd, af.exact[i], &f) == 0 && (f & SWV_NETDEV_UP)) {
			ifindex = af.exact[i];
			flags = f;
		}
	}
	close(qfd);
	nd->fd = fd;
	nd->ifindex = ifindex;
	atomic_store_explicit(&nd->flags, flags, memory_order_release);
	swv_log(SWV_LOG_DEBUG, "netdev: %s is on ifindex %d (%s, %s): port follows it", ip, ifindex,
		(flags & SWV_NETDEV_UP) ? "up" : "down",
		(flags & SWV_NETDEV_CARRIER) ? "carrier" : "no carrier");
	return;

fail:
	swv_log(SWV_LOG_DEBUG, "netdev: %s: %s (%s); port state stays ACTIVE", ip, why,
		strerror(rc));
	if (qfd >= 0)
		close(qfd);
	if (fd >= 0)
		close(fd);
}

void swv_netdev_close(struct swv_netdev *nd)
{
	if (nd->fd >= 0)
		close(nd->fd);
	nd->fd = -1;
	nd->ifindex = 0;
}

/* Store the interface's new state and report a change of "active". */
static void apply(struct swv_netdev *nd, uint32_t nf, void (*changed)(void *arg, bool active),
		  void *arg)
{
	uint32_t of = atomic_load_explicit(&nd->flags, memory_order_relaxed); /* sole writer */

	if (of == nf)
		return;
	atomic_store_explicit(&nd->flags, nf, memory_order_release);
	swv_log(SWV_LOG_DEBUG, "netdev: ifindex %d now %s, %s", nd->ifindex,
		(nf & SWV_NETDEV_UP) ? "up" : "down",
		(nf & SWV_NETDEV_CARRIER) ? "carrier" : "no carrier");
	if (swv_netdev_flags_active(of) != swv_netdev_flags_active(nf) && changed)
		changed(arg, swv_netdev_flags_active(nf));
}

struct notify_ctx {
	struct swv_netdev *nd;
	void (*changed)(void *arg, bool active);
	void *arg;
};

static bool on_notify(const struct nlmsghdr *h, void *arg)
{
	struct notify_ctx *nc = arg;
	const struct ifinfomsg *ifi = link_msg(h);

	/* AF_UNSPEC only: bridge port messages (AF_BRIDGE) carry the same index, and
	 * their RTM_DELLINK means "left the bridge", not "interface gone". */
	if (!ifi || ifi->ifi_family != AF_UNSPEC || !nc->nd->ifindex ||
	    ifi->ifi_index != nc->nd->ifindex)
		return true;
	if (h->nlmsg_type == RTM_DELLINK) {
		/* Gone (or moved to another namespace): the port stays DOWN, and an
		 * interface that later gets the same index is not this one. */
		apply(nc->nd, 0, nc->changed, nc->arg);
		nc->nd->ifindex = 0;
		return true;
	}
	apply(nc->nd, flags_of_ifi(ifi->ifi_flags), nc->changed, nc->arg);
	return true;
}

void swv_netdev_process(struct swv_netdev *nd, void (*changed)(void *arg, bool active), void *arg)
{
	struct notify_ctx nc = {.nd = nd, .changed = changed, .arg = arg};
	struct nl_buf buf;
	bool resync = false;

	if (nd->fd < 0)
		return;
	for (;;) {
		struct sockaddr_nl from;
		socklen_t flen = sizeof(from);
		ssize_t n = recvfrom(nd->fd, buf.b, sizeof(buf.b), MSG_DONTWAIT | MSG_TRUNC,
				     (struct sockaddr *)&from, &flen);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ENOBUFS) {
				resync = true; /* the kernel dropped notifications */
				continue;
			}
			if (errno != EAGAIN)
				swv_log(SWV_LOG_ERR, "netdev: rtnetlink receive: %s",
					strerror(errno));
			break;
		}
		if (from.nl_family != AF_NETLINK || from.nl_pid != 0)
			continue; /* only the kernel speaks for interfaces */
		if ((size_t)n > sizeof(buf.b)) {
			resync = true; /* truncated: its messages are lost */
			continue;
		}
		for_each_msg(buf.b, (size_t)n, on_notify, &nc);
	}
	if (!resync || !nd->ifindex)
		return;
	int qfd = query_socket();
	uint32_t flags;
	int rc = qfd >= 0 ? query_link(qfd, nd->ifindex, &flags) : errno;
	if (qfd >= 0)
		close(qfd);
	if (rc == 0)
		apply(nd, flags, changed, arg);
	else if (rc == ENODEV)
		apply(nd, 0, changed, arg);
	else
		swv_log(SWV_LOG_ERR, "netdev: cannot read ifindex %d after an overrun: %s",
			nd->ifindex, strerror(rc));
}
