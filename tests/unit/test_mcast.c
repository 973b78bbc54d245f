/*
 * ibv_attach_mcast / ibv_detach_mcast errnos, as the kernel (ib_attach_mcast,
 * uverbs) and rxe answer them:
 *  - EINVAL: NULL QP or GID; a GID that is not multicast (ff00::/8 or an IPv4-mapped
 *    224.0.0.0/4); a QP that is not UD; on an IB link layer a LID outside
 *    0xc000..0xfffe (RoCE ignores the LID); detaching what is not attached;
 *  - 0 for attaching a QP twice to one group (one membership: one detach undoes it);
 *  - ENOMEM beyond max_mcast_qp_attach QPs on a group or max_mcast_grp groups;
 *  - EBUSY destroying a QP still attached;
 *  - EOPNOTSUPP on a device in authenticated mode;
 *  - the limits in ibv_query_device.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK_PTR(l);
	struct ibv_context *ctx = NULL;
	for (int i = 0; l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name))
			ctx = ibv_open_device(l[i]);
	ibv_free_device_list(l);
	CHECK_PTR(ctx);
	return ctx;
}

static struct ibv_qp *mk_qp(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .qp_type = type,
	    .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK_PTR(qp);
	return qp;
}

static union ibv_gid ib_mgid(unsigned n)
{
	union ibv_gid g;
	static const uint8_t prefix[] = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff};
	memset(&g, 0, sizeof(g));
	memcpy(g.raw, prefix, sizeof(prefix));
	g.raw[13] = 0xfe; /* a range no other test uses */
	g.raw[14] = (uint8_t)(n >> 8);
	g.raw[15] = (uint8_t)n;
	return g;
}

static union ibv_gid mapped(uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
	union ibv_gid g;
	memset(&g, 0, sizeof(g));
	g.raw[10] = g.raw[11] = 0xff;
	g.raw[12] = a;
	g.raw[13] = b;
	g.raw[14] = c;
	g.raw[15] = d;
	return g;
}

static void ib_port(void)
{
	struct ibv_context *ctx = open_dev("mi0");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	CHECK_PTR(cq);
	struct ibv_device_attr da;
	CHECK_OK(ibv_query_device(ctx, &da));
	CHECK(da.max_mcast_grp > 0);
	CHECK(da.max_mcast_qp_attach > 0);
	CHECK_EQ(da.max_total_mcast_qp_attach, da.max_mcast_grp * da.max_mcast_qp_attach);

	struct ibv_qp *ud = mk_qp(pd, cq, IBV_QPT_UD); /* RESET: attach needs no state */
	struct ibv_qp *rc = mk_qp(pd, cq, IBV_QPT_RC);
	struct ibv_qp *uc = mk_qp(pd, cq, IBV_QPT_UC);
	union ibv_gid g = ib_mgid(1), own;
	CHECK_OK(ibv_query_gid(ctx, 1, 0, &own));

	CHECK_EQ(ibv_attach_mcast(NULL, &g, 0xc000), EINVAL);
	CHECK_EQ(ibv_attach_mcast(ud, NULL, 0xc000), EINVAL);
	CHECK_EQ(ibv_attach_mcast(ud, &own, 0xc000), EINVAL); /* unicast GID */
	union ibv_gid v4u = mapped(10, 0, 0, 1), v4m = mapped(239, 1, 2, 3);
	CHECK_EQ(ibv_attach_mcast(ud, &v4u, 0xc000), EINVAL); /* unicast IPv4 */
	CHECK_EQ(ibv_attach_mcast(rc, &g, 0xc000), EINVAL);
	CHECK_EQ(ibv_attach_mcast(uc, &g, 0xc000), EINVAL);
	CHECK_EQ(ibv_attach_mcast(ud, &g, 0), EINVAL);
	CHECK_EQ(ibv_attach_mcast(ud, &g, 0xbfff), EINVAL);
	CHECK_EQ(ibv_attach_mcast(ud, &g, 0xffff), EINVAL); /* permissive LID */

	CHECK_OK(ibv_attach_mcast(ud, &g, 0xc000));
	CHECK_OK(ibv_attach_mcast(ud, &g, 0xc000)); /* again: success, one membership */
	CHECK_EQ(ibv_destroy_qp(ud), EBUSY);
	CHECK_EQ(ibv_detach_mcast(ud, &g, 0x1), EINVAL); /* bad LID first */
	CHECK_EQ(ibv_detach_mcast(rc, &g, 0xc000), EINVAL);
	union ibv_gid other = ib_mgid(2);
	CHECK_EQ(ibv_detach_mcast(ud, &other, 0xc000), EINVAL); /* never attached */
	CHECK_OK(ibv_detach_mcast(ud, &g, 0xc000));
	CHECK_EQ(ibv_detach_mcast(ud, &g, 0xc000), EINVAL); /* detached already */
	CHECK_OK(ibv_attach_mcast(ud, &v4m, 0xfffe));	    /* mapped multicast */
	CHECK_OK(ibv_detach_mcast(ud, &v4m, 0xfffe));

	/* max_mcast_qp_attach QPs on one group, then ENOMEM */
	unsigned nq = da.max_mcast_qp_attach;
	struct ibv_qp **qps = calloc(nq + 1, sizeof(*qps));
	CHECK_PTR(qps);
	for (unsigned i = 0; i <= nq; i++)
		qps[i] = mk_qp(pd, cq, IBV_QPT_UD);
	for (unsigned i = 0; i < nq; i++)
		CHECK_OK(ibv_attach_mcast(qps[i], &g, 0xc000));
	CHECK_EQ(ibv_attach_mcast(qps[nq], &g, 0xc000), ENOMEM);
	CHECK_OK(ibv_detach_mcast(qps[0], &g, 0xc000)); /* a place frees up */
	CHECK_OK(ibv_attach_mcast(qps[nq], &g, 0xc000));
	for (unsigned i = 1; i <= nq; i++)
		CHECK_OK(ibv_detach_mcast(qps[i], &g, 0xc000));

	/* max_mcast_grp groups, then ENOMEM */
	for (int i = 0; i < da.max_mcast_grp; i++) {
		union ibv_gid gi = ib_mgid(100 + (unsigned)i);
		CHECK_OK(ibv_attach_mcast(ud, &gi, 0xc000));
	}
	union ibv_gid extra = ib_mgid(99);
	CHECK_EQ(ibv_attach_mcast(ud, &extra, 0xc000), ENOMEM);
	for (int i = 0; i < da.max_mcast_grp; i++) {
		union ibv_gid gi = ib_mgid(100 + (unsigned)i);
		CHECK_OK(ibv_detach_mcast(ud, &gi, 0xc000));
	}
	CHECK_OK(ibv_attach_mcast(ud, &extra, 0xc000));
	CHECK_OK(ibv_detach_mcast(ud, &extra, 0xc000));

	for (unsigned i = 0; i <= nq; i++)
		CHECK_OK(ibv_destroy_qp(qps[i]));
	free(qps);
	CHECK_OK(ibv_destroy_qp(ud));
	CHECK_OK(ibv_destroy_qp(rc));
	CHECK_OK(ibv_destroy_qp(uc));

	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
}

static void roce_port(void)
{
	struct ibv_context *ctx = open_dev("mi1");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK_PTR(cq);
	struct ibv_qp *ud = mk_qp(pd, cq, IBV_QPT_UD);
	union ibv_gid g = mapped(239, 254, 0, 1);
	CHECK_OK(ibv_attach_mcast(ud, &g, 0)); /* no LIDs on Ethernet: not checked */
	CHECK_OK(ibv_detach_mcast(ud, &g, 0x1234));
	CHECK_OK(ibv_destroy_qp(ud));
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
}

static void auth_device(void)
{
	struct ibv_context *ctx = open_dev("mi2");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK_PTR(cq);
	struct ibv_qp *ud = mk_qp(pd, cq, IBV_QPT_UD);
	union ibv_gid g = ib_mgid(3);
	CHECK_EQ(ibv_attach_mcast(ud, &g, 0xc000), EOPNOTSUPP);
	CHECK_EQ(ibv_attach_mcast(ud, &g, 0x1), EINVAL); /* arguments first */
	CHECK_OK(ibv_destroy_qp(ud));
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
}

int main(void)
{
	setenv("SWVERBS_DEVICES",
	       "mi0=127.0.0.1/8;mi1=127.0.0.2/8,roce;"
	       "mi2=127.0.0.3/8,auth_key=000102030405060708090a0b0c0d0e0f",
	       1);
	ib_port();
	roce_port();
	auth_device();
	printf("mcast errnos: ok\n");
	return 0;
}
