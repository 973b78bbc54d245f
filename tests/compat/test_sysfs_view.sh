#!/usr/bin/env bash
# Device discovery the way middleware does it, under swverbs-run (libswverbs-sysfs):
# /dev/infiniband/<uverbs name> is an accessible character device to stat, statx (coreutils
# stat), test and Python's os.stat/os.access; /sys/class/infiniband lists the device;
# ibv_get_sysfs_path()/class/infiniband exists (Open MPI's btl openib); the port, GID,
# GID type and device/net/<ifname> files read right (UCX, pyverbs); paths of no swverbs
# device are left alone.
. "$(dirname "$0")/lib.sh"
export XDG_RUNTIME_DIR="$TMP/xdg"
mkdir -m 700 "$XDG_RUNTIME_DIR"
export SWVERBS_DEVICES="swv0=127.0.0.1/8;swr0=127.0.0.2/8,roce"
R="$SWVERBS_RUN"
for u in uverbs-swv0 uverbs-swr0; do
	[ "$($R stat -c %F "/dev/infiniband/$u")" = "character special file" ] || fail "stat $u"
	$R test -c "/dev/infiniband/$u" -a -r "/dev/infiniband/$u" -a -w "/dev/infiniband/$u" ||
		fail "test -c -r -w $u"
done
[ "$($R ls /sys/class/infiniband | tr '\n' ' ')" = "swr0 swv0 " ] || fail "ls /sys/class/infiniband"
[ "$($R cat /sys/class/infiniband/swv0/ports/1/gids/0)" = "fe80:0000:0000:0000:0253:57fe:7f00:0001" ] ||
	fail "swv0 gids/0"
[ "$($R cat /sys/class/infiniband/swr0/ports/1/gid_attrs/types/0)" = "RoCE v2" ] || fail "swr0 type"
[ "$($R cat /sys/class/infiniband/swr0/ports/1/link_layer)" = "Ethernet" ] || fail "swr0 link_layer"
[ "$($R cat /sys/class/infiniband/swv0/node_type)" = "1: CA" ] || fail "node_type"
# Not ours: the kernel's node names and other class entries are not invented.
$R test -e /dev/infiniband/uverbs0 && [ ! -e /dev/infiniband/uverbs0 ] && fail "uverbs0 faked"
$R test -e /sys/class/infiniband/nosuchdev && fail "nosuchdev faked"
[ "$(ls /sys/class/net | sort)" = "$($R ls /sys/class/net | sort)" ] || fail "/sys/class/net changed"
# What pyverbs and Open MPI do, from Python (os.stat = stat/fstatat, os.access, listdir).
out=$($R python3 - <<'PY'
import ctypes, os, stat
st = os.stat('/dev/infiniband/uverbs-swv0')
assert stat.S_ISCHR(st.st_mode), st
assert os.access('/dev/infiniband/uverbs-swv0', os.R_OK | os.W_OK)
assert os.listdir('/sys/class/infiniband/swv0/device/net/') == ['lo']
lib = ctypes.CDLL('libibverbs.so.1')
lib.ibv_get_sysfs_path.restype = ctypes.c_char_p
assert os.path.isdir(lib.ibv_get_sysfs_path().decode() + '/class/infiniband')
print('ok')
PY
) || fail "python checks: $out"
[ "$out" = ok ] || fail "python checks: $out"
# The tree is the user's, in $XDG_RUNTIME_DIR/swverbs, closed to others.
[ "$(stat -c %a "$XDG_RUNTIME_DIR/swverbs")" = 700 ] || fail "tree directory mode"
echo "ok: sysfs view"
