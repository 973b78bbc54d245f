/*
 * UDP endpoints. The socket never blocks: a full buffer is reported to the caller,
 * whose reliability protocol (or the application, for UD) decides what to do.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "link/endpoint.h"
#include "link/shm.h"
#include "net/fault.h"
#include "util/clock.h"
#include "util/compiler.h"
#include "util/log.h"

/* Generous: RDMA READ responses arrive in bursts nothing paces (up to a whole READ, or
 * a window of them), and a datagram that finds the buffer full is lost. Without
 * CAP_NET_ADMIN the kernel clamps this to net.core.[rw]mem_max. */
#define EP_SOCKBUF      (16 << 20)
#define EP_BATCH_MAX    64
#define EP_MAX_IOV      IOV_MAX
#define EP_HOLD_RETRY_NS 20000ull /* retry a held packet that met a full buffer */

/* Linux UDP socket options (linux/udp.h), in case the C library does not name them. */
#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* SWVERBS_GSO=0 turns segmentation offload off (send and receive) for this process:
 * every IB packet then travels in a datagram of its own, on the wire and in captures. */
static bool offload_disabled(void)
{
	static _Atomic int cached = -1;
	int v = atomic_load_explicit(&cached, memory_order_relaxed);
	if (v < 0) {
		const char *e = getenv("SWVERBS_GSO");
		v = e && e[0] == '0' && e[1] == 0;
		atomic_store_explicit(&cached, v, memory_order_relaxed);
	}
	return v;
}

/* A packet held back by the injector (delay or reorder). */
struct swv_held_pkt {
	struct swv_held_pkt *next;
	uint64_t deadline;    /* release no later than this */
	bool until_next;      /* reorder: release right after the next packet goes out */
	struct sockaddr_in dst;
	size_t len;
	uint8_t data[];
};

static void set_bufsize(int fd, int force_opt, int opt)
{
	int want = EP_SOCKBUF;

	/* The FORCE variants ignore rmem_max/wmem_max but need CAP_NET_ADMIN; without
	 * it the plain option is clamped to the sysctl limit, which is fine. */
	if (setsockopt(fd, SOL_SOCKET, force_opt, &want, sizeof(want)) == 0)
		return;
	(void)setsockopt(fd, SOL_SOCKET, opt, &want, sizeof(want));
}

/* A fresh non-blocking UDP socket for ep (zeroed) with the large receive buffer; -errno
 * if none. */
static int ep_socket(struct swv_endpoint *ep)
{
	memset(ep, 0, sizeof(*ep));
	ep->fd = -1;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	set_bufsize(fd, SO_RCVBUFFORCE, SO_RCVBUF);
	return fd;
}

/* Setting up fd failed (errno says why): log it, close fd and return the errno. */
static int ep_fail(int fd, const char *what, struct in_addr addr)
{
	int rc = errno;
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &addr, ip, sizeof(ip));
	swv_log(SWV_LOG_ERR, "endpoint: cannot %s %s: %s", what, ip, strerror(rc));
	close(fd);
	return rc;
}

/* The set-up socket fd becomes ep's, bound to addr:port. */
static int ep_adopt(struct swv_endpoint *ep, int fd, struct in_addr addr, uint16_t port)
{
	int rc = pthread_mutex_init(&ep->fault_lock, NULL);
	if (rc) {
		close(fd);
		return rc;
	}
	ep->fd = fd;
	ep->addr = addr;
	ep->port = port;
	ep->is_open = true;
	return 0;
}

int swv_ep_open(struct swv_endpoint *ep, struct in_addr addr, struct swv_fault *fault)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = addr};
	socklen_t salen = sizeof(sa);

	if (!ep)
		return EINVAL;
	int fd = ep_socket(ep);
	if (fd < 0)
		return -fd;
	set_bufsize(fd, SO_SNDBUFFORCE, SO_SNDBUF);
	/* Never set DF: a device MTU above the interface MTU (mtu=4096 over a 1500-byte
	 * link) then costs IP fragmentation instead of EMSGSIZE. */
	int pmtu = IP_PMTUDISC_DONT;
	(void)setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));

	/* Multicast datagrams (UD QPN 0xffffff) leave by the device's own interface,
	 * which needs no multicast route (docs/wire.md, "UD multicast"). */
	(void)setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &addr, sizeof(addr));

	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &salen))
		return ep_fail(fd, "bind UDP socket to", addr);
	ep->fault = fault;
	atomic_init(&ep->gso_off, offload_disabled());
	return ep_adopt(ep, fd, addr, ntohs(sa.sin_port));
}

int swv_ep_open_mcast(struct swv_endpoint *ep, struct in_addr ifaddr, struct in_addr group,
		      uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = group, .sin_port = htons(port)};
	struct ip_mreq mr = {.imr_multiaddr = group, .imr_interface = ifaddr};
	int one = 1, zero = 0;

	if (!ep)
		return EINVAL;
	int fd = ep_socket(ep);
	if (fd < 0)
		return -fd;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero)) ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof(mr)))
		return ep_fail(fd, "join multicast group", group);
	atomic_init(&ep->gso_off, true);
	ep->mcast = true;
	return ep_adopt(ep, fd, group, port);
}

void swv_ep_close(struct swv_endpoint *ep)
{
	if (!ep || !ep->is_open)
		return;
	pthread_mutex_lock(&ep->fault_lock);
	while (ep->held_head) {
		struct swv_held_pkt *h = ep->held_head;
		ep->held_head = h->next;
		free(h);
	}
	ep->held_tail = NULL;
	pthread_mutex_unlock(&ep->fault_lock);
	pthread_mutex_destroy(&ep->fault_lock);
	swv_shm_close(ep->shm);
	ep->shm = NULL;
	close(ep->fd);
	ep->fd = -1;
	ep->is_open = false;
}

int swv_ep_attach_shm(struct swv_endpoint *ep)
{
	if (!ep || !ep->is_open || ep->fault || ep->shm)
		return EINVAL;
	if (!swv_shm_enabled())
		return EOPNOTSUPP;
	ep->shm = swv_shm_open(ep->addr, ep->port, ep->fd);
	return ep->shm ? 0 : errno;
}

void swv_ep_set_hold_cb(struct swv_endpoint *ep, swv_ep_hold_cb cb, void *arg)
{
	if (!ep)
		return;
	ep->hold_cb = cb;
	ep->hold_arg = arg;
}

static int raw_send(int fd, const struct sockaddr_in *dst, const struct iovec *iov, int iovcnt)
{
	struct msghdr msg = {
		.msg_name = (void *)dst,
		.msg_namelen = sizeof(*dst),
		.msg_iov = (struct iovec *)iov,
		.msg_iovlen = (size_t)iovcnt,
	};

	for (;;) {
		if (sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
			return 0;
		if (errno != EINTR)
			return errno == EWOULDBLOCK ? EAGAIN : errno;
	}
}

static int send_flat(int fd, const struct sockaddr_in *dst, const void *data, size_t len)
{
	struct iovec v = {.iov_base = (void *)data, .iov_len = len};
	return raw_send(fd, dst, &v, 1);
}

/* Send held packets; "due" selects which. Called with fault_lock held. Returns the
 * earliest deadline still held, or 0. */
static uint64_t release_held(struct swv_endpoint *ep, uint64_t now, bool next_pkt_sent)
{
	struct swv_held_pkt **link = &ep->held_head, *prev = NULL;
	uint64_t next = 0;

	while (*link) {
		struct swv_held_pkt *h = *link;
		if ((next_pkt_sent && h->until_next) || h->deadline <= now) {
			int rc = send_flat(ep->fd, &h->dst, h->data, h->len);
			if (rc == EAGAIN || rc == ENOBUFS) {
				/* Keep it: the injector delays, it should not add loss. */
				h->until_next = false;
				h->deadline = (now ? now : swv_now_ns()) + EP_HOLD_RETRY_NS;
			} else {
				*link = h->next;
				free(h);
				continue;
			}
		}
		if (!next || h->deadline < next)
			next = h->deadline;
		prev = h;
		link = &h->next;
	}
	ep->held_tail = prev;
	return next;
}

static void hold(struct swv_endpoint *ep, struct swv_held_pkt *h)
{
	h->next = NULL;
	if (ep->held_tail)
		ep->held_tail->next = h;
	else
		ep->held_head = h;
	ep->held_tail = h;
}

static int fault_send(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		      const struct iovec *iov, int iovcnt, size_t total)
{
	struct swv_fault_decision d;
	struct swv_held_pkt *h = NULL;
	uint64_t hold_deadline = 0;
	int rc = 0;

	swv_fault_decide(ep->fault, &d);
	if (d.what & SWV_FAULT_DROP)
		return 0; /* lost on the wire: the sender cannot tell */

	if (d.what & (SWV_FAULT_CORRUPT | SWV_FAULT_DELAY | SWV_FAULT_REORDER)) {
		/* Work on a private copy: the caller's buffers are not ours to change or
		 * keep. */
		h = malloc(sizeof(*h) + total);
		if (!h)
			return ENOMEM;
		size_t off = 0;
		for (int i = 0; i < iovcnt; i++) {
			memcpy(h->data + off, iov[i].iov_base, iov[i].iov_len);
			off += iov[i].iov_len;
		}
		h->len = total;
		h->dst = *dst;
		h->until_next = false;
		h->deadline = 0;
		if ((d.what & SWV_FAULT_CORRUPT) && total) {
			/* Skip BTH byte 4 (FECN/BECN/reserved): the CRC masks it on purpose,
			 * and every injected corruption must be detectable. */
			uint64_t nbits = (uint64_t)total * 8 - (total > 4 ? 8 : 0);
			uint64_t bit = d.bit_rand % nbits;
			if (total > 4 && bit >= 4 * 8)
				bit += 8;
			h->data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		}
	}

	pthread_mutex_lock(&ep->fault_lock);
	if (d.what & SWV_FAULT_DUP) {
		/* The duplicate goes out now, whatever happens to the original. */
		if (h)
			(void)send_flat(ep->fd, dst, h->data, h->len);
		else
			(void)raw_send(ep->fd, dst, iov, iovcnt);
	}
	if (d.what & (SWV_FAULT_DELAY | SWV_FAULT_REORDER)) {
		uint64_t now = swv_now_ns();
		if (d.what & SWV_FAULT_DELAY) {
			h->deadline = now + swv_fault_delay_ns(ep->fault);
		} else {
			h->until_next = true;
			h->deadline = now + swv_fault_reorder_timeout_ns(ep->fault);
		}
		hold_deadline = h->deadline;
		hold(ep, h);
		h = NULL;
	} else {
		rc = h ? send_flat(ep->fd, dst, h->data, h->len) : raw_send(ep->fd, dst, iov, iovcnt);
		/* This packet overtook anything held for reordering: let those follow. */
		if (ep->held_head)
			(void)release_held(ep, 0, true);
	}
	pthread_mutex_unlock(&ep->fault_lock);
	free(h);

	if (hold_deadline && ep->hold_cb)
		ep->hold_cb(ep->hold_arg, hold_deadline);
	return rc;
}

/* ------------------------------------------------------------------ tx batching */

#define TXB_MAX 64

struct tx_batch {
	int depth;       /* nested begin calls */
	unsigned n;      /* datagrams queued */
	size_t used;     /* bytes of buf in use */
	struct {
		struct swv_endpoint *ep;
		struct sockaddr_in dst;
	} e[TXB_MAX];
	struct mmsghdr m[TXB_MAX];
	struct iovec v[TXB_MAX];
	char ctl[TXB_MAX][CMSG_SPACE(sizeof(uint16_t))] __attribute__((aligned(8)));
	uint8_t buf[TXB_MAX * SWV_EP_BATCH_SMALL];
};

static __thread struct tx_batch *txb;
static pthread_key_t txb_key;
static pthread_once_t txb_once = PTHREAD_ONCE_INIT;
static bool txb_key_ok;

static void txb_key_init(void)
{
	txb_key_ok = pthread_key_create(&txb_key, free) == 0;
}

static bool same_dst(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/* Send queued datagrams [i, j) (one endpoint) with sendmmsg. With 'gso', each run of
 * datagrams to one destination with the same length (the last may be shorter) becomes
 * one UDP_SEGMENT message: one skb through the stack instead of one per datagram, and
 * a single GRO-coalesced datagram for the receiver to split. Returns false if the
 * kernel refused UDP_SEGMENT (nothing of that message went out: the caller resends
 * from *from without GSO). */
static bool txb_send_range(struct tx_batch *b, unsigned i, unsigned j, bool gso, unsigned *from)
{
	struct swv_endpoint *ep = b->e[i].ep;
	unsigned nm = 0;
	unsigned first[TXB_MAX];

	for (unsigned k = i; k < j;) {
		unsigned g = k + 1;
		size_t seg = b->v[k].iov_len, total = seg;
		if (gso && seg) {
			while (g < j && g - k < SWV_EP_GSO_MAX_SEGS && same_dst(&b->e[g].dst, &b->e[k].dst) &&
			       b->v[g].iov_len == seg && total + seg <= SWV_EP_GSO_MAX_BYTES) {
				total += seg;
				g++;
			}
			if (g < j && g - k < SWV_EP_GSO_MAX_SEGS && same_dst(&b->e[g].dst, &b->e[k].dst) &&
			    b->v[g].iov_len && b->v[g].iov_len < seg &&
			    total + b->v[g].iov_len <= SWV_EP_GSO_MAX_BYTES)
				g++; /* a shorter datagram may end the run */
		}
		struct msghdr *m = &b->m[nm].msg_hdr;
		memset(m, 0, sizeof(*m));
		m->msg_name = &b->e[k].dst;
		m->msg_namelen = sizeof(b->e[k].dst);
		m->msg_iov = &b->v[k];
		m->msg_iovlen = g - k;
		if (g - k > 1) {
			uint16_t gs = (uint16_t)seg;
			m->msg_control = b->ctl[nm];
			m->msg_controllen = sizeof(b->ctl[nm]);
			struct cmsghdr *cm = CMSG_FIRSTHDR(m);
			cm->cmsg_level = SOL_UDP;
			cm->cmsg_type = UDP_SEGMENT;
			cm->cmsg_len = CMSG_LEN(sizeof(gs));
			memcpy(CMSG_DATA(cm), &gs, sizeof(gs));
		}
		first[nm++] = k;
		k = g;
	}
	unsigned sent = 0;
	while (sent < nm) {
		int r = sendmmsg(ep->fd, b->m + sent, nm - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r > 0) {
			sent += (unsigned)r;
			continue;
		}
		int err = r < 0 ? errno : EAGAIN;
		if (err == EINTR)
			continue;
		if (b->m[sent].msg_hdr.msg_iovlen > 1 &&
		    (err == EIO || err == EINVAL || err == EOPNOTSUPP || err == ENOPROTOOPT ||
		     err == EMSGSIZE)) {
			if (!atomic_exchange(&ep->gso_off, true))
				swv_log(SWV_LOG_DEBUG, "endpoint %u: UDP GSO refused (%s)", ep->port,
					strerror(err));
			*from = first[sent];
			return false;
		}
		/* Refused (full buffer, ...): this message is lost; try the rest. */
		swv_log(SWV_LOG_DEBUG, "endpoint %u: batched send: %s", ep->port, strerror(err));
		sent++;
	}
	return true;
}

static void txb_flush(struct tx_batch *b)
{
	unsigned i = 0;
	while (i < b->n) {
		/* One sendmmsg per run of datagrams for the same endpoint. */
		unsigned j = i + 1;
		while (j < b->n && b->e[j].ep == b->e[i].ep)
			j++;
		unsigned from;
		if (!txb_send_range(b, i, j, swv_ep_gso_usable(b->e[i].ep), &from))
			(void)txb_send_range(b, from, j, false, &from);
		i = j;
	}
	b->n = 0;
	b->used = 0;
}

void swv_ep_batch_begin(void)
{
	struct tx_batch *b = txb;
	if (!b) {
		pthread_once(&txb_once, txb_key_init);
		if (!txb_key_ok)
			return;
		b = calloc(1, sizeof(*b));
		if (!b || pthread_setspecific(txb_key, b)) {
			free(b);
			return; /* no batching on this thread: sends go out at once */
		}
		txb = b;
	}
	b->depth++;
}

void swv_ep_batch_end(void)
{
	struct tx_batch *b = txb;
	if (!b || b->depth == 0)
		return;
	if (--b->depth == 0 && b->n)
		txb_flush(b);
}

/* Queue a small datagram in this thread's open batch: true if it was taken. */
static bool txb_queue(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		      const struct iovec *iov, int iovcnt)
{
	struct tx_batch *b = txb;
	if (!b || !b->depth || ep->fault)
		return false;
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	if (total > SWV_EP_BATCH_SMALL) {
		if (b->n)
			txb_flush(b); /* what was queued before leaves first */
		return false;
	}
	if (b->n == TXB_MAX)
		txb_flush(b);
	uint8_t *d = b->buf + b->used;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len)
			memcpy(d, iov[i].iov_base, iov[i].iov_len);
		d += iov[i].iov_len;
	}
	b->e[b->n].ep = ep;
	b->e[b->n].dst = *dst;
	b->v[b->n].iov_base = b->buf + b->used;
	b->v[b->n].iov_len = total;
	b->used += SWV_EP_BATCH_SMALL; /* fixed slots: simple, and buf never overflows */
	b->n++;
	return true;
}

/* A datagram that is not queued: whatever is queued on this thread goes first. */
static inline void txb_drain(void)
{
	struct tx_batch *b = txb;
	if (b && b->n)
		txb_flush(b);
}

/* One datagram by UDP (the intra-host link was not taken). */
static int udp_send(struct swv_endpoint *ep, const struct sockaddr_in *dst, const struct iovec *iov,
		    int iovcnt)
{
	atomic_fetch_add_explicit(&ep->udp_tx, 1, memory_order_relaxed);
	if (txb_queue(ep, dst, iov, iovcnt))
		return 0;
	txb_drain();
	if (swv_likely(!ep->fault))
		return raw_send(ep->fd, dst, iov, iovcnt);

	size_t total = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_base && iov[i].iov_len)
			return EINVAL;
		total += iov[i].iov_len;
	}
	if (total > 65507) /* the largest UDP/IPv4 payload */
		return EMSGSIZE;
	return fault_send(ep, dst, iov, iovcnt, total);
}

/* The arguments every one-datagram send needs. */
static inline bool dgram_ok(const struct swv_endpoint *ep, const struct sockaddr_in *dst,
			    const struct iovec *iov, int iovcnt)
{
	return ep && ep->is_open && dst && iov && iovcnt > 0 && iovcnt <= EP_MAX_IOV;
}

int swv_ep_send(struct swv_endpoint *ep, const struct sockaddr_in *dst, const struct iovec *iov,
		int iovcnt)
{
	if (swv_unlikely(!dgram_ok(ep, dst, iov, iovcnt)))
		return EINVAL;
	if (ep->shm) {
		struct swv_shm_peer *p = swv_shm_route(ep->shm, dst);
		if (p)
			return swv_shm_send(ep->shm, p, iov, iovcnt, 0, 1, false);
	}
	return udp_send(ep, dst, iov, iovcnt);
}

int swv_ep_send_ring(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		     const struct iovec *iov, int iovcnt, size_t seg_size, unsigned nseg,
		     unsigned *nsent)
{
	*nsent = 0;
	if (swv_unlikely(!dgram_ok(ep, dst, iov, iovcnt) || !nseg || nseg > SWV_EP_GSO_MAX_SEGS))
		return EINVAL;
	struct swv_shm_peer *p = ep->shm ? swv_shm_route(ep->shm, dst) : NULL;
	if (!p)
		return ENOTCONN;
	int rc = swv_shm_send(ep->shm, p, iov, iovcnt, seg_size, nseg, true);
	*nsent = rc ? 0 : nseg;
	return rc;
}

uint64_t swv_ep_flush_delayed(struct swv_endpoint *ep, uint64_t now_ns)
{
	uint64_t next;

	if (!ep || !ep->is_open || !ep->fault)
		return 0;
	pthread_mutex_lock(&ep->fault_lock);
	next = ep->held_head ? release_held(ep, now_ns, false) : 0;
	pthread_mutex_unlock(&ep->fault_lock);
	return next;
}

/* An ICMP error (port unreachable after sending to a closed QP's socket, ...) only
 * says some earlier datagram was lost; it must not stop reception. With IP_RECVERR
 * the details also sit on the error queue: empty it so it cannot fill up. */
static bool is_icmp_error(int err)
{
	return err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH ||
	       err == EHOSTDOWN || err == ENETDOWN || err == EPROTO || err == EMSGSIZE;
}

static void drain_errqueue(int fd)
{
	char buf[256], cbuf[256];
	for (int i = 0; i < 64; i++) {
		struct iovec v = {.iov_base = buf, .iov_len = sizeof(buf)};
		struct msghdr m = {
			.msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf,
			.msg_controllen = sizeof(cbuf)};
		if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return;
	}
}

int swv_ep_recv_batch(struct swv_endpoint *ep, struct swv_rx_pkt *pkts, int n)
{
	struct mmsghdr msgs[EP_BATCH_MAX];
	struct iovec iovs[EP_BATCH_MAX];
	int got = 0;

	if (!ep || !pkts || n <= 0)
		return -EINVAL;
	if (!ep->is_open)
		return -EBADF;
	if (n > EP_BATCH_MAX)
		n = EP_BATCH_MAX;
	for (int i = 0; i < n; i++)
		if (!pkts[i].buf)
			return -EINVAL;

	/* Bounded: a flood of oversized or erroring datagrams must not pin us here. */
	for (int round = 0; round < 8 && got < n; round++) {
		int want = n - got;
		memset(msgs, 0, sizeof(msgs[0]) * (size_t)want);
		for (int i = 0; i < want; i++) {
			iovs[i].iov_base = pkts[got + i].buf;
			iovs[i].iov_len = SWV_EP_MAX_DGRAM;
			msgs[i].msg_hdr.msg_iov = &iovs[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
			msgs[i].msg_hdr.msg_name = &pkts[got + i].src;
			msgs[i].msg_hdr.msg_namelen = sizeof(pkts[got + i].src);
		}
		int r = recvmmsg(ep->fd, msgs, (unsigned)want, MSG_DONTWAIT, NULL);
		if (r < 0) {
			int err = errno;
			if (err == EINTR)
				continue;
			if (err == EAGAIN || err == EWOULDBLOCK)
				break;
			if (is_icmp_error(err)) {
				drain_errqueue(ep->fd);
				continue;
			}
			return got ? got : -err;
		}
		/* Compact: drop truncated datagrams, move the rest down. Copies only happen
		 * after a truncation, which is rare. */
		int base = got;
		for (int i = 0; i < r; i++) {
			struct swv_rx_pkt *from = &pkts[base + i];
			if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
				ep->rx_truncated++;
				swv_log(SWV_LOG_DEBUG, "endpoint %u: dropped oversized datagram",
					ep->port);
				continue;
			}
			struct swv_rx_pkt *to = &pkts[got];
			if (to != from) {
				memcpy(to->buf, from->buf, msgs[i].msg_len);
				to->src = from->src;
			}
			to->len = msgs[i].msg_len;
			to->unchecked = false; /* UDP: always checked */
			got++;
		}
		if (r < want && got == base + r)
			break; /* socket drained and nothing was dropped */
	}
	return got;
}

/* ------------------------------------------------------------------ offload */

bool swv_ep_gso_usable(const struct swv_endpoint *ep)
{
	return ep && ep->is_open && !ep->fault &&
	       !atomic_load_explicit(&ep->gso_off, memory_order_relaxed);
}

/* Cut the next 'len' bytes of an iovec walk (position *vi, *voff) into out[]. Returns
 * the number of entries used, or -1 if iov ran out or out[] is too small. */
static int iov_take(const struct iovec *iov, int iovcnt, int *vi, size_t *voff, size_t len,
		    struct iovec *out, int max)
{
	int n = 0;
	while (len) {
		if (*vi >= iovcnt || n == max)
			return -1;
		size_t avail = iov[*vi].iov_len - *voff;
		if (avail == 0) {
			(*vi)++;
			*voff = 0;
			continue;
		}
		size_t take = avail < len ? avail : len;
		out[n].iov_base = (uint8_t *)iov[*vi].iov_base + *voff;
		out[n++].iov_len = take;
		*voff += take;
		len -= take;
	}
	return n;
}

/* One packet per sendmsg (through udp_send, so the fault injector sees each). */
static int send_each(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		     const struct iovec *iov, int iovcnt, size_t seg_size, unsigned nseg,
		     size_t total, unsigned *nsent)
{
	struct iovec sub[16];
	int vi = 0, err = 0;
	size_t voff = 0;

	for (unsigned i = 0; i < nseg; i++) {
		size_t len = i + 1 < nseg ? seg_size : total - (size_t)i * seg_size;
		int n = iov_take(iov, iovcnt, &vi, &voff, len, sub, (int)SWV_ARRAY_SIZE(sub));
		if (n < 0) {
			*nsent = i;
			return EINVAL;
		}
		int rc = udp_send(ep, dst, sub, n);
		if (rc == EAGAIN || rc == ENOBUFS) {
			*nsent = i;
			return rc;
		}
		if (rc && !err)
			err = rc; /* lost on the way like any datagram; the rest still goes */
	}
	*nsent = nseg;
	return err;
}

/* nseg packets by UDP: one GSO send when the socket takes it, else one by one. */
static int udp_send_run(struct swv_endpoint *ep, const struct sockaddr_in *dst,
			const struct iovec *iov, int iovcnt, size_t seg_size, unsigned nseg,
			size_t total, unsigned *nsent)
{
	if (nseg == 1 || !swv_ep_gso_usable(ep))
		return send_each(ep, dst, iov, iovcnt, seg_size, nseg, total, nsent);
	txb_drain(); /* keep this thread's datagrams in order */

	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct msghdr msg = {
		.msg_name = (void *)dst,
		.msg_namelen = sizeof(*dst),
		.msg_iov = (struct iovec *)iov,
		.msg_iovlen = (size_t)iovcnt,
		.msg_control = ctl.buf,
		.msg_controllen = sizeof(ctl.buf),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	uint16_t gso = (uint16_t)seg_size;
	cm->cmsg_level = SOL_UDP;
	cm->cmsg_type = UDP_SEGMENT;
	cm->cmsg_len = CMSG_LEN(sizeof(gso));
	memcpy(CMSG_DATA(cm), &gso, sizeof(gso));
	for (;;) {
		if (sendmsg(ep->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) {
			*nsent = nseg;
			atomic_fetch_add_explicit(&ep->tx_gso_calls, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&ep->tx_gso_segs, nseg, memory_order_relaxed);
			return 0;
		}
		int err = errno;
		if (err == EINTR)
			continue;
		if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS)
			return err == EWOULDBLOCK ? EAGAIN : err;
		if (err == EIO || err == EINVAL || err == EOPNOTSUPP || err == ENOPROTOOPT ||
		    err == EMSGSIZE) {
			/* No UDP_SEGMENT here (old kernel, no checksum offload on the route,
			 * segment larger than the path MTU): remember, and send one by one. */
			if (!atomic_exchange(&ep->gso_off, true))
				swv_log(SWV_LOG_DEBUG,
					"endpoint %u: UDP GSO refused (%s); sending packet by packet",
					ep->port, strerror(err));
			return send_each(ep, dst, iov, iovcnt, seg_size, nseg, total, nsent);
		}
		return err; /* like a lost datagram (nothing sent) */
	}
}

/* The shape every run must have (swv_ep_send_gso): 0 and its byte count, or EINVAL. */
static int run_shape(const struct swv_endpoint *ep, const struct sockaddr_in *dst,
		     const struct iovec *iov, int iovcnt, size_t seg_size, unsigned nseg,
		     size_t *total)
{
	if (swv_unlikely(!dgram_ok(ep, dst, iov, iovcnt) || !seg_size || !nseg ||
			 nseg > SWV_EP_GSO_MAX_SEGS || seg_size > UINT16_MAX))
		return EINVAL;
	size_t t = 0;
	for (int i = 0; i < iovcnt; i++)
		t += iov[i].iov_len;
	/* Every packet but the last is exactly seg_size; the last 1..seg_size bytes. */
	if (t <= (size_t)(nseg - 1) * seg_size || t > (size_t)nseg * seg_size ||
	    t > SWV_EP_GSO_MAX_BYTES)
		return EINVAL;
	*total = t;
	return 0;
}

int swv_ep_send_gso(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		    const struct iovec *iov, int iovcnt, size_t seg_size, unsigned nseg,
		    unsigned *nsent)
{
	unsigned dummy;
	if (!nsent)
		nsent = &dummy;
	*nsent = 0;
	size_t total;
	if (run_shape(ep, dst, iov, iovcnt, seg_size, nseg, &total))
		return EINVAL;
	if (ep->shm) {
		struct swv_shm_peer *p = swv_shm_route(ep->shm, dst);
		if (p) {
			int rc = swv_shm_send(ep->shm, p, iov, iovcnt, seg_size, nseg, false);
			*nsent = rc ? 0 : nseg;
			return rc;
		}
	}
	return udp_send_run(ep, dst, iov, iovcnt, seg_size, nseg, total, nsent);
}

int swv_ep_send_udp(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		    const struct iovec *iov, int iovcnt, size_t seg_size, unsigned nseg,
		    unsigned *nsent)
{
	unsigned dummy;
	if (!nsent)
		nsent = &dummy;
	*nsent = 0;
	if (nseg == 1) { /* one datagram: seg_size is not looked at, as on the ring */
		if (swv_unlikely(!dgram_ok(ep, dst, iov, iovcnt)))
			return EINVAL;
		int rc = udp_send(ep, dst, iov, iovcnt);
		*nsent = swv_ep_left(rc);
		return rc;
	}
	size_t total;
	if (run_shape(ep, dst, iov, iovcnt, seg_size, nseg, &total))
		return EINVAL;
	return udp_send_run(ep, dst, iov, iovcnt, seg_size, nseg, total, nsent);
}

void swv_ep_enable_gro(struct swv_endpoint *ep)
{
	int one = 1;
	if (!ep || !ep->is_open || offload_disabled())
		return;
	ep->gro = setsockopt(ep->fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0;
}

struct rx_priv {
	struct mmsghdr msgs[EP_BATCH_MAX];
	struct iovec iovs[EP_BATCH_MAX];
	struct sockaddr_in src[EP_BATCH_MAX];
	union {
		char buf[CMSG_SPACE(sizeof(int)) + 32];
		struct cmsghdr align;
	} ctl[EP_BATCH_MAX];
};

int swv_ep_rx_init(struct swv_ep_rx *rx, unsigned nbufs)
{
	memset(rx, 0, sizeof(*rx));
	if (nbufs == 0 || nbufs > EP_BATCH_MAX)
		return EINVAL;
	rx->nbufs = nbufs;
	rx->mem = malloc((size_t)nbufs * SWV_EP_RX_BUF_LEN);
	rx->segs = calloc((size_t)nbufs * SWV_EP_GSO_MAX_SEGS, sizeof(*rx->segs));
	rx->priv = calloc(1, sizeof(struct rx_priv));
	if (!rx->mem || !rx->segs || !rx->priv) {
		swv_ep_rx_free(rx);
		return ENOMEM;
	}
	return 0;
}

void swv_ep_rx_free(struct swv_ep_rx *rx)
{
	free(rx->mem);
	free(rx->segs);
	free(rx->priv);
	memset(rx, 0, sizeof(*rx));
}

/* The GRO segment size of a received datagram, or 0 if it was not coalesced. Only a
 * cmsg that lies wholly inside the control data the kernel returned is read. */
static size_t gro_size(struct msghdr *m)
{
	const char *end = (const char *)m->msg_control + m->msg_controllen;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
		    c->cmsg_len >= CMSG_LEN(sizeof(int)) &&
		    (const char *)CMSG_DATA(c) + sizeof(int) <= end) {
			int v;
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			return v > 0 ? (size_t)v : 0;
		}
	}
	return 0;
}

int swv_ep_recv_segs(struct swv_endpoint *ep, struct swv_ep_rx *rx)
{
	if (!ep || !rx || !rx->priv || !rx->nbufs)
		return -EINVAL;
	if (!ep->is_open)
		return -EBADF;
	struct rx_priv *p = rx->priv;
	unsigned n = rx->nbufs;
	int r = -1;

	rx->ndgrams = 0;
	for (unsigned i = 0; i < n; i++) {
		p->iovs[i].iov_base = rx->mem + (size_t)i * SWV_EP_RX_BUF_LEN;
		p->iovs[i].iov_len = SWV_EP_RX_BUF_LEN;
		memset(&p->msgs[i].msg_hdr, 0, sizeof(p->msgs[i].msg_hdr));
		p->msgs[i].msg_hdr.msg_iov = &p->iovs[i];
		p->msgs[i].msg_hdr.msg_iovlen = 1;
		p->msgs[i].msg_hdr.msg_name = &p->src[i];
		p->msgs[i].msg_hdr.msg_namelen = sizeof(p->src[i]);
		if (ep->gro) {
			p->msgs[i].msg_hdr.msg_control = p->ctl[i].buf;
			p->msgs[i].msg_hdr.msg_controllen = sizeof(p->ctl[i].buf);
		}
	}
	/* Bounded: a stream of ICMP errors must not pin us here. */
	for (int round = 0; round < 8; round++) {
		r = recvmmsg(ep->fd, p->msgs, n, MSG_DONTWAIT, NULL);
		if (r >= 0)
			break;
		int err = errno;
		if (err == EINTR)
			continue;
		if (err == EAGAIN || err == EWOULDBLOCK)
			return 0;
		if (is_icmp_error(err)) {
			drain_errqueue(ep->fd);
			continue;
		}
		return -err;
	}
	if (r < 0)
		return 0;
	rx->ndgrams = (unsigned)r;

	/* The descriptor array holds SWV_EP_GSO_MAX_SEGS per datagram buffer, and no
	 * datagram gets more than that: however the kernel coalesced (or a foreign
	 * UDP_SEGMENT sender shaped) one datagram, the ones after it in the batch keep
	 * their room. */
	const size_t cap = (size_t)n * SWV_EP_GSO_MAX_SEGS;
	size_t nseg = 0;
	for (int i = 0; i < r; i++) {
		struct msghdr *m = &p->msgs[i].msg_hdr;
		size_t len = p->msgs[i].msg_len;
		if (m->msg_flags & MSG_TRUNC) {
			ep->rx_truncated++;
			swv_log(SWV_LOG_DEBUG, "endpoint %u: dropped oversized datagram", ep->port);
			continue;
		}
		uint8_t *buf = p->iovs[i].iov_base;
		size_t seg = ep->gro ? gro_size(m) : 0;
		/* Not coalesced: one packet (a zero-length one too: the parser rejects it). */
		if (!seg || seg >= len)
			seg = len ? len : 1;
		else
			ep->rx_gro_dgrams++;
		/* Consecutive packets of seg bytes, the last possibly shorter; each is
		 * validated by the parser like any datagram, whatever its size. */
		size_t count = len ? (len - 1) / seg + 1 : 1;
		size_t keep = count < SWV_EP_GSO_MAX_SEGS ? count : SWV_EP_GSO_MAX_SEGS;
		if (keep > cap - nseg) /* cannot happen (r <= n); the bound is kept anyway */
			keep = cap - nseg;
		if (keep < count) {
			ep->rx_gro_excess += count - keep;
			swv_log(SWV_LOG_DEBUG,
				"endpoint %u: datagram of %zu packets, %zu dropped (at most %u)",
				ep->port, count, count - keep, SWV_EP_GSO_MAX_SEGS);
		}
		for (size_t k = 0, off = 0; k < keep; k++, off += seg) {
			rx->segs[nseg].buf = buf + off;
			rx->segs[nseg].len = len - off < seg ? len - off : seg;
			rx->segs[nseg].unchecked = false; /* UDP: always checked */
			rx->segs[nseg++].src = p->src[i];
		}
		if (count > 1)
			ep->rx_gro_segs += keep;
	}
	return (int)nseg;
}

bool swv_ep_backlog(struct swv_endpoint *ep, const struct sockaddr_in *dst, uint64_t *mark)
{
	if (!ep || !ep->shm || !dst)
		return false;
	return swv_shm_backlog(ep->shm, swv_shm_route(ep->shm, dst), mark);
}

int swv_ep_direct(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		  const struct swv_shm_direct *d, void *buf, size_t len)
{
	if (!ep->shm || !dst)
		return ENOTSUP;
	struct swv_shm_peer *p = swv_shm_route(ep->shm, dst);
	if (!p)
		return ENOTSUP;
	int rc = swv_shm_direct(ep->shm, p, d, buf, len);
	swv_shm_put(ep->shm, p);
	return rc;
}
