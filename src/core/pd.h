/* Protection domains and parent domains. Owner: core.
 *
 * A parent domain (ibv_alloc_parent_domain) stands wherever a PD does and protects as
 * the PD it was made from: memory checks compare swv_pd_prot() of both sides, so an MR
 * of the PD serves a QP of its parent domain and the reverse. What it adds: an optional
 * thread domain, a pd_context, and allocators that swverbs' queue rings (QP send and
 * receive rings, SRQ rings, rings of CQs created with it) are taken from. */
#ifndef SWV_CORE_PD_H
#define SWV_CORE_PD_H

#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/list.h"

/*
 * An imported PD (ibv_import_pd) is a swv_pd of its own, for ibpd.context to be the
 * importing context, whose shared names the PD found by handle; to_swv_pd() answers
 * that one, so counts, checks and queue buffers are the original's. Ownership: the
 * original's creator owns the PD (ibv_dealloc_pd of the original is its one free
 * path); the import struct is owned by whoever imported it and freed by
 * ibv_unimport_pd alone, which never touches the original (it may be gone already).
 */
struct swv_pd {
	struct ibv_pd ibpd;
	struct swv_pd *shared;	/* an import: the PD it names; NULL otherwise */
	struct swv_list entry;	/* ibv_alloc_pd PDs: in the primary's pd_list (pd_lock) */
	_Atomic unsigned users; /* MRs, QPs, SRQs, AHs, CQs, parent domains using it:
				 * dealloc is EBUSY while > 0 */
	/* parent domains only (all zero for a PD) */
	struct swv_pd *parent; /* the PD it protects as */
	struct ibv_td *td;
	void *(*alloc)(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
		       uint64_t resource_type);
	void (*free)(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type);
	void *pd_context;
};

/* The PD itself (an import's own struct, too). */
static inline struct swv_pd *swv_pd_raw(struct ibv_pd *pd)
{
	return (struct swv_pd *)pd;
}

/* The PD whose state is used: what an import names, else pd itself. */
static inline struct swv_pd *to_swv_pd(struct ibv_pd *pd)
{
	struct swv_pd *p = (struct swv_pd *)pd;
	return p && p->shared ? p->shared : p;
}

/* The PD whose protection applies: a parent domain's PD, else the PD itself. */
static inline const struct swv_pd *swv_pd_prot(const struct swv_pd *pd)
{
	return pd && pd->parent ? pd->parent : pd;
}

/* A zeroed queue buffer of n * size bytes: from pd's allocator when it is a parent
 * domain with one (*custom = true), else calloc. NULL when out of memory (or the
 * allocator said NULL, or n * size overflows). */
void *swv_pd_buf_alloc(struct swv_pd *pd, size_t n, size_t size, uint64_t type, bool *custom);
/* Give back what swv_pd_buf_alloc gave (p may be NULL). */
void swv_pd_buf_free(struct swv_pd *pd, void *p, uint64_t type, bool custom);

/* verbs_context ops: alloc_parent_domain (NULL + EINVAL: no attr or PD, a PD of another
 * context or itself a parent domain, unknown comp_mask bit, ALLOCATORS without both
 * functions, a TD of another context), alloc_td (EINVAL: comp_mask), dealloc_td (0, or
 * EBUSY while a parent domain holds it). A parent domain is freed by ibv_dealloc_pd. */
struct ibv_pd *swv_alloc_parent_domain(struct ibv_context *context,
				       struct ibv_parent_domain_init_attr *attr);
struct ibv_td *swv_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr);
int swv_dealloc_td(struct ibv_td *td);
/* The part of ibv_dealloc_pd that undoes a parent domain (users already 0). */
void swv_pd_release(struct swv_pd *pd);

#endif
