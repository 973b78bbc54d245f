#!/usr/bin/env bash
# mckey (rdmacm-utils), unmodified: UD multicast through swverbs' librdmacm
# (rdma_join_multicast, the MULTICAST_JOIN event's ah_attr/QPN/QKey, the QP attached
# when the event is taken) and ibv_attach_mcast underneath. Three receiver processes
# and one sender per case; each receiver must get every message (mckey counts them).
# The sender starts once every receiver says it is receiving (joined, attached, past
# mckey's 3 s pause; line-buffered by stdbuf so that the line shows at once).
. "$(dirname "$0")/lib.sh"
need mckey rdmacm-utils

# wait_for FILE TEXT: until a line of FILE holds TEXT (30 s at most).
wait_for() {
	local i
	for ((i = 0; i < 300; i++)); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# run_case NAME "RECEIVER OPTIONS" "SENDER OPTIONS" [SWVERBS_DEVICES]
run_case() {
	local name=$1 ropts=$2 sopts=$3 devs=${4:-} grp i rc pids=()
	grp="239.$((RANDOM % 200 + 20)).$((RANDOM % 250)).$((RANDOM % 250 + 1))"
	for i in 1 2 3; do
		SWVERBS_DEVICES="$devs" timeout 60 "$SWVERBS_RUN" stdbuf -oL mckey -m "$grp" $ropts \
			>"$TMP/$name.r$i" 2>&1 &
		pids+=($!)
	done
	for i in 1 2 3; do
		wait_for "$TMP/$name.r$i" 'receiving data transfers' || {
			cat "$TMP/$name.r$i"; fail "$name: receiver $i never joined"; }
	done
	rc=0
	SWVERBS_DEVICES="$devs" timeout 60 "$SWVERBS_RUN" stdbuf -oL mckey -m "$grp" -s $sopts \
		>"$TMP/$name.s" 2>&1 || rc=$?
	[ $rc -eq 0 ] || { cat "$TMP/$name.s"; fail "$name: sender exit $rc"; }
	for i in 1 2 3; do
		rc=0
		wait "${pids[$((i - 1))]}" || rc=$?
		if [ $rc -ne 0 ] || ! grep -q '^return status 0$' "$TMP/$name.r$i" ||
			! grep -q 'data transfers complete' "$TMP/$name.r$i"; then
			cat "$TMP/$name.r$i"; fail "$name: receiver $i (exit $rc)"
		fi
	done
	grep -q 'joined dgid' "$TMP/$name.s" || fail "$name: sender never joined"
	echo "ok: mckey $name ($grp)"
}

run_case bound "-b 127.0.0.1 -C 50" "-b 127.0.0.1 -C 50"
run_case unbound "-C 20" "-C 20"
run_case "two ids" "-b 127.0.0.1 -c 2 -C 20" "-b 127.0.0.1 -c 2 -C 20"
run_case "send-only sender" "-b 127.0.0.1 -C 20" "-b 127.0.0.1 -C 20 -o"
run_case roce "-b 127.0.0.1 -C 20 -S 512" "-b 127.0.0.1 -C 20 -S 512" "swr0=127.0.0.1/8,roce"
grep -q "joined dgid: ::ffff:" "$TMP/roce.s" || fail "roce: the MGID is not the IPv4-mapped group"
