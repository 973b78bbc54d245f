/*
 * In-process setup for unit tests, the one-process counterpart of harness.h: the first
 * device, a zeroed registered buffer, and RC QPs of one context connected to each other
 * through the port's own address (LID, or GID on an Ethernet link layer port), for real
 * traffic without a second process. Public verbs API only; any failure fails the test.
 */
#ifndef SWV_TEST_INPROC_H
#define SWV_TEST_INPROC_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

/* The first device of ibv_get_device_list, opened. */
struct ibv_context *swvt_open_first_device(void);

/* The first device, opened, and a protection domain of it. */
struct swvt_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
};
struct swvt_dev swvt_dev_open(void);
/* Deallocate the PD, close the device. */
void swvt_dev_close(struct swvt_dev *d);

/* A page-aligned, zeroed buffer of len bytes registered with access; mr->addr is the
 * buffer. swvt_dereg_buf deregisters and frees it. */
struct ibv_mr *swvt_reg_buf(struct ibv_pd *pd, size_t len, int access);
void swvt_dereg_buf(struct ibv_mr *mr);

/* An RC QP of ctx in pd, both queues on cq, made by ibv_create_qp_ex with cap and,
 * unless send_ops is 0, these extended-QP operations (ibv_qp_to_qp_ex then works);
 * left in RESET. */
struct ibv_qp *swvt_rc_qp_ex(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq,
			     struct ibv_qp_cap cap, uint64_t send_ops);
/* The next completion of cq; fails the test after 10^9 empty polls. */
struct ibv_wc swvt_poll_one(struct ibv_cq *cq);

/* RESET -> INIT: port 1, local write and every remote access. */
void swvt_pair_to_init(struct ibv_qp *qp);
/* INIT -> RTR towards dest_qpn on this context: path MTU 1024, RQ PSN 0, 4 incoming
 * READs/atomics, RNR timer 1. */
void swvt_pair_to_rtr(struct ibv_qp *qp, uint32_t dest_qpn);
/* The address vector of port 1 of ctx itself (LID; GRH with GID 0 on an Ethernet
 * port): how a QP reaches another QP of this host. */
void swvt_local_ah_attr(struct ibv_context *ctx, struct ibv_ah_attr *ah);
/* RTR -> RTS: SQ PSN 0, retry and RNR retry 7, 4 outgoing READs/atomics; timeout 0
 * means no ACK timer, so WRs to a silent peer stay outstanding. */
void swvt_pair_to_rts(struct ibv_qp *qp, uint8_t timeout);
/* a and b, both in INIT, to RTS addressed to each other (timeout 14). */
void swvt_pair_connect(struct ibv_qp *a, struct ibv_qp *b);

#endif
