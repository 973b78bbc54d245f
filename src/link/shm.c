/* The intra-host link (link/shm.h): inboxes of rings in shared memory. */
#include "link/shm.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "link/endpoint.h"
#include "util/clock.h"
#include "util/compiler.h"
#include "util/log.h"

#define SHM_MAGIC   0x31304d4853565753ull /* "SWVSHM01" */
#define SHM_VERSION 4
#define REC_HDR	    8u
#define REC_WRAP    UINT32_MAX /* record marker: the rest of the ring is unused */
/* Record flags (second word of its header). */
#define REC_UNCHECKED 1u /* the packet's trailer carries no ICRC (swv_rx_pkt.unchecked) */
#define SHM_MAX_PKT SWV_EP_MAX_DGRAM
#define PAGE	    4096u

static const uint8_t doorbell[SWV_SHM_DOORBELL_LEN] = {'S', 'W', 'V', 'D', 'B', 'E', 'L', 'L'};

/*
 * Shared layout: header page, slot page(s), then one ring per slot. Fields written by
 * one side only: hdr->closed and owner_pid by the owner; slot->pid/addr by the sender
 * that claims it (CAS on pid); slot->tail by that sender (release: the records before
 * it are complete); slot->head by the owner (release: the bytes before it may be
 * overwritten); hdr->sleeping by the owner (1) and by a sender that rings (0).
 */
struct shm_hdr {
	uint64_t magic;
	uint32_t version, nslots, ring_bytes;
	int32_t owner_pid;
	uint64_t owner_pidns; /* inode of the owner's PID namespace: owner_pid means
			       * something only in that namespace */
	_Atomic uint32_t closed;
	_Atomic uint32_t sleeping;
	_Atomic uint32_t nclaimed; /* slots [0, nclaimed) may be in use */
	uint64_t dt_salt;	   /* mixed into every placement-table check word */
	/* The owner's start time (/proc/<pid>/stat): owner_pid names the owner only while
	 * the process of that pid started then (a pid is reused once its process dies). */
	uint64_t owner_start;
};

struct shm_slot {
	_Alignas(64) _Atomic int32_t pid; /* claimer; 0 = free */
	_Atomic uint64_t addr;		  /* claimer's IPv4 << 16 | port (host order); 0 = unset */
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) _Atomic uint64_t tail;
	/* A direct placement of the claimer under way (dt_mark): (QP entry + 1) << 32 |
	 * (MR entry + 1), 0 = none. Written by the claimer only, read by the owner
	 * before it lets an entry go (dt_wait). */
	_Alignas(64) _Atomic uint64_t placing;
};

/*
 * The placement table (swv_shm_dt_*): what a sender needs to check a direct placement
 * as the owner's responder would. Written by the owner only, each entry under a
 * sequence word (odd while it changes); readers copy an entry and accept it only if
 * the sequence was even and unchanged and the check word matches. QP entries are
 * indexed by the QPN's slot (its low 8 bits); MR entries by the rkey's hash, an entry
 * living at most DT_PROBES places from its home.
 */
struct dt_qp {
	_Alignas(64) _Atomic uint32_t seq;
	uint32_t qpn; /* 0 = none */
	uint32_t access, dest_qpn;
	uint64_t pd, peer_key;
	uint32_t pkey, mtu;
	uint64_t chk;
};

struct dt_mr {
	_Alignas(64) _Atomic uint32_t seq;
	uint32_t rkey; /* 0 = none */
	uint32_t access, pad_;
	uint64_t pd, iova, length, host;
	uint64_t chk;
};

#define DT_QPS	  256u
#define DT_MRS	  1024u
#define DT_PROBES 8u

#define SLOTS_OFF  PAGE
#define DT_QP_OFF  (SLOTS_OFF + ((SWV_SHM_SLOTS * sizeof(struct shm_slot) + PAGE - 1) / PAGE * PAGE))
#define DT_MR_OFF  (DT_QP_OFF + DT_QPS * sizeof(struct dt_qp))
#define RINGS_OFF  ((DT_MR_OFF + DT_MRS * sizeof(struct dt_mr) + PAGE - 1) / PAGE * PAGE)
#define INBOX_SIZE (RINGS_OFF + (size_t)SWV_SHM_SLOTS * SWV_SHM_RING_BYTES)

/* A destination: a mapped inbox and the slot claimed in it, or a remembered miss. The
 * struct lives as long as its port; evict() gives it to another destination once no
 * sender holds it (users: taken by swv_shm_route, given back by swv_shm_send/put). */
struct swv_shm_peer {
	_Atomic uint64_t key;	    /* destination IPv4 << 16 | port; 0 = none (being evicted) */
	_Atomic unsigned users;	    /* senders holding it (route .. send) */
	_Atomic uint64_t last_used; /* coarse ns of the last route to it */
	/* Set once (release) when the inbox is usable; NULL for a miss. */
	uint8_t *_Atomic ring;
	struct shm_hdr *hdr;
	struct shm_slot *slot;
	/* A miss: when to look again (coarse ns). Written under the port's lock, read
	 * without it on the send path (at worst one early or late look). */
	_Atomic uint64_t retry_at;
	_Atomic bool stale;   /* the inbox closed: look the destination up afresh */
	pthread_mutex_t lock; /* orders the producers of this ring */
	uint64_t tail;	      /* producer position (under lock) */
	/* The consumer's position as last read (under lock): it only grows, so space
	 * free by it is free. slot->head is read again only when this says the ring is
	 * full: a load per message of a line the consumer writes per pass is a cache
	 * miss on the way of every packet. */
	uint64_t head_seen;
	uint64_t owner_checked; /* when a full ring last asked whether its owner lives (lock) */
	/* Direct placement into the owner's memory (swv_shm_direct): the owner is in our
	 * PID namespace (its pid and its slot's liveness mean something); set at attach,
	 * cleared for good when the kernel refuses or the table is found corrupt. */
	_Atomic bool direct_ok;
	int32_t owner_pid;
	int owner_fd; /* a pidfd of the owner while direct_ok (0: none, else fd + 1) */
	unsigned slot_idx;
};

struct swv_shm_port {
	struct shm_hdr *inbox;
	char name[96];
	int fd; /* the endpoint's UDP socket: doorbells go out through it */
	uint64_t self_key;
	int32_t pid;
	unsigned fork_gen; /* fork_gen when opened: in a child of fork, the port is inert */
	/* receive side (progress work lock) */
	uint64_t rx_next[SWV_SHM_SLOTS]; /* head to publish at release */
	uint32_t rx_dirty;		 /* slots taken from since the last release */
	unsigned rx_start;		 /* round-robin start */
	/* routing: entries appended under lock, published by npeers (release); an entry
	 * is never freed before the port closes, but evict() (under lock) may give it to
	 * another destination */
	pthread_mutex_t lock;
	struct swv_shm_peer *peers[SWV_SHM_MAX_PEERS];
	_Atomic unsigned npeers;
	bool full_logged;
	_Atomic uint64_t tx_pkts, tx_full, doorbells_sent, rx_pkts, rx_corrupt, evictions;
	_Atomic uint64_t direct_tx, direct_rd, direct_fallback, direct_corrupt, dt_waits;
	pthread_mutex_t dt_lock; /* the owner's writers of the placement table */
};

/* Bumped in the child of every fork(): inboxes and rings stay the parent's, and a child
 * that inherited a port must neither consume its rings, nor produce into its peers'
 * rings (it would be a second producer), nor close (unlink) its inbox. */
static _Atomic unsigned fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void)
{
	atomic_fetch_add_explicit(&fork_gen, 1, memory_order_relaxed);
}
static void atfork_init(void)
{
	(void)pthread_atfork(NULL, NULL, on_fork_child);
}
static inline bool port_inert(const struct swv_shm_port *sp)
{
	return swv_unlikely(sp->fork_gen != atomic_load_explicit(&fork_gen, memory_order_relaxed));
}

/* A clock for "not used lately": a few ms of resolution, a fraction of swv_now_ns's
 * cost, read on every route. */
static inline uint64_t coarse_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static _Atomic uint64_t idle_ns = SWV_SHM_IDLE_NS; /* swv_shm_test_set_idle */

void swv_shm_test_set_idle(uint64_t ns)
{
	atomic_store(&idle_ns, ns);
}

static inline void peer_touch_at(struct swv_shm_peer *p, uint64_t t)
{
	if (atomic_load_explicit(&p->last_used, memory_order_relaxed) != t)
		atomic_store_explicit(&p->last_used, t, memory_order_relaxed);
}

static inline void peer_touch(struct swv_shm_peer *p)
{
	peer_touch_at(p, coarse_now_ns());
}

static inline void peer_hold(struct swv_shm_peer *p)
{
	atomic_fetch_add(&p->users, 1); /* seq_cst: see evict() */
}

static inline uint64_t round8(uint64_t v)
{
	return (v + 7) & ~7ull;
}

static inline struct shm_slot *slot_at(struct shm_hdr *h, unsigned i)
{
	return (struct shm_slot *)((uint8_t *)h + SLOTS_OFF) + i;
}

static inline uint8_t *ring_at(struct shm_hdr *h, unsigned i)
{
	return (uint8_t *)h + RINGS_OFF + (size_t)i * SWV_SHM_RING_BYTES;
}

static inline uint64_t addr_key(struct in_addr a, uint16_t port_host)
{
	return (uint64_t)ntohl(a.s_addr) << 16 | port_host;
}

static inline void stat_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

bool swv_shm_enabled(void)
{
	static int on = -1;
	if (on < 0) {
		const char *e = getenv("SWVERBS_SHM");
		on = !(e && e[0] == '0' && e[1] == '\0');
	}
	return on;
}

/* The inbox name: the user, the network namespace (an address means something else in
 * another one), the IP and the port. */
static int inbox_name(char *buf, size_t len, struct in_addr addr, uint16_t port)
{
	struct stat st;
	if (stat("/proc/self/ns/net", &st))
		return errno;
	snprintf(buf, len, "/swverbs.%u.%lu.%08x.%u", (unsigned)getuid(), (unsigned long)st.st_ino,
		 ntohl(addr.s_addr), port);
	return 0;
}

/* stat() of a shared-memory object by its shm_open name. */
static int stat_inbox(const char *name, struct stat *st)
{
	char path[128];
	snprintf(path, sizeof(path), "/dev/shm%s", name);
	return stat(path, st);
}

/* Not cached: a child of fork may be in another PID namespace than its parent. Called
 * on slow paths only (claiming, sweeping, a full ring). */
static uint64_t self_pidns(void)
{
	struct stat st;
	return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* A process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), 0
 * when unknown. */
static uint64_t proc_start(int32_t pid)
{
	char path[32], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	const char *f = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
	if (!f)
		return 0;
	for (int k = 0; k < 20 && f; k++) /* field 2 ends here; field 22 is 20 further */
		f = strchr(f + 1, ' ');
	return f ? strtoull(f + 1, NULL, 10) : 0;
}

static bool pid_alive(int32_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/* Whether the inbox's owner is known to be gone. An owner in another PID namespace
 * cannot be judged by its pid: it counts as alive. */
static bool owner_dead(const struct shm_hdr *h)
{
	uint64_t ns = self_pidns();
	return ns && h->owner_pidns == ns && !pid_alive(h->owner_pid);
}

/* Likewise for a slot's claimer: it shares the owner's namespace only if we do. */
static bool claimer_dead(const struct shm_hdr *h, int32_t pid)
{
	uint64_t ns = self_pidns();
	return ns && h->owner_pidns == ns && !pid_alive(pid);
}

/* ---- the placement table: layout helpers shared by owner and senders ---- */

static inline struct dt_qp *dt_qp_at(struct shm_hdr *h, unsigned i)
{
	return (struct dt_qp *)((uint8_t *)h + DT_QP_OFF) + i;
}

static inline struct dt_mr *dt_mr_at(struct shm_hdr *h, unsigned i)
{
	return (struct dt_mr *)((uint8_t *)h + DT_MR_OFF) + i;
}

static inline unsigned dt_mr_home(uint32_t rkey)
{
	return (rkey * 0x9e3779b1u) & (DT_MRS - 1);
}

static inline uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

/* Check words: a scribbled entry fails them and makes its readers use the ring. */
static uint64_t dt_qp_chk(uint64_t salt, unsigned i, const struct dt_qp *q)
{
	uint64_t c = mix(salt, i);
	c = mix(c, (uint64_t)q->qpn << 32 | q->access);
	c = mix(c, (uint64_t)q->dest_qpn << 32 | q->pkey);
	c = mix(c, q->pd);
	c = mix(c, q->peer_key);
	return mix(c, q->mtu);
}

static uint64_t dt_mr_chk(uint64_t salt, unsigned i, const struct dt_mr *m)
{
	uint64_t c = mix(salt ^ 0x4d52, i);
	c = mix(c, (uint64_t)m->rkey << 32 | m->access);
	c = mix(c, m->pd);
	c = mix(c, m->iova);
	c = mix(c, m->length);
	return mix(c, m->host);
}

/* Entry fields: a reader's acquire loads keep its second look at the sequence after
 * them, a writer's release stores keep the odd sequence before them (no fences: this
 * is the seqlock's whole ordering, and ThreadSanitizer can follow it). */
#define LD(x)	 __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)

/* Owner: rewrite entry e (its sequence odd meanwhile). dt_lock held. */
static void dt_qp_store(struct dt_qp *e, const struct dt_qp *v)
{
	uint32_t s = (atomic_load_explicit(&e->seq, memory_order_relaxed) + 1) & ~1u;
	atomic_store_explicit(&e->seq, s + 1, memory_order_relaxed);
	ST(e->qpn, v->qpn);
	ST(e->access, v->access);
	ST(e->dest_qpn, v->dest_qpn);
	ST(e->pd, v->pd);
	ST(e->peer_key, v->peer_key);
	ST(e->pkey, v->pkey);
	ST(e->mtu, v->mtu);
	ST(e->chk, v->chk);
	atomic_store_explicit(&e->seq, s + 2, memory_order_release);
}

static void dt_mr_store(struct dt_mr *e, const struct dt_mr *v)
{
	uint32_t s = (atomic_load_explicit(&e->seq, memory_order_relaxed) + 1) & ~1u;
	atomic_store_explicit(&e->seq, s + 1, memory_order_relaxed);
	ST(e->rkey, v->rkey);
	ST(e->access, v->access);
	ST(e->pd, v->pd);
	ST(e->iova, v->iova);
	ST(e->length, v->length);
	ST(e->host, v->host);
	ST(e->chk, v->chk);
	atomic_store_explicit(&e->seq, s + 2, memory_order_release);
}

/* Sender: a consistent copy of an entry and its sequence, or false (changing). */
static bool dt_qp_load(struct dt_qp *e, struct dt_qp *out, uint32_t *seq)
{
	uint32_t s = atomic_load_explicit(&e->seq, memory_order_acquire);
	if (s & 1)
		return false;
	out->qpn = LD(e->qpn);
	out->access = LD(e->access);
	out->dest_qpn = LD(e->dest_qpn);
	out->pd = LD(e->pd);
	out->peer_key = LD(e->peer_key);
	out->pkey = LD(e->pkey);
	out->mtu = LD(e->mtu);
	out->chk = LD(e->chk);
	*seq = s;
	return atomic_load_explicit(&e->seq, memory_order_relaxed) == s;
}

static bool dt_mr_load(struct dt_mr *e, struct dt_mr *out, uint32_t *seq)
{
	uint32_t s = atomic_load_explicit(&e->seq, memory_order_acquire);
	if (s & 1)
		return false;
	out->rkey = LD(e->rkey);
	out->access = LD(e->access);
	out->pd = LD(e->pd);
	out->iova = LD(e->iova);
	out->length = LD(e->length);
	out->host = LD(e->host);
	out->chk = LD(e->chk);
	*seq = s;
	return atomic_load_explicit(&e->seq, memory_order_relaxed) == s;
}

/* Owner, after changing entries: wait until no claimer of a slot is inside a placement
 * whose marker matches (any: every placement). A claimer that died (by its pid, in our
 * PID namespace -- senders from elsewhere never place) is not waited for. */
static void dt_wait(struct swv_shm_port *sp, uint64_t mask, uint64_t val, bool any)
{
	struct shm_hdr *h = sp->inbox;
	atomic_thread_fence(memory_order_seq_cst);
	unsigned nc = atomic_load(&h->nclaimed);
	if (nc > SWV_SHM_SLOTS)
		nc = SWV_SHM_SLOTS;
	for (unsigned i = 0; i < nc; i++) {
		struct shm_slot *s = slot_at(h, i);
		bool counted = false;
		for (unsigned spins = 1;; spins++) {
			uint64_t v = atomic_load(&s->placing);
			if (any ? v == 0 : (v & mask) != val)
				break;
			if (!counted) {
				stat_add(&sp->dt_waits, 1);
				counted = true;
			}
			if (!(spins & 63) && claimer_dead(h, atomic_load(&s->pid)))
				break;
			sched_yield();
		}
	}
}

/* Mark the inbox named name closed, so that senders with a cached route to it look
 * again, and remove the name. For an inbox whose owner is gone. */
static void retire_inbox(const char *name)
{
	int mfd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (mfd < 0)
		return;
	struct stat st;
	if (fstat(mfd, &st) == 0 && (size_t)st.st_size >= PAGE && st.st_uid == getuid()) {
		struct shm_hdr *h = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
		if (h != MAP_FAILED) {
			if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == SHM_MAGIC)
				atomic_store(&h->closed, 1);
			munmap(h, PAGE);
		}
	}
	close(mfd);
	(void)shm_unlink(name);
}

/* Once per process: remove the inboxes of this user and network namespace whose owners
 * died without closing them (SIGKILL, exit without ibv_close_device), so that they do
 * not pile up in /dev/shm. Owners in another PID namespace are never judged dead. */
static void sweep_dead(void)
{
	char prefix[64];
	struct stat ns;
	if (stat("/proc/self/ns/net", &ns))
		return;
	int n = snprintf(prefix, sizeof(prefix), "swverbs.%u.%lu.", (unsigned)getuid(),
			 (unsigned long)ns.st_ino);
	DIR *d = opendir("/dev/shm");
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, (size_t)n))
			continue;
		char name[300];
		snprintf(name, sizeof(name), "/%s", e->d_name);
		int mfd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
		if (mfd < 0)
			continue;
		struct stat st;
		bool dead = false;
		if (fstat(mfd, &st) == 0 && (size_t)st.st_size == INBOX_SIZE &&
		    st.st_uid == getuid()) {
			struct shm_hdr *h = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, mfd, 0);
			if (h != MAP_FAILED) {
				dead = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == SHM_MAGIC &&
				       owner_dead(h);
				munmap(h, PAGE);
			}
		}
		close(mfd);
		if (dead)
			retire_inbox(name);
	}
	closedir(d);
}
static pthread_once_t sweep_once = PTHREAD_ONCE_INIT;

struct swv_shm_port *swv_shm_open(struct in_addr addr, uint16_t port, int fd)
{
	struct swv_shm_port *sp = calloc(1, sizeof(*sp));
	int rc;

	if (!sp) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_once(&atfork_once, atfork_init);
	pthread_once(&sweep_once, sweep_dead);
	sp->fork_gen = atomic_load(&fork_gen);
	rc = inbox_name(sp->name, sizeof(sp->name), addr, port);
	if (rc)
		goto fail;
	/* A name left by a process that died without closing: the port is ours now (we
	 * hold its socket), so that owner is gone. Senders that cached a route to its
	 * inbox must learn it closed, or they would keep writing into it. */
	retire_inbox(sp->name);
	int mfd = shm_open(sp->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (mfd < 0) {
		rc = errno;
		goto fail;
	}
	/* The header and slot pages are allocated now: on a full /dev/shm that is a
	 * refusal here, not a SIGBUS at the first touch (the rings: claim_slot). */
	if (ftruncate(mfd, (off_t)INBOX_SIZE) || fallocate(mfd, 0, 0, (off_t)RINGS_OFF)) {
		rc = errno;
		close(mfd);
		(void)shm_unlink(sp->name);
		goto fail;
	}
	void *m = mmap(NULL, INBOX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	close(mfd);
	if (m == MAP_FAILED) {
		rc = errno;
		(void)shm_unlink(sp->name);
		goto fail;
	}
	sp->inbox = m;
	sp->pid = (int32_t)getpid();
	sp->inbox->version = SHM_VERSION;
	sp->inbox->nslots = SWV_SHM_SLOTS;
	sp->inbox->ring_bytes = SWV_SHM_RING_BYTES;
	sp->inbox->owner_pid = sp->pid;
	sp->inbox->owner_pidns = self_pidns();
	sp->inbox->owner_start = proc_start(sp->pid);
	sp->inbox->dt_salt = swv_now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)sp->pid << 32;
	/* Born armed: the progress thread may be asleep already, and it arms only the
	 * inboxes it knows of before it sleeps; the first sender then rings. */
	atomic_store(&sp->inbox->sleeping, 1);
	/* Senders check the magic last: everything above is visible once it is. */
	atomic_thread_fence(memory_order_release);
	__atomic_store_n(&sp->inbox->magic, SHM_MAGIC, __ATOMIC_RELEASE);
	sp->fd = fd;
	sp->self_key = addr_key(addr, port);
	pthread_mutex_init(&sp->lock, NULL);
	pthread_mutex_init(&sp->dt_lock, NULL);
	return sp;
fail:
	swv_log(SWV_LOG_DEBUG, "shm: no inbox for port %u (%s): UDP only", port, strerror(rc));
	free(sp);
	errno = rc;
	return NULL;
}

/* Whether the receiver has taken every record of ours (p->lock held, or no sender
 * can hold p). */
static bool peer_drained(const struct swv_shm_peer *p)
{
	return atomic_load_explicit(&p->slot->head, memory_order_acquire) == p->tail;
}

/* Likewise for a peer a sender may be writing to. */
static bool peer_drained_now(struct swv_shm_peer *p)
{
	pthread_mutex_lock(&p->lock);
	bool d = peer_drained(p);
	pthread_mutex_unlock(&p->lock);
	return d;
}

/* Unmap a destination's inbox; with release, give its slot back so that the receiver's
 * slots do not run out while this process lives -- but only once the receiver has taken
 * every record of ours: it names their source by the slot's address, and the last
 * packets a closing endpoint sent (an ACK of the final message) must still arrive as
 * ours. A slot left claimed is taken again by this process's next route there, or over
 * once this process is gone (claim_slot). No sender may hold p. */
static void peer_detach(struct swv_shm_peer *p, bool release)
{
	if (p->hdr && release && peer_drained(p)) {
		int32_t me = (int32_t)getpid();
		atomic_store(&p->slot->addr, 0);
		atomic_compare_exchange_strong(&p->slot->pid, &me, 0);
	}
	if (p->hdr)
		munmap(p->hdr, INBOX_SIZE);
	atomic_store_explicit(&p->ring, NULL, memory_order_relaxed);
	p->hdr = NULL;
	p->slot = NULL;
	p->tail = 0;
	p->head_seen = 0;
	atomic_store_explicit(&p->retry_at, 0, memory_order_relaxed);
	p->owner_checked = 0;
	atomic_store(&p->stale, false);
	atomic_store(&p->direct_ok, false);
	if (p->owner_fd)
		close(p->owner_fd - 1);
	p->owner_fd = 0;
}

static void peer_unmap(struct swv_shm_peer *p, bool release)
{
	peer_detach(p, release);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

void swv_shm_close(struct swv_shm_port *sp)
{
	if (!sp)
		return;
	bool inert = port_inert(sp); /* a child of fork: the inbox and slots are the parent's */
	if (!inert) {
		atomic_store(&sp->inbox->closed, 1);
		/* Senders re-check closed after announcing a placement: once none is
		 * under way, none can start into this process's memory. */
		dt_wait(sp, ~0ull, 0, true);
		(void)shm_unlink(sp->name);
	}
	munmap(sp->inbox, INBOX_SIZE);
	unsigned n = atomic_load(&sp->npeers);
	for (unsigned i = 0; i < n; i++)
		peer_unmap(sp->peers[i], !inert);
	pthread_mutex_destroy(&sp->lock);
	pthread_mutex_destroy(&sp->dt_lock);
	free(sp);
}

/* Claim a slot of the mapped inbox h for this sender: its own earlier slot, a free one,
 * or one whose claimer died. The ring's pages are allocated here (fallocate), so that a
 * full /dev/shm is a refusal now and never a SIGBUS on the data path. */
static struct shm_slot *claim_slot(struct swv_shm_port *sp, struct shm_hdr *h, int mfd,
				   unsigned *idx)
{
	for (int pass = 0; pass < 3; pass++) {
		for (unsigned i = 0; i < SWV_SHM_SLOTS; i++) {
			struct shm_slot *s = slot_at(h, i);
			int32_t pid = atomic_load(&s->pid);
			uint64_t a = atomic_load(&s->addr);
			uint64_t t = atomic_load(&s->tail), hd = atomic_load(&s->head);
			bool take;
			if ((t & 7) || t - hd > SWV_SHM_RING_BYTES)
				continue; /* positions nobody sound left: not a ring to write */
			if (pass == 0) /* ours already (an earlier mapping of this process) */
				take = pid == sp->pid && a == sp->self_key;
			else if (pass == 1)
				take = pid == 0;
			else
				take = pid != sp->pid && claimer_dead(h, pid);
			if (!take)
				continue;
			if (pass > 0 && !atomic_compare_exchange_strong(&s->pid, &pid, sp->pid))
				continue;
			/* a dead claimer's unfinished placement is not ours to wait for */
			atomic_store(&s->placing, 0);
			if (fallocate(mfd, 0, (off_t)(RINGS_OFF + (size_t)i * SWV_SHM_RING_BYTES),
				      SWV_SHM_RING_BYTES)) {
				if (pass > 0)
					atomic_store(&s->pid, pid);
				return NULL;
			}
			atomic_store_explicit(&s->addr, sp->self_key, memory_order_release);
			uint32_t nc = atomic_load(&h->nclaimed);
			while (nc < i + 1 &&
			       !atomic_compare_exchange_weak(&h->nclaimed, &nc, i + 1))
				;
			*idx = i;
			return s;
		}
	}
	return NULL;
}

/* Map dst's inbox and claim a ring in it. Returns 0 or an errno (no inbox: UDP). */
/* Whether placing into process pid keeps the table's trust rule: a same-user process
 * that can scribble the table (and the owner's pid in the header) must not gain, by
 * steering this sender, a write it could not make itself. That holds when any process
 * of the user may write any other with process_vm_writev (no Yama restriction, the
 * ptrace_scope file absent or 0), and, for a placement into this very process (which
 * a process may always write), when this process is dumpable (one that made itself
 * non-dumpable is closed to other processes of its user). Slow path: at attach. */
static bool direct_trust_ok(int32_t pid)
{
	static _Atomic int yama = -1; /* 0: unrestricted (ports attach concurrently) */
	int y = atomic_load_explicit(&yama, memory_order_relaxed);
	if (y < 0) {
		int v = 0;
		FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
		if (f) {
			if (fscanf(f, "%d", &v) != 1)
				v = 1;
			fclose(f);
		}
		y = v != 0;
		atomic_store_explicit(&yama, y, memory_order_relaxed);
	}
	if (y)
		return false;
	return pid != getpid() || prctl(PR_GET_DUMPABLE) == 1;
}

/* Hold the inbox's owner by a pidfd, for swv_shm_direct to tell at each placement
 * whether it still lives: only if the process now at owner_pid is the one that made
 * the inbox (its start time), checked after the pidfd is taken, so that the pidfd
 * names the owner itself and never a process that got its pid after it died. */
static bool owner_pin(struct swv_shm_peer *p, const struct shm_hdr *h)
{
	long fd = syscall(SYS_pidfd_open, (pid_t)p->owner_pid, 0u);
	if (fd < 0)
		return false;
	uint64_t t = proc_start(p->owner_pid);
	if (!t || t != h->owner_start) {
		close((int)fd);
		return false;
	}
	p->owner_fd = (int)fd + 1;
	return true;
}

static bool owner_lives(const struct swv_shm_peer *p)
{
	return p->owner_fd && syscall(SYS_pidfd_send_signal, p->owner_fd - 1, 0, NULL, 0u) == 0;
}

static int peer_attach(struct swv_shm_port *sp, struct swv_shm_peer *p,
		       const struct sockaddr_in *dst)
{
	char name[96];
	struct stat st;
	int rc = inbox_name(name, sizeof(name), dst->sin_addr, ntohs(dst->sin_port));
	if (rc)
		return rc;
	int mfd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (mfd < 0)
		return errno;
	if (fstat(mfd, &st) || (size_t)st.st_size != INBOX_SIZE || st.st_uid != getuid()) {
		close(mfd);
		return ENOENT;
	}
	struct shm_hdr *h = mmap(NULL, INBOX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (h == MAP_FAILED) {
		rc = errno;
		close(mfd);
		return rc;
	}
	unsigned idx = 0;
	struct shm_slot *s = NULL;
	bool valid = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == SHM_MAGIC &&
		     h->version == SHM_VERSION && h->nslots == SWV_SHM_SLOTS &&
		     h->ring_bytes == SWV_SHM_RING_BYTES;
	if (valid && !atomic_load(&h->closed) && !owner_dead(h)) {
		s = claim_slot(sp, h, mfd, &idx);
	} else if (valid && owner_dead(h)) {
		/* Left by a process that was killed: remove it unless the name has been
		 * taken by a new inbox meanwhile. */
		struct stat now;
		if (stat_inbox(name, &now) == 0 && now.st_ino == st.st_ino &&
		    now.st_dev == st.st_dev)
			(void)shm_unlink(name);
	}
	close(mfd);
	if (!s) {
		munmap(h, INBOX_SIZE);
		return EBUSY;
	}
	p->hdr = h;
	p->slot = s;
	p->slot_idx = idx;
	p->owner_pid = h->owner_pid;
	/* The owner judges our liveness by pid when it waits for our placements: only
	 * within one PID namespace. */
	uint64_t ns = self_pidns();
	atomic_store(&p->direct_ok, ns && ns == h->owner_pidns && p->owner_pid > 0 &&
					direct_trust_ok(p->owner_pid) && owner_pin(p, h));
	p->tail = atomic_load(&s->tail);
	p->head_seen = atomic_load(&s->head);
	atomic_store_explicit(&p->ring, ring_at(h, idx), memory_order_release);
	return 0;
}

/* A full table (sp->lock held): free the entry of the destination least recently routed
 * to, among those no sender holds, not routed to for SWV_SHM_IDLE_NS, and whose ring the
 * receiver has drained (its slot is given back); a destination whose inbox closed goes
 * first. NULL if none may go: the new destination uses UDP, as before the table filled.
 *
 * Against the lock-free lookup: a sender holds an entry (users + 1), then checks that
 * its key is still the one it looked for; evict() clears the key, then checks that
 * nobody holds the entry. Both seq_cst: either the sender sees the cleared key and
 * lets go, or evict() sees the sender and puts the key back. */
static struct swv_shm_peer *evict(struct swv_shm_port *sp)
{
	uint64_t now = coarse_now_ns(), idle = atomic_load_explicit(&idle_ns, memory_order_relaxed);
	struct swv_shm_peer *v = NULL;
	uint64_t v_used = 0;
	for (unsigned i = 0; i < SWV_SHM_MAX_PEERS; i++) {
		struct swv_shm_peer *p = sp->peers[i];
		if (atomic_load(&p->users))
			continue;
		uint64_t used = atomic_load_explicit(&p->last_used, memory_order_relaxed);
		if (atomic_load(&p->stale)) {
			used = 0;
		} else {
			if (used > now || now - used < idle)
				continue;
			if (atomic_load_explicit(&p->ring, memory_order_acquire) &&
			    !peer_drained_now(p))
				continue;
		}
		if (!v || used < v_used) {
			v = p;
			v_used = used;
		}
	}
	if (!v)
		return NULL;
	uint64_t old = atomic_exchange(&v->key, 0);
	if (atomic_load(&v->users) ||
	    (!atomic_load(&v->stale) && atomic_load(&v->ring) && !peer_drained(v))) {
		atomic_store(&v->key, old); /* taken, or written to, since it was chosen */
		return NULL;
	}
	peer_detach(v, true);
	stat_add(&sp->evictions, 1);
	return v;
}

/* Slow path of swv_shm_route (sp->lock held). Returns the peer held, or NULL. */
static struct swv_shm_peer *route_slow(struct swv_shm_port *sp, const struct sockaddr_in *dst,
				       uint64_t key)
{
	unsigned n = atomic_load_explicit(&sp->npeers, memory_order_relaxed);
	struct swv_shm_peer *p = NULL;
	uint64_t now = coarse_now_ns();

	for (unsigned i = n; i-- > 0;) {
		if (atomic_load(&sp->peers[i]->key) != key || atomic_load(&sp->peers[i]->stale))
			continue;
		p = sp->peers[i];
		peer_touch_at(p, now);
		if (atomic_load_explicit(&p->ring, memory_order_acquire)) {
			peer_hold(p); /* under the lock: evict() cannot run */
			return p;     /* another thread resolved it */
		}
		if (now < atomic_load_explicit(&p->retry_at, memory_order_relaxed))
			return NULL;
		break; /* a miss due for another look: fill it in place */
	}
	if (!p) {
		if (n == SWV_SHM_MAX_PEERS) {
			p = evict(sp);
			if (!p) {
				if (!sp->full_logged)
					swv_log(SWV_LOG_DEBUG,
						"shm: %u destinations in use: UDP for more", n);
				sp->full_logged = true;
				return NULL;
			}
		} else {
			p = calloc(1, sizeof(*p));
			if (!p)
				return NULL;
			pthread_mutex_init(&p->lock, NULL);
			sp->peers[n] = p;
		}
		peer_touch(p);
		atomic_store(&p->key, key);
		if (n < SWV_SHM_MAX_PEERS)
			atomic_store_explicit(&sp->npeers, n + 1, memory_order_release);
	}
	if (peer_attach(sp, p, dst)) {
		atomic_store_explicit(&p->retry_at, now + SWV_SHM_MISS_TTL_NS,
				      memory_order_relaxed);
		return NULL;
	}
	peer_hold(p);
	return p;
}

struct swv_shm_peer *swv_shm_route(struct swv_shm_port *sp, const struct sockaddr_in *dst)
{
	if (!sp || !dst || port_inert(sp))
		return NULL;
	uint64_t key = addr_key(dst->sin_addr, ntohs(dst->sin_port));
	unsigned n = atomic_load_explicit(&sp->npeers, memory_order_acquire);
	for (unsigned i = n; i-- > 0;) {
		struct swv_shm_peer *p = sp->peers[i];
		if (atomic_load_explicit(&p->key, memory_order_relaxed) != key ||
		    atomic_load_explicit(&p->stale, memory_order_relaxed))
			continue;
		if (atomic_load_explicit(&p->ring, memory_order_acquire)) {
			peer_hold(p);
			/* Still this destination's (evict() may have taken it meanwhile), and
			 * held now, so it stays so until swv_shm_send/put. */
			if (swv_unlikely(atomic_load(&p->key) != key ||
					 !atomic_load_explicit(&p->ring, memory_order_acquire))) {
				swv_shm_put(sp, p);
				break;
			}
			if (swv_likely(
				!atomic_load_explicit(&p->hdr->closed, memory_order_relaxed))) {
				peer_touch(p);
				return p;
			}
			atomic_store(&p->stale, true); /* the receiver went away */
			swv_shm_put(sp, p);
			break;
		}
		/* A remembered miss: UDP until it is due for another look, with no lock on
		 * the way of every packet to a destination off this host. evict() may give
		 * the entry to another destination meanwhile: then this is one early or
		 * late look, the slow path decides under the lock. */
		uint64_t now = coarse_now_ns();
		if (now < atomic_load_explicit(&p->retry_at, memory_order_relaxed)) {
			peer_touch_at(p, now);
			return NULL;
		}
		break;
	}
	pthread_mutex_lock(&sp->lock);
	struct swv_shm_peer *p = route_slow(sp, dst, key);
	pthread_mutex_unlock(&sp->lock);
	return p;
}

static void ring_if_sleeping(struct swv_shm_port *sp, struct swv_shm_peer *p);

bool swv_shm_backlog(struct swv_shm_port *sp, struct swv_shm_peer *p, uint64_t *mark)
{
	if (!sp || !p || !mark) {
		swv_shm_put(sp, p);
		return false;
	}
	pthread_mutex_lock(&p->lock);
	uint64_t head = atomic_load_explicit(&p->slot->head, memory_order_acquire);
	if (!*mark)
		*mark = p->tail;
	/* positions only grow (64 bits): "head < mark" is the receiver short of the mark */
	bool unread = head < *mark;
	/* A dead receiver's ring stays unread for ever: that is the peer's death, which
	 * the transport must see (a few system calls, at most once per ACK timeout); the
	 * pidfd, where there is one, also tells a reused pid from the owner. */
	bool dead = unread && (owner_dead(p->hdr) || (p->owner_fd && !owner_lives(p)));
	pthread_mutex_unlock(&p->lock);
	if (dead) {
		atomic_store(&p->stale, true);
		unread = false;
	}
	if (unread)
		ring_if_sleeping(sp, p);
	swv_shm_put(sp, p);
	return unread;
}

/* After publishing a tail: ring only a receiver that said it sleeps (see swv_shm_arm
 * for the other half). */
static void ring_if_sleeping(struct swv_shm_port *sp, struct swv_shm_peer *p)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&p->hdr->sleeping, memory_order_relaxed) &&
	    atomic_exchange(&p->hdr->sleeping, 0)) {
		struct sockaddr_in to = {.sin_family = AF_INET};
		to.sin_addr.s_addr = htonl((uint32_t)(p->key >> 16));
		to.sin_port = htons((uint16_t)p->key);
		if (sendto(sp->fd, doorbell, sizeof(doorbell), MSG_DONTWAIT | MSG_NOSIGNAL,
			   (struct sockaddr *)&to, sizeof(to)) < 0) {
			/* Not rung: leave the flag set so that the next sender rings. */
			atomic_store(&p->hdr->sleeping, 1);
			return;
		}
		stat_add(&sp->doorbells_sent, 1);
	}
}

/* Copy len bytes from the iov cursor (*vi, *voff) to dst. */
static void iov_copy(uint8_t *dst, const struct iovec *iov, int *vi, size_t *voff, size_t len)
{
	while (len) {
		size_t chunk = iov[*vi].iov_len - *voff;
		if (chunk > len)
			chunk = len;
		memcpy(dst, (const uint8_t *)iov[*vi].iov_base + *voff, chunk);
		dst += chunk;
		len -= chunk;
		*voff += chunk;
		if (*voff == iov[*vi].iov_len) {
			(*vi)++;
			*voff = 0;
		}
	}
}

/* Where a record of need bytes starting at pos goes: pos itself, or the ring's start
 * after a wrap marker (returned in *wrap). */
static inline uint64_t rec_place(uint64_t pos, uint64_t need, bool *wrap)
{
	uint64_t off = pos & (SWV_SHM_RING_BYTES - 1);
	*wrap = SWV_SHM_RING_BYTES - off < need;
	return *wrap ? pos + (SWV_SHM_RING_BYTES - off) : pos;
}

void swv_shm_put(struct swv_shm_port *sp, struct swv_shm_peer *p)
{
	(void)sp;
	if (p)
		atomic_fetch_sub_explicit(&p->users, 1, memory_order_release);
}

static int shm_send(struct swv_shm_port *sp, struct swv_shm_peer *p, const struct iovec *iov,
		    int iovcnt, size_t seg_size, unsigned nseg, bool unchecked)
{
	if (swv_unlikely(!sp || !iov || iovcnt <= 0 || !nseg || port_inert(sp)))
		return EINVAL;
	uint8_t *ring = atomic_load_explicit(&p->ring, memory_order_acquire);
	if (swv_unlikely(!ring))
		return EINVAL;
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_base && iov[i].iov_len)
			return EINVAL;
		total += iov[i].iov_len;
	}
	if (nseg == 1)
		seg_size = total;
	if (!total || total > (size_t)nseg * seg_size || total <= (size_t)(nseg - 1) * seg_size ||
	    seg_size > SHM_MAX_PKT)
		return EINVAL;

	pthread_mutex_lock(&p->lock);
	/* All or nothing: find where the last record ends before writing any. */
	uint64_t end = p->tail;
	for (unsigned k = 0; k < nseg; k++) {
		size_t len = k + 1 < nseg ? seg_size : total - (size_t)k * seg_size;
		bool wrap;
		uint64_t need = REC_HDR + round8(len);
		end = rec_place(end, need, &wrap) + need;
	}
	if (end - p->head_seen > SWV_SHM_RING_BYTES)
		p->head_seen = atomic_load_explicit(&p->slot->head, memory_order_acquire);
	if (end - p->head_seen > SWV_SHM_RING_BYTES) {
		uint64_t now = swv_now_ns();
		/* The liveness check costs two system calls: at most once per millisecond,
		 * not at every refused attempt of every blocked QP. */
		bool ask = now - p->owner_checked >= 1000000ull;
		if (ask)
			p->owner_checked = now;
		pthread_mutex_unlock(&p->lock);
		stat_add(&sp->tx_full, 1);
		/* A receiver that died holds its ring full for ever: what is sent to it is
		 * lost, as datagrams to a closed port are, and the route is looked up again.
		 * One that stopped (SIGSTOP, a debugger) refuses, as a full socket buffer
		 * does; what to do then is the transport's (a UD requester drops after a
		 * while). */
		if (ask && owner_dead(p->hdr)) {
			atomic_store(&p->stale, true);
			return 0;
		}
		ring_if_sleeping(sp, p); /* it has packets to take, should a doorbell be lost */
		return EAGAIN;
	}
	uint64_t pos = p->tail;
	int vi = 0;
	size_t voff = 0;
	for (unsigned k = 0; k < nseg; k++) {
		size_t len = k + 1 < nseg ? seg_size : total - (size_t)k * seg_size;
		uint64_t need = REC_HDR + round8(len);
		bool wrap;
		uint64_t at = rec_place(pos, need, &wrap);
		if (wrap) {
			uint32_t mark = REC_WRAP;
			memcpy(ring + (pos & (SWV_SHM_RING_BYTES - 1)), &mark, sizeof(mark));
		}
		uint8_t *r = ring + (at & (SWV_SHM_RING_BYTES - 1));
		uint32_t hdr[2] = {(uint32_t)len, unchecked ? REC_UNCHECKED : 0};
		memcpy(r, hdr, sizeof(hdr));
		iov_copy(r + REC_HDR, iov, &vi, &voff, len);
		pos = at + need;
	}
	p->tail = pos;
	atomic_store_explicit(&p->slot->tail, pos, memory_order_release);
	pthread_mutex_unlock(&p->lock);
	stat_add(&sp->tx_pkts, nseg);
	ring_if_sleeping(sp, p);
	return 0;
}

int swv_shm_send(struct swv_shm_port *sp, struct swv_shm_peer *p, const struct iovec *iov,
		 int iovcnt, size_t seg_size, unsigned nseg, bool unchecked)
{
	if (swv_unlikely(!p))
		return EINVAL;
	int rc = shm_send(sp, p, iov, iovcnt, seg_size, nseg, unchecked);
	swv_shm_put(sp, p);
	return rc;
}

void swv_shm_test_publish_bad(struct swv_shm_port *sp, struct swv_shm_peer *p)
{
	pthread_mutex_lock(&p->lock);
	uint8_t *ring = atomic_load(&p->ring);
	uint32_t hdr[2] = {SWV_SHM_RING_BYTES, 0};
	uint64_t pos = rec_place(p->tail, 64, &(bool){false});
	memcpy(ring + (pos & (SWV_SHM_RING_BYTES - 1)), hdr, sizeof(hdr));
	p->tail = pos + 64;
	atomic_store_explicit(&p->slot->tail, p->tail, memory_order_release);
	pthread_mutex_unlock(&p->lock);
	ring_if_sleeping(sp, p);
	swv_shm_put(sp, p);
}

int swv_shm_rx_take(struct swv_shm_port *sp, struct swv_rx_pkt *out, int max)
{
	if (!sp || !out || max <= 0 || port_inert(sp))
		return 0;
	struct shm_hdr *h = sp->inbox;
	unsigned nc = atomic_load_explicit(&h->nclaimed, memory_order_acquire);
	if (nc > SWV_SHM_SLOTS)
		nc = SWV_SHM_SLOTS;
	int n = 0;
	for (unsigned j = 0; j < nc && n < max; j++) {
		unsigned i = (sp->rx_start + j) % nc;
		struct shm_slot *s = slot_at(h, i);
		uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
		uint64_t pos = (sp->rx_dirty & (1u << i))
				   ? sp->rx_next[i]
				   : atomic_load_explicit(&s->head, memory_order_relaxed);
		if (pos == tail)
			continue;
		uint64_t a = atomic_load_explicit(&s->addr, memory_order_acquire);
		uint8_t *ring = ring_at(h, i);
		struct sockaddr_in src = {.sin_family = AF_INET};
		src.sin_addr.s_addr = htonl((uint32_t)(a >> 16));
		src.sin_port = htons((uint16_t)a);
		while (pos != tail && n < max) {
			uint64_t off = pos & (SWV_SHM_RING_BYTES - 1);
			uint32_t len;
			if (tail - pos > SWV_SHM_RING_BYTES || (pos & 7))
				goto corrupt;
			memcpy(&len, ring + off, sizeof(len));
			if (len == REC_WRAP) {
				pos += SWV_SHM_RING_BYTES - off;
				continue;
			}
			/* read once: the sender can still write it */
			uint32_t flags = __atomic_load_n((uint32_t *)(ring + off + 4),
							 __ATOMIC_RELAXED);
			uint64_t need = REC_HDR + round8(len);
			if (len > SHM_MAX_PKT || off + need > SWV_SHM_RING_BYTES ||
			    need > tail - pos)
				goto corrupt;
			out[n].buf = ring + off + REC_HDR;
			out[n].len = len;
			out[n].src = src;
			out[n].unchecked = flags & REC_UNCHECKED;
			n++;
			pos += need;
			continue;
		corrupt:
			/* A sender wrote nonsense: drop what it published. */
			swv_log(SWV_LOG_DEBUG, "shm: corrupt ring %u at %lu tail %lu", i,
				(unsigned long)pos, (unsigned long)tail);
			stat_add(&sp->rx_corrupt, 1);
			pos = tail;
		}
		sp->rx_next[i] = pos;
		sp->rx_dirty |= 1u << i;
	}
	sp->rx_start++;
	stat_add(&sp->rx_pkts, (uint64_t)n);
	return n;
}

void swv_shm_rx_release(struct swv_shm_port *sp)
{
	if (!sp)
		return;
	uint32_t d = sp->rx_dirty;
	while (d) {
		unsigned i = (unsigned)__builtin_ctz(d);
		d &= d - 1;
		atomic_store_explicit(&slot_at(sp->inbox, i)->head, sp->rx_next[i],
				      memory_order_release);
	}
	sp->rx_dirty = 0;
}

bool swv_shm_arm(struct swv_shm_port *sp, bool on)
{
	if (!sp || port_inert(sp))
		return false;
	struct shm_hdr *h = sp->inbox;
	if (!on) {
		atomic_store_explicit(&h->sleeping, 0, memory_order_relaxed);
		return false;
	}
	atomic_store(&h->sleeping, 1);
	atomic_thread_fence(memory_order_seq_cst);
	unsigned nc = atomic_load_explicit(&h->nclaimed, memory_order_acquire);
	for (unsigned i = 0; i < nc && i < SWV_SHM_SLOTS; i++) {
		struct shm_slot *s = slot_at(h, i);
		if (atomic_load_explicit(&s->tail, memory_order_acquire) !=
		    atomic_load_explicit(&s->head, memory_order_relaxed))
			return true;
	}
	return false;
}

bool swv_shm_is_doorbell(const uint8_t *buf, size_t len)
{
	return len == sizeof(doorbell) && memcmp(buf, doorbell, sizeof(doorbell)) == 0;
}

void swv_shm_get_stats(const struct swv_shm_port *sp, struct swv_shm_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!sp)
		return;
	st->tx_pkts = atomic_load_explicit(&sp->tx_pkts, memory_order_relaxed);
	st->tx_full = atomic_load_explicit(&sp->tx_full, memory_order_relaxed);
	st->doorbells_sent = atomic_load_explicit(&sp->doorbells_sent, memory_order_relaxed);
	st->rx_pkts = atomic_load_explicit(&sp->rx_pkts, memory_order_relaxed);
	st->rx_corrupt = atomic_load_explicit(&sp->rx_corrupt, memory_order_relaxed);
	st->evictions = atomic_load_explicit(&sp->evictions, memory_order_relaxed);
	st->peers = atomic_load_explicit(&sp->npeers, memory_order_relaxed);
	st->direct_tx = atomic_load_explicit(&sp->direct_tx, memory_order_relaxed);
	st->direct_rd = atomic_load_explicit(&sp->direct_rd, memory_order_relaxed);
	st->direct_fallback = atomic_load_explicit(&sp->direct_fallback, memory_order_relaxed);
	st->direct_corrupt = atomic_load_explicit(&sp->direct_corrupt, memory_order_relaxed);
	st->dt_waits = atomic_load_explicit(&sp->dt_waits, memory_order_relaxed);
	struct shm_hdr *h = sp->inbox;
	st->armed = atomic_load_explicit(&h->sleeping, memory_order_relaxed) != 0;
	unsigned nc = atomic_load_explicit(&h->nclaimed, memory_order_acquire);
	for (unsigned i = 0; i < nc && i < SWV_SHM_SLOTS; i++) {
		struct shm_slot *sl = slot_at(h, i);
		uint64_t head = atomic_load_explicit(&sl->head, memory_order_relaxed);
		uint64_t tail = atomic_load_explicit(&sl->tail, memory_order_acquire);
		if (tail > head)
			st->rx_backlog += tail - head;
	}
}

/* ---- direct placement (single copy) ---- */

bool swv_shm_direct_enabled(void)
{
	static int on = -1;
	if (on < 0) {
		const char *e = getenv("SWVERBS_SHM_DIRECT");
		on = swv_shm_enabled() && !(e && e[0] == '0' && e[1] == '\0');
	}
	return on;
}

void swv_shm_dt_qp(struct swv_shm_port *sp, uint32_t qpn, const struct swv_shm_dt_qp_info *info)
{
	if (!sp || port_inert(sp))
		return;
	struct shm_hdr *h = sp->inbox;
	unsigned qi = qpn & (DT_QPS - 1);
	struct dt_qp v;
	memset(&v, 0, sizeof(v));
	if (info && qpn && swv_shm_direct_enabled()) {
		v.qpn = qpn;
		v.access = info->access;
		v.dest_qpn = info->dest_qpn;
		v.pd = info->pd;
		v.peer_key = addr_key(info->peer.sin_addr, ntohs(info->peer.sin_port));
		v.pkey = info->pkey;
		v.mtu = info->mtu;
		v.chk = dt_qp_chk(h->dt_salt, qi, &v);
	}
	pthread_mutex_lock(&sp->dt_lock);
	struct dt_qp *e = dt_qp_at(h, qi);
	bool was = LD(e->qpn) != 0;
	if (was || v.qpn)
		dt_qp_store(e, &v);
	pthread_mutex_unlock(&sp->dt_lock);
	/* What was published may have allowed a placement the new entry does not: none
	 * under way through it may outlive this call. */
	if (was)
		dt_wait(sp, 0xffffffff00000000ull, (uint64_t)(qi + 1) << 32, false);
}

bool swv_shm_dt_mr_add(struct swv_shm_port *sp, uint32_t rkey, uint64_t pd, unsigned access,
		       uint64_t iova, uint64_t length, const void *host)
{
	if (!sp || port_inert(sp) || !rkey || !length || !swv_shm_direct_enabled())
		return false;
	struct shm_hdr *h = sp->inbox;
	unsigned home = dt_mr_home(rkey);
	bool done = false;
	pthread_mutex_lock(&sp->dt_lock);
	for (unsigned k = 0; k < DT_PROBES && !done; k++) {
		unsigned mi = (home + k) & (DT_MRS - 1);
		struct dt_mr *e = dt_mr_at(h, mi);
		if (LD(e->rkey))
			continue;
		struct dt_mr v = {.rkey = rkey,
				  .access = access,
				  .pd = pd,
				  .iova = iova,
				  .length = length,
				  .host = (uintptr_t)host};
		v.chk = dt_mr_chk(h->dt_salt, mi, &v);
		dt_mr_store(e, &v);
		done = true;
	}
	pthread_mutex_unlock(&sp->dt_lock);
	return done;
}

void swv_shm_dt_mr_del(struct swv_shm_port *sp, uint32_t rkey)
{
	if (!sp || port_inert(sp) || !rkey)
		return;
	struct shm_hdr *h = sp->inbox;
	unsigned home = dt_mr_home(rkey);
	uint32_t gone = 0; /* bit k: the entry at probe k was withdrawn */
	pthread_mutex_lock(&sp->dt_lock);
	for (unsigned k = 0; k < DT_PROBES; k++) {
		struct dt_mr *e = dt_mr_at(h, (home + k) & (DT_MRS - 1));
		if (LD(e->rkey) != rkey)
			continue;
		struct dt_mr v;
		memset(&v, 0, sizeof(v));
		dt_mr_store(e, &v);
		gone |= 1u << k;
	}
	pthread_mutex_unlock(&sp->dt_lock);
	for (unsigned k = 0; k < DT_PROBES; k++)
		if (gone & (1u << k))
			dt_wait(sp, 0xffffffffull, ((home + k) & (DT_MRS - 1)) + 1, false);
}

/* The IB partition rule (as the responder's P_Key check). */
static bool dt_pkey_match(uint32_t a, uint32_t b)
{
	return (a & 0x7fff) && (a & 0x7fff) == (b & 0x7fff) && ((a | b) & 0x8000);
}

static int dt_corrupt(struct swv_shm_port *sp, struct swv_shm_peer *p)
{
	if (atomic_exchange(&p->direct_ok, false)) {
		swv_log(SWV_LOG_DEBUG, "shm: placement table of %#llx corrupt: ring only",
			(unsigned long long)p->key);
		stat_add(&sp->direct_corrupt, 1);
	}
	stat_add(&sp->direct_fallback, 1);
	return EBADMSG;
}

int swv_shm_direct(struct swv_shm_port *sp, struct swv_shm_peer *p, const struct swv_shm_direct *d,
		   void *buf, size_t len)
{
	if (!sp || !p || !d || (!buf && !d->iov) || !len || port_inert(sp) ||
	    !swv_shm_direct_enabled() ||
	    !atomic_load_explicit(&p->direct_ok, memory_order_relaxed) ||
	    !atomic_load_explicit(&p->ring, memory_order_acquire))
		return ENOTSUP;
	struct shm_hdr *h = p->hdr;
	uint64_t salt = LD(h->dt_salt);
	unsigned qi = d->dqpn & (DT_QPS - 1);
	struct dt_qp *qe = dt_qp_at(h, qi);
	struct dt_qp q;
	uint32_t qseq, mseq = 0;
	if (!dt_qp_load(qe, &q, &qseq) || !q.qpn)
		goto fallback;
	if (q.chk != dt_qp_chk(salt, qi, &q))
		return dt_corrupt(sp, p);
	/* What the responder checks of the QP: it is the one addressed, connected to this
	 * very QP, takes requests (published only then), with the right, the partition
	 * and a path MTU the packet fits -- for a message of several packets exactly the
	 * sender's: the responder takes FIRST and MIDDLE packets of its own MTU only. */
	if (q.qpn != d->dqpn || q.peer_key != sp->self_key || q.dest_qpn != d->sqpn ||
	    (q.access & d->access) != d->access || !dt_pkey_match(d->pkey, q.pkey) ||
	    (d->pmtu ? d->pmtu != q.mtu : len > q.mtu))
		goto fallback;
	unsigned home = dt_mr_home(d->rkey), mi = 0;
	struct dt_mr m;
	struct dt_mr *me = NULL;
	for (unsigned k = 0; k < DT_PROBES; k++) {
		unsigned i = (home + k) & (DT_MRS - 1);
		struct dt_mr *e = dt_mr_at(h, i);
		uint32_t s;
		if (!dt_mr_load(e, &m, &s))
			goto fallback;
		if (!m.rkey)
			continue;
		if (m.chk != dt_mr_chk(salt, i, &m))
			return dt_corrupt(sp, p);
		if (m.rkey == d->rkey) {
			me = e;
			mi = i;
			mseq = s;
			break;
		}
	}
	/* ... and of the MR: the rkey, the QP's PD, the right, the bounds */
	if (!me || m.pd != q.pd || (m.access & d->access) != d->access || d->va < m.iova ||
	    len > m.length || d->va - m.iova > m.length - len)
		goto fallback;
	uint64_t host = m.host + (d->va - m.iova);
	if (host < m.host || host > UINT64_MAX - len)
		return dt_corrupt(sp, p);

	pthread_mutex_lock(&p->lock);
	/* Announce, then look again: the owner changes an entry, then waits for the
	 * announcements it can see (dt_wait); one of the two sees the other. */
	atomic_store_explicit(&p->slot->placing, (uint64_t)(qi + 1) << 32 | (mi + 1),
			      memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	bool still = atomic_load_explicit(&qe->seq, memory_order_relaxed) == qseq &&
		     atomic_load_explicit(&me->seq, memory_order_relaxed) == mseq &&
		     !atomic_load_explicit(&h->closed, memory_order_relaxed);
	ssize_t n = -1;
	int err = 0;
	/* The owner may have died since attach and its pid gone to another process: the
	 * pidfd tells (a pid reused within the next few instructions is beyond reach). */
	if (still && !owner_lives(p)) {
		still = false;
		err = ESRCH;
	}
	if (still) {
		struct iovec lv = {buf, len}, rv = {(void *)(uintptr_t)host, len};
		const struct iovec *l = d->iov ? d->iov : &lv;
		unsigned long nl = d->iov ? (unsigned long)d->iovcnt : 1;
		n = d->read ? process_vm_readv(p->owner_pid, l, nl, &rv, 1, 0)
			    : process_vm_writev(p->owner_pid, l, nl, &rv, 1, 0);
		err = n < 0 ? errno : 0;
	}
	atomic_store_explicit(&p->slot->placing, 0, memory_order_release);
	pthread_mutex_unlock(&p->lock);
	if (still && n == (ssize_t)len) {
		stat_add(&sp->direct_tx, 1);
		if (d->read)
			stat_add(&sp->direct_rd, 1);
		return 0;
	}
	/* Refused by the kernel for good (no permission, no such call, the owner is
	 * gone): this destination takes the ring from now on. EFAULT (memory unmapped
	 * since registration) is the access's own failure, which the responder reports. */
	if (err == EPERM || err == ENOSYS || err == ESRCH)
		atomic_store(&p->direct_ok, false);
fallback:
	stat_add(&sp->direct_fallback, 1);
	return EAGAIN;
}

int swv_shm_test_mark_placing(struct swv_shm_peer *p, uint32_t rkey)
{
	if (!p || !atomic_load(&p->ring))
		return EINVAL;
	unsigned home = dt_mr_home(rkey);
	for (unsigned k = 0; k < DT_PROBES; k++) {
		unsigned i = (home + k) & (DT_MRS - 1);
		if (LD(dt_mr_at(p->hdr, i)->rkey) == rkey) {
			atomic_store(&p->slot->placing, (uint64_t)i + 1);
			return 0;
		}
	}
	return ENOENT;
}

void swv_shm_test_set_owner_pid(struct swv_shm_port *sp, int32_t pid)
{
	sp->inbox->owner_pid = pid;
}

void swv_shm_test_corrupt_table(struct swv_shm_port *sp)
{
	/* flip a bit of every published word the check covers, as a stray writer would */
	struct shm_hdr *h = sp->inbox;
	for (unsigned i = 0; i < DT_MRS; i++) {
		struct dt_mr *e = dt_mr_at(h, i);
		if (LD(e->rkey))
			ST(e->length, LD(e->length) ^ (1ull << 40));
	}
	for (unsigned i = 0; i < DT_QPS; i++) {
		struct dt_qp *e = dt_qp_at(h, i);
		if (LD(e->qpn))
			ST(e->access, LD(e->access) ^ 0x100u);
	}
}
