/*
 * Tag-matching SRQs: the matching list, ibv_post_srq_ops and the choice of WQE for
 * an incoming SEND (rules in srq.h, docs/design.md "Tag matching").
 *
 * The list operations execute inside ibv_post_srq_ops, under srq->lock, so an
 * operation is never outstanding when the call returns and max_ops bounds nothing
 * at run time (it is checked at create). Errors follow the mlx5 provider, the one
 * rdma-core device with tag matching: a non-TM SRQ, an unknown opcode, too many SGEs
 * or a handle that names no buffer added is EINVAL; a full list is ENOMEM; *bad
 * names the first operation not executed. Deleting a buffer a message consumed
 * before the deletion reached the device is no error of the call: it completes with
 * IBV_WC_TM_ERR (always, signaled or not).
 *
 * Handles: a buffer's handle stays reserved after a message consumed it, so that a
 * late IBV_WR_TAG_DEL still finds it and answers IBV_WC_TM_ERR; such a slot is reused
 * only when no never-used or deleted one is left (oldest consumed first), and free
 * slots are reused in the order they were freed.
 *
 * Synchronisation (the phase counter): the device counts the messages it delivered
 * unexpected (unexp_hw); software reports how many it has handled in unexpected_cnt
 * of IBV_WR_TAG_SYNC, or of any operation with IBV_OPS_TM_SYNC (unexp_sw). While the
 * two differ, a buffer added is held: it is on the list but matches nothing, and its
 * ADD completes with IBV_WC_TM_SYNC_REQ, as does every operation completing out of
 * sync. The report that makes them equal releases the held buffers. Buffers added
 * while in sync keep matching through later unexpected messages (those were checked
 * against them).
 */
#include <endian.h>
#include <infiniband/tm_types.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/async.h"
#include "core/completion.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/limits.h"
#include "core/pd.h"
#include "core/srq.h"
#include "util/list.h"

enum tag_state { TAG_FREE, TAG_ACTIVE, TAG_CONSUMED };

struct tm_tag {
	struct swv_list entry; /* in tm->list while ACTIVE, in posting order */
	uint64_t tag, mask;
	uint64_t stamp; /* when consumed: the oldest consumed slot is reclaimed first */
	uint8_t state;	/* enum tag_state */
	bool held;	/* added out of sync: matches nothing until the next sync */
};

struct swv_tm {
	uint32_t max_num_tags;
	uint32_t max_sge; /* per buffer: min(SWV_TM_MAX_SGE, the SRQ's max_sge) */
	size_t wqe_size;
	struct tm_tag *tags;
	uint8_t *wqes;	/* each buffer's WQE (wr_id = recv_wr_id), wqe_size apart */
	uint32_t *fifo; /* free handles, oldest freed first */
	uint32_t fifo_head, fifo_n;
	struct swv_list list;
	uint32_t unexp_hw, unexp_sw;
	uint64_t stamp;
};

static struct swv_recv_wqe *tag_wqe(struct swv_tm *tm, uint32_t h)
{
	return (struct swv_recv_wqe *)(tm->wqes + (size_t)h * tm->wqe_size);
}

static void fifo_push(struct swv_tm *tm, uint32_t h)
{
	tm->fifo[(tm->fifo_head + tm->fifo_n++) % tm->max_num_tags] = h;
	tm->tags[h].state = TAG_FREE;
}

/* A handle for a new buffer, or UINT32_MAX when max_num_tags are in use. */
static uint32_t handle_get(struct swv_tm *tm)
{
	if (tm->fifo_n) {
		uint32_t h = tm->fifo[tm->fifo_head];
		tm->fifo_head = (tm->fifo_head + 1) % tm->max_num_tags;
		tm->fifo_n--;
		return h;
	}
	uint32_t best = UINT32_MAX;
	for (uint32_t i = 0; i < tm->max_num_tags; i++)
		if (tm->tags[i].state == TAG_CONSUMED &&
		    (best == UINT32_MAX || tm->tags[i].stamp < tm->tags[best].stamp))
			best = i;
	return best;
}

static bool in_sync(const struct swv_tm *tm)
{
	return tm->unexp_hw == tm->unexp_sw;
}

static void sync_report(struct swv_tm *tm, uint32_t cnt)
{
	tm->unexp_sw = cnt;
	if (!in_sync(tm))
		return;
	struct swv_list *pos;
	swv_list_for_each(pos, &tm->list) swv_list_entry(pos, struct tm_tag, entry)->held = false;
}

struct swv_srq *swv_srq_tm_create(struct swv_pd *pd, struct swv_cq *cq,
				  struct ibv_srq_init_attr_ex *attr)
{
	const struct ibv_tm_cap *cap = &attr->tm_cap;

	if (!cap->max_num_tags || cap->max_num_tags > SWV_TM_MAX_NUM_TAGS || !cap->max_ops ||
	    cap->max_ops > SWV_TM_MAX_OPS) {
		errno = EINVAL;
		return NULL;
	}
	struct swv_tm *tm = calloc(1, sizeof(*tm));
	if (!tm) {
		errno = ENOMEM;
		return NULL;
	}
	struct swv_srq *srq = swv_srq_create(pd, &attr->attr, attr->srq_context);
	if (!srq) {
		free(tm);
		return NULL;
	}
	tm->max_num_tags = cap->max_num_tags;
	tm->max_sge = SWV_MIN(srq->max_sge, (uint32_t)SWV_TM_MAX_SGE);
	tm->wqe_size = swv_srq_wqe_size(srq->max_sge);
	tm->tags = calloc(tm->max_num_tags, sizeof(*tm->tags));
	tm->wqes = calloc(tm->max_num_tags, tm->wqe_size);
	tm->fifo = calloc(tm->max_num_tags, sizeof(*tm->fifo));
	swv_list_init(&tm->list);
	if (!tm->tags || !tm->wqes || !tm->fifo) {
		srq->tm = tm;
		swv_srq_tm_free(srq);
		swv_srq_destroy(srq);
		errno = ENOMEM;
		return NULL;
	}
	for (uint32_t i = 0; i < tm->max_num_tags; i++) {
		swv_list_init(&tm->tags[i].entry);
		fifo_push(tm, i);
	}
	srq->tm = tm;
	srq->cq = cq;
	atomic_fetch_add(&cq->users, 1);
	return srq;
}

void swv_srq_tm_free(struct swv_srq *srq)
{
	struct swv_tm *tm = srq->tm;

	if (!tm)
		return;
	free(tm->tags);
	free(tm->wqes);
	free(tm->fifo);
	free(tm);
	srq->tm = NULL;
}

/* A list operation's CQE (srq->lock held). An overflowed CQ raises IBV_EVENT_CQ_ERR:
 * there is no QP to move to the error state. */
static void op_complete(struct swv_srq *srq, const struct ibv_ops_wr *wr, enum ibv_wc_opcode opcode,
			enum ibv_wc_status st)
{
	struct swv_completion c;

	memset(&c, 0, sizeof(c));
	c.slot = SWV_CNTR_NSLOTS; /* no QP's, no counter's */
	c.cq = srq->cq;
	c.solicited = true;
	c.wc.wr_id = wr->wr_id;
	c.wc.status = st;
	c.wc.opcode = opcode;
	if (!in_sync(srq->tm))
		c.wc.wc_flags = IBV_WC_TM_SYNC_REQ;
	if (swv_complete(NULL, &c) == ENOSPC)
		swv_async_event(srq->ctx, IBV_EVENT_CQ_ERR, &srq->cq->ibcq);
}

static int tag_add(struct swv_srq *srq, struct ibv_ops_wr *wr)
{
	struct swv_tm *tm = srq->tm;

	if (wr->tm.add.num_sge < 0 || (uint32_t)wr->tm.add.num_sge > tm->max_sge ||
	    (wr->tm.add.num_sge && !wr->tm.add.sg_list))
		return EINVAL;
	uint64_t len = 0;
	for (int i = 0; i < wr->tm.add.num_sge; i++)
		len += wr->tm.add.sg_list[i].length;
	if (len > UINT32_MAX)
		return EINVAL;
	uint32_t h = handle_get(tm);
	if (h == UINT32_MAX)
		return ENOMEM;
	struct swv_recv_wqe *w = tag_wqe(tm, h);
	w->wr_id = wr->tm.add.recv_wr_id;
	w->num_sge = (uint32_t)wr->tm.add.num_sge;
	w->length = (uint32_t)len;
	if (w->num_sge)
		memcpy(w->sge, wr->tm.add.sg_list, w->num_sge * sizeof(struct ibv_sge));
	if (wr->flags & IBV_OPS_TM_SYNC)
		sync_report(tm, wr->tm.unexpected_cnt);
	struct tm_tag *t = &tm->tags[h];
	t->tag = wr->tm.add.tag;
	t->mask = wr->tm.add.mask;
	t->state = TAG_ACTIVE;
	t->held = !in_sync(tm);
	swv_list_add_tail(&tm->list, &t->entry);
	wr->tm.handle = h;
	if (wr->flags & IBV_OPS_SIGNALED)
		op_complete(srq, wr, IBV_WC_TM_ADD, IBV_WC_SUCCESS);
	return 0;
}

static int tag_del(struct swv_srq *srq, struct ibv_ops_wr *wr)
{
	struct swv_tm *tm = srq->tm;
	uint32_t h = wr->tm.handle;

	if (h >= tm->max_num_tags || tm->tags[h].state == TAG_FREE)
		return EINVAL;
	if (wr->flags & IBV_OPS_TM_SYNC)
		sync_report(tm, wr->tm.unexpected_cnt);
	struct tm_tag *t = &tm->tags[h];
	if (t->state != TAG_ACTIVE) {
		/* A message took it first; the application has now learnt its fate, so the
		 * slot is free (a rendezvous still in flight has its own copy of the
		 * buffer's SGEs in its READ). */
		fifo_push(tm, h);
		op_complete(srq, wr, IBV_WC_TM_DEL, IBV_WC_TM_ERR);
		return 0;
	}
	swv_list_del(&t->entry);
	fifo_push(tm, h);
	if (wr->flags & IBV_OPS_SIGNALED)
		op_complete(srq, wr, IBV_WC_TM_DEL, IBV_WC_SUCCESS);
	return 0;
}

int swv_post_srq_ops(struct ibv_srq *ibsrq, struct ibv_ops_wr *wr, struct ibv_ops_wr **bad)
{
	if (!bad)
		return EINVAL;
	*bad = wr;
	if (!ibsrq || !wr)
		return EINVAL;
	struct swv_srq *srq = to_swv_srq(ibsrq);
	if (!srq->tm)
		return EINVAL; /* only a TM SRQ has a list */
	int err = 0;

	pthread_mutex_lock(&srq->lock);
	for (; wr; wr = wr->next) {
		switch (wr->opcode) {
		case IBV_WR_TAG_ADD:
			err = tag_add(srq, wr);
			break;
		case IBV_WR_TAG_DEL:
			err = tag_del(srq, wr);
			break;
		case IBV_WR_TAG_SYNC:
			sync_report(srq->tm, wr->tm.unexpected_cnt);
			if (wr->flags & IBV_OPS_SIGNALED)
				op_complete(srq, wr, IBV_WC_TM_SYNC, IBV_WC_SUCCESS);
			break;
		default:
			err = EINVAL;
		}
		if (err)
			break;
	}
	pthread_mutex_unlock(&srq->lock);
	*bad = err ? wr : NULL;
	return err;
}

static uint64_t be64_at(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return be64toh(v);
}

static uint32_t be32_at(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return be32toh(v);
}

/* The oldest eligible buffer whose tag matches, or NULL. */
static struct tm_tag *match(struct swv_tm *tm, uint64_t tag)
{
	struct swv_list *pos;
	swv_list_for_each(pos, &tm->list)
	{
		struct tm_tag *t = swv_list_entry(pos, struct tm_tag, entry);
		if (!t->held && ((tag ^ t->tag) & t->mask) == 0)
			return t;
	}
	return NULL;
}

bool swv_srq_tm_take(struct swv_srq *srq, const uint8_t *payload, uint32_t paylen,
		     struct swv_recv_wqe *out, struct swv_tm_match *m)
{
	struct swv_tm *tm = srq->tm;
	uint8_t op = paylen >= SWV_TM_HDR_LEN ? payload[0] : 0xff;
	bool ok;

	memset(m, 0, sizeof(*m));
	pthread_mutex_lock(&srq->lock);
	if (op == IBV_TMH_EAGER || op == IBV_TMH_RNDV) {
		uint64_t tag = be64_at(payload + 8);
		/* a rendezvous request too short for its RVH is software's to handle */
		struct tm_tag *t = op == IBV_TMH_EAGER || paylen >= SWV_TM_HDR_LEN + SWV_TM_RVH_LEN
				       ? match(tm, tag)
				       : NULL;
		if (t) {
			uint32_t h = (uint32_t)(t - tm->tags);
			memcpy(out, tag_wqe(tm, h), tm->wqe_size);
			swv_list_del(&t->entry);
			t->state = TAG_CONSUMED;
			t->stamp = ++tm->stamp;
			m->kind = op == IBV_TMH_EAGER ? SWV_TM_EAGER : SWV_TM_RNDV;
			m->handle = h;
			m->info.tag = tag;
			m->info.priv = be32_at(payload + 4);
			if (op == IBV_TMH_RNDV) {
				memcpy(m->hdr, payload, sizeof(m->hdr));
				m->rndv_va = be64_at(payload + SWV_TM_HDR_LEN);
				m->rndv_rkey = be32_at(payload + SWV_TM_HDR_LEN + 8);
				m->rndv_len = be32_at(payload + SWV_TM_HDR_LEN + 12);
			}
			pthread_mutex_unlock(&srq->lock);
			return true;
		}
		m->kind = SWV_TM_UNEXPECTED;
	} else if (op == IBV_TMH_NO_TAG) {
		m->kind = SWV_TM_NO_TAG;
	} else {
		m->kind = SWV_TM_PLAIN;
	}
	ok = swv_srq_take_locked(srq, out);
	if (ok && m->kind == SWV_TM_UNEXPECTED)
		tm->unexp_hw++; /* counted only once delivered: an RNR retry matches again */
	pthread_mutex_unlock(&srq->lock);
	return ok;
}
