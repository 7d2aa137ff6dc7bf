/* check_ib.c -- ib-specific behaviour on real verbs (run in the SoftRoCE VM;
 * exits 77, SKIP, where no RDMA port is active): the registration cache
 * reuses and evicts registrations, unregistered buffers go through
 * staging slots (or, all busy, a registration per message), a QP forced into the error state turns
 * into FLX_ERR_PEER_LOST on every rank, results stay exact on the RDMA
 * write path. */
#include "tests/mp.h"
#include "collectives/comm.h"
#include "transport/ib/ib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static tl_ctx_t *ib_ctx(flx_comm_h comm) { return comm->tlctx; }

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
        for (int algo = FLX_ALGO_RING; algo <= FLX_ALGO_RD; algo++) {
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
            if (algo == FLX_ALGO_TREE)
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

int main(void)
{
    Suite *s;
    TCase *tc;
    SRunner *sr;
    int failed;

    if (!ib_dev_available()) {
        printf("SKIP: no active RDMA port (run inside ../shared/softroce/softroce-run.sh)\n");
        return 77;
    }
    s = suite_create("ib");
    tc = tcase_create("verbs");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_regcache);
    tcase_add_test(tc, test_staging);
    tcase_add_test(tc, test_qp_error);
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
