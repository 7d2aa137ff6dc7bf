/* topk_perf.c -- flx-topk-perf: throughput of top-k selection on float32
 * magnitudes (exact radix selection, approximate threshold selection,
 * random-k) next to qsort of (|x|, index) pairs and a memcpy of the same
 * vector, in one process.
 *
 * For every size n of the sweep and every kept fraction c (k = max(1, c n)):
 *
 *   memcpy        n floats (4n bytes) copied
 *   qsort         (|x|, index) pairs sorted by magnitude, the baseline the
 *                 selection must beat by 10x (one call per sample; skipped
 *                 above --qsort-max elements)
 *   exact         cmp_topk_select(CMP_SELECT_EXACT)
 *   approx        cmp_topk_select(CMP_SELECT_APPROX), warm: the calls
 *                 alternate between two vectors of the same distribution, so
 *                 each starts from the other's threshold, as a training step
 *                 starts from the previous step's
 *   approx-cold   the same with the threshold forgotten before every call
 *                 (sampling and searching each time)
 *   randk         cmp_randk_select
 *
 * A sample times one call; the row shows the median of -n samples after -w
 * warm-up calls, as elements/s (n / time) and as a ratio to memcpy and to
 * qsort.  Every selection is checked once per row against the exact one
 * (same indices) or, for approx, for the kept energy (sum of squares,
 * printed as a percentage of the exact top-k's).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compress/pool.h"
#include "compress/rng.h"
#include "compress/topk.h"
#include "tools/perf/perf.h"
#include "common/config.h"
#include "common/time.h"
#include "common/util.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPK_PERF_NAME "flx-topk-perf"
#define TOPK_PERF_MAX_FRACTIONS 16

typedef struct {
    size_t min_n, max_n;
    unsigned factor;
    int iters, warmup;
    int threads;              /* 0: all online processors */
    double fractions[TOPK_PERF_MAX_FRACTIONS];
    int nfractions;
    const char *dist;         /* normal, cauchy, ties */
    size_t qsort_max;
    const char *csv_path;
} topk_perf_args_t;

typedef struct {
    float key;
    int32_t idx;
} topk_perf_pair_t;

static void topk_perf_usage(FILE *out)
{
    fprintf(out,
            "usage: " TOPK_PERF_NAME " [options]\n"
            "  -b, --min N        smallest vector, elements (1M, 25M...; default 1M)\n"
            "  -e, --max N        largest vector, elements (default 25M)\n"
            "  -f, --factor F     multiply the size by F each step (default 5)\n"
            "  -c, --kept C[,C]   kept fractions (default 0.01,0.001)\n"
            "  -n, --iters N      timed calls per row (default 9)\n"
            "  -w, --warmup N     untimed calls per row (default 2)\n"
            "  -t, --threads N    selection threads (default 1; 0 = every processor)\n"
            "  -d, --dist D       normal, cauchy (heavy tails) or ties (default normal)\n"
            "      --qsort-max N  largest n for the qsort baseline (default 25M)\n"
            "      --csv FILE     one CSV row per measurement\n"
            "  -h, --help         this text\n");
}

static int topk_perf_parse(topk_perf_args_t *a, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"min", required_argument, NULL, 'b'},    {"max", required_argument, NULL, 'e'},
        {"factor", required_argument, NULL, 'f'}, {"kept", required_argument, NULL, 'c'},
        {"iters", required_argument, NULL, 'n'},  {"warmup", required_argument, NULL, 'w'},
        {"threads", required_argument, NULL, 't'}, {"dist", required_argument, NULL, 'd'},
        {"qsort-max", required_argument, NULL, 'Q'}, {"csv", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    char bad[64];
    int c;
    long v;

    *a = (topk_perf_args_t){.min_n = (size_t)1 << 20, .max_n = 25000000, .factor = 5,
                            .iters = 9, .warmup = 2, .threads = 1, .dist = "normal",
                            .qsort_max = 25000000};
    a->fractions[0] = 0.01;
    a->fractions[1] = 0.001;
    a->nfractions = 2;
    opterr = 0;
#define TOPK_BAD(...) return perf_arg_error(TOPK_PERF_NAME, 0, __VA_ARGS__)
    while ((c = getopt_long(argc, argv, ":b:e:f:c:n:w:t:d:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            if (flx_parse_size(optarg, &a->min_n) != 0 || a->min_n == 0)
                TOPK_BAD("-b %s: not a count of at least 1 element", optarg);
            break;
        case 'e':
            if (flx_parse_size(optarg, &a->max_n) != 0)
                TOPK_BAD("-e %s: not a count of elements", optarg);
            break;
        case 'Q':
            if (flx_parse_size(optarg, &a->qsort_max) != 0)
                TOPK_BAD("--qsort-max %s: not a count of elements", optarg);
            break;
        case 'f':
            if (flx_parse_int(optarg, 2, 1000, &v) != 0)
                TOPK_BAD("-f %s: not a whole factor from 2 to 1000", optarg);
            a->factor = (unsigned)v;
            break;
        case 'c':
            a->nfractions = perf_parse_fractions(optarg, a->fractions, TOPK_PERF_MAX_FRACTIONS);
            if (a->nfractions < 0)
                TOPK_BAD("-c %s: not a list of at most %d fractions in (0, 1]", optarg,
                         TOPK_PERF_MAX_FRACTIONS);
            break;
        case 'n':
            if (flx_parse_int(optarg, 1, 100000, &v) != 0)
                TOPK_BAD("-n %s: not a whole number from 1 to 100000", optarg);
            a->iters = (int)v;
            break;
        case 'w':
            if (flx_parse_int(optarg, 0, 100000, &v) != 0)
                TOPK_BAD("-w %s: not a whole number from 0 to 100000", optarg);
            a->warmup = (int)v;
            break;
        case 't':
            if (flx_parse_int(optarg, 0, 256, &v) != 0)
                TOPK_BAD("-t %s: not a whole number from 0 to 256", optarg);
            a->threads = (int)v;
            break;
        case 'd':
            if (strcmp(optarg, "normal") && strcmp(optarg, "cauchy") && strcmp(optarg, "ties"))
                TOPK_BAD("-d %s: not normal, cauchy or ties", optarg);
            a->dist = optarg;
            break;
        case 'C': a->csv_path = optarg; break;
        case 'h': topk_perf_usage(stdout); return 1;
        case ':': TOPK_BAD("option '%s' needs a value", perf_bad_option(argv, 1, bad, sizeof(bad)));
        default: TOPK_BAD("unknown option '%s'", perf_bad_option(argv, 0, bad, sizeof(bad)));
        }
    }
    if (optind < argc)
        TOPK_BAD("unexpected argument '%s'", argv[optind]);
    if (a->max_n < a->min_n)
        TOPK_BAD("-b %zu is larger than -e %zu", a->min_n, a->max_n);
    if (a->max_n >= ((size_t)1 << 31))
        TOPK_BAD("-e %zu: at most 2^31 - 1 elements (indices are int32)", a->max_n);
#undef TOPK_BAD
    if (a->threads == 0)
        a->threads = cmp_pool_ncpus();
    return 0;
}

static void topk_perf_fill(float *x, size_t n, const char *dist, uint64_t seed)
{
    cmp_rng_t rng;

    cmp_rng_seed(&rng, seed, 1, 2);
    for (size_t i = 0; i < n; i++) {
        if (dist[0] == 'n') {
            x[i] = cmp_rng_normal(&rng);
        } else if (dist[0] == 'c') {
            float u = cmp_rng_unit(&rng);
            x[i] = tanf(3.14159265f * (u - 0.5f) * 0.999f); /* Cauchy */
        } else {
            uint64_t r = cmp_rng_next(&rng);
            x[i] = (r & 3) ? 0.0f : (float)((int)(r >> 8) % 7 - 3); /* 3/4 zeros */
        }
    }
}

static int topk_perf_cmp_pair(const void *a, const void *b)
{
    const topk_perf_pair_t *p = a, *q = b;

    if (p->key != q->key)
        return p->key > q->key ? -1 : 1;
    return (p->idx > q->idx) - (p->idx < q->idx);
}

static double topk_perf_energy(const float *v, size_t k)
{
    double e = 0;

    for (size_t j = 0; j < k; j++)
        e += (double)v[j] * v[j];
    return e;
}

enum { M_MEMCPY, M_QSORT, M_EXACT, M_APPROX, M_APPROX_COLD, M_RANDK, M_COUNT };
static const char *const topk_perf_method[M_COUNT] = {"memcpy", "qsort", "exact", "approx",
                                                      "approx-cold", "randk"};

typedef struct {
    topk_perf_args_t *args;
    cmp_topk_t *sel;
    float *x[2];
    float *copy;
    topk_perf_pair_t *pairs;
    uint64_t *bitmap;
    int32_t *idx;
    float *val;
    double *samples;
    double passes;
} topk_perf_t;

/* One call of a method on vector v; returns its time. */
static double topk_perf_call(topk_perf_t *tp, int method, int v, size_t n, size_t k, int it)
{
    double t0 = flx_time_now();
    cmp_topk_info_t info = {0};

    switch (method) {
    case M_MEMCPY:
        memcpy(tp->copy, tp->x[v], n * sizeof(float));
        break;
    case M_QSORT:
        for (size_t i = 0; i < n; i++)
            tp->pairs[i] = (topk_perf_pair_t){fabsf(tp->x[v][i]), (int32_t)i};
        qsort(tp->pairs, n, sizeof(topk_perf_pair_t), topk_perf_cmp_pair);
        break;
    case M_EXACT:
        cmp_topk_select(tp->sel, tp->x[v], n, k, CMP_SELECT_EXACT, tp->idx, tp->val, &info);
        break;
    case M_APPROX:
    case M_APPROX_COLD:
        if (method == M_APPROX_COLD)
            cmp_topk_reset(tp->sel);
        cmp_topk_select(tp->sel, tp->x[v], n, k, CMP_SELECT_APPROX, tp->idx, tp->val, &info);
        break;
    default:
        cmp_randk_select(tp->bitmap, n, k, 42, (uint64_t)it, tp->idx);
        break;
    }
    tp->passes += info.passes;
    return flx_time_now() - t0;
}

int main(int argc, char **argv)
{
    topk_perf_args_t args;
    topk_perf_t tp = {.args = &args};
    FILE *csv = NULL;
    int rc = topk_perf_parse(&args, argc, argv);
    size_t kmax;

    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (args.csv_path) {
        csv = fopen(args.csv_path, "w");
        if (csv == NULL) { /* a usage error, before anything is allocated */
            fprintf(stderr, TOPK_PERF_NAME ": cannot write %s: %s\n", args.csv_path,
                    strerror(errno));
            return 2;
        }
        fprintf(csv, "elements,kept,k,method,threads,time_s,elements_per_s,vs_memcpy,vs_qsort,"
                     "passes,energy_pct\n");
    }
    kmax = args.max_n;
    if (cmp_topk_create(args.max_n, kmax, args.threads, 7, &tp.sel) != FLX_OK)
        return 1;
    tp.x[0] = malloc(args.max_n * sizeof(float));
    tp.x[1] = malloc(args.max_n * sizeof(float));
    tp.copy = malloc(args.max_n * sizeof(float));
    tp.idx = malloc(args.max_n * sizeof(int32_t));
    tp.val = malloc(args.max_n * sizeof(float));
    tp.bitmap = calloc(cmp_randk_words(args.max_n), sizeof(uint64_t));
    tp.pairs = malloc(FLX_MIN(args.max_n, args.qsort_max) * sizeof(topk_perf_pair_t) + 1);
    tp.samples = malloc(sizeof(double) * (size_t)args.iters);
    if (!tp.x[0] || !tp.x[1] || !tp.copy || !tp.idx || !tp.val || !tp.bitmap || !tp.pairs ||
        !tp.samples) {
        fprintf(stderr, TOPK_PERF_NAME ": out of memory for %zu elements\n", args.max_n);
        return 1;
    }
    printf("# %s: top-k of |x| on float32, distribution %s, %d thread%s, median of %d calls\n",
           TOPK_PERF_NAME, args.dist, args.threads, args.threads > 1 ? "s" : "", args.iters);
    printf("# approx: alternating vectors, threshold reused; approx-cold: threshold reset "
           "every call\n");
    printf("#%11s %8s %10s %-12s %10s %10s %9s %8s %6s %7s\n", "elements", "kept", "k", "method",
           "time(ms)", "Melem/s", "xmemcpy", "xqsort", "passes", "energy%");
    for (size_t n = args.min_n; n <= args.max_n; n = n * args.factor) {
        double t_memcpy = 0, t_qsort = 0;

        topk_perf_fill(tp.x[0], n, args.dist, 1);
        topk_perf_fill(tp.x[1], n, args.dist, 2);
        for (int f = 0; f < args.nfractions; f++) {
            double c = args.fractions[f];
            size_t k = (size_t)floor(c * (double)n);
            double e_exact;

            if (k < 1)
                k = 1;
            /* reference: exact on x[0] */
            cmp_topk_select(tp.sel, tp.x[0], n, k, CMP_SELECT_EXACT, tp.idx, tp.val, NULL);
            e_exact = topk_perf_energy(tp.val, k);
            for (int m = 0; m < M_COUNT; m++) {
                double t, energy = NAN;
                int iters = args.iters, warm = args.warmup;

                if ((m == M_MEMCPY || m == M_QSORT) && f > 0)
                    continue; /* independent of k */
                if (m == M_QSORT) {
                    if (n > args.qsort_max)
                        continue;
                    iters = n >= 1000000 ? 1 : args.iters;
                    warm = 0;
                }
                for (int i = 0; i < warm; i++)
                    topk_perf_call(&tp, m, i & 1, n, k, i);
                tp.passes = 0;
                for (int i = 0; i < iters; i++)
                    tp.samples[i] = topk_perf_call(&tp, m, (warm + i) & 1, n, k, i);
                t = perf_median(tp.samples, iters);
                if (m == M_MEMCPY)
                    t_memcpy = t;
                if (m == M_QSORT)
                    t_qsort = t;
                if (m == M_EXACT || m == M_APPROX || m == M_APPROX_COLD) {
                    /* quality on x[0] after the timed calls */
                    cmp_topk_select(tp.sel, tp.x[0], n, k,
                                    m == M_EXACT ? CMP_SELECT_EXACT : CMP_SELECT_APPROX,
                                    tp.idx, tp.val, NULL);
                    energy = 100.0 * topk_perf_energy(tp.val, k) / (e_exact > 0 ? e_exact : 1);
                }
                {
                    char xq[16] = "-";
                    if (t_qsort > 0 && m != M_MEMCPY)
                        snprintf(xq, sizeof(xq), "%.1f", t_qsort / t);
                    printf(" %11zu %8.4g %10zu %-12s %10.3f %10.1f %9.2f %8s %6.1f %7.2f\n", n,
                           (m == M_MEMCPY || m == M_QSORT) ? 1.0 : c,
                           (m == M_MEMCPY || m == M_QSORT) ? n : k, topk_perf_method[m],
                           t * 1e3, (double)n / t / 1e6, t_memcpy > 0 ? t_memcpy / t : NAN, xq,
                           tp.passes / iters, energy);
                }
                if (csv)
                    fprintf(csv, "%zu,%g,%zu,%s,%d,%.9f,%.1f,%.4f,%.4f,%.2f,%.3f\n", n, c, k,
                            topk_perf_method[m], args.threads, t, (double)n / t,
                            t_memcpy > 0 ? t_memcpy / t : NAN, t_qsort > 0 ? t_qsort / t : NAN,
                            tp.passes / iters, energy);
                fflush(stdout);
            }
        }
        if (n > args.max_n / args.factor)
            break;
    }
    rc = perf_csv_close(csv, args.csv_path, TOPK_PERF_NAME) != 0 ? PERF_EXIT_FAIL : PERF_EXIT_OK;
    cmp_topk_destroy(tp.sel);
    free(tp.samples);
    free(tp.pairs);
    free(tp.bitmap);
    free(tp.val);
    free(tp.idx);
    free(tp.copy);
    free(tp.x[1]);
    free(tp.x[0]);
    if (perf_stdout_close(TOPK_PERF_NAME) != 0)
        rc = PERF_EXIT_FAIL;
    return rc;
}
