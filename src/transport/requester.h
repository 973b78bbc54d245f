/*
 * Requester and completer (rxe's req/comp): turn send WQEs into packets, track PSNs,
 * consume ACK/NAK/read responses, retire WQEs, retransmit. Owner: requester.
 * All functions are called with qp->lock held.
 *
 * Send queue model. sq.head is the oldest incomplete WQE, sq.tail the next free slot.
 * WQEs [head, started) have PSNs assigned (first_psn .. last_psn, assigned once, when a
 * WQE is first transmitted; a retransmission reuses them). The transmit cursor is
 * (cur, cur_pkt): every packet before it has been sent at least once since the last
 * rewind. A timeout, a lost READ/atomic response or a tail-loss probe rewinds the
 * cursor to head (go-back-N; packets of the head WQE already acknowledged are skipped);
 * a sequence NAK inside a SEND/WRITE resends only the NAKed packet (selective repeat).
 *
 * retry_cnt 0-7 is that many transport retries (7 included, as on hardware HCAs);
 * only rnr_retry = 7 means infinite, as the IB specification says (docs/responder.md,
 * "Retry rules").
 */
#ifndef SWV_TRANSPORT_REQUESTER_H
#define SWV_TRANSPORT_REQUESTER_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "core/completion.h"
#include "transport/flowctl.h"

struct swv_qp;
struct swv_pkt;
struct swv_send_wqe;

enum swv_wqe_state {
	SWV_WQE_POSTED = 0, /* no PSN yet */
	SWV_WQE_STARTED,    /* PSNs assigned, some or all packets sent */
	SWV_WQE_ERROR,	    /* failed locally while building a packet: completes with
			     * wqe->status once every earlier WQE completed */
	SWV_WQE_LOCAL_DONE, /* a local operation (BIND_MW, LOCAL_INV) executed: completes
			     * once every earlier WQE completed */
};

/* PSNs in flight. rxe allows 128; over UDP a deeper pipe rides out the moments the
 * receiving progress thread is not scheduled (SEND/WRITE bandwidth +30-50% on a busy
 * 2-CPU machine, docs/performance.md). compute_window still caps it by the socket
 * buffer. READs keep rxe's 128 (SWV_READ_WINDOW): nothing paces their responses, and a
 * lost one makes the responder replay up to that many, so READ pacing and READ retry
 * chunks use the smaller window. */
#define SWV_MAX_UNACKED_PSNS 512
#define SWV_READ_WINDOW      128
#define SWV_CWND_MIN         16
/* Recovery kinds for the timing statistics (swv_req_state.rec_kind), weakest first:
 * nothing, a sequence NAK or SACK map acted on, a tail-loss probe, an ACK timeout. */
enum { SWV_REC_NONE, SWV_REC_NAK, SWV_REC_PROBE, SWV_REC_TIMEOUT, SWV_REC_KINDS };

/* ACK timeouts in a row without progress that packets unread on the peer's intra-host
 * ring may excuse (swv_req_timer): a receiver not scheduled for that long, or one whose
 * death cannot be seen from here (another PID namespace), is then timed out as usual. */
#define SWV_BACKLOG_MAX_WAITS 64

/* Tail-loss probe delay bounds (swv_req_probe_ns). */
#define SWV_PROBE_MIN_NS     1000000ull
#define SWV_PROBE_MAX_NS     64000000ull /* without an ACK timeout (timeout 0) */
#define SWV_PROBE_SEL_MIN_NS 250000ull	 /* a one-packet probe (SEND/WRITE head) */
#define SWV_MAX_PKT_PER_ACK  64  /* AckReq at least this often */
/* A fallback to go-back-N (the peer kept nothing past a gap, completer.c) makes the next
 * this many sequence NAKs and probes go back N at once; then selective repeat is tried
 * again, in case the peer had only lost what followed that once. */
#define SWV_SR_GBN_AFTER_FALLBACK 16
#define SWV_RD_SEEN		  0x80000000u /* rd_seen: the slot holds a placed response's PSN */
/* A UD datagram whose destination the link has refused for this long completes as sent
 * (dropped), as an unreliable datagram service drops at a full socket buffer. Long
 * enough that only a stopped receiver reaches it: 10 ms, the first value, was reached by
 * receivers merely waiting for a core on a loaded 2-CPU machine, and programs that count
 * their UD receives (ib_send_bw -c UD) then waited for ever. */
#define SWV_UD_REFUSED_DROP_NS 1000000000ull

struct swv_req_state {
	uint32_t next_psn;     /* PSN assigned to the next WQE started for the first time */
	uint32_t una_psn;      /* oldest unacknowledged PSN */
	uint32_t sent_psn;     /* one past the highest PSN sent (incl. READ response PSNs) */
	uint32_t cur;          /* SQ index of the WQE being transmitted */
	uint32_t cur_pkt;      /* packets of 'cur' already sent */
	uint32_t started;      /* SQ index: WQEs before it have PSNs */
	uint32_t rd_atomic_outstanding; /* READ/atomic WQEs in [head, cur) */
	uint32_t window;       /* PSNs the peer's socket buffer holds: the most in flight */
	/* PSNs allowed in flight now (SWV_CWND_MIN .. window): halved at each loss, grown
	 * by half the PSNs each acknowledgement retires, so that under loss a go-back-N
	 * resends a window that fits the path, not the whole buffer (completer.c) */
	uint32_t cwnd;
	uint32_t cwnd_una;     /* una_psn when cwnd last grew */
	uint8_t retry_left, rnr_left;
	uint64_t rnr_until;    /* ns; nonzero while waiting after an RNR NAK */
	uint64_t ack_deadline; /* ns; local ACK timeout, 0 = not armed */
	uint64_t xmit_retry_at; /* ns; the socket was full, try again then */
	uint32_t pkts_since_ackreq;
	/* read response placement */
	uint32_t read_off;     /* bytes of the head READ placed so far */
	/* ns of the last implied-NAK retry (a lost READ/atomic response), 0 after
	 * progress: the echoes of one loss must not spend more retries (completer.c) */
	uint64_t implied_retry_at;
	uint32_t implied_echoes; /* responses still to be taken as its echoes */
	/* The recovery round under way (completer.c): a charged retry from una_psn ==
	 * round_una; later evidence of loss for a PSN below round_hi (sent by then, or by
	 * a tail-loss probe since) is the same loss again and spends no retry. Ended by
	 * progress; an ACK timeout starts the next one. */
	bool round_open;
	uint32_t round_una, round_hi;
	/* Round trip: one PSN timed at a time, from its first transmission to the ACK
	 * that covers it; a retry in between voids the sample (which copy was answered?) */
	uint32_t rtt_psn;
	uint64_t rtt_at;        /* ns the timed PSN left, 0 = none timed */
	uint64_t srtt_ns;       /* smoothed round trip, 0 = not measured yet */
	/* Tail-loss probe (ns, 0 = not armed): nothing acknowledged for a few round trips
	 * while PSNs are outstanding -- the last packets or their ACK were lost and no
	 * later packet will make the responder NAK. A go-back-N that spends no retry;
	 * armed again after each probe or retry with a doubled delay, reset by progress
	 * (completer.c). */
	uint64_t probe_at;
	uint8_t probe_backoff;  /* probes and retries since the last progress (capped) */	/* The responder sends one sequence NAK per gap and one RNR NAK per refusal, so
	 * a second one for the same PSN is a copy (network duplicate or late): it must
	 * not start another go-back-N nor spend another retry. */
	uint32_t seq_nak_psn;  /* PSN of the last sequence NAK acted on */
	uint64_t seq_nak_at;   /* ns, when: the responder NAKs a PSN again only after a
				* resend, a round trip later; sooner it is a copy */
	bool seq_nak_valid;
	uint32_t rnr_psn;      /* PSN of the RNR NAK being waited out (rnr_until) */
	/* Selective repeat (completer.c): a sequence NAK for a PSN of a SEND/WRITE resends
	 * that packet only, with AckReq, and the cursor goes on. The answer tells whether
	 * the responder kept what followed (a reorder buffer): an ACK for just sr_psn while
	 * later PSNs were sent before it says it did not, and the requester goes back N
	 * from there. A tail-loss probe of a SEND/WRITE head resends una_psn the same way. */
	bool sr_pending;	/* sr_psn still to be resent by swv_req_run */
	bool sr_active;		/* resent; its answer not seen yet */
	bool sr_probe;		/* resent by a tail-loss probe, not for a NAK */
	uint32_t sr_psn;	/* the PSN resent */
	uint32_t sr_hi;		/* sent_psn at the NAK: PSNs below it left before the resend */
	uint8_t sr_gbn_left;	/* after a fallback: sequence NAKs still to go back N for */
	/* Selective repeat for READ responses (completer.c): a response is placed where it
	 * belongs, in any READ in flight, and its PSN recorded in slot psn mod
	 * SWV_MAX_UNACKED_PSNS (psn | SWV_RD_SEEN; cleared when the READ completes). A gap
	 * re-requests only the missing PSNs, and only of READs the responder is known to
	 * have executed: those before rd_hi, one past the highest PSN a response or ACK
	 * answered (it executes in PSN order). PSNs below rd_rereq_psn were asked for again
	 * already (or are being asked for by the cursor). */
	uint32_t rd_seen[SWV_MAX_UNACKED_PSNS];
	uint32_t rd_hi;
	bool rd_hi_valid;
	uint32_t rd_rereq_psn;
	bool rd_far;		/* responses too far past una_psn to record were dropped */
	/* Selective ACK (completer.c, docs/wire.md): the holes a sequence NAK's SACK map
	 * names, queued for swv_req_run to resend (sack_q[0..sack_q_n), PSNs); slot psn
	 * mod SWV_MAX_UNACKED_PSNS remembers when psn was last resent that way (sack_tag =
	 * psn | SWV_RD_SEEN, sack_us = microseconds), so that each hole goes out once per
	 * hold-off however many maps name it. */
	uint32_t sack_q[SWV_MAX_UNACKED_PSNS];
	uint32_t sack_q_n;
	uint32_t sack_tag[SWV_MAX_UNACKED_PSNS];
	uint32_t sack_us[SWV_MAX_UNACKED_PSNS];
	bool sqd_event_pending; /* SQD entered with EN_SQD_ASYNC_NOTIFY: raise SQ_DRAINED */
	struct swv_fc_tx fc;    /* UC: credit from the peer (transport/flowctl.h) */
	/* UD: the destination (IPv4 << 16 | port) the link has refused (EAGAIN) since
	 * ud_refused_since (ns, 0 = none), with no datagram to it accepted in between;
	 * past SWV_UD_REFUSED_DROP_NS its datagrams are dropped (requester.c) */
	uint64_t ud_refused_since, ud_refused_dst;
	/* statistics (for tests and swverbs-info) */
	uint64_t n_retries, n_timeouts, n_seq_naks, n_rnr_naks, n_pkts, n_dup_resp, n_probes;
	uint64_t n_sel_resends, n_sr_fallbacks, n_read_rereqs;
	uint64_t n_sack_naks;	 /* sequence NAKs with a SACK map acted on */
	uint64_t n_holes_resent; /* packets resent because a SACK map named them missing */
	uint64_t n_round_free;	 /* loss evidence acted on inside a round, no retry spent */
	uint64_t n_placed; /* WRITE payloads placed directly (link/shm.h, swv_shm_direct) */
	uint64_t n_placed_reads; /* READs read directly and completed at once (requester.c) */
	bool read_placed; /* send_packet: the READ it sent was placed (swv_req_run completes it) */
	uint64_t n_ud_refused_drops; /* UD datagrams completed unsent (ud_refused_since) */
	/* ACK timeouts excused by packets unread on the peer's ring (swv_req_timer):
	 * backlog_mark is the ring position they must be taken to (link/shm.h, 0: not
	 * asked since the last progress or retry), backlog_waits the excuses since the
	 * last progress (at most SWV_BACKLOG_MAX_WAITS). */
	uint64_t backlog_mark;
	uint32_t backlog_waits;
	/* Where the time goes under loss (statistics, the SWVERBS_LOG=3 summary at destroy):
	 * each interval from one progress to the next while busy, by the strongest
	 * recovery taken in it (SWV_REC_*); rec_since is when it began, 0 = idle. */
	uint64_t rec_since;
	uint8_t rec_kind;
	uint64_t n_rec[SWV_REC_KINDS], rec_ns[SWV_REC_KINDS], rec_max_ns[SWV_REC_KINDS];
};

/* What a send WR of opcode op (enum ibv_wr_opcode) completes as, and which counter
 * slot counts it (docs/counters.md): the one mapping for every path that completes or
 * flushes send WRs (the requester, held triggered WRs). */
enum ibv_wc_opcode swv_req_wc_opcode(uint32_t op);
enum swv_cntr_slot swv_req_cntr_slot(uint32_t op);

/* Transmit what the window allows. */
void swv_req_run(struct swv_qp *qp);
/* After new WQEs were posted: swv_req_run from the posting thread, unless the pipe is
 * already full enough that an ACK is on its way (then the progress thread sends the new
 * work when it arrives, in batches; see requester.c). */
void swv_req_post(struct swv_qp *qp);
/* Handle an ACK / NAK / READ response / ATOMIC ACK. */
void swv_comp_rx(struct swv_qp *qp, const struct swv_pkt *pkt);
/* Local ACK timeout or RNR wait expiry. */
void swv_req_timer(struct swv_qp *qp, uint64_t now_ns);
/* Reset requester state (RESET, RTR->RTS with a new sq_psn). */
void swv_req_reset(struct swv_qp *qp);
/* Complete the SQ head WQE with this status through swv_complete (removes it from
 * the SQ). Returns 0 or ENOSPC (CQ overflow: the caller decides what follows). */
int swv_req_complete_head(struct swv_qp *qp, int status);
/* Re-arm qp->timer_deadline from the requester's deadlines. */
void swv_req_update_timer(struct swv_qp *qp);
/* Local ACK timeout of the QP's timeout attribute: 4.096 us x 2^timeout; 0 = none. */
uint64_t swv_ack_timeout_ns(const struct swv_qp *qp);
/* When a silence becomes worth a tail-loss probe: 4 x the smoothed round trip, at
 * least 1 ms (a loaded 2-core host delays ACKs by that much without losing them), at
 * most the ACK timeout / 4 (64 ms with no ACK timeout; also before a round trip was
 * measured); doubled for each probe or retry since the last progress. 0: no probe (an
 * ACK timeout under 4 ms retries sooner). Probes spend no retry, so they also run with
 * timeout 0, where a lost datagram would otherwise hang a live QP. With a SEND/WRITE at
 * the head the probe is one packet (completer.c), so 2 x the round trip, at least
 * SWV_PROBE_SEL_MIN_NS, is worth it. */
uint64_t swv_req_probe_ns(const struct swv_qp *qp);
/* Whether the responder executed READ w (a response or ACK for one of its PSNs or a
 * later one arrived), so that a request for part of it is a retry it replays. */
bool swv_req_read_executed(const struct swv_qp *qp, const struct swv_send_wqe *w);
/* Ask again for the npkts response packets of READ w from PSN psn (selective repeat,
 * completer.c): one READ request for that range. 0, or EAGAIN (the link refused it:
 * as lost). */
int swv_req_read_again(struct swv_qp *qp, struct swv_send_wqe *w, uint32_t psn, uint32_t npkts);
/* The PSN of the next packet the transmit cursor sends (PSNs before it went out at
 * least once since the last rewind). */
uint32_t swv_req_cursor_psn(const struct swv_qp *qp);
/* The PD w's local SGEs belong to: the QP's, but the tag-matching SRQ's for the
 * device's rendezvous READ, whose SGEs are a tagged buffer's (transport/tm.h). */
struct swv_pd *swv_req_wqe_pd(const struct swv_qp *qp, const struct swv_send_wqe *w);
/* Packets a WQE takes on the wire (READ: one PSN per response packet). */
uint32_t swv_req_npkts(uint32_t opcode, uint32_t length, uint32_t mtu);

#endif
