/* nn.c -- the MLP and the CNN of nn.h as one chain of layers over
 * row-major, batch-first activations (NCHW for images).
 *
 *   dense  Z = A W^T + b                  dW = dZ^T A, db = sum_b dZ,
 *                                         dA = dZ W
 *   conv   col = im2col(A)                (C*25) x (B*H*W), 'same' padding
 *          Z_b = W col_b + b              col_b: example b's H*W columns
 *                                         dW = dT col^T, db = row sums of dT
 *                                         (dT: dZ as out_c x (B*H*W)),
 *                                         dA_b = col2im(W^T dZ_b)
 *   relu   in place; dA = dZ * (Z > 0)
 *   pool   2x2 max, stride 2; the window's winner remembered for backward
 *   loss   softmax cross-entropy over the last dense layer's logits:
 *          dZ = (softmax - onehot) / B
 *
 * A conv layer keeps its whole batch's columns for the weight gradient,
 * one sgemm over the batch; forward and the input gradient go one sgemm
 * per example, so outputs land in NCHW and each d(col) is col2im'd while it
 * is still in cache (measured faster than one big GEMM plus reordering).
 *
 * Backward visits the layers last to first and hands a segment to the
 * ready callback right after its weight and bias gradients are written,
 * before the layer's input gradient is computed; nothing touches a
 * segment's gradient after that. */
#include "trainer/nn.h"
#include "common/log.h"
#include "trainer/rng.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NN_MAX_HIDDEN 8          /* dense hidden layers of an MLP        */
#define NN_MAX_WIDTH (1u << 20)  /* any one width in a spec              */
#define NN_MAX_LAYERS (2 * NN_MAX_HIDDEN + 1)
#define NN_MAX_SEGS (NN_MAX_HIDDEN + 1)
#define NN_KSIZE 5               /* conv kernels are 5x5, padding 2      */
#define NN_PAD (NN_KSIZE / 2)

typedef enum { NN_MLP, NN_CNN } nn_kind_t;
typedef enum { NN_DENSE, NN_CONV, NN_RELU, NN_POOL } nn_op_t;

typedef struct {
    nn_op_t op;
    size_t in_c, in_h, in_w;   /* input shape of one example (dense: in_c x 1 x 1) */
    size_t out_c, out_h, out_w;
    size_t in_n, out_n;        /* floats per example                               */
    int seg;                   /* segment of dense and conv layers, else -1        */
    float *out;                /* max_batch x out_n; relu: its input's buffer      */
    float *col;                /* conv: (in_c*25) x (max_batch*in_h*in_w)          */
    uint8_t *arg;              /* pool: winner (0..3) of each output's window      */
} nn_layer_t;

struct nn {
    int nlayers;
    nn_layer_t layer[NN_MAX_LAYERS];
    int nsegs;
    nn_segment_t seg[NN_MAX_SEGS];
    char seg_name[NN_MAX_SEGS][16];
    size_t nparams;
    float *params;
    float *grads;
    size_t max_batch;
    size_t in_n;               /* floats per input example                        */
    int classes;
    float *delta;              /* backward scratch, max_batch x widest activation */
    float *delta2;
    float *tmp;                /* conv backward: dZ as (out_c) x (batch*h*w)      */
    char desc[256];
};

/* ---- the spec ------------------------------------------------------------- */

typedef struct {
    nn_kind_t kind;
    int n;                         /* widths given                      */
    size_t w[NN_MAX_HIDDEN];
} nn_spec_t;

/* "mlp", "mlp:A,B,...", "cnn", "cnn:C1,C2,F" */
static flx_status_t nn_spec_parse(const char *spec, nn_spec_t *s)
{
    const char *p;
    int max;

    if (spec == NULL) {
        flx_error(TRAIN, -1, "no network spec (want mlp[:A,B,...] or cnn[:C1,C2,F])");
        return FLX_ERR_INVALID_ARG;
    }
    if (strncmp(spec, "mlp", 3) == 0 && (spec[3] == '\0' || spec[3] == ':')) {
        *s = (nn_spec_t){.kind = NN_MLP, .n = 2, .w = {256, 256}};
        max = NN_MAX_HIDDEN;
    } else if (strncmp(spec, "cnn", 3) == 0 && (spec[3] == '\0' || spec[3] == ':')) {
        *s = (nn_spec_t){.kind = NN_CNN, .n = 3, .w = {16, 32, 128}};
        max = 3;
    } else {
        flx_error(TRAIN, -1, "network spec '%s': unknown kind (want mlp[:A,B,...] or "
                  "cnn[:C1,C2,F])", spec);
        return FLX_ERR_INVALID_ARG;
    }
    if (spec[3] == '\0')
        return FLX_OK;
    s->n = 0;
    p = spec + 4;
    for (;;) {
        size_t v = 0;
        const char *start = p;

        for (; *p >= '0' && *p <= '9'; p++)     /* saturates past the limit */
            v = v > NN_MAX_WIDTH ? v : v * 10 + (size_t)(*p - '0');
        if (p == start || (*p != ',' && *p != '\0')) {
            flx_error(TRAIN, -1, "network spec '%s': bad width list at '%s' (want positive "
                      "integers separated by commas)", spec, start);
            return FLX_ERR_INVALID_ARG;
        }
        if (v == 0 || v > NN_MAX_WIDTH) {
            flx_error(TRAIN, -1, "network spec '%s': width %.*s is not in 1..%u", spec,
                      (int)(p - start), start, NN_MAX_WIDTH);
            return FLX_ERR_INVALID_ARG;
        }
        if (s->n == max) {
            flx_error(TRAIN, -1, "network spec '%s': too many layers (%s takes at most %d "
                      "widths)", spec, s->kind == NN_MLP ? "mlp" : "cnn", max);
            return FLX_ERR_INVALID_ARG;
        }
        s->w[s->n++] = v;
        if (*p == '\0')
            break;
        p++;
    }
    if (s->kind == NN_CNN && s->n != 3) {
        flx_error(TRAIN, -1, "network spec '%s': cnn takes exactly 3 widths (C1,C2,F)", spec);
        return FLX_ERR_INVALID_ARG;
    }
    return FLX_OK;
}

flx_status_t nn_spec_check(const char *spec)
{
    nn_spec_t s;

    return nn_spec_parse(spec, &s);
}

/* ---- building ------------------------------------------------------------- */

/* Appends a layer taking the previous layer's output shape (or the input's). */
static nn_layer_t *nn_push(nn_t *nn, nn_op_t op, size_t c, size_t h, size_t w)
{
    nn_layer_t *l = &nn->layer[nn->nlayers++];

    l->op = op;
    l->seg = -1;
    if (nn->nlayers == 1) {
        l->in_c = c;
        l->in_h = h;
        l->in_w = w;
    } else {
        const nn_layer_t *prev = l - 1;
        l->in_c = prev->out_c;
        l->in_h = prev->out_h;
        l->in_w = prev->out_w;
    }
    l->in_n = l->in_c * l->in_h * l->in_w;
    return l;
}

static void nn_push_dense(nn_t *nn, size_t out, size_t c, size_t h, size_t w)
{
    nn_layer_t *l = nn_push(nn, NN_DENSE, c, h, w);

    /* a dense layer sees its input flattened */
    l->in_c = l->in_n;
    l->in_h = l->in_w = 1;
    l->out_c = out;
    l->out_h = l->out_w = 1;
    l->out_n = out;
}

static void nn_push_conv(nn_t *nn, size_t out, size_t c, size_t h, size_t w)
{
    nn_layer_t *l = nn_push(nn, NN_CONV, c, h, w);

    l->out_c = out;
    l->out_h = l->in_h;
    l->out_w = l->in_w;
    l->out_n = out * l->out_h * l->out_w;
}

static void nn_push_relu(nn_t *nn)
{
    nn_layer_t *l = nn_push(nn, NN_RELU, 0, 0, 0);

    l->out_c = l->in_c;
    l->out_h = l->in_h;
    l->out_w = l->in_w;
    l->out_n = l->in_n;
}

static void nn_push_pool(nn_t *nn)
{
    nn_layer_t *l = nn_push(nn, NN_POOL, 0, 0, 0);

    l->out_c = l->in_c;
    l->out_h = l->in_h / 2;
    l->out_w = l->in_w / 2;
    l->out_n = l->out_c * l->out_h * l->out_w;
}

/* The chain of layers and the description, from a parsed spec. */
static void nn_build(nn_t *nn, const nn_spec_t *s, size_t c, size_t h, size_t w)
{
    size_t classes = (size_t)nn->classes;
    int len;

    if (s->kind == NN_MLP) {
        len = snprintf(nn->desc, sizeof(nn->desc), "MLP %zu", c * h * w);
        for (int i = 0; i < s->n; i++) {
            nn_push_dense(nn, s->w[i], c, h, w);
            nn_push_relu(nn);
            len += snprintf(nn->desc + len, sizeof(nn->desc) - (size_t)len, "-%zu", s->w[i]);
        }
        nn_push_dense(nn, classes, c, h, w);
        snprintf(nn->desc + len, sizeof(nn->desc) - (size_t)len, "-%zu", classes);
        return;
    }
    nn_push_conv(nn, s->w[0], c, h, w);
    nn_push_relu(nn);
    nn_push_pool(nn);
    nn_push_conv(nn, s->w[1], c, h, w);
    nn_push_relu(nn);
    nn_push_pool(nn);
    nn_push_dense(nn, s->w[2], c, h, w);
    nn_push_relu(nn);
    nn_push_dense(nn, classes, c, h, w);
    snprintf(nn->desc, sizeof(nn->desc), "CNN %zux%zux%zu conv%zu-pool-conv%zu-pool-fc%zu-%zu", c,
             h, w, s->w[0], s->w[1], s->w[2], classes);
}

static int nn_mul(size_t a, size_t b, size_t *r)
{
    if (a != 0 && b > SIZE_MAX / a)
        return -1;
    *r = a * b;
    return 0;
}

/* Segments in forward order, and a check that every buffer and every GEMM
 * dimension fits the int that cblas takes. */
static int nn_layout(nn_t *nn)
{
    int ndense = 0, nconv = 0;
    size_t n;

    for (int i = 0; i < nn->nlayers; i++) {
        nn_layer_t *l = &nn->layer[i];
        size_t fan_in = l->op == NN_CONV ? l->in_c * NN_KSIZE * NN_KSIZE : l->in_c;
        nn_segment_t *sg;

        if (nn_mul(nn->max_batch, l->in_n, &n) || n > INT_MAX)
            return -1;
        if (nn_mul(nn->max_batch, l->out_n, &n) || n > INT_MAX)
            return -1;
        /* the column matrix: fan_in x (max_batch * h * w) */
        if (l->op == NN_CONV && (nn_mul(nn->max_batch * l->in_h * l->in_w, fan_in, &n) ||
                                 n > INT_MAX))
            return -1;
        if (l->op != NN_DENSE && l->op != NN_CONV)
            continue;
        if (nn_mul(l->out_c, fan_in, &n) || n > INT_MAX)
            return -1;
        l->seg = nn->nsegs++;
        sg = &nn->seg[l->seg];
        snprintf(nn->seg_name[l->seg], sizeof(nn->seg_name[0]), "%s%d",
                 l->op == NN_CONV ? "conv" : "fc", l->op == NN_CONV ? ++nconv : ++ndense);
        sg->name = nn->seg_name[l->seg];
        sg->off = nn->nparams;
        sg->len = n + l->out_c;
        if (sg->len > INT_MAX || nn->nparams > (size_t)INT_MAX - sg->len)
            return -1;
        nn->nparams += sg->len;
    }
    return 0;
}

static flx_status_t nn_alloc(nn_t *nn)
{
    size_t widest = nn->in_n, tmp = 0;

    nn->params = calloc(nn->nparams, sizeof(float));
    nn->grads = calloc(nn->nparams, sizeof(float));
    if (nn->params == NULL || nn->grads == NULL)
        return FLX_ERR_NO_MEMORY;
    for (int i = 0; i < nn->nlayers; i++) {
        nn_layer_t *l = &nn->layer[i];
        size_t hw = l->in_h * l->in_w;

        if (l->out_n > widest)
            widest = l->out_n;
        if (l->op == NN_RELU) {     /* in place: never the first layer */
            l->out = nn->layer[i - 1].out;
            continue;
        }
        l->out = malloc(nn->max_batch * l->out_n * sizeof(float));
        if (l->out == NULL)
            return FLX_ERR_NO_MEMORY;
        if (l->op == NN_CONV) {
            l->col = malloc(l->in_c * NN_KSIZE * NN_KSIZE * nn->max_batch * hw * sizeof(float));
            if (l->col == NULL)
                return FLX_ERR_NO_MEMORY;
            if (l->out_n * nn->max_batch > tmp)
                tmp = l->out_n * nn->max_batch;
        }
        if (l->op == NN_POOL) {
            l->arg = malloc(nn->max_batch * l->out_n);
            if (l->arg == NULL)
                return FLX_ERR_NO_MEMORY;
        }
    }
    nn->delta = malloc(nn->max_batch * widest * sizeof(float));
    nn->delta2 = malloc(nn->max_batch * widest * sizeof(float));
    if (nn->delta == NULL || nn->delta2 == NULL)
        return FLX_ERR_NO_MEMORY;
    if (tmp > 0) {
        nn->tmp = malloc(tmp * sizeof(float));
        if (nn->tmp == NULL)
            return FLX_ERR_NO_MEMORY;
    }
    return FLX_OK;
}

/* He initialisation: weights N(0, 2 / fan_in) in forward order, biases 0. */
static void nn_init_params(nn_t *nn, uint64_t seed)
{
    rng_t rng;

    rng_seed(&rng, seed);
    for (int i = 0; i < nn->nlayers; i++) {
        const nn_layer_t *l = &nn->layer[i];
        const nn_segment_t *sg;
        size_t fan_in, nw;
        float scale, *w;

        if (l->seg < 0)
            continue;
        sg = &nn->seg[l->seg];
        fan_in = l->op == NN_CONV ? l->in_c * NN_KSIZE * NN_KSIZE : l->in_c;
        nw = sg->len - l->out_c;
        scale = sqrtf(2.0f / (float)fan_in);
        w = nn->params + sg->off;
        for (size_t j = 0; j < nw; j++)
            w[j] = scale * rng_normal(&rng);
    }
}

flx_status_t nn_create(const char *spec, size_t channels, size_t height, size_t width,
                       int classes, size_t max_batch, uint64_t seed, nn_t **nn_p)
{
    nn_spec_t s;
    nn_t *nn;
    flx_status_t st;

    st = nn_spec_parse(spec, &s);
    if (st != FLX_OK)
        return st;
    if (channels == 0 || height == 0 || width == 0 || classes < 1 || classes > 256 ||
        max_batch == 0 || nn_p == NULL) {
        flx_error(TRAIN, -1, "network '%s': bad shape %zux%zux%zu, %d classes (1..256), "
                  "max batch %zu", spec, channels, height, width, classes, max_batch);
        return FLX_ERR_INVALID_ARG;
    }
    if (s.kind == NN_CNN && (height % 4 != 0 || width % 4 != 0)) {
        flx_error(TRAIN, -1, "network '%s' needs height and width divisible by 4 (two 2x2 "
                  "poolings), not %zux%zu", spec, height, width);
        return FLX_ERR_INVALID_ARG;
    }
    nn = calloc(1, sizeof(*nn));
    if (nn == NULL)
        return FLX_ERR_NO_MEMORY;
    nn->max_batch = max_batch;
    nn->classes = classes;
    if (nn_mul(channels, height, &nn->in_n) || nn_mul(nn->in_n, width, &nn->in_n)) {
        st = FLX_ERR_INVALID_ARG;
        goto err_too_large;
    }
    nn_build(nn, &s, channels, height, width);
    if (nn_layout(nn) != 0) {
        st = FLX_ERR_INVALID_ARG;
        goto err_too_large;
    }
    st = nn_alloc(nn);
    if (st != FLX_OK)
        goto err_destroy;
    nn_init_params(nn, seed);
    *nn_p = nn;
    return FLX_OK;

err_too_large:
    flx_error(TRAIN, -1, "network '%s' on %zux%zux%zu inputs with max batch %zu is too large "
              "(a buffer or GEMM dimension over %d)", spec, channels, height, width, max_batch,
              INT_MAX);
err_destroy:
    nn_destroy(nn);
    return st;
}

void nn_destroy(nn_t *nn)
{
    if (nn == NULL)
        return;
    for (int i = 0; i < nn->nlayers; i++) {
        nn_layer_t *l = &nn->layer[i];
        if (l->op != NN_RELU)
            free(l->out);
        free(l->col);
        free(l->arg);
    }
    free(nn->tmp);
    free(nn->delta2);
    free(nn->delta);
    free(nn->grads);
    free(nn->params);
    free(nn);
}

/* ---- convolution by columns ---------------------------------------------- */

/* The valid output columns [*x0_p, *x1_p) of a kernel column at offset dx
 * (input column = output column + dx) in a row of w. */
static void nn_span(long dx, long w, long *x0_p, long *x1_p)
{
    long x0 = dx < 0 ? -dx : 0, x1 = dx > 0 ? w - dx : w;

    *x0_p = x0 < w ? x0 : w;
    *x1_p = x1 > *x0_p ? x1 : *x0_p;
}

/* One example x (c x h x w) into columns: col[(ch*25 + ky*5 + kx) * ld + oy*w + ox]
 * = x[ch][oy + ky - 2][ox + kx - 2], zero outside the image. */
static void nn_im2col(const float *x, size_t c, size_t h, size_t w, float *col, size_t ld)
{
    for (size_t ch = 0; ch < c; ch++)
        for (long ky = 0; ky < NN_KSIZE; ky++)
            for (long kx = 0; kx < NN_KSIZE; kx++) {
                float *row = col + ((ch * NN_KSIZE + (size_t)ky) * NN_KSIZE + (size_t)kx) * ld;
                long dx = kx - NN_PAD, x0, x1;

                nn_span(dx, (long)w, &x0, &x1);
                for (long oy = 0; oy < (long)h; oy++) {
                    long iy = oy + ky - NN_PAD;
                    float *dst = row + (size_t)oy * w;
                    const float *src;

                    if (iy < 0 || iy >= (long)h) {
                        memset(dst, 0, w * sizeof(float));
                        continue;
                    }
                    src = x + (ch * h + (size_t)iy) * w;
                    memset(dst, 0, (size_t)x0 * sizeof(float));
                    memcpy(dst + x0, src + x0 + dx, (size_t)(x1 - x0) * sizeof(float));
                    memset(dst + x1, 0, (w - (size_t)x1) * sizeof(float));
                }
            }
}

/* The adjoint of nn_im2col: dx (c x h x w) = sum of the columns' entries
 * over the positions they were copied from. */
static void nn_col2im(const float *col, size_t ld, size_t c, size_t h, size_t w, float *dx)
{
    memset(dx, 0, c * h * w * sizeof(float));
    for (size_t ch = 0; ch < c; ch++)
        for (long ky = 0; ky < NN_KSIZE; ky++)
            for (long kx = 0; kx < NN_KSIZE; kx++) {
                const float *row =
                    col + ((ch * NN_KSIZE + (size_t)ky) * NN_KSIZE + (size_t)kx) * ld;
                long ddx = kx - NN_PAD, x0, x1;

                nn_span(ddx, (long)w, &x0, &x1);
                for (long oy = 0; oy < (long)h; oy++) {
                    long iy = oy + ky - NN_PAD;
                    const float *src = row + (size_t)oy * w;
                    float *dst;

                    if (iy < 0 || iy >= (long)h)
                        continue;
                    dst = dx + (ch * h + (size_t)iy) * w;
                    for (long ox = x0; ox < x1; ox++)
                        dst[ox + ddx] += src[ox];
                }
            }
}

/* x[0] + ... + x[n-1] in eight independent lanes, which vectorise */
static float nn_sum(const float *x, size_t n)
{
    float lane[8] = {0};
    double sum = 0;
    size_t i = 0;

    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            lane[j] += x[i + j];
    for (; i < n; i++)
        sum += x[i];
    for (int j = 0; j < 8; j++)
        sum += lane[j];
    return (float)sum;
}

static void nn_conv_forward(nn_t *nn, nn_layer_t *l, const float *in, size_t batch)
{
    const nn_segment_t *sg = &nn->seg[l->seg];
    const float *w = nn->params + sg->off, *bias = w + sg->len - l->out_c;
    size_t hw = l->in_h * l->in_w, ld = batch * hw, ckk = l->in_c * NN_KSIZE * NN_KSIZE;

    for (size_t b = 0; b < batch; b++) {
        float *out = l->out + b * l->out_n;

        nn_im2col(in + b * l->in_n, l->in_c, l->in_h, l->in_w, l->col + b * hw, ld);
        for (size_t k = 0; k < l->out_c; k++)
            for (size_t p = 0; p < hw; p++)
                out[k * hw + p] = bias[k];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)l->out_c, (int)hw, (int)ckk,
                    1.0f, w, (int)ckk, l->col + b * hw, (int)ld, 1.0f, out, (int)hw);
    }
}

/* dout: batch x out_n; din (NULL for the first layer): batch x in_n */
static void nn_conv_backward(nn_t *nn, nn_layer_t *l, const float *dout, float *din,
                             size_t batch, nn_grad_ready_fn ready, void *ctx)
{
    const nn_segment_t *sg = &nn->seg[l->seg];
    const float *w = nn->params + sg->off;
    float *gw = nn->grads + sg->off, *gb = gw + sg->len - l->out_c;
    size_t hw = l->in_h * l->in_w, ld = batch * hw, ckk = l->in_c * NN_KSIZE * NN_KSIZE;

    /* dT (out_c x batch*hw): the GEMM's layout of dout */
    for (size_t b = 0; b < batch; b++)
        for (size_t k = 0; k < l->out_c; k++)
            memcpy(nn->tmp + k * ld + b * hw, dout + (b * l->out_c + k) * hw,
                   hw * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)l->out_c, (int)ckk, (int)ld,
                1.0f, nn->tmp, (int)ld, l->col, (int)ld, 0.0f, gw, (int)ckk);
    for (size_t k = 0; k < l->out_c; k++)
        gb[k] = nn_sum(nn->tmp + k * ld, ld);
    if (ready != NULL)
        ready(ctx, l->seg);
    if (din == NULL)
        return;
    /* the columns are spent: their start takes one example's d(col) =
     * W^T dout_b at a time, which stays in cache for col2im */
    for (size_t b = 0; b < batch; b++) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ckk, (int)hw, (int)l->out_c,
                    1.0f, w, (int)ckk, dout + b * l->out_n, (int)hw, 0.0f, l->col, (int)hw);
        nn_col2im(l->col, hw, l->in_c, l->in_h, l->in_w, din + b * l->in_n);
    }
}

/* ---- dense, relu, pool ---------------------------------------------------- */

static void nn_dense_forward(nn_t *nn, nn_layer_t *l, const float *in, size_t batch)
{
    const nn_segment_t *sg = &nn->seg[l->seg];
    const float *w = nn->params + sg->off, *bias = w + sg->len - l->out_c;
    size_t nin = l->in_n, nout = l->out_n;

    for (size_t b = 0; b < batch; b++)
        memcpy(l->out + b * nout, bias, nout * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)batch, (int)nout, (int)nin, 1.0f,
                in, (int)nin, w, (int)nin, 1.0f, l->out, (int)nout);
}

static void nn_dense_backward(nn_t *nn, nn_layer_t *l, const float *in, const float *dout,
                              float *din, size_t batch, nn_grad_ready_fn ready, void *ctx)
{
    const nn_segment_t *sg = &nn->seg[l->seg];
    const float *w = nn->params + sg->off;
    float *gw = nn->grads + sg->off, *gb = gw + sg->len - l->out_c;
    size_t nin = l->in_n, nout = l->out_n;

    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nout, (int)nin, (int)batch, 1.0f,
                dout, (int)nout, in, (int)nin, 0.0f, gw, (int)nin);
    memset(gb, 0, nout * sizeof(float));
    for (size_t b = 0; b < batch; b++)
        for (size_t j = 0; j < nout; j++)
            gb[j] += dout[b * nout + j];
    if (ready != NULL)
        ready(ctx, l->seg);
    if (din == NULL)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)batch, (int)nin, (int)nout, 1.0f,
                dout, (int)nout, w, (int)nin, 0.0f, din, (int)nin);
}

static void nn_relu_forward(nn_layer_t *l, size_t batch)
{
    float *z = l->out;

    for (size_t i = 0; i < batch * l->out_n; i++)
        z[i] = z[i] > 0 ? z[i] : 0;
}

/* in place on d */
static void nn_relu_backward(const nn_layer_t *l, float *d, size_t batch)
{
    const float *a = l->out;

    for (size_t i = 0; i < batch * l->out_n; i++)
        d[i] = a[i] > 0 ? d[i] : 0;
}

static void nn_pool_forward(nn_layer_t *l, const float *in, size_t batch)
{
    size_t w = l->in_w, oh = l->out_h, ow = l->out_w;

    for (size_t m = 0; m < batch * l->out_c; m++) {
        const float *src = in + m * l->in_h * w;
        float *dst = l->out + m * oh * ow;
        uint8_t *arg = l->arg + m * oh * ow;

        for (size_t oy = 0; oy < oh; oy++)
            for (size_t ox = 0; ox < ow; ox++) {
                const float *p = src + 2 * oy * w + 2 * ox;
                float v[4] = {p[0], p[1], p[w], p[w + 1]}, mx = v[0];
                uint8_t a = 0;

                for (uint8_t j = 1; j < 4; j++)
                    if (v[j] > mx) {
                        mx = v[j];
                        a = j;
                    }
                dst[oy * ow + ox] = mx;
                arg[oy * ow + ox] = a;
            }
    }
}

static void nn_pool_backward(const nn_layer_t *l, const float *dout, float *din, size_t batch)
{
    size_t w = l->in_w, oh = l->out_h, ow = l->out_w;

    for (size_t m = 0; m < batch * l->out_c; m++) {
        const float *src = dout + m * oh * ow;
        const uint8_t *arg = l->arg + m * oh * ow;
        float *dst = din + m * l->in_h * w;

        for (size_t oy = 0; oy < oh; oy++)
            for (size_t ox = 0; ox < ow; ox++) {
                float *p = dst + 2 * oy * w + 2 * ox, g = src[oy * ow + ox];
                uint8_t a = arg[oy * ow + ox];

                p[0] = a == 0 ? g : 0;
                p[1] = a == 1 ? g : 0;
                p[w] = a == 2 ? g : 0;
                p[w + 1] = a == 3 ? g : 0;
            }
    }
}

/* ---- passes --------------------------------------------------------------- */

/* The logits (batch x classes) of x. */
static const float *nn_forward(nn_t *nn, const float *x, size_t batch)
{
    const float *in = x;

    for (int i = 0; i < nn->nlayers; i++) {
        nn_layer_t *l = &nn->layer[i];

        switch (l->op) {
        case NN_DENSE: nn_dense_forward(nn, l, in, batch); break;
        case NN_CONV: nn_conv_forward(nn, l, in, batch); break;
        case NN_RELU: nn_relu_forward(l, batch); break;
        case NN_POOL: nn_pool_forward(l, in, batch); break;
        }
        in = l->out;
    }
    return in;
}

/* From d(loss)/d(logits) in nn->delta down to the first layer. */
static void nn_backward(nn_t *nn, const float *x, size_t batch, nn_grad_ready_fn ready,
                        void *ctx)
{
    float *dout = nn->delta, *din = nn->delta2, *t;

    for (int i = nn->nlayers - 1; i >= 0; i--) {
        nn_layer_t *l = &nn->layer[i];
        const float *in = i > 0 ? nn->layer[i - 1].out : x;
        float *d = i > 0 ? din : NULL;

        switch (l->op) {
        case NN_DENSE: nn_dense_backward(nn, l, in, dout, d, batch, ready, ctx); break;
        case NN_CONV: nn_conv_backward(nn, l, dout, d, batch, ready, ctx); break;
        case NN_RELU: nn_relu_backward(l, dout, batch); continue;
        case NN_POOL: nn_pool_backward(l, dout, din, batch); break;
        }
        t = dout;
        dout = din;
        din = t;
    }
}

/* Softmax cross-entropy, stable (shifted by the row maximum, in double):
 * the summed loss; right predictions into *correct_p; when dlogits is not
 * NULL, d(mean loss)/d(logits) = (softmax - onehot) / batch into it. */
static double nn_xent(const nn_t *nn, const float *logits, const uint8_t *y, size_t batch,
                      float *dlogits, size_t *correct_p)
{
    size_t k = (size_t)nn->classes, correct = 0;
    double loss = 0;

    for (size_t b = 0; b < batch; b++) {
        const float *z = logits + b * k;
        float mx = z[0];
        size_t arg = 0;
        double sum = 0, lse;

        for (size_t j = 1; j < k; j++)
            if (z[j] > mx) {
                mx = z[j];
                arg = j;
            }
        for (size_t j = 0; j < k; j++)
            sum += exp((double)z[j] - mx);
        lse = log(sum);
        loss += lse - ((double)z[y[b]] - mx);
        correct += arg == y[b];
        if (dlogits == NULL)
            continue;
        for (size_t j = 0; j < k; j++) {
            double p = exp((double)z[j] - mx - lse);
            dlogits[b * k + j] = (float)((p - (j == y[b])) / (double)batch);
        }
    }
    *correct_p = correct;
    return loss;
}

/* 0, or -1 with one log line when a batch cannot be used. */
static int nn_check_batch(const nn_t *nn, const char *who, const float *x, const uint8_t *y,
                          size_t n, size_t limit)
{
    if (n == 0 || n > limit || x == NULL || y == NULL) {
        flx_error(TRAIN, -1, "%s: bad batch of %zu examples (1..%zu, x and y not NULL)", who, n,
                  limit);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (y[i] >= nn->classes) {
            flx_error(TRAIN, -1, "%s: label %u of example %zu is not in 0..%d", who, y[i], i,
                      nn->classes - 1);
            return -1;
        }
    return 0;
}

/* ---- the interface -------------------------------------------------------- */

size_t nn_nparams(const nn_t *nn) { return nn->nparams; }
float *nn_params(nn_t *nn) { return nn->params; }
float *nn_grads(nn_t *nn) { return nn->grads; }
int nn_nsegments(const nn_t *nn) { return nn->nsegs; }
const char *nn_describe(const nn_t *nn) { return nn->desc; }

nn_segment_t nn_segment(const nn_t *nn, int seg)
{
    if (seg < 0 || seg >= nn->nsegs)
        return (nn_segment_t){0, 0, NULL};
    return nn->seg[seg];
}

float nn_train_batch(nn_t *nn, const float *x, const uint8_t *y, size_t batch, size_t *correct_p,
                     nn_grad_ready_fn ready, void *ctx)
{
    const float *logits;
    size_t correct;
    double loss;

    if (nn_check_batch(nn, "nn_train_batch", x, y, batch, nn->max_batch) != 0)
        return NAN;
    logits = nn_forward(nn, x, batch);
    loss = nn_xent(nn, logits, y, batch, nn->delta, &correct);
    nn_backward(nn, x, batch, ready, ctx);
    if (correct_p != NULL)
        *correct_p = correct;
    return (float)(loss / (double)batch);
}

size_t nn_evaluate(nn_t *nn, const float *x, const uint8_t *y, size_t n, double *loss_p)
{
    size_t correct = 0;
    double loss = 0;

    if (n > 0 && nn_check_batch(nn, "nn_evaluate", x, y, n, SIZE_MAX) != 0) {
        if (loss_p != NULL)
            *loss_p = NAN;
        return 0;
    }
    for (size_t off = 0; off < n; off += nn->max_batch) {
        size_t b = n - off < nn->max_batch ? n - off : nn->max_batch, c;
        const float *logits = nn_forward(nn, x + off * nn->in_n, b);

        loss += nn_xent(nn, logits, y + off, b, NULL, &c);
        correct += c;
    }
    if (loss_p != NULL)
        *loss_p = loss;
    return correct;
}

double nn_loss(nn_t *nn, const float *x, const uint8_t *y, size_t batch)
{
    size_t correct;

    if (nn_check_batch(nn, "nn_loss", x, y, batch, nn->max_batch) != 0)
        return NAN;
    return nn_xent(nn, nn_forward(nn, x, batch), y, batch, NULL, &correct) / (double)batch;
}
