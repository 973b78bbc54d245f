#!/usr/bin/env bash
# Install the build tree under a temporary prefix (cmake --install --prefix, as make
# install does) and use only what was installed:
#   - every file a user needs is there (library, libibverbs.so.1 stand-in, headers,
#     pkg-config, swverbs-run, swverbs-info, swverbs-demo, man pages);
#   - the installed swverbs-run names the installed library, not the build tree, and
#     runs ibv_devices on swverbs' device;
#   - man -l renders an installed page;
#   - pkg-config from the prefix gives the flags, and a completion-counter program
#     (tests/compat/rdma65_counter.c) compiled with them against the installed header
#     and library runs.
# Exit 77 (skip, loudly) only for a missing tool: ibv_devices, man, pkg-config, cc.
set -euo pipefail
: "${SWVERBS_BUILD:?SWVERBS_BUILD must name a build tree}"
: "${SWVERBS_SRC:?SWVERBS_SRC must name the source tree}"
skip() { echo "!!!! SKIP: $* !!!!"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
for t in ibv_devices man pkg-config cc; do
	command -v $t >/dev/null || skip "$t is not installed (tools/install-deps.sh test)"
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
P=$TMP/prefix
cmake --install "$SWVERBS_BUILD" --prefix "$P" >"$TMP/install.log" || { cat "$TMP/install.log"; fail "cmake --install"; }

pc=$(find "$P" -name swverbs.pc | head -1)
[ -n "$pc" ] || fail "no swverbs.pc installed"
libdir=$(sed -n 's|^libdir=\${prefix}/||p' "$pc")
for f in "$libdir/libswverbs.so.1" "$libdir/swverbs/libibverbs.so.1" "$libdir/pkgconfig/swverbs.pc" \
	 include/swverbs/infiniband/verbs.h include/swverbs/infiniband/swverbs.h \
	 include/swverbs/infiniband/verbs_api.h include/swverbs/infiniband/ib_user_ioctl_verbs.h \
	 include/swverbs/rdma/ib_user_verbs.h \
	 bin/swverbs-run bin/swverbs-info bin/swverbs-demo bin/swverbs-stat; do
	[ -e "$P/$f" ] || fail "not installed: $f"
done
command -v pandoc >/dev/null || skip "pandoc is not installed: no man pages were built"
for md in "$SWVERBS_SRC"/docs/man/*.[1-8].md; do
	page=$(basename "$md" .md)
	sec=${page##*.}
	[ -f "$P/share/man/man$sec/$page" ] || fail "man page not installed: man$sec/$page"
done
npages=$(ls "$SWVERBS_SRC"/docs/man/*.[1-8].md | wc -l)
echo "installed: library, compat library, 5 headers, pkg-config, 4 programs, $npages man pages"
# swverbs-stat: runs from the prefix (no process to show is not an error)
"$P/bin/swverbs-stat" -l >/dev/null || fail "installed swverbs-stat -l"

# swverbs-run: the installed one, pointing into the prefix only.
if grep -q "$SWVERBS_BUILD" "$P/bin/swverbs-run"; then
	fail "installed swverbs-run names the build tree: $(grep -n "$SWVERBS_BUILD" "$P/bin/swverbs-run")"
fi
grep -q "$P/$libdir/libswverbs.so.1" "$P/bin/swverbs-run" || fail "installed swverbs-run does not name $P/$libdir"
# ... and at the installed preloads: the sysfs view and the connection manager.
for l in "$P/$libdir/libswverbs-sysfs.so" "$P/$libdir/swverbs/librdmacm.so.1"; do
	[ -f "$l" ] || fail "$l is not installed"
	grep -q "$l" "$P/bin/swverbs-run" || fail "installed swverbs-run does not name $l"
done
[ ! -e "$P/$libdir/librdmacm.so.1" ] || fail "librdmacm.so.1 installed where it replaces the system's"
out=$(env -u SWVERBS_LIB "$P/bin/swverbs-run" ibv_devices) || fail "swverbs-run ibv_devices"
echo "$out"
echo "$out" | grep -q 'swv0' || fail "ibv_devices under the installed swverbs-run lists no swv0"
"$P/bin/swverbs-info" >"$TMP/info" || fail "installed swverbs-info"
grep -q swv0 "$TMP/info" || fail "installed swverbs-info shows no swv0"

# man -l on an installed page.
MANWIDTH=100 man -l "$P/share/man/man3/ibv_qp_attach_comp_cntr.3" 2>/dev/null >"$TMP/man.txt" ||
	fail "man -l ibv_qp_attach_comp_cntr.3"
grep -q 'ibv_qp_attach_comp_cntr - make a completion counter count operations of a QP' "$TMP/man.txt" ||
	{ head -20 "$TMP/man.txt"; fail "man page does not render its NAME section"; }
grep -q '^SYNOPSIS' "$TMP/man.txt" || fail "man page has no SYNOPSIS"

# pkg-config from the prefix, and a counter program built with nothing else.
export PKG_CONFIG_PATH="$P/$libdir/pkgconfig"
cflags=$(pkg-config --cflags swverbs | sed "s/ *$//")
libs=$(pkg-config --libs swverbs | sed "s/ *$//")
[ "$cflags" = "-I$P/include/swverbs" ] || fail "pkg-config --cflags: '$cflags'"
[ "$libs" = "-L$P/$libdir -lswverbs" ] || fail "pkg-config --libs: '$libs'"
cp "$SWVERBS_SRC/tests/compat/rdma65_counter.c" "$TMP/"
(cd "$TMP" && cc -Wall -Werror -MD -MF deps.d -o counter rdma65_counter.c $cflags $libs -Wl,-rpath,"$P/$libdir") ||
	fail "counter program does not build against the installed header"
grep -q "$P/include/swverbs/infiniband/verbs.h" "$TMP/deps.d" ||
	fail "counter program was not compiled against the installed verbs.h"
! grep -q "$SWVERBS_SRC/include" "$TMP/deps.d" || fail "counter program saw the source tree's headers"
"$TMP/counter" || fail "counter program against the installed library"
echo "PASS: installed swverbs-run, man page, pkg-config and a counter program work from $P"
