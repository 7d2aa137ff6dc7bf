/* time.h -- monotonic clock. */
#ifndef FLX_COMMON_TIME_H
#define FLX_COMMON_TIME_H

/* Seconds since an arbitrary fixed point, monotonic. */
double flx_time_now(void);

#endif
