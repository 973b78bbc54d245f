#!/usr/bin/env bash
# qperf -cm1: the RC tests connect their QPs through swverbs' librdmacm (qperf's own
# control channel stays TCP). Each must print a non-zero figure.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need qperf qperf
p=$(free_cm_port)
timeout 280 "$SWVERBS_RUN" qperf -lp "$p" >"$TMP/qperf.server" 2>&1 &
wait_port "$p" 30 || fail "qperf server did not start"
for t in rc_bw rc_lat rc_rdma_write_bw rc_rdma_read_bw; do
	if ! timeout 60 "$SWVERBS_RUN" qperf -lp "$p" -cm1 -t 2 127.0.0.1 "$t" >"$TMP/$t" 2>&1; then
		cat "$TMP/$t"; echo "---- server"; cat "$TMP/qperf.server"
		fail "qperf -cm1 $t"
	fi
	grep -Eq "(latency|bw) += +[0-9.]*[1-9][0-9.]* " "$TMP/$t" || { cat "$TMP/$t"; fail "qperf -cm1 $t: no figure"; }
	echo "ok: qperf -cm1 $t: $(grep -E '(latency|bw) +=' "$TMP/$t" | tr -s ' ')"
done
