/* Address-vector resolution and AH lifetime on an IB-style and a RoCE-style device. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "core/ah.h"
#include "core/async.h"
#include "core/context.h"
#include "core/pd.h"
#include "net/addr.h"

static void test_ib(struct ibv_context *ib)
{
	struct swv_context *ctx = to_swv_ctx(ib);
	struct in_addr ip;
	struct ibv_port_attr pa;
	CHECK_OK(ibv_query_port(ib, 1, &pa));

	/* Our own LID resolves to our own IP (127.0.0.1/8 -> LID 1). */
	struct ibv_ah_attr av = {.dlid = pa.lid, .port_num = 1};
	CHECK_OK(swv_av_resolve(ctx, &av, &ip));
	CHECK_EQ(ip.s_addr, ctx->cfg->addr.s_addr);
	av.dlid = 0x0203; /* 127.0.2.3 */
	CHECK_OK(swv_av_resolve(ctx, &av, &ip));
	CHECK_EQ(ntohl(ip.s_addr), 0x7f000203);
	av.dlid = 0;
	CHECK_EQ(swv_av_resolve(ctx, &av, &ip), EINVAL);
	av.dlid = 0xffff;
	CHECK_EQ(swv_av_resolve(ctx, &av, &ip), EINVAL);
	av.dlid = 1;
	av.port_num = 2;
	CHECK_EQ(swv_av_resolve(ctx, &av, &ip), EINVAL);
	av.port_num = 0;
	CHECK_EQ(swv_av_resolve(ctx, &av, &ip), EINVAL);

	/* GRH with our GID (fe80::guid) and with an IPv4-mapped GID. */
	union ibv_gid g;
	CHECK_OK(ibv_query_gid(ib, 1, 0, &g));
	struct ibv_ah_attr gav = {.is_global = 1, .port_num = 1};
	gav.grh.dgid = g;
	CHECK_OK(swv_av_resolve(ctx, &gav, &ip));
	CHECK_EQ(ip.s_addr, ctx->cfg->addr.s_addr);
	memset(&gav.grh.dgid, 0, 16);
	gav.grh.dgid.raw[10] = gav.grh.dgid.raw[11] = 0xff;
	gav.grh.dgid.raw[12] = 10, gav.grh.dgid.raw[15] = 7;
	CHECK_OK(swv_av_resolve(ctx, &gav, &ip));
	CHECK_EQ(ntohl(ip.s_addr), 0x0a000007);
	gav.grh.sgid_index = 1; /* empty source GID entry */
	CHECK_EQ(swv_av_resolve(ctx, &gav, &ip), EINVAL);
	gav.grh.sgid_index = 0;
	gav.grh.dgid.raw[0] = 0x20; /* a global IPv6 GID is unroutable */
	CHECK_EQ(swv_av_resolve(ctx, &gav, &ip), EINVAL);

	/* ibv_create_ah holds the PD; errors come back as NULL + errno. */
	struct ibv_pd *pd = ibv_alloc_pd(ib);
	CHECK_PTR(pd);
	av.port_num = 1;
	av.dlid = 1;
	struct ibv_ah *ah = ibv_create_ah(pd, &av);
	CHECK_PTR(ah);
	CHECK(ah->pd == pd && ah->context == ib);
	CHECK_EQ(to_swv_ah(ah)->dst.sin_addr.s_addr, ctx->cfg->addr.s_addr);
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	av.dlid = 0;
	errno = 0;
	CHECK(ibv_create_ah(pd, &av) == NULL && errno == EINVAL);
	CHECK(ibv_create_ah(NULL, &av) == NULL && errno == EINVAL);
	CHECK_OK(ibv_destroy_ah(ah));
	CHECK_EQ(ibv_destroy_ah(NULL), EINVAL);
	CHECK_OK(ibv_dealloc_pd(pd));
}

static void test_roce(struct ibv_context *ib)
{
	struct swv_context *ctx = to_swv_ctx(ib);
	struct in_addr ip;
	/* No LIDs on Ethernet: a GRH is required. */
	struct ibv_ah_attr av = {.dlid = 1, .port_num = 1};
	CHECK_EQ(swv_av_resolve(ctx, &av, &ip), EINVAL);
	union ibv_gid g;
	CHECK_OK(ibv_query_gid(ib, 1, 0, &g));
	av.is_global = 1;
	av.grh.dgid = g;
	CHECK_OK(swv_av_resolve(ctx, &av, &ip));
	CHECK_EQ(ip.s_addr, ctx->cfg->addr.s_addr);
}

static void test_async(struct ibv_context *ib)
{
	struct swv_context *ctx = to_swv_ctx(ib);
	struct ibv_cq *cq = ibv_create_cq(ib, 4, NULL, NULL, 0);
	CHECK_PTR(cq);
	swv_async_event(ctx, IBV_EVENT_PORT_ACTIVE, (void *)(uintptr_t)1);
	swv_async_event(ctx, IBV_EVENT_CQ_ERR, cq);
	struct ibv_async_event ev;
	CHECK_OK(ibv_get_async_event(ib, &ev));
	CHECK_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
	CHECK_EQ(ev.element.port_num, 1);
	ibv_ack_async_event(&ev);
	CHECK_OK(ibv_get_async_event(ib, &ev));
	CHECK_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
	CHECK(ev.element.cq == cq);
	ibv_ack_async_event(&ev); /* without this ack, destroy_cq would wait */
	CHECK_EQ(cq->async_events_completed, 1);
	CHECK_OK(ibv_destroy_cq(cq));
	/* Non-blocking fd with nothing queued. */
	int fl = fcntl(ib->async_fd, F_GETFL);
	CHECK_OK(fcntl(ib->async_fd, F_SETFL, fl | O_NONBLOCK));
	errno = 0;
	CHECK_EQ(ibv_get_async_event(ib, &ev), -1);
	CHECK_EQ(errno, EAGAIN);
	CHECK(strcmp(ibv_event_type_str(IBV_EVENT_CQ_ERR), "CQ error") == 0);
	CHECK(strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0);
	CHECK(strcmp(ibv_wc_status_str((enum ibv_wc_status)999), "unknown") == 0);
}

static void test_from_wc(struct ibv_context *ib, struct ibv_context *roce)
{
	struct ibv_ah_attr av;
	struct ibv_wc wc = {.slid = 0x0203, .sl = 0};
	uint8_t raw[40];
	struct ibv_grh *grh = (struct ibv_grh *)raw;

	/* IB, no GRH: back to the sender's LID. */
	CHECK_OK(ibv_init_ah_from_wc(ib, 1, &wc, NULL, &av));
	CHECK_EQ(av.dlid, 0x0203);
	CHECK_EQ(av.is_global, 0);
	CHECK_EQ(ibv_init_ah_from_wc(ib, 2, &wc, NULL, &av), -1);

	/* IB GRH: sgid = sender, dgid = us. */
	union ibv_gid me, peer;
	CHECK_OK(ibv_query_gid(ib, 1, 0, &me));
	peer = me;
	peer.raw[15] ^= 0x05;
	memset(raw, 0, sizeof(raw));
	grh->version_tclass_flow = htonl(6u << 28 | 0x12u << 20 | 0x345);
	grh->sgid = peer;
	grh->dgid = me;
	wc.wc_flags = IBV_WC_GRH;
	CHECK_OK(ibv_init_ah_from_wc(ib, 1, &wc, grh, &av));
	CHECK_EQ(av.is_global, 1);
	CHECK(memcmp(av.grh.dgid.raw, peer.raw, 16) == 0);
	CHECK_EQ(av.grh.flow_label, 0x345);
	CHECK_EQ(av.grh.traffic_class, 0x12);
	CHECK_EQ(av.grh.sgid_index, 0);
	/* A GRH addressed to someone else's GID is refused. */
	grh->dgid = peer;
	CHECK_EQ(ibv_init_ah_from_wc(ib, 1, &wc, grh, &av), -1);

	/* RoCE: IPv4 header in bytes 20..39; no GRH is an error (no LIDs). */
	struct ibv_wc rwc = {.wc_flags = IBV_WC_GRH};
	memset(raw, 0, sizeof(raw));
	raw[20] = 0x45;
	raw[20 + 12] = 10, raw[20 + 15] = 9;                        /* from 10.0.0.9 */
	memcpy(raw + 20 + 16, &to_swv_ctx(roce)->cfg->addr, 4);     /* to us */
	CHECK_OK(ibv_init_ah_from_wc(roce, 1, &rwc, grh, &av));
	CHECK_EQ(av.is_global, 1);
	CHECK(av.grh.dgid.raw[10] == 0xff && av.grh.dgid.raw[12] == 10 && av.grh.dgid.raw[15] == 9);
	struct ibv_pd *pd = ibv_alloc_pd(roce);
	CHECK_PTR(pd);
	struct ibv_ah *ah = ibv_create_ah_from_wc(pd, &rwc, grh, 1);
	CHECK_PTR(ah);
	CHECK_EQ(ntohl(to_swv_ah(ah)->dst.sin_addr.s_addr), 0x0a000009);
	CHECK_OK(ibv_destroy_ah(ah));
	CHECK_OK(ibv_dealloc_pd(pd));
	rwc.wc_flags = 0;
	CHECK_EQ(ibv_init_ah_from_wc(roce, 1, &rwc, grh, &av), -1);
}

int main(void)
{
	unsetenv("SWVERBS_CONFIG");
	setenv("SWVERBS_DEVICES", "ah0=127.0.0.1/8;ah1=127.0.0.2/8,roce", 1);
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK_PTR(l);
	struct ibv_context *ib = ibv_open_device(l[0]), *roce = ibv_open_device(l[1]);
	CHECK_PTR(ib);
	CHECK_PTR(roce);
	test_ib(ib);
	test_roce(roce);
	test_from_wc(ib, roce);
	test_async(ib);
	CHECK_OK(ibv_close_device(ib));
	CHECK_OK(ibv_close_device(roce));
	ibv_free_device_list(l);
	printf("test_ah: OK\n");
	return 0;
}
