/* swv_ep_recv_segs against hostile GSO shapes: UDP_SEGMENT bursts from a plain socket
 * (more segments per datagram than any swverbs sender produces, segments of 1 byte,
 * below an IB header, of MTU sizes, a last segment that does not fill), mixed with
 * ordinary datagrams in one receive batch at an endpoint with UDP_GRO on. Every
 * descriptor returned must lie inside the receive buffers and the descriptor array,
 * every ordinary datagram must arrive, and each burst must yield its first
 * SWV_EP_GSO_MAX_SEGS segments (the rest counted in rx_gro_excess). */
#include <arpa/inet.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "udp_segment.h"
#include "link/endpoint.h"
#include "util/compiler.h"

#define MAX_UDP	  65507 /* the largest UDP/IPv4 payload */
#define ORD_LEN	  100	/* ordinary datagrams: this long, distinct from every burst */
#define MAX_DGRAM 64

/* One datagram of a batch: an ordinary one (nseg 0) or a GSO burst. */
struct dgram {
	unsigned nseg;
	size_t seg, last;
	bool sent; /* the kernel took it */
};

static uint8_t payload[MAX_UDP];
static unsigned seq;	   /* datagram number, for the content pattern */
static in_port_t src_port; /* the sender's, network order */

static uint8_t pat(unsigned d, unsigned k, size_t o)
{
	return (uint8_t)(d * 7 + k * 13 + o * 3 + 1);
}

static size_t dgram_len(const struct dgram *g)
{
	return g->nseg ? (size_t)(g->nseg - 1) * g->seg + g->last : ORD_LEN;
}

/* Send one datagram with its pattern (datagram number d). Returns 0 or errno. */
static int send_dgram(int fd, const struct sockaddr_in *dst, const struct dgram *g, unsigned d)
{
	size_t len = dgram_len(g), seg = g->nseg ? g->seg : ORD_LEN;
	for (size_t off = 0; off < len; off++)
		payload[off] = pat(d, (unsigned)(off / seg), off % seg);
	ssize_t r = swvt_send_segmented(fd, dst, payload, len, g->nseg ? (uint16_t)g->seg : 0);
	if (r < 0)
		return errno;
	CHECK_EQ(r, len);
	return 0;
}

/* A descriptor lies inside the receive buffers. */
static void check_bounds(const struct swv_ep_rx *rx, const struct swv_rx_pkt *p)
{
	const uint8_t *lo = rx->mem, *hi = rx->mem + (size_t)rx->nbufs * SWV_EP_RX_BUF_LEN;
	CHECK(p->buf >= lo && p->buf <= hi);
	CHECK(p->len <= (size_t)(hi - p->buf));
}

/* What the receiver is expected to hand back for the datagrams that went out, in
 * order: one descriptor per ordinary datagram, the first SWV_EP_GSO_MAX_SEGS
 * segments of each burst. */
struct want {
	unsigned d; /* datagram number */
	unsigned k; /* segment index */
	size_t len;
};

static unsigned expect(const struct dgram *gs, unsigned n, unsigned d0, struct want *w,
		       uint64_t *excess)
{
	unsigned nw = 0;
	for (unsigned i = 0; i < n; i++) {
		const struct dgram *g = &gs[i];
		if (!g->sent)
			continue;
		if (!g->nseg) {
			w[nw++] = (struct want){d0 + i, 0, ORD_LEN};
			continue;
		}
		/* A burst not larger than one segment goes out as a plain datagram. */
		unsigned segs = dgram_len(g) <= g->seg ? 1 : g->nseg;
		unsigned keep = segs < SWV_EP_GSO_MAX_SEGS ? segs : SWV_EP_GSO_MAX_SEGS;
		*excess += segs - keep;
		for (unsigned k = 0; k < keep; k++)
			w[nw++] = (struct want){d0 + i, k, k + 1 < segs ? g->seg : g->last};
	}
	return nw;
}

/* Send the batch, then receive until every expected descriptor has arrived. */
static void run_batch(int fd, struct swv_endpoint *b, struct swv_ep_rx *rx, struct dgram *gs,
		      unsigned n, unsigned *refused)
{
	static struct want w[MAX_DGRAM * 128];
	struct sockaddr_in dst = swv_ep_sockaddr(b);
	unsigned d0 = seq;
	for (unsigned i = 0; i < n; i++) {
		int rc = send_dgram(fd, &dst, &gs[i], seq++);
		gs[i].sent = rc == 0;
		if (rc) {
			/* Only the kernel's limit on segments per GSO call may refuse. */
			CHECK_EQ(rc, EINVAL);
			CHECK(gs[i].nseg > SWV_EP_GSO_MAX_SEGS);
			(*refused)++;
		}
	}
	uint64_t excess = 0, ex0 = b->rx_gro_excess;
	unsigned nw = expect(gs, n, d0, w, &excess), got = 0;
	for (int spins = 0; got < nw && spins < 5000; spins++) {
		int r = swv_ep_recv_segs(b, rx);
		CHECK(r >= 0);
		CHECK((unsigned)r <= rx->nbufs * SWV_EP_GSO_MAX_SEGS);
		CHECK(rx->ndgrams <= rx->nbufs);
		for (int i = 0; i < r; i++, got++) {
			const struct swv_rx_pkt *p = &rx->segs[i];
			check_bounds(rx, p);
			CHECK(got < nw);
			CHECK_EQ(p->len, w[got].len);
			for (size_t o = 0; o < p->len; o++)
				if (p->buf[o] != pat(w[got].d, w[got].k, o))
					CHECK_EQ(p->buf[o], pat(w[got].d, w[got].k, o));
			CHECK_EQ(p->src.sin_port, src_port);
		}
		if (!r)
			usleep(1000);
	}
	CHECK_EQ(got, nw);
	CHECK_EQ(swv_ep_recv_segs(b, rx), 0);
	CHECK_EQ(b->rx_gro_excess - ex0, excess);
}

/* Datagrams per batch such that a batch of the largest ones fits the receive buffer
 * twice over (socket memory counts more than the payload): no loss by overflow. */
static unsigned batch_for(int rcvfd)
{
	int rcv = 0;
	socklen_t sl = sizeof(rcv);
	CHECK(getsockopt(rcvfd, SOL_SOCKET, SO_RCVBUF, &rcv, &sl) == 0);
	unsigned n = (unsigned)rcv / (2 * (MAX_UDP + 8192));
	if (n > 16)
		n = 16;
	if (n < 2) {
		printf("test_rx_gro_bounds: SO_RCVBUF %d holds too little, batches of 2\n", rcv);
		n = 2;
	}
	return n;
}

static const unsigned counts[] = {1, 2, 63, 64, 65, 127, 128, 129};
/* 1 byte, below BTH + CRC (16), BTH + CRC, an ACK (BTH + AETH + CRC), MIDDLE packets
 * of the IB MTUs (BTH + payload + CRC), and sizes that are none of these */
static const size_t sizes[] = {1, 8, 15, 16, 20, 33, 272, 528, 1040, 2064, 4112, 4113};

static size_t last_of(size_t seg, unsigned variant)
{
	/* the last segment full, one byte, or a part that does not divide */
	return variant == 0 ? seg : variant == 1 ? 1 : (seg > 2 ? seg / 2 + 1 : seg);
}

int main(void)
{
	struct in_addr lo = {htonl(INADDR_LOOPBACK)};
	struct swv_endpoint b;
	CHECK_OK(swv_ep_open(&b, lo, NULL));
	swv_ep_enable_gro(&b);
	if (!b.gro) {
		printf("test_rx_gro_bounds: UDP_GRO unavailable here; SKIPPED\n");
		swv_ep_close(&b);
		return 77;
	}
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(fd >= 0);
	int sb = 16 << 20;
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr = lo};
	socklen_t ml = sizeof(me);
	CHECK(bind(fd, (struct sockaddr *)&me, sizeof(me)) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&me, &ml) == 0);
	src_port = me.sin_port;

	unsigned per = batch_for(b.fd);
	unsigned nbufs_list[] = {1, per};
	unsigned shapes = 0, refused = 0, batches = 0;

	for (unsigned nb = 0; nb < SWV_ARRAY_SIZE(nbufs_list); nb++) {
		struct swv_ep_rx rx;
		unsigned nbufs = nbufs_list[nb];
		CHECK_OK(swv_ep_rx_init(&rx, nbufs));
		for (unsigned c = 0; c < SWV_ARRAY_SIZE(counts); c++) {
			for (unsigned s = 0; s < SWV_ARRAY_SIZE(sizes); s++) {
				/* the last segment's variants for the extreme sizes only */
				unsigned nv = sizes[s] <= 33 || sizes[s] >= 4112 ? 3 : 1;
				for (unsigned v = 0; v < nv; v++) {
					unsigned nseg = counts[c];
					size_t seg = sizes[s], last = last_of(seg, v);
					if ((size_t)(nseg - 1) * seg + last > MAX_UDP) {
						/* the most segments of this size a datagram holds
						 */
						nseg = (unsigned)((MAX_UDP - last) / seg) + 1;
						if (nseg > counts[c])
							continue;
					}
					struct dgram gs[MAX_DGRAM];
					unsigned n = per, before = refused;
					/* 1) bursts and ordinary datagrams alternating */
					for (unsigned i = 0; i < n; i++)
						gs[i] =
						    i & 1 ? (struct dgram){0}
							  : (struct dgram){nseg, seg, last, false};
					run_batch(fd, &b, &rx, gs, n, &refused);
					/* 2) the burst first, then ordinary datagrams filling the
					 *    batch, then legitimate full 64-segment runs */
					gs[0] = (struct dgram){nseg, seg, last, false};
					for (unsigned i = 1; i < n; i++)
						gs[i] = i < n / 2 + 1
							    ? (struct dgram){0}
							    : (struct dgram){64, 16, 16, false};
					run_batch(fd, &b, &rx, gs, n, &refused);
					/* 3) the bursts first, the ordinary datagrams after them */
					for (unsigned i = 0; i < n; i++)
						gs[i] = i >= n / 2 ? (struct dgram){0}
								   : (struct dgram){nseg, seg, last,
										    false};
					run_batch(fd, &b, &rx, gs, n, &refused);
					/* 4) every datagram of the batch is the burst */
					for (unsigned i = 0; i < n; i++)
						gs[i] = (struct dgram){nseg, seg, last, false};
					run_batch(fd, &b, &rx, gs, n, &refused);
					batches += 4;
					shapes++;
					if (refused != before && nb == 0 && v == 0)
						printf("test_rx_gro_bounds: kernel refused %u "
						       "segments "
						       "of %zu bytes (EINVAL): shape skipped\n",
						       nseg, seg);
				}
			}
		}
		/* One datagram may legitimately yield SWV_EP_GSO_MAX_SEGS packets, and so may
		 * every other datagram of the batch: all of them arrive. */
		struct dgram full[MAX_DGRAM];
		for (unsigned i = 0; i < nbufs; i++)
			full[i] = (struct dgram){SWV_EP_GSO_MAX_SEGS, 16, 16, false};
		run_batch(fd, &b, &rx, full, nbufs, &refused);
		swv_ep_rx_free(&rx);
	}
	printf("test_rx_gro_bounds: %u shapes, %u batches (up to %u datagrams), %u datagrams "
	       "refused by the kernel, %llu segments dropped as excess\n",
	       shapes, batches, per, refused, (unsigned long long)b.rx_gro_excess);
	close(fd);
	swv_ep_close(&b);
	printf("test_rx_gro_bounds: ok\n");
	return 0;
}
