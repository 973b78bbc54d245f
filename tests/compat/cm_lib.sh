# Helpers for the rdma_cm compat tests (sourced after lib.sh). A listener of swverbs'
# librdmacm on rdma_cm port P binds UDP port P on its address (docs/wire.md).

# free_cm_port: a port for a CM listener (UDP) and its program's own TCP use.
free_cm_port() {
	unused_port
}

# wait_cm_port PORT [SECONDS [NETNS]]: wait until a CM listener has bound UDP PORT.
wait_cm_port() {
	wait_listener -lun "$@"
}

# cm_pair_once NAME TIMEOUT PORT SERVER_CMD... -- CLIENT_CMD...: one run, the client
# starting once the server's CM listener is bound; 0 if both exited 0.
cm_pair_once() {
	local name=$1 to=$2 port=$3
	shift 3
	local srv=() cli=()
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	local crc=0 src=0
	bounded "$to" "$TMP/$name.server" "${srv[@]}" &
	local spid=$!
	wait_cm_port "$port" 30 || echo "*** server never listened on UDP $port ***" >>"$TMP/$name.server"
	bounded "$to" "$TMP/$name.client" "${cli[@]}" || crc=$?
	wait $spid || src=$?
	PAIR_SRV="${srv[*]}" PAIR_CLI="${cli[*]}" PAIR_SRC=$src PAIR_CRC=$crc
	[ $crc -eq 0 ] && [ $src -eq 0 ]
}

# cm_pair NAME TIMEOUT PORT SERVER_CMD... -- CLIENT_CMD...: both must exit 0 (a run
# failed only by perftest's clock self-check is retried, as pair does).
cm_pair() {
	local name=$1
	if ! clock_retry "$name" cm_pair_once "$@"; then
		echo "---- $name server (rc $PAIR_SRC): $PAIR_SRV"; cat "$TMP/$name.server"
		echo "---- $name client (rc $PAIR_CRC): $PAIR_CLI"; cat "$TMP/$name.client"
		fail "$name"
	fi
	echo "ok: $name"
}
