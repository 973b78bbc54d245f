/* Small language helpers shared by every module. */
#ifndef SWV_UTIL_COMPILER_H
#define SWV_UTIL_COMPILER_H

#include <stddef.h>

#define swv_container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#define swv_likely(x)                       __builtin_expect(!!(x), 1)
#define swv_unlikely(x)                     __builtin_expect(!!(x), 0)
#define SWV_CACHELINE                       64
#define SWV_ARRAY_SIZE(a)                   (sizeof(a) / sizeof((a)[0]))
#define SWV_MIN(a, b)                       ((a) < (b) ? (a) : (b))
#define SWV_MAX(a, b)                       ((a) > (b) ? (a) : (b))
/* Functions exported from libswverbs (listed in src/api/libswverbs.map). */
#define SWV_EXPORT                          __attribute__((visibility("default")))

#endif
