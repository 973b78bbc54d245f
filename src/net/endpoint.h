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
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct swv_fault;

struct swv_endpoint {
	int fd;               /* non-blocking UDP socket */
	uint16_t port;        /* host order */
	struct in_addr addr;  /* bound address */
	struct swv_fault *fault; /* NULL = no injection */
	pthread_mutex_t fault_lock; /* protects the injector's delayed queue and RNG */
};

struct swv_rx_pkt {
	uint8_t *buf;  /* caller-provided storage */
	size_t len;    /* bytes received */
	struct sockaddr_in src;
};

/* Bind to addr:0, enlarge socket buffers. Returns 0 or positive errno. */
int swv_ep_open(struct swv_endpoint *ep, struct in_addr addr, struct swv_fault *fault);
void swv_ep_close(struct swv_endpoint *ep);

/* Send one datagram (gathered from iov). Returns 0, or a positive errno; a full
 * socket buffer (EAGAIN/ENOBUFS) is reported so the caller can retry later. */
int swv_ep_send(struct swv_endpoint *ep, const struct sockaddr_in *dst, const struct iovec *iov,
		int iovcnt);

/* Receive up to n datagrams without blocking; each pkts[i].buf must have room for
 * SWV_EP_MAX_DGRAM bytes. Returns the number received (0 if none). */
#define SWV_EP_MAX_DGRAM 8192
int swv_ep_recv_batch(struct swv_endpoint *ep, struct swv_rx_pkt *pkts, int n);

/* Release delayed/reordered packets whose time has come. Returns the absolute
 * monotonic deadline (ns) of the next held packet, or 0 if none is held. */
uint64_t swv_ep_flush_delayed(struct swv_endpoint *ep, uint64_t now_ns);

#endif
