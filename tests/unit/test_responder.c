/*
 * Responder unit test: drives swv_resp_rx with hand-made request packets against a
 * QP whose neighbours are replaced by small models defined here (the linker takes
 * these before the library's): transmit (each packet is built with the real packet
 * builder, then parsed back, so the wire form is checked too), swv_complete, the MR
 * access functions (one-region-per-key model with bounds/rights, and regions whose
 * memory "faults" as unmapped memory would), swv_qp_to_error.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/completion.h"
#include "core/mr.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/responder.h"
#include "transport/responder_int.h"

/* ------------------------------------------------------------------ models */

struct sent {
	struct swv_pkt p;
	uint8_t data[4096];
	uint8_t map[SWV_SACK_MAX_LEN];
};
static struct sent sent[256];
static int nsent;
static int xmit_fail_at = -1; /* the packet that finds the socket full (EAGAIN) */

int swv_qp_xmit(struct swv_qp *qp, const struct sockaddr_in *to, const struct iovec *iov,
		int iovcnt, size_t seg, unsigned npkts, enum swv_xmit_path path,
		unsigned *nout)
{
	static uint8_t dgram[8192];
	size_t len = 0;

	(void)to, (void)seg;
	CHECK(path == SWV_XMIT_ANY); /* no inbox here: no ring-only attempt */
	*nout = 0;
	CHECK_EQ(npkts, 1u); /* no endpoint: no GSO runs */
	if (xmit_fail_at == nsent) {
		xmit_fail_at = -1;
		return EAGAIN;
	}

	CHECK(nsent < (int)SWV_ARRAY_SIZE(sent));
	for (int i = 0; i < iovcnt; i++) {
		CHECK(len + iov[i].iov_len <= sizeof(dgram));
		memcpy(dgram + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	*nout = 1;
	struct sent *s = &sent[nsent++];
	CHECK_EQ(swv_pkt_parse(dgram, len, &s->p), 0);
	CHECK(s->p.paylen <= sizeof(s->data));
	memcpy(s->data, s->p.payload, s->p.paylen);
	s->p.payload = s->data;
	if (s->p.sack_map) {
		memcpy(s->map, s->p.sack_map, s->p.sack_len);
		s->p.sack_map = s->map;
	}
	CHECK_EQ(s->p.dqpn, qp->attr.dest_qp_num);
	return 0;
}

static struct swv_completion comps[256];
static int ncomps;

int swv_complete(struct swv_qp *qp, const struct swv_completion *c)
{
	CHECK(ncomps < (int)SWV_ARRAY_SIZE(comps));
	comps[ncomps++] = *c;
	return 0;
}

static int to_error_calls, overflow_calls;
void swv_qp_to_error(struct swv_qp *qp)
{
	to_error_calls++;
	qp->state = IBV_QPS_ERR;
	qp->resp->tx_retry_at = 0; /* as the real one: held responses are not sent in ERR */
}

/* Held responses arm the QP's timer through the requester's (one timer per QP). */
static int timer_updates;
void swv_req_update_timer(struct swv_qp *qp)
{
	(void)qp;
	timer_updates++;
}
void swv_qp_cq_overflow(struct swv_qp *qp, struct swv_cq *cq)
{
	overflow_calls++;
	swv_qp_to_error(qp);
}

/* Memory: one region per key. lkey = rkey ^ 0x5a5a0000. */
struct region {
	uint8_t *base;
	uint64_t len;
	uint32_t rkey;
	unsigned access;
	struct swv_pd *pd;
	bool faults; /* registered, but every access faults (core/memsafe.h) */
};
static struct region regions[4];
static int nregions;

static struct region *by_rkey(struct swv_pd *pd, uint32_t rkey)
{
	for (int i = 0; i < nregions; i++)
		if (regions[i].rkey == rkey && regions[i].pd == pd)
			return &regions[i];
	return NULL;
}
static struct region *by_lkey(struct swv_pd *pd, uint32_t lkey)
{
	return by_rkey(pd, lkey ^ 0x5a5a0000u);
}
static bool in_region(const struct region *r, uint64_t va, uint64_t len)
{
	uint64_t b = (uintptr_t)r->base;
	return va >= b && len <= r->len && va - b <= r->len - len;
}

int swv_mr_remote_check(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			uint64_t va, uint64_t len, unsigned access)
{
	if (!len)
		return 0;
	struct region *r = by_rkey(pd, rkey);
	if (!r || !in_region(r, va, len) || (r->access & access) != access)
		return EACCES;
	return 0;
}
int swv_mr_remote_write(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			uint64_t va, const void *src, size_t len)
{
	if (swv_mr_remote_check(ctx, pd, qpn, rkey, va, len, IBV_ACCESS_REMOTE_WRITE))
		return EACCES;
	if (len && by_rkey(pd, rkey)->faults)
		return EFAULT;
	memcpy((void *)(uintptr_t)va, src, len);
	return 0;
}
int swv_mr_remote_read(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
		       uint64_t va, void *dst, size_t len)
{
	if (swv_mr_remote_check(ctx, pd, qpn, rkey, va, len, IBV_ACCESS_REMOTE_READ))
		return EACCES;
	if (len && by_rkey(pd, rkey)->faults)
		return EFAULT;
	memcpy(dst, (void *)(uintptr_t)va, len);
	return 0;
}
/* ATOMIC_WRITE and FLUSH are driven by the mp tests; this model refuses them. */
int swv_mr_remote_atomic_write(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn,
			       uint32_t rkey, uint64_t va, uint64_t value)
{
	return EACCES;
}
int swv_mr_remote_flush(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			uint64_t va, uint64_t len, unsigned plt, bool whole_mr)
{
	return EACCES;
}
/* No windows in this model: no rkey can be invalidated. */
int swv_mw_invalidate(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
		      bool remote)
{
	return EINVAL;
}
static int atomic_execs;
int swv_mr_remote_atomic(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
			 uint64_t va, int cmp_swap, uint64_t swap_add, uint64_t cmp, uint64_t *orig)
{
	if (va & 7)
		return EINVAL;
	if (swv_mr_remote_check(ctx, pd, qpn, rkey, va, 8, IBV_ACCESS_REMOTE_ATOMIC))
		return EACCES;
	if (by_rkey(pd, rkey)->faults)
		return EFAULT;
	uint64_t *p = (uint64_t *)(uintptr_t)va;
	*orig = *p;
	if (cmp_swap) {
		if (*p == cmp)
			*p = swap_add;
	} else {
		*p += swap_add;
	}
	atomic_execs++;
	return 0;
}
int swv_mr_scatter(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		   unsigned nsge, uint64_t offset, const void *src, size_t len)
{
	const uint8_t *s = src;

	for (unsigned i = 0; i < nsge && len; i++) {
		if (offset >= sge[i].length) {
			offset -= sge[i].length;
			continue;
		}
		size_t n = SWV_MIN((size_t)(sge[i].length - offset), len);
		struct region *r = by_lkey(pd, sge[i].lkey);
		if (!r || !in_region(r, sge[i].addr + offset, n) ||
		    !(r->access & IBV_ACCESS_LOCAL_WRITE) || r->faults)
			return IBV_WC_LOC_PROT_ERR;
		memcpy((void *)(uintptr_t)(sge[i].addr + offset), s, n);
		s += n;
		len -= n;
		offset = 0;
	}
	return len ? IBV_WC_LOC_LEN_ERR : 0;
}
int swv_mr_check_sges(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		      unsigned nsge, unsigned access)
{
	for (unsigned i = 0; i < nsge; i++) {
		struct region *r = by_lkey(pd, sge[i].lkey);
		if (sge[i].length && (!r || !in_region(r, sge[i].addr, sge[i].length) ||
				      (r->access & access) != access))
			return IBV_WC_LOC_PROT_ERR;
	}
	return 0;
}

/* ------------------------------------------------------------------ fixture */

static struct swv_pd *const PD = (struct swv_pd *)0x1000;
static struct swv_cq *const RCQ = (struct swv_cq *)0x2000;
#define PEER_QPN 0x4242u
#define MTU      256u

static struct swv_qp *qp;
static uint8_t *mem;    /* 64 KiB target/recv memory, region 0 (all rights) */
static uint8_t *romem;  /* 4 KiB, region 1: REMOTE_READ only */
#define MEM_RKEY 0x11110001u
#define RO_RKEY  0x22220002u
static uint8_t *fmem; /* 4 KiB, region 2: all rights, but its pages "fault" */
#define FAULT_RKEY 0x33330003u
#define FAULT_LKEY (FAULT_RKEY ^ 0x5a5a0000u)

static void setup(enum ibv_qp_type type)
{
	if (qp)
		swv_qp_transport_free(qp); /* the responder's buffers too */
	free(qp ? qp->rq.buf : NULL);
	free(qp);
	qp = calloc(1, sizeof(*qp));
	CHECK_PTR(qp);
	CHECK_OK(swv_qp_transport_alloc(qp));
	qp->type = type;
	qp->state = IBV_QPS_RTS;
	qp->qpn = 0x777;
	qp->pd = PD;
	qp->rcq = RCQ;
	qp->mtu = MTU;
	qp->attr.path_mtu = IBV_MTU_256;
	qp->attr.dest_qp_num = PEER_QPN;
	qp->attr.qp_access_flags =
		IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	qp->attr.max_dest_rd_atomic = 4;
	qp->attr.min_rnr_timer = 12;
	qp->attr.rq_psn = 100;
	qp->attr.qkey = 0x1111;
	qp->rq.max_sge = 4;
	qp->rq.nslots = 16;
	qp->rq.max_wr = 16;
	qp->rq.stride = sizeof(struct swv_recv_wqe) + 4 * sizeof(struct ibv_sge);
	qp->rq.buf = calloc(qp->rq.nslots, qp->rq.stride);
	swv_resp_reset(qp);

	if (!mem) {
		mem = aligned_alloc(4096, 65536);
		romem = aligned_alloc(4096, 4096);
		fmem = aligned_alloc(4096, 4096);
	}
	memset(mem, 0, 65536);
	memset(romem, 0xee, 4096);
	nregions = 0;
	regions[nregions++] = (struct region){mem, 65536, MEM_RKEY,
					      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
					      PD, false};
	regions[nregions++] = (struct region){romem, 4096, RO_RKEY, IBV_ACCESS_REMOTE_READ, PD,
					      false};
	regions[nregions++] = (struct region){fmem, 4096, FAULT_RKEY,
					      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
					      PD, true};
	nsent = ncomps = to_error_calls = overflow_calls = atomic_execs = 0;
}

static void post_recv(uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey)
{
	struct swv_recv_wqe *w = swv_wq_slot(&qp->rq, qp->rq.tail);
	w->wr_id = wr_id;
	w->num_sge = 1;
	w->length = len;
	w->sge[0] = (struct ibv_sge){addr, len, lkey};
	qp->rq.tail++;
}
#define LKEY (MEM_RKEY ^ 0x5a5a0000u)

static uint8_t opc(uint8_t op)
{
	return (uint8_t)((qp->type == IBV_QPT_UC ? SWV_OP_UC : qp->type == IBV_QPT_UD ? SWV_OP_UD : 0) |
			 op);
}

static bool rx_sack; /* rx: the requester says it reads SACK maps (SWV_BTH_SACK) */

static void rx(uint8_t op, uint32_t psn, bool ackreq, const void *payload, uint32_t paylen)
{
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.sack = rx_sack;
	p.opcode = opc(op);
	p.psn = psn & SWV_PSN_MASK;
	p.ackreq = ackreq;
	p.payload = payload;
	p.paylen = paylen;
	p.dqpn = qp->qpn;
	swv_resp_rx(qp, &p);
}

static void rx_reth(uint8_t op, uint32_t psn, bool ackreq, uint64_t va, uint32_t rkey,
		    uint32_t len, const void *payload, uint32_t paylen, uint32_t imm)
{
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = opc(op);
	p.psn = psn & SWV_PSN_MASK;
	p.ackreq = ackreq;
	p.reth_va = va;
	p.reth_rkey = rkey;
	p.reth_len = len;
	p.payload = payload;
	p.paylen = paylen;
	p.imm = imm;
	swv_resp_rx(qp, &p);
}

static void rx_atomic(uint8_t op, uint32_t psn, uint64_t va, uint32_t rkey, uint64_t swap_add,
		      uint64_t cmp)
{
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = op;
	p.psn = psn;
	p.ackreq = true;
	p.atm_va = va;
	p.atm_rkey = rkey;
	p.atm_swap_add = swap_add;
	p.atm_cmp = cmp;
	swv_resp_rx(qp, &p);
}

static void check_ack(int i, uint8_t syndrome, uint32_t psn, uint32_t msn)
{
	CHECK(i < nsent);
	CHECK_EQ(sent[i].p.opcode, SWV_OP_ACK);
	CHECK_EQ(sent[i].p.aeth_syndrome, syndrome);
	CHECK_EQ(sent[i].p.psn, psn);
	CHECK_EQ(sent[i].p.aeth_msn, msn);
}

static uint8_t pattern[16384];

/* ------------------------------------------------------------------ tests */

static void test_pure(void)
{
	const uint32_t kinds = SWV_OPF_SEND | SWV_OPF_WRITE_LIKE | SWV_OPF_READ | SWV_OPF_ATOMIC |
			       SWV_OPF_ONLY | SWV_OPF_PAYLOAD | SWV_OPF_RWQE;

	CHECK_EQ(swv_opcode_request(IBV_QPT_RC, 0x04) & kinds,
		 SWV_OPF_SEND | SWV_OPF_ONLY | SWV_OPF_PAYLOAD | SWV_OPF_RWQE);
	CHECK(!(swv_opcode_request(IBV_QPT_RC, SWV_OP_SEND_LAST) & SWV_OPF_RWQE));
	CHECK(!(swv_opcode_request(IBV_QPT_RC, SWV_OP_WRITE_ONLY) & SWV_OPF_RWQE));
	/* ATOMIC_WRITE and FLUSH are answered as RDMA WRITEs */
	CHECK_EQ(swv_opcode_request(IBV_QPT_RC, SWV_OP_ATOMIC_WRITE) & kinds,
		 SWV_OPF_ATOMIC_WRITE | SWV_OPF_ONLY | SWV_OPF_PAYLOAD);
	CHECK_EQ(swv_opcode_request(IBV_QPT_RC, SWV_OP_FLUSH) & kinds,
		 SWV_OPF_FLUSH | SWV_OPF_ONLY);
	CHECK(swv_opcode_request(IBV_QPT_RC, SWV_OP_CMP_SWAP) & SWV_OPF_CMPSWAP);
	CHECK(!(swv_opcode_request(IBV_QPT_RC, SWV_OP_FETCH_ADD) & SWV_OPF_CMPSWAP));
	CHECK_EQ(swv_opcode_request(IBV_QPT_UC, 0x36), 0); /* no invalidate on UC */
	CHECK_EQ(swv_opcode_request(IBV_QPT_UD, 0xa4), 0); /* XRC opcode on UD */
	CHECK_EQ(swv_opcode_request(IBV_QPT_RC, 0x24), 0); /* UC opcode on RC */
	CHECK_EQ(swv_opcode_request(IBV_QPT_RC, 0x11), 0); /* ACK is not a request */
	CHECK_EQ(swv_opcode_request(IBV_QPT_RC, 0x10), 0); /* READ response */
	CHECK_EQ(swv_opcode_request(IBV_QPT_UC, 0x2c), 0); /* no READ on UC */
	CHECK(swv_opcode_request(IBV_QPT_UC, 0x2b) & SWV_OPF_RWQE);
	CHECK(swv_opcode_request(IBV_QPT_UD, 0x64) & SWV_HDR_DETH);
	CHECK_EQ(swv_opcode_request(IBV_QPT_UD, 0x60), 0);
	CHECK_EQ(swv_opcode_request(IBV_QPT_RC, 0x15), 0);

	uint32_t sf = swv_opcode_request(IBV_QPT_RC, SWV_OP_SEND_FIRST);
	uint32_t sm = swv_opcode_request(IBV_QPT_RC, SWV_OP_SEND_MIDDLE);
	uint32_t sl = swv_opcode_request(IBV_QPT_RC, SWV_OP_SEND_LAST_INV);
	uint32_t wm = swv_opcode_request(IBV_QPT_RC, SWV_OP_WRITE_MIDDLE);
	uint32_t rd = swv_opcode_request(IBV_QPT_RC, SWV_OP_READ_REQUEST);
	CHECK_EQ(swv_resp_check_seq(0, sf), SWV_SEQ_OK);
	CHECK_EQ(swv_resp_check_seq(0, sm), SWV_SEQ_MISSING_FIRST);
	CHECK_EQ(swv_resp_check_seq(0, rd), SWV_SEQ_OK);
	CHECK_EQ(swv_resp_check_seq(SWV_OPF_SEND, sm), SWV_SEQ_OK);
	CHECK_EQ(swv_resp_check_seq(SWV_OPF_SEND, sl), SWV_SEQ_OK);
	CHECK_EQ(swv_resp_check_seq(SWV_OPF_SEND, sf), SWV_SEQ_MISSING_LAST);
	CHECK_EQ(swv_resp_check_seq(SWV_OPF_SEND, wm), SWV_SEQ_MISSING_LAST);
	CHECK_EQ(swv_resp_check_seq(SWV_OPF_WRITE, rd), SWV_SEQ_MISSING_LAST);

	CHECK(swv_resp_paylen_ok(sf, 256, 256));
	CHECK(!swv_resp_paylen_ok(sf, 255, 256));
	CHECK(!swv_resp_paylen_ok(sl, 0, 256));
	CHECK(swv_resp_paylen_ok(sl, 1, 256));
	CHECK(!swv_resp_paylen_ok(sl, 257, 256));
	CHECK(swv_resp_paylen_ok(swv_opcode_request(IBV_QPT_RC, SWV_OP_SEND_ONLY), 0, 256));
	CHECK(!swv_resp_paylen_ok(rd, 4, 256));

	CHECK_EQ(swv_resp_read_npkts(0, 256), 1);
	CHECK_EQ(swv_resp_read_npkts(256, 256), 1);
	CHECK_EQ(swv_resp_read_npkts(257, 256), 2);
	CHECK_EQ(swv_resp_read_npkts(1u << 31, 256), 1u << 23);
	CHECK_EQ(swv_resp_ring_size(0), 1);
	CHECK_EQ(swv_resp_ring_size(3), 4);
	CHECK_EQ(swv_resp_ring_size(16), 16);
	CHECK_EQ(swv_resp_ring_size(200), 16);

	/* resource lookup across the PSN wrap */
	struct swv_resp_state s;
	memset(&s, 0, sizeof(s));
	struct swv_resp_res *r = swv_resp_res_alloc(&s, 4);
	r->valid = true;
	r->first_psn = 0xfffffe;
	r->last_psn = 0x000001;
	CHECK(swv_resp_res_find(&s, 0xffffff) == r);
	CHECK(swv_resp_res_find(&s, 0x000001) == r);
	CHECK(swv_resp_res_find(&s, 0x000002) == NULL);
	CHECK(swv_resp_res_find(&s, 0xfffffd) == NULL);
	/* a newer request over PSNs a stale entry still claims retires the stale one */
	struct swv_resp_res *r2 = swv_resp_res_alloc(&s, 4);
	CHECK(r2 != r);
	r2->first_psn = 0x000000;
	r2->last_psn = 0x000003;
	swv_resp_res_publish(&s, r2);
	CHECK(r2->valid && !r->valid);
	CHECK(swv_resp_res_find(&s, 0x000001) == r2);
	CHECK(swv_resp_res_find(&s, 0xffffff) == NULL);
	struct swv_resp_res *r3 = swv_resp_res_alloc(&s, 4);
	r3->first_psn = r3->last_psn = 0x000004;
	swv_resp_res_publish(&s, r3);
	CHECK(r2->valid && r3->valid);
}

static void test_send(void)
{
	setup(IBV_QPT_RC);
	post_recv(7, (uintptr_t)mem, 1000, LKEY);
	/* 600 bytes = FIRST 256, MIDDLE 256, LAST_IMM 88; AckReq only on LAST */
	rx(SWV_OP_SEND_FIRST, 100, false, pattern, 256);
	rx(SWV_OP_SEND_MIDDLE, 101, false, pattern + 256, 256);
	CHECK_EQ(nsent, 0); /* coalesced: no ACK without AckReq */
	CHECK_EQ(ncomps, 0);
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = SWV_OP_SEND_LAST_IMM;
	p.psn = 102;
	p.ackreq = true;
	p.se = true;
	p.imm = 0xdeadbeef;
	p.payload = pattern + 512;
	p.paylen = 88;
	swv_resp_rx(qp, &p);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].slot, SWV_CNTR_RECV);
	CHECK(comps[0].cq == RCQ);
	CHECK(comps[0].solicited);
	CHECK_EQ(comps[0].wc.wr_id, 7);
	CHECK_EQ(comps[0].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(comps[0].wc.opcode, IBV_WC_RECV);
	CHECK_EQ(comps[0].wc.byte_len, 600);
	CHECK_EQ(comps[0].bytes, 600);
	CHECK_EQ(comps[0].wc.imm_data, 0xdeadbeef);
	CHECK(comps[0].wc.wc_flags & IBV_WC_WITH_IMM);
	CHECK_EQ(comps[0].wc.qp_num, 0x777);
	CHECK_EQ(comps[0].wc.src_qp, PEER_QPN);
	CHECK(memcmp(mem, pattern, 600) == 0);
	CHECK_EQ(qp->rq.head, 1);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_ACK, 102, 1);
	CHECK_EQ(qp->resp->epsn, 103);

	/* duplicates: re-ACK with the last executed PSN, nothing re-executed */
	memset(mem, 0, 600);
	rx(SWV_OP_SEND_FIRST, 100, false, pattern, 256);
	rx(SWV_OP_SEND_LAST, 101, true, pattern, 100);
	CHECK_EQ(nsent, 3);
	check_ack(1, SWV_AETH_ACK, 102, 1);
	check_ack(2, SWV_AETH_ACK, 102, 1);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(mem[0], 0);
	CHECK_EQ(qp->resp->stats.duplicates, 2);
	CHECK_EQ(to_error_calls, 0);
}

static void test_gap_and_rnr(void)
{
	setup(IBV_QPT_RC);
	/* gap: one NAK 0x60 with epsn, then silence until epsn arrives (atomics past a
	 * gap are dropped; SEND/WRITE packets and READ requests are kept, test_rob_*) */
	post_recv(1, (uintptr_t)mem, 100, LKEY);
	rx_atomic(SWV_OP_FETCH_ADD, 102, (uintptr_t)mem + 512, MEM_RKEY, 1, 0);
	rx_atomic(SWV_OP_FETCH_ADD, 103, (uintptr_t)mem + 512, MEM_RKEY, 1, 0);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_NAK_PSN, 100, 0);
	CHECK_EQ(ncomps, 0);
	rx(SWV_OP_SEND_ONLY, 100, true, pattern, 10);
	CHECK_EQ(ncomps, 1);
	check_ack(1, SWV_AETH_ACK, 100, 1);
	/* a new gap gets a new NAK */
	rx_atomic(SWV_OP_FETCH_ADD, 105, (uintptr_t)mem + 512, MEM_RKEY, 1, 0);
	check_ack(2, SWV_AETH_NAK_PSN, 101, 1);

	/* RNR: no receive WQE; epsn stays; later PSNs dropped silently */
	rx(SWV_OP_SEND_ONLY, 101, true, pattern, 10);
	CHECK_EQ(nsent, 4);
	check_ack(3, SWV_AETH_RNR | 12, 101, 1);
	CHECK_EQ(qp->resp->epsn, 101);
	rx(SWV_OP_SEND_ONLY, 102, true, pattern, 10);
	CHECK_EQ(nsent, 4);
	post_recv(2, (uintptr_t)mem, 100, LKEY);
	rx(SWV_OP_SEND_ONLY, 101, true, pattern + 5, 10);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(comps[1].wc.wr_id, 2);
	CHECK(memcmp(mem, pattern + 5, 10) == 0);
	check_ack(4, SWV_AETH_ACK, 101, 2);
	CHECK_EQ(to_error_calls, 0);

	/* WRITE_WITH_IMM needs a receive WQE too: RNR at its LAST packet */
	rx_reth(SWV_OP_WRITE_FIRST, 102, false, (uintptr_t)mem + 4096, MEM_RKEY, 300, pattern, 256, 0);
	rx(SWV_OP_WRITE_LAST_IMM, 103, true, pattern + 256, 44);
	check_ack(5, SWV_AETH_RNR | 12, 103, 2);
	CHECK_EQ(ncomps, 2); /* REMOTE_RDMA_WRITE not counted yet */
	post_recv(3, 0, 0, LKEY);
	rx_reth(SWV_OP_WRITE_FIRST, 102, false, (uintptr_t)mem + 4096, MEM_RKEY, 300, pattern, 256, 0);
	check_ack(6, SWV_AETH_ACK, 102, 2); /* duplicate FIRST re-ACKed */
	rx(SWV_OP_WRITE_LAST_IMM, 103, true, pattern + 256, 44);
	CHECK_EQ(ncomps, 4);
	CHECK_EQ(comps[2].slot, SWV_CNTR_REMOTE_RDMA_WRITE);
	CHECK_EQ(comps[2].bytes, 300);
	CHECK(comps[2].cq == NULL);
	CHECK_EQ(comps[3].slot, SWV_CNTR_RECV);
	CHECK_EQ(comps[3].wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(comps[3].wc.byte_len, 300);
	CHECK(memcmp(mem + 4096, pattern, 300) == 0);
	check_ack(7, SWV_AETH_ACK, 103, 3);
}

static void test_write(void)
{
	setup(IBV_QPT_RC);
	uint64_t va = (uintptr_t)mem + 1000;
	rx_reth(SWV_OP_WRITE_FIRST, 100, false, va, MEM_RKEY, 700, pattern, 256, 0);
	rx(SWV_OP_WRITE_MIDDLE, 101, false, pattern + 256, 256);
	CHECK_EQ(ncomps, 0);
	rx(SWV_OP_WRITE_LAST, 102, true, pattern + 512, 188);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].slot, SWV_CNTR_REMOTE_RDMA_WRITE);
	CHECK_EQ(comps[0].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(comps[0].bytes, 700);
	CHECK(memcmp(mem + 1000, pattern, 700) == 0);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_ACK, 102, 1);
	/* duplicate never re-counts */
	rx(SWV_OP_WRITE_LAST, 102, true, pattern, 188);
	CHECK_EQ(ncomps, 1);
	/* zero-length WRITE: no key check */
	rx_reth(SWV_OP_WRITE_ONLY, 103, true, 0, 0xbad, 0, NULL, 0, 0);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(comps[1].bytes, 0);
	CHECK_EQ(comps[1].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(to_error_calls, 0);
}

/* A refused request: NAK syndrome with the request PSN, QP -> ERR, the REMOTE_* error
 * count moves, and no byte of the guarded memory changes. */
static void expect_refused(uint8_t syndrome, uint32_t psn, enum swv_cntr_slot slot)
{
	CHECK_EQ(nsent, 1);
	check_ack(0, syndrome, psn, 0);
	CHECK_EQ(to_error_calls, 1);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].slot, slot);
	CHECK(comps[0].wc.status != IBV_WC_SUCCESS);
	CHECK(comps[0].cq == NULL);
	for (int i = 0; i < 65536; i++)
		if (mem[i] != 0) {
			fprintf(stderr, "byte %d modified\n", i);
			exit(1);
		}
}

static void test_write_errors(void)
{
	uint64_t va = (uintptr_t)mem + 4096;

	/* bad rkey */
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_WRITE_ONLY, 100, true, va, MEM_RKEY + 1, 16, pattern, 16, 0);
	expect_refused(SWV_AETH_NAK_ACCESS, 100, SWV_CNTR_REMOTE_RDMA_WRITE);
	/* range runs past the region end (also checked for the whole message at FIRST) */
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_WRITE_FIRST, 100, false, (uintptr_t)mem + 65536 - 256, MEM_RKEY, 512, pattern, 256, 0);
	expect_refused(SWV_AETH_NAK_ACCESS, 100, SWV_CNTR_REMOTE_RDMA_WRITE);
	/* wrapping VA */
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_WRITE_ONLY, 100, true, UINT64_MAX - 7, MEM_RKEY, 16, pattern, 16, 0);
	expect_refused(SWV_AETH_NAK_ACCESS, 100, SWV_CNTR_REMOTE_RDMA_WRITE);
	/* MR without REMOTE_WRITE */
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_WRITE_ONLY, 100, true, (uintptr_t)romem, RO_RKEY, 16, pattern, 16, 0);
	expect_refused(SWV_AETH_NAK_ACCESS, 100, SWV_CNTR_REMOTE_RDMA_WRITE);
	CHECK_EQ(romem[0], 0xee);
	/* QP without REMOTE_WRITE: invalid request */
	setup(IBV_QPT_RC);
	qp->attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	rx_reth(SWV_OP_WRITE_ONLY, 100, true, va, MEM_RKEY, 16, pattern, 16, 0);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_RDMA_WRITE);
	/* length: ONLY payload != RETH length */
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_WRITE_ONLY, 100, true, va, MEM_RKEY, 20, pattern, 16, 0);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_RDMA_WRITE);
	/* length: RETH > 2^31 */
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_WRITE_FIRST, 100, false, va, MEM_RKEY, 0x80000001u, pattern, 256, 0);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_RDMA_WRITE);
	/* length: FIRST payload != MTU */
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_WRITE_FIRST, 100, false, va, MEM_RKEY, 1000, pattern, 200, 0);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_RDMA_WRITE);
	/* sequence: MIDDLE without FIRST */
	setup(IBV_QPT_RC);
	rx(SWV_OP_WRITE_MIDDLE, 100, false, pattern, 256);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_RDMA_WRITE);

	/* LAST carrying more than the RETH said: refused, earlier packets stay placed */
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_WRITE_FIRST, 100, false, va, MEM_RKEY, 300, pattern, 256, 0);
	rx(SWV_OP_WRITE_LAST, 101, true, pattern, 100);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_NAK_INV, 101, 0);
	CHECK_EQ(comps[0].slot, SWV_CNTR_REMOTE_RDMA_WRITE);
	CHECK(comps[0].wc.status != IBV_WC_SUCCESS);
	CHECK_EQ(mem[4096 + 256], 0);

	/* new FIRST while a WRITE is in progress */
	setup(IBV_QPT_RC);
	post_recv(5, (uintptr_t)mem, 100, LKEY);
	rx_reth(SWV_OP_WRITE_FIRST, 100, false, va, MEM_RKEY, 600, pattern, 256, 0);
	rx(SWV_OP_SEND_ONLY, 101, true, pattern, 10);
	check_ack(0, SWV_AETH_NAK_INV, 101, 0);
	CHECK_EQ(to_error_calls, 1);
	CHECK_EQ(ncomps, 0); /* a SEND refused before it took a receive WQE */
}

static void test_recv_errors(void)
{
	/* receive buffer too small: NAK 0x61 and REM_INV_REQ_ERR on the receive WQE */
	setup(IBV_QPT_RC);
	post_recv(9, (uintptr_t)mem, 300, LKEY);
	rx(SWV_OP_SEND_FIRST, 100, false, pattern, 256);
	rx(SWV_OP_SEND_LAST, 101, true, pattern, 100);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_NAK_INV, 101, 0);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].slot, SWV_CNTR_RECV);
	CHECK_EQ(comps[0].wc.wr_id, 9);
	CHECK_EQ(comps[0].wc.status, IBV_WC_REM_INV_REQ_ERR);
	CHECK(comps[0].cq == RCQ);
	CHECK_EQ(qp->rq.head, 1);
	CHECK_EQ(to_error_calls, 1);
	CHECK_EQ(mem[300], 0); /* nothing beyond the buffer */

	/* malformed receive WQE (lkey of no MR): NAK 0x63, LOC_QP_OP_ERR */
	setup(IBV_QPT_RC);
	post_recv(10, (uintptr_t)mem, 300, 0x12345678);
	rx(SWV_OP_SEND_ONLY, 100, true, pattern, 100);
	check_ack(0, SWV_AETH_NAK_OP, 100, 0);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.wr_id, 10);
	CHECK_EQ(comps[0].wc.status, IBV_WC_LOC_QP_OP_ERR);
	CHECK_EQ(to_error_calls, 1);

	/* receive WQE pointing outside any MR */
	setup(IBV_QPT_RC);
	post_recv(11, (uintptr_t)mem + 65536 - 50, 300, LKEY);
	rx(SWV_OP_SEND_ONLY, 100, true, pattern, 100);
	check_ack(0, SWV_AETH_NAK_OP, 100, 0);
	CHECK_EQ(comps[0].wc.status, IBV_WC_LOC_QP_OP_ERR);

	/* SEND_WITH_INV: no R_Key can be invalidated: no NAK, REM_INV_REQ_ERR, ERR */
	setup(IBV_QPT_RC);
	post_recv(12, (uintptr_t)mem, 300, LKEY);
	rx(SWV_OP_SEND_ONLY_INV, 100, true, pattern, 10);
	check_ack(0, SWV_AETH_ACK, 100, 0);
	CHECK_EQ(comps[0].wc.status, IBV_WC_REM_INV_REQ_ERR);
	CHECK_EQ(to_error_calls, 1);

	/* in ERR every request vanishes */
	rx(SWV_OP_SEND_ONLY, 101, true, pattern, 10);
	CHECK_EQ(nsent, 1);
}

static void check_read_resp(int i, uint8_t op, uint32_t psn, const uint8_t *data, uint32_t len,
			    uint32_t msn)
{
	CHECK(i < nsent);
	CHECK_EQ(sent[i].p.opcode, op);
	CHECK_EQ(sent[i].p.psn, psn);
	CHECK_EQ(sent[i].p.paylen, len);
	CHECK(len == 0 || memcmp(sent[i].data, data, len) == 0);
	if (op != SWV_OP_READ_RESP_MIDDLE) {
		CHECK_EQ(sent[i].p.aeth_syndrome, SWV_AETH_ACK);
		CHECK_EQ(sent[i].p.aeth_msn, msn);
	}
}

static void test_read(void)
{
	setup(IBV_QPT_RC);
	memcpy(mem + 2048, pattern, 600);
	uint64_t va = (uintptr_t)mem + 2048;
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va, MEM_RKEY, 600, NULL, 0, 0);
	CHECK_EQ(nsent, 3);
	check_read_resp(0, SWV_OP_READ_RESP_FIRST, 100, pattern, 256, 1);
	check_read_resp(1, SWV_OP_READ_RESP_MIDDLE, 101, pattern + 256, 256, 1);
	check_read_resp(2, SWV_OP_READ_RESP_LAST, 102, pattern + 512, 88, 1);
	CHECK_EQ(qp->resp->epsn, 103);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].slot, SWV_CNTR_REMOTE_RDMA_READ);
	CHECK_EQ(comps[0].bytes, 600);

	/* next request after the READ's PSNs */
	rx_reth(SWV_OP_READ_REQUEST, 103, true, va, MEM_RKEY, 10, NULL, 0, 0);
	check_read_resp(3, SWV_OP_READ_RESP_ONLY, 103, pattern, 10, 2);
	CHECK_EQ(ncomps, 2);

	/* duplicate of the whole READ: replayed from memory, not counted again */
	nsent = 0;
	memset(mem + 2048 + 300, 0x77, 10); /* replays read memory as it is now */
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va, MEM_RKEY, 600, NULL, 0, 0);
	CHECK_EQ(nsent, 3);
	check_read_resp(0, SWV_OP_READ_RESP_FIRST, 100, pattern, 256, 2);
	CHECK_EQ(sent[1].data[300 - 256], 0x77);
	check_read_resp(2, SWV_OP_READ_RESP_LAST, 102, pattern + 512, 88, 2);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(qp->resp->epsn, 104);
	memcpy(mem + 2048, pattern, 600);

	/* mid-message restart: PSN 101, VA advanced by one MTU */
	nsent = 0;
	rx_reth(SWV_OP_READ_REQUEST, 101, true, va + 256, MEM_RKEY, 344, NULL, 0, 0);
	CHECK_EQ(nsent, 2);
	check_read_resp(0, SWV_OP_READ_RESP_MIDDLE, 101, pattern + 256, 256, 2);
	check_read_resp(1, SWV_OP_READ_RESP_LAST, 102, pattern + 512, 88, 2);
	/* restart at the last PSN */
	nsent = 0;
	rx_reth(SWV_OP_READ_REQUEST, 102, true, va + 512, MEM_RKEY, 88, NULL, 0, 0);
	CHECK_EQ(nsent, 1);
	check_read_resp(0, SWV_OP_READ_RESP_LAST, 102, pattern + 512, 88, 2);

	/* not a retry of what was read: dropped */
	nsent = 0;
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va, MEM_RKEY, 601, NULL, 0, 0);
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va - 8, MEM_RKEY, 600, NULL, 0, 0);
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va, RO_RKEY, 600, NULL, 0, 0);
	rx_reth(SWV_OP_READ_REQUEST, 101, true, va, MEM_RKEY, 600, NULL, 0, 0); /* more PSNs than left */
	rx_reth(SWV_OP_READ_REQUEST, 99, true, va, MEM_RKEY, 600, NULL, 0, 0);  /* no resource */
	CHECK_EQ(nsent, 0);
	CHECK_EQ(to_error_calls, 0);

	/* zero-length READ: one empty ONLY, no key check */
	rx_reth(SWV_OP_READ_REQUEST, 104, true, 0, 0, 0, NULL, 0, 0);
	CHECK_EQ(nsent, 1);
	check_read_resp(0, SWV_OP_READ_RESP_ONLY, 104, NULL, 0, 3);
	CHECK_EQ(qp->resp->epsn, 105);

	/* ring of 4: the oldest resource is recycled after 4 more */
	for (uint32_t i = 0; i < 4; i++)
		rx_reth(SWV_OP_READ_REQUEST, 105 + i, true, va, MEM_RKEY, 8, NULL, 0, 0);
	nsent = 0;
	rx_reth(SWV_OP_READ_REQUEST, 104, true, 0, 0, 0, NULL, 0, 0);
	CHECK_EQ(nsent, 0);
	rx_reth(SWV_OP_READ_REQUEST, 105, true, va, MEM_RKEY, 8, NULL, 0, 0);
	CHECK_EQ(nsent, 1);
}

/* The link refuses a READ response (a full ring or socket buffer): the rest is held, not
 * dropped -- a dropped one made the requester see a gap and spend a retry on a live
 * peer. Later responses of the QP wait behind it (a new READ, an atomic's answer, the
 * ACK of a WRITE), duplicates get nothing meanwhile, and swv_resp_tx_resume sends them
 * all in PSN order, the ACK last; REMOTE_RDMA_READ counts exactly once, just before a
 * READ's last response leaves. */
static void test_read_link_full(void)
{
	uint64_t va = (uintptr_t)mem;
	uint64_t *target = (uint64_t *)(mem + 4096);

	setup(IBV_QPT_RC);
	int t0 = timer_updates, e0 = to_error_calls;
	memcpy(mem, pattern, 600);
	*target = 40;
	xmit_fail_at = 1; /* MIDDLE of the first READ */
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va, MEM_RKEY, 600, NULL, 0, 0);
	CHECK_EQ(nsent, 1);
	CHECK(qp->resp->tx_retry_at != 0);
	CHECK_EQ(qp->resp->tx_psn, 101);
	CHECK_EQ(qp->resp->stats.tx_held, 1);
	CHECK_EQ(timer_updates, t0 + 1);
	CHECK_EQ(ncomps, 0);
	CHECK_EQ(qp->resp->epsn, 103);
	/* held: a re-request gets nothing, later requests execute but are not answered */
	rx_reth(SWV_OP_READ_REQUEST, 101, true, va + 256, MEM_RKEY, 344, NULL, 0, 0);
	rx_reth(SWV_OP_READ_REQUEST, 103, true, va + 8, MEM_RKEY, 10, NULL, 0, 0);
	rx_atomic(SWV_OP_FETCH_ADD, 104, (uintptr_t)target, MEM_RKEY, 2, 0);
	CHECK_EQ(*target, 42);
	rx_reth(SWV_OP_WRITE_ONLY, 105, true, va + 1024, MEM_RKEY, 4, pattern, 4, 0);
	CHECK_EQ(nsent, 1);
	CHECK_EQ(qp->resp->epsn, 106);
	CHECK_EQ(ncomps, 2); /* the atomic and the WRITE; neither READ yet */
	/* the link takes one more packet, then refuses again: still held, from 102 */
	xmit_fail_at = 2;
	swv_resp_tx_resume(qp);
	CHECK_EQ(nsent, 2);
	check_read_resp(1, SWV_OP_READ_RESP_MIDDLE, 101, pattern + 256, 256, 1);
	CHECK(qp->resp->tx_retry_at != 0);
	CHECK_EQ(qp->resp->tx_psn, 102);
	CHECK_EQ(qp->resp->tx_backoff, 2);
	/* then everything, in PSN order, the ACK last */
	swv_resp_tx_resume(qp);
	CHECK_EQ(qp->resp->tx_retry_at, 0);
	CHECK_EQ(qp->resp->tx_backoff, 0);
	CHECK_EQ(nsent, 6);
	/* each with the MSN it had when it executed */
	check_read_resp(2, SWV_OP_READ_RESP_LAST, 102, pattern + 512, 88, 1);
	check_read_resp(3, SWV_OP_READ_RESP_ONLY, 103, pattern + 8, 10, 2);
	CHECK_EQ(sent[4].p.opcode, SWV_OP_ATOMIC_ACK);
	CHECK_EQ(sent[4].p.psn, 104);
	CHECK_EQ(sent[4].p.atmack_orig, 40);
	CHECK_EQ(sent[4].p.aeth_msn, 3);
	check_ack(5, SWV_AETH_ACK, 105, 4);
	CHECK_EQ(ncomps, 4);
	CHECK_EQ(comps[2].slot, SWV_CNTR_REMOTE_RDMA_READ);
	CHECK_EQ(comps[2].bytes, 600);
	CHECK_EQ(comps[3].slot, SWV_CNTR_REMOTE_RDMA_READ);
	CHECK_EQ(comps[3].bytes, 10);
	/* a replay counts nothing more; not held, it is answered at once */
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va, MEM_RKEY, 600, NULL, 0, 0);
	CHECK_EQ(nsent, 9);
	CHECK_EQ(ncomps, 4);

	/* an error NAK is not held: the QP goes to ERR and nothing held is sent after it */
	xmit_fail_at = nsent;
	rx_reth(SWV_OP_READ_REQUEST, 106, true, va, MEM_RKEY, 600, NULL, 0, 0);
	CHECK(qp->resp->tx_retry_at != 0);
	rx_reth(SWV_OP_WRITE_ONLY, 109, true, (uintptr_t)romem, RO_RKEY, 4, pattern, 4, 0);
	CHECK_EQ(nsent, 10);
	check_ack(9, SWV_AETH_NAK_ACCESS, 109, 5);
	CHECK_EQ(to_error_calls, e0 + 1);
	CHECK_EQ(qp->resp->tx_retry_at, 0);
}

static void test_read_errors(void)
{
	uint64_t va = (uintptr_t)mem;

	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va, MEM_RKEY ^ 0x100, 8, NULL, 0, 0);
	expect_refused(SWV_AETH_NAK_ACCESS, 100, SWV_CNTR_REMOTE_RDMA_READ);
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va + 65536 - 4, MEM_RKEY, 8, NULL, 0, 0);
	expect_refused(SWV_AETH_NAK_ACCESS, 100, SWV_CNTR_REMOTE_RDMA_READ);
	setup(IBV_QPT_RC);
	qp->attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va, MEM_RKEY, 8, NULL, 0, 0);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_RDMA_READ);
	setup(IBV_QPT_RC);
	qp->attr.max_dest_rd_atomic = 0;
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va, MEM_RKEY, 8, NULL, 0, 0);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_RDMA_READ);
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_READ_REQUEST, 100, true, va, MEM_RKEY, 0x80000001u, NULL, 0, 0);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_RDMA_READ);
}

static void test_atomic(void)
{
	setup(IBV_QPT_RC);
	uint64_t *target = (uint64_t *)(mem + 512);
	*target = 1000;
	rx_atomic(SWV_OP_FETCH_ADD, 100, (uintptr_t)target, MEM_RKEY, 5, 0);
	CHECK_EQ(*target, 1005);
	CHECK_EQ(nsent, 1);
	CHECK_EQ(sent[0].p.opcode, SWV_OP_ATOMIC_ACK);
	CHECK_EQ(sent[0].p.psn, 100);
	CHECK_EQ(sent[0].p.atmack_orig, 1000);
	CHECK_EQ(sent[0].p.aeth_syndrome, SWV_AETH_ACK);
	CHECK_EQ(sent[0].p.aeth_msn, 1);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].slot, SWV_CNTR_REMOTE_ATOMIC);
	CHECK_EQ(comps[0].bytes, 8);
	CHECK_EQ(qp->resp->epsn, 101);

	rx_atomic(SWV_OP_CMP_SWAP, 101, (uintptr_t)target, MEM_RKEY, 77, 1005);
	CHECK_EQ(*target, 77);
	CHECK_EQ(sent[1].p.atmack_orig, 1005);

	/* duplicates: the saved value, never executed twice, not counted */
	rx_atomic(SWV_OP_FETCH_ADD, 100, (uintptr_t)target, MEM_RKEY, 5, 0);
	rx_atomic(SWV_OP_CMP_SWAP, 101, (uintptr_t)target, MEM_RKEY, 77, 1005);
	CHECK_EQ(*target, 77);
	CHECK_EQ(atomic_execs, 2);
	CHECK_EQ(nsent, 4);
	CHECK_EQ(sent[2].p.opcode, SWV_OP_ATOMIC_ACK);
	CHECK_EQ(sent[2].p.atmack_orig, 1000);
	CHECK_EQ(sent[2].p.psn, 100);
	CHECK_EQ(sent[3].p.atmack_orig, 1005);
	CHECK_EQ(ncomps, 2);
	/* a duplicate that does not match the saved request is dropped */
	rx_atomic(SWV_OP_FETCH_ADD, 101, (uintptr_t)target, MEM_RKEY, 5, 0);
	CHECK_EQ(nsent, 4);

	/* a READ duplicate with an atomic's PSN is not replayed */
	rx_reth(SWV_OP_READ_REQUEST, 100, true, (uintptr_t)target, MEM_RKEY, 8, NULL, 0, 0);
	CHECK_EQ(nsent, 4);
	CHECK_EQ(to_error_calls, 0);

	/* misaligned: invalid request; bad key: access error; no right: invalid request */
	setup(IBV_QPT_RC);
	rx_atomic(SWV_OP_FETCH_ADD, 100, (uintptr_t)mem + 4, MEM_RKEY, 1, 0);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_ATOMIC);
	setup(IBV_QPT_RC);
	rx_atomic(SWV_OP_FETCH_ADD, 100, (uintptr_t)mem, RO_RKEY, 1, 0);
	expect_refused(SWV_AETH_NAK_ACCESS, 100, SWV_CNTR_REMOTE_ATOMIC);
	setup(IBV_QPT_RC);
	qp->attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	rx_atomic(SWV_OP_FETCH_ADD, 100, (uintptr_t)mem, MEM_RKEY, 1, 0);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_ATOMIC);
	setup(IBV_QPT_RC);
	qp->attr.max_dest_rd_atomic = 0;
	rx_atomic(SWV_OP_CMP_SWAP, 100, (uintptr_t)mem, MEM_RKEY, 1, 0);
	expect_refused(SWV_AETH_NAK_INV, 100, SWV_CNTR_REMOTE_ATOMIC);
}

static void test_psn_wrap(void)
{
	setup(IBV_QPT_RC);
	qp->attr.rq_psn = 0xffffff;
	swv_resp_reset(qp);
	memcpy(mem, pattern, 600);
	rx_reth(SWV_OP_READ_REQUEST, 0xffffff, true, (uintptr_t)mem, MEM_RKEY, 600, NULL, 0, 0);
	CHECK_EQ(nsent, 3);
	CHECK_EQ(sent[0].p.psn, 0xffffff);
	CHECK_EQ(sent[1].p.psn, 0);
	CHECK_EQ(sent[2].p.psn, 1);
	CHECK_EQ(qp->resp->epsn, 2);
	nsent = 0;
	rx_reth(SWV_OP_READ_REQUEST, 0, true, (uintptr_t)mem + 256, MEM_RKEY, 344, NULL, 0, 0);
	CHECK_EQ(nsent, 2);
	/* a duplicate from before the wrap is a duplicate, not a gap */
	post_recv(1, (uintptr_t)mem + 8192, 100, LKEY);
	rx(SWV_OP_SEND_ONLY, 0xfffffe, true, pattern, 10);
	check_ack(2, SWV_AETH_ACK, 1, 1);
	rx(SWV_OP_SEND_ONLY, 2, true, pattern, 10);
	CHECK_EQ(ncomps, 2);
	check_ack(3, SWV_AETH_ACK, 2, 2);
}

static void test_uc(void)
{
	setup(IBV_QPT_UC);
	post_recv(1, (uintptr_t)mem, 1000, LKEY);
	post_recv(2, (uintptr_t)mem + 1000, 1000, LKEY);
	/* FIRST, (MIDDLE lost), LAST: the message is dropped, no NAK */
	rx(SWV_OP_SEND_FIRST, 100, true, pattern, 256);
	rx(SWV_OP_SEND_LAST, 102, true, pattern, 10);
	CHECK_EQ(ncomps, 0);
	/* the next message uses the same receive WQE */
	rx(SWV_OP_SEND_ONLY, 103, true, pattern + 1, 20);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.wr_id, 1);
	CHECK_EQ(comps[0].wc.byte_len, 20);
	/* a FIRST after a gap resumes */
	rx(SWV_OP_SEND_FIRST, 110, true, pattern, 256);
	rx(SWV_OP_SEND_LAST, 111, true, pattern, 10);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(comps[1].wc.wr_id, 2);
	CHECK_EQ(comps[1].wc.byte_len, 266);
	/* WRITE with a bad key: dropped, counted as refused */
	rx_reth(SWV_OP_WRITE_ONLY, 112, true, (uintptr_t)mem, 0xbad, 8, pattern, 8, 0);
	CHECK_EQ(ncomps, 3);
	CHECK_EQ(comps[2].slot, SWV_CNTR_REMOTE_RDMA_WRITE);
	CHECK(comps[2].wc.status != IBV_WC_SUCCESS);
	/* no receive WQE: dropped (no RNR on UC) */
	rx(SWV_OP_SEND_ONLY, 113, true, pattern, 8);
	CHECK_EQ(ncomps, 3);
	rx_reth(SWV_OP_WRITE_ONLY, 114, true, (uintptr_t)mem + 4096, MEM_RKEY, 8, pattern, 8, 0);
	CHECK_EQ(ncomps, 4);
	CHECK_EQ(comps[3].wc.status, IBV_WC_SUCCESS);
	CHECK(memcmp(mem + 4096, pattern, 8) == 0);
	CHECK_EQ(nsent, 0); /* UC never answers */
	CHECK_EQ(to_error_calls, 0);
	/* RC opcodes are not for UC */
	qp->resp->stats.dropped = 0;
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = SWV_OP_SEND_ONLY;
	p.psn = 115;
	swv_resp_rx(qp, &p);
	CHECK_EQ(qp->resp->stats.dropped, 1);
}

/* Refused remote accesses are counted per QP (remote_refused; faults also in
 * remote_faults), on RC where they are NAKed and on UC where they vanish; refusals
 * that are not the MR's (QP access flags) are not. Memory that faults is refused as a
 * protection error: NAK 0x62 for WRITE/READ/atomic, and for a SEND a NAK 0x63 with
 * LOC_PROT_ERR on the receive WQE. */
static void test_refusal_stats(void)
{
	const struct swv_resp_stats *st;
	uint64_t fva = (uintptr_t)fmem;

	setup(IBV_QPT_RC);
	st = &qp->resp->stats;
	rx_reth(SWV_OP_WRITE_ONLY, 100, true, (uintptr_t)mem, MEM_RKEY ^ 0x80, 16, pattern, 16, 0);
	CHECK_EQ(st->remote_refused, 1);
	CHECK_EQ(st->remote_faults, 0);

	setup(IBV_QPT_RC); /* write into memory that faults */
	st = &qp->resp->stats;
	rx_reth(SWV_OP_WRITE_ONLY, 100, true, fva, FAULT_RKEY, 16, pattern, 16, 0);
	expect_refused(SWV_AETH_NAK_ACCESS, 100, SWV_CNTR_REMOTE_RDMA_WRITE);
	CHECK_EQ(st->remote_refused, 1);
	CHECK_EQ(st->remote_faults, 1);

	setup(IBV_QPT_RC); /* read from it */
	st = &qp->resp->stats;
	rx_reth(SWV_OP_READ_REQUEST, 100, true, fva, FAULT_RKEY, 600, NULL, 0, 0);
	CHECK_EQ(sent[nsent - 1].p.opcode, SWV_OP_ACK);
	CHECK_EQ(sent[nsent - 1].p.aeth_syndrome, SWV_AETH_NAK_ACCESS);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(st->remote_refused, 1);
	CHECK_EQ(st->remote_faults, 1);

	setup(IBV_QPT_RC); /* an atomic on it */
	st = &qp->resp->stats;
	rx_atomic(SWV_OP_FETCH_ADD, 100, fva, FAULT_RKEY, 1, 0);
	expect_refused(SWV_AETH_NAK_ACCESS, 100, SWV_CNTR_REMOTE_ATOMIC);
	CHECK_EQ(st->remote_refused, 1);
	CHECK_EQ(st->remote_faults, 1);

	setup(IBV_QPT_RC); /* missing MR right, out of bounds: counted; QP flags: not */
	st = &qp->resp->stats;
	rx_reth(SWV_OP_WRITE_ONLY, 100, true, (uintptr_t)romem, RO_RKEY, 16, pattern, 16, 0);
	setup(IBV_QPT_RC);
	st = &qp->resp->stats;
	qp->attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	rx_reth(SWV_OP_WRITE_ONLY, 100, true, (uintptr_t)mem, MEM_RKEY, 16, pattern, 16, 0);
	CHECK_EQ(st->remote_refused, 0);

	setup(IBV_QPT_RC); /* SEND into a receive buffer that faults */
	st = &qp->resp->stats;
	post_recv(7, fva, 100, FAULT_LKEY);
	rx(SWV_OP_SEND_ONLY, 100, true, pattern, 50);
	check_ack(0, SWV_AETH_NAK_OP, 100, 0);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.wr_id, 7);
	CHECK_EQ(comps[0].wc.status, IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(st->remote_refused, 0); /* a local failure, not a refused peer */

	/* UC: every refused WRITE counts though nothing answers (a peer guessing keys) */
	setup(IBV_QPT_UC);
	st = &qp->resp->stats;
	for (uint32_t i = 0; i < 5; i++)
		rx_reth(SWV_OP_WRITE_ONLY, 100 + i, false, (uintptr_t)mem, MEM_RKEY + 1 + i, 8,
			pattern, 8, 0);
	rx_reth(SWV_OP_WRITE_ONLY, 105, false, fva, FAULT_RKEY, 8, pattern, 8, 0);
	rx_reth(SWV_OP_WRITE_ONLY, 106, false, (uintptr_t)mem, MEM_RKEY, 8, pattern, 8, 0);
	CHECK_EQ(st->remote_refused, 6);
	CHECK_EQ(st->remote_faults, 1);
	CHECK_EQ(nsent, 0);
	CHECK(memcmp(mem, pattern, 8) == 0); /* the right key still works */

	/* UC SEND into a faulting buffer: LOC_PROT_ERR, QP to ERR as for a bad WQE */
	setup(IBV_QPT_UC);
	post_recv(8, fva, 100, FAULT_LKEY);
	rx(SWV_OP_SEND_ONLY, 100, false, pattern, 50);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.status, IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
}

static void test_ud(void)
{
	setup(IBV_QPT_UD);
	post_recv(1, (uintptr_t)mem, 200, LKEY);
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = SWV_OP_UD | SWV_OP_SEND_ONLY_IMM;
	p.psn = 5;
	p.deth_qkey = 0x1111;
	p.deth_sqpn = 0x999;
	p.deth_rsvd = SWV_DETH_GRH | 3; /* the sender's AV had a GRH, SL 3 */
	p.imm = 0x01020304;
	p.payload = pattern;
	p.paylen = 100;
	swv_resp_rx(qp, &p);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.byte_len, 140);
	CHECK_EQ(comps[0].wc.src_qp, 0x999);
	CHECK(comps[0].wc.wc_flags & IBV_WC_GRH);
	CHECK(comps[0].wc.wc_flags & IBV_WC_WITH_IMM);
	CHECK_EQ(comps[0].wc.sl, 3);
	CHECK_EQ(mem[0], 0x60); /* IB GRH: IP version 6 (no context: IB-style port) */
	CHECK(memcmp(mem + 40, pattern, 100) == 0);
	/* No GRH on an IB-style port: no IBV_WC_GRH, the 40-byte area is not written,
	 * byte_len still counts it (the payload always starts at +40). */
	post_recv(9, (uintptr_t)mem + 2000, 200, LKEY);
	memset(mem + 2000, 0xab, 40);
	p.deth_rsvd = 0;
	swv_resp_rx(qp, &p);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(comps[1].wc.wr_id, 9);
	CHECK_EQ(comps[1].wc.byte_len, 140);
	CHECK_EQ(comps[1].wc.wc_flags & IBV_WC_GRH, 0);
	CHECK_EQ(comps[1].wc.sl, 0);
	for (int i = 0; i < 40; i++)
		CHECK_EQ(mem[2000 + i], 0xab);
	CHECK(memcmp(mem + 2040, pattern, 100) == 0);
	ncomps = 1; /* the checks below count from the first completion */
	/* wrong Q_Key, too large for the buffer: dropped without consuming the WQE */
	post_recv(2, (uintptr_t)mem + 1000, 100, LKEY);
	p.deth_qkey = 0x2222;
	swv_resp_rx(qp, &p);
	p.deth_qkey = 0x1111;
	p.paylen = 61;
	swv_resp_rx(qp, &p);
	CHECK_EQ(ncomps, 1);
	p.paylen = 60;
	swv_resp_rx(qp, &p);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(comps[1].wc.wr_id, 2);
	CHECK_EQ(nsent, 0);
}

/* The second sequence NAK for a gap goes out only when the requester has visibly gone
 * back (a PSN at or below the one that exposed the gap arrives again), never for the
 * reordering or duplicates of the original burst: with PSN 100 lost, 101 103 102 104
 * 105 105 used to draw three NAKs, each costing the requester a retry. */
static void test_nak_again_only_after_resend(void)
{
	setup(IBV_QPT_RC);
	for (int i = 0; i < 8; i++)
		post_recv(1 + (uint64_t)i, (uintptr_t)mem + 256 * (uint64_t)i, 256, LKEY);
	static const uint32_t order[] = {101, 103, 102, 104, 105, 105};
	for (unsigned i = 0; i < SWV_ARRAY_SIZE(order); i++)
		rx(SWV_OP_SEND_ONLY, order[i], true, pattern, 10);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_NAK_PSN, 100, 0);
	rx(SWV_OP_SEND_ONLY, 101, true, pattern, 10); /* the resend, 100 lost again */
	CHECK_EQ(nsent, 2);
	check_ack(1, SWV_AETH_NAK_PSN, 100, 0);
	rx(SWV_OP_SEND_ONLY, 102, true, pattern, 10); /* the rest of that resend */
	CHECK_EQ(nsent, 2);
}

/* ------------------------------------------------------------------ reorder buffer */

static unsigned rob_count(void)
{
	return qp->resp->rob ? qp->resp->rob->count : 0;
}

/* SEND/WRITE packets past a gap are kept and run in PSN order once it fills, through
 * the same checks and execution: completions in PSN order, the WRITE counted once
 * after its last byte, one ACK for the new epsn - 1, the buffer freed. */
static void test_rob_drain(void)
{
	setup(IBV_QPT_RC);
	post_recv(1, (uintptr_t)mem, 100, LKEY);
	post_recv(2, (uintptr_t)mem + 100, 100, LKEY);
	post_recv(3, (uintptr_t)mem + 200, 100, LKEY);
	uint64_t va = (uintptr_t)mem + 4096;
	/* 100 lost; 101 SEND, 102..104 a 600-byte WRITE, 105 SEND arrive, LAST first */
	rx(SWV_OP_SEND_ONLY, 101, false, pattern + 10, 10);
	rx(SWV_OP_WRITE_LAST, 104, true, pattern + 512, 88);
	rx_reth(SWV_OP_WRITE_FIRST, 102, false, va, MEM_RKEY, 600, pattern, 256, 0);
	rx(SWV_OP_WRITE_MIDDLE, 103, false, pattern + 256, 256);
	rx(SWV_OP_SEND_ONLY, 105, true, pattern + 20, 10);
	CHECK_EQ(nsent, 1); /* one NAK for the gap, kept packets are silent */
	check_ack(0, SWV_AETH_NAK_PSN, 100, 0);
	CHECK_EQ(ncomps, 0);
	CHECK_EQ(rob_count(), 5);
	CHECK_EQ(qp->resp->stats.rob_kept, 5);
	CHECK_EQ(qp->resp->epsn, 100);
	/* the resend of 100 (AckReq, as the requester sends it) */
	rx(SWV_OP_SEND_ONLY, 100, true, pattern, 10);
	CHECK_EQ(qp->resp->epsn, 106);
	CHECK_EQ(ncomps, 4);
	CHECK_EQ(comps[0].wc.wr_id, 1);
	CHECK_EQ(comps[1].wc.wr_id, 2);
	CHECK_EQ(comps[2].slot, SWV_CNTR_REMOTE_RDMA_WRITE);
	CHECK_EQ(comps[2].bytes, 600);
	CHECK_EQ(comps[3].wc.wr_id, 3);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
	CHECK(memcmp(mem, pattern, 10) == 0);
	CHECK(memcmp(mem + 100, pattern + 10, 10) == 0);
	CHECK(memcmp(mem + 200, pattern + 20, 10) == 0);
	CHECK(memcmp(mem + 4096, pattern, 600) == 0);
	CHECK_EQ(nsent, 2); /* one ACK for everything that ran */
	check_ack(1, SWV_AETH_ACK, 105, 4);
	CHECK(qp->resp->rob == NULL);
	CHECK_EQ(qp->resp->stats.rob_drained, 5);
	/* what was kept and ran is a duplicate now */
	rx(SWV_OP_SEND_ONLY, 103, true, pattern, 10);
	check_ack(2, SWV_AETH_ACK, 105, 4);
	CHECK_EQ(ncomps, 4);

	/* without AckReq on the packet that fills the gap, the drain still ACKs */
	rx(SWV_OP_SEND_ONLY, 107, false, pattern, 0);
	check_ack(3, SWV_AETH_NAK_PSN, 106, 4);
	post_recv(4, (uintptr_t)mem, 100, LKEY);
	post_recv(5, (uintptr_t)mem, 100, LKEY);
	rx(SWV_OP_SEND_ONLY, 106, false, pattern, 0);
	CHECK_EQ(ncomps, 6);
	check_ack(4, SWV_AETH_ACK, 107, 6);
	CHECK_EQ(to_error_calls, 0);
}

/* Two gaps: the drain stops at the second and NAKs it (the NAK acknowledges what ran);
 * a copy of a kept packet is dropped; a copy at or below the PSN that exposed the gap
 * makes the responder NAK again (the requester went back), one above it does not. */
static void test_rob_second_gap_and_dup(void)
{
	setup(IBV_QPT_RC);
	for (int i = 0; i < 6; i++)
		post_recv(10 + i, (uintptr_t)mem + 100 * i, 100, LKEY);
	rx(SWV_OP_SEND_ONLY, 101, true, pattern + 1, 10);
	rx(SWV_OP_SEND_ONLY, 103, true, pattern + 3, 10);
	rx(SWV_OP_SEND_ONLY, 104, true, pattern + 4, 10);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_NAK_PSN, 100, 0);
	rx(SWV_OP_SEND_ONLY, 103, true, pattern + 3, 10); /* a copy, above 101: a duplicate */
	CHECK_EQ(qp->resp->stats.rob_dups, 1);
	CHECK_EQ(rob_count(), 3);
	CHECK_EQ(nsent, 1);
	rx(SWV_OP_SEND_ONLY, 101, true, pattern + 1, 10); /* a copy of 101: a resend */
	CHECK_EQ(qp->resp->stats.rob_dups, 2);
	CHECK_EQ(nsent, 2);
	check_ack(1, SWV_AETH_NAK_PSN, 100, 0); /* again */
	CHECK_EQ(ncomps, 0);
	rx(SWV_OP_SEND_ONLY, 100, true, pattern, 10);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(nsent, 3);
	check_ack(2, SWV_AETH_NAK_PSN, 102, 2); /* the new gap, nothing else */
	CHECK_EQ(rob_count(), 2);
	rx(SWV_OP_SEND_ONLY, 102, true, pattern + 2, 10);
	CHECK_EQ(ncomps, 5);
	for (int i = 0; i < 5; i++) {
		CHECK_EQ(comps[i].wc.wr_id, 10u + i);
		CHECK(memcmp(mem + 100 * i, pattern + i, 10) == 0);
	}
	check_ack(3, SWV_AETH_ACK, 104, 5);
	CHECK_EQ(nsent, 4);
	CHECK(qp->resp->rob == NULL);
	CHECK_EQ(qp->resp->stats.executed, 5);
}

/* Only PSNs up to epsn + SWV_ROB_SLOTS - 1 are kept; further ones are dropped. An
 * atomic past a gap is not kept; a READ in order before kept packets runs and the drain
 * continues behind its response PSNs. A kept packet refused when it runs gets the same
 * NAK as in order. RESET frees the buffer (ASan: no leak). */
static void test_rob_limits(void)
{
	setup(IBV_QPT_RC);
	rx_reth(SWV_OP_WRITE_ONLY, 100 + SWV_ROB_SLOTS, true, (uintptr_t)mem, MEM_RKEY, 4, pattern,
		4, 0);
	CHECK_EQ(qp->resp->stats.rob_full, 1);
	CHECK(qp->resp->rob == NULL);
	rx_reth(SWV_OP_WRITE_ONLY, 100 + SWV_ROB_SLOTS - 1, true, (uintptr_t)mem, MEM_RKEY, 4,
		pattern, 4, 0);
	CHECK_EQ(rob_count(), 1);
	/* an atomic is not kept; below a PSN seen since the NAK, it is taken for a resend
	 * (the gap's NAK again) */
	rx_atomic(SWV_OP_FETCH_ADD, 101, (uintptr_t)mem + 512, MEM_RKEY, 1, 0);
	CHECK_EQ(rob_count(), 1);
	CHECK_EQ(nsent, 2);
	check_ack(1, SWV_AETH_NAK_PSN, 100, 0);
	swv_resp_reset(qp);
	CHECK(qp->resp->rob == NULL);
	CHECK_EQ(qp->resp->epsn, 100);

	/* READ 100 (3 response PSNs 100..102) in order, WRITE 103 kept */
	memcpy(mem + 8192, pattern, 600);
	rx_reth(SWV_OP_WRITE_ONLY, 103, true, (uintptr_t)mem, MEM_RKEY, 4, pattern, 4, 0);
	CHECK_EQ(rob_count(), 1);
	nsent = 0;
	rx_reth(SWV_OP_READ_REQUEST, 100, true, (uintptr_t)mem + 8192, MEM_RKEY, 600, NULL, 0, 0);
	CHECK_EQ(qp->resp->epsn, 104);
	CHECK_EQ(nsent, 4); /* three responses, then the ACK for the WRITE that ran */
	check_ack(3, SWV_AETH_ACK, 103, 2);
	CHECK(qp->resp->rob == NULL);

	/* a kept WRITE with a bad R_Key: refused when it runs, as in order */
	rx_reth(SWV_OP_WRITE_ONLY, 105, true, (uintptr_t)mem, 0xbad, 4, pattern, 4, 0);
	nsent = ncomps = 0;
	rx_reth(SWV_OP_WRITE_ONLY, 104, true, (uintptr_t)mem, MEM_RKEY, 4, pattern, 4, 0);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(comps[0].wc.status, IBV_WC_SUCCESS);
	CHECK(comps[1].wc.status != IBV_WC_SUCCESS);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_NAK_ACCESS, 105, 3);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	swv_resp_reset(qp);
	CHECK(qp->resp->rob == NULL);

	/* RESET with packets kept frees them */
	qp->state = IBV_QPS_RTS;
	rx(SWV_OP_SEND_ONLY, 102, true, pattern, 10);
	rx(SWV_OP_SEND_ONLY, 103, true, pattern, 10);
	CHECK_EQ(rob_count(), 2);
	swv_resp_reset(qp);
	CHECK(qp->resp->rob == NULL);
}

/* READ requests past a gap are kept too and run in PSN order when it fills: a lost
 * request (or one the network reordered) no longer makes the requester send every READ
 * after it again, each then replayed in full. The drain answers each READ with its
 * responses, continues behind its response PSNs, and ACKs the SEND after it; the READ
 * is counted once; a copy of a kept READ is dropped as a copy. */
static void test_rob_read(void)
{
	setup(IBV_QPT_RC);
	post_recv(1, (uintptr_t)mem, 100, LKEY);
	post_recv(2, (uintptr_t)mem + 100, 100, LKEY);
	memcpy(mem + 8192, pattern, 600);
	/* 100 lost; READ 101 (600 bytes: response PSNs 101..103), SEND 104 */
	rx_reth(SWV_OP_READ_REQUEST, 101, true, (uintptr_t)mem + 8192, MEM_RKEY, 600, NULL, 0, 0);
	rx(SWV_OP_SEND_ONLY, 104, true, pattern + 4, 10);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_NAK_PSN, 100, 0);
	CHECK_EQ(rob_count(), 2);
	/* a copy of the kept READ, at the PSN that exposed the gap: the requester went
	 * back (the NAK again of test_rob_second_gap_and_dup), not a second READ */
	rx_reth(SWV_OP_READ_REQUEST, 101, true, (uintptr_t)mem + 8192, MEM_RKEY, 600, NULL, 0, 0);
	CHECK_EQ(qp->resp->stats.rob_dups, 1);
	CHECK_EQ(rob_count(), 2);
	CHECK_EQ(nsent, 2);
	check_ack(1, SWV_AETH_NAK_PSN, 100, 0);
	rx(SWV_OP_SEND_ONLY, 100, true, pattern, 10);
	CHECK_EQ(qp->resp->epsn, 105);
	CHECK_EQ(nsent, 6); /* three READ responses, then one ACK */
	for (int i = 2; i < 5; i++) {
		CHECK_EQ(sent[i].p.opcode, i == 2   ? SWV_OP_READ_RESP_FIRST
					   : i == 4 ? SWV_OP_READ_RESP_LAST
						    : SWV_OP_READ_RESP_MIDDLE);
		CHECK_EQ(sent[i].p.psn, 99u + (uint32_t)i);
	}
	CHECK(memcmp(sent[2].data, pattern, sent[2].p.paylen) == 0);
	check_ack(5, SWV_AETH_ACK, 104, 3);
	CHECK_EQ(ncomps, 3); /* RECV, REMOTE_RDMA_READ once, RECV */
	CHECK_EQ(comps[0].wc.wr_id, 1);
	CHECK_EQ(comps[1].slot, SWV_CNTR_REMOTE_RDMA_READ);
	CHECK_EQ(comps[2].wc.wr_id, 2);
	CHECK(qp->resp->rob == NULL);
	CHECK_EQ(to_error_calls, 0);
}

/* PSN wrap: a gap at 0xffffff with packets kept at 0 and 1. */
static void test_rob_psn_wrap(void)
{
	setup(IBV_QPT_RC);
	qp->attr.rq_psn = 0xfffffe;
	swv_resp_reset(qp);
	for (int i = 0; i < 4; i++)
		post_recv(20 + i, (uintptr_t)mem + 100 * i, 100, LKEY);
	rx(SWV_OP_SEND_ONLY, 0, false, pattern + 2, 10);
	rx(SWV_OP_SEND_ONLY, 1, true, pattern + 3, 10);
	check_ack(0, SWV_AETH_NAK_PSN, 0xfffffe, 0);
	CHECK_EQ(rob_count(), 2);
	rx(SWV_OP_SEND_ONLY, 0xfffffe, true, pattern, 10);
	check_ack(1, SWV_AETH_NAK_PSN, 0xffffff, 1);
	rx(SWV_OP_SEND_ONLY, 0xffffff, false, pattern + 1, 10);
	check_ack(2, SWV_AETH_ACK, 1, 4);
	CHECK_EQ(ncomps, 4);
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(comps[i].wc.wr_id, 20u + i);
		CHECK(memcmp(mem + 100 * i, pattern + i, 10) == 0);
	}
	CHECK(qp->resp->rob == NULL);
	CHECK_EQ(qp->resp->epsn, 2);
}

/* While an RNR NAK is waited out nothing is kept: the requester resends from epsn. */
static void test_rob_rnr(void)
{
	setup(IBV_QPT_RC);
	rx(SWV_OP_SEND_ONLY, 100, true, pattern, 10); /* no receive WQE */
	check_ack(0, SWV_AETH_RNR | 12, 100, 0);
	rx(SWV_OP_SEND_ONLY, 101, true, pattern, 10);
	CHECK_EQ(nsent, 1);
	CHECK(qp->resp->rob == NULL);
	CHECK_EQ(qp->resp->stats.dropped, 1);
}

/* Whether sent[i] carries a map holding exactly the PSNs listed (bit k: first + 1 + k). */
static void check_map(int i, uint32_t first, uint32_t len, const uint32_t *held, int nheld)
{
	uint8_t want[SWV_SACK_MAX_LEN] = {0};
	for (int k = 0; k < nheld; k++) {
		uint32_t b = held[k] - first - 1;
		want[b / 8] |= (uint8_t)(1u << (b % 8));
	}
	CHECK(sent[i].p.sack);
	CHECK_PTR(sent[i].p.sack_map);
	CHECK_EQ(sent[i].p.sack_len, len);
	CHECK(memcmp(sent[i].p.sack_map, want, len) == 0);
}

/* Selective ACK (docs/wire.md): to a requester whose packets carry SWV_BTH_SACK, a
 * sequence NAK carries the map of what the reorder buffer holds; a kept packet asking
 * for an ACK after a new hole opened (not the one that opened it) draws an ACK for
 * epsn - 1 with the map; the NAK after a drain carries the map past the new gap. */
static void test_sack_map(void)
{
	setup(IBV_QPT_RC);
	for (int i = 0; i < 8; i++)
		post_recv(10 + i, (uintptr_t)mem + 100 * i, 100, LKEY);
	rx_sack = true;
	rx(SWV_OP_SEND_ONLY, 101, true, pattern + 1, 10);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_NAK_PSN, 100, 0);
	const uint32_t h0[] = {101};
	check_map(0, 100, 4, h0, 1);
	rx(SWV_OP_SEND_ONLY, 103, true, pattern + 3, 10); /* opens hole 102: not yet news */
	CHECK_EQ(nsent, 1);
	rx(SWV_OP_SEND_ONLY, 104, true, pattern + 4, 10);
	CHECK_EQ(nsent, 2);
	check_ack(1, SWV_AETH_ACK, 99, 0);
	const uint32_t h1[] = {101, 103, 104};
	check_map(1, 100, 4, h1, 3);
	rx(SWV_OP_SEND_ONLY, 105, true, pattern + 5, 10); /* nothing new */
	rx(SWV_OP_SEND_ONLY, 400, false, pattern, 10);	  /* far: the map grows to 40 bytes */
	rx(SWV_OP_SEND_ONLY, 401, true, pattern, 10);
	CHECK_EQ(nsent, 3);
	check_ack(2, SWV_AETH_ACK, 99, 0);
	const uint32_t h2[] = {101, 103, 104, 105, 400, 401};
	check_map(2, 100, 40, h2, 6);
	CHECK_EQ(ncomps, 0); /* nothing kept executes before the gap fills */
	rx(SWV_OP_SEND_ONLY, 100, true, pattern, 10);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(nsent, 4);
	check_ack(3, SWV_AETH_NAK_PSN, 102, 2);
	const uint32_t h3[] = {103, 104, 105, 400, 401};
	check_map(3, 102, 40, h3, 5);
	CHECK_EQ(qp->resp->stats.sack_naks, 2u);
	CHECK_EQ(qp->resp->stats.sack_acks, 2u);
	CHECK_EQ(qp->resp->stats.seq_naks, 2u);
	rx_sack = false;
}

/* A requester that never said it reads maps (rxe): the NAKs of before, no map, no ACK
 * between them. */
static void test_sack_not_advertised(void)
{
	setup(IBV_QPT_RC);
	for (int i = 0; i < 8; i++)
		post_recv(10 + i, (uintptr_t)mem + 100 * i, 100, LKEY);
	rx(SWV_OP_SEND_ONLY, 101, true, pattern + 1, 10);
	rx(SWV_OP_SEND_ONLY, 103, true, pattern + 3, 10);
	rx(SWV_OP_SEND_ONLY, 104, true, pattern + 4, 10);
	rx(SWV_OP_SEND_ONLY, 105, true, pattern + 5, 10);
	CHECK_EQ(nsent, 1);
	check_ack(0, SWV_AETH_NAK_PSN, 100, 0);
	CHECK(!sent[0].p.sack);
	CHECK(sent[0].p.sack_map == NULL);
	rx(SWV_OP_SEND_ONLY, 100, true, pattern, 10);
	CHECK_EQ(nsent, 2);
	check_ack(1, SWV_AETH_NAK_PSN, 102, 2);
	CHECK(sent[1].p.sack_map == NULL);
	CHECK_EQ(qp->resp->stats.sack_naks, 0u);
	CHECK_EQ(qp->resp->stats.sack_acks, 0u);
	CHECK(!qp->resp->peer_sack);
}

int main(void)
{
	for (unsigned i = 0; i < sizeof(pattern); i++)
		pattern[i] = (uint8_t)(i * 7 + 3);
	test_pure();
	test_send();
	test_gap_and_rnr();
	test_nak_again_only_after_resend();
	test_write();
	test_write_errors();
	test_recv_errors();
	test_read();
	test_read_link_full();
	test_read_errors();
	test_atomic();
	test_psn_wrap();
	test_rob_drain();
	test_rob_second_gap_and_dup();
	test_rob_limits();
	test_rob_read();
	test_rob_psn_wrap();
	test_rob_rnr();
	test_sack_map();
	test_sack_not_advertised();
	test_uc();
	test_refusal_stats();
	test_ud();
	printf("test_responder: ok\n");
	return 0;
}
