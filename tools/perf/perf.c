/* perf.c -- the benchmark engine behind flx-allreduce-perf, flx-allgather-perf,
 * flx-bcast-perf (and the argument parser of flx-reduce-perf).
 *
 * One run: parse the nccl-tests flags, create the communicator from the
 * environment, then for every (type, op) and every size of the sweep and for
 * out-of-place then in-place:
 *
 *   fill inputs -> warm-up calls -> barrier -> timed calls -> each rank's
 *   mean, min, p50, p99 -> FLX_MAX over ranks -> (check pass: fill, one
 *   call, count wrong elements, FLX_SUM over ranks)
 *
 * Rank 0 prints one nccl-tests row per size and, with --csv, one CSV row per
 * size and placement.  All state hangs off a perf_engine_t.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tools/perf/perf.h"

#include "collectives/coll.h" /* model_*_time: the cost model's pure functions */
#include "common/config.h"
#include "common/dtype.h"
#include "common/time.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define PERF_DEFAULT_MAX_BYTES ((size_t)64 << 20)
#define PERF_MAX_ITERS 10000000L
#define PERF_HOST_LEN 56

/* ---------------------------------------------------------------------- */
/* Arguments                                                               */
/* ---------------------------------------------------------------------- */

void perf_args_default(perf_args_t *args)
{
    memset(args, 0, sizeof(*args));
    args->min_bytes = 8;
    args->max_bytes = PERF_DEFAULT_MAX_BYTES;
    args->step_bytes = (size_t)1 << 20;
    args->step_factor = 2;
    args->iters = 20;
    args->warmup = 5;
    args->check = 1;
    args->blocking = 1;
    args->root = 0;
    args->algo = FLX_ALGO_AUTO;
    args->dtypes = 1u << FLX_FLOAT32;
    args->ops = 1u << FLX_SUM;
    args->csv_path = NULL;
}

/* One line of usage per option letter. */
static const struct {
    char letter;
    const char *text;
} perf_usage_lines[] = {
    {'b', "-b, --minbytes SIZE      smallest size in bytes (8, 4k, 1M...; default %s)"},
    {'e', "-e, --maxbytes SIZE      largest size in bytes (default %s)"},
    {'f', "-f, --stepfactor N       multiply the size by N each step (default 2; 1 = use -i)"},
    {'i', "-i, --stepbytes SIZE     add SIZE each step instead of multiplying"},
    {'n', "-n, --iters N            timed iterations per size (default 20)"},
    {'w', "-w, --warmup_iters N     untimed warm-up iterations per measurement (default 5)"},
    {'c', "-c, --check 0|1          check results in a separate, untimed pass (default 1)"},
    {'d', "-d, --datatype TYPE      float, double, half, bfloat16, int32, int64 or all (default float)"},
    {'o', "-o, --op OP              sum, prod, min, max, avg or all (default sum)"},
    {'a', "-a, --algo ALGO          auto, ring, tree, rd, hd or all (each, then auto; default auto)"},
    {'r', "-r, --root RANK          root of the broadcast (default 0)"},
    {'z', "-z, --blocking 0|1       1: blocking calls; 0: non-blocking calls + flx_wait (default 1)"},
    {'C', "    --csv FILE           write one CSV row per size and placement to FILE"},
    {'M', "    --model              print the alpha-beta model's predicted time beside each row"},
    {'h', "-h, --help               this text"},
};

/* 8, 4k, 64M: the way the sizes are written on the command line */
static void perf_size_text(size_t bytes, char *buf, size_t len)
{
    static const char unit[] = "kMG";
    int u = -1;

    while (u < 2 && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%zu", bytes);
    else
        snprintf(buf, len, "%zu%c", bytes, unit[u]);
}

void perf_usage(FILE *out, const char *prog, const char *accept, const perf_args_t *defaults)
{
    fprintf(out, "usage: %s [options]\n", prog);
    for (size_t k = 0; k < sizeof(perf_usage_lines) / sizeof(perf_usage_lines[0]); k++) {
        const char letter = perf_usage_lines[k].letter;
        char size[32];

        const char *at = strchr(accept, letter);

        /* '~' before a letter: taken (nccl-tests' flags), but it does
         * nothing for this tool, so --help does not offer it */
        if (letter != 'h' && (at == NULL || (at > accept && at[-1] == '~')))
            continue;
        if (letter == 'b' || letter == 'e') { /* the tool's own defaults */
            perf_size_text(letter == 'b' ? defaults->min_bytes : defaults->max_bytes, size,
                           sizeof(size));
            fprintf(out, "  ");
            fprintf(out, perf_usage_lines[k].text, size);
            fprintf(out, "\n");
        } else {
            fprintf(out, "  %s\n", perf_usage_lines[k].text);
        }
    }
}

static int perf_parse_dtypes(const char *s, unsigned *mask_p)
{
    if (strcmp(s, "all") == 0) {
        *mask_p = (1u << FLX_DTYPE_COUNT) - 1;
        return 0;
    }
    for (int d = 0; d < FLX_DTYPE_COUNT; d++) {
        if (strcmp(s, flx_dtype_name((flx_dtype_t)d)) == 0) {
            *mask_p = 1u << d;
            return 0;
        }
    }
    /* nccl-tests' other spellings */
    if (strcmp(s, "float32") == 0) { *mask_p = 1u << FLX_FLOAT32; return 0; }
    if (strcmp(s, "float64") == 0) { *mask_p = 1u << FLX_FLOAT64; return 0; }
    if (strcmp(s, "float16") == 0) { *mask_p = 1u << FLX_FLOAT16; return 0; }
    if (strcmp(s, "bf16") == 0) { *mask_p = 1u << FLX_BFLOAT16; return 0; }
    return -1;
}

static int perf_parse_ops(const char *s, unsigned *mask_p)
{
    if (strcmp(s, "all") == 0) {
        *mask_p = (1u << FLX_OP_COUNT) - 1;
        return 0;
    }
    for (int o = 0; o < FLX_OP_COUNT; o++) {
        if (strcmp(s, flx_op_name((flx_op_t)o)) == 0) {
            *mask_p = 1u << o;
            return 0;
        }
    }
    return -1;
}

static int perf_parse_algo(const char *s, flx_algo_t *algo_p)
{
    for (int a = 0; a < FLX_ALGO_COUNT; a++) {
        if (strcmp(s, flx_algo_name((flx_algo_t)a)) == 0) {
            *algo_p = (flx_algo_t)a;
            return 0;
        }
    }
    return -1;
}

int perf_arg_error(const char *prog, int quiet, const char *fmt, ...)
{
    va_list ap;

    if (quiet)
        return -1;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see --help)\n");
    return -1;
}

const char *perf_bad_option(char **argv, int missing, char *buf, size_t len)
{
    const char *arg = argv[optind - 1];

    /* inside a cluster (-zn) optind has not moved yet: optopt names it */
    if (optopt != 0 && !(missing && strncmp(arg, "--", 2) == 0))
        snprintf(buf, len, "-%c", optopt);
    else
        snprintf(buf, len, "%s", arg);
    return buf;
}

static int perf_parse_int_arg(const char *s, long min, long max, int *out_p)
{
    long v;

    if (flx_parse_int(s, min, max, &v) != 0)
        return -1;
    *out_p = (int)v;
    return 0;
}

int perf_args_parse(perf_args_t *args, const char *prog, const char *accept,
                    int quiet, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"stepbytes", required_argument, NULL, 'i'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup_iters", required_argument, NULL, 'w'},
        {"check", required_argument, NULL, 'c'},
        {"datatype", required_argument, NULL, 'd'},
        {"op", required_argument, NULL, 'o'},
        {"algo", required_argument, NULL, 'a'},
        {"root", required_argument, NULL, 'r'},
        {"blocking", required_argument, NULL, 'z'},
        {"csv", required_argument, NULL, 'C'},
        {"model", no_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const perf_args_t defaults = *args; /* what --help shows, whatever came before it */
    char optstring[64], bad[64];
    size_t len = 0;
    const char *what = NULL;
    int c, f;

    /* ':' first: a missing argument returns ':' instead of printing. */
    optstring[len++] = ':';
    for (const char *p = accept; *p != '\0' && len + 3 < sizeof(optstring); p++) {
        if (*p == 'C' || *p == 'h' || *p == 'M' || *p == '~')
            continue;
        optstring[len++] = *p;
        optstring[len++] = ':';
    }
    optstring[len++] = 'h';
    optstring[len] = '\0';

    opterr = 0;
    optind = 0; /* glibc: a full restart (a second parse of the same argv) */
    while ((c = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
        if (c == 'h') {
            if (!quiet)
                perf_usage(stdout, prog, accept, &defaults);
            return PERF_PARSE_HELP;
        }
        if (c == ':') {
            if (!quiet)
                fprintf(stderr, "%s: option '%s' needs a value\n", prog,
                        perf_bad_option(argv, 1, bad, sizeof(bad)));
            goto err_usage;
        }
        if (c == '?' || strchr(accept, c) == NULL) {
            if (!quiet)
                fprintf(stderr, "%s: unknown option '%s'\n", prog,
                        perf_bad_option(argv, 0, bad, sizeof(bad)));
            goto err_usage;
        }
        switch (c) {
        case 'b':
            what = "-b (a size such as 8, 4k, 1M)";
            if (flx_parse_size(optarg, &args->min_bytes) != 0)
                goto err_value;
            break;
        case 'e':
            what = "-e (a size such as 8, 4k, 1M)";
            if (flx_parse_size(optarg, &args->max_bytes) != 0)
                goto err_value;
            break;
        case 'f':
            what = "-f (an integer >= 1)";
            if (perf_parse_int_arg(optarg, 1, 1 << 20, &f) != 0)
                goto err_value;
            args->step_factor = f == 1 ? 0 : (unsigned)f;
            break;
        case 'i':
            what = "-i (a size > 0 such as 1M)";
            if (flx_parse_size(optarg, &args->step_bytes) != 0 || args->step_bytes == 0)
                goto err_value;
            args->step_factor = 0;
            break;
        case 'n':
            what = "-n (an integer >= 1)";
            if (perf_parse_int_arg(optarg, 1, PERF_MAX_ITERS, &args->iters) != 0)
                goto err_value;
            break;
        case 'w':
            what = "-w (an integer >= 0)";
            if (perf_parse_int_arg(optarg, 0, PERF_MAX_ITERS, &args->warmup) != 0)
                goto err_value;
            break;
        case 'c':
            what = "-c (0 or 1)";
            if (perf_parse_int_arg(optarg, 0, 1, &args->check) != 0)
                goto err_value;
            break;
        case 'z':
            what = "-z (0 or 1)";
            if (perf_parse_int_arg(optarg, 0, 1, &args->blocking) != 0)
                goto err_value;
            break;
        case 'r':
            what = "-r (a rank >= 0)";
            if (perf_parse_int_arg(optarg, 0, 1 << 30, &args->root) != 0)
                goto err_value;
            break;
        case 'd':
            what = "-d (float, double, half, bfloat16, int32, int64 or all)";
            if (perf_parse_dtypes(optarg, &args->dtypes) != 0)
                goto err_value;
            break;
        case 'o':
            what = "-o (sum, prod, min, max, avg or all)";
            if (perf_parse_ops(optarg, &args->ops) != 0)
                goto err_value;
            break;
        case 'a':
            what = "-a (auto, ring, tree, rd, hd or all)";
            args->all_algos = strcmp(optarg, "all") == 0;
            if (args->all_algos)
                args->algo = FLX_ALGO_AUTO;
            else if (perf_parse_algo(optarg, &args->algo) != 0)
                goto err_value;
            break;
        case 'M':
            args->model = 1;
            break;
        case 'C':
            what = "--csv (a file name)";
            if (optarg[0] == '\0')
                goto err_value;
            args->csv_path = optarg;
            break;
        default:
            goto err_usage;
        }
    }
    if (optind < argc) {
        if (!quiet)
            fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        goto err_usage;
    }
    if (args->min_bytes > args->max_bytes) {
        if (!quiet)
            fprintf(stderr, "%s: minbytes (%zu) is larger than maxbytes (%zu)\n", prog,
                    args->min_bytes, args->max_bytes);
        goto err_usage;
    }
    if (args->min_bytes == 0 && args->step_factor != 0) {
        if (!quiet)
            fprintf(stderr, "%s: minbytes 0 needs -i stepbytes (a factor never leaves 0)\n",
                    prog);
        goto err_usage;
    }
    return 0;

err_value:
    if (!quiet)
        fprintf(stderr, "%s: invalid value '%s' for %s\n", prog, optarg, what);
err_usage:
    if (!quiet)
        fprintf(stderr, "Try '%s -h' for the options.\n", prog);
    return PERF_PARSE_ERROR;
}

size_t perf_next_size(const perf_args_t *args, size_t size)
{
    size_t next;

    if (args->step_factor >= 2) {
        if (size > SIZE_MAX / args->step_factor)
            return 0;
        next = size * args->step_factor;
    } else {
        if (size > SIZE_MAX - args->step_bytes)
            return 0;
        next = size + args->step_bytes;
    }
    return next > args->max_bytes ? 0 : next;
}

void perf_format_us(char *buf, size_t len, double us)
{
    if (us >= 10000.0)
        snprintf(buf, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(buf, len, "%7.1f", us);
    else
        snprintf(buf, len, "%7.2f", us);
}

void perf_quiet_wait(void)
{
    fflush(NULL);
    sleep(PERF_QUIET_WAIT_S);
}

int perf_env_nonzero_rank(void)
{
    /* Only to print argument errors once: the communicator is not there yet.
     * Same variables the bootstrap reads (DESIGN.md). */
    static const char *const names[] = {"FLX_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                        "SLURM_PROCID"};

    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        const char *v = getenv(names[k]);

        if (v != NULL && v[0] != '\0')
            return strcmp(v, "0") != 0;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Deterministic data                                                      */
/* ---------------------------------------------------------------------- */

static int perf_dtype_is_float(flx_dtype_t dtype)
{
    return dtype == FLX_FLOAT32 || dtype == FLX_FLOAT64 || dtype == FLX_FLOAT16 ||
           dtype == FLX_BFLOAT16;
}

/* Inputs lie in [-range/2, range/2) before scaling; see perf.h for why. */
static unsigned perf_input_range(flx_dtype_t dtype)
{
    switch (dtype) {
    case FLX_FLOAT16: return 16;
    case FLX_BFLOAT16: return 8;
    default: return 256;
    }
}

/* A cheap integer hash of (rank, i), so that neighbouring elements and ranks
 * differ and a misplaced block is caught. */
static uint32_t perf_mix(int rank, size_t i)
{
    uint32_t h = (uint32_t)i * 2654435761u;

    h ^= ((uint32_t)rank + 1u) * 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

int64_t perf_input_int(flx_dtype_t dtype, flx_op_t op, int rank, size_t i)
{
    uint32_t h = perf_mix(rank, i);
    unsigned range;

    if (op == FLX_PROD) {
        switch (h & 3u) {
        case 0: return 2;
        case 1: return -1;
        default: return 1;
        }
    }
    range = perf_input_range(dtype);
    return (int64_t)(h % range) - (int64_t)(range / 2);
}

static double perf_input_scale(flx_op_t op)
{
    return op == FLX_PROD ? 1.0 : 0.125;
}

/* Encode a floating value into element dst of a floating dtype. */
static void perf_encode_float(void *dst, flx_dtype_t dtype, double v)
{
    float f = (float)v;
    uint16_t h;

    switch (dtype) {
    case FLX_FLOAT32: memcpy(dst, &f, sizeof(f)); break;
    case FLX_FLOAT64: memcpy(dst, &v, sizeof(v)); break;
    case FLX_FLOAT16: h = flx_float_to_half(f); memcpy(dst, &h, sizeof(h)); break;
    case FLX_BFLOAT16: h = flx_float_to_bf16(f); memcpy(dst, &h, sizeof(h)); break;
    default: break;
    }
}

/* Encode an integer (two's complement, truncated) into an integer dtype. */
static void perf_encode_int(void *dst, flx_dtype_t dtype, int64_t v)
{
    int32_t v32 = (int32_t)(uint32_t)(uint64_t)v;

    if (dtype == FLX_INT32)
        memcpy(dst, &v32, sizeof(v32));
    else
        memcpy(dst, &v, sizeof(v));
}

/* Element i of rank's input, encoded into dst. */
static void perf_encode_input(void *dst, flx_dtype_t dtype, flx_op_t op, int rank, size_t i)
{
    int64_t n = perf_input_int(dtype, op, rank, i);

    if (perf_dtype_is_float(dtype))
        perf_encode_float(dst, dtype, (double)n * perf_input_scale(op));
    else
        perf_encode_int(dst, dtype, n);
}

void perf_fill_input(void *buf, size_t count, flx_dtype_t dtype, flx_op_t op, int rank)
{
    size_t es = flx_dtype_size(dtype);
    char *p = buf;

    for (size_t i = 0; i < count; i++)
        perf_encode_input(p + i * es, dtype, op, rank, i);
}

void perf_poison(void *buf, size_t bytes)
{
    memset(buf, 0xa5, bytes);
}

uint64_t perf_count_wrong_input(const void *buf, size_t count, flx_dtype_t dtype,
                                flx_op_t op, int rank)
{
    size_t es = flx_dtype_size(dtype);
    const char *p = buf;
    uint64_t wrong = 0;
    char want[8];

    for (size_t i = 0; i < count; i++) {
        perf_encode_input(want, dtype, op, rank, i);
        wrong += memcmp(want, p + i * es, es) != 0;
    }
    return wrong;
}

/* The expected reduction of element i, encoded into dst.  Floating inputs
 * are exact in double and so is every combination of them; FLX_AVG divides
 * the (exact) sum once, in the element type, as flx_reduce_finish does. */
static void perf_encode_reduced(void *dst, flx_dtype_t dtype, flx_op_t op, int nranks,
                                size_t i)
{
    if (perf_dtype_is_float(dtype)) {
        double scale = perf_input_scale(op);
        double acc = (double)perf_input_int(dtype, op, 0, i) * scale;

        for (int r = 1; r < nranks; r++) {
            double v = (double)perf_input_int(dtype, op, r, i) * scale;

            switch (op) {
            case FLX_PROD: acc *= v; break;
            case FLX_MIN: acc = v < acc ? v : acc; break;
            case FLX_MAX: acc = v > acc ? v : acc; break;
            default: acc += v; break;
            }
        }
        if (op == FLX_AVG && nranks > 1) {
            if (dtype == FLX_FLOAT64)
                acc /= nranks;
            else
                acc = (double)((float)acc / (float)nranks);
        }
        perf_encode_float(dst, dtype, acc);
    } else {
        uint64_t acc = (uint64_t)perf_input_int(dtype, op, 0, i);

        for (int r = 1; r < nranks; r++) {
            int64_t v = perf_input_int(dtype, op, r, i);

            switch (op) {
            case FLX_PROD: acc *= (uint64_t)v; break;
            case FLX_MIN: acc = v < (int64_t)acc ? (uint64_t)v : acc; break;
            case FLX_MAX: acc = v > (int64_t)acc ? (uint64_t)v : acc; break;
            default: acc += (uint64_t)v; break;
            }
        }
        if (op == FLX_AVG && nranks > 1) {
            /* the sum is small, so it fits either type; C division, like the
             * library's flx_reduce_finish */
            if (dtype == FLX_INT32)
                acc = (uint64_t)(int64_t)((int32_t)(int64_t)acc / nranks);
            else
                acc = (uint64_t)((int64_t)acc / nranks);
        }
        perf_encode_int(dst, dtype, (int64_t)acc);
    }
}

uint64_t perf_count_wrong_reduce_at(const void *buf, size_t first, size_t count,
                                    flx_dtype_t dtype, flx_op_t op, int nranks)
{
    size_t es = flx_dtype_size(dtype);
    const char *p = buf;
    uint64_t wrong = 0;
    char want[8];

    for (size_t i = 0; i < count; i++) {
        perf_encode_reduced(want, dtype, op, nranks, first + i);
        wrong += memcmp(want, p + i * es, es) != 0;
    }
    return wrong;
}

uint64_t perf_count_wrong_reduce(const void *buf, size_t count, flx_dtype_t dtype,
                                 flx_op_t op, int nranks)
{
    return perf_count_wrong_reduce_at(buf, 0, count, dtype, op, nranks);
}

/* ---------------------------------------------------------------------- */
/* Engine                                                                  */
/* ---------------------------------------------------------------------- */

typedef struct {
    const perf_coll_t *coll;
    perf_args_t args;
    flx_comm_h comm;
    int rank;
    int nranks;
    int blocking;          /* effective -z (1 where the tool has no i-form) */
    void *sendbuf;
    void *recvbuf;
    double *times;         /* iters per-iteration times                     */
    flx_request_h *reqs;   /* iters requests (non-blocking mode)            */
    FILE *csv;
    double bw_sum;         /* for "Avg bus bandwidth"                       */
    long bw_count;
    long wrong_rows;       /* measurements with wrong elements              */
    flx_link_model_t link; /* --model: the communicator's alpha and beta    */
    double chunk;          /* --model: FLX_CHUNK_SIZE in bytes              */
    flx_algo_t algos[5];   /* algorithms run at each size (-a all: several) */
    int nalgos;
} perf_engine_t;

typedef struct {
    double mean_s;
    double min_s;
    double p50_s;
    double p99_s;
    double algbw;
    double busbw;
    int64_t wrong; /* -1: not checked */
} perf_result_t;

/* Options every collective tool takes. */
/* the letters a collective's tool takes, those it has no use for marked
 * '~' (nccl-tests' tools take every flag) */
static void perf_coll_accept(const perf_coll_t *coll, char *buf, size_t len)
{
    snprintf(buf, len, "befinwcd%so%sa%sr%szCM", coll->flags & PERF_COLL_USES_OP ? "" : "~",
             coll->flags & PERF_COLL_USES_ALGO ? "" : "~",
             coll->flags & PERF_COLL_USES_ROOT ? "" : "~",
             coll->flags & PERF_COLL_NONBLOCKING ? "" : "~");
}

static int perf_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double perf_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), perf_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Nearest-rank percentile of sorted v[0..n). */
static double perf_percentile(const double *v, int n, double p)
{
    long k = (long)ceil(p * n) - 1;

    if (k < 0)
        k = 0;
    if (k >= n)
        k = n - 1;
    return v[k];
}

/* The library's automatic choice for c, FLX_ALGO_AUTO where it is not
 * visible (broadcast). */
static flx_algo_t perf_auto_algo(const perf_engine_t *eng, const perf_case_t *c)
{
    if (eng->coll->flags & PERF_COLL_ALLREDUCE)
        return flx_allreduce_algo(eng->comm, c->count, c->dtype);
    if (eng->coll->flags & PERF_COLL_ALLGATHER)
        return flx_allgather_algo(eng->comm, c->count, c->dtype);
    if (eng->coll->flags & PERF_COLL_REDUCE_SCATTER)
        return flx_reduce_scatter_algo(eng->comm, c->count, c->dtype);
    return FLX_ALGO_AUTO;
}

static const char *perf_algo_label(const perf_engine_t *eng, const perf_case_t *c)
{
    if (eng->coll->flags & PERF_COLL_REDUCE_SCATTER) /* no algo argument: FLX_ALGO or auto */
        return flx_algo_name(perf_auto_algo(eng, c));
    if (!(eng->coll->flags & PERF_COLL_USES_ALGO))
        return "-";
    if (eng->args.algo == FLX_ALGO_AUTO)
        return flx_algo_name(perf_auto_algo(eng, c));
    return flx_algo_name(eng->args.algo);
}

/* --model: the cost model's time of one call of c with algorithm algo
 * (allreduce: ring/tree/rd; allgather: ring/rd(Bruck); broadcast: tree =
 * binomial, ring = chain, as the library chooses between them); 0 when the
 * collective has no such algorithm. */
static double perf_model_time(const perf_engine_t *eng, const perf_case_t *c, flx_algo_t algo)
{
    flx_link_model_t link = eng->link;
    double a, b, t = 0;

    /* the model now: the live refresh may have moved it since the last row */
    flx_comm_link_model(eng->comm, &link);
    a = link.alpha_s;
    b = link.beta_bytes_per_s;
    if (eng->coll->flags & PERF_COLL_ALLREDUCE)
        t = flx_allreduce_predict(eng->comm, c->count, c->dtype, algo);
    else if (eng->coll->flags & PERF_COLL_ALLGATHER)
        t = algo == FLX_ALGO_TREE || algo == FLX_ALGO_HD ? 0 : flx_allgather_predict(eng->comm, c->count, c->dtype, algo);
    else if (strcmp(eng->coll->coll_name, "broadcast") == 0 && algo != FLX_ALGO_RD &&
             algo != FLX_ALGO_HD)
        t = model_bcast_time(algo == FLX_ALGO_RING, eng->nranks, (double)c->recv_bytes, a, b,
                             eng->chunk);
    return t < 1e29 ? t : 0; /* 1e30: no such algorithm for this collective */
}

/* The algorithm the row ran: for an allreduce under auto, the library's
 * choice; otherwise -a (FLX_ALGO_AUTO where the choice is not visible). */
static flx_algo_t perf_row_algo(const perf_engine_t *eng, const perf_case_t *c)
{
    if (eng->args.algo == FLX_ALGO_AUTO)
        return perf_auto_algo(eng, c);
    return eng->args.algo;
}

/* --model: predicted time (s) of the row's algorithm, 0 when unknown (auto
 * for collectives whose choice is not visible). */
static double perf_model_pred(const perf_engine_t *eng, const perf_case_t *c)
{
    flx_algo_t algo = perf_row_algo(eng, c);

    if (algo == FLX_ALGO_AUTO)
        return 0;
    return perf_model_time(eng, c, algo);
}

/* Run n calls of c, recording per-iteration times into times (may be NULL).
 * Blocking: each call timed on its own.  Non-blocking: all n issued, then
 * waited in order; an iteration's time is the interval between completions. */
static flx_status_t perf_run_iters(perf_engine_t *eng, const perf_case_t *c, int n,
                                   double *times)
{
    const perf_coll_t *coll = eng->coll;
    flx_status_t st = FLX_OK, wst;
    double t, prev = flx_time_now();
    int issued;

    if (eng->blocking) {
        for (int it = 0; it < n; it++) {
            st = coll->start(c, NULL);
            if (st != FLX_OK)
                return st;
            t = flx_time_now();
            if (times != NULL)
                times[it] = t - prev;
            prev = t;
        }
        return FLX_OK;
    }
    for (issued = 0; issued < n; issued++) {
        st = coll->start(c, &eng->reqs[issued]);
        if (st < 0)
            break;
        st = FLX_OK;
    }
    for (int it = 0; it < issued; it++) {
        wst = flx_wait(eng->reqs[it]);
        if (wst != FLX_OK && st == FLX_OK)
            st = wst;
        t = flx_time_now();
        if (times != NULL)
            times[it] = t - prev;
        prev = t;
    }
    return st;
}

/* Warm up, time, and check one placement of one size. */
static flx_status_t perf_run_case(perf_engine_t *eng, perf_case_t *c, perf_result_t *res)
{
    const perf_coll_t *coll = eng->coll;
    int n = eng->args.iters;
    flx_status_t st;
    int64_t wrong_local, wrong_all;
    double t0, stats[4], stats_max[4];

    coll->fill(c);
    if (eng->args.warmup > 0) {
        st = perf_run_iters(eng, c, eng->args.warmup, NULL);
        if (st != FLX_OK)
            return st;
    }
    st = flx_barrier(eng->comm);
    if (st != FLX_OK)
        return st;

    t0 = flx_time_now();
    st = perf_run_iters(eng, c, n, eng->times);
    if (st != FLX_OK)
        return st;
    /* this rank's mean, min, p50, p99; then the slowest rank's of each.
     * (Ranks drift by a fraction of an iteration, so a per-iteration max
     * over ranks would pair unrelated iterations.) */
    stats[0] = (flx_time_now() - t0) / n;
    qsort(eng->times, (size_t)n, sizeof(double), perf_cmp_double);
    stats[1] = eng->times[0];
    stats[2] = perf_percentile(eng->times, n, 0.50);
    stats[3] = perf_percentile(eng->times, n, 0.99);
    st = flx_allreduce(eng->comm, stats, stats_max, 4, FLX_FLOAT64, FLX_MAX, FLX_ALGO_AUTO);
    if (st != FLX_OK)
        return st;
    res->mean_s = stats_max[0];
    res->min_s = stats_max[1];
    res->p50_s = stats_max[2];
    res->p99_s = stats_max[3];
    res->algbw = res->mean_s > 0 ? (double)c->recv_bytes / 1.0e9 / res->mean_s : 0.0;
    res->busbw = res->algbw * coll->bus_factor(c->nranks);
    res->wrong = -1;

    if (eng->args.check) {
        coll->fill(c);
        st = perf_run_iters(eng, c, 1, NULL);
        if (st != FLX_OK)
            return st;
        wrong_local = (int64_t)coll->check(c);
        st = flx_allreduce(eng->comm, &wrong_local, &wrong_all, 1, FLX_INT64, FLX_SUM,
                           FLX_ALGO_AUTO);
        if (st != FLX_OK)
            return st;
        res->wrong = wrong_all;
    }
    return FLX_OK;
}

static void perf_csv_header(perf_engine_t *eng)
{
    fprintf(eng->csv, "tool,coll,nranks,net,size,count,type,redop,root,algo,placement,"
                      "blocking,iters,warmup,time_us,algbw_gbs,busbw_gbs,wrong,"
                      "min_us,p50_us,p99_us%s%s\n",
            eng->args.model ? ",pred_us,pred_ring_us,pred_tree_us,pred_rd_us,pred_hd_us" : "",
            eng->args.all_algos ? ",algo_arg" : "");
}

static void perf_csv_row(perf_engine_t *eng, const perf_case_t *c, const char *redop,
                         int root, const perf_result_t *res)
{
    fprintf(eng->csv, "%s,%s,%d,%s,%zu,%zu,%s,%s,%d,%s,%s,%d,%d,%d,%.3f,%.6f,%.6f,%lld,"
                      "%.3f,%.3f,%.3f",
            eng->coll->name, eng->coll->coll_name, eng->nranks,
            flx_comm_net_name(eng->comm), c->recv_bytes, c->count,
            flx_dtype_name(c->dtype), redop, root, perf_algo_label(eng, c),
            c->in_place ? "in-place" : "out-of-place", eng->blocking, eng->args.iters,
            eng->args.warmup, res->mean_s * 1e6, res->algbw, res->busbw,
            (long long)res->wrong, res->min_s * 1e6, res->p50_s * 1e6, res->p99_s * 1e6);
    if (eng->args.model)
        fprintf(eng->csv, ",%.3f,%.3f,%.3f,%.3f,%.3f", perf_model_pred(eng, c) * 1e6,
                perf_model_time(eng, c, FLX_ALGO_RING) * 1e6,
                perf_model_time(eng, c, FLX_ALGO_TREE) * 1e6,
                perf_model_time(eng, c, FLX_ALGO_RD) * 1e6,
                perf_model_time(eng, c, FLX_ALGO_HD) * 1e6);
    if (eng->args.all_algos) /* what -a asked for; 'algo' says what ran */
        fprintf(eng->csv, ",%s", flx_algo_name(eng->args.algo));
    fputc('\n', eng->csv);
}

/* Append one placement's "  time  algbw  busbw  #wrong" to row. */
static void perf_format_result(char *row, size_t len, const perf_result_t *res)
{
    size_t used = strlen(row);
    char t[32], w[32];

    perf_format_us(t, sizeof(t), res->mean_s * 1e6);
    if (res->wrong < 0)
        snprintf(w, sizeof(w), "%5s", "N/A");
    else
        snprintf(w, sizeof(w), "%5lld", (long long)res->wrong);
    snprintf(row + used, len - used, "  %7s  %6.2f  %6.2f  %5s", t, res->algbw, res->busbw, w);
}

static void perf_print_columns(const perf_engine_t *eng)
{
    const int m = eng->args.model;

    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
           "in-place            out-of-place iterations%s\n",
           "", "", "", "", "", m ? "     model: predicted time of each algorithm" : "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %7s  %7s  %7s",
           "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
           "algbw", "busbw", "#wrong", "min", "p50", "p99");
    if (m)
        printf("  %5s  %7s  %6s  %7s  %7s  %7s  %7s", "algo", "pred", "err", "ring", "tree", "rd",
               "hd");
    else if (eng->args.all_algos)
        printf("  %5s", "algo");
    printf("\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s  %7s  %7s  %7s",
           "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
           "(GB/s)", "", "(us)", "(us)", "(us)");
    if (m)
        printf("  %5s  %7s  %6s  %7s  %7s  %7s  %7s", "", "(us)", "(%)", "(us)", "(us)", "(us)",
               "(us)");
    printf("\n");
}

/* --model: "  algo  pred  err  ring  tree  rd  hd" appended to row; err is
 * measured (out-of-place mean) against the prediction of the row's algorithm. */
static void perf_format_model(const perf_engine_t *eng, const perf_case_t *c, char *row,
                              size_t len, const perf_result_t *res)
{
    static const flx_algo_t algos[] = {FLX_ALGO_RING, FLX_ALGO_TREE, FLX_ALGO_RD, FLX_ALGO_HD};
    double pred = perf_model_pred(eng, c);
    size_t used = strlen(row);
    char t[32], e[32];

    if (pred > 0) {
        perf_format_us(t, sizeof(t), pred * 1e6);
        snprintf(e, sizeof(e), "%+6.0f", (res->mean_s / pred - 1.0) * 100.0);
    } else {
        snprintf(t, sizeof(t), "%7s", "-");
        snprintf(e, sizeof(e), "%6s", "-");
    }
    used += (size_t)snprintf(row + used, len - used, "  %5s  %7s  %6s",
                             flx_algo_name(perf_row_algo(eng, c)), t, e);
    for (size_t k = 0; k < sizeof(algos) / sizeof(algos[0]) && used < len; k++) {
        double pk = perf_model_time(eng, c, algos[k]);

        if (pk > 0)
            perf_format_us(t, sizeof(t), pk * 1e6);
        else
            snprintf(t, sizeof(t), "%7s", "-");
        used += (size_t)snprintf(row + used, len - used, "  %7s", t);
    }
}

/* The sweep over sizes for one (type, op). */
/* *empty_p: no size of the sweep holds one element per rank (nothing ran) */
static flx_status_t perf_sweep(perf_engine_t *eng, flx_dtype_t dtype, flx_op_t op, int *empty_p)
{
    const perf_coll_t *coll = eng->coll;
    size_t es = flx_dtype_size(dtype);
    int uses_op = (coll->flags & PERF_COLL_USES_OP) != 0;
    int root = (coll->flags & PERF_COLL_USES_ROOT) ? eng->args.root : -1;
    const char *redop = uses_op ? flx_op_name(op) : "none";
    perf_result_t res[2];
    perf_case_t c;
    char row[512], s1[32], s2[32], s3[32];
    flx_status_t st;
    int runnable = 0;

    for (size_t size = eng->args.min_bytes, next;; size = next) {
        memset(&c, 0, sizeof(c));
        c.comm = eng->comm;
        c.rank = eng->rank;
        c.nranks = eng->nranks;
        c.dtype = dtype;
        c.op = op;
        c.algo = eng->args.algo;
        c.root = eng->args.root;
        c.sendbuf = eng->sendbuf;
        c.recvbuf = eng->recvbuf;
        coll->counts(size, es, eng->nranks, &c.count, &c.send_bytes, &c.recv_bytes);
        runnable += c.count != 0;
        /* -a all: every algorithm at this size before the next size, so a
         * change of load on the machine hits them alike */
        for (int a = 0; c.count != 0 && a < eng->nalgos; a++) {
            eng->args.algo = eng->algos[a];
            c.algo = eng->args.algo;
                for (int ip = 0; ip < 2; ip++) {
                    c.in_place = ip;
                    st = perf_run_case(eng, &c, &res[ip]);
                    if (st != FLX_OK) {
                        fprintf(stderr, "%s: rank %d: %s of %zu bytes (%s, %s, %s): %s\n",
                                coll->name, eng->rank, coll->coll_name, c.recv_bytes,
                                flx_dtype_name(dtype), redop, ip ? "in-place" : "out-of-place",
                                flx_status_string(st));
                        return st;
                    }
                    eng->bw_sum += res[ip].busbw;
                    eng->bw_count++;
                    eng->wrong_rows += res[ip].wrong > 0;
                }
                if (eng->rank == 0) {
                    snprintf(row, sizeof(row), "%12zu  %12zu  %8s  %6s  %6d", c.recv_bytes, c.count,
                             flx_dtype_name(dtype), redop, root);
                    perf_format_result(row, sizeof(row), &res[0]);
                    perf_format_result(row, sizeof(row), &res[1]);
                    perf_format_us(s1, sizeof(s1), res[0].min_s * 1e6);
                    perf_format_us(s2, sizeof(s2), res[0].p50_s * 1e6);
                    perf_format_us(s3, sizeof(s3), res[0].p99_s * 1e6);
                    snprintf(row + strlen(row), sizeof(row) - strlen(row), "  %7s  %7s  %7s", s1,
                             s2, s3);
                    if (eng->args.model)
                        perf_format_model(eng, &c, row, sizeof(row), &res[0]);
                    else if (eng->args.all_algos)
                        snprintf(row + strlen(row), sizeof(row) - strlen(row), "  %5s",
                                 perf_algo_label(eng, &c));
                    printf("%s\n", row);
                    if (eng->csv != NULL) {
                        c.in_place = 0;
                        perf_csv_row(eng, &c, redop, root, &res[0]);
                        c.in_place = 1;
                        perf_csv_row(eng, &c, redop, root, &res[1]);
                        fflush(eng->csv);
                    }
                }
        }
        next = perf_next_size(&eng->args, size);
        if (next <= size) /* 0: the sweep is over */
            break;
    }
    *empty_p = runnable == 0;
    if (runnable == 0) { /* the same on every rank */
        if (eng->rank == 0)
            fprintf(stderr, "%s: no size from %zu to %zu bytes holds one %s per rank on %d "
                    "ranks: nothing measured (raise -e)\n", coll->name, eng->args.min_bytes,
                    eng->args.max_bytes, flx_dtype_name(dtype), eng->nranks);
        return FLX_ERR_INVALID_ARG;
    }
    return FLX_OK;
}

/* Rank 0 prints the header; every rank takes part in gathering the pids. */
static flx_status_t perf_print_header(perf_engine_t *eng)
{
    struct {
        int32_t pid;
        char host[PERF_HOST_LEN];
        char pad[4];
    } me, *all;
    const perf_args_t *a = &eng->args;
    const perf_coll_t *coll = eng->coll;
    flx_link_model_t model;
    flx_status_t st;
    char step[64];

    _Static_assert(sizeof(me) % 4 == 0, "rank info is a whole number of int32");
    all = calloc((size_t)eng->nranks, sizeof(me));
    if (all == NULL)
        return FLX_ERR_NO_MEMORY;
    memset(&me, 0, sizeof(me));
    me.pid = (int32_t)getpid();
    if (gethostname(me.host, sizeof(me.host) - 1) != 0)
        snprintf(me.host, sizeof(me.host), "?");
    st = flx_allgather(eng->comm, &me, all, sizeof(me) / 4, FLX_INT32, FLX_ALGO_AUTO);
    if (st != FLX_OK)
        goto out_free;
    if (eng->rank != 0)
        goto out_free;

    if (a->step_factor >= 2)
        snprintf(step, sizeof(step), "%u(factor)", a->step_factor);
    else
        snprintf(step, sizeof(step), "%zu(bytes)", a->step_bytes);
    printf("# Collective test starting: %s\n", coll->name);
    printf("# nRanks %d net %s minBytes %zu maxBytes %zu step: %s warmup iters: %d "
           "iters: %d validation: %d blocking: %d algo: %s\n",
           eng->nranks, flx_comm_net_name(eng->comm), a->min_bytes, a->max_bytes, step,
           a->warmup, a->iters, a->check, eng->blocking,
           (coll->flags & PERF_COLL_REDUCE_SCATTER) ? "auto"
           : !(coll->flags & PERF_COLL_USES_ALGO)   ? "n/a"
           : a->all_algos                           ? "all"
                                                    : flx_algo_name(a->algo));
    printf("#\n# flexcoll %s (%s)", flx_version_string(), flx_build_features());
    if (flx_comm_link_model(eng->comm, &model) == FLX_OK)
        printf(", link model: alpha %.2f us, beta %.3f GB/s", model.alpha_s * 1e6,
               model.beta_bytes_per_s / 1e9);
    printf("\n#\n# Using ranks\n");
    for (int r = 0; r < eng->nranks; r++)
        printf("#  Rank %2d Pid %7d on %10s\n", r, (int)all[r].pid, all[r].host);
    printf("#\n");
    printf("# time  : mean time per iteration of the slowest rank (FLX_MAX over ranks)\n");
    printf("# algbw : size / time, GB/s = 1e9 B/s; busbw = %s\n", coll->busbw_doc);
    printf("# min, p50, p99 : per-iteration times of the out-of-place run: each rank's\n"
           "#   nearest-rank percentiles over its %d iterations, the slowest rank's (us)\n",
           a->iters);
    if (!eng->blocking)
        printf("# non-blocking: all iterations issued, then flx_wait in order; an iteration's\n"
               "#   time is the interval between two completions\n");
    else if (!a->blocking)
        printf("# -z 0 ignored: %s has no non-blocking form\n", coll->coll_name);
    if (((coll->flags & PERF_COLL_USES_ALGO) && a->algo == FLX_ALGO_AUTO &&
         (coll->flags & (PERF_COLL_ALLREDUCE | PERF_COLL_ALLGATHER))) ||
        (coll->flags & PERF_COLL_REDUCE_SCATTER))
        printf("# algo auto: chosen per call (the --csv 'algo' column shows the choice)\n");
    if (a->check)
        printf("# #wrong: elements differing from the exact expected value, summed over ranks "
               "(untimed pass)\n");
    if (a->csv_path != NULL)
        printf("#\n# Writing results to file: %s\n", a->csv_path);
    printf("#\n");
    perf_print_columns(eng);

out_free:
    free(all);
    return st;
}

/* Allocate everything; returns 0, or PERF_EXIT_* agreed by all ranks. */
static int perf_engine_setup(perf_engine_t *eng)
{
    const perf_coll_t *coll = eng->coll;
    size_t send_cap = 0, recv_cap = 0, count, sb, rb;
    int32_t fail = 0, fail_all = 0;
    flx_status_t st;
    int n = eng->args.iters;

    eng->rank = flx_comm_rank(eng->comm);
    eng->nranks = flx_comm_size(eng->comm);
    eng->blocking = eng->args.blocking || !(coll->flags & PERF_COLL_NONBLOCKING);
    /* -a all: ring, tree (allreduce only), rd, hd (allreduce only), then
     * auto at every size; a
     * tool without -a (broadcast) runs its one way */
    eng->nalgos = 0;
    if (eng->args.all_algos && (coll->flags & PERF_COLL_USES_ALGO)) {
        eng->algos[eng->nalgos++] = FLX_ALGO_RING;
        if (coll->flags & PERF_COLL_ALLREDUCE)
            eng->algos[eng->nalgos++] = FLX_ALGO_TREE;
        eng->algos[eng->nalgos++] = FLX_ALGO_RD;
        if (coll->flags & PERF_COLL_ALLREDUCE)
            eng->algos[eng->nalgos++] = FLX_ALGO_HD;
    }
    eng->algos[eng->nalgos++] = eng->args.algo; /* -a, or auto after the others */
    if (eng->args.model) {
        flx_config_t cfg;

        /* the knobs the communicator read (so FLX_CHUNK_SIZE is valid) */
        if (flx_config_load(&cfg) != FLX_OK ||
            flx_comm_link_model(eng->comm, &eng->link) != FLX_OK)
            fail = PERF_EXIT_FAIL;
        else
            eng->chunk = (double)cfg.chunk_size;
    }

    if ((coll->flags & PERF_COLL_USES_ROOT) && eng->args.root >= eng->nranks) {
        if (eng->rank == 0)
            fprintf(stderr, "%s: root %d out of range for %d ranks\n", coll->name,
                    eng->args.root, eng->nranks);
        return PERF_EXIT_USAGE;
    }

    for (int d = 0; d < FLX_DTYPE_COUNT; d++) {
        if (!(eng->args.dtypes & (1u << d)))
            continue;
        coll->counts(eng->args.max_bytes, flx_dtype_size((flx_dtype_t)d), eng->nranks, &count,
                     &sb, &rb);
        send_cap = sb > send_cap ? sb : send_cap;
        recv_cap = rb > recv_cap ? rb : recv_cap;
    }
    {   /* the buffers are touched in full: more than this host's memory for
         * its ranks would end in the OOM killer, not in an error */
        const char *ls = getenv("FLX_LOCAL_SIZE");
        double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        double local = ls && atoi(ls) > 0 ? atoi(ls) : 1;
        if (phys > 0 && (double)(send_cap + recv_cap) * local > phys) {
            if (eng->rank == 0)
                fprintf(stderr, "%s: -e %zu needs %zu + %zu bytes of buffers per rank, %.0f "
                        "ranks here: more than this host's %.1f GiB (lower -e)\n", coll->name,
                        eng->args.max_bytes, send_cap, recv_cap, local, phys / 1073741824.0);
            return PERF_EXIT_USAGE;
        }
    }
    if (posix_memalign(&eng->sendbuf, 4096, send_cap ? send_cap : 64) != 0 ||
        posix_memalign(&eng->recvbuf, 4096, recv_cap ? recv_cap : 64) != 0) {
        fprintf(stderr, "%s: rank %d: cannot allocate %zu + %zu bytes of buffers\n",
                coll->name, eng->rank, send_cap, recv_cap);
        fail = PERF_EXIT_FAIL;
    } else {
        /* fault the pages in before anything is timed */
        memset(eng->sendbuf, 0, send_cap ? send_cap : 64);
        memset(eng->recvbuf, 0, recv_cap ? recv_cap : 64);
        /* long-lived buffers: registered once on the ib backend, as a
         * trainer registers its gradients */
        if (flx_mem_register(eng->comm, eng->sendbuf, send_cap ? send_cap : 64) != FLX_OK ||
            flx_mem_register(eng->comm, eng->recvbuf, recv_cap ? recv_cap : 64) != FLX_OK)
            fail = PERF_EXIT_FAIL;
    }
    eng->times = calloc((size_t)n, sizeof(double));
    eng->reqs = calloc((size_t)n + (size_t)eng->args.warmup + 1, sizeof(flx_request_h));
    if (fail == 0 && (eng->times == NULL || eng->reqs == NULL)) {
        fprintf(stderr, "%s: rank %d: out of memory\n", coll->name, eng->rank);
        fail = PERF_EXIT_FAIL;
    }
    if (fail == 0 && eng->rank == 0 && eng->args.csv_path != NULL) {
        eng->csv = fopen(eng->args.csv_path, "w");
        if (eng->csv == NULL) {
            fprintf(stderr, "%s: cannot open %s for writing: %m\n", coll->name,
                    eng->args.csv_path);
            fail = PERF_EXIT_USAGE;
        } else {
            perf_csv_header(eng);
        }
    }

    /* every rank leaves together */
    st = flx_allreduce(eng->comm, &fail, &fail_all, 1, FLX_INT32, FLX_MAX, FLX_ALGO_AUTO);
    if (st != FLX_OK) {
        fprintf(stderr, "%s: rank %d: flx_allreduce (setup): %s\n", coll->name, eng->rank,
                flx_status_string(st));
        return PERF_EXIT_FAIL;
    }
    return fail_all;
}

int perf_csv_close(FILE *csv, const char *path, const char *prog)
{
    int bad;

    if (csv == NULL)
        return 0;
    bad = ferror(csv);
    if (fclose(csv) != 0) {
        fprintf(stderr, "%s: writing %s failed: %s\n", prog, path, strerror(errno));
        return -1;
    }
    if (bad) {
        fprintf(stderr, "%s: writing %s failed\n", prog, path);
        return -1;
    }
    return 0;
}

int perf_stdout_close(const char *prog)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "%s: writing to standard output failed\n", prog);
        return -1;
    }
    return 0;
}

/* 0, or -1 when the CSV could not be written (said) */
static int perf_engine_teardown(perf_engine_t *eng)
{
    int bad = perf_csv_close(eng->csv, eng->args.csv_path, eng->coll->name);

    eng->csv = NULL;
    free(eng->reqs);
    free(eng->times);
    if (eng->recvbuf)
        flx_mem_deregister(eng->comm, eng->recvbuf);
    if (eng->sendbuf)
        flx_mem_deregister(eng->comm, eng->sendbuf);
    free(eng->recvbuf);
    free(eng->sendbuf);
    return bad;
}

int perf_main(const perf_coll_t *coll, int argc, char **argv)
{
    perf_engine_t eng;
    flx_status_t st;
    const int quiet = perf_env_nonzero_rank();
    char accept[32];
    int rc;

    setvbuf(stdout, NULL, _IOLBF, 0);
    memset(&eng, 0, sizeof(eng));
    eng.coll = coll;
    perf_args_default(&eng.args);
    perf_coll_accept(coll, accept, sizeof(accept));
    rc = perf_args_parse(&eng.args, coll->name, accept, quiet, argc, argv);
    if (rc == PERF_PARSE_ERROR && quiet) { /* after rank 0, if still running */
        perf_quiet_wait();
        perf_args_default(&eng.args);
        rc = perf_args_parse(&eng.args, coll->name, accept, 0, argc, argv);
    }
    if (rc == PERF_PARSE_HELP)
        return PERF_EXIT_OK;
    if (rc != 0)
        return PERF_EXIT_USAGE;
    /* the reduce-scatter and broadcast calls have no algorithm argument: -a
     * would be ignored (the broadcast took it and ran its own choice) */
    if (!(coll->flags & PERF_COLL_USES_ALGO) && (eng.args.algo != FLX_ALGO_AUTO ||
                                                  eng.args.all_algos)) {
        if (quiet)
            perf_quiet_wait();
        perf_arg_error(coll->name, 0, (coll->flags & PERF_COLL_REDUCE_SCATTER)
                           ? "-a does not apply: the library picks the reduce-scatter's "
                             "algorithm (FLX_ALGO=ring|rd|tree|hd forces it)"
                           : "-a does not apply: the library picks the broadcast's algorithm "
                             "(binomial tree or pipelined chain) from its model");
        return PERF_EXIT_USAGE;
    }

    st = flx_comm_create(NULL, &eng.comm);
    if (st != FLX_OK) {
        fprintf(stderr, "%s: flx_comm_create: %s\n", coll->name, flx_status_string(st));
        return PERF_EXIT_FAIL;
    }

    rc = perf_engine_setup(&eng);
    if (rc != 0)
        goto out_teardown;

    st = perf_print_header(&eng);
    if (st != FLX_OK) {
        fprintf(stderr, "%s: rank %d: gathering rank information: %s\n", coll->name, eng.rank,
                flx_status_string(st));
        rc = PERF_EXIT_FAIL;
        goto out_teardown;
    }
    /* Let a launcher relay the header (a write a line) before anything is
     * timed: where ranks and cores are as many and the ranks busy-poll, the
     * relay took a rank's core for about a millisecond inside the first
     * size's timed calls (under flxrun 4 of 8 2-rank sweeps, with the
     * output in files 0 of 8). */
    usleep(20000);

    for (int d = 0; d < FLX_DTYPE_COUNT && rc == 0; d++) {
        if (!(eng.args.dtypes & (1u << d)))
            continue;
        for (int o = 0; o < FLX_OP_COUNT && rc == 0; o++) {
            if ((coll->flags & PERF_COLL_USES_OP) ? !(eng.args.ops & (1u << o)) : o != 0)
                continue;
            int empty = 0;
            st = perf_sweep(&eng, (flx_dtype_t)d, (flx_op_t)o, &empty);
            if (st != FLX_OK)
                rc = empty ? PERF_EXIT_USAGE : PERF_EXIT_FAIL;
        }
    }

    if (rc == 0 && eng.rank == 0) {
        printf("# Out of bounds values : %ld %s\n", eng.wrong_rows,
               eng.wrong_rows ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n",
               eng.bw_count ? eng.bw_sum / (double)eng.bw_count : 0.0);
        printf("#\n# Collective test concluded: %s\n", coll->name);
    }
    if (rc == 0 && eng.wrong_rows != 0)
        rc = PERF_EXIT_FAIL;

out_teardown:
    if (perf_engine_teardown(&eng) != 0 && rc == 0) /* a report that could not be written */
        rc = PERF_EXIT_FAIL;
    st = flx_comm_destroy(eng.comm);
    if (st != FLX_OK && rc == 0) {
        fprintf(stderr, "%s: flx_comm_destroy: %s\n", coll->name, flx_status_string(st));
        rc = PERF_EXIT_FAIL;
    }
    if (perf_stdout_close(coll->name) != 0 && rc == 0)
        rc = PERF_EXIT_FAIL;
    return rc;
}

int perf_parse_fractions(const char *s, double *out, int max)
{
    char buf[256], *next;
    int n = 0;

    if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
        return -1;
    for (char *tok = buf; tok != NULL; tok = next) { /* an empty field is an error */
        char *end;
        double c;

        next = strchr(tok, ',');
        if (next != NULL)
            *next++ = '\0';
        c = strtod(tok, &end);
        if (end == tok || *end != '\0' || !(c > 0 && c <= 1) || n == max)
            return -1;
        out[n++] = c;
    }
    return n;
}
