/*
 * A program as someone would write it for rdma-core 65: only <infiniband/verbs.h> and
 * the upstream completion-counter verbs, linked as "-libverbs" (its binary requires
 * libibverbs.so.1 at IBVERBS_1.18, which Debian's rdma-core 44 does not have).
 * test_rdma65_binary.sh runs it unmodified under swverbs-run.
 *
 * Two RC QPs of one process are connected to each other; 256 unsignaled RDMA WRITEs go
 * from A to B. A counter on A's RDMA_WRITE and one on B's REMOTE_RDMA_WRITE must both
 * reach exactly 256, with every byte in place, and no CQE may appear.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N  256
#define SZ 4096

static void die(const char *what)
{
	fprintf(stderr, "rdma65_counter: %s failed\n", what);
	exit(1);
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = N, .max_recv_wr = 1,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						 IBV_QP_ACCESS_FLAGS))
		die("create/INIT qp");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest_qpn, uint16_t dlid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				.dest_qp_num = dest_qpn, .rq_psn = 0, .max_dest_rd_atomic = 1,
				.min_rnr_timer = 12, .ah_attr = {.dlid = dlid, .port_num = 1}};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				 .rnr_retry = 7, .sq_psn = 0, .max_rd_atomic = 1};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

static struct ibv_comp_cntr *counter(struct ibv_context *ctx, struct ibv_qp *qp, uint32_t op)
{
	struct ibv_comp_cntr_init_attr ca = {.type = IBV_COMP_CNTR_TYPE_WRS};
	struct ibv_qp_attach_comp_cntr_attr aa = {.op_mask = op};
	struct ibv_comp_cntr *c = ibv_create_comp_cntr(ctx, &ca);
	if (!c || ibv_qp_attach_comp_cntr(qp, c, &aa))
		die("create/attach counter");
	return c;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		die("ibv_get_device_list");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!ctx)
		die("ibv_open_device");

	struct ibv_comp_cntr_caps caps;
	if (ibv_query_comp_cntr_caps(ctx, &caps) ||
	    (caps.supported_qp_attach_ops & (IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE |
					     IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE)) !=
		    (IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE |
		     IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE))
		die("ibv_query_comp_cntr_caps");

	struct ibv_port_attr port;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	char *src = malloc((size_t)N * SZ), *dst = calloc(N, SZ);
	if (ibv_query_port(ctx, 1, &port) || !pd || !cq || !src || !dst)
		die("setup");
	struct ibv_mr *smr = ibv_reg_mr(pd, src, (size_t)N * SZ, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, (size_t)N * SZ,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!smr || !dmr)
		die("ibv_reg_mr");
	for (size_t i = 0; i < (size_t)N * SZ; i++)
		src[i] = (char)(i * 7 + 1);

	struct ibv_qp *a = make_qp(pd, cq), *b = make_qp(pd, cq);
	/* Counters attach in RESET/INIT only: before the QPs are connected. */
	struct ibv_comp_cntr *wr = counter(ctx, a, IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE);
	struct ibv_comp_cntr *rwr = counter(ctx, b, IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE);
	connect_qp(a, b->qp_num, port.lid);
	connect_qp(b, a->qp_num, port.lid);

	for (int i = 0; i < N; i++) {
		struct ibv_sge sge = {(uintptr_t)(src + (size_t)i * SZ), SZ, smr->lkey};
		struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					.opcode = IBV_WR_RDMA_WRITE,
					.wr.rdma = {(uintptr_t)(dst + (size_t)i * SZ), dmr->rkey}},
				   *bad;
		if (ibv_post_send(a, &w, &bad))
			die("ibv_post_send");
	}

	/* Completion is observed through the counters alone. */
	uint64_t n_wr = 0, n_rwr = 0, e_wr = 0, e_rwr = 0;
	time_t end = time(NULL) + 30;
	while ((n_wr < N || n_rwr < N) && time(NULL) < end) {
		if (ibv_read_comp_cntr(wr, &n_wr) || ibv_read_comp_cntr(rwr, &n_rwr))
			die("ibv_read_comp_cntr");
	}
	if (ibv_read_err_comp_cntr(wr, &e_wr) || ibv_read_err_comp_cntr(rwr, &e_rwr))
		die("ibv_read_err_comp_cntr");
	struct ibv_wc wc;
	int cqes = ibv_poll_cq(cq, 1, &wc);
	printf("rdma65_counter: RDMA_WRITE %llu (err %llu), REMOTE_RDMA_WRITE %llu (err %llu), "
	       "CQEs %d\n", (unsigned long long)n_wr, (unsigned long long)e_wr,
	       (unsigned long long)n_rwr, (unsigned long long)e_rwr, cqes);
	if (n_wr != N || n_rwr != N || e_wr || e_rwr || cqes != 0)
		die("exact counts");
	if (memcmp(src, dst, (size_t)N * SZ))
		die("data check");

	/* Destroying a counter still attached is refused until its QP is gone. */
	if (ibv_destroy_comp_cntr(wr) == 0)
		die("destroy while attached must fail");
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b) || ibv_destroy_comp_cntr(wr) ||
	    ibv_destroy_comp_cntr(rwr) || ibv_dereg_mr(smr) || ibv_dereg_mr(dmr) ||
	    ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		die("teardown");
	free(src);
	free(dst);
	puts("rdma65_counter: ok");
	return 0;
}
