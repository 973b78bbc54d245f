/*
 * ibv_query_port_speed (rdma-core 65): a port's bandwidth in units of 100 Mb/s.
 * Hardware reports what its link (or LAG) carries. swverbs derives it from the same
 * port attributes ibv_query_port returns -- lanes (active_width) times the lane rate
 * (active_speed, or active_speed_ex when set) -- so the two calls always agree: the
 * default 4X QDR port answers 400 (40 Gb/s). It is a nominal figure, like the one
 * ibv_devinfo prints; actual throughput depends on the host's UDP path.
 */
#include <errno.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "api/ops.h"
#include "core/device.h"
#include "util/compiler.h"

/* active_width code -> lanes (IB spec PortInfo LinkWidthActive). */
static unsigned width_lanes(uint8_t width)
{
	switch (width) {
	case 1:
		return 1; /* 1X */
	case 2:
		return 4; /* 4X */
	case 4:
		return 8; /* 8X */
	case 8:
		return 12; /* 12X */
	case 16:
		return 2; /* 2X */
	default:
		return 0;
	}
}

/* active_speed(_ex) code -> nominal lane rate in 100 Mb/s (PortInfo LinkSpeedActive). */
static unsigned lane_rate(uint32_t speed)
{
	switch (speed) {
	case 1:
		return 25; /* SDR 2.5 Gb/s */
	case 2:
		return 50; /* DDR */
	case 4:
		return 100; /* QDR */
	case 8:
		return 100; /* FDR10 */
	case 16:
		return 140; /* FDR */
	case 32:
		return 250; /* EDR */
	case 64:
		return 500; /* HDR */
	case 128:
		return 1000; /* NDR */
	case 256:
		return 2000; /* XDR */
	default:
		return 0;
	}
}

SWV_EXPORT int ibv_query_port_speed(struct ibv_context *context, uint32_t port_num,
				    uint64_t *port_speed)
{
	struct ibv_port_attr pa;
	if (!context || !port_speed || port_num == 0 || port_num > UINT8_MAX)
		return EINVAL;
	int rc = swv_query_port(context, (uint8_t)port_num, &pa, sizeof(pa));
	if (rc)
		return rc;
	uint64_t speed = (uint64_t)width_lanes(pa.active_width) *
			 lane_rate(pa.active_speed_ex ? pa.active_speed_ex : pa.active_speed);
	if (speed == 0)
		return EOPNOTSUPP; /* attributes without a known width/speed: no figure */
	*port_speed = speed;
	return 0;
}
