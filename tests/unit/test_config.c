/* Device configuration: spec parsing, defaults, sources and every rejection. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "net/addr.h"
#include "net/config.h"

static struct in_addr ip4(const char *s)
{
	struct in_addr a;
	CHECK(inet_pton(AF_INET, s, &a) == 1);
	return a;
}

static void expect_bad(const char *spec)
{
	struct swv_dev_config d;
	memset(&d, 0x5a, sizeof(d));
	int rc = swv_config_parse_spec(spec, &d);
	if (rc != EINVAL) {
		fprintf(stderr, "spec \"%s\": expected EINVAL, got %d\n", spec, rc);
		exit(1);
	}
	/* A rejected spec leaves the output untouched. */
	struct swv_dev_config pattern;
	memset(&pattern, 0x5a, sizeof(pattern));
	CHECK(!memcmp(&d, &pattern, sizeof(d)));
}

static void test_parse_defaults(void)
{
	struct swv_dev_config d;

	CHECK_OK(swv_config_parse_spec("swv0=127.0.0.1", &d));
	CHECK(!strcmp(d.name, "swv0"));
	CHECK_EQ(d.addr.s_addr, htonl(INADDR_LOOPBACK));
	CHECK_EQ(d.prefix_len, 8); /* from lo's netmask */
	CHECK_EQ(d.link, SWV_LINK_IB);
	CHECK_EQ(d.mtu_bytes, 4096); /* loopback */
	CHECK_EQ(d.max_cntrs, SWV_DEFAULT_MAX_CNTRS);
	CHECK(d.cntr_max_value == UINT64_MAX);
	CHECK_EQ(d.npkeys, 1); /* one P_Key, the default full member */
	CHECK_EQ(d.pkeys[0], 0xffff);
}

static void test_parse_options(void)
{
	struct swv_dev_config d;

	CHECK_OK(swv_config_parse_spec("a=127.0.0.2/24,roce,mtu=1024,max_cntrs=7,cntr_bits=16", &d));
	CHECK(!strcmp(d.name, "a"));
	CHECK_EQ(d.addr.s_addr, ip4("127.0.0.2").s_addr);
	CHECK_EQ(d.prefix_len, 24);
	CHECK_EQ(d.link, SWV_LINK_ETH);
	CHECK_EQ(d.mtu_bytes, 1024);
	CHECK_EQ(d.max_cntrs, 7);
	CHECK(d.cntr_max_value == 0xffff);

	/* Order of options is free; spaces around tokens are tolerated. */
	CHECK_OK(swv_config_parse_spec("  b.x-1 = 127.0.0.3 , cntr_bits=1 , ib ", &d));
	CHECK(!strcmp(d.name, "b.x-1"));
	CHECK_EQ(d.link, SWV_LINK_IB);
	CHECK(d.cntr_max_value == 1);
	CHECK_OK(swv_config_parse_spec("c=127.0.0.1,cntr_bits=64", &d));
	CHECK(d.cntr_max_value == UINT64_MAX);
	CHECK_OK(swv_config_parse_spec("c=127.0.0.1,cntr_bits=63", &d));
	CHECK(d.cntr_max_value == UINT64_MAX >> 1);
	CHECK_OK(swv_config_parse_spec("c=127.0.0.1,max_cntrs=0", &d));
	CHECK_EQ(d.max_cntrs, 0);
	/* P_Key table: hexadecimal, "0x" optional, in the order given. */
	CHECK_OK(swv_config_parse_spec("c=127.0.0.1,pkeys=0xffff:7fff: 0x8001 :0001", &d));
	CHECK_EQ(d.npkeys, 4);
	CHECK_EQ(d.pkeys[0], 0xffff);
	CHECK_EQ(d.pkeys[1], 0x7fff);
	CHECK_EQ(d.pkeys[2], 0x8001);
	CHECK_EQ(d.pkeys[3], 0x0001);
	CHECK_OK(swv_config_parse_spec("c=127.0.0.1,pkeys=0x1234", &d));
	CHECK_EQ(d.npkeys, 1);
	CHECK_EQ(d.pkeys[0], 0x1234);
	CHECK_OK(swv_config_parse_spec("c=127.0.0.1,pkeys=1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10", &d));
	CHECK_EQ(d.npkeys, 16);
	static const unsigned mtus[] = {256, 512, 1024, 2048, 4096};
	for (unsigned i = 0; i < 5; i++) {
		char spec[64];
		snprintf(spec, sizeof(spec), "m=127.0.0.1,mtu=%u", mtus[i]);
		CHECK_OK(swv_config_parse_spec(spec, &d));
		CHECK_EQ(d.mtu_bytes, mtus[i]);
	}
	/* RoCE does not use LIDs, so a /32 (no host part) is fine there. */
	CHECK_OK(swv_config_parse_spec("r=127.0.0.1/32,roce", &d));
	CHECK_EQ(d.prefix_len, 32);

	/* A name of exactly 63 characters fits. */
	char spec[128];
	memset(spec, 'n', 63);
	strcpy(spec + 63, "=127.0.0.1");
	CHECK_OK(swv_config_parse_spec(spec, &d));
	CHECK_EQ(strlen(d.name), 63);
}

static void test_parse_rejects(void)
{
	char spec[700];

	expect_bad("");
	expect_bad("swv0");
	expect_bad("=127.0.0.1");
	expect_bad("swv0=");
	expect_bad("sw v0=127.0.0.1");
	expect_bad("sw/0=127.0.0.1");
	expect_bad("swv0=127.0.0");
	expect_bad("swv0=127.0.0.1.1");
	expect_bad("swv0=127.0.0.256");
	expect_bad("swv0=localhost");
	expect_bad("swv0=::1");
	expect_bad("swv0=127.0.0.1/");
	expect_bad("swv0=127.0.0.1/0");
	expect_bad("swv0=127.0.0.1/33");
	expect_bad("swv0=127.0.0.1/-8");
	expect_bad("swv0=127.0.0.1/8x");
	expect_bad("swv0=127.0.0.1,");
	expect_bad(",swv0=127.0.0.1");
	expect_bad("swv0=127.0.0.1,,ib");
	expect_bad("swv0=127.0.0.1,infiniband");
	expect_bad("swv0=127.0.0.1,ib=1");
	expect_bad("swv0=127.0.0.1,ib,roce");
	expect_bad("swv0=127.0.0.1,ib,ib");
	expect_bad("swv0=127.0.0.1,mtu");
	expect_bad("swv0=127.0.0.1,mtu=");
	expect_bad("swv0=127.0.0.1,mtu=1500");
	expect_bad("swv0=127.0.0.1,mtu=128");
	expect_bad("swv0=127.0.0.1,mtu=8192");
	expect_bad("swv0=127.0.0.1,mtu=-1024");
	expect_bad("swv0=127.0.0.1,mtu=1024,mtu=2048");
	expect_bad("swv0=127.0.0.1,max_cntrs=-1");
	expect_bad("swv0=127.0.0.1,max_cntrs=99999999999999999999999");
	expect_bad("swv0=127.0.0.1,max_cntrs=2000000");
	expect_bad("swv0=127.0.0.1,cntr_bits=0");
	expect_bad("swv0=127.0.0.1,cntr_bits=65");
	expect_bad("swv0=127.0.0.1,cntr_bits=0x10");
	expect_bad("swv0=127.0.0.1,colour=blue");
	expect_bad("swv0=127.0.0.1,pkeys");
	expect_bad("swv0=127.0.0.1,pkeys=");
	expect_bad("swv0=127.0.0.1,pkeys=0x0000");	  /* the invalid P_Key */
	expect_bad("swv0=127.0.0.1,pkeys=0xffff:0x8000"); /* invalid, full bit */
	expect_bad("swv0=127.0.0.1,pkeys=0xffff:0xffff"); /* twice */
	expect_bad("swv0=127.0.0.1,pkeys=0x10000");
	expect_bad("swv0=127.0.0.1,pkeys=0xfffg");
	expect_bad("swv0=127.0.0.1,pkeys=0x");
	expect_bad("swv0=127.0.0.1,pkeys=ffff:");
	expect_bad("swv0=127.0.0.1,pkeys=:ffff");
	expect_bad("swv0=127.0.0.1,pkeys=ffff::7fff");
	expect_bad("swv0=127.0.0.1,pkeys=1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11");
	expect_bad("swv0=127.0.0.1,pkeys=ffff,pkeys=7fff");
	/* Not a local address (TEST-NET-3), unspecified, broadcast, multicast. */
	expect_bad("swv0=203.0.113.77");
	expect_bad("swv0=0.0.0.0");
	expect_bad("swv0=255.255.255.255");
	expect_bad("swv0=224.0.0.1");
	/* IB port whose LID would be 0 or 0xffff. */
	expect_bad("swv0=127.0.0.1/32");
	expect_bad("swv0=127.0.0.0");
	expect_bad("swv0=127.0.255.255");
	expect_bad("swv0=127.1.0.0/8,ib");
	/* Overlong name (64) and overlong spec. */
	memset(spec, 'n', 64);
	strcpy(spec + 64, "=127.0.0.1");
	expect_bad(spec);
	memset(spec, ' ', 600);
	strcpy(spec + 600, "x=127.0.0.1");
	expect_bad(spec);

	struct swv_dev_config d;
	CHECK_EQ(swv_config_parse_spec(NULL, &d), EINVAL);
	CHECK_EQ(swv_config_parse_spec("swv0=127.0.0.1", NULL), EINVAL);
}

/* A non-loopback IPv4 address of this host, if it has one. */
static bool other_local_addr(struct in_addr *out, char *ifname)
{
	struct ifaddrs *ifs, *i;
	bool found = false;

	CHECK(getifaddrs(&ifs) == 0);
	for (i = ifs; i && !found; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK)) {
			*out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
			strcpy(ifname, i->ifa_name);
			found = true;
		}
	freeifaddrs(ifs);
	return found;
}

static void test_parse_real_interface(void)
{
	struct in_addr a;
	char ifname[IFNAMSIZ], spec[128], ip[INET_ADDRSTRLEN];
	struct swv_dev_config d;

	if (!other_local_addr(&a, ifname)) {
		printf("test_config: SKIP real-interface MTU check (no non-loopback IPv4)\n");
		return;
	}
	inet_ntop(AF_INET, &a, ip, sizeof(ip));
	snprintf(spec, sizeof(spec), "e=%s,roce", ip);
	CHECK_OK(swv_config_parse_spec(spec, &d));
	/* The default MTU follows the interface, like rxe. */
	uint32_t ifmtu = swv_ifmtu_of_ip(a);
	CHECK(ifmtu > 0);
	CHECK_EQ(d.mtu_bytes, swv_ib_mtu_for_ifmtu(ifmtu));
	uint8_t prefix;
	CHECK_OK(swv_local_if_of_ip(a, NULL, &prefix, NULL));
	CHECK_EQ(d.prefix_len, prefix);
}

static void set_env(const char *name, const char *val)
{
	if (val)
		CHECK(setenv(name, val, 1) == 0);
	else
		CHECK(unsetenv(name) == 0);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK_PTR(f);
	CHECK(fputs(text, f) >= 0);
	CHECK(fclose(f) == 0);
}

static void test_load(void)
{
	struct swv_config cfg;
	char path[] = "/tmp/swv_test_config_XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);

	/* Embedded default. */
	set_env("SWVERBS_CONFIG", NULL);
	set_env("SWVERBS_DEVICES", NULL);
	CHECK_OK(swv_config_load(&cfg));
	CHECK_EQ(cfg.ndev, 1);
	CHECK(!strcmp(cfg.dev[0].name, "swv0"));
	CHECK_EQ(cfg.dev[0].addr.s_addr, htonl(INADDR_LOOPBACK));
	CHECK_EQ(cfg.dev[0].prefix_len, 8);
	CHECK_EQ(cfg.dev[0].link, SWV_LINK_IB);
	CHECK_EQ(cfg.dev[0].mtu_bytes, 4096);
	CHECK_EQ(cfg.dev[0].max_cntrs, SWV_DEFAULT_MAX_CNTRS);
	CHECK(cfg.dev[0].cntr_max_value == UINT64_MAX);
	CHECK(!strcmp(cfg.source, "default"));
	/* Empty variables count as unset. */
	set_env("SWVERBS_CONFIG", "");
	set_env("SWVERBS_DEVICES", "");
	CHECK_OK(swv_config_load(&cfg));
	CHECK(!strcmp(cfg.source, "default"));

	/* Environment list; empty items skipped. */
	set_env("SWVERBS_CONFIG", NULL);
	set_env("SWVERBS_DEVICES", "a=127.0.0.1;b=127.0.0.2,roce,mtu=512;");
	CHECK_OK(swv_config_load(&cfg));
	CHECK_EQ(cfg.ndev, 2);
	CHECK(!strcmp(cfg.dev[0].name, "a"));
	CHECK(!strcmp(cfg.dev[1].name, "b"));
	CHECK_EQ(cfg.dev[1].link, SWV_LINK_ETH);
	CHECK_EQ(cfg.dev[1].mtu_bytes, 512);
	CHECK(!strcmp(cfg.source, "SWVERBS_DEVICES"));

	/* File with comments and blank lines, then the environment appends. */
	write_file(path, "# swverbs devices\n\n  f0=127.0.0.10/16   # first\nf1=127.0.0.11,roce\n");
	set_env("SWVERBS_CONFIG", path);
	set_env("SWVERBS_DEVICES", NULL);
	CHECK_OK(swv_config_load(&cfg));
	CHECK_EQ(cfg.ndev, 2);
	CHECK(!strcmp(cfg.dev[0].name, "f0"));
	CHECK_EQ(cfg.dev[0].prefix_len, 16);
	CHECK(!strcmp(cfg.dev[1].name, "f1"));
	CHECK(!strcmp(cfg.source, path));
	set_env("SWVERBS_DEVICES", "e0=127.0.0.12");
	CHECK_OK(swv_config_load(&cfg));
	CHECK_EQ(cfg.ndev, 3);
	CHECK(!strcmp(cfg.dev[2].name, "e0"));
	CHECK(strstr(cfg.source, path) == cfg.source);

	/* Duplicates across sources: name, then address. */
	set_env("SWVERBS_DEVICES", "f0=127.0.0.13");
	CHECK_EQ(swv_config_load(&cfg), EINVAL);
	CHECK_EQ(cfg.ndev, 0); /* all or nothing */
	set_env("SWVERBS_DEVICES", "g=127.0.0.11");
	CHECK_EQ(swv_config_load(&cfg), EINVAL);
	set_env("SWVERBS_DEVICES", NULL);

	/* A bad line anywhere fails the whole file. */
	write_file(path, "ok=127.0.0.1\nbad=127.0.0.2,mtu=3000\n");
	CHECK_EQ(swv_config_load(&cfg), EINVAL);
	CHECK_EQ(cfg.ndev, 0);
	/* Too many devices. */
	FILE *f = fopen(path, "w");
	CHECK_PTR(f);
	for (int i = 0; i <= SWV_MAX_DEVICES; i++)
		fprintf(f, "d%d=127.0.1.%d\n", i, i + 1);
	CHECK(fclose(f) == 0);
	CHECK_EQ(swv_config_load(&cfg), EINVAL);
	/* Exactly the maximum is fine. */
	f = fopen(path, "w");
	CHECK_PTR(f);
	for (int i = 0; i < SWV_MAX_DEVICES; i++)
		fprintf(f, "d%d=127.0.1.%d\n", i, i + 1);
	CHECK(fclose(f) == 0);
	CHECK_OK(swv_config_load(&cfg));
	CHECK_EQ(cfg.ndev, SWV_MAX_DEVICES);

	/* Missing file is an error, not the default. */
	CHECK(unlink(path) == 0);
	CHECK_EQ(swv_config_load(&cfg), ENOENT);
	set_env("SWVERBS_CONFIG", NULL);
	set_env("SWVERBS_DEVICES", "x=127.0.0.1,mtu=9");
	CHECK_EQ(swv_config_load(&cfg), EINVAL);
	set_env("SWVERBS_DEVICES", NULL);
	CHECK_EQ(swv_config_load(NULL), EINVAL);
}

int main(void)
{
	test_parse_defaults();
	test_parse_options();
	test_parse_rejects();
	test_parse_real_interface();
	test_load();
	printf("test_config: ok\n");
	return 0;
}
