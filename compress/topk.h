/* topk.h -- top-k selection by magnitude on float32, without sorting, and
 * the random-k baseline.
 *
 * Order: element i ranks before element j when |x_i| > |x_j|, or when
 * |x_i| == |x_j| and i < j (among equal magnitudes the lower index wins).
 * The top-k is the first k elements of that order; every function here
 * returns it as k int32 indices in ascending order plus the values x[idx]
 * (signed).  Magnitudes compare by the bit pattern of |x| (as uint32),
 * which orders like |x| for every float, -0 == +0, Inf above every finite
 * value and NaN above Inf.
 *
 * Exact (CMP_SELECT_EXACT): radix selection on the magnitude bits.  One
 * histogram pass over the top 12 bits finds the bin that holds the k-th
 * largest; that bin's keys are collected and a quickselect (median-of-3,
 * random pivots past 2 log2 m rounds, three-way partition so ties cost
 * nothing) finds the exact threshold T and how many elements equal to T
 * are still needed; a last pass in index order takes every key > T and
 * the first such "ties" keys == T.  Three passes, O(n) whatever the data
 * (a bin too full to collect is refined by further histogram passes).
 *
 * Approximate (CMP_SELECT_APPROX): a threshold t on the magnitude bits such
 * that the count of keys >= t lands in the window [k, k + max(k/2, 4096)],
 * found by counting passes that start from the previous call's threshold
 * (scaled by the data's rms when the caller gives it, cmp_topk_hint_scale;
 * or from the order statistics of a random sample when there is none or it
 * missed) and move by the sample's quantiles or by bisection of the bracket.
 * A pass stores the candidate indices as it counts, so a hit costs one pass
 * over x; the candidates are then trimmed exactly to k (so a hit returns
 * the exact top-k).  A count a little short of k (at least k - k/64) is
 * accepted too and filled with the lowest unselected indices: that is the
 * only approximation.  After 8 misses, or when no sampled key lies inside
 * the bracket (massive ties: no threshold can land in the window), it falls
 * back to the exact path; after such a ties fallback the next 7 calls go
 * straight to the exact path.  Vectors under 64 Ki elements always take
 * the exact path.
 */
#ifndef FLX_COMPRESS_TOPK_H
#define FLX_COMPRESS_TOPK_H

#include "flexcoll.h"
#include "compress/rng.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    CMP_SELECT_EXACT = 0,
    CMP_SELECT_APPROX = 1,
} cmp_select_t;

/* What one selection did (for tools and tests). */
typedef struct {
    int passes;         /* full passes over x                              */
    int exact_path;     /* 1 when the radix path ran (chosen or fallback)  */
    size_t filled;      /* approximate: indices filled below the threshold */
    uint32_t threshold; /* final threshold on the magnitude bits           */
} cmp_topk_info_t;

typedef struct cmp_topk cmp_topk_t;

/* The magnitude key of x: its bits without the sign. */
static inline uint32_t cmp_topk_key(float x)
{
    uint32_t u;

    memcpy(&u, &x, sizeof(u));
    return u & 0x7fffffffu;
}

/* A selector for vectors of up to n_max elements (n_max < 2^31) and k up to
 * k_max.  nthreads >= 1 threads split the histogram and counting passes of
 * vectors of at least CMP_TOPK_PARALLEL_MIN elements.  seed drives the
 * sampling.  All memory is allocated here; a selection allocates nothing.
 * On success *sel_p is owned by the caller (cmp_topk_destroy). */
#define CMP_TOPK_PARALLEL_MIN ((size_t)4 << 20)
flx_status_t cmp_topk_create(size_t n_max, size_t k_max, int nthreads, uint64_t seed,
                             cmp_topk_t **sel_p);
void cmp_topk_destroy(cmp_topk_t *sel);
/* Make room for k up to k_max (no-op when it already fits). */
flx_status_t cmp_topk_reserve(cmp_topk_t *sel, size_t k_max);
/* The root-mean-square of the vector the next selection will see (0:
 * unknown).  The approximate path then starts from the previous threshold
 * scaled by rms / (the previous call's rms): with error feedback the
 * accumulated gradient's scale drifts every step and its shape much less.
 * Used by the next cmp_topk_select only. */
void cmp_topk_hint_scale(cmp_topk_t *sel, double rms);
/* Forget the previous threshold (the next approximate call samples). */
void cmp_topk_reset(cmp_topk_t *sel);
int cmp_topk_threads(const cmp_topk_t *sel);

/* The top-k of x[0, n): idx_out[0, k) ascending, val_out[j] = x[idx_out[j]]
 * (val_out may be NULL).  Requires 1 <= k <= n <= n_max, k <= k_max.  x is
 * only read.  info_p may be NULL. */
void cmp_topk_select(cmp_topk_t *sel, const float *x, size_t n, size_t k, cmp_select_t mode,
                     int32_t *idx_out, float *val_out, cmp_topk_info_t *info_p);

/* Random-k: k distinct indices of [0, n) drawn uniformly (Floyd's
 * algorithm over a bitmap), ascending, from the stream (seed, step) -- the
 * same on every rank.  bitmap holds cmp_randk_words(n) words, all zero on
 * entry, and is all zero again on return.  1 <= k <= n < 2^31. */
static inline size_t cmp_randk_words(size_t n) { return n / 64 + 1; }
void cmp_randk_select(uint64_t *bitmap, size_t n, size_t k, uint64_t seed, uint64_t step,
                      int32_t *idx_out);

/* The r-th largest (1 <= r <= m) of a[0, m), rearranging a; *gt_p gets how
 * many elements are strictly greater.  Quickselect, expected O(m). */
uint32_t cmp_topk_nth_largest(uint32_t *a, size_t m, size_t r, size_t *gt_p);

#endif
