/* Assertions for swverbs tests: print where and why, then exit non-zero. */
#ifndef SWV_TEST_CHECK_H
#define SWV_TEST_CHECK_H

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: CHECK failed: %s (errno %d)\n", __FILE__,          \
				__LINE__, #cond, errno);                                           \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#define CHECK_EQ(a, b)                                                                             \
	do {                                                                                       \
		long long _a = (long long)(a), _b = (long long)(b);                                \
		if (_a != _b) {                                                                    \
			fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, expected %s == %lld\n", \
				__FILE__, __LINE__, #a, _a, #b, _b);                               \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* For calls returning 0 or an errno value. */
#define CHECK_OK(call)                                                                             \
	do {                                                                                       \
		int _r = (call);                                                                   \
		if (_r != 0) {                                                                     \
			fprintf(stderr, "%s:%d: %s returned %d (%s)\n", __FILE__, __LINE__, #call, \
				_r, strerror(_r > 0 ? _r : -_r));                                  \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#define CHECK_PTR(p)                                                                               \
	do {                                                                                       \
		if (!(p)) {                                                                        \
			fprintf(stderr, "%s:%d: %s is NULL (errno %d: %s)\n", __FILE__, __LINE__, #p, \
				errno, strerror(errno));                                           \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* For calls returning a pointer, or NULL with errno: expr fails with errno err. */
#define CHECK_NULL_ERRNO(expr, err)                                                                \
	do {                                                                                       \
		errno = 0;                                                                         \
		CHECK((expr) == NULL);                                                             \
		CHECK_EQ(errno, err);                                                              \
	} while (0)

/* Every function pointer of *(obj) from member 'first' to the end is set, and there are
 * 'count' of them: for callback tables that inline wrappers call unchecked. */
#define CHECK_FNS_SET(obj, first, count)                                                           \
	do {                                                                                       \
		size_t _off = offsetof(__typeof__(*(obj)), first);                                 \
		void (*const *_fn)(void) = (void (*const *)(void))((const char *)(obj) + _off);    \
		size_t _nfn = (sizeof(*(obj)) - _off) / sizeof(*_fn);                              \
		CHECK_EQ(_nfn, count);                                                             \
		for (size_t _i = 0; _i < _nfn; _i++)                                               \
			CHECK(_fn[_i] != NULL);                                                    \
	} while (0)

#endif
