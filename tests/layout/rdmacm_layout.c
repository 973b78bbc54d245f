/*
 * Prints the size and field offsets of every <rdma/rdma_cma.h> struct that programs
 * dereference, and the constants they compile in. Built twice, against swverbs'
 * include/ and against Debian's /usr/include; the two outputs must be identical. What
 * rdma-core added after Debian 12's release 44 is left out of that comparison.
 */
#include <rdma/rdma_cma.h>
#include <stddef.h>
#include <stdio.h>

#define S(t)	printf("sizeof %s %zu\n", #t, sizeof(t))
#define O(t, f) printf("offsetof %s.%s %zu\n", #t, #f, offsetof(t, f))
#define V(c)	printf("value %s %lld\n", #c, (long long)(c))

int main(void)
{
	S(struct rdma_event_channel);
	O(struct rdma_event_channel, fd);
	S(struct rdma_ib_addr);
	O(struct rdma_ib_addr, sgid);
	O(struct rdma_ib_addr, dgid);
	O(struct rdma_ib_addr, pkey);
	S(struct rdma_addr);
	O(struct rdma_addr, src_addr);
	O(struct rdma_addr, src_sin6);
	O(struct rdma_addr, dst_addr);
	O(struct rdma_addr, dst_storage);
	O(struct rdma_addr, addr.ibaddr);
	S(struct rdma_route);
	O(struct rdma_route, addr);
	O(struct rdma_route, path_rec);
	O(struct rdma_route, num_paths);
	S(struct rdma_cm_id);
	O(struct rdma_cm_id, verbs);
	O(struct rdma_cm_id, channel);
	O(struct rdma_cm_id, context);
	O(struct rdma_cm_id, qp);
	O(struct rdma_cm_id, route);
	O(struct rdma_cm_id, ps);
	O(struct rdma_cm_id, port_num);
	O(struct rdma_cm_id, event);
	O(struct rdma_cm_id, send_cq_channel);
	O(struct rdma_cm_id, send_cq);
	O(struct rdma_cm_id, recv_cq_channel);
	O(struct rdma_cm_id, recv_cq);
	O(struct rdma_cm_id, srq);
	O(struct rdma_cm_id, pd);
	O(struct rdma_cm_id, qp_type);
	S(struct rdma_conn_param);
	O(struct rdma_conn_param, private_data);
	O(struct rdma_conn_param, private_data_len);
	O(struct rdma_conn_param, responder_resources);
	O(struct rdma_conn_param, initiator_depth);
	O(struct rdma_conn_param, flow_control);
	O(struct rdma_conn_param, retry_count);
	O(struct rdma_conn_param, rnr_retry_count);
	O(struct rdma_conn_param, srq);
	O(struct rdma_conn_param, qp_num);
	S(struct rdma_ud_param);
	O(struct rdma_ud_param, private_data);
	O(struct rdma_ud_param, private_data_len);
	O(struct rdma_ud_param, ah_attr);
	O(struct rdma_ud_param, qp_num);
	O(struct rdma_ud_param, qkey);
	S(struct rdma_cm_event);
	O(struct rdma_cm_event, id);
	O(struct rdma_cm_event, listen_id);
	O(struct rdma_cm_event, event);
	O(struct rdma_cm_event, status);
	O(struct rdma_cm_event, param);
	O(struct rdma_cm_event, param.conn.qp_num);
	O(struct rdma_cm_event, param.ud.qkey);
#ifndef DEBIAN_RDMA_CORE_44
	O(struct rdma_cm_event, param.arg);
#endif
	S(struct rdma_addrinfo);
	O(struct rdma_addrinfo, ai_flags);
	O(struct rdma_addrinfo, ai_family);
	O(struct rdma_addrinfo, ai_qp_type);
	O(struct rdma_addrinfo, ai_port_space);
	O(struct rdma_addrinfo, ai_src_len);
	O(struct rdma_addrinfo, ai_dst_len);
	O(struct rdma_addrinfo, ai_src_addr);
	O(struct rdma_addrinfo, ai_dst_addr);
	O(struct rdma_addrinfo, ai_src_canonname);
	O(struct rdma_addrinfo, ai_dst_canonname);
	O(struct rdma_addrinfo, ai_route_len);
	O(struct rdma_addrinfo, ai_route);
	O(struct rdma_addrinfo, ai_connect_len);
	O(struct rdma_addrinfo, ai_connect);
	O(struct rdma_addrinfo, ai_next);
	S(struct rdma_cm_join_mc_attr_ex);
	O(struct rdma_cm_join_mc_attr_ex, comp_mask);
	O(struct rdma_cm_join_mc_attr_ex, join_flags);
	O(struct rdma_cm_join_mc_attr_ex, addr);
	S(struct ibv_sa_path_rec);
	O(struct ibv_sa_path_rec, dgid);
	O(struct ibv_sa_path_rec, sgid);
	O(struct ibv_sa_path_rec, dlid);
	O(struct ibv_sa_path_rec, slid);
	O(struct ibv_sa_path_rec, raw_traffic);
	O(struct ibv_sa_path_rec, flow_label);
	O(struct ibv_sa_path_rec, hop_limit);
	O(struct ibv_sa_path_rec, traffic_class);
	O(struct ibv_sa_path_rec, reversible);
	O(struct ibv_sa_path_rec, numb_path);
	O(struct ibv_sa_path_rec, pkey);
	O(struct ibv_sa_path_rec, sl);
	O(struct ibv_sa_path_rec, mtu_selector);
	O(struct ibv_sa_path_rec, mtu);
	O(struct ibv_sa_path_rec, rate_selector);
	O(struct ibv_sa_path_rec, rate);
	O(struct ibv_sa_path_rec, packet_life_time_selector);
	O(struct ibv_sa_path_rec, packet_life_time);
	O(struct ibv_sa_path_rec, preference);
	V(RDMA_CM_EVENT_ADDR_RESOLVED);
	V(RDMA_CM_EVENT_REJECTED);
	V(RDMA_CM_EVENT_ESTABLISHED);
	V(RDMA_CM_EVENT_DISCONNECTED);
	V(RDMA_CM_EVENT_TIMEWAIT_EXIT);
#ifndef DEBIAN_RDMA_CORE_44 /* added after rdma-core 44 */
	V(RDMA_CM_EVENT_ADDRINFO_ERROR);
	V(RDMA_CM_EVENT_USER);
	V(RDMA_CM_EVENT_INTERNAL);
	V(RAI_SA);
	V(RAI_DNS);
#endif
	V(RDMA_PS_IPOIB);
	V(RDMA_PS_TCP);
	V(RDMA_PS_UDP);
	V(RDMA_PS_IB);
	V(RDMA_UDP_QKEY);
	V(RDMA_MAX_RESP_RES);
	V(RDMA_MAX_INIT_DEPTH);
	V(RAI_PASSIVE);
	V(RAI_NUMERICHOST);
	V(RAI_NOROUTE);
	V(RAI_FAMILY);
	V(RDMA_OPTION_ID);
	V(RDMA_OPTION_IB);
	V(RDMA_OPTION_ID_TOS);
	V(RDMA_OPTION_ID_REUSEADDR);
	V(RDMA_OPTION_ID_AFONLY);
	V(RDMA_OPTION_ID_ACK_TIMEOUT);
	V(RDMA_OPTION_IB_PATH);
	V(RDMA_IB_IP_PS_TCP);
	V(RDMA_IB_IP_PS_UDP);
	V(RDMA_IB_PS_IB);
	V(RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER);
	V(RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS);
	return 0;
}
