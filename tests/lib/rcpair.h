/*
 * An RC pair of two contexts of this process (two opens of the first device, so two
 * endpoints: traffic between them goes over the port's link as between two processes),
 * each side with its own PD, CQ, registered buffer and QP; the options each test
 * varies are parameters, zero meaning the common choice. Public verbs API only (see
 * rcpair_int.h for what unit tests look at inside); any failure fails the test.
 */
#ifndef SWV_TEST_RCPAIR_H
#define SWV_TEST_RCPAIR_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SWVT_RC_BUF	 65536		/* default buffer length */
#define SWVT_RC_LIMIT_NS 30000000000ull /* what "never" means in the waits */

struct swvt_rc_side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq; /* send and receive CQ of qp */
	struct ibv_mr *mr; /* over buf; a test that deregistered it sets it NULL */
	uint8_t *buf;	   /* page-aligned anonymous mapping, zeroed */
	size_t len;
	struct ibv_qp *qp;	    /* in INIT after swvt_rc_side_open */
	struct ibv_comp_cntr *cntr; /* with swvt_rc_opts.cntr_ops only */
};

struct swvt_rc_opts {
	size_t buf_len;	   /* 0: SWVT_RC_BUF */
	int mr_access;	   /* 0: local write, remote write and remote read */
	int cq_depth;	   /* 0: 256 */
	uint32_t max_wr;   /* send and receive queue depth; 0: 64 */
	int qp_access;	   /* 0: every access (swvt_pair_to_init); else the QP's INIT
			    * access flags are set to these afterwards */
	uint32_t cntr_ops; /* nonzero: a WRS completion counter attached to the QP for
			    * these ops (enum ibv_qp_attach_comp_cntr_op), as cntr */
};

/* How swvt_rc_connect connects a to b. */
struct swvt_rc_conn {
	uint32_t b_rq_psn;	      /* b's expected PSN */
	uint32_t a_sq_psn;	      /* the PSN a sends from */
	uint8_t b_max_dest_rd_atomic; /* b's incoming READ/atomic resources */
	uint8_t a_timeout, a_retry_cnt, a_rnr_retry;
	enum ibv_mtu b_path_mtu; /* b's path MTU; 0: IBV_MTU_1024 (a's) */
};
/* What swvt_pair_connect does (inproc.h). */
#define SWVT_RC_CONN_DEFAULT                                                                       \
	((struct swvt_rc_conn){                                                                    \
	    .b_max_dest_rd_atomic = 4, .a_timeout = 14, .a_retry_cnt = 7, .a_rnr_retry = 7})

/* o NULL: every default. The QP ends in INIT. */
void swvt_rc_side_open(struct swvt_rc_side *s, const struct swvt_rc_opts *o);
void swvt_rc_side_close(struct swvt_rc_side *s);
/* a and b, both in INIT, to RTS addressed to each other; c NULL: SWVT_RC_CONN_DEFAULT
 * (b's other attributes and a's READ resources as swvt_pair_connect). */
void swvt_rc_connect(struct swvt_rc_side *a, struct swvt_rc_side *b, const struct swvt_rc_conn *c);
/* Both sides opened (oa, ob) and connected (c); NULL pointers take the defaults. */
void swvt_rc_pair_open(struct swvt_rc_side *a, struct swvt_rc_side *b,
		       const struct swvt_rc_opts *oa, const struct swvt_rc_opts *ob,
		       const struct swvt_rc_conn *c);
void swvt_rc_pair_close(struct swvt_rc_side *a, struct swvt_rc_side *b);

/* The next completion of cq (whatever its status); SWVT_RC_LIMIT_NS without one fails. */
struct ibv_wc swvt_rc_wait_wc(struct ibv_cq *cq);
/* wr and sge for one signaled WR of s: len bytes at buf + off, wr_id off, to raddr/rkey. */
void swvt_rc_wr(const struct swvt_rc_side *s, struct ibv_send_wr *wr, struct ibv_sge *sge,
		enum ibv_wr_opcode op, uint32_t off, uint32_t len, uint64_t raddr, uint32_t rkey);
/* Posts that WR, with immediate data imm (host order). */
void swvt_rc_post(const struct swvt_rc_side *s, enum ibv_wr_opcode op, uint32_t off, uint32_t len,
		  uint64_t raddr, uint32_t rkey, uint32_t imm);
/* One 64-byte op from a's buffer to b's buffer + 100 made bad by how (0: not at all;
 * 1: a key that is not b's; 2: the address moved to run past the end of b's MR), its
 * completion taken: its status must be want. */
void swvt_rc_post_bad(struct swvt_rc_side *a, const struct swvt_rc_side *b, enum ibv_wr_opcode op,
		      int how, enum ibv_wc_status want);
/* One zero-length SEND from a to b, both completions taken and successful: the first
 * request of a connection is never placed (only an acknowledged one shows the responder
 * expects the requester's PSNs), so tests that look at placements start with it. */
void swvt_rc_warm(struct swvt_rc_side *a, struct swvt_rc_side *b);

/* How a stream of WRs under ibv_dereg_mr ended (swvt_rc_dereg_under_stream). */
struct swvt_rc_stream_end {
	enum ibv_wc_status last; /* the status that ended it */
	bool bad;		 /* a successful READ returned other bytes than 0x11 */
};
/* A thread streams 256-byte op WRs (RDMA WRITE of 0x11 bytes, or RDMA READ, each
 * checked to return 0x11 bytes) from a's buffer to b's buffer + 4096, one at a time,
 * until one fails. Once n have succeeded, b's MR is deregistered (b->mr NULL) and
 * b's buffer at once overwritten with 0xee, as by an application reusing it; returns
 * when the stream ended. */
struct swvt_rc_stream_end swvt_rc_dereg_under_stream(struct swvt_rc_side *a, struct swvt_rc_side *b,
						     enum ibv_wr_opcode op, uint64_t n);
/* The same with op WRs of len bytes (at most b's buffer length - 4096). */
struct swvt_rc_stream_end swvt_rc_dereg_under_stream_len(struct swvt_rc_side *a,
							 struct swvt_rc_side *b,
							 enum ibv_wr_opcode op, uint64_t n,
							 uint32_t len);

/* n bytes of i * 31 + seed: neighbouring bytes differ and byte 0 is the seed. */
void swvt_rc_fill(uint8_t *p, size_t n, unsigned seed);

#endif
