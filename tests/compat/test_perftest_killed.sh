#!/usr/bin/env bash
# perftest clients whose server is killed (SIGKILL) mid-run: with perftest's own QP
# settings (ACK timeout 14 = 67 ms, retry_cnt 7) the client's outstanding WR must end
# in IBV_WC_RETRY_EXC_ERR (perftest prints "Failed status 12") after seven retries,
# about (7 + 1) x 67 ms, and the client must exit with an error instead of hanging
# (retry_cnt 7 used to mean "retry forever"; docs/responder.md "Retry rules").
. "$(dirname "$0")/lib.sh"
need ib_write_bw perftest

# killed NAME ARGS...: server and client run ARGS; the server dies once the client
# has printed its results header (the connection is up and the measurement runs).
killed() {
	local name=$1
	shift
	local p
	p=$(free_port)
	"$SWVERBS_RUN" "$@" -d swv0 -p "$p" >"$TMP/$name.server" 2>&1 &
	local spid=$!
	wait_port "$p" 30 || fail "$name: server never listened on port $p"
	# line-buffered: the header must reach the file while the client runs
	timeout 120 stdbuf -oL "$SWVERBS_RUN" "$@" -d swv0 -p "$p" localhost >"$TMP/$name.client" 2>&1 &
	local cpid=$!
	local i
	for ((i = 0; i < 600; i++)); do
		grep -qs '#bytes' "$TMP/$name.client" && break
		kill -0 $cpid 2>/dev/null || break
		sleep 0.1
	done
	grep -q '#bytes' "$TMP/$name.client" || { cat "$TMP/$name.client"; fail "$name: never started"; }
	kill -9 $spid
	wait $spid 2>/dev/null
	local crc=0
	wait $cpid || crc=$?
	if [ $crc -eq 0 ] || [ $crc -eq 124 ] || ! grep -q 'Failed status 12' "$TMP/$name.client"; then
		echo "---- $name client (rc $crc, 124 = hung until the timeout):"
		cat "$TMP/$name.client"
		fail "$name: the client did not report RETRY_EXC_ERR and exit"
	fi
	echo "ok: $name: client exited with rc $crc: $(grep -m1 'Failed status' "$TMP/$name.client")"
}

killed ib_write_bw ib_write_bw -D 60
killed ib_read_bw ib_read_bw -D 60
killed ib_send_bw ib_send_bw -D 60
killed ib_read_lat ib_read_lat -n 100000000
killed ib_send_lat ib_send_lat -n 100000000
# Not ib_write_lat: its client spins on a memory word until the peer's WRITE lands and
# polls no CQ meanwhile, so with the peer dead it waits forever on any device.
