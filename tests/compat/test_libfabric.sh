#!/usr/bin/env bash
# libfabric 1.17's verbs provider over swverbs, unmodified Debian binaries (libfabric-bin):
#   fi_info -p verbs and -p "verbs;ofi_rxm" list swv0 (MSG and DGRAM domains, the RxM RDM
#   endpoint over them); fi_pingpong over verbs MSG (rdma_cm RC), "verbs;ofi_rxm" RDM and
#   verbs DGRAM (UD), every size of its default sweep, with its data checks (-c).
# The verbs provider connects MSG endpoints through librdmacm (swverbs' own under
# swverbs-run: rdma_getaddrinfo from sockaddrs, rdma_create_ep, rdma_migrate_id to its
# EQ) and finds devices through ibv_get_device_list and the sysfs view.
. "$(dirname "$0")/lib.sh"
need fi_info libfabric-bin
need fi_pingpong libfabric-bin
export FI_LOG_LEVEL=warn

# fi_info_has NAME PROVIDER TYPE DOMAIN: fi_info -p PROVIDER lists DOMAIN with an endpoint
# of TYPE (fi_info prints provider/fabric/domain/version/type blocks).
fi_info_has() {
	local name=$1 prov=$2 type=$3 dom=$4
	timeout 60 "$SWVERBS_RUN" fi_info -p "$prov" >"$TMP/$name" 2>&1 || {
		cat "$TMP/$name"
		fail "$name: fi_info -p $prov"
	}
	awk -v p="$prov" -v t="$type" -v d="$dom" '
		/^provider:/ { cp = $2 } /^ *domain:/ { cd = $2 }
		/^ *type:/ && cp == p && cd == d && $2 == t { found = 1 }
		END { exit !found }' "$TMP/$name" || {
		cat "$TMP/$name"
		fail "$name: no $type endpoint of $prov on domain $dom"
	}
	echo "ok: $name: $prov $type on $dom"
}
fi_info_has fi_info.verbs.msg verbs FI_EP_MSG swv0
fi_info_has fi_info.verbs.dgram verbs FI_EP_DGRAM swv0-dgram
fi_info_has fi_info.rxm.rdm "verbs;ofi_rxm" FI_EP_RDM swv0

# pingpong NAME PROVIDER EP LAST_SIZE: server and client (the client starts once the
# server's control socket listens); both exit 0 and the client's table reaches LAST_SIZE.
pingpong() {
	local name=$1 prov=$2 ep=$3 last=$4 p
	p=$(free_port)
	if ! PAIR_PORT=$p pair_once "$name" 120 \
		fi_pingpong -p "$prov" -e "$ep" -c -I 100 -B "$p" -- \
		fi_pingpong -p "$prov" -e "$ep" -c -I 100 -P "$p" 127.0.0.1; then
		echo "---- $name server (rc $PAIR_SRC): $PAIR_SRV"; cat "$TMP/$name.server"
		echo "---- $name client (rc $PAIR_CRC): $PAIR_CLI"; cat "$TMP/$name.client"
		fail "$name"
	fi
	local row
	row=$(awk -v s="$last" '$1 == s { print; exit }' "$TMP/$name.client")
	[ -n "$row" ] || {
		cat "$TMP/$name.client"
		fail "$name: no $last row"
	}
	echo "ok: $name: $(grep -m1 '^bytes' "$TMP/$name.client" | tr -s ' ')"
	echo "ok: $name: $row" | tr -s ' '
}
pingpong fi_pingpong.verbs.msg verbs msg 1m
pingpong fi_pingpong.rxm.rdm "verbs;ofi_rxm" rdm 1m
# A UD message fits one MTU: the default sweep stops at 4k.
pingpong fi_pingpong.verbs.dgram verbs dgram 4k
exit 0
