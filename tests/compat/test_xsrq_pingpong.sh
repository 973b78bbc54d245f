#!/usr/bin/env bash
# ibv_xsrq_pingpong needs XRC (ibv_open_xrcd, XRC SRQs and QPs), which swverbs does not
# provide (docs/compat.md): verbs_context.open_xrcd is NULL, so the inline ibv_open_xrcd
# answers EOPNOTSUPP. The server must stop at once with its own message and a plain
# failure exit status: no crash (signal), no hang.
. "$(dirname "$0")/lib.sh"
need ibv_xsrq_pingpong ibverbs-utils
p=$(free_port)
rc=0
timeout 30 "$SWVERBS_RUN" ibv_xsrq_pingpong -p "$p" >"$TMP/xsrq.server" 2>&1 || rc=$?
cat "$TMP/xsrq.server"
[ $rc -ne 124 ] || fail "ibv_xsrq_pingpong hung"
[ $rc -ne 0 ] || fail "ibv_xsrq_pingpong succeeded without XRC?"
[ $rc -lt 128 ] || fail "ibv_xsrq_pingpong died with signal $((rc - 128))"
grep -q "Couldn't Open the XRC Domain" "$TMP/xsrq.server" || fail "no XRC domain message"
echo "ok: ibv_xsrq_pingpong refuses cleanly (exit $rc)"
