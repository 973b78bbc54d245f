/*
 * A child process joined to the test by two pipes, for scenarios where the child plays
 * a server: it writes to 'up' (e.g. its port, "ready") and reads from 'down'.
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

#endif
