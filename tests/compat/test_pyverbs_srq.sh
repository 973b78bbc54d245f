#!/usr/bin/env bash
# SRQs through pyverbs (Debian's python3-pyverbs) under swverbs-run. rdma-core's own
# suite only uses SRQs behind ODP, parent domains, tag matching or mlx5, all of which
# skip here, so tests/compat/pyverbs/test_swv_srq.py runs RC and UD traffic on 3 QP
# pairs per side through one SRQ each (rdma-core's RCResources/UDResources with_srq and
# tests.utils.traffic, which validate every payload), plus create/query/modify checks.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3 # Debian's: a pyenv python3 lacks dist-packages
if ! $PY -c 'import pyverbs.srq' 2>/dev/null || [ ! -f /usr/share/doc/rdma-core/tests/run_tests.py ]; then
	if [ "$(id -u)" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pyverbs rdma-core >/dev/null 2>&1
	fi
	if ! $PY -c 'import pyverbs.srq' 2>/dev/null || [ ! -f /usr/share/doc/rdma-core/tests/run_tests.py ]; then
		echo "*** SKIPPED: install Debian packages python3-pyverbs and rdma-core to run this test ***"
		exit 77
	fi
fi
cp -r /usr/share/doc/rdma-core/tests "$TMP/tests"
gunzip -f "$TMP"/tests/*.py.gz
cp "$(dirname "$0")/pyverbs/test_swv_srq.py" "$TMP/tests/"
cd "$TMP" || fail "cd $TMP"
rc=0
timeout 240 "$SWVERBS_RUN" $PY tests/run_tests.py -v tests.test_swv_srq >"$TMP/out" 2>&1 || rc=$?
cat "$TMP/out"
[ $rc -eq 0 ] || fail "pyverbs SRQ tests (exit $rc)"
grep -q "^Ran 3 tests" "$TMP/out" || fail "expected 3 tests to run"
grep -q "skipped" "$TMP/out" && fail "a test skipped"
echo "ok: pyverbs SRQ tests"
