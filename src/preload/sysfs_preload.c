/*
 * libswverbs-sysfs.so: preloaded by swverbs-run (after libswverbs), it applies
 * swv_sysfs_redirect (src/api/sysfs_tree.c) to the path-taking libc calls middleware
 * uses to find RDMA devices: the open, stat and access families, opendir/scandir,
 * readlink and realpath. A call whose path is not a swverbs device's (or one of the two
 * class directories) goes to libc unchanged after a two-character test, so programs pay
 * nothing on ordinary paths. Calls that take a directory fd and a relative path are left
 * alone: a directory opened through a mapped path already lies in the tree.
 *
 * Not covered: programs that make system calls themselves (static or Go binaries),
 * and libc-internal calls (fopen's open, for instance, which is why fopen is wrapped).
 */
#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* In libswverbs (SWVERBS_PRIVATE_SYSFS_1). */
extern int swv_sysfs_redirect(const char *path, char *out, size_t out_size);

/* A path that may be ours: "/sys/class/infiniband..." or "/dev/infiniband/...", with
 * any number of slashes. Cheap on purpose: it runs on every call. */
static inline int candidate(const char *p)
{
	if (!p || p[0] != '/')
		return 0;
	while (*p == '/')
		p++;
	return (p[0] == 's' && p[1] == 'y') || (p[0] == 'd' && p[1] == 'e');
}

/* The path to hand to libc: buf if path was mapped, path otherwise; NULL on error. */
static const char *map(const char *path, char *buf)
{
	if (!candidate(path))
		return path;
	int r = swv_sysfs_redirect(path, buf, PATH_MAX);
	return r > 0 ? buf : r == 0 ? path : NULL;
}

#define REAL(name) real_##name
#define DEFINE_REAL(ret, name, ...)                                                                \
	static ret (*real_##name)(__VA_ARGS__);                                                    \
	static void resolve_##name(void)                                                           \
	{                                                                                          \
		if (!real_##name)                                                                  \
			real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);                \
	}

/* open(2) family: a mode argument only comes with O_CREAT or O_TMPFILE. */
#define OPEN_MODE(flags, mode)                                                                     \
	do {                                                                                       \
		if ((flags) & (O_CREAT | __O_TMPFILE)) {                                           \
			va_list ap;                                                                \
			va_start(ap, flags);                                                       \
			mode = (mode_t)va_arg(ap, int);                                            \
			va_end(ap);                                                                \
		}                                                                                  \
	} while (0)

#define WRAP_OPEN(name)                                                                            \
	DEFINE_REAL(int, name, const char *, int, ...)                                             \
	EXPORT int name(const char *path, int flags, ...)                                          \
	{                                                                                          \
		char buf[PATH_MAX];                                                                \
		mode_t mode = 0;                                                                   \
		OPEN_MODE(flags, mode);                                                            \
		const char *p = map(path, buf);                                                    \
		if (!p)                                                                            \
			return -1;                                                                 \
		resolve_##name();                                                                  \
		if (!REAL(name))                                                                   \
			return errno = ENOSYS, -1;                                                 \
		return REAL(name)(p, flags, mode);                                                 \
	}
WRAP_OPEN(open)
WRAP_OPEN(open64)

#define WRAP_OPENAT(name)                                                                          \
	DEFINE_REAL(int, name, int, const char *, int, ...)                                        \
	EXPORT int name(int dirfd, const char *path, int flags, ...)                               \
	{                                                                                          \
		char buf[PATH_MAX];                                                                \
		mode_t mode = 0;                                                                   \
		OPEN_MODE(flags, mode);                                                            \
		const char *p = map(path, buf);                                                    \
		if (!p)                                                                            \
			return -1;                                                                 \
		resolve_##name();                                                                  \
		if (!REAL(name))                                                                   \
			return errno = ENOSYS, -1;                                                 \
		return REAL(name)(dirfd, p, flags, mode);                                          \
	}
WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)

/* Generates a wrapper whose path argument is named path; ARGS/CALL list the rest. */
#define WRAP_PATH(ret, err, name, PARAMS, ARGS)                                                    \
	DEFINE_REAL(ret, name, PARAMS)                                                             \
	EXPORT ret name(PARAMS)                                                                    \
	{                                                                                          \
		char buf[PATH_MAX];                                                                \
		const char *p = map(path, buf);                                                    \
		if (!p)                                                                            \
			return err;                                                                \
		resolve_##name();                                                                  \
		if (!REAL(name))                                                                   \
			return errno = ENOSYS, err;                                                \
		return REAL(name)(ARGS);                                                           \
	}
#define P(...) __VA_ARGS__

/* The fortified entry points (_FORTIFY_SOURCE callers). */
WRAP_PATH(int, -1, __open_2, P(const char *path, int flags), P(p, flags))
WRAP_PATH(int, -1, __open64_2, P(const char *path, int flags), P(p, flags))
WRAP_PATH(int, -1, __openat_2, P(int dirfd, const char *path, int flags), P(dirfd, p, flags))
WRAP_PATH(int, -1, __openat64_2, P(int dirfd, const char *path, int flags), P(dirfd, p, flags))
WRAP_PATH(FILE *, NULL, fopen, P(const char *path, const char *mode), P(p, mode))
WRAP_PATH(FILE *, NULL, fopen64, P(const char *path, const char *mode), P(p, mode))
WRAP_PATH(DIR *, NULL, opendir, P(const char *path), P(p))
WRAP_PATH(int, -1, stat, P(const char *path, struct stat *st), P(p, st))
WRAP_PATH(int, -1, stat64, P(const char *path, struct stat64 *st), P(p, st))
WRAP_PATH(int, -1, lstat, P(const char *path, struct stat *st), P(p, st))
WRAP_PATH(int, -1, lstat64, P(const char *path, struct stat64 *st), P(p, st))
WRAP_PATH(int, -1, fstatat, P(int dirfd, const char *path, struct stat *st, int fl),
	  P(dirfd, p, st, fl))
WRAP_PATH(int, -1, fstatat64, P(int dirfd, const char *path, struct stat64 *st, int fl),
	  P(dirfd, p, st, fl))
/* Programs built against glibc before 2.33 call these instead of stat & co. */
WRAP_PATH(int, -1, __xstat, P(int ver, const char *path, struct stat *st), P(ver, p, st))
WRAP_PATH(int, -1, __xstat64, P(int ver, const char *path, struct stat64 *st), P(ver, p, st))
WRAP_PATH(int, -1, __lxstat, P(int ver, const char *path, struct stat *st), P(ver, p, st))
WRAP_PATH(int, -1, __lxstat64, P(int ver, const char *path, struct stat64 *st), P(ver, p, st))
WRAP_PATH(int, -1, __fxstatat, P(int ver, int dirfd, const char *path, struct stat *st, int fl),
	  P(ver, dirfd, p, st, fl))
WRAP_PATH(int, -1, __fxstatat64, P(int ver, int dirfd, const char *path, struct stat64 *st, int fl),
	  P(ver, dirfd, p, st, fl))
WRAP_PATH(int, -1, statx,
	  P(int dirfd, const char *path, int fl, unsigned int mask, struct statx *stx),
	  P(dirfd, p, fl, mask, stx))
WRAP_PATH(int, -1, access, P(const char *path, int mode), P(p, mode))
WRAP_PATH(int, -1, faccessat, P(int dirfd, const char *path, int mode, int fl),
	  P(dirfd, p, mode, fl))
WRAP_PATH(int, -1, euidaccess, P(const char *path, int mode), P(p, mode))
WRAP_PATH(int, -1, eaccess, P(const char *path, int mode), P(p, mode))
WRAP_PATH(ssize_t, -1, readlink, P(const char *path, char *out, size_t size), P(p, out, size))
WRAP_PATH(ssize_t, -1, readlinkat, P(int dirfd, const char *path, char *out, size_t size),
	  P(dirfd, p, out, size))
WRAP_PATH(char *, NULL, realpath, P(const char *path, char *resolved), P(p, resolved))
WRAP_PATH(int, -1, scandir,
	  P(const char *path, struct dirent ***list, int (*sel)(const struct dirent *),
	    int (*cmp)(const struct dirent **, const struct dirent **)),
	  P(p, list, sel, cmp))
WRAP_PATH(int, -1, scandir64,
	  P(const char *path, struct dirent64 ***list, int (*sel)(const struct dirent64 *),
	    int (*cmp)(const struct dirent64 **, const struct dirent64 **)),
	  P(p, list, sel, cmp))
