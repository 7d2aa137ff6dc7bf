/* mr.c -- memory registration.
 *
 * A registration pins the pages a virtual range had when it was made; if
 * the program frees that memory and malloc hands the same addresses out
 * again with new pages (glibc unmaps and trims freely), a cached
 * registration would silently point at the old pages.  So only ranges
 * known to stay mapped are cached: those the program registered with
 * flx_mem_register() and the library's own scratch memory.  They are
 * keyed by address range, bounded by FLX_IB_REG_CACHE entries, and the
 * least recently used idle one is evicted first (it is registered again on
 * its next use).  A range the device cannot pin whole (the locked-memory
 * limit is lower than the range) is marked once, with a warning, and from
 * then on treated as any other buffer.  Any other buffer's large message is copied through a
 * staging slot: FLX_IB_STAGE_SLOTS buffers of FLX_IB_STAGE_SIZE bytes in one
 * block, registered once at first use (NCCL's way with unregistered
 * memory; a memcpy costs less than an ibv_reg_mr + ibv_dereg_mr pair at
 * these sizes).  Only a message bigger than a slot, or one that finds every
 * slot busy, gets a registration for that one message.
 *
 * FLX_IB_LEAVE_PINNED=yes (Open MPI's "leave pinned"): a constructor,
 * before main, tells glibc to use one arena for every thread (M_ARENA_MAX
 * 1), to serve every allocation from its heap (M_MMAP_MAX 0) and never to
 * trim it (M_TRIM_THRESHOLD max), so memory that malloc handed out keeps
 * its pages at its address for the life of the process, and every
 * buffer's registration is cached.  Not for a program that munmaps (or
 * malloc_trims) memory it passed to a collective, nor for a library
 * loaded with dlopen after the program allocated its buffers. */
#include "transport/ib/ib.h"
#include "common/config.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#if defined(HAVE_MALLOPT) && defined(HAVE_MALLOC_H)
#include <malloc.h>
#endif

static int mr_leave_pinned;

#if defined(HAVE_MALLOPT) && defined(HAVE_MALLOC_H)
/* before main, so that no buffer the program allocates can be unmapped */
__attribute__((constructor)) static void mr_leave_pinned_init(void)
{
    const char *v = getenv("FLX_IB_LEAVE_PINNED");
    int on = 0;

    if (v == NULL || flx_parse_bool(v, &on) != 0 || !on) /* malformed: config.c says so */
        return;
    /* one arena: a thread's own arena would mmap a large request whatever
     * M_MMAP_MAX says, and munmap it on free */
    mr_leave_pinned = mallopt(M_ARENA_MAX, 1) == 1 && mallopt(M_MMAP_MAX, 0) == 1 &&
                      mallopt(M_TRIM_THRESHOLD, -1) == 1;
}
#endif

int ib_mr_leave_pinned_active(void) { return mr_leave_pinned; }

void ib_memlock_str(char *buf, size_t n)
{
    struct rlimit rl;

    snprintf(buf, n, "unknown");
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(buf, n, "unlimited");
        else
            snprintf(buf, n, "%llu KiB", (unsigned long long)rl.rlim_cur / 1024);
    }
}

static void mr_log_failure(ib_mr_cache_t *cache, void *addr, size_t len)
{
    char lim[64];

    ib_memlock_str(lim, sizeof(lim));
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

/* The range the program promised to keep mapped (cacheable) that holds
 * [start, end), or NULL; one the device could not pin whole does not count */
static ib_range_t *range_pinned(const ib_mr_cache_t *cache, uintptr_t start, uintptr_t end)
{
    for (int i = 0; i < cache->npinned; i++)
        if (cache->pinned[i].start <= start && end <= cache->pinned[i].end)
            return cache->pinned[i].too_big ? NULL : &cache->pinned[i];
    return NULL;
}

static flx_status_t mr_register(ib_mr_cache_t *cache, void *addr, uintptr_t start,
                                uintptr_t end, int quiet, ib_mr_entry_t **entry_p);

static flx_status_t mr_get(ib_mr_cache_t *cache, void *addr, size_t len, int transient_ok,
                           int quiet, ib_mr_entry_t **entry_p);

flx_status_t ib_mr_get(ib_mr_cache_t *cache, void *addr, size_t len, ib_mr_entry_t **entry_p)
{
    return mr_get(cache, addr, len, 1, 0, entry_p);
}

flx_status_t ib_mr_get_quiet(ib_mr_cache_t *cache, void *addr, size_t len, int quiet,
                             ib_mr_entry_t **entry_p)
{
    return mr_get(cache, addr, len, 1, quiet, entry_p);
}

flx_status_t ib_mr_get_cached(ib_mr_cache_t *cache, void *addr, size_t len,
                              ib_mr_entry_t **entry_p)
{
    return mr_get(cache, addr, len, 0, 0, entry_p);
}

/* quiet: a registration the device refuses is FLX_ERR_NOT_FOUND, not logged */
static flx_status_t mr_get(ib_mr_cache_t *cache, void *addr, size_t len, int transient_ok,
                           int quiet, ib_mr_entry_t **entry_p)
{
    uintptr_t start = (uintptr_t)addr, end = start + (len ? len : 1);
    void *const msg_addr = addr;
    const uintptr_t msg_end = end;
    ib_range_t *range;
    ib_mr_entry_t *e;
    flx_status_t st;

    for (e = cache->head; e; e = e->next) {
        if (e->start <= start && end <= e->end) {
            e->refs++;
            e->last_use = ++cache->clock;
            cache->hits++;
            *entry_p = e;
            return FLX_OK;
        }
    }
    range = range_pinned(cache, start, end);
    if (!cache->leave_pinned && range == NULL) {
        /* not known to stay mapped: a registration for this message only */
        if (!transient_ok)
            return FLX_ERR_NOT_FOUND;
        st = mr_register(cache, addr, start, end, quiet, &e);
        if (st != FLX_OK)
            return st;
        e->transient = 1;
        cache->transient++;
        *entry_p = e;
        return FLX_OK;
    }
    cache->misses++;
    /* cache the whole pinned range, so that every chunk of it hits */
    if (range != NULL) {
        start = range->start;
        end = range->end;
        addr = (void *)start;
    }
    /* quiet where something else may still work: a staging slot, or a
     * registration of this message alone */
    st = mr_register(cache, addr, start, end,
                     quiet || !transient_ok ||
                         (range != NULL && (start != (uintptr_t)msg_addr || end != msg_end)),
                     &e);
    if (st == FLX_ERR_NOT_FOUND && range == NULL)
        return st; /* leave pinned: staging next */
    if (st == FLX_ERR_NOT_FOUND) { /* from now on like any other buffer */
        char lim[64];
        int err = errno;

        ib_memlock_str(lim, sizeof(lim));
        range->too_big = 1;
        flx_warn(NET, cache->rank, "ib: cannot register the whole of the registered range "
                 "[%p, +%zu): %s (locked-memory limit %s); its large messages are staged or "
                 "registered one by one (ulimit -l unlimited pins it whole)", addr,
                 (size_t)(end - start), strerror(err), lim);
        return mr_get(cache, msg_addr, len, transient_ok, quiet, entry_p);
    }
    if (st != FLX_OK)
        return st;
    if (e->read_only) {
        /* never cached: the program may make the pages writable later (or
         * a private mapping's copy-on-write may replace them), and a
         * cached read-only registration would then send the old pages */
        e->transient = 1;
        cache->transient++;
        *entry_p = e;
        return FLX_OK;
    }
    e->next = cache->head;
    cache->head = e;
    cache->count++;
    while (cache->count > cache->max_entries && cache_evict_one(cache))
        ;
    *entry_p = e;
    return FLX_OK;
}

/* FLX_ERR_NOT_FOUND (errno kept, nothing logged) where the device refuses
 * and quiet is set; else its failure is logged */
static flx_status_t mr_register(ib_mr_cache_t *cache, void *addr, uintptr_t start,
                                uintptr_t end, int quiet, ib_mr_entry_t **entry_p)
{
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    ib_mr_entry_t *e;

    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return FLX_ERR_NO_MEMORY;
    e->mr = ibv_reg_mr(cache->pd, addr, end - start, access);
    /* out of locked memory: idle cached registrations go, oldest first */
    while (e->mr == NULL && (errno == ENOMEM || errno == EAGAIN) && cache_evict_one(cache))
        e->mr = ibv_reg_mr(cache->pd, addr, end - start, access);
    /* read-only pages (a const send buffer: the ring allreduce sends from
     * the caller's input): the device may read them, so register them for
     * that; a receive into such a range fails at the device, not silently */
    if (e->mr == NULL && (errno == EFAULT || errno == EACCES)) {
        e->mr = ibv_reg_mr(cache->pd, addr, end - start, 0);
        e->read_only = e->mr != NULL;
        if (e->mr != NULL)
            flx_debug(NET, cache->rank, "ib: %p (%zu bytes) registered read-only", addr,
                      (size_t)(end - start));
    }
    if (e->mr == NULL) {
        int err = errno;

        if (!quiet)
            mr_log_failure(cache, addr, end - start);
        free(e);
        errno = err;
        return quiet ? FLX_ERR_NOT_FOUND : FLX_ERR_NO_MEMORY;
    }
    e->start = start;
    e->end = end;
    e->refs = 1;
    e->last_use = ++cache->clock;
    *entry_p = e;
    return FLX_OK;
}

void ib_mr_put(ib_mr_cache_t *cache, ib_mr_entry_t *entry, int failed)
{
    if (entry->transient) {
        entry->failed |= failed;
        if (--entry->refs > 0)
            return;
        if (entry->failed) {
            entry->next = cache->dead;
            cache->dead = entry;
        } else {
            entry_free(entry);
        }
        return;
    }
    entry->refs--;
    /* FLX_IB_REG_CACHE=0: registration lives for one use */
    while (cache->count > cache->max_entries && cache_evict_one(cache))
        ;
}

flx_status_t ib_mr_pin(ib_mr_cache_t *cache, void *addr, size_t len)
{
    const uintptr_t start = (uintptr_t)addr, end = start + len;

    /* one registration per range: a second over the same pages would make
     * deregistering the first leave the rest cached for pages freed later */
    for (int i = 0; i < cache->npinned; i++)
        if (start < cache->pinned[i].end && cache->pinned[i].start < end)
            return FLX_ERR_INVALID_ARG;
    if (cache->npinned == cache->cap_pinned) {
        int cap = cache->cap_pinned ? 2 * cache->cap_pinned : 16;
        void *p = realloc(cache->pinned, (size_t)cap * sizeof(*cache->pinned));
        if (p == NULL)
            return FLX_ERR_NO_MEMORY;
        cache->pinned = p;
        cache->cap_pinned = cap;
    }
    cache->pinned[cache->npinned] = (ib_range_t){.start = start, .end = end};
    cache->npinned++;
    return FLX_OK;
}

/* Forget a range before it is freed: its idle registrations go now, those
 * in use leave the cache and go with their last user (a cached entry would
 * otherwise outlive the range and be found again for new pages at the same
 * addresses). */
flx_status_t ib_mr_unpin(ib_mr_cache_t *cache, void *addr)
{
    uintptr_t start = (uintptr_t)addr, end;
    int i;

    for (i = 0; i < cache->npinned && cache->pinned[i].start != start; i++)
        ;
    if (i == cache->npinned)
        return FLX_ERR_NOT_FOUND;
    end = cache->pinned[i].end;
    cache->pinned[i] = cache->pinned[--cache->npinned];
    for (ib_mr_entry_t **pp = &cache->head; *pp;) {
        ib_mr_entry_t *e = *pp;
        if (e->start >= start && e->end <= end) {
            *pp = e->next;
            cache->count--;
            if (e->refs == 0)
                entry_free(e);
            else
                e->transient = 1;
        } else {
            pp = &e->next;
        }
    }
    return FLX_OK;
}

/* ---- staging --------------------------------------------------------------- */

static int stage_setup(ib_mr_cache_t *cache)
{
    ib_stage_t *sg = &cache->stage;
    size_t bytes = (size_t)sg->nslots * sg->slot_size;

    sg->free_idx = malloc((size_t)sg->nslots * sizeof(*sg->free_idx));
    if (sg->free_idx == NULL || posix_memalign((void **)&sg->base, 4096, bytes) != 0) {
        sg->base = NULL;
        flx_warn(NET, cache->rank, "ib: no memory for %d staging buffers of %zu bytes: large "
                 "messages of unregistered buffers are registered per message", sg->nslots,
                 sg->slot_size);
        return -1;
    }
    /* out of locked memory: fewer slots, down to 2, before none */
    for (int n = sg->nslots;; n /= 2) {
        char lim[64];
        int err;

        if (mr_register(cache, sg->base, (uintptr_t)sg->base,
                        (uintptr_t)sg->base + (size_t)n * sg->slot_size, 1, &sg->entry) == FLX_OK) {
            if (n < sg->nslots) {
                ib_memlock_str(lim, sizeof(lim));
                flx_warn(NET, cache->rank, "ib: %d of %d staging buffers of %zu bytes registered "
                         "(locked-memory limit %s); more messages are registered per message",
                         n, sg->nslots, sg->slot_size, lim);
                sg->nslots = n;
            }
            break;
        }
        err = errno;
        if (n > 2 && (err == ENOMEM || err == EAGAIN))
            continue;
        ib_memlock_str(lim, sizeof(lim));
        flx_warn(NET, cache->rank, "ib: staging buffers (%zu bytes) cannot be registered: %s "
                 "(locked-memory limit %s); large messages of unregistered buffers are "
                 "registered per message", (size_t)n * sg->slot_size, strerror(err), lim);
        return -1;
    }
    for (int i = 0; i < sg->nslots; i++)
        sg->free_idx[i] = sg->nslots - 1 - i;
    sg->nfree = sg->nslots;
    return 0;
}

int ib_stage_fits(const ib_mr_cache_t *cache, size_t len)
{
    const ib_stage_t *sg = &cache->stage;

    return sg->nslots > 0 && !sg->broken && len <= sg->slot_size;
}

char *ib_stage_get(ib_mr_cache_t *cache, size_t len, int *idx_p, ib_mr_entry_t **entry_p)
{
    ib_stage_t *sg = &cache->stage;

    if (!ib_stage_fits(cache, len))
        return NULL;
    if (sg->entry == NULL && stage_setup(cache) != 0) {
        sg->broken = 1;
        return NULL;
    }
    if (sg->nfree == 0) {
        sg->full++;
        return NULL;
    }
    *idx_p = sg->free_idx[--sg->nfree];
    *entry_p = sg->entry;
    sg->staged++;
    return ib_stage_addr(cache, *idx_p);
}

char *ib_stage_addr(const ib_mr_cache_t *cache, int idx)
{
    return cache->stage.base + (size_t)idx * cache->stage.slot_size;
}

void ib_stage_put(ib_mr_cache_t *cache, int idx)
{
    cache->stage.free_idx[cache->stage.nfree++] = idx;
}

void ib_mr_cache_flush(ib_mr_cache_t *cache)
{
    ib_stage_t *sg = &cache->stage;

    if (sg->entry)
        entry_free(sg->entry);
    free(sg->base);
    free(sg->free_idx);
    sg->entry = NULL;
    sg->base = NULL;
    sg->free_idx = NULL;
    sg->nfree = 0;
    while (cache->head) {
        ib_mr_entry_t *e = cache->head;
        cache->head = e->next;
        entry_free(e);
    }
    cache->count = 0;
    while (cache->dead) {
        ib_mr_entry_t *e = cache->dead;
        cache->dead = e->next;
        entry_free(e);
    }
    free(cache->pinned);
    cache->pinned = NULL;
    cache->npinned = cache->cap_pinned = 0;
}
