#!/usr/bin/env bash
# perftest SEND tests with --use-srq: the receiver's QP takes its receive WQEs from an
# SRQ (ibv_create_srq + ibv_post_srq_recv). RC, UC and UD at default sizes (UC/UD with
# -n 300); ib_send_bw also with -a at -n 200 (every size 2 B .. 8 MiB, multi-packet
# messages included).
. "$(dirname "$0")/lib.sh"
need ib_send_bw perftest
for t in ib_send_bw ib_send_lat "ib_send_bw -c UC -n 300" "ib_send_lat -c UC -n 300" \
	"ib_send_bw -c UD -n 300" "ib_send_lat -c UD -n 300"; do
	p=$(free_port)
	PAIR_PORT=$p pair "$t --use-srq" 120 $t -d swv0 --use-srq -p "$p" -- \
		$t -d swv0 --use-srq -p "$p" localhost
	grep -q "^ *[0-9]" "$TMP/$t --use-srq.client" || fail "$t: no result line"
done
p=$(free_port)
PAIR_PORT=$p pair "ib_send_bw --use-srq -a" 240 ib_send_bw -d swv0 --use-srq -a -n 200 -p "$p" -- \
	ib_send_bw -d swv0 --use-srq -a -n 200 -p "$p" localhost
