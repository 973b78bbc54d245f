#!/usr/bin/env bash
# rping (rdmacm-utils) through swverbs' librdmacm: 1000 verified ping cycles (-v shows
# each ping's data, -V checks it), then the server's and the client's last lines.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need rping rdmacm-utils
p=$(free_cm_port)
cm_pair rping 120 "$p" rping -s -a 127.0.0.1 -p "$p" -v -V -C 1000 -- \
	rping -c -a 127.0.0.1 -p "$p" -v -V -C 1000
# stderr's event lines may land inside a buffered stdout line: count distinct pings.
pings() { grep -o "rdma-ping-[0-9]*:" "$1" | sort -u | wc -l; }
n=$(pings "$TMP/rping.client")
[ "$n" -eq 1000 ] || fail "client printed $n distinct pings, not 1000"
n=$(pings "$TMP/rping.server")
[ "$n" -eq 1000 ] || fail "server printed $n distinct pings, not 1000"
echo "rping: 1000 verified pings each way"
