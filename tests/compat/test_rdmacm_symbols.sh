#!/usr/bin/env bash
# swverbs' librdmacm.so.1 must define every name of src/rdmacm/librdmacm.map at the
# node the map gives it, and every function Debian's librdmacm.so.1 exports (a
# preloaded library that lacks one would let a binary fall through to the system
# library, which would treat swverbs' ids as its own). Checks `readelf -V` nodes too.
. "$(dirname "$0")/lib.sh"
: "${SWVERBS_BUILD:?}"
lib="$SWVERBS_BUILD/src/rdmacm/librdmacm.so.1"
map="$(dirname "$0")/../../src/rdmacm/librdmacm.map"
[ -f "$lib" ] || fail "$lib not built"
defs=$(nm -D --defined-only "$lib" | awk '{print $3}')
missing=0
# "NAME NODE" for every name of the map.
pairs=$(sed 's,/\*.*\*/,,' "$map" | awk '
	/^RDMACM_[0-9.]+ *\{/ { node = $1; next }
	/^[ \t]*(local|global):/ { sub(/^[ \t]*(local|global):/, "") }
	/^}/ || node == "" { next }
	{ gsub(/;/, " "); for (i = 1; i <= NF; i++) if ($i != "*") print $i, node }')
[ -n "$pairs" ] || fail "no names read from $map"
while read -r n node; do
	grep -qx "$n@@$node" <<<"$defs" || { echo "missing: $n@@$node"; missing=1; }
done <<<"$pairs"
[ $missing -eq 0 ] || fail "names of the map not defined"
for v in 1.0 1.1 1.2 1.3; do
	readelf -V --wide "$lib" | grep -q "Name: RDMACM_$v\$" || fail "no version node RDMACM_$v"
done
sys=$(ldconfig -p | awk '/librdmacm\.so\.1 /{print $NF; exit}')
if [ -n "$sys" ]; then
	n=0
	for f in $(nm -D --defined-only "$sys" | awk '$2 == "T" && $3 ~ /@@RDMACM_/ {print $3}'); do
		grep -qx "$f" <<<"$defs" || { echo "Debian exports $f, swverbs' librdmacm does not"; missing=1; }
		n=$((n + 1))
	done
	[ $missing -eq 0 ] || fail "Debian librdmacm functions missing"
	echo "ok: all $n functions of $sys defined at their nodes"
fi
echo "ok: librdmacm map and version nodes"
