/* thread.h -- starting the library's own threads. */
#ifndef FLX_COMMON_THREAD_H
#define FLX_COMMON_THREAD_H

#include <pthread.h>
#include <stddef.h>

/* How long flx_thread_start keeps trying while the system is short of
 * threads or stack memory (EAGAIN: a pids limit, a commit limit, the
 * processes of an exiting job not reaped yet). */
#define FLX_THREAD_RETRY_S 2.0

/* pthread_create(t_p, fn, arg) with a stack of stack_bytes (0: the
 * default), retried on EAGAIN for up to FLX_THREAD_RETRY_S; 0, or
 * pthread_create's error (EAGAIN when the shortage outlasted the retries).
 * *t_p is set only on success. */
int flx_thread_start(pthread_t *t_p, void *(*fn)(void *), void *arg, size_t stack_bytes);

#endif
