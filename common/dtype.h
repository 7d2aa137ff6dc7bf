/* dtype.h -- element types, half-precision conversions and the local
 * reduction kernels used by every collective. */
#ifndef FLX_COMMON_DTYPE_H
#define FLX_COMMON_DTYPE_H

#include "flexcoll.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* inout[i] = inout[i] OP in[i] for i < count.  FLX_AVG combines as a sum;
 * flx_reduce_finish divides once at the end.  Half types compute each
 * combination in float32 and round once (to nearest even).  The buffers
 * must not overlap. */
void flx_reduce(void *restrict inout, const void *restrict in, size_t count,
                flx_dtype_t dtype, flx_op_t op);
/* Final step of FLX_AVG: buf[i] /= nranks.  No-op for other ops. */
void flx_reduce_finish(void *buf, size_t count, flx_dtype_t dtype, flx_op_t op,
                       int nranks);
/* Every NaN in buf becomes the one quiet NaN (sign clear, payload the top
 * mantissa bit), for a floating sum, product or average (no-op otherwise):
 * which NaN a sum or product gives depends on the operands' order (x86
 * keeps the first one's), and an algorithm whose ranks each combine the
 * same values in their own order gives them all the same bits so. */
void flx_reduce_nan_one(void *buf, size_t count, flx_dtype_t dtype, flx_op_t op);
int flx_dtype_valid(flx_dtype_t dtype);
/* The index of the first NaN or Inf in x[0, n), or n if there is none. */
size_t flx_first_nonfinite(const float *x, size_t n);
int flx_op_valid(flx_op_t op);

/* Conversions, inline so that the half kernels vectorise. */
static inline uint32_t flx_f2u_(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float flx_u2f_(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* IEEE binary16 -> binary32, exact (subnormals, Inf and NaN included). */
static inline float flx_half_to_float(uint16_t h)
{
    const float magic = flx_u2f_((254u - 15u) << 23);
    const float was_infnan = flx_u2f_((127u + 16u) << 23);
    float o = flx_u2f_((uint32_t)(h & 0x7fffu) << 13) * magic;

    if (o >= was_infnan)
        o = flx_u2f_(flx_f2u_(o) | (255u << 23));
    return flx_u2f_(flx_f2u_(o) | ((uint32_t)(h & 0x8000u) << 16));
}

/* binary32 -> binary16, round to nearest even; overflow gives Inf, NaN stays NaN. */
static inline uint16_t flx_float_to_half(float f)
{
    const uint32_t f32infty = 255u << 23;
    const uint32_t f16max = (127u + 16u) << 23;
    const uint32_t denorm_magic_u = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    uint32_t u = flx_f2u_(f);
    uint32_t sign = u & 0x80000000u;
    uint16_t o;

    u ^= sign;
    if (u >= f16max) {
        o = u > f32infty ? 0x7e00 : 0x7c00;
    } else if (u < (113u << 23)) {
        o = (uint16_t)(flx_f2u_(flx_u2f_(u) + flx_u2f_(denorm_magic_u)) - denorm_magic_u);
    } else {
        uint32_t mant_odd = (u >> 13) & 1u;
        u += ((uint32_t)(15 - 127) << 23) + 0xfffu + mant_odd;
        o = (uint16_t)(u >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

static inline float flx_bf16_to_float(uint16_t h) { return flx_u2f_((uint32_t)h << 16); }

static inline uint16_t flx_float_to_bf16(float f)
{
    uint32_t u = flx_f2u_(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (u >> 16) | 0x40u;

    /* branch-free so that the loops around it vectorise */
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

#endif
