/* tree.c -- pipelined binary-tree allreduce: chunks flow up the tree being
 * reduced (children -> parent) and the root's results flow back down, the
 * two phases overlapping chunk by chunk (latency ~ 2 log2(N) alpha).
 * Tree shape: topo_tree_parent / topo_tree_children (heap order, root 0).
 * Out of place (src != buf) the input is never copied to the output: a
 * leaf sends its chunks up from src; an inner rank receives its first
 * child's chunks straight into buf and folds src's in there (commutative
 * ops: the bits of the in-place order), the second child's through a
 * buffer as before. */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/dtype.h"
#include "common/time.h"
#include "common/util.h"

#include <string.h>

enum { TREE_UP = 0, TREE_DOWN = 1 };

flx_status_t coll_allreduce_tree(flx_comm_h comm, const void *src, void *buf, size_t count,
                                 flx_dtype_t dtype, flx_op_t op)
{
    const int r = comm->rank, n = comm->size;
    const size_t es = flx_dtype_size(dtype);
    const int parent = topo_tree_parent(r);
    int child[2];
    const int nchild = topo_tree_children(r, n, child);
    size_t elems, nch, up = 0, down = 0;
    char *base = buf, *tmp[2];
    const char *in = src != buf ? src : NULL;
    const int nbuf = nchild - (in && nchild > 0); /* receive buffers */
    tl_req_t *creq[2], *preq, *upreq, *downreq;
    flx_status_t st = FLX_OK;
    coll_clock_t clk;

    coll_clock_start(&clk);
    if (in && count && n == 1)
        memcpy(buf, in, count * es);
    if (count == 0 || n == 1)
        return FLX_OK;
    elems = coll_chunk_elems(comm, es, count);
    nch = FLX_DIV_ROUND_UP(count, elems);
    /* requests first (aligned), then the children's receive buffers */
    creq[0] = coll_scratch(comm, 6 * nch * sizeof(tl_req_t) + (size_t)nbuf * count * es);
    if (creq[0] == NULL)
        return FLX_ERR_NO_MEMORY;
    creq[1] = creq[0] + nch;
    preq = creq[1] + nch;
    upreq = preq + nch;
    downreq = upreq + nch; /* 2 * nch: one per child */
    tmp[0] = in ? base : (char *)(downreq + 2 * nch);
    tmp[1] = in ? (char *)(downreq + 2 * nch) : tmp[0] + count * es;

    for (size_t j = 0; j < nch && st == FLX_OK; j++) {
        size_t co = j * elems, cl = FLX_MIN(elems, count - co);
        for (int c = 0; c < nchild && st == FLX_OK; c++)
            st = coll_recv(comm, child[c], COLL_STEP(TREE_UP, j), tmp[c] + co * es, cl * es,
                           &creq[c][j]);
        if (parent >= 0 && st == FLX_OK)
            st = coll_recv(comm, parent, COLL_STEP(TREE_DOWN, j), base + co * es, cl * es,
                           &preq[j]);
    }
    /* advance both phases as their inputs complete */
    while (st == FLX_OK && down < nch) {
        int moved = 0;
        while (up < nch && (nchild < 1 || creq[0][up].complete) &&
               (nchild < 2 || creq[1][up].complete)) {
            size_t co = up * elems, cl = FLX_MIN(elems, count - co);
            for (int c = 0; c < nchild; c++) {
                if ((st = creq[c][up].status) != FLX_OK)
                    return st;
                flx_reduce(base + co * es, (c == 0 && in ? in : tmp[c]) + co * es, cl, dtype, op);
            }
            if (parent >= 0) /* a leaf's chunk out of place: the input's */
                st = coll_send(comm, parent, COLL_STEP(TREE_UP, up),
                               (nchild == 0 && in ? in : base) + co * es, cl * es, &upreq[up]);
            else
                flx_reduce_finish(base + co * es, cl, dtype, op, n);
            up++;
            moved = 1;
            if (st != FLX_OK)
                return st;
        }
        while (down < nch && (parent < 0 ? down < up : preq[down].complete)) {
            size_t co = down * elems, cl = FLX_MIN(elems, count - co);
            if (parent >= 0 && (st = preq[down].status) != FLX_OK)
                return st;
            for (int c = 0; c < nchild && st == FLX_OK; c++)
                st = coll_send(comm, child[c], COLL_STEP(TREE_DOWN, down), base + co * es,
                               cl * es, &downreq[2 * down + (size_t)c]);
            down++;
            moved = 1;
        }
        if (moved)
            coll_clock_start(&clk);
        else if (down < nch) {
            tl_req_t *w = up < nch && nchild > 0 ? &creq[creq[0][up].complete ? 1 : 0][up]
                                                 : &preq[down];
            st = coll_progress(comm, w, &clk);
        }
    }
    for (size_t j = 0; j < nch && st == FLX_OK; j++) {
        if (parent >= 0)
            st = coll_wait(comm, &upreq[j]);
        for (int c = 0; c < nchild && st == FLX_OK; c++)
            st = coll_wait(comm, &downreq[2 * j + (size_t)c]);
    }
    return st;
}
