/* Inside an RC pair side; see rcpair_int.h. */
#include "rcpair_int.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include "check.h"
#include "core/context.h"
#include "transport/opcode.h"
#include "transport/packet.h"

struct swv_endpoint *swvt_rc_ep(const struct swvt_rc_side *s)
{
	return &to_swv_ctx(s->ctx)->ports[0]->ep;
}

clockid_t swvt_rc_progress_clock(const struct swvt_rc_side *s)
{
	clockid_t c;
	CHECK_OK(pthread_getcpuclockid(to_swv_ctx(s->ctx)->progress.thread, &c));
	return c;
}

struct swv_shm_stats swvt_rc_shm_stats(const struct swvt_rc_side *s)
{
	struct swv_shm_stats st;
	swv_shm_get_stats(swvt_rc_ep(s)->shm, &st);
	return st;
}

void swvt_rc_send_forged(const struct swvt_rc_side *a, const struct swvt_rc_side *b, uint8_t op,
			 uint32_t psn, uint32_t rkey, bool udp)
{
	swvt_rc_send_forged_at(a, b, op, psn, rkey, (uintptr_t)b->buf, 8, udp);
}

void swvt_rc_send_forged_at(const struct swvt_rc_side *a, const struct swvt_rc_side *b, uint8_t op,
			    uint32_t psn, uint32_t rkey, uint64_t va, uint32_t len, bool udp)
{
	struct swv_pkt p = {.opcode = SWV_OP_RC | op,
			    .dqpn = b->qp->qp_num,
			    .psn = psn,
			    .ackreq = true,
			    .placed = true,
			    .reth_va = va,
			    .reth_rkey = rkey,
			    .reth_len = len};
	p.flags = swv_opcode(p.opcode)->flags;
	uint8_t pkt[SWV_MAX_HDR_LEN + 8];
	size_t h = swv_pkt_build_hdr(pkt, &p);
	CHECK(h > 0);
	size_t t = swv_pkt_build_tail(pkt, h, NULL, 0, pkt + h);
	CHECK(t > 0);
	struct sockaddr_in to = swv_ep_sockaddr(swvt_rc_ep(b));
	if (udp) {
		CHECK_EQ(
		    sendto(swvt_rc_ep(a)->fd, pkt, h + t, 0, (struct sockaddr *)&to, sizeof(to)),
		    (ssize_t)(h + t));
	} else {
		struct iovec iov = {pkt, h + t};
		CHECK_OK(swv_ep_send(swvt_rc_ep(a), &to, &iov, 1));
	}
}

void swvt_rc_need_direct(void)
{
	if (swv_shm_direct_enabled())
		return;
	fprintf(stderr, "skip: the intra-host link or its direct placement is off\n");
	exit(77);
}
