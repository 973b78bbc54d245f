#!/usr/bin/env bash
# ibv_asyncwatch (ibverbs-utils) under swverbs-run: it opens its own context on the
# default device, prints the async event FD, and blocks in ibv_get_async_event.
#
# Here, with nothing changing, no event may reach it: events about a CQ, QP or SRQ
# belong to the context that owns it, and asyncwatch's context has none; port events
# come only when the interface under the device changes, which test_port_events.sh
# does in a namespace of its own (lo is left alone here). So this checks that it
# starts, prints an FD that really is its async FD (an epoll set, see core/async.h),
# reports nothing, sleeps in the kernel instead of spinning (the netdev watch included),
# and ends at once on SIGINT and on SIGTERM (killed by that signal, as with rdma-core).
# An unknown -d device fails cleanly.
. "$(dirname "$0")/lib.sh"
need ibv_asyncwatch ibverbs-utils

ticks() { # utime + stime of every thread of pid $1, in clock ticks
	cat /proc/"$1"/task/*/stat 2>/dev/null | awk '{ s += $14 + $15 } END { print s + 0 }'
}

watch_once() { # SIGNAL EXPECTED_RC [ARGS...]
	local sig=$1 want=$2
	shift 2
	local out="$TMP/asyncwatch.$sig"
	# A non-interactive shell starts background jobs with SIGINT ignored; give the
	# program the default dispositions a terminal user's program would have.
	env --default-signal=INT,TERM "$SWVERBS_RUN" ibv_asyncwatch "$@" >"$out" 2>&1 &
	local pid=$! i
	for ((i = 0; i < 100; i++)); do
		grep -q "async event FD" "$out" && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.1
	done
	cat "$out"
	grep -Eq "^swv0: async event FD [0-9]+$" "$out" || fail "no 'swv0: async event FD N' line"
	local fd
	fd=$(sed -nE 's/^swv0: async event FD ([0-9]+)$/\1/p' "$out")
	[ "$(readlink /proc/$pid/fd/"$fd")" = "anon_inode:[eventpoll]" ] ||
		fail "FD $fd is not the context's async event fd ($(readlink /proc/$pid/fd/"$fd"))"
	# Blocked, not spinning: the whole process (its progress thread included) may use
	# a few ticks over one second, not the second itself.
	local t0 t1
	t0=$(ticks $pid)
	sleep 1
	t1=$(ticks $pid)
	kill -0 $pid 2>/dev/null || fail "ibv_asyncwatch exited on its own"
	[ $((t1 - t0)) -lt 20 ] || fail "ibv_asyncwatch used $((t1 - t0)) ticks in 1 s while idle"
	grep -q "^S" <(awk '{print $3}' /proc/$pid/stat) || fail "main thread not sleeping"
	grep -q "event_type" "$out" && fail "an event was reported: $(cat "$out")"
	kill -"$sig" $pid
	local rc=0 deadline=$((SECONDS + 10))
	while kill -0 $pid 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
	kill -0 $pid 2>/dev/null && { kill -KILL $pid; fail "still running 10 s after SIG$sig"; }
	wait $pid || rc=$?
	[ $rc -eq "$want" ] || fail "exit status $rc after SIG$sig, expected $want"
	echo "ok: ibv_asyncwatch $* blocks and ends on SIG$sig"
}

watch_once INT 130
watch_once TERM 143 -d swv0

rc=0
timeout 30 "$SWVERBS_RUN" ibv_asyncwatch -d nosuchdev >"$TMP/asyncwatch.bad" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "ibv_asyncwatch -d nosuchdev: exit $rc"
grep -q "IB device nosuchdev not found" "$TMP/asyncwatch.bad" || fail "no 'not found' message"
echo "ok: ibv_asyncwatch -d nosuchdev fails cleanly"
