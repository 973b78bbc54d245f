#!/usr/bin/env bash
# ibv_srq_pingpong (ibverbs-utils), two processes: 16 QPs (default) on one SRQ per side,
# LID-addressed and with -g 0, with completion events, and 4 QPs with multi-packet
# messages through an SRQ of 8 WQEs (RNR and refills). The program finds the QP of each
# receive from wc.qp_num ("Couldn't find QPN" otherwise) and -c checks the buffer.
. "$(dirname "$0")/lib.sh"
need ibv_srq_pingpong ibverbs-utils
for opts in "" "-g 0" "-e -n 200 -c" "-q 4 -s 5000 -n 200 -r 8 -c"; do
	p=$(free_port)
	PAIR_PORT=$p pair "srq_pingpong $opts" 120 ibv_srq_pingpong -p "$p" $opts -- \
		ibv_srq_pingpong -p "$p" $opts localhost
	grep -q "bytes in" "$TMP/srq_pingpong $opts.client" || fail "no throughput line ($opts)"
	grep -q "bytes in" "$TMP/srq_pingpong $opts.server" || fail "no server throughput line ($opts)"
done
