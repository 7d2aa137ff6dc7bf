/* ef.c -- error feedback: one residual per parameter, zero-initialised.
 *
 *     acc   = g + e                  (cmp_ef_accumulate)
 *     send  C(acc)
 *     e'    = acc - C(acc)           (cmp_ef_update_sparse, or the
 *                                     quantisers' resid output)
 *
 * For the sparsifiers C(acc) keeps acc at the selected indices and is 0
 * elsewhere, so e' is acc with those entries zeroed and acc == C + e' bit
 * for bit.  The residual buffer is never written before the step is known
 * to succeed: acc goes to a second buffer that becomes the residual (the
 * gradient-sync object swaps the two). */
#include "compress/cmp.h"

#include <math.h>

/* Blocks of 8 floats: the float partial sums vectorise, each block's sum is
 * added to a double so that 25 M terms keep their precision. */
#define EF_BLOCK 8
#define EF_FLUSH 1024 /* elements per flush to double */

void cmp_ef_accumulate(const float *g, const float *e, float *acc, size_t n,
                       cmp_ef_sums_t *sums_p)
{
    double g2 = 0, a2 = 0;
    size_t i = 0;

    while (i < n) {
        size_t end = n - i > EF_FLUSH ? i + EF_FLUSH : n;
        float pg[EF_BLOCK] = {0}, pa[EF_BLOCK] = {0};

        if (e) {
            for (; i + EF_BLOCK <= end; i += EF_BLOCK) {
                for (int j = 0; j < EF_BLOCK; j++) {
                    float x = g[i + j], a = x + e[i + j];
                    acc[i + j] = a;
                    pg[j] += x * x;
                    pa[j] += a * a;
                }
            }
            for (; i < end; i++) {
                float x = g[i], a = x + e[i];
                acc[i] = a;
                pg[0] += x * x;
                pa[0] += a * a;
            }
        } else {
            for (; i + EF_BLOCK <= end; i += EF_BLOCK)
                for (int j = 0; j < EF_BLOCK; j++)
                    pg[j] += g[i + j] * g[i + j];
            for (; i < end; i++)
                pg[0] += g[i] * g[i];
        }
        for (int j = 0; j < EF_BLOCK; j++) {
            g2 += pg[j];
            a2 += pa[j];
        }
    }
    if (e == NULL)
        a2 = g2;
    /* float squares overflow to Inf above ~1.8e19: recheck such a block in
     * double before calling the gradient non-finite */
    if (!isfinite(g2) || !isfinite(a2)) {
        int finite = 1;
        g2 = 0;
        a2 = 0;
        for (i = 0; i < n; i++) {
            double x = g[i], a = e ? (double)acc[i] : x;
            finite &= isfinite(x) && isfinite(a);
            g2 += x * x;
            a2 += a * a;
        }
        sums_p->finite = finite;
    } else {
        sums_p->finite = 1;
    }
    sums_p->g2 = g2;
    sums_p->acc2 = a2;
}

double cmp_ef_update_sparse(float *acc, const int32_t *idx, size_t k)
{
    double c2 = 0;

    for (size_t j = 0; j < k; j++) {
        float v = acc[idx[j]];
        c2 += (double)v * v;
        acc[idx[j]] = 0.0f;
    }
    return c2;
}

double cmp_ef_sparse_energy(const float *acc, const int32_t *idx, size_t k)
{
    double c2 = 0;

    for (size_t j = 0; j < k; j++) {
        double v = acc[idx[j]];
        c2 += v * v;
    }
    return c2;
}
