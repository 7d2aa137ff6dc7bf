/* allgatherv.c -- allgather with a byte count per rank.
 *
 * Two collectives in a row under one execution lock:
 *
 *   1. the counts: a fixed-size allgather of one uint64 per rank (ring or
 *      Bruck, the same algorithm as the data), after which every rank knows
 *      every count, the displacements (prefix sums) and the total;
 *   2. the blocks: the ring allgather over segments off[i] = displs[i],
 *      len[i] = counts[i] (coll_ring_allgather already takes per-segment
 *      ranges), or Bruck with variable blocks:
 *
 *      Bruck, rank r, N = 5: tmp holds the blocks of ranks r, r+1, ... in
 *      that order (rotated); round d = 1, 2, 4: send the first min(d, N-d)
 *      blocks to r-d, receive as many from r+d behind the d blocks we
 *      hold.  Block sizes differ, so the byte offsets in tmp are the prefix
 *      sums of the rotated counts; at the end block i goes to displs[r+i].
 *
 * The wire tags carry the caller's dtype with the count phase's N and then
 * with the total bytes, so ranks that disagree get FLX_ERR_MISMATCH.
 */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

/* Bruck over variable blocks; rot (N + 1 entries) are the rotated byte offsets. */
static flx_status_t allgatherv_bruck(flx_comm_h comm, void *recvbuf, const size_t *counts,
                                     const size_t *displs, size_t *rot)
{
    const int r = comm->rank, n = comm->size;
    char *tmp, *out = recvbuf;
    flx_status_t st = FLX_OK;

    rot[0] = 0;
    for (int i = 0; i < n; i++)
        rot[i + 1] = rot[i] + counts[topo_mod(r + i, n)];
    tmp = coll_scratch(comm, rot[n]);
    if (tmp == NULL)
        return FLX_ERR_NO_MEMORY;
    memcpy(tmp, out + displs[r], counts[r]);
    for (int dist = 1, k = 0; dist < n && st == FLX_OK; dist *= 2, k++) {
        int nblocks = FLX_MIN(dist, n - dist);
        st = coll_sendrecv(comm, topo_mod(r - dist, n), tmp, rot[nblocks],
                           topo_mod(r + dist, n), tmp + rot[dist], rot[dist + nblocks] - rot[dist],
                           COLL_STEP(k, 0));
    }
    if (st != FLX_OK)
        return st;
    for (int i = 1; i < n; i++) {
        int owner = topo_mod(r + i, n);
        memcpy(out + displs[owner], tmp + rot[i], counts[owner]);
    }
    return FLX_OK;
}

/* The body; the caller holds the execution lock. */
static flx_status_t allgatherv_run(flx_comm_h comm, const void *sendbuf, size_t sendbytes,
                                   void *recvbuf, size_t capacity, size_t *counts,
                                   size_t *displs, flx_dtype_t dtype, flx_algo_t algo,
                                   int *too_small_p)
{
    const int n = comm->size, r = comm->rank;
    uint64_t *wire;
    size_t *rot, total = 0, largest = 0, smallest_cap = capacity;
    const void *own;
    char *mine;
    int smallest_at = r;
    flx_algo_t calgo;
    flx_status_t st;

    /* slot 1 is ours: the algorithms below only use slot 0 */
    wire = coll_scratch_slot(comm, 1, (size_t)n * 2 * sizeof(uint64_t) +
                                          (size_t)(n + 1) * sizeof(size_t));
    if (wire == NULL)
        return FLX_ERR_NO_MEMORY;
    rot = (size_t *)(wire + 2 * n);
    /* each rank's count and capacity: whether the total fits everywhere is
     * then the same answer on every rank */
    wire[2 * r] = sendbytes;
    wire[2 * r + 1] = capacity;
    if (algo == FLX_ALGO_AUTO)
        algo = (flx_algo_t)comm->cfg.algo;
    /* the counts: a small allgather, its algorithm picked like one */
    calgo = comm_pick_allgather(comm, 2 * sizeof(uint64_t), algo, 0);
    coll_begin(comm, COLL_ALLGATHERV, calgo, dtype, 0, (size_t)n, "allgatherv (counts)");
    if (n > 1) {
        st = calgo == FLX_ALGO_RD ? coll_allgather_rd(comm, NULL, wire, 2 * sizeof(uint64_t))
                                  : coll_allgather_ring(comm, NULL, wire, 2 * sizeof(uint64_t));
        if (st != FLX_OK)
            return st;
    }
    for (int i = 0; i < n; i++) {
        counts[i] = (size_t)wire[2 * i];
        displs[i] = total;
        total += counts[i];
        largest = FLX_MAX(largest, counts[i]);
        if ((size_t)wire[2 * i + 1] < smallest_cap) {
            smallest_cap = (size_t)wire[2 * i + 1];
            smallest_at = i;
        }
    }
    if (total > smallest_cap) {
        *too_small_p = 1;
        if (total > capacity)
            flx_error(COLL, r, "allgatherv: the ranks send %zu bytes in all, the receive "
                      "buffer holds %zu", total, capacity);
        else
            flx_error(COLL, r, "allgatherv: the ranks send %zu bytes in all, rank %d's receive "
                      "buffer holds %zu: every rank fails this call", total, smallest_at,
                      smallest_cap);
        return FLX_ERR_INVALID_ARG;
    }
    if (algo != FLX_ALGO_RING && algo != FLX_ALGO_RD)
        algo = comm_pick_allgather(comm, (double)largest, algo, 0);
    mine = (char *)recvbuf + displs[r];
    /* the ring copies our block into place itself, behind its sends, when
     * the input lies apart from the whole output (inside another rank's
     * block, what it receives there would overwrite what it has to send) */
    own = sendbytes && n > 1 && algo != FLX_ALGO_RD &&
                  ((const char *)sendbuf + sendbytes <= (const char *)recvbuf ||
                   (const char *)recvbuf + total <= (const char *)sendbuf)
              ? sendbuf
              : NULL;
    if (own == NULL && sendbytes && (const char *)sendbuf != mine)
        memmove(mine, sendbuf, sendbytes);
    coll_begin(comm, COLL_ALLGATHERV, algo, dtype, 1, total, "allgatherv");
    if (n == 1 || total == 0)
        return FLX_OK;
    if (algo == FLX_ALGO_RD)
        return allgatherv_bruck(comm, recvbuf, counts, displs, rot);
    return coll_ring_allgather(comm, own, recvbuf, displs, counts, 1, 0);
}

/* The two arrays and the receive buffer are all written: they must not
 * overlap (one log line if they do). */
static int arrays_apart(flx_comm_h comm, const size_t *counts, const size_t *displs,
                        const void *recvbuf, size_t capacity)
{
    const char *c = (const char *)counts, *d = (const char *)displs, *r = recvbuf;
    const size_t alen = (size_t)comm->size * sizeof(size_t);

    if ((c < d + alen && d < c + alen) ||
        (capacity && ((c < r + capacity && r < c + alen) || (d < r + capacity && r < d + alen)))) {
        flx_error(COLL, comm->rank, "allgatherv: counts, displs and recvbuf overlap");
        return 0;
    }
    return 1;
}

flx_status_t coll_allgatherv(flx_comm_h comm, const void *sendbuf, size_t sendbytes,
                             void *recvbuf, size_t capacity, size_t *counts, size_t *displs,
                             flx_dtype_t dtype, flx_algo_t algo)
{
    int too_small = 0;
    flx_status_t st;

    if (comm == NULL || counts == NULL || displs == NULL || (sendbytes && sendbuf == NULL) ||
        (capacity && recvbuf == NULL) || (unsigned)algo >= FLX_ALGO_COUNT) {
        flx_error(COLL, comm ? comm->rank : -1, "allgatherv: NULL argument or invalid algo %d",
                  (int)algo);
        return FLX_ERR_INVALID_ARG;
    }
    if (!arrays_apart(comm, counts, displs, recvbuf, capacity))
        return FLX_ERR_INVALID_ARG;
    if ((st = comm_enter(comm)) != FLX_OK)
        return st;
    st = allgatherv_run(comm, sendbuf, sendbytes, recvbuf, capacity, counts, displs, dtype, algo,
                        &too_small);
    if (too_small) { /* every rank saw the same counts: the communicator is fine */
        comm_leave(comm, FLX_OK);
        return FLX_ERR_INVALID_ARG;
    }
    return comm_leave(comm, st);
}

flx_status_t flx_allgatherv(flx_comm_h comm, const void *sendbuf, size_t sendcount,
                            void *recvbuf, size_t recvcapacity, size_t *counts_p,
                            size_t *displs_p, flx_dtype_t dtype, flx_algo_t algo)
{
    size_t es, *bytes; /* byte counts and offsets: the caller's arrays only on success */
    flx_status_t st;

    if (comm == NULL || (unsigned)dtype >= FLX_DTYPE_COUNT) {
        flx_error(COLL, comm ? comm->rank : -1, "flx_allgatherv: NULL comm or invalid dtype");
        return FLX_ERR_INVALID_ARG;
    }
    es = flx_dtype_size(dtype);
    if (sendcount > ((size_t)1 << 50) / es || recvcapacity > ((size_t)1 << 50) / es) {
        flx_error(COLL, comm->rank, "flx_allgatherv: counts %zu / %zu are absurd", sendcount,
                  recvcapacity);
        return FLX_ERR_INVALID_ARG;
    }
    if (counts_p == NULL || displs_p == NULL) {
        flx_error(COLL, comm->rank, "flx_allgatherv: counts_p or displs_p is NULL");
        return FLX_ERR_INVALID_ARG;
    }
    if (!arrays_apart(comm, counts_p, displs_p, recvbuf, recvcapacity * es))
        return FLX_ERR_INVALID_ARG;
    bytes = malloc(2 * (size_t)comm->size * sizeof(*bytes));
    if (bytes == NULL) {
        flx_error(COLL, comm->rank, "flx_allgatherv: no memory for %d counts", comm->size);
        return FLX_ERR_NO_MEMORY;
    }
    st = coll_allgatherv(comm, sendbuf, sendcount * es, recvbuf, recvcapacity * es, bytes,
                         bytes + comm->size, dtype, algo);
    if (st == FLX_OK) {
        for (int i = 0; i < comm->size; i++) {
            counts_p[i] = bytes[i] / es;
            displs_p[i] = bytes[comm->size + i] / es;
        }
    }
    free(bytes);
    return st;
}
