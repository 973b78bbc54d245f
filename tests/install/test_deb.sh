#!/usr/bin/env bash
# Build the Debian package as `make deb` does (tools/make-deb.sh), check its contents
# (dpkg-deb -I, dpkg-deb -c), then install it with `apt install ./swverbs_*.deb` in a
# clean Debian 12 chroot and use it there the way the README promises:
#   swverbs-run ibv_devinfo, man ibv_qp_attach_comp_cntr, pkg-config --libs swverbs,
#   and a completion-counter program compiled against the installed header.
# The chroot is a fresh copy, for every run, of a Debian 12 minbase system made once
# with debootstrap from Debian's mirror (plus the tools the checks run: ibverbs-utils,
# man-db, pkg-config, gcc), cached as a tarball in $SWVERBS_CHROOT_CACHE (default
# /var/cache/swverbs-test). It needs root, debootstrap, unshare and the mirror; without
# them the test says so loudly and, the contents being right, exits 77 (skipped).
set -euo pipefail
: "${SWVERBS_SRC:?SWVERBS_SRC must name the source tree}"
fail() { echo "FAIL: $*" >&2; exit 1; }
banner() { printf '%s\n' "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" "$@" \
	"!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; }
for t in dpkg-deb dpkg-shlibdeps pandoc cmake cpack; do
	command -v $t >/dev/null || { banner "SKIP: $t is not installed: the Debian package cannot be built (tools/install-deps.sh build)"; exit 77; }
done
TMP=$(mktemp -d)
cleanup() {
	# The chroot's mounts live in a mount namespace that is gone by now; never follow
	# a leftover one out of the tree.
	[ -d "$TMP/root" ] && rm -rf --one-file-system "$TMP/root"
	rm -rf "$TMP"
}
trap cleanup EXIT

nice "$SWVERBS_SRC/tools/make-deb.sh" "$TMP/build" "$TMP/out" >"$TMP/make-deb.log" 2>&1 ||
	{ tail -30 "$TMP/make-deb.log"; fail "tools/make-deb.sh"; }
deb=$(ls "$TMP"/out/swverbs_*_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || fail "no swverbs_<version>_<arch>.deb built"
echo "built $(basename "$deb")"

# Contents: control fields and every file a user needs, at Debian's paths.
dpkg-deb -I "$deb" >"$TMP/info"
for f in "Package: swverbs" "Architecture: $(dpkg --print-architecture)" "Depends: libc6"; do
	grep -q "^ $f" "$TMP/info" || { cat "$TMP/info"; fail "dpkg-deb -I: no '$f'"; }
done
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$TMP/files"
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
want="/usr/bin/swverbs-run /usr/bin/swverbs-info /usr/bin/swverbs-demo /usr/bin/swverbs-stat
/usr/lib/$ma/libswverbs.so.1 /usr/lib/$ma/libswverbs.so /usr/lib/$ma/swverbs/libibverbs.so.1
/usr/lib/$ma/pkgconfig/swverbs.pc /usr/include/swverbs/infiniband/verbs.h
/usr/include/swverbs/infiniband/swverbs.h /usr/include/swverbs/infiniband/verbs_api.h
/usr/include/swverbs/infiniband/ib_user_ioctl_verbs.h /usr/include/swverbs/rdma/ib_user_verbs.h"
for md in "$SWVERBS_SRC"/docs/man/*.[1-8].md; do
	page=$(basename "$md" .md)
	want="$want /usr/share/man/man${page##*.}/$page"
done
for f in $want; do
	grep -qx "$f" "$TMP/files" || fail "dpkg-deb -c: $f is not in the package"
done
# Files other packages own on Debian 12 must not be in it (dpkg would refuse it).
for f in /usr/include/infiniband/verbs.h /usr/include/rdma/ib_user_verbs.h /usr/include/rdma/rdma_cma.h /usr/lib/$ma/libibverbs.so.1 /usr/lib/$ma/librdmacm.so.1; do
	! grep -qx "$f" "$TMP/files" || fail "the package would overwrite $f (owned by another package)"
done
dpkg-deb -x "$deb" "$TMP/x"
grep -q "/usr/lib/$ma/libswverbs.so.1" "$TMP/x/usr/bin/swverbs-run" || fail "packaged swverbs-run does not name /usr/lib/$ma"
! grep -q "$TMP" "$TMP/x/usr/bin/swverbs-run" "$TMP/x/usr/lib/$ma/pkgconfig/swverbs.pc" ||
	fail "packaged swverbs-run or swverbs.pc names the build or staging tree"
echo "contents: control fields, $(echo $want | wc -w) files at Debian's paths, none owned by another package"

# A clean Debian 12 chroot, if this machine allows one.
why=""
[ "$(id -u)" = 0 ] || why="not root"
[ -z "$why" ] && ! command -v debootstrap >/dev/null && why="debootstrap is not installed (tools/install-deps.sh test)"
[ -z "$why" ] && ! unshare -m true 2>/dev/null && why="unshare -m is not permitted"
cache=${SWVERBS_CHROOT_CACHE:-/var/cache/swverbs-test}
base=$cache/bookworm-minbase.tar
if [ -z "$why" ] && [ ! -s "$base" ]; then
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if [ ! -s "$base" ]; then
		echo "creating the Debian 12 base chroot (once; cached in $base)"
		mirror=${SWVERBS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
		if debootstrap --variant=minbase --include=ibverbs-utils,man-db,pkg-config,gcc,libc6-dev,binutils \
			bookworm "$TMP/base" "$mirror" >"$TMP/debootstrap.log" 2>&1; then
			rm -rf "$TMP/base/var/cache/apt/archives/"*.deb
			tar -C "$TMP/base" -cf "$base.tmp" . && mv "$base.tmp" "$base"
		else
			tail -5 "$TMP/debootstrap.log"
			why="debootstrap from $mirror failed (no access to Debian's mirror?)"
		fi
		rm -rf --one-file-system "$TMP/base"
	fi
	flock -u 9
fi
if [ -n "$why" ]; then
	banner "NOT TESTED: apt install of the package in a clean Debian 12 chroot: $why." \
		"Only the package's contents were checked (dpkg-deb -I, dpkg-deb -c)."
	exit 77
fi

R=$TMP/root
mkdir "$R"
tar -C "$R" -xf "$base"
cp "$deb" "$R/tmp/"
cp "$SWVERBS_SRC/tests/compat/rdma65_counter.c" "$R/tmp/"
cat >"$R/tmp/check.sh" <<'EOS'
set -eu
export DEBIAN_FRONTEND=noninteractive LC_ALL=C PATH=/usr/sbin:/usr/bin:/sbin:/bin
cd /tmp
if dpkg -s swverbs >/dev/null 2>&1; then echo "FAIL: the base chroot already has swverbs"; exit 1; fi
apt install -y ./swverbs_*.deb >apt.log 2>&1 || { cat apt.log; echo "FAIL: apt install ./swverbs_*.deb"; exit 1; }
dpkg -s swverbs | grep -q '^Status: install ok installed' || { echo "FAIL: swverbs not installed"; exit 1; }
swverbs-run ibv_devinfo >devinfo.txt || { cat devinfo.txt; echo "FAIL: swverbs-run ibv_devinfo"; exit 1; }
grep -q 'hca_id:.*swv0' devinfo.txt || { cat devinfo.txt; echo "FAIL: ibv_devinfo shows no swv0"; exit 1; }
echo "chroot: swverbs-run ibv_devinfo: $(grep -c hca_id devinfo.txt) device(s), $(grep 'state:' devinfo.txt | head -1 | tr -s ' \t' ' ')"
MANPAGER=cat MANWIDTH=100 man ibv_qp_attach_comp_cntr >man.txt 2>/dev/null || { echo "FAIL: man ibv_qp_attach_comp_cntr"; exit 1; }
grep -q 'ibv_qp_attach_comp_cntr - make a completion counter' man.txt || { head man.txt; echo "FAIL: man page"; exit 1; }
echo "chroot: man ibv_qp_attach_comp_cntr: $(grep -c . man.txt) lines"
libs=$(pkg-config --libs swverbs | sed 's/ *$//')
[ "$libs" = "-lswverbs" ] || { echo "FAIL: pkg-config --libs swverbs: '$libs'"; exit 1; }
echo "chroot: pkg-config --libs swverbs: $libs"
gcc -Wall -Werror -o counter rdma65_counter.c $(pkg-config --cflags --libs swverbs) ||
	{ echo "FAIL: counter program does not build against the installed header"; exit 1; }
./counter || { echo "FAIL: counter program"; exit 1; }
EOS
# Private mounts: they vanish with the namespace when the check ends, however it ends.
unshare -m --propagation private sh -c '
	R=$1
	mount -t proc proc "$R/proc" && mount --rbind /sys "$R/sys" && mount --rbind /dev "$R/dev" &&
	exec chroot "$R" /bin/sh /tmp/check.sh' sh "$R" || fail "in the Debian 12 chroot (see above)"
echo "PASS: the package installs with apt in a clean Debian 12 chroot and works there"
