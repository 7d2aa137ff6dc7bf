/* ib.c -- the ib backend's data path and life cycle (see ib.h). */
#include "transport/ib/ib.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* wr_id: kind in the top 4 bits, then peer (20 bits), then a 40-bit index;
 * writes carry the request pointer (user space fits in 48 bits) */
enum { WR_RECV = 1, WR_SEND = 2, WR_WRITE = 3 };
#define WR_ID(kind, peer, idx) \
    (((uint64_t)(kind) << 60) | ((uint64_t)(peer) << 40) | ((uint64_t)(idx) & 0xffffffffffULL))
#define WR_KIND(id) ((int)((id) >> 60))
#define WR_PEER(id) ((int)(((id) >> 40) & 0xfffff))
#define WR_IDX(id) ((id) & 0xffffffffffULL)
#define WR_PTR_MASK 0x0fffffffffffffffULL

/* request state in priv[] */
#define RQ_MR 0      /* ib_mr_entry_t * of a large message              */
#define RQ_FLAGS 1
#define RQ_LINK 2    /* large receive: 1 CTS to send, 2 memory to attach at the RTS,
                        3 the RTS here, memory to attach when a slot frees */
#define RQ_REMOTE 3  /* large send: remote address                      */
#define RQ_RKEY_ID 4 /* large send: rkey << 32 | imm id                 */
#define RQ_PIECES 5  /* large send: bytes posted << 16 | pieces in flight */
#define RQ_STAGE 6   /* large message: staging slot + 1 (0: none)         */
#define F_LARGE 1u
#define F_HAVE_CTS 2u

#define IB_ERR_MAGIC 0x464c5845u /* "FLXE": failure report on the bootstrap socket */
#define IB_MAX_PIECES 8        /* pieces of one message in flight       */
#define IB_MAX_CONN_WRITES 32  /* pieces in flight to one peer (SQ room) */

typedef struct {
    uint32_t magic;
    int32_t status;
    uint32_t seq;
} ib_err_frame_t;

static int seq_ge(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }

static void req_finish(tl_req_t *req, flx_status_t st)
{
    req->status = st;
    req->complete = 1;
}

static int hdr_sig_equal(const ib_hdr_t *h, const tl_tag_t *t)
{
    return h->kind == t->kind && h->dtype == t->dtype && h->op == t->op && h->count == t->count;
}

static void hdr_from_tag(ib_hdr_t *h, int type, const tl_tag_t *tag, uint64_t len)
{
    memset(h, 0, sizeof(*h));
    h->type = (uint8_t)type;
    if (tag) {
        h->kind = tag->kind;
        h->dtype = tag->dtype;
        h->op = tag->op;
        h->seq = tag->seq;
        h->step = tag->step;
        h->count = tag->count;
    }
    h->len = len;
}

static void list_append(tl_req_t **head, tl_req_t **tail, tl_req_t *r)
{
    r->next = NULL;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

static void list_remove(tl_req_t **head, tl_req_t **tail, tl_req_t *r)
{
    tl_req_t *prev = NULL;

    for (tl_req_t *it = *head; it; prev = it, it = it->next) {
        if (it != r)
            continue;
        if (prev)
            prev->next = it->next;
        else
            *head = it->next;
        if (*tail == it)
            *tail = prev;
        it->next = NULL;
        return;
    }
}

/* ---- failure ---------------------------------------------------------------- */

/* The memory of a large message: its cached registration where there is
 * one, else a staging slot (a send's payload is copied in now), else a
 * registration for this message only.  A slot is held only while the data
 * moves: a send takes it when the receiver's CTS is here, a receive when
 * it sends its CTS.  early: a receive being posted, before the sender is
 * known to be ready; it takes a slot only while more than half are free,
 * else FLX_ERR_NOT_FOUND (nothing attached: attach at the RTS), so that
 * receives posted far ahead (a ring's allgather) leave slots to those
 * whose data comes first.  A receive never takes the last free slot: one
 * stays for sends, whose slots come back without waiting on any peer.
 * Out of locked memory (the registration refused) with staging working,
 * a message that fits a slot waits for one: FLX_ERR_NOT_FOUND, nothing
 * attached, try again after a completion (a slot held by a send always
 * comes back, and a receive's slot once its sender gets one). */
static flx_status_t large_mem_get(tl_ctx_t *ctx, tl_req_t *r, int early)
{
    const ib_stage_t *sg = &ctx->mrc.stage;
    ib_mr_entry_t *mr;
    flx_status_t st = ib_mr_get_cached(&ctx->mrc, r->buf, r->len, &mr);
    int idx;
    char *slot = NULL;

    if (st == FLX_ERR_NOT_FOUND && early && ib_stage_fits(&ctx->mrc, r->len) &&
        sg->entry != NULL && 2 * sg->nfree <= sg->nslots)
        return FLX_ERR_NOT_FOUND;
    if (st == FLX_ERR_NOT_FOUND && (r->is_send || sg->entry == NULL || sg->nslots < 2 ||
                                    sg->nfree >= 2))
        slot = ib_stage_get(&ctx->mrc, r->len, &idx, &mr);
    if (slot != NULL) {
        if (r->is_send)
            memcpy(slot, r->buf, r->len);
        r->priv[RQ_STAGE] = (uint64_t)idx + 1;
        st = FLX_OK;
    } else if (st == FLX_ERR_NOT_FOUND) {
        /* a slot will come back: the registration may be refused quietly */
        int can_wait = ib_stage_fits(&ctx->mrc, r->len) && sg->entry != NULL && sg->nslots >= 2;

        st = ib_mr_get_quiet(&ctx->mrc, r->buf, r->len, can_wait, &mr);
        if (st == FLX_ERR_NOT_FOUND && !ctx->mrc.waited++)
            flx_warn(NET, ctx->rank, "ib: out of locked memory for a registration per message; "
                     "messages wait for one of the %d staging slots (ulimit -l unlimited "
                     "avoids the wait)", sg->nslots);
    }
    if (st == FLX_OK)
        r->priv[RQ_MR] = (uintptr_t)mr;
    return st;
}

/* where the device reads (send) or writes (receive) a large message */
static char *large_mem_addr(const tl_ctx_t *ctx, const tl_req_t *r)
{
    if (r->priv[RQ_STAGE])
        return ib_stage_addr(&ctx->mrc, (int)r->priv[RQ_STAGE] - 1);
    return r->buf;
}

enum { MEM_UNUSED, MEM_DELIVERED, MEM_FAILED };

/* A large request is done with its memory.  MEM_DELIVERED: a staged
 * receive's payload is copied out.  MEM_FAILED: a late RDMA write may
 * still land in the memory, or the device still read it, so a staging slot
 * is never used again and a registration outside the cache waits for
 * teardown, after the QPs are gone; a cached registration is released. */
static void large_mem_done(tl_ctx_t *ctx, tl_req_t *r, int how)
{
    ib_mr_entry_t *mr = (ib_mr_entry_t *)(uintptr_t)r->priv[RQ_MR];

    if (!(r->priv[RQ_FLAGS] & F_LARGE) || mr == NULL)
        return;
    r->priv[RQ_MR] = 0;
    if (r->priv[RQ_STAGE]) {
        int idx = (int)r->priv[RQ_STAGE] - 1;
        r->priv[RQ_STAGE] = 0;
        if (how == MEM_FAILED) {
            ctx->mrc.stage.quarantined++;
            return;
        }
        if (how == MEM_DELIVERED && !r->is_send)
            memcpy(r->buf, ib_stage_addr(&ctx->mrc, idx), r->len);
        ib_stage_put(&ctx->mrc, idx);
    } else {
        ib_mr_put(&ctx->mrc, mr, how == MEM_FAILED);
    }
}

static void conn_fail_all(tl_ctx_t *ctx, ib_conn_t *c, flx_status_t st)
{
    tl_req_t *lists[3] = {c->posted_head, c->sendq_head, c->rdv_head};

    for (int i = 0; i < ctx->rdv_slots; i++)
        if (ctx->rdv[i].req && ctx->rdv[i].req->peer == c->peer) {
            ctx->rdv[i].req = NULL; /* its registration goes with its request below */
            ctx->rdv[i].failed_peer = c->peer + 1;
        }
    for (int l = 0; l < 3; l++)
        for (tl_req_t *r = lists[l], *next; r; r = next) {
            next = r->next;
            large_mem_done(ctx, r, MEM_FAILED);
            req_finish(r, st);
        }
    c->posted_head = c->posted_tail = NULL;
    c->sendq_head = c->sendq_tail = NULL;
    c->rdv_head = c->rdv_tail = NULL;
}

/* The context fails at collective seq: see tl.h. */
static void ib_fail_at(tl_ctx_t *ctx, flx_status_t st, uint32_t seq, const char *why)
{
    ib_err_frame_t f = {.magic = IB_ERR_MAGIC, .status = st, .seq = seq};

    if (ctx->err != FLX_OK)
        return;
    ctx->err = st;
    flx_debug(NET, ctx->rank, "ib transport failed (%s): %s", flx_status_name(st), why);
    for (int p = 0; p < ctx->size; p++) {
        int fd = ctx->boot->fds[p];
        if (p == ctx->rank)
            continue;
        conn_fail_all(ctx, &ctx->conns[p], st);
        if (fd >= 0)
            (void)send(fd, &f, sizeof(f), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
}

/* A failure of the transport itself comes while requests of the latest
 * collective are posted: that one did not complete here. */
static void ib_fail(tl_ctx_t *ctx, flx_status_t st, const char *why)
{
    ib_fail_at(ctx, st, ctx->cur.tag.seq, why);
}

static flx_status_t ib_error(tl_ctx_t *ctx) { return ctx->err; }

static void posted_done(tl_ctx_t *ctx, ib_conn_t *c, tl_req_t *r, flx_status_t st);

/* a peer failed at collective seq: fail that one and later ones here */
static void fail_from_seq(tl_ctx_t *ctx, flx_status_t st, uint32_t seq)
{
    if (!ctx->remote_failed || !seq_ge(seq, ctx->remote_seq)) {
        ctx->remote_failed = 1;
        ctx->remote_seq = seq;
        ctx->remote_err = st;
    }
    for (int p = 0; p < ctx->size; p++) {
        ib_conn_t *c = &ctx->conns[p];
        tl_req_t **heads[3] = {&c->posted_head, &c->sendq_head, &c->rdv_head};
        tl_req_t **tails[3] = {&c->posted_tail, &c->sendq_tail, &c->rdv_tail};
        for (int l = 0; l < 3; l++) {
            tl_req_t *r = *heads[l];
            while (r) {
                tl_req_t *next = r->next;
                /* a send with writes on the wire fails when they completed
                 * (handle_wc), as their memory is in use until then */
                if (seq_ge(r->tag.seq, seq) && !(l == 2 && (r->priv[RQ_PIECES] & 0xffff) != 0)) {
                    if (l == 0) {
                        posted_done(ctx, c, r, st);
                    } else {
                        list_remove(heads[l], tails[l], r);
                        large_mem_done(ctx, r, MEM_FAILED);
                        req_finish(r, st);
                    }
                }
                r = next;
            }
        }
    }
}

/* A request that can never run gets this status (FLX_OK: it can).  A
 * receive is checked against the early messages first: a peer may have
 * sent what we want and said goodbye before we asked (peer_gone = 0). */
static flx_status_t req_doomed(tl_ctx_t *ctx, ib_conn_t *c, const tl_tag_t *tag, int peer_gone)
{
    if (ctx->err != FLX_OK)
        return ctx->err;
    if (ctx->remote_failed && seq_ge(tag->seq, ctx->remote_seq))
        return ctx->remote_err;
    if (peer_gone && (c->errored || c->bye || c->eof)) { /* eof: its process is gone */
        flx_error(NET, ctx->rank, "rank %d has left the job; collective #%u cannot complete",
                  c->peer, tag->seq);
        return FLX_ERR_PEER_LOST;
    }
    return FLX_OK;
}

/* ---- posting -------------------------------------------------------------------- */

flx_status_t ib_post_recv_slot(tl_ctx_t *ctx, ib_conn_t *c, int slot)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(ctx->recv_pool +
                            ((size_t)c->peer * (size_t)ctx->recv_depth + (size_t)slot) *
                                ctx->slot_size),
        .length = (uint32_t)ctx->slot_size,
        .lkey = ctx->recv_mr->lkey,
    };
    struct ibv_recv_wr wr = {.wr_id = WR_ID(WR_RECV, c->peer, slot), .sg_list = &sge,
                             .num_sge = 1}, *bad;

    if (ibv_post_recv(c->qp, &wr, &bad) != 0) {
        flx_error(NET, ctx->rank, "ibv_post_recv to rank %d failed: %m", c->peer);
        return FLX_ERR_SYSTEM;
    }
    return FLX_OK;
}

static int can_send(tl_ctx_t *ctx, ib_conn_t *c, int credits_needed)
{
    (void)ctx;
    return c->qp && !c->errored && c->s_head - c->s_tail < IB_SEND_SLOTS - 1 &&
           c->credits >= credits_needed;
}

/* SEND header (+ payload) through the next bounce slot */
static flx_status_t post_msg(tl_ctx_t *ctx, ib_conn_t *c, ib_hdr_t *h, const void *payload,
                             size_t len, int force_signal)
{
    uint64_t n = c->s_head;
    char *slot = ctx->send_pool +
                 ((size_t)c->peer * IB_SEND_SLOTS + (size_t)(n % IB_SEND_SLOTS)) * ctx->slot_size;
    size_t total = sizeof(*h) + len;
    /* signaled now and then, and whenever no signaled message could follow
     * (no slot or credit left): ib_destroy can always learn that every send
     * completed */
    int signal = force_signal || n % 16 == 15 || c->s_head - c->s_tail >= IB_SEND_SLOTS - 4 ||
                 c->credits <= 1;
    struct ibv_sge sge = {.addr = (uintptr_t)slot, .length = (uint32_t)total,
                          .lkey = ctx->send_mr->lkey};
    struct ibv_send_wr wr, *bad;

    h->credits = (uint16_t)c->to_return;
    memcpy(slot, h, sizeof(*h));
    if (len)
        memcpy(slot + sizeof(*h), payload, len);
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = WR_ID(WR_SEND, c->peer, n);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = (signal ? IBV_SEND_SIGNALED : 0) |
                    (total <= ctx->max_inline ? IBV_SEND_INLINE : 0);
    if (ibv_post_send(c->qp, &wr, &bad) != 0) {
        flx_error(NET, ctx->rank, "ibv_post_send (%zu bytes) to rank %d failed: %m", total,
                  c->peer);
        return FLX_ERR_SYSTEM;
    }
    c->to_return = 0;
    c->s_head++;
    c->credits--;
    return FLX_OK;
}

/* RDMA-write what fits of a large send.  Pieces are striped across the
 * peer's QPs; the last one carries the IMM on the primary QP and, with
 * several QPs, goes only after every other piece completed (a completed
 * RDMA write on RC has landed), so the IMM still means "all here". */
static flx_status_t post_write_pieces(tl_ctx_t *ctx, ib_conn_t *c, tl_req_t *r)
{
    const size_t piece_max = FLX_MIN((size_t)1 << 22, /* under every device's max_msg_sz */
                                     FLX_DIV_ROUND_UP(r->len, (size_t)ctx->nqps));
    ib_mr_entry_t *mr = (ib_mr_entry_t *)(uintptr_t)r->priv[RQ_MR];
    size_t posted = (size_t)(r->priv[RQ_PIECES] >> 16);
    unsigned inflight = (unsigned)(r->priv[RQ_PIECES] & 0xffff);

    while (posted < r->len && inflight < IB_MAX_PIECES && c->writes_inflight < IB_MAX_CONN_WRITES) {
        size_t n = FLX_MIN(piece_max, r->len - posted);
        int last = posted + n == r->len;
        int q = last ? 0 : (int)((posted / piece_max) % (size_t)ctx->nqps);
        struct ibv_qp *qp = q == 0 ? c->qp : c->xqp[q];
        struct ibv_sge sge = {.addr = (uintptr_t)large_mem_addr(ctx, r) + posted,
                              .length = (uint32_t)n,
                              .lkey = mr->mr->lkey};
        struct ibv_send_wr wr, *bad;

        if (last && (c->credits < 2 || (ctx->nqps > 1 && inflight > 0)))
            break; /* the IMM consumes one of the peer's receives */
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = ((uint64_t)WR_WRITE << 60) | ((uintptr_t)r & WR_PTR_MASK);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = r->priv[RQ_REMOTE] + posted;
        wr.wr.rdma.rkey = (uint32_t)(r->priv[RQ_RKEY_ID] >> 32);
        if (last)
            wr.imm_data = htonl((uint32_t)r->priv[RQ_RKEY_ID]);
        if (ibv_post_send(qp, &wr, &bad) != 0) {
            flx_error(NET, ctx->rank, "RDMA write of %zu bytes to rank %d (QP %d) failed: %m", n,
                      c->peer, q);
            return FLX_ERR_SYSTEM;
        }
        if (last)
            c->credits--;
        posted += n;
        inflight++;
        c->writes_inflight++;
    }
    r->priv[RQ_PIECES] = ((uint64_t)posted << 16) | inflight;
    return FLX_OK;
}

/* Move everything that waits on this connection as far as resources allow. */
static flx_status_t conn_flush(tl_ctx_t *ctx, ib_conn_t *c)
{
    flx_status_t st = FLX_OK;

    if (c->qp == NULL || c->errored)
        return FLX_OK;
    /* receives whose CTS has not gone out yet (linked through RQ_LINK) */
    for (tl_req_t *r = c->posted_head; r && st == FLX_OK; r = r->next) {
        ib_hdr_t h;
        if ((r->priv[RQ_FLAGS] & F_LARGE) && r->priv[RQ_LINK] == 3) {
            st = large_mem_get(ctx, r, 0); /* still waiting for a slot? */
            if (st == FLX_ERR_NOT_FOUND) {
                st = FLX_OK;
                continue;
            }
            if (st != FLX_OK)
                break;
            r->priv[RQ_LINK] = 1;
        }
        if (!(r->priv[RQ_FLAGS] & F_LARGE) || r->priv[RQ_LINK] != 1)
            continue;
        if (!can_send(ctx, c, 2))
            break;
        hdr_from_tag(&h, IB_MSG_CTS, &r->tag, r->len);
        h.addr = (uintptr_t)large_mem_addr(ctx, r);
        h.rkey = ((ib_mr_entry_t *)(uintptr_t)r->priv[RQ_MR])->mr->rkey;
        h.id = (uint32_t)r->priv[RQ_RKEY_ID];
        st = post_msg(ctx, c, &h, NULL, 0, 0);
        r->priv[RQ_LINK] = 0;
    }
    /* sends in order: eager payloads, and the RTS of large ones */
    while (st == FLX_OK && c->sendq_head && can_send(ctx, c, 2)) {
        tl_req_t *r = c->sendq_head;
        int large = (r->priv[RQ_FLAGS] & F_LARGE) != 0;
        ib_hdr_t h;

        /* a large send whose CTS is already here needs no RTS */
        if (!large || !(r->priv[RQ_FLAGS] & F_HAVE_CTS)) {
            hdr_from_tag(&h, large ? IB_MSG_RTS : IB_MSG_EAGER, &r->tag, r->len);
            st = post_msg(ctx, c, &h, r->buf, large ? 0 : r->len, 0);
            if (st != FLX_OK)
                break;
        }
        list_remove(&c->sendq_head, &c->sendq_tail, r);
        if (large)
            list_append(&c->rdv_head, &c->rdv_tail, r);
        else
            req_finish(r, FLX_OK); /* the payload sits in the bounce slot */
    }
    /* large sends with a CTS: RDMA-write into the receiver's buffer */
    for (tl_req_t *r = c->rdv_head; r && st == FLX_OK; r = r->next) {
        if (!(r->priv[RQ_FLAGS] & F_HAVE_CTS))
            continue;
        if (r->priv[RQ_MR] == 0 && (st = large_mem_get(ctx, r, 0)) != FLX_OK) {
            if (st == FLX_ERR_NOT_FOUND) { /* waits for a staging slot */
                st = FLX_OK;
                continue;
            }
            break;
        }
        st = post_write_pieces(ctx, c, r);
    }
    /* give receives back when they pile up and nothing else carries them */
    if (st == FLX_OK && c->to_return >= ctx->recv_depth / 2 && can_send(ctx, c, 1)) {
        ib_hdr_t h;
        hdr_from_tag(&h, IB_MSG_CREDIT, NULL, 0);
        st = post_msg(ctx, c, &h, NULL, 0, 0);
    }
    if (st != FLX_OK)
        ib_fail(ctx, st, "post");
    return st;
}

/* ---- requests ------------------------------------------------------------------ */

static tl_tag_t hdr_tag(const ib_hdr_t *h)
{
    return (tl_tag_t){.seq = h->seq, .step = h->step, .kind = h->kind, .dtype = h->dtype,
                      .op = h->op, .count = h->count};
}

static flx_status_t mismatch(tl_ctx_t *ctx, ib_conn_t *c, const ib_hdr_t *h, const tl_tag_t *t)
{
    tl_tag_t theirs = hdr_tag(h);

    tl_log_mismatch(ctx->rank, c->peer, &theirs, t);
    ib_fail(ctx, FLX_ERR_MISMATCH, "mismatched collective");
    return FLX_ERR_MISMATCH;
}

/* A message of a collective this rank has finished without receiving it
 * (tl.h): the newest collective here fails. */
static flx_status_t stale(tl_ctx_t *ctx, ib_conn_t *c, const ib_hdr_t *h)
{
    tl_tag_t theirs = hdr_tag(h);

    tl_log_stale(ctx->rank, c->peer, &theirs, ctx->cur.tag.seq);
    ib_fail(ctx, FLX_ERR_MISMATCH, "message of a finished collective");
    return FLX_ERR_MISMATCH;
}

/* A request of collective tag->seq.  When it is a new one, the messages
 * and CTSs of it that came early from any peer must carry its signature (a
 * rank that called another collective or count may send nothing this rank
 * receives from it, a count-0 call's barrier for one), and no message of
 * an earlier one may be left. */
static flx_status_t note_collective(tl_ctx_t *ctx, const tl_tag_t *tag)
{
    if (!tl_cur_note(&ctx->cur, tag))
        return FLX_OK;
    for (int p = 0; p < ctx->size; p++) {
        ib_conn_t *c = &ctx->conns[p];
        for (ib_unexp_t *u = c->unexp_head; u; u = u->next) {
            if (!seq_ge(u->hdr.seq, tag->seq))
                return stale(ctx, c, &u->hdr);
            if (u->hdr.seq == tag->seq && !hdr_sig_equal(&u->hdr, tag))
                return mismatch(ctx, c, &u->hdr, tag);
        }
        for (ib_cts_t *t = c->cts_head; t; t = t->next)
            if (t->hdr.seq == tag->seq && !hdr_sig_equal(&t->hdr, tag))
                return mismatch(ctx, c, &t->hdr, tag);
    }
    return FLX_OK;
}

/* An early message or CTS of the collective running here: the same call? */
static flx_status_t early_sig_check(tl_ctx_t *ctx, ib_conn_t *c, const ib_hdr_t *h)
{
    if (ctx->cur.set && h->seq == ctx->cur.tag.seq && !hdr_sig_equal(h, &ctx->cur.tag))
        return mismatch(ctx, c, h, &ctx->cur.tag);
    return FLX_OK;
}

static flx_status_t length_error(tl_ctx_t *ctx, ib_conn_t *c, const ib_hdr_t *h, size_t want)
{
    flx_error(NET, ctx->rank, "rank %d sends %llu bytes for collective #%u step %u, expected %zu",
              c->peer, (unsigned long long)h->len, h->seq, h->step, want);
    ib_fail(ctx, FLX_ERR_MISMATCH, "length");
    return FLX_ERR_MISMATCH;
}

/* The receiver's CTS for large send r: check it, then keep where to write. */
static flx_status_t cts_attach(tl_ctx_t *ctx, ib_conn_t *c, tl_req_t *r, const ib_hdr_t *h)
{
    if (!hdr_sig_equal(h, &r->tag))
        return mismatch(ctx, c, h, &r->tag);
    if (h->len != r->len)
        return length_error(ctx, c, h, r->len);
    r->priv[RQ_REMOTE] = h->addr;
    r->priv[RQ_RKEY_ID] = ((uint64_t)h->rkey << 32) | h->id;
    r->priv[RQ_FLAGS] |= F_HAVE_CTS;
    return FLX_OK;
}

static void req_init(tl_req_t *req, int peer, int is_send, const tl_tag_t *tag, void *buf,
                     size_t len)
{
    memset(req, 0, sizeof(*req));
    req->peer = peer;
    req->is_send = is_send;
    req->tag = *tag;
    req->buf = buf;
    req->len = len;
}

static flx_status_t ib_isend(tl_ctx_t *ctx, int peer, const tl_tag_t *tag, const void *buf,
                             size_t len, tl_req_t *req)
{
    ib_conn_t *c = &ctx->conns[peer];
    flx_status_t st;

    req_init(req, peer, 1, tag, (void *)buf, len);
    if ((st = note_collective(ctx, tag)) != FLX_OK || (st = req_doomed(ctx, c, tag, 1)) != FLX_OK) {
        req_finish(req, st);
        return st;
    }
    if (len > ctx->eager_max) {
        ib_mr_entry_t *mr;
        req->priv[RQ_FLAGS] = F_LARGE;
        /* a cached registration now; else memory when the CTS is here */
        st = ib_mr_get_cached(&ctx->mrc, (void *)buf, len, &mr);
        if (st == FLX_OK)
            req->priv[RQ_MR] = (uintptr_t)mr;
        else if (st != FLX_ERR_NOT_FOUND) {
            req_finish(req, st);
            ib_fail(ctx, st, "registration");
            return st;
        }
        /* the receiver may have asked already */
        for (ib_cts_t **pp = &c->cts_head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
            ib_cts_t *cts = *pp;
            if (cts->hdr.seq != tag->seq || cts->hdr.step != tag->step)
                continue;
            st = cts_attach(ctx, c, req, &cts->hdr);
            if (st != FLX_OK) { /* the context failed: nothing was posted */
                large_mem_done(ctx, req, MEM_UNUSED);
                req_finish(req, st);
                return st;
            }
            *pp = cts->next;
            if (c->cts_tail == cts)
                c->cts_tail = prev;
            free(cts);
            break;
        }
    }
    list_append(&c->sendq_head, &c->sendq_tail, req);
    return conn_flush(ctx, c);
}

/* An eager message or RTS waiting for its receive (RTS: buf == NULL). */
static flx_status_t ib_irecv(tl_ctx_t *ctx, int peer, const tl_tag_t *tag, void *buf,
                             size_t len, tl_req_t *req)
{
    ib_conn_t *c = &ctx->conns[peer];
    ib_unexp_t **pp, *prev = NULL;
    int rts_seen = 0;
    flx_status_t st;

    req_init(req, peer, 0, tag, buf, len);
    if ((st = note_collective(ctx, tag)) != FLX_OK || (st = req_doomed(ctx, c, tag, 0)) != FLX_OK) {
        req_finish(req, st);
        return st;
    }
    for (pp = &c->unexp_head; *pp; prev = *pp, pp = &(*pp)->next) {
        ib_unexp_t *u = *pp;
        int is_rts = u->hdr.type == IB_MSG_RTS;
        if (u->hdr.seq != tag->seq)
            continue;
        if (!hdr_sig_equal(&u->hdr, tag))
            return mismatch(ctx, c, &u->hdr, tag);
        if (u->hdr.step != tag->step)
            continue;
        if (u->hdr.len != len || is_rts != (len > ctx->eager_max))
            return length_error(ctx, c, &u->hdr, len);
        *pp = u->next;
        if (c->unexp_tail == u)
            c->unexp_tail = prev;
        if (!is_rts) {
            if (len)
                memcpy(buf, u->buf, len);
            free(u->buf);
            free(u);
            req_finish(req, FLX_OK);
            return FLX_OK;
        }
        free(u);
        rts_seen = 1;
        break;
    }
    if (c->bye || c->eof) {
        flx_error(NET, ctx->rank, "rank %d has left the job; collective #%u cannot complete",
                  peer, tag->seq);
        ib_fail(ctx, FLX_ERR_PEER_LOST, "peer gone");
        req_finish(req, FLX_ERR_PEER_LOST);
        return FLX_ERR_PEER_LOST;
    }
    if (len > ctx->eager_max) {
        uint32_t id;
        int tries = 0;
        req->priv[RQ_FLAGS] = F_LARGE;
        /* the sender's RTS already here (rts_seen): it is ready, no waiting */
        st = large_mem_get(ctx, req, !rts_seen);
        if (st != FLX_OK && st != FLX_ERR_NOT_FOUND) {
            req_finish(req, st);
            ib_fail(ctx, st, "registration");
            return st;
        }
        do {
            id = ctx->rdv_next++ % (uint32_t)ctx->rdv_slots;
        } while ((ctx->rdv[id].req || ctx->rdv[id].failed_peer) && ++tries < ctx->rdv_slots);
        if (ctx->rdv[id].req || ctx->rdv[id].failed_peer) {
            flx_error(NET, ctx->rank, "more than %d large receives outstanding", ctx->rdv_slots);
            large_mem_done(ctx, req, MEM_UNUSED);
            req_finish(req, FLX_ERR_NO_MEMORY);
            return FLX_ERR_NO_MEMORY;
        }
        ctx->rdv[id].req = req;
        req->priv[RQ_RKEY_ID] = id;
        /* CTS to send, memory at the RTS, or (the RTS here) when a slot frees */
        req->priv[RQ_LINK] = st == FLX_OK ? 1 : rts_seen ? 3 : 2;
    }
    list_append(&c->posted_head, &c->posted_tail, req);
    return conn_flush(ctx, c);
}

/* ---- completions -------------------------------------------------------------- */

/* a posted receive leaves the list: drop its rendezvous slot too */
static void posted_done(tl_ctx_t *ctx, ib_conn_t *c, tl_req_t *r, flx_status_t st)
{
    list_remove(&c->posted_head, &c->posted_tail, r);
    if (r->priv[RQ_FLAGS] & F_LARGE) {
        uint32_t id = (uint32_t)r->priv[RQ_RKEY_ID];
        if (ctx->rdv[id].req == r) {
            large_mem_done(ctx, r, st == FLX_OK ? MEM_DELIVERED : MEM_FAILED);
            ctx->rdv[id].req = NULL;
            if (st != FLX_OK)
                ctx->rdv[id].failed_peer = r->peer + 1;
        }
    }
    req_finish(r, st);
}

/* an EAGER or RTS header from c: find its receive */
static flx_status_t handle_data_hdr(tl_ctx_t *ctx, ib_conn_t *c, const ib_hdr_t *h,
                                    const char *payload)
{
    int is_rts = h->type == IB_MSG_RTS;
    ib_unexp_t *u;

    for (tl_req_t *r = c->posted_head; r; r = r->next) {
        if (r->tag.seq != h->seq)
            continue;
        if (!hdr_sig_equal(h, &r->tag))
            return mismatch(ctx, c, h, &r->tag);
        if (r->tag.step != h->step)
            continue;
        if (h->len != r->len || is_rts != ((r->priv[RQ_FLAGS] & F_LARGE) != 0))
            return length_error(ctx, c, h, r->len);
        if (!is_rts) {
            if (h->len)
                memcpy(r->buf, payload, h->len);
            posted_done(ctx, c, r, FLX_OK);
        } else if (r->priv[RQ_LINK] == 2) { /* the sender is ready: memory, then CTS */
            flx_status_t st = large_mem_get(ctx, r, 0);
            if (st != FLX_OK && st != FLX_ERR_NOT_FOUND) {
                ib_fail(ctx, st, "registration");
                return st;
            }
            r->priv[RQ_LINK] = st == FLX_OK ? 1 : 3; /* or when a slot frees */
        }
        return FLX_OK; /* an RTS otherwise confirms the receive we posted */
    }
    if (c->posted_head && (int32_t)(h->seq - c->posted_head->tag.seq) > 0) {
        flx_error(NET, ctx->rank, "rank %d is already at collective #%u while this rank waits "
                  "for its part of #%u (different call sequence on the two ranks)", c->peer,
                  h->seq, c->posted_head->tag.seq);
        ib_fail(ctx, FLX_ERR_MISMATCH, "skipped collective");
        return FLX_ERR_MISMATCH;
    }
    if (ctx->cur.set && !seq_ge(h->seq, ctx->cur.tag.seq)) /* its collective is over here */
        return stale(ctx, c, h);
    if (early_sig_check(ctx, c, h) != FLX_OK)
        return FLX_ERR_MISMATCH;
    if (h->len > ctx->eager_max && !is_rts)
        return length_error(ctx, c, h, ctx->eager_max);
    u = calloc(1, sizeof(*u));
    if (u && !is_rts && (u->buf = malloc(h->len ? h->len : 1)) == NULL) {
        free(u);
        u = NULL;
    }
    if (u == NULL) {
        ib_fail(ctx, FLX_ERR_NO_MEMORY, "unexpected message");
        return FLX_ERR_NO_MEMORY;
    }
    u->hdr = *h;
    if (!is_rts && h->len)
        memcpy(u->buf, payload, h->len);
    if (c->unexp_tail)
        c->unexp_tail->next = u;
    else
        c->unexp_head = u;
    c->unexp_tail = u;
    return FLX_OK;
}

static flx_status_t handle_cts(tl_ctx_t *ctx, ib_conn_t *c, const ib_hdr_t *h)
{
    tl_req_t *lists[2] = {c->rdv_head, c->sendq_head};
    ib_cts_t *cts;

    /* a large send waiting for it: RTS already out, or still queued */
    for (int l = 0; l < 2; l++)
        for (tl_req_t *r = lists[l]; r; r = r->next)
            if (r->tag.seq == h->seq && r->tag.step == h->step &&
                (r->priv[RQ_FLAGS] & (F_LARGE | F_HAVE_CTS)) == F_LARGE)
                return cts_attach(ctx, c, r, h);
    if (ctx->cur.set && !seq_ge(h->seq, ctx->cur.tag.seq)) /* its collective is over here */
        return stale(ctx, c, h);
    if (early_sig_check(ctx, c, h) != FLX_OK)
        return FLX_ERR_MISMATCH;
    cts = calloc(1, sizeof(*cts));
    if (cts == NULL) {
        ib_fail(ctx, FLX_ERR_NO_MEMORY, "cts");
        return FLX_ERR_NO_MEMORY;
    }
    cts->hdr = *h;
    if (c->cts_tail)
        c->cts_tail->next = cts;
    else
        c->cts_head = cts;
    c->cts_tail = cts;
    return FLX_OK;
}

static void handle_wc(tl_ctx_t *ctx, const struct ibv_wc *wc)
{
    int kind = WR_KIND(wc->wr_id);

    /* failed: the requests of writes and receives were failed and may be
     * gone; only our sends' completions still count (ib_destroy drains) */
    if (ctx->err != FLX_OK && kind != WR_SEND)
        return;
    if (wc->status != IBV_WC_SUCCESS) {
        int peer = kind == WR_WRITE ? ((tl_req_t *)(uintptr_t)(wc->wr_id & WR_PTR_MASK))->peer
                                    : WR_PEER(wc->wr_id);
        ib_conn_t *c = &ctx->conns[peer];
        /* a peer that said goodbye or reported its failure tears its QPs
         * down: that matters only to requests still waiting for it */
        int leaving = c->bye || c->errored;

        c->errored = 1;
        if (leaving && !c->posted_head && !c->sendq_head && !c->rdv_head)
            return;
        if (ctx->err == FLX_OK)
            flx_error(NET, ctx->rank, "QP to rank %d failed: %s (vendor error 0x%x)", peer,
                      ibv_wc_status_str(wc->status), wc->vendor_err);
        ib_fail(ctx, FLX_ERR_PEER_LOST, "work completion error");
        return;
    }
    if (kind == WR_SEND) {
        ib_conn_t *c = &ctx->conns[WR_PEER(wc->wr_id)];
        uint64_t n = WR_IDX(wc->wr_id);
        if (n + 1 > c->s_tail)
            c->s_tail = n + 1;
        if (c->bye_posted && n == c->bye_seq)
            c->bye_sent_done = 1;
        return;
    }
    if (kind == WR_WRITE) {
        tl_req_t *r = (tl_req_t *)(uintptr_t)(wc->wr_id & WR_PTR_MASK);
        ib_conn_t *c = &ctx->conns[r->peer];
        flx_status_t st;
        r->priv[RQ_PIECES]--;
        c->writes_inflight--;
        if ((r->priv[RQ_PIECES] & 0xffff) != 0)
            return;
        if ((r->priv[RQ_PIECES] >> 16) == r->len) {
            list_remove(&c->rdv_head, &c->rdv_tail, r);
            large_mem_done(ctx, r, MEM_DELIVERED);
            req_finish(r, FLX_OK);
            return;
        }
        /* partly written, nothing on the wire: if the peer failed meanwhile
         * (its report, or its QP), the rest would never go (conn_flush
         * sends nothing to it): fail now, not at the timeout */
        st = req_doomed(ctx, c, &r->tag, 0);
        if (st == FLX_OK && c->errored)
            st = FLX_ERR_PEER_LOST;
        if (st != FLX_OK) {
            list_remove(&c->rdv_head, &c->rdv_tail, r);
            large_mem_done(ctx, r, MEM_FAILED);
            req_finish(r, st);
        }
        return;
    }
    if (kind == WR_RECV) {
        int peer = WR_PEER(wc->wr_id), slot = (int)WR_IDX(wc->wr_id);
        ib_conn_t *c = &ctx->conns[peer];
        const char *buf = ctx->recv_pool +
                          ((size_t)peer * (size_t)ctx->recv_depth + (size_t)slot) * ctx->slot_size;
        if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
            uint32_t id = ntohl(wc->imm_data);
            int known = id < (uint32_t)ctx->rdv_slots;
            tl_req_t *r = known ? ctx->rdv[id].req : NULL;
            if (r != NULL && r->peer == peer) {
                posted_done(ctx, c, r, FLX_OK);
            } else if (known && r == NULL && ctx->rdv[id].failed_peer == peer + 1) {
                /* it wrote before it learnt that this receive failed */
                flx_debug(NET, ctx->rank, "late write from rank %d to failed receive id %u "
                          "dropped", peer, id);
            } else {
                flx_error(NET, ctx->rank, "rank %d wrote to an unknown receive (id %u)", peer, id);
                ib_fail(ctx, FLX_ERR_PROTOCOL, "imm");
                return;
            }
        } else {
            ib_hdr_t h;
            if (wc->byte_len < sizeof(h)) {
                flx_error(NET, ctx->rank, "rank %d sent a runt message of %u bytes", peer,
                          wc->byte_len);
                ib_fail(ctx, FLX_ERR_PROTOCOL, "runt");
                return;
            }
            memcpy(&h, buf, sizeof(h));
            c->credits += h.credits;
            if ((h.type == IB_MSG_EAGER && h.len != wc->byte_len - sizeof(h)) ||
                (h.type != IB_MSG_EAGER && wc->byte_len != sizeof(h))) {
                flx_error(NET, ctx->rank, "rank %d: message of %u bytes announces %llu", peer,
                          wc->byte_len, (unsigned long long)h.len);
                ib_fail(ctx, FLX_ERR_PROTOCOL, "length");
                return;
            }
            if (c->credits > ctx->recv_depth) { /* it has only recv_depth receives for us */
                flx_error(NET, ctx->rank, "rank %d returned %u credits, more than the %d "
                          "receives it posted", peer, h.credits, ctx->recv_depth);
                ib_fail(ctx, FLX_ERR_PROTOCOL, "credits");
                return;
            }
            switch (h.type) {
            case IB_MSG_EAGER:
            case IB_MSG_RTS:
                if (handle_data_hdr(ctx, c, &h, buf + sizeof(h)) != FLX_OK)
                    return;
                break;
            case IB_MSG_CTS:
                if (handle_cts(ctx, c, &h) != FLX_OK)
                    return;
                break;
            case IB_MSG_CREDIT:
                break;
            case IB_MSG_BYE:
                c->bye = 1;
                if (c->posted_head) {
                    flx_error(NET, ctx->rank, "rank %d left the job during collective #%u",
                              peer, c->posted_head->tag.seq);
                    ib_fail(ctx, FLX_ERR_PEER_LOST, "peer left");
                    return;
                }
                break;
            default:
                flx_error(NET, ctx->rank, "rank %d sent unknown message type %u", peer, h.type);
                ib_fail(ctx, FLX_ERR_PROTOCOL, "type");
                return;
            }
        }
        if (ib_post_recv_slot(ctx, c, slot) != FLX_OK) {
            ib_fail(ctx, FLX_ERR_SYSTEM, "repost");
            return;
        }
        c->to_return++;
    }
}

static int poll_cq(tl_ctx_t *ctx)
{
    struct ibv_wc wc[32];
    int total = 0, n;

    while ((n = ibv_poll_cq(ctx->cq, 32, wc)) > 0) {
        for (int i = 0; i < n; i++)
            handle_wc(ctx, &wc[i]);
        total += n;
    }
    if (n < 0 && ctx->err == FLX_OK) {
        flx_error(NET, ctx->rank, "ibv_poll_cq failed");
        ib_fail(ctx, FLX_ERR_SYSTEM, "poll cq");
    }
    return total;
}

/* failure reports and hang-ups on the bootstrap sockets */
static void boot_sock_event(tl_ctx_t *ctx, int peer)
{
    ib_conn_t *c = &ctx->conns[peer];
    ib_err_frame_t f;
    ssize_t n = recv(ctx->boot->fds[peer], &f, sizeof(f), MSG_DONTWAIT);

    if (n == (ssize_t)sizeof(f) && f.magic == IB_ERR_MAGIC) {
        flx_status_t st = f.status == FLX_ERR_MISMATCH ? FLX_ERR_MISMATCH : FLX_ERR_PEER_LOST;
        flx_error(NET, ctx->rank, "rank %d failed at collective #%u (%s); that and later "
                  "collectives fail here too", peer, f.seq, flx_status_string(f.status));
        /* the report travels beside the QP and may overtake data the peer
         * sent for earlier collectives: fail only collective f.seq and later */
        c->errored = 1;
        fail_from_seq(ctx, st, f.seq);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0) { /* only failure reports travel here */
        flx_error(NET, ctx->rank, "rank %d sent %zd bytes that are no failure report on the "
                  "bootstrap socket", peer, n);
        ib_fail(ctx, FLX_ERR_PROTOCOL, "bootstrap socket");
    }
    c->eof = 1;
    /* its last messages and goodbye may still sit in our CQ: take them first */
    poll_cq(ctx);
    if (n == 0 && c->bye)
        return;
    if (c->posted_head || c->sendq_head || c->rdv_head) {
        flx_error(NET, ctx->rank, "connection to rank %d closed while a collective waits for it "
                  "(rank died?)", peer);
        ib_fail(ctx, FLX_ERR_PEER_LOST, "eof");
    }
}

/* While spinning: polls of the CQ between two sched_yield (in case ranks
 * outnumber cores), and between two looks at the clock.  The first look
 * comes after SPIN_CLOCK_POLLS polls (some microseconds natively), so a
 * message that arrives within them costs no clock read: the clock can be a
 * system call (2.4 us a read in the SoftRoCE VM, whose HPET clock source
 * the vDSO cannot read, where a whole 8 B exchange takes 30-60 us).  The
 * spin lasts up to twice SPIN_CLOCK_POLLS polls longer than FLX_IB_SPIN. */
#define SPIN_YIELD_POLLS 64
#define SPIN_CLOCK_POLLS 256
/* While completions keep coming, the bootstrap sockets (failure reports,
 * hang-ups) are still polled this often: a peer's report reaches a rank
 * whose writes stream on, not only one that runs out of work. */
#define BOOT_LOOK_S 0.01

static void flush_all(tl_ctx_t *ctx)
{
    for (int p = 0; p < ctx->size; p++)
        if (p != ctx->rank)
            conn_flush(ctx, &ctx->conns[p]);
}

/* Fill ctx->pfds from index nfds with the bootstrap sockets still open;
 * returns the new count. */
static int boot_pfds(tl_ctx_t *ctx, int nfds)
{
    for (int p = 0; p < ctx->size; p++) {
        if (p == ctx->rank || ctx->boot->fds[p] < 0 || ctx->conns[p].eof)
            continue;
        ctx->pfds[nfds].fd = ctx->boot->fds[p];
        ctx->pfds[nfds++].events = POLLIN;
    }
    return nfds;
}

static void boot_pfds_handle(tl_ctx_t *ctx, int first, int nfds)
{
    ctx->boot_looked = flx_time_coarse();
    for (int i = first; i < nfds; i++) {
        if (!ctx->pfds[i].revents)
            continue;
        for (int p = 0; p < ctx->size; p++)
            if (p != ctx->rank && ctx->boot->fds[p] == ctx->pfds[i].fd)
                boot_sock_event(ctx, p);
    }
}

/* Completions came: handle them, and the bootstrap sockets when they have
 * not been polled for BOOT_LOOK_S (one coarse clock read, no system call). */
static void progress_done(tl_ctx_t *ctx)
{
    flush_all(ctx);
    if (flx_time_coarse() - ctx->boot_looked >= BOOT_LOOK_S) {
        int nfds = boot_pfds(ctx, 0);
        int rc = nfds > 0 ? poll(ctx->pfds, (nfds_t)nfds, 0) : 0;
        if (rc >= 0)
            boot_pfds_handle(ctx, 0, rc > 0 ? nfds : 0);
    }
}

/* Wait up to timeout_s for completions or bootstrap socket events and
 * handle them; also on a failed context (ib_destroy drains with it). */
static void progress_wait(tl_ctx_t *ctx, double timeout_s)
{
    double spin_end = 0, spin = FLX_MIN(ctx->cfg.ib_spin_s, timeout_s);
    int nfds = 0, first_boot, rc;

    /* busy-poll like perftest does, giving the core away now and then in
     * case ranks outnumber cores */
    for (unsigned it = 1;; it++) {
        if (poll_cq(ctx) > 0) {
            progress_done(ctx);
            return;
        }
        if (spin <= 0)
            break;
        if (it % SPIN_CLOCK_POLLS == 0) {
            double now = flx_time_now();
            if (spin_end == 0)
                spin_end = now + spin;
            else if (now >= spin_end)
                break;
        }
        if (it % SPIN_YIELD_POLLS == 0)
            sched_yield();
    }
    /* sleep on the completion channel and the bootstrap sockets */
    if (ibv_req_notify_cq(ctx->cq, 0) != 0) {
        ib_fail(ctx, FLX_ERR_SYSTEM, "req_notify_cq");
        return;
    }
    if (poll_cq(ctx) > 0) {
        progress_done(ctx);
        return;
    }
    ctx->pfds[nfds].fd = ctx->comp_ch->fd;
    ctx->pfds[nfds++].events = POLLIN;
    if (ctx->ch_listen) { /* strangers' connection requests */
        ctx->pfds[nfds].fd = ctx->ch_listen->fd;
        ctx->pfds[nfds++].events = POLLIN;
    }
    first_boot = nfds;
    nfds = boot_pfds(ctx, nfds);
    rc = poll(ctx->pfds, (nfds_t)nfds, timeout_s <= 0 ? 0 : timeout_s > 1 ? 1000
                                                     : (int)(timeout_s * 1000) + 1);
    if (rc < 0)
        return;
    if (rc == 0) {
        ctx->boot_looked = flx_time_coarse();
        return;
    }
    if (ctx->pfds[0].revents) {
        struct ibv_cq *cq;
        void *cq_ctx;
        if (ibv_get_cq_event(ctx->comp_ch, &cq, &cq_ctx) == 0)
            ibv_ack_cq_events(cq, 1);
    }
    if (first_boot == 2 && ctx->pfds[1].revents)
        ib_conn_listen_event(ctx);
    boot_pfds_handle(ctx, first_boot, nfds);
    poll_cq(ctx);
    flush_all(ctx);
}

static flx_status_t ib_progress(tl_ctx_t *ctx, double timeout_s)
{
    if (ctx->err == FLX_OK)
        progress_wait(ctx, timeout_s);
    return ctx->err;
}

/* ---- life cycle ------------------------------------------------------------------ */

flx_status_t ib_resources_create(tl_ctx_t *ctx)
{
    struct ibv_device_attr da;
    size_t rbytes = (size_t)ctx->size * (size_t)ctx->recv_depth * ctx->slot_size;
    size_t sbytes = (size_t)ctx->size * IB_SEND_SLOTS * ctx->slot_size;

    if (ctx->verbs == NULL || ibv_query_device(ctx->verbs, &da) != 0) {
        flx_error(NET, ctx->rank, "ib: the listener is not bound to an RDMA device");
        return FLX_ERR_SYSTEM;
    }
    ctx->pd = ibv_alloc_pd(ctx->verbs);
    ctx->comp_ch = ibv_create_comp_channel(ctx->verbs);
    ctx->cq_size = (ctx->recv_depth + IB_SEND_SLOTS + IB_MAX_CONN_WRITES + 32) * ctx->size;
    if (ctx->cq_size > da.max_cqe)
        ctx->cq_size = da.max_cqe;
    if (ctx->pd && ctx->comp_ch)
        ctx->cq = ibv_create_cq(ctx->verbs, ctx->cq_size, NULL, ctx->comp_ch, 0);
    if (ctx->pd == NULL || ctx->comp_ch == NULL || ctx->cq == NULL) {
        flx_error(NET, ctx->rank, "ib: cannot create PD / completion channel / CQ of %d "
                  "entries on %s: %m", ctx->cq_size, ctx->dev.name);
        return FLX_ERR_SYSTEM;
    }
    if (posix_memalign((void **)&ctx->recv_pool, 4096, rbytes) != 0 ||
        posix_memalign((void **)&ctx->send_pool, 4096, sbytes) != 0) {
        flx_error(NET, ctx->rank, "ib: no memory for %zu bytes of bounce buffers", rbytes + sbytes);
        return FLX_ERR_NO_MEMORY;
    }
    ctx->recv_mr = ibv_reg_mr(ctx->pd, ctx->recv_pool, rbytes, IBV_ACCESS_LOCAL_WRITE);
    ctx->send_mr = ibv_reg_mr(ctx->pd, ctx->send_pool, sbytes, IBV_ACCESS_LOCAL_WRITE);
    if (ctx->recv_mr == NULL || ctx->send_mr == NULL) {
        flx_error(NET, ctx->rank, "ib: cannot register %zu bytes of bounce buffers: %m (check "
                  "ulimit -l)", rbytes + sbytes);
        return FLX_ERR_NO_MEMORY;
    }
    ctx->mrc.pd = ctx->pd;
    ctx->mrc.max_entries = ctx->cfg.ib_reg_cache;
    ctx->mrc.rank = ctx->rank;
    ctx->mrc.leave_pinned = ctx->cfg.ib_leave_pinned && ib_mr_leave_pinned_active();
    ctx->mrc.stage.nslots = ctx->cfg.ib_stage_slots;
    ctx->mrc.stage.slot_size = ctx->cfg.ib_stage_size;
    if (ctx->cfg.ib_leave_pinned && !ctx->mrc.leave_pinned)
        flx_warn(NET, ctx->rank, "FLX_IB_LEAVE_PINNED is on but was not in the environment when the "
                 "program started (or this C library has no mallopt): buffers not registered with "
                 "flx_mem_register are registered per message");
    else if (ctx->mrc.leave_pinned)
        flx_info(NET, ctx->rank, "ib: leave pinned: every buffer's registration is cached");
    return FLX_OK;
}

static void ib_destroy(tl_ctx_t *ctx);

static flx_status_t ib_create(boot_t *boot, const flx_config_t *cfg, tl_ctx_t **ctx_p)
{
    tl_ctx_t *ctx;
    flx_status_t st;

    (void)ibv_fork_init(); /* registrations stay valid in the parent across fork() */
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return FLX_ERR_NO_MEMORY;
    ctx->rank = boot->rank;
    ctx->size = boot->size;
    ctx->cfg = *cfg;
    ctx->boot = boot;
    ctx->eager_max = cfg->ib_eager;
    ctx->slot_size = sizeof(ib_hdr_t) + ctx->eager_max;
    ctx->recv_depth = cfg->ib_recv_depth;
    ctx->nqps = cfg->ib_qps_per_peer;
    ctx->rdv_slots = 4096;
    ctx->conns = calloc((size_t)ctx->size, sizeof(*ctx->conns));
    ctx->rdv = calloc((size_t)ctx->rdv_slots, sizeof(*ctx->rdv));
    ctx->pfds = calloc((size_t)ctx->size + 2, sizeof(*ctx->pfds));
    if (ctx->conns == NULL || ctx->rdv == NULL || ctx->pfds == NULL) {
        st = FLX_ERR_NO_MEMORY;
        goto err_destroy_ctx;
    }
    for (int p = 0; p < ctx->size; p++) {
        ctx->conns[p].peer = p;
        ctx->conns[p].boot_fd = boot->fds[p];
    }
    st = ib_dev_choose(cfg, ctx->rank, &ctx->dev);
    if (st != FLX_OK)
        goto err_destroy_ctx;
    st = ib_conn_setup(ctx, boot);
    if (st != FLX_OK)
        goto err_destroy_ctx;
    flx_info(NET, ctx->rank, "ib: %d QP(s) to each of %d peers on %s port %d, eager up to %zu "
             "bytes, inline %u", ctx->nqps, ctx->size - 1, ctx->dev.name, ctx->dev.port,
             ctx->eager_max, ctx->max_inline);
    *ctx_p = ctx;
    return FLX_OK;

err_destroy_ctx:
    ctx->err = st;
    ib_destroy(ctx);
    return st;
}

/* Must the QPs to c stay until more completes?  Healthy: until the
 * goodbyes went both ways.  Failed: until every send posted to c has
 * completed.  c may still be finishing a collective that this rank
 * completed, and a destroyed QP drops what it has not delivered; the
 * failure report and the hang-up of the bootstrap socket would overtake
 * those messages and fail that collective on c. */
static int destroy_waits_for(const tl_ctx_t *ctx, const ib_conn_t *c)
{
    if (!c->connected || c->errored || c->eof)
        return 0;
    if (ctx->err != FLX_OK)
        return c->s_tail != c->s_head;
    return !c->bye || (c->bye_posted && !c->bye_sent_done);
}

/* Tell every peer we are done (or, failed, fence what we sent), wait until
 * our last sends completed and every peer said the same, then release:
 * QPs, MRs, CQ, PD, channels. */
static void ib_destroy(tl_ctx_t *ctx)
{
    double deadline = flx_time_now() + ctx->cfg.timeout_s;
    int waiting = 1;

    for (int p = 0; ctx->conns && p < ctx->size; p++) {
        ib_conn_t *c = &ctx->conns[p];
        ib_hdr_t h;
        if (p == ctx->rank || !c->connected)
            continue;
        if (ctx->err != FLX_OK) {
            /* no goodbye: a signaled CREDIT behind the unsignaled sends
             * tells when they all completed (when none can go, the last
             * send was signaled itself: post_msg) */
            hdr_from_tag(&h, IB_MSG_CREDIT, NULL, 0);
            if (c->s_tail != c->s_head && can_send(ctx, c, 1) &&
                post_msg(ctx, c, &h, NULL, 0, 1) != FLX_OK)
                c->errored = 1;
            continue;
        }
        /* no goodbye to a peer that failed or left (can_send never
         * allows one): it waits for nothing from us */
        while (!can_send(ctx, c, 1) && !c->errored && !c->eof && flx_time_now() < deadline &&
               ctx->err == FLX_OK)
            ib_progress(ctx, 0.01);
        if (!can_send(ctx, c, 1))
            continue;
        hdr_from_tag(&h, IB_MSG_BYE, NULL, 0);
        c->bye_seq = c->s_head;
        if (post_msg(ctx, c, &h, NULL, 0, 1) == FLX_OK)
            c->bye_posted = 1;
    }
    while (waiting && ctx->conns && flx_time_now() < deadline) {
        waiting = 0;
        for (int p = 0; p < ctx->size; p++)
            if (p != ctx->rank && destroy_waits_for(ctx, &ctx->conns[p]))
                waiting = 1;
        if (waiting)
            progress_wait(ctx, 0.05);
    }
    ib_conn_teardown(ctx); /* the QPs first: failed requests' registrations go after */
    flx_info(NET, ctx->rank, "ib: registrations: %llu cache hits, %llu misses, %llu evictions, "
             "%llu for one message; staging: %llu messages, %llu found every slot busy, %llu "
             "waits for a slot (out of locked memory)",
             (unsigned long long)ctx->mrc.hits, (unsigned long long)ctx->mrc.misses,
             (unsigned long long)ctx->mrc.evictions, (unsigned long long)ctx->mrc.transient,
             (unsigned long long)ctx->mrc.stage.staged, (unsigned long long)ctx->mrc.stage.full,
             (unsigned long long)ctx->mrc.waited);
    ib_mr_cache_flush(&ctx->mrc);
    if (ctx->send_mr)
        ibv_dereg_mr(ctx->send_mr);
    if (ctx->recv_mr)
        ibv_dereg_mr(ctx->recv_mr);
    /* the verbs refuse (EBUSY) to free an object something still uses: a
     * refusal here is a leaked QP, MR or CQ, and says so (test-ib.sh fails) */
    if (ctx->cq && (errno = ibv_destroy_cq(ctx->cq)) != 0)
        flx_error(NET, ctx->rank, "ib teardown: the CQ is still in use (leaked verbs objects): %m");
    if (ctx->comp_ch && (errno = ibv_destroy_comp_channel(ctx->comp_ch)) != 0)
        flx_error(NET, ctx->rank, "ib teardown: the completion channel is still in use (leaked "
                                  "verbs objects): %m");
    if (ctx->pd && (errno = ibv_dealloc_pd(ctx->pd)) != 0)
        flx_error(NET, ctx->rank, "ib teardown: the PD is still in use (leaked verbs objects): %m");
    ib_conn_close_listener(ctx);
    for (int p = 0; ctx->conns && p < ctx->size; p++) {
        ib_conn_t *c = &ctx->conns[p];
        while (c->unexp_head) {
            ib_unexp_t *u = c->unexp_head;
            c->unexp_head = u->next;
            free(u->buf);
            free(u);
        }
        while (c->cts_head) {
            ib_cts_t *t = c->cts_head;
            c->cts_head = t->next;
            free(t);
        }
    }
    free(ctx->recv_pool);
    free(ctx->send_pool);
    free(ctx->conns);
    free(ctx->rdv);
    free(ctx->pfds);
    free(ctx);
}

static flx_status_t ib_mem_register(tl_ctx_t *ctx, void *addr, size_t len)
{
    flx_status_t st = ib_mr_pin(&ctx->mrc, addr, len);

    if (st == FLX_ERR_INVALID_ARG)
        flx_error(NET, ctx->rank, "flx_mem_register: [%p, +%zu) overlaps a range still "
                  "registered (deregister it first)", addr, len);
    else if (st != FLX_OK)
        flx_error(NET, ctx->rank, "flx_mem_register: no memory to note [%p, +%zu)", addr, len);
    return st;
}

static flx_status_t ib_mem_deregister(tl_ctx_t *ctx, void *addr)
{
    flx_status_t st = ib_mr_unpin(&ctx->mrc, addr);

    if (st == FLX_ERR_NOT_FOUND)
        flx_error(NET, ctx->rank, "flx_mem_deregister: %p is not the start of a registered "
                  "range", addr);
    return st;
}

const tl_ops_t tl_ib_ops = {
    .name = "ib",
    .create = ib_create,
    .destroy = ib_destroy,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .progress = ib_progress,
    .fail = ib_fail_at,
    .error = ib_error,
    .mem_register = ib_mem_register,
    .mem_deregister = ib_mem_deregister,
};
