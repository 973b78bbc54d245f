/* The sysfs view of swverbs devices (src/api/sysfs_tree.c). Owner: api. */
#ifndef SWV_API_SYSFS_TREE_H
#define SWV_API_SYSFS_TREE_H

#include <stddef.h>

/* The root of this process's generated tree (holds class/...), or NULL if none can be
 * made. Built at the first call. */
const char *swv_sysfs_root(void);
/* Maps a path onto the tree (rules in sysfs_tree.c): 1 = mapped into out, 0 = not ours,
 * -1 = out too small (errno ENAMETOOLONG). */
int swv_sysfs_redirect(const char *path, char *out, size_t out_size);

#endif
