#include "util/user_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static bool own_dir(const char *dir, mode_t forbidden)
{
	struct stat st;
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return false;
	return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	       !(st.st_mode & forbidden);
}

bool swv_user_dir(char *out, size_t size, mode_t forbidden)
{
	const char *xdg = secure_getenv("XDG_RUNTIME_DIR");
	struct stat st;
	if (xdg && xdg[0] == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) &&
	    st.st_uid == geteuid() && (size_t)snprintf(out, size, "%s/swverbs", xdg) < size &&
	    own_dir(out, forbidden))
		return true;
	return (size_t)snprintf(out, size, "/tmp/swverbs-%u", (unsigned)geteuid()) < size &&
	       own_dir(out, forbidden);
}
