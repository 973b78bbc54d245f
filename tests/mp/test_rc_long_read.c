/*
 * RDMA READs longer than the requester's window of recorded response PSNs (512 KiB at
 * path MTU 256: 2048 PSNs, the window 512) under injected loss and reordering, each
 * followed by a fetch-and-add and a WRITE: the responses of a READ past the window
 * are dropped behind a loss and asked for again; every byte must land where it
 * belongs, every WR complete once, in order, and each atomic execute once.
 */
#include "harness.h"

#define TMO	30000
#define NREAD	4
#define RLEN	(512u << 10)
#define WLEN	3000u
#define FAA_OFF ((size_t)NREAD * RLEN)
#define WR_OFF	(FAA_OFF + 64)
#define NWR	(3 * NREAD)

static void req(struct swvt *t, void *arg)
{
	static struct ibv_send_wr wrs[NWR];
	static struct ibv_sge sges[NWR];
	static struct ibv_wc wc[NWR];
	struct ibv_send_wr *bad;

	memset(t->buf, 0xcc, FAA_OFF);
	for (int i = 0; i < NWR; i++) {
		int k = i / 3;
		struct ibv_send_wr *w = &wrs[i];
		*w = (struct ibv_send_wr){.wr_id = (uint64_t)i,
					  .sg_list = &sges[i],
					  .num_sge = 1,
					  .send_flags = IBV_SEND_SIGNALED,
					  .next = i + 1 < NWR ? &wrs[i + 1] : NULL};
		if (i % 3 == 0) {
			w->opcode = IBV_WR_RDMA_READ;
			sges[i] = (struct ibv_sge){(uintptr_t)t->buf + (size_t)k * RLEN, RLEN,
						   t->mr->lkey};
			w->wr.rdma.remote_addr = t->remote.addr + (uint64_t)k * RLEN;
			w->wr.rdma.rkey = t->remote.rkey;
		} else if (i % 3 == 1) {
			w->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
			sges[i] = (struct ibv_sge){(uintptr_t)t->buf + FAA_OFF + 8 + (size_t)k * 8,
						   8, t->mr->lkey};
			w->wr.atomic.remote_addr = t->remote.addr + FAA_OFF;
			w->wr.atomic.rkey = t->remote.rkey;
			w->wr.atomic.compare_add = 1;
		} else {
			uint8_t *src = t->buf + WR_OFF + (size_t)k * WLEN;
			swvt_fill(src, WLEN, 5000 + k);
			w->opcode = IBV_WR_RDMA_WRITE;
			sges[i] = (struct ibv_sge){(uintptr_t)src, WLEN, t->mr->lkey};
			w->wr.rdma.remote_addr = t->remote.addr + WR_OFF + (uint64_t)k * WLEN;
			w->wr.rdma.rkey = t->remote.rkey;
		}
	}
	swvt_barrier(t); /* READ sources filled */
	CHECK_OK(ibv_post_send(t->qp, wrs, &bad));
	swvt_poll_n(t->scq, wc, NWR, TMO);
	uint64_t seen = 0;
	for (int i = 0; i < NWR; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, (uint64_t)i);
	}
	for (int k = 0; k < NREAD; k++) {
		size_t off = swvt_verify(t->buf + (size_t)k * RLEN, RLEN, 9000 + k);
		if (off != (size_t)-1)
			fprintf(stderr, "READ %d differs at %zu\n", k, off);
		CHECK_EQ(off, (size_t)-1);
		uint64_t old;
		memcpy(&old, t->buf + FAA_OFF + 8 + (size_t)k * 8, 8);
		CHECK(old < NREAD);
		CHECK(!(seen & (1ull << old)));
		seen |= 1ull << old;
	}
	swvt_expect_empty(t->scq, 50);
	swvt_barrier(t);
	(void)arg;
}

static void resp(struct swvt *t, void *arg)
{
	memset(t->buf + FAA_OFF, 0, 64);
	for (int k = 0; k < NREAD; k++)
		swvt_fill(t->buf + (size_t)k * RLEN, RLEN, 9000 + k);
	swvt_barrier(t);
	swvt_barrier(t); /* the requester saw every completion */
	for (int k = 0; k < NREAD; k++)
		CHECK_EQ(swvt_verify(t->buf + WR_OFF + (size_t)k * WLEN, WLEN, 5000 + k),
			 (size_t)-1);
	uint64_t faa;
	memcpy(&faa, t->buf + FAA_OFF, 8);
	CHECK_EQ(faa, (uint64_t)NREAD); /* each fetch-and-add executed once */
	(void)arg;
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.buf_size = WR_OFF + (size_t)NREAD * WLEN + 4096;
	o.max_send_wr = NWR;
	o.timeout = 16;
	o.retry_cnt = 7;
	o.max_rd_atomic = 16;
	o.max_dest_rd_atomic = 16;
	o.path_mtu = IBV_MTU_256;
	const char *given = getenv("SWVERBS_FAULT");
	static const char *const specs[] = {"seed=61,drop=2,reorder=2", "seed=62,drop=5,dup=2"};
	for (size_t i = 0; i < (given ? 1 : sizeof(specs) / sizeof(specs[0])); i++) {
		char spec[256];
		snprintf(spec, sizeof(spec), "%s", given ? given : specs[i]);
		setenv("SWVERBS_FAULT", spec, 1); /* both processes inherit it */
		uint64_t t0 = swvt_now_ms();
		int rc = swvt_run(&o, req, resp, NULL);
		if (rc) {
			fprintf(stderr, "test_rc_long_read: FAILED with SWVERBS_FAULT=%s\n", spec);
			return rc;
		}
		printf("SWVERBS_FAULT=%s: %llu ms\n", spec,
		       (unsigned long long)(swvt_now_ms() - t0));
	}
	return 0;
}
