/* rd.c -- latency-bound algorithms: recursive-doubling allreduce, the
 * log-step allgather (recursive doubling in place when N is a power of two,
 * Bruck otherwise) and the dissemination barrier.
 *
 * recursive doubling, N = 6 (p = 4, rem = 2):
 *     ranks 0,2 hand their data to 1,3 and wait;  active: 1 3 4 5
 *     newranks 0..3 exchange with newrank ^ 1, then ^ 2;  1,3 return results
 */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/dtype.h"
#include "common/util.h"

#include <string.h>

enum { RD_PRE = 0, RD_MAIN = 1, RD_POST = 64 };

/* One step of recursive doubling with peer, in chunks of the pipeline's
 * size: sbuf's chunks go out, rbuf's come in, and with acc each chunk that
 * came in is reduced into acc's at once -- the reduction overlaps the
 * transfer instead of waiting for the whole message, and no message is
 * larger than a chunk (the ib backend stages it rather than registering
 * the caller's buffer).  At most RD_WINDOW chunks are in flight.  With acc,
 * rbuf is a ring of RD_WINDOW chunks (rd_tmp_bytes): chunk i lands in slot
 * i % RD_WINDOW, free again once chunk i - RD_WINDOW was reduced; without,
 * rbuf is the whole message, and with `with' each chunk that came in is
 * reduced at once with with's (out of place: the peer's data lands in the
 * output and the input is folded in there).  acc may be sbuf: a chunk is
 * reduced only after its send has left. */
#define RD_WINDOW 8
static size_t rd_tmp_bytes(flx_comm_h comm, size_t count, size_t es)
{
    size_t ce = coll_chunk_elems(comm, es, count);

    return FLX_MIN(count, (size_t)RD_WINDOW * ce) * es;
}

static flx_status_t rd_step(flx_comm_h comm, int peer, int phase, const char *sbuf, char *rbuf,
                            char *acc, const char *with, size_t count, flx_dtype_t dtype,
                            flx_op_t op)
{
    const size_t es = flx_dtype_size(dtype), ce = coll_chunk_elems(comm, es, count);
    const size_t nch = FLX_DIV_ROUND_UP(count, ce);
    tl_req_t reqs[RD_WINDOW][2];
    flx_status_t st = FLX_OK;
    size_t posted = 0;

    for (size_t i = 0; i < nch && st == FLX_OK; i++) {
        tl_req_t *r = reqs[i % RD_WINDOW];
        size_t off = i * ce, n = FLX_MIN(ce, count - off);

        for (; posted < nch && posted < i + RD_WINDOW && st == FLX_OK; posted++) {
            tl_req_t *q = reqs[posted % RD_WINDOW];
            size_t o = posted * ce, m = FLX_MIN(ce, count - o);
            size_t ro = acc ? (posted % RD_WINDOW) * ce : o;
            uint32_t step = COLL_STEP(phase, posted);

            if (rbuf)
                st = coll_recv(comm, peer, step, rbuf + ro * es, m * es, &q[0]);
            if (sbuf && st == FLX_OK)
                st = coll_send(comm, peer, step, sbuf + o * es, m * es, &q[1]);
        }
        if (rbuf && st == FLX_OK)
            st = coll_wait(comm, &r[0]);
        if (sbuf && st == FLX_OK)
            st = coll_wait(comm, &r[1]);
        if (acc && st == FLX_OK)
            flx_reduce(acc + off * es, rbuf + (i % RD_WINDOW) * ce * es, n, dtype, op);
        else if (with && st == FLX_OK)
            flx_reduce(rbuf + off * es, with + off * es, n, dtype, op);
    }
    return st;
}

/* Out of place (src != buf) the input is never copied to the output: the
 * first step that reduces sends from src and receives the peer's data
 * straight into buf, folding src's in there (the ops are commutative: the
 * bits of the in-place order); a rank that only hands its data over sends
 * it from src. */
flx_status_t coll_allreduce_rd(flx_comm_h comm, const void *src, void *buf, size_t count,
                               flx_dtype_t dtype, flx_op_t op)
{
    const int r = comm->rank, n = comm->size;
    const int p = topo_pow2_floor(n), rem = n - p;
    const int newrank = topo_rd_newrank(r, n);
    const char *in = src != buf ? src : NULL; /* until folded into buf */
    char *tmp;
    flx_status_t st = FLX_OK;

    if (in && count && n == 1)
        memcpy(buf, in, count * flx_dtype_size(dtype));
    if (n == 1 || count == 0)
        return FLX_OK;
    tmp = coll_scratch(comm, rd_tmp_bytes(comm, count, flx_dtype_size(dtype)));
    if (tmp == NULL)
        return FLX_ERR_NO_MEMORY;
    if (r < 2 * rem) {
        if (newrank < 0)
            st = rd_step(comm, r + 1, RD_PRE, in ? in : buf, NULL, NULL, NULL, count, dtype, op);
        else if (in)
            st = rd_step(comm, r - 1, RD_PRE, NULL, buf, NULL, in, count, dtype, op);
        else
            st = rd_step(comm, r - 1, RD_PRE, NULL, tmp, buf, NULL, count, dtype, op);
        in = NULL;
    }
    if (newrank >= 0) {
        for (int mask = 1, k = 0; mask < p && st == FLX_OK; mask <<= 1, k++) {
            int peer = topo_rd_oldrank(newrank ^ mask, n);
            if (in)
                st = rd_step(comm, peer, RD_MAIN + k, in, buf, NULL, in, count, dtype, op);
            else
                st = rd_step(comm, peer, RD_MAIN + k, buf, tmp, buf, NULL, count, dtype, op);
            in = NULL;
        }
    }
    if (r < 2 * rem && st == FLX_OK) {
        if (newrank < 0)
            st = rd_step(comm, r + 1, RD_POST, NULL, buf, NULL, NULL, count, dtype, op);
        else
            st = rd_step(comm, r - 1, RD_POST, buf, NULL, NULL, NULL, count, dtype, op);
    }
    if (st == FLX_OK) { /* each pair combined in its own order: one NaN for all */
        flx_reduce_finish(buf, count, dtype, op, n);
        flx_reduce_nan_one(buf, count, dtype, op);
    }
    return st;
}

/* Recursive doubling, N a power of two: before round k rank r holds the
 * 2^k blocks of its group (ranks r with the low k bits cleared, and on),
 * in place; it sends them to r ^ (2^(k+1) - 1) and receives that rank's
 * group's beside them (the other half of the aligned group of 2^(k+1);
 * the partner always differs in bit 0, so with ranks bound to cores in
 * turn every round crosses cores, where r ^ 2^k put round 1's pairs of 4
 * ranks on 2 cores on one core).  log2 N steps, the ring's bytes, and none of Bruck's
 * scratch or its two copies of the whole output.  Out of place (own:
 * the caller's block) round 0 sends the block from own and copies each
 * chunk into place right behind its send, as the ring does, instead of
 * copying the whole block before the first send. */
static flx_status_t allgather_rd_pow2(flx_comm_h comm, const char *own, char *out, size_t bpr)
{
    const int r = comm->rank, n = comm->size;
    const size_t ce = coll_chunk_elems(comm, 1, (size_t)n / 2 * bpr);
    const size_t most = FLX_DIV_ROUND_UP((size_t)n / 2 * bpr, ce); /* chunks of the last step */
    tl_req_t *req = coll_scratch(comm, 2 * most * sizeof(tl_req_t));
    flx_status_t st = FLX_OK;

    if (req == NULL)
        return FLX_ERR_NO_MEMORY;
    /* each step in pipeline chunks, all posted at once: with one message
     * per step (half the output in the last) it took 1.2-1.4x the ring's
     * time at 32 MiB gathered on 4 ranks, in chunks 1.15-1.2x */
    for (int dist = 1, k = 0; dist < n && st == FLX_OK; dist *= 2, k++) {
        int mine = r & ~(dist - 1), peer = r ^ (2 * dist - 1), theirs = peer & ~(dist - 1);
        const size_t len = (size_t)dist * bpr, nch = FLX_DIV_ROUND_UP(len, ce);
        const char *from = k == 0 && own ? own : out + (size_t)mine * bpr;
        for (size_t j = 0; j < nch && st == FLX_OK; j++)
            st = coll_recv(comm, peer, COLL_STEP(k, j), out + (size_t)theirs * bpr + j * ce,
                           FLX_MIN(ce, len - j * ce), &req[j]);
        for (size_t j = 0; j < nch && st == FLX_OK; j++) {
            const size_t cl = FLX_MIN(ce, len - j * ce);
            st = coll_send(comm, peer, COLL_STEP(k, j), from + j * ce, cl, &req[most + j]);
            if (st == FLX_OK && from == own)
                st = coll_copy_behind(comm, out + (size_t)r * bpr + j * ce, own + j * ce, cl,
                                      bpr, j + 1 == nch);
        }
        if (st == FLX_OK)
            st = coll_waitall(comm, req, nch);
        if (st == FLX_OK)
            st = coll_waitall(comm, req + most, nch);
    }
    return st;
}

/* Bruck: after round k, tmp holds blocks of ranks r .. r+2^(k+1)-1; a final
 * rotation puts block i of rank (r+i) mod N at its place (block 0, ours,
 * read from own when out of place). */
flx_status_t coll_allgather_rd(flx_comm_h comm, const void *own, void *recvbuf, size_t bpr)
{
    const int r = comm->rank, n = comm->size;
    char *tmp, *out = recvbuf;
    flx_status_t st = FLX_OK;

    if (n == 1 || bpr == 0)
        return FLX_OK;
    if ((n & (n - 1)) == 0)
        return allgather_rd_pow2(comm, own, out, bpr);
    tmp = coll_scratch(comm, (size_t)n * bpr);
    if (tmp == NULL)
        return FLX_ERR_NO_MEMORY;
    memcpy(tmp, own ? own : out + (size_t)r * bpr, bpr);
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
