/*
 * Memory regions and every access to registered memory. Owner: core.
 *
 * This module is the protection boundary: all local SGE gathers/scatters and all remote
 * accesses go through the functions below, which check key, PD, bounds and access
 * right and perform the copy while holding the context's MR read lock, so a
 * concurrent ibv_dereg_mr can never leave a copy touching unregistered memory.
 *
 * Keys: 32 bits from the kernel's CSPRNG (getrandom), never 0, never equal to another
 * live key (lkey or rkey) of the context; an MR's lkey and rkey are drawn apart. A key
 * reveals nothing about any other key: the table is a hash table keyed by the full
 * 32-bit key, not an array indexed by part of it.
 *
 * Application memory that faults (unmapped or made read-only after registration) is
 * an error of the access, never a signal (core/memsafe.h): EFAULT for remote accesses,
 * IBV_WC_LOC_PROT_ERR for local ones.
 */
#ifndef SWV_CORE_MR_H
#define SWV_CORE_MR_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct swv_context;
struct swv_pd;

/* An imported MR (ibv_import_mr) is a swv_mr of its own whose shared names the MR
 * found by handle (to_swv_mr answers that one; its keys are the original's, so work
 * requests reach the original through the table). Ownership as for an imported PD
 * (core/pd.h): ibv_dereg_mr of the original frees the MR, ibv_unimport_mr alone frees
 * the import struct and never reads the original. */
struct swv_mr {
	struct ibv_mr ibmr; /* addr/length/lkey/rkey as the user sees them */
	struct swv_mr *shared; /* an import: the MR it names; NULL otherwise */
	struct swv_pd *pd;
	unsigned access;    /* IBV_ACCESS_* */
	uint64_t iova;      /* remote VA of byte 0 (= addr unless reg_mr_iova) */
	uint8_t *base;      /* host address of byte 0 */
	uint64_t length;
	_Atomic unsigned *owner_users; /* what the memory belongs to (a DM), or NULL */
	uint32_t nmw; /* memory windows bound to it (write lock): dereg refuses while > 0 */
};

/* A memory window (ibv_alloc_mw): an rkey of its own that grants remote access to a
 * range of one MR with the window's rights, not the MR's. Type 1 is bound with
 * ibv_bind_mw and stays valid until deallocated; type 2 is bound by an
 * IBV_WR_BIND_MW work request, to the QP that posted it (2B: only that QP's peer
 * reaches it), and invalidated by LOCAL_INV or a SEND_WITH_INV. Every field is
 * written under the table's write lock and read under its read lock. */
struct swv_mw {
	struct ibv_mw ibmw;
	struct swv_pd *pd;
	bool valid;	       /* type 2: bound and not invalidated; type 1: always */
	struct swv_mr *mr;     /* the MR bound to, NULL when unbound */
	uint64_t addr, length; /* the window, in the MR's IOVA space */
	unsigned access;       /* IBV_ACCESS_REMOTE_* | IBV_ACCESS_ZERO_BASED */
	uint32_t qpn;	       /* type 2: the QP it is bound to */
	uint32_t key;	       /* its rkey in the table; ibmw.rkey is the application's copy */
};

static inline struct swv_mr *to_swv_mr(struct ibv_mr *mr)
{
	struct swv_mr *m = (struct swv_mr *)mr; /* ibmr is the first member */
	return m && m->shared ? m->shared : m;
}

static inline struct swv_mw *to_swv_mw(struct ibv_mw *mw)
{
	return (struct swv_mw *)mw; /* ibmw is the first member */
}

/* One key of the table: an MR is entered twice, by lkey and by rkey, a memory window
 * once, by its rkey (remote, mr NULL, mw set). key 0 = free. */
struct swv_mr_key {
	uint32_t key;
	bool remote; /* this is the MR's rkey (or a window's) */
	struct swv_mr *mr;
	struct swv_mw *mw;
};

/* The context's MR table; embedded in struct swv_context. */
struct swv_mr_table {
	pthread_rwlock_t lock;   /* writers: reg/dereg/rereg; readers: every access below.
				  * Writer-preferring, so dereg is not starved by traffic;
				  * readers therefore never nest. */
	struct swv_mr_key *ent;  /* open addressing, linear probing, at most half full */
	uint32_t mask;           /* table size - 1 (a power of two), 0 before the first MR */
	uint32_t nkeys, nmrs;	 /* nmrs counts memory windows too (they share max_mr) */
	uint32_t nmws;		 /* memory windows: a QP's destroy looks for its own */
	uint32_t pool[16];       /* random words drawn ahead (one getrandom per 16 keys) */
	uint32_t npool;
};

/* Registration (the exported ibv_reg_mr* / ibv_dereg_mr / ibv_rereg_mr wrap these).
 * register: NULL + errno (EINVAL bad flags/range, ENOMEM, EFAULT
 * when the range is not mapped in full, or not writable while the access asks for
 * LOCAL_WRITE / REMOTE_WRITE / REMOTE_ATOMIC, as rxe's page pinning fails; never for
 * IBV_ACCESS_ON_DEMAND, whose pages are checked at each access). addr NULL, length
 * SIZE_MAX with ON_DEMAND is the implicit MR: every address, iova = host address. */
struct swv_mr *swv_mr_register(struct swv_context *ctx, struct swv_pd *pd, void *addr,
			       size_t length, uint64_t iova, unsigned access);
/* A zero-based MR over memory swverbs owns (device memory, core/dm.h): IOVA 0 is base;
 * *owner_users counts it while it lives. NULL + errno as above (access only). */
struct swv_mr *swv_mr_register_dm(struct swv_context *ctx, struct swv_pd *pd, void *base,
				  size_t length, unsigned access, _Atomic unsigned *owner_users);
/* 0, or EINVAL while memory windows are bound to it (rxe; IBA 10.6.7.2.6). */
int swv_mr_deregister(struct swv_context *ctx, struct swv_mr *mr);
/* 0, EINVAL (bad flags/range; memory windows bound to it), EOPNOTSUPP or EFAULT (the
 * new range, or the old one under new write rights, fails the registration check);
 * changes what 'flags' selects
 * atomically with respect to accesses; keys are kept. */
int swv_mr_rereg(struct swv_context *ctx, struct swv_mr *mr, int flags, struct swv_pd *pd,
		 void *addr, size_t length, unsigned access);
/* ibv_advise_mr: 0, EOPNOTSUPP (an advice other than the prefetches), EINVAL (unknown
 * flag, no SGE, an lkey that is not an ODP MR of pd, PREFETCH_WRITE into an MR without
 * LOCAL_WRITE), EFAULT (an SGE outside its MR; with IBV_ADVISE_MR_FLAG_FLUSH also a
 * range whose pages cannot be faulted in). */
int swv_mr_advise(struct swv_context *ctx, struct swv_pd *pd, unsigned advice, uint32_t flags,
		  const struct ibv_sge *sg, uint32_t nsge);
/* The verbs_context op behind the inline ibv_advise_mr. */
int swv_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		  struct ibv_sge *sg_list, uint32_t num_sge);
/* Access flags check shared with reg/rereg: 0, EINVAL or EOPNOTSUPP. */
int swv_mr_check_access(unsigned access);

int swv_mr_table_init(struct swv_mr_table *t);
/* The MR a key names (remote: as an rkey, else as an lkey), or NULL; read lock held. */
struct swv_mr *swv_mr_lookup(struct swv_mr_table *t, uint32_t key, bool remote);
/* ibv_import_mr: a new import struct for the MR of ctx whose handle this is, seen
 * through pd (its context and PD); NULL + errno (ENOENT: no such MR; ENOMEM). */
struct swv_mr *swv_mr_import(struct swv_context *ctx, struct ibv_pd *pd, uint32_t handle);
void swv_mr_table_destroy(struct swv_mr_table *t);

/* Local access. Returns 0, or IBV_WC_LOC_PROT_ERR for a bad lkey / wrong PD / out of
 * bounds / missing IBV_ACCESS_LOCAL_WRITE on scatter / memory that faults, or
 * IBV_WC_LOC_LEN_ERR when the SGE list holds fewer than offset + len bytes. 'offset' skips that many bytes of the
 * SGE list first. Only the bytes actually copied are checked against their MRs
 * (swv_mr_check_sges checks whole SGEs at post time). SGE addresses are in the MR's
 * IOVA space (= the host address unless registered with an iova). */
int swv_mr_gather(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		  unsigned nsge, uint64_t offset, void *dst, size_t len);
int swv_mr_scatter(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		   unsigned nsge, uint64_t offset, const void *src, size_t len);
/* The host addresses of the first len bytes of an SGE list, for a copy by the
 * kernel (direct placement): every piece checked as swv_mr_gather checks it. Returns
 * the number of entries written to iov (at most max), or -1: a piece fails its checks,
 * the list holds fewer than len bytes, or more than max entries are needed. */
int swv_mr_gather_iov(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		      unsigned nsge, size_t len, struct iovec *iov, int max);
/* Validate an SGE list without copying (post time): every SGE of nonzero length must
 * lie wholly in an MR of pd whose access includes 'access' (0 for a gather,
 * IBV_ACCESS_LOCAL_WRITE for a receive). Returns 0 or IBV_WC_LOC_PROT_ERR. */
int swv_mr_check_sges(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		      unsigned nsge, unsigned access);

/* Memory windows. alloc: NULL + errno (EINVAL for a type other than 1 and 2, ENOMEM).
 * dealloc unbinds it (its rkey refuses at once) and frees it. */
struct swv_mw *swv_mw_alloc(struct swv_context *ctx, struct swv_pd *pd, enum ibv_mw_type type);
void swv_mw_dealloc(struct swv_context *ctx, struct swv_mw *mw);
/* Execute a bind (IBV_WR_BIND_MW, or ibv_bind_mw for type 1) posted on a QP of pd
 * numbered qpn, of the window whose ibmw.handle is handle (a window deallocated since
 * the post is not found), onto bi->mr, whose lkey at post time is mr_lkey (an MR
 * deregistered since is not found either): the window's rkey becomes its upper 24 bits | the low 8
 * of rkey. 0, or IBV_WC_MW_BIND_ERR when the rules of IBA 10.6.7 (as rxe checks them) refuse. */
int swv_mw_bind(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t handle,
		uint32_t rkey, const struct ibv_mw_bind_info *bi, uint32_t mr_lkey);
/* Invalidate the type 2 window rkey names (LOCAL_INV; remote: SEND_WITH_INV, which
 * must come through the QP the window is bound to). 0, or EINVAL: no such window, a
 * type 1 window, one already invalid, another PD (MR rkeys cannot be invalidated:
 * swverbs has no fast-registration MRs). */
int swv_mw_invalidate(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
		      bool remote);
/* A QP is destroyed: type 2 windows bound to its number become invalid, so a later QP
 * that reuses the number never inherits them. */
void swv_mw_qp_gone(struct swv_context *ctx, uint32_t qpn);


/* Remote access (responder). qpn is the QP the request arrived on (type 2 windows
 * answer only the QP they are bound to). Returns 0, or EACCES for bad rkey / wrong PD / out of
 * bounds / missing right, or EFAULT when the registered memory faults (unmapped or not
 * writable since registration); the responder answers NAK remote access error to
 * both. A zero length access succeeds without looking at the key. */
int swv_mr_remote_check(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			uint64_t va, uint64_t len, unsigned access);
int swv_mr_remote_write(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			uint64_t va, const void *src, size_t len);
int swv_mr_remote_read(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
		       uint64_t va, void *dst, size_t len);
/* 8-byte atomic at va (must be 8-aligned; EINVAL otherwise; EACCES/EFAULT as above). cmp_swap
 * selects compare-and-swap (swap_add = swap value) versus fetch-and-add. */
int swv_mr_remote_atomic(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			 uint64_t va, int cmp_swap, uint64_t swap_add, uint64_t cmp,
			 uint64_t *orig);
/* ATOMIC_WRITE: store the 8 bytes of value at va (8-aligned, else EINVAL) with one
 * atomic 64-bit store; REMOTE_WRITE right; EACCES/EFAULT as above. */
int swv_mr_remote_atomic_write(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn,
			       uint32_t rkey, uint64_t va, uint64_t value);
/* FLUSH of placement type plt (IBV_FLUSH_GLOBAL | IBV_FLUSH_PERSISTENT, each needing
 * the MR's IBV_ACCESS_FLUSH_* right) over [va, va + len), or the whole MR. Windows
 * carry no flush right. Global: a fence (every earlier access is placed already);
 * persistent: msync(MS_SYNC) of the pages, which makes file-backed shared memory
 * durable and is a no-op for anonymous memory (no persistence domain beyond the
 * process). 0, EACCES, or EFAULT when the range is not mapped any more. */
int swv_mr_remote_flush(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			uint64_t va, uint64_t len, unsigned plt, bool whole_mr);

#endif
