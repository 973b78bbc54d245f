#!/usr/bin/env bash
# ibv_ud_pingpong (ibverbs-utils), two processes: LID-addressed (no GRH) and with -g 0
# (GRH) on the default IB-style device, and with -g 0 on a RoCE-style device (RoCE has
# no LIDs, as with rxe). The program posts receives of size + 40 and finds its payload
# after the 40-byte GRH area; -c makes it check the received buffer, -l 3 sends with an
# SL, -e sleeps on completion events.
. "$(dirname "$0")/lib.sh"
need ibv_ud_pingpong ibverbs-utils
for opts in "-c" "-g 0 -c" "-s 4096 -n 300 -l 3" "-e -n 300"; do
	p=$(free_port)
	PAIR_PORT=$p pair "ud_pingpong $opts" 120 ibv_ud_pingpong -p "$p" $opts -- ibv_ud_pingpong -p "$p" $opts localhost
	grep -q "bytes in" "$TMP/ud_pingpong $opts.client" || fail "no throughput line ($opts)"
done
# A payload larger than the port MTU is refused by the program itself (it reads the MTU).
p=$(free_port)
if timeout 30 "$SWVERBS_RUN" ibv_ud_pingpong -p "$p" -s 8192 >"$TMP/big" 2>&1; then
	fail "ud_pingpong -s 8192 (above the 4096 MTU) was accepted"
fi
grep -qi "mtu" "$TMP/big" || { cat "$TMP/big"; fail "no MTU message for -s 8192"; }
echo "ok: ud_pingpong -s 8192 refused (MTU)"
(
	export SWVERBS_DEVICES="swr0=127.0.0.1/8,roce,mtu=1024"
	p=$(free_port)
	PAIR_PORT=$p pair "ud_pingpong roce -g 0" 120 ibv_ud_pingpong -p "$p" -g 0 -s 1024 -c -- \
		ibv_ud_pingpong -p "$p" -g 0 -s 1024 -c localhost
	grep -q "bytes in" "$TMP/ud_pingpong roce -g 0.client" || fail "no throughput line (roce)"
)
