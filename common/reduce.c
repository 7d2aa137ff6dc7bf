/* reduce.c -- local reduction kernels.  Plain loops over restrict pointers
 * that the compiler vectorises (see tools/flx-reduce-perf for the measured
 * bandwidth against memcpy). */
#include "common/dtype.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define OP_SUM(a, b) ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))
#define OP_MIN(a, b) ((b) < (a) ? (b) : (a))
#define OP_MAX(a, b) ((b) > (a) ? (b) : (a))

/* Floating min and max give the same bits whatever the operands' order
 * (an algorithm combines them in different orders on different ranks, in
 * place and out of place): NaN if either is NaN (one quiet NaN, whatever
 * the payloads), -0 below +0.  Equal values differ only as -0 / +0: OR of
 * the bits is the min, AND the max. */
#define DEFINE_FMINMAX(T, UT, QNAN, fmin_name, fmax_name)                  \
    static inline T fmin_name(T a, T b)                                     \
    {                                                                       \
        UT x, y, r;                                                         \
        memcpy(&x, &a, sizeof(x));                                          \
        memcpy(&y, &b, sizeof(y));                                          \
        UT lt = (UT)0 - (UT)(a < b), gt = (UT)0 - (UT)(b < a);               \
        UT eq = (UT)0 - (UT)(a == b);                                       \
        r = (x & lt) | (y & gt) | ((x | y) & eq) | ((UT)(QNAN) & ~(lt | gt | eq)); \
        memcpy(&a, &r, sizeof(a));                                          \
        return a;                                                           \
    }                                                                       \
    static inline T fmax_name(T a, T b)                                     \
    {                                                                       \
        UT x, y, r;                                                         \
        memcpy(&x, &a, sizeof(x));                                          \
        memcpy(&y, &b, sizeof(y));                                          \
        UT gt = (UT)0 - (UT)(a > b), lt = (UT)0 - (UT)(b > a);             \
        UT eq = (UT)0 - (UT)(a == b);                                       \
        r = (x & gt) | (y & lt) | ((x & y) & eq) | ((UT)(QNAN) & ~(lt | gt | eq)); \
        memcpy(&a, &r, sizeof(a));                                          \
        return a;                                                           \
    }
DEFINE_FMINMAX(float, uint32_t, 0x7fc00000u, fmin_sym, fmax_sym)
DEFINE_FMINMAX(double, uint64_t, 0x7ff8000000000000ull, dmin_sym, dmax_sym)
#define OP_FMIN(a, b) fmin_sym(a, b)
#define OP_FMAX(a, b) fmax_sym(a, b)
#define OP_DMIN(a, b) dmin_sym(a, b)
#define OP_DMAX(a, b) dmax_sym(a, b)

#define DEFINE_KERNEL(name, T, OP)                                          \
    static void name(T *restrict io, const T *restrict in, size_t n)        \
    {                                                                       \
        for (size_t i = 0; i < n; i++)                                      \
            io[i] = OP(io[i], in[i]);                                       \
    }

/* Integer sum and product wrap around (computed on unsigned types) rather
 * than invoke undefined behaviour. */
#define DEFINE_INT_KERNEL(name, T, UT, OP)                                  \
    static void name(T *restrict io, const T *restrict in, size_t n)        \
    {                                                                       \
        for (size_t i = 0; i < n; i++)                                      \
            io[i] = (T)OP((UT)io[i], (UT)in[i]);                            \
    }

#define DEFINE_HALF_KERNEL(name, TOF, FROMF, OP)                            \
    static void name(uint16_t *restrict io, const uint16_t *restrict in,    \
                     size_t n)                                              \
    {                                                                       \
        for (size_t i = 0; i < n; i++)                                      \
            io[i] = FROMF(OP(TOF(io[i]), TOF(in[i])));                      \
    }

#define DEFINE_FAMILY(prefix, T, MIN, MAX)                                  \
    DEFINE_KERNEL(prefix##_sum, T, OP_SUM)                                  \
    DEFINE_KERNEL(prefix##_prod, T, OP_PROD)                                \
    DEFINE_KERNEL(prefix##_min, T, MIN)                                     \
    DEFINE_KERNEL(prefix##_max, T, MAX)

#define DEFINE_INT_FAMILY(prefix, T, UT)                                    \
    DEFINE_INT_KERNEL(prefix##_sum, T, UT, OP_SUM)                          \
    DEFINE_INT_KERNEL(prefix##_prod, T, UT, OP_PROD)                        \
    DEFINE_KERNEL(prefix##_min, T, OP_MIN)                                  \
    DEFINE_KERNEL(prefix##_max, T, OP_MAX)

#define DEFINE_HALF_FAMILY(prefix, TOF, FROMF)                              \
    DEFINE_HALF_KERNEL(prefix##_sum, TOF, FROMF, OP_SUM)                    \
    DEFINE_HALF_KERNEL(prefix##_prod, TOF, FROMF, OP_PROD)                  \
    DEFINE_HALF_KERNEL(prefix##_min, TOF, FROMF, OP_FMIN)                   \
    DEFINE_HALF_KERNEL(prefix##_max, TOF, FROMF, OP_FMAX)

DEFINE_FAMILY(k_f32, float, OP_FMIN, OP_FMAX)
DEFINE_FAMILY(k_f64, double, OP_DMIN, OP_DMAX)
DEFINE_INT_FAMILY(k_i32, int32_t, uint32_t)
DEFINE_INT_FAMILY(k_i64, int64_t, uint64_t)
DEFINE_HALF_FAMILY(k_f16, flx_half_to_float, flx_float_to_half)
DEFINE_HALF_FAMILY(k_bf16, flx_bf16_to_float, flx_float_to_bf16)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* float16 with the F16C conversion instructions, 8 lanes at a time; the
 * scalar tail uses the same rounding (to nearest even).  Sum and product
 * only: min and max take the scalar kernels (their NaN and -0 rules). */
#define DEFINE_F16C_KERNEL(name, VOP, SOP)                                   \
    __attribute__((target("avx,f16c"))) static void name(                    \
        uint16_t *restrict io, const uint16_t *restrict in, size_t n)        \
    {                                                                        \
        size_t i = 0;                                                        \
        for (; i + 8 <= n; i += 8) {                                         \
            __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(io + i))); \
            __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))); \
            _mm_storeu_si128((__m128i *)(io + i),                            \
                             _mm256_cvtps_ph(VOP, _MM_FROUND_TO_NEAREST_INT)); \
        }                                                                    \
        for (; i < n; i++)                                                   \
            io[i] = flx_float_to_half(SOP(flx_half_to_float(io[i]),          \
                                          flx_half_to_float(in[i])));        \
    }
DEFINE_F16C_KERNEL(k_f16c_sum, _mm256_add_ps(a, b), OP_SUM)
DEFINE_F16C_KERNEL(k_f16c_prod, _mm256_mul_ps(a, b), OP_PROD)
#define HAVE_F16C_KERNELS 1
#endif

typedef void (*reduce_fn_t)(void *restrict, const void *restrict, size_t);

#define ROW(prefix)                                                         \
    {(reduce_fn_t)prefix##_sum, (reduce_fn_t)prefix##_prod,                 \
     (reduce_fn_t)prefix##_min, (reduce_fn_t)prefix##_max,                  \
     (reduce_fn_t)prefix##_sum}

/* [dtype][op]; FLX_AVG reduces as a sum. */
static const reduce_fn_t reduce_table[FLX_DTYPE_COUNT][FLX_OP_COUNT] = {
    ROW(k_f32), ROW(k_f64), ROW(k_f16), ROW(k_bf16), ROW(k_i32), ROW(k_i64),
};

#ifdef HAVE_F16C_KERNELS
static const reduce_fn_t reduce_f16c_row[FLX_OP_COUNT] = {
    (reduce_fn_t)k_f16c_sum, (reduce_fn_t)k_f16c_prod, (reduce_fn_t)k_f16_min,
    (reduce_fn_t)k_f16_max, (reduce_fn_t)k_f16c_sum};
#endif

void flx_reduce(void *restrict inout, const void *restrict in, size_t count,
                flx_dtype_t dtype, flx_op_t op)
{
#ifdef HAVE_F16C_KERNELS
    if (dtype == FLX_FLOAT16 && __builtin_cpu_supports("f16c") &&
        __builtin_cpu_supports("avx")) {
        reduce_f16c_row[op](inout, in, count);
        return;
    }
#endif
    reduce_table[dtype][op](inout, in, count);
}

/* A NaN's bits without the sign are above Inf's.  The test of a block is
 * a loop of its own, compared as signed integers of the type's width (SSE2
 * has those compares), so that it vectorises: the pass only reads unless a
 * block holds a NaN. */
#define DEFINE_NAN_ONE(name, UT, ST, ABS, INF, QNAN)                        \
    static int name##_any(const UT *p, size_t n)                            \
    {                                                                       \
        ST m = 0;                                                           \
        for (size_t i = 0; i < n; i++)                                      \
            m |= (ST) - (ST)((ST)(p[i] & (UT)(ABS)) > (ST)(INF));           \
        return m != 0;                                                      \
    }                                                                       \
    static void name(UT *p, size_t n)                                       \
    {                                                                       \
        for (size_t b = 0; b < n; b += 1024) {                              \
            const size_t m = n - b < 1024 ? n - b : 1024;                   \
            if (!name##_any(p + b, m))                                      \
                continue;                                                   \
            for (size_t i = b; i < b + m; i++)                              \
                if ((ST)(p[i] & (UT)(ABS)) > (ST)(INF))                     \
                    p[i] = (UT)(QNAN);                                      \
        }                                                                   \
    }
DEFINE_NAN_ONE(nan_one_32, uint32_t, int32_t, 0x7fffffffu, 0x7f800000, 0x7fc00000u)
DEFINE_NAN_ONE(nan_one_64, uint64_t, int64_t, 0x7fffffffffffffffull, 0x7ff0000000000000ll,
               0x7ff8000000000000ull)
DEFINE_NAN_ONE(nan_one_f16, uint16_t, int16_t, 0x7fffu, 0x7c00, 0x7e00u)
DEFINE_NAN_ONE(nan_one_bf16, uint16_t, int16_t, 0x7fffu, 0x7f80, 0x7fc0u)

void flx_reduce_nan_one(void *buf, size_t count, flx_dtype_t dtype, flx_op_t op)
{
    if (op != FLX_SUM && op != FLX_PROD && op != FLX_AVG)
        return; /* min and max pick one NaN already */
    switch (dtype) {
    case FLX_FLOAT32: nan_one_32(buf, count); break;
    case FLX_FLOAT64: nan_one_64(buf, count); break;
    case FLX_FLOAT16: nan_one_f16(buf, count); break;
    case FLX_BFLOAT16: nan_one_bf16(buf, count); break;
    default: break; /* integers */
    }
}

void flx_reduce_finish(void *buf, size_t count, flx_dtype_t dtype, flx_op_t op,
                       int nranks)
{
    if (op != FLX_AVG || nranks <= 1)
        return;
    switch (dtype) {
    case FLX_FLOAT32: {
        float *p = buf;
        for (size_t i = 0; i < count; i++) p[i] /= (float)nranks;
        break;
    }
    case FLX_FLOAT64: {
        double *p = buf;
        for (size_t i = 0; i < count; i++) p[i] /= nranks;
        break;
    }
    case FLX_FLOAT16: {
        uint16_t *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] = flx_float_to_half(flx_half_to_float(p[i]) / (float)nranks);
        break;
    }
    case FLX_BFLOAT16: {
        uint16_t *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] = flx_float_to_bf16(flx_bf16_to_float(p[i]) / (float)nranks);
        break;
    }
    case FLX_INT32: {
        int32_t *p = buf;
        for (size_t i = 0; i < count; i++) p[i] /= nranks;
        break;
    }
    case FLX_INT64: {
        int64_t *p = buf;
        for (size_t i = 0; i < count; i++) p[i] /= nranks;
        break;
    }
    default:
        break;
    }
}
