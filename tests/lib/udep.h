/*
 * A UD endpoint for multi-process tests: a UD QP in RTS with a CQ of its own (send and
 * receive) and a registered receive buffer of equal slots, slot i for the receive WR
 * with wr_id i.
 */
#ifndef SWV_TEST_UDEP_H
#define SWV_TEST_UDEP_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

struct swvt_udep {
	struct ibv_cq *cq; /* 4 x slots entries */
	struct ibv_qp *qp; /* max_send_wr = max_recv_wr = slots, one SGE */
	uint8_t *buf;	   /* slots x slot bytes, zeroed */
	struct ibv_mr *mr; /* buf, local write */
	unsigned slots;
	size_t slot;
};

/* Creates the endpoint on port 1 with Q_Key qkey; every failure ends the test. */
void swvt_udep_open(struct swvt_udep *e, struct ibv_context *ctx, struct ibv_pd *pd, unsigned slots,
		    size_t slot, uint32_t qkey);
void swvt_udep_close(struct swvt_udep *e);
/* Posts receive WRs 0..n-1 (n <= slots), each a whole slot first filled with 0xee. */
void swvt_udep_post_recvs(struct swvt_udep *e, unsigned n);

#endif
