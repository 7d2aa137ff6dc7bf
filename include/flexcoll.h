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

#define FLX_VERSION_MAJOR 0
#define FLX_VERSION_MINOR 1
#define FLX_VERSION_PATCH 0

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
 * (integer division for integer types). */
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
/* Destroy a communicator; waits for its pending requests.  NULL is a no-op. */
FLX_API flx_status_t flx_comm_destroy(flx_comm_h comm);
FLX_API int flx_comm_rank(flx_comm_h comm);
FLX_API int flx_comm_size(flx_comm_h comm);
/* Name of the transport in use ("tcp" or "ib"). */
FLX_API const char *flx_comm_net_name(flx_comm_h comm);

/*
 * Declare that [ptr, ptr+len) stays allocated until flx_mem_deregister.
 * On the ib backend such buffers are registered once and reused zero-copy
 * (other buffers are registered for each message that needs it, since
 * memory freed and allocated again may have new pages).  No effect on tcp.
 * Call collectively or not: it is local.
 */
FLX_API flx_status_t flx_mem_register(flx_comm_h comm, void *ptr, size_t len);
FLX_API flx_status_t flx_mem_deregister(flx_comm_h comm, void *ptr);

/* The measured link model: time(bytes) = alpha + bytes / beta. */
typedef struct {
    double alpha_s;          /* one-way latency of a small message, seconds */
    double beta_bytes_per_s; /* point-to-point bandwidth, bytes/second      */
} flx_link_model_t;
FLX_API flx_status_t flx_comm_link_model(flx_comm_h comm,
                                         flx_link_model_t *model_p);

/* The algorithm the communicator would pick for an allreduce of count
 * elements of dtype (honours FLX_ALGO).  Same answer on every rank. */
FLX_API flx_algo_t flx_allreduce_algo(flx_comm_h comm, size_t count,
                                      flx_dtype_t dtype);

/* ---------------------------------------------------------------------- */
/* Blocking collectives.  All ranks call them in the same order with the   */
/* same count, dtype, op, root and algo; a mismatch returns                */
/* FLX_ERR_MISMATCH on every rank involved.  In place: sendbuf == recvbuf  */
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
/* Wait for the request, free it, return its status. */
FLX_API flx_status_t flx_wait(flx_request_h req);

/* ---------------------------------------------------------------------- */
/* Library information                                                     */
/* ---------------------------------------------------------------------- */

FLX_API const char *flx_version_string(void);
/* Comma-separated features compiled in, e.g. "tcp,ib,hwloc,asan". */
FLX_API const char *flx_build_features(void);

#ifdef __cplusplus
}
#endif
#endif /* FLEXCOLL_H */
