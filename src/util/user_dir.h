/* The per-user directory swverbs keeps its files in (the generated sysfs tree, the XRC
 * domain registry): $XDG_RUNTIME_DIR/swverbs when that is a directory of ours, else
 * /tmp/swverbs-<euid>. */
#ifndef SWV_UTIL_USER_DIR_H
#define SWV_UTIL_USER_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Writes the path into out (size bytes), making the directory (mode 0700) if missing.
 * True if it is then a directory owned by us with none of the mode bits in forbidden
 * (so nobody else can plant or read files there, as the caller needs). */
bool swv_user_dir(char *out, size_t size, mode_t forbidden);

#endif
