/* dtype.c -- element type names and sizes; half/bfloat16 conversions. */
#include "common/dtype.h"

#include <math.h>
#include <string.h>

static const size_t dtype_sizes[FLX_DTYPE_COUNT] = {4, 8, 2, 2, 4, 8};
static const char *const dtype_names[FLX_DTYPE_COUNT] = {
    "float", "double", "half", "bfloat16", "int32", "int64"};
static const char *const op_names[FLX_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};
static const char *const algo_names[FLX_ALGO_COUNT] = {"auto", "ring", "tree", "rd", "hd"};

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

size_t flx_first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}
