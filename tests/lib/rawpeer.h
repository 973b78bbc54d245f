/*
 * A raw peer for unit tests that craft packets: a plain UDP socket on 127.0.0.1 plays the
 * connected peer of QPs of one context. A QP connected to it (swvt_rawpeer_connect) names
 * the socket's port in its dest QPN, so what the test sends from the socket comes from
 * exactly the address and port the QP accepts, and what the QP sends arrives there. With
 * it: the first device, a PD, a CQ and a 4 KiB registered buffer. Unit tests only: packets
 * are built with the library's internal builder (transport/packet.h).
 */
#ifndef SWV_TEST_RAWPEER_H
#define SWV_TEST_RAWPEER_H

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/packet.h"

#define SWVT_RAWPEER_SLOT   1	/* the peer's QPN is its port << 8 | this */
#define SWVT_RAWPEER_MAXPAY 256 /* payload bytes a crafted packet may carry */

struct swvt_rawpeer {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;   /* 64 entries: send and receive CQ of the QPs made here */
	struct ibv_mr *mr;   /* 4 KiB: local write, remote write and read */
	uint8_t *buf;	     /* mr->addr */
	int fd;		     /* the peer's socket; a receive waits at most 10 s */
	uint16_t port;	     /* its port (host order) */
	struct in_addr addr; /* 127.0.0.1 */
};

/* Open the first device (the caller configures it first), its PD, CQ, buffer, and the
 * peer's socket. */
void swvt_rawpeer_open(struct swvt_rawpeer *rp);
void swvt_rawpeer_close(struct swvt_rawpeer *rp);
/* The QPN the peer's packets come from. */
uint32_t swvt_rawpeer_qpn(const struct swvt_rawpeer *rp);

/* A QP of type (RC, UC or UD) in INIT at pkey_index, max 8 send and receive WRs of one
 * SGE; UD with Q_Key 0x11111111, RC/UC with local and remote write (and RC remote
 * read). */
struct ibv_qp *swvt_rawpeer_qp(struct swvt_rawpeer *rp, enum ibv_qp_type type, uint16_t pkey_index);
/* INIT -> RTR (-> RTS with rts) connected to the peer; PSNs start at 0; RC with
 * timeout 0 (no ACK timer: nothing is retransmitted while a test waits). */
void swvt_rawpeer_connect(struct swvt_rawpeer *rp, struct ibv_qp *qp, enum ibv_qp_type type,
			  bool rts);

/* The headers of p for qp (p->dqpn set to it) and then the payload (p->paylen bytes,
 * at most SWVT_RAWPEER_MAXPAY) into d; returns the header length. The caller adds
 * the trailer and sends the n bytes with swvt_rawpeer_sendto. */
size_t swvt_rawpeer_build(struct ibv_qp *qp, struct swv_pkt *p, const void *payload, uint8_t *d);
void swvt_rawpeer_sendto(struct swvt_rawpeer *rp, struct ibv_qp *qp, const uint8_t *d, size_t n);
/* The next datagram at the peer (fails after 10 s); returns its length. */
size_t swvt_rawpeer_recv(struct swvt_rawpeer *rp, uint8_t *d, size_t size);

/* What both ends of a test scenario share: an RC or UC RDMA WRITE_ONLY of len bytes
 * from the peer into the buffer's start (PSN 0, AckReq); a UD QP in RTS with one
 * receive posted (wr_id 7: the buffer's first 256 bytes) and a UD SEND_ONLY of len
 * bytes from the peer to it (Q_Key 0x11111111), whose completion and bytes (after the
 * 40-byte GRH area) swvt_rawpeer_expect_ud_recv checks; and an ACK of PSN psn with MSN
 * msn. */
struct swv_pkt swvt_rawpeer_write_only(const struct swvt_rawpeer *rp, enum ibv_qp_type type,
				       uint32_t len);
struct ibv_qp *swvt_rawpeer_ud_receiver(struct swvt_rawpeer *rp, uint16_t pkey_index);
struct swv_pkt swvt_rawpeer_ud_send_only(const struct swvt_rawpeer *rp, uint32_t len);
void swvt_rawpeer_expect_ud_recv(struct swvt_rawpeer *rp, const void *data, uint32_t len);
void swvt_rawpeer_check_ack(const struct swv_pkt *ack, uint32_t psn, uint32_t msn);
/* Post to qp a signaled WR of op (SEND, RDMA_READ or an atomic; add: FETCH_ADD's
 * operand) on the buffer's first 8 bytes, to remote address 0x10000, R_Key 0x1234 (the
 * peer answers what it likes). */
void swvt_rawpeer_post(struct swvt_rawpeer *rp, struct ibv_qp *qp, enum ibv_wr_opcode op,
		       uint64_t wr_id, uint64_t add);

/* Exactly one completion on the CQ, within 10 s (polling also drives receive). */
struct ibv_wc swvt_rawpeer_wait_wc(struct swvt_rawpeer *rp);
/* Wait (at most 10 s) until the first n bytes of the buffer equal want. */
void swvt_rawpeer_wait_buf(struct swvt_rawpeer *rp, const void *want, size_t n);

#endif
