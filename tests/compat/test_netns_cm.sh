#!/usr/bin/env bash
# The rdma_cm clients between two network namespaces joined by a veth pair, each with
# its own swverbs device: the CM exchange crosses the link on the devices' addresses.
# IB-style devices, then RoCE-style ones (GRH address vectors from the exchange).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need rping rdmacm-utils
need rstream rdmacm-utils
need riostream rdmacm-utils
need ib_write_bw perftest
two_hosts swc 10.79.0

# ns_pair NAME PORT SERVER_CMD -- CLIENT_CMD: server in A, client in B (to 10.79.0.1).
ns_pair() {
	local name=$1 port=$2
	shift 2
	local srv=() cli=()
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	local src=0 crc=0
	SWVERBS_DEVICES="swv0=10.79.0.1/24$SUFFIX" ip netns exec $A timeout 120 "$SWVERBS_RUN" "${srv[@]}" \
		>"$TMP/$name.server" 2>&1 &
	local spid=$!
	wait_cm_port "$port" 30 $A || echo "*** server never listened on UDP $port ***" >>"$TMP/$name.server"
	SWVERBS_DEVICES="swv0=10.79.0.2/24$SUFFIX" ip netns exec $B timeout 120 "$SWVERBS_RUN" "${cli[@]}" \
		>"$TMP/$name.client" 2>&1 || crc=$?
	wait $spid || src=$?
	if [ $src -ne 0 ] || [ $crc -ne 0 ]; then
		echo "---- $name server (rc $src)"; cat "$TMP/$name.server"
		echo "---- $name client (rc $crc)"; cat "$TMP/$name.client"
		fail "$name"
	fi
	echo "ok: $name"
}
for SUFFIX in "" ",roce"; do
	k=${SUFFIX:+roce}
	ns_pair "rping $k" 7174 rping -s -a 10.79.0.1 -p 7174 -V -C 1000 -- rping -c -a 10.79.0.1 -p 7174 -V -C 1000
	ns_pair "ucmatose $k" 7175 ucmatose -p 7175 -c 4 -- ucmatose -s 10.79.0.1 -p 7175 -c 4
	grep -q '^return status 0$' "$TMP/ucmatose $k.client" || fail "ucmatose $k status"
	ns_pair "udaddy $k" 7174 udaddy -- udaddy -s 10.79.0.1
	grep -q '^return status 0$' "$TMP/udaddy $k.client" || fail "udaddy $k status"
	ns_pair "rdma_server $k" 7176 rdma_server -p 7176 -- rdma_client -s 10.79.0.1 -p 7176
	grep -q 'end 0' "$TMP/rdma_server $k.client" || fail "rdma_client $k status"
	ns_pair "rstream $k" 7178 rstream -p 7178 -T b -S 65536 -- rstream -s 10.79.0.1 -p 7178 -T b -S 65536
	grep -Eq '^(custom|64k_bw) ' "$TMP/rstream $k.client" || fail "rstream $k: no result line"
	ns_pair "riostream $k" 7179 riostream -p 7179 -S 65536 -C 20 -I 10 -- \
		riostream -s 10.79.0.1 -p 7179 -S 65536 -C 20 -I 10
	grep -Eq '^custom ' "$TMP/riostream $k.client" || fail "riostream $k: no result line"
	ns_pair "ib_write_bw -R $k" 7177 ib_write_bw -d swv0 -R -p 7177 -n 500 -- \
		ib_write_bw -d swv0 -R -p 7177 -n 500 10.79.0.1
	grep -E '^ *65536 +500 ' "$TMP/ib_write_bw -R $k.client"
done
