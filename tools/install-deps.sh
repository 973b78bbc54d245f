#!/usr/bin/env bash
# Install the Debian packages swverbs needs: "build" for the library and demo, "test"
# adds the unmodified clients and reference header the test suite drives.
# As root, missing packages are installed with apt-get; otherwise each missing package
# is named loudly and the tests that need it skip.
set -u
want=(cmake ninja-build gcc make pkg-config pandoc dpkg-dev) # pandoc: man pages; dpkg-dev: make deb
if [ "${1:-build}" = test ]; then
	want+=(libibverbs-dev ibverbs-utils perftest qperf python3-pyverbs rdmacm-utils librdmacm-dev tshark
	       iproute2 gdb valgrind libclang-rt-14-dev clang man-db debootstrap)
	# UCX and MPI over swverbs (tests/compat/test_ucx.sh, test_mpi.sh)
	want+=(ucx-utils openmpi-bin libopenmpi-dev mpich libmpich-dev)
	# anchors of the benchmarks (bench/bench_intrahost.sh)
	want+=(sockperf libfabric-bin)
fi
missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	echo "install-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null && apt-get install -y -qq "${missing[@]}" >/dev/null ||
		echo "install-deps: WARNING: apt-get failed for: ${missing[*]}" >&2
else
	echo "install-deps: WARNING: not root, NOT installing: ${missing[*]} (dependent tests will SKIP)" >&2
fi
exit 0
