/*
 * Addressing: everything routable is derived from what verbs programs exchange
 * (LID or GID, QPN). Owner: net. Pure functions, thread-safe.
 *
 *  - QPN = UDP port << 8 | slot: the QPN names the UDP endpoint of its context.
 *  - IB port: LID = host part of the device IP (low 16 bits); GUID embeds the IPv4
 *    address; GID[0] = fe80::<guid>.
 *  - RoCE port: GID[0] = ::ffff:a.b.c.d (RoCEv2).
 */
#ifndef SWV_NET_ADDR_H
#define SWV_NET_ADDR_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "net/config.h"

#define SWV_QPN_SLOT_BITS 8
#define SWV_QPN_SLOTS     (1u << SWV_QPN_SLOT_BITS)

static inline uint32_t swv_qpn_make(uint16_t udp_port, uint32_t slot)
{
	return ((uint32_t)udp_port << SWV_QPN_SLOT_BITS) | slot;
}
static inline uint16_t swv_qpn_port(uint32_t qpn)
{
	return (uint16_t)(qpn >> SWV_QPN_SLOT_BITS);
}
static inline uint32_t swv_qpn_slot(uint32_t qpn)
{
	return qpn & (SWV_QPN_SLOTS - 1);
}

/* 64-bit node/port GUID in host order: locally administered prefix + IPv4. */
uint64_t swv_guid_from_ip(struct in_addr ip);
uint16_t swv_lid_from_ip(const struct swv_dev_config *dev, struct in_addr ip);
/* Returns false when the LID is 0 or out of the device's subnet. */
bool swv_ip_from_lid(const struct swv_dev_config *dev, uint16_t lid, struct in_addr *ip);
/* The device's GID[0] in raw network-order bytes. */
void swv_gid_of_device(const struct swv_dev_config *dev, uint8_t gid[16]);
/* Accepts fe80::<swverbs guid> and ::ffff:a.b.c.d. Returns false for anything else. */
bool swv_ip_from_gid(const uint8_t gid[16], struct in_addr *ip);
/*
 * UD multicast (docs/wire.md, "UD multicast"). A multicast GID is an IPv6 multicast
 * address (ff00::/8) or an IPv4-mapped multicast address (::ffff:224.0.0.0/100), as the
 * kernel's rdma_is_multicast_addr says. Its IP group: the mapped IPv4 address itself,
 * else 239.x.y.z from the GID's last three bytes. Datagrams for the group go to UDP
 * port 65535, which QPN 0xffffff names like any QPN names its port.
 */
#define SWV_MCAST_QPN  0xffffffu
#define SWV_MCAST_PORT 0xffffu
bool swv_gid_is_mcast(const uint8_t gid[16]);
struct in_addr swv_mcast_group_of_gid(const uint8_t gid[16]);

/* Interface MTU of the interface that owns ip (0 if unknown). */
uint32_t swv_ifmtu_of_ip(struct in_addr ip);

/*
 * Additions (net):
 * The GUID prefix: locally administered (0x02 bit), "SW", 0xfe. Claims no vendor OUI.
 */
#define SWV_GUID_PREFIX 0x025357feu

/* Netmask (host order) of a prefix length 0..32. */
static inline uint32_t swv_netmask(uint8_t prefix_len)
{
	return prefix_len == 0 ? 0 : prefix_len >= 32 ? 0xffffffffu : ~0u << (32 - prefix_len);
}

/* Find the local interface that owns ip: either ip is assigned to it, or ip lies in
 * the subnet of a loopback interface (127.0.0.2 is as local as 127.0.0.1); one that is
 * up if there is a choice, but a down interface counts too. On success
 * fills the interface name (IFNAMSIZ bytes, may be NULL), its prefix length and MTU
 * (0 if SIOCGIFMTU fails; either may be NULL). Returns 0, ENOENT if ip is not local,
 * or another positive errno. */
int swv_local_if_of_ip(struct in_addr ip, char *ifname, uint8_t *prefix_len, uint32_t *ifmtu);

/* The IB MTU (256..4096) that fits an interface MTU, like rxe: the interface MTU less
 * 80 bytes of IP/UDP/BTH/ICRC overhead, rounded down to an IB MTU; 1024 if unknown. */
uint32_t swv_ib_mtu_for_ifmtu(uint32_t ifmtu);

#endif
