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
 * The allreduce runs the two as one pipeline (as NCCL's ring does): the
 * allgather's receives are posted first, and each chunk of segment r goes
 * out as the allgather's step 0 as soon as its last reduction is done,
 * instead of after the whole reduce-scatter.
 *
 * Out of place, the input is never copied to the output first: step 0
 * sends from the input, and each reduce-scatter chunk is received straight
 * into its place in the output and reduced there with the input's (the
 * ops are commutative, so the bits are those of the in-place order).  Every
 * output segment is then written: segment r by its last reduction, the
 * others by the allgather.  That saves a pass over S (2 ranks, 16 MiB:
 * in place took 0.80x the time of out of place with the copy).
 *
 * The out-of-place allgather sends our block from the input too, and copies
 * each chunk of it into place right after posting that chunk's send (which
 * has just read it into cache), with a progress round that does not wait
 * between copies so the sockets keep moving (without it the 2-rank 32 MiB
 * allgather lost about half the gain); a block larger than the core's L2
 * cache is copied with streaming stores, which skip reading the
 * destination in.  Copying the whole block first, then sending from the
 * output, cost that allgather on loopback 1.2x the time (30 paired rounds).
 */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

/* The in-place reduce-scatter receives into RS_WINDOW step buffers (fewer
 * with fewer steps), each step's receives posted as soon as its buffer is
 * free, RS_WINDOW - 1 steps ahead of the step being reduced (out of place
 * every step's receives go up front, straight into the output).  With only
 * two and the next step posted after the last one's reductions, the
 * previous rank's next-step chunks came in before their receives and, with
 * the allgather's receives from that rank already posted, could not stay
 * in the socket: tcp read each into a fresh buffer (4 ranks, 4 MiB: 56
 * thousand page faults in 110 calls against the 8 MiB ring allgather's 14
 * thousand, and 13.5 ms against its 6.5 for the same bytes). */
#define RS_WINDOW 4

typedef struct {
    size_t elems;             /* elements per chunk                          */
    size_t nch;               /* chunks of the largest segment               */
    int nbuf;                 /* in place: step buffers (0 out of place)     */
    char *own;                /* reduce-scatter out of place: where segment r
                                 is received and reduced (NULL: in base)     */
    tl_req_t *rs_rreq;        /* reduce-scatter: receives, (n-1) steps of nch */
    tl_req_t *rs_sreq;        /* ... sends, (n-1) steps of nch               */
    char *tmp;                /* ... nbuf step buffers of the largest segment */
    size_t tmp_len;           /* ... bytes of one                            */
    tl_req_t *ag_rreq;        /* allgather: receives, (n-1) steps of nch     */
    tl_req_t *ag_sreq;        /* ... sends                                   */
} ring_ws_t;

static size_t seg_chunks(size_t len, size_t elems) { return FLX_DIV_ROUND_UP(len, elems); }

static void chunk_range(size_t seg_len, size_t elems, size_t j, size_t *off_p, size_t *len_p)
{
    *off_p = j * elems;
    *len_p = FLX_MIN(elems, seg_len - *off_p);
}

/* Chunking and scratch for a reduce-scatter (rs: 1 with receive buffers,
 * 2 without, for one that receives into the output), an allgather (ag) or
 * both; w->nch is 0 when there is nothing to move (every segment empty). */
static flx_status_t ring_ws(flx_comm_h comm, const size_t *len, size_t es, int rs, int ag,
                            ring_ws_t *w)
{
    const size_t n = (size_t)comm->size;
    size_t maxlen = 0, nreq;
    tl_req_t *req;

    memset(w, 0, sizeof(*w));
    for (size_t i = 0; i < n; i++)
        maxlen = FLX_MAX(maxlen, len[i]);
    if (maxlen == 0)
        return FLX_OK;
    w->elems = coll_chunk_elems(comm, es, maxlen);
    w->nch = seg_chunks(maxlen, w->elems);
    /* requests first (aligned), then the in-place reduce-scatter's step buffers */
    w->nbuf = rs == 1 ? (int)FLX_MIN(n - 1, (size_t)RS_WINDOW) : 0;
    w->tmp_len = maxlen * es;
    nreq = (rs ? 2 * (n - 1) * w->nch : 0) + (ag ? 2 * (n - 1) * w->nch : 0);
    req = coll_scratch(comm, nreq * sizeof(tl_req_t) + (size_t)w->nbuf * w->tmp_len);
    if (req == NULL)
        return FLX_ERR_NO_MEMORY;
    if (rs) {
        w->rs_rreq = req;
        w->rs_sreq = req + (n - 1) * w->nch;
        req += 2 * (n - 1) * w->nch;
    }
    if (ag) {
        w->ag_rreq = req;
        w->ag_sreq = req + (n - 1) * w->nch;
        req += 2 * (n - 1) * w->nch;
    }
    if (rs == 1)
        w->tmp = (char *)req;
    return FLX_OK;
}

/* allgather, step 0: chunk j of our own segment r goes to the next rank */
static flx_status_t ag_send_own(flx_comm_h comm, char *base, const size_t *off, const size_t *len,
                                size_t es, uint32_t phase0, const ring_ws_t *w, size_t j,
                                const char *own)
{
    const int r = comm->rank;
    size_t co, cl;

    chunk_range(len[r], w->elems, j, &co, &cl);
    return coll_send(comm, topo_ring_next(r, comm->size), COLL_STEP(phase0, j),
                     own ? own + co * es : base + (off[r] + co) * es, cl * es, &w->ag_sreq[j]);
}

/* The allgather's receives, step s = 0..N-2 into segment r-s-1.  post:
 * post them all (each lands in its final place, so all go up front; safe
 * before the reduce-scatter is over, because a segment's final value comes
 * back only after this rank's part of it has gone out).  Else wait for
 * each and forward it as step s+1. */
static flx_status_t ag_recvs(flx_comm_h comm, char *base, const size_t *off, const size_t *len,
                             size_t es, uint32_t phase0, const ring_ws_t *w, int post)
{
    const int n = comm->size, r = comm->rank;
    const int next = topo_ring_next(r, n), prev = topo_ring_prev(r, n);
    flx_status_t st = FLX_OK;

    for (int s = 0; s < n - 1 && st == FLX_OK; s++) {
        int rseg = topo_mod(r - s - 1, n);
        for (size_t j = 0; j < seg_chunks(len[rseg], w->elems) && st == FLX_OK; j++) {
            tl_req_t *rq = &w->ag_rreq[(size_t)s * w->nch + j];
            size_t co, cl;
            char *p;
            chunk_range(len[rseg], w->elems, j, &co, &cl);
            p = base + (off[rseg] + co) * es;
            if (post)
                st = coll_recv(comm, prev, COLL_STEP(phase0 + s, j), p, cl * es, rq);
            else if ((st = coll_wait(comm, rq)) == FLX_OK && s + 1 < n - 1)
                st = coll_send(comm, next, COLL_STEP(phase0 + s + 1, j), p, cl * es,
                               &w->ag_sreq[(size_t)(s + 1) * w->nch + j]);
        }
    }
    return st;
}

/* allgather after step 0's sends: forward each chunk as it arrives, then
 * wait until every send is out */
static flx_status_t ag_forward(flx_comm_h comm, char *base, const size_t *off, const size_t *len,
                               size_t es, uint32_t phase0, const ring_ws_t *w)
{
    const int n = comm->size, r = comm->rank;
    flx_status_t st = ag_recvs(comm, base, off, len, es, phase0, w, 0);

    for (int s = 0; s < n - 1 && st == FLX_OK; s++) {
        int sseg = topo_mod(r - s, n);
        st = coll_waitall(comm, &w->ag_sreq[(size_t)s * w->nch], seg_chunks(len[sseg], w->elems));
    }
    return st;
}

/* Where the reduce-scatter reduces segment seg: in base, or our own
 * segment r at w->own when the caller gave one. */
static char *rs_seg(char *base, const size_t *off, size_t es, const ring_ws_t *w, int seg, int r)
{
    return seg == r && w->own ? w->own : base + off[seg] * es;
}

/* Where the reduce-scatter's step s receives: its segment of the output
 * (out of place) or its step buffer. */
static char *rs_dest(char *base, const size_t *off, size_t es, const ring_ws_t *w, int rseg,
                     int s, int r)
{
    return w->nbuf ? w->tmp + (size_t)(s % w->nbuf) * w->tmp_len
                   : rs_seg(base, off, es, w, rseg, r);
}

/* post the reduce-scatter's receives of step s (segment r-2-s) */
static flx_status_t rs_post(flx_comm_h comm, char *base, const size_t *off, const size_t *len,
                            size_t es, uint32_t phase0, const ring_ws_t *w, int s)
{
    const int n = comm->size, rseg = topo_mod(comm->rank - 2 - s, n);
    char *t = rs_dest(base, off, es, w, rseg, s, comm->rank);
    flx_status_t st = FLX_OK;

    for (size_t j = 0; j < seg_chunks(len[rseg], w->elems) && st == FLX_OK; j++) {
        size_t co, cl;
        chunk_range(len[rseg], w->elems, j, &co, &cl);
        st = coll_recv(comm, topo_ring_prev(comm->rank, n), COLL_STEP(phase0 + s, j),
                       t + co * es, cl * es, &w->rs_rreq[(size_t)s * w->nch + j]);
    }
    return st;
}

/* The reduce-scatter.  ag_phase0 (fused allreduce; 0 = plain): each chunk
 * of our own segment is finished (FLX_AVG's division) and sent as the
 * allgather's step 0 the moment its last reduction is done, so the
 * allgather starts while the reduce-scatter's last chunks still move.
 * src: the input when it is not base (out of place: chunks are received
 * into base and reduced there with src's; w without receive buffers), else
 * NULL. */
static flx_status_t ring_rs(flx_comm_h comm, char *base, const char *src, const size_t *off,
                            const size_t *len, flx_dtype_t dtype, flx_op_t op, uint32_t phase0,
                            const ring_ws_t *w, uint32_t ag_phase0)
{
    const int n = comm->size, r = comm->rank;
    const int next = topo_ring_next(r, n);
    const size_t es = flx_dtype_size(dtype), elems = w->elems, nch = w->nch;
    const int ahead = w->nbuf ? w->nbuf : n - 1; /* steps posted at once */
    flx_status_t st = FLX_OK;

    /* step 0 sends our own segment r-1 */
    {
        int sseg = topo_mod(r - 1, n);
        for (size_t j = 0; j < seg_chunks(len[sseg], elems) && st == FLX_OK; j++) {
            size_t co, cl;
            chunk_range(len[sseg], elems, j, &co, &cl);
            st = coll_send(comm, next, COLL_STEP(phase0, j),
                           (src ? src : base) + (off[sseg] + co) * es, cl * es, &w->rs_sreq[j]);
        }
    }
    for (int s = 0; s < ahead && st == FLX_OK; s++)
        st = rs_post(comm, base, off, len, es, phase0, w, s);
    for (int s = 0; s < n - 1 && st == FLX_OK; s++) {
        int rseg = topo_mod(r - 2 - s, n);
        size_t rch = seg_chunks(len[rseg], elems);
        char *t = rs_dest(base, off, es, w, rseg, s, r);
        char *seg = rs_seg(base, off, es, w, rseg, r);

        /* step s - 1 is done: its buffer takes step s + ahead - 1 */
        if (s > 0 && s + ahead - 1 < n - 1)
            st = rs_post(comm, base, off, len, es, phase0, w, s + ahead - 1);
        for (size_t j = 0; j < rch && st == FLX_OK; j++) {
            size_t co, cl;
            char *dst;
            chunk_range(len[rseg], elems, j, &co, &cl);
            st = coll_wait(comm, &w->rs_rreq[(size_t)s * nch + j]);
            if (st != FLX_OK)
                break;
            dst = seg + co * es;
            flx_reduce(dst, src ? src + (off[rseg] + co) * es : t + co * es, cl, dtype, op);
            if (s + 1 < n - 1) {
                st = coll_send(comm, next, COLL_STEP(phase0 + s + 1, j), dst, cl * es,
                               &w->rs_sreq[(size_t)(s + 1) * nch + j]);
            } else if (ag_phase0) { /* rseg == r: this chunk is final */
                flx_reduce_finish(dst, cl, dtype, op, n);
                st = ag_send_own(comm, base, off, len, es, ag_phase0, w, j, NULL);
            }
        }
    }
    return st;
}

/* every reduce-scatter send must be out before the caller overwrites the
 * segments */
static flx_status_t rs_wait_sends(flx_comm_h comm, const size_t *len, const ring_ws_t *w)
{
    const int n = comm->size, r = comm->rank;
    flx_status_t st = FLX_OK;

    for (int s = 0; s < n - 1 && st == FLX_OK; s++) {
        int sseg = topo_mod(r - 1 - s, n);
        st = coll_waitall(comm, &w->rs_sreq[(size_t)s * w->nch], seg_chunks(len[sseg], w->elems));
    }
    return st;
}

flx_status_t coll_ring_reduce_scatter(flx_comm_h comm, const void *src, void *buf, void *own,
                                      const size_t *off, const size_t *len, flx_dtype_t dtype,
                                      flx_op_t op, uint32_t phase0)
{
    ring_ws_t w;
    flx_status_t st = ring_ws(comm, len, flx_dtype_size(dtype), src ? 2 : 1, 0, &w);

    if (st != FLX_OK || w.nch == 0)
        return st;
    w.own = src ? own : NULL;
    st = ring_rs(comm, buf, src, off, len, dtype, op, phase0, &w, 0);
    return st == FLX_OK ? rs_wait_sends(comm, len, &w) : st;
}

flx_status_t coll_ring_allgather(flx_comm_h comm, const void *own, void *buf, const size_t *off,
                                 const size_t *len, size_t es, uint32_t phase0)
{
    const int r = comm->rank;
    ring_ws_t w;
    flx_status_t st = ring_ws(comm, len, es, 0, 1, &w);
    size_t nch;

    if (st != FLX_OK || w.nch == 0)
        return st;
    nch = seg_chunks(len[r], w.elems);
    st = ag_recvs(comm, buf, off, len, es, phase0, &w, 1);
    for (size_t j = 0; j < nch && st == FLX_OK; j++) {
        size_t co, cl;
        st = ag_send_own(comm, buf, off, len, es, phase0, &w, j, own);
        if (st != FLX_OK || own == NULL)
            continue;
        chunk_range(len[r], w.elems, j, &co, &cl);
        st = coll_copy_behind(comm, (char *)buf + (off[r] + co) * es, (const char *)own + co * es,
                              cl * es, len[r] * es, j + 1 == nch);
    }
    if (st == FLX_OK)
        st = ag_forward(comm, buf, off, len, es, phase0, &w);
    return st;
}

/* segment table of an allreduce: N balanced segments of count */
static flx_status_t ring_segments(flx_comm_h comm, size_t count, size_t **off_p,
                                  size_t **len_p)
{
    size_t *off = malloc(2 * (size_t)comm->size * sizeof(size_t));

    if (off == NULL) {
        flx_error(COLL, comm->rank, "out of memory for the segment table of %d ranks",
                  comm->size);
        return FLX_ERR_NO_MEMORY;
    }
    for (int i = 0; i < comm->size; i++)
        topo_segment(count, comm->size, i, &off[i], &off[comm->size + i]);
    *off_p = off;
    *len_p = off + comm->size;
    return FLX_OK;
}

flx_status_t coll_allreduce_ring(flx_comm_h comm, const void *src, void *buf, size_t count,
                                 flx_dtype_t dtype, flx_op_t op)
{
    const int n = comm->size;
    const size_t es = flx_dtype_size(dtype);
    const char *in = src != buf ? src : NULL;
    size_t *off = NULL, *len = NULL;
    ring_ws_t w;
    flx_status_t st;

    if (n == 1 || count == 0) {
        if (in && count)
            memcpy(buf, in, count * es);
        flx_reduce_finish(buf, count, dtype, op, n);
        return FLX_OK;
    }
    st = ring_segments(comm, count, &off, &len);
    if (st != FLX_OK)
        return st;
    /* one pipeline: the allgather's receives are posted first, and each
     * chunk of our segment goes back out as soon as it is reduced */
    st = ring_ws(comm, len, es, in ? 2 : 1, 1, &w);
    if (st == FLX_OK && w.nch > 0) {
        st = ag_recvs(comm, buf, off, len, es, (uint32_t)n, &w, 1);
        if (st == FLX_OK)
            st = ring_rs(comm, buf, in, off, len, dtype, op, 0, &w, (uint32_t)n);
        if (st == FLX_OK)
            st = ag_forward(comm, buf, off, len, es, (uint32_t)n, &w);
        if (st == FLX_OK)
            st = rs_wait_sends(comm, len, &w);
    }
    free(off);
    return st;
}

flx_status_t coll_allgather_ring(flx_comm_h comm, const void *sendbuf, void *recvbuf,
                                 size_t bytes_per_rank)
{
    size_t *off = NULL, *len = NULL;
    flx_status_t st;

    st = ring_segments(comm, (size_t)comm->size * bytes_per_rank, &off, &len);
    if (st != FLX_OK)
        return st;
    for (int i = 0; i < comm->size; i++) { /* block i belongs to rank i */
        off[i] = (size_t)i * bytes_per_rank;
        len[i] = bytes_per_rank;
    }
    st = coll_ring_allgather(comm, sendbuf, recvbuf, off, len, 1, 0);
    free(off);
    return st;
}
