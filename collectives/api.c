/* api.c -- the public collective calls: argument checks, algorithm choice,
 * ordering with the non-blocking queue, sticky errors. */
#include "collectives/coll.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/time.h"

#include <string.h>

#include <stdarg.h>

/* ok: returns 1; not ok: logs the message once and returns 0 */
static int arg_ok(int ok, flx_comm_h comm, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int arg_ok(int ok, flx_comm_h comm, const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    if (ok)
        return 1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    flx_error(COLL, comm ? comm->rank : -1, "%s", msg);
    return 0;
}

static flx_status_t check_common(flx_comm_h comm, const char *fn, size_t count,
                                 flx_dtype_t dtype, size_t nblocks)
{
    size_t es;

    if (!arg_ok(comm != NULL, comm, "%s: comm is NULL", fn))
        return FLX_ERR_INVALID_ARG;
    if (!arg_ok(flx_dtype_valid(dtype), comm, "%s: invalid dtype %d", fn, (int)dtype))
        return FLX_ERR_INVALID_ARG;
    es = flx_dtype_size(dtype);
    if (!arg_ok(count <= ((size_t)1 << 50) / es / nblocks, comm,
              "%s: count %zu is absurd (over 1 PiB)", fn, count))
        return FLX_ERR_INVALID_ARG;
    return FLX_OK;
}

static int ranges_overlap(const void *a, size_t alen, const void *b, size_t blen)
{
    const char *x = a, *y = b;
    return x < y + blen && y < x + alen;
}

flx_algo_t comm_pick_allreduce(flx_comm_h comm, size_t count, flx_dtype_t dtype,
                               flx_algo_t algo, int run)
{
    const double bytes = (double)count * flx_dtype_size(dtype);
    const double chunk = (double)comm->cfg.chunk_size;
    unsigned long call = 0; /* 0 never explores */
    flx_algo_t best, before = comm->live.explored; /* the last run's */

    if (run)
        comm->live.explored = FLX_ALGO_AUTO;
    if (algo == FLX_ALGO_AUTO)
        algo = (flx_algo_t)comm->cfg.algo;
    if (algo != FLX_ALGO_AUTO)
        return algo;
    /* a choice for a call that runs counts, the same on every rank (they
     * make the same calls), and explores only while the model learns */
    if (run && comm->cfg.model_refresh > 0)
        call = comm->live.autos++;
    algo = model_pick_allreduce_explore(comm->size, bytes, comm->ar, chunk, call,
                                        comm->live.ran_ar);
    /* an exploration (only the last MODEL_LOOK of every MODEL_EXPLORE can
     * be one; MODEL_EXPLORE_FAR_EVERY is a multiple): its runs are a look
     * (model.c), started by the first */
    if (call % MODEL_EXPLORE >= MODEL_EXPLORE - MODEL_LOOK) {
        best = model_pick_allreduce_explore(comm->size, bytes, comm->ar, chunk, 0, NULL);
        if (algo != best) {
            comm->live.explored = algo;
            comm->live.explore_first = before != algo;
        }
    }
    return algo;
}

flx_algo_t comm_pick_allgather(flx_comm_h comm, double bpr, flx_algo_t algo, int run)
{
    unsigned long call = 0;

    if (algo == FLX_ALGO_AUTO)
        algo = (flx_algo_t)comm->cfg.algo;
    if (algo == FLX_ALGO_RING || algo == FLX_ALGO_RD)
        return algo;
    if (run && comm->cfg.model_refresh > 0)
        call = comm->live.ag_autos++;
    return model_pick_allgather_explore(comm->size, bpr, comm->ag, call, comm->live.ran_ag);
}

flx_algo_t flx_allgather_algo(flx_comm_h comm, size_t count, flx_dtype_t dtype)
{
    flx_algo_t algo;

    if (comm == NULL || !flx_dtype_valid(dtype))
        return FLX_ALGO_AUTO;
    pthread_mutex_lock(&comm->lock);
    algo = comm_pick_allgather(comm, (double)count * flx_dtype_size(dtype), FLX_ALGO_AUTO, 0);
    pthread_mutex_unlock(&comm->lock);
    return algo;
}

flx_algo_t flx_allreduce_algo(flx_comm_h comm, size_t count, flx_dtype_t dtype)
{
    flx_algo_t algo = FLX_ALGO_AUTO;

    if (comm == NULL || !flx_dtype_valid(dtype))
        return FLX_ALGO_AUTO;
    pthread_mutex_lock(&comm->lock); /* the live model may change under exec */
    algo = comm_pick_allreduce(comm, count, dtype, FLX_ALGO_AUTO, 0);
    pthread_mutex_unlock(&comm->lock);
    return algo;
}

void comm_wait_idle(flx_comm_h comm)
{
    pthread_mutex_lock(&comm->lock);
    while (comm->pending > 0)
        pthread_cond_wait(&comm->cond, &comm->lock);
    pthread_mutex_unlock(&comm->lock);
}

/* Wait until earlier non-blocking requests have run, then take the
 * execution lock.  Returns the communicator's sticky error, if any. */
flx_status_t comm_enter(flx_comm_h comm)
{
    comm_wait_idle(comm);
    pthread_mutex_lock(&comm->exec);
    comm_sync_abort(comm);
    if (comm->err != FLX_OK) { /* after an abort: aborted, whatever failed first */
        flx_status_t st = comm_aborted(comm) ? FLX_ERR_ABORTED : comm->err;
        comm_exec_unlock(comm);
        return st;
    }
    return FLX_OK;
}

void comm_record_error(flx_comm_h comm, flx_status_t st)
{
    int none = FLX_OK;

    if (st == FLX_OK || comm->err != FLX_OK)
        return;
    comm->err = st;
    __atomic_compare_exchange_n(&comm->first_err, &none, (int)st, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    /* the communicator is broken: tell every peer, once, from which
     * collective on: the running one, or between collectives (an abort, a
     * call that failed before its collective began) the next one.  The
     * earlier ones completed here, and peers still in one may finish it. */
    comm->tl->fail(comm->tlctx, st, comm->coll_name ? comm->tag.seq : comm->seq,
                   comm->coll_name ? comm->coll_name : "between collectives");
}

void comm_sync_abort(flx_comm_h comm)
{
    if (comm_aborted(comm))
        comm_record_error(comm, FLX_ERR_ABORTED);
}

/* flx_comm_abort raises its flag, then tries the lock; here the lock is
 * released, then the flag read, each pair ordered by a full fence: either
 * its try takes the lock or this read sees the flag (one of the threads
 * that held the lock meanwhile tells the peers).  Telling them twice is
 * harmless: the first failure sticks. */
void comm_exec_unlock(flx_comm_h comm)
{
    pthread_mutex_unlock(&comm->exec);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (comm_aborted(comm) && pthread_mutex_trylock(&comm->exec) == 0) {
        comm_sync_abort(comm);
        pthread_mutex_unlock(&comm->exec);
    }
}

flx_status_t coll_agree_range(flx_comm_h comm, int64_t *v, size_t n)
{
    flx_status_t st;

    for (size_t i = 0; i < n; i++)
        v[n + i] = ~v[i];
    st = flx_allreduce(comm, v, v, 2 * n, FLX_INT64, FLX_MAX, FLX_ALGO_AUTO);
    for (size_t i = 0; st == FLX_OK && i < n; i++)
        v[n + i] = ~v[n + i];
    return st;
}

/* Any thread, any time: raise the flag that every wait checks, and when no
 * collective runs, fail the transport here (peers hear of it at once; when
 * one runs, its thread does as it releases the execution lock). */
flx_status_t flx_comm_abort(flx_comm_h comm)
{
    int none = FLX_OK;

    if (!arg_ok(comm != NULL, comm, "flx_comm_abort: comm is NULL"))
        return FLX_ERR_INVALID_ARG;
    if (__atomic_exchange_n(&comm->aborted, 1, __ATOMIC_SEQ_CST))
        return FLX_OK; /* already aborted */
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* see comm_exec_unlock */
    __atomic_compare_exchange_n(&comm->first_err, &none, (int)FLX_ERR_ABORTED, 0,
                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    flx_warn(COLL, comm->rank, "communicator aborted by the application; pending and later "
             "calls return FLX_ERR_ABORTED");
    if (pthread_mutex_trylock(&comm->exec) == 0) {
        comm_sync_abort(comm);
        pthread_mutex_unlock(&comm->exec);
    }
    /* wake threads waiting for requests (they re-check) */
    pthread_mutex_lock(&comm->lock);
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
    return FLX_OK;
}

flx_status_t flx_comm_get_async_error(flx_comm_h comm)
{
    if (!arg_ok(comm != NULL, comm, "flx_comm_get_async_error: comm is NULL"))
        return FLX_ERR_INVALID_ARG;
    return (flx_status_t)__atomic_load_n(&comm->first_err, __ATOMIC_ACQUIRE);
}

flx_status_t comm_leave(flx_comm_h comm, flx_status_t st)
{
    comm_record_error(comm, st);
    coll_end(comm);
    /* an abort that came while the collective finished: the peers hear of
     * it now, not at this rank's next call (this call's result stands) */
    comm_sync_abort(comm);
    comm_exec_unlock(comm);
    return st;
}

flx_status_t coll_allreduce_by(flx_comm_h comm, flx_algo_t algo, const void *src, void *buf,
                               size_t count, flx_dtype_t dtype, flx_op_t op)
{
    switch (algo) {
    case FLX_ALGO_TREE: return coll_allreduce_tree(comm, src, buf, count, dtype, op);
    case FLX_ALGO_RD: return coll_allreduce_rd(comm, src, buf, count, dtype, op);
    case FLX_ALGO_HD: return coll_allreduce_hd(comm, src, buf, count, dtype, op);
    default: return coll_allreduce_ring(comm, src, buf, count, dtype, op);
    }
}

/* The body of an allreduce; the caller holds the execution lock. */
flx_status_t comm_run_allreduce(flx_comm_h comm, const void *sendbuf, void *recvbuf,
                                size_t count, flx_dtype_t dtype, flx_op_t op,
                                flx_algo_t algo)
{
    const size_t bytes = count * flx_dtype_size(dtype);
    flx_status_t st;
    double t0;

    algo = comm_pick_allreduce(comm, count, dtype, algo, 1);
    /* every algorithm reads sendbuf itself (one rank: copies it) instead of
     * a copy in recvbuf (the same bits: the ops are commutative) */
    coll_begin(comm, COLL_ALLREDUCE, algo, dtype, op, count, "allreduce");
    if (count == 0) /* nothing to move, but the empty messages carry the count */
        return comm->size == 1 ? FLX_OK : coll_barrier_dissemination(comm);
    t0 = flx_time_now();
    st = coll_allreduce_by(comm, algo, sendbuf, recvbuf, count, dtype, op);
    if (st != FLX_OK)
        return st;
    return model_observe(comm, COLL_ALLREDUCE, algo, (double)bytes, flx_time_now() - t0);
}

flx_status_t comm_run_allgather(flx_comm_h comm, const void *sendbuf, void *recvbuf,
                                size_t count, flx_dtype_t dtype, flx_algo_t algo)
{
    const size_t bpr = count * flx_dtype_size(dtype);
    char *mine = (char *)recvbuf + (size_t)comm->rank * bpr;
    const void *own = sendbuf != mine && bpr ? sendbuf : NULL; /* out of place */
    flx_status_t st;
    double t0 = flx_time_now();

    algo = comm_pick_allgather(comm, (double)bpr, algo, 1);
    /* both algorithms copy our block into place themselves: the ring and
     * recursive doubling chunk by chunk behind its first sends, Bruck in
     * its final rotation */
    if (own && comm->size == 1) {
        memcpy(mine, own, bpr);
        own = NULL;
    }
    coll_begin(comm, COLL_ALLGATHER, algo, dtype, 0, count, "allgather");
    if (comm->size == 1)
        return FLX_OK;
    if (bpr == 0) /* nothing to move, but the empty messages carry the count */
        return coll_barrier_dissemination(comm);
    st = algo == FLX_ALGO_RD ? coll_allgather_rd(comm, own, recvbuf, bpr)
                             : coll_allgather_ring(comm, own, recvbuf, bpr);
    if (st != FLX_OK)
        return st;
    return model_observe(comm, COLL_ALLGATHER, algo, (double)bpr, flx_time_now() - t0);
}

flx_status_t flx_allreduce_check(const char *fn, flx_comm_h comm, const void *sendbuf,
                                 void *recvbuf, size_t count, flx_dtype_t dtype, flx_op_t op,
                                 flx_algo_t algo)
{
    flx_status_t st = check_common(comm, fn, count, dtype, 1);
    size_t bytes;

    if (st != FLX_OK)
        return st;
    bytes = count * flx_dtype_size(dtype);
    if (!arg_ok(flx_op_valid(op), comm, "%s: invalid op %d", fn, (int)op))
        return FLX_ERR_INVALID_ARG;
    if (!arg_ok((unsigned)algo < FLX_ALGO_COUNT, comm, "%s: invalid algo %d", fn, (int)algo))
        return FLX_ERR_INVALID_ARG;
    if (!arg_ok(count == 0 || (sendbuf && recvbuf), comm,
              "%s: NULL buffer with count %zu", fn, count))
        return FLX_ERR_INVALID_ARG;
    if (!arg_ok(sendbuf == recvbuf || !ranges_overlap(sendbuf, bytes, recvbuf, bytes), comm,
              "%s: send and receive buffers overlap without being the same", fn))
        return FLX_ERR_INVALID_ARG;
    return FLX_OK;
}

flx_status_t flx_allgather_check(const char *fn, flx_comm_h comm, const void *sendbuf,
                                 void *recvbuf, size_t count, flx_dtype_t dtype, flx_algo_t algo)
{
    flx_status_t st = check_common(comm, fn, count, dtype, comm ? (size_t)comm->size : 1);
    size_t bpr;
    const char *mine;

    if (st != FLX_OK)
        return st;
    bpr = count * flx_dtype_size(dtype);
    mine = (const char *)recvbuf + (size_t)comm->rank * bpr;
    if (!arg_ok((unsigned)algo < FLX_ALGO_COUNT, comm, "%s: invalid algo %d", fn, (int)algo))
        return FLX_ERR_INVALID_ARG;
    if (!arg_ok(count == 0 || (sendbuf && recvbuf), comm,
              "%s: NULL buffer with count %zu", fn, count))
        return FLX_ERR_INVALID_ARG;
    if (!arg_ok(sendbuf == mine ||
                  !ranges_overlap(sendbuf, bpr, recvbuf, bpr * (size_t)comm->size),
              comm, "%s: sendbuf overlaps recvbuf but is not its block %d",
              fn, comm->rank))
        return FLX_ERR_INVALID_ARG;
    return FLX_OK;
}

flx_status_t flx_allreduce(flx_comm_h comm, const void *sendbuf, void *recvbuf, size_t count,
                           flx_dtype_t dtype, flx_op_t op, flx_algo_t algo)
{
    flx_status_t st =
        flx_allreduce_check("flx_allreduce", comm, sendbuf, recvbuf, count, dtype, op, algo);

    if (st != FLX_OK || (st = comm_enter(comm)) != FLX_OK)
        return st;
    return comm_leave(comm, comm_run_allreduce(comm, sendbuf, recvbuf, count, dtype, op, algo));
}

flx_status_t flx_allgather(flx_comm_h comm, const void *sendbuf, void *recvbuf, size_t count,
                           flx_dtype_t dtype, flx_algo_t algo)
{
    flx_status_t st =
        flx_allgather_check("flx_allgather", comm, sendbuf, recvbuf, count, dtype, algo);

    if (st != FLX_OK || (st = comm_enter(comm)) != FLX_OK)
        return st;
    return comm_leave(comm, comm_run_allgather(comm, sendbuf, recvbuf, count, dtype, algo));
}

flx_status_t flx_broadcast(flx_comm_h comm, void *buf, size_t count, flx_dtype_t dtype,
                           int root)
{
    flx_status_t st = check_common(comm, "flx_broadcast", count, dtype, 1);
    size_t bytes;
    int chain;

    if (st != FLX_OK)
        return st;
    if (!arg_ok(root >= 0 && root < comm->size, comm,
              "flx_broadcast: root %d is not a rank of this %d-rank communicator", root,
              comm->size))
        return FLX_ERR_INVALID_ARG;
    if (!arg_ok(count == 0 || buf, comm, "flx_broadcast: NULL buffer with count %zu", count))
        return FLX_ERR_INVALID_ARG;
    if ((st = comm_enter(comm)) != FLX_OK)
        return st;
    bytes = count * flx_dtype_size(dtype);
    chain = model_pick_bcast_chain(comm->size, (double)bytes, comm->model.alpha_s,
                                   comm->model.beta_bytes_per_s, (double)comm->cfg.chunk_size);
    if (comm->cfg.algo == FLX_ALGO_RING)
        chain = 1;
    else if (comm->cfg.algo == FLX_ALGO_TREE || comm->cfg.algo == FLX_ALGO_RD)
        chain = 0;
    if (bytes == 0) /* the binomial's empty messages check the count on every edge */
        chain = 0;
    coll_begin(comm, COLL_BCAST, chain ? FLX_ALGO_RING : FLX_ALGO_TREE, dtype, (unsigned)root,
               count, "broadcast");
    if (comm->size == 1)
        return comm_leave(comm, FLX_OK);
    return comm_leave(comm, chain ? coll_bcast_chain(comm, buf, bytes, root)
                                  : coll_bcast_binomial(comm, buf, bytes, root));
}

/* The reduce-scatter's algorithm: the ring's reduce-scatter, or an
 * allreduce of the whole input (each rank keeps its segment) where the
 * model says that allreduce's best algorithm beats the ring's
 * reduce-scatter, which costs half a ring allreduce: at small sizes on 4
 * or more ranks, where the ring's N-1 dependent steps cost N-1 latencies
 * and recursive doubling log2 N.  Both are costed with one alpha and beta:
 * recursive doubling's fit (step for step, what an exchange between two
 * ranks of this job costs), not the link's ping-pong, which leaves out
 * what ranks sharing cores add to every step (4 ranks on 2 cores: 32 us a
 * step for 16 KiB against the link's 11 us; with the link's the ring kept
 * 16 KiB, 97 us against recursive doubling's 64).  FLX_ALGO ring keeps the
 * ring; tree, rd or hd take that allreduce. */
static flx_algo_t pick_reduce_scatter(flx_comm_h comm, size_t total_bytes)
{
    const double chunk = (double)comm->cfg.chunk_size, bytes = (double)total_bytes;
    const model_ab_t ab = model_allreduce_ab(FLX_ALGO_RD, comm->size, comm->ar);
    const double a = ab.alpha, b = 1.0 / ab.inv_bw;
    flx_algo_t best;

    if (comm->cfg.algo != FLX_ALGO_AUTO)
        return (flx_algo_t)comm->cfg.algo;
    best = model_pick_allreduce(comm->size, bytes, a, b, chunk);
    if (best == FLX_ALGO_RING ||
        model_allreduce_time(best, comm->size, bytes, a, b, chunk) >=
            0.5 * model_allreduce_time(FLX_ALGO_RING, comm->size, bytes, a, b, chunk))
        return FLX_ALGO_RING;
    return best;
}

flx_algo_t flx_reduce_scatter_algo(flx_comm_h comm, size_t recvcount, flx_dtype_t dtype)
{
    flx_algo_t algo;

    if (comm == NULL || !flx_dtype_valid(dtype))
        return FLX_ALGO_AUTO;
    if (comm->size == 1 || recvcount == 0)
        return FLX_ALGO_RING;
    pthread_mutex_lock(&comm->lock); /* the live model may change under exec */
    algo = pick_reduce_scatter(comm, recvcount * flx_dtype_size(dtype) * (size_t)comm->size);
    pthread_mutex_unlock(&comm->lock);
    return algo;
}

/* The reduce-scatter as an allreduce of all (bytes) into out (sendbuf:
 * in place), our segment then moved to the start of recvbuf. */
static flx_status_t reduce_scatter_by_allreduce(flx_comm_h comm, const void *sendbuf, char *out,
                                                void *recvbuf, size_t recvcount, flx_dtype_t dtype,
                                                flx_op_t op, flx_algo_t algo)
{
    const size_t count = recvcount * (size_t)comm->size, bytes = recvcount * flx_dtype_size(dtype);
    flx_status_t st = coll_allreduce_by(comm, algo, sendbuf, out, count, dtype, op);

    if (st == FLX_OK)
        memmove(recvbuf, out + (size_t)comm->rank * bytes, bytes);
    return st;
}

flx_status_t flx_reduce_scatter(flx_comm_h comm, const void *sendbuf, void *recvbuf,
                                size_t recvcount, flx_dtype_t dtype, flx_op_t op)
{
    flx_status_t st = check_common(comm, "flx_reduce_scatter", recvcount, dtype,
                                   comm ? (size_t)comm->size : 1);
    size_t es, bytes, *off, *len;
    flx_algo_t algo;

    if (st != FLX_OK)
        return st;
    es = flx_dtype_size(dtype);
    bytes = recvcount * es;
    if (!arg_ok(flx_op_valid(op), comm, "flx_reduce_scatter: invalid op %d", (int)op))
        return FLX_ERR_INVALID_ARG;
    if (!arg_ok(recvcount == 0 || (sendbuf && recvbuf), comm,
              "flx_reduce_scatter: NULL buffer with recvcount %zu", recvcount))
        return FLX_ERR_INVALID_ARG;
    if (!arg_ok(sendbuf == recvbuf ||
                  !ranges_overlap(sendbuf, bytes * (size_t)comm->size, recvbuf, bytes),
              comm, "flx_reduce_scatter: send and receive buffers overlap without being the same"))
        return FLX_ERR_INVALID_ARG;
    if ((st = comm_enter(comm)) != FLX_OK)
        return st;
    algo = comm->size > 1 && recvcount > 0 ? pick_reduce_scatter(comm, bytes * (size_t)comm->size)
                                           : FLX_ALGO_RING; /* as flx_reduce_scatter_algo */
    coll_begin(comm, COLL_REDUCE_SCATTER, algo, dtype, op, recvcount, "reduce_scatter");
    if (comm->size == 1) {
        if (sendbuf != recvbuf && bytes)
            memcpy(recvbuf, sendbuf, bytes);
        return comm_leave(comm, FLX_OK);
    }
    if (recvcount == 0) /* nothing to move, but the empty messages carry the count */
        return comm_leave(comm, coll_barrier_dissemination(comm));
    if (algo != FLX_ALGO_RING) { /* an allreduce; out of place into scratch */
        char *out = sendbuf == recvbuf ? recvbuf
                                       : coll_scratch_slot(comm, 1, bytes * (size_t)comm->size);
        if (out == NULL)
            return comm_leave(comm, FLX_ERR_NO_MEMORY);
        return comm_leave(comm, reduce_scatter_by_allreduce(comm, sendbuf, out, recvbuf,
                                                            recvcount, dtype, op, algo));
    }
    /* The ring.  In place works in recvbuf itself.  Out of place reads
     * sendbuf and never copies it: each step's segment is received into
     * scratch (at its offset, as in the input) and reduced there with the
     * input's, and our own segment r, the last step's, straight into
     * recvbuf.  Segments r-1 (sent from the input) and r live nowhere
     * else, so 2 ranks need no scratch for data at all. */
    {
        const size_t all = bytes * (size_t)comm->size;
        const size_t meta = 2 * (size_t)comm->size * sizeof(size_t);
        const int inplace = sendbuf == recvbuf;
        char *slot = coll_scratch_slot(comm, 1, meta + (inplace || comm->size == 2 ? 0 : all));

        if (slot == NULL)
            return comm_leave(comm, FLX_ERR_NO_MEMORY);
        off = (size_t *)slot;
        len = off + comm->size;
        for (int i = 0; i < comm->size; i++) {
            off[i] = (size_t)i * recvcount;
            len[i] = recvcount;
        }
        if (inplace) {
            char *own = (char *)recvbuf + (size_t)comm->rank * bytes;
            st = coll_ring_reduce_scatter(comm, NULL, recvbuf, NULL, off, len, dtype, op, 0);
            if (st == FLX_OK) {
                flx_reduce_finish(own, recvcount, dtype, op, comm->size);
                memmove(recvbuf, own, bytes);
            }
        } else {
            st = coll_ring_reduce_scatter(comm, sendbuf, slot + meta, recvbuf, off, len, dtype,
                                          op, 0);
            if (st == FLX_OK)
                flx_reduce_finish(recvbuf, recvcount, dtype, op, comm->size);
        }
    }
    return comm_leave(comm, st);
}

flx_status_t flx_barrier(flx_comm_h comm)
{
    flx_status_t st;

    if (!arg_ok(comm != NULL, comm, "flx_barrier: comm is NULL"))
        return FLX_ERR_INVALID_ARG;
    if ((st = comm_enter(comm)) != FLX_OK)
        return st;
    coll_begin(comm, COLL_BARRIER, FLX_ALGO_RD, FLX_INT32, 0, 0, "barrier");
    return comm_leave(comm, coll_barrier_dissemination(comm));
}
