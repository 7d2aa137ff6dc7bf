/* powersgd.c -- PowerSGD (Vogels et al.), rank r, allreduce-compatible.
 *
 * The flat gradient is viewed as a rows x cols matrix M (row-major, cols =
 * ceil(sqrt n), rows = ceil(n / cols) <= cols, zero padded).  One step,
 * identical on every rank once the sums are in:
 *
 *     P = M Q            rows x r     (cblas_sgemm)
 *     allreduce P (sum)               + one flag slot: any rank bad?
 *     P = orth(P)                     Gram-Schmidt (two passes), double sums
 *     Q = M^T P          cols x r
 *     allreduce Q (sum)
 *     out = P Q^T / N                 = P P^T mean(M): the mean's projection
 *
 * Q stays for the next step (warm start); it starts as a seeded normal
 * matrix, the same on every rank.  With r = min(rows, cols) = rows, P is
 * square and orthogonal, so out is mean(M) up to float rounding.  Error
 * feedback: resid = M - out, each rank against the common approximation,
 * so sum_t g_t = sum_t out_t + e_T on every rank.  A column of P that
 * vanishes (rank-deficient M) becomes zero rather than NaN.  Finite
 * gradients can still overflow a product or a sum (entries near 3.4e38):
 * the step then fails on every rank alike (the sums are the same bits
 * everywhere) and Q goes back to its last good value, so the next step
 * starts from a finite Q.
 */
#include "compress/cmp.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/util.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cmp_powersgd {
    flx_comm_h comm;
    size_t n, rows, cols;
    int r;
    float *M;      /* rows * cols when padding is needed, else NULL */
    float *out;    /* rows * cols when padding is needed, else NULL */
    float *P;      /* rows * r + 1 (flag)                           */
    float *Q;      /* cols * r                                      */
    float *Qgood;  /* cols * r: Q before this step's update          */
};

static int all_finite(const float *x, size_t n) { return flx_first_nonfinite(x, n) == n; }

flx_status_t cmp_powersgd_create(flx_comm_h comm, size_t n, int rank_r, uint64_t seed,
                                 cmp_powersgd_t **ps_p)
{
    cmp_powersgd_t *ps = calloc(1, sizeof(*ps));
    cmp_rng_t rng;

    if (ps == NULL)
        return FLX_ERR_NO_MEMORY;
    ps->comm = comm;
    ps->n = n;
    ps->cols = (size_t)ceil(sqrt((double)n));
    while (ps->cols * ps->cols < n) /* sqrt rounding */
        ps->cols++;
    ps->rows = FLX_DIV_ROUND_UP(n, ps->cols);
    ps->r = (int)FLX_MIN((size_t)rank_r, FLX_MIN(ps->rows, ps->cols));
    if (ps->rows * ps->cols != n) {
        ps->M = calloc(ps->rows * ps->cols, sizeof(float));
        ps->out = malloc(ps->rows * ps->cols * sizeof(float));
        if (ps->M == NULL || ps->out == NULL)
            goto err_free_buffers;
    }
    ps->P = malloc((ps->rows * (size_t)ps->r + 1) * sizeof(float));
    ps->Q = malloc(ps->cols * (size_t)ps->r * sizeof(float));
    ps->Qgood = malloc(ps->cols * (size_t)ps->r * sizeof(float));
    if (ps->P == NULL || ps->Q == NULL || ps->Qgood == NULL)
        goto err_free_buffers;
    cmp_rng_seed(&rng, seed, 0x9d, 0);
    for (size_t i = 0; i < ps->cols * (size_t)ps->r; i++)
        ps->Q[i] = cmp_rng_normal(&rng);
    *ps_p = ps;
    return FLX_OK;

err_free_buffers:
    free(ps->Qgood);
    free(ps->Q);
    free(ps->P);
    free(ps->out);
    free(ps->M);
    free(ps);
    flx_error(COMPRESS, flx_comm_rank(comm), "PowerSGD: no memory for a %zu-element gradient",
              n);
    return FLX_ERR_NO_MEMORY;
}

void cmp_powersgd_destroy(cmp_powersgd_t *ps)
{
    if (ps == NULL)
        return;
    free(ps->Qgood);
    free(ps->Q);
    free(ps->P);
    free(ps->out);
    free(ps->M);
    free(ps);
}

void cmp_powersgd_shape(const cmp_powersgd_t *ps, size_t *rows_p, size_t *cols_p, int *r_p)
{
    *rows_p = ps->rows;
    *cols_p = ps->cols;
    *r_p = ps->r;
}

/* Orthonormal columns, in place (rows x r, row-major): modified Gram-Schmidt
 * with a second projection pass ("twice is enough"), so that P stays
 * orthogonal to working precision even when M Q is ill-conditioned. */
static void powersgd_orthonormalise(float *P, size_t rows, int r)
{
    for (int c = 0; c < r; c++) {
        double norm = 0;
        for (int pass = 0; pass < 2; pass++) {
            for (int p = 0; p < c; p++) {
                double dot = 0;
                for (size_t i = 0; i < rows; i++)
                    dot += (double)P[i * r + p] * P[i * r + c];
                for (size_t i = 0; i < rows; i++)
                    P[i * r + c] = (float)(P[i * r + c] - dot * P[i * r + p]);
            }
        }
        for (size_t i = 0; i < rows; i++)
            norm += (double)P[i * r + c] * P[i * r + c];
        norm = sqrt(norm);
        for (size_t i = 0; i < rows; i++)
            P[i * r + c] = norm > 1e-30 ? (float)(P[i * r + c] / norm) : 0.0f;
    }
}

flx_status_t cmp_powersgd_step(cmp_powersgd_t *ps, const float *acc, int bad, float *out,
                               float *resid, int *any_bad_p, int *overflow_p, uint64_t *bytes_p,
                               double *c2_p)
{
    const int N = flx_comm_size(ps->comm), rank = flx_comm_rank(ps->comm);
    const size_t rows = ps->rows, cols = ps->cols, r = (size_t)ps->r;
    const float *M = acc;
    float *O = ps->out ? ps->out : out;
    double c2 = 0;
    flx_status_t st;

    if (ps->M) {
        memcpy(ps->M, acc, ps->n * sizeof(float)); /* the padding stays zero */
        M = ps->M;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)r, (int)cols, 1.0f,
                M, (int)cols, ps->Q, (int)r, 0.0f, ps->P, (int)r);
    ps->P[rows * r] = bad ? 1.0f : 0.0f;
    st = flx_allreduce(ps->comm, ps->P, ps->P, rows * r + 1, FLX_FLOAT32, FLX_SUM,
                       FLX_ALGO_AUTO);
    if (st != FLX_OK)
        return st;
    *bytes_p += (uint64_t)cmp_bytes_allreduce(flx_allreduce_algo(ps->comm, rows * r + 1,
                                                                 FLX_FLOAT32),
                                              N, rank, 4.0 * (double)(rows * r + 1));
    *any_bad_p = ps->P[rows * r] != 0.0f;
    *overflow_p = 0;
    if (*any_bad_p)
        return FLX_OK; /* every rank stops here: Q keeps its last good value */
    if (!all_finite(ps->P, rows * r)) {
        *overflow_p = 1; /* ... here too */
        return FLX_OK;
    }
    powersgd_orthonormalise(ps->P, rows, (int)r);
    memcpy(ps->Qgood, ps->Q, cols * r * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)cols, (int)r, (int)rows, 1.0f, M,
                (int)cols, ps->P, (int)r, 0.0f, ps->Q, (int)r);
    st = flx_allreduce(ps->comm, ps->Q, ps->Q, cols * r, FLX_FLOAT32, FLX_SUM, FLX_ALGO_AUTO);
    if (st != FLX_OK)
        return st;
    *bytes_p += (uint64_t)cmp_bytes_allreduce(flx_allreduce_algo(ps->comm, cols * r,
                                                                 FLX_FLOAT32),
                                              N, rank, 4.0 * (double)(cols * r));
    if (all_finite(ps->Q, cols * r))
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)r,
                    1.0f / (float)N, ps->P, (int)r, ps->Q, (int)r, 0.0f, O, (int)cols);
    if (!all_finite(ps->Q, cols * r) || !all_finite(O, rows * cols)) {
        memcpy(ps->Q, ps->Qgood, cols * r * sizeof(float));
        *overflow_p = 1;
        return FLX_OK;
    }
    if (O != out)
        memcpy(out, O, ps->n * sizeof(float));
    for (size_t i = 0; i < ps->n; i++) {
        if (resid)
            resid[i] = acc[i] - out[i];
        c2 += (double)out[i] * out[i];
    }
    *c2_p = c2;
    return FLX_OK;
}
