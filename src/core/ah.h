/* Address handles and address-vector resolution. Owner: core. */
#ifndef SWV_CORE_AH_H
#define SWV_CORE_AH_H

#include <infiniband/verbs.h>
#include <netinet/in.h>

struct swv_context;

struct swv_ah {
	struct ibv_ah ibah;
	struct ibv_ah_attr attr;
	struct sockaddr_in dst; /* peer IP; the port comes from the QPN at send time */
};

static inline struct swv_ah *to_swv_ah(struct ibv_ah *ah)
{
	return (struct swv_ah *)ah;
}

/* Resolve an address vector to the peer's IPv4: GID when is_global, else LID within
 * the device's subnet. Returns 0 or EINVAL (unroutable / wrong port). */
int swv_av_resolve(struct swv_context *ctx, const struct ibv_ah_attr *av, struct in_addr *ip);

#endif
