/* dtype.c -- element type names and sizes; half/bfloat16 conversions. */
#include "common/dtype.h"

#include <string.h>

static const size_t dtype_sizes[FLX_DTYPE_COUNT] = {4, 8, 2, 2, 4, 8};
static const char *const dtype_names[FLX_DTYPE_COUNT] = {
    "float", "double", "half", "bfloat16", "int32", "int64"};
static const char *const op_names[FLX_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};
static const char *const algo_names[FLX_ALGO_COUNT] = {"auto", "ring", "tree", "rd"};

int flx_dtype_valid(flx_dtype_t dtype) { return (unsigned)dtype < FLX_DTYPE_COUNT; }
int flx_op_valid(flx_op_t op) { return (unsigned)op < FLX_OP_COUNT; }

size_t flx_dtype_size(flx_dtype_t dtype)
{
    return flx_dtype_valid(dtype) ? dtype_sizes[dtype] : 0;
}

const char *flx_dtype_name(flx_dtype_t dtype)
{
    return flx_dtype_valid(dtype) ? dtype_names[dtype] : "invalid";
}

const char *flx_op_name(flx_op_t op)
{
    return flx_op_valid(op) ? op_names[op] : "invalid";
}

const char *flx_algo_name(flx_algo_t algo)
{
    return (unsigned)algo < FLX_ALGO_COUNT ? algo_names[algo] : "invalid";
}

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* IEEE binary16 -> binary32, exact (subnormals, Inf and NaN included). */
float flx_half_to_float(uint16_t h)
{
    const float magic = u2f((254u - 15u) << 23);
    const float was_infnan = u2f((127u + 16u) << 23);
    float o = u2f((uint32_t)(h & 0x7fffu) << 13) * magic;

    if (o >= was_infnan)
        o = u2f(f2u(o) | (255u << 23));
    return u2f(f2u(o) | ((uint32_t)(h & 0x8000u) << 16));
}

/* binary32 -> binary16, round to nearest even; overflow gives Inf, NaN stays NaN. */
uint16_t flx_float_to_half(float f)
{
    const uint32_t f32infty = 255u << 23;
    const uint32_t f16max = (127u + 16u) << 23;
    const uint32_t denorm_magic_u = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    uint32_t u = f2u(f);
    uint32_t sign = u & 0x80000000u;
    uint16_t o;

    u ^= sign;
    if (u >= f16max) {
        o = u > f32infty ? 0x7e00 : 0x7c00;
    } else if (u < (113u << 23)) {
        o = (uint16_t)(f2u(u2f(u) + u2f(denorm_magic_u)) - denorm_magic_u);
    } else {
        uint32_t mant_odd = (u >> 13) & 1u;
        u += ((uint32_t)(15 - 127) << 23) + 0xfffu + mant_odd;
        o = (uint16_t)(u >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

float flx_bf16_to_float(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t flx_float_to_bf16(float f)
{
    uint32_t u = f2u(f);

    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
