/* coll.h -- the algorithms.  Each works in place on buf (the caller has
 * copied sendbuf there) and assumes coll_begin was called. */
#ifndef FLX_COLLECTIVES_COLL_H
#define FLX_COLLECTIVES_COLL_H

#include "collectives/comm.h"

/* scratch memory of the communicator (reused across calls; one collective
 * runs at a time).  NULL when out of memory. */
void *coll_scratch(flx_comm_h comm, size_t bytes);
void *coll_scratch_slot(flx_comm_h comm, int slot, size_t bytes);
/* stop the background thread after the queued requests, and free the
 * requests that flx_wait / flx_test have not ended (async.c) */
void comm_async_stop(flx_comm_h comm);

/* ring: reduce-scatter then allgather over segments off[i], len[i] (in
 * elements).  After the reduce-scatter rank r holds segment r reduced: in
 * place (src NULL) in buf; out of place (src, read and never written: the
 * input, segments at the same offsets) at own, where buf is scratch that
 * receives the other segments (own NULL: segment r too). */
flx_status_t coll_ring_reduce_scatter(flx_comm_h comm, const void *src, void *buf, void *own,
                                      const size_t *off, const size_t *len, flx_dtype_t dtype,
                                      flx_op_t op, uint32_t phase0);
flx_status_t coll_ring_allgather(flx_comm_h comm, const void *own, void *buf, const size_t *off,
                                 const size_t *len, size_t esize, uint32_t phase0);

/* The ring allreduce of src into buf (src == buf: in place; else src is
 * read, never written, and not copied to buf first). */
flx_status_t coll_allreduce_ring(flx_comm_h comm, const void *src, void *buf, size_t count,
                                 flx_dtype_t dtype, flx_op_t op);
/* ... and the tree and recursive doubling, the same way. */
flx_status_t coll_allreduce_tree(flx_comm_h comm, const void *src, void *buf, size_t count,
                                 flx_dtype_t dtype, flx_op_t op);
flx_status_t coll_allreduce_rd(flx_comm_h comm, const void *src, void *buf, size_t count,
                               flx_dtype_t dtype, flx_op_t op);
flx_status_t coll_allreduce_hd(flx_comm_h comm, const void *src, void *buf, size_t count,
                               flx_dtype_t dtype, flx_op_t op);
/* ... the one algo names (ring for any other value). */
flx_status_t coll_allreduce_by(flx_comm_h comm, flx_algo_t algo, const void *src, void *buf,
                               size_t count, flx_dtype_t dtype, flx_op_t op);
flx_status_t coll_allgather_ring(flx_comm_h comm, const void *sendbuf, void *recvbuf,
                                 size_t bytes_per_rank);
/* own: NULL in place, else this rank's block apart from recvbuf (N > 1) */
flx_status_t coll_allgather_rd(flx_comm_h comm, const void *own, void *recvbuf,
                               size_t bytes_per_rank);
flx_status_t coll_bcast_binomial(flx_comm_h comm, void *buf, size_t bytes, int root);
flx_status_t coll_bcast_chain(flx_comm_h comm, void *buf, size_t bytes, int root);
flx_status_t coll_barrier_dissemination(flx_comm_h comm);

/* alpha-beta model (model.c) */
double model_allreduce_time(flx_algo_t algo, int n, double bytes, double alpha, double beta,
                            double chunk);
double model_allgather_time(flx_algo_t algo, int n, double bytes_per_rank, double alpha,
                            double beta);
double model_bcast_time(int chain, int n, double bytes, double alpha, double beta,
                        double chunk);
flx_algo_t model_pick_allreduce(int n, double bytes, double alpha, double beta, double chunk);
/* The allreduce formula as c0 + a alpha + b / beta (c0: local reductions). */
void model_allreduce_terms(flx_algo_t algo, int n, double bytes, double chunk, double *c0_p,
                           double *a_p, double *b_p);
/* ... with an algorithm's own (alpha, 1/beta); the pick from one each. */
double model_allreduce_time_ab(flx_algo_t algo, int n, double bytes, model_ab_t ab, double chunk);
flx_algo_t model_pick_allreduce_ab(int n, double bytes, const model_ab_t ar[MODEL_NAR], double chunk);
/* The (alpha, 1/beta) the prediction of algo on n ranks uses: its own,
 * except rd's 1/beta on 2 ranks, no less than the ring's (the same bytes
 * over one link), and on a power of two from 4 up, no less than
 * halving-doubling's (the same pairs, rd moving the whole vector each
 * step).  The reduce-scatter's choice costs rd with it too. */
model_ab_t model_allreduce_ab(flx_algo_t algo, int n, const model_ab_t ar[MODEL_NAR]);
/* The same pick, except on exploring calls, which run the runner-up if
 * it is predicted within MODEL_EXPLORE_MARGIN times the best (the
 * allreduce: MODEL_EXPLORE_RARE_MARGIN): the live model learns only from
 * what runs, and an algorithm that a stalled fit or an unlucky look made
 * look slow would otherwise never run again.  The automatic choice number
 * call (counted from 0 per communicator) explores when it is one of the
 * last MODEL_LOOK of every MODEL_EXPLORE (every MODEL_EXPLORE_FAR_EVERY
 * when the runner-up is predicted over MODEL_EXPLORE_NEAR times the best,
 * every MODEL_EXPLORE_RARE_EVERY over MODEL_EXPLORE_MARGIN times): three
 * runs in a row, a look whose median replaces the runner-up's 1/beta
 * (model.c).  One run at a time, learnt through the spike filter and the
 * EWMA, could not undo a bad estimate: with 4 ranks on 2 cores a 2 MiB
 * allreduce stayed on the ring for 250 calls (40% slower than
 * halving-doubling), halving-doubling run once every 64.  And one look on
 * a loaded machine (load average 3.3) rated halving-doubling at 0.27 GB/s
 * against about 1.4 measured alone, over 2x the tree's predicted time,
 * and the tree, 1.7x slower, ran from then on.  At most 3/64 of the calls,
 * each at most 1.25x the best prediction, 3/256 at most 2x, or 3/1024 at
 * most 4x (under 1% of the time).  Only at a size the runner-up has run
 * at before, or a smaller one (ran: the largest size each algorithm ran
 * at, indexed like ar; NULL: any size): its first run at a larger size
 * would grow its scratch into fresh pages inside the timed call (a 4 MiB
 * allgather on 4 ranks: Bruck's 16 MiB, 46 ms of page faults on the
 * development VM, against 3 ms for the call).  The allgather explores one
 * call in every MODEL_EXPLORE (it has no look). */
#define MODEL_EXPLORE 64
#define MODEL_EXPLORE_MARGIN 2.0
#define MODEL_EXPLORE_NEAR 1.25
#define MODEL_EXPLORE_FAR_EVERY 256
#define MODEL_EXPLORE_RARE_MARGIN 4.0
#define MODEL_EXPLORE_RARE_EVERY 1024
_Static_assert(MODEL_EXPLORE_FAR_EVERY % MODEL_EXPLORE == 0 &&
                   MODEL_EXPLORE_RARE_EVERY % MODEL_EXPLORE == 0,
               "an exploring call is one of the last MODEL_LOOK of every MODEL_EXPLORE");
#define MODEL_LOOK 3 /* runs in a look (model.c) */
#define MODEL_RANGE 1.0e3 /* live values stay within x / 1000 of where they started */
flx_algo_t model_pick_allreduce_explore(int n, double bytes, const model_ab_t ar[MODEL_NAR],
                                         double chunk, unsigned long call, const double *ran);
/* The allgather's algorithms the same way: ring (index 0) and the
 * log-step one (FLX_ALGO_RD, index 1: recursive doubling in place when N
 * is a power of two, else Bruck), each with its own (alpha, 1/beta), fitted at
 * creation like the allreduce's: the link's ping-pong alpha does not
 * predict a ring step among ranks that share cores. */
static inline int model_ag_index(flx_algo_t algo) { return algo == FLX_ALGO_RD; }
/* The (alpha, 1/beta) the prediction of algo uses: its own, except rd's
 * 1/beta, no less than the ring's (the same bytes; Bruck's plus copies). */
model_ab_t model_allgather_ab(flx_algo_t algo, const model_ab_t ag[MODEL_NAG]);
void model_allgather_terms(flx_algo_t algo, int n, double bytes_per_rank, double *c0_p,
                           double *a_p, double *b_p);
double model_allgather_time_ab(flx_algo_t algo, int n, double bytes_per_rank, model_ab_t ab);
flx_algo_t model_pick_allgather_explore(int n, double bytes_per_rank,
                                        const model_ab_t ag[MODEL_NAG], unsigned long call,
                                        const double *ran);
/* Solve a alpha + b inv_bw = t - c0 at two sizes, small and large, each
 * {c0, a, b, t}; 0 and *ab_p set, or -1 (no positive solution) and *ab_p
 * untouched. */
int model_fit_ab(const double small[4], const double large[4], model_ab_t *ab_p);
/* Install a model (ar, ag NULL: every algorithm at the link's values); exec
 * held. */
void comm_set_model(flx_comm_h comm, flx_link_model_t link, const model_ab_t ar[MODEL_NAR],
                    const model_ab_t ag[MODEL_NAG]);
/* At creation: the link (ping-pong with rank ^ 1, unless FLX_ALPHA and
 * FLX_BETA fix it) and each allreduce and allgather algorithm's fit,
 * installed. */
flx_status_t model_setup(flx_comm_h comm);
flx_algo_t model_pick_allgather(int n, double bytes_per_rank, double alpha, double beta);
int model_pick_bcast_chain(int n, double bytes, double alpha, double beta, double chunk);
/* The live model.  A collective whose prediction is c0 + a alpha + b / beta
 * took t: model_dominant says which term dominates the prediction (2: the
 * bandwidth term, 1: latency) and model_learn folds the observation of that
 * term, max(0, t - a alpha) / b of 1/beta or max(0, t - b / beta) / a of
 * alpha, in with weight lambda, keeping it within [lo, hi] (index 0 alpha,
 * 1 1/beta); t < 0 or a = b = 0: unchanged.  hist (NULL: none) holds each
 * term's last two observations: what is folded in is then the median of
 * them and the new one (model_spike_filter).  Pure. */
int model_dominant(double a, double b, double alpha, double inv_bw);
void model_learn(double *alpha_p, double *inv_bw_p, double t, double a, double b, int which,
                 double lambda, const double lo[2], const double hi[2], double hist[2][2]);
/* A median-of-3 spike filter: returns the median of hist[0], hist[1] and x
 * (with one earlier value, the smaller of it and x; with none, x), then
 * keeps x as the newest.  A value < 0 in hist means none.  One stalled
 * run then moves nothing; two in a row, or a real change, do.  Pure. */
double model_spike_filter(double hist[2], double x);
/* After an allreduce or allgather (kind COLL_ALLREDUCE / COLL_ALLGATHER) of
 * bytes (per rank for allgather) with algo took t seconds: learn from it,
 * and every FLX_MODEL_REFRESH observations agree on the communicator's model
 * (a collective: every rank calls it at the same point).  Exec held. */
flx_status_t model_observe(flx_comm_h comm, int kind, flx_algo_t algo, double bytes, double t);

/* api.c / async.c internals shared by the blocking and non-blocking calls
 * (fn: the public function the lines name) */
flx_status_t flx_allreduce_check(const char *fn, flx_comm_h comm, const void *sendbuf,
                                 void *recvbuf, size_t count, flx_dtype_t dtype, flx_op_t op,
                                 flx_algo_t algo);
flx_status_t flx_allgather_check(const char *fn, flx_comm_h comm, const void *sendbuf,
                                 void *recvbuf, size_t count, flx_dtype_t dtype, flx_algo_t algo);
/* Wait until this rank's non-blocking requests have run.  The live model
 * changes only inside collectives, which run in the same order on every
 * rank: after this, a rank reads the model every rank reads at the same
 * point of its calls. */
void comm_wait_idle(flx_comm_h comm);
flx_status_t comm_enter(flx_comm_h comm);
flx_status_t comm_leave(flx_comm_h comm, flx_status_t st);
/* make st the communicator's sticky error and tell the peers (exec held) */
void comm_record_error(flx_comm_h comm, flx_status_t st);
/* after flx_comm_abort: make FLX_ERR_ABORTED the sticky error (exec held) */
void comm_sync_abort(flx_comm_h comm);
/* Release the execution lock, then tell the peers of an abort raised while
 * it was held (flx_comm_abort only tries the lock, so it may have found it
 * taken). */
void comm_exec_unlock(flx_comm_h comm);
/* Collective: the range of n values across the ranks, in one allreduce of
 * each value and its complement (the maximum of ~x is ~ the minimum).  v
 * holds 2n: on entry v[0, n) this rank's values; on FLX_OK v[i] is the
 * largest and v[n + i] the smallest of value i. */
flx_status_t coll_agree_range(flx_comm_h comm, int64_t *v, size_t n);
flx_status_t comm_run_allreduce(flx_comm_h comm, const void *sendbuf, void *recvbuf,
                                size_t count, flx_dtype_t dtype, flx_op_t op,
                                flx_algo_t algo);
flx_status_t comm_run_allgather(flx_comm_h comm, const void *sendbuf, void *recvbuf,
                                size_t count, flx_dtype_t dtype, flx_algo_t algo);
/* The allreduce algorithm to run: algo, else FLX_ALGO, else the model's
 * pick; run: the choice is for a call that runs now, and takes part in
 * the exploration (model_pick_allreduce_explore); 0 for a query. */
flx_algo_t comm_pick_allreduce(flx_comm_h comm, size_t count, flx_dtype_t dtype,
                               flx_algo_t algo, int run);
/* The same for an allgather of bytes_per_rank (FLX_ALGO_TREE, which the
 * allgather does not have, picks too). */
flx_algo_t comm_pick_allgather(flx_comm_h comm, double bytes_per_rank, flx_algo_t algo, int run);

/* ---- compression layer support (collectives/allgatherv.c; used by compress/) ---- */

/* Wire kinds of the collectives the compression layer builds (kept clear of
 * the dense kinds in comm.h). */
enum {
    COLL_ALLGATHERV = TL_KIND_ALLGATHERV, /* allgatherv: counts, then blocks */
    COLL_ARTOPK = TL_KIND_ARTOPK,         /* compress/artopk_pipe.c: fused AR-Topk */
};

/* Allgather of sendbytes bytes per rank, the counts differing across ranks.
 * Collective.  First the counts travel (fixed-size allgather), so every
 * rank fills counts[0, N) and displs[0, N) (byte offsets, prefix sums; the
 * caller owns both arrays) and rank i's block lands at recvbuf + displs[i].
 * Then the blocks: FLX_ALGO_RING, FLX_ALGO_RD (Bruck with variable blocks)
 * or FLX_ALGO_AUTO (FLX_ALGO, else the alpha-beta model on the largest
 * block).  sendbuf is copied to its place first (it may already be there).
 * A total above capacity: FLX_ERR_INVALID_ARG on every rank, no data moved,
 * and the communicator keeps working.  Takes the execution lock like the
 * public calls (waits for earlier non-blocking requests).  dtype travels in
 * the wire tags, so ranks that pass different ones get FLX_ERR_MISMATCH
 * (callers that move raw bytes pass FLX_INT64). */
flx_status_t coll_allgatherv(flx_comm_h comm, const void *sendbuf, size_t sendbytes,
                             void *recvbuf, size_t capacity, size_t *counts, size_t *displs,
                             flx_dtype_t dtype, flx_algo_t algo);

/* ---- end of the compression layer support ---- */

#endif
