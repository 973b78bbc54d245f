#!/usr/bin/env bash
# A peer killed mid-transfer: an endless rping (no -C) runs until the server gets
# SIGKILL after the client's 100th ping. The client's CM learns it at once (the ICMP
# port unreachable that answers the dead process' CM port, docs/wire.md) and rping
# leaves its loop on the DISCONNECTED event ("wait for RDMA_..._ADV state 10", rping's
# DISCONNECTED state), well within the bound (no hang).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need rping rdmacm-utils
p=$(free_cm_port)
"$SWVERBS_RUN" rping -s -a 127.0.0.1 -p "$p" -v >"$TMP/server" 2>&1 &
spid=$!
wait_cm_port "$p" 30 || fail "rping server never listened"
timeout 60 "$SWVERBS_RUN" rping -c -a 127.0.0.1 -p "$p" -v >"$TMP/client" 2>&1 &
cpid=$!
for ((i = 0; i < 600; i++)); do
	grep -q 'rdma-ping-100:' "$TMP/client" && break
	sleep 0.1
done
grep -q 'rdma-ping-100:' "$TMP/client" || { cat "$TMP/client"; fail "client never reached ping 100"; }
kill -KILL $spid
start=$SECONDS
rc=0
wait $cpid || rc=$?
[ $rc -ne 124 ] || { tail -n 5 "$TMP/client"; fail "client hung after its peer died"; }
grep -q ' state 10' "$TMP/client" || { tail -n 5 "$TMP/client"; fail "client did not see DISCONNECTED"; }
echo "ok: rping client left on DISCONNECTED $((SECONDS - start)) s after the server's SIGKILL (rc $rc)"
