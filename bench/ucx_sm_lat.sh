#!/usr/bin/env bash
# UCX shared-memory tag latency with swverbs devices visible (swverbs-run, no UCX_TLS, so UCX
# opens swv0 too and picks shared memory for the pair) against the same run without
# swverbs-run; prints both medians of ROUNDS alternating runs and the ratio.
# usage: bench/ucx_sm_lat.sh [BUILD_DIR] [ROUNDS]   (default build, 5)
set -u
build=${1:-build}
rounds=${2:-5}
run=$build/tools/swverbs-run
[ -x "$run" ] || { echo "no $run: build first" >&2; exit 2; }
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing (ucx-utils)" >&2; exit 2; }
unset UCX_TLS UCX_NET_DEVICES
one() { # [WRAPPER]: the client's average latency in us
	local p=$((20000 + RANDOM % 20000)) out
	"$@" ucx_perftest -p $p >/dev/null 2>&1 &
	local srv=$!
	for _ in $(seq 300); do ss -ltn | grep -q ":$p " && break; sleep 0.1; done
	out=$("$@" ucx_perftest localhost -p $p -t tag_lat -n 200000 2>&1 | awk '/^Final:/{print $4}')
	wait $srv
	echo "${out:-nan}"
}
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
plain=() swv=()
for ((i = 0; i < rounds; i++)); do
	plain+=("$(one env)")
	swv+=("$(one "$run")")
done
p=$(printf '%s\n' "${plain[@]}" | median)
s=$(printf '%s\n' "${swv[@]}" | median)
echo "ucx_perftest tag_lat (UCX sm, 8 B, 200000 iterations), median of $rounds:"
echo "  without swverbs-run: $p us   (runs: ${plain[*]})"
echo "  under swverbs-run:   $s us   (runs: ${swv[*]})"
awk -v a="$s" -v b="$p" 'BEGIN{printf "  ratio: %.2fx\n", a / b}'
