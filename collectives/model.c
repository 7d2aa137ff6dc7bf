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
 */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

#define MODEL_COPY_BW 5.0e9   /* bytes/s of a local memcpy, conservative */
#define MODEL_REDUCE_BW 1.0e10 /* bytes/s of a local sum reading two inputs */

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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Ping-pong with the partner rank ^ 1: median round trip of small messages
 * gives alpha, the median time of a 1 MiB one-way transfer (minus the
 * latency) gives beta.  Every rank then takes the worst alpha and beta, so
 * the model, and every choice made from it, is the same on every rank. */
flx_status_t model_calibrate(flx_comm_h comm, flx_link_model_t *model_p)
{
    enum { SMALL_ITERS = 15, LARGE_ITERS = 3, LARGE = 1 << 20 };
    const int partner = comm->rank ^ 1;
    const int active = partner < comm->size;
    const int leader = comm->rank < partner;
    double rtt[SMALL_ITERS], big[LARGE_ITERS], vals[2], peer_vals[2];
    char small[8] = {0};
    char *buf = NULL;
    flx_status_t st = FLX_OK;
    uint32_t step = 0;
    tl_req_t req[2];

    coll_begin(comm, COLL_CALIBRATE, FLX_ALGO_RD, FLX_FLOAT64, 0, 0, "calibration");
    vals[0] = 0;       /* alpha: larger is worse; idle ranks do not count */
    vals[1] = -1e300;  /* -beta: larger is worse */
    if (active) {
        buf = malloc(LARGE);
        if (buf == NULL)
            return FLX_ERR_NO_MEMORY;
        memset(buf, 0, LARGE);
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
        free(buf);
        if (st != FLX_OK)
            return st;
        qsort(rtt, SMALL_ITERS, sizeof(double), cmp_double);
        qsort(big, LARGE_ITERS, sizeof(double), cmp_double);
        vals[0] = rtt[SMALL_ITERS / 2] / 2;
        vals[1] = -(double)LARGE / FLX_MAX(big[LARGE_ITERS / 2] - rtt[SMALL_ITERS / 2], 1e-7);
    }
    /* agree on the worst link: recursive-doubling max of (alpha, -beta) */
    coll_begin(comm, COLL_CALIBRATE, FLX_ALGO_RD, FLX_FLOAT64, FLX_MAX, 2, "calibration");
    memcpy(peer_vals, vals, sizeof(vals));
    st = coll_allreduce_rd(comm, peer_vals, 2, FLX_FLOAT64, FLX_MAX);
    if (st != FLX_OK)
        return st;
    model_p->alpha_s = peer_vals[0];
    model_p->beta_bytes_per_s = -peer_vals[1];
    return FLX_OK;
}
