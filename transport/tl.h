/* tl.h -- the transport layer's one internal interface.
 *
 * A transport context (tl_ctx_t) holds the connections of one communicator
 * to every peer.  Collectives talk to it only through tl_ops_t, so the tcp
 * and ib backends are interchangeable:
 *
 *   isend / irecv   post a tagged message to or from one peer; the request
 *                   is owned by the caller and completes in place
 *   progress        move data; waits at most timeout_s for an event
 *   fail            poison the context: every pending and later request
 *                   fails with the given status, peers are told from which
 *                   collective on (the earlier ones completed here and may
 *                   still complete there)
 *
 * Messages between two ranks arrive in the order they were sent.  A receive
 * matches the message with the same (seq, step) from that peer; the
 * signature (kind, dtype, count) must then agree too, or both requests fail
 * with FLX_ERR_MISMATCH.  Message lengths are checked against the posted
 * receive before any byte lands in the user's buffer.  Collectives run one
 * at a time on a context, so a message of a collective older than the
 * newest one a request was made for has outlived its collective here: the
 * ranks' calls differed (a broadcast two ranks each took for their own
 * root), and the newest collective fails with FLX_ERR_MISMATCH.
 */
#ifndef FLX_TRANSPORT_TL_H
#define FLX_TRANSPORT_TL_H

#include "flexcoll.h"
#include "common/config.h"

#include <stddef.h>
#include <stdint.h>

/* What a message belongs to: collective sequence number and step, plus the
 * signature every rank must agree on. */
typedef struct {
    uint32_t seq;    /* collective number on the communicator          */
    uint32_t step;   /* step (and chunk) inside the collective          */
    uint8_t kind;    /* TL_KIND_* << 3 | the flx_algo_t                  */
    uint8_t dtype;   /* flx_dtype_t                                      */
    uint16_t op;     /* flx_op_t, or what the kind says (TL_KIND_*)     */
    uint64_t count;  /* the collective's element count                   */
} tl_tag_t;

/* Collective kinds on the wire, with what their op field holds. */
enum {
    TL_KIND_ALLREDUCE = 1,      /* op: flx_op_t                          */
    TL_KIND_ALLGATHER = 2,      /* op: 0                                 */
    TL_KIND_BCAST = 3,          /* op: the root                          */
    TL_KIND_REDUCE_SCATTER = 4, /* op: flx_op_t                          */
    TL_KIND_BARRIER = 5,        /* op: 0                                 */
    TL_KIND_CALIBRATE = 6,      /* op: flx_op_t (the model's agreements) */
    TL_KIND_ALLGATHERV = 24,    /* op: 0 the counts, 1 the blocks        */
    TL_KIND_ARTOPK = 25,        /* op: the leader                        */
};

/* A tag's signature in words, for the log: "broadcast (tree) of 1000
 * float32, root 2"; numbers where a field holds no known value. */
void tl_tag_describe(const tl_tag_t *t, char *buf, size_t len);
/* The backends' lines: a message whose signature differs from this rank's
 * call (theirs: the message's, ours: the request's or the running
 * collective's); a message of a collective this rank finished without
 * receiving it (now: the collective that fails here). */
void tl_log_mismatch(int rank, int peer, const tl_tag_t *theirs, const tl_tag_t *ours);
void tl_log_stale(int rank, int peer, const tl_tag_t *theirs, uint32_t now);

typedef struct tl_req {
    struct tl_req *next;     /* backend queue link                      */
    int peer;
    int is_send;
    tl_tag_t tag;
    void *buf;
    size_t len;
    size_t done_bytes;       /* progress of the backend (a receive that
                                took an early message: its bytes so far);
                                FLX_TIMEOUT counts while it stands still */
    volatile int complete;   /* set when finished (status is final)     */
    flx_status_t status;
    uint64_t priv[7];        /* backend scratch (e.g. the wire header)  */
} tl_req_t;

typedef struct tl_ctx tl_ctx_t;
struct boot;

typedef struct tl_ops {
    const char *name;
    /* Build the data path to every peer over the authenticated bootstrap
     * mesh (which the backend may adopt).  On success *ctx_p is owned by
     * the caller and released with destroy. */
    flx_status_t (*create)(struct boot *boot, const flx_config_t *cfg,
                           tl_ctx_t **ctx_p);
    /* Say goodbye to every peer, drain, close.  Never blocks longer than
     * the configured timeout. */
    void (*destroy)(tl_ctx_t *ctx);
    flx_status_t (*isend)(tl_ctx_t *ctx, int peer, const tl_tag_t *tag,
                          const void *buf, size_t len, tl_req_t *req);
    flx_status_t (*irecv)(tl_ctx_t *ctx, int peer, const tl_tag_t *tag,
                          void *buf, size_t len, tl_req_t *req);
    /* FLX_OK when something may have completed or the timeout passed;
     * an error status when the context has failed. */
    flx_status_t (*progress)(tl_ctx_t *ctx, double timeout_s);
    /* Fail every pending request with status and tell every peer that
     * collective seq (the first that did not complete on this rank) and
     * later ones fail. */
    void (*fail)(tl_ctx_t *ctx, flx_status_t status, uint32_t seq, const char *why);
    /* The status the context failed with, FLX_OK while healthy. */
    flx_status_t (*error)(tl_ctx_t *ctx);
    /* Optional (NULL: nothing to do): the range stays mapped until
     * mem_deregister, so the backend may keep it registered. */
    flx_status_t (*mem_register)(tl_ctx_t *ctx, void *addr, size_t len);
    flx_status_t (*mem_deregister)(tl_ctx_t *ctx, void *addr);
} tl_ops_t;

extern const tl_ops_t tl_tcp_ops;
#ifdef FLX_HAVE_VERBS
extern const tl_ops_t tl_ib_ops;
/* an ACTIVE RDMA port exists (FLX_NET=auto picks ib then) */
int ib_dev_available(void);
#endif

/* Equal signatures? (the (seq, step) match is the backend's) */
static inline int tl_tag_sig_equal(const tl_tag_t *a, const tl_tag_t *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op &&
           a->count == b->count;
}

/* The newest collective a backend has seen in a request: its seq and its
 * signature.  A rank that called another collective or count may send
 * nothing this rank posts a receive for (a count-0 call's barrier, say),
 * so early messages of the newest collective are checked against it. */
typedef struct {
    tl_tag_t tag; /* its seq: 0 before the first request */
    int set;
} tl_cur_t;

/* A request with tag: 1 when it starts a newer collective (the caller
 * then checks the early messages of tag->seq it holds), else 0. */
static inline int tl_cur_note(tl_cur_t *cur, const tl_tag_t *tag)
{
    if (cur->set && (int32_t)(tag->seq - cur->tag.seq) <= 0)
        return 0;
    cur->tag = *tag;
    cur->set = 1;
    return 1;
}

#endif
