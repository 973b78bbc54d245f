#!/usr/bin/env bash
# ucmatose (rdmacm-utils): RC connections through swverbs' librdmacm, messages both
# ways, disconnect; one connection, then four at once (-c 4), then 4 KiB messages.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need ucmatose rdmacm-utils
for opts in "" "-c 4" "-c 4 -C 100 -S 4096"; do
	p=$(free_cm_port)
	cm_pair "ucmatose $opts" 120 "$p" ucmatose -p "$p" $opts -- ucmatose -s 127.0.0.1 -p "$p" $opts
	for side in server client; do
		grep -q '^return status 0$' "$TMP/ucmatose $opts.$side" || fail "ucmatose $opts: $side status"
	done
	grep -q 'data transfers complete' "$TMP/ucmatose $opts.client" || fail "ucmatose $opts: no data"
done
