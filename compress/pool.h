/* pool.h -- a small fixed pool of worker threads for the O(n) passes of the
 * compression layer (counting, histograms) on large vectors.
 *
 * cmp_pool_run(pool, fn, arg) calls fn(arg, t, nthreads) once for every t in
 * [0, nthreads): t = 0 on the calling thread, the others on the pool's
 * workers, and returns when all have returned.  One run at a time per pool
 * (the owner serialises).  A pool of one thread starts no thread at all.
 */
#ifndef FLX_COMPRESS_POOL_H
#define FLX_COMPRESS_POOL_H

#include "flexcoll.h"

typedef struct cmp_pool cmp_pool_t;
typedef void (*cmp_pool_fn_t)(void *arg, int t, int nthreads);

/* nthreads >= 1.  On success *pool_p owns nthreads - 1 started threads. */
flx_status_t cmp_pool_create(int nthreads, cmp_pool_t **pool_p);
/* Joins the workers.  NULL is a no-op. */
void cmp_pool_destroy(cmp_pool_t *pool);
int cmp_pool_size(const cmp_pool_t *pool);
void cmp_pool_run(cmp_pool_t *pool, cmp_pool_fn_t fn, void *arg);
/* Online processors of this machine (>= 1). */
int cmp_pool_ncpus(void);

#endif
