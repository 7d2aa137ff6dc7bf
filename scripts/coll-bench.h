/* coll-bench.h -- what mpi-coll-bench.c and gloo-coll-bench.cc share, so that
 * both time and print exactly alike (and alike the flx-*-perf tools, whose
 * values, sweep and columns they copy): size parsing, the size sweep, the
 * exact test values, percentiles, the row and the column titles.  C and C++;
 * every function static, the header included by one source file each.
 */
#ifndef COLL_BENCH_H
#define COLL_BENCH_H

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* 8, 4k, 1M, 64KiB, 1G -> bytes; -1 on malformed input */
static int bench_parse_size(const char *s, size_t *out_p)
{
    char *end;
    double v = strtod(s, &end), mult = 1;

    if (end == s || v < 0)
        return -1;
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k': mult = 1024.0; end++; break;
    case 'm': mult = 1024.0 * 1024; end++; break;
    case 'g': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'b': break;
    default: return -1;
    }
    if (strcasecmp(end, "ib") == 0 || strcasecmp(end, "b") == 0)
        end += strlen(end);
    if (*end != '\0')
        return -1;
    *out_p = (size_t)(v * mult);
    return 0;
}

static int bench_parse_int(const char *s, long min, long max, int *out_p)
{
    char *end;
    long v = strtol(s, &end, 10);

    if (end == s || *end != '\0' || v < min || v > max)
        return -1;
    *out_p = (int)v;
    return 0;
}

/* the sweep: sizes, iterations, warm-up, check (nccl-tests' -b -e -f -i -n -w -c) */
typedef struct {
    size_t min_bytes, max_bytes, step_bytes;
    unsigned step_factor; /* 0: add step_bytes */
    int iters, warmup, check;
} bench_sweep_t;

static void bench_sweep_defaults(bench_sweep_t *w)
{
    w->min_bytes = 8;
    w->max_bytes = (size_t)64 << 20;
    w->step_bytes = (size_t)1 << 20;
    w->step_factor = 2;
    w->iters = 20;
    w->warmup = 5;
    w->check = 1;
}

/* getopt's option c with value arg: 0 taken, -1 a bad value, 1 not a sweep option */
static int bench_sweep_option(bench_sweep_t *w, int c, const char *arg)
{
    int f;

    switch (c) {
    case 'b': return bench_parse_size(arg, &w->min_bytes);
    case 'e': return bench_parse_size(arg, &w->max_bytes);
    case 'f':
        if (bench_parse_int(arg, 1, 1 << 20, &f) != 0)
            return -1;
        w->step_factor = f == 1 ? 0 : (unsigned)f;
        return 0;
    case 'i':
        w->step_factor = 0;
        return bench_parse_size(arg, &w->step_bytes) != 0 || w->step_bytes == 0 ? -1 : 0;
    case 'n': return bench_parse_int(arg, 1, 10000000, &w->iters);
    case 'w': return bench_parse_int(arg, 0, 10000000, &w->warmup);
    case 'c': return bench_parse_int(arg, 0, 1, &w->check);
    default: return 1;
    }
}

/* the size after size: times step_factor (>= 2), else plus step_bytes; 0
 * past max_bytes or on overflow */
static size_t bench_next_size(const bench_sweep_t *w, size_t size)
{
    size_t next;

    if (w->step_factor >= 2) {
        if (size > SIZE_MAX / w->step_factor)
            return 0;
        next = size * w->step_factor;
    } else {
        if (size > SIZE_MAX - w->step_bytes)
            return 0;
        next = size + w->step_bytes;
    }
    return next > w->max_bytes ? 0 : next;
}

/* "step: 2(factor)" or "step: 1048576(bytes)" of the header */
static void bench_format_step(char *buf, size_t len, const bench_sweep_t *w)
{
    if (w->step_factor >= 2)
        snprintf(buf, len, "%u(factor)", w->step_factor);
    else
        snprintf(buf, len, "%zu(bytes)", w->step_bytes);
}

static void bench_format_us(char *buf, size_t len, double us)
{
    if (us >= 10000.0)
        snprintf(buf, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(buf, len, "%7.1f", us);
    else
        snprintf(buf, len, "%7.2f", us);
}

/* Exact in float: multiples of 1/8 in [-16, 16), sums of up to 2^20 ranks. */
static float bench_value(int rank, size_t i)
{
    uint32_t h = (uint32_t)i * 2654435761u ^ ((uint32_t)rank + 1u) * 0x85ebca6bu;

    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return (float)((int)(h % 256u) - 128) * 0.125f;
}

static void bench_fill(float *p, size_t count, int rank)
{
    for (size_t i = 0; i < count; i++)
        p[i] = bench_value(rank, i);
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* nearest-rank percentile p of the n sorted values v */
static double bench_percentile(const double *v, int n, double p)
{
    long k = (long)ceil(p * n) - 1;

    return v[k < 0 ? 0 : (k >= n ? n - 1 : k)];
}

/* one placement's columns appended to row: time algbw busbw #wrong (wrong < 0: N/A) */
static void bench_append_cols(char *row, size_t len, double mean_s, double algbw, double busbw,
                              long long wrong)
{
    size_t used = strlen(row);
    char t[32], w[32];

    bench_format_us(t, sizeof(t), mean_s * 1e6);
    if (wrong < 0)
        snprintf(w, sizeof(w), "N/A");
    else
        snprintf(w, sizeof(w), "%lld", wrong);
    snprintf(row + used, len - used, "  %7s  %6.2f  %6.2f  %5s", t, algbw, busbw, w);
}

/* the lines from "# time" to the column units; last_col: a title after p99
 * ("" for none) */
/* busbw_doc: "2(n-1)/n" (allreduce), "(n-1)/n, size = gathered total"... */
static void bench_print_columns(const char *busbw_doc, int iters, const char *last_col)
{
    printf("# time  : mean time per iteration of the slowest rank (max over ranks)\n");
    printf("# algbw : size / time, GB/s = 1e9 B/s; busbw = algbw * %s\n", busbw_doc);
    printf("# min, p50, p99 : per-iteration times of the out-of-place run: each rank's\n"
           "#   nearest-rank percentiles over its %d iterations, the slowest rank's (us)\n#\n",
           iters);
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
           "in-place            out-of-place iterations\n",
           "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %7s  %7s  %7s%s%s\n",
           "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
           "algbw", "busbw", "#wrong", "min", "p50", "p99", *last_col ? "  " : "", last_col);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s  %7s  %7s  %7s\n",
           "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
           "(GB/s)", "", "(us)", "(us)", "(us)");
}

#endif
