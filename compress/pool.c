/* pool.c -- the worker pool of the compression layer (see pool.h).
 *
 * Workers sleep on a condition variable; a run bumps the generation number,
 * wakes them, runs task 0 itself and waits until the count of finished
 * workers reaches nthreads - 1.  Created once with the selector, so a step
 * starts no thread. */
#include "compress/pool.h"
#include "common/log.h"
#include "common/thread.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct cmp_pool {
    int nthreads;
    pthread_t *threads;        /* nthreads - 1 workers                 */
    pthread_mutex_t lock;
    pthread_cond_t wake;       /* workers wait here for a generation   */
    pthread_cond_t done;       /* the caller waits here                */
    unsigned long generation;  /* bumped per run                       */
    int finished;              /* workers done with this generation    */
    int stop;
    cmp_pool_fn_t fn;
    void *arg;
};

typedef struct {
    cmp_pool_t *pool;
    int t;
} cmp_pool_worker_t;

static void *cmp_pool_worker(void *p)
{
    cmp_pool_worker_t *w = p;
    cmp_pool_t *pool = w->pool;
    const int t = w->t;
    unsigned long seen = 0;

    free(w);
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (pool->generation == seen && !pool->stop)
            pthread_cond_wait(&pool->wake, &pool->lock);
        if (pool->stop)
            break;
        seen = pool->generation;
        pthread_mutex_unlock(&pool->lock);
        pool->fn(pool->arg, t, pool->nthreads);
        pthread_mutex_lock(&pool->lock);
        if (++pool->finished == pool->nthreads - 1)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

static void cmp_pool_stop(cmp_pool_t *pool, int started)
{
    pthread_mutex_lock(&pool->lock);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < started; i++)
        pthread_join(pool->threads[i], NULL);
}

flx_status_t cmp_pool_create(int nthreads, cmp_pool_t **pool_p)
{
    cmp_pool_t *pool;
    int started = 0;

    if (nthreads < 1)
        nthreads = 1;
    pool = calloc(1, sizeof(*pool));
    if (pool == NULL)
        return FLX_ERR_NO_MEMORY;
    pool->nthreads = nthreads;
    pool->threads = calloc((size_t)nthreads, sizeof(pthread_t));
    if (pool->threads == NULL)
        goto err_free_pool;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    for (; started < nthreads - 1; started++) {
        cmp_pool_worker_t *w = malloc(sizeof(*w));
        int rc;

        if (w == NULL)
            goto err_stop_threads;
        w->pool = pool;
        w->t = started + 1;
        rc = flx_thread_start(&pool->threads[started], cmp_pool_worker, w, 0);
        if (rc != 0) {
            free(w);
            flx_error(COMPRESS, -1, "cannot start selection thread %d of %d (error %d)",
                      started + 1, nthreads, rc);
            goto err_stop_threads;
        }
    }
    *pool_p = pool;
    return FLX_OK;

err_stop_threads:
    cmp_pool_stop(pool, started);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    free(pool->threads);
err_free_pool:
    free(pool);
    return FLX_ERR_NO_MEMORY;
}

void cmp_pool_destroy(cmp_pool_t *pool)
{
    if (pool == NULL)
        return;
    cmp_pool_stop(pool, pool->nthreads - 1);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    free(pool->threads);
    free(pool);
}

int cmp_pool_size(const cmp_pool_t *pool) { return pool ? pool->nthreads : 1; }

void cmp_pool_run(cmp_pool_t *pool, cmp_pool_fn_t fn, void *arg)
{
    if (pool == NULL || pool->nthreads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->arg = arg;
    pool->finished = 0;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    fn(arg, 0, pool->nthreads);
    pthread_mutex_lock(&pool->lock);
    while (pool->finished < pool->nthreads - 1)
        pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}

int cmp_pool_ncpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    return n >= 1 ? (int)n : 1;
}
