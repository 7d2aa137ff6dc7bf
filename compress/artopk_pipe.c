/* artopk_pipe.c -- AR-Topk with the index exchange pipelined into the value
 * ring (CMP_INDEX_PIPELINED): no broadcast before the allreduce.
 *
 * The k values plus one flag slot (K = k + 1) are cut into N ring segments
 * (topo_segment).  In a ring reduce-scatter, segment X starts at rank X+1,
 * travels X+1 -> X+2 -> ... -> X and every rank on the way adds its own
 * value at each position, so a rank needs a segment's indices exactly when
 * the segment reaches it.  Hence:
 *
 *   scatter    the leader L sends rank j the indices of segment j-1 (the
 *              one j starts); every message leaves L at once
 *   reduce-    rank r, step s = 0..N-2: receive segment r-2-s as partial
 *   scatter    sums AND its indices (two messages per chunk), add
 *              acc[idx] at every position, forward both; step 0 sends the
 *              own contribution to segment r-1
 *   allgather  the ring allgather of the reduced values (4 B each)
 *
 *      N = 3, L = 0       scatter      rs step 0        rs step 1
 *      rank 0 (leader)    -> 1: seg 0   send seg 2 ->1   recv seg 1 <-2 (done)
 *      rank 1             <- 0: seg 0   send seg 0 ->2   recv seg 2 <-0 (done)
 *      rank 2             <- 0: seg 1   send seg 1 ->0   recv seg 0 <-1 (done)
 *
 * After the reduce-scatter every rank has seen every segment's indices
 * (r-1 from the scatter, r-2 ... r-N on the ring), so the indices need no
 * allgather.  Traffic per rank: (N-1)/N k (4 + 4 + 4) bytes, plus (N-1)/N
 * 4k more at the leader; latency: the broadcast's log2 N rounds are gone.
 * Chunked (FLX_CHUNK_SIZE) so chunks pipeline within a step.  Sums are
 * formed in ring order and spread by the allgather: every rank ends with
 * the same bits.
 */
#include "compress/cmp.h"
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/log.h"
#include "common/util.h"

#include <string.h>

enum { PIPE_SCATTER = 0, PIPE_RS_VAL = 1 }; /* PIPE_RS_IDX = 1 + N, allgather 2N */

typedef struct {
    size_t *off, *len, *ilen;  /* value and index ranges per segment    */
    size_t E;                  /* elements per chunk                    */
    size_t k, n;               /* indices; acc's length                 */
    const float *acc;
    const int32_t *idx;
    float flag;
} pipe_geom_t;

static size_t pipe_nchunks(size_t len, size_t E) { return FLX_DIV_ROUND_UP(len, E); }

/* chunk c of a segment: value range [co, co + cl), index count icl */
static void pipe_chunk(const pipe_geom_t *g, int seg, size_t c, size_t *co, size_t *cl,
                       size_t *icl)
{
    *co = c * g->E;
    *cl = FLX_MIN(g->E, g->len[seg] - *co);
    *icl = g->ilen[seg] > *co ? FLX_MIN(g->E, g->ilen[seg] - *co) : 0;
}

/* val[pos] = base[pos - from] + this rank's value at pos, pos in [p0, p0 + cnt);
 * FLX_ERR_PROTOCOL (one log line) for an index, as received, outside acc */
static flx_status_t pipe_add_own(const pipe_geom_t *g, int rank, float *val, const float *base,
                                 size_t p0, size_t cnt)
{
    for (size_t e = 0; e < cnt; e++) {
        size_t pos = p0 + e;
        float own = g->flag;
        if (pos < g->k) {
            if ((uint32_t)g->idx[pos] >= g->n) {
                flx_error(COMPRESS, rank, "AR-Topk: index %d received at position %zu is "
                          "outside the %zu-element gradient", g->idx[pos], pos, g->n);
                return FLX_ERR_PROTOCOL;
            }
            own = g->acc[g->idx[pos]];
        }
        val[pos] = base ? base[e] + own : own;
    }
    return FLX_OK;
}

static flx_status_t pipe_run(flx_comm_h comm, int leader, int32_t *idx, size_t k, size_t n_acc,
                             const float *acc, float flag, float *val, uint64_t *bytes_p)
{
    const int n = comm->size, r = comm->rank;
    const int next = topo_ring_next(r, n), prev = topo_ring_prev(r, n);
    const int is_leader = r == leader;
    const size_t K = k + 1;
    pipe_geom_t g = {.k = k, .n = n_acc, .acc = acc, .idx = idx, .flag = flag};
    size_t maxlen, nch, nreq, nsend = 0, nscatter = 0;
    uint64_t bytes = 0;
    tl_req_t *sreq, *rv, *ri, *sc;
    float *tmp;
    int32_t *sink;
    char *slot;
    flx_status_t st = FLX_OK;

    maxlen = K / (size_t)n + 1; /* the longest segment */
    g.E = coll_chunk_elems(comm, sizeof(float), maxlen);
    nch = pipe_nchunks(maxlen, g.E);
    /* slot 1: requests (aligned first), segment tables, receive buffers */
    nreq = (size_t)(n - 1) * nch     /* scatter                 */
           + 2 * nch                 /* one step's receives     */
           + 2 * (size_t)(n - 1) * nch; /* every send of the ring */
    slot = coll_scratch_slot(comm, 1, nreq * sizeof(tl_req_t) + 3 * (size_t)n * sizeof(size_t) +
                                          maxlen * (sizeof(float) + sizeof(int32_t)));
    if (slot == NULL)
        return FLX_ERR_NO_MEMORY;
    sc = (tl_req_t *)slot;
    rv = sc + (size_t)(n - 1) * nch;
    ri = rv + nch;
    sreq = ri + nch;
    g.off = (size_t *)(sreq + 2 * (size_t)(n - 1) * nch);
    g.len = g.off + n;
    g.ilen = g.len + n;
    tmp = (float *)(g.ilen + n);
    sink = (int32_t *)(tmp + maxlen);
    for (int i = 0; i < n; i++) {
        topo_segment(K, n, i, &g.off[i], &g.len[i]);
        g.ilen[i] = g.off[i] >= k ? 0 : FLX_MIN(g.len[i], k - g.off[i]);
    }

    /* scatter: rank j gets the indices of segment j-1 */
    if (is_leader) {
        for (int j = 0; j < n && st == FLX_OK; j++) {
            int seg = topo_mod(j - 1, n);
            if (j == leader)
                continue;
            for (size_t c = 0; c < pipe_nchunks(g.len[seg], g.E) && st == FLX_OK; c++) {
                size_t co, cl, icl;
                pipe_chunk(&g, seg, c, &co, &cl, &icl);
                if (icl == 0)
                    continue;
                st = coll_send(comm, j, COLL_STEP(PIPE_SCATTER, c), idx + g.off[seg] + co,
                               icl * sizeof(int32_t), &sc[nscatter++]);
                bytes += icl * sizeof(int32_t);
            }
        }
    } else {
        int seg = topo_mod(r - 1, n);
        for (size_t c = 0; c < pipe_nchunks(g.len[seg], g.E) && st == FLX_OK; c++) {
            size_t co, cl, icl;
            pipe_chunk(&g, seg, c, &co, &cl, &icl);
            if (icl > 0)
                st = coll_recv(comm, leader, COLL_STEP(PIPE_SCATTER, c), idx + g.off[seg] + co,
                               icl * sizeof(int32_t), &sc[c]);
        }
    }

    /* reduce-scatter, step 0: our own values of segment r-1, chunk by chunk
     * as its indices arrive */
    {
        int seg = topo_mod(r - 1, n);
        for (size_t c = 0; c < pipe_nchunks(g.len[seg], g.E) && st == FLX_OK; c++) {
            size_t co, cl, icl, p0 = g.off[seg] + c * g.E;
            pipe_chunk(&g, seg, c, &co, &cl, &icl);
            if (!is_leader && icl > 0)
                st = coll_wait(comm, &sc[c]);
            if (st == FLX_OK)
                st = pipe_add_own(&g, r, val, NULL, p0, cl);
            if (st != FLX_OK)
                break;
            st = coll_send(comm, next, COLL_STEP(PIPE_RS_VAL, c), val + p0, cl * sizeof(float),
                           &sreq[nsend++]);
            bytes += cl * sizeof(float);
            if (st == FLX_OK && icl > 0) {
                st = coll_send(comm, next, COLL_STEP(PIPE_RS_VAL + n, c), idx + p0,
                               icl * sizeof(int32_t), &sreq[nsend++]);
                bytes += icl * sizeof(int32_t);
            }
        }
    }
    /* reduce-scatter, steps s: segment r-2-s arrives with its indices */
    for (int s = 0; s < n - 1 && st == FLX_OK; s++) {
        int seg = topo_mod(r - 2 - s, n);
        size_t rch = pipe_nchunks(g.len[seg], g.E);

        for (size_t c = 0; c < rch && st == FLX_OK; c++) {
            size_t co, cl, icl;
            pipe_chunk(&g, seg, c, &co, &cl, &icl);
            st = coll_recv(comm, prev, COLL_STEP(PIPE_RS_VAL + s, c), tmp + co,
                           cl * sizeof(float), &rv[c]);
            if (st == FLX_OK && icl > 0)
                st = coll_recv(comm, prev, COLL_STEP(PIPE_RS_VAL + n + s, c),
                               is_leader ? sink + co : idx + g.off[seg] + co,
                               icl * sizeof(int32_t), &ri[c]);
        }
        for (size_t c = 0; c < rch && st == FLX_OK; c++) {
            size_t co, cl, icl, p0 = g.off[seg] + c * g.E;
            pipe_chunk(&g, seg, c, &co, &cl, &icl);
            st = coll_wait(comm, &rv[c]);
            if (st == FLX_OK && icl > 0)
                st = coll_wait(comm, &ri[c]);
            if (st == FLX_OK)
                st = pipe_add_own(&g, r, val, tmp + co, p0, cl);
            if (st != FLX_OK)
                break;
            if (s + 1 < n - 1) {
                st = coll_send(comm, next, COLL_STEP(PIPE_RS_VAL + s + 1, c), val + p0,
                               cl * sizeof(float), &sreq[nsend++]);
                bytes += cl * sizeof(float);
                if (st == FLX_OK && icl > 0) {
                    st = coll_send(comm, next, COLL_STEP(PIPE_RS_VAL + n + s + 1, c), idx + p0,
                                   icl * sizeof(int32_t), &sreq[nsend++]);
                    bytes += icl * sizeof(int32_t);
                }
            }
        }
    }
    /* the segments are overwritten by the allgather: every send must be out */
    if (st == FLX_OK)
        st = coll_waitall(comm, sreq, nsend);
    if (st == FLX_OK)
        st = coll_waitall(comm, sc, nscatter);
    if (st == FLX_OK) {
        st = coll_ring_allgather(comm, NULL, val, g.off, g.len, sizeof(float), (uint32_t)(2 * n));
        for (int s = 0; s < n - 1; s++)
            bytes += g.len[topo_mod(r - s, n)] * sizeof(float);
    }
    *bytes_p += bytes;
    return st;
}

flx_status_t cmp_artopk_pipe(flx_comm_h comm, int leader, int32_t *idx, size_t k, size_t n,
                             const float *acc, float flag, float *val, uint64_t *bytes_p)
{
    flx_status_t st;

    if (comm->size > CMP_ARTOPK_PIPE_MAX_RANKS) { /* cmp_artopk_create chose SERIAL */
        flx_error(COMPRESS, comm->rank, "pipelined AR-Topk supports up to %d ranks, not %d",
                  CMP_ARTOPK_PIPE_MAX_RANKS, comm->size);
        return FLX_ERR_UNSUPPORTED;
    }
    if ((st = comm_enter(comm)) != FLX_OK)
        return st;
    coll_begin(comm, COLL_ARTOPK, FLX_ALGO_RING, FLX_FLOAT32, (unsigned)leader, k + 1,
               "artopk");
    if (comm->size == 1) {
        for (size_t j = 0; j < k; j++)
            val[j] = acc[idx[j]];
        val[k] = flag;
        return comm_leave(comm, FLX_OK);
    }
    return comm_leave(comm, pipe_run(comm, leader, idx, k, n, acc, flag, val, bytes_p));
}
