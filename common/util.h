/* util.h -- small helpers shared by every layer. */
#ifndef FLX_COMMON_UTIL_H
#define FLX_COMMON_UTIL_H

#include <stddef.h>

#define FLX_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FLX_MAX(a, b) ((a) > (b) ? (a) : (b))
#define FLX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define FLX_DIV_ROUND_UP(a, b) (((a) + (b) - 1) / (b))
#define flx_likely(x) __builtin_expect(!!(x), 1)
#define flx_unlikely(x) __builtin_expect(!!(x), 0)

#endif
