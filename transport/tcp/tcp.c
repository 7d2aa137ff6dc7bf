/* tcp.c -- the tcp backend (see tcp.h). */
#include "transport/tcp/tcp.h"
#include "transport/tcp/hdr.h"
#include "transport/boot.h"
#include "transport/sock.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* Every length read from the wire is checked against the posted receive;
 * an unexpected message may not exceed this. */
#define TCP_MAX_UNEXPECTED ((uint64_t)1 << 36)
/* An unexpected message's buffer starts at this size and doubles as its
 * payload arrives, so a header that lies about its length costs nothing. */
#define TCP_UNEXP_FIRST ((size_t)1 << 20)
/* A message at least this long that arrives while no receive from its
 * peer is posted is left in the socket (parked) for up to FLX_TCP_PARK:
 * its receive, once posted, takes it straight from the kernel, where
 * reading it early would cost a buffer (fresh pages) and a second copy,
 * on a core other ranks may need.  Shorter ones are cheap to buffer. */
#define TCP_PARK_MIN ((uint64_t)64 << 10)

static void req_finish(tl_req_t *req, flx_status_t st)
{
    req->status = st;
    req->complete = 1;
}

static int seq_ge(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }

static void hdr_from_tag(tcp_hdr_t *h, int type, const tl_tag_t *tag, size_t len)
{
    memset(h, 0, sizeof(*h));
    h->magic = TCP_MAGIC;
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

/* ---- failure ------------------------------------------------------------ */

static void conn_fail_all(tcp_conn_t *c, flx_status_t st)
{
    for (tl_req_t *r = c->sq_head; r; r = r->next)
        req_finish(r, st);
    for (tl_req_t *r = c->posted_head; r; r = r->next)
        req_finish(r, st);
    c->sq_head = c->sq_tail = NULL;
    c->posted_head = c->posted_tail = NULL;
    c->rreq = NULL;
}

/* The context fails at collective seq: see tl.h. */
static void tcp_fail_at(tl_ctx_t *ctx, flx_status_t st, uint32_t seq, const char *why)
{
    tcp_hdr_t h;

    if (ctx->err != FLX_OK)
        return;
    ctx->err = st;
    flx_debug(NET, ctx->rank, "transport failed (%s): %s", flx_status_name(st), why);
    hdr_from_tag(&h, TCP_MSG_ERROR, NULL, 0);
    h.status = st;
    h.seq = seq; /* collectives before this one completed here */
    for (int p = 0; p < ctx->size; p++) {
        tcp_conn_t *c = &ctx->conns[p];
        /* a message partly written: the notice would land inside it (and
         * a peer that failed itself reads nothing more: no notice either) */
        int mid_message =
            (c->sq_head && c->sq_head->done_bytes > 0) || c->switch_sent > 0 || c->errored;
        if (c->fd < 0)
            continue;
        conn_fail_all(c, st);
        /* best effort: tell the peer why, then cut the connection so that
         * every rank notices at once instead of at its timeout */
        if (!mid_message && !c->eof) {
            /* the kernel's low-water mark again, so that unsent data
             * under the socket buffer's size leaves room for the notice */
            (void)sock_set_notsent_lowat(c->wfd, 0);
            (void)send(c->wfd, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        for (int i = 0; i < 2; i++)
            if (c->sock[i] >= 0)
                shutdown(c->sock[i], SHUT_RDWR);
    }
}

/* A failure of the transport itself comes while requests of the latest
 * collective are posted: that one did not complete here. */
static void tcp_fail(tl_ctx_t *ctx, flx_status_t st, const char *why)
{
    tcp_fail_at(ctx, st, ctx->cur.tag.seq, why);
}

/* Fail the requests of collective seq and later; earlier collectives may
 * still complete (their messages were sent before the failure). */
static void fail_from_seq(tl_ctx_t *ctx, flx_status_t st, uint32_t seq)
{
    if (!ctx->remote_failed || !seq_ge(seq, ctx->remote_seq)) {
        ctx->remote_failed = 1;
        ctx->remote_seq = seq;
        ctx->remote_err = st;
    }
    for (int p = 0; p < ctx->size; p++) {
        tcp_conn_t *c = &ctx->conns[p];
        tl_req_t **pp = &c->posted_head, *last = NULL;
        while (*pp) {
            tl_req_t *r = *pp;
            if (seq_ge(r->tag.seq, seq) && r != c->rreq) {
                *pp = r->next;
                req_finish(r, st);
            } else {
                last = r;
                pp = &r->next;
            }
        }
        c->posted_tail = last;
        /* a send already on the wire finishes; the ones behind it do not go */
        pp = c->sq_head ? &c->sq_head->next : &c->sq_head;
        last = c->sq_head;
        while (*pp) {
            tl_req_t *r = *pp;
            if (seq_ge(r->tag.seq, seq)) {
                *pp = r->next;
                req_finish(r, st);
            } else {
                last = r;
                pp = &r->next;
            }
        }
        c->sq_tail = last;
    }
}

/* The peer of c stopped reading when it failed: nothing queued for it goes. */
static void conn_fail_sends(tcp_conn_t *c, flx_status_t st)
{
    for (tl_req_t *r = c->sq_head; r; r = r->next)
        req_finish(r, st);
    c->sq_head = c->sq_tail = NULL;
}

/* The peer of c is gone after reporting a failure: nothing more comes. */
static void conn_fail_posted(tcp_conn_t *c, flx_status_t st)
{
    for (tl_req_t *r = c->posted_head; r; r = r->next)
        req_finish(r, st);
    c->posted_head = c->posted_tail = NULL;
    c->rreq = NULL;
}

/* A request that can never run: the status it gets, or FLX_OK.  A
 * receive passes conn NULL: a message its peer sent before failing may
 * have arrived, and tcp_irecv looks for it first. */
static flx_status_t req_doomed(tl_ctx_t *ctx, tcp_conn_t *c, const tl_tag_t *tag)
{
    if (ctx->err != FLX_OK)
        return ctx->err;
    if (ctx->remote_failed && seq_ge(tag->seq, ctx->remote_seq))
        return ctx->remote_err;
    if (c && c->errored)
        return ctx->remote_failed ? ctx->remote_err : FLX_ERR_PEER_LOST;
    return FLX_OK;
}

static flx_status_t tcp_error(tl_ctx_t *ctx) { return ctx->err; }

/* ---- the higher rank's lane (lane.h) ------------------------------------------ */

/* Is a long message to or from the peer of c under way: queued or being
 * sent, posted or being received, or parked? */
static int lane_busy(const tcp_conn_t *c)
{
    for (const tl_req_t *r = c->sq_head; r; r = r->next)
        if (r->len >= TCP_SPLIT_MIN)
            return 1;
    for (const tl_req_t *r = c->posted_head; r; r = r->next)
        if (r->len >= TCP_SPLIT_MIN)
            return 1;
    return (c->parked || c->rreq || c->runexp) && c->rhdr.len >= TCP_SPLIT_MIN;
}

/* A long message of len bytes begins on c (posted, queued or arriving):
 * a period begins unless one runs, of the size class of that message,
 * and the lane of the higher rank's long messages is picked for it. */
static void lane_begin(tcp_conn_t *c, uint64_t len)
{
    tcp_lane_t *l = &c->lane;

    if (!c->lane_auto || l->t0 > 0)
        return;
    l->t0 = flx_time_now();
    l->bytes = 0;
    l->bucket = tcp_lane_bucket(len);
    l->lane = tcp_lane_pick(l, l->bucket);
    l->count[l->bucket]++;
    c->wfd_long = l->lane == TCP_LANE_SHARED ? c->sock[0] : c->sock[1];
}

/* A long message of len bytes finished on c: the period ends when no
 * other long one is under way, and counts for its class. */
static void lane_done(tcp_conn_t *c, uint64_t len)
{
    tcp_lane_t *l = &c->lane;

    if (!c->lane_auto || l->t0 == 0)
        return;
    l->bytes += len;
    if (lane_busy(c))
        return;
    tcp_lane_note(l, l->bucket, l->lane, flx_time_now() - l->t0, l->bytes);
    l->t0 = 0;
}

/* At debug level, what the higher rank measured on c: periods on each
 * lane and the estimates (ns per byte) of each size class (of a period's
 * first message). */
static void lane_report(tl_ctx_t *ctx, const tcp_conn_t *c)
{
    const tcp_lane_t *l = &c->lane;
    char classes[TCP_LANE_BUCKETS * 32] = "";
    size_t n = 0;

    if (!c->lane_auto || l->used[0] + l->used[1] == 0 || !flx_log_enabled(FLX_LOG_DEBUG, FLX_SUBSYS_NET))
        return;
    for (int b = 0; b < TCP_LANE_BUCKETS && n < sizeof(classes); b++) {
        const double *cost = l->cost[b];
        unsigned long long from = (unsigned long long)1 << (b + 16);
        if (cost[TCP_LANE_SPLIT] == 0 && cost[TCP_LANE_SHARED] == 0)
            continue;
        n += (size_t)snprintf(classes + n, sizeof(classes) - n, " %llu%c %.3f/%.3f",
                              from >> (from >= (1ull << 30) ? 30 : from >= (1ull << 20) ? 20 : 10),
                              from >= (1ull << 30) ? 'G' : from >= (1ull << 20) ? 'M' : 'K',
                              cost[TCP_LANE_SPLIT] * 1e9, cost[TCP_LANE_SHARED] * 1e9);
    }
    flx_debug(NET, ctx->rank, "tcp: long messages to rank %d (FLX_TCP_LANE=auto): %lu periods "
              "measured on the second connection, %lu on the first; ns per byte on "
              "second/first by size class:%s", c->peer, l->used[TCP_LANE_SPLIT],
              l->used[TCP_LANE_SHARED], classes[0] ? classes : " none");
}

/* ---- sending ------------------------------------------------------------- */

static int conn_recv_progress(tl_ctx_t *ctx, tcp_conn_t *c);

/* A send failed (errno says why, not EAGAIN).  0: only what goes to c
 * failed (its peer said why it left), -1: the context failed. */
static int conn_send_failed(tl_ctx_t *ctx, tcp_conn_t *c)
{
    /* a failed peer sends its notice, then cuts the connection: the
     * notice is in our socket before the reset, read it.  It goes where
     * we read (fd); the send may have failed on the other connection,
     * whose reset nothing orders after the notice: give it a moment. */
    if (!c->errored) {
        int err = errno;
        if (c->wfd != c->fd && !c->eof && !c->parked) {
            struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
            (void)poll(&pfd, 1, 100);
        }
        (void)conn_recv_progress(ctx, c);
        errno = err;
    }
    if (c->errored) { /* it said why it left: fail only what goes there */
        conn_fail_sends(c, ctx->remote_err);
        return 0;
    }
    if (ctx->err != FLX_OK) /* reading it failed the context: said there */
        return -1;
    flx_error(NET, ctx->rank, "send to rank %d failed: %m", c->peer);
    tcp_fail(ctx, sock_errno_status(errno), "send failed");
    return -1;
}

/* Before the first byte of a message that goes on the pair's other
 * connection: a SWITCH header where the peer reads now.  1: written, wfd
 * is now the other connection; 0: not yet (the socket is full), or the
 * peer failed (conn_send_failed); -1: the context failed. */
static int conn_switch(tl_ctx_t *ctx, tcp_conn_t *c, int to)
{
    tcp_hdr_t h;
    ssize_t w;

    hdr_from_tag(&h, TCP_MSG_SWITCH, NULL, 0);
    w = send(c->wfd, (char *)&h + c->switch_sent, sizeof(h) - c->switch_sent,
             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : conn_send_failed(ctx, c);
    c->switch_sent += (size_t)w;
    if (c->switch_sent < sizeof(h))
        return 0;
    c->switch_sent = 0;
    c->wfd = to;
    return 1;
}

/* The connection's segment size now (TCP_MAXSEG: it grows after the
 * first exchanges, 32768 -> 65483 bytes on loopback); 0 unknown. */
static long sock_mss(int fd)
{
    int mss = 0;
    socklen_t len = sizeof(mss);

    if (getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) != 0)
        return 0;
    return mss;
}

/* Write as much of the queue as the sockets take, a long message in
 * writes of c->wcap bytes (tcp_write_cap).  0 ok, -1 failed. */
static int conn_send_progress(tl_ctx_t *ctx, tcp_conn_t *c)
{
    while (c->sq_head) {
        tl_req_t *r = c->sq_head;
        const size_t hlen = sizeof(tcp_hdr_t);
        size_t total = hlen + r->len;
        int to = r->len >= TCP_SPLIT_MIN ? c->wfd_long : c->sock[0];
        struct iovec iov[2];
        size_t len, want = 0;
        int n = 0;
        ssize_t w;

        if (c->switch_sent > 0) /* a SWITCH partly written: it must lead there */
            to = c->wfd == c->sock[0] ? c->sock[1] : c->sock[0];
        if (r->done_bytes == 0 && to != c->wfd) {
            int sw = conn_switch(ctx, c, to);
            if (sw <= 0)
                return sw;
        }
        if (r->done_bytes == 0) /* its first write: the segment size as it is now */
            c->wcap = total > ctx->cfg.tcp_write_max && ctx->cfg.tcp_write_max > 0
                          ? tcp_write_cap(ctx->cfg.tcp_write_max, sock_mss(c->wfd))
                          : SIZE_MAX;
        if (r->done_bytes < hlen) {
            iov[n].iov_base = (char *)r->priv + r->done_bytes;
            iov[n++].iov_len = hlen - r->done_bytes;
            if (r->len) {
                iov[n].iov_base = r->buf;
                iov[n++].iov_len = r->len;
            }
        } else {
            iov[n].iov_base = (char *)r->buf + (r->done_bytes - hlen);
            iov[n++].iov_len = total - r->done_bytes;
        }
        {
            size_t room = tcp_write_room(r->done_bytes, c->wcap);
            for (int i = 0; i < n; i++) {
                iov[i].iov_len = FLX_MIN(iov[i].iov_len, room - want);
                want += iov[i].iov_len;
            }
        }
        /* sendmsg, not writev: MSG_NOSIGNAL turns a vanished peer into
         * EPIPE (FLX_ERR_PEER_LOST) instead of a SIGPIPE that kills us */
        {
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
            w = sendmsg(c->wfd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return 0;
            return conn_send_failed(ctx, c);
        }
        r->done_bytes += (size_t)w;
        if (r->done_bytes < total) {
            if ((size_t)w < want) /* the socket is full */
                return 0;
            continue;
        }
        c->sq_head = r->next;
        if (c->sq_head == NULL)
            c->sq_tail = NULL;
        len = r->len; /* r is its owner's once finished */
        req_finish(r, FLX_OK);
        if (len >= TCP_SPLIT_MIN)
            lane_done(c, len);
    }
    return 0;
}

static flx_status_t note_collective(tl_ctx_t *ctx, const tl_tag_t *tag);

static flx_status_t tcp_isend(tl_ctx_t *ctx, int peer, const tl_tag_t *tag, const void *buf,
                              size_t len, tl_req_t *req)
{
    tcp_conn_t *c = &ctx->conns[peer];

    _Static_assert(sizeof(tcp_hdr_t) <= sizeof(req->priv), "header fits the request");
    memset(req, 0, sizeof(*req));
    req->peer = peer;
    req->is_send = 1;
    req->tag = *tag;
    req->buf = (void *)buf;
    req->len = len;
    if ((req->status = note_collective(ctx, tag)) != FLX_OK ||
        (req->status = req_doomed(ctx, c, tag)) != FLX_OK) {
        req_finish(req, req->status);
        return req->status;
    }
    if (c->bye || c->eof) {
        flx_error(NET, ctx->rank, "rank %d has left the job; collective #%u cannot complete",
                  peer, tag->seq);
        tcp_fail(ctx, FLX_ERR_PEER_LOST, "peer gone");
        req_finish(req, FLX_ERR_PEER_LOST);
        return FLX_ERR_PEER_LOST;
    }
    hdr_from_tag((tcp_hdr_t *)req->priv, TCP_MSG_DATA, tag, len);
    if (c->sq_tail)
        c->sq_tail->next = req;
    else
        c->sq_head = req;
    c->sq_tail = req;
    if (len >= TCP_SPLIT_MIN)
        lane_begin(c, len);
    if (c->sq_head == req)
        conn_send_progress(ctx, c); /* eager: most small messages leave here */
    return FLX_OK;
}

/* ---- receiving ------------------------------------------------------------ */

static tl_tag_t hdr_tag(const tcp_hdr_t *h)
{
    return (tl_tag_t){.seq = h->seq, .step = h->step, .kind = h->kind, .dtype = h->dtype,
                      .op = h->op, .count = h->count};
}

static flx_status_t mismatch(tl_ctx_t *ctx, tcp_conn_t *c, const tcp_hdr_t *h,
                             const tl_tag_t *t)
{
    tl_tag_t theirs = hdr_tag(h);

    tl_log_mismatch(ctx->rank, c->peer, &theirs, t);
    tcp_fail(ctx, FLX_ERR_MISMATCH, "mismatched collective");
    return FLX_ERR_MISMATCH;
}

/* A message of a collective this rank has finished without receiving it:
 * the ranks' calls differed where no signature shows it (a broadcast that
 * two ranks each took for their own root: each sends, and the ranks whose
 * part came from the other root finish).  Collectives run one at a time on
 * a communicator, so a message older than the newest collective here was
 * left over by an earlier one; this rank returned FLX_OK from that one, and
 * this one fails (tl.h). */
static flx_status_t stale(tl_ctx_t *ctx, tcp_conn_t *c, const tcp_hdr_t *h)
{
    tl_tag_t theirs = hdr_tag(h);

    tl_log_stale(ctx->rank, c->peer, &theirs, ctx->cur.tag.seq);
    tcp_fail(ctx, FLX_ERR_MISMATCH, "message of a finished collective");
    return FLX_ERR_MISMATCH;
}

/* A request of collective tag->seq.  When it is a new one, the messages of
 * it that came early from any peer must carry its signature (a rank that
 * called another collective or count may send nothing this rank receives
 * from it, a count-0 call's barrier for one), and none of an earlier one
 * may be left. */
static flx_status_t note_collective(tl_ctx_t *ctx, const tl_tag_t *tag)
{
    if (!tl_cur_note(&ctx->cur, tag))
        return FLX_OK;
    for (int p = 0; p < ctx->size; p++) {
        tcp_conn_t *c = &ctx->conns[p];
        if (c->parked && !seq_ge(c->rhdr.seq, tag->seq))
            return stale(ctx, c, &c->rhdr);
        if (c->parked && tcp_hdr_match(&c->rhdr, tag, 0) == FLX_ERR_MISMATCH)
            return mismatch(ctx, c, &c->rhdr, tag);
        for (tcp_unexp_t *u = c->unexp_head; u; u = u->next) {
            if (!u->claimed && !seq_ge(u->hdr.seq, tag->seq))
                return stale(ctx, c, &u->hdr);
            if (tcp_hdr_match(&u->hdr, tag, 0) == FLX_ERR_MISMATCH)
                return mismatch(ctx, c, &u->hdr, tag);
        }
    }
    return FLX_OK;
}

/* Messages from one peer arrive in order: a later collective's message
 * while we still wait for an earlier one means the peer skipped it. */
static flx_status_t skipped(tl_ctx_t *ctx, tcp_conn_t *c, uint32_t seq_there, uint32_t seq_here)
{
    flx_error(NET, ctx->rank, "rank %d is already at collective #%u while this rank waits "
              "for its part of #%u (different call sequence on the two ranks)",
              c->peer, seq_there, seq_here);
    tcp_fail(ctx, FLX_ERR_MISMATCH, "skipped collective");
    return FLX_ERR_MISMATCH;
}

/* The wire's length must be what the receive expects; else fail. */
static int length_ok(tl_ctx_t *ctx, tcp_conn_t *c, const tcp_hdr_t *h, size_t expected)
{
    if (h->len == expected)
        return 1;
    flx_error(NET, ctx->rank, "rank %d sent %llu bytes for collective #%u step %u, expected %zu",
              c->peer, (unsigned long long)h->len, h->seq, h->step, expected);
    tcp_fail(ctx, FLX_ERR_PROTOCOL, "length");
    return 0;
}

static void unexp_remove(tcp_conn_t *c, tcp_unexp_t *u)
{
    tcp_unexp_t **pp = &c->unexp_head;
    tcp_unexp_t *prev = NULL;

    while (*pp && *pp != u) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == NULL)
        return;
    *pp = u->next;
    if (c->unexp_tail == u)
        c->unexp_tail = prev;
}

static int conn_route_data(tl_ctx_t *ctx, tcp_conn_t *c, int may_park);

static void park_leave(tl_ctx_t *ctx, tcp_conn_t *c)
{
    c->parked = 0;
    ctx->nparked--;
}

static flx_status_t tcp_irecv(tl_ctx_t *ctx, int peer, const tl_tag_t *tag, void *buf,
                              size_t len, tl_req_t *req)
{
    tcp_conn_t *c = &ctx->conns[peer];

    memset(req, 0, sizeof(*req));
    req->peer = peer;
    req->tag = *tag;
    req->buf = buf;
    req->len = len;
    if ((req->status = note_collective(ctx, tag)) != FLX_OK ||
        (req->status = req_doomed(ctx, NULL, tag)) != FLX_OK) {
        req_finish(req, req->status);
        return req->status;
    }
    for (tcp_unexp_t *u = c->unexp_head; u; u = u->next) {
        int m = u->claimed ? TCP_HDR_OTHER : tcp_hdr_match(&u->hdr, tag, len);
        if (m == TCP_HDR_OTHER && !u->claimed && (int32_t)(u->hdr.seq - tag->seq) > 0)
            return skipped(ctx, c, u->hdr.seq, tag->seq);
        if (m == TCP_HDR_OTHER)
            continue;
        if (m == FLX_ERR_MISMATCH)
            return mismatch(ctx, c, &u->hdr, tag);
        if (!length_ok(ctx, c, &u->hdr, len))
            return FLX_ERR_PROTOCOL;
        if (u->got < len) {   /* still arriving: finish when complete */
            if (c->errored || c->eof)
                break;        /* the rest never comes */
            u->claimed = req;
            return FLX_OK;
        }
        if (len)
            memcpy(buf, u->buf, len);
        unexp_remove(c, u);
        free(u->buf);
        free(u);
        req_finish(req, FLX_OK);
        return FLX_OK;
    }
    if (c->errored || (c->eof && ctx->remote_failed)) {
        req_finish(req, ctx->remote_failed ? ctx->remote_err : FLX_ERR_PEER_LOST);
        return req->status;
    }
    if (c->bye || c->eof) {
        flx_error(NET, ctx->rank, "rank %d has left the job; collective #%u cannot complete",
                  peer, tag->seq);
        tcp_fail(ctx, FLX_ERR_PEER_LOST, "peer gone");
        return FLX_ERR_PEER_LOST;
    }
    if (c->posted_tail)
        c->posted_tail->next = req;
    else
        c->posted_head = req;
    c->posted_tail = req;
    if (len >= TCP_SPLIT_MIN)
        lane_begin(c, len);
    if (c->parked) { /* its payload goes here, or (not ours) into a buffer */
        park_leave(ctx, c);
        if (conn_route_data(ctx, c, 0) != 0)
            return ctx->err;
    }
    return FLX_OK;
}

/* A complete header arrived: find where its payload goes. */
static int conn_dispatch_header(tl_ctx_t *ctx, tcp_conn_t *c)
{
    tcp_hdr_t *h = &c->rhdr;
    const char *why;

    if (tcp_hdr_decode(&c->rhdr, sizeof(c->rhdr), h, &why) != FLX_OK) {
        flx_error(NET, ctx->rank, "garbage from rank %d (%s: magic 0x%08x type %u)", c->peer,
                  why, h->magic, h->type);
        tcp_fail(ctx, FLX_ERR_PROTOCOL, why);
        return -1;
    }
    if (h->type == TCP_MSG_SWITCH) { /* its next message is on the other connection */
        int fd = c->fd;
        size_t off = c->ra_off, len = c->ra_len;
        char *ra = c->ra;
        if (c->fd_alt < 0) {
            flx_error(NET, ctx->rank, "rank %d switched connections, but this pair has one "
                      "(FLX_TCP_SOCKETS differs?)", c->peer);
            tcp_fail(ctx, FLX_ERR_PROTOCOL, "switch without a second connection");
            return -1;
        }
        c->fd = c->fd_alt, c->ra = c->ra_alt, c->ra_off = c->ra_off_alt, c->ra_len = c->ra_len_alt;
        c->fd_alt = fd, c->ra_alt = ra, c->ra_off_alt = off, c->ra_len_alt = len;
        return 0;
    }
    if (h->type == TCP_MSG_BYE) {
        c->bye = 1;
        if (c->posted_head) {
            flx_error(NET, ctx->rank, "rank %d left the job during collective #%u", c->peer,
                      c->posted_head->tag.seq);
            tcp_fail(ctx, FLX_ERR_PEER_LOST, "peer left");
            return -1;
        }
        return 0;
    }
    if (h->type == TCP_MSG_ERROR) {
        flx_status_t st = h->status == FLX_ERR_MISMATCH ? FLX_ERR_MISMATCH : FLX_ERR_PEER_LOST;
        flx_error(NET, ctx->rank, "rank %d failed at collective #%u (%s); that and later "
                  "collectives fail here too", c->peer, h->seq,
                  flx_status_string((flx_status_t)h->status));
        c->errored = 1;
        fail_from_seq(ctx, st, h->seq);
        /* what it sent before the failure has arrived: nothing more will;
         * and it reads nothing more, so a send to it (even one partly
         * written) would wait out the timeout once its connection closes */
        conn_fail_posted(c, st);
        conn_fail_sends(c, st);
        return 0;
    }
    if (h->len >= TCP_SPLIT_MIN)
        lane_begin(c, h->len);
    return conn_route_data(ctx, c, 1);
}

/* The DATA header in c->rhdr: its payload goes into the posted receive it
 * matches; else, when may_park and no receive from this peer is posted
 * at all (none can be waiting behind it), a long one stays in the socket
 * (parked: tcp_irecv or tcp_progress routes it again); else into an
 * unexpected buffer.  0 ok, -1 failed. */
static int conn_route_data(tl_ctx_t *ctx, tcp_conn_t *c, int may_park)
{
    tcp_hdr_t *h = &c->rhdr;
    tl_req_t *prev = NULL;

    for (tl_req_t *r = c->posted_head; r; prev = r, r = r->next) {
        int m = tcp_hdr_match(h, &r->tag, r->len);
        if (m == TCP_HDR_OTHER)
            continue;
        if (m == FLX_ERR_MISMATCH) {
            mismatch(ctx, c, h, &r->tag);
            return -1;
        }
        if (!length_ok(ctx, c, h, r->len))
            return -1;
        if (prev)
            prev->next = r->next;
        else
            c->posted_head = r->next;
        if (c->posted_tail == r)
            c->posted_tail = prev;
        r->next = NULL;
        c->rreq = r;
        return 0;
    }
    if (c->posted_head && (int32_t)(h->seq - c->posted_head->tag.seq) > 0) {
        skipped(ctx, c, h->seq, c->posted_head->tag.seq);
        return -1;
    }
    /* no receive of it posted, and its collective is over here */
    if (ctx->cur.set && !seq_ge(h->seq, ctx->cur.tag.seq)) {
        stale(ctx, c, h);
        return -1;
    }
    /* early, but of the collective running here: it must be the same call */
    if (ctx->cur.set && tcp_hdr_match(h, &ctx->cur.tag, 0) == FLX_ERR_MISMATCH) {
        mismatch(ctx, c, h, &ctx->cur.tag);
        return -1;
    }
    if (h->len > TCP_MAX_UNEXPECTED) {
        flx_error(NET, ctx->rank, "rank %d announced an absurd message of %llu bytes", c->peer,
                  (unsigned long long)h->len);
        tcp_fail(ctx, FLX_ERR_PROTOCOL, "absurd length");
        return -1;
    }
    if (may_park && c->posted_head == NULL && h->len >= TCP_PARK_MIN && ctx->cfg.tcp_park_s > 0) {
        c->parked = 1;
        c->parked_at = flx_time_now();
        ctx->nparked++;
        return 0;
    }
    c->runexp = calloc(1, sizeof(*c->runexp));
    if (c->runexp) {
        c->runexp->cap = h->len < TCP_UNEXP_FIRST ? (size_t)h->len : TCP_UNEXP_FIRST;
        c->runexp->buf = malloc(c->runexp->cap ? c->runexp->cap : 1);
    }
    if (c->runexp == NULL || c->runexp->buf == NULL) {
        flx_error(NET, ctx->rank, "no memory for an early message of %llu bytes from rank %d",
                  (unsigned long long)h->len, c->peer);
        if (c->runexp)
            free(c->runexp);
        c->runexp = NULL;
        tcp_fail(ctx, FLX_ERR_NO_MEMORY, "unexpected buffer");
        return -1;
    }
    c->runexp->hdr = *h;
    if (c->unexp_tail)
        c->unexp_tail->next = c->runexp;
    else
        c->unexp_head = c->runexp;
    c->unexp_tail = c->runexp;
    return 0;
}

/* The payload of the current message is complete. */
static void conn_payload_done(tcp_conn_t *c)
{
    uint64_t len = c->rhdr.len;

    if (c->rreq) {
        req_finish(c->rreq, FLX_OK);
        c->rreq = NULL;
    } else if (c->runexp) {
        tcp_unexp_t *u = c->runexp;
        c->runexp = NULL;
        if (u->claimed) {
            if (u->hdr.len)
                memcpy(u->claimed->buf, u->buf, u->hdr.len);
            req_finish(u->claimed, FLX_OK);
            unexp_remove(c, u);
            free(u->buf);
            free(u);
        }
    }
    c->rhdr_got = 0;
    if (len >= TCP_SPLIT_MIN)
        lane_done(c, len);
}

/* Room for the next bytes of the unexpected message being received: the
 * buffer doubles up to the announced length.  0 ok, -1 failed. */
static int unexp_grow(tl_ctx_t *ctx, tcp_conn_t *c)
{
    tcp_unexp_t *u = c->runexp;
    size_t cap;
    void *buf;

    if (u->got < u->cap || u->got >= u->hdr.len)
        return 0;
    cap = u->cap > (size_t)u->hdr.len / 2 ? (size_t)u->hdr.len : 2 * u->cap;
    buf = realloc(u->buf, cap);
    if (buf == NULL) {
        flx_error(NET, ctx->rank, "no memory for an early message of %llu bytes from rank %d",
                  (unsigned long long)u->hdr.len, c->peer);
        tcp_fail(ctx, FLX_ERR_NO_MEMORY, "unexpected buffer");
        return -1;
    }
    u->buf = buf;
    u->cap = cap;
    return 0;
}

/* n bytes of a header arrived (copied into c->rhdr already): dispatch it
 * once complete.  0 ok, -1 failed. */
static int conn_header_bytes(tl_ctx_t *ctx, tcp_conn_t *c, size_t n)
{
    c->rhdr_got += n;
    if (c->rhdr_got < sizeof(c->rhdr))
        return 0;
    if (conn_dispatch_header(ctx, c) != 0)
        return -1;
    if (c->rhdr.type != TCP_MSG_DATA)
        c->rhdr_got = 0;
    else if (c->rhdr.len == 0)
        conn_payload_done(c);
    return 0;
}

/* Where the current payload's next bytes go (*room of them), after
 * making room in an unexpected buffer.  NULL on failure. */
static char *conn_payload_dst(tl_ctx_t *ctx, tcp_conn_t *c, size_t *room)
{
    size_t len = c->rhdr.len, got;

    if (c->rreq) {
        got = c->rreq->done_bytes;
        *room = len - got;
        return (char *)c->rreq->buf + got;
    }
    if (unexp_grow(ctx, c) != 0)
        return NULL;
    got = c->runexp->got;
    *room = FLX_MIN(c->runexp->cap, len) - got;
    return c->runexp->buf + got;
}

static void conn_payload_bytes(tcp_conn_t *c, size_t n)
{
    size_t got;

    if (c->rreq) {
        got = c->rreq->done_bytes += n;
    } else {
        got = c->runexp->got += n;
        if (c->runexp->claimed) /* its receive sees it move (FLX_TIMEOUT) */
            c->runexp->claimed->done_bytes = got;
    }
    if (got == c->rhdr.len)
        conn_payload_done(c);
}

/* The peer of c closed in the middle of a message: it failed without a
 * notice (one cannot go inside a message), while at the message's
 * collective or later.  Everything before the message arrived, so take it
 * as a notice from that collective on: earlier ones may still complete
 * here, as they did there.  Always 0 (the context itself is not failed). */
static int conn_cut_in_message(tl_ctx_t *ctx, tcp_conn_t *c)
{
    const flx_status_t st = FLX_ERR_PEER_LOST;
    tcp_unexp_t *u = c->runexp;

    flx_error(NET, ctx->rank, "connection to rank %d closed in the middle of a message of "
              "collective #%u; that and later collectives fail here too", c->peer, c->rhdr.seq);
    if (c->rreq) {
        req_finish(c->rreq, st);
        c->rreq = NULL;
    } else if (u) { /* the partial message goes */
        c->runexp = NULL;
        if (u->claimed)
            req_finish(u->claimed, st);
        unexp_remove(c, u);
        free(u->buf);
        free(u);
    }
    c->rhdr_got = 0;
    c->errored = 1;
    fail_from_seq(ctx, st, c->rhdr.seq);
    conn_fail_posted(c, st);
    conn_fail_sends(c, st);
    return 0;
}

/* Read what the socket has, up to a budget.  0 ok, -1 failed (or the
 * context failed; a failed context never reads again).  Bytes go
 * through the read-ahead buffer unless a long payload is being received;
 * a read-ahead that returns less than it asked for drained the socket, so
 * no further recv() (it would only say EAGAIN) is made this time. */
static int conn_recv_progress(tl_ctx_t *ctx, tcp_conn_t *c)
{
    size_t budget = (size_t)16 << 20;
    int drained = 0;

    int fd = c->fd;

    while (ctx->err == FLX_OK && !c->parked) {
        int in_payload = c->rreq != NULL || c->runexp != NULL;
        size_t avail = c->ra_len - c->ra_off, want = 0;
        ssize_t n;
        char *dst;

        if (in_payload && c->rhdr.len == (c->rreq ? c->rreq->done_bytes : c->runexp->got)) {
            conn_payload_done(c); /* empty payload */
            continue;
        }
        if (avail > 0) { /* use what was read ahead */
            if (!in_payload) {
                want = FLX_MIN(avail, sizeof(c->rhdr) - c->rhdr_got);
                memcpy((char *)&c->rhdr + c->rhdr_got, c->ra + c->ra_off, want);
                c->ra_off += want;
                if (conn_header_bytes(ctx, c, want) != 0)
                    return -1;
                if (c->fd != fd) { /* a SWITCH: the other socket is not drained */
                    fd = c->fd;
                    drained = 0;
                }
            } else {
                size_t room;
                if ((dst = conn_payload_dst(ctx, c, &room)) == NULL)
                    return -1;
                want = FLX_MIN(avail, room);
                memcpy(dst, c->ra + c->ra_off, want);
                c->ra_off += want;
                conn_payload_bytes(c, want);
            }
            continue;
        }
        /* everything read is used: read more unless drained, or other
         * connections' turn (no byte is ever left in the buffer, since a
         * level-triggered poll would not come back for it) */
        if (drained || budget == 0)
            return 0;
        if (in_payload && (dst = conn_payload_dst(ctx, c, &want)) == NULL)
            return -1;
        if (want >= TCP_READAHEAD) {
            n = recv(c->fd, dst, want, 0); /* a long payload: straight into place */
            c->reads += n >= 0;
            if (n > 0) { /* (the sender is likely still writing: read on until EAGAIN) */
                conn_payload_bytes(c, (size_t)n);
                budget -= FLX_MIN(budget, (size_t)n);
                continue;
            }
        } else {
            n = recv(c->fd, c->ra, TCP_READAHEAD, 0);
            c->reads += n >= 0;
            if (n > 0) {
                c->ra_off = 0;
                c->ra_len = (size_t)n;
                drained = n < TCP_READAHEAD;
                budget -= FLX_MIN(budget, (size_t)n);
                continue;
            }
        }
        if (n == 0) {
            c->eof = 1;
            if (c->errored) {
                conn_fail_posted(c, ctx->remote_err);
                return 0;
            }
            if (in_payload)
                return conn_cut_in_message(ctx, c);
            if (c->posted_head || c->sq_head || c->rhdr_got) {
                flx_error(NET, ctx->rank, "connection to rank %d closed%s", c->peer,
                          in_payload || c->rhdr_got ? " in the middle of a message"
                          : c->posted_head ? " while a collective waits for it"
                                           : " with messages still to send to it");
                tcp_fail(ctx, FLX_ERR_PEER_LOST, "eof");
                return -1;
            }
            /* gone between two of its messages (goodbye or not): what it
             * sent is here and may still complete collectives; the next
             * request that needs it fails (tcp_irecv, tcp_isend) */
            return 0;
        }
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        if (c->errored) { /* its notice came first: the reset is its leaving */
            c->eof = 1;
            conn_fail_posted(c, ctx->remote_err);
            return 0;
        }
        flx_error(NET, ctx->rank, "receive from rank %d failed: %m", c->peer);
        tcp_fail(ctx, sock_errno_status(errno), "recv failed");
        return -1;
    }
    return 0;
}

/* A parked message buffered after all, and the connection read on: its
 * receive was not posted within FLX_TCP_PARK, or the peer closed or the
 * connection failed (what comes after the message says why).  0 ok, -1
 * failed. */
static int conn_unpark(tl_ctx_t *ctx, tcp_conn_t *c)
{
    park_leave(ctx, c);
    ctx->park_buffered++;
    if (conn_route_data(ctx, c, 0) != 0)
        return -1;
    return conn_recv_progress(ctx, c);
}

/* Buffer the parked messages that waited FLX_TCP_PARK: a receive that
 * waits for a message behind one of them on the same connection, or a
 * peer whose send waits for room in the socket, is never held up longer
 * than that.  Returns when the next of the others is due (0: none). */
static double expire_parked(tl_ctx_t *ctx)
{
    double now = flx_time_now(), due = 0;

    for (int p = 0; p < ctx->size && ctx->nparked > 0 && ctx->err == FLX_OK; p++) {
        tcp_conn_t *c = &ctx->conns[p];
        double at = c->parked_at + ctx->cfg.tcp_park_s;
        if (!c->parked)
            continue;
        if (at <= now)
            conn_unpark(ctx, c);
        else if (due == 0 || at < due)
            due = at;
    }
    return ctx->nparked > 0 ? due : 0;
}

/* The connection a progress round may read with recv() alone, without a
 * poll() first (NULL: none): the one connection with a receive posted,
 * when what it awaits is short (nothing of a message being read, the
 * receive posted first shorter than a long message) and no socket has
 * anything to write, park or finish reading.  Not for a long one: a recv()
 * holds the socket's lock, and the packets the peer's send hands over
 * meanwhile wait in its backlog.  What the other sockets bring meanwhile
 * is unexpected (no receive of ours waits for it) and is read at the
 * latest when the spin ends: a long one would stay in its socket anyway
 * (FLX_TCP_PARK), and a short one only waits in the kernel instead of a
 * buffer of ours.  Accepted: such a peer, an error notice from it, or its
 * send waiting for room in our socket is served up to one spin (FLX_SPIN)
 * later per round; and a message of a different collective from it may be
 * read only after ours ended here, too late to call it a mismatch (as one
 * arriving that late always was), so this rank may see the failure as the
 * notice of the rank that finds the mismatch, or as the timeout. */
static tcp_conn_t *direct_conn(tl_ctx_t *ctx, int n)
{
    tcp_conn_t *d = NULL;

    for (int i = 0; i < n; i++) {
        tcp_conn_t *c = &ctx->conns[ctx->pfd_peer[i]];

        if (ctx->pfds[i].events != POLLIN || c->rreq || c->runexp || c->rhdr_got != 0)
            return NULL;
        if (c->posted_head) {
            if (d != NULL || c->posted_head->len >= TCP_SPLIT_MIN)
                return NULL;
            d = c;
        }
    }
    return d;
}

double tcp_wait_spin(const tl_ctx_t *ctx)
{
    int awaits = 0;

    if (ctx->spin_apart_s <= ctx->cfg.spin_s)
        return ctx->cfg.spin_s;
    for (int p = 0; p < ctx->size; p++) {
        const tcp_conn_t *c = &ctx->conns[p];
        if (c->fd < 0 || c->eof || !(c->posted_head || c->rreq || c->sq_head))
            continue;
        if (c->near)
            return ctx->cfg.spin_s;
        awaits = 1;
    }
    return awaits ? ctx->spin_apart_s : ctx->cfg.spin_s;
}

static flx_status_t tcp_progress(tl_ctx_t *ctx, double timeout_s)
{
    int n = 0, rc = 0, ms;
    double spin_end, park_due = 0, spin_s = tcp_wait_spin(ctx);
    tcp_conn_t *direct;

    if (ctx->err != FLX_OK)
        return ctx->err;
    if (ctx->nparked > 0) {
        park_due = expire_parked(ctx);
        if (ctx->err != FLX_OK)
            return ctx->err;
    }
    for (int p = 0; p < ctx->size; p++) {
        tcp_conn_t *c = &ctx->conns[p];
        int split = c->wfd != c->fd; /* sending on the other connection */
        if (c->fd < 0 || c->eof)
            continue;
        ctx->pfds[n].fd = c->fd; /* a parked one: the peer closing, or errors */
        ctx->pfds[n].events =
            (short)((c->parked ? POLLRDHUP : POLLIN) | (c->sq_head && !split ? POLLOUT : 0));
        ctx->pfds[n].revents = 0;
        ctx->pfd_out[n] = 0;
        ctx->pfd_peer[n++] = p;
        if (split && c->sq_head) {
            ctx->pfds[n].fd = c->wfd;
            ctx->pfds[n].events = POLLOUT;
            ctx->pfds[n].revents = 0;
            ctx->pfd_out[n] = 1;
            ctx->pfd_peer[n++] = p;
        }
    }
    /* spin a little (a reply often comes within microseconds and a sleep
     * costs more than that), yielding the core to other ranks, then sleep */
    if (park_due > 0) /* wake up to buffer a parked message when it is due */
        timeout_s = FLX_MIN(timeout_s, FLX_MAX(park_due - flx_time_now(), 0.0));
    spin_end = spin_s > 0 ? flx_time_now() + FLX_MIN(spin_s, timeout_s) : 0;
    if ((direct = direct_conn(ctx, n)) != NULL) {
        /* short messages awaited from one peer only, and nothing to
         * write: spin on recv() itself.  A poll() that finds the data and
         * the recv() after it cost more than the recv() alone (2 ranks,
         * 4 B allreduce: 3.0 system calls a call instead of 3.6) */
        do {
            unsigned long reads = direct->reads;
            conn_recv_progress(ctx, direct);
            if (direct->reads != reads || ctx->err != FLX_OK || (timeout_s <= 0 && n == 1))
                return ctx->err;
            if (timeout_s <= 0) /* a round that may not wait still looks at every socket */
                break;
            sched_yield();
        } while (flx_time_now() < spin_end);
    }
    do {
        rc = poll(ctx->pfds, (nfds_t)n, 0);
        if (rc != 0 || timeout_s <= 0) /* a round that may not wait has work to go back to */
            break;
        sched_yield();
    } while (flx_time_now() < spin_end);
    if (rc == 0 && timeout_s > 0) {
        if (park_due > 0)
            timeout_s = FLX_MIN(timeout_s, FLX_MAX(park_due - flx_time_now(), 0.0));
        ms = timeout_s > 1.0 ? 1000 : (int)(timeout_s * 1000.0) + 1;
        rc = poll(ctx->pfds, (nfds_t)n, ms);
    }
    if (rc < 0) {
        if (errno == EINTR)
            return FLX_OK;
        flx_error(NET, ctx->rank, "poll failed: %m");
        tcp_fail(ctx, FLX_ERR_SYSTEM, "poll");
        return ctx->err;
    }
    for (int i = 0; i < n && rc > 0; i++) {
        tcp_conn_t *c = &ctx->conns[ctx->pfd_peer[i]];
        short ev = ctx->pfds[i].revents;
        if (ev & (POLLOUT | POLLERR | (ctx->pfd_out[i] ? POLLHUP : 0)))
            conn_send_progress(ctx, c);
        if (ctx->pfd_out[i]) {
            continue;
        } else if (c->parked) {
            if ((ev & (POLLRDHUP | POLLHUP | POLLERR)) && conn_unpark(ctx, c) != 0)
                break;
        } else if (ev & (POLLIN | POLLHUP | POLLERR)) {
            conn_recv_progress(ctx, c);
        }
    }
    return ctx->err;
}

/* ---- life cycle ------------------------------------------------------------ */

static void tcp_destroy(tl_ctx_t *ctx);

static flx_status_t tcp_create(boot_t *boot, const flx_config_t *cfg, tl_ctx_t **ctx_p)
{
    tl_ctx_t *ctx = calloc(1, sizeof(*ctx));
    const size_t lanes = boot->lanes == 2 ? 2 : 1; /* connections per peer */
    int big_first = 0; /* 4 MiB buffers on each pair's first connection */
    int lowat_warned = 0;

    if (ctx == NULL)
        return FLX_ERR_NO_MEMORY;
    ctx->rank = boot->rank;
    ctx->size = boot->size;
    ctx->cfg = *cfg;
    ctx->conns = calloc((size_t)boot->size, sizeof(*ctx->conns));
    ctx->pfds = calloc(lanes * (size_t)boot->size, sizeof(*ctx->pfds));
    ctx->pfd_peer = calloc(lanes * (size_t)boot->size, sizeof(*ctx->pfd_peer));
    ctx->pfd_out = calloc(lanes * (size_t)boot->size, sizeof(*ctx->pfd_out));
    ctx->ra_pool = malloc(lanes * (size_t)boot->size * TCP_READAHEAD);
    for (int p = 0; ctx->conns && p < boot->size; p++) { /* not yet adopted: */
        tcp_conn_t *c = &ctx->conns[p];                   /* tcp_destroy leaves them */
        c->sock[0] = c->sock[1] = c->fd = c->fd_alt = c->wfd = c->wfd_long = -1;
    }
    if (ctx->conns == NULL || ctx->pfds == NULL || ctx->pfd_peer == NULL || ctx->pfd_out == NULL ||
        ctx->ra_pool == NULL) {
        flx_error(NET, ctx->rank, "tcp: no memory for the state of %d connections", boot->size);
        tcp_destroy(ctx);
        return FLX_ERR_NO_MEMORY;
    }
    /* where ranks outnumber the cores: FLX_SPIN_SHARED, but FLX_SPIN while
     * every rank awaited runs apart from our CPUs (tcp_progress).  4 ranks
     * on 2 cores bound in turn (flxrun's default), with FLX_TCP_WRITE_MAX,
     * 6 alternating rounds, Open MPI's time over ours with it / without:
     * allgather 64 KiB 1.51 / 1.12, 2 MiB 1.04 / 1.00, 16 MiB 1.31 / 1.25;
     * allreduce 1 MiB 2.01 / 1.89, 4 MiB 1.40 / 1.46 */
    ctx->spin_apart_s = ctx->cfg.spin_s;
    ctx->cfg.spin_s = boot_spin(boot, ctx->cfg.spin_s, "tcp");
    if (ctx->spin_apart_s > ctx->cfg.spin_s) {
        int apart = 0;
        for (int p = 0; p < boot->size; p++)
            apart += p != boot->rank && boot->near && !boot->near[p];
        if (apart > 0)
            flx_info(NET, boot->rank, "tcp: busy-poll %g ms (FLX_SPIN) while every rank awaited "
                     "runs on CPUs apart from this rank's: %d of the %d others", ctx->spin_apart_s * 1e3,
                     apart, boot->size - 1);
        else
            ctx->spin_apart_s = ctx->cfg.spin_s;
    }
    if (lanes == 2 && cfg->tcp_sockbuf == 0 && cfg->tcp_lane != FLX_TCP_LANE_SPLIT) {
        long limit;
        big_first = sock_bufsize_granted(TCP_LANE_SHARED_BUF, &limit);
        if (big_first)
            flx_debug(NET, ctx->rank, "tcp: the first connection of each pair gets %zu MiB "
                      "socket buffers (FLX_TCP_LANE not split, FLX_TCP_SOCKBUF 0)",
                      TCP_LANE_SHARED_BUF >> 20);
        else
            flx_debug(NET, ctx->rank, "tcp: the first connection of each pair keeps autotuned "
                      "socket buffers: net.core.wmem_max/rmem_max allow %ld bytes, not %zu MiB",
                      limit, TCP_LANE_SHARED_BUF >> 20);
    }
    for (int p = 0; p < boot->size; p++) {
        tcp_conn_t *c = &ctx->conns[p];
        c->peer = p;
        c->near = boot->near ? boot->near[p] : 1;
        c->ra = ctx->ra_pool + lanes * (size_t)p * TCP_READAHEAD;
        c->ra_alt = lanes == 2 ? c->ra + TCP_READAHEAD : NULL; /* swapped in at a SWITCH */
        if (p == boot->rank)
            continue;
        c->sock[0] = boot_take_fd(boot, p, 1);
        c->sock[1] = boot->lanes == 2 ? boot_take_fd(boot, p, 2) : -1;
        for (int i = 0; i < 2; i++) {
            if (c->sock[i] >= 0) {
                sock_set_nodelay(c->sock[i]);
                sock_set_bufsize(c->sock[i], cfg->tcp_sockbuf);
                if (cfg->tcp_notsent_lowat > 0 &&
                    sock_set_notsent_lowat(c->sock[i], cfg->tcp_notsent_lowat) != 0 && !lowat_warned) {
                    flx_warn(NET, boot->rank, "tcp: TCP_NOTSENT_LOWAT %zu refused (%m): long "
                             "messages may queue behind the congestion window",
                             cfg->tcp_notsent_lowat);
                    lowat_warned = 1;
                }
            }
        }
        if (c->sock[1] >= 0 && big_first) /* where both ways' long ones may pass (lane.h) */
            sock_set_bufsize(c->sock[0], TCP_LANE_SHARED_BUF);
        /* the peer's messages come on the first until it switches */
        c->fd = c->wfd = c->wfd_long = c->sock[0];
        c->fd_alt = c->sock[1];
        if (c->sock[1] >= 0 && boot->rank > p) { /* the higher rank's long ones: the second,
                                                   * the first, or picked per period (lane.h) */
            c->wfd_long = cfg->tcp_lane == FLX_TCP_LANE_SHARED ? c->sock[0] : c->sock[1];
            c->lane_auto = cfg->tcp_lane == FLX_TCP_LANE_AUTO;
        }
    }
    *ctx_p = ctx;
    return FLX_OK;
}

/* Say goodbye, then read until every peer has closed its side too, so that
 * nothing a peer still sends is cut off by a reset. */
static void tcp_destroy(tl_ctx_t *ctx)
{
    double deadline = flx_time_now() + FLX_MIN(ctx->cfg.timeout_s, 10.0);
    tcp_hdr_t bye;
    int open = 0;

    if (ctx->conns == NULL)
        goto out_free;
    if (ctx->park_buffered > 0)
        flx_debug(NET, ctx->rank, "tcp: %lu early messages were parked, then buffered before "
                  "their receive came (FLX_TCP_PARK %g ms ran out, or the peer closed)",
                  ctx->park_buffered, ctx->cfg.tcp_park_s * 1e3);
    for (int p = 0; p < ctx->size; p++)
        lane_report(ctx, &ctx->conns[p]);
    hdr_from_tag(&bye, TCP_MSG_BYE, NULL, 0);
    for (int p = 0; p < ctx->size; p++) {
        tcp_conn_t *c = &ctx->conns[p];
        int live = ctx->err == FLX_OK && !c->eof && c->fd >= 0;
        int mid_message = (c->sq_head && c->sq_head->done_bytes > 0) || c->switch_sent > 0;
        if (live && !mid_message) /* where the peer reads now */
            (void)sock_send_all(c->wfd, &bye, sizeof(bye), deadline);
        for (int i = 0; i < 2; i++) {
            if (c->sock[i] < 0)
                continue;
            if (live) {
                shutdown(c->sock[i], SHUT_WR);
                open++;
            } else {
                close(c->sock[i]);
                c->sock[i] = -1;
            }
        }
    }
    /* every open socket in one poll (pfd_out[k] holds the socket's index here) */
    while (open > 0 && flx_time_now() < deadline) {
        char sink[4096];
        int n = 0;
        for (int p = 0; p < ctx->size; p++) {
            for (int i = 0; i < 2; i++) {
                if (ctx->conns[p].sock[i] < 0)
                    continue;
                ctx->pfds[n].fd = ctx->conns[p].sock[i];
                ctx->pfds[n].events = POLLIN;
                ctx->pfds[n].revents = 0;
                ctx->pfd_peer[n] = p;
                ctx->pfd_out[n++] = (char)i;
            }
        }
        if (poll(ctx->pfds, (nfds_t)n, 10) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            int *sock = &ctx->conns[ctx->pfd_peer[k]].sock[(int)ctx->pfd_out[k]];
            ssize_t got;
            if (ctx->pfds[k].revents == 0)
                continue;
            got = recv(*sock, sink, sizeof(sink), 0);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                close(*sock);
                *sock = -1;
                open--;
            }
        }
    }
    for (int p = 0; p < ctx->size; p++) {
        tcp_conn_t *c = &ctx->conns[p];
        tcp_unexp_t *u = c->unexp_head;
        while (u) {
            tcp_unexp_t *next = u->next;
            free(u->buf);
            free(u);
            u = next;
        }
        for (int i = 0; i < 2; i++)
            if (c->sock[i] >= 0)
                close(c->sock[i]);
    }
out_free:
    free(ctx->ra_pool);
    free(ctx->conns);
    free(ctx->pfds);
    free(ctx->pfd_peer);
    free(ctx->pfd_out);
    free(ctx);
}

const tl_ops_t tl_tcp_ops = {
    .name = "tcp",
    .create = tcp_create,
    .destroy = tcp_destroy,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .progress = tcp_progress,
    .fail = tcp_fail_at,
    .error = tcp_error,
};
