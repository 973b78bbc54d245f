/*
 * swverbs librdmacm internals: ids, channels, CM sockets, the per-process CM thread.
 * Everything below is guarded by one process-wide mutex (cm_lock); see
 * docs/design.md, "User-space librdmacm".
 */
#ifndef SWV_RDMACM_INT_H
#define SWV_RDMACM_INT_H

#include <netinet/in.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdint.h>

#include "cm_wire.h"

struct cm_dev {
	struct ibv_context *ctx;
	struct in_addr ip;
	union ibv_gid gid;
	uint16_t lid;
	uint8_t link_layer;
	uint8_t mtu;
	int max_rd_atom;      /* responder resources */
	int max_init_rd_atom; /* initiator depth */
	struct ibv_pd *pd;    /* default PD, allocated on first need */
};

/* A multicast membership of an id (rdma_join_multicast): the QP is attached when the
 * application takes the join event, as librdmacm does. */
struct cm_mc {
	struct cm_mc *next;
	struct sockaddr_in addr; /* the group address joined */
	union ibv_gid mgid;
	uint16_t mlid;
	bool sendonly;
	struct ibv_qp *attached; /* the QP attached to the group, or NULL */
	void *context;
};

struct cm_event {
	struct rdma_cm_event ev; /* first: the application's pointer */
	struct cm_id *owner;	 /* the id whose destroy waits for the ack */
	struct cm_mc *mc;	 /* MULTICAST_JOIN: the membership (cleared by leave) */
	struct cm_event *next;
	struct cm_channel *chan;
	bool held_once; /* DISCONNECTED: put back once for the CQ to be polled first */
	uint8_t pdata[SWCM_PDATA_MAX];
};

struct cm_channel {
	struct rdma_event_channel ch; /* first */
	struct cm_event *head, *tail;
};

struct cm_sock {
	int fd;
	int refs;
	struct sockaddr_in addr; /* bound address */
	struct cm_id *listener;
	uint64_t grace_until; /* requests meeting no listener before this are dropped */
	struct cm_sock *next;
};

enum cm_state {
	CM_IDLE,
	CM_BOUND,
	CM_ADDR_RESOLVED,
	CM_ROUTE_RESOLVED,
	CM_LISTEN,
	CM_REQ_SENT,
	CM_REQ_RCVD,
	CM_REP_SENT,
	CM_REP_RCVD,
	CM_ESTABLISHED,
	CM_DREQ_SENT,
	CM_DISCONNECTED,
	CM_FAILED,
	CM_UD_DONE,
};

struct cm_id {
	struct rdma_cm_id id; /* first */
	struct cm_id *next;
	struct cm_channel *chan;
	bool sync;
	enum cm_state state;
	struct cm_dev *dev;
	struct cm_sock *sock;
	struct cm_id *listen; /* the listener a child came from, while it lives */
	uint32_t comm_id, remote_comm_id;
	struct sockaddr_in peer_cm; /* where this id's CM messages go */
	int events_out;		    /* events counted against this id, not yet acked */
	bool destroying;

	/* Connection parameters: local announcement and what the QP gets. */
	uint32_t psn, qpn;
	uint8_t resp_res, init_depth, retry_cnt, rnr_retry, flow_control, srq;
	uint8_t ack_timeout, tos;
	bool have_remote;
	uint32_t rqpn, rpsn, rqkey;
	uint8_t r_resp_res, r_init_depth, r_rnr_retry, r_retry, r_mtu, r_link_layer;
	uint16_t rlid;
	uint8_t rgid[16];
	uint8_t qp_max_dest_rd, qp_max_rd, qp_retry, qp_rnr_retry;

	/* Retransmission of the last message that wants an answer. */
	struct swcm_msg last;
	size_t last_len;
	uint64_t deadline, rto, started;
	int tries, max_tries;
	uint64_t ka_next;
	int ka_missed;

	/* rdma_create_ep on a passive id: what rdma_get_request builds on each request. */
	bool has_ep_attr;
	struct ibv_qp_init_attr ep_attr;
	struct ibv_pd *ep_pd;
	bool own_send_cq, own_recv_cq;
	struct ibv_sa_path_rec path;
	struct rdma_addrinfo *ai; /* rdma_resolve_addrinfo's result */
	struct cm_mc *mcs;	  /* multicast memberships */
};

#endif
