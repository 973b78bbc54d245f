/*
 * Completion counters, the object and its API (comp-cntr.md Part 1 and Part 2):
 * capabilities, create/destroy errnos, set/inc/read, wrap at 2^64, concurrent
 * increments, the data-path update, BYTES counters, counters in application memory.
 * The default device (full 64-bit counters, 4096 per context).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "cntr.h"
#include "inproc.h"
#include "core/comp_cntr.h"
#include "net/config.h"

static void test_caps(struct ibv_context *ctx)
{
	struct ibv_comp_cntr_caps caps;
	uint8_t big[sizeof(caps) + 16];

	CHECK_EQ(_ibv_query_comp_cntr_caps(NULL, &caps, sizeof(caps)), EINVAL);
	CHECK_EQ(_ibv_query_comp_cntr_caps(ctx, NULL, sizeof(caps)), EINVAL);

	/* Too small: the bytes given are zeroed, nothing beyond them is touched. */
	memset(big, 0xa5, sizeof(big));
	CHECK_EQ(_ibv_query_comp_cntr_caps(ctx, (struct ibv_comp_cntr_caps *)big, 8), EINVAL);
	for (size_t i = 0; i < sizeof(big); i++)
		CHECK_EQ(big[i], i < 8 ? 0 : 0xa5);

	/* Larger than ours: filled, the tail zeroed. */
	memset(big, 0xa5, sizeof(big));
	CHECK_OK(_ibv_query_comp_cntr_caps(ctx, (struct ibv_comp_cntr_caps *)big, sizeof(big)));
	for (size_t i = sizeof(caps); i < sizeof(big); i++)
		CHECK_EQ(big[i], 0);
	memcpy(&caps, big, sizeof(caps));
	CHECK(caps.max_value == UINT64_MAX);
	CHECK_EQ(caps.max_counters, SWV_DEFAULT_MAX_CNTRS);
	CHECK_EQ(caps.supported_qp_attach_ops, 0x3f);

	/* The inline wrapper passes sizeof. */
	memset(&caps, 0xa5, sizeof(caps));
	CHECK_OK(ibv_query_comp_cntr_caps(ctx, &caps));
	CHECK_EQ(caps.supported_qp_attach_ops, 0x3f);
	CHECK(caps.max_value == UINT64_MAX);

	/* The extension query reports the atomic bits and the features. */
	struct swv_comp_cntr_caps xc;
	CHECK_EQ(swv_query_comp_cntr_caps(NULL, &xc, sizeof(xc)), EINVAL);
	CHECK_EQ(swv_query_comp_cntr_caps(ctx, NULL, sizeof(xc)), EINVAL);
	memset(&xc, 0xa5, sizeof(xc));
	CHECK_EQ(swv_query_comp_cntr_caps(ctx, &xc, sizeof(xc) - 1), EINVAL);
	CHECK_EQ(xc.max_counters, 0); /* zeroed first */
	CHECK_OK(swv_query_comp_cntr_caps(ctx, &xc, sizeof(xc)));
	CHECK_EQ(xc.supported_qp_attach_ops,
		 0x3f | SWV_QP_ATTACH_COMP_CNTR_OP_ATOMIC | SWV_QP_ATTACH_COMP_CNTR_OP_REMOTE_ATOMIC);
	CHECK_EQ(xc.supported_qp_attach_ops, 0x3003f);
	CHECK(xc.max_value == UINT64_MAX);
	CHECK_EQ(xc.max_counters, SWV_DEFAULT_MAX_CNTRS);
	CHECK_EQ(xc.flags, SWV_COMP_CNTR_CAP_TYPE_BYTES | SWV_COMP_CNTR_CAP_WAIT |
			       SWV_COMP_CNTR_CAP_FD | SWV_COMP_CNTR_CAP_APP_MEMORY |
			       SWV_COMP_CNTR_CAP_TRIGGERED | SWV_COMP_CNTR_CAP_WAIT_MANY);
	CHECK_EQ(xc.reserved, 0);
}

static void expect_create_fails(struct ibv_context *ctx, struct ibv_comp_cntr_init_attr *a, int err)
{
	errno = 0;
	CHECK(ibv_create_comp_cntr(ctx, a) == NULL);
	CHECK_EQ(errno, err);
}

static void test_create_errors(struct ibv_context *ctx)
{
	struct ibv_comp_cntr_init_attr a = {.type = IBV_COMP_CNTR_TYPE_WRS};

	expect_create_fails(NULL, &a, EINVAL);
	expect_create_fails(ctx, NULL, EINVAL);
	/* NULL context wins over a bad attribute. */
	a.comp_mask = 1;
	expect_create_fails(NULL, &a, EINVAL);
	expect_create_fails(ctx, &a, EOPNOTSUPP);
	a.comp_mask = 0x80000000u;
	expect_create_fails(ctx, &a, EOPNOTSUPP);
	a.comp_mask = 0;
	a.flags = 1;
	expect_create_fails(ctx, &a, EOPNOTSUPP);
	a.flags = 0;
	a.type = (enum ibv_comp_cntr_type)2;
	expect_create_fails(ctx, &a, EOPNOTSUPP);
	a.type = (enum ibv_comp_cntr_type)-1;
	expect_create_fails(ctx, &a, EOPNOTSUPP);

	CHECK_EQ(ibv_destroy_comp_cntr(NULL), EINVAL);
}

static void test_basic(struct ibv_context *ctx)
{
	struct ibv_comp_cntr *c[8];
	for (int i = 0; i < 8; i++) {
		c[i] = swvt_cntr_create(ctx,
					i & 1 ? IBV_COMP_CNTR_TYPE_BYTES : IBV_COMP_CNTR_TYPE_WRS);
		CHECK(c[i]->context == ctx);
		CHECK_EQ(swvt_cntr_read(c[i]), 0);
		CHECK_EQ(swvt_cntr_read_err(c[i]), 0);
		/* 64-byte aligned object */
		CHECK_EQ((uintptr_t)to_swv_cntr(c[i]) % 64, 0);
		for (int j = 0; j < i; j++)
			CHECK(c[i]->handle != c[j]->handle);
	}

	struct ibv_comp_cntr *a = c[0];
	uint64_t v;
	/* NULL arguments */
	CHECK_EQ(ibv_set_comp_cntr(NULL, 1), EINVAL);
	CHECK_EQ(ibv_set_err_comp_cntr(NULL, 1), EINVAL);
	CHECK_EQ(ibv_inc_comp_cntr(NULL, 1), EINVAL);
	CHECK_EQ(ibv_inc_err_comp_cntr(NULL, 1), EINVAL);
	CHECK_EQ(ibv_read_comp_cntr(NULL, &v), EINVAL);
	CHECK_EQ(ibv_read_err_comp_cntr(NULL, &v), EINVAL);
	CHECK_EQ(ibv_read_comp_cntr(a, NULL), EINVAL);
	CHECK_EQ(ibv_read_err_comp_cntr(a, NULL), EINVAL);

	/* The two values are independent. */
	CHECK_OK(ibv_set_comp_cntr(a, 42));
	CHECK_EQ(swvt_cntr_read(a), 42);
	CHECK_EQ(swvt_cntr_read_err(a), 0);
	CHECK_OK(ibv_set_err_comp_cntr(a, 7));
	CHECK_EQ(swvt_cntr_read(a), 42);
	CHECK_EQ(swvt_cntr_read_err(a), 7);
	CHECK_OK(ibv_inc_comp_cntr(a, 8));
	CHECK_OK(ibv_inc_err_comp_cntr(a, 3));
	CHECK_EQ(swvt_cntr_read(a), 50);
	CHECK_EQ(swvt_cntr_read_err(a), 10);
	CHECK_OK(ibv_inc_comp_cntr(a, 0));
	CHECK_EQ(swvt_cntr_read(a), 50);
	/* Every 64-bit value is in range on the default device. */
	CHECK_OK(ibv_set_comp_cntr(a, UINT64_MAX));
	CHECK(swvt_cntr_read(a) == UINT64_MAX);
	/* Wrap through zero modulo 2^64. */
	CHECK_OK(ibv_inc_comp_cntr(a, 2));
	CHECK_EQ(swvt_cntr_read(a), 1);
	CHECK_OK(ibv_set_err_comp_cntr(a, UINT64_MAX - 1));
	CHECK_OK(ibv_inc_err_comp_cntr(a, 5));
	CHECK_EQ(swvt_cntr_read_err(a), 3);
	CHECK_OK(ibv_inc_comp_cntr(a, UINT64_MAX)); /* == -1 mod 2^64 */
	CHECK_EQ(swvt_cntr_read(a), 0);
	/* Other counters untouched. */
	for (int i = 1; i < 8; i++) {
		CHECK_EQ(swvt_cntr_read(c[i]), 0);
		CHECK_EQ(swvt_cntr_read_err(c[i]), 0);
	}

	for (int i = 0; i < 8; i++)
		CHECK_OK(ibv_destroy_comp_cntr(c[i]));
}

/* The data-path update used by swv_complete. */
static void test_complete(struct ibv_context *ctx)
{
	struct ibv_comp_cntr *w = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_comp_cntr *b = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_BYTES);

	swv_comp_cntr_complete(NULL, true, 5); /* no counter attached: a no-op */
	for (int i = 0; i < 10; i++) {
		swv_comp_cntr_complete(w, true, 4096);
		swv_comp_cntr_complete(b, true, 100 + (uint64_t)i);
	}
	swv_comp_cntr_complete(w, false, 4096);
	swv_comp_cntr_complete(b, false, 4096);
	swv_comp_cntr_complete(b, false, 0);
	CHECK_EQ(swvt_cntr_read(w), 10); /* WRS: one per work request, whatever the size */
	CHECK_EQ(swvt_cntr_read_err(w), 1);
	CHECK_EQ(swvt_cntr_read(b), 1045);  /* BYTES: 100 + ... + 109 */
	CHECK_EQ(swvt_cntr_read_err(b), 2); /* errors count operations, not bytes */
	swv_comp_cntr_complete(b, true, 0);
	CHECK_EQ(swvt_cntr_read(b), 1045);
	CHECK_OK(ibv_destroy_comp_cntr(w));
	CHECK_OK(ibv_destroy_comp_cntr(b));
}

#define NTHREADS 4
#define NINC     200000

struct inc_arg {
	struct ibv_comp_cntr *c;
	int mode; /* 0: ibv_inc_comp_cntr, 1: ibv_inc_err_comp_cntr, 2: data path */
};

static void *inc_thread(void *p)
{
	struct inc_arg *a = p;
	for (int i = 0; i < NINC; i++) {
		switch (a->mode) {
		case 0:
			CHECK_OK(ibv_inc_comp_cntr(a->c, 3));
			break;
		case 1:
			CHECK_OK(ibv_inc_err_comp_cntr(a->c, 1));
			break;
		default:
			swv_comp_cntr_complete(a->c, (i % 5) != 0, 7);
			break;
		}
	}
	return NULL;
}

static void test_concurrent(struct ibv_context *ctx)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	pthread_t th[NTHREADS * 3];
	struct inc_arg args[NTHREADS * 3];

	for (int i = 0; i < NTHREADS * 3; i++) {
		args[i] = (struct inc_arg){.c = c, .mode = i % 3};
		CHECK_OK(pthread_create(&th[i], NULL, inc_thread, &args[i]));
	}
	for (int i = 0; i < NTHREADS * 3; i++)
		CHECK_OK(pthread_join(th[i], NULL));
	/* mode 0: 3 per call; mode 2: 4 successes in 5 */
	CHECK_EQ(swvt_cntr_read(c),
		 (uint64_t)NTHREADS * NINC * 3 + (uint64_t)NTHREADS * NINC / 5 * 4);
	CHECK_EQ(swvt_cntr_read_err(c), (uint64_t)NTHREADS * NINC + (uint64_t)NTHREADS * NINC / 5);
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

static void test_app_memory(struct ibv_context *ctx)
{
	_Alignas(64) uint64_t mem[16];
	struct swv_comp_cntr_init_attr_ext a = {
		.type = IBV_COMP_CNTR_TYPE_WRS, .comp_count_addr = &mem[0], .err_count_addr = &mem[8]};

	errno = 0;
	CHECK(swv_create_comp_cntr_ext(NULL, &a) == NULL);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK(swv_create_comp_cntr_ext(ctx, NULL) == NULL);
	CHECK_EQ(errno, EINVAL);
	a.comp_mask = 1;
	errno = 0;
	CHECK(swv_create_comp_cntr_ext(ctx, &a) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	a.comp_mask = 0;
	a.flags = 4;
	errno = 0;
	CHECK(swv_create_comp_cntr_ext(ctx, &a) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	a.flags = 0;
	a.type = (enum ibv_comp_cntr_type)9;
	errno = 0;
	CHECK(swv_create_comp_cntr_ext(ctx, &a) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	a.type = IBV_COMP_CNTR_TYPE_WRS;
	/* misaligned, and both values at one address */
	a.comp_count_addr = (uint64_t *)((char *)&mem[0] + 4);
	errno = 0;
	CHECK(swv_create_comp_cntr_ext(ctx, &a) == NULL);
	CHECK_EQ(errno, EINVAL);
	a.comp_count_addr = &mem[0];
	a.err_count_addr = (uint64_t *)((char *)&mem[8] + 1);
	errno = 0;
	CHECK(swv_create_comp_cntr_ext(ctx, &a) == NULL);
	CHECK_EQ(errno, EINVAL);
	a.err_count_addr = &mem[0];
	errno = 0;
	CHECK(swv_create_comp_cntr_ext(ctx, &a) == NULL);
	CHECK_EQ(errno, EINVAL);

	/* Valid: starts at 0/0 in application memory, updates land there. */
	memset(mem, 0xff, sizeof(mem));
	a.err_count_addr = &mem[8];
	struct ibv_comp_cntr *c = swv_create_comp_cntr_ext(ctx, &a);
	CHECK_PTR(c);
	CHECK_EQ(mem[0], 0);
	CHECK_EQ(mem[8], 0);
	CHECK(mem[1] == UINT64_MAX && mem[7] == UINT64_MAX); /* neighbours untouched */
	CHECK_OK(ibv_inc_comp_cntr(c, 5));
	swv_comp_cntr_complete(c, true, 0);
	swv_comp_cntr_complete(c, false, 0);
	CHECK_EQ(mem[0], 6);
	CHECK_EQ(mem[8], 1);
	CHECK_EQ(swvt_cntr_read(c), 6);
	CHECK_EQ(swvt_cntr_read_err(c), 1);
	CHECK_OK(ibv_set_comp_cntr(c, 100));
	CHECK_EQ(mem[0], 100);
	CHECK_OK(ibv_destroy_comp_cntr(c));

	/* Only one value in application memory; the other in the object. */
	a.err_count_addr = NULL;
	mem[0] = 77;
	c = swv_create_comp_cntr_ext(ctx, &a);
	CHECK_PTR(c);
	CHECK_EQ(mem[0], 0);
	CHECK_OK(ibv_inc_err_comp_cntr(c, 2));
	CHECK_EQ(swvt_cntr_read_err(c), 2);
	CHECK_EQ(mem[0], 0);
	CHECK_OK(ibv_destroy_comp_cntr(c));

	/* No address at all: an ordinary counter. */
	a.comp_count_addr = NULL;
	a.type = IBV_COMP_CNTR_TYPE_BYTES;
	c = swv_create_comp_cntr_ext(ctx, &a);
	CHECK_PTR(c);
	swv_comp_cntr_complete(c, true, 9);
	CHECK_EQ(swvt_cntr_read(c), 9);
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

/* Counters are per context; closing a context releases its counters (ASan would
 * report a leak otherwise). */
static void test_close_releases(void)
{
	struct ibv_context *ctx = swvt_open_first_device();
	struct ibv_context *ctx2 = swvt_open_first_device();
	struct ibv_comp_cntr *c1 = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_comp_cntr *c2 = swvt_cntr_create(ctx2, IBV_COMP_CNTR_TYPE_WRS);
	CHECK(c1->context == ctx && c2->context == ctx2);
	CHECK_OK(swv_comp_cntr_get_fd(c1) >= 0 ? 0 : errno);
	for (int i = 0; i < 10; i++)
		swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_BYTES);
	CHECK_OK(ibv_close_device(ctx));
	CHECK_OK(ibv_inc_comp_cntr(c2, 1)); /* the other context's counter lives on */
	CHECK_EQ(swvt_cntr_read(c2), 1);
	CHECK_OK(ibv_close_device(ctx2));
}

int main(void)
{
	/* The embedded default device, whatever the caller's environment says. */
	unsetenv("SWVERBS_DEVICES");
	unsetenv("SWVERBS_CONFIG");
	struct ibv_context *ctx = swvt_open_first_device();
	test_caps(ctx);
	test_create_errors(ctx);
	test_basic(ctx);
	test_complete(ctx);
	test_concurrent(ctx);
	test_app_memory(ctx);
	CHECK_OK(ibv_close_device(ctx));
	test_close_releases();
	printf("test_comp_cntr: ok\n");
	return 0;
}
