/*
 * flexcoll.h -- the one public header of flexcoll.
 *
 * flexcoll is a collective-communication library for data-parallel training:
 * a transport layer (tcp everywhere, ib on rdma-core where configured),
 * dense collectives on top of it, and (later layers) compression and a
 * per-step controller.  Every object is an opaque handle; every function
 * returns a flx_status_t.  Output parameters end in _p, come last, and are
 * written only when the call returns FLX_OK.
 */
#ifndef FLEXCOLL_H
#define FLEXCOLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FLX_API __attribute__((visibility("default")))
#else
#define FLX_API
#endif

/* The version this header belongs to (configure refuses a header whose
 * numbers differ from the package's).  Compare versions as codes:
 * #if FLX_VERSION_CODE >= FLX_VERSION(0, 2, 0); flx_version() gives the
 * code of the library in use. */
#define FLX_VERSION_MAJOR 0
#define FLX_VERSION_MINOR 1
#define FLX_VERSION_PATCH 0
#define FLX_VERSION(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define FLX_VERSION_CODE FLX_VERSION(FLX_VERSION_MAJOR, FLX_VERSION_MINOR, FLX_VERSION_PATCH)

/*
 * Status codes.  FLX_OK is 0, FLX_INPROGRESS is 1, errors are negative.
 * The list is an X-macro so that names and strings cannot drift apart.
 */
#define FLX_STATUS_LIST(X)                                                   \
    X(FLX_OK,                0,  "success")                                  \
    X(FLX_INPROGRESS,        1,  "operation in progress")                    \
    X(FLX_ERR_INVALID_ARG,  -1,  "invalid argument")                         \
    X(FLX_ERR_NO_MEMORY,    -2,  "out of memory")                            \
    X(FLX_ERR_TIMED_OUT,    -3,  "timed out")                                \
    X(FLX_ERR_PEER_LOST,    -4,  "peer lost")                                \
    X(FLX_ERR_MISMATCH,     -5,  "mismatched collective call across ranks")  \
    X(FLX_ERR_AUTH,         -6,  "authentication failed")                    \
    X(FLX_ERR_UNSUPPORTED,  -7,  "unsupported")                              \
    X(FLX_ERR_SYSTEM,       -8,  "system call failed")                       \
    X(FLX_ERR_CONFIG,       -9,  "malformed configuration value")            \
    X(FLX_ERR_PROTOCOL,     -10, "protocol violation by a peer")             \
    X(FLX_ERR_ABORTED,      -11, "communicator aborted")                     \
    X(FLX_ERR_NOT_FOUND,    -12, "not found")                                \
    X(FLX_ERR_IO,           -13, "input/output error")

typedef enum {
#define FLX_STATUS_ENUM_(name, value, text) name = value,
    FLX_STATUS_LIST(FLX_STATUS_ENUM_)
#undef FLX_STATUS_ENUM_
} flx_status_t;

/* Human-readable text ("peer lost"); never NULL. */
FLX_API const char *flx_status_string(flx_status_t status);
/* The enumerator's name ("FLX_ERR_PEER_LOST"); never NULL. */
FLX_API const char *flx_status_name(flx_status_t status);

/* Element types.  Half types (float16, bfloat16) accumulate in float32. */
typedef enum {
    FLX_FLOAT32 = 0,
    FLX_FLOAT64,
    FLX_FLOAT16,
    FLX_BFLOAT16,
    FLX_INT32,
    FLX_INT64,
    FLX_DTYPE_COUNT
} flx_dtype_t;

/* Reduction operators.  FLX_AVG is the sum divided by the number of ranks
 * (integer division for integer types), divided at the end: where the sum
 * overflows (integers wrap, half types reach Inf) the average is wrong too.
 * A floating sum, product or average that is NaN is the same NaN on every
 * rank. */
typedef enum {
    FLX_SUM = 0,
    FLX_PROD,
    FLX_MIN,
    FLX_MAX,
    FLX_AVG,
    FLX_OP_COUNT
} flx_op_t;

/* Algorithms.  FLX_ALGO_AUTO chooses per call from the communicator's
 * measured alpha-beta model; the others force one (FLX_ALGO overrides too). */
typedef enum {
    FLX_ALGO_AUTO = 0,
    FLX_ALGO_RING,
    FLX_ALGO_TREE,
    FLX_ALGO_RD, /* recursive doubling (Bruck's variant for allgather) */
    FLX_ALGO_HD, /* allreduce: halving-doubling (Rabenseifner); the other
                  * collectives choose as under FLX_ALGO_AUTO */
    FLX_ALGO_COUNT
} flx_algo_t;

FLX_API size_t flx_dtype_size(flx_dtype_t dtype);
FLX_API const char *flx_dtype_name(flx_dtype_t dtype);
FLX_API const char *flx_op_name(flx_op_t op);
FLX_API const char *flx_algo_name(flx_algo_t algo);

/* ---------------------------------------------------------------------- */
/* Communicator                                                            */
/* ---------------------------------------------------------------------- */

typedef struct flx_comm *flx_comm_h;
typedef struct flx_request *flx_request_h;

/* Which fields of flx_comm_params_t are set; unset fields come from the
 * environment (FLX_RANK, FLX_SIZE, FLX_ROOT, FLX_JOB_SECRET, or the
 * launcher's variables) and then from the defaults. */
enum {
    FLX_COMM_PARAM_RANK   = 1u << 0,
    FLX_COMM_PARAM_SIZE   = 1u << 1,
    FLX_COMM_PARAM_ROOT   = 1u << 2,
    FLX_COMM_PARAM_SECRET = 1u << 3,
    FLX_COMM_PARAM_NET    = 1u << 4,
};

typedef struct {
    uint64_t field_mask;  /* FLX_COMM_PARAM_* bits of the fields below   */
    int rank;             /* 0 <= rank < size                           */
    int size;             /* number of ranks, >= 1                      */
    const char *root;     /* "host:port" where rank 0 listens            */
    const char *secret;   /* job secret shared by all ranks (any string) */
    const char *net;      /* "auto", "tcp" or "ib"                       */
} flx_comm_params_t;

/*
 * Create a communicator: rendezvous at the root, authenticate every peer
 * with the job secret, connect all ranks, and measure the link's alpha-beta
 * model.  Collective over all ranks.  params may be NULL (all from the
 * environment).  On success *comm_p owns the connections; release it with
 * flx_comm_destroy.
 */
FLX_API flx_status_t flx_comm_create(const flx_comm_params_t *params,
                                     flx_comm_h *comm_p);
/* Destroy a communicator; waits for its pending requests and frees those
 * not yet ended by flx_wait / flx_test.  NULL is a no-op.  No other thread
 * may be inside a call on comm, or on one of its requests, meanwhile (as
 * with ncclCommDestroy): the communicator's memory goes. */
FLX_API flx_status_t flx_comm_destroy(flx_comm_h comm);
/*
 * Abort the communicator: local, callable from any thread (not from a
 * signal handler), returns at once.  A blocking collective waiting in
 * another thread returns FLX_ERR_ABORTED within about 0.1 s; requests of
 * the non-blocking calls, running or queued, end with FLX_ERR_ABORTED (so
 * flx_wait and flx_test return it); every later call on comm returns
 * FLX_ERR_ABORTED (non-blocking calls create no request).  The peers are
 * told: their pending and later collectives fail with FLX_ERR_PEER_LOST.
 * flx_comm_destroy must still be called (after the other threads have
 * returned from their calls on comm) and frees everything without waiting
 * for the peers.  FLX_OK, also when already aborted; FLX_ERR_INVALID_ARG
 * for NULL.
 */
FLX_API flx_status_t flx_comm_abort(flx_comm_h comm);
/*
 * The first error the communicator hit, FLX_OK if none: a failed blocking
 * call, a non-blocking request that failed in the background thread (a
 * peer lost, FLX_TIMEOUT passed, a mismatch) before anyone waited for it,
 * or FLX_ERR_ABORTED.  Bad arguments do not count (they break nothing).
 * Callable from any thread; does not progress or wait.  FLX_ERR_INVALID_ARG
 * for NULL.
 */
FLX_API flx_status_t flx_comm_get_async_error(flx_comm_h comm);
FLX_API int flx_comm_rank(flx_comm_h comm);
FLX_API int flx_comm_size(flx_comm_h comm);
/* Name of the transport in use ("tcp" or "ib"). */
FLX_API const char *flx_comm_net_name(flx_comm_h comm);

/*
 * Declare that [ptr, ptr+len) stays allocated until flx_mem_deregister.
 * On the ib backend such buffers are registered once and reused zero-copy
 * (other buffers are registered for each message that needs it, since
 * memory freed and allocated again may have new pages).  A range larger
 * than the locked-memory limit lets each message be registered or copied
 * through staging buffers instead, with one warning.  No effect on tcp.
 * Call collectively or not: it is local.  A collective running in the
 * background (non-blocking requests) finishes its current call first.
 * FLX_ERR_INVALID_ARG with one log line for NULL, len 0 or a range that
 * wraps, and on ib for a range that overlaps one still registered;
 * flx_mem_deregister of a pointer that does not start a registered range
 * (ib): FLX_ERR_NOT_FOUND with one log line; after flx_comm_abort both
 * return FLX_ERR_ABORTED (flx_comm_destroy releases what is registered).
 */
FLX_API flx_status_t flx_mem_register(flx_comm_h comm, void *ptr, size_t len);
FLX_API flx_status_t flx_mem_deregister(flx_comm_h comm, void *ptr);

/* The measured link model: time(bytes) = alpha + bytes / beta.  The live
 * refresh changes it inside collectives, at the same call on every rank:
 * read with none of this rank's non-blocking requests in flight, it is the
 * same on every rank (as are flx_allreduce_algo / flx_allgather_algo). */
typedef struct {
    double alpha_s;          /* one-way latency of a small message, seconds */
    double beta_bytes_per_s; /* point-to-point bandwidth, bytes/second      */
} flx_link_model_t;
FLX_API flx_status_t flx_comm_link_model(flx_comm_h comm,
                                         flx_link_model_t *model_p);

/* Measure the links now, to every peer (collective; flx-info --calibrate):
 * a round-robin of pairwise ping-pongs, each pair once (N - 1 rounds, N
 * with a bye when N is odd): 15 small round trips give alpha, 3 transfers of
 * 1 MiB give beta.  per_peer (NULL: not wanted) receives size entries, this
 * rank's link to each peer (its own entry 0, 0).  The communicator's model
 * becomes the worst link's, as at creation, and the live refresh starts
 * again from it (FLX_MODEL_REFRESH). */
FLX_API flx_status_t flx_comm_calibrate(flx_comm_h comm, flx_link_model_t *per_peer);

/* The algorithm the communicator would pick for an allreduce of count
 * elements of dtype (honours FLX_ALGO).  Same answer on every rank when
 * read with none of its non-blocking requests in flight (see above). */
FLX_API flx_algo_t flx_allreduce_algo(flx_comm_h comm, size_t count,
                                      flx_dtype_t dtype);
/* The model's time in seconds for an allreduce of count elements of dtype
 * with algo (FLX_ALGO_AUTO: the one it would pick): the allreduce formula
 * with that algorithm's own alpha and beta, fitted when the communicator
 * was created and refreshed from live timings (rd on 2 ranks: a beta no
 * higher than the ring's).  -1 for bad arguments. */
FLX_API double flx_allreduce_predict(flx_comm_h comm, size_t count, flx_dtype_t dtype,
                                     flx_algo_t algo);
/* The same for an allgather of count elements of dtype per rank: ring or
 * FLX_ALGO_RD (Bruck), each with its own fitted alpha and beta.  FLX_ALGO
 * tree counts as auto for the allgather's choice; flx_allgather_predict
 * returns -1 for it. */
FLX_API flx_algo_t flx_allgather_algo(flx_comm_h comm, size_t count, flx_dtype_t dtype);
FLX_API double flx_allgather_predict(flx_comm_h comm, size_t count, flx_dtype_t dtype,
                                     flx_algo_t algo);
/* The algorithm of a reduce-scatter of recvcount elements of dtype per
 * rank: FLX_ALGO_RING (the ring's reduce-scatter), or where the model
 * (recursive doubling's fitted alpha and beta for both) predicts an
 * allreduce of the whole input faster than half a ring allreduce (small
 * sizes on 4 or more ranks), that allreduce's algorithm (rd, tree or hd),
 * each rank keeping its block.  FLX_ALGO forces it (ring: the ring). */
FLX_API flx_algo_t flx_reduce_scatter_algo(flx_comm_h comm, size_t recvcount, flx_dtype_t dtype);

/* ---------------------------------------------------------------------- */
/* Blocking collectives.  All ranks call them in the same order with the   */
/* same count, dtype, op, root and algo; a mismatch returns                */
/* FLX_ERR_MISMATCH on every rank that receives in the call (a rank that   */
/* only sends in it, such as a broadcast's root, can return FLX_OK and     */
/* fails a later call).  In place: sendbuf == recvbuf                      */
/* (allgather: sendbuf == recvbuf + rank * count * size).  After an error  */
/* the communicator is broken: later calls return the same error.          */
/* ---------------------------------------------------------------------- */

FLX_API flx_status_t flx_allreduce(flx_comm_h comm, const void *sendbuf,
                                   void *recvbuf, size_t count,
                                   flx_dtype_t dtype, flx_op_t op,
                                   flx_algo_t algo);
/* recvbuf holds size * count elements: rank i's sendbuf at offset i*count. */
FLX_API flx_status_t flx_allgather(flx_comm_h comm, const void *sendbuf,
                                   void *recvbuf, size_t count,
                                   flx_dtype_t dtype, flx_algo_t algo);
/* buf (count elements) from root to everyone. */
FLX_API flx_status_t flx_broadcast(flx_comm_h comm, void *buf, size_t count,
                                   flx_dtype_t dtype, int root);
/* sendbuf holds size * recvcount elements; rank i receives block i reduced.
 * In place: sendbuf == recvbuf, and the result is at recvbuf[0..recvcount). */
FLX_API flx_status_t flx_reduce_scatter(flx_comm_h comm, const void *sendbuf,
                                        void *recvbuf, size_t recvcount,
                                        flx_dtype_t dtype, flx_op_t op);
FLX_API flx_status_t flx_barrier(flx_comm_h comm);

/* ---------------------------------------------------------------------- */
/* Non-blocking collectives, progressed by a background thread.  Requests  */
/* run in the order they are issued; blocking calls wait for earlier       */
/* requests.  The buffers belong to the library until the request ends.   */
/* ---------------------------------------------------------------------- */

FLX_API flx_status_t flx_iallreduce(flx_comm_h comm, const void *sendbuf,
                                    void *recvbuf, size_t count,
                                    flx_dtype_t dtype, flx_op_t op,
                                    flx_algo_t algo, flx_request_h *req_p);
FLX_API flx_status_t flx_iallgather(flx_comm_h comm, const void *sendbuf,
                                    void *recvbuf, size_t count,
                                    flx_dtype_t dtype, flx_algo_t algo,
                                    flx_request_h *req_p);
/* FLX_INPROGRESS while running; otherwise the request's final status, and
 * the request is freed (the handle must not be used again). */
FLX_API flx_status_t flx_test(flx_request_h req);
/* Wait for the request, free it, return its status.  Either call on a
 * handle that is no longer pending (a second flx_wait, a flx_wait after the
 * flx_test that ended it, or after flx_comm_destroy), or on one that
 * another thread is waiting for: FLX_ERR_INVALID_ARG with one log line
 * (handles are serial numbers, never reused: a stale one never reaches a
 * newer request).  A flx_wait beside another thread's flx_test waits for
 * the test to finish looking, then waits for the request (or, if that test
 * ended it, is refused as no longer pending). */
FLX_API flx_status_t flx_wait(flx_request_h req);

/* ---------------------------------------------------------------------- */
/* Library information                                                     */
/* ---------------------------------------------------------------------- */

/* "major.minor.patch" of the library in use, and its FLX_VERSION code
 * (which may differ from FLX_VERSION_CODE of the header a program was
 * compiled with, when the shared library is newer). */
FLX_API const char *flx_version_string(void);
FLX_API int flx_version(void);
/* Comma-separated features compiled in, e.g. "tcp,ib,hwloc,asan". */
FLX_API const char *flx_build_features(void);

/* ---------------------------------------------------------------------- */
/* Gradient compression and synchronisation                               */
/* ---------------------------------------------------------------------- */

/*
 * A gradient-sync object owns everything one flat gradient of n floats
 * needs to be synchronised with compression: the residuals of error
 * feedback (one per parameter, zero at creation), the selection state, the
 * buffers.  One call per training step compresses g + e, communicates,
 * decompresses into the caller's buffer and updates the residuals; the
 * result is the same, bit for bit, on every rank.
 *
 * "Kept fraction" c in (0, 1]: k = max(1, floor(c n)) elements are sent
 * (c n as exact arithmetic has it: 0.29 of 100 keeps 29).
 * Methods:
 *   NONE      dense allreduce of the n floats (no residual)
 *   TOPK      the k largest |g + e| (ties: lower index); combined by
 *             opts.collective: ARTOPK (one shared index set, values by a
 *             dense allreduce of k floats) or ALLGATHER (every rank's
 *             (value, int32 index) pairs gathered and summed locally)
 *   ARTOPK    TOPK with FLX_GSYNC_COLL_ARTOPK
 *   RANDK     k indices drawn from (seed, step): the same on every rank, so
 *             the values combine by an allreduce of k floats
 *   FP16/BF16 the gradient cast to 16 bits, combined by a half allreduce
 *             (FP16 with error feedback sends at most about 65504 / N a
 *             rank, the rest kept in the residual: the half sum cannot
 *             overflow)
 *   QSGD8     8-bit levels with stochastic rounding and a float scale per
 *             bucket of opts.qsgd_bucket elements, combined by an allgather
 *   POWERSGD  rank-r PowerSGD of the gradient viewed as a near-square
 *             matrix, two allreduces, warm-started
 *
 * Every flx_gsync_* call except create and destroy is local unless it says
 * otherwise; flx_gsync_step and flx_gsync_set_* must be called by every rank
 * with the same arguments (other than the gradient) in the same order.
 */
typedef struct flx_gsync *flx_gsync_h;

typedef enum {
    FLX_COMPRESS_NONE = 0,
    FLX_COMPRESS_TOPK,
    FLX_COMPRESS_RANDK,
    FLX_COMPRESS_ARTOPK,
    FLX_COMPRESS_FP16,
    FLX_COMPRESS_BF16,
    FLX_COMPRESS_QSGD8,
    FLX_COMPRESS_POWERSGD,
    FLX_COMPRESS_COUNT
} flx_compress_t;

/* Top-k selection: exact (radix selection), or approximate (a threshold
 * from the previous step or a sample; returns the exact top-k whenever its
 * count lands in its window, which is nearly always). */
typedef enum { FLX_SELECT_EXACT = 0, FLX_SELECT_APPROX } flx_select_t;

/* AR-Topk's index set: STAR (leader = step mod N), VAR (leader = largest
 * EWMA of ||g||), VOTE (union of every rank's top-ceil(k/N), scored by
 * summed magnitude, trimmed to k: for non-IID data). */
typedef enum { FLX_LEADER_STAR = 0, FLX_LEADER_VAR, FLX_LEADER_VOTE } flx_leader_t;

/* How AR-Topk's index set travels: SERIAL (broadcast, then allreduce, as in
 * the paper), PREVIOUS (step t uses step t-1's set; the next set moves in
 * the background while the caller computes), PIPELINED (the indices ride
 * with the values through one fused ring; up to 1024 ranks, SERIAL above).
 * DEFAULT: PIPELINED, the winner on this project's measurements (README
 * "Compression"). */
typedef enum {
    FLX_INDEX_DEFAULT = 0,
    FLX_INDEX_SERIAL,
    FLX_INDEX_PREVIOUS,
    FLX_INDEX_PIPELINED,
} flx_index_mode_t;

/* The collective that combined a step's values.  For TOPK, AUTO picks AR-Topk
 * or the sparse allgather each step from the communicator's alpha-beta
 * model (DESIGN.md's cost formulas). */
typedef enum {
    FLX_GSYNC_COLL_AUTO = 0,
    FLX_GSYNC_COLL_ARTOPK,
    FLX_GSYNC_COLL_ALLGATHER,
    FLX_GSYNC_COLL_ALLREDUCE, /* dense (NONE, RANDK, FP16, BF16, POWERSGD) */
} flx_gsync_coll_t;

/* Which fields of flx_gsync_opts_t are set; the others take the defaults. */
enum {
    FLX_GSYNC_OPT_METHOD = 1u << 0,
    FLX_GSYNC_OPT_KEPT_FRACTION = 1u << 1,
    FLX_GSYNC_OPT_SELECT = 1u << 2,
    FLX_GSYNC_OPT_ERROR_FEEDBACK = 1u << 3,
    FLX_GSYNC_OPT_LEADER = 1u << 4,
    FLX_GSYNC_OPT_INDEX_MODE = 1u << 5,
    FLX_GSYNC_OPT_COLLECTIVE = 1u << 6,
    FLX_GSYNC_OPT_POWERSGD_RANK = 1u << 7,
    FLX_GSYNC_OPT_OP = 1u << 8,
    FLX_GSYNC_OPT_SEED = 1u << 9,
    FLX_GSYNC_OPT_THREADS = 1u << 10,
    FLX_GSYNC_OPT_QSGD_BUCKET = 1u << 11,
    FLX_GSYNC_OPT_VAR_EWMA = 1u << 12,
};

typedef struct {
    uint64_t field_mask;         /* FLX_GSYNC_OPT_* bits of the fields set     */
    flx_compress_t method;       /* default FLX_COMPRESS_NONE                  */
    double kept_fraction;        /* c in (0, 1], default 0.01                  */
    flx_select_t select;         /* default FLX_SELECT_APPROX                  */
    int error_feedback;          /* 0 or 1, default 1 (ignored by NONE)        */
    flx_leader_t leader;         /* AR-Topk, default FLX_LEADER_STAR           */
    flx_index_mode_t index_mode; /* AR-Topk, default FLX_INDEX_DEFAULT         */
    flx_gsync_coll_t collective; /* TOPK: AUTO, ARTOPK or ALLGATHER; default ARTOPK */
    int powersgd_rank;           /* >= 1, default 4 (clamped to the matrix)    */
    flx_op_t op;                 /* FLX_AVG (default) or FLX_SUM               */
    uint64_t seed;               /* random-k, QSGD, PowerSGD's Q; same on all ranks */
    int threads;                 /* selection threads for n >= 4 Mi, default 1; 0: all CPUs */
    unsigned qsgd_bucket;        /* elements per QSGD scale, default 512       */
    double var_ewma;             /* VAR: weight of the newest norm, (0, 1], default 0.1 */
} flx_gsync_opts_t;

/* What one step did. */
typedef struct {
    uint64_t step;               /* 0 for the first step                       */
    flx_compress_t method;
    flx_gsync_coll_t collective; /* what combined the values                   */
    size_t k;                    /* elements sent (VOTE: the union, <= k)      */
    int leader;                  /* rank whose index set was used, -1: none    */
    uint64_t bytes_sent;         /* payload bytes this rank sent in the step   */
    double select_s;             /* g + e, selection / encoding                */
    double comm_s;               /* collectives, waits included                */
    double decompress_s;         /* decoding into the output, residual update  */
    double gain;                 /* ||C(g + e)|| / ||g + e|| on this rank, 1 for NONE */
} flx_gsync_report_t;

/* Fill opts with the defaults (field_mask = 0). */
FLX_API void flx_gsync_opts_default(flx_gsync_opts_t *opts);

/* Create a gradient-sync object for n floats (1 <= n < 2^31) on comm.
 * Collective (all ranks, same n and options).  opts may be NULL (all
 * defaults).  FLX_ERR_INVALID_ARG (one log line) for n = 0, c outside
 * (0, 1], an unknown method / selection / leader / mode / collective, op
 * other than SUM and AVG, powersgd_rank < 1, qsgd_bucket = 0, var_ewma
 * outside (0, 1]; one rank's refusal fails every rank alike (its own line
 * says why).  Ranks whose n or options differ (threads and error_feedback
 * may): FLX_ERR_MISMATCH on every rank, one log line naming the first that
 * differs.  Either way the communicator keeps working.  On success *h_p
 * owns its memory and borrows comm (which must outlive it). */
FLX_API flx_status_t flx_gsync_create(flx_comm_h comm, size_t n, const flx_gsync_opts_t *opts,
                                      flx_gsync_h *h_p);

/* One step, collective: grad_in_out[0, n) holds this rank's gradient g; on
 * FLX_OK it holds the synchronised gradient (sum or mean over the ranks of
 * the decompressed C(g + e)), identical on every rank, and the residuals
 * hold g + e - C(g + e).  report_p may be NULL.
 * A NaN or Inf in any rank's gradient: every rank returns
 * FLX_ERR_INVALID_ARG (the rank that saw it logs one line; NONE, which
 * finds it in the sum, logs one line on every rank), grad_in_out and the
 * residuals are left as they were, the communicator keeps working (NONE:
 * grad_in_out then holds the non-finite sum).  Finite gradients
 * whose synchronised sum overflows float (or, PowerSGD, whose products
 * do): every rank returns FLX_ERR_INVALID_ARG with one log line, the
 * residuals (and PowerSGD's warm start) are left as they were, and
 * grad_in_out holds either the gradient or the non-finite result.
 * Communication errors are the communicator's (FLX_ERR_PEER_LOST, ...). */
FLX_API flx_status_t flx_gsync_step(flx_gsync_h h, float *grad_in_out,
                                    flx_gsync_report_t *report_p);

/* Change the kept fraction from the next step on (the controller does so
 * every step).  Same c on every rank.  FLX_ERR_INVALID_ARG for c outside
 * (0, 1] or NaN (nothing changes); FLX_ERR_NO_MEMORY if a larger k needs
 * buffers that cannot be had. */
FLX_API flx_status_t flx_gsync_set_kept_fraction(flx_gsync_h h, double kept_fraction);
/* TOPK: switch between FLX_GSYNC_COLL_AUTO, _ARTOPK and _ALLGATHER from the
 * next step on (same on every rank).  FLX_ERR_INVALID_ARG for another method
 * or collective; FLX_ERR_UNSUPPORTED for one that create did not prepare
 * (create with FLX_GSYNC_COLL_AUTO to switch freely). */
FLX_API flx_status_t flx_gsync_set_collective(flx_gsync_h h, flx_gsync_coll_t collective);
/* k for the current kept fraction. */
FLX_API size_t flx_gsync_kept(flx_gsync_h h);
/* The residuals e[0, n) (NULL without error feedback); valid until the next
 * step or destroy.  For checkpoints and tests. */
FLX_API const float *flx_gsync_residual(flx_gsync_h h);
/* Add the residuals into grad[0, n) and zero them (local): for a caller that
 * switches this step to an uncompressed sync, so nothing held back is lost.
 * FLX_ERR_INVALID_ARG for a NULL handle or gradient. */
FLX_API flx_status_t flx_gsync_flush_residual(flx_gsync_h h, float *grad);

/* Wait for a background index exchange still running (collective, like a
 * step), free everything.  Returns that exchange's status: FLX_OK, or its
 * failure (FLX_ERR_PEER_LOST where a peer died meanwhile); everything is
 * freed either way.  NULL is a no-op. */
FLX_API flx_status_t flx_gsync_destroy(flx_gsync_h h);

FLX_API const char *flx_compress_name(flx_compress_t method);
FLX_API const char *flx_gsync_coll_name(flx_gsync_coll_t collective);

/* Allgather with a count per rank: rank i's sendcount elements land at
 * recvbuf + displs_p[i] elements; counts_p and displs_p (size entries each,
 * the caller's) are filled from the counts every rank sent, which travel
 * first, each with its rank's recvcapacity (recvbuf's size in elements): a
 * total above any rank's recvcapacity is FLX_ERR_INVALID_ARG on every rank
 * (no data moved, the communicator keeps working).  algo: FLX_ALGO_AUTO,
 * FLX_ALGO_RING or FLX_ALGO_RD (Bruck); tree and hd choose as auto, as for
 * flx_allgather.  Ranks that pass different dtypes get FLX_ERR_MISMATCH. */
FLX_API flx_status_t flx_allgatherv(flx_comm_h comm, const void *sendbuf, size_t sendcount,
                                    void *recvbuf, size_t recvcapacity, size_t *counts_p,
                                    size_t *displs_p, flx_dtype_t dtype, flx_algo_t algo);

/* ---------------------------------------------------------------------- */
/* The controller: every step it picks the collective and the kept        */
/* fraction of a gradient sync, trading predicted step time against the   */
/* gradient information kept (README "Policies and the controller").       */
/* ---------------------------------------------------------------------- */
typedef struct flx_ctl *flx_ctl_h;

/* FLEX: score every candidate {dense ring, dense tree} + {AR-Topk, sparse
 *       allgather} x {kept fractions} by predicted time (alpha-beta model,
 *       bandwidth refreshed from live timings, measured selection cost)
 *       and the energy kept, delta = gain^2, take the best
 *       weight ln(T_min/T) + (1-weight) ln(delta) (0.6; 0.5: delta per second)
 *       among dense and the compressed candidates whose gain is at least
 *       min_gain (0.45); in the critical regime no kept fraction below
 *       low_kept.
 * ACCORDION: AR-Topk at critical_kept in the critical regime, low_kept
 *       otherwise (a kept fraction of 1: a dense allreduce, ring or tree,
 *       whichever is predicted faster); fractions is checked but not used.
 * GRAVAC: AR-Topk at the fraction with the largest gain / time among those
 *       whose gain is >= min_gain (dense when none). */
typedef enum { FLX_CTL_FLEX = 0, FLX_CTL_ACCORDION, FLX_CTL_GRAVAC } flx_ctl_mode_t;

#define FLX_CTL_MAX_FRACTIONS 8
#define FLX_CTL_MAX_SEGMENTS 32

enum {
    FLX_CTL_OPT_MODE = 1u << 0,
    FLX_CTL_OPT_WEIGHT = 1u << 1,
    FLX_CTL_OPT_FRACTIONS = 1u << 2,
    FLX_CTL_OPT_ETA = 1u << 3,
    FLX_CTL_OPT_INTERVAL = 1u << 4,
    FLX_CTL_OPT_CRITICAL_KEPT = 1u << 5,
    FLX_CTL_OPT_LOW_KEPT = 1u << 6,
    FLX_CTL_OPT_MIN_GAIN = 1u << 7,
    FLX_CTL_OPT_SEGMENTS = 1u << 8,
    FLX_CTL_OPT_LOG_PATH = 1u << 9,
};

typedef struct {
    uint64_t field_mask;      /* FLX_CTL_OPT_* bits of the fields set       */
    flx_ctl_mode_t mode;      /* default FLX_CTL_FLEX                       */
    double weight;            /* FLEX: weight of time, [0, 1], default 0.6  */
    int nfractions;           /* kept fractions tried besides dense: default */
    double fractions[FLX_CTL_MAX_FRACTIONS]; /* 0.1 0.033 0.011 0.004 0.001 */
    double eta;               /* critical if the change is >= eta, default 0.5 */
    int interval;             /* steps per critical-regime test, default 50 */
    double critical_kept;     /* ACCORDION when critical, default 0.1       */
    double low_kept;          /* ACCORDION outside the critical regime; FLEX:
                                 the smallest while critical; default 0.01 */
    double min_gain;          /* smallest gain allowed: default 0.45 (FLEX); */
                              /* GRAVAC 0.7 unless FLX_CTL_OPT_MIN_GAIN set */
    int nsegments;            /* layers: lengths summing to n, default one  */
    size_t segments[FLX_CTL_MAX_SEGMENTS];
    const char *log_path;     /* rank 0 writes one CSV row per decision     */
} flx_ctl_opts_t;

/* One step's decision, its inputs and what the sync did. */
typedef struct {
    uint64_t step;
    int critical;             /* 1: critical regime (little compression)    */
    flx_gsync_coll_t collective; /* ALLREDUCE (dense), ARTOPK or ALLGATHER  */
    flx_algo_t algo;          /* dense: FLX_ALGO_RING or FLX_ALGO_TREE       */
    double kept_fraction;     /* 1 for dense                                */
    double predicted_s;       /* predicted step time of the choice          */
    double predicted_dense_s; /* ... and of the fastest dense candidate     */
    double gain_estimate;     /* predicted gain of the choice               */
    double bandwidth;         /* live estimate of B, bytes/s                */
    double compute_s;         /* compute time the ranks reported (mean) for */
                              /* the step the decision's statistics are from */
    double decide_s;          /* this rank's own time to decide: statistics,  */
                              /* model update, scoring (agreement excluded)  */
    double agree_s;           /* waiting for the agreement (the slowest rank  */
                              /* included): the last step's, started when it  */
                              /* ended; at the first step, its own            */
    double combined_gain;     /* every 10th step: ||S|| / ||X||, S the synced */
                              /* update, X the mean of the ranks' g + e     */
                              /* (sampled); -1 on the other steps           */
    flx_gsync_report_t sync;  /* the sync: bytes, selection, comm, gain     */
} flx_ctl_report_t;

FLX_API void flx_ctl_opts_default(flx_ctl_opts_t *opts);
/* Collective (same n and options on every rank).  FLX_ERR_INVALID_ARG with
 * one log line for n = 0, weight outside [0, 1], a fraction outside (0, 1),
 * more than FLX_CTL_MAX_FRACTIONS, eta <= 0, interval < 1, segments that
 * do not sum to n, an unwritable log_path (rank 0).  What fails on one
 * rank fails every rank's call alike (that rank's line says why; the
 * communicator keeps working).  Borrows comm. */
FLX_API flx_status_t flx_ctl_create(flx_comm_h comm, size_t n, const flx_ctl_opts_t *opts,
                                    flx_ctl_h *h_p);
/* Collective: decide, then sync grad_in_out[0, n) (this rank's gradient in,
 * the mean over the ranks out, identical on every rank).  compute_s is the
 * time this rank spent computing the gradient (a model input).  Residuals
 * of compressed steps are kept (error feedback) and sent on a later step;
 * a dense step sends them along.  The ranks agree the decision's inputs
 * with a non-blocking allreduce started at the end of each step, so the
 * next step decides on statistics one step old; a collective issued on
 * comm between two steps runs after it, and flx_comm_link_model /
 * flx_allreduce_algo read between two steps may differ across ranks.
 * A NaN or Inf in any rank's gradient, or a sum that overflows: every rank
 * returns FLX_ERR_INVALID_ARG (as flx_gsync_step; a dense step, as NONE), the
 * residuals stay, and the next step's statistics do not see it.
 * compute_s must be in [0, 1e6] seconds (else FLX_ERR_INVALID_ARG, local).
 * report_p may be NULL. */
FLX_API flx_status_t flx_ctl_step(flx_ctl_h h, float *grad_in_out, double compute_s,
                                  flx_ctl_report_t *report_p);
/* The learning rate just decayed: the next interval counts as critical.
 * Call on every rank at the same step. */
FLX_API void flx_ctl_lr_changed(flx_ctl_h h);
/* The residuals e[0, n) that error feedback holds back after the last
 * step, or NULL when it holds none (no step yet, or the last one was
 * dense).  A position this rank sent in the last step has e = 0 (what
 * momentum correction needs to know).  Valid until the next step. */
FLX_API const float *flx_ctl_residual(flx_ctl_h h);
/* Collective: waits for the agreement the last step started (so call it
 * before flx_comm_destroy, on every rank) and returns its status if it
 * failed (e.g. FLX_ERR_PEER_LOST), else the gradient sync's teardown's. */
FLX_API flx_status_t flx_ctl_destroy(flx_ctl_h h);
FLX_API const char *flx_ctl_mode_name(flx_ctl_mode_t mode);

#ifdef __cplusplus
}
#endif
#endif /* FLEXCOLL_H */
