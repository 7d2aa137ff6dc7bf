/* hd.c -- the halving-doubling allreduce (Rabenseifner's): a reduce-scatter
 * by recursive halving, then an allgather by recursive doubling, over the
 * largest power of two p <= N.  2 log2 p steps where the ring takes
 * 2(N-1), and the ring's bytes, 2(p-1)/p S per rank.
 *
 * The count is split into p blocks (topo_segment); block i ends at the
 * active rank whose newrank is i.  N = 8, newrank 5 (binary 101):
 *
 *     reduce-scatter  mask 4: keep blocks 4-7, send 0-3 to newrank 1
 *                     mask 2: keep 4-5, send 6-7 to 7
 *                     mask 1: keep 5, send 4 to 4      (block 5 reduced)
 *     allgather       mask 1: send block 5 to 4, receive 4
 *                     mask 2: send 4-5 to 7, receive 6-7
 *                     mask 4: send 4-7 to 1, receive 0-3
 *
 * When N is not a power of two the first 2(N-p) ranks pair up as in
 * recursive doubling (topo_rd_newrank): an even rank hands its whole vector
 * to rank + 1, sits out, and gets the result back at the end -- two more
 * steps of S, so the model picks it mostly where N is a power of two.
 *
 * Every block is reduced by one rank and copied to the others, so every
 * rank ends with the same bits.  Out of place the input is never copied to
 * the output: the first step that reduces receives the peer's part straight
 * into the output and folds the input's in there (as the ring does).
 */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/dtype.h"
#include "common/util.h"

#include <string.h>

enum { HD_PRE = 0, HD_RS = 1, HD_AG = 32, HD_POST = 64 };

/* How the data of one exchange lands: straight into place (the
 * allgather, the result handed back), into a ring of HD_WINDOW chunks and
 * reduced into place chunk by chunk, or straight into place and reduced
 * there with the input's (out of place, the first reducing step). */
typedef enum { HD_COPY, HD_REDUCE, HD_WITH } hd_mode_t;

#define HD_WINDOW 8

/* One exchange with peer in pipeline chunks: scount elements of sbuf go
 * out, rcount come in to dst (the peer's scount and rcount are ours
 * swapped, so both sides cut the same chunks).  At most HD_WINDOW chunks
 * each way are in flight; a chunk that came in is reduced at once, while
 * the next ones travel.  sbuf and dst do not overlap. */
static flx_status_t hd_step(flx_comm_h comm, int peer, int phase, const char *sbuf,
                            size_t scount, char *dst, size_t rcount, hd_mode_t mode,
                            const char *with, char *ring, flx_dtype_t dtype, flx_op_t op)
{
    const size_t es = flx_dtype_size(dtype);
    const size_t ce = coll_chunk_elems(comm, es, FLX_MAX(scount, rcount));
    const size_t ns = FLX_DIV_ROUND_UP(scount, ce), nr = FLX_DIV_ROUND_UP(rcount, ce);
    tl_req_t sreq[HD_WINDOW], rreq[HD_WINDOW];
    size_t sposted = 0, rposted = 0;
    flx_status_t st = FLX_OK;

    for (size_t i = 0; i < FLX_MAX(ns, nr) && st == FLX_OK; i++) {
        for (; rposted < nr && rposted < i + HD_WINDOW && st == FLX_OK; rposted++) {
            size_t o = rposted * ce, m = FLX_MIN(ce, rcount - o);
            char *to = mode == HD_REDUCE ? ring + (rposted % HD_WINDOW) * ce * es : dst + o * es;
            st = coll_recv(comm, peer, COLL_STEP(phase, rposted), to, m * es,
                           &rreq[rposted % HD_WINDOW]);
        }
        for (; sposted < ns && sposted < i + HD_WINDOW && st == FLX_OK; sposted++) {
            size_t o = sposted * ce, m = FLX_MIN(ce, scount - o);
            st = coll_send(comm, peer, COLL_STEP(phase, sposted), sbuf + o * es, m * es,
                           &sreq[sposted % HD_WINDOW]);
        }
        if (i < nr && st == FLX_OK) {
            size_t o = i * ce, m = FLX_MIN(ce, rcount - o);
            st = coll_wait(comm, &rreq[i % HD_WINDOW]);
            if (st == FLX_OK && mode == HD_REDUCE)
                flx_reduce(dst + o * es, ring + (i % HD_WINDOW) * ce * es, m, dtype, op);
            else if (st == FLX_OK && mode == HD_WITH)
                flx_reduce(dst + o * es, with + o * es, m, dtype, op);
        }
        if (i < ns && st == FLX_OK)
            st = coll_wait(comm, &sreq[i % HD_WINDOW]);
    }
    return st;
}

/* element offset of block b of p over count (b = p: count) */
static size_t hd_off(size_t count, int p, int b)
{
    size_t off, len;

    if (b >= p)
        return count;
    topo_segment(count, p, b, &off, &len);
    return off;
}

flx_status_t coll_allreduce_hd(flx_comm_h comm, const void *src, void *buf, size_t count,
                               flx_dtype_t dtype, flx_op_t op)
{
    const int r = comm->rank, n = comm->size;
    const int p = topo_pow2_floor(n), rem = n - p;
    const int newrank = topo_rd_newrank(r, n);
    const size_t es = flx_dtype_size(dtype);
    const char *in = src != buf ? src : NULL; /* until folded into buf */
    char *out = buf, *ring;
    flx_status_t st = FLX_OK;
    int lo = 0, k = 0;

    if (in && count && n == 1)
        memcpy(buf, in, count * es);
    if (n == 1 || count == 0) {
        flx_reduce_finish(buf, count, dtype, op, n);
        return FLX_OK;
    }
    ring = coll_scratch(comm, FLX_MIN(count, HD_WINDOW * coll_chunk_elems(comm, es, count)) * es);
    if (ring == NULL)
        return FLX_ERR_NO_MEMORY;
    if (r < 2 * rem) {
        if (newrank < 0)
            st = hd_step(comm, r + 1, HD_PRE, in ? in : out, count, NULL, 0, HD_COPY, NULL,
                         ring, dtype, op);
        else
            st = hd_step(comm, r - 1, HD_PRE, NULL, 0, out, count, in ? HD_WITH : HD_REDUCE,
                         in, ring, dtype, op);
        in = NULL;
    }
    if (newrank >= 0) {
        /* reduce-scatter: keep the half of [lo, lo + 2 mask) that holds
         * newrank, send the other half to newrank ^ mask */
        for (int mask = p / 2; mask >= 1 && st == FLX_OK; mask /= 2, k++) {
            int peer = topo_rd_oldrank(newrank ^ mask, n);
            int keep = newrank & mask ? lo + mask : lo, give = newrank & mask ? lo : lo + mask;
            size_t ko = hd_off(count, p, keep), go = hd_off(count, p, give);
            size_t kn = hd_off(count, p, keep + mask) - ko, gn = hd_off(count, p, give + mask) - go;
            st = hd_step(comm, peer, HD_RS + k, (in ? in : out) + go * es, gn, out + ko * es, kn,
                         in ? HD_WITH : HD_REDUCE, in ? in + ko * es : NULL, ring, dtype, op);
            in = NULL;
            lo = keep;
        }
        if (st == FLX_OK) {
            size_t o = hd_off(count, p, newrank);
            flx_reduce_finish(out + o * es, hd_off(count, p, newrank + 1) - o, dtype, op, n);
        }
        /* allgather: send [lo, lo + mask), receive the peer's beside it */
        for (int mask = 1, j = 0; mask < p && st == FLX_OK; mask *= 2, j++) {
            int peer = topo_rd_oldrank(newrank ^ mask, n), theirs = lo ^ mask;
            size_t mo = hd_off(count, p, lo), to = hd_off(count, p, theirs);
            st = hd_step(comm, peer, HD_AG + j, out + mo * es, hd_off(count, p, lo + mask) - mo,
                         out + to * es, hd_off(count, p, theirs + mask) - to, HD_COPY, NULL,
                         ring, dtype, op);
            lo &= ~mask;
        }
    }
    if (r < 2 * rem && st == FLX_OK) {
        if (newrank < 0)
            st = hd_step(comm, r + 1, HD_POST, NULL, 0, out, count, HD_COPY, NULL, ring, dtype,
                         op);
        else
            st = hd_step(comm, r - 1, HD_POST, out, count, NULL, 0, HD_COPY, NULL, ring, dtype,
                         op);
    }
    return st;
}
