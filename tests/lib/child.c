#include "child.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

void swvt_child_start(struct swvt_child *c, int (*fn)(int up, int down))
{
	int up[2], down[2];
	CHECK(pipe(up) == 0 && pipe(down) == 0);
	c->pid = fork();
	CHECK(c->pid >= 0);
	if (c->pid == 0) {
		close(up[0]);
		close(down[1]);
		exit(fn(up[1], down[0]));
	}
	close(up[1]);
	close(down[0]);
	c->up = up[0];
	c->down = down[1];
}

void swvt_child_wait(struct swvt_child *c)
{
	close(c->up);
	close(c->down);
	int st;
	CHECK(waitpid(c->pid, &st, 0) == c->pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

void swvt_child_run(void (*fn)(void))
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		fn();
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
