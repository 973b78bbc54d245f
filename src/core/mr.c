/*
 * Memory regions: the protection boundary (DESIGN.md section 8).
 *
 * Every access resolves its key under the table's read lock, checks PD, access right
 * and bounds (overflow-safe: no 'va + len' is ever computed before proving it cannot
 * wrap), and copies while still holding the lock, so ibv_dereg_mr (write lock) returns
 * only when no copy into or out of that region is in progress and none can start.
 * The copies themselves are fault-safe (core/memsafe.h): memory the application has
 * unmapped or write-protected since registration fails the access, never the process.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/context.h"
#include "core/device.h"
#include "core/limits.h"
#include "core/memsafe.h"
#include "core/mr.h"
#include "core/pd.h"
#include "link/shm.h"
#include "util/compiler.h"
#include "util/log.h"

#define TABLE_MIN 256u /* keys; the table doubles at half full */

/* IBV_ACCESS_FLUSH_GLOBAL / _PERSISTENT grant the remote FLUSH of those placement
 * types (swv_mr_remote_flush). */
#define SWV_ACCESS_KNOWN                                                                           \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |               \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |                   \
	 IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_FLUSH_GLOBAL |                     \
	 IBV_ACCESS_FLUSH_PERSISTENT)

int swv_mr_table_init(struct swv_mr_table *t)
{
	pthread_rwlockattr_t a;
	int rc;

	memset(t, 0, sizeof(*t));
	/* Copies into registered memory are fault-safe from the first MR on. */
	swv_memsafe_init();
	pthread_rwlockattr_init(&a);
	/* Writer preference: a dereg must not wait behind an endless stream of accesses. */
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	rc = pthread_rwlock_init(&t->lock, &a);
	pthread_rwlockattr_destroy(&a);
	return rc;
}

void swv_mr_table_destroy(struct swv_mr_table *t)
{
	/* MRs the application never deregistered die with their context (each once: by
	 * its lkey entry). */
	for (uint32_t i = 0; t->ent && i <= t->mask; i++) {
		struct swv_mr_key *e = &t->ent[i];
		if (e->key && e->mw && e->remote) {
			atomic_fetch_sub(&e->mw->pd->users, 1);
			free(e->mw);
		} else if (e->key && !e->remote && !e->mw) {
			atomic_fetch_sub(&e->mr->pd->users, 1);
			if (e->mr->owner_users)
				atomic_fetch_sub(e->mr->owner_users, 1);
			free(e->mr);
		}
	}
	free(t->ent);
	pthread_rwlock_destroy(&t->lock);
	memset(t, 0, sizeof(*t));
}

/* ---- keys: a hash table keyed by the full 32-bit key ---- */

static inline uint32_t key_hash(uint32_t key)
{
	/* Keys are random already; the multiply only spreads any bias over the table. */
	return key * 0x9e3779b1u;
}

static struct swv_mr_key *key_slot(const struct swv_mr_table *t, uint32_t key)
{
	for (uint32_t i = key_hash(key) & t->mask;; i = (i + 1) & t->mask) {
		struct swv_mr_key *e = &t->ent[i];
		if (e->key == key || e->key == 0)
			return e; /* never full: at most half the slots are used */
	}
}

struct swv_mr *swv_mr_lookup(struct swv_mr_table *t, uint32_t key, bool remote)
{
	if (key == 0 || !t->ent)
		return NULL;
	const struct swv_mr_key *e = key_slot(t, key);
	return e->key == key && e->remote == remote ? e->mr : NULL;
}

struct swv_mr *swv_mr_import(struct swv_context *ctx, struct ibv_pd *pd, uint32_t handle)
{
	struct swv_mr *imp = calloc(1, sizeof(*imp));
	if (!imp) {
		errno = ENOMEM;
		return NULL;
	}
	struct swv_mr_table *t = &ctx->mrs;
	pthread_rwlock_rdlock(&t->lock);
	/* An MR's handle is its lkey (mr_insert), so the key table finds it. */
	struct swv_mr *mr = swv_mr_lookup(t, handle, false);
	if (mr) {
		imp->ibmr = mr->ibmr;
		imp->shared = mr;
	}
	pthread_rwlock_unlock(&t->lock);
	if (!mr) {
		free(imp);
		errno = ENOENT; /* the kernel's answer to a handle it has no object for */
		return NULL;
	}
	imp->ibmr.context = pd->context;
	imp->ibmr.pd = pd;
	return imp;
}

/* The entry of a live rkey (an MR's or a window's), or NULL. */
static const struct swv_mr_key *rkey_entry(const struct swv_mr_table *t, uint32_t key)
{
	if (key == 0 || !t->ent)
		return NULL;
	const struct swv_mr_key *e = key_slot(t, key);
	return e->key == key && e->remote ? e : NULL;
}

static void key_put(struct swv_mr_table *t, const struct swv_mr_key *k)
{
	*key_slot(t, k->key) = *k;
	t->nkeys++;
}

static void key_insert(struct swv_mr_table *t, uint32_t key, bool remote, struct swv_mr *mr)
{
	key_put(t, &(struct swv_mr_key){.key = key, .remote = remote, .mr = mr});
}

/* Linear probing without tombstones: close the gap by moving later entries of the
 * cluster back when their home slot allows it. */
static void key_remove(struct swv_mr_table *t, uint32_t key)
{
	struct swv_mr_key *e = key_slot(t, key);
	if (e->key != key)
		return;
	uint32_t hole = (uint32_t)(e - t->ent);
	for (uint32_t j = (hole + 1) & t->mask; t->ent[j].key; j = (j + 1) & t->mask) {
		uint32_t home = key_hash(t->ent[j].key) & t->mask;
		/* entry j may fill the hole unless its home lies in (hole, j] cyclically */
		if (((j - home) & t->mask) >= ((j - hole) & t->mask)) {
			t->ent[hole] = t->ent[j];
			hole = j;
		}
	}
	memset(&t->ent[hole], 0, sizeof(t->ent[hole]));
	t->nkeys--;
}

/* Room for two more keys at most half full (write lock held): false = no memory. */
static bool key_reserve(struct swv_mr_table *t)
{
	uint32_t size = t->ent ? t->mask + 1 : 0;
	if ((t->nkeys + 2) * 2 <= size)
		return true;
	uint32_t n = size ? size * 2 : TABLE_MIN;
	struct swv_mr_key *old = t->ent, *ne = calloc(n, sizeof(*ne));
	if (!ne)
		return false;
	t->ent = ne;
	t->mask = n - 1;
	t->nkeys = 0;
	for (uint32_t i = 0; i < size; i++)
		if (old[i].key)
			key_put(t, &old[i]);
	free(old);
	return true;
}

/* Fill buf from the kernel's CSPRNG. getrandom blocks only until the pool is first
 * initialised (early boot); /dev/urandom covers a getrandom that seccomp refuses. */
static bool csprng(void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = getrandom(p + got, len - got, 0);
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		break;
	}
	if (got == len)
		return true;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	while (got < len) {
		ssize_t n = read(fd, p + got, len - got);
		if (n > 0)
			got += (size_t)n;
		else if (n < 0 && errno == EINTR)
			continue;
		else
			break;
	}
	close(fd);
	return got == len;
}

/* A fresh key (write lock held): random, non-zero, not a live key. 0 = no randomness
 * available, which fails the registration rather than hand out a guessable key. */
static uint32_t new_key(struct swv_mr_table *t)
{
	for (int tries = 0; tries < 64; tries++) {
		if (t->npool == 0) {
			if (!csprng(t->pool, sizeof(t->pool)))
				return 0;
			t->npool = SWV_ARRAY_SIZE(t->pool);
		}
		uint32_t k = t->pool[--t->npool];
		t->pool[t->npool] = 0;
		if (k != 0 && key_slot(t, k)->key != k)
			return k;
	}
	return 0;
}

/* [addr, addr + length) can be used as 'access' asks: mapped, and writable for any
 * right that lets something write it. */
static int check_mapping(const void *addr, size_t length, unsigned access)
{
	/* ODP memory is looked at per access, but only user space can ever be mapped
	 * (and a copy at a non-canonical address cannot be made fault-safe): EFAULT, as a
	 * range the kernel's access_ok refuses. */
	if (access & IBV_ACCESS_ON_DEMAND)
		return (uintptr_t)addr < SWV_USER_VA_LIMIT &&
			       length <= SWV_USER_VA_LIMIT - (uintptr_t)addr
			   ? 0
			   : EFAULT;
	bool write =
	    access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	return swv_mem_check(addr, length, write);
}

int swv_mr_check_access(unsigned access)
{
	unsigned optional = IBV_ACCESS_OPTIONAL_RANGE;

	/* Bits in the optional range (e.g. RELAXED_ORDERING) may be ignored by design;
	 * any other unknown bit is an error. */
	if (access & ~(SWV_ACCESS_KNOWN | optional))
		return EINVAL;
	/* IB spec: remote write/atomic rights need local write. */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	return 0;
}

static int check_range(const void *addr, size_t length, uint64_t iova)
{
	if (length == 0 || length > SWV_DEV_MAX_MR_SIZE)
		return EINVAL;
	if ((uintptr_t)addr > UINTPTR_MAX - (length - 1))
		return EINVAL; /* host range wraps */
	if (iova > UINT64_MAX - (length - 1))
		return EINVAL; /* IOVA range wraps */
	return 0;
}

/* Enter a checked range in the table under fresh keys. */
static struct swv_mr *mr_insert(struct swv_context *ctx, struct swv_pd *pd, void *addr,
				uint64_t length, uint64_t iova, unsigned access,
				_Atomic unsigned *owner_users)
{
	struct swv_mr_table *t = &ctx->mrs;
	struct swv_mr *mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	mr->pd = pd;
	mr->access = access;
	mr->iova = iova;
	mr->base = addr;
	mr->length = length;
	mr->owner_users = owner_users;
	mr->ibmr.context = &ctx->vctx.context;
	mr->ibmr.pd = &pd->ibpd;
	mr->ibmr.addr = addr;
	mr->ibmr.length = length;

	pthread_rwlock_wrlock(&t->lock);
	uint32_t lkey = 0, rkey = 0;
	if (t->nmrs < SWV_DEV_MAX_MR && key_reserve(t) && (lkey = new_key(t)) != 0) {
		key_insert(t, lkey, false, mr);
		rkey = new_key(t); /* lkey is live now: rkey differs from it */
		if (!rkey)
			key_remove(t, lkey);
	}
	if (!rkey) {
		pthread_rwlock_unlock(&t->lock);
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	key_insert(t, rkey, true, mr);
	t->nmrs++;
	mr->ibmr.lkey = lkey;
	mr->ibmr.rkey = rkey;
	mr->ibmr.handle = lkey; /* no kernel object: an opaque per-MR value */
	atomic_fetch_add(&pd->users, 1);
	if (owner_users)
		atomic_fetch_add(owner_users, 1);
	pthread_rwlock_unlock(&t->lock);
	return mr;
}

/* ---- the intra-host link's placement table (link/shm.h) ----
 * Plain MRs with a remote right are listed in the inbox of the context's first port,
 * so that a sender on this host can check a WRITE or READ as the responder would and
 * place it itself. Not listed, so always served by the responder: device memory,
 * on-demand paging (pages checked per access), zero-based MRs, memory windows. An
 * MR is withdrawn (and every placement into it finished) before it is changed or
 * freed. */
static struct swv_shm_port *dt_port(struct swv_context *ctx)
{
	return ctx->ports[0] ? ctx->ports[0]->ep.shm : NULL;
}

static void dt_mr_publish(struct swv_context *ctx, const struct swv_mr *mr)
{
	struct swv_shm_port *sp = dt_port(ctx);
	if (!sp || mr->owner_users ||
	    (mr->access & (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_ZERO_BASED)) ||
	    !(mr->access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)))
		return;
	(void)swv_shm_dt_mr_add(sp, mr->ibmr.rkey, (uintptr_t)swv_pd_prot(mr->pd), mr->access,
				mr->iova, mr->length, mr->base);
}

static void dt_mr_withdraw(struct swv_context *ctx, const struct swv_mr *mr)
{
	struct swv_shm_port *sp = dt_port(ctx);
	if (sp)
		swv_shm_dt_mr_del(sp, mr->ibmr.rkey);
}

/* The implicit ODP MR: the whole address space, as rdma-core asks for it. */
static bool is_implicit(const void *addr, size_t length, unsigned access)
{
	return !addr && length == SIZE_MAX && (access & IBV_ACCESS_ON_DEMAND);
}

struct swv_mr *swv_mr_register(struct swv_context *ctx, struct swv_pd *pd, void *addr,
			       size_t length, uint64_t iova, unsigned access)
{
	bool implicit = is_implicit(addr, length, access);
	int rc = swv_mr_check_access(access);
	if (!rc && implicit && iova != 0)
		rc = EINVAL; /* its IOVA space is the address space itself */
	if (!rc && !implicit)
		rc = check_range(addr, length, iova);
	/* ODP pages need not be mapped now (check_mapping only bounds them): an access
	 * that finds a hole fails then (the copies are fault-safe), as an HCA's page
	 * fault it cannot serve. */
	if (!rc && !implicit)
		rc = check_mapping(addr, length, access);
	if (rc) {
		errno = rc;
		return NULL;
	}
	/* the implicit MR reaches what user space can map (SWV_USER_VA_LIMIT), no further */
	struct swv_mr *mr =
	    mr_insert(ctx, pd, addr, implicit ? SWV_USER_VA_LIMIT : length, iova, access, NULL);
	if (mr && implicit)
		mr->ibmr.length = SIZE_MAX; /* as the application registered it */
	if (mr && !implicit)
		dt_mr_publish(ctx, mr);
	return mr;
}

struct swv_mr *swv_mr_register_dm(struct swv_context *ctx, struct swv_pd *pd, void *base,
				  size_t length, unsigned access, _Atomic unsigned *owner_users)
{
	int rc = swv_mr_check_access(access);
	if (rc) {
		errno = rc;
		return NULL;
	}
	/* zero-based: IOVA 0 is 'base'; a length of 0 is an MR no access can use */
	struct swv_mr *mr = mr_insert(ctx, pd, base, length, 0, access, owner_users);
	if (mr)
		mr->ibmr.addr = NULL; /* as rdma-core reports a DM MR */
	return mr;
}

int swv_mr_deregister(struct swv_context *ctx, struct swv_mr *mr)
{
	struct swv_mr_table *t = &ctx->mrs;

	/* Placements by senders first: none may land once this returns. */
	dt_mr_withdraw(ctx, mr);
	/* Waits for every access in progress (they hold the read lock). */
	pthread_rwlock_wrlock(&t->lock);
	if (mr->nmw) {
		pthread_rwlock_unlock(&t->lock);
		dt_mr_publish(ctx, mr);
		return EINVAL;
	}
	if (swv_mr_lookup(t, mr->ibmr.lkey, false) == mr) {
		key_remove(t, mr->ibmr.lkey);
		key_remove(t, mr->ibmr.rkey);
		t->nmrs--;
	}
	pthread_rwlock_unlock(&t->lock);
	atomic_fetch_sub(&mr->pd->users, 1);
	if (mr->owner_users)
		atomic_fetch_sub(mr->owner_users, 1);
	free(mr);
	return 0;
}

int swv_mr_rereg(struct swv_context *ctx, struct swv_mr *mr, int flags, struct swv_pd *pd,
		 void *addr, size_t length, unsigned access)
{
	struct swv_mr_table *t = &ctx->mrs;
	unsigned new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : mr->access;
	int rc;

	if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
		rc = swv_mr_check_access(access);
		if (rc)
			return rc;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		rc = check_range(addr, length, (uintptr_t)addr);
		if (rc)
			return rc;
	}
	if ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)
		return EINVAL;
	/* Device memory stays where it is, and zero-based. */
	if (mr->owner_users && (flags & ~IBV_REREG_MR_CHANGE_PD))
		return EINVAL;
	/* The implicit MR has no translation to change, and without ON_DEMAND it would
	 * be an ordinary MR of the whole address space. */
	if (is_implicit(mr->base, mr->ibmr.length, mr->access) &&
	    (flags & (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS)))
		return EOPNOTSUPP;
	/* A new range, or new rights over the old one, must pass what registration
	 * checks (the application races itself if it reregisters one MR twice at once);
	 * an ODP MR's pages are checked at each access instead. */
	if (flags & (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS)) {
		bool tr = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
		rc = check_mapping(tr ? addr : mr->base, tr ? length : mr->length, new_access);
		if (rc)
			return rc;
	}

	dt_mr_withdraw(ctx, mr);
	pthread_rwlock_wrlock(&t->lock);
	if (mr->nmw) {
		/* windows were bound against this range, PD and rights (as dereg) */
		pthread_rwlock_unlock(&t->lock);
		dt_mr_publish(ctx, mr);
		return EINVAL;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->base = addr;
		mr->length = length;
		mr->iova = (uintptr_t)addr;
		mr->ibmr.addr = addr;
		mr->ibmr.length = length;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		atomic_fetch_add(&pd->users, 1);
		atomic_fetch_sub(&mr->pd->users, 1);
		mr->pd = pd;
		mr->ibmr.pd = &pd->ibpd;
	}
	mr->access = new_access;
	pthread_rwlock_unlock(&t->lock);
	dt_mr_publish(ctx, mr);
	return 0;
}

/* ---- access checks (read lock held by the caller of these helpers) ---- */

/* [va, va + len) inside the MR's IOVA range, without overflow. len may be 0. */
static bool in_bounds(const struct swv_mr *mr, uint64_t va, uint64_t len)
{
	return va >= mr->iova && len <= mr->length && va - mr->iova <= mr->length - len;
}

static inline uint8_t *host_addr(const struct swv_mr *mr, uint64_t va)
{
	/* integer arithmetic: the implicit ODP MR's base is NULL */
	return (uint8_t *)((uintptr_t)mr->base + (uintptr_t)(va - mr->iova));
}

/* Resolve an lkey range for a copy: NULL unless key, PD, bounds and rights all hold. */
static struct swv_mr *local_mr(struct swv_mr_table *t, struct swv_pd *pd, uint32_t lkey,
			       uint64_t va, uint64_t len, unsigned access)
{
	struct swv_mr *mr = swv_mr_lookup(t, lkey, false);
	if (!mr || swv_pd_prot(mr->pd) != swv_pd_prot(pd) || (mr->access & access) != access ||
	    !in_bounds(mr, va, len))
		return NULL;
	return mr;
}

/* Walk the SGE list from 'offset', copying 'len' bytes in the direction given. */
static int sge_copy(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		    unsigned nsge, uint64_t offset, uint8_t *buf, size_t len, bool to_sge)
{
	struct swv_mr_table *t = &ctx->mrs;
	unsigned access = to_sge ? IBV_ACCESS_LOCAL_WRITE : 0;
	int rc = 0;

	if (len == 0)
		return 0;
	if (!sge)
		return IBV_WC_LOC_LEN_ERR;
	pthread_rwlock_rdlock(&t->lock);
	for (unsigned i = 0; i < nsge && len; i++) {
		uint64_t sl = sge[i].length;
		if (offset >= sl) {
			offset -= sl;
			continue;
		}
		uint64_t n = SWV_MIN(sl - offset, (uint64_t)len);
		uint64_t va = sge[i].addr;
		/* offset < sl, so va + offset wraps only if the SGE itself wraps: in_bounds
		 * on the whole piece [va+offset, +n) after checking va's own range. */
		if (va > UINT64_MAX - offset) {
			rc = IBV_WC_LOC_PROT_ERR;
			break;
		}
		struct swv_mr *mr = local_mr(t, pd, sge[i].lkey, va + offset, n, access);
		if (!mr) {
			rc = IBV_WC_LOC_PROT_ERR;
			break;
		}
		/* memory that faults is a protection error of the SGE, as a failed DMA */
		if (to_sge ? swv_copy_to_app(host_addr(mr, va + offset), buf, n, false)
			   : swv_copy_from_app(buf, host_addr(mr, va + offset), n, false)) {
			rc = IBV_WC_LOC_PROT_ERR;
			break;
		}
		buf += n;
		len -= n;
		offset = 0;
	}
	pthread_rwlock_unlock(&t->lock);
	if (!rc && len)
		rc = IBV_WC_LOC_LEN_ERR;
	return rc;
}

int swv_mr_gather(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		  unsigned nsge, uint64_t offset, void *dst, size_t len)
{
	return sge_copy(ctx, pd, sge, nsge, offset, dst, len, false);
}

int swv_mr_scatter(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		   unsigned nsge, uint64_t offset, const void *src, size_t len)
{
	return sge_copy(ctx, pd, sge, nsge, offset, (uint8_t *)src, len, true);
}

int swv_mr_gather_iov(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		      unsigned nsge, size_t len, struct iovec *iov, int max)
{
	struct swv_mr_table *t = &ctx->mrs;
	int n = 0;

	if (len && !sge)
		return -1;
	pthread_rwlock_rdlock(&t->lock);
	for (unsigned i = 0; i < nsge && len; i++) {
		uint64_t piece = SWV_MIN((uint64_t)sge[i].length, (uint64_t)len);
		if (!piece)
			continue;
		struct swv_mr *mr = local_mr(t, pd, sge[i].lkey, sge[i].addr, piece, 0);
		if (!mr || n == max) {
			n = -1;
			break;
		}
		iov[n].iov_base = host_addr(mr, sge[i].addr);
		iov[n++].iov_len = (size_t)piece;
		len -= (size_t)piece;
	}
	pthread_rwlock_unlock(&t->lock);
	return len ? -1 : n;
}

int swv_mr_check_sges(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		      unsigned nsge, unsigned access)
{
	struct swv_mr_table *t = &ctx->mrs;
	int rc = 0;

	if (nsge && !sge)
		return IBV_WC_LOC_PROT_ERR;
	pthread_rwlock_rdlock(&t->lock);
	for (unsigned i = 0; i < nsge; i++) {
		if (sge[i].length == 0)
			continue; /* touches no memory */
		if (!local_mr(t, pd, sge[i].lkey, sge[i].addr, sge[i].length, access)) {
			rc = IBV_WC_LOC_PROT_ERR;
			break;
		}
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

/* A window's rkey: the window's rights, PD and (type 2) QP, its bounds (zero-based:
 * va is an offset into it), then the MR's bounds (a rereg may have moved the MR).
 * Returns the host address of va, or NULL. */
static uint8_t *window_ptr(const struct swv_mw *mw, struct swv_pd *pd, uint32_t qpn, uint64_t va,
			   uint64_t len, unsigned access)
{
	if (!mw->valid || !mw->mr || !mw->length || swv_pd_prot(mw->pd) != swv_pd_prot(pd) ||
	    !access || (mw->access & access) != access)
		return NULL;
	if (mw->ibmw.type == IBV_MW_TYPE_2 && mw->qpn != qpn)
		return NULL;
	uint64_t off;
	if (mw->access & IBV_ACCESS_ZERO_BASED) {
		off = va;
	} else {
		if (va < mw->addr)
			return NULL;
		off = va - mw->addr;
	}
	if (len > mw->length || off > mw->length - len)
		return NULL;
	if (!in_bounds(mw->mr, mw->addr + off, len))
		return NULL;
	return host_addr(mw->mr, mw->addr + off);
}

/* Remote: rkey, PD, bounds and the right for this operation; the host address of va,
 * or NULL. */
static uint8_t *remote_ptr(struct swv_mr_table *t, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			   uint64_t va, uint64_t len, unsigned access)
{
	const struct swv_mr_key *e = rkey_entry(t, rkey);
	if (!e)
		return NULL;
	if (e->mw)
		return window_ptr(e->mw, pd, qpn, va, len, access);
	struct swv_mr *mr = e->mr;
	if (swv_pd_prot(mr->pd) != swv_pd_prot(pd) || !access || (mr->access & access) != access ||
	    !in_bounds(mr, va, len))
		return NULL;
	return host_addr(mr, va);
}

int swv_mr_remote_check(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			uint64_t va, uint64_t len, unsigned access)
{
	struct swv_mr_table *t = &ctx->mrs;
	if (len == 0)
		return 0;
	pthread_rwlock_rdlock(&t->lock);
	uint8_t *p = remote_ptr(t, pd, qpn, rkey, va, len, access);
	pthread_rwlock_unlock(&t->lock);
	return p ? 0 : EACCES;
}

int swv_mr_remote_write(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			uint64_t va, const void *src, size_t len)
{
	struct swv_mr_table *t = &ctx->mrs;
	if (len == 0)
		return 0;
	pthread_rwlock_rdlock(&t->lock);
	uint8_t *p = remote_ptr(t, pd, qpn, rkey, va, len, IBV_ACCESS_REMOTE_WRITE);
	int rc = p ? swv_copy_to_app(p, src, len, true) : EACCES;
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

int swv_mr_remote_read(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
		       uint64_t va, void *dst, size_t len)
{
	struct swv_mr_table *t = &ctx->mrs;
	if (len == 0)
		return 0;
	pthread_rwlock_rdlock(&t->lock);
	uint8_t *p = remote_ptr(t, pd, qpn, rkey, va, len, IBV_ACCESS_REMOTE_READ);
	int rc = p ? swv_copy_from_app(dst, p, len, true) : EACCES;
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

int swv_mr_remote_atomic(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			 uint64_t va, int cmp_swap, uint64_t swap_add, uint64_t cmp, uint64_t *orig)
{
	struct swv_mr_table *t = &ctx->mrs;
	int rc = 0;

	pthread_rwlock_rdlock(&t->lock);
	uint8_t *hp = remote_ptr(t, pd, qpn, rkey, va, 8, IBV_ACCESS_REMOTE_ATOMIC);
	if (!hp) {
		rc = EACCES;
	} else if (va & 7) {
		rc = EINVAL;
	} else {
		/* The host address is 8-aligned too unless base and iova disagree mod 8. */
		uint64_t *p = (uint64_t *)hp;
		if ((uintptr_t)p & 7) {
			rc = EINVAL;
		} else {
			rc = swv_atomic_app(p, cmp_swap, swap_add, cmp, orig);
		}
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

/* ---- ibv_advise_mr ---- */

int swv_mr_advise(struct swv_context *ctx, struct swv_pd *pd, unsigned advice, uint32_t flags,
		  const struct ibv_sge *sg, uint32_t nsge)
{
	struct swv_mr_table *t = &ctx->mrs;
	int rc = 0;

	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return EOPNOTSUPP; /* rxe: only the prefetch advices exist */
	if ((flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH) || !nsge || !sg)
		return EINVAL;
	bool write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
	pthread_rwlock_rdlock(&t->lock);
	/* Every SGE names an ODP MR of this PD and lies in it, flush or not. */
	for (uint32_t i = 0; i < nsge && !rc; i++) {
		struct swv_mr *mr = swv_mr_lookup(t, sg[i].lkey, false);
		if (!mr || swv_pd_prot(mr->pd) != swv_pd_prot(pd) ||
		    !(mr->access & IBV_ACCESS_ON_DEMAND))
			rc = EINVAL;
		else if (!in_bounds(mr, sg[i].addr, sg[i].length))
			rc = EFAULT;
		else if (write && !(mr->access & IBV_ACCESS_LOCAL_WRITE))
			rc = EINVAL;
	}
	/* Prefetching is faulting the pages in now (what a registration without ODP
	 * does). NO_FAULT only maps what is present already: nothing to do here. With
	 * FLUSH the answer waits for it and reports a range that cannot be faulted in;
	 * without, it is best effort and its failure is the later access's. */
	for (uint32_t i = 0; i < nsge && !rc && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT;
	     i++) {
		if (!sg[i].length)
			continue;
		struct swv_mr *mr = swv_mr_lookup(t, sg[i].lkey, false);
		int r = swv_mem_check(host_addr(mr, sg[i].addr), sg[i].length, write);
		if (r && (flags & IBV_ADVISE_MR_FLAG_FLUSH))
			rc = r;
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

/* ---- memory windows ---- */

#define MW_ACCESS_OK                                                                               \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |               \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED)

/* The live window whose handle this is (lock held), or NULL. The handle is a key of
 * its own that never changes (the rkey does at each bind), entered as a local key
 * with no MR, so it never works as an lkey. */
static struct swv_mw *mw_by_handle(const struct swv_mr_table *t, uint32_t handle)
{
	if (handle == 0 || !t->ent)
		return NULL;
	const struct swv_mr_key *e = key_slot(t, handle);
	return e->key == handle && !e->remote ? e->mw : NULL;
}

static void mw_unbind(struct swv_mw *mw)
{
	if (mw->mr)
		mw->mr->nmw--;
	mw->mr = NULL;
	mw->addr = mw->length = 0;
	mw->access = 0;
	mw->qpn = 0;
}

struct swv_mw *swv_mw_alloc(struct swv_context *ctx, struct swv_pd *pd, enum ibv_mw_type type)
{
	struct swv_mr_table *t = &ctx->mrs;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_mw *mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	mw->pd = pd;
	mw->ibmw.context = &ctx->vctx.context;
	mw->ibmw.pd = &pd->ibpd;
	mw->ibmw.type = type;
	/* Type 1 is valid from the start (unbound: it grants nothing); type 2 is free
	 * until a bind WR (rxe's states). */
	mw->valid = type == IBV_MW_TYPE_1;

	pthread_rwlock_wrlock(&t->lock);
	uint32_t k = 0, h = 0;
	if (t->nmrs < SWV_DEV_MAX_MR && key_reserve(t) && (h = new_key(t)) != 0) {
		key_put(t, &(struct swv_mr_key){.key = h, .remote = false, .mw = mw});
		k = new_key(t);
		if (!k)
			key_remove(t, h);
	}
	if (!k) {
		pthread_rwlock_unlock(&t->lock);
		free(mw);
		errno = ENOMEM;
		return NULL;
	}
	key_put(t, &(struct swv_mr_key){.key = k, .remote = true, .mw = mw});
	t->nmrs++;
	t->nmws++;
	mw->key = mw->ibmw.rkey = k;
	mw->ibmw.handle = h;
	atomic_fetch_add(&pd->users, 1);
	pthread_rwlock_unlock(&t->lock);
	return mw;
}

void swv_mw_dealloc(struct swv_context *ctx, struct swv_mw *mw)
{
	struct swv_mr_table *t = &ctx->mrs;

	pthread_rwlock_wrlock(&t->lock);
	if (mw_by_handle(t, mw->ibmw.handle) == mw) {
		key_remove(t, mw->key);
		key_remove(t, mw->ibmw.handle);
		t->nmrs--;
		t->nmws--;
	}
	mw_unbind(mw);
	pthread_rwlock_unlock(&t->lock);
	atomic_fetch_sub(&mw->pd->users, 1);
	free(mw);
}

int swv_mw_bind(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t handle,
		uint32_t rkey, const struct ibv_mw_bind_info *bi, uint32_t mr_lkey)
{
	struct swv_mr_table *t = &ctx->mrs;
	unsigned access = bi->mw_access_flags;
	struct swv_mr *mr = NULL;
	int rc = IBV_WC_MW_BIND_ERR;

	pthread_rwlock_wrlock(&t->lock);
	struct swv_mw *mw = mw_by_handle(t, handle);
	if (!mw || (access & ~MW_ACCESS_OK))
		goto out;
	if (bi->mr) {
		/* bi->mr is only compared: the MR may have been deregistered since the post */
		mr = swv_mr_lookup(t, mr_lkey, false);
		if (!mr || &mr->ibmr != bi->mr)
			goto out; /* not a live MR of this context */
	}
	if (mw->ibmw.type == IBV_MW_TYPE_1) {
		/* o10-36.2.2: a type 1 window is never zero-based */
		if (access & IBV_ACCESS_ZERO_BASED)
			goto out;
		if (!mr && bi->length)
			goto out;
	} else {
		/* o10-37.2.30: a bound type 2 window must be invalidated first; C10-72:
		 * the QP's PD; o10-37.2.40: a bind is never an unbind */
		if (mw->valid || swv_pd_prot(pd) != swv_pd_prot(mw->pd) || !mr || !bi->length)
			goto out;
	}
	if (mr) {
		/* C10-73 bind right, C10-74 writable window needs local write, C10-75 the
		 * window inside the MR; same PD; not onto a zero-based MR (rxe) */
		if (swv_pd_prot(mr->pd) != swv_pd_prot(mw->pd) ||
		    !(mr->access & IBV_ACCESS_MW_BIND) || (mr->access & IBV_ACCESS_ZERO_BASED))
			goto out;
		if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
		    !(mr->access & IBV_ACCESS_LOCAL_WRITE))
			goto out;
		if (!in_bounds(mr, bi->addr, bi->length))
			goto out;
	}
	/* The key: the window's upper 24 bits, the low 8 the WR chose (ibv_inc_rkey). */
	uint32_t nk = (mw->key & ~0xffu) | (rkey & 0xffu);
	if (nk != mw->key) {
		const struct swv_mr_key *e = key_slot(t, nk);
		if (nk == 0 || e->key == nk)
			goto out; /* another live key has it */
		key_remove(t, mw->key);
		key_put(t, &(struct swv_mr_key){.key = nk, .remote = true, .mw = mw});
		mw->key = nk;
	}
	mw->ibmw.rkey = nk;
	mw_unbind(mw);
	if (mr && bi->length) {
		mw->mr = mr;
		mr->nmw++;
		mw->addr = bi->addr;
		mw->length = bi->length;
		mw->access = access;
	}
	if (mw->ibmw.type == IBV_MW_TYPE_2)
		mw->qpn = qpn;
	mw->valid = true;
	rc = 0;
out:
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

int swv_mw_invalidate(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
		      bool remote)
{
	struct swv_mr_table *t = &ctx->mrs;
	int rc = EINVAL;

	pthread_rwlock_wrlock(&t->lock);
	const struct swv_mr_key *e = rkey_entry(t, rkey);
	struct swv_mw *mw = e ? e->mw : NULL;
	/* o10-37.2.26: type 1 windows are not invalidated; 2B: only its own QP's peer */
	if (mw && mw->ibmw.type == IBV_MW_TYPE_2 && mw->valid &&
	    swv_pd_prot(mw->pd) == swv_pd_prot(pd) && (!remote || mw->qpn == qpn)) {
		mw_unbind(mw);
		mw->valid = false;
		rc = 0;
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

int swv_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		  struct ibv_sge *sg_list, uint32_t num_sge)
{
	return swv_mr_advise(to_swv_ctx(pd->context), to_swv_pd(pd), advice, flags, sg_list,
			     num_sge);
}

void swv_mw_qp_gone(struct swv_context *ctx, uint32_t qpn)
{
	struct swv_mr_table *t = &ctx->mrs;

	pthread_rwlock_wrlock(&t->lock);
	for (uint32_t i = 0; t->nmws && t->ent && i <= t->mask; i++) {
		struct swv_mw *mw = t->ent[i].key ? t->ent[i].mw : NULL;
		if (mw && mw->ibmw.type == IBV_MW_TYPE_2 && mw->valid && mw->qpn == qpn) {
			mw_unbind(mw);
			mw->valid = false;
		}
	}
	pthread_rwlock_unlock(&t->lock);
}

/* ---- IBTA 1.5: ATOMIC_WRITE and FLUSH ---- */

int swv_mr_remote_atomic_write(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn,
			       uint32_t rkey, uint64_t va, uint64_t value)
{
	struct swv_mr_table *t = &ctx->mrs;
	int rc = 0;

	pthread_rwlock_rdlock(&t->lock);
	uint64_t *p = (uint64_t *)remote_ptr(t, pd, qpn, rkey, va, 8, IBV_ACCESS_REMOTE_WRITE);
	if (!p) {
		rc = EACCES;
	} else if ((va & 7) || ((uintptr_t)p & 7)) {
		rc = EINVAL;
	} else {
		/* A compare-and-swap loop through the fault-safe atomic: one 64-bit store
		 * that no other atomic can interleave with. */
		uint64_t cur = 0;
		rc = swv_atomic_app(p, 0, 0, 0, &cur);
		while (!rc) {
			uint64_t seen = 0;
			rc = swv_atomic_app(p, 1, value, cur, &seen);
			if (rc || seen == cur)
				break;
			cur = seen;
		}
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

int swv_mr_remote_flush(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			uint64_t va, uint64_t len, unsigned plt, bool whole_mr)
{
	struct swv_mr_table *t = &ctx->mrs;
	unsigned access = ((plt & IBV_FLUSH_GLOBAL) ? IBV_ACCESS_FLUSH_GLOBAL : 0) |
			  ((plt & IBV_FLUSH_PERSISTENT) ? IBV_ACCESS_FLUSH_PERSISTENT : 0);
	int rc = 0;

	pthread_rwlock_rdlock(&t->lock);
	const struct swv_mr_key *e = rkey_entry(t, rkey);
	struct swv_mr *mr = e && !e->mw ? e->mr : NULL;
	if (!mr || swv_pd_prot(mr->pd) != swv_pd_prot(pd) || !access ||
	    (mr->access & access) != access) {
		rc = EACCES;
	} else {
		if (whole_mr) {
			va = mr->iova;
			len = mr->length;
		}
		if (!in_bounds(mr, va, len)) {
			rc = EACCES;
		} else {
			atomic_thread_fence(memory_order_seq_cst);
			if ((plt & IBV_FLUSH_PERSISTENT) && len) {
				long pg = sysconf(_SC_PAGESIZE);
				uintptr_t a = (uintptr_t)host_addr(mr, va);
				uintptr_t start = a & ~(uintptr_t)(pg - 1);
				if (msync((void *)start, a + len - start, MS_SYNC))
					rc = EFAULT;
			}
		}
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}
