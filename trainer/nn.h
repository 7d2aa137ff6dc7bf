/* nn.h -- the networks flx-train trains: an MLP (dense layers, ReLU) and a
 * small CNN (convolutions by im2col + sgemm, ReLU, 2x2 max-pooling, dense
 * head), softmax cross-entropy on top.  Parameters and gradients each live
 * in one flat float buffer, so a whole gradient is one collective; every
 * parameterised layer owns one contiguous segment of it (weights, then
 * bias), so a trainer can sync layer by layer while backprop goes on.
 * Every GEMM goes through OpenBLAS. */
#ifndef FLX_TRAINER_NN_H
#define FLX_TRAINER_NN_H

#include "flexcoll.h"

#include <stddef.h>
#include <stdint.h>

typedef struct nn nn_t;

/* One parameterised layer's slice of the flat buffers. */
typedef struct {
    size_t off;       /* first float of the layer in params / grads */
    size_t len;       /* floats: weights then bias                  */
    const char *name; /* "fc1", "conv2", ...                        */
} nn_segment_t;

/* Called by nn_train_batch during backprop as soon as segment seg's
 * gradient is final: the last segment first, segment 0 last. */
typedef void (*nn_grad_ready_fn)(void *ctx, int seg);

/* Build a network for inputs of channels x height x width floats and
 * `classes` outputs, for batches of at most max_batch examples.
 *   spec "mlp" or "mlp:A,B,..."  dense hidden layers of widths A, B, ...
 *                                (default 256,256); input flattened
 *   spec "cnn" or "cnn:C1,C2,F"  conv5x5(C1)-relu-pool2-conv5x5(C2)-relu-
 *                                pool2-fc(F)-relu-fc(classes), 'same'
 *                                padding (default 16,32,128); needs
 *                                height and width divisible by 4
 * He initialisation from seed: the same seed gives the same weights on
 * every rank.  A malformed spec or a shape the spec cannot take is
 * FLX_ERR_INVALID_ARG with one log line saying why; FLX_ERR_NO_MEMORY. */
flx_status_t nn_create(const char *spec, size_t channels, size_t height, size_t width,
                       int classes, size_t max_batch, uint64_t seed, nn_t **nn_p);
/* Only the spec's syntax (kind, widths, layer count), before any data:
 * FLX_ERR_INVALID_ARG with one log line saying why. */
flx_status_t nn_spec_check(const char *spec);
void nn_destroy(nn_t *nn);

size_t nn_nparams(const nn_t *nn);
float *nn_params(nn_t *nn);
float *nn_grads(nn_t *nn);
int nn_nsegments(const nn_t *nn);
nn_segment_t nn_segment(const nn_t *nn, int seg);
/* e.g. "MLP 784-256-256-10" or "CNN 1x28x28 conv16-pool-conv32-pool-fc128-10" */
const char *nn_describe(const nn_t *nn);

/* Forward + backward on a batch (batch <= max_batch): grads = d(mean
 * loss)/d(params), no weight decay.  Returns the mean loss; *correct_p (may
 * be NULL) gets the number of right predictions.  ready (may be NULL) is
 * called once per segment, last to first, during backprop; after the call
 * nn_train_batch neither reads nor writes that segment of grads (it still
 * reads params).  An empty or too large batch, NULL x or y, or a label not
 * below classes: NaN and one log line, grads untouched, no callback. */
float nn_train_batch(nn_t *nn, const float *x, const uint8_t *y, size_t batch, size_t *correct_p,
                     nn_grad_ready_fn ready, void *ctx);
/* Forward only, in batches of max_batch: the number of right predictions;
 * *loss_p (may be NULL) gets the summed loss (NaN after a bad label). */
size_t nn_evaluate(nn_t *nn, const float *x, const uint8_t *y, size_t n, double *loss_p);
/* Forward only on one batch: the mean loss (for gradient checks), or NaN
 * for a batch nn_train_batch would refuse. */
double nn_loss(nn_t *nn, const float *x, const uint8_t *y, size_t batch);

#endif
