/* comm.h -- the communicator object and the primitives every algorithm is
 * written over: send, recv, wait and the per-collective tag. */
#ifndef FLX_COLLECTIVES_COMM_H
#define FLX_COLLECTIVES_COMM_H

#include "flexcoll.h"
#include "common/config.h"
#include "transport/tl.h"
#include "transport/boot.h"

#include <pthread.h>

/* Collective kinds on the wire (with the algorithm in the low bits). */
enum {
    COLL_ALLREDUCE = TL_KIND_ALLREDUCE,
    COLL_ALLGATHER = TL_KIND_ALLGATHER,
    COLL_BCAST = TL_KIND_BCAST,
    COLL_REDUCE_SCATTER = TL_KIND_REDUCE_SCATTER,
    COLL_BARRIER = TL_KIND_BARRIER,
    COLL_CALIBRATE = TL_KIND_CALIBRATE,
};

typedef struct flx_request {
    struct flx_request *next;
    struct flx_request *live_prev, *live_next; /* the live requests (async.c) */
    uint64_t serial;          /* the caller's handle: never reused       */
    int claimed;              /* a flx_wait or flx_test has it (async.c) */
    struct flx_comm *comm;
    int kind;                 /* COLL_ALLREDUCE or COLL_ALLGATHER */
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    flx_dtype_t dtype;
    flx_op_t op;
    flx_algo_t algo;
    int done;
    flx_status_t status;
} flx_request_t;

/* A latency and an inverse bandwidth: time = c0 + a alpha + b inv_bw. */
typedef struct {
    double alpha, inv_bw;
} model_ab_t;

/* The allreduce algorithms with a model each: index algo - FLX_ALGO_RING;
 * the allgather's two (ring, Bruck): model_ag_index. */
enum { MODEL_NAR = 4, MODEL_NAG = 2, MODEL_PERIOD_MAX = 32 };

/* The live model's state on this rank (model.c). */
typedef struct {
    int started;
    model_ab_t link, ar[MODEL_NAR], ag[MODEL_NAG];    /* this rank's EWMAs */
    model_ab_t link0, ar0[MODEL_NAR], ag0[MODEL_NAG]; /* where they started:
                                                         their bounds     */
    int nbw, nlat;            /* observations since the last agreement    */
    unsigned long autos;      /* automatic allreduce choices made so far   */
    unsigned long ag_autos;   /* ... and allgather choices                 */
    double ran_ar[MODEL_NAR]; /* the largest size (bytes) each allreduce */
    double ran_ag[MODEL_NAG]; /* and (per rank) allgather algorithm has
                                 run at, from the fit on: exploration stays
                                 within it (the same on every rank: they
                                 make the same calls)                     */
    int look_n[MODEL_NAR];    /* each allreduce algorithm's observations
                                 in the look under way (model.c; -1: its
                                 first run, left out)                    */
    double look[MODEL_NAR][3]; /* ... their 1/beta each (MODEL_LOOK)      */
    double look_bytes[MODEL_NAR]; /* ... and the size that started it    */
    double per[MODEL_NAR][MODEL_PERIOD_MAX]; /* each allreduce algorithm's
                                 bandwidth-bound 1/beta observations since
                                 the last agreement (outside looks)       */
    double per_bytes[MODEL_NAR][MODEL_PERIOD_MAX]; /* ... and their sizes */
    int per_n[MODEL_NAR];     /* ... how many (the latest MODEL_PERIOD_MAX
                                 kept)                                    */
    flx_algo_t explored;      /* the allreduce running (or the last one
                                 run) explores this algorithm (AUTO: not);
                                 set by every pick for a call that runs  */
    int explore_first;        /* ... and is the first of its exploration  */
    double hist[MODEL_NAR + MODEL_NAG][2][2]; /* [ar..., ag...]
                                 [alpha, 1/beta]: the last two
                                 observations (-1: none; the start value
                                 first), for model_learn's spike filter   */
} model_live_t;

struct flx_comm {
    int rank;
    int size;
    flx_config_t cfg;
    boot_t *boot;
    const tl_ops_t *tl;
    tl_ctx_t *tlctx;
    uint32_t seq;             /* next collective's sequence number       */
    tl_tag_t tag;             /* the running collective's tag            */
    const char *coll_name;    /* the running collective, for log lines   */
    flx_link_model_t model;   /* written under exec and lock             */
    model_ab_t ar[MODEL_NAR]; /* each allreduce algorithm's own (alpha,
                                 1/beta): fitted at creation, then live;
                                 written under exec and lock             */
    model_ab_t ag[MODEL_NAG]; /* the same for the allgather's algorithms */
    model_live_t live;
    flx_status_t err;         /* sticky: the first failure (under exec)  */
    /* written by any thread, read with __atomic_load_n */
    int aborted;              /* flx_comm_abort was called               */
    int first_err;            /* the first error (flx_comm_get_async_error) */
    uint64_t stalled_us;      /* gaps over FLX_STALL_S (common/stall.h) in
                                 this process's waits, summed (atomic: see
                                 coll_stalled_us) */
    void *scratch[2];         /* [0] algorithms, [1] api working copies  */
    size_t scratch_len[2];
    size_t stream_min;        /* local copies above this stream (copy.h) */

    /* background progress of non-blocking collectives */
    pthread_mutex_t exec;     /* held while a collective runs            */
    pthread_mutex_t lock;     /* protects the queue below                */
    pthread_cond_t cond;
    flx_request_t *q_head, *q_tail;
    int pending;              /* queued + running requests               */
    int worker_started;
    int worker_stop;
    pthread_t worker;
};

/* flx_comm_abort was called (any thread may ask). */
static inline int comm_aborted(const struct flx_comm *comm)
{
    return __atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE);
}

/* Start a collective: take the next sequence number and set the tag. */
void coll_begin(flx_comm_h comm, int kind, flx_algo_t algo, flx_dtype_t dtype,
                unsigned op, size_t count, const char *name);
/* No collective runs now (every one begun has completed or failed): a
 * failure from here until the next coll_begin is the next collective's. */
void coll_end(flx_comm_h comm);
flx_status_t coll_send(flx_comm_h comm, int peer, uint32_t step, const void *buf,
                       size_t len, tl_req_t *req);
flx_status_t coll_recv(flx_comm_h comm, int peer, uint32_t step, void *buf, size_t len,
                       tl_req_t *req);
/* Wait for one request / all n; FLX_ERR_TIMED_OUT when the awaited message
 * moves no byte for FLX_TIMEOUT (logged with the collective, its number and
 * the peer): a long message that keeps arriving does not time out. */
flx_status_t coll_wait(flx_comm_h comm, tl_req_t *req);
flx_status_t coll_waitall(flx_comm_h comm, tl_req_t *reqs, size_t n);
/* How long one wait has waited, for FLX_TIMEOUT.  A gap longer than
 * FLX_STALL_S (common/stall.h) between two of its progress rounds is not
 * counted: this process did not run (stopped by SIGTSTP or SIGSTOP, as flxrun does to
 * every rank on Ctrl-Z, or not scheduled), so after a stop of the whole job
 * a rank does not time out on a peer that resumed a moment after it.  A
 * peer stopped alone still times out: the waiting rank's clock has no gap. */
typedef struct {
    double since; /* when the wait began or its message last moved, shifted by every gap */
    double last;  /* the last progress round */
    size_t seen;  /* the awaited request's done_bytes then */
} coll_clock_t;

void coll_clock_start(coll_clock_t *clk);
/* Microseconds this process spent not running inside collectives' waits
 * (every gap coll_clock_t leaves out), since the communicator was made;
 * any thread may read it. */
uint64_t coll_stalled_us(flx_comm_h comm);
/* One progress round; fails with FLX_ERR_TIMED_OUT when *waiting (may be
 * NULL) is still incomplete FLX_TIMEOUT after clk->since, gaps left out. */
flx_status_t coll_progress(flx_comm_h comm, tl_req_t *waiting, coll_clock_t *clk);
/* One progress round that neither waits nor yields the core (between
 * pieces of local work). */
flx_status_t coll_progress_now(flx_comm_h comm);
/* Out of place, right behind the send of a chunk of this rank's block
 * (block bytes in all): the chunk's n bytes go from src to their place dst
 * while the send has them in cache -- with streaming stores when the block
 * is larger than the core's L2 (comm->stream_min), else memcpy -- and then,
 * unless it was the last chunk (the caller's wait does that), one
 * coll_progress_now moves the sockets on. */
flx_status_t coll_copy_behind(flx_comm_h comm, void *dst, const void *src, size_t n,
                              size_t block, int last);
/* Exchange: post recv then send, wait both. */
flx_status_t coll_sendrecv(flx_comm_h comm, int dst, const void *sbuf, size_t slen,
                           int src, void *rbuf, size_t rlen, uint32_t step);

/* step numbers: phase in the high bits, chunk in the low 20 */
#define COLL_STEP(phase, chunk) (((uint32_t)(phase) << 20) | (uint32_t)(chunk))
#define COLL_MAX_CHUNKS (1u << 20)
/* 12 bits of phase: the ring allreduce's 2N - 2 steps fit up to N = 2048 */
#define COLL_MAX_RANKS 2048

/* Elements per pipeline chunk for this element size (>= 1). */
size_t coll_chunk_elems(flx_comm_h comm, size_t esize, size_t count);

#endif
