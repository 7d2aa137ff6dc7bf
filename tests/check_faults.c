/* check_faults.c -- faults on real forked ranks over real sockets: a rank
 * SIGKILLed at a random moment of a loop of mixed collectives (20 trials),
 * the root dying during bootstrap, a data socket reset mid-transfer, the
 * watchdog of every collective kind (one log line), flx_comm_abort from
 * another thread, flx_comm_get_async_error, the library's threads started
 * through a shortage (flx_thread_start).  Runs on the backend FLX_NET
 * picks (scripts/test-ib.sh runs it with FLX_NET=ib in the SoftRoCE VM).
 *
 * FLX_FAULT_TRIALS overrides the number of kill trials (default 20). */
#include "tests/mp.h"
#include "collectives/comm.h"
#include "common/thread.h"
#include "common/time.h"
#include "transport/tcp/tcp.h"

#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define FAULT_TIMEOUT_S 2.0  /* FLX_TIMEOUT in these tests */
/* what an error may take beyond it: these bounds tell "returned soon"
 * from "waited for a longer timeout or for ever", not a speed.  This
 * 2-core machine, loaded, has stalled a whole process for 1.1-1.3 s
 * (strace: a 101 ms poll returning after 1.19 s) */
#define FAULT_MARGIN_S 3.0
/* flx_comm_abort reaching a waiting collective: its progress slice is
 * 0.1 s, FLX_TIMEOUT in that test 30 s */
#define ABORT_BOUND_S 5.0
#define MAX_RANKS 8

static int is_tcp(flx_comm_h comm) { return strcmp(flx_comm_net_name(comm), "tcp") == 0; }

/* every child reaped: no zombie left behind */
static void assert_no_children(void)
{
    int status;
    ck_assert_int_eq(waitpid(-1, &status, WNOHANG), -1);
    ck_assert_int_eq(errno, ECHILD);
}

static void fault_env(void)
{
    setenv("FLX_TIMEOUT", "2s", 1);
    setenv("FLX_CALIBRATE", "no", 1);
}

static void fault_env_clear(void)
{
    unsetenv("FLX_TIMEOUT");
    unsetenv("FLX_CALIBRATE");
}

/* n ranks of body under FLX_TIMEOUT timeout (no calibration), killed after
 * harness_s, at most tries runs (mp_run_raw_again: name); every rank must
 * pass and no child may be left */
static void run_fault_again(int n, mp_raw_body_t body, void *arg, const char *timeout,
                            double harness_s, int tries, const char *name)
{
    setenv("FLX_TIMEOUT", timeout, 1);
    setenv("FLX_CALIBRATE", "no", 1);
    ck_assert_int_eq(mp_run_raw_again(n, body, arg, harness_s, tries, name), 0);
    assert_no_children();
    fault_env_clear();
}

static void run_fault(int n, mp_raw_body_t body, void *arg, const char *timeout, double harness_s)
{
    run_fault_again(n, body, arg, timeout, harness_s, 1, "run_fault");
}

/* ---- SIGKILL at a random moment -------------------------------------------- */

typedef struct {
    int victim;
    double delay_s;
    unsigned seed;
    double kill_t;                /* when the victim killed itself       */
    double err_t[MAX_RANKS];      /* when a survivor's call failed        */
    double call_s[MAX_RANKS];     /* how long that call took              */
    int status[MAX_RANKS];
    int calls[MAX_RANKS];
} kill_trial_t;

static void *killer_thread(void *arg)
{
    kill_trial_t *t = arg;
    struct timespec ts = {.tv_sec = (time_t)t->delay_s,
                          .tv_nsec = (long)((t->delay_s - (double)(time_t)t->delay_s) * 1e9)};

    nanosleep(&ts, NULL);
    t->kill_t = flx_time_now();
    __sync_synchronize();
    kill(getpid(), SIGKILL);
    return NULL;
}

/* One call of a mixed loop, the same on every rank (same seed). */
static flx_status_t mixed_call(flx_comm_h comm, int size, unsigned *seed, float *a, float *b)
{
    size_t count = 1 + (size_t)rand_r(seed) % (1u << 16);
    flx_algo_t algo = (flx_algo_t)(1 + rand_r(seed) % 3);
    int root = rand_r(seed) % size;
    flx_request_h req;
    flx_status_t st;

    switch (rand_r(seed) % 7) {
    case 0: return flx_allreduce(comm, a, a, count, FLX_FLOAT32, FLX_SUM, algo);
    case 1: return flx_allreduce(comm, a, b, count * 4, FLX_FLOAT32, FLX_MAX, FLX_ALGO_AUTO);
    case 2: return flx_allgather(comm, a, b, count, FLX_FLOAT32,
                                 algo == FLX_ALGO_TREE ? FLX_ALGO_RING : algo);
    case 3: return flx_broadcast(comm, a, count, FLX_FLOAT32, root);
    case 4: return flx_reduce_scatter(comm, b, a, count, FLX_FLOAT32, FLX_SUM);
    case 5: return flx_barrier(comm);
    default:
        st = flx_iallreduce(comm, a, a, count, FLX_FLOAT32, FLX_SUM, algo, &req);
        return st == FLX_OK ? flx_wait(req) : st;
    }
}

static int body_kill(flx_comm_h comm, int rank, int size, void *arg)
{
    kill_trial_t *t = arg;
    size_t n = (size_t)(1u << 18) * (size_t)size;
    float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
    unsigned seed = t->seed;
    double end = flx_time_now() + 20;
    flx_status_t st = FLX_OK;
    pthread_t th;

    if (rank == t->victim && pthread_create(&th, NULL, killer_thread, t) != 0)
        return mp_fail(rank, "pthread_create");
    while (st == FLX_OK && flx_time_now() < end) {
        double t0 = flx_time_now();
        st = mixed_call(comm, size, &seed, a, b);
        t->call_s[rank] = flx_time_now() - t0;
        t->calls[rank]++;
    }
    t->err_t[rank] = flx_time_now();
    t->status[rank] = st;
    free(a);
    free(b);
    return st == FLX_ERR_PEER_LOST || st == FLX_ERR_TIMED_OUT ? 0 : 1;
}

/* flx_thread_start through a shortage of stack memory (an address-space
 * limit a 64 MB stack does not fit in, as a commit or pids limit refuses
 * threads on a busy machine; larger than any stack glibc may have cached
 * from the parent's threads): pthread_create fails with EAGAIN,
 * flx_thread_start keeps trying and starts the thread once a helper lifts
 * the limit 0.3 s later; with no helper it gives up after its retries with
 * EAGAIN and leaves the output alone.  Not under AddressSanitizer, whose
 * own allocations need the address space the limit takes away. */
#if defined(__SANITIZE_ADDRESS__)
#define FLX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLX_TEST_ASAN 1
#endif
#endif

static struct rlimit thread_as_saved;
static int thread_lift_go; /* the lifter's 0.3 s start when set */

enum { THREAD_BIG_STACK = 64 << 20 };

static void *thread_lift_limit(void *arg)
{
    const struct timespec d = {.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000};

    (void)arg;
    while (!__atomic_load_n(&thread_lift_go, __ATOMIC_ACQUIRE))
        sched_yield();
    nanosleep(&d, NULL);
    setrlimit(RLIMIT_AS, &thread_as_saved);
    return NULL;
}

static void *thread_mark(void *arg)
{
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* an address-space limit 2 MB above what the process maps now */
static int thread_limit_as(void)
{
    unsigned long pages = 0;
    struct rlimit r;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f == NULL)
        return -1;
    if (fscanf(f, "%lu", &pages) != 1) {
        fclose(f);
        return -1;
    }
    fclose(f);
    r.rlim_cur = pages * (unsigned long)sysconf(_SC_PAGESIZE) + (2u << 20);
    r.rlim_max = thread_as_saved.rlim_max;
    return setrlimit(RLIMIT_AS, &r);
}

START_TEST(test_thread_retry)
{
#ifdef FLX_TEST_ASAN
    printf("thread_retry: not under AddressSanitizer (it needs the address space)\n");
#else
    const char *fork_env = getenv("CK_FORK");

    /* the limit must die with the test's process, not stay for the next tests */
    if (fork_env != NULL && strcmp(fork_env, "no") == 0) {
        printf("thread_retry: not with CK_FORK=no (a failure would leave the limit set)\n");
        return;
    }
    pthread_t lifter, t, untouched;
    pthread_attr_t big;
    int ran = 0, rc;
    double t0, took;

    memset(&untouched, 0xab, sizeof(untouched));
    t = untouched;
    ck_assert_int_eq(getrlimit(RLIMIT_AS, &thread_as_saved), 0);
    /* no helper: EAGAIN after the retries, t left alone */
    ck_assert_int_eq(thread_limit_as(), 0);
    ck_assert_int_eq(pthread_attr_init(&big), 0);
    ck_assert_int_eq(pthread_attr_setstacksize(&big, THREAD_BIG_STACK), 0);
    ck_assert_int_eq(pthread_create(&t, &big, thread_mark, &ran), EAGAIN); /* the shortage is real */
    pthread_attr_destroy(&big);
    t0 = flx_time_now();
    rc = flx_thread_start(&t, thread_mark, &ran, THREAD_BIG_STACK);
    took = flx_time_now() - t0;
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &thread_as_saved), 0);
    ck_assert_int_eq(rc, EAGAIN);
    ck_assert(memcmp(&t, &untouched, sizeof(t)) == 0);
    ck_assert_msg(took >= FLX_THREAD_RETRY_S * 0.9, "gave up after %.3f s", took);
    ck_assert_int_eq(ran, 0);
    /* the helper lifts the limit 0.3 s after t0: started */
    ck_assert_int_eq(pthread_create(&lifter, NULL, thread_lift_limit, NULL), 0);
    ck_assert_int_eq(thread_limit_as(), 0);
    t0 = flx_time_now();
    __atomic_store_n(&thread_lift_go, 1, __ATOMIC_RELEASE);
    rc = flx_thread_start(&t, thread_mark, &ran, THREAD_BIG_STACK);
    took = flx_time_now() - t0;
    pthread_join(lifter, NULL);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &thread_as_saved), 0);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(__atomic_load_n(&ran, __ATOMIC_ACQUIRE), 1);
    ck_assert_msg(took >= 0.29 && took < FLX_THREAD_RETRY_S, "started after %.3f s", took);
    /* a small stack fits where the default did not */
    ran = 0;
    ck_assert_int_eq(thread_limit_as(), 0);
    rc = flx_thread_start(&t, thread_mark, &ran, 256 * 1024);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &thread_as_saved), 0);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(ran, 1);
#endif
}
END_TEST

START_TEST(test_kill_trials)
{
    const char *env = getenv("FLX_FAULT_TRIALS");
    int trials = env ? atoi(env) : 20, survived = 0, size = 3;
    double worst = 0, sum = 0;
    int nerr = 0;
    unsigned rng = (unsigned)getpid();
    kill_trial_t *t = mp_shared_alloc(sizeof(*t));

    fault_env();
    for (int i = 0; i < trials; i++) {
        int codes[MAX_RANKS], ok = 1;
        memset(t, 0, sizeof(*t));
        t->victim = rand_r(&rng) % size;
        t->delay_s = 0.02 + (rand_r(&rng) % 1000) * 0.0004; /* 20 .. 420 ms */
        t->seed = (unsigned)rand_r(&rng);
        mp_run(size, body_kill, t, 30, codes);
        assert_no_children();
        for (int r = 0; r < size; r++) {
            double lat;
            if (r == t->victim) {
                if (codes[r] != 128 + SIGKILL) {
                    fprintf(stderr, "trial %d: the victim %d exited %d\n", i, r, codes[r]);
                    ok = 0;
                }
                continue;
            }
            lat = t->err_t[r] - t->kill_t;
            if (codes[r] != 0 || t->call_s[r] > FAULT_TIMEOUT_S + FAULT_MARGIN_S ||
                lat > FAULT_TIMEOUT_S + FAULT_MARGIN_S) {
                fprintf(stderr, "trial %d (victim %d at %.0f ms): rank %d exit %d, %s after %d "
                        "calls, %.2f s after the kill, last call %.2f s\n", i, t->victim,
                        t->delay_s * 1e3, r, codes[r], flx_status_name(t->status[r]),
                        t->calls[r], lat, t->call_s[r]);
                ok = 0;
                continue;
            }
            if (lat > worst)
                worst = lat;
            sum += lat;
            nerr++;
        }
        survived += ok;
    }
    printf("# kill trials (%s): %d/%d with every survivor failing in time; time from the kill "
           "to the error: mean %.0f ms, max %.0f ms\n",
           getenv("FLX_NET") ? getenv("FLX_NET") : "auto", survived, trials,
           nerr ? sum / nerr * 1e3 : 0.0, worst * 1e3);
    fflush(stdout);
    munmap(t, sizeof(*t));
    fault_env_clear();
    ck_assert_int_eq(survived, trials);
}
END_TEST

/* ---- the root dies during bootstrap ------------------------------------------ */

typedef struct {
    int when;                   /* 0: root never comes, 1: dies after rank 1 joined */
    double took[MAX_RANKS];
    int status[MAX_RANKS];
} root_death_t;

static void *die_later(void *arg)
{
    usleep((useconds_t)(*(int *)arg));
    kill(getpid(), SIGKILL);
    return NULL;
}

static int raw_root_dies(int rank, int size, const char *root, void *arg)
{
    root_death_t *rd = arg;
    static int delay_us = 300000;
    flx_comm_h comm;
    flx_status_t st;
    pthread_t th;
    double t0;

    if (rank == 0) {
        if (rd->when == 0)
            return 0; /* never listens */
        pthread_create(&th, NULL, die_later, &delay_us);
    }
    if (rank == 2)
        usleep(600000); /* arrives after the root died */
    t0 = flx_time_now();
    st = mp_comm_create(rank, size, root, &comm);
    rd->took[rank] = flx_time_now() - t0;
    rd->status[rank] = st;
    if (st == FLX_OK) {
        flx_comm_destroy(comm);
        return mp_fail(rank, "a job without its root formed");
    }
    return 0;
}

START_TEST(test_root_dies_in_bootstrap)
{
    root_death_t *rd = mp_shared_alloc(sizeof(*rd));
    int codes[3];

    rd->when = _i;
    setenv("FLX_CONNECT_TIMEOUT", "2s", 1);
    mp_run_raw(3, raw_root_dies, rd, 30, codes);
    assert_no_children();
    for (int r = 1; r < 3; r++) {
        ck_assert_msg(codes[r] == 0, "case %d rank %d exit %d", _i, r, codes[r]);
        ck_assert_msg(rd->status[r] == FLX_ERR_TIMED_OUT || rd->status[r] == FLX_ERR_PEER_LOST,
                      "case %d rank %d: %s", _i, r, flx_status_name(rd->status[r]));
        ck_assert_msg(rd->took[r] < 2.0 + FAULT_MARGIN_S, "case %d rank %d took %.1f s", _i, r,
                      rd->took[r]);
    }
    unsetenv("FLX_CONNECT_TIMEOUT");
    munmap(rd, sizeof(*rd));
}
END_TEST

/* ---- a data socket reset in the middle of a transfer (tcp) --------------------- */

/* Reset the connection to peer 0 under the running collective: SO_LINGER 0
 * and the last reference dropped (dup2 of /dev/null over the descriptor)
 * send a RST; this rank then reads from something that is no socket. */
static void *reset_thread(void *arg)
{
    flx_comm_h comm = arg;
    int fd = comm->tlctx->conns[0].fd, devnull = open("/dev/null", O_RDWR);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};

    usleep(50000);
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    dup2(devnull, fd);
    close(devnull);
    return NULL;
}

static int body_reset(flx_comm_h comm, int rank, int size, void *arg)
{
    size_t n = (size_t)1 << 20;
    float *a = calloc(n, sizeof(float));
    double end, t0;
    flx_status_t st = FLX_OK;
    pthread_t th;

    (void)size;
    (void)arg;
    if (!is_tcp(comm)) {
        free(a);
        return 0; /* tcp only: the ib data path has no socket to reset */
    }
    if (rank == 1 && pthread_create(&th, NULL, reset_thread, comm) != 0)
        return mp_fail(rank, "pthread_create");
    end = flx_time_now() + 10;
    while (st == FLX_OK && flx_time_now() < end) {
        t0 = flx_time_now();
        st = flx_allreduce(comm, a, a, n, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING);
        if (flx_time_now() - t0 > FAULT_TIMEOUT_S + FAULT_MARGIN_S)
            return mp_fail(rank, "a call took %.1f s", flx_time_now() - t0);
    }
    if (rank == 1)
        pthread_join(th, NULL);
    free(a);
    if (st == FLX_OK)
        return mp_fail(rank, "no error after a reset connection");
    if (flx_comm_get_async_error(comm) != st)
        return mp_fail(rank, "async error %s, call %s",
                       flx_status_name(flx_comm_get_async_error(comm)), flx_status_name(st));
    return 0;
}

START_TEST(test_reset_mid_transfer)
{
    fault_env();
    ck_assert_int_eq(mp_run(3, body_reset, NULL, 30, NULL), 0);
    assert_no_children();
    fault_env_clear();
}
END_TEST

/* ---- the watchdog: every collective kind, one log line -------------------------- */

enum { WD_ALLREDUCE, WD_ALLGATHER, WD_BCAST, WD_REDUCE_SCATTER, WD_BARRIER, WD_IALLREDUCE,
       WD_COUNT };
static const char *const wd_names[] = {"allreduce #1 ", "allgather #1 ", "broadcast #1 ",
                                       "reduce_scatter #1 ", "barrier #1 ", "allreduce #1 "};

static flx_status_t wd_call(flx_comm_h comm, int kind, float *a, float *b)
{
    flx_request_h req;
    flx_status_t st;

    switch (kind) {
    case WD_ALLREDUCE: return flx_allreduce(comm, a, a, 1000, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);
    case WD_ALLGATHER: return flx_allgather(comm, a, b, 1000, FLX_FLOAT32, FLX_ALGO_AUTO);
    case WD_BCAST: return flx_broadcast(comm, a, 1000, FLX_FLOAT32, 1);
    case WD_REDUCE_SCATTER: return flx_reduce_scatter(comm, b, a, 1000, FLX_FLOAT32, FLX_SUM);
    case WD_BARRIER: return flx_barrier(comm);
    default:
        st = flx_iallreduce(comm, a, a, 1000, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO, &req);
        return st == FLX_OK ? flx_wait(req) : st;
    }
}

/* rank 1 is alive but late (2.5 s): rank 0 times out after FLX_TIMEOUT = 1 s
 * with one log line naming the collective, its number and rank 1 */
static int raw_watchdog(int rank, int size, const char *root, void *arg)
{
    int kind = *(int *)arg, saved = -1, lines = 0, named = 0;
    static float a[4000], b[4000];
    char path[] = "/tmp/flx-wd-XXXXXX", line[512];
    flx_comm_h comm;
    flx_status_t st;
    FILE *f;
    double t0, took;

    if (mp_comm_create(rank, size, root, &comm) != FLX_OK)
        return mp_fail(rank, "create");
    if (flx_barrier(comm) != FLX_OK) /* collective #0 */
        return mp_fail(rank, "barrier");
    if (rank == 1) {
        usleep(2500000);
        /* rank 0's part may all be here already, so this may still
         * complete; the next one cannot */
        st = wd_call(comm, kind, a, b);
        if (st == FLX_OK)
            st = flx_barrier(comm);
        flx_comm_destroy(comm);
        return st == FLX_OK ? mp_fail(rank, "the late rank went on as if nothing happened") : 0;
    }
    /* rank 0: capture what the library logs while the collective times out */
    {
        int fd = mkstemp(path);
        fflush(stderr);
        saved = dup(2);
        dup2(fd, 2);
        close(fd);
    }
    t0 = flx_time_now();
    st = wd_call(comm, kind, a, b);
    took = flx_time_now() - t0;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f)) {
        lines++;
        named += strstr(line, wd_names[kind]) && strstr(line, "timed out") &&
                 strstr(line, "rank 1");
        fprintf(stderr, "rank 0 logged: %s", line);
    }
    if (f)
        fclose(f);
    unlink(path);
    if (flx_comm_get_async_error(comm) != FLX_ERR_TIMED_OUT)
        return mp_fail(rank, "async error %s", flx_status_name(flx_comm_get_async_error(comm)));
    flx_comm_destroy(comm);
    if (st != FLX_ERR_TIMED_OUT)
        return mp_fail(rank, "kind %d: %s instead of FLX_ERR_TIMED_OUT", kind,
                       flx_status_name(st));
    if (took > 1.0 + FAULT_MARGIN_S)
        return mp_fail(rank, "the timeout took %.1f s", took);
    if (lines != 1 || named != 1)
        return mp_fail(rank, "%d log lines (%d naming '%s' and rank 1), want exactly 1", lines,
                       named, wd_names[kind]);
    return 0;
}

START_TEST(test_watchdog)
{
    int kind = _i;

    run_fault(2, raw_watchdog, &kind, "1s", 30);
}
END_TEST

/* ---- flx_comm_abort from another thread ------------------------------------------ */

typedef struct {
    flx_comm_h comm;
    float *buf;
    size_t n;
    flx_algo_t algo;
    flx_status_t st;
    double done_t;
} blocked_call_t;

static void *blocked_allreduce(void *arg)
{
    blocked_call_t *bc = arg;
    bc->st = flx_allreduce(bc->comm, bc->buf, bc->buf, bc->n, FLX_FLOAT32, FLX_SUM, bc->algo);
    bc->done_t = flx_time_now();
    return NULL;
}

/* rank 1 never joins the large allreduce; rank 0 aborts (case 0: a blocked
 * flx_allreduce in another thread, case 1: running and queued requests,
 * case 2: case 0 with recursive doubling, whose chunk requests live on the
 * algorithm's stack: the abort must fail the transport before it returns;
 * case 3: the same with halving-doubling, whose requests live there too) */
static int raw_abort(int rank, int size, const char *root, void *arg)
{
    int mode = *(int *)arg;
    flx_algo_t algo = mode == 2 ? FLX_ALGO_RD : mode == 3 ? FLX_ALGO_HD : FLX_ALGO_RING;
    size_t n = (size_t)1 << 22; /* 16 MiB */
    float *buf = calloc(n, sizeof(float)), one = 1;
    blocked_call_t bc = {0};
    flx_request_h req[2];
    flx_comm_h comm;
    flx_status_t st;
    pthread_t th;
    double t0;

    if (mp_comm_create(rank, size, root, &comm) != FLX_OK)
        return mp_fail(rank, "create");
    if (rank == 1) {
        usleep(1500000);
        /* the same call, late: rank 0 aborted and said so */
        st = flx_allreduce(comm, buf, buf, n, FLX_FLOAT32, FLX_SUM, algo);
        flx_comm_destroy(comm);
        free(buf);
        return st == FLX_ERR_PEER_LOST ? 0 : mp_fail(rank, "after the abort: %s",
                                                     flx_status_name(st));
    }
    if (mode != 1) {
        bc = (blocked_call_t){.comm = comm, .buf = buf, .n = n, .algo = algo};
        pthread_create(&th, NULL, blocked_allreduce, &bc);
        usleep(300000);
        t0 = flx_time_now();
        if (flx_comm_abort(comm) != FLX_OK)
            return mp_fail(rank, "flx_comm_abort failed");
        pthread_join(th, NULL);
        if (bc.st != FLX_ERR_ABORTED)
            return mp_fail(rank, "the blocked allreduce returned %s", flx_status_name(bc.st));
        if (bc.done_t - t0 > ABORT_BOUND_S)
            return mp_fail(rank, "the blocked allreduce took %.2f s to return", bc.done_t - t0);
    } else {
        if (flx_iallreduce(comm, buf, buf, n, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING, &req[0]) != FLX_OK ||
            flx_iallreduce(comm, buf, buf, n, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING, &req[1]) != FLX_OK)
            return mp_fail(rank, "iallreduce");
        usleep(300000);
        if (flx_test(req[1]) != FLX_INPROGRESS)
            return mp_fail(rank, "the queued request is not in progress");
        t0 = flx_time_now();
        flx_comm_abort(comm);
        st = flx_wait(req[0]);
        if (st != FLX_ERR_ABORTED || flx_time_now() - t0 > ABORT_BOUND_S)
            return mp_fail(rank, "flx_wait: %s after %.2f s", flx_status_name(st),
                           flx_time_now() - t0);
        while ((st = flx_test(req[1])) == FLX_INPROGRESS && flx_time_now() - t0 < 2 * ABORT_BOUND_S)
            usleep(1000);
        if (st != FLX_ERR_ABORTED || flx_time_now() - t0 > ABORT_BOUND_S)
            return mp_fail(rank, "flx_test of the queued request: %s after %.2f s",
                           flx_status_name(st), flx_time_now() - t0);
    }
    /* later calls */
    if ((st = flx_allreduce(comm, &one, &one, 1, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO)) != FLX_ERR_ABORTED ||
        (st = flx_barrier(comm)) != FLX_ERR_ABORTED ||
        (st = flx_broadcast(comm, &one, 1, FLX_FLOAT32, 0)) != FLX_ERR_ABORTED ||
        (st = flx_iallreduce(comm, &one, &one, 1, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO,
                             &req[0])) != FLX_ERR_ABORTED ||
        (st = flx_comm_get_async_error(comm)) != FLX_ERR_ABORTED ||
        (st = flx_comm_abort(comm)) != FLX_OK)
        return mp_fail(rank, "a call after the abort returned %s", flx_status_name(st));
    t0 = flx_time_now();
    flx_comm_destroy(comm);
    free(buf);
    if (flx_time_now() - t0 > ABORT_BOUND_S)
        return mp_fail(rank, "flx_comm_destroy took %.2f s after the abort", flx_time_now() - t0);
    return 0;
}

START_TEST(test_abort)
{
    int mode = _i;

    run_fault(2, raw_abort, &mode, "30s", 30);
}
END_TEST

START_TEST(test_abort_single_rank)
{
    flx_comm_params_t p = {.field_mask = FLX_COMM_PARAM_RANK | FLX_COMM_PARAM_SIZE,
                           .rank = 0, .size = 1};
    flx_comm_h comm;
    float x = 1;

    static float reg[1024];
    float y[4];
    size_t counts[1], displs[1];
    flx_link_model_t lm = {0}, lm0;
    flx_gsync_h g = (flx_gsync_h)(void *)&x; /* outputs written only on success */
    flx_ctl_h ctl = (flx_ctl_h)(void *)&x;

    ck_assert_int_eq(flx_comm_create(&p, &comm), FLX_OK);
    ck_assert_int_eq(flx_comm_get_async_error(comm), FLX_OK);
    ck_assert_int_eq(flx_allreduce(comm, &x, &x, 1, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO), FLX_OK);
    ck_assert_int_eq(flx_mem_register(comm, reg, sizeof(reg)), FLX_OK);
    ck_assert_int_eq(flx_comm_abort(comm), FLX_OK);
    ck_assert_int_eq(flx_allreduce(comm, &x, &x, 1, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO),
                     FLX_ERR_ABORTED);
    ck_assert_int_eq(flx_comm_get_async_error(comm), FLX_ERR_ABORTED);
    /* every later call, not only the collectives (destroy releases the registration) */
    ck_assert_int_eq(flx_allgather(comm, y, y, 1, FLX_FLOAT32, FLX_ALGO_AUTO), FLX_ERR_ABORTED);
    ck_assert_int_eq(flx_reduce_scatter(comm, y, y, 1, FLX_FLOAT32, FLX_SUM), FLX_ERR_ABORTED);
    ck_assert_int_eq(flx_allgatherv(comm, y, 1, y + 1, 1, counts, displs, FLX_FLOAT32,
                                    FLX_ALGO_AUTO), FLX_ERR_ABORTED);
    ck_assert_int_eq(flx_mem_register(comm, y, sizeof(y)), FLX_ERR_ABORTED);
    ck_assert_int_eq(flx_mem_deregister(comm, reg), FLX_ERR_ABORTED);
    lm0 = lm;
    ck_assert_int_eq(flx_comm_link_model(comm, &lm), FLX_ERR_ABORTED);
    ck_assert(memcmp(&lm, &lm0, sizeof(lm)) == 0);
    ck_assert_int_eq(flx_gsync_create(comm, 16, NULL, &g), FLX_ERR_ABORTED);
    ck_assert_ptr_eq(g, (flx_gsync_h)(void *)&x);
    ck_assert_int_eq(flx_ctl_create(comm, 16, NULL, &ctl), FLX_ERR_ABORTED);
    ck_assert_ptr_eq(ctl, (flx_ctl_h)(void *)&x);
    ck_assert_int_eq(flx_comm_destroy(comm), FLX_OK);
    ck_assert_int_eq(flx_comm_abort(NULL), FLX_ERR_INVALID_ARG);
    ck_assert_int_eq(flx_comm_get_async_error(NULL), FLX_ERR_INVALID_ARG);
}
END_TEST

/* ---- the first error, seen without waiting ------------------------------------------ */

static int body_async_error(flx_comm_h comm, int rank, int size, void *arg)
{
    static float a[1 << 16];
    flx_request_h req;
    flx_status_t st, async;
    double t0;

    (void)arg;
    if (flx_allreduce(comm, a, a, 1 << 16, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO) != FLX_OK)
        return mp_fail(rank, "first allreduce");
    if (flx_comm_get_async_error(comm) != FLX_OK)
        return mp_fail(rank, "an error before any failure");
    if (rank == size - 1)
        _exit(0); /* gone without a goodbye */
    if (flx_iallreduce(comm, a, a, 1 << 16, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING, &req) != FLX_OK)
        return mp_fail(rank, "iallreduce");
    t0 = flx_time_now();
    while ((async = flx_comm_get_async_error(comm)) == FLX_OK &&
           flx_time_now() - t0 < FAULT_TIMEOUT_S + FAULT_MARGIN_S)
        usleep(1000);
    if (async != FLX_ERR_PEER_LOST && async != FLX_ERR_TIMED_OUT)
        return mp_fail(rank, "flx_comm_get_async_error: %s after %.1f s",
                       flx_status_name(async), flx_time_now() - t0);
    st = flx_wait(req);
    if (st != async || flx_comm_get_async_error(comm) != async)
        return mp_fail(rank, "flx_wait %s, async error %s", flx_status_name(st),
                       flx_status_name(async));
    return 0;
}

START_TEST(test_async_error)
{
    int codes[3];

    fault_env();
    mp_run(3, body_async_error, NULL, 30, codes);
    assert_no_children();
    ck_assert_int_eq(codes[0], 0);
    ck_assert_int_eq(codes[1], 0);
    ck_assert_int_eq(codes[2], 0);
    fault_env_clear();
}
END_TEST

/* ---- a send to a peer that failed -------------------------------------------- */

/* Rank 0 broadcasts 64 MiB while rank 1 reads nothing: rank 0's send
 * stalls with the socket buffers full.  Then rank 1 aborts while idle (its
 * peers hear why at once) and stays alive, so its connection closes without
 * a reset.  The broadcast must fail as soon as rank 0 reads the notice,
 * with FLX_ERR_PEER_LOST, not wait out FLX_TIMEOUT (20 s here) for a send
 * that can never finish. */
static int raw_send_to_failed(int rank, int size, const char *root, void *arg)
{
    volatile double *abort_t = arg; /* shared: when rank 1 aborted */
    size_t n = (size_t)16 << 20;
    float *buf = calloc(n, sizeof(float));
    flx_comm_h comm;
    flx_status_t st;
    double t0, end;

    if (buf == NULL || mp_comm_create(rank, size, root, &comm) != FLX_OK)
        return mp_fail(rank, "create");
    if (flx_barrier(comm) != FLX_OK)
        return mp_fail(rank, "barrier");
    if (rank == 1) {
        usleep(500000); /* rank 0's send has stalled */
        *abort_t = flx_time_now();
        __sync_synchronize();
        flx_comm_abort(comm);
        usleep(3000000); /* alive: the kernel does not reset the connection */
        flx_comm_destroy(comm);
        free(buf);
        return 0;
    }
    t0 = flx_time_now();
    st = flx_broadcast(comm, buf, n, FLX_FLOAT32, 0);
    end = flx_time_now();
    __sync_synchronize();
    flx_comm_destroy(comm);
    free(buf);
    /* failed by the abort: after it (not a fixed time after rank 0's own
     * barrier, which a rank 0 late out of the barrier made too short), and
     * from its notice, within 2.5 s, before rank 1's destroy 3 s after the
     * abort (with the notice failing the receives only, not the send, the
     * send waited out FLX_TIMEOUT: tried) */
    if (st != FLX_ERR_PEER_LOST || end - t0 > 5.0 || !(*abort_t > 0) || end < *abort_t ||
        end - *abort_t > 2.5)
        return mp_fail(rank, "the broadcast to the failed rank returned %s after %.2f s, "
                       "%.2f s after rank 1 aborted", flx_status_name(st), end - t0,
                       *abort_t > 0 ? end - *abort_t : -1.0);
    return 0;
}

START_TEST(test_send_to_failed)
{
    double *abort_t = mp_shared_alloc(sizeof(*abort_t));

    run_fault(2, raw_send_to_failed, abort_t, "20s", 40);
    munmap(abort_t, sizeof(*abort_t));
}
END_TEST

/* ---- an abort as a collective ends; a failure in the middle of a message ------------ */

typedef struct {
    flx_comm_h comm;
    double at;
} late_abort_t;

static void *abort_at(void *arg)
{
    late_abort_t *la = arg;

    while (flx_time_now() < la->at)
        usleep(1000);
    flx_comm_abort(la->comm);
    return NULL;
}

/* The execution lock's release, held back while armed (case 2 below) until
 * another thread's flx_comm_abort has come and gone: the abort then finds
 * the lock taken after the call last looked at the flag.  Interposed on
 * libc's for this program; every other unlock passes straight through. */
static pthread_mutex_t *volatile held_lock;
static int held_armed, held_reached, held_abort_done;

int pthread_mutex_unlock(pthread_mutex_t *m)
{
    static int (*real)(pthread_mutex_t *);

    if (real == NULL)
        real = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_unlock");
    if (m == held_lock && __atomic_exchange_n(&held_armed, 0, __ATOMIC_SEQ_CST)) {
        __atomic_store_n(&held_reached, 1, __ATOMIC_SEQ_CST);
        while (!__atomic_load_n(&held_abort_done, __ATOMIC_SEQ_CST))
            usleep(1000);
    }
    return real(m);
}

static void *abort_in_unlock(void *arg)
{
    while (!__atomic_load_n(&held_reached, __ATOMIC_SEQ_CST))
        usleep(1000);
    flx_comm_abort((flx_comm_h)arg);
    __atomic_store_n(&held_abort_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Rank 0 aborts at 130 ms while its barrier (case 0) or non-blocking
 * allreduce (case 1) waits for rank 1, which comes at 170 ms, or (case 2)
 * while its barrier, complete, still holds the execution lock (before, the
 * abort only tried the lock and nobody told the peers): the call may
 * complete (its last message arrives before the abort is seen) or fail, and
 * then rank 0 computes for 6 s without a call.  Rank 1's next call must
 * fail at once (the peers hear of the abort when the call ends), not when
 * rank 0 calls again or destroys: within 3 s, which a rank off the CPU for
 * a second does not reach (1.5 s of 3 did not leave room for that). */
static int raw_abort_late(int rank, int size, const char *root, void *arg)
{
    int mode = *(int *)arg;
    float x[4] = {1, 2, 3, 4};
    late_abort_t la;
    flx_request_h req;
    flx_comm_h comm;
    flx_status_t st;
    pthread_t th;
    double t0;

    (void)size;
    if (mp_comm_create(rank, size, root, &comm) != FLX_OK)
        return mp_fail(rank, "create");
    if (flx_barrier(comm) != FLX_OK)
        return mp_fail(rank, "first barrier");
    t0 = flx_time_now();
    if (rank == 0) {
        la = (late_abort_t){.comm = comm, .at = t0 + 0.13};
        if (mode == 2) {
            held_lock = &comm->exec;
            __atomic_store_n(&held_armed, 1, __ATOMIC_SEQ_CST);
            pthread_create(&th, NULL, abort_in_unlock, comm);
        } else {
            pthread_create(&th, NULL, abort_at, &la);
        }
        if (mode != 1)
            st = flx_barrier(comm);
        else if ((st = flx_iallreduce(comm, x, x, 4, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING,
                                      &req)) == FLX_OK)
            st = flx_wait(req);
        pthread_join(th, NULL);
        if (st != FLX_OK && st != FLX_ERR_ABORTED)
            return mp_fail(rank, "the call under the abort returned %s", flx_status_name(st));
        usleep(6000000); /* computing: no call */
        flx_comm_destroy(comm);
        return 0;
    }
    if (mode != 2)
        usleep(170000);
    st = mode != 1 ? flx_barrier(comm)
                   : flx_allreduce(comm, x, x, 4, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING);
    if (st != FLX_OK && st != FLX_ERR_PEER_LOST)
        return mp_fail(rank, "the call that met the abort returned %s", flx_status_name(st));
    t0 = flx_time_now();
    st = flx_barrier(comm);
    if (st != FLX_ERR_PEER_LOST || flx_time_now() - t0 > 3.0)
        return mp_fail(rank, "the call after rank 0's abort: %s after %.2f s",
                       flx_status_name(st), flx_time_now() - t0);
    flx_comm_destroy(comm);
    return 0;
}

START_TEST(test_abort_late)
{
    int mode = _i;

    run_fault(2, raw_abort_late, &mode, "20s", 40);
}
END_TEST

/* An abort after another failure: later calls return FLX_ERR_ABORTED (what
 * the abort promises), and the first error stays the first one. */
static int raw_abort_after_failure(int rank, int size, const char *root, void *arg)
{
    float x = 1;
    flx_comm_h comm;
    flx_status_t st;

    (void)size;
    (void)arg;
    if (mp_comm_create(rank, size, root, &comm) != FLX_OK)
        return mp_fail(rank, "create");
    if (flx_barrier(comm) != FLX_OK)
        return mp_fail(rank, "first barrier");
    if (rank == 1)
        _exit(0); /* gone without a goodbye */
    st = flx_allreduce(comm, &x, &x, 1, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);
    if (st != FLX_ERR_PEER_LOST)
        return mp_fail(rank, "allreduce with rank 1 gone: %s", flx_status_name(st));
    flx_comm_abort(comm);
    if ((st = flx_barrier(comm)) != FLX_ERR_ABORTED)
        return mp_fail(rank, "barrier after the abort: %s", flx_status_name(st));
    if ((st = flx_comm_get_async_error(comm)) != FLX_ERR_PEER_LOST)
        return mp_fail(rank, "first error: %s", flx_status_name(st));
    flx_comm_destroy(comm);
    return 0;
}

START_TEST(test_abort_after_failure) { run_fault(2, raw_abort_after_failure, NULL, "20s", 40); }
END_TEST

/* Chain broadcasts of 32 MiB from rank 0; rank 2 comes 1.5 s late, so rank
 * 1 is still forwarding broadcast A when rank 0, done with A, aborts at
 * 150 ms in the middle of sending B.  Ranks 1 and 2 must complete A with
 * the right data (rank 0 completed it; the cut message was B's) and fail
 * the next call. */
static int raw_cut_message(int rank, int size, const char *root, void *arg)
{
    const size_t n = (size_t)8 << 20;
    float *buf = malloc(n * sizeof(float));
    late_abort_t la;
    flx_comm_h comm;
    flx_status_t st;
    pthread_t th;

    (void)size;
    (void)arg;
    if (buf == NULL || mp_comm_create(rank, size, root, &comm) != FLX_OK)
        return mp_fail(rank, "create");
    for (size_t i = 0; i < n; i++)
        buf[i] = rank == 0 ? (float)(i % 1000) : -1.0f;
    if (flx_barrier(comm) != FLX_OK)
        return mp_fail(rank, "first barrier");
    if (rank == 0) {
        /* tcp: A is in the socket buffers well within 150 ms, and the
         * abort comes 150 ms from A's start, or 10 ms into B where A took
         * longer (a rank off the CPU); it never falls in A, which once
         * failed ranks 1 and 2 when the clock was started before A.  ib
         * completes a send only when its RDMA writes landed, after rank 2
         * wakes up, so there the 150 ms count from A's end.  B cannot end
         * before rank 2 wakes at 1.5 s: rank 1 is still forwarding A. */
        int ib = strcmp(flx_comm_net_name(comm), "ib") == 0;
        double start = flx_time_now(), end;

        st = flx_broadcast(comm, buf, n, FLX_FLOAT32, 0);
        end = flx_time_now();
        la = (late_abort_t){.comm = comm,
                            .at = ib                        ? end + 0.15
                                  : end + 0.01 > start + 0.15 ? end + 0.01
                                                              : start + 0.15};
        pthread_create(&th, NULL, abort_at, &la);
        if (st == FLX_OK)
            st = flx_broadcast(comm, buf, n, FLX_FLOAT32, 0);
        pthread_join(th, NULL);
        flx_comm_destroy(comm);
        free(buf);
        return st == FLX_ERR_ABORTED ? 0 : mp_fail(rank, "broadcasts: %s", flx_status_name(st));
    }
    if (rank == 2)
        usleep(1500000);
    st = flx_broadcast(comm, buf, n, FLX_FLOAT32, 0);
    if (st != FLX_OK)
        return mp_fail(rank, "broadcast A, completed on its root: %s", flx_status_name(st));
    for (size_t i = 0; i < n; i++)
        if (buf[i] != (float)(i % 1000))
            return mp_fail(rank, "broadcast A: element %zu is %g", i, buf[i]);
    st = flx_broadcast(comm, buf, n, FLX_FLOAT32, 0);
    if (st != FLX_ERR_PEER_LOST)
        return mp_fail(rank, "broadcast B: %s", flx_status_name(st));
    flx_comm_destroy(comm);
    free(buf);
    return 0;
}

START_TEST(test_cut_message)
{
    setenv("FLX_ALGO", "ring", 1); /* the chain broadcast */
    run_fault(3, raw_cut_message, NULL, "20s", 40);
    unsetenv("FLX_ALGO");
}
END_TEST

/* FLX_TIMEOUT is for a message that stops, not for one that takes long:
 * one 768 MiB message (FLX_CHUNK_SIZE 1g) under FLX_TIMEOUT 150 ms takes
 * 0.4-1.8 s on loopback and must arrive whole (the wait's clock starts
 * again whenever bytes move; before, both ranks timed out after 0.15 s). */
static int raw_long_message(int rank, int size, const char *root, void *arg)
{
    const size_t n = (size_t)192 << 20;
    float *buf = malloc(n * sizeof(float));
    flx_comm_h comm;
    flx_status_t st;
    double t0;

    (void)arg;
    if (buf == NULL)
        return mp_fail(rank, "out of memory");
    /* filled first: the ranks meet in the creation, not 150 ms apart */
    for (size_t i = 0; i < n; i++)
        buf[i] = rank == 0 ? (float)(i % 1000) : -1.0f;
    if (mp_comm_create(rank, size, root, &comm) != FLX_OK)
        return mp_fail(rank, "create");
    t0 = flx_time_now();
    st = flx_broadcast(comm, buf, n, FLX_FLOAT32, 0);
    if (st != FLX_OK) {
        mp_fail(rank, "a %zu MiB broadcast under FLX_TIMEOUT 150 ms: %s after %.3f s",
                n * sizeof(float) >> 20, flx_status_name(st), flx_time_now() - t0);
        return st == FLX_ERR_TIMED_OUT || st == FLX_ERR_PEER_LOST ? MP_AGAIN : 1;
    }
    for (size_t i = 0; i < n; i++)
        if (buf[i] != (float)(i % 1000))
            return mp_fail(rank, "element %zu is %g", i, buf[i]);
    printf("rank %d: the %zu MiB message took %.3f s under FLX_TIMEOUT 150 ms\n", rank,
           n * sizeof(float) >> 20, flx_time_now() - t0);
    flx_comm_destroy(comm);
    free(buf);
    return 0;
}

/* A rank off the CPU for 150 ms to 1 s (a pause of its own over 1 s is
 * not counted: FLX_STALL_S) stops the bytes for that long, and its peer
 * rightly times out; such a try, where every failing rank timed out or
 * lost its peer (MP_AGAIN), is run again, at most 3 tries in all.
 * Counting the whole message against the timeout fails every try (the
 * message takes 0.4-1.8 s), and a wrong element fails at once. */
START_TEST(test_long_message)
{
    setenv("FLX_CHUNK_SIZE", "1g", 1);
    run_fault_again(2, raw_long_message, NULL, "150ms", 60, 3, "test_long_message");
    unsetenv("FLX_CHUNK_SIZE");
}
END_TEST

/* one case per test, so that CK_RUN_CASE=kill (for example) runs one */
static TCase *fault_case(Suite *s, const char *name)
{
    TCase *tc = tcase_create(name);

    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    return tc;
}

int main(void)
{
    Suite *s = suite_create("faults");
    SRunner *sr;
    int failed;

    tcase_add_test(fault_case(s, "abort_single"), test_abort_single_rank);
    tcase_add_loop_test(fault_case(s, "abort"), test_abort, 0, 4);
    tcase_add_loop_test(fault_case(s, "abort_late"), test_abort_late, 0, 3);
    tcase_add_test(fault_case(s, "cut_message"), test_cut_message);
    tcase_add_test(fault_case(s, "long_message"), test_long_message);
    tcase_add_test(fault_case(s, "abort_after_failure"), test_abort_after_failure);
    tcase_add_test(fault_case(s, "async_error"), test_async_error);
    tcase_add_test(fault_case(s, "send_to_failed"), test_send_to_failed);
    tcase_add_loop_test(fault_case(s, "watchdog"), test_watchdog, 0, WD_COUNT);
    tcase_add_test(fault_case(s, "reset"), test_reset_mid_transfer);
    tcase_add_loop_test(fault_case(s, "root_dies"), test_root_dies_in_bootstrap, 0, 2);
    tcase_add_test(fault_case(s, "thread_retry"), test_thread_retry);
    tcase_add_test(fault_case(s, "kill"), test_kill_trials);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
