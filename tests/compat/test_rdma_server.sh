#!/usr/bin/env bash
# rdma_server / rdma_client (rdmacm-utils): the synchronous endpoint API
# (rdma_getaddrinfo, rdma_create_ep, rdma_get_request, rdma_accept without a channel,
# the rdma_verbs.h helpers) through swverbs' librdmacm.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cm_lib.sh"
need rdma_server rdmacm-utils
for i in 1 2; do
	p=$(free_cm_port)
	cm_pair "rdma_server $i" 60 "$p" rdma_server -p "$p" -- rdma_client -s 127.0.0.1 -p "$p"
	grep -q '^rdma_server: end 0$' "$TMP/rdma_server $i.server" || fail "server status"
	grep -q '^rdma_client: end 0$' "$TMP/rdma_server $i.client" || fail "client status"
done
