#!/bin/bash
# Wire compatibility: packets built by swverbs' own packet code (tests/unit/test_packet
# --pcap) must dissect in Wireshark's InfiniBand/RoCEv2 dissector with the field values
# we put in. The packets ride in synthetic Ethernet/IPv4/UDP frames to a non-4791 port,
# selected with `-d udp.port==N,infiniband` exactly as docs/wire.md tells users to.
#
# Env: SWVERBS_BUILD = build directory (set by CTest). Exit 77 = skipped (no tshark).
set -u

PORT=18515 # must match SWV_PCAP_PORT in tests/unit/test_packet.c

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

if ! command -v tshark >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "tshark not installed: installing it (apt-get install tshark)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y tshark >/dev/null ||
			{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y tshark >/dev/null; }
	fi
	if ! command -v tshark >/dev/null 2>&1; then
		echo "********************************************************"
		echo "SKIP: tshark not installed (run as root to auto-install)"
		echo "********************************************************"
		exit 77
	fi
fi

build=${SWVERBS_BUILD:-}
[ -n "$build" ] || fail "SWVERBS_BUILD is not set"
gen="$build/tests/test_packet"
[ -x "$gen" ] || fail "$gen not built"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pcap="$tmp/swverbs.pcap"
"$gen" --pcap "$pcap" || fail "test_packet --pcap failed"

# Upper-layer protocols (RPC-over-RDMA, NVMe-oF, iSER, ...) register heuristics on the
# InfiniBand payload and may claim our arbitrary test payloads; turn them off so that
# only the transport headers are judged. Ask tshark which exist in this version.
disable=()
heur=$(tshark -G heuristic-decodes 2>/dev/null | awk -F'\t' '$1 == "infiniband.payload" { print $2 }')
protos=$(tshark -G protocols 2>/dev/null | awk -F'\t' '{ print $3 }')
for p in $heur; do
	[ "$p" = ethertype ] && continue # also used by Ethernet itself
	grep -qxF "$p" <<<"$protos" && disable+=(--disable-protocol "$p")
done
ts=(tshark -n -r "$pcap" -d "udp.port==$PORT,infiniband" "${disable[@]}")

# 1. Every frame is InfiniBand, nothing malformed, no expert warnings.
n=$("${ts[@]}" -Y infiniband 2>/dev/null | wc -l)
[ "$n" = 13 ] || { "${ts[@]}" 2>&1; fail "expected 13 InfiniBand frames, tshark dissected $n"; }
bad=$("${ts[@]}" -Y '_ws.malformed || _ws.expert' 2>/dev/null)
[ -z "$bad" ] || fail "malformed or flagged frames: $bad"

# 2. Field values. Columns: opcode se padcnt tver p_key destqp ackreq psn | reth va
# r_key dmalen (AtomicETH VA/R_Key use the same fields) | aeth syndrome msn | atomiceth
# swap cmp | atomicacketh orig | deth q_key srcqp | immdt | ieth | data length (payload+pad)
fields=(infiniband.bth.opcode infiniband.bth.se infiniband.bth.padcnt infiniband.bth.tver
	infiniband.bth.p_key infiniband.bth.destqp infiniband.bth.a infiniband.bth.psn
	infiniband.reth.va infiniband.reth.r_key infiniband.reth.dmalen
	infiniband.aeth.syndrome infiniband.aeth.msn
	infiniband.atomiceth.swapdt infiniband.atomiceth.cmpdt infiniband.atomicacketh.origremdt
	infiniband.deth.q_key infiniband.deth.srcqp infiniband.immdt infiniband.ieth data.len)
eargs=()
for f in "${fields[@]}"; do eargs+=(-e "$f"); done

# Written from the packet definitions in test_packet.c write_pcap(), not from tshark.
cat >"$tmp/expected" <<'EXP'
4|0|3|0|65535|0x000123|1|1|||||||||||||8
6|0|0|0|65535|0x000123|0|16|0x00007f0000001000|0x00001234|8192||||||||||256
12|0|0|0|65535|0x000123|1|32|0x0000000000002000|0x0000abcd|4096||||||||||
17|0|0|0|65535|0x000456|0|32||||31|5||||||||
19|0|0|0|65535|0x000123|1|48|0x0000000000010000|0x00005678||||1229801703532086340|6148933456521300104||||||
18|0|0|0|65535|0x000456|0|48||||31|6|||81985529216486895|||||
101|1|0|0|65535|0x000789|0|64|||||||||0x0000000011111111|0x00000abc|deadbeef||64
16|0|1|0|65535|0x000456|0|32||||31|7||||||||8
20|0|0|0|65535|0x000123|1|49|0x0000000000010008|0x00005678||||1|0||||||
17|0|0|0|65535|0x000456|0|50||||96|8||||||||
23|0|0|0|65535|0x000123|0|51||||||||||||0000cafe|4
43|0|2|0|65535|0x000321|0|16777215|0x0000000000003000|0x00000042|2||||||||deadbeef||4
100|0|0|0|65535|0x000789|0|65|||||||||0x0000000022222222|0x00000abd|||4096
EXP
"${ts[@]}" -T fields -E separator='|' -E occurrence=f "${eargs[@]}" >"$tmp/got" 2>"$tmp/err" ||
	{ cat "$tmp/err" >&2; fail "tshark -T fields failed"; }
if ! diff -u "$tmp/expected" "$tmp/got"; then
	fail "tshark field values differ from what swverbs encoded (- expected, + tshark)"
fi

# 3. The trailer: tshark shows the 4 bytes as "Invariant CRC" (it never verifies it).
# Recompute the swverbs CRC independently (Python's zlib) from the UDP payload tshark
# extracted: CRC-32 over BTH..pad with BTH byte 4 = 0xff, stored LSB first.
if command -v python3 >/dev/null 2>&1; then
	"${ts[@]}" -T fields -E separator='|' -e udp.payload -e infiniband.invariant.crc \
		>"$tmp/crc" 2>/dev/null || fail "tshark (crc fields) failed"
	python3 - "$tmp/crc" <<'PY' || fail "trailing CRC check failed"
import sys, zlib
bad = 0
for i, line in enumerate(open(sys.argv[1]), 1):
    hexdata, shown = line.strip().split("|")
    d = bytearray(bytes.fromhex(hexdata.replace(":", "")))
    trailer = bytes(d[-4:])
    d[4] = 0xff
    crc = zlib.crc32(bytes(d[:-4]))
    if crc.to_bytes(4, "little") != trailer or int(shown, 16) != int.from_bytes(trailer, "big"):
        print(f"frame {i}: trailer {trailer.hex()} shown {shown}, zlib says {crc:08x}")
        bad += 1
sys.exit(1 if bad else 0)
PY
else
	echo "NOTE: python3 not found, independent CRC recomputation skipped"
fi

echo "test_tshark: OK ($(tshark --version 2>/dev/null | head -1))"
