#!/usr/bin/env bash
# perftest over XRC (-c XRC): perftest opens an XRC domain, XRC SRQs, INI and TGT QPs
# and addresses the peer's SRQ by number, passing the RC attribute masks to both halves
# (the bits for the other half are ignored, as the kernel ignores them). SEND bandwidth
# and latency, RDMA WRITE and READ bandwidth; ib_send_bw also with -a (every size,
# multi-packet messages included).
. "$(dirname "$0")/lib.sh"
need ib_send_bw perftest
for t in "ib_send_bw" "ib_send_lat" "ib_write_bw" "ib_read_bw" "ib_send_bw -a -n 200"; do
	p=$(free_port)
	PAIR_PORT=$p pair "$t -c XRC" 240 $t -d swv0 -c XRC -p "$p" -- \
		$t -d swv0 -c XRC -p "$p" localhost
	grep -q "^ *[0-9]" "$TMP/$t -c XRC.client" || fail "$t: no result line"
done
