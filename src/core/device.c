/*
 * Device objects. The configuration is read once per process (pthread_once) and the
 * devices built from it live until exit: ibv_get_device_list hands out pointers into
 * a static array, so a list freed while a context is open never invalidates the
 * device that context points to (rdma-core keeps devices alive the same way).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/device.h"
#include "net/addr.h"
#include "util/log.h"

_Static_assert(sizeof(struct swv_device) >= 712, "verbs_device shape");
_Static_assert(__builtin_offsetof(struct swv_device, verbs_device_ops) == 664,
	       "verbs_device.ops offset");

/* Written only inside load_once; read-only after, so no lock is needed. */
static pthread_once_t load_once_ctl = PTHREAD_ONCE_INIT;
static struct swv_config g_cfg;
static struct swv_device g_devs[SWV_MAX_DEVICES];
static unsigned g_ndevs;
static int g_load_err;

static void build_device(struct swv_device *d, const struct swv_dev_config *cfg, unsigned idx)
{
	memset(d, 0, sizeof(*d));
	d->ibdev.node_type = IBV_NODE_CA;
	d->ibdev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->ibdev.name, sizeof(d->ibdev.name), "%s", cfg->name);
	/* Not the kernel's "uverbs<N>": a name no real adapter's node can have, since
	 * /dev/infiniband/<dev_name> is what UCX checks (src/api/sysfs_tree.c). */
	char uv[sizeof(d->ibdev.dev_name)];
	if (strlen(cfg->name) <= 56)
		snprintf(uv, sizeof(uv), "uverbs-%.56s", cfg->name);
	else /* too long to fit whole: a prefix, made unique by the index */
		snprintf(uv, sizeof(uv), "uverbs-%.48s~%u", cfg->name, idx % 100);
	memcpy(d->ibdev.dev_name, uv, sizeof(uv));
	snprintf(d->ibdev.dev_path, sizeof(d->ibdev.dev_path), "/sys/class/infiniband_verbs/%s",
		 uv);
	/* Served from the generated tree (src/api/sysfs_tree.c). */
	snprintf(d->ibdev.ibdev_path, sizeof(d->ibdev.ibdev_path), "/sys/class/infiniband/%s",
		 cfg->name);
	d->cfg = cfg;
	d->index = idx;
	d->guid = swv_guid_from_ip(cfg->addr);
}

static void load_devices(void)
{
	int rc = swv_config_load(&g_cfg);
	if (rc) {
		swv_log(SWV_LOG_ERR, "bad device configuration (%s): %s; no devices",
			g_cfg.source ? g_cfg.source : "?", strerror(rc));
		g_load_err = rc;
		return;
	}
	if (g_cfg.ndev > SWV_MAX_DEVICES) {
		swv_log(SWV_LOG_ERR, "configuration lists %u devices, max %d", g_cfg.ndev,
			SWV_MAX_DEVICES);
		g_load_err = EINVAL;
		return;
	}
	for (unsigned i = 0; i < g_cfg.ndev; i++)
		build_device(&g_devs[i], &g_cfg.dev[i], i);
	g_ndevs = g_cfg.ndev;
}

const struct swv_config *swv_config_get(void)
{
	pthread_once(&load_once_ctl, load_devices);
	return g_load_err ? NULL : &g_cfg;
}

int swv_devices_get(struct swv_device **devs, unsigned *n)
{
	pthread_once(&load_once_ctl, load_devices);
	if (g_load_err)
		return g_load_err;
	*devs = g_devs;
	*n = g_ndevs;
	return 0;
}

bool swv_device_valid(const struct ibv_device *d)
{
	pthread_once(&load_once_ctl, load_devices);
	for (unsigned i = 0; i < g_ndevs; i++)
		if (d == &g_devs[i].ibdev)
			return true;
	return false;
}
