/*
 * The swverbs CM exchange on the wire (docs/wire.md, "Connection manager"): one UDP
 * datagram per message, a fixed 72-byte header in network byte order, then the
 * private data. Listeners receive on the UDP port equal to their rdma_cm port.
 */
#ifndef SWV_RDMACM_WIRE_H
#define SWV_RDMACM_WIRE_H

#include <stdint.h>

#define SWCM_MAGIC   0x5357434du /* "SWCM" */
#define SWCM_VERSION 1

enum swcm_type {
	SWCM_REQ = 1,
	SWCM_MRA = 2,
	SWCM_REP = 3,
	SWCM_RTU = 4,
	SWCM_REJ = 5,
	SWCM_DREQ = 6,
	SWCM_DREP = 7,
	SWCM_SIDR_REQ = 8,
	SWCM_SIDR_REP = 9,
	SWCM_PING = 10,
	SWCM_PONG = 11,
};

/* Private data sizes the kernel's rdma_cm offers over IB CM (its 36-byte header
 * subtracted from REQ and SIDR REQ): the limits and the lengths events report. */
#define SWCM_PDATA_REQ	    56
#define SWCM_PDATA_REP	    196
#define SWCM_PDATA_REJ	    148
#define SWCM_PDATA_DREQ	    220
#define SWCM_PDATA_SIDR_REQ 180
#define SWCM_PDATA_SIDR_REP 136
#define SWCM_PDATA_MAX	    220

/* IB CM REJ reasons and SIDR REP statuses used (IB spec 12.6.7, 12.11.2). */
#define SWCM_REJ_TIMEOUT	    4
#define SWCM_REJ_INVALID_COMM_ID    6
#define SWCM_REJ_INVALID_SERVICE_ID 8
#define SWCM_REJ_CONSUMER_DEFINED   28
#define SWCM_SIDR_SUCCESS	    0
#define SWCM_SIDR_UNSUPPORTED	    1
#define SWCM_SIDR_REJECT	    2

struct swcm_msg {
	uint32_t magic;
	uint8_t version;
	uint8_t type;
	uint16_t pdata_len;
	uint32_t src_comm_id;
	uint32_t dst_comm_id;
	uint16_t service_port; /* REQ, SIDR_REQ: the port the listener listens on */
	uint16_t port_space;
	uint32_t qpn;
	uint32_t psn;
	uint32_t qkey;
	uint8_t resp_res;
	uint8_t init_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint8_t qp_type;
	uint8_t mtu; /* enum ibv_mtu of the sender's port */
	uint16_t reason;
	uint16_t lid;
	uint8_t link_layer;
	uint8_t reserved[3];
	uint32_t src_ip;
	uint32_t dst_ip;
	uint8_t gid[16];
	uint8_t pdata[SWCM_PDATA_MAX];
} __attribute__((packed));

#define SWCM_HDR_LEN ((unsigned)__builtin_offsetof(struct swcm_msg, pdata))
_Static_assert(__builtin_offsetof(struct swcm_msg, pdata) == 72, "CM header is 72 bytes");

#endif
