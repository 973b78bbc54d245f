#!/usr/bin/env bash
# ibv_uc_pingpong (ibverbs-utils), two processes: LID-addressed and with -g 0, a large
# message segmented at a small path MTU (-s 16384 -m 1024), -c to check the received
# buffer, and -e (completion events).
. "$(dirname "$0")/lib.sh"
need ibv_uc_pingpong ibverbs-utils
for opts in "-c" "-g 0 -c" "-s 16384 -m 1024 -n 300 -c" "-e -n 300"; do
	p=$(free_port)
	PAIR_PORT=$p pair "uc_pingpong $opts" 120 ibv_uc_pingpong -p "$p" $opts -- ibv_uc_pingpong -p "$p" $opts localhost
	grep -q "bytes in" "$TMP/uc_pingpong $opts.client" || fail "no throughput line ($opts)"
done
