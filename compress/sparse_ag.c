/* sparse_ag.c -- the sparse allgather path: every rank's (int32 index,
 * float value) pairs, of any count, gathered to every rank, decompressed
 * and summed locally into a dense vector.  The baseline the AR-Topk paper
 * compares with: (N-1) 8k bytes arrive at every rank.
 *
 * Block of one rank on the wire (one allgatherv):
 *
 *     uint32 count | uint32 bad | int32 idx[count] | float val[count]
 *
 * The sum is formed in rank order 0..N-1 onto zeros, so every rank adds the
 * same floats in the same order and gets the same bits.
 */
#include "compress/cmp.h"
#include "collectives/coll.h"
#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

#define SAG_HEADER 8

struct cmp_sparse_ag {
    flx_comm_h comm;
    size_t n;
    size_t k_max;
    flx_algo_t algo;
    char *send;        /* one block of k_max pairs     */
    char *recv;        /* N blocks of k_max pairs      */
    size_t *counts;    /* N, bytes per rank            */
    size_t *displs;    /* N                            */
};

static size_t sag_block_bytes(size_t k) { return SAG_HEADER + 8 * k; }

flx_status_t cmp_sparse_ag_reserve(cmp_sparse_ag_t *ag, size_t k_max)
{
    const size_t N = (size_t)flx_comm_size(ag->comm);
    char *send, *recv;

    if (k_max <= ag->k_max)
        return FLX_OK;
    send = realloc(ag->send, sag_block_bytes(k_max));
    if (send == NULL)
        return FLX_ERR_NO_MEMORY;
    ag->send = send;
    recv = realloc(ag->recv, N * sag_block_bytes(k_max));
    if (recv == NULL) {
        flx_error(COMPRESS, flx_comm_rank(ag->comm), "sparse allgather: no memory for %zu "
                  "pairs from each of %zu ranks", k_max, N);
        return FLX_ERR_NO_MEMORY;
    }
    ag->recv = recv;
    ag->k_max = k_max;
    return FLX_OK;
}

flx_status_t cmp_sparse_ag_create(flx_comm_h comm, size_t n, size_t k_max, flx_algo_t algo,
                                  cmp_sparse_ag_t **ag_p)
{
    const size_t N = (size_t)flx_comm_size(comm);
    cmp_sparse_ag_t *ag = calloc(1, sizeof(*ag));
    flx_status_t st = FLX_ERR_NO_MEMORY;

    if (ag == NULL)
        return FLX_ERR_NO_MEMORY;
    ag->comm = comm;
    ag->n = n;
    ag->algo = algo;
    ag->counts = calloc(2 * N, sizeof(size_t));
    if (ag->counts == NULL)
        goto err_free_ag;
    ag->displs = ag->counts + N;
    st = cmp_sparse_ag_reserve(ag, k_max);
    if (st != FLX_OK)
        goto err_free_buffers;
    *ag_p = ag;
    return FLX_OK;

err_free_buffers:
    free(ag->recv);
    free(ag->send);
    free(ag->counts);
err_free_ag:
    free(ag);
    return st;
}

void cmp_sparse_ag_destroy(cmp_sparse_ag_t *ag)
{
    if (ag == NULL)
        return;
    free(ag->recv);
    free(ag->send);
    free(ag->counts);
    free(ag);
}

flx_status_t cmp_sparse_ag_step(cmp_sparse_ag_t *ag, const int32_t *idx, const float *val,
                                size_t k, int bad, float *out, int *any_bad_p,
                                uint64_t *bytes_p)
{
    const int N = flx_comm_size(ag->comm), rank = flx_comm_rank(ag->comm);
    uint32_t head[2] = {(uint32_t)k, bad ? 1u : 0u};
    int any_bad = 0;
    flx_status_t st;

    memcpy(ag->send, head, SAG_HEADER);
    memcpy(ag->send + SAG_HEADER, idx, k * sizeof(int32_t));
    memcpy(ag->send + SAG_HEADER + 4 * k, val, k * sizeof(float));
    st = coll_allgatherv(ag->comm, ag->send, sag_block_bytes(k), ag->recv,
                         (size_t)N * sag_block_bytes(ag->k_max), ag->counts, ag->displs,
                         FLX_INT64, ag->algo);
    if (st != FLX_OK)
        return st;
    /* validate every block before touching out */
    for (int r = 0; r < N; r++) {
        const char *b = ag->recv + ag->displs[r];
        memcpy(head, b, SAG_HEADER);
        if (ag->counts[r] != sag_block_bytes(head[0]) || head[0] > ag->n) {
            flx_error(COMPRESS, rank, "sparse allgather: rank %d sent a malformed block "
                      "(%zu bytes, count %u)", r, ag->counts[r], head[0]);
            return FLX_ERR_PROTOCOL;
        }
        for (size_t j = 0; j < head[0]; j++) {
            int32_t i;
            memcpy(&i, b + SAG_HEADER + 4 * j, sizeof(i));
            if (flx_unlikely((uint32_t)i >= ag->n)) {
                flx_error(COMPRESS, rank, "sparse allgather: rank %d sent index %d of a "
                          "%zu-element vector", r, i, ag->n);
                return FLX_ERR_PROTOCOL;
            }
        }
        any_bad |= head[1] != 0;
    }
    *bytes_p += (uint64_t)(ag->displs[N - 1] + ag->counts[N - 1] -
                           ag->counts[(rank + 1) % N] + 8 * (N - 1));
    *any_bad_p = any_bad;
    if (any_bad)
        return FLX_OK;
    memset(out, 0, ag->n * sizeof(float));
    for (int r = 0; r < N; r++) {
        const char *b = ag->recv + ag->displs[r];
        const int32_t *ri;
        const float *rv;
        size_t rk;
        memcpy(head, b, SAG_HEADER);
        rk = head[0];
        ri = (const int32_t *)(b + SAG_HEADER);
        rv = (const float *)(b + SAG_HEADER + 4 * rk);
        for (size_t j = 0; j < rk; j++) /* every index was checked above */
            out[ri[j]] += rv[j];
    }
    return FLX_OK;
}
