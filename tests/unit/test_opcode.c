/*
 * Opcode table (transport/opcode.c) against roce-wire.md 2.2, written out again here
 * independently: every supported opcode's header length, headers and properties,
 * the XRC opcodes (the RC ones under 0xa0, requests with an XRCETH after BTH),
 * swverbs' one manufacturer-range opcode (UC flow control, docs/wire.md), and every
 * other opcode (RD, CNP, UC and XRC FLUSH/ATOMIC_WRITE, reserved, the rest of
 * 0xe0-0xff) unsupported.
 */
#include <stdint.h>

#include "check.h"
#include "transport/opcode.h"

struct expect {
	uint8_t op;
	uint8_t len;     /* BTH + extension headers (doc column "len") */
	uint32_t hdrs;   /* SWV_HDR_* */
	uint32_t props;  /* SWV_OPF_* */
	const char *name;
};

#define P  SWV_OPF_PAYLOAD
#define RQ SWV_OPF_REQUEST
#define RS SWV_OPF_RESPONSE
#define W  SWV_OPF_RWQE /* takes a receive WQE */

static const struct expect rc_uc_common[] = {
	{0x00, 12, 0, P | RQ | SWV_OPF_SEND | SWV_OPF_FIRST | W, "SEND_FIRST"},
	{0x01, 12, 0, P | RQ | SWV_OPF_SEND | SWV_OPF_MIDDLE, "SEND_MIDDLE"},
	{0x02, 12, 0, P | RQ | SWV_OPF_SEND | SWV_OPF_LAST, "SEND_LAST"},
	{0x03, 16, SWV_HDR_IMM, P | RQ | SWV_OPF_SEND | SWV_OPF_LAST, "SEND_LAST_WITH_IMMEDIATE"},
	{0x04, 12, 0, P | RQ | SWV_OPF_SEND | SWV_OPF_ONLY | W, "SEND_ONLY"},
	{0x05, 16, SWV_HDR_IMM, P | RQ | SWV_OPF_SEND | SWV_OPF_ONLY | W,
	 "SEND_ONLY_WITH_IMMEDIATE"},
	{0x06, 28, SWV_HDR_RETH, P | RQ | SWV_OPF_WRITE | SWV_OPF_FIRST, "RDMA_WRITE_FIRST"},
	{0x07, 12, 0, P | RQ | SWV_OPF_WRITE | SWV_OPF_MIDDLE, "RDMA_WRITE_MIDDLE"},
	{0x08, 12, 0, P | RQ | SWV_OPF_WRITE | SWV_OPF_LAST, "RDMA_WRITE_LAST"},
	{0x09, 16, SWV_HDR_IMM, P | RQ | SWV_OPF_WRITE | SWV_OPF_LAST | W,
	 "RDMA_WRITE_LAST_WITH_IMMEDIATE"},
	{0x0a, 28, SWV_HDR_RETH, P | RQ | SWV_OPF_WRITE | SWV_OPF_ONLY, "RDMA_WRITE_ONLY"},
	{0x0b, 32, SWV_HDR_RETH | SWV_HDR_IMM, P | RQ | SWV_OPF_WRITE | SWV_OPF_ONLY | W,
	 "RDMA_WRITE_ONLY_WITH_IMMEDIATE"},
};

static const struct expect rc_only[] = {
    {0x0c, 28, SWV_HDR_RETH, RQ | SWV_OPF_READ | SWV_OPF_ONLY, "RC_RDMA_READ_REQUEST"},
    {0x0d, 16, SWV_HDR_AETH, P | RS | SWV_OPF_READ | SWV_OPF_FIRST, "RC_RDMA_READ_RESPONSE_FIRST"},
    {0x0e, 12, 0, P | RS | SWV_OPF_READ | SWV_OPF_MIDDLE, "RC_RDMA_READ_RESPONSE_MIDDLE"},
    {0x0f, 16, SWV_HDR_AETH, P | RS | SWV_OPF_READ | SWV_OPF_LAST, "RC_RDMA_READ_RESPONSE_LAST"},
    {0x10, 16, SWV_HDR_AETH, P | RS | SWV_OPF_READ | SWV_OPF_ONLY, "RC_RDMA_READ_RESPONSE_ONLY"},
    {0x11, 16, SWV_HDR_AETH, RS | SWV_OPF_ACK | SWV_OPF_ONLY, "RC_ACKNOWLEDGE"},
    {0x12, 24, SWV_HDR_AETH | SWV_HDR_ATMACK, RS | SWV_OPF_ACK | SWV_OPF_ATOMIC | SWV_OPF_ONLY,
     "RC_ATOMIC_ACKNOWLEDGE"},
    {0x13, 40, SWV_HDR_ATMETH, RQ | SWV_OPF_ATOMIC | SWV_OPF_CMPSWAP | SWV_OPF_ONLY,
     "RC_COMPARE_SWAP"},
    {0x14, 40, SWV_HDR_ATMETH, RQ | SWV_OPF_ATOMIC | SWV_OPF_ONLY, "RC_FETCH_ADD"},
    {0x16, 16, SWV_HDR_IETH, P | RQ | SWV_OPF_SEND | SWV_OPF_LAST, "RC_SEND_LAST_WITH_INVALIDATE"},
    {0x1c, 32, SWV_HDR_FETH | SWV_HDR_RETH, RQ | SWV_OPF_FLUSH | SWV_OPF_ONLY, "RC_FLUSH"},
    {0x1d, 28, SWV_HDR_RETH, P | RQ | SWV_OPF_ATOMIC_WRITE | SWV_OPF_ONLY, "RC_ATOMIC_WRITE"},
    {0x17, 16, SWV_HDR_IETH, P | RQ | SWV_OPF_SEND | SWV_OPF_ONLY | W,
     "RC_SEND_ONLY_WITH_INVALIDATE"},
    {0x64, 20, SWV_HDR_DETH, P | RQ | SWV_OPF_SEND | SWV_OPF_ONLY | W, "UD_SEND_ONLY"},
    {0x65, 24, SWV_HDR_DETH | SWV_HDR_IMM, P | RQ | SWV_OPF_SEND | SWV_OPF_ONLY | W,
     "UD_SEND_ONLY_WITH_IMMEDIATE"},
    /* swverbs UC flow control: BTH + 8 payload bytes, neither request nor response */
    {0xe0, 12, 0, P | SWV_OPF_FLOWCTL | SWV_OPF_ONLY, "SWV_UC_FLOW_CONTROL"},
};

#define HDR_MASK                                                                                   \
	(SWV_HDR_RETH | SWV_HDR_AETH | SWV_HDR_ATMETH | SWV_HDR_ATMACK | SWV_HDR_DETH |            \
	 SWV_HDR_IMM | SWV_HDR_IETH | SWV_HDR_XRCETH | SWV_HDR_FETH)

static int seen[256];

static void check_entry(uint8_t op, const struct expect *e, const char *prefix)
{
	const struct swv_opcode_info *oi = swv_opcode(op);
	char want[64];
	snprintf(want, sizeof(want), "%s%s", prefix, e->name);
	if (!oi->name || strcmp(oi->name, want) != 0) {
		fprintf(stderr, "opcode 0x%02x: name %s, expected %s\n", op,
			oi->name ? oi->name : "(null)", want);
		exit(1);
	}
	CHECK(swv_opcode_supported(op));
	CHECK_EQ(oi->hdr_len, e->len);
	CHECK_EQ(oi->flags & HDR_MASK, e->hdrs);
	CHECK_EQ(oi->flags & ~HDR_MASK, e->props);
	/* Consistency: hdr_len is exactly BTH + the listed headers. */
	unsigned sum = 12;
	sum += (oi->flags & SWV_HDR_RETH) ? SWV_RETH_LEN : 0;
	sum += (oi->flags & SWV_HDR_AETH) ? SWV_AETH_LEN : 0;
	sum += (oi->flags & SWV_HDR_ATMETH) ? SWV_ATMETH_LEN : 0;
	sum += (oi->flags & SWV_HDR_ATMACK) ? SWV_ATMACK_LEN : 0;
	sum += (oi->flags & SWV_HDR_DETH) ? SWV_DETH_LEN : 0;
	sum += (oi->flags & SWV_HDR_IMM) ? SWV_IMM_LEN : 0;
	sum += (oi->flags & SWV_HDR_IETH) ? SWV_IETH_LEN : 0;
	sum += (oi->flags & SWV_HDR_XRCETH) ? SWV_XRCETH_LEN : 0;
	sum += (oi->flags & SWV_HDR_FETH) ? SWV_FETH_LEN : 0;
	CHECK_EQ(oi->hdr_len, sum);
	/* Exactly one of request / response / flow control. */
	CHECK_EQ(!!(oi->flags & SWV_OPF_REQUEST) + !!(oi->flags & SWV_OPF_RESPONSE) +
			 !!(oi->flags & SWV_OPF_FLOWCTL),
		 1);
	seen[op]++;
}

int main(void)
{
	CHECK_EQ(SWV_RETH_LEN + SWV_AETH_LEN + SWV_ATMETH_LEN + SWV_ATMACK_LEN + SWV_DETH_LEN +
		     SWV_IMM_LEN + SWV_IETH_LEN + SWV_FETH_LEN + SWV_XRCETH_LEN,
		 16 + 4 + 28 + 8 + 8 + 4 + 4 + 4 + 4);
	/* Every header and property flag a bit of its own (two headers sharing one would
	 * make the parser read both whenever either is present). */
	static const uint32_t bits[] = {
	    SWV_HDR_RETH,    SWV_HDR_AETH,    SWV_HDR_ATMETH,	    SWV_HDR_ATMACK,
	    SWV_HDR_DETH,    SWV_HDR_IMM,     SWV_HDR_IETH,	    SWV_HDR_FETH,
	    SWV_HDR_XRCETH,  SWV_OPF_PAYLOAD, SWV_OPF_REQUEST,	    SWV_OPF_RESPONSE,
	    SWV_OPF_FIRST,   SWV_OPF_MIDDLE,  SWV_OPF_LAST,	    SWV_OPF_SEND,
	    SWV_OPF_WRITE,   SWV_OPF_READ,    SWV_OPF_ATOMIC,	    SWV_OPF_ACK,
	    SWV_OPF_FLOWCTL, SWV_OPF_FLUSH,   SWV_OPF_ATOMIC_WRITE, SWV_OPF_RWQE, SWV_OPF_CMPSWAP,
	};
	uint32_t taken = 0;
	for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) {
		CHECK(bits[i] != 0 && (bits[i] & (bits[i] - 1)) == 0);
		CHECK_EQ(taken & bits[i], 0);
		taken |= bits[i];
	}
	for (size_t i = 0; i < sizeof(rc_uc_common) / sizeof(rc_uc_common[0]); i++) {
		check_entry(SWV_OP_RC | rc_uc_common[i].op, &rc_uc_common[i], "RC_");
		check_entry(SWV_OP_UC | rc_uc_common[i].op, &rc_uc_common[i], "UC_");
	}
	for (size_t i = 0; i < sizeof(rc_only) / sizeof(rc_only[0]); i++)
		check_entry(rc_only[i].op, &rc_only[i], "");
	/* XRC: each RC opcode under 0xa0; requests carry the 4-byte XRCETH, responses
	 * (READ responses, ACKs) do not. */
	for (size_t i = 0; i < sizeof(rc_uc_common) / sizeof(rc_uc_common[0]); i++) {
		struct expect x = rc_uc_common[i];
		x.len += 4;
		x.hdrs |= SWV_HDR_XRCETH;
		check_entry(SWV_OP_XRC | x.op, &x, "XRC_");
	}
	for (size_t i = 0; i < sizeof(rc_only) / sizeof(rc_only[0]); i++) {
		struct expect x = rc_only[i];
		if (x.op > 0x17)
			continue; /* FLUSH, ATOMIC_WRITE, UD and flow control have no XRC form */
		if (x.props & RQ) {
			x.len += 4;
			x.hdrs |= SWV_HDR_XRCETH;
		}
		check_entry(SWV_OP_XRC | x.op, &x, "X"); /* "XRC_..." from "RC_..." */
	}

	/* Everything else is unsupported: UC READ/atomic/ACK/INV/FLUSH/ATOMIC_WRITE,
	 * reserved 0x15, 0x18-0x1b, 0x1e-0x1f, RD 0x40-0x5f, other UD
	 * opcodes, CNP 0x80/0x81, XRC 0xb5 and 0xb8-0xbf (FLUSH, ATOMIC_WRITE included),
	 * vendor 0xe1-0xff. */
	int supported = 0;
	for (int op = 0; op < 256; op++) {
		const struct swv_opcode_info *oi = swv_opcode((uint8_t)op);
		if (seen[op]) {
			CHECK_EQ(seen[op], 1);
			supported++;
			if (op == SWV_OP_FLOW_CONTROL)
				continue;
			uint8_t tp = swv_opcode_transport((uint8_t)op);
			CHECK(tp == SWV_OP_RC || tp == SWV_OP_UC || tp == SWV_OP_UD ||
			      tp == SWV_OP_XRC);
			/* the transport prefix names the QP types that carry it */
			uint16_t want =
			    SWV_QPT_BIT(IBV_QPT_XRC_SEND) | SWV_QPT_BIT(IBV_QPT_XRC_RECV);
			if (tp == SWV_OP_RC)
				want = SWV_QPT_BIT(IBV_QPT_RC);
			else if (tp == SWV_OP_UC)
				want = SWV_QPT_BIT(IBV_QPT_UC);
			else if (tp == SWV_OP_UD)
				want = SWV_QPT_BIT(IBV_QPT_UD);
			CHECK_EQ(oi->qp_types, want);
			continue;
		}
		if (oi->name || oi->flags || oi->hdr_len || oi->qp_types ||
		    swv_opcode_supported((uint8_t)op)) {
			fprintf(stderr, "opcode 0x%02x should be unsupported, is %s\n", op,
				oi->name ? oi->name : "(null)");
			exit(1);
		}
	}
	CHECK_EQ(supported, 12 + 12 + 15 + 1 + 23);
	CHECK(!swv_opcode_supported(0xb5)); /* XRC has no 0x15 either */
	CHECK(!swv_opcode_supported(0xb8));
	CHECK(!swv_opcode_supported(0xbc)); /* no XRC FLUSH */
	CHECK(!swv_opcode_supported(0xbd)); /* no XRC ATOMIC_WRITE */
	CHECK_EQ(SWV_OP_FLOW_CONTROL, 0xe0);
	CHECK(!swv_opcode_supported(0xe1));
	CHECK(!swv_opcode_supported(0xff));
	CHECK(swv_opcode_supported(0x1c));
	CHECK(swv_opcode_supported(0x1d));
	CHECK(!swv_opcode_supported(0x3c)); /* no UC FLUSH */
	CHECK(!swv_opcode_supported(0x3d));
	CHECK(!swv_opcode_supported(0x81));
	CHECK(!swv_opcode_supported(0x44));
	CHECK(swv_opcode_carried_by(SWV_OP_FLOW_CONTROL, IBV_QPT_UC));
	CHECK(!swv_opcode_carried_by(SWV_OP_FLOW_CONTROL, IBV_QPT_RC));
	/* a request only for the QP type its prefix names; responses never */
	CHECK(swv_opcode_request(IBV_QPT_RC, SWV_OP_FLUSH));
	CHECK(!swv_opcode_request(IBV_QPT_UC, SWV_OP_RC | SWV_OP_SEND_ONLY));
	CHECK(!swv_opcode_request(IBV_QPT_RC, SWV_OP_ACK));
	CHECK(!swv_opcode_request(IBV_QPT_UC, SWV_OP_FLOW_CONTROL));
	CHECK(!swv_opcode_request(IBV_QPT_UD, SWV_OP_UD | SWV_OP_SEND_FIRST));
	CHECK(!swv_opcode_request(IBV_QPT_DRIVER, SWV_OP_RC | SWV_OP_SEND_ONLY));
	printf("test_opcode: OK (%d opcodes)\n", supported);
	return 0;
}
