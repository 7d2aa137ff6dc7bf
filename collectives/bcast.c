/* bcast.c -- broadcast: binomial tree for small messages (log2 N steps)
 * and for 2 ranks, pipelined chain for large ones (root -> root+1 -> ...
 * chunk by chunk, so time ~ S/beta + (N-2) chunk/beta). */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/util.h"

/* Binomial tree in pipeline chunks: a rank receives from its parent at
 * most BCAST_WINDOW chunks ahead and forwards each chunk to its children
 * as soon as it is in, so the levels overlap, and no message is larger
 * than a chunk (the ib backend stages it instead of registering the
 * caller's buffer).  A count of 0 is still one (empty) message per edge
 * of the tree, so that a rank that disagrees on the count learns it. */
#define BCAST_WINDOW 8
flx_status_t coll_bcast_binomial(flx_comm_h comm, void *buf, size_t bytes, int root)
{
    int children[32], nchildren;
    int parent = topo_binomial(comm->rank, comm->size, root, children, &nchildren);
    size_t elems = coll_chunk_elems(comm, 1, bytes);
    size_t nch = bytes ? FLX_DIV_ROUND_UP(bytes, elems) : 1, posted = 0;
    char *base = buf;
    tl_req_t *rreq, *sreq; /* [window], [child][window] */
    flx_status_t st = FLX_OK;

    rreq = coll_scratch(comm, (size_t)(1 + nchildren) * BCAST_WINDOW * sizeof(tl_req_t));
    if (rreq == NULL)
        return FLX_ERR_NO_MEMORY;
    sreq = rreq + BCAST_WINDOW;
    for (size_t j = 0; j < nch && st == FLX_OK; j++) {
        size_t len = FLX_MIN(elems, bytes - j * elems);

        for (; parent >= 0 && posted < nch && posted < j + BCAST_WINDOW && st == FLX_OK; posted++)
            st = coll_recv(comm, parent, (uint32_t)posted, base + posted * elems,
                           FLX_MIN(elems, bytes - posted * elems), &rreq[posted % BCAST_WINDOW]);
        if (parent >= 0 && st == FLX_OK)
            st = coll_wait(comm, &rreq[j % BCAST_WINDOW]);
        for (int c = 0; c < nchildren && st == FLX_OK; c++) {
            tl_req_t *q = &sreq[(size_t)c * BCAST_WINDOW + j % BCAST_WINDOW];
            if (j >= BCAST_WINDOW) /* the slot's last send must be gone */
                st = coll_wait(comm, q);
            if (st == FLX_OK)
                st = coll_send(comm, children[c], (uint32_t)j, base + j * elems, len, q);
        }
    }
    for (size_t j = nch > BCAST_WINDOW ? nch - BCAST_WINDOW : 0; j < nch && st == FLX_OK; j++)
        for (int c = 0; c < nchildren && st == FLX_OK; c++)
            st = coll_wait(comm, &sreq[(size_t)c * BCAST_WINDOW + j % BCAST_WINDOW]);
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
