#include "common/time.h"

#include <time.h>

static double ts_seconds(const struct timespec *ts)
{
    return (double)ts->tv_sec + (double)ts->tv_nsec * 1e-9;
}

double flx_time_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts_seconds(&ts);
}

/* fn (clock_gettime or clock_getres) on the coarse clock; -1 without one */
static int coarse_call(int (*fn)(clockid_t, struct timespec *), double *s_p)
{
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec ts;

    if (fn(CLOCK_MONOTONIC_COARSE, &ts) == 0) {
        *s_p = ts_seconds(&ts);
        return 0;
    }
#endif
    (void)fn;
    (void)s_p;
    return -1;
}

double flx_time_coarse(void)
{
    double s;

    return coarse_call(clock_gettime, &s) == 0 ? s : flx_time_now();
}

double flx_time_coarse_res(void)
{
    double s;

    return coarse_call(clock_getres, &s) == 0 ? s : 0;
}
