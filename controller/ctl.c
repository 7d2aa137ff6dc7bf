/* ctl.c -- the controller (flx_ctl_*): every step it agrees the inputs
 * with the other ranks, scores the candidates (policy.c) and runs the
 * chosen sync, dense or through a Top-k gradient sync with error feedback.
 *
 * One step:
 *   1. local statistics on a fixed sample of about 16 Ki positions: the
 *      histogram of |g + e| (the gain of every kept fraction at once) and
 *      the per-layer accumulated gradient (Accordion's norms);
 *   2. one small allreduce of those, of the compute time, of the sync's
 *      measured comm and selection times and of what this rank's top-k
 *      kept: every rank then holds the same inputs, so every rank makes
 *      the same decision with no broadcast.  It is non-blocking: started
 *      at the end of a step, it runs while the ranks compute the next
 *      gradient, and the next step decides on it (its gains are one step
 *      old); only the first step waits for its own;
 *   3. the live model: alpha and 1/B from the last sync's time (each
 *      collective keeps its own 1/B, as its software overhead differs; a
 *      change seen by one moves the other of its family, dense or sparse,
 *      by the same seconds per byte, by no larger a ratio), selection
 *      cost as an EWMA of the median of the last three measurements,
 *      after two warm-up runs that do not count;
 *   4. the critical-regime test on the norms of each interval's last
 *      step (taken, like every agreed input, at the step after it);
 *   5. the choice (ctl_choose or the mode's rule; flex keeps last step's
 *      choice unless the winner scores CTL_MARGIN better, and tries once a
 *      collective whose estimate is stale but whose score is close:
 *      ctl_probe), then the sync;
 *   6. every 10 steps, the gain of the combined update (ctl_combined_*),
 *      which corrects each sparse candidate's predicted gain.  Its small
 *      allreduce is blocking: started beside the selection, its rest
 *      would be timed as the sync's communication, which the model learns.
 */
#include "controller/ctl.h"
#include "collectives/coll.h"
#include "compress/cmp.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/stall.h"
#include "common/time.h"
#include "common/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTL_SAMPLE 16384      /* positions sampled for the statistics     */
#define CTL_LAMBDA 0.3        /* weight of the newest timing in the EWMAs */
#define CTL_AGREE_FIXED 6     /* agreed: compute, comm, select, per-rank gain,
                                 stopped in the sync, stopped before it
                                 (see ctl_take_agreed) */
#define CTL_MARGIN 0.05       /* a new choice must score this much better */
#define CTL_PROBE_AGE 100     /* a collective unseen this long is stale   */
#define CTL_PROBE_WINDOW 0.5  /* ... and is tried once if this close      */
#define CTL_GAIN_EVERY 10     /* steps between combined-gain measurements */
#define CTL_MAX_CANDS (2 + 2 * FLX_CTL_MAX_FRACTIONS)
/* the largest compute time a step may report: 11.6 days.  The agreement
 * sums the ranks' values; 1e308 on two ranks overflowed to Inf, the EWMA
 * stayed Inf and every score NaN, and the choice stuck on candidate 0 */
#define CTL_MAX_COMPUTE_S 1e6
/* flex's floor under a compressed candidate's gain (combined x per rank).
 * On 4 Fashion-MNIST ranks flex's decision logs gave AR-Topk 0.033 and the
 * allgather at 0.011 gains of 0.22-0.39, AR-Topk 0.1 0.50-0.57 and the
 * allgather at 0.033 0.41-0.56; run statically the first two ended 0.9-1.0
 * points below dense, the last two within 0.4.  Without the floor flex
 * spent half its 100 Mbit steps on AR-Topk 0.033 and ended 0.61-0.78
 * below dense in three runs, with it 0.37-0.38 below (README "Experiment") */
#define CTL_FLEX_MIN_GAIN 0.45
/* flex's weight of time against ln(delta).  At 0.5 (delta per second) a
 * compressed candidate wins only when its delta exceeds its time over
 * dense's: at 1 Gbit flex then ran dense in 40-50% of its steps after the
 * first 150 and reached 85% 1.5-2.4x sooner than dense in three runs.
 * With error feedback a step loses less than delta suggests (static
 * topk-ag 0.01, delta about 0.09, needed 349 steps to 85%, dense 299); at
 * 0.6 three runs were 2.1-2.5x sooner, 0.2-0.4 below dense at the end */
#define CTL_FLEX_WEIGHT 0.6

struct flx_ctl {
    flx_comm_h comm;
    int N, rank;
    size_t n;
    flx_ctl_opts_t o;
    flx_gsync_h topk;           /* TOPK with AUTO: either sparse collective */
    double cur_kept;            /* the kept fraction topk is set to         */
    int residual_dirty;         /* a compressed step left residuals         */

    double alpha0, alpha;       /* calibrated and live latency, seconds     */
    double inv_bw0;             /* calibrated 1/B, seconds per byte         */
    double inv_bw[CTL_COLL_COUNT]; /* live 1/B as each collective sees it  */
    uint64_t seen[CTL_COLL_COUNT]; /* step + 1 each collective last ran     */
    double select_s[CTL_COLL_COUNT]; /* EWMA of selection + decode, <0 unknown */
    double select_hist[CTL_COLL_COUNT][3]; /* its last three measurements    */
    int select_runs[CTL_COLL_COUNT];  /* runs measured                      */
    double compute_s;           /* EWMA of the agreed compute time          */

    int have_last;              /* the last step's choice, for the model    */
    int last_probe;             /* ... was a probe of a stale collective    */
    double last_stalled_s;      /* ... this process was stopped inside it    */
    flx_stall_watch_t *watch;   /* sees every stop of this rank (NULL: none) */
    uint64_t watch_mark;        /* ... its sum when the last sync ended      */
    double between_stalled_s;   /* stopped since then, until this sync      */
    int compute_warm;           /* the warm-up compute time was replaced    */
    ctl_ratio_t gain_ratio[CTL_COLL_COUNT]; /* combined / predicted gain     */
    ctl_ratio_t rank_ratio[CTL_COLL_COUNT]; /* per-rank / predicted gain     */
    double last_rank_gain;      /* what this rank's last sync kept          */
    double gain_ewma[FLX_CTL_MAX_FRACTIONS]; /* gravac: EWMA of each fraction's
                                   histogram gain (< 0: none yet)           */
    float *xs;                  /* every 4th sample position: mean of g + e */
    size_t nxs;
    ctl_cand_t last;

    size_t nsample;             /* sampled positions                        */
    size_t *sample_pos;
    int *sample_seg;
    float *accum;               /* per sample: gradient summed over the interval */
    float *step_add;            /* ... this step's part, added when it succeeds */
    double prev_norm[FLX_CTL_MAX_SEGMENTS];
    int have_prev;
    int critical;
    double change;              /* last interval's relative norm change     */
    uint64_t critical_until;    /* a LR decay keeps critical up to here     */
    uint64_t step;

    ctl_hist_t hist;
    double *agree;              /* this rank's part of the agreement        */
    double *agreed;             /* the agreed vector: the mean over ranks   */
    size_t nagree;
    flx_request_h agree_req;    /* the agreement under way, or NULL         */
    uint64_t agreed_step;       /* the step whose statistics agreed holds   */
    int agreed_interval_end;    /* ... and whether they close an interval   */
    double last_combined;       /* the last step's combined gain, or -1     */
    FILE *log;
};

static const double ctl_default_fractions[] = {0.1, 0.033, 0.011, 0.004, 0.001};

void flx_ctl_opts_default(flx_ctl_opts_t *o)
{
    if (o == NULL) {
        flx_error(CTRL, -1, "flx_ctl_opts_default: NULL options");
        return;
    }
    memset(o, 0, sizeof(*o));
    o->mode = FLX_CTL_FLEX;
    o->weight = CTL_FLEX_WEIGHT;
    o->nfractions = (int)FLX_ARRAY_SIZE(ctl_default_fractions);
    memcpy(o->fractions, ctl_default_fractions, sizeof(ctl_default_fractions));
    o->eta = 0.5;
    o->interval = 50;
    o->critical_kept = 0.1;
    o->low_kept = 0.01;
    o->min_gain = CTL_FLEX_MIN_GAIN;
}

const char *flx_ctl_mode_name(flx_ctl_mode_t mode)
{
    switch (mode) {
    case FLX_CTL_FLEX: return "flex";
    case FLX_CTL_ACCORDION: return "accordion";
    case FLX_CTL_GRAVAC: return "gravac";
    default: return "?";
    }
}

/* the caller's options over the defaults, checked */
static flx_status_t ctl_opts(const flx_ctl_opts_t *in, size_t n, int rank, flx_ctl_opts_t *o)
{
    size_t sum = 0;

    flx_ctl_opts_default(o);
    if (in == NULL) {
        o->nsegments = 1;
        o->segments[0] = n;
        return FLX_OK;
    }
    if (in->field_mask & FLX_CTL_OPT_MODE)
        o->mode = in->mode;
    if (!(in->field_mask & FLX_CTL_OPT_MIN_GAIN) && o->mode == FLX_CTL_GRAVAC)
        o->min_gain = 0.7;

    if (in->field_mask & FLX_CTL_OPT_WEIGHT)
        o->weight = in->weight;
    if (in->field_mask & FLX_CTL_OPT_FRACTIONS) {
        o->nfractions = in->nfractions;
        memcpy(o->fractions, in->fractions, sizeof(o->fractions));
    }
    if (in->field_mask & FLX_CTL_OPT_ETA)
        o->eta = in->eta;
    if (in->field_mask & FLX_CTL_OPT_INTERVAL)
        o->interval = in->interval;
    if (in->field_mask & FLX_CTL_OPT_CRITICAL_KEPT)
        o->critical_kept = in->critical_kept;
    if (in->field_mask & FLX_CTL_OPT_LOW_KEPT)
        o->low_kept = in->low_kept;
    if (in->field_mask & FLX_CTL_OPT_MIN_GAIN)
        o->min_gain = in->min_gain;
    if (in->field_mask & FLX_CTL_OPT_LOG_PATH)
        o->log_path = in->log_path;
    if (in->field_mask & FLX_CTL_OPT_SEGMENTS) {
        o->nsegments = in->nsegments;
        memcpy(o->segments, in->segments, sizeof(o->segments));
    } else {
        o->nsegments = 1;
        o->segments[0] = n;
    }
#define CTL_BAD(...)                                                                      \
    do {                                                                                  \
        flx_error(CTRL, rank, "flx_ctl_create: " __VA_ARGS__);                            \
        return FLX_ERR_INVALID_ARG;                                                       \
    } while (0)
    if (o->mode != FLX_CTL_FLEX && o->mode != FLX_CTL_ACCORDION && o->mode != FLX_CTL_GRAVAC)
        CTL_BAD("unknown mode %d", (int)o->mode);
    if (!(o->weight >= 0 && o->weight <= 1))
        CTL_BAD("weight %g is not in [0, 1]", o->weight);
    if (o->nfractions < 1 || o->nfractions > FLX_CTL_MAX_FRACTIONS)
        CTL_BAD("%d kept fractions (need 1 to %d)", o->nfractions, FLX_CTL_MAX_FRACTIONS);
    for (int i = 0; i < o->nfractions; i++)
        if (!(o->fractions[i] > 0 && o->fractions[i] < 1))
            CTL_BAD("kept fraction %g is not in (0, 1)", o->fractions[i]);
    if (!(o->eta > 0))
        CTL_BAD("eta %g is not > 0", o->eta);
    if (o->interval < 1)
        CTL_BAD("interval %d is not >= 1", o->interval);
    if (!(o->critical_kept > 0 && o->critical_kept <= 1) || !(o->low_kept > 0 && o->low_kept <= 1))
        CTL_BAD("critical_kept %g or low_kept %g is not in (0, 1]", o->critical_kept, o->low_kept);
    if (!(o->min_gain >= 0 && o->min_gain <= 1))
        CTL_BAD("min_gain %g is not in [0, 1]", o->min_gain);
    if (o->nsegments < 1 || o->nsegments > FLX_CTL_MAX_SEGMENTS)
        CTL_BAD("%d segments (need 1 to %d)", o->nsegments, FLX_CTL_MAX_SEGMENTS);
    for (int s = 0; s < o->nsegments; s++) {
        if (o->segments[s] == 0)
            CTL_BAD("segment %d is empty", s);
        if (o->segments[s] > n - sum) /* (also what would wrap the sum) */
            CTL_BAD("segments 0 to %d already sum past n = %zu", s, n);
        sum += o->segments[s];
    }
    if (sum != n)
        CTL_BAD("segments sum to %zu, not n = %zu", sum, n);
#undef CTL_BAD
    if (o->mode == FLX_CTL_ACCORDION) {
        /* Accordion runs at two kept fractions only: the statistics measure
         * the gain at those (a kept fraction of 1 is dense, gain 1) */
        o->nfractions = 1;
        o->fractions[0] = o->critical_kept;
        if (o->low_kept != o->critical_kept)
            o->fractions[o->nfractions++] = o->low_kept;
    }
    return FLX_OK;
}

/* a fixed sample: every stride-th position of each segment, at least one */
static flx_status_t ctl_sample_init(flx_ctl_h h)
{
    size_t stride = FLX_MAX((size_t)1, h->n / CTL_SAMPLE), off = 0, k = 0;

    h->nsample = 0;
    for (int s = 0; s < h->o.nsegments; s++)
        h->nsample += (h->o.segments[s] + stride - 1) / stride;
    h->sample_pos = malloc(h->nsample * sizeof(size_t));
    h->sample_seg = malloc(h->nsample * sizeof(int));
    h->accum = calloc(h->nsample, sizeof(float));
    h->step_add = calloc(h->nsample, sizeof(float));
    h->nxs = (h->nsample + 3) / 4;
    h->xs = malloc(h->nxs * sizeof(float));
    if (h->sample_pos == NULL || h->sample_seg == NULL || h->accum == NULL ||
        h->step_add == NULL || h->xs == NULL)
        return FLX_ERR_NO_MEMORY;
    for (int s = 0; s < h->o.nsegments; s++) {
        for (size_t i = 0; i < h->o.segments[s]; i += stride, k++) {
            h->sample_pos[k] = off + i;
            h->sample_seg[k] = s;
        }
        off += h->o.segments[s];
    }
    return FLX_OK;
}

/* Creation is collective, and so is its failure: what failed on some rank
 * (options, memory, rank 0's log file; that rank's line says why) fails
 * every rank here, before the collective flx_gsync_create. */
static flx_status_t ctl_create_agree(flx_comm_h comm, int rank, flx_status_t mine)
{
    int32_t code = mine == FLX_OK ? 0 : mine == FLX_ERR_NO_MEMORY ? 2 : 1;
    flx_status_t st = flx_allreduce(comm, &code, &code, 1, FLX_INT32, FLX_MAX, FLX_ALGO_AUTO);

    if (mine != FLX_OK || st != FLX_OK)
        return mine != FLX_OK ? mine : st;
    if (code == 0)
        return FLX_OK;
    flx_error(CTRL, rank, "flx_ctl_create: another rank could not create its controller (its "
              "line says why): every rank fails");
    return code == 2 ? FLX_ERR_NO_MEMORY : FLX_ERR_INVALID_ARG;
}

/* The rank's own part of creation: options, model, buffers, the log. */
static flx_status_t ctl_create_local(flx_ctl_h h, flx_comm_h comm, size_t n,
                                     const flx_ctl_opts_t *opts)
{
    flx_link_model_t lm;
    flx_status_t st;

    st = ctl_opts(opts, n, h->rank, &h->o);
    if (st != FLX_OK)
        return st;
    h->comm = comm;
    h->N = flx_comm_size(comm);
    h->n = n;
    st = flx_comm_link_model(comm, &lm);
    if (st != FLX_OK)
        return st;
    h->alpha0 = h->alpha = lm.alpha_s;
    h->inv_bw0 = 1.0 / lm.beta_bytes_per_s;
    for (int c = 0; c < CTL_COLL_COUNT; c++)
        h->inv_bw[c] = h->inv_bw0;
    for (int c = 0; c < CTL_COLL_COUNT; c++)
        h->select_s[c] = c == CTL_DENSE_RING || c == CTL_DENSE_TREE ? 0.0 : -1.0;
    h->compute_s = -1;
    for (int c = 0; c < CTL_COLL_COUNT; c++)
    {
        ctl_ratio_init(&h->gain_ratio[c]);
        ctl_ratio_init(&h->rank_ratio[c]);
    }
    h->critical = 1; /* the first interval is critical (Accordion) */
    st = ctl_sample_init(h);
    if (st != FLX_OK)
        return st;
    h->nagree = (size_t)h->o.nfractions + CTL_AGREE_FIXED + (size_t)h->o.nsegments;
    h->agree = calloc(h->nagree, sizeof(double));
    h->agreed = calloc(h->nagree, sizeof(double));
    h->last_combined = -1;
    for (int f = 0; f < FLX_CTL_MAX_FRACTIONS; f++)
        h->gain_ewma[f] = -1;
    if (h->agree == NULL || h->agreed == NULL)
        return FLX_ERR_NO_MEMORY;
    /* the sync object's first k (its buffers grow, never shrink): Accordion's
     * kept fraction 1 runs dense and needs none (k = n of 25M floats on 8
     * ranks: 1.6 GB of allgather buffer for nothing) */
    h->cur_kept = h->o.mode != FLX_CTL_ACCORDION ? h->o.fractions[0]
                  : h->o.critical_kept < 1  ? h->o.critical_kept
                  : h->o.low_kept < 1       ? h->o.low_kept
                                            : 0.01;
    /* a stop while the caller computes falls in no wait of ours: a thread
     * sees it (see ctl_take_agreed); without one, such a stop is learnt */
    if ((h->watch = flx_stall_watch_start()) == NULL)
        flx_warn(CTRL, h->rank, "flx_ctl_create: cannot start the thread that sees this rank "
                 "stopped between two steps (%m): a stop while computing will be taken for "
                 "compute and network time");
    h->watch_mark = flx_stall_watch_us(h->watch);
    if (h->o.log_path && h->rank == 0) { /* rank 0 writes it */
        h->log = fopen(h->o.log_path, "w");
        if (h->log == NULL) {
            flx_error(CTRL, h->rank, "flx_ctl_create: cannot write %s: %s", h->o.log_path,
                      strerror(errno));
            return FLX_ERR_INVALID_ARG;
        }
    }
    return FLX_OK;
}

flx_status_t flx_ctl_create(flx_comm_h comm, size_t n, const flx_ctl_opts_t *opts, flx_ctl_h *h_p)
{
    flx_gsync_opts_t go;
    flx_ctl_h h = NULL;
    flx_status_t st;
    int rank = comm ? flx_comm_rank(comm) : -1;

    if (comm == NULL) {
        flx_error(CTRL, rank, "flx_ctl_create: comm is NULL");
        return FLX_ERR_INVALID_ARG;
    }
    if (h_p == NULL || n == 0) {
        flx_error(CTRL, rank, "flx_ctl_create: %s", n == 0 ? "n = 0" : "h_p is NULL");
        st = FLX_ERR_INVALID_ARG;
    } else if ((h = calloc(1, sizeof(*h))) == NULL) {
        flx_error(CTRL, rank, "flx_ctl_create: out of memory");
        st = FLX_ERR_NO_MEMORY;
    } else {
        h->rank = rank;
        st = ctl_create_local(h, comm, n, opts);
    }
    st = ctl_create_agree(comm, rank, st); /* every rank, also one that failed */
    if (st != FLX_OK)
        goto fail;
    flx_gsync_opts_default(&go);
    go.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_KEPT_FRACTION | FLX_GSYNC_OPT_COLLECTIVE;
    go.method = FLX_COMPRESS_TOPK;
    go.kept_fraction = h->cur_kept;
    go.collective = FLX_GSYNC_COLL_AUTO;
    st = flx_gsync_create(comm, n, &go, &h->topk);
    if (st != FLX_OK)
        goto fail;
    if (h->log)
        fprintf(h->log, "step,mode,critical,change,alpha_s,bandwidth,compute_s,choice,kept,"
                        "predicted_s,predicted_dense_s,gain,decide_s,agree_s,candidates\n");
    *h_p = h;
    return FLX_OK;
fail:
    flx_ctl_destroy(h);
    return st;
}

flx_status_t flx_ctl_destroy(flx_ctl_h h)
{
    flx_status_t st = FLX_OK;

    if (h == NULL)
        return FLX_OK;
    if (h->agree_req) { /* every rank started it: it ends */
        st = flx_wait(h->agree_req);
        if (st != FLX_OK) /* said where it failed: a second error line would repeat it */
            flx_info(CTRL, h->rank, "flx_ctl_destroy: the last agreement failed: %s",
                     flx_status_string(st));
    }
    if (h->topk) {
        flx_status_t s2 = flx_gsync_destroy(h->topk);
        if (st == FLX_OK)
            st = s2;
    }
    if (h->log) { /* a write that failed (a full disk) is an error, not a short log */
        int bad = ferror(h->log), closed = fclose(h->log);
        if (bad || closed != 0) {
            flx_error(CTRL, h->rank, "flx_ctl_destroy: writing the decision log %s failed%s%s",
                      h->o.log_path, closed != 0 ? ": " : "", closed != 0 ? strerror(errno) : "");
            if (st == FLX_OK)
                st = FLX_ERR_IO;
        }
    }
    flx_stall_watch_stop(h->watch);
    free(h->sample_pos);
    free(h->sample_seg);
    free(h->accum);
    free(h->step_add);
    free(h->agree);
    free(h->agreed);
    free(h->xs);
    free(h);
    return st;
}

void flx_ctl_lr_changed(flx_ctl_h h)
{
    if (h) {
        h->critical = 1;
        h->critical_until = h->step + (uint64_t)h->o.interval;
    }
}

const float *flx_ctl_residual(flx_ctl_h h)
{
    return h && h->residual_dirty ? flx_gsync_residual(h->topk) : NULL;
}

/* step 1: this rank's gains per fraction and accumulated layer norms */
static void ctl_local_stats(flx_ctl_h h, const float *grad, int interval_end)
{
    const float *e = h->residual_dirty ? flx_gsync_residual(h->topk) : NULL;
    int nf = h->o.nfractions;

    ctl_hist_reset(&h->hist);
    for (size_t k = 0; k < h->nsample; k++) {
        size_t i = h->sample_pos[k];

        /* a NaN or Inf fails the step (the sync sees it on every rank); it
         * must not stay in the statistics of the steps after it */
        h->step_add[k] = 0;
        if (!isfinite(grad[i]) || (e && !isfinite(grad[i] + e[i])))
            continue;
        ctl_hist_add(&h->hist, e ? grad[i] + e[i] : grad[i]);
        h->step_add[k] = grad[i];
    }
    for (int f = 0; f < nf; f++)
        h->agree[f] = ctl_hist_gain(&h->hist, h->o.fractions[f]);
    for (int s = 0; s < h->o.nsegments; s++)
        h->agree[nf + CTL_AGREE_FIXED + s] = 0;
    if (interval_end) {
        for (size_t k = 0; k < h->nsample; k++) {
            double a = (double)h->accum[k] + h->step_add[k];
            h->agree[nf + CTL_AGREE_FIXED + h->sample_seg[k]] += a * a;
        }
        for (int s = 0; s < h->o.nsegments; s++)
            h->agree[nf + CTL_AGREE_FIXED + s] = sqrt(h->agree[nf + CTL_AGREE_FIXED + s]);
    }
}

/* The step succeeded: its part of the accumulated gradient counts, or at
 * an interval's end the sum starts again (a failed step, which the caller
 * may retry with the same gradient, changes neither). */
static void ctl_commit_stats(flx_ctl_h h, int interval_end)
{
    if (interval_end)
        memset(h->accum, 0, h->nsample * sizeof(float));
    else
        for (size_t k = 0; k < h->nsample; k++)
            h->accum[k] += h->step_add[k];
}

static double ctl_ewma(double old, double x) { return old < 0 ? x : (1 - CTL_LAMBDA) * old + CTL_LAMBDA * x; }

/* step 3: the model learns from the last step's agreed timings: not from a
 * sync some rank was stopped in or waited for a stopped rank in (stopped),
 * nor from compute times a stop may be part of (stopped_before: the mean of
 * the stops before the sync, subtracted only where no estimate exists yet) */
static void ctl_learn(flx_ctl_h h, double compute_s, double comm_s, double select_s, int stopped,
                      double stopped_before)
{
    /* alpha from 1/10 to 1000 times, B from 1/10^4 to 16 times calibration */
    double a, b, lo[2] = {h->alpha0 / 10, h->inv_bw0 / 16}, hi[2] = {h->alpha0 * 1e3, h->inv_bw0 * 1e4};

    /* the first step's compute (first touch of every buffer) is a warm-up:
     * the next one learnt replaces it */
    if (stopped_before <= 0 && h->agreed_step >= 1 && !h->compute_warm) {
        h->compute_s = compute_s;
        h->compute_warm = 1;
    } else if (stopped_before <= 0) {
        h->compute_s = ctl_ewma(h->compute_s, compute_s);
    } else if (h->compute_s < 0) {
        h->compute_s = FLX_MAX(0.0, compute_s - stopped_before);
    }
    double before;
    ctl_coll_t c;

    if (!h->have_last || stopped)
        return;
    c = h->last.coll;
    before = h->inv_bw[c];
    ctl_coll_terms(c, h->N, (double)h->n, h->last.kept, &a, &b);
    /* a probe replaces a borrowed estimate: all of it, and nothing else */
    model_learn(&h->alpha, &h->inv_bw[c], comm_s, a, b, model_dominant(a, b, h->alpha, h->inv_bw[c]),
                h->last_probe ? 1.0 : CTL_LAMBDA, lo, hi, NULL);
    /* the link is shared: the seconds per byte it added or took away count
     * for the other collective of the family too, and each keeps its own
     * software overhead per byte (a sparse collective is CPU-bound sooner) */
    if (!h->last_probe)
        ctl_share_change(h->inv_bw, c, before, lo[1], hi[1]);
    h->seen[c] = h->step; /* the step that ran it, + 1 */
    if (ctl_coll_sparse(c)) {
        h->select_s[c] = ctl_select_update(h->select_s[c], h->select_hist[c],
                                           ++h->select_runs[c], select_s, CTL_LAMBDA);
        /* the same selection serves the other sparse collective until it is measured */
        ctl_coll_t other = c == CTL_ARTOPK ? CTL_TOPK_AG : CTL_ARTOPK;
        if (h->select_s[other] < 0)
            h->select_s[other] = h->select_s[c];
    }
}

/* the index of the fraction in the menu nearest kept */
static int ctl_frac_index(flx_ctl_h h, double kept)
{
    int best = 0;

    for (int f = 1; f < h->o.nfractions; f++)
        if (fabs(log(h->o.fractions[f] / kept)) < fabs(log(h->o.fractions[best] / kept)))
            best = f;
    return best;
}

static void ctl_candidate(flx_ctl_h h, ctl_cand_t *c, ctl_coll_t coll, double kept, double gain)
{
    double a, b, sel = h->select_s[coll];
    int f = ctl_frac_index(h, kept);

    ctl_coll_terms(coll, h->N, (double)h->n, kept, &a, &b);
    c->coll = coll;
    c->kept = kept;
    /* flex: sqrt(delta) of the step, what it delivers of the mean (combined)
     * times what each rank's residual gives up (per rank); GraVAC's and
     * Accordion's gain stays the combined one */
    c->gain = FLX_MIN(1.0, gain * ctl_ratio_get(&h->gain_ratio[coll], f));
    if (h->o.mode == FLX_CTL_FLEX)
        c->gain *= FLX_MIN(1.0, gain * ctl_ratio_get(&h->rank_ratio[coll], f));
    c->time_s = FLX_MAX(0.0, h->compute_s) + (sel > 0 ? sel : 0) + a * h->alpha + b * h->inv_bw[coll];
    c->score = 0;
}

/* the agreed histogram's gain at the fraction nearest a candidate's kept
 * fraction (1: dense) */
static double ctl_hist_gain_of(flx_ctl_h h, const ctl_cand_t *c)
{
    if (!ctl_coll_sparse(c->coll))
        return 1.0;
    return h->agreed[ctl_frac_index(h, c->kept)];
}

/* steps 4 and 5: the candidates and the choice; returns the winner */
static int ctl_decide(flx_ctl_h h, ctl_cand_t *cand, int *ncand_p, double *pred_dense_p,
                      int *probe_p)
{
    int nf = h->o.nfractions, n = 0, best, chosen;
    const double *gains = h->agreed;
    /* flex, critical: Accordion's "compress less", as a floor (low_kept)
     * under the kept fraction rather than a fixed one; the weight stays */
    double min_kept = h->critical ? h->o.low_kept : 0.0;

    ctl_candidate(h, &cand[n++], CTL_DENSE_RING, 1.0, 1.0);
    ctl_candidate(h, &cand[n++], CTL_DENSE_TREE, 1.0, 1.0);
    *pred_dense_p = FLX_MIN(cand[0].time_s, cand[1].time_s);
    switch (h->o.mode) {
    case FLX_CTL_ACCORDION: {
        double kept = h->critical ? h->o.critical_kept : h->o.low_kept;

        *ncand_p = n;
        if (kept >= 1) /* all of it: a dense allreduce, the faster one */
            return cand[1].time_s < cand[0].time_s;
        /* (the menu holds kept: ctl_opts) */
        ctl_candidate(h, &cand[n], CTL_ARTOPK, kept, gains[ctl_frac_index(h, kept)]);
        cand[n].score = 0;
        *ncand_p = n + 1;
        return n;
    }
    case FLX_CTL_GRAVAC: /* on the EWMA of the gains, as GraVAC */
        for (int f = 0; f < nf; f++)
            ctl_candidate(h, &cand[n++], CTL_ARTOPK, h->o.fractions[f], h->gain_ewma[f]);
        best = ctl_choose_gravac(cand, n, 0.0, h->o.min_gain);
        /* dense's 1/B moves only when dense runs (ctl_share_change): a
         * stale one is tried again, as in flex */
        chosen = best;
        best = ctl_probe(cand, n, best, h->seen, h->step, CTL_PROBE_AGE, CTL_PROBE_WINDOW);
        *probe_p = best != chosen;
        break;
    default:
        for (int f = 0; f < nf; f++) {
            ctl_candidate(h, &cand[n++], CTL_ARTOPK, h->o.fractions[f], gains[f]);
            ctl_candidate(h, &cand[n++], CTL_TOPK_AG, h->o.fractions[f], gains[f]);
        }
        best = ctl_choose(cand, n, h->o.weight, min_kept, h->o.min_gain);
        if (h->have_last) { /* the same candidate as last step, if it is still here */
            int cur = -1;
            for (int i = 0; i < n && cur < 0; i++)
                if (cand[i].coll == h->last.coll && cand[i].kept == h->last.kept)
                    cur = i;
            best = ctl_hysteresis(cand, n, best, cur, CTL_MARGIN);
        }
        chosen = best;
        best = ctl_probe(cand, n, best, h->seen, h->step, CTL_PROBE_AGE, CTL_PROBE_WINDOW);
        *probe_p = best != chosen;
        break;
    }
    *ncand_p = n;
    return best;
}

static void ctl_log(flx_ctl_h h, const ctl_cand_t *cand, int ncand, int best, double pred_dense,
                    double decide_s, double agree_s)
{
    fprintf(h->log, "%llu,%s,%d,%.4f,%.6g,%.6g,%.6f,%s,%g,%.6f,%.6f,%.4f,%.6f,%.6f,",
            (unsigned long long)h->step, flx_ctl_mode_name(h->o.mode), h->critical, h->change,
            h->alpha, 1.0 / h->inv_bw[cand[best].coll], h->compute_s, ctl_coll_name(cand[best].coll),
            cand[best].kept, cand[best].time_s, pred_dense, cand[best].gain, decide_s, agree_s);
    for (int i = 0; i < ncand; i++)
        fprintf(h->log, "%s%s@%g:%.5f:%.3f:%.3f", i ? ";" : "", ctl_coll_name(cand[i].coll),
                cand[i].kept, cand[i].time_s, cand[i].gain, cand[i].score);
    fputc('\n', h->log);
    if (h->step % 64 == 0)
        fflush(h->log);
}

/* the chosen sync */
static flx_status_t ctl_run(flx_ctl_h h, const ctl_cand_t *c, float *grad, flx_ctl_report_t *r)
{
    flx_status_t st;

    memset(&r->sync, 0, sizeof(r->sync));
    r->sync.step = h->step;
    if (c->coll == CTL_DENSE_RING || c->coll == CTL_DENSE_TREE) {
        flx_algo_t algo = c->coll == CTL_DENSE_RING ? FLX_ALGO_RING : FLX_ALGO_TREE;
        double t0 = flx_time_now();

        if (h->residual_dirty) { /* what earlier steps held back goes now */
            const float *e = flx_gsync_residual(h->topk);
            for (size_t i = 0; i < h->n; i++)
                grad[i] += e[i];
        }
        st = flx_allreduce(h->comm, grad, grad, h->n, FLX_FLOAT32, FLX_AVG, algo);
        if (st == FLX_OK) { /* the same bits on every rank: every rank fails alike */
            size_t i = flx_first_nonfinite(grad, h->n);
            if (i < h->n) {
                flx_error(CTRL, h->rank, "flx_ctl_step %llu: the dense mean holds NaN or Inf at "
                          "element %zu (some rank's gradient did, or the sum overflowed): "
                          "every rank fails this step", (unsigned long long)h->step, i);
                st = FLX_ERR_INVALID_ARG;
            }
        }
        if (st == FLX_OK && h->residual_dirty) { /* sent: a failed step keeps them */
            cmp_gsync_zero_residual(h->topk);
            h->residual_dirty = 0;
        }
        r->algo = algo;
        r->collective = FLX_GSYNC_COLL_ALLREDUCE;
        r->sync.method = FLX_COMPRESS_NONE;
        r->sync.collective = FLX_GSYNC_COLL_ALLREDUCE;
        r->sync.k = h->n;
        r->sync.leader = -1;
        r->sync.bytes_sent = (uint64_t)cmp_bytes_allreduce(algo, h->N, h->rank, 4.0 * (double)h->n);
        r->sync.comm_s = flx_time_now() - t0;
        r->sync.gain = 1.0;
        return st;
    }
    st = flx_gsync_set_collective(h->topk, c->coll == CTL_ARTOPK ? FLX_GSYNC_COLL_ARTOPK
                                                                 : FLX_GSYNC_COLL_ALLGATHER);
    if (st == FLX_OK && c->kept != h->cur_kept) {
        st = flx_gsync_set_kept_fraction(h->topk, c->kept);
        if (st == FLX_OK)
            h->cur_kept = c->kept;
    }
    if (st != FLX_OK)
        return st;
    r->algo = FLX_ALGO_AUTO;
    st = flx_gsync_step(h->topk, grad, &r->sync);
    r->collective = r->sync.collective;
    if (st == FLX_OK)
        h->residual_dirty = 1;
    return st;
}

/* The gain of the combined update, measured every CTL_GAIN_EVERY steps:
 * before the sync the ranks average x = g + e on every 4th sample position
 * (X = mean x_i); after it the synced gradient there is S = mean C_i(x_i).
 * ||S|| / ||X|| is what the step delivered of what a dense step would
 * have: each rank's own ||C(x)|| / ||x|| does not see that AR-Topk sends
 * one leader's indices or that the allgather sums N different sets.  Both
 * vectors are the same on every rank, and so is the learnt ratio. */
static flx_status_t ctl_combined_before(flx_ctl_h h, const float *grad)
{
    const float *e = h->residual_dirty ? flx_gsync_residual(h->topk) : NULL;

    for (size_t j = 0; j < h->nxs; j++) {
        size_t i = h->sample_pos[4 * j];
        h->xs[j] = e ? grad[i] + e[i] : grad[i];
    }
    return flx_allreduce(h->comm, h->xs, h->xs, h->nxs, FLX_FLOAT32, FLX_AVG, FLX_ALGO_AUTO);
}

static double ctl_combined_after(flx_ctl_h h, const float *grad)
{
    double ss = 0, xx = 0;

    for (size_t j = 0; j < h->nxs; j++) {
        double sv = grad[h->sample_pos[4 * j]], xv = h->xs[j];
        ss += sv * sv;
        xx += xv * xv;
    }
    return xx > 0 ? FLX_MIN(1.0, sqrt(ss / xx)) : -1.0;
}

/* step 2: this rank's statistics (filled in by ctl_local_stats) and the
 * timings of the sync that followed them, to the other ranks */
static void ctl_fill_timings(flx_ctl_h h, double compute_s)
{
    int nf = h->o.nfractions;

    h->agree[nf] = compute_s;
    h->agree[nf + 1] = h->have_last ? h->last.time_s : 0; /* the sync's comm time */
    h->agree[nf + 2] = h->have_last ? h->last.score : 0;  /* ... and its selection */
    h->agree[nf + 3] = h->have_last ? h->last_rank_gain : 0; /* ... and this rank's gain */
    h->agree[nf + 4] = h->have_last ? h->last_stalled_s : 0;  /* ... and this rank's stop */
    h->agree[nf + 5] = h->between_stalled_s; /* its stop since the sync before, until this one */
}

/* step 2: the agreement of this step's statistics and timings, waited
 * for or started (agree_req) */
static flx_status_t ctl_agree_start(flx_ctl_h h, double compute_s, int interval_end, int wait)
{
    flx_status_t st = FLX_OK;

    ctl_fill_timings(h, compute_s);
    if (h->N == 1)
        memcpy(h->agreed, h->agree, h->nagree * sizeof(double));
    else if (wait)
        st = flx_allreduce(h->comm, h->agree, h->agreed, h->nagree, FLX_FLOAT64, FLX_AVG,
                           FLX_ALGO_AUTO);
    else
        st = flx_iallreduce(h->comm, h->agree, h->agreed, h->nagree, FLX_FLOAT64, FLX_AVG,
                            FLX_ALGO_AUTO, &h->agree_req);
    h->agreed_step = h->step;
    h->agreed_interval_end = interval_end;
    return st;
}

/* steps 3 and 4 on the agreed vector: what the last sync took and kept,
 * and, at the end of an interval, the critical-regime test */
static void ctl_take_agreed(flx_ctl_h h)
{
    int nf = h->o.nfractions;
    const double *a = h->agreed;

    /* a sync during which some rank did not run (Ctrl-Z under flxrun stops
     * every rank; a rank stopped alone keeps the others waiting) took
     * seconds that say nothing of the network: learn nothing from its
     * times (the agreed mean is above 0 on every rank alike) */
    if (a[nf + 4] > 0) {
        flx_info(CTRL, h->rank, "flx_ctl_step %llu: a rank was stopped for %.1f s in the last "
                 "sync (mean over ranks): its times are not learnt",
                 (unsigned long long)h->step, a[nf + 4]);
    }
    /* a rank stopped while it computed (or anywhere between two steps, as
     * its stall watch saw): its compute time holds the stop, and the others
     * waited for it in the sync that followed, which timed it as network */
    if (a[nf + 5] > 0) {
        flx_info(CTRL, h->rank, "flx_ctl_step %llu: a rank was stopped for %.1f s before the "
                 "last sync (mean over ranks): neither the compute times nor the sync's are "
                 "learnt", (unsigned long long)h->step, a[nf + 5]);
    }
    ctl_learn(h, a[nf], a[nf + 1], a[nf + 2], a[nf + 4] > 0 || a[nf + 5] > 0, a[nf + 5]);
    if (h->o.mode == FLX_CTL_GRAVAC) /* GraVAC decides on a smoothed gain */
        for (int f = 0; f < nf; f++)
            h->gain_ewma[f] = ctl_ewma(h->gain_ewma[f], a[f]);
    if (h->have_last && ctl_coll_sparse(h->last.coll)) {
        /* agreed holds the statistics the last sync compressed: its gain at
         * that fraction is what the sync was predicted to keep */
        double predicted = ctl_hist_gain_of(h, &h->last);
        int f = ctl_frac_index(h, h->last.kept);

        /* the mean over ranks of what each one's top-k kept */
        ctl_ratio_learn(&h->rank_ratio[h->last.coll], f, a[nf + 3], predicted, CTL_LAMBDA);
        if (h->last_combined >= 0)
            ctl_ratio_learn(&h->gain_ratio[h->last.coll], f, h->last_combined, predicted,
                            CTL_LAMBDA);
    }
    h->last_combined = -1;
    if (h->agreed_interval_end) {
        double cur[FLX_CTL_MAX_SEGMENTS];
        int crit = 1;

        for (int s = 0; s < h->o.nsegments; s++)
            cur[s] = a[nf + CTL_AGREE_FIXED + s];
        if (h->have_prev)
            crit = ctl_critical(h->prev_norm, cur, h->o.segments, h->o.nsegments, h->o.eta,
                                &h->change);
        memcpy(h->prev_norm, cur, sizeof(cur));
        h->have_prev = 1;
        h->critical = crit || h->step < h->critical_until;
        h->agreed_interval_end = 0;
    }
}

/* A failed step leaves the controller as the step found it, so that the
 * caller may retry it: what it learnt from the agreement, the agreement's
 * step (a blocking one is run again).  What mirrors the sync object's own
 * state (its kept fraction, whether it holds residuals) stays as the sync
 * left it. */
static flx_status_t ctl_step_failed(flx_ctl_h h, const struct flx_ctl *saved, flx_status_t st)
{
    double cur_kept = h->cur_kept;
    int dirty = h->residual_dirty;

    *h = *saved;
    h->cur_kept = cur_kept;
    h->residual_dirty = dirty;
    return st;
}

flx_status_t flx_ctl_step(flx_ctl_h h, float *grad, double compute_s, flx_ctl_report_t *report_p)
{
    struct flx_ctl saved;
    ctl_cand_t cand[CTL_MAX_CANDS];
    flx_ctl_report_t r;
    int ncand = 0, best, interval_end, accum_reset, probe = 0, measure;
    double t0 = flx_time_now(), t_agree = 0, pred_dense = 0;
    uint64_t stalled0, watch0;
    flx_status_t st = FLX_OK;

    if (h == NULL || grad == NULL) {
        flx_error(CTRL, h ? h->rank : -1, "flx_ctl_step: %s",
                  h == NULL ? "NULL handle" : "NULL gradient");
        return FLX_ERR_INVALID_ARG;
    }
    if (!(compute_s >= 0 && compute_s <= CTL_MAX_COMPUTE_S)) {
        flx_error(CTRL, h->rank, "flx_ctl_step %llu: compute time %g s is not in [0, %g] s",
                  (unsigned long long)h->step, compute_s, CTL_MAX_COMPUTE_S);
        return FLX_ERR_INVALID_ARG;
    }
    memset(&r, 0, sizeof(r));
    h->between_stalled_s = (double)(flx_stall_watch_us(h->watch) - h->watch_mark) * 1e-6;
    if (h->agree_req) { /* the last step's statistics: normally here already */
        double tw = flx_time_now();
        st = flx_wait(h->agree_req);
        h->agree_req = NULL;
        t_agree = flx_time_now() - tw;
        if (st != FLX_OK)
            return st;
    }
    saved = *h;
    interval_end = (h->step + 1) % (uint64_t)h->o.interval == 0;
    accum_reset = interval_end;
    /* g + e before the sync changes either */
    ctl_local_stats(h, grad, interval_end);
    if (h->step == 0 || h->agreed_step + 1 != h->step) {
        /* nothing agreed yet: this step's own statistics, waited for */
        double tw = flx_time_now();
        st = ctl_agree_start(h, compute_s, interval_end, 1);
        t_agree += flx_time_now() - tw;
        if (st != FLX_OK)
            return ctl_step_failed(h, &saved, st);
        interval_end = 0; /* taken into account now */
    }
    ctl_take_agreed(h);
    best = ctl_decide(h, cand, &ncand, &pred_dense, &probe);
    if (h->N == 1) /* nothing to send: the choice is moot, keep everything */
        best = 0;
    r.step = h->step;
    r.critical = h->critical;
    r.kept_fraction = cand[best].kept;
    r.predicted_s = cand[best].time_s;
    r.predicted_dense_s = pred_dense;
    r.gain_estimate = cand[best].gain;
    r.bandwidth = 1.0 / h->inv_bw[cand[best].coll];
    r.compute_s = h->agreed[h->o.nfractions];
    r.agree_s = t_agree;
    r.decide_s = flx_time_now() - t0 - t_agree;
    if (h->log)
        ctl_log(h, cand, ncand, best, pred_dense, r.decide_s, r.agree_s);
    /* a dense step delivers all of it: nothing to measure */
    measure = h->N > 1 && h->step % CTL_GAIN_EVERY == CTL_GAIN_EVERY - 1 &&
              ctl_coll_sparse(cand[best].coll);
    if (measure && (st = ctl_combined_before(h, grad)) != FLX_OK)
        return ctl_step_failed(h, &saved, st);
    /* the stall watch splits this rank's time at the sync's start and end:
     * a stop before it (computing, deciding, waiting for the agreement)
     * and one inside it (in a wait, which the collectives see as well, or
     * selecting, which they do not) */
    watch0 = flx_stall_watch_us(h->watch);
    h->between_stalled_s = (double)(watch0 - h->watch_mark) * 1e-6;
    stalled0 = coll_stalled_us(h->comm);
    st = ctl_run(h, &cand[best], grad, &r);
    if (st != FLX_OK)
        return ctl_step_failed(h, &saved, st);
    ctl_commit_stats(h, accum_reset);
    r.combined_gain = measure ? ctl_combined_after(h, grad) : -1;
    /* remembered for the next step: time_s and score carry the measured
     * comm and selection times into the agreement */
    h->last = cand[best];
    h->last.time_s = r.sync.comm_s;
    h->last.score = r.sync.select_s + r.sync.decompress_s;
    h->last_rank_gain = r.sync.gain;
    h->last_combined = r.combined_gain;
    h->have_last = 1;
    h->last_probe = probe;
    h->watch_mark = flx_stall_watch_us(h->watch);
    h->last_stalled_s = (double)FLX_MAX(coll_stalled_us(h->comm) - stalled0,
                                        h->watch_mark - watch0) * 1e-6;
    /* this step's statistics and timings go out now and are taken at the
     * next step, after its gradient is computed */
    st = ctl_agree_start(h, compute_s, interval_end, 0);
    if (st != FLX_OK)
        return st;
    h->step++;
    if (report_p)
        *report_p = r;
    return FLX_OK;
}
