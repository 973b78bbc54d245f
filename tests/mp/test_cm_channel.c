/*
 * An event channel destroyed while another thread is in (or about to enter)
 * rdma_get_cm_event: that thread stays blocked, as with the kernel's rdma_cm, where
 * close() does not wake a reader -- it must not return an error (rping's CM thread then
 * exits the program with 255) nor touch freed memory (AddressSanitizer). Repeated, so
 * that both orders (destroy before and after the reader enters) occur; the readers are
 * left blocked when the process ends, as rping's is.
 */
#include <errno.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static _Atomic int returned; /* readers that came back from rdma_get_cm_event */

static void *reader(void *arg)
{
	struct rdma_cm_event *e;
	int rc = rdma_get_cm_event(arg, &e);
	fprintf(stderr, "rdma_get_cm_event on a destroyed channel returned %d (errno %d)\n", rc,
		errno);
	atomic_fetch_add(&returned, 1);
	return NULL;
}

int main(void)
{
	enum { ROUNDS = 12 };
	for (int i = 0; i < ROUNDS; i++) {
		struct rdma_event_channel *ch = rdma_create_event_channel();
		CHECK(ch != NULL);
		pthread_t t;
		CHECK_OK(pthread_create(&t, NULL, reader, ch));
		CHECK_OK(pthread_detach(t));
		if (i & 1)
			sched_yield(); /* odd rounds: give the reader a chance to be in read() */
		rdma_destroy_event_channel(ch);
	}
	/* A reader that returned did so at once; give the last ones time to get there. */
	struct timespec ts = {0, 200 * 1000 * 1000};
	nanosleep(&ts, NULL);
	CHECK_EQ(atomic_load(&returned), 0);
	printf("ok: %d readers of destroyed channels stay blocked\n", ROUNDS);
	return 0;
}
