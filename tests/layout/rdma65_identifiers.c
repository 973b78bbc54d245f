/*
 * A program written for rdma-core 65 must build against swverbs' header unchanged.
 * This one uses each identifier rdma-core 65's example programs (asyncwatch, devinfo,
 * the pingpongs) take from <infiniband/verbs.h> that swverbs' header once lacked, one
 * of each group the rest of the reference adds (the kernel uAPI names, the ibv_
 * aliases of them, <linux/if_ether.h>), and runs the calls behind them on swv0:
 *   - ibv_event_type_str(IBV_EVENT_DEVICE_SPEED_CHANGE) has a name;
 *   - IBV_DEVICE_CC_DMA_BOUNCE is not set (swverbs bounces nothing);
 *   - a parent domain asking IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC
 *     answers as every parent domain does;
 *   - ibv_advise_mr with IB_UVERBS_ADVISE_MR_FLAG_FLUSH answers as ibv_advise_mr does;
 *   - ibv_reg_mr_ex with IBV_REG_MR_MASK_BUF registers a range of an ibv_alloc_buf
 *     buffer, and refuses one outside it (EINVAL);
 *   - ibv_export_buf_dmabuf_fd answers -1/EOPNOTSUPP (the buffer is no DMA-buf),
 *     -1/EINVAL for NULL.
 * tests/layout/compare_rdma65.py checks every declaration; this checks that the names
 * are usable as the examples use them and that the new calls link and answer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* The kernel uAPI names and the ibv_ aliases rdma-core's verbs_api.h makes of them. */
_Static_assert(IB_UVERBS_ADVISE_MR_FLAG_FLUSH == IBV_ADVISE_MR_FLAG_FLUSH, "advise flag");
_Static_assert(IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT == 2, "advice alias");
_Static_assert(sizeof(struct ibv_flow_action_esp) == sizeof(struct ib_uverbs_flow_action_esp),
	       "esp alias");
_Static_assert(sizeof(struct ib_uverbs_cmd_hdr) == 8, "uverbs cmd hdr");
_Static_assert(IB_USER_VERBS_ABI_VERSION == 6, "uverbs ABI");
_Static_assert(RDMA_DRIVER_IRDMA == RDMA_DRIVER_I40IW, "driver id alias");
_Static_assert(IB_FLUSH_PERSISTENT == 2 && IB_FLUSH_MR == 1, "flush enums");
_Static_assert(IB_DEVICE_NAME_MAX == 64, "device name max");
_Static_assert(ETH_ALEN == 6, "linux/if_ether.h comes with verbs.h");
_Static_assert(IBV_DEVICE_CC_DMA_BOUNCE == IB_UVERBS_DEVICE_CC_DMA_BOUNCE, "cc dma bounce");
_Static_assert(IBV_EVENT_DEVICE_SPEED_CHANGE == IBV_EVENT_WQ_FATAL + 1, "event value");
_Static_assert(offsetof(struct ibv_mr_init_attr, buf) == 64, "mr_init_attr.buf");

static void *no_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
		      uint64_t resource_type)
{
	(void)pd, (void)pd_context, (void)size, (void)alignment, (void)resource_type;
	return IBV_ALLOCATOR_USE_DEFAULT;
}

static void no_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	(void)pd, (void)pd_context, (void)ptr, (void)resource_type;
}

int main(void)
{
	/* asyncwatch prints every event by name. */
	const char *ev = ibv_event_type_str(IBV_EVENT_DEVICE_SPEED_CHANGE);
	CHECK(ev && strcmp(ev, "unknown") != 0, "IBV_EVENT_DEVICE_SPEED_CHANGE has no name (%s)",
	      ev ? ev : "NULL");

	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	CHECK(list && num > 0, "no swverbs device (errno %d)", errno);
	if (!list || num == 0)
		return 1;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device: errno %d", errno);
	if (!ctx)
		return 1;

	/* devinfo prints the capability. */
	struct ibv_device_attr_ex dev = {0};
	CHECK(ibv_query_device_ex(ctx, NULL, &dev) == 0, "ibv_query_device_ex");
	CHECK(!(dev.device_cap_flags_ex & IBV_DEVICE_CC_DMA_BOUNCE),
	      "swverbs claims IBV_DEVICE_CC_DMA_BOUNCE");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd: errno %d", errno);
	if (!pd)
		return 1;

	/* rc_pingpong asks for a parent domain with the new flag. */
	struct ibv_parent_domain_init_attr pda = {
	    .pd = pd,
	    .comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			 IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC,
	    .alloc = no_alloc,
	    .free = no_free,
	};
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pda);
	int parent_errno = errno;
	pda.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
	struct ibv_pd *plain = ibv_alloc_parent_domain(ctx, &pda);
	int plain_errno = errno;
	CHECK(!parent == !plain && (parent || parent_errno == plain_errno),
	      "ALLOW_CC_UNPROTECTED_ALLOC changed the answer (%p/%d vs %p/%d)", (void *)parent,
	      parent_errno, (void *)plain, plain_errno);
	if (parent)
		ibv_dealloc_pd(parent);
	if (plain)
		ibv_dealloc_pd(plain);

	/* ibv_alloc_buf + ibv_reg_mr_ex(IBV_REG_MR_MASK_BUF). */
	struct ibv_buf *buf = NULL;
	char *mem = ibv_alloc_buf(pd, 8192, &buf);
	CHECK(mem && buf, "ibv_alloc_buf: errno %d", errno);
	if (!mem)
		return 1;
	struct ibv_mr_init_attr mia = {
	    .length = 4096,
	    .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	    .comp_mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_BUF,
	    .addr = mem + 4096,
	    .buf = buf,
	};
	struct ibv_mr *mr = ibv_reg_mr_ex(pd, &mia);
	CHECK(mr && mr->addr == mem + 4096 && mr->length == 4096,
	      "ibv_reg_mr_ex(MASK_BUF): errno %d", errno);

	/* rc_pingpong flushes prefetched pages on its MR. */
	if (mr) {
		struct ibv_sge sge = {.addr = (uintptr_t)mr->addr, .length = 64, .lkey = mr->lkey};
		int with_flush = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
					       IB_UVERBS_ADVISE_MR_FLAG_FLUSH, &sge, 1);
		int without = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1);
		CHECK(with_flush == without, "advise_mr FLUSH %d, without %d", with_flush, without);
		ibv_dereg_mr(mr);
	}

	mia.length = 8192; /* mem + 4096 .. + 12288 runs past the buffer */
	errno = 0;
	CHECK(!ibv_reg_mr_ex(pd, &mia) && errno == EINVAL,
	      "ibv_reg_mr_ex(MASK_BUF) past the buffer: errno %d, want EINVAL", errno);

	errno = 0;
	CHECK(ibv_export_buf_dmabuf_fd(buf) == -1 && errno == EOPNOTSUPP,
	      "ibv_export_buf_dmabuf_fd: errno %d, want EOPNOTSUPP", errno);
	errno = 0;
	CHECK(ibv_export_buf_dmabuf_fd(NULL) == -1 && errno == EINVAL,
	      "ibv_export_buf_dmabuf_fd(NULL): errno %d, want EINVAL", errno);

	ibv_free_buf(buf);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	if (failures) {
		fprintf(stderr, "%d failure(s)\n", failures);
		return 1;
	}
	printf("PASS: rdma-core 65 example identifiers compile and answer\n");
	return 0;
}
