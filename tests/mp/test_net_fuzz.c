/*
 * Network fuzzing of live RC QPs: while two processes run a verified RC transfer
 * (rounds of SENDs, WRITEs and READs, every byte checked), a third party -- a thread
 * of the parent with sockets of its own, public API and plain/raw sockets only --
 * sends mutated datagrams at both QPs' UDP ports (port = QPN >> 8 on 127.0.0.1,
 * docs/design.md "Addressing"). The templates are well-formed packets of the live
 * connection (real QPNs, PSNs, R_Key and buffer addresses), so a packet that got past
 * the receive checks would corrupt the transfer.
 *
 *  Phase A, from foreign ports: templates of every kind, mutated (bit flips,
 *  truncation, extension, wrong opcode / PSN / QPN, garbage), CRC fixed or not. The
 *  source check must drop all of them.
 *  Phase B, spoofed from the peer's own address and port (raw IP socket; needs
 *  CAP_NET_RAW, skipped with a notice otherwise): only packets the protocol itself
 *  must reject -- a broken CRC, a QPN with no QP, another partition's P_Key, another
 *  transport's opcode, requests and responses with PSNs from before the connection
 *  began (duplicates: never executed again, never completing anything).
 *
 * The transfer must complete byte-exact with every WR successful, in order, exactly
 * once; both processes exit cleanly. Seeded (SWVT_NET_FUZZ_SEED, default 1): the
 * packets sent are the same each run, their interleaving with the transfer is not.
 * Prints what it sent: counts per kind and the first packets of each in hex.
 */
#include <arpa/inet.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define TMO	   30000
#define NWR	   48
#define SLOT	   8192
#define MIN_ROUNDS 3
#define MAX_ROUNDS 400
#define N_FOREIGN  12000 /* phase A packets */
#define N_SPOOF	   6000	 /* phase B packets */

static uint32_t wr_len(int r, int i)
{
	return (uint32_t)(((unsigned)r * 131u + (unsigned)i * 7919u) % SLOT);
}

static enum ibv_wr_opcode wr_op(int i)
{
	static const enum ibv_wr_opcode ops[3] = {IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ};
	return ops[i % 3];
}

static uint32_t seed_of(int r, int i, int read)
{
	return (uint32_t)(r * 1000 + i + (read ? 500 : 0) + 7);
}

/* ------------------------------------------------------------ the third party */

static uint64_t rng_state;
static uint32_t rnd(void)
{
	/* xorshift64*: deterministic from the seed */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

static uint32_t crc_table[256];
static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		crc_table[i] = c;
	}
}
static uint32_t crc32_upd(uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	while (n--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* The trailing CRC as docs/wire.md defines it: over BTH (byte 4 as 0xff) and the rest
 * of the packet up to the CRC, least-significant byte first. */
static void put_crc(uint8_t *b, size_t len)
{
	if (len < 16)
		return;
	uint8_t bth[12];
	memcpy(bth, b, 12);
	bth[4] = 0xff;
	uint32_t c = crc32_upd(0, bth, 12);
	c = crc32_upd(c, b + 12, len - 16);
	for (int i = 0; i < 4; i++)
		b[len - 4 + i] = (uint8_t)(c >> (8 * i));
}

static void be16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}
static void be24(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 16);
	be16(p + 1, v);
}
static void be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	be24(p + 1, v);
}
static void be64(uint8_t *p, uint64_t v)
{
	be32(p, (uint32_t)(v >> 32));
	be32(p + 4, (uint32_t)v);
}

struct conn {
	uint32_t req_qpn, resp_qpn; /* the parent (requester) and child (responder) QPs */
	uint32_t req_psn;	    /* the requester's first PSN = the responder's first ePSN */
	uint64_t resp_addr;	    /* the responder's buffer, its R_Key */
	uint32_t resp_rkey;
	uint64_t size;
};

/* Template kinds: requests go to the responder, responses to the requester. */
enum tmpl {
	T_SEND_ONLY,
	T_SEND_FIRST,
	T_WRITE_ONLY,
	T_WRITE_FIRST,
	T_READ_REQ,
	T_FETCH_ADD,
	T_ACK,
	T_NAK,
	T_READ_RESP,
	T_ATOMIC_ACK,
	T_UC_SEND,
	T_UD_SEND,
	T_NTMPL
};
static const char *const tmpl_name[T_NTMPL] = {
    "RC_SEND_ONLY",	     "RC_SEND_FIRST", "RC_WRITE_ONLY", "RC_WRITE_FIRST",
    "RC_READ_REQUEST",	     "RC_FETCH_ADD",  "RC_ACK",	       "RC_NAK",
    "RC_READ_RESPONSE_ONLY", "RC_ATOMIC_ACK", "UC_SEND_ONLY",  "UD_SEND_ONLY"};

static int is_response(enum tmpl k)
{
	return k >= T_ACK && k <= T_ATOMIC_ACK;
}

/* A well-formed packet of the live connection; returns its length (CRC included). */
static size_t build(uint8_t *b, enum tmpl k, const struct conn *c, uint32_t psn)
{
	static const uint8_t ops[T_NTMPL] = {0x04, 0x00, 0x0a, 0x06, 0x0c, 0x14,
					     0x11, 0x11, 0x10, 0x12, 0x24, 0x64};
	uint32_t pay = 0;
	uint8_t *q = b + 12;

	memset(b, 0, 12);
	b[0] = ops[k];
	be16(b + 2, 0xffff);
	be24(b + 5, is_response(k) ? c->req_qpn : c->resp_qpn);
	b[8] = is_response(k) ? 0 : 0x80;
	be24(b + 9, psn);
	uint64_t va = c->resp_addr + (rnd() % (c->size - SLOT));
	switch (k) {
	case T_SEND_ONLY:
	case T_UC_SEND:
		pay = 1 + rnd() % 1024;
		break;
	case T_SEND_FIRST:
		pay = 1024;
		break;
	case T_UD_SEND:
		be32(q, 0x11111111);
		be24(q + 5, c->req_qpn);
		q += 8;
		pay = 1 + rnd() % 512;
		break;
	case T_WRITE_ONLY:
	case T_WRITE_FIRST:
	case T_READ_REQ:
		be64(q, va);
		be32(q + 8, c->resp_rkey);
		pay = k == T_WRITE_FIRST ? 1024 : 1 + rnd() % 1024;
		be32(q + 12, k == T_WRITE_FIRST ? 4096 : pay);
		q += 16;
		if (k == T_READ_REQ)
			pay = 0;
		break;
	case T_FETCH_ADD:
		be64(q, va & ~7ull);
		be32(q + 8, c->resp_rkey);
		be64(q + 12, 0x0101010101010101ull);
		q += 28;
		break;
	case T_ACK:
	case T_NAK:
		q[0] = k == T_ACK ? 0x1f : (uint8_t)(0x60 | (rnd() % 4));
		be24(q + 1, rnd() & 0xffffff);
		q += 4;
		break;
	case T_READ_RESP:
		q[0] = 0x1f;
		q += 4;
		pay = 1 + rnd() % 1024;
		break;
	case T_ATOMIC_ACK:
		q[0] = 0x1f;
		q += 4;
		be64(q, rnd());
		q += 8;
		break;
	default:
		break;
	}
	uint32_t padded = (pay + 3) & ~3u;
	b[1] = (uint8_t)((padded - pay) << 4);
	for (uint32_t i = 0; i < pay; i++)
		q[i] = (uint8_t)rnd();
	memset(q + pay, 0, padded - pay);
	size_t len = (size_t)(q - b) + padded + 4;
	put_crc(b, len);
	return len;
}

enum kind {
	K_ASIS,
	K_FLIP,
	K_TRUNC,
	K_EXTEND,
	K_OPCODE,
	K_PSN,
	K_QPN,
	K_GARBAGE,
	/* spoofed (phase B) */
	K_S_BADCRC,
	K_S_NOQP,
	K_S_PKEY,
	K_S_TRANSPORT,
	K_S_OLD_REQ,
	K_S_OLD_RESP,
	K_N
};
static const char *const kind_name[K_N] = {
    "foreign: as built",	"foreign: bit flips",	    "foreign: truncated",
    "foreign: extended",	"foreign: wrong opcode",    "foreign: wrong PSN",
    "foreign: wrong QPN",	"foreign: garbage",	    "spoofed: broken CRC",
    "spoofed: QPN without QP",	"spoofed: other P_Key",	    "spoofed: other transport",
    "spoofed: old-PSN request", "spoofed: old-PSN response"};

struct fuzzer {
	struct conn c;
	uint16_t req_port, resp_port; /* the QPs' UDP ports */
	int fds[4];		      /* foreign sockets */
	int raw;		      /* raw IP socket, -1 without CAP_NET_RAW */
	atomic_bool stop;
	atomic_bool done;
	unsigned long count[K_N];
	unsigned long bytes;
};

static void dump(enum kind k, enum tmpl t, const uint8_t *b, size_t len, uint16_t from, uint16_t to)
{
	printf("  %-26s %-21s %4zu B %5u -> %5u:", kind_name[k], tmpl_name[t], len, from, to);
	for (size_t i = 0; i < len && i < 24; i++)
		printf(" %02x", b[i]);
	printf(len > 24 ? " ...\n" : "\n");
}

static void send_foreign(struct fuzzer *f, const uint8_t *b, size_t len, uint16_t port)
{
	struct sockaddr_in to = {.sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = f->fds[rnd() % 4];
	/* A full socket buffer just loses the datagram, as the network would. */
	(void)sendto(fd, b, len, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof(to));
}

static void send_spoofed(struct fuzzer *f, const uint8_t *b, size_t len, uint16_t from,
			 uint16_t to_port)
{
	static uint8_t d[20 + 8 + 2048];
	struct iphdr *ip = (struct iphdr *)d;
	struct udphdr *udp = (struct udphdr *)(d + 20);
	memset(d, 0, 28);
	ip->version = 4;
	ip->ihl = 5;
	ip->ttl = 64;
	ip->protocol = IPPROTO_UDP;
	ip->saddr = htonl(INADDR_LOOPBACK);
	ip->daddr = htonl(INADDR_LOOPBACK);
	ip->tot_len = htons((uint16_t)(28 + len)); /* the kernel fills in the checksum */
	udp->source = htons(from);
	udp->dest = htons(to_port);
	udp->len = htons((uint16_t)(8 + len));
	udp->check = 0; /* none (IPv4) */
	memcpy(d + 28, b, len);
	struct sockaddr_in to = {.sin_family = AF_INET,
				 .sin_port = htons(to_port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	(void)sendto(f->raw, d, 28 + len, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof(to));
}

/* A PSN from before the connection began: a duplicate for the receiver, whatever
 * the transfer has reached (it moves < 2^20 PSNs; duplicates reach back 2^23). */
static uint32_t old_psn(const struct conn *c)
{
	return (c->req_psn - 1 - rnd() % 100000) & 0xffffff;
}

static void one_foreign(struct fuzzer *f)
{
	static uint8_t b[4096];
	enum tmpl t = (enum tmpl)(rnd() % T_NTMPL);
	uint32_t psn = (f->c.req_psn + rnd() % 4096) & 0xffffff;
	size_t len = build(b, t, &f->c, psn);
	enum kind k = (enum kind)(rnd() % (K_GARBAGE + 1));
	int fix = rnd() & 1;
	switch (k) {
	case K_FLIP:
		for (unsigned n = 1 + rnd() % 8; n; n--)
			b[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
		break;
	case K_TRUNC:
		len = rnd() % len;
		break;
	case K_EXTEND: {
		size_t add = 1 + rnd() % 64;
		for (size_t i = 0; i < add; i++)
			b[len + i] = (uint8_t)rnd();
		len += add;
		break;
	}
	case K_OPCODE:
		b[0] = (uint8_t)rnd();
		break;
	case K_PSN:
		be24(b + 9, rnd() & 0xffffff);
		break;
	case K_QPN:
		be24(b + 5, rnd() % 2 ? rnd() & 0xffffff
				      : ((is_response(t) ? f->c.req_qpn : f->c.resp_qpn) & ~0xffu) |
					    (rnd() & 0xff));
		break;
	case K_GARBAGE:
		len = rnd() % 1500;
		for (size_t i = 0; i < len; i++)
			b[i] = (uint8_t)rnd();
		break;
	default:
		fix = 0;
		break;
	}
	if (fix)
		put_crc(b, len);
	uint16_t to = is_response(t) ? f->req_port : f->resp_port;
	if (rnd() % 8 == 0)
		to = to == f->req_port ? f->resp_port : f->req_port;
	if (f->count[k] < 3)
		dump(k, t, b, len, 0, to);
	f->count[k]++;
	f->bytes += len;
	send_foreign(f, b, len, to);
}

static void one_spoofed(struct fuzzer *f)
{
	static uint8_t b[4096];
	enum kind k = (enum kind)(K_S_BADCRC + rnd() % (K_N - K_S_BADCRC));
	enum tmpl t;
	uint32_t psn = (f->c.req_psn + rnd() % 4096) & 0xffffff;

	switch (k) {
	case K_S_OLD_RESP:
		t = (enum tmpl)(T_ACK + rnd() % 4);
		psn = old_psn(&f->c);
		break;
	case K_S_OLD_REQ:
		t = (enum tmpl)(rnd() % (T_FETCH_ADD + 1));
		psn = old_psn(&f->c);
		break;
	case K_S_TRANSPORT:
		t = rnd() % 2 ? T_UC_SEND : T_UD_SEND;
		break;
	default:
		t = (enum tmpl)(rnd() % (T_ATOMIC_ACK + 1));
		break;
	}
	size_t len = build(b, t, &f->c, psn);
	switch (k) {
	case K_S_BADCRC: /* any damage, the CRC left as it was, then certainly wrong */
		if (rnd() % 2)
			len = 12 + rnd() % (len - 12);
		else
			b[rnd() % (len - 4)] ^= (uint8_t)(1u << (rnd() % 8));
		b[len - 1] ^= 0x80;
		break;
	case K_S_NOQP: { /* the same socket, a slot with no QP */
		uint32_t q = is_response(t) ? f->c.req_qpn : f->c.resp_qpn;
		be24(b + 5, (q & ~0xffu) | ((q + 1 + rnd() % 255) & 0xff));
		put_crc(b, len);
		break;
	}
	case K_S_PKEY: /* partition 0x1234 (full member): not the default partition */
		be16(b + 2, 0x9234);
		put_crc(b, len);
		break;
	default:
		break;
	}
	/* From the QP's peer: requests as if from the requester, responses as if from
	 * the responder. */
	uint16_t from = is_response(t) ? f->resp_port : f->req_port;
	uint16_t to = is_response(t) ? f->req_port : f->resp_port;
	if (f->count[k] < 3)
		dump(k, t, b, len, from, to);
	f->count[k]++;
	f->bytes += len;
	send_spoofed(f, b, len, from, to);
}

static void *fuzzer_main(void *arg)
{
	struct fuzzer *f = arg;
	for (unsigned long i = 0; i < N_FOREIGN && !atomic_load(&f->stop); i++) {
		one_foreign(f);
		if (i % 32 == 31)
			sched_yield(); /* pacing only: the transfer shares the cores */
	}
	for (unsigned long i = 0; f->raw >= 0 && i < N_SPOOF && !atomic_load(&f->stop); i++) {
		one_spoofed(f);
		if (i % 32 == 31)
			sched_yield();
	}
	atomic_store(&f->done, true);
	return NULL;
}

/* ------------------------------------------------------------ the transfer */

static void req(struct swvt *t, void *arg)
{
	static struct ibv_send_wr wrs[NWR];
	static struct ibv_sge sges[NWR];
	static struct ibv_wc wc[NWR];
	static struct fuzzer f;
	struct ibv_send_wr *bad;
	const char *s = getenv("SWVT_NET_FUZZ_SEED");
	uint64_t seed = s ? strtoull(s, NULL, 0) : 1;

	rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
	crc_init();
	f.c = (struct conn){.req_qpn = t->local.qpn,
			    .resp_qpn = t->remote.qpn,
			    .req_psn = t->local.psn,
			    .resp_addr = t->remote.addr,
			    .resp_rkey = t->remote.rkey,
			    .size = t->remote.size};
	f.req_port = (uint16_t)(t->local.qpn >> 8);
	f.resp_port = (uint16_t)(t->remote.qpn >> 8);
	for (int i = 0; i < 4; i++) {
		f.fds[i] = socket(AF_INET, SOCK_DGRAM, 0);
		CHECK(f.fds[i] >= 0);
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		CHECK(bind(f.fds[i], (struct sockaddr *)&a, sizeof(a)) == 0);
	}
	f.raw = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
	printf("test_net_fuzz: seed %llu; requester QP %#x (port %u, first PSN %#x), responder "
	       "QP %#x (port %u)\n",
	       (unsigned long long)seed, f.c.req_qpn, f.req_port, f.c.req_psn, f.c.resp_qpn,
	       f.resp_port);
	if (f.raw < 0)
		printf("test_net_fuzz: NOTICE: no raw socket (%s): phase B (spoofed source) "
		       "SKIPPED\n",
		       strerror(errno));
	pthread_t th;
	CHECK_OK(pthread_create(&th, NULL, fuzzer_main, &f));

	int r = 0;
	for (; r < MAX_ROUNDS && (r < MIN_ROUNDS || !atomic_load(&f.done)); r++) {
		swvt_send_u64(t, (uint64_t)r);
		for (int i = 0; i < NWR; i++) {
			uint8_t *slot = t->buf + (size_t)i * SLOT;
			enum ibv_wr_opcode op = wr_op(i);
			uint32_t len = wr_len(r, i);
			if (op == IBV_WR_RDMA_READ)
				memset(slot, 0xcc, SLOT);
			else
				swvt_fill(slot, len, seed_of(r, i, 0));
			sges[i] = (struct ibv_sge){(uintptr_t)slot, len, t->mr->lkey};
			wrs[i] = (struct ibv_send_wr){.wr_id = (uint64_t)i,
						      .sg_list = &sges[i],
						      .num_sge = 1,
						      .opcode = op,
						      .send_flags = IBV_SEND_SIGNALED,
						      .next = i + 1 < NWR ? &wrs[i + 1] : NULL};
			if (op != IBV_WR_SEND) {
				wrs[i].wr.rdma.remote_addr = t->remote.addr + (uint64_t)i * SLOT;
				wrs[i].wr.rdma.rkey = t->remote.rkey;
			}
		}
		swvt_barrier(t); /* receives posted, READ sources filled */
		CHECK_OK(ibv_post_send(t->qp, wrs, &bad));
		swvt_poll_n(t->scq, wc, NWR, TMO);
		for (int i = 0; i < NWR; i++) {
			CHECK_WC(wc[i], IBV_WC_SUCCESS);
			CHECK_EQ(wc[i].wr_id, (uint64_t)i); /* in order, each exactly once */
			if (wr_op(i) == IBV_WR_RDMA_READ) {
				uint8_t *slot = t->buf + (size_t)i * SLOT;
				uint32_t len = wr_len(r, i);
				CHECK_EQ(wc[i].byte_len, len);
				CHECK_EQ(swvt_verify(slot, len, seed_of(r, i, 1)), (size_t)-1);
				if (len < SLOT)
					CHECK_EQ(slot[len], 0xcc);
			}
		}
		swvt_barrier(t); /* the responder checks SENDs and WRITEs */
		CHECK_EQ(swvt_recv_u64(t), 1);
	}
	swvt_send_u64(t, UINT64_MAX);
	atomic_store(&f.stop, true);
	CHECK_OK(pthread_join(th, NULL));
	swvt_expect_empty(t->scq, 20);
	/* Evidence that phase B reached the QPs' receive checks (printed, not asserted:
	 * datagrams may be lost to a full socket). */
	struct ibv_port_attr pa;
	CHECK_OK(ibv_query_port(t->ctx, 1, &pa));
	printf("test_net_fuzz: P_Key violations counted: requester %u, responder %llu\n",
	       pa.bad_pkey_cntr, (unsigned long long)swvt_recv_u64(t));

	printf("test_net_fuzz: %d rounds of %d WRs verified; sent %lu bytes:\n", r, NWR, f.bytes);
	for (int k = 0; k < K_N; k++)
		printf("  %-26s %lu\n", kind_name[k], f.count[k]);
	for (int i = 0; i < 4; i++)
		close(f.fds[i]);
	if (f.raw >= 0)
		close(f.raw);
	(void)arg;
}

static void resp(struct swvt *t, void *arg)
{
	static struct ibv_wc wc[NWR];
	uint64_t r;
	while ((r = swvt_recv_u64(t)) != UINT64_MAX) {
		int nsend = 0;
		memset(t->buf, 0, (size_t)NWR * SLOT);
		for (int i = 0; i < NWR; i++) {
			if (wr_op(i) == IBV_WR_SEND) {
				swvt_post_recv(t, (uint64_t)i, (uint64_t)i * SLOT, SLOT);
				nsend++;
			} else if (wr_op(i) == IBV_WR_RDMA_READ) {
				swvt_fill(t->buf + (size_t)i * SLOT, wr_len((int)r, i),
					  seed_of((int)r, i, 1));
			}
		}
		swvt_barrier(t);
		swvt_poll_n(t->rcq, wc, nsend, TMO);
		for (int k = 0; k < nsend; k++) {
			int i = k * 3; /* SENDs are every 3rd WR, received in order */
			CHECK_WC(wc[k], IBV_WC_SUCCESS);
			CHECK_EQ(wc[k].wr_id, (uint64_t)i);
			CHECK_EQ(wc[k].byte_len, wr_len((int)r, i));
		}
		swvt_barrier(t); /* the requester saw every completion: WRITEs are placed */
		for (int i = 0; i < NWR; i++) {
			uint8_t *slot = t->buf + (size_t)i * SLOT;
			uint32_t len = wr_len((int)r, i);
			if (wr_op(i) == IBV_WR_RDMA_READ)
				continue;
			size_t off = swvt_verify(slot, len, seed_of((int)r, i, 0));
			if (off != (size_t)-1)
				fprintf(stderr, "round %llu WR %d (%u bytes) differs at %zu\n",
					(unsigned long long)r, i, len, off);
			CHECK_EQ(off, (size_t)-1);
			for (uint32_t b = len; b < SLOT; b++) /* nothing beyond it either */
				CHECK_EQ(slot[b], 0);
		}
		swvt_send_u64(t, 1);
	}
	swvt_expect_empty(t->rcq, 20);
	struct ibv_port_attr pa;
	CHECK_OK(ibv_query_port(t->ctx, 1, &pa));
	swvt_send_u64(t, pa.bad_pkey_cntr);
	(void)arg;
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	setvbuf(stdout, NULL, _IOLBF, 0);
	o.buf_size = (size_t)NWR * SLOT + 4096;
	o.max_send_wr = NWR;
	o.max_recv_wr = NWR;
	o.max_rd_atomic = 16;
	o.max_dest_rd_atomic = 16;
	o.watchdog_s = 100;
	unsetenv("SWVERBS_FAULT"); /* the only faults here are the fuzzer's */
	return swvt_run(&o, req, resp, NULL);
}
