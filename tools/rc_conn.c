/* RC connection setup shared by swverbs-demo and bench/; see rc_conn.h. */
#include "rc_conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void rc_die(const char *who, const char *what, int err)
{
	fprintf(stderr, "%s [%d]: %s: %s\n", who, (int)getpid(), what, strerror(err));
	exit(1);
}

pid_t rc_fork(const char *who, int *ctl)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		rc_die(who, "socketpair", errno);
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		rc_die(who, "fork", errno);
	close(pid ? sv[1] : sv[0]);
	*ctl = pid ? sv[0] : sv[1];
	return pid;
}

void rc_xfer(const char *who, int sock, void *p, size_t n, bool out)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = out ? write(sock, (char *)p + done, n - done)
				: read(sock, (char *)p + done, n - done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			rc_die(who, out ? "socket write" : "socket read", r < 0 ? errno : EPIPE);
		done += (size_t)r;
	}
}

struct ibv_context *rc_open_device(const char *who, const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n == 0)
		rc_die(who, "no swverbs device", errno ? errno : ENODEV);
	struct ibv_device *dev = list[0];
	for (int i = 0; name && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			dev = list[i];
	struct ibv_context *ctx = ibv_open_device(dev);
	ibv_free_device_list(list);
	if (!ctx)
		rc_die(who, "ibv_open_device", errno);
	return ctx;
}

void rc_conn_open(struct rc_conn *c, const char *who, const struct rc_conn_attr *a)
{
	int ret;
	c->who = who;
	c->attr = *a;
	c->ctx = rc_open_device(who, a->dev);
	if ((ret = ibv_query_port(c->ctx, 1, &c->port)))
		rc_die(who, "ibv_query_port", ret);

	c->pd = ibv_alloc_pd(c->ctx);
	c->scq = ibv_create_cq(c->ctx, a->send_cqe, NULL, NULL, 0);
	c->rcq = a->recv_cqe ? ibv_create_cq(c->ctx, a->recv_cqe, NULL, NULL, 0) : c->scq;
	if (!c->pd || !c->scq || !c->rcq)
		rc_die(who, "pd/cq", errno);
	if (posix_memalign((void **)&c->buf, 4096, a->len))
		rc_die(who, "buffer", ENOMEM);
	memset(c->buf, 0, a->len);
	c->mr = ibv_reg_mr(c->pd, c->buf, a->len, IBV_ACCESS_LOCAL_WRITE | a->mr_access);
	if (!c->mr)
		rc_die(who, "ibv_reg_mr", errno);

	struct ibv_qp_init_attr qa = {
	    .send_cq = c->scq, .recv_cq = c->rcq, .qp_type = IBV_QPT_RC, .cap = a->cap};
	c->qp = ibv_create_qp(c->pd, &qa);
	if (!c->qp)
		rc_die(who, "ibv_create_qp", errno);

	union ibv_gid gid;
	if ((ret = ibv_query_gid(c->ctx, 1, 0, &gid)))
		rc_die(who, "ibv_query_gid", ret);
	c->me = (struct rc_endpoint){.lid = c->port.lid,
				     .gid = gid,
				     .qpn = c->qp->qp_num,
				     .psn = (uint32_t)getpid() & 0xffffff,
				     .addr = (uintptr_t)c->buf,
				     .rkey = c->mr->rkey};
}

void rc_conn_exchange(struct rc_conn *c, int sock, bool first)
{
	/* One side writes first so the two never wait on each other. */
	if (first)
		rc_xfer(c->who, sock, &c->me, sizeof(c->me), true);
	rc_xfer(c->who, sock, &c->peer, sizeof(c->peer), false);
	if (!first)
		rc_xfer(c->who, sock, &c->me, sizeof(c->me), true);
}

void rc_conn_connect(struct rc_conn *c)
{
	int ret;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
				.port_num = 1,
				.qp_access_flags = (unsigned)c->attr.qp_access};
	if ((ret = ibv_modify_qp(
		 c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		rc_die(c->who, "modify to INIT", ret);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = c->peer.qpn;
	a.rq_psn = c->peer.psn;
	a.max_dest_rd_atomic = c->attr.rd_atomic;
	a.min_rnr_timer = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = c->peer.lid;
	if (c->port.link_layer == IBV_LINK_LAYER_ETHERNET) { /* RoCE-style port: GID routed */
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = c->peer.gid;
		a.ah_attr.grh.hop_limit = 64;
	}
	if ((ret = ibv_modify_qp(c->qp, &a,
				 IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				     IBV_QP_MIN_RNR_TIMER)))
		rc_die(c->who, "modify to RTR", ret);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = c->me.psn;
	a.timeout = 14;
	a.retry_cnt = c->attr.retry_cnt ? c->attr.retry_cnt : 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = c->attr.rd_atomic;
	if ((ret = ibv_modify_qp(c->qp, &a,
				 IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)))
		rc_die(c->who, "modify to RTS", ret);
}

void rc_conn_close(struct rc_conn *c)
{
	ibv_dereg_mr(c->mr);
	if (c->rcq != c->scq)
		ibv_destroy_cq(c->rcq);
	ibv_destroy_cq(c->scq);
	ibv_dealloc_pd(c->pd);
	ibv_close_device(c->ctx);
	free(c->buf);
}
