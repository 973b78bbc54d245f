#!/usr/bin/env bash
# Every function named in src/api/libswverbs.map must be defined by the built
# libswverbs.so, as the default version of the map node that names it.
#
# Why: under swverbs-run (LD_PRELOAD) a libibverbs function that libswverbs does not
# define falls through to the system libibverbs, which then treats swverbs' objects as
# its own internals and crashes (docs/compat.md). A name in the map that no source
# defines is silently dropped by ld, so only a look at the built library catches it.
#
# Also checked, when the system libibverbs.so.1 is installed: every function it exports
# as the default version of a public IBVERBS_1.x node is named in our map at that same
# node, so the map itself cannot lose or misplace a name a Debian binary imports.
#
# Usage: test_abi_symbols.sh [path/to/libswverbs.so]  (default: $SWVERBS_BUILD/src/...)
# Prints every problem; exits 1 if there is any, 77 if readelf is missing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
map="$here/../../src/api/libswverbs.map"
lib=${1:-${SWVERBS_BUILD:-}/src/libswverbs.so}

command -v readelf >/dev/null || { echo "SKIP: readelf (binutils) not installed"; exit 77; }
[ -f "$map" ] || { echo "FAIL: no version script at $map"; exit 1; }
[ -f "$lib" ] || { echo "FAIL: no library at '$lib' (set SWVERBS_BUILD or pass the path)"; exit 1; }

# "name version" for each name in the map. Handles /* */ comments over several lines,
# 'global:'/'local:' labels and the '} PARENT;' that closes a node.
map_syms() {
	awk '
	{
		line = $0
		out = ""
		while (length(line) > 0) {
			if (incomment) {
				e = index(line, "*/")
				if (e == 0) { line = ""; break }
				line = substr(line, e + 2); incomment = 0
			} else {
				s = index(line, "/*")
				if (s == 0) { out = out line; line = ""; break }
				out = out substr(line, 1, s - 1); line = substr(line, s + 2); incomment = 1
			}
		}
		n = split(out, tok, /[ \t;]+/)
		for (i = 1; i <= n; i++) {
			t = tok[i]
			if (t == "") continue
			if (node == "") {
				# Outside a node: a name, then "{" opens it. The parent name after
				# "}" is just overwritten by the next node name.
				if (t == "{") { node = pending; scope = "" } else pending = t
				continue
			}
			if (t == "}") { node = ""; pending = ""; continue }
			if (t == "global:" || t == "local:") { scope = t; continue }
			if (scope == "global:") print t, node
		}
	}' "$map"
}

# "name version" for each symbol the library defines and exports as a default version
# (readelf prints name@@VERSION for those, name@VERSION for hidden compat versions).
lib_syms() {
	readelf --dyn-syms -W "$1" |
		awk '$5 == "GLOBAL" || $5 == "WEAK" { if ($7 != "UND" && ($4 == "FUNC" || $4 == "IFUNC")) print $8 }' |
		awk -F'@@' 'NF == 2 { print $1, $2 }'
}

want=$(map_syms | sort -u)
[ -n "$want" ] || { echo "FAIL: no names parsed from $map"; exit 1; }
have=$(lib_syms "$lib" | sort -u)

# Lookup tables: "name node" -> 1, and name -> the node(s) the library gives it.
declare -A in_map in_lib lib_nodes map_names
while read -r name node; do
	in_map["$name $node"]=1
	map_names[$name]=1
done <<<"$want"
while read -r name node; do
	[ -z "$name" ] && continue
	in_lib["$name $node"]=1
	lib_nodes[$name]+="${lib_nodes[$name]:+,}$node"
done <<<"$have"

problems=0
missing=""
while read -r name node; do
	[ -n "${in_lib["$name $node"]:-}" ] && continue
	if [ -n "${lib_nodes[$name]:-}" ]; then
		echo "WRONG VERSION: $name is defined as @@${lib_nodes[$name]}, the map says $node"
	else
		missing+="$node $name"$'\n'
	fi
	problems=$((problems + 1))
done <<<"$want"

if [ -n "$missing" ]; then
	echo "MISSING: names in libswverbs.map that $(basename "$lib") does not define"
	echo "(under LD_PRELOAD each one falls through to the system libibverbs and crashes):"
	sort -V <<<"${missing%$'\n'}" | awk '{ printf "  %-22s %s\n", $1, $2 }'
fi

# The library must not export a function the map does not name (local: * should make
# that impossible; a second version script or a visibility slip would not).
while read -r name node; do
	[ -z "$name" ] && continue
	[ -n "${map_names[$name]:-}" ] && continue # named at another node: WRONG VERSION above
	echo "EXTRA: $name@@$node is exported but not named in the map"
	problems=$((problems + 1))
done <<<"$have"

# The map against Debian's libibverbs, when present: same names at the same public
# nodes (IBVERBS_PRIVATE_* is provider-private; only the names clients import matter
# there, and those are in the map by hand).
sys=""
for cand in /usr/lib/*-linux-gnu/libibverbs.so.1 /usr/lib64/libibverbs.so.1 /usr/lib/libibverbs.so.1; do
	[ -f "$cand" ] && { sys=$cand; break; }
done
if [ -n "$sys" ]; then
	nsys=0
	while read -r name node; do
		[ -z "$name" ] && continue
		case $node in IBVERBS_1.*) ;; *) continue ;; esac
		nsys=$((nsys + 1))
		if [ -z "${in_map["$name $node"]:-}" ]; then
			echo "MAP GAP: $sys exports $name@@$node; libswverbs.map does not name it there"
			problems=$((problems + 1))
		fi
	done < <(lib_syms "$sys" | sort -u)
	echo "checked the map against $nsys public functions of $sys"
else
	echo "note: no system libibverbs.so.1; the map was not compared with Debian's exports"
fi

total=$(wc -l <<<"$want")
if [ "$problems" -ne 0 ]; then
	echo "FAIL: $problems problem(s) among $total names in the map"
	exit 1
fi
echo "ok: all $total names in the map are defined by $(basename "$lib") at their version"
