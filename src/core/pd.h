/* Protection domain. Owner: core. */
#ifndef SWV_CORE_PD_H
#define SWV_CORE_PD_H

#include <infiniband/verbs.h>
#include <stdatomic.h>

struct swv_pd {
	struct ibv_pd ibpd;
	_Atomic unsigned users; /* MRs, QPs, SRQs, AHs using it: dealloc is EBUSY while > 0 */
};

static inline struct swv_pd *to_swv_pd(struct ibv_pd *pd)
{
	return (struct swv_pd *)pd;
}

#endif
