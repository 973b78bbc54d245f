/*
 * bench_soak: a long run of mixed RC operations under heavy injected faults, every
 * result checked. Not part of the test suite (it takes minutes at the default count).
 *
 * Two processes connect one RC QP (ACK timeout 14, retry_cnt 6, MTU 4096) with
 * SWVERBS_FAULT=seed=S,drop=5,dup=2,reorder=2 in both. The initiator keeps up to 256
 * WRs in flight (16 READs/atomics), each signaled, drawn from a seeded generator:
 *   SEND with immediate (the op number): 0..64 KiB of the op's pattern; the target
 *       checks every byte and the length at its receive completion;
 *   RDMA WRITE: the op's pattern into a free 64 KiB slot of the target, which is then
 *       queued to be read back;
 *   RDMA READ: the oldest written slot, back into local memory, every byte checked
 *       against the pattern of the WRITE that filled it (the slot is free again after);
 *       with no slot waiting, a range of a region the target filled at start;
 *   FETCH_AND_ADD on one word: the value returned is the running sum of the adds
 *       posted before it (the responder executes in PSN order);
 *   CMP_AND_SWP on another word, a chain: each compares with the value the previous one
 *       swapped in and must succeed.
 * Sizes: 70% 0..256 bytes, 20% up to 4 KiB, 10% up to 64 KiB. Completion counters on
 * both sides (requester: SEND, RDMA_WRITE, RDMA_READ, atomics; target: RECV,
 * REMOTE_RDMA_WRITE, REMOTE_RDMA_READ, remote atomics) must equal what was posted, with
 * no errors, and every WR must complete successfully, in posting order.
 *
 *   usage: bench_soak [-d device] [-n ops] [-s seed] [-f fault-spec]
 * Prints the time and ops/s; exits non-zero at the first mismatch.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>

#include "bench_clock.h"
#include "rc_conn.h"

#define WHO	   "bench_soak"
#define SLOT	   65536u
#define DEPTH	   256u /* WRs in flight; also the initiator's local slots */
#define RD_ATOMIC  16
#define NRECV	   64u /* target: receive WQEs, one slot each */
#define NWSLOT	   64u /* target: WRITE slots */
#define STATIC_LEN (1u << 20)
#define STALL_NS   (120ull * 1000000000ull) /* no completion for this long: fail */

/* Target memory layout (both sides register the same size). */
#define T_RECV	 0ull
#define T_WRITE	 (T_RECV + (uint64_t)NRECV * SLOT)
#define T_STATIC (T_WRITE + (uint64_t)NWSLOT * SLOT)
#define T_FAA	 (T_STATIC + STATIC_LEN)
#define T_CAS	 (T_FAA + 8)
#define BUF_LEN	 ((uint64_t)DEPTH * SLOT) /* initiator: one slot per WR in flight */

static void die(const char *what, int err)
{
	rc_die(WHO, what, err);
}

static _Noreturn void fail(const char *fmt, unsigned long long a, unsigned long long b,
			   unsigned long long c)
{
	fprintf(stderr, WHO " [%d]: ", (int)getpid());
	fprintf(stderr, fmt, a, b, c);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The pattern of op 'id': 8-byte words of mix(id, word index). */
static void pattern_fill(uint8_t *p, uint64_t id, uint32_t len)
{
	uint64_t base = mix(id);
	uint32_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t w = mix(base + i);
		memcpy(p + i, &w, 8);
	}
	if (i < len) {
		uint64_t w = mix(base + i);
		memcpy(p + i, &w, len - i);
	}
}

/* Offset of the first byte that differs from the pattern, or len. */
static uint32_t pattern_check(const uint8_t *p, uint64_t id, uint32_t len)
{
	static uint8_t want[SLOT];
	pattern_fill(want, id, len);
	if (!memcmp(p, want, len))
		return len;
	for (uint32_t i = 0;; i++)
		if (p[i] != want[i])
			return i;
}

/* The static region's pattern: its own id, far from any op's. */
#define STATIC_ID (1ull << 62)

static uint64_t cas_value(uint64_t k)
{
	return k ? mix(k ^ 0x5a5a5a5aull) : 0;
}

/* ------------------------------------------------------------------ counters */

enum { C_SEND, C_WRITE, C_READ, C_ATOMIC, NCNTR };
static const uint32_t init_ops[NCNTR] = {
    IBV_QP_ATTACH_COMP_CNTR_OP_SEND, IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE,
    IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_READ, SWV_QP_ATTACH_COMP_CNTR_OP_ATOMIC};
static const uint32_t tgt_ops[NCNTR] = {
    IBV_QP_ATTACH_COMP_CNTR_OP_RECV, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE,
    IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ, SWV_QP_ATTACH_COMP_CNTR_OP_REMOTE_ATOMIC};
static const char *const cntr_name[NCNTR] = {"send/recv", "write", "read", "atomic"};

static void attach_counters(struct rc_conn *c, const uint32_t *ops, struct ibv_comp_cntr **out)
{
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	for (int i = 0; i < NCNTR; i++) {
		out[i] = ibv_create_comp_cntr(c->ctx, &ca);
		if (!out[i])
			die("ibv_create_comp_cntr", errno);
		struct ibv_qp_attach_comp_cntr_attr a = {.op_mask = ops[i]};
		int ret = ibv_qp_attach_comp_cntr(c->qp, out[i], &a);
		if (ret)
			die("ibv_qp_attach_comp_cntr", ret);
	}
}

/* Counters must show exactly want[i] successes and no error. */
static void check_counters(struct ibv_comp_cntr **cn, const uint64_t *want, const char *side)
{
	for (int i = 0; i < NCNTR; i++) {
		uint64_t v = 0, e = 0;
		ibv_read_comp_cntr(cn[i], &v);
		ibv_read_err_comp_cntr(cn[i], &e);
		if (v != want[i] || e)
			fail("counter mismatch: %llu successes, %llu errors, %llu posted", v, e,
			     want[i]);
		printf("  %-7s %-10s counter %10llu, errors 0\n", side, cntr_name[i],
		       (unsigned long long)v);
	}
}

static void open_side(struct rc_conn *c, const char *dev, int ctl, bool first)
{
	int acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	struct rc_conn_attr a = {
	    .dev = dev,
	    .send_cqe = 2 * DEPTH,
	    .recv_cqe = 2 * NRECV,
	    .len = BUF_LEN,
	    .mr_access = acc,
	    .qp_access = acc,
	    .rd_atomic = RD_ATOMIC,
	    .retry_cnt = 6,
	    .cap = {.max_send_wr = DEPTH,
		    .max_recv_wr = NRECV,
		    .max_send_sge = 1,
		    .max_recv_sge = 1},
	};
	rc_conn_open(c, WHO, &a);
	rc_conn_exchange(c, ctl, first);
}

/* ------------------------------------------------------------------ target */

static void post_recv(struct rc_conn *c, uint32_t i)
{
	struct ibv_sge sge = {(uintptr_t)c->buf + T_RECV + (uint64_t)i * SLOT, SLOT, c->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
	int ret = ibv_post_recv(c->qp, &wr, &bad);
	if (ret)
		die("ibv_post_recv", ret);
}

struct totals {
	uint64_t n[NCNTR];
	uint64_t bytes;
};

static int run_target(const char *dev, int ctl)
{
	struct rc_conn c;
	struct ibv_comp_cntr *cn[NCNTR];
	open_side(&c, dev, ctl, true);
	attach_counters(&c, tgt_ops, cn);
	pattern_fill(c.buf + T_STATIC, STATIC_ID, STATIC_LEN);
	rc_conn_connect(&c);
	for (uint32_t i = 0; i < NRECV; i++)
		post_recv(&c, i);
	char go = 1;
	rc_xfer(WHO, ctl, &go, 1, true); /* ready: receives posted, memory filled */

	struct totals want;
	bool have_want = false;
	uint64_t recvs = 0, t_last = clock_ns(CLOCK_MONOTONIC);
	struct ibv_wc wc[32];
	while (!have_want || recvs < want.n[C_SEND]) {
		int n = ibv_poll_cq(c.rcq, 32, wc);
		if (n < 0)
			die("ibv_poll_cq", EIO);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				fail("receive %llu failed: status %llu (%llu)", recvs, wc[i].status,
				     0);
			if (!(wc[i].wc_flags & IBV_WC_WITH_IMM))
				fail("receive %llu without immediate%llu%llu", recvs, 0, 0);
			uint64_t id = ntohl(wc[i].imm_data);
			uint32_t len = wc[i].byte_len;
			const uint8_t *p = c.buf + T_RECV + wc[i].wr_id * SLOT;
			uint32_t bad = pattern_check(p, id, len);
			if (bad != len)
				fail("SEND op %llu: byte %llu of %llu differs", id, bad, len);
			post_recv(&c, (uint32_t)wc[i].wr_id);
			recvs++;
			t_last = clock_ns(CLOCK_MONOTONIC);
		}
		if (!have_want) {
			ssize_t r = recv(ctl, &want, sizeof(want), MSG_DONTWAIT | MSG_PEEK);
			if (r == (ssize_t)sizeof(want)) {
				rc_xfer(WHO, ctl, &want, sizeof(want), false);
				have_want = true;
			} else if (r == 0) {
				fail("initiator went away after %llu receives%llu%llu", recvs, 0,
				     0);
			}
		}
		if (!n && clock_ns(CLOCK_MONOTONIC) - t_last > STALL_NS)
			fail("no receive for 120 s (%llu so far)%llu%llu", recvs, 0, 0);
	}
	if (recvs != want.n[C_SEND])
		fail("%llu receives, %llu SENDs posted%llu", recvs, want.n[C_SEND], 0);
	check_counters(cn, want.n, "target");
	fflush(stdout);
	rc_xfer(WHO, ctl, &go, 1, true);
	ibv_destroy_qp(c.qp);
	for (int i = 0; i < NCNTR; i++)
		ibv_destroy_comp_cntr(cn[i]);
	rc_conn_close(&c);
	return 0;
}

/* ------------------------------------------------------------------ initiator */

enum kind { K_SEND, K_WRITE, K_READ_BACK, K_READ_STATIC, K_FAA, K_CAS };

struct inflight {
	enum kind kind;
	uint32_t len;
	uint64_t id;	 /* pattern id to expect (READ) */
	uint64_t expect; /* atomic: the value it must return */
	uint32_t wslot;	 /* READ back / WRITE: the target slot */
	uint64_t soff;	 /* READ static: offset in the static region */
};

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state = mix(rng_state);
	return rng_state;
}

static uint32_t draw_len(void)
{
	uint64_t r = rnd();
	unsigned p = (unsigned)(r % 100);
	r >>= 8;
	if (p < 70)
		return (uint32_t)(r % 257);
	if (p < 90)
		return (uint32_t)(r % 4097);
	return (uint32_t)(r % (SLOT + 1));
}

static int run_initiator(const char *dev, int ctl, uint64_t nops, uint64_t seed)
{
	struct rc_conn c;
	struct ibv_comp_cntr *cn[NCNTR];
	open_side(&c, dev, ctl, false);
	attach_counters(&c, init_ops, cn);
	rc_conn_connect(&c);
	char go;
	rc_xfer(WHO, ctl, &go, 1, false);

	static struct inflight fl[DEPTH];
	uint32_t wfree[NWSLOT], nfree = NWSLOT;	    /* free WRITE slots (stack) */
	uint32_t wq[NWSLOT], wq_head = 0, wq_n = 0; /* written, waiting to be read back */
	uint64_t wq_id[NWSLOT];
	uint32_t wq_len[NWSLOT];
	for (uint32_t i = 0; i < NWSLOT; i++)
		wfree[i] = NWSLOT - 1 - i;
	struct totals tot;
	memset(&tot, 0, sizeof(tot));
	uint64_t faa_sum = 0, cas_k = 0, posted = 0, done = 0;
	rng_state = seed;

	uint64_t t0 = clock_ns(CLOCK_MONOTONIC), t_last = t0;
	struct ibv_wc wc[64];
	while (done < nops) {
		while (posted < nops && posted - done < DEPTH) {
			uint64_t id = posted;
			struct inflight *f = &fl[id % DEPTH];
			uint8_t *local = c.buf + (id % DEPTH) * SLOT;
			struct ibv_sge sge = {(uintptr_t)local, 0, c.mr->lkey};
			struct ibv_send_wr wr = {.wr_id = id,
						 .sg_list = &sge,
						 .num_sge = 1,
						 .send_flags = IBV_SEND_SIGNALED},
					   *bad;
			/* READs and atomics beyond max_rd_atomic wait in the send queue */
			unsigned r = (unsigned)(rnd() % 100);
			if (r < 30 && !nfree) /* no free WRITE slot: read one back */
				r = 60;
			memset(f, 0, sizeof(*f));
			if (r < 30) {
				f->kind = K_WRITE;
				f->len = draw_len();
				f->wslot = wfree[--nfree];
				pattern_fill(local, id, f->len);
				sge.length = f->len;
				wr.opcode = IBV_WR_RDMA_WRITE;
				wr.wr.rdma.remote_addr =
				    c.peer.addr + T_WRITE + (uint64_t)f->wslot * SLOT;
				wr.wr.rdma.rkey = c.peer.rkey;
				uint32_t q = (wq_head + wq_n++) % NWSLOT;
				wq[q] = f->wslot;
				wq_id[q] = id;
				wq_len[q] = f->len;
				tot.n[C_WRITE]++;
			} else if (r < 60) {
				f->kind = K_SEND;
				f->len = draw_len();
				pattern_fill(local, id, f->len);
				sge.length = f->len;
				wr.opcode = IBV_WR_SEND_WITH_IMM;
				wr.imm_data = htonl((uint32_t)id);
				tot.n[C_SEND]++;
			} else if (r < 85) {
				wr.opcode = IBV_WR_RDMA_READ;
				wr.wr.rdma.rkey = c.peer.rkey;
				if (wq_n) {
					/* posted after the WRITE: executed after it */
					f->kind = K_READ_BACK;
					f->wslot = wq[wq_head];
					f->id = wq_id[wq_head];
					f->len = wq_len[wq_head];
					wq_head = (wq_head + 1) % NWSLOT;
					wq_n--;
					wr.wr.rdma.remote_addr =
					    c.peer.addr + T_WRITE + (uint64_t)f->wslot * SLOT;
				} else {
					f->kind = K_READ_STATIC;
					f->len = draw_len();
					f->soff = (rnd() % (STATIC_LEN - SLOT)) & ~7ull;
					wr.wr.rdma.remote_addr = c.peer.addr + T_STATIC + f->soff;
				}
				memset(local, 0xee, f->len);
				sge.length = f->len;
				tot.n[C_READ]++;
			} else {
				sge.length = 8;
				memset(local, 0xee, 8);
				wr.wr.atomic.rkey = c.peer.rkey;
				if (r < 93) {
					f->kind = K_FAA;
					uint64_t add = (rnd() & 0xffff) + 1;
					f->expect = faa_sum;
					faa_sum += add;
					wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
					wr.wr.atomic.remote_addr = c.peer.addr + T_FAA;
					wr.wr.atomic.compare_add = add;
				} else {
					f->kind = K_CAS;
					f->expect = cas_value(cas_k);
					wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
					wr.wr.atomic.remote_addr = c.peer.addr + T_CAS;
					wr.wr.atomic.compare_add = cas_value(cas_k);
					wr.wr.atomic.swap = cas_value(cas_k + 1);
					cas_k++;
				}
				tot.n[C_ATOMIC]++;
			}
			tot.bytes += sge.length;
			int ret = ibv_post_send(c.qp, &wr, &bad);
			if (ret)
				die("ibv_post_send", ret);
			posted++;
		}
		int n = ibv_poll_cq(c.scq, 64, wc);
		if (n < 0)
			die("ibv_poll_cq", EIO);
		for (int i = 0; i < n; i++) {
			uint64_t id = wc[i].wr_id;
			if (wc[i].status != IBV_WC_SUCCESS)
				fail("op %llu failed: %llu (%llu)", id, wc[i].status, 0);
			if (id != done)
				fail("op %llu completed, expected %llu (posting order)%llu", id,
				     done, 0);
			struct inflight *f = &fl[id % DEPTH];
			const uint8_t *local = c.buf + (id % DEPTH) * SLOT;
			uint64_t got;
			uint32_t bad;
			switch (f->kind) {
			case K_WRITE:
			case K_SEND:
				break;
			case K_READ_BACK:
				bad = pattern_check(local, f->id, f->len);
				if (bad != f->len)
					fail("READ op %llu of WRITE op %llu: byte %llu differs", id,
					     f->id, bad);
				wfree[nfree++] = f->wslot;
				break;
			case K_READ_STATIC: {
				static uint8_t want[STATIC_LEN];
				static bool filled;
				if (!filled) {
					pattern_fill(want, STATIC_ID, STATIC_LEN);
					filled = true;
				}
				if (memcmp(local, want + f->soff, f->len))
					fail("READ op %llu of the static region at %llu (%llu "
					     "bytes) "
					     "differs",
					     id, f->soff, f->len);
				break;
			}
			case K_FAA:
			case K_CAS:
				memcpy(&got, local, 8);
				if (got != f->expect)
					fail("atomic op %llu returned %#llx, expected %#llx", id,
					     got, f->expect);
				break;
			}
			done++;
			t_last = clock_ns(CLOCK_MONOTONIC);
		}
		if (!n && clock_ns(CLOCK_MONOTONIC) - t_last > STALL_NS)
			fail("no completion for 120 s after op %llu of %llu%llu", done, nops, 0);
	}
	double s = (double)(clock_ns(CLOCK_MONOTONIC) - t0) / 1e9;
	check_counters(cn, tot.n, "initiator");
	fflush(stdout);
	rc_xfer(WHO, ctl, &tot, sizeof(tot), true);
	rc_xfer(WHO, ctl, &go, 1, false); /* the target checked its side */
	printf(WHO ": %llu ops (%llu SEND, %llu WRITE, %llu READ, %llu atomic), %.1f MiB, in "
		   "%.1f s: %.0f ops/s, %.1f MiB/s; every byte and atomic result verified\n",
	       (unsigned long long)nops, (unsigned long long)tot.n[C_SEND],
	       (unsigned long long)tot.n[C_WRITE], (unsigned long long)tot.n[C_READ],
	       (unsigned long long)tot.n[C_ATOMIC], (double)tot.bytes / (1 << 20), s,
	       (double)nops / s, (double)tot.bytes / (1 << 20) / s);
	ibv_destroy_qp(c.qp);
	for (int i = 0; i < NCNTR; i++)
		ibv_destroy_comp_cntr(cn[i]);
	rc_conn_close(&c);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dev = NULL, *spec = NULL;
	uint64_t nops = 1000000, seed = 1;
	int opt;
	while ((opt = getopt(argc, argv, "d:n:s:f:")) != -1) {
		if (opt == 'd')
			dev = optarg;
		else if (opt == 'n' && strtoull(optarg, NULL, 0) > 0)
			nops = strtoull(optarg, NULL, 0);
		else if (opt == 's')
			seed = strtoull(optarg, NULL, 0);
		else if (opt == 'f')
			spec = optarg;
		else {
			fprintf(stderr,
				"usage: %s [-d device] [-n ops] [-s seed] [-f fault-spec]\n",
				argv[0]);
			return 2;
		}
	}
	char fault[128];
	if (!spec) {
		snprintf(fault, sizeof(fault), "seed=%llu,drop=5,dup=2,reorder=2",
			 (unsigned long long)seed);
		spec = fault;
	}
	setenv("SWVERBS_FAULT", spec, 1); /* both processes: read at device open */
	printf(WHO ": %llu mixed RC ops, SWVERBS_FAULT=%s, retry_cnt 6, ACK timeout 14, "
		   "%u in flight\n",
	       (unsigned long long)nops, spec, DEPTH);
	int ctl;
	pid_t pid = rc_fork(WHO, &ctl);
	if (pid == 0)
		_exit(run_target(dev, ctl));
	run_initiator(dev, ctl, nops, seed);
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		die("target failed", ECHILD);
	return 0;
}
