#!/usr/bin/env bash
# bench_cntr_runs: bench_cntr RUNS times in a row on the intra-host link and on the forced
# UDP path (SWVERBS_SHM=0), for issue 8's acceptance rows: per op, size and mode the
# median message rate and the spread of the runs (max/min, goal <= 2x); the median of
# each run's counter/CQ rate ratio (goal >= 1.0x, >= 1.3x at 8 B); the median of each
# run's `wait` CPU per op against `cq` (goal <= 0.5x), the posting thread's and the
# whole process's; the cost of ibv_read_comp_cntr against an empty exported function of
# the same signature (goal <= 1.5x). Every ratio is taken within one run (the same
# minute), then the median over the runs; the spread says how much this machine's
# scheduling moved it. A run that fails stops the script (exit 1).
#
#   usage: bench/bench_cntr_runs.sh [BUILD_DIR] [RUNS]     (default: build 5)
set -u -o pipefail
build=${1:-build}
runs=${2:-5}
bin=$build/bench/bench_cntr
[ -x "$bin" ] || { echo "no $bin: build first" >&2; exit 2; }

for path in link udp; do
	env=
	[ $path = udp ] && env=SWVERBS_SHM=0
	out=
	for i in $(seq "$runs"); do
		o=$(env $env "$bin") || { echo "bench_cntr_runs: bench_cntr failed ($path, run $i)" >&2; exit 1; }
		out+=$(echo "$o" | awk -v run="$i" '
			$3 ~ /^(cq|cntr|wait)$/ && NF == 10 {print run, $0}
			/^ *ibv_read_comp_cntr \/ empty exported function/ {
				sub("x", "", $NF); print run, "READ", $NF
			}')$'\n'
	done
	[ -n "${out//$'\n'/}" ] || { echo "bench_cntr_runs: no rows ($path)" >&2; exit 1; }
	echo "bench_cntr, $path path, $runs runs: median (min..max) of each figure"
	printf '%s' "$out" | awk '
	function med(key,   n, i, j, t, a) {
		n = split(vals[key], a, " ")
		for (i = 1; i <= n; i++)
			for (j = i + 1; j <= n; j++)
				if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		lo = a[1]; hi = a[n]
		return a[int((n + 1) / 2)]
	}
	function add(key, v) { vals[key] = vals[key] " " v }
	$2 == "READ" { add("read", $3); next }
	{
		row = $2 " " $3; mode = $4
		if (!(row in seen)) { seen[row] = 1; order[++nrows] = row }
		add(row SUBSEP mode SUBSEP "rate", $5)
		add(row SUBSEP mode SUBSEP "ratex", $9)
		add(row SUBSEP mode SUBSEP "thrx", $10)
		add(row SUBSEP mode SUBSEP "allx", $11)
	}
	END {
		printf "%-16s %-5s %12s %8s  %-22s %s\n", "op size", "mode", "msgs/s", "max/min",
		       "rate x cq", "cpu x cq (thread, process)"
		for (r = 1; r <= nrows; r++) {
			row = order[r]
			split(row, f, " ")
			for (m = 1; m <= 3; m++) {
				mode = m == 1 ? "cq" : m == 2 ? "cntr" : "wait"
				k = row SUBSEP mode
				if (!((k SUBSEP "rate") in vals))
					continue
				rate = med(k SUBSEP "rate"); spread = lo > 0 ? hi / lo : 0
				goal = ""
				if (mode == "cntr")
					goal = f[2] == 8 ? "[>= 1.3]" : "[>= 1.0]"
				rx = med(k SUBSEP "ratex"); rs = sprintf("%.2f (%.2f..%.2f)", rx, lo, hi)
				tx = med(k SUBSEP "thrx"); ts = sprintf("%.2f..%.2f", lo, hi)
				ax = med(k SUBSEP "allx"); as = sprintf("%.2f..%.2f", lo, hi)
				cpu = mode == "wait" ? sprintf("%.2f (%s), %.2f (%s) [<= 0.5]", tx, ts, ax, as) : ""
				printf "%-16s %-5s %12.0f %7.2fx  %-22s %s %s\n", row, mode, rate, spread,
				       mode == "cq" ? "" : rs, goal, cpu
			}
		}
		if ("read" in vals) {
			rd = med("read")
			printf "ibv_read_comp_cntr / empty exported function: %.2fx (%.2f..%.2f) [<= 1.5]\n", rd, lo, hi
		}
	}'
	echo "  spread goal: max/min <= 2x in every row"
	echo
done
