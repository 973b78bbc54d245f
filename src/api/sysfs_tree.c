/*
 * The sysfs view of swverbs devices (docs/design.md, "Device discovery as middleware does
 * it"). Middleware finds RDMA devices through files as well as through verbs: UCX stats
 * /dev/infiniband/<uverbs name> and reads /sys/class/infiniband/<dev>/ports/N/..., Open MPI
 * stats <sysfs>/class/infiniband, pyverbs lists <dev>/device/net/. A swverbs device has no
 * kernel objects, so this file writes the files a kernel device would have into a tree the
 * user owns and maps the paths that name a swverbs device onto it:
 *
 *  - the tree lives in $XDG_RUNTIME_DIR/swverbs (a directory the user owns) or else in
 *    /tmp/swverbs-<uid> (created 0700, refused unless owned by the user and closed to
 *    others), as sys-<hash of the contents>: processes with the same configuration share
 *    one tree, processes with another get their own, and a tree is never rewritten (it is
 *    built under a temporary name and renamed into place, so a reader never sees half);
 *  - it holds class/infiniband/<dev>/... and class/infiniband_verbs/<uverbs name>/... for
 *    every swverbs device, and symbolic links to the real entries of both class
 *    directories, so listing them shows real adapters as they are;
 *  - swv_sysfs_redirect maps /sys/class/infiniband and /sys/class/infiniband_verbs
 *    themselves, and the paths below them that name a swverbs device, onto the tree;
 *    /dev/infiniband/<uverbs name> onto /dev/null (an accessible character device, which
 *    is all UCX asks of it; no one can create a device node without privilege). Nothing
 *    else, so a real adapter's files are read where they are.
 *
 * libswverbs uses it for ibv_read_sysfs_file; libswverbs-sysfs.so, which only swverbs-run
 * preloads, applies it to the path-taking libc calls of unmodified programs.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/sysfs_tree.h"
#include "core/device.h"
#include "core/limits.h"
#include "net/addr.h"
#include "util/compiler.h"
#include "util/user_dir.h"

#ifndef IFF_LOWER_UP
#define IFF_LOWER_UP 0x10000
#endif

/* One file, directory or symbolic link of the tree, relative to its root. */
struct entry {
	char type; /* 'd', 'f', 'l' */
	char *path;
	char *data; /* file contents or link target */
};

struct tree {
	struct entry *e;
	size_t n, cap;
	bool oom;
};

static void add(struct tree *t, char type, const char *data, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void add(struct tree *t, char type, const char *data, const char *fmt, ...)
{
	if (t->oom)
		return;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		struct entry *e = realloc(t->e, cap * sizeof(*e));
		if (!e) {
			t->oom = true;
			return;
		}
		t->e = e;
		t->cap = cap;
	}
	va_list ap;
	va_start(ap, fmt);
	char *p = NULL;
	int rc = vasprintf(&p, fmt, ap);
	va_end(ap);
	char *d = data ? strdup(data) : NULL;
	if (rc < 0 || (data && !d)) {
		free(rc < 0 ? NULL : p);
		free(d);
		t->oom = true;
		return;
	}
	t->e[t->n++] = (struct entry){type, p, d};
}

static void tree_free(struct tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->e[i].path);
		free(t->e[i].data);
	}
	free(t->e);
}

/* The interface that carries addr (an up one if several do), as the port follows it. */
static void find_netdev(struct in_addr addr, char *name, size_t size, unsigned *flags)
{
	struct ifaddrs *ifa = NULL, *best = NULL;
	name[0] = '\0';
	*flags = IFF_UP | IFF_LOWER_UP;
	if (getifaddrs(&ifa) == 0) {
		for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
			if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
			    ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr != addr.s_addr)
				continue;
			if (!best || (!(best->ifa_flags & IFF_UP) && (i->ifa_flags & IFF_UP)))
				best = i;
		}
		if (best) {
			snprintf(name, size, "%s", best->ifa_name);
			*flags = best->ifa_flags;
		}
		freeifaddrs(ifa);
	}
	/* An address of the loopback subnet that no interface holds is carried by lo. */
	if (!name[0] && (ntohl(addr.s_addr) >> 24) == 127)
		snprintf(name, size, "lo");
}

static void gid_str(const uint8_t g[16], char *s, size_t size)
{
	snprintf(s, size,
		 "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x\n", g[0],
		 g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13],
		 g[14], g[15]);
}

static void add_device(struct tree *t, const struct swv_device *d)
{
	const struct swv_dev_config *c = d->cfg;
	const char *n = d->ibdev.name;
	bool ib = c->link == SWV_LINK_IB;
	char buf[128], ifname[IF_NAMESIZE];
	unsigned flags;
	uint64_t g = d->guid;

	find_netdev(c->addr, ifname, sizeof(ifname), &flags);
	add(t, 'd', NULL, "class/infiniband/%s", n);
	add(t, 'f', "1: CA\n", "class/infiniband/%s/node_type", n);
	snprintf(buf, sizeof(buf), "%04x:%04x:%04x:%04x\n", (unsigned)(g >> 48) & 0xffff,
		 (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
	add(t, 'f', buf, "class/infiniband/%s/node_guid", n);
	add(t, 'f', buf, "class/infiniband/%s/sys_image_guid", n);
	snprintf(buf, sizeof(buf), "swverbs %s\n", n);
	add(t, 'f', buf, "class/infiniband/%s/node_desc", n);
	add(t, 'f', "swverbs 0.1\n", "class/infiniband/%s/fw_ver", n);
	add(t, 'd', NULL, "class/infiniband/%s/device", n);
	add(t, 'f', "-1\n", "class/infiniband/%s/device/numa_node", n);
	add(t, 'd', NULL, "class/infiniband/%s/device/net", n);
	if (ifname[0]) {
		snprintf(buf, sizeof(buf), "/sys/class/net/%s", ifname);
		add(t, 'l', buf, "class/infiniband/%s/device/net/%s", n, ifname);
	}
	add(t, 'd', NULL, "class/infiniband/%s/ports", n);
	const char *p = "class/infiniband/%s/ports/1";
	add(t, 'd', NULL, p, n);
	bool active = (flags & (IFF_UP | IFF_LOWER_UP)) == (IFF_UP | IFF_LOWER_UP);
	add(t, 'f', active ? "4: ACTIVE\n" : "1: DOWN\n", "class/infiniband/%s/ports/1/state", n);
	add(t, 'f',
	    active	       ? "5: LinkUp\n"
	    : (flags & IFF_UP) ? "2: Polling\n"
			       : "3: Disabled\n",
	    "class/infiniband/%s/ports/1/phys_state", n);
	/* The figures ibv_query_port gives (src/api/query.c). */
	snprintf(buf, sizeof(buf), "0x%x\n", ib ? swv_lid_from_ip(c, c->addr) : 0);
	add(t, 'f', buf, "class/infiniband/%s/ports/1/lid", n);
	add(t, 'f', ib ? "0x1\n" : "0x0\n", "class/infiniband/%s/ports/1/sm_lid", n);
	add(t, 'f', "0\n", "class/infiniband/%s/ports/1/sm_sl", n);
	add(t, 'f', "0\n", "class/infiniband/%s/ports/1/lid_mask_count", n);
	snprintf(buf, sizeof(buf), "0x%08x\n",
		 (unsigned)(IBV_PORT_SYS_IMAGE_GUID_SUP | (ib ? 0 : IBV_PORT_IP_BASED_GIDS)));
	add(t, 'f', buf, "class/infiniband/%s/ports/1/cap_mask", n);
	add(t, 'f', "40 Gb/sec (4X QDR)\n", "class/infiniband/%s/ports/1/rate", n);
	add(t, 'f', ib ? "InfiniBand\n" : "Ethernet\n", "class/infiniband/%s/ports/1/link_layer",
	    n);
	add(t, 'd', NULL, "class/infiniband/%s/ports/1/gids", n);
	add(t, 'd', NULL, "class/infiniband/%s/ports/1/gid_attrs", n);
	add(t, 'd', NULL, "class/infiniband/%s/ports/1/gid_attrs/types", n);
	add(t, 'd', NULL, "class/infiniband/%s/ports/1/gid_attrs/ndevs", n);
	for (unsigned i = 0; i < SWV_GID_TBL_LEN; i++) {
		uint8_t raw[16] = {0};
		if (i == 0)
			swv_gid_of_device(c, raw);
		gid_str(raw, buf, sizeof(buf));
		add(t, 'f', buf, "class/infiniband/%s/ports/1/gids/%u", n, i);
	}
	/* Only the valid entry has attributes (the kernel refuses to read an empty one's). */
	add(t, 'f', ib ? "IB/RoCE v1\n" : "RoCE v2\n",
	    "class/infiniband/%s/ports/1/gid_attrs/types/0", n);
	if (!ib && ifname[0]) {
		snprintf(buf, sizeof(buf), "%s\n", ifname);
		add(t, 'f', buf, "class/infiniband/%s/ports/1/gid_attrs/ndevs/0", n);
	}
	add(t, 'd', NULL, "class/infiniband/%s/ports/1/pkeys", n);
	for (unsigned i = 0; i < c->npkeys; i++) {
		snprintf(buf, sizeof(buf), "0x%04x\n", c->pkeys[i]);
		add(t, 'f', buf, "class/infiniband/%s/ports/1/pkeys/%u", n, i);
	}
	const char *u = d->ibdev.dev_name;
	add(t, 'd', NULL, "class/infiniband_verbs/%s", u);
	snprintf(buf, sizeof(buf), "%s\n", n);
	add(t, 'f', buf, "class/infiniband_verbs/%s/ibdev", u);
	add(t, 'f', "1\n", "class/infiniband_verbs/%s/abi_version", u);
}

static bool is_swv_name(const struct swv_device *devs, unsigned n, const char *name, bool uverbs)
{
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(name, uverbs ? devs[i].ibdev.dev_name : devs[i].ibdev.name))
			return true;
	return false;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Links to the real entries of /sys/class/<cls>, so a listing shows them too. */
static void add_real(struct tree *t, const char *cls, const struct swv_device *devs, unsigned n,
		     bool uverbs)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/sys/class/%s", cls);
	DIR *d = opendir(dir);
	if (!d)
		return;
	/* Sorted, so the same host gives the same tree (and the same name). */
	char **names = NULL;
	size_t nn = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || is_swv_name(devs, n, de->d_name, uverbs) ||
		    (uverbs && !strcmp(de->d_name, "abi_version")))
			continue;
		char **nw = realloc(names, (nn + 1) * sizeof(*nw));
		char *s = strdup(de->d_name);
		if (!nw || !s) {
			free(s);
			names = nw ? nw : names;
			t->oom = true;
			break;
		}
		names = nw;
		names[nn++] = s;
	}
	closedir(d);
	if (nn)
		qsort(names, nn, sizeof(*names), cmp_names);
	for (size_t i = 0; i < nn; i++) {
		char target[PATH_MAX];
		snprintf(target, sizeof(target), "%s/%s", dir, names[i]);
		add(t, 'l', target, "class/%s/%s", cls, names[i]);
		free(names[i]);
	}
	free(names);
}

static void build(struct tree *t, const struct swv_device *devs, unsigned n)
{
	add(t, 'd', NULL, "class");
	add(t, 'd', NULL, "class/infiniband");
	add(t, 'd', NULL, "class/infiniband_verbs");
	/* libibverbs' uverbs ABI; the real file where there is one */
	if (access("/sys/class/infiniband_verbs/abi_version", F_OK) == 0)
		add(t, 'l', "/sys/class/infiniband_verbs/abi_version",
		    "class/infiniband_verbs/abi_version");
	else
		add(t, 'f', "6\n", "class/infiniband_verbs/abi_version");
	add_real(t, "infiniband", devs, n, false);
	add_real(t, "infiniband_verbs", devs, n, true);
	for (unsigned i = 0; i < n; i++)
		add_device(t, &devs[i]);
}

static uint64_t fnv(uint64_t h, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
	return h;
}

static uint64_t tree_hash(const struct tree *t)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < t->n; i++) {
		h = fnv(h, &t->e[i].type, 1);
		h = fnv(h, t->e[i].path, strlen(t->e[i].path) + 1);
		if (t->e[i].data)
			h = fnv(h, t->e[i].data, strlen(t->e[i].data) + 1);
	}
	return h;
}

static bool write_file(const char *path, const char *data)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (fd < 0)
		return false;
	size_t len = strlen(data);
	bool ok = write(fd, data, len) == (ssize_t)len;
	return close(fd) == 0 && ok;
}

/* Removes what write_tree created below tmp, in reverse order, then tmp. */
static void remove_tree(const char *tmp, const struct tree *t, size_t upto)
{
	char path[PATH_MAX];
	for (size_t i = upto; i-- > 0;) {
		snprintf(path, sizeof(path), "%s/%s", tmp, t->e[i].path);
		if (t->e[i].type == 'd')
			rmdir(path);
		else
			unlink(path);
	}
	rmdir(tmp);
}

static bool write_tree(const char *root, const char *base, const struct tree *t)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s/.tmp-XXXXXX", base) >= sizeof(tmp) ||
	    !mkdtemp(tmp))
		return false;
	for (size_t i = 0; i < t->n; i++) {
		const struct entry *e = &t->e[i];
		bool ok =
		    (size_t)snprintf(path, sizeof(path), "%s/%s", tmp, e->path) < sizeof(path);
		if (ok)
			ok = e->type == 'd'   ? mkdir(path, 0755) == 0
			     : e->type == 'l' ? symlink(e->data, path) == 0
					      : write_file(path, e->data);
		if (!ok) {
			remove_tree(tmp, t, i + 1);
			return false;
		}
	}
	chmod(tmp, 0755);
	if (rename(tmp, root) == 0)
		return true;
	/* Another process with the same configuration was first: its tree is this one. */
	int err = errno;
	remove_tree(tmp, t, t->n);
	struct stat st;
	return (err == EEXIST || err == ENOTEMPTY) && stat(root, &st) == 0 && S_ISDIR(st.st_mode);
}

static pthread_once_t root_once = PTHREAD_ONCE_INIT;
static char root_path[PATH_MAX]; /* "" = no tree */
/* Set while this thread builds the tree: the calls it makes (opendir of the real class
 * directories, through an interposing libswverbs-sysfs) must not be redirected. */
static __thread bool building;

static void root_init(void)
{
	struct swv_device *devs;
	unsigned n;
	char base[PATH_MAX - 32];
	struct tree t = {0};

	/* group and others may read the tree, never plant files in it */
	if (swv_devices_get(&devs, &n) || !swv_user_dir(base, sizeof(base), 022))
		return;
	building = true;
	build(&t, devs, n);
	if (!t.oom) {
		char root[PATH_MAX];
		snprintf(root, sizeof(root), "%s/sys-%016llx", base,
			 (unsigned long long)tree_hash(&t));
		struct stat st;
		if ((stat(root, &st) == 0 && S_ISDIR(st.st_mode)) || write_tree(root, base, &t))
			snprintf(root_path, sizeof(root_path), "%s", root);
	}
	building = false;
	tree_free(&t);
}

const char *swv_sysfs_root(void)
{
	pthread_once(&root_once, root_init);
	return root_path[0] ? root_path : NULL;
}

/* The device (by name or uverbs name) the path component at p names, or NULL. */
static const struct swv_device *named(const char *p, size_t len, bool uverbs)
{
	struct swv_device *devs;
	unsigned n;
	if (swv_devices_get(&devs, &n))
		return NULL;
	for (unsigned i = 0; i < n; i++) {
		const char *s = uverbs ? devs[i].ibdev.dev_name : devs[i].ibdev.name;
		if (strlen(s) == len && !memcmp(s, p, len))
			return &devs[i];
	}
	return NULL;
}

/* Copies path to out with "//" and "/./" collapsed and no trailing "/" or "/.". */
static bool normalise(const char *path, char *out, size_t size)
{
	size_t o = 0;
	for (const char *p = path; *p;) {
		if (*p == '/') {
			while (*p == '/')
				p++;
			if (p[0] == '.' && (p[1] == '/' || p[1] == '\0')) {
				p++;
				continue;
			}
			if (!*p)
				break;
			if (o + 1 >= size)
				return false;
			out[o++] = '/';
			continue;
		}
		if (o + 1 >= size)
			return false;
		out[o++] = *p++;
	}
	if (o == 0)
		out[o++] = '/';
	out[o] = '\0';
	return true;
}

/*
 * If path names a swverbs device's sysfs entry, /sys/class/infiniband or
 * /sys/class/infiniband_verbs, or a swverbs device node in /dev/infiniband, writes where
 * it is found instead to out and returns 1. Returns 0 (out untouched) for every other
 * path and while no tree can be made, -1 (ENAMETOOLONG) if out is too small.
 */
SWV_EXPORT int swv_sysfs_redirect(const char *path, char *out, size_t out_size)
{
	static const char dev[] = "/dev/infiniband/";
	static const char cls[] = "/sys/class/infiniband";
	char norm[PATH_MAX];

	if (!path || path[0] != '/' || building || !normalise(path, norm, sizeof(norm)))
		return 0;
	const char *rest;
	if (!strncmp(norm, dev, sizeof(dev) - 1)) {
		rest = norm + sizeof(dev) - 1;
		if (strchr(rest, '/') || !named(rest, strlen(rest), true))
			return 0;
		if (out_size < sizeof("/dev/null")) {
			errno = ENAMETOOLONG;
			return -1;
		}
		memcpy(out, "/dev/null", sizeof("/dev/null"));
		return 1;
	}
	if (strncmp(norm, cls, sizeof(cls) - 1))
		return 0;
	rest = norm + sizeof(cls) - 1;
	bool uverbs = !strncmp(rest, "_verbs", 6);
	if (uverbs)
		rest += 6;
	if (*rest == '/') {
		const char *name = rest + 1, *end = strchrnul(name, '/');
		if (!named(name, (size_t)(end - name), uverbs))
			return 0;
	} else if (*rest) {
		return 0; /* /sys/class/infiniband_foo */
	}
	const char *root = swv_sysfs_root();
	if (!root)
		return 0;
	if ((size_t)snprintf(out, out_size, "%s%s", root, norm + 4) >= out_size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 1;
}
