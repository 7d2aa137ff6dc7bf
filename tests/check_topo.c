/* check_topo.c -- unit tests of the pure topology functions
 * (collectives/topo.h), of the alpha-beta cost model (collectives/coll.h)
 * and of the tcp backend's choice of connection for the higher rank's long
 * messages (transport/tcp/lane.h).
 *
 * Every structural property is checked against an independent reference:
 * the tree relations are re-derived by walking the children lists the
 * functions return, and the model's times against the formulas written out
 * in model.c's header comment. */
#include "collectives/coll.h"
#include "collectives/topo.h"
#include "transport/tcp/lane.h"

#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_N 33

/* relative comparison for model times (the formulas are evaluated in the
 * same order, so the tolerance only absorbs contraction by the compiler) */
#define ck_assert_time_eq(got, want)                                         \
    ck_assert_msg(fabs((got) - (want)) <= 1e-12 * fabs(want) + 1e-300,      \
                  "%s = %.17g, expected %.17g", #got, (double)(got),          \
                  (double)(want))

/* ---------------------------------------------------------------------- */
/* topo_mod and the ring                                                   */
/* ---------------------------------------------------------------------- */

START_TEST(test_mod_table)
{
    static const struct { int a, n, want; } table[] = {
        {0, 1, 0},    {5, 1, 0},     {-5, 1, 0},   {0, 5, 0},    {4, 5, 4},
        {5, 5, 0},    {7, 5, 2},     {-1, 5, 4},   {-5, 5, 0},   {-6, 5, 4},
        {-11, 5, 4},  {-1, 2, 1},    {-2, 2, 0},   {-3, 8, 5},   {13, 8, 5},
        {INT_MAX, 2, 1}, {INT_MIN, 2, 0}, {INT_MIN, 7, 5}, {INT_MAX, 7, 1},
    };

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        ck_assert_msg(topo_mod(table[i].a, table[i].n) == table[i].want,
                      "topo_mod(%d, %d) = %d, expected %d", table[i].a, table[i].n,
                      topo_mod(table[i].a, table[i].n), table[i].want);
}
END_TEST

START_TEST(test_mod_range)
{
    for (int n = 1; n <= 17; n++) {
        for (int a = -200; a <= 200; a++) {
            int m = topo_mod(a, n);
            /* reference: the unique m in [0, n) with n | (a - m) */
            ck_assert_int_ge(m, 0);
            ck_assert_int_lt(m, n);
            ck_assert_int_eq(((long long)a - m) % n, 0);
        }
    }
}
END_TEST

START_TEST(test_ring_next_prev)
{
    for (int n = 1; n <= 9; n++) {
        int seen[9] = {0};
        int r = 0;

        for (int rank = 0; rank < n; rank++) {
            int next = topo_ring_next(rank, n);
            int prev = topo_ring_prev(rank, n);

            ck_assert_int_eq(next, rank == n - 1 ? 0 : rank + 1);
            ck_assert_int_eq(prev, rank == 0 ? n - 1 : rank - 1);
            ck_assert_int_eq(topo_ring_prev(next, n), rank);
            ck_assert_int_eq(topo_ring_next(prev, n), rank);
        }
        /* following next from 0 visits every rank once and closes the ring */
        for (int step = 0; step < n; step++) {
            ck_assert_int_eq(seen[r], 0);
            seen[r] = 1;
            r = topo_ring_next(r, n);
        }
        ck_assert_int_eq(r, 0);
        for (int rank = 0; rank < n; rank++)
            ck_assert_int_eq(seen[rank], 1);
    }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* topo_segment                                                            */
/* ---------------------------------------------------------------------- */

static void check_segments(size_t count, int nseg)
{
    size_t expect_off = 0, minlen = SIZE_MAX, maxlen = 0;
    size_t base = count / (size_t)nseg, extra = count % (size_t)nseg;

    for (int i = 0; i < nseg; i++) {
        size_t off = (size_t)-1, len = (size_t)-1;

        topo_segment(count, nseg, i, &off, &len);
        ck_assert_msg(off == expect_off,
                      "count %zu nseg %d seg %d: off %zu, expected %zu (not contiguous)",
                      count, nseg, i, off, expect_off);
        /* contract: the first count % nseg segments are one longer */
        ck_assert_msg(len == base + ((size_t)i < extra ? 1 : 0),
                      "count %zu nseg %d seg %d: len %zu", count, nseg, i, len);
        minlen = len < minlen ? len : minlen;
        maxlen = len > maxlen ? len : maxlen;
        expect_off += len;
    }
    ck_assert_msg(expect_off == count, "count %zu nseg %d: segments cover %zu", count, nseg,
                  expect_off);
    ck_assert_msg(maxlen - minlen <= 1, "count %zu nseg %d: lengths %zu..%zu", count, nseg,
                  minlen, maxlen);
}

START_TEST(test_segment_hand)
{
    static const struct { size_t count; int nseg, index; size_t off, len; } table[] = {
        {10, 3, 0, 0, 4}, {10, 3, 1, 4, 3}, {10, 3, 2, 7, 3},
        {2, 5, 0, 0, 1},  {2, 5, 1, 1, 1},  {2, 5, 2, 2, 0}, {2, 5, 4, 2, 0},
        {0, 4, 0, 0, 0},  {0, 4, 3, 0, 0},
        {7, 1, 0, 0, 7},
        {9, 8, 0, 0, 2},  {9, 8, 1, 2, 1},  {9, 8, 7, 8, 1},
        {7, 8, 6, 6, 1},  {7, 8, 7, 7, 0},
    };

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        size_t off, len;

        topo_segment(table[i].count, table[i].nseg, table[i].index, &off, &len);
        ck_assert_msg(off == table[i].off && len == table[i].len,
                      "topo_segment(%zu, %d, %d) = (%zu, %zu), expected (%zu, %zu)",
                      table[i].count, table[i].nseg, table[i].index, off, len, table[i].off,
                      table[i].len);
    }
}
END_TEST

START_TEST(test_segment_cover)
{
    static const size_t counts[] = {0,    1,    2,     3,     5,     7,     8,
                                    9,    15,   16,    17,    31,    32,    33,
                                    63,   64,   65,    100,   1000,  1023,  1024,
                                    1025, 4095, 65535, 65536, 65537, 1000003};
    static const int nsegs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 1000};

    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        for (size_t s = 0; s < sizeof(nsegs) / sizeof(nsegs[0]); s++)
            check_segments(counts[c], nsegs[s]);
    /* count = nseg - 1, nseg, nseg + 1 for every nseg up to 64 */
    for (int nseg = 1; nseg <= 64; nseg++) {
        check_segments((size_t)nseg - 1, nseg);
        check_segments((size_t)nseg, nseg);
        check_segments((size_t)nseg + 1, nseg);
        check_segments((size_t)nseg * 1000 + (size_t)nseg / 2, nseg);
    }
}
END_TEST

START_TEST(test_segment_large)
{
    static const size_t counts[] = {(size_t)1 << 32, ((size_t)1 << 40) + 3,
                                    ((size_t)1 << 40) - 1, SIZE_MAX / 2 + 7, SIZE_MAX};
    static const int nsegs[] = {1, 2, 3, 7, 8, 33, 1000};

    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        for (size_t s = 0; s < sizeof(nsegs) / sizeof(nsegs[0]); s++)
            check_segments(counts[c], nsegs[s]);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* binary tree                                                             */
/* ---------------------------------------------------------------------- */

START_TEST(test_tree_picture)
{
    int ch[2];

    /* the picture in topo.h, N = 7 */
    ck_assert_int_eq(topo_tree_parent(0), -1);
    ck_assert_int_eq(topo_tree_parent(1), 0);
    ck_assert_int_eq(topo_tree_parent(2), 0);
    ck_assert_int_eq(topo_tree_parent(3), 1);
    ck_assert_int_eq(topo_tree_parent(4), 1);
    ck_assert_int_eq(topo_tree_parent(5), 2);
    ck_assert_int_eq(topo_tree_parent(6), 2);
    ck_assert_int_eq(topo_tree_children(0, 7, ch), 2);
    ck_assert(ch[0] == 1 && ch[1] == 2);
    ck_assert_int_eq(topo_tree_children(2, 7, ch), 2);
    ck_assert(ch[0] == 5 && ch[1] == 6);
    ck_assert_int_eq(topo_tree_children(3, 7, ch), 0);
    ck_assert_int_eq(topo_tree_children(2, 6, ch), 1);
    ck_assert_int_eq(ch[0], 5);
    ck_assert_int_eq(topo_tree_children(0, 1, ch), 0);
    ck_assert_int_eq(topo_tree_children(0, 2, ch), 1);
    ck_assert_int_eq(ch[0], 1);
}
END_TEST

START_TEST(test_tree_structure)
{
    for (int n = 1; n <= MAX_N; n++) {
        int nparents[MAX_N] = {0};
        int depth[MAX_N];
        int queue[MAX_N], head = 0, tail = 0, maxdepth = 0;

        ck_assert_int_eq(topo_tree_parent(0), -1);
        for (int p = 0; p < n; p++) {
            int ch[2] = {-1, -1};
            int k = topo_tree_children(p, n, ch);

            ck_assert_int_ge(k, 0);
            ck_assert_int_le(k, 2);
            for (int j = 0; j < k; j++) {
                ck_assert_int_gt(ch[j], 0);
                ck_assert_int_lt(ch[j], n);
                nparents[ch[j]]++;
            }
            /* c is a child of p iff parent(c) == p */
            for (int c = 0; c < n; c++) {
                int listed = 0;
                for (int j = 0; j < k; j++)
                    listed |= ch[j] == c;
                ck_assert_msg(listed == (topo_tree_parent(c) == p),
                              "N=%d: child %d of %d listed %d, parent %d", n, c, p, listed,
                              topo_tree_parent(c));
            }
        }
        /* every non-root rank has exactly one parent, the root none */
        ck_assert_int_eq(nparents[0], 0);
        for (int r = 1; r < n; r++) {
            ck_assert_int_eq(nparents[r], 1);
            ck_assert_int_ge(topo_tree_parent(r), 0);
            ck_assert_int_lt(topo_tree_parent(r), r);
        }
        /* breadth-first from the root reaches every rank; the deepest level
         * is topo_tree_depth */
        for (int r = 0; r < n; r++)
            depth[r] = -1;
        depth[0] = 0;
        queue[tail++] = 0;
        while (head < tail) {
            int p = queue[head++], ch[2];
            int k = topo_tree_children(p, n, ch);
            for (int j = 0; j < k; j++) {
                ck_assert_int_eq(depth[ch[j]], -1);
                depth[ch[j]] = depth[p] + 1;
                maxdepth = depth[ch[j]] > maxdepth ? depth[ch[j]] : maxdepth;
                queue[tail++] = ch[j];
            }
        }
        ck_assert_int_eq(tail, n);
        ck_assert_msg(topo_tree_depth(n) == maxdepth, "N=%d: depth %d, BFS depth %d", n,
                      topo_tree_depth(n), maxdepth);
    }
}
END_TEST

START_TEST(test_tree_depth_table)
{
    static const int want[] = {/* N=1 */ 0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 4};

    for (int n = 1; n <= 16; n++)
        ck_assert_int_eq(topo_tree_depth(n), want[n - 1]);
    ck_assert_int_eq(topo_tree_depth(31), 4);
    ck_assert_int_eq(topo_tree_depth(32), 5);
    ck_assert_int_eq(topo_tree_depth(1 << 20), 20);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* binomial tree                                                           */
/* ---------------------------------------------------------------------- */

START_TEST(test_binomial_picture)
{
    static const struct { int rank, parent, n, ch[3]; } want[] = {
        {0, -1, 3, {4, 2, 1}}, {1, 0, 0, {0}}, {2, 0, 1, {3}},    {3, 2, 0, {0}},
        {4, 0, 2, {6, 5}},     {5, 4, 0, {0}}, {6, 4, 1, {7}},    {7, 6, 0, {0}},
    };

    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        int ch[32], nch = -1;
        int parent = topo_binomial(want[i].rank, 8, 0, ch, &nch);

        ck_assert_int_eq(parent, want[i].parent);
        ck_assert_int_eq(nch, want[i].n);
        for (int j = 0; j < nch; j++)
            ck_assert_int_eq(ch[j], want[i].ch[j]);
    }
    /* the same tree rotated to root 5 of 8: virtual rank + 5 */
    {
        int ch[32], nch = -1;
        ck_assert_int_eq(topo_binomial(5, 8, 5, ch, &nch), -1);
        ck_assert_int_eq(nch, 3);
        ck_assert(ch[0] == 1 && ch[1] == 7 && ch[2] == 6);
        ck_assert_int_eq(topo_binomial(4, 8, 5, ch, &nch), 3); /* v=7 <- v=6 */
        ck_assert_int_eq(nch, 0);
    }
}
END_TEST

START_TEST(test_binomial_structure)
{
    for (int n = 1; n <= MAX_N; n++) {
        int ceil_log2 = 0;

        while ((1 << ceil_log2) < n)
            ceil_log2++;
        for (int root = 0; root < n; root++) {
            int parent[MAX_N], nch[MAX_N], ch[MAX_N][32];
            int nparents[MAX_N] = {0}, round[MAX_N];
            int queue[MAX_N], head = 0, tail = 0, maxround = 0;

            for (int r = 0; r < n; r++) {
                nch[r] = -1;
                parent[r] = topo_binomial(r, n, root, ch[r], &nch[r]);
                ck_assert_int_ge(nch[r], 0);
                ck_assert_int_le(nch[r], 32);
                ck_assert_msg((parent[r] == -1) == (r == root),
                              "N=%d root %d: rank %d has parent %d", n, root, r, parent[r]);
                if (r != root) {
                    ck_assert_int_ge(parent[r], 0);
                    ck_assert_int_lt(parent[r], n);
                }
                /* rotation: rank r with root is virtual rank r-root with root 0 */
                {
                    int vch[32], vn = -1;
                    int vp = topo_binomial((r - root + n) % n, n, 0, vch, &vn);
                    ck_assert_int_eq(vn, nch[r]);
                    ck_assert_int_eq(parent[r], vp < 0 ? -1 : (vp + root) % n);
                    for (int j = 0; j < vn; j++)
                        ck_assert_int_eq(ch[r][j], (vch[j] + root) % n);
                }
            }
            for (int p = 0; p < n; p++) {
                for (int j = 0; j < nch[p]; j++) {
                    int c = ch[p][j];
                    ck_assert_int_ge(c, 0);
                    ck_assert_int_lt(c, n);
                    ck_assert_int_ne(c, root);
                    /* a listed child names p as its parent */
                    ck_assert_msg(parent[c] == p, "N=%d root %d: %d lists %d, whose parent is %d",
                                  n, root, p, c, parent[c]);
                    nparents[c]++;
                }
            }
            /* every non-root rank is in exactly one children list, so
             * "parent(c) == p" implies "c listed by p" as well */
            for (int r = 0; r < n; r++)
                ck_assert_int_eq(nparents[r], r == root ? 0 : 1);

            /* schedule: a rank sends to its children one per round, in the
             * listed order, starting the round after it received */
            for (int r = 0; r < n; r++)
                round[r] = -1;
            round[root] = 0;
            queue[tail++] = root;
            while (head < tail) {
                int p = queue[head++];
                for (int j = 0; j < nch[p]; j++) {
                    int c = ch[p][j];
                    ck_assert_int_eq(round[c], -1);
                    round[c] = round[p] + j + 1;
                    maxround = round[c] > maxround ? round[c] : maxround;
                    queue[tail++] = c;
                }
            }
            ck_assert_msg(tail == n, "N=%d root %d: %d of %d ranks reachable", n, root, tail, n);
            ck_assert_msg(maxround <= ceil_log2, "N=%d root %d: %d rounds > ceil(log2 N) = %d",
                          n, root, maxround, ceil_log2);
            if ((n & (n - 1)) == 0)
                ck_assert_int_eq(maxround, ceil_log2);
        }
    }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* recursive doubling, pow2 floor, log2 ceil                               */
/* ---------------------------------------------------------------------- */

START_TEST(test_rd_mapping)
{
    for (int n = 1; n <= 70; n++) {
        int p = 1, seen[128] = {0}, active = 0;

        while (p * 2 <= n)
            p *= 2;
        ck_assert_int_eq(topo_pow2_floor(n), p);
        for (int r = 0; r < n; r++) {
            int nr = topo_rd_newrank(r, n);
            int sits_out = r < 2 * (n - p) && r % 2 == 0;

            ck_assert_msg((nr == -1) == sits_out, "N=%d rank %d: newrank %d", n, r, nr);
            if (nr == -1)
                continue;
            ck_assert_int_ge(nr, 0);
            ck_assert_int_lt(nr, p);
            ck_assert_int_eq(seen[nr], 0);
            seen[nr] = 1;
            active++;
            ck_assert_int_eq(topo_rd_oldrank(nr, n), r);
        }
        ck_assert_int_eq(active, p);
        for (int nr = 0; nr < p; nr++) {
            int old = topo_rd_oldrank(nr, n);
            ck_assert_int_ge(old, 0);
            ck_assert_int_lt(old, n);
            ck_assert_int_eq(topo_rd_newrank(old, n), nr);
        }
    }
    /* N = 6: ranks 0 and 2 hand over to 1 and 3 */
    ck_assert_int_eq(topo_rd_newrank(0, 6), -1);
    ck_assert_int_eq(topo_rd_newrank(1, 6), 0);
    ck_assert_int_eq(topo_rd_newrank(2, 6), -1);
    ck_assert_int_eq(topo_rd_newrank(3, 6), 1);
    ck_assert_int_eq(topo_rd_newrank(4, 6), 2);
    ck_assert_int_eq(topo_rd_newrank(5, 6), 3);
}
END_TEST

START_TEST(test_pow2_log2_tables)
{
    static const struct { int n, floor2, ceil_log2; } table[] = {
        {1, 1, 0},     {2, 2, 1},     {3, 2, 2},     {4, 4, 2},       {5, 4, 3},
        {6, 4, 3},     {7, 4, 3},     {8, 8, 3},     {9, 8, 4},       {15, 8, 4},
        {16, 16, 4},   {17, 16, 5},   {31, 16, 5},   {32, 32, 5},     {33, 32, 6},
        {1000, 512, 10}, {1024, 1024, 10}, {1025, 1024, 11},
        {1 << 24, 1 << 24, 24}, {(1 << 24) + 1, 1 << 24, 25},
    };

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        ck_assert_msg(topo_pow2_floor(table[i].n) == table[i].floor2, "pow2_floor(%d) = %d",
                      table[i].n, topo_pow2_floor(table[i].n));
        ck_assert_msg(topo_log2_ceil(table[i].n) == table[i].ceil_log2, "log2_ceil(%d) = %d",
                      table[i].n, topo_log2_ceil(table[i].n));
    }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* alpha-beta model                                                        */
/* ---------------------------------------------------------------------- */

static const double ALPHA = 20e-6, BETA = 1e9, CHUNK = 256 * 1024;
static const flx_algo_t ALLREDUCE_ALGOS[] = {FLX_ALGO_RING, FLX_ALGO_TREE, FLX_ALGO_RD,
                                             FLX_ALGO_HD};
#define NALGOS_AR (sizeof(ALLREDUCE_ALGOS) / sizeof(ALLREDUCE_ALGOS[0]))

START_TEST(test_model_ring_formula)
{
    static const int ns[] = {2, 3, 4, 5, 8, 16, 33, 128};
    static const double sizes[] = {0, 1, 8, 1000, 1 << 20, 64.0 * (1 << 20)};

    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
            double n = ns[i], s = sizes[j];
            double want = 2 * (n - 1) * ALPHA + 2 * (n - 1) / n * s / BETA;
            ck_assert_time_eq(model_allreduce_time(FLX_ALGO_RING, ns[i], s, ALPHA, BETA, CHUNK),
                              want);
        }
    }
    /* by hand: N=4, S=1e6, alpha=10us, beta=1 GB/s: 6e-5 + 1.5e-3 */
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_RING, 4, 1e6, 1e-5, 1e9, CHUNK), 1.56e-3);
}
END_TEST

START_TEST(test_model_tree_rd_formula)
{
    /* tree: 2 depth (alpha + c/beta) + (k+1) S/beta with c = min(chunk, S),
     * k = min(2, N-1).  N=4: depth 2, k 2, c 262144:
     * 4 (1e-5 + 2.62144e-4) + 3e-3 = 4.088576e-3 */
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_TREE, 4, 1e6, 1e-5, 1e9, CHUNK), 4.088576e-3);
    /* N=2: depth 1, k 1, S < chunk so c = S: 2 (1e-5 + 1e-4) + 2e-4 */
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_TREE, 2, 1e5, 1e-5, 1e9, CHUNK), 4.2e-4);
    /* rd: (log2 p + 2[N != p]) (alpha + S/beta) + (log2 p + [N != p]) c/gamma,
     * gamma = 1e10 B/s: each step's last chunk's reduction, which no
     * transfer hides (c = 262144: 2.62144e-5 s) */
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_RD, 4, 1e6, 1e-5, 1e9, CHUNK), 2 * 1.01e-3 + 2 * 2.62144e-5);
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_RD, 5, 1e6, 1e-5, 1e9, CHUNK), 4 * 1.01e-3 + 3 * 2.62144e-5);
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_RD, 7, 1e6, 1e-5, 1e9, CHUNK), 4 * 1.01e-3 + 3 * 2.62144e-5);
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_RD, 8, 1e6, 1e-5, 1e9, CHUNK), 3 * 1.01e-3 + 3 * 2.62144e-5);
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_RD, 2, 1e6, 1e-5, 1e9, CHUNK), 1 * 1.01e-3 + 2.62144e-5);
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_RD, 3, 1e6, 1e-5, 1e9, CHUNK), 3 * 1.01e-3 + 2 * 2.62144e-5);
    /* below a chunk the whole message is the last chunk */
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_RD, 2, 1e5, 1e-5, 1e9, CHUNK), 1.1e-4 + 1e-5);
    for (int n = 2; n <= MAX_N; n++) {
        int depth = 0, p = 1, lg = 0;
        double s = 3e6, c = CHUNK;

        for (int last = n - 1; last > 0; last = (last - 1) / 2)
            depth++;
        while (p * 2 <= n) {
            p *= 2;
            lg++;
        }
        ck_assert_time_eq(model_allreduce_time(FLX_ALGO_TREE, n, s, ALPHA, BETA, CHUNK),
                          2.0 * depth * (ALPHA + c / BETA) + ((n - 1 < 2 ? n - 1 : 2) + 1) * s / BETA);
        ck_assert_time_eq(model_allreduce_time(FLX_ALGO_RD, n, s, ALPHA, BETA, CHUNK),
                          (lg + (p != n ? 2 : 0)) * (ALPHA + s / BETA) +
                              (lg + (p != n ? 1 : 0)) * c / 1e10);
        ck_assert_time_eq(model_allreduce_time(FLX_ALGO_HD, n, s, ALPHA, BETA, CHUNK),
                          (2 * lg + (p != n ? 2 : 0)) * ALPHA +
                              (2.0 * (p - 1) / p + (p != n ? 2 : 0)) * s / BETA +
                              (lg + (p != n ? 1 : 0)) * c / 1e10);
    }
    /* hd by hand: 2 log2 p alpha + 2(p-1)/p S/beta + log2 p min(c, S/2)/gamma,
     * the pairs' two steps of S where N != p.  N=4, S=1e6: 4e-5 + 1.5e-3 +
     * 2 * 2.62144e-5; N=5: 6e-5 + 3.5e-3 + 3 * 2.62144e-5; N=2, S=1e5 (c =
     * S/2): 2e-5 + 1e-4 + 5e-6 */
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_HD, 4, 1e6, 1e-5, 1e9, CHUNK),
                      4e-5 + 1.5e-3 + 2 * 2.62144e-5);
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_HD, 5, 1e6, 1e-5, 1e9, CHUNK),
                      6e-5 + 3.5e-3 + 3 * 2.62144e-5);
    ck_assert_time_eq(model_allreduce_time(FLX_ALGO_HD, 2, 1e5, 1e-5, 1e9, CHUNK),
                      2e-5 + 1e-4 + 5e-6);
}
END_TEST

START_TEST(test_model_n1_zero)
{
    static const double sizes[] = {0, 1, 1e6, 1e9};

    for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
        for (size_t a = 0; a < NALGOS_AR; a++)
            ck_assert(model_allreduce_time(ALLREDUCE_ALGOS[a], 1, sizes[j], ALPHA, BETA, CHUNK) == 0);
        ck_assert(model_allgather_time(FLX_ALGO_RING, 1, sizes[j], ALPHA, BETA) == 0);
        ck_assert(model_allgather_time(FLX_ALGO_RD, 1, sizes[j], ALPHA, BETA) == 0);
        ck_assert(model_bcast_time(0, 1, sizes[j], ALPHA, BETA, CHUNK) == 0);
        ck_assert(model_bcast_time(1, 1, sizes[j], ALPHA, BETA, CHUNK) == 0);
    }
}
END_TEST

/* each algorithm's own constants: the fit recovers them from two exact
 * timings, rejects what has no positive solution, and the pick uses them */
START_TEST(test_model_fit_per_algorithm)
{
    model_ab_t truth = {3.5e-5, 1.0 / 4e8}, got = {0, 0}, ar[MODEL_NAR];

    for (size_t a = 0; a < NALGOS_AR; a++) {
        for (int n = 2; n <= 9; n++) {
            double sm[4], lg[4];

            model_allreduce_terms(ALLREDUCE_ALGOS[a], n, 8, CHUNK, &sm[0], &sm[1], &sm[2]);
            model_allreduce_terms(ALLREDUCE_ALGOS[a], n, 262144, CHUNK, &lg[0], &lg[1], &lg[2]);
            sm[3] = model_allreduce_time_ab(ALLREDUCE_ALGOS[a], n, 8, truth, CHUNK);
            lg[3] = model_allreduce_time_ab(ALLREDUCE_ALGOS[a], n, 262144, truth, CHUNK);
            /* the terms are the formula: the same time as the alpha-beta call */
            ck_assert_time_eq(sm[3], model_allreduce_time(ALLREDUCE_ALGOS[a], n, 8, truth.alpha,
                                                          1.0 / truth.inv_bw, CHUNK));
            ck_assert_int_eq(model_fit_ab(sm, lg, &got), 0);
            ck_assert_double_eq_tol(got.alpha, truth.alpha, 1e-12);
            ck_assert_double_eq_tol(got.inv_bw, truth.inv_bw, 1e-16);
            /* a large run faster than the latency allows: no positive 1/beta */
            lg[3] = sm[3];
            got = (model_ab_t){-1, -1};
            ck_assert_int_eq(model_fit_ab(sm, lg, &got), -1);
            ck_assert(got.alpha == -1 && got.inv_bw == -1);
        }
    }
    /* the same constants everywhere: the pick is the old one */
    for (int i = 0; i < MODEL_NAR; i++)
        ar[i] = (model_ab_t){ALPHA, 1.0 / BETA};
    for (double s = 1; s <= 1e9; s *= 5.3)
        ck_assert_int_eq(model_pick_allreduce_ab(4, s, ar, CHUNK),
                         model_pick_allreduce(4, s, ALPHA, BETA, CHUNK));
    /* a tree ten times cheaper per message than the others wins the small sizes */
    ar[FLX_ALGO_TREE - FLX_ALGO_RING].alpha = ALPHA / 10;
    ck_assert_int_eq(model_pick_allreduce_ab(4, 8, ar, CHUNK), FLX_ALGO_TREE);
    ck_assert_int_eq(model_pick_allreduce_ab(4, 64.0 * (1 << 20), ar, CHUNK), FLX_ALGO_RING);
    /* but not with 2 ranks, where it takes two steps to rd's one */
    ck_assert_int_eq(model_pick_allreduce_ab(2, 8, ar, CHUNK), FLX_ALGO_RD);
    for (double s = 1; s <= 1e9; s *= 5.3)
        ck_assert_int_ne(model_pick_allreduce_ab(2, s, ar, CHUNK), FLX_ALGO_TREE);
    /* with 2 ranks rd's 1/beta is no less than the ring's: a fit that made
     * its own four times cheaper does not take it beyond the sizes where
     * the alpha it saves exceeds its one chunk's unhidden reduction */
    for (int i = 0; i < MODEL_NAR; i++)
        ar[i] = (model_ab_t){ALPHA, 1.0 / BETA};
    ar[FLX_ALGO_RD - FLX_ALGO_RING].inv_bw = 0.25 / BETA;
    ck_assert(model_allreduce_ab(FLX_ALGO_RD, 2, ar).inv_bw == 1.0 / BETA);
    ck_assert(model_allreduce_ab(FLX_ALGO_RD, 3, ar).inv_bw == 0.25 / BETA);
    ck_assert(model_allreduce_ab(FLX_ALGO_RING, 2, ar).inv_bw == 1.0 / BETA);
    ck_assert_int_eq(model_pick_allreduce_ab(2, 8, ar, CHUNK), FLX_ALGO_RD);
    for (double s = ALPHA * 1e10 * 2; s <= 1e9; s *= 1.7) /* c / 1e10 B/s > alpha */
        ck_assert_int_eq(model_pick_allreduce_ab(2, s, ar, CHUNK), FLX_ALGO_RING);
    /* on 3 ranks its own constants stand */
    ck_assert_int_eq(model_pick_allreduce_ab(3, 1e6, ar, CHUNK), FLX_ALGO_RD);
    /* on 4 and 8 ranks rd's 1/beta is no less than halving-doubling's (the
     * same pairs; rd moves the whole vector each step): the cheap fit does
     * not take it past the latency-bound sizes, where it still wins */
    for (int n = 4; n <= 8; n *= 2) {
        ck_assert(model_allreduce_ab(FLX_ALGO_RD, n, ar).inv_bw == 1.0 / BETA);
        ck_assert_int_eq(model_pick_allreduce_ab(n, 8, ar, CHUNK), FLX_ALGO_RD);
        for (double s = 1e6; s <= 1e9; s *= 1.7)
            ck_assert_int_ne(model_pick_allreduce_ab(n, s, ar, CHUNK), FLX_ALGO_RD);
    }
    ck_assert(model_allreduce_ab(FLX_ALGO_RD, 6, ar).inv_bw == 0.25 / BETA);
    /* a latency above the chunk's reduction time (60 us > 26 us) makes rd
     * the cheaper at every size by the ring's 1/beta; an rd seen moving
     * bytes twice as slowly as the ring is not picked at large sizes */
    for (int i = 0; i < MODEL_NAR; i++)
        ar[i] = (model_ab_t){60e-6, 1.0 / BETA};
    ck_assert_int_eq(model_pick_allreduce_ab(2, 64e6, ar, CHUNK), FLX_ALGO_RD);
    ar[FLX_ALGO_RD - FLX_ALGO_RING].inv_bw = 2.0 / BETA;
    ck_assert(model_allreduce_ab(FLX_ALGO_RD, 2, ar).inv_bw == 2.0 / BETA);
    for (double s = 1e6; s <= 1e9; s *= 1.7)
        ck_assert_int_eq(model_pick_allreduce_ab(2, s, ar, CHUNK), FLX_ALGO_RING);
}
END_TEST

/* The live model's spike filter and its use in model_learn: one stalled
 * run among steady ones moves nothing, a lasting change gets through. */
START_TEST(test_model_spike_filter)
{
    double h[2] = {-1, -1}, hist[2][2] = {{-1, -1}, {-1, -1}};
    double lo[2] = {1e-9, 1e-15}, hi[2] = {1.0, 1e-3}, alpha = 1e-5, inv_bw = 9.9e-10;

    /* none before: the value itself; one before: the smaller */
    ck_assert_double_eq(model_spike_filter(h, 5.0), 5.0);
    ck_assert_double_eq(model_spike_filter(h, 9.0), 5.0);
    ck_assert_double_eq(model_spike_filter(h, 1.0), 5.0); /* median of 5, 9, 1 */
    ck_assert_double_eq(model_spike_filter(h, 7.0), 7.0); /* of 9, 1, 7 */
    ck_assert_double_eq(model_spike_filter(h, 100.0), 7.0); /* of 1, 7, 100 */
    ck_assert(h[0] == 7.0 && h[1] == 100.0);
    ck_assert_double_eq(model_spike_filter(h, 0.0), 7.0); /* of 7, 100, 0 */
    /* steady runs at the model's own 1/beta, then one 20x stall: unchanged */
    for (int i = 0; i < 4; i++)
        model_learn(&alpha, &inv_bw, 1e-3, 1, 1e6, 2, 0.25, lo, hi, hist);
    ck_assert_double_eq_tol(inv_bw, (1e-3 - 1e-5) / 1e6, 1e-15);
    model_learn(&alpha, &inv_bw, 20e-3, 1, 1e6, 2, 0.25, lo, hi, hist);
    ck_assert_double_eq_tol(inv_bw, (1e-3 - 1e-5) / 1e6, 1e-15);
    /* without the filter the same stall moves 1/beta by a quarter of it */
    {
        double a2 = alpha, ib2 = inv_bw;
        model_learn(&a2, &ib2, 20e-3, 1, 1e6, 2, 0.25, lo, hi, NULL);
        ck_assert(ib2 > 5 * inv_bw);
    }
    /* the link really got 4x slower: the second slow run moves it */
    model_learn(&alpha, &inv_bw, 4e-3, 1, 1e6, 2, 0.25, lo, hi, hist);
    ck_assert(inv_bw > 1.5e-9);
    /* the latency term has its own history: untouched so far */
    ck_assert(hist[0][0] < 0 && hist[0][1] < 0 && alpha == 1e-5);
}
END_TEST

/* Exploration: the last MODEL_LOOK of every MODEL_EXPLORE automatic
 * choices run the runner-up (a look) when it is predicted within
 * MODEL_EXPLORE_NEAR of the best, of every MODEL_EXPLORE_FAR_EVERY when
 * within MODEL_EXPLORE_MARGIN, of every MODEL_EXPLORE_RARE_EVERY when
 * within MODEL_EXPLORE_RARE_MARGIN. */
/* rounds * every automatic choices at s on 4 ranks: the last MODEL_LOOK
 * of every `every` run rd, the others the ring */
static void assert_explores(const model_ab_t ar[MODEL_NAR], double s, unsigned long every,
                            unsigned long rounds)
{
    unsigned long explored = 0;

    for (unsigned long call = 0; call < rounds * every; call++) {
        flx_algo_t a = model_pick_allreduce_explore(4, s, ar, CHUNK, call, NULL);
        int want = call % every >= every - MODEL_LOOK;
        ck_assert_int_eq(a, want ? FLX_ALGO_RD : FLX_ALGO_RING);
        explored += (unsigned long)want;
    }
    ck_assert_uint_eq(explored, rounds * MODEL_LOOK);
}

START_TEST(test_model_explore)
{
    model_ab_t ar[MODEL_NAR];
    double s = 64.0 * (1 << 20);

    for (int i = 0; i < MODEL_NAR; i++)
        ar[i] = (model_ab_t){ALPHA, 1.0 / BETA};
    /* with the same constants hd is the runner-up on 4 ranks at 64 MiB */
    ck_assert_int_eq(model_pick_allreduce_explore(4, s, ar, CHUNK, MODEL_EXPLORE - 1, NULL),
                     FLX_ALGO_HD);
    /* hd out of the race by a second a step; its cheap 1/beta is rd's
     * floor on 4 ranks (model_allreduce_ab), below rd's own */
    ar[FLX_ALGO_HD - FLX_ALGO_RING] = (model_ab_t){1.0, 0.5 / BETA};
    /* 64 MiB on 4 ranks: the ring is best (1.5 S/beta), rd (2 S/beta) the
     * runner-up, within 2x but not 1.25x, the tree (3 S/beta) last */
    ck_assert_int_eq(model_pick_allreduce_ab(4, s, ar, CHUNK), FLX_ALGO_RING);
    ck_assert(model_allreduce_time_ab(FLX_ALGO_RD, 4, s, ar[2], CHUNK) <
              model_allreduce_time_ab(FLX_ALGO_TREE, 4, s, ar[1], CHUNK));
    assert_explores(ar, s, MODEL_EXPLORE_FAR_EVERY, 10);
    /* rd within 1.25x of the ring (1.2x): MODEL_LOOK runs of every MODEL_EXPLORE */
    ar[FLX_ALGO_RD - FLX_ALGO_RING].inv_bw = 0.9 / BETA;
    assert_explores(ar, s, MODEL_EXPLORE, 10);
    ar[FLX_ALGO_RD - FLX_ALGO_RING].inv_bw = 1.0 / BETA;
    /* only at sizes the runner-up has run at: rd up to 16 MiB, so not at
     * 64 MiB; up to 64 MiB, so there too */
    {
        double ran[MODEL_NAR] = {s, s, 16.0 * (1 << 20), s};
        for (unsigned long call = 0; call < 2 * MODEL_EXPLORE_FAR_EVERY; call++)
            ck_assert_int_eq(model_pick_allreduce_explore(4, s, ar, CHUNK, call, ran),
                             FLX_ALGO_RING);
        ran[2] = s;
        ck_assert_int_eq(model_pick_allreduce_explore(4, s, ar, CHUNK, MODEL_EXPLORE_FAR_EVERY - 1,
                                                      ran),
                         FLX_ALGO_RD);
        ck_assert_int_eq(model_pick_allreduce_explore(4, s / 2, ar, CHUNK,
                                                      MODEL_EXPLORE_FAR_EVERY - 1, ran),
                         FLX_ALGO_RD);
    }
    /* a runner-up predicted 2-4x slower (rd 5 S/beta, 3.3x; the tree
     * 9 S/beta) runs the last MODEL_LOOK of every MODEL_EXPLORE_RARE_EVERY */
    ar[FLX_ALGO_TREE - FLX_ALGO_RING].inv_bw = 3.0 / BETA;
    ar[FLX_ALGO_RD - FLX_ALGO_RING].inv_bw = 2.5 / BETA;
    assert_explores(ar, s, MODEL_EXPLORE_RARE_EVERY, 3);
    /* ... and one more than 4x slower (rd 7 S/beta, 4.7x) never */
    ar[FLX_ALGO_RD - FLX_ALGO_RING].inv_bw = 3.5 / BETA;
    for (unsigned long call = 0; call < 2 * MODEL_EXPLORE_RARE_EVERY; call++)
        ck_assert_int_eq(model_pick_allreduce_explore(4, s, ar, CHUNK, call, NULL), FLX_ALGO_RING);
    /* 2 ranks: the tree is never the runner-up either */
    for (int i = 0; i < MODEL_NAR; i++)
        ar[i] = (model_ab_t){ALPHA, 1.0 / BETA};
    ar[FLX_ALGO_TREE - FLX_ALGO_RING] = (model_ab_t){ALPHA / 100, 0.01 / BETA};
    for (unsigned long call = 0; call < 2 * MODEL_EXPLORE_FAR_EVERY; call++)
        ck_assert_int_ne(model_pick_allreduce_explore(2, 8, ar, CHUNK, call, NULL), FLX_ALGO_TREE);
    /* ... nor hd, at any size, however cheap its fit */
    ar[FLX_ALGO_HD - FLX_ALGO_RING] = (model_ab_t){ALPHA / 100, 0.01 / BETA};
    for (double b = 8; b <= 1e9; b *= 7.1)
        for (unsigned long call = 0; call < 2 * MODEL_EXPLORE_FAR_EVERY; call++)
            ck_assert_int_ne(model_pick_allreduce_explore(2, b, ar, CHUNK, call, NULL),
                             FLX_ALGO_HD);
    ar[FLX_ALGO_TREE - FLX_ALGO_RING] = (model_ab_t){ALPHA, 1.0 / BETA};
    ck_assert_int_eq(model_pick_allreduce_explore(4, 1e6, ar, CHUNK, 0, NULL), FLX_ALGO_HD);
}
END_TEST

START_TEST(test_model_pick_allreduce)
{
    /* 8 bytes on 8 ranks: latency dominates, ring's 14 alpha loses to rd's 3 */
    ck_assert_int_ne(model_pick_allreduce(8, 8, ALPHA, BETA, CHUNK), FLX_ALGO_RING);
    ck_assert_int_eq(model_pick_allreduce(8, 8, ALPHA, BETA, CHUNK), FLX_ALGO_RD);
    ck_assert_int_ne(model_pick_allreduce(8, 4, ALPHA, BETA, CHUNK), FLX_ALGO_RING);
    ck_assert_int_ne(model_pick_allreduce(16, 1024, ALPHA, BETA, CHUNK), FLX_ALGO_RING);
    /* 64 MiB: bandwidth dominates, ring and hd move 2(N-1)/N S; hd in
     * 2 log2 N steps where N is a power of two (its unhidden reductions,
     * 3 chunks on 8 ranks, 79 us, cost less than the ring's 8 more alpha,
     * 160 us), the ring where not (hd's pairs move 2 S more) */
    ck_assert_int_eq(model_pick_allreduce(8, 64.0 * (1 << 20), ALPHA, BETA, CHUNK), FLX_ALGO_HD);
    ck_assert_int_eq(model_pick_allreduce(5, 64.0 * (1 << 20), ALPHA, BETA, CHUNK), FLX_ALGO_RING);
    ck_assert_int_eq(model_pick_allreduce(32, 64.0 * (1 << 20), ALPHA, BETA, CHUNK), FLX_ALGO_HD);
    /* 4 ranks: the 2 alpha hd saves (40 us) are less than its 2 chunks (52 us) */
    ck_assert_int_eq(model_pick_allreduce(4, 64.0 * (1 << 20), ALPHA, BETA, CHUNK), FLX_ALGO_RING);
    /* the pick is always the argmin of the times */
    for (int n = 2; n <= MAX_N; n++) {
        for (double s = 1; s <= 1e9; s *= 3.7) {
            flx_algo_t pick = model_pick_allreduce(n, s, ALPHA, BETA, CHUNK);
            double tp = model_allreduce_time(pick, n, s, ALPHA, BETA, CHUNK);
            ck_assert(pick == FLX_ALGO_RING || pick == FLX_ALGO_TREE || pick == FLX_ALGO_RD ||
                      (pick == FLX_ALGO_HD && n > 2));
            for (size_t a = 0; a < NALGOS_AR; a++) {
                if (n == 2 && ALLREDUCE_ALGOS[a] == FLX_ALGO_HD)
                    continue; /* never picked on 2 ranks (the ring's pipeline) */
                ck_assert_msg(tp <= model_allreduce_time(ALLREDUCE_ALGOS[a], n, s, ALPHA, BETA, CHUNK),
                              "N=%d S=%g: picked %d but %d is faster", n, s, pick,
                              ALLREDUCE_ALGOS[a]);
            }
        }
    }
}
END_TEST

START_TEST(test_model_monotonic)
{
    for (int n = 2; n <= MAX_N; n++) {
        double prev_ar[NALGOS_AR] = {0}, prev_ag[2] = {0, 0}, prev_bc[2] = {0, 0};

        for (double s = 0; s <= 4e9; s = s < 1 ? 1 : s * 1.5) {
            for (size_t a = 0; a < NALGOS_AR; a++) {
                double t = model_allreduce_time(ALLREDUCE_ALGOS[a], n, s, ALPHA, BETA, CHUNK);
                ck_assert_msg(t >= prev_ar[a], "allreduce algo %d N=%d: time drops at S=%g",
                              ALLREDUCE_ALGOS[a], n, s);
                ck_assert(t > 0);
                prev_ar[a] = t;
            }
            for (int a = 0; a < 2; a++) {
                double t = model_allgather_time(a ? FLX_ALGO_RD : FLX_ALGO_RING, n, s, ALPHA, BETA);
                ck_assert(t >= prev_ag[a] && t > 0);
                prev_ag[a] = t;
            }
            for (int chain = 0; chain < 2; chain++) {
                double t = model_bcast_time(chain, n, s, ALPHA, BETA, CHUNK);
                ck_assert_msg(t >= prev_bc[chain], "bcast chain=%d N=%d: time drops at S=%g",
                              chain, n, s);
                prev_bc[chain] = t;
            }
        }
    }
}
END_TEST

START_TEST(test_model_allgather)
{
    for (int n = 2; n <= MAX_N; n++) {
        int lg = 0;
        double b = 12345;

        while ((1 << lg) < n)
            lg++;
        ck_assert_time_eq(model_allgather_time(FLX_ALGO_RING, n, b, ALPHA, BETA),
                          (n - 1) * (ALPHA + b / BETA));
        /* ceil(log2 N) alpha + (N-1) b/beta, and for Bruck (N not a power
         * of two) a positive local-copy term */
        ck_assert_time_eq(model_allgather_time(FLX_ALGO_RD, n, 0, ALPHA, BETA), lg * ALPHA);
        if (n & (n - 1))
            ck_assert(model_allgather_time(FLX_ALGO_RD, n, b, ALPHA, BETA) >
                      lg * ALPHA + (n - 1) * b / BETA);
        else
            ck_assert_time_eq(model_allgather_time(FLX_ALGO_RD, n, b, ALPHA, BETA),
                              lg * ALPHA + (n - 1) * b / BETA);
        /* pick is the faster of the two */
        for (double s = 1; s <= 1e9; s *= 4.1) {
            flx_algo_t pick = model_pick_allgather(n, s, ALPHA, BETA);
            double tr = model_allgather_time(FLX_ALGO_RING, n, s, ALPHA, BETA);
            double tb = model_allgather_time(FLX_ALGO_RD, n, s, ALPHA, BETA);
            ck_assert_int_eq(pick, tb < tr ? FLX_ALGO_RD : FLX_ALGO_RING);
        }
    }
    ck_assert_int_eq(model_pick_allgather(7, 8, ALPHA, BETA), FLX_ALGO_RD);
    ck_assert_int_eq(model_pick_allgather(7, 64.0 * (1 << 20), ALPHA, BETA), FLX_ALGO_RING);
    ck_assert_int_eq(model_pick_allgather(8, 64.0 * (1 << 20), ALPHA, BETA), FLX_ALGO_RD);
}
END_TEST

/* The allgather's own fits: the terms are the formula, the fit recovers
 * each algorithm's constants, and constants of their own move the choice.
 * The case measured with 4 ranks on 2 cores: the ping-pong alpha (11.4 us)
 * took the ring at 16 KiB per rank, where a ring step cost about 60 us and
 * Bruck, with one step less, was the faster. */
START_TEST(test_model_allgather_fit)
{
    const flx_algo_t algos[MODEL_NAG] = {FLX_ALGO_RING, FLX_ALGO_RD};
    model_ab_t truth = {4.5e-5, 1.0 / 6e8}, got, ag[MODEL_NAG], link = {11.4e-6, 1.0 / 1.5e9};
    int explored = 0;

    for (int g = 0; g < MODEL_NAG; g++) {
        ck_assert_int_eq(model_ag_index(algos[g]), g);
        for (int n = 2; n <= 9; n++) {
            double sm[4], lg[4], large = 1048576.0 / n;

            model_allgather_terms(algos[g], n, 8, &sm[0], &sm[1], &sm[2]);
            model_allgather_terms(algos[g], n, large, &lg[0], &lg[1], &lg[2]);
            sm[3] = model_allgather_time_ab(algos[g], n, 8, truth);
            lg[3] = model_allgather_time_ab(algos[g], n, large, truth);
            ck_assert_time_eq(lg[3], model_allgather_time(algos[g], n, large, truth.alpha,
                                                          1.0 / truth.inv_bw));
            ck_assert_int_eq(model_fit_ab(sm, lg, &got), 0);
            ck_assert_double_eq_tol(got.alpha, truth.alpha, 1e-12);
            ck_assert_double_eq_tol(got.inv_bw, truth.inv_bw, 1e-16);
        }
        ck_assert(model_allgather_time_ab(algos[g], 1, 1e6, truth) == 0);
    }
    /* the link's constants for both: the old pick */
    ag[0] = ag[1] = link;
    for (double s = 1; s <= 1e9; s *= 4.1)
        ck_assert_int_eq(model_pick_allgather_explore(5, s, ag, 0, NULL),
                         model_pick_allgather(5, s, link.alpha, 1.0 / link.inv_bw));
    ck_assert_int_eq(model_pick_allgather_explore(5, 16384, ag, 0, NULL), FLX_ALGO_RING);
    /* a power of two: recursive doubling in place, the ring's bytes in
     * fewer steps and no copies, so with the same constants at any size */
    for (int n = 4; n <= 16; n *= 2)
        for (double s = 1; s <= 1e9; s *= 4.1)
            ck_assert_int_eq(model_pick_allgather_explore(n, s, ag, 0, NULL), FLX_ALGO_RD);
    /* each its own: a ring step of 60 us, a Bruck step of 45 us */
    ag[0].alpha = 60e-6;
    ag[1].alpha = 45e-6;
    ck_assert_int_eq(model_pick_allgather_explore(5, 16384, ag, 0, NULL), FLX_ALGO_RD);
    ck_assert_int_eq(model_pick_allgather_explore(5, 16.0 * (1 << 20), ag, 0, NULL), FLX_ALGO_RING);
    /* recursive doubling learnt slower per byte (its 1/beta 1.5x the
     * ring's) on 4 ranks: still the pick at 16 KiB, the ring's at 16 MiB */
    ag[1].inv_bw = 1.5 * ag[0].inv_bw;
    ck_assert_int_eq(model_pick_allgather_explore(4, 16384, ag, 0, NULL), FLX_ALGO_RD);
    ck_assert_int_eq(model_pick_allgather_explore(4, 16.0 * (1 << 20), ag, 0, NULL), FLX_ALGO_RING);
    ag[1].inv_bw = ag[0].inv_bw;
    /* a fit that puts Bruck's 1/beta below the ring's: taken at the ring's,
     * so Bruck wins by its fewer steps only (small sizes) */
    {
        model_ab_t odd[MODEL_NAG] = {link, {link.alpha, link.inv_bw / 100}};
        ck_assert(model_allgather_ab(FLX_ALGO_RD, odd).inv_bw == link.inv_bw);
        ck_assert(model_allgather_ab(FLX_ALGO_RD, odd).alpha == link.alpha);
        ck_assert(model_allgather_ab(FLX_ALGO_RING, odd).inv_bw == link.inv_bw);
        for (int n = 4; n <= 9; n++) {
            ck_assert_int_eq(model_pick_allgather_explore(n, 8, odd, 0, NULL), FLX_ALGO_RD);
            if (n & (n - 1)) /* Bruck, with its copies */
                ck_assert_int_eq(model_pick_allgather_explore(n, 4.0 * (1 << 20), odd, 0, NULL),
                                 FLX_ALGO_RING);
        }
        odd[1].inv_bw = 2 * link.inv_bw; /* a dearer fit is kept */
        ck_assert(model_allgather_ab(FLX_ALGO_RD, odd).inv_bw == 2 * link.inv_bw);
    }
    /* with 2 or 3 ranks Bruck takes as many steps as the ring: never
     * picked or explored, however cheap its fit */
    for (int n = 2; n <= 4; n++) {
        model_ab_t cheap[MODEL_NAG] = {link, {link.alpha / 100, link.inv_bw / 100}};
        for (unsigned long call = 0; call < 2 * MODEL_EXPLORE && n <= 3; call++)
            for (double s = 1; s <= 1e9; s *= 9.7)
                ck_assert_int_eq(model_pick_allgather_explore(n, s, cheap, call, NULL), FLX_ALGO_RING);
        if (n == 4) /* one step less than the ring: the cheap fit wins */
            ck_assert_int_eq(model_pick_allgather_explore(n, 8, cheap, 0, NULL), FLX_ALGO_RD);
    }
    /* exploring: at 128 KiB per rank the two are within 2x of each other */
    for (unsigned long call = 0; call < 4 * MODEL_EXPLORE; call++) {
        flx_algo_t a = model_pick_allgather_explore(4, 131072, ag, call, NULL);
        flx_algo_t best = model_pick_allgather_explore(4, 131072, ag, 0, NULL);
        if (call % MODEL_EXPLORE == MODEL_EXPLORE - 1) {
            ck_assert_int_ne(a, best);
            explored++;
        } else {
            ck_assert_int_eq(a, best);
        }
    }
    ck_assert_int_eq(explored, 4);
    /* nor one that has not run at that size: Bruck at 128 KiB per rank
     * after runs up to 64 KiB, then after one at 128 KiB */
    {
        flx_algo_t best = model_pick_allgather_explore(4, 131072, ag, 0, NULL);
        double ran[MODEL_NAG] = {1e9, 1e9};

        ran[model_ag_index(best == FLX_ALGO_RING ? FLX_ALGO_RD : FLX_ALGO_RING)] = 65536;
        ck_assert_int_eq(model_pick_allgather_explore(4, 131072, ag, MODEL_EXPLORE - 1, ran), best);
        ck_assert_int_eq(model_pick_allgather_explore(4, 65536, ag, 0, NULL), best);
        ck_assert_int_ne(model_pick_allgather_explore(4, 65536, ag, MODEL_EXPLORE - 1, ran), best);
        ran[0] = ran[1] = 131072;
        ck_assert_int_ne(model_pick_allgather_explore(4, 131072, ag, MODEL_EXPLORE - 1, ran), best);
    }
    /* but not a runner-up predicted more than 2x slower: 8 B on 4 ranks
     * with a ring step 10x Bruck's */
    ag[0].alpha = 10 * ag[1].alpha;
    for (unsigned long call = 0; call < 2 * MODEL_EXPLORE; call++)
        ck_assert_int_eq(model_pick_allgather_explore(4, 8, ag, call, NULL), FLX_ALGO_RD);
}
END_TEST

START_TEST(test_model_bcast)
{
    const double big = 64.0 * (1 << 20);

    for (int n = 2; n <= MAX_N; n++) {
        int lg = 0;

        while ((1 << lg) < n)
            lg++;
        /* binomial: ceil(log2 N) (alpha + S/beta) */
        ck_assert_time_eq(model_bcast_time(0, n, 1e6, ALPHA, BETA, CHUNK),
                          lg * (ALPHA + 1e6 / BETA));
        /* chain: (N-2 + S/c) (alpha + c/beta), c = min(chunk, S) */
        ck_assert_time_eq(model_bcast_time(1, n, big, ALPHA, BETA, CHUNK),
                          (n - 2 + big / CHUNK) * (ALPHA + CHUNK / BETA));
        ck_assert_time_eq(model_bcast_time(1, n, 1000, ALPHA, BETA, CHUNK),
                          (n - 2 + 1) * (ALPHA + 1000 / BETA));
        ck_assert_int_eq(model_pick_bcast_chain(n, big, ALPHA, BETA, CHUNK),
                         model_bcast_time(1, n, big, ALPHA, BETA, CHUNK) <
                             model_bcast_time(0, n, big, ALPHA, BETA, CHUNK));
    }
    /* small messages: binomial; 64 MiB over 8 ranks: pipelined chain */
    ck_assert_int_eq(model_pick_bcast_chain(8, 8, ALPHA, BETA, CHUNK), 0);
    ck_assert_int_eq(model_pick_bcast_chain(8, 1024, ALPHA, BETA, CHUNK), 0);
    ck_assert_int_eq(model_pick_bcast_chain(8, big, ALPHA, BETA, CHUNK), 1);
    ck_assert_int_eq(model_pick_bcast_chain(32, big, ALPHA, BETA, CHUNK), 1);
    /* two ranks: a chain is one hop split in chunks, never faster */
    ck_assert_int_eq(model_pick_bcast_chain(2, big, ALPHA, BETA, CHUNK), 0);
    ck_assert_int_eq(model_pick_bcast_chain(1, big, ALPHA, BETA, CHUNK), 0);
}
END_TEST


/* ---- the tcp backend's lane (transport/tcp/lane.h) ---------------------------- */

START_TEST(test_lane_bucket)
{
    static const struct { uint64_t len; int bucket; } cases[] = {
        {(uint64_t)64 << 10, 0},  {((uint64_t)128 << 10) - 1, 0}, {(uint64_t)128 << 10, 1},
        {(uint64_t)1 << 20, 4},   {((uint64_t)32 << 20) + 5, 9},   {(uint64_t)1 << 39, 23},
        {0, 0},                   {(uint64_t)64 << 10 >> 1, 0}, /* never asked: short */
        {(uint64_t)1 << 45, 23},  {UINT64_MAX, 23}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ck_assert_msg(tcp_lane_bucket(cases[i].len) == cases[i].bucket,
                      "bucket of %llu: %d, expected %d", (unsigned long long)cases[i].len,
                      tcp_lane_bucket(cases[i].len), cases[i].bucket);
}
END_TEST

/* Estimates: the first period of a class is dropped, then the first of a
 * lane is taken whole, the taken lane's later ones are averaged (half
 * weight), a tried lane's replace what it had, empty periods count not. */
START_TEST(test_lane_note)
{
    static tcp_lane_t l;
    const int b = 9;

    memset(&l, 0, sizeof(l));
    tcp_lane_note(&l, b, TCP_LANE_SPLIT, 0.010, 10000000); /* warm-up: dropped */
    ck_assert(l.cost[b][TCP_LANE_SPLIT] == 0 && l.used[TCP_LANE_SPLIT] == 0);
    tcp_lane_note(&l, b, TCP_LANE_SPLIT, 0.010, 10000000);
    ck_assert_double_eq_tol(l.cost[b][TCP_LANE_SPLIT], 1e-9, 1e-15);
    tcp_lane_note(&l, b, TCP_LANE_SPLIT, 0.020, 10000000); /* shared unmeasured: replaced */
    ck_assert_double_eq_tol(l.cost[b][TCP_LANE_SPLIT], 2e-9, 1e-15);
    tcp_lane_note(&l, b, TCP_LANE_SHARED, 0.030, 10000000);
    ck_assert_double_eq_tol(l.cost[b][TCP_LANE_SHARED], 3e-9, 1e-15);
    tcp_lane_note(&l, b, TCP_LANE_SPLIT, 0.010, 10000000); /* split is taken: averaged */
    ck_assert_double_eq_tol(l.cost[b][TCP_LANE_SPLIT], 1.5e-9, 1e-15);
    tcp_lane_note(&l, b, TCP_LANE_SHARED, 0.012, 10000000); /* tried: replaced */
    ck_assert_double_eq_tol(l.cost[b][TCP_LANE_SHARED], 1.2e-9, 1e-15);
    /* 1.2 < 0.9 * 1.5: shared is taken now, its next one averaged */
    ck_assert_int_eq(tcp_lane_pick(&l, b), TCP_LANE_SHARED);
    tcp_lane_note(&l, b, TCP_LANE_SHARED, 0.010, 10000000);
    ck_assert_double_eq_tol(l.cost[b][TCP_LANE_SHARED], 1.1e-9, 1e-15);
    tcp_lane_note(&l, b, TCP_LANE_SHARED, 0.0, 10000000);
    tcp_lane_note(&l, b, TCP_LANE_SHARED, -1.0, 10000000);
    tcp_lane_note(&l, b, TCP_LANE_SHARED, 0.010, 0);
    ck_assert_double_eq_tol(l.cost[b][TCP_LANE_SHARED], 1.1e-9, 1e-15);
    ck_assert_int_eq(l.used[TCP_LANE_SPLIT], 3);
    ck_assert_int_eq(l.used[TCP_LANE_SHARED], 3);
    /* another class is cold */
    ck_assert(l.cost[b + 1][TCP_LANE_SPLIT] == 0 && l.cost[b + 1][TCP_LANE_SHARED] == 0);
}
END_TEST

/* The pick for set costs and every point of the exploration clock. */
START_TEST(test_lane_pick)
{
    static tcp_lane_t l;
    const int b = 4;
    unsigned long tried;

    memset(&l, 0, sizeof(l));
    ck_assert_int_eq(tcp_lane_pick(&l, b), TCP_LANE_SPLIT); /* nothing measured */
    l.cost[b][TCP_LANE_SPLIT] = 1e-9;
    ck_assert_int_eq(tcp_lane_pick(&l, b), TCP_LANE_SHARED); /* shared unmeasured */
    /* split cheaper, by a little (under TCP_LANE_CLEAR): shared every 16th */
    l.cost[b][TCP_LANE_SHARED] = 1.2e-9;
    tried = 0;
    for (l.count[b] = 0; l.count[b] < 160; l.count[b]++) {
        int lane = tcp_lane_pick(&l, b);
        tried += lane == TCP_LANE_SHARED;
        ck_assert_int_eq(lane, l.count[b] % 16 == 15 ? TCP_LANE_SHARED : TCP_LANE_SPLIT);
    }
    ck_assert_int_eq(tried, 10);
    /* shared's cost against split's 1: the lane taken, and the other tried
     * every 16th period, or every 32nd when the gap is over TCP_LANE_CLEAR */
    static const struct { double shared; int best; unsigned long every; } clock[] = {
        {0.95, TCP_LANE_SPLIT, 16},  /* cheaper, but not by TCP_LANE_FAVOR */
        {0.8, TCP_LANE_SHARED, 16},  /* clearly cheaper: 1/0.8 = 1.25 */
        {0.5, TCP_LANE_SHARED, 32},  /* a gap over TCP_LANE_CLEAR */
        {2.0, TCP_LANE_SPLIT, 32}};
    for (size_t k = 0; k < sizeof(clock) / sizeof(clock[0]); k++) {
        l.cost[b][TCP_LANE_SHARED] = clock[k].shared * 1e-9;
        for (l.count[b] = 0; l.count[b] < 64; l.count[b]++)
            ck_assert_int_eq(tcp_lane_pick(&l, b), l.count[b] % clock[k].every ==
                                                           clock[k].every - 1
                                                       ? !clock[k].best
                                                       : clock[k].best);
    }
    /* another class's clock is its own */
    l.count[b] = 15;
    l.count[b + 1] = 0;
    l.cost[b + 1][TCP_LANE_SPLIT] = 1e-9;
    l.cost[b + 1][TCP_LANE_SHARED] = 1.2e-9;
    ck_assert_int_eq(tcp_lane_pick(&l, b + 1), TCP_LANE_SPLIT);
    l.count[b + 1] = 15;
    ck_assert_int_eq(tcp_lane_pick(&l, b + 1), TCP_LANE_SHARED);
}
END_TEST

/* The placement changes under a running job (as measured: with the cores
 * near split costs 1.0 and shared 1.17, far apart 1.7 and 1.2): the pick
 * follows within a few periods each way, and the wrong lane is tried at
 * most every 16th period in between.  Periods run as tcp.c runs them:
 * pick, count, note. */
START_TEST(test_lane_follows_placement)
{
    static tcp_lane_t l;
    static const double cost[3][2] = {{1.0, 1.17}, {1.7, 1.2}, {1.0, 1.17}};
    const uint64_t bytes = (uint64_t)32 << 20;
    const int b = tcp_lane_bucket(bytes);

    memset(&l, 0, sizeof(l));
    for (int phase = 0; phase < 3; phase++) {
        int best = phase == 1 ? TCP_LANE_SHARED : TCP_LANE_SPLIT, settled = -1;
        unsigned long wrong = 0;
        for (int i = 0; i < 400; i++) {
            int lane = tcp_lane_pick(&l, b);
            l.count[b]++;
            tcp_lane_note(&l, b, lane, cost[phase][lane] * 1e-9 * (double)bytes, bytes);
            if (settled < 0 && lane == best && i > 0 && tcp_lane_pick(&l, b) == best)
                settled = i;
            if (settled >= 0)
                wrong += lane != best;
        }
        ck_assert_msg(settled >= 0 && settled <= (phase == 0 ? 4 : 40),
                      "phase %d: settled on the right lane after %d periods", phase, settled);
        ck_assert_msg(wrong <= 400 / 16 + 1, "phase %d: %lu periods on the wrong lane after "
                      "settling", phase, wrong);
    }
}
END_TEST

/* Two size classes in turn (a large allgather and a 1 MiB broadcast each
 * step, say) whose costs favour opposite lanes: each settles on its own,
 * and each still tries the other (its own exploration clock: one shared
 * clock would fall on the same class every time). */
START_TEST(test_lane_classes_interleaved)
{
    static tcp_lane_t l;
    const int a = tcp_lane_bucket((uint64_t)512 << 10), b = tcp_lane_bucket((uint64_t)1 << 20);
    static const double cost[2][2] = {{1.0, 1.4}, {1.5, 1.0}}; /* a: split, b: shared */
    unsigned long other[2] = {0, 0};

    ck_assert_int_ne(a, b);
    memset(&l, 0, sizeof(l));
    for (int i = 0; i < 640; i++) {
        int k = i % 2, bucket = k ? b : a, lane = tcp_lane_pick(&l, bucket);
        int best = k ? TCP_LANE_SHARED : TCP_LANE_SPLIT;
        l.count[bucket]++;
        tcp_lane_note(&l, bucket, lane, cost[k][lane] * 1e-3, 1000000);
        if (i >= 16) /* each class has had its warm-up and both lanes */
            other[k] += lane != best;
    }
    for (int k = 0; k < 2; k++) /* 312 periods each: the other lane every 32nd (a clear gap) */
        ck_assert_msg(other[k] == 312 / 32 + 1, "class %d: %lu of 312 periods on the other "
                      "lane, expected 10", k, other[k]);
}
END_TEST

/* A long message's writes: whole segments, at most FLX_TCP_WRITE_MAX
 * bytes, at least one segment; the limit itself where the segment size is
 * unknown; no limit for 0.  After a short write the next one ends where
 * the piece would have. */
START_TEST(test_write_cap)
{
    static const struct {
        size_t max;
        long mss;
        size_t cap;
    } cases[] = {
        {131072, 65483, 130966},  /* loopback: two segments, not 128 KiB */
        {131072, 32768, 131072},  /* a connection's first segments, half size */
        {131072, 1448, 130320},   /* Ethernet: 90 segments */
        {131072, 8948, 125272},   /* jumbo frames: 14 */
        {65483, 65483, 65483},    /* exactly one */
        {4096, 65483, 65483},     /* less than one: one */
        {1, 1448, 1448},
        {131072, 0, 131072},      /* unknown */
        {131072, -1, 131072},
        {0, 65483, SIZE_MAX},     /* no limit */
        {0, 0, SIZE_MAX},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t cap = tcp_write_cap(cases[i].max, cases[i].mss);
        ck_assert_msg(cap == cases[i].cap, "max %zu, mss %ld: %zu, expected %zu", cases[i].max,
                      cases[i].mss, cap, cases[i].cap);
        if (cases[i].mss > 0 && cases[i].max > 0)
            ck_assert_uint_eq(cap % (size_t)cases[i].mss, 0);
    }
    /* the next write: up to the next multiple of the cap from the start */
    ck_assert_uint_eq(tcp_write_room(0, 40000), 40000);
    ck_assert_uint_eq(tcp_write_room(10, 40000), 39990); /* inside the header */
    ck_assert_uint_eq(tcp_write_room(30000, 40000), 10000); /* after a short write */
    ck_assert_uint_eq(tcp_write_room(40000, 40000), 40000);
    ck_assert_uint_eq(tcp_write_room(70001, 40000), 9999);
    ck_assert_uint_eq(tcp_write_room(5, 1), 1);
    ck_assert_uint_eq(tcp_write_room(12345, SIZE_MAX), SIZE_MAX);
}
END_TEST

/* The mismatch line's words for a tag: each kind names what its op field
 * holds; what no table knows stays a number. */
START_TEST(test_tag_describe)
{
    static const struct {
        tl_tag_t tag;
        const char *want;
    } cases[] = {
        {{.kind = TL_KIND_BCAST << 3 | FLX_ALGO_TREE, .dtype = FLX_FLOAT32, .op = 2, .count = 1000},
         "broadcast (tree) of 1000 float, root 2"},
        {{.kind = TL_KIND_ALLREDUCE << 3 | FLX_ALGO_RING, .dtype = FLX_INT64, .op = FLX_MAX,
          .count = 7}, "allreduce (ring) of 7 int64, max"},
        {{.kind = TL_KIND_ALLGATHER << 3 | FLX_ALGO_RD, .dtype = FLX_BFLOAT16, .count = 0},
         "allgather (rd) of 0 bfloat16"},
        {{.kind = TL_KIND_ALLGATHERV << 3 | FLX_ALGO_RING, .dtype = FLX_FLOAT64, .op = 1,
          .count = 9}, "allgatherv (ring) of 9 double, the blocks"},
        {{.kind = TL_KIND_ARTOPK << 3 | FLX_ALGO_RING, .dtype = FLX_FLOAT32, .op = 3,
          .count = 65}, "AR-Topk exchange (ring) of 65 float, leader 3"},
        {{.kind = TL_KIND_REDUCE_SCATTER << 3 | FLX_ALGO_RING, .dtype = 99, .op = 77, .count = 4},
         "reduce-scatter (ring) of 4 elements of an unknown type, op 77"},
        {{.kind = 17 << 3 | 6, .dtype = FLX_INT32, .op = 5, .count = 1},
         "kind 17 (invalid) of 1 int32, op 5"},
    };
    char buf[128];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tl_tag_describe(&cases[i].tag, buf, sizeof(buf));
        ck_assert_str_eq(buf, cases[i].want);
    }
    tl_tag_describe(&cases[0].tag, buf, 12); /* cut, still a string */
    ck_assert_str_eq(buf, "broadcast (");
}
END_TEST

static Suite *topo_suite(void)
{
    Suite *s = suite_create("topo");
    TCase *tc = tcase_create("topology");
    TCase *tm = tcase_create("model");
    TCase *tl = tcase_create("tcp lane");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_mod_table);
    tcase_add_test(tc, test_mod_range);
    tcase_add_test(tc, test_ring_next_prev);
    tcase_add_test(tc, test_segment_hand);
    tcase_add_test(tc, test_segment_cover);
    tcase_add_test(tc, test_segment_large);
    tcase_add_test(tc, test_tree_picture);
    tcase_add_test(tc, test_tree_structure);
    tcase_add_test(tc, test_tree_depth_table);
    tcase_add_test(tc, test_binomial_picture);
    tcase_add_test(tc, test_binomial_structure);
    tcase_add_test(tc, test_rd_mapping);
    tcase_add_test(tc, test_pow2_log2_tables);
    tcase_add_test(tc, test_tag_describe);
    suite_add_tcase(s, tc);

    tcase_set_timeout(tm, 30);
    tcase_add_test(tm, test_model_ring_formula);
    tcase_add_test(tm, test_model_tree_rd_formula);
    tcase_add_test(tm, test_model_n1_zero);
    tcase_add_test(tm, test_model_pick_allreduce);
    tcase_add_test(tm, test_model_fit_per_algorithm);
    tcase_add_test(tm, test_model_spike_filter);
    tcase_add_test(tm, test_model_explore);
    tcase_add_test(tm, test_model_monotonic);
    tcase_add_test(tm, test_model_allgather);
    tcase_add_test(tm, test_model_allgather_fit);
    tcase_add_test(tm, test_model_bcast);
    suite_add_tcase(s, tm);

    tcase_set_timeout(tl, 30);
    tcase_add_test(tl, test_lane_bucket);
    tcase_add_test(tl, test_lane_note);
    tcase_add_test(tl, test_lane_pick);
    tcase_add_test(tl, test_lane_follows_placement);
    tcase_add_test(tl, test_lane_classes_interleaved);
    tcase_add_test(tl, test_write_cap);
    suite_add_tcase(s, tl);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(topo_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
