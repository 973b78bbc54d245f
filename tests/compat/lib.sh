# Helpers for compat tests: run unmodified Debian RDMA clients under swverbs-run.
# Sourced by tests/compat/test_*.sh. Exit code 77 = skipped (CTest SKIP_RETURN_CODE).
set -u
: "${SWVERBS_RUN:?SWVERBS_RUN must name the swverbs-run of a build tree}"
# Unmodified programs may leak on their own; sanitizer builds only check swverbs itself.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT

# need BINARY PACKAGE: make sure a Debian client exists (install as root), else skip.
need() {
	command -v "$1" >/dev/null && return 0
	if [ "$(id -u)" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1
		command -v "$1" >/dev/null && return 0
	fi
	echo "SKIP: $1 not available (package $2 not installed)" >&2
	echo "*** SKIPPED: install Debian package $2 to run this test ***"
	exit 77
}

# unused_port: a port no TCP or UDP socket of any state uses, below the kernel's
# ephemeral range: the kernel hands ports of that range to outgoing connections at any
# moment, and a server given one lost it to a connection of another program ("Couldn't
# listen to port 37644" under ASan in make test).
unused_port() {
	local lo hi p
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768 hi=60999
	while :; do
		if [ "$lo" -gt 21000 ]; then
			p=$((20000 + RANDOM % (lo - 20000)))
		else
			p=$((hi + 1 + RANDOM % (65535 - hi)))
		fi
		ss -Htanu 2>/dev/null | grep -Eq ":$p( |$)" || { echo $p; return; }
	done
}

# free_port: a TCP port for the clients' out-of-band exchange.
free_port() {
	unused_port
}

# wait_listener SS_FLAGS PORT [SECONDS [NETNS]]: wait until `ss SS_FLAGS` (in network
# namespace NETNS if given) lists a socket on PORT. Returns 1 if none shows in time
# (default 30 s).
wait_listener() {
	local flags=$1 port=$2 i in=()
	[ -n "${4:-}" ] && in=(ip netns exec "$4")
	for ((i = 0; i < ${3:-30} * 10; i++)); do
		"${in[@]}" ss "$flags" 2>/dev/null | grep -q ":$port " && return 0
		sleep 0.1
	done
	return 1
}

# wait_port PORT [SECONDS [NETNS]]: wait until something listens on TCP PORT (a server's
# out-of-band socket), so a client does not race a server that is still starting on a
# loaded machine.
wait_port() {
	wait_listener -ltn "$@"
}

# two_hosts TAG NET: two "hosts", network namespaces $A and $B joined by a veth pair,
# NET.1/24 in A and NET.2/24 in B, removed at exit. Skips (77, said loudly) where
# namespaces cannot be created (needs root / CAP_SYS_ADMIN).
two_hosts() {
	A=${1}a$$ B=${1}b$$
	if ! ip netns add $A 2>/dev/null; then
		echo "*** SKIPPED: cannot create network namespaces here (needs root / CAP_SYS_ADMIN) ***"
		exit 77
	fi
	trap 'kill $(jobs -p) 2>/dev/null; ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; rm -rf "$TMP"' EXIT
	ip netns add $B || fail "netns $B"
	ip link add v$A type veth peer name v$B || fail "veth"
	ip link set v$A netns $A && ip link set v$B netns $B || fail "veth move"
	ip -n $A addr add $2.1/24 dev v$A && ip -n $B addr add $2.2/24 dev v$B || fail "addr"
	local ns
	for ns in $A $B; do ip -n $ns link set lo up; done
	ip -n $A link set v$A up && ip -n $B link set v$B up || fail "link up"
}

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# perftest's own timing self-check. Before it reports, perftest calibrates the cycle
# counter against the wall clock by a linear regression over a few short busy loops and
# gives up when the fit is poor: it prints "Correlation coefficient r^2: R < 0.9" and
# then "Can't produce a report", and exits non-zero. On a loaded machine (the parallel
# ctest of `make test`) a preempted busy loop does that although the transfer itself ran;
# it says nothing about swverbs. Exactly this outcome is retried, nothing else.
PERFTEST_CLOCK_RETRIES=3

# loud MESSAGE...: to the test log and to stderr.
loud() {
	echo "$*"
	echo "$*" >&2
}

# perftest_clock_failed FILE...: some FILE shows perftest's self-check failing. Not
# anchored at the line start: perftest may print it right after a table row that has
# no newline yet (" 16  200 ... 0.548071Correlation coefficient r^2: ...").
perftest_clock_failed() {
	local f
	for f in "$@"; do
		[ -f "$f" ] || continue
		grep -Eq 'Correlation coefficient r\^2: [-+0-9.eE]+ < 0\.9$' "$f" &&
			grep -Fxq "Can't produce a report" "$f" && return 0
	done
	return 1
}

# clock_retry NAME CMD...: run CMD (a server/client run that leaves its outputs in
# $TMP/NAME.server and $TMP/NAME.client and returns non-zero if it failed); when it
# failed with perftest's self-check message, run it again, at most
# PERFTEST_CLOCK_RETRIES times, saying so loudly. Returns CMD's last status.
clock_retry() {
	local name=$1 i rc
	shift
	for ((i = 1; ; i++)); do
		rc=0
		"$@" || rc=$?
		[ $rc -eq 0 ] && return 0
		perftest_clock_failed "$TMP/$name.server" "$TMP/$name.client" || return $rc
		if [ $i -gt $PERFTEST_CLOCK_RETRIES ]; then
			loud "*** $name: perftest's clock self-check failed on every one of" \
				"$i runs; giving up ***"
			return $rc
		fi
		local why
		why=$(grep -ho 'Correlation coefficient.*' "$TMP/$name.server" "$TMP/$name.client" | head -1)
		loud "*** RETRY $i/$PERFTEST_CLOCK_RETRIES: $name: perftest's own cycle-counter" \
			"self-check failed ($why, \"Can't produce a report\"): a timing artefact of" \
			"a loaded machine, not a swverbs result; running it again ***"
	done
}

# bounded TIMEOUT OUT CMD...: run CMD under swverbs-run, output to OUT, as timeout(1)
# would (124 when it had to be killed) -- but a process still running at TIMEOUT first
# gets its swverbs state (swverbs-stat) and every thread's stack (gdb, when installed)
# appended to OUT, so that a hang seen once in CI says where it hung.
bounded() {
	local to=$1 out=$2
	shift 2
	# A background job of a shell without job control starts with SIGINT and SIGQUIT
	# ignored; timeout(1) gave the program the defaults, and so does this.
	env --default-signal=INT,QUIT "$SWVERBS_RUN" "$@" >"$out" 2>&1 &
	local pid=$! rc=0
	(
		s=
		trap '[ -n "$s" ] && kill $s 2>/dev/null; exit 0' TERM
		sleep "$to" &
		s=$!
		wait $s
		kill -0 $pid 2>/dev/null || exit 0
		touch "$out.hung"
		{
			echo "*** still running after ${to} s (pid $pid): swverbs state and stacks ***"
			"$(dirname "$SWVERBS_RUN")/swverbs-stat" -p $pid 2>&1
			if command -v gdb >/dev/null; then
				timeout 60 gdb -p $pid -batch -ex 'thread apply all bt' 2>&1 |
					grep -Ev '^(\[New LWP|warning:)'
			else
				echo "(no gdb here: no stacks)"
			fi
		} >>"$out.diag"
		kill $pid 2>/dev/null
		sleep 5 & # in the background: the TERM of a caller whose wait ended ends it
		s=$!
		wait $s
		kill -9 $pid 2>/dev/null
	) >/dev/null 2>&1 &
	local wd=$! old
	# A test killed meanwhile takes CMD with it, as timeout(1) passes the signal on.
	old=$(trap -p TERM)
	trap 'kill $pid $wd 2>/dev/null; exit 143' TERM
	wait $pid || rc=$?
	trap - TERM
	[ -n "$old" ] && eval "$old"
	kill $wd 2>/dev/null
	wait $wd 2>/dev/null
	if [ -e "$out.hung" ]; then
		cat "$out.diag" >>"$out" 2>/dev/null
		rm -f "$out.hung" "$out.diag"
		return 124
	fi
	return $rc
}

# pair_once NAME TIMEOUT SERVER_CMD... -- CLIENT_CMD...: one run of pair; 0 if both
# exited 0. Leaves the commands and exit codes in PAIR_SRV/PAIR_CLI/PAIR_SRC/PAIR_CRC.
pair_once() {
	local name=$1 to=$2
	shift 2
	local srv=() cli=()
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	bounded "$to" "$TMP/$name.server" "${srv[@]}" &
	local spid=$!
	# PAIR_PORT=N pair ...: start the client once the server listens on N (never after a
	# fixed sleep: a server starting on a loaded machine can take longer than any).
	[ -n "${PAIR_PORT:-}" ] || fail "$name: pair needs PAIR_PORT, the server's port"
	wait_port "$PAIR_PORT" 30 || true
	local crc=0 src=0
	bounded "$to" "$TMP/$name.client" "${cli[@]}" || crc=$?
	wait $spid || src=$?
	PAIR_SRV="${srv[*]}" PAIR_CLI="${cli[*]}" PAIR_SRC=$src PAIR_CRC=$crc
	[ $crc -eq 0 ] && [ $src -eq 0 ]
}

# pair NAME TIMEOUT SERVER_CMD... -- CLIENT_CMD...: run a server and a client under
# swverbs-run, both must exit 0 (a run that failed only by perftest's clock self-check
# is retried: clock_retry). Output in $TMP/NAME.server / $TMP/NAME.client.
pair() {
	local name=$1
	if ! clock_retry "$name" pair_once "$@"; then
		echo "---- $name server (rc $PAIR_SRC): $PAIR_SRV"; cat "$TMP/$name.server"
		echo "---- $name client (rc $PAIR_CRC): $PAIR_CLI"; cat "$TMP/$name.client"
		fail "$name"
	fi
	echo "ok: $name"
}
