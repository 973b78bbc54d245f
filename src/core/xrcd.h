/*
 * XRC domains (docs/design.md, "XRC"). Owner: xrc.
 *
 * A domain is what the kernel keys by the inode of the file an application passes to
 * ibv_open_xrcd: every open of the same file on the same device names the same domain,
 * in this process and in others. Within a process all ibv_xrcd handles of one
 * (device, inode) share one struct swv_xrc_dom; across processes the domain's existence
 * is a shared flock on a registry file named after the device and the inode (xrcd.c),
 * which gives O_CREAT/O_EXCL their kernel meaning (ENOENT, EEXIST) between processes.
 *
 * XRC SRQs belong to a domain and get an SRQ number; an XRC TGT QP delivers each
 * request to the SRQ its XRCETH names, which must be of the TGT QP's domain. Both live
 * in this process: a TGT QP delivers into the SRQs of its own context.
 *
 * TGT QPs belong to the domain, as in the kernel: ibv_open_qp gives any context of the
 * process that opened the domain a handle on one (modify, query, destroy; no send or
 * receive queue), and the QP lives until its last handle, the creator's included, is
 * destroyed. Its creator's context must stay open meanwhile (the QP's endpoint and
 * progress are that context's). A TGT QP of another process is known through the
 * registry (a file per QP, held with LOCK_SH by its owner): opening it answers
 * EOPNOTSUPP, not EINVAL, since delivery between processes is not implemented.
 *
 * Locking: swv_xrc_lock (process-wide) protects the domain list, each domain's SRQ
 * list and the SRQs' users count changes made by lookups (nothing is taken under it),
 * the domains' TGT QP lists and every TGT QP's open_list and tgt_orphan.
 * Order: ctx->qp_lock -> qp->lock -> swv_xrc_lock.
 */
#ifndef SWV_CORE_XRCD_H
#define SWV_CORE_XRCD_H

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/list.h"

struct swv_context;
struct swv_srq;

struct swv_xrc_dom {
	struct swv_list entry; /* in the process's domain list */
	const void *dev;       /* the struct swv_device */
	dev_t st_dev;
	ino_t st_ino;
	bool anon;	      /* opened with fd -1: never found by another open */
	unsigned refs;	      /* ibv_xrcd handles */
	int lock_fd;	      /* registry file, held with LOCK_SH; -1 without a registry */
	char *reg_path;	      /* its path (TGT QP files add "-qp-<qpn>"); NULL without */
	struct swv_list srqs; /* XRC SRQs of the domain (swv_srq.xrc_entry) */
	struct swv_list tgts; /* TGT QPs of the domain (swv_qp.tgt_entry) */
};

struct swv_xrcd {
	struct ibv_xrcd ibxrcd;	    /* must be first: the application's handle */
	uint32_t comp_mask, handle; /* as verbs_xrcd */
	struct swv_context *ctx;
	struct swv_xrc_dom *dom;
	_Atomic unsigned users; /* XRC SRQs and TGT QPs: close is EBUSY while > 0 */
};

static inline struct swv_xrcd *to_swv_xrcd(struct ibv_xrcd *x)
{
	return (struct swv_xrcd *)x;
}

/* verbs_context.open_xrcd / close_xrcd / get_srq_num. */
struct ibv_xrcd *swv_open_xrcd(struct ibv_context *ctx, struct ibv_xrcd_init_attr *attr);
int swv_close_xrcd(struct ibv_xrcd *xrcd);
int swv_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);

/* verbs_context.open_qp: the kernel's and rdma-core's errnos -- comp_mask bits beyond
 * IBV_QP_OPEN_ATTR_TYPE EOPNOTSUPP; no XRCD, NUM or TYPE bit, an XRCD of another
 * context, a type other than IBV_QPT_XRC_RECV, or no TGT QP of that number in the
 * domain EINVAL; a TGT QP of the domain in another process EOPNOTSUPP (not built). */
struct ibv_qp *swv_open_qp(struct ibv_context *ctx, struct ibv_qp_open_attr *attr);

struct swv_qp;
/* TGT QP created (end of create): joins its domain's list and the registry. */
void swv_xrc_tgt_link(struct swv_qp *qp);
/* Destroy of a TGT QP's creator handle: true when opened handles remain (the QP is then
 * kept for them, retargeted to one of their XRCD handles: the creator may close its
 * own), false when it goes now (out of the domain's list and the registry). */
bool swv_xrc_tgt_orphan(struct swv_qp *qp);
/* ibv_destroy_qp of an opened handle: frees it. Returns the TGT QP when that was its
 * last handle and the creator destroyed its own (the caller destroys it), else NULL. */
struct swv_qp *swv_xrc_qp_close(struct swv_qp *handle);

/* SRQ create/destroy: a number for every SRQ; XRC SRQs join their domain's list.
 * swv_xrc_srq_unlink takes the SRQ out of its domain and away from the TGT QPs that
 * delivered into it last; EBUSY (and it stays) while one is in the middle of a message
 * into it. Takes ctx->qp_lock and each TGT QP's lock: not under any QP lock. */
uint32_t swv_srq_num_alloc(void);
void swv_xrc_srq_link(struct swv_srq *srq);
int swv_xrc_srq_unlink(struct swv_srq *srq);

/*
 * TGT responder (qp->lock held): the SRQ numbered srqn for a TGT QP of domain dom and
 * context ctx, with a reference taken (srq->users; drop it with swv_xrc_srq_put).
 * Returns 0, ENOENT (no such SRQ: NAK Invalid Request) or EACCES (an SRQ of another
 * XRC domain: NAK Remote Access Error).
 */
int swv_xrc_srq_get(const struct swv_xrc_dom *dom, const struct swv_context *ctx, uint32_t srqn,
		    struct swv_srq **out);
void swv_xrc_srq_put(struct swv_srq *srq);

#endif
