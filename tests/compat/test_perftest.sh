#!/usr/bin/env bash
# perftest (Debian 4.5) RDMA tests at default settings, and every test that takes a size
# with -a (every size 2 B .. 8 MiB; perftest itself refuses -a for the atomics). The -a
# sweeps use -n 200 (_bw) and -n 100 (_lat, one message in flight) instead of the default
# 5000 / 1000 iterations: 5000 would move ~84 GB per test, minutes even at this machine's
# raw UDP bandwidth (bench/bench_transport measures it); fewer still run every size
# through the transport.
. "$(dirname "$0")/lib.sh"
need ib_write_bw perftest
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
	p=$(free_port)
	PAIR_PORT=$p pair "$t" 120 $t -d swv0 -p "$p" -- $t -d swv0 -p "$p" localhost
done
for t in ib_write_bw ib_read_bw ib_send_bw; do
	p=$(free_port)
	PAIR_PORT=$p pair "$t -a" 240 $t -d swv0 -a -n 200 -p "$p" -- $t -d swv0 -a -n 200 -p "$p" localhost
done
for t in ib_write_lat ib_read_lat ib_send_lat; do
	p=$(free_port)
	PAIR_PORT=$p pair "$t -a" 240 $t -d swv0 -a -n 100 -p "$p" -- $t -d swv0 -a -n 100 -p "$p" localhost
done
