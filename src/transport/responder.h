/*
 * Responder (rxe's resp): checks PSN, executes SEND / RDMA WRITE / RDMA READ / atomics
 * against receive WQEs and memory, acknowledges, and keeps read/atomic replay state
 * for duplicates. Owner: responder. Called with qp->lock held.
 *
 * The QP module embeds struct swv_resp_state in struct swv_qp, calls swv_resp_reset()
 * when the QP enters RESET and on INIT->RTR (after attr.rq_psn is set), and hands every
 * validated request packet (CRC, length, opcode parsed) to swv_resp_rx()/swv_resp_rx_from().
 * All memory access goes through core/mr.h; every completion through swv_complete().
 */
#ifndef SWV_TRANSPORT_RESPONDER_H
#define SWV_TRANSPORT_RESPONDER_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/limits.h"
#include "transport/flowctl.h"

struct swv_qp;
struct swv_pkt;
struct swv_recv_wqe;

/* Saved READ/atomic request for replay of duplicates (one slot of the ring). */
struct swv_resp_res {
	bool valid, is_atomic;
	bool counted;                 /* REMOTE_* completion already counted (exactly once) */
	bool placed;                  /* READ read by the requester itself: answered without data */
	uint32_t msn;                 /* the MSN its responses carry (held ones leave later) */
	uint32_t first_psn, last_psn; /* READ: one PSN per response packet */
	uint64_t va;                  /* original RETH / AtomicETH VA */
	uint32_t rkey, len;
	uint64_t atomic_orig;         /* value returned the first time (never re-executed) */
	uint8_t atomic_opcode;
	uint64_t atomic_swap_add, atomic_cmp;
};

/* Responder statistics, for swverbs-info and tests (written under qp->lock). */
struct swv_resp_stats {
	uint64_t executed;       /* request packets executed */
	uint64_t duplicates;     /* duplicate request packets seen */
	uint64_t read_replays;   /* duplicate READs answered from a saved resource */
	uint64_t atomic_replays; /* duplicate atomics answered with the saved value */
	uint64_t seq_naks;       /* NAK 0x60 sent */
	uint64_t rnr_naks;       /* RNR NAKs sent */
	uint64_t err_naks;       /* NAK 0x61..0x63 sent */
	uint64_t dropped;        /* silently dropped (gap, malformed, UC/UD errors, no resource) */
	/* RDMA WRITE/READ/atomic refused by the memory checks (bad R_Key, wrong PD, out of
	 * bounds, missing MR right, or memory that faulted): NAKed on RC, dropped on UC --
	 * where a peer guessing R_Keys shows */
	uint64_t remote_refused;
	uint64_t remote_faults; /* of those, the accesses that faulted (core/memsafe.h) */
	uint64_t rob_kept;	/* RC: out-of-order SEND/WRITE packets kept for later */
	uint64_t rob_dups;	/* ... copies of a packet already kept (dropped) */
	uint64_t rob_full;	/* ... too far ahead of epsn to keep (dropped) */
	uint64_t rob_drained;	/* kept packets executed once the gap before them filled */
	uint64_t placed;	/* WRITEs whose bytes the sender placed (swv_pkt.placed) */
	uint64_t sack_naks;	/* sequence NAKs sent with a SACK map (docs/wire.md) */
	uint64_t sack_acks;	/* ACKs sent with one (an update between NAKs) */
	uint64_t placed_reads;	/* READs whose bytes the requester read itself (swv_pkt.placed) */
	uint64_t tx_held;	/* times the link refused a response and the rest was held */
};

/* RC reorder buffer (docs/responder.md, "Reorder buffer"): SEND/WRITE request packets
 * with PSN in (epsn, epsn + SWV_ROB_SLOTS) are kept, each in one allocation (parsed
 * header + payload copy), in the slot psn % SWV_ROB_SLOTS -- a PSN of that range has a
 * slot of its own. Allocated at the first gap, freed when drained, at RESET and at
 * destroy, so a QP without a gap costs one NULL pointer. SWV_ROB_SLOTS covers the
 * requester's largest window (SWV_MAX_UNACKED_PSNS). */
#define SWV_ROB_SLOTS 512u
struct swv_rob_ent; /* responder.c */
struct swv_rob {
	uint32_t count;	 /* slots in use */
	uint32_t hi_psn; /* highest PSN kept since the buffer was allocated */
	struct swv_rob_ent *slot[SWV_ROB_SLOTS];
};

struct swv_resp_state {
	uint32_t epsn;        /* expected PSN */
	uint32_t msn;         /* 24-bit message sequence number */
	bool nak_sent;        /* sequence (or RNR) NAK sent: drop later PSNs until epsn arrives */
	bool seq_nak;         /* ... and it was a sequence NAK */
	uint32_t nak_first_psn; /* the PSN that drew that NAK (rc_rx: when to NAK again) */
	/* RC: the peer's requests carry SWV_BTH_SACK (it reads SACK maps): sequence NAKs
	 * carry the reorder buffer's map (docs/wire.md, "Selective ACK"). Never for a
	 * peer that did not say so (rxe). */
	bool peer_sack;
	bool sack_dirty;      /* a hole opened in the reorder buffer since the last SACK map */
	bool drop_msg;        /* UC: discard packets until the next FIRST/ONLY */
	/* in-progress inbound message */
	uint8_t last_opcode;  /* opcode of the last executed packet; 0xff = none */
	uint32_t cur;         /* 0, or SWV_OPF_SEND / _WRITE while a multi-packet message runs */
	uint64_t msg_off;     /* bytes placed so far */
	uint64_t write_va;    /* RDMA WRITE target of the current message */
	uint32_t write_rkey, write_len;
	/* Receive WQE held for the current SEND (or WRITE_WITH_IMM LAST): it stays at the
	 * head of qp->rq until completed, so post_recv never touches it. NULL = none. */
	struct swv_recv_wqe *rwqe;
	bool have_rwqe;
	uint64_t rwqe_wr_id;
	/* replay ring, sized by max_dest_rd_atomic rounded up to a power of two */
	struct swv_resp_res res[SWV_MAX_RD_ATOMIC];
	uint32_t res_next;
	struct swv_resp_stats stats;
	struct swv_rob *rob; /* RC reorder buffer, NULL while there is no gap */
	struct swv_fc_rx fc; /* UC: credit granted to the peer (transport/flowctl.h) */
	/* ACK coalescing (RC): while ack_defer is set (the progress thread is handing
	 * over a batch of received packets), the plain ACK an AckReq asks for is only
	 * recorded; swv_resp_flush_ack sends one ACK for the latest such PSN at the end
	 * of the batch (ACKs are cumulative). Any other response sends it first. */
	bool ack_defer;
	bool ack_pending;
	uint32_t ack_psn;
	/* A receive WQE completed during the batch being handed over: its ACK may then
	 * stay pending after the batch (transport/receive.c, swv_qp_rx_batch). */
	bool recv_done;
	uint64_t acks_coalesced; /* ACKs saved by coalescing (statistics) */
	/* Held responses (RC, docs/responder.md "Held responses"): the link refused a READ or
	 * atomic response (a full ring or socket buffer, EAGAIN). Those from tx_psn on are
	 * owed, not lost: dropping them made the requester see a gap and spend retry_cnt on a
	 * live peer. Until they leave, no response of this QP overtakes them: READ and
	 * atomic responses leave from their resources when tx_resume runs (at tx_retry_at
	 * or when the next packet of the QP arrives), and the latest plain ACK or sequence /
	 * RNR NAK decided meanwhile is kept (tx_ack_*) and sent after them. tx_retry_at is 0
	 * when nothing is held. Written under qp->lock. */
	uint64_t tx_retry_at;
	uint32_t tx_psn;
	uint32_t tx_backoff; /* doublings of the retry delay */
	bool tx_resuming;    /* tx_resume is sending: swv_resp_send lets it through */
	uint32_t tx_msn;     /* ... with this MSN (the resource's) */
	bool tx_ack;
	uint8_t tx_ack_syndrome;
	uint32_t tx_ack_psn;
};

/* Handle one request packet (RC/UC/UD). */
void swv_resp_rx(struct swv_qp *qp, const struct swv_pkt *pkt);
/* Same, with the datagram's source address: UD uses it for the GRH written in front of
 * the payload and for wc.slid. src may be NULL (GRH then carries no source). */
void swv_resp_rx_from(struct swv_qp *qp, const struct swv_pkt *pkt, const struct sockaddr_in *src);
/* Send the ACK deferred by ack_defer, if any (qp->lock held). */
void swv_resp_flush_ack(struct swv_qp *qp);
/* Send the held responses (tx_retry_at), as many as the link takes now (qp->lock held). */
void swv_resp_tx_resume(struct swv_qp *qp);
/* Reset responder state (RESET, INIT->RTR with a new rq_psn: epsn = attr.rq_psn). */
void swv_resp_reset(struct swv_qp *qp);
/* Free what the responder allocated (the reorder buffer); QP destroy. */
void swv_resp_release(struct swv_qp *qp);
/* QP entering ERR with an SRQ: complete the WQE it took from the SRQ and still holds
 * (a message in progress) with IBV_WC_WR_FLUSH_ERR on this QP. Returns 0 or ENOSPC
 * (receive CQ overflow). The SRQ's other WQEs are not touched. */
int swv_resp_flush_srq(struct swv_qp *qp);

#endif
