/* The protection boundary: registration checks and every access path of core/mr.c,
 * attacked with wrong keys, wrong PDs, off-by-one and wrapping ranges, missing rights,
 * deregistration racing remote writes, and memory that is unmapped or write-protected
 * (at registration: EFAULT; after it: error returns, never a signal). Keys: 32
 * unpredictable bits, found by the whole key only. */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "mapping.h"
#include "core/context.h"
#include "core/memsafe.h"
#include "core/mr.h"
#include "core/pd.h"
#include "util/compiler.h"

#define ALL_REMOTE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
		    IBV_ACCESS_REMOTE_ATOMIC)

static struct swv_context *ctx;
static struct ibv_context *ibctx;
static uint8_t test_buf_big[1 << 20];
static uint32_t race_fault_rkey;
static uint64_t race_fault_va;

static struct swv_pd *spd(struct ibv_pd *pd)
{
	return to_swv_pd(pd);
}

/* Keys carry 32 unpredictable bits: no index a key reveals, nothing shared between an
 * MR's lkey and rkey, nothing sequential between consecutive registrations. */
static void test_keys(struct ibv_pd *pd)
{
	static uint8_t buf[64];
	enum { N = 512 };
	struct ibv_mr **mrs = calloc(N, sizeof(*mrs));
	uint32_t or_l = 0, and_l = ~0u, or_r = 0, and_r = ~0u;
	int same_low = 0, same_high = 0, seq_low = 0, seq_high = 0;

	CHECK_PTR(mrs);
	for (int i = 0; i < N; i++) {
		mrs[i] = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		CHECK_PTR(mrs[i]);
		uint32_t l = mrs[i]->lkey, r = mrs[i]->rkey;
		CHECK(l != 0 && r != 0 && l != r);
		or_l |= l, and_l &= l, or_r |= r, and_r &= r;
		same_low += (l & 0xffff) == (r & 0xffff);
		same_high += (l >> 16) == (r >> 16);
		if (i) {
			uint32_t pl = mrs[i - 1]->lkey;
			seq_low += ((l - pl) & 0xffff) == 1;
			seq_high += (((l >> 16) - (pl >> 16)) & 0xffff) == 1;
		}
	}
	/* Every one of the 32 bits takes both values (2^-511 per bit by chance). */
	CHECK_EQ(or_l, 0xffffffffu);
	CHECK_EQ(and_l, 0);
	CHECK_EQ(or_r, 0xffffffffu);
	CHECK_EQ(and_r, 0);
	/* Halves of lkey and rkey agree, or follow on, about N / 65536 times by chance. */
	CHECK(same_low < 4 && same_high < 4);
	CHECK(seq_low < 4 && seq_high < 4);
	for (int i = 0; i < N; i++)
		for (int j = 0; j < i; j++) {
			CHECK(mrs[i]->lkey != mrs[j]->lkey && mrs[i]->rkey != mrs[j]->rkey);
			CHECK(mrs[i]->lkey != mrs[j]->rkey && mrs[i]->rkey != mrs[j]->lkey);
		}

	/* Lookups: by its own key only, and each key as what it is. */
	struct swv_mr_table *t = &ctx->mrs;
	pthread_rwlock_rdlock(&t->lock);
	for (int i = 0; i < N; i++) {
		struct swv_mr *m = swv_container_of(mrs[i], struct swv_mr, ibmr);
		CHECK(swv_mr_lookup(t, mrs[i]->lkey, false) == m);
		CHECK(swv_mr_lookup(t, mrs[i]->rkey, true) == m);
		CHECK(swv_mr_lookup(t, mrs[i]->lkey, true) == NULL);
		CHECK(swv_mr_lookup(t, mrs[i]->rkey, false) == NULL);
		for (int b = 0; b < 32; b++) {
			/* a one-bit change finds no MR, or at most another MR's key */
			struct swv_mr *o = swv_mr_lookup(t, mrs[i]->rkey ^ (1u << b), true);
			CHECK(o != m);
		}
	}
	CHECK(swv_mr_lookup(t, 0, false) == NULL && swv_mr_lookup(t, 0, true) == NULL);
	pthread_rwlock_unlock(&t->lock);

	/* Deregistered keys are gone, the others stay (the table closes its gaps). */
	uint32_t *dead = calloc(N, sizeof(*dead));
	CHECK_PTR(dead);
	for (int i = 0; i < N; i += 2) {
		dead[i] = mrs[i]->rkey;
		dead[i + 1] = mrs[i]->lkey;
		CHECK_OK(ibv_dereg_mr(mrs[i]));
	}
	pthread_rwlock_rdlock(&t->lock);
	for (int i = 0; i < N; i += 2) {
		CHECK(swv_mr_lookup(t, dead[i], true) == NULL);
		CHECK(swv_mr_lookup(t, dead[i + 1], false) == NULL);
		struct swv_mr *m = swv_container_of(mrs[i + 1], struct swv_mr, ibmr);
		CHECK(swv_mr_lookup(t, mrs[i + 1]->lkey, false) == m);
		CHECK(swv_mr_lookup(t, mrs[i + 1]->rkey, true) == m);
	}
	pthread_rwlock_unlock(&t->lock);
	uint8_t out;
	for (int i = 0; i < N; i += 2)
		CHECK_EQ(swv_mr_remote_read(ctx, spd(pd), 0, dead[i], (uintptr_t)buf, &out, 1),
			 EACCES);
	for (int i = 1; i < N; i += 2)
		CHECK_OK(ibv_dereg_mr(mrs[i]));
	free(dead);
	free(mrs);
}

static void test_registration(struct ibv_pd *pd)
{
	static uint8_t buf[4096];

	CHECK_NULL_ERRNO(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
	int unknown = 1 << 12;
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, buf, sizeof(buf), unknown), EINVAL);
	/* ODP is accepted (tests/unit/test_odp.c has its rules) */
	struct ibv_mr *odp = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_ON_DEMAND);
	CHECK_PTR(odp);
	CHECK_OK(ibv_dereg_mr(odp));
	/* the FLUSH rights are registrable (remote FLUSH, IBTA 1.5) */
	struct ibv_mr *fm =
	    ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT);
	CHECK_PTR(fm);
	CHECK_OK(ibv_dereg_mr(fm));
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr(NULL, buf, sizeof(buf), 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, (void *)(UINTPTR_MAX - 100), 4096, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr_iova2(pd, buf, sizeof(buf), UINT64_MAX - 100, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 3, 0), EOPNOTSUPP);

	/* Optional-range bits (perftest passes RELAXED_ORDERING) are accepted. */
	struct ibv_mr *mr = ibv_reg_mr_iova2(pd, buf, sizeof(buf), (uintptr_t)buf,
					     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						     IBV_ACCESS_RELAXED_ORDERING);
	CHECK_PTR(mr);
	CHECK(mr->lkey != mr->rkey);
	CHECK(mr->addr == buf && mr->length == sizeof(buf) && mr->pd == pd && mr->context == ibctx);
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	CHECK_OK(ibv_dereg_mr(mr));

	CHECK_EQ(ibv_dereg_mr(NULL), EINVAL);
	test_keys(pd);
}

static void test_remote(struct ibv_pd *pd, struct ibv_pd *pd2)
{
	enum { LEN = 256, GUARD = 64 };
	static uint8_t mem[GUARD + LEN + GUARD];
	uint8_t *buf = mem + GUARD;
	uint8_t data[LEN + 16];
	memset(mem, 0xee, sizeof(mem));
	memset(data, 0x42, sizeof(data));

	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ALL_REMOTE);
	CHECK_PTR(mr);
	struct swv_pd *p = spd(pd);
	uint64_t va = (uintptr_t)buf;
	uint32_t rk = mr->rkey;

	CHECK_OK(swv_mr_remote_write(ctx, p, 0, rk, va, data, LEN));
	CHECK(memcmp(buf, data, LEN) == 0);
	/* Wrong key: flipped random bits, flipped index, the lkey, 0. */
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, rk ^ 0x10000, va, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, rk ^ 0x1, va, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, mr->lkey, va, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, 0, va, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, 0xffff, va, data, 1), EACCES);
	/* Wrong PD. */
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd2), 0, rk, va, data, 1), EACCES);
	/* Bounds: last byte ok, one past fails, one before fails. */
	CHECK_OK(swv_mr_remote_write(ctx, p, 0, rk, va + LEN - 1, data, 1));
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, rk, va + LEN - 1, data, 2), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, rk, va + LEN, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, rk, va - 1, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, rk, va - 1, data, 2), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, rk, va, data, LEN + 1), EACCES);
	/* Wrap-around: lengths and addresses chosen so va + len overflows. */
	CHECK_EQ(swv_mr_remote_check(ctx, p, 0, rk, va, UINT64_MAX, IBV_ACCESS_REMOTE_WRITE),
		 EACCES);
	CHECK_EQ(
	    swv_mr_remote_check(ctx, p, 0, rk, va + 8, UINT64_MAX - va, IBV_ACCESS_REMOTE_WRITE),
	    EACCES);
	CHECK_EQ(swv_mr_remote_check(ctx, p, 0, rk, UINT64_MAX - 3, 8, IBV_ACCESS_REMOTE_WRITE),
		 EACCES);
	CHECK_EQ(swv_mr_remote_check(ctx, p, 0, rk, va, 0 - (uint64_t)1 - va + 2,
				     IBV_ACCESS_REMOTE_READ),
		 EACCES);
	CHECK_OK(swv_mr_remote_check(ctx, p, 0, rk, va, LEN, IBV_ACCESS_REMOTE_READ));
	/* A check for no right at all proves nothing: refused. */
	CHECK_EQ(swv_mr_remote_check(ctx, p, 0, rk, va, LEN, 0), EACCES);
	/* Zero length succeeds without looking at the key. */
	CHECK_OK(swv_mr_remote_write(ctx, p, 0, 0xdeadbeef, 0, data, 0));
	CHECK_OK(swv_mr_remote_check(ctx, p, 0, 0xdeadbeef, 0, 0, IBV_ACCESS_REMOTE_WRITE));
	/* Nothing outside the region was touched. */
	for (int i = 0; i < GUARD; i++) {
		CHECK_EQ(mem[i], 0xee);
		CHECK_EQ(mem[GUARD + LEN + i], 0xee);
	}

	/* Read. */
	uint8_t out[LEN];
	memset(buf, 7, LEN);
	CHECK_OK(swv_mr_remote_read(ctx, p, 0, rk, va + 10, out, LEN - 10));
	CHECK_EQ(out[0], 7);
	CHECK_EQ(swv_mr_remote_read(ctx, p, 0, rk, va + 10, out, LEN - 9), EACCES);
	CHECK_EQ(swv_mr_remote_read(ctx, spd(pd2), 0, rk, va, out, 1), EACCES);

	/* Atomics: results, alignment, bounds. */
	uint64_t *w = (uint64_t *)buf, orig = 0;
	w[0] = 5;
	CHECK_OK(swv_mr_remote_atomic(ctx, p, 0, rk, va, 0, 3, 0, &orig));
	CHECK_EQ(orig, 5);
	CHECK_EQ(w[0], 8);
	CHECK_OK(swv_mr_remote_atomic(ctx, p, 0, rk, va, 1, 100, 8, &orig)); /* swap hits */
	CHECK_EQ(orig, 8);
	CHECK_EQ(w[0], 100);
	CHECK_OK(swv_mr_remote_atomic(ctx, p, 0, rk, va, 1, 7, 8, &orig)); /* swap misses */
	CHECK_EQ(orig, 100);
	CHECK_EQ(w[0], 100);
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, 0, rk, va + 4, 0, 1, 0, &orig), EINVAL);
	CHECK_OK(swv_mr_remote_atomic(ctx, p, 0, rk, va + LEN - 8, 0, 1, 0, &orig));
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, 0, rk, va + LEN, 0, 1, 0, &orig), EACCES);
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, 0, rk ^ 0x20000, va, 0, 1, 0, &orig), EACCES);
	CHECK_OK(ibv_dereg_mr(mr));

	/* Missing rights, one at a time. */
	struct ibv_mr *ro = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_REMOTE_READ);
	CHECK_PTR(ro);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, ro->rkey, va, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, 0, ro->rkey, va, 0, 1, 0, &orig), EACCES);
	CHECK_OK(swv_mr_remote_read(ctx, p, 0, ro->rkey, va, out, 1));
	struct ibv_mr *wo = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK_PTR(wo);
	CHECK_EQ(swv_mr_remote_read(ctx, p, 0, wo->rkey, va, out, 1), EACCES);
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, 0, wo->rkey, va, 0, 1, 0, &orig), EACCES);
	struct ibv_mr *lo = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(lo);
	CHECK_EQ(swv_mr_remote_read(ctx, p, 0, lo->rkey, va, out, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, lo->rkey, va, data, 1), EACCES);
	uint32_t stale = ro->rkey;
	CHECK_OK(ibv_dereg_mr(ro));
	CHECK_OK(ibv_dereg_mr(wo));
	CHECK_OK(ibv_dereg_mr(lo));
	/* A deregistered key is dead. */
	CHECK_EQ(swv_mr_remote_read(ctx, p, 0, stale, va, out, 1), EACCES);
}

/* ---- memory the MR cannot use ---- */

static size_t pg;

/* n fresh pages, readable and writable, whose holes stay holes (mapping.h). */
static uint8_t *map_pages(size_t n)
{
	return swvt_map_isolated(n * pg);
}

/* Registration of NULL, unmapped, partly unmapped, PROT_NONE and read-only memory:
 * EFAULT where a device's pinning fails (rxe: get_user_pages), through every
 * registration call; the same answers from the /proc/self/maps fallback. */
static void test_reg_efault(struct ibv_pd *pd)
{
	const int LW = IBV_ACCESS_LOCAL_WRITE;
	uint8_t *m = map_pages(6);
	/* pages: 0 rw | 1 hole | 2 rw | 3 ro | 4 none | 5 rw */
	CHECK_OK(munmap(m + pg, pg));
	CHECK_OK(mprotect(m + 3 * pg, pg, PROT_READ));
	CHECK_OK(mprotect(m + 4 * pg, pg, PROT_NONE));

	CHECK_NULL_ERRNO(ibv_reg_mr(pd, NULL, 4096, 0), EFAULT);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, NULL, 4096, LW), EFAULT);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, (void *)16, 100, 0), EFAULT);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m + pg, pg, 0), EFAULT);	  /* unmapped */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m + pg + 100, 10, 0), EFAULT);	  /* inside the hole */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m + pg - 8, 16, 0), EFAULT);	  /* runs into it */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m, 3 * pg, LW), EFAULT);	  /* spans it */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m + 2 * pg, 2 * pg, LW), EFAULT); /* rw then ro */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m + 3 * pg, 64, LW), EFAULT);	  /* read-only */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m + 3 * pg, 64, LW | IBV_ACCESS_REMOTE_WRITE), EFAULT);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m + 3 * pg, 64, LW | IBV_ACCESS_REMOTE_ATOMIC), EFAULT);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m + 4 * pg, 64, 0), EFAULT);	/* PROT_NONE */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m + 4 * pg - 1, 2, 0), EFAULT); /* its first byte */
	CHECK_NULL_ERRNO(ibv_reg_mr_iova2(pd, m + pg, 64, 0x1000, 0), EFAULT);
	CHECK_NULL_ERRNO((ibv_reg_mr_iova)(pd, m + 3 * pg, 64, 0, LW), EFAULT);
	struct ibv_mr_init_attr ia = {
	    .comp_mask = IBV_REG_MR_MASK_ADDR, .addr = m + pg, .length = 64, .access = 0};
	CHECK_NULL_ERRNO(ibv_reg_mr_ex(pd, &ia), EFAULT);
	/* Argument errors are still EINVAL first. */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, NULL, 0, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, m + pg, pg, IBV_ACCESS_REMOTE_WRITE), EINVAL);

	/* What can be used is accepted: read-only memory without write rights, and
	 * exactly the pages around the hole. */
	struct ibv_mr *ok[4];
	CHECK_PTR(ok[0] = ibv_reg_mr(pd, m + 3 * pg, pg, IBV_ACCESS_REMOTE_READ));
	CHECK_PTR(ok[1] = ibv_reg_mr(pd, m, pg, LW | IBV_ACCESS_REMOTE_WRITE));
	CHECK_PTR(ok[2] = ibv_reg_mr(pd, m + 2 * pg, pg, LW));
	CHECK_PTR(ok[3] = ibv_reg_mr(pd, m + 5 * pg, pg, LW | IBV_ACCESS_REMOTE_ATOMIC));

	/* rereg: a new range, or new write rights over the old one, is checked too; a
	 * refused rereg leaves the MR as it was. */
	errno = 0;
	CHECK_EQ(ibv_rereg_mr(ok[2], IBV_REREG_MR_CHANGE_TRANSLATION, NULL, m + pg, pg, 0),
		 IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EFAULT);
	errno = 0;
	CHECK_EQ(ibv_rereg_mr(ok[2], IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS,
			      NULL, m + 3 * pg, pg, LW),
		 IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EFAULT);
	CHECK(ok[2]->addr == m + 2 * pg && ok[2]->length == pg);
	errno = 0;
	CHECK_EQ(ibv_rereg_mr(ok[0], IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			      LW | IBV_ACCESS_REMOTE_WRITE),
		 IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EFAULT);
	uint8_t v = 1;
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), 0, ok[0]->rkey, (uintptr_t)m + 3 * pg, &v, 1),
		 EACCES); /* still read-only */
	errno = 0;	  /* a read-only range under the MR's LOCAL_WRITE */
	CHECK_EQ(ibv_rereg_mr(ok[2], IBV_REREG_MR_CHANGE_TRANSLATION, NULL, m + 3 * pg, pg, 0),
		 IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EFAULT);
	CHECK_OK(ibv_rereg_mr(ok[0], IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS,
			      NULL, m + 5 * pg, pg, LW | IBV_ACCESS_REMOTE_WRITE));
	CHECK_OK(swv_mr_remote_write(ctx, spd(pd), 0, ok[0]->rkey, (uintptr_t)m + 5 * pg, &v, 1));
	CHECK_EQ(m[5 * pg], 1);
	for (int i = 0; i < 4; i++)
		CHECK_OK(ibv_dereg_mr(ok[i]));

	/* The fallback for kernels without MADV_POPULATE_*. */
	CHECK_OK(swv_mem_check_maps(m, pg, true));
	CHECK_OK(swv_mem_check_maps(m + 3 * pg, pg, false));
	CHECK_EQ(swv_mem_check_maps(m + 5 * pg - 1, 2, false), EFAULT); /* PROT_NONE, rw */
	CHECK_EQ(swv_mem_check_maps(m + 3 * pg, pg, true), EFAULT);
	CHECK_EQ(swv_mem_check_maps(m + 4 * pg, 1, false), EFAULT);
	CHECK_EQ(swv_mem_check_maps(m + pg, 1, false), EFAULT);
	CHECK_EQ(swv_mem_check_maps(m, 3 * pg, false), EFAULT);
	CHECK_EQ(swv_mem_check_maps(NULL, 4096, false), EFAULT);
	CHECK_OK(swv_mem_check_maps(m + 2 * pg, pg, true));
	CHECK_OK(swv_mem_check_maps(test_buf_big, sizeof(test_buf_big), true));
	CHECK_EQ(swv_mem_check(m + 3 * pg, pg, true), EFAULT);
	CHECK_OK(swv_mem_check(m + 3 * pg, pg, false));
	CHECK_OK(munmap(m, pg));
	CHECK_OK(munmap(m + 2 * pg, 4 * pg));
}

/* Memory that became unusable after registration: every access path fails with an
 * error instead of a signal, touches nothing outside, and the process lives on. */
static void test_fault_access(struct ibv_pd *pd, bool munmapped)
{
	const int ALL = ALL_REMOTE;
	uint8_t *m = map_pages(3);
	memset(m, 0x11, 3 * pg);
	struct ibv_mr *mr = ibv_reg_mr(pd, m, 3 * pg, ALL);
	CHECK_PTR(mr);
	struct swv_pd *p = spd(pd);
	uint64_t va = (uintptr_t)m;
	uint8_t src[3 * 4096 + 64], out[3 * 4096 + 64];
	memset(src, 0x42, sizeof(src));
	CHECK(3 * pg <= sizeof(src) - 64);

	/* page 1 goes away (or read-only); pages 0 and 2 stay usable */
	if (munmapped)
		CHECK_OK(munmap(m + pg, pg));
	else
		CHECK_OK(mprotect(m + pg, pg, PROT_READ));

	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, mr->rkey, va + pg, src, 16), EFAULT);
	/* a copy that starts in a good page and runs into the bad one */
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, mr->rkey, va + pg - 8, src, 16), EFAULT);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, mr->rkey, va, src, 3 * pg), EFAULT);
	uint64_t orig = 7;
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, 0, mr->rkey, va + pg, 0, 1, 0, &orig), EFAULT);
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, 0, mr->rkey, va + pg + 8, 1, 1, 0x1111111111111111ull,
				      &orig),
		 EFAULT);
	CHECK_EQ(orig, 7); /* nothing reported */
	struct ibv_sge bad = {va + pg + 100, 64, mr->lkey};
	CHECK_EQ(swv_mr_scatter(ctx, p, &bad, 1, 0, src, 64), IBV_WC_LOC_PROT_ERR);
	if (munmapped) {
		CHECK_EQ(swv_mr_remote_read(ctx, p, 0, mr->rkey, va + pg, out, 16), EFAULT);
		CHECK_EQ(swv_mr_remote_read(ctx, p, 0, mr->rkey, va, out, 3 * pg), EFAULT);
		CHECK_EQ(swv_mr_gather(ctx, p, &bad, 1, 0, out, 64), IBV_WC_LOC_PROT_ERR);
	} else {
		/* read-only memory still reads */
		CHECK_OK(swv_mr_remote_read(ctx, p, 0, mr->rkey, va + pg, out, 16));
		CHECK_EQ(out[0], 0x11);
		CHECK_OK(swv_mr_gather(ctx, p, &bad, 1, 0, out, 64));
		for (size_t i = 0; i < pg; i++)
			CHECK_EQ(m[pg + i], 0x11);
	}
	/* the good pages work, before and after the faults, again and again: the fault
	 * path restores the signal mask (a fault with SIGSEGV still blocked would kill) */
	for (int round = 0; round < 3; round++) {
		CHECK_OK(swv_mr_remote_write(ctx, p, 0, mr->rkey, va + 2 * pg, src, 64));
		CHECK_EQ(swv_mr_remote_write(ctx, p, 0, mr->rkey, va + pg, src, 1), EFAULT);
		CHECK_OK(
		    swv_mr_remote_atomic(ctx, p, 0, mr->rkey, va + 2 * pg + 64, 0, 1, 0, &orig));
		sigset_t cur;
		CHECK_OK(pthread_sigmask(SIG_SETMASK, NULL, &cur));
		CHECK(!sigismember(&cur, SIGSEGV) && !sigismember(&cur, SIGBUS));
	}
	CHECK_EQ(m[2 * pg], 0x42);
	struct ibv_sge good = {va + 2 * pg, 8, mr->lkey};
	CHECK_OK(swv_mr_gather(ctx, p, &good, 1, 0, out, 8));
	CHECK_EQ(out[0], 0x42);
	CHECK_OK(ibv_dereg_mr(mr));
	if (!munmapped)
		CHECK_OK(munmap(m + pg, pg));
	CHECK_OK(munmap(m, pg));
	CHECK_OK(munmap(m + 2 * pg, pg));
}

/* Faults in another thread's copies, concurrently with good copies here: the guard
 * is per thread. */
static void *fault_thread(void *arg)
{
	struct swv_pd *p = arg;
	uint8_t v = 5;
	for (int i = 0; i < 2000; i++)
		CHECK_EQ(swv_mr_remote_write(ctx, p, 0, race_fault_rkey, race_fault_va, &v, 1),
			 EFAULT);
	return NULL;
}

static void test_fault_threads(struct ibv_pd *pd)
{
	uint8_t *m = map_pages(2);
	struct ibv_mr *mr = ibv_reg_mr(pd, m, 2 * pg, ALL_REMOTE);
	CHECK_PTR(mr);
	CHECK_OK(mprotect(m, pg, PROT_READ));
	race_fault_rkey = mr->rkey;
	race_fault_va = (uintptr_t)m;
	pthread_t th;
	CHECK_OK(pthread_create(&th, NULL, fault_thread, spd(pd)));
	uint8_t v = 9;
	for (int i = 0; i < 2000; i++)
		CHECK_OK(swv_mr_remote_write(ctx, spd(pd), 0, mr->rkey,
					     (uintptr_t)m + pg + (i & 63), &v, 1));
	CHECK_OK(pthread_join(th, NULL));
	CHECK_EQ(m[0], 0);
	CHECK_OK(ibv_dereg_mr(mr));
	CHECK_OK(munmap(m, 2 * pg));
}

static void test_iova(struct ibv_pd *pd)
{
	static uint8_t buf[128];
	const uint64_t iova = 0x100000000ull;
	struct ibv_mr *mr = ibv_reg_mr_iova2(pd, buf, sizeof(buf), iova, ALL_REMOTE);
	CHECK_PTR(mr);
	uint8_t v = 0x99;
	CHECK_OK(swv_mr_remote_write(ctx, spd(pd), 0, mr->rkey, iova + 5, &v, 1));
	CHECK_EQ(buf[5], 0x99);
	/* The host address is not in the IOVA space of this MR. */
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), 0, mr->rkey, (uintptr_t)buf, &v, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), 0, mr->rkey, iova + sizeof(buf), &v, 1), EACCES);
	/* Local SGEs address the same IOVA space. */
	struct ibv_sge sge = {.addr = iova + 5, .length = 1, .lkey = mr->lkey};
	uint8_t out = 0;
	CHECK_OK(swv_mr_gather(ctx, spd(pd), &sge, 1, 0, &out, 1));
	CHECK_EQ(out, 0x99);
	CHECK_OK(ibv_dereg_mr(mr));

	struct ibv_mr *z = (ibv_reg_mr_iova)(pd, buf, sizeof(buf), 0, ALL_REMOTE);
	CHECK_PTR(z);
	CHECK_OK(swv_mr_remote_write(ctx, spd(pd), 0, z->rkey, 0, &v, 1));
	CHECK_EQ(buf[0], 0x99);
	CHECK_OK(ibv_dereg_mr(z));
}

static void test_local(struct ibv_pd *pd, struct ibv_pd *pd2)
{
	static uint8_t a[64], b[64], ro_buf[64];
	struct swv_pd *p = spd(pd);
	struct ibv_mr *ma = ibv_reg_mr(pd, a, sizeof(a), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mb = ibv_reg_mr(pd, b, sizeof(b), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mro = ibv_reg_mr(pd, ro_buf, sizeof(ro_buf), 0);
	CHECK_PTR(ma);
	CHECK_PTR(mb);
	CHECK_PTR(mro);
	for (int i = 0; i < 64; i++)
		a[i] = (uint8_t)i, b[i] = (uint8_t)(100 + i), ro_buf[i] = 0x33;

	struct ibv_sge sg[3] = {
		{.addr = (uintptr_t)a + 60, .length = 4, .lkey = ma->lkey},
		{.addr = (uintptr_t)b, .length = 0, .lkey = 0xbad}, /* empty: never touched */
		{.addr = (uintptr_t)b, .length = 10, .lkey = mb->lkey},
	};
	uint8_t out[14];
	CHECK_OK(swv_mr_gather(ctx, p, sg, 3, 0, out, 14));
	CHECK_EQ(out[0], 60);
	CHECK_EQ(out[4], 100);
	CHECK_EQ(out[13], 109);
	/* Offset skips into the second non-empty SGE. */
	CHECK_OK(swv_mr_gather(ctx, p, sg, 3, 6, out, 8));
	CHECK_EQ(out[0], 102);
	CHECK_EQ(swv_mr_gather(ctx, p, sg, 3, 0, out, 15), IBV_WC_LOC_LEN_ERR);
	CHECK_EQ(swv_mr_gather(ctx, spd(pd2), sg, 3, 0, out, 4), IBV_WC_LOC_PROT_ERR);
	/* SGE crossing the end of its MR. */
	struct ibv_sge cross = {.addr = (uintptr_t)a + 60, .length = 5, .lkey = ma->lkey};
	CHECK_EQ(swv_mr_gather(ctx, p, &cross, 1, 0, out, 5), IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(swv_mr_check_sges(ctx, p, &cross, 1, 0), IBV_WC_LOC_PROT_ERR);
	/* Wrapping SGE address. */
	struct ibv_sge wrap = {.addr = UINT64_MAX - 1, .length = 4, .lkey = ma->lkey};
	CHECK_EQ(swv_mr_check_sges(ctx, p, &wrap, 1, 0), IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(swv_mr_gather(ctx, p, &wrap, 1, 2, out, 2), IBV_WC_LOC_PROT_ERR);
	/* rkey is not an lkey. */
	struct ibv_sge rk = {.addr = (uintptr_t)a, .length = 4, .lkey = ma->rkey};
	CHECK_EQ(swv_mr_gather(ctx, p, &rk, 1, 0, out, 4), IBV_WC_LOC_PROT_ERR);

	/* Scatter needs LOCAL_WRITE; gather from a read-only MR is fine. */
	struct ibv_sge ro = {.addr = (uintptr_t)ro_buf, .length = 64, .lkey = mro->lkey};
	CHECK_OK(swv_mr_gather(ctx, p, &ro, 1, 0, out, 4));
	CHECK_EQ(out[0], 0x33);
	CHECK_EQ(swv_mr_scatter(ctx, p, &ro, 1, 0, "xxxx", 4), IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(ro_buf[0], 0x33);
	CHECK_EQ(swv_mr_check_sges(ctx, p, &ro, 1, IBV_ACCESS_LOCAL_WRITE), IBV_WC_LOC_PROT_ERR);
	CHECK_OK(swv_mr_check_sges(ctx, p, &ro, 1, 0));
	CHECK_OK(swv_mr_check_sges(ctx, p, sg, 3, IBV_ACCESS_LOCAL_WRITE));
	CHECK_OK(swv_mr_scatter(ctx, p, sg, 3, 2, "ABCDEFG", 7));
	CHECK_EQ(a[62], 'A');
	CHECK_EQ(a[63], 'B');
	CHECK_EQ(b[0], 'C');
	CHECK_EQ(b[4], 'G');
	CHECK_EQ(b[5], 105);
	CHECK_OK(swv_mr_scatter(ctx, p, NULL, 0, 0, NULL, 0));

	CHECK_OK(ibv_dereg_mr(ma));
	CHECK_OK(ibv_dereg_mr(mb));
	CHECK_OK(ibv_dereg_mr(mro));
	CHECK_EQ(swv_mr_gather(ctx, p, sg, 1, 0, out, 1), IBV_WC_LOC_PROT_ERR);
}

static void test_rereg(struct ibv_pd *pd, struct ibv_pd *pd2)
{
	static uint8_t buf[64], buf2[128];
	uint8_t v = 1;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), ALL_REMOTE);
	CHECK_PTR(mr);
	uint32_t rk = mr->rkey;

	/* rdma-core: no flag is the kernel's refusal (ERR_CMD), an unknown flag its own */
	CHECK_EQ(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0), IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(ibv_rereg_mr(mr, 1 << 5, NULL, NULL, 0, 0), IBV_REREG_MR_ERR_INPUT);
	/* remote write without local write: refused by the kernel, ERR_CMD */
	CHECK_EQ(
	    ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE),
	    IBV_REREG_MR_ERR_CMD);
	CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_READ));
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), 0, rk, (uintptr_t)buf, &v, 1), EACCES);
	CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS,
			      NULL, buf2, sizeof(buf2), ALL_REMOTE));
	CHECK(mr->addr == buf2 && mr->length == sizeof(buf2));
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), 0, rk, (uintptr_t)buf, &v, 1), EACCES);
	CHECK_OK(swv_mr_remote_write(ctx, spd(pd), 0, rk, (uintptr_t)buf2 + 127, &v, 1));
	CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0));
	CHECK(mr->pd == pd2);
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), 0, rk, (uintptr_t)buf2, &v, 1), EACCES);
	CHECK_OK(swv_mr_remote_write(ctx, spd(pd2), 0, rk, (uintptr_t)buf2, &v, 1));
	CHECK_EQ(ibv_dealloc_pd(pd2), EBUSY);
	CHECK_OK(ibv_dereg_mr(mr));
}

/* Dereg racing remote writes: once ibv_dereg_mr returns, no write may land. */
static _Atomic uint32_t race_rkey;
static _Atomic bool race_stop;
static _Atomic unsigned long race_writes;
static uint8_t *race_buf;
static struct swv_pd *race_pd;
enum { RACE_LEN = 4096 };

static void *writer(void *arg)
{
	/* Each writer owns a slice: concurrent writes to the same bytes would be the
	 * application's race, not the one under test. */
	enum { SLICE = RACE_LEN / 4 };
	uint8_t src[SLICE];
	uintptr_t off = (uintptr_t)arg * SLICE;
	memset(src, 0xab, sizeof(src));
	unsigned long ok = 0;
	while (!atomic_load(&race_stop)) {
		int rc = swv_mr_remote_write(ctx, race_pd, 0, atomic_load(&race_rkey),
					     (uintptr_t)race_buf + off, src, SLICE);
		CHECK(rc == 0 || rc == EACCES);
		ok += rc == 0;
		if (rc == 0)
			atomic_fetch_add(&race_writes, 1);
	}
	return (void *)ok;
}

static void test_dereg_race(struct ibv_pd *pd)
{
	enum { THREADS = 3, ROUNDS = 300 };
	pthread_t th[THREADS];
	race_buf = malloc(RACE_LEN);
	CHECK_PTR(race_buf);
	race_pd = spd(pd);
	struct ibv_mr *mr = ibv_reg_mr(pd, race_buf, RACE_LEN, ALL_REMOTE);
	CHECK_PTR(mr);
	atomic_store(&race_rkey, mr->rkey);
	for (int i = 0; i < THREADS; i++)
		CHECK_OK(pthread_create(&th[i], NULL, writer, (void *)(uintptr_t)i));
	for (int r = 0; r < ROUNDS; r++) {
		CHECK_OK(ibv_dereg_mr(mr));
		memset(race_buf, 0, RACE_LEN);
		/* Writers keep trying the dead key for a while. */
		for (volatile int spin = 0; spin < 20000; spin++)
			;
		for (int i = 0; i < RACE_LEN; i++)
			CHECK_EQ(race_buf[i], 0);
		unsigned long w0 = atomic_load(&race_writes);
		mr = ibv_reg_mr(pd, race_buf, RACE_LEN, ALL_REMOTE);
		CHECK_PTR(mr);
		atomic_store(&race_rkey, mr->rkey);
		/* Make every round a real race: wait for a write through the new key. */
		while (atomic_load(&race_writes) < w0 + 2)
			sched_yield();
	}
	atomic_store(&race_stop, true);
	unsigned long total = 0;
	for (int i = 0; i < THREADS; i++) {
		void *ok;
		pthread_join(th[i], &ok);
		total += (unsigned long)ok;
	}
	CHECK(total > 0); /* the race really ran */
	CHECK_OK(ibv_dereg_mr(mr));
	free(race_buf);
}

static void test_table_full(struct ibv_pd *pd)
{
	static uint8_t b[8];
	struct ibv_mr **all = calloc(70000, sizeof(*all));
	CHECK_PTR(all);
	int n = 0;
	while (n < 70000 && (all[n] = ibv_reg_mr(pd, b, sizeof(b), 0)))
		n++;
	CHECK_EQ(errno, ENOMEM);
	CHECK_EQ(n, 65535); /* = max_mr */
	struct ibv_device_attr da;
	CHECK_OK(ibv_query_device(ibctx, &da));
	CHECK_EQ(da.max_mr, n);
	for (int i = 0; i < n; i++)
		CHECK_OK(ibv_dereg_mr(all[i]));
	free(all);
}

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK_PTR(l);
	CHECK_PTR(l[0]);
	ibctx = ibv_open_device(l[0]);
	CHECK_PTR(ibctx);
	ctx = to_swv_ctx(ibctx);
	struct ibv_pd *pd = ibv_alloc_pd(ibctx), *pd2 = ibv_alloc_pd(ibctx);
	CHECK_PTR(pd);
	CHECK_PTR(pd2);

	pg = (size_t)sysconf(_SC_PAGESIZE);
	test_registration(pd);
	test_reg_efault(pd);
	test_fault_access(pd, true);
	test_fault_access(pd, false);
	test_fault_threads(pd);
	test_remote(pd, pd2);
	test_iova(pd);
	test_local(pd, pd2);
	test_rereg(pd, pd2);
	test_dereg_race(pd);
	test_table_full(pd);

	CHECK_OK(ibv_dealloc_pd(pd2));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_EQ(ibv_dealloc_pd(NULL), EINVAL);
	CHECK_OK(ibv_close_device(ibctx));
	ibv_free_device_list(l);
	printf("test_mr: OK\n");
	return 0;
}
