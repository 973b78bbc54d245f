#!/usr/bin/env bash
# A binary built against rdma-core 65 (tests/compat/rdma65_counter.c, linked as
# -libverbs, so it requires libibverbs.so.1 at IBVERBS_1.18) runs unmodified under
# swverbs-run on a system whose libibverbs is rdma-core 44, and its counters count.
. "$(dirname "$0")/lib.sh"
: "${SWVERBS_BUILD:?}"
bin="$SWVERBS_BUILD/tests/rdma65_counter"
[ -x "$bin" ] || fail "$bin not built"
readelf -V --wide "$bin" | grep -q "Name: IBVERBS_1.18" || fail "binary does not require IBVERBS_1.18"
sys=$(ldconfig -p | awk '/libibverbs\.so\.1 /{print $NF; exit}')
if [ -n "$sys" ]; then
	# Without swverbs the system library refuses it: that is the problem solved here.
	if out=$("$bin" 2>&1); then
		readelf -V --wide "$sys" | grep -q "Name: IBVERBS_1.18" ||
			fail "ran without swverbs although $sys lacks IBVERBS_1.18"
	else
		echo "$out" | grep -q "IBVERBS_1.18" || echo "note: without swverbs: $out"
	fi
fi
out=$("$SWVERBS_RUN" "$bin") || { echo "$out"; fail "rdma65_counter under swverbs-run"; }
echo "$out"
echo "$out" | grep -q "rdma65_counter: ok" || fail "no ok line"
