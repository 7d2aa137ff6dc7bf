/* topk.c -- top-k by magnitude without sorting, and random-k (see topk.h).
 *
 * Keys: key(x) = bits(x) & 0x7fffffff, 31 bits, ordered like |x|.
 *
 *   exact:   level 0 histogram of key >> 19 (4096 bins)      one pass
 *            [level 1: key >> 7 within the bin, level 2: key] only when the
 *                                                            bin is huge
 *            collect the bin's keys, quickselect the need-th one
 *            gather: key > T, and the first `ties` keys == T  one pass
 *
 *   approx:  t = previous threshold | sample quantile
 *            count keys >= t, storing indices as it goes     one pass a try
 *            hit (k <= m <= cap): trim the m candidates exactly to k
 *            near hit (k - k/64 <= m < k): fill with low unselected indices
 *            miss: move t (sample quantiles, else bisection of the bracket)
 */
#include "compress/topk.h"
#include "compress/pool.h"
#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>

#define TOPK_L0_BINS 4096u
#define TOPK_L0_SHIFT 19
#define TOPK_L1_BINS 4096u
#define TOPK_L1_SHIFT 7
#define TOPK_L2_BINS 128u
#define TOPK_HIST_WORDS (2 * TOPK_L0_BINS) /* per thread: two interleaved copies */
#define TOPK_SAMPLE_MIN 4096u
#define TOPK_SAMPLE_MAX 65536u
#define TOPK_APPROX_MIN_N ((size_t)65536)
#define TOPK_MAX_PASSES 8
#define TOPK_KEY_END 0x80000000u /* one past the largest key */
#define TOPK_BLOCK 16
#define TOPK_TIES_SKIP 7 /* after a ties fallback, calls that skip the search */

struct cmp_topk {
    size_t n_max;
    size_t k_max;
    cmp_pool_t *pool;
    uint32_t *hist;        /* nthreads * TOPK_HIST_WORDS                    */
    size_t *counts;        /* nthreads: per-thread counts of a count pass  */
    uint32_t *keys;        /* keys_len: candidate keys (exact bin, trim)   */
    size_t keys_len;
    int32_t *cand;         /* cand_len: candidate indices of a count pass  */
    size_t cand_len;
    uint32_t *sample;      /* TOPK_SAMPLE_MAX, ascending once drawn        */
    uint32_t *sample_tmp;  /* TOPK_SAMPLE_MAX, radix-sort scratch          */
    size_t sample_len;     /* entries drawn for the current call, 0: none  */
    uint64_t seed;
    uint64_t draws;        /* sample stream number                         */
    uint32_t prev;         /* previous accepted threshold                  */
    int have_prev;
    double prev_rms;       /* the scale hint the previous threshold had    */
    double hint_rms;       /* the scale hint of the next call, 0: none     */
    int skip_approx;       /* calls left that go straight to exact (ties)  */
};

/* the float whose magnitude key is key */
static inline float topk_value(uint32_t key)
{
    float f;

    memcpy(&f, &key, sizeof(f));
    return f;
}

/* ---- sizes --------------------------------------------------------------- */

static size_t topk_cap_exact(size_t n_max) { return n_max / 16 + 4096; }

/* Upper end of the approximate path's window for k of n. */
static size_t topk_cap_approx(size_t k, size_t n)
{
    return FLX_MIN(n, k + FLX_MAX(k / 2, (size_t)4096));
}

/* ---- quickselect ------------------------------------------------------------ */

static inline void topk_swap(uint32_t *a, size_t i, size_t j)
{
    uint32_t t = a[i];
    a[i] = a[j];
    a[j] = t;
}

static inline uint32_t topk_median3(uint32_t a, uint32_t b, uint32_t c)
{
    if (a > b) { uint32_t t = a; a = b; b = t; }
    if (b > c) b = c;
    return a > b ? a : b;
}

uint32_t cmp_topk_nth_largest(uint32_t *a, size_t m, size_t r, size_t *gt_p)
{
    size_t lo = 0, hi = m; /* a[0, lo) > answer; the answer is in a[lo, hi) */
    int rounds = 8;
    uint64_t rnd = 0x9e3779b97f4a7c15ULL ^ m;
    uint32_t ans;
    size_t gt;

    for (size_t v = m; v > 1; v >>= 1)
        rounds += 2;
    while (hi - lo > 24) {
        uint32_t p;
        size_t lt, i, ge;

        if (rounds > 0) {
            rounds--;
            p = topk_median3(a[lo], a[lo + (hi - lo) / 2], a[hi - 1]);
        } else { /* adversarial input: random pivots keep it expected O(m) */
            rnd ^= rnd << 13;
            rnd ^= rnd >> 7;
            rnd ^= rnd << 17;
            p = a[lo + (size_t)(rnd % (hi - lo))];
        }
        /* three-way partition: [lo, lt) > p, [lt, i) == p, [ge, hi) < p */
        lt = lo;
        i = lo;
        ge = hi;
        while (i < ge) {
            uint32_t v = a[i];
            if (v > p)
                topk_swap(a, lt++, i++);
            else if (v < p)
                topk_swap(a, i, --ge);
            else
                i++;
        }
        if (r <= lt - lo) {
            hi = lt;
        } else if (r <= ge - lo) {
            *gt_p = lt;
            return p;
        } else {
            r -= ge - lo;
            lo = ge;
        }
    }
    /* small range: insertion sort descending */
    for (size_t i = lo + 1; i < hi; i++) {
        uint32_t v = a[i];
        size_t j = i;
        while (j > lo && a[j - 1] < v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
    ans = a[lo + r - 1];
    gt = lo;
    while (gt < hi && a[gt] > ans)
        gt++;
    *gt_p = gt;
    return ans;
}

/* ---- histogram passes ------------------------------------------------------- */

typedef struct {
    const float *x;
    size_t n;
    uint32_t *hist;   /* thread t uses hist + t * TOPK_HIST_WORDS */
    int level;        /* 0, 1, 2                                  */
    uint32_t prefix;  /* level 1: key >> 19, level 2: key >> 7    */
} topk_hist_job_t;

static void topk_hist_range(const float *x, size_t lo, size_t hi, uint32_t *h, int level,
                            uint32_t prefix)
{
    size_t i = lo;

    switch (level) {
    case 0: {
        uint32_t *h2 = h + TOPK_L0_BINS; /* two copies: fewer store-to-load stalls */
        for (; i + 4 <= hi; i += 4) {
            h[cmp_topk_key(x[i]) >> TOPK_L0_SHIFT]++;
            h2[cmp_topk_key(x[i + 1]) >> TOPK_L0_SHIFT]++;
            h[cmp_topk_key(x[i + 2]) >> TOPK_L0_SHIFT]++;
            h2[cmp_topk_key(x[i + 3]) >> TOPK_L0_SHIFT]++;
        }
        for (; i < hi; i++)
            h[cmp_topk_key(x[i]) >> TOPK_L0_SHIFT]++;
        break;
    }
    case 1:
        for (; i < hi; i++) {
            uint32_t key = cmp_topk_key(x[i]);
            if ((key >> TOPK_L0_SHIFT) == prefix)
                h[(key >> TOPK_L1_SHIFT) & (TOPK_L1_BINS - 1)]++;
        }
        break;
    default:
        for (; i < hi; i++) {
            uint32_t key = cmp_topk_key(x[i]);
            if ((key >> TOPK_L1_SHIFT) == prefix)
                h[key & (TOPK_L2_BINS - 1)]++;
        }
        break;
    }
}

static void topk_hist_task(void *arg, int t, int nthreads)
{
    topk_hist_job_t *job = arg;
    size_t lo = job->n * (size_t)t / (size_t)nthreads;
    size_t hi = job->n * (size_t)(t + 1) / (size_t)nthreads;
    uint32_t *h = job->hist + (size_t)t * TOPK_HIST_WORDS;

    memset(h, 0, TOPK_HIST_WORDS * sizeof(uint32_t));
    topk_hist_range(job->x, lo, hi, h, job->level, job->prefix);
}

/* Histogram of one level into sel->hist[0, bins), threads merged. */
static void topk_histogram(cmp_topk_t *sel, const float *x, size_t n, int level,
                           uint32_t prefix, size_t bins)
{
    topk_hist_job_t job = {.x = x, .n = n, .hist = sel->hist, .level = level, .prefix = prefix};
    int nt = n >= CMP_TOPK_PARALLEL_MIN ? cmp_pool_size(sel->pool) : 1;

    if (nt > 1)
        cmp_pool_run(sel->pool, topk_hist_task, &job);
    else
        topk_hist_task(&job, 0, 1);
    for (size_t b = 0; b < bins; b++)
        sel->hist[b] += sel->hist[TOPK_L0_BINS + b];
    for (int t = 1; t < nt; t++) {
        const uint32_t *h = sel->hist + (size_t)t * TOPK_HIST_WORDS;
        for (size_t b = 0; b < bins; b++)
            sel->hist[b] += h[b] + h[TOPK_L0_BINS + b];
    }
}

/* From the top bin down: the bin holding the need-th largest.  *above_p
 * gets the count in higher bins. */
static size_t topk_find_bin(const uint32_t *hist, size_t bins, size_t need, size_t *above_p)
{
    size_t above = 0, b = bins;

    while (b-- > 0) {
        if (above + hist[b] >= need)
            break;
        above += hist[b];
    }
    *above_p = above;
    return b;
}

/* ---- gather ------------------------------------------------------------------- */

/* Indices (ascending) of every key > T and of the first `ties` keys == T.
 * Blocks of TOPK_BLOCK: a vectorised test skips the blocks without a key
 * >= T (most of them when k << n). */
static size_t topk_gather(const float *x, size_t n, uint32_t T, size_t ties, int32_t *idx,
                          float *val)
{
    const int32_t ti = (int32_t)T;
    size_t o = 0, i = 0;

    for (;;) {
        size_t end;
        if (i + TOPK_BLOCK <= n) {
            int any = 0;
            for (size_t j = 0; j < TOPK_BLOCK; j++)
                any |= (int32_t)cmp_topk_key(x[i + j]) >= ti;
            if (flx_likely(!any)) {
                i += TOPK_BLOCK;
                continue;
            }
            end = i + TOPK_BLOCK;
        } else if (i < n) {
            end = n;
        } else {
            break;
        }
        for (; i < end; i++) {
            uint32_t key = cmp_topk_key(x[i]);
            if (key < T)
                continue;
            if (key == T) {
                if (ties == 0)
                    continue;
                ties--;
            }
            idx[o] = (int32_t)i;
            if (val)
                val[o] = x[i];
            o++;
        }
    }
    return o;
}

/* The keys whose key >> s equals prefix, into keys (blocks as above). */
static size_t topk_collect(const float *x, size_t n, int s, uint32_t prefix, uint32_t *keys)
{
    size_t m = 0, i = 0;

    for (;;) {
        size_t end;
        if (i + TOPK_BLOCK <= n) {
            int any = 0;
            for (size_t j = 0; j < TOPK_BLOCK; j++)
                any |= (cmp_topk_key(x[i + j]) >> s) == prefix;
            if (flx_likely(!any)) {
                i += TOPK_BLOCK;
                continue;
            }
            end = i + TOPK_BLOCK;
        } else if (i < n) {
            end = n;
        } else {
            break;
        }
        for (; i < end; i++) {
            uint32_t key = cmp_topk_key(x[i]);
            if ((key >> s) == prefix)
                keys[m++] = key;
        }
    }
    return m;
}

/* ---- exact path ------------------------------------------------------------------ */

static void topk_exact(cmp_topk_t *sel, const float *x, size_t n, size_t k, int32_t *idx,
                       float *val, cmp_topk_info_t *info)
{
    static const size_t bins[3] = {TOPK_L0_BINS, TOPK_L1_BINS, TOPK_L2_BINS};
    static const int shift[3] = {TOPK_L0_SHIFT, TOPK_L1_SHIFT, 0};
    const size_t cap = topk_cap_exact(sel->n_max);
    size_t need = k, ties = 0;
    uint32_t prefix = 0, T = 0;

    for (int level = 0; level < 3; level++) {
        size_t above, b, cnt;
        uint32_t bin_prefix; /* key >> shift[level] of the chosen bin */

        topk_histogram(sel, x, n, level, prefix, bins[level]);
        info->passes++;
        b = topk_find_bin(sel->hist, bins[level], need, &above);
        cnt = sel->hist[b];
        need -= above;
        bin_prefix = level == 0 ? (uint32_t)b
                                : (prefix << (level == 1 ? 12 : 7)) | (uint32_t)b;
        if (level == 2) { /* every bit known: T itself */
            T = bin_prefix;
            ties = need;
            break;
        }
        if (need == cnt) { /* the whole bin: every key >= its lowest key */
            T = (bin_prefix << shift[level]) - 1; /* > 0: k < n, so b is not the bottom */
            ties = 0;
            break;
        }
        if (cnt <= cap) { /* collect the bin's keys and quickselect in them */
            size_t m = topk_collect(x, n, shift[level], bin_prefix, sel->keys), gt;
            info->passes++;
            T = cmp_topk_nth_largest(sel->keys, m, need, &gt);
            ties = need - gt;
            break;
        }
        prefix = bin_prefix;
    }
    topk_gather(x, n, T, ties, idx, val);
    info->passes++;
    info->exact_path = 1;
    info->threshold = T;
    sel->prev = T;
    sel->prev_rms = sel->hint_rms;
    sel->have_prev = 1;
}

/* ---- approximate path --------------------------------------------------------------- */

/* Count keys >= t in x[lo, hi), storing their indices in cand while the
 * count stays <= cap.  Blocks: a vectorised count per block, indices stored
 * only for blocks with hits. */
static size_t topk_count_store(const float *x, size_t lo, size_t hi, uint32_t t,
                               int32_t *cand, size_t cap)
{
    const int32_t ti = (int32_t)t;
    size_t m = 0, i = lo;

    for (; i + TOPK_BLOCK <= hi; i += TOPK_BLOCK) {
        unsigned c = 0;
        for (size_t j = 0; j < TOPK_BLOCK; j++)
            c += (int32_t)cmp_topk_key(x[i + j]) >= ti;
        if (flx_likely(c == 0))
            continue;
        if (m + c <= cap) {
            for (size_t j = 0; j < TOPK_BLOCK; j++)
                if ((int32_t)cmp_topk_key(x[i + j]) >= ti)
                    cand[m++] = (int32_t)(i + j);
        } else {
            m += c; /* over the window: count only */
        }
    }
    for (; i < hi; i++) {
        if ((int32_t)cmp_topk_key(x[i]) >= ti) {
            if (m < cap)
                cand[m] = (int32_t)i;
            m++;
        }
    }
    return m;
}

typedef struct {
    const float *x;
    size_t n;
    uint32_t t;
    int32_t *cand;    /* thread u stores at cand + u * region            */
    size_t region;    /* slots per thread                                */
    size_t *counts;   /* per-thread counts                               */
} topk_count_job_t;

static void topk_count_task(void *arg, int t, int nthreads)
{
    topk_count_job_t *job = arg;
    size_t lo = job->n * (size_t)t / (size_t)nthreads;
    size_t hi = job->n * (size_t)(t + 1) / (size_t)nthreads;

    job->counts[t] = topk_count_store(job->x, lo, hi, job->t, job->cand + (size_t)t * job->region,
                                      job->region - 1);
}

/* Count keys >= t over x[0, n); when the count is at most cap, leave the
 * indices ascending in sel->cand.  With several threads each stores into
 * its own region (one pass), then the regions are packed. */
static size_t topk_count(cmp_topk_t *sel, const float *x, size_t n, uint32_t t, size_t cap,
                         cmp_topk_info_t *info)
{
    const int nt = n >= CMP_TOPK_PARALLEL_MIN ? cmp_pool_size(sel->pool) : 1;
    topk_count_job_t job = {.x = x, .n = n, .t = t, .cand = sel->cand, .counts = sel->counts};
    size_t m = 0;

    info->passes++;
    if (nt == 1)
        return topk_count_store(x, 0, n, t, sel->cand, cap);
    /* a chunk holds at most n / nt + 1 elements: regions never need more */
    job.region = FLX_MIN(cap, n / (size_t)nt + 1) + 1;
    cmp_pool_run(sel->pool, topk_count_task, &job);
    for (int u = 0; u < nt; u++)
        m += sel->counts[u];
    if (m <= cap) { /* every region kept all its hits: pack them */
        size_t off = sel->counts[0];
        for (int u = 1; u < nt; u++) {
            memmove(sel->cand + off, sel->cand + (size_t)u * job.region,
                    sel->counts[u] * sizeof(int32_t));
            off += sel->counts[u];
        }
    }
    return m;
}

/* LSD radix sort of a[0, m) ascending, 11 bits a round (keys < 2^31). */
static void topk_radix_sort(uint32_t *a, uint32_t *tmp, size_t m)
{
    uint32_t *src = a, *dst = tmp;

    for (int shift = 0; shift < 33; shift += 11) {
        size_t count[2048] = {0}, sum = 0;
        for (size_t i = 0; i < m; i++)
            count[(src[i] >> shift) & 2047]++;
        for (size_t b = 0; b < 2048; b++) {
            size_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < m; i++)
            dst[count[(src[i] >> shift) & 2047]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) /* three rounds: the result is in tmp */
        memcpy(a, src, m * sizeof(uint32_t));
}

/* Draw the sample of this call (once): s keys at random positions, sorted. */
static void topk_sample(cmp_topk_t *sel, const float *x, size_t n, size_t k)
{
    size_t s = FLX_MIN(FLX_MAX((size_t)64 * (n / k), (size_t)TOPK_SAMPLE_MIN),
                       (size_t)TOPK_SAMPLE_MAX);
    cmp_rng_t rng;

    if (sel->sample_len)
        return;
    s = FLX_MIN(s, n);
    cmp_rng_seed(&rng, sel->seed, 0x70b4, sel->draws++);
    for (size_t j = 0; j < s; j++)
        sel->sample[j] = cmp_topk_key(x[cmp_rng_below(&rng, n)]);
    topk_radix_sort(sel->sample, sel->sample_tmp, s);
    sel->sample_len = s;
}

static size_t topk_sample_count_ge(const cmp_topk_t *sel, uint32_t t);

/* The sample's r-th largest key, r clamped to [1, s]. */
static uint32_t topk_sample_rth(const cmp_topk_t *sel, double r)
{
    size_t s = sel->sample_len, ri = r < 1 ? 1 : r > (double)s ? s : (size_t)(r + 0.5);

    return sel->sample[s - ri];
}

/* The sampled key of rank r (r-th largest), moved to the nearest sampled
 * key strictly inside (lo, hi); 0 when there is none. */
static uint32_t topk_sample_inside(const cmp_topk_t *sel, double r, uint32_t lo, uint32_t hi)
{
    size_t s = sel->sample_len;
    size_t a = s - topk_sample_count_ge(sel, lo + 1); /* first index with key > lo */
    size_t b = s - topk_sample_count_ge(sel, hi);     /* first index with key >= hi */
    size_t ri = r < 1 ? 1 : r > (double)s ? s : (size_t)(r + 0.5), i = s - ri;

    if (a >= b)
        return 0;
    i = i < a ? a : i >= b ? b - 1 : i;
    return sel->sample[i];
}

/* Sample keys >= t. */
static size_t topk_sample_count_ge(const cmp_topk_t *sel, uint32_t t)
{
    size_t lo = 0, hi = sel->sample_len; /* first index with key >= t */

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sel->sample[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return sel->sample_len - lo;
}

/* Keep the exact top-k of the m >= k candidates in sel->cand. */
static void topk_trim(cmp_topk_t *sel, const float *x, size_t m, size_t k, int32_t *idx,
                      float *val)
{
    size_t gt, ties, o = 0;
    uint32_t T;

    for (size_t j = 0; j < m; j++)
        sel->keys[j] = cmp_topk_key(x[sel->cand[j]]);
    T = cmp_topk_nth_largest(sel->keys, m, k, &gt);
    ties = k - gt;
    for (size_t j = 0; j < m && o < k; j++) {
        int32_t i = sel->cand[j];
        uint32_t key = cmp_topk_key(x[i]);
        if (key < T)
            continue;
        if (key == T) {
            if (ties == 0)
                continue;
            ties--;
        }
        idx[o] = i;
        if (val)
            val[o] = x[i];
        o++;
    }
}

/* All m < k candidates, plus the lowest k - m other indices, ascending. */
static size_t topk_fill(const cmp_topk_t *sel, const float *x, size_t m, size_t k,
                        int32_t *idx, float *val)
{
    size_t o = 0, j = 0, fill = k - m;
    int32_t i = 0;

    while (o < k) {
        if (j < m && sel->cand[j] == i) {
            j++;
        } else if (fill > 0) {
            fill--;
        } else {
            i = sel->cand[j]; /* nothing left to fill: jump to the next candidate */
            continue;
        }
        idx[o] = i;
        if (val)
            val[o] = x[i];
        o++;
        i++;
    }
    return k - m;
}

static void topk_approx(cmp_topk_t *sel, const float *x, size_t n, size_t k, int32_t *idx,
                        float *val, cmp_topk_info_t *info)
{
    const size_t cap = topk_cap_approx(k, n);
    const double target = (double)k + (double)(cap - k) / 2;
    const size_t near = k - k / 64;
    uint32_t lo = 0, hi = TOPK_KEY_END, t;

    sel->sample_len = 0;
    if (sel->have_prev) {
        t = sel->prev;
        if (sel->hint_rms > 0 && sel->prev_rms > 0) { /* the data's scale moved: follow it */
            double v = (double)topk_value(t) * sel->hint_rms / sel->prev_rms;
            if (v > 0 && v < 3.0e38)
                t = cmp_topk_key((float)v);
        }
    } else {
        topk_sample(sel, x, n, k);
        t = topk_sample_rth(sel, target * (double)sel->sample_len / (double)n);
    }
    for (int pass = 0; pass < TOPK_MAX_PASSES; pass++) {
        size_t m, rs;

        if (!(lo < t && t < hi)) {
            if (hi - lo <= 1)
                break; /* the count jumps over the window: ties */
            t = lo + (hi - lo) / 2;
        }
        m = topk_count(sel, x, n, t, cap, info);
        if (m >= k && m <= cap) {
            topk_trim(sel, x, m, k, idx, val);
            sel->prev = t;
            sel->prev_rms = sel->hint_rms;
            sel->have_prev = 1;
            info->threshold = t;
            return;
        }
        if (m < k && m >= near && m > 0) {
            info->filled = topk_fill(sel, x, m, k, idx, val);
            sel->prev = t;
            sel->prev_rms = sel->hint_rms;
            sel->have_prev = 1;
            info->threshold = t;
            return;
        }
        if (m < k)
            hi = t;
        else
            lo = t;
        /* next try: scale the sample's count at t by target / m and take the
         * sampled key of that rank, kept strictly inside the bracket */
        topk_sample(sel, x, n, k);
        rs = topk_sample_count_ge(sel, t);
        if (m > 0 && rs > 0)
            t = topk_sample_inside(sel, (double)rs * target / (double)m, lo, hi);
        else
            t = topk_sample_inside(sel, target * (double)sel->sample_len / (double)n, lo, hi);
        if (t == 0) { /* no sampled key inside the bracket: ties, go exact */
            sel->skip_approx = TOPK_TIES_SKIP;
            break;
        }
    }
    topk_exact(sel, x, n, k, idx, val, info);
}

/* ---- public (internal) entry points ---------------------------------------------------- */

void cmp_topk_select(cmp_topk_t *sel, const float *x, size_t n, size_t k, cmp_select_t mode,
                     int32_t *idx, float *val, cmp_topk_info_t *info_p)
{
    cmp_topk_info_t info = {0};

    if (k >= n) { /* everything */
        for (size_t i = 0; i < n; i++) {
            idx[i] = (int32_t)i;
            if (val)
                val[i] = x[i];
        }
        info.passes = 1;
    } else if (mode == CMP_SELECT_APPROX && n >= TOPK_APPROX_MIN_N && sel->skip_approx == 0) {
        topk_approx(sel, x, n, k, idx, val, &info);
    } else {
        if (mode == CMP_SELECT_APPROX && sel->skip_approx > 0)
            sel->skip_approx--;
        topk_exact(sel, x, n, k, idx, val, &info);
    }
    sel->hint_rms = 0;
    if (info_p)
        *info_p = info;
}

void cmp_topk_hint_scale(cmp_topk_t *sel, double rms)
{
    sel->hint_rms = rms > 0 && rms < 1e300 ? rms : 0;
}

static flx_status_t topk_alloc_k(cmp_topk_t *sel, size_t k_max)
{
    const size_t nt = (size_t)cmp_pool_size(sel->pool);
    const size_t cap = topk_cap_approx(k_max, sel->n_max);
    /* one thread: cap + 1; nt threads: nt regions of min(cap, n/nt + 1) + 1 */
    size_t cand_len = nt == 1 ? cap + 1 : nt * (FLX_MIN(cap, sel->n_max / nt + 1) + 1);
    size_t keys_len = FLX_MAX(topk_cap_exact(sel->n_max), cap + 1) + 1;
    void *p;

    if (cand_len > sel->cand_len) {
        p = realloc(sel->cand, cand_len * sizeof(int32_t));
        if (p == NULL)
            return FLX_ERR_NO_MEMORY;
        sel->cand = p;
        sel->cand_len = cand_len;
    }
    if (keys_len > sel->keys_len) {
        p = realloc(sel->keys, keys_len * sizeof(uint32_t));
        if (p == NULL)
            return FLX_ERR_NO_MEMORY;
        sel->keys = p;
        sel->keys_len = keys_len;
    }
    sel->k_max = FLX_MAX(sel->k_max, k_max);
    return FLX_OK;
}

flx_status_t cmp_topk_create(size_t n_max, size_t k_max, int nthreads, uint64_t seed,
                             cmp_topk_t **sel_p)
{
    cmp_topk_t *sel;
    flx_status_t st;

    if (n_max == 0 || n_max >= ((size_t)1 << 31) || k_max == 0 || k_max > n_max) {
        flx_error(COMPRESS, -1, "top-k selector: n_max %zu / k_max %zu out of range "
                  "(need 1 <= k_max <= n_max < 2^31)", n_max, k_max);
        return FLX_ERR_INVALID_ARG;
    }
    if (nthreads < 1)
        nthreads = 1;
    sel = calloc(1, sizeof(*sel));
    if (sel == NULL)
        return FLX_ERR_NO_MEMORY;
    sel->n_max = n_max;
    sel->seed = seed;
    st = cmp_pool_create(nthreads, &sel->pool);
    if (st != FLX_OK)
        goto err_free_sel;
    st = FLX_ERR_NO_MEMORY;
    sel->hist = malloc((size_t)nthreads * TOPK_HIST_WORDS * sizeof(uint32_t));
    sel->counts = calloc((size_t)nthreads, sizeof(size_t));
    sel->sample = malloc(TOPK_SAMPLE_MAX * sizeof(uint32_t));
    sel->sample_tmp = malloc(TOPK_SAMPLE_MAX * sizeof(uint32_t));
    if (sel->hist == NULL || sel->counts == NULL || sel->sample == NULL ||
        sel->sample_tmp == NULL)
        goto err_free_buffers;
    st = topk_alloc_k(sel, k_max);
    if (st != FLX_OK)
        goto err_free_buffers;
    *sel_p = sel;
    return FLX_OK;

err_free_buffers:
    free(sel->cand);
    free(sel->keys);
    free(sel->sample_tmp);
    free(sel->sample);
    free(sel->counts);
    free(sel->hist);
    cmp_pool_destroy(sel->pool);
err_free_sel:
    free(sel);
    return st;
}

flx_status_t cmp_topk_reserve(cmp_topk_t *sel, size_t k_max)
{
    if (k_max <= sel->k_max)
        return FLX_OK;
    return topk_alloc_k(sel, FLX_MIN(k_max, sel->n_max));
}

void cmp_topk_destroy(cmp_topk_t *sel)
{
    if (sel == NULL)
        return;
    cmp_pool_destroy(sel->pool);
    free(sel->cand);
    free(sel->keys);
    free(sel->sample_tmp);
    free(sel->sample);
    free(sel->counts);
    free(sel->hist);
    free(sel);
}

void cmp_topk_reset(cmp_topk_t *sel)
{
    sel->have_prev = 0;
    sel->skip_approx = 0;
    sel->prev_rms = 0;
    sel->hint_rms = 0;
}

int cmp_topk_threads(const cmp_topk_t *sel) { return cmp_pool_size(sel->pool); }

/* ---- random-k ---------------------------------------------------------------------- */

void cmp_randk_select(uint64_t *bitmap, size_t n, size_t k, uint64_t seed, uint64_t step,
                      int32_t *idx)
{
    cmp_rng_t rng;
    size_t o = 0;

    cmp_rng_seed(&rng, seed, 0x4a4d, step);
    /* Floyd: for j = n-k .. n-1 take a uniform t in [0, j]; if taken, take j */
    for (size_t j = n - k; j < n; j++) {
        size_t t = (size_t)cmp_rng_below(&rng, (uint64_t)j + 1);
        uint64_t bit = 1ULL << (t & 63);
        if (bitmap[t >> 6] & bit) {
            t = j;
            bit = 1ULL << (t & 63);
        }
        bitmap[t >> 6] |= bit;
    }
    /* read the set bits in ascending order, clearing the map as we go */
    for (size_t w = 0; w <= (n - 1) >> 6 && o < k; w++) {
        uint64_t word = bitmap[w];
        if (word == 0)
            continue;
        bitmap[w] = 0;
        while (word) {
            idx[o++] = (int32_t)(w * 64 + (size_t)__builtin_ctzll(word));
            word &= word - 1;
        }
    }
}
