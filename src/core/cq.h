/*
 * Completion queues and completion channels. Owner: core.
 * A CQ is a ring of ibv_wc written by producers (progress thread, posting threads)
 * and drained by ibv_poll_cq without system calls.
 */
#ifndef SWV_CORE_CQ_H
#define SWV_CORE_CQ_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct swv_comp_channel {
	struct ibv_comp_channel ibch; /* ibch.fd = read end of a pipe carrying CQ pointers */
	int wfd;                      /* write end */
	_Atomic unsigned users;       /* CQs bound to it: destroy is EBUSY while > 0 */
};

struct swv_cq {
	struct ibv_cq_ex ibcq; /* struct ibv_cq is its prefix; ex ops set by create_cq_ex */
	pthread_spinlock_t lock; /* protects ring, head, tail, notify, overflow */
	struct ibv_wc *ring;
	uint32_t size;     /* ring slots; capacity = ibcq.cqe */
	uint32_t head;     /* next to poll */
	uint32_t tail;     /* next to fill */
	int notify;        /* 0, or armed: 1 = any completion, 2 = solicited only */
	bool overflow;
	struct swv_comp_channel *channel;
	_Atomic unsigned users; /* QPs/SRQs referencing it: destroy is EBUSY while > 0 */
};

static inline struct swv_cq *to_swv_cq(struct ibv_cq *cq)
{
	return (struct swv_cq *)cq;
}

/* Producer: append one completion; fires the channel if armed. Returns 0, or ENOSPC
 * when the CQ is full (the CQE is lost; the caller must move the QP to ERR and raise
 * IBV_EVENT_CQ_ERR). */
int swv_cq_push(struct swv_cq *cq, const struct ibv_wc *wc, bool solicited);

/* ibv_context_ops entries. */
int swv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int swv_req_notify_cq(struct ibv_cq *cq, int solicited_only);

#endif
