/* time.h -- monotonic clock. */
#ifndef FLX_COMMON_TIME_H
#define FLX_COMMON_TIME_H

/* Seconds since an arbitrary fixed point, monotonic. */
double flx_time_now(void);

/* The same clock at the resolution of the kernel's tick (1-10 ms, and a
 * little behind), for timeouts: the vDSO serves it without reading the
 * clock source, where flx_time_now may be a system call (a source the vDSO
 * cannot read, e.g. HPET in a VM: 2.4 us a read in the SoftRoCE VM against
 * 0.1 us for this one).  Falls back to flx_time_now. */
double flx_time_coarse(void);

#endif
