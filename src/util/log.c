#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/log.h"

/* -1 = not read yet; reading the environment once is enough. */
static _Atomic int level = -1;

int swv_log_level(void)
{
	int l = atomic_load_explicit(&level, memory_order_relaxed);
	if (l < 0) {
		const char *s = getenv("SWVERBS_LOG");
		l = s ? atoi(s) : 0;
		atomic_store_explicit(&level, l, memory_order_relaxed);
	}
	return l;
}

void swv_log_write(int lvl, const char *fmt, ...)
{
	static const char *const names[] = {"", "error", "warn", "debug"};
	va_list ap;
	fprintf(stderr, "swverbs %s: ", names[lvl > 3 ? 3 : lvl]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
