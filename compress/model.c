/* model.c -- predicted communication times of the compressed collectives
 * (pure functions; DESIGN.md "Compression"), and the bytes a rank sends.
 *
 * The paper's model, m parameters of 4 bytes, kept fraction c, N ranks,
 * latency alpha, bandwidth B bytes/s:
 *
 *   bcast    = alpha log2 N + log2 N 4mc/B
 *   AR_ring  = bcast + 2(N-1) alpha + 2(N-1) 4mc/(N B)
 *   AR_tree  = bcast + 2 alpha log2 N + 2 log2 N 4mc/B
 *   AG       = alpha log2 N + 2(N-1) 4mc/B
 *
 * AG counts 8 bytes per kept element (value + int32 index) from each of
 * the N-1 other ranks; AR_* broadcast 4-byte indices and allreduce 4-byte
 * values.  At N = 1 every time is 0.
 */
#include "compress/cmp.h"

#include <math.h>

static double model_log2(int N) { return N > 1 ? log2((double)N) : 0.0; }

double cmp_model_bcast(int N, double m, double c, double alpha, double B)
{
    double l = model_log2(N);

    return alpha * l + l * 4.0 * m * c / B;
}

double cmp_model_ar_ring(int N, double m, double c, double alpha, double B)
{
    if (N <= 1)
        return 0;
    return cmp_model_bcast(N, m, c, alpha, B) + 2.0 * (N - 1) * alpha +
           2.0 * (N - 1) * 4.0 * m * c / (N * B);
}

double cmp_model_ar_tree(int N, double m, double c, double alpha, double B)
{
    double l = model_log2(N);

    if (N <= 1)
        return 0;
    return cmp_model_bcast(N, m, c, alpha, B) + 2.0 * alpha * l + 2.0 * l * 4.0 * m * c / B;
}

double cmp_model_ag(int N, double m, double c, double alpha, double B)
{
    if (N <= 1)
        return 0;
    return alpha * model_log2(N) + 2.0 * (N - 1) * 4.0 * m * c / B;
}

double cmp_model_dense_ring(int N, double m, double alpha, double B)
{
    if (N <= 1)
        return 0;
    return 2.0 * (N - 1) * alpha + 2.0 * (N - 1) * 4.0 * m / (N * B);
}

double cmp_model_ar_pipe(int N, double m, double c, double alpha, double B)
{
    if (N <= 1)
        return 0;
    /* the scatter's N-1 messages leave the leader back to back (one alpha
     * each), then a ring: reduce-scatter of 8-byte (value, index) pairs and
     * allgather of 4-byte values, (N-1)/N of the k elements each */
    return (N - 1) * alpha + 2.0 * (N - 1) * alpha + (N - 1) * 12.0 * m * c / (N * B);
}

double cmp_model_ar_prev(int N, double m, double c, double alpha, double B)
{
    if (N <= 1)
        return 0;
    return 2.0 * (N - 1) * alpha + 2.0 * (N - 1) * 4.0 * m * c / (N * B);
}

double cmp_model_powersgd(int N, double rows, double cols, int r, double alpha, double B)
{
    return cmp_model_dense_ring(N, rows * r, alpha, B) + cmp_model_dense_ring(N, cols * r, alpha, B);
}

double cmp_bytes_allreduce(flx_algo_t algo, int N, int rank, double bytes)
{
    int p = 1, log2p = 0, children;

    if (N <= 1)
        return 0;
    switch (algo) {
    case FLX_ALGO_TREE: /* reduce up to the parent, broadcast down to the children */
        children = (2 * rank + 1 < N) + (2 * rank + 2 < N);
        return (rank > 0 ? bytes : 0) + children * bytes;
    case FLX_ALGO_RD:
        while (2 * p <= N) {
            p *= 2;
            log2p++;
        }
        if (rank < 2 * (N - p)) /* paired: even ranks hand over, odd ones hand back */
            return rank % 2 == 0 ? bytes : (1.0 + log2p) * bytes;
        return log2p * bytes;
    case FLX_ALGO_HD: /* the ring's bytes over p ranks, and the same pairs as rd */
        while (2 * p <= N)
            p *= 2;
        if (rank < 2 * (N - p))
            return rank % 2 == 0 ? bytes : (1.0 + 2.0 * (p - 1) / p) * bytes;
        return 2.0 * (p - 1) / p * bytes;
    default:
        return 2.0 * (N - 1) / N * bytes;
    }
}

double cmp_bytes_allgather(int N, double bytes_per_rank)
{
    return N > 1 ? (N - 1) * bytes_per_rank : 0;
}

double cmp_bytes_bcast(int N, int rank, int root, double bytes)
{
    int v = ((rank - root) % N + N) % N, children = 0;

    /* binomial: v sends to v + 2^j for every 2^j below its lowest set bit */
    for (int d = 1; d < N; d *= 2) {
        if (v & d)
            break;
        if (v + d < N)
            children++;
    }
    return children * bytes;
}
