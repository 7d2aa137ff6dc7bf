/* stall.h -- the seconds this process did not run. */
#ifndef FLX_COMMON_STALL_H
#define FLX_COMMON_STALL_H

#include <stdint.h>

/* A gap longer than this between two rounds of something that runs
 * steadily (a wait's progress rounds, a stall watch's ticks) means the
 * process did not run: stopped by SIGTSTP or SIGSTOP, as flxrun stops every
 * rank on Ctrl-Z and fg resumes them, or not scheduled for that long. */
#define FLX_STALL_S 1.0
/* how often a stall watch's thread wakes */
#define FLX_STALL_TICK_S 0.25

/* A thread that wakes every FLX_STALL_TICK_S and sums the gaps over
 * FLX_STALL_S between two of its wakeups, whatever the process does
 * meanwhile: the stops a library's own waits cannot see because they fall
 * where the caller computes.  A process that sleeps or blocks still runs
 * its watch, so only a stop (or starvation) counts. */
typedef struct flx_stall_watch flx_stall_watch_t;

/* A running watch, or NULL with errno set (no memory, or no thread). */
flx_stall_watch_t *flx_stall_watch_start(void);
/* Microseconds of gaps summed since the start, the one under way included
 * (a reader that ran first after a stop sees it before the thread counts
 * it); never less than an earlier read; any thread may call it.  0 for
 * NULL. */
uint64_t flx_stall_watch_us(flx_stall_watch_t *w);
/* Stops the thread (within one tick) and frees w; NULL is a no-op. */
void flx_stall_watch_stop(flx_stall_watch_t *w);

#endif
