/*
 * UC flow control (docs/wire.md, "UC flow control"): a UC sender never sends more than
 * its receiver has room for, so a burst far larger than any socket buffer reaches a
 * receiver that was not running while it was posted -- whole, in order, nothing lost --
 * and a sender whose receiver has gone away still completes everything it posts.
 *
 *  1. The responder (child) posts NMSG receives of 1 MiB and is then stopped (SIGSTOP).
 *     The requester posts NMSG SENDs of 1 MiB (NMSG MiB: several times the largest
 *     socket buffer swverbs asks for). While the child is stopped, at most a receive
 *     window's worth may leave: most SENDs must still be waiting. After SIGCONT every
 *     SEND completes and every message arrives with every byte right.
 *  2. The responder is killed. SENDs posted to it afterwards, more than its last credit
 *     covers, all complete successfully (a UC sender cannot know; after SWV_FC_DEAD_NS
 *     it stops waiting for a peer that never answers).
 */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "harness.h"

#define TMO   30000
#define NMSG  48
#define MSG   (1u << 20)
#define NDEAD 24 /* 24 MiB: more than the credit any receiver grants (4096 packets) */

/* Wait until /proc says the process is stopped. */
static void wait_stopped(pid_t pid)
{
	char path[64], stat[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (int i = 0; i < 5000; i++) {
		FILE *f = fopen(path, "r");
		CHECK(f != NULL);
		size_t n = fread(stat, 1, sizeof(stat) - 1, f);
		fclose(f);
		stat[n] = 0;
		const char *p = strrchr(stat, ')');
		if (p && p[1] == ' ' && p[2] == 'T')
			return;
		usleep(1000);
	}
	fprintf(stderr, "child %d did not stop\n", (int)pid);
	exit(1);
}

static void requester(struct swvt *t, void *arg)
{
	struct ibv_wc wc[NMSG];
	(void)arg;

	swvt_fill(t->buf, MSG, 77);
	swvt_barrier(t); /* receives posted */
	CHECK_OK(kill(t->peer_pid, SIGSTOP));
	wait_stopped(t->peer_pid);
	for (unsigned i = 0; i < NMSG; i++)
		swvt_post_send(t, i, IBV_WR_SEND, 0, MSG, 0, IBV_SEND_SIGNALED);
	/* The receiver consumes nothing now: only the credit it granted may be spent. */
	int early = swvt_poll(t->scq, wc, NMSG, 100);
	if (early > NMSG / 2) {
		fprintf(stderr, "%d of %d UC SENDs completed towards a stopped receiver\n", early,
			NMSG);
		exit(1);
	}
	CHECK_OK(kill(t->peer_pid, SIGCONT));
	swvt_poll_n(t->scq, wc + early, NMSG - early, TMO);
	for (int i = 0; i < NMSG; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, (uint64_t)i);
	}
	swvt_barrier(t); /* every message verified by the responder */
	printf(
	    "phase 1: %d of %d SENDs completed while the receiver was stopped; all %d delivered\n",
	    early, NMSG, NMSG);

	swvt_kill_peer(t);
	for (unsigned i = 0; i < NDEAD; i++)
		swvt_post_send(t, 1000 + i, IBV_WR_SEND, 0, MSG, 0, IBV_SEND_SIGNALED);
	swvt_poll_n(t->scq, wc, NDEAD, TMO);
	for (int i = 0; i < NDEAD; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, 1000u + (uint64_t)i);
	}
	printf("phase 2: %d SENDs to a vanished receiver completed\n", NDEAD);
}

static void responder(struct swvt *t, void *arg)
{
	struct ibv_wc wc[NMSG];
	(void)arg;

	for (unsigned i = 0; i < NMSG; i++)
		swvt_post_recv(t, i, (uint64_t)i * MSG, MSG);
	swvt_barrier(t);
	swvt_poll_n(t->rcq, wc, NMSG, TMO);
	for (int i = 0; i < NMSG; i++) {
		CHECK_WC(wc[i], IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, (uint64_t)i);
		CHECK_EQ(wc[i].byte_len, MSG);
		size_t bad = swvt_verify(t->buf + (size_t)i * MSG, MSG, 77);
		if (bad != (size_t)-1) {
			fprintf(stderr, "message %d: byte %zu differs\n", i, bad);
			exit(1);
		}
	}
	swvt_barrier(t);
	pause(); /* until killed */
}

int main(void)
{
	struct swvt_opts o;
	swvt_opts_default(&o);
	o.qp_type = IBV_QPT_UC;
	o.path_mtu = IBV_MTU_4096;
	o.buf_size = (size_t)NMSG * MSG;
	o.max_send_wr = NMSG;
	o.max_recv_wr = NMSG;
	return swvt_run(&o, requester, responder, NULL);
}
