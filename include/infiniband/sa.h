/*
 * swverbs: the subnet-administration path record that <rdma/rdma_cma.h> exposes
 * (struct rdma_route.path_rec). Same layout as rdma-core's <infiniband/sa.h>, because
 * unmodified programs read it; tests/layout compares it with Debian's header.
 */
#ifndef INFINIBAND_SA_H
#define INFINIBAND_SA_H

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_sa_path_rec {
	union ibv_gid dgid;
	union ibv_gid sgid;
	__be16 dlid;
	__be16 slid;
	int raw_traffic;
	__be32 flow_label;
	uint8_t hop_limit;
	uint8_t traffic_class;
	int reversible;
	uint8_t numb_path;
	__be16 pkey;
	uint8_t sl;
	uint8_t mtu_selector;
	uint8_t mtu;
	uint8_t rate_selector;
	uint8_t rate;
	uint8_t packet_life_time_selector;
	uint8_t packet_life_time;
	uint8_t preference;
};

#ifdef __cplusplus
}
#endif

#endif
