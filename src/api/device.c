/* Device discovery entry points: ibv_get_device_list and the per-device getters. */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/swverbs.h>

#include "core/device.h"
#include "util/compiler.h"

SWV_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct swv_device *devs;
	unsigned n;
	int rc = swv_devices_get(&devs, &n);
	if (rc) {
		/* A configuration error: the reason was logged when it was loaded. */
		errno = EINVAL;
		return NULL;
	}
	/* NULL-terminated, possibly empty: pyverbs treats NULL as a hard error. */
	struct ibv_device **list = calloc(n + 1, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	for (unsigned i = 0; i < n; i++)
		list[i] = &devs[i].ibdev;
	if (num_devices)
		*num_devices = (int)n;
	return list;
}

SWV_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	/* Only the array is ours to free; devices live for the process. */
	free(list);
}

SWV_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	if (!device || !swv_device_valid(device)) {
		errno = EINVAL;
		return NULL;
	}
	return device->name;
}

SWV_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	if (!device || !swv_device_valid(device)) {
		errno = EINVAL;
		return 0;
	}
	return htobe64(to_swv_device(device)->guid);
}

SWV_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	if (!device || !swv_device_valid(device))
		return -1;
	return (int)to_swv_device(device)->index;
}

SWV_EXPORT int swv_query_device_config(struct ibv_device *device, struct swv_device_config *cfg,
				       size_t cfg_size)
{
	if (!cfg)
		return EINVAL;
	memset(cfg, 0, cfg_size);
	if (!device || !swv_device_valid(device) || cfg_size < sizeof(*cfg))
		return EINVAL;
	const struct swv_config *all = swv_config_get();
	const struct swv_dev_config *dc = to_swv_device(device)->cfg;
	snprintf(cfg->source, sizeof(cfg->source), "%s",
		 all && all->source ? all->source : "default");
	cfg->ipv4 = dc->addr.s_addr;
	cfg->prefix_len = dc->prefix_len;
	cfg->link = dc->link == SWV_LINK_IB ? SWV_DEVICE_LINK_IB : SWV_DEVICE_LINK_ROCE;
	cfg->mtu_bytes = dc->mtu_bytes;
	cfg->max_cntrs = dc->max_cntrs;
	cfg->cntr_max_value = dc->cntr_max_value;
	cfg->flags = dc->auth ? SWV_DEVICE_CFG_AUTH : 0;
	return 0;
}
