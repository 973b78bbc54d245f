/*
 * ibv_qp_ex: the ibv_wr_* posting API (see qp_ex.h for the model).
 *
 * Work requests are staged as ordinary struct ibv_send_wr so that wr_complete goes
 * through the very checks and WQE build of ibv_post_send (post.c); this file only
 * translates the builder calls into that form. Staged entries live in a buffer that
 * grows with the batch (never beyond max_send_wr: a longer batch can never fit the
 * send queue). Pointers inside entries (sg_list, next) are set by wr_complete, after
 * the last growth.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/qp.h"
#include "transport/qp_transport.h"
#include "transport/qp_ex.h"
#include "transport/wr_opcode.h"
#include "util/compiler.h"

/* rdma-core's verbs_qp: the comp_mask follows the (rdma-core 65, 360-byte) ibv_qp_ex. */
_Static_assert(offsetof(struct swv_qp, verbs_comp_mask) == 360, "verbs_qp.comp_mask offset");
_Static_assert(offsetof(struct swv_qp, qpx) == 0, "ibv_qp_ex first");

#define GROW_FIRST 16 /* entries staged before the first growth */

/* One staged work request. The entry is followed by its gather list (max(1, max_sge)
 * SGEs) and its inline area (max_inline bytes). */
struct wr_ent {
	struct ibv_send_wr wr;
	uint32_t inline_len;
	bool is_inline;
};

struct swv_wr_batch {
	/* Held from wr_start to wr_complete/wr_abort: one builder at a time per QP, as
	 * the send-queue lock rdma-core's providers take in wr_start. It is not qp->lock,
	 * so the progress thread and ibv_post_recv are never held up by a builder. */
	pthread_mutex_t lock;
	uint64_t ops;       /* IBV_QP_EX_WITH_* the QP was created with */
	uint32_t max_wr;    /* cap.max_send_wr: no batch can be longer */
	uint32_t max_sge;   /* cap.max_send_sge */
	uint32_t max_inline; /* cap.max_inline_data */
	size_t sge_off, inline_off, stride;
	uint8_t *buf;       /* 'cap' entries of 'stride' bytes */
	uint32_t cap, n;
	int err;            /* first error of the open batch; nothing more is staged */
	bool open;
	bool cur_valid;     /* the last entry accepts setters */
};

static inline struct swv_qp *qp_of(struct ibv_qp_ex *qpx)
{
	return swv_container_of(qpx, struct swv_qp, qpx);
}

static inline struct wr_ent *ent_at(struct swv_wr_batch *b, uint32_t i)
{
	return (struct wr_ent *)(b->buf + (size_t)i * b->stride);
}

static inline struct ibv_sge *ent_sge(struct swv_wr_batch *b, struct wr_ent *e)
{
	return (struct ibv_sge *)((uint8_t *)e + b->sge_off);
}

static inline uint8_t *ent_inline(struct swv_wr_batch *b, struct wr_ent *e)
{
	return (uint8_t *)e + b->inline_off;
}

static void fail(struct swv_wr_batch *b, int err)
{
	if (!b->err)
		b->err = err;
	b->cur_valid = false;
}

/* What the ibv_wr_* builder offers a QP type: the send WRs it may post
 * (transport/wr_opcode.c; an XRC INI QP is IBV_QPT_XRC_SEND there). */
uint64_t swv_qp_ex_supported_ops(enum ibv_qp_type type)
{
	uint64_t ops = 0;

	for (uint32_t op = 0; op < SWV_WR_OPCODES; op++)
		if (swv_wr_opcode_allowed(type, op))
			ops |= swv_wr_opcode(op)->qp_ex_op;
	return ops;
}

int swv_qp_ex_check_ops(enum ibv_qp_type type, uint64_t send_ops_flags)
{
	/* As mlx5: an op the device cannot do for this QP type is EOPNOTSUPP. */
	return (send_ops_flags & ~swv_qp_ex_supported_ops(type)) ? EOPNOTSUPP : 0;
}

/* ---- staging ---- */

/* Start a new entry for 'opcode' (needs 'op' in the QP's send ops). NULL when the
 * batch already failed or this call fails it. */
static struct wr_ent *begin(struct ibv_qp_ex *qpx, uint64_t op, enum ibv_wr_opcode opcode)
{
	struct swv_wr_batch *b = qp_of(qpx)->wr_batch;

	/* Outside wr_start .. wr_complete there is no batch to stage into or to report
	 * to (the lock is not ours); wr_complete without wr_start answers EINVAL. */
	if (!b->open)
		return NULL;
	b->cur_valid = false;
	if (b->err)
		return NULL;
	if (!(b->ops & op)) {
		/* Not requested at create time: the QP was not set up for it. */
		fail(b, EINVAL);
		return NULL;
	}
	if (b->n == b->max_wr) {
		fail(b, ENOMEM); /* more than the send queue can ever hold */
		return NULL;
	}
	if (b->n == b->cap) {
		uint32_t cap = b->cap ? b->cap * 2 : GROW_FIRST;
		if (cap > b->max_wr)
			cap = b->max_wr;
		uint8_t *nb = realloc(b->buf, (size_t)cap * b->stride);
		if (!nb) {
			fail(b, ENOMEM);
			return NULL;
		}
		b->buf = nb;
		b->cap = cap;
	}
	struct wr_ent *e = ent_at(b, b->n++);
	memset(e, 0, sizeof(*e));
	e->wr.wr_id = qpx->wr_id;
	/* Inline is chosen by wr_set_inline_data*, not by the flag: a set_sge WR with
	 * IBV_SEND_INLINE in wr_flags gathers from its SGE (mlx5 ignores the flag
	 * here too; ibv_rc_pingpong -N sets it). Other unknown bits fail the batch in
	 * the post checks (EINVAL). */
	e->wr.send_flags = qpx->wr_flags & ~(unsigned)IBV_SEND_INLINE;
	e->wr.opcode = opcode;
	b->cur_valid = true;
	return e;
}

/* The entry setters apply to, or NULL (the batch failed, or no WR was started). */
static struct wr_ent *cur(struct ibv_qp_ex *qpx)
{
	struct swv_wr_batch *b = qp_of(qpx)->wr_batch;
	if (!b->open || b->err)
		return NULL;
	if (!b->cur_valid) {
		fail(b, EINVAL); /* a setter before any wr_<op> */
		return NULL;
	}
	return ent_at(b, b->n - 1);
}

/* An op this device does not implement: fail the batch; later setters are ignored
 * (they must not land on the previous WR). */
static void unsupported(struct ibv_qp_ex *qpx)
{
	struct swv_wr_batch *b = qp_of(qpx)->wr_batch;
	if (b->open)
		fail(b, EOPNOTSUPP);
}

/* ---- ops ---- */

static void wr_send(struct ibv_qp_ex *qpx)
{
	begin(qpx, IBV_QP_EX_WITH_SEND, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm_data)
{
	struct wr_ent *e = begin(qpx, IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_WR_SEND_WITH_IMM);
	if (e)
		e->wr.imm_data = imm_data;
}

static void set_rdma(struct wr_ent *e, uint32_t rkey, uint64_t remote_addr)
{
	e->wr.wr.rdma.rkey = rkey;
	e->wr.wr.rdma.remote_addr = remote_addr;
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr)
{
	struct wr_ent *e = begin(qpx, IBV_QP_EX_WITH_RDMA_WRITE, IBV_WR_RDMA_WRITE);
	if (e)
		set_rdma(e, rkey, remote_addr);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
			      __be32 imm_data)
{
	struct wr_ent *e =
		begin(qpx, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM);
	if (e) {
		set_rdma(e, rkey, remote_addr);
		e->wr.imm_data = imm_data;
	}
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr)
{
	struct wr_ent *e = begin(qpx, IBV_QP_EX_WITH_RDMA_READ, IBV_WR_RDMA_READ);
	if (e)
		set_rdma(e, rkey, remote_addr);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
			      uint64_t compare, uint64_t swap)
{
	struct wr_ent *e =
		begin(qpx, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_CMP_AND_SWP);
	if (e) {
		e->wr.wr.atomic.rkey = rkey;
		e->wr.wr.atomic.remote_addr = remote_addr;
		e->wr.wr.atomic.compare_add = compare;
		e->wr.wr.atomic.swap = swap;
	}
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
				uint64_t add)
{
	struct wr_ent *e =
		begin(qpx, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_FETCH_AND_ADD);
	if (e) {
		e->wr.wr.atomic.rkey = rkey;
		e->wr.wr.atomic.remote_addr = remote_addr;
		e->wr.wr.atomic.compare_add = add;
	}
}

/* Type 2 windows (a type 1 window in a WR fails the batch with EINVAL, as in
 * ibv_post_send: type 1 binds go through ibv_bind_mw). */
static void wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *bind_info)
{
	struct wr_ent *e = begin(qpx, IBV_QP_EX_WITH_BIND_MW, IBV_WR_BIND_MW);
	if (!e)
		return;
	if (!bind_info) {
		fail(qp_of(qpx)->wr_batch, EINVAL);
		return;
	}
	e->wr.bind_mw.mw = mw;
	e->wr.bind_mw.rkey = rkey;
	e->wr.bind_mw.bind_info = *bind_info;
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
	struct wr_ent *e = begin(qpx, IBV_QP_EX_WITH_LOCAL_INV, IBV_WR_LOCAL_INV);
	if (e)
		e->wr.invalidate_rkey = invalidate_rkey;
}

static void wr_send_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
	struct wr_ent *e = begin(qpx, IBV_QP_EX_WITH_SEND_WITH_INV, IBV_WR_SEND_WITH_INV);
	if (e)
		e->wr.invalidate_rkey = invalidate_rkey;
}

/* Not implemented by swverbs: no TSO (raw packet). create_qp_ex refuses that send op
 * (EOPNOTSUPP), so a QP never has it; calling it fails the batch with EOPNOTSUPP, as a
 * device without the op would refuse the WR. */
static void wr_send_tso(struct ibv_qp_ex *qpx, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	unsupported(qpx);
}

/* IBTA 1.5, staged in wr.atomic as the post path reads them (post.c). */
static void wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
			    const void *atomic_wr)
{
	struct wr_ent *e = begin(qpx, IBV_QP_EX_WITH_ATOMIC_WRITE, IBV_WR_ATOMIC_WRITE);
	if (!e)
		return;
	if (!atomic_wr) {
		fail(qp_of(qpx)->wr_batch, EINVAL);
		return;
	}
	e->wr.wr.atomic.rkey = rkey;
	e->wr.wr.atomic.remote_addr = remote_addr;
	memcpy(&e->wr.wr.atomic.swap, atomic_wr, 8); /* copied now: the caller may reuse it */
}

static void wr_flush(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr, size_t len,
		     uint8_t type, uint8_t level)
{
	struct wr_ent *e = begin(qpx, IBV_QP_EX_WITH_FLUSH, IBV_WR_FLUSH);
	if (!e)
		return;
	e->wr.wr.atomic.rkey = rkey;
	e->wr.wr.atomic.remote_addr = remote_addr;
	e->wr.wr.atomic.compare_add = len;
	e->wr.wr.atomic.swap = (uint64_t)type | (uint64_t)level << 8;
}

/* ---- setters ---- */

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t remote_qpn,
			   uint32_t remote_qkey)
{
	struct wr_ent *e = cur(qpx);
	if (!e)
		return;
	if (qp_of(qpx)->type != IBV_QPT_UD) {
		/* Connected QPs have no per-WR address; wr.ud would overwrite wr.rdma. */
		fail(qp_of(qpx)->wr_batch, EINVAL);
		return;
	}
	/* Checked (AH, QPN) with the rest of the WR by the post path. */
	e->wr.wr.ud.ah = ah;
	e->wr.wr.ud.remote_qpn = remote_qpn;
	e->wr.wr.ud.remote_qkey = remote_qkey;
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t remote_srqn)
{
	struct wr_ent *e = cur(qpx);
	if (!e)
		return;
	if (qp_of(qpx)->xrc != SWV_XRC_INI) {
		/* only XRC send QPs address a remote SRQ */
		fail(qp_of(qpx)->wr_batch, EINVAL);
		return;
	}
	/* checked (24 bits) with the rest of the WR by the post path */
	e->wr.qp_type.xrc.remote_srqn = remote_srqn;
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct swv_wr_batch *b = qp_of(qpx)->wr_batch;
	struct wr_ent *e = cur(qpx);
	if (!e)
		return;
	e->is_inline = false;
	e->wr.send_flags &= ~(unsigned)IBV_SEND_INLINE;
	/* A zero-length buffer is no gather entry at all (as mlx5 builds it). */
	e->wr.num_sge = length ? 1 : 0;
	ent_sge(b, e)[0] = (struct ibv_sge){.addr = addr, .length = length, .lkey = lkey};
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num_sge, const struct ibv_sge *sg_list)
{
	struct swv_wr_batch *b = qp_of(qpx)->wr_batch;
	struct wr_ent *e = cur(qpx);
	if (!e)
		return;
	if (num_sge > b->max_sge || (num_sge && !sg_list)) {
		fail(b, EINVAL); /* ibv_post_send's answer to too many SGEs */
		return;
	}
	e->is_inline = false;
	e->wr.send_flags &= ~(unsigned)IBV_SEND_INLINE;
	e->wr.num_sge = (int)num_sge;
	if (num_sge)
		memcpy(ent_sge(b, e), sg_list, num_sge * sizeof(*sg_list));
}

/* Inline data is copied now: the caller may reuse its buffers as soon as the setter
 * returns (rdma-core's providers copy it into the WQE at this point too). */
static void set_inline(struct ibv_qp_ex *qpx, size_t num_buf, const struct ibv_data_buf *bufs)
{
	struct swv_wr_batch *b = qp_of(qpx)->wr_batch;
	struct wr_ent *e = cur(qpx);
	if (!e)
		return;
	size_t total = 0;
	for (size_t i = 0; i < num_buf; i++) {
		if (bufs[i].length > b->max_inline - total || (bufs[i].length && !bufs[i].addr)) {
			fail(b, EINVAL); /* beyond max_inline_data: ibv_post_send says EINVAL */
			return;
		}
		total += bufs[i].length;
	}
	uint8_t *dst = ent_inline(b, e);
	for (size_t i = 0; i < num_buf; i++) {
		memcpy(dst, bufs[i].addr, bufs[i].length);
		dst += bufs[i].length;
	}
	e->is_inline = true;
	e->inline_len = (uint32_t)total;
	e->wr.send_flags |= IBV_SEND_INLINE;
	/* Staged as one gather entry over the copy (wr_complete points it there). */
	e->wr.num_sge = total ? 1 : 0;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf one = {.addr = addr, .length = length};
	set_inline(qpx, 1, &one);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t num_buf,
				    const struct ibv_data_buf *buf_list)
{
	if (num_buf && !buf_list) {
		struct swv_wr_batch *b = qp_of(qpx)->wr_batch;
		if (b->open)
			fail(b, EINVAL);
		return;
	}
	set_inline(qpx, num_buf, buf_list);
}

/* ---- batch ---- */

static void batch_reset(struct swv_wr_batch *b)
{
	b->n = 0;
	b->err = 0;
	b->cur_valid = false;
	b->open = false;
}

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct swv_wr_batch *b = qp_of(qpx)->wr_batch;
	/* The same thread starting again without wr_complete/wr_abort (a misuse) gets
	 * EDEADLK from the error-checking mutex: it already holds the builder, so the
	 * open batch is dropped and a new one begins instead of hanging forever. */
	int rc = pthread_mutex_lock(&b->lock);
	(void)rc;
	batch_reset(b);
	b->open = true;
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct swv_qp *qp = qp_of(qpx);
	struct swv_wr_batch *b = qp->wr_batch;

	if (!b->open)
		return EINVAL; /* no wr_start: nothing to post, and the lock is not ours */
	int err = b->err;
	if (!err && b->n) {
		/* The buffer no longer moves: point each WR at its data and the next WR. */
		for (uint32_t i = 0; i < b->n; i++) {
			struct wr_ent *e = ent_at(b, i);
			struct ibv_sge *sge = ent_sge(b, e);
			if (e->is_inline)
				sge[0] = (struct ibv_sge){.addr = (uintptr_t)ent_inline(b, e),
							  .length = e->inline_len};
			e->wr.sg_list = sge;
			e->wr.next = i + 1 < b->n ? &ent_at(b, i + 1)->wr : NULL;
		}
		struct ibv_send_wr *bad = NULL;
		err = swv_post_send_batch(&qp->qpx.qp_base, &ent_at(b, 0)->wr, &bad);
	}
	batch_reset(b);
	pthread_mutex_unlock(&b->lock);
	return err;
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	struct swv_wr_batch *b = qp_of(qpx)->wr_batch;
	if (!b->open)
		return;
	batch_reset(b);
	pthread_mutex_unlock(&b->lock);
}

/* ---- lifetime ---- */

int swv_qp_ex_init(struct swv_qp *qp, uint64_t send_ops_flags)
{
	struct swv_wr_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return ENOMEM;
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
	pthread_mutex_init(&b->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	b->ops = send_ops_flags;
	b->max_wr = qp->cap.max_send_wr;
	b->max_sge = qp->cap.max_send_sge;
	b->max_inline = qp->cap.max_inline_data;
	b->sge_off = (sizeof(struct wr_ent) + 7) & ~(size_t)7;
	b->inline_off = b->sge_off + SWV_MAX(b->max_sge, 1u) * sizeof(struct ibv_sge);
	b->stride = (b->inline_off + b->max_inline + 7) & ~(size_t)7;
	qp->wr_batch = b;

	struct ibv_qp_ex *x = &qp->qpx;
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_send_tso = wr_send_tso;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_atomic_write = wr_atomic_write;
	x->wr_flush = wr_flush;
	x->wr_id = 0;
	x->wr_flags = 0;
	qp->verbs_comp_mask |= SWV_VERBS_QP_EX;
	return 0;
}

void swv_qp_ex_fini(struct swv_qp *qp)
{
	struct swv_wr_batch *b = qp->wr_batch;
	if (!b)
		return;
	qp->wr_batch = NULL;
	pthread_mutex_destroy(&b->lock);
	free(b->buf);
	free(b);
}
