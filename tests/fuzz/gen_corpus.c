/*
 * Writes the seed corpora of the fuzzers with the library's own packet builders:
 *   DIR/fuzz_packet/  one datagram per supported opcode (and payload sizes around pad
 *                     and MTU boundaries);
 *   DIR/fuzz_qp_rx/   conversations in fuzz_qp_rx's record format (fuzz_qp_rx.h) with
 *                     its fixture: requests of every kind to each QP, the responses
 *                     its outstanding WQEs wait for, NAKs, timers, strangers.
 * Usage: fuzz_gen_corpus tests/fuzz/corpus   (regression inputs there are kept).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_qp_rx.h"
#include "transport/flowctl.h"
#include "transport/opcode.h"
#include "transport/packet.h"

static const char *outdir;
static uint8_t pay[4096];

static size_t build(uint8_t *out, const struct swv_pkt *p)
{
	uint8_t tail[SWV_MAX_TAIL_LEN];
	size_t hl = swv_pkt_build_hdr(out, p);
	if (!hl) {
		fprintf(stderr, "gen_corpus: opcode %#x refused\n", p->opcode);
		exit(1);
	}
	memcpy(out + hl, p->payload, p->paylen);
	size_t tl = swv_pkt_build_tail(out, hl, p->payload, p->paylen, tail);
	memcpy(out + hl + p->paylen, tail, tl);
	return hl + p->paylen + tl;
}

static void write_file(const char *sub, const char *name, const uint8_t *b, size_t n)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", outdir, sub);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", outdir, sub, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(b, 1, n, f) != n || fclose(f)) {
		fprintf(stderr, "gen_corpus: %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

/* ---- fuzz_packet ---- */

static void packet_seeds(void)
{
	static uint8_t d[8192];
	static const uint32_t sizes[] = {0, 1, 13, 256, 1024};
	for (unsigned op = 0; op < 256; op++) {
		const struct swv_opcode_info *oi = swv_opcode((uint8_t)op);
		if (!oi->name)
			continue;
		for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			if (sizes[s] && !(oi->flags & SWV_OPF_PAYLOAD))
				break;
			/* every size for SEND_ONLY, one payload size for the others */
			if (s > 0 && s != 2 && op != SWV_OP_SEND_ONLY)
				continue;
			struct swv_pkt p = {.opcode = (uint8_t)op,
					    .ackreq = true,
					    .pkey = SWV_PKEY_DEFAULT,
					    .dqpn = 0xc0de01,
					    .psn = 0x123456,
					    .deth_qkey = FQ_QKEY,
					    .deth_sqpn = 0xbeef02,
					    .reth_va = 0x10002100,
					    .reth_rkey = 0x5a5a0001,
					    .reth_len = sizes[s] ? sizes[s] : 64,
					    .aeth_msn = 7,
					    .atmack_orig = 0x1122334455667788ull,
					    .atm_va = 0x10002100,
					    .atm_rkey = 0x5a5a0001,
					    .atm_swap_add = 5,
					    .atm_cmp = 0,
					    .imm = htonl(0xabcd),
					    .ieth_rkey = 0x5a5a0001,
					    .payload = pay,
					    .paylen = sizes[s]};
			if (oi->flags & SWV_OPF_FLOWCTL) {
				static const uint8_t fc[8] = {SWV_FC_CREDIT, 0, 0, 0, 0, 0, 0, 40};
				p.payload = fc;
				p.paylen = 8;
			}
			char name[96];
			snprintf(name, sizeof(name), "%s-%u", oi->name, p.paylen);
			write_file("fuzz_packet", name, d, build(d, &p));
		}
	}
	/* Selective ACK (packet.h): a sequence NAK with the shortest and the longest SACK
	 * map, an ACK with one, and a request carrying the bit. */
	static const uint32_t maps[] = {4, SWV_SACK_MAX_LEN};
	for (unsigned m = 0; m < 3; m++) {
		struct swv_pkt p = {.opcode = SWV_OP_RC | SWV_OP_ACK,
				    .pkey = SWV_PKEY_DEFAULT,
				    .dqpn = 0xc0de01,
				    .psn = 0x123456,
				    .aeth_syndrome = m < 2 ? 0x60 : 0x1f,
				    .aeth_msn = 7,
				    .sack = true,
				    .payload = pay,
				    .paylen = maps[m % 2]};
		char name[96];
		snprintf(name, sizeof(name), "RC_ACKNOWLEDGE-sack-%s-%u", m < 2 ? "nak" : "ack",
			 p.paylen);
		write_file("fuzz_packet", name, d, build(d, &p));
	}
	struct swv_pkt w = {.opcode = SWV_OP_RC | SWV_OP_WRITE_ONLY,
			    .ackreq = true,
			    .sack = true,
			    .pkey = SWV_PKEY_DEFAULT,
			    .dqpn = 0xc0de01,
			    .psn = 0x123456,
			    .reth_va = 0x10002100,
			    .reth_rkey = 0x5a5a0001,
			    .reth_len = 13,
			    .payload = pay,
			    .paylen = 13};
	write_file("fuzz_packet", "RC_RDMA_WRITE_ONLY-sack-13", d, build(d, &w));
}

/* ---- fuzz_qp_rx ---- */

static uint8_t conv[65536];
static size_t conv_len;

static void rec(uint8_t ctl, const struct swv_pkt *p)
{
	size_t n = build(conv + conv_len + 3, p);
	conv[conv_len] = ctl | FQ_FIXCRC;
	conv[conv_len + 1] = (uint8_t)(n >> 8);
	conv[conv_len + 2] = (uint8_t)n;
	conv_len += 3 + n;
}

static void timer(unsigned target, unsigned ms)
{
	conv[conv_len] = (uint8_t)(FQ_TIMER | target);
	conv[conv_len + 1] = (uint8_t)(ms >> 8);
	conv[conv_len + 2] = (uint8_t)ms;
	conv_len += 3;
}

static void done(const char *name)
{
	write_file("fuzz_qp_rx", name, conv, conv_len);
	conv_len = 0;
}

static struct swv_pkt req(uint8_t op, uint32_t psn, uint32_t paylen)
{
	struct swv_pkt p = {.opcode = op,
			    .pkey = SWV_PKEY_DEFAULT,
			    .psn = psn,
			    .ackreq = true,
			    .payload = pay,
			    .paylen = paylen};
	return p;
}

static struct swv_pkt reth(uint8_t op, uint32_t psn, uint32_t paylen, uint32_t key, uint64_t va,
			   uint32_t len)
{
	struct swv_pkt p = req(op, psn, paylen);
	p.reth_rkey = key;
	p.reth_va = va;
	p.reth_len = len;
	return p;
}

static struct swv_pkt ack(uint8_t op, uint32_t psn, uint8_t syndrome, uint32_t msn, uint32_t paylen)
{
	struct swv_pkt p = req(op, psn, paylen);
	p.ackreq = false;
	p.aeth_syndrome = syndrome;
	p.aeth_msn = msn;
	return p;
}

#define RW(off) (FQ_MEM_VA + FQ_RW + (off))
#define RO(off) (FQ_MEM_VA + FQ_RO + (off))

static void qp_rx_seeds(void)
{
	struct swv_pkt p;
	const uint8_t rc = FQ_RC, flush = FQ_FLUSH;

	/* RC requests of every kind, in sequence (the responder's expected PSN is 0). */
	p = req(SWV_OP_SEND_ONLY, 0, 100);
	rec(rc, &p);
	p = reth(SWV_OP_WRITE_ONLY, 1, 64, FQ_KEY_RW, RW(FQ_OFF_TARGET), 64);
	rec(rc, &p);
	p = reth(SWV_OP_READ_REQUEST, 2, 0, FQ_KEY_RO, RO(0), 2000);
	rec(rc | flush, &p);
	p = req(SWV_OP_CMP_SWAP, 3, 0);
	p.atm_va = RW(FQ_OFF_TARGET);
	p.atm_rkey = FQ_KEY_RW;
	p.atm_swap_add = 9;
	rec(rc, &p);
	p.opcode = SWV_OP_FETCH_ADD;
	p.psn = 4;
	rec(rc | flush, &p);
	p = req(SWV_OP_SEND_FIRST, 5, 1024);
	rec(rc, &p);
	p = req(SWV_OP_SEND_LAST, 6, 1000);
	rec(rc, &p);
	p = req(SWV_OP_SEND_FIRST, 7, 1024);
	rec(rc, &p);
	p = req(SWV_OP_SEND_LAST_IMM, 8, 12);
	p.imm = htonl(77);
	rec(rc | flush, &p);
	p = reth(SWV_OP_WRITE_FIRST, 9, 1024, FQ_KEY_RW, RW(FQ_OFF_TARGET), 1100);
	rec(rc, &p);
	p = req(SWV_OP_WRITE_LAST_IMM, 10, 76);
	rec(rc | flush, &p);
	/* the receives are used up: RNR NAK */
	p = req(SWV_OP_SEND_ONLY_INV, 11, 8);
	p.ieth_rkey = FQ_KEY_RW;
	rec(rc | flush, &p);
	/* a duplicate READ and SEND, then a PSN gap (sequence NAK) */
	p = reth(SWV_OP_READ_REQUEST, 2, 0, FQ_KEY_RO, RO(0), 2000);
	rec(rc, &p);
	p = req(SWV_OP_SEND_ONLY, 0, 100);
	rec(rc, &p);
	p = req(SWV_OP_SEND_ONLY, 40, 100);
	rec(rc | flush, &p);
	done("rc_requests");

	/* Access errors: out of bounds, wrong key, a READ-only MR written, unaligned atomic. */
	p = reth(SWV_OP_WRITE_ONLY, 0, 64, FQ_KEY_RW, RW(FQ_RW_LEN - 32), 64);
	rec(rc | flush, &p);
	done("rc_write_oob");
	p = reth(SWV_OP_WRITE_ONLY, 0, 64, FQ_KEY_RO, RO(0), 64);
	rec(rc | flush, &p);
	done("rc_write_ro");
	p = reth(SWV_OP_READ_REQUEST, 0, 0, FQ_KEY_RW, RW(FQ_RW_LEN - 100), 200);
	rec(rc | flush, &p);
	done("rc_read_oob");
	p = req(SWV_OP_FETCH_ADD, 0, 0);
	p.atm_va = RW(FQ_OFF_TARGET + 3);
	p.atm_rkey = FQ_KEY_RW;
	rec(rc | flush, &p);
	done("rc_atomic_unaligned");
	/* five SENDs: the fifth finds no receive (RNR NAK) */
	for (uint32_t i = 0; i < 5; i++) {
		p = req(SWV_OP_SEND_ONLY, i, 200);
		rec(rc, &p);
	}
	done("rc_rnr");
	/* a SEND larger than the receive buffer; a packet over the MTU */
	p = req(SWV_OP_SEND_FIRST, 0, 1024);
	rec(rc, &p);
	p = req(SWV_OP_SEND_MIDDLE, 1, 1024);
	rec(rc, &p);
	p = req(SWV_OP_SEND_LAST, 2, 100);
	rec(rc | flush, &p);
	p = req(SWV_OP_SEND_ONLY, 3, 2048);
	rec(rc | flush, &p);
	done("rc_send_too_long");

	/* RC responses to the fixture's outstanding WQEs (fuzz_qp_rx.h), in order. */
	p = ack(SWV_OP_ACK, 0, 0x1f, 1, 0);
	rec(rc | flush, &p);
	p = ack(SWV_OP_READ_RESP_FIRST, 1, 0x1f, 1, 1024);
	rec(rc, &p);
	p = req(SWV_OP_READ_RESP_MIDDLE, 2, 1024);
	p.ackreq = false;
	rec(rc, &p);
	p = ack(SWV_OP_READ_RESP_LAST, 3, 0x1f, 2, 952);
	rec(rc | flush, &p);
	p = ack(SWV_OP_ACK, 6, 0x1f, 3, 0);
	rec(rc | flush, &p);
	p = ack(SWV_OP_ATOMIC_ACK, 7, 0x1f, 4, 0);
	p.atmack_orig = 42;
	rec(rc, &p);
	p.psn = 8;
	p.aeth_msn = 5;
	rec(rc | flush, &p);
	p = ack(SWV_OP_ACK, 9, 0x1f, 6, 0);
	rec(rc | flush, &p);
	done("rc_responses");

	/* A single READ_RESP_ONLY where three were due; a coalesced ACK of everything. */
	p = ack(SWV_OP_READ_RESP_ONLY, 1, 0x1f, 2, 1000);
	rec(rc | flush, &p);
	p = ack(SWV_OP_ACK, 9, 0x1f, 6, 0);
	rec(rc | flush, &p);
	done("rc_resp_short");

	/* NAKs: RNR (then the RNR timer), sequence, invalid request, remote access,
	 * remote operation; the ACK timeout and its retries. */
	p = ack(SWV_OP_ACK, 0, 0x20 | 1, 0, 0);
	rec(rc | flush, &p);
	timer(FQ_RC, 5);
	p = ack(SWV_OP_ACK, 1, 0x60, 0, 0);
	rec(rc | flush, &p);
	p = ack(SWV_OP_ACK, 4, 0x60 | 2, 1, 0);
	rec(rc | flush, &p);
	done("rc_naks");

	/* Selective ACK: requests that say they read SACK maps; a sequence NAK with a map
	 * naming holes, an ACK with a map, a map reaching past what was sent. */
	for (uint32_t psn = 0; psn < 4; psn++) {
		p = req(SWV_OP_SEND_ONLY, psn == 0 ? 0 : psn + 1, 16);
		p.sack = true;
		rec(rc, &p);
	}
	{
		static uint8_t map[SWV_SACK_MAX_LEN];
		map[0] = 0x05;
		map[SWV_SACK_MAX_LEN - 1] = 0x80;
		p = ack(SWV_OP_ACK, 1, 0x60, 0, 4);
		p.sack = true;
		p.payload = map;
		rec(rc | flush, &p);
		p = ack(SWV_OP_ACK, 2, 0x00, 1, 8);
		p.sack = true;
		p.payload = map;
		rec(rc | flush, &p);
		p = ack(SWV_OP_ACK, 3, 0x60, 2, SWV_SACK_MAX_LEN);
		p.sack = true;
		p.payload = map;
		rec(rc | flush, &p);
	}
	done("rc_sack");
	p = ack(SWV_OP_ACK, 0, 0x60 | 1, 0, 0);
	rec(rc | flush, &p);
	done("rc_nak_invalid");
	p = ack(SWV_OP_ACK, 0, 0x60 | 3, 0, 0);
	rec(rc | flush, &p);
	done("rc_nak_remote_op");
	timer(FQ_RC, 200);
	timer(FQ_RC, 600);
	p = ack(SWV_OP_ACK, 3, 0x1f, 1, 0);
	rec(rc | flush, &p);
	timer(FQ_RC, 2000);
	timer(FQ_RC, 4000);
	timer(FQ_RC, 8000);
	done("rc_timeouts");

	/* UC: a multi-packet SEND, a WRITE with immediate, flow control both ways. */
	const uint8_t uc = FQ_UC;
	p = req(SWV_OP_UC | SWV_OP_SEND_FIRST, 0, 1024);
	rec(uc, &p);
	p = req(SWV_OP_UC | SWV_OP_SEND_LAST, 1, 500);
	rec(uc | flush, &p);
	p = reth(SWV_OP_UC | SWV_OP_WRITE_ONLY_IMM, 2, 32, FQ_KEY_RW, RW(FQ_OFF_TARGET), 32);
	rec(uc, &p);
	p = req(SWV_OP_UC | SWV_OP_SEND_ONLY_IMM, 3, 10);
	rec(uc, &p);
	p = req(SWV_OP_UC | SWV_OP_SEND_MIDDLE, 9, 1024); /* lost FIRST: dropped */
	rec(uc | flush, &p);
	{
		static uint8_t fc[8] = {SWV_FC_CREDIT, 0, 0, 0, 0, 0, 0, 40};
		p = req(SWV_OP_FLOW_CONTROL, 0, 8);
		p.payload = fc;
		rec(uc, &p);
		static uint8_t pr[8] = {SWV_FC_PROBE, 0, 0, 0, 0, 0, 0, 5};
		p.payload = pr;
		rec(uc | flush, &p);
	}
	timer(FQ_UC, 3);
	timer(FQ_UC, 3000);
	p = reth(SWV_OP_UC | SWV_OP_WRITE_FIRST, 6, 1024, FQ_KEY_RW, RW(FQ_OFF_TARGET), 2048);
	rec(uc, &p);
	p = req(SWV_OP_UC | SWV_OP_WRITE_MIDDLE, 7, 1024);
	rec(uc, &p);
	p = req(SWV_OP_UC | SWV_OP_WRITE_LAST, 8, 0);
	rec(uc | flush, &p);
	done("uc");

	/* UD: a SEND and a SEND with immediate from the peer, a wrong Q_Key, a SEND whose
	 * DETH names another port than its source, one larger than the buffer. */
	const uint8_t ud = FQ_UD;
	p = req(SWV_OP_UD | SWV_OP_SEND_ONLY, 0, 100);
	p.deth_qkey = FQ_QKEY;
	p.deth_sqpn = 0x000107;
	p.deth_rsvd = 0x80 | 3;
	rec(ud, &p);
	p.opcode = SWV_OP_UD | SWV_OP_SEND_ONLY_IMM;
	p.psn = 77;
	rec(ud | flush, &p);
	p.deth_qkey = 0x22222222;
	rec(ud | flush, &p);
	p.deth_qkey = FQ_QKEY;
	rec(ud | FQ_SRC_FOREIGN | flush, &p);
	p.paylen = 1024;
	rec(ud | flush, &p);
	done("ud");

	/* RC on the SRQ: a SEND, a two-packet SEND, a READ of the peer. */
	const uint8_t srq = FQ_SRQ;
	p = req(SWV_OP_SEND_ONLY, 0, 50);
	rec(srq, &p);
	p = req(SWV_OP_SEND_FIRST, 1, 1024);
	rec(srq, &p);
	p = req(SWV_OP_SEND_LAST, 2, 1000);
	rec(srq | flush, &p);
	p = ack(SWV_OP_ACK, 0, 0x1f, 1, 0);
	rec(srq | flush, &p);
	for (uint32_t i = 3; i < 8; i++) {
		p = req(SWV_OP_SEND_ONLY, i, 10);
		rec(srq, &p);
	}
	done("srq");

	/* Strangers: a foreign port, another address, a QPN that is not there, a UC
	 * opcode on the RC QP, a P_Key of another partition, a bad CRC. */
	p = req(SWV_OP_SEND_ONLY, 0, 100);
	rec(rc | FQ_SRC_FOREIGN | flush, &p);
	rec(rc | FQ_SRC_OTHER_IP | flush, &p);
	p.dqpn = 0x123;
	rec(4 | flush, &p);
	p.dqpn = 0;
	p.opcode = SWV_OP_UC | SWV_OP_SEND_ONLY;
	rec(rc | flush, &p);
	p.opcode = SWV_OP_SEND_ONLY;
	p.pkey = 0x8001;
	rec(rc | flush, &p);
	p.pkey = SWV_PKEY_DEFAULT;
	size_t at = conv_len;
	rec(rc | flush, &p);
	conv[at] &= (uint8_t)~FQ_FIXCRC; /* the CRC of the real QPN... */
	conv[at + 3 + 20] ^= 1;		 /* ...and a flipped payload bit: EBADMSG */
	done("strangers");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	outdir = argv[1];
	for (size_t i = 0; i < sizeof(pay); i++)
		pay[i] = (uint8_t)(i * 13 + 1);
	packet_seeds();
	qp_rx_seeds();
	return 0;
}
