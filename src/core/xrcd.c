/*
 * XRC domains and the SRQ numbers XRC addresses (rules and locking in xrcd.h).
 *
 * Errors as the kernel's open_xrcd answers them: comp_mask without FD and OFLAGS
 * EINVAL, unknown bits EOPNOTSUPP (rdma-core's check); fd -1 without O_CREAT EINVAL;
 * an fd that is not open EBADF; O_EXCL on an existing domain EEXIST; no domain and no
 * O_CREAT ENOENT. close_xrcd is EBUSY while an XRC SRQ or TGT QP uses the handle.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/context.h"
#include "core/cq.h"
#include "core/device.h"
#include "core/qp.h"
#include "core/srq.h"
#include "core/xrcd.h"
#include "util/user_dir.h"

static pthread_mutex_t swv_xrc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct swv_list doms = {&doms, &doms};
static _Atomic uint32_t next_srqn = 1;

uint32_t swv_srq_num_alloc(void)
{
	/* 24 bits on the wire (XRCETH); 0 is never handed out. */
	uint32_t n;
	do
		n = atomic_fetch_add(&next_srqn, 1) & 0xffffff;
	while (n == 0);
	return n;
}

/* The registry file of (device, inode), opened, and the registry's guard file, opened
 * and locked LOCK_EX (*guard; close it to release); -1 if there can be no registry (the
 * domain is then known to this process only). The guard serialises the probe-and-take of
 * every opener on the machine: flock cannot turn LOCK_EX into LOCK_SH atomically, and
 * without it a second opener probing in between would take the domain for absent. */
static int registry_open(const char *devname, const struct stat *st, int *guard, char path[4096])
{
	char dir[4096 - 128];
	*guard = -1;
	/* closed to others entirely: the registry names the domains of this user */
	if (!swv_user_dir(dir, sizeof(dir), 077))
		return -1;
	snprintf(path, 4096, "%s/xrcd.lock", dir);
	*guard = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (*guard < 0)
		return -1;
	while (flock(*guard, LOCK_EX) != 0)
		if (errno != EINTR) {
			close(*guard);
			*guard = -1;
			return -1;
		}
	snprintf(path, 4096, "%s/xrcd-%s-%llx-%llu", dir, devname, (unsigned long long)st->st_dev,
		 (unsigned long long)st->st_ino);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		close(*guard);
		*guard = -1;
	}
	return fd;
}

/* Under swv_xrc_lock: the domain of (dev, file), found or made, with a reference. */
static int dom_get(const struct swv_device *dev, int fd, int oflags, struct swv_xrc_dom **out)
{
	struct stat st;
	memset(&st, 0, sizeof(st));
	if (fd != -1) {
		if (fstat(fd, &st) != 0)
			return EBADF;
		for (struct swv_list *e = doms.next; e != &doms; e = e->next) {
			struct swv_xrc_dom *d = (struct swv_xrc_dom *)e; /* entry is first */
			if (!d->anon && d->dev == dev && d->st_dev == st.st_dev &&
			    d->st_ino == st.st_ino) {
				if (oflags & O_EXCL)
					return EEXIST;
				d->refs++;
				*out = d;
				return 0;
			}
		}
	} else if (!(oflags & O_CREAT)) {
		return EINVAL;
	}
	int lock_fd = -1;
	char path[4096];
	if (fd != -1) {
		/* Another process has the domain open iff it holds the file's lock
		 * (LOCK_SH; under the guard nobody else probes with LOCK_EX). */
		int guard;
		lock_fd = registry_open(dev->ibdev.name, &st, &guard, path);
		if (lock_fd >= 0) {
			bool exists = flock(lock_fd, LOCK_EX | LOCK_NB) != 0;
			int rc = 0;
			if (exists && (oflags & O_EXCL))
				rc = EEXIST;
			else if (!exists && !(oflags & O_CREAT))
				rc = ENOENT;
			else if (flock(lock_fd, LOCK_SH) != 0)
				rc = errno;
			close(guard);
			if (rc) {
				close(lock_fd);
				return rc;
			}
		} else if (!(oflags & O_CREAT)) {
			return ENOENT;
		}
	}
	struct swv_xrc_dom *d = calloc(1, sizeof(*d));
	if (d && lock_fd >= 0) {
		d->reg_path = strdup(path);
		if (!d->reg_path) {
			free(d);
			d = NULL;
		}
	}
	if (!d) {
		if (lock_fd >= 0)
			close(lock_fd);
		return ENOMEM;
	}
	d->dev = dev;
	d->st_dev = st.st_dev;
	d->st_ino = st.st_ino;
	d->anon = fd == -1;
	d->refs = 1;
	d->lock_fd = lock_fd;
	swv_list_init(&d->srqs);
	swv_list_init(&d->tgts);
	swv_list_add_tail(&doms, &d->entry);
	*out = d;
	return 0;
}

struct ibv_xrcd *swv_open_xrcd(struct ibv_context *ibctx, struct ibv_xrcd_init_attr *attr)
{
	if (!ibctx || !attr) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) ||
	    !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ||
	    (attr->oflags & ~(O_CREAT | O_EXCL))) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_context *ctx = to_swv_ctx(ibctx);
	struct swv_xrcd *x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&swv_xrc_lock);
	int rc = dom_get(ctx->dev, attr->fd, attr->oflags, &x->dom);
	pthread_mutex_unlock(&swv_xrc_lock);
	if (rc) {
		free(x);
		errno = rc;
		return NULL;
	}
	x->ibxrcd.context = ibctx;
	x->ctx = ctx;
	return &x->ibxrcd;
}

int swv_close_xrcd(struct ibv_xrcd *ibx)
{
	if (!ibx)
		return EINVAL;
	struct swv_xrcd *x = to_swv_xrcd(ibx);
	if (atomic_load(&x->users))
		return EBUSY;
	pthread_mutex_lock(&swv_xrc_lock);
	struct swv_xrc_dom *d = x->dom;
	if (--d->refs == 0) {
		swv_list_del(&d->entry);
		if (d->lock_fd >= 0)
			close(d->lock_fd); /* releases the shared lock: gone for this process */
		free(d->reg_path);
		free(d);
	}
	pthread_mutex_unlock(&swv_xrc_lock);
	free(x);
	return 0;
}

int swv_get_srq_num(struct ibv_srq *ibsrq, uint32_t *srq_num)
{
	if (!ibsrq || !srq_num)
		return EINVAL;
	*srq_num = to_swv_srq(ibsrq)->srqn;
	return 0;
}

static struct swv_srq *srq_of_entry(struct swv_list *e)
{
	return (struct swv_srq *)((char *)e - offsetof(struct swv_srq, xrc_entry));
}

void swv_xrc_srq_link(struct swv_srq *srq)
{
	pthread_mutex_lock(&swv_xrc_lock);
	swv_list_add_tail(&srq->xrcd->dom->srqs, &srq->xrc_entry);
	pthread_mutex_unlock(&swv_xrc_lock);
}

int swv_xrc_srq_unlink(struct swv_srq *srq)
{
	struct swv_context *ctx = srq->ctx;
	struct swv_list *pos;
	bool busy = false;
	int rc = 0;

	/* Out of the domain first, so no TGT QP finds it again... */
	pthread_mutex_lock(&swv_xrc_lock);
	swv_list_del(&srq->xrc_entry);
	pthread_mutex_unlock(&swv_xrc_lock);
	/* ...then the TGT QPs that delivered into it last let go of it, unless one is in
	 * the middle of a message into it (it holds one of its WQEs). Only QPs of its
	 * context can hold it (swv_xrc_srq_get). */
	pthread_mutex_lock(&ctx->qp_lock);
	swv_list_for_each(pos, &ctx->qp_list)
	{
		struct swv_qp *qp = swv_list_entry(pos, struct swv_qp, ctx_entry);
		if (qp->xrc != SWV_XRC_TGT)
			continue;
		pthread_mutex_lock(&qp->lock);
		if (qp->srq == srq) {
			if (qp->srq_rwqe_valid) {
				busy = true;
			} else {
				qp->srq = NULL;
				qp->rcq = NULL;
				qp->pd = NULL;
				swv_xrc_srq_put(srq);
			}
		}
		pthread_mutex_unlock(&qp->lock);
	}
	pthread_mutex_unlock(&ctx->qp_lock);
	pthread_mutex_lock(&swv_xrc_lock);
	if (busy || atomic_load(&srq->users)) {
		swv_list_add_tail(&srq->xrcd->dom->srqs, &srq->xrc_entry);
		rc = EBUSY;
	}
	pthread_mutex_unlock(&swv_xrc_lock);
	return rc;
}

int swv_xrc_srq_get(const struct swv_xrc_dom *dom, const struct swv_context *ctx, uint32_t srqn,
		    struct swv_srq **out)
{
	int rc = ENOENT;
	pthread_mutex_lock(&swv_xrc_lock);
	for (struct swv_list *de = doms.next; de != &doms && rc == ENOENT; de = de->next) {
		struct swv_xrc_dom *d = (struct swv_xrc_dom *)de;
		for (struct swv_list *e = d->srqs.next; e != &d->srqs; e = e->next) {
			struct swv_srq *s = srq_of_entry(e);
			if (s->srqn != srqn || s->ctx != ctx)
				continue;
			if (d != dom) {
				rc = EACCES;
				break;
			}
			atomic_fetch_add(&s->users, 1);
			*out = s;
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&swv_xrc_lock);
	return rc;
}

void swv_xrc_srq_put(struct swv_srq *srq)
{
	pthread_mutex_lock(&swv_xrc_lock);
	atomic_fetch_sub(&srq->users, 1);
	pthread_mutex_unlock(&swv_xrc_lock);
}

/* The registry file of TGT QP qpn of domain d (NULL path: none). */
static bool tgt_reg_path(const struct swv_xrc_dom *d, uint32_t qpn, char *out, size_t size)
{
	return d->reg_path && (size_t)snprintf(out, size, "%s-qp-%x", d->reg_path, qpn) < size;
}

void swv_xrc_tgt_link(struct swv_qp *qp)
{
	struct swv_xrc_dom *d = qp->xrcd->dom;
	char path[4200];
	swv_list_init(&qp->open_list);
	qp->tgt_reg_fd = -1;
	/* Held LOCK_SH while the QP lives, so another process tells a TGT QP that exists
	 * (EOPNOTSUPP) from a number nobody has (EINVAL). QPNs name UDP ports: no other
	 * live process has this one. */
	if (tgt_reg_path(d, qp->qpn, path, sizeof(path))) {
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0 && flock(fd, LOCK_SH) != 0) {
			close(fd);
			fd = -1;
		}
		qp->tgt_reg_fd = fd;
	}
	pthread_mutex_lock(&swv_xrc_lock);
	swv_list_add_tail(&d->tgts, &qp->tgt_entry);
	qp->tgt_linked = true;
	pthread_mutex_unlock(&swv_xrc_lock);
}

bool swv_xrc_tgt_orphan(struct swv_qp *qp)
{
	bool keep;
	pthread_mutex_lock(&qp->lock);
	pthread_mutex_lock(&swv_xrc_lock);
	keep = !swv_list_empty(&qp->open_list);
	if (keep) {
		struct swv_qp *h = swv_list_entry(qp->open_list.next, struct swv_qp, open_entry);
		qp->tgt_orphan = true;
		if (qp->xrcd != h->xrcd) {
			atomic_fetch_sub(&qp->xrcd->users, 1);
			atomic_fetch_add(&h->xrcd->users, 1);
			qp->xrcd = h->xrcd;
			qp->verbs_xrcd = &h->xrcd->ibxrcd;
		}
	} else if (qp->tgt_linked) {
		swv_list_del(&qp->tgt_entry);
		qp->tgt_linked = false;
	}
	pthread_mutex_unlock(&swv_xrc_lock);
	pthread_mutex_unlock(&qp->lock);
	if (!keep && qp->tgt_reg_fd >= 0) {
		char path[4200];
		if (tgt_reg_path(qp->xrcd->dom, qp->qpn, path, sizeof(path)))
			unlink(path);
		close(qp->tgt_reg_fd);
		qp->tgt_reg_fd = -1;
	}
	return keep;
}

struct swv_qp *swv_xrc_qp_close(struct swv_qp *h)
{
	struct swv_qp *real = h->open_real;
	/* The QP's lock too: its responder reads qp->xrcd, which may move below. */
	pthread_mutex_lock(&real->lock);
	pthread_mutex_lock(&swv_xrc_lock);
	swv_list_del(&h->open_entry);
	bool last = swv_list_empty(&real->open_list) && real->tgt_orphan;
	/* The QP may be using this handle's XRCD: hand it another handle's, or keep
	 * the reference until the QP goes below. */
	if (real->xrcd == h->xrcd && !swv_list_empty(&real->open_list)) {
		struct swv_qp *o = swv_list_entry(real->open_list.next, struct swv_qp, open_entry);
		atomic_fetch_sub(&real->xrcd->users, 1);
		atomic_fetch_add(&o->xrcd->users, 1);
		real->xrcd = o->xrcd;
		real->verbs_xrcd = &o->xrcd->ibxrcd;
	}
	pthread_mutex_unlock(&swv_xrc_lock);
	pthread_mutex_unlock(&real->lock);
	atomic_fetch_sub(&h->xrcd->users, 1);
	pthread_cond_destroy(&h->qpx.qp_base.cond);
	pthread_mutex_destroy(&h->qpx.qp_base.mutex);
	pthread_mutex_destroy(&h->lock);
	free(h);
	return last ? real : NULL;
}

/* Whether TGT QP qpn of domain d is held open by another process. */
static bool tgt_elsewhere(const struct swv_xrc_dom *d, uint32_t qpn)
{
	char path[4200];
	if (!tgt_reg_path(d, qpn, path, sizeof(path)))
		return false;
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;
	close(fd);
	return held;
}

struct ibv_qp *swv_open_qp(struct ibv_context *ibctx, struct ibv_qp_open_attr *attr)
{
	const uint32_t need = IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE;
	int rc = 0;
	if (!ibctx || !attr)
		rc = EINVAL;
	else if (attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED)
		rc = EOPNOTSUPP;
	else if ((attr->comp_mask & need) != need || !attr->xrcd || attr->xrcd->context != ibctx ||
		 attr->qp_type != IBV_QPT_XRC_RECV)
		rc = EINVAL;
	struct swv_qp *h = rc ? NULL : calloc(1, sizeof(*h));
	if (!rc && !h)
		rc = ENOMEM;
	if (rc) {
		errno = rc;
		return NULL;
	}
	struct swv_xrcd *x = to_swv_xrcd(attr->xrcd);
	h->ctx = to_swv_ctx(ibctx);
	h->xrc = SWV_XRC_TGT;
	h->type = IBV_QPT_RC;
	h->xrcd = x;
	h->verbs_xrcd = attr->xrcd;
	h->qpn = attr->qp_num;
	h->state = IBV_QPS_RESET;
	h->tgt_reg_fd = -1;
	swv_list_init(&h->trig_list);
	swv_list_init(&h->open_list);
	pthread_mutex_init(&h->lock, NULL);
	struct ibv_qp *ib = &h->qpx.qp_base;
	ib->context = ibctx;
	ib->qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : NULL;
	ib->qp_num = attr->qp_num;
	ib->handle = attr->qp_num;
	ib->qp_type = IBV_QPT_XRC_RECV;
	ib->state = IBV_QPS_UNKNOWN; /* as rdma-core's open leaves it */
	pthread_mutex_init(&ib->mutex, NULL);
	pthread_cond_init(&ib->cond, NULL);

	pthread_mutex_lock(&swv_xrc_lock);
	struct swv_qp *real = NULL;
	for (struct swv_list *e = x->dom->tgts.next; e != &x->dom->tgts; e = e->next) {
		struct swv_qp *q = swv_list_entry(e, struct swv_qp, tgt_entry);
		if (q->qpn == attr->qp_num) {
			real = q;
			break;
		}
	}
	if (real) {
		h->open_real = real;
		swv_list_add_tail(&real->open_list, &h->open_entry);
		atomic_fetch_add(&x->users, 1); /* close_xrcd: EBUSY while the handle lives */
	}
	pthread_mutex_unlock(&swv_xrc_lock);
	if (!real) {
		rc = tgt_elsewhere(x->dom, attr->qp_num) ? EOPNOTSUPP : EINVAL;
		pthread_cond_destroy(&ib->cond);
		pthread_mutex_destroy(&ib->mutex);
		pthread_mutex_destroy(&h->lock);
		free(h);
		errno = rc;
		return NULL;
	}
	return ib;
}
