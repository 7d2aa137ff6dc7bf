/* policy.c -- the controller's pure functions (ctl.h): costs, gains,
 * critical regime, bandwidth estimate, choice. */
#include "controller/ctl.h"
#include "collectives/coll.h"
#include "compress/cmp.h"
#include "common/util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* the pipeline chunk the dense tree is modelled with (FLX_CHUNK_SIZE's default) */
#define CTL_TREE_CHUNK (512.0 * 1024.0)

const char *ctl_coll_name(ctl_coll_t coll)
{
    switch (coll) {
    case CTL_DENSE_RING: return "dense-ring";
    case CTL_DENSE_TREE: return "dense-tree";
    case CTL_ARTOPK: return "artopk";
    case CTL_TOPK_AG: return "topk-ag";
    default: return "?";
    }
}

/* time of one collective for the given alpha and B */
static double ctl_coll_time(ctl_coll_t coll, int N, double m, double c, double alpha, double B)
{
    switch (coll) {
    case CTL_DENSE_RING:
        return model_allreduce_time(FLX_ALGO_RING, N, 4.0 * m, alpha, B, CTL_TREE_CHUNK);
    case CTL_DENSE_TREE:
        return model_allreduce_time(FLX_ALGO_TREE, N, 4.0 * m, alpha, B, CTL_TREE_CHUNK);
    case CTL_ARTOPK: /* the default index mode: indices ride with the values */
        return cmp_model_ar_pipe(N, m, c, alpha, B);
    case CTL_TOPK_AG:
        return cmp_model_ag(N, m, c, alpha, B);
    default:
        return INFINITY;
    }
}

void ctl_coll_terms(ctl_coll_t coll, int N, double m, double c, double *a_p, double *b_p)
{
    /* every formula is a alpha + b / B: read a at (1, inf) and b at (0, 1) */
    *a_p = ctl_coll_time(coll, N, m, c, 1.0, INFINITY);
    *b_p = ctl_coll_time(coll, N, m, c, 0.0, 1.0);
}

void ctl_hist_reset(ctl_hist_t *h) { memset(h, 0, sizeof(*h)); }

/* bin of |x|: 8 bins per octave (the float's exponent and its 3 top
 * mantissa bits) over 2^-40 .. 2^24, the largest values in the highest
 * bin; -1 for 0 */
static int ctl_hist_bin(float x)
{
    uint32_t bits;
    int b;

    memcpy(&bits, &x, sizeof(bits));
    bits &= 0x7fffffffu;
    if (bits == 0)
        return -1;
    b = (int)(bits >> 20) - (127 - 40) * 8;
    return b < 0 ? 0 : b >= CTL_HIST_BINS ? CTL_HIST_BINS - 1 : b;
}

void ctl_hist_add(ctl_hist_t *h, float x)
{
    int b = ctl_hist_bin(x);
    double e = (double)x * (double)x;

    h->total_count += 1.0;
    if (b < 0 || !isfinite(e))
        return;
    h->energy[b] += e;
    h->count[b] += 1.0;
    h->total_energy += e;
}

double ctl_hist_gain(const ctl_hist_t *h, double c)
{
    double want = c * h->total_count, got = 0, energy = 0;

    if (!(h->total_energy > 0))
        return 1.0;
    for (int b = CTL_HIST_BINS - 1; b >= 0 && got < want; b--) {
        double take = FLX_MIN(h->count[b], want - got);

        if (h->count[b] <= 0)
            continue;
        energy += h->energy[b] * take / h->count[b];
        got += take;
    }
    return sqrt(FLX_MIN(1.0, energy / h->total_energy));
}

void ctl_share_change(double inv_bw[CTL_COLL_COUNT], ctl_coll_t c, double before, double lo,
                      double hi)
{
    double delta = inv_bw[c] - before;

    for (int o = 0; o < CTL_COLL_COUNT; o++) {
        double d = delta, cap;

        if (o == (int)c || ctl_coll_sparse(o) != ctl_coll_sparse((int)c))
            continue;
        if (before > 0) { /* no larger a ratio than c's own */
            cap = fabs(delta) / before * inv_bw[o];
            d = delta > 0 ? FLX_MIN(d, cap) : FLX_MAX(d, -cap);
        }
        inv_bw[o] = FLX_MIN(hi, FLX_MAX(lo, inv_bw[o] + d));
    }
}

int ctl_critical(const double *prev, const double *cur, const size_t *len, int nseg,
                 double eta, double *change_p)
{
    double sum = 0, weight = 0;

    for (int s = 0; s < nseg; s++) {
        double r = prev[s] > 0 ? fabs(prev[s] - cur[s]) / prev[s] : cur[s] > 0 ? 1.0 : 0.0;

        sum += (double)len[s] * r;
        weight += (double)len[s];
    }
    if (change_p)
        *change_p = weight > 0 ? sum / weight : 0.0;
    return weight > 0 && sum / weight >= eta;
}


static int ctl_allowed(const ctl_cand_t *c, double min_kept, double min_gain)
{
    if (c->kept >= 1.0)
        return 1;
    return c->kept >= min_kept && c->gain >= min_gain && c->time_s > 0 && c->gain > 0;
}

/* is a better than b: higher score, then larger kept, then faster */
static int ctl_better(const ctl_cand_t *a, const ctl_cand_t *b)
{
    if (a->score != b->score)
        return a->score > b->score;
    if (a->kept != b->kept)
        return a->kept > b->kept;
    return a->time_s < b->time_s;
}

int ctl_choose(ctl_cand_t *cand, int n, double weight, double min_kept, double min_gain)
{
    double t_min = INFINITY;
    int best = -1;

    for (int i = 0; i < n; i++)
        if (ctl_allowed(&cand[i], min_kept, min_gain) && cand[i].time_s < t_min)
            t_min = cand[i].time_s;
    for (int i = 0; i < n; i++) {
        if (!ctl_allowed(&cand[i], min_kept, min_gain)) {
            cand[i].score = -INFINITY;
            continue;
        }
        cand[i].score = (1.0 - weight) * 2.0 * log(cand[i].gain); /* ln delta = 2 ln gain */
        if (t_min > 0)
            cand[i].score += weight * log(t_min / cand[i].time_s);
        if (best < 0 || ctl_better(&cand[i], &cand[best]))
            best = i;
    }
    return best;
}

double ctl_select_update(double est, double hist[3], int runs, double x, double lambda)
{
    double lo, hi, med;

    if (runs < 1)
        return est;
    hist[(runs - 1) % 3] = x;
    if (runs <= CTL_SELECT_WARMUP)
        return est;
    if (runs == CTL_SELECT_WARMUP + 1)
        return x;
    lo = FLX_MIN(hist[0], FLX_MIN(hist[1], hist[2]));
    hi = FLX_MAX(hist[0], FLX_MAX(hist[1], hist[2]));
    med = hist[0] + hist[1] + hist[2] - lo - hi;
    return (1 - lambda) * est + lambda * med;
}

void ctl_ratio_init(ctl_ratio_t *r)
{
    r->coll = 1.0;
    for (int f = 0; f < FLX_CTL_MAX_FRACTIONS; f++)
        r->frac[f] = -1.0;
}

double ctl_ratio_get(const ctl_ratio_t *r, int f)
{
    return f >= 0 && f < FLX_CTL_MAX_FRACTIONS && r->frac[f] >= 0 ? r->frac[f] : r->coll;
}

void ctl_ratio_learn(ctl_ratio_t *r, int f, double measured, double predicted, double lambda)
{
    double x, prior;

    if (!(predicted > 0) || f < 0 || f >= FLX_CTL_MAX_FRACTIONS)
        return;
    x = measured / predicted;
    prior = ctl_ratio_get(r, f);
    r->frac[f] = FLX_MIN(4.0, (1 - lambda) * prior + lambda * x);
    r->coll = FLX_MIN(4.0, (1 - lambda) * r->coll + lambda * x);
}

int ctl_hysteresis(const ctl_cand_t *cand, int n, int best, int cur, double margin)
{
    if (cur < 0 || cur >= n || best < 0 || !isfinite(cand[cur].score))
        return best;
    return cand[best].score > cand[cur].score + margin ? best : cur;
}

int ctl_probe(const ctl_cand_t *cand, int n, int best, const uint64_t *seen, uint64_t step,
              uint64_t age, double window)
{
    int pick = best;

    if (best < 0)
        return best;
    for (int i = 0; i < n; i++) {
        uint64_t last = seen[cand[i].coll];
        int stale = last == 0 ? step > age : step - (last - 1) > age;

        if (!stale || cand[i].coll == cand[best].coll || !isfinite(cand[i].score) ||
            cand[i].score < cand[best].score - window)
            continue;
        if (pick == best || cand[i].score > cand[pick].score)
            pick = i;
    }
    return pick;
}

int ctl_choose_gravac(ctl_cand_t *cand, int n, double min_kept, double min_gain)
{
    int best = -1;

    for (int i = 0; i < n; i++) {
        if (!ctl_allowed(&cand[i], min_kept, min_gain)) {
            cand[i].score = -INFINITY;
            continue;
        }
        cand[i].score = cand[i].time_s > 0 ? log(cand[i].gain / cand[i].time_s) : log(cand[i].gain);
        if (best < 0 || ctl_better(&cand[i], &cand[best]))
            best = i;
    }
    return best;
}
