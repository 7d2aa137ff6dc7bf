/* check_errors.c -- errors, not hangs: mismatched calls, a dead peer, a
 * stranger at the root, a wrong secret, bad arguments and malformed
 * environment values, each on real forked ranks over real sockets. */
#include "tests/mp.h"
#include "collectives/comm.h"
#include "common/time.h"
#include "common/util.h"
#include "transport/auth.h"
#include "transport/boot.h"
#include "transport/boot_msg.h"
#include "transport/sock.h"

#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHORT_TIMEOUT "3s"


static int is_error(flx_status_t st) { return st == FLX_ERR_MISMATCH || st == FLX_ERR_PEER_LOST; }

/* exit code 10 + the status class, so the parent can check who saw what */
static int code_of(flx_status_t st)
{
    return st == FLX_ERR_MISMATCH ? 10 : st == FLX_ERR_PEER_LOST ? 11
         : st == FLX_ERR_TIMED_OUT ? 12 : st == FLX_OK ? 0 : 13;
}

/* ---- mismatches ----------------------------------------------------------- */

typedef enum {
    MM_COUNT, MM_DTYPE, MM_KIND, MM_SKIP, MM_ALGO, MM_COUNT_HD, MM_ALGO_HD, MM_AGV_DTYPE, MM_ROOT
} mm_kind_t;



static int body_mismatch(flx_comm_h comm, int rank, int size, void *arg)
{
    mm_kind_t kind = *(mm_kind_t *)arg;
    float buf[4096] = {0}, out[4096 * 8];
    flx_status_t st = FLX_OK;
    double t0;

    (void)size;
    /* a good collective first: the communicator works, and keeps working
     * however soon a faster rank fails the next one (on every backend) */
    st = flx_allreduce(comm, buf, buf, 100, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);
    if (st != FLX_OK)
        return mp_fail(rank, "first allreduce: %s", flx_status_string(st));
    t0 = flx_time_now();
    switch (kind) {
    case MM_COUNT:
        st = flx_allreduce(comm, buf, buf, rank == 1 ? 1000 : 2000, FLX_FLOAT32, FLX_SUM,
                           FLX_ALGO_RING);
        break;
    case MM_DTYPE:
        st = flx_allreduce(comm, buf, buf, 1000, rank == 1 ? FLX_INT32 : FLX_FLOAT32, FLX_SUM,
                           FLX_ALGO_RING);
        break;
    case MM_KIND:
        st = rank == 1 ? flx_allgather(comm, buf, out, 100, FLX_FLOAT32, FLX_ALGO_RING)
                       : flx_allreduce(comm, buf, buf, 100, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING);
        break;
    case MM_SKIP: /* rank 1 skips the barrier everybody else calls */
        if (rank != 1)
            st = flx_barrier(comm);
        if (st == FLX_OK)
            st = flx_allreduce(comm, buf, buf, 100, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RD);
        break;
    case MM_ALGO:
        st = flx_allreduce(comm, buf, buf, 1000, FLX_FLOAT32, FLX_SUM,
                           rank == 1 ? FLX_ALGO_TREE : FLX_ALGO_RING);
        break;
    case MM_COUNT_HD: /* halving-doubling cuts blocks from the count: they differ too */
        st = flx_allreduce(comm, buf, buf, rank == 1 ? 1000 : 2000, FLX_FLOAT32, FLX_SUM,
                           FLX_ALGO_HD);
        break;
    case MM_ALGO_HD:
        st = flx_allreduce(comm, buf, buf, 1000, FLX_FLOAT32, FLX_SUM,
                           rank == 1 ? FLX_ALGO_HD : FLX_ALGO_RD);
        break;
    case MM_AGV_DTYPE: { /* the same 32 bytes a rank: 4 float64 on rank 1, 8 float32 elsewhere */
        size_t counts[4] = {777, 777, 777, 777}, displs[4] = {777, 777, 777, 777};
        st = flx_allgatherv(comm, buf, rank == 1 ? 4 : 8, out, 1024, counts, displs,
                            rank == 1 ? FLX_FLOAT64 : FLX_FLOAT32, FLX_ALGO_AUTO);
        for (int i = 0; st != FLX_OK && i < 4; i++)
            if (counts[i] != 777 || displs[i] != 777)
                return mp_fail(rank, "allgatherv returned %s and wrote counts[%d] = %zu, "
                               "displs[%d] = %zu", flx_status_string(st), i, counts[i], i,
                               displs[i]);
        break;
    }
    case MM_ROOT: /* rank 1 broadcasts as the root, the others take rank 0 */
        st = flx_broadcast(comm, buf, 1000, FLX_FLOAT32, rank == 1 ? 1 : 0);
        /* a rank whose part completed (a root sends only; a receiver may get
         * rank 0's data before rank 1's) may return FLX_OK: its next call fails */
        if (st == FLX_OK)
            st = flx_barrier(comm);
        break;
    }
    /* found by the mismatch check, not by FLX_TIMEOUT (20 s here) */
    if (flx_time_now() - t0 > 10.0)
        return mp_fail(rank, "the mismatch took %.1f s to detect", flx_time_now() - t0);
    if (!is_error(st))
        return mp_fail(rank, "mismatch %d returned %s", kind, flx_status_string(st));
    /* the communicator stays broken */
    if (flx_barrier(comm) != st)
        return mp_fail(rank, "later calls do not return the same error");
    return code_of(st);
}

START_TEST(test_mismatch)
{
    mm_kind_t kind = (mm_kind_t)_i;
    int codes[4], mismatches = 0;

    setenv("FLX_TIMEOUT", "20s", 1);
    mp_run(4, body_mismatch, &kind, 60, codes);
    for (int r = 0; r < 4; r++) {
        ck_assert_msg(codes[r] == 10 || codes[r] == 11, "kind %d rank %d exit %d", kind, r,
                      codes[r]);
        mismatches += codes[r] == 10;
    }
    ck_assert_msg(mismatches >= 2, "kind %d: only %d ranks saw FLX_ERR_MISMATCH", kind,
                  mismatches);
    unsetenv("FLX_TIMEOUT");
}
END_TEST

/* The mismatch line in words: 2 ranks, a recursive-doubling allreduce of
 * 2000 floats on rank 0 and 1000 on rank 1.  Each sends its data before it
 * can find anything wrong, so the one that finds the mismatch has the
 * other's header: its line names both calls (exit 20: said). */
static int body_mismatch_words(flx_comm_h comm, int rank, int size, void *arg)
{
    static float buf[2000];
    char path[] = "/tmp/flx_mismatch_XXXXXX", want[160];
    int saved, said;
    flx_status_t st;

    (void)size;
    (void)arg;
    snprintf(want, sizeof(want), "rank %d called allreduce (rd) of %d float, sum; this rank "
             "allreduce (rd) of %d float, sum", 1 - rank, rank ? 2000 : 1000, rank ? 1000 : 2000);
    saved = mp_capture_start(path);
    st = flx_allreduce(comm, buf, buf, rank ? 1000 : 2000, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RD);
    said = mp_capture_stop(saved, path, want);
    if (!is_error(st))
        return mp_fail(rank, "counts 2000 and 1000: %s", flx_status_string(st));
    return said ? 20 : code_of(st);
}

START_TEST(test_mismatch_words)
{
    int codes[2];

    setenv("FLX_TIMEOUT", "20s", 1);
    mp_run(2, body_mismatch_words, NULL, 60, codes);
    unsetenv("FLX_TIMEOUT");
    for (int r = 0; r < 2; r++)
        ck_assert_msg(codes[r] == 20 || codes[r] == 10 || codes[r] == 11, "rank %d exit %d", r,
                      codes[r]);
    ck_assert_msg(codes[0] == 20 || codes[1] == 20, "no rank's line named both calls "
                  "(exit codes %d %d)", codes[0], codes[1]);
}
END_TEST

/* A receive that finds a later collective's message from its peer already
 * buffered fails at once (tcp_irecv's own check, not the one made when a
 * header meets a posted receive): rank 1 sends a message of the collective
 * after the next one; rank 0 lets it arrive and be buffered (16 bytes, no
 * receive posted), then posts the next collective's receive from rank 1.
 * Over the transport's own ops, so that the order is certain.  Rank 0
 * reads once rank 1's send is complete (a shared flag: the bytes are then
 * in rank 0's socket on loopback), not after a fixed 0.2 s, which a rank 1
 * slow to start could outlast (the receive was then posted first). */
static int body_skipped_buffered(flx_comm_h comm, int rank, int size, void *arg)
{
    volatile int *sent = arg;
    float data[4] = {1, 2, 3, 4}, got[4];
    tl_tag_t tag = {0};
    tl_req_t req;
    flx_status_t st;
    double t0;

    (void)size;
    if (strcmp(comm->tl->name, "tcp") != 0)
        return 0; /* the tcp backend's check */
    tag.kind = (uint8_t)(COLL_ALLREDUCE << 3 | FLX_ALGO_RD);
    tag.dtype = FLX_FLOAT32;
    tag.op = FLX_SUM;
    tag.count = 4;
    memset(&req, 0, sizeof(req));
    if (rank == 1) {
        tag.seq = comm->seq + 1;
        st = comm->tl->isend(comm->tlctx, 0, &tag, data, sizeof(data), &req);
        while (st == FLX_OK && !req.complete)
            st = comm->tl->progress(comm->tlctx, 0.01);
        if (st != FLX_OK)
            return mp_fail(rank, "send: %s", flx_status_string(st));
        __atomic_store_n(sent, 1, __ATOMIC_RELEASE);
        /* nothing more from here until rank 0 has judged (its failure
         * notice comes back), or that judgement could meet our next one */
        t0 = flx_time_now();
        while (comm->tl->error(comm->tlctx) == FLX_OK && flx_time_now() - t0 < 10.0)
            comm->tl->progress(comm->tlctx, 0.01);
    } else {
        t0 = flx_time_now();
        while (!__atomic_load_n(sent, __ATOMIC_ACQUIRE) && flx_time_now() - t0 < 10.0)
            usleep(1000);
        if (!__atomic_load_n(sent, __ATOMIC_ACQUIRE))
            return mp_fail(rank, "rank 1's send not complete after 10 s");
        for (int i = 0; i < 20; i++)
            comm->tl->progress(comm->tlctx, 0.01); /* reads and buffers it */
        tag.seq = comm->seq;
        t0 = flx_time_now();
        st = comm->tl->irecv(comm->tlctx, 1, &tag, got, sizeof(got), &req);
        if (st != FLX_ERR_MISMATCH || flx_time_now() - t0 > 1.0)
            return mp_fail(rank, "receive behind a buffered later message: %s after %.2f s",
                           flx_status_string(st), flx_time_now() - t0);
    }
    /* the job is failed on both ranks: the next collective says so */
    st = flx_barrier(comm);
    return is_error(st) ? code_of(st) : mp_fail(rank, "barrier afterwards: %s",
                                                 flx_status_string(st));
}

START_TEST(test_skipped_buffered)
{
    int codes[2], *sent;

    if (getenv("FLX_NET") && strcmp(getenv("FLX_NET"), "ib") == 0)
        return; /* the tcp backend's check */
    sent = mp_shared_alloc(sizeof(*sent));
    setenv("FLX_TIMEOUT", "20s", 1);
    mp_run(2, body_skipped_buffered, sent, 60, codes);
    unsetenv("FLX_TIMEOUT");
    munmap(sent, sizeof(*sent));
    ck_assert_msg(codes[0] == 10, "rank 0 exit %d (10: FLX_ERR_MISMATCH)", codes[0]);
    ck_assert_msg(codes[1] == 10 || codes[1] == 11, "rank 1 exit %d", codes[1]);
}
END_TEST

/* ---- counts that differ where only one side can tell ---------------------------- */

/* A broadcast where rank 1 passes count 0 (the others 1000), under every
 * algorithm choice (arg: FLX_ALGO): a count-0 broadcast still sends its
 * empty messages, so the disagreement is an error, not a silent success
 * that leaves the root's data queued at rank 1 for good.  Then allgatherv
 * with rank 1's capacity too small for the total and the others' large
 * enough: every rank fails it alike, leaves its counts and displs as they
 * were, and the communicator keeps working. */
static int body_zero_count(flx_comm_h comm, int rank, int size, void *arg)
{
    static float buf[1000 * 8], sbuf[1000];
    size_t counts[8], displs[8];
    float send[4] = {1, 2, 3, 4}, recv[64];
    flx_status_t st, st2;
    const int what = *(const int *)arg;

    if (what > 0) { /* count 0 on rank 1 against 1000 elsewhere: MISMATCH on every rank */
        const size_t n = rank == 1 ? 0 : 1000;
        const char *name[] = {"", "allreduce", "allgather", "reduce_scatter"};
        double t0 = flx_time_now();
        st = what == 1   ? flx_allreduce(comm, buf, buf, n, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO)
             : what == 2 ? flx_allgather(comm, sbuf, buf, n, FLX_FLOAT32, FLX_ALGO_AUTO)
                         : flx_reduce_scatter(comm, buf, buf, n, FLX_FLOAT32, FLX_SUM);
        if (st != FLX_ERR_MISMATCH)
            return mp_fail(rank, "%s of %zu against %s: %s", name[what], n,
                           rank == 1 ? "1000" : "0", flx_status_string(st));
        if (flx_time_now() - t0 > 2.0) /* FLX_TIMEOUT 3 s: found, not timed out */
            return mp_fail(rank, "%s mismatch took %.1f s", name[what], flx_time_now() - t0);
        /* stay a while: a rank that exits at once could make a third one,
         * not yet told of the mismatch, see a lost peer first */
        usleep(500000);
        return 0;
    }
    for (int i = 0; i < size; i++)
        counts[i] = displs[i] = 777;
    st = flx_allgatherv(comm, send, 4, recv, rank == 1 ? 4 * (size_t)size - 1 : 64, counts,
                        displs, FLX_FLOAT32, FLX_ALGO_AUTO);
    if (st != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "allgatherv with rank 1's capacity short: %s",
                       flx_status_string(st));
    for (int i = 0; i < size; i++) /* outputs are written only on success */
        if (counts[i] != 777 || displs[i] != 777)
            return mp_fail(rank, "the refused allgatherv wrote counts[%d] = %zu, displs[%d] = %zu",
                           i, counts[i], i, displs[i]);
    if ((st = flx_barrier(comm)) != FLX_OK)
        return mp_fail(rank, "barrier after the refused allgatherv: %s", flx_status_string(st));
    for (int i = 0; i < 1000; i++)
        buf[i] = rank == 0 ? 7.0f : 0.0f;
    st = flx_broadcast(comm, buf, rank == 1 ? 0 : 1000, FLX_FLOAT32, 0);
    st2 = flx_barrier(comm);
    if (rank == 1 && st == FLX_OK)
        return mp_fail(rank, "count-0 broadcast against 1000 returned success");
    if (!is_error(st2))
        return mp_fail(rank, "barrier after the mismatched broadcast: %s",
                       flx_status_string(st2));
    return 0;
}

START_TEST(test_zero_count)
{
    static const char *const algos[] = {"auto", "ring", "tree"};
    const int what = _i % 4; /* broadcast and allgatherv, allreduce, allgather, reduce-scatter */

    setenv("FLX_TIMEOUT", SHORT_TIMEOUT, 1);
    setenv("FLX_ALGO", algos[_i / 8], 1);
    ck_assert_int_eq(mp_run(2 + (_i / 4) % 2, body_zero_count, (void *)&what, 30, NULL), 0);
    unsetenv("FLX_ALGO");
    unsetenv("FLX_TIMEOUT");
}
END_TEST

/* ---- a dead peer ------------------------------------------------------------ */

/* The last rank dies after a few collectives (exit without a goodbye,
 * SIGKILL, or SIGSTOP); every survivor must get an error, and no call may
 * take longer than FLX_TIMEOUT plus a margin. */
static int body_dead_peer(flx_comm_h comm, int rank, int size, void *arg)
{
    static float buf[1 << 18];
    int sig = *(int *)arg;
    flx_status_t st = FLX_OK;

    for (int k = 0; k < 60; k++) {
        double t0 = flx_time_now();
        if (rank == size - 1 && k == 5) {
            if (sig)
                raise(sig); /* SIGSTOP: stalls until the harness kills it */
            _exit(0);
        }
        st = flx_allreduce(comm, buf, buf, 1 << 18, FLX_FLOAT32, FLX_SUM,
                           k % 2 ? FLX_ALGO_TREE : FLX_ALGO_RING);
        if (flx_time_now() - t0 > 3.0 + 4.0) /* FLX_TIMEOUT + a loaded machine's stalls */
            return mp_fail(rank, "a call took %.1f s", flx_time_now() - t0);
        if (st != FLX_OK)
            break;
    }
    if (st != FLX_ERR_PEER_LOST && st != FLX_ERR_TIMED_OUT)
        return mp_fail(rank, "dead peer gave %s", flx_status_string(st));
    return code_of(st);
}

START_TEST(test_dead_peer)
{
    static const int sigs[] = {0, SIGKILL, SIGSTOP};
    int sig = sigs[_i], codes[3];

    setenv("FLX_TIMEOUT", SHORT_TIMEOUT, 1);
    /* the stopped rank is killed when the harness gives up: not later than
     * the survivors need (FLX_TIMEOUT 3 s + 4 s each) */
    mp_run(3, body_dead_peer, &sig, sig == SIGSTOP ? 15 : 30, codes);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(codes[r] == 11 || codes[r] == 12, "signal %d rank %d exit %d", sig, r,
                      codes[r]);
    if (sig == SIGSTOP) /* the stalled rank was killed by the harness; others timed out */
        ck_assert_int_eq(codes[2], 128 + SIGKILL);
    unsetenv("FLX_TIMEOUT");
}
END_TEST

/* ---- the whole job stopped (Ctrl-Z under flxrun) ------------------------------- */

/* Every rank is stopped for longer than FLX_TIMEOUT while the others wait in
 * an allreduce for the last one, and the last is continued 0.5 s after the
 * rest, as a slow resume would: no call may time out (before, the ranks
 * resumed first timed out at once: the stop counted as waiting), and every
 * result must be right.  A helper forked by the last rank does the signals. */
static int body_job_stopped(flx_comm_h comm, int rank, int size, void *arg)
{
    int64_t me = getpid(), pids[8];
    float buf[1024];
    flx_status_t st;
    pid_t helper = -1;

    (void)arg;
    if ((st = flx_allgather(comm, &me, pids, 1, FLX_INT64, FLX_ALGO_AUTO)) != FLX_OK)
        return mp_fail(rank, "allgather of pids: %s", flx_status_string(st));
    for (int k = 0; k < 8; k++) {
        if (rank == size - 1 && k == 3) {
            helper = fork();
            if (helper < 0)
                return mp_fail(rank, "fork: %m");
            if (helper == 0) {
                usleep(300000); /* the others are waiting in step 3 */
                for (int r = 0; r < size; r++)
                    kill((pid_t)pids[r], SIGSTOP);
                sleep(5);       /* FLX_TIMEOUT is 3 s */
                for (int r = 0; r < size - 1; r++)
                    kill((pid_t)pids[r], SIGCONT);
                usleep(500000);
                kill((pid_t)pids[size - 1], SIGCONT);
                _exit(0);
            }
            usleep(600000);     /* stopped meanwhile */
        }
        for (int i = 0; i < 1024; i++)
            buf[i] = (float)(rank + 1) * (float)(i % 7 + k);
        st = flx_allreduce(comm, buf, buf, 1024, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);
        if (st != FLX_OK)
            return mp_fail(rank, "allreduce %d after the stop: %s", k, flx_status_string(st));
        for (int i = 0; i < 1024; i++)
            if (buf[i] != (float)(size * (size + 1) / 2) * (float)(i % 7 + k))
                return mp_fail(rank, "allreduce %d: [%d] = %g", k, i, buf[i]);
    }
    if (helper > 0 && waitpid(helper, NULL, 0) != helper)
        return mp_fail(rank, "the helper: %m");
    return 0;
}

START_TEST(test_job_stopped)
{
    int codes[3];

    setenv("FLX_TIMEOUT", SHORT_TIMEOUT, 1);
    ck_assert_int_eq(mp_run(3, body_job_stopped, NULL, 30, codes), 0);
    unsetenv("FLX_TIMEOUT");
}
END_TEST

/* ---- out of memory for scratch ------------------------------------------------ */

/* This process's address space now, in bytes (VmSize); 0 if unknown. */
static size_t vm_size(void)
{
    char line[256];
    size_t kb = 0;
    FILE *f = fopen("/proc/self/status", "r");

    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb << 10;
}

#define NOMEM_COUNT ((size_t)3 << 22) /* 48 MiB of float: 16 MiB segments */
#define NOMEM_BCAST 4096

/* Rank 1 cannot grow its scratch: an in-place ring allreduce of 48 MiB on
 * 3 ranks needs two 16 MiB step buffers, and its address space is capped
 * 8 MiB above what it holds.  It must return FLX_ERR_NO_MEMORY with one log
 * line, the others an error (not a hang), all within the timeout.  Before
 * that, rank 1 roots a small broadcast that the others join 300 ms late:
 * rank 1 finishes it at once (its sends fit in the sockets) and fails
 * before the others start it; they read its notice before they start the
 * broadcast (over the transport's own progress, as a rank busy in other
 * work would).  The broadcast completed on rank 1, so it must complete
 * everywhere: the notice must name the allreduce. */
static int body_no_memory(flx_comm_h comm, int rank, int size, void *arg)
{
    float *buf = malloc(NOMEM_COUNT * sizeof(float));
    char path[] = "/tmp/flx-nomem-XXXXXX";
    int saved = -1, lines = 0;
    flx_status_t st;
    double t0;

    (void)size;
    (void)arg;
    if (buf == NULL)
        return mp_fail(rank, "no memory for the test buffer");
    for (size_t i = 0; i < NOMEM_COUNT; i++)
        buf[i] = (float)(i % 7);
    /* one small call first: the job works before the cap */
    st = flx_allreduce(comm, buf, buf, 1024, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING);
    if (st != FLX_OK)
        return mp_fail(rank, "small allreduce gave %s", flx_status_string(st));
    if (rank == 1) {
        size_t now = vm_size();
        struct rlimit rl;
        if (now == 0)
            return mp_fail(rank, "cannot read VmSize");
        rl.rlim_cur = rl.rlim_max = now + ((size_t)8 << 20);
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            return mp_fail(rank, "setrlimit failed");
        saved = mp_capture_start(path);
        for (int i = 0; i < NOMEM_BCAST; i++)
            buf[i] = (float)(i + 1);
    } else { /* 300 ms late, reading what comes meanwhile (rank 1's notice) */
        double t = flx_time_now();
        while (flx_time_now() - t < 0.3)
            (void)comm->tl->progress(comm->tlctx, 0.01);
    }
    st = flx_broadcast(comm, buf, NOMEM_BCAST, FLX_FLOAT32, 1);
    if (st != FLX_OK) {
        if (rank == 1)
            mp_capture_stop(saved, path, "");
        return mp_fail(rank, "broadcast before the failure gave %s", flx_status_string(st));
    }
    for (int i = 0; i < NOMEM_BCAST; i++)
        if (buf[i] != (float)(i + 1))
            return mp_fail(rank, "broadcast element %d is %g, not %d", i, buf[i], i + 1);
    t0 = flx_time_now();
    st = flx_allreduce(comm, buf, buf, NOMEM_COUNT, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING);
    if (rank == 1)
        lines = mp_capture_stop(saved, path, "memory");
    if (flx_time_now() - t0 > 3.0 + 4.0) /* FLX_TIMEOUT + a loaded machine's stalls */
        return mp_fail(rank, "the call took %.1f s", flx_time_now() - t0);
    if (rank == 1 && st != FLX_ERR_NO_MEMORY)
        return mp_fail(rank, "capped rank gave %s", flx_status_string(st));
    if (rank == 1 && lines != 1)
        return mp_fail(rank, "%d log lines mention memory, not 1", lines);
    if (rank != 1 && st != FLX_ERR_PEER_LOST && st != FLX_ERR_TIMED_OUT)
        return mp_fail(rank, "peer of the capped rank gave %s", flx_status_string(st));
    free(buf);
    return 0;
}

START_TEST(test_no_memory)
{
#if defined(__SANITIZE_ADDRESS__)
    /* the sanitizer's shadow memory does not fit under an address-space cap */
    return;
#endif
    setenv("FLX_TIMEOUT", SHORT_TIMEOUT, 1);
    ck_assert_int_eq(mp_run(3, body_no_memory, NULL, 30, NULL), 0);
    unsetenv("FLX_TIMEOUT");
}
END_TEST

/* ---- strangers at the root --------------------------------------------------- */

/* rank 2 is not a rank: it plays four strangers at the root (one a rank of
 * an older build, which the root names once) before the
 * real rank 1 arrives (rank 2 creates the file arg names once the root has
 * refused the last of them; a fixed head start could run out on a loaded
 * machine); ranks 0 and 1 must form their job regardless */
#define STRANGERS_WAIT_S 20.0
static int raw_strangers(int rank, int size, const char *root, void *arg)
{
    const char *ready = arg;
    sock_addr_t addr;
    flx_comm_h comm;
    flx_status_t st;
    float x[3] = {1, 2, 3};
    char path[] = "/tmp/flx-strangers-XXXXXX";
    int saved = -1, old_lines;

    (void)size;
    if (rank == 2) {
        int fd_garbage, fd_silent, fd_wrong, fd_old;
        auth_hello_t old = {.purpose = AUTH_PURPOSE_BOOT, .rank = 1, .size = 2};
        uint8_t wire[AUTH_HELLO_BYTES];
        char junk[64];
        auth_key_t wrong;
        double deadline = flx_time_now() + 10;

        sock_parse_addr(root, &addr);
        memset(junk, 0xab, sizeof(junk));
        if (sock_connect(&addr, deadline, &fd_silent) != FLX_OK)   /* says nothing */
            return mp_fail(rank, "stranger could not connect");
        if (sock_connect(&addr, deadline, &fd_garbage) != FLX_OK)
            return mp_fail(rank, "stranger could not connect");
        sock_send_all(fd_garbage, junk, sizeof(junk), deadline);    /* garbage */
        /* a rank of an older build: bootstrap protocol version 3 */
        if (sock_connect(&addr, deadline, &fd_old) != FLX_OK)
            return mp_fail(rank, "stranger could not connect");
        auth_hello_encode(&old, wire);
        wire[4] = 0;
        wire[5] = 3;
        sock_send_all(fd_old, wire, sizeof(wire), deadline);
        auth_key_derive("not the secret", &wrong);
        if (sock_connect(&addr, deadline, &fd_wrong) != FLX_OK)
            return mp_fail(rank, "stranger could not connect");
        st = auth_connect(fd_wrong, &wrong, AUTH_PURPOSE_BOOT, 1, 2, deadline);
        if (st != FLX_ERR_AUTH)
            return mp_fail(rank, "wrong secret was not refused: %s", flx_status_string(st));
        close(open(ready, O_CREAT | O_WRONLY, 0600));
        sleep(3);
        close(fd_silent);
        close(fd_garbage);
        close(fd_wrong);
        close(fd_old);
        return 0;
    }
    if (rank == 1) { /* let the strangers in first */
        double until = flx_time_now() + STRANGERS_WAIT_S;
        while (access(ready, F_OK) != 0 && flx_time_now() < until)
            usleep(10000);
        if (access(ready, F_OK) != 0)
            return mp_fail(rank, "the strangers did not get in within %.0f s", STRANGERS_WAIT_S);
    }
    if (rank == 0)
        saved = mp_capture_start(path);
    st = mp_comm_create(rank, 2, root, &comm);
    if (rank == 0 && (old_lines = mp_capture_stop(saved, path, "a flexcoll whose bootstrap protocol "
                                               "is version 3, this one's 4")) != 1)
        return mp_fail(rank, "%d lines name the older build, not 1", old_lines);
    if (st != FLX_OK)
        return mp_fail(rank, "comm_create with strangers around: %s", flx_status_string(st));
    st = flx_allreduce(comm, x, x, 3, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);
    if (st != FLX_OK || x[0] != 2 || x[2] != 6)
        return mp_fail(rank, "allreduce after strangers: %s %g", flx_status_string(st), x[0]);
    flx_comm_destroy(comm);
    return 0;
}

START_TEST(test_strangers)
{
    int codes[3], fd, failed;
    char ready[] = "/tmp/flx-strangers-ready-XXXXXX";

    fd = mkstemp(ready); /* a fresh name; rank 2 creates the file */
    ck_assert_int_ge(fd, 0);
    close(fd);
    unlink(ready);
    setenv("FLX_HANDSHAKE_TIMEOUT", "1s", 1);
    failed = mp_run_raw(3, raw_strangers, ready, 60, codes);
    unsetenv("FLX_HANDSHAKE_TIMEOUT");
    unlink(ready);
    ck_assert_int_eq(failed, 0);
}
END_TEST

/* ---- a flood of strangers at the root, a rank on a slow path ------------------ */

/* Process 2 is a proxy in front of the root for rank 1 that holds the first
 * bytes of each of its connections FLOOD_DELAY s (a slow path), and a
 * flood: right after rank 1's first connection reaches the root, FLOOD_CONNS
 * (more than the 64 the root keeps waiting) silent ones follow.  The root keeps 64 waiting and drops the oldest that
 * has said nothing, rank 1's, telling it to try again; rank 1 connects
 * again (the flood is over; now the strangers are the oldest) and the job
 * forms.  Before the busy notice, rank 1 failed its bootstrap. */
#define FLOOD_CONNS 120
#define FLOOD_DELAY 0.5

/* relay between down (rank 1) and up (the root) until one side closes;
 * the first bytes from down go FLOOD_DELAY s after the connection came */
static void proxy_relay(int down, int up, double t0)
{
    char buf[4096];
    int delayed = 0;

    for (;;) {
        struct pollfd p[2] = {{.fd = down, .events = POLLIN}, {.fd = up, .events = POLLIN}};
        if (poll(p, 2, 30000) <= 0)
            return;
        for (int i = 0; i < 2; i++) {
            ssize_t n;
            if (!p[i].revents)
                continue;
            n = recv(p[i].fd, buf, sizeof(buf), 0);
            if (n <= 0)
                return;
            if (i == 0 && !delayed) {
                double wait = t0 + FLOOD_DELAY - flx_time_now();
                if (wait > 0)
                    usleep((useconds_t)(wait * 1e6));
                delayed = 1;
            }
            if (sock_send_all(p[1 - i].fd, buf, (size_t)n, flx_time_now() + 10) != FLX_OK)
                return;
        }
    }
}

/* steady: one silent connection every 10 ms for the whole bootstrap (each
 * kept until 3000 later ones were made), from a thread of the proxy */
typedef struct {
    sock_addr_t root;
    int stop; /* atomic: read by the steady thread */
} flood_steady_t;

static void *flood_steady(void *p)
{
    flood_steady_t *f = p;
    static int ring[3000];
    int n = 0, made = 0;

    for (int i = 0; i < 3000; i++)
        ring[i] = -1;
    while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
        int fd = socket(f->root.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
        (void)connect(fd, &f->root.sa, sock_addr_len(&f->root));
        if (ring[n] >= 0)
            close(ring[n]);
        ring[n] = fd;
        n = (n + 1) % 3000;
        usleep(++made > 80 ? 10000 : 1000);
    }
    for (int i = 0; i < 3000; i++)
        if (ring[i] >= 0)
            close(ring[i]);
    return NULL;
}

typedef struct {
    char proxy[64];
    int steady; /* the flood: 0 a burst after rank 1's first connection, 1 steady */
} flood_arg_t;

static int raw_flood(int rank, int size, const char *root, void *arg)
{
    const flood_arg_t *fa = arg;
    const char *proxy = fa->proxy;
    flx_comm_h comm;
    flx_status_t st;
    float x[3] = {1, 2, 3};

    (void)size;
    if (rank == 2) {
        sock_addr_t paddr, raddr;
        int lfd, flood[FLOOD_CONNS], nflood = 0, sessions = 0;
        double deadline = flx_time_now() + 70;
        flood_steady_t fs = {.stop = 0};
        pthread_t th;

        sock_parse_addr(proxy, &paddr);
        sock_parse_addr(root, &raddr);
        if (sock_listen(&paddr, 4, &lfd, NULL) != FLX_OK)
            return mp_fail(rank, "proxy cannot listen on %s", proxy);
        fs.root = raddr;
        if (fa->steady && pthread_create(&th, NULL, flood_steady, &fs) != 0)
            return mp_fail(rank, "pthread_create failed");
        /* one connection of rank 1 at a time; done when none comes for 3 s */
        for (;;) {
            struct pollfd p = {.fd = lfd, .events = POLLIN};
            int down, up;
            double t0;
            if (flx_time_now() > deadline || poll(&p, 1, 3000) != 1)
                break;
            down = accept(lfd, NULL, NULL);
            t0 = flx_time_now();
            if (down < 0)
                continue;
            fcntl(down, F_SETFL, fcntl(down, F_GETFL) & ~O_NONBLOCK);
            if (sock_connect(&raddr, deadline, &up) != FLX_OK)
                return mp_fail(rank, "proxy cannot reach the root");
            fcntl(up, F_SETFL, fcntl(up, F_GETFL) & ~O_NONBLOCK);
            for (; !fa->steady && sessions == 0 && nflood < FLOOD_CONNS; nflood++) /* in turn */
                if (sock_connect(&raddr, deadline, &flood[nflood]) != FLX_OK)
                    return mp_fail(rank, "flood connection %d failed", nflood);
            sessions++;
            proxy_relay(down, up, t0);
            close(down);
            close(up);
        }
        __atomic_store_n(&fs.stop, 1, __ATOMIC_RELEASE);
        if (fa->steady)
            pthread_join(th, NULL);
        for (int i = 0; i < nflood; i++)
            close(flood[i]);
        close(lfd);
        return sessions >= 2 - fa->steady ? 0 : mp_fail(rank, "rank 1 connected %d time(s), "
                                                        "expected a retry after the busy "
                                                        "notice", sessions);
    }
    if (rank == 1) /* the root listens; steady: the flood is under way */
        usleep(fa->steady ? 2500000 : 200000);
    st = mp_comm_create(rank, 2, rank == 1 ? proxy : root, &comm);
    if (st != FLX_OK)
        return mp_fail(rank, "comm_create under a flood of strangers: %s", flx_status_string(st));
    st = flx_allreduce(comm, x, x, 3, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);
    if (st != FLX_OK || x[0] != 2 || x[2] != 6)
        return mp_fail(rank, "allreduce after the flood: %s %g", flx_status_string(st), x[0]);
    flx_comm_destroy(comm);
    return 0;
}

/* _i 0: a burst; 1: a steady flood with every waiting connection's
 * deadline the bootstrap's (FLX_HANDSHAKE_TIMEOUT beyond it), where a
 * victim chosen by deadline was always the newest connection but one, so
 * rank 1 was dropped at every try until the job timed out */
START_TEST(test_flood)
{
    flood_arg_t fa = {.steady = _i};

    mp_free_root(fa.proxy, sizeof(fa.proxy));
    setenv("FLX_HANDSHAKE_TIMEOUT", "20s", 1); /* the strangers stay */
    setenv("FLX_CONNECT_TIMEOUT", _i ? "15s" : "60s", 1);
    ck_assert_int_eq(mp_run_raw(3, raw_flood, &fa, 120, NULL), 0);
    unsetenv("FLX_CONNECT_TIMEOUT");
    unsetenv("FLX_HANDSHAKE_TIMEOUT");
}
END_TEST

/* ---- every kind of stranger, at the root and at a rank's mesh listener --------- */

#define STRANGERS 9

/* Open STRANGERS hostile connections to addr: three silent ones, 64 bytes
 * of garbage, 1 MiB of garbage, half a HELLO then silence, half a HELLO then
 * a hang-up, a well-formed HELLO with an impossible rank, and a wrong
 * secret.  fds receives the ones to close later. */
/* The strangers are in: a marker file named after the job's root, which the
 * rank that joins after them waits for (a fixed head start is not one on a
 * machine that stalls processes for a second). */
static void marker_path(const char *root, char *buf, size_t len)
{
    const char *port = strrchr(root, ':');
    snprintf(buf, len, "/tmp/flx-hostile-ready-%s", port ? port + 1 : root);
}

static void marker_set(const char *root)
{
    char path[96];
    int fd;

    marker_path(root, path, sizeof(path));
    if ((fd = open(path, O_CREAT | O_WRONLY, 0600)) >= 0)
        close(fd);
}

/* Wait up to 10 s for the marker (then go on: the test's own checks say
 * what did not happen) and remove it. */
static void marker_wait(const char *root)
{
    char path[96];
    double end = flx_time_now() + 10;

    marker_path(root, path, sizeof(path));
    while (access(path, F_OK) != 0 && flx_time_now() < end)
        usleep(5000);
    unlink(path);
}

/* nine strangers at ADDR; the marker for ROOT is set once all are connected
 * and have sent what they send, before the wrong-secret one waits for its
 * refusal (which a mesh listener gives only once the job has formed) */
static void strangers_attack(const sock_addr_t *addr, int fds[STRANGERS], const char *root)
{
    static char junk[1 << 20];
    double deadline = flx_time_now() + 5;
    auth_hello_t hello = {.purpose = AUTH_PURPOSE_BOOT, .rank = 1, .size = 2};
    uint8_t wire[AUTH_HELLO_BYTES];
    auth_key_t wrong;
    int i;

    memset(junk, 0xab, sizeof(junk));
    for (i = 0; i < STRANGERS; i++)
        if (sock_connect(addr, deadline, &fds[i]) != FLX_OK)
            fds[i] = -1;
    /* 0, 1, 2: silent */
    sock_send_all(fds[3], junk, 64, deadline);
    sock_send_all(fds[4], junk, sizeof(junk), flx_time_now() + 0.5); /* cut off: fine */
    auth_hello_encode(&hello, wire);
    sock_send_all(fds[5], wire, 20, deadline);
    sock_send_all(fds[6], wire, 20, deadline);
    close(fds[6]);
    fds[6] = -1;
    hello.rank = 1000; /* of 2 */
    auth_hello_encode(&hello, wire);
    sock_send_all(fds[7], wire, sizeof(wire), deadline);
    marker_set(root);
    auth_key_derive("not the secret", &wrong);
    if (auth_connect(fds[8], &wrong, AUTH_PURPOSE_BOOT, 1, 2, deadline) != FLX_ERR_AUTH)
        fprintf(stderr, "stranger: a wrong secret was not refused\n");
}

static void strangers_release(int fds[STRANGERS])
{
    for (int i = 0; i < STRANGERS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* the first listening socket of this process */
static int find_listener(sock_addr_t *addr_p)
{
    for (int fd = 3; fd < 1024; fd++) {
        int on = 0;
        socklen_t len = sizeof(on);
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on &&
            sock_local_addr(fd, addr_p) == 0)
            return fd;
    }
    return -1;
}

typedef struct {
    int fds[STRANGERS];
    int fired;
    const char *root;
} mesh_attack_t;

/* in rank 1's process: wait for its mesh listener, then attack it */
static void *mesh_attacker(void *arg)
{
    mesh_attack_t *ma = arg;
    sock_addr_t addr;
    double end = flx_time_now() + 5;

    while (find_listener(&addr) < 0 && flx_time_now() < end)
        usleep(2000);
    if (flx_time_now() >= end)
        return NULL;
    ma->fired = 1;
    strangers_attack(&addr, ma->fds, ma->root);
    return NULL;
}

/* where = 0: strangers at the root (rank 2 plays them, rank 1 comes when
 * they are in); where = 1: at rank 1's mesh listener (a thread of rank 1
 * plays them; rank 2 comes when they are in).  The job forms at once regardless (not
 * after the handshake timeouts of the strangers), and the attacked rank
 * logs each stranger exactly once. */
static int raw_hostile(int rank, int size, const char *root, void *arg)
{
    int where = *(int *)arg, saved = -1, rejected = 0, attacked = where == 0 ? 0 : 1;
    char path[] = "/tmp/flx-hostile-XXXXXX";
    mesh_attack_t ma = {.fired = 0, .root = root};
    sock_addr_t addr;
    flx_comm_h comm;
    flx_status_t st;
    float x[3] = {1, 2, 3};
    pthread_t th;
    double t0, took;

    if (where == 0 && rank == 2) {
        int fds[STRANGERS];
        usleep(100000); /* the root listens */
        sock_parse_addr(root, &addr);
        strangers_attack(&addr, fds, root);
        sleep(3);
        strangers_release(fds);
        return 0;
    }
    if (rank == attacked)
        saved = mp_capture_start(path);
    if (where == 1 && rank == 1)
        pthread_create(&th, NULL, mesh_attacker, &ma);
    if ((where == 0 && rank == 1) || (where == 1 && rank == 2))
        marker_wait(root);
    t0 = flx_time_now();
    st = mp_comm_create(rank, where == 0 ? 2 : size, root, &comm);
    took = flx_time_now() - t0;
    if (where == 1 && rank == 1) {
        pthread_join(th, NULL);
        if (!ma.fired)
            return mp_fail(rank, "no mesh listener found to attack");
    }
    if (rank == attacked)
        rejected = mp_capture_stop(saved, path, "rejected connection from");
    if (st != FLX_OK)
        return mp_fail(rank, "comm_create with strangers around: %s", flx_status_string(st));
    /* tcp forms in milliseconds: the bound shows nobody waited for the
     * strangers' FLX_HANDSHAKE_TIMEOUT one after the other (9 strangers, 1 s
     * each: 9 s), with room for a loaded or
     * sanitized build's stalls (1.76 s seen under ASan); ib's setup alone
     * takes seconds in an emulated VM */
    if (rank != attacked && took > (strcmp(flx_comm_net_name(comm), "tcp") == 0 ? 5.0 : 15.0))
        return mp_fail(rank, "the job took %.2f s to form: the strangers held it up", took);
    st = flx_allreduce(comm, x, x, 3, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);
    if (st != FLX_OK || x[2] != 3.0f * flx_comm_size(comm))
        return mp_fail(rank, "allreduce after strangers: %s %g", flx_status_string(st), x[2]);
    flx_comm_destroy(comm);
    if (where == 1 && rank == 1)
        strangers_release(ma.fds);
    if (rank == attacked && rejected != STRANGERS)
        return mp_fail(rank, "%d rejections logged for %d strangers", rejected, STRANGERS);
    return 0;
}

START_TEST(test_hostile)
{
    int where = _i;

    setenv("FLX_HANDSHAKE_TIMEOUT", "1s", 1);
    setenv("FLX_CALIBRATE", "no", 1);
    ck_assert_int_eq(mp_run_raw(3, raw_hostile, &where, 60, NULL), 0);
    unsetenv("FLX_HANDSHAKE_TIMEOUT");
    unsetenv("FLX_CALIBRATE");
}
END_TEST

/* a rank with another secret is refused; the root gives up at its deadline */
static int raw_wrong_secret(int rank, int size, const char *root, void *arg)
{
    flx_comm_params_t p = {.field_mask = FLX_COMM_PARAM_RANK | FLX_COMM_PARAM_SIZE |
                                         FLX_COMM_PARAM_ROOT | FLX_COMM_PARAM_SECRET,
                           .rank = rank, .size = size, .root = root,
                           .secret = rank == 1 ? "impostor" : MP_SECRET};
    flx_comm_h comm;
    flx_status_t st = flx_comm_create(&p, &comm);

    (void)arg;
    if (st == FLX_OK)
        return mp_fail(rank, "a job with mismatched secrets formed");
    return rank == 1 ? (st == FLX_ERR_AUTH ? 0 : mp_fail(rank, "got %s", flx_status_string(st)))
                     : (st == FLX_ERR_TIMED_OUT ? 0 : mp_fail(rank, "got %s", flx_status_string(st)));
}

/* a "root" that accepts and hangs up before its challenge judged nothing:
 * the member reports a lost peer, not a wrong secret */
static int raw_root_hangs_up(int rank, int size, const char *root, void *arg)
{
    sock_addr_t addr;
    flx_comm_h comm;
    flx_status_t st;
    int lfd, fd;

    (void)arg;
    if (rank == 0) {
        sock_parse_addr(root, &addr);
        if (sock_listen(&addr, 4, &lfd, NULL) != FLX_OK)
            return mp_fail(rank, "cannot listen at %s", root);
        if (sock_accept(lfd, flx_time_now() + 10, &fd, NULL) != FLX_OK)
            return mp_fail(rank, "nobody came");
        close(fd);
        close(lfd);
        return 0;
    }
    st = mp_comm_create(rank, size, root, &comm);
    if (st == FLX_OK) {
        flx_comm_destroy(comm);
        return mp_fail(rank, "a job formed with a root that hung up");
    }
    return st == FLX_ERR_PEER_LOST ? 0 : mp_fail(rank, "got %s, not FLX_ERR_PEER_LOST",
                                                  flx_status_name(st));
}

START_TEST(test_root_hangs_up)
{
    ck_assert_int_eq(mp_run_raw(2, raw_root_hangs_up, NULL, 30, NULL), 0);
}
END_TEST

START_TEST(test_wrong_secret)
{
    setenv("FLX_CONNECT_TIMEOUT", "2s", 1);
    ck_assert_int_eq(mp_run_raw(2, raw_wrong_secret, NULL, 30, NULL), 0);
    unsetenv("FLX_CONNECT_TIMEOUT");
}
END_TEST

/* ranks that want different numbers of tcp connections per pair all fail
 * at once with FLX_ERR_MISMATCH, not at FLX_CONNECT_TIMEOUT (one would
 * wait for second connections that never come) */
static int raw_sockets_differ(int rank, int size, const char *root, void *arg)
{
    double t0 = flx_time_now();
    flx_comm_h comm;
    flx_status_t st;

    (void)arg;
    setenv("FLX_NET", "tcp", 1); /* the ib suite runs this too: ib has no tcp connections */
    setenv("FLX_TCP_SOCKETS", rank == size - 1 ? "1" : "2", 1);
    st = mp_comm_create(rank, size, root, &comm);
    if (st == FLX_OK) {
        flx_comm_destroy(comm);
        return mp_fail(rank, "a job formed with FLX_TCP_SOCKETS 1 and 2");
    }
    if (st != FLX_ERR_MISMATCH)
        return mp_fail(rank, "got %s, not FLX_ERR_MISMATCH", flx_status_name(st));
    if (flx_time_now() - t0 > 10)
        return mp_fail(rank, "the mismatch took %.1f s to notice", flx_time_now() - t0);
    return 0;
}

START_TEST(test_sockets_differ)
{
    setenv("FLX_CONNECT_TIMEOUT", "20s", 1);
    ck_assert_int_eq(mp_run_raw(3, raw_sockets_differ, NULL, 60, NULL), 0);
    unsetenv("FLX_CONNECT_TIMEOUT");
}
END_TEST

/* Rank 1 is played by the test: it joins the rendezvous like a member
 * (the secret, a listening address, the table), then in the exchange of
 * connection counts case 0 hangs up before sending its entry and case 1
 * sends an entry out of range (want 9).  Every real rank fails within
 * seconds, each with one line: case 0 FLX_ERR_PEER_LOST, the root naming
 * rank 1 and rank 2 the root; case 1 FLX_ERR_PROTOCOL, every real rank
 * naming rank 1.  No mesh forms. */
enum { XF_RANKS = 3, XF_FAKE = 1 };

static int fake_member_exchange(int rank, int size, const char *root, int c)
{
    double deadline = flx_time_now() + 10;
    sock_addr_t raddr, laddr = {.in = {.sin_family = AF_INET}};
    boot_wire_addr_t w, table[XF_RANKS];
    boot_wire_host_t host = {.boot_id = ""}; /* unknown */
    boot_wire_fds_t bad = {.want = htonl(9), .fit = htonl(2), .limit = htonl(1024),
                           .need = htonl(20)},
                    all[XF_RANKS];
    auth_key_t key;
    int fd = -1, lfd = -1;

    laddr.in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sock_parse_addr(root, &raddr);
    auth_key_derive(MP_SECRET, &key);
    if (sock_connect(&raddr, deadline, &fd) != FLX_OK ||
        auth_connect(fd, &key, AUTH_PURPOSE_BOOT, rank, size, deadline) != FLX_OK)
        return mp_fail(rank, "fake member: cannot join the rendezvous at %s", root);
    if (sock_listen(&laddr, 4, &lfd, &laddr) != FLX_OK)
        return mp_fail(rank, "fake member: cannot listen");
    boot_addr_encode(&laddr, &w);
    if (sock_send_all(fd, &w, sizeof(w), deadline) != FLX_OK ||
        sock_send_all(fd, &host, sizeof(host), deadline) != FLX_OK ||
        sock_recv_all(fd, table, sizeof(table), deadline) != FLX_OK)
        return mp_fail(rank, "fake member: no address table");
    if (c == 1) {
        /* the root hands the bad entry back to everyone, this one too */
        if (sock_send_all(fd, &bad, sizeof(bad), deadline) != FLX_OK ||
            sock_recv_all(fd, all, sizeof(all), deadline) != FLX_OK)
            return mp_fail(rank, "fake member: no table of connection counts");
        if (memcmp(&all[rank], &bad, sizeof(bad)) != 0)
            return mp_fail(rank, "fake member: the root did not relay its entry");
    }
    close(fd);
    close(lfd);
    return 0;
}

static int raw_exchange_fails(int rank, int size, const char *root, void *arg)
{
    const int c = *(const int *)arg;
    const flx_status_t want = c == 0 ? FLX_ERR_PEER_LOST : FLX_ERR_PROTOCOL;
    char path[] = "/tmp/flx-exchange-XXXXXX";
    int saved, lines;
    double t0 = flx_time_now();
    flx_comm_h comm;
    flx_status_t st;

    if (rank == XF_FAKE)
        return fake_member_exchange(rank, size, root, c);
    setenv("FLX_NET", "tcp", 1);
    saved = mp_capture_start(path);
    st = mp_comm_create(rank, size, root, &comm);
    lines = mp_capture_stop(saved, path,
                         c == 1     ? "rank 1 sent a connection count out of range"
                         : rank == 0 ? "exchange of connection counts with rank 1 failed"
                                     : "exchange of connection counts with rank 0 failed");
    if (st == FLX_OK) {
        flx_comm_destroy(comm);
        return mp_fail(rank, "case %d: a job formed", c);
    }
    if (st != want)
        return mp_fail(rank, "case %d: got %s, not %s", c, flx_status_name(st),
                       flx_status_name(want));
    if (flx_time_now() - t0 > 10)
        return mp_fail(rank, "case %d: failing took %.1f s", c, flx_time_now() - t0);
    if (lines != 1)
        return mp_fail(rank, "case %d: %d lines naming the rank at fault, not 1", c, lines);
    return 0;
}

START_TEST(test_exchange_fails)
{
    int c = _i;

    setenv("FLX_CONNECT_TIMEOUT", "20s", 1);
    ck_assert_int_eq(mp_run_raw(XF_RANKS, raw_exchange_fails, &c, 60, NULL), 0);
    unsetenv("FLX_CONNECT_TIMEOUT");
}
END_TEST

/* ---- the open-file limit ----------------------------------------------------- */

/* Descriptors open in this process, and how many of them are sockets. */
static int fds_open(int *sockets_p)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0, sockets = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char path[300], link[64];
        ssize_t len;
        if (e->d_name[0] == '.')
            continue;
        n++;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        len = readlink(path, link, sizeof(link) - 1);
        sockets += len > 7 && strncmp(link, "socket:", 7) == 0;
    }
    closedir(d);
    *sockets_p = sockets;
    return n - 1; /* the directory's own */
}

/* The bootstrap's count of open descriptors agrees with /proc/self/fd
 * whether it reads /proc or probes each number (a system without /proc),
 * with sockets and files opened and closed in between, and when not one
 * descriptor is left to open /proc with. */
START_TEST(test_open_fds)
{
    int sockets, fds[5];

    for (int round = 0; round < 3; round++) {
        long seen = fds_open(&sockets);
        ck_assert_int_ge(seen, 3);
        ck_assert_int_eq(boot_open_fds(1), seen);
        ck_assert_int_eq(boot_open_fds(0), seen);
        for (int i = 0; i < round + 2; i++) {
            fds[i] = i % 2 ? socket(AF_INET, SOCK_STREAM, 0) : open("/dev/null", O_RDONLY);
            ck_assert_int_ge(fds[i], 0);
        }
        ck_assert_int_eq(boot_open_fds(1), seen + round + 2);
        ck_assert_int_eq(boot_open_fds(0), seen + round + 2);
        for (int i = 0; i < round + 2; i += 2)
            close(fds[i]); /* holes below the highest */
        ck_assert_int_eq(boot_open_fds(0), boot_open_fds(1));
        for (int i = 1; i < round + 2; i += 2)
            close(fds[i]);
    }
    /* every descriptor below the soft limit taken: /proc cannot be opened
     * (EMFILE) and the count comes from asking each number */
    {
        struct rlimit saved, rl;
        int filled[16], n = 0, fd;
        ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &saved), 0);
        rl = saved;
        rl.rlim_cur = (rlim_t)fds_open(&sockets) + 2;
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
        while (n < 16 && (fd = open("/dev/null", O_RDONLY)) >= 0) /* the holes, then the top */
            filled[n++] = fd;
        ck_assert_int_lt(n, 16);
        ck_assert_int_eq(errno, EMFILE);
        ck_assert_int_eq(boot_open_fds(1), (long)rl.rlim_cur); /* every number below it */
        while (n > 0)
            close(filled[--n]);
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &saved), 0);
    }
}
END_TEST

/* Rank FD_LIMITED (the root in case 4) runs under a soft and hard
 * RLIMIT_NOFILE that holds: case 0 one connection per pair but not two
 * (FLX_TCP_SOCKETS auto: the job forms with one, every rank holding N - 1
 * data sockets); case 1 the same with FLX_TCP_SOCKETS=2 (every rank fails
 * with FLX_ERR_SYSTEM at once); case 2 not even one (auto: the same);
 * case 3 no limit (two, 2(N - 1) sockets); case 4 the root's limit cannot
 * hold the rendezvous (it fails at its first accept that hits EMFILE, at
 * once, instead of polling until FLX_CONNECT_TIMEOUT; the others fail);
 * case 5 a soft limit below the rendezvous's needs under a high hard one
 * (raised: two connections per pair, the soft limit at least what two
 * need). */
enum { FD_RANKS = 6, FD_LIMITED = 3 };

static int raw_fd_limit(int rank, int size, const char *root, void *arg)
{
    const int c = *(const int *)arg, limited = c == 4 ? 0 : FD_LIMITED;
    int before_sockets, after_sockets, lanes = c == 3 || c == 5 ? 2 : 1;
    long open_now = fds_open(&before_sockets);
    double t0 = flx_time_now();
    flx_comm_h comm;
    flx_status_t st;

    if (open_now < 0)
        return mp_fail(rank, "cannot read /proc/self/fd");
    setenv("FLX_TCP_SOCKETS", c == 1 ? "2" : "auto", 1);
    setenv("FLX_NET", "tcp", 1); /* ib would ask for one connection whatever the limit */
    if (rank == limited && c == 5) {
        struct rlimit rl = {.rlim_cur = (rlim_t)open_now + 3, .rlim_max = 4096};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            return mp_fail(rank, "setrlimit: %s", strerror(errno));
    } else if (rank == limited && c != 3) {
        /* after the rendezvous: its listener and connection(s) more */
        long after = open_now + 1 + (rank == 0 ? size - 1 : 1);
        long need1 = boot_fd_need(rank, size, 1, after);
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = (rlim_t)(c == 0 || c == 1 ? need1 + 3
                                             : c == 2 ? need1 - 2 : open_now + 2);
        if (boot_fd_need(rank, size, 2, after) <= (long)rl.rlim_cur)
            return mp_fail(rank, "the limit %ld would hold two connections per pair",
                           (long)rl.rlim_cur);
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            return mp_fail(rank, "setrlimit: %s", strerror(errno));
    }
    st = mp_comm_create(rank, size, root, &comm);
    if (c == 1 || c == 2 || (c == 4 && rank == 0)) {
        if (st == FLX_OK) {
            flx_comm_destroy(comm);
            return mp_fail(rank, "case %d: a job formed", c);
        }
        if (st != FLX_ERR_SYSTEM)
            return mp_fail(rank, "case %d: got %s, not FLX_ERR_SYSTEM", c, flx_status_name(st));
        if (flx_time_now() - t0 > 10)
            return mp_fail(rank, "case %d: the limit took %.1f s to notice", c,
                           flx_time_now() - t0);
        return 0;
    }
    if (c == 4) /* the others: whatever the root's going away looks like, an error */
        return st != FLX_OK ? 0 : mp_fail(rank, "a job formed without its root");
    if (st != FLX_OK)
        return mp_fail(rank, "case %d: flx_comm_create: %s", c, flx_status_name(st));
    if (rank == limited && c == 5) {
        struct rlimit rl;
        long need2 = boot_fd_need(rank, size, 2, open_now + 1 + 1);
        if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || (long)rl.rlim_cur < need2) {
            flx_comm_destroy(comm);
            return mp_fail(rank, "case 5: the soft limit is %ld, below the %ld two connections "
                           "per pair need", (long)rl.rlim_cur, need2);
        }
    }
    if (fds_open(&after_sockets) < 0 || after_sockets - before_sockets != lanes * (size - 1)) {
        flx_comm_destroy(comm);
        return mp_fail(rank, "case %d: %d sockets more after flx_comm_create, not %d", c,
                       after_sockets - before_sockets, lanes * (size - 1));
    }
    {
        float v[70001];
        for (size_t i = 0; i < FLX_ARRAY_SIZE(v); i++)
            v[i] = (float)(rank + 1) * (float)(i % 7);
        st = flx_allreduce(comm, v, v, FLX_ARRAY_SIZE(v), FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING);
        for (size_t i = 0; i < FLX_ARRAY_SIZE(v) && st == FLX_OK; i++)
            if (v[i] != (float)(size * (size + 1) / 2) * (float)(i % 7)) {
                flx_comm_destroy(comm);
                return mp_fail(rank, "case %d: element %zu is %g", c, i, v[i]);
            }
    }
    flx_comm_destroy(comm);
    return st == FLX_OK ? 0 : mp_fail(rank, "case %d: allreduce: %s", c, flx_status_name(st));
}

START_TEST(test_fd_limit)
{
    int c = _i;

    setenv("FLX_CONNECT_TIMEOUT", c == 4 ? "5s" : "20s", 1);
    ck_assert_int_eq(mp_run_raw(FD_RANKS, raw_fd_limit, &c, 60, NULL), 0);
    unsetenv("FLX_CONNECT_TIMEOUT");
    unsetenv("FLX_TCP_SOCKETS");
    unsetenv("FLX_NET");
}
END_TEST

/* ---- bad arguments leave the communicator working ---------------------------- */

static int body_bad_args(flx_comm_h comm, int rank, int size, void *arg)
{
    float a[16] = {1}, big[64];
    flx_request_h req;

    (void)arg;
#define EXPECT_INVALID(call)                                                          \
    do {                                                                              \
        flx_status_t st_ = (call);                                                    \
        if (st_ != FLX_ERR_INVALID_ARG)                                               \
            return mp_fail(rank, "%s returned %s", #call, flx_status_string(st_));   \
    } while (0)
    EXPECT_INVALID(flx_allreduce(NULL, a, a, 4, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO));
    EXPECT_INVALID(flx_allreduce(comm, a, a, 4, (flx_dtype_t)42, FLX_SUM, FLX_ALGO_AUTO));
    EXPECT_INVALID(flx_allreduce(comm, a, a, 4, FLX_FLOAT32, (flx_op_t)9, FLX_ALGO_AUTO));
    EXPECT_INVALID(flx_allreduce(comm, a, a, 4, FLX_FLOAT32, FLX_SUM, (flx_algo_t)7));
    EXPECT_INVALID(flx_allreduce(comm, NULL, a, 4, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO));
    EXPECT_INVALID(flx_allreduce(comm, a, a + 1, 4, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO));
    EXPECT_INVALID(flx_allreduce(comm, a, a, (size_t)1 << 62, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO));
    EXPECT_INVALID(flx_broadcast(comm, a, 4, FLX_FLOAT32, size));
    EXPECT_INVALID(flx_broadcast(comm, a, 4, FLX_FLOAT32, -1));
    EXPECT_INVALID(flx_allgather(comm, big + 1, big, 4, FLX_FLOAT32, FLX_ALGO_AUTO));
    EXPECT_INVALID(flx_reduce_scatter(comm, big, big + 1, 4, FLX_FLOAT32, FLX_SUM));
    EXPECT_INVALID(flx_iallreduce(comm, a, a, 4, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO, NULL));
    EXPECT_INVALID(flx_barrier(NULL));
    EXPECT_INVALID(flx_wait(NULL));
    EXPECT_INVALID(flx_test(NULL));
    EXPECT_INVALID(flx_iallreduce(comm, a, a + 1, 4, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO, &req));
    EXPECT_INVALID(flx_iallgather(comm, a, big, 4, FLX_FLOAT32, FLX_ALGO_AUTO, NULL));
    EXPECT_INVALID(flx_iallgather(NULL, a, big, 4, FLX_FLOAT32, FLX_ALGO_AUTO, &req));
    { /* the non-blocking calls' lines name them (they named the blocking ones) */
        char path[] = "/tmp/flx_iname_XXXXXX";
        int saved = mp_capture_start(path), n;

        EXPECT_INVALID(flx_iallreduce(comm, a, a, 4, FLX_FLOAT32, (flx_op_t)9, FLX_ALGO_AUTO, &req));
        EXPECT_INVALID(flx_iallgather(comm, big + 1, big, 4, FLX_FLOAT32, FLX_ALGO_AUTO, &req));
        n = mp_capture_stop(saved, path, "flx_iall");
        if (n != 2)
            return mp_fail(rank, "%d of 2 lines name flx_iallreduce / flx_iallgather", n);
    }
    EXPECT_INVALID(flx_allgather(comm, a, NULL, 4, FLX_FLOAT32, FLX_ALGO_AUTO));
    EXPECT_INVALID(flx_allgather(comm, a, big, (size_t)1 << 60, FLX_FLOAT32, FLX_ALGO_AUTO));
    EXPECT_INVALID(flx_allgather(comm, a, big, 4, FLX_FLOAT32, (flx_algo_t)-1));
    EXPECT_INVALID(flx_broadcast(comm, NULL, 4, FLX_FLOAT32, 0));
    EXPECT_INVALID(flx_broadcast(comm, a, 4, (flx_dtype_t)-3, 0));
    EXPECT_INVALID(flx_reduce_scatter(comm, NULL, big, 4, FLX_FLOAT32, FLX_SUM));
    EXPECT_INVALID(flx_reduce_scatter(comm, big, big + 8, 4, FLX_FLOAT32, (flx_op_t)-1));
    EXPECT_INVALID(flx_reduce_scatter(comm, big, big, (size_t)1 << 61, FLX_FLOAT32, FLX_SUM));
    EXPECT_INVALID(flx_mem_register(comm, NULL, 16));
    EXPECT_INVALID(flx_mem_register(comm, a, 0));
    EXPECT_INVALID(flx_mem_deregister(comm, NULL));
    EXPECT_INVALID(flx_comm_link_model(comm, NULL));
    EXPECT_INVALID(flx_comm_abort(NULL));
    EXPECT_INVALID(flx_comm_get_async_error(NULL));
    {
        size_t counts[4], displs[4];
        EXPECT_INVALID(flx_allgatherv(comm, a, 4, big, 64, counts, counts, FLX_FLOAT32,
                                      FLX_ALGO_AUTO));
        EXPECT_INVALID(flx_allgatherv(comm, a, 4, big, 64, NULL, displs, FLX_FLOAT32,
                                      FLX_ALGO_AUTO));
        EXPECT_INVALID(flx_allgatherv(comm, a, 4, big, 64, counts, displs, (flx_dtype_t)99,
                                      FLX_ALGO_AUTO));
        EXPECT_INVALID(flx_allgatherv(comm, a, (size_t)1 << 62, big, 64, counts, displs,
                                      FLX_FLOAT32, FLX_ALGO_AUTO));
        EXPECT_INVALID(flx_allgatherv(comm, a, 4, big, 64, (size_t *)big, displs, FLX_FLOAT32,
                                      FLX_ALGO_AUTO));
    }
    {
        flx_gsync_h g = NULL;
        flx_gsync_opts_t o;
        flx_gsync_opts_default(NULL); /* logs, no crash */
        flx_gsync_opts_default(&o);
        EXPECT_INVALID(flx_gsync_create(NULL, 16, NULL, &g));
        EXPECT_INVALID(flx_gsync_create(comm, 16, NULL, NULL));
        EXPECT_INVALID(flx_gsync_create(comm, 0, NULL, &g));
        EXPECT_INVALID(flx_gsync_create(comm, (size_t)1 << 40, NULL, &g));
        o.field_mask = FLX_GSYNC_OPT_KEPT_FRACTION;
        o.kept_fraction = 0.0 / 0.0;
        EXPECT_INVALID(flx_gsync_create(comm, 16, &o, &g));
        EXPECT_INVALID(flx_gsync_step(NULL, a, NULL));
        EXPECT_INVALID(flx_gsync_set_kept_fraction(NULL, 0.5));
        EXPECT_INVALID(flx_gsync_set_collective(NULL, FLX_GSYNC_COLL_AUTO));
        if (g != NULL || flx_gsync_kept(NULL) != 0 || flx_gsync_residual(NULL) != NULL ||
            flx_gsync_destroy(NULL) != FLX_OK)
            return mp_fail(rank, "gsync NULL handling");
    }
    {   /* handles no longer pending: refused, not read after their free, and not
         * taken for a newer request that got the old one's memory */
        flx_request_h r1, r2, r3;
        float v = 1;
        flx_status_t st;
        if (flx_iallreduce(comm, &v, &v, 1, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO, &r1) != FLX_OK ||
            (st = flx_wait(r1)) != FLX_OK)
            return mp_fail(rank, "a good iallreduce failed");
        EXPECT_INVALID(flx_wait(r1));
        EXPECT_INVALID(flx_test(r1));
        if (flx_iallreduce(comm, &v, &v, 1, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO, &r2) != FLX_OK)
            return mp_fail(rank, "a second good iallreduce failed");
        EXPECT_INVALID(flx_wait(r1)); /* r2 most likely sits where r1 was */
        if ((st = flx_wait(r2)) != FLX_OK)
            return mp_fail(rank, "the request after a stale wait: %s", flx_status_string(st));
        if (flx_iallreduce(comm, &v, &v, 1, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO, &r3) != FLX_OK)
            return mp_fail(rank, "a third good iallreduce failed");
        while ((st = flx_test(r3)) == FLX_INPROGRESS)
            usleep(100);
        if (st != FLX_OK)
            return mp_fail(rank, "flx_test ended the good iallreduce with %s",
                           flx_status_string(st));
        EXPECT_INVALID(flx_wait(r3));
        EXPECT_INVALID(flx_wait(r2));
    }
    (void)req;
    /* none of that touched the wire: a real collective still works */
    a[0] = (float)rank;
    if (flx_allreduce(comm, a, a, 1, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO) != FLX_OK ||
        a[0] != (float)(size * (size - 1) / 2))
        return mp_fail(rank, "allreduce after bad arguments gave %g", a[0]);
    return 0;
}

START_TEST(test_bad_args)
{
    ck_assert_int_eq(mp_run(3, body_bad_args, NULL, 30, NULL), 0);
}
END_TEST

/* One thread polls a request with flx_test while another waits for it: the
 * wait waits (before, it was refused as "waited for in another thread"
 * whenever it met a test's brief claim: 53 times in 80 tries), and the
 * tester, once the wait holds the request, is refused with one line and
 * stops.  Rank 1 comes 100 ms late, so the request is pending throughout. */
typedef struct {
    flx_request_h req;
    int stop;
    flx_status_t last;
} tester_t;

static void *tester(void *arg)
{
    tester_t *t = arg;

    do
        t->last = flx_test(t->req);
    while (t->last == FLX_INPROGRESS && !__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE));
    return NULL;
}

static int body_test_vs_wait(flx_comm_h comm, int rank, int size, void *arg)
{
    int ended_by_test = 0;

    (void)arg;
    for (int it = 0; it < 20; it++) {
        float x[64];
        tester_t t = {.last = FLX_INPROGRESS};
        pthread_t th;
        flx_status_t st;

        for (int i = 0; i < 64; i++)
            x[i] = (float)(rank + i);
        if (rank == 1) /* late enough that rank 0's wait claims first on a loaded machine
                        * (20 ms was not, with a second test suite running beside) */
            usleep(100000);
        if (flx_iallreduce(comm, x, x, 64, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO, &t.req) != FLX_OK)
            return mp_fail(rank, "iallreduce %d failed", it);
        if (rank == 0) {
            pthread_create(&th, NULL, tester, &t);
            usleep(2000);
        }
        st = flx_wait(t.req);
        if (rank == 0) {
            __atomic_store_n(&t.stop, 1, __ATOMIC_RELEASE);
            pthread_join(th, NULL);
        }
        /* on a loaded machine the tester may still end the request before the
         * wait looks (the header: the wait is then refused as no longer pending) */
        if (st == FLX_ERR_INVALID_ARG && rank == 0 && t.last == FLX_OK)
            ended_by_test++;
        else if (st != FLX_OK)
            return mp_fail(rank, "try %d: flx_wait with a tester beside it: %s (tester: %s)", it,
                           flx_status_name(st), flx_status_name(t.last));
        for (int i = 0; i < 64; i++)
            if (x[i] != (float)(size * (size - 1) / 2 + size * i))
                return mp_fail(rank, "try %d: element %d is %g", it, i, x[i]);
    }
    if (ended_by_test > 2) /* the wait must have met the test most of the time */
        return mp_fail(rank, "the tester ended %d of 20 requests before the wait", ended_by_test);
    return 0;
}

START_TEST(test_test_vs_wait)
{
    ck_assert_int_eq(mp_run(2, body_test_vs_wait, NULL, 60, NULL), 0);
}
END_TEST

/* A request the caller never ended is freed by flx_comm_destroy; waiting
 * for it afterwards is refused with one line (before: a read of the freed
 * communicator; the sanitizer build would report it). */
START_TEST(test_request_after_destroy)
{
    flx_comm_params_t p = {.field_mask = FLX_COMM_PARAM_RANK | FLX_COMM_PARAM_SIZE,
                           .rank = 0, .size = 1};
    flx_comm_h comm;
    flx_request_h req;
    float v = 2;

    ck_assert_int_eq(flx_comm_create(&p, &comm), FLX_OK);
    ck_assert_int_eq(flx_iallreduce(comm, &v, &v, 1, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO, &req),
                     FLX_OK);
    ck_assert_int_eq(flx_comm_destroy(comm), FLX_OK);
    ck_assert(v == 2.0f);
    ck_assert_int_eq(flx_wait(req), FLX_ERR_INVALID_ARG);
    ck_assert_int_eq(flx_test(req), FLX_ERR_INVALID_ARG);
}
END_TEST

/* ---- malformed environment ----------------------------------------------------- */

START_TEST(test_bad_env)
{
    static const char *const bad[][2] = {
        {"FLX_TIMEOUT", "soon"}, {"FLX_CHUNK_SIZE", "12q"}, {"FLX_ALGO", "fastest"},
        {"FLX_NET", "carrier-pigeon"}, {"FLX_RANK", "x"}, {"FLX_ROOT", "nohostport"},
        {"OMPI_COMM_WORLD_RANK", "7"}, {"FLX_SIZE", "2049"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        flx_comm_h comm = NULL;
        flx_status_t st;
        setenv(bad[i][0], bad[i][1], 1);
        if (strcmp(bad[i][0], "OMPI_COMM_WORLD_RANK") == 0)
            setenv("OMPI_COMM_WORLD_SIZE", "4", 1);   /* rank 7 of 4 */
        if (strcmp(bad[i][0], "FLX_SIZE") == 0) { /* more ranks than step tags hold */
            setenv("FLX_RANK", "0", 1);        /* refused before it waits for them */
            setenv("FLX_JOB_SECRET", "s", 1);
            setenv("FLX_CONNECT_TIMEOUT", "1s", 1);
        }
        if (strcmp(bad[i][0], "FLX_ROOT") == 0) {
            setenv("FLX_RANK", "1", 1);
            setenv("FLX_SIZE", "2", 1);
            setenv("FLX_JOB_SECRET", "s", 1);
        }
        st = flx_comm_create(NULL, &comm);
        ck_assert_msg(st == FLX_ERR_CONFIG || st == FLX_ERR_INVALID_ARG,
                      "%s=%s gave %s", bad[i][0], bad[i][1], flx_status_name(st));
        ck_assert_ptr_null(comm);
        unsetenv(bad[i][0]);
        unsetenv("OMPI_COMM_WORLD_SIZE");
        unsetenv("FLX_RANK");
        unsetenv("FLX_SIZE");
        unsetenv("FLX_JOB_SECRET");
        unsetenv("FLX_CONNECT_TIMEOUT");
    }
    /* two ranks but no secret anywhere */
    setenv("FLX_RANK", "0", 1);
    setenv("FLX_SIZE", "2", 1);
    {
        flx_comm_h comm = NULL;
        ck_assert_int_eq(flx_comm_create(NULL, &comm), FLX_ERR_CONFIG);
    }
    unsetenv("FLX_RANK");
    unsetenv("FLX_SIZE");
    /* nothing set: a single rank that works */
    {
        flx_comm_h comm = NULL;
        double v = 3;
        ck_assert_int_eq(flx_comm_create(NULL, &comm), FLX_OK);
        ck_assert_int_eq(flx_comm_size(comm), 1);
        ck_assert_int_eq(flx_allreduce(comm, &v, &v, 1, FLX_FLOAT64, FLX_SUM, FLX_ALGO_AUTO), FLX_OK);
        ck_assert(v == 3);
        flx_comm_destroy(comm);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("mismatch"); /* CK_RUN_CASE=mismatch runs it alone */
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_mismatch, MM_COUNT, MM_ROOT + 1);
    tcase_add_test(tc, test_mismatch_words);
    tcase_add_test(tc, test_skipped_buffered);
    tcase_add_loop_test(tc, test_zero_count, 0, 24);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_dead_peer, 0, 3);
    tcase_add_test(tc, test_job_stopped);
    tcase_add_test(tc, test_strangers);
    tcase_add_test(tc, test_root_hangs_up);
    tcase_add_test(tc, test_wrong_secret);
    tcase_add_test(tc, test_sockets_differ);
    tcase_add_loop_test(tc, test_exchange_fails, 0, 2);
    tcase_add_test(tc, test_open_fds);
    tcase_add_loop_test(tc, test_fd_limit, 0, 6);
    tcase_add_test(tc, test_bad_args);
    tcase_add_test(tc, test_request_after_destroy);
    tcase_add_test(tc, test_test_vs_wait);
    tcase_add_test(tc, test_bad_env);
    suite_add_tcase(s, tc);
    tc = tcase_create("nomem");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_no_memory);
    suite_add_tcase(s, tc);
    tc = tcase_create("hostile");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_hostile, 0, 2);
    tcase_add_loop_test(tc, test_flood, 0, 2);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
