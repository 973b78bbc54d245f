#!/usr/bin/env bash
# qperf 0.4.11 over UC and UD, non-CM (LID-addressed): one server (qperf -lp PORT)
# serves short (-t 2) client runs of uc_bw, uc_lat, uc_rdma_write_bw, uc_rdma_write_lat,
# ud_bw and ud_lat; each must report a non-zero figure.
. "$(dirname "$0")/lib.sh"
need qperf qperf
p=$(free_port)
timeout 280 "$SWVERBS_RUN" qperf -lp "$p" >"$TMP/qperf.server" 2>&1 &
srv=$!
wait_port "$p" 30 || fail "qperf server did not start"
for t in uc_bw uc_lat uc_rdma_write_bw uc_rdma_write_lat ud_bw ud_lat; do
	if ! timeout 60 "$SWVERBS_RUN" qperf -lp "$p" -t 2 localhost $t >"$TMP/$t" 2>&1; then
		cat "$TMP/$t"; echo "---- server"; cat "$TMP/qperf.server"
		fail "qperf $t"
	fi
	# e.g. "    latency  =  43.2 us" or "    send_bw  =  175 MB/sec"
	grep -Eq "(latency|bw) += +[0-9.]*[1-9][0-9.]* " "$TMP/$t" || { cat "$TMP/$t"; fail "qperf $t: no figure"; }
	echo "ok: qperf $t: $(grep -E '(latency|bw) +=' "$TMP/$t" | tr -s ' ' | paste -sd ';')"
done
kill "$srv" 2>/dev/null
wait "$srv" 2>/dev/null
exit 0
