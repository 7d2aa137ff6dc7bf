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

double flx_time_coarse(void)
{
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec ts;

    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0)
        return ts_seconds(&ts);
#endif
    return flx_time_now();
}
