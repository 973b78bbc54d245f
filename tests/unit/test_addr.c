/* Addressing: GUID/LID/GID mappings, their round trips and edge cases. */
#include <arpa/inet.h>
#include <net/if.h>
#include <string.h>

#include "check.h"
#include "net/addr.h"

static struct in_addr ip4(const char *s)
{
	struct in_addr a;
	CHECK(inet_pton(AF_INET, s, &a) == 1);
	return a;
}

static struct swv_dev_config dev(const char *ip, uint8_t prefix, enum swv_link_layer link)
{
	struct swv_dev_config d;
	memset(&d, 0, sizeof(d));
	strcpy(d.name, "t");
	d.addr = ip4(ip);
	d.prefix_len = prefix;
	d.link = link;
	d.mtu_bytes = 1024;
	return d;
}

static void test_qpn(void)
{
	uint32_t q = swv_qpn_make(0xbeef, 0x42);
	CHECK_EQ(q, 0xbeef42);
	CHECK_EQ(swv_qpn_port(q), 0xbeef);
	CHECK_EQ(swv_qpn_slot(q), 0x42);
	/* QPNs are 24 bits: the largest port and slot still fit. */
	q = swv_qpn_make(0xffff, 0xff);
	CHECK_EQ(q, 0xffffff);
	CHECK_EQ(swv_qpn_port(q), 0xffff);
	CHECK_EQ(swv_qpn_slot(q), 0xff);
}

static void test_netmask(void)
{
	CHECK_EQ(swv_netmask(0), 0);
	CHECK_EQ(swv_netmask(8), 0xff000000u);
	CHECK_EQ(swv_netmask(24), 0xffffff00u);
	CHECK_EQ(swv_netmask(31), 0xfffffffeu);
	CHECK_EQ(swv_netmask(32), 0xffffffffu);
}

static void test_guid(void)
{
	CHECK_EQ(swv_guid_from_ip(ip4("10.1.2.3")), 0x025357fe0a010203ull);
	CHECK_EQ(swv_guid_from_ip(ip4("127.0.0.1")), 0x025357fe7f000001ull);
	/* Locally administered (bit 1 of the first byte), not multicast (bit 0). */
	uint64_t g = swv_guid_from_ip(ip4("192.168.0.1"));
	CHECK((g >> 56) & 0x02);
	CHECK(!((g >> 56) & 0x01));
	/* Different addresses, different GUIDs. */
	CHECK(swv_guid_from_ip(ip4("10.0.0.1")) != swv_guid_from_ip(ip4("10.0.0.2")));
}

static void test_lid(void)
{
	struct swv_dev_config d = dev("192.168.5.7", 24, SWV_LINK_IB);
	struct in_addr ip;

	CHECK_EQ(swv_lid_from_ip(&d, d.addr), 7);
	CHECK(swv_ip_from_lid(&d, 7, &ip));
	CHECK_EQ(ip.s_addr, d.addr.s_addr);
	CHECK(swv_ip_from_lid(&d, 9, &ip));
	CHECK_EQ(ip.s_addr, ip4("192.168.5.9").s_addr);
	/* Reserved/permissive LIDs, LIDs outside a /24, the broadcast host. */
	CHECK(!swv_ip_from_lid(&d, 0, &ip));
	CHECK(!swv_ip_from_lid(&d, 0xffff, &ip));
	CHECK(!swv_ip_from_lid(&d, 256, &ip));
	CHECK(!swv_ip_from_lid(&d, 255, &ip));
	CHECK(swv_ip_from_lid(&d, 254, &ip));
	CHECK(!swv_ip_from_lid(NULL, 1, &ip));
	CHECK(!swv_ip_from_lid(&d, 1, NULL));
	CHECK_EQ(swv_lid_from_ip(NULL, d.addr), 0);

	/* /16: every LID but 0 and 0xffff (broadcast) is a host. */
	d = dev("172.16.3.4", 16, SWV_LINK_IB);
	CHECK_EQ(swv_lid_from_ip(&d, d.addr), 0x0304);
	CHECK(swv_ip_from_lid(&d, 0xfffe, &ip));
	CHECK_EQ(ip.s_addr, ip4("172.16.255.254").s_addr);
	for (uint32_t lid = 1; lid < 0xffff; lid += 97) {
		CHECK(swv_ip_from_lid(&d, (uint16_t)lid, &ip));
		CHECK_EQ(swv_lid_from_ip(&d, ip), lid);
	}

	/* Loopback /8, the default device: 127.0.0.1 has LID 1 and LID 1 is 127.0.0.1. */
	d = dev("127.0.0.1", 8, SWV_LINK_IB);
	CHECK_EQ(swv_lid_from_ip(&d, d.addr), 1);
	CHECK(swv_ip_from_lid(&d, 1, &ip));
	CHECK_EQ(ip.s_addr, ip4("127.0.0.1").s_addr);
	CHECK(swv_ip_from_lid(&d, 0x0203, &ip));
	CHECK_EQ(ip.s_addr, ip4("127.0.2.3").s_addr);

	/* Wider than /16: LIDs alias; the upper host bits come from our own address. */
	d = dev("10.7.0.5", 8, SWV_LINK_IB);
	CHECK_EQ(swv_lid_from_ip(&d, d.addr), 5);
	CHECK_EQ(swv_lid_from_ip(&d, ip4("10.9.0.5")), 5); /* alias */
	CHECK(swv_ip_from_lid(&d, 0x0102, &ip));
	CHECK_EQ(ip.s_addr, ip4("10.7.1.2").s_addr);

	/* /31 has no broadcast (RFC 3021); /32 has no host part at all. */
	d = dev("10.0.0.0", 31, SWV_LINK_IB);
	CHECK(swv_ip_from_lid(&d, 1, &ip));
	CHECK_EQ(ip.s_addr, ip4("10.0.0.1").s_addr);
	CHECK(!swv_ip_from_lid(&d, 2, &ip));
	d = dev("10.0.0.9", 32, SWV_LINK_IB);
	CHECK_EQ(swv_lid_from_ip(&d, d.addr), 0);
	CHECK(!swv_ip_from_lid(&d, 1, &ip));
}

static void test_gid(void)
{
	uint8_t gid[16];
	struct in_addr ip;
	struct swv_dev_config d = dev("10.1.2.3", 24, SWV_LINK_IB);
	static const uint8_t want_ib[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0,
					    0x02, 0x53, 0x57, 0xfe, 10, 1, 2, 3};
	static const uint8_t want_roce[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3};

	swv_gid_of_device(&d, gid);
	CHECK(!memcmp(gid, want_ib, 16));
	CHECK(swv_ip_from_gid(gid, &ip));
	CHECK_EQ(ip.s_addr, d.addr.s_addr);

	d.link = SWV_LINK_ETH;
	swv_gid_of_device(&d, gid);
	CHECK(!memcmp(gid, want_roce, 16));
	CHECK(swv_ip_from_gid(gid, &ip));
	CHECK_EQ(ip.s_addr, d.addr.s_addr);

	/* Round trip over many addresses, both presentations. */
	for (uint32_t a = 1; a < 0xffffffffu - 0x01010101u; a += 0x01010101u) {
		d.addr.s_addr = htonl(a);
		for (int l = 0; l < 2; l++) {
			d.link = l ? SWV_LINK_ETH : SWV_LINK_IB;
			swv_gid_of_device(&d, gid);
			CHECK(swv_ip_from_gid(gid, &ip));
			CHECK_EQ(ntohl(ip.s_addr), a);
		}
	}

	/* GIDs that are not ours: another vendor's GUID, a non-link-local prefix, a
	 * real IPv6 address, the zero GID. */
	uint8_t g[16];
	memcpy(g, want_ib, 16);
	g[8] = 0x00; /* a vendor OUI instead of our prefix */
	CHECK(!swv_ip_from_gid(g, &ip));
	memcpy(g, want_ib, 16);
	g[7] = 1; /* subnet prefix other than fe80::/64 */
	CHECK(!swv_ip_from_gid(g, &ip));
	memcpy(g, want_roce, 16);
	g[9] = 1; /* not IPv4-mapped */
	CHECK(!swv_ip_from_gid(g, &ip));
	memset(g, 0, 16);
	CHECK(!swv_ip_from_gid(g, &ip));
	CHECK(!swv_ip_from_gid(NULL, &ip));
	CHECK(!swv_ip_from_gid(want_ib, NULL));

	/* NULL device: an all-zero GID, no crash. */
	memset(gid, 0xaa, 16);
	swv_gid_of_device(NULL, gid);
	memset(g, 0, 16);
	CHECK(!memcmp(gid, g, 16));
}

static void test_mtu(void)
{
	CHECK_EQ(swv_ib_mtu_for_ifmtu(65536), 4096);
	CHECK_EQ(swv_ib_mtu_for_ifmtu(9000), 4096);
	CHECK_EQ(swv_ib_mtu_for_ifmtu(4176), 4096);
	CHECK_EQ(swv_ib_mtu_for_ifmtu(4175), 2048);
	CHECK_EQ(swv_ib_mtu_for_ifmtu(1500), 1024); /* rxe on Ethernet */
	CHECK_EQ(swv_ib_mtu_for_ifmtu(1400), 1024);
	CHECK_EQ(swv_ib_mtu_for_ifmtu(1103), 512);
	CHECK_EQ(swv_ib_mtu_for_ifmtu(1104), 1024);
	CHECK_EQ(swv_ib_mtu_for_ifmtu(576), 256);
	CHECK_EQ(swv_ib_mtu_for_ifmtu(100), 256);
	CHECK_EQ(swv_ib_mtu_for_ifmtu(0), 1024);

	/* Loopback exists everywhere and has a large MTU. */
	struct in_addr lo = ip4("127.0.0.1");
	uint32_t m = swv_ifmtu_of_ip(lo);
	CHECK(m >= 1500);
	CHECK_EQ(swv_ib_mtu_for_ifmtu(m), m >= 4176 ? 4096 : swv_ib_mtu_for_ifmtu(m));

	char ifname[IFNAMSIZ];
	uint8_t prefix = 0;
	uint32_t ifmtu = 0;
	CHECK_OK(swv_local_if_of_ip(lo, ifname, &prefix, &ifmtu));
	CHECK_EQ(prefix, 8);
	CHECK_EQ(ifmtu, m);
	CHECK(ifname[0]);
	/* Another address of the loopback subnet is local too, on the same interface. */
	char ifname2[IFNAMSIZ];
	CHECK_OK(swv_local_if_of_ip(ip4("127.3.2.1"), ifname2, NULL, NULL));
	CHECK(!strcmp(ifname, ifname2));
	/* TEST-NET-3 is documentation-only: not local (unless someone assigned it). */
	struct in_addr far = ip4("203.0.113.77");
	CHECK_EQ(swv_local_if_of_ip(far, NULL, NULL, NULL), ENOENT);
	CHECK_EQ(swv_ifmtu_of_ip(far), 0);
}

int main(void)
{
	test_qpn();
	test_netmask();
	test_guid();
	test_lid();
	test_gid();
	test_mtu();
	printf("test_addr: ok\n");
	return 0;
}
