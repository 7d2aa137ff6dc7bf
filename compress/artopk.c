/* artopk.c -- AR-compatible top-k (seed 001): every rank uses ONE index
 * set, so the k values are combined by a dense allreduce of k floats
 * (2(N-1)/N 4k bytes a rank) instead of an allgather of (value, index)
 * pairs ((N-1) 8k).
 *
 * Where the set comes from (cmp_artopk_params_t.leader_policy):
 *   STAR  the leader is step mod N; it selects the top-k of its own g + e
 *   VAR   the leader is the rank with the largest EWMA of ||g|| (the EWMAs
 *         travel in a tiny allgather of one double per rank; ties: lowest
 *         rank)
 *   VOTE  for non-IID data: every rank proposes its top-k' (k' = ceil(k/N))
 *         as (index, |g+e|) pairs; one allgather; the union of the proposals
 *         scores each index with the sum of the proposers' magnitudes (added
 *         in rank order); when the union holds more than k indices the k best
 *         scores stay (equal scores: lower index); otherwise the whole union
 *         is used, so k_used <= k
 *
 * How the set travels (index_mode):
 *   SERIAL      broadcast from the leader, then the allreduce (the paper)
 *   PREVIOUS    step t uses the set chosen at step t-1 (by step t-1's leader
 *               from step t-1's g + e); the set for step t+1 leaves in a
 *               non-blocking allreduce (int32 sum, zeros from the others;
 *               VOTE: a non-blocking allgather of the proposals) issued after
 *               the values' allreduce, so it runs while the caller computes
 *               the next gradient.  The first step, and a step whose k
 *               differs from the set in flight, exchange synchronously.
 *   PIPELINED   artopk_pipe.c: one fused ring carries the indices beside the
 *               values (STAR and VAR; VOTE has no single owner of the set and
 *               runs SERIAL)
 *
 * Values: val[j] = acc[idx[j]] on every rank, val[k_used] = the rank's bad
 * flag, allreduced with FLX_SUM (the caller divides for the average).  The
 * allreduce leaves the same bits on every rank.
 */
#include "compress/cmp.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cmp_artopk {
    flx_comm_h comm;
    int N;
    int rank;
    size_t n;
    size_t k_max;
    cmp_artopk_params_t p;
    cmp_topk_t *sel;           /* the caller's selector (not owned)               */
    cmp_topk_t *vote_sel;      /* VOTE: top-k of the union's scores                */
    int32_t *idx;              /* k_max: the set of this step                     */
    float *val;                /* k_max + 1                                        */
    int32_t *idx_next;         /* PREVIOUS: the next set, in flight                */
    flx_request_h req;         /* PREVIOUS: the exchange in flight, or NULL        */
    size_t next_k;             /* its k                                            */
    int next_leader;           /* its leader (-1 for VOTE)                         */
    double ewma;               /* VAR: this rank's EWMA of ||g||                   */
    int have_ewma;
    double *ewmas;             /* VAR: N gathered                                  */
    /* VOTE */
    size_t kp_max;             /* ceil(k_max / N)                                  */
    int32_t *prop;             /* 2 kp_max words: indices, then |value| bits       */
    int32_t *props;            /* N * 2 kp_max                                     */
    float *pval;               /* kp_max: the proposal's values                   */
    int32_t *u_idx[2];         /* N kp_max each: union being merged (two buffers)  */
    float *u_score[2];
    int32_t *u_pos;            /* k_max: positions chosen in the union             */
};

static size_t artopk_kp(size_t k, int N) { return FLX_MAX((k + (size_t)N - 1) / (size_t)N, (size_t)1); }

/* ---- life cycle ------------------------------------------------------------ */

static void artopk_free_buffers(cmp_artopk_t *ar)
{
    free(ar->idx);
    free(ar->val);
    free(ar->idx_next);
    free(ar->ewmas);
    free(ar->prop);
    free(ar->props);
    free(ar->pval);
    for (int b = 0; b < 2; b++) {
        free(ar->u_idx[b]);
        free(ar->u_score[b]);
    }
    free(ar->u_pos);
}

static flx_status_t artopk_grow(void **p, size_t bytes)
{
    void *q = realloc(*p, bytes ? bytes : 1);

    if (q == NULL)
        return FLX_ERR_NO_MEMORY;
    *p = q;
    return FLX_OK;
}

flx_status_t cmp_artopk_reserve(cmp_artopk_t *ar, size_t k_max)
{
    const size_t N = (size_t)ar->N;
    flx_status_t st = FLX_OK;

    k_max = FLX_MIN(k_max, ar->n);
    if (k_max <= ar->k_max && ar->idx != NULL)
        return FLX_OK;
    /* PREVIOUS keeps a set in flight in idx_next: never move it under the
     * background thread */
    if (ar->req != NULL && (st = cmp_artopk_reset(ar)) != FLX_OK)
        return st;
    st = artopk_grow((void **)&ar->idx, k_max * sizeof(int32_t));
    if (st == FLX_OK)
        st = artopk_grow((void **)&ar->val, (k_max + 1) * sizeof(float));
    if (st == FLX_OK && ar->p.index_mode == CMP_INDEX_PREVIOUS)
        st = artopk_grow((void **)&ar->idx_next, k_max * sizeof(int32_t));
    if (st == FLX_OK && ar->p.leader_policy == CMP_LEADER_VOTE) {
        size_t kp = artopk_kp(k_max, ar->N);
        st = artopk_grow((void **)&ar->prop, 2 * kp * sizeof(int32_t));
        if (st == FLX_OK)
            st = artopk_grow((void **)&ar->props, 2 * N * kp * sizeof(int32_t));
        if (st == FLX_OK)
            st = artopk_grow((void **)&ar->pval, kp * sizeof(float));
        for (int b = 0; b < 2 && st == FLX_OK; b++) {
            st = artopk_grow((void **)&ar->u_idx[b], N * kp * sizeof(int32_t));
            if (st == FLX_OK)
                st = artopk_grow((void **)&ar->u_score[b], N * kp * sizeof(float));
        }
        if (st == FLX_OK)
            st = artopk_grow((void **)&ar->u_pos, k_max * sizeof(int32_t));
        if (st == FLX_OK) { /* the union's selector, sized for N proposals; the
                               old one stays if the new one cannot be made */
            cmp_topk_t *sel = NULL;
            st = cmp_topk_create(N * kp, FLX_MIN(k_max, N * kp), 1, 0x707e, &sel);
            if (st == FLX_OK) {
                cmp_topk_destroy(ar->vote_sel);
                ar->vote_sel = sel;
            }
        }
        if (st == FLX_OK)
            ar->kp_max = kp;
    }
    if (st != FLX_OK) {
        flx_error(COMPRESS, ar->rank, "AR-Topk: no memory for k = %zu", k_max);
        return st;
    }
    ar->k_max = k_max;
    return FLX_OK;
}

int cmp_artopk_index_mode(int mode, int nranks)
{
    return mode == CMP_INDEX_PIPELINED && nranks > CMP_ARTOPK_PIPE_MAX_RANKS ? CMP_INDEX_SERIAL
                                                                            : mode;
}

flx_status_t cmp_artopk_create(flx_comm_h comm, size_t n, size_t k_max,
                               const cmp_artopk_params_t *params, cmp_topk_t *sel,
                               cmp_artopk_t **ar_p)
{
    cmp_artopk_t *ar = calloc(1, sizeof(*ar));
    flx_status_t st;

    if (ar == NULL)
        return FLX_ERR_NO_MEMORY;
    ar->comm = comm;
    ar->N = flx_comm_size(comm);
    ar->rank = flx_comm_rank(comm);
    ar->n = n;
    ar->p = *params;
    ar->p.index_mode = cmp_artopk_index_mode(params->index_mode, ar->N);
    if (ar->p.index_mode != params->index_mode && ar->rank == 0)
        flx_info(COMPRESS, ar->rank, "AR-Topk: the pipelined index exchange supports up to %d "
                 "ranks, not %d: serial (broadcast, then allreduce)", CMP_ARTOPK_PIPE_MAX_RANKS,
                 ar->N);
    ar->sel = sel;
    ar->next_leader = -1;
    ar->ewmas = calloc((size_t)ar->N, sizeof(double));
    if (ar->ewmas == NULL) {
        st = FLX_ERR_NO_MEMORY;
        goto err_free_ar;
    }
    st = cmp_artopk_reserve(ar, k_max);
    if (st != FLX_OK)
        goto err_free_ar;
    *ar_p = ar;
    return FLX_OK;

err_free_ar:
    cmp_topk_destroy(ar->vote_sel);
    artopk_free_buffers(ar);
    free(ar);
    return st;
}

flx_status_t cmp_artopk_reset(cmp_artopk_t *ar)
{
    flx_status_t st = FLX_OK;

    if (ar->req != NULL) {
        st = flx_wait(ar->req);
        ar->req = NULL;
    }
    ar->next_k = 0;
    return st;
}

flx_status_t cmp_artopk_destroy(cmp_artopk_t *ar)
{
    flx_status_t st;

    if (ar == NULL)
        return FLX_OK;
    st = cmp_artopk_reset(ar); /* the index exchange under way: its status */
    cmp_topk_destroy(ar->vote_sel);
    artopk_free_buffers(ar);
    free(ar);
    return st;
}

/* ---- the index set ------------------------------------------------------------ */

/* VAR: fold this step's norm into this rank's EWMA (once per step). */
static void artopk_var_fold(cmp_artopk_t *ar, double gnorm)
{
    double w = ar->p.var_ewma;

    if (!isfinite(gnorm))
        return; /* the step fails anyway; keep the history clean */
    ar->ewma = ar->have_ewma ? (1.0 - w) * ar->ewma + w * gnorm : gnorm;
    ar->have_ewma = 1;
}

/* VAR: gather everyone's EWMA, pick the largest (ties: lowest rank). */
static flx_status_t artopk_var_leader(cmp_artopk_t *ar, int *leader_p, uint64_t *bytes_p)
{
    flx_status_t st;
    int best = 0;

    ar->ewmas[ar->rank] = ar->ewma;
    st = flx_allgather(ar->comm, &ar->ewmas[ar->rank], ar->ewmas, 1, FLX_FLOAT64,
                       FLX_ALGO_AUTO);
    if (st != FLX_OK)
        return st;
    *bytes_p += (uint64_t)cmp_bytes_allgather(ar->N, sizeof(double));
    for (int r = 1; r < ar->N; r++)
        if (ar->ewmas[r] > ar->ewmas[best])
            best = r;
    *leader_p = best;
    return FLX_OK;
}

/* The leader of a step (STAR, VAR). */
static flx_status_t artopk_leader(cmp_artopk_t *ar, uint64_t step, int *leader_p,
                                  uint64_t *bytes_p)
{
    if (ar->p.leader_policy == CMP_LEADER_VAR)
        return artopk_var_leader(ar, leader_p, bytes_p);
    *leader_p = (int)(step % (uint64_t)ar->N);
    return FLX_OK;
}

/* VOTE: this rank's proposal of kp pairs into ar->prop. */
static void artopk_propose(cmp_artopk_t *ar, const float *acc, size_t kp)
{
    cmp_topk_select(ar->sel, acc, ar->n, kp, ar->p.select, ar->prop, ar->pval, NULL);
    for (size_t j = 0; j < kp; j++) {
        float m = fabsf(ar->pval[j]);
        memcpy(&ar->prop[kp + j], &m, sizeof(m));
    }
}

/* VOTE: the union of the N gathered proposals (kp pairs each), scored by
 * summed magnitudes, trimmed to the k best.  Writes ar->idx; returns k_used. */
static size_t artopk_union(cmp_artopk_t *ar, size_t kp, size_t k)
{
    int32_t *ui = ar->u_idx[0];
    float *us = ar->u_score[0];
    size_t u = kp, kk;

    /* rank 0's list, then merge in ranks 1..N-1: scores add in rank order */
    memcpy(ui, ar->props, kp * sizeof(int32_t));
    memcpy(us, ar->props + kp, kp * sizeof(float));
    for (int r = 1; r < ar->N; r++) {
        const int32_t *ri = ar->props + (size_t)r * 2 * kp;
        const float *rs = (const float *)(ri + kp);
        int32_t *oi = ar->u_idx[ui == ar->u_idx[0]];
        float *os = ar->u_score[us == ar->u_score[0]];
        size_t a = 0, b = 0, o = 0;

        while (a < u || b < kp) {
            if (b == kp || (a < u && ui[a] < ri[b])) {
                oi[o] = ui[a];
                os[o++] = us[a++];
            } else if (a == u || ri[b] < ui[a]) {
                oi[o] = ri[b];
                os[o++] = rs[b++];
            } else {
                oi[o] = ui[a];
                os[o++] = us[a++] + rs[b++];
            }
        }
        ui = oi;
        us = os;
        u = o;
    }
    if (u <= k) {
        memcpy(ar->idx, ui, u * sizeof(int32_t));
        return u;
    }
    kk = k;
    cmp_topk_select(ar->vote_sel, us, u, kk, CMP_SELECT_EXACT, ar->u_pos, NULL, NULL);
    for (size_t j = 0; j < kk; j++)
        ar->idx[j] = ui[ar->u_pos[j]];
    return kk;
}

/* VOTE, synchronously: propose, allgather, union. */
static flx_status_t artopk_vote(cmp_artopk_t *ar, const float *acc, size_t k, size_t *k_used_p,
                                cmp_artopk_result_t *res)
{
    size_t kp = artopk_kp(k, ar->N);
    double t0 = flx_time_now(), t1;
    flx_status_t st;

    artopk_propose(ar, acc, kp);
    t1 = flx_time_now();
    res->select_s += t1 - t0;
    st = flx_allgather(ar->comm, ar->prop, ar->props, 2 * kp, FLX_INT32, FLX_ALGO_AUTO);
    t0 = flx_time_now();
    res->comm_s += t0 - t1;
    if (st != FLX_OK)
        return st;
    res->bytes_sent += (uint64_t)cmp_bytes_allgather(ar->N, 8.0 * kp);
    *k_used_p = artopk_union(ar, kp, k);
    res->select_s += flx_time_now() - t0;
    return FLX_OK;
}

/* STAR / VAR, synchronously: the leader selects, a broadcast spreads. */
static flx_status_t artopk_serial(cmp_artopk_t *ar, const float *acc, size_t k, int leader,
                                  cmp_artopk_result_t *res)
{
    double t0 = flx_time_now(), t1;
    flx_status_t st;

    if (ar->rank == leader)
        cmp_topk_select(ar->sel, acc, ar->n, k, ar->p.select, ar->idx, NULL, NULL);
    t1 = flx_time_now();
    res->select_s += t1 - t0;
    st = flx_broadcast(ar->comm, ar->idx, k, FLX_INT32, leader);
    res->comm_s += flx_time_now() - t1;
    res->bytes_sent += (uint64_t)cmp_bytes_bcast(ar->N, ar->rank, leader, 4.0 * k);
    return st;
}

/* PREVIOUS: start the exchange of the set for the next step. */
static flx_status_t artopk_send_next(cmp_artopk_t *ar, const float *acc, size_t k, int leader,
                                     cmp_artopk_result_t *res)
{
    double t0 = flx_time_now();
    flx_status_t st;

    if (ar->p.leader_policy == CMP_LEADER_VOTE) {
        size_t kp = artopk_kp(k, ar->N);
        artopk_propose(ar, acc, kp);
        res->select_s += flx_time_now() - t0;
        st = flx_iallgather(ar->comm, ar->prop, ar->props, 2 * kp, FLX_INT32, FLX_ALGO_AUTO,
                            &ar->req);
        res->bytes_sent += (uint64_t)cmp_bytes_allgather(ar->N, 8.0 * kp);
    } else {
        if (ar->rank == leader)
            cmp_topk_select(ar->sel, acc, ar->n, k, ar->p.select, ar->idx_next, NULL, NULL);
        else
            memset(ar->idx_next, 0, k * sizeof(int32_t));
        res->select_s += flx_time_now() - t0;
        st = flx_iallreduce(ar->comm, ar->idx_next, ar->idx_next, k, FLX_INT32, FLX_SUM,
                            FLX_ALGO_AUTO, &ar->req);
        res->bytes_sent += (uint64_t)cmp_bytes_allreduce(
            flx_allreduce_algo(ar->comm, k, FLX_INT32), ar->N, ar->rank, 4.0 * k);
    }
    if (st != FLX_OK) {
        ar->req = NULL;
        return st;
    }
    ar->next_k = k;
    ar->next_leader = ar->p.leader_policy == CMP_LEADER_VOTE ? -1 : leader;
    return FLX_OK;
}

/* PREVIOUS: take the set that travelled since the last step. */
static flx_status_t artopk_take_next(cmp_artopk_t *ar, size_t k, size_t *k_used_p, int *leader_p,
                                     cmp_artopk_result_t *res)
{
    double t0 = flx_time_now();
    flx_status_t st = flx_wait(ar->req);

    ar->req = NULL;
    res->comm_s += flx_time_now() - t0;
    if (st != FLX_OK)
        return st;
    if (ar->p.leader_policy == CMP_LEADER_VOTE) {
        t0 = flx_time_now();
        *k_used_p = artopk_union(ar, artopk_kp(k, ar->N), k);
        res->select_s += flx_time_now() - t0;
    } else {
        int32_t *t = ar->idx;
        ar->idx = ar->idx_next;
        ar->idx_next = t;
        *k_used_p = k;
    }
    *leader_p = ar->next_leader;
    return FLX_OK;
}

/* ---- the step -------------------------------------------------------------------- */

flx_status_t cmp_artopk_step(cmp_artopk_t *ar, const float *acc, size_t k, uint64_t step,
                             double gnorm, int bad, const int32_t **idx_p, const float **val_p,
                             int *any_bad_p, cmp_artopk_result_t *res_p)
{
    cmp_artopk_result_t res = {.leader = -1};
    const int vote = ar->p.leader_policy == CMP_LEADER_VOTE;
    int mode = ar->p.index_mode, leader = -1;
    size_t k_used = k;
    double t0;
    flx_status_t st = FLX_OK;

    if (k >= ar->n) { /* everything: a dense allreduce, no set to agree on */
        k_used = ar->n;
        for (size_t j = 0; j < k_used; j++)
            ar->idx[j] = (int32_t)j;
        mode = -1;
    } else if (vote && mode == CMP_INDEX_PIPELINED) {
        mode = CMP_INDEX_SERIAL; /* no single owner of the set to pipeline from */
    }
    if (mode != CMP_INDEX_PREVIOUS && ar->req != NULL && (st = cmp_artopk_reset(ar)) != FLX_OK)
        return st;
    if (ar->p.leader_policy == CMP_LEADER_VAR)
        artopk_var_fold(ar, gnorm);

    if (mode == CMP_INDEX_PREVIOUS) {
        if (ar->req != NULL && ar->next_k == k) {
            st = artopk_take_next(ar, k, &k_used, &leader, &res);
        } else {
            if (ar->req != NULL && (st = cmp_artopk_reset(ar)) != FLX_OK)
                return st;
            if (vote) {
                st = artopk_vote(ar, acc, k, &k_used, &res);
            } else {
                st = artopk_leader(ar, step, &leader, &res.bytes_sent);
                if (st == FLX_OK)
                    st = artopk_serial(ar, acc, k, leader, &res);
            }
        }
    } else if (mode == CMP_INDEX_SERIAL || mode == CMP_INDEX_PIPELINED) {
        if (vote) {
            st = artopk_vote(ar, acc, k, &k_used, &res);
        } else {
            t0 = flx_time_now();
            st = artopk_leader(ar, step, &leader, &res.bytes_sent);
            res.comm_s += flx_time_now() - t0;
            if (st == FLX_OK && mode == CMP_INDEX_SERIAL)
                st = artopk_serial(ar, acc, k, leader, &res);
        }
    }
    if (st != FLX_OK)
        return st;

    /* the values */
    if (mode == CMP_INDEX_PIPELINED && !vote) {
        t0 = flx_time_now();
        if (ar->rank == leader)
            cmp_topk_select(ar->sel, acc, ar->n, k, ar->p.select, ar->idx, NULL, NULL);
        res.select_s += flx_time_now() - t0;
        t0 = flx_time_now();
        st = cmp_artopk_pipe(ar->comm, leader, ar->idx, k, ar->n, acc, bad ? 1.0f : 0.0f, ar->val,
                             &res.bytes_sent);
        res.comm_s += flx_time_now() - t0;
    } else {
        t0 = flx_time_now();
        /* the set came from other ranks: checked (it is the same on every
         * rank, so every rank fails alike) */
        for (size_t j = 0; j < k_used; j++) {
            if ((uint32_t)ar->idx[j] >= ar->n) {
                flx_error(COMPRESS, ar->rank, "AR-Topk: index %d at position %zu of the agreed "
                          "set is outside the %zu-element gradient", ar->idx[j], j, ar->n);
                return FLX_ERR_PROTOCOL;
            }
            ar->val[j] = acc[ar->idx[j]];
        }
        ar->val[k_used] = bad ? 1.0f : 0.0f;
        res.select_s += flx_time_now() - t0;
        t0 = flx_time_now();
        st = flx_allreduce(ar->comm, ar->val, ar->val, k_used + 1, FLX_FLOAT32, FLX_SUM,
                           FLX_ALGO_AUTO);
        res.comm_s += flx_time_now() - t0;
        res.bytes_sent += (uint64_t)cmp_bytes_allreduce(
            flx_allreduce_algo(ar->comm, k_used + 1, FLX_FLOAT32), ar->N, ar->rank,
            4.0 * (double)(k_used + 1));
    }
    if (st != FLX_OK)
        return st;
    *any_bad_p = ar->val[k_used] != 0.0f;

    /* PREVIOUS: the set for the next step travels while the caller computes */
    if (mode == CMP_INDEX_PREVIOUS && !*any_bad_p) {
        int next_leader = -1;
        if (!vote) {
            t0 = flx_time_now();
            st = artopk_leader(ar, step, &next_leader, &res.bytes_sent);
            res.comm_s += flx_time_now() - t0;
        }
        if (st == FLX_OK)
            st = artopk_send_next(ar, acc, k, next_leader, &res);
        if (st != FLX_OK)
            return st;
    }
    res.leader = leader;
    res.k_used = k_used;
    *idx_p = ar->idx;
    *val_p = ar->val;
    *res_p = res;
    return FLX_OK;
}
