#!/usr/bin/env bash
# Port events reach an unmodified ibv_asyncwatch: in a network namespace of its own, a
# swverbs device is bound to one end of a veth pair; asyncwatch (which creates nothing,
# so only port events can reach it) watches it while the test
#   1. takes that end down and up        -> PORT_ERR, PORT_ACTIVE
#   2. takes the peer end down and up    -> PORT_ERR, PORT_ACTIVE (carrier lost / back)
# and ibv_devinfo, a second process, reads the port as it is at each step: ACTIVE /
# LINK_UP while the link is up, DOWN with phys_state DISABLED while it is down, and
# POLLING while it is up without carrier.
# asyncwatch must print exactly those four event lines, in that order, for port 1.
. "$(dirname "$0")/lib.sh"
need ibv_asyncwatch ibverbs-utils
need ibv_devinfo ibverbs-utils
need ip iproute2
N=swvpe$$
if ! ip netns add $N 2>/dev/null; then
	echo "*** SKIPPED: cannot create network namespaces here (needs root / CAP_SYS_ADMIN) ***"
	exit 77
fi
trap 'kill $(jobs -p) 2>/dev/null; ip netns del $N 2>/dev/null; rm -rf "$TMP"' EXIT
ip -n $N link set lo up || fail "lo up"
if ! ip -n $N link add vpa type veth peer name vpb 2>/dev/null; then
	echo "*** SKIPPED: this kernel cannot create veth pairs (CONFIG_VETH) ***"
	exit 77
fi
ip -n $N addr add 10.78.9.1/24 dev vpa || fail "addr"
ip -n $N link set vpa up && ip -n $N link set vpb up || fail "link up"

inN() { SWVERBS_DEVICES="swv0=10.78.9.1/24" ip netns exec $N "$@"; }
OUT=$TMP/asyncwatch.out

# wait_for N PATTERN WHAT: until OUT holds at least N lines matching PATTERN. 60 s is a
# hang guard, not a timing check: the watcher's progress thread may wait seconds for a
# core beside a busy suite (10 s ran out once at load 14).
wait_for() {
	local i
	for ((i = 0; i < 600; i++)); do
		[ "$(grep -cE "$2" "$OUT")" -ge "$1" ] && return 0
		kill -0 $WPID 2>/dev/null || break
		sleep 0.1
	done
	cat "$OUT"
	fail "$3"
}

# port STATE PHYS: ibv_devinfo (another process, another context) reads the port.
port() {
	local info
	info=$(inN timeout 30 "$SWVERBS_RUN" ibv_devinfo -v -d swv0) || fail "ibv_devinfo: $info"
	grep -Eq "^\s+state:\s+$1 " <<<"$info" || fail "port state is not $1: $(grep -E 'state' <<<"$info")"
	grep -Eq "^\s+phys_state:\s+$2 " <<<"$info" || fail "phys_state is not $2: $(grep -E 'state' <<<"$info")"
	echo "ok: port reads $1 / $2"
}

# Not through inN: $! must be asyncwatch itself (ip netns exec, env and swverbs-run all
# exec). A non-interactive shell starts background jobs with SIGINT ignored: restore it.
SWVERBS_DEVICES="swv0=10.78.9.1/24" ip netns exec $N \
	env --default-signal=INT,TERM "$SWVERBS_RUN" ibv_asyncwatch -d swv0 >"$OUT" 2>&1 &
WPID=$!
wait_for 1 "^swv0: async event FD [0-9]+$" "ibv_asyncwatch did not start"
port PORT_ACTIVE LINK_UP

ERR='^ +event_type IBV_EVENT_PORT_ERR \(10\), port 1$'
ACT='^ +event_type IBV_EVENT_PORT_ACTIVE \(9\), port 1$'

# flap DEV K PHYS WHAT: DEV down -> K PORT_ERRs so far, the port DOWN / PHYS; DEV up ->
# K PORT_ACTIVEs so far, the port ACTIVE again.
flap() {
	ip -n $N link set $1 down || fail "$1 down"
	wait_for $2 "$ERR" "no PORT_ERR after $4 went down"
	port PORT_DOWN $3
	ip -n $N link set $1 up || fail "$1 up"
	wait_for $2 "$ACT" "no PORT_ACTIVE after $4 came back"
	port PORT_ACTIVE LINK_UP
}
flap vpa 1 DISABLED "the link"    # our end
flap vpb 2 POLLING "the carrier"  # the peer end: no carrier

sleep 0.3 # room for a stray extra event to show
kill -TERM $WPID
wait $WPID
[ "$(cat /proc/$WPID/comm 2>/dev/null)" = "" ] || fail "ibv_asyncwatch still running"
cat "$OUT"
got=$(grep -E "event_type" "$OUT" | sed -E 's/^ +event_type (IBV_EVENT_[A-Z_]+).*/\1/' | tr '\n' ' ')
want="IBV_EVENT_PORT_ERR IBV_EVENT_PORT_ACTIVE IBV_EVENT_PORT_ERR IBV_EVENT_PORT_ACTIVE "
[ "$got" = "$want" ] || fail "events: '$got', expected '$want'"
[ "$(grep -cE "$ERR|$ACT" "$OUT")" -eq 4 ] || fail "an event line is not 'event_type ..., port 1'"
echo "ok: ibv_asyncwatch printed PORT_ERR, PORT_ACTIVE (link) and PORT_ERR, PORT_ACTIVE (carrier)"

# The address on two interfaces, the first (lower index) down: the device uses the one
# that is up, as the configuration chooses, and its port must follow that one.
ip -n $N link set vpa down || fail "vpa down"
ip -n $N link add vqa type veth peer name vqb || fail "second veth"
ip -n $N addr add 10.78.9.1/24 dev vqa || fail "addr on vqa"
ip -n $N link set vqa up && ip -n $N link set vqb up || fail "vqa up"
port PORT_ACTIVE LINK_UP

# Moved to another namespace and back (same index, address flushed): not followed again.
SWVERBS_DEVICES="swv0=10.78.9.1/24" ip netns exec $N \
	env --default-signal=INT,TERM "$SWVERBS_RUN" ibv_asyncwatch -d swv0 >"$OUT" 2>&1 &
WPID=$!
wait_for 1 "^swv0: async event FD [0-9]+$" "ibv_asyncwatch did not start (second run)"
ip netns add ${N}x || fail "second netns"
trap 'kill $(jobs -p) 2>/dev/null; ip netns del $N 2>/dev/null; ip netns del ${N}x 2>/dev/null; rm -rf "$TMP"' EXIT
ip -n $N link set vqa netns ${N}x || fail "move vqa out"
wait_for 1 "$ERR" "no PORT_ERR when the interface left the namespace"
ip -n ${N}x link set vqa netns $N || fail "move vqa back"
ip -n $N link set vqa up || fail "vqa up again"
sleep 0.5 # room for a wrong PORT_ACTIVE to show
kill -TERM $WPID
wait $WPID
[ "$(grep -cE "$ACT" "$OUT")" -eq 0 ] || { cat "$OUT"; fail "a moved-away interface was followed again"; }
echo "ok: an interface with the address beats a down one holding it too; a moved interface is not followed back"
