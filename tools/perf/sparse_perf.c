/* sparse_perf.c -- flx-sparse-perf: gradient synchronisation with and
 * without compression, across kept fractions and sizes, each measurement
 * next to the cost model's prediction.  Run under flxrun / mpirun:
 *
 *     flxrun -n 4 ./flx-sparse-perf -b 4M -e 100M -f 5
 *
 * For every size S (bytes of the float32 gradient, n = S/4 parameters) and
 * every kept fraction c (k = max(1, c n)) one row per method:
 *
 *   dense        flx_allreduce, ring, of the n floats (once per size)
 *   ar-serial    AR-Topk, index broadcast then value allreduce (the paper)
 *   ar-prev      AR-Topk, previous step's indices (next set in the background)
 *   ar-pipe      AR-Topk, indices pipelined into the value ring
 *   allgather    top-k (value, int32 index) pairs, allgatherv, local sum
 *   powersgd     PowerSGD of rank -r (once per size)
 *
 * Every compressed row is a full flx_gsync_step with error feedback and
 * STAR leaders, on a fresh gradient each step (this rank's normal vector,
 * rotated by a prime stride per step): time is the step (selection + communication + decoding),
 * comm its communication part, pred the model's communication time with
 * the communicator's measured alpha and beta (DESIGN.md: bcast, AR_ring,
 * AG; model.c: dense ring, pipelined and previous-index AR-Topk, PowerSGD).
 * ar-prev's prediction assumes the index exchange hides behind computation;
 * with --compute-us 0 (the default) there is none to hide behind.  algbw =
 * S / time (the dense gradient's bytes), busbw = algbw 2(N-1)/N as for an
 * allreduce.  Times are each rank's median over -n steps, the slowest rank
 * shown; "sent" is the mean payload a rank sent per step.  #wrong counts
 * ranks whose result differs from rank 0's (checksums).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tools/perf/perf.h"

#include "compress/cmp.h"
#include "compress/rng.h"
#include "common/config.h"
#include "common/time.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPARSE_PERF_NAME "flx-sparse-perf"
#define SPARSE_PERF_MAX_FRACTIONS 16

enum { SP_DENSE, SP_AR_SERIAL, SP_AR_PREV, SP_AR_PIPE, SP_ALLGATHER, SP_POWERSGD, SP_COUNT };
static const char *const sparse_perf_names[SP_COUNT] = {"dense", "ar-serial", "ar-prev",
                                                        "ar-pipe", "allgather", "powersgd"};

typedef struct {
    size_t min_bytes, max_bytes;
    unsigned factor;
    int iters, warmup;
    double fractions[SPARSE_PERF_MAX_FRACTIONS];
    int nfractions;
    unsigned methods;       /* bit per SP_* */
    flx_select_t select;
    int threads;
    int powersgd_rank;
    double compute_us;      /* busy time between steps (a backward pass) */
    const char *csv_path;
} sparse_perf_args_t;

typedef struct {
    double time_s, comm_s, select_s;
    double sent;            /* bytes a step, this rank */
    long wrong;
} sparse_perf_result_t;

static void sparse_perf_usage(FILE *out)
{
    fprintf(out,
            "usage: " SPARSE_PERF_NAME " [options]\n"
            "  -b, --minbytes SIZE   smallest gradient in bytes (default 4M)\n"
            "  -e, --maxbytes SIZE   largest gradient in bytes (default 100M = 25 M floats)\n"
            "  -f, --stepfactor N    multiply the size by N each step (default 5)\n"
            "  -c, --kept C[,C...]   kept fractions (default 1,0.1,0.033,0.011,0.004,0.001)\n"
            "  -m, --methods LIST    dense,ar-serial,ar-prev,ar-pipe,allgather,powersgd or all\n"
            "  -n, --iters N         timed steps per row (default 10)\n"
            "  -w, --warmup N        untimed steps per row (default 3)\n"
            "  -s, --select MODE     top-k selection: approx (default) or exact\n"
            "  -t, --threads N       selection threads (default 1)\n"
            "  -r, --rank R          PowerSGD rank (default 4)\n"
            "      --compute-us US   busy-wait US microseconds between steps (default 0)\n"
            "      --csv FILE        one CSV row per measurement (rank 0)\n"
            "  -h, --help            this text\n");
}

/* "--methods": names from sparse_perf_names or "all"; 0, or -1 */
static int sparse_perf_parse_methods(sparse_perf_args_t *a, const char *s)
{
    char buf[256], *next;

    if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
        return -1;
    a->methods = 0;
    for (char *tok = buf; tok != NULL; tok = next) { /* an empty field is an error */
        int m;

        next = strchr(tok, ',');
        if (next != NULL)
            *next++ = '\0';
        if (strcmp(tok, "all") == 0) {
            a->methods = (1u << SP_COUNT) - 1;
            continue;
        }
        for (m = 0; m < SP_COUNT && strcmp(tok, sparse_perf_names[m]) != 0; m++)
            ;
        if (m == SP_COUNT)
            return -1;
        a->methods |= 1u << m;
    }
    return a->methods ? 0 : -1;
}

/* 0: run; 1: help printed; -1: bad arguments (message printed unless quiet). */
static int sparse_perf_parse(sparse_perf_args_t *a, int quiet, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"minbytes", required_argument, NULL, 'b'}, {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'}, {"kept", required_argument, NULL, 'c'},
        {"methods", required_argument, NULL, 'm'},  {"iters", required_argument, NULL, 'n'},
        {"warmup", required_argument, NULL, 'w'},   {"select", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 't'},  {"rank", required_argument, NULL, 'r'},
        {"compute-us", required_argument, NULL, 'U'}, {"csv", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    char bad[64];
    int c;
    long v;

    *a = (sparse_perf_args_t){.min_bytes = (size_t)4 << 20, .max_bytes = 100000000,
                              .factor = 5, .iters = 10, .warmup = 3,
                              .methods = (1u << SP_COUNT) - 1, .select = FLX_SELECT_APPROX,
                              .threads = 1, .powersgd_rank = 4};
    a->nfractions = perf_parse_fractions("1,0.1,0.033,0.011,0.004,0.001", a->fractions,
                                         SPARSE_PERF_MAX_FRACTIONS);
    opterr = 0;
    optind = 0; /* glibc: a full restart (a second parse of the same argv) */
#define SPARSE_BAD(...) return perf_arg_error(SPARSE_PERF_NAME, quiet, __VA_ARGS__)
    while ((c = getopt_long(argc, argv, ":b:e:f:c:m:n:w:s:t:r:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            if (flx_parse_size(optarg, &a->min_bytes) != 0)
                SPARSE_BAD("-b %s: not a size in bytes", optarg);
            break;
        case 'e':
            if (flx_parse_size(optarg, &a->max_bytes) != 0)
                SPARSE_BAD("-e %s: not a size in bytes", optarg);
            break;
        case 'f':
            if (flx_parse_int(optarg, 2, 1000, &v) != 0)
                SPARSE_BAD("-f %s: not a whole factor from 2 to 1000", optarg);
            a->factor = (unsigned)v;
            break;
        case 'c':
            a->nfractions = perf_parse_fractions(optarg, a->fractions, SPARSE_PERF_MAX_FRACTIONS);
            if (a->nfractions < 0)
                SPARSE_BAD("-c %s: not a list of at most %d fractions in (0, 1]", optarg,
                           SPARSE_PERF_MAX_FRACTIONS);
            break;
        case 'm':
            if (sparse_perf_parse_methods(a, optarg) != 0)
                SPARSE_BAD("-m %s: not a list of methods named in --help, or all", optarg);
            break;
        case 'n':
            if (flx_parse_int(optarg, 1, 100000, &v) != 0)
                SPARSE_BAD("-n %s: not a whole number from 1 to 100000", optarg);
            a->iters = (int)v;
            break;
        case 'w':
            if (flx_parse_int(optarg, 0, 100000, &v) != 0)
                SPARSE_BAD("-w %s: not a whole number from 0 to 100000", optarg);
            a->warmup = (int)v;
            break;
        case 's':
            if (strcmp(optarg, "exact") == 0) a->select = FLX_SELECT_EXACT;
            else if (strcmp(optarg, "approx") == 0) a->select = FLX_SELECT_APPROX;
            else SPARSE_BAD("-s %s: not exact or approx", optarg);
            break;
        case 't':
            if (flx_parse_int(optarg, 0, 256, &v) != 0)
                SPARSE_BAD("-t %s: not a whole number from 0 to 256", optarg);
            a->threads = (int)v;
            break;
        case 'r':
            if (flx_parse_int(optarg, 1, 4096, &v) != 0)
                SPARSE_BAD("-r %s: not a whole number from 1 to 4096", optarg);
            a->powersgd_rank = (int)v;
            break;
        case 'U': {
            char *end;
            a->compute_us = strtod(optarg, &end); /* at most an hour: a finite spin */
            if (*end != '\0' || !(a->compute_us >= 0 && a->compute_us <= 3.6e9))
                SPARSE_BAD("--compute-us %s: not a number of microseconds from 0 to 3.6e9",
                           optarg);
            break;
        }
        case 'C': a->csv_path = optarg; break;
        case 'h':
            if (!quiet)
                sparse_perf_usage(stdout);
            return 1;
        case ':':
            SPARSE_BAD("option '%s' needs a value", perf_bad_option(argv, 1, bad, sizeof(bad)));
        default: SPARSE_BAD("unknown option '%s'", perf_bad_option(argv, 0, bad, sizeof(bad)));
        }
    }
    if (optind < argc)
        SPARSE_BAD("unexpected argument '%s'", argv[optind]);
    if (a->min_bytes < 4)
        SPARSE_BAD("-b %zu: at least 4 bytes (one float)", a->min_bytes);
    if (a->max_bytes < a->min_bytes)
        SPARSE_BAD("-b %zu is larger than -e %zu", a->min_bytes, a->max_bytes);
    if (a->max_bytes / 4 >= ((size_t)1 << 31))
        SPARSE_BAD("-e %zu: below 8G (2^31 floats; indices are int32)", a->max_bytes);
#undef SPARSE_BAD
    return 0;
}

static uint64_t sparse_perf_checksum(const float *x, size_t n)
{
    uint64_t h = 1469598103934665603ULL;

    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h = (h ^ u) * 1099511628211ULL;
    }
    return h;
}

static void sparse_perf_spin(double us)
{
    double end = flx_time_now() + us * 1e-6;

    while (us > 0 && flx_time_now() < end)
        ;
}

typedef struct {
    sparse_perf_args_t *args;
    flx_comm_h comm;
    int rank, nranks;
    float *grad0;           /* this rank's gradient                  */
    float *work;            /* the buffer a step works in            */
    double *samples[3];     /* per step: time, comm, select          */
    uint64_t *sums;         /* nranks checksums                       */
} sparse_perf_t;

/* Reduce a rank-local value to its max (times) or mean (bytes). */
static flx_status_t sparse_perf_max(flx_comm_h comm, double *v, int count, flx_op_t op)
{
    return flx_allreduce(comm, v, v, (size_t)count, FLX_FLOAT64, op, FLX_ALGO_AUTO);
}

/* One row: create the method's object, warm up, time, check. */
static flx_status_t sparse_perf_run(sparse_perf_t *sp, int method, size_t n, double c,
                                    sparse_perf_result_t *res)
{
    const sparse_perf_args_t *a = sp->args;
    flx_gsync_opts_t o;
    flx_gsync_h h = NULL;
    double sent = 0, vals[3] = {0, 0, 0}, mine = 0;
    flx_status_t st = FLX_OK;

    flx_gsync_opts_default(&o);
    o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_KEPT_FRACTION | FLX_GSYNC_OPT_SELECT |
                   FLX_GSYNC_OPT_THREADS | FLX_GSYNC_OPT_COLLECTIVE | FLX_GSYNC_OPT_INDEX_MODE |
                   FLX_GSYNC_OPT_POWERSGD_RANK;
    o.kept_fraction = c;
    o.select = a->select;
    o.threads = a->threads;
    o.powersgd_rank = a->powersgd_rank;
    o.method = method == SP_DENSE      ? FLX_COMPRESS_NONE
               : method == SP_POWERSGD ? FLX_COMPRESS_POWERSGD
                                       : FLX_COMPRESS_TOPK;
    o.collective = method == SP_ALLGATHER ? FLX_GSYNC_COLL_ALLGATHER : FLX_GSYNC_COLL_ARTOPK;
    o.index_mode = method == SP_AR_SERIAL ? FLX_INDEX_SERIAL
                   : method == SP_AR_PREV ? FLX_INDEX_PREVIOUS
                                          : FLX_INDEX_PIPELINED;
    st = flx_gsync_create(sp->comm, n, &o, &h);
    if (st != FLX_OK)
        return st;
    for (int i = -a->warmup; i < a->iters && st == FLX_OK; i++) {
        flx_gsync_report_t rep;
        double t0;

        /* a new gradient each step: the same values rotated by a prime
         * stride, so coordinates change from step to step (as in training:
         * the same gradient every step would grow the residuals forever) */
        {
            size_t off = ((size_t)(i + a->warmup) * 7919) % n;
            memcpy(sp->work, sp->grad0 + off, (n - off) * sizeof(float));
            memcpy(sp->work + (n - off), sp->grad0, off * sizeof(float));
        }
        sparse_perf_spin(a->compute_us);
        if (method == SP_DENSE) { /* the ring, forced, as in the model */
            st = flx_barrier(sp->comm);
            t0 = flx_time_now();
            if (st == FLX_OK)
                st = flx_allreduce(sp->comm, sp->work, sp->work, n, FLX_FLOAT32, FLX_AVG,
                                   FLX_ALGO_RING);
            rep.comm_s = rep.select_s = 0;
            rep.bytes_sent = (uint64_t)cmp_bytes_allreduce(FLX_ALGO_RING, sp->nranks, sp->rank,
                                                           4.0 * (double)n);
        } else {
            /* ar-prev keeps its exchange running across steps: no barrier */
            if (method != SP_AR_PREV)
                st = flx_barrier(sp->comm);
            t0 = flx_time_now();
            if (st == FLX_OK)
                st = flx_gsync_step(h, sp->work, &rep);
        }
        if (st == FLX_OK && i >= 0) {
            sp->samples[0][i] = flx_time_now() - t0;
            sp->samples[1][i] = method == SP_DENSE ? sp->samples[0][i] : rep.comm_s;
            sp->samples[2][i] = rep.select_s;
            sent += (double)rep.bytes_sent;
        }
    }
    if (st == FLX_OK) {
        vals[0] = perf_median(sp->samples[0], a->iters);
        vals[1] = perf_median(sp->samples[1], a->iters);
        vals[2] = perf_median(sp->samples[2], a->iters);
        st = sparse_perf_max(sp->comm, vals, 3, FLX_MAX);
    }
    if (st == FLX_OK) {
        mine = sent / a->iters;
        st = sparse_perf_max(sp->comm, &mine, 1, FLX_AVG);
    }
    if (st == FLX_OK) { /* every rank's last result the same? */
        uint64_t h0 = sparse_perf_checksum(sp->work, n);
        st = flx_allgather(sp->comm, &h0, sp->sums, 1, FLX_INT64, FLX_ALGO_AUTO);
        res->wrong = 0;
        for (int r = 0; r < sp->nranks && st == FLX_OK; r++)
            res->wrong += sp->sums[r] != sp->sums[0];
    }
    flx_gsync_destroy(h);
    res->time_s = vals[0];
    res->comm_s = vals[1];
    res->select_s = vals[2];
    res->sent = mine;
    return st;
}

static double sparse_perf_predict(int method, int N, size_t n, double c, int r,
                                  const flx_link_model_t *lm)
{
    const double m = (double)n, a = lm->alpha_s, B = lm->beta_bytes_per_s;
    size_t cols, rows;

    switch (method) {
    case SP_DENSE: return cmp_model_dense_ring(N, m, a, B);
    case SP_AR_SERIAL: return cmp_model_ar_ring(N, m, c, a, B);
    case SP_AR_PREV: return cmp_model_ar_prev(N, m, c, a, B);
    case SP_AR_PIPE: return cmp_model_ar_pipe(N, m, c, a, B);
    case SP_ALLGATHER: return cmp_model_ag(N, m, c, a, B);
    default:
        cols = (size_t)ceil(sqrt(m));
        rows = (n + cols - 1) / cols;
        if ((size_t)r > rows)
            r = (int)rows;
        return cmp_model_powersgd(N, (double)rows, (double)cols, r, a, B);
    }
}

int main(int argc, char **argv)
{
    sparse_perf_args_t args;
    sparse_perf_t sp = {.args = &args};
    flx_link_model_t lm;
    FILE *csv = NULL;
    double bw_sum = 0;
    long bw_count = 0, wrong_total = 0;
    const int quiet = perf_env_nonzero_rank();
    int rc = sparse_perf_parse(&args, quiet, argc, argv);
    flx_status_t st;
    size_t nmax;
    cmp_rng_t rng;

    if (rc < 0 && quiet) { /* after rank 0, if still running */
        perf_quiet_wait();
        rc = sparse_perf_parse(&args, 0, argc, argv);
    }
    if (rc != 0)
        return rc > 0 ? PERF_EXIT_OK : PERF_EXIT_USAGE;
    st = flx_comm_create(NULL, &sp.comm);
    if (st != FLX_OK) {
        fprintf(stderr, SPARSE_PERF_NAME ": flx_comm_create: %s\n", flx_status_string(st));
        return PERF_EXIT_FAIL;
    }
    sp.rank = flx_comm_rank(sp.comm);
    sp.nranks = flx_comm_size(sp.comm);
    flx_comm_link_model(sp.comm, &lm);
    {   /* rank 0 writes the CSV: every rank stops if it cannot
         * (before anything else is allocated) */
        int32_t bad = 0, bad_all = 0;
        if (sp.rank == 0 && args.csv_path && (csv = fopen(args.csv_path, "w")) == NULL) {
            fprintf(stderr, SPARSE_PERF_NAME ": cannot open %s for writing: %s\n",
                    args.csv_path, strerror(errno));
            bad = 1;
        }
        st = flx_allreduce(sp.comm, &bad, &bad_all, 1, FLX_INT32, FLX_MAX, FLX_ALGO_AUTO);
        if (st != FLX_OK || bad_all) {
            if (csv)
                fclose(csv);
            flx_comm_destroy(sp.comm);
            return st != FLX_OK ? PERF_EXIT_FAIL : PERF_EXIT_USAGE;
        }
    }
    nmax = args.max_bytes / 4;
    sp.grad0 = malloc(nmax * sizeof(float));
    sp.work = malloc(nmax * sizeof(float));
    sp.sums = malloc((size_t)sp.nranks * sizeof(uint64_t));
    for (int s = 0; s < 3; s++)
        sp.samples[s] = malloc((size_t)args.iters * sizeof(double));
    if (!sp.grad0 || !sp.work || !sp.sums || !sp.samples[0] || !sp.samples[1] || !sp.samples[2]) {
        fprintf(stderr, SPARSE_PERF_NAME ": out of memory for %zu floats\n", nmax);
        return PERF_EXIT_FAIL;
    }
    cmp_rng_seed(&rng, 1234, (uint64_t)sp.rank, 0);
    for (size_t i = 0; i < nmax; i++)
        sp.grad0[i] = cmp_rng_normal(&rng);
    if (sp.rank == 0) {
        if (csv)
            fprintf(csv, "bytes,count,kept,k,method,ranks,time_s,comm_s,select_s,pred_s,"
                         "algbw_GBs,busbw_GBs,sent_bytes,wrong\n");
        printf("# %s: gradient sync, %d ranks over %s, alpha %.1f us, beta %.3f GB/s, "
               "selection %s, %d thread%s, compute %.0f us between steps\n", SPARSE_PERF_NAME,
               sp.nranks, flx_comm_net_name(sp.comm), lm.alpha_s * 1e6,
               lm.beta_bytes_per_s / 1e9, args.select == FLX_SELECT_EXACT ? "exact" : "approx",
               args.threads, args.threads == 1 ? "" : "s", args.compute_us);
        printf("# time: step (select + comm + decode), slowest rank's median; pred: the cost "
               "model's communication time; algbw = size / time; busbw = algbw * 2(n-1)/n\n");
        printf("#%11s %10s %7s %9s %-10s %9s %9s %9s %9s %7s %7s %10s %6s\n", "size", "count",
               "kept", "k", "method", "time(us)", "comm(us)", "sel(us)", "pred(us)", "algbw",
               "busbw", "sent(B)", "#wrong");
    }
    for (size_t bytes = args.min_bytes; bytes <= args.max_bytes && st == FLX_OK;
         bytes *= args.factor) {
        size_t n = bytes / 4;
        for (int f = 0; f < args.nfractions && st == FLX_OK; f++) {
            double c = args.fractions[f];
            size_t k = (size_t)floor(c * (double)n);
            k = k < 1 ? 1 : k;
            for (int m = 0; m < SP_COUNT && st == FLX_OK; m++) {
                sparse_perf_result_t res = {0};
                char t[16], cm[16], se[16], pr[16];
                double algbw, busbw, pred;
                if (!(args.methods & (1u << m)))
                    continue;
                if ((m == SP_DENSE || m == SP_POWERSGD) && f > 0)
                    continue; /* independent of c: once per size */
                st = sparse_perf_run(&sp, m, n, c, &res);
                if (st != FLX_OK)
                    break;
                pred = sparse_perf_predict(m, sp.nranks, n, c, args.powersgd_rank, &lm);
                algbw = (double)n * 4 / res.time_s / 1e9;
                busbw = sp.nranks > 1 ? algbw * 2.0 * (sp.nranks - 1) / sp.nranks : 0;
                wrong_total += res.wrong;
                if (m == SP_AR_PIPE && c < 1) {
                    bw_sum += busbw;
                    bw_count++;
                }
                if (sp.rank != 0)
                    continue;
                perf_format_us(t, sizeof(t), res.time_s * 1e6);
                perf_format_us(cm, sizeof(cm), res.comm_s * 1e6);
                perf_format_us(se, sizeof(se), res.select_s * 1e6);
                perf_format_us(pr, sizeof(pr), pred * 1e6);
                printf(" %11zu %10zu %7.4g %9zu %-10s %9s %9s %9s %9s %7.2f %7.2f %10.0f %6ld\n",
                       bytes, n, (m == SP_DENSE || m == SP_POWERSGD) ? 1.0 : c,
                       m == SP_DENSE ? n : k, sparse_perf_names[m], t, cm, se, pr, algbw, busbw,
                       res.sent, res.wrong);
                fflush(stdout);
                if (csv)
                    fprintf(csv, "%zu,%zu,%g,%zu,%s,%d,%.9f,%.9f,%.9f,%.9f,%.4f,%.4f,%.0f,%ld\n",
                            bytes, n, c, k, sparse_perf_names[m], sp.nranks, res.time_s,
                            res.comm_s, res.select_s, pred, algbw, busbw, res.sent, res.wrong);
            }
        }
        if (bytes > args.max_bytes / args.factor)
            break;
    }
    if (st != FLX_OK && sp.rank == 0)
        fprintf(stderr, SPARSE_PERF_NAME ": %s\n", flx_status_string(st));
    if (sp.rank == 0) {
        printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "ERROR" : "OK");
        printf("# Avg bus bandwidth    : %g (ar-pipe rows, c < 1)\n",
               bw_count ? bw_sum / bw_count : 0.0);
    }
    rc = st != FLX_OK || wrong_total ? PERF_EXIT_FAIL : PERF_EXIT_OK;
    if (perf_csv_close(csv, args.csv_path, SPARSE_PERF_NAME) != 0 && rc == PERF_EXIT_OK)
        rc = PERF_EXIT_FAIL;
    for (int s = 0; s < 3; s++)
        free(sp.samples[s]);
    free(sp.sums);
    free(sp.work);
    free(sp.grad0);
    st = flx_comm_destroy(sp.comm);
    if (st != FLX_OK && rc == PERF_EXIT_OK) {
        fprintf(stderr, SPARSE_PERF_NAME ": flx_comm_destroy: %s\n", flx_status_string(st));
        rc = PERF_EXIT_FAIL;
    }
    if (perf_stdout_close(SPARSE_PERF_NAME) != 0 && rc == PERF_EXIT_OK)
        rc = PERF_EXIT_FAIL;
    return rc;
}
