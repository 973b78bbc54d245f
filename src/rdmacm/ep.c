/*
 * swverbs librdmacm: rdma_getaddrinfo, the endpoint helpers (rdma_create_ep and
 * friends), SRQs on an id, and the rsockets calls not built (repoll_*: ENOSYS).
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>

#include "cm_int.h"

#define CM_EXPORT __attribute__((visibility("default")))

int swv_cm_ep_passive(struct rdma_cm_id *idp, struct ibv_pd *pd, struct ibv_qp_init_attr *attr);

static struct sockaddr *dup_addr(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr *d = malloc(len);
	if (d)
		memcpy(d, sa, len);
	return d;
}

/* Prefers an IPv4 answer: swverbs devices have IPv4 addresses. */
static const struct addrinfo *pick(const struct addrinfo *ai)
{
	for (const struct addrinfo *a = ai; a; a = a->ai_next)
		if (a->ai_family == AF_INET)
			return a;
	return ai;
}

CM_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
			       const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	bool from_hints = !node && !service && hints &&
			  ((hints->ai_src_addr && hints->ai_src_len) ||
			   (hints->ai_dst_addr && hints->ai_dst_len));
	if (!res || (!node && !service && !from_hints)) {
		errno = EINVAL;
		return EAI_NONAME;
	}
	struct rdma_addrinfo *r = calloc(1, sizeof(*r));
	if (!r) {
		errno = ENOMEM;
		return EAI_MEMORY;
	}
	int flags = hints ? hints->ai_flags : 0;
	if (from_hints) {
		/* No name to look up: the answer is the addresses the hints carry, as
		 * librdmacm gives it (pyverbs builds a multicast group's address so). */
		r->ai_flags = flags;
		r->ai_port_space = hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
		r->ai_qp_type = hints->ai_qp_type		  ? hints->ai_qp_type
				: r->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD
								  : IBV_QPT_RC;
		if (hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = dup_addr(hints->ai_src_addr, hints->ai_src_len);
			r->ai_src_len = r->ai_src_addr ? hints->ai_src_len : 0;
			r->ai_family = hints->ai_src_addr->sa_family;
		}
		if (hints->ai_dst_addr && hints->ai_dst_len) {
			r->ai_dst_addr = dup_addr(hints->ai_dst_addr, hints->ai_dst_len);
			r->ai_dst_len = r->ai_dst_addr ? hints->ai_dst_len : 0;
			r->ai_family = hints->ai_dst_addr->sa_family;
		}
		if ((hints->ai_src_len && !r->ai_src_addr) ||
		    (hints->ai_dst_len && !r->ai_dst_addr)) {
			rdma_freeaddrinfo(r);
			errno = ENOMEM;
			return EAI_MEMORY;
		}
		*res = r;
		return 0;
	}
	struct addrinfo h = {.ai_socktype = SOCK_STREAM};
	h.ai_family = hints && hints->ai_family ? hints->ai_family : AF_UNSPEC;
	if (flags & RAI_PASSIVE)
		h.ai_flags |= AI_PASSIVE;
	if (flags & RAI_NUMERICHOST)
		h.ai_flags |= AI_NUMERICHOST;
	struct addrinfo *ai = NULL;
	int rc = getaddrinfo(node, service, &h, &ai);
	if (rc) {
		free(r);
		return rc;
	}
	const struct addrinfo *a = pick(ai);
	r->ai_flags = flags;
	r->ai_family = a->ai_family;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
	if (hints && hints->ai_qp_type)
		r->ai_qp_type = hints->ai_qp_type;
	else
		r->ai_qp_type = r->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
	if (hints && !hints->ai_port_space && hints->ai_qp_type == IBV_QPT_UD)
		r->ai_port_space = RDMA_PS_UDP;
	struct sockaddr *sa = dup_addr(a->ai_addr, a->ai_addrlen);
	if (!sa) {
		freeaddrinfo(ai);
		free(r);
		return EAI_MEMORY;
	}
	if (flags & RAI_PASSIVE) {
		r->ai_src_addr = sa;
		r->ai_src_len = a->ai_addrlen;
	} else {
		r->ai_dst_addr = sa;
		r->ai_dst_len = a->ai_addrlen;
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = dup_addr(hints->ai_src_addr, hints->ai_src_len);
			r->ai_src_len = r->ai_src_addr ? hints->ai_src_len : 0;
		}
	}
	if (a->ai_canonname)
		r->ai_dst_canonname = strdup(a->ai_canonname);
	freeaddrinfo(ai);
	*res = r;
	return 0;
}

CM_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = n;
	}
}

CM_EXPORT int rdma_create_ep(struct rdma_cm_id **idp, struct rdma_addrinfo *res, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	if (!idp || !res) {
		errno = EINVAL;
		return -1;
	}
	struct rdma_cm_id *id;
	if (rdma_create_id(NULL, &id, NULL, (enum rdma_port_space)res->ai_port_space))
		return -1;
	int rc;
	/* The QP type comes from the address info, as librdmacm does it. */
	if (qp_init_attr)
		qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
	if (res->ai_flags & RAI_PASSIVE) {
		rc = rdma_bind_addr(id, res->ai_src_addr);
		if (!rc)
			rc = swv_cm_ep_passive(id, pd, qp_init_attr);
	} else {
		rc = rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, 2000);
		if (!rc)
			rc = rdma_resolve_route(id, 2000);
		if (!rc && qp_init_attr)
			rc = rdma_create_qp(id, pd, qp_init_attr);
	}
	if (rc) {
		int err = errno;
		rdma_destroy_id(id);
		errno = err;
		return -1;
	}
	*idp = id;
	return 0;
}

CM_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id);

CM_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

CM_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	if (!id || !attr || !id->verbs || id->srq) {
		errno = EINVAL;
		return -1;
	}
	struct ibv_srq_init_attr_ex a = *attr;
	if (!(a.comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a.pd) {
		a.pd = id->pd;
		if (!a.pd) {
			a.pd = ibv_alloc_pd(id->verbs);
			if (!a.pd)
				return -1;
			id->pd = a.pd;
		}
		a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (!(a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) {
		a.srq_type = IBV_SRQT_BASIC;
		a.comp_mask |= IBV_SRQ_INIT_ATTR_TYPE;
	}
	struct ibv_srq *srq = ibv_create_srq_ex(id->verbs, &a);
	if (!srq)
		return -1;
	id->srq = srq;
	attr->attr = a.attr;
	return 0;
}

CM_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
			      struct ibv_srq_init_attr *attr)
{
	if (!attr) {
		errno = EINVAL;
		return -1;
	}
	struct ibv_srq_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	a.srq_context = attr->srq_context;
	a.attr = attr->attr;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	a.srq_type = IBV_SRQT_BASIC;
	if (pd) {
		a.pd = pd;
		a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	int rc = rdma_create_srq_ex(id, &a);
	if (!rc)
		attr->attr = a.attr;
	return rc;
}

CM_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id || !id->srq)
		return;
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

/* rdma_resolve_addrinfo: resolved at once, the answer kept on the id. */
CM_EXPORT int rdma_resolve_addrinfo(struct rdma_cm_id *idp, const char *node, const char *service,
				    const struct rdma_addrinfo *hints)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	struct rdma_addrinfo *ai = NULL;
	int rc = rdma_getaddrinfo(node, service, hints, &ai);
	rdma_freeaddrinfo((struct rdma_addrinfo *)id->ai);
	id->ai = rc ? NULL : ai;
	return rdma_write_cm_event(
	    idp, rc ? RDMA_CM_EVENT_ADDRINFO_ERROR : RDMA_CM_EVENT_ADDRINFO_RESOLVED,
	    rc ? -EHOSTUNREACH : 0, 0);
}

CM_EXPORT int rdma_query_addrinfo(struct rdma_cm_id *idp, struct rdma_addrinfo **info)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id || !info) {
		errno = EINVAL;
		return -1;
	}
	if (!id->ai) {
		errno = ENOENT;
		return -1;
	}
	const struct rdma_addrinfo *a = id->ai;
	struct rdma_addrinfo h = {.ai_flags = a->ai_flags | RAI_NUMERICHOST,
				  .ai_family = a->ai_family,
				  .ai_qp_type = a->ai_qp_type,
				  .ai_port_space = a->ai_port_space};
	char host[64], serv[16];
	const struct sockaddr *sa = a->ai_dst_addr ? a->ai_dst_addr : a->ai_src_addr;
	socklen_t len = a->ai_dst_addr ? a->ai_dst_len : a->ai_src_len;
	if (getnameinfo(sa, len, host, sizeof(host), serv, sizeof(serv),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		errno = EINVAL;
		return -1;
	}
	if (rdma_getaddrinfo(host, serv, &h, info)) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* ---- rsockets calls not built (rsocket.c has the stream sockets) ------------------- */

#define RS_NOSYS(decl)                                                                             \
	CM_EXPORT decl                                                                             \
	{                                                                                          \
		errno = ENOSYS;                                                                    \
		return -1;                                                                         \
	}

RS_NOSYS(int repoll_create(int size))
RS_NOSYS(int repoll_ctl(int epfd, int op, int fd, void *event))
RS_NOSYS(int repoll_wait(int epfd, void *events, int maxevents, int timeout))
