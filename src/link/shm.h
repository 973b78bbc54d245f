/*
 * The intra-host link: packets between two endpoints of the same user on the same host
 * and network namespace travel through shared memory instead of UDP (docs/design.md,
 * "The intra-host link"). Owner: link.
 *
 * Each endpoint that may receive this way owns an inbox, a shared-memory file named by
 * its user, network namespace, IP and port. The inbox holds SWV_SHM_SLOTS rings; a
 * sending endpoint claims one ring (single producer, the receiving endpoint is the
 * single consumer) and writes whole packets -- the same bytes a datagram would carry,
 * headers, payload and ICRC -- so the transport above cannot tell the two links apart
 * and every check, status and counter rule holds unchanged.
 *
 * Routing is per destination: swv_shm_route answers whether dst has an inbox this
 * endpoint can write to (a lookup in a table of SWV_SHM_MAX_PEERS destinations on the
 * send path; misses are remembered for SWV_SHM_MISS_TTL_NS). A full table evicts the
 * least recently used destination that has been idle for SWV_SHM_IDLE_NS and whose
 * ring is drained, giving its slot back. A sender writes records, publishes the ring's
 * tail, and sends a doorbell datagram to the receiver's UDP port only if the receiver
 * announced that it is about to sleep (swv_shm_arm); a receiver that polls never costs
 * its senders a system call.
 *
 * Threads: any thread may send (a per-peer mutex orders the producers of one ring);
 * receiving (swv_shm_rx_take / swv_shm_rx_release, swv_shm_arm) is done only under the
 * owning context's progress work lock, one thread at a time. Ring memory is shared with
 * another process of the same user, which is trusted no more than a peer on the wire:
 * every record length is checked before it is used, and a corrupt ring is dropped.
 */
#ifndef SWV_LINK_SHM_H
#define SWV_LINK_SHM_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct swv_shm_port;
struct swv_shm_peer;
struct swv_rx_pkt;

#define SWV_SHM_SLOTS	     32		  /* senders per inbox; more fall back to UDP */
#define SWV_SHM_RING_BYTES   (1u << 20)	  /* per ring: 256 packets of 4 KiB */
#define SWV_SHM_MAX_PEERS    64		  /* destinations cached per endpoint */
#define SWV_SHM_IDLE_NS	     100000000ull /* a route unused this long may be evicted */
#define SWV_SHM_MISS_TTL_NS  100000000ull /* a destination without inbox: ask again after */
#define SWV_SHM_DOORBELL_LEN 8

/* Whether the intra-host link may be used by this process (SWVERBS_SHM=0 forces UDP). */
bool swv_shm_enabled(void);

/* Create the inbox of the endpoint bound to addr:port whose UDP socket is fd (used for
 * doorbells). Returns the port object, or NULL with errno (the endpoint then simply uses
 * UDP). */
struct swv_shm_port *swv_shm_open(struct in_addr addr, uint16_t port, int fd);
/* Mark the inbox closed (senders stop using it), remove its name, unmap everything.
 * No other thread may use sp any more. NULL is a no-op. */
void swv_shm_close(struct swv_shm_port *sp);

/* The peer to write to for dst, or NULL to use UDP. Any thread. The peer is held for
 * the caller -- its table entry cannot be evicted (given to another destination) -- until
 * the caller passes it to swv_shm_send, or to swv_shm_put if it sends nothing. */
struct swv_shm_peer *swv_shm_route(struct swv_shm_port *sp, const struct sockaddr_in *dst);
/* Write nseg packets laid back to back in iov (each seg_size bytes but the last; one
 * packet: nseg 1, seg_size ignored) as one publish, and let go of p (swv_shm_route).
 * unchecked: their trailers carry no ICRC, and each record says so (swv_rx_pkt).
 * Returns 0, EAGAIN (the ring is full: as a full socket buffer, nothing of it was
 * written; what follows is the transport's to decide), or EINVAL. */
int swv_shm_send(struct swv_shm_port *sp, struct swv_shm_peer *p, const struct iovec *iov,
		 int iovcnt, size_t seg_size, unsigned nseg, bool unchecked);
/* Let go of a peer swv_shm_route returned without sending to it. NULL is a no-op. */
void swv_shm_put(struct swv_shm_port *sp, struct swv_shm_peer *p);
/* Whether p's receiver, alive, has not yet taken what we had written to its ring when
 * the caller first asked (*mark: 0 at a first ask, which sets it to our ring position;
 * the caller clears it when the question is over): those packets are not lost, since a
 * ring loses nothing -- the receiver is not scheduled, or stopped. Packets written
 * since (other QPs of the endpoint streaming) do not count, so a receiver that keeps
 * taking is never a backlog for long. Rings its doorbell again, should one have been
 * lost. Lets go of p. */
bool swv_shm_backlog(struct swv_shm_port *sp, struct swv_shm_peer *p, uint64_t *mark);

/* Receive side (progress work lock held). Take up to max packets from the inbox: each
 * out[i].buf points into ring memory and stays valid until swv_shm_rx_release, which
 * must be called before the next take. Returns the number taken. */
int swv_shm_rx_take(struct swv_shm_port *sp, struct swv_rx_pkt *out, int max);
void swv_shm_rx_release(struct swv_shm_port *sp);
/* Announce (on) or withdraw (off) that nobody will poll this inbox until a doorbell.
 * With on, returns true if a ring already holds packets (the caller must not sleep). */
bool swv_shm_arm(struct swv_shm_port *sp, bool on);
/* Whether a datagram received on the UDP socket is a doorbell (to be discarded). */
bool swv_shm_is_doorbell(const uint8_t *buf, size_t len);

/* Test hook, internal (unit tests only): publish on p's ring (sp: the sender's port) a record whose
 * length word claims more than the ring holds, as a broken or hostile sender could; lets
 * go of p as swv_shm_send does. */
void swv_shm_test_publish_bad(struct swv_shm_port *sp, struct swv_shm_peer *p);

/* Test hook, internal (unit tests only): how long a route must be unused before it may
 * be evicted (SWV_SHM_IDLE_NS by default), for every port of the process. */
void swv_shm_test_set_idle(uint64_t ns);

/*
 * Direct placement, the single copy (docs/design.md, "The intra-host link"). The owner
 * of an inbox publishes in it what a sender needs to check an RDMA WRITE or READ as
 * its responder would: per QP (indexed by the QPN's low 8 bits) whether it takes
 * requests, from which peer QP, its access flags, PD, P_Key and path MTU; per plain MR
 * its rkey, PD, rights and range. A sender whose checks pass copies the payload
 * straight between its buffer and the owner's memory (process_vm_writev/readv); the
 * request itself still travels the ring, flagged as placed. The table is shared
 * memory another process of the user can write: every entry carries a check word, and
 * a sender that finds a bad one uses the ring for that destination from then on.
 */
/* Off with SWVERBS_SHM_DIRECT=0 (and with SWVERBS_SHM=0). Read once per process. */
bool swv_shm_direct_enabled(void);

/* Owner side (any thread of the owning context). */
struct swv_shm_dt_qp_info {
	uint32_t access;   /* qp_access_flags */
	uint32_t dest_qpn; /* the peer QP it is connected to */
	uint32_t pkey, mtu;
	uint64_t pd;		 /* an identity of its PD (compared with the MRs') */
	struct sockaddr_in peer; /* the peer's address */
};
/* Publish (info) or withdraw (NULL) the QP numbered qpn. Returns once no sender is
 * inside a placement through what was published before. */
void swv_shm_dt_qp(struct swv_shm_port *sp, uint32_t qpn, const struct swv_shm_dt_qp_info *info);
/* Publish an MR's rkey; false when it is not (no room near its home: senders then use
 * the ring for it). */
bool swv_shm_dt_mr_add(struct swv_shm_port *sp, uint32_t rkey, uint64_t pd, unsigned access,
		       uint64_t iova, uint64_t length, const void *host);
/* Withdraw rkey; returns once no sender is inside a placement into it (a sender that
 * died in one is not waited for). */
void swv_shm_dt_mr_del(struct swv_shm_port *sp, uint32_t rkey);

/* Sender side (any thread). */
struct swv_shm_direct {
	uint32_t dqpn, sqpn; /* the owner's QP, the sending QP */
	uint32_t rkey, pkey;
	unsigned access; /* the right the operation needs (IBV_ACCESS_REMOTE_WRITE/READ) */
	uint64_t va;
	bool read; /* copy from the owner's memory into buf (else from buf into it) */
	/* A message of several packets (a WRITE placed whole): the local bytes are iov
	 * (buf is then ignored) and pmtu, the size of each packet but the last, must be
	 * the owner's path MTU. 0 / NULL: one packet, from buf. */
	uint32_t pmtu;
	const struct iovec *iov;
	int iovcnt;
};
/* Place len bytes through p. 0: done, every byte. Otherwise nothing may be assumed
 * about the owner's memory (a write may be partly placed) and the caller uses the
 * ring: ENOTSUP (not possible towards p), EAGAIN (a check failed or the kernel
 * refused), EBADMSG (the table is corrupt). */
int swv_shm_direct(struct swv_shm_port *sp, struct swv_shm_peer *p, const struct swv_shm_direct *d,
		   void *buf, size_t len);

/* Test hooks, internal: mark p's slot as inside a placement into rkey (a sender that
 * dies there); scribble over every published entry of sp's table. */
int swv_shm_test_mark_placing(struct swv_shm_peer *p, uint32_t rkey);
void swv_shm_test_corrupt_table(struct swv_shm_port *sp);
/* Make the inbox name another process as its owner, as when the owner died and its
 * pid went to an unrelated process (for tests; before any sender attaches). */
void swv_shm_test_set_owner_pid(struct swv_shm_port *sp, int32_t pid);

/* Statistics (any thread; relaxed). direct_*: placements done (direct_rd: of them,
 * reads from the owner's memory), attempts that fell back to the ring, tables found
 * corrupt (sender side); dt_waits: withdrawals that found a placement under way and
 * waited for it (owner side). */
struct swv_shm_stats {
	uint64_t tx_pkts, tx_full, doorbells_sent, rx_pkts, rx_corrupt;
	uint64_t evictions; /* routes given to another destination (the table was full) */
	uint64_t direct_tx, direct_rd, direct_fallback, direct_corrupt, dt_waits;
	unsigned peers; /* table entries (destinations, misses included) */
	/* The inbox now: bytes senders published and its reader has not given back yet,
	 * and whether it asks senders for a doorbell (its reader said it sleeps). Records
	 * waiting while the reader sleeps unarmed would be a lost wake-up. */
	uint64_t rx_backlog;
	bool armed;
};
void swv_shm_get_stats(const struct swv_shm_port *sp, struct swv_shm_stats *st);

#endif
