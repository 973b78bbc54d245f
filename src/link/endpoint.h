/*
 * Endpoint: the link layer's port, one UDP socket bound to the device IP on an ephemeral
 * port. Owner: link. Every packet leaves through swv_ep_send / swv_ep_send_gso, which
 * hand it to the intra-host link (link/shm.h) when the destination has an inbox on this
 * host and send it as a datagram otherwise, or through swv_ep_send_ring /
 * swv_ep_send_udp, which take one link each. Sending is thread-safe (any thread may
 * transmit); receiving is done only by the owning context's progress thread. The fault
 * injector, when configured, sits on the UDP send path and in swv_ep_flush_delayed.
 */
#ifndef SWV_LINK_ENDPOINT_H
#define SWV_LINK_ENDPOINT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct swv_fault;
struct swv_held_pkt;
struct swv_shm_port;
struct swv_shm_direct;

/* Called (outside any endpoint lock, from whichever thread sent) when the injector
 * holds a packet until deadline_ns, so the progress thread can be kicked to call
 * swv_ep_flush_delayed in time. Typically wraps swv_progress_kick. */
typedef void (*swv_ep_hold_cb)(void *arg, uint64_t deadline_ns);

struct swv_endpoint {
	int fd;               /* non-blocking UDP socket */
	uint16_t port;        /* host order */
	struct in_addr addr;  /* bound address */
	struct swv_fault *fault; /* NULL = no injection */
	pthread_mutex_t fault_lock; /* protects held (the injector locks its own RNG) */
	bool is_open;             /* swv_ep_close is a no-op on a zeroed/closed endpoint */
	bool mcast;		  /* a multicast group's receive socket (swv_ep_open_mcast) */
	/* QPs using this socket: changed by their owner (core/context.c, under its
	 * qp_lock), read lock-free by whoever shares out the socket buffer. */
	_Atomic unsigned nqps;
	/* Packets held by the injector, FIFO, under fault_lock. Plain pointers (NULL when
	 * empty) so that an idle endpoint may be moved by struct copy. */
	struct swv_held_pkt *held_head, *held_tail;
	swv_ep_hold_cb hold_cb;   /* optional, see swv_ep_set_hold_cb */
	void *hold_arg;
	uint64_t rx_truncated;    /* datagrams dropped for exceeding SWV_EP_MAX_DGRAM
				   * (written by the receiving thread only) */
	/* Segmentation offload (docs/wire.md, "GSO and GRO"). Plain fields: an idle
	 * endpoint may still be moved by struct copy. */
	bool gro;                 /* UDP_GRO is on: swv_ep_recv_segs splits coalesced
				   * datagrams (set by swv_ep_enable_gro) */
	_Atomic bool gso_off;     /* UDP_SEGMENT unusable here (SWVERBS_GSO=0, or the
				   * kernel/route refused it once): one sendmsg per packet */
	_Atomic uint64_t tx_gso_calls, tx_gso_segs; /* statistics */
	uint64_t rx_gro_dgrams, rx_gro_segs;         /* statistics (receiving thread) */
	uint64_t rx_gro_excess; /* packets dropped from datagrams holding more than
				 * SWV_EP_GSO_MAX_SEGS (receiving thread) */
	/* The intra-host link (link/shm.h): this endpoint's inbox and its routes to other
	 * endpoints' inboxes; NULL = UDP only. Set by the owner before the endpoint is
	 * shared (swv_ep_attach_shm), freed by swv_ep_close. */
	struct swv_shm_port *shm;
	/* Datagrams sent over UDP (not counting doorbells): a receiver whose endpoint has
	 * sent none lately expects its traffic through the inbox (progress/progress.c). */
	_Atomic uint64_t udp_tx;
};

struct swv_rx_pkt {
	uint8_t *buf;  /* caller-provided storage */
	size_t len;    /* bytes received */
	struct sockaddr_in src;
	/* A record of the intra-host link whose sender left the ICRC out
	 * (swv_ep_send_ring): the trailer is not to be checked. Never set for UDP. */
	bool unchecked;
};

/* Bind to addr:0, enlarge socket buffers. Returns 0 or positive errno. The injector
 * (may be NULL) is not owned: several endpoints may share one, and it must outlive
 * them. On failure *ep is left closed. */
int swv_ep_open(struct swv_endpoint *ep, struct in_addr addr, struct swv_fault *fault);
/* A receive-only socket for the IP multicast group 'group' on UDP port 'port': bound to
 * group:port with SO_REUSEADDR (every process of the host that joined gets its own
 * copy of each datagram), a member on the interface that owns ifaddr, and deaf to the
 * groups other sockets joined (IP_MULTICAST_ALL off). Sets ep->mcast; never has an
 * inbox or an injector. Returns 0 or a positive errno (*ep then left closed). */
int swv_ep_open_mcast(struct swv_endpoint *ep, struct in_addr ifaddr, struct in_addr group,
		      uint16_t port);
/* Closes the socket and frees packets still held by the injector. Safe on a zeroed
 * or already closed endpoint. Must not race with send/recv on the same endpoint. */
void swv_ep_close(struct swv_endpoint *ep);
/* Give the endpoint an inbox on the intra-host link (before it is used by other
 * threads; never with a fault injector, whose losses a ring cannot model). Returns 0
 * or an errno, and the endpoint then stays UDP only. */
int swv_ep_attach_shm(struct swv_endpoint *ep);
/* Install the hold notification (before the endpoint is used by other threads). */
void swv_ep_set_hold_cb(struct swv_endpoint *ep, swv_ep_hold_cb cb, void *arg);

/* The address the endpoint is bound to (where its peers send). */
static inline struct sockaddr_in swv_ep_sockaddr(const struct swv_endpoint *ep)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = ep->addr};
	sa.sin_port = htons(ep->port);
	return sa;
}

/* Send one datagram (gathered from iov). Returns 0, or a positive errno; a full
 * socket buffer (EAGAIN/ENOBUFS) is reported so the caller can retry later. A
 * destination with an inbox on this host gets the packet through shared memory
 * (link/shm.h), with the same results (EAGAIN for a full ring). */
int swv_ep_send(struct swv_endpoint *ep, const struct sockaddr_in *dst, const struct iovec *iov,
		int iovcnt);

/* Whether a one-datagram send's result means the packet left: a full socket (EAGAIN,
 * ENOBUFS) kept it, any other error lost it on the way, as a link loses datagrams. */
static inline bool swv_ep_left(int rc)
{
	return rc != EAGAIN && rc != EWOULDBLOCK && rc != ENOBUFS;
}

/* Send nseg packets (as swv_ep_send_gso: seg_size each but the last; one packet with
 * nseg 1) only if dst is reached through the intra-host link: ENOTCONN, nothing sent,
 * when it is not (no inbox there, or none here). Otherwise as swv_ep_send_gso (all or
 * nothing). For a sender whose packets carry no ICRC until they take UDP: the records
 * say so (swv_rx_pkt.unchecked). */
int swv_ep_send_ring(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		     const struct iovec *iov, int iovcnt, size_t seg_size, unsigned nseg,
		     unsigned *nsent);

/* Send nseg packets (as swv_ep_send_gso) by UDP only, with no look at the intra-host
 * link: for a sender that just learnt from swv_ep_send_ring that dst is not reached
 * through it (one route lookup per run). Results as swv_ep_send_gso's, but one packet
 * (nseg 1) is sent whatever seg_size says, as swv_ep_send_ring sends it. */
int swv_ep_send_udp(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		    const struct iovec *iov, int iovcnt, size_t seg_size, unsigned nseg,
		    unsigned *nsent);

/* Direct placement towards dst (link/shm.h, swv_shm_direct): 0 when every byte was
 * placed, else an errno and the caller sends the payload as usual (ENOTSUP: dst is not
 * reached through the intra-host link, or the endpoint has no inbox). */
int swv_ep_direct(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		  const struct swv_shm_direct *d, void *buf, size_t len);

/* Whether dst is reached through the intra-host link and its receiver, alive, has not
 * yet taken what this endpoint had sent it when first asked (*mark, link/shm.h
 * swv_shm_backlog). */
bool swv_ep_backlog(struct swv_endpoint *ep, const struct sockaddr_in *dst, uint64_t *mark);

/* Receive up to n datagrams without blocking; each pkts[i].buf must have room for
 * SWV_EP_MAX_DGRAM bytes. Returns the number received (0 if none). Truncated
 * (oversized) datagrams and ICMP errors (ECONNREFUSED, ...) are dropped silently.
 * A negative errno is returned only for bad arguments (-EINVAL, -EBADF) or an
 * unexpected socket error before anything was received. At most 64 per call. */
#define SWV_EP_MAX_DGRAM 8192
int swv_ep_recv_batch(struct swv_endpoint *ep, struct swv_rx_pkt *pkts, int n);

/*
 * Segmentation offload.
 *
 * Send: swv_ep_send_gso sends several IB packets, laid back to back in iov, each
 * seg_size bytes except the last (which may be shorter), as one UDP_SEGMENT
 * ("GSO") sendmsg: the kernel cuts it into one datagram per packet (on loopback the
 * super-datagram travels whole and, if the receiver has UDP_GRO on, is delivered
 * whole). At most SWV_EP_GSO_MAX_SEGS packets and SWV_EP_GSO_MAX_BYTES bytes per
 * call. Falls back to one sendmsg per packet when the fault injector is on (it
 * decides per datagram), when SWVERBS_GSO=0, or once the kernel refused UDP_SEGMENT
 * on this endpoint (the refusal is remembered). Returns 0 when every packet went out,
 * else a positive errno with *nsent = packets sent before the error (0..nseg-1; a
 * GSO call is all or nothing). EAGAIN/ENOBUFS: the socket buffer is full.
 */
#define SWV_EP_GSO_MAX_SEGS  64
#define SWV_EP_GSO_MAX_BYTES 65000 /* below the largest UDP/IPv4 payload (65507) */
int swv_ep_send_gso(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		    const struct iovec *iov, int iovcnt, size_t seg_size, unsigned nseg,
		    unsigned *nsent);
/* Whether swv_ep_send_gso would use UDP_SEGMENT now (callers may skip building
 * runs that would be sent one by one anyway). */
bool swv_ep_gso_usable(const struct swv_endpoint *ep);

/*
 * Transmit batching. Between swv_ep_batch_begin and swv_ep_batch_end (nestable,
 * per thread), small datagrams (<= SWV_EP_BATCH_SMALL bytes: ACKs, small requests,
 * small READ responses) given to swv_ep_send are copied into a per-thread batch and
 * sent together, one sendmmsg per endpoint, when the outermost scope ends (or the batch
 * fills up). Anything else sent in the scope (large datagrams, GSO runs) first sends
 * what is queued, so each thread's datagrams leave in the order it sent them. Inside a
 * scope swv_ep_send returns 0 for a queued datagram; if it is then refused (socket
 * buffer full), it is lost like any datagram on the wire and the reliability protocol
 * recovers it. Endpoints with a fault injector are never batched. Use it around work
 * done under a lock that orders the packets (the QP lock), and end it before
 * releasing that lock.
 */
#define SWV_EP_BATCH_SMALL 512
void swv_ep_batch_begin(void);
void swv_ep_batch_end(void);

/* Receive: turn on UDP_GRO (unless SWVERBS_GSO=0) so that a run of packets arrives
 * as one coalesced datagram; swv_ep_recv_segs then hands back one descriptor per
 * packet. Only the receiving thread may call these; the old swv_ep_recv_batch must
 * not be used on an endpoint with GRO on (a coalesced datagram would not fit). */
void swv_ep_enable_gro(struct swv_endpoint *ep);

#define SWV_EP_RX_BUF_LEN 65536 /* one (possibly coalesced) datagram */
struct swv_ep_rx {
	unsigned nbufs;          /* datagrams per recvmmsg */
	uint8_t *mem;            /* nbufs x SWV_EP_RX_BUF_LEN */
	struct swv_rx_pkt *segs; /* room for nbufs x SWV_EP_GSO_MAX_SEGS descriptors */
	void *priv;              /* mmsghdr/iovec/control arrays */
	unsigned ndgrams;        /* datagrams the last swv_ep_recv_segs received */
};
/* Allocate receive state for nbufs datagrams per call (1..64). 0 or ENOMEM. */
int swv_ep_rx_init(struct swv_ep_rx *rx, unsigned nbufs);
void swv_ep_rx_free(struct swv_ep_rx *rx);
/* Receive up to rx->nbufs datagrams without blocking and split coalesced ones at
 * their GRO segment size. Returns the number of packets in rx->segs (buf points into
 * rx->mem, valid until the next call; 0 if none), or a negative errno as
 * swv_ep_recv_batch. rx->ndgrams < rx->nbufs means the socket was drained. Truncated
 * datagrams and ICMP errors are dropped as in swv_ep_recv_batch. A datagram yields at
 * most SWV_EP_GSO_MAX_SEGS packets (what a swverbs sender puts in one): its first
 * ones; the rest are dropped and counted in rx_gro_excess, so the result never
 * exceeds rx->nbufs x SWV_EP_GSO_MAX_SEGS and every datagram of the batch is
 * represented. Packets are not checked here (sizes below an IB header included):
 * that is swv_pkt_parse's job. */
int swv_ep_recv_segs(struct swv_endpoint *ep, struct swv_ep_rx *rx);

/* Release delayed/reordered packets whose time has come. Returns the absolute
 * monotonic deadline (ns) of the next held packet, or 0 if none is held. */
uint64_t swv_ep_flush_delayed(struct swv_endpoint *ep, uint64_t now_ns);

#endif
