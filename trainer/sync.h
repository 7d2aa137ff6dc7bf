/* sync.h -- flx-train's gradient-sync policies over flexcoll: how each
 * step's gradient (or, for SelSync, the weights) becomes the same on every
 * rank. */
#ifndef FLX_TRAINER_SYNC_H
#define FLX_TRAINER_SYNC_H

#include "flexcoll.h"
#include "trainer/nn.h"

typedef enum {
    POL_DENSE = 0, /* allreduce, bucketed and overlapped with backprop     */
    POL_TOPK_AG,   /* static Top-k, sparse allgather, error feedback       */
    POL_ARTOPK,    /* static AR-Topk (STAR or VAR leader), error feedback  */
    POL_POWERSGD,  /* rank-r PowerSGD, error feedback                      */
    POL_ACCORDION, /* critical regime: low / high compression              */
    POL_GRAVAC,    /* gain threshold, throughput x gain                    */
    POL_SELSYNC,   /* skip sync while the gradient norm changes little     */
    POL_FLEX,      /* the controller (with SelSync's test: local steps)    */
    POL_COUNT
} policy_t;

typedef struct {
    policy_t policy;
    flx_algo_t algo;      /* dense: allreduce algorithm                   */
    size_t bucket_bytes;  /* dense: bytes per overlapped allreduce        */
    double kept;          /* static top-k policies: kept fraction         */
    int psgd_rank;        /* PowerSGD rank                                */
    flx_leader_t leader;  /* AR-Topk: STAR or VAR                         */
    double weight;        /* flex: weight of time (< 0: default)          */
    double eta;           /* accordion / flex: critical threshold         */
    int interval;         /* accordion / flex: steps per critical test    */
    int max_local;        /* selsync, flex local: longest run without a
                             sync (0: interval)                           */
    double delta;         /* selsync, flex local: norm change that syncs  */
    double delta_decay;   /* selsync, flex local: delta x (lr / lr0)^this
                             (0: a fixed delta)                           */
    int local_steps;      /* flex: SelSync's test decides when to sync    */
    double min_gain;      /* gravac, flex: gain floor (< 0: default)      */
    const char *ctl_log;  /* flex / accordion / gravac: decision CSV      */
} sync_opts_t;

/* What one step's sync did. */
typedef struct {
    const char *collective; /* dense-ring, dense-tree, dense-rd, dense-hd, artopk,
                               topk-ag, powersgd, skip                       */
    double kept;            /* kept fraction (1 dense, 0 skip)              */
    double bytes;           /* payload bytes this rank sent                 */
    double select_s;        /* selection / encoding and decoding            */
    double comm_s;          /* time waiting for communication               */
    double decide_s;        /* the policy's own decision time               */
    double agree_s;         /* its agreement message, waits included        */
    double gain;            /* ||C(g + e)|| / ||g + e||                     */
    int critical;           /* critical regime (accordion, flex)            */
    int synced;             /* 0: SelSync (or flex's local steps) skipped   */
    double change;          /* the agreed norm change that decided (selsync,
                               flex's local steps; inf: none yet), else -1  */
} sync_report_t;

typedef struct sync sync_t;

const char *policy_name(policy_t p);
/* -1 for an unknown name */
int policy_parse(const char *name);

flx_status_t sync_create(flx_comm_h comm, nn_t *nn, const sync_opts_t *o, sync_t **sync_p);
/* Ends what is under way, frees everything; an error of the controller's
 * last agreement or of writing its decision log (one line logged).  The
 * norm test's last agreement, if sync_finish did not take it (a run that
 * failed before), is waited for and its news dropped. */
flx_status_t sync_destroy(sync_t *s);
/* nn_grad_ready_fn for nn_train_batch (ctx: the sync_t): the dense policy
 * starts a segment's allreduce as soon as its bucket is complete. */
void sync_grad_ready(void *ctx, int seg);
/* After backprop: finish this step's gradient sync (grads become the mean
 * over the ranks), except for selsync and flex with local steps: their
 * norm test decides here whether this step syncs (on the change agreed
 * after the last step's update) and the gradient stays the rank's own;
 * a NaN or Inf some rank's last gradient held fails every rank here. */
flx_status_t sync_gradients(sync_t *s, double compute_s, sync_report_t *r);
/* After the optimiser's update: for selsync and flex with local steps,
 * grad_sq (the gradient's sum of squares, computed in the update's pass;
 * grad_bad: it held NaN or Inf, zeroed by the caller from the first block
 * that did) goes into the norm test's agreement, taken at the next step
 * (alone, N = 1, a bad gradient fails here, one line); then
 * SelSync averages the weights on the steps it syncs and flex syncs the
 * drift since the last sync.  No-op for the other policies (their
 * arguments unused). */
flx_status_t sync_after_update(sync_t *s, double grad_sq, int grad_bad, sync_report_t *r);
/* Collective, after the last step: waits for the norm test's last
 * agreement (selsync, flex's local steps); FLX_ERR_INVALID_ARG on every
 * rank, one line logged, if it says a gradient held NaN or Inf.  No-op for
 * the other policies, and when called again. */
flx_status_t sync_finish(sync_t *s);
/* Whether the ranks' weights may differ between two syncs (selsync, flex
 * with local steps): also the policies whose norm test wants the
 * gradient's sum of squares in sync_after_update. */
int sync_local_models(const sync_t *s);
/* Whether the policy compresses by top-k with error feedback (what
 * momentum correction needs). */
int sync_policy_topk(policy_t p);
/* Momentum correction after a sync: the velocity of every position this
 * rank sent is zeroed (DGC's momentum factor masking), so that what was
 * sent is not applied again through the momentum; no-op for a dense step,
 * whose average of the ranks' velocities is plain momentum SGD. */
void sync_mask_velocity(sync_t *s, const sync_report_t *r, float *velocity);
/* This step's learning rate over the initial one, before sync_gradients
 * (selsync, flex: delta x ratio^delta_decay). */
void sync_set_lr_ratio(sync_t *s, double ratio);
/* The learning rate decayed (accordion, flex: critical again). */
void sync_lr_changed(sync_t *s);
/* A one-line summary of the policy's choices since the last call. */
void sync_summary(sync_t *s, char *buf, size_t len);

#endif
