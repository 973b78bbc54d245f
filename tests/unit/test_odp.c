/* On-demand paging: what registration, ibv_advise_mr and ibv_query_device_ex answer
 * (the errnos of rdma-core and rxe), and local accesses through ODP MRs into memory
 * that was never mapped, which fail the access (EFAULT / LOC_PROT_ERR), not the
 * process. Traffic between processes: tests/mp/test_odp.c. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "inproc.h"
#include "mapping.h"
#include "core/context.h"
#include "core/device.h"
#include "core/mr.h"
#include "core/pd.h"

#define ALL                                                                                        \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |               \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND)

static void test_caps(struct ibv_context *c)
{
	struct ibv_device_attr_ex a;
	CHECK_OK(ibv_query_device_ex(c, NULL, &a));
	CHECK_EQ(a.odp_caps.general_caps, IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT);
	const uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
			    IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
			    IBV_ODP_SUPPORT_SRQ_RECV;
	CHECK_EQ(a.odp_caps.per_transport_caps.rc_odp_caps, rc);
	CHECK_EQ(a.odp_caps.per_transport_caps.uc_odp_caps,
		 IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE);
	CHECK_EQ(a.odp_caps.per_transport_caps.ud_odp_caps,
		 IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV);
}

static void test_register(struct ibv_pd *pd)
{
	const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *mem = swvt_map_isolated(4 * pg);
	CHECK_OK(munmap(mem + pg, pg));
	CHECK_OK(mprotect(mem + 2 * pg, pg, PROT_READ));

	/* Without ODP a hole or a read-only page fails the registration (pinning)... */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, mem, 4 * pg, ALL & ~IBV_ACCESS_ON_DEMAND), EFAULT);
	/* ODP ranges must still be user space (a non-canonical address cannot be mapped) */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, (void *)0x8000000000000000ull, 4096, ALL), EFAULT);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, (void *)(uintptr_t)(SWV_USER_VA_LIMIT - 4096), 8192, ALL),
			 EFAULT);
	/* ...with ODP the pages are looked at on each access instead. */
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, 4 * pg, ALL);
	CHECK_PTR(mr);
	CHECK(mr->addr == mem && mr->length == 4 * pg);

	/* rereg: to ODP over the hole works, away from ODP is pinned again (EFAULT) */
	CHECK_EQ(
	    ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE),
	    IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EFAULT);
	CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND));
	CHECK_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
			      (void *)0xffff800000000000ull, 4096, 0),
		 IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EFAULT);

	/* Local copies: the mapped page works, the hole and the read-only page (for a
	 * scatter) are protection errors, nothing raised. */
	struct swv_context *sc = to_swv_ctx(pd->context);
	uint8_t data[64];
	memset(data, 0x5c, sizeof(data));
	struct ibv_sge good = {(uintptr_t)mem + 8, sizeof(data), mr->lkey};
	struct ibv_sge hole = {(uintptr_t)mem + pg + 8, sizeof(data), mr->lkey};
	struct ibv_sge ro = {(uintptr_t)mem + 2 * pg + 8, sizeof(data), mr->lkey};
	CHECK_OK(swv_mr_scatter(sc, to_swv_pd(pd), &good, 1, 0, data, sizeof(data)));
	CHECK_EQ(mem[8], 0x5c);
	CHECK_EQ(swv_mr_scatter(sc, to_swv_pd(pd), &hole, 1, 0, data, sizeof(data)),
		 IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(swv_mr_gather(sc, to_swv_pd(pd), &hole, 1, 0, data, sizeof(data)),
		 IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(swv_mr_scatter(sc, to_swv_pd(pd), &ro, 1, 0, data, sizeof(data)),
		 IBV_WC_LOC_PROT_ERR);
	CHECK_OK(swv_mr_gather(sc, to_swv_pd(pd), &ro, 1, 0, data, sizeof(data)));
	/* post-time checks pass (bounds only: the page is looked at when copied) */
	CHECK_OK(swv_mr_check_sges(sc, to_swv_pd(pd), &hole, 1, IBV_ACCESS_LOCAL_WRITE));

	/* ibv_advise_mr */
	CHECK_OK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &good, 1));
	CHECK_OK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			       &good, 1));
	/* a hole: best effort without FLUSH, EFAULT with it */
	CHECK_OK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &hole, 1));
	CHECK_EQ(
	    ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &hole, 1),
	    EFAULT);
	CHECK_OK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, IBV_ADVISE_MR_FLAG_FLUSH,
			       &hole, 1));
	/* read-only: readable prefetch works, a writable one cannot be served */
	CHECK_OK(
	    ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &ro, 1));
	CHECK_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			       &ro, 1),
		 EFAULT);
	/* bad arguments */
	CHECK_EQ(ibv_advise_mr(pd, (enum ibv_advise_mr_advice)7, 0, &good, 1), EOPNOTSUPP);
	CHECK_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 1u << 5, &good, 1), EINVAL);
	CHECK_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &good, 0), EINVAL);
	CHECK_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, NULL, 1), EINVAL);
	struct ibv_sge past = {(uintptr_t)mem + 4 * pg - 8, 16, mr->lkey};
	CHECK_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &past, 1), EFAULT);
	struct ibv_sge badkey = good;
	badkey.lkey = mr->lkey ^ 0x80;
	CHECK_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &badkey, 1), EINVAL);
	struct ibv_sge byrkey = good;
	byrkey.lkey = mr->rkey;
	CHECK_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &byrkey, 1), EINVAL);
	struct ibv_pd *pd2 = ibv_alloc_pd(pd->context);
	CHECK_PTR(pd2);
	CHECK_EQ(ibv_advise_mr(pd2, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &good, 1), EINVAL);
	CHECK_OK(ibv_dealloc_pd(pd2));
	/* an MR without ODP is pinned already: advice is not for it */
	struct ibv_mr *pinned = ibv_reg_mr(pd, mem, pg, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(pinned);
	struct ibv_sge psge = {(uintptr_t)mem, 64, pinned->lkey};
	CHECK_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &psge, 1), EINVAL);
	CHECK_OK(ibv_dereg_mr(pinned));
	/* PREFETCH_WRITE into an MR without local write */
	struct ibv_mr *rdonly = ibv_reg_mr(pd, mem, pg, IBV_ACCESS_ON_DEMAND);
	CHECK_PTR(rdonly);
	struct ibv_sge rsge = {(uintptr_t)mem, 64, rdonly->lkey};
	CHECK_OK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &rsge, 1));
	CHECK_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &rsge, 1), EINVAL);
	CHECK_OK(ibv_dereg_mr(rdonly));

	CHECK_OK(ibv_dereg_mr(mr));
	munmap(mem, 4 * pg);
}

static void test_implicit(struct ibv_pd *pd)
{
	/* without ON_DEMAND the whole address space is no range */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	/* its IOVA is the address itself */
	CHECK_NULL_ERRNO(ibv_reg_mr_iova(pd, NULL, SIZE_MAX, 4096, ALL), EINVAL);
	/* bad access stays bad */
	CHECK_NULL_ERRNO(
	    ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_WRITE), EINVAL);

	struct ibv_mr *mr = ibv_reg_mr(pd, NULL, SIZE_MAX, ALL);
	CHECK_PTR(mr);
	CHECK(mr->addr == NULL && mr->length == SIZE_MAX);
	static uint8_t a[256], b[256];
	memset(a, 0xa7, sizeof(a));
	struct swv_context *sc = to_swv_ctx(pd->context);
	struct ibv_sge sa = {(uintptr_t)a, sizeof(a), mr->lkey};
	struct ibv_sge sb = {(uintptr_t)b, sizeof(b), mr->lkey};
	uint8_t tmp[256];
	CHECK_OK(swv_mr_gather(sc, to_swv_pd(pd), &sa, 1, 0, tmp, sizeof(tmp)));
	CHECK_OK(swv_mr_scatter(sc, to_swv_pd(pd), &sb, 1, 0, tmp, sizeof(tmp)));
	CHECK(memcmp(a, b, sizeof(a)) == 0);
	/* remote access by the rkey anywhere; address 64 is never mapped */
	uint64_t v = 0;
	CHECK_OK(swv_mr_remote_read(sc, to_swv_pd(pd), 0, mr->rkey, (uintptr_t)a, &v, 8));
	CHECK_EQ(v, 0xa7a7a7a7a7a7a7a7ull);
	CHECK_EQ(swv_mr_remote_read(sc, to_swv_pd(pd), 0, mr->rkey, 64, &v, 8), EFAULT);
	CHECK_EQ(swv_mr_remote_write(sc, to_swv_pd(pd), 0, mr->rkey, 64, &v, 8), EFAULT);
	uint64_t orig;
	CHECK_EQ(swv_mr_remote_atomic(sc, to_swv_pd(pd), 0, mr->rkey, 64, 0, 1, 0, &orig), EFAULT);
	/* beyond user space: non-canonical (x86-64 raises #GP with no fault address) and
	 * kernel addresses fail the access as any hole does */
	const uint64_t far[] = {1ull << 47, 0x8000000000000000ull, 0xffff800000000000ull,
				UINT64_MAX - 4095};
	for (size_t i = 0; i < sizeof(far) / sizeof(far[0]); i++) {
		int r = swv_mr_remote_read(sc, to_swv_pd(pd), 0, mr->rkey, far[i], &v, 8);
		CHECK(r == EFAULT || r == EACCES);
		r = swv_mr_remote_write(sc, to_swv_pd(pd), 0, mr->rkey, far[i], &v, 8);
		CHECK(r == EFAULT || r == EACCES);
		CHECK(swv_mr_remote_atomic(sc, to_swv_pd(pd), 0, mr->rkey, far[i], 0, 1, 0,
					   &orig) != 0);
	}
	struct ibv_sge low = {64, 8, mr->lkey};
	CHECK_EQ(swv_mr_gather(sc, to_swv_pd(pd), &low, 1, 0, tmp, 8), IBV_WC_LOC_PROT_ERR);
#if defined(__x86_64__)
	/* the top of user space is in bounds, the first byte above it is not */
	CHECK_OK(swv_mr_remote_check(sc, to_swv_pd(pd), 0, mr->rkey, (1ull << 47) - 8, 8,
				     IBV_ACCESS_REMOTE_READ));
	CHECK_EQ(swv_mr_remote_check(sc, to_swv_pd(pd), 0, mr->rkey, (1ull << 47) - 7, 8,
				     IBV_ACCESS_REMOTE_READ),
		 EACCES);
#endif
	/* advise over it */
	CHECK_OK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			       &sb, 1));
	CHECK_EQ(
	    ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &low, 1),
	    EFAULT);
	/* no translation to change; a PD change is fine */
	CHECK_EQ(
	    ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE),
	    IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EOPNOTSUPP);
	CHECK_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, a, sizeof(a), 0),
		 IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EOPNOTSUPP);
	CHECK_OK(ibv_dereg_mr(mr));
}

int main(void)
{
	struct swvt_dev d = swvt_dev_open();
	test_caps(d.ctx);
	test_register(d.pd);
	test_implicit(d.pd);
	swvt_dev_close(&d);
	return 0;
}
