/* ring.c -- chunked, pipelined ring reduce-scatter and allgather, and the
 * ring allreduce made of the two (bus traffic 2(N-1)/N * S).
 *
 * reduce-scatter, rank r, step s = 0..N-2:
 *     send segment (r-1-s) to r+1, receive segment (r-2-s) from r-1 and
 *     reduce it; the segment received at step s is the one sent at s+1,
 *     so each chunk is forwarded as soon as it is reduced.  At the end
 *     rank r holds segment r fully reduced.
 * allgather, step s = 0..N-2:
 *     send segment (r-s), receive segment (r-s-1) straight into place and
 *     forward it chunk by chunk at step s+1.
 */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/dtype.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t elems;     /* elements per chunk */
    size_t nchunks;   /* of the largest segment */
} ring_chunking_t;

static size_t seg_chunks(size_t len, size_t elems) { return FLX_DIV_ROUND_UP(len, elems); }

static void chunk_range(size_t seg_len, size_t elems, size_t j, size_t *off_p, size_t *len_p)
{
    *off_p = j * elems;
    *len_p = FLX_MIN(elems, seg_len - *off_p);
}

flx_status_t coll_ring_reduce_scatter(flx_comm_h comm, void *buf, const size_t *off,
                                      const size_t *len, flx_dtype_t dtype, flx_op_t op,
                                      uint32_t phase0)
{
    const int n = comm->size, r = comm->rank;
    const int next = topo_ring_next(r, n), prev = topo_ring_prev(r, n);
    const size_t es = flx_dtype_size(dtype);
    size_t maxlen = 0, elems, nch;
    char *base = buf, *tmp[2];
    tl_req_t *rreq[2], *sreq;
    flx_status_t st = FLX_OK;

    for (int i = 0; i < n; i++)
        maxlen = FLX_MAX(maxlen, len[i]);
    if (maxlen == 0)
        return FLX_OK;
    elems = coll_chunk_elems(comm, es, maxlen);
    nch = seg_chunks(maxlen, elems);
    /* requests first (aligned), then two receive buffers */
    rreq[0] = coll_scratch(comm, (size_t)(n + 1) * nch * sizeof(tl_req_t) + 2 * maxlen * es);
    if (rreq[0] == NULL)
        return FLX_ERR_NO_MEMORY;
    rreq[1] = rreq[0] + nch;
    sreq = rreq[1] + nch; /* (n-1) steps of nch sends */
    tmp[0] = (char *)(sreq + (size_t)(n - 1) * nch);
    tmp[1] = tmp[0] + maxlen * es;

    /* step 0 sends our own segment r-1 */
    {
        int sseg = topo_mod(r - 1, n);
        for (size_t j = 0; j < seg_chunks(len[sseg], elems) && st == FLX_OK; j++) {
            size_t co, cl;
            chunk_range(len[sseg], elems, j, &co, &cl);
            st = coll_send(comm, next, COLL_STEP(phase0, j), base + (off[sseg] + co) * es,
                           cl * es, &sreq[j]);
        }
    }
    for (int s = 0; s < n - 1 && st == FLX_OK; s++) {
        int rseg = topo_mod(r - 2 - s, n);
        size_t rch = seg_chunks(len[rseg], elems);
        char *t = tmp[s & 1];

        for (size_t j = 0; j < rch && st == FLX_OK; j++) {
            size_t co, cl;
            chunk_range(len[rseg], elems, j, &co, &cl);
            st = coll_recv(comm, prev, COLL_STEP(phase0 + s, j), t + co * es, cl * es,
                           &rreq[s & 1][j]);
        }
        for (size_t j = 0; j < rch && st == FLX_OK; j++) {
            size_t co, cl;
            char *dst;
            chunk_range(len[rseg], elems, j, &co, &cl);
            st = coll_wait(comm, &rreq[s & 1][j]);
            if (st != FLX_OK)
                break;
            dst = base + (off[rseg] + co) * es;
            flx_reduce(dst, t + co * es, cl, dtype, op);
            if (s + 1 < n - 1)
                st = coll_send(comm, next, COLL_STEP(phase0 + s + 1, j), dst, cl * es,
                               &sreq[(size_t)(s + 1) * nch + j]);
        }
    }
    /* every send must be out before the caller overwrites the segments */
    for (int s = 0; s < n - 1 && st == FLX_OK; s++) {
        int sseg = topo_mod(r - 1 - s, n);
        st = coll_waitall(comm, &sreq[(size_t)s * nch], seg_chunks(len[sseg], elems));
    }
    return st;
}

flx_status_t coll_ring_allgather(flx_comm_h comm, void *buf, const size_t *off,
                                 const size_t *len, size_t es, uint32_t phase0)
{
    const int n = comm->size, r = comm->rank;
    const int next = topo_ring_next(r, n), prev = topo_ring_prev(r, n);
    size_t maxlen = 0, elems, nch;
    char *base = buf;
    tl_req_t *rreq, *sreq;
    flx_status_t st = FLX_OK;

    for (int i = 0; i < n; i++)
        maxlen = FLX_MAX(maxlen, len[i]);
    if (maxlen == 0)
        return FLX_OK;
    elems = coll_chunk_elems(comm, es, maxlen);
    nch = seg_chunks(maxlen, elems);
    rreq = coll_scratch(comm, 2 * (size_t)(n - 1) * nch * sizeof(tl_req_t));
    if (rreq == NULL)
        return FLX_ERR_NO_MEMORY;
    sreq = rreq + (size_t)(n - 1) * nch;

    /* every receive lands in its final place: post them all up front */
    for (int s = 0; s < n - 1 && st == FLX_OK; s++) {
        int rseg = topo_mod(r - s - 1, n);
        for (size_t j = 0; j < seg_chunks(len[rseg], elems) && st == FLX_OK; j++) {
            size_t co, cl;
            chunk_range(len[rseg], elems, j, &co, &cl);
            st = coll_recv(comm, prev, COLL_STEP(phase0 + s, j), base + (off[rseg] + co) * es,
                           cl * es, &rreq[(size_t)s * nch + j]);
        }
    }
    for (size_t j = 0; j < seg_chunks(len[r], elems) && st == FLX_OK; j++) {
        size_t co, cl;
        chunk_range(len[r], elems, j, &co, &cl);
        st = coll_send(comm, next, COLL_STEP(phase0, j), base + (off[r] + co) * es, cl * es,
                       &sreq[j]);
    }
    for (int s = 0; s < n - 1 && st == FLX_OK; s++) {
        int rseg = topo_mod(r - s - 1, n);
        for (size_t j = 0; j < seg_chunks(len[rseg], elems) && st == FLX_OK; j++) {
            size_t co, cl;
            chunk_range(len[rseg], elems, j, &co, &cl);
            st = coll_wait(comm, &rreq[(size_t)s * nch + j]);
            if (st == FLX_OK && s + 1 < n - 1)
                st = coll_send(comm, next, COLL_STEP(phase0 + s + 1, j),
                               base + (off[rseg] + co) * es, cl * es,
                               &sreq[(size_t)(s + 1) * nch + j]);
        }
    }
    for (int s = 0; s < n - 1 && st == FLX_OK; s++) {
        int sseg = topo_mod(r - s, n);
        st = coll_waitall(comm, &sreq[(size_t)s * nch], seg_chunks(len[sseg], elems));
    }
    return st;
}

/* segment table of an allreduce: N balanced segments of count */
static flx_status_t ring_segments(flx_comm_h comm, size_t count, size_t **off_p,
                                  size_t **len_p)
{
    size_t *off = malloc(2 * (size_t)comm->size * sizeof(size_t));

    if (off == NULL)
        return FLX_ERR_NO_MEMORY;
    for (int i = 0; i < comm->size; i++)
        topo_segment(count, comm->size, i, &off[i], &off[comm->size + i]);
    *off_p = off;
    *len_p = off + comm->size;
    return FLX_OK;
}

flx_status_t coll_allreduce_ring(flx_comm_h comm, void *buf, size_t count,
                                 flx_dtype_t dtype, flx_op_t op)
{
    const int n = comm->size;
    const size_t es = flx_dtype_size(dtype);
    size_t *off, *len;
    flx_status_t st;

    st = ring_segments(comm, count, &off, &len);
    if (st != FLX_OK)
        return st;
    st = coll_ring_reduce_scatter(comm, buf, off, len, dtype, op, 0);
    if (st == FLX_OK) {
        flx_reduce_finish((char *)buf + off[comm->rank] * es, len[comm->rank], dtype, op, n);
        st = coll_ring_allgather(comm, buf, off, len, es, (uint32_t)n);
    }
    free(off);
    return st;
}

flx_status_t coll_allgather_ring(flx_comm_h comm, void *recvbuf, size_t bytes_per_rank)
{
    size_t *off, *len;
    flx_status_t st;

    st = ring_segments(comm, (size_t)comm->size * bytes_per_rank, &off, &len);
    if (st != FLX_OK)
        return st;
    for (int i = 0; i < comm->size; i++) { /* block i belongs to rank i */
        off[i] = (size_t)i * bytes_per_rank;
        len[i] = bytes_per_rank;
    }
    st = coll_ring_allgather(comm, recvbuf, off, len, 1, 0);
    free(off);
    return st;
}
