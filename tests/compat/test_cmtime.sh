#!/usr/bin/env bash
# cmtime (rdmacm-utils): 100 RC connections set up and torn down through swverbs'
# librdmacm, timing each step. The server keeps serving after the client is done
# (it has no exit condition), so it is stopped once the client has finished.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need cmtime rdmacm-utils
p=$(free_cm_port)
"$SWVERBS_RUN" cmtime -p "$p" >"$TMP/cmtime.server" 2>&1 &
spid=$!
wait_cm_port "$p" 30 || fail "cmtime server never listened"
rc=0
timeout 120 "$SWVERBS_RUN" cmtime -s 127.0.0.1 -p "$p" >"$TMP/cmtime.client" 2>&1 || rc=$?
kill $spid 2>/dev/null
wait $spid 2>/dev/null
cat "$TMP/cmtime.client"
[ $rc -eq 0 ] || fail "cmtime client exited $rc"
for step in "create id" "resolve addr" "resolve route" "create qp" "connect" "disconnect" "destroy"; do
	grep -q "^$step *:" "$TMP/cmtime.client" || fail "no '$step' line"
done
echo "ok: cmtime"
