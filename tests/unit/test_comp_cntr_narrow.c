/*
 * Completion counters on a device configured like narrow hardware: 8-bit values
 * (max_value 255, values modulo 256) and only 4 counters per context.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "cntr.h"
#include "core/comp_cntr.h"

#define MAXV  255u
#define NCNTR 4

static void test_caps(struct ibv_context *ctx)
{
	struct ibv_comp_cntr_caps caps;
	CHECK_OK(ibv_query_comp_cntr_caps(ctx, &caps));
	CHECK_EQ(caps.max_value, MAXV);
	CHECK_EQ(caps.max_counters, NCNTR);
	CHECK_EQ(caps.supported_qp_attach_ops, 0x3f);
	struct swv_comp_cntr_caps xc;
	CHECK_OK(swv_query_comp_cntr_caps(ctx, &xc, sizeof(xc)));
	CHECK_EQ(xc.max_value, MAXV);
	CHECK_EQ(xc.max_counters, NCNTR);
}

static void test_limit(struct ibv_context *ctx)
{
	struct ibv_comp_cntr *c[NCNTR];
	for (int i = 0; i < NCNTR; i++)
		c[i] = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	struct ibv_comp_cntr_init_attr a = {.type = IBV_COMP_CNTR_TYPE_WRS};
	errno = 0;
	CHECK(ibv_create_comp_cntr(ctx, &a) == NULL);
	CHECK_EQ(errno, ENOMEM);
	/* An application-memory counter counts against the same limit. */
	_Alignas(64) uint64_t mem[2];
	struct swv_comp_cntr_init_attr_ext xa = {.type = IBV_COMP_CNTR_TYPE_WRS,
						 .comp_count_addr = &mem[0],
						 .err_count_addr = &mem[1]};
	errno = 0;
	CHECK(swv_create_comp_cntr_ext(ctx, &xa) == NULL);
	CHECK_EQ(errno, ENOMEM);
	/* Attribute errors still win over the limit. */
	a.flags = 1;
	errno = 0;
	CHECK(ibv_create_comp_cntr(ctx, &a) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	a.flags = 0;

	/* Freeing one makes room for exactly one more; handles stay unique. */
	CHECK_OK(ibv_destroy_comp_cntr(c[2]));
	c[2] = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_BYTES);
	for (int i = 0; i < NCNTR; i++)
		for (int j = 0; j < i; j++)
			CHECK(c[i]->handle != c[j]->handle);
	errno = 0;
	CHECK(ibv_create_comp_cntr(ctx, &a) == NULL);
	CHECK_EQ(errno, ENOMEM);

	/* The limit is per context: a second context has its own four. */
	struct ibv_context *ctx2 = ibv_open_device(ctx->device);
	CHECK_PTR(ctx2);
	struct ibv_comp_cntr *d = swvt_cntr_create(ctx2, IBV_COMP_CNTR_TYPE_WRS);
	CHECK_OK(ibv_destroy_comp_cntr(d));
	CHECK_OK(ibv_close_device(ctx2));

	for (int i = 0; i < NCNTR; i++)
		CHECK_OK(ibv_destroy_comp_cntr(c[i]));
}

static void test_wrap(struct ibv_context *ctx)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);

	CHECK_EQ(ibv_set_comp_cntr(c, MAXV + 1), EINVAL);
	CHECK_EQ(ibv_set_err_comp_cntr(c, MAXV + 1), EINVAL);
	CHECK_EQ(ibv_set_comp_cntr(c, UINT64_MAX), EINVAL);
	CHECK_EQ(swvt_cntr_read(c), 0); /* a refused set leaves the value alone */
	CHECK_OK(ibv_set_comp_cntr(c, MAXV));
	CHECK_EQ(swvt_cntr_read(c), MAXV);
	CHECK_OK(ibv_inc_comp_cntr(c, 1));
	CHECK_EQ(swvt_cntr_read(c), 0);
	CHECK_OK(ibv_set_comp_cntr(c, 250));
	CHECK_OK(ibv_inc_comp_cntr(c, 10));
	CHECK_EQ(swvt_cntr_read(c), 4);
	CHECK_OK(ibv_inc_comp_cntr(c, 256)); /* a full turn */
	CHECK_EQ(swvt_cntr_read(c), 4);
	CHECK_OK(ibv_inc_comp_cntr(c, 1000));
	CHECK_EQ(swvt_cntr_read(c), (4 + 1000) % 256);
	CHECK_OK(ibv_inc_comp_cntr(c, UINT64_MAX)); /* 2^64-1 = 255 mod 256 */
	CHECK_EQ(swvt_cntr_read(c), (4 + 1000 + 255) % 256);

	CHECK_OK(ibv_set_err_comp_cntr(c, MAXV - 1));
	CHECK_OK(ibv_inc_err_comp_cntr(c, 3));
	CHECK_EQ(swvt_cntr_read_err(c), 1);

	/* The data path wraps the same way, for both values. */
	CHECK_OK(ibv_set_comp_cntr(c, 0));
	CHECK_OK(ibv_set_err_comp_cntr(c, 0));
	for (int i = 0; i < 300; i++)
		swv_comp_cntr_complete(c, true, 0);
	for (int i = 0; i < 260; i++)
		swv_comp_cntr_complete(c, false, 0);
	CHECK_EQ(swvt_cntr_read(c), 300 % 256);
	CHECK_EQ(swvt_cntr_read_err(c), 260 % 256);

	/* BYTES: 1000 bytes at a time, modulo 256 */
	struct ibv_comp_cntr *b = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_BYTES);
	for (int i = 0; i < 7; i++)
		swv_comp_cntr_complete(b, true, 1000);
	CHECK_EQ(swvt_cntr_read(b), 7000 % 256);

	/* Thresholds above max_value can never be reached. */
	CHECK_EQ(swv_comp_cntr_wait(c, MAXV + 1, 0), EINVAL);
	CHECK_EQ(swv_comp_cntr_arm(c, MAXV + 1), EINVAL);
	CHECK_EQ(swv_comp_cntr_wait(c, MAXV, 0), ETIMEDOUT);

	CHECK_OK(ibv_destroy_comp_cntr(b));
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

#define NTHREADS 4
#define NINC     100000

static void *inc_thread(void *p)
{
	struct ibv_comp_cntr *c = p;
	for (int i = 0; i < NINC; i++) {
		CHECK_OK(ibv_inc_comp_cntr(c, 3));
		swv_comp_cntr_complete(c, (i & 1) != 0, 0);
	}
	return NULL;
}

/* The CAS loop of narrow counters loses nothing under contention. */
static void test_concurrent_wrap(struct ibv_context *ctx)
{
	struct ibv_comp_cntr *c = swvt_cntr_create(ctx, IBV_COMP_CNTR_TYPE_WRS);
	pthread_t th[NTHREADS];
	for (int i = 0; i < NTHREADS; i++)
		CHECK_OK(pthread_create(&th[i], NULL, inc_thread, c));
	for (int i = 0; i < NTHREADS; i++)
		CHECK_OK(pthread_join(th[i], NULL));
	uint64_t total = (uint64_t)NTHREADS * NINC * 3 + (uint64_t)NTHREADS * NINC / 2;
	CHECK_EQ(swvt_cntr_read(c), total % 256);
	CHECK_EQ(swvt_cntr_read_err(c), ((uint64_t)NTHREADS * NINC / 2) % 256);
	CHECK_OK(ibv_destroy_comp_cntr(c));
}

int main(void)
{
	/* Before the first ibv_get_device_list: the configuration is read once. */
	CHECK_OK(setenv("SWVERBS_DEVICES", "swv0=127.0.0.1/8,cntr_bits=8,max_cntrs=4", 1));
	unsetenv("SWVERBS_CONFIG");
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK_PTR(list);
	CHECK_EQ(n, 1);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK_PTR(ctx);
	ibv_free_device_list(list);

	test_caps(ctx);
	test_limit(ctx);
	test_wrap(ctx);
	test_concurrent_wrap(ctx);
	CHECK_OK(ibv_close_device(ctx));
	printf("test_comp_cntr_narrow: ok\n");
	return 0;
}
