#!/usr/bin/env bash
# rdma-core's pyverbs test suite, as Debian's python3-pyverbs ships it, under swverbs-run.
# Every test's result is compared with tests/compat/pyverbs_expected.txt: the test fails
# if a test listed "ok" is not ok, if any test crashes or hangs its process, or if a
# test fails or errors that is not listed so. Newly passing tests are reported. Tests
# that skip for want of a RoCE port run again on a RoCE-style device (--roce).
# Also checks that docs/compat.md's generated pyverbs section matches the file.
#   PYVERBS_RESULTS=FILE  keep the results (e.g. to re-baseline the expectations)
#   PYVERBS_LOG=FILE      keep the suite's verbose output
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=/usr/bin/python3 # Debian's: pyverbs lives in its dist-packages
gate="$here/pyverbs_gate.py"
expected="$here/pyverbs_expected.txt"
src=/usr/share/doc/rdma-core/tests

if ! [ -x "$PY" ] || ! "$PY" -c 'import pyverbs' 2>/dev/null || ! [ -d "$src" ]; then
	if [ "$(id -u)" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pyverbs >/dev/null 2>&1
	fi
	if ! [ -x "$PY" ] || ! "$PY" -c 'import pyverbs' 2>/dev/null || ! [ -d "$src" ]; then
		echo "SKIP: pyverbs or its test suite ($src) is not installed" >&2
		echo "*** SKIPPED: install Debian package python3-pyverbs to run this test ***"
		exit 77
	fi
fi

# The documentation is generated from the expectations: they must agree.
"$PY" "$gate" doc --expected "$expected" --check "$root/docs/compat.md" || exit 1

mkdir -p "$TMP/suite"
cp -r "$src" "$TMP/suite/tests"
find "$TMP/suite/tests" -name '*.gz' -exec gunzip -f {} +
results=${PYVERBS_RESULTS:-$TMP/results.txt}
log=${PYVERBS_LOG:-$TMP/pyverbs.log}
: >"$log"
if ! "$PY" "$gate" run --suite "$TMP/suite" --runner "$SWVERBS_RUN" --python "$PY" \
	--work "$TMP/work" --results "$results" --log "$log" --timeout "${PYVERBS_TIMEOUT:-240}" \
	--roce "swvroce0=127.0.0.1/8,roce"; then
	tail -50 "$log"
	fail "the suite could not be run"
fi
if ! "$PY" "$gate" compare --expected "$expected" --results "$results"; then
	echo "---- verbose output of the suite (failing tests and tracebacks)"
	grep -E -A20 '^(ERROR|FAIL):' "$log" | head -200
	fail "pyverbs results differ from tests/compat/pyverbs_expected.txt"
fi
echo "ok: pyverbs suite matches its expectations"
