#!/usr/bin/env bash
# make-deb.sh BUILD_DIR [OUT_DIR]: build swverbs' Debian package (CPack DEB) in a build
# tree of its own, configured for /usr (Debian's multiarch library directory) and
# without the tests; the package lands in OUT_DIR (default: BUILD_DIR).
# `make deb` and tests/install/test_deb.sh both build it this way.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: make-deb.sh BUILD_DIR [OUT_DIR]}
out=${2:-$build}
if ! command -v pandoc >/dev/null; then
	echo "make-deb: ERROR: pandoc is missing; a package without its manual pages would be" \
	     "incomplete (apt-get install pandoc, or tools/install-deps.sh build as root)" >&2
	exit 1
fi
for t in dpkg-deb dpkg-shlibdeps; do
	command -v $t >/dev/null || { echo "make-deb: ERROR: $t is missing (apt-get install dpkg-dev)" >&2; exit 1; }
done
cmake -G Ninja -Wno-dev -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DCMAKE_INSTALL_PREFIX=/usr -DSWV_TESTS=OFF -DSWV_SANITIZE= >/dev/null
cmake --build "$build"
mkdir -p "$out"
out=$(cd "$out" && pwd) # cpack runs in the build tree
(cd "$build" && cpack -G DEB -B "$out" >/dev/null)
deb=$(ls -t "$out"/swverbs_*.deb | head -1)
echo "make-deb: $deb"
