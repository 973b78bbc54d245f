#!/usr/bin/env bash
# rstream (rdmacm-utils): rsockets over swverbs' librdmacm. The default run (latency and
# bandwidth, 64 B ... 1 MiB, ping-pong so data flows both ways), then 64 KiB transfers
# with blocking calls (-T b), rpoll (-T a), nonblocking calls (-T n) and data checks
# (-T v). Both sides must exit 0 and print their result lines.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need rstream rdmacm-utils
for opts in "" "-T b -S 65536" "-T a -S 65536" "-T n -S 65536" "-T v -S 65536" "-T b -T v -S 4096 -C 2000"; do
	p=$(free_cm_port)
	cm_pair "rstream $opts" 240 "$p" rstream -p "$p" $opts -- rstream -s 127.0.0.1 -p "$p" $opts
	grep -Eq '^(custom|64k_bw) ' "$TMP/rstream $opts.client" || fail "rstream $opts: no result line"
	echo "rstream $opts: $(grep -E '_bw|custom' "$TMP/rstream $opts.client" | tail -n 1 | tr -s ' ')"
done
