/* cmp.h -- the compression layer's internal interfaces: error feedback,
 * AR-compatible top-k, the sparse allgather path, the quantisers, PowerSGD
 * and the cost model.  gsync.c puts them behind the public flx_gsync_*.
 *
 * Conventions: every step function is collective over the communicator
 * (all ranks call it with the same n, k and options), never allocates
 * (buffers are sized at create / reserve), and carries one "bad" flag per
 * rank (a non-finite gradient seen locally) through a collective it makes
 * anyway, so that every rank learns *any_bad_p and can fail the step
 * together without hanging.
 */
#ifndef FLX_COMPRESS_CMP_H
#define FLX_COMPRESS_CMP_H

#include "flexcoll.h"
#include "compress/topk.h"

#include <stddef.h>
#include <stdint.h>

/* ---- error feedback (ef.c) ---------------------------------------------- */

typedef struct {
    double g2;    /* sum of g^2 (double)                         */
    double acc2;  /* sum of (g + e)^2 (double)                   */
    int finite;   /* 1 when every g[i] and g[i] + e[i] is finite */
} cmp_ef_sums_t;

/* acc[i] = g[i] + e[i] (float) for i < n, with the sums above, in one pass.
 * g and e are only read (so a non-finite gradient leaves the residual as it
 * was).  e == NULL: no residual, acc is not written (may be NULL) and
 * acc2 == g2. */
void cmp_ef_accumulate(const float *g, const float *e, float *acc, size_t n,
                       cmp_ef_sums_t *sums_p);
/* Sparse compressor C(acc) = acc at idx[0, k), 0 elsewhere.  Turns acc into
 * the new residual acc - C(acc) in place (zeroes acc[idx[j]]), so that
 * old acc == C + new acc holds bit for bit.  Returns sum of C^2. */
double cmp_ef_update_sparse(float *acc, const int32_t *idx, size_t k);
/* Sum of acc[idx[j]]^2 without touching acc (error feedback off). */
double cmp_ef_sparse_energy(const float *acc, const int32_t *idx, size_t k);

/* ---- cost model (model.c): pure functions --------------------------------- */

/* DESIGN.md's model of the AR-Topk paper: N ranks, m parameters of 4 bytes,
 * kept fraction c, alpha seconds, B bytes/s.  log2 N is the real log. */
double cmp_model_bcast(int N, double m, double c, double alpha, double B);
double cmp_model_ar_ring(int N, double m, double c, double alpha, double B);
double cmp_model_ar_tree(int N, double m, double c, double alpha, double B);
double cmp_model_ag(int N, double m, double c, double alpha, double B);
/* This library's other paths, same units:
 *   dense ring allreduce      2(N-1) alpha + 2(N-1)/N 4m/B
 *   AR-Topk, pipelined        (N-1) alpha + 2(N-1) alpha + (N-1)/N 12mc/B
 *                             (scatter, then a ring whose reduce-scatter
 *                              carries 4 B of index beside each value)
 *   AR-Topk, previous indices AR_ring without the broadcast (when it is
 *                             hidden behind computation)
 *   PowerSGD rank r           2 ring allreduces of (rows + cols) r floats */
double cmp_model_dense_ring(int N, double m, double alpha, double B);
double cmp_model_ar_pipe(int N, double m, double c, double alpha, double B);
double cmp_model_ar_prev(int N, double m, double c, double alpha, double B);
double cmp_model_powersgd(int N, double rows, double cols, int r, double alpha, double B);
/* Bytes this rank sends in an allreduce of `bytes` with algo, in a ring
 * allgather of per-rank blocks, in a broadcast (binomial tree) from root. */
double cmp_bytes_allreduce(flx_algo_t algo, int N, int rank, double bytes);
double cmp_bytes_allgather(int N, double bytes_per_rank);
double cmp_bytes_bcast(int N, int rank, int root, double bytes);

/* ---- sparse allgather (sparse_ag.c) ----------------------------------------- */

typedef struct cmp_sparse_ag cmp_sparse_ag_t;

/* For vectors of n floats and up to k_max pairs per rank.  algo: FLX_ALGO_RING,
 * FLX_ALGO_RD (Bruck) or FLX_ALGO_AUTO (by the communicator's model). */
flx_status_t cmp_sparse_ag_create(flx_comm_h comm, size_t n, size_t k_max, flx_algo_t algo,
                                  cmp_sparse_ag_t **ag_p);
flx_status_t cmp_sparse_ag_reserve(cmp_sparse_ag_t *ag, size_t k_max);
void cmp_sparse_ag_destroy(cmp_sparse_ag_t *ag);
/* Gather every rank's (idx[j], val[j]) pairs, j < k (k may differ across
 * ranks, k <= k_max), and the bad flags.  When no rank is bad, out[0, n)
 * becomes the sum over ranks, added in rank order 0..N-1 onto zeros, so
 * every rank gets the same bits; otherwise out is untouched. */
flx_status_t cmp_sparse_ag_step(cmp_sparse_ag_t *ag, const int32_t *idx, const float *val,
                                size_t k, int bad, float *out, int *any_bad_p,
                                uint64_t *bytes_p);

/* ---- AR-compatible top-k (artopk.c, artopk_pipe.c) --------------------------- */

enum { CMP_LEADER_STAR = 0, CMP_LEADER_VAR, CMP_LEADER_VOTE };
enum { CMP_INDEX_SERIAL = 0, CMP_INDEX_PREVIOUS, CMP_INDEX_PIPELINED };
/* The pipelined exchange numbers its phases in 12 bits of a step. */
#define CMP_ARTOPK_PIPE_MAX_RANKS 1024
/* The index mode AR-Topk runs with on nranks: mode, except PIPELINED above
 * CMP_ARTOPK_PIPE_MAX_RANKS, which runs SERIAL (the same sets and values,
 * the leader's broadcast not overlapped with the allreduce). */
int cmp_artopk_index_mode(int mode, int nranks);

typedef struct {
    int leader_policy;    /* CMP_LEADER_*                          */
    int index_mode;       /* CMP_INDEX_*                           */
    cmp_select_t select;  /* selection of the leader / proposals   */
    double var_ewma;      /* VAR: weight of the newest norm        */
} cmp_artopk_params_t;

typedef struct {
    int leader;           /* rank whose set was used, -1 for VOTE  */
    size_t k_used;        /* indices used (VOTE: |union| <= k)     */
    uint64_t bytes_sent;
    double select_s;
    double comm_s;
} cmp_artopk_result_t;

typedef struct cmp_artopk cmp_artopk_t;

/* sel is the caller's selector (shared, used between collectives only). */
flx_status_t cmp_artopk_create(flx_comm_h comm, size_t n, size_t k_max,
                               const cmp_artopk_params_t *params, cmp_topk_t *sel,
                               cmp_artopk_t **ar_p);
flx_status_t cmp_artopk_reserve(cmp_artopk_t *ar, size_t k_max);
/* Waits for a background exchange still running, then frees: that
 * exchange's status (FLX_OK for NULL or none). */
flx_status_t cmp_artopk_destroy(cmp_artopk_t *ar);
/* Forget the previous step's set (next step exchanges synchronously).  Must
 * happen on every rank at the same step.  Waits for a pending exchange. */
flx_status_t cmp_artopk_reset(cmp_artopk_t *ar);
/* One step on this rank's accumulated gradient acc[0, n): agree on one
 * index set, sum acc at those indices over the ranks.  On FLX_OK with
 * *any_bad_p == 0, *idx_p (ascending, res->k_used entries) and *val_p (the
 * sums) are the same on every rank and stay valid until the next call.
 * gnorm: ||g|| of this rank (VAR).  step: the step number, same on all. */
flx_status_t cmp_artopk_step(cmp_artopk_t *ar, const float *acc, size_t k, uint64_t step,
                             double gnorm, int bad, const int32_t **idx_p, const float **val_p,
                             int *any_bad_p, cmp_artopk_result_t *res_p);
/* The fused exchange of CMP_INDEX_PIPELINED (artopk_pipe.c): the leader's
 * idx[0, k) reach every rank while val[0, k] becomes the sum over ranks of
 * acc[idx[j]] (val[k]: the sum of the ranks' flag).  idx is read on the
 * leader and written elsewhere; val is written everywhere.  acc holds n
 * floats: an index received outside [0, n) is FLX_ERR_PROTOCOL. */
flx_status_t cmp_artopk_pipe(flx_comm_h comm, int leader, int32_t *idx, size_t k, size_t n,
                             const float *acc, float flag, float *val, uint64_t *bytes_p);

/* ---- quantisers (quant.c) ------------------------------------------------------- */

/* fp16 / bf16 casts: q[i] = half(acc[i]) (a finite value saturates at the
 * largest finite half, +-65504 for fp16, +-3.39e38 for bf16).
 * resid != NULL: resid[i] = acc[i] - float(q[i]) (acc and resid may alias),
 * and fp16 saturates at the largest half h with nranks * h + 16 (nranks - 1)
 * <= 65504, so that the half sum of nranks ranks, rounded after each
 * addition, cannot overflow: the rest waits in the residual.  Returns sum
 * of float(q)^2. */
double cmp_cast_encode(const float *acc, uint16_t *q, size_t n, flx_dtype_t dtype,
                       float *resid, int nranks);
/* out[i] = float(q[i]) / div (div = 1: exact) */
void cmp_cast_decode(const uint16_t *q, size_t n, flx_dtype_t dtype, float div, float *out);
/* The index of the first q[i] that is Inf or NaN (a half-precision sum
 * that overflowed), or n if none. */
size_t cmp_cast_first_nonfinite(const uint16_t *q, size_t n, flx_dtype_t dtype);

/* QSGD, 8 bits: per bucket of `bucket` elements a float scale s = max |x|
 * and one signed level l in [-127, 127] per element, |l| = floor(127|x|/s
 * + u) with u uniform in [0, 1) from rng (stochastic rounding: E[l s/127]
 * = x).  Encoded block: scales (4 B each) then levels (1 B each). */
size_t cmp_qsgd8_bytes(size_t n, size_t bucket);
/* resid as above (acc - decoded).  Returns sum of decoded^2. */
double cmp_qsgd8_encode(const float *acc, size_t n, size_t bucket, cmp_rng_t *rng,
                        void *block, float *resid);
/* out[i] += decoded[i] */
void cmp_qsgd8_decode_add(const void *block, size_t n, size_t bucket, float *out);

/* ---- PowerSGD (powersgd.c) --------------------------------------------------------- */

typedef struct cmp_powersgd cmp_powersgd_t;

/* The n floats are the rows x cols matrix M (row-major, zero padded), cols =
 * ceil(sqrt(n)), rows = ceil(n / cols); rank r is clamped to min(rows,
 * cols).  Q starts as a seeded normal matrix, the same on every rank. */
flx_status_t cmp_powersgd_create(flx_comm_h comm, size_t n, int rank_r, uint64_t seed,
                                 cmp_powersgd_t **ps_p);
void cmp_powersgd_destroy(cmp_powersgd_t *ps);
void cmp_powersgd_shape(const cmp_powersgd_t *ps, size_t *rows_p, size_t *cols_p, int *r_p);
/* One step: P = M Q, allreduce P (sum), orthonormalise P, Q = M^T P,
 * allreduce Q (sum), out = P Q^T / N (the approximation of the ranks'
 * mean M).  M = acc[0, n).  resid != NULL: resid = M - out (may alias acc).
 * Q is kept for the next step (warm start).  out untouched when any rank
 * is bad.  *overflow_p: a product or sum overflowed (every rank alike):
 * Q keeps its last good value, resid is untouched, out may hold non-finite
 * values.  *c2_p: sum of out^2. */
flx_status_t cmp_powersgd_step(cmp_powersgd_t *ps, const float *acc, int bad, float *out,
                               float *resid, int *any_bad_p, int *overflow_p, uint64_t *bytes_p,
                               double *c2_p);

/* Zero the residuals of h (none without error feedback): the controller
 * adds them into a dense step's gradient itself and drops them only once
 * that step has succeeded. */
void cmp_gsync_zero_residual(flx_gsync_h h);

#endif
