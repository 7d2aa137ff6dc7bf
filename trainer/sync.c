/* sync.c -- flx-train's gradient-sync policies (sync.h).
 *
 *   dense      the gradient's layers are cut into buckets of about
 *              bucket_bytes, last layer first; each bucket's flx_iallreduce
 *              starts as soon as backprop has finished its layers, so the
 *              transfer overlaps the backprop of the layers below it
 *   topk-ag, artopk, powersgd
 *              one flx_gsync over the whole gradient, static settings
 *   accordion, gravac, and flex with --local-steps off
 *              flx_ctl (controller/), one decision per step
 *   selsync    every rank steps on its own gradient; the ranks agree on
 *              the largest relative change of the smoothed gradient norm,
 *              and when it is >= delta (or max_local steps, default
 *              interval, went by without a sync) they average the weights
 *   flex       (local steps, the default) SelSync's test decides when the
 *              ranks sync and the controller how: every rank steps on its
 *              own gradient, and on a step that syncs the ranks' drift
 *              from the weights of the last sync, xref - x, goes through
 *              flx_ctl_step (dense or Top-k with error feedback, as the
 *              controller picks); every rank then sets x = xref - mean
 *              drift, the same bits everywhere (local SGD with compressed
 *              model differences, as Qsparse-local-SGD)
 */
#include "trainer/sync.h"
#include "compress/cmp.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYNC_MAX_BUCKETS 64
#define SELSYNC_SMOOTH 0.25 /* weight of the newest norm in SelSync's EWMA */
/* flex with local steps: the controller's gain floor and kept fractions.
 * What it compresses is a drift summed over the local steps since the
 * last sync, whose energy is less concentrated than one gradient's: on 4
 * Fashion-MNIST ranks the controller's logs gave AR-Topk 0.1 gains of
 * 0.29-0.39, the allgather at 0.033 0.18-0.29, AR-Topk 0.033 0.14-0.24
 * and the fractions below 0.12-0.13, and under the 0.45 of gradient steps
 * no compressed candidate qualified at most syncs (dense, 1 s each, in 14
 * of 70 syncs at 100 Mbit).  Run statically at delta 0.2, AR-Topk 0.1
 * ended at 85.91% and the allgather at 0.033 at 85.92% (dense 86.10%);
 * AR-Topk 0.033 (delta 0.1) at 84.99%.  At 100 Mbit, one run each: floor
 * 0.25 with every fraction 85.62%, floor 0.3 85.68%, {0.1, 0.033} with
 * floor 0.25 85.71%, with floor 0.3 85.80% (dense 86.22%) */
#define SYNC_LOCAL_MIN_GAIN 0.3
static const double sync_local_fractions[] = {0.1, 0.033};

typedef struct {
    int seg_lo, seg_hi;      /* segments [seg_lo, seg_hi], contiguous     */
    size_t off, len;         /* floats                                    */
    flx_request_h req;
} bucket_t;

struct sync {
    flx_comm_h comm;
    nn_t *nn;
    sync_opts_t o;
    int N, rank;
    size_t n;
    /* dense */
    bucket_t bucket[SYNC_MAX_BUCKETS];
    int nbuckets;
    flx_status_t launch_st;  /* first failure of a launch in the callback */
    /* gsync policies */
    flx_gsync_h gs;
    /* controller policies */
    flx_ctl_h ctl;
    /* selsync, and flex's local steps */
    double norm_ema;
    double norm_ref; /* norm_ema at the last synchronisation (-1: none yet) */
    int since_sync;
    int sync_now;
    double lr_ratio; /* this step's learning rate / the initial one        */
    /* flex's local steps */
    int local;
    float *xref;         /* the weights at the last sync, the same on every rank */
    double step_compute; /* this step's compute time, for the controller         */
    /* the agreement of the norm test: started at one step, taken at the next */
    flx_request_h norm_req;
    double norm_send[2], norm_agreed[2]; /* largest change, any NaN / Inf    */
    int bad_sent;                         /* this rank's gradient had NaN    */
    /* summary since the last sync_summary */
    long steps, by_coll[9];
    double kept_sum;
    long critical_steps;
};

static const char *const policy_names[POL_COUNT] = {
    "dense", "topk-ag", "artopk", "powersgd", "accordion", "gravac", "selsync", "flex"};

static const char *const coll_names[9] = {"dense-ring", "dense-tree", "dense-rd", "dense-hd",
                                          "artopk",     "topk-ag",    "powersgd", "skip",
                                          "dense"};

const char *policy_name(policy_t p) { return p < POL_COUNT ? policy_names[p] : "?"; }

int policy_parse(const char *name)
{
    for (int p = 0; p < POL_COUNT; p++)
        if (!strcmp(name, policy_names[p]))
            return p;
    return -1;
}

static int coll_index(const char *name)
{
    for (int i = 0; i < 9; i++)
        if (!strcmp(name, coll_names[i]))
            return i;
    return 8;
}

static const char *dense_name(flx_algo_t algo)
{
    switch (algo) {
    case FLX_ALGO_RING: return "dense-ring";
    case FLX_ALGO_TREE: return "dense-tree";
    case FLX_ALGO_RD: return "dense-rd";
    case FLX_ALGO_HD: return "dense-hd";
    default: return "dense";
    }
}

/* buckets of whole segments, last segment first; a bucket closes when it
 * holds bucket_bytes (the last one takes what is left over when there are
 * more segments than buckets) */
static void sync_buckets(sync_t *s)
{
    int nseg = nn_nsegments(s->nn), hi = nseg - 1;
    size_t bytes = 0;

    s->nbuckets = 0;
    for (int seg = nseg - 1; seg >= 0; seg--) {
        nn_segment_t lo = nn_segment(s->nn, seg), top = nn_segment(s->nn, hi);
        bucket_t *b;

        bytes += lo.len * sizeof(float);
        if (seg > 0 && (bytes < s->o.bucket_bytes || s->nbuckets == SYNC_MAX_BUCKETS - 1))
            continue;
        b = &s->bucket[s->nbuckets++];
        b->seg_lo = seg;
        b->seg_hi = hi;
        b->off = lo.off;
        b->len = top.off + top.len - lo.off;
        b->req = NULL;
        hi = seg - 1;
        bytes = 0;
    }
}

flx_status_t sync_create(flx_comm_h comm, nn_t *nn, const sync_opts_t *o, sync_t **sync_p)
{
    sync_t *s = calloc(1, sizeof(*s));
    flx_status_t st = FLX_OK;

    *sync_p = NULL;
    if (s == NULL)
        return FLX_ERR_NO_MEMORY;
    s->comm = comm;
    s->nn = nn;
    s->o = *o;
    s->N = flx_comm_size(comm);
    s->rank = flx_comm_rank(comm);
    s->n = nn_nparams(nn);
    s->local = o->policy == POL_FLEX && o->local_steps;
    s->lr_ratio = 1;
    switch (o->policy) {
    case POL_DENSE:
        sync_buckets(s);
        break;
    case POL_TOPK_AG:
    case POL_ARTOPK:
    case POL_POWERSGD: {
        flx_gsync_opts_t go;

        flx_gsync_opts_default(&go);
        go.field_mask = FLX_GSYNC_OPT_METHOD | FLX_GSYNC_OPT_KEPT_FRACTION;
        go.kept_fraction = o->kept;
        if (o->policy == POL_POWERSGD) {
            go.method = FLX_COMPRESS_POWERSGD;
            go.field_mask |= FLX_GSYNC_OPT_POWERSGD_RANK;
            go.powersgd_rank = o->psgd_rank;
        } else {
            go.method = FLX_COMPRESS_TOPK;
            go.field_mask |= FLX_GSYNC_OPT_COLLECTIVE | FLX_GSYNC_OPT_LEADER;
            go.collective = o->policy == POL_TOPK_AG ? FLX_GSYNC_COLL_ALLGATHER
                                                     : FLX_GSYNC_COLL_ARTOPK;
            go.leader = o->leader;
        }
        st = flx_gsync_create(comm, s->n, &go, &s->gs);
        break;
    }
    case POL_ACCORDION:
    case POL_GRAVAC:
    case POL_FLEX: {
        flx_ctl_opts_t co;
        int nseg = nn_nsegments(nn);

        flx_ctl_opts_default(&co);
        co.field_mask = FLX_CTL_OPT_MODE | FLX_CTL_OPT_ETA | FLX_CTL_OPT_INTERVAL |
                        FLX_CTL_OPT_SEGMENTS;
        co.mode = o->policy == POL_FLEX        ? FLX_CTL_FLEX
                  : o->policy == POL_ACCORDION ? FLX_CTL_ACCORDION
                                               : FLX_CTL_GRAVAC;
        if (o->weight >= 0) { /* else the controller's default */
            co.field_mask |= FLX_CTL_OPT_WEIGHT;
            co.weight = o->weight;
        }
        co.eta = o->eta;
        co.interval = o->interval;
        if (o->min_gain >= 0) {
            co.field_mask |= FLX_CTL_OPT_MIN_GAIN;
            co.min_gain = o->min_gain;
        } else if (s->local) {
            co.field_mask |= FLX_CTL_OPT_MIN_GAIN;
            co.min_gain = SYNC_LOCAL_MIN_GAIN;
        }
        if (s->local) {
            co.field_mask |= FLX_CTL_OPT_FRACTIONS;
            co.nfractions = (int)(sizeof(sync_local_fractions) / sizeof(sync_local_fractions[0]));
            memcpy(co.fractions, sync_local_fractions, sizeof(sync_local_fractions));
        }
        if (o->ctl_log) {
            co.field_mask |= FLX_CTL_OPT_LOG_PATH;
            co.log_path = o->ctl_log;
        }
        nseg = FLX_MIN(nseg, FLX_CTL_MAX_SEGMENTS); /* layers past it join the last one */
        co.nsegments = nseg;
        for (int i = 0; i < nseg; i++)
            co.segments[i] = nn_segment(nn, i).len;
        for (int i = nseg; i < nn_nsegments(nn); i++)
            co.segments[nseg - 1] += nn_segment(nn, i).len;
        if (s->local) {
            s->norm_ema = -1;
            s->norm_ref = -1;
            s->xref = malloc(s->n * sizeof(float));
            if (s->xref == NULL)
                flx_error(TRAIN, s->rank, "flex: no memory for the %zu weights of the last "
                          "sync (local steps)", s->n);
            else
                memcpy(s->xref, nn_params(nn), s->n * sizeof(float));
        }
        st = flx_ctl_create(comm, s->n, &co, &s->ctl);
        if (st == FLX_OK && s->local) { /* a rank without memory stops every rank */
            int64_t v = s->xref == NULL;
            st = flx_allreduce(comm, &v, &v, 1, FLX_INT64, FLX_MAX, FLX_ALGO_AUTO);
            if (st == FLX_OK && v)
                st = FLX_ERR_NO_MEMORY;
        }
        break;
    }
    case POL_SELSYNC:
        s->norm_ema = -1;
        s->norm_ref = -1;
        break;
    default:
        st = FLX_ERR_INVALID_ARG;
    }
    if (st != FLX_OK) {
        sync_destroy(s);
        return st;
    }
    *sync_p = s;
    return FLX_OK;
}

flx_status_t sync_destroy(sync_t *s)
{
    flx_status_t st;

    if (s == NULL)
        return FLX_OK;
    for (int b = 0; b < s->nbuckets; b++)
        if (s->bucket[b].req)
            flx_wait(s->bucket[b].req);
    /* the norm test's last agreement, if a failure came before sync_finish:
     * ended, what it says left unsaid (the failure's own line said why) */
    if (s->norm_req)
        flx_wait(s->norm_req);
    st = flx_gsync_destroy(s->gs); /* a failed last index exchange fails too */
    {
        flx_status_t s2 = flx_ctl_destroy(s->ctl); /* its decision log, if any, closed */
        if (st == FLX_OK)
            st = s2;
    }
    free(s->xref);
    free(s);
    return st;
}

void sync_grad_ready(void *ctx, int seg)
{
    sync_t *s = ctx;
    float *g = nn_grads(s->nn);

    if (s->o.policy != POL_DENSE || s->N == 1)
        return;
    for (int b = 0; b < s->nbuckets; b++) {
        bucket_t *bk = &s->bucket[b];
        flx_status_t st;

        if (bk->seg_lo != seg || bk->req != NULL)
            continue;
        st = flx_iallreduce(s->comm, g + bk->off, g + bk->off, bk->len, FLX_FLOAT32, FLX_AVG,
                            s->o.algo, &bk->req);
        if (st != FLX_OK && s->launch_st == FLX_OK)
            s->launch_st = st;
    }
}

static void sync_count(sync_t *s, const sync_report_t *r)
{
    s->steps++;
    s->by_coll[coll_index(r->collective)]++;
    s->kept_sum += r->kept;
    s->critical_steps += r->critical;
}

static flx_status_t sync_dense(sync_t *s, sync_report_t *r)
{
    float *g = nn_grads(s->nn);
    double t0 = flx_time_now();
    flx_algo_t algo = FLX_ALGO_AUTO;
    flx_status_t st = s->launch_st;

    r->collective = "dense";
    r->kept = 1;
    for (int b = 0; b < s->nbuckets; b++) {
        bucket_t *bk = &s->bucket[b];
        flx_algo_t a = s->o.algo != FLX_ALGO_AUTO ? s->o.algo
                                                  : flx_allreduce_algo(s->comm, bk->len,
                                                                       FLX_FLOAT32);

        if (s->N > 1 && bk->req == NULL && st == FLX_OK) /* not started by a callback */
            st = flx_iallreduce(s->comm, g + bk->off, g + bk->off, bk->len, FLX_FLOAT32,
                                FLX_AVG, s->o.algo, &bk->req);
        if (bk->req) {
            flx_status_t w = flx_wait(bk->req);
            if (st == FLX_OK)
                st = w;
            bk->req = NULL;
        }
        if (b == 0 || bk->len > s->bucket[0].len)
            algo = a;
        r->bytes += cmp_bytes_allreduce(a, s->N, s->rank, 4.0 * (double)bk->len);
    }
    s->launch_st = FLX_OK;
    r->collective = s->N > 1 ? dense_name(algo) : "dense";
    r->comm_s = flx_time_now() - t0;
    r->gain = 1;
    if (st == FLX_OK) { /* the mean is the same bits on every rank: all stop alike */
        size_t i = flx_first_nonfinite(g, s->n);
        if (i < s->n) {
            flx_error(TRAIN, s->rank, "dense: the averaged gradient holds NaN or Inf at "
                      "parameter %zu (some rank's gradient did, or the sum overflowed): every "
                      "rank stops", i);
            st = FLX_ERR_INVALID_ARG;
        }
    }
    return st;
}

/* the relative change of the smoothed norm since the last sync (from one
 * step to the next it moves by only SELSYNC_SMOOTH times the raw change,
 * so a falling norm could never reach delta); 0 for a bad gradient, inf
 * before the first sync */
static double sync_norm_change(const sync_t *s, int bad)
{
    return bad ? 0 : s->norm_ref > 0 ? fabs(s->norm_ema - s->norm_ref) / s->norm_ref : INFINITY;
}

/* the norm change that syncs at this step's learning rate: --delta x
 * (lr / lr0)^--delta-decay (AdaComm: more frequent averaging as the rate
 * decays lowers the error floor that local steps leave) */
static double sync_delta(const sync_t *s)
{
    return s->o.delta * pow(s->lr_ratio, s->o.delta_decay);
}

/* SelSync's test, for selsync and flex's local steps: whether this step
 * syncs (s->sync_now, the same on every rank).  The ranks agree on the
 * largest change with a non-blocking allreduce started after each step's
 * update (sync_norm_update) and taken here, at the next step, so a step
 * decides on the change one step old (the first step, with none, syncs):
 * a blocking one made every step wait for the slowest rank, 4.9 ms a step
 * on 4 ranks sharing 2 cores.  A rank whose gradient held NaN or Inf said
 * so in the agreement, and every rank stops here. */
static flx_status_t sync_norm_test(sync_t *s, sync_report_t *r)
{
    double a[2] = {INFINITY, 0}, t0 = flx_time_now();
    double delta = sync_delta(s);
    int max_local = s->o.max_local > 0 ? s->o.max_local : s->o.interval;
    flx_status_t st = FLX_OK;

    if (s->norm_req) { /* the last step's, normally here already */
        st = flx_wait(s->norm_req);
        s->norm_req = NULL;
        a[0] = s->norm_agreed[0];
        a[1] = s->norm_agreed[1];
    }
    r->agree_s = flx_time_now() - t0;
    r->change = a[0];
    if (st == FLX_OK && a[1]) {
        flx_error(TRAIN, s->rank, "%s: %s gradient holds NaN or Inf: every rank stops",
                  policy_name(s->o.policy), s->bad_sent ? "this rank's" : "another rank's");
        st = FLX_ERR_INVALID_ARG;
    }
    if (st != FLX_OK)
        return st;
    s->sync_now = s->N > 1 && (a[0] >= delta || s->since_sync + 1 >= max_local);
    r->synced = s->sync_now;
    r->collective = s->sync_now ? "dense-ring" : "skip"; /* flex: set by the sync */
    r->kept = s->sync_now ? 1 : 0;
    r->gain = 1;
    return FLX_OK;
}

/* The norm test's part after the update: this step's gradient norm (the
 * caller summed its squares in the update's pass over the gradient, which
 * saves a pass of its own: 0.3 ms a step for 1.9 M parameters) into the
 * smoothed norm, and its change since the last sync to the other ranks,
 * taken at the next step. */
static flx_status_t sync_norm_update(sync_t *s, double grad_sq, int bad, sync_report_t *r)
{
    double norm = sqrt(grad_sq), prev = s->norm_ema, t0 = flx_time_now();
    flx_status_t st = FLX_OK;

    bad = bad || !isfinite(norm); /* NaN would not compare alike on every rank */
    if (bad && s->N == 1) { /* no agreement to carry it: alone, it stops here */
        flx_error(TRAIN, s->rank, "%s: this rank's gradient holds NaN or Inf: it stops",
                  policy_name(s->o.policy));
        return FLX_ERR_INVALID_ARG;
    }
    if (!bad)
        s->norm_ema = prev < 0 ? norm : (1 - SELSYNC_SMOOTH) * prev + SELSYNC_SMOOTH * norm;
    if (s->sync_now)
        s->norm_ref = s->norm_ema;
    r->decide_s += flx_time_now() - t0;
    t0 = flx_time_now();
    if (s->N > 1) { /* the start of the agreement counts as agreeing */
        s->norm_send[0] = sync_norm_change(s, bad);
        s->norm_send[1] = bad;
        s->bad_sent = bad;
        st = flx_iallreduce(s->comm, s->norm_send, s->norm_agreed, 2, FLX_FLOAT64, FLX_MAX,
                            FLX_ALGO_AUTO, &s->norm_req);
    }
    r->agree_s += flx_time_now() - t0;
    return st;
}

static void sync_ctl_report(sync_report_t *r, const flx_ctl_report_t *c)
{
    r->collective = c->collective == FLX_GSYNC_COLL_ALLREDUCE ? dense_name(c->algo)
                    : c->collective == FLX_GSYNC_COLL_ALLGATHER ? "topk-ag"
                                                                : "artopk";
    r->kept = c->kept_fraction;
    r->bytes = (double)c->sync.bytes_sent;
    r->select_s = c->sync.select_s + c->sync.decompress_s;
    r->comm_s = c->sync.comm_s;
    r->decide_s += c->decide_s;
    r->agree_s += c->agree_s;
    r->gain = c->sync.gain;
    r->critical = c->critical;
}

/* flex, a step that syncs (after every rank's own update): the drift from
 * the last sync's weights through the controller, then x = xref - mean */
static flx_status_t sync_drift(sync_t *s, sync_report_t *r)
{
    float *x = nn_params(s->nn), *d = nn_grads(s->nn); /* the gradient is spent */
    flx_ctl_report_t c;
    flx_status_t st;

    for (size_t i = 0; i < s->n; i++)
        d[i] = s->xref[i] - x[i];
    if (flx_first_nonfinite(d, s->n) < s->n) /* the controller fails every rank alike */
        flx_error(TRAIN, s->rank, "flex: this rank's weights hold NaN or Inf (%s): every rank "
                  "stops", s->bad_sent ? "this rank's gradient holds NaN or Inf, and its "
                  "finite part overflowed them" : "the update overflowed since the last sync");
    /* scored as a step: this step's compute, the sync's selection and comm */
    st = flx_ctl_step(s->ctl, d, s->step_compute, &c);
    if (st != FLX_OK)
        return st;
    sync_ctl_report(r, &c);
    for (size_t i = 0; i < s->n; i++)
        x[i] = s->xref[i] -= d[i];
    return FLX_OK;
}

flx_status_t sync_gradients(sync_t *s, double compute_s, sync_report_t *r)
{
    flx_status_t st;

    memset(r, 0, sizeof(*r));
    r->synced = 1;
    r->change = -1;
    switch (s->o.policy) {
    case POL_DENSE:
        st = sync_dense(s, r);
        break;
    case POL_TOPK_AG:
    case POL_ARTOPK:
    case POL_POWERSGD: {
        flx_gsync_report_t g;

        st = flx_gsync_step(s->gs, nn_grads(s->nn), &g);
        r->collective = s->o.policy == POL_POWERSGD ? "powersgd"
                        : g.collective == FLX_GSYNC_COLL_ALLGATHER ? "topk-ag"
                                                                  : "artopk";
        r->kept = s->o.policy == POL_POWERSGD ? (double)g.bytes_sent / 4.0 / (double)s->n
                                              : (double)g.k / (double)s->n;
        r->bytes = (double)g.bytes_sent;
        r->select_s = g.select_s + g.decompress_s;
        r->comm_s = g.comm_s;
        r->gain = g.gain;
        break;
    }
    case POL_FLEX:
        if (s->local) { /* the sync, if any, after the update */
            s->step_compute = compute_s;
            st = sync_norm_test(s, r);
            break;
        }
        /* fall through */
    case POL_ACCORDION:
    case POL_GRAVAC: {
        flx_ctl_report_t c;

        st = flx_ctl_step(s->ctl, nn_grads(s->nn), compute_s, &c);
        sync_ctl_report(r, &c);
        break;
    }
    case POL_SELSYNC:
        st = sync_norm_test(s, r);
        break;
    default:
        st = FLX_ERR_INVALID_ARG;
    }
    if (st == FLX_OK && s->o.policy != POL_SELSYNC && !s->local)
        sync_count(s, r);
    return st;
}

flx_status_t sync_after_update(sync_t *s, double grad_sq, int grad_bad, sync_report_t *r)
{
    flx_status_t st;
    double t0;

    if (s->o.policy != POL_SELSYNC && !s->local)
        return FLX_OK;
    st = sync_norm_update(s, grad_sq, grad_bad, r);
    if (st != FLX_OK)
        return st;
    if (!s->sync_now) {
        s->since_sync++;
        sync_count(s, r);
        return FLX_OK;
    }
    if (s->local) {
        st = sync_drift(s, r);
        if (st == FLX_OK) {
            s->since_sync = 0;
            sync_count(s, r);
        }
        return st;
    }
    t0 = flx_time_now();
    st = flx_allreduce(s->comm, nn_params(s->nn), nn_params(s->nn), s->n, FLX_FLOAT32, FLX_AVG,
                       FLX_ALGO_RING);
    r->comm_s = flx_time_now() - t0;
    r->bytes = cmp_bytes_allreduce(FLX_ALGO_RING, s->N, s->rank, 4.0 * (double)s->n);
    s->since_sync = 0;
    sync_count(s, r);
    return st;
}

flx_status_t sync_finish(sync_t *s)
{
    flx_status_t st;

    if (s->norm_req == NULL)
        return FLX_OK;
    st = flx_wait(s->norm_req);
    s->norm_req = NULL;
    if (st == FLX_OK && s->norm_agreed[1]) {
        flx_error(TRAIN, s->rank, "%s: %s gradient held NaN or Inf at the last step: every "
                  "rank stops", policy_name(s->o.policy),
                  s->bad_sent ? "this rank's" : "another rank's");
        st = FLX_ERR_INVALID_ARG;
    }
    return st;
}

int sync_local_models(const sync_t *s)
{
    return s->o.policy == POL_SELSYNC || s->local;
}

int sync_policy_topk(policy_t p)
{
    return p == POL_TOPK_AG || p == POL_ARTOPK || p == POL_ACCORDION || p == POL_GRAVAC ||
           p == POL_FLEX;
}

void sync_mask_velocity(sync_t *s, const sync_report_t *r, float *velocity)
{
    const float *e;

    if (!r->synced || r->kept >= 1 || s->local) /* local: the velocity stays each rank's */
        return;
    e = s->gs ? flx_gsync_residual(s->gs) : flx_ctl_residual(s->ctl);
    if (e == NULL)
        return;
    for (size_t i = 0; i < s->n; i++)
        if (e[i] == 0.0f)
            velocity[i] = 0.0f;
}

void sync_set_lr_ratio(sync_t *s, double ratio) { s->lr_ratio = ratio; }

void sync_lr_changed(sync_t *s)
{
    if (s->ctl)
        flx_ctl_lr_changed(s->ctl);
}

void sync_summary(sync_t *s, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = 0;
    if (s->steps == 0)
        return;
    for (int i = 0; i < 9 && used < len; i++)
        if (s->by_coll[i])
            used += (size_t)snprintf(buf + used, len - used, "%s%s %.0f%%", used ? ", " : "",
                                     coll_names[i], 100.0 * (double)s->by_coll[i] / (double)s->steps);
    if (used < len)
        used += (size_t)snprintf(buf + used, len - used, "; mean kept %.3g", s->kept_sum / (double)s->steps);
    if (used < len && (s->o.policy == POL_FLEX || s->o.policy == POL_ACCORDION)) {
        long decided = s->steps - s->by_coll[7]; /* local steps: of the syncs */
        used += (size_t)snprintf(buf + used, len - used, "; critical %.0f%%%s",
                                 decided ? 100.0 * (double)s->critical_steps / (double)decided : 0.0,
                                 s->local ? " of the syncs" : "");
    }
    if (used < len && (s->o.policy == POL_SELSYNC || s->local) && s->o.delta_decay > 0 &&
        s->lr_ratio < 1) /* only where the rate, and with it the delta, has decayed */
        snprintf(buf + used, len - used, "; delta now %.3g", sync_delta(s));
    memset(s->by_coll, 0, sizeof(s->by_coll));
    s->steps = 0;
    s->kept_sum = 0;
    s->critical_steps = 0;
}
