#include "common/thread.h"
#include "common/time.h"

#include <errno.h>
#include <limits.h>
#include <time.h>

int flx_thread_start(pthread_t *t_p, void *(*fn)(void *), void *arg, size_t stack_bytes)
{
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    double deadline = flx_time_now() + FLX_THREAD_RETRY_S;
    pthread_attr_t attr;
    pthread_t t;
    int rc;

    if ((rc = pthread_attr_init(&attr)) != 0)
        return rc;
    if (stack_bytes > 0 && stack_bytes < (size_t)PTHREAD_STACK_MIN)
        stack_bytes = (size_t)PTHREAD_STACK_MIN;
    if (stack_bytes > 0 && (rc = pthread_attr_setstacksize(&attr, stack_bytes)) != 0)
        goto out_destroy_attr;
    /* EAGAIN is a shortage that passes: threads or memory freed elsewhere */
    while ((rc = pthread_create(&t, &attr, fn, arg)) == EAGAIN && flx_time_now() < deadline)
        nanosleep(&pause, NULL);
    if (rc == 0)
        *t_p = t;
out_destroy_attr:
    pthread_attr_destroy(&attr);
    return rc;
}
