/* check_topk.c -- the compression layer's local pieces, in one process:
 *
 *   exact top-k       equals a sorted reference (|x| desc, index asc) for many
 *                     n (1 .. 10 M) and k (1 .. n), ties, zeros, -0, Inf; an
 *                     O(n) characterisation checks the large cases
 *   approximate top-k exactly k ascending indices and >= 95 % of the exact
 *                     top-k's energy on normal, heavy-tailed, tie-heavy and
 *                     mostly-zero data, cold and warm (drifting data)
 *   random-k          distinct, ascending, reproducible per (seed, step),
 *                     uniform (chi-square bound), bitmap left clean
 *   quickselect       against a sort, duplicates included
 *   error feedback    g + e_old == C + e_new bit for bit (sparsifiers, casts),
 *                     sums and the non-finite detection of the accumulate pass
 *   QSGD              unbiased (mean of many seeds), levels within bounds
 *   cost model        DESIGN.md's formulas, bytes per rank
 */
#include "compress/cmp.h"
#include "compress/rng.h"
#include "compress/topk.h"
#include "common/dtype.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/require.h"
#define REQUIRE_EQ(a, b)                                                          \
    do {                                                                          \
        long long a_ = (long long)(a), b_ = (long long)(b);                      \
        if (a_ != b_)                                                             \
            ck_abort_msg("%s:%d: %s == %lld, want %lld", __FILE__, __LINE__, #a, a_, b_); \
    } while (0)

/* ---- data ------------------------------------------------------------------ */

enum { D_NORMAL, D_CAUCHY, D_TIES, D_ZEROS, D_EQUAL, D_SIGNED_ZERO, D_INF, D_NARROW, D_COUNT };

static void fill(float *x, size_t n, int dist, uint64_t seed)
{
    cmp_rng_t rng;

    cmp_rng_seed(&rng, seed, (uint64_t)dist, 77);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = cmp_rng_next(&rng);
        switch (dist) {
        case D_NORMAL: x[i] = cmp_rng_normal(&rng); break;
        case D_CAUCHY: x[i] = tanf(3.1415926f * ((float)(r >> 40) * 0x1.0p-24f - 0.5f) * 0.9999f); break;
        case D_TIES: x[i] = (float)((int)(r % 9) - 4); break;              /* -4..4 */
        case D_ZEROS: x[i] = (r % 10) ? 0.0f : (float)((int)(r >> 32) % 1000) / 7.0f; break;
        case D_EQUAL: x[i] = (r & 1) ? 1.5f : -1.5f; break;
        case D_SIGNED_ZERO: x[i] = (r % 3 == 0) ? -0.0f : (r % 3 == 1) ? 0.0f : (float)(r % 5); break;
        case D_INF: x[i] = (r % 1000 == 0) ? ((r >> 20) & 1 ? INFINITY : -INFINITY) : cmp_rng_normal(&rng); break;
        default: x[i] = 1.0f + (float)(r % 4096) * 0x1.0p-23f; break; /* one narrow bin */
        }
    }
}

static double energy(const float *v, size_t k)
{
    double e = 0;

    for (size_t j = 0; j < k; j++)
        e += (double)v[j] * v[j];
    return e;
}

/* ---- references ------------------------------------------------------------------ */

static const float *g_sort_x;

static int by_key_desc(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    uint32_t ki = cmp_topk_key(g_sort_x[i]), kj = cmp_topk_key(g_sort_x[j]);

    if (ki != kj)
        return ki > kj ? -1 : 1;
    return (i > j) - (i < j);
}

static int by_int(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    return (i > j) - (i < j);
}

/* The top-k by sorting every index. */
static void ref_topk(const float *x, size_t n, size_t k, int32_t *out)
{
    int32_t *all = malloc(n * sizeof(int32_t));

    for (size_t i = 0; i < n; i++)
        all[i] = (int32_t)i;
    g_sort_x = x;
    qsort(all, n, sizeof(int32_t), by_key_desc);
    memcpy(out, all, k * sizeof(int32_t));
    qsort(out, k, sizeof(int32_t), by_int);
    free(all);
}

/* O(n) characterisation of the top-k with the lower-index tie rule:
 * ascending distinct indices, values match, every unselected key <= the
 * smallest selected key T, and unselected keys == T come after every
 * selected key == T.  Returns NULL or what is wrong. */
static const char *verify_topk(const float *x, size_t n, size_t k, const int32_t *idx,
                               const float *val)
{
    static char why[160];
    uint32_t T = UINT32_MAX;
    int32_t last_tie = -1;
    size_t j = 0;

    for (size_t a = 0; a < k; a++) {
        if (idx[a] < 0 || (size_t)idx[a] >= n || (a > 0 && idx[a] <= idx[a - 1]))
            return "indices not ascending / out of range";
        if (val && memcmp(&val[a], &x[idx[a]], sizeof(float)) != 0)
            return "value is not x[idx]";
        if (cmp_topk_key(x[idx[a]]) < T)
            T = cmp_topk_key(x[idx[a]]);
    }
    for (size_t a = 0; a < k; a++)
        if (cmp_topk_key(x[idx[a]]) == T)
            last_tie = idx[a];
    for (size_t i = 0; i < n; i++) {
        uint32_t key = cmp_topk_key(x[i]);
        if (j < k && (size_t)idx[j] == i) {
            j++;
            continue;
        }
        if (key > T) {
            snprintf(why, sizeof(why), "unselected [%zu] = %g beats the threshold", i, x[i]);
            return why;
        }
        if (key == T && (int32_t)i < last_tie) {
            snprintf(why, sizeof(why), "tie at [%zu] skipped for the later index %d", i, last_tie);
            return why;
        }
    }
    return NULL;
}

/* ---- exact ----------------------------------------------------------------------------- */

static void check_exact_case(cmp_topk_t *sel, const float *x, size_t n, size_t k, int dist,
                             int32_t *idx, float *val, int32_t *ref)
{
    const char *why;

    cmp_topk_select(sel, x, n, k, CMP_SELECT_EXACT, idx, val, NULL);
    why = verify_topk(x, n, k, idx, val);
    REQUIRE_MSG(why == NULL, "exact n=%zu k=%zu dist %d: %s", n, k, dist, why);
    if (n <= 70000) {
        ref_topk(x, n, k, ref);
        REQUIRE_MSG(memcmp(ref, idx, k * sizeof(int32_t)) == 0,
                      "exact n=%zu k=%zu dist %d differs from the sorted reference", n, k, dist);
    }
}

START_TEST(test_exact_small)
{
    static const size_t ns[] = {1, 2, 3, 5, 16, 17, 100, 1000, 4097, 65539};
    size_t nmax = 65539;
    float *x = malloc(nmax * sizeof(float)), *val = malloc(nmax * sizeof(float));
    int32_t *idx = malloc(nmax * sizeof(int32_t)), *ref = malloc(nmax * sizeof(int32_t));
    cmp_topk_t *sel;

    REQUIRE_EQ(cmp_topk_create(nmax, nmax, 1, 1, &sel), FLX_OK);
    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
        size_t n = ns[a];
        size_t ks[] = {1, 2, n / 3, n / 2, n - 1, n, (n * 7) / 10 + 1};
        for (int d = 0; d < D_COUNT; d++) {
            fill(x, n, d, n * 31 + (size_t)d);
            for (size_t b = 0; b < sizeof(ks) / sizeof(ks[0]); b++)
                if (ks[b] >= 1 && ks[b] <= n)
                    check_exact_case(sel, x, n, ks[b], d, idx, val, ref);
        }
    }
    cmp_topk_destroy(sel);
    free(ref);
    free(idx);
    free(val);
    free(x);
}
END_TEST

/* Data that defeats the first histogram level (one bin holds everything) and
 * all-equal magnitudes (the third level decides, ties everywhere). */
START_TEST(test_exact_levels)
{
    size_t n = 3000000;
    float *x = malloc(n * sizeof(float)), *val = malloc(n * sizeof(float));
    int32_t *idx = malloc(n * sizeof(int32_t));
    cmp_topk_t *sel;
    cmp_topk_info_t info;
    size_t ks[] = {1, 12345, n / 2, n - 1};

    REQUIRE_EQ(cmp_topk_create(n, n, 1, 1, &sel), FLX_OK);
    for (int d = 0; d < 2; d++) {
        fill(x, n, d ? D_EQUAL : D_NARROW, 9);
        for (size_t b = 0; b < 4; b++) {
            const char *why;
            cmp_topk_select(sel, x, n, ks[b], CMP_SELECT_EXACT, idx, val, &info);
            why = verify_topk(x, n, ks[b], idx, val);
            REQUIRE_MSG(why == NULL, "levels d=%d k=%zu: %s", d, ks[b], why);
            REQUIRE_MSG(info.passes >= 3, "a narrow bin needs more than one level (%d passes)",
                          info.passes);
        }
    }
    /* all equal: the k lowest indices */
    cmp_topk_select(sel, x, n, 1000, CMP_SELECT_EXACT, idx, val, NULL);
    for (int32_t j = 0; j < 1000; j++)
        REQUIRE_EQ(idx[j], j);
    cmp_topk_destroy(sel);
    free(idx);
    free(val);
    free(x);
}
END_TEST

/* 10 M elements: exact and approximate, two distributions, a couple of k. */
START_TEST(test_large)
{
    size_t n = 10000019;
    float *x = malloc(n * sizeof(float)), *val = malloc(n * sizeof(float));
    int32_t *idx = malloc(n * sizeof(int32_t));
    cmp_topk_t *sel;
    static const int dists[2] = {D_NORMAL, D_TIES};
    size_t ks[2] = {100000, 1};

    REQUIRE_EQ(cmp_topk_create(n, n, 2, 3, &sel), FLX_OK);
    for (int d = 0; d < 2; d++) {
        fill(x, n, dists[d], 5);
        for (int b = 0; b < 2; b++) {
            const char *why;
            double e_exact;
            cmp_topk_select(sel, x, n, ks[b], CMP_SELECT_EXACT, idx, val, NULL);
            why = verify_topk(x, n, ks[b], idx, val);
            REQUIRE_MSG(why == NULL, "10M exact dist %d k=%zu: %s", dists[d], ks[b], why);
            e_exact = energy(val, ks[b]);
            cmp_topk_select(sel, x, n, ks[b], CMP_SELECT_APPROX, idx, val, NULL);
            for (size_t j = 1; j < ks[b]; j++)
                REQUIRE(idx[j] > idx[j - 1]);
            REQUIRE_MSG(energy(val, ks[b]) >= 0.95 * e_exact, "10M approx dist %d k=%zu: "
                          "%.4f of the exact energy", dists[d], ks[b], energy(val, ks[b]) / e_exact);
        }
    }
    cmp_topk_destroy(sel);
    free(idx);
    free(val);
    free(x);
}
END_TEST

/* ---- approximate ------------------------------------------------------------------------ */

START_TEST(test_approx_energy)
{
    static const int dists[] = {D_NORMAL, D_CAUCHY, D_TIES, D_ZEROS, D_EQUAL, D_INF};
    static const double fractions[] = {0.3, 0.1, 0.01, 0.001, 0.0001};
    size_t n = 1000003;
    float *x = malloc(n * sizeof(float)), *val = malloc(n * sizeof(float));
    float *xv = malloc(n * sizeof(float));
    int32_t *idx = malloc(n * sizeof(int32_t));
    cmp_topk_t *exact, *approx;

    REQUIRE_EQ(cmp_topk_create(n, n, 1, 1, &exact), FLX_OK);
    REQUIRE_EQ(cmp_topk_create(n, n, 2, 1, &approx), FLX_OK);
    for (size_t a = 0; a < sizeof(dists) / sizeof(dists[0]); a++) {
        fill(x, n, dists[a], 11);
        for (size_t f = 0; f < sizeof(fractions) / sizeof(fractions[0]); f++) {
            size_t k = (size_t)(fractions[f] * (double)n);
            /* cold, then 6 warm steps on drifting data (5% larger each) */
            cmp_topk_reset(approx);
            for (int step = 0; step < 7; step++) {
                double e_exact, e_approx;
                float scale = 1.0f + 0.05f * (float)step;
                for (size_t i = 0; i < n; i++)
                    xv[i] = x[(i + (size_t)step * 7919) % n] * scale;
                cmp_topk_select(exact, xv, n, k, CMP_SELECT_EXACT, idx, val, NULL);
                e_exact = energy(val, k);
                cmp_topk_select(approx, xv, n, k, CMP_SELECT_APPROX, idx, val, NULL);
                for (size_t j = 0; j < k; j++) {
                    REQUIRE(j == 0 || idx[j] > idx[j - 1]);
                    REQUIRE(memcmp(&val[j], &xv[idx[j]], sizeof(float)) == 0);
                }
                e_approx = energy(val, k);
                if (isinf(e_exact)) /* Inf data: the Infs must be kept */
                    REQUIRE(isinf(e_approx));
                else
                    REQUIRE_MSG(e_approx >= 0.95 * e_exact, "approx dist %d c=%g step %d: "
                                  "%.4f of the exact energy", dists[a], fractions[f], step,
                                  e_approx / e_exact);
            }
        }
    }
    cmp_topk_destroy(approx);
    cmp_topk_destroy(exact);
    free(idx);
    free(xv);
    free(val);
    free(x);
}
END_TEST

/* A warm hit returns the exact top-k (the trim is exact). */
START_TEST(test_approx_hit_is_exact)
{
    size_t n = 500000, k = 5000;
    float *x = malloc(n * sizeof(float)), *val = malloc(n * sizeof(float));
    int32_t *idx = malloc(n * sizeof(int32_t));
    cmp_topk_t *sel;
    cmp_topk_info_t info;

    REQUIRE_EQ(cmp_topk_create(n, 2 * k, 1, 1, &sel), FLX_OK);
    fill(x, n, D_NORMAL, 3);
    cmp_topk_select(sel, x, n, k, CMP_SELECT_APPROX, idx, val, NULL);
    cmp_topk_select(sel, x, n, k, CMP_SELECT_APPROX, idx, val, &info);
    REQUIRE_EQ(info.passes, 1); /* the previous threshold hits at once */
    REQUIRE_EQ(info.exact_path, 0);
    REQUIRE_MSG(verify_topk(x, n, k, idx, val) == NULL, "%s", verify_topk(x, n, k, idx, val));
    /* a count just short of k (by 1 %): accepted and filled with the lowest
     * unselected indices; everything above the threshold is kept */
    {
        size_t m1 = 0, k2, j = 0, filled = 0;
        double e_exact;
        cmp_topk_t *ref;

        for (size_t i = 0; i < n; i++)
            m1 += cmp_topk_key(x[i]) >= info.threshold;
        k2 = m1 + m1 / 100;
        REQUIRE_EQ(cmp_topk_create(n, k2, 1, 1, &ref), FLX_OK); /* keeps sel's threshold */
        cmp_topk_select(ref, x, n, k2, CMP_SELECT_EXACT, idx, val, NULL);
        cmp_topk_destroy(ref);
        e_exact = energy(val, k2);
        cmp_topk_select(sel, x, n, k2, CMP_SELECT_APPROX, idx, val, &info);
        REQUIRE_EQ(info.passes, 1);
        REQUIRE_EQ(info.filled, k2 - m1);
        for (size_t i = 0; i < n; i++) {
            int taken = j < k2 && (size_t)idx[j] == i;
            REQUIRE(!(cmp_topk_key(x[i]) >= info.threshold) || taken);
            if (taken) {
                REQUIRE(j == 0 || idx[j] > idx[j - 1]);
                REQUIRE(memcmp(&val[j], &x[i], sizeof(float)) == 0);
                filled += cmp_topk_key(x[i]) < info.threshold;
                j++;
            }
        }
        REQUIRE_EQ(j, k2);
        REQUIRE_EQ(filled, k2 - m1);
        REQUIRE_MSG(energy(val, k2) >= 0.95 * e_exact, "filled selection: %.4f of the energy",
                    energy(val, k2) / e_exact);
    }
    cmp_topk_destroy(sel);
    free(idx);
    free(val);
    free(x);
}
END_TEST

/* ---- random-k --------------------------------------------------------------------------- */

START_TEST(test_randk)
{
    size_t n = 64, k = 8, trials = 20000;
    uint64_t *bm = calloc(cmp_randk_words(100000), sizeof(uint64_t));
    static int32_t idx[100000];
    int32_t idx2[64];
    long counts[64] = {0};
    double chi2 = 0, expect = (double)trials * (double)k / (double)n;

    for (uint64_t t = 0; t < trials; t++) {
        cmp_randk_select(bm, n, k, 42, t, idx);
        for (size_t j = 0; j < k; j++) {
            REQUIRE(idx[j] >= 0 && (size_t)idx[j] < n);
            REQUIRE(j == 0 || idx[j] > idx[j - 1]);
            counts[idx[j]]++;
        }
    }
    for (size_t i = 0; i < n; i++)
        chi2 += (counts[i] - expect) * (counts[i] - expect) / expect;
    /* 63 degrees of freedom: mean 63, sd ~11; 130 is ~6 sd */
    REQUIRE_MSG(chi2 < 130, "random-k is not uniform: chi2 = %.1f", chi2);
    for (size_t w = 0; w < cmp_randk_words(100000); w++)
        REQUIRE(bm[w] == 0);
    /* reproducible per (seed, step), different across steps and seeds */
    cmp_randk_select(bm, n, k, 42, 5, idx);
    cmp_randk_select(bm, n, k, 42, 5, idx2);
    REQUIRE(memcmp(idx, idx2, k * sizeof(int32_t)) == 0);
    cmp_randk_select(bm, 100000, 1000, 42, 6, idx);
    cmp_randk_select(bm, 100000, 1000, 43, 6, idx + 1000);
    REQUIRE(memcmp(idx, idx + 1000, 1000 * sizeof(int32_t)) != 0);
    cmp_randk_select(bm, 100000, 1000, 42, 7, idx + 1000);
    REQUIRE(memcmp(idx, idx + 1000, 1000 * sizeof(int32_t)) != 0);
    /* k = n: everything */
    cmp_randk_select(bm, 100, 100, 1, 1, idx);
    for (int32_t j = 0; j < 100; j++)
        REQUIRE_EQ(idx[j], j);
    free(bm);
}
END_TEST

/* ---- quickselect ------------------------------------------------------------------------- */

static int u32_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

START_TEST(test_nth_largest)
{
    cmp_rng_t rng;
    uint32_t a[5000], s[5000];

    cmp_rng_seed(&rng, 1, 2, 3);
    for (int trial = 0; trial < 300; trial++) {
        size_t m = 1 + cmp_rng_below(&rng, 5000), r = 1 + cmp_rng_below(&rng, m), gt, want_gt = 0;
        uint32_t mod = trial % 3 == 0 ? 3 : trial % 3 == 1 ? 1000 : 0xffffffffu;
        uint32_t got;
        for (size_t i = 0; i < m; i++)
            a[i] = s[i] = (uint32_t)(cmp_rng_next(&rng) % mod);
        if (trial % 7 == 0) /* sorted input: the worst case for naive pivots */
            qsort(a, m, sizeof(uint32_t), u32_desc);
        qsort(s, m, sizeof(uint32_t), u32_desc);
        got = cmp_topk_nth_largest(a, m, r, &gt);
        REQUIRE_EQ(got, s[r - 1]);
        while (want_gt < m && s[want_gt] > got)
            want_gt++;
        REQUIRE_EQ(gt, want_gt);
    }
}
END_TEST

/* ---- error feedback ------------------------------------------------------------------------ */

START_TEST(test_ef_invariant_sparse)
{
    size_t n = 200003, k = 2000;
    float *g = malloc(n * sizeof(float)), *e = calloc(n, sizeof(float));
    float *acc = malloc(n * sizeof(float)), *before = malloc(n * sizeof(float));
    float *val = malloc(k * sizeof(float));
    int32_t *idx = malloc(k * sizeof(int32_t));
    cmp_topk_t *sel;
    cmp_ef_sums_t sums;

    REQUIRE_EQ(cmp_topk_create(n, k, 1, 1, &sel), FLX_OK);
    for (int step = 0; step < 5; step++) {
        double c2, want_c2 = 0;
        fill(g, n, step % 2 ? D_CAUCHY : D_NORMAL, (uint64_t)step);
        cmp_ef_accumulate(g, e, acc, n, &sums);
        REQUIRE(sums.finite);
        for (size_t i = 0; i < n; i++) {
            float a = g[i] + e[i];
            REQUIRE(memcmp(&a, &acc[i], sizeof(float)) == 0);
        }
        memcpy(before, acc, n * sizeof(float));
        cmp_topk_select(sel, acc, n, k, step % 2 ? CMP_SELECT_APPROX : CMP_SELECT_EXACT, idx,
                        val, NULL);
        c2 = cmp_ef_update_sparse(acc, idx, k); /* acc becomes e_new */
        /* C + e_new == g + e_old, bit for bit */
        for (size_t j = 0, i = 0; i < n; i++) {
            float c = (j < k && (size_t)idx[j] == i) ? val[j++] : 0.0f;
            float sum = c + acc[i];
            REQUIRE_MSG(memcmp(&sum, &before[i], sizeof(float)) == 0,
                          "step %d [%zu]: C + e_new = %a, g + e_old = %a", step, i, sum, before[i]);
        }
        for (size_t j = 0; j < k; j++)
            want_c2 += (double)val[j] * val[j];
        REQUIRE(fabs(c2 - want_c2) <= 1e-9 * want_c2);
        memcpy(e, acc, n * sizeof(float));
    }
    cmp_topk_destroy(sel);
    free(idx);
    free(val);
    free(before);
    free(acc);
    free(e);
    free(g);
}
END_TEST

START_TEST(test_ef_accumulate_sums)
{
    size_t n = 100003;
    float *g = malloc(n * sizeof(float)), *e = malloc(n * sizeof(float));
    float *acc = malloc(n * sizeof(float));
    cmp_ef_sums_t sums;
    double g2 = 0, a2 = 0;

    fill(g, n, D_NORMAL, 1);
    fill(e, n, D_CAUCHY, 2);
    for (size_t i = 0; i < n; i++) {
        g2 += (double)g[i] * g[i];
        a2 += (double)(g[i] + e[i]) * (double)(g[i] + e[i]);
    }
    cmp_ef_accumulate(g, e, acc, n, &sums);
    REQUIRE(sums.finite);
    REQUIRE(fabs(sums.g2 - g2) <= 1e-5 * g2);
    REQUIRE(fabs(sums.acc2 - a2) <= 1e-5 * a2);
    cmp_ef_accumulate(g, NULL, NULL, n, &sums);
    REQUIRE(fabs(sums.acc2 - g2) <= 1e-5 * g2);
    /* large but finite values: not an error (float squares overflow) */
    g[5] = 3e30f;
    cmp_ef_accumulate(g, e, acc, n, &sums);
    REQUIRE(sums.finite);
    REQUIRE(sums.g2 >= 8.9e60 && sums.g2 <= 9.1e60);
    /* NaN in g, Inf in g, g + e overflowing */
    g[5] = NAN;
    cmp_ef_accumulate(g, e, acc, n, &sums);
    REQUIRE(!sums.finite);
    g[5] = -INFINITY;
    cmp_ef_accumulate(g, NULL, NULL, n, &sums);
    REQUIRE(!sums.finite);
    g[5] = 3e38f;
    e[5] = 3e38f;
    cmp_ef_accumulate(g, e, acc, n, &sums);
    REQUIRE(!sums.finite);
    free(acc);
    free(e);
    free(g);
}
END_TEST

START_TEST(test_ef_invariant_casts)
{
    size_t n = 100000;
    float *acc = malloc(n * sizeof(float)), *resid = malloc(n * sizeof(float));
    uint16_t *q = malloc(n * sizeof(uint16_t));
    float *d = malloc(n * sizeof(float));

    for (int t = 0; t < 2; t++) {
        flx_dtype_t dt = t ? FLX_BFLOAT16 : FLX_FLOAT16;
        fill(acc, n, D_NORMAL, 4);
        acc[0] = 1e-7f; /* fp16 subnormal range */
        acc[1] = -3e-6f;
        cmp_cast_encode(acc, q, n, dt, resid, 1);
        cmp_cast_decode(q, n, dt, 1.0f, d);
        for (size_t i = 0; i < n; i++) {
            float sum = d[i] + resid[i];
            REQUIRE_MSG(memcmp(&sum, &acc[i], sizeof(float)) == 0,
                          "%s [%zu]: C + e_new = %a, acc = %a", flx_dtype_name(dt), i, sum, acc[i]);
        }
        /* in place (resid aliasing acc) gives the same residual */
        memcpy(d, resid, n * sizeof(float));
        cmp_cast_encode(acc, q, n, dt, acc, 1);
        REQUIRE(memcmp(d, acc, n * sizeof(float)) == 0);
    }
    /* fp16 saturates instead of overflowing */
    acc[0] = 1e6f;
    cmp_cast_encode(acc, q, 1, FLX_FLOAT16, resid, 1);
    cmp_cast_decode(q, 1, FLX_FLOAT16, 1.0f, d);
    REQUIRE(d[0] == 65504.0f);
    REQUIRE(resid[0] == 1e6f - 65504.0f);
    /* ... with a residual, at one rank's share of the range: 2 ranks 32736,
     * 3 ranks 21824 (the largest halves h with N h + 16 (N - 1) <= 65504),
     * the rest in the residual; without, at 65504 */
    for (int ranks = 2; ranks <= 3; ranks++) {
        const float share = ranks == 2 ? 32736.0f : 21824.0f;
        acc[0] = 40000.0f;
        acc[1] = -1e6f;
        cmp_cast_encode(acc, q, 2, FLX_FLOAT16, resid, ranks);
        cmp_cast_decode(q, 2, FLX_FLOAT16, 1.0f, d);
        REQUIRE_MSG(d[0] == share && d[1] == -share && resid[0] == 40000.0f - share &&
                        resid[1] == -1e6f + share,
                    "%d ranks: sent %g %g, residual %g %g", ranks, d[0], d[1], resid[0], resid[1]);
        cmp_cast_encode(acc, q, 2, FLX_FLOAT16, NULL, ranks);
        cmp_cast_decode(q, 2, FLX_FLOAT16, 1.0f, d);
        REQUIRE(d[0] == 40000.0f && d[1] == -65504.0f);
    }
    /* the share summed in half, rounded after each addition, stays finite
     * for every rank count to 512, one rank at a time (the ring) and in
     * pairs (recursive doubling, the tree): 10 ranks' ring overflowed */
    for (int ranks = 2; ranks <= 512; ranks++) {
        float h, seq = 0, pair[512];
        int m = ranks;

        acc[0] = 1e6f;
        cmp_cast_encode(acc, q, 1, FLX_FLOAT16, resid, ranks);
        h = flx_half_to_float(q[0]);
        for (int r = 0; r < ranks; r++) {
            seq = flx_half_to_float(flx_float_to_half(seq + h));
            pair[r] = h;
        }
        while (m > 1) { /* neighbours summed, an odd one carried */
            for (int r = 0; r < m / 2; r++)
                pair[r] = flx_half_to_float(flx_float_to_half(pair[2 * r] + pair[2 * r + 1]));
            if (m % 2)
                pair[m / 2] = pair[m - 1];
            m = (m + 1) / 2;
        }
        REQUIRE_MSG(seq <= 65504.0f && pair[0] <= 65504.0f && h > 0,
                    "%d ranks, share %g: summed in turn %g, in pairs %g", ranks, h, seq, pair[0]);
    }
    /* bf16 saturates too: 3.4e38 rounds up past its largest finite value */
    acc[0] = 3.4e38f;
    acc[1] = -3.4e38f;
    cmp_cast_encode(acc, q, 2, FLX_BFLOAT16, resid, 1);
    cmp_cast_decode(q, 2, FLX_BFLOAT16, 1.0f, d);
    REQUIRE(q[0] == 0x7f7f && q[1] == 0xff7f);
    for (int i = 0; i < 2; i++)
        REQUIRE_MSG(isfinite(resid[i]) && d[i] + resid[i] == acc[i], "bf16 [%d]: %a + %a != %a",
                    i, d[i], resid[i], acc[i]);
    REQUIRE(cmp_cast_first_nonfinite(q, 2, FLX_BFLOAT16) == 2);
    /* a half-precision sum that overflowed is found: fp16 Inf, NaN; bf16 Inf */
    q[0] = flx_float_to_half(1.0f);
    q[1] = 0x7c00;
    REQUIRE(cmp_cast_first_nonfinite(q, 2, FLX_FLOAT16) == 1);
    q[1] = 0xfe00;
    REQUIRE(cmp_cast_first_nonfinite(q, 2, FLX_FLOAT16) == 1);
    q[1] = 0xff80;
    REQUIRE(cmp_cast_first_nonfinite(q, 2, FLX_BFLOAT16) == 1);
    REQUIRE(cmp_cast_first_nonfinite(q, 1, FLX_FLOAT16) == 1);
    free(d);
    free(q);
    free(resid);
    free(acc);
}
END_TEST

START_TEST(test_qsgd)
{
    size_t n = 2000, bucket = 128, trials = 4000;
    float *acc = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    float *resid = malloc(n * sizeof(float));
    double *mean = calloc(n, sizeof(double));
    void *block = malloc(cmp_qsgd8_bytes(n, bucket));
    cmp_rng_t rng;

    fill(acc, n, D_CAUCHY, 8);
    acc[3] = 0.0f;
    for (size_t t = 0; t < trials; t++) {
        double c2, d2 = 0;
        cmp_rng_seed(&rng, 1, 2, t);
        c2 = cmp_qsgd8_encode(acc, n, bucket, &rng, block, resid);
        memset(out, 0, n * sizeof(float));
        cmp_qsgd8_decode_add(block, n, bucket, out);
        for (size_t i = 0; i < n; i++) {
            float scale = ((const float *)block)[i / bucket];
            mean[i] += out[i];
            d2 += (double)out[i] * out[i];
            /* one level from the value, same sign, residual consistent */
            REQUIRE(fabsf(out[i] - acc[i]) <= scale / 127.0f * 1.0001f);
            REQUIRE(out[i] == 0.0f || (out[i] > 0) == (acc[i] > 0));
            REQUIRE(fabsf(out[i] + resid[i] - acc[i]) <= 1e-6f * scale);
        }
        REQUIRE(fabs(c2 - d2) <= 1e-9 * d2);
    }
    /* unbiased: the mean of the decoded values tends to acc */
    for (size_t i = 0; i < n; i++) {
        float scale = ((const float *)block)[i / bucket];
        double sd = scale / 127.0 / 2 / sqrt((double)trials);
        REQUIRE_MSG(fabs(mean[i] / trials - acc[i]) <= 6 * sd + 1e-7 * fabs(acc[i]),
                      "QSGD biased at [%zu]: mean %g, value %g", i, mean[i] / trials, acc[i]);
    }
    REQUIRE(mean[3] == 0.0);
    /* a bucket of subnormals: 127 / scale overflows a float; the levels
     * stay in range and C + e_new = acc still holds */
    for (size_t i = 0; i < bucket; i++)
        acc[i] = (i % 3 ? 1e-40f : -3e-41f) * (float)(i % 7);
    cmp_rng_seed(&rng, 1, 2, 0);
    cmp_qsgd8_encode(acc, bucket, bucket, &rng, block, resid);
    memset(out, 0, bucket * sizeof(float));
    cmp_qsgd8_decode_add(block, bucket, bucket, out);
    for (size_t i = 0; i < bucket; i++) {
        int8_t l = ((const int8_t *)block + sizeof(float))[i]; /* -127..127 */
        REQUIRE_MSG(l != INT8_MIN && (l == 0 || (l > 0) == (acc[i] > 0)),
                    "subnormal bucket [%zu]: level %d for %a", i, l, acc[i]);
        REQUIRE_MSG(out[i] + resid[i] == acc[i], "subnormal bucket [%zu]: %a + %a != %a", i,
                    out[i], resid[i], acc[i]);
    }
    free(block);
    free(mean);
    free(resid);
    free(out);
    free(acc);
}
END_TEST

/* ---- cost model ---------------------------------------------------------------------------- */

START_TEST(test_model)
{
    const double a = 50e-6, B = 125e6, m = 25e6;

    for (int N = 2; N <= 16; N++) {
        for (double c = 0.001; c <= 1.0; c *= 3.3) {
            double l = log2((double)N), S = 4 * m * c;
            double bc = a * l + l * S / B;
            REQUIRE(fabs(cmp_model_bcast(N, m, c, a, B) - bc) < 1e-12);
            REQUIRE(fabs(cmp_model_ar_ring(N, m, c, a, B) -
                           (bc + 2 * (N - 1) * a + 2.0 * (N - 1) * S / (N * B))) < 1e-12);
            REQUIRE(fabs(cmp_model_ar_tree(N, m, c, a, B) - (bc + 2 * a * l + 2 * l * S / B)) <
                      1e-12);
            REQUIRE(fabs(cmp_model_ag(N, m, c, a, B) - (a * l + 2.0 * (N - 1) * S / B)) < 1e-12);
            /* every compressed path beats dense at c <= 0.1 with 25 M parameters */
            if (c <= 0.1)
                REQUIRE(cmp_model_ar_ring(N, m, c, a, B) < cmp_model_dense_ring(N, m, a, B));
        }
    }
    REQUIRE(cmp_model_ar_ring(1, m, 0.01, a, B) == 0 && cmp_model_ag(1, m, 0.01, a, B) == 0);
    /* the flip the controller exists for: AG wins on 2 ranks at tiny c on a
     * slow-latency link, AR-Topk wins on 8 ranks */
    REQUIRE(cmp_model_ag(2, m, 0.0001, 1e-3, B) < cmp_model_ar_ring(2, m, 0.0001, 1e-3, B));
    REQUIRE(cmp_model_ar_ring(8, m, 0.01, a, B) < cmp_model_ag(8, m, 0.01, a, B));
    /* the pipelined AR-Topk is never slower than the serial one in the model */
    for (int N = 2; N <= 16; N++)
        REQUIRE(cmp_model_ar_pipe(N, m, 0.01, a, B) <= cmp_model_ar_ring(N, m, 0.01, a, B));
    /* bytes: binomial broadcast from 0 over 8 ranks: 0 sends 3, 4 sends 2, 2 and 6 send 1 */
    REQUIRE(cmp_bytes_bcast(8, 0, 0, 10) == 30 && cmp_bytes_bcast(8, 4, 0, 10) == 20);
    REQUIRE(cmp_bytes_bcast(8, 2, 0, 10) == 10 && cmp_bytes_bcast(8, 7, 0, 10) == 0);
    REQUIRE(cmp_bytes_bcast(8, 5, 5, 10) == 30);
    REQUIRE(cmp_bytes_allreduce(FLX_ALGO_RING, 4, 1, 400) == 600);
    REQUIRE(cmp_bytes_allgather(5, 8) == 32);
    /* the pipelined index exchange up to its 12-bit phase limit, serial above */
    REQUIRE(cmp_artopk_index_mode(CMP_INDEX_PIPELINED, 2) == CMP_INDEX_PIPELINED);
    REQUIRE(cmp_artopk_index_mode(CMP_INDEX_PIPELINED, CMP_ARTOPK_PIPE_MAX_RANKS) ==
            CMP_INDEX_PIPELINED);
    REQUIRE(cmp_artopk_index_mode(CMP_INDEX_PIPELINED, CMP_ARTOPK_PIPE_MAX_RANKS + 1) ==
            CMP_INDEX_SERIAL);
    REQUIRE(cmp_artopk_index_mode(CMP_INDEX_PREVIOUS, 4096) == CMP_INDEX_PREVIOUS);
    REQUIRE(cmp_artopk_index_mode(CMP_INDEX_SERIAL, 4096) == CMP_INDEX_SERIAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("topk");
    TCase *tc = tcase_create("local");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_exact_small);
    tcase_add_test(tc, test_exact_levels);
    tcase_add_test(tc, test_large);
    tcase_add_test(tc, test_approx_energy);
    tcase_add_test(tc, test_approx_hit_is_exact);
    tcase_add_test(tc, test_randk);
    tcase_add_test(tc, test_nth_largest);
    tcase_add_test(tc, test_ef_invariant_sparse);
    tcase_add_test(tc, test_ef_accumulate_sums);
    tcase_add_test(tc, test_ef_invariant_casts);
    tcase_add_test(tc, test_qsgd);
    tcase_add_test(tc, test_model);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
