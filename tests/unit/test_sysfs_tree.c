/*
 * The sysfs view of swverbs devices (src/api/sysfs_tree.c): which paths are mapped onto
 * the generated tree and which are left alone, what the tree's files say for an IB-style
 * and a RoCE-style device, that the tree is private to the user, and that processes
 * building it at once agree on one.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/sysfs_tree.h"
#include "check.h"

static char out[PATH_MAX];

static int redirect(const char *p)
{
	memset(out, 0, sizeof(out));
	return swv_sysfs_redirect(p, out, sizeof(out));
}

/* Contents of root/rel without the trailing newline. */
static const char *slurp(const char *root, const char *rel)
{
	static char buf[256];
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return NULL;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	if (buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	return buf;
}

int main(void)
{
	char xdg[] = "/tmp/swv-sysfs-tree-XXXXXX";
	CHECK_PTR(mkdtemp(xdg));
	setenv("XDG_RUNTIME_DIR", xdg, 1);
	setenv("SWVERBS_DEVICES", "swv0=127.0.0.1/8;swr0=127.0.0.3/8,roce,pkeys=0x8001:0x7fff", 1);
	unsetenv("SWVERBS_CONFIG");
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK_PTR(list);
	CHECK_EQ(n, 2);
	/* uverbs names no kernel gives (it names its nodes uverbs<N>) */
	CHECK(strcmp(list[0]->dev_name, "uverbs-swv0") == 0);
	CHECK(strcmp(list[1]->dev_name, "uverbs-swr0") == 0);
	CHECK(strcmp(list[0]->dev_path, "/sys/class/infiniband_verbs/uverbs-swv0") == 0);

	/* Processes of one configuration building at once agree on one tree and leave no
	 * half-built one behind (each builds under a temporary name and renames it). */
	enum { KIDS = 4 };
	int fds[2];
	CHECK_OK(pipe(fds));
	for (int k = 0; k < KIDS; k++) {
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			const char *r = swv_sysfs_root();
			char line[PATH_MAX + 1];
			int len = snprintf(line, sizeof(line), "%s\n", r ? r : "NULL");
			_exit(write(fds[1], line, (size_t)len) == len ? 0 : 1);
		}
	}
	close(fds[1]);
	for (int k = 0; k < KIDS; k++) {
		int status;
		CHECK(wait(&status) > 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	FILE *kids = fdopen(fds[0], "r");
	CHECK_PTR(kids);
	char first[PATH_MAX + 1] = "", line[PATH_MAX + 1];
	int nlines = 0;
	while (fgets(line, sizeof(line), kids)) {
		CHECK(strcmp(line, "NULL\n") != 0);
		if (!nlines++)
			snprintf(first, sizeof(first), "%s", line);
		CHECK(strcmp(line, first) == 0);
	}
	fclose(kids);
	CHECK_EQ(nlines, KIDS);
	char cmd0[PATH_MAX + 64];
	snprintf(cmd0, sizeof(cmd0), "test -z \"$(ls -A %s/swverbs | grep -v '^sys-')\"", xdg);
	CHECK_EQ(system(cmd0), 0);
	first[strlen(first) - 1] = '\0';

	/* Paths that are not ours stay where they are, and nothing is built for them. */
	const char *keep[] = {"/sys/class/net/lo",
			      "/sys/class/infiniband_foo",
			      "/sys/class/infiniband/mlx5_0",
			      "/sys/class/infiniband/swv0X/ports",
			      "/sys/class/infiniband/swv",
			      "/dev/infiniband/uverbs0",
			      "/dev/infiniband/rdma_cm",
			      "/dev/infiniband/uverbs-swv0/x",
			      "/sys/class/infiniband_verbs/uverbs0",
			      "relative/sys/class/infiniband",
			      "sys/class/infiniband",
			      "/",
			      ""};
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
		CHECK_EQ(redirect(keep[i]), 0);
		CHECK_EQ(out[0], '\0');
	}
	CHECK_EQ(swv_sysfs_redirect(NULL, out, sizeof(out)), 0);

	/* The device nodes: an accessible character device. */
	CHECK_EQ(redirect("/dev/infiniband/uverbs-swv0"), 1);
	CHECK(strcmp(out, "/dev/null") == 0);
	CHECK_EQ(redirect("//dev//infiniband/./uverbs-swr0/"), 1);
	CHECK(strcmp(out, "/dev/null") == 0);
	struct stat st;
	CHECK_OK(stat(out, &st));
	CHECK(S_ISCHR(st.st_mode));

	/* The class directories and what lies below a swverbs device. */
	CHECK_EQ(redirect("/sys/class/infiniband"), 1);
	char root[PATH_MAX];
	size_t rl = strlen(out) - strlen("/class/infiniband");
	CHECK(strcmp(out + rl, "/class/infiniband") == 0);
	memcpy(root, out, rl);
	root[rl] = '\0';
	CHECK(strcmp(root, swv_sysfs_root()) == 0);
	CHECK(strcmp(root, first) == 0);	      /* the tree the children built */
	CHECK_EQ(strncmp(root, xdg, strlen(xdg)), 0); /* in $XDG_RUNTIME_DIR/swverbs/ */
	CHECK_EQ(redirect("/sys/class/infiniband/"), 1);
	CHECK(strncmp(out, root, rl) == 0 && strcmp(out + rl, "/class/infiniband") == 0);
	CHECK_EQ(redirect("/sys/class/infiniband/swv0/ports/1/gids/0"), 1);
	CHECK(strcmp(out + rl, "/class/infiniband/swv0/ports/1/gids/0") == 0);
	CHECK_EQ(redirect("/sys/class/infiniband_verbs"), 1);
	CHECK_EQ(redirect("/sys/class/infiniband_verbs/uverbs-swr0/ibdev"), 1);
	CHECK(strcmp(out + rl, "/class/infiniband_verbs/uverbs-swr0/ibdev") == 0);
	char small[8];
	errno = 0;
	CHECK_EQ(swv_sysfs_redirect("/sys/class/infiniband/swv0", small, sizeof(small)), -1);
	CHECK_EQ(errno, ENAMETOOLONG);

	/* The tree is the user's alone. */
	char base[PATH_MAX];
	snprintf(base, sizeof(base), "%s/swverbs", xdg);
	CHECK_OK(lstat(base, &st));
	CHECK(S_ISDIR(st.st_mode));
	CHECK_EQ(st.st_mode & 077, 0);
	CHECK_EQ(st.st_uid, geteuid());

	/* IB-style swv0 on 127.0.0.1: LID 1, fe80::GUID, lo. */
	CHECK(strcmp(slurp(root, "class/infiniband/swv0/node_type"), "1: CA") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swv0/node_guid"), "0253:57fe:7f00:0001") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swv0/ports/1/state"), "4: ACTIVE") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swv0/ports/1/lid"), "0x1") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swv0/ports/1/link_layer"), "InfiniBand") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swv0/ports/1/gids/0"),
		     "fe80:0000:0000:0000:0253:57fe:7f00:0001") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swv0/ports/1/gids/1"),
		     "0000:0000:0000:0000:0000:0000:0000:0000") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swv0/ports/1/gid_attrs/types/0"),
		     "IB/RoCE v1") == 0);
	CHECK(slurp(root, "class/infiniband/swv0/ports/1/gid_attrs/types/1") == NULL);
	CHECK(strcmp(slurp(root, "class/infiniband/swv0/ports/1/pkeys/0"), "0xffff") == 0);
	char p[PATH_MAX + 64], link[PATH_MAX];
	snprintf(p, sizeof(p), "%s/class/infiniband/swv0/device/net/lo", root);
	ssize_t ll = readlink(p, link, sizeof(link) - 1);
	CHECK(ll > 0);
	link[ll] = '\0';
	CHECK(strcmp(link, "/sys/class/net/lo") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband_verbs/uverbs-swv0/ibdev"), "swv0") == 0);

	/* RoCE-style swr0 on 127.0.0.3: no LID, ::ffff:IPv4 RoCE v2, its own P_Keys. */
	CHECK(strcmp(slurp(root, "class/infiniband/swr0/ports/1/lid"), "0x0") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swr0/ports/1/link_layer"), "Ethernet") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swr0/ports/1/gids/0"),
		     "0000:0000:0000:0000:0000:ffff:7f00:0003") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swr0/ports/1/gid_attrs/types/0"), "RoCE v2") ==
	      0);
	CHECK(strcmp(slurp(root, "class/infiniband/swr0/ports/1/gid_attrs/ndevs/0"), "lo") == 0);
	CHECK(strcmp(slurp(root, "class/infiniband/swr0/ports/1/pkeys/1"), "0x7fff") == 0);
	CHECK(slurp(root, "class/infiniband/swr0/ports/1/pkeys/2") == NULL);

	/* Every entry of the class directory is a swverbs device or a link to a real one. */
	snprintf(p, sizeof(p), "%s/class/infiniband", root);
	char cmd[PATH_MAX + 128];
	snprintf(cmd, sizeof(cmd), "test $(ls %s | grep -c '^sw[vr]0$') = 2", p);
	CHECK_EQ(system(cmd), 0);

	snprintf(cmd, sizeof(cmd), "rm -rf %s", xdg);
	CHECK_EQ(system(cmd), 0);
	ibv_free_device_list(list);
	return 0;
}
