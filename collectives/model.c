/* model.c -- the alpha-beta cost model (pure functions) and its calibration.
 *
 *   ring allreduce   2(N-1) alpha + 2(N-1)/N S/beta
 *   tree allreduce   2 depth (alpha + c/beta) + (k+1) S/beta, k = min(2, N-1) children
 *   rd allreduce     (log2 p + 2[N != p]) (alpha + S/beta) + log2 p S/reduce bandwidth
 *                    (its reductions wait for whole messages; ring and tree
 *                    overlap theirs with the transfer), p = pow2 floor of N
 *   ring allgather   (N-1) (alpha + b/beta)
 *   bruck allgather  ceil(log2 N) alpha + (N-1) b/beta + 2 N b / copy bandwidth
 *   binomial bcast   ceil(log2 N) (alpha + S/beta)
 *   chain bcast      (N-2 + S/c) (alpha + c/beta)
 *
 * Live refresh: every allreduce and allgather that ran is an observation of
 * the term that dominated its prediction (model_update).  Each rank keeps an
 * EWMA of its own; every FLX_MODEL_REFRESH bandwidth-dominated observations
 * (or 64 times as many latency-dominated ones) the ranks agree, in one
 * 2-double allreduce at the same point of their call sequence, on the
 * smallest alpha and 1/beta any rank saw.  The smallest, because a rank that
 * arrived early at a collective also timed its wait for the others; the one
 * that arrived last timed the transfer itself.
 */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_COPY_BW 5.0e9   /* bytes/s of a local memcpy, conservative */
#define MODEL_REDUCE_BW 1.0e10 /* bytes/s of a local sum reading two inputs */
#define MODEL_LAMBDA 0.25      /* weight of the newest observation          */
#define MODEL_RANGE 1.0e3      /* live values stay within x / 1000 of the start */

static int log2_floor(int n)
{
    int l = 0;

    while ((2 << l) <= n)
        l++;
    return l;
}

double model_allreduce_time(flx_algo_t algo, int n, double bytes, double alpha, double beta,
                            double chunk)
{
    double c = FLX_MIN(chunk, bytes);
    int p = topo_pow2_floor(n);

    if (n <= 1)
        return 0;
    switch (algo) {
    case FLX_ALGO_RING:
        return 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes / beta;
    case FLX_ALGO_TREE:
        return 2.0 * topo_tree_depth(n) * (alpha + c / beta) +
               (FLX_MIN(2, n - 1) + 1) * bytes / beta;
    case FLX_ALGO_RD:
        return (log2_floor(p) + (p != n ? 2 : 0)) * (alpha + bytes / beta) +
               (log2_floor(p) + (p != n ? 1 : 0)) * bytes / MODEL_REDUCE_BW;
    default:
        return 1e30;
    }
}

double model_allgather_time(flx_algo_t algo, int n, double bpr, double alpha, double beta)
{
    if (n <= 1)
        return 0;
    if (algo == FLX_ALGO_RING)
        return (n - 1) * (alpha + bpr / beta);
    if (algo == FLX_ALGO_RD)
        return topo_log2_ceil(n) * alpha + (n - 1) * bpr / beta + 2.0 * n * bpr / MODEL_COPY_BW;
    return 1e30;
}

double model_bcast_time(int chain, int n, double bytes, double alpha, double beta,
                        double chunk)
{
    double c = FLX_MAX(FLX_MIN(chunk, bytes), 1.0);

    if (n <= 1)
        return 0;
    if (!chain)
        return topo_log2_ceil(n) * (alpha + bytes / beta);
    return (n - 2 + bytes / c) * (alpha + c / beta);
}

flx_algo_t model_pick_allreduce(int n, double bytes, double alpha, double beta, double chunk)
{
    static const flx_algo_t cand[] = {FLX_ALGO_RING, FLX_ALGO_TREE, FLX_ALGO_RD};
    flx_algo_t best = FLX_ALGO_RING;
    double best_t = 1e300;

    for (size_t i = 0; i < FLX_ARRAY_SIZE(cand); i++) {
        double t = model_allreduce_time(cand[i], n, bytes, alpha, beta, chunk);
        if (t < best_t) {
            best_t = t;
            best = cand[i];
        }
    }
    return best;
}

flx_algo_t model_pick_allgather(int n, double bpr, double alpha, double beta)
{
    return model_allgather_time(FLX_ALGO_RD, n, bpr, alpha, beta) <
                   model_allgather_time(FLX_ALGO_RING, n, bpr, alpha, beta)
               ? FLX_ALGO_RD
               : FLX_ALGO_RING;
}

int model_pick_bcast_chain(int n, double bytes, double alpha, double beta, double chunk)
{
    return model_bcast_time(1, n, bytes, alpha, beta, chunk) <
           model_bcast_time(0, n, bytes, alpha, beta, chunk);
}

static double model_clamp(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

int model_dominant(double a, double b, double alpha, double inv_bw)
{
    return b > 0 && b * inv_bw >= a * alpha ? 2 : 1;
}

void model_learn(double *alpha_p, double *inv_bw_p, double t, double a, double b, int which,
                 double lambda, const double lo[2], const double hi[2])
{
    if (!(t >= 0) || !(a > 0 || b > 0))
        return;
    if (which == 2 && b > 0) {
        double obs = FLX_MAX(0.0, t - a * *alpha_p) / b;
        *inv_bw_p = model_clamp((1.0 - lambda) * *inv_bw_p + lambda * obs, lo[1], hi[1]);
    } else if (a > 0) {
        double obs = FLX_MAX(0.0, t - b * *inv_bw_p) / a;
        *alpha_p = model_clamp((1.0 - lambda) * *alpha_p + lambda * obs, lo[0], hi[0]);
    }
}

/* time of one run of (kind, algo) over bytes, for the given alpha and beta */
static double model_time(int kind, flx_algo_t algo, int n, double bytes, double alpha,
                         double beta, double chunk)
{
    return kind == COLL_ALLREDUCE ? model_allreduce_time(algo, n, bytes, alpha, beta, chunk)
                                  : model_allgather_time(algo, n, bytes, alpha, beta);
}

flx_status_t model_observe(flx_comm_h comm, int kind, flx_algo_t algo, double bytes, double t)
{
    model_live_t *lv = &comm->live;
    double chunk = (double)comm->cfg.chunk_size, c0, a, b, lo[2], hi[2], vals[2];
    flx_status_t st;
    int which;

    if (comm->cfg.model_refresh <= 0 || comm->size < 2 || !(bytes > 0))
        return FLX_OK;
    if (lv->alpha <= 0) { /* the first observation: start from the agreed model */
        lv->alpha0 = lv->alpha = comm->model.alpha_s;
        lv->inv_bw0 = lv->inv_bw = 1.0 / comm->model.beta_bytes_per_s;
    }
    /* every formula is c0 + a alpha + b / beta (c0: local reductions and copies) */
    c0 = model_time(kind, algo, comm->size, bytes, 0.0, INFINITY, chunk);
    a = model_time(kind, algo, comm->size, bytes, 1.0, INFINITY, chunk) - c0;
    b = model_time(kind, algo, comm->size, bytes, 0.0, 1.0, chunk) - c0;
    lo[0] = lv->alpha0 / MODEL_RANGE;
    lo[1] = lv->inv_bw0 / MODEL_RANGE;
    hi[0] = lv->alpha0 * MODEL_RANGE;
    hi[1] = lv->inv_bw0 * MODEL_RANGE;
    /* the dominant term is judged by the agreed model, so that every rank
     * counts the same observations */
    which = model_dominant(a, b, comm->model.alpha_s, 1.0 / comm->model.beta_bytes_per_s);
    model_learn(&lv->alpha, &lv->inv_bw, t - c0, a, b, which, MODEL_LAMBDA, lo, hi);
    if (which == 2)
        lv->nbw++;
    else
        lv->nlat++;
    if (lv->nbw < comm->cfg.model_refresh && lv->nlat < 64 * comm->cfg.model_refresh)
        return FLX_OK;
    lv->nbw = lv->nlat = 0;
    vals[0] = -lv->alpha; /* max of the negatives: the smallest */
    vals[1] = -lv->inv_bw;
    coll_begin(comm, COLL_CALIBRATE, FLX_ALGO_RD, FLX_FLOAT64, FLX_MAX, 2, "link model refresh");
    st = coll_allreduce_rd(comm, vals, 2, FLX_FLOAT64, FLX_MAX);
    if (st != FLX_OK)
        return st;
    if (fabs(-1.0 / vals[1] - comm->model.beta_bytes_per_s) > 0.2 * comm->model.beta_bytes_per_s ||
        fabs(-vals[0] - comm->model.alpha_s) > 0.2 * comm->model.alpha_s)
        flx_info(COLL, comm->rank, "link model refreshed from live timings: alpha %.1f us "
                 "(was %.1f), beta %.3g GB/s (was %.3g)", -vals[0] * 1e6,
                 comm->model.alpha_s * 1e6, -1.0 / vals[1] / 1e9,
                 comm->model.beta_bytes_per_s / 1e9);
    pthread_mutex_lock(&comm->lock); /* flx_comm_link_model reads it from any thread */
    comm->model.alpha_s = -vals[0];
    comm->model.beta_bytes_per_s = -1.0 / vals[1];
    pthread_mutex_unlock(&comm->lock);
    lv->alpha = comm->model.alpha_s;
    lv->inv_bw = 1.0 / comm->model.beta_bytes_per_s;
    lv->refreshes++;
    return FLX_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One ping-pong series with partner, steps *step_p on (advanced by
 * MODEL_PAIR_STEPS): the median round trip of small messages gives alpha,
 * the median time of a 1 MiB one-way transfer (minus the latency) beta. */
enum { SMALL_ITERS = 15, LARGE_ITERS = 3, LARGE = 1 << 20,
       MODEL_PAIR_STEPS = SMALL_ITERS + 2 + 2 * (LARGE_ITERS + 1) };

static flx_status_t model_pingpong(flx_comm_h comm, int partner, char *buf, uint32_t step,
                                   flx_link_model_t *link_p)
{
    const int leader = comm->rank < partner;
    double rtt[SMALL_ITERS], big[LARGE_ITERS];
    char small[8] = {0};
    flx_status_t st = FLX_OK;
    tl_req_t req[2];

    for (int i = -2; i < SMALL_ITERS && st == FLX_OK; i++) {
        double t0 = flx_time_now();
        if (leader) {
            st = coll_sendrecv(comm, partner, small, sizeof(small), partner, small,
                               sizeof(small), step++);
        } else {
            st = coll_recv(comm, partner, step++, small, sizeof(small), &req[0]);
            if (st == FLX_OK) st = coll_wait(comm, &req[0]);
            if (st == FLX_OK) st = coll_send(comm, partner, step - 1, small, sizeof(small), &req[1]);
            if (st == FLX_OK) st = coll_wait(comm, &req[1]);
        }
        if (i >= 0)
            rtt[i] = flx_time_now() - t0;
    }
    for (int i = -1; i < LARGE_ITERS && st == FLX_OK; i++) {
        double t0 = flx_time_now();
        if (leader) {
            st = coll_send(comm, partner, step, buf, LARGE, &req[0]);
            if (st == FLX_OK) st = coll_recv(comm, partner, step + 1, small, sizeof(small), &req[1]);
            if (st == FLX_OK) st = coll_waitall(comm, req, 2);
        } else {
            st = coll_recv(comm, partner, step, buf, LARGE, &req[0]);
            if (st == FLX_OK) st = coll_wait(comm, &req[0]);
            if (st == FLX_OK) st = coll_send(comm, partner, step + 1, small, sizeof(small), &req[1]);
            if (st == FLX_OK) st = coll_wait(comm, &req[1]);
        }
        step += 2;
        if (i >= 0)
            big[i] = flx_time_now() - t0;
    }
    if (st != FLX_OK)
        return st;
    qsort(rtt, SMALL_ITERS, sizeof(double), cmp_double);
    qsort(big, LARGE_ITERS, sizeof(double), cmp_double);
    link_p->alpha_s = rtt[SMALL_ITERS / 2] / 2;
    link_p->beta_bytes_per_s = (double)LARGE / FLX_MAX(big[LARGE_ITERS / 2] - rtt[SMALL_ITERS / 2], 1e-7);
    return FLX_OK;
}

/* The partner of rank in round r of a round-robin over m (even) slots, the
 * circle method: slot m - 1 stays, the others turn.  >= size: a bye. */
static int model_round_partner(int rank, int r, int m)
{
    if (rank == m - 1) {
        for (int j = 0; j < m - 1; j++)
            if (((r - j) % (m - 1) + (m - 1)) % (m - 1) == j)
                return j;
        return -1;
    }
    int p = ((r - rank) % (m - 1) + (m - 1)) % (m - 1);
    return p == rank ? m - 1 : p;
}

/* Agree on the worst link: recursive-doubling max of (alpha, -beta); ranks
 * that measured nothing pass (0, -1e300). */
static flx_status_t model_agree_worst(flx_comm_h comm, double alpha, double beta,
                                      flx_link_model_t *model_p)
{
    double vals[2] = {alpha, beta > 0 ? -beta : -1e300};
    flx_status_t st;

    coll_begin(comm, COLL_CALIBRATE, FLX_ALGO_RD, FLX_FLOAT64, FLX_MAX, 2, "calibration");
    st = coll_allreduce_rd(comm, vals, 2, FLX_FLOAT64, FLX_MAX);
    if (st != FLX_OK)
        return st;
    model_p->alpha_s = vals[0];
    model_p->beta_bytes_per_s = -vals[1];
    return FLX_OK;
}

/* At creation: one series with the partner rank ^ 1, then every rank takes
 * the worst alpha and beta, so the model, and every choice made from it,
 * is the same on every rank. */
flx_status_t model_calibrate(flx_comm_h comm, flx_link_model_t *model_p)
{
    const int partner = comm->rank ^ 1;
    flx_link_model_t link = {0, 0};
    flx_status_t st = FLX_OK;

    coll_begin(comm, COLL_CALIBRATE, FLX_ALGO_RD, FLX_FLOAT64, 0, 0, "calibration");
    if (partner < comm->size) {
        char *buf = calloc(1, LARGE);

        if (buf == NULL)
            return FLX_ERR_NO_MEMORY;
        st = model_pingpong(comm, partner, buf, 0, &link);
        free(buf);
        if (st != FLX_OK)
            return st;
    }
    return model_agree_worst(comm, link.alpha_s, link.beta_bytes_per_s, model_p);
}

flx_status_t flx_comm_calibrate(flx_comm_h comm, flx_link_model_t *per_peer)
{
    flx_link_model_t worst = {0, 0}, agreed;
    flx_status_t st;
    char *buf = NULL;
    int m;

    if (comm == NULL) {
        flx_error(COLL, -1, "flx_comm_calibrate: comm is NULL");
        return FLX_ERR_INVALID_ARG;
    }
    st = comm_enter(comm);
    if (st != FLX_OK)
        return st;
    if (per_peer)
        memset(per_peer, 0, (size_t)comm->size * sizeof(*per_peer));
    if (comm->size == 1)
        return comm_leave(comm, FLX_OK);
    buf = calloc(1, LARGE);
    if (buf == NULL) /* fails on this rank only: the others time out on it */
        return comm_leave(comm, FLX_ERR_NO_MEMORY);
    m = comm->size + (comm->size & 1);
    coll_begin(comm, COLL_CALIBRATE, FLX_ALGO_RING, FLX_FLOAT64, 0, (size_t)comm->size,
               "calibration to every peer");
    for (int r = 0; r < m - 1 && st == FLX_OK; r++) {
        int partner = model_round_partner(comm->rank, r, m);
        flx_link_model_t link;

        if (partner < 0 || partner >= comm->size)
            continue; /* a bye */
        st = model_pingpong(comm, partner, buf, (uint32_t)r * MODEL_PAIR_STEPS, &link);
        if (st != FLX_OK)
            break;
        if (per_peer)
            per_peer[partner] = link;
        worst.alpha_s = FLX_MAX(worst.alpha_s, link.alpha_s);
        if (worst.beta_bytes_per_s <= 0 || link.beta_bytes_per_s < worst.beta_bytes_per_s)
            worst.beta_bytes_per_s = link.beta_bytes_per_s;
    }
    free(buf);
    if (st == FLX_OK)
        st = model_agree_worst(comm, worst.alpha_s, worst.beta_bytes_per_s, &agreed);
    if (st == FLX_OK) {
        pthread_mutex_lock(&comm->lock);
        comm->model = agreed;
        pthread_mutex_unlock(&comm->lock);
        memset(&comm->live, 0, sizeof(comm->live));
        flx_info(COLL, comm->rank, "calibrated every link: worst alpha %.1f us, beta %.3g GB/s",
                 agreed.alpha_s * 1e6, agreed.beta_bytes_per_s / 1e9);
    }
    return comm_leave(comm, st);
}
