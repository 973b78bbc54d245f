/*
 * ibv_get_sysfs_path / ibv_read_sysfs_file: historical libibverbs helpers that other
 * rdma-core libraries still import (librdmacm reads its ABI version with them) and
 * that ibv_devinfo uses for "board_id".
 *
 * They behave as rdma-core's do for ordinary paths. A swverbs device has no kernel
 * sysfs directory: below its ibdev_path/dev_path (/sys/class/infiniband/<name>,
 * .../infiniband_verbs/uverbs-<name>) the files are read from the generated tree
 * (src/api/sysfs_tree.c); if none can be made, reading there is refused (-1, ENOENT)
 * rather than answering from whatever the host has at that path.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/sysfs_tree.h"
#include "core/device.h"
#include "util/compiler.h"

/* Not in the public header (rdma-core's private driver.h), exported at IBVERBS_1.0. */
SWV_EXPORT const char *ibv_get_sysfs_path(void);
SWV_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

static pthread_once_t sysfs_once = PTHREAD_ONCE_INIT;
static const char *sysfs_path;
static char sysfs_env_copy[IBV_SYSFS_PATH_MAX];

static void sysfs_path_init(void)
{
	/* SYSFS_PATH relocates sysfs (tests, containers); ignored in set-id programs. */
	const char *env = secure_getenv("SYSFS_PATH");
	if (!env || !*env) {
		sysfs_path = "/sys";
		return;
	}
	snprintf(sysfs_env_copy, sizeof(sysfs_env_copy), "%s", env);
	size_t len = strlen(sysfs_env_copy);
	while (len > 1 && sysfs_env_copy[len - 1] == '/')
		sysfs_env_copy[--len] = '\0';
	sysfs_path = sysfs_env_copy;
}

SWV_EXPORT const char *ibv_get_sysfs_path(void)
{
	pthread_once(&sysfs_once, sysfs_path_init);
	return sysfs_path;
}

/* True if path is dir itself or lies below it ("dir/..."). */
static bool path_below(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return n > 0 && strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static bool is_swverbs_sysfs(const char *path)
{
	struct swv_device *devs;
	unsigned n;
	if (swv_devices_get(&devs, &n))
		return false; /* no devices configured: nothing of ours to protect */
	for (unsigned i = 0; i < n; i++)
		if (path_below(path, devs[i].ibdev.ibdev_path) ||
		    path_below(path, devs[i].ibdev.dev_path))
			return true;
	return false;
}

/*
 * Reads at most size bytes of dir/file into buf with one read(). A trailing newline
 * is replaced by NUL; otherwise the contents are NUL-terminated if there is room (an
 * empty file gives ""), and contents that fill buf exactly fail (they could not be
 * terminated). Returns the length of the string in buf, or -1 with errno.
 */
SWV_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char *path;
	if (!dir || !file || (!buf && size)) {
		errno = EINVAL;
		return -1;
	}
	if (asprintf(&path, "%s/%s", dir, file) < 0) {
		errno = ENOMEM;
		return -1;
	}
	char tree_path[PATH_MAX];
	int mapped = swv_sysfs_redirect(path, tree_path, sizeof(tree_path));
	if (mapped < 0 || (mapped == 0 && is_swverbs_sysfs(path))) {
		free(path);
		errno = mapped < 0 ? ENAMETOOLONG : ENOENT;
		return -1;
	}
	int fd = open(mapped ? tree_path : path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return -1;
	ssize_t len = read(fd, buf, size);
	int saved = errno;
	close(fd);
	if (len < 0) {
		errno = saved;
		return -1;
	}
	if (len == 0 && size > 0) {
		buf[0] = '\0'; /* rdma-core leaves buf untouched here; an empty string is kinder */
	} else if (len > 0) {
		if (buf[len - 1] == '\n') {
			buf[--len] = '\0';
		} else if ((size_t)len < size) {
			buf[len] = '\0';
		} else {
			errno = EOVERFLOW;
			return -1;
		}
	}
	return (int)len;
}
