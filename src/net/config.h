/*
 * Device configuration: which swverbs devices exist and how each presents itself.
 * Owner: net. Read once per process (first ibv_get_device_list) and immutable after.
 *
 * Sources, in order: SWVERBS_CONFIG=<file> (one device spec per line, '#' comments),
 * then SWVERBS_DEVICES="<spec>;<spec>...". With neither, one device "swv0" on
 * 127.0.0.1/8, IB link layer. Spec syntax (see docs/configuration.md):
 *   name=ipv4[/prefix][,ib|roce][,mtu=256..4096][,max_cntrs=N][,cntr_bits=K][,pkeys=K[:K...]]
 *       [,auth_key=<32 hex digits>|,auth_key_file=<path>]
 */
#ifndef SWV_NET_CONFIG_H
#define SWV_NET_CONFIG_H

#include <netinet/in.h>
#include <stdint.h>

#define SWV_MAX_DEVICES        16
#define SWV_DEFAULT_MAX_CNTRS  4096
#define SWV_MAX_PKEYS          16     /* longest P_Key table a port can be given */
#define SWV_PKEY_FULL_DEFAULT  0xffff /* the default partition, full member */
#define SWV_AUTH_SECRET_LEN    16     /* bytes of the auth_key secret (SipHash key) */

enum swv_link_layer {
	SWV_LINK_IB,  /* LID routed, IB link layer; GID = fe80::<port guid> */
	SWV_LINK_ETH, /* RoCEv2 style: Ethernet link layer, IPv4-mapped GID */
};

struct swv_dev_config {
	char name[64];
	struct in_addr addr;      /* local IPv4 the device binds its UDP sockets to */
	uint8_t prefix_len;       /* IP subnet = IB subnet; LID = host part (low 16 bits) */
	enum swv_link_layer link;
	uint32_t mtu_bytes;       /* active MTU: 256..4096, default from the interface MTU */
	uint32_t max_cntrs;       /* completion counters per context */
	uint64_t cntr_max_value;  /* 2^k - 1, default UINT64_MAX */
	/* The port's P_Key table (ibv_query_pkey): valid keys only (low 15 bits not 0),
	 * no duplicates. Default: one entry, 0xffff. */
	uint16_t pkeys[SWV_MAX_PKEYS];
	uint8_t npkeys;
	/* Authenticated wire mode (docs/wire.md): a 128-bit secret shared with the peers;
	 * every packet's trailer is then a MAC under a per-pair key derived from it. */
	bool auth;
	uint8_t auth_key[SWV_AUTH_SECRET_LEN];
};

struct swv_config {
	unsigned ndev;
	struct swv_dev_config dev[SWV_MAX_DEVICES];
	const char *source; /* "default", "SWVERBS_DEVICES" or the file path: for swverbs-info */
};

/* Parse the environment/file into *cfg. Returns 0 or a positive errno (EINVAL on a
 * malformed spec, with the reason logged). */
int swv_config_load(struct swv_config *cfg);

/* Parse one spec; exposed for unit tests. */
int swv_config_parse_spec(const char *spec, struct swv_dev_config *out);

#endif
