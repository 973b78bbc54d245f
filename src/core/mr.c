/*
 * Memory regions: the protection boundary (DESIGN.md section 8).
 *
 * Every access resolves its key under the table's read lock, checks PD, access right
 * and bounds (overflow-safe: no 'va + len' is ever computed before proving it cannot
 * wrap), and copies while still holding the lock, so ibv_dereg_mr (write lock) returns
 * only when no copy into or out of that region is in progress and none can start.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/context.h"
#include "core/device.h"
#include "core/mr.h"
#include "util/tsan.h"
#include "core/pd.h"
#include "util/clock.h"
#include "util/log.h"

#define KEY_INDEX_MASK 0xffffu
#define MR_MAX_SLOTS   (SWV_DEV_MAX_MR + 1) /* index 0 unused */

/* Flush access bits (rdma-core IBV_ACCESS_FLUSH_GLOBAL/PERSISTENT) are not in older
 * headers; swverbs has no FLUSH operation so registering for it is EOPNOTSUPP. */
#define SWV_ACCESS_FLUSH_GLOBAL     (1u << 8)
#define SWV_ACCESS_FLUSH_PERSISTENT (1u << 9)
#define SWV_ACCESS_KNOWN                                                                          \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |               \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |                  \
	 IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB)

int swv_mr_table_init(struct swv_mr_table *t)
{
	pthread_rwlockattr_t a;
	int rc;

	memset(t, 0, sizeof(*t));
	t->next = 1;
	pthread_rwlockattr_init(&a);
	/* Writer preference: a dereg must not wait behind an endless stream of accesses. */
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	rc = pthread_rwlock_init(&t->lock, &a);
	pthread_rwlockattr_destroy(&a);
	return rc;
}

void swv_mr_table_destroy(struct swv_mr_table *t)
{
	/* MRs the application never deregistered die with their context. */
	for (uint32_t i = 0; i < t->nslots; i++) {
		struct swv_mr *mr = t->slot[i];
		if (mr) {
			atomic_fetch_sub(&mr->pd->users, 1);
			free(mr);
		}
	}
	free(t->slot);
	pthread_rwlock_destroy(&t->lock);
	memset(t, 0, sizeof(*t));
}

static uint16_t random16(void)
{
	uint16_t r;
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) == (ssize_t)sizeof(r))
		return r;
	/* Entropy pool not ready (early boot): still unpredictable enough for a peer that
	 * cannot see our clock at ns resolution. */
	uint64_t t = swv_now_ns();
	t ^= t >> 29;
	t *= 0xbf58476d1ce4e5b9ull;
	return (uint16_t)(t ^ (t >> 32));
}

int swv_mr_check_access(unsigned access)
{
	unsigned optional = IBV_ACCESS_OPTIONAL_RANGE;

	if (access & (SWV_ACCESS_FLUSH_GLOBAL | SWV_ACCESS_FLUSH_PERSISTENT))
		return EOPNOTSUPP;
	if (access & IBV_ACCESS_ON_DEMAND)
		return EOPNOTSUPP; /* odp_caps are 0 */
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

/* Find a free index (write lock held), growing the slot array. 0 = table full. */
static uint32_t alloc_index(struct swv_mr_table *t)
{
	if (t->nused + 1 >= MR_MAX_SLOTS)
		return 0;
	if (t->nused + 1 >= t->nslots && t->nslots < MR_MAX_SLOTS) {
		uint32_t n = t->nslots ? t->nslots * 2 : 64;
		if (n > MR_MAX_SLOTS)
			n = MR_MAX_SLOTS;
		struct swv_mr **s = realloc(t->slot, n * sizeof(*s));
		if (!s)
			return 0;
		memset(s + t->nslots, 0, (n - t->nslots) * sizeof(*s));
		if (t->nslots == 0)
			t->next = 1;
		t->slot = s;
		t->nslots = n;
	}
	for (uint32_t k = 0; k < t->nslots; k++) {
		uint32_t i = (t->next + k) % t->nslots;
		if (i != 0 && !t->slot[i]) {
			t->next = i + 1;
			return i;
		}
	}
	return 0;
}

struct swv_mr *swv_mr_register(struct swv_context *ctx, struct swv_pd *pd, void *addr,
			       size_t length, uint64_t iova, unsigned access)
{
	struct swv_mr_table *t = &ctx->mrs;
	int rc = swv_mr_check_access(access);
	if (!rc)
		rc = check_range(addr, length, iova);
	if (rc) {
		errno = rc;
		return NULL;
	}
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
	mr->ibmr.context = &ctx->vctx.context;
	mr->ibmr.pd = &pd->ibpd;
	mr->ibmr.addr = addr;
	mr->ibmr.length = length;

	pthread_rwlock_wrlock(&t->lock);
	uint32_t idx = alloc_index(t);
	if (!idx) {
		pthread_rwlock_unlock(&t->lock);
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	uint16_t lr = random16(), rr;
	do
		rr = random16();
	while (rr == lr); /* lkey and rkey never equal: one cannot stand for the other */
	mr->ibmr.handle = idx;
	mr->ibmr.lkey = (uint32_t)lr << 16 | idx;
	mr->ibmr.rkey = (uint32_t)rr << 16 | idx;
	t->slot[idx] = mr;
	t->nused++;
	atomic_fetch_add(&pd->users, 1);
	pthread_rwlock_unlock(&t->lock);
	return mr;
}

void swv_mr_deregister(struct swv_context *ctx, struct swv_mr *mr)
{
	struct swv_mr_table *t = &ctx->mrs;
	uint32_t idx = mr->ibmr.lkey & KEY_INDEX_MASK;

	/* Waits for every access in progress (they hold the read lock). */
	pthread_rwlock_wrlock(&t->lock);
	if (idx < t->nslots && t->slot[idx] == mr) {
		t->slot[idx] = NULL;
		t->nused--;
	}
	pthread_rwlock_unlock(&t->lock);
	atomic_fetch_sub(&mr->pd->users, 1);
	free(mr);
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

	pthread_rwlock_wrlock(&t->lock);
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
	return 0;
}

/* ---- access checks (read lock held by the caller of these helpers) ---- */

static struct swv_mr *lookup(struct swv_mr_table *t, uint32_t key, bool remote)
{
	uint32_t idx = key & KEY_INDEX_MASK;
	if (idx == 0 || idx >= t->nslots)
		return NULL;
	struct swv_mr *mr = t->slot[idx];
	if (!mr || (remote ? mr->ibmr.rkey : mr->ibmr.lkey) != key)
		return NULL;
	return mr;
}

/* [va, va + len) inside the MR's IOVA range, without overflow. len may be 0. */
static bool in_bounds(const struct swv_mr *mr, uint64_t va, uint64_t len)
{
	return va >= mr->iova && len <= mr->length && va - mr->iova <= mr->length - len;
}

static inline uint8_t *host_addr(const struct swv_mr *mr, uint64_t va)
{
	return mr->base + (va - mr->iova);
}

/* Resolve an lkey range for a copy: NULL unless key, PD, bounds and rights all hold. */
static struct swv_mr *local_mr(struct swv_mr_table *t, struct swv_pd *pd, uint32_t lkey,
			       uint64_t va, uint64_t len, unsigned access)
{
	struct swv_mr *mr = lookup(t, lkey, false);
	if (!mr || mr->pd != pd || (mr->access & access) != access || !in_bounds(mr, va, len))
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
		if (to_sge)
			memcpy(host_addr(mr, va + offset), buf, n);
		else
			memcpy(buf, host_addr(mr, va + offset), n);
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

/* Remote: rkey, PD, bounds and the right for this operation. */
static struct swv_mr *remote_mr(struct swv_mr_table *t, struct swv_pd *pd, uint32_t rkey,
				uint64_t va, uint64_t len, unsigned access)
{
	struct swv_mr *mr = lookup(t, rkey, true);
	if (!mr || mr->pd != pd || !access || (mr->access & access) != access ||
	    !in_bounds(mr, va, len))
		return NULL;
	return mr;
}

int swv_mr_remote_check(struct swv_context *ctx, struct swv_pd *pd, uint32_t rkey, uint64_t va,
			uint64_t len, unsigned access)
{
	struct swv_mr_table *t = &ctx->mrs;
	if (len == 0)
		return 0;
	pthread_rwlock_rdlock(&t->lock);
	struct swv_mr *mr = remote_mr(t, pd, rkey, va, len, access);
	pthread_rwlock_unlock(&t->lock);
	return mr ? 0 : EACCES;
}

int swv_mr_remote_write(struct swv_context *ctx, struct swv_pd *pd, uint32_t rkey, uint64_t va,
			const void *src, size_t len)
{
	struct swv_mr_table *t = &ctx->mrs;
	if (len == 0)
		return 0;
	pthread_rwlock_rdlock(&t->lock);
	struct swv_mr *mr = remote_mr(t, pd, rkey, va, len, IBV_ACCESS_REMOTE_WRITE);
	if (mr) {
		SWV_REMOTE_ACCESS_BEGIN();
		memcpy(host_addr(mr, va), src, len);
		SWV_REMOTE_ACCESS_END();
	}
	pthread_rwlock_unlock(&t->lock);
	return mr ? 0 : EACCES;
}

int swv_mr_remote_read(struct swv_context *ctx, struct swv_pd *pd, uint32_t rkey, uint64_t va,
		       void *dst, size_t len)
{
	struct swv_mr_table *t = &ctx->mrs;
	if (len == 0)
		return 0;
	pthread_rwlock_rdlock(&t->lock);
	struct swv_mr *mr = remote_mr(t, pd, rkey, va, len, IBV_ACCESS_REMOTE_READ);
	if (mr) {
		SWV_REMOTE_ACCESS_BEGIN();
		memcpy(dst, host_addr(mr, va), len);
		SWV_REMOTE_ACCESS_END();
	}
	pthread_rwlock_unlock(&t->lock);
	return mr ? 0 : EACCES;
}

int swv_mr_remote_atomic(struct swv_context *ctx, struct swv_pd *pd, uint32_t rkey, uint64_t va,
			 int cmp_swap, uint64_t swap_add, uint64_t cmp, uint64_t *orig)
{
	struct swv_mr_table *t = &ctx->mrs;
	int rc = 0;

	pthread_rwlock_rdlock(&t->lock);
	struct swv_mr *mr = remote_mr(t, pd, rkey, va, 8, IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr) {
		rc = EACCES;
	} else if (va & 7) {
		rc = EINVAL;
	} else {
		/* The host address is 8-aligned too unless base and iova disagree mod 8. */
		uint64_t *p = (uint64_t *)host_addr(mr, va);
		if ((uintptr_t)p & 7) {
			rc = EINVAL;
		} else {
			SWV_REMOTE_ACCESS_BEGIN();
			if (cmp_swap) {
				uint64_t expected = cmp;
				__atomic_compare_exchange_n(p, &expected, swap_add, false,
							    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
				*orig = expected; /* found value, swapped or not */
			} else {
				*orig = __atomic_fetch_add(p, swap_add, __ATOMIC_SEQ_CST);
			}
			SWV_REMOTE_ACCESS_END();
		}
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}
