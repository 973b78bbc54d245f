#!/usr/bin/env bash
# ibv_rc_pingpong (ibverbs-utils), two processes, LID-addressed and with -g 0.
. "$(dirname "$0")/lib.sh"
need ibv_rc_pingpong ibverbs-utils
for opts in "" "-g 0" "-s 65536 -n 200 -m 4096" "-e -n 200"; do
	p=$(free_port)
	pair "rc_pingpong $opts" 60 ibv_rc_pingpong -p "$p" $opts -- ibv_rc_pingpong -p "$p" $opts localhost
	grep -q "bytes in" "$TMP/rc_pingpong $opts.client" || fail "no throughput line ($opts)"
done
