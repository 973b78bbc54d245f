/*
 * Addressing: GUID, LID and GID are all derived from the device's IPv4 address so a
 * peer can route with nothing more than what verbs programs exchange out of band.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/addr.h"

uint64_t swv_guid_from_ip(struct in_addr ip)
{
	return ((uint64_t)SWV_GUID_PREFIX << 32) | ntohl(ip.s_addr);
}

uint16_t swv_lid_from_ip(const struct swv_dev_config *dev, struct in_addr ip)
{
	if (!dev)
		return 0;
	/* Host part, truncated to 16 bits: subnets wider than /16 alias. */
	return (uint16_t)(ntohl(ip.s_addr) & ~swv_netmask(dev->prefix_len) & 0xffffu);
}

bool swv_ip_from_lid(const struct swv_dev_config *dev, uint16_t lid, struct in_addr *ip)
{
	if (!dev || !ip || dev->prefix_len > 32)
		return false;
	/* 0 is the reserved LID, 0xffff the permissive LID: neither names a port. */
	if (lid == 0 || lid == 0xffff)
		return false;
	uint32_t mask = swv_netmask(dev->prefix_len);
	uint32_t host_mask = ~mask;
	/* The LID must fit in the host part of the device's subnet. */
	if ((uint32_t)lid & ~host_mask)
		return false;
	/* All host bits set is the subnet's directed broadcast, not a host (/31 and /32
	 * have no broadcast address; for wider than /16 the LID cannot cover every host
	 * bit, and 0xffff was rejected above). */
	if (dev->prefix_len <= 30 && dev->prefix_len >= 16 && (uint32_t)lid == host_mask)
		return false;
	/* Bits above the low 16 come from our own address: for subnets up to /16 that is
	 * the subnet number; wider subnets can only reach hosts sharing our upper bits. */
	uint32_t self = ntohl(dev->addr.s_addr);
	uint32_t base = dev->prefix_len >= 16 ? self & mask : self & 0xffff0000u;
	ip->s_addr = htonl(base | lid);
	return true;
}

void swv_gid_of_device(const struct swv_dev_config *dev, uint8_t gid[16])
{
	if (!gid)
		return;
	memset(gid, 0, 16);
	if (!dev)
		return;
	const uint8_t *a = (const uint8_t *)&dev->addr.s_addr; /* network order a.b.c.d */
	if (dev->link == SWV_LINK_ETH) {
		/* RoCEv2 IPv4-mapped GID, ::ffff:a.b.c.d, as rxe reports it. */
		gid[10] = 0xff;
		gid[11] = 0xff;
		memcpy(gid + 12, a, 4);
		return;
	}
	/* Link-local subnet prefix fe80::/64, then the port GUID in network order. */
	uint64_t guid = swv_guid_from_ip(dev->addr);
	gid[0] = 0xfe;
	gid[1] = 0x80;
	for (int i = 0; i < 8; i++)
		gid[8 + i] = (uint8_t)(guid >> (56 - 8 * i));
}

bool swv_ip_from_gid(const uint8_t gid[16], struct in_addr *ip)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const uint8_t ib[12] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x53, 0x57, 0xfe};

	if (!gid || !ip)
		return false;
	if (memcmp(gid, mapped, sizeof(mapped)) && memcmp(gid, ib, sizeof(ib)))
		return false;
	memcpy(&ip->s_addr, gid + 12, 4);
	return true;
}

static bool gid_is_v4mapped(const uint8_t gid[16])
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(gid, mapped, sizeof(mapped)) == 0;
}

bool swv_gid_is_mcast(const uint8_t gid[16])
{
	if (!gid)
		return false;
	if (gid_is_v4mapped(gid))
		return (gid[12] & 0xf0) == 0xe0; /* 224.0.0.0/4 */
	return gid[0] == 0xff;
}

struct in_addr swv_mcast_group_of_gid(const uint8_t gid[16])
{
	struct in_addr a;
	uint8_t b[4] = {239, gid[13], gid[14], gid[15]};

	if (gid_is_v4mapped(gid))
		b[0] = gid[12];
	memcpy(&a.s_addr, b, 4);
	return a;
}

static uint8_t prefix_of_mask(uint32_t mask)
{
	uint8_t n = 0;
	while (n < 32 && (mask & (0x80000000u >> n)))
		n++;
	return n;
}

static uint32_t ifmtu_by_name(const char *ifname)
{
	struct ifreq ifr;
	uint32_t mtu = 0;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return 0;
	memset(&ifr, 0, sizeof(ifr));
	strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
	if (ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0)
		mtu = (uint32_t)ifr.ifr_mtu;
	close(fd);
	return mtu;
}

int swv_local_if_of_ip(struct in_addr ip, char *ifname, uint8_t *prefix_len, uint32_t *ifmtu)
{
	struct ifaddrs *ifs, *i, *found = NULL;
	uint32_t want = ntohl(ip.s_addr);
	int best = 0;

	if (getifaddrs(&ifs))
		return errno ? errno : EIO;
	/* An interface that holds ip beats a loopback subnet that covers it, and within
	 * each an interface that is up beats one that is down. A down interface still
	 * counts: its addresses stay assigned, and the device's port reads DOWN until it
	 * comes up (net/netdev.h), as an rxe port over a down netdev does. */
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		uint32_t have = ntohl(((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
		int score = 0;
		if (have == want) {
			score = 3;
		} else if (i->ifa_netmask && (i->ifa_flags & IFF_LOOPBACK)) {
			/* Every address of a loopback subnet is local (the kernel routes
			 * all of 127/8 to lo), which lets one host run several devices
			 * with distinct LIDs. */
			uint32_t mask = ntohl(
				((const struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr);
			if ((have & mask) == (want & mask))
				score = 1;
		}
		if (score && (i->ifa_flags & IFF_UP))
			score++;
		if (score > best) {
			best = score;
			found = i;
		}
	}
	if (!found) {
		freeifaddrs(ifs);
		return ENOENT;
	}
	if (prefix_len) {
		*prefix_len = 32;
		if (found->ifa_netmask)
			*prefix_len = prefix_of_mask(ntohl(
				((const struct sockaddr_in *)found->ifa_netmask)->sin_addr.s_addr));
	}
	if (ifname) {
		memset(ifname, 0, IFNAMSIZ);
		strncpy(ifname, found->ifa_name, IFNAMSIZ - 1);
	}
	if (ifmtu)
		*ifmtu = ifmtu_by_name(found->ifa_name);
	freeifaddrs(ifs);
	return 0;
}

uint32_t swv_ifmtu_of_ip(struct in_addr ip)
{
	uint32_t mtu = 0;

	if (swv_local_if_of_ip(ip, NULL, NULL, &mtu))
		return 0;
	return mtu;
}

uint32_t swv_ib_mtu_for_ifmtu(uint32_t ifmtu)
{
	/* 20 IP + 8 UDP + 12 BTH + up to 28 extension headers + 4 ICRC, rounded up as
	 * rxe does (it subtracts 80 bytes before picking the IB MTU). */
	const uint32_t overhead = 80;

	if (ifmtu == 0)
		return 1024;
	if (ifmtu < overhead + 256)
		return 256;
	uint32_t room = ifmtu - overhead;
	for (uint32_t m = 4096; m > 256; m >>= 1)
		if (room >= m)
			return m;
	return 256;
}
