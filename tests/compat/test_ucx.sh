#!/usr/bin/env bash
# UCX 1.13 over swverbs, unmodified (ucx-utils), on an IB-style and a RoCE-style device:
# ucx_info -d lists the device's rc_verbs and ud_verbs; ucx_perftest tag_lat, tag_bw,
# ucp_put_lat and ucp_put_bw with UCX_TLS=rc_v, UCT put_lat/put_bw on rc_verbs, and
# tag_lat/tag_bw with UCX_TLS=ud_v, each printing a figure. The RoCE runs leave
# UCX_UD_VERBS_ETH_DGID_CHECK at its default (ud_verbs reads wc.sl there).
. "$(dirname "$0")/lib.sh"
need ucx_info ucx-utils
need ucx_perftest ucx-utils
export XDG_RUNTIME_DIR="$TMP/xdg"
mkdir -m 700 "$XDG_RUNTIME_DIR"
unset UCX_UD_VERBS_ETH_DGID_CHECK UCX_TLS UCX_NET_DEVICES
# perf NAME ARGS...: one server/client pair of ucx_perftest; the client's Final line.
perf() {
	local name=$1 p
	shift
	p=$(free_port)
	PAIR_PORT=$p pair "$name" 120 ucx_perftest -p "$p" -- ucx_perftest localhost -p "$p" "$@"
	grep -q '^Final:' "$TMP/$name.client" || { cat "$TMP/$name.client"; fail "$name: no figure"; }
	echo "ok: $name: $(grep '^Final:' "$TMP/$name.client" | tr -s ' ')"
}
for mode in ib roce; do
	if [ $mode = ib ]; then
		dev=swv0 SWVERBS_DEVICES="swv0=127.0.0.1/8"
	else
		dev=swr0 SWVERBS_DEVICES="swr0=127.0.0.1/8,roce"
	fi
	export SWVERBS_DEVICES
	timeout 60 "$SWVERBS_RUN" ucx_info -d >"$TMP/info.$mode" 2>&1 || fail "ucx_info -d ($mode)"
	for tl in rc_verbs ud_verbs; do
		grep -A1 "Transport: $tl\$" "$TMP/info.$mode" | grep -q "Device: $dev:1\$" ||
			{ cat "$TMP/info.$mode"; fail "ucx_info -d does not list $tl on $dev:1"; }
	done
	echo "ok: ucx_info -d lists rc_verbs and ud_verbs on $dev:1"
	export UCX_NET_DEVICES=$dev:1
	export UCX_TLS=rc_v
	perf "$mode.rc.tag_lat" -t tag_lat -n 2000
	perf "$mode.rc.tag_bw" -t tag_bw -n 300 -s 65536
	perf "$mode.rc.ucp_put_lat" -t ucp_put_lat -n 2000
	perf "$mode.rc.ucp_put_bw" -t ucp_put_bw -n 300 -s 65536
	perf "$mode.rc.put_lat" -t put_lat -x rc_verbs -d $dev:1 -n 2000
	perf "$mode.rc.put_bw" -t put_bw -x rc_verbs -d $dev:1 -D zcopy -n 300 -s 65536
	export UCX_TLS=ud_v
	perf "$mode.ud.tag_lat" -t tag_lat -n 2000
	perf "$mode.ud.tag_bw" -t tag_bw -n 300 -s 65536
	unset UCX_TLS UCX_NET_DEVICES
done
exit 0
