/*
 * Tag matching between the responder and the requester of one QP (responder_tm.c):
 * the rendezvous READ and the FIN the device posts on a QP of a TM SRQ complete here
 * instead of on the send CQ (core/qp.h, struct swv_send_wqe.tm_op).
 */
#ifndef SWV_TRANSPORT_TM_H
#define SWV_TRANSPORT_TM_H

struct swv_qp;
struct swv_send_wqe;

#include <stdint.h>

/* qp->lock held; w has just left the send queue with status. Returns 0 or ENOSPC
 * (the SRQ's CQ overflowed). */
int swv_resp_tm_wqe_done(struct swv_qp *qp, const struct swv_send_wqe *w, int status);

/* A cleared device WQE of kind tm_op at the send queue's tail, and its posting (it
 * holds one of the QP's SWV_TM_SQ_EXTRA slots until it completes). */
struct swv_send_wqe *swv_tm_wqe_new(struct swv_qp *qp, uint8_t tm_op, uint32_t handle);
void swv_tm_wqe_post(struct swv_qp *qp);

#endif
