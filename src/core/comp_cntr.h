/*
 * Completion counters (comp-cntr.md). Owner: counters.
 *
 * Each counter holds a completion count and an error count, 64-bit, cache-line
 * aligned, either in the object itself or at application-supplied addresses
 * (swv_create_comp_cntr_ext). Updates are lock-free atomic adds with release order;
 * reads are acquire loads. Values live modulo max_value + 1.
 */
#ifndef SWV_CORE_COMP_CNTR_H
#define SWV_CORE_COMP_CNTR_H

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct swv_qp;

/* Data path: count one completed work request of 'bytes' payload. ok=false adds 1 to
 * the error count. Never blocks, never allocates. */
void swv_comp_cntr_complete(struct ibv_comp_cntr *cntr, bool ok, uint64_t bytes);

/* QP destroy: drop this QP's attachments (the counters' attach counts). Called once
 * the QP can no longer complete anything. */
void swv_comp_cntr_detach_qp(struct swv_qp *qp);

/* Context close: release every counter the context still owns. */
struct swv_context;
void swv_comp_cntr_release_all(struct swv_context *ctx);

#endif
