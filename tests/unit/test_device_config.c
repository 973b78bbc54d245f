/* swv_query_device_config: what each configured device reports, and its EINVAL cases. */
#include <arpa/inet.h>
#include <infiniband/swverbs.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

int main(void)
{
	/* Two devices: the configuration is read once, at the first device list. */
	setenv("SWVERBS_DEVICES",
	       "swv0=127.0.0.1/8;swr0=127.0.0.2/8,roce,mtu=1024,max_cntrs=7,cntr_bits=12,"
	       "auth_key=00112233445566778899aabbccddeeff",
	       1);
	unsetenv("SWVERBS_CONFIG");
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK_PTR(list);
	CHECK_EQ(n, 2);

	struct swv_device_config c;
	CHECK_OK(swv_query_device_config(list[0], &c, sizeof(c)));
	CHECK(strcmp(c.source, "SWVERBS_DEVICES") == 0);
	CHECK_EQ(c.ipv4, inet_addr("127.0.0.1"));
	CHECK_EQ(c.prefix_len, 8);
	CHECK_EQ(c.link, SWV_DEVICE_LINK_IB);
	CHECK_EQ(c.cntr_max_value, (long long)UINT64_MAX);
	CHECK_EQ(c.flags, 0); /* no secret */

	CHECK_OK(swv_query_device_config(list[1], &c, sizeof(c)));
	CHECK_EQ(c.ipv4, inet_addr("127.0.0.2"));
	CHECK_EQ(c.link, SWV_DEVICE_LINK_ROCE);
	CHECK_EQ(c.mtu_bytes, 1024);
	CHECK_EQ(c.max_cntrs, 7);
	CHECK_EQ(c.cntr_max_value, (1 << 12) - 1);
	CHECK_EQ(c.flags, SWV_DEVICE_CFG_AUTH);
	for (size_t i = 0; i + 4 <= sizeof(c); i++) /* the secret is not in there */
		CHECK(memcmp((char *)&c + i, "\x00\x11\x22\x33", 4) != 0);

	/* A larger caller structure: the tail is zeroed, the call succeeds. */
	unsigned char big[sizeof(c) + 16];
	memset(big, 0xa5, sizeof(big));
	CHECK_OK(swv_query_device_config(list[1], (struct swv_device_config *)big, sizeof(big)));
	for (size_t i = sizeof(c); i < sizeof(big); i++)
		CHECK_EQ(big[i], 0);

	/* Errors: a size too small (after zeroing it), NULL arguments, a foreign device. */
	memset(&c, 0xa5, sizeof(c));
	CHECK_EQ(swv_query_device_config(list[0], &c, sizeof(c) - 1), EINVAL);
	CHECK_EQ(((unsigned char *)&c)[0], 0);
	CHECK_EQ(swv_query_device_config(list[0], NULL, sizeof(c)), EINVAL);
	CHECK_EQ(swv_query_device_config(NULL, &c, sizeof(c)), EINVAL);
	struct ibv_device foreign;
	memset(&foreign, 0, sizeof(foreign));
	CHECK_EQ(swv_query_device_config(&foreign, &c, sizeof(c)), EINVAL);

	ibv_free_device_list(list);
	return 0;
}
