/*
 * swverbs-stat: look into the running swverbs processes of this user (docs/man/swverbs-stat.1.md).
 *
 * Each process with an open device listens on "@swverbs-stat.<uid>.<pid>" (src/transport/stat.h);
 * the processes are found by their socket names in /proc/net/unix. The process itself
 * renders the snapshot (JSON or the table), so this tool needs no parser and shows
 * whatever the library version of that process knows.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PREFIX "swverbs-stat."

static void usage(FILE *f)
{
	fprintf(f, "usage: swverbs-stat [-j] [-p PID] [-w SECS] [-l]\n"
		   "  -j       JSON (an array with one object per process)\n"
		   "  -p PID   only that process\n"
		   "  -w SECS  refresh every SECS seconds, like watch\n"
		   "  -l       list the processes only\n");
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* PIDs with a stat socket of this uid, sorted; returns the count (-1: /proc unreadable). */
static int list_pids(int **out)
{
	FILE *f = fopen("/proc/net/unix", "re");
	char line[512], want[64];
	int *v = NULL, n = 0, cap = 0;

	*out = NULL;
	if (!f)
		return -1;
	snprintf(want, sizeof(want), "@" PREFIX "%u.", (unsigned)geteuid());
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, want);
		if (!p)
			continue;
		char *end;
		long pid = strtol(p + strlen(want), &end, 10);
		if (end == p + strlen(want) || (*end != '\n' && *end != 0) || pid <= 0)
			continue;
		bool dup = false;
		for (int i = 0; i < n && !dup; i++)
			dup = v[i] == (int)pid;
		if (dup)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			int *nv = realloc(v, (size_t)cap * sizeof(*nv));
			if (!nv)
				break;
			v = nv;
		}
		v[n++] = (int)pid;
	}
	fclose(f);
	if (n)
		qsort(v, (size_t)n, sizeof(*v), cmp_int);
	*out = v;
	return n;
}

/* Ask pid for its snapshot; returns a malloc'd string or NULL (errno set). */
static char *query(int pid, bool json)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, PREFIX "%u.%d",
			 (unsigned)geteuid(), pid);
	socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	if (connect(fd, (struct sockaddr *)&sa, sl)) {
		int e = errno;
		close(fd);
		errno = e;
		return NULL;
	}
	const char *req = json ? "json\n" : "text\n";
	if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
		close(fd);
		return NULL;
	}
	size_t len = 0, cap = 0;
	char *buf = NULL;
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		/* a process stopped (SIGSTOP, a debugger) does not hang the tool */
		if (poll(&p, 1, 5000) <= 0) {
			free(buf);
			close(fd);
			errno = ETIMEDOUT;
			return NULL;
		}
		if (len + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 65536;
			char *nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				close(fd);
				errno = ENOMEM;
				return NULL;
			}
			buf = nb;
		}
		ssize_t r = read(fd, buf + len, cap - len - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	if (!len) {
		free(buf);
		errno = ENODATA; /* refused us, or exited meanwhile */
		return NULL;
	}
	buf[len] = 0;
	return buf;
}

static int show(bool json, int only_pid, bool list_only)
{
	int *pids, n = list_pids(&pids), shown = 0;
	if (n < 0) {
		fprintf(stderr, "swverbs-stat: /proc/net/unix: %s\n", strerror(errno));
		return 1;
	}
	if (json)
		fputs("[", stdout);
	for (int i = 0; i < n; i++) {
		if (only_pid && pids[i] != only_pid)
			continue;
		if (list_only) {
			printf(json ? "%s%d" : "%.0s%d\n", shown ? "," : "", pids[i]);
			shown++;
			continue;
		}
		char *s = query(pids[i], json);
		if (!s)
			continue; /* gone since the listing, or not answering */
		if (json) {
			size_t l = strlen(s);
			while (l && (s[l - 1] == '\n'))
				s[--l] = 0;
			printf("%s%s", shown ? "," : "", s);
		} else {
			fputs(s, stdout);
		}
		free(s);
		shown++;
	}
	if (json)
		fputs("]\n", stdout);
	free(pids);
	fflush(stdout);
	if (only_pid && !shown) {
		fprintf(stderr, "swverbs-stat: no swverbs process %d of this user is observable\n",
			only_pid);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	bool json = false, list_only = false;
	int only_pid = 0, c;
	double every = 0;

	while ((c = getopt(argc, argv, "jp:w:lh")) != -1) {
		char *end;
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'p':
			only_pid = (int)strtol(optarg, &end, 10);
			if (*end || only_pid <= 0) {
				fprintf(stderr, "swverbs-stat: bad pid '%s'\n", optarg);
				return 2;
			}
			break;
		case 'w':
			every = strtod(optarg, &end);
			if (*end || every <= 0) {
				fprintf(stderr, "swverbs-stat: bad interval '%s'\n", optarg);
				return 2;
			}
			break;
		case 'l':
			list_only = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (!every)
		return show(json, only_pid, list_only);
	bool tty = isatty(STDOUT_FILENO);
	for (;;) {
		if (tty && !json)
			fputs("\033[H\033[2J", stdout);
		show(json, only_pid, list_only);
		struct timespec ts = {.tv_sec = (time_t)every,
				      .tv_nsec = (long)((every - (double)(time_t)every) * 1e9)};
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
}
