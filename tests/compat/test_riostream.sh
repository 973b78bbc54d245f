#!/usr/bin/env bash
# riostream (rdmacm-utils): rsockets' riomap/riowrite over swverbs' librdmacm. Each side
# maps its buffer (riomap), the peer RDMA-writes into it (riowrite) and the owner spins
# on the buffer's last byte, ping-pong, so data flows both ways. Sizes and counts are
# given (-S/-C/-I): the default run's 100k-iteration latency tests spin on memory
# without calling the library, which swverbs serves at its progress thread's pace
# (about 0.5 ms a round trip, docs/design.md), far beyond a test's time.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need riostream rdmacm-utils
for opts in "-S 64 -C 10 -I 100" "-S 65536 -C 20 -I 10" "-S 1048576 -C 4 -I 3" "-T v -S 65536 -C 10 -I 10" \
	"-T b -T v -S 4096 -C 10 -I 20" "-T a -S 65536 -C 10 -I 10" "-T n -S 65536 -C 10 -I 10"; do
	p=$(free_cm_port)
	cm_pair "riostream $opts" 120 "$p" riostream -p "$p" $opts -- riostream -s 127.0.0.1 -p "$p" $opts
	grep -Eq '^custom ' "$TMP/riostream $opts.client" || fail "riostream $opts: no result line"
	echo "riostream $opts: $(grep -E '^custom' "$TMP/riostream $opts.client" | tr -s ' ')"
done
