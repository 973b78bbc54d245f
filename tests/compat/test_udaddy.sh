#!/usr/bin/env bash
# udaddy (rdmacm-utils): RDMA_PS_UDP through swverbs' librdmacm (SIDR exchange, the
# ESTABLISHED event's ah_attr/QPN/QKey), UD messages both ways. udaddy has no port
# option: it always uses rdma_cm port 7174.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need udaddy rdmacm-utils
ss -lnu | grep -q ':7174 ' && fail "UDP port 7174 (udaddy's fixed rdma_cm port) is in use"
for opts in "" "-c 4 -C 50"; do
	cm_pair "udaddy $opts" 120 7174 udaddy $opts -- udaddy -s 127.0.0.1 $opts
	for side in server client; do
		grep -q '^return status 0$' "$TMP/udaddy $opts.$side" || fail "udaddy $opts: $side status"
	done
	grep -q 'data transfers complete' "$TMP/udaddy $opts.client" || fail "udaddy $opts: no data"
done
