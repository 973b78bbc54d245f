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

# free_port: a TCP port nobody listens on, for the clients' out-of-band exchange.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 20000))
		ss -ltn 2>/dev/null | grep -q ":$p " || { echo $p; return; }
	done
}

# wait_port PORT [SECONDS]: wait until something listens on TCP PORT (a server's
# out-of-band socket), so a client does not race a server that is still starting on a
# loaded machine. Returns 1 if nothing listens in time (default 30 s).
wait_port() {
	local i
	for ((i = 0; i < ${2:-30} * 10; i++)); do
		ss -ltn 2>/dev/null | grep -q ":$1 " && return 0
		sleep 0.1
	done
	return 1
}

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# pair NAME TIMEOUT SERVER_CMD... -- CLIENT_CMD...: run a server and a client under
# swverbs-run, both must exit 0. Output in $TMP/NAME.server / $TMP/NAME.client.
pair() {
	local name=$1 to=$2
	shift 2
	local srv=() cli=()
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	timeout "$to" "$SWVERBS_RUN" "${srv[@]}" >"$TMP/$name.server" 2>&1 &
	local spid=$!
	# PAIR_PORT=N pair ...: start the client once the server listens on N.
	if [ -n "${PAIR_PORT:-}" ]; then
		wait_port "$PAIR_PORT" 30 || true
	else
		sleep 0.3
	fi
	local crc=0 src=0
	timeout "$to" "$SWVERBS_RUN" "${cli[@]}" >"$TMP/$name.client" 2>&1 || crc=$?
	wait $spid || src=$?
	if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
		echo "---- $name server (rc $src): ${srv[*]}"; cat "$TMP/$name.server"
		echo "---- $name client (rc $crc): ${cli[*]}"; cat "$TMP/$name.client"
		fail "$name"
	fi
	echo "ok: $name"
}
