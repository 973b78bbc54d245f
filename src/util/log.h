/* Diagnostics to stderr, enabled by SWVERBS_LOG=1 (errors) .. 3 (debug). */
#ifndef SWV_UTIL_LOG_H
#define SWV_UTIL_LOG_H

int swv_log_level(void);
void swv_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define SWV_LOG_ERR   1
#define SWV_LOG_WARN  2
#define SWV_LOG_DEBUG 3
#define swv_log(level, ...)                                                                        \
	do {                                                                                       \
		if (swv_log_level() >= (level))                                                    \
			swv_log_write(level, __VA_ARGS__);                                         \
	} while (0)

#endif
