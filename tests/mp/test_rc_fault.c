/*
 * RC under injected loss, duplication and reordering (SWVERBS_FAULT in both
 * processes; without one from the caller, drop, reorder and duplication alone and
 * together, each at retry_cnt 3, 6 and 7 -- every count finite): a mixed stream
 * of SENDs, WRITEs, READs and fetch-and-adds, all in flight together, at several path
 * MTUs. Every byte is verified and every WR completes exactly once, in order, with
 * success; no extra completion appears on either side.
 */
#include <arpa/inet.h>

#include "harness.h"

#define TMO 30000
#define NWR 200
#define SLOT 8192 /* per-WR region in each buffer */
#define FAA_OFF (NWR * SLOT)

static uint32_t wr_len(int i)
{
	return (uint32_t)((i * 7919u) % SLOT); /* 0 .. 8191, deterministic */
}

static enum ibv_wr_opcode wr_op(int i)
{
	static const enum ibv_wr_opcode ops[4] = {IBV_WR_SEND, IBV_WR_RDMA_WRITE,
						  IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD};
	return ops[i % 4];
}

static void req(struct swvt *t, void *arg)
{
	static struct ibv_send_wr wrs[NWR];
	static struct ibv_sge sges[NWR];
	static struct ibv_wc wc[NWR];
	struct ibv_send_wr *bad;

	for (int i = 0; i < NWR; i++) {
		uint8_t *slot = t->buf + (size_t)i * SLOT;
		enum ibv_wr_opcode op = wr_op(i);
		uint32_t len = op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 8 : wr_len(i);
		if (op == IBV_WR_RDMA_READ)
			memset(slot, 0xcc, SLOT);
		else
			swvt_fill(slot, len, 5000 + i);
		sges[i] = (struct ibv_sge){(uintptr_t)slot, len, t->mr->lkey};
		wrs[i] = (struct ibv_send_wr){.wr_id = (uint64_t)i, .sg_list = &sges[i],
					      .num_sge = 1, .opcode = op,
					      .send_flags = IBV_SEND_SIGNALED,
					      .next = i + 1 < NWR ? &wrs[i + 1] : NULL};
		if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			wrs[i].wr.atomic.remote_addr = t->remote.addr + FAA_OFF;
			wrs[i].wr.atomic.rkey = t->remote.rkey;
			wrs[i].wr.atomic.compare_add = 1;
		} else if (op != IBV_WR_SEND) {
			wrs[i].wr.rdma.remote_addr = t->remote.addr + (uint64_t)i * SLOT;
			wrs[i].wr.rdma.rkey = t->remote.rkey;
		}
	}
	swvt_barrier(t); /* receives posted, READ sources filled */
	CHECK_OK(ibv_post_send(t->qp, wrs, &bad));
	swvt_poll_n(t->scq, wc, NWR, TMO);
	uint64_t faa_seen = 0;
	for (int i = 0; i < NWR; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, (uint64_t)i); /* in order, each exactly once */
		enum ibv_wr_opcode op = wr_op(i);
		uint8_t *slot = t->buf + (size_t)i * SLOT;
		if (op == IBV_WR_RDMA_READ) {
			CHECK_EQ(wc[i].byte_len, wr_len(i));
			size_t bad_off = swvt_verify(slot, wr_len(i), 9000 + i);
			if (bad_off != (size_t)-1)
				fprintf(stderr, "READ %d (%u bytes) differs at %zu\n", i, wr_len(i),
					bad_off);
			CHECK_EQ(bad_off, (size_t)-1);
			if (wr_len(i) < SLOT)
				CHECK_EQ(slot[wr_len(i)], 0xcc);
		} else if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			uint64_t old;
			memcpy(&old, slot, 8);
			CHECK(old < NWR / 4);
			CHECK(!(faa_seen & (1ull << old))); /* executed exactly once each */
			faa_seen |= 1ull << old;
		}
	}
	swvt_expect_empty(t->scq, 50);
	swvt_barrier(t);
	(void)arg;
}

static void resp(struct swvt *t, void *arg)
{
	static struct ibv_wc wc[NWR];
	int nsend = 0;
	memset(t->buf, 0, (size_t)NWR * SLOT + 8);
	for (int i = 0; i < NWR; i++) {
		if (wr_op(i) == IBV_WR_SEND) {
			swvt_post_recv(t, (uint64_t)i, (uint64_t)i * SLOT, SLOT);
			nsend++;
		} else if (wr_op(i) == IBV_WR_RDMA_READ) {
			swvt_fill(t->buf + (size_t)i * SLOT, wr_len(i), 9000 + i);
		}
	}
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, nsend, TMO);
	for (int k = 0; k < nsend; k++) {
		int i = k * 4; /* SENDs are every 4th WR, received in order */
		CHECK_WC(wc[k], IBV_WC_SUCCESS);
		CHECK_EQ(wc[k].wr_id, (uint64_t)i);
		CHECK_EQ(wc[k].byte_len, wr_len(i));
		CHECK_EQ(swvt_verify(t->buf + (size_t)i * SLOT, wr_len(i), 5000 + i), (size_t)-1);
	}
	swvt_barrier(t); /* the requester saw every completion: WRITEs are placed */
	for (int i = 1; i < NWR; i += 4) {
		size_t bad_off = swvt_verify(t->buf + (size_t)i * SLOT, wr_len(i), 5000 + i);
		if (bad_off != (size_t)-1)
			fprintf(stderr, "WRITE %d (%u bytes) differs at %zu\n", i, wr_len(i), bad_off);
		CHECK_EQ(bad_off, (size_t)-1);
	}
	uint64_t faa;
	memcpy(&faa, t->buf + FAA_OFF, 8);
	CHECK_EQ(faa, NWR / 4); /* each fetch-and-add executed exactly once */
	swvt_expect_empty(t->rcq, 20);
	(void)arg;
}

/* One pass per MTU with the given fault spec and retry count. */
static int run_mtus(const char *spec, uint8_t retry_cnt)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.buf_size = (size_t)NWR * SLOT + 4096;
	o.max_send_wr = NWR;
	o.max_recv_wr = NWR;
	/* 268 ms: with retry_cnt 3 a peer may go unscheduled for ~1 s on a loaded
	 * machine before the QP gives up; losses are recovered by NAKs and implied NAKs,
	 * the timeout only for a lost tail */
	o.timeout = 16;
	o.retry_cnt = retry_cnt;
	o.max_rd_atomic = 16;
	o.max_dest_rd_atomic = 16;
	/* both processes inherit it (the injector is read when a device is opened) */
	setenv("SWVERBS_FAULT", spec, 1);
	const enum ibv_mtu mtus[] = {IBV_MTU_256, IBV_MTU_1024, IBV_MTU_4096};
	for (unsigned m = 0; m < 3; m++) {
		o.path_mtu = mtus[m];
		uint64_t t0 = swvt_now_ms();
		int rc = swvt_run(&o, req, resp, NULL);
		if (rc) {
			fprintf(stderr,
				"test_rc_fault: FAILED with SWVERBS_FAULT=%s retry_cnt %u mtu %u\n",
				spec, retry_cnt, 128u << mtus[m]);
			return rc;
		}
		printf("SWVERBS_FAULT=%s retry_cnt %u mtu %u: %llu ms\n", spec, retry_cnt,
		       128u << mtus[m], (unsigned long long)(swvt_now_ms() - t0));
	}
	return 0;
}

int main(void)
{
	/* A caller's spec (the suite's fault pass of another test, or a person
	 * reproducing a seed) replaces the matrix. */
	const char *given = getenv("SWVERBS_FAULT");
	if (given) {
		char spec[256];
		snprintf(spec, sizeof(spec), "%s", given);
		return run_mtus(spec, 7);
	}
	/* Each fault alone and all together, at the retry counts real programs use
	 * (finite all: retry_cnt 7 is seven retries). */
	static const char *const specs[] = {
	    "seed=42,drop=5",
	    "seed=43,reorder=5",
	    "seed=44,dup=5",
	    "seed=45,drop=5,dup=2,reorder=3",
	};
	static const uint8_t retry_cnts[] = {3, 6, 7};
	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
		for (size_t k = 0; k < sizeof(retry_cnts); k++) {
			int rc = run_mtus(specs[i], retry_cnts[k]);
			if (rc)
				return rc;
		}
	return 0;
}
