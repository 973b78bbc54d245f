#!/usr/bin/env bash
# Two "hosts": network namespaces joined by a veth pair, each with its own IP and its own
# swverbs device bound to it. An RC transfer (ibv_rc_pingpong, LID- and GID-addressed) and
# ib_write_bw run between them.
. "$(dirname "$0")/lib.sh"
need ibv_rc_pingpong ibverbs-utils
need ib_write_bw perftest
two_hosts swv 10.78.0

# in NS CMD...: run CMD in namespace NS with that host's swverbs device.
inA() { SWVERBS_DEVICES="swv0=10.78.0.1/24" ip netns exec $A "$@"; }
inB() { SWVERBS_DEVICES="swv0=10.78.0.2/24" ip netns exec $B "$@"; }

# run2 NAME TIMEOUT PORT SERVER_CMD CLIENT_CMD: both must exit 0; the client starts once
# the server listens on PORT in namespace A (perftest's clock self-check failing alone is
# retried: clock_retry in lib.sh).
run2_once() {
	local name=$1 to=$2 port=$3 srv=$4 cli=$5
	timeout "$to" bash -c "$srv" >"$TMP/$name.server" 2>&1 &
	local spid=$! crc=0 src=0
	wait_port "$port" 30 $A || true
	timeout "$to" bash -c "$cli" >"$TMP/$name.client" 2>&1 || crc=$?
	wait $spid || src=$?
	RUN2_SRC=$src RUN2_CRC=$crc
	[ $crc -eq 0 ] && [ $src -eq 0 ]
}
run2() {
	local name=$1
	if ! clock_retry "$name" run2_once "$@"; then
		echo "---- server (rc $RUN2_SRC)"; cat "$TMP/$name.server"
		echo "---- client (rc $RUN2_CRC)"; cat "$TMP/$name.client"
		fail "$name"
	fi
	cat "$TMP/$name.client"
	echo "ok: $name"
}
export -f inA inB
export A B SWVERBS_RUN
run2 rc_pingpong 60 18515 "inA $SWVERBS_RUN ibv_rc_pingpong -p 18515" \
	"inB $SWVERBS_RUN ibv_rc_pingpong -p 18515 10.78.0.1"
run2 rc_pingpong_gid 60 18516 "inA $SWVERBS_RUN ibv_rc_pingpong -p 18516 -g 0" \
	"inB $SWVERBS_RUN ibv_rc_pingpong -p 18516 -g 0 10.78.0.1"
run2 ib_write_bw 120 18517 "inA $SWVERBS_RUN ib_write_bw -d swv0 -p 18517" \
	"inB $SWVERBS_RUN ib_write_bw -d swv0 -p 18517 10.78.0.1"
