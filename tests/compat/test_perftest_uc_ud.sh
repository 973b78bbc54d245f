#!/usr/bin/env bash
# perftest (Debian 4.5) over UC and UD: every test that accepts -c UC / -c UD
# (ib_send_bw/lat for both; ib_write_bw/lat for UC; READ and atomics need RC). Short
# runs (-n 300): the point is that each runs and finishes. UD message sizes are capped at
# the port MTU by perftest itself.
. "$(dirname "$0")/lib.sh"
need ib_send_bw perftest
for t in "ib_send_bw -c UD" "ib_send_lat -c UD" "ib_send_bw -c UC" "ib_send_lat -c UC" \
	"ib_write_bw -c UC" "ib_write_lat -c UC"; do
	p=$(free_port)
	PAIR_PORT=$p pair "$t" 120 $t -d swv0 -n 300 -p "$p" -- $t -d swv0 -n 300 -p "$p" localhost
	grep -Eq "^ +[0-9]+ +300 " "$TMP/$t.client" || { cat "$TMP/$t.client"; fail "$t: no result line"; }
done
# A few sizes through segmentation (UC) and up to the MTU (UD).
for t in "ib_send_bw -c UD -s 4096" "ib_write_bw -c UC -s 1048576" "ib_send_bw -c UC -s 65536"; do
	p=$(free_port)
	PAIR_PORT=$p pair "$t" 120 $t -d swv0 -n 200 -p "$p" -- $t -d swv0 -n 200 -p "$p" localhost
done
# The option matrix on UC and UD too: every size (-a), several QPs (-q 8) and
# completion events (-e, where perftest offers them: not for RDMA WRITE). UC SEND -a
# moves multi-MiB bursts that no socket buffer holds: it completes because UC senders
# wait for their receiver's credit (docs/wire.md, "UC flow control").
for t in "ib_send_bw -c UD -a -n 100" "ib_write_bw -c UC -a -n 100" "ib_send_bw -c UC -a -n 100" \
	"ib_send_lat -c UD -a -n 100" "ib_write_lat -c UC -a -n 100" "ib_send_lat -c UC -a -n 100" \
	"ib_send_bw -c UD -q 8 -n 300" "ib_send_bw -c UC -q 8 -n 300" "ib_write_bw -c UC -q 8 -n 300" \
	"ib_send_bw -c UD -e -n 300" "ib_send_lat -c UD -e -n 300" \
	"ib_send_bw -c UC -e -n 300" "ib_send_lat -c UC -e -n 300"; do
	p=$(free_port)
	PAIR_PORT=$p pair "$t" 240 $t -d swv0 -p "$p" -- $t -d swv0 -p "$p" localhost
done
