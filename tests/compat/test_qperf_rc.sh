#!/usr/bin/env bash
# qperf 0.4.11 over RC, non-CM (LID-addressed): one server (qperf -lp PORT) serves short
# (-t 2) client runs of the bandwidth, latency and atomic tests, which must report a
# non-zero figure, and of the ver_rc_* tests, which check the data and the atomic results
# they get back and report mismatches.
. "$(dirname "$0")/lib.sh"
need qperf qperf
p=$(free_port)
timeout 280 "$SWVERBS_RUN" qperf -lp "$p" >"$TMP/qperf.server" 2>&1 &
srv=$!
wait_port "$p" 30 || fail "qperf server did not start"
run() { # TEST: run one client test, print its output on failure
	if ! timeout 60 "$SWVERBS_RUN" qperf -lp "$p" -t 2 localhost "$1" >"$TMP/$1" 2>&1; then
		cat "$TMP/$1"; echo "---- server"; cat "$TMP/qperf.server"
		fail "qperf $1"
	fi
}
for t in rc_bw rc_lat rc_rdma_read_bw rc_rdma_read_lat rc_rdma_write_bw rc_rdma_write_lat \
	rc_compare_swap_mr rc_fetch_add_mr; do
	run $t
	# e.g. "    latency  =  43.2 us", "    bw  =  175 MB/sec", "    msg_rate  =  12 K/sec"
	grep -Eq "(latency|bw|msg_rate) += +[0-9.]*[1-9][0-9.]* " "$TMP/$t" ||
		{ cat "$TMP/$t"; fail "qperf $t: no figure"; }
	echo "ok: qperf $t: $(grep -E '(latency|bw|msg_rate) +=' "$TMP/$t" | tr -s ' ' | paste -sd ';')"
done
for t in ver_rc_compare_swap ver_rc_fetch_add; do
	run $t
	if grep -Eqi "mismatch|error|fail" "$TMP/$t"; then
		cat "$TMP/$t"
		fail "qperf $t reported wrong results"
	fi
	echo "ok: qperf $t: $(tr -s ' ' <"$TMP/$t" | paste -sd ';')"
done
kill "$srv" 2>/dev/null
wait "$srv" 2>/dev/null
exit 0
