/*
 * ibv_import_device / ibv_import_pd / ibv_import_mr / ibv_import_dm within one process:
 * an importer made from a dup of cmd_fd shares the context's objects; RC traffic
 * through an imported PD and MR (both directions, bytes checked); device memory
 * written through one context and read through the other; lifetimes (original closed
 * first, importer closed first, unimport then dealloc, dealloc then unimport); the
 * errnos of every call.
 */

#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "inproc.h"

#define LEN 8192

static struct ibv_context *import_of(struct ibv_context *ctx)
{
	int fd = dup(ctx->cmd_fd);
	CHECK(fd >= 0);
	struct ibv_context *imp = ibv_import_device(fd);
	CHECK_PTR(imp);
	CHECK_EQ(imp->cmd_fd, fd); /* the importer owns the fd it was given */
	CHECK(imp != ctx);
	CHECK(imp->device == ctx->device);
	return imp;
}

/* An RC QP of ctx in INIT: 8 WRs of one SGE each way. */
static struct ibv_qp *mk_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_cap cap = {
	    .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1};
	struct ibv_qp *qp = swvt_rc_qp_ex(ctx, pd, cq, cap, 0);
	swvt_pair_to_init(qp);
	return qp;
}

static void wait_ok(struct ibv_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc = swvt_poll_one(cq);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, op);
}

static void write_to(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *src, uint64_t raddr,
		     uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src->addr, .length = LEN, .lkey = src->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = raddr, .rkey = rkey}};
	struct ibv_send_wr *bad = NULL;
	CHECK_OK(ibv_post_send(qp, &wr, &bad));
	wait_ok(cq, IBV_WC_RDMA_WRITE);
}

static void fill(void *p, uint8_t seed)
{
	uint8_t *b = p;
	for (size_t i = 0; i < LEN; i++)
		b[i] = (uint8_t)(seed + i * 7);
}

/* The shared-PD flow of pyverbs: the importer's QP uses the imported PD and MR; a
 * peer QP of a context of its own writes into the imported MR and is written to
 * from it. Run with the original closed before (close_first) or after the traffic. */
static void test_rc_traffic(bool close_first)
{
	struct ibv_context *ctx = swvt_open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct ibv_mr *mr = swvt_reg_buf(
	    pd, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_context *imp = import_of(ctx);
	struct ibv_pd *ipd = ibv_import_pd(imp, pd->handle);
	CHECK_PTR(ipd);
	CHECK(ipd != pd);
	CHECK(ipd->context == imp);
	CHECK_EQ(ipd->handle, pd->handle);
	struct ibv_mr *imr = ibv_import_mr(ipd, mr->handle);
	CHECK_PTR(imr);
	CHECK(imr->context == imp && imr->pd == ipd);
	CHECK_EQ(imr->lkey, mr->lkey);
	CHECK_EQ(imr->rkey, mr->rkey);
	CHECK_EQ(imr->length, mr->length);
	CHECK_EQ(imr->handle, mr->handle);
	void *buf = mr->addr;
	if (close_first) {
		/* The objects stay alive through the importer: the PD and MR are the
		 * importer's to use from now on (the creator's handles die with ctx). */
		CHECK_OK(ibv_close_device(ctx));
		CHECK_EQ(ibv_close_device(ctx), EINVAL);
	}

	struct ibv_cq *icq = ibv_create_cq(imp, 16, NULL, NULL, 0);
	CHECK_PTR(icq);
	struct ibv_qp *iqp = mk_qp(imp, ipd, icq);

	struct ibv_context *peer = swvt_open_first_device();
	struct ibv_pd *ppd = ibv_alloc_pd(peer);
	CHECK_PTR(ppd);
	struct ibv_mr *pmr =
	    swvt_reg_buf(ppd, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *pcq = ibv_create_cq(peer, 16, NULL, NULL, 0);
	CHECK_PTR(pcq);
	struct ibv_qp *pqp = mk_qp(peer, ppd, pcq);
	swvt_pair_connect(iqp, pqp);

	/* peer -> the imported MR's rkey: lands in the original's buffer */
	fill(pmr->addr, 3);
	write_to(pqp, pcq, pmr, (uintptr_t)buf, imr->rkey);
	CHECK(memcmp(buf, pmr->addr, LEN) == 0);
	/* the imported MR's lkey as a source -> the peer */
	fill(buf, 101);
	write_to(iqp, icq, imr, (uintptr_t)pmr->addr, pmr->rkey);
	CHECK(memcmp(buf, pmr->addr, LEN) == 0);

	CHECK_OK(ibv_destroy_qp(pqp));
	CHECK_OK(ibv_destroy_cq(pcq));
	swvt_dereg_buf(pmr);
	CHECK_OK(ibv_dealloc_pd(ppd));
	CHECK_OK(ibv_close_device(peer));

	/* pyverbs' order: unimport first, then the QP that used the import goes */
	ibv_unimport_mr(imr);
	ibv_unimport_pd(ipd);
	CHECK_OK(ibv_destroy_qp(iqp));
	CHECK_OK(ibv_destroy_cq(icq));
	if (close_first) {
		/* the creator is gone: its PD and MR are freed with the last context */
		CHECK_OK(ibv_close_device(imp));
		free(buf);
	} else {
		swvt_dereg_buf(mr);
		CHECK_OK(ibv_dealloc_pd(pd));
		CHECK_OK(ibv_close_device(imp));
		CHECK_EQ(ibv_close_device(imp), EINVAL);
		CHECK_OK(ibv_close_device(ctx));
	}
}

/* Device memory written through one context, read through the other, both ways. */
static void test_dm(void)
{
	struct ibv_context *ctx = swvt_open_first_device();
	struct ibv_alloc_dm_attr at = {.length = 4096};
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &at);
	CHECK_PTR(dm);
	struct ibv_dm *other = ibv_alloc_dm(ctx, &at);
	CHECK_PTR(other);
	CHECK(dm->handle != other->handle);
	struct ibv_context *imp = import_of(ctx);
	struct ibv_dm *idm = ibv_import_dm(imp, dm->handle);
	CHECK_PTR(idm);
	CHECK(idm != dm && idm->context == imp);
	CHECK_EQ(idm->handle, dm->handle);

	uint8_t in[4096], out[4096];
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 13 + 1);
	CHECK_OK(ibv_memcpy_to_dm(dm, 0, in, sizeof(in)));
	memset(out, 0, sizeof(out));
	CHECK_OK(ibv_memcpy_from_dm(out, idm, 0, sizeof(out)));
	CHECK(memcmp(in, out, sizeof(in)) == 0);
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 5 + 9);
	CHECK_OK(ibv_memcpy_to_dm(idm, 100, in, 200));
	CHECK_OK(ibv_memcpy_from_dm(out, dm, 100, 200));
	CHECK(memcmp(in, out, 200) == 0);
	/* the range is the DM's through the import too */
	CHECK_EQ(ibv_memcpy_to_dm(idm, 4000, in, 200), EFAULT);

	/* a zero-based MR over the imported DM, through an imported PD */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct ibv_pd *ipd = ibv_import_pd(imp, pd->handle);
	CHECK_PTR(ipd);
	struct ibv_mr *dmr =
	    ibv_reg_dm_mr(ipd, idm, 0, 4096, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(dmr);
	CHECK_EQ(ibv_free_dm(dm), EBUSY); /* the MR over it counts on the original */
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	CHECK_OK(ibv_dereg_mr(dmr));

	/* destroying through an import is refused: the object keeps one owner */
	CHECK_EQ(ibv_free_dm(idm), EINVAL);
	CHECK_EQ(ibv_dealloc_pd(ipd), EINVAL);
	/* unimport, then free: the original is untouched by the unimport */
	ibv_unimport_dm(idm);
	CHECK_OK(ibv_memcpy_from_dm(out, dm, 100, 200));
	CHECK(memcmp(in, out, 200) == 0);
	uint32_t dh = dm->handle;
	CHECK_OK(ibv_free_dm(dm));
	CHECK_NULL_ERRNO(ibv_import_dm(imp, dh), ENOENT);
	/* free, then unimport: the import struct goes without reading the freed DM */
	struct ibv_dm *iother = ibv_import_dm(imp, other->handle);
	CHECK_PTR(iother);
	CHECK_OK(ibv_free_dm(other));
	ibv_unimport_dm(iother);
	ibv_unimport_pd(ipd);
	CHECK_OK(ibv_dealloc_pd(pd));
	/* importer first, then the original */
	CHECK_OK(ibv_close_device(imp));
	CHECK_OK(ibv_close_device(ctx));
}

/* Lifetimes of PD and MR imports, and every errno. */
static void test_lifetimes_errnos(void)
{
	struct ibv_context *ctx = swvt_open_first_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	CHECK_PTR(pd2);
	CHECK(pd->handle != pd2->handle);
	struct ibv_mr *mr = swvt_reg_buf(pd, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_context *imp = import_of(ctx);
	/* an importer of an importer shares the same state */
	struct ibv_context *imp2 = import_of(imp);

	/* cmd_fd: what fstat refuses is EINVAL (as libibverbs); an fd that is no
	 * context's of this process -- another file, another process's context, a
	 * memfd of nobody -- is EOPNOTSUPP */
	CHECK_NULL_ERRNO(ibv_import_device(-1), EINVAL);
	int fd = dup(ctx->cmd_fd);
	CHECK(fd >= 0);
	CHECK_OK(close(fd));
	CHECK_NULL_ERRNO(ibv_import_device(fd), EINVAL);
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	CHECK(nul >= 0);
	CHECK_NULL_ERRNO(ibv_import_device(nul), EOPNOTSUPP);
	CHECK_OK(close(nul));
	int mfd = memfd_create("not-a-context", MFD_CLOEXEC);
	CHECK(mfd >= 0);
	CHECK_NULL_ERRNO(ibv_import_device(mfd), EOPNOTSUPP);
	CHECK_OK(close(mfd));

	/* handles: unknown ones are ENOENT (the kernel's handle lookup) */
	CHECK_NULL_ERRNO(ibv_import_pd(NULL, pd->handle), EINVAL);
	CHECK_NULL_ERRNO(ibv_import_pd(imp, 0xfffffff0u), ENOENT);
	CHECK_NULL_ERRNO(ibv_import_mr(NULL, mr->handle), EINVAL);
	CHECK_NULL_ERRNO(ibv_import_dm(NULL, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_import_dm(imp, 0), ENOENT);
	struct ibv_pd *ipd = ibv_import_pd(imp2, pd->handle);
	CHECK_PTR(ipd);
	CHECK(ipd->context == imp2);
	CHECK_NULL_ERRNO(ibv_import_mr(ipd, 0), ENOENT);
	CHECK_NULL_ERRNO(ibv_import_mr(ipd, mr->handle ^ 0x5a5a0000u), ENOENT);
	struct ibv_mr *imr = ibv_import_mr(ipd, mr->handle);
	CHECK_PTR(imr);
	/* destroying or changing through an import is refused */
	CHECK_EQ(ibv_dereg_mr(imr), EINVAL);
	CHECK_EQ(
	    ibv_rereg_mr(imr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE),
	    IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(ibv_dealloc_pd(ipd), EINVAL);
	/* unimport leaves the original working, and the MR still counts on the PD */
	ibv_unimport_mr(imr);
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	/* dealloc, then unimport: the PD goes, the import struct only afterwards */
	struct ibv_pd *ipd2 = ibv_import_pd(imp, pd2->handle);
	CHECK_PTR(ipd2);
	uint32_t ph2 = pd2->handle;
	CHECK_OK(ibv_dealloc_pd(pd2));
	CHECK_NULL_ERRNO(ibv_import_pd(imp, ph2), ENOENT);
	ibv_unimport_pd(ipd2);
	/* deregister, then the handle is gone */
	uint32_t mh = mr->handle;
	swvt_dereg_buf(mr);
	CHECK_NULL_ERRNO(ibv_import_mr(ipd, mh), ENOENT);
	ibv_unimport_pd(ipd);
	/* unimport then dealloc */
	uint32_t ph = pd->handle;
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_NULL_ERRNO(ibv_import_pd(imp, ph), ENOENT);

	/* The original closed: an fd dup'd from it still imports while importers keep
	 * the state; once all are closed the fd names nothing. */
	int keep = dup(imp->cmd_fd);
	CHECK(keep >= 0);
	CHECK_OK(ibv_close_device(ctx));
	struct ibv_context *imp3 = import_of(imp);
	struct ibv_pd *p3 = ibv_alloc_pd(imp3); /* the shared state still serves */
	CHECK_PTR(p3);
	struct ibv_pd *ip3 = ibv_import_pd(imp2, p3->handle);
	CHECK_PTR(ip3);
	ibv_unimport_pd(ip3);
	CHECK_OK(ibv_dealloc_pd(p3));
	CHECK_OK(ibv_close_device(imp));
	CHECK_OK(ibv_close_device(imp3));
	CHECK_OK(ibv_close_device(imp2));
	CHECK_NULL_ERRNO(ibv_import_device(keep), EOPNOTSUPP);
	CHECK_OK(close(keep));
}

int main(void)
{
	test_rc_traffic(false);
	test_rc_traffic(true);
	test_dm();
	test_lifetimes_errnos();
	return 0;
}
