/* time.h -- monotonic clock. */
#ifndef FLX_COMMON_TIME_H
#define FLX_COMMON_TIME_H

/* Seconds since an arbitrary fixed point, monotonic. */
double flx_time_now(void);

/* The same clock at the resolution of the kernel's tick (1-10 ms), for
 * timeouts: always read in user space, where flx_time_now may be a system
 * call (a clock source the vDSO cannot read, e.g. HPET in a VM: 2.4 us a
 * read in the SoftRoCE VM against 0.1 us for this one). */
double flx_time_coarse(void);
/* Its resolution in seconds (what a deadline on it may come late by). */
double flx_time_coarse_res(void);

#endif
