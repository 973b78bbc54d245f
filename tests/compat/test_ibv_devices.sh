#!/usr/bin/env bash
# ibv_devices and ibv_devinfo -v (ibverbs-utils) see the default swverbs device.
. "$(dirname "$0")/lib.sh"
need ibv_devices ibverbs-utils
out=$("$SWVERBS_RUN" ibv_devices) || fail "ibv_devices exited $?"
echo "$out"
echo "$out" | grep -Eq '^\s+swv0\s+[0-9a-f]{16}$' || fail "ibv_devices does not list swv0 with its GUID"

out=$("$SWVERBS_RUN" ibv_devinfo -v) || fail "ibv_devinfo -v exited $?"
echo "$out"
for want in 'hca_id:\s+swv0' 'transport:\s+InfiniBand' 'vendor_id:\s+0xffffff' \
	'state:\s+PORT_ACTIVE' 'active_mtu:\s+4096' 'link_layer:\s+InfiniBand' \
	'port_lid:\s+1$' 'GID\[\s*0\]:\s+fe80:0000:0000:0000:0253:57fe:7f00:0001'; do
	echo "$out" | grep -Eq "$want" || fail "ibv_devinfo -v lacks /$want/"
done

# A RoCE-style device presents an Ethernet link layer and an IPv4-mapped RoCEv2 GID.
out=$(SWVERBS_DEVICES="swr0=127.0.0.1/8,roce" "$SWVERBS_RUN" ibv_devinfo -v) || fail "roce devinfo"
echo "$out" | grep -Eq 'link_layer:\s+Ethernet' || fail "roce device is not Ethernet"
echo "$out" | grep -Eq 'GID\[\s*0\]:\s+::ffff:127.0.0.1, RoCE v2' || fail "no RoCEv2 GID"
echo "ok"
