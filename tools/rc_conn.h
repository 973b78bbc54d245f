/*
 * rc_conn: the RC connection swverbs-demo and the benchmarks set up before they show or
 * measure anything. Each side opens the device and creates a PD, CQs, one registered
 * buffer and an RC QP; the two swap {lid, gid, qpn, psn, buffer address, rkey} over a
 * stream socket and move their QPs RESET -> INIT -> RTR -> RTS. Any failure ends the
 * process with a message naming the side.
 */
#ifndef SWV_RC_CONN_H
#define SWV_RC_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/types.h>

#include <infiniband/verbs.h>

/* What the two sides exchange before they can talk: the usual verbs handshake. */
struct rc_endpoint {
	uint16_t lid;
	union ibv_gid gid;
	uint32_t qpn, psn;
	uint64_t addr; /* the buffer */
	uint32_t rkey;
};

struct rc_conn_attr {
	const char *dev;   /* device name; NULL: the first device */
	int send_cqe;	   /* size of the send CQ */
	int recv_cqe;	   /* size of the receive CQ; 0: the send CQ serves both queues */
	size_t len;	   /* buffer bytes: page-aligned, zeroed, registered */
	int mr_access;	   /* the buffer's access beyond IBV_ACCESS_LOCAL_WRITE */
	int qp_access;	   /* the QP's qp_access_flags */
	uint8_t rd_atomic; /* RDMA READs and atomics in flight, each way */
	uint8_t retry_cnt; /* the QP's retry_cnt, 1..7; 0 = 7 (perftest's) */
	struct ibv_qp_cap cap;
};

struct rc_conn {
	const char *who; /* names this side in error messages */
	struct rc_conn_attr attr;
	struct ibv_context *ctx;
	struct ibv_port_attr port;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq; /* the same CQ when attr.recv_cqe is 0 */
	struct ibv_qp *qp;
	uint8_t *buf;
	struct ibv_mr *mr;
	struct rc_endpoint me, peer;
};

/* Print "who [pid]: what: strerror(err)" and exit(1). */
_Noreturn void rc_die(const char *who, const char *what, int err);

/* fork() the second process of a two-process program, with a stream socketpair between
 * the two (stdout flushed first, so nothing buffered is printed twice). Returns the
 * child's pid in the parent and 0 in the child; *ctl is this side's end of the pair,
 * the other end is closed. Dies on failure. */
pid_t rc_fork(const char *who, int *ctl);

/* Read or write exactly n bytes of a stream socket, or die. */
void rc_xfer(const char *who, int sock, void *p, size_t n, bool out);

/* The device called name (NULL: the first one), opened. */
struct ibv_context *rc_open_device(const char *who, const char *name);

/* Device, PD, CQs, buffer and MR, and the QP, left in RESET so that counters can be
 * attached before any traffic; fills c->me. */
void rc_conn_open(struct rc_conn *c, const char *who, const struct rc_conn_attr *a);

/* Swap c->me and c->peer; one side passes first = true, the other false. */
void rc_conn_exchange(struct rc_conn *c, int sock, bool first);

/* The standard RC connection to c->peer: RESET -> INIT -> RTR -> RTS. */
void rc_conn_connect(struct rc_conn *c);

/* Free what rc_conn_open made except the QP, which the caller destroys first: counters
 * attached to it can go only after it and before the device closes. */
void rc_conn_close(struct rc_conn *c);

#endif
