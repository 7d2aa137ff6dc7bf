/* quant.c -- the quantisers: fp16 / bf16 casts (combined by a half-precision
 * allreduce) and 8-bit QSGD with stochastic rounding and a scale per bucket
 * (combined by an allgather: levels of different scales do not add).
 *
 * Both return the decoded value's energy (for the compression gain) and,
 * when asked, the residual acc - decoded for error feedback.  For the casts
 * acc - decoded is exact (Sterbenz: the rounded value is within a factor of
 * two of acc), except where fp16 saturates at +-65504.
 */
#include "compress/cmp.h"
#include "common/dtype.h"
#include "common/util.h"

#include <math.h>
#include <string.h>

#define QUANT_FP16_MAX 65504.0f
#define QUANT_BF16_MAX 0x7f7fu /* the largest finite bfloat16, 3.39e38 */
#define QSGD_LEVELS 127

/* The largest half h whose sum over nranks ranks stays finite in any
 * order of additions: the allreduce rounds to half after each one, which
 * adds at most 16 (half the spacing of the top binade) each time, so h is
 * the largest with nranks * h + 16 * (nranks - 1) <= 65504 (without the
 * 16s, 10 ranks' ring summed 10 x 6548 to 65524, which rounds to Inf). */
static float quant_fp16_share(int nranks)
{
    const int n = nranks > 1 ? nranks : 1;
    const float share = (QUANT_FP16_MAX - 16.0f * (float)(n - 1)) / (float)n;
    uint16_t h = flx_float_to_half(share);

    if (flx_half_to_float(h) > share)
        h--;
    return flx_half_to_float(h);
}

double cmp_cast_encode(const float *acc, uint16_t *q, size_t n, flx_dtype_t dtype,
                       float *resid, int nranks)
{
    double c2 = 0;

    if (dtype == FLX_FLOAT16) {
        /* with a residual to hold the rest, no rank sends more than its
         * share of the range: a sum past 65504 failed every step while it
         * lasted, and for good where the residual kept it there */
        const float lim = resid ? quant_fp16_share(nranks) : QUANT_FP16_MAX;

        for (size_t i = 0; i < n; i++) {
            float a = acc[i], c = a > lim ? lim : a < -lim ? -lim : a;
            uint16_t h = flx_float_to_half(c);
            float d = flx_half_to_float(h);
            q[i] = h;
            if (resid)
                resid[i] = a - d;
            c2 += (double)d * d;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float a = acc[i];
            uint16_t h = flx_float_to_bf16(a);
            float d;
            if ((h & 0x7fffu) == 0x7f80u && isfinite(a)) /* rounded up to Inf */
                h = (uint16_t)((h & 0x8000u) | QUANT_BF16_MAX);
            d = flx_bf16_to_float(h);
            q[i] = h;
            if (resid)
                resid[i] = a - d;
            c2 += (double)d * d;
        }
    }
    return c2;
}

void cmp_cast_decode(const uint16_t *q, size_t n, flx_dtype_t dtype, float div, float *out)
{
    if (dtype == FLX_FLOAT16) {
        for (size_t i = 0; i < n; i++)
            out[i] = flx_half_to_float(q[i]) / div;
    } else {
        for (size_t i = 0; i < n; i++)
            out[i] = flx_bf16_to_float(q[i]) / div;
    }
}

size_t cmp_cast_first_nonfinite(const uint16_t *q, size_t n, flx_dtype_t dtype)
{
    const uint16_t exp = dtype == FLX_FLOAT16 ? 0x7c00u : 0x7f80u; /* all ones: Inf, NaN */

    for (size_t i = 0; i < n; i++)
        if ((q[i] & exp) == exp)
            return i;
    return n;
}

static size_t qsgd_buckets(size_t n, size_t bucket) { return FLX_DIV_ROUND_UP(n, bucket); }

size_t cmp_qsgd8_bytes(size_t n, size_t bucket)
{
    return qsgd_buckets(n, bucket) * sizeof(float) + n;
}

/* the decoded value of level l in a bucket of scale s: the same expression
 * on the encoding and the decoding side */
static inline float qsgd_step(float s) { return s * (1.0f / QSGD_LEVELS); }

double cmp_qsgd8_encode(const float *acc, size_t n, size_t bucket, cmp_rng_t *rng,
                        void *block, float *resid)
{
    const size_t nb = qsgd_buckets(n, bucket);
    float *scales = block;
    int8_t *lv = (int8_t *)((char *)block + nb * sizeof(float));
    double c2 = 0;

    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * bucket, hi = FLX_MIN(n, lo + bucket);
        float s = 0, step;
        double inv; /* 127 / s overflows a float for s below 3.7e-37 */
        uint64_t bits = 0;
        int have = 0;

        for (size_t i = lo; i < hi; i++)
            s = fmaxf(s, fabsf(acc[i]));
        scales[b] = s;
        inv = s > 0 ? QSGD_LEVELS / (double)s : 0.0;
        step = qsgd_step(s);
        for (size_t i = lo; i < hi; i++) {
            float a = acc[i], u, d;
            int l;
            if (!have) { /* two 24-bit uniforms per draw */
                bits = cmp_rng_next(rng);
                have = 2;
            }
            u = (float)(bits & 0xffffff) * 0x1.0p-24f;
            bits >>= 32;
            have--;
            l = (int)(fabsf(a) * inv + u); /* |a| <= s: at most 127 + u */
            l = l > QSGD_LEVELS ? QSGD_LEVELS : l;
            l = a < 0 ? -l : l;
            lv[i] = (int8_t)l;
            d = (float)l * step;
            if (resid)
                resid[i] = a - d;
            c2 += (double)d * d;
        }
    }
    return c2;
}

void cmp_qsgd8_decode_add(const void *block, size_t n, size_t bucket, float *out)
{
    const size_t nb = qsgd_buckets(n, bucket);
    const float *scales = block;
    const int8_t *lv = (const int8_t *)((const char *)block + nb * sizeof(float));

    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * bucket, hi = FLX_MIN(n, lo + bucket);
        float step = qsgd_step(scales[b]);
        for (size_t i = lo; i < hi; i++)
            out[i] += (float)lv[i] * step;
    }
}
