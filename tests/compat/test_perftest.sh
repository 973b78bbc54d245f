#!/usr/bin/env bash
# perftest (Debian 4.5) RDMA tests at default settings, and the _bw tests with -a.
. "$(dirname "$0")/lib.sh"
need ib_write_bw perftest
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
	p=$(free_port)
	pair "$t" 120 $t -d swv0 -p "$p" -- $t -d swv0 -p "$p" localhost
done
for t in ib_write_bw ib_read_bw ib_send_bw; do
	p=$(free_port)
	pair "$t -a" 240 $t -d swv0 -a -p "$p" -- $t -d swv0 -a -p "$p" localhost
done
