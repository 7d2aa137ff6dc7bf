/* require.h -- assertions for the check tests' long loops: check's
 * ck_assert records a mark point (a write to a pipe) even when it passes,
 * and these loops check millions of values, so assert only on failure. */
#ifndef FLX_TESTS_REQUIRE_H
#define FLX_TESTS_REQUIRE_H

#include <check.h>

#define REQUIRE(cond)                                                                     \
    do {                                                                                  \
        if (!(cond))                                                                      \
            ck_abort_msg("%s:%d: assertion '%s' failed", __FILE__, __LINE__, #cond);     \
    } while (0)
#define REQUIRE_MSG(cond, ...)                                                            \
    do {                                                                                  \
        if (!(cond))                                                                      \
            ck_abort_msg(__VA_ARGS__);                                                    \
    } while (0)

#endif
