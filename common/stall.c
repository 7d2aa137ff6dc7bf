#include "common/stall.h"
#include "common/thread.h"
#include "common/time.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct flx_stall_watch {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;  /* on CLOCK_MONOTONIC: stop wakes the thread */
    int stop;
    double last;          /* the last tick; with stalled_us under lock */
    uint64_t stalled_us;
};

static void *stall_watch_run(void *arg)
{
    flx_stall_watch_t *w = arg;

    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        struct timespec ts;
        double now;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)(FLX_STALL_TICK_S * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cond, &w->lock, &ts);
        now = flx_time_now();
        if (now - w->last > FLX_STALL_S)
            w->stalled_us += (uint64_t)((now - w->last) * 1e6);
        w->last = now;
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

flx_stall_watch_t *flx_stall_watch_start(void)
{
    flx_stall_watch_t *w = calloc(1, sizeof(*w));
    pthread_condattr_t ca;
    int rc;

    if (w == NULL)
        return NULL;
    if ((rc = pthread_condattr_init(&ca)) != 0)
        goto err_free;
    if ((rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)) == 0)
        rc = pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        goto err_free;
    pthread_mutex_init(&w->lock, NULL);
    w->last = flx_time_now();
    if ((rc = flx_thread_start(&w->thread, stall_watch_run, w, 0)) != 0)
        goto err_destroy_cond;
    return w;
err_destroy_cond:
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
err_free:
    free(w);
    errno = rc;
    return NULL;
}

uint64_t flx_stall_watch_us(flx_stall_watch_t *w)
{
    uint64_t us;
    double now;

    if (w == NULL)
        return 0;
    pthread_mutex_lock(&w->lock);
    us = w->stalled_us;
    now = flx_time_now();
    if (now - w->last > FLX_STALL_S) /* a gap the thread has not woken to count yet */
        us += (uint64_t)((now - w->last) * 1e6);
    pthread_mutex_unlock(&w->lock);
    return us;
}

void flx_stall_watch_stop(flx_stall_watch_t *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w);
}
