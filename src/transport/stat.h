/*
 * Live introspection for swverbs-stat (docs/design.md, "Live introspection"). Owner: transport.
 *
 * Each process with an open context listens on the abstract UNIX stream socket
 * "@swverbs-stat.<uid>.<pid>" (a thread of its own, started with the first context
 * and stopped with the last; SWVERBS_STAT=0 turns it off). A client of the same uid
 * (SO_PEERCRED) sends one line, "json" or "text", and reads a snapshot of every
 * open context until EOF. Nothing here runs on the data path: the snapshot reads
 * the counters the data path keeps anyway.
 *
 * Locking: the registry lock (stat.c) protects the list of contexts and is held
 * across a whole snapshot, so a context cannot be freed while it is read (close
 * unregisters first, and waits for a snapshot in progress). Inside it, per context
 * and one at a time: work_lock (for the endpoints' receive statistics) with
 * ctx->qp_lock nested, as the progress thread takes them; then ctx->qp_lock with
 * each qp->lock taken briefly in turn (and cq->lock nested, for a CQ's fill); then
 * ctx->cntr_lock alone. Formatting runs after all of them are released.
 */
#ifndef SWV_TRANSPORT_STAT_H
#define SWV_TRANSPORT_STAT_H

#include <stddef.h>

struct swv_context;

/* At the end of a successful swv_ctx_open / at the start of swv_ctx_close. */
void swv_stat_register(struct swv_context *ctx);
void swv_stat_unregister(struct swv_context *ctx);

/* The snapshot as the server sends it (json != 0: JSON, else the human table);
 * malloc'd, NUL-terminated, *len bytes without the NUL. NULL on ENOMEM. For tests. */
char *swv_stat_snapshot(int json, size_t *len);

#endif
