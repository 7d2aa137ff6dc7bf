/* check_ib.c -- ib-specific behaviour on real verbs (run in the SoftRoCE VM;
 * exits 77, SKIP, where no RDMA port is active): the registration cache
 * reuses and evicts registrations, forgets a range deregistered while in
 * use and stages a range too big to pin, unregistered buffers go through
 * staging slots (or, all busy, a registration per message), a QP forced
 * into the error state turns into FLX_ERR_PEER_LOST on every rank, a
 * peer's failure fails a half-written striped send at once and does not
 * hold up the others' destroy, strangers' connection requests are rejected
 * without a trace, results stay exact on the RDMA write path. */
#include "tests/mp.h"
#include "collectives/comm.h"
#include "transport/ib/ib.h"

#include <check.h>
#include <errno.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static tl_ctx_t *ib_ctx(flx_comm_h comm) { return comm->tlctx; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 4 buffers cycled through a cache of 2: hits on reuse, evictions beyond */
static int body_regcache(flx_comm_h comm, int rank, int size, void *arg)
{
    enum { COUNT = 1 << 16, NBUF = 4 };
    float *bufs[NBUF];
    tl_ctx_t *ctx;
    uint64_t misses0;

    (void)arg;
    if (strcmp(flx_comm_net_name(comm), "ib") != 0)
        return mp_fail(rank, "transport is %s, not ib", flx_comm_net_name(comm));
    ctx = ib_ctx(comm);
    /* creation (the link's 1 MiB ping-pongs, each algorithm's 1 MiB fit)
     * registered nothing for a single message */
    if (ctx->mrc.transient != 0)
        return mp_fail(rank, "%llu registrations for one message while the communicator was "
                       "created", (unsigned long long)ctx->mrc.transient);
    for (int b = 0; b < NBUF; b++) {
        bufs[b] = malloc(COUNT * sizeof(float));
        if (flx_mem_register(comm, bufs[b], COUNT * sizeof(float)) != FLX_OK)
            return mp_fail(rank, "flx_mem_register failed");
    }
    /* the same buffer again and again: registered once */
    for (int it = 0; it < 5; it++) {
        for (int i = 0; i < COUNT; i++)
            bufs[0][i] = (float)(rank + i % 7);
        if (flx_allreduce(comm, bufs[0], bufs[0], COUNT, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING) != FLX_OK)
            return mp_fail(rank, "allreduce failed");
        for (int i = 0; i < COUNT; i++)
            if (bufs[0][i] != (float)(size * (size - 1) / 2 + size * (i % 7)))
                return mp_fail(rank, "wrong sum at %d: %g", i, bufs[0][i]);
    }
    if (ctx->mrc.hits == 0)
        return mp_fail(rank, "no registration cache hit in 5 reuses (misses %llu)",
                       (unsigned long long)ctx->mrc.misses);
    misses0 = ctx->mrc.misses;
    for (int it = 0; it < 3; it++)
        for (int b = 0; b < NBUF; b++)
            if (flx_allreduce(comm, bufs[b], bufs[b], COUNT, FLX_FLOAT32, FLX_MAX, FLX_ALGO_RING) != FLX_OK)
                return mp_fail(rank, "allreduce on buffer %d failed", b);
    if (ctx->mrc.evictions == 0 || ctx->mrc.count > 2)
        return mp_fail(rank, "cache of 2 holds %d entries after %llu evictions", ctx->mrc.count,
                       (unsigned long long)ctx->mrc.evictions);
    if (ctx->mrc.misses == misses0)
        return mp_fail(rank, "cycling 4 buffers through 2 entries never missed");
    for (int b = 0; b < NBUF; b++) {
        if (flx_mem_deregister(comm, bufs[b]) != FLX_OK)
            return mp_fail(rank, "flx_mem_deregister failed");
        free(bufs[b]);
    }
    /* an unregistered buffer: never cached; its 256 KiB message goes
     * through a staging slot, and so does a 1 MiB allreduce, whose rd
     * moves it in two chunks of FLX_IB_STAGE_SIZE (a message larger than
     * a slot, registered for itself, is test_staging's 64 KiB slot case) */
    for (int big = 0; big < 2; big++) {
        uint64_t t0 = ctx->mrc.transient, s0 = ctx->mrc.stage.staged;
        size_t count = big ? 4 * COUNT : COUNT;
        float *tmp = malloc(count * sizeof(float));
        for (size_t i = 0; i < count; i++)
            tmp[i] = (float)(rank + 1) * (float)(i % 3);
        if (flx_allreduce(comm, tmp, tmp, count, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RD) != FLX_OK)
            return mp_fail(rank, "allreduce on an unregistered buffer failed");
        for (size_t i = 0; i < count; i++)
            if (tmp[i] != (float)(size * (size + 1) / 2) * (float)(i % 3))
                return mp_fail(rank, "unregistered buffer: wrong sum at %zu: %g", i, tmp[i]);
        if (!big && (ctx->mrc.stage.staged == s0 || ctx->mrc.transient != t0))
            return mp_fail(rank, "256 KiB unregistered: %llu staged, %llu registered per message",
                           (unsigned long long)(ctx->mrc.stage.staged - s0),
                           (unsigned long long)(ctx->mrc.transient - t0));
        if (big && (ctx->mrc.stage.staged < s0 + 2 || ctx->mrc.transient != t0))
            return mp_fail(rank, "1 MiB unregistered: %llu staged, %llu registered per message",
                           (unsigned long long)(ctx->mrc.stage.staged - s0),
                           (unsigned long long)(ctx->mrc.transient - t0));
        free(tmp);
    }
    return 0;
}

/* Large messages of unregistered buffers through staging slots: with one
 * slot of 64 KiB (arg: 1), first taken by the test itself, so that every
 * message finds it busy and takes a registration per message instead, then
 * free; with 0 (arg: 0) every message is registered per message; with
 * STAGE_TOO_BIG (4096 slots of 64 MiB, 256 GiB, more than the address
 * space the ranks may use) the slots cannot be allocated, so staging turns
 * itself off at the first large message (the communicator's creation moves
 * some already) and every message is registered for itself.  Every result
 * exact, the slot back afterwards, none quarantined. */
#define STAGE_TOO_BIG 4096
static int body_staging(flx_comm_h comm, int rank, int size, void *arg)
{
    const int slots = *(const int *)arg;
    const size_t counts[] = {4097, 16384, 16385, (1u << 18) + 3}; /* 16 KiB .. 1 MiB */
    tl_ctx_t *ctx = ib_ctx(comm);

    if (slots == 1) { /* the one slot taken here: staging falls back, results stay exact */
        enum { COUNT = 1 << 16 };
        ib_mr_entry_t *mr;
        int idx;
        float *b = malloc(COUNT * sizeof(float));
        uint64_t t0 = ctx->mrc.transient;

        if (b == NULL || ib_stage_get(&ctx->mrc, 1, &idx, &mr) == NULL)
            return mp_fail(rank, "cannot take the staging slot");
        for (int i = 0; i < COUNT; i++)
            b[i] = (float)(rank + i % 5);
        if (flx_allreduce(comm, b, b, COUNT, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING) != FLX_OK)
            return mp_fail(rank, "allreduce with the slot busy failed");
        for (int i = 0; i < COUNT; i++)
            if (b[i] != (float)(size * (size - 1) / 2 + size * (i % 5)))
                return mp_fail(rank, "slot busy: element %d is %g", i, b[i]);
        if (ctx->mrc.stage.full == 0 || ctx->mrc.transient == t0)
            return mp_fail(rank, "slot busy: %llu found it busy, %llu registered per message",
                           (unsigned long long)ctx->mrc.stage.full,
                           (unsigned long long)(ctx->mrc.transient - t0));
        ib_stage_put(&ctx->mrc, idx);
        ctx->mrc.stage.staged--; /* the slot taken by hand */
        free(b);
    }

    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t count = counts[c];
        float *src = malloc(count * sizeof(float));
        float *dst = malloc(count * (size_t)size * sizeof(float));

        if (src == NULL || dst == NULL)
            return mp_fail(rank, "no memory");
        for (int algo = FLX_ALGO_RING; algo <= FLX_ALGO_HD; algo++) {
            for (size_t i = 0; i < count; i++)
                src[i] = (float)(rank * 100 + (int)(i % 97));
            if (flx_allreduce(comm, src, dst, count, FLX_FLOAT32, FLX_SUM, (flx_algo_t)algo) != FLX_OK)
                return mp_fail(rank, "allreduce of %zu (algo %d) failed", count, algo);
            for (size_t i = 0; i < count; i++) {
                float want = (float)(100 * size * (size - 1) / 2 + size * (int)(i % 97));
                if (dst[i] != want)
                    return mp_fail(rank, "allreduce of %zu (algo %d): element %zu is %g, not %g",
                                   count, algo, i, dst[i], want);
            }
            if (algo == FLX_ALGO_TREE || algo == FLX_ALGO_HD)
                continue; /* allgather: ring and Bruck */
            memset(dst, 0, count * (size_t)size * sizeof(float));
            if (flx_allgather(comm, src, dst, count, FLX_FLOAT32, (flx_algo_t)algo) != FLX_OK)
                return mp_fail(rank, "allgather of %zu (algo %d) failed", count, algo);
            for (int r = 0; r < size; r++)
                for (size_t i = 0; i < count; i++)
                    if (dst[(size_t)r * count + i] != (float)(r * 100 + (int)(i % 97)))
                        return mp_fail(rank, "allgather of %zu (algo %d): rank %d's element %zu "
                                       "is %g", count, algo, r, i, dst[(size_t)r * count + i]);
        }
        free(src);
        free(dst);
    }
    { /* the ring sends from the caller's input: here read-only pages,
       * registered read-only for the device (staging off: per message) */
        const size_t count = (1u << 18) + 3, len = count * sizeof(float);
        float *src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        float *dst = malloc(len);

        if (src == MAP_FAILED || dst == NULL)
            return mp_fail(rank, "no memory");
        for (size_t i = 0; i < count; i++)
            src[i] = (float)(rank * 100 + (int)(i % 97));
        if (mprotect(src, len, PROT_READ) != 0)
            return mp_fail(rank, "mprotect failed");
        if (flx_allreduce(comm, src, dst, count, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING) != FLX_OK)
            return mp_fail(rank, "ring allreduce from read-only memory failed");
        for (size_t i = 0; i < count; i++)
            if (dst[i] != (float)(100 * size * (size - 1) / 2 + size * (int)(i % 97)))
                return mp_fail(rank, "ring allreduce from read-only memory: element %zu is %g",
                               i, dst[i]);
        munmap(src, len);
        free(dst);
    }
    if (slots == 0 && (ctx->mrc.stage.staged != 0 || ctx->mrc.transient == 0))
        return mp_fail(rank, "staging off: %llu staged, %llu registered per message",
                       (unsigned long long)ctx->mrc.stage.staged,
                       (unsigned long long)ctx->mrc.transient);
    if (slots == STAGE_TOO_BIG)
        return ctx->mrc.stage.broken && ctx->mrc.stage.staged == 0 && ctx->mrc.transient > 0
                   ? 0
                   : mp_fail(rank, "staging that cannot be allocated: broken %d, %llu staged, "
                             "%llu registered per message", ctx->mrc.stage.broken,
                             (unsigned long long)ctx->mrc.stage.staged,
                             (unsigned long long)ctx->mrc.transient);
    if (slots > 0 && (ctx->mrc.stage.staged == 0 || ctx->mrc.transient == 0 ||
                      ctx->mrc.stage.nfree != slots || ctx->mrc.stage.quarantined != 0))
        return mp_fail(rank, "%d staging slots: %llu staged, %llu registered per message, %d of "
                       "%d free at the end, %llu quarantined", slots,
                       (unsigned long long)ctx->mrc.stage.staged,
                       (unsigned long long)ctx->mrc.transient, ctx->mrc.stage.nfree, slots,
                       (unsigned long long)ctx->mrc.stage.quarantined);
    return 0;
}

START_TEST(test_staging)
{
    static const int slots[3] = {1, 0, STAGE_TOO_BIG};
    const char *names[3] = {"1", "0", "4096"}, *sizes[3] = {"64k", "64k", "64m"};
#ifdef FLX_HAVE_ASAN /* the sanitizer reserves terabytes of shadow: no
                      * address-space limit, and its allocator aborts
                      * where malloc would fail, so no third case */
    const int ncases = 2;
#else
    const int ncases = 3;
#endif

    setenv("FLX_NET", "ib", 1);
    setenv("FLX_CHUNK_SIZE", "64k", 1);
    for (int i = 0; i < ncases; i++) {
#ifndef FLX_HAVE_ASAN
        struct rlimit rl, old;

        /* the ranks' soft limit, so that even a host with more than
         * 256 GiB cannot allocate the slots */
        ck_assert_int_eq(getrlimit(RLIMIT_AS, &old), 0);
        rl = old;
        if (slots[i] == STAGE_TOO_BIG &&
            (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)64 << 30))
            rl.rlim_cur = (rlim_t)64 << 30;
        ck_assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
#endif
        setenv("FLX_IB_STAGE_SLOTS", names[i], 1);
        setenv("FLX_IB_STAGE_SIZE", sizes[i], 1);
        ck_assert_int_eq(mp_run(3, body_staging, (void *)&slots[i], 300, NULL), 0);
#ifndef FLX_HAVE_ASAN
        ck_assert_int_eq(setrlimit(RLIMIT_AS, &old), 0);
#endif
    }
    unsetenv("FLX_IB_STAGE_SIZE");
    unsetenv("FLX_IB_STAGE_SLOTS");
    unsetenv("FLX_CHUNK_SIZE");
}
END_TEST

START_TEST(test_regcache)
{
    setenv("FLX_NET", "ib", 1);
    setenv("FLX_IB_REG_CACHE", "2", 1);
    ck_assert_int_eq(mp_run(2, body_regcache, NULL, 300, NULL), 0);
    unsetenv("FLX_IB_REG_CACHE");
}
END_TEST

/* FLX_IB_LEAVE_PINNED: buffers straight from malloc, never registered by
 * the program, freed and allocated again between collectives: no
 * registration per message, the cache hits, every result exact */
static int body_leave_pinned(flx_comm_h comm, int rank, int size, void *arg)
{
    enum { COUNT = 1 << 18 }; /* 1 MiB: RDMA-written, not eager */
    tl_ctx_t *ctx = ib_ctx(comm);
    uint64_t hits0;

    (void)arg;
#ifdef FLX_HAVE_ASAN
    /* the sanitizer's allocator ignores mallopt: the setting must say so
     * (a warning) and stay off, and the results stay exact */
    if (ctx->mrc.leave_pinned)
        return mp_fail(rank, "leave pinned in force under the sanitizer's allocator");
#else
    if (!ctx->mrc.leave_pinned)
        return mp_fail(rank, "FLX_IB_LEAVE_PINNED is set but not in force");
#endif
    hits0 = ctx->mrc.hits;
    for (int it = 0; it < 6; it++) {
        size_t count = COUNT + (size_t)(it % 2) * 1000; /* the allocation moves, or not */
        float *b = malloc(count * sizeof(float));

        if (b == NULL)
            return mp_fail(rank, "no memory");
        for (size_t i = 0; i < count; i++)
            b[i] = (float)(rank + it + (int)(i % 5));
        for (int rep = 0; rep < 2; rep++) {
            if (flx_allreduce(comm, b, b, count, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING) != FLX_OK)
                return mp_fail(rank, "allreduce %d.%d failed", it, rep);
            for (size_t i = 0; i < count; i++) {
                float want = (float)(size * (size - 1) / 2 + size * (it + (int)(i % 5)));
                if (rep)
                    want *= (float)size;
                if (b[i] != want)
                    return mp_fail(rank, "iteration %d.%d: element %zu is %g, not %g", it, rep, i,
                                   b[i], want);
            }
        }
        free(b);
    }
    if (ctx->mrc.leave_pinned && ctx->mrc.transient != 0)
        return mp_fail(rank, "%llu registrations for one message with leave pinned",
                       (unsigned long long)ctx->mrc.transient);
    if (ctx->mrc.leave_pinned && ctx->mrc.hits <= hits0)
        return mp_fail(rank, "no cache hit for a reused malloc'd buffer");
    { /* a read-only input (the ring sends from it): registered read-only
       * for that message, never cached -- the pages may become writable */
        const size_t len = COUNT * sizeof(float);
        float *src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        float *dst = malloc(len);
        uint64_t t0 = ctx->mrc.transient;

        if (src == MAP_FAILED || dst == NULL)
            return mp_fail(rank, "no memory");
        for (size_t i = 0; i < COUNT; i++)
            src[i] = (float)(rank + (int)(i % 7));
        if (mprotect(src, len, PROT_READ) != 0 ||
            flx_allreduce(comm, src, dst, COUNT, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING) != FLX_OK)
            return mp_fail(rank, "ring allreduce from read-only memory failed");
        for (size_t i = 0; i < COUNT; i++)
            if (dst[i] != (float)(size * (size - 1) / 2 + size * (int)(i % 7)))
                return mp_fail(rank, "read-only input: element %zu is %g", i, dst[i]);
        for (ib_mr_entry_t *e = ctx->mrc.head; e; e = e->next)
            if (e->read_only)
                return mp_fail(rank, "a read-only registration was cached");
        if (ctx->mrc.leave_pinned && ctx->mrc.transient == t0)
            return mp_fail(rank, "read-only input with leave pinned: no registration for it");
        munmap(src, len);
        free(dst);
    }
    return 0;
}

/* the setting acts at program start: run this test in a fresh copy of
 * this program with FLX_IB_LEAVE_PINNED in its environment */
START_TEST(test_leave_pinned)
{
    pid_t pid;
    int status;

    setenv("FLX_NET", "ib", 1);
    if (getenv("FLX_TEST_LEAVE_PINNED_CHILD") != NULL) {
        ck_assert_int_eq(mp_run(2, body_leave_pinned, NULL, 300, NULL), 0);
        return;
    }
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setenv("FLX_IB_LEAVE_PINNED", "yes", 1);
        setenv("FLX_TEST_LEAVE_PINNED_CHILD", "1", 1);
        setenv("CK_RUN_CASE", "leave_pinned", 1);
        setenv("CK_FORK", "yes", 1);
        execl("/proc/self/exe", "check_ib", (char *)NULL);
        _exit(127);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "check_ib with FLX_IB_LEAVE_PINNED=yes failed (status %d)", status);
}
END_TEST

/* rank 0 breaks its QP to rank 1: both ranks must see FLX_ERR_PEER_LOST */
static int body_qp_error(flx_comm_h comm, int rank, int size, void *arg)
{
    float x[4096] = {0};
    flx_status_t st;

    (void)arg;
    (void)size;
    if (flx_allreduce(comm, x, x, 4096, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO) != FLX_OK)
        return mp_fail(rank, "first allreduce failed");
    if (rank == 0) {
        struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
        if (ibv_modify_qp(ib_ctx(comm)->conns[1].qp, &attr, IBV_QP_STATE) != 0)
            return mp_fail(rank, "cannot move the QP to the error state");
    }
    st = flx_allreduce(comm, x, x, 4096, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);
    if (st == FLX_OK)
        st = flx_allreduce(comm, x, x, 4096, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);
    if (st != FLX_ERR_PEER_LOST)
        return mp_fail(rank, "after the QP error: %s", flx_status_string(st));
    return 0;
}

START_TEST(test_qp_error)
{
    setenv("FLX_NET", "ib", 1);
    setenv("FLX_TIMEOUT", "20s", 1);
    ck_assert_int_eq(mp_run(2, body_qp_error, NULL, 120, NULL), 0);
    unsetenv("FLX_TIMEOUT");
}
END_TEST

/* A registered range deregistered while a request still holds its cached
 * registration: the entry must leave the cache then (it went when the
 * request let go of it only if idle), so that new pages malloc may put at
 * the same addresses are registered again, not found in the cache; an
 * entry whose request failed waits on the dead list for the teardown. */
static int body_unpin_in_use(flx_comm_h comm, int rank, int size, void *arg)
{
    enum { LEN = 1 << 20 };
    tl_ctx_t *ctx = ib_ctx(comm);
    char *buf = malloc(LEN);
    float x[4] = {1, 2, 3, 4};

    (void)size;
    (void)arg;
    for (int failed = 0; failed < 2; failed++) {
        ib_mr_entry_t *e, *e2;
        int count0;
        uint64_t misses0;

        if (buf == NULL || flx_mem_register(comm, buf, LEN) != FLX_OK)
            return mp_fail(rank, "flx_mem_register failed");
        if (ib_mr_get(&ctx->mrc, buf, LEN, &e) != FLX_OK || e->transient)
            return mp_fail(rank, "a registered range got no cached registration");
        count0 = ctx->mrc.count;
        if (flx_mem_deregister(comm, buf) != FLX_OK)
            return mp_fail(rank, "flx_mem_deregister failed");
        if (ctx->mrc.count != count0 - 1)
            return mp_fail(rank, "the cache holds %d entries after its in-use range was "
                           "deregistered, %d before", ctx->mrc.count, count0);
        ib_mr_put(&ctx->mrc, e, failed);
        if (ib_mr_get_cached(&ctx->mrc, buf, LEN, &e2) != FLX_ERR_NOT_FOUND)
            return mp_fail(rank, "the deregistered range is still in the cache (failed %d)",
                           failed);
        if (failed && ctx->mrc.dead != e)
            return mp_fail(rank, "a failed request's registration outside the cache was not "
                           "kept for the teardown");
        /* registered again: a fresh registration (a miss), cached */
        misses0 = ctx->mrc.misses;
        if (flx_mem_register(comm, buf, LEN) != FLX_OK ||
            ib_mr_get(&ctx->mrc, buf, LEN, &e2) != FLX_OK)
            return mp_fail(rank, "registering the range again failed");
        if (ctx->mrc.misses != misses0 + 1 || e2->transient)
            return mp_fail(rank, "the range registered again reused the old registration");
        ib_mr_put(&ctx->mrc, e2, 0);
        if (flx_mem_deregister(comm, buf) != FLX_OK)
            return mp_fail(rank, "flx_mem_deregister failed");
    }
    free(buf);
    if (flx_allreduce(comm, x, x, 4, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO) != FLX_OK || x[3] != 8)
        return mp_fail(rank, "allreduce afterwards failed");
    return 0;
}

START_TEST(test_unpin_in_use)
{
    setenv("FLX_NET", "ib", 1);
    ck_assert_int_eq(mp_run(2, body_unpin_in_use, NULL, 120, NULL), 0);
}
END_TEST

/* A registered range larger than the locked-memory limit (CAP_IPC_LOCK
 * dropped, RLIMIT_MEMLOCK at PTB_LIMIT): the device cannot pin it whole, so
 * the range is marked and its large messages go as any other buffer's,
 * staged where they fit a slot, else registered one by one (here the
 * allreduces' 512 KiB chunks are larger than the 256 KiB slots, a 128 KiB
 * broadcast fits one).
 * Every result exact; the collective failed with FLX_ERR_NO_MEMORY before. */
enum { PTB_LIMIT = 64 << 20, PTB_RANGE = 256 << 20, PTB_COUNT = (1 << 18) + 3, PTB_BCAST = 1 << 15 };

static int body_pin_too_big(flx_comm_h comm, int rank, int size, void *arg)
{
    tl_ctx_t *ctx = ib_ctx(comm);
    float *b = malloc(PTB_RANGE);
    uint64_t staged0 = ctx->mrc.stage.staged, transient0 = ctx->mrc.transient;
    int count0 = ctx->mrc.count, marked = -1;

    (void)arg;
    if (b == NULL || flx_mem_register(comm, b, PTB_RANGE) != FLX_OK)
        return mp_fail(rank, "flx_mem_register of %d bytes failed", PTB_RANGE);
    for (int algo = FLX_ALGO_RING; algo <= FLX_ALGO_TREE; algo++) {
        float *x = b + (size_t)PTB_RANGE / sizeof(float) / 2; /* inside, not at the start */

        for (int i = 0; i < PTB_COUNT; i++)
            x[i] = (float)(rank * 100 + i % 97);
        if (flx_allreduce(comm, x, x, PTB_COUNT, FLX_FLOAT32, FLX_SUM, (flx_algo_t)algo) != FLX_OK)
            return mp_fail(rank, "allreduce (algo %d) in a range too big to pin failed", algo);
        for (int i = 0; i < PTB_COUNT; i++)
            if (x[i] != (float)(100 * size * (size - 1) / 2 + size * (i % 97)))
                return mp_fail(rank, "allreduce (algo %d): element %d is %g", algo, i, x[i]);
    }
    for (int i = 0; i < PTB_BCAST; i++)
        b[i] = rank == 1 ? (float)(i % 89) : -1.0f;
    if (flx_broadcast(comm, b, PTB_BCAST, FLX_FLOAT32, 1) != FLX_OK)
        return mp_fail(rank, "broadcast in a range too big to pin failed");
    for (int i = 0; i < PTB_BCAST; i++)
        if (b[i] != (float)(i % 89))
            return mp_fail(rank, "broadcast: element %d is %g", i, b[i]);
    for (int i = 0; i < ctx->mrc.npinned; i++)
        if (ctx->mrc.pinned[i].start == (uintptr_t)b)
            marked = ctx->mrc.pinned[i].too_big;
    if (marked != 1 || ctx->mrc.stage.staged == staged0 || ctx->mrc.transient == transient0 ||
        ctx->mrc.count != count0)
        return mp_fail(rank, "range marked %d, %llu staged, %llu registered per message, %d "
                       "cached (%d before)", marked,
                       (unsigned long long)(ctx->mrc.stage.staged - staged0),
                       (unsigned long long)(ctx->mrc.transient - transient0), ctx->mrc.count,
                       count0);
    if (flx_mem_deregister(comm, b) != FLX_OK)
        return mp_fail(rank, "flx_mem_deregister failed");
    free(b);
    return 0;
}

/* Root pins past any limit: the test's process (check forks one per test)
 * drops CAP_IPC_LOCK from its effective set and sets the soft locked-memory
 * limit; the ranks inherit both.  memlock_restore undoes it. */
typedef struct {
    struct __user_cap_header_struct hdr;
    struct __user_cap_data_struct caps[2];
    struct rlimit rl;
} memlock_saved_t;

static void memlock_limit_set(rlim_t limit, memlock_saved_t *saved)
{
    struct __user_cap_data_struct dropped[2];
    struct rlimit rl;

    saved->hdr = (struct __user_cap_header_struct){.version = _LINUX_CAPABILITY_VERSION_3};
    ck_assert_int_eq(syscall(SYS_capget, &saved->hdr, saved->caps), 0);
    memcpy(dropped, saved->caps, sizeof(dropped));
    dropped[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    ck_assert_int_eq(syscall(SYS_capset, &saved->hdr, dropped), 0);
    ck_assert_int_eq(getrlimit(RLIMIT_MEMLOCK, &saved->rl), 0);
    rl = saved->rl;
    rl.rlim_cur = limit;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < rl.rlim_cur)
        rl.rlim_max = rl.rlim_cur; /* raising the hard limit: CAP_SYS_RESOURCE */
    ck_assert_int_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
}

static void memlock_restore(memlock_saved_t *saved)
{
    ck_assert_int_eq(setrlimit(RLIMIT_MEMLOCK, &saved->rl), 0);
    ck_assert_int_eq(syscall(SYS_capset, &saved->hdr, saved->caps), 0);
}

START_TEST(test_pin_too_big)
{
    memlock_saved_t saved;

    memlock_limit_set(PTB_LIMIT, &saved);
    setenv("FLX_NET", "ib", 1);
    setenv("FLX_CHUNK_SIZE", "512k", 1);
    setenv("FLX_IB_STAGE_SIZE", "256k", 1);
    ck_assert_int_eq(mp_run(2, body_pin_too_big, NULL, 300, NULL), 0);
    unsetenv("FLX_IB_STAGE_SIZE");
    unsetenv("FLX_CHUNK_SIZE");
    memlock_restore(&saved);
}
END_TEST

/* The default limit of a process without CAP_IPC_LOCK on Debian, 8 MiB,
 * with the default settings: the 8 MiB staging block does not fit beside
 * the bounce buffers, so it shrinks; messages that find every slot busy
 * cannot be registered for themselves and wait for a slot instead.  4 MiB
 * ring, tree and halving-doubling allreduces, a ring allgather and a
 * broadcast, 3 ranks, every result exact (the allreduce failed with
 * FLX_ERR_NO_MEMORY before). */
static int body_memlock_8m(flx_comm_h comm, int rank, int size, void *arg)
{
    enum { COUNT = 1 << 20 };
    tl_ctx_t *ctx = ib_ctx(comm);
    float *src = malloc(COUNT * sizeof(float)), *dst = malloc((size_t)size * COUNT * sizeof(float));

    (void)arg;
    if (src == NULL || dst == NULL)
        return mp_fail(rank, "no memory");
    for (int algo = FLX_ALGO_RING; algo <= FLX_ALGO_HD; algo++) {
        for (int i = 0; i < COUNT; i++)
            src[i] = (float)(rank * 100 + i % 97);
        if (flx_allreduce(comm, src, dst, COUNT, FLX_FLOAT32, FLX_SUM, (flx_algo_t)algo) != FLX_OK)
            return mp_fail(rank, "allreduce (algo %d) under an 8 MiB limit failed", algo);
        for (int i = 0; i < COUNT; i++)
            if (dst[i] != (float)(100 * size * (size - 1) / 2 + size * (i % 97)))
                return mp_fail(rank, "allreduce (algo %d): element %d is %g", algo, i, dst[i]);
    }
    if (flx_allgather(comm, src, dst, COUNT, FLX_FLOAT32, FLX_ALGO_RING) != FLX_OK)
        return mp_fail(rank, "allgather under an 8 MiB limit failed");
    for (int r = 0; r < size; r++)
        for (int i = 0; i < COUNT; i++)
            if (dst[(size_t)r * COUNT + i] != (float)(r * 100 + i % 97))
                return mp_fail(rank, "allgather: rank %d's element %d is %g", r, i,
                               dst[(size_t)r * COUNT + i]);
    for (int i = 0; i < COUNT; i++)
        src[i] = rank == 2 ? (float)(i % 89) : -1.0f;
    if (flx_broadcast(comm, src, COUNT, FLX_FLOAT32, 2) != FLX_OK)
        return mp_fail(rank, "broadcast under an 8 MiB limit failed");
    for (int i = 0; i < COUNT; i++)
        if (src[i] != (float)(i % 89))
            return mp_fail(rank, "broadcast: element %d is %g", i, src[i]);
    if (ctx->mrc.stage.nslots >= 16 || ctx->mrc.stage.staged == 0 ||
        ctx->mrc.stage.nfree != ctx->mrc.stage.nslots)
        return mp_fail(rank, "%d staging slots (%d free at the end), %llu staged",
                       ctx->mrc.stage.nslots, ctx->mrc.stage.nfree,
                       (unsigned long long)ctx->mrc.stage.staged);
    free(src);
    free(dst);
    return 0;
}

START_TEST(test_memlock_8m)
{
    memlock_saved_t saved;

    memlock_limit_set(8 << 20, &saved);
    setenv("FLX_NET", "ib", 1);
    ck_assert_int_eq(mp_run(3, body_memlock_8m, NULL, 300, NULL), 0);
    memlock_restore(&saved);
}
END_TEST

/* Rank 1 aborts as soon as rank 0's RDMA writes start landing in its
 * receive buffer: rank 0's 16 MiB chunks are striped over 2 QPs in 4 MiB
 * pieces, the last (with the IMM) posted only after the others completed,
 * so it hears of the failure with pieces on the wire and the rest unsent
 * (as many chunks as make the transfer outlast the abort's 0.1 s).
 * It must fail when they complete, not at FLX_TIMEOUT.  Rank 1 stays (its
 * exit would fail rank 0 anyway) until rank 0 is done (arg: a pipe). */
enum { PW_COUNT = 4 << 20 }; /* floats: 16 MiB */

typedef struct {
    flx_comm_h comm;
    volatile float *buf;
} pw_watch_t;

static void *pw_watcher(void *p)
{
    pw_watch_t *w = p;
    double deadline = now_s() + 60;

    /* looks every 0.2 ms, not spinning: in the 2-vCPU SoftRoCE VM a
     * spinning watcher starves the ranks and the kernel's copies */
    while (w->buf[0] == 0 && now_s() < deadline)
        nanosleep(&(struct timespec){.tv_nsec = 200000}, NULL);
    flx_comm_abort(w->comm);
    return NULL;
}

static int body_partial_write(flx_comm_h comm, int rank, int size, void *arg)
{
    float *buf = calloc(PW_COUNT, sizeof(float));
    pw_watch_t w = {.comm = comm};
    const int *done = arg;
    pthread_t th;
    flx_status_t st;
    double t0, dt, t16;
    size_t k, count;

    (void)size;
    if (buf == NULL)
        return mp_fail(rank, "no memory");
    /* rank 1 notices its abort within a 0.1 s progress round: the writes
     * must take well longer (2 s: on the emulated VM the abort takes up to
     * 0.8 s from the call to reach rank 0), so k chunks of 16 MiB are sent,
     * k from a probe */
    if (flx_broadcast(comm, buf, PW_COUNT, FLX_FLOAT32, 0) != FLX_OK || /* warm-up */
        flx_barrier(comm) != FLX_OK)
        return mp_fail(rank, "warm-up broadcast failed");
    t0 = now_s();
    if (flx_broadcast(comm, buf, PW_COUNT, FLX_FLOAT32, 0) != FLX_OK)
        return mp_fail(rank, "probe broadcast failed");
    t16 = now_s() - t0;
    if (flx_allreduce(comm, &t16, &t16, 1, FLX_FLOAT64, FLX_MAX, FLX_ALGO_AUTO) != FLX_OK)
        return mp_fail(rank, "allreduce failed");
    k = t16 >= 2.0 ? 1 : t16 * 32 < 2.0 ? 32 : (size_t)(2.0 / t16) + 1;
    if (k * t16 < 1.0) {
        printf("partial_write: this fabric moves %zu MiB in %.3f s, faster than an abort "
               "reaches the wait: not testable here\n", 16 * k, k * t16);
        free(buf);
        return 0;
    }
    count = k * PW_COUNT;
    free(buf);
    buf = calloc(count, sizeof(float));
    if (buf == NULL)
        return mp_fail(rank, "no memory for %zu MiB", 16 * k);
    w.buf = buf;
    for (size_t i = 0; rank == 0 && i < count; i++)
        buf[i] = 1.0f + (float)(i % 3);
    if (flx_barrier(comm) != FLX_OK)
        return mp_fail(rank, "barrier failed");
    if (rank == 1 && pthread_create(&th, NULL, pw_watcher, &w) != 0)
        return mp_fail(rank, "pthread_create failed");
    t0 = now_s();
    st = flx_broadcast(comm, buf, count, FLX_FLOAT32, 0);
    dt = now_s() - t0;
    if (rank == 0 && write(done[1], "x", 1) != 1)
        return mp_fail(rank, "cannot tell rank 1");
    if (rank == 1) {
        struct pollfd pfd = {.fd = done[0], .events = POLLIN};
        pthread_join(th, NULL);
        if (poll(&pfd, 1, 90000) != 1)
            return mp_fail(rank, "rank 0 never finished its broadcast");
    }
    free(buf);
    if (rank == 0)
        printf("partial_write: %zu MiB that take %.2f s failed after %.2f s (%s)\n", 16 * k,
               k * t16, dt, flx_status_string(st));
    if (rank == 1 && st != FLX_ERR_ABORTED)
        return mp_fail(rank, "broadcast returned %s, not aborted", flx_status_string(st));
    if (rank == 0 && st != FLX_ERR_PEER_LOST)
        return mp_fail(rank, "broadcast returned %s after %.1f s, not peer lost",
                       flx_status_string(st), dt);
    if (dt > 20)
        return mp_fail(rank, "broadcast took %.1f s to fail (FLX_TIMEOUT 60 s)", dt);
    return 0;
}

START_TEST(test_partial_write)
{
    int done[2];

    ck_assert_int_eq(pipe(done), 0);
    setenv("FLX_NET", "ib", 1);
    setenv("FLX_IB_QPS_PER_PEER", "2", 1);
    setenv("FLX_CHUNK_SIZE", "16m", 1);
    setenv("FLX_TIMEOUT", "60s", 1);
    ck_assert_int_eq(mp_run(2, body_partial_write, done, 150, NULL), 0);
    close(done[0]);
    close(done[1]);
    unsetenv("FLX_TIMEOUT");
    unsetenv("FLX_CHUNK_SIZE");
    unsetenv("FLX_IB_QPS_PER_PEER");
}
END_TEST

/* Rank 2 aborts right after a broadcast that ranks 0 and 1 are still in
 * (rank 1 comes late): they hear of it while rank 2 owes them nothing.
 * Their destroy must not wait FLX_TIMEOUT to say goodbye to rank 2. */
static int body_destroy_after_abort(int rank, int size, const char *root, void *arg)
{
    enum { COUNT = 1 << 18 }; /* 1 MiB: rendezvous, rank 0 waits for rank 1 */
    float *buf = calloc(COUNT, sizeof(float));
    flx_comm_h comm;
    flx_status_t st;
    double t0, dt;

    (void)arg;
    if (buf == NULL)
        return mp_fail(rank, "no memory");
    st = mp_comm_create(rank, size, root, &comm);
    if (st != FLX_OK)
        return mp_fail(rank, "flx_comm_create: %s", flx_status_string(st));
    for (int i = 0; rank == 0 && i < COUNT; i++)
        buf[i] = (float)(i % 11);
    if (rank == 1)
        usleep(1500 * 1000);
    st = flx_broadcast(comm, buf, COUNT, FLX_FLOAT32, 0);
    if (st != FLX_OK)
        return mp_fail(rank, "broadcast: %s", flx_status_string(st));
    for (int i = 0; i < COUNT; i++)
        if (buf[i] != (float)(i % 11))
            return mp_fail(rank, "broadcast result wrong at %d", i);
    if (rank == 2)
        flx_comm_abort(comm);
    t0 = now_s();
    flx_comm_destroy(comm);
    dt = now_s() - t0;
    free(buf);
    if (rank != 2 && dt > 10)
        return mp_fail(rank, "destroy took %.1f s after rank 2 aborted (FLX_TIMEOUT 30 s)", dt);
    return 0;
}

START_TEST(test_destroy_after_abort)
{
    setenv("FLX_NET", "ib", 1);
    setenv("FLX_ALGO", "tree", 1); /* binomial: rank 0 sends to 1 and 2 */
    setenv("FLX_TIMEOUT", "30s", 1);
    ck_assert_int_eq(mp_run_raw(3, body_destroy_after_abort, NULL, 150, NULL), 0);
    unsetenv("FLX_TIMEOUT");
    unsetenv("FLX_ALGO");
}
END_TEST

/* Connection requests to a rank's ib listener after setup, from a process
 * outside the job: one with no private data, one claiming rank 1's primary
 * QP with a made-up token.  Each is rejected (RDMA_CM_EVENT_REJECTED at the
 * stranger) while the job runs on, and the rank keeps no cm id of them
 * (rdma res show cm_id: its listener and one id per connected QP). */
typedef struct {
    int port_pipe[2]; /* rank 0 -> stranger: address and port of its listener */
    int done_pipe[2]; /* stranger -> rank 0: finished */
} st_pipes_t;

typedef struct {
    uint32_t ip;   /* network order */
    uint16_t port; /* network order */
} st_addr_t;

static int stranger_request(const st_addr_t *a, const void *priv, uint8_t priv_len)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = a->port};
    struct rdma_cm_id *id = NULL;
    struct rdma_cm_event *ev;
    struct rdma_conn_param param;
    struct ibv_qp_init_attr qa;
    enum rdma_cm_event_type want[3] = {RDMA_CM_EVENT_ADDR_RESOLVED,
                                       RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_CM_EVENT_REJECTED};
    int got = -1;

    dst.sin_addr.s_addr = a->ip;
    if (ch == NULL || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0)
        return mp_fail(2, "stranger: rdma_create_id: %s", strerror(errno));
    for (int step = 0; step < 3; step++) {
        struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
        if (step == 0 && rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) != 0)
            return mp_fail(2, "stranger: rdma_resolve_addr: %s", strerror(errno));
        if (step == 1 && rdma_resolve_route(id, 2000) != 0)
            return mp_fail(2, "stranger: rdma_resolve_route: %s", strerror(errno));
        if (step == 2) {
            memset(&qa, 0, sizeof(qa));
            qa.qp_type = IBV_QPT_RC;
            qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
            qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
            if (rdma_create_qp(id, NULL, &qa) != 0)
                return mp_fail(2, "stranger: rdma_create_qp: %s", strerror(errno));
            memset(&param, 0, sizeof(param));
            param.private_data = priv;
            param.private_data_len = priv_len;
            if (rdma_connect(id, &param) != 0)
                return mp_fail(2, "stranger: rdma_connect: %s", strerror(errno));
        }
        if (poll(&pfd, 1, 15000) != 1 || rdma_get_cm_event(ch, &ev) != 0)
            return mp_fail(2, "stranger: no answer to step %d in 15 s", step);
        got = ev->event;
        rdma_ack_cm_event(ev);
        if (got != (int)want[step])
            return mp_fail(2, "stranger: step %d: %s, expected %s", step,
                           rdma_event_str((enum rdma_cm_event_type)got),
                           rdma_event_str(want[step]));
    }
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    return 0;
}

/* cm ids of this process (rdma res show cm_id), or -1 */
static int own_cm_ids(void)
{
    char cmd[128], line[512];
    int n = 0;
    FILE *f;

    snprintf(cmd, sizeof(cmd), "rdma res show cm_id 2>/dev/null");
    f = popen(cmd, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        char *p = strstr(line, " pid ");
        if (p && atoi(p + 5) == (int)getpid())
            n++;
    }
    return pclose(f) == 0 ? n : -1;
}

static int body_stranger(int rank, int size, const char *root, void *arg)
{
    st_pipes_t *pp = arg;
    flx_comm_h comm;
    flx_status_t st;
    int flag = 0, iters = 0, ids;

    (void)size;
    if (rank == 2) { /* the stranger */
        st_addr_t a;
        struct { uint32_t magic; int32_t rank, qidx; uint8_t token[32]; } priv;
        struct pollfd pfd = {.fd = pp->port_pipe[0], .events = POLLIN};
        int rc;
        if (poll(&pfd, 1, 120000) != 1 || read(pp->port_pipe[0], &a, sizeof(a)) != sizeof(a))
            return mp_fail(2, "stranger: no listener address from rank 0");
        memset(&priv, 0xa5, sizeof(priv));
        priv.magic = htonl(0x464c5849u);
        priv.rank = (int32_t)htonl(1);
        priv.qidx = 0;
        rc = stranger_request(&a, NULL, 0);
        if (rc == 0)
            rc = stranger_request(&a, &priv, (uint8_t)sizeof(priv));
        if (write(pp->done_pipe[1], &rc, sizeof(rc)) != sizeof(rc))
            return mp_fail(2, "stranger: cannot tell rank 0");
        return rc;
    }
    st = mp_comm_create(rank, 2, root, &comm);
    if (st != FLX_OK)
        return mp_fail(rank, "flx_comm_create: %s", flx_status_string(st));
    if (rank == 0) {
        tl_ctx_t *ctx = ib_ctx(comm);
        st_addr_t a = {.ip = ctx->dev.addr.sin_addr.s_addr,
                       .port = rdma_get_src_port(ctx->listen_id)};
        if (write(pp->port_pipe[1], &a, sizeof(a)) != sizeof(a))
            return mp_fail(rank, "cannot tell the stranger");
    }
    /* collectives while the stranger knocks; rank 1 comes 20 ms late to
     * each, so rank 0 sleeps in poll(), where the listener is watched */
    while (!flag) {
        float x[4] = {1, 2, 3, (float)rank};
        if (rank == 0) {
            struct pollfd pfd = {.fd = pp->done_pipe[0], .events = POLLIN};
            flag = poll(&pfd, 1, 0) == 1 || iters >= 3000;
        } else {
            usleep(20000);
        }
        if (flx_broadcast(comm, &flag, 1, FLX_INT32, 0) != FLX_OK ||
            flx_allreduce(comm, x, x, 4, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO) != FLX_OK)
            return mp_fail(rank, "collective %d failed while the stranger knocked", iters);
        if (x[0] != 2 || x[2] != 6 || x[3] != 1)
            return mp_fail(rank, "wrong allreduce result while the stranger knocked");
        iters++;
    }
    if (rank == 0) {
        int rc = -1;
        if (read(pp->done_pipe[0], &rc, sizeof(rc)) != sizeof(rc) || rc != 0)
            return mp_fail(rank, "the stranger failed (after %d iterations)", iters);
        ids = own_cm_ids();
        fprintf(stderr, "rank 0: %d cm ids after the strangers\n", ids);
        if (ids != -1 && ids != 2)
            return mp_fail(rank, "%d cm ids after the strangers were rejected: expected 2 "
                           "(the listener, rank 1's QP)", ids);
        if (ids == -1)
            fprintf(stderr, "rank 0: rdma res show cm_id unavailable: cm ids not counted\n");
    }
    return flx_comm_destroy(comm) == FLX_OK ? 0 : mp_fail(rank, "destroy failed");
}

START_TEST(test_stranger)
{
    st_pipes_t pp;

    ck_assert_int_eq(pipe(pp.port_pipe), 0);
    ck_assert_int_eq(pipe(pp.done_pipe), 0);
    setenv("FLX_NET", "ib", 1);
    ck_assert_int_eq(mp_run_raw(3, body_stranger, &pp, 200, NULL), 0);
    close(pp.port_pipe[0]);
    close(pp.port_pipe[1]);
    close(pp.done_pipe[0]);
    close(pp.done_pipe[1]);
}
END_TEST

/* The connection token, without a device: only rank 1's token for this
 * rank (0) and QP 1 of this job claims rank 1 QP 1; the same token for
 * another QP, rank, receiver, job (other nonces) or secret, a flipped bit,
 * short data or another magic claims nothing. */
START_TEST(test_token)
{
    boot_t boot, boot2;
    tl_ctx_t ctx, ctx2;
    ib_boot_info_t infos[3], other[3];
    ib_priv_t priv, p;
    int q;

    ck_assert_int_ge(sodium_init(), 0);
    memset(&boot, 0, sizeof(boot));
    memset(&ctx, 0, sizeof(ctx));
    auth_key_derive("the job secret", &boot.key);
    boot2 = boot;
    auth_key_derive("another secret", &boot2.key);
    ctx.boot = &boot;
    ctx.rank = 0;
    ctx.size = 3;
    ctx.nqps = 2;
    ctx2 = ctx;
    ctx2.boot = &boot2;
    for (int r = 0; r < 3; r++)
        randombytes_buf(infos[r].nonce, IB_NONCE_BYTES);
    memcpy(other, infos, sizeof(other));
    randombytes_buf(other[0].nonce, IB_NONCE_BYTES); /* rank 0's of another job */

    memset(&priv, 0, sizeof(priv));
    priv.magic = htonl(IB_PRIV_MAGIC);
    priv.rank = (int32_t)htonl(1);
    priv.qidx = (int32_t)htonl(1);
    ib_conn_token(&ctx, 1, 0, 1, infos, priv.token);
    ck_assert_int_eq(ib_conn_claim(&ctx, &priv, sizeof(priv), infos, &q), 1);
    ck_assert_int_eq(q, 1);
    ck_assert_int_eq(ib_conn_claim(&ctx, &priv, sizeof(priv) + 12, infos, &q), 1);
    /* the same token, another claim */
    p = priv;
    p.qidx = 0;
    ck_assert_int_eq(ib_conn_claim(&ctx, &p, sizeof(p), infos, &q), -1);
    p = priv;
    p.rank = (int32_t)htonl(2);
    ck_assert_int_eq(ib_conn_claim(&ctx, &p, sizeof(p), infos, &q), -1);
    /* another receiver, job or secret */
    ck_assert_int_eq(ib_conn_claim(&ctx, &priv, sizeof(priv), other, &q), -1);
    ck_assert_int_eq(ib_conn_claim(&ctx2, &priv, sizeof(priv), infos, &q), -1);
    p = priv;
    ib_conn_token(&ctx, 1, 2, 1, infos, p.token); /* rank 1's token for rank 2 */
    ck_assert_int_eq(ib_conn_claim(&ctx, &p, sizeof(p), infos, &q), -1);
    /* damaged or malformed */
    for (size_t bit = 0; bit < 8 * IB_TOKEN_BYTES; bit += 37) {
        p = priv;
        p.token[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        ck_assert_int_eq(ib_conn_claim(&ctx, &p, sizeof(p), infos, &q), -1);
    }
    ck_assert_int_eq(ib_conn_claim(&ctx, &priv, sizeof(priv) - 1, infos, &q), -1);
    ck_assert_int_eq(ib_conn_claim(&ctx, NULL, 0, infos, &q), -1);
    p = priv;
    p.magic = htonl(IB_PRIV_MAGIC + 1);
    ck_assert_int_eq(ib_conn_claim(&ctx, &p, sizeof(p), infos, &q), -1);
    /* ranks and QPs this rank does not accept, each with its own right token */
    for (int r = -1; r <= 3; r++)
        for (int k = -1; k <= 2; k++) {
            if (r >= 1 && r <= 2 && k >= 0 && k <= 1)
                continue;
            p = priv;
            p.rank = (int32_t)htonl((uint32_t)r);
            p.qidx = (int32_t)htonl((uint32_t)k);
            if (r >= 0 && r < 3)
                ib_conn_token(&ctx, r, 0, k, infos, p.token);
            ck_assert_int_eq(ib_conn_claim(&ctx, &p, sizeof(p), infos, &q), -1);
        }
}
END_TEST

/* Registered ranges, without a device: one registration per range (a
 * second over the same pages, or one overlapping it, is refused: after
 * deregistering the first, the other would keep pages cached that the
 * caller then frees); deregistering what does not start a range is
 * FLX_ERR_NOT_FOUND; after a deregistration the range can be taken again. */
START_TEST(test_pin_ranges)
{
    static char buf[1 << 16];
    ib_mr_cache_t c;

    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(ib_mr_pin(&c, buf, 4096), FLX_OK);
    ck_assert_int_eq(ib_mr_pin(&c, buf, 8192), FLX_ERR_INVALID_ARG);     /* same start */
    ck_assert_int_eq(ib_mr_pin(&c, buf + 4095, 10), FLX_ERR_INVALID_ARG); /* last byte */
    ck_assert_int_eq(ib_mr_pin(&c, buf + 4096, 4096), FLX_OK);           /* adjacent */
    ck_assert_int_eq(ib_mr_unpin(&c, buf + 1), FLX_ERR_NOT_FOUND);         /* inside */
    ck_assert_int_eq(ib_mr_unpin(&c, buf + 20000), FLX_ERR_NOT_FOUND);
    ck_assert_int_eq(ib_mr_unpin(&c, buf), FLX_OK);
    ck_assert_int_eq(ib_mr_unpin(&c, buf), FLX_ERR_NOT_FOUND);             /* twice */
    ck_assert_int_eq(ib_mr_pin(&c, buf, 4096), FLX_OK);                   /* again */
    ck_assert_int_eq(ib_mr_unpin(&c, buf), FLX_OK);
    ck_assert_int_eq(ib_mr_unpin(&c, buf + 4096), FLX_OK);
    ck_assert_int_eq(c.npinned, 0);
    free(c.pinned);
}
END_TEST

int main(void)
{
    Suite *s;
    TCase *tc;
    SRunner *sr;
    int failed;

    /* without a device: the token, then SKIP (77) if it passed */
    s = suite_create("ib");
    tc = tcase_create("token");
    tcase_add_test(tc, test_token);
    tcase_add_test(tc, test_pin_ranges);
    suite_add_tcase(s, tc);
    if (!ib_dev_available()) {
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        printf("SKIP: no active RDMA port for the verbs cases (run inside "
               "../shared/softroce/softroce-run.sh)\n");
        return failed == 0 ? 77 : EXIT_FAILURE;
    }
    tc = tcase_create("verbs");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_regcache);
    tcase_add_test(tc, test_staging);
    tcase_add_test(tc, test_qp_error);
    tcase_add_test(tc, test_unpin_in_use);
    tcase_add_test(tc, test_pin_too_big);
    tcase_add_test(tc, test_memlock_8m);
    tcase_add_test(tc, test_partial_write);
    tcase_add_test(tc, test_destroy_after_abort);
    tcase_add_test(tc, test_stranger);
    suite_add_tcase(s, tc);
    tc = tcase_create("leave_pinned");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_leave_pinned);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
