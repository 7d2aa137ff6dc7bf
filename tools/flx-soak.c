/* flx-soak.c -- soak test: thousands of random collectives, every result
 * checked exactly, memory watched.
 *
 *   flxrun -n 4 ./flx-soak --iters 20000 --max-bytes 4M [--seed S] [--csv FILE]
 *
 * Every rank draws the same sequence from one seed (rank 0's, broadcast
 * first): kind (allreduce, allgather, broadcast, reduce-scatter, barrier,
 * iallreduce), byte size log-uniform in [0, --max-bytes], dtype, op,
 * algorithm (auto, ring, tree, rd, hd), in place or not, buffer misalignment of
 * 0-3 elements, broadcast root.  Inputs are small integers, a function of
 * (seed, collective, rank, index), chosen per op so that every partial
 * result is exact in every dtype (bf16 included, in any order of
 * combination); each rank recomputes the expected result from everyone's
 * inputs and compares every element exactly.
 *
 * Every --report collectives (default 1000) rank 0 prints the count, the
 * wrong results and the largest RSS over the ranks (/proc/self/statm); at
 * the end one summary line.  Exit status: 0 when every result was right and
 * no rank's RSS grew by more than --rss-limit MB after the warm-up; 1
 * otherwise (or on a library error); 2 for a bad argument. */
#include "flexcoll.h"
#include "common/config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SOAK_NAME "flx-soak"

enum { SOAK_ALLREDUCE, SOAK_ALLGATHER, SOAK_BCAST, SOAK_REDUCE_SCATTER, SOAK_BARRIER,
       SOAK_IALLREDUCE, SOAK_KIND_COUNT };

static const char *const soak_kind_names[] = {"allreduce", "allgather", "broadcast",
                                              "reduce_scatter", "barrier", "iallreduce"};
static const char *const soak_dtype_names[] = {"float32", "float64", "float16", "bfloat16",
                                               "int32", "int64"};
static const char *const soak_op_names[] = {"sum", "prod", "min", "max", "avg"};
static const char *const soak_algo_names[] = {"auto", "ring", "tree", "rd", "hd"};

typedef struct {
    long iters;            /* --iters, 0 with --seconds: until the time is up */
    double seconds;        /* --seconds, 0 = no limit                        */
    size_t max_bytes;      /* --max-bytes, per rank's contribution           */
    uint64_t seed;         /* --seed                                         */
    int have_seed;
    const char *csv_path;  /* --csv                                          */
    long report;           /* --report                                       */
    long warmup;           /* --warmup, -1 = default                         */
    double rss_limit_mb;   /* --rss-limit                                    */
    int verbose;           /* -v: one line per collective                    */
} soak_args_t;

/* One collective of the sequence. */
typedef struct {
    long index;
    int kind;
    flx_dtype_t dtype;
    flx_op_t op;
    flx_algo_t algo;
    int inplace;
    int root;
    size_t count;          /* allreduce/broadcast: count; allgather: per rank;
                              reduce-scatter: recvcount                      */
    size_t skew;           /* buffer misalignment, elements                  */
    uint64_t key;          /* input values derive from (key, rank, index)    */
} soak_coll_t;

typedef struct {
    soak_args_t args;
    flx_comm_h comm;
    int rank, size;
    unsigned char *send, *recv;
    size_t buf_bytes;
    uint64_t rng;
    long done;
    long errors;           /* collectives with a wrong element, this rank   */
    long per_kind[SOAK_KIND_COUNT];
    double t0;
    FILE *csv;
} soak_t;

/* ---- random numbers and input values -------------------------------------- */

static uint64_t soak_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t soak_next(soak_t *s)
{
    s->rng += 0x9e3779b97f4a7c15ull;
    return soak_mix(s->rng);
}

static double soak_uniform(soak_t *s) { return (double)(soak_next(s) >> 11) * 0x1.0p-53; }

static size_t dtype_bytes(flx_dtype_t d)
{
    switch (d) {
    case FLX_FLOAT64: case FLX_INT64: return 8;
    case FLX_FLOAT16: case FLX_BFLOAT16: return 2;
    default: return 4;
    }
}

/* Largest magnitude every partial result of the dtype holds exactly. */
static int64_t dtype_exact_limit(flx_dtype_t d)
{
    switch (d) {
    case FLX_BFLOAT16: return 256;
    case FLX_FLOAT16: return 2048;
    default: return (int64_t)1 << 22;
    }
}

/* Values of op, chosen so that every partial result over any subset of the
 * ranks, combined in any order, is exact in the dtype, for any number of
 * ranks up to FLX_SIZE's 2048:
 *  - sum, min, max: uniform in [-A, A] with N·A within the exact range; where
 *    even A = 1 would leave it (bf16 past 128 ranks, fp16 past 1024), ±1 on
 *    one rank in every `stride` (which ones, per element) and 0 on the rest;
 *  - avg: a on every rank, plus k on one rank and -k on another (both picked
 *    per element): the ranks sum to N·a, so the average a is exact, and any
 *    subset of them to at most N·|a| + k.  (Before, a + 2r - (N-1): partial
 *    sums of up to N²/4, past bf16's exact integers from 33 ranks on, and
 *    flx-soak reported 497 wrong results in 2000 collectives on 64 ranks.)
 *  - prod: ±1 or ±2 (±1 only past 8 ranks). */
static int64_t soak_value(const soak_t *s, const soak_coll_t *c, int rank, size_t i)
{
    int64_t lim = dtype_exact_limit(c->dtype) / 2, n = s->size;
    uint64_t h = soak_mix(c->key ^ ((uint64_t)i * 0xd1b54a32d192ed03ull));
    uint64_t hr = soak_mix(h ^ ((uint64_t)rank + 1) * 0x8cb92ba72f3d8dd7ull);

    if (c->kind == SOAK_BCAST || c->kind == SOAK_ALLGATHER)
        return (int64_t)(hr % 201) - 100;
    switch (c->op) {
    case FLX_PROD: {
        static const int64_t v2[] = {1, -1, 2, -2};
        return v2[hr % (n <= 8 ? 4 : 2)];
    }
    case FLX_AVG: {
        int64_t A = (lim - 2) / n, a, k = 1 + (int64_t)((h >> 7) & 1), up, down;

        a = (int64_t)(h % (uint64_t)(2 * A + 1)) - A;
        if (n == 1)
            return a;
        up = (int64_t)((h >> 11) % (uint64_t)n);
        down = (up + 1 + (int64_t)((h >> 29) % (uint64_t)(n - 1))) % n;
        return a + (rank == up ? k : rank == down ? -k : 0);
    }
    default: {
        int64_t A = lim / n, stride = (n + lim - 1) / lim;

        if (A >= 1)
            return (int64_t)(hr % (uint64_t)(2 * A + 1)) - A;
        if ((rank + (int64_t)(h % (uint64_t)stride)) % stride != 0)
            return 0;
        return (int64_t)(hr % 3) - 1;
    }
    }
}

/* ---- element encoding (exact for the small integers used here) ------------- */

static uint16_t soak_f32_to_half(float f)
{
    uint32_t u;
    uint16_t sign;
    int e;

    memcpy(&u, &f, 4);
    sign = (uint16_t)((u >> 16) & 0x8000);
    if ((u & 0x7fffffff) == 0)
        return sign;
    e = (int)((u >> 23) & 0xff) - 127 + 15;   /* normal halves only: |f| >= 2^-14 */
    return (uint16_t)(sign | (uint16_t)(e << 10) | (uint16_t)((u >> 13) & 0x3ff));
}

static double soak_half_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    double m = h & 0x3ff;
    double v;

    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(m + 1024, e - 25);
    return h & 0x8000 ? -v : v;
}

static void soak_put(void *buf, size_t i, flx_dtype_t d, int64_t v)
{
    switch (d) {
    case FLX_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case FLX_FLOAT64: ((double *)buf)[i] = (double)v; break;
    case FLX_FLOAT16: ((uint16_t *)buf)[i] = soak_f32_to_half((float)v); break;
    case FLX_BFLOAT16: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
        break;
    }
    case FLX_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case FLX_INT64: ((int64_t *)buf)[i] = v; break;
    default: break;
    }
}

/* The element as a double (exact: every expected value is a small integer). */
static double soak_get(const void *buf, size_t i, flx_dtype_t d)
{
    switch (d) {
    case FLX_FLOAT32: return ((const float *)buf)[i];
    case FLX_FLOAT64: return ((const double *)buf)[i];
    case FLX_FLOAT16: return soak_half_to_double(((const uint16_t *)buf)[i]);
    case FLX_BFLOAT16: {
        uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case FLX_INT32: return ((const int32_t *)buf)[i];
    case FLX_INT64: return (double)((const int64_t *)buf)[i];
    default: return NAN;
    }
}

/* op over every rank's value at index i */
static double soak_expect_reduce(const soak_t *s, const soak_coll_t *c, size_t i)
{
    int64_t acc = soak_value(s, c, 0, i);

    for (int r = 1; r < s->size; r++) {
        int64_t v = soak_value(s, c, r, i);
        switch (c->op) {
        case FLX_SUM: case FLX_AVG: acc += v; break;
        case FLX_PROD: acc *= v; break;
        case FLX_MIN: acc = v < acc ? v : acc; break;
        case FLX_MAX: acc = v > acc ? v : acc; break;
        default: break;
        }
    }
    if (c->op == FLX_AVG)
        acc /= s->size;   /* exact: the sum is size * a */
    return (double)acc;
}

/* ---- one collective ------------------------------------------------------------ */

static void soak_draw(soak_t *s, soak_coll_t *c)
{
    size_t elem, bytes;
    double u;

    memset(c, 0, sizeof(*c));
    c->index = s->done;
    c->kind = (int)(soak_next(s) % SOAK_KIND_COUNT);
    c->dtype = (flx_dtype_t)(soak_next(s) % FLX_DTYPE_COUNT);
    c->op = (flx_op_t)(soak_next(s) % FLX_OP_COUNT);
    c->algo = (flx_algo_t)(soak_next(s) % FLX_ALGO_COUNT);
    c->inplace = (int)(soak_next(s) & 1);
    c->root = (int)(soak_next(s) % (uint64_t)s->size);
    c->skew = (size_t)(soak_next(s) % 4);
    c->key = soak_next(s);
    u = soak_uniform(s);
    bytes = (size_t)(exp(u * log((double)s->args.max_bytes + 1.0)) - 1.0);
    if (bytes > s->args.max_bytes)
        bytes = s->args.max_bytes;
    elem = dtype_bytes(c->dtype);
    c->count = bytes / elem;
    if (c->kind == SOAK_ALLGATHER || c->kind == SOAK_REDUCE_SCATTER)
        c->count /= (size_t)s->size;   /* max_bytes in total */
    if (c->kind == SOAK_ALLGATHER && c->algo == FLX_ALGO_TREE)
        c->algo = FLX_ALGO_AUTO;       /* allgather has ring and Bruck */
}

static void soak_describe(const soak_coll_t *c, char *buf, size_t len)
{
    snprintf(buf, len, "#%ld %s count %zu %s %s algo %s %s root %d skew %zu", c->index,
             soak_kind_names[c->kind], c->count, soak_dtype_names[c->dtype],
             soak_op_names[c->op], soak_algo_names[c->algo],
             c->inplace ? "in-place" : "out-of-place", c->root, c->skew);
}

/* Run c and check the result.  Returns the library status; *wrong_p the
 * number of wrong elements. */
static flx_status_t soak_run(soak_t *s, const soak_coll_t *c, size_t *wrong_p)
{
    const size_t elem = dtype_bytes(c->dtype);
    const size_t n = c->count;
    unsigned char *recv = s->recv + c->skew * elem;
    unsigned char *send = s->send + c->skew * elem;
    flx_request_h req;
    flx_status_t st = FLX_OK;
    size_t wrong = 0, total = 0;

    switch (c->kind) {
    case SOAK_ALLREDUCE:
    case SOAK_IALLREDUCE: {
        void *in = c->inplace ? recv : send;
        if (!c->inplace) /* a call that writes nothing must not pass on old results */
            memset(recv, 0x5a, n * elem);
        for (size_t i = 0; i < n; i++)
            soak_put(in, i, c->dtype, soak_value(s, c, s->rank, i));
        if (c->kind == SOAK_ALLREDUCE) {
            st = flx_allreduce(s->comm, in, recv, n, c->dtype, c->op, c->algo);
        } else {
            st = flx_iallreduce(s->comm, in, recv, n, c->dtype, c->op, c->algo, &req);
            if (st == FLX_OK)
                st = flx_wait(req);
        }
        total = n;
        for (size_t i = 0; st == FLX_OK && i < n; i++)
            wrong += soak_get(recv, i, c->dtype) != soak_expect_reduce(s, c, i);
        break;
    }
    case SOAK_ALLGATHER: {
        unsigned char *mine = c->inplace ? recv + (size_t)s->rank * n * elem : send;
        memset(recv, 0x5a, (size_t)s->size * n * elem);
        for (size_t i = 0; i < n; i++)
            soak_put(mine, i, c->dtype, soak_value(s, c, s->rank, i));
        st = flx_allgather(s->comm, mine, recv, n, c->dtype, c->algo);
        total = (size_t)s->size * n;
        for (int r = 0; st == FLX_OK && r < s->size; r++)
            for (size_t i = 0; i < n; i++)
                wrong += soak_get(recv, (size_t)r * n + i, c->dtype) !=
                         (double)soak_value(s, c, r, i);
        break;
    }
    case SOAK_BCAST:
        if (s->rank == c->root)
            for (size_t i = 0; i < n; i++)
                soak_put(recv, i, c->dtype, soak_value(s, c, c->root, i));
        else
            memset(recv, 0x5a, n * elem);
        st = flx_broadcast(s->comm, recv, n, c->dtype, c->root);
        total = n;
        for (size_t i = 0; st == FLX_OK && i < n; i++)
            wrong += soak_get(recv, i, c->dtype) != (double)soak_value(s, c, c->root, i);
        break;
    case SOAK_REDUCE_SCATTER: {
        void *in = c->inplace ? recv : send;
        const size_t all = (size_t)s->size * n;
        if (!c->inplace)
            memset(recv, 0x5a, n * elem);
        for (size_t i = 0; i < all; i++)
            soak_put(in, i, c->dtype, soak_value(s, c, s->rank, i));
        st = flx_reduce_scatter(s->comm, in, recv, n, c->dtype, c->op);
        total = n;
        for (size_t i = 0; st == FLX_OK && i < n; i++)
            wrong += soak_get(recv, i, c->dtype) !=
                     soak_expect_reduce(s, c, (size_t)s->rank * n + i);
        break;
    }
    case SOAK_BARRIER:
        st = flx_barrier(s->comm);
        break;
    }
    if (wrong && s->errors < 10) {
        char what[200];
        soak_describe(c, what, sizeof(what));
        fprintf(stderr, SOAK_NAME ": rank %d: WRONG %s: %zu of %zu elements\n", s->rank, what,
                wrong, total);
    }
    *wrong_p = wrong;
    return st;
}

/* ---- RSS and reports ------------------------------------------------------------ */

static double soak_rss_mb(void)
{
    unsigned long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f == NULL)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

static double soak_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Everyone's (errors, RSS, RSS growth since baseline); totals on every rank. */
typedef struct {
    long errors;
    double rss_max_mb;
    double growth_max_mb;
} soak_tally_t;

static flx_status_t soak_tally(soak_t *s, double baseline_mb, soak_tally_t *t_p)
{
    double mine[3], *all = calloc((size_t)s->size * 3, sizeof(double));
    flx_status_t st;

    if (all == NULL)
        return FLX_ERR_NO_MEMORY;
    mine[0] = (double)s->errors;
    mine[1] = soak_rss_mb();
    mine[2] = baseline_mb > 0 ? mine[1] - baseline_mb : 0;
    st = flx_allgather(s->comm, mine, all, 3, FLX_FLOAT64, FLX_ALGO_AUTO);
    if (st == FLX_OK) {
        memset(t_p, 0, sizeof(*t_p));
        t_p->growth_max_mb = -1e30;
        for (int r = 0; r < s->size; r++) {
            t_p->errors += (long)all[3 * r];
            if (all[3 * r + 1] > t_p->rss_max_mb)
                t_p->rss_max_mb = all[3 * r + 1];
            if (all[3 * r + 2] > t_p->growth_max_mb)
                t_p->growth_max_mb = all[3 * r + 2];
        }
    }
    free(all);
    return st;
}

static void soak_print_report(soak_t *s, const soak_tally_t *t)
{
    double el = soak_now() - s->t0;

    if (s->rank != 0)
        return;
    printf(SOAK_NAME ": %8ld collectives  %ld errors  RSS %.1f MB (max over ranks)  %.1f s\n",
           s->done, t->errors, t->rss_max_mb, el);
    fflush(stdout);
    if (s->csv) {
        fprintf(s->csv, "%ld,%ld,%.2f,%.3f\n", s->done, t->errors, t->rss_max_mb, el);
        fflush(s->csv);
    }
}

/* ---- arguments --------------------------------------------------------------------- */

static void soak_usage(FILE *out)
{
    fprintf(out,
            "usage: flxrun -n N " SOAK_NAME " [options]\n"
            "  --iters N         collectives to run (default 10000; 0 with --seconds: no limit)\n"
            "  --seconds S       stop after S seconds (whichever of --iters/--seconds comes first)\n"
            "  --max-bytes SIZE  largest collective, bytes per rank (default 4M; 8k, 1M ...)\n"
            "  --seed N          sequence seed (default: rank 0's clock, printed)\n"
            "  --csv FILE        rank 0 writes collectives,errors,rss_mb,seconds per report\n"
            "  --report N        report every N collectives (default 1000)\n"
            "  --warmup N        RSS baseline after N collectives (default min(1000, iters/5))\n"
            "  --rss-limit MB    largest RSS growth after the warm-up (default 32)\n"
            "  -v                one line per collective (rank 0)\n"
            "Exit 0: every result exact and RSS within the limit; 1: wrong result, RSS growth\n"
            "or library error; 2: bad argument.\n");
}

static int soak_args_parse(int argc, char **argv, soak_args_t *a)
{
    static const struct option longopts[] = {
        {"iters", required_argument, NULL, 'n'},   {"seconds", required_argument, NULL, 't'},
        {"max-bytes", required_argument, NULL, 'b'}, {"seed", required_argument, NULL, 's'},
        {"csv", required_argument, NULL, 'c'},     {"report", required_argument, NULL, 'r'},
        {"warmup", required_argument, NULL, 'w'},  {"rss-limit", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int c, have_iters = 0;
    long l;
    double d;

    memset(a, 0, sizeof(*a));
    a->iters = 10000;
    a->max_bytes = (size_t)4 << 20;
    a->report = 1000;
    a->warmup = -1;
    a->rss_limit_mb = 32;
    opterr = 0; /* one line of our own for a bad option */
    while ((c = getopt_long(argc, argv, ":vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (flx_parse_int(optarg, 0, 1L << 40, &l) != 0)
                goto bad;
            a->iters = l;
            have_iters = 1;
            break;
        case 't':
            if (flx_parse_time(optarg, &d) != 0 || d <= 0)
                goto bad;
            a->seconds = d;
            break;
        case 'b':
            if (flx_parse_size(optarg, &a->max_bytes) != 0 || a->max_bytes > ((size_t)1 << 30))
                goto bad;
            break;
        case 's': { /* digits only: no sign, blank or wrap */
            char *end;
            errno = 0;
            a->seed = strtoull(optarg, &end, 0);
            if (*optarg < '0' || *optarg > '9' || *end != '\0' || errno != 0)
                goto bad;
            a->have_seed = 1;
            break;
        }
        case 'c': a->csv_path = optarg; break;
        case 'r':
            if (flx_parse_int(optarg, 1, 1L << 40, &l) != 0)
                goto bad;
            a->report = l;
            break;
        case 'w':
            if (flx_parse_int(optarg, 0, 1L << 40, &l) != 0)
                goto bad;
            a->warmup = l;
            break;
        case 'l': {
            char *end;
            d = strtod(optarg, &end);
            if ((*optarg < '0' || *optarg > '9') || *end != '\0' || !(d >= 0) || !isfinite(d))
                goto bad;
            a->rss_limit_mb = d;
            break;
        }
        case 'v': a->verbose = 1; break;
        case 'h': soak_usage(stdout); return 1;
        case ':':
            fprintf(stderr, SOAK_NAME ": option '%s' needs a value (see --help)\n",
                    argv[optind - 1]);
            return -1;
        default:
            if (optopt)
                fprintf(stderr, SOAK_NAME ": unknown option '-%c' (see --help)\n", optopt);
            else
                fprintf(stderr, SOAK_NAME ": unknown option '%s' (see --help)\n",
                        argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, SOAK_NAME ": unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (a->seconds > 0 && !have_iters)
        a->iters = 0;
    if (a->iters == 0 && a->seconds <= 0) {
        fprintf(stderr, SOAK_NAME ": --iters 0 needs --seconds\n");
        return -1;
    }
    if (a->warmup < 0)
        a->warmup = a->iters == 0 ? 1000 : (a->iters / 5 < 1000 ? a->iters / 5 : 1000);
    return 0;
bad:
    fprintf(stderr, SOAK_NAME ": bad value '%s' for --%s\n", optarg,
            c == 'n' ? "iters" : c == 't' ? "seconds" : c == 'b' ? "max-bytes" :
            c == 's' ? "seed" : c == 'r' ? "report" : c == 'w' ? "warmup" : "rss-limit");
    return -1;
}

/* ---- main --------------------------------------------------------------------------- */

static int soak_main_loop(soak_t *s)
{
    double baseline = 0, rss_start, rss_warm = 0;
    soak_tally_t t;
    flx_status_t st;
    int stop = 0;
    char what[200];

    st = soak_tally(s, 0, &t);
    if (st != FLX_OK)
        goto err_lib;
    rss_start = t.rss_max_mb;
    if (s->args.warmup == 0) { /* no warm-up: growth counts from the start */
        baseline = soak_rss_mb();
        rss_warm = rss_start;
    }
    s->t0 = soak_now();
    while (!stop) {
        soak_coll_t c;
        size_t wrong;

        if (s->args.iters > 0 && s->done >= s->args.iters)
            break;
        soak_draw(s, &c);
        if (s->args.verbose && s->rank == 0) {
            soak_describe(&c, what, sizeof(what));
            printf(SOAK_NAME ": %s\n", what);
        }
        st = soak_run(s, &c, &wrong);
        if (st != FLX_OK) {
            soak_describe(&c, what, sizeof(what));
            fprintf(stderr, SOAK_NAME ": rank %d: %s failed: %s\n", s->rank, what,
                    flx_status_string(st));
            return 1;
        }
        s->errors += wrong != 0;
        s->per_kind[c.kind]++;
        s->done++;
        if (s->done == s->args.warmup) {
            baseline = soak_rss_mb();
            if ((st = soak_tally(s, 0, &t)) != FLX_OK)
                goto err_lib;
            rss_warm = t.rss_max_mb;
        }
        if (s->done % s->args.report == 0) {
            if ((st = soak_tally(s, baseline, &t)) != FLX_OK)
                goto err_lib;
            soak_print_report(s, &t);
        }
        if (s->args.seconds > 0 && s->done % 16 == 0) {
            /* rank 0's clock decides, so every rank stops after the same collective */
            int32_t flag = s->rank == 0 && soak_now() - s->t0 >= s->args.seconds;
            if ((st = flx_broadcast(s->comm, &flag, 1, FLX_INT32, 0)) != FLX_OK)
                goto err_lib;
            stop = flag != 0;
        }
    }
    /* growth is measured only past the warm-up: a run that ended inside it says so */
    const int checked = s->done >= s->args.warmup;
    if ((st = soak_tally(s, checked ? baseline : 0, &t)) != FLX_OK)
        goto err_lib;
    if (s->done % s->args.report != 0)
        soak_print_report(s, &t);
    const int ok = t.errors == 0 && (!checked || t.growth_max_mb <= s->args.rss_limit_mb);
    if (s->rank == 0) {
        char growth[160];
        if (checked)
            snprintf(growth, sizeof(growth), "after %ld warm-up %.1f MB, end %.1f MB, growth "
                     "%.1f MB (limit %.0f)", s->args.warmup, rss_warm, t.rss_max_mb,
                     t.growth_max_mb, s->args.rss_limit_mb);
        else
            snprintf(growth, sizeof(growth), "end %.1f MB, growth not checked (the run ended "
                     "inside the %ld-collective warm-up)", t.rss_max_mb, s->args.warmup);
        printf(SOAK_NAME ": summary: %ld collectives on %d ranks in %.1f s (allreduce %ld, "
               "allgather %ld, broadcast %ld, reduce_scatter %ld, barrier %ld, iallreduce %ld), "
               "%ld errors, RSS start %.1f MB, %s: %s\n",
               s->done, s->size, soak_now() - s->t0, s->per_kind[0], s->per_kind[1],
               s->per_kind[2], s->per_kind[3], s->per_kind[4], s->per_kind[5], t.errors,
               rss_start, growth, ok ? "PASS" : "FAIL");
        fflush(stdout);
    }
    return ok ? 0 : 1;

err_lib:
    fprintf(stderr, SOAK_NAME ": rank %d: collective of the soak's own bookkeeping failed: %s\n",
            s->rank, flx_status_string(st));
    return 1;
}

int main(int argc, char **argv)
{
    soak_t s;
    flx_status_t st;
    uint64_t seed;
    int rc;

    memset(&s, 0, sizeof(s));
    rc = soak_args_parse(argc, argv, &s.args);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    st = flx_comm_create(NULL, &s.comm);
    if (st != FLX_OK) {
        fprintf(stderr, SOAK_NAME ": flx_comm_create: %s\n", flx_status_string(st));
        return 1;
    }
    s.rank = flx_comm_rank(s.comm);
    s.size = flx_comm_size(s.comm);
    seed = s.args.have_seed ? s.args.seed : soak_mix((uint64_t)time(NULL) ^ (uint64_t)getpid());
    if (s.rank == 0 && s.args.csv_path) { /* before the first collective: all stop alike */
        s.csv = fopen(s.args.csv_path, "w");
        if (s.csv == NULL)
            fprintf(stderr, SOAK_NAME ": cannot write %s: %m\n", s.args.csv_path);
        else
            fprintf(s.csv, "collectives,errors,rss_mb,seconds\n");
    }
    {   /* one sequence for everyone, rank 0's seed, and whether its CSV opened */
        int64_t v[2] = {(int64_t)seed, s.rank == 0 && s.args.csv_path && s.csv == NULL};
        st = flx_broadcast(s.comm, v, 2, FLX_INT64, 0);
        if (st != FLX_OK || v[1]) {
            if (st != FLX_OK)
                fprintf(stderr, SOAK_NAME ": seed broadcast: %s\n", flx_status_string(st));
            flx_comm_destroy(s.comm);
            return st != FLX_OK ? 1 : 2;
        }
        seed = (uint64_t)v[0];
    }
    s.rng = seed;
    /* allgather and reduce-scatter use size * count, with up to 3 elements of skew */
    s.buf_bytes = s.args.max_bytes + 64 + (size_t)s.size * 8;
    s.send = malloc(s.buf_bytes);
    s.recv = malloc(s.buf_bytes);
    if (s.send == NULL || s.recv == NULL) {
        fprintf(stderr, SOAK_NAME ": no memory for 2 x %zu bytes\n", s.buf_bytes);
        rc = 1;
        goto out_free;
    }
    if (s.rank == 0) {
        printf(SOAK_NAME ": %d ranks, seed %" PRIu64 ", ", s.size, seed);
        if (s.args.iters > 0)
            printf("%ld collectives", s.args.iters);
        else
            printf("no collective limit");
        if (s.args.seconds > 0)
            printf(" or %.0f s", s.args.seconds);
        printf(", up to %zu bytes each\n", s.args.max_bytes);
        fflush(stdout);
    }
    rc = soak_main_loop(&s);
out_free:
    if (s.csv) { /* a CSV or report that could not be written fails the soak */
        int bad = ferror(s.csv), closed = fclose(s.csv);
        if (bad || closed != 0) {
            fprintf(stderr, SOAK_NAME ": writing %s failed\n", s.args.csv_path);
            rc = rc ? rc : 1;
        }
    }
    free(s.send);
    free(s.recv);
    st = flx_comm_destroy(s.comm);
    if (st != FLX_OK && rc == 0) {
        fprintf(stderr, SOAK_NAME ": flx_comm_destroy: %s\n", flx_status_string(st));
        rc = 1;
    }
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) {
        fprintf(stderr, SOAK_NAME ": writing to standard output failed\n");
        rc = 1;
    }
    return rc;
}
