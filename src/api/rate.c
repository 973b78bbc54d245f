/*
 * Static-rate conversions: enum ibv_rate <-> multiple of 2.5 Gb/s, and <-> Mb/s.
 * Pure table lookups, the same answers as rdma-core's libibverbs (the unit test
 * compares them with the system library when it is installed).
 *
 * Only the rates that are whole multiples of the 2.5 Gb/s SDR lane rate have a
 * multiplier; the FDR/EDR/HDR-family rates (14, 25, 56, 100, 112, 168, 200, 300 Gb/s)
 * answer -1 there but have an exact Mb/s figure (the 64b/66b line rates).
 */
#include <infiniband/verbs.h>

#include "util/compiler.h"

struct rate_row {
	enum ibv_rate rate;
	int mult; /* x 2.5 Gb/s, or -1 */
	int mbps;
};

static const struct rate_row rates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},	{IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},	{IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},	{IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},	{IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},	{IBV_RATE_14_GBPS, -1, 14062},
    {IBV_RATE_56_GBPS, -1, 56250},	{IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750},	{IBV_RATE_25_GBPS, -1, 25781},
    {IBV_RATE_100_GBPS, -1, 103125},	{IBV_RATE_200_GBPS, -1, 206250},
    {IBV_RATE_300_GBPS, -1, 309375},	{IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},	{IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},	{IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};

static const struct rate_row *row_of_rate(enum ibv_rate rate)
{
	for (size_t i = 0; i < SWV_ARRAY_SIZE(rates); i++)
		if (rates[i].rate == rate)
			return &rates[i];
	return NULL;
}

SWV_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
	const struct rate_row *r = row_of_rate(rate);
	return r ? r->mult : -1;
}

SWV_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	if (mult <= 0)
		return IBV_RATE_MAX;
	for (size_t i = 0; i < SWV_ARRAY_SIZE(rates); i++)
		if (rates[i].mult == mult)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

SWV_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
	const struct rate_row *r = row_of_rate(rate);
	return r ? r->mbps : -1;
}

SWV_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	if (mbps <= 0)
		return IBV_RATE_MAX;
	for (size_t i = 0; i < SWV_ARRAY_SIZE(rates); i++)
		if (rates[i].mbps == mbps)
			return rates[i].rate;
	return IBV_RATE_MAX;
}
