/* mlp.h -- a multi-layer perceptron (ReLU hidden layers, softmax
 * cross-entropy) whose parameters and gradients each live in one flat
 * float buffer, so a whole gradient is one allreduce.  GEMMs go through
 * OpenBLAS. */
#ifndef FLX_TRAINER_MLP_H
#define FLX_TRAINER_MLP_H

#include "flexcoll.h"

#include <stddef.h>
#include <stdint.h>

#define MLP_MAX_LAYERS 8

typedef struct {
    int nlayers;                    /* weight layers                      */
    size_t dims[MLP_MAX_LAYERS + 1];/* dims[0] input ... dims[n] classes  */
    size_t w_off[MLP_MAX_LAYERS];   /* offsets of W (out x in) and b      */
    size_t b_off[MLP_MAX_LAYERS];
    size_t nparams;
    float *params;
    float *grads;
    size_t max_batch;
    float *act[MLP_MAX_LAYERS + 1]; /* activations, [0] = input copy      */
    float *delta;                   /* scratch for backprop               */
    float *delta2;
} mlp_t;

/* dims: input, hidden..., classes (nlayers + 1 entries).  He-initialised
 * from seed; the same seed gives the same weights on every rank. */
flx_status_t mlp_create(const size_t *dims, int nlayers, size_t max_batch, uint64_t seed,
                        mlp_t **mlp_p);
void mlp_destroy(mlp_t *mlp);
/* Forward + backward on a batch: grads = d(mean loss)/d(params).  Returns
 * the mean loss; *correct_p gets the number of right predictions. */
float mlp_train_batch(mlp_t *mlp, const float *x, const uint8_t *y, size_t batch,
                      size_t *correct_p);
/* Forward only: number of correct predictions and summed loss. */
size_t mlp_evaluate(mlp_t *mlp, const float *x, const uint8_t *y, size_t n, double *loss_p);

#endif
