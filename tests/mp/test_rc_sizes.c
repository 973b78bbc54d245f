/*
 * Message sizes 0 B .. 1 MiB across every path MTU (256 .. 4096): SEND, RDMA WRITE
 * with immediate and RDMA READ, each verified byte for byte, with nothing written
 * past the end. Under SWVERBS_FAULT (set by the caller or by test_rc_fault) the same
 * transfers exercise retransmission.
 */
#include <arpa/inet.h>

#include "harness.h"

#define TMO 20000
#define MIB (1u << 20)
#define SWV_MIN_SZ(a, b) ((size_t)(a) < (size_t)(b) ? (size_t)(a) : (size_t)(b))

static uint32_t sizes[16];
static unsigned nsizes;

static void make_sizes(uint32_t mtu)
{
	uint32_t s[] = {0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu, 3 * mtu + 5, 65537, MIB};
	nsizes = sizeof(s) / sizeof(s[0]);
	memcpy(sizes, s, sizeof(s));
}

static void requester(struct swvt *t, void *arg)
{
	struct ibv_wc wc;
	uint32_t seed = 7;
	for (unsigned i = 0; i < nsizes; i++) {
		uint32_t len = sizes[i];
		/* SEND */
		swvt_fill(t->buf, len, seed);
		swvt_barrier(t);
		swvt_post_send(t, i, IBV_WR_SEND, 0, len, 0, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.wr_id, i);
		swvt_barrier(t);
		seed++;

		/* WRITE_WITH_IMM to the peer's offset 4096 */
		swvt_fill(t->buf, len, seed);
		swvt_barrier(t);
		struct ibv_sge sge = {(uintptr_t)t->buf, len, t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 100 + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(len)};
		struct ibv_send_wr *bad;
		wr.wr.rdma.remote_addr = t->remote.addr + 4096;
		wr.wr.rdma.rkey = t->remote.rkey;
		CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		swvt_barrier(t);
		seed++;

		/* READ the peer's pattern at 4096 (the WRITE just placed it) into 0 */
		memset(t->buf, 0xee, len + 64 > t->opts.buf_size ? t->opts.buf_size : len + 64);
		swvt_post_send(t, 200 + i, IBV_WR_RDMA_READ, 0, len, 4096, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.byte_len, len);
		size_t bad_off = swvt_verify(t->buf, len, seed - 1);
		if (bad_off != (size_t)-1)
			fprintf(stderr, "READ %u bytes: mismatch at %zu\n", len, bad_off);
		CHECK_EQ(bad_off, (size_t)-1);
		if (len + 1 < t->opts.buf_size)
			CHECK_EQ(t->buf[len], 0xee);
		swvt_barrier(t); /* the peer may reuse its buffer now */
	}
	(void)arg;
}

static void responder(struct swvt *t, void *arg)
{
	struct ibv_wc wc;
	uint32_t seed = 7;
	for (unsigned i = 0; i < nsizes; i++) {
		uint32_t len = sizes[i];
		size_t room = SWV_MIN_SZ(len + 64, t->opts.buf_size);
		memset(t->buf, 0xee, room);
		swvt_post_recv(t, i, 0, (uint32_t)room);
		swvt_barrier(t);
		swvt_poll_n(t->rcq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.byte_len, len);
		size_t bad_off = swvt_verify(t->buf, len, seed);
		if (bad_off != (size_t)-1)
			fprintf(stderr, "SEND %u bytes: mismatch at %zu\n", len, bad_off);
		CHECK_EQ(bad_off, (size_t)-1);
		if (len < room)
			CHECK_EQ(t->buf[len], 0xee);
		swvt_barrier(t);
		seed++;

		memset(t->buf + 4096, 0xee, SWV_MIN_SZ(len + 64, t->opts.buf_size - 4096));
		swvt_post_recv(t, 100 + i, 0, 0);
		swvt_barrier(t);
		swvt_poll_n(t->rcq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
		CHECK_EQ(ntohl(wc.imm_data), len);
		bad_off = swvt_verify(t->buf + 4096, len, seed);
		if (bad_off != (size_t)-1)
			fprintf(stderr, "WRITE %u bytes: mismatch at %zu\n", len, bad_off);
		CHECK_EQ(bad_off, (size_t)-1);
		if (4096 + len < t->opts.buf_size)
			CHECK_EQ(t->buf[4096 + len], 0xee);
		swvt_barrier(t);
		seed++;
		swvt_barrier(t); /* the peer's READ of buf + 4096 is done */
	}
	(void)arg;
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.buf_size = MIB + 8192;
	/* retry_cnt 7 is finite: the timeout must outlast a loaded machine's stalls
	 * ((7 + 1) x 268 ms); losses are recovered by NAKs, the timeout only for a tail */
	o.timeout = 16;
	for (enum ibv_mtu m = IBV_MTU_256; m <= IBV_MTU_4096; m++) {
		o.path_mtu = m;
		make_sizes(128u << m);
		uint64_t t0 = swvt_now_ms();
		int rc = swvt_run(&o, requester, responder, NULL);
		if (rc)
			return rc;
		printf("mtu %u: %llu ms\n", 128u << m, (unsigned long long)(swvt_now_ms() - t0));
	}
	/* The same transfers under injected loss, duplication and reordering (both
	 * processes inherit the variable; unless the caller chose a spec). */
	setenv("SWVERBS_FAULT", "seed=7,drop=5,dup=2,reorder=2", 0);
	const enum ibv_mtu fault_mtus[] = {IBV_MTU_512, IBV_MTU_4096};
	for (unsigned k = 0; k < 2; k++) {
		o.path_mtu = fault_mtus[k];
		make_sizes(128u << o.path_mtu);
		uint64_t t0 = swvt_now_ms();
		int rc = swvt_run(&o, requester, responder, NULL);
		if (rc)
			return rc;
		printf("mtu %u with %s: %llu ms\n", 128u << o.path_mtu, getenv("SWVERBS_FAULT"),
		       (unsigned long long)(swvt_now_ms() - t0));
	}
	return 0;
}
