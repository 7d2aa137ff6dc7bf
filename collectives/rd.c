/* rd.c -- latency-bound algorithms: recursive-doubling allreduce, Bruck
 * allgather (recursive doubling for any N) and the dissemination barrier.
 *
 * recursive doubling, N = 6 (p = 4, rem = 2):
 *     ranks 0,2 hand their data to 1,3 and wait;  active: 1 3 4 5
 *     newranks 0..3 exchange with newrank ^ 1, then ^ 2;  1,3 return results
 */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/dtype.h"

#include <string.h>

enum { RD_PRE = 0, RD_MAIN = 1, RD_POST = 64 };

flx_status_t coll_allreduce_rd(flx_comm_h comm, void *buf, size_t count,
                               flx_dtype_t dtype, flx_op_t op)
{
    const int r = comm->rank, n = comm->size;
    const size_t bytes = count * flx_dtype_size(dtype);
    const int p = topo_pow2_floor(n), rem = n - p;
    const int newrank = topo_rd_newrank(r, n);
    tl_req_t req;
    void *tmp;
    flx_status_t st = FLX_OK;

    if (n == 1 || count == 0)
        return FLX_OK;
    tmp = coll_scratch(comm, bytes);
    if (tmp == NULL)
        return FLX_ERR_NO_MEMORY;
    if (r < 2 * rem) {
        if (newrank < 0) {
            st = coll_send(comm, r + 1, COLL_STEP(RD_PRE, 0), buf, bytes, &req);
            if (st == FLX_OK)
                st = coll_wait(comm, &req);
        } else {
            st = coll_recv(comm, r - 1, COLL_STEP(RD_PRE, 0), tmp, bytes, &req);
            if (st == FLX_OK)
                st = coll_wait(comm, &req);
            if (st == FLX_OK)
                flx_reduce(buf, tmp, count, dtype, op);
        }
    }
    if (newrank >= 0) {
        for (int mask = 1, k = 0; mask < p && st == FLX_OK; mask <<= 1, k++) {
            int peer = topo_rd_oldrank(newrank ^ mask, n);
            st = coll_sendrecv(comm, peer, buf, bytes, peer, tmp, bytes,
                               COLL_STEP(RD_MAIN + k, 0));
            if (st == FLX_OK)
                flx_reduce(buf, tmp, count, dtype, op);
        }
    }
    if (r < 2 * rem && st == FLX_OK) {
        if (newrank < 0)
            st = coll_recv(comm, r + 1, COLL_STEP(RD_POST, 0), buf, bytes, &req);
        else
            st = coll_send(comm, r - 1, COLL_STEP(RD_POST, 0), buf, bytes, &req);
        if (st == FLX_OK)
            st = coll_wait(comm, &req);
    }
    if (st == FLX_OK)
        flx_reduce_finish(buf, count, dtype, op, n);
    return st;
}

/* Bruck: after round k, tmp holds blocks of ranks r .. r+2^(k+1)-1; a final
 * rotation puts block i of rank (r+i) mod N at its place. */
flx_status_t coll_allgather_bruck(flx_comm_h comm, void *recvbuf, size_t bpr)
{
    const int r = comm->rank, n = comm->size;
    char *tmp, *out = recvbuf;
    flx_status_t st = FLX_OK;

    if (n == 1 || bpr == 0)
        return FLX_OK;
    tmp = coll_scratch(comm, (size_t)n * bpr);
    if (tmp == NULL)
        return FLX_ERR_NO_MEMORY;
    memcpy(tmp, out + (size_t)r * bpr, bpr);
    for (int dist = 1, k = 0; dist < n && st == FLX_OK; dist *= 2, k++) {
        int nblocks = dist < n - dist ? dist : n - dist;
        st = coll_sendrecv(comm, topo_mod(r - dist, n), tmp, (size_t)nblocks * bpr,
                           topo_mod(r + dist, n), tmp + (size_t)dist * bpr,
                           (size_t)nblocks * bpr, COLL_STEP(k, 0));
    }
    if (st != FLX_OK)
        return st;
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)topo_mod(r + i, n) * bpr, tmp + (size_t)i * bpr, bpr);
    return FLX_OK;
}

/* dissemination: round k signals r+2^k and waits for r-2^k */
flx_status_t coll_barrier_dissemination(flx_comm_h comm)
{
    const int r = comm->rank, n = comm->size;
    flx_status_t st = FLX_OK;
    char token = 0, sink;

    for (int dist = 1, k = 0; dist < n && st == FLX_OK; dist *= 2, k++)
        st = coll_sendrecv(comm, topo_mod(r + dist, n), &token, 0, topo_mod(r - dist, n),
                           &sink, 0, COLL_STEP(k, 0));
    return st;
}
