/*
 * Two-process test harness (public verbs API only).
 *
 * swvt_run() forks a peer process connected to the caller by a socketpair. Each side
 * opens the device (SWVT_DEVICE names one, else the first), creates a PD, CQ(s), one
 * registered buffer and an RC QP, exchanges {lid, gid, qpn, psn, buffer addr, rkey}
 * over the socketpair and moves its QP RESET -> INIT -> RTR -> RTS with the attributes
 * in struct swvt_opts. Then the parent runs parent_fn and the child child_fn. Any
 * CHECK failure exits that process non-zero; the parent collects the child's status,
 * so a failure on either side fails the test. A watchdog kills a side that hangs.
 *
 * Typical use:
 *	static void server(struct swvt *t, void *arg) { ... swvt_barrier(t); ... }
 *	static void client(struct swvt *t, void *arg) { ... }
 *	int main(void) { struct swvt_opts o; swvt_opts_default(&o);
 *			 return swvt_run(&o, client, server, NULL); }
 */
#ifndef SWV_TEST_HARNESS_H
#define SWV_TEST_HARNESS_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "check.h"

enum swvt_addr_mode {
	SWVT_ADDR_AUTO, /* GID (GRH) on an Ethernet link layer port, LID otherwise */
	SWVT_ADDR_LID,
	SWVT_ADDR_GID,
};

struct swvt_opts {
	const char *dev_name; /* NULL: $SWVT_DEVICE, else the first device */
	const char *child_dev_name; /* the child's device when it differs; NULL = dev_name */
	uint8_t port;         /* 1 */
	enum ibv_qp_type qp_type; /* IBV_QPT_RC */
	enum swvt_addr_mode addr_mode;
	/* QP attributes (RESET->INIT->RTR->RTS) */
	enum ibv_mtu path_mtu;      /* IBV_MTU_1024 */
	uint8_t timeout;            /* 16 (268 ms); 0 = infinite */
	uint8_t retry_cnt;          /* 7 (seven retries: finite) */
	uint8_t rnr_retry;          /* 7 (infinite) */
	uint8_t min_rnr_timer;      /* 1 (0.01 ms) */
	uint8_t max_rd_atomic;      /* 4 */
	uint8_t max_dest_rd_atomic; /* 4 */
	unsigned qp_access;         /* LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC */
	uint32_t psn;               /* initial SQ PSN; 0 = random */
	enum ibv_qp_state stop_at;  /* IBV_QPS_RTS; RESET/INIT/RTR stop earlier (see swvt_connect) */
	/* QP caps */
	uint32_t max_send_wr, max_recv_wr; /* 256, 256 */
	uint32_t max_send_sge, max_recv_sge; /* 4, 4 */
	uint32_t max_inline_data;   /* 0 */
	int sq_sig_all;             /* 0 */
	/* resources */
	size_t buf_size;            /* 1 MiB + 4096: one MR covering the buffer */
	unsigned mr_access;         /* LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC */
	int cqe;                    /* 1024 */
	bool shared_cq;             /* one CQ for send and receive */
	bool comp_channel;          /* CQs bound to a completion channel */
	int watchdog_s;             /* 60: a side still running after this is killed */
	/* UD (qp_type IBV_QPT_UD): the Q_Key set at INIT and told to the peer */
	uint32_t qkey;              /* 0x11111111 */
};

/* What each side tells the other. */
struct swvt_info {
	uint16_t lid;
	uint8_t gid[16];
	uint32_t qpn, psn;
	uint64_t addr; /* buffer address */
	uint32_t rkey;
	uint64_t size;
	uint32_t qkey; /* UD: the QP's Q_Key */
};

struct swvt {
	int role; /* 0 = parent, 1 = child */
	int sock; /* socketpair end */
	pid_t peer_pid; /* parent: the child's pid; child: the parent's */
	bool peer_gone; /* the peer was killed on purpose: skip the final barrier */
	struct swvt_opts opts;

	struct ibv_context *ctx;
	struct ibv_port_attr port_attr;
	struct ibv_pd *pd;
	struct ibv_comp_channel *channel;
	struct ibv_cq *scq, *rcq; /* equal when shared_cq */
	struct ibv_qp *qp;
	struct ibv_qp_init_attr init_attr; /* caps as returned by ibv_create_qp */
	uint8_t *buf;
	struct ibv_mr *mr;

	struct swvt_info local, remote;
	struct ibv_ah *ah; /* UD: address handle to the peer (created by swvt_to_rtr) */
};

typedef void (*swvt_fn)(struct swvt *t, void *arg);

void swvt_opts_default(struct swvt_opts *o);

/* Fork, set up both sides, run the functions, tear down. Returns 0 when both sides
 * succeeded (use as main's return value), 1 otherwise. */
int swvt_run(const struct swvt_opts *o, swvt_fn parent_fn, swvt_fn child_fn, void *arg);

/* QP types: RC (default), UC and UD follow roce-wire.md 6.2: UC moves with the RC
 * attributes minus the RC-only ones (INIT: access flags; RTR: AV, path MTU, dest QPN,
 * RQ PSN; RTS: SQ PSN); UD sets opts.qkey at INIT, only the state at RTR (where the
 * harness also creates t->ah from the peer's LID/GID per opts.addr_mode) and the SQ PSN
 * at RTS. swvt_post_send addresses UD sends to the peer's QPN and Q_Key via t->ah. */

/* Building blocks swvt_run uses; tests that need a non-standard flow may call them
 * from inside their functions (e.g. opts.stop_at = IBV_QPS_INIT, attach something,
 * then swvt_connect()). */
void swvt_setup(struct swvt *t);                 /* device, PD, CQs, MR, QP in RESET */
void swvt_to_init(struct swvt *t);
void swvt_exchange(struct swvt *t);              /* swap struct swvt_info */
void swvt_to_rtr(struct swvt *t);
void swvt_to_rts(struct swvt *t);
void swvt_connect(struct swvt *t);               /* to_rtr + to_rts + barrier */
void swvt_teardown(struct swvt *t);
/* The address vector for the peer, per opts.addr_mode. */
void swvt_fill_ah_attr(struct swvt *t, struct ibv_ah_attr *ah);

/* Out-of-band messages between the two processes (fail the test on timeout/EOF). */
void swvt_send(struct swvt *t, const void *buf, size_t len);
void swvt_recv(struct swvt *t, void *buf, size_t len);
void swvt_send_u64(struct swvt *t, uint64_t v);
uint64_t swvt_recv_u64(struct swvt *t);
void swvt_barrier(struct swvt *t);

/* Poll until n completions arrived or timeout_ms passed; returns how many arrived
 * (never more than n). Fails the test if ibv_poll_cq returns an error. */
int swvt_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms);
/* Poll exactly n completions or fail the test (reporting the caller's line). */
void swvt_poll_n_at(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms,
		    const char *file, int line);
#define swvt_poll_n(cq, wc, n, timeout_ms) swvt_poll_n_at(cq, wc, n, timeout_ms, __FILE__, __LINE__)
/* Expect no completion within ms. */
void swvt_expect_empty(struct ibv_cq *cq, int ms);
/* Wait for a completion-channel event (fails after timeout_ms), acknowledge it and
 * return the CQ it was for. Returns NULL on timeout when 'may_timeout'. */
struct ibv_cq *swvt_wait_cq_event(struct swvt *t, int timeout_ms, bool may_timeout);

/* Post helpers on the harness buffer (lkey = t->mr->lkey). */
void swvt_post_recv(struct swvt *t, uint64_t wr_id, uint64_t off, uint32_t len);
void swvt_post_send(struct swvt *t, uint64_t wr_id, enum ibv_wr_opcode op, uint64_t off,
		    uint32_t len, uint64_t remote_off, unsigned flags);

/* Parent only: kill the child now (SIGKILL) and reap it. */
void swvt_kill_peer(struct swvt *t);

/* Deterministic test pattern. */
void swvt_fill(void *buf, size_t len, uint32_t seed);
/* Returns the first mismatching offset, or (size_t)-1 when buf matches. */
size_t swvt_verify(const void *buf, size_t len, uint32_t seed);

uint64_t swvt_now_ms(void);
const char *swvt_wc_status_str(enum ibv_wc_status s);

#define CHECK_WC(wc, want_status)                                                                  \
	do {                                                                                       \
		if ((wc).status != (want_status)) {                                                \
			fprintf(stderr, "%s:%d: wc status %s (%d), expected %s (wr_id %llu)\n",   \
				__FILE__, __LINE__, swvt_wc_status_str((wc).status), (wc).status,  \
				swvt_wc_status_str(want_status),                                   \
				(unsigned long long)(wc).wr_id);                                   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#endif
