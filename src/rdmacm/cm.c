/*
 * swverbs librdmacm: the connection manager. Ids and event channels, the UDP CM
 * exchange (REQ/MRA/REP/RTU, REJ, DREQ/DREP, SIDR, keepalive) with its timers, and the
 * QP transitions the kernel's rdma_cm makes, all over the public verbs API.
 * Protocol: docs/wire.md, "Connection manager"; design: docs/design.md.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "cm_int.h"

#define CM_EXPORT __attribute__((visibility("default")))

/* Timers (docs/wire.md). */
#define CM_RTO_INIT_MS 250
#define CM_RTO_MAX_MS  2000
#define CM_REQ_TRIES   15 /* ~26 s, then UNREACHABLE */
#define CM_DREQ_TRIES  8
#define CM_MRA_MAX_MS  60000
#define CM_KA_MS       1000
#define CM_KA_MISSED   10
#define CM_ACK_TIMEOUT 16 /* 4.096 us * 2^16 = 268 ms */
/* The responder's RNR NAK timer the kernel's CM sets at RTR: 0, which the IB encoding
 * makes 655.36 ms. Programs that lean on RNR retries (pyverbs posts a receive only after
 * its own send completed) then survive a descheduled peer, as they do on hardware. */
#define CM_MIN_RNR 0
/* A port bound (or left by its listener) this recently may be about to listen. */
#define CM_LISTEN_GRACE_MS 2000

static pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cm_cond = PTHREAD_COND_INITIALIZER;
static struct cm_id *cm_ids;
static struct cm_sock *cm_socks;
static struct cm_dev *cm_devs;
static int cm_ndevs = -1;
static int cm_epfd = -1, cm_wakefd = -1;
static bool cm_thread_started;
static uint32_t cm_next_comm;

/* libswverbs' private service (src/api/cm_settle.c): what the QPs of ctx sent before
 * a DREQ leaves first, and what reached them before a DISCONNECTED is processed. */
extern void swv_cm_settle(struct ibv_context *ctx);

/* Whether id has a connection a DREQ would end (cm_lock held). */
static bool connected_locked(const struct cm_id *id)
{
	return id->state == CM_ESTABLISHED || id->state == CM_REP_SENT || id->state == CM_REP_RCVD;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint32_t rand32(void)
{
	uint32_t v = 0;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, &v, sizeof(v)) != sizeof(v))
			v = 0;
		close(fd);
	}
	if (!v)
		v = (uint32_t)now_ms() * 2654435761u ^ (uint32_t)getpid();
	return v;
}

/* ---- devices ---------------------------------------------------------------- */

/* IPv4 address of a swverbs GID: fe80::0253:57fe:a.b.c.d (IB) or ::ffff:a.b.c.d
 * (RoCE). Any other GID is not a swverbs port. */
static bool gid_to_ip(const uint8_t *g, struct in_addr *ip)
{
	static const uint8_t ib[12] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x53, 0x57, 0xfe};
	static const uint8_t roce[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (memcmp(g, ib, 12) && memcmp(g, roce, 12))
		return false;
	memcpy(&ip->s_addr, g + 12, 4);
	return true;
}

/* Opens every swverbs device once per process (librdmacm keeps its contexts open too:
 * the ids' verbs pointers are these). Caller holds cm_lock. */
static int devs_init_locked(void)
{
	if (cm_ndevs >= 0)
		return cm_ndevs;
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	cm_ndevs = 0;
	if (!list)
		return 0;
	cm_devs = calloc(n ? n : 1, sizeof(*cm_devs));
	for (int i = 0; cm_devs && i < n; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		if (!ctx)
			continue;
		struct cm_dev *d = &cm_devs[cm_ndevs];
		struct ibv_port_attr pa;
		struct ibv_device_attr da;
		if (ibv_query_gid(ctx, 1, 0, &d->gid) || !gid_to_ip(d->gid.raw, &d->ip) ||
		    ibv_query_port(ctx, 1, &pa) || ibv_query_device(ctx, &da)) {
			ibv_close_device(ctx);
			continue;
		}
		d->ctx = ctx;
		d->lid = pa.lid;
		d->link_layer = pa.link_layer;
		d->mtu = pa.active_mtu;
		d->max_rd_atom = da.max_qp_rd_atom;
		d->max_init_rd_atom = da.max_qp_init_rd_atom;
		cm_ndevs++;
	}
	/* The contexts hold their devices; the list itself is no longer needed. */
	ibv_free_device_list(list);
	return cm_ndevs;
}

static struct cm_dev *dev_by_ip(struct in_addr ip)
{
	for (int i = 0; i < cm_ndevs; i++)
		if (cm_devs[i].ip.s_addr == ip.s_addr)
			return &cm_devs[i];
	return NULL;
}

CM_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	pthread_mutex_lock(&cm_lock);
	int n = devs_init_locked();
	struct ibv_context **l = calloc(n + 1, sizeof(*l));
	for (int i = 0; l && i < n; i++)
		l[i] = cm_devs[i].ctx;
	pthread_mutex_unlock(&cm_lock);
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	if (num_devices)
		*num_devices = n;
	return l;
}

CM_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

static struct ibv_pd *dev_pd(struct cm_dev *d)
{
	if (!d->pd)
		d->pd = ibv_alloc_pd(d->ctx);
	return d->pd;
}

/* ---- events and channels ------------------------------------------------------ */

static void chan_push(struct cm_channel *c, struct cm_event *e)
{
	uint64_t one = 1;
	e->chan = c;
	e->next = NULL;
	if (c->tail)
		c->tail->next = e;
	else
		c->head = e;
	c->tail = e;
	if (write(c->ch.fd, &one, sizeof(one)) != sizeof(one)) {
		/* eventfd overflow is impossible at these counts */
	}
}

static struct cm_event *ev_new(struct cm_id *id, enum rdma_cm_event_type type, int status)
{
	struct cm_event *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->ev.id = &id->id;
	e->ev.event = type;
	e->ev.status = status;
	e->owner = id;
	return e;
}

static void ev_queue(struct cm_event *e)
{
	e->owner->events_out++;
	struct cm_id *target = (struct cm_id *)e->ev.id;
	struct cm_channel *c = e->ev.listen_id ? e->owner->chan : target->chan;
	chan_push(c, e);
}

static void ev_simple(struct cm_id *id, enum rdma_cm_event_type type, int status)
{
	struct cm_event *e = ev_new(id, type, status);
	if (e)
		ev_queue(e);
}

static void ev_set_conn_pdata(struct cm_event *e, const struct swcm_msg *m, unsigned report)
{
	unsigned n = m->pdata_len < report ? m->pdata_len : report;
	memcpy(e->pdata, m->pdata, n);
	e->ev.param.conn.private_data = e->pdata;
	e->ev.param.conn.private_data_len = (uint8_t)report;
}

static struct cm_channel *chan_new(void)
{
	struct cm_channel *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (c->ch.fd < 0) {
		free(c);
		return NULL;
	}
	return c;
}

/* Destroyed channels are kept, fd open, for a while: with the kernel's rdma_cm a thread
 * still blocked in (or just entering) rdma_get_cm_event on a channel another thread
 * destroys stays blocked, since close() does not wake a reader; programs rely on it
 * (rping's CM thread is blocked there while main destroys the channel and returns). A
 * freed channel would make that thread read a closed fd (EBADF: rping exits 255) or
 * freed memory. So a destroyed channel keeps its fd, which nobody signals again, until
 * CHAN_RETIRED later destroys have passed; then it is closed and freed. Under cm_lock. */
#define CHAN_RETIRED 16
static struct cm_channel *retired[CHAN_RETIRED];
static unsigned nretired;

static void chan_free(struct cm_channel *c)
{
	pthread_mutex_lock(&cm_lock);
	while (c->head) {
		struct cm_event *e = c->head;
		c->head = e->next;
		free(e);
	}
	c->tail = NULL;
	struct cm_channel *old = retired[nretired % CHAN_RETIRED];
	retired[nretired++ % CHAN_RETIRED] = c;
	pthread_mutex_unlock(&cm_lock);
	if (old) {
		close(old->ch.fd);
		free(old);
	}
}

CM_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	pthread_mutex_lock(&cm_lock);
	int n = devs_init_locked();
	pthread_mutex_unlock(&cm_lock);
	if (n <= 0) {
		errno = ENODEV;
		return NULL;
	}
	struct cm_channel *c = chan_new();
	return c ? &c->ch : NULL;
}

CM_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (channel)
		chan_free((struct cm_channel *)channel);
}

/* The join event reaches the application: attach the id's QP to the group now, as
 * librdmacm does (a QP created after the join but before the event is attached too;
 * a send-only membership never is). A failure turns the event into MULTICAST_ERROR. */
static void mc_event_attach_locked(struct cm_event *e)
{
	struct cm_mc *mc = e->mc;
	struct ibv_qp *qp = e->owner->id.qp;
	if (!mc || !qp || mc->sendonly || mc->attached)
		return;
	int rc = ibv_attach_mcast(qp, &mc->mgid, mc->mlid);
	if (rc) {
		e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
		e->ev.status = -rc;
		return;
	}
	mc->attached = qp;
}

CM_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	if (!channel || !event) {
		errno = EINVAL;
		return -1;
	}
	struct cm_channel *c = (struct cm_channel *)channel;
	for (;;) {
		uint64_t v;
		/* Blocking or not as the application set the fd. A count can outlive its
		 * event (destroy and migrate remove queued events): then read again. */
		if (read(c->ch.fd, &v, sizeof(v)) != sizeof(v))
			return -1;
		pthread_mutex_lock(&cm_lock);
		struct cm_event *e = c->head;
		if (e) {
			c->head = e->next;
			if (!c->head)
				c->tail = NULL;
			e->chan = NULL;
			if (e->ev.event == RDMA_CM_EVENT_MULTICAST_JOIN)
				mc_event_attach_locked(e);
		}
		/*
		 * A DISCONNECTED comes after what the peer's QP sent before its DREQ (the
		 * peer let it leave first). On an adapter those packets' CQEs are written
		 * long before the CM reports the disconnect, and a program that polls its
		 * CQ and then, finding it empty, reads its event channel (libfabric's RxM)
		 * has taken them before it tears the connection down on the event. Here
		 * the last ACK may still wait unread in the inbox or socket: it is
		 * processed now, and on a non-blocking channel the event is put back once
		 * (EAGAIN), so such a program polls the CQ once more before it gets the
		 * event -- otherwise it destroyed the QP with the CQE unpolled and its
		 * last send was reported flushed or its last receive never came.
		 */
		struct ibv_context *settle =
		    e && e->ev.event == RDMA_CM_EVENT_DISCONNECTED ? e->ev.id->verbs : NULL;
		bool hold = settle && !e->held_once && (fcntl(c->ch.fd, F_GETFL) & O_NONBLOCK);
		if (hold) {
			e->held_once = true;
			e->chan = c;
			e->next = c->head;
			c->head = e;
			if (!c->tail)
				c->tail = e;
			uint64_t one = 1;
			if (write(c->ch.fd, &one, sizeof(one)) != sizeof(one)) {
				/* eventfd overflow is impossible at these counts */
			}
		}
		pthread_mutex_unlock(&cm_lock);
		if (settle)
			swv_cm_settle(settle);
		if (hold) {
			errno = EAGAIN;
			return -1;
		}
		if (e) {
			*event = &e->ev;
			return 0;
		}
	}
}

CM_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event) {
		errno = EINVAL;
		return -1;
	}
	struct cm_event *e = (struct cm_event *)event;
	pthread_mutex_lock(&cm_lock);
	e->owner->events_out--;
	pthread_cond_broadcast(&cm_cond);
	pthread_mutex_unlock(&cm_lock);
	free(e);
	return 0;
}

CM_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
	    "RDMA_CM_EVENT_ADDR_RESOLVED",
	    "RDMA_CM_EVENT_ADDR_ERROR",
	    "RDMA_CM_EVENT_ROUTE_RESOLVED",
	    "RDMA_CM_EVENT_ROUTE_ERROR",
	    "RDMA_CM_EVENT_CONNECT_REQUEST",
	    "RDMA_CM_EVENT_CONNECT_RESPONSE",
	    "RDMA_CM_EVENT_CONNECT_ERROR",
	    "RDMA_CM_EVENT_UNREACHABLE",
	    "RDMA_CM_EVENT_REJECTED",
	    "RDMA_CM_EVENT_ESTABLISHED",
	    "RDMA_CM_EVENT_DISCONNECTED",
	    "RDMA_CM_EVENT_DEVICE_REMOVAL",
	    "RDMA_CM_EVENT_MULTICAST_JOIN",
	    "RDMA_CM_EVENT_MULTICAST_ERROR",
	    "RDMA_CM_EVENT_ADDR_CHANGE",
	    "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	    "RDMA_CM_EVENT_ADDRINFO_RESOLVED",
	    "RDMA_CM_EVENT_ADDRINFO_ERROR",
	    "RDMA_CM_EVENT_USER",
	    "RDMA_CM_EVENT_INTERNAL",
	};
	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}

/* ---- CM sockets and the CM thread --------------------------------------------- */

static void *cm_thread(void *arg);

static int thread_start_locked(void)
{
	if (cm_thread_started)
		return 0;
	cm_epfd = epoll_create1(EPOLL_CLOEXEC);
	cm_wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (cm_epfd < 0 || cm_wakefd < 0)
		return errno;
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = cm_wakefd};
	epoll_ctl(cm_epfd, EPOLL_CTL_ADD, cm_wakefd, &ev);
	pthread_t t;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&t, &a, cm_thread, NULL);
	pthread_attr_destroy(&a);
	if (rc)
		return rc;
	cm_thread_started = true;
	return 0;
}

/* A timer moved earlier: the thread recomputes its sleep. */
static void thread_kick(void)
{
	uint64_t one = 1;
	if (cm_wakefd >= 0 && write(cm_wakefd, &one, sizeof(one)) < 0) {
		/* counter saturated: a wakeup is pending anyway */
	}
}

/* Binds a CM socket on addr (port 0: ephemeral). Returns 0 or a positive errno. */
static int sock_open_locked(const struct sockaddr_in *addr, struct cm_sock **out)
{
	int rc = thread_start_locked();
	if (rc)
		return rc;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return errno;
	int on = 1;
	/* ICMP port unreachable from a peer whose CM socket is gone: refused, or dead. */
	setsockopt(fd, IPPROTO_IP, IP_RECVERR, &on, sizeof(on));
	if (bind(fd, (const struct sockaddr *)addr, sizeof(*addr))) {
		rc = errno;
		close(fd);
		return rc;
	}
	struct cm_sock *s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return ENOMEM;
	}
	socklen_t len = sizeof(s->addr);
	getsockname(fd, (struct sockaddr *)&s->addr, &len);
	s->fd = fd;
	s->refs = 1;
	s->grace_until = now_ms() + CM_LISTEN_GRACE_MS;
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
	epoll_ctl(cm_epfd, EPOLL_CTL_ADD, fd, &ev);
	s->next = cm_socks;
	cm_socks = s;
	*out = s;
	return 0;
}

static void sock_put_locked(struct cm_sock *s)
{
	if (!s || --s->refs > 0)
		return;
	for (struct cm_sock **p = &cm_socks; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	epoll_ctl(cm_epfd, EPOLL_CTL_DEL, s->fd, NULL);
	close(s->fd);
	free(s);
}

static void msg_init(struct cm_id *id, struct swcm_msg *m, uint8_t type)
{
	memset(m, 0, SWCM_HDR_LEN);
	m->magic = htonl(SWCM_MAGIC);
	m->version = SWCM_VERSION;
	m->type = type;
	m->src_comm_id = htonl(id->comm_id);
	m->dst_comm_id = htonl(id->remote_comm_id);
	m->port_space = htons((uint16_t)id->id.ps);
	m->qp_type = (uint8_t)id->id.qp_type;
	if (id->dev) {
		m->lid = htons(id->dev->lid);
		m->link_layer = id->dev->link_layer;
		m->mtu = id->dev->mtu;
		memcpy(m->gid, id->dev->gid.raw, 16);
		m->src_ip = id->dev->ip.s_addr;
	}
	m->dst_ip = id->peer_cm.sin_addr.s_addr;
}

static size_t msg_pdata(struct swcm_msg *m, const void *p, uint8_t len)
{
	if (p && len)
		memcpy(m->pdata, p, len);
	m->pdata_len = htons(len);
	return SWCM_HDR_LEN + len;
}

static void msg_send_to(struct cm_sock *s, const struct sockaddr_in *to, const struct swcm_msg *m,
			size_t len)
{
	for (int i = 0; i < 2; i++) {
		ssize_t n =
		    sendto(s->fd, m, len, MSG_DONTWAIT, (const struct sockaddr *)to, sizeof(*to));
		/* A pending ICMP error of another peer may be returned instead of sending. */
		if (n >= 0 || (errno != ECONNREFUSED && errno != EHOSTUNREACH))
			return;
	}
}

static void msg_send(struct cm_id *id, const struct swcm_msg *m, size_t len)
{
	if (id->sock)
		msg_send_to(id->sock, &id->peer_cm, m, len);
}

/* Sends m and retransmits it until an answer clears the timer. */
static void msg_send_rt(struct cm_id *id, const struct swcm_msg *m, size_t len, int tries)
{
	memcpy(&id->last, m, len);
	id->last_len = len;
	id->tries = 0;
	id->max_tries = tries;
	id->rto = CM_RTO_INIT_MS;
	id->started = now_ms();
	id->deadline = id->started + id->rto;
	msg_send(id, m, len);
	thread_kick();
}

static void timer_stop(struct cm_id *id)
{
	id->deadline = 0;
}

static void ka_start(struct cm_id *id)
{
	id->ka_missed = 0;
	id->ka_next = now_ms() + CM_KA_MS;
	thread_kick();
}

static void send_simple(struct cm_id *id, uint8_t type)
{
	struct swcm_msg m;
	msg_init(id, &m, type);
	msg_send(id, &m, SWCM_HDR_LEN);
}

/* ---- QP transitions ------------------------------------------------------------- */

static void fill_ah(struct cm_id *id, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->port_num = id->id.port_num ? id->id.port_num : 1;
	ah->dlid = id->rlid;
	if (id->r_link_layer == IBV_LINK_LAYER_ETHERNET ||
	    (id->dev && id->dev->link_layer == IBV_LINK_LAYER_ETHERNET)) {
		ah->is_global = 1;
		memcpy(ah->grh.dgid.raw, id->rgid, 16);
		ah->grh.sgid_index = 0;
		ah->grh.hop_limit = 64;
		ah->grh.traffic_class = id->tos;
	}
}

static int init_qp_attr_locked(struct cm_id *id, struct ibv_qp_attr *a, int *mask)
{
	bool ud = id->id.qp_type == IBV_QPT_UD;
	switch (a->qp_state) {
	case IBV_QPS_INIT:
		a->pkey_index = 0;
		a->port_num = id->id.port_num ? id->id.port_num : 1;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (ud) {
			a->qkey = RDMA_UDP_QKEY;
			*mask |= IBV_QP_QKEY;
		} else {
			/* As the kernel's CM: no remote access until the exchange says what the
			 * peer may do. */
			a->qp_access_flags = 0;
			if (id->have_remote) {
				a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
				if (id->qp_max_dest_rd)
					a->qp_access_flags |=
					    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
			}
			*mask |= IBV_QP_ACCESS_FLAGS;
		}
		return 0;
	case IBV_QPS_RTR:
		*mask = IBV_QP_STATE;
		if (ud)
			return 0;
		if (!id->have_remote)
			return EINVAL;
		fill_ah(id, &a->ah_attr);
		a->path_mtu = id->dev && id->dev->mtu < id->r_mtu ? id->dev->mtu : id->r_mtu;
		if (!a->path_mtu)
			a->path_mtu = IBV_MTU_1024;
		a->dest_qp_num = id->rqpn;
		a->rq_psn = id->rpsn;
		a->max_dest_rd_atomic = id->qp_max_dest_rd;
		a->min_rnr_timer = CM_MIN_RNR;
		*mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		return 0;
	case IBV_QPS_RTS:
		a->sq_psn = id->psn;
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (ud)
			return 0;
		if (!id->have_remote)
			return EINVAL;
		a->timeout = id->ack_timeout;
		a->retry_cnt = id->qp_retry;
		a->rnr_retry = id->qp_rnr_retry;
		a->max_rd_atomic = id->qp_max_rd;
		*mask |=
		    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		return 0;
	default:
		return EINVAL;
	}
}

static int qp_move(struct cm_id *id, enum ibv_qp_state st)
{
	struct ibv_qp_attr a;
	int mask;
	memset(&a, 0, sizeof(a));
	a.qp_state = st;
	int rc = init_qp_attr_locked(id, &a, &mask);
	if (rc)
		return rc;
	return ibv_modify_qp(id->id.qp, &a, mask);
}

/* RC: INIT again with the access the exchange allows, then RTR and RTS. */
static int qp_connect(struct cm_id *id)
{
	if (!id->id.qp)
		return 0;
	int rc = qp_move(id, IBV_QPS_INIT);
	if (!rc)
		rc = qp_move(id, IBV_QPS_RTR);
	if (!rc)
		rc = qp_move(id, IBV_QPS_RTS);
	return rc;
}

static void qp_to_err(struct cm_id *id)
{
	if (!id->id.qp)
		return;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE);
}

CM_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
				int *qp_attr_mask)
{
	if (!id || !qp_attr || !qp_attr_mask) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	int rc = init_qp_attr_locked((struct cm_id *)id, qp_attr, qp_attr_mask);
	pthread_mutex_unlock(&cm_lock);
	if (rc) {
		errno = rc;
		return -1;
	}
	return 0;
}

/* ---- ids ---------------------------------------------------------------------- */

static struct cm_id *id_alloc_locked(struct cm_channel *chan, void *context,
				     enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	struct cm_id *id = calloc(1, sizeof(*id));
	if (!id)
		return NULL;
	id->id.channel = &chan->ch;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = qpt;
	id->chan = chan;
	id->psn = rand32() & 0xffffff;
	do
		id->comm_id = ++cm_next_comm ^ 0x5a5a0000u;
	while (!id->comm_id);
	id->ack_timeout = CM_ACK_TIMEOUT;
	id->next = cm_ids;
	cm_ids = id;
	return id;
}

static void id_unlink_locked(struct cm_id *id)
{
	for (struct cm_id **p = &cm_ids; *p; p = &(*p)->next)
		if (*p == id) {
			*p = id->next;
			return;
		}
}

static void id_set_dev(struct cm_id *id, struct cm_dev *d)
{
	id->dev = d;
	id->id.verbs = d ? d->ctx : NULL;
	id->id.port_num = d ? 1 : 0;
	if (d)
		memcpy(id->id.route.addr.addr.ibaddr.sgid.raw, d->gid.raw, 16);
	/* librdmacm gives every id on a device that device's PD once bound: pyverbs
	 * makes its multicast AHs and its external QPs on cmid.pd. */
	if (d && !id->id.pd)
		id->id.pd = dev_pd(d);
	id->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
}

static int ps_qp_type(enum rdma_port_space ps, enum ibv_qp_type *qpt)
{
	switch (ps) {
	case RDMA_PS_TCP:
	case RDMA_PS_IB:
		*qpt = IBV_QPT_RC;
		return 0;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		*qpt = IBV_QPT_UD;
		return 0;
	default:
		return EINVAL;
	}
}

CM_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			     void *context, enum rdma_port_space ps)
{
	enum ibv_qp_type qpt;
	if (!id || ps_qp_type(ps, &qpt)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	int n = devs_init_locked();
	pthread_mutex_unlock(&cm_lock);
	if (n <= 0) {
		errno = ENODEV;
		return -1;
	}
	struct cm_channel *chan = (struct cm_channel *)channel;
	bool sync = !chan;
	if (sync && !(chan = chan_new()))
		return -1;
	pthread_mutex_lock(&cm_lock);
	struct cm_id *c = id_alloc_locked(chan, context, ps, qpt);
	if (c)
		c->sync = sync;
	pthread_mutex_unlock(&cm_lock);
	if (!c) {
		if (sync)
			chan_free(chan);
		errno = ENOMEM;
		return -1;
	}
	*id = &c->id;
	return 0;
}

/* Removes the queued events id owns; a connect request's child dies with it (its
 * peer is rejected as the kernel rejects a request nobody will see). */
static void id_destroy_locked(struct cm_id *id);

static void drop_queued_events_locked(struct cm_id *id)
{
	struct cm_channel *chans[2] = {id->chan, NULL};
	for (int k = 0; k < 2 && chans[k]; k++) {
		struct cm_channel *c = chans[k];
		struct cm_event **p = &c->head, *prev = NULL;
		while (*p) {
			struct cm_event *e = *p;
			if (e->owner != id && e->ev.id != &id->id) {
				prev = e;
				p = &e->next;
				continue;
			}
			*p = e->next;
			if (c->tail == e)
				c->tail = prev;
			e->owner->events_out--;
			if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->ev.id != &id->id) {
				struct cm_id *child = (struct cm_id *)e->ev.id;
				struct swcm_msg m;
				msg_init(child, &m,
					 child->id.qp_type == IBV_QPT_UD ? SWCM_SIDR_REP
									 : SWCM_REJ);
				m.reason =
				    htons(child->id.qp_type == IBV_QPT_UD ? SWCM_SIDR_REJECT
									  : SWCM_REJ_TIMEOUT);
				msg_send(child, &m, SWCM_HDR_LEN);
				id_destroy_locked(child);
				free(child);
			}
			free(e);
		}
	}
}

static void mc_free_all_locked(struct cm_id *id);

static void id_destroy_locked(struct cm_id *id)
{
	id->destroying = true;
	drop_queued_events_locked(id);
	mc_free_all_locked(id); /* the kernel's CM leaves every group of a destroyed id */
	switch (id->state) {
	case CM_ESTABLISHED:
	case CM_REP_SENT:
	case CM_REP_RCVD:
		/* Destroying a connected id disconnects it (one DREQ, no timewait). */
		send_simple(id, SWCM_DREQ);
		break;
	case CM_REQ_RCVD:
	case CM_REQ_SENT: {
		struct swcm_msg m;
		msg_init(id, &m, SWCM_REJ);
		m.reason = htons(SWCM_REJ_TIMEOUT);
		if (id->id.qp_type != IBV_QPT_UD &&
		    (id->state == CM_REQ_RCVD || id->remote_comm_id))
			msg_send(id, &m, SWCM_HDR_LEN);
		break;
	}
	default:
		break;
	}
	for (struct cm_id *c = cm_ids; c; c = c->next)
		if (c->listen == id)
			c->listen = NULL;
	if (id->sock && id->sock->listener == id) {
		id->sock->listener = NULL;
		id->sock->grace_until = now_ms() + CM_LISTEN_GRACE_MS;
	}
	id_unlink_locked(id);
	sock_put_locked(id->sock);
	id->sock = NULL;
}

CM_EXPORT int rdma_destroy_id(struct rdma_cm_id *idp)
{
	if (!idp) {
		errno = EINVAL;
		return -1;
	}
	struct cm_id *id = (struct cm_id *)idp;
	pthread_mutex_lock(&cm_lock);
	if (id->sync && id->id.event) {
		struct rdma_cm_event *e = id->id.event;
		id->id.event = NULL;
		pthread_mutex_unlock(&cm_lock);
		rdma_ack_cm_event(e);
		pthread_mutex_lock(&cm_lock);
	}
	if (connected_locked(id) && id->id.verbs) {
		/* The DREQ must not overtake what the QP sent (see rdma_disconnect). */
		struct ibv_context *ctx = id->id.verbs;
		pthread_mutex_unlock(&cm_lock);
		swv_cm_settle(ctx);
		pthread_mutex_lock(&cm_lock);
	}
	id_destroy_locked(id);
	/* Like librdmacm: the id lives until the application acked its events. */
	while (id->events_out > 0)
		pthread_cond_wait(&cm_cond, &cm_lock);
	pthread_mutex_unlock(&cm_lock);
	if (id->sync)
		chan_free(id->chan);
	free(id->ai);
	free(id);
	return 0;
}

/* ---- synchronous ids (no channel): each call waits for its event -------------- */

static int sync_wait(struct cm_id *id)
{
	if (!id->sync)
		return 0;
	if (id->id.event) {
		rdma_ack_cm_event(id->id.event);
		id->id.event = NULL;
	}
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(&id->chan->ch, &e))
		return -1;
	id->id.event = e;
	if (e->status) {
		errno = e->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED
			: e->status < 0			   ? -e->status
							   : e->status;
		return -1;
	}
	return 0;
}

CM_EXPORT int rdma_migrate_id(struct rdma_cm_id *idp, struct rdma_event_channel *channel)
{
	if (!idp) {
		errno = EINVAL;
		return -1;
	}
	struct cm_id *id = (struct cm_id *)idp;
	struct cm_channel *nc = (struct cm_channel *)channel;
	bool sync = !nc;
	if (sync && !(nc = chan_new()))
		return -1;
	/* A synchronous id holds its last event until the next call; leaving the private
	 * channel acks it, as librdmacm does (else rdma_destroy_id waits for it forever:
	 * libfabric's verbs provider migrates the ids rdma_create_ep made to its EQ). */
	if (id->sync && id->id.event) {
		struct rdma_cm_event *e = id->id.event;
		id->id.event = NULL;
		rdma_ack_cm_event(e);
	}
	pthread_mutex_lock(&cm_lock);
	struct cm_channel *old = id->chan;
	bool old_sync = id->sync;
	/* Queued events of this id follow it to the new channel. */
	struct cm_event **p = &old->head, *prev = NULL;
	while (*p) {
		struct cm_event *e = *p;
		if (e->ev.id == &id->id && !e->ev.listen_id) {
			*p = e->next;
			if (old->tail == e)
				old->tail = prev;
			chan_push(nc, e);
		} else {
			prev = e;
			p = &e->next;
		}
	}
	id->chan = nc;
	id->sync = sync;
	id->id.channel = &nc->ch;
	pthread_mutex_unlock(&cm_lock);
	if (old_sync && old != nc)
		chan_free(old);
	return 0;
}

/* ---- addresses ------------------------------------------------------------------ */

static int sin_of(const struct sockaddr *sa, struct sockaddr_in *out)
{
	if (!sa)
		return EINVAL;
	if (sa->sa_family == AF_INET) {
		memcpy(out, sa, sizeof(*out));
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		memset(out, 0, sizeof(*out));
		out->sin_family = AF_INET;
		out->sin_port = s6->sin6_port;
		if (IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr))
			return 0;
		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			memcpy(&out->sin_addr, s6->sin6_addr.s6_addr + 12, 4);
			return 0;
		}
		/* swverbs devices have IPv4 addresses only. */
		return EAFNOSUPPORT;
	}
	return EAFNOSUPPORT;
}

static int bind_locked(struct cm_id *id, const struct sockaddr_in *sin)
{
	struct cm_dev *d = NULL;
	if (sin->sin_addr.s_addr != htonl(INADDR_ANY)) {
		d = dev_by_ip(sin->sin_addr);
		if (!d)
			return ENODEV;
	}
	struct cm_sock *s = NULL;
	/* The ids of one process share a port's socket: the connections a listener
	 * accepted keep using it after the listener is gone, and the kernel lets a new
	 * id bind that port again (perftest -R does). */
	for (struct cm_sock *o = sin->sin_port ? cm_socks : NULL; o; o = o->next)
		if (o->addr.sin_port == sin->sin_port &&
		    (o->addr.sin_addr.s_addr == sin->sin_addr.s_addr ||
		     o->addr.sin_addr.s_addr == htonl(INADDR_ANY))) {
			s = o;
			s->refs++;
			break;
		}
	if (!s) {
		int rc = sock_open_locked(sin, &s);
		if (rc)
			return rc;
	}
	id->sock = s;
	id_set_dev(id, d);
	memset(&id->id.route.addr.src_storage, 0, sizeof(id->id.route.addr.src_storage));
	memcpy(&id->id.route.addr.src_sin, &s->addr, sizeof(s->addr));
	if (d)
		id->id.route.addr.src_sin.sin_addr = d->ip;
	id->state = CM_BOUND;
	return 0;
}

CM_EXPORT int rdma_bind_addr(struct rdma_cm_id *idp, struct sockaddr *addr)
{
	struct sockaddr_in sin;
	int rc = idp ? sin_of(addr, &sin) : EINVAL;
	struct cm_id *id = (struct cm_id *)idp;
	if (!rc) {
		pthread_mutex_lock(&cm_lock);
		rc = id->state != CM_IDLE ? EINVAL : bind_locked(id, &sin);
		pthread_mutex_unlock(&cm_lock);
	}
	if (rc) {
		errno = rc;
		return -1;
	}
	return 0;
}

/* The local address the kernel would send from towards dst. */
static int route_src(struct in_addr dst, struct in_addr *src)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = dst};
	int rc = 0;
	socklen_t len = sizeof(s);
	if (connect(fd, (struct sockaddr *)&s, sizeof(s)) ||
	    getsockname(fd, (struct sockaddr *)&s, &len))
		rc = errno;
	else
		*src = s.sin_addr;
	close(fd);
	return rc;
}

static void gid_for_ip(const struct cm_dev *d, struct in_addr ip, uint8_t *gid)
{
	memcpy(gid, d->gid.raw, 12);
	memcpy(gid + 12, &ip.s_addr, 4);
}

CM_EXPORT int rdma_resolve_addr(struct rdma_cm_id *idp, struct sockaddr *src_addr,
				struct sockaddr *dst_addr, int timeout_ms)
{
	struct cm_id *id = (struct cm_id *)idp;
	struct sockaddr_in dst, src = {.sin_family = AF_INET};
	if (!id || !dst_addr) {
		errno = EINVAL;
		return -1;
	}
	int err = sin_of(dst_addr, &dst);
	if (!err && src_addr)
		err = sin_of(src_addr, &src);
	pthread_mutex_lock(&cm_lock);
	if (id->state != CM_IDLE && id->state != CM_BOUND && id->state != CM_ADDR_RESOLVED) {
		pthread_mutex_unlock(&cm_lock);
		errno = EINVAL;
		return -1;
	}
	memset(&id->id.route.addr.dst_storage, 0, sizeof(id->id.route.addr.dst_storage));
	memcpy(&id->id.route.addr.dst_storage, dst_addr,
	       dst_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					       : sizeof(struct sockaddr_in));
	struct in_addr sip = src.sin_addr;
	if (!err && id->state == CM_BOUND && id->id.route.addr.src_sin.sin_addr.s_addr)
		sip = id->id.route.addr.src_sin.sin_addr;
	bool any_src = !err && !sip.s_addr;
	if (any_src)
		err = route_src(dst.sin_addr, &sip);
	struct cm_dev *d = err ? NULL : dev_by_ip(sip);
	/* A group address with no source given: the route to it may well leave by an
	 * interface without a swverbs device (or there is none); take the first device,
	 * as a host with one RDMA port would. */
	if (any_src && !d && IN_MULTICAST(ntohl(dst.sin_addr.s_addr)) && cm_ndevs > 0) {
		err = 0;
		d = &cm_devs[0];
		sip = d->ip;
	}
	if (!err && !d)
		err = EADDRNOTAVAIL; /* no swverbs device on the way to dst */
	if (!err && id->state == CM_BOUND && !id->dev) {
		/* Bound to the wildcard: rebind on the device's address, same port. */
		uint16_t port = id->sock->addr.sin_port;
		sock_put_locked(id->sock);
		id->sock = NULL;
		id->state = CM_IDLE;
		src.sin_port = port;
	}
	if (!err && id->state != CM_BOUND && id->state != CM_ADDR_RESOLVED) {
		src.sin_family = AF_INET;
		src.sin_addr = sip;
		err = bind_locked(id, &src);
	}
	if (err) {
		ev_simple(id, RDMA_CM_EVENT_ADDR_ERROR, -err);
	} else {
		id_set_dev(id, d);
		gid_for_ip(d, dst.sin_addr, id->id.route.addr.addr.ibaddr.dgid.raw);
		id->peer_cm = dst;
		id->state = CM_ADDR_RESOLVED;
		ev_simple(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	}
	pthread_mutex_unlock(&cm_lock);
	return sync_wait(id);
}

CM_EXPORT int rdma_resolve_route(struct rdma_cm_id *idp, int timeout_ms)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	if (id->state != CM_ADDR_RESOLVED && id->state != CM_ROUTE_RESOLVED) {
		pthread_mutex_unlock(&cm_lock);
		errno = EINVAL;
		return -1;
	}
	struct ibv_sa_path_rec *p = &id->path;
	memset(p, 0, sizeof(*p));
	p->sgid = id->id.route.addr.addr.ibaddr.sgid;
	p->dgid = id->id.route.addr.addr.ibaddr.dgid;
	p->slid = htons(id->dev->lid);
	/* The peer's LID is its address's host part; exact for prefixes of /16 or longer.
	 * The QP's path uses the LID the peer announces in the exchange. */
	p->dlid = htons((uint16_t)ntohl(id->peer_cm.sin_addr.s_addr));
	p->pkey = htons(0xffff);
	p->hop_limit = id->dev->link_layer == IBV_LINK_LAYER_ETHERNET ? 64 : 0;
	p->traffic_class = id->tos;
	p->reversible = 1;
	p->numb_path = 1;
	p->mtu_selector = 2;
	p->mtu = id->dev->mtu;
	p->rate_selector = 2;
	p->rate = 3; /* 10 Gb/s */
	p->packet_life_time_selector = 2;
	p->packet_life_time = CM_ACK_TIMEOUT - 1;
	id->id.route.path_rec = p;
	id->id.route.num_paths = 1;
	id->state = CM_ROUTE_RESOLVED;
	ev_simple(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	pthread_mutex_unlock(&cm_lock);
	return sync_wait(id);
}

CM_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id && id->route.addr.src_addr.sa_family == AF_INET6
		   ? id->route.addr.src_sin6.sin6_port
	       : id ? id->route.addr.src_sin.sin_port
		    : 0;
}

CM_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id && id->route.addr.dst_addr.sa_family == AF_INET6
		   ? id->route.addr.dst_sin6.sin6_port
	       : id ? id->route.addr.dst_sin.sin_port
		    : 0;
}

/* ---- QPs ------------------------------------------------------------------------ */

static int create_cqs(struct cm_id *id, struct ibv_qp_init_attr_ex *a)
{
	struct ibv_context *ctx = id->id.verbs;
	if (!a->recv_cq) {
		id->id.recv_cq_channel = ibv_create_comp_channel(ctx);
		int n = a->cap.max_recv_wr ? (int)a->cap.max_recv_wr : 1;
		if (id->id.recv_cq_channel)
			id->id.recv_cq = ibv_create_cq(ctx, n, &id->id, id->id.recv_cq_channel, 0);
		if (!id->id.recv_cq)
			return errno ? errno : ENOMEM;
		id->own_recv_cq = true;
		a->recv_cq = id->id.recv_cq;
	}
	if (!a->send_cq) {
		id->id.send_cq_channel = ibv_create_comp_channel(ctx);
		int n = a->cap.max_send_wr ? (int)a->cap.max_send_wr : 1;
		if (id->id.send_cq_channel)
			id->id.send_cq = ibv_create_cq(ctx, n, &id->id, id->id.send_cq_channel, 0);
		if (!id->id.send_cq)
			return errno ? errno : ENOMEM;
		id->own_send_cq = true;
		a->send_cq = id->id.send_cq;
	}
	return 0;
}

static void destroy_cqs(struct cm_id *id)
{
	if (id->own_recv_cq && id->id.recv_cq)
		ibv_destroy_cq(id->id.recv_cq);
	if (id->own_recv_cq && id->id.recv_cq_channel)
		ibv_destroy_comp_channel(id->id.recv_cq_channel);
	if (id->own_send_cq && id->id.send_cq)
		ibv_destroy_cq(id->id.send_cq);
	if (id->own_send_cq && id->id.send_cq_channel)
		ibv_destroy_comp_channel(id->id.send_cq_channel);
	if (id->own_recv_cq) {
		id->id.recv_cq = NULL;
		id->id.recv_cq_channel = NULL;
	}
	if (id->own_send_cq) {
		id->id.send_cq = NULL;
		id->id.send_cq_channel = NULL;
	}
	id->own_recv_cq = id->own_send_cq = false;
}

CM_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *idp, struct ibv_qp_init_attr_ex *attr)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id || !attr || !id->id.verbs || id->id.qp) {
		errno = EINVAL;
		return -1;
	}
	if (attr->qp_type != id->id.qp_type) {
		errno = EINVAL;
		return -1;
	}
	struct ibv_qp_init_attr_ex a = *attr;
	if (!(a.comp_mask & IBV_QP_INIT_ATTR_PD) || !a.pd) {
		pthread_mutex_lock(&cm_lock);
		a.pd = id->id.pd ? id->id.pd : dev_pd(id->dev);
		pthread_mutex_unlock(&cm_lock);
		a.comp_mask |= IBV_QP_INIT_ATTR_PD;
	}
	if (!a.pd || a.pd->context != id->id.verbs) {
		errno = EINVAL;
		return -1;
	}
	if (!a.srq && id->id.srq)
		a.srq = id->id.srq;
	int rc = create_cqs(id, &a);
	struct ibv_qp *qp = rc ? NULL : ibv_create_qp_ex(id->id.verbs, &a);
	if (!qp) {
		rc = rc ? rc : errno ? errno : ENOMEM;
		destroy_cqs(id);
		errno = rc;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	id->id.qp = qp;
	id->id.pd = a.pd;
	id->qpn = qp->qp_num;
	rc = qp_move(id, IBV_QPS_INIT);
	if (!rc && id->id.qp_type == IBV_QPT_UD) {
		rc = qp_move(id, IBV_QPS_RTR);
		if (!rc)
			rc = qp_move(id, IBV_QPS_RTS);
	} else if (!rc && id->have_remote && id->state == CM_REQ_RCVD) {
		/* Passive side after the request: accept moves it; nothing more here. */
	}
	if (rc) {
		id->id.qp = NULL;
		pthread_mutex_unlock(&cm_lock);
		ibv_destroy_qp(qp);
		destroy_cqs(id);
		errno = rc;
		return -1;
	}
	pthread_mutex_unlock(&cm_lock);
	attr->cap = a.cap;
	return 0;
}

CM_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !qp_init_attr) {
		errno = EINVAL;
		return -1;
	}
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	a.qp_context = qp_init_attr->qp_context;
	a.send_cq = qp_init_attr->send_cq;
	a.recv_cq = qp_init_attr->recv_cq;
	a.srq = qp_init_attr->srq;
	a.cap = qp_init_attr->cap;
	a.qp_type = qp_init_attr->qp_type;
	a.sq_sig_all = qp_init_attr->sq_sig_all;
	if (pd) {
		a.comp_mask = IBV_QP_INIT_ATTR_PD;
		a.pd = pd;
	}
	int rc = rdma_create_qp_ex(id, &a);
	if (!rc)
		qp_init_attr->cap = a.cap;
	return rc;
}

static void mc_detach_qp_locked(struct cm_id *id, struct ibv_qp *qp);

CM_EXPORT void rdma_destroy_qp(struct rdma_cm_id *idp)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id || !id->id.qp)
		return;
	/* An attached QP cannot be destroyed (EBUSY): leave its groups first. */
	pthread_mutex_lock(&cm_lock);
	mc_detach_qp_locked(id, id->id.qp);
	pthread_mutex_unlock(&cm_lock);
	ibv_destroy_qp(id->id.qp);
	id->id.qp = NULL;
	destroy_cqs(id);
}

/* ---- connection ----------------------------------------------------------------- */

static int conn_caps(struct cm_id *id, const struct rdma_conn_param *p, uint8_t *resp,
		     uint8_t *init)
{
	int mresp = id->dev ? id->dev->max_rd_atom : 0,
	    minit = id->dev ? id->dev->max_init_rd_atom : 0;
	if (p->responder_resources != RDMA_MAX_RESP_RES && p->responder_resources > mresp)
		return EINVAL;
	if (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > minit)
		return EINVAL;
	*resp =
	    p->responder_resources == RDMA_MAX_RESP_RES ? (uint8_t)mresp : p->responder_resources;
	*init = p->initiator_depth == RDMA_MAX_INIT_DEPTH ? (uint8_t)minit : p->initiator_depth;
	return 0;
}

CM_EXPORT int rdma_connect(struct rdma_cm_id *idp, struct rdma_conn_param *p)
{
	struct cm_id *id = (struct cm_id *)idp;
	struct rdma_conn_param zero = {0};
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	if (!p)
		p = &zero;
	bool ud = id->id.qp_type == IBV_QPT_UD;
	int rc = 0;
	pthread_mutex_lock(&cm_lock);
	if (id->state != CM_ROUTE_RESOLVED)
		rc = EINVAL;
	else if (p->private_data_len > (ud ? SWCM_PDATA_SIDR_REQ : SWCM_PDATA_REQ))
		rc = EINVAL;
	else if (!ud)
		rc = conn_caps(id, p, &id->resp_res, &id->init_depth);
	if (rc) {
		pthread_mutex_unlock(&cm_lock);
		errno = rc;
		return -1;
	}
	id->qpn = id->id.qp ? id->id.qp->qp_num : p->qp_num;
	id->retry_cnt = p->retry_count > 7 ? 7 : p->retry_count;
	id->rnr_retry = p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count;
	id->flow_control = p->flow_control;
	id->srq = id->id.srq ? 1 : p->srq;
	struct swcm_msg m;
	msg_init(id, &m, ud ? SWCM_SIDR_REQ : SWCM_REQ);
	m.dst_comm_id = 0;
	m.service_port = id->peer_cm.sin_port;
	m.qpn = htonl(id->qpn);
	m.psn = htonl(id->psn);
	m.qkey = htonl(RDMA_UDP_QKEY);
	m.resp_res = id->resp_res;
	m.init_depth = id->init_depth;
	m.flow_control = id->flow_control;
	m.retry_count = id->retry_cnt;
	m.rnr_retry_count = id->rnr_retry;
	m.srq = id->srq;
	size_t len = msg_pdata(&m, p->private_data, p->private_data_len);
	id->state = CM_REQ_SENT;
	msg_send_rt(id, &m, len, CM_REQ_TRIES);
	pthread_mutex_unlock(&cm_lock);
	return sync_wait(id);
}

CM_EXPORT int rdma_listen(struct rdma_cm_id *idp, int backlog)
{
	struct cm_id *id = (struct cm_id *)idp;
	int rc = 0;
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	if (id->state == CM_IDLE) {
		/* The kernel binds an unbound listener to the wildcard, ephemeral port. */
		struct sockaddr_in any = {.sin_family = AF_INET};
		rc = bind_locked(id, &any);
	}
	if (!rc && id->state != CM_BOUND && id->state != CM_LISTEN)
		rc = EINVAL;
	if (!rc && id->sock->listener && id->sock->listener != id)
		rc = EADDRINUSE;
	if (!rc) {
		id->sock->listener = id;
		id->state = CM_LISTEN;
	}
	pthread_mutex_unlock(&cm_lock);
	if (rc) {
		errno = rc;
		return -1;
	}
	return 0;
}

CM_EXPORT int rdma_accept(struct rdma_cm_id *idp, struct rdma_conn_param *p)
{
	struct cm_id *id = (struct cm_id *)idp;
	struct rdma_conn_param zero = {0};
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	bool ud = id->id.qp_type == IBV_QPT_UD;
	if (!p) {
		/* librdmacm's defaults for an accept without parameters. */
		zero.responder_resources = RDMA_MAX_RESP_RES;
		zero.initiator_depth = RDMA_MAX_INIT_DEPTH;
		zero.rnr_retry_count = 7;
		p = &zero;
	}
	int rc = 0;
	uint8_t resp = 0, init = 0;
	pthread_mutex_lock(&cm_lock);
	if (id->sync && id->id.event) {
		struct rdma_cm_event *e = id->id.event;
		id->id.event = NULL;
		pthread_mutex_unlock(&cm_lock);
		rdma_ack_cm_event(e);
		pthread_mutex_lock(&cm_lock);
	}
	if (id->state != CM_REQ_RCVD)
		rc = EINVAL;
	else if (p->private_data_len > (ud ? SWCM_PDATA_SIDR_REP : SWCM_PDATA_REP))
		rc = EINVAL;
	else if (!ud)
		rc = conn_caps(id, p, &resp, &init);
	if (rc)
		goto out;
	struct swcm_msg m;
	if (ud) {
		msg_init(id, &m, SWCM_SIDR_REP);
		m.qpn = htonl(id->id.qp ? id->id.qp->qp_num : p->qp_num);
		m.qkey = htonl(RDMA_UDP_QKEY);
		m.reason = htons(SWCM_SIDR_SUCCESS);
		size_t len = msg_pdata(&m, p->private_data, p->private_data_len);
		msg_send(id, &m, len);
		id->state = CM_UD_DONE;
		pthread_mutex_unlock(&cm_lock);
		return 0;
	}
	/* The peer's announcement bounds ours. */
	id->resp_res = resp < id->r_init_depth ? resp : id->r_init_depth;
	id->init_depth = init < id->r_resp_res ? init : id->r_resp_res;
	id->qp_max_dest_rd = id->resp_res;
	id->qp_max_rd = id->init_depth;
	id->qp_retry = id->r_retry;
	id->qp_rnr_retry = id->r_rnr_retry;
	id->rnr_retry = p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count;
	id->flow_control = p->flow_control;
	id->qpn = id->id.qp ? id->id.qp->qp_num : p->qp_num;
	rc = qp_connect(id);
	if (rc)
		goto out;
	msg_init(id, &m, SWCM_REP);
	m.qpn = htonl(id->qpn);
	m.psn = htonl(id->psn);
	m.resp_res = id->resp_res;
	m.init_depth = id->init_depth;
	m.flow_control = id->flow_control;
	m.rnr_retry_count = id->rnr_retry;
	m.srq = id->id.srq ? 1 : p->srq;
	size_t len = msg_pdata(&m, p->private_data, p->private_data_len);
	id->state = CM_REP_SENT;
	msg_send_rt(id, &m, len, CM_REQ_TRIES);
out:
	pthread_mutex_unlock(&cm_lock);
	if (rc) {
		errno = rc;
		return -1;
	}
	return sync_wait(id);
}

static int reject_locked(struct cm_id *id, const void *pd, uint8_t len)
{
	bool ud = id->id.qp_type == IBV_QPT_UD;
	if (id->state != CM_REQ_RCVD && id->state != CM_REP_RCVD)
		return EINVAL;
	if (len > (ud ? SWCM_PDATA_SIDR_REP : SWCM_PDATA_REJ))
		return EINVAL;
	struct swcm_msg m;
	msg_init(id, &m, ud ? SWCM_SIDR_REP : SWCM_REJ);
	m.reason = htons(ud ? SWCM_SIDR_REJECT : SWCM_REJ_CONSUMER_DEFINED);
	size_t n = msg_pdata(&m, pd, len);
	msg_send(id, &m, n);
	timer_stop(id);
	id->state = CM_FAILED;
	return 0;
}

CM_EXPORT int rdma_reject(struct rdma_cm_id *idp, const void *private_data,
			  uint8_t private_data_len)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	int rc = reject_locked(id, private_data, private_data_len);
	pthread_mutex_unlock(&cm_lock);
	if (rc) {
		errno = rc;
		return -1;
	}
	return 0;
}

CM_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
			      uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

/* The active side of a connection without a QP on the id: the application moved its QP
 * after CONNECT_RESPONSE; the RTU completes the exchange. */
CM_EXPORT int rdma_establish(struct rdma_cm_id *idp)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	int rc = 0;
	if (id->state != CM_REP_RCVD) {
		rc = EINVAL;
	} else {
		send_simple(id, SWCM_RTU);
		id->state = CM_ESTABLISHED;
		ka_start(id);
	}
	pthread_mutex_unlock(&cm_lock);
	if (rc) {
		errno = rc;
		return -1;
	}
	return 0;
}

CM_EXPORT int rdma_notify(struct rdma_cm_id *idp, enum ibv_event_type event)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	/* Data before the RTU proves the peer saw the REP, as the kernel's COMM_EST. */
	if (event == IBV_EVENT_COMM_EST && id->state == CM_REP_SENT) {
		timer_stop(id);
		id->state = CM_ESTABLISHED;
		ka_start(id);
		ev_simple(id, RDMA_CM_EVENT_ESTABLISHED, 0);
	}
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

CM_EXPORT int rdma_disconnect(struct rdma_cm_id *idp)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	if (connected_locked(id) && id->id.verbs) {
		/* The DREQ leaves after every ACK and response the QP owes: the peer
		 * moves its QP to ERR on it, and a send whose ACK it had not yet seen
		 * would come back flushed there. An adapter sends them in this order on
		 * the one path; here the CM has a socket of its own. */
		struct ibv_context *ctx = id->id.verbs;
		pthread_mutex_unlock(&cm_lock);
		swv_cm_settle(ctx);
		pthread_mutex_lock(&cm_lock);
	}
	int rc = 0;
	bool wait = false;
	switch (id->state) {
	case CM_ESTABLISHED:
	case CM_REP_SENT:
	case CM_REP_RCVD: {
		qp_to_err(id);
		struct swcm_msg m;
		msg_init(id, &m, SWCM_DREQ);
		id->state = CM_DREQ_SENT;
		id->ka_next = 0;
		msg_send_rt(id, &m, SWCM_HDR_LEN, CM_DREQ_TRIES);
		wait = true;
		break;
	}
	case CM_DREQ_SENT:
	case CM_DISCONNECTED:
		qp_to_err(id);
		/* The DISCONNECTED event is queued or delivered already. */
		wait = id->state == CM_DISCONNECTED && id->chan->head;
		break;
	default:
		rc = EINVAL;
	}
	pthread_mutex_unlock(&cm_lock);
	if (rc) {
		errno = rc;
		return -1;
	}
	return wait ? sync_wait(id) : 0;
}

/* ---- passive endpoints of rdma_create_ep --------------------------------------- */

int swv_cm_ep_passive(struct rdma_cm_id *idp, struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int swv_cm_ep_passive(struct rdma_cm_id *idp, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (attr) {
		id->has_ep_attr = true;
		id->ep_attr = *attr;
		id->ep_pd = pd;
	}
	return 0;
}

CM_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **idp)
{
	struct cm_id *l = (struct cm_id *)listen;
	if (!l || !idp || !l->sync || l->state != CM_LISTEN) {
		errno = EINVAL;
		return -1;
	}
	if (l->id.event) {
		rdma_ack_cm_event(l->id.event);
		l->id.event = NULL;
	}
	struct rdma_cm_event *e;
	for (;;) {
		if (rdma_get_cm_event(&l->chan->ch, &e))
			return -1;
		if (e->status) {
			int err = e->status < 0 ? -e->status : e->status;
			rdma_ack_cm_event(e);
			errno = err;
			return -1;
		}
		if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		rdma_ack_cm_event(e);
	}
	struct cm_id *c = (struct cm_id *)e->id;
	/* The new id is synchronous too, on a channel of its own. */
	if (rdma_migrate_id(&c->id, NULL)) {
		int err = errno;
		rdma_ack_cm_event(e);
		errno = err;
		return -1;
	}
	c->id.event = e;
	if (l->has_ep_attr) {
		struct ibv_qp_init_attr a = l->ep_attr;
		if (rdma_create_qp(&c->id, l->ep_pd, &a)) {
			int err = errno;
			rdma_reject(&c->id, NULL, 0);
			rdma_destroy_id(&c->id);
			errno = err;
			return -1;
		}
	}
	*idp = &c->id;
	return 0;
}

/* ---- options, ECE, misc ----------------------------------------------------------- */

CM_EXPORT int rdma_set_option(struct rdma_cm_id *idp, int level, int optname, void *optval,
			      size_t optlen)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id || !optval) {
		errno = EINVAL;
		return -1;
	}
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				break;
			id->tos = *(uint8_t *)optval;
			return 0;
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
			/* A CM port is one UDP socket; reuse and IPv6 do not apply. */
			if (optlen != sizeof(int))
				break;
			return 0;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t))
				break;
			id->ack_timeout = *(uint8_t *)optval > 31 ? 31 : *(uint8_t *)optval;
			return 0;
		default:
			errno = ENOSYS;
			return -1;
		}
		errno = EINVAL;
		return -1;
	}
	errno = ENOSYS;
	return -1;
}

CM_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece) {
		errno = EINVAL;
		return -1;
	}
	errno = EOPNOTSUPP;
	return -1;
}

CM_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece) {
		errno = EINVAL;
		return -1;
	}
	memset(ece, 0, sizeof(*ece));
	return 0;
}

/* ---- multicast (UD ids) ------------------------------------------------------------ */

/* The MGID of an IPv4 group, as the kernel's CM maps it: on IB the IPoIB mapping
 * (ff12:401b:<P_Key>::<low 28 bits of the address>), on RoCE the IPv4-mapped address.
 * Both map back to the same IP group in swverbs (docs/wire.md, "UD multicast"). */
static void mc_mgid(const struct cm_dev *d, struct in_addr ip, union ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	memcpy(g->raw + 12, &ip.s_addr, 4);
	if (d->link_layer == IBV_LINK_LAYER_ETHERNET) {
		g->raw[10] = g->raw[11] = 0xff;
		return;
	}
	static const uint8_t prefix[6] = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff};
	memcpy(g->raw, prefix, sizeof(prefix));
	g->raw[12] &= 0x0f;
}

static int join_locked(struct cm_id *id, const struct sockaddr *addr, bool sendonly, void *context)
{
	struct sockaddr_in sin;
	int rc = sin_of(addr, &sin);
	if (rc)
		return rc;
	/* As the kernel: a UD id with a device, bound or resolved; a group address. */
	if (id->id.qp_type != IBV_QPT_UD || !id->dev ||
	    (id->state != CM_BOUND && id->state != CM_ADDR_RESOLVED) ||
	    !IN_MULTICAST(ntohl(sin.sin_addr.s_addr)))
		return EINVAL;
	struct cm_mc *mc = calloc(1, sizeof(*mc));
	if (!mc)
		return ENOMEM;
	mc->addr = sin;
	mc->sendonly = sendonly;
	mc->context = context;
	mc_mgid(id->dev, sin.sin_addr, &mc->mgid);
	/* A multicast LID from the address on IB (0xc000..0xfffe); none on Ethernet. */
	mc->mlid = id->dev->link_layer == IBV_LINK_LAYER_ETHERNET
		       ? 0
		       : (uint16_t)(0xc000 + ntohl(sin.sin_addr.s_addr) % 0x3fff);
	struct cm_event *e = ev_new(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
	if (!e) {
		free(mc);
		return ENOMEM;
	}
	mc->next = id->mcs;
	id->mcs = mc;
	e->mc = mc;
	struct ibv_ah_attr *ah = &e->ev.param.ud.ah_attr;
	ah->is_global = 1;
	ah->grh.dgid = mc->mgid;
	ah->grh.sgid_index = 0;
	ah->grh.hop_limit = 1;
	ah->dlid = mc->mlid;
	ah->port_num = id->id.port_num ? id->id.port_num : 1;
	e->ev.param.ud.qp_num = 0xffffff;
	e->ev.param.ud.qkey = RDMA_UDP_QKEY;
	e->ev.param.ud.private_data = context; /* librdmacm hands the join's context back here */
	ev_queue(e);
	return 0;
}

CM_EXPORT int rdma_join_multicast(struct rdma_cm_id *idp, struct sockaddr *addr, void *context)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id || !addr) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	int rc = join_locked(id, addr, false, context);
	pthread_mutex_unlock(&cm_lock);
	if (rc) {
		errno = rc;
		return -1;
	}
	return sync_wait(id);
}

CM_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *idp, struct rdma_cm_join_mc_attr_ex *attr,
				     void *context)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id || !attr || !attr->addr ||
	    (attr->comp_mask &
	     ~(uint32_t)(RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS)) ||
	    !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS)) {
		errno = EINVAL;
		return -1;
	}
	uint32_t flags = attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS
			     ? attr->join_flags
			     : RDMA_MC_JOIN_FLAG_FULLMEMBER;
	if (flags != RDMA_MC_JOIN_FLAG_FULLMEMBER &&
	    flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	int rc =
	    join_locked(id, attr->addr, flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, context);
	pthread_mutex_unlock(&cm_lock);
	if (rc) {
		errno = rc;
		return -1;
	}
	return sync_wait(id);
}

/* Forget a membership: detach its QP, and a join event still queued no longer
 * refers to it. */
static void mc_free_locked(struct cm_id *id, struct cm_mc *mc)
{
	if (mc->attached)
		(void)ibv_detach_mcast(mc->attached, &mc->mgid, mc->mlid);
	if (id->chan)
		for (struct cm_event *e = id->chan->head; e; e = e->next)
			if (e->mc == mc)
				e->mc = NULL;
	free(mc);
}

/* Every membership whose QP is qp detaches it (before that QP is destroyed). */
static void mc_detach_qp_locked(struct cm_id *id, struct ibv_qp *qp)
{
	for (struct cm_mc *mc = id->mcs; mc; mc = mc->next)
		if (mc->attached == qp) {
			(void)ibv_detach_mcast(qp, &mc->mgid, mc->mlid);
			mc->attached = NULL;
		}
}

static void mc_free_all_locked(struct cm_id *id)
{
	while (id->mcs) {
		struct cm_mc *mc = id->mcs;
		id->mcs = mc->next;
		mc_free_locked(id, mc);
	}
}

CM_EXPORT int rdma_leave_multicast(struct rdma_cm_id *idp, struct sockaddr *addr)
{
	struct cm_id *id = (struct cm_id *)idp;
	struct sockaddr_in sin;
	if (!id || !addr || sin_of(addr, &sin)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	struct cm_mc **p = &id->mcs;
	while (*p && ((*p)->addr.sin_addr.s_addr != sin.sin_addr.s_addr))
		p = &(*p)->next;
	struct cm_mc *mc = *p;
	if (mc) {
		*p = mc->next;
		mc_free_locked(id, mc);
	}
	pthread_mutex_unlock(&cm_lock);
	if (!mc) {
		errno = EADDRNOTAVAIL; /* librdmacm: no such membership */
		return -1;
	}
	return 0;
}

CM_EXPORT int rdma_write_cm_event(struct rdma_cm_id *idp, enum rdma_cm_event_type event, int status,
				  uint64_t arg)
{
	struct cm_id *id = (struct cm_id *)idp;
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	struct cm_event *e = ev_new(id, event, status);
	if (e) {
		e->ev.param.arg = arg;
		ev_queue(e);
	}
	pthread_mutex_unlock(&cm_lock);
	if (!e) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

/* ---- receiving ------------------------------------------------------------------- */

static struct cm_id *id_by_comm(uint32_t comm, struct cm_sock *s)
{
	for (struct cm_id *id = cm_ids; id; id = id->next)
		if (id->comm_id == comm && id->sock == s && !id->destroying)
			return id;
	return NULL;
}

static void take_remote(struct cm_id *id, const struct swcm_msg *m)
{
	id->have_remote = true;
	id->rqpn = ntohl(m->qpn) & 0xffffff;
	id->rpsn = ntohl(m->psn) & 0xffffff;
	id->rqkey = ntohl(m->qkey);
	id->r_resp_res = m->resp_res;
	id->r_init_depth = m->init_depth;
	id->r_retry = m->retry_count;
	id->r_rnr_retry = m->rnr_retry_count;
	id->r_mtu = m->mtu;
	id->r_link_layer = m->link_layer;
	id->rlid = ntohs(m->lid);
	memcpy(id->rgid, m->gid, 16);
	memcpy(id->id.route.addr.addr.ibaddr.dgid.raw, m->gid, 16);
}

static void reply_to(struct cm_sock *s, const struct sockaddr_in *to, const struct swcm_msg *in,
		     uint8_t type, uint16_t reason)
{
	struct swcm_msg m;
	memset(&m, 0, SWCM_HDR_LEN);
	m.magic = htonl(SWCM_MAGIC);
	m.version = SWCM_VERSION;
	m.type = type;
	m.dst_comm_id = in->src_comm_id;
	m.src_comm_id = in->dst_comm_id;
	m.reason = htons(reason);
	msg_send_to(s, to, &m, SWCM_HDR_LEN);
}

static void conn_lost(struct cm_id *id, int status)
{
	qp_to_err(id);
	timer_stop(id);
	id->ka_next = 0;
	id->state = CM_DISCONNECTED;
	ev_simple(id, RDMA_CM_EVENT_DISCONNECTED, status);
}

static void on_req(struct cm_sock *s, const struct sockaddr_in *from, const struct swcm_msg *m)
{
	bool ud = m->type == SWCM_SIDR_REQ;
	struct cm_id *l = s->listener;
	uint32_t rcomm = ntohl(m->src_comm_id);
	/* A retransmitted request: answer from where the exchange is. */
	for (struct cm_id *c = cm_ids; c; c = c->next) {
		if (c->sock != s || c->remote_comm_id != rcomm || c->destroying ||
		    c->peer_cm.sin_addr.s_addr != from->sin_addr.s_addr ||
		    c->peer_cm.sin_port != from->sin_port)
			continue;
		if (c->state == CM_REQ_RCVD)
			send_simple(c, SWCM_MRA);
		else if (c->state == CM_REP_SENT)
			msg_send(c, &c->last, c->last_len);
		return;
	}
	if (!l && now_ms() < s->grace_until)
		return; /* bound and about to listen, or listening again: the REQ is resent */
	if (!l || l->state != CM_LISTEN || ntohs(m->port_space) != (uint16_t)l->id.ps) {
		reply_to(s, from, m, ud ? SWCM_SIDR_REP : SWCM_REJ,
			 ud ? SWCM_SIDR_UNSUPPORTED : SWCM_REJ_INVALID_SERVICE_ID);
		return;
	}
	struct in_addr lip = {.s_addr = m->dst_ip};
	struct cm_dev *d = l->dev ? l->dev : dev_by_ip(lip);
	if (!d) {
		reply_to(s, from, m, ud ? SWCM_SIDR_REP : SWCM_REJ,
			 ud ? SWCM_SIDR_UNSUPPORTED : SWCM_REJ_INVALID_SERVICE_ID);
		return;
	}
	struct cm_id *c = id_alloc_locked(l->chan, l->id.context, l->id.ps, l->id.qp_type);
	struct cm_event *e = c ? ev_new(l, RDMA_CM_EVENT_CONNECT_REQUEST, 0) : NULL;
	if (!e) {
		if (c) {
			id_unlink_locked(c);
			free(c);
		}
		return;
	}
	c->sync = false;
	c->listen = l;
	c->sock = s;
	s->refs++;
	id_set_dev(c, d);
	c->remote_comm_id = rcomm;
	c->peer_cm = *from;
	c->ack_timeout = l->ack_timeout;
	c->tos = l->tos;
	take_remote(c, m);
	/* What rdma_init_qp_attr answers before the accept (an application that moves its
	 * own QP does so before accepting), as the kernel's CM takes it from the REQ: the
	 * peer's depth is our responder resources, its resources our depth, and its retry
	 * counts are ours. rdma_accept narrows the depths to what it is given. */
	if (!ud) {
		int mr = d->max_rd_atom, mi = d->max_init_rd_atom;
		c->qp_max_dest_rd = (uint8_t)(m->init_depth < mr ? m->init_depth : mr);
		c->qp_max_rd = (uint8_t)(m->resp_res < mi ? m->resp_res : mi);
		c->qp_retry = m->retry_count;
		c->qp_rnr_retry = m->rnr_retry_count;
	}
	c->state = CM_REQ_RCVD;
	struct sockaddr_in *src = &c->id.route.addr.src_sin, *dst = &c->id.route.addr.dst_sin;
	src->sin_family = AF_INET;
	src->sin_addr = d->ip;
	src->sin_port = s->addr.sin_port;
	dst->sin_family = AF_INET;
	dst->sin_addr.s_addr = m->src_ip ? m->src_ip : from->sin_addr.s_addr;
	dst->sin_port = from->sin_port;
	/* As for an active id, the route is known. */
	c->path.sgid = d->gid;
	memcpy(c->path.dgid.raw, m->gid, 16);
	c->path.slid = htons(d->lid);
	c->path.dlid = m->lid;
	c->path.pkey = htons(0xffff);
	c->path.numb_path = 1;
	c->path.reversible = 1;
	c->path.mtu = d->mtu < m->mtu ? d->mtu : m->mtu;
	c->id.route.path_rec = &c->path;
	c->id.route.num_paths = 1;

	e->ev.id = &c->id;
	e->ev.listen_id = &l->id;
	if (ud) {
		unsigned n = ntohs(m->pdata_len);
		if (n > SWCM_PDATA_SIDR_REQ)
			n = SWCM_PDATA_SIDR_REQ;
		memcpy(e->pdata, m->pdata, n);
		e->ev.param.ud.private_data = e->pdata;
		e->ev.param.ud.private_data_len = SWCM_PDATA_SIDR_REQ;
		fill_ah(c, &e->ev.param.ud.ah_attr);
		e->ev.param.ud.qp_num = c->rqpn;
		e->ev.param.ud.qkey = c->rqkey;
	} else {
		struct swcm_msg tmp;
		memcpy(&tmp, m, sizeof(tmp));
		tmp.pdata_len = ntohs(m->pdata_len);
		ev_set_conn_pdata(e, &tmp, SWCM_PDATA_REQ);
		/* The event speaks from this side: the peer's depth is our resources. */
		e->ev.param.conn.responder_resources = m->init_depth;
		e->ev.param.conn.initiator_depth = m->resp_res;
		e->ev.param.conn.flow_control = m->flow_control;
		e->ev.param.conn.retry_count = m->retry_count;
		e->ev.param.conn.rnr_retry_count = m->rnr_retry_count;
		e->ev.param.conn.srq = m->srq;
		e->ev.param.conn.qp_num = c->rqpn;
	}
	ev_queue(e);
}

static void conn_event(struct cm_id *id, enum rdma_cm_event_type type, const struct swcm_msg *m,
		       unsigned report)
{
	struct cm_event *e = ev_new(id, type, 0);
	if (!e)
		return;
	struct swcm_msg tmp;
	memcpy(&tmp, m, sizeof(tmp));
	tmp.pdata_len = ntohs(m->pdata_len);
	ev_set_conn_pdata(e, &tmp, report);
	e->ev.param.conn.responder_resources = m->init_depth;
	e->ev.param.conn.initiator_depth = m->resp_res;
	e->ev.param.conn.flow_control = m->flow_control;
	e->ev.param.conn.rnr_retry_count = m->rnr_retry_count;
	e->ev.param.conn.srq = m->srq;
	e->ev.param.conn.qp_num = ntohl(m->qpn) & 0xffffff;
	ev_queue(e);
}

static void on_msg(struct cm_sock *s, const struct sockaddr_in *from, const struct swcm_msg *m,
		   size_t len)
{
	if (len < SWCM_HDR_LEN || ntohl(m->magic) != SWCM_MAGIC || m->version != SWCM_VERSION ||
	    SWCM_HDR_LEN + ntohs(m->pdata_len) > len || ntohs(m->pdata_len) > SWCM_PDATA_MAX)
		return;
	if (m->type == SWCM_REQ || m->type == SWCM_SIDR_REQ) {
		on_req(s, from, m);
		return;
	}
	struct cm_id *id = id_by_comm(ntohl(m->dst_comm_id), s);
	if (!id) {
		/* The id is gone: say so, so the peer does not wait out its timers. */
		if (m->type == SWCM_DREQ)
			reply_to(s, from, m, SWCM_DREP, 0);
		else if (m->type == SWCM_PING || m->type == SWCM_REP)
			reply_to(s, from, m, SWCM_REJ, SWCM_REJ_INVALID_COMM_ID);
		return;
	}
	id->ka_missed = 0;
	switch (m->type) {
	case SWCM_MRA:
		/* The peer has the request and waits for its application: keep waiting. */
		if (id->state == CM_REQ_SENT && now_ms() - id->started < CM_MRA_MAX_MS)
			id->tries = 0;
		break;
	case SWCM_REP:
		if (id->state == CM_ESTABLISHED) {
			send_simple(id, SWCM_RTU); /* our RTU was lost */
			break;
		}
		if (id->state != CM_REQ_SENT || id->id.qp_type == IBV_QPT_UD)
			break;
		timer_stop(id);
		id->remote_comm_id = ntohl(m->src_comm_id);
		id->peer_cm = *from;
		take_remote(id, m);
		id->qp_max_rd = m->resp_res < id->init_depth ? m->resp_res : id->init_depth;
		id->qp_max_dest_rd = m->init_depth < id->resp_res ? m->init_depth : id->resp_res;
		id->qp_retry = id->retry_cnt;
		id->qp_rnr_retry = m->rnr_retry_count;
		if (!id->id.qp) {
			id->state = CM_REP_RCVD;
			conn_event(id, RDMA_CM_EVENT_CONNECT_RESPONSE, m, SWCM_PDATA_REP);
			break;
		}
		if (qp_connect(id)) {
			struct swcm_msg r;
			msg_init(id, &r, SWCM_REJ);
			r.reason = htons(SWCM_REJ_CONSUMER_DEFINED);
			msg_send(id, &r, SWCM_HDR_LEN);
			qp_to_err(id);
			id->state = CM_FAILED;
			ev_simple(id, RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL);
			break;
		}
		send_simple(id, SWCM_RTU);
		id->state = CM_ESTABLISHED;
		ka_start(id);
		conn_event(id, RDMA_CM_EVENT_ESTABLISHED, m, SWCM_PDATA_REP);
		break;
	case SWCM_RTU:
		if (id->state != CM_REP_SENT)
			break;
		timer_stop(id);
		id->state = CM_ESTABLISHED;
		ka_start(id);
		ev_simple(id, RDMA_CM_EVENT_ESTABLISHED, 0);
		break;
	case SWCM_SIDR_REP: {
		if (id->state != CM_REQ_SENT || id->id.qp_type != IBV_QPT_UD)
			break;
		timer_stop(id);
		id->remote_comm_id = ntohl(m->src_comm_id);
		uint16_t st = ntohs(m->reason);
		if (st != SWCM_SIDR_SUCCESS) {
			id->state = CM_FAILED;
			struct cm_event *e = ev_new(id, RDMA_CM_EVENT_UNREACHABLE, st);
			if (e) {
				unsigned n = ntohs(m->pdata_len);
				memcpy(e->pdata, m->pdata,
				       n < SWCM_PDATA_SIDR_REP ? n : SWCM_PDATA_SIDR_REP);
				e->ev.param.ud.private_data = e->pdata;
				e->ev.param.ud.private_data_len = SWCM_PDATA_SIDR_REP;
				ev_queue(e);
			}
			break;
		}
		take_remote(id, m);
		id->state = CM_UD_DONE;
		struct cm_event *e = ev_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);
		if (!e)
			break;
		unsigned n = ntohs(m->pdata_len);
		memcpy(e->pdata, m->pdata, n < SWCM_PDATA_SIDR_REP ? n : SWCM_PDATA_SIDR_REP);
		e->ev.param.ud.private_data = e->pdata;
		e->ev.param.ud.private_data_len = SWCM_PDATA_SIDR_REP;
		fill_ah(id, &e->ev.param.ud.ah_attr);
		e->ev.param.ud.qp_num = id->rqpn;
		e->ev.param.ud.qkey = id->rqkey;
		ev_queue(e);
		break;
	}
	case SWCM_REJ: {
		uint16_t reason = ntohs(m->reason);
		if (id->state == CM_REQ_SENT || id->state == CM_REP_SENT ||
		    id->state == CM_REQ_RCVD || id->state == CM_REP_RCVD) {
			timer_stop(id);
			qp_to_err(id);
			id->state = CM_FAILED;
			struct cm_event *e = ev_new(id, RDMA_CM_EVENT_REJECTED, reason);
			if (e) {
				struct swcm_msg tmp;
				memcpy(&tmp, m, sizeof(tmp));
				tmp.pdata_len = ntohs(m->pdata_len);
				ev_set_conn_pdata(e, &tmp, SWCM_PDATA_REJ);
				ev_queue(e);
			}
		} else if (id->state == CM_ESTABLISHED || id->state == CM_DREQ_SENT) {
			/* The peer no longer knows the connection (keepalive answer). */
			conn_lost(id, 0);
		}
		break;
	}
	case SWCM_DREQ:
		reply_to(s, from, m, SWCM_DREP, 0);
		if (id->state == CM_ESTABLISHED || id->state == CM_DREQ_SENT ||
		    id->state == CM_REP_SENT || id->state == CM_REP_RCVD) {
			timer_stop(id);
			id->ka_next = 0;
			id->state = CM_DISCONNECTED;
			ev_simple(id, RDMA_CM_EVENT_DISCONNECTED, 0);
		}
		break;
	case SWCM_DREP:
		if (id->state == CM_DREQ_SENT) {
			timer_stop(id);
			id->state = CM_DISCONNECTED;
			ev_simple(id, RDMA_CM_EVENT_DISCONNECTED, 0);
		}
		break;
	case SWCM_PING:
		reply_to(s, from, m, SWCM_PONG, 0);
		break;
	case SWCM_PONG:
	default:
		break;
	}
}

/* An ICMP error for a datagram sent to `to`: nobody has a CM socket there. */
static void on_unreachable(struct cm_sock *s, const struct sockaddr_in *to)
{
	for (struct cm_id *id = cm_ids; id; id = id->next) {
		if (id->sock != s || id->destroying || id->peer_cm.sin_port != to->sin_port ||
		    id->peer_cm.sin_addr.s_addr != to->sin_addr.s_addr)
			continue;
		switch (id->state) {
		case CM_REQ_SENT:
			timer_stop(id);
			qp_to_err(id);
			id->state = CM_FAILED;
			/* What the peer's CM would answer for a port nobody listens on. */
			if (id->id.qp_type == IBV_QPT_UD)
				ev_simple(id, RDMA_CM_EVENT_UNREACHABLE, SWCM_SIDR_UNSUPPORTED);
			else
				ev_simple(id, RDMA_CM_EVENT_REJECTED, SWCM_REJ_INVALID_SERVICE_ID);
			break;
		case CM_ESTABLISHED:
		case CM_REP_SENT:
		case CM_REP_RCVD:
		case CM_DREQ_SENT:
			conn_lost(id, 0);
			break;
		default:
			break;
		}
	}
}

static void sock_read(struct cm_sock *s)
{
	struct swcm_msg m;
	for (int budget = 0; budget < 64; budget++) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t n =
		    recvfrom(s->fd, &m, sizeof(m), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		if (n >= 0) {
			if (from.sin_family == AF_INET)
				on_msg(s, &from, &m, (size_t)n);
			continue;
		}
		if (errno == EINTR || errno == ECONNREFUSED || errno == EHOSTUNREACH ||
		    errno == ENETUNREACH)
			continue;
		break;
	}
	for (int budget = 0; budget < 64; budget++) {
		char cbuf[256], data[64];
		struct sockaddr_in to;
		struct iovec iov = {.iov_base = data, .iov_len = sizeof(data)};
		struct msghdr mh = {.msg_name = &to,
				    .msg_namelen = sizeof(to),
				    .msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf)};
		if (recvmsg(s->fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			break;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != IPPROTO_IP || c->cmsg_type != IP_RECVERR)
				continue;
			struct sock_extended_err ee;
			memcpy(&ee, CMSG_DATA(c), sizeof(ee));
			if (ee.ee_origin == SO_EE_ORIGIN_ICMP &&
			    (ee.ee_errno == ECONNREFUSED || ee.ee_errno == EHOSTUNREACH))
				on_unreachable(s, &to);
		}
	}
}

/* Retransmission, timeouts and keepalive; returns ms until the next deadline. */
static int run_timers(void)
{
	uint64_t now = now_ms(), next = now + 60000;
	for (struct cm_id *id = cm_ids; id; id = id->next) {
		if (id->destroying)
			continue;
		if (id->deadline && id->deadline <= now) {
			if (++id->tries > id->max_tries) {
				id->deadline = 0;
				switch (id->state) {
				case CM_REQ_SENT:
				case CM_REP_SENT:
					qp_to_err(id);
					id->state = CM_FAILED;
					ev_simple(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
					break;
				case CM_DREQ_SENT:
					id->state = CM_DISCONNECTED;
					ev_simple(id, RDMA_CM_EVENT_DISCONNECTED, -ETIMEDOUT);
					break;
				default:
					break;
				}
			} else {
				msg_send(id, &id->last, id->last_len);
				id->rto = id->rto * 2 > CM_RTO_MAX_MS ? CM_RTO_MAX_MS : id->rto * 2;
				id->deadline = now + id->rto;
			}
		}
		if (id->deadline && id->deadline < next)
			next = id->deadline;
		if (id->state == CM_ESTABLISHED && id->ka_next) {
			if (id->ka_next <= now) {
				if (++id->ka_missed > CM_KA_MISSED) {
					conn_lost(id, -ETIMEDOUT);
					continue;
				}
				send_simple(id, SWCM_PING);
				id->ka_next = now + CM_KA_MS;
			}
			if (id->ka_next < next)
				next = id->ka_next;
		}
	}
	return (int)(next - now);
}

static void *cm_thread(void *arg)
{
	struct epoll_event evs[16];
	int timeout = 0;
	for (;;) {
		int n = epoll_wait(cm_epfd, evs, 16, timeout);
		pthread_mutex_lock(&cm_lock);
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == cm_wakefd) {
				uint64_t v;
				if (read(fd, &v, sizeof(v)) < 0) {
					/* nothing pending */
				}
				continue;
			}
			for (struct cm_sock *s = cm_socks; s; s = s->next)
				if (s->fd == fd) {
					sock_read(s);
					break;
				}
		}
		timeout = run_timers();
		pthread_mutex_unlock(&cm_lock);
	}
	return NULL;
}
