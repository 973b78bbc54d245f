/*
 * Hostile UDP_SEGMENT bursts at live QPs. While an RC transfer runs (1 MiB RDMA WRITE,
 * a SEND, a 256 KiB RDMA READ per round, each verified byte for byte), a thread of the
 * requester process sends GSO bursts from a plain UDP socket at both QPs' UDP ports
 * (the port is qp_num >> 8, the address the GID's IPv4; docs/design.md "Addressing"):
 * 1 to 129 segments per datagram, segments of 1 byte, below an IB header, of MTU
 * sizes, and piles of 128-segment bursts followed by ordinary datagrams, so that one
 * receive batch holds more packets than swverbs senders ever put in it. Both processes
 * must survive and every transfer must complete exactly. Shapes the kernel refuses
 * (EINVAL: more segments than its UDP_MAX_SEGMENTS) are skipped and reported; every
 * shape of up to 64 segments must go out.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "udp_segment.h"

#define TMO	20000
#define MIB	(1u << 20)
#define ROUNDS	6
#define MAX_UDP 65507
#define PILE	48 /* 128-segment bursts in a row, then as many ordinary datagrams */

static const unsigned counts[] = {1, 2, 63, 64, 65, 127, 128, 129};
/* 1 byte, below BTH + CRC (16), BTH + CRC, MIDDLE packets at MTU 1024 and 4096 */
static const size_t sizes[] = {1, 8, 15, 16, 1040, 4112};

struct flood {
	int fd;
	struct sockaddr_in dst[2]; /* the requester's QP port, the responder's */
	unsigned sent, refused;	   /* datagrams */
	bool refused_shape[sizeof(counts) / sizeof(counts[0])][sizeof(sizes) / sizeof(sizes[0])];
};

static uint8_t junk[MAX_UDP];

/* One datagram of nseg segments of seg bytes (the last 'last' bytes) with UDP_SEGMENT,
 * or a plain one when nseg is 0. Returns 0 or errno. */
static int burst(struct flood *f, const struct sockaddr_in *dst, unsigned nseg, size_t seg,
		 size_t last)
{
	size_t len = nseg ? (size_t)(nseg - 1) * seg + last : 100;
	ssize_t r = swvt_send_segmented(f->fd, dst, junk, len, nseg ? (uint16_t)seg : 0);
	if (r < 0)
		return errno;
	CHECK_EQ(r, len);
	f->sent++;
	return 0;
}

/* One pass: every shape at both ports, then a pile at each. */
static void *flood_pass(void *arg)
{
	struct flood *f = arg;
	for (unsigned c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			unsigned nseg = counts[c];
			size_t seg = sizes[s], last = seg > 2 ? seg / 2 + 1 : seg;
			if ((size_t)(nseg - 1) * seg + last > MAX_UDP)
				nseg = (unsigned)((MAX_UDP - last) / seg) + 1;
			for (int d = 0; d < 2; d++) {
				int rc = burst(f, &f->dst[d], nseg, seg, last);
				if (rc) {
					/* Only the kernel's segment limit may refuse. */
					CHECK_EQ(rc, EINVAL);
					CHECK(nseg > 64);
					f->refused++;
					f->refused_shape[c][s] = true;
				}
			}
		}
	}
	for (int d = 0; d < 2; d++) {
		for (int i = 0; i < PILE; i++) {
			int rc = burst(f, &f->dst[d], 128, 16, 16);
			if (rc) {
				CHECK_EQ(rc, EINVAL);
				f->refused++;
				/* the most this kernel takes */
				CHECK_OK(burst(f, &f->dst[d], 64, 16, 16));
			}
		}
		for (int i = 0; i < PILE; i++)
			CHECK_OK(burst(f, &f->dst[d], 0, 0, 0));
	}
	return NULL;
}

static struct sockaddr_in qp_addr(const struct swvt_info *info)
{
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	memcpy(&sa.sin_addr, info->gid + 12, 4); /* IB and RoCE GIDs both end in the IPv4 */
	sa.sin_port = htons((uint16_t)(info->qpn >> 8));
	return sa;
}

static void requester(struct swvt *t, void *arg)
{
	struct flood f;
	memset(&f, 0, sizeof(f));
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 37 + 11);
	f.fd = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(f.fd >= 0);
	f.dst[0] = qp_addr(&t->local);
	f.dst[1] = qp_addr(&t->remote);
	struct ibv_wc wc;
	uint32_t seed = 1000;

	for (int round = 0; round < ROUNDS; round++, seed += 3) {
		pthread_t th;
		CHECK_OK(pthread_create(&th, NULL, flood_pass, &f));

		/* RDMA WRITE of 1 MiB into the peer's [0, 1 MiB), then a SEND into its
		 * [1 MiB, +4096): the peer verifies both once the SEND arrives. */
		swvt_fill(t->buf, MIB, seed);
		swvt_fill(t->buf + MIB, 4096, seed + 1);
		swvt_barrier(t); /* receive posted */
		struct ibv_sge sge = {(uintptr_t)t->buf, MIB, t->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE},
				   *bad;
		wr.wr.rdma.remote_addr = t->remote.addr;
		wr.wr.rdma.rkey = t->remote.rkey;
		CHECK_OK(ibv_post_send(t->qp, &wr, &bad));
		swvt_post_send(t, 2, IBV_WR_SEND, MIB, 4096, 0, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.wr_id, 2);
		swvt_barrier(t); /* the peer verified and wrote its pattern at [0, 256 KiB) */

		/* RDMA READ of the peer's pattern back. */
		memset(t->buf, 0xee, 256 * 1024 + 64);
		swvt_post_send(t, 3, IBV_WR_RDMA_READ, 0, 256 * 1024, 0, IBV_SEND_SIGNALED);
		swvt_poll_n(t->scq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.byte_len, 256 * 1024);
		CHECK_EQ(swvt_verify(t->buf, 256 * 1024, seed + 2), (size_t)-1);
		CHECK_EQ(t->buf[256 * 1024], 0xee);

		CHECK_OK(pthread_join(th, NULL));
		swvt_barrier(t);
	}
	close(f.fd);
	for (unsigned c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
		for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
			if (f.refused_shape[c][s])
				printf("test_rx_gso_flood: kernel refused %u segments of %zu bytes "
				       "(EINVAL): shape skipped\n",
				       counts[c], sizes[s]);
	printf("test_rx_gso_flood: %d verified rounds under %u hostile datagrams "
	       "(%u refused by the kernel)\n",
	       ROUNDS, f.sent, f.refused);
	(void)arg;
}

static void responder(struct swvt *t, void *arg)
{
	struct ibv_wc wc;
	uint32_t seed = 1000;
	for (int round = 0; round < ROUNDS; round++, seed += 3) {
		memset(t->buf, 0, MIB + 4096);
		swvt_post_recv(t, 10, MIB, 4096);
		swvt_barrier(t);
		swvt_poll_n(t->rcq, &wc, 1, TMO);
		CHECK_WC(wc, IBV_WC_SUCCESS);
		CHECK_EQ(wc.byte_len, 4096);
		CHECK_EQ(swvt_verify(t->buf, MIB, seed), (size_t)-1);
		CHECK_EQ(swvt_verify(t->buf + MIB, 4096, seed + 1), (size_t)-1);
		swvt_fill(t->buf, 256 * 1024, seed + 2);
		swvt_barrier(t);
		swvt_barrier(t); /* the READ is done */
	}
	(void)arg;
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.path_mtu = IBV_MTU_4096;
	int rc = swvt_run(&o, requester, responder, NULL);
	if (!rc)
		printf("test_rx_gso_flood: ok\n");
	return rc;
}
