/*
 * Send WR opcode table (transport/wr_opcode.c), written out again here: which QP types
 * may post each IBV_WR_* (rxe's rules, XRC INI as its ops table), its wire opcodes by
 * packet position, completion opcode and counter slot; anything else posts nowhere.
 */
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "transport/qp_ex.h"
#include "transport/wr_opcode.h"

enum { RC = 1, UC = 2, UD = 4, XI = 8 };

struct expect {
	uint32_t op;
	unsigned qpts;
	uint8_t only, first, middle, last;
	enum ibv_wc_opcode wc;
	enum swv_cntr_slot slot;
};

static const struct expect want[] = {
    {IBV_WR_SEND, RC | UC | UD | XI, 0x04, 0x00, 0x01, 0x02, IBV_WC_SEND, SWV_CNTR_SEND},
    {IBV_WR_SEND_WITH_IMM, RC | UC | UD | XI, 0x05, 0x00, 0x01, 0x03, IBV_WC_SEND, SWV_CNTR_SEND},
    {IBV_WR_SEND_WITH_INV, RC, 0x17, 0x00, 0x01, 0x16, IBV_WC_SEND, SWV_CNTR_SEND},
    {IBV_WR_RDMA_WRITE, RC | UC | XI, 0x0a, 0x06, 0x07, 0x08, IBV_WC_RDMA_WRITE,
     SWV_CNTR_RDMA_WRITE},
    {IBV_WR_RDMA_WRITE_WITH_IMM, RC | UC | XI, 0x0b, 0x06, 0x07, 0x09, IBV_WC_RDMA_WRITE,
     SWV_CNTR_RDMA_WRITE},
    {IBV_WR_RDMA_READ, RC | XI, 0x0c, 0x0c, 0x0c, 0x0c, IBV_WC_RDMA_READ, SWV_CNTR_RDMA_READ},
    {IBV_WR_ATOMIC_CMP_AND_SWP, RC | XI, 0x13, 0x13, 0x13, 0x13, IBV_WC_COMP_SWAP, SWV_CNTR_ATOMIC},
    {IBV_WR_ATOMIC_FETCH_AND_ADD, RC | XI, 0x14, 0x14, 0x14, 0x14, IBV_WC_FETCH_ADD,
     SWV_CNTR_ATOMIC},
    {IBV_WR_ATOMIC_WRITE, RC, 0x1d, 0x1d, 0x1d, 0x1d, IBV_WC_ATOMIC_WRITE, SWV_CNTR_RDMA_WRITE},
    {IBV_WR_FLUSH, RC, 0x1c, 0x1c, 0x1c, 0x1c, IBV_WC_FLUSH, SWV_CNTR_RDMA_WRITE},
    {IBV_WR_BIND_MW, RC | UC, 0, 0, 0, 0, IBV_WC_BIND_MW, SWV_CNTR_SEND},
    {IBV_WR_LOCAL_INV, RC | UC, 0, 0, 0, 0, IBV_WC_LOCAL_INV, SWV_CNTR_SEND},
};

static unsigned qpts_of(uint32_t op)
{
	return (swv_wr_opcode_allowed(IBV_QPT_RC, op) ? RC : 0) |
	       (swv_wr_opcode_allowed(IBV_QPT_UC, op) ? UC : 0) |
	       (swv_wr_opcode_allowed(IBV_QPT_UD, op) ? UD : 0) |
	       (swv_wr_opcode_allowed(IBV_QPT_XRC_SEND, op) ? XI : 0);
}

int main(void)
{
	int seen[SWV_WR_OPCODES] = {0};

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct expect *e = &want[i];
		const struct swv_wr_opcode_info *wi = swv_wr_opcode(e->op);

		CHECK(wi->name != NULL);
		CHECK_EQ(qpts_of(e->op), e->qpts);
		CHECK(!swv_wr_opcode_allowed(IBV_QPT_XRC_RECV, e->op)); /* no send queue */
		CHECK(!swv_wr_opcode_allowed(IBV_QPT_RAW_PACKET, e->op));
		CHECK_EQ(swv_wr_wire_op(e->op, 0, 1), e->only);
		CHECK_EQ(swv_wr_wire_op(e->op, 0, 3), e->first);
		CHECK_EQ(swv_wr_wire_op(e->op, 1, 3), e->middle);
		CHECK_EQ(swv_wr_wire_op(e->op, 2, 3), e->last);
		CHECK_EQ(wi->wc, e->wc);
		CHECK_EQ(wi->slot, e->slot);
		/* every wire opcode is an RC request the responder serves */
		if (!(wi->flags & SWV_WRF_LOCAL))
			for (int k = 0; k < 4; k++)
				CHECK(swv_opcode_request(IBV_QPT_RC, wi->wire[k]) != 0);
		seen[e->op]++;
	}
	/* the properties the post checks and the requester ask */
	CHECK(swv_wr_is(IBV_WR_RDMA_READ, SWV_WRF_RD_ATOMIC));
	CHECK(swv_wr_is(IBV_WR_ATOMIC_CMP_AND_SWP, SWV_WRF_RD_ATOMIC));
	CHECK(swv_wr_is(IBV_WR_ATOMIC_FETCH_AND_ADD, SWV_WRF_RD_ATOMIC));
	CHECK(!swv_wr_is(IBV_WR_ATOMIC_WRITE, SWV_WRF_RD_ATOMIC | SWV_WRF_ATOMIC));
	CHECK(!swv_wr_is(IBV_WR_FLUSH, SWV_WRF_RD_ATOMIC));
	CHECK(swv_wr_is(IBV_WR_BIND_MW, SWV_WRF_LOCAL) &&
	      swv_wr_is(IBV_WR_LOCAL_INV, SWV_WRF_LOCAL));
	CHECK(swv_wr_is(IBV_WR_ATOMIC_WRITE, SWV_WRF_BUILDER) &&
	      swv_wr_is(IBV_WR_FLUSH, SWV_WRF_BUILDER));
	CHECK(swv_wr_is(IBV_WR_RDMA_READ, SWV_WRF_RDMA_FIELDS));
	CHECK(swv_wr_is(IBV_WR_ATOMIC_FETCH_AND_ADD, SWV_WRF_ATOMIC_FIELDS));
	CHECK(!swv_wr_is(IBV_WR_SEND,
			 SWV_WRF_RDMA_FIELDS | SWV_WRF_ATOMIC_FIELDS | SWV_WRF_NO_INLINE));
	CHECK(swv_wr_is(IBV_WR_SEND_WITH_INV, SWV_WRF_INV) && !swv_wr_is(IBV_WR_SEND, SWV_WRF_INV));
	CHECK(swv_wr_is(IBV_WR_RDMA_WRITE_WITH_IMM, SWV_WRF_IMM));
	/* TSO, DRIVER1, the gaps and anything past the table: posted nowhere, SEND-like */
	for (uint32_t op = 0; op < 64; op++) {
		if (op < SWV_WR_OPCODES && seen[op]) {
			CHECK_EQ(seen[op], 1);
			continue;
		}
		CHECK(swv_wr_opcode(op)->name == NULL);
		CHECK_EQ(qpts_of(op), 0);
		CHECK_EQ(swv_wr_opcode(op)->flags, 0);
		CHECK_EQ(swv_wr_opcode(op)->wc, IBV_WC_SEND);
		CHECK_EQ(swv_wr_opcode(op)->slot, SWV_CNTR_SEND);
	}
	CHECK(swv_wr_opcode(0xffffffffu)->name == NULL);

	/* The builder's send_ops_flags per QP type, written out again. */
	const uint64_t rc_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
				IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
				IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
				IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV |
				IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_FLUSH;
	CHECK_EQ(swv_qp_ex_supported_ops(IBV_QPT_RC), rc_ops);
	CHECK_EQ(swv_qp_ex_supported_ops(IBV_QPT_UC),
		 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
		     IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_LOCAL_INV |
		     IBV_QP_EX_WITH_BIND_MW);
	CHECK_EQ(swv_qp_ex_supported_ops(IBV_QPT_UD),
		 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
	CHECK_EQ(swv_qp_ex_supported_ops(IBV_QPT_XRC_SEND),
		 rc_ops & ~(uint64_t)(IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |
				      IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_ATOMIC_WRITE |
				      IBV_QP_EX_WITH_FLUSH));
	CHECK_EQ(swv_qp_ex_supported_ops(IBV_QPT_XRC_RECV), 0);
	CHECK_EQ(swv_qp_ex_supported_ops(IBV_QPT_RAW_PACKET), 0);
	printf("test_wr_opcode: OK\n");
	return 0;
}
