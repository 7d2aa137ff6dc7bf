/* check_controller.c -- the controller: its pure functions (costs, gains,
 * critical regime, bandwidth estimate, choice) against hand-computed and
 * brute-force references, and flx_ctl_step over real ranks (same decision
 * and same result on every rank, the mean where it syncs dense). */
#include "flexcoll.h"
#include "compress/cmp.h"
#include "collectives/coll.h"
#include "common/stall.h"
#include "common/time.h"
#include "controller/ctl.h"
#include "tests/mp.h"

#include <check.h>
#include <errno.h>
#include <grp.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double urand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffffff) / (double)0x1000000;
}

START_TEST(test_terms)
{
    double a, b, alpha = 3e-5, B = 1.25e8, m = 1e6;

    ctl_coll_terms(CTL_DENSE_RING, 4, m, 1.0, &a, &b);
    ck_assert_double_eq_tol(a, 6.0, 1e-12);
    ck_assert_double_eq_tol(b, 2.0 * 3 / 4 * 4 * m, 1e-6);
    ctl_coll_terms(CTL_ARTOPK, 4, m, 0.01, &a, &b);
    ck_assert_double_eq_tol(a * alpha + b / B, cmp_model_ar_pipe(4, m, 0.01, alpha, B), 1e-12);
    ctl_coll_terms(CTL_TOPK_AG, 8, m, 0.001, &a, &b);
    ck_assert_double_eq_tol(a * alpha + b / B, cmp_model_ag(8, m, 0.001, alpha, B), 1e-12);
    ctl_coll_terms(CTL_DENSE_TREE, 1, m, 1.0, &a, &b);
    ck_assert_double_eq(a, 0);
    ck_assert_double_eq(b, 0);
}
END_TEST

static int cmp_desc(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* the histogram's gain against the exact top-k energy of a sorted copy */
START_TEST(test_hist_gain)
{
    enum { N = 20000 };
    static double sq[N];
    static const double fr[] = {0.5, 0.1, 0.033, 0.01, 0.001};
    ctl_hist_t h;
    unsigned s = 7;
    double total = 0;

    ctl_hist_reset(&h);
    for (int i = 0; i < N; i++) {
        /* heavy-tailed, signed, over many octaves */
        double u = urand(&s), v = (urand(&s) - 0.5) * pow(10.0, -6.0 * u);
        ctl_hist_add(&h, (float)v);
        sq[i] = (double)(float)v * (double)(float)v;
        total += sq[i];
    }
    qsort(sq, N, sizeof(double), cmp_desc);
    for (size_t f = 0; f < sizeof(fr) / sizeof(fr[0]); f++) {
        double e = 0, exact, est = ctl_hist_gain(&h, fr[f]);
        int k = (int)(fr[f] * N);

        for (int i = 0; i < k; i++)
            e += sq[i];
        exact = sqrt(e / total);
        ck_assert_msg(fabs(est - exact) < 0.02, "c = %g: histogram %.4f, exact %.4f", fr[f],
                      est, exact);
    }
    ck_assert_double_eq_tol(ctl_hist_gain(&h, 1.0), 1.0, 1e-9);
    ctl_hist_reset(&h);
    for (int i = 0; i < 100; i++)
        ctl_hist_add(&h, 0.0f);
    ck_assert_double_eq(ctl_hist_gain(&h, 0.1), 1.0);
}
END_TEST

START_TEST(test_critical)
{
    double prev[2] = {10, 4}, cur[2] = {4, 4}, change;
    size_t len[2] = {3, 1};

    /* layer 0 changed by 0.6, layer 1 by 0: weighted 0.45 */
    ck_assert_int_eq(ctl_critical(prev, cur, len, 2, 0.5, &change), 0);
    ck_assert_double_eq_tol(change, 0.45, 1e-12);
    ck_assert_int_eq(ctl_critical(prev, cur, len, 2, 0.4, &change), 1);
    prev[1] = 0; /* a layer that was zero counts as changed */
    ck_assert_int_eq(ctl_critical(prev, cur, len, 2, 0.5, &change), 1);
    ck_assert_double_eq_tol(change, 0.7, 1e-12);
    /* a layer that stays zero (no gradient reaches it) is unchanged: with
     * half the parameters in it, the rest's 0.6 is 0.3 over the model */
    prev[1] = cur[1] = 0;
    len[1] = 3;
    ck_assert_int_eq(ctl_critical(prev, cur, len, 2, 0.5, &change), 0);
    ck_assert_double_eq_tol(change, 0.3, 1e-12);
}
END_TEST

/* A change of one collective's 1/B moves the other of its family, never
 * the other family: a sparse sync's noise, per byte, priced dense 10-20x
 * too dear (0.1-0.29 s where its steps took 0.04 s) */
START_TEST(test_share_change)
{
    double v[CTL_COLL_COUNT] = {1e-9, 1e-9, 4e-9, 0.5e-9};

    /* AR-Topk's 1/B went from 1e-9 to 4e-9: the allgather's by 3e-9 s/B
     * would be 7x; capped at AR-Topk's own 4x.  Dense stays. */
    ctl_share_change(v, CTL_ARTOPK, 1e-9, 1e-12, 1.0);
    ck_assert_double_eq(v[CTL_DENSE_RING], 1e-9);
    ck_assert_double_eq(v[CTL_DENSE_TREE], 1e-9);
    ck_assert_double_eq(v[CTL_ARTOPK], 4e-9);
    ck_assert_double_eq_tol(v[CTL_TOPK_AG], 2e-9, 1e-21);
    /* within the cap the same seconds per byte: ring 1e-9 -> 1.5e-9 moves
     * the tree from 2e-9 to 2.5e-9; a faster ring (-1e-9 on 1.5e-9, 2/3)
     * takes the tree down by 1e-9 */
    v[CTL_DENSE_TREE] = 2e-9;
    v[CTL_DENSE_RING] = 1.5e-9;
    ctl_share_change(v, CTL_DENSE_RING, 1e-9, 1e-12, 1.0);
    ck_assert_double_eq_tol(v[CTL_DENSE_TREE], 2.5e-9, 1e-21);
    v[CTL_DENSE_RING] = 0.5e-9;
    ctl_share_change(v, CTL_DENSE_RING, 1.5e-9, 1e-12, 1.0);
    ck_assert_double_eq_tol(v[CTL_DENSE_TREE], 1.5e-9, 1e-21);
    ck_assert_double_eq(v[CTL_ARTOPK], 4e-9);
    ck_assert_double_eq_tol(v[CTL_TOPK_AG], 2e-9, 1e-21);
    /* a decrease past the other's own ratio is capped too: ring 2e-9 ->
     * 1e-9 (-1e-9, half) takes a tree of 0.5e-9 to 0.25e-9, not below 0 */
    v[CTL_DENSE_RING] = 1e-9;
    v[CTL_DENSE_TREE] = 0.5e-9;
    ctl_share_change(v, CTL_DENSE_RING, 2e-9, 1e-12, 1.0);
    ck_assert_double_eq_tol(v[CTL_DENSE_TREE], 0.25e-9, 1e-21);
    /* the bounds hold */
    v[CTL_ARTOPK] = 2e-9;
    v[CTL_TOPK_AG] = 1e-9;
    ctl_share_change(v, CTL_TOPK_AG, 2e-9, 1.2e-9, 1.0);
    ck_assert_double_eq(v[CTL_ARTOPK], 1.2e-9);
    v[CTL_TOPK_AG] = 4e-9;
    ctl_share_change(v, CTL_TOPK_AG, 1e-9, 1e-12, 3e-9);
    ck_assert_double_eq(v[CTL_ARTOPK], 3e-9);
}
END_TEST

START_TEST(test_learn_model)
{
    /* bandwidth-dominated: t = 6 alpha + b / 1e8, the estimate of 1/B moves
     * lambda of the way; alpha stays */
    double alpha = 1e-5, inv_bw = 1.0 / 1e9, b = 1e6, t = 6 * 1e-5 + b / 1e8;
    double lo[2] = {1e-7, 1e-12}, hi[2] = {1e-2, 1.0};

    model_learn(&alpha, &inv_bw, t, 6, b, model_dominant(6, b, alpha, inv_bw), 0.5, lo, hi, NULL);
    ck_assert_double_eq_tol(inv_bw, 0.5 / 1e9 + 0.5 / 1e8, 1e-18);
    ck_assert_double_eq(alpha, 1e-5);
    /* latency-dominated (8 bytes): alpha learns, 1/B stays */
    inv_bw = 1.0 / 1e9;
    model_learn(&alpha, &inv_bw, 6 * 4e-5 + 8 / 1e9, 6, 8, model_dominant(6, 8, alpha, inv_bw), 1.0, lo, hi, NULL);
    ck_assert_double_eq_tol(alpha, 4e-5, 1e-15);
    ck_assert_double_eq(inv_bw, 1.0 / 1e9);
    /* faster than the latency alone: the observation is 0, then clamped */
    inv_bw = 1.0 / 1e8;
    model_learn(&alpha, &inv_bw, 0, 6, b, model_dominant(6, b, alpha, inv_bw), 1.0, lo, hi, NULL);
    ck_assert_double_eq(inv_bw, 1e-12);
    /* nothing sent (N = 1), or no measurement: unchanged */
    model_learn(&alpha, &inv_bw, 1.0, 0, 0, model_dominant(0, 0, alpha, inv_bw), 1.0, lo, hi, NULL);
    model_learn(&alpha, &inv_bw, -1.0, 6, b, model_dominant(6, b, alpha, inv_bw), 1.0, lo, hi, NULL);
    ck_assert_double_eq(inv_bw, 1e-12);
    ck_assert_double_eq_tol(alpha, 4e-5, 1e-15);
    /* the caller's term wins (the communicator judges by the agreed model):
     * told "bandwidth", a latency-dominated run moves 1/B only */
    ck_assert_int_eq(model_dominant(6, 8, alpha, inv_bw), 1);
    model_learn(&alpha, &inv_bw, 6 * 4e-5 + 8 * 1e-9, 6, 8, 2, 1.0, lo, hi, NULL);
    ck_assert_double_eq_tol(inv_bw, 1e-9, 1e-18);
    ck_assert_double_eq_tol(alpha, 4e-5, 1e-15);
    ck_assert_int_eq(model_dominant(6, 1e6, 1e-5, 1e-9), 2);
}
END_TEST

static void cand(ctl_cand_t *c, ctl_coll_t coll, double kept, double t, double g)
{
    c->coll = coll;
    c->kept = kept;
    c->time_s = t;
    c->gain = g;
    c->score = 0;
}

/* The selection cost: the first two runs (a cold start: 70.6 and 63.0 ms
 * where later steps took 2-10 ms in a Fashion-MNIST run, which kept flex
 * off AR-Topk for 100 steps) leave it unknown; the third sets it; then one
 * stalled step moves nothing and a lasting change gets through. */
START_TEST(test_select_update)
{
    double hist[3] = {0, 0, 0}, est = -1;

    est = ctl_select_update(est, hist, 1, 70.6e-3, 0.3);
    ck_assert_double_eq(est, -1);
    est = ctl_select_update(est, hist, 2, 63.0e-3, 0.3);
    ck_assert_double_eq(est, -1);
    est = ctl_select_update(est, hist, 3, 3e-3, 0.3);
    ck_assert_double_eq(est, 3e-3);
    est = ctl_select_update(est, hist, 4, 3e-3, 0.3); /* median of 63.0, 3, 3 */
    ck_assert_double_eq_tol(est, 3e-3, 1e-15);
    est = ctl_select_update(est, hist, 5, 58.4e-3, 0.3); /* a stall: median 3 */
    ck_assert_double_eq_tol(est, 3e-3, 1e-15);
    est = ctl_select_update(est, hist, 6, 9e-3, 0.3);
    est = ctl_select_update(est, hist, 7, 9e-3, 0.3); /* median 9 from here */
    ck_assert_double_eq_tol(est, 0.7 * (0.7 * 3e-3 + 0.3 * 9e-3) + 0.3 * 9e-3, 1e-15);
    ck_assert_double_eq(ctl_select_update(est, hist, 0, 1.0, 0.3), est); /* no run: unchanged */
}
END_TEST

/* Per-fraction gain ratios.  In a 100 Mbit Fashion-MNIST run with one
 * ratio per collective, AR-Topk 0.1's measurements (ratio about 1) lifted
 * 0.033 (about 0.8) back over the gain floor every few steps: the choice
 * flipped between the two.  Each fraction now keeps its own; an unmeasured
 * one borrows the collective's. */
START_TEST(test_ratio_per_fraction)
{
    ctl_ratio_t r;

    ctl_ratio_init(&r);
    ck_assert_double_eq(ctl_ratio_get(&r, 1), 1.0);
    ctl_ratio_learn(&r, 1, 0.4, 0.5, 0.3); /* 0.033 keeps 0.8 of its prediction */
    ck_assert_double_eq_tol(ctl_ratio_get(&r, 1), 0.7 + 0.3 * 0.8, 1e-12);
    ck_assert_double_eq_tol(ctl_ratio_get(&r, 2), 0.94, 1e-12); /* 0.011 borrows */
    for (int i = 0; i < 20; i++)
        ctl_ratio_learn(&r, 1, 0.4, 0.5, 0.3);
    for (int i = 0; i < 20; i++) /* then AR-Topk 0.1 runs for a while */
        ctl_ratio_learn(&r, 0, 0.66, 0.66, 0.3);
    ck_assert_double_eq_tol(ctl_ratio_get(&r, 0), 1.0, 1e-3);
    ck_assert_double_eq_tol(ctl_ratio_get(&r, 1), 0.8, 1e-3); /* 0.033 stays down */
    ck_assert_double_eq(ctl_ratio_get(&r, 3), r.coll); /* unmeasured: the collective's */
    ctl_ratio_learn(&r, 0, 1e3, 1e-3, 1.0); /* at most 4 */
    ck_assert_double_eq(ctl_ratio_get(&r, 0), 4.0);
    ctl_ratio_learn(&r, 2, 1.0, 0.0, 0.3); /* no prediction: nothing learnt */
    ctl_ratio_learn(&r, FLX_CTL_MAX_FRACTIONS, 1.0, 0.5, 0.3);
    ck_assert_double_eq(r.frac[2], -1.0);
    ck_assert_double_eq(ctl_ratio_get(&r, -1), r.coll);
}
END_TEST

START_TEST(test_choose_rules)
{
    ctl_cand_t c[4];
    int w;

    cand(&c[0], CTL_DENSE_RING, 1.0, 1.0, 1.0);  /* slow network: dense is slow */
    cand(&c[1], CTL_ARTOPK, 0.1, 0.2, 0.8);
    cand(&c[2], CTL_ARTOPK, 0.01, 0.12, 0.45);
    cand(&c[3], CTL_TOPK_AG, 0.001, 0.1, 0.2);
    ck_assert_int_eq(ctl_choose(c, 4, 1.0, 0, 0), 3);  /* only time matters */
    ck_assert_int_eq(ctl_choose(c, 4, 0.0, 0, 0), 0);  /* only information */
    /* the statistical term is ln delta = 2 ln gain, the energy kept:
     * 0.8: 0.8 ln(0.1/0.12) + 0.2 ln 0.45^2 = -0.465 beats 0.1's -0.644,
     * 0.001's -0.644 and dense's -1.842 */
    w = ctl_choose(c, 4, 0.8, 0, 0);
    ck_assert_int_eq(w, 2);
    ck_assert_double_eq_tol(c[2].score, 0.8 * log(0.1 / 0.12) + 0.2 * log(0.45 * 0.45), 1e-12);
    /* 0.6: 0.6 ln(0.1/0.2) + 0.4 ln 0.8^2 = -0.594 beats 0.01's -0.748 */
    w = ctl_choose(c, 4, 0.6, 0, 0);
    ck_assert_int_eq(w, 1);
    ck_assert_double_eq_tol(c[1].score, 0.6 * log(0.1 / 0.2) + 0.4 * log(0.8 * 0.8), 1e-12);
    /* critical: nothing below 0.1 kept */
    ck_assert_int_eq(ctl_choose(c, 4, 0.6, 0.1, 0), 1);
    ck_assert(isinf(c[3].score) && c[3].score < 0);
    /* flex's default gain floor: a 100 Mbit decision (step 200 of a
     * Fashion-MNIST run's log) took AR-Topk 0.033 at gain 0.33 without it,
     * and takes AR-Topk 0.1 (0.535) with it; the allgather at 0.033 (0.437)
     * is below it too */
    {
        ctl_cand_t d[6];
        flx_ctl_opts_t o;

        cand(&d[0], CTL_DENSE_RING, 1.0, 0.98951, 1.0);
        cand(&d[1], CTL_ARTOPK, 0.1, 0.18073, 0.535);
        cand(&d[2], CTL_TOPK_AG, 0.1, 0.42676, 0.704);
        cand(&d[3], CTL_ARTOPK, 0.033, 0.06857, 0.332);
        cand(&d[4], CTL_TOPK_AG, 0.033, 0.17359, 0.437);
        cand(&d[5], CTL_ARTOPK, 0.011, 0.03175, 0.182);
        flx_ctl_opts_default(&o);
        ck_assert_double_eq(o.min_gain, 0.45);
        ck_assert_int_eq(ctl_choose(d, 6, o.weight, 0, 0), 3);
        ck_assert_int_eq(ctl_choose(d, 6, o.weight, 0, o.min_gain), 1);
        ck_assert(isinf(d[4].score) && isinf(d[3].score) && isfinite(d[0].score));
    }
    /* a gain floor above every sparse gain leaves dense */
    ck_assert_int_eq(ctl_choose(c, 4, 0.6, 0, 0.9), 0);
    /* fast network: dense is the fastest and keeps everything */
    cand(&c[0], CTL_DENSE_RING, 1.0, 0.10, 1.0);
    cand(&c[1], CTL_ARTOPK, 0.1, 0.13, 0.8);
    ck_assert_int_eq(ctl_choose(c, 2, 0.6, 0, 0), 0);
    /* a tie in score goes to the larger kept fraction */
    cand(&c[0], CTL_ARTOPK, 0.01, 0.1, 0.5);
    cand(&c[1], CTL_ARTOPK, 0.1, 0.1, 0.5);
    ck_assert_int_eq(ctl_choose(c, 2, 0.5, 0, 0), 1);
    /* hysteresis: the current one stays unless beaten by more than the margin */
    c[0].score = -0.50;
    c[1].score = -0.47;
    ck_assert_int_eq(ctl_hysteresis(c, 2, 1, 0, 0.05), 0);
    ck_assert_int_eq(ctl_hysteresis(c, 2, 1, 0, 0.01), 1);
    ck_assert_int_eq(ctl_hysteresis(c, 2, 1, -1, 0.05), 1);
    c[0].score = -INFINITY; /* the current one is not allowed any more */
    ck_assert_int_eq(ctl_hysteresis(c, 2, 1, 0, 0.05), 1);
    /* probe: dense unseen for 150 steps, within the window: tried once */
    {
        uint64_t seen[CTL_COLL_COUNT] = {0};

        cand(&c[0], CTL_DENSE_RING, 1.0, 1.0, 1.0);
        cand(&c[1], CTL_ARTOPK, 0.1, 0.2, 0.8);
        c[0].score = -0.3;
        c[1].score = -0.1;
        seen[CTL_ARTOPK] = 200;
        seen[CTL_DENSE_RING] = 50;                                   /* ran at step 49 */
        ck_assert_int_eq(ctl_probe(c, 2, 1, seen, 200, 100, 0.5), 0); /* stale, close  */
        ck_assert_int_eq(ctl_probe(c, 2, 1, seen, 200, 100, 0.1), 1); /* too far       */
        ck_assert_int_eq(ctl_probe(c, 2, 1, seen, 120, 100, 0.5), 1); /* fresh enough  */
        seen[CTL_DENSE_RING] = 0;                                    /* never ran     */
        ck_assert_int_eq(ctl_probe(c, 2, 1, seen, 101, 100, 0.5), 0);
        ck_assert_int_eq(ctl_probe(c, 2, 1, seen, 100, 100, 0.5), 1);
        c[0].score = -INFINITY;                                      /* not allowed   */
        ck_assert_int_eq(ctl_probe(c, 2, 1, seen, 200, 100, 0.5), 1);
    }
    /* GraVAC: gain / time among gains >= 0.7 */
    cand(&c[0], CTL_DENSE_RING, 1.0, 1.0, 1.0);
    cand(&c[1], CTL_ARTOPK, 0.1, 0.2, 0.8);
    cand(&c[2], CTL_ARTOPK, 0.01, 0.09, 0.45); /* 0.45 / 0.09 = 5 > 0.8 / 0.2 = 4 */
    ck_assert_int_eq(ctl_choose_gravac(c, 3, 0, 0.7), 1);
    ck_assert_int_eq(ctl_choose_gravac(c, 3, 0, 0.0), 2);
    ck_assert_int_eq(ctl_choose_gravac(c, 3, 0, 0.95), 0);
}
END_TEST

/* for random candidate sets and weights the winner is never dominated and
 * its score is the largest */
START_TEST(test_choose_pareto)
{
    unsigned s = 11;

    for (int trial = 0; trial < 2000; trial++) {
        ctl_cand_t c[12];
        int n = 2 + (int)(urand(&s) * 10), w;
        double weight = urand(&s);

        cand(&c[0], CTL_DENSE_RING, 1.0, 0.05 + urand(&s), 1.0);
        for (int i = 1; i < n; i++)
            cand(&c[i], i % 2 ? CTL_ARTOPK : CTL_TOPK_AG, pow(10, -3 * urand(&s)),
                 0.05 + urand(&s), 0.05 + 0.95 * urand(&s));
        w = ctl_choose(c, n, weight, 0, 0);
        ck_assert(w >= 0 && w < n);
        for (int i = 0; i < n; i++) {
            ck_assert(c[i].score <= c[w].score);
            ck_assert_msg(!(c[i].time_s < c[w].time_s && c[i].gain > c[w].gain),
                          "trial %d: candidate %d dominates the winner %d", trial, i, w);
        }
    }
}
END_TEST

/* ---- flx_ctl over real ranks ---- */

#define CTL_N 30000

static float grad_of(int rank, int step, size_t i)
{
    /* a few large coordinates that move, on a small noise floor */
    unsigned h = (unsigned)(i * 2654435761u) ^ (unsigned)(step * 40503 + rank * 977);
    float base = (float)((h >> 9) & 1023) / 1024.0f - 0.5f;

    return i % 97 == (size_t)step % 97 ? 10.0f * (base + 1.0f) : 0.01f * base;
}

typedef struct {
    flx_ctl_mode_t mode;
    double weight;
} ctl_case_t;

static int body_ctl(flx_comm_h comm, int rank, int size, void *arg)
{
    const ctl_case_t *cs = arg;
    flx_ctl_opts_t o;
    flx_ctl_h h;
    float *g = malloc(CTL_N * sizeof(float)), *all = malloc(CTL_N * sizeof(float));
    flx_status_t st;
    int dense_steps = 0;

    flx_ctl_opts_default(&o);
    o.field_mask = FLX_CTL_OPT_MODE | FLX_CTL_OPT_WEIGHT | FLX_CTL_OPT_SEGMENTS |
                   FLX_CTL_OPT_INTERVAL;
    o.mode = cs->mode;
    o.weight = cs->weight;
    o.nsegments = 3;
    o.segments[0] = 20000;
    o.segments[1] = 9990;
    o.segments[2] = 10;
    o.interval = 5;
    st = flx_ctl_create(comm, CTL_N, &o, &h);
    if (st != FLX_OK)
        return mp_fail(rank, "flx_ctl_create: %s", flx_status_string(st));
    if (flx_ctl_residual(h) != NULL)
        return mp_fail(rank, "a residual before the first step");
    for (int step = 0; step < 30; step++) {
        flx_ctl_report_t r;
        double dec[4];
        const float *e;

        for (size_t i = 0; i < CTL_N; i++)
            g[i] = grad_of(rank, step, i);
        st = flx_ctl_step(h, g, 0.001 * (rank + 1) * (step + 1), &r);
        if (st != FLX_OK)
            return mp_fail(rank, "step %d: %s", step, flx_status_string(st));
        /* the inputs are the mean over the ranks, agreed during the last
         * step's aftermath: its compute time (the first step waits for its own) */
        if (fabs(r.compute_s - 0.001 * (size + 1) / 2.0 * (step > 0 ? step : 1)) > 1e-12)
            return mp_fail(rank, "step %d: agreed compute %g", step, r.compute_s);
        if (r.kept_fraction <= 0 || r.kept_fraction > 1 || r.sync.bytes_sent == 0)
            return mp_fail(rank, "step %d: kept %g, %llu bytes", step, r.kept_fraction,
                           (unsigned long long)r.sync.bytes_sent);
        /* the same decision everywhere: the ranks' copies are equal */
        dec[0] = r.kept_fraction;
        dec[1] = (double)r.collective;
        dec[2] = r.critical;
        dec[3] = r.predicted_s;
        memcpy(all, dec, sizeof(dec));
        st = flx_allreduce(comm, all, all, 4, FLX_FLOAT64, FLX_MAX, FLX_ALGO_AUTO);
        if (st != FLX_OK || memcmp(all, dec, sizeof(dec)) != 0)
            return mp_fail(rank, "step %d: the ranks decided differently", step);
        /* the same result everywhere */
        memcpy(all, g, CTL_N * sizeof(float));
        st = flx_broadcast(comm, all, CTL_N, FLX_FLOAT32, 0);
        if (st != FLX_OK || memcmp(all, g, CTL_N * sizeof(float)) != 0)
            return mp_fail(rank, "step %d: the synced gradients differ", step);
        if (r.collective == FLX_GSYNC_COLL_ALLREDUCE && step == 0) {
            /* the first dense step: the mean (no residual yet) */
            for (size_t i = 0; i < CTL_N; i++) {
                double mean = 0;
                for (int q = 0; q < size; q++)
                    mean += grad_of(q, step, i);
                mean /= size;
                if (fabs(g[i] - mean) > 1e-5 * (1 + fabs(mean)))
                    return mp_fail(rank, "element %zu: %g, mean %g", i, g[i], mean);
            }
        }
        /* the residual: none after a dense step; after a compressed one, 0
         * at least where this rank sent (k positions), elsewhere g + e */
        e = flx_ctl_residual(h);
        if ((r.collective == FLX_GSYNC_COLL_ALLREDUCE) != (e == NULL))
            return mp_fail(rank, "step %d: %s step, residual %p", step,
                           flx_gsync_coll_name(r.collective), (const void *)e);
        if (e) {
            size_t zeros = 0;
            for (size_t i = 0; i < CTL_N; i++)
                zeros += e[i] == 0.0f;
            if (zeros < r.sync.k || zeros > CTL_N / 2)
                return mp_fail(rank, "step %d: %zu zero residuals, %zu sent", step, zeros,
                               (size_t)r.sync.k);
        }
        dense_steps += r.collective == FLX_GSYNC_COLL_ALLREDUCE;
        if (cs->mode == FLX_CTL_ACCORDION && r.collective != FLX_GSYNC_COLL_ARTOPK)
            return mp_fail(rank, "accordion used %s", flx_gsync_coll_name(r.collective));
        if (cs->mode == FLX_CTL_ACCORDION &&
            r.kept_fraction != (r.critical ? o.critical_kept : o.low_kept))
            return mp_fail(rank, "accordion kept %g (critical %d)", r.kept_fraction, r.critical);
        if (cs->weight == 0 && r.collective != FLX_GSYNC_COLL_ALLREDUCE)
            return mp_fail(rank, "weight 0 must keep everything, got %s",
                           flx_gsync_coll_name(r.collective));
    }
    free(g);
    free(all);
    st = flx_ctl_destroy(h);
    return st == FLX_OK ? 0 : mp_fail(rank, "destroy: %s", flx_status_string(st));
}

static void run_case(flx_ctl_mode_t mode, double weight)
{
    ctl_case_t cs = {mode, weight};

    ck_assert_int_eq(mp_run(3, body_ctl, &cs, 120, NULL), 0);
}

START_TEST(test_ctl_flex) { run_case(FLX_CTL_FLEX, 0.6); }
END_TEST
START_TEST(test_ctl_flex_fastest) { run_case(FLX_CTL_FLEX, 1.0); }
END_TEST
START_TEST(test_ctl_flex_keep_all) { run_case(FLX_CTL_FLEX, 0.0); }
END_TEST
START_TEST(test_ctl_accordion) { run_case(FLX_CTL_ACCORDION, 0.6); }
END_TEST
START_TEST(test_ctl_gravac) { run_case(FLX_CTL_GRAVAC, 0.6); }
END_TEST

static int body_bad(flx_comm_h comm, int rank, int size, void *arg)
{
    flx_ctl_opts_t o;
    flx_ctl_h h = NULL;

    (void)size;
    (void)arg;
    flx_ctl_opts_default(&o);
    o.field_mask = FLX_CTL_OPT_WEIGHT;
    o.weight = 1.5;
    h = (flx_ctl_h)(void *)&o; /* outputs are written only on success */
    if (flx_ctl_create(comm, 100, &o, &h) != FLX_ERR_INVALID_ARG || h != (flx_ctl_h)(void *)&o)
        return mp_fail(rank, "weight 1.5 accepted, or the handle written");
    h = NULL;
    o.field_mask = FLX_CTL_OPT_FRACTIONS;
    o.nfractions = 1;
    o.fractions[0] = 1.0;
    if (flx_ctl_create(comm, 100, &o, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "fraction 1 accepted");
    o.field_mask = FLX_CTL_OPT_SEGMENTS;
    o.nsegments = 2;
    o.segments[0] = 50;
    o.segments[1] = 49;
    if (flx_ctl_create(comm, 100, &o, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "segments summing to 99 accepted for n = 100");
    o.segments[0] = SIZE_MAX; /* the sum wraps to 10 */
    o.segments[1] = 11;
    if (flx_ctl_create(comm, 10, &o, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "segments SIZE_MAX and 11 accepted for n = 10");
    if (flx_ctl_create(comm, 0, NULL, &h) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "n = 0 accepted");
    /* only rank 0 opens the decision log; every rank must fail alike */
    o.field_mask = FLX_CTL_OPT_LOG_PATH;
    o.log_path = "/nonexistent-dir/ctl.csv";
    h = (flx_ctl_h)(void *)&o;
    if (flx_ctl_create(comm, 100, &o, &h) != FLX_ERR_INVALID_ARG || h != (flx_ctl_h)(void *)&o)
        return mp_fail(rank, "an unwritable decision log accepted, or the handle written");
    h = NULL;
    /* one rank refuses (a bad weight, n = 0): every rank fails, at once, and the
     * communicator works on (before, the others waited in the collective part) */
    for (int c = 0; c < 2; c++) {
        flx_status_t st;
        flx_ctl_opts_default(&o);
        o.field_mask = FLX_CTL_OPT_WEIGHT;
        o.weight = c == 0 && rank == 1 ? 1.5 : 0.5;
        st = flx_ctl_create(comm, c == 1 && rank == 1 ? 0 : 100, &o, &h);
        if (st != FLX_ERR_INVALID_ARG || h != NULL)
            return mp_fail(rank, "case %d: rank 1 refused, this rank got %s", c,
                           flx_status_name(st));
        if ((st = flx_barrier(comm)) != FLX_OK)
            return mp_fail(rank, "case %d: barrier after it: %s", c, flx_status_name(st));
    }
    if (flx_ctl_step(NULL, NULL, 0, NULL) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "NULL step accepted");
    if (flx_ctl_create(comm, 100, NULL, NULL) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "NULL handle pointer accepted");
    flx_ctl_opts_default(NULL); /* one log line, no crash */
    flx_ctl_lr_changed(NULL);
    if (flx_ctl_destroy(NULL) != FLX_OK || strcmp(flx_ctl_mode_name((flx_ctl_mode_t)7), "?"))
        return mp_fail(rank, "NULL destroy or an unknown mode's name");
    if (flx_gsync_flush_residual(NULL, NULL) != FLX_ERR_INVALID_ARG)
        return mp_fail(rank, "flx_gsync_flush_residual(NULL) accepted");
    return 0;
}

/* Accordion's kept fractions are its own, not the flex menu's: the gain
 * it predicts at 0.05 lies between those at 0.033 and 0.1 (it reported
 * 0.033's, the menu's nearest); a kept fraction of 1 is a dense
 * allreduce (it ran AR-Topk with k = n), the mean of the ranks'
 * gradients.  Step 0 is critical, so it runs critical_kept. */
static int body_accordion_kept(flx_comm_h comm, int rank, int size, void *arg)
{
    static const double kept[] = {0.033, 0.05, 0.1, 1.0};
    const size_t n = 20000;
    float *g = malloc(n * sizeof(float));
    double gain[4];

    (void)arg;
    for (int c = 0; c < 4; c++) {
        flx_ctl_opts_t o;
        flx_ctl_report_t r;
        flx_ctl_h h;
        flx_status_t st;

        flx_ctl_opts_default(&o);
        o.field_mask = FLX_CTL_OPT_MODE | FLX_CTL_OPT_CRITICAL_KEPT;
        o.mode = FLX_CTL_ACCORDION;
        o.critical_kept = kept[c];
        if (flx_ctl_create(comm, n, &o, &h) != FLX_OK)
            return mp_fail(rank, "create, critical_kept %g", kept[c]);
        for (size_t i = 0; i < n; i++)
            g[i] = grad_of(rank, 0, i);
        st = flx_ctl_step(h, g, 0.01, &r);
        if (st != FLX_OK || !r.critical || r.kept_fraction != kept[c])
            return mp_fail(rank, "critical_kept %g: %s, critical %d, kept %g", kept[c],
                           flx_status_string(st), r.critical, r.kept_fraction);
        if ((kept[c] < 1) != (r.collective == FLX_GSYNC_COLL_ARTOPK))
            return mp_fail(rank, "critical_kept %g ran %s", kept[c],
                           flx_gsync_coll_name(r.collective));
        gain[c] = r.gain_estimate;
        if (kept[c] == 1) {
            if (flx_ctl_residual(h) != NULL || r.gain_estimate != 1.0)
                return mp_fail(rank, "dense: residual %p, gain %g",
                               (const void *)flx_ctl_residual(h), r.gain_estimate);
            for (size_t i = 0; i < n; i++) {
                double mean = 0;
                for (int q = 0; q < size; q++)
                    mean += grad_of(q, 0, i);
                mean /= size;
                if (fabs(g[i] - mean) > 1e-5 * (1 + fabs(mean)))
                    return mp_fail(rank, "dense: element %zu is %g, mean %g", i, g[i], mean);
            }
        }
        if (flx_ctl_destroy(h) != FLX_OK)
            return mp_fail(rank, "destroy");
    }
    free(g);
    if (!(gain[0] < gain[1] && gain[1] < gain[2] && gain[2] < gain[3]))
        return mp_fail(rank, "gains %g %g %g %g at kept 0.033 0.05 0.1 1 do not grow", gain[0],
                       gain[1], gain[2], gain[3]);
    return 0;
}

START_TEST(test_ctl_accordion_kept)
{
    ck_assert_int_eq(mp_run(2, body_accordion_kept, NULL, 60, NULL), 0);
}
END_TEST

START_TEST(test_ctl_bad_args) { ck_assert_int_eq(mp_run(2, body_bad, NULL, 60, NULL), 0); }
END_TEST

/* A NaN in one rank's gradient fails the step on every rank, whichever sync
 * the controller picked (weight 0: dense; 1: the fastest, compressed); an
 * infinite compute time, or one past 1e6 s, is refused; the steps after work, with statistics
 * and decisions unharmed (the same on every rank, finite). */
static int body_nan(flx_comm_h comm, int rank, int size, void *arg)
{
    const double weight = *(const double *)arg;
    const size_t n = 20000;
    float *g = malloc(n * sizeof(float));
    flx_ctl_opts_t o;
    flx_ctl_report_t r;
    flx_ctl_h h;
    flx_status_t st;

    flx_ctl_opts_default(&o);
    o.field_mask = FLX_CTL_OPT_WEIGHT | FLX_CTL_OPT_INTERVAL;
    o.weight = weight;
    o.interval = 2; /* the NaN step ends an interval: its norms must not poison the test */
    if (flx_ctl_create(comm, n, &o, &h) != FLX_OK)
        return mp_fail(rank, "create");
    for (int t = 0; t < 8; t++) {
        for (size_t i = 0; i < n; i++)
            g[i] = (float)sin(0.001 * (double)(i + 1) * (t + 1) + rank);
        if (t == 3 && rank == size - 1)
            g[5] = NAN;
        if (t == 2 && flx_ctl_step(h, g, INFINITY, &r) != FLX_ERR_INVALID_ARG)
            return mp_fail(rank, "infinite compute time accepted");
        /* finite but past 1e6 s: 1e308 on 2 ranks overflowed the agreed sum,
         * and every score after it was NaN */
        if (t == 2 && (flx_ctl_step(h, g, 1e308, &r) != FLX_ERR_INVALID_ARG ||
                       flx_ctl_step(h, g, 2e6, &r) != FLX_ERR_INVALID_ARG))
            return mp_fail(rank, "a compute time past 1e6 s accepted");
        st = flx_ctl_step(h, g, 0.01, &r);
        if (t == 3) {
            if (st != FLX_ERR_INVALID_ARG)
                return mp_fail(rank, "NaN on rank %d (weight %g): %s", size - 1, weight,
                               flx_status_string(st));
            continue;
        }
        if (st != FLX_OK)
            return mp_fail(rank, "step %d: %s", t, flx_status_string(st));
        for (size_t i = 0; i < n; i++)
            if (!isfinite(g[i]))
                return mp_fail(rank, "step %d: element %zu is %g", t, i, g[i]);
        if (!isfinite(r.gain_estimate) || !isfinite(r.predicted_s))
            return mp_fail(rank, "step %d: gain estimate %g, predicted %g s", t,
                           r.gain_estimate, r.predicted_s);
    }
    free(g);
    return flx_ctl_destroy(h) == FLX_OK ? 0 : mp_fail(rank, "destroy");
}

START_TEST(test_ctl_nan)
{
    static const double weights[] = {0.0, 1.0};
    double w = weights[_i];

    ck_assert_int_eq(mp_run(2, body_nan, &w, 60, NULL), 0);
}
END_TEST

/* A step that fails (a NaN on rank 1) and is retried with the same, clean
 * gradient leaves the controller where the clean step alone would: the
 * critical test's accumulated norms (the log's critical and change) are
 * those of a run without the failure, step by step.  Before, the failed
 * attempt's samples counted too. */
typedef struct {
    int crit;
    double change, alpha, bandwidth, compute;
    char choice[32];
} ctl_line_t;

/* per step, the log's last line (first: its first, when a step was retried) */
static int ctl_log_read(const char *path, ctl_line_t *last, ctl_line_t *first, int max)
{
    char line[4096];
    int n = 0;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long step;
        char mode[32];
        ctl_line_t l;
        if (sscanf(line, "%llu,%31[^,],%d,%lf,%lf,%lf,%lf,%31[^,]", &step, mode, &l.crit,
                   &l.change, &l.alpha, &l.bandwidth, &l.compute, l.choice) != 8 ||
            step >= (unsigned)max)
            continue;
        if ((int)step + 1 > n) {
            n = (int)step + 1;
            first[step] = l;
        }
        last[step] = l;
    }
    fclose(f);
    return n;
}

typedef struct {
    char dir[64];
    int fail_step, interval;
} retry_arg_t;

static int body_retry(flx_comm_h comm, int rank, int size, void *arg)
{
    enum { STEPS = 10 };
    const size_t n = 20000;
    float *g = malloc(n * sizeof(float));
    const retry_arg_t *ra = arg;
    const char *dir = ra->dir;
    char path[2][256];
    ctl_line_t last[2][STEPS], first[2][STEPS];

    for (int run = 0; run < 2; run++) {
        flx_ctl_opts_t o;
        flx_ctl_report_t r;
        flx_ctl_h h;

        snprintf(path[run], sizeof(path[run]), "%s/retry%d.csv", dir, run);
        flx_ctl_opts_default(&o);
        o.field_mask = FLX_CTL_OPT_INTERVAL | FLX_CTL_OPT_LOG_PATH;
        o.interval = ra->interval;
        o.log_path = path[run];
        if (flx_ctl_create(comm, n, &o, &h) != FLX_OK)
            return mp_fail(rank, "create");
        for (int t = 0; t < STEPS; t++) {
            for (int attempt = run == 1 && t == ra->fail_step ? 0 : 1; attempt < 2; attempt++) {
                flx_status_t st;
                for (size_t i = 0; i < n; i++)
                    g[i] = (float)sin(0.001 * (double)(i + 1) * (t + 1) + rank);
                if (attempt == 0 && rank == size - 1)
                    g[5] = NAN;
                st = flx_ctl_step(h, g, 0.01, &r);
                if (st != (attempt == 0 ? FLX_ERR_INVALID_ARG : FLX_OK))
                    return mp_fail(rank, "run %d step %d attempt %d: %s", run, t, attempt,
                                   flx_status_string(st));
            }
        }
        if (flx_ctl_destroy(h) != FLX_OK)
            return mp_fail(rank, "destroy");
    }
    free(g);
    if (rank != 0)
        return 0;
    for (int run = 0; run < 2; run++)
        if (ctl_log_read(path[run], last[run], first[run], STEPS) != STEPS)
            return mp_fail(rank, "log %s: not %d steps", path[run], STEPS);
    for (int t = 0; t < STEPS; t++)
        if (last[0][t].crit != last[1][t].crit || last[0][t].change != last[1][t].change)
            return mp_fail(rank, "step %d: critical %d change %g without the failure, %d %g "
                           "after a failed attempt retried", t, last[0][t].crit,
                           last[0][t].change, last[1][t].crit, last[1][t].change);
    {   /* the retry learnt nothing the failed attempt had learnt already */
        const ctl_line_t *a = &first[1][ra->fail_step], *b = &last[1][ra->fail_step];
        if (a->alpha != b->alpha || a->bandwidth != b->bandwidth || a->compute != b->compute)
            return mp_fail(rank, "step %d: alpha %g, bandwidth %g, compute %g at the failed "
                           "attempt, %g %g %g at its retry", ra->fail_step, a->alpha,
                           a->bandwidth, a->compute, b->alpha, b->bandwidth, b->compute);
    }
    for (int t = 0; t < STEPS; t++)
        if (last[0][t].change != 0 || (ra->fail_step == 0 && last[0][t].crit))
            return 0;
    return mp_fail(rank, "the norms never changed: nothing compared");
}

/* A rank stopped inside a sync (SIGSTOP from rank 0 while rank 1 waits
 * for it, SIGCONT 1.5 s later, as Ctrl-Z and fg do under flxrun): the
 * stop is no network time, so the step that follows learns nothing from
 * that sync's times (the log's alpha and bandwidth stay), where the steps
 * before it learn every time.  Rank 1 saw the gap in its wait. */
enum { STOP_STEP = 4, STOP_STEPS = 7 };

static int body_stopped(flx_comm_h comm, int rank, int size, void *arg)
{
    const size_t n = 20000;
    const char *path = arg;
    float *g = malloc(n * sizeof(float));
    int32_t pid = (int32_t)getpid(), pids[2];
    ctl_line_t last[STOP_STEPS], first[STOP_STEPS];
    flx_ctl_opts_t o;
    flx_ctl_report_t r;
    flx_ctl_h h;
    uint64_t stalled0 = coll_stalled_us(comm);

    (void)size;
    if (g == NULL || flx_allgather(comm, &pid, pids, 1, FLX_INT32, FLX_ALGO_AUTO) != FLX_OK)
        return mp_fail(rank, "allgather of pids");
    flx_ctl_opts_default(&o);
    o.field_mask = FLX_CTL_OPT_LOG_PATH;
    o.log_path = rank == 0 ? path : NULL;
    if (flx_ctl_create(comm, n, &o, &h) != FLX_OK)
        return mp_fail(rank, "create");
    for (int t = 0; t < STOP_STEPS; t++) {
        for (size_t i = 0; i < n; i++)
            g[i] = (float)sin(0.001 * (double)(i + 1) * (t + 1) + rank);
        if (t == STOP_STEP && rank == 0) { /* rank 1 is waiting in this step's sync by now */
            usleep(300000);
            if (kill(pids[1], SIGSTOP) != 0)
                return mp_fail(rank, "SIGSTOP: %s", strerror(errno));
            usleep(1500000);
            if (kill(pids[1], SIGCONT) != 0)
                return mp_fail(rank, "SIGCONT: %s", strerror(errno));
        }
        if (flx_ctl_step(h, g, 0.01, &r) != FLX_OK)
            return mp_fail(rank, "step %d failed", t);
    }
    if (flx_ctl_destroy(h) != FLX_OK)
        return mp_fail(rank, "destroy");
    free(g);
    if (rank == 1 && coll_stalled_us(comm) - stalled0 < 1000000)
        return mp_fail(rank, "stopped 1.5 s inside a wait, but %.3f s counted",
                       (double)(coll_stalled_us(comm) - stalled0) * 1e-6);
    if (rank != 0)
        return 0;
    if (ctl_log_read(path, last, first, STOP_STEPS) != STOP_STEPS)
        return mp_fail(rank, "log %s: not %d steps", path, STOP_STEPS);
    for (int t = 2; t < STOP_STEP; t++) /* step 1 learns nothing yet: the last step is 0's */
        if (last[t].alpha == last[t - 1].alpha && last[t].bandwidth == last[t - 1].bandwidth) {
            mp_fail(rank, "step %d learnt nothing from step %d (alpha %g, bandwidth %g): "
                    "nothing to compare", t, t - 1, last[t].alpha, last[t].bandwidth);
            return MP_AGAIN; /* or the machine held a rank unasked */
        }
    if (last[STOP_STEP + 1].alpha != last[STOP_STEP].alpha ||
        last[STOP_STEP + 1].bandwidth != last[STOP_STEP].bandwidth)
        return mp_fail(rank, "step %d learnt from the stopped sync: alpha %g -> %g, bandwidth "
                       "%g -> %g", STOP_STEP + 1, last[STOP_STEP].alpha,
                       last[STOP_STEP + 1].alpha, last[STOP_STEP].bandwidth,
                       last[STOP_STEP + 1].bandwidth);
    return 0;
}

/* CPU seconds of this thread: what a compute of a fixed amount of work
 * takes, however long it was stopped */
static double thread_cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Spin until this thread has run cpu_s; returns the wall seconds it took. */
static double compute_for(double cpu_s)
{
    double t0 = flx_time_now(), c0 = thread_cpu_s();
    volatile double x = 0;

    while (thread_cpu_s() - c0 < cpu_s)
        for (int i = 0; i < 10000; i++)
            x += 1e-9 * i;
    return flx_time_now() - t0;
}

/* A helper process that stops pid after delay_s and resumes it stop_s
 * later, as Ctrl-Z and fg would; -1 when it cannot be forked. */
static pid_t stop_later(pid_t pid, double delay_s, double stop_s)
{
    pid_t helper = fork();

    if (helper == 0) {
        usleep((useconds_t)(delay_s * 1e6));
        int bad = kill(pid, SIGSTOP) != 0;
        usleep((useconds_t)(stop_s * 1e6));
        bad |= kill(pid, SIGCONT) != 0;
        _exit(bad);
    }
    return helper;
}

static int helper_ok(pid_t helper)
{
    int wst;

    return waitpid(helper, &wst, 0) == helper && WIFEXITED(wst) && WEXITSTATUS(wst) == 0;
}

/* The tests of a stop (SIGSTOP) fail on a correct program where this
 * machine also holds a process off the CPU, unasked, for over FLX_STALL_S
 * (1.1-1.3 s pauses seen in CI): the watch counts that pause as well, and
 * the controller's step then learns nothing.  A run that failed only so
 * (the watch counted a sleep or a compute, or a step learnt nothing: exit
 * code MP_AGAIN) is tried again, STALL_TRIES in all; a watch or controller
 * that counts wrong fails every try, and any other failure at once. */
#define STALL_TRIES 3

/* The stall watch counts a stop of its process (1.5 s while it computes),
 * and neither a sleep nor a compute of 2 s: a process asleep or busy still
 * runs its watch thread.  In a child, which the helper stops. */
static int stall_watch_child(void)
{
    flx_stall_watch_t *w = flx_stall_watch_start();
    uint64_t slept, busy, stopped;
    pid_t helper;
    double wall;

    if (w == NULL) {
        fprintf(stderr, "stall watch: no thread: %s\n", strerror(errno));
        return 1;
    }
    usleep(1500000);
    slept = flx_stall_watch_us(w);
    compute_for(2.0);
    busy = flx_stall_watch_us(w);
    if ((helper = stop_later(getpid(), 0.2, 1.5)) < 0)
        return 1;
    wall = compute_for(0.8);
    stopped = flx_stall_watch_us(w);
    flx_stall_watch_stop(w);
    if (!helper_ok(helper)) {
        fprintf(stderr, "stall watch: the helper could not stop and resume the child\n");
        return 1;
    }
    if (slept != 0 || busy != 0) {
        fprintf(stderr, "stall watch: %.3f s counted over a 1.5 s sleep, %.3f s after a "
                "2 s compute\n", (double)slept * 1e-6, (double)busy * 1e-6);
        return MP_AGAIN; /* or the machine held the process */
    }
    /* the stop and up to a tick or so on either side, not the compute */
    if (wall < 2.0 || stopped < 1250000 || (double)stopped * 1e-6 > wall - 0.3) {
        fprintf(stderr, "stall watch: stopped 1.5 s in a 0.8 s compute (%.3f s wall), "
                "%.3f s counted\n", wall, (double)stopped * 1e-6);
        return 1;
    }
    return 0;
}

START_TEST(test_stall_watch)
{
    pid_t child;
    int wst;

    ck_assert_uint_eq(flx_stall_watch_us(NULL), 0);
    flx_stall_watch_stop(NULL);
    for (int try = 0; try < STALL_TRIES; try++) {
        child = fork();
        ck_assert_int_ge(child, 0);
        if (child == 0)
            _exit(stall_watch_child());
        ck_assert_int_eq(waitpid(child, &wst, 0), child);
        ck_assert(WIFEXITED(wst));
        if (WEXITSTATUS(wst) != MP_AGAIN)
            break;
    }
    ck_assert_int_eq(WEXITSTATUS(wst), 0);
}
END_TEST

/* A rank stopped while it computes (a helper stops rank 1 0.2 s into a
 * compute of 0.8 s CPU, and resumes it 1.5 s later): rank 1's compute
 * time holds the stop, and rank 0 waits for it in the sync, where no wait
 * of rank 1 can see the stop.  Rank 1's stall watch does: the step after
 * learns neither the compute time nor the sync's (the log's compute, alpha
 * and bandwidth stay), where the steps before learn each time, and the
 * step after that learns again.  Before, the step after took the stop as
 * compute on rank 1 and as network on rank 0.  Stopped at step 1, the
 * first whose compute time would replace step 0's (a warm-up: every
 * buffer's first touch), the replacement waits for step 2's: the log's
 * compute at step 3 is step 2's exactly, not a mean with step 0's. */
enum { BETWEEN_STEPS = 7 };

typedef struct {
    char path[64];
    int stop_step;
} between_arg_t;

static int body_stopped_between(flx_comm_h comm, int rank, int size, void *arg)
{
    const size_t n = 20000;
    const between_arg_t *ba = arg;
    const char *path = ba->path;
    const int BETWEEN_STEP = ba->stop_step;
    float *g = malloc(n * sizeof(float));
    ctl_line_t last[BETWEEN_STEPS], first[BETWEEN_STEPS];
    flx_ctl_opts_t o;
    flx_ctl_report_t r;
    flx_ctl_h h;

    (void)size;
    if (g == NULL)
        return mp_fail(rank, "no memory");
    flx_ctl_opts_default(&o);
    o.field_mask = FLX_CTL_OPT_LOG_PATH;
    o.log_path = rank == 0 ? path : NULL;
    if (flx_ctl_create(comm, n, &o, &h) != FLX_OK)
        return mp_fail(rank, "create");
    for (int t = 0; t < BETWEEN_STEPS; t++) {
        double compute_s = 0.010 + 0.004 * t; /* a new one each step: the estimate moves */
        pid_t helper = -1;

        for (size_t i = 0; i < n; i++)
            g[i] = (float)sin(0.001 * (double)(i + 1) * (t + 1) + rank);
        if (t == BETWEEN_STEP && rank == 1) {
            if ((helper = stop_later(getpid(), 0.2, 1.5)) < 0)
                return mp_fail(rank, "fork: %s", strerror(errno));
            compute_s = compute_for(0.8);
            if (!helper_ok(helper))
                return mp_fail(rank, "the helper could not stop and resume rank 1");
            if (compute_s < 2.0)
                return mp_fail(rank, "a compute of 0.8 s stopped for 1.5 s took %.3f s",
                               compute_s);
        }
        if (flx_ctl_step(h, g, compute_s, &r) != FLX_OK)
            return mp_fail(rank, "step %d failed", t);
    }
    if (flx_ctl_destroy(h) != FLX_OK)
        return mp_fail(rank, "destroy");
    free(g);
    if (rank != 0)
        return 0;
    if (ctl_log_read(path, last, first, BETWEEN_STEPS) != BETWEEN_STEPS)
        return mp_fail(rank, "log %s: not %d steps", path, BETWEEN_STEPS);
    for (int t = 2; t < BETWEEN_STEPS; t++) {
        const ctl_line_t *a = &last[t - 1], *b = &last[t];
        /* the log's bandwidth is the choice's: compared where it is the same */
        int same = strcmp(a->choice, b->choice) == 0;
        int learnt = a->alpha != b->alpha || (same && a->bandwidth != b->bandwidth);

        if (t == BETWEEN_STEP + 1 && (learnt || a->compute != b->compute))
            return mp_fail(rank, "step %d learnt from the step rank 1 was stopped in: alpha %g "
                           "-> %g, bandwidth %g -> %g, compute %g -> %g", t, a->alpha, b->alpha,
                           a->bandwidth, b->bandwidth, a->compute, b->compute);
        if (t != BETWEEN_STEP + 1 && ((same && !learnt) || a->compute == b->compute)) {
            mp_fail(rank, "step %d learnt nothing from step %d (alpha %g, bandwidth %g, "
                    "compute %g): nothing to compare", t, t - 1, b->alpha, b->bandwidth,
                    b->compute);
            return MP_AGAIN; /* or the machine held a rank unasked */
        }
    }
    if (BETWEEN_STEP == 1 && fabs(last[3].compute - 0.018) > 1e-6)
        return mp_fail(rank, "step 3's compute estimate is %.6f s, not step 2's 0.018 s (step "
                       "0's warm-up %.6f s kept after the stop at step 1)", last[3].compute,
                       last[0].compute);
    return 0;
}

/* body on n ranks, its arg a fresh temporary file's path (removed after) */
static int mp_run_with_file(int n, mp_body_t body)
{
    char path[] = "/tmp/check_ctl_log.XXXXXX";
    int fd = mkstemp(path), failed;

    if (fd < 0)
        return n;
    close(fd);
    failed = mp_run(n, body, path, 60, NULL);
    unlink(path);
    return failed;
}

START_TEST(test_ctl_stopped)
{
    char path[] = "/tmp/check_ctl_log.XXXXXX";
    int fd = mkstemp(path), failed;

    ck_assert_int_ge(fd, 0);
    close(fd);
    failed = mp_run_again(2, body_stopped, path, 60, STALL_TRIES, "test_ctl_stopped");
    unlink(path);
    ck_assert_int_eq(failed, 0);
}
END_TEST

/* No new thread can start in this process from now on: as root, become
 * nobody (root is exempt from the limit), then RLIMIT_NPROC 0.  0 ok. */
static int threads_off(int rank)
{
    const struct rlimit none = {0, 0};

    if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) {
        fprintf(stderr, "rank %d: cannot leave root here (%s: a user namespace?)\n", rank,
                strerror(errno));
        return -1;
    }
    if (setrlimit(RLIMIT_NPROC, &none) != 0) {
        fprintf(stderr, "rank %d: setrlimit(RLIMIT_NPROC, 0): %s\n", rank, strerror(errno));
        return -1;
    }
    return 0;
}

/* A controller whose stall watch cannot start (no thread) warns and works
 * without it: every step succeeds and learns (a stop while computing
 * would be learnt, as before the watch).  The communicator's progress
 * thread, which the agreement needs, is started first. */
static int body_no_watch(flx_comm_h comm, int rank, int size, void *arg)
{
    const size_t n = 4096;
    float *g = malloc(n * sizeof(float));
    double one = 1.0, sum = 0;
    flx_stall_watch_t *w;
    flx_request_h req;
    flx_ctl_opts_t o;
    flx_ctl_report_t r;
    flx_ctl_h h;
    flx_status_t st;

    (void)arg;
    if (g == NULL)
        return mp_fail(rank, "no memory");
    if ((st = flx_iallreduce(comm, &one, &sum, 1, FLX_FLOAT64, FLX_SUM, FLX_ALGO_AUTO,
                             &req)) != FLX_OK ||
        (st = flx_wait(req)) != FLX_OK || sum != size)
        return mp_fail(rank, "the first non-blocking allreduce: %s, sum %g",
                       flx_status_string(st), sum);
    /* where no thread can be kept from starting (a user namespace's root,
     * which cannot become nobody, nor is held by the limit), nothing to
     * test: said, and passed */
    if (threads_off(rank) != 0) {
        fprintf(stderr, "ctl_no_watch: SKIPPED on rank %d\n", rank);
        return 0;
    }
    errno = 0;
    if ((w = flx_stall_watch_start()) != NULL) {
        flx_stall_watch_stop(w);
        fprintf(stderr, "ctl_no_watch: SKIPPED on rank %d: RLIMIT_NPROC 0 does not stop "
                "threads here\n", rank);
        return 0;
    }
    if (errno != EAGAIN)
        return mp_fail(rank, "no stall watch under RLIMIT_NPROC 0, but errno %d, not EAGAIN",
                       errno);
    flx_ctl_opts_default(&o);
    if ((st = flx_ctl_create(comm, n, &o, &h)) != FLX_OK)
        return mp_fail(rank, "create without a stall watch: %s", flx_status_string(st));
    for (int step = 0; step < 4; step++) {
        for (size_t i = 0; i < n; i++)
            g[i] = (float)sin(0.01 * (double)(i + 1) * (step + 1) + rank);
        if ((st = flx_ctl_step(h, g, 0.001 * (step + 1), &r)) != FLX_OK)
            return mp_fail(rank, "step %d without a stall watch: %s", step,
                           flx_status_string(st));
        if (fabs(r.compute_s - 0.001 * (step > 0 ? step : 1)) > 1e-12)
            return mp_fail(rank, "step %d: agreed compute %g", step, r.compute_s);
    }
    if ((st = flx_ctl_destroy(h)) != FLX_OK)
        return mp_fail(rank, "destroy: %s", flx_status_string(st));
    free(g);
    return 0;
}

START_TEST(test_ctl_no_watch) { ck_assert_int_eq(mp_run(2, body_no_watch, NULL, 60, NULL), 0); }
END_TEST

/* stopped at step 4, and at step 1 (the warm-up's replacement) */
START_TEST(test_ctl_stopped_between)
{
    between_arg_t ba = {.path = "/tmp/check_ctl_log.XXXXXX", .stop_step = _i == 0 ? 4 : 1};
    int fd = mkstemp(ba.path), failed;

    ck_assert_int_ge(fd, 0);
    close(fd);
    failed = mp_run_again(2, body_stopped_between, &ba, 60, STALL_TRIES,
                          "test_ctl_stopped_between");
    unlink(ba.path);
    ck_assert_int_eq(failed, 0);
}
END_TEST

/* the failed step: 3 (interval 2), 0 (interval 1: the first interval is
 * critical; a retry that took the agreement twice made it not), 4 (1) */
START_TEST(test_ctl_retry)
{
    static const int cases[3][2] = {{3, 2}, {0, 1}, {4, 1}};
    retry_arg_t ra = {.dir = "/tmp/check_ctl_retry.XXXXXX", .fail_step = cases[_i][0],
                      .interval = cases[_i][1]};

    ck_assert_ptr_nonnull(mkdtemp(ra.dir));
    ck_assert_int_eq(mp_run(2, body_retry, &ra, 60, NULL), 0);
    for (int run = 0; run < 2; run++) {
        char path[256];
        snprintf(path, sizeof(path), "%s/retry%d.csv", ra.dir, run);
        unlink(path);
    }
    rmdir(ra.dir);
}
END_TEST

/* flx_gsync_flush_residual hands back exactly what error feedback held and
 * leaves zero behind (what a dense step of the controller relies on) */
static int body_flush(flx_comm_h comm, int rank, int size, void *arg)
{
    flx_gsync_opts_t o;
    flx_gsync_h h;
    float g[100], back[100], held[100];
    const float *e;

    (void)size;
    (void)arg;
    flx_gsync_opts_default(&o);
    o.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_KEPT_FRACTION;
    o.method = FLX_COMPRESS_TOPK;
    o.kept_fraction = 0.1;
    if (flx_gsync_create(comm, 100, &o, &h) != FLX_OK)
        return mp_fail(rank, "gsync create");
    for (int i = 0; i < 100; i++)
        g[i] = (float)((i * 37) % 100) - 50.0f;
    if (flx_gsync_step(h, g, NULL) != FLX_OK || (e = flx_gsync_residual(h)) == NULL)
        return mp_fail(rank, "gsync step");
    memcpy(held, e, sizeof(held));
    memset(back, 0, sizeof(back));
    if (flx_gsync_flush_residual(h, back) != FLX_OK)
        return mp_fail(rank, "flush");
    e = flx_gsync_residual(h);
    for (int i = 0; i < 100; i++)
        if (back[i] != held[i] || e[i] != 0.0f)
            return mp_fail(rank, "element %d: flushed %g, held %g, left %g", i, back[i], held[i],
                           e[i]);
    return flx_gsync_destroy(h) == FLX_OK ? 0 : mp_fail(rank, "destroy");
}

/* gravac decides on an EWMA of each fraction's gain, as GraVAC does: a
 * gradient whose energy sits in 20 coordinates (every fraction keeps nearly
 * all of it) turns at step 10 into one of even magnitudes (a
 * tenth of the coordinates keep about a third of it).  The gain the
 * decision log shows for AR-Topk at 0.1 falls over several steps from
 * about 1 towards that third (step 11 decides on step 10's statistics);
 * the last step's gain alone dropped to 0.40 at once.  One rank: every
 * step keeps everything, so no residual and no learnt ratio (both depend
 * on which candidate the timings picked) moves the gains; with two ranks
 * a compressed step 10 left its residual in step 11's statistics, and the
 * gain went 0.820 -> 0.797 where it went 0.820 -> 0.695 after a dense one. */
#define EWMA_N 40000

static float grad_turns(int step, size_t i)
{
    unsigned h = (unsigned)(i * 2654435761u) ^ (unsigned)(step * 40503);
    float sign = (h >> 13) & 1 ? 1.0f : -1.0f, mag = 0.5f + (float)((h >> 3) & 1023) / 2048.0f;

    if (step < 10)
        return i % 2000 == 0 ? 100.0f * sign * mag : 1e-3f * sign * mag;
    return sign * mag;
}

/* the gain of candidate `name` in a decision-log line, or -1 */
static double log_gain(const char *line, const char *name)
{
    const char *p = strstr(line, name);
    double t, g;

    return p && sscanf(p + strlen(name), ":%lf:%lf", &t, &g) == 2 ? g : -1;
}

static int body_gravac_ewma(flx_comm_h comm, int rank, int size, void *arg)
{
    const char *path = arg;
    flx_ctl_opts_t o;
    flx_ctl_h h;
    float *g = malloc(EWMA_N * sizeof(float));
    double gain[16];
    char line[4096];
    flx_status_t st;
    FILE *f;

    (void)size;
    flx_ctl_opts_default(&o);
    o.field_mask = FLX_CTL_OPT_MODE | FLX_CTL_OPT_LOG_PATH;
    o.mode = FLX_CTL_GRAVAC;
    o.log_path = path;
    if ((st = flx_ctl_create(comm, EWMA_N, &o, &h)) != FLX_OK)
        return mp_fail(rank, "flx_ctl_create: %s", flx_status_string(st));
    for (int step = 0; step < 16; step++) {
        flx_ctl_report_t r;
        for (size_t i = 0; i < EWMA_N; i++)
            g[i] = grad_turns(step, i);
        if ((st = flx_ctl_step(h, g, 0.001, &r)) != FLX_OK)
            return mp_fail(rank, "step %d: %s", step, flx_status_string(st));
    }
    free(g);
    if ((st = flx_ctl_destroy(h)) != FLX_OK)
        return mp_fail(rank, "destroy: %s", flx_status_string(st));
    if (rank != 0)
        return 0;
    f = fopen(path, "r");
    if (f == NULL)
        return mp_fail(rank, "no decision log %s", path);
    for (int step = -1; step < 16 && fgets(line, sizeof(line), f); step++)
        if (step >= 0 && (gain[step] = log_gain(line, "artopk@0.1")) < 0)
            return mp_fail(rank, "step %d: no artopk@0.1 in %s", step, line);
    fclose(f);
    unlink(path);
    if (gain[10] < 0.9 || gain[11] < 0.7)
        return mp_fail(rank, "the gain at 0.1 fell at once: %.3f at step 10, %.3f at 11",
                       gain[10], gain[11]);
    /* 0.3 on the newest: step 11's gain gives the even gradient's, and each
     * later step moves 0.3 of the way to it (1.000, 0.820, 0.695, 0.607,
     * 0.545, 0.502 at steps 10-15 here) */
    double even = (gain[11] - 0.7 * gain[10]) / 0.3;
    for (int step = 12; step < 16; step++)
        if (fabs(gain[step] - (0.7 * gain[step - 1] + 0.3 * even)) > 0.02)
            return mp_fail(rank, "step %d: the gain at 0.1 went %.3f -> %.3f (even: %.3f)",
                           step, gain[step - 1], gain[step], even);
    if (gain[15] > 0.6 || gain[15] < 0.3)
        return mp_fail(rank, "step 15: the gain at 0.1 is %.3f, not near a third", gain[15]);
    return 0;
}

START_TEST(test_gravac_ewma) { ck_assert_int_eq(mp_run_with_file(1, body_gravac_ewma), 0); }
END_TEST

START_TEST(test_flush_residual) { ck_assert_int_eq(mp_run(2, body_flush, NULL, 60, NULL), 0); }
END_TEST

int main(void)
{
    Suite *s = suite_create("controller");
    TCase *pure = tcase_create("pure"), *ranks = tcase_create("ranks");
    TCase *watch = tcase_create("watch");
    SRunner *sr;
    int failed;

    tcase_add_test(pure, test_terms);
    tcase_add_test(pure, test_select_update);
    tcase_add_test(pure, test_ratio_per_fraction);
    tcase_add_test(pure, test_hist_gain);
    tcase_add_test(pure, test_critical);
    tcase_add_test(pure, test_learn_model);
    tcase_add_test(pure, test_share_change);
    tcase_add_test(pure, test_choose_rules);
    tcase_add_test(pure, test_choose_pareto);
    tcase_set_timeout(watch, 60); /* up to STALL_TRIES runs of about 6-9 s */
    tcase_add_test(watch, test_stall_watch);
    tcase_set_timeout(ranks, 240);
    tcase_add_test(ranks, test_ctl_flex);
    tcase_add_test(ranks, test_ctl_flex_fastest);
    tcase_add_test(ranks, test_ctl_flex_keep_all);
    tcase_add_test(ranks, test_ctl_accordion);
    tcase_add_test(ranks, test_ctl_gravac);
    tcase_add_test(ranks, test_ctl_accordion_kept);
    tcase_add_test(ranks, test_ctl_bad_args);
    tcase_add_loop_test(ranks, test_ctl_nan, 0, 2);
    tcase_add_loop_test(ranks, test_ctl_retry, 0, 3);
    tcase_add_test(ranks, test_flush_residual);
    tcase_add_test(ranks, test_ctl_stopped);
    tcase_add_loop_test(ranks, test_ctl_stopped_between, 0, 2);
    tcase_add_test(ranks, test_ctl_no_watch);
    tcase_add_test(ranks, test_gravac_ewma);
    suite_add_tcase(s, pure);
    suite_add_tcase(s, watch);
    suite_add_tcase(s, ranks);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
