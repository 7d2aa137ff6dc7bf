/* model.c -- the alpha-beta cost model (pure functions) and its calibration.
 *
 *   ring allreduce   2(N-1) alpha + 2(N-1)/N S/beta
 *   tree allreduce   2 depth (alpha + c/beta) + (k+1) S/beta, k = min(2, N-1) children
 *   rd allreduce     (log2 p + 2[N != p]) (alpha + S/beta)
 *                      + (log2 p + [N != p]) c/reduce bandwidth
 *                    (each step moves chunks and reduces each as it lands:
 *                    only the last one's reduction is not hidden),
 *                    p = pow2 floor of N
 *   hd allreduce     (2 log2 p + 2[N != p]) alpha
 *                      + (2(p-1)/p + 2[N != p]) S/beta
 *                      + (log2 p + [N != p]) min(c, S/2)/reduce bandwidth
 *                    (halving-doubling: the ring's bytes in 2 log2 p steps;
 *                    the pairs of recursive doubling when N != p)
 *   ring allgather   (N-1) (alpha + b/beta)
 *   rd allgather     ceil(log2 N) alpha + (N-1) b/beta (+ 2 N b / copy bandwidth:
 *                    Bruck, when N is not a power of two)
 *   binomial bcast   ceil(log2 N) (alpha + S/beta)
 *   chain bcast      (N-2 + S/c) (alpha + c/beta)
 *
 * Each allreduce and allgather algorithm has its own alpha and 1/beta in
 * these formulas (the formulas' shapes stay; the constants are the
 * algorithm's own): at creation they are fitted to two timed runs of it,
 * 8 B and 1 MiB (per rank 8 B and 1 MiB / N for the allgather; model_fit).
 * The link's ping-pong alpha predicts neither: with 4 ranks on 2 cores a
 * ring allgather step took 56-87 us where the ping-pong alpha was 11 us,
 * and the Bruck allgather, taken up to 28 KiB from the link's model, was
 * the faster one up to 256 KiB.
 *
 * Live refresh: every allreduce and allgather that ran is an observation of
 * the term that dominated its prediction (model_learn), for that
 * algorithm only, passed through a median-of-3
 * spike filter: on a shared machine one run in twenty may stall for
 * milliseconds, and a single stall must not make an algorithm look slow.
 * Algorithms do not move each other: each formula has its own error, and
 * scaling the others by one algorithm's correction (tried: "the link is
 * shared") carried the tree's error at 2 ranks into the ring's prediction,
 * up to 5x, which then picked rd at 2 MiB.  An algorithm predicted too
 * fast is picked, observed and corrected.  The link's 1/beta (allgather,
 * broadcast, flx_comm_link_model) moves with every correction, so that a
 * link that slows down shows in it whatever runs.  Each rank keeps EWMAs of its
 * own; every FLX_MODEL_REFRESH bandwidth-dominated observations (or 64
 * times as many latency-dominated ones) the ranks agree, in one small
 * allreduce at the same point of their call sequence, on the largest 1/beta
 * any rank saw (a collective is over for the job when its slowest rank is
 * done, and that is what the benchmarks time) and the smallest alpha (a
 * latency-bound call's time on a rank that arrived early is mostly its
 * wait for the others: model_agree_live).
 */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_COPY_BW 5.0e9   /* bytes/s of a local memcpy, conservative */
#define MODEL_REDUCE_BW 1.0e10 /* bytes/s of a local sum reading two inputs */
#define MODEL_LAMBDA 0.25      /* weight of the newest observation          */

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
               (log2_floor(p) + (p != n ? 1 : 0)) * c / MODEL_REDUCE_BW;
    case FLX_ALGO_HD:
        return (2.0 * log2_floor(p) + (p != n ? 2 : 0)) * alpha +
               (2.0 * (p - 1) / p + (p != n ? 2 : 0)) * bytes / beta +
               (log2_floor(p) + (p != n ? 1 : 0)) * FLX_MIN(c, bytes / 2) / MODEL_REDUCE_BW;
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
    if (algo == FLX_ALGO_RD) /* Bruck's copies; none in place with N a power of two */
        return topo_log2_ceil(n) * alpha + (n - 1) * bpr / beta +
               ((n & (n - 1)) ? 2.0 * n * bpr / MODEL_COPY_BW : 0);
    return 1e30;
}

void model_allgather_terms(flx_algo_t algo, int n, double bpr, double *c0_p, double *a_p,
                           double *b_p)
{
    double c0 = model_allgather_time(algo, n, bpr, 0.0, INFINITY);

    *c0_p = c0;
    *a_p = model_allgather_time(algo, n, bpr, 1.0, INFINITY) - c0;
    *b_p = model_allgather_time(algo, n, bpr, 0.0, 1.0) - c0;
}

double model_allgather_time_ab(flx_algo_t algo, int n, double bpr, model_ab_t ab)
{
    double c0, a, b;

    if (n <= 1)
        return 0;
    model_allgather_terms(algo, n, bpr, &c0, &a, &b);
    return c0 + a * ab.alpha + b * ab.inv_bw;
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

void model_allreduce_terms(flx_algo_t algo, int n, double bytes, double chunk, double *c0_p,
                           double *a_p, double *b_p)
{
    double c0 = model_allreduce_time(algo, n, bytes, 0.0, INFINITY, chunk);

    *c0_p = c0;
    *a_p = model_allreduce_time(algo, n, bytes, 1.0, INFINITY, chunk) - c0;
    *b_p = model_allreduce_time(algo, n, bytes, 0.0, 1.0, chunk) - c0;
}

double model_allreduce_time_ab(flx_algo_t algo, int n, double bytes, model_ab_t ab, double chunk)
{
    double c0, a, b;

    if (n <= 1)
        return 0;
    model_allreduce_terms(algo, n, bytes, chunk, &c0, &a, &b);
    return c0 + a * ab.alpha + b * ab.inv_bw;
}

/* The index of the smallest of t[0, k) (the first of equals; 1e300 and
 * above: not a candidate), or on an exploring call the runner-up's when it
 * is within MODEL_EXPLORE_MARGIN of the best (a look, span > 1:
 * MODEL_EXPLORE_RARE_MARGIN) and has run at bytes or more (ran[i]; ran
 * NULL: no limit).  t[0] is a candidate.  The exploring calls are the last
 * span of every MODEL_EXPLORE; of a look, of every MODEL_EXPLORE_FAR_EVERY
 * when the runner-up is predicted more than MODEL_EXPLORE_NEAR times the
 * best, of every MODEL_EXPLORE_RARE_EVERY more than MODEL_EXPLORE_MARGIN
 * times. */
static int model_pick_index(const double *t, int k, unsigned long call, const double *ran,
                            double bytes, int span)
{
    int best = 0, second = -1;
    unsigned long every;

    for (int i = 1; i < k; i++) {
        if (!(t[i] < 1e300))
            continue;
        if (t[i] < t[best]) {
            second = best;
            best = i;
        } else if (second < 0 || t[i] < t[second]) {
            second = i;
        }
    }
    if (second < 0 || !(t[second] <= (span > 1 ? MODEL_EXPLORE_RARE_MARGIN : MODEL_EXPLORE_MARGIN) *
                                         t[best]) ||
        (ran != NULL && ran[second] < bytes))
        return best;
    every = span == 1 || t[second] <= MODEL_EXPLORE_NEAR * t[best] ? MODEL_EXPLORE
            : t[second] <= MODEL_EXPLORE_MARGIN * t[best]          ? MODEL_EXPLORE_FAR_EVERY
                                                                   : MODEL_EXPLORE_RARE_EVERY;
    return call % every >= every - (unsigned long)span ? second : best;
}

/* With 2 ranks recursive doubling and the ring move the same bytes over
 * the same one link (rd in one exchange of everything, the ring in two of
 * half), so rd's 1/beta is taken as no less than the ring's: rd wins by the
 * alpha it saves while that is more than the reduction it cannot hide (one
 * chunk), i.e. at small sizes, or where its own live 1/beta says it moves
 * bytes no slower.  Its own fit at 1 MiB alone did not predict it beyond:
 * rd measured 1.5-2.5x the ring's time at 2-4 MiB while the fits had them
 * level, so the live refresh flipped the choice between the two there on
 * noise.  Its own 1/beta still counts when larger: a slow rd that is
 * explored is seen and stays unpicked.  With N a power of two from 4 up,
 * rd and halving-doubling exchange over the same pairs in chunks of the
 * same size, rd the whole vector at every step and halving-doubling half
 * of what is left, so rd's 1/beta is taken as no less than
 * halving-doubling's: its fit at 1 MiB on 4 ranks came out 2-3x faster per
 * byte than halving-doubling's (3.1-4 against 1.2-2 GB/s) where at 2 MiB
 * it measured slower (1.1 against 1.5), so it was tried there first
 * (a look of four runs) at each new size. */
model_ab_t model_allreduce_ab(flx_algo_t algo, int n, const model_ab_t ar[MODEL_NAR])
{
    model_ab_t ab = ar[algo - FLX_ALGO_RING];

    if (n == 2 && algo == FLX_ALGO_RD)
        ab.inv_bw = FLX_MAX(ab.inv_bw, ar[0].inv_bw);
    if (n >= 4 && (n & (n - 1)) == 0 && algo == FLX_ALGO_RD)
        ab.inv_bw = FLX_MAX(ab.inv_bw, ar[FLX_ALGO_HD - FLX_ALGO_RING].inv_bw);
    return ab;
}

/* With 2 ranks the tree is a reduce to one rank and a broadcast back: two
 * steps where recursive doubling takes one, and no more bandwidth than the
 * ring, so it is never picked there, whatever a noisy fit says (its 8 B fit
 * coming out below rd's once made 2-rank small allreduces take two trips).
 * Halving-doubling on 2 ranks is the ring's two exchanges of half without
 * the ring's one pipeline through both, so it is not picked there either. */
flx_algo_t model_pick_allreduce_explore(int n, double bytes, const model_ab_t ar[MODEL_NAR],
                                         double chunk, unsigned long call, const double *ran)
{
    double t[MODEL_NAR];

    for (int i = 0; i < MODEL_NAR; i++) {
        flx_algo_t algo = (flx_algo_t)(FLX_ALGO_RING + i);
        t[i] = n == 2 && (algo == FLX_ALGO_TREE || algo == FLX_ALGO_HD)
                   ? 1e300
                   : model_allreduce_time_ab(algo, n, bytes, model_allreduce_ab(algo, n, ar),
                                             chunk);
    }
    return (flx_algo_t)(FLX_ALGO_RING +
                        model_pick_index(t, MODEL_NAR, call, ran, bytes, MODEL_LOOK));
}

/* The log-step allgather moves the same blocks over the same links as the
 * ring (Bruck plus its local copies): per byte it is never the cheaper, so
 * its 1/beta is taken
 * no lower than the ring's, whatever a noisy fit says, and it wins only
 * by its fewer steps (4 ranks on 2 cores: fits that put Bruck's 1/beta
 * below the ring's made it the choice at 2-8 MiB in 1 of 3 runs and at
 * 512 KiB-1 MiB in another; alone, the ring was 1.0-1.7x faster there). */
model_ab_t model_allgather_ab(flx_algo_t algo, const model_ab_t ag[MODEL_NAG])
{
    model_ab_t ab = ag[model_ag_index(algo)];

    if (algo == FLX_ALGO_RD)
        ab.inv_bw = FLX_MAX(ab.inv_bw, ag[0].inv_bw);
    return ab;
}

/* With N <= 3 Bruck takes as many steps as the ring (ceil(log2 N) = N - 1)
 * and moves the same blocks, plus its local copies, so it is never picked
 * there, whatever a noisy fit says (on 2 ranks the fit took it for
 * 64 KiB-8 MiB in 2 of 6 runs, where the ring was 1.04-2.0x faster). */
flx_algo_t model_pick_allgather_explore(int n, double bpr, const model_ab_t ag[MODEL_NAG],
                                        unsigned long call, const double *ran)
{
    double t[MODEL_NAG] = {model_allgather_time_ab(FLX_ALGO_RING, n, bpr, ag[0]),
                           topo_log2_ceil(n) >= n - 1
                               ? 1e300
                               : model_allgather_time_ab(FLX_ALGO_RD, n, bpr,
                                                         model_allgather_ab(FLX_ALGO_RD, ag))};

    return model_pick_index(t, MODEL_NAG, call, ran, bpr, 1) ? FLX_ALGO_RD : FLX_ALGO_RING;
}

flx_algo_t model_pick_allreduce_ab(int n, double bytes, const model_ab_t ar[MODEL_NAR], double chunk)
{
    return model_pick_allreduce_explore(n, bytes, ar, chunk, 0, NULL);
}

flx_algo_t model_pick_allreduce(int n, double bytes, double alpha, double beta, double chunk)
{
    model_ab_t ar[MODEL_NAR];

    for (int i = 0; i < MODEL_NAR; i++)
        ar[i] = (model_ab_t){alpha, 1.0 / beta};
    return model_pick_allreduce_ab(n, bytes, ar, chunk);
}

int model_fit_ab(const double small[4], const double large[4], model_ab_t *ab_p)
{
    /* each: c0, a, b, measured t; solve a alpha + b inv_bw = t - c0 for both */
    double ys = small[3] - small[0], yl = large[3] - large[0];
    double det = small[1] * large[2] - small[2] * large[1];
    model_ab_t ab;

    if (!(fabs(det) > 0) || !(small[1] > 0) || !(ys > 0) || !(yl > 0))
        return -1;
    ab.inv_bw = (small[1] * yl - large[1] * ys) / det;
    ab.alpha = (ys - small[2] * ab.inv_bw) / small[1];
    if (!(ab.inv_bw > 0) || !(ab.alpha > 0))
        return -1;
    *ab_p = ab;
    return 0;
}

flx_algo_t model_pick_allgather(int n, double bpr, double alpha, double beta)
{
    const model_ab_t ag[MODEL_NAG] = {{alpha, 1.0 / beta}, {alpha, 1.0 / beta}};

    return model_pick_allgather_explore(n, bpr, ag, 0, NULL);
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

double model_spike_filter(double hist[2], double x)
{
    double h0 = hist[0], h1 = hist[1], lo, hi;

    hist[0] = h1;
    hist[1] = x;
    if (h1 < 0)
        return x;
    if (h0 < 0)
        return FLX_MIN(h1, x);
    lo = FLX_MIN(h0, h1);
    hi = FLX_MAX(h0, h1);
    return x < lo ? lo : x > hi ? hi : x;
}

void model_learn(double *alpha_p, double *inv_bw_p, double t, double a, double b, int which,
                 double lambda, const double lo[2], const double hi[2], double hist[2][2])
{
    double obs;

    if (!(t >= 0) || !(a > 0 || b > 0))
        return;
    if (which == 2 && b > 0) {
        obs = FLX_MAX(0.0, t - a * *alpha_p) / b;
        if (hist)
            obs = model_spike_filter(hist[1], obs);
        *inv_bw_p = model_clamp((1.0 - lambda) * *inv_bw_p + lambda * obs, lo[1], hi[1]);
    } else if (a > 0) {
        obs = FLX_MAX(0.0, t - b * *inv_bw_p) / a;
        if (hist)
            obs = model_spike_filter(hist[0], obs);
        *alpha_p = model_clamp((1.0 - lambda) * *alpha_p + lambda * obs, lo[0], hi[0]);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* where the live EWMAs start: the agreed model */
static void model_live_start(flx_comm_h comm)
{
    model_live_t *lv = &comm->live;

    lv->link = lv->link0 = (model_ab_t){comm->model.alpha_s, 1.0 / comm->model.beta_bytes_per_s};
    for (int i = 0; i < MODEL_NAR; i++)
        lv->ar[i] = lv->ar0[i] = comm->ar[i];
    for (int i = 0; i < MODEL_NAG; i++)
        lv->ag[i] = lv->ag0[i] = comm->ag[i];
    lv->nbw = lv->nlat = 0;
    memset(lv->look_n, 0, sizeof(lv->look_n));
    memset(lv->per_n, 0, sizeof(lv->per_n));
    /* the filter's history starts with the start values: a first stalled
     * run moves nothing either */
    for (int i = 0; i < MODEL_NAR + MODEL_NAG; i++) {
        model_ab_t s = i < MODEL_NAR ? lv->ar0[i] : lv->ag0[i - MODEL_NAR];
        lv->hist[i][0][0] = lv->hist[i][1][0] = -1;
        lv->hist[i][0][1] = s.alpha;
        lv->hist[i][1][1] = s.inv_bw;
    }
    lv->started = 1;
}

static void model_bounds(model_ab_t start, double lo[2], double hi[2])
{
    lo[0] = start.alpha / MODEL_RANGE;
    lo[1] = start.inv_bw / MODEL_RANGE;
    hi[0] = start.alpha * MODEL_RANGE;
    hi[1] = start.inv_bw * MODEL_RANGE;
}

void comm_set_model(flx_comm_h comm, flx_link_model_t link, const model_ab_t ar[MODEL_NAR],
                    const model_ab_t ag[MODEL_NAG])
{
    const model_ab_t ab = {link.alpha_s, 1.0 / link.beta_bytes_per_s};

    pthread_mutex_lock(&comm->lock); /* flx_comm_link_model and friends read from any thread */
    comm->model = link;
    for (int i = 0; i < MODEL_NAR; i++)
        comm->ar[i] = ar ? ar[i] : ab;
    for (int i = 0; i < MODEL_NAG; i++)
        comm->ag[i] = ag ? ag[i] : ab;
    pthread_mutex_unlock(&comm->lock);
}

/* An allreduce algorithm that ran bandwidth-bound MODEL_PERIOD_MIN times
 * or more since the last agreement (outside looks, at half the largest
 * such size of the period or more, the latest MODEL_PERIOD_MAX) takes the
 * median of those runs as its 1/beta, in place of the EWMA; the link's
 * 1/beta moves by the same ratio.  The EWMA (a quarter to the newest run,
 * after a median-of-3 filter) let a stretch of a few slow calls through:
 * 4 ranks on 2 cores, a 2 MiB allreduce, halving-doubling's agreed
 * 1.2-1.5 GB/s fell to 0.52 in one period of 16 calls, the tree took
 * over (1.5x slower) and halving-doubling, now predicted over 2x slower,
 * was never explored again.  The median of the period holds while fewer
 * than half its runs are slow.  Fewer runs (an algorithm explored, or
 * picked only at the end of a period) keep the EWMA.  A look that ends
 * empties its algorithm's period (model_observe): its median stands. */
#define MODEL_PERIOD_MIN 5
static void model_period_medians(model_live_t *lv)
{
    for (int i = 0; i < MODEL_NAR; i++) {
        int n = FLX_MIN(lv->per_n[i], MODEL_PERIOD_MAX), m = 0;
        double x[MODEL_PERIOD_MAX], lo[2], hi[2], median, largest = 0, before;

        lv->per_n[i] = 0;
        for (int k = 0; k < n; k++)
            largest = FLX_MAX(largest, lv->per_bytes[i][k]);
        for (int k = 0; k < n; k++)
            if (lv->per_bytes[i][k] >= largest / 2)
                x[m++] = lv->per[i][k];
        if (m < MODEL_PERIOD_MIN)
            continue;
        qsort(x, (size_t)m, sizeof(double), cmp_double);
        median = m % 2 ? x[m / 2] : 0.5 * (x[m / 2 - 1] + x[m / 2]);
        if (!(median > 0))
            continue; /* every run within alpha: as in the look */
        model_bounds(lv->ar0[i], lo, hi);
        before = lv->ar[i].inv_bw;
        lv->ar[i].inv_bw = model_clamp(median, lo[1], hi[1]);
        model_bounds(lv->link0, lo, hi);
        lv->link.inv_bw = model_clamp(lv->link.inv_bw * lv->ar[i].inv_bw / before, lo[1], hi[1]);
    }
}

/* every rank's EWMAs in, on every rank the largest 1/beta and the
 * smallest alpha out (alpha as -alpha, so that one MAX does both).  The
 * time of a latency-bound call includes this rank's wait for the last
 * one to arrive: after a long collective that is the time the slowest
 * rank took longer, and the largest alpha then grew with every such call
 * (the perf tool's small result check after each size of a 4-rank sweep:
 * rd's alpha from 50 us to 1 ms, the link's to 13 ms, and the small
 * checks picked the ring).  The rank that arrived last waited for no one. */
static flx_status_t model_agree_live(flx_comm_h comm)
{
    model_live_t *lv = &comm->live;
    double vals[2 + 2 * (MODEL_NAR + MODEL_NAG)];
    model_ab_t ar[MODEL_NAR], ag[MODEL_NAG];
    flx_link_model_t link;
    flx_status_t st;

    model_period_medians(lv);
    vals[0] = -lv->link.alpha;
    vals[1] = lv->link.inv_bw;
    for (int i = 0; i < MODEL_NAR + MODEL_NAG; i++) {
        const model_ab_t *m = i < MODEL_NAR ? &lv->ar[i] : &lv->ag[i - MODEL_NAR];
        vals[2 + 2 * i] = -m->alpha;
        vals[3 + 2 * i] = m->inv_bw;
    }
    coll_begin(comm, COLL_CALIBRATE, FLX_ALGO_RD, FLX_FLOAT64, FLX_MAX, FLX_ARRAY_SIZE(vals),
               "link model refresh");
    st = coll_allreduce_rd(comm, vals, vals, FLX_ARRAY_SIZE(vals), FLX_FLOAT64, FLX_MAX);
    if (st != FLX_OK)
        return st;
    link.alpha_s = -vals[0];
    link.beta_bytes_per_s = 1.0 / vals[1];
    for (int i = 0; i < MODEL_NAR + MODEL_NAG; i++) {
        model_ab_t m = {-vals[2 + 2 * i], vals[3 + 2 * i]};
        if (i < MODEL_NAR)
            ar[i] = m;
        else
            ag[i - MODEL_NAR] = m;
    }
    if (fabs(link.beta_bytes_per_s - comm->model.beta_bytes_per_s) > 0.2 * comm->model.beta_bytes_per_s ||
        fabs(ar[0].inv_bw - comm->ar[0].inv_bw) > 0.2 * comm->ar[0].inv_bw)
        flx_info(COLL, comm->rank, "link model refreshed from live timings: alpha %.1f us, beta "
                 "%.3g GB/s (was %.3g); the ring's beta %.3g GB/s (was %.3g)", link.alpha_s * 1e6,
                 link.beta_bytes_per_s / 1e9, comm->model.beta_bytes_per_s / 1e9,
                 1.0 / ar[0].inv_bw / 1e9, 1.0 / comm->ar[0].inv_bw / 1e9);
    flx_debug(COLL, comm->rank, "live model agreed: alpha (us) / beta (GB/s): ring %.1f / %.3g, "
              "tree %.1f / %.3g, rd %.1f / %.3g, hd %.1f / %.3g; allgather ring %.1f / %.3g, "
              "rd %.1f / %.3g",
              ar[0].alpha * 1e6, 1e-9 / ar[0].inv_bw, ar[1].alpha * 1e6, 1e-9 / ar[1].inv_bw,
              ar[2].alpha * 1e6, 1e-9 / ar[2].inv_bw, ar[3].alpha * 1e6, 1e-9 / ar[3].inv_bw,
              ag[0].alpha * 1e6, 1e-9 / ag[0].inv_bw, ag[1].alpha * 1e6, 1e-9 / ag[1].inv_bw);
    comm_set_model(comm, link, ar, ag);
    /* go on from the agreed values, within the bounds of the start */
    lv->link = (model_ab_t){link.alpha_s, 1.0 / link.beta_bytes_per_s};
    memcpy(lv->ar, ar, sizeof(ar));
    memcpy(lv->ag, ag, sizeof(ag));
    lv->nbw = lv->nlat = 0;
    return FLX_OK;
}

/* algo ran at bytes (per rank for the allgather); 1 when that is at
 * least twice what it had run at before (or the first run): a size the
 * model's values for it were not measured near */
static int model_ran(flx_comm_h comm, int kind, flx_algo_t algo, double bytes)
{
    double *ran = NULL, before;

    if (kind == COLL_ALLREDUCE && algo >= FLX_ALGO_RING && algo < FLX_ALGO_RING + MODEL_NAR)
        ran = &comm->live.ran_ar[algo - FLX_ALGO_RING];
    else if (kind == COLL_ALLGATHER && (algo == FLX_ALGO_RING || algo == FLX_ALGO_RD))
        ran = &comm->live.ran_ag[model_ag_index(algo)];
    if (ran == NULL)
        return 0;
    before = *ran;
    *ran = FLX_MAX(*ran, bytes);
    return before <= 0 || bytes >= 2 * before;
}

static double model_median3(const double x[3])
{
    double lo = FLX_MIN(x[0], x[1]), hi = FLX_MAX(x[0], x[1]);

    return x[2] < lo ? lo : x[2] > hi ? hi : x[2];
}

/* The first look (session 41): an allreduce algorithm's 1/beta at twice
 * the largest size it had run at or more is the fit's (at 1 MiB) or a
 * smaller size's, carried to a size where it may not hold, and the EWMA
 * took several refresh periods of 16 calls each to correct it: a 4-rank
 * allreduce at 16 MiB ran the tree, halving-doubling and recursive
 * doubling 16 calls each (rd 33-111 ms a call against mostly 20-28 for
 * the tree) before it settled.  So MODEL_LOOK bandwidth-bound runs of an
 * algorithm from such a size replace its 1/beta with their median (one
 * stall is one outlier of three), and the ranks agree at once.  The first
 * run at the new size is left out (LOOK_SKIP): it pays for cold pages on
 * every rank (4 ranks on 2 cores, 2 MiB: 20-27 ms where a warm run takes
 * 2-3), and the ranks it leaves apart make the second one slow on some of
 * them too (5-11 ms); counted, two outliers of three made the first
 * algorithm tried there look 2-5x too slow, out of the race for good (a
 * 2 MiB allreduce ran the tree, 1.7x slower, for 230 calls of 280).  An
 * exploration (coll.h: MODEL_LOOK runs of the runner-up in a row, at a
 * size it has run at) is a look as well, without the skip.  Every rank
 * counts the same runs (same calls, same agreed model, the dominant term
 * judged by the start values), so they agree at the same call.  A look
 * counts only runs at its first one's size or larger (the others are
 * learnt as usual).  What is counted must not depend on the rank's own
 * times, so a run that took no longer than alpha alone predicts (obs 0)
 * counts too, and where the median is 0 the value stays (replaced, it
 * would make the algorithm 1000x too fast).  start: LOOK_FRESH or
 * LOOK_EXPLORE when this run starts a look (a look under way is dropped),
 * else 0.  Returns 0 when the
 * call was not part of a look (learn as usual), 1 while a look goes on, 2
 * when it ended (agree now). */
_Static_assert(MODEL_LOOK == 3, "model_median3 and model_live_t.look hold 3");
enum { LOOK_EXPLORE = 1, LOOK_FRESH = 2, LOOK_SKIP = -1 };

static int model_look(model_live_t *lv, int idx, int start, double bytes, double obs,
                      model_ab_t *mine, const double lo[2], const double hi[2],
                      double hist[2][2])
{
    double median;

    if (start) { /* a new look, whatever one was under way */
        lv->look_bytes[idx] = bytes;
        lv->look_n[idx] = start == LOOK_FRESH ? LOOK_SKIP : 0;
        if (start == LOOK_FRESH)
            return 1;
    } else if (lv->look_n[idx] == 0 || bytes < lv->look_bytes[idx]) {
        return 0;
    }
    if (lv->look_n[idx] == LOOK_SKIP)
        lv->look_n[idx] = 0;
    lv->look[idx][lv->look_n[idx]++] = obs;
    if (lv->look_n[idx] < MODEL_LOOK)
        return 1;
    median = model_median3(lv->look[idx]);
    if (median > 0) {
        mine->inv_bw = model_clamp(median, lo[1], hi[1]);
        hist[1][0] = lv->look[idx][1]; /* the spike filter goes on from the last two */
        hist[1][1] = lv->look[idx][2];
    }
    lv->look_n[idx] = 0;
    return 2;
}

flx_status_t model_observe(flx_comm_h comm, int kind, flx_algo_t algo, double bytes, double t)
{
    model_live_t *lv = &comm->live;
    double chunk = (double)comm->cfg.chunk_size, c0, a, b, lo[2], hi[2];
    model_ab_t *mine, start, before;
    double (*hist)[2];
    int which, look = 0, ai = (int)algo - FLX_ALGO_RING, gi = model_ag_index(algo), idx;
    int look_start = model_ran(comm, kind, algo, bytes) ? LOOK_FRESH : 0;

    /* the first run of an exploration starts a look (coll.h) */
    if (kind == COLL_ALLREDUCE && lv->explored == algo && lv->explore_first && !look_start)
        look_start = LOOK_EXPLORE;
    if (comm->cfg.model_refresh <= 0 || comm->size < 2 || !(bytes > 0))
        return FLX_OK;
    if (!lv->started)
        model_live_start(comm);
    if (kind == COLL_ALLREDUCE && ai >= 0 && ai < MODEL_NAR) {
        model_allreduce_terms(algo, comm->size, bytes, chunk, &c0, &a, &b);
        mine = &lv->ar[ai];
        start = lv->ar0[ai];
        idx = ai;
    } else if (kind == COLL_ALLGATHER && (algo == FLX_ALGO_RING || algo == FLX_ALGO_RD)) {
        model_allgather_terms(algo, comm->size, bytes, &c0, &a, &b);
        mine = &lv->ag[gi];
        start = lv->ag0[gi];
        idx = MODEL_NAR + gi;
    } else {
        return FLX_OK;
    }
    hist = lv->hist[idx];
    model_bounds(start, lo, hi);
    /* the dominant term is judged by where the live model started (the
     * fit, agreed), so that every rank counts the same observations, and so
     * that the judgement cannot run away: judged by the live values, an
     * alpha that grew made mid sizes latency-bound, which blamed their time
     * on alpha too, up to the clamp (a 1 Gbit run: the tree predicted
     * 111 ms at 8 and at 16 MiB, measured 211 and 377) */
    which = model_dominant(a, b, start.alpha, start.inv_bw);
    before = *mine;
    if (which == 2 && kind == COLL_ALLREDUCE)
        look = model_look(lv, idx, look_start, bytes, FLX_MAX(0.0, t - c0 - a * mine->alpha) / b,
                          mine, lo, hi, hist);
    if (look == 0)
        model_learn(&mine->alpha, &mine->inv_bw, t - c0, a, b, which, MODEL_LAMBDA, lo, hi, hist);
    if (look == 0 && which == 2 && kind == COLL_ALLREDUCE && t - c0 >= 0) {
        int k = lv->per_n[idx]++ % MODEL_PERIOD_MAX;
        lv->per[idx][k] = FLX_MAX(0.0, t - c0 - a * before.alpha) / b;
        lv->per_bytes[idx][k] = bytes;
    }
    if (look == 2)
        lv->per_n[idx] = 0; /* the look's median stands (model_period_medians) */
    /* the link's model (broadcast, the controller's sparse formulas,
     * flx_comm_link_model) follows every algorithm's traffic, by the same
     * ratio as the term that learnt */
    model_bounds(lv->link0, lo, hi);
    lv->link.alpha = model_clamp(lv->link.alpha * mine->alpha / before.alpha, lo[0], hi[0]);
    lv->link.inv_bw = model_clamp(lv->link.inv_bw * mine->inv_bw / before.inv_bw, lo[1], hi[1]);
    if (which == 2)
        lv->nbw++;
    else
        lv->nlat++;
    if (look != 2 && lv->nbw < comm->cfg.model_refresh && lv->nlat < 64 * comm->cfg.model_refresh)
        return FLX_OK;
    return model_agree_live(comm);
}

/* At creation (and flx_comm_calibrate): time every allreduce algorithm at
 * 8 bytes (median of 5 single runs) and at MODEL_FIT_BYTES (best of 3), and
 * every allgather algorithm at 8 bytes and MODEL_FIT_BYTES / N per rank,
 * each after a barrier and all interleaved so that a burst of load hits
 * them alike; agree on the largest time any rank saw of each (the slowest
 * rank's); solve each algorithm's formula for its own alpha and 1/beta
 * (model_fit_ab).  A fit that fails (noise made a term negative) leaves
 * that algorithm at the link's values.
 *
 * Each large time is the mean of MODEL_FIT_LOOP runs back to back after
 * one untimed run, as a training loop or a perf tool runs them: a lone run
 * that every rank starts together from a barrier waits out each dependent
 * step's wake-up, where back-to-back runs overlap them.  With 4 ranks on
 * 2 CPUs a lone 1 MiB ring allreduce took 2.5-5 ms and its fit predicted
 * 2.7-3.2 ms against the 1.05-1.2 ms it takes in a loop (the others' fits
 * were within about 1.5x), so the automatic choice kept halving-doubling
 * where the ring was 1.3-1.5x faster (2-8 MiB). */
#define MODEL_FIT_BYTES (1024.0 * 1024.0) /* large enough that a stall of a few
                                             hundred us does not decide the fit */
enum { MODEL_NFIT = MODEL_NAR + MODEL_NAG, MODEL_FIT_LOOP = 3 };

/* fitted model i: the allreduce's algorithms, then the allgather's */
static flx_algo_t model_fit_algo(int i)
{
    return i < MODEL_NAR ? (flx_algo_t)(FLX_ALGO_RING + i)
                         : i == MODEL_NAR ? FLX_ALGO_RING : FLX_ALGO_RD;
}

/* One run of fitted model i: count floats (per rank for the allgather);
 * adds its time, coll_begin's log line left out, to *t_p. */
static flx_status_t model_fit_once(flx_comm_h comm, int i, float *buf, size_t count, double *t_p)
{
    const flx_algo_t algo = model_fit_algo(i);
    flx_status_t st;
    double t0;

    coll_begin(comm, i < MODEL_NAR ? COLL_ALLREDUCE : COLL_ALLGATHER, algo, FLX_FLOAT32,
               i < MODEL_NAR ? FLX_SUM : 0, count, "model fit");
    t0 = flx_time_now();
    if (i >= MODEL_NAR)
        st = algo == FLX_ALGO_RD ? coll_allgather_rd(comm, NULL, buf, count * sizeof(float))
                                 : coll_allgather_ring(comm, NULL, buf, count * sizeof(float));
    else
        st = coll_allreduce_by(comm, algo, buf, buf, count, FLX_FLOAT32, FLX_SUM);
    *t_p += flx_time_now() - t0;
    return st;
}

/* After a barrier, `warm' untimed runs of fitted model i, then the mean
 * time of `runs' back to back into *t_p. */
static flx_status_t model_fit_run(flx_comm_h comm, int i, float *buf, size_t count, int warm,
                                  int runs, double *t_p)
{
    flx_status_t st;
    double t = 0;

    coll_begin(comm, COLL_BARRIER, FLX_ALGO_RD, FLX_INT32, 0, 0, "model fit");
    st = coll_barrier_dissemination(comm);
    for (int r = 0; r < warm && st == FLX_OK; r++)
        st = model_fit_once(comm, i, buf, count, &t);
    t = 0;
    for (int r = 0; r < runs && st == FLX_OK; r++)
        st = model_fit_once(comm, i, buf, count, &t);
    *t_p = t / runs;
    return st;
}

static flx_status_t model_fit(flx_comm_h comm, model_ab_t ar[MODEL_NAR], model_ab_t ag[MODEL_NAG])
{
    enum { SMALL_REPS = 5, LARGE_REPS = 3 };
    const size_t nlarge = (size_t)MODEL_FIT_BYTES / sizeof(float);
    double times[2 * MODEL_NFIT], small[MODEL_NFIT][SMALL_REPS];
    double chunk = (double)comm->cfg.chunk_size;
    float *buf = calloc(nlarge, sizeof(float));
    flx_status_t st = FLX_OK;

    if (buf == NULL) {
        flx_error(COLL, comm->rank, "out of memory for the model fit's %zu-byte buffer",
                  nlarge * sizeof(float));
        return FLX_ERR_NO_MEMORY;
    }
    for (int i = 0; i < MODEL_NFIT; i++)
        times[2 * i + 1] = 1e300;
    for (int rep = 0; rep < SMALL_REPS + LARGE_REPS && st == FLX_OK; rep++) {
        for (int i = 0; i < MODEL_NFIT && st == FLX_OK; i++) {
            size_t count = rep < SMALL_REPS ? 2 : i < MODEL_NAR ? nlarge : nlarge / comm->size;
            double t;

            if (rep < SMALL_REPS)
                st = model_fit_run(comm, i, buf, count, 0, 1, &t);
            else
                st = model_fit_run(comm, i, buf, count, 1, MODEL_FIT_LOOP, &t);
            model_ran(comm, i < MODEL_NAR ? COLL_ALLREDUCE : COLL_ALLGATHER, model_fit_algo(i),
                      (double)count * sizeof(float));
            if (rep < SMALL_REPS)
                small[i][rep] = t;
            else
                times[2 * i + 1] = FLX_MIN(times[2 * i + 1], t);
        }
    }
    free(buf);
    if (st != FLX_OK)
        return st;
    for (int i = 0; i < MODEL_NFIT; i++) {
        qsort(small[i], SMALL_REPS, sizeof(double), cmp_double);
        times[2 * i] = small[i][SMALL_REPS / 2];
    }
    coll_begin(comm, COLL_CALIBRATE, FLX_ALGO_RD, FLX_FLOAT64, FLX_MAX, FLX_ARRAY_SIZE(times),
               "model fit");
    st = coll_allreduce_rd(comm, times, times, FLX_ARRAY_SIZE(times), FLX_FLOAT64, FLX_MAX);
    if (st != FLX_OK)
        return st;
    for (int i = 0; i < MODEL_NFIT; i++) {
        flx_algo_t algo = model_fit_algo(i);
        double sm[4], lg[4], large = i < MODEL_NAR ? MODEL_FIT_BYTES
                                     : (double)(nlarge / comm->size * sizeof(float));
        model_ab_t *ab = i < MODEL_NAR ? &ar[i] : &ag[i - MODEL_NAR];

        if (i < MODEL_NAR) {
            model_allreduce_terms(algo, comm->size, 8.0, chunk, &sm[0], &sm[1], &sm[2]);
            model_allreduce_terms(algo, comm->size, large, chunk, &lg[0], &lg[1], &lg[2]);
        } else {
            model_allgather_terms(algo, comm->size, 8.0, &sm[0], &sm[1], &sm[2]);
            model_allgather_terms(algo, comm->size, large, &lg[0], &lg[1], &lg[2]);
        }
        sm[3] = times[2 * i];
        lg[3] = times[2 * i + 1];
        if (model_fit_ab(sm, lg, ab) != 0)
            flx_info(COLL, comm->rank, "model fit of the %s %s failed (8 B %.1f us, %.0f KiB "
                     "%.1f us): it keeps the link's alpha and beta", flx_algo_name(algo),
                     i < MODEL_NAR ? "allreduce" : "allgather", sm[3] * 1e6, large / 1024,
                     lg[3] * 1e6);
    }
    return FLX_OK;
}

/* One ping-pong series with partner, on steps [step, step +
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
    st = coll_allreduce_rd(comm, vals, vals, 2, FLX_FLOAT64, FLX_MAX);
    if (st != FLX_OK)
        return st;
    model_p->alpha_s = vals[0];
    model_p->beta_bytes_per_s = -vals[1];
    return FLX_OK;
}

/* One series with the partner rank ^ 1, then every rank takes the worst
 * alpha and beta, so the model, and every choice made from it, is the
 * same on every rank. */
static flx_status_t model_calibrate(flx_comm_h comm, flx_link_model_t *model_p)
{
    const int partner = comm->rank ^ 1;
    flx_link_model_t link = {0, 0};
    flx_status_t st = FLX_OK;

    coll_begin(comm, COLL_CALIBRATE, FLX_ALGO_RD, FLX_FLOAT64, 0, 0, "calibration");
    if (partner < comm->size) {
        /* the scratch buffer: registered with the transport (ib: no
         * registration per message for the 1 MiB transfers) */
        char *buf = coll_scratch(comm, LARGE);

        if (buf == NULL)
            return FLX_ERR_NO_MEMORY;
        memset(buf, 0, LARGE);
        st = model_pingpong(comm, partner, buf, 0, &link);
        if (st != FLX_OK)
            return st;
    }
    return model_agree_worst(comm, link.alpha_s, link.beta_bytes_per_s, model_p);
}

/* install link, then fit each allreduce and allgather algorithm from it;
 * the live refresh starts again from there */
static flx_status_t model_install_fitted(flx_comm_h comm, flx_link_model_t link)
{
    model_ab_t ar[MODEL_NAR], ag[MODEL_NAG];
    flx_status_t st;

    comm_set_model(comm, link, NULL, NULL);
    memcpy(ar, comm->ar, sizeof(ar));
    memcpy(ag, comm->ag, sizeof(ag));
    /* the sizes run from here on (the fit's first): a later first run
     * past them takes a first look at the new values */
    memset(comm->live.ran_ar, 0, sizeof(comm->live.ran_ar));
    memset(comm->live.ran_ag, 0, sizeof(comm->live.ran_ag));
    st = model_fit(comm, ar, ag);
    if (st == FLX_OK)
        comm_set_model(comm, link, ar, ag);
    comm->live.started = 0;
    return st;
}

flx_status_t model_setup(flx_comm_h comm)
{
    flx_link_model_t link = {comm->cfg.alpha_s > 0 ? comm->cfg.alpha_s : 20e-6,
                             comm->cfg.beta > 0 ? comm->cfg.beta : 1e9};
    flx_status_t st;

    comm_set_model(comm, link, NULL, NULL);
    if (comm->size < 2 || !comm->cfg.calibrate || (comm->cfg.alpha_s > 0 && comm->cfg.beta > 0))
        return FLX_OK;
    st = model_calibrate(comm, &link);
    if (st != FLX_OK)
        return st;
    if (comm->cfg.alpha_s > 0)
        link.alpha_s = comm->cfg.alpha_s;
    if (comm->cfg.beta > 0)
        link.beta_bytes_per_s = comm->cfg.beta;
    return model_install_fitted(comm, link);
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
    buf = coll_scratch(comm, LARGE); /* registered, as in model_calibrate */
    if (buf == NULL) /* fails on this rank only: the others time out on it */
        return comm_leave(comm, FLX_ERR_NO_MEMORY);
    memset(buf, 0, LARGE);
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
    if (st == FLX_OK)
        st = model_agree_worst(comm, worst.alpha_s, worst.beta_bytes_per_s, &agreed);
    if (st == FLX_OK) {
        st = model_install_fitted(comm, agreed);
        flx_info(COLL, comm->rank, "calibrated every link: worst alpha %.1f us, beta %.3g GB/s",
                 agreed.alpha_s * 1e6, agreed.beta_bytes_per_s / 1e9);
    }
    return comm_leave(comm, st);
}

double flx_allreduce_predict(flx_comm_h comm, size_t count, flx_dtype_t dtype, flx_algo_t algo)
{
    double bytes, t;

    if (comm == NULL || !flx_dtype_valid(dtype) || (unsigned)algo >= FLX_ALGO_COUNT) {
        flx_error(COLL, comm ? comm->rank : -1, "flx_allreduce_predict: %s",
                  comm == NULL ? "comm is NULL" : !flx_dtype_valid(dtype) ? "invalid dtype"
                                                                         : "invalid algo");
        return -1;
    }
    bytes = (double)count * (double)flx_dtype_size(dtype);
    pthread_mutex_lock(&comm->lock); /* the live refresh writes the model under exec */
    if (algo == FLX_ALGO_AUTO)
        algo = comm_pick_allreduce(comm, count, dtype, FLX_ALGO_AUTO, 0);
    t = model_allreduce_time_ab(algo, comm->size, bytes,
                                model_allreduce_ab(algo, comm->size, comm->ar),
                                (double)comm->cfg.chunk_size);
    pthread_mutex_unlock(&comm->lock);
    return t;
}

double flx_allgather_predict(flx_comm_h comm, size_t count, flx_dtype_t dtype, flx_algo_t algo)
{
    double bpr, t;

    if (comm == NULL || !flx_dtype_valid(dtype) || (unsigned)algo >= FLX_ALGO_COUNT ||
        algo == FLX_ALGO_TREE || algo == FLX_ALGO_HD) {
        flx_error(COLL, comm ? comm->rank : -1, "flx_allgather_predict: %s",
                  comm == NULL ? "comm is NULL" : !flx_dtype_valid(dtype) ? "invalid dtype"
                  : algo == FLX_ALGO_TREE ? "the allgather has no tree algorithm"
                  : algo == FLX_ALGO_HD   ? "the allgather has no halving-doubling algorithm"
                                          : "invalid algo");
        return -1;
    }
    bpr = (double)count * (double)flx_dtype_size(dtype);
    pthread_mutex_lock(&comm->lock);
    if (algo == FLX_ALGO_AUTO)
        algo = comm_pick_allgather(comm, bpr, FLX_ALGO_AUTO, 0);
    t = model_allgather_time_ab(algo, comm->size, bpr, model_allgather_ab(algo, comm->ag));
    pthread_mutex_unlock(&comm->lock);
    return t;
}
