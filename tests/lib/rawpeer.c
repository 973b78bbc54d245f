/* A raw UDP peer for unit tests; see rawpeer.h. */
#include "rawpeer.h"

#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "inproc.h"
#include "net/addr.h"
#include "transport/opcode.h"
#include "util/clock.h"

#define WAIT_NS 10000000000ull

void swvt_rawpeer_open(struct swvt_rawpeer *rp)
{
	memset(rp, 0, sizeof(*rp));
	rp->ctx = swvt_open_first_device();
	rp->pd = ibv_alloc_pd(rp->ctx);
	CHECK_PTR(rp->pd);
	rp->cq = ibv_create_cq(rp->ctx, 64, NULL, NULL, 0);
	CHECK_PTR(rp->cq);
	rp->mr =
	    swvt_reg_buf(rp->pd, 4096,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	rp->buf = rp->mr->addr;

	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	struct timeval tv = {.tv_sec = 10};
	rp->fd = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(rp->fd >= 0);
	CHECK_OK(bind(rp->fd, (struct sockaddr *)&a, sizeof(a)));
	CHECK_OK(getsockname(rp->fd, (struct sockaddr *)&a, &len));
	CHECK_OK(setsockopt(rp->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	rp->port = ntohs(a.sin_port);
	rp->addr = a.sin_addr;
}

void swvt_rawpeer_close(struct swvt_rawpeer *rp)
{
	close(rp->fd);
	swvt_dereg_buf(rp->mr);
	CHECK_OK(ibv_destroy_cq(rp->cq));
	CHECK_OK(ibv_dealloc_pd(rp->pd));
	CHECK_OK(ibv_close_device(rp->ctx));
}

uint32_t swvt_rawpeer_qpn(const struct swvt_rawpeer *rp)
{
	return swv_qpn_make(rp->port, SWVT_RAWPEER_SLOT);
}

struct ibv_qp *swvt_rawpeer_qp(struct swvt_rawpeer *rp, enum ibv_qp_type type, uint16_t pkey_index)
{
	struct ibv_qp_init_attr ia = {
	    .send_cq = rp->cq,
	    .recv_cq = rp->cq,
	    .qp_type = type,
	    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(rp->pd, &ia);
	CHECK_PTR(qp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = pkey_index, .port_num = 1};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (type == IBV_QPT_UD) {
		a.qkey = 0x11111111;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				    (type == IBV_QPT_RC ? IBV_ACCESS_REMOTE_READ : 0);
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	CHECK_OK(ibv_modify_qp(qp, &a, mask));
	return qp;
}

void swvt_rawpeer_connect(struct swvt_rawpeer *rp, struct ibv_qp *qp, enum ibv_qp_type type,
			  bool rts)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
				.path_mtu = IBV_MTU_1024,
				.dest_qp_num = swvt_rawpeer_qpn(rp),
				.max_dest_rd_atomic = 1,
				.min_rnr_timer = 1};
	int mask = IBV_QP_STATE;
	if (type != IBV_QPT_UD) {
		swvt_local_ah_attr(rp->ctx, &a.ah_attr);
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	}
	if (type == IBV_QPT_RC)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK_OK(ibv_modify_qp(qp, &a, mask));
	if (!rts)
		return;
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTS, .max_rd_atomic = 1};
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (type == IBV_QPT_RC)
		mask |=
		    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	CHECK_OK(ibv_modify_qp(qp, &r, mask));
}

size_t swvt_rawpeer_build(struct ibv_qp *qp, struct swv_pkt *p, const void *payload, uint8_t *d)
{
	CHECK(p->paylen <= SWVT_RAWPEER_MAXPAY);
	p->dqpn = qp->qp_num;
	size_t h = swv_pkt_build_hdr(d, p);
	CHECK(h > 0);
	if (p->paylen)
		memcpy(d + h, payload, p->paylen);
	return h;
}

void swvt_rawpeer_sendto(struct swvt_rawpeer *rp, struct ibv_qp *qp, const uint8_t *d, size_t n)
{
	struct sockaddr_in to = {.sin_family = AF_INET,
				 .sin_addr = rp->addr,
				 .sin_port = htons(swv_qpn_port(qp->qp_num))};
	CHECK_EQ(sendto(rp->fd, d, n, 0, (struct sockaddr *)&to, sizeof(to)), (ssize_t)n);
}

size_t swvt_rawpeer_recv(struct swvt_rawpeer *rp, uint8_t *d, size_t size)
{
	ssize_t n = recv(rp->fd, d, size, 0);
	CHECK(n > 0);
	return (size_t)n;
}

struct ibv_wc swvt_rawpeer_wait_wc(struct swvt_rawpeer *rp)
{
	struct ibv_wc wc;
	uint64_t until = swv_now_ns() + WAIT_NS;
	int n;
	while ((n = ibv_poll_cq(rp->cq, 1, &wc)) == 0) {
		CHECK(swv_now_ns() < until);
		usleep(100);
	}
	CHECK_EQ(n, 1);
	return wc;
}

void swvt_rawpeer_wait_buf(struct swvt_rawpeer *rp, const void *want, size_t n)
{
	uint64_t until = swv_now_ns() + WAIT_NS;
	while (memcmp(rp->buf, want, n)) {
		CHECK(swv_now_ns() < until);
		usleep(100);
	}
}

struct swv_pkt swvt_rawpeer_write_only(const struct swvt_rawpeer *rp, enum ibv_qp_type type,
				       uint32_t len)
{
	return (struct swv_pkt){.opcode = (type == IBV_QPT_RC ? SWV_OP_RC : SWV_OP_UC) |
					  SWV_OP_WRITE_ONLY,
				.ackreq = true,
				.psn = 0,
				.reth_va = (uintptr_t)rp->buf,
				.reth_rkey = rp->mr->rkey,
				.reth_len = len,
				.paylen = len};
}

struct ibv_qp *swvt_rawpeer_ud_receiver(struct swvt_rawpeer *rp, uint16_t pkey_index)
{
	struct ibv_qp *qp = swvt_rawpeer_qp(rp, IBV_QPT_UD, pkey_index);
	swvt_rawpeer_connect(rp, qp, IBV_QPT_UD, true);
	struct ibv_sge sge = {(uintptr_t)rp->buf, 256, rp->mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *bw;
	CHECK_OK(ibv_post_recv(qp, &rw, &bw));
	return qp;
}

struct swv_pkt swvt_rawpeer_ud_send_only(const struct swvt_rawpeer *rp, uint32_t len)
{
	return (struct swv_pkt){.opcode = SWV_OP_UD | SWV_OP_SEND_ONLY,
				.deth_qkey = 0x11111111,
				.deth_sqpn = swvt_rawpeer_qpn(rp),
				.paylen = len};
}

void swvt_rawpeer_expect_ud_recv(struct swvt_rawpeer *rp, const void *data, uint32_t len)
{
	struct ibv_wc wc = swvt_rawpeer_wait_wc(rp);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 7);
	CHECK_EQ(wc.byte_len, 40 + len);
	CHECK(!memcmp(rp->buf + 40, data, len));
}

void swvt_rawpeer_check_ack(const struct swv_pkt *ack, uint32_t psn, uint32_t msn)
{
	CHECK_EQ(ack->opcode, SWV_OP_RC | SWV_OP_ACK);
	CHECK_EQ(ack->aeth_syndrome & 0xe0, 0); /* an ACK (any credit count), not a NAK */
	CHECK_EQ(ack->psn, psn);
	CHECK_EQ(ack->aeth_msn, msn);
}

void swvt_rawpeer_post(struct swvt_rawpeer *rp, struct ibv_qp *qp, enum ibv_wr_opcode op,
		       uint64_t wr_id, uint64_t add)
{
	struct ibv_sge sge = {(uintptr_t)rp->buf, 8, rp->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = 0x10000;
		wr.wr.atomic.rkey = 0x1234;
		wr.wr.atomic.compare_add = add;
	} else {
		wr.wr.rdma.remote_addr = 0x10000;
		wr.wr.rdma.rkey = 0x1234;
	}
	CHECK_OK(ibv_post_send(qp, &wr, &bad));
}
