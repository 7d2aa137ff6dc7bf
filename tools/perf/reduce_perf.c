/* reduce_perf.c -- flx-reduce-perf: the local reduction kernel
 * flx_reduce(inout, in, count, type, op) against memcpy of the same bytes,
 * in one process, so one can see whether the sum runs near memory bandwidth.
 *
 * Bytes moved per call: reduce 3 x size (read inout, read in, write inout),
 * memcpy(inout, in, size) 2 x size.  GB/s = 1e9 bytes/s.  Each sample times
 * max(1, 32 MiB / size) back-to-back calls; the row shows the median of -n
 * samples after -w warm-up samples.  The reduction alternates between in = x
 * and in = -x (x and 1/x for prod) so inout keeps its values, whatever the
 * number of calls.  -c 1 checks one reduction of two ranks' perf inputs
 * (FLX_AVG finished with flx_reduce_finish) against the exact result. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tools/perf/perf.h"

#include "common/dtype.h"
#include "common/time.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REDUCE_PERF_NAME "flx-reduce-perf"
#define REDUCE_SAMPLE_BYTES ((size_t)32 << 20)

typedef struct {
    perf_args_t args;
    void *inout;
    void *in_a;    /* x                */
    void *in_b;    /* -x (1/x for prod) */
    double *samples;
    double ratio_sum; /* reduce/memcpy GB/s ratio, sizes >= 1 MiB */
    long ratio_count;
    uint64_t wrong_total;
} reduce_perf_t;

typedef struct {
    double reduce_s; /* per call */
    double memcpy_s;
    int64_t wrong;   /* -1: not checked */
} reduce_result_t;

/* b[i] = -a[i], or 1/a[i] for prod (a's prod inputs are -1, 1, 2: exact). */
static void reduce_fill_inverse(void *b, const void *a, size_t count, flx_dtype_t dtype,
                                flx_op_t op)
{
    for (size_t i = 0; i < count; i++) {
        switch (dtype) {
        case FLX_FLOAT32: {
            float v = ((const float *)a)[i];
            ((float *)b)[i] = op == FLX_PROD ? 1.0f / v : -v;
            break;
        }
        case FLX_FLOAT64: {
            double v = ((const double *)a)[i];
            ((double *)b)[i] = op == FLX_PROD ? 1.0 / v : -v;
            break;
        }
        case FLX_FLOAT16: {
            float v = flx_half_to_float(((const uint16_t *)a)[i]);
            ((uint16_t *)b)[i] = flx_float_to_half(op == FLX_PROD ? 1.0f / v : -v);
            break;
        }
        case FLX_BFLOAT16: {
            float v = flx_bf16_to_float(((const uint16_t *)a)[i]);
            ((uint16_t *)b)[i] = flx_float_to_bf16(op == FLX_PROD ? 1.0f / v : -v);
            break;
        }
        case FLX_INT32: {
            int32_t v = ((const int32_t *)a)[i];
            ((int32_t *)b)[i] = op == FLX_PROD ? v : -v;
            break;
        }
        case FLX_INT64: {
            int64_t v = ((const int64_t *)a)[i];
            ((int64_t *)b)[i] = op == FLX_PROD ? v : -v;
            break;
        }
        default:
            break;
        }
    }
}

static int reduce_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double reduce_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), reduce_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median time per call of `reps` calls, over the samples. */
static double reduce_time(reduce_perf_t *rp, size_t count, size_t bytes, flx_dtype_t dtype,
                          flx_op_t op, int use_memcpy, long reps)
{
    int total = rp->args.warmup + rp->args.iters;

    for (int s = 0; s < total; s++) {
        double t0 = flx_time_now();

        if (use_memcpy) {
            for (long k = 0; k < reps; k++)
                memcpy(rp->inout, (k & 1) ? rp->in_b : rp->in_a, bytes);
        } else {
            for (long k = 0; k < reps; k++)
                flx_reduce(rp->inout, (k & 1) ? rp->in_b : rp->in_a, count, dtype, op);
        }
        if (s >= rp->args.warmup)
            rp->samples[s - rp->args.warmup] = (flx_time_now() - t0) / (double)reps;
    }
    return reduce_median(rp->samples, rp->args.iters);
}

static void reduce_run_size(reduce_perf_t *rp, size_t count, flx_dtype_t dtype, flx_op_t op,
                            reduce_result_t *res)
{
    size_t bytes = count * flx_dtype_size(dtype);
    long reps = bytes >= REDUCE_SAMPLE_BYTES ? 1 : (long)(REDUCE_SAMPLE_BYTES / bytes);

    /* inout = rank 0's inputs; in alternates between rank 1's x and its inverse */
    perf_fill_input(rp->inout, count, dtype, op, 0);
    perf_fill_input(rp->in_a, count, dtype, op, 1);
    reduce_fill_inverse(rp->in_b, rp->in_a, count, dtype, op);
    res->reduce_s = reduce_time(rp, count, bytes, dtype, op, 0, reps);
    res->memcpy_s = reduce_time(rp, count, bytes, dtype, op, 1, reps);

    res->wrong = -1;
    if (rp->args.check) {
        perf_fill_input(rp->inout, count, dtype, op, 0);
        perf_fill_input(rp->in_a, count, dtype, op, 1);
        flx_reduce(rp->inout, rp->in_a, count, dtype, op);
        flx_reduce_finish(rp->inout, count, dtype, op, 2);
        res->wrong = (int64_t)perf_count_wrong_reduce(rp->inout, count, dtype, op, 2);
    }
}

static void reduce_print_header(const reduce_perf_t *rp)
{
    const perf_args_t *a = &rp->args;
    char step[64];

    if (a->step_factor >= 2)
        snprintf(step, sizeof(step), "%u(factor)", a->step_factor);
    else
        snprintf(step, sizeof(step), "%zu(bytes)", a->step_bytes);
    printf("# Local reduction test starting: %s\n", REDUCE_PERF_NAME);
    printf("# minBytes %zu maxBytes %zu step: %s warmup samples: %d samples: %d "
           "validation: %d\n",
           a->min_bytes, a->max_bytes, step, a->warmup, a->iters, a->check);
    printf("#\n# flexcoll %s (%s)\n#\n", flx_version_string(), flx_build_features());
    printf("# reduce: flx_reduce(inout, in, count, type, op), 3 x size bytes moved per call\n");
    printf("# memcpy: memcpy(inout, in, size), 2 x size bytes moved per call\n");
    printf("# time  : median over samples of the time per call; a sample is "
           "max(1, 32 MiB / size) calls\n");
    printf("# ratio : reduce GB/s / memcpy GB/s (1.00 = the reduction moves bytes as fast "
           "as memcpy)\n");
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %8s  %8s  %8s  %8s  %6s  %6s\n", "size", "count", "type",
           "redop", "reduce", "reduce", "memcpy", "memcpy", "ratio", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %8s  %8s  %8s  %8s  %6s  %6s\n", "(B)", "(elements)", "",
           "", "(us)", "(GB/s)", "(us)", "(GB/s)", "", "");
}

static void reduce_sweep(reduce_perf_t *rp, flx_dtype_t dtype, flx_op_t op)
{
    size_t es = flx_dtype_size(dtype);
    reduce_result_t res;
    char t1[32], t2[32], w[32];

    for (size_t size = rp->args.min_bytes, next;; size = next) {
        size_t count = size / es;

        if (count != 0) {
            double rbw, mbw;

            reduce_run_size(rp, count, dtype, op, &res);
            rbw = 3.0 * (double)(count * es) / 1e9 / res.reduce_s;
            mbw = 2.0 * (double)(count * es) / 1e9 / res.memcpy_s;
            perf_format_us(t1, sizeof(t1), res.reduce_s * 1e6);
            perf_format_us(t2, sizeof(t2), res.memcpy_s * 1e6);
            if (res.wrong < 0)
                snprintf(w, sizeof(w), "%s", "N/A");
            else
                snprintf(w, sizeof(w), "%lld", (long long)res.wrong);
            printf("%12zu  %12zu  %8s  %6s  %8s  %8.2f  %8s  %8.2f  %6.2f  %6s\n", count * es,
                   count, flx_dtype_name(dtype), flx_op_name(op), t1, rbw, t2, mbw, rbw / mbw,
                   w);
            if (count * es >= ((size_t)1 << 20)) {
                rp->ratio_sum += rbw / mbw;
                rp->ratio_count++;
            }
            if (res.wrong > 0)
                rp->wrong_total += (uint64_t)res.wrong;
        }
        next = perf_next_size(&rp->args, size);
        if (next <= size)
            break;
    }
}

int main(int argc, char **argv)
{
    reduce_perf_t rp;
    size_t cap;
    int rc;

    setvbuf(stdout, NULL, _IOLBF, 0);
    memset(&rp, 0, sizeof(rp));
    perf_args_default(&rp.args);
    rp.args.min_bytes = (size_t)4 << 10;
    rp.args.max_bytes = (size_t)256 << 20;
    rc = perf_args_parse(&rp.args, REDUCE_PERF_NAME, "befinwcdo", 0, argc, argv);
    if (rc == PERF_PARSE_HELP)
        return PERF_EXIT_OK;
    if (rc != 0)
        return PERF_EXIT_USAGE;

    cap = rp.args.max_bytes ? rp.args.max_bytes : 64;
    rc = PERF_EXIT_FAIL;
    if (posix_memalign(&rp.inout, 4096, cap) != 0) {
        fprintf(stderr, "%s: cannot allocate 3 x %zu bytes\n", REDUCE_PERF_NAME, cap);
        goto out;
    }
    if (posix_memalign(&rp.in_a, 4096, cap) != 0) {
        fprintf(stderr, "%s: cannot allocate 3 x %zu bytes\n", REDUCE_PERF_NAME, cap);
        goto out_free_inout;
    }
    if (posix_memalign(&rp.in_b, 4096, cap) != 0) {
        fprintf(stderr, "%s: cannot allocate 3 x %zu bytes\n", REDUCE_PERF_NAME, cap);
        goto out_free_in_a;
    }
    rp.samples = calloc((size_t)rp.args.iters, sizeof(double));
    if (rp.samples == NULL) {
        fprintf(stderr, "%s: out of memory\n", REDUCE_PERF_NAME);
        goto out_free_in_b;
    }
    /* fault the pages in before anything is timed */
    memset(rp.inout, 0, cap);
    memset(rp.in_a, 0, cap);
    memset(rp.in_b, 0, cap);

    reduce_print_header(&rp);
    for (int d = 0; d < FLX_DTYPE_COUNT; d++) {
        if (!(rp.args.dtypes & (1u << d)))
            continue;
        for (int o = 0; o < FLX_OP_COUNT; o++) {
            if (rp.args.ops & (1u << o))
                reduce_sweep(&rp, (flx_dtype_t)d, (flx_op_t)o);
        }
    }
    printf("# Wrong elements       : %llu %s\n", (unsigned long long)rp.wrong_total,
           rp.wrong_total ? "FAILED" : "OK");
    if (rp.ratio_count)
        printf("# Avg reduce/memcpy bandwidth ratio (sizes >= 1 MiB): %.2f\n",
               rp.ratio_sum / (double)rp.ratio_count);
    rc = rp.wrong_total ? PERF_EXIT_FAIL : PERF_EXIT_OK;

    free(rp.samples);
out_free_in_b:
    free(rp.in_b);
out_free_in_a:
    free(rp.in_a);
out_free_inout:
    free(rp.inout);
out:
    return rc;
}
