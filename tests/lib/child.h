/*
 * Child processes of a test. swvt_child_start: one joined to the test by two pipes, for
 * scenarios where the child plays a server: it writes to 'up' (e.g. its port, "ready")
 * and reads from 'down'. swvt_child_run: one that runs a scenario of its own, for
 * settings a process reads once (environment switches, prctl).
 */
#ifndef SWV_TEST_CHILD_H
#define SWV_TEST_CHILD_H

#include <sys/types.h>

struct swvt_child {
	pid_t pid;
	int up;	  /* the parent reads what the child writes */
	int down; /* the parent writes what the child reads */
};

/* Forks a child that runs fn(up, down) and exits with its return value. */
void swvt_child_start(struct swvt_child *c, int (*fn)(int up, int down));
/* Closes the parent's ends and checks that the child exited with status 0. */
void swvt_child_wait(struct swvt_child *c);

/* Runs fn in a child process, which then _exits 0 (leaving the parent's stdio buffers
 * and exit handlers alone), and checks that it exited with status 0. */
void swvt_child_run(void (*fn)(void));

#endif
