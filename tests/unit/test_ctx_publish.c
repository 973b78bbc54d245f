/*
 * A context becomes importable (ibv_import_device of its cmd_fd) only once its ops
 * table is in place: an importer copies the primary's verbs_context whole, so one
 * made while the ops were still unset would answer every verb with a NULL op.
 *
 *  unpublished  a context swv_ctx_open returned, before ibv_open_device set its ops:
 *               importing its cmd_fd is EOPNOTSUPP (nothing to import yet), not an
 *               importer with NULL ops.
 *  racing       a thread imports a dup of a context's cmd_fd while the main thread
 *               closes that context: the import either keeps the context alive
 *               (full ops, its close tears it down) or is EOPNOTSUPP, never a
 *               reference on a context being freed.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "check.h"
#include "core/context.h"
#include "core/device.h"
#include "transport/receive.h"

static struct ibv_device *first_device(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0]);
	struct ibv_device *d = list[0];
	ibv_free_device_list(list);
	return d;
}

/* The ops an importer must have: what ibv_open_device's table sets. */
static void check_ops(struct ibv_context *c)
{
	CHECK(c->ops.post_send != NULL);
	CHECK(c->ops.poll_cq != NULL);
	struct verbs_context *v = verbs_get_ctx(c);
	CHECK(v != NULL);
	CHECK(v->query_device_ex != NULL);
	CHECK(v->create_qp_ex != NULL);
	CHECK(v->create_cq_ex != NULL);
}

static void unpublished(void)
{
	struct swv_context *ctx = swv_ctx_open(to_swv_device(first_device()), &swv_receive_ops);
	CHECK(ctx != NULL);
	int fd = dup(ctx->vctx.context.cmd_fd);
	CHECK(fd >= 0);
	errno = 0;
	struct ibv_context *imp = ibv_import_device(fd);
	if (imp) {
		check_ops(imp); /* fails: the importer copied a table not yet set */
		CHECK_EQ(ibv_close_device(imp), 0);
	} else {
		CHECK_EQ(errno, EOPNOTSUPP);
		close(fd);
	}
	swv_ctx_close(ctx);
}

/* The fd the main thread hands over (a dup it made of a context's cmd_fd), -1 for
 * none; the importer sets it back to -1 when done with it. */
static _Atomic int handed = -1;
static atomic_bool stop;

static void *importer(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		int fd = atomic_load(&handed);
		if (fd < 0) {
			sched_yield();
			continue;
		}
		/* The main thread is closing the context meanwhile: either the import
		 * comes first (and keeps the context alive) or it finds nothing. */
		errno = 0;
		struct ibv_context *imp = ibv_import_device(fd);
		if (imp) {
			check_ops(imp);
			CHECK_EQ(ibv_close_device(imp), 0); /* closes fd */
		} else {
			CHECK_EQ(errno, EOPNOTSUPP);
			close(fd);
		}
		atomic_store(&handed, -1);
	}
	return NULL;
}

static void racing(void)
{
	struct ibv_device *dev = first_device();
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, importer, NULL), 0);
	for (unsigned i = 0; i < 300; i++) {
		struct ibv_context *c = ibv_open_device(dev);
		CHECK(c != NULL);
		int fd = dup(c->cmd_fd);
		CHECK(fd >= 0);
		atomic_store(&handed, fd);
		CHECK_EQ(ibv_close_device(c), 0);
		while (atomic_load(&handed) >= 0)
			sched_yield();
	}
	atomic_store(&stop, true);
	CHECK_EQ(pthread_join(t, NULL), 0);
}

int main(void)
{
	unpublished();
	racing();
	return 0;
}
