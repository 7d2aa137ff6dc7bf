/* prim.c -- send / recv / wait primitives over the transport's ops table,
 * with bounded waiting: a wait that sees no completion for FLX_TIMEOUT
 * fails the communicator with FLX_ERR_TIMED_OUT (one log line), and a wait
 * on an aborted communicator returns FLX_ERR_ABORTED within a progress
 * slice. */
#include "collectives/coll.h"
#include "collectives/comm.h"
#include "common/copy.h"
#include "common/log.h"
#include "common/stall.h"
#include "common/time.h"
#include "common/util.h"

#include <string.h>

void coll_begin(flx_comm_h comm, int kind, flx_algo_t algo, flx_dtype_t dtype,
                unsigned op, size_t count, const char *name)
{
    comm->tag.seq = comm->seq++;
    comm->tag.step = 0;
    comm->tag.kind = (uint8_t)((kind << 3) | (int)algo);
    comm->tag.dtype = (uint8_t)dtype;
    comm->tag.op = (uint16_t)op;
    comm->tag.count = count;
    comm->coll_name = name;
    flx_trace(COLL, comm->rank, "%s #%u: %s, count %zu", name, comm->tag.seq, flx_algo_name(algo),
              count);
}

void coll_end(flx_comm_h comm) { comm->coll_name = NULL; }

/* Every failure a primitive returns fails the communicator at once (the
 * caller's comm_leave would, later): the transport then finishes and
 * drops every request still posted while the algorithm's frame, which
 * holds them, is alive -- a request on the stack of a function that
 * returned must never stay in a transport queue. */
static flx_status_t prim_failed(flx_comm_h comm, flx_status_t st)
{
    if (st != FLX_OK)
        comm_record_error(comm, st);
    return st;
}

flx_status_t coll_send(flx_comm_h comm, int peer, uint32_t step, const void *buf,
                       size_t len, tl_req_t *req)
{
    tl_tag_t tag = comm->tag;

    tag.step = step;
    return prim_failed(comm, comm->tl->isend(comm->tlctx, peer, &tag, buf, len, req));
}

flx_status_t coll_recv(flx_comm_h comm, int peer, uint32_t step, void *buf, size_t len,
                       tl_req_t *req)
{
    tl_tag_t tag = comm->tag;

    tag.step = step;
    return prim_failed(comm, comm->tl->irecv(comm->tlctx, peer, &tag, buf, len, req));
}

/* Longest sleep of one progress round: bounds how long flx_comm_abort
 * from another thread takes to reach a waiting collective. */
#define COLL_PROGRESS_SLICE_S 0.1

uint64_t coll_stalled_us(flx_comm_h comm)
{
    return __atomic_load_n(&comm->stalled_us, __ATOMIC_RELAXED);
}

void coll_clock_start(coll_clock_t *clk)
{
    clk->since = clk->last = flx_time_coarse();
    clk->seen = 0;
}

flx_status_t coll_progress(flx_comm_h comm, tl_req_t *waiting, coll_clock_t *clk)
{
    flx_status_t st;
    double now;

    if (comm_aborted(comm))
        return prim_failed(comm, FLX_ERR_ABORTED); /* and the peers are told */
    st = comm->tl->progress(comm->tlctx, COLL_PROGRESS_SLICE_S);
    if (st != FLX_OK)
        return prim_failed(comm, comm_aborted(comm) ? FLX_ERR_ABORTED : st);
    now = flx_time_coarse();
    if (now - clk->last > FLX_STALL_S) { /* this process was stopped: see coll_clock_t */
        clk->since += now - clk->last;
        __atomic_fetch_add(&comm->stalled_us, (uint64_t)((now - clk->last) * 1e6),
                           __ATOMIC_RELAXED);
    }
    clk->last = now;
    if (waiting && waiting->done_bytes != clk->seen) { /* bytes moved: not stuck */
        clk->seen = waiting->done_bytes;
        clk->since = now;
    }
    if (waiting && !waiting->complete && now - clk->since > comm->cfg.timeout_s) {
        flx_error(COLL, comm->rank,
                  "%s #%u timed out after %.1f s waiting to %s rank %d (step %u)",
                  comm->coll_name, comm->tag.seq, comm->cfg.timeout_s,
                  waiting->is_send ? "send to" : "receive from", waiting->peer,
                  waiting->tag.step);
        comm->tl->fail(comm->tlctx, FLX_ERR_TIMED_OUT, comm->tag.seq, "timeout");
        return prim_failed(comm, FLX_ERR_TIMED_OUT);
    }
    return FLX_OK;
}

flx_status_t coll_progress_now(flx_comm_h comm)
{
    flx_status_t st;

    if (comm_aborted(comm))
        return prim_failed(comm, FLX_ERR_ABORTED);
    st = comm->tl->progress(comm->tlctx, 0);
    return st == FLX_OK ? FLX_OK : prim_failed(comm, comm_aborted(comm) ? FLX_ERR_ABORTED : st);
}

flx_status_t coll_copy_behind(flx_comm_h comm, void *dst, const void *src, size_t n,
                              size_t block, int last)
{
    if (block > comm->stream_min)
        flx_copy_stream(dst, src, n);
    else
        memcpy(dst, src, n);
    return last ? FLX_OK : coll_progress_now(comm);
}

flx_status_t coll_wait(flx_comm_h comm, tl_req_t *req)
{
    coll_clock_t clk;

    coll_clock_start(&clk);
    while (!req->complete) {
        flx_status_t st = coll_progress(comm, req, &clk);
        if (st != FLX_OK)
            return st;
    }
    return prim_failed(comm, req->status);
}

flx_status_t coll_waitall(flx_comm_h comm, tl_req_t *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        flx_status_t st = coll_wait(comm, &reqs[i]);
        if (st != FLX_OK)
            return st;
    }
    return FLX_OK;
}

flx_status_t coll_sendrecv(flx_comm_h comm, int dst, const void *sbuf, size_t slen,
                           int src, void *rbuf, size_t rlen, uint32_t step)
{
    tl_req_t reqs[2];
    flx_status_t st;

    st = coll_recv(comm, src, step, rbuf, rlen, &reqs[0]);
    if (st != FLX_OK)
        return st;
    st = coll_send(comm, dst, step, sbuf, slen, &reqs[1]);
    if (st != FLX_OK)
        return st;
    return coll_waitall(comm, reqs, 2);
}

size_t coll_chunk_elems(flx_comm_h comm, size_t esize, size_t count)
{
    size_t elems = FLX_MAX(comm->cfg.chunk_size / esize, (size_t)1);

    /* keep the chunk index inside its 20 bits */
    while (count / elems >= COLL_MAX_CHUNKS)
        elems *= 2;
    return elems;
}
