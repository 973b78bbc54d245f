/*
 * libFuzzer target: the whole receive path of a QP -- parser, QPN lookup, source,
 * transport and P_Key checks, responder and completer -- fed the input as datagrams
 * from the peer (or from strangers) of RC, UC, UD and SRQ QPs in RTS with posted
 * receives and outstanding send WQEs. Fixture and input format: fuzz_qp_rx.h.
 *
 * The datagrams go through swv_progress_test_rx, the progress thread's own per-packet
 * dispatch, inside its work section (swv_progress_test_hold): the thread neither
 * receives nor runs timers meanwhile, so an input replays the same way every time.
 * What the QPs send goes to real UDP sockets of the harness, drained after each input.
 * Aborts on a broken invariant: a completion for a WQE never posted or longer than its
 * buffer, a QP number that is not ours, a write into the canary page or the
 * remote-read-only MR (guard pages turn a stray access into SIGSEGV).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "core/context.h"
#include "core/qp.h"
#include "fuzz_qp_rx.h"
#include "link/endpoint.h"
#include "progress/progress.h"
#include "transport/crc.h"
#include "transport/opcode.h"
#include "transport/packet.h"
#include "transport/qp_transport.h"
#include "util/clock.h"

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "fuzz_qp_rx: " __VA_ARGS__);                                       \
		fputc('\n', stderr);                                                               \
		abort();                                                                           \
	} while (0)
#define MUST(x)                                                                                    \
	do {                                                                                       \
		if (!(x))                                                                          \
			FAIL("%s:%d: %s failed (errno %d)", __FILE__, __LINE__, #x, errno);        \
	} while (0)

static struct {
	struct ibv_context *ibctx;
	struct swv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_mr *mr_rw, *mr_ro;
	struct ibv_ah *ah;
	uint8_t *mem;
	int peer_fd, foreign_fd;
	uint16_t peer_port, foreign_port; /* host order */
	struct ibv_port_attr port;
	union ibv_gid gid;
	/* per input */
	struct ibv_srq *srq;
	struct ibv_qp *qp[FQ_NQPS];
} F;

/* wr_id = tag << 32 | buffer length; tag names the fixture WQE. */
#define WRID(tag, len) ((uint64_t)(tag) << 32 | (uint32_t)(len))
#define SEND_TAG       0x5e00u
#define RECV_TAG       0x7e00u

static uint64_t va(uint32_t off)
{
	return (uint64_t)(uintptr_t)F.mem + FQ_RW + off;
}

static int udp_socket(uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	MUST(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	MUST(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	MUST(getsockname(fd, (struct sockaddr *)&a, &al) == 0);
	int sz = 4 << 20;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	*port = ntohs(a.sin_port);
	return fd;
}

static void fill_pattern(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static void setup_once(void)
{
	/* The default device on 127.0.0.1, no injected faults. */
	unsetenv("SWVERBS_DEVICES");
	unsetenv("SWVERBS_CONFIG");
	unsetenv("SWVERBS_FAULT");

	void *m = mmap((void *)(uintptr_t)FQ_MEM_VA, FQ_MEM_LEN, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (m == MAP_FAILED) /* taken: addresses in seeds miss, the rest still works */
		m = mmap(NULL, FQ_MEM_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			 0);
	MUST(m != MAP_FAILED);
	F.mem = m;
	MUST(mprotect(F.mem + FQ_GUARD0, 0x1000, PROT_NONE) == 0);
	MUST(mprotect(F.mem + FQ_GUARD1, 0x1000, PROT_NONE) == 0);
	fill_pattern(F.mem + FQ_CANARY, 0x1000, 0xc3);
	fill_pattern(F.mem + FQ_RO, FQ_RO_LEN, 0x3c);

	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	MUST(list && n >= 1);
	F.ibctx = ibv_open_device(list[0]);
	MUST(F.ibctx);
	ibv_free_device_list(list);
	F.ctx = to_swv_ctx(F.ibctx);
	int fl = fcntl(F.ibctx->async_fd, F_GETFL);
	MUST(fcntl(F.ibctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
	MUST(ibv_query_port(F.ibctx, 1, &F.port) == 0);
	MUST(ibv_query_gid(F.ibctx, 1, 0, &F.gid) == 0);

	F.pd = ibv_alloc_pd(F.ibctx);
	MUST(F.pd);
	F.scq = ibv_create_cq(F.ibctx, 256, NULL, NULL, 0);
	F.rcq = ibv_create_cq(F.ibctx, 256, NULL, NULL, 0);
	MUST(F.scq && F.rcq);
	F.mr_rw = ibv_reg_mr(F.pd, F.mem + FQ_RW, FQ_RW_LEN,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	F.mr_ro = ibv_reg_mr(F.pd, F.mem + FQ_RO, FQ_RO_LEN, IBV_ACCESS_REMOTE_READ);
	MUST(F.mr_rw && F.mr_ro);

	F.peer_fd = udp_socket(&F.peer_port);
	F.foreign_fd = udp_socket(&F.foreign_port);

	struct ibv_ah_attr ah = {.dlid = F.port.lid, .port_num = 1};
	if (F.port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		ah.is_global = 1;
		ah.grh.dgid = F.gid;
		ah.grh.hop_limit = 64;
	}
	F.ah = ibv_create_ah(F.pd, &ah);
	MUST(F.ah);
}

static uint32_t peer_qpn(unsigned i)
{
	return (uint32_t)F.peer_port << 8 | (i + 1);
}

static void to_rts(struct ibv_qp *qp, unsigned i)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = FQ_QKEY};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (qp->qp_type == IBV_QPT_UD) {
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
		if (qp->qp_type == IBV_QPT_RC)
			a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	MUST(ibv_modify_qp(qp, &a, mask) == 0);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	mask = IBV_QP_STATE;
	if (qp->qp_type != IBV_QPT_UD) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = peer_qpn(i);
		a.rq_psn = 0;
		a.ah_attr.port_num = 1;
		a.ah_attr.dlid = F.port.lid;
		if (F.port.link_layer == IBV_LINK_LAYER_ETHERNET) {
			a.ah_attr.is_global = 1;
			a.ah_attr.grh.dgid = F.gid;
			a.ah_attr.grh.hop_limit = 64;
		}
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (qp->qp_type == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 4;
			a.min_rnr_timer = 1;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	MUST(ibv_modify_qp(qp, &a, mask) == 0);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 3;
		a.rnr_retry = 3;
		a.max_rd_atomic = 4;
		mask |=
		    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	MUST(ibv_modify_qp(qp, &a, mask) == 0);
}

static void post_recv(unsigned i, uint32_t off, uint32_t len, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		struct ibv_sge sge = {va(off + k * len), len, F.mr_rw->lkey};
		struct ibv_recv_wr wr = {.wr_id = WRID(RECV_TAG + i, len),
					 .sg_list = &sge,
					 .num_sge = 1},
				   *bad;
		if (i == FQ_SRQ)
			MUST(ibv_post_srq_recv(F.srq, &wr, &bad) == 0);
		else
			MUST(ibv_post_recv(F.qp[i], &wr, &bad) == 0);
	}
}

static void post_send(unsigned i, enum ibv_wr_opcode op, uint32_t len, uint32_t local_off)
{
	struct ibv_sge sge = {va(local_off), len, F.mr_rw->lkey};
	struct ibv_send_wr wr = {.wr_id = WRID(SEND_TAG + i, len),
				 .sg_list = &sge,
				 .num_sge = len ? 1 : 0,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = 0x4000;
		wr.wr.atomic.rkey = 0x1234;
		wr.wr.atomic.compare_add = 1;
		wr.wr.atomic.swap = 2;
	} else if (op == IBV_WR_SEND && i == FQ_UD) {
		wr.wr.ud.ah = F.ah;
		wr.wr.ud.remote_qpn = peer_qpn(i);
		wr.wr.ud.remote_qkey = FQ_QKEY;
	} else {
		wr.wr.rdma.remote_addr = 0x8000;
		wr.wr.rdma.rkey = 0x4321;
	}
	wr.imm_data = htonl(0xabcd);
	MUST(ibv_post_send(F.qp[i], &wr, &bad) == 0);
}

static void fixture_up(void)
{
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	F.srq = ibv_create_srq(F.pd, &sa);
	MUST(F.srq);
	for (unsigned i = 0; i < FQ_NQPS; i++) {
		struct ibv_qp_init_attr qa = {
		    .send_cq = F.scq,
		    .recv_cq = F.rcq,
		    .srq = i == FQ_SRQ ? F.srq : NULL,
		    .cap = {.max_send_wr = 16,
			    .max_recv_wr = 8,
			    .max_send_sge = 1,
			    .max_recv_sge = 1},
		    .qp_type = i == FQ_UC   ? IBV_QPT_UC
			       : i == FQ_UD ? IBV_QPT_UD
					    : IBV_QPT_RC,
		};
		F.qp[i] = ibv_create_qp(F.pd, &qa);
		MUST(F.qp[i]);
		to_rts(F.qp[i], i);
	}
	post_recv(FQ_RC, FQ_OFF_RC_RECV, FQ_RECV_LEN, 4);
	post_recv(FQ_UC, FQ_OFF_UC_RECV, FQ_RECV_LEN, 2);
	post_recv(FQ_UD, FQ_OFF_UD_RECV, FQ_RECV_LEN, 2);
	post_recv(FQ_SRQ, FQ_OFF_SRQ_RECV, FQ_RECV_LEN, 4);

	fill_pattern(F.mem + FQ_RW + FQ_OFF_SRC, 0x1000, 0x11);
	post_send(FQ_RC, IBV_WR_RDMA_WRITE, 64, FQ_OFF_SRC);
	post_send(FQ_RC, IBV_WR_RDMA_READ, 3000, FQ_OFF_READ);
	post_send(FQ_RC, IBV_WR_SEND, 2500, FQ_OFF_SRC);
	post_send(FQ_RC, IBV_WR_ATOMIC_CMP_AND_SWP, 8, FQ_OFF_ATOMIC);
	post_send(FQ_RC, IBV_WR_ATOMIC_FETCH_AND_ADD, 8, FQ_OFF_ATOMIC + 8);
	post_send(FQ_RC, IBV_WR_SEND_WITH_IMM, 0, FQ_OFF_SRC);
	post_send(FQ_UC, IBV_WR_SEND, 2000, FQ_OFF_SRC);
	post_send(FQ_UC, IBV_WR_RDMA_WRITE_WITH_IMM, 100, FQ_OFF_SRC);
	post_send(FQ_UD, IBV_WR_SEND, 100, FQ_OFF_SRC);
	post_send(FQ_SRQ, IBV_WR_SEND, 100, FQ_OFF_SRC);
}

static int verbose; /* FUZZ_VERBOSE=1: print what each input completed (seed work) */

static void check_wc(const struct ibv_wc *wc, int recv)
{
	if (verbose)
		fprintf(stderr, "  %s wc: qp %#x wr_id %#llx status %s opcode %d len %u\n",
			recv ? "recv" : "send", wc->qp_num, (unsigned long long)wc->wr_id,
			ibv_wc_status_str(wc->status), wc->opcode, wc->byte_len);
	unsigned tag = (unsigned)(wc->wr_id >> 32);
	uint32_t len = (uint32_t)wc->wr_id;
	unsigned base = recv ? RECV_TAG : SEND_TAG;

	if (tag < base || tag >= base + FQ_NQPS)
		FAIL("%s completion with wr_id %#llx that was never posted", recv ? "recv" : "send",
		     (unsigned long long)wc->wr_id);
	if (wc->qp_num != F.qp[tag - base]->qp_num)
		FAIL("completion of QP %#x names QP %#x", F.qp[tag - base]->qp_num, wc->qp_num);
	if (recv && wc->status == IBV_WC_SUCCESS && wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM &&
	    wc->byte_len > len)
		FAIL("receive of %u bytes into a %u-byte buffer", wc->byte_len, len);
}

static void drain(void)
{
	struct ibv_wc wc[32];
	int n;
	while ((n = ibv_poll_cq(F.scq, 32, wc)) > 0)
		for (int i = 0; i < n; i++)
			check_wc(&wc[i], 0);
	MUST(n == 0);
	while ((n = ibv_poll_cq(F.rcq, 32, wc)) > 0)
		for (int i = 0; i < n; i++)
			check_wc(&wc[i], 1);
	MUST(n == 0);
	struct ibv_async_event ev;
	while (ibv_get_async_event(F.ibctx, &ev) == 0)
		ibv_ack_async_event(&ev);
	uint8_t b[128];
	while (recv(F.peer_fd, b, sizeof(b), 0) >= 0 || errno == EINTR)
		;
	while (recv(F.foreign_fd, b, sizeof(b), 0) >= 0 || errno == EINTR)
		;
}

static void fixture_down(void)
{
	for (unsigned i = 0; i < FQ_NQPS; i++)
		MUST(ibv_destroy_qp(F.qp[i]) == 0);
	MUST(ibv_destroy_srq(F.srq) == 0);
	/* Completions of destroyed QPs are gone with them (design.md); async events too. */
	drain();
	for (size_t i = 0; i < 0x1000; i++)
		if (F.mem[FQ_CANARY + i] != (uint8_t)(0xc3 + i * 7))
			FAIL("unregistered memory at +%#zx changed", FQ_CANARY + i);
	for (size_t i = 0; i < FQ_RO_LEN; i++)
		if (F.mem[FQ_RO + i] != (uint8_t)(0x3c + i * 7))
			FAIL("remote-read-only MR changed at +%#zx", i);
}

/* ---- input decoding ---- */

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void map_key(uint8_t *p)
{
	uint32_t k = get_be32(p);
	if (k == FQ_KEY_RW)
		put_be32(p, F.mr_rw->rkey);
	else if (k == FQ_KEY_RO)
		put_be32(p, F.mr_ro->rkey);
}

/* What a packet from this run's peer would carry: its QPNs and keys. */
static void rewrite(uint8_t *b, size_t len, unsigned target, unsigned src)
{
	if (len < SWV_BTH_LEN)
		return;
	if (target < FQ_NQPS) {
		uint32_t q = F.qp[target]->qp_num;
		b[5] = (uint8_t)(q >> 16);
		b[6] = (uint8_t)(q >> 8);
		b[7] = (uint8_t)q;
	}
	if (src == FQ_SRC_RAW)
		return;
	const struct swv_opcode_info *oi = swv_opcode(b[0]);
	if (!oi->name || len < oi->hdr_len)
		return;
	uint32_t f = oi->flags;
	uint8_t *q = b + SWV_BTH_LEN;
	q += (f & SWV_HDR_XRCETH) ? SWV_XRCETH_LEN : 0;
	if (f & SWV_HDR_DETH) {
		if (src == FQ_SRC_PEER) {
			q[5] = (uint8_t)(F.peer_port >> 8);
			q[6] = (uint8_t)F.peer_port;
		}
		q += SWV_DETH_LEN;
	}
	q += (f & SWV_HDR_FETH) ? SWV_FETH_LEN : 0;
	if (f & SWV_HDR_RETH) {
		map_key(q + 8);
		q += SWV_RETH_LEN;
	}
	q += (f & SWV_HDR_AETH) ? SWV_AETH_LEN : 0;
	q += (f & SWV_HDR_ATMACK) ? SWV_ATMACK_LEN : 0;
	if (f & SWV_HDR_ATMETH) {
		map_key(q + 8);
		q += SWV_ATMETH_LEN;
	}
	q += (f & SWV_HDR_IMM) ? SWV_IMM_LEN : 0;
	if (f & SWV_HDR_IETH)
		map_key(q);
}

static void fix_crc(uint8_t *buf, size_t len)
{
	if (len < SWV_BTH_LEN + SWV_CRC_LEN)
		return;
	uint8_t bth[SWV_BTH_LEN];
	memcpy(bth, buf, SWV_BTH_LEN);
	bth[4] = 0xff;
	uint32_t crc = swv_crc32(0, bth, SWV_BTH_LEN);
	crc = swv_crc32(crc, buf + SWV_BTH_LEN, len - SWV_BTH_LEN - SWV_CRC_LEN);
	uint8_t *c = buf + len - SWV_CRC_LEN;
	for (int i = 0; i < 4; i++)
		c[i] = (uint8_t)(crc >> (8 * i));
}

struct batch {
	struct swv_rx_pkt pkts[FQ_MAX_BATCH];
	uint8_t *bufs[FQ_MAX_BATCH];
	unsigned n;
};

static void flush(struct batch *bt)
{
	if (bt->n)
		swv_progress_test_rx(&F.ctx->progress, to_swv_qp(F.qp[FQ_RC])->ep, bt->pkts, bt->n);
	for (unsigned i = 0; i < bt->n; i++)
		free(bt->bufs[i]);
	bt->n = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		verbose = getenv("FUZZ_VERBOSE") != NULL;
		setup_once();
		ready = 1;
	}
	fixture_up();

	struct batch bt = {.n = 0};
	swv_progress_test_hold(&F.ctx->progress);
	while (size >= 3) {
		uint8_t ctl = data[0];
		size_t len = (size_t)data[1] << 8 | data[2];
		data += 3;
		size -= 3;
		unsigned target = ctl & FQ_TARGET, src = ctl & FQ_SRC;
		if (ctl & FQ_TIMER) {
			flush(&bt);
			struct swv_qp *qp = to_swv_qp(F.qp[target % FQ_NQPS]);
			swv_qp_timer(qp, swv_now_ns() + (uint64_t)len * 1000000ull);
			continue;
		}
		if (len > size)
			len = size;
		if (len > FQ_MAX_LEN)
			break;
		/* Exactly len bytes on the heap, as the parser's bound: ASan sees overreads. */
		uint8_t *b = malloc(len ? len : 1);
		MUST(b);
		memcpy(b, data, len);
		data += len;
		size -= len;
		rewrite(b, len, target, src);
		if (ctl & FQ_FIXCRC)
			fix_crc(b, len);
		struct swv_rx_pkt *rp = &bt.pkts[bt.n];
		rp->buf = b;
		rp->len = len;
		rp->unchecked = false; /* as from UDP: FQ_FIXCRC decides whether it passes */
		memset(&rp->src, 0, sizeof(rp->src));
		rp->src.sin_family = AF_INET;
		rp->src.sin_addr.s_addr =
		    htonl(src == FQ_SRC_OTHER_IP ? 0x7f000002 : INADDR_LOOPBACK);
		rp->src.sin_port = htons(src == FQ_SRC_FOREIGN ? F.foreign_port : F.peer_port);
		bt.bufs[bt.n++] = b;
		if ((ctl & FQ_FLUSH) || bt.n == FQ_MAX_BATCH)
			flush(&bt);
	}
	flush(&bt);
	swv_progress_test_release(&F.ctx->progress);

	if (verbose) {
		struct swv_progress *pr = &F.ctx->progress;
		fprintf(stderr, "input: %llu packets, %llu bad CRC, %llu malformed, %llu no QP\n",
			(unsigned long long)pr->rx_packets, (unsigned long long)pr->rx_bad_crc,
			(unsigned long long)pr->rx_malformed, (unsigned long long)pr->rx_no_qp);
		for (unsigned i = 0; i < FQ_NQPS; i++)
			fprintf(stderr, "  qp %u: %llu dropped, %llu bad P_Key\n", i,
				(unsigned long long)to_swv_qp(F.qp[i])->rx_dropped,
				(unsigned long long)to_swv_qp(F.qp[i])->rx_bad_pkey);
	}
	drain();
	fixture_down();
	return 0;
}
