/* mr.c -- the registration cache: a user buffer is registered once and
 * reused while it stays in the cache (keyed by address range, bounded by
 * FLX_IB_REG_CACHE entries, least recently used evicted first).  Entries
 * in use by a pending operation are never evicted.
 *
 * Like every verbs registration cache it assumes that a cached range is
 * not freed and remapped while flexcoll may still use it; a program that
 * recycles buffers that way sets FLX_IB_REG_CACHE=0. */
#include "transport/ib/ib.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

static void mr_log_failure(ib_mr_cache_t *cache, void *addr, size_t len)
{
    struct rlimit rl;
    char lim[64] = "unknown";

    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(lim, sizeof(lim), "unlimited");
        else
            snprintf(lim, sizeof(lim), "%llu KiB", (unsigned long long)rl.rlim_cur / 1024);
    }
    flx_error(NET, cache->rank, "ibv_reg_mr(%p, %zu bytes) failed: %m (locked-memory limit %s; "
              "raise it with ulimit -l unlimited or /etc/security/limits.conf)", addr, len, lim);
}

static void entry_free(ib_mr_entry_t *e)
{
    ibv_dereg_mr(e->mr);
    free(e);
}

/* drop the least recently used idle entry; 0 when none could go */
static int cache_evict_one(ib_mr_cache_t *cache)
{
    ib_mr_entry_t **pp, **victim = NULL;

    for (pp = &cache->head; *pp; pp = &(*pp)->next)
        if ((*pp)->refs == 0 && (victim == NULL || (*pp)->last_use < (*victim)->last_use))
            victim = pp;
    if (victim == NULL)
        return 0;
    {
        ib_mr_entry_t *e = *victim;
        *victim = e->next;
        entry_free(e);
    }
    cache->count--;
    cache->evictions++;
    return 1;
}

flx_status_t ib_mr_get(ib_mr_cache_t *cache, void *addr, size_t len, ib_mr_entry_t **entry_p)
{
    uintptr_t start = (uintptr_t)addr, end = start + (len ? len : 1);
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    ib_mr_entry_t *e;

    for (e = cache->head; e; e = e->next) {
        if (e->start <= start && end <= e->end) {
            e->refs++;
            e->last_use = ++cache->clock;
            cache->hits++;
            *entry_p = e;
            return FLX_OK;
        }
    }
    cache->misses++;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return FLX_ERR_NO_MEMORY;
    e->mr = ibv_reg_mr(cache->pd, addr, end - start, access);
    if (e->mr == NULL && (errno == ENOMEM || errno == EAGAIN) && cache_evict_one(cache))
        e->mr = ibv_reg_mr(cache->pd, addr, end - start, access);
    if (e->mr == NULL) {
        mr_log_failure(cache, addr, end - start);
        free(e);
        return FLX_ERR_NO_MEMORY;
    }
    e->start = start;
    e->end = end;
    e->refs = 1;
    e->last_use = ++cache->clock;
    e->next = cache->head;
    cache->head = e;
    cache->count++;
    while (cache->count > cache->max_entries && cache_evict_one(cache))
        ;
    *entry_p = e;
    return FLX_OK;
}

void ib_mr_put(ib_mr_cache_t *cache, ib_mr_entry_t *entry)
{
    entry->refs--;
    /* FLX_IB_REG_CACHE=0: registration lives for one use */
    while (cache->count > cache->max_entries && cache_evict_one(cache))
        ;
}

void ib_mr_cache_flush(ib_mr_cache_t *cache)
{
    while (cache->head) {
        ib_mr_entry_t *e = cache->head;
        cache->head = e->next;
        entry_free(e);
    }
    cache->count = 0;
}
