/* check_reduce.c -- unit tests of the local reduction kernels, of the
 * half-precision conversions (common/dtype.h) and of the streaming copy
 * (common/copy.h).
 *
 * The reference results are computed here, serially, with conversions
 * written independently of dtype.c: binary16 through frexp/ldexp and
 * nearbyint in double precision, bfloat16 by inspecting the discarded
 * bits.  Half types combine in float32 and round once, as dtype.h says. */
#include "common/copy.h"
#include "common/dtype.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ck_assert* records a mark point (a write to a pipe) per call; loops over
 * millions of values use this instead, which costs nothing until it fails */
#define FAST_ASSERT(cond, ...)                                               \
    do {                                                                    \
        if (!(cond))                                                        \
            ck_abort_msg(__VA_ARGS__);                                      \
    } while (0)

#define GUARD 16 /* elements of guard band on each side of a buffer */

static const size_t COUNTS[] = {0, 1, 7, 1000, 65537};
#define NCOUNTS (sizeof(COUNTS) / sizeof(COUNTS[0]))

/* ---------------------------------------------------------------------- */
/* independent reference conversions                                       */
/* ---------------------------------------------------------------------- */

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint64_t dbits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

static int half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }
static int bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0; }

static float ref_half_to_float(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;

    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(m + 1024, e - 25);
    return (float)((h & 0x8000) ? -v : v);
}

/* round to nearest, ties to even, computed in double (exact for floats) */
static uint16_t ref_float_to_half(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f), q;
    int e;

    if (isnan(f))
        return sign | 0x7e00;
    if (a >= 65520.0) /* halfway between 65504 and 2^16: ties to even = Inf */
        return sign | 0x7c00;
    if (a < 0x1p-14) { /* subnormal: multiples of 2^-24; 1024 is the smallest normal */
        q = nearbyint(a * 0x1p24);
        return sign | (uint16_t)q;
    }
    frexp(a, &e);
    e -= 1; /* a in [2^e, 2^(e+1)) */
    q = nearbyint(ldexp(a, 10 - e)); /* [1024, 2048] */
    if (q == 2048) {
        q = 1024;
        e++;
    }
    return sign | (uint16_t)(((e + 15) << 10) | ((int)q - 1024));
}

static float ref_bf16_to_float(uint16_t h) { return bitsf((uint32_t)h << 16); }

static uint16_t ref_float_to_bf16(float f)
{
    uint32_t u = fbits(f);
    uint16_t hi = (uint16_t)(u >> 16), lo = (uint16_t)u;

    if (isnan(f))
        return hi | 0x40;
    if (lo > 0x8000 || (lo == 0x8000 && (hi & 1)))
        hi++; /* carries into the exponent: the largest finite goes to Inf */
    return hi;
}

/* ---------------------------------------------------------------------- */
/* data                                                                    */
/* ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    uint64_t x = rng_state;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static void fill(flx_dtype_t dt, void *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng();
        switch (dt) {
        case FLX_FLOAT32:
            ((float *)buf)[i] = ldexpf((float)((int32_t)(r >> 40) - (1 << 23)) / (1 << 23),
                                       (int)(r % 41) - 20);
            break;
        case FLX_FLOAT64:
            ((double *)buf)[i] = ldexp((double)((int64_t)(r >> 11) - (1ll << 52)) / 0x1p52,
                                       (int)(r % 61) - 30);
            break;
        case FLX_FLOAT16: {
            uint16_t h = (uint16_t)r;
            if ((h & 0x7c00) == 0x7c00) /* keep inputs finite */
                h &= 0xbfff;
            ((uint16_t *)buf)[i] = h;
            break;
        }
        case FLX_BFLOAT16: {
            uint16_t h = (uint16_t)r;
            if ((h & 0x7f80) == 0x7f80)
                h &= 0xbfff;
            ((uint16_t *)buf)[i] = h;
            break;
        }
        case FLX_INT32:
            ((int32_t *)buf)[i] = (int32_t)(uint32_t)r;
            break;
        case FLX_INT64:
            ((int64_t *)buf)[i] = (int64_t)r;
            break;
        default:
            break;
        }
    }
}

static float ref_f32(flx_op_t op, float a, float b)
{
    switch (op) {
    case FLX_PROD: return a * b;
    case FLX_MIN: return fminf(a, b);
    case FLX_MAX: return fmaxf(a, b);
    default: return a + b; /* SUM, AVG */
    }
}

static double ref_f64(flx_op_t op, double a, double b)
{
    switch (op) {
    case FLX_PROD: return a * b;
    case FLX_MIN: return fmin(a, b);
    case FLX_MAX: return fmax(a, b);
    default: return a + b;
    }
}

static uint64_t ref_uint(flx_op_t op, uint64_t a, uint64_t b, int is64)
{
    int64_t sa = is64 ? (int64_t)a : (int64_t)(int32_t)a;
    int64_t sb = is64 ? (int64_t)b : (int64_t)(int32_t)b;

    switch (op) {
    case FLX_PROD: return a * b; /* modulo 2^64, truncated by the caller */
    case FLX_MIN: return sb < sa ? b : a;
    case FLX_MAX: return sb > sa ? b : a;
    default: return a + b;
    }
}

/* io[i] = io[i] op in[i], serially */
static void ref_reduce(void *io, const void *in, size_t n, flx_dtype_t dt, flx_op_t op)
{
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case FLX_FLOAT32:
            ((float *)io)[i] = ref_f32(op, ((float *)io)[i], ((const float *)in)[i]);
            break;
        case FLX_FLOAT64:
            ((double *)io)[i] = ref_f64(op, ((double *)io)[i], ((const double *)in)[i]);
            break;
        case FLX_FLOAT16: {
            float a = ref_half_to_float(((uint16_t *)io)[i]);
            float b = ref_half_to_float(((const uint16_t *)in)[i]);
            ((uint16_t *)io)[i] = ref_float_to_half(ref_f32(op, a, b));
            break;
        }
        case FLX_BFLOAT16: {
            float a = ref_bf16_to_float(((uint16_t *)io)[i]);
            float b = ref_bf16_to_float(((const uint16_t *)in)[i]);
            ((uint16_t *)io)[i] = ref_float_to_bf16(ref_f32(op, a, b));
            break;
        }
        case FLX_INT32: {
            uint32_t a = (uint32_t)((int32_t *)io)[i], b = (uint32_t)((const int32_t *)in)[i];
            ((int32_t *)io)[i] = (int32_t)(uint32_t)ref_uint(op, a, b, 0);
            break;
        }
        case FLX_INT64: {
            uint64_t a = (uint64_t)((int64_t *)io)[i], b = (uint64_t)((const int64_t *)in)[i];
            ((int64_t *)io)[i] = (int64_t)ref_uint(op, a, b, 1);
            break;
        }
        default:
            break;
        }
    }
}

static void ref_finish(void *buf, size_t n, flx_dtype_t dt, int nranks)
{
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case FLX_FLOAT32: ((float *)buf)[i] = ((float *)buf)[i] / (float)nranks; break;
        case FLX_FLOAT64: ((double *)buf)[i] = ((double *)buf)[i] / nranks; break;
        case FLX_FLOAT16:
            ((uint16_t *)buf)[i] =
                ref_float_to_half(ref_half_to_float(((uint16_t *)buf)[i]) / (float)nranks);
            break;
        case FLX_BFLOAT16:
            ((uint16_t *)buf)[i] =
                ref_float_to_bf16(ref_bf16_to_float(((uint16_t *)buf)[i]) / (float)nranks);
            break;
        case FLX_INT32: ((int32_t *)buf)[i] = ((int32_t *)buf)[i] / nranks; break;
        case FLX_INT64: ((int64_t *)buf)[i] = ((int64_t *)buf)[i] / nranks; break;
        default: break;
        }
    }
}

/* equal bits, or both NaN, or both zeros of either sign (min/max of +-0) */
static int elem_same(flx_dtype_t dt, const void *a, const void *b, size_t i, char *desc,
                     size_t desclen)
{
    switch (dt) {
    case FLX_FLOAT32: {
        float x = ((const float *)a)[i], y = ((const float *)b)[i];
        snprintf(desc, desclen, "%a vs %a", x, y);
        return fbits(x) == fbits(y) || (isnan(x) && isnan(y)) || (x == 0 && y == 0);
    }
    case FLX_FLOAT64: {
        double x = ((const double *)a)[i], y = ((const double *)b)[i];
        snprintf(desc, desclen, "%a vs %a", x, y);
        return dbits(x) == dbits(y) || (isnan(x) && isnan(y)) || (x == 0 && y == 0);
    }
    case FLX_FLOAT16: {
        uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
        snprintf(desc, desclen, "0x%04x vs 0x%04x", x, y);
        return x == y || (half_is_nan(x) && half_is_nan(y)) || ((x | y) & 0x7fff) == 0;
    }
    case FLX_BFLOAT16: {
        uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
        snprintf(desc, desclen, "0x%04x vs 0x%04x", x, y);
        return x == y || (bf16_is_nan(x) && bf16_is_nan(y)) || ((x | y) & 0x7fff) == 0;
    }
    case FLX_INT32: {
        int32_t x = ((const int32_t *)a)[i], y = ((const int32_t *)b)[i];
        snprintf(desc, desclen, "%d vs %d", x, y);
        return x == y;
    }
    case FLX_INT64: {
        int64_t x = ((const int64_t *)a)[i], y = ((const int64_t *)b)[i];
        snprintf(desc, desclen, "%lld vs %lld", (long long)x, (long long)y);
        return x == y;
    }
    default:
        return 0;
    }
}

/* A buffer of n elements with GUARD elements of 0xa5 on both sides,
 * shifted by misalign elements to exercise the vector loop's peeling. */
typedef struct {
    unsigned char *base;
    void *data;
    size_t bytes;
} gbuf_t;

static void gbuf_init(gbuf_t *g, size_t n, size_t esize, int misalign)
{
    size_t total = (n + 2 * GUARD + 1) * esize;

    g->base = aligned_alloc(64, (total + 63) / 64 * 64);
    ck_assert_ptr_nonnull(g->base);
    memset(g->base, 0xa5, total);
    g->data = g->base + (GUARD + (size_t)misalign) * esize;
    g->bytes = total;
}

static void gbuf_check_guards(const gbuf_t *g, size_t n, size_t esize, const char *what)
{
    const unsigned char *d = g->data;

    for (const unsigned char *p = g->base; p < d; p++)
        FAST_ASSERT(*p == 0xa5, "%s: wrote before the buffer", what);
    for (const unsigned char *p = d + n * esize; p < g->base + g->bytes; p++)
        FAST_ASSERT(*p == 0xa5, "%s: wrote past element %zu", what, n);
}

static void check_reduce_case(flx_dtype_t dt, flx_op_t op, size_t n, int misalign)
{
    size_t es = flx_dtype_size(dt);
    gbuf_t io, in;
    void *want = malloc(n * es + 1);
    char what[96], desc[96];

    snprintf(what, sizeof(what), "%s %s count %zu misalign %d", flx_dtype_name(dt),
             flx_op_name(op), n, misalign);
    gbuf_init(&io, n, es, misalign);
    gbuf_init(&in, n, es, misalign);
    fill(dt, io.data, n);
    fill(dt, in.data, n);
    memcpy(want, io.data, n * es);
    ref_reduce(want, in.data, n, dt, op);

    flx_reduce(io.data, in.data, n, dt, op);
    for (size_t i = 0; i < n; i++)
        FAST_ASSERT(elem_same(dt, io.data, want, i, desc, sizeof(desc)),
                      "%s: element %zu: got, expected: %s", what, i, desc);
    gbuf_check_guards(&io, n, es, what);
    gbuf_check_guards(&in, n, es, what);
    free(io.base);
    free(in.base);
    free(want);
}

START_TEST(test_reduce_all)
{
    flx_dtype_t dt = (flx_dtype_t)_i;

    for (int op = 0; op < FLX_OP_COUNT; op++)
        for (size_t c = 0; c < NCOUNTS; c++)
            for (int mis = 0; mis < 2; mis++)
                check_reduce_case(dt, (flx_op_t)op, COUNTS[c], mis);
}
END_TEST

/* AVG over nranks contributions: reduce as a sum, divide once at the end */
START_TEST(test_reduce_avg)
{
    flx_dtype_t dt = (flx_dtype_t)_i;
    size_t es = flx_dtype_size(dt);

    for (int nranks = 2; nranks <= 5; nranks++) {
        for (size_t c = 0; c < NCOUNTS; c++) {
            size_t n = COUNTS[c];
            void *acc = malloc(n * es + 1), *want = malloc(n * es + 1), *in = malloc(n * es + 1);
            char desc[96];

            fill(dt, acc, n);
            memcpy(want, acc, n * es);
            for (int r = 1; r < nranks; r++) {
                fill(dt, in, n);
                flx_reduce(acc, in, n, dt, FLX_AVG);
                ref_reduce(want, in, n, dt, FLX_SUM);
            }
            flx_reduce_finish(acc, n, dt, FLX_AVG, nranks);
            ref_finish(want, n, dt, nranks);
            for (size_t i = 0; i < n; i++)
                FAST_ASSERT(elem_same(dt, acc, want, i, desc, sizeof(desc)),
                              "%s avg of %d ranks, count %zu: element %zu: got, expected: %s",
                              flx_dtype_name(dt), nranks, n, i, desc);
            free(acc);
            free(want);
            free(in);
        }
    }
}
END_TEST

START_TEST(test_finish_noop_and_int_division)
{
    int32_t i32[] = {-7, 7, -1, 5, INT32_MIN, INT32_MAX, 0};
    int64_t i64[] = {-7, 7, -1, 5, INT64_MIN, INT64_MAX, 0};
    float f32[] = {1.0f, 3.0f, -6.0f};
    uint16_t h[] = {0x4200 /* 3.0 */, 0x3c00 /* 1.0 */};
    uint16_t bf[] = {0x4040 /* 3.0 */, 0x3f80 /* 1.0 */};

    /* non-AVG ops and a single rank leave the buffer alone */
    for (int op = 0; op < FLX_OP_COUNT; op++) {
        if (op == FLX_AVG)
            continue;
        flx_reduce_finish(i32, 7, FLX_INT32, (flx_op_t)op, 4);
        flx_reduce_finish(f32, 3, FLX_FLOAT32, (flx_op_t)op, 4);
    }
    flx_reduce_finish(f32, 3, FLX_FLOAT32, FLX_AVG, 1);
    ck_assert_int_eq(i32[0], -7);
    ck_assert_int_eq(i32[5], INT32_MAX);
    ck_assert(f32[0] == 1.0f && f32[1] == 3.0f && f32[2] == -6.0f);

    /* integer AVG truncates toward zero, like C division */
    flx_reduce_finish(i32, 7, FLX_INT32, FLX_AVG, 2);
    ck_assert_int_eq(i32[0], -3);
    ck_assert_int_eq(i32[1], 3);
    ck_assert_int_eq(i32[2], 0);
    ck_assert_int_eq(i32[3], 2);
    ck_assert_int_eq(i32[4], -1073741824);
    ck_assert_int_eq(i32[5], 1073741823);
    ck_assert_int_eq(i32[6], 0);
    flx_reduce_finish(i64, 7, FLX_INT64, FLX_AVG, 2);
    ck_assert(i64[0] == -3 && i64[1] == 3 && i64[2] == 0 && i64[3] == 2);
    ck_assert(i64[4] == INT64_MIN / 2 && i64[5] == INT64_MAX / 2 && i64[6] == 0);

    flx_reduce_finish(f32, 3, FLX_FLOAT32, FLX_AVG, 4);
    ck_assert(f32[0] == 0.25f && f32[1] == 0.75f && f32[2] == -1.5f);
    flx_reduce_finish(h, 2, FLX_FLOAT16, FLX_AVG, 4);
    ck_assert_uint_eq(h[0], 0x3a00); /* 0.75 */
    ck_assert_uint_eq(h[1], 0x3400); /* 0.25 */
    flx_reduce_finish(bf, 2, FLX_BFLOAT16, FLX_AVG, 4);
    ck_assert_uint_eq(bf[0], 0x3f40); /* 0.75 */
    ck_assert_uint_eq(bf[1], 0x3e80); /* 0.25 */
}
END_TEST

START_TEST(test_int_wrap)
{
    int32_t a32[] = {INT32_MAX, INT32_MIN, INT32_MAX, -1};
    int32_t b32[] = {1, -1, INT32_MAX, INT32_MIN};
    int64_t a64[] = {INT64_MAX, INT64_MIN, INT64_MAX, -1};
    int64_t b64[] = {1, -1, INT64_MAX, INT64_MIN};
    int32_t p32[] = {INT32_MAX, INT32_MIN, 65536, -3};
    int32_t q32[] = {2, -1, 65536, 5};
    int64_t p64[] = {INT64_MAX, INT64_MIN, 1ll << 32, -3};
    int64_t q64[] = {2, -1, 1ll << 32, 5};

    flx_reduce(a32, b32, 4, FLX_INT32, FLX_SUM);
    ck_assert_int_eq(a32[0], INT32_MIN);
    ck_assert_int_eq(a32[1], INT32_MAX);
    ck_assert_int_eq(a32[2], -2);
    ck_assert_int_eq(a32[3], INT32_MAX);
    flx_reduce(a64, b64, 4, FLX_INT64, FLX_SUM);
    ck_assert(a64[0] == INT64_MIN && a64[1] == INT64_MAX && a64[2] == -2 && a64[3] == INT64_MAX);
    flx_reduce(p32, q32, 4, FLX_INT32, FLX_PROD);
    ck_assert_int_eq(p32[0], -2);
    ck_assert_int_eq(p32[1], INT32_MIN);
    ck_assert_int_eq(p32[2], 0);
    ck_assert_int_eq(p32[3], -15);
    flx_reduce(p64, q64, 4, FLX_INT64, FLX_PROD);
    ck_assert(p64[0] == -2 && p64[1] == INT64_MIN && p64[2] == 0 && p64[3] == -15);
    /* AVG of wrapped sums */
    {
        int32_t x[] = {INT32_MAX}, y[] = {INT32_MAX};
        flx_reduce(x, y, 1, FLX_INT32, FLX_AVG);
        ck_assert_int_eq(x[0], -2);
        flx_reduce_finish(x, 1, FLX_INT32, FLX_AVG, 2);
        ck_assert_int_eq(x[0], -1);
    }
}
END_TEST

START_TEST(test_min_max_hand)
{
    float a[] = {1, -2, 3.5f, -INFINITY, 0};
    float b[] = {2, -3, 3.5f, 7, INFINITY};
    uint16_t ha[] = {0x3c00 /* 1 */, 0xc000 /* -2 */, 0x7bff /* 65504 */};
    uint16_t hb[] = {0x4000 /* 2 */, 0xc200 /* -3 */, 0xfbff /* -65504 */};
    int64_t ia[] = {INT64_MIN, 5, -5};
    int64_t ib[] = {INT64_MAX, 5, 4};

    flx_reduce(a, b, 5, FLX_FLOAT32, FLX_MAX);
    ck_assert(a[0] == 2 && a[1] == -2 && a[2] == 3.5f && a[3] == 7 && a[4] == INFINITY);
    flx_reduce(ha, hb, 3, FLX_FLOAT16, FLX_MIN);
    ck_assert(ha[0] == 0x3c00 && ha[1] == 0xc200 && ha[2] == 0xfbff);
    flx_reduce(ia, ib, 3, FLX_INT64, FLX_MIN);
    ck_assert(ia[0] == INT64_MIN && ia[1] == 5 && ia[2] == -5);
}
END_TEST

/* Min and max of every pair of special values, both operand orders, every
 * floating type: the same bits either way (an algorithm combines operands
 * in different orders on different ranks: MAX(NaN, 1) was 1 on one rank
 * and NaN on the other, MIN(-0, +0) -0 on one and +0 on the other), NaN
 * when either is NaN, -0 below +0. */
START_TEST(test_min_max_symmetric)
{
    uint32_t nan2 = 0x7fc01234u, nneg = 0xffc00001u;
    float vals[8] = {1.0f, -0.0f, 0.0f, NAN, INFINITY, -INFINITY, -1.0f, 0};
    float n2, nn;

    memcpy(&n2, &nan2, 4);
    memcpy(&nn, &nneg, 4);
    vals[7] = n2;
    for (int dt = 0; dt < 4; dt++) { /* float, double, half, bfloat16 */
        for (int op = FLX_MIN; op <= FLX_MAX; op++) {
            for (int i = 0; i < 8; i++) {
                for (int j = 0; j < 9; j++) {
                    float x = vals[i], y = j == 8 ? nn : vals[j];
                    unsigned char ab[8] = {0}, ba[8] = {0}, bx[8] = {0}, by[8] = {0};
                    size_t w = flx_dtype_size((flx_dtype_t)dt);
                    double r;
                    int nan_in = isnan(x) || isnan(y);

                    if (dt == FLX_FLOAT32) {
                        memcpy(bx, &x, 4);
                        memcpy(by, &y, 4);
                    } else if (dt == FLX_FLOAT64) {
                        double dx = x, dy = y;
                        memcpy(bx, &dx, 8);
                        memcpy(by, &dy, 8);
                    } else {
                        uint16_t hx = dt == FLX_FLOAT16 ? flx_float_to_half(x) : flx_float_to_bf16(x);
                        uint16_t hy = dt == FLX_FLOAT16 ? flx_float_to_half(y) : flx_float_to_bf16(y);
                        memcpy(bx, &hx, 2);
                        memcpy(by, &hy, 2);
                    }
                    memcpy(ab, bx, w);
                    memcpy(ba, by, w);
                    flx_reduce(ab, by, 1, (flx_dtype_t)dt, (flx_op_t)op);
                    flx_reduce(ba, bx, 1, (flx_dtype_t)dt, (flx_op_t)op);
                    ck_assert_msg(memcmp(ab, ba, w) == 0, "dtype %d op %d: %g with %g differs by "
                                  "order", dt, op, (double)x, (double)y);
                    if (dt == FLX_FLOAT32) {
                        float f;
                        memcpy(&f, ab, 4);
                        r = f;
                    } else if (dt == FLX_FLOAT64) {
                        memcpy(&r, ab, 8);
                    } else {
                        uint16_t h;
                        memcpy(&h, ab, 2);
                        r = dt == FLX_FLOAT16 ? flx_half_to_float(h) : flx_bf16_to_float(h);
                    }
                    ck_assert_msg(!nan_in == !isnan(r), "dtype %d op %d: %g with %g gave %g", dt,
                                  op, (double)x, (double)y, r);
                    if (x == 0 && y == 0 && signbit(x) != signbit(y))
                        ck_assert_msg(!signbit(r) == (op == FLX_MAX), "dtype %d op %d: -0 with "
                                      "+0 gave %g", dt, op, r);
                }
            }
        }
    }
}
END_TEST

/* flx_reduce_nan_one: every NaN of a floating sum, product or average (any
 * sign and payload, in any block of the pass) becomes the one quiet NaN;
 * Inf, -0 and the rest keep their bits; min, max and integers untouched */
START_TEST(test_nan_one)
{
    static const size_t at[] = {0, 5, 1023, 1024, 1500, 2999};
    const flx_dtype_t dt = (flx_dtype_t)_i;
    const size_t w = flx_dtype_size(dt), n = 3000;
    unsigned char *buf = malloc(n * 8), *orig = malloc(n * 8);
    const int fl = dt <= FLX_BFLOAT16;

    ck_assert_ptr_nonnull(buf);
    ck_assert_ptr_nonnull(orig);
    for (int op = 0; op < FLX_OP_COUNT; op++) {
        for (size_t i = 0; i < n * w; i++) /* sign, exponent and mantissa vary */
            buf[i] = (unsigned char)(i * 37 + 11);
        for (size_t i = 0; i < n; i++) { /* no NaN but where put: clear the top exponent bit */
            unsigned char *hi = buf + i * w + w - 1;
            *hi &= 0xbf;
        }
        for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
            unsigned char *e = buf + at[k] * w;
            memset(e, 0, w);
            const unsigned sign = k % 2;
            if (w == 4) {
                uint32_t v = 0x7fc00000u | (uint32_t)(k + 1) | (sign ? 0x80000000u : 0);
                memcpy(e, &v, 4);
            }
            if (w == 8) {
                uint64_t v = 0x7ff8000000000000ull | (k + 1) | (sign ? 1ull << 63 : 0);
                memcpy(e, &v, 8);
            }
            if (w == 2) {
                uint16_t v = (uint16_t)(((dt == FLX_FLOAT16 ? 0x7c01u : 0x7f81u) + k) |
                                        (sign ? 0x8000u : 0));
                memcpy(e, &v, 2);
            }
        }
        { /* -0 and +Inf right after a NaN stay */
            unsigned char *e = buf + 6 * w, *f = buf + 7 * w;
            uint64_t inf = w == 4 ? 0x7f800000u : w == 8 ? 0x7ff0000000000000ull
                         : dt == FLX_FLOAT16 ? 0x7c00u : 0x7f80u;
            memset(e, 0, w);
            e[w - 1] = 0x80;
            memcpy(f, &inf, w); /* little-endian: the low bytes */
        }
        memcpy(orig, buf, n * w);
        flx_reduce_nan_one(buf, n, dt, (flx_op_t)op);
        for (size_t i = 0; i < n; i++) {
            int put = 0;
            for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++)
                put |= at[k] == i;
            if (put && fl && op != FLX_MIN && op != FLX_MAX) {
                uint64_t v = 0, one = w == 4 ? 0x7fc00000u : w == 8 ? 0x7ff8000000000000ull
                                    : dt == FLX_FLOAT16 ? 0x7e00u : 0x7fc0u;
                memcpy(&v, buf + i * w, w);
                ck_assert_msg(v == one, "%s %s [%zu]: %llx, not the one NaN %llx",
                              flx_dtype_name(dt), flx_op_name((flx_op_t)op), i,
                              (unsigned long long)v, (unsigned long long)one);
            } else {
                ck_assert_msg(memcmp(buf + i * w, orig + i * w, w) == 0, "%s %s [%zu] changed",
                              flx_dtype_name(dt), flx_op_name((flx_op_t)op), i);
            }
        }
    }
    free(orig);
    free(buf);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* conversions                                                             */
/* ---------------------------------------------------------------------- */

START_TEST(test_half_all_patterns)
{
    int nans = 0, subnormals = 0;

    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = flx_half_to_float((uint16_t)h);
        float r = ref_half_to_float((uint16_t)h);
        uint16_t back = flx_float_to_half(f);

        if (half_is_nan((uint16_t)h)) {
            FAST_ASSERT(isnan(f), "0x%04x is NaN, converted to %a", h, f);
            FAST_ASSERT(half_is_nan(back), "NaN 0x%04x came back as 0x%04x", h, back);
            FAST_ASSERT(!!signbit(f) == !!(h & 0x8000), "NaN 0x%04x lost its sign", h);
            nans++;
            continue;
        }
        if ((h & 0x7c00) == 0 && (h & 0x3ff) != 0)
            subnormals++;
        FAST_ASSERT(fbits(f) == fbits(r), "half 0x%04x -> %a, expected %a", h, f, r);
        FAST_ASSERT(back == h, "half 0x%04x -> %a -> 0x%04x", h, f, back);
    }
    ck_assert_int_eq(nans, 2 * 1023);
    ck_assert_int_eq(subnormals, 2 * 1023);
    ck_assert(flx_half_to_float(0x7c00) == INFINITY);
    ck_assert(flx_half_to_float(0xfc00) == -INFINITY);
    ck_assert(flx_half_to_float(0x0001) == 0x1p-24f);
    ck_assert(flx_half_to_float(0x03ff) == 1023 * 0x1p-24f);
    ck_assert(flx_half_to_float(0x0400) == 0x1p-14f);
    ck_assert(flx_half_to_float(0x7bff) == 65504.0f);
    ck_assert(flx_half_to_float(0x3555) == 0x1.554p-2f);
}
END_TEST

START_TEST(test_half_rounding_hand)
{
    static const struct { float f; uint16_t h; } table[] = {
        {1.0f, 0x3c00},
        {1.0f + 0x1p-11f, 0x3c00},             /* tie, even is down */
        {1.0f + 3 * 0x1p-11f, 0x3c02},         /* tie, even is up */
        {1.0f + 0x1p-11f + 0x1p-22f, 0x3c01},  /* just above the tie */
        {1.0f + 0x1p-11f - 0x1p-23f, 0x3c00},  /* just below */
        {2049.0f, 0x6800},
        {2051.0f, 0x6802},
        {-2.0f, 0xc000},
        {0.1f, 0x2e66},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {65504.0f, 0x7bff},
        {65519.99f, 0x7bff},
        {65520.0f, 0x7c00},                    /* halfway to 2^16: overflows */
        {-65520.0f, 0xfc00},
        {1e6f, 0x7c00},
        {FLT_MAX, 0x7c00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {0x1p-14f, 0x0400},                    /* smallest normal */
        {1023.5f * 0x1p-24f, 0x0400},          /* tie between subnormal 0x3ff and 0x400 */
        {1022.5f * 0x1p-24f, 0x03fe},
        {0x1p-24f, 0x0001},                    /* smallest subnormal */
        {0x1p-25f, 0x0000},                    /* tie with 0: even */
        {-0x1p-25f, 0x8000},
        {1.5f * 0x1p-25f, 0x0001},
        {3 * 0x1p-25f, 0x0002},
        {0x1p-25f + 0x1p-40f, 0x0001},
        {1e-8f, 0x0000},
        {5e-8f, 0x0001},
        {FLT_TRUE_MIN, 0x0000},
    };

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        FAST_ASSERT(flx_float_to_half(table[i].f) == table[i].h,
                      "flx_float_to_half(%a) = 0x%04x, expected 0x%04x", table[i].f,
                      flx_float_to_half(table[i].f), table[i].h);
        /* the reference agrees with the hand table */
        ck_assert_uint_eq(ref_float_to_half(table[i].f), table[i].h);
    }
    ck_assert(half_is_nan(flx_float_to_half(NAN)));
    ck_assert(half_is_nan(flx_float_to_half(bitsf(0x7f800001)))); /* low payload only */
    ck_assert(half_is_nan(flx_float_to_half(bitsf(0xffc00000))));
}
END_TEST

/* every tie between neighbouring halves, and the floats around it */
START_TEST(test_half_rounding_ties)
{
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (int neg = 0; neg < 2; neg++) {
            uint16_t sign = neg ? 0x8000 : 0;
            float lo = ref_half_to_float((uint16_t)(h | sign));
            float hi = h + 1 == 0x7c00 ? (neg ? -65536.0f : 65536.0f)
                                       : ref_half_to_float((uint16_t)((h + 1) | sign));
            float mid = (float)(((double)lo + hi) / 2); /* exact: 12 significant bits */
            uint16_t even = (uint16_t)(((h & 1) ? h + 1 : h) | sign);
            float probes[] = {mid, nextafterf(mid, 0), nextafterf(mid, neg ? -INFINITY : INFINITY),
                              lo, nextafterf(lo, neg ? -INFINITY : INFINITY)};

            FAST_ASSERT(flx_float_to_half(mid) == even, "tie %a -> 0x%04x, expected 0x%04x",
                          mid, flx_float_to_half(mid), even);
            FAST_ASSERT(flx_float_to_half(probes[1]) == (h | sign), "below tie %a", mid);
            FAST_ASSERT(flx_float_to_half(probes[2]) == ((h + 1) | sign), "above tie %a", mid);
            for (size_t p = 0; p < sizeof(probes) / sizeof(probes[0]); p++)
                FAST_ASSERT(flx_float_to_half(probes[p]) == ref_float_to_half(probes[p]),
                              "%a -> 0x%04x, expected 0x%04x", probes[p],
                              flx_float_to_half(probes[p]), ref_float_to_half(probes[p]));
        }
    }
}
END_TEST

START_TEST(test_half_rounding_random)
{
    for (int i = 0; i < (1 << 22); i++) {
        float f = bitsf((uint32_t)rng());
        uint16_t got = flx_float_to_half(f), want = ref_float_to_half(f);

        if (isnan(f))
            FAST_ASSERT(half_is_nan(got), "NaN %08x -> 0x%04x", fbits(f), got);
        else
            FAST_ASSERT(got == want, "%a (%08x) -> 0x%04x, expected 0x%04x", f, fbits(f), got,
                          want);
    }
}
END_TEST

START_TEST(test_bf16_all_patterns)
{
    int nans = 0;

    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = flx_bf16_to_float((uint16_t)h);
        uint16_t back = flx_float_to_bf16(f);

        if (bf16_is_nan((uint16_t)h)) {
            FAST_ASSERT(isnan(f), "bf16 NaN 0x%04x -> %a", h, f);
            FAST_ASSERT(bf16_is_nan(back), "NaN 0x%04x came back as 0x%04x", h, back);
            nans++;
            continue;
        }
        FAST_ASSERT(fbits(f) == h << 16, "bf16 0x%04x -> %08x", h, fbits(f));
        FAST_ASSERT(back == h, "bf16 0x%04x -> %a -> 0x%04x", h, f, back);
    }
    ck_assert_int_eq(nans, 2 * 127);
}
END_TEST

START_TEST(test_bf16_rounding)
{
    static const struct { uint32_t u; uint16_t h; } table[] = {
        {0x3f800000, 0x3f80},                  /* 1.0 */
        {0x3f808000, 0x3f80},                  /* 1 + 2^-8: tie, even is down */
        {0x3f818000, 0x3f82},                  /* 1 + 3 * 2^-8: tie, even is up */
        {0x3f808001, 0x3f81},                  /* just above the tie */
        {0x3f807fff, 0x3f80},
        {0x3dcccccd, 0x3dcd},                  /* 0.1f */
        {0x40400000, 0x4040},                  /* 3.0 */
        {0x80000000, 0x8000},                  /* -0.0 */
        {0x7f7fffff, 0x7f80},                  /* FLT_MAX overflows to Inf */
        {0xff7fffff, 0xff80},
        {0x7f7f7fff, 0x7f7f},                  /* stays the largest finite */
        {0x7f800000, 0x7f80},
        {0x00000001, 0x0000},                  /* float subnormals */
        {0x00008000, 0x0000},
        {0x00018000, 0x0002},
        {0x00008001, 0x0001},
    };

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        FAST_ASSERT(flx_float_to_bf16(bitsf(table[i].u)) == table[i].h,
                      "flx_float_to_bf16(%08x) = 0x%04x, expected 0x%04x", table[i].u,
                      flx_float_to_bf16(bitsf(table[i].u)), table[i].h);
        ck_assert_uint_eq(ref_float_to_bf16(bitsf(table[i].u)), table[i].h);
    }
    /* a NaN whose payload sits in the discarded bits must not become Inf */
    ck_assert(bf16_is_nan(flx_float_to_bf16(bitsf(0x7f800001))));
    ck_assert(bf16_is_nan(flx_float_to_bf16(bitsf(0xff800001))));
    ck_assert(bf16_is_nan(flx_float_to_bf16(bitsf(0x7fffffff))));
    ck_assert(bf16_is_nan(flx_float_to_bf16(NAN)));
    /* every tie: even neighbour; one float off the tie: the nearer one */
    for (uint32_t h = 0; h < 0x7f80; h++) {
        for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
            uint32_t mid = ((h | sign) << 16) | 0x8000;
            uint16_t even = (uint16_t)(((h & 1) ? h + 1 : h) | sign);
            FAST_ASSERT(flx_float_to_bf16(bitsf(mid)) == even, "tie %08x", mid);
            FAST_ASSERT(flx_float_to_bf16(bitsf(mid - 1)) == (h | sign), "below tie %08x", mid);
            FAST_ASSERT(flx_float_to_bf16(bitsf(mid + 1)) == ((h + 1) | sign), "above tie %08x",
                        mid);
        }
    }
    for (int i = 0; i < (1 << 22); i++) {
        float f = bitsf((uint32_t)rng());
        uint16_t got = flx_float_to_bf16(f);
        if (isnan(f))
            FAST_ASSERT(bf16_is_nan(got), "NaN %08x -> 0x%04x", fbits(f), got);
        else
            FAST_ASSERT(got == ref_float_to_bf16(f), "%08x -> 0x%04x, expected 0x%04x",
                          fbits(f), got, ref_float_to_bf16(f));
    }
}
END_TEST

START_TEST(test_names_sizes)
{
    static const size_t sizes[] = {4, 8, 2, 2, 4, 8};
    static const char *const dnames[] = {"float", "double", "half", "bfloat16", "int32", "int64"};
    static const char *const onames[] = {"sum", "prod", "min", "max", "avg"};

    ck_assert_int_eq(FLX_DTYPE_COUNT, 6);
    ck_assert_int_eq(FLX_OP_COUNT, 5);
    for (int d = 0; d < FLX_DTYPE_COUNT; d++) {
        ck_assert_uint_eq(flx_dtype_size((flx_dtype_t)d), sizes[d]);
        ck_assert_str_eq(flx_dtype_name((flx_dtype_t)d), dnames[d]);
        ck_assert(flx_dtype_valid((flx_dtype_t)d));
    }
    for (int o = 0; o < FLX_OP_COUNT; o++) {
        ck_assert_str_eq(flx_op_name((flx_op_t)o), onames[o]);
        ck_assert(flx_op_valid((flx_op_t)o));
    }
    ck_assert_uint_eq(flx_dtype_size(FLX_DTYPE_COUNT), 0);
    ck_assert_uint_eq(flx_dtype_size((flx_dtype_t)-1), 0);
    ck_assert_str_eq(flx_dtype_name(FLX_DTYPE_COUNT), "invalid");
    ck_assert_str_eq(flx_dtype_name((flx_dtype_t)-1), "invalid");
    ck_assert_str_eq(flx_op_name(FLX_OP_COUNT), "invalid");
    ck_assert_str_eq(flx_op_name((flx_op_t)-1), "invalid");
    ck_assert(!flx_dtype_valid(FLX_DTYPE_COUNT));
    ck_assert(!flx_op_valid((flx_op_t)-1));
    ck_assert_str_eq(flx_algo_name(FLX_ALGO_AUTO), "auto");
    ck_assert_str_eq(flx_algo_name(FLX_ALGO_RING), "ring");
    ck_assert_str_eq(flx_algo_name(FLX_ALGO_TREE), "tree");
    ck_assert_str_eq(flx_algo_name(FLX_ALGO_RD), "rd");
    ck_assert_str_eq(flx_algo_name(FLX_ALGO_HD), "hd");
    ck_assert_str_eq(flx_algo_name(FLX_ALGO_COUNT), "invalid");
}
END_TEST

/* Every alignment of the destination against the 32-byte streaming stores
 * (and a few of the source), every length around the 128-byte loop, the
 * 4 KiB page and a long run: the bytes are the source's, and the guard
 * bytes on either side are untouched. */
START_TEST(test_copy_stream)
{
    static const size_t lens[] = {0,   1,    31,   32,   33,   127,  128,  129,  255,
                                  256, 4095, 4096, 4097, 4224, 65557, (1u << 20) + 77};
    const size_t guard = 64, maxlen = (1u << 20) + 77;
    unsigned char *src = malloc(maxlen + 8), *dst = malloc(maxlen + 2 * guard + 64);

    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    for (size_t i = 0; i < maxlen + 8; i++)
        src[i] = (unsigned char)(i * 131 + (i >> 9) + 7);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
        for (size_t doff = 0; doff < 33; doff++)
            for (size_t soff = 0; soff < 8; soff += 3) {
                unsigned char *d = dst + guard + doff;
                size_t n = lens[l];
                memset(dst, 0xa5, n + 2 * guard + 64);
                flx_copy_stream(d, src + soff, n);
                if (memcmp(d, src + soff, n) != 0)
                    ck_abort_msg("copy of %zu bytes, dst offset %zu, src offset %zu differs", n,
                                 doff, soff);
                for (size_t i = 0; i < guard + doff; i++)
                    ck_assert_msg(dst[i] == 0xa5, "byte %zu before a %zu-byte copy written",
                                  guard + doff - i, n);
                for (size_t i = 0; i < guard; i++)
                    ck_assert_msg(d[n + i] == 0xa5, "byte %zu after a %zu-byte copy written", i,
                                  n);
            }
    free(src);
    free(dst);
}
END_TEST

/* The size above which a copy streams: this core's L2 cache as sysconf
 * tells it, 1 MiB where it does not, never without AVX. */
START_TEST(test_copy_stream_min)
{
    size_t min = flx_copy_stream_min();
#if defined(__x86_64__)
    long l2 = 0;
#ifdef _SC_LEVEL2_CACHE_SIZE
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif

    if (!__builtin_cpu_supports("avx"))
        ck_assert_uint_eq(min, SIZE_MAX);
    else
        ck_assert_uint_eq(min, l2 > 0 ? (size_t)l2 : (size_t)1 << 20);
#else
    ck_assert_uint_eq(min, SIZE_MAX);
#endif
}
END_TEST

static Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");
    TCase *tk = tcase_create("kernels");
    TCase *tc = tcase_create("conversions");

    tcase_set_timeout(tk, 60);
    tcase_add_loop_test(tk, test_reduce_all, 0, FLX_DTYPE_COUNT);
    tcase_add_loop_test(tk, test_reduce_avg, 0, FLX_DTYPE_COUNT);
    tcase_add_test(tk, test_finish_noop_and_int_division);
    tcase_add_test(tk, test_int_wrap);
    tcase_add_test(tk, test_min_max_hand);
    tcase_add_test(tk, test_min_max_symmetric);
    tcase_add_loop_test(tk, test_nan_one, 0, FLX_DTYPE_COUNT);
    tcase_add_test(tk, test_copy_stream);
    tcase_add_test(tk, test_copy_stream_min);
    suite_add_tcase(s, tk);

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_half_all_patterns);
    tcase_add_test(tc, test_half_rounding_hand);
    tcase_add_test(tc, test_half_rounding_ties);
    tcase_add_test(tc, test_half_rounding_random);
    tcase_add_test(tc, test_bf16_all_patterns);
    tcase_add_test(tc, test_bf16_rounding);
    tcase_add_test(tc, test_names_sizes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(reduce_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
