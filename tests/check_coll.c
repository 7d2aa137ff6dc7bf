/* check_coll.c -- every collective x algorithm x dtype x op on real forked
 * ranks over real sockets, N = 1, 2, 3, 4, 5, 8, compared element-wise with
 * a serial reference computed from every rank's input.
 *
 * Inputs are multiples of 1/8 in [-1, 1] (products: 0.5, 1, 2, -1), so that
 * sums and products of up to 8 ranks are exact in every dtype, half types
 * included: a correct result matches the reference exactly (avg within one
 * rounding of the division). */
#include "tests/mp.h"
#include "collectives/coll.h"
#include "common/dtype.h"
#include "common/util.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/mman.h>

/* the large size: 4 MiB for float32 (eight default 512 KiB pipeline
 * chunks), a quarter of it for the other dtypes that have one (big_dtype);
 * or FLX_TEST_BIG_BYTES (smaller in the sanitizer build and the slow
 * SoftRoCE VM, where it still exceeds the eager limit; larger for a longer
 * run) */
static size_t big_bytes(void)
{
    const char *v = getenv("FLX_TEST_BIG_BYTES");
    size_t b = v ? strtoull(v, NULL, 0) : 0;
    return b ? b : (size_t)4 << 20;
}
#define BIG_BYTES big_bytes()

/* ---- values ------------------------------------------------------------- */

static double input_value(int rank, size_t i, flx_op_t op, flx_dtype_t dt)
{
    static const double prod_vals[4] = {0.5, 1.0, 2.0, -1.0};
    static const double prod_ints[4] = {1.0, 2.0, -1.0, 1.0};
    int k = (int)((rank * 7 + i * 3) % 17) - 8;

    if (op == FLX_PROD)
        return (dt == FLX_INT32 || dt == FLX_INT64) ? prod_ints[(rank + i) % 4]
                                                    : prod_vals[(rank + i) % 4];
    return (dt == FLX_INT32 || dt == FLX_INT64) ? k : k / 8.0;
}

static void put(void *buf, size_t i, flx_dtype_t dt, double v)
{
    switch (dt) {
    case FLX_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case FLX_FLOAT64: ((double *)buf)[i] = v; break;
    case FLX_FLOAT16: ((uint16_t *)buf)[i] = flx_float_to_half((float)v); break;
    case FLX_BFLOAT16: ((uint16_t *)buf)[i] = flx_float_to_bf16((float)v); break;
    case FLX_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case FLX_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: break;
    }
}

static double get(const void *buf, size_t i, flx_dtype_t dt)
{
    switch (dt) {
    case FLX_FLOAT32: return ((const float *)buf)[i];
    case FLX_FLOAT64: return ((const double *)buf)[i];
    case FLX_FLOAT16: return flx_half_to_float(((const uint16_t *)buf)[i]);
    case FLX_BFLOAT16: return flx_bf16_to_float(((const uint16_t *)buf)[i]);
    case FLX_INT32: return ((const int32_t *)buf)[i];
    case FLX_INT64: return (double)((const int64_t *)buf)[i];
    default: return NAN;
    }
}

static double reference_of(int size, size_t i, flx_op_t op, flx_dtype_t dt)
{
    double acc = input_value(0, i, op, dt);

    for (int r = 1; r < size; r++) {
        double v = input_value(r, i, op, dt);
        switch (op) {
        case FLX_SUM: case FLX_AVG: acc += v; break;
        case FLX_PROD: acc *= v; break;
        case FLX_MIN: acc = v < acc ? v : acc; break;
        case FLX_MAX: acc = v > acc ? v : acc; break;
        default: break;
        }
    }
    if (op == FLX_AVG)
        acc = (dt == FLX_INT32 || dt == FLX_INT64) ? trunc(acc / size) : acc / size;
    return acc;
}

/* input_value repeats in i with period lcm(17, 4) = 68, so the reference
 * does too: each rank computes the 68 values of the current (size, op,
 * dtype) once instead of an O(size) fold per element of the large buffer */
#define REF_PERIOD 68

static double reference(int size, size_t i, flx_op_t op, flx_dtype_t dt)
{
    static int c_size = -1;
    static flx_op_t c_op;
    static flx_dtype_t c_dt;
    static double tab[REF_PERIOD];

    if (size != c_size || op != c_op || dt != c_dt) {
        for (size_t j = 0; j < REF_PERIOD; j++)
            tab[j] = reference_of(size, j, op, dt);
        c_size = size;
        c_op = op;
        c_dt = dt;
    }
    return tab[i % REF_PERIOD];
}

static int close_enough(double got, double want, flx_dtype_t dt, flx_op_t op)
{
    double tol = 0;

    if (op == FLX_AVG && dt != FLX_INT32 && dt != FLX_INT64)
        tol = dt == FLX_FLOAT16 ? 1e-3 : dt == FLX_BFLOAT16 ? 8e-3 : 1e-6;
    return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

/* ---- the per-rank bodies ------------------------------------------------- */

static const flx_dtype_t all_dtypes[] = {FLX_FLOAT32, FLX_FLOAT64, FLX_FLOAT16,
                                         FLX_BFLOAT16, FLX_INT32, FLX_INT64};

/* The large size runs for one dtype of each element size (4, 2 and 8
 * bytes: what changes how chunks and segments split), the whole of it for
 * float32 and a quarter for float16 and int64; the small ones for every
 * dtype.  Which element sizes take the reduction kernels' paths is
 * check_reduce's. */
static int big_dtype(flx_dtype_t dt)
{
    return dt == FLX_FLOAT32 || dt == FLX_FLOAT16 || dt == FLX_INT64;
}

/* The counts to test, the large one (if big_dtype(dt)) last. */
static size_t sizes_for(int n, flx_dtype_t dt, size_t big_total, size_t *out)
{
    size_t k = 0;
    size_t big = (dt == FLX_FLOAT32 ? big_total : big_total / 4) / flx_dtype_size(dt);

    out[k++] = 0;
    out[k++] = 1;
    if (n > 2)
        out[k++] = (size_t)n - 1;
    out[k++] = (size_t)n + 1;
    out[k++] = 1001;
    if (big_dtype(dt))
        out[k++] = big + 3; /* >= the large size, not a multiple of anything */
    return k;
}

static int check_allreduce(flx_comm_h comm, int rank, int size, flx_algo_t algo,
                           flx_dtype_t dt, flx_op_t op, size_t count, int in_place)
{
    size_t es = flx_dtype_size(dt);
    char *send = malloc(count * es + 1), *recv = malloc(count * es + 1);
    flx_status_t st;
    int rc = 0;

    for (size_t i = 0; i < count; i++)
        put(send, i, dt, input_value(rank, i, op, dt));
    if (in_place)
        memcpy(recv, send, count * es);
    st = flx_allreduce(comm, in_place ? recv : send, recv, count, dt, op, algo);
    if (st != FLX_OK)
        rc = mp_fail(rank, "allreduce %s %s %s n=%zu: %s", flx_algo_name(algo),
                     flx_dtype_name(dt), flx_op_name(op), count, flx_status_string(st));
    for (size_t i = 0; i < count && rc == 0; i++) {
        double want = reference(size, i, op, dt), got = get(recv, i, dt);
        if (!close_enough(got, want, dt, op))
            rc = mp_fail(rank, "allreduce %s %s %s n=%zu%s: [%zu] = %g, want %g",
                         flx_algo_name(algo), flx_dtype_name(dt), flx_op_name(op), count,
                         in_place ? " in place" : "", i, got, want);
    }
    for (size_t i = 0; i < count && rc == 0 && !in_place; i++)
        if (get(send, i, dt) != input_value(rank, i, op, dt) &&
            !isnan(get(send, i, dt)))
            rc = mp_fail(rank, "allreduce modified its send buffer");
    free(send);
    free(recv);
    return rc;
}

/* count float32 inputs of rank in read-only pages of *len_p bytes (munmap
 * them), or NULL after a failure line */
static float *readonly_input(int rank, size_t count, size_t *len_p)
{
    size_t len = FLX_MAX(count * sizeof(float), (size_t)1);
    float *send = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (send == MAP_FAILED) {
        mp_fail(rank, "mmap: %s", strerror(errno));
        return NULL;
    }
    for (size_t i = 0; i < count; i++)
        put(send, i, FLX_FLOAT32, input_value(rank, i, FLX_SUM, FLX_FLOAT32));
    if (mprotect(send, len, PROT_READ) != 0) {
        mp_fail(rank, "mprotect: %s", strerror(errno));
        munmap(send, len);
        return NULL;
    }
    *len_p = len;
    return send;
}

/* readonly_input's count floats in *send_p (*len_p bytes of pages) and
 * rbytes of output, all NaN, in *recv_p; 1 after a failure line */
static int readonly_io(int rank, size_t count, size_t rbytes, float **send_p, size_t *len_p,
                       float **recv_p)
{
    *send_p = readonly_input(rank, count, len_p);
    *recv_p = malloc(FLX_MAX(rbytes, (size_t)1));
    if (*send_p == NULL || *recv_p == NULL) {
        if (*send_p)
            munmap(*send_p, *len_p);
        free(*recv_p);
        return *send_p ? mp_fail(rank, "out of memory") : 1;
    }
    memset(*recv_p, 0xff, rbytes); /* NaN everywhere */
    return 0;
}

/* An out-of-place allreduce whose send buffer is in read-only pages: no
 * algorithm writes it (a write would kill the rank), and the result is
 * exact.  The ring reads it directly instead of a copy. */
static int check_allreduce_readonly(flx_comm_h comm, int rank, int size, flx_algo_t algo,
                                    size_t count)
{
    size_t len = 0;
    float *send, *recv;
    flx_status_t st;
    int rc = 0;

    if (readonly_io(rank, count, count * sizeof(float), &send, &len, &recv))
        return 1;
    st = flx_allreduce(comm, send, recv, count, FLX_FLOAT32, FLX_SUM, algo);
    if (st != FLX_OK)
        rc = mp_fail(rank, "allreduce %s n=%zu from read-only memory: %s", flx_algo_name(algo),
                     count, flx_status_string(st));
    for (size_t i = 0; i < count && rc == 0; i++)
        if (recv[i] != (float)reference(size, i, FLX_SUM, FLX_FLOAT32))
            rc = mp_fail(rank, "allreduce %s n=%zu from read-only memory: [%zu] = %g, want %g",
                         flx_algo_name(algo), count, i, recv[i],
                         reference(size, i, FLX_SUM, FLX_FLOAT32));
    munmap(send, len);
    free(recv);
    return rc;
}

static int body_allreduce(flx_comm_h comm, int rank, int size, void *arg)
{
    static const flx_algo_t algos[] = {FLX_ALGO_AUTO, FLX_ALGO_RING, FLX_ALGO_TREE,
                                       FLX_ALGO_RD, FLX_ALGO_HD};
    size_t sizes[8];

    (void)arg;
    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
        for (size_t d = 0; d < 6; d++) {
            size_t ns = sizes_for(size, all_dtypes[d], BIG_BYTES, sizes);
            for (size_t s = 0; s < ns; s++) {
                int big = big_dtype(all_dtypes[d]) && s == ns - 1;
                for (int op = 0; op < FLX_OP_COUNT; op++) {
                    /* the big size runs sum, and avg in place */
                    if (big && op != FLX_SUM && op != FLX_AVG)
                        continue;
                    if (check_allreduce(comm, rank, size, algos[a], all_dtypes[d], op,
                                        sizes[s], big ? op == FLX_AVG : (int)(sizes[s] & 1)))
                        return 1;
                }
            }
        }
        if (check_allreduce_readonly(comm, rank, size, algos[a], (size_t)size + 1) ||
            check_allreduce_readonly(comm, rank, size, algos[a], BIG_BYTES / sizeof(float) + 3))
            return 1;
    }
    return 0;
}

/* An out-of-place allgather from read-only pages: no algorithm writes the
 * send buffer (a write would kill the rank), and its block reaches its
 * place in the output (recv starts as NaN, so a missing copy fails). */
static int check_allgather_readonly(flx_comm_h comm, int rank, int size, flx_algo_t algo,
                                    size_t count)
{
    size_t len = 0;
    float *send, *recv;
    flx_status_t st;
    int rc = 0;

    if (readonly_io(rank, count, (size_t)size * count * sizeof(float), &send, &len, &recv))
        return 1;
    st = flx_allgather(comm, send, recv, count, FLX_FLOAT32, algo);
    if (st != FLX_OK)
        rc = mp_fail(rank, "allgather %s n=%zu from read-only memory: %s", flx_algo_name(algo),
                     count, flx_status_string(st));
    for (int r = 0; r < size && rc == 0; r++)
        for (size_t i = 0; i < count && rc == 0; i++)
            if (recv[(size_t)r * count + i] != (float)input_value(r, i, FLX_SUM, FLX_FLOAT32))
                rc = mp_fail(rank, "allgather %s n=%zu from read-only memory: block %d [%zu] "
                             "= %g, want %g", flx_algo_name(algo), count, r, i,
                             recv[(size_t)r * count + i], input_value(r, i, FLX_SUM, FLX_FLOAT32));
    munmap(send, len);
    free(recv);
    return rc;
}

static int body_allgather(flx_comm_h comm, int rank, int size, void *arg)
{
    static const flx_algo_t algos[] = {FLX_ALGO_AUTO, FLX_ALGO_RING, FLX_ALGO_RD};
    size_t sizes[8];

    (void)arg;
    for (size_t a = 0; a < 3; a++) {
        for (size_t d = 0; d < 6; d++) {
            flx_dtype_t dt = all_dtypes[d];
            size_t es = flx_dtype_size(dt);
            size_t ns = sizes_for(size, dt, BIG_BYTES / (size_t)size, sizes);
            for (size_t s = 0; s < ns; s++) {
                size_t count = sizes[s];
                int in_place = (int)(s & 1);
                char *recv = malloc((size_t)size * count * es + 1);
                char *send = in_place ? recv + (size_t)rank * count * es : malloc(count * es + 1);
                flx_status_t st;
                for (size_t i = 0; i < count; i++)
                    put(send, i, dt, input_value(rank, i, FLX_SUM, dt));
                st = flx_allgather(comm, send, recv, count, dt, algos[a]);
                if (st != FLX_OK)
                    return mp_fail(rank, "allgather %s %s n=%zu: %s", flx_algo_name(algos[a]),
                                   flx_dtype_name(dt), count, flx_status_string(st));
                for (int r = 0; r < size; r++)
                    for (size_t i = 0; i < count; i++)
                        if (get(recv, (size_t)r * count + i, dt) != input_value(r, i, FLX_SUM, dt))
                            return mp_fail(rank, "allgather %s %s n=%zu%s: block %d [%zu] = %g, "
                                           "want %g", flx_algo_name(algos[a]), flx_dtype_name(dt),
                                           count, in_place ? " in place" : "", r, i,
                                           get(recv, (size_t)r * count + i, dt),
                                           input_value(r, i, FLX_SUM, dt));
                if (!in_place)
                    free(send);
                free(recv);
            }
        }
        if (check_allgather_readonly(comm, rank, size, algos[a], 1) ||
            check_allgather_readonly(comm, rank, size, algos[a],
                                     BIG_BYTES / (size_t)size / sizeof(float) + 3))
            return 1;
    }
    /* the allgather has no tree or hd: it chooses as under auto */
    if (check_allgather_readonly(comm, rank, size, FLX_ALGO_TREE, (size_t)size + 1) ||
        check_allgather_readonly(comm, rank, size, FLX_ALGO_HD, (size_t)size + 1))
        return 1;
    return 0;
}

static int body_bcast(flx_comm_h comm, int rank, int size, void *arg)
{
    size_t sizes[8];
    int roots[3] = {0, size - 1, size / 2};

    (void)arg;
    for (size_t d = 0; d < 6; d++) {
        flx_dtype_t dt = all_dtypes[d];
        size_t es = flx_dtype_size(dt);
        size_t ns = sizes_for(size, dt, BIG_BYTES, sizes);
        for (size_t s = 0; s < ns; s++) {
            for (int k = 0; k < 3; k++) {
                int root = roots[k];
                size_t count = sizes[s];
                char *buf = malloc(count * es + 1);
                flx_status_t st;
                for (size_t i = 0; i < count; i++)
                    put(buf, i, dt, input_value(rank, i, FLX_SUM, dt));
                st = flx_broadcast(comm, buf, count, dt, root);
                if (st != FLX_OK)
                    return mp_fail(rank, "broadcast %s n=%zu root %d: %s", flx_dtype_name(dt),
                                   count, root, flx_status_string(st));
                for (size_t i = 0; i < count; i++)
                    if (get(buf, i, dt) != input_value(root, i, FLX_SUM, dt))
                        return mp_fail(rank, "broadcast %s n=%zu root %d: [%zu] = %g, want %g",
                                       flx_dtype_name(dt), count, root, i, get(buf, i, dt),
                                       input_value(root, i, FLX_SUM, dt));
                free(buf);
            }
        }
    }
    return 0;
}

/* An out-of-place reduce-scatter from read-only pages: the input is read,
 * never written or copied (a write would kill the rank), our segment lands
 * in recv (NaN before) and nothing past it is touched (guard floats). */
static int check_reduce_scatter_readonly(flx_comm_h comm, int rank, int size, size_t count)
{
    enum { GUARD = 16 };
    size_t len = 0;
    float *send, *recv;
    flx_status_t st;
    int rc = 0;

    if (readonly_io(rank, count * (size_t)size, (count + GUARD) * sizeof(float), &send, &len,
                    &recv))
        return 1;
    st = flx_reduce_scatter(comm, send, recv, count, FLX_FLOAT32, FLX_SUM);
    if (st != FLX_OK)
        rc = mp_fail(rank, "reduce_scatter n=%zu from read-only memory: %s", count,
                     flx_status_string(st));
    for (size_t i = 0; i < count && rc == 0; i++) {
        float want = (float)reference(size, (size_t)rank * count + i, FLX_SUM, FLX_FLOAT32);
        if (recv[i] != want)
            rc = mp_fail(rank, "reduce_scatter n=%zu from read-only memory: [%zu] = %g, want %g",
                         count, i, recv[i], want);
    }
    for (size_t i = count; i < count + GUARD && rc == 0; i++)
        if (recv[i] == recv[i]) /* no longer NaN */
            rc = mp_fail(rank, "reduce_scatter n=%zu wrote past its output: [%zu] = %g", count, i,
                         recv[i]);
    munmap(send, len);
    free(recv);
    return rc;
}

static int body_reduce_scatter(flx_comm_h comm, int rank, int size, void *arg)
{
    size_t sizes[8];

    (void)arg;
    for (size_t d = 0; d < 6; d++) {
        flx_dtype_t dt = all_dtypes[d];
        size_t es = flx_dtype_size(dt);
        size_t ns = sizes_for(size, dt, BIG_BYTES / (size_t)size, sizes);
        for (size_t s = 0; s < ns; s++) {
            for (int op = 0; op < FLX_OP_COUNT; op++) {
                size_t rc_ = sizes[s], total = rc_ * (size_t)size;
                int in_place = (int)((s + (size_t)op) & 1);
                char *send = malloc(total * es + 1);
                char *recv = in_place ? send : malloc(rc_ * es + 1);
                flx_status_t st;
                if (big_dtype(dt) && s == ns - 1 && op != FLX_SUM && op != FLX_MAX) {
                    free(send);
                    if (!in_place)
                        free(recv);
                    continue;
                }
                for (size_t i = 0; i < total; i++)
                    put(send, i, dt, input_value(rank, i, op, dt));
                st = flx_reduce_scatter(comm, send, recv, rc_, dt, op);
                if (st != FLX_OK)
                    return mp_fail(rank, "reduce_scatter %s %s n=%zu: %s", flx_dtype_name(dt),
                                   flx_op_name(op), rc_, flx_status_string(st));
                for (size_t i = 0; i < rc_; i++) {
                    double want = reference(size, (size_t)rank * rc_ + i, op, dt);
                    double got = get(recv, i, dt);
                    if (!close_enough(got, want, dt, op))
                        return mp_fail(rank, "reduce_scatter %s %s n=%zu%s: [%zu] = %g, want %g",
                                       flx_dtype_name(dt), flx_op_name(op), rc_,
                                       in_place ? " in place" : "", i, got, want);
                }
                free(send);
                if (!in_place)
                    free(recv);
            }
        }
    }
    /* one element each, and 4 MiB in all (segments of one or more pipeline chunks) */
    if (check_reduce_scatter_readonly(comm, rank, size, 1) ||
        check_reduce_scatter_readonly(comm, rank, size, BIG_BYTES / sizeof(float) / (size_t)size + 3))
        return 1;
    return 0;
}

static int body_barrier_async(flx_comm_h comm, int rank, int size, void *arg)
{
    enum { NREQ = 4, COUNT = 100003 };
    float *bufs[NREQ];
    flx_request_h reqs[NREQ];
    float *gathered = malloc(sizeof(float) * 7 * (size_t)size);
    float mine[7];
    flx_request_h greq;
    flx_status_t st;

    (void)arg;
    for (int k = 0; k < 5; k++)
        if ((st = flx_barrier(comm)) != FLX_OK)
            return mp_fail(rank, "barrier: %s", flx_status_string(st));
    /* several outstanding requests, completed out of order by the caller */
    for (int q = 0; q < NREQ; q++) {
        bufs[q] = malloc(sizeof(float) * COUNT);
        for (size_t i = 0; i < COUNT; i++)
            bufs[q][i] = (float)input_value(rank + q, i, FLX_SUM, FLX_FLOAT32);
        st = flx_iallreduce(comm, bufs[q], bufs[q], COUNT, FLX_FLOAT32, FLX_SUM,
                            q % 2 ? FLX_ALGO_TREE : FLX_ALGO_RING, &reqs[q]);
        if (st != FLX_OK)
            return mp_fail(rank, "iallreduce: %s", flx_status_string(st));
    }
    for (int i = 0; i < 7; i++)
        mine[i] = (float)(rank * 10 + i);
    if ((st = flx_iallgather(comm, mine, gathered, 7, FLX_FLOAT32, FLX_ALGO_AUTO, &greq)) != FLX_OK)
        return mp_fail(rank, "iallgather: %s", flx_status_string(st));
    while ((st = flx_test(greq)) == FLX_INPROGRESS)
        sched_yield(); /* (a trainer computes here; a bare spin starves 8 ranks on 2 cores) */
    if (st != FLX_OK)
        return mp_fail(rank, "iallgather completion: %s", flx_status_string(st));
    for (int r = 0; r < size; r++)
        for (int i = 0; i < 7; i++)
            if (gathered[r * 7 + i] != (float)(r * 10 + i))
                return mp_fail(rank, "iallgather block %d [%d] = %g", r, i, gathered[r * 7 + i]);
    for (int q = NREQ - 1; q >= 0; q--) {
        if ((st = flx_wait(reqs[q])) != FLX_OK)
            return mp_fail(rank, "iallreduce %d: %s", q, flx_status_string(st));
        for (size_t i = 0; i < COUNT; i++) {
            double want = 0;
            for (int r = 0; r < size; r++)
                want += input_value(r + q, i, FLX_SUM, FLX_FLOAT32);
            if (bufs[q][i] != (float)want)
                return mp_fail(rank, "iallreduce %d [%zu] = %g, want %g", q, i, bufs[q][i], want);
        }
        free(bufs[q]);
    }
    /* a blocking call after non-blocking ones runs after them */
    if ((st = flx_barrier(comm)) != FLX_OK)
        return mp_fail(rank, "barrier after async: %s", flx_status_string(st));
    free(gathered);
    return 0;
}


/* The live model: started from a claimed 1 TB/s, every rank's allreduces
 * and allgathers (blocking and non-blocking, bandwidth-bound) pull beta
 * down to what the sockets move, and every rank holds the same model.
 * arg: FLX_MODEL_REFRESH is 0 (the start values must stay). */
static int body_model_refresh(flx_comm_h comm, int rank, int size, void *arg)
{
    const int off = arg != NULL;
    const size_t count = 256 * 1024; /* 1 MiB of float32 */
    float *buf = malloc(count * sizeof(float)), *all = malloc(count * sizeof(float) * (size_t)size);
    double betas[9 * 8], mine[9], ag0[2];
    flx_link_model_t m0, m1;
    flx_status_t st;

    if (buf == NULL || all == NULL)
        return mp_fail(rank, "out of memory");
    if ((st = flx_comm_link_model(comm, &m0)) != FLX_OK || m0.beta_bytes_per_s != 1e12)
        return mp_fail(rank, "start model: %s, beta %g", flx_status_string(st), m0.beta_bytes_per_s);
    for (int a = 0; a < 2; a++)
        ag0[a] = flx_allgather_predict(comm, count, FLX_FLOAT32, a ? FLX_ALGO_RD : FLX_ALGO_RING);
    for (int it = 0; it < 12; it++) {
        flx_request_h req;

        for (size_t i = 0; i < count; i++)
            buf[i] = (float)((rank + (int)i + it) % 8) / 8.0f;
        if (it % 3 == 2) {
            st = flx_allgather(comm, buf, all, count, FLX_FLOAT32, FLX_ALGO_RING);
            for (int r = 0; r < size && st == FLX_OK; r++)
                for (size_t i = 0; i < count; i++)
                    if (all[(size_t)r * count + i] != (float)((r + (int)i + it) % 8) / 8.0f)
                        return mp_fail(rank, "allgather %d: block %d element %zu wrong", it, r, i);
        } else {
            st = it % 3 ? flx_iallreduce(comm, buf, buf, count, FLX_FLOAT32, FLX_SUM,
                                         FLX_ALGO_RING, &req)
                        : flx_allreduce(comm, buf, buf, count, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING);
            if (st == FLX_OK && it % 3)
                st = flx_wait(req);
            for (size_t i = 0; i < count && st == FLX_OK; i++) {
                float want = 0;
                for (int r = 0; r < size; r++)
                    want += (float)((r + (int)i + it) % 8) / 8.0f;
                if (buf[i] != want)
                    return mp_fail(rank, "allreduce %d: element %zu is %g, not %g", it, i, buf[i], want);
            }
        }
        if (st != FLX_OK)
            return mp_fail(rank, "collective %d: %s", it, flx_status_string(st));
    }
    if ((st = flx_comm_link_model(comm, &m1)) != FLX_OK)
        return mp_fail(rank, "link model: %s", flx_status_string(st));
    if (off || size == 1) {
        if (m1.beta_bytes_per_s != m0.beta_bytes_per_s || m1.alpha_s != m0.alpha_s)
            return mp_fail(rank, "model moved without refresh: beta %g, alpha %g",
                           m1.beta_bytes_per_s, m1.alpha_s);
    } else if (!(m1.beta_bytes_per_s < 1e11 && m1.beta_bytes_per_s > 1e6)) {
        return mp_fail(rank, "beta %g B/s after 8 MiB-scale transfers on loopback", m1.beta_bytes_per_s);
    }
    /* the link's model and every algorithm's prediction: the same everywhere */
    mine[0] = m1.alpha_s;
    mine[1] = m1.beta_bytes_per_s;
    for (int a = 0; a < 3; a++)
        mine[2 + a] = flx_allreduce_predict(comm, count, FLX_FLOAT32, (flx_algo_t)(FLX_ALGO_RING + a));
    mine[8] = flx_allreduce_predict(comm, count, FLX_FLOAT32, FLX_ALGO_HD);
    if (flx_allreduce_predict(NULL, count, FLX_FLOAT32, FLX_ALGO_RING) != -1 ||
        flx_allreduce_predict(comm, count, (flx_dtype_t)99, FLX_ALGO_RING) != -1 ||
        flx_allreduce_predict(comm, count, FLX_FLOAT32, FLX_ALGO_COUNT) != -1)
        return mp_fail(rank, "flx_allreduce_predict accepted a bad argument");
    if (size > 1 && !(mine[2] > 0 && mine[3] > 0 && mine[4] > 0 && mine[8] > 0))
        return mp_fail(rank, "predictions %g %g %g %g", mine[2], mine[3], mine[4], mine[8]);
    /* the allgather's own models: the ring's, which ran, learnt (or not,
     * off); Bruck's, which never ran, did not move, but its prediction
     * takes the ring's 1/beta as a floor: with the ring learnt slower it
     * can only rise */
    for (int a = 0; a < 2; a++)
        mine[5 + a] = flx_allgather_predict(comm, count, FLX_FLOAT32, a ? FLX_ALGO_RD : FLX_ALGO_RING);
    mine[7] = (double)flx_allgather_algo(comm, count, FLX_FLOAT32);
    if (flx_allgather_predict(NULL, count, FLX_FLOAT32, FLX_ALGO_RING) != -1 ||
        flx_allgather_predict(comm, count, (flx_dtype_t)99, FLX_ALGO_RING) != -1 ||
        flx_allgather_predict(comm, count, FLX_FLOAT32, FLX_ALGO_TREE) != -1 ||
        flx_allgather_predict(comm, count, FLX_FLOAT32, FLX_ALGO_HD) != -1 ||
        flx_allgather_predict(comm, count, FLX_FLOAT32, FLX_ALGO_COUNT) != -1 ||
        flx_allgather_algo(NULL, count, FLX_FLOAT32) != FLX_ALGO_AUTO)
        return mp_fail(rank, "flx_allgather_predict or _algo accepted a bad argument");
    if (size > 1 && (!(off ? mine[6] == ag0[1] : mine[6] >= ag0[1]) ||
                     !(off ? mine[5] == ag0[0] : mine[5] > 5 * ag0[0]) ||
                     !(ag0[0] > 0) || (mine[7] != FLX_ALGO_RING && mine[7] != FLX_ALGO_RD)))
        return mp_fail(rank, "allgather predictions: ring %g us (started at %g), Bruck %g us "
                       "(started at %g), pick %g", mine[5] * 1e6, ag0[0] * 1e6, mine[6] * 1e6,
                       ag0[1] * 1e6, mine[7]);
    if (size <= 8 && (st = flx_allgather(comm, mine, betas, 9, FLX_FLOAT64, FLX_ALGO_AUTO)) != FLX_OK)
        return mp_fail(rank, "allgather of the models: %s", flx_status_string(st));
    for (int r = 0; r < size && size <= 8; r++)
        for (int k = 0; k < 9; k++)
            if (betas[9 * r + k] != mine[k])
                return mp_fail(rank, "rank %d holds model value %d = %g, I hold %g", r, k,
                               betas[9 * r + k], mine[k]);
    free(buf);
    free(all);
    return 0;
}

/* The live model's first look: started from a claimed 100 GB/s with no
 * fit (so no algorithm has run at any size), the ring's first
 * bandwidth-bound allreduce at 4 MiB is left out (cold pages) and the next
 * three replace its 1/beta with their median; the ranks agree at once (the
 * 16 of FLX_MODEL_REFRESH are not waited for): the prediction is the start
 * one after the first three calls, over 3x it after the fourth (loopback
 * moves a few GB/s), the same on every rank, and two more calls at that
 * size (no longer part of a look) leave it; a first run at 8 MiB starts a
 * new look and moves nothing by itself. */
static int body_model_look(flx_comm_h comm, int rank, int size, void *arg)
{
    const size_t count = 1024 * 1024; /* 4 MiB of float32 */
    float *buf = malloc(2 * count * sizeof(float));
    double p0 = flx_allreduce_predict(comm, count, FLX_FLOAT32, FLX_ALGO_RING), p[8], all[8 * 8];
    flx_status_t st;

    (void)arg;
    if (buf == NULL)
        return mp_fail(rank, "out of memory");
    for (int it = 0; it < 7; it++) {
        size_t n = it < 6 ? count : 2 * count;

        for (size_t i = 0; i < n; i++)
            buf[i] = (float)((rank + (int)i + it) % 8);
        if ((st = flx_allreduce(comm, buf, buf, n, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING)) != FLX_OK)
            return mp_fail(rank, "allreduce %d: %s", it, flx_status_string(st));
        for (size_t i = 0; i < n; i++) {
            float want = 0;
            for (int r = 0; r < size; r++)
                want += (float)((r + (int)i + it) % 8);
            if (buf[i] != want)
                return mp_fail(rank, "allreduce %d: element %zu is %g, not %g", it, i, buf[i], want);
        }
        p[it] = flx_allreduce_predict(comm, count, FLX_FLOAT32, FLX_ALGO_RING);
    }
    /* the first run is left out, the next three are the look */
    if (p[0] != p0 || p[1] != p0 || p[2] != p0)
        return mp_fail(rank, "the prediction moved before the look ended: %g, %g, %g us "
                       "(start %g)", p[0] * 1e6, p[1] * 1e6, p[2] * 1e6, p0 * 1e6);
    if (!(p[3] > 3 * p0))
        return mp_fail(rank, "after the fourth call the ring predicts %g us at 4 MiB (start %g "
                       "us at a claimed 100 GB/s): the look did not replace 1/beta", p[3] * 1e6,
                       p0 * 1e6);
    for (int it = 4; it < 7; it++)
        if (p[it] != p[3])
            return mp_fail(rank, "call %d moved the agreed prediction: %g us, not %g", it,
                           p[it] * 1e6, p[3] * 1e6);
    p[7] = p0;
    if ((st = flx_allgather(comm, p, all, 8, FLX_FLOAT64, FLX_ALGO_RING)) != FLX_OK)
        return mp_fail(rank, "allgather of the predictions: %s", flx_status_string(st));
    for (int r = 0; r < size; r++)
        for (int k = 0; k < 8; k++)
            if (all[8 * r + k] != p[k])
                return mp_fail(rank, "rank %d predicts %g us after call %d, I %g", r,
                               all[8 * r + k] * 1e6, k, p[k] * 1e6);
    free(buf);
    return 0;
}

/* Exploration and the period median end to end (white box: the test
 * reads and sets the communicator's live model, collectives/coll.h).
 * Every algorithm starts at a claimed 10 GB/s (no calibration) and the
 * ranks agree only when a look ends (FLX_MODEL_REFRESH 100000); each
 * algorithm first runs four forced 1 MiB allreduces (its first look), and
 * the automatic ones then settle on the fastest measured, x.  Before call
 * MODEL_EXPLORE - MODEL_LOOK every rank sets the same runner-up y
 * (another algorithm) to just over x's predicted time and the others to
 * 2x or more: the next MODEL_LOOK calls must run y as one look, which
 * ends with an agreement where y's 1/beta is the largest of the ranks'
 * medians of their three runs and x's the largest of their medians of x's
 * runs since the last agreement (the period median); the call after runs
 * no exploration. */
/* one exact 1 MiB allreduce of body_model_explore (seed: the call) */
static int explore_run(flx_comm_h comm, float *buf, size_t count, int rank, int size, int seed,
                       flx_algo_t algo)
{
    flx_status_t st;

    for (size_t i = 0; i < count; i++)
        buf[i] = (float)((rank + (int)i + 8 * size + seed) % 8);
    if ((st = flx_allreduce(comm, buf, buf, count, FLX_FLOAT32, FLX_SUM, algo)) != FLX_OK)
        return mp_fail(rank, "allreduce %d (%s): %s", seed, flx_algo_name(algo),
                       flx_status_string(st));
    for (size_t i = 0; i < count; i++) {
        float w = 0;
        for (int r = 0; r < size; r++)
            w += (float)((r + (int)i + 8 * size + seed) % 8);
        if (buf[i] != w)
            return mp_fail(rank, "allreduce %d (%s): element %zu is %g, not %g", seed,
                           flx_algo_name(algo), i, buf[i], w);
    }
    return 0;
}

static int body_model_explore(flx_comm_h comm, int rank, int size, void *arg)
{
    const unsigned long first = MODEL_EXPLORE - MODEL_LOOK;
    const size_t count = 256 * 1024; /* 1 MiB of float32 */
    const double bytes = (double)count * sizeof(float), chunk = (double)comm->cfg.chunk_size;
    model_live_t *lv = &comm->live;
    float *buf = malloc(count * sizeof(float));
    double set_inv = 0, want[2], all[2 * 8];
    int xi = 0, yi = 0; /* x and y: indices of comm->ar */
    flx_status_t st;

    (void)arg;
    if (buf == NULL || size > 8)
        return mp_fail(rank, buf == NULL ? "out of memory" : "over 8 ranks");
    /* each algorithm's first look, forced (the automatic count stays 0):
     * the automatic calls then start from measured values for all, even
     * where one measured faster than the others' claimed start */
    for (int k = 0; k < MODEL_NAR * (MODEL_LOOK + 1); k++)
        if (explore_run(comm, buf, count, rank, size, -1 - k,
                        (flx_algo_t)(FLX_ALGO_RING + k / (MODEL_LOOK + 1))) != 0)
            return 1;
    for (unsigned long call = 0; call <= MODEL_EXPLORE; call++) {
        if (lv->autos != call)
            return mp_fail(rank, "before call %lu the automatic choices made are %lu", call,
                           lv->autos);
        if (call == first) {
            flx_algo_t x = model_pick_allreduce_explore(size, bytes, comm->ar, chunk, 0, NULL), y;
            const int pow2 = (size & (size - 1)) == 0;
            double c0, a, b, tx, next = 1e300, ratio, xs[MODEL_PERIOD_MAX], median;
            model_ab_t ar[MODEL_NAR];
            int n;

            /* y: one that ran at 1 MiB and whose own 1/beta is its
             * prediction's (not rd on a power of two, whose floor is hd's;
             * not hd when x is that rd) */
            for (y = FLX_ALGO_RING; y < FLX_ALGO_RING + MODEL_NAR; y++)
                if (y != x && lv->ran_ar[y - FLX_ALGO_RING] >= bytes &&
                    !(pow2 && y == FLX_ALGO_RD) && !(pow2 && x == FLX_ALGO_RD && y == FLX_ALGO_HD))
                    break;
            if (y == FLX_ALGO_RING + MODEL_NAR)
                return mp_fail(rank, "no algorithm but %s ran at 1 MiB", flx_algo_name(x));
            xi = x - FLX_ALGO_RING;
            yi = y - FLX_ALGO_RING;
            memcpy(ar, comm->ar, sizeof(ar));
            tx = model_allreduce_time_ab(x, size, bytes, model_allreduce_ab(x, size, ar), chunk);
            /* the others at least 2x x's time (not hd where it is x's
             * floor), so that y is the runner-up */
            for (int i = 0; i < MODEL_NAR; i++) {
                flx_algo_t z = (flx_algo_t)(FLX_ALGO_RING + i);
                if (i == xi || i == yi)
                    continue;
                if (!(pow2 && x == FLX_ALGO_RD && z == FLX_ALGO_HD)) {
                    model_allreduce_terms(z, size, bytes, chunk, &c0, &a, &b);
                    ar[i].inv_bw = FLX_MAX(ar[i].inv_bw, (2 * tx - c0 - a * ar[i].alpha) / b);
                }
                next = FLX_MIN(next, model_allreduce_time_ab(z, size, bytes,
                                                             model_allreduce_ab(z, size, ar), chunk));
            }
            if (!(next > tx))
                return mp_fail(rank, "a third algorithm ties with %s at %g us", flx_algo_name(x),
                               tx * 1e6);
            ratio = FLX_MIN(1.1, (1.0 + next / tx) / 2);
            model_allreduce_terms(y, size, bytes, chunk, &c0, &a, &b);
            set_inv = (ratio * tx - c0 - a * ar[yi].alpha) / b;
            if (!(set_inv > 0))
                return mp_fail(rank, "%s's latency alone is over %g us", flx_algo_name(y),
                               ratio * tx * 1e6);
            ar[yi].inv_bw = set_inv;
            comm_set_model(comm, comm->model, ar, comm->ag);
            for (int i = 0; i < MODEL_NAR; i++) /* x's own EWMA stays */
                if (i != xi)
                    lv->ar[i] = ar[i];
            if (model_pick_allreduce_explore(size, bytes, comm->ar, chunk, 0, NULL) != x ||
                model_pick_allreduce_explore(size, bytes, comm->ar, chunk, first, lv->ran_ar) != y)
                return mp_fail(rank, "%s at %.3fx %s's time is not the runner-up explored",
                               flx_algo_name(y), ratio, flx_algo_name(x));
            /* x's runs since the last agreement: their median is its next 1/beta */
            n = FLX_MIN(lv->per_n[xi], MODEL_PERIOD_MAX);
            if (n < 5)
                return mp_fail(rank, "%s ran %d times since the last agreement", flx_algo_name(x),
                               n);
            for (int k = 0; k < n; k++) {
                if (lv->per_bytes[xi][k] != bytes)
                    return mp_fail(rank, "a period run of %g bytes", lv->per_bytes[xi][k]);
                xs[k] = lv->per[xi][k];
            }
            for (int i = 1; i < n; i++) /* insertion sort */
                for (int k = i; k > 0 && xs[k - 1] > xs[k]; k--) {
                    double t = xs[k];
                    xs[k] = xs[k - 1];
                    xs[k - 1] = t;
                }
            median = n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
            want[0] = median > 0 ? median : lv->ar[xi].inv_bw;
        }
        if (explore_run(comm, buf, count, rank, size, (int)call, FLX_ALGO_AUTO) != 0)
            return 1;
        if (call < first || call == MODEL_EXPLORE) {
            if (lv->explored != FLX_ALGO_AUTO)
                return mp_fail(rank, "call %lu explored %s", call, flx_algo_name(lv->explored));
            continue;
        }
        if (lv->explored != (flx_algo_t)(FLX_ALGO_RING + yi))
            return mp_fail(rank, "call %lu explored %s, not %s", call, flx_algo_name(lv->explored),
                           flx_algo_name((flx_algo_t)(FLX_ALGO_RING + yi)));
        if (call < MODEL_EXPLORE - 1) {
            if (lv->look_n[yi] != (int)(call - first + 1) || comm->ar[yi].inv_bw != set_inv)
                return mp_fail(rank, "call %lu: %d runs in the look, 1/beta %g (set %g)", call,
                               lv->look_n[yi], comm->ar[yi].inv_bw, set_inv);
            continue;
        }
        /* the look ended: the agreement took each rank's medians */
        if (lv->look_n[yi] != 0)
            return mp_fail(rank, "the look goes on after %d runs", MODEL_LOOK);
        {
            double m = lv->look[yi][0], lo = FLX_MIN(lv->look[yi][1], lv->look[yi][2]),
                   hi = FLX_MAX(lv->look[yi][1], lv->look[yi][2]);
            m = m < lo ? lo : m > hi ? hi : m;
            want[1] = m > 0 ? m : set_inv;
        }
        for (int k = 0; k < 2; k++) { /* within the live model's range, as model.c keeps it */
            double lo = lv->ar0[k ? yi : xi].inv_bw / MODEL_RANGE,
                   hi = lv->ar0[k ? yi : xi].inv_bw * MODEL_RANGE;
            want[k] = want[k] < lo ? lo : want[k] > hi ? hi : want[k];
        }
        if ((st = flx_allgather(comm, want, all, 2, FLX_FLOAT64, FLX_ALGO_RING)) != FLX_OK)
            return mp_fail(rank, "allgather of the medians: %s", flx_status_string(st));
        for (int k = 0; k < 2; k++) {
            int i = k ? yi : xi;
            double agreed = 0;
            for (int r = 0; r < size; r++)
                agreed = FLX_MAX(agreed, all[2 * r + k]);
            if (comm->ar[i].inv_bw != agreed)
                return mp_fail(rank, "%s's agreed 1/beta is %g, not the ranks' largest %s %g",
                               flx_algo_name((flx_algo_t)(FLX_ALGO_RING + i)), comm->ar[i].inv_bw,
                               k ? "look median" : "period median", agreed);
        }
    }
    free(buf);
    return 0;
}

/* The live model's alpha is agreed by its smallest value: rank 0 comes
 * to each of 80 small allreduces 20 ms after the others, so every other
 * rank's call takes about 20 ms, most of it waiting; rank 0's, a few
 * round trips.  Past the 64 latency-bound observations that make the ranks
 * agree (FLX_MODEL_REFRESH=1), every rank must predict the small call
 * from rank 0's view, under half the 20 ms (the largest alpha predicted it
 * at the 20 ms; in the SoftRoCE VM's emulation rank 0's own call is
 * predicted at about 4 ms). */
#define LATE_US 20000
static int body_model_late_rank(flx_comm_h comm, int rank, int size, void *arg)
{
    double x[8], pred;
    flx_status_t st;

    (void)arg;
    for (int it = 0; it < 80; it++) {
        for (int i = 0; i < 8; i++)
            x[i] = rank + i + it;
        if (rank == 0)
            usleep(LATE_US);
        if ((st = flx_allreduce(comm, x, x, 8, FLX_FLOAT64, FLX_SUM, FLX_ALGO_RD)) != FLX_OK)
            return mp_fail(rank, "allreduce %d: %s", it, flx_status_string(st));
        for (int i = 0; i < 8; i++)
            if (x[i] != size * (i + it) + size * (size - 1) / 2.0)
                return mp_fail(rank, "allreduce %d: element %d is %g", it, i, x[i]);
    }
    pred = flx_allreduce_predict(comm, 8, FLX_FLOAT64, FLX_ALGO_RD);
    if (!(pred > 0 && pred < 0.5e-6 * LATE_US))
        return mp_fail(rank, "rd predicted at %.3f ms for 64 bytes after a late rank 0", pred * 1e3);
    return 0;
}

/* flx_comm_calibrate: every peer measured (own entry 0), and the model
 * every rank now holds is exactly the worst link any rank measured */
static int body_calibrate(flx_comm_h comm, int rank, int size, void *arg)
{
    flx_link_model_t links[8], model;
    double row[16], all[8 * 16], worst_alpha = 0, worst_beta = 1e300;
    flx_status_t st;

    (void)arg;
    if (size > 8)
        return mp_fail(rank, "test written for up to 8 ranks");
    if (flx_comm_calibrate(NULL, links) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "flx_comm_calibrate(NULL) was accepted");
    if ((st = flx_comm_calibrate(comm, links)) != FLX_OK)
        return mp_fail(rank, "flx_comm_calibrate: %s", flx_status_string(st));
    for (int j = 0; j < size; j++) {
        int measured = links[j].alpha_s > 0 && links[j].beta_bytes_per_s > 0;
        if (measured != (j != rank))
            return mp_fail(rank, "link to %d: alpha %g beta %g", j, links[j].alpha_s,
                           links[j].beta_bytes_per_s);
        row[2 * j] = links[j].alpha_s;
        row[2 * j + 1] = links[j].beta_bytes_per_s;
    }
    if ((st = flx_allgather(comm, row, all, 2 * (size_t)size, FLX_FLOAT64, FLX_ALGO_AUTO)) != FLX_OK ||
        (st = flx_comm_link_model(comm, &model)) != FLX_OK)
        return mp_fail(rank, "after calibration: %s", flx_status_string(st));
    for (int i = 0; i < size; i++)
        for (int j = 0; j < size; j++)
            if (i != j) {
                worst_alpha = fmax(worst_alpha, all[i * 2 * size + 2 * j]);
                worst_beta = fmin(worst_beta, all[i * 2 * size + 2 * j + 1]);
            }
    if (size > 1 && (model.alpha_s != worst_alpha || model.beta_bytes_per_s != worst_beta))
        return mp_fail(rank, "model alpha %g beta %g, worst link alpha %g beta %g", model.alpha_s,
                       model.beta_bytes_per_s, worst_alpha, worst_beta);
    return 0;
}

/* NaN on the ranks: every rank gets the same bits from each algorithm, in
 * place and out of place, for every floating type and sum, product and
 * average.  Element 0 is a NaN of the rank's own sign and payload, 1 is +Inf
 * on rank 0 and -Inf elsewhere (NaN from 2 ranks on), 2 is 1, 3 a NaN on the
 * last rank only.  Recursive doubling combined each pair in its own order
 * (x86 keeps the first operand's NaN): NaN + -NaN was +NaN on one rank of
 * the pair and -NaN on the other. */
static void nan_bits_fill(unsigned char *buf, flx_dtype_t dt, int rank, int size)
{
    const int neg = rank % 2, last = rank == size - 1;

    for (int e = 0; e < 4; e++) {
        uint64_t v = 0;
        switch (dt) {
        case FLX_FLOAT32: {
            const uint32_t pinf = 0x7f800000u, nan = 0x7fc00000u, sign = 0x80000000u;
            uint32_t w = e == 0 ? (neg ? sign : 0) | nan | (uint32_t)(rank + 1)
                       : e == 1 ? (rank ? sign : 0) | pinf
                       : e == 2 ? 0x3f800000u : last ? sign | nan | 5u : 0x40000000u;
            memcpy(buf + 4 * e, &w, 4);
            continue;
        }
        case FLX_FLOAT64: {
            const uint64_t pinf = 0x7ff0000000000000ull, nan = 0x7ff8000000000000ull;
            const uint64_t sign = 0x8000000000000000ull;
            v = e == 0 ? (neg ? sign : 0) | nan | (uint64_t)(rank + 1)
              : e == 1 ? (rank ? sign : 0) | pinf
              : e == 2 ? 0x3ff0000000000000ull : last ? sign | nan | 5u : 0x4000000000000000ull;
            memcpy(buf + 8 * e, &v, 8);
            continue;
        }
        default: { /* float16 and bfloat16 */
            const int h = dt == FLX_FLOAT16;
            const uint16_t pinf = h ? 0x7c00 : 0x7f80, nan = h ? 0x7e00 : 0x7fc0, sign = 0x8000;
            uint16_t w = e == 0 ? (uint16_t)((neg ? sign : 0) | nan | (rank + 1))
                       : e == 1 ? (uint16_t)((rank ? sign : 0) | pinf)
                       : e == 2 ? (h ? 0x3c00 : 0x3f80)
                       : last ? (uint16_t)(sign | nan | 5) : (h ? 0x4000 : 0x4000);
            memcpy(buf + 2 * e, &w, 2);
        }
        }
    }
}

static int body_nan_bits(flx_comm_h comm, int rank, int size, void *arg)
{
    static const flx_dtype_t dts[] = {FLX_FLOAT32, FLX_FLOAT64, FLX_FLOAT16, FLX_BFLOAT16};
    static const flx_op_t ops[] = {FLX_SUM, FLX_PROD, FLX_AVG};
    static const flx_algo_t algos[] = {FLX_ALGO_RING, FLX_ALGO_TREE, FLX_ALGO_RD, FLX_ALGO_HD};
    unsigned char send[32], recv[32], *all = malloc(32 * (size_t)size);

    (void)arg;
    if (all == NULL)
        return mp_fail(rank, "no memory");
    for (int d = 0; d < 4; d++)
        for (int o = 0; o < 3; o++)
            for (int a = 0; a < 4; a++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    const size_t es = flx_dtype_size(dts[d]), bytes = 4 * es;
                    flx_status_t st;

                    nan_bits_fill(send, dts[d], rank, size);
                    memcpy(recv, send, bytes);
                    st = flx_allreduce(comm, inplace ? recv : send, recv, 4, dts[d], ops[o],
                                       algos[a]);
                    if (st == FLX_OK)
                        st = flx_allgather(comm, recv, all, bytes / 4, FLX_INT32,
                                           FLX_ALGO_AUTO);
                    if (st != FLX_OK)
                        return mp_fail(rank, "%s: %s", flx_algo_name(algos[a]),
                                       flx_status_string(st));
                    for (int r = 1; r < size; r++)
                        if (memcmp(all, all + (size_t)r * bytes, bytes) != 0) {
                            char hex[2][80];
                            for (int q = 0; q < 2; q++)
                                for (size_t b = 0; b < bytes; b++)
                                    snprintf(hex[q] + 2 * b, 3, "%02x",
                                             all[(size_t)(q ? r : 0) * bytes + b]);
                            return mp_fail(rank, "%s %s %s%s: rank 0 got %s, rank %d %s",
                                           flx_dtype_name(dts[d]), flx_op_name(ops[o]),
                                           flx_algo_name(algos[a]),
                                           inplace ? " in place" : "", hex[0], r, hex[1]);
                        }
                }
    free(all);
    return 0;
}

/* ---- test cases ------------------------------------------------------------ */

static const int sizes_n[] = {1, 2, 3, 4, 5, 8};

#define MP_TEST(name, body)                                                  \
    START_TEST(name)                                                         \
    {                                                                        \
        int n = sizes_n[_i];                                                 \
        int failed = mp_nranks_wanted(n) ? mp_run(n, body, NULL, 240, NULL) : 0; \
        ck_assert_msg(failed == 0, "%d of %d ranks failed", failed, n);      \
    }                                                                        \
    END_TEST

MP_TEST(test_allreduce, body_allreduce)
MP_TEST(test_allgather, body_allgather)
MP_TEST(test_bcast, body_bcast)
MP_TEST(test_reduce_scatter, body_reduce_scatter)
MP_TEST(test_barrier_async, body_barrier_async)
MP_TEST(test_calibrate, body_calibrate)
MP_TEST(test_nan_bits, body_nan_bits)

static void model_env(const char *refresh)
{
    setenv("FLX_CALIBRATE", "no", 1);
    setenv("FLX_ALPHA", "1us", 1);
    setenv("FLX_BETA", "1000G", 1);
    setenv("FLX_MODEL_REFRESH", refresh, 1);
}

static void model_env_clear(void)
{
    unsetenv("FLX_CALIBRATE");
    unsetenv("FLX_ALPHA");
    unsetenv("FLX_BETA");
    unsetenv("FLX_MODEL_REFRESH");
}

START_TEST(test_model_refresh)
{
    int n = sizes_n[_i], failed;

    if (!mp_nranks_wanted(n))
        return;
    model_env("4");
    failed = mp_run(n, body_model_refresh, NULL, 240, NULL);
    model_env("0");
    failed += mp_run(n, body_model_refresh, "off", 240, NULL);
    model_env_clear();
    ck_assert_msg(failed == 0, "%d ranks failed (N = %d)", failed, n);
}
END_TEST

START_TEST(test_model_look)
{
    int n = sizes_n[_i], failed;

    if (n < 2 || !mp_nranks_wanted(n))
        return;
    model_env("16");
    setenv("FLX_BETA", "100G", 1);
    failed = mp_run(n, body_model_look, NULL, 240, NULL);
    model_env_clear();
    ck_assert_msg(failed == 0, "%d ranks failed (N = %d)", failed, n);
}
END_TEST

START_TEST(test_model_explore)
{
    int n = sizes_n[_i], failed;

    if (n < 3 || !mp_nranks_wanted(n))
        return;
    model_env("100000");
    setenv("FLX_BETA", "10G", 1);
    failed = mp_run(n, body_model_explore, NULL, 240, NULL);
    model_env_clear();
    ck_assert_msg(failed == 0, "%d ranks failed (N = %d)", failed, n);
}
END_TEST

/* The reduce-scatter's choice on a fixed link model (FLX_ALPHA 20us,
 * FLX_BETA 1G, no calibration): the ring's N-1 steps, or an allreduce's
 * fewer where latency dominates: 4 ranks' 16 B by recursive doubling
 * (2 steps, 40 us, against the ring's 3, 60 us); 2 and 3 ranks always the
 * ring (recursive doubling is no shorter there); 1 MiB a rank the ring
 * (bandwidth).  Every rank picks alike, and the result of each choice is
 * exact.  arg: FLX_ALGO, NULL for auto. */
static flx_algo_t algo_named(const char *name)
{
    for (int a = 0; a < FLX_ALGO_COUNT; a++)
        if (strcmp(flx_algo_name((flx_algo_t)a), name) == 0)
            return (flx_algo_t)a;
    return FLX_ALGO_AUTO;
}

static int body_reduce_scatter_algo(flx_comm_h comm, int rank, int size, void *arg)
{
    const char *forced = arg;
    const size_t counts[] = {4, 1 << 18};
    int32_t picks[2], all[2 * 8];

    for (int k = 0; k < 2; k++) {
        flx_algo_t want = forced ? algo_named(forced)
                          : k == 0 && size >= 4 && (size & (size - 1)) == 0 ? FLX_ALGO_RD
                                                                               : FLX_ALGO_RING;
        flx_algo_t got = flx_reduce_scatter_algo(comm, counts[k], FLX_FLOAT32);
        if (got != want)
            return mp_fail(rank, "reduce-scatter of %zu floats a rank on %d ranks: %s, want %s",
                           counts[k], size, flx_algo_name(got), flx_algo_name(want));
        picks[k] = (int32_t)got;
    }
    if (size <= 8 && flx_allgather(comm, picks, all, 2, FLX_INT32, FLX_ALGO_AUTO) != FLX_OK)
        return mp_fail(rank, "allgather failed");
    for (int r = 0; r < size && size <= 8; r++)
        if (all[2 * r] != picks[0] || all[2 * r + 1] != picks[1])
            return mp_fail(rank, "rank %d picked otherwise", r);
    for (int k = 0; k < 2; k++) {
        size_t total = counts[k] * (size_t)size;
        float *in = malloc(total * sizeof(float)), *out = malloc(counts[k] * sizeof(float));
        flx_status_t st;

        if (in == NULL || out == NULL)
            return mp_fail(rank, "out of memory");
        for (size_t i = 0; i < total; i++)
            in[i] = (float)input_value(rank, i, FLX_SUM, FLX_FLOAT32);
        st = flx_reduce_scatter(comm, in, out, counts[k], FLX_FLOAT32, FLX_SUM);
        for (size_t i = 0; st == FLX_OK && i < counts[k]; i++)
            if (out[i] != (float)reference(size, (size_t)rank * counts[k] + i, FLX_SUM, FLX_FLOAT32))
                return mp_fail(rank, "reduce_scatter (%s) n=%zu: [%zu] = %g, want %g",
                               flx_algo_name((flx_algo_t)picks[k]), counts[k], i, out[i],
                               reference(size, (size_t)rank * counts[k] + i, FLX_SUM, FLX_FLOAT32));
        free(in);
        free(out);
        if (st != FLX_OK)
            return mp_fail(rank, "reduce_scatter n=%zu: %s", counts[k], flx_status_string(st));
    }
    return 0;
}

START_TEST(test_reduce_scatter_algo)
{
    const char *forced[] = {NULL, "tree", "hd", "rd", "ring"};
    int n = sizes_n[_i], failed = 0;

    if (n < 2 || !mp_nranks_wanted(n))
        return;
    setenv("FLX_CALIBRATE", "no", 1);
    setenv("FLX_ALPHA", "20us", 1);
    setenv("FLX_BETA", "1G", 1);
    for (size_t f = 0; f < sizeof(forced) / sizeof(forced[0]); f++) {
        if (forced[f])
            setenv("FLX_ALGO", forced[f], 1);
        failed += mp_run(n, body_reduce_scatter_algo, (void *)forced[f], 240, NULL);
    }
    unsetenv("FLX_ALGO");
    model_env_clear();
    ck_assert_msg(failed == 0, "%d ranks failed (N = %d)", failed, n);
}
END_TEST

START_TEST(test_model_late_rank)
{
    int n = sizes_n[_i], failed;

    if (n < 2 || !mp_nranks_wanted(n))
        return;
    setenv("FLX_CALIBRATE", "no", 1);
    setenv("FLX_ALPHA", "20us", 1);
    setenv("FLX_BETA", "1G", 1);
    setenv("FLX_MODEL_REFRESH", "1", 1);
    failed = mp_run(n, body_model_late_rank, NULL, 240, NULL);
    model_env_clear();
    ck_assert_msg(failed == 0, "%d ranks failed (N = %d)", failed, n);
}
END_TEST

/* Recursive doubling and halving-doubling in many chunks (arg: chunk
 * size): more than their window of 8 in a step, and a last partial one, for
 * each dtype, sum and max, in and out of place.  Element i of rank r is i % 13 + r: 13 does not divide a
 * chunk, so a chunk reduced from the wrong slot or offset shows. */
static int body_rd_chunks(flx_comm_h comm, int rank, int size, void *arg)
{
    const size_t chunk = *(const size_t *)arg;

    for (size_t d = 0; d < 6; d++) {
        flx_dtype_t dt = all_dtypes[d];
        size_t es = flx_dtype_size(dt), count = 19 * (chunk / es) + 7;
        char *buf = malloc(count * es), *out = malloc(count * es);

        if (buf == NULL || out == NULL)
            return mp_fail(rank, "out of memory");
        for (int k = 0; k < 4; k++) {
            flx_op_t op = k % 2 ? FLX_MAX : FLX_SUM;
            flx_algo_t algo = k < 2 ? FLX_ALGO_RD : FLX_ALGO_HD;
            char *res = k % 2 ? buf : out;
            flx_status_t st;

            for (size_t i = 0; i < count; i++)
                put(buf, i, dt, (double)(i % 13 + (size_t)rank));
            st = flx_allreduce(comm, buf, res, count, dt, op, algo);
            if (st != FLX_OK)
                return mp_fail(rank, "%s %s %s: %s", flx_algo_name(algo), flx_dtype_name(dt),
                               flx_op_name(op), flx_status_string(st));
            for (size_t i = 0; i < count; i++) {
                double v = (double)(i % 13), got = get(res, i, dt);
                double want = k % 2 ? v + size - 1 : size * v + size * (size - 1) / 2.0;
                if (got != want)
                    return mp_fail(rank, "%s %s %s, %zu elements in chunks of %zu B: [%zu] = "
                                   "%g, want %g", flx_algo_name(algo), flx_dtype_name(dt),
                                   flx_op_name(op), count, chunk, i, got, want);
            }
        }
        free(buf);
        free(out);
    }
    return 0;
}

/* Each broadcast algorithm on its own (FLX_ALGO: rd = binomial, ring =
 * chain), and recursive doubling and halving-doubling, in 16 KiB chunks, so that the large size
 * is many chunks, more than either pipeline's window of 8 (19 even with
 * the ib suite's 300000-byte FLX_TEST_BIG_BYTES), through every level of
 * the tree. */
START_TEST(test_chunked_forced)
{
    const char *algos[] = {"rd", "ring"};
    int n = sizes_n[_i], failed = 0;
    size_t chunk = 16384;

    if (!mp_nranks_wanted(n))
        return;
    setenv("FLX_CHUNK_SIZE", "16k", 1);
    for (int a = 0; a < 2; a++) {
        setenv("FLX_ALGO", algos[a], 1);
        failed += mp_run(n, body_bcast, NULL, 240, NULL);
    }
    unsetenv("FLX_ALGO");
    failed += mp_run(n, body_rd_chunks, &chunk, 240, NULL);
    unsetenv("FLX_CHUNK_SIZE");
    ck_assert_msg(failed == 0, "%d ranks failed (N = %d)", failed, n);
}
END_TEST

/* Messages that arrive before their receive is posted (tcp: parked in
 * the socket for FLX_TCP_PARK, then buffered).  Two chain broadcasts
 * from rank 0 (FLX_ALGO=ring) with 64 KiB socket buffers: rank 2 sleeps
 * (arg: ms) before the first, so rank 1 waits inside it to forward the
 * data to rank 2 while rank 0, done with it, already sends the second
 * broadcast's data to rank 1: rank 1 reads that header with no receive
 * posted.  Then a ring allreduce.  Element i of rank r is i % 7 + r, so
 * every expected value is exact. */
static int body_early(flx_comm_h comm, int rank, int size, void *arg)
{
    const int late_ms = *(const int *)arg;
    const size_t count = (1 << 18) + 3;
    float *a = malloc(count * sizeof(float)), *b = malloc(count * sizeof(float));
    float *out = malloc(count * sizeof(float));
    flx_status_t st;

    if (a == NULL || b == NULL || out == NULL)
        return mp_fail(rank, "out of memory");
    for (size_t i = 0; i < count; i++) {
        a[i] = (float)(i % 7 + (size_t)rank);
        b[i] = (float)(i % 7 + 2 * (size_t)rank);
    }
    if (rank == 2)
        usleep((useconds_t)late_ms * 1000);
    if ((st = flx_broadcast(comm, a, count, FLX_FLOAT32, 0)) != FLX_OK ||
        (st = flx_broadcast(comm, b, count, FLX_FLOAT32, 0)) != FLX_OK)
        return mp_fail(rank, "broadcast: %s", flx_status_string(st));
    for (size_t i = 0; i < count; i++)
        if (a[i] != (float)(i % 7) || b[i] != (float)(i % 7))
            return mp_fail(rank, "broadcast: [%zu] = %g, %g, want %zu", i, a[i], b[i], i % 7);
    for (size_t i = 0; i < count; i++)
        a[i] = (float)(i % 7 + (size_t)rank);
    if ((st = flx_allreduce(comm, a, out, count, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING)) != FLX_OK)
        return mp_fail(rank, "allreduce: %s", flx_status_string(st));
    for (size_t i = 0; i < count; i++)
        if (out[i] != (float)(size * (int)(i % 7) + size * (size - 1) / 2))
            return mp_fail(rank, "allreduce: [%zu] = %g", i, out[i]);
    free(a);
    free(b);
    free(out);
    return 0;
}

/* Early messages buffered at once (FLX_TCP_PARK=0), left in the socket
 * until their receive comes (1 s: the receive always comes first), and
 * left there until FLX_TCP_PARK runs out, then buffered (5 ms; rank 2
 * sleeps 100). */
START_TEST(test_early_messages)
{
    static const struct {
        const char *park;
        int late_ms;
    } cases[] = {{"0", 50}, {"1s", 50}, {"5ms", 100}};
    const char *net = getenv("FLX_NET");
    int n = sizes_n[_i];

    /* the tcp backend's paths (the ib suite, in a slow VM, has its own) */
    if (n < 3 || !mp_nranks_wanted(n) || (net && strcmp(net, "ib") == 0))
        return;
    setenv("FLX_ALGO", "ring", 1);
    setenv("FLX_TCP_SOCKBUF", "64k", 1);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int late_ms = cases[c].late_ms, failed;
        setenv("FLX_TCP_PARK", cases[c].park, 1);
        failed = mp_run(n, body_early, &late_ms, 240, NULL);
        ck_assert_msg(failed == 0, "FLX_TCP_PARK=%s: %d of %d ranks failed", cases[c].park,
                      failed, n);
    }
    unsetenv("FLX_TCP_PARK");
    unsetenv("FLX_TCP_SOCKBUF");
    unsetenv("FLX_ALGO");
}
END_TEST

/* Short and long messages one after the other between every pair (tcp:
 * the higher rank of a pair sends its long ones, 64 KiB and up, on the
 * pair's second connection and the rest on the first, with a SWITCH at
 * each change; the receiver must still take them in the order sent).
 * Broadcasts from the highest rank (it sends to lower ones) and ring
 * allreduces alternate between 1-3 elements and 70001 (280 KB); element i
 * of rank r is i % 7 + r + it, so every expected value is exact. */
static int body_lanes(flx_comm_h comm, int rank, int size, void *arg)
{
    const size_t big = 70001;
    float *a = malloc(big * sizeof(float)), *out = malloc(big * sizeof(float));
    flx_status_t st;

    (void)arg;
    if (a == NULL || out == NULL)
        return mp_fail(rank, "out of memory");
    for (int it = 0; it < 24; it++) {
        size_t count = it % 2 ? big : (size_t)(it % 3 + 1);
        for (size_t i = 0; i < count; i++)
            a[i] = rank == size - 1 ? (float)(i % 7 + (size_t)it) : -1.0f;
        if ((st = flx_broadcast(comm, a, count, FLX_FLOAT32, size - 1)) != FLX_OK)
            return mp_fail(rank, "broadcast %d: %s", it, flx_status_string(st));
        for (size_t i = 0; i < count; i++)
            if (a[i] != (float)(i % 7 + (size_t)it))
                return mp_fail(rank, "broadcast %d: [%zu] = %g", it, i, a[i]);
        for (size_t i = 0; i < count; i++)
            a[i] = (float)(i % 7 + (size_t)rank + (size_t)it);
        if ((st = flx_allreduce(comm, a, out, count, FLX_FLOAT32, FLX_SUM, FLX_ALGO_RING)) !=
            FLX_OK)
            return mp_fail(rank, "allreduce %d: %s", it, flx_status_string(st));
        for (size_t i = 0; i < count; i++)
            if (out[i] != (float)(size * (int)(i % 7 + (size_t)it) + size * (size - 1) / 2))
                return mp_fail(rank, "allreduce %d: [%zu] = %g", it, i, out[i]);
    }
    free(a);
    free(out);
    return 0;
}

/* The tcp backend with one connection per pair, with two (the higher
 * rank's long messages on the second, on the first, or picked per period
 * while running: FLX_TCP_LANE split, shared, auto), and auto (the default:
 * two where the open-file limit holds them, as here); long messages
 * written in pieces of FLX_TCP_WRITE_MAX (the default 128 KiB; 1: one
 * segment at a time; 200000: three on loopback; 0: as the socket takes
 * them), with FLX_TCP_NOTSENT_LOWAT the default 16 KiB, 1 byte (one
 * segment queued unsent at most) or 0 (the kernel's). */
START_TEST(test_tcp_sockets)
{
    static const char *const cases[][4] = {
        {"1", "auto", "128k", "16k"},  {"2", "split", "1", "1"},   {"2", "shared", "200000", "0"},
        {"2", "auto", "0", "1"},     {"auto", "auto", "128k", "0"}, {"1", "auto", "1", "16k"}};
    const char *net = getenv("FLX_NET");
    int n = sizes_n[_i];

    if (n < 2 || !mp_nranks_wanted(n) || (net && strcmp(net, "ib") == 0))
        return;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        int failed;
        setenv("FLX_TCP_SOCKETS", cases[k][0], 1);
        setenv("FLX_TCP_LANE", cases[k][1], 1);
        setenv("FLX_TCP_WRITE_MAX", cases[k][2], 1);
        setenv("FLX_TCP_NOTSENT_LOWAT", cases[k][3], 1);
        failed = mp_run(n, body_lanes, NULL, 120, NULL);
        ck_assert_msg(failed == 0,
                      "FLX_TCP_SOCKETS=%s FLX_TCP_LANE=%s FLX_TCP_WRITE_MAX=%s "
                      "FLX_TCP_NOTSENT_LOWAT=%s: %d of %d ranks failed",
                      cases[k][0], cases[k][1], cases[k][2], cases[k][3], failed, n);
    }
    unsetenv("FLX_TCP_SOCKETS");
    unsetenv("FLX_TCP_LANE");
    unsetenv("FLX_TCP_WRITE_MAX");
    unsetenv("FLX_TCP_NOTSENT_LOWAT");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("collectives");
    TCase *tc = tcase_create("multi-process");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_allreduce, 0, 6);
    tcase_add_loop_test(tc, test_allgather, 0, 6);
    tcase_add_loop_test(tc, test_bcast, 0, 6);
    tcase_add_loop_test(tc, test_chunked_forced, 0, 6);
    tcase_add_loop_test(tc, test_reduce_scatter, 0, 6);
    tcase_add_loop_test(tc, test_reduce_scatter_algo, 0, 6);
    tcase_add_loop_test(tc, test_barrier_async, 0, 6);
    tcase_add_loop_test(tc, test_model_refresh, 0, 6);
    tcase_add_loop_test(tc, test_model_look, 0, 6);
    tcase_add_loop_test(tc, test_model_explore, 0, 6);
    tcase_add_loop_test(tc, test_model_late_rank, 0, 6);
    tcase_add_loop_test(tc, test_calibrate, 0, 6);
    tcase_add_loop_test(tc, test_nan_bits, 0, 6);
    tcase_add_loop_test(tc, test_early_messages, 0, 6);
    tcase_add_loop_test(tc, test_tcp_sockets, 0, 6);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
