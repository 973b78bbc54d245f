#!/usr/bin/env bash
# perftest (Debian 4.5), RC: several QPs (-q 8) for every _bw test, and completion events
# (-e) for every test that offers them (perftest refuses -e for RDMA WRITE itself:
# "Events feature not available on WRITE verb").
. "$(dirname "$0")/lib.sh"
need ib_write_bw perftest
run() { # NAME OPTIONS...: one server/client pair
	local t=$1
	shift
	local p
	p=$(free_port)
	PAIR_PORT=$p pair "$t $*" 120 $t -d swv0 "$@" -p "$p" -- $t -d swv0 "$@" -p "$p" localhost
}
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do
	run $t -q 8
done
for t in ib_read_bw ib_send_bw ib_atomic_bw ib_read_lat ib_send_lat ib_atomic_lat; do
	run $t -e
done
