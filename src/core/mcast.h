/*
 * UD multicast over IP multicast (docs/wire.md, "UD multicast"). Owner: core.
 *
 * A context keeps one group per MGID its QPs are attached to: a receive socket
 * bound to the group's IPv4 address and UDP port 65535 (net/addr.h), joined on the
 * device's interface and watched by the progress thread, which hands each datagram
 * for QPN 0xffffff to every QP attached (swv_mcast_deliver). Senders need nothing:
 * an AH whose DGID is a multicast GID resolves to the group address, and QPN
 * 0xffffff names port 65535.
 *
 * Locking: ctx->mcast_lock over ctx->mcast[], every group's nqps and each QP's
 * nmcast; a group's qps[] is written under it and read lock-free by the progress
 * thread. Detach waits until the thread can no longer use what it removed
 * (swv_progress_quiesce) before a QP may be destroyed or a group freed.
 */
#ifndef SWV_CORE_MCAST_H
#define SWV_CORE_MCAST_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/limits.h"
#include "link/endpoint.h"

struct swv_context;
struct swv_qp;

struct swv_mcast_grp {
	struct swv_endpoint ep; /* first: the progress thread finds the group from it */
	uint8_t mgid[16];
	struct in_addr group;
	unsigned nqps;					     /* under ctx->mcast_lock */
	struct swv_qp *_Atomic qps[SWV_MCAST_MAX_QP_ATTACH]; /* NULL = free slot */
};

/* ibv_attach_mcast / ibv_detach_mcast, with the kernel's and rxe's errnos: EINVAL
 * for a GID that is not multicast, a QP that is not UD or (IB-style port) a LID
 * outside 0xc000..0xfffe, and for detaching a group the QP is not attached to;
 * attaching twice is a success; ENOMEM beyond the limits above; EOPNOTSUPP on a
 * device in authenticated mode (its per-pair keys cannot cover a group). */
int swv_mcast_attach(struct swv_qp *qp, const uint8_t gid[16], uint16_t lid);
int swv_mcast_detach(struct swv_qp *qp, const uint8_t gid[16], uint16_t lid);

/* Context close, after the progress thread stopped: close and free every group. */
void swv_mcast_close_all(struct swv_context *ctx);

#endif
