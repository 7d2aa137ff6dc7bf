/* gloo-coll-bench.cc -- Gloo's allreduce / allgather timed exactly as the
 * flx-*-perf tools time flexcoll (and scripts/mpi-coll-bench.c times MPI), so
 * that scripts/compare-mpi.sh -B gloo can line them up: same size sweep,
 * warm-up and iteration scheme, same columns.
 *
 *   g++ -O3 -std=c++17 -o gloo-coll-bench gloo-coll-bench.cc -lgloo -lpthread
 *   GLOO_BENCH_STORE=/tmp/st flxrun -n 4 ./gloo-coll-bench allreduce -b 4 -e 64M
 *
 * Rank and size come from FLX_RANK / FLX_SIZE (flxrun), OMPI_COMM_WORLD_RANK /
 * _SIZE (mpirun), PMI_RANK / PMI_SIZE or SLURM_PROCID / SLURM_NTASKS; the
 * ranks rendezvous through Gloo's FileStore in the directory $GLOO_BENCH_STORE
 * (or -s DIR), which must be empty at the start and shared by the ranks.
 *
 * Transport: Gloo's tcp device on the interface -I (default lo), IPv4.
 * (Its ibverbs transport is left out: Debian's build aborts when a classic
 * algorithm is destroyed while its last sends' completions are still to
 * come, "sendPending_ == 0" in buffer.cc, seen in the SoftRoCE VM.)  Mode
 * (-m): async (Gloo's default: a device thread moves the bytes), sync
 * (every pair in Gloo's synchronous mode with busy polling, its benchmark's
 * --sync --busy-poll: the calling thread moves them) or both (the default:
 * one context of each, every algorithm in each mode it has).  Sync mode runs
 * only up to 2 x min(net.core.wmem_max, 32 MiB) bytes (see sync_limit).
 *
 * Algorithm (-a):
 *   allreduce  ring          gloo::allreduce, ring (PyTorch's ProcessGroupGloo)
 *              bcube         gloo::allreduce, bcube
 *              hd            AllreduceHalvingDoubling (Gloo's benchmark default)
 *              ring-chunked  AllreduceRingChunked
 *              best          each of these at each size, in each mode; the
 *                            row of the one with the smallest out-of-place
 *                            mean, named in a last column (the default).
 *                            From 1 MiB on, one that took more than 8x the
 *                            fastest's time at two sizes in a row is not
 *                            run at larger sizes (a "# ... dropped" line).
 *   allgather  ring          gloo::allgather (PyTorch's ProcessGroupGloo)
 *              ring-legacy   AllgatherRing
 *              best          both, as above
 * In sync mode only the classic algorithms exist (Gloo's unbound buffers
 * need asynchronous pairs): hd, ring-chunked and ring-legacy; a name in the
 * last column ends in "+sync" for sync mode.
 *
 * The gloo::allreduce / gloo::allgather calls build their options (and so
 * their unbound buffers) per call, as PyTorch does; the classic algorithms
 * are built once per size and placement.  The classic allreduces reduce in
 * place only: out of place, a call is the copy of the input to the output
 * and the in-place call on the output (what their caller must do; an MPI
 * library does the same inside MPI_Allreduce).
 *
 * Per size and placement: -w warm-up calls, barrier, -n timed calls each
 * timed on its own; time = mean of the slowest rank; min/p50/p99 of the
 * out-of-place iterations (each rank's nearest-rank percentiles, the slowest
 * rank's of each).  -c 1 checks one call on exact data in an untimed pass.
 * algbw = size / time (1e9 B/s); busbw = algbw * 2(n-1)/n (allreduce),
 * algbw * (n-1)/n (allgather).  Standalone: it does not use flexcoll
 * (coll-bench.h beside it holds what it shares with mpi-coll-bench.c).
 */
#include "coll-bench.h"

#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <getopt.h>
#include <unistd.h>

namespace {

enum { BENCH_ALLREDUCE, BENCH_ALLGATHER };

/* the algorithms; "best" runs every one its collective and transport have */
enum bench_algo {
    ALGO_RING,         /* gloo::allreduce / gloo::allgather, ring */
    ALGO_BCUBE,        /* gloo::allreduce, bcube */
    ALGO_HD,           /* AllreduceHalvingDoubling */
    ALGO_RING_CHUNKED, /* AllreduceRingChunked */
    ALGO_RING_LEGACY,  /* AllgatherRing */
    ALGO_COUNT,
    ALGO_BEST = ALGO_COUNT
};

const char *const algo_names[ALGO_COUNT] = {"ring", "bcube", "hd", "ring-chunked", "ring-legacy"};

struct bench_args {
    int coll = -1;
    bench_sweep_t sw;
    int algo = ALGO_BEST;
    int modes = 3; /* bit 0: async, bit 1: sync */
    std::string iface = "lo", store;
};

struct bench_result {
    double mean_s, min_s, p50_s, p99_s, algbw, busbw;
    long long wrong;
};

struct bench {
    bench_args args;
    int rank = 0, nranks = 1;
    std::shared_ptr<gloo::Context> ctx, ctx_sync; /* async pairs; sync pairs (-m sync|both) */
    std::vector<float> sendbuf, recvbuf;
    std::vector<double> times;
    double bw_sum = 0;
    long bw_count = 0, wrong_rows = 0;
    uint32_t tag = 0; /* a fresh tag per gloo::allreduce / gloo::allgather call */
    bool dropped[2 * ALGO_COUNT] = {}; /* algorithm (+ ALGO_COUNT: sync) no longer run */
    int strikes[2 * ALGO_COUNT] = {};  /* sizes in a row it was 8x slower than the fastest */
    size_t sync_max_bytes = SIZE_MAX;  /* tcp: sync mode up to this size (see sync_limit) */
    /* the bench's own barrier, maximum and sum, built once on the async
     * context (so never destroyed between two uses) over red */
    double red[4] = {};
    std::unique_ptr<gloo::Algorithm> bar, max4, sum1;
};

void usage(FILE *out)
{
    fprintf(out, "usage: gloo-coll-bench allreduce|allgather [-b min] [-e max] [-f factor | -i step]"
                 " [-n iters] [-w warmup] [-c 0|1]\n"
                 "       [-a ring|bcube|hd|ring-chunked|ring-legacy|best] [-I iface]"
                 " [-m async|sync|both] [-s storedir]\n");
}

/* does this algorithm exist for the collective and the mode? */
bool algo_fits(const bench_args &a, int algo, bool sync)
{
    bool unbound = algo == ALGO_RING || algo == ALGO_BCUBE; /* asynchronous pairs only */

    if (sync && unbound)
        return false;
    if (a.coll == BENCH_ALLREDUCE)
        return algo != ALGO_RING_LEGACY;
    return algo == ALGO_RING || algo == ALGO_RING_LEGACY;
}

/* 0 ok, 1 help (printed unless quiet), -1 error (message printed by every
 * rank: a launcher may stop the others as soon as one exits) */
int parse_args(bench_args *a, bool quiet, int argc, char **argv)
{
    int c;
    const char *env = getenv("GLOO_BENCH_STORE");

    if (env != nullptr)
        a->store = env;
    bench_sweep_defaults(&a->sw);
    opterr = 0;
    while ((c = getopt(argc, argv, ":b:e:f:i:n:w:c:a:I:m:s:h")) != -1) {
        int bad = bench_sweep_option(&a->sw, c, optarg);

        if (bad == 0)
            continue;
        if (bad < 0) {
            fprintf(stderr, "gloo-coll-bench: invalid value '%s' for -%c\n", optarg, c);
            return -1;
        }
        bad = 0;
        switch (c) {
        case 'a':
            bad = -1;
            if (strcmp(optarg, "best") == 0) {
                a->algo = ALGO_BEST;
                bad = 0;
            }
            for (int i = 0; i < ALGO_COUNT; i++)
                if (strcmp(optarg, algo_names[i]) == 0) {
                    a->algo = i;
                    bad = 0;
                }
            break;
        case 'I': a->iface = optarg; break;
        case 'm':
            a->modes = strcmp(optarg, "async") == 0 ? 1 : strcmp(optarg, "sync") == 0 ? 2
                       : strcmp(optarg, "both") == 0 ? 3 : 0;
            bad = a->modes == 0;
            break;
        case 's': a->store = optarg; break;
        case 'h':
            if (!quiet)
                usage(stdout);
            return 1;
        default:
            fprintf(stderr, "gloo-coll-bench: bad option '%s'\n", argv[optind - 1]);
            return -1;
        }
        if (bad != 0) {
            fprintf(stderr, "gloo-coll-bench: invalid value '%s' for -%c\n", optarg, c);
            return -1;
        }
    }
    if (optind + 1 == argc && strcmp(argv[optind], "allreduce") == 0)
        a->coll = BENCH_ALLREDUCE;
    else if (optind + 1 == argc && strcmp(argv[optind], "allgather") == 0)
        a->coll = BENCH_ALLGATHER;
    if (a->coll < 0 || a->sw.min_bytes > a->sw.max_bytes || (a->sw.min_bytes == 0 && a->sw.step_factor)) {
        fprintf(stderr, "gloo-coll-bench: need one collective (allreduce or allgather) "
                        "and minbytes <= maxbytes (> 0 with a factor)\n");
        usage(stderr);
        return -1;
    }
    if (a->algo != ALGO_BEST && !((a->modes & 1) && algo_fits(*a, a->algo, false)) &&
        !((a->modes & 2) && algo_fits(*a, a->algo, true))) {
        fprintf(stderr, "gloo-coll-bench: Gloo has no %s %s%s\n", algo_names[a->algo],
                a->coll == BENCH_ALLREDUCE ? "allreduce" : "allgather",
                a->modes == 2 ? " in sync mode" : "");
        return -1;
    }
    if (a->sw.max_bytes > (size_t)INT32_MAX) {
        /* Gloo's classic algorithms keep the byte count in an int */
        fprintf(stderr, "gloo-coll-bench: maxbytes above %d (Gloo's int byte counts)\n", INT32_MAX);
        return -1;
    }
    if (a->store.empty()) {
        fprintf(stderr, "gloo-coll-bench: no rendezvous directory: set GLOO_BENCH_STORE "
                        "or pass -s DIR\n");
        return -1;
    }
    return 0;
}

/* rank and size from the launcher's environment; false if none is set */
bool launcher_rank(int *rank, int *size)
{
    static const char *const pairs[][2] = {{"FLX_RANK", "FLX_SIZE"},
                                           {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                           {"PMI_RANK", "PMI_SIZE"},
                                           {"SLURM_PROCID", "SLURM_NTASKS"}};

    for (const auto &p : pairs) {
        const char *r = getenv(p[0]), *s = getenv(p[1]);
        if (r != nullptr && s != nullptr && bench_parse_int(r, 0, 1 << 20, rank) == 0 &&
            bench_parse_int(s, 1, 1 << 20, size) == 0 && *rank < *size)
            return true;
    }
    return false;
}

double now_s()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/* the bench's own barrier, maximum and sum: classic algorithms, which every
 * transport and mode has, built once by every rank in the same order */
void bench_own_ops(bench &b)
{
    b.bar.reset(new gloo::BarrierAllToOne(b.ctx));
    b.max4.reset(new gloo::AllreduceRing<double>(b.ctx, {b.red}, 4,
                                                 gloo::ReductionFunction<double>::max));
    b.sum1.reset(new gloo::AllreduceRing<double>(b.ctx, {b.red}, 1,
                                                 gloo::ReductionFunction<double>::sum));
}

void barrier(bench &b)
{
    b.bar->run();
}

/* the element-wise maximum of v[0..n) over the ranks, n <= 4 */
void allmax(bench &b, double *v, size_t n)
{
    for (size_t i = 0; i < 4; i++)
        b.red[i] = i < n ? v[i] : -HUGE_VAL;
    b.max4->run();
    memcpy(v, b.red, n * sizeof(double));
}

/* the sum of *v over the ranks */
void allsum(bench &b, double *v)
{
    b.red[0] = *v;
    b.sum1->run();
    *v = b.red[0];
}

/* Sync mode only up to 2 x min(net.core.wmem_max, 32 MiB) bytes (the
 * smallest over the ranks).  A sync pair's send blocks until the socket
 * takes the whole message, and the classic algorithms send before they
 * receive: halving-doubling's first step half the size, ring-chunked two
 * chunks, an allgather block.  Gloo sizes SO_SNDBUF to the message, capped
 * at 32 MiB and by wmem_max, which the kernel doubles.  A message that does
 * not fit can leave both partners of a step in send, each waiting for the
 * other to read (Gloo's write timeout, then a reset connection): with the
 * cap at 4 x wmem_max, 4 of 32 fresh 2-rank halving-doubling runs at the
 * cap hung in writev.  At 2 x, the largest message is half the buffer. */
size_t sync_limit(bench &b)
{
    FILE *f = fopen("/proc/sys/net/core/wmem_max", "r");
    unsigned long long wmem = 212992; /* Linux's default, if it cannot be read */
    double neg;

    if (f != nullptr) {
        if (fscanf(f, "%llu", &wmem) != 1)
            wmem = 212992;
        fclose(f);
    }
    neg = -2.0 * (double)(wmem < ((size_t)32 << 20) ? wmem : ((size_t)32 << 20));
    allmax(b, &neg, 1);
    return (size_t)-neg;
}

/* One collective at one size and placement: the classic algorithms are built
 * once (they set up their buffers with the pairs), the options-based calls
 * build their options each call as a framework does. */
class bench_op {
public:
    bench_op(bench &b, int algo, bool sync, size_t count, bool in_place)
        : b_(b), algo_(algo), count_(count), in_place_(in_place)
    {
        const auto &ctx = sync ? b.ctx_sync : b.ctx;
        float *out = b.recvbuf.data();
        in_ = in_place ? (b.args.coll == BENCH_ALLREDUCE ? out : out + (size_t)b.rank * count)
                       : b.sendbuf.data();
        if (algo == ALGO_HD)
            classic_.reset(new gloo::AllreduceHalvingDoubling<float>(ctx, {out}, (int)count));
        else if (algo == ALGO_RING_CHUNKED)
            classic_.reset(new gloo::AllreduceRingChunked<float>(ctx, {out}, (int)count));
        else if (algo == ALGO_RING_LEGACY)
            classic_.reset(new gloo::AllgatherRing<float>(ctx, {in_}, out, (int)count));
    }

    void run()
    {
        float *out = b_.recvbuf.data();

        if (classic_) {
            /* the peers of a classic allreduce write into its own inboxes,
             * never into the output: the copy cannot overwrite their data */
            if (!in_place_ && b_.args.coll == BENCH_ALLREDUCE)
                memcpy(out, in_, count_ * sizeof(float));
            classic_->run();
        } else if (b_.args.coll == BENCH_ALLREDUCE) {
            gloo::AllreduceOptions opts(b_.ctx);
            if (!in_place_) /* in place: the output alone, as PyTorch calls it */
                opts.setInput(in_, count_);
            opts.setOutput(out, count_);
            opts.setAlgorithm(algo_ == ALGO_BCUBE ? gloo::AllreduceOptions::Algorithm::BCUBE
                                                  : gloo::AllreduceOptions::Algorithm::RING);
            opts.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(
                &gloo::sum<float>));
            opts.setTag(b_.tag++);
            gloo::allreduce(opts);
        } else {
            gloo::AllgatherOptions opts(b_.ctx);
            if (!in_place_) /* in place: this rank's block already in the output */
                opts.setInput(in_, count_);
            opts.setOutput(out, count_ * (size_t)b_.nranks);
            opts.setTag(b_.tag++);
            gloo::allgather(opts);
        }
    }

private:
    bench &b_;
    int algo_;
    size_t count_;
    bool in_place_;
    float *in_;
    std::unique_ptr<gloo::Algorithm> classic_;

};

void prepare(bench &b, size_t count, bool in_place)
{
    float *out = b.recvbuf.data();

    if (b.args.coll == BENCH_ALLREDUCE) {
        bench_fill(in_place ? out : b.sendbuf.data(), count, b.rank);
        if (!in_place)
            memset(out, 0xa5, count * sizeof(float));
    } else {
        memset(out, 0xa5, count * sizeof(float) * (size_t)b.nranks);
        bench_fill(in_place ? out + (size_t)b.rank * count : b.sendbuf.data(), count, b.rank);
    }
}

long long count_wrong(const bench &b, size_t count)
{
    const float *out = b.recvbuf.data();
    long long wrong = 0;

    if (b.args.coll == BENCH_ALLREDUCE) {
        for (size_t i = 0; i < count; i++) {
            double want = 0;

            for (int r = 0; r < b.nranks; r++)
                want += bench_value(r, i);
            wrong += out[i] != (float)want;
        }
    } else {
        for (int r = 0; r < b.nranks; r++)
            for (size_t i = 0; i < count; i++)
                wrong += out[(size_t)r * count + i] != bench_value(r, i);
    }
    return wrong;
}

void run_case(bench &b, int algo, bool sync, size_t count, size_t bytes, bool in_place,
              bench_result *res)
{
    int n = b.args.sw.iters;
    double t0, t, prev, stats[4];
    bench_op op(b, algo, sync, count, in_place);

    prepare(b, count, in_place);
    for (int w = 0; w < b.args.sw.warmup; w++)
        op.run();
    barrier(b);
    t0 = prev = now_s();
    for (int it = 0; it < n; it++) {
        op.run();
        t = now_s();
        b.times[it] = t - prev;
        prev = t;
    }
    /* this rank's mean, min, p50, p99; then the slowest rank's of each */
    stats[0] = (now_s() - t0) / n;
    qsort(b.times.data(), (size_t)n, sizeof(double), bench_cmp_double);
    stats[1] = b.times[0];
    stats[2] = bench_percentile(b.times.data(), n, 0.50);
    stats[3] = bench_percentile(b.times.data(), n, 0.99);
    allmax(b, stats, 4);
    res->mean_s = stats[0];
    res->min_s = stats[1];
    res->p50_s = stats[2];
    res->p99_s = stats[3];
    res->algbw = (double)bytes / 1e9 / res->mean_s;
    res->busbw = res->algbw * (b.args.coll == BENCH_ALLREDUCE ? 2.0 * (b.nranks - 1) / b.nranks
                                                               : (double)(b.nranks - 1) / b.nranks);
    res->wrong = -1;
    if (b.args.sw.check) {
        double wrong;
        /* AllgatherRing's peers write into this rank's output as soon as
         * they run it: every rank prepares its data before any runs. */
        barrier(b);
        prepare(b, count, in_place);
        barrier(b);
        op.run();
        wrong = (double)count_wrong(b, count);
        allsum(b, &wrong); /* all ranks' wrong elements, as the flx-*-perf tools count */
        res->wrong = (long long)wrong;
    }
}

void header(const bench &b)
{
    const bench_args &a = b.args;
    char step[64];

    bench_format_step(step, sizeof(step), &a.sw);
    printf("# Collective test starting: gloo-coll-bench %s\n",
           a.coll == BENCH_ALLREDUCE ? "allreduce" : "allgather");
    printf("# nRanks %d net gloo-tcp minBytes %zu maxBytes %zu step: %s warmup iters: %d "
           "iters: %d validation: %d blocking: 1\n",
           b.nranks, a.sw.min_bytes, a.sw.max_bytes, step, a.sw.warmup, a.sw.iters, a.sw.check);
    printf("#\n# Gloo (libgloo), algorithm %s, %s pairs: the row of the fastest at each size "
           "(last column)\n#\n",
           a.algo == ALGO_BEST ? "best" : algo_names[a.algo],
           a.modes == 3 ? "async and sync" : a.modes == 2 ? "sync" : "async");
    if (b.sync_max_bytes != SIZE_MAX)
        printf("# sync mode up to %zu B (2 x min(net.core.wmem_max, 32 MiB): above it both "
               "partners of a step can block in send)\n#\n",
               b.sync_max_bytes);
    bench_print_columns(a.coll == BENCH_ALLREDUCE ? "2(n-1)/n" : "(n-1)/n, size = gathered total",
                        a.sw.iters, "algorithm");
}

/* Is algorithm k (+ ALGO_COUNT: sync) the last async one still run?  It is
 * never dropped: above the sync-mode limit only async ones remain. */
bool last_async(const bench &b, int k)
{
    int left = 0;

    if (k >= ALGO_COUNT || !(b.args.modes & 1))
        return false;
    for (int j = 0; j < ALGO_COUNT; j++)
        left += algo_fits(b.args, j, false) && !b.dropped[j];
    return left <= 1;
}

void run_sweep(bench &b)
{
    const bench_args &a = b.args;
    char row[512], s1[32], s2[32], s3[32];

    for (size_t size = a.sw.min_bytes, next;; size = next) {
        size_t count = a.coll == BENCH_ALLREDUCE ? size / sizeof(float)
                                                 : size / sizeof(float) / (size_t)b.nranks;
        size_t bytes = count * sizeof(float) * (a.coll == BENCH_ALLREDUCE ? 1 : (size_t)b.nranks);

        if (count != 0) {
            bench_result best[2] = {}, res[2];
            int best_algo = -1;
            bool best_sync = false;

            double mean[2 * ALGO_COUNT] = {};

            for (int k = 0; k < 2 * ALGO_COUNT; k++) {
                int algo = k % ALGO_COUNT;
                bool sync = k >= ALGO_COUNT;
                if ((a.algo != ALGO_BEST && algo != a.algo) || !(a.modes & (sync ? 2 : 1)) ||
                    !algo_fits(a, algo, sync) || b.dropped[k] || (sync && bytes > b.sync_max_bytes))
                    continue;
                for (int ip = 0; ip < 2; ip++)
                    run_case(b, algo, sync, count, bytes, ip == 1, &res[ip]);
                mean[k] = res[0].mean_s;
                if (best_algo < 0 || res[0].mean_s < best[0].mean_s) {
                    best[0] = res[0];
                    best[1] = res[1];
                    best_algo = algo;
                    best_sync = sync;
                }
                /* every algorithm's check counts, not only the fastest one's */
                b.wrong_rows += (res[0].wrong > 0) + (res[1].wrong > 0);
            }
            if (best_algo < 0) {
                if (b.rank == 0)
                    printf("# %zu B: no algorithm to run (sync mode only up to %zu B%s)\n", bytes,
                           b.sync_max_bytes, a.algo == ALGO_BEST ? "; the others dropped" : "");
                next = bench_next_size(&a.sw, size);
                if (next <= size)
                    break;
                continue;
            }
            /* From 1 MiB on, one more than 8x slower than the fastest at two
             * sizes in a row is not run at the larger ones (the sweep would
             * take hours: Gloo's unbound-buffer path stalls tens of ms a call
             * on some machines).  The means are the ranks' maximum, so every
             * rank drops the same. */
            for (int k = 0; k < 2 * ALGO_COUNT && a.algo == ALGO_BEST; k++) {
                b.strikes[k] = bytes >= ((size_t)1 << 20) && mean[k] > 8 * best[0].mean_s
                                   ? b.strikes[k] + 1 : 0;
                if (b.strikes[k] == 2 && !last_async(b, k)) {
                    b.dropped[k] = true;
                    if (b.rank == 0)
                        printf("# %s%s dropped: %.1f us at %zu B, %.0fx the fastest (twice)\n",
                               algo_names[k % ALGO_COUNT], k >= ALGO_COUNT ? "+sync" : "",
                               mean[k] * 1e6, bytes, mean[k] / best[0].mean_s);
                }
            }
            for (int ip = 0; ip < 2; ip++) {
                b.bw_sum += best[ip].busbw;
                b.bw_count++;
            }
            if (b.rank == 0) {
                snprintf(row, sizeof(row), "%12zu  %12zu  %8s  %6s  %6d", bytes, count, "float",
                         a.coll == BENCH_ALLREDUCE ? "sum" : "none", -1);
                for (const auto &r : best)
                    bench_append_cols(row, sizeof(row), r.mean_s, r.algbw, r.busbw, r.wrong);
                bench_format_us(s1, sizeof(s1), best[0].min_s * 1e6);
                bench_format_us(s2, sizeof(s2), best[0].p50_s * 1e6);
                bench_format_us(s3, sizeof(s3), best[0].p99_s * 1e6);
                printf("%s  %7s  %7s  %7s  %s%s\n", row, s1, s2, s3, algo_names[best_algo],
                       best_sync ? "+sync" : "");
            }
        }
        next = bench_next_size(&a.sw, size);
        if (next <= size)
            break;
    }
}

std::shared_ptr<gloo::transport::Device> make_device(const bench_args &a)
{
    gloo::transport::tcp::attr attr;
    attr.iface = a.iface;
    attr.ai_family = AF_INET; /* IPv4, as flexcoll and Open MPI use it here */
    return gloo::transport::tcp::CreateDevice(attr);
}

} // namespace

int main(int argc, char **argv)
{
    bench b;
    int rc;

    setvbuf(stdout, nullptr, _IOLBF, 0);
    if (!launcher_rank(&b.rank, &b.nranks)) {
        fprintf(stderr, "gloo-coll-bench: no rank: set FLX_RANK/FLX_SIZE or start it with "
                        "flxrun, mpirun or srun\n");
        return 2;
    }
    rc = parse_args(&b.args, b.rank != 0, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    try {
        auto dev = make_device(b.args);
        gloo::rendezvous::FileStore store(b.args.store);
        for (int sync = 0; sync < 2; sync++) {
            /* the bench's barrier and maximum run on the async context */
            if (sync && !(b.args.modes & 2))
                break;
            gloo::rendezvous::PrefixStore prefixed(sync ? "sync" : "async", store);
            auto ctx = std::make_shared<gloo::rendezvous::Context>(b.rank, b.nranks);
            ctx->setTimeout(std::chrono::seconds(120));
            ctx->connectFullMesh(prefixed, dev);
            if (sync)
                for (int r = 0; r < b.nranks; r++)
                    if (r != b.rank)
                        ctx->getPair(r)->setSync(true, true);
            (sync ? b.ctx_sync : b.ctx) = ctx;
        }
        bench_own_ops(b);
        if (b.args.modes & 2)
            b.sync_max_bytes = sync_limit(b);
        b.sendbuf.assign(b.args.sw.max_bytes / sizeof(float) + 1, 0.0f);
        b.recvbuf.assign(b.args.sw.max_bytes / sizeof(float) + (size_t)b.nranks, 0.0f);
        b.times.assign((size_t)b.args.sw.iters, 0.0);
        if (b.rank == 0)
            header(b);
        usleep(20000); /* the launcher relays the header before anything is timed, as in
                          the flx-*-perf tools */
        run_sweep(b);
        /* Leave only when every rank is through: an async pair's last send
         * may still sit in Gloo's queue when the call returns, and would be
         * lost with the process (its peer then sees the connection close). */
        gloo::rendezvous::PrefixStore done("done", store);
        std::vector<std::string> ranks;
        for (int r = 0; r < b.nranks; r++)
            ranks.push_back(std::to_string(r));
        done.set(ranks[(size_t)b.rank], std::vector<char>(1, '1'));
        done.wait(ranks, std::chrono::seconds(120));
    } catch (const std::exception &e) {
        fprintf(stderr, "gloo-coll-bench: rank %d: %s\n", b.rank, e.what());
        return 1;
    }
    if (b.rank == 0) {
        printf("# Out of bounds values : %ld %s\n", b.wrong_rows, b.wrong_rows ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n", b.bw_count ? b.bw_sum / (double)b.bw_count : 0.0);
        printf("#\n# Collective test concluded: gloo-coll-bench\n");
    }
    return b.wrong_rows ? 1 : 0;
}
