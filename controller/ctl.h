/* ctl.h -- the controller's pure parts: candidate costs, the gain of every
 * kept fraction from one sample of |g + e|, the critical-regime test, the
 * live bandwidth estimate and the choice.  No communication, no clocks:
 * every function's answer depends on its arguments only, which is what
 * makes the same decision on every rank (the inputs are agreed first). */
#ifndef FLX_CONTROLLER_CTL_H
#define FLX_CONTROLLER_CTL_H

#include "flexcoll.h"

#include <stddef.h>
#include <stdint.h>

/* The collectives a candidate can use. */
typedef enum {
    CTL_DENSE_RING = 0,
    CTL_DENSE_TREE,
    CTL_ARTOPK,  /* AR-Topk: one index set, values by allreduce     */
    CTL_TOPK_AG, /* every rank's (value, index) pairs allgathered   */
    CTL_COLL_COUNT
} ctl_coll_t;

const char *ctl_coll_name(ctl_coll_t coll);
/* AR-Topk or the sparse allgather (not a dense allreduce) */
static inline int ctl_coll_sparse(int coll) { return coll == CTL_ARTOPK || coll == CTL_TOPK_AG; }

/* One candidate (collective x kept fraction) with its predictions. */
typedef struct {
    ctl_coll_t coll;
    double kept;     /* kept fraction; 1 for dense                  */
    double time_s;   /* predicted step time: compute + select + comm */
    double gain;     /* predicted ||C(g + e)|| / ||g + e||, 1 dense */
    double score;    /* filled by ctl_choose (-inf: not allowed)    */
} ctl_cand_t;

/* Latency count a and byte term b of a collective, so that its time is
 * a alpha + b / B: N ranks, m floats, kept fraction c (1 for dense).
 * DESIGN.md's formulas (compress/model.c for the sparse ones). */
void ctl_coll_terms(ctl_coll_t coll, int N, double m, double c, double *a_p, double *b_p);

/* The live model's 1/B per collective: collective c's went from before to
 * inv_bw[c].  The change is the link's, in part, so it moves the other
 * collective of c's family (dense: ring and tree; sparse: AR-Topk and the
 * allgather) by the same seconds per byte, by no larger a ratio than c's
 * own, within [lo, hi].  Not the other family: a sparse sync sends about
 * 1/(2c) fewer bytes than a dense one, so its noise (skew, the selection
 * pipeline's CPU) per byte, added to dense's, made dense 10-20x too slow
 * (0.09-0.29 s predicted against 0.04 s on 2 ranks) and flex never tried
 * it again.  A family whose estimate is stale is only optimistic or
 * pessimistic by its own history, and ctl_probe (flex, GraVAC) measures
 * it again. */
void ctl_share_change(double inv_bw[CTL_COLL_COUNT], ctl_coll_t c, double before, double lo,
                      double hi);

/* Histogram of |x| in 1/8-octave bins, for the gain of every kept
 * fraction at once from one pass over a sample. */
#define CTL_HIST_BINS 512
typedef struct {
    double energy[CTL_HIST_BINS]; /* sum of x^2 per bin   */
    double count[CTL_HIST_BINS];
    double total_energy;
    double total_count;
} ctl_hist_t;

void ctl_hist_reset(ctl_hist_t *h);
void ctl_hist_add(ctl_hist_t *h, float x);
/* sqrt(energy of the largest fraction c of the values / all energy), the
 * values of the bin where the count ends shared pro rata; 1 when all the
 * values are 0. */
double ctl_hist_gain(const ctl_hist_t *h, double c);

/* Accordion's test on per-layer norms of the gradient accumulated over an
 * interval: the parameter-weighted mean over layers of |prev - cur| / prev
 * is >= eta.  A layer with prev = 0 counts as changed (ratio 1) if its
 * cur is not 0, as unchanged (0) if it is 0 too: a layer that gets no
 * gradient (frozen, or unused by the data) must not keep the regime
 * critical for good. */
int ctl_critical(const double *prev, const double *cur, const size_t *len, int nseg,
                 double eta, double *change_p);

/* The choice among cand[0, n):
 *   allowed:  kept >= min_kept and gain >= min_gain (dense always is);
 *   score:    weight ln(T_min / T) + (1 - weight) ln(delta), T_min the
 *             fastest allowed candidate's time, delta = gain^2 the share
 *             of the energy of g + e the step delivers (error feedback's
 *             contraction: with ||x - C(x)||^2 <= (1 - delta) ||x||^2 the
 *             progress of a step scales with delta), so weight 0.5 ranks
 *             by delta per second of step time;
 *   winner:   the highest score; ties go to the larger kept fraction,
 *             then to the faster.
 * A maximiser of a weighted sum of two increasing objectives is Pareto
 * optimal, so the winner is on the (time, gain) front; weight 1 is
 * "fastest", weight 0 "keep everything".  Fills every score; returns the
 * winner's index (-1 only for n = 0). */
int ctl_choose(ctl_cand_t *cand, int n, double weight, double min_kept, double min_gain);

/* A sparse collective's selection-cost estimate after its measurement x
 * (runs: how many runs it has had, this one included; hist: its last
 * three measurements, updated here).  The first CTL_SELECT_WARMUP runs are
 * a warm-up and leave the estimate as it was (unknown: the candidate is
 * not charged for selection, so it is tried): the approximate selection
 * has no threshold from an earlier step yet and its buffers are touched
 * for the first time (70.6 and 63.0 ms against 2-10 ms from the third run
 * on, in a Fashion-MNIST run, which kept flex off AR-Topk for 100 steps).
 * The next run sets it; after that, an EWMA (lambda) of the median of the
 * last three, so one stalled step does not set the estimate for the steps
 * in which the collective does not run. */
#define CTL_SELECT_WARMUP 2
double ctl_select_update(double est, double hist[3], int runs, double x, double lambda);

/* A learnt ratio of measured to predicted gain, per collective and per
 * kept fraction: how much of each rank's energy AR-Topk's leader indices
 * keep, or how far the allgather's index sets overlap, depends on the
 * fraction (one ratio per collective let AR-Topk 0.1's measurements lift
 * 0.033 over the gain floor, and the choice flipped between the two).  A
 * fraction not measured yet borrows the collective's ratio, which every
 * fraction's measurements move; a measurement moves both (EWMA lambda,
 * from the borrowed value for a first one), each at most 4. */
typedef struct {
    double coll;                        /* from every fraction             */
    double frac[FLX_CTL_MAX_FRACTIONS]; /* < 0: not measured yet           */
} ctl_ratio_t;
void ctl_ratio_init(ctl_ratio_t *r);
double ctl_ratio_get(const ctl_ratio_t *r, int f);
/* nothing learnt for predicted <= 0 or f outside [0, FLX_CTL_MAX_FRACTIONS) */
void ctl_ratio_learn(ctl_ratio_t *r, int f, double measured, double predicted, double lambda);

/* Hysteresis: keep the current candidate (index cur, -1: none) unless the
 * winner's score beats it by more than margin; returns the index to use. */
int ctl_hysteresis(const ctl_cand_t *cand, int n, int best, int cur, double margin);

/* Exploration: a collective not run since step seen[coll] - 1 for more
 * than age steps (seen 0: never) has only a borrowed estimate.  If the best
 * allowed candidate of such a collective scores within window of the
 * winner's, return it (the one of the closest score) to measure it this
 * step; else best. */
int ctl_probe(const ctl_cand_t *cand, int n, int best, const uint64_t *seen, uint64_t step,
              uint64_t age, double window);

/* GraVAC's choice: among the allowed candidates (gain >= min_gain, kept >=
 * min_kept; dense always allowed) the largest gain / time, i.e.
 * throughput x gain.  Fills score with ln(gain / time). */
int ctl_choose_gravac(ctl_cand_t *cand, int n, double min_kept, double min_gain);

#endif
