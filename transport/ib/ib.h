/* ib.h -- internals of the ib backend (rdma-core: libibverbs + librdmacm).
 *
 * One RC queue pair per peer, set up through librdmacm so that address and
 * route resolution pick the right GID and RoCE version.  Wire protocol:
 *
 *   small (len <= eager limit)  SEND of header + payload from a registered
 *                               bounce slot (inline when it fits); the
 *                               receiver copies it out of its receive slot
 *   large                       receiver-driven: the receiver registers its
 *                               buffer and SENDs a CTS {tag, addr, rkey,
 *                               len, id}; the sender RDMA-WRITEs the payload
 *                               straight into it, the last write carrying
 *                               IMM = id, which completes the receive.  A
 *                               buffer with no cached registration is
 *                               copied through a registered staging slot
 *                               instead (on either side, or both); such a
 *                               receive may wait for the sender's RTS
 *                               before it takes a slot and sends its CTS
 *
 * Every SEND and WRITE_WITH_IMM consumes a receive the peer pre-posted:
 * credits count them; returned credits ride on every header, or in a CREDIT
 * message when nothing else goes that way.  The bootstrap's TCP mesh stays
 * open beside the QPs: it carries failure reports and notices dead peers. */
#ifndef FLX_TRANSPORT_IB_H
#define FLX_TRANSPORT_IB_H

#include "transport/tl.h"
#include "transport/boot.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>

enum { IB_MSG_EAGER = 1, IB_MSG_CTS = 2, IB_MSG_CREDIT = 3, IB_MSG_BYE = 4, IB_MSG_RTS = 5 };

typedef struct {
    uint8_t type;
    uint8_t kind;
    uint8_t dtype;
    uint8_t pad;
    uint16_t op;
    uint16_t credits;     /* receives re-posted for the peer since last told */
    uint32_t seq;
    uint32_t step;
    uint64_t count;
    uint64_t len;         /* EAGER: payload bytes; CTS: buffer bytes       */
    uint64_t addr;        /* CTS */
    uint32_t rkey;        /* CTS */
    uint32_t id;          /* CTS: the IMM that will complete the receive   */
} ib_hdr_t;               /* 56 bytes */

/* A registered range (the registration cache, mr.c). */
typedef struct ib_mr_entry {
    struct ib_mr_entry *next;
    uintptr_t start, end;
    struct ibv_mr *mr;
    uint64_t last_use;
    int refs;
    int transient;        /* not in the cache: registered for one message,
                             or unpinned while in use; freed at its last put */
    int failed;           /* a request that used it failed: a late RDMA write
                             may still land, so it waits for the teardown */
    int read_only;        /* the pages were read-only: for sends only   */
} ib_mr_entry_t;

typedef struct {
    uintptr_t start, end;
    int too_big;          /* the device could not pin it whole: its messages
                             are staged or registered one by one         */
} ib_range_t;

/* Staging buffers (mr.c): one registered block of nslots slots.  A large
 * message whose buffer has no cached registration is copied into a slot
 * (send) or out of it (receive) instead of registering the buffer for that
 * one message. */
typedef struct {
    char *base;
    ib_mr_entry_t *entry; /* the block's registration (not in the cache)  */
    size_t slot_size;     /* FLX_IB_STAGE_SIZE                            */
    int nslots;           /* FLX_IB_STAGE_SLOTS; 0 = off                  */
    int *free_idx;        /* stack of free slots                          */
    int nfree;
    int broken;           /* the block could not be set up: off           */
    uint64_t staged;      /* messages that went through a slot            */
    uint64_t full;        /* ... that found every slot busy (registered)  */
    uint64_t quarantined; /* slots of failed requests, never reused       */
} ib_stage_t;

typedef struct {
    struct ibv_pd *pd;
    ib_mr_entry_t *head;
    int count;
    int max_entries;      /* FLX_IB_REG_CACHE; 0 = register per use      */
    uint64_t clock;
    uint64_t hits, misses, evictions, transient;
    uint64_t waited;      /* large messages told to wait for a staging slot
                             (out of locked memory), retries included     */
    int rank;
    int leave_pinned;     /* FLX_IB_LEAVE_PINNED in force: cache all     */
    ib_range_t *pinned;   /* ranges promised to stay mapped (cacheable)  */
    ib_mr_entry_t *dead;  /* failed entries, deregistered at the flush    */
    int npinned, cap_pinned;
    ib_stage_t stage;
} ib_mr_cache_t;

/* A registration covering [addr, addr + len): cached where the range may
 * be cached, else one for this message (entry->transient). */
flx_status_t ib_mr_get(ib_mr_cache_t *cache, void *addr, size_t len, ib_mr_entry_t **entry_p);
/* The same; quiet: a registration the device refuses (out of locked
 * memory) is FLX_ERR_NOT_FOUND with nothing logged. */
flx_status_t ib_mr_get_quiet(ib_mr_cache_t *cache, void *addr, size_t len, int quiet,
                             ib_mr_entry_t **entry_p);
/* The soft locked-memory limit as text ("8192 KiB", "unlimited"), for logs. */
void ib_memlock_str(char *buf, size_t n);
/* The same, but FLX_ERR_NOT_FOUND where only a registration for this
 * message would do (nothing is registered then). */
flx_status_t ib_mr_get_cached(ib_mr_cache_t *cache, void *addr, size_t len,
                              ib_mr_entry_t **entry_p);
/* Could len bytes be staged (staging on, set up or not yet tried, len fits
 * a slot)? */
int ib_stage_fits(const ib_mr_cache_t *cache, size_t len);
/* A free staging slot for len bytes (its index in *idx_p, the block's
 * registration in *entry_p), or NULL: staging off or broken, len too big,
 * every slot busy (counted).  The block is registered at first use. */
char *ib_stage_get(ib_mr_cache_t *cache, size_t len, int *idx_p, ib_mr_entry_t **entry_p);
char *ib_stage_addr(const ib_mr_cache_t *cache, int idx);
void ib_stage_put(ib_mr_cache_t *cache, int idx);
/* A request is done with entry; failed: its message did not complete (an
 * entry outside the cache then waits for ib_mr_cache_flush, after the QPs
 * are gone, as a late RDMA write may still land in it). */
void ib_mr_put(ib_mr_cache_t *cache, ib_mr_entry_t *entry, int failed);
void ib_mr_cache_flush(ib_mr_cache_t *cache);
/* Whether FLX_IB_LEAVE_PINNED was on when the program started and glibc
 * accepted the mallopt settings (mr.c's constructor). */
int ib_mr_leave_pinned_active(void);
/* ranges whose registrations may be cached (flx_mem_register, scratch) */
flx_status_t ib_mr_pin(ib_mr_cache_t *cache, void *addr, size_t len);
flx_status_t ib_mr_unpin(ib_mr_cache_t *cache, void *addr);

/* A pending CTS from the peer (it waits for our data). */
typedef struct ib_cts {
    struct ib_cts *next;
    ib_hdr_t hdr;
} ib_cts_t;

/* An early eager message (no receive posted yet). */
typedef struct ib_unexp {
    struct ib_unexp *next;
    ib_hdr_t hdr;
    void *buf;
} ib_unexp_t;

#define IB_MAX_QPS 8       /* FLX_IB_QPS_PER_PEER upper bound */

typedef struct {
    int peer;
    struct rdma_cm_id *id;     /* the primary QP: messages, credits, IMMs */
    struct ibv_qp *qp;
    struct rdma_cm_id *xid[IB_MAX_QPS];  /* [1..nqps-1]: extra QPs that  */
    struct ibv_qp *xqp[IB_MAX_QPS];      /* carry stripes of large writes */
    int connected;
    int errored;          /* peer reported a failure / QP error           */
    int bye;
    int bye_posted;       /* our BYE went out ...                    */
    uint64_t bye_seq;     /* ... as this send                        */
    int bye_sent_done;    /* and its completion arrived              */
    int eof;              /* bootstrap socket closed                 */
    int credits;          /* receives the peer has posted for us           */
    int to_return;        /* receives we re-posted and have not announced  */
    tl_req_t *posted_head, *posted_tail;  /* eager receives waiting        */
    tl_req_t *sendq_head, *sendq_tail;    /* eager sends and RTS, in order */
    tl_req_t *rdv_head, *rdv_tail;        /* large sends: RTS out, writing */
    ib_cts_t *cts_head, *cts_tail;
    ib_unexp_t *unexp_head, *unexp_tail;
    uint64_t s_head;      /* bounce slots: next to use (monotonic)         */
    uint64_t s_tail;      /* oldest slot not known complete                */
    int writes_inflight;
    int boot_fd;          /* the bootstrap socket to this peer             */
} ib_conn_t;

/* a receive waiting for the peer's RDMA write, found by the IMM id */
typedef struct {
    tl_req_t *req;
    int failed_peer;  /* 1 + the peer whose receive failed here, 0 none: that
                         peer may still write to this id (its write was on
                         the wire), so the id is not reused               */
} ib_rdv_slot_t;

typedef struct {
    char name[64];
    int port;
    int gid_index;
    struct sockaddr_in addr;     /* IPv4 address of the port's netdev */
} ib_dev_choice_t;

struct tl_ctx {
    int rank;
    int size;
    flx_config_t cfg;
    ib_dev_choice_t dev;
    struct rdma_event_channel *ch_listen, *ch_active;
    struct rdma_cm_id *listen_id;
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp_ch;
    struct ibv_cq *cq;
    int cq_size;
    ib_conn_t *conns;
    ib_mr_cache_t mrc;
    /* receive slots: [peer][k] of slot_size bytes, one registered block */
    char *recv_pool;
    struct ibv_mr *recv_mr;
    /* send slots: IB_SEND_SLOTS bounce buffers per peer, one registered block */
    char *send_pool;
    struct ibv_mr *send_mr;
    size_t slot_size;            /* header + eager payload                */
    size_t eager_max;            /* largest eager payload                 */
    int recv_depth;              /* receives posted per peer              */
    uint32_t max_inline;
    int nqps;                    /* QPs per peer (FLX_IB_QPS_PER_PEER)    */
    ib_rdv_slot_t *rdv;          /* [rdv_slots] by IMM id                 */
    int rdv_slots;
    uint32_t rdv_next;
    struct pollfd *pfds;
    double boot_looked;          /* coarse clock: bootstrap sockets last polled */
    flx_status_t err;
    int remote_failed;
    uint32_t remote_seq;
    flx_status_t remote_err;
    tl_cur_t cur;                /* the newest collective seen in a request */
    unsigned rejected;           /* connection requests rejected (conn.c)  */
    boot_t *boot;
};

/* device.c */
flx_status_t ib_dev_choose(const flx_config_t *cfg, int rank, ib_dev_choice_t *choice_p);
/* Does this machine have an ACTIVE RDMA port?  (FLX_NET=auto) */
int ib_dev_available(void);
/* Print devices, ports, link layers, GIDs, MTUs (flx-info). */
void ib_dev_print(FILE *out);

/* conn.c */
#define IB_PRIV_MAGIC 0x464c5849u /* "FLXI" */
#define IB_NONCE_BYTES 16
#define IB_TOKEN_BYTES 32         /* HMAC-SHA-256 */

/* What each rank publishes over the bootstrap mesh. */
typedef struct {
    uint32_t ip;                 /* network order */
    uint16_t port;               /* network order */
    uint16_t nqps;               /* network order */
    uint8_t nonce[IB_NONCE_BYTES];
} ib_boot_info_t;

/* A connection request's private data. */
typedef struct {
    uint32_t magic;
    int32_t rank;
    int32_t qidx;                /* 0: the primary QP, else an extra one */
    uint8_t token[IB_TOKEN_BYTES];
} ib_priv_t;                     /* 44 bytes: within a REQ's 56 */

/* The token of rank from's request to rank to for QP qidx: HMAC-SHA-256
 * under the job key of (from, to, qidx, to's nonce, from's nonce). */
void ib_conn_token(const tl_ctx_t *ctx, int from, int to, int qidx, const ib_boot_info_t *infos,
                   uint8_t out[IB_TOKEN_BYTES]);
/* The rank a request's private data (len bytes) rightly claims to be, one
 * this rank accepts (above it), with its QP index in *qidx_p; -1 for
 * anything else (no or short data, another magic, a rank or QP out of
 * range, a token that is not that rank's for this rank and QP). */
int ib_conn_claim(const tl_ctx_t *ctx, const void *data, size_t len, const ib_boot_info_t *infos,
                  int *qidx_p);
flx_status_t ib_conn_setup(tl_ctx_t *ctx, boot_t *boot);
void ib_conn_teardown(tl_ctx_t *ctx);
void ib_conn_close_listener(tl_ctx_t *ctx);
/* The listener after setup: reject every connection request, ack other
 * events (call when its channel's fd is readable). */
void ib_conn_listen_event(tl_ctx_t *ctx);

#define IB_SEND_SLOTS 64   /* bounce slots per peer */

/* ib.c */
flx_status_t ib_post_recv_slot(tl_ctx_t *ctx, ib_conn_t *c, int slot);
/* PD, CQ and the bounce pools on the listener's device (before any QP) */
flx_status_t ib_resources_create(tl_ctx_t *ctx);

#endif
