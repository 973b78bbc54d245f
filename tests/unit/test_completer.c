/*
 * Requester/completer unit test: drives swv_req_run, swv_comp_rx and swv_req_timer of
 * an RC QP with scripted responses (ACK, sequence NAK, RNR NAK, duplicated ones) and
 * checks what is retransmitted and how the retry counters move (roce-wire.md 4.4).
 * The QP's neighbours are small models defined here (the linker takes these before
 * the library's): transmit (parsed back with the real parser), swv_complete, MR
 * gather/scatter, the timer and error hooks; GSO is off, so every packet goes to
 * swv_qp_xmit (the link boundary of the transmit path) alone.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/async.h"
#include "core/completion.h"
#include "core/context.h"
#include "core/mr.h"
#include "core/qp.h"
#include "transport/qp_transport.h"
#include "link/endpoint.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/requester.h"
#include "transport/txrun.h"
#include "util/clock.h"

/* ------------------------------------------------------------------ models */

static uint32_t tx_psn[8192];
static bool tx_ackreq[8192];
static uint32_t tx_reth_len[8192]; /* READ requests: the length asked for */
static bool tx_sack[8192];	   /* the request said it reads SACK maps */
static int ntx;
static uint16_t refused_port; /* datagrams to this UDP port are refused (EAGAIN) */

int swv_qp_xmit(struct swv_qp *qp, const struct sockaddr_in *to, const struct iovec *iov,
		int iovcnt, size_t seg, unsigned npkts, enum swv_xmit_path path,
		unsigned *nsent)
{
	static uint8_t dgram[8192];
	size_t len = 0;
	struct swv_pkt p;

	(void)qp, (void)seg;
	CHECK(path == SWV_XMIT_ANY); /* no inbox here: no ring-only attempt */
	*nsent = 0;
	CHECK_EQ(npkts, 1u); /* GSO is off */
	if (refused_port && ntohs(to->sin_port) == refused_port)
		return EAGAIN; /* a full socket buffer, or a stopped receiver's full ring */
	for (int i = 0; i < iovcnt; i++) {
		CHECK(len + iov[i].iov_len <= sizeof(dgram));
		memcpy(dgram + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	CHECK_EQ(swv_pkt_parse(dgram, len, &p), 0);
	*nsent = 1;
	CHECK(ntx < (int)SWV_ARRAY_SIZE(tx_psn));
	tx_ackreq[ntx] = p.ackreq;
	tx_sack[ntx] = p.sack;
	tx_reth_len[ntx] = p.reth_len;
	tx_psn[ntx++] = p.psn;
	return 0;
}

static struct swv_completion comps[64];
static int ncomps;

int swv_complete(struct swv_qp *qp, const struct swv_completion *c)
{
	(void)qp;
	CHECK(ncomps < (int)SWV_ARRAY_SIZE(comps));
	comps[ncomps++] = *c;
	return 0;
}

void swv_qp_to_error(struct swv_qp *qp)
{
	qp->state = IBV_QPS_ERR;
}
void swv_qp_cq_overflow(struct swv_qp *qp, struct swv_cq *cq)
{
	(void)cq;
	swv_qp_to_error(qp);
}
void swv_qp_set_timer(struct swv_qp *qp, uint64_t deadline_ns)
{
	(void)qp;
	(void)deadline_ns;
}
void swv_async_event(struct swv_context *ctx, enum ibv_event_type type, void *element)
{
	(void)ctx;
	(void)type;
	(void)element;
}
int swv_mr_gather(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		  unsigned nsge, uint64_t offset, void *dst, size_t len)
{
	(void)ctx, (void)pd, (void)sge, (void)nsge, (void)offset;
	memset(dst, 0xab, len);
	return 0;
}
int swv_mr_scatter(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		   unsigned nsge, uint64_t offset, const void *src, size_t len)
{
	(void)ctx, (void)pd, (void)sge, (void)nsge, (void)offset, (void)src, (void)len;
	return 0;
}
/* No direct placement here (no intra-host link): nothing to place from. */
int swv_mr_gather_iov(struct swv_context *ctx, struct swv_pd *pd, const struct ibv_sge *sge,
		      unsigned nsge, size_t len, struct iovec *iov, int max)
{
	(void)ctx, (void)pd, (void)sge, (void)nsge, (void)len, (void)iov, (void)max;
	return -1;
}
/* No memory windows here: the requester's local operations are not driven. */
int swv_mw_bind(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t handle,
		uint32_t rkey, const struct ibv_mw_bind_info *bi, uint32_t mr_lkey)
{
	return IBV_WC_MW_BIND_ERR;
}
int swv_mw_invalidate(struct swv_context *ctx, struct swv_pd *pd, uint32_t qpn, uint32_t rkey,
		      bool remote)
{
	return EINVAL;
}
/* The responder is idle (its state zeroed): the transmit path never finds an ACK of
 * its own pending in front of a request. */
void swv_resp_flush_ack(struct swv_qp *qp)
{
	(void)qp;
	CHECK(!"an ACK pending on a requester-only QP");
}
bool swv_ep_gso_usable(const struct swv_endpoint *ep)
{
	(void)ep;
	return false;
}
int swv_ep_direct(struct swv_endpoint *ep, const struct sockaddr_in *dst,
		  const struct swv_shm_direct *d, void *buf, size_t len)
{
	(void)ep, (void)dst, (void)d, (void)buf, (void)len;
	return ENOTSUP;
}
/* The model's intra-host ring: whether the peer has not taken our packets yet. */
static bool model_backlog;
static unsigned model_backlog_asks;
bool swv_ep_backlog(struct swv_endpoint *ep, const struct sockaddr_in *dst, uint64_t *mark)
{
	(void)ep, (void)dst;
	model_backlog_asks++;
	*mark = 1;
	return model_backlog;
}

/* ------------------------------------------------------------------ fixture */

#define MTU   1024u
#define PSN0  0x100u
#define NWQE  4u /* WRITEs of 3 packets: PSN0 .. PSN0 + 11 */
#define SLOTS 16u

static struct swv_qp *qp;
/* Only its progress state is touched: retiring a WQE counts it off the context's
 * outstanding send WQEs (progress.h). */
static struct swv_context test_ctx;

/* Append a 3-packet WRITE (wr_id 100 + its index) to the send queue. */
static void post_write(void)
{
	uint32_t i = qp->sq.tail;
	struct swv_send_wqe *w = swv_wq_slot(&qp->sq, i);
	memset(w, 0, qp->sq.stride);
	w->wr_id = 100 + i;
	w->opcode = IBV_WR_RDMA_WRITE;
	w->remote_addr = 0x10000 + (uint64_t)i * 4096;
	w->rkey = 0x1234;
	w->length = 3 * MTU;
	w->num_sge = 1;
	w->signaled = true;
	w->sge[0] = (struct ibv_sge){.addr = 0x1000, .length = 3 * MTU, .lkey = 1};
	qp->sq.tail++;
}

/* The QP's transport state (one QP at a time). */
static struct swv_qp_transport qp_tp;

static void setup(uint8_t retry_cnt, uint8_t rnr_retry)
{
	if (qp)
		free(qp->sq.buf);
	free(qp);
	qp = calloc(1, sizeof(*qp));
	CHECK_PTR(qp);
	memset(&qp_tp, 0, sizeof(qp_tp));
	swv_qp_transport_attach(qp, &qp_tp);
	qp->ctx = &test_ctx;
	qp->type = IBV_QPT_RC;
	qp->state = IBV_QPS_RTS;
	qp->qpn = 0x11;
	qp->mtu = MTU;
	qp->attr.dest_qp_num = 0x22;
	qp->attr.sq_psn = PSN0;
	qp->attr.retry_cnt = retry_cnt;
	qp->attr.rnr_retry = rnr_retry;
	qp->attr.timeout = 10;
	qp->sq.stride = (uint32_t)(sizeof(struct swv_send_wqe) + sizeof(struct ibv_sge));
	qp->sq.nslots = SLOTS;
	qp->sq.max_wr = SLOTS;
	qp->sq.max_sge = 1;
	qp->sq.buf = calloc(SLOTS, qp->sq.stride);
	CHECK_PTR(qp->sq.buf);
	for (uint32_t i = 0; i < NWQE; i++)
		post_write();
	swv_req_reset(qp);
	qp->req->window = qp->req->cwnd = 128; /* no endpoint: not sized from a socket */
	ntx = ncomps = 0;
}

/* One response from the peer (syndrome: 0x1f ACK, 0x60 sequence NAK, 0x20|t RNR). */
static void respond(uint32_t psn, uint8_t syndrome)
{
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = SWV_OP_RC | SWV_OP_ACK;
	p.flags = swv_opcode(p.opcode)->flags;
	p.psn = psn;
	p.aeth_syndrome = syndrome;
	swv_comp_rx(qp, &p);
}

/* The same with a SACK map (docs/wire.md): map bit i for PSN first + 1 + i, where
 * first is the NAK's PSN, or the ACK's PSN + 1; the listed PSNs are set. */
static void respond_sack(uint32_t psn, uint8_t syndrome, uint32_t len, const uint32_t *held,
			 int nheld)
{
	static uint8_t map[SWV_SACK_MAX_LEN];
	struct swv_pkt p;
	uint32_t first = syndrome == 0x60 ? psn : psn + 1;
	memset(map, 0, sizeof(map));
	for (int i = 0; i < nheld; i++) {
		uint32_t b = held[i] - first - 1;
		CHECK(b < len * 8);
		map[b / 8] |= (uint8_t)(1u << (b % 8));
	}
	memset(&p, 0, sizeof(p));
	p.opcode = SWV_OP_RC | SWV_OP_ACK;
	p.flags = swv_opcode(p.opcode)->flags;
	p.psn = psn;
	p.aeth_syndrome = syndrome;
	p.sack = true;
	p.sack_map = map;
	p.sack_len = (uint8_t)len;
	swv_comp_rx(qp, &p);
}

static int count_tx(uint32_t psn)
{
	int n = 0;
	for (int i = 0; i < ntx; i++)
		n += tx_psn[i] == psn;
	return n;
}

/* ------------------------------------------------------------------ cases */

/* A duplicated sequence NAK (the fault injector's dup=, or a late copy) must not start
 * a second go-back-N nor spend a second retry: the responder NAKs a gap only once. */
static void test_dup_seq_nak(void)
{
	setup(3, 7);
	swv_req_run(qp);
	CHECK_EQ(ntx, (int)(3 * NWQE));
	respond(PSN0 + 4, 0x60); /* PSN0..+3 arrived: WQE 0 completes, retry from +4 */
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.wr_id, 100u);
	CHECK_EQ(comps[0].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(qp->req->retry_left, 2);
	CHECK_EQ(count_tx(PSN0 + 4), 2);
	int sent = ntx;
	respond(PSN0 + 4, 0x60); /* the copy */
	CHECK_EQ(qp->req->retry_left, 2);
	CHECK_EQ(ntx, sent); /* nothing resent */
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	/* many copies: still one retry, the QP survives (retry_cnt 3 used to run out) */
	for (int i = 0; i < 5; i++)
		respond(PSN0 + 4, 0x60);
	CHECK_EQ(qp->req->retry_left, 2);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	/* the retransmission gets through: everything completes */
	respond(PSN0 + 3 * NWQE - 1, 0x1f);
	CHECK_EQ(ncomps, (int)NWQE);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(qp->req->retry_left, 3);
}

/* A sequence NAK that acknowledges packets of the head message (PSN past una inside
 * the head WQE) is progress, like an ACK: the retry counters reload before the retry
 * it asks for is counted. */
static void test_nak_progress_reloads(void)
{
	setup(3, 7);
	swv_req_run(qp);
	respond(PSN0 + 3, 0x60); /* WQE 0 done; retry from +3 (start of WQE 1) */
	CHECK_EQ(qp->req->retry_left, 2);
	swv_req_timer(qp, qp->req->ack_deadline); /* nothing came back */
	CHECK_EQ(qp->req->retry_left, 1);
	int before = ntx;
	respond(PSN0 + 5, 0x60); /* +3, +4 arrived (mid WQE 1), +5 lost */
	CHECK_EQ(qp->req->una_psn, PSN0 + 5);
	CHECK_EQ(qp->req->retry_left, 2); /* reloaded to 3, then this retry */
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	/* the resend is +5 (alone: selective repeat), not the start of WQE 1 */
	CHECK_EQ(ntx, before + 1);
	CHECK_EQ(tx_psn[before], PSN0 + 5);
}

/* Timeouts with no response at all: retry_cnt retries, then RETRY_EXC_ERR -- for
 * every retry_cnt, 7 included (7 is a count, not "infinite"; only rnr_retry 7 is). */
static void test_timeouts_exhaust(uint8_t retry_cnt)
{
	setup(retry_cnt, 7);
	swv_req_run(qp);
	for (int i = 0; i < retry_cnt; i++) {
		swv_req_timer(qp, qp->req->ack_deadline);
		CHECK_EQ(qp->state, IBV_QPS_RTS);
		CHECK_EQ(count_tx(PSN0), 2 + i);
	}
	swv_req_timer(qp, qp->req->ack_deadline);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.status, IBV_WC_RETRY_EXC_ERR);
	CHECK_EQ(count_tx(PSN0), 1 + retry_cnt);
}

/* An ACK timeout while the peer, alive, has not taken our packets off the intra-host
 * ring yet (a receiver not scheduled on a loaded host) is no silence of the peer: nothing
 * is lost on a ring, so no retry is spent; once the ring is taken, the timeouts count
 * as usual and a peer that answers nothing still ends in RETRY_EXC_ERR. */
static void test_timeout_ring_unread(void)
{
	struct swv_endpoint ep;
	memset(&ep, 0, sizeof(ep));
	ep.fd = -1;
	setup(1, 7);
	swv_req_run(qp);
	qp->ep = &ep;
	model_backlog = true;
	for (int i = 0; i < 5; i++) {
		uint64_t at = qp->req->ack_deadline;
		CHECK(at != 0);
		swv_req_timer(qp, at); /* tail-loss probes may go: they spend nothing */
		CHECK_EQ(qp->state, IBV_QPS_RTS);
		CHECK(qp->req->ack_deadline > at); /* another timeout, not a retry */
	}
	CHECK_EQ(qp->req->n_timeouts, 0u);
	CHECK_EQ(ncomps, 0);
	model_backlog = false; /* taken, and no answer: retry_cnt 1 is one retry */
	swv_req_timer(qp, qp->req->ack_deadline);
	CHECK_EQ(qp->req->n_timeouts, 1u);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	swv_req_timer(qp, qp->req->ack_deadline);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.status, IBV_WC_RETRY_EXC_ERR);

	/* A ring that stays unread (a receiver in another PID namespace that died: its
	 * death cannot be seen) excuses SWV_BACKLOG_MAX_WAITS timeouts, then retry_cnt
	 * runs out as usual. */
	setup(2, 7);
	swv_req_run(qp);
	qp->ep = &ep;
	model_backlog = true;
	model_backlog_asks = 0;
	unsigned deadlines = 0;
	while (qp->state == IBV_QPS_RTS && deadlines < 10 * SWV_BACKLOG_MAX_WAITS) {
		swv_req_timer(qp, qp->req->ack_deadline);
		deadlines++;
	}
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(comps[0].wc.status, IBV_WC_RETRY_EXC_ERR);
	CHECK_EQ(deadlines, SWV_BACKLOG_MAX_WAITS + 2 + 1);
	CHECK_EQ(model_backlog_asks, (unsigned)SWV_BACKLOG_MAX_WAITS);
	/* progress gives the excuses back */
	setup(2, 7);
	swv_req_run(qp);
	qp->ep = &ep;
	for (int i = 0; i < 3; i++)
		swv_req_timer(qp, qp->req->ack_deadline);
	CHECK_EQ(qp->req->backlog_waits, 3u);
	respond(PSN0 + 2, 0x1f); /* WQE 0 done */
	CHECK_EQ(qp->req->backlog_waits, 0u);
	CHECK_EQ(qp->req->backlog_mark, 0u);
	model_backlog = false;
	qp->ep = NULL;
}

/* The first n_reads WQEs become RDMA READs of 4 response packets each. */
static void make_reads(unsigned n_reads)
{
	qp->attr.max_rd_atomic = 4;
	for (uint32_t i = 0; i < n_reads; i++) {
		struct swv_send_wqe *w = swv_wq_slot(&qp->sq, i);
		w->opcode = IBV_WR_RDMA_READ;
		w->length = 4 * MTU;
		w->sge[0].length = 4 * MTU;
	}
}

/* A probe's answer is no evidence that the peer keeps nothing past a gap: the ACK for
 * exactly the probed PSN may come from a receiver that has not read the rest yet (a
 * loaded host). The rest is resent, but the next sequence NAK still gets a selective
 * resend, not go-back-N -- a fallback there used to put a fresh QP at 5% loss into
 * go-back-N with the window halved for the next 16 NAKs. */
static void test_probe_answer_no_fallback(void)
{
	setup(3, 7);
	swv_req_run(qp);
	respond(PSN0 + 2, 0x1f); /* WQE 0 done, then silence */
	int sent = ntx;
	swv_req_timer(qp, qp->req->probe_at);
	CHECK_EQ(ntx, sent + 1);
	CHECK_EQ(tx_psn[sent], PSN0 + 3);
	respond(PSN0 + 3, 0x1f); /* just that PSN: the rest is sent again */
	CHECK_EQ(ntx, sent + 1 + (int)(3 * NWQE - 4));
	CHECK_EQ(qp->req->n_sr_fallbacks, 0u);
	CHECK_EQ(qp->req->sr_gbn_left, 0);
	uint32_t cwnd = qp->req->cwnd;
	sent = ntx;
	respond(PSN0 + 8, 0x60); /* a loss: only +8 again */
	CHECK_EQ(ntx, sent + 1);
	CHECK_EQ(tx_psn[sent], PSN0 + 8);
	CHECK_EQ(qp->req->n_sel_resends, 2u);
	CHECK(qp->req->cwnd >= cwnd);
	respond(PSN0 + 3 * NWQE - 1, 0x1f);
	CHECK_EQ(ncomps, (int)NWQE);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
}

/* A READ response of len bytes (a peer with a smaller path MTU sends less than MTU). */
static void read_resp_len(uint32_t psn, uint8_t opcode, uint32_t len)
{
	static uint8_t payload[MTU];
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = SWV_OP_RC | opcode;
	p.flags = swv_opcode(p.opcode)->flags;
	p.psn = psn;
	p.payload = payload;
	p.paylen = len;
	swv_comp_rx(qp, &p);
}

static void read_response(uint32_t psn, uint8_t opcode)
{
	read_resp_len(psn, opcode, MTU);
}

static void read_responses(uint32_t first_psn, unsigned from, unsigned to)
{
	static const uint8_t ops[4] = {SWV_OP_READ_RESP_FIRST, SWV_OP_READ_RESP_MIDDLE,
				       SWV_OP_READ_RESP_MIDDLE, SWV_OP_READ_RESP_LAST};
	for (unsigned i = from; i < to; i++)
		read_response(first_psn + i, ops[i]);
}

/* READ A (PSN0..+3) gets only its FIRST response while READ B's four (PSN0+4..+7)
 * arrive: every one of B's responses says A lost one, but it is one loss, so one retry
 * -- with retry_cnt 3 the connection used to die within B's four responses. */
static void test_read_response_lost(void)
{
	setup(3, 7);
	make_reads(2);
	qp->sq.tail = 2;
	swv_req_run(qp);
	CHECK_EQ(ntx, 2); /* one request packet per READ */
	read_response(PSN0, SWV_OP_READ_RESP_FIRST);
	read_responses(PSN0 + 4, 0, 4);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	CHECK_EQ(ncomps, 0);
	CHECK_EQ(qp->req->n_retries, 1u);
	CHECK_EQ(qp->req->retry_left, 2);
	/* the retry asked again for A's remaining three packets only: B's responses
	 * were placed (selective repeat) */
	CHECK_EQ(count_tx(PSN0 + 1), 1);
	CHECK_EQ(count_tx(PSN0 + 4), 1);
	/* a duplicate of B's LAST, as the network may deliver: still the same loss */
	read_response(PSN0 + 7, SWV_OP_READ_RESP_LAST);
	CHECK_EQ(qp->req->n_retries, 1u);
	/* the replay arrives: A completes, and B, whose responses were all placed */
	read_responses(PSN0, 1, 4);
	CHECK_EQ(ncomps, 2);
	read_responses(PSN0 + 4, 0, 4); /* a late replay of B changes nothing */
	CHECK_EQ(ncomps, 2);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(qp->req->retry_left, 3);
}

/* A sequence NAK for a PSN past the head READ says the READ executed, so its response
 * was lost -- the same loss the READ responses after it report: one retry, however
 * many NAKs (each for a new gap past it) and responses arrive in the hold-off. */
static void test_seq_nak_past_read(void)
{
	setup(3, 7);
	make_reads(1); /* READ PSN0..+3, then three 3-packet WRITEs +4..+12 */
	swv_req_run(qp);
	read_response(PSN0, SWV_OP_READ_RESP_FIRST);
	read_responses(PSN0, 3, 4); /* +1, +2 lost */
	respond(PSN0 + 6, 0x60);
	respond(PSN0 + 9, 0x60);
	respond(PSN0 + 11, 0x60);
	CHECK_EQ(qp->req->n_retries, 1u);
	CHECK_EQ(qp->req->retry_left, 2);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	read_responses(PSN0, 1, 4);
	respond(PSN0 + 12, 0x1f);
	CHECK_EQ(ncomps, (int)NWQE);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
}

/* A gap inside the head READ's responses: the responses after the gap repeat the same
 * evidence; one retry. Progress (the missing packet replayed) re-arms the rule, so a
 * second, later loss is again acted on at once. */
static void test_read_gap_once(void)
{
	setup(3, 7);
	make_reads(2);
	qp->sq.tail = 2;
	swv_req_run(qp);
	read_response(PSN0, SWV_OP_READ_RESP_FIRST);
	read_response(PSN0 + 2, SWV_OP_READ_RESP_MIDDLE); /* PSN0+1 lost */
	CHECK_EQ(qp->req->n_retries, 1u);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	read_response(PSN0 + 1, SWV_OP_READ_RESP_MIDDLE); /* its replay: progress */
	read_responses(PSN0 + 4, 0, 4);			  /* B's: +3 of A lost this time */
	CHECK_EQ(qp->req->n_retries, 2u);
	CHECK_EQ(qp->req->retry_left, 2); /* reloaded by the progress, then one retry */
	read_response(PSN0 + 3, SWV_OP_READ_RESP_LAST);
	CHECK_EQ(ncomps, 2);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
}

/* Selective repeat for READ responses: READs A, B, C (PSN0..+11) each lose one response
 * in the middle; the responses after each gap are placed, and only the missing PSNs
 * are asked for again, one request of one PSN each, with the VA advanced -- never a
 * whole READ again (go-back-N replayed B and C entirely for A's loss, docs/responder.md
 * "Retry rules"). One retry for the three gaps (the implied-NAK rule); the window
 * stays. */
static void test_read_selective(void)
{
	setup(3, 7);
	make_reads(3);
	for (uint32_t i = 0; i < 3; i++) {
		struct swv_send_wqe *w = swv_wq_slot(&qp->sq, i);
		w->remote_addr = 0x40000 + (uint64_t)i * 4 * MTU;
	}
	qp->sq.tail = 3;
	swv_req_run(qp);
	CHECK_EQ(ntx, 3);
	uint32_t cwnd = qp->req->cwnd;
	for (uint32_t r = 0; r < 3; r++) {
		static const uint8_t ops[4] = {SWV_OP_READ_RESP_FIRST, SWV_OP_READ_RESP_MIDDLE,
					       SWV_OP_READ_RESP_MIDDLE, SWV_OP_READ_RESP_LAST};
		for (uint32_t k = 0; k < 4; k++)
			if (k != 1 + r % 2) /* A loses +1, B +6, C +9 */
				read_response(PSN0 + 4 * r + k, ops[k]);
	}
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	CHECK_EQ(ncomps, 0);
	CHECK_EQ(qp->req->n_retries, 1u);
	CHECK_EQ(qp->req->cwnd, cwnd);
	CHECK_EQ(ntx, 6);
	static const uint32_t lost[3] = {PSN0 + 1, PSN0 + 6, PSN0 + 9};
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(tx_psn[3 + i], lost[i]);
		CHECK_EQ(tx_reth_len[3 + i], MTU);
	}
	/* the replays arrive (MIDDLE: mid-message restarts) and all three complete */
	for (int i = 0; i < 3; i++)
		read_response(lost[i], SWV_OP_READ_RESP_MIDDLE);
	CHECK_EQ(ncomps, 3);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(ntx, 6);
	CHECK_EQ(qp->req->retry_left, 3);
}

/* A lost READ request: the responder NAKs its PSN and keeps the requests after it
 * (test_responder's test_rob_read), so only that READ is sent again -- for the head
 * READ (A) and for one past it (C, while A's responses are in) -- not every READ
 * after it, which the responder would replay in full. One retry per NAK, the window
 * stays. */
static void test_read_request_lost(void)
{
	setup(3, 7);
	make_reads(3); /* A PSN0..+3, B +4..+7, C +8..+11 */
	qp->sq.tail = 3;
	swv_req_run(qp);
	CHECK_EQ(ntx, 3);
	uint32_t cwnd = qp->req->cwnd;
	respond(PSN0, 0x60); /* A's request lost; B's and C's kept */
	CHECK_EQ(ntx, 4);
	CHECK_EQ(tx_psn[3], PSN0);
	CHECK_EQ(tx_reth_len[3], 4 * MTU);
	CHECK_EQ(qp->req->n_retries, 1u);
	CHECK_EQ(qp->req->cwnd, cwnd);
	read_responses(PSN0, 0, 4);
	read_responses(PSN0 + 4, 0, 4);
	CHECK_EQ(ncomps, 2);
	/* had C's request been lost as well, the responder NAKs it after B */
	setup(3, 7);
	make_reads(3);
	qp->sq.tail = 3;
	swv_req_run(qp);
	read_responses(PSN0, 0, 3);	/* A's +3 lost */
	read_responses(PSN0 + 4, 0, 4); /* B's reveal it: +3 asked for again */
	CHECK_EQ(ntx, 4);
	CHECK_EQ(tx_psn[3], PSN0 + 3);
	respond(PSN0 + 8, 0x60); /* A, B executed; C's request lost */
	CHECK_EQ(ntx, 5);
	CHECK_EQ(tx_psn[4], PSN0 + 8);
	CHECK_EQ(tx_reth_len[4], 4 * MTU);
	read_response(PSN0 + 3, SWV_OP_READ_RESP_LAST);
	CHECK_EQ(ncomps, 2);
	read_responses(PSN0 + 8, 0, 4);
	CHECK_EQ(ncomps, 3);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(ntx, 5);
}

/* A replay is lost too: nothing later reveals it, so the tail-loss probe asks again --
 * for that PSN alone, since the READ was executed (its other responses arrived) -- and
 * spends no retry. */
static void test_read_selective_probe(void)
{
	setup(3, 7);
	qp->attr.timeout = 14; /* 67 ms: an unmeasured go-back-N probe waits 16.8 ms */
	make_reads(1);
	qp->sq.tail = 1;
	swv_req_run(qp);
	read_response(PSN0, SWV_OP_READ_RESP_FIRST);
	read_responses(PSN0, 2, 4); /* +1 lost */
	CHECK_EQ(ntx, 2);
	CHECK_EQ(tx_psn[1], PSN0 + 1);
	/* its replay is lost: the probe, one-packet style, asks again for +1 only */
	uint64_t p = swv_req_probe_ns(qp);
	CHECK(p >= SWV_PROBE_SEL_MIN_NS && p < swv_ack_timeout_ns(qp) / 4);
	swv_req_timer(qp, qp->req->probe_at);
	CHECK_EQ(qp->req->n_probes, 1u);
	CHECK_EQ(ntx, 3);
	CHECK_EQ(tx_psn[2], PSN0 + 1);
	CHECK_EQ(tx_reth_len[2], MTU);
	CHECK_EQ(qp->req->n_retries, 1u);
	read_response(PSN0 + 1, SWV_OP_READ_RESP_MIDDLE);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.status, IBV_WC_SUCCESS);
}

/* A copy of the RNR NAK being waited out does not count against rnr_retry again. */
static void test_dup_rnr_nak(void)
{
	setup(3, 1);
	swv_req_run(qp);
	respond(PSN0, 0x20 | 1);
	CHECK_EQ(qp->req->rnr_left, 0);
	CHECK(qp->req->rnr_until != 0);
	respond(PSN0, 0x20 | 1); /* the copy: with rnr_retry 1 this used to fail the WQE */
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	CHECK_EQ(ncomps, 0);
	int sent = ntx;
	swv_req_timer(qp, qp->req->rnr_until); /* the wait ends: resend from PSN0 */
	CHECK(ntx > sent);
	CHECK_EQ(tx_psn[sent], PSN0);
	respond(PSN0, 0x20 | 1); /* refused again after the resend: now it is exhausted */
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
}



/* A peer answers every READ request, but with responses this requester refuses (its
 * path MTU is 512, ours 1024: FIRST(512) + LAST(512) for a 1-PSN READ). Nothing is ever
 * placed, so after (retry_cnt + 1) x the ACK timeout the READ must end in RETRY_EXC_ERR;
 * answers that are no progress must not restart the timeout (with the free tail-loss
 * probes drawing an answer every few ms, such a QP used to live forever). */
static void test_read_alive_hang(void)
{
	setup(1, 7); /* retry_cnt 1: the bound is 2 x 4.2 ms */
	qp->attr.max_rd_atomic = 1;
	struct swv_send_wqe *w = swv_wq_slot(&qp->sq, 0);
	w->opcode = IBV_WR_RDMA_READ;
	w->length = MTU;
	w->sge[0].length = MTU;
	qp->sq.tail = 1;
	swv_req_run(qp);
	CHECK_EQ(ntx, 1);
	uint64_t t0 = swv_now_ns(), tmo = swv_ack_timeout_ns(qp);
	int answered = 0;
	while (qp->state == IBV_QPS_RTS && swv_now_ns() - t0 < 1000 * tmo) {
		if (ntx > answered) { /* a (re)sent READ request reached the peer */
			answered = ntx;
			read_resp_len(PSN0, SWV_OP_READ_RESP_FIRST, MTU / 2);
			read_resp_len(PSN0 + 1, SWV_OP_READ_RESP_LAST, MTU / 2);
		}
		usleep(200);
		swv_req_timer(qp, swv_now_ns());
	}
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.status, IBV_WC_RETRY_EXC_ERR);
}

/* timeout 0 (no ACK timeout) and a window that loss has shrunk below
 * SWV_MAX_PKT_PER_ACK: the resend of a long WRITE must still ask for an ACK within the
 * window (or keep a timer), else a peer that executed it all, not asked, says nothing
 * and the QP waits forever. */
static void test_no_ackreq_in_window(void)
{
	setup(7, 7);
	qp->attr.timeout = 0;
	struct swv_send_wqe *w = swv_wq_slot(&qp->sq, 0);
	w->length = 200 * MTU;
	w->sge[0].length = 200 * MTU;
	qp->sq.tail = 1;
	swv_req_reset(qp);
	qp->req->window = qp->req->cwnd = 128;
	swv_req_run(qp);
	CHECK_EQ(ntx, 128);
	int at = ntx;
	respond(PSN0 + 64, 0x60); /* +64 lost: +0..+63 arrived; +64 resent, then new ones */
	CHECK_EQ(tx_psn[at], PSN0 + 64);
	CHECK(tx_ackreq[at]);
	qp->req->cwnd = 32; /* as go-back-N retries under loss leave it */
	int from = ntx;
	respond(PSN0 + 64, 0x1f); /* a peer that kept nothing after +64: go back N */
	CHECK(ntx - from >= 32);
	CHECK_EQ(tx_psn[from], PSN0 + 65);
	/* the peer gets +65..+96 in order and executes them; it ACKs only on AckReq */
	bool asked = false;
	for (int i = from; i < ntx; i++)
		asked |= tx_ackreq[i];
	CHECK(asked || qp->req->ack_deadline || qp->req->probe_at);
}

/* A late copy of a sequence NAK (a network duplicate, after the hold-off) while an RNR
 * NAK is waited out must neither spend a retry nor re-arm the ACK timeout the RNR NAK
 * stopped: that timeout used to fire during the 655 ms wait and end a QP whose peer had
 * only no receive posted in RETRY_EXC_ERR. */
static void test_rnr_wait_vs_late_nak(void)
{
	setup(3, 7);
	swv_req_run(qp);
	respond(PSN0 + 3, 0x60); /* WQE 0 done, go back to +3 */
	CHECK_EQ(qp->req->retry_left, 2);
	respond(PSN0 + 3, 0x20 | 0); /* the resent +3: RNR, wait 655 ms */
	CHECK(qp->req->rnr_until != 0);
	CHECK_EQ(qp->req->ack_deadline, 0);
	usleep(1500); /* past the hold-off (ACK timeout / 8 = 0.5 ms) */
	respond(PSN0 + 3, 0x60); /* the first NAK, duplicated and delayed by the network */
	while (qp->state == IBV_QPS_RTS && qp->req->ack_deadline &&
	       qp->req->ack_deadline < qp->req->rnr_until)
		swv_req_timer(qp, qp->req->ack_deadline);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	CHECK_EQ(ncomps, 1); /* only WQE 0 */
}

/* Karn's rule: after a tail-loss probe resent everything outstanding, an ACK cannot say
 * which transmission it answers, so it is no round-trip sample; a sample may only time a
 * PSN sent for the first time (the late ACK of the original used to give microseconds
 * for a round trip of more than 3 ms). */
static void test_karn_after_probe(void)
{
	setup(3, 7);
	swv_req_run(qp);
	usleep(3000); /* the peer is slow: its ACK takes > 3 ms */
	swv_req_timer(qp, qp->req->probe_at);
	CHECK_EQ(qp->req->n_probes, 1u);
	respond(PSN0 + 3 * NWQE - 1, 0x1f); /* the ACK of the original transmission */
	CHECK_EQ(ncomps, (int)NWQE);
	CHECK_EQ(qp->req->srtt_ns, 0); /* no valid sample */
}

/* The window under loss never exceeds the peer's buffer window, even when that is below
 * SWV_CWND_MIN (compute_window() allows 4): a retry used to raise it to 16, and then the
 * unsigned window - cwnd wrapped and it grew without bound. */
static void test_cwnd_past_small_window(void)
{
	setup(3, 7);
	qp->req->window = qp->req->cwnd = 8;
	swv_req_run(qp);
	CHECK_EQ(ntx, 8);
	swv_req_timer(qp, qp->req->ack_deadline); /* a retry: cwnd = max(8/2, 16) = 16 */
	respond(PSN0 + 2, 0x1f);
	respond(PSN0 + 5, 0x1f);
	respond(PSN0 + 8, 0x1f);
	CHECK(qp->req->cwnd <= qp->req->window);
}

/* timeout 0: the tail-loss probe spends no retry, so it runs without an ACK timer too;
 * a lost last ACK (or a READ burst the responder cut short on a full socket) must not
 * hang a QP whose peer is alive. */
static void test_timeout0_tail_loss(void)
{
	setup(3, 7);
	qp->attr.timeout = 0;
	swv_req_run(qp);
	respond(PSN0 + 8, 0x1f); /* WQEs 0-2; the ACK for +11 is lost */
	CHECK_EQ(ncomps, 3);
	CHECK(qp->req->probe_at != 0);
}

/* Selective repeat: a sequence NAK inside a WRITE resends only the NAKed packet, with
 * AckReq; new packets keep flowing; the ACK for everything (the responder kept what
 * followed) completes it all, with no go-back-N and the one retry the NAK costs. */
static void test_selective_resend(void)
{
	setup(3, 7);
	swv_req_run(qp);
	CHECK_EQ(ntx, (int)(3 * NWQE));
	respond(PSN0 + 4, 0x60); /* +4 lost (inside WQE 1): WQE 0 completes */
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(ntx, (int)(3 * NWQE) + 1);
	CHECK_EQ(tx_psn[ntx - 1], PSN0 + 4);
	CHECK(tx_ackreq[ntx - 1]);
	CHECK_EQ(qp->req->retry_left, 2);
	CHECK_EQ(qp->req->n_sel_resends, 1u);
	/* the cursor did not go back: a WQE posted now goes out as new */
	post_write();
	swv_req_run(qp);
	CHECK_EQ(ntx, (int)(3 * NWQE) + 4);
	CHECK_EQ(tx_psn[ntx - 3], PSN0 + 12);
	for (uint32_t psn = PSN0 + 5; psn < PSN0 + 15; psn++)
		CHECK_EQ(count_tx(psn), 1);
	/* a second gap, at +9 (WQE 3): only +9 again */
	respond(PSN0 + 9, 0x60);
	CHECK_EQ(ncomps, 3);
	CHECK_EQ(tx_psn[ntx - 1], PSN0 + 9);
	CHECK_EQ(count_tx(PSN0 + 9), 2);
	CHECK_EQ(qp->req->retry_left, 2); /* progress reloaded it, the NAK took one */
	/* the answer covers what the responder kept: everything completes in order */
	int sent = ntx;
	respond(PSN0 + 14, 0x1f);
	CHECK_EQ(ntx, sent);
	CHECK_EQ(ncomps, (int)NWQE + 1);
	for (int i = 0; i < ncomps; i++) {
		CHECK_EQ(comps[i].wc.wr_id, 100u + i);
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
	}
	CHECK_EQ(qp->req->n_sr_fallbacks, 0u);
	CHECK_EQ(qp->req->retry_left, 3);
}

/* A responder without a reorder buffer (Linux rxe drops what follows a gap): the ACK
 * for the resent PSN stops there although later PSNs left before the resend. The
 * requester then goes back N from the next PSN, without spending another retry, and
 * answers the next SWV_SR_GBN_AFTER_FALLBACK NAKs with go-back-N straight away. */
static void test_selective_fallback(void)
{
	setup(3, 7);
	swv_req_run(qp);
	respond(PSN0 + 4, 0x60);
	CHECK_EQ(tx_psn[ntx - 1], PSN0 + 4);
	int sent = ntx;
	respond(PSN0 + 4, 0x1f); /* +4 executed, +5.. were dropped */
	CHECK_EQ(qp->req->n_sr_fallbacks, 1u);
	CHECK_EQ(qp->req->una_psn, PSN0 + 5);
	CHECK_EQ(ntx, sent + (int)(3 * NWQE - 5)); /* +5 .. +11 once more */
	CHECK_EQ(tx_psn[sent], PSN0 + 5);
	for (uint32_t psn = PSN0 + 5; psn < PSN0 + 3 * NWQE; psn++)
		CHECK_EQ(count_tx(psn), 2);
	CHECK_EQ(qp->req->retry_left, 3); /* the ACK was progress; no retry for this */
	/* such a peer drops past every gap: the next NAKs go back N at once */
	sent = ntx;
	respond(PSN0 + 8, 0x60);
	CHECK_EQ(ntx, sent + (int)(3 * NWQE - 8)); /* +8 .. +11 */
	CHECK_EQ(tx_psn[sent], PSN0 + 8);
	CHECK_EQ(qp->req->n_sel_resends, 1u);
	CHECK_EQ(qp->req->sr_gbn_left, SWV_SR_GBN_AFTER_FALLBACK - 1);
	respond(PSN0 + 3 * NWQE - 1, 0x1f);
	CHECK_EQ(ncomps, (int)NWQE);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
}

/* A selective resend costs the retry a go-back-N costs. A NAK for the same PSN past
 * the copy hold-off (the resend was lost) resends it again inside the same recovery
 * round, for no retry; with no progress the ACK timeout then exhausts retry_cnt. */
static void test_selective_retry_count(void)
{
	setup(1, 7);
	swv_req_run(qp);
	respond(PSN0 + 4, 0x60);
	CHECK_EQ(qp->req->retry_left, 0);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	qp->req->seq_nak_at -= 1000000000ull; /* past the copy hold-off: asked again */
	int sent = ntx;
	respond(PSN0 + 4, 0x60);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	CHECK_EQ(ntx, sent + 1);
	CHECK_EQ(tx_psn[sent], PSN0 + 4);
	swv_req_timer(qp, qp->req->ack_deadline);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(comps[1].wc.wr_id, 101u);
	CHECK_EQ(comps[1].wc.status, IBV_WC_RETRY_EXC_ERR);
}

/* The tail-loss probe of a SEND/WRITE head resends the oldest unacknowledged packet
 * alone, spending no retry; an ACK for just it says nothing more was kept: the rest
 * goes back N. */
static void test_selective_probe(void)
{
	setup(3, 7);
	swv_req_run(qp);
	respond(PSN0 + 2, 0x1f); /* WQE 0 done, then silence: the tail was lost */
	CHECK_EQ(ncomps, 1);
	int sent = ntx;
	CHECK(qp->req->probe_at != 0);
	swv_req_timer(qp, qp->req->probe_at);
	CHECK_EQ(ntx, sent + 1);
	CHECK_EQ(tx_psn[sent], PSN0 + 3);
	CHECK(tx_ackreq[sent]);
	CHECK_EQ(qp->req->n_probes, 1u);
	CHECK_EQ(qp->req->retry_left, 3);
	respond(PSN0 + 3, 0x1f);
	CHECK_EQ(ntx, sent + 1 + (int)(3 * NWQE - 4));
	CHECK_EQ(tx_psn[sent + 1], PSN0 + 4);
	respond(PSN0 + 3 * NWQE - 1, 0x1f);
	CHECK_EQ(ncomps, (int)NWQE);
}

/* Before a round trip was measured, a SEND/WRITE head is probed after
 * SWV_PROBE_MIN_NS (a one-packet probe), a READ head after the ACK timeout / 4, as
 * before: under loss every sample can be voided, and a fresh QP at 5% drop used to wait
 * the ACK timeout / 4 for each lost resend. */
static void test_selective_probe_unmeasured(void)
{
	setup(3, 7);
	qp->attr.timeout = 14; /* 67 ms: a quarter is 16.8 ms */
	swv_req_run(qp);
	CHECK_EQ(qp->req->srtt_ns, 0);
	CHECK_EQ(swv_req_probe_ns(qp), SWV_PROBE_MIN_NS);
	setup(3, 7);
	qp->attr.timeout = 14;
	make_reads(1);
	swv_req_run(qp);
	CHECK_EQ(swv_req_probe_ns(qp), swv_ack_timeout_ns(qp) / 4);
}

/* Append a 64-byte UD SEND (wr_id 200 + its index) to UDP port 'port' of 127.0.0.1. */
static void post_ud_send(uint16_t port)
{
	uint32_t i = qp->sq.tail;
	struct swv_send_wqe *w = swv_wq_slot(&qp->sq, i);
	memset(w, 0, qp->sq.stride);
	w->wr_id = 200 + i;
	w->opcode = IBV_WR_SEND;
	w->length = 64;
	w->num_sge = 1;
	w->signaled = true;
	w->sge[0] = (struct ibv_sge){.addr = 0x1000, .length = 64, .lkey = 1};
	w->ud_remote_qpn = (uint32_t)port << 8 | 1;
	w->ud_dst = (struct sockaddr_in){.sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
					 .sin_port = htons(port)};
	qp->sq.tail++;
}

/* A UD datagram its link keeps refusing (EAGAIN, whichever link) completes as sent once
 * its destination has refused for SWV_UD_REFUSED_DROP_NS, and so do the next ones to it
 * at once, while the others go out; a datagram it accepts again ends that, and a new
 * refusal waits the bound again. RC is never dropped so. */
static void test_ud_refused_drop(void)
{
	const uint16_t stalled = 40000, other = 40001;
	setup(3, 7);
	qp->type = IBV_QPT_UD;
	qp->sq.head = qp->sq.tail = 0; /* drop the fixture's WRITEs */
	swv_req_reset(qp);
	refused_port = stalled;
	post_ud_send(stalled);
	post_ud_send(stalled);
	post_ud_send(other);
	swv_req_run(qp);
	CHECK_EQ(ncomps, 0); /* refused: the head waits, and everything behind it */
	CHECK(qp->req->xmit_retry_at != 0);
	swv_req_run(qp);
	CHECK_EQ(ncomps, 0); /* within the bound: still waiting */
	/* the bound has passed */
	qp->req->ud_refused_since -= SWV_UD_REFUSED_DROP_NS;
	swv_req_run(qp);
	CHECK_EQ(ncomps, 3); /* both to the stalled one dropped, the other one sent */
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(comps[i].wc.wr_id, 200u + (unsigned)i);
	}
	CHECK_EQ(qp->req->n_ud_refused_drops, 2u);
	CHECK_EQ(ntx, 1);
	/* still refusing: dropped at once */
	post_ud_send(stalled);
	swv_req_run(qp);
	CHECK_EQ(ncomps, 4);
	CHECK_EQ(qp->req->n_ud_refused_drops, 3u);
	/* it takes one again; the next refusal waits the bound again */
	refused_port = 0;
	post_ud_send(stalled);
	swv_req_run(qp);
	CHECK_EQ(ncomps, 5);
	CHECK_EQ(ntx, 2);
	refused_port = stalled;
	post_ud_send(stalled);
	swv_req_run(qp);
	CHECK_EQ(ncomps, 5);
	CHECK_EQ(qp->req->n_ud_refused_drops, 3u);
	qp->sq.head = qp->sq.tail;

	/* RC: a refused packet is never dropped, however long the refusal lasts */
	setup(3, 7);
	qp->attr.dest_qp_num = (uint32_t)stalled << 8 | 1;
	qp->peer = (struct sockaddr_in){.sin_family = AF_INET,
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
					.sin_port = htons(stalled)};
	swv_req_run(qp);
	CHECK_EQ(ntx, 0);
	qp->req->ud_refused_since = swv_now_ns() - 2 * SWV_UD_REFUSED_DROP_NS;
	swv_req_run(qp);
	CHECK_EQ(ntx, 0);
	CHECK_EQ(ncomps, 0);
	CHECK_EQ(qp->req->n_ud_refused_drops, 0u);
	refused_port = 0;
}

/* An answer for a WQE after the head READ, while a response of that READ is missing,
 * says the responder executed it: once the READ's replay arrives, a WRITE the ACK
 * answered completes with it, and an atomic whose answer could not be kept then (the
 * READ held the head) is asked for again at once -- both used to wait for the
 * tail-loss probe. One lost response, one retry. */
static void atomic_ack(uint32_t psn, uint64_t orig)
{
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = SWV_OP_RC | SWV_OP_ATOMIC_ACK;
	p.flags = swv_opcode(p.opcode)->flags;
	p.psn = psn;
	p.aeth_syndrome = 0x1f;
	p.atmack_orig = orig;
	swv_comp_rx(qp, &p);
}

static void test_read_then_answered(void)
{
	setup(3, 7);
	make_reads(1); /* READ A PSN0..+3, WRITE B +4..+6 */
	qp->sq.tail = 2;
	swv_req_run(qp);
	read_response(PSN0, SWV_OP_READ_RESP_FIRST);
	read_responses(PSN0, 2, 4); /* +1 lost */
	respond(PSN0 + 6, 0x1f);    /* B executed */
	CHECK_EQ(ncomps, 0);
	int sent = ntx;
	read_response(PSN0 + 1, SWV_OP_READ_RESP_MIDDLE);
	CHECK_EQ(ncomps, 2);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(ntx, sent);
	CHECK_EQ(qp->req->n_retries, 1u);

	setup(3, 7);
	make_reads(1); /* READ A PSN0..+3, FETCH_AND_ADD B +4 */
	struct swv_send_wqe *w = swv_wq_slot(&qp->sq, 1);
	w->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	w->length = 8;
	w->sge[0].length = 8;
	qp->sq.tail = 2;
	swv_req_run(qp);
	CHECK_EQ(count_tx(PSN0 + 4), 1);
	read_response(PSN0, SWV_OP_READ_RESP_FIRST);
	read_responses(PSN0, 2, 4); /* +1 lost */
	atomic_ack(PSN0 + 4, 77);
	CHECK_EQ(ncomps, 0);
	read_response(PSN0 + 1, SWV_OP_READ_RESP_MIDDLE);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(count_tx(PSN0 + 4), 2); /* asked again without waiting for a probe */
	atomic_ack(PSN0 + 4, 77);	 /* the responder's replay */
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(comps[1].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(qp->req->n_retries, 1u);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
}

/* A READ of more PSNs than the window has slots (SWV_MAX_UNACKED_PSNS) records its
 * last responses in slots its first ones used; completing it must forget them all.
 * 2^24 PSNs later a READ reuses those PSNs, and a slot still marked placed made it
 * complete on its first response, three of its four never placed. The wrap is
 * simulated: the PSN counters are set to where 2^24 - 88 PSNs of traffic bring them. */
static void test_read_long_slots_cleared(void)
{
	setup(3, 7);
	make_reads(2);
	struct swv_send_wqe *w = swv_wq_slot(&qp->sq, 0);
	w->length = 600 * MTU; /* PSN0 .. +599 */
	w->sge[0].length = 600 * MTU;
	qp->sq.tail = 1;
	swv_req_run(qp);
	for (uint32_t k = 0; k < 600; k++) {
		uint8_t op = k == 0	? SWV_OP_READ_RESP_FIRST
			     : k == 599 ? SWV_OP_READ_RESP_LAST
					: SWV_OP_READ_RESP_MIDDLE;
		read_response(PSN0 + k, op);
		if (qp->sq.head == 0 && (int)(qp->req->una_psn - PSN0) != (int)k + 1)
			swv_req_run(qp); /* past the window: requested in chunks */
	}
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.status, IBV_WC_SUCCESS);
	struct swv_req_state *r = qp->req;
	r->next_psn = r->una_psn = r->sent_psn = r->cwnd_una = r->rd_rereq_psn = PSN0 + 512;
	qp->sq.tail = 2; /* READ B: PSN0 + 512 .. +515 */
	swv_req_run(qp);
	w = swv_wq_slot(&qp->sq, 1);
	CHECK_EQ(w->first_psn, PSN0 + 512);
	read_response(PSN0 + 512, SWV_OP_READ_RESP_FIRST);
	CHECK_EQ(ncomps, 1); /* three responses still to come */
	read_responses(PSN0 + 512, 1, 4);
	CHECK_EQ(ncomps, 2);
	CHECK_EQ(comps[1].wc.status, IBV_WC_SUCCESS);
}

/* A READ longer than the window (1200 PSNs, 512 slots) loses response +10: the 511
 * after it are placed, the rest dropped as too far ahead to record. When +10's replay
 * moves the window, the dropped ones are asked for at once, in one request, with no
 * retry more -- they used to wait for a tail-loss probe each 512 PSNs (two probe
 * intervals here). */
static void test_read_past_window(void)
{
	setup(3, 7);
	make_reads(1);
	qp->attr.timeout = 14;
	struct swv_send_wqe *w = swv_wq_slot(&qp->sq, 0);
	const uint32_t n = 1200, far = 10 + SWV_MAX_UNACKED_PSNS;
	w->length = n * MTU;
	w->sge[0].length = n * MTU;
	qp->sq.tail = 1;
	swv_req_run(qp);
	CHECK_EQ(ntx, 1);
	for (uint32_t k = 0; k < n; k++)
		if (k != 10)
			read_response(PSN0 + k, k == 0	     ? SWV_OP_READ_RESP_FIRST
						: k == n - 1 ? SWV_OP_READ_RESP_LAST
							     : SWV_OP_READ_RESP_MIDDLE);
	CHECK_EQ(ntx, 2);
	CHECK_EQ(tx_psn[1], PSN0 + 10);
	CHECK_EQ(tx_reth_len[1], MTU);
	read_response(PSN0 + 10, SWV_OP_READ_RESP_MIDDLE);
	CHECK_EQ(qp->req->una_psn, PSN0 + far);
	CHECK_EQ(ntx, 3);
	CHECK_EQ(tx_psn[2], PSN0 + far);
	CHECK_EQ(tx_reth_len[2], (n - far) * MTU);
	for (uint32_t k = far; k < n; k++)
		read_response(PSN0 + k,
			      k == n - 1 ? SWV_OP_READ_RESP_LAST : SWV_OP_READ_RESP_MIDDLE);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(comps[0].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(ntx, 3);
	CHECK_EQ(qp->req->n_retries, 1u);
	CHECK_EQ(qp->req->n_probes, 0u);
}

/* Selective ACK: a sequence NAK with a map makes the requester resend every hole the
 * map shows (below the highest PSN held) at once, each once, the last with AckReq, for
 * one retry; a copy of it resends nothing; an ACK with a map later resends only the
 * hole it adds, for no retry; everything completes only on the cumulative ACK. */
static void test_sack_holes(void)
{
	setup(3, 7);
	swv_req_run(qp);
	CHECK_EQ(ntx, (int)(3 * NWQE));
	for (int i = 0; i < ntx; i++)
		CHECK(tx_sack[i]); /* every RC request says it reads maps */
	/* +4 lost, +5 and +7 too; +6, +8, +9 held (+10, +11 not yet arrived) */
	const uint32_t held[] = {PSN0 + 6, PSN0 + 8, PSN0 + 9};
	respond_sack(PSN0 + 4, 0x60, 4, held, 3);
	CHECK_EQ(ncomps, 1); /* WQE 0, by the NAK's cumulative part */
	CHECK_EQ(ntx, (int)(3 * NWQE) + 3);
	CHECK_EQ(tx_psn[ntx - 3], PSN0 + 4);
	CHECK_EQ(tx_psn[ntx - 2], PSN0 + 5);
	CHECK_EQ(tx_psn[ntx - 1], PSN0 + 7);
	CHECK(tx_ackreq[ntx - 1]);
	CHECK_EQ(qp->req->retry_left, 2);
	CHECK_EQ(qp->req->n_holes_resent, 3u);
	CHECK_EQ(qp->req->n_sack_naks, 1u);
	/* a copy (or a NAK again within the round trip): nothing more */
	int sent = ntx;
	respond_sack(PSN0 + 4, 0x60, 4, held, 3);
	CHECK_EQ(ntx, sent);
	CHECK_EQ(qp->req->retry_left, 2);
	/* +4, +5 arrived: the ACK for +6 says +8, +9, +11 are held, so +10 is a new hole;
	 * +7 was resent already */
	const uint32_t held2[] = {PSN0 + 8, PSN0 + 9, PSN0 + 11};
	respond_sack(PSN0 + 6, 0x00, 4, held2, 3);
	CHECK_EQ(ncomps, 2); /* WQE 1 (+3..+5) */
	CHECK_EQ(ntx, sent + 1);
	CHECK_EQ(tx_psn[ntx - 1], PSN0 + 10);
	CHECK(tx_ackreq[ntx - 1]);
	CHECK_EQ(qp->req->retry_left, 3); /* progress; the ACK's hole took no retry */
	for (uint32_t psn = PSN0 + 4; psn < PSN0 + 3 * NWQE; psn++)
		CHECK_EQ(count_tx(psn),
			 psn == PSN0 + 4 || psn == PSN0 + 5 || psn == PSN0 + 7 || psn == PSN0 + 10
			     ? 2
			     : 1);
	respond(PSN0 + 3 * NWQE - 1, 0x1f);
	CHECK_EQ(ncomps, (int)NWQE);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(qp->req->n_sr_fallbacks, 0u);
}

/* The responder's update between NAKs is an ACK for ePSN - 1, one below una once the
 * NAK moved una to ePSN: taken for its map (the hole it adds goes out, for no retry),
 * not dropped as a stale ACK. */
static void test_sack_update(void)
{
	setup(3, 7);
	swv_req_run(qp);
	const uint32_t held[] = {PSN0 + 5};
	respond_sack(PSN0 + 4, 0x60, 4, held, 1); /* the NAK at the gap knows +5 only */
	CHECK_EQ(qp->req->una_psn, PSN0 + 4);
	CHECK_EQ(count_tx(PSN0 + 4), 2);
	CHECK_EQ(qp->req->retry_left, 2);
	int sent = ntx;
	const uint32_t held2[] = {PSN0 + 5, PSN0 + 7, PSN0 + 8};
	respond_sack(PSN0 + 3, 0x00, 4, held2, 3);
	CHECK_EQ(ntx, sent + 1);
	CHECK_EQ(tx_psn[ntx - 1], PSN0 + 6);
	CHECK(tx_ackreq[ntx - 1]);
	CHECK_EQ(qp->req->retry_left, 2);
	CHECK_EQ(ncomps, 1);
	/* the same update again (a copy): nothing */
	respond_sack(PSN0 + 3, 0x00, 4, held2, 3);
	CHECK_EQ(ntx, sent + 1);
	/* a plain ACK for una - 1 stays a stale one */
	respond(PSN0 + 3, 0x1f);
	CHECK_EQ(ntx, sent + 1);
	respond(PSN0 + 3 * NWQE - 1, 0x1f);
	CHECK_EQ(ncomps, (int)NWQE);
}

/* After the hold-off, a NAK with a map for the same PSN is the responder asking again
 * (the resends were lost): every hole goes out again, inside the same recovery round
 * (no retry); with retries exhausted the ACK timeout fails the head as with plain
 * NAKs. */
static void test_sack_again(void)
{
	setup(1, 7);
	swv_req_run(qp);
	const uint32_t held[] = {PSN0 + 6};
	respond_sack(PSN0 + 4, 0x60, 4, held, 1);
	CHECK_EQ(qp->req->retry_left, 0);
	CHECK_EQ(count_tx(PSN0 + 4), 2);
	CHECK_EQ(count_tx(PSN0 + 5), 2);
	int sent = ntx;
	qp->req->seq_nak_at -= 1000000000ull; /* past the copy hold-off */
	for (uint32_t i = 0; i < SWV_MAX_UNACKED_PSNS; i++)
		qp->req->sack_us[i] -= 1000000u;
	respond_sack(PSN0 + 4, 0x60, 4, held, 1);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	CHECK_EQ(count_tx(PSN0 + 4), 3);
	CHECK_EQ(count_tx(PSN0 + 5), 3);
	CHECK_EQ(ntx, sent + 2);
	swv_req_timer(qp, qp->req->ack_deadline);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(comps[ncomps - 1].wc.status, IBV_WC_RETRY_EXC_ERR);
}

/* A map from a hostile or broken peer only makes resends sooner: PSNs past what was
 * sent, a map from a NAK for a PSN already acknowledged, a map claiming everything is
 * held -- nothing completes without the cumulative ACK, nothing unsent goes out. */
static void test_sack_bad_map(void)
{
	setup(3, 7);
	swv_req_run(qp);
	respond(PSN0 + 3, 0x1f); /* WQE 0 and +3 done */
	CHECK_EQ(ncomps, 1);
	int sent = ntx;
	/* a map naming +4 + 512 (past the window) and nothing else: the holes are the PSNs
	 * in flight, each once; nothing past +11 */
	const uint32_t far[] = {PSN0 + 4 + 512};
	respond_sack(PSN0 + 4, 0x60, SWV_SACK_MAX_LEN, far, 1);
	CHECK_EQ(ntx, sent + 8); /* +4 .. +11 */
	for (int i = sent; i < ntx; i++)
		CHECK(swv_psn_cmp(tx_psn[i], PSN0 + 3 * NWQE) < 0);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(qp->req->retry_left, 2);
	/* old PSNs: an ACK or NAK with a map below una is stale and ignored */
	sent = ntx;
	const uint32_t old[] = {PSN0 + 2};
	respond_sack(PSN0 + 1, 0x60, 4, old, 1);
	respond_sack(PSN0, 0x00, 4, old, 1);
	CHECK_EQ(ntx, sent);
	CHECK_EQ(ncomps, 1);
	/* a map claiming all is held completes nothing */
	setup(3, 7);
	swv_req_run(qp);
	const uint32_t all[] = {PSN0 + 5, PSN0 + 6,  PSN0 + 7, PSN0 + 8,
				PSN0 + 9, PSN0 + 10, PSN0 + 11};
	respond_sack(PSN0 + 4, 0x60, 4, all, 7);
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(count_tx(PSN0 + 4), 2);
	for (uint32_t psn = PSN0 + 5; psn < PSN0 + 12; psn++)
		CHECK_EQ(count_tx(psn), 1);
	CHECK_EQ(qp->req->una_psn, PSN0 + 4);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
}

/* Selective ACK across the 2^24 PSN wrap: a NAK at 0xfffffe whose map holds 0x000000
 * and 0x000002 resends 0xfffffe, 0xffffff and 0x000001, each once, for one retry. */
static void test_sack_wrap(void)
{
	const uint32_t w0 = 0xfffffcu; /* WQE k: w0 + 3k .. w0 + 3k + 2, mod 2^24 */
	setup(3, 7);
	qp->attr.sq_psn = w0;
	swv_req_reset(qp);
	qp->req->window = qp->req->cwnd = 128;
	swv_req_run(qp);
	CHECK_EQ(ntx, (int)(3 * NWQE));
	CHECK_EQ(tx_psn[4], 0u);
	static uint8_t map[4];
	memset(map, 0, sizeof(map));
	map[0] = 1u << 1 | 1u << 3; /* bit i: 0xfffffe + 1 + i, so 0x000000 and 0x000002 */
	struct swv_pkt p;
	memset(&p, 0, sizeof(p));
	p.opcode = SWV_OP_RC | SWV_OP_ACK;
	p.flags = swv_opcode(p.opcode)->flags;
	p.psn = 0xfffffeu;
	p.aeth_syndrome = 0x60;
	p.sack = true;
	p.sack_map = map;
	p.sack_len = sizeof(map);
	swv_comp_rx(qp, &p);
	CHECK_EQ(ntx, (int)(3 * NWQE) + 3);
	CHECK_EQ(tx_psn[ntx - 3], 0xfffffeu);
	CHECK_EQ(tx_psn[ntx - 2], 0xffffffu);
	CHECK_EQ(tx_psn[ntx - 1], 0x000001u);
	CHECK(tx_ackreq[ntx - 1]);
	CHECK_EQ(qp->req->retry_left, 2);
	CHECK_EQ(qp->req->una_psn, 0xfffffeu);
	respond((w0 + 3 * NWQE - 1) & SWV_PSN_MASK, 0x1f);
	CHECK_EQ(ncomps, (int)NWQE);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
}

/* Ages every hold-off the completer keeps (implied NAK, copy of a sequence NAK, SACK
 * hole), as if the next answer arrived long after them. */
static void past_holdoffs(void)
{
	struct swv_req_state *r = qp->req;
	if (r->implied_retry_at)
		r->implied_retry_at -= 1000000000ull;
	r->implied_echoes = 0;
	r->seq_nak_at -= 1000000000ull;
	for (uint32_t i = 0; i < SWV_MAX_UNACKED_PSNS; i++)
		r->sack_us[i] -= 1000000u;
}

/* One loss costs one retry however late its other evidence comes: the head atomic's
 * response is lost, and the ACKs and sequence NAKs of the burst sent behind it arrive
 * each past every hold-off, with no progress between them. Each used to spend a retry
 * of its own, so retry_cnt 3 ended the connection within milliseconds (issue 10, the
 * CI failure of mp-udp/test_rc_fault). The same with the head READ's responses lost
 * and sequence NAKs past it. */
static void test_one_loss_one_retry(void)
{
	setup(3, 7);
	qp->attr.max_rd_atomic = 4;
	struct swv_send_wqe *w = swv_wq_slot(&qp->sq, 0);
	w->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; /* PSN0, then WRITEs +1..+9 */
	w->length = 8;
	w->sge[0].length = 8;
	swv_req_run(qp);
	respond(PSN0 + 3, 0x1f); /* WRITE 1 executed: the atomic's response was lost */
	CHECK_EQ(qp->req->retry_left, 2);
	CHECK_EQ(count_tx(PSN0), 2);
	past_holdoffs();
	respond(PSN0 + 4, 0x1f);
	past_holdoffs();
	respond(PSN0 + 6, 0x1f);
	past_holdoffs();
	respond(PSN0 + 9, 0x60);
	past_holdoffs();
	respond(PSN0 + 9, 0x1f); /* the last PSN sent before the retry */
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	CHECK_EQ(qp->req->retry_left, 2);
	CHECK_EQ(ncomps, 0);
	/* a resend lost too is the tail-loss probe's, for no retry either */
	int sent = count_tx(PSN0);
	swv_req_timer(qp, qp->req->probe_at);
	CHECK_EQ(count_tx(PSN0), sent + 1);
	CHECK_EQ(qp->req->retry_left, 2);
	/* an answer for a PSN first sent after the round began is a new loss (the
	 * responder executed the resent atomic): that costs a retry */
	post_write(); /* +10..+12 */
	swv_req_run(qp);
	CHECK_EQ(count_tx(PSN0 + 12), 1);
	past_holdoffs();
	respond(PSN0 + 12, 0x1f);
	CHECK_EQ(qp->req->retry_left, 1);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	atomic_ack(PSN0, 5); /* the resend's answer: progress */
	CHECK_EQ(ncomps, 1);
	CHECK_EQ(qp->req->retry_left, 3);
	respond(PSN0 + 12, 0x1f);
	CHECK_EQ(ncomps, (int)NWQE + 1);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);

	setup(3, 7);
	make_reads(1); /* READ PSN0..+3, then three 3-packet WRITEs +4..+12 */
	swv_req_run(qp);
	read_response(PSN0, SWV_OP_READ_RESP_FIRST);
	read_responses(PSN0, 3, 4); /* +1, +2 lost */
	CHECK_EQ(qp->req->retry_left, 2);
	const uint32_t naks[] = {PSN0 + 6, PSN0 + 9, PSN0 + 11, PSN0 + 12};
	for (unsigned i = 0; i < SWV_ARRAY_SIZE(naks); i++) {
		past_holdoffs();
		respond(naks[i], 0x60);
	}
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	CHECK_EQ(qp->req->retry_left, 2);
	read_responses(PSN0, 1, 3);
	CHECK_EQ(ncomps, 3); /* the READ, and the WRITEs the NAKs answered */
	respond(PSN0 + 12, 0x1f);
	CHECK_EQ(ncomps, (int)NWQE);
	for (int i = 0; i < ncomps; i++)
		CHECK_EQ(comps[i].wc.status, IBV_WC_SUCCESS);
}

/* A peer that answers every resend with the same sequence NAK (its expected PSN never
 * matches what arrives), with tail-loss probes in between: every NAK inside the round
 * resends for free, but none renews the ACK timeout, so the QP still ends in
 * RETRY_EXC_ERR after retry_cnt + 1 charged retries (the first NAK, then a timeout
 * each), with no progress. */
static void test_nak_forever_bounded(void)
{
	for (int kind = 0; kind < 3; kind++) {
		setup(3, 7);
		if (kind == 1) {
			qp->attr.max_rd_atomic = 4;
			struct swv_send_wqe *w = swv_wq_slot(&qp->sq, 0);
			w->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
			w->length = 8;
			w->sge[0].length = 8;
		} else if (kind == 2) {
			make_reads(1);
		}
		swv_req_run(qp);
		uint32_t nak = kind == 0 ? PSN0 + 4 : kind == 1 ? PSN0 + 2 : PSN0;
		respond(nak, 0x60);
		CHECK_EQ(qp->req->retry_left, 2);
		int timeouts = 0;
		while (qp->state == IBV_QPS_RTS && timeouts < 10) {
			uint64_t dl = qp->req->ack_deadline;
			CHECK(dl != 0);
			for (int i = 0; i < 20; i++) {
				past_holdoffs();
				int sent = ntx;
				respond(nak, 0x60);
				CHECK(ntx > sent || kind == 1); /* resent, as asked */
				CHECK_EQ(qp->req->ack_deadline,
					 dl); /* a free resend renews nothing */
				if (qp->req->probe_at && qp->req->probe_at < dl)
					swv_req_timer(qp, qp->req->probe_at);
				CHECK_EQ(qp->req->ack_deadline, dl);
			}
			swv_req_timer(qp, dl);
			timeouts++;
		}
		CHECK_EQ(timeouts, 3);
		CHECK_EQ(qp->state, IBV_QPS_ERR);
		CHECK_EQ(comps[ncomps - 1].wc.status, IBV_WC_RETRY_EXC_ERR);
	}
}

/* An RNR NAK ends the recovery round: what the wait resends from una is a new
 * transmission, so a sequence NAK after it is a new loss. A peer that takes turns with
 * an RNR NAK and a sequence NAK at the same PSN (rnr_retry 7: RNR NAKs are free) still
 * ends in RETRY_EXC_ERR after retry_cnt + 1 sequence NAKs; the RNR NAK stops the ACK
 * timeout, so nothing else would end it. */
static void test_rnr_ends_round(void)
{
	setup(3, 7);
	swv_req_run(qp);
	respond(PSN0 + 4, 0x60); /* WQE 0 done; a retry from +4 opens a round */
	CHECK_EQ(qp->req->retry_left, 2);
	int cycles = 0;
	while (qp->state == IBV_QPS_RTS && cycles < 10) {
		past_holdoffs();
		respond(PSN0 + 4, 0x20 | 1); /* +4 found no receive WQE */
		CHECK_EQ(qp->req->ack_deadline, 0u);
		respond(PSN0 + 4, 0x60); /* a late copy while waiting: the wait's */
		swv_req_timer(qp, qp->req->rnr_until);
		CHECK_EQ(count_tx(PSN0 + 4), 3 + 2 * cycles);
		past_holdoffs();
		respond(PSN0 + 4, 0x60); /* the resend of +4 was lost, +5 arrived */
		cycles++;
	}
	CHECK_EQ(cycles, 3);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(comps[ncomps - 1].wc.status, IBV_WC_RETRY_EXC_ERR);
}

/* The timing statistics of the SWVERBS_LOG=3 summary: each interval from one progress
 * to the next is counted under the strongest recovery taken in it -- nothing, a sequence
 * NAK, a tail-loss probe, an ACK timeout -- and an idle QP counts no interval. */
static void test_recovery_timing(void)
{
	setup(3, 7);
	swv_req_run(qp);
	CHECK(qp->req->rec_since != 0); /* the pipe was idle: an interval begins */
	respond(PSN0 + 2, 0x1f);       /* WQE 0, no loss */
	CHECK_EQ(qp->req->n_rec[SWV_REC_NONE], 1u);
	respond(PSN0 + 4, 0x60); /* +3 done, +4 lost: the NAK is progress too */
	CHECK_EQ(qp->req->n_rec[SWV_REC_NONE], 2u);
	CHECK_EQ(qp->req->rec_kind, SWV_REC_NAK);
	respond(PSN0 + 5, 0x1f); /* the resend filled the hole */
	CHECK_EQ(qp->req->n_rec[SWV_REC_NAK], 1u);
	CHECK_EQ(qp->req->rec_kind, SWV_REC_NONE);
	swv_req_timer(qp, qp->req->probe_at); /* silence: the probe */
	CHECK_EQ(qp->req->n_probes, 1u);
	/* a NAK in the same interval does not hide the probe */
	respond(PSN0 + 8, 0x60);
	CHECK_EQ(qp->req->n_rec[SWV_REC_PROBE], 1u);
	swv_req_timer(qp, qp->req->ack_deadline); /* silence past the ACK timeout */
	CHECK_EQ(qp->req->n_timeouts, 1u);
	CHECK_EQ(qp->req->rec_kind, SWV_REC_TIMEOUT);
	respond(PSN0 + 3 * NWQE - 1, 0x1f); /* everything: idle */
	CHECK_EQ(ncomps, (int)NWQE);
	CHECK_EQ(qp->req->n_rec[SWV_REC_TIMEOUT], 1u);
	CHECK_EQ(qp->req->rec_since, 0u);
	uint64_t n = 0;
	for (int k = 0; k < SWV_REC_KINDS; k++) {
		n += qp->req->n_rec[k];
		CHECK(qp->req->rec_max_ns[k] * qp->req->n_rec[k] >= qp->req->rec_ns[k]);
	}
	CHECK_EQ(n, 5u);
}

int main(void)
{
	test_dup_seq_nak();
	test_nak_progress_reloads();
	test_timeouts_exhaust(0);
	test_timeouts_exhaust(3);
	test_timeouts_exhaust(7);
	test_timeout_ring_unread();
	test_read_response_lost();
	test_read_gap_once();
	test_read_selective();
	test_read_selective_probe();
	test_read_request_lost();
	test_read_then_answered();
	test_read_long_slots_cleared();
	test_read_past_window();
	test_seq_nak_past_read();
	test_read_alive_hang();
	test_no_ackreq_in_window();
	test_rnr_wait_vs_late_nak();
	test_karn_after_probe();
	test_cwnd_past_small_window();
	test_timeout0_tail_loss();
	test_dup_rnr_nak();
	test_selective_resend();
	test_selective_fallback();
	test_selective_retry_count();
	test_selective_probe();
	test_selective_probe_unmeasured();
	test_ud_refused_drop();
	test_probe_answer_no_fallback();
	test_sack_holes();
	test_sack_update();
	test_sack_again();
	test_sack_bad_map();
	test_sack_wrap();
	test_recovery_timing();
	test_one_loss_one_retry();
	test_nak_forever_bounded();
	test_rnr_ends_round();
	if (qp)
		free(qp->sq.buf);
	free(qp);
	printf("test_completer: ok\n");
	return 0;
}
