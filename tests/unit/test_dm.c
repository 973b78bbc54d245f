/* Device memory: ibv_alloc_dm / ibv_free_dm / ibv_memcpy_to_dm / ibv_memcpy_from_dm /
 * ibv_reg_dm_mr answer as mlx5 and the kernel do (EINVAL, EFAULT, ENOMEM, EBUSY), and a
 * zero-based DM MR reaches exactly the DM's bytes. RDMA into and out of device memory
 * between processes: tests/mp/test_dm_mp.c. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "inproc.h"
#include "core/context.h"
#include "core/dm.h"
#include "core/mr.h"
#include "core/pd.h"

#define MAX_DM (1u << 20)

static void test_alloc(struct ibv_context *c)
{
	struct ibv_device_attr_ex a;
	CHECK_OK(ibv_query_device_ex(c, NULL, &a));
	CHECK_EQ(a.max_dm_size, MAX_DM);

	struct ibv_alloc_dm_attr at = {.length = 4096};
	CHECK_NULL_ERRNO(ibv_alloc_dm(c, NULL), EINVAL);
	at.comp_mask = IBV_DM_MASK_HANDLE;
	CHECK_NULL_ERRNO(ibv_alloc_dm(c, &at), EINVAL);
	at.comp_mask = 0;
	at.length = 0;
	CHECK_NULL_ERRNO(ibv_alloc_dm(c, &at), EINVAL);
	at.length = MAX_DM + 1;
	CHECK_NULL_ERRNO(ibv_alloc_dm(c, &at), EINVAL);
	at.length = 64;
	at.log_align_req = 13;
	CHECK_NULL_ERRNO(ibv_alloc_dm(c, &at), EINVAL);

	/* the whole budget, in pieces; one byte more is ENOMEM until a piece is freed */
	struct ibv_dm *dm[4];
	at.log_align_req = 12;
	at.length = MAX_DM / 4;
	for (int i = 0; i < 4; i++) {
		dm[i] = ibv_alloc_dm(c, &at);
		CHECK_PTR(dm[i]);
		CHECK(dm[i]->context == c);
	}
	at.length = 4;
	at.log_align_req = 0;
	CHECK_NULL_ERRNO(ibv_alloc_dm(c, &at), ENOMEM);
	CHECK_OK(ibv_free_dm(dm[2]));
	dm[2] = ibv_alloc_dm(c, &at);
	CHECK_PTR(dm[2]);
	for (int i = 0; i < 4; i++)
		CHECK_OK(ibv_free_dm(dm[i]));
	/* another context has a budget of its own */
	at.length = MAX_DM;
	struct ibv_context *c2 = swvt_open_first_device();
	struct ibv_dm *d1 = ibv_alloc_dm(c, &at), *d2 = ibv_alloc_dm(c2, &at);
	CHECK(d1 && d2);
	CHECK_OK(ibv_free_dm(d1));
	CHECK_OK(ibv_free_dm(d2));
	CHECK_OK(ibv_close_device(c2));
}

static void test_copy(struct ibv_context *c)
{
	struct ibv_alloc_dm_attr at = {.length = 100};
	struct ibv_dm *dm = ibv_alloc_dm(c, &at);
	CHECK_PTR(dm);
	uint8_t in[100], out[100];
	for (int i = 0; i < 100; i++)
		in[i] = (uint8_t)(i * 7 + 1);
	CHECK_OK(ibv_memcpy_to_dm(dm, 0, in, 100));
	memset(out, 0, sizeof(out));
	CHECK_OK(ibv_memcpy_from_dm(out, dm, 0, 100));
	CHECK(memcmp(in, out, 100) == 0);
	CHECK_OK(ibv_memcpy_from_dm(out, dm, 96, 4));
	CHECK(memcmp(out, in + 96, 4) == 0);
	CHECK_OK(ibv_memcpy_to_dm(dm, 100, in, 0));
	/* words only: EINVAL; outside: EFAULT */
	CHECK_EQ(ibv_memcpy_to_dm(dm, 2, in, 4), EINVAL);
	CHECK_EQ(ibv_memcpy_to_dm(dm, 4, in, 6), EINVAL);
	CHECK_EQ(ibv_memcpy_from_dm(out, dm, 1, 4), EINVAL);
	CHECK_EQ(ibv_memcpy_to_dm(dm, 104, in, 4), EFAULT);
	CHECK_EQ(ibv_memcpy_to_dm(dm, 0, in, 104), EFAULT);
	CHECK_EQ(ibv_memcpy_from_dm(out, dm, 96, 8), EFAULT);
	CHECK_EQ(ibv_memcpy_from_dm(out, dm, UINT64_MAX - 3, 8), EFAULT);
	/* an unmapped host buffer fails the copy, not the process */
	const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	void *hole = mmap(NULL, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(hole != MAP_FAILED);
	CHECK_EQ(ibv_memcpy_to_dm(dm, 0, hole, 8), EFAULT);
	CHECK_EQ(ibv_memcpy_from_dm(hole, dm, 0, 8), EFAULT);
	munmap(hole, pg);
	CHECK_OK(ibv_free_dm(dm));
}

static void test_reg(struct ibv_context *c, struct ibv_pd *pd)
{
	struct ibv_alloc_dm_attr at = {.length = 256};
	struct ibv_dm *dm = ibv_alloc_dm(c, &at);
	CHECK_PTR(dm);
	const unsigned zb = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE;
	/* zero-based only; no ODP, no unknown bits; the range inside the DM */
	CHECK_NULL_ERRNO(ibv_reg_dm_mr(pd, dm, 0, 256, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dm_mr(pd, dm, 0, 256, zb | IBV_ACCESS_ON_DEMAND), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dm_mr(pd, dm, 0, 256, zb | (1u << 12)), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dm_mr(pd, dm, 0, 260, zb), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dm_mr(pd, dm, 128, 132, zb), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dm_mr(pd, dm, 260, 0, zb), EINVAL);
	CHECK_NULL_ERRNO(
	    ibv_reg_dm_mr(pd, dm, 0, 256, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_REMOTE_WRITE),
	    EINVAL); /* remote write needs local write */
	struct swvt_dev d2 = swvt_dev_open();
	CHECK_NULL_ERRNO(ibv_reg_dm_mr(d2.pd, dm, 0, 256, zb), EINVAL);
	swvt_dev_close(&d2);

	/* A zero-based MR over bytes 64..191: IOVA 0 is DM byte 64. */
	struct ibv_mr *mr = ibv_reg_dm_mr(pd, dm, 64, 128,
					  zb | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					      IBV_ACCESS_REMOTE_ATOMIC);
	CHECK_PTR(mr);
	CHECK(mr->addr == NULL && mr->length == 128 && mr->pd == pd);
	struct ibv_mr *empty = ibv_reg_dm_mr(pd, dm, 0, 0, zb); /* as the kernel allows */
	CHECK_PTR(empty);
	CHECK_EQ(ibv_free_dm(dm), EBUSY);

	struct swv_context *sc = to_swv_ctx(c);
	struct swv_pd *sp = to_swv_pd(pd);
	uint8_t w[16];
	memset(w, 0xd3, sizeof(w));
	CHECK_OK(swv_mr_remote_write(sc, sp, 0, mr->rkey, 0, w, 16));
	CHECK_OK(swv_mr_remote_write(sc, sp, 0, mr->rkey, 112, w, 16));
	CHECK_EQ(swv_mr_remote_write(sc, sp, 0, mr->rkey, 113, w, 16), EACCES);
	uint64_t orig;
	CHECK_OK(swv_mr_remote_atomic(sc, sp, 0, mr->rkey, 8, 0, 1, 0, &orig));
	CHECK_EQ(orig, 0xd3d3d3d3d3d3d3d3ull);
	uint8_t all[256];
	CHECK_OK(ibv_memcpy_from_dm(all, dm, 0, 256));
	CHECK_EQ(all[63], 0);
	CHECK_EQ(all[64], 0xd3);
	CHECK_EQ(all[72], 0xd4); /* the fetch-and-add, little-endian */
	CHECK_EQ(all[64 + 127], 0xd3);
	CHECK_EQ(all[192], 0);
	/* the local side: an SGE in zero-based IOVAs */
	struct ibv_sge sge = {112, 16, mr->lkey};
	uint8_t r[16];
	CHECK_OK(swv_mr_gather(sc, sp, &sge, 1, 0, r, 16));
	CHECK(memcmp(r, w, 16) == 0);
	struct ibv_sge e = {0, 4, empty->lkey};
	CHECK_EQ(swv_mr_gather(sc, sp, &e, 1, 0, r, 4), IBV_WC_LOC_PROT_ERR);
	/* the translation is the device's: only a PD change is allowed */
	static uint8_t other[64];
	CHECK_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, other, sizeof(other), 0),
		 IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, zb),
		 IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EINVAL);
	struct ibv_pd *pd3 = ibv_alloc_pd(c);
	CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd3, NULL, 0, 0));
	CHECK_OK(ibv_dereg_mr(mr));
	CHECK_OK(ibv_dealloc_pd(pd3));
	CHECK_EQ(ibv_free_dm(dm), EBUSY);
	CHECK_OK(ibv_dereg_mr(empty));
	CHECK_OK(ibv_free_dm(dm));
}

/* Device memory the application never freed is the context's to free: closing the
 * context unmaps it (and, under ASan, nothing it allocated for the DM leaks). */
static void test_close_frees(void)
{
	struct swvt_dev d = swvt_dev_open();
	struct ibv_alloc_dm_attr at = {.length = 8192};
	struct ibv_dm *d1 = ibv_alloc_dm(d.ctx, &at), *d2 = ibv_alloc_dm(d.ctx, &at);
	CHECK_PTR(d1);
	CHECK_PTR(d2);
	/* one of them had an MR over it, gone before the close */
	struct ibv_mr *mr =
	    ibv_reg_dm_mr(d.pd, d1, 0, 4096, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(mr);
	CHECK_OK(ibv_dereg_mr(mr));
	void *b1 = to_swv_dm(d1)->buf, *b2 = to_swv_dm(d2)->buf;
	CHECK_OK(msync(b1, 4096, MS_ASYNC));
	swvt_dev_close(&d);
	/* msync on pages nothing maps is ENOMEM (the context's thread is gone and this
	 * test maps nothing in between that could land there) */
	CHECK(msync(b1, 4096, MS_ASYNC) == -1 && errno == ENOMEM);
	CHECK(msync(b2, 4096, MS_ASYNC) == -1 && errno == ENOMEM);
}

int main(void)
{
	struct swvt_dev d = swvt_dev_open();
	test_alloc(d.ctx);
	test_copy(d.ctx);
	test_reg(d.ctx, d.pd);
	swvt_dev_close(&d);
	test_close_frees();
	return 0;
}
