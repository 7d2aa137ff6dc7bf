/* dtype.h -- element types, half-precision conversions and the local
 * reduction kernels used by every collective. */
#ifndef FLX_COMMON_DTYPE_H
#define FLX_COMMON_DTYPE_H

#include "flexcoll.h"

#include <stddef.h>
#include <stdint.h>

/* inout[i] = inout[i] OP in[i] for i < count.  FLX_AVG combines as a sum;
 * flx_reduce_finish divides once at the end.  Half types compute each
 * combination in float32 and round once (to nearest even).  The buffers
 * must not overlap. */
void flx_reduce(void *restrict inout, const void *restrict in, size_t count,
                flx_dtype_t dtype, flx_op_t op);
/* Final step of FLX_AVG: buf[i] /= nranks.  No-op for other ops. */
void flx_reduce_finish(void *buf, size_t count, flx_dtype_t dtype, flx_op_t op,
                       int nranks);
int flx_dtype_valid(flx_dtype_t dtype);
int flx_op_valid(flx_op_t op);

float flx_half_to_float(uint16_t h);
uint16_t flx_float_to_half(float f);
float flx_bf16_to_float(uint16_t h);
uint16_t flx_float_to_bf16(float f);

#endif
