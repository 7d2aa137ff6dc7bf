/* check_compress.c -- gradient synchronisation with compression on real
 * forked ranks over real sockets, N = 1..5, against a serial reference that
 * every rank computes from every rank's input.
 *
 * Gradients are multiples of 1/64 of at most a few units, so every sum the
 * library forms (in whatever order its ring or tree adds) is exact and a
 * correct result equals the reference bit for bit, ties in magnitude
 * included (there are only a few hundred distinct values).  Each rank also
 * checks its residual against the reference's, and all ranks compare a
 * checksum of their output (flx_allgather).
 *
 *   top-k   AR-Topk: STAR, VAR, VOTE x SERIAL, PREVIOUS, PIPELINED;
 *           sparse allgather; random-k; n = 1 .. 65537 and one 2 M run;
 *           c from 1/n to 1; SUM and AVG; several steps of error feedback
 *   casts   fp16 / bf16 exact on dyadic data, identical on every rank
 *   QSGD    identical on every rank, within one level of the mean
 *   PowerSGD  full rank reconstructs the mean; the error-feedback sum
 *           telescopes (sum_t g_t = sum_t out_t + e_T)
 *   allgatherv  ring and Bruck, counts 0.., capacity errors
 *   errors  bad arguments; NaN on one rank fails the step on every rank
 *           without touching outputs or residuals, and the next step works
 *
 * The reference uses the library's exact top-k (tests/check_topk.c checks
 * it against a sort) and its accumulate pass (for the VAR norms, so that the
 * leader's choice cannot differ by rounding).
 */
#include "tests/mp.h"
#include "compress/cmp.h"
#include "compress/topk.h"
#include "collectives/coll.h"
#include "common/dtype.h"
#include "common/time.h"
#include "common/util.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- inputs --------------------------------------------------------------------- */

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Rank r's gradient at step t: v/16 * s (v in -64..64, s in {1, 1.25, 1.5,
 * 1.75} rotating with r + t), doubled in the rank's own band of indices
 * (non-IID), zero at one index in eight.  Multiples of 1/64. */
static float grad_value(uint64_t salt, int N, int r, int t, size_t i)
{
    uint64_t h = mix(salt * 0x9e3779b97f4a7c15ULL + (uint64_t)r * 0x100000001b3ULL +
                     (uint64_t)t * 0x2545f4914f6cdd1dULL + i);
    float v = (float)((int)(h % 129) - 64) / 16.0f;
    float s = 1.0f + 0.25f * (float)((r + t) % 4);

    if ((h >> 40) % 8 == 0)
        return 0.0f;
    if (N > 1 && (i / 16) % (size_t)N == (size_t)r)
        s *= 2.0f;
    return v * s;
}

static void grad_fill(float *g, size_t n, uint64_t salt, int N, int r, int t)
{
    for (size_t i = 0; i < n; i++)
        g[i] = grad_value(salt, N, r, t, i);
}

static uint64_t checksum(const float *x, size_t n)
{
    uint64_t h = 1469598103934665603ULL;

    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h = (h ^ u) * 1099511628211ULL;
    }
    return h;
}

/* Every rank holds the same output? */
static int same_everywhere(flx_comm_h comm, int rank, int N, const float *x, size_t n,
                           const char *what)
{
    uint64_t mine = checksum(x, n), *all = malloc(sizeof(uint64_t) * (size_t)N);
    flx_status_t st = flx_allgather(comm, &mine, all, 1, FLX_INT64, FLX_ALGO_AUTO);
    int rc = 0;

    if (st != FLX_OK)
        rc = mp_fail(rank, "%s: checksum allgather: %s", what, flx_status_string(st));
    for (int r = 0; r < N && rc == 0; r++)
        if (all[r] != mine)
            rc = mp_fail(rank, "%s: rank %d's output differs from rank %d's", what, r, rank);
    free(all);
    return rc;
}

/* ---- the serial reference of the sparse methods ----------------------------------------- */

typedef struct {
    flx_compress_t method;      /* TOPK (with coll), RANDK                      */
    flx_gsync_coll_t coll;      /* ARTOPK or ALLGATHER for TOPK                 */
    flx_leader_t leader;
    flx_index_mode_t mode;
    flx_op_t op;
    size_t n;
    double c;
    int steps;
    int bad_rank;               /* -1: none; else NaN at bad_step on that rank  */
    int bad_step;
    uint64_t salt;
} sparse_cfg_t;

typedef struct {
    int N;
    size_t n, k;
    float **e;                  /* N residuals                                   */
    float **acc;                /* N accumulated gradients of the step           */
    float *g;                   /* scratch                                        */
    float *out;                 /* the reference output                          */
    int32_t *set, *prev;        /* the step's set; PREVIOUS: the set in flight   */
    size_t set_k, prev_k;
    int have_prev;
    int leader, prev_leader;
    double *ewma;
    int *have_ewma;
    float *score;               /* VOTE: dense scores                            */
    uint8_t *mark;
    int32_t *tmp_idx;
    float *tmp_val;
    uint64_t *bitmap;
    cmp_topk_t *sel;
} ref_t;

static void ref_free(ref_t *R)
{
    for (int r = 0; r < R->N; r++) {
        free(R->e[r]);
        free(R->acc[r]);
    }
    free(R->e);
    free(R->acc);
    free(R->g);
    free(R->out);
    free(R->set);
    free(R->prev);
    free(R->ewma);
    free(R->have_ewma);
    free(R->score);
    free(R->mark);
    free(R->tmp_idx);
    free(R->tmp_val);
    free(R->bitmap);
    cmp_topk_destroy(R->sel);
}

static void ref_init(ref_t *R, int N, size_t n, size_t k)
{
    memset(R, 0, sizeof(*R));
    R->N = N;
    R->n = n;
    R->k = k;
    R->e = calloc((size_t)N, sizeof(float *));
    R->acc = calloc((size_t)N, sizeof(float *));
    for (int r = 0; r < N; r++) {
        R->e[r] = calloc(n, sizeof(float));
        R->acc[r] = malloc(n * sizeof(float));
    }
    R->g = malloc(n * sizeof(float));
    R->out = malloc(n * sizeof(float));
    R->set = malloc(n * sizeof(int32_t));
    R->prev = malloc(n * sizeof(int32_t));
    R->ewma = calloc((size_t)N, sizeof(double));
    R->have_ewma = calloc((size_t)N, sizeof(int));
    R->score = calloc(n, sizeof(float));
    R->mark = calloc(n, 1);
    R->tmp_idx = malloc(n * sizeof(int32_t));
    R->tmp_val = malloc(n * sizeof(float));
    R->bitmap = calloc(cmp_randk_words(n), sizeof(uint64_t));
    ck_assert_int_eq(cmp_topk_create(n, n, 1, 99, &R->sel), FLX_OK);
}

typedef struct {
    float s;
    int32_t i;
} scored_t;

static int by_score(const void *a, const void *b)
{
    const scored_t *x = a, *y = b;

    if (x->s != y->s)
        return x->s > y->s ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int by_idx(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* VOTE's set from every rank's acc: union of the top-ceil(k/N), scores
 * added in rank order, the k best (sorted reference, independent of the
 * library's merge). */
static size_t ref_vote(ref_t *R, int32_t *set)
{
    size_t kp = (R->k + (size_t)R->N - 1) / (size_t)R->N, u = 0;
    scored_t *all;

    if (kp < 1)
        kp = 1;
    for (int r = 0; r < R->N; r++) {
        cmp_topk_select(R->sel, R->acc[r], R->n, kp, CMP_SELECT_EXACT, R->tmp_idx, R->tmp_val,
                        NULL);
        for (size_t j = 0; j < kp; j++) {
            R->score[R->tmp_idx[j]] += fabsf(R->tmp_val[j]);
            R->mark[R->tmp_idx[j]] = 1;
        }
    }
    all = malloc(R->n * sizeof(scored_t));
    for (size_t i = 0; i < R->n; i++) {
        if (R->mark[i])
            all[u++] = (scored_t){R->score[i], (int32_t)i};
        R->mark[i] = 0;
        R->score[i] = 0;
    }
    if (u > R->k) {
        qsort(all, u, sizeof(scored_t), by_score);
        u = R->k;
    }
    for (size_t j = 0; j < u; j++)
        set[j] = all[j].i;
    qsort(set, u, sizeof(int32_t), by_idx);
    free(all);
    return u;
}

/* The set of this step by the policy (STAR, VAR, VOTE), from acc of step t. */
static size_t ref_choose(ref_t *R, const sparse_cfg_t *cfg, int t, int32_t *set, int *leader_p)
{
    int L = 0;

    if (cfg->leader == FLX_LEADER_VOTE) {
        *leader_p = -1;
        return ref_vote(R, set);
    }
    if (cfg->leader == FLX_LEADER_STAR) {
        L = t % R->N;
    } else {
        for (int r = 1; r < R->N; r++)
            if (R->ewma[r] > R->ewma[L])
                L = r;
    }
    cmp_topk_select(R->sel, R->acc[L], R->n, R->k, CMP_SELECT_EXACT, set, NULL, NULL);
    *leader_p = L;
    return R->k;
}

/* One step of the reference.  Returns 0 when the step fails (bad). */
static int ref_step(ref_t *R, const sparse_cfg_t *cfg, int t)
{
    const int bad = cfg->bad_rank >= 0 && cfg->bad_rank < R->N && t == cfg->bad_step;
    const float div = cfg->op == FLX_AVG ? (float)R->N : 1.0f;
    const int artopk = cfg->method == FLX_COMPRESS_TOPK && cfg->coll == FLX_GSYNC_COLL_ARTOPK;

    for (int r = 0; r < R->N; r++) {
        cmp_ef_sums_t sums;
        grad_fill(R->g, R->n, cfg->salt, R->N, r, t);
        if (bad && r == cfg->bad_rank)
            R->g[R->n / 2] = NAN;
        for (size_t i = 0; i < R->n; i++)
            R->acc[r][i] = R->g[i] + R->e[r][i];
        cmp_ef_accumulate(R->g, NULL, NULL, R->n, &sums);
        if (artopk && cfg->leader == FLX_LEADER_VAR && R->k < R->n && isfinite(sums.g2)) {
            double gn = sqrt(sums.g2);
            R->ewma[r] = R->have_ewma[r] ? (1.0 - 0.1) * R->ewma[r] + 0.1 * gn : gn;
            R->have_ewma[r] = 1;
        }
    }
    if (artopk && R->k < R->n) {
        if (cfg->mode == FLX_INDEX_PREVIOUS && R->have_prev) { /* (k is fixed per run) */
            memcpy(R->set, R->prev, R->prev_k * sizeof(int32_t));
            R->set_k = R->prev_k;
            R->leader = R->prev_leader;
        } else {
            R->set_k = ref_choose(R, cfg, t, R->set, &R->leader);
        }
        R->have_prev = 0;
        if (bad)
            return 0;
        if (cfg->mode == FLX_INDEX_PREVIOUS) {
            R->prev_k = ref_choose(R, cfg, t, R->prev, &R->prev_leader);
            R->have_prev = 1;
        }
    } else if (cfg->method == FLX_COMPRESS_RANDK || artopk) {
        R->have_prev = 0;
        if (bad)
            return 0;
        R->leader = -1;
        R->set_k = R->k;
        if (R->k >= R->n)
            for (size_t i = 0; i < R->n; i++)
                R->set[i] = (int32_t)i;
        else
            cmp_randk_select(R->bitmap, R->n, R->k, 0x5eed, (uint64_t)t, R->set);
    } else if (bad) {
        return 0;
    }
    memset(R->out, 0, R->n * sizeof(float));
    if (cfg->method == FLX_COMPRESS_TOPK && cfg->coll == FLX_GSYNC_COLL_ALLGATHER) {
        for (int r = 0; r < R->N; r++) {
            cmp_topk_select(R->sel, R->acc[r], R->n, R->k, CMP_SELECT_EXACT, R->tmp_idx, NULL,
                            NULL);
            for (size_t j = 0; j < R->k; j++) {
                R->out[R->tmp_idx[j]] += R->acc[r][R->tmp_idx[j]];
                R->acc[r][R->tmp_idx[j]] = 0.0f;
            }
            memcpy(R->e[r], R->acc[r], R->n * sizeof(float));
        }
        for (size_t i = 0; i < R->n; i++)
            R->out[i] /= div;
        R->set_k = R->k;
        R->leader = -1;
        return 1;
    }
    for (size_t j = 0; j < R->set_k; j++) {
        float s = 0;
        for (int r = 0; r < R->N; r++)
            s += R->acc[r][R->set[j]];
        R->out[R->set[j]] = s / div;
    }
    for (int r = 0; r < R->N; r++) {
        for (size_t j = 0; j < R->set_k; j++)
            R->acc[r][R->set[j]] = 0.0f;
        memcpy(R->e[r], R->acc[r], R->n * sizeof(float));
    }
    return 1;
}

static const char *mode_name(flx_index_mode_t m)
{
    return m == FLX_INDEX_SERIAL ? "serial" : m == FLX_INDEX_PREVIOUS ? "previous" : "pipelined";
}

static const char *leader_name(flx_leader_t l)
{
    return l == FLX_LEADER_STAR ? "star" : l == FLX_LEADER_VAR ? "var" : "vote";
}

/* Run one configuration on this rank against the reference. */
static int run_sparse(flx_comm_h comm, int rank, int N, const sparse_cfg_t *cfg)
{
    flx_gsync_opts_t o;
    flx_gsync_h h;
    flx_gsync_report_t rep;
    ref_t R;
    size_t n = cfg->n, k;
    float *g = malloc(n * sizeof(float)), *in = malloc(n * sizeof(float));
    char what[160];
    int rc = 0;
    flx_status_t st;

    flx_gsync_opts_default(&o);
    o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_KEPT_FRACTION | FLX_GSYNC_OPT_SELECT |
                   FLX_GSYNC_OPT_LEADER | FLX_GSYNC_OPT_INDEX_MODE | FLX_GSYNC_OPT_COLLECTIVE |
                   FLX_GSYNC_OPT_OP;
    o.method = cfg->method;
    o.kept_fraction = cfg->c;
    o.select = FLX_SELECT_EXACT;
    o.leader = cfg->leader;
    o.index_mode = cfg->mode;
    o.collective = cfg->coll;
    o.op = cfg->op;
    snprintf(what, sizeof(what), "%s/%s/%s/%s %s N=%d n=%zu c=%g", flx_compress_name(cfg->method),
             flx_gsync_coll_name(cfg->coll), leader_name(cfg->leader), mode_name(cfg->mode),
             flx_op_name(cfg->op), N, n, cfg->c);
    st = flx_gsync_create(comm, n, &o, &h);
    if (st != FLX_OK) {
        free(in);
        free(g);
        return mp_fail(rank, "%s: create: %s", what, flx_status_string(st));
    }
    k = flx_gsync_kept(h);
    ref_init(&R, N, n, k);
    for (int t = 0; t < cfg->steps && rc == 0; t++) {
        int ok;
        grad_fill(g, n, cfg->salt, N, rank, t);
        if (t == cfg->bad_step && rank == cfg->bad_rank)
            g[n / 2] = NAN;
        memcpy(in, g, n * sizeof(float));
        st = flx_gsync_step(h, g, &rep);
        ok = ref_step(&R, cfg, t);
        if (!ok) {
            if (st != FLX_ERR_INVALID_ARG)
                rc = mp_fail(rank, "%s step %d: NaN on rank %d gave %s, want invalid argument",
                             what, t, cfg->bad_rank, flx_status_string(st));
            else if (memcmp(in, g, n * sizeof(float)) != 0)
                rc = mp_fail(rank, "%s step %d: a failed step changed the gradient", what, t);
            else if (memcmp(flx_gsync_residual(h), R.e[rank], n * sizeof(float)) != 0)
                rc = mp_fail(rank, "%s step %d: a failed step changed the residual", what, t);
            continue;
        }
        if (st != FLX_OK) {
            rc = mp_fail(rank, "%s step %d: %s", what, t, flx_status_string(st));
            break;
        }
        for (size_t i = 0; i < n && rc == 0; i++)
            if (memcmp(&g[i], &R.out[i], sizeof(float)) != 0)
                rc = mp_fail(rank, "%s step %d: out[%zu] = %a, reference %a", what, t, i, g[i],
                             R.out[i]);
        for (size_t i = 0; i < n && rc == 0; i++)
            if (memcmp(&flx_gsync_residual(h)[i], &R.e[rank][i], sizeof(float)) != 0)
                rc = mp_fail(rank, "%s step %d: residual[%zu] = %a, reference %a", what, t, i,
                             flx_gsync_residual(h)[i], R.e[rank][i]);
        if (rc == 0 && rep.k != R.set_k)
            rc = mp_fail(rank, "%s step %d: report k = %zu, reference %zu", what, t, rep.k,
                         R.set_k);
        if (rc == 0 && cfg->method == FLX_COMPRESS_TOPK && cfg->leader != FLX_LEADER_VOTE &&
            rep.leader != R.leader)
            rc = mp_fail(rank, "%s step %d: leader %d, reference %d", what, t, rep.leader,
                         R.leader);
        if (rc == 0 && !(rep.gain >= 0 && rep.gain <= 1.0 + 1e-5))
            rc = mp_fail(rank, "%s step %d: gain %g", what, t, rep.gain);
        if (rc == 0)
            rc = same_everywhere(comm, rank, N, g, n, what);
    }
    if (flx_gsync_destroy(h) != FLX_OK && rc == 0)
        rc = mp_fail(rank, "%s: destroy failed", what);
    ref_free(&R);
    free(in);
    free(g);
    return rc;
}

/* ---- the bodies ------------------------------------------------------------------------- */

static int body_artopk(flx_comm_h comm, int rank, int N, void *arg)
{
    static const size_t ns[] = {1, 2, 7, 1000, 65537};
    static const flx_leader_t leaders[] = {FLX_LEADER_STAR, FLX_LEADER_VAR, FLX_LEADER_VOTE};
    static const flx_index_mode_t modes[] = {FLX_INDEX_SERIAL, FLX_INDEX_PREVIOUS,
                                             FLX_INDEX_PIPELINED};
    int cnt = 0;

    (void)arg;
    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
        size_t n = ns[a];
        double cs[] = {1.0 / (double)n, 0.01, 0.1, 0.5, 1.0};
        for (size_t b = 0; b < 5; b++) {
            if (b > 0 && floor(cs[b] * n) == floor(cs[b - 1] * n))
                continue; /* same k */
            for (int l = 0; l < 3; l++) {
                for (int m = 0; m < 3; m++) {
                    sparse_cfg_t cfg = {.method = FLX_COMPRESS_TOPK,
                                        .coll = FLX_GSYNC_COLL_ARTOPK,
                                        .leader = leaders[l],
                                        .mode = modes[m],
                                        .op = (cnt++ & 1) ? FLX_SUM : FLX_AVG,
                                        .n = n,
                                        .c = cs[b],
                                        .steps = n > 10000 ? 3 : 4,
                                        .bad_rank = -1,
                                        .bad_step = -1,
                                        .salt = n * 131 + b};
                    if (run_sparse(comm, rank, N, &cfg))
                        return 1;
                }
            }
        }
    }
    return 0;
}

static int body_allgather_randk(flx_comm_h comm, int rank, int N, void *arg)
{
    static const size_t ns[] = {1, 2, 7, 1000, 65537};
    int cnt = 0;

    (void)arg;
    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
        size_t n = ns[a];
        double cs[] = {1.0 / (double)n, 0.01, 0.1, 0.5, 1.0};
        for (size_t b = 0; b < 5; b++) {
            if (b > 0 && floor(cs[b] * n) == floor(cs[b - 1] * n))
                continue;
            for (int meth = 0; meth < 2; meth++) {
                sparse_cfg_t cfg = {.method = meth ? FLX_COMPRESS_RANDK : FLX_COMPRESS_TOPK,
                                    .coll = meth ? FLX_GSYNC_COLL_ALLREDUCE
                                                 : FLX_GSYNC_COLL_ALLGATHER,
                                    .leader = FLX_LEADER_STAR,
                                    .mode = FLX_INDEX_PIPELINED,
                                    .op = (cnt++ & 1) ? FLX_SUM : FLX_AVG,
                                    .n = n,
                                    .c = cs[b],
                                    .steps = 4,
                                    .bad_rank = -1,
                                    .bad_step = -1,
                                    .salt = n * 17 + b};
                if (run_sparse(comm, rank, N, &cfg))
                    return 1;
            }
        }
    }
    return 0;
}

/* 2 M parameters (every rank also runs the serial reference of all N):
 * AR-Topk (default index mode) and the sparse allgather. */
static int body_large(flx_comm_h comm, int rank, int N, void *arg)
{
    sparse_cfg_t cfg = {.method = FLX_COMPRESS_TOPK,
                        .coll = FLX_GSYNC_COLL_ARTOPK,
                        .leader = FLX_LEADER_STAR,
                        .mode = FLX_INDEX_DEFAULT,
                        .op = FLX_AVG,
                        .n = 2000003,
                        .c = 0.01,
                        .steps = 2,
                        .bad_rank = -1,
                        .bad_step = -1,
                        .salt = 5};

    (void)arg;
    if (run_sparse(comm, rank, N, &cfg))
        return 1;
    cfg.coll = FLX_GSYNC_COLL_ALLGATHER;
    cfg.steps = 1;
    return run_sparse(comm, rank, N, &cfg);
}

/* Small pipeline chunks (FLX_CHUNK_SIZE=4k, set by the test case): the
 * pipelined ring and the allgathers run many chunks a segment. */
static int body_chunked(flx_comm_h comm, int rank, int N, void *arg)
{
    static const flx_index_mode_t modes[] = {FLX_INDEX_SERIAL, FLX_INDEX_PREVIOUS,
                                             FLX_INDEX_PIPELINED};
    static const double cs[] = {0.1, 0.5, 0.9};

    (void)arg;
    for (int m = 0; m < 3; m++) {
        for (int b = 0; b < 3; b++) {
            sparse_cfg_t cfg = {.method = FLX_COMPRESS_TOPK, .coll = FLX_GSYNC_COLL_ARTOPK,
                                .leader = m == 1 ? FLX_LEADER_VAR : FLX_LEADER_STAR,
                                .mode = modes[m], .op = FLX_AVG, .n = 65537, .c = cs[b],
                                .steps = 3, .bad_rank = -1, .bad_step = -1, .salt = 8};
            if (run_sparse(comm, rank, N, &cfg))
                return 1;
        }
    }
    {
        sparse_cfg_t cfg = {.method = FLX_COMPRESS_TOPK, .coll = FLX_GSYNC_COLL_ALLGATHER,
                            .leader = FLX_LEADER_STAR, .mode = FLX_INDEX_PIPELINED,
                            .op = FLX_SUM, .n = 65537, .c = 0.3, .steps = 2, .bad_rank = -1,
                            .bad_step = -1, .salt = 9};
        return run_sparse(comm, rank, N, &cfg);
    }
}

/* NaN on one rank: every rank fails that step, nothing changes, the next
 * steps match the reference (which skips the failed step's updates). */
static int body_bad_gradient(flx_comm_h comm, int rank, int N, void *arg)
{
    static const flx_index_mode_t modes[] = {FLX_INDEX_SERIAL, FLX_INDEX_PREVIOUS,
                                             FLX_INDEX_PIPELINED};
    static const flx_leader_t leaders[] = {FLX_LEADER_STAR, FLX_LEADER_VAR, FLX_LEADER_VOTE};

    (void)arg;
    for (int m = 0; m < 3; m++) {
        for (int l = 0; l < 3; l++) {
            sparse_cfg_t cfg = {.method = FLX_COMPRESS_TOPK, .coll = FLX_GSYNC_COLL_ARTOPK,
                                .leader = leaders[l], .mode = modes[m], .op = FLX_AVG,
                                .n = 5000, .c = 0.01, .steps = 5, .bad_rank = N - 1,
                                .bad_step = 2, .salt = 3};
            if (run_sparse(comm, rank, N, &cfg))
                return 1;
        }
    }
    for (int meth = 0; meth < 2; meth++) {
        sparse_cfg_t cfg = {.method = meth ? FLX_COMPRESS_RANDK : FLX_COMPRESS_TOPK,
                            .coll = meth ? FLX_GSYNC_COLL_ALLREDUCE : FLX_GSYNC_COLL_ALLGATHER,
                            .leader = FLX_LEADER_STAR, .mode = FLX_INDEX_PIPELINED,
                            .op = FLX_SUM, .n = 5000, .c = 0.02, .steps = 4,
                            .bad_rank = 0, .bad_step = 1, .salt = 4};
        if (run_sparse(comm, rank, N, &cfg))
            return 1;
    }
    /* the other methods: the step fails everywhere, the gradient is untouched */
    for (int meth = FLX_COMPRESS_FP16; meth <= FLX_COMPRESS_POWERSGD; meth++) {
        flx_gsync_opts_t o;
        flx_gsync_h h;
        size_t n = 3000;
        float *g = malloc(n * sizeof(float)), *in = malloc(n * sizeof(float));
        flx_status_t st;
        flx_gsync_opts_default(&o);
        o.field_mask = FLX_GSYNC_OPT_METHOD;
        o.method = (flx_compress_t)meth;
        if (flx_gsync_create(comm, n, &o, &h) != FLX_OK)
            return mp_fail(rank, "create %s", flx_compress_name(o.method));
        for (int t = 0; t < 3; t++) {
            grad_fill(g, n, 9, N, rank, t);
            if (t == 1 && rank == N / 2)
                g[7] = INFINITY;
            memcpy(in, g, n * sizeof(float));
            st = flx_gsync_step(h, g, NULL);
            if (t == 1 && (st != FLX_ERR_INVALID_ARG || memcmp(in, g, n * sizeof(float)) != 0))
                return mp_fail(rank, "%s: Inf on rank %d: %s, gradient %s",
                               flx_compress_name(o.method), N / 2, flx_status_string(st),
                               memcmp(in, g, n * sizeof(float)) ? "changed" : "kept");
            if (t != 1 && st != FLX_OK)
                return mp_fail(rank, "%s step %d: %s", flx_compress_name(o.method), t,
                               flx_status_string(st));
            if (t != 1 && same_everywhere(comm, rank, N, g, n, flx_compress_name(o.method)))
                return 1;
        }
        flx_gsync_destroy(h);
        free(in);
        free(g);
    }
    return 0;
}

/* A finite gradient whose sum with its residual overflows: rank 0 sends
 * 3e38 everywhere at step 0 (top-k keeps 95% of it in the residual, the
 * others' small values add to the 5% sent without overflow), again at
 * step 1: g + e is Inf there, every rank fails the step, rank 0's one
 * line says the sum with the residual overflowed (not that the gradient
 * holds NaN or Inf, which it does not), the residual stays, and a small
 * gradient at step 2 goes through. */
static int body_residual_overflow(flx_comm_h comm, int rank, int N)
{
    const size_t n = 2000;
    float *g = malloc(n * sizeof(float)), *e_old = malloc(n * sizeof(float));
    char path[] = "/tmp/flx_overflow_XXXXXX";
    int saved = -1, said = 0;
    flx_gsync_opts_t o;
    flx_gsync_h h;
    flx_status_t st;

    if (g == NULL || e_old == NULL)
        return mp_fail(rank, "out of memory");
    flx_gsync_opts_default(&o);
    o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_KEPT_FRACTION | FLX_GSYNC_OPT_OP;
    o.method = FLX_COMPRESS_TOPK;
    o.kept_fraction = 0.05;
    o.op = FLX_SUM;
    if (flx_gsync_create(comm, n, &o, &h) != FLX_OK)
        return mp_fail(rank, "create topk");
    for (int t = 0; t < 3; t++) {
        grad_fill(g, n, 13, N, rank, t);
        if (rank == 0 && t < 2)
            for (size_t i = 0; i < n; i++)
                g[i] = 3e38f;
        memcpy(e_old, flx_gsync_residual(h), n * sizeof(float));
        if (t == 1 && rank == 0)
            saved = mp_capture_start(path);
        st = flx_gsync_step(h, g, NULL);
        if (t == 1 && rank == 0) {
            said = mp_capture_stop(saved, path, "the gradient plus its residual overflows float");
            if (said != 1)
                return mp_fail(rank, "%d lines say the gradient plus its residual overflowed",
                               said);
        }
        if (t == 1) {
            if (st != FLX_ERR_INVALID_ARG)
                return mp_fail(rank, "g + e overflowing on rank 0 gave %s", flx_status_string(st));
            if (memcmp(e_old, flx_gsync_residual(h), n * sizeof(float)) != 0)
                return mp_fail(rank, "the failed step changed the residual");
            continue;
        }
        if (st != FLX_OK)
            return mp_fail(rank, "residual overflow, step %d: %s", t, flx_status_string(st));
        if (t == 0 && rank == 0 && !(flx_gsync_residual(h)[0] == 3e38f ||
                                     flx_gsync_residual(h)[n - 1] == 3e38f))
            return mp_fail(rank, "step 0 kept no 3e38 in the residual");
        if (same_everywhere(comm, rank, N, g, n, "residual overflow"))
            return 1;
    }
    flx_gsync_destroy(h);
    free(e_old);
    free(g);
    return 0;
}

/* Finite gradients whose sum overflows float (3e38 everywhere on every
 * rank; PowerSGD's products overflow even on one rank): every rank fails
 * the step with FLX_ERR_INVALID_ARG, the residuals stay as they were, and
 * the next step works (PowerSGD's warm-start Q is back to its last good
 * value).  Sparse methods on one rank have nothing to overflow. */
static int body_overflow(flx_comm_h comm, int rank, int N, void *arg)
{
    static const struct {
        flx_compress_t method;
        flx_gsync_coll_t coll;
    } cases[] = {{FLX_COMPRESS_TOPK, FLX_GSYNC_COLL_ARTOPK},
                 {FLX_COMPRESS_TOPK, FLX_GSYNC_COLL_ALLGATHER},
                 {FLX_COMPRESS_RANDK, FLX_GSYNC_COLL_ALLREDUCE},
                 {FLX_COMPRESS_QSGD8, FLX_GSYNC_COLL_ALLGATHER},
                 {FLX_COMPRESS_POWERSGD, FLX_GSYNC_COLL_ALLREDUCE}};
    const size_t n = 3000;
    float *g = malloc(n * sizeof(float)), *e_old = malloc(n * sizeof(float));

    (void)arg;
    for (size_t c = 0; c < FLX_ARRAY_SIZE(cases); c++) {
        const char *name = flx_compress_name(cases[c].method);
        int overflows = N > 1 || cases[c].method == FLX_COMPRESS_POWERSGD;
        flx_gsync_opts_t o;
        flx_gsync_h h;
        flx_status_t st;

        flx_gsync_opts_default(&o);
        o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_KEPT_FRACTION | FLX_GSYNC_OPT_OP;
        o.method = cases[c].method;
        o.kept_fraction = 0.05;
        o.op = FLX_SUM;
        if (cases[c].method == FLX_COMPRESS_TOPK) {
            o.field_mask |= FLX_GSYNC_OPT_COLLECTIVE;
            o.collective = cases[c].coll;
        }
        if (flx_gsync_create(comm, n, &o, &h) != FLX_OK)
            return mp_fail(rank, "create %s", name);
        for (int t = 0; t < 3; t++) {
            const float *e = flx_gsync_residual(h);
            grad_fill(g, n, 11, N, rank, t);
            if (t == 1)
                for (size_t i = 0; i < n; i++)
                    g[i] = 3e38f;
            if (e)
                memcpy(e_old, e, n * sizeof(float));
            st = flx_gsync_step(h, g, NULL);
            if (t == 1 && overflows) {
                if (st != FLX_ERR_INVALID_ARG)
                    return mp_fail(rank, "%s: overflowing sum gave %s", name,
                                   flx_status_string(st));
                if (e && memcmp(e_old, flx_gsync_residual(h), n * sizeof(float)) != 0)
                    return mp_fail(rank, "%s: a failed step changed the residuals", name);
                continue;
            }
            if (st != FLX_OK)
                return mp_fail(rank, "%s step %d: %s", name, t, flx_status_string(st));
            for (size_t i = 0; i < n; i++)
                if (!isfinite(g[i]))
                    return mp_fail(rank, "%s step %d: element %zu is %g", name, t, i, g[i]);
            if (same_everywhere(comm, rank, N, g, n, name))
                return 1;
        }
        flx_gsync_destroy(h);
    }
    free(e_old);
    free(g);
    return body_residual_overflow(comm, rank, N);
}

/* Pipelined AR-Topk with an index outside the gradient in the leader's set
 * (what a corrupt peer would send): the ranks that receive it refuse it
 * (FLX_ERR_PROTOCOL, one log line) and never read outside acc; the others
 * hear of it (FLX_ERR_PEER_LOST); nobody waits for the timeout.  Exit code
 * 10: refused here, 11: told. */
static int body_pipe_bad_index(flx_comm_h comm, int rank, int N, void *arg)
{
    int32_t idx[3] = {3, 150, 7};
    float acc[100], val[4];
    uint64_t bytes = 0;
    flx_status_t st;
    double t0 = flx_time_now();

    (void)arg;
    (void)N;
    for (int i = 0; i < 100; i++)
        acc[i] = (float)i;
    if (rank != 0)
        memset(idx, 0, sizeof(idx));
    st = cmp_artopk_pipe(comm, 0, idx, 3, 100, acc, 0.0f, val, &bytes);
    if (flx_time_now() - t0 > 10.0)
        return mp_fail(rank, "the refusal took %.1f s", flx_time_now() - t0);
    if (st == FLX_ERR_PROTOCOL)
        return 10;
    if (st == FLX_ERR_PEER_LOST)
        return 11;
    return mp_fail(rank, "index 150 of 100 gave %s", flx_status_string(st));
}

START_TEST(test_pipe_bad_index)
{
    int n = _i, codes[8], refused = 0;

    if (!mp_nranks_wanted(n))
        return;
    setenv("FLX_TIMEOUT", "20s", 1);
    mp_run(n, body_pipe_bad_index, NULL, 60, codes);
    unsetenv("FLX_TIMEOUT");
    for (int r = 0; r < n; r++) {
        ck_assert_msg(codes[r] == 10 || codes[r] == 11, "rank %d exit %d", r, codes[r]);
        refused += codes[r] == 10;
    }
    ck_assert_msg(refused > 0, "no rank refused the index");
}
END_TEST

/* Bad arguments: local errors, no communication, the object keeps working. */
static int body_bad_args(flx_comm_h comm, int rank, int N, void *arg)
{
    static const double bad_c[] = {0.0, -0.5, 1.5, NAN, INFINITY};
    flx_gsync_opts_t o;
    flx_gsync_h h = NULL;
    float g[100];

    (void)arg;
    flx_gsync_opts_default(&o);
    o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_KEPT_FRACTION;
    o.method = FLX_COMPRESS_TOPK;
    for (size_t i = 0; i < 5; i++) {
        o.kept_fraction = bad_c[i];
        if (flx_gsync_create(comm, 100, &o, &h) != FLX_ERR_INVALID_ARG)
            return mp_fail(rank, "kept fraction %g accepted", bad_c[i]);
    }
    o.kept_fraction = 0.1;
    if (flx_gsync_create(comm, 0, &o, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "n = 0 accepted");
    if (flx_gsync_create(comm, (size_t)1 << 31, &o, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "n = 2^31 accepted (int32 indices)");
    if (flx_gsync_create(NULL, 100, &o, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "NULL comm accepted");
    o.method = FLX_COMPRESS_COUNT;
    if (flx_gsync_create(comm, 100, &o, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "unknown method accepted");
    o.method = FLX_COMPRESS_QSGD8; /* a method that picks no collective: still checked */
    o.field_mask |= FLX_GSYNC_OPT_COLLECTIVE;
    o.collective = (flx_gsync_coll_t)9;
    if (flx_gsync_create(comm, 100, &o, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "unknown collective 9 accepted");
    o.collective = FLX_GSYNC_COLL_AUTO;
    o.field_mask &= ~(uint64_t)FLX_GSYNC_OPT_COLLECTIVE;
    o.method = FLX_COMPRESS_POWERSGD;
    o.field_mask |= FLX_GSYNC_OPT_POWERSGD_RANK;
    o.powersgd_rank = 0;
    if (flx_gsync_create(comm, 100, &o, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "PowerSGD rank 0 accepted");
    o.method = FLX_COMPRESS_TOPK;
    o.powersgd_rank = 4;
    o.field_mask |= FLX_GSYNC_OPT_OP;
    o.op = FLX_MAX;
    if (flx_gsync_create(comm, 100, &o, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "op max accepted");
    o.op = FLX_AVG;
    if (flx_gsync_create(comm, 100, &o, &h) != FLX_OK)
        return mp_fail(rank, "a good create failed");
    for (size_t i = 0; i < 5; i++)
        if (flx_gsync_set_kept_fraction(h, bad_c[i]) != FLX_ERR_INVALID_ARG)
            return mp_fail(rank, "set_kept_fraction(%g) accepted", bad_c[i]);
    if (flx_gsync_kept(h) != 10)
        return mp_fail(rank, "a refused kept fraction changed k to %zu", flx_gsync_kept(h));
    { /* c n as exact arithmetic has it: 0.29 * 100 is 28.999999999999996 in
       * doubles (k was 28), 0.011 * 23000 252.99999999999997 */
        flx_gsync_h h2;

        if (flx_gsync_set_kept_fraction(h, 0.29) != FLX_OK || flx_gsync_kept(h) != 29)
            return mp_fail(rank, "kept fraction 0.29 of 100 keeps %zu, not 29", flx_gsync_kept(h));
        if (flx_gsync_create(comm, 23000, &o, &h2) != FLX_OK)
            return mp_fail(rank, "a good create of 23000 failed");
        if (flx_gsync_set_kept_fraction(h2, 0.011) != FLX_OK || flx_gsync_kept(h2) != 253)
            return mp_fail(rank, "kept fraction 0.011 of 23000 keeps %zu, not 253",
                           flx_gsync_kept(h2));
        flx_gsync_destroy(h2);
    }
    if (flx_gsync_step(h, NULL, NULL) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "NULL gradient accepted");
    if (flx_gsync_set_collective(h, FLX_GSYNC_COLL_ALLREDUCE) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "top-k by dense allreduce accepted");
    if (flx_gsync_set_collective(h, FLX_GSYNC_COLL_ALLGATHER) != FLX_ERR_UNSUPPORTED)
        return mp_fail(rank, "a collective not prepared at create accepted");
    /* still works, and k grows on demand */
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < 100; i++)
            g[i] = grad_value(1, N, rank, t, (size_t)i);
        if (flx_gsync_set_kept_fraction(h, t == 2 ? 1.0 : 0.2 * (t + 1)) != FLX_OK ||
            flx_gsync_step(h, g, NULL) != FLX_OK)
            return mp_fail(rank, "step after bad arguments failed");
        if (same_everywhere(comm, rank, N, g, 100, "after bad arguments"))
            return 1;
    }
    if (flx_gsync_destroy(h) != FLX_OK || flx_gsync_destroy(NULL) != FLX_OK)
        return mp_fail(rank, "destroy");
    return 0;
}

/* Casts on dyadic data are exact: out = sum / N of the casts, residual 0;
 * on normal data every rank agrees and the error is one half ulp a rank. */
static int body_casts(flx_comm_h comm, int rank, int N, void *arg)
{
    size_t n = 40001;
    float *g = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    int rc = 0;

    (void)arg;
    for (int m = 0; m < 2 && rc == 0; m++) {
        flx_gsync_opts_t o;
        flx_gsync_h h;
        flx_gsync_opts_default(&o);
        o.field_mask = FLX_GSYNC_OPT_METHOD;
        o.method = m ? FLX_COMPRESS_BF16 : FLX_COMPRESS_FP16;
        if (flx_gsync_create(comm, n, &o, &h) != FLX_OK)
            return mp_fail(rank, "cast create");
        for (int t = 0; t < 3 && rc == 0; t++) {
            memset(want, 0, n * sizeof(float));
            for (int r = 0; r < N; r++)
                for (size_t i = 0; i < n; i++) /* multiples of 1/8 in [-1, 1] */
                    want[i] += (float)((int)(mix((uint64_t)r * 1000003 + (uint64_t)t * 7 + i) % 17) - 8) / 8.0f;
            for (size_t i = 0; i < n; i++) {
                want[i] /= (float)N;
                g[i] = (float)((int)(mix((uint64_t)rank * 1000003 + (uint64_t)t * 7 + i) % 17) - 8) / 8.0f;
            }
            if (flx_gsync_step(h, g, NULL) != FLX_OK)
                rc = mp_fail(rank, "%s step", flx_compress_name(o.method));
            for (size_t i = 0; i < n && rc == 0; i++) {
                /* the sum is exact in both types; the mean rounds once */
                float w = m ? flx_bf16_to_float(flx_float_to_bf16(want[i]))
                            : flx_half_to_float(flx_float_to_half(want[i]));
                if (fabsf(g[i] - want[i]) > fabsf(w - want[i]) + 1e-7f)
                    rc = mp_fail(rank, "%s [%zu] = %g, want %g", flx_compress_name(o.method), i,
                                 g[i], want[i]);
            }
            for (size_t i = 0; i < n && rc == 0; i++)
                if (flx_gsync_residual(h)[i] != 0.0f)
                    rc = mp_fail(rank, "%s residual [%zu] = %g on exact data",
                                 flx_compress_name(o.method), i, flx_gsync_residual(h)[i]);
            if (rc == 0)
                rc = same_everywhere(comm, rank, N, g, n, flx_compress_name(o.method));
        }
        /* fp16: values that fit alone but whose sum does not (2 x 40000 >
         * 65504).  With error feedback each rank sends at most its share of
         * the range (the largest half h with N h <= 65504), the rest waits
         * in the residual and the step succeeds (it failed, and for good
         * while the residual held the value); without, the step fails on
         * every rank instead of returning Inf */
        if (m == 0 && N > 1 && rc == 0) {
            const float share_f = (65504.0f - 16.0f * (float)(N - 1)) / (float)N;
            uint16_t sh = flx_float_to_half(share_f);
            float share;
            flx_status_t st;
            flx_gsync_h h2;

            if (flx_half_to_float(sh) > share_f)
                sh--;
            share = flx_half_to_float(sh);
            for (size_t i = 0; i < n; i++)
                g[i] = 0.5f;
            g[n - 1] = 0.3f; /* its fp16 rounding stays in the residual */
            if (flx_gsync_step(h, g, NULL) != FLX_OK)
                rc = mp_fail(rank, "fp16 step before the large value");
            memcpy(want, flx_gsync_residual(h), n * sizeof(float));
            for (size_t i = 0; i < n && rc == 0; i++)
                g[i] = i == n / 2 ? 40000.0f : 0.5f;
            if (rc == 0 && (st = flx_gsync_step(h, g, NULL)) != FLX_OK)
                rc = mp_fail(rank, "fp16, 40000 on %d ranks: %s", N, flx_status_name(st));
            if (rc == 0 && fabsf(g[n / 2] - share) > 0.002f * share)
                rc = mp_fail(rank, "fp16, 40000 on %d ranks: the mean is %g, not about one "
                             "rank's share %g", N, g[n / 2], share);
            if (rc == 0 && flx_gsync_residual(h)[n / 2] != 40000.0f - share)
                rc = mp_fail(rank, "fp16, 40000 on %d ranks: residual %g, not %g", N,
                             flx_gsync_residual(h)[n / 2], 40000.0f - share);
            if (rc == 0 && want[n - 1] == 0.0f)
                rc = mp_fail(rank, "no fp16 rounding kept in the residual: the check is void");
            o.field_mask |= FLX_GSYNC_OPT_ERROR_FEEDBACK;
            o.error_feedback = 0;
            if (rc == 0 && flx_gsync_create(comm, n, &o, &h2) != FLX_OK)
                rc = mp_fail(rank, "fp16 create without error feedback");
            if (rc == 0) {
                for (size_t i = 0; i < n; i++)
                    g[i] = i == n / 2 ? 40000.0f : 0.5f;
                if ((st = flx_gsync_step(h2, g, NULL)) != FLX_ERR_INVALID_ARG)
                    rc = mp_fail(rank, "fp16 sum overflow without error feedback: %s, not "
                                 "FLX_ERR_INVALID_ARG", flx_status_name(st));
                flx_gsync_destroy(h2);
            }
        }
        flx_gsync_destroy(h);
    }
    free(want);
    free(g);
    return rc;
}

/* QSGD: identical everywhere, within one quantisation level (per rank) of
 * the mean; the mean over steps of out + change in residual tracks g. */
static int body_qsgd(flx_comm_h comm, int rank, int N, void *arg)
{
    size_t n = 30011;
    float *g = malloc(n * sizeof(float));
    double *want = calloc(n, sizeof(double));
    flx_gsync_opts_t o;
    flx_gsync_h h;
    int rc = 0;

    (void)arg;
    flx_gsync_opts_default(&o);
    o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_ERROR_FEEDBACK | FLX_GSYNC_OPT_QSGD_BUCKET;
    o.method = FLX_COMPRESS_QSGD8;
    o.error_feedback = 0;
    o.qsgd_bucket = 256;
    if (flx_gsync_create(comm, n, &o, &h) != FLX_OK)
        return mp_fail(rank, "qsgd create");
    for (int t = 0; t < 3 && rc == 0; t++) {
        double bound = 0;
        for (int r = 0; r < N; r++) {
            double scale = 0;
            grad_fill(g, n, 21, N, r, t);
            for (size_t i = 0; i < n; i++)
                scale = fmax(scale, fabs(g[i]));
            bound += scale / 127.0 / N; /* at most one level per rank */
            for (size_t i = 0; i < n; i++)
                want[i] = (r ? want[i] : 0) + g[i] / (double)N;
        }
        grad_fill(g, n, 21, N, rank, t);
        if (flx_gsync_step(h, g, NULL) != FLX_OK)
            rc = mp_fail(rank, "qsgd step");
        for (size_t i = 0; i < n && rc == 0; i++)
            if (fabs(g[i] - want[i]) > bound * 1.001 + 1e-6)
                rc = mp_fail(rank, "qsgd [%zu] = %g, mean %g, bound %g", i, g[i], want[i], bound);
        if (rc == 0)
            rc = same_everywhere(comm, rank, N, g, n, "qsgd");
    }
    flx_gsync_destroy(h);
    free(want);
    free(g);
    return rc;
}

/* PowerSGD: full rank reconstructs the mean; low rank with error feedback
 * telescopes on every rank. */
static int body_powersgd(flx_comm_h comm, int rank, int N, void *arg)
{
    static const size_t ns[] = {1, 100, 400, 1000};
    int rc = 0;

    (void)arg;
    for (size_t a = 0; a < 4 && rc == 0; a++) {
        size_t n = ns[a];
        float *g = malloc(n * sizeof(float));
        double *mean = calloc(n, sizeof(double)), err = 0, norm = 0;
        flx_gsync_opts_t o;
        flx_gsync_h h;
        flx_gsync_opts_default(&o);
        o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_POWERSGD_RANK;
        o.method = FLX_COMPRESS_POWERSGD;
        o.powersgd_rank = 1000; /* clamped to the full rank */
        if (flx_gsync_create(comm, n, &o, &h) != FLX_OK)
            return mp_fail(rank, "powersgd create");
        for (int r = 0; r < N; r++) {
            grad_fill(g, n, 31, N, r, 0);
            for (size_t i = 0; i < n; i++)
                mean[i] += g[i] / (double)N;
        }
        grad_fill(g, n, 31, N, rank, 0);
        if (flx_gsync_step(h, g, NULL) != FLX_OK)
            rc = mp_fail(rank, "powersgd step");
        for (size_t i = 0; i < n; i++) {
            err += (g[i] - mean[i]) * (g[i] - mean[i]);
            norm += mean[i] * mean[i];
        }
        if (rc == 0 && !(sqrt(err) <= 1e-4 * sqrt(norm) + 1e-6))
            rc = mp_fail(rank, "full-rank PowerSGD n=%zu: error %g of %g", n, sqrt(err),
                         sqrt(norm));
        if (rc == 0)
            rc = same_everywhere(comm, rank, N, g, n, "powersgd full rank");
        flx_gsync_destroy(h);
        free(mean);
        free(g);
    }
    /* low rank, error feedback: sum_t g_t - sum_t out_t = e_T */
    if (rc == 0) {
        size_t n = 2500;
        float *g = malloc(n * sizeof(float));
        double *sg = calloc(n, sizeof(double)), *so = calloc(n, sizeof(double)), dev = 0, sz = 0;
        flx_gsync_opts_t o;
        flx_gsync_h h;
        const float *e;
        flx_gsync_opts_default(&o);
        o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_POWERSGD_RANK;
        o.method = FLX_COMPRESS_POWERSGD;
        o.powersgd_rank = 2;
        if (flx_gsync_create(comm, n, &o, &h) != FLX_OK)
            return mp_fail(rank, "powersgd create");
        for (int t = 0; t < 6 && rc == 0; t++) {
            grad_fill(g, n, 41, N, rank, t);
            for (size_t i = 0; i < n; i++)
                sg[i] += g[i];
            if (flx_gsync_step(h, g, NULL) != FLX_OK)
                rc = mp_fail(rank, "powersgd step %d", t);
            for (size_t i = 0; i < n; i++)
                so[i] += g[i];
        }
        e = flx_gsync_residual(h);
        for (size_t i = 0; i < n; i++) {
            dev += (sg[i] - so[i] - e[i]) * (sg[i] - so[i] - e[i]);
            sz += sg[i] * sg[i];
        }
        if (rc == 0 && !(sqrt(dev) <= 1e-5 * sqrt(sz)))
            rc = mp_fail(rank, "PowerSGD error feedback does not telescope: %g of %g", sqrt(dev),
                         sqrt(sz));
        /* and low rank does lose something: the residual is not zero */
        if (rc == 0 && N > 1) {
            double en = 0;
            for (size_t i = 0; i < n; i++)
                en += (double)e[i] * e[i];
            if (en == 0)
                rc = mp_fail(rank, "rank-2 PowerSGD reconstructed everything");
        }
        flx_gsync_destroy(h);
        free(so);
        free(sg);
        free(g);
    }
    return rc;
}

/* allgatherv: ring and Bruck, counts 0, 1, large, capacity errors. */
static int body_allgatherv(flx_comm_h comm, int rank, int N, void *arg)
{
    static const flx_algo_t algos[] = {FLX_ALGO_RING, FLX_ALGO_RD, FLX_ALGO_AUTO};
    size_t *counts = calloc((size_t)N, sizeof(size_t)), *displs = calloc((size_t)N, sizeof(size_t));
    size_t cap = 0;
    int rc = 0;

    (void)arg;
    for (int r = 0; r < N; r++)
        cap += (size_t)r * 300007 + 3;
    cap = cap < 1000 ? 1000 : cap;
    for (int shape = 0; shape < 4 && rc == 0; shape++) {
        for (int a = 0; a < 3 && rc == 0; a++) {
            size_t mine, total = 0;
            unsigned char *send, *recv = malloc(cap + 1);
            flx_status_t st;
            /* shape 0: r*300007+3 bytes; 1: zeros except rank N-1; 2: all zero; 3: 1 byte */
            mine = shape == 0 ? (size_t)rank * 300007 + 3
                   : shape == 1 ? (rank == N - 1 ? 1000 : 0)
                   : shape == 2 ? 0 : 1;
            send = malloc(mine + 1);
            for (size_t i = 0; i < mine; i++)
                send[i] = (unsigned char)(rank * 31 + i * 7);
            st = coll_allgatherv(comm, send, mine, recv, cap, counts, displs, FLX_INT64,
                                algos[a]);
            if (st != FLX_OK)
                rc = mp_fail(rank, "allgatherv shape %d %s: %s", shape, flx_algo_name(algos[a]),
                             flx_status_string(st));
            for (int r = 0; r < N && rc == 0; r++) {
                size_t want = shape == 0 ? (size_t)r * 300007 + 3
                              : shape == 1 ? (r == N - 1 ? 1000 : 0)
                              : shape == 2 ? 0 : 1;
                if (counts[r] != want || displs[r] != total)
                    rc = mp_fail(rank, "allgatherv: rank %d count %zu displ %zu", r, counts[r],
                                 displs[r]);
                for (size_t i = 0; i < want && rc == 0; i++)
                    if (recv[displs[r] + i] != (unsigned char)(r * 31 + i * 7))
                        rc = mp_fail(rank, "allgatherv shape %d %s: block %d byte %zu", shape,
                                     flx_algo_name(algos[a]), r, i);
                total += want;
            }
            free(send);
            free(recv);
        }
    }
    /* too small a buffer: invalid argument everywhere, the communicator lives */
    if (rc == 0) {
        char buf[64], one[8] = {0};
        flx_status_t st = coll_allgatherv(comm, one, 8, buf, 8 * (size_t)N - 1, counts, displs,
                                          FLX_INT64, FLX_ALGO_AUTO);
        if (st != FLX_ERR_INVALID_ARG)
            rc = mp_fail(rank, "allgatherv into a short buffer: %s", flx_status_string(st));
        else if (flx_barrier(comm) != FLX_OK)
            rc = mp_fail(rank, "communicator broken after a refused allgatherv");
    }
    /* the public wrapper counts elements */
    if (rc == 0) {
        float mine[3] = {(float)rank, 1, 2}, *all = malloc(sizeof(float) * 3 * (size_t)N);
        flx_status_t st = flx_allgatherv(comm, mine, (size_t)(rank % 3) + 1, all, 3 * (size_t)N,
                                         counts, displs, FLX_FLOAT32, FLX_ALGO_AUTO);
        if (st != FLX_OK)
            rc = mp_fail(rank, "flx_allgatherv: %s", flx_status_string(st));
        for (int r = 0; r < N && rc == 0; r++)
            if (counts[r] != (size_t)(r % 3) + 1 || all[displs[r]] != (float)r)
                rc = mp_fail(rank, "flx_allgatherv: rank %d block", r);
        free(all);
    }
    /* rank 1's input lies in block 0's place of its output: the ring sent
     * it from there while rank 0's block landed on it (FLX_OK, block 1
     * all rank 0's data); now it is copied into place first */
    for (int a = 0; a < 2 && rc == 0; a++) {
        const flx_algo_t algo = a == 0 ? FLX_ALGO_RING : FLX_ALGO_RD;
        const size_t cnt = 1000;
        int32_t *all = calloc(cnt * (size_t)N, sizeof(int32_t));
        int32_t *mine = rank == 1 ? all : malloc(cnt * sizeof(int32_t));
        flx_status_t st;

        if (all == NULL || mine == NULL) {
            rc = mp_fail(rank, "no memory");
            break;
        }
        for (size_t i = 0; i < cnt; i++)
            mine[i] = rank * 1000003 + (int32_t)i;
        st = flx_allgatherv(comm, mine, cnt, all, cnt * (size_t)N, counts, displs, FLX_INT32,
                            algo);
        if (st != FLX_OK)
            rc = mp_fail(rank, "flx_allgatherv, input in block 0 on rank 1 (%s): %s",
                         flx_algo_name(algo), flx_status_string(st));
        for (int r = 0; r < N && rc == 0; r++)
            for (size_t i = 0; i < cnt && rc == 0; i++)
                if (all[(size_t)r * cnt + i] != r * 1000003 + (int32_t)i)
                    rc = mp_fail(rank, "flx_allgatherv, input in block 0 on rank 1 (%s): "
                                 "block %d element %zu is %d", flx_algo_name(algo), r, i,
                                 all[(size_t)r * cnt + i]);
        if (mine != all)
            free(mine);
        free(all);
    }
    free(displs);
    free(counts);
    return rc;
}

/* Approximate selection and the AUTO collective: no serial reference (the
 * approximate fill is not predictable), but every rank must agree and the
 * error-feedback identity must hold. */
static int body_approx_auto(flx_comm_h comm, int rank, int N, void *arg)
{
    size_t n = 300007;
    float *g = malloc(n * sizeof(float)), *in = malloc(n * sizeof(float));
    float *e_old = calloc(n, sizeof(float));
    flx_gsync_opts_t o;
    flx_gsync_h h;
    int rc = 0;

    (void)arg;
    flx_gsync_opts_default(&o);
    o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_COLLECTIVE | FLX_GSYNC_OPT_KEPT_FRACTION |
                   FLX_GSYNC_OPT_THREADS;
    o.method = FLX_COMPRESS_TOPK;
    o.collective = FLX_GSYNC_COLL_AUTO;
    o.kept_fraction = 0.01;
    o.threads = 2;
    if (flx_gsync_create(comm, n, &o, &h) != FLX_OK)
        return mp_fail(rank, "auto create");
    for (int t = 0; t < 6 && rc == 0; t++) {
        flx_gsync_report_t rep;
        double sent = 0;
        if (t == 3 && (flx_gsync_set_collective(h, FLX_GSYNC_COLL_ALLGATHER) != FLX_OK ||
                       flx_gsync_set_kept_fraction(h, 0.05) != FLX_OK))
            rc = mp_fail(rank, "switching collective / kept fraction");
        if (t == 5 && flx_gsync_set_collective(h, FLX_GSYNC_COLL_ARTOPK) != FLX_OK)
            rc = mp_fail(rank, "switching back");
        grad_fill(g, n, 51, N, rank, t);
        memcpy(in, g, n * sizeof(float));
        if (flx_gsync_step(h, g, &rep) != FLX_OK)
            rc = mp_fail(rank, "approx step %d", t);
        if (rc == 0)
            rc = same_everywhere(comm, rank, N, g, n, "approx/auto");
        /* e_new + (this rank's part of what was sent) == g + e_old: the
         * residual is zero exactly where this rank contributed */
        for (size_t i = 0; i < n && rc == 0; i++) {
            float acc = in[i] + e_old[i], e = flx_gsync_residual(h)[i];
            if (e != 0.0f && memcmp(&e, &acc, sizeof(float)) != 0)
                rc = mp_fail(rank, "approx step %d: residual[%zu] = %g, g + e = %g", t, i, e, acc);
            if (e == 0.0f && acc != 0.0f)
                sent++;
        }
        /* (another rank's set may hit this rank's zeros: 1 in 8 values) */
        if (rc == 0 && (sent > (double)rep.k || sent < 0.75 * (double)rep.k))
            rc = mp_fail(rank, "approx step %d: %g entries left the residual, k = %zu", t, sent,
                         rep.k);
        memcpy(e_old, flx_gsync_residual(h), n * sizeof(float));
    }
    flx_gsync_destroy(h);
    free(e_old);
    free(in);
    free(g);
    return rc;
}

/* Ranks that create a gsync object with different n or options: the
 * creation itself fails with FLX_ERR_MISMATCH on every rank (before, a
 * random-k pair with 256 and 257 elements kept the same k, synchronised
 * without an error and left the ranks with different gradients), writes no
 * handle, and the communicator keeps working.  Options that are a rank's
 * own business (threads) may differ.  A rank that refuses its own n or
 * options fails every rank's creation with FLX_ERR_INVALID_ARG. */
static int body_options_differ(flx_comm_h comm, int rank, int N, void *arg)
{
    const int odd = rank == N - 1; /* the rank whose options differ */
    float g[300];

    (void)arg;
    for (int c = 0; c < 7; c++) {
        flx_gsync_opts_t o;
        flx_gsync_h h = NULL;
        size_t n = 256;
        flx_status_t st, want = c == 4 ? FLX_OK : c >= 5 ? FLX_ERR_INVALID_ARG : FLX_ERR_MISMATCH;

        flx_gsync_opts_default(&o);
        o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_KEPT_FRACTION;
        o.method = FLX_COMPRESS_TOPK;
        o.kept_fraction = 0.1;
        switch (c) {
        case 0: /* n: the same k (25) either way */
            o.method = FLX_COMPRESS_RANDK;
            n += (size_t)odd;
            break;
        case 1:
            o.field_mask |= FLX_GSYNC_OPT_SEED;
            o.seed = 7 + (uint64_t)odd;
            break;
        case 2:
            o.kept_fraction = odd ? 0.2 : 0.1;
            break;
        case 3: /* a double option */
            o.field_mask |= FLX_GSYNC_OPT_LEADER | FLX_GSYNC_OPT_VAR_EWMA;
            o.leader = FLX_LEADER_VAR;
            o.var_ewma = odd ? 0.5 : 0.1;
            break;
        case 4:
            o.field_mask |= FLX_GSYNC_OPT_THREADS;
            o.threads = 1 + odd;
            break;
        case 5: /* one rank refuses its own options: every rank fails, at once */
            o.kept_fraction = odd ? 0.0 / 0.0 : 0.1;
            break;
        case 6: /* ... or its n */
            n = odd ? 0 : n;
            break;
        }
        st = flx_gsync_create(comm, n, &o, &h);
        if (st != want)
            return mp_fail(rank, "case %d: create gave %s, not %s", c, flx_status_name(st),
                           flx_status_name(want));
        if (st != FLX_OK && h != NULL)
            return mp_fail(rank, "case %d: a failed create wrote a handle", c);
        if (st == FLX_OK) {
            for (size_t i = 0; i < n; i++)
                g[i] = (float)((i * 7 + (size_t)rank) % 13) - 6.0f;
            st = flx_gsync_step(h, g, NULL);
            flx_gsync_destroy(h);
            if (st != FLX_OK)
                return mp_fail(rank, "case %d: step gave %s", c, flx_status_name(st));
        }
        if ((st = flx_barrier(comm)) != FLX_OK)
            return mp_fail(rank, "case %d: barrier after it gave %s", c, flx_status_name(st));
    }
    return 0;
}

/* ---- test cases --------------------------------------------------------------------------- */

/* flx_gsync_destroy waits for AR-Topk's background index exchange and
 * returns its status: rank 1 aborts and exits as soon as its step is done,
 * so rank 0's exchange of the next index set (2 Mi indices) fails under
 * way.  Before, rank 0's destroy returned FLX_OK (the async error said
 * FLX_ERR_PEER_LOST). */
static int raw_destroy_lost(int rank, int size, const char *root, void *arg)
{
    const size_t n = (size_t)4 << 20;
    float *g = malloc(n * sizeof(float));
    flx_gsync_opts_t o;
    flx_gsync_h h;
    flx_comm_h comm;
    flx_status_t st;

    (void)arg;
    if (g == NULL)
        return mp_fail(rank, "no memory");
    if ((st = mp_comm_create(rank, size, root, &comm)) != FLX_OK)
        return mp_fail(rank, "flx_comm_create: %s", flx_status_string(st));
    flx_gsync_opts_default(&o);
    o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_COLLECTIVE | FLX_GSYNC_OPT_INDEX_MODE |
                   FLX_GSYNC_OPT_KEPT_FRACTION;
    o.method = FLX_COMPRESS_TOPK;
    o.collective = FLX_GSYNC_COLL_ARTOPK;
    o.index_mode = FLX_INDEX_PREVIOUS;
    o.kept_fraction = 0.5;
    if ((st = flx_gsync_create(comm, n, &o, &h)) != FLX_OK)
        return mp_fail(rank, "flx_gsync_create: %s", flx_status_string(st));
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(i % 1000) * (float)(rank + 1);
    if ((st = flx_gsync_step(h, g, NULL)) != FLX_OK)
        return mp_fail(rank, "step: %s", flx_status_string(st));
    if (rank == 1) {
        flx_comm_abort(comm);
        _exit(0);
    }
    st = flx_gsync_destroy(h);
    /* a machine so busy that the exchange ended before rank 1 left (over
     * 100 ms) gives FLX_OK with no error anywhere: no failure to hide */
    if (st != FLX_ERR_PEER_LOST &&
        !(st == FLX_OK && flx_comm_get_async_error(comm) == FLX_OK))
        return mp_fail(rank, "flx_gsync_destroy after the peer left mid-exchange: %s, not "
                       "FLX_ERR_PEER_LOST (async error %s)", flx_status_string(st),
                       flx_status_string(flx_comm_get_async_error(comm)));
    if (st == FLX_OK)
        fprintf(stderr, "destroy_lost: the exchange ended before rank 1 left: nothing checked\n");
    flx_comm_destroy(comm);
    free(g);
    return 0;
}

START_TEST(test_destroy_lost)
{
    int failed = mp_nranks_wanted(2) ? mp_run_raw(2, raw_destroy_lost, NULL, 60, NULL) : 0;
    ck_assert_msg(failed == 0, "%d of 2 ranks failed", failed);
}
END_TEST

#define MP_TEST(name, body, timeout)                                            \
    START_TEST(name)                                                            \
    {                                                                           \
        int n = _i;                                                             \
        int failed = mp_nranks_wanted(n) ? mp_run(n, body, NULL, timeout, NULL) : 0; \
        ck_assert_msg(failed == 0, "%d of %d ranks failed", failed, n);         \
    }                                                                           \
    END_TEST

MP_TEST(test_artopk, body_artopk, 240)

START_TEST(test_chunked)
{
    int n = _i, failed;

    if (!mp_nranks_wanted(n))
        return;
    setenv("FLX_CHUNK_SIZE", "4k", 1); /* the forked ranks read it at creation */
    failed = mp_run(n, body_chunked, NULL, 240, NULL);
    unsetenv("FLX_CHUNK_SIZE");
    ck_assert_msg(failed == 0, "%d of %d ranks failed", failed, n);
}
END_TEST
MP_TEST(test_allgather_randk, body_allgather_randk, 240)
MP_TEST(test_large, body_large, 240)
MP_TEST(test_bad_gradient, body_bad_gradient, 120)
MP_TEST(test_overflow, body_overflow, 60)
MP_TEST(test_bad_args, body_bad_args, 60)
MP_TEST(test_casts, body_casts, 60)
MP_TEST(test_qsgd, body_qsgd, 60)
MP_TEST(test_powersgd, body_powersgd, 60)
MP_TEST(test_allgatherv, body_allgatherv, 60)
MP_TEST(test_approx_auto, body_approx_auto, 120)
MP_TEST(test_options_differ, body_options_differ, 60)

int main(void)
{
    Suite *s = suite_create("compress");
    TCase *tc = tcase_create("multi-process");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_artopk, 1, 6);
    tcase_add_loop_test(tc, test_allgather_randk, 1, 6);
    tcase_add_loop_test(tc, test_chunked, 2, 6);
    tcase_add_loop_test(tc, test_large, 3, 4);
    tcase_add_loop_test(tc, test_bad_gradient, 1, 5);
    tcase_add_loop_test(tc, test_overflow, 1, 5);
    tcase_add_loop_test(tc, test_pipe_bad_index, 2, 5);
    tcase_add_loop_test(tc, test_bad_args, 1, 3);
    tcase_add_loop_test(tc, test_casts, 1, 6);
    tcase_add_loop_test(tc, test_qsgd, 1, 6);
    tcase_add_loop_test(tc, test_powersgd, 1, 6);
    tcase_add_loop_test(tc, test_allgatherv, 1, 6);
    tcase_add_loop_test(tc, test_approx_auto, 1, 5);
    tcase_add_loop_test(tc, test_options_differ, 2, 4);
    tcase_add_test(tc, test_destroy_lost);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
