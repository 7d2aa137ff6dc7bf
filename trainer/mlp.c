/* mlp.c -- forward and backward passes of the MLP (row-major, batch-first).
 *
 *   forward   Z_l = A_{l-1} W_l^T + b_l,  A_l = relu(Z_l) (softmax at the top)
 *   backward  dZ_L = (softmax - onehot) / B
 *             dW_l = dZ_l^T A_{l-1},  db_l = sum_b dZ_l,  dA_{l-1} = dZ_l W_l
 *             dZ_{l-1} = dA_{l-1} * (A_{l-1} > 0)
 */
#include "trainer/mlp.h"
#include "trainer/rng.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

flx_status_t mlp_create(const size_t *dims, int nlayers, size_t max_batch, uint64_t seed,
                        mlp_t **mlp_p)
{
    mlp_t *m;
    size_t maxdim = 0;
    rng_t rng;

    if (nlayers < 1 || nlayers > MLP_MAX_LAYERS || max_batch == 0)
        return FLX_ERR_INVALID_ARG;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return FLX_ERR_NO_MEMORY;
    m->nlayers = nlayers;
    m->max_batch = max_batch;
    for (int l = 0; l <= nlayers; l++) {
        if (dims[l] == 0) {
            free(m);
            return FLX_ERR_INVALID_ARG;
        }
        m->dims[l] = dims[l];
        if (dims[l] > maxdim)
            maxdim = dims[l];
    }
    for (int l = 0; l < nlayers; l++) {
        m->w_off[l] = m->nparams;
        m->nparams += dims[l + 1] * dims[l];
        m->b_off[l] = m->nparams;
        m->nparams += dims[l + 1];
    }
    m->params = calloc(m->nparams, sizeof(float));
    m->grads = calloc(m->nparams, sizeof(float));
    m->delta = malloc(max_batch * maxdim * sizeof(float));
    m->delta2 = malloc(max_batch * maxdim * sizeof(float));
    for (int l = 0; l <= nlayers; l++)
        m->act[l] = malloc(max_batch * dims[l] * sizeof(float));
    for (int l = 0; l <= nlayers; l++)
        if (m->act[l] == NULL) {
            mlp_destroy(m);
            return FLX_ERR_NO_MEMORY;
        }
    if (m->params == NULL || m->grads == NULL || m->delta == NULL || m->delta2 == NULL) {
        mlp_destroy(m);
        return FLX_ERR_NO_MEMORY;
    }
    rng_seed(&rng, seed);
    for (int l = 0; l < nlayers; l++) {
        float scale = sqrtf(2.0f / (float)dims[l]);
        float *w = m->params + m->w_off[l];
        for (size_t i = 0; i < dims[l + 1] * dims[l]; i++)
            w[i] = scale * rng_normal(&rng);
    }
    *mlp_p = m;
    return FLX_OK;
}

void mlp_destroy(mlp_t *m)
{
    if (m == NULL)
        return;
    for (int l = 0; l <= m->nlayers; l++)
        free(m->act[l]);
    free(m->params);
    free(m->grads);
    free(m->delta);
    free(m->delta2);
    free(m);
}

static void mlp_forward(mlp_t *m, const float *x, size_t batch)
{
    memcpy(m->act[0], x, batch * m->dims[0] * sizeof(float));
    for (int l = 0; l < m->nlayers; l++) {
        size_t in = m->dims[l], out = m->dims[l + 1];
        const float *w = m->params + m->w_off[l], *b = m->params + m->b_off[l];
        float *z = m->act[l + 1];

        for (size_t i = 0; i < batch; i++)
            memcpy(z + i * out, b, out * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)batch, (int)out, (int)in,
                    1.0f, m->act[l], (int)in, w, (int)in, 1.0f, z, (int)out);
        if (l + 1 < m->nlayers)
            for (size_t i = 0; i < batch * out; i++)
                z[i] = z[i] > 0 ? z[i] : 0;
    }
}

/* softmax in place over the logits; returns summed loss, counts correct */
static double mlp_softmax_loss(mlp_t *m, const uint8_t *y, size_t batch, size_t *correct_p)
{
    size_t k = m->dims[m->nlayers];
    float *p = m->act[m->nlayers];
    double loss = 0;
    size_t correct = 0;

    for (size_t i = 0; i < batch; i++) {
        float *row = p + i * k, mx = row[0], sum = 0;
        size_t arg = 0;
        for (size_t j = 1; j < k; j++)
            if (row[j] > mx) {
                mx = row[j];
                arg = j;
            }
        for (size_t j = 0; j < k; j++) {
            row[j] = expf(row[j] - mx);
            sum += row[j];
        }
        for (size_t j = 0; j < k; j++)
            row[j] /= sum;
        loss -= log(fmax(row[y[i]], 1e-30));
        correct += arg == y[i];
    }
    *correct_p = correct;
    return loss;
}

float mlp_train_batch(mlp_t *m, const float *x, const uint8_t *y, size_t batch,
                      size_t *correct_p)
{
    size_t k = m->dims[m->nlayers];
    float *dz = m->delta, *da = m->delta2;
    double loss;

    mlp_forward(m, x, batch);
    loss = mlp_softmax_loss(m, y, batch, correct_p);
    for (size_t i = 0; i < batch; i++)
        for (size_t j = 0; j < k; j++)
            dz[i * k + j] = (m->act[m->nlayers][i * k + j] - (j == y[i] ? 1.0f : 0.0f)) /
                            (float)batch;
    for (int l = m->nlayers - 1; l >= 0; l--) {
        size_t in = m->dims[l], out = m->dims[l + 1];
        float *gw = m->grads + m->w_off[l], *gb = m->grads + m->b_off[l];
        const float *w = m->params + m->w_off[l];
        float *tmp;

        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)batch,
                    1.0f, dz, (int)out, m->act[l], (int)in, 0.0f, gw, (int)in);
        memset(gb, 0, out * sizeof(float));
        for (size_t i = 0; i < batch; i++)
            for (size_t j = 0; j < out; j++)
                gb[j] += dz[i * out + j];
        if (l == 0)
            break;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)batch, (int)in, (int)out,
                    1.0f, dz, (int)out, w, (int)in, 0.0f, da, (int)in);
        for (size_t i = 0; i < batch * in; i++)
            da[i] = m->act[l][i] > 0 ? da[i] : 0;
        tmp = dz;
        dz = da;
        da = tmp;
    }
    return (float)(loss / (double)batch);
}

size_t mlp_evaluate(mlp_t *m, const float *x, const uint8_t *y, size_t n, double *loss_p)
{
    size_t correct = 0;
    double loss = 0;

    for (size_t off = 0; off < n; off += m->max_batch) {
        size_t b = n - off < m->max_batch ? n - off : m->max_batch, c;
        mlp_forward(m, x + off * m->dims[0], b);
        loss += mlp_softmax_loss(m, y + off, b, &c);
        correct += c;
    }
    *loss_p = loss;
    return correct;
}
