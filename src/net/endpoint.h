/*
 * UDP endpoint: one socket bound to the device IP on an ephemeral port. Owner: net.
 * Sending is thread-safe (any thread may transmit); receiving is done only by the
 * owning context's progress thread. The fault injector, when configured, sits in
 * swv_ep_send and swv_ep_flush_delayed.
 */
#ifndef SWV_NET_ENDPOINT_H
#define SWV_NET_ENDPOINT_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct swv_fault;
struct swv_held_pkt;

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
	/* Additions (net): */
	bool is_open;             /* swv_ep_close is a no-op on a zeroed/closed endpoint */
	/* Packets held by the injector, FIFO, under fault_lock. Plain pointers (NULL when
	 * empty) so that an idle endpoint may be moved by struct copy. */
	struct swv_held_pkt *held_head, *held_tail;
	swv_ep_hold_cb hold_cb;   /* optional, see swv_ep_set_hold_cb */
	void *hold_arg;
	uint64_t rx_truncated;    /* datagrams dropped for exceeding SWV_EP_MAX_DGRAM
				   * (written by the receiving thread only) */
};

struct swv_rx_pkt {
	uint8_t *buf;  /* caller-provided storage */
	size_t len;    /* bytes received */
	struct sockaddr_in src;
};

/* Bind to addr:0, enlarge socket buffers. Returns 0 or positive errno. The injector
 * (may be NULL) is not owned: several endpoints may share one, and it must outlive
 * them. On failure *ep is left closed. */
int swv_ep_open(struct swv_endpoint *ep, struct in_addr addr, struct swv_fault *fault);
/* Closes the socket and frees packets still held by the injector. Safe on a zeroed
 * or already closed endpoint. Must not race with send/recv on the same endpoint. */
void swv_ep_close(struct swv_endpoint *ep);
/* Install the hold notification (before the endpoint is used by other threads). */
void swv_ep_set_hold_cb(struct swv_endpoint *ep, swv_ep_hold_cb cb, void *arg);

/* Send one datagram (gathered from iov). Returns 0, or a positive errno; a full
 * socket buffer (EAGAIN/ENOBUFS) is reported so the caller can retry later. */
int swv_ep_send(struct swv_endpoint *ep, const struct sockaddr_in *dst, const struct iovec *iov,
		int iovcnt);

/* Receive up to n datagrams without blocking; each pkts[i].buf must have room for
 * SWV_EP_MAX_DGRAM bytes. Returns the number received (0 if none). Truncated
 * (oversized) datagrams and ICMP errors (ECONNREFUSED, ...) are dropped silently.
 * A negative errno is returned only for bad arguments (-EINVAL, -EBADF) or an
 * unexpected socket error before anything was received. At most 64 per call. */
#define SWV_EP_MAX_DGRAM 8192
int swv_ep_recv_batch(struct swv_endpoint *ep, struct swv_rx_pkt *pkts, int n);

/* Release delayed/reordered packets whose time has come. Returns the absolute
 * monotonic deadline (ns) of the next held packet, or 0 if none is held. */
uint64_t swv_ep_flush_delayed(struct swv_endpoint *ep, uint64_t now_ns);

#endif
