#include "common/stall.h"
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
    uint64_t stalled_us;  /* atomic */
};

static void *stall_watch_run(void *arg)
{
    flx_stall_watch_t *w = arg;
    double last = flx_time_now();

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
        if (now - last > FLX_STALL_S)
            __atomic_fetch_add(&w->stalled_us, (uint64_t)((now - last) * 1e6), __ATOMIC_RELAXED);
        last = now;
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
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        goto err_free;
    pthread_mutex_init(&w->lock, NULL);
    if ((rc = pthread_create(&w->thread, NULL, stall_watch_run, w)) != 0)
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
    return w ? __atomic_load_n(&w->stalled_us, __ATOMIC_RELAXED) : 0;
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
