/* bcast.c -- broadcast: binomial tree for small messages (log2 N steps),
 * pipelined chain for large ones (root -> root+1 -> ... chunk by chunk, so
 * time ~ S/beta + (N-2) chunk/beta). */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/util.h"

flx_status_t coll_bcast_binomial(flx_comm_h comm, void *buf, size_t bytes, int root)
{
    int children[32], nchildren;
    int parent = topo_binomial(comm->rank, comm->size, root, children, &nchildren);
    tl_req_t reqs[32];
    flx_status_t st = FLX_OK;

    if (parent >= 0) {
        st = coll_recv(comm, parent, 0, buf, bytes, &reqs[0]);
        if (st == FLX_OK)
            st = coll_wait(comm, &reqs[0]);
    }
    for (int c = 0; c < nchildren && st == FLX_OK; c++)
        st = coll_send(comm, children[c], 0, buf, bytes, &reqs[c]);
    if (st == FLX_OK)
        st = coll_waitall(comm, reqs, (size_t)nchildren);
    return st;
}

flx_status_t coll_bcast_chain(flx_comm_h comm, void *buf, size_t bytes, int root)
{
    const int n = comm->size;
    const int v = topo_mod(comm->rank - root, n);
    const int prev = topo_mod(comm->rank - 1, n), next = topo_mod(comm->rank + 1, n);
    size_t elems = coll_chunk_elems(comm, 1, bytes);
    size_t nch = FLX_DIV_ROUND_UP(bytes, elems);
    char *base = buf;
    tl_req_t *rreq, *sreq;
    flx_status_t st = FLX_OK;

    if (bytes == 0)
        return FLX_OK;
    rreq = coll_scratch(comm, 2 * nch * sizeof(tl_req_t));
    if (rreq == NULL)
        return FLX_ERR_NO_MEMORY;
    sreq = rreq + nch;
    for (size_t j = 0; v > 0 && j < nch && st == FLX_OK; j++)
        st = coll_recv(comm, prev, (uint32_t)j, base + j * elems,
                       FLX_MIN(elems, bytes - j * elems), &rreq[j]);
    for (size_t j = 0; j < nch && st == FLX_OK; j++) {
        if (v > 0)
            st = coll_wait(comm, &rreq[j]);
        if (st == FLX_OK && v < n - 1)
            st = coll_send(comm, next, (uint32_t)j, base + j * elems,
                           FLX_MIN(elems, bytes - j * elems), &sreq[j]);
    }
    if (st == FLX_OK && v < n - 1)
        st = coll_waitall(comm, sreq, nch);
    return st;
}
