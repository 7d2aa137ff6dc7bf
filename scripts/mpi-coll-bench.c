/* mpi-coll-bench.c -- MPI_Allreduce / MPI_Allgather / MPI_Reduce_scatter_block
 * timed exactly as the
 * flx-*-perf tools time flexcoll, so that scripts/compare-mpi.sh can line the
 * two up: same size sweep, warm-up and iteration scheme, same columns.
 *
 *   mpicc -O2 -o mpi-coll-bench mpi-coll-bench.c -lm
 *   mpirun -np 4 ./mpi-coll-bench allreduce -b 4 -e 64M -f 2 -n 20 -w 5
 *
 * Collective: allreduce (float, sum), allgather (float; the size is the
 * gathered total, count per rank) or reduce_scatter (float, sum; the size is
 * each rank's input, count per rank of the result).  Per size and placement (out-of-place,
 * then in-place with MPI_IN_PLACE): -w warm-up calls, barrier, -n timed
 * calls each timed on its own; time = mean of the slowest rank; min/p50/p99
 * of the out-of-place iterations: each rank's nearest-rank percentiles, the
 * slowest rank's of each.  -c 1 checks one call on exact data in an
 * untimed pass.  algbw = size / time (1e9 B/s); busbw = algbw * 2(n-1)/n
 * (allreduce), algbw * (n-1)/n (allgather, reduce_scatter).  Standalone: it does not use
 * flexcoll (coll-bench.h beside it holds what it shares with
 * gloo-coll-bench.cc).
 */
#include <mpi.h>

#include "coll-bench.h"

#include <getopt.h>
#include <unistd.h>

enum { BENCH_ALLREDUCE, BENCH_ALLGATHER, BENCH_REDUCE_SCATTER };

static const char *const bench_colls[] = {"allreduce", "allgather", "reduce_scatter"};

typedef struct {
    int coll;
    bench_sweep_t sw;
} bench_args_t;

typedef struct {
    bench_args_t args;
    int rank, nranks;
    float *sendbuf, *recvbuf;
    double *times;
    double bw_sum;
    long bw_count, wrong_rows;
} bench_t;

typedef struct {
    double mean_s, min_s, p50_s, p99_s, algbw, busbw;
    long long wrong;
} bench_result_t;

static void bench_usage(FILE *out)
{
    fprintf(out, "usage: mpi-coll-bench allreduce|allgather|reduce_scatter [-b min] [-e max] [-f factor | -i step]"
                 " [-n iters] [-w warmup] [-c 0|1]\n");
}

/* 0 ok, 1 help, -1 error (message printed unless quiet) */
static int bench_parse(bench_args_t *a, int quiet, int argc, char **argv)
{
    int c;

    a->coll = -1;
    bench_sweep_defaults(&a->sw);
    opterr = 0;
    while ((c = getopt(argc, argv, ":b:e:f:i:n:w:c:h")) != -1) {
        int rc = bench_sweep_option(&a->sw, c, optarg);

        if (rc == 0)
            continue;
        if (rc < 0) {
            if (!quiet)
                fprintf(stderr, "mpi-coll-bench: invalid value '%s' for -%c\n", optarg, c);
            return -1;
        }
        if (c == 'h') {
            if (!quiet)
                bench_usage(stdout);
            return 1;
        }
        if (!quiet)
            fprintf(stderr, "mpi-coll-bench: bad option '%s'\n", argv[optind - 1]);
        return -1;
    }
    for (int k = 0; k < 3 && optind + 1 == argc; k++)
        if (strcmp(argv[optind], bench_colls[k]) == 0)
            a->coll = k;
    if (a->coll < 0 || a->sw.min_bytes > a->sw.max_bytes ||
        (a->sw.min_bytes == 0 && a->sw.step_factor)) {
        if (!quiet) {
            fprintf(stderr, "mpi-coll-bench: need one collective (allreduce, allgather or "
                            "reduce_scatter) "
                            "and minbytes <= maxbytes (> 0 with a factor)\n");
            bench_usage(stderr);
        }
        return -1;
    }
    return 0;
}

static int bench_call(bench_t *b, size_t count, int in_place)
{
    if (b->args.coll == BENCH_ALLREDUCE)
        return MPI_Allreduce(in_place ? MPI_IN_PLACE : b->sendbuf, b->recvbuf, (int)count,
                             MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (b->args.coll == BENCH_REDUCE_SCATTER) /* in place: the input in recvbuf, result at its start */
        return MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : b->sendbuf, b->recvbuf,
                                        (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return MPI_Allgather(in_place ? MPI_IN_PLACE : b->sendbuf, (int)count, MPI_FLOAT, b->recvbuf,
                         (int)count, MPI_FLOAT, MPI_COMM_WORLD);
}

static void bench_prepare(bench_t *b, size_t count, int in_place)
{
    if (b->args.coll == BENCH_ALLREDUCE) {
        bench_fill(in_place ? b->recvbuf : b->sendbuf, count, b->rank);
        if (!in_place)
            memset(b->recvbuf, 0xa5, count * sizeof(float));
    } else if (b->args.coll == BENCH_REDUCE_SCATTER) {
        size_t total = count * (size_t)b->nranks;
        bench_fill(in_place ? b->recvbuf : b->sendbuf, total, b->rank);
        if (!in_place)
            memset(b->recvbuf, 0xa5, count * sizeof(float));
    } else {
        memset(b->recvbuf, 0xa5, count * sizeof(float) * (size_t)b->nranks);
        bench_fill(in_place ? b->recvbuf + (size_t)b->rank * count : b->sendbuf, count, b->rank);
    }
}

static long long bench_wrong(const bench_t *b, size_t count)
{
    long long wrong = 0;

    if (b->args.coll == BENCH_ALLREDUCE) {
        for (size_t i = 0; i < count; i++) {
            double want = 0;

            for (int r = 0; r < b->nranks; r++)
                want += bench_value(r, i);
            wrong += b->recvbuf[i] != (float)want;
        }
    } else if (b->args.coll == BENCH_REDUCE_SCATTER) {
        for (size_t i = 0; i < count; i++) {
            double want = 0;

            for (int r = 0; r < b->nranks; r++)
                want += bench_value(r, (size_t)b->rank * count + i);
            wrong += b->recvbuf[i] != (float)want;
        }
    } else {
        for (int r = 0; r < b->nranks; r++)
            for (size_t i = 0; i < count; i++)
                wrong += b->recvbuf[(size_t)r * count + i] != bench_value(r, i);
    }
    return wrong;
}

static int bench_case(bench_t *b, size_t count, size_t bytes, int in_place, bench_result_t *res)
{
    int n = b->args.sw.iters, rc;
    double t0, t, prev, stats[4], stats_max[4];
    long long wrong;

    bench_prepare(b, count, in_place);
    for (int w = 0; w < b->args.sw.warmup; w++)
        if ((rc = bench_call(b, count, in_place)) != MPI_SUCCESS)
            return rc;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = prev = MPI_Wtime();
    for (int it = 0; it < n; it++) {
        if ((rc = bench_call(b, count, in_place)) != MPI_SUCCESS)
            return rc;
        t = MPI_Wtime();
        b->times[it] = t - prev;
        prev = t;
    }
    /* this rank's mean, min, p50, p99; then the slowest rank's of each */
    stats[0] = (MPI_Wtime() - t0) / n;
    qsort(b->times, (size_t)n, sizeof(double), bench_cmp_double);
    stats[1] = b->times[0];
    stats[2] = bench_percentile(b->times, n, 0.50);
    stats[3] = bench_percentile(b->times, n, 0.99);
    MPI_Allreduce(stats, stats_max, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    res->mean_s = stats_max[0];
    res->min_s = stats_max[1];
    res->p50_s = stats_max[2];
    res->p99_s = stats_max[3];
    res->algbw = (double)bytes / 1e9 / res->mean_s;
    res->busbw = res->algbw * (b->args.coll == BENCH_ALLREDUCE
                                   ? 2.0 * (b->nranks - 1) / b->nranks
                                   : (double)(b->nranks - 1) / b->nranks);
    res->wrong = -1;
    if (b->args.sw.check) {
        bench_prepare(b, count, in_place);
        if ((rc = bench_call(b, count, in_place)) != MPI_SUCCESS)
            return rc;
        wrong = bench_wrong(b, count);
        MPI_Allreduce(&wrong, &res->wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    }
    return MPI_SUCCESS;
}

static void bench_append(char *row, size_t len, const bench_result_t *res)
{
    bench_append_cols(row, len, res->mean_s, res->algbw, res->busbw, res->wrong);
}

static void bench_header(const bench_t *b)
{
    const bench_args_t *a = &b->args;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING], step[64];
    int len = 0;
    char *nl;

    MPI_Get_library_version(lib, &len);
    nl = strchr(lib, '\n');
    if (nl != NULL)
        *nl = '\0';
    bench_format_step(step, sizeof(step), &a->sw);
    printf("# Collective test starting: mpi-coll-bench %s\n", bench_colls[a->coll]);
    printf("# nRanks %d net mpi minBytes %zu maxBytes %zu step: %s warmup iters: %d "
           "iters: %d validation: %d blocking: 1\n",
           b->nranks, a->sw.min_bytes, a->sw.max_bytes, step, a->sw.warmup, a->sw.iters,
           a->sw.check);
    printf("#\n# %s\n#\n", lib);
    bench_print_columns(a->coll == BENCH_ALLREDUCE  ? "2(n-1)/n"
                        : a->coll == BENCH_ALLGATHER ? "(n-1)/n, size = gathered total"
                                                     : "(n-1)/n, size = each rank's input",
                        a->sw.iters, "");
}

static int bench_run(bench_t *b)
{
    const bench_args_t *a = &b->args;
    bench_result_t res[2];
    char row[512], s1[32], s2[32], s3[32];
    int rc;

    for (size_t size = a->sw.min_bytes, next;; size = next) {
        size_t count = a->coll == BENCH_ALLREDUCE ? size / sizeof(float)
                                                  : size / sizeof(float) / (size_t)b->nranks;
        /* the size: gathered total (allgather), each rank's input (reduce_scatter) */
        size_t bytes = count * sizeof(float) * (a->coll == BENCH_ALLREDUCE ? 1 : (size_t)b->nranks);

        if (count != 0) {
            for (int ip = 0; ip < 2; ip++) {
                rc = bench_case(b, count, bytes, ip, &res[ip]);
                if (rc != MPI_SUCCESS) {
                    fprintf(stderr, "mpi-coll-bench: rank %d: MPI error %d at %zu bytes\n",
                            b->rank, rc, bytes);
                    return rc;
                }
                b->bw_sum += res[ip].busbw;
                b->bw_count++;
                b->wrong_rows += res[ip].wrong > 0;
            }
            if (b->rank == 0) {
                snprintf(row, sizeof(row), "%12zu  %12zu  %8s  %6s  %6d", bytes, count, "float",
                         a->coll == BENCH_ALLGATHER ? "none" : "sum", -1);
                bench_append(row, sizeof(row), &res[0]);
                bench_append(row, sizeof(row), &res[1]);
                bench_format_us(s1, sizeof(s1), res[0].min_s * 1e6);
                bench_format_us(s2, sizeof(s2), res[0].p50_s * 1e6);
                bench_format_us(s3, sizeof(s3), res[0].p99_s * 1e6);
                printf("%s  %7s  %7s  %7s\n", row, s1, s2, s3);
            }
        }
        next = bench_next_size(&a->sw, size);
        if (next <= size)
            break;
    }
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    bench_t b;
    size_t send_cap, recv_cap;
    int rc;

    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Init(&argc, &argv);
    memset(&b, 0, sizeof(b));
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    rc = bench_parse(&b.args, b.rank != 0, argc, argv);
    if (rc != 0) {
        MPI_Finalize();
        return rc > 0 ? 0 : 2;
    }
    if (b.args.sw.max_bytes / sizeof(float) > (size_t)INT32_MAX) {
        if (b.rank == 0)
            fprintf(stderr, "mpi-coll-bench: maxbytes too large for an int count\n");
        MPI_Finalize();
        return 2;
    }
    send_cap = b.args.sw.max_bytes + sizeof(float);
    recv_cap = b.args.sw.max_bytes + sizeof(float) * (size_t)b.nranks;
    b.sendbuf = malloc(send_cap);
    b.recvbuf = malloc(recv_cap);
    b.times = calloc((size_t)b.args.sw.iters, sizeof(double));
    if (b.sendbuf == NULL || b.recvbuf == NULL || b.times == NULL) {
        fprintf(stderr, "mpi-coll-bench: rank %d: out of memory\n", b.rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(b.sendbuf, 0, send_cap);
    memset(b.recvbuf, 0, recv_cap);

    if (b.rank == 0)
        bench_header(&b);
    usleep(20000); /* the launcher relays the header before anything is timed, as in the
                      flx-*-perf tools */
    rc = bench_run(&b);
    if (rc == MPI_SUCCESS && b.rank == 0) {
        printf("# Out of bounds values : %ld %s\n", b.wrong_rows, b.wrong_rows ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n", b.bw_count ? b.bw_sum / (double)b.bw_count : 0.0);
        printf("#\n# Collective test concluded: mpi-coll-bench\n");
    }
    free(b.times);
    free(b.recvbuf);
    free(b.sendbuf);
    if (rc != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
    return b.wrong_rows ? 1 : 0;
}
