/* UDP segmentation offload on endpoints: swv_ep_send_gso (UDP_SEGMENT, or one packet
 * per datagram as fallback) and swv_ep_recv_segs (UDP_GRO split back into packets).
 * Whatever the kernel does with the super-datagram, every packet must arrive whole,
 * in order, with its own length. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "link/endpoint.h"
#include "net/fault.h"
#include "util/compiler.h"

#define SEG 4112 /* a MIDDLE packet at MTU 4096: BTH + payload + CRC */

static uint8_t data[SWV_EP_GSO_MAX_BYTES];

/* Packet k of a run: its first byte is k, the rest a pattern of (tag, k, offset). */
static void fill(uint8_t tag, unsigned nseg, size_t seg, size_t total)
{
	for (size_t off = 0; off < total; off++) {
		size_t k = off / seg, o = off % seg;
		data[off] = o == 0 ? (uint8_t)k : (uint8_t)(tag * 31 + k * 7 + o);
	}
	(void)nseg;
}

static void check_seg(const struct swv_rx_pkt *p, uint8_t tag, unsigned k, size_t len,
		      const struct swv_endpoint *from)
{
	CHECK_EQ(p->len, len);
	CHECK_EQ(p->buf[0], (uint8_t)k);
	for (size_t o = 1; o < len; o++)
		if (p->buf[o] != (uint8_t)(tag * 31 + k * 7 + o))
			CHECK_EQ(p->buf[o], (uint8_t)(tag * 31 + k * 7 + o));
	CHECK_EQ(ntohs(p->src.sin_port), from->port);
}

/* Receive exactly 'want' packets through swv_ep_recv_segs, in order, checking each. */
static void recv_run(struct swv_endpoint *b, struct swv_ep_rx *rx, uint8_t tag, unsigned want,
		     size_t seg, size_t total, const struct swv_endpoint *from)
{
	unsigned got = 0;
	for (int spins = 0; got < want && spins < 2000; spins++) {
		int n = swv_ep_recv_segs(b, rx);
		CHECK(n >= 0);
		for (int i = 0; i < n; i++, got++) {
			CHECK(got < want);
			size_t len = got + 1 < want ? seg : total - (size_t)got * seg;
			check_seg(&rx->segs[i], tag, got, len, from);
		}
		if (!n)
			usleep(1000);
	}
	CHECK_EQ(got, want);
	CHECK_EQ(swv_ep_recv_segs(b, rx), 0);
}

/* Send a run as header-like pieces (iov boundaries not on packet boundaries). */
static int send_run(struct swv_endpoint *a, const struct sockaddr_in *dst, unsigned nseg,
		    size_t seg, size_t total, unsigned *nsent)
{
	struct iovec iov[3] = {{data, 12}, {data + 12, total / 2 - 12},
			       {data + total / 2, total - total / 2}};
	return swv_ep_send_gso(a, dst, iov, 3, seg, nseg, nsent);
}

static void runs(struct swv_endpoint *a, struct swv_endpoint *b, struct swv_ep_rx *rx)
{
	struct sockaddr_in dst = swv_ep_sockaddr(b);
	static const struct {
		unsigned nseg;
		size_t seg, last;
	} cases[] = {
		{1, SEG, 100},  {2, SEG, SEG},  {15, SEG, SEG}, {15, SEG, 16},
		{7, SEG, 4},    {64, 1000, 1},  {3, 300, 299},  {10, 4128, 4000},
	};
	for (unsigned c = 0; c < SWV_ARRAY_SIZE(cases); c++) {
		unsigned n = cases[c].nseg;
		size_t total = (size_t)(n - 1) * cases[c].seg + cases[c].last;
		unsigned nsent = 99;
		fill((uint8_t)c, n, cases[c].seg, total);
		CHECK_OK(send_run(a, &dst, n, cases[c].seg, total, &nsent));
		CHECK_EQ(nsent, n);
		recv_run(b, rx, (uint8_t)c, n, cases[c].seg, total, a);
	}
}

static void test_gso_gro(void)
{
	struct in_addr lo = {htonl(INADDR_LOOPBACK)};
	struct swv_endpoint a, b, c;
	struct swv_ep_rx rx;
	CHECK_OK(swv_ep_open(&a, lo, NULL));
	CHECK_OK(swv_ep_open(&b, lo, NULL));
	CHECK_OK(swv_ep_open(&c, lo, NULL));
	CHECK_OK(swv_ep_rx_init(&rx, 8));

	/* Receiver with GRO: coalesced datagrams are split at their segment size. */
	swv_ep_enable_gro(&b);
	uint64_t calls0 = atomic_load(&a.tx_gso_calls);
	runs(&a, &b, &rx);
	if (swv_ep_gso_usable(&a))
		CHECK(atomic_load(&a.tx_gso_calls) > calls0); /* UDP_SEGMENT was used */
	printf("gso: usable %d, calls %llu, segs %llu; gro: on %d, dgrams %llu, segs %llu\n",
	       swv_ep_gso_usable(&a), (unsigned long long)atomic_load(&a.tx_gso_calls),
	       (unsigned long long)atomic_load(&a.tx_gso_segs), b.gro,
	       (unsigned long long)b.rx_gro_dgrams, (unsigned long long)b.rx_gro_segs);

	/* Receiver without GRO: the kernel segments; the same packets arrive. */
	runs(&a, &c, &rx);
	CHECK_EQ(c.rx_gro_dgrams, 0);

	/* The old one-datagram API on a GRO-less socket sees one packet per datagram. */
	struct sockaddr_in dst = swv_ep_sockaddr(&c);
	fill(9, 5, SEG, 4 * SEG + 10);
	CHECK_OK(send_run(&a, &dst, 5, SEG, 4 * SEG + 10, NULL));
	static uint8_t bufs[8][SWV_EP_MAX_DGRAM];
	struct swv_rx_pkt pk[8];
	int got = 0;
	for (int spins = 0; got < 5 && spins < 2000; spins++) {
		for (int i = 0; i < 8; i++)
			pk[i].buf = bufs[i];
		int r = swv_ep_recv_batch(&c, pk, 5 - got);
		CHECK(r >= 0);
		for (int i = 0; i < r; i++, got++)
			check_seg(&pk[i], 9, (unsigned)got, got < 4 ? SEG : 10, &a);
		if (!r)
			usleep(1000);
	}
	CHECK_EQ(got, 5);

	/* Argument checks: the run must be nseg packets of seg bytes, the last 1..seg. */
	struct iovec iov = {data, 3 * SEG};
	unsigned ns = 7;
	CHECK_EQ(swv_ep_send_gso(&a, &dst, &iov, 1, SEG, 2, &ns), EINVAL); /* too long */
	CHECK_EQ(ns, 0);
	CHECK_EQ(swv_ep_send_gso(&a, &dst, &iov, 1, SEG, 4, &ns), EINVAL); /* too short */
	CHECK_EQ(swv_ep_send_gso(&a, &dst, &iov, 1, 0, 3, &ns), EINVAL);
	CHECK_EQ(swv_ep_send_gso(&a, &dst, &iov, 1, SEG, 0, &ns), EINVAL);
	iov.iov_len = 65 * 10;
	CHECK_EQ(swv_ep_send_gso(&a, &dst, &iov, 1, 10, 65, &ns), EINVAL); /* > 64 segs */
	iov.iov_len = sizeof(data) + 1;
	CHECK_EQ(swv_ep_send_gso(&a, &dst, &iov, 1, 65000, 2, &ns), EINVAL); /* > max bytes */
	CHECK_EQ(swv_ep_send_gso(NULL, &dst, &iov, 1, SEG, 1, &ns), EINVAL);
	CHECK_EQ(swv_ep_recv_segs(NULL, &rx), -EINVAL);
	struct swv_endpoint z;
	memset(&z, 0, sizeof(z));
	CHECK_EQ(swv_ep_recv_segs(&z, &rx), -EBADF);

	swv_ep_rx_free(&rx);
	swv_ep_close(&a);
	swv_ep_close(&b);
	swv_ep_close(&c);
}

/* With a fault injector the run goes out packet by packet, so the injector decides
 * per datagram: with a 100% duplicate rate every packet arrives twice, in order. */
static void test_fault_fallback(void)
{
	struct in_addr lo = {htonl(INADDR_LOOPBACK)};
	struct swv_fault *f = swv_fault_create("seed=3,dup=100");
	CHECK_PTR(f);
	struct swv_endpoint a, b;
	struct swv_ep_rx rx;
	CHECK_OK(swv_ep_open(&a, lo, f));
	CHECK_OK(swv_ep_open(&b, lo, NULL));
	CHECK_OK(swv_ep_rx_init(&rx, 16));
	swv_ep_enable_gro(&b);
	CHECK(!swv_ep_gso_usable(&a));

	struct sockaddr_in dst = swv_ep_sockaddr(&b);
	const unsigned n = 6;
	size_t total = 5 * SEG + 40;
	fill(5, n, SEG, total);
	unsigned nsent = 0;
	CHECK_OK(send_run(&a, &dst, n, SEG, total, &nsent));
	CHECK_EQ(nsent, n);
	CHECK_EQ(atomic_load(&a.tx_gso_calls), 0);
	struct swv_fault_stats st;
	swv_fault_get_stats(f, &st);
	CHECK_EQ(st.packets, n);
	CHECK_EQ(st.duplicated, n);

	unsigned got = 0;
	for (int spins = 0; got < 2 * n && spins < 2000; spins++) {
		int r = swv_ep_recv_segs(&b, &rx);
		CHECK(r >= 0);
		for (int i = 0; i < r; i++, got++) {
			unsigned k = got / 2;
			check_seg(&rx.segs[i], 5, k, k + 1 < n ? SEG : 40, &a);
		}
		if (!r)
			usleep(1000);
	}
	CHECK_EQ(got, 2 * n);
	swv_ep_rx_free(&rx);
	swv_ep_close(&a);
	swv_ep_close(&b);
	swv_fault_destroy(f);
}

/* SWVERBS_GSO=0 (read once per process, hence a child): no UDP_SEGMENT, no UDP_GRO. */
static void test_env_off(void)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		setenv("SWVERBS_GSO", "0", 1);
		struct in_addr lo = {htonl(INADDR_LOOPBACK)};
		struct swv_endpoint a, b;
		struct swv_ep_rx rx;
		CHECK_OK(swv_ep_open(&a, lo, NULL));
		CHECK_OK(swv_ep_open(&b, lo, NULL));
		CHECK_OK(swv_ep_rx_init(&rx, 8));
		swv_ep_enable_gro(&b);
		CHECK(!b.gro);
		CHECK(!swv_ep_gso_usable(&a));
		runs(&a, &b, &rx);
		CHECK_EQ(atomic_load(&a.tx_gso_calls), 0);
		CHECK_EQ(b.rx_gro_dgrams, 0);
		swv_ep_rx_free(&rx);
		swv_ep_close(&a);
		swv_ep_close(&b);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Receive datagrams number from..to-1 of test_tx_batch (number 15 went elsewhere). */
static int recv_batch_check(struct swv_endpoint *b, struct swv_ep_rx *rx, const size_t *lens,
			    int from, int to)
{
	int got = from;
	for (int spins = 0; got < to && spins < 2000; spins++) {
		int r = swv_ep_recv_segs(b, rx);
		CHECK(r >= 0);
		for (int k = 0; k < r; k++, got++) {
			CHECK(got < to);
			unsigned i = (unsigned)got + (got >= 15 ? 1 : 0);
			CHECK_EQ(rx->segs[k].len, lens[i]);
			for (size_t o = 0; o < lens[i]; o++)
				CHECK_EQ(rx->segs[k].buf[o], (uint8_t)(i * 13 + o));
		}
		if (!r)
			usleep(1000);
	}
	CHECK_EQ(got, to);
	CHECK_EQ(swv_ep_recv_segs(b, rx), 0);
	return to - from;
}

/* Transmit batching: small datagrams queued in a scope leave in order when it ends
 * (equal-size runs as GSO messages), a large one flushes what is queued before it, and
 * nested scopes flush only at the outermost end. */
static void test_tx_batch(bool gro)
{
	struct in_addr lo = {htonl(INADDR_LOOPBACK)};
	struct swv_endpoint a, b, c;
	struct swv_ep_rx rx;
	CHECK_OK(swv_ep_open(&a, lo, NULL));
	CHECK_OK(swv_ep_open(&b, lo, NULL));
	CHECK_OK(swv_ep_open(&c, lo, NULL));
	CHECK_OK(swv_ep_rx_init(&rx, 64));
	if (gro) {
		swv_ep_enable_gro(&b);
		swv_ep_enable_gro(&c);
	}
	struct sockaddr_in db = swv_ep_sockaddr(&b), dc = swv_ep_sockaddr(&c);
	/* lengths: runs of equal sizes, a shorter one ending a run, a large datagram,
	 * a second destination in the middle */
	static const size_t lens[] = {40, 40, 40, 40, 36, 40, 40, 100, 100, 3000, 8,
				      8,  8,  8,  8,  8,  8,  8,  8,   8,   20,   40};
	const unsigned n = SWV_ARRAY_SIZE(lens);
	uint8_t pkt[3000];
	swv_ep_batch_begin();
	swv_ep_batch_begin(); /* nested: nothing leaves at the inner end */
	for (unsigned i = 0; i < n; i++) {
		for (size_t o = 0; o < lens[i]; o++)
			pkt[o] = (uint8_t)(i * 13 + o);
		struct iovec iov[2] = {{pkt, 4}, {pkt + 4, lens[i] - 4}};
		CHECK_OK(swv_ep_send(&a, i == 15 ? &dc : &db, iov, 2));
		if (i == 5) {
			swv_ep_batch_end(); /* inner end: still batching */
			CHECK_EQ(swv_ep_recv_segs(&b, &rx), 0);
		}
	}
	/* The large datagram (9) flushed 0..8 before it; 10.. wait for the outer end. */
	int got = recv_batch_check(&b, &rx, lens, 0, 10);
	CHECK_EQ(swv_ep_recv_segs(&c, &rx), 0);
	swv_ep_batch_end();
	got += recv_batch_check(&b, &rx, lens, 10, (int)n - 1);
	CHECK_EQ(got, (int)n - 1);
	int r = 0;
	for (int spins = 0; r == 0 && spins < 2000; spins++) {
		r = swv_ep_recv_segs(&c, &rx);
		if (!r)
			usleep(1000);
	}
	CHECK_EQ(r, 1);
	CHECK_EQ(rx.segs[0].len, lens[15]);
	CHECK_EQ(rx.segs[0].buf[0], (uint8_t)(15 * 13));
	swv_ep_rx_free(&rx);
	swv_ep_close(&a);
	swv_ep_close(&b);
	swv_ep_close(&c);
}

int main(void)
{
	test_env_off(); /* first: SWVERBS_GSO is read once per process */
	test_tx_batch(true);
	test_tx_batch(false);
	test_gso_gro();
	test_fault_fallback();
	printf("test_offload: OK\n");
	return 0;
}
