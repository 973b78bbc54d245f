#!/usr/bin/env bash
# perftest with -R: the eight RC tests connect through swverbs' librdmacm (perftest's
# own parameter exchange runs over rdma_cm too, then the test's connection binds the
# same port again). Each prints its figure; the line is kept for docs/compat.md.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need ib_send_bw perftest
for t in ib_send_bw ib_send_lat ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_atomic_bw ib_atomic_lat; do
	p=$(free_cm_port)
	cm_pair "$t -R" 120 "$p" $t -d swv0 -R -p "$p" -n 500 -- $t -d swv0 -R -p "$p" -n 500 127.0.0.1
	line=$(grep -E '^ *[0-9]+ +500 ' "$TMP/$t -R.client" | tail -n 1)
	[ -n "$line" ] || fail "$t -R: no result line"
	echo "$t -R: $line"
done
