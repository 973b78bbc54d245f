#!/usr/bin/env bash
# ibv_xsrq_pingpong (ibverbs-utils): XRC end to end -- an XRC domain opened through a
# file, an XRC SRQ per process (its number exchanged), XRC INI and TGT QPs, SENDs that
# name the peer's SRQ in XRCETH. One server and several clients, each a process of its
# own: LID-addressed and with -g 0, with completion events, with multi-packet messages.
# The server finds the QP of each receive from wc.qp_num ("Unable to find qp" otherwise).
. "$(dirname "$0")/lib.sh"
need ibv_xsrq_pingpong ibverbs-utils

# run NAME NCLIENTS OPTS...: a server for NCLIENTS and as many clients, all must pass.
run() {
	local name=$1 n=$2
	shift 2
	local p
	p=$(free_port)
	timeout 120 "$SWVERBS_RUN" ibv_xsrq_pingpong -p "$p" -c "$n" "$@" >"$TMP/$name.server" 2>&1 &
	local spid=$! pids=() i rc=0
	wait_port "$p" 30 || true
	for ((i = 0; i < n; i++)); do
		timeout 120 "$SWVERBS_RUN" ibv_xsrq_pingpong -p "$p" "$@" localhost \
			>"$TMP/$name.client$i" 2>&1 &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || { rc=1; echo "---- $name client $i failed"; cat "$TMP/$name.client$i"; }
	done
	wait $spid || { rc=1; echo "---- $name server failed"; }
	if [ $rc -ne 0 ]; then
		cat "$TMP/$name.server"
		fail "$name"
	fi
	grep -q "^success" "$TMP/$name.server" || fail "$name: server did not report success"
	! grep -q "Unable to find qp" "$TMP/$name.server" || fail "$name: receive on an unknown QP"
	for ((i = 0; i < n; i++)); do
		grep -q "^success" "$TMP/$name.client$i" || fail "$name: client $i did not report success"
	done
	echo "ok: $name"
}

run one 1
run gid 1 -g 0
run three 3
run three-gid 3 -g 0
run events 2 -e -n 100
run multipacket 2 -s 16384 -m 1024 -n 50
