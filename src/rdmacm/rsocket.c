/*
 * swverbs librdmacm: rsockets, stream sockets over an RC connection of this library
 * (SOCK_STREAM only). Each socket has 16 send and 16 receive buffers of 64 KiB in
 * registered memory; rsend copies into free send buffers and posts SENDs, rrecv copies
 * out of completed receives and reposts them. The receiver's buffers are the window:
 * a sender that finds none posted is held by RNR retries (rnr_retry 7, unbounded), so
 * no credit messages are needed. A zero-length SEND is the end of the stream
 * (rshutdown, rclose). Only swverbs peers speak this: it is not rdma-core's rsocket
 * protocol. See docs/man/swverbs-rdmacm.7.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CM_EXPORT __attribute__((visibility("default")))

#define RS_SEG	 65536
#define RS_NSEG	 16
#define RS_MAXFD 65536
#define RS_NMAP	 8

enum rs_state { RS_NEW, RS_LISTEN, RS_CONNECTED, RS_DEAD };

struct rs {
	int fd; /* the descriptor the application sees (an eventfd, never signalled) */
	enum rs_state state;
	bool nonblock, fin_sent, eof;
	int err;
	struct sockaddr_storage bound;
	bool has_bound;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *scc, *rcc;
	struct ibv_cq *scq, *rcq;
	uint8_t *sbuf, *rbuf;
	struct ibv_mr *smr, *rmr;
	int s_next, s_out;
	/* Completed receives not yet consumed, in order. */
	int rq_idx[RS_NSEG], rq_len[RS_NSEG], rq_head, rq_n;
	int cur_off; /* consumed bytes of the head receive */
	/* riomap: local mappings (registered for remote WRITE) and the peer's. */
	struct rs_map {
		uint64_t off, len, addr;
		uint32_t rkey;
		struct ibv_mr *mr;
	} lmap[RS_NMAP], rmap[RS_NMAP];
	int nlmap, nrmap;
	pthread_mutex_t lock;
};

/* The control message that announces a mapping to the peer (SEND with immediate
 * RS_IMM_IOMAP; data SENDs carry no immediate). */
struct rs_iomap_msg {
	uint64_t off, len, addr;
	uint32_t rkey;
} __attribute__((packed));
#define RS_IMM_IOMAP 1

CM_EXPORT int rclose(int socket);

static struct rs *rs_tab[RS_MAXFD];
static pthread_mutex_t rs_tab_lock = PTHREAD_MUTEX_INITIALIZER;

static struct rs *rs_get(int fd)
{
	if (fd < 0 || fd >= RS_MAXFD)
		return NULL;
	pthread_mutex_lock(&rs_tab_lock);
	struct rs *r = rs_tab[fd];
	pthread_mutex_unlock(&rs_tab_lock);
	return r;
}

static int fail(int e)
{
	errno = e;
	return -1;
}

static struct rs *rs_new(void)
{
	struct rs *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->fd = eventfd(0, EFD_CLOEXEC);
	if (r->fd < 0 || r->fd >= RS_MAXFD) {
		if (r->fd >= 0)
			close(r->fd);
		free(r);
		errno = EMFILE;
		return NULL;
	}
	pthread_mutex_init(&r->lock, NULL);
	pthread_mutex_lock(&rs_tab_lock);
	rs_tab[r->fd] = r;
	pthread_mutex_unlock(&rs_tab_lock);
	return r;
}

CM_EXPORT int rsocket(int domain, int type, int protocol)
{
	if (domain != AF_INET && domain != AF_INET6)
		return fail(EAFNOSUPPORT);
	if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM)
		return fail(ENOSYS); /* datagram rsockets are not built */
	struct rs *r = rs_new();
	if (!r)
		return -1;
	r->nonblock = type & SOCK_NONBLOCK;
	return r->fd;
}

/* Waits for the next CM event of r's channel (blocking). */
static int rs_cm_event(struct rs *r, enum rdma_cm_event_type want, struct rdma_cm_event **out)
{
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(r->ch, &e))
		return -1;
	if (e->event != want) {
		int st = e->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED
			 : e->status < 0		    ? -e->status
							    : ECONNREFUSED;
		rdma_ack_cm_event(e);
		return fail(st);
	}
	if (out)
		*out = e;
	else
		rdma_ack_cm_event(e);
	return 0;
}

static int post_recv(struct rs *r, int i)
{
	struct ibv_sge sge = {(uintptr_t)(r->rbuf + (size_t)i * RS_SEG), RS_SEG, r->rmr->lkey};
	struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
	return ibv_post_recv(r->id->qp, &wr, &bad);
}

/* PD, CQs, QP and buffers on r->id, receives posted. */
static int rs_resources(struct rs *r)
{
	struct ibv_context *ctx = r->id->verbs;
	r->pd = ibv_alloc_pd(ctx);
	r->scc = ibv_create_comp_channel(ctx);
	r->rcc = ibv_create_comp_channel(ctx);
	if (!r->pd || !r->scc || !r->rcc)
		return -1;
	r->scq = ibv_create_cq(ctx, RS_NSEG, r, r->scc, 0);
	r->rcq = ibv_create_cq(ctx, RS_NSEG, r, r->rcc, 0);
	r->sbuf = malloc((size_t)RS_SEG * RS_NSEG);
	r->rbuf = malloc((size_t)RS_SEG * RS_NSEG);
	if (!r->scq || !r->rcq || !r->sbuf || !r->rbuf)
		return fail(ENOMEM);
	r->smr = ibv_reg_mr(r->pd, r->sbuf, (size_t)RS_SEG * RS_NSEG, IBV_ACCESS_LOCAL_WRITE);
	r->rmr = ibv_reg_mr(r->pd, r->rbuf, (size_t)RS_SEG * RS_NSEG, IBV_ACCESS_LOCAL_WRITE);
	if (!r->smr || !r->rmr)
		return -1;
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.send_cq = r->scq;
	a.recv_cq = r->rcq;
	a.cap.max_send_wr = a.cap.max_recv_wr = RS_NSEG;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	a.sq_sig_all = 1;
	if (rdma_create_qp(r->id, r->pd, &a))
		return -1;
	for (int i = 0; i < RS_NSEG; i++)
		if (post_recv(r, i))
			return -1;
	/* The CM channel is only read without blocking from here on (disconnects). */
	fcntl(r->ch->fd, F_SETFL, fcntl(r->ch->fd, F_GETFL) | O_NONBLOCK);
	return 0;
}

static void rs_free_resources(struct rs *r)
{
	if (r->id && r->id->qp)
		rdma_destroy_qp(r->id);
	for (int i = 0; i < r->nlmap; i++)
		ibv_dereg_mr(r->lmap[i].mr);
	r->nlmap = 0;
	if (r->smr)
		ibv_dereg_mr(r->smr);
	if (r->rmr)
		ibv_dereg_mr(r->rmr);
	if (r->scq)
		ibv_destroy_cq(r->scq);
	if (r->rcq)
		ibv_destroy_cq(r->rcq);
	if (r->scc)
		ibv_destroy_comp_channel(r->scc);
	if (r->rcc)
		ibv_destroy_comp_channel(r->rcc);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	free(r->sbuf);
	free(r->rbuf);
	if (r->id)
		rdma_destroy_id(r->id);
	if (r->ch)
		rdma_destroy_event_channel(r->ch);
}

static struct rdma_conn_param rs_param(void)
{
	struct rdma_conn_param p = {.retry_count = 7, .rnr_retry_count = 7};
	return p;
}

/* RNR retries are this stream's flow control (top of file), so a receiver asks for a
 * short RNR wait (12: 0.64 ms) instead of the CM's 655 ms. An RTS->RTS modify: the
 * connection is established, and the receive buffers were posted before it was. */
static int rs_short_rnr(struct rs *r)
{
	struct ibv_qp_attr a = {.min_rnr_timer = 12};
	int ret = ibv_modify_qp(r->id->qp, &a, IBV_QP_MIN_RNR_TIMER);
	if (ret)
		errno = ret;
	return ret;
}

CM_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	if (!addr || addrlen > sizeof(r->bound))
		return fail(EINVAL);
	memcpy(&r->bound, addr, addrlen);
	r->has_bound = true;
	return 0;
}

CM_EXPORT int rlisten(int socket, int backlog)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	if (r->state != RS_NEW)
		return fail(EINVAL);
	struct sockaddr_in any = {.sin_family = AF_INET};
	r->ch = rdma_create_event_channel();
	if (!r->ch || rdma_create_id(r->ch, &r->id, r, RDMA_PS_TCP) ||
	    rdma_bind_addr(r->id,
			   r->has_bound ? (struct sockaddr *)&r->bound : (struct sockaddr *)&any) ||
	    rdma_listen(r->id, backlog))
		return -1;
	r->state = RS_LISTEN;
	return 0;
}

CM_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rs *l = rs_get(socket);
	if (!l)
		return fail(ENOTSOCK);
	if (l->state != RS_LISTEN)
		return fail(EINVAL);
	if (l->nonblock) {
		struct pollfd p = {.fd = l->ch->fd, .events = POLLIN};
		if (poll(&p, 1, 0) != 1)
			return fail(EAGAIN);
	}
	struct rdma_cm_event *e;
	if (rs_cm_event(l, RDMA_CM_EVENT_CONNECT_REQUEST, &e))
		return -1;
	struct rdma_cm_id *cid = e->id;
	rdma_ack_cm_event(e);
	struct rs *r = rs_new();
	if (!r) {
		rdma_reject(cid, NULL, 0);
		rdma_destroy_id(cid);
		return -1;
	}
	r->ch = rdma_create_event_channel();
	r->id = cid;
	cid->context = r;
	struct rdma_conn_param p = rs_param();
	if (!r->ch || rdma_migrate_id(cid, r->ch) || rs_resources(r) || rdma_accept(cid, &p)) {
		rdma_reject(cid, NULL, 0);
		goto bad;
	}
	fcntl(r->ch->fd, F_SETFL, fcntl(r->ch->fd, F_GETFL) & ~O_NONBLOCK);
	int rc = rs_cm_event(r, RDMA_CM_EVENT_ESTABLISHED, NULL);
	fcntl(r->ch->fd, F_SETFL, fcntl(r->ch->fd, F_GETFL) | O_NONBLOCK);
	if (rc || rs_short_rnr(r))
		goto bad;
	r->state = RS_CONNECTED;
	if (addr && addrlen) {
		socklen_t n =
		    *addrlen < sizeof(struct sockaddr_in) ? *addrlen : sizeof(struct sockaddr_in);
		memcpy(addr, rdma_get_peer_addr(cid), n);
		*addrlen = sizeof(struct sockaddr_in);
	}
	return r->fd;
bad:;
	int err = errno;
	rclose(r->fd);
	errno = err ? err : ECONNABORTED;
	return -1;
}

CM_EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	if (r->state != RS_NEW || !addr)
		return fail(r->state == RS_CONNECTED ? EISCONN : EINVAL);
	r->ch = rdma_create_event_channel();
	if (!r->ch || rdma_create_id(r->ch, &r->id, r, RDMA_PS_TCP))
		return -1;
	if (rdma_resolve_addr(r->id, r->has_bound ? (struct sockaddr *)&r->bound : NULL,
			      (struct sockaddr *)addr, 2000) ||
	    rs_cm_event(r, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) || rdma_resolve_route(r->id, 2000) ||
	    rs_cm_event(r, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL))
		goto bad;
	struct rdma_conn_param p = rs_param();
	if (rs_resources(r) || rdma_connect(r->id, &p))
		goto bad;
	fcntl(r->ch->fd, F_SETFL, fcntl(r->ch->fd, F_GETFL) & ~O_NONBLOCK);
	int rc = rs_cm_event(r, RDMA_CM_EVENT_ESTABLISHED, NULL);
	fcntl(r->ch->fd, F_SETFL, fcntl(r->ch->fd, F_GETFL) | O_NONBLOCK);
	if (rc || rs_short_rnr(r))
		goto bad;
	r->state = RS_CONNECTED;
	return 0;
bad:;
	int err = errno;
	rs_free_resources(r);
	r->id = NULL;
	r->ch = NULL;
	r->pd = NULL;
	r->scq = r->rcq = NULL;
	r->scc = r->rcc = NULL;
	r->smr = r->rmr = NULL;
	r->sbuf = r->rbuf = NULL;
	errno = err ? err : ECONNREFUSED;
	return -1;
}

/* A DISCONNECTED (or other) CM event ends the stream. */
static void rs_check_cm(struct rs *r)
{
	struct rdma_cm_event *e;
	while (r->ch && rdma_get_cm_event(r->ch, &e) == 0) {
		if (e->event == RDMA_CM_EVENT_DISCONNECTED) {
			r->eof = true;
			r->state = RS_DEAD;
		}
		rdma_ack_cm_event(e);
	}
}

static void rs_reap_send(struct rs *r)
{
	struct ibv_wc wc[RS_NSEG];
	int n;
	while ((n = ibv_poll_cq(r->scq, RS_NSEG, wc)) > 0)
		for (int i = 0; i < n; i++) {
			r->s_out--;
			if (wc[i].status != IBV_WC_SUCCESS && !r->err)
				r->err = ECONNRESET;
		}
}

static void rs_reap_recv(struct rs *r)
{
	struct ibv_wc wc[RS_NSEG];
	int n;
	while (r->rq_n < RS_NSEG && (n = ibv_poll_cq(r->rcq, RS_NSEG - r->rq_n, wc)) > 0)
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				if (!r->err && wc[i].status != IBV_WC_WR_FLUSH_ERR)
					r->err = ECONNRESET;
				r->eof = true;
				continue;
			}
			if ((wc[i].wc_flags & IBV_WC_WITH_IMM) &&
			    ntohl(wc[i].imm_data) == RS_IMM_IOMAP) {
				struct rs_iomap_msg m;
				int idx = (int)wc[i].wr_id;
				memcpy(&m, r->rbuf + (size_t)idx * RS_SEG, sizeof(m));
				/* A new mapping at an offset replaces the old one there (riostream
				 * maps its buffer again at offset 0 for every transfer size). */
				int j = 0;
				while (j < r->nrmap && r->rmap[j].off != m.off)
					j++;
				if (j < RS_NMAP) {
					r->rmap[j] =
					    (struct rs_map){m.off, m.len, m.addr, m.rkey, NULL};
					if (j == r->nrmap)
						r->nrmap++;
				}
				if (post_recv(r, idx) && !r->err)
					r->err = ECONNRESET;
				continue;
			}
			int k = (r->rq_head + r->rq_n) % RS_NSEG;
			r->rq_idx[k] = (int)wc[i].wr_id;
			r->rq_len[k] = (int)wc[i].byte_len;
			r->rq_n++;
		}
}

/* Blocks until cq's channel signals or the CM channel has an event. */
static void rs_wait(struct rs *r, struct ibv_cq *cq, struct ibv_comp_channel *cc)
{
	ibv_req_notify_cq(cq, 0);
	struct pollfd p[2] = {{.fd = cc->fd, .events = POLLIN},
			      {.fd = r->ch->fd, .events = POLLIN}};
	/* Completions that came before the arm are found by the caller's next poll. */
	if (poll(p, 2, 100) > 0 && (p[0].revents & POLLIN)) {
		struct ibv_cq *ecq;
		void *ectx;
		if (ibv_get_cq_event(cc, &ecq, &ectx) == 0)
			ibv_ack_cq_events(ecq, 1);
	}
}

static ssize_t rs_send(struct rs *r, const void *buf, size_t len, int flags)
{
	if (r->state != RS_CONNECTED)
		return fail(r->state == RS_DEAD ? EPIPE : ENOTCONN);
	bool nb = r->nonblock || (flags & MSG_DONTWAIT);
	size_t done = 0;
	pthread_mutex_lock(&r->lock);
	while (done < len || (len == 0 && !done)) {
		rs_reap_send(r);
		if (r->err) {
			pthread_mutex_unlock(&r->lock);
			return done ? (ssize_t)done : fail(r->err);
		}
		if (r->s_out == RS_NSEG) {
			if (done || nb)
				break;
			rs_check_cm(r);
			if (r->state == RS_DEAD) {
				pthread_mutex_unlock(&r->lock);
				return fail(EPIPE);
			}
			rs_wait(r, r->scq, r->scc);
			continue;
		}
		size_t n = len - done < RS_SEG ? len - done : RS_SEG;
		uint8_t *seg = r->sbuf + (size_t)r->s_next * RS_SEG;
		memcpy(seg, (const uint8_t *)buf + done, n);
		struct ibv_sge sge = {(uintptr_t)seg, (uint32_t)n, r->smr->lkey};
		struct ibv_send_wr wr = {.wr_id = (uint64_t)r->s_next,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		if (ibv_post_send(r->id->qp, &wr, &bad)) {
			pthread_mutex_unlock(&r->lock);
			return done ? (ssize_t)done : fail(ECONNRESET);
		}
		r->s_next = (r->s_next + 1) % RS_NSEG;
		r->s_out++;
		done += n;
		if (len == 0)
			break;
	}
	pthread_mutex_unlock(&r->lock);
	if (!done && len)
		return fail(EAGAIN);
	return (ssize_t)done;
}

static ssize_t rs_recv(struct rs *r, void *buf, size_t len, int flags)
{
	if (r->state == RS_NEW || r->state == RS_LISTEN)
		return fail(ENOTCONN);
	bool nb = r->nonblock || (flags & MSG_DONTWAIT);
	size_t done = 0;
	pthread_mutex_lock(&r->lock);
	for (;;) {
		rs_reap_recv(r);
		while (r->rq_n && done < len) {
			int k = r->rq_head, idx = r->rq_idx[k], avail = r->rq_len[k] - r->cur_off;
			if (r->rq_len[k] == 0) { /* end of stream */
				r->eof = true;
				break;
			}
			size_t n = (size_t)avail < len - done ? (size_t)avail : len - done;
			memcpy((uint8_t *)buf + done, r->rbuf + (size_t)idx * RS_SEG + r->cur_off,
			       n);
			done += n;
			r->cur_off += (int)n;
			if (r->cur_off == r->rq_len[k]) {
				r->cur_off = 0;
				r->rq_head = (r->rq_head + 1) % RS_NSEG;
				r->rq_n--;
				if (post_recv(r, idx) && !r->err)
					r->err = ECONNRESET;
			}
		}
		if (done || r->eof)
			break;
		if (r->err) {
			pthread_mutex_unlock(&r->lock);
			return fail(r->err);
		}
		rs_check_cm(r);
		if (r->eof)
			continue; /* take what already arrived first */
		if (nb) {
			pthread_mutex_unlock(&r->lock);
			return fail(EAGAIN);
		}
		rs_wait(r, r->rcq, r->rcc);
	}
	pthread_mutex_unlock(&r->lock);
	return (ssize_t)done;
}

CM_EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	if (!len)
		return 0;
	return rs_send(r, buf, len, flags);
}

CM_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	return rs_recv(r, buf, len, flags);
}

CM_EXPORT ssize_t rread(int socket, void *buf, size_t count)
{
	return rrecv(socket, buf, count, 0);
}

CM_EXPORT ssize_t rwrite(int socket, const void *buf, size_t count)
{
	return rsend(socket, buf, count, 0);
}

CM_EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr,
			    socklen_t *addrlen)
{
	return rrecv(socket, buf, len, flags);
}

CM_EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
			  const struct sockaddr *dest_addr, socklen_t addrlen)
{
	return rsend(socket, buf, len, flags);
}

CM_EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	ssize_t t = 0;
	for (int i = 0; i < iovcnt; i++) {
		ssize_t n = rrecv(socket, iov[i].iov_base, iov[i].iov_len, t ? MSG_DONTWAIT : 0);
		if (n < 0)
			return t ? t : -1;
		t += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return t;
}

CM_EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	ssize_t t = 0;
	for (int i = 0; i < iovcnt; i++) {
		ssize_t n = rsend(socket, iov[i].iov_base, iov[i].iov_len, t ? MSG_DONTWAIT : 0);
		if (n < 0)
			return t ? t : -1;
		t += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return t;
}

CM_EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	return rreadv(socket, msg->msg_iov, (int)msg->msg_iovlen);
}

CM_EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	return rwritev(socket, msg->msg_iov, (int)msg->msg_iovlen);
}

static void send_fin(struct rs *r)
{
	if (r->state != RS_CONNECTED || r->fin_sent)
		return;
	r->fin_sent = true;
	/* A zero-length SEND; wait (bounded) for a free buffer slot to post it. */
	for (int i = 0; i < 1000; i++) {
		pthread_mutex_lock(&r->lock);
		rs_reap_send(r);
		bool room = r->s_out < RS_NSEG;
		if (room) {
			struct ibv_send_wr wr = {.wr_id = (uint64_t)r->s_next,
						 .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_SIGNALED},
					   *bad;
			if (!ibv_post_send(r->id->qp, &wr, &bad)) {
				r->s_next = (r->s_next + 1) % RS_NSEG;
				r->s_out++;
			}
		}
		pthread_mutex_unlock(&r->lock);
		if (room || r->err)
			return;
		rs_wait(r, r->scq, r->scc);
	}
}

CM_EXPORT int rshutdown(int socket, int how)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	if (r->state != RS_CONNECTED && r->state != RS_DEAD)
		return fail(ENOTCONN);
	if (how == SHUT_WR || how == SHUT_RDWR)
		send_fin(r);
	return 0;
}

CM_EXPORT int rclose(int socket)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(EBADF);
	if (r->state == RS_CONNECTED) {
		send_fin(r);
		/* Let the queued data and the FIN reach the peer before the QP goes. */
		for (int i = 0; i < 200 && r->s_out > 0 && !r->err; i++) {
			rs_reap_send(r);
			rs_check_cm(r); /* a peer that left takes nothing more */
			if (r->state == RS_DEAD)
				break;
			if (r->s_out > 0)
				rs_wait(r, r->scq, r->scc);
		}
		/* A stream that closes with data its live peer may not have: say so, since
		 * the program cannot learn it any more (close returns 0, as for a socket). */
		if (r->state != RS_DEAD && (r->s_out > 0 || r->err))
			fprintf(stderr,
				"swverbs rsocket %d: closed with %d sends not acknowledged (%s): the "
				"peer may not have all the data\n",
				socket, r->s_out, r->err ? strerror(r->err) : "timed out");
		rdma_disconnect(r->id);
	}
	pthread_mutex_lock(&rs_tab_lock);
	rs_tab[r->fd] = NULL;
	pthread_mutex_unlock(&rs_tab_lock);
	rs_free_resources(r);
	close(r->fd);
	pthread_mutex_destroy(&r->lock);
	free(r);
	return 0;
}

CM_EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	if (!r->id || r->state != RS_CONNECTED)
		return fail(ENOTCONN);
	socklen_t n = *addrlen < sizeof(struct sockaddr_in) ? *addrlen : sizeof(struct sockaddr_in);
	memcpy(addr, rdma_get_peer_addr(r->id), n);
	*addrlen = sizeof(struct sockaddr_in);
	return 0;
}

CM_EXPORT int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	socklen_t n = *addrlen < sizeof(struct sockaddr_in) ? *addrlen : sizeof(struct sockaddr_in);
	if (r->id)
		memcpy(addr, rdma_get_local_addr(r->id), n);
	else
		memcpy(addr, &r->bound, n);
	*addrlen = sizeof(struct sockaddr_in);
	return 0;
}

/* Options are accepted and have no effect: buffering is fixed (16 x 64 KiB). */
CM_EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	return rs_get(socket) ? 0 : fail(ENOTSOCK);
}

CM_EXPORT int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	if (!optval || !optlen || *optlen < sizeof(int))
		return fail(EINVAL);
	int v = 0;
	if (level == SOL_SOCKET && optname == SO_ERROR)
		v = r->err;
	else if (level == SOL_SOCKET && (optname == SO_RCVBUF || optname == SO_SNDBUF))
		v = RS_SEG * RS_NSEG;
	else if (level == IPPROTO_TCP && optname == TCP_NODELAY)
		v = 1;
	memcpy(optval, &v, sizeof(v));
	*optlen = sizeof(v);
	return 0;
}

CM_EXPORT int rfcntl(int socket, int cmd, ...)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	va_list ap;
	va_start(ap, cmd);
	long arg = va_arg(ap, long);
	va_end(ap);
	switch (cmd) {
	case F_GETFL:
		return O_RDWR | (r->nonblock ? O_NONBLOCK : 0);
	case F_SETFL:
		r->nonblock = arg & O_NONBLOCK;
		return 0;
	default:
		return fail(ENOSYS);
	}
}

/* Readiness of an rsocket without blocking. */
static short rs_events(struct rs *r, short want)
{
	short ev = 0;
	if (r->state == RS_LISTEN) {
		struct pollfd p = {.fd = r->ch->fd, .events = POLLIN};
		if (poll(&p, 1, 0) == 1)
			ev |= POLLIN;
		return ev & want;
	}
	if (r->state == RS_NEW)
		return POLLOUT & want;
	pthread_mutex_lock(&r->lock);
	rs_reap_recv(r);
	rs_reap_send(r);
	rs_check_cm(r);
	if (r->rq_n || r->eof)
		ev |= POLLIN;
	if (r->state == RS_CONNECTED && r->s_out < RS_NSEG)
		ev |= POLLOUT;
	/* Hang-up only once nothing is left to read: data that arrived before the
	 * peer's disconnect is still delivered (rstream treats POLLHUP as an error). */
	if (r->eof && !r->rq_n)
		ev |= POLLHUP;
	if (r->err)
		ev |= POLLERR;
	pthread_mutex_unlock(&r->lock);
	return ev & (want | POLLHUP | POLLERR);
}

CM_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct pollfd *w = calloc(nfds * 3 + 1, sizeof(*w));
	if (!w)
		return fail(ENOMEM);
	for (;;) {
		int ready = 0;
		nfds_t nw = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			struct rs *r = rs_get(fds[i].fd);
			fds[i].revents = 0;
			if (r) {
				fds[i].revents = rs_events(r, fds[i].events);
			} else {
				w[0] = fds[i];
				if (poll(w, 1, 0) > 0)
					fds[i].revents = w[0].revents;
			}
			if (fds[i].revents)
				ready++;
		}
		if (ready || timeout == 0) {
			free(w);
			return ready;
		}
		/* Sleep on what can change: the ordinary fds, the rsockets' completion and
		 * CM channels (armed; what came before the arm is seen by the next pass). */
		for (nfds_t i = 0; i < nfds; i++) {
			struct rs *r = rs_get(fds[i].fd);
			if (!r) {
				w[nw] = fds[i];
				w[nw++].revents = 0;
				continue;
			}
			if (r->ch)
				w[nw++] = (struct pollfd){.fd = r->ch->fd, .events = POLLIN};
			if (r->state == RS_CONNECTED) {
				ibv_req_notify_cq(r->rcq, 0);
				ibv_req_notify_cq(r->scq, 0);
				w[nw++] = (struct pollfd){.fd = r->rcc->fd, .events = POLLIN};
				w[nw++] = (struct pollfd){.fd = r->scc->fd, .events = POLLIN};
			}
		}
		int left = 100;
		if (timeout > 0) {
			struct timespec t;
			clock_gettime(CLOCK_MONOTONIC, &t);
			long el =
			    (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
			if (el >= timeout) {
				free(w);
				return 0;
			}
			left = timeout - el < 100 ? (int)(timeout - el) : 100;
		}
		if (poll(w, nw, left) < 0 && errno != EINTR) {
			free(w);
			return -1;
		}
		for (nfds_t i = 0; i < nfds; i++) {
			struct rs *r = rs_get(fds[i].fd);
			if (!r || r->state != RS_CONNECTED)
				continue;
			struct ibv_comp_channel *cc[2] = {r->rcc, r->scc};
			for (int k = 0; k < 2; k++) {
				struct pollfd p = {.fd = cc[k]->fd, .events = POLLIN};
				struct ibv_cq *ecq;
				void *ectx;
				if (poll(&p, 1, 0) == 1 &&
				    ibv_get_cq_event(cc[k], &ecq, &ectx) == 0)
					ibv_ack_cq_events(ecq, 1);
			}
		}
	}
}

CM_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		      struct timeval *timeout)
{
	struct pollfd *p = calloc(nfds > 0 ? nfds : 1, sizeof(*p));
	if (!p)
		return fail(ENOMEM);
	int n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (readfds && FD_ISSET(fd, readfds))
			ev |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			ev |= POLLOUT;
		if (exceptfds && FD_ISSET(fd, exceptfds))
			ev |= POLLPRI;
		if (ev)
			p[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	int to = timeout ? (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
	int rc = rpoll(p, (nfds_t)n, to);
	if (rc >= 0) {
		rc = 0;
		if (readfds)
			FD_ZERO(readfds);
		if (writefds)
			FD_ZERO(writefds);
		if (exceptfds)
			FD_ZERO(exceptfds);
		for (int i = 0; i < n; i++) {
			if (readfds && (p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				FD_SET(p[i].fd, readfds), rc++;
			if (writefds && (p[i].revents & POLLOUT))
				FD_SET(p[i].fd, writefds), rc++;
			if (exceptfds && (p[i].revents & POLLPRI))
				FD_SET(p[i].fd, exceptfds), rc++;
		}
	}
	free(p);
	return rc;
}

/* Posts one send-side work request from a free send segment (waits for one). */
static int rs_post_seg(struct rs *r, const void *data, size_t n, enum ibv_wr_opcode op,
		       uint32_t imm, uint64_t raddr, uint32_t rkey)
{
	for (;;) {
		rs_reap_send(r);
		if (r->err)
			return fail(r->err);
		if (r->s_out < RS_NSEG)
			break;
		rs_check_cm(r);
		if (r->state == RS_DEAD)
			return fail(EPIPE);
		rs_wait(r, r->scq, r->scc);
	}
	uint8_t *seg = r->sbuf + (size_t)r->s_next * RS_SEG;
	memcpy(seg, data, n);
	struct ibv_sge sge = {(uintptr_t)seg, (uint32_t)n, r->smr->lkey};
	struct ibv_send_wr wr = {.wr_id = (uint64_t)r->s_next,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(r->id->qp, &wr, &bad))
		return fail(ECONNRESET);
	r->s_next = (r->s_next + 1) % RS_NSEG;
	r->s_out++;
	return 0;
}

/* riomap: buf becomes the target of the peer's riowrite at [offset, offset + len)
 * (offset -1: after the mappings made so far). Announced to the peer in band. */
CM_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	if (r->state != RS_CONNECTED)
		return fail(ENOTCONN);
	if (!(prot & PROT_WRITE) || !buf || !len)
		return fail(EINVAL);
	pthread_mutex_lock(&r->lock);
	if (r->nlmap == RS_NMAP) {
		pthread_mutex_unlock(&r->lock);
		return fail(ENOMEM);
	}
	if (offset == -1) {
		offset = 0;
		for (int i = 0; i < r->nlmap; i++)
			if ((off_t)(r->lmap[i].off + r->lmap[i].len) > offset)
				offset = (off_t)(r->lmap[i].off + r->lmap[i].len);
	}
	struct ibv_mr *mr =
	    ibv_reg_mr(r->pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr) {
		pthread_mutex_unlock(&r->lock);
		return -1;
	}
	r->lmap[r->nlmap++] = (struct rs_map){(uint64_t)offset, len, (uintptr_t)buf, mr->rkey, mr};
	struct rs_iomap_msg m = {(uint64_t)offset, len, (uintptr_t)buf, mr->rkey};
	int rc = rs_post_seg(r, &m, sizeof(m), IBV_WR_SEND_WITH_IMM, RS_IMM_IOMAP, 0, 0);
	pthread_mutex_unlock(&r->lock);
	return rc ? -1 : offset;
}

CM_EXPORT int riounmap(int socket, void *buf, size_t len)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return fail(ENOTSOCK);
	pthread_mutex_lock(&r->lock);
	for (int i = 0; i < r->nlmap; i++)
		if (r->lmap[i].addr == (uintptr_t)buf) {
			ibv_dereg_mr(r->lmap[i].mr);
			r->lmap[i] = r->lmap[--r->nlmap];
			pthread_mutex_unlock(&r->lock);
			return 0;
		}
	pthread_mutex_unlock(&r->lock);
	return fail(EINVAL);
}

/* riowrite: RDMA WRITE of buf into the peer's mapping at offset, ordered with the
 * socket's rsend data. Waits until the peer's riomap announcement has arrived. */
CM_EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	struct rs *r = rs_get(socket);
	if (!r)
		return (size_t)fail(ENOTSOCK);
	if (r->state != RS_CONNECTED)
		return (size_t)fail(ENOTCONN);
	pthread_mutex_lock(&r->lock);
	struct rs_map *m = NULL;
	for (;;) {
		rs_reap_recv(r);
		for (int i = 0; i < r->nrmap && !m; i++)
			if ((uint64_t)offset >= r->rmap[i].off &&
			    (uint64_t)offset + count <= r->rmap[i].off + r->rmap[i].len)
				m = &r->rmap[i];
		if (m)
			break;
		rs_check_cm(r);
		if (r->err || r->state == RS_DEAD || r->rq_n == RS_NSEG) {
			pthread_mutex_unlock(&r->lock);
			return (size_t)fail(r->err ? r->err : EINVAL);
		}
		if (r->nonblock || (flags & MSG_DONTWAIT)) {
			pthread_mutex_unlock(&r->lock);
			return (size_t)fail(EAGAIN);
		}
		rs_wait(r, r->rcq, r->rcc);
	}
	size_t done = 0;
	while (done < count) {
		size_t n = count - done < RS_SEG ? count - done : RS_SEG;
		uint64_t raddr = m->addr + ((uint64_t)offset - m->off) + done;
		if (rs_post_seg(r, (const uint8_t *)buf + done, n, IBV_WR_RDMA_WRITE, 0, raddr,
				m->rkey))
			break;
		done += n;
	}
	pthread_mutex_unlock(&r->lock);
	return done ? done : (size_t)-1;
}
