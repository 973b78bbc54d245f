/* The protection boundary: registration checks and every access path of core/mr.c,
 * attacked with wrong keys, wrong PDs, off-by-one and wrapping ranges, missing rights,
 * and deregistration racing remote writes. */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "check.h"
#include "core/context.h"
#include "core/mr.h"
#include "core/pd.h"

#define ALL_REMOTE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
		    IBV_ACCESS_REMOTE_ATOMIC)

static struct swv_context *ctx;
static struct ibv_context *ibctx;

static struct swv_pd *spd(struct ibv_pd *pd)
{
	return to_swv_pd(pd);
}

#define CHECK_REG_FAILS(expr, err)                                                                 \
	do {                                                                                       \
		errno = 0;                                                                         \
		CHECK((expr) == NULL);                                                             \
		CHECK_EQ(errno, err);                                                              \
	} while (0)

static void test_registration(struct ibv_pd *pd)
{
	static uint8_t buf[4096];

	CHECK_REG_FAILS(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE), EINVAL);
	CHECK_REG_FAILS(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
	int unknown = 1 << 12;
	CHECK_REG_FAILS(ibv_reg_mr(pd, buf, sizeof(buf), unknown), EINVAL);
	CHECK_REG_FAILS(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_ON_DEMAND), EOPNOTSUPP);
	CHECK_REG_FAILS(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_FLUSH_GLOBAL), EOPNOTSUPP);
	CHECK_REG_FAILS(ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	CHECK_REG_FAILS(ibv_reg_mr(NULL, buf, sizeof(buf), 0), EINVAL);
	CHECK_REG_FAILS(ibv_reg_mr(pd, (void *)(UINTPTR_MAX - 100), 4096, 0), EINVAL);
	CHECK_REG_FAILS(ibv_reg_mr_iova2(pd, buf, sizeof(buf), UINT64_MAX - 100, 0), EINVAL);
	CHECK_REG_FAILS(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 3, 0), EOPNOTSUPP);

	/* Optional-range bits (perftest passes RELAXED_ORDERING) are accepted. */
	struct ibv_mr *mr = ibv_reg_mr_iova2(pd, buf, sizeof(buf), (uintptr_t)buf,
					     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						     IBV_ACCESS_RELAXED_ORDERING);
	CHECK_PTR(mr);
	CHECK(mr->lkey != mr->rkey);
	CHECK(mr->addr == buf && mr->length == sizeof(buf) && mr->pd == pd && mr->context == ibctx);
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	CHECK_OK(ibv_dereg_mr(mr));

	/* Keys: distinct, index in the low bits, random high bits that vary. */
	enum { N = 64 };
	struct ibv_mr *mrs[N];
	uint32_t or_hi = 0, and_hi = 0xffff;
	for (int i = 0; i < N; i++) {
		mrs[i] = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		CHECK_PTR(mrs[i]);
		CHECK((mrs[i]->lkey & 0xffff) != 0);
		CHECK_EQ(mrs[i]->lkey & 0xffff, mrs[i]->rkey & 0xffff);
		or_hi |= mrs[i]->rkey >> 16;
		and_hi &= mrs[i]->rkey >> 16;
		for (int j = 0; j < i; j++)
			CHECK(mrs[i]->lkey != mrs[j]->lkey && mrs[i]->rkey != mrs[j]->rkey);
	}
	CHECK(or_hi != and_hi); /* 64 draws of 16 random bits are not all equal */
	for (int i = 0; i < N; i++)
		CHECK_OK(ibv_dereg_mr(mrs[i]));
	CHECK_EQ(ibv_dereg_mr(NULL), EINVAL);
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

	CHECK_OK(swv_mr_remote_write(ctx, p, rk, va, data, LEN));
	CHECK(memcmp(buf, data, LEN) == 0);
	/* Wrong key: flipped random bits, flipped index, the lkey, 0. */
	CHECK_EQ(swv_mr_remote_write(ctx, p, rk ^ 0x10000, va, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, rk ^ 0x1, va, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, mr->lkey, va, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0, va, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, 0xffff, va, data, 1), EACCES);
	/* Wrong PD. */
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd2), rk, va, data, 1), EACCES);
	/* Bounds: last byte ok, one past fails, one before fails. */
	CHECK_OK(swv_mr_remote_write(ctx, p, rk, va + LEN - 1, data, 1));
	CHECK_EQ(swv_mr_remote_write(ctx, p, rk, va + LEN - 1, data, 2), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, rk, va + LEN, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, rk, va - 1, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, rk, va - 1, data, 2), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, rk, va, data, LEN + 1), EACCES);
	/* Wrap-around: lengths and addresses chosen so va + len overflows. */
	CHECK_EQ(swv_mr_remote_check(ctx, p, rk, va, UINT64_MAX, IBV_ACCESS_REMOTE_WRITE), EACCES);
	CHECK_EQ(swv_mr_remote_check(ctx, p, rk, va + 8, UINT64_MAX - va, IBV_ACCESS_REMOTE_WRITE),
		 EACCES);
	CHECK_EQ(swv_mr_remote_check(ctx, p, rk, UINT64_MAX - 3, 8, IBV_ACCESS_REMOTE_WRITE), EACCES);
	CHECK_EQ(swv_mr_remote_check(ctx, p, rk, va, 0 - (uint64_t)1 - va + 2,
				     IBV_ACCESS_REMOTE_READ),
		 EACCES);
	CHECK_OK(swv_mr_remote_check(ctx, p, rk, va, LEN, IBV_ACCESS_REMOTE_READ));
	/* A check for no right at all proves nothing: refused. */
	CHECK_EQ(swv_mr_remote_check(ctx, p, rk, va, LEN, 0), EACCES);
	/* Zero length succeeds without looking at the key. */
	CHECK_OK(swv_mr_remote_write(ctx, p, 0xdeadbeef, 0, data, 0));
	CHECK_OK(swv_mr_remote_check(ctx, p, 0xdeadbeef, 0, 0, IBV_ACCESS_REMOTE_WRITE));
	/* Nothing outside the region was touched. */
	for (int i = 0; i < GUARD; i++) {
		CHECK_EQ(mem[i], 0xee);
		CHECK_EQ(mem[GUARD + LEN + i], 0xee);
	}

	/* Read. */
	uint8_t out[LEN];
	memset(buf, 7, LEN);
	CHECK_OK(swv_mr_remote_read(ctx, p, rk, va + 10, out, LEN - 10));
	CHECK_EQ(out[0], 7);
	CHECK_EQ(swv_mr_remote_read(ctx, p, rk, va + 10, out, LEN - 9), EACCES);
	CHECK_EQ(swv_mr_remote_read(ctx, spd(pd2), rk, va, out, 1), EACCES);

	/* Atomics: results, alignment, bounds. */
	uint64_t *w = (uint64_t *)buf, orig = 0;
	w[0] = 5;
	CHECK_OK(swv_mr_remote_atomic(ctx, p, rk, va, 0, 3, 0, &orig));
	CHECK_EQ(orig, 5);
	CHECK_EQ(w[0], 8);
	CHECK_OK(swv_mr_remote_atomic(ctx, p, rk, va, 1, 100, 8, &orig)); /* swap hits */
	CHECK_EQ(orig, 8);
	CHECK_EQ(w[0], 100);
	CHECK_OK(swv_mr_remote_atomic(ctx, p, rk, va, 1, 7, 8, &orig)); /* swap misses */
	CHECK_EQ(orig, 100);
	CHECK_EQ(w[0], 100);
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, rk, va + 4, 0, 1, 0, &orig), EINVAL);
	CHECK_OK(swv_mr_remote_atomic(ctx, p, rk, va + LEN - 8, 0, 1, 0, &orig));
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, rk, va + LEN, 0, 1, 0, &orig), EACCES);
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, rk ^ 0x20000, va, 0, 1, 0, &orig), EACCES);
	CHECK_OK(ibv_dereg_mr(mr));

	/* Missing rights, one at a time. */
	struct ibv_mr *ro = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_REMOTE_READ);
	CHECK_PTR(ro);
	CHECK_EQ(swv_mr_remote_write(ctx, p, ro->rkey, va, data, 1), EACCES);
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, ro->rkey, va, 0, 1, 0, &orig), EACCES);
	CHECK_OK(swv_mr_remote_read(ctx, p, ro->rkey, va, out, 1));
	struct ibv_mr *wo = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK_PTR(wo);
	CHECK_EQ(swv_mr_remote_read(ctx, p, wo->rkey, va, out, 1), EACCES);
	CHECK_EQ(swv_mr_remote_atomic(ctx, p, wo->rkey, va, 0, 1, 0, &orig), EACCES);
	struct ibv_mr *lo = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(lo);
	CHECK_EQ(swv_mr_remote_read(ctx, p, lo->rkey, va, out, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, p, lo->rkey, va, data, 1), EACCES);
	uint32_t stale = ro->rkey;
	CHECK_OK(ibv_dereg_mr(ro));
	CHECK_OK(ibv_dereg_mr(wo));
	CHECK_OK(ibv_dereg_mr(lo));
	/* A deregistered key is dead. */
	CHECK_EQ(swv_mr_remote_read(ctx, p, stale, va, out, 1), EACCES);
}

static void test_iova(struct ibv_pd *pd)
{
	static uint8_t buf[128];
	const uint64_t iova = 0x100000000ull;
	struct ibv_mr *mr = ibv_reg_mr_iova2(pd, buf, sizeof(buf), iova, ALL_REMOTE);
	CHECK_PTR(mr);
	uint8_t v = 0x99;
	CHECK_OK(swv_mr_remote_write(ctx, spd(pd), mr->rkey, iova + 5, &v, 1));
	CHECK_EQ(buf[5], 0x99);
	/* The host address is not in the IOVA space of this MR. */
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), mr->rkey, (uintptr_t)buf, &v, 1), EACCES);
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), mr->rkey, iova + sizeof(buf), &v, 1), EACCES);
	/* Local SGEs address the same IOVA space. */
	struct ibv_sge sge = {.addr = iova + 5, .length = 1, .lkey = mr->lkey};
	uint8_t out = 0;
	CHECK_OK(swv_mr_gather(ctx, spd(pd), &sge, 1, 0, &out, 1));
	CHECK_EQ(out, 0x99);
	CHECK_OK(ibv_dereg_mr(mr));

	struct ibv_mr *z = (ibv_reg_mr_iova)(pd, buf, sizeof(buf), 0, ALL_REMOTE);
	CHECK_PTR(z);
	CHECK_OK(swv_mr_remote_write(ctx, spd(pd), z->rkey, 0, &v, 1));
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
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), rk, (uintptr_t)buf, &v, 1), EACCES);
	CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS,
			      NULL, buf2, sizeof(buf2), ALL_REMOTE));
	CHECK(mr->addr == buf2 && mr->length == sizeof(buf2));
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), rk, (uintptr_t)buf, &v, 1), EACCES);
	CHECK_OK(swv_mr_remote_write(ctx, spd(pd), rk, (uintptr_t)buf2 + 127, &v, 1));
	CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0));
	CHECK(mr->pd == pd2);
	CHECK_EQ(swv_mr_remote_write(ctx, spd(pd), rk, (uintptr_t)buf2, &v, 1), EACCES);
	CHECK_OK(swv_mr_remote_write(ctx, spd(pd2), rk, (uintptr_t)buf2, &v, 1));
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
		int rc = swv_mr_remote_write(ctx, race_pd, atomic_load(&race_rkey),
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

	test_registration(pd);
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
