/* conn.c -- rdmacm connection setup and teardown.
 *
 * Every rank listens on its HCA's address; addresses, ports and a fresh
 * nonce per rank go round over the authenticated bootstrap mesh.  Rank i
 * connects to every j < i (address and route resolution by rdmacm, so the
 * GID and RoCE version are right) and accepts every j > i.  A connect
 * request carries a token, HMAC-SHA-256 under the job secret's key of
 * (i, j, QP index, j's nonce, i's nonce): strangers, who lack the secret,
 * are rejected before they get a QP, and a token seen on the fabric is
 * good for that one QP of this job only, which is taken (a replay is a
 * duplicate).  After setup the listener stays open only to reject. */
#include "transport/ib/ib.h"
#include "common/log.h"
#include "common/time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(IB_TOKEN_BYTES == crypto_auth_hmacsha256_BYTES, "HMAC-SHA-256 size");

void ib_conn_token(const tl_ctx_t *ctx, int from, int to, int qidx, const ib_boot_info_t *infos,
                   uint8_t out[IB_TOKEN_BYTES])
{
    struct {
        uint32_t magic;
        int32_t from, to, qidx;
        uint8_t nonce_to[IB_NONCE_BYTES], nonce_from[IB_NONCE_BYTES];
    } msg;

    memset(&msg, 0, sizeof(msg));
    msg.magic = htonl(IB_PRIV_MAGIC);
    msg.from = (int32_t)htonl((uint32_t)from);
    msg.to = (int32_t)htonl((uint32_t)to);
    msg.qidx = (int32_t)htonl((uint32_t)qidx);
    memcpy(msg.nonce_to, infos[to].nonce, IB_NONCE_BYTES);
    memcpy(msg.nonce_from, infos[from].nonce, IB_NONCE_BYTES);
    crypto_auth_hmacsha256(out, (const unsigned char *)&msg, sizeof(msg), ctx->boot->key.bytes);
}

int ib_conn_claim(const tl_ctx_t *ctx, const void *data, size_t len, const ib_boot_info_t *infos,
                  int *qidx_p)
{
    const ib_priv_t *priv = data;
    uint8_t want[IB_TOKEN_BYTES];
    int peer, qidx;

    *qidx_p = -1;
    if (priv == NULL || len < sizeof(*priv) || ntohl(priv->magic) != IB_PRIV_MAGIC)
        return -1;
    peer = (int)ntohl((uint32_t)priv->rank);
    qidx = (int)ntohl((uint32_t)priv->qidx);
    *qidx_p = qidx;
    if (peer <= ctx->rank || peer >= ctx->size || qidx < 0 || qidx >= ctx->nqps)
        return -1;
    ib_conn_token(ctx, peer, ctx->rank, qidx, infos, want);
    return sodium_memcmp(priv->token, want, sizeof(want)) == 0 ? peer : -1;
}

/* One line per rejected request, the first CONN_REJECT_WARNINGS at warning
 * level (a stranger on the fabric must not be able to flood the log). */
#define CONN_REJECT_WARNINGS 10
static void conn_log_reject(tl_ctx_t *ctx, const char *what)
{
    if (++ctx->rejected <= CONN_REJECT_WARNINGS)
        flx_warn(NET, ctx->rank, "ib: rejected %s%s", what,
                 ctx->rejected == CONN_REJECT_WARNINGS ? "; further rejections are logged at "
                                                         "debug level" : "");
    else
        flx_debug(NET, ctx->rank, "ib: rejected %s", what);
}

/* Refuse a connection request: its id is ours to destroy, after the ack. */
static void conn_reject(struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;

    rdma_reject(id, NULL, 0);
    rdma_ack_cm_event(ev);
    rdma_destroy_id(id);
}

static flx_status_t wait_cm_event(tl_ctx_t *ctx, struct rdma_event_channel *ch, double deadline,
                                  struct rdma_cm_event **ev_p)
{
    for (;;) {
        struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
        double left = deadline - flx_time_now();
        int rc;

        if (left <= 0) {
            flx_error(NET, ctx->rank, "ib: connection setup timed out after %.0f s",
                      ctx->cfg.connect_timeout_s);
            return FLX_ERR_TIMED_OUT;
        }
        rc = poll(&pfd, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
        if (rc < 0 && errno != EINTR)
            return FLX_ERR_SYSTEM;
        if (rc > 0) {
            if (rdma_get_cm_event(ch, ev_p) == 0)
                return FLX_OK;
            if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) {
                flx_error(NET, ctx->rank, "ib: the connection manager's channel failed");
                return FLX_ERR_SYSTEM;
            }
            if (errno == EAGAIN || errno == EINTR) /* the listener's fd does not block */
                continue;
            flx_error(NET, ctx->rank, "rdma_get_cm_event failed: %m");
            return FLX_ERR_SYSTEM;
        }
    }
}

/* wait for one event of the expected type on id */
static flx_status_t expect_event(tl_ctx_t *ctx, struct rdma_event_channel *ch,
                                 enum rdma_cm_event_type want, int peer, double deadline)
{
    struct rdma_cm_event *ev;
    flx_status_t st = wait_cm_event(ctx, ch, deadline, &ev);
    int status;
    enum rdma_cm_event_type got;

    if (st != FLX_OK)
        return st;
    got = ev->event;
    status = ev->status;
    rdma_ack_cm_event(ev);
    if (got != want) {
        flx_error(NET, ctx->rank, "ib: connecting to rank %d: expected %s, got %s (status %d)",
                  peer, rdma_event_str(want), rdma_event_str(got), status);
        return got == RDMA_CM_EVENT_REJECTED || got == RDMA_CM_EVENT_UNREACHABLE
                   ? FLX_ERR_PEER_LOST
                   : FLX_ERR_SYSTEM;
    }
    return FLX_OK;
}

/* qidx 0: the primary QP with its receives; else an extra QP that only
 * carries RDMA writes (one receive slot, never used) */
static flx_status_t conn_create_qp(tl_ctx_t *ctx, ib_conn_t *c, struct rdma_cm_id *id, int qidx)
{
    struct ibv_qp_init_attr qa;
    flx_status_t st;

    memset(&qa, 0, sizeof(qa));
    qa.qp_type = IBV_QPT_RC;
    qa.send_cq = ctx->cq;
    qa.recv_cq = ctx->cq;
    qa.cap.max_send_wr = (uint32_t)(IB_SEND_SLOTS + 32 + 16); /* eager slots + writes + spare */
    qa.cap.max_recv_wr = qidx == 0 ? (uint32_t)ctx->recv_depth : 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = 128;
    if (rdma_create_qp(id, ctx->pd, &qa) != 0) {
        qa.cap.max_inline_data = 0;
        if (rdma_create_qp(id, ctx->pd, &qa) != 0) {
            flx_error(NET, ctx->rank, "ib: cannot create a QP for rank %d (send %u, recv %u "
                      "WRs): %m", c->peer, qa.cap.max_send_wr, qa.cap.max_recv_wr);
            return FLX_ERR_SYSTEM;
        }
    }
    id->context = c;
    if (qidx > 0) {
        c->xid[qidx] = id;
        c->xqp[qidx] = id->qp;
        return FLX_OK;
    }
    if (ctx->max_inline == 0 || qa.cap.max_inline_data < ctx->max_inline)
        ctx->max_inline = qa.cap.max_inline_data;
    c->id = id;
    c->qp = id->qp;
    for (int k = 0; k < ctx->recv_depth; k++) {
        st = ib_post_recv_slot(ctx, c, k);
        if (st != FLX_OK)
            return st;
    }
    c->credits = ctx->recv_depth;
    return FLX_OK;
}

static flx_status_t conn_connect(tl_ctx_t *ctx, ib_conn_t *c, int qidx,
                                 const ib_boot_info_t *infos, double deadline)
{
    const ib_boot_info_t *info = &infos[c->peer];
    struct sockaddr_in dst = {.sin_family = AF_INET};
    struct sockaddr_in src = ctx->dev.addr;
    struct rdma_conn_param param;
    struct rdma_cm_id *id;
    ib_priv_t priv = {.magic = htonl(IB_PRIV_MAGIC), .rank = (int32_t)htonl((uint32_t)ctx->rank),
                      .qidx = (int32_t)htonl((uint32_t)qidx)};
    flx_status_t st;

    dst.sin_addr.s_addr = info->ip;
    dst.sin_port = info->port;
    src.sin_port = 0;
    ib_conn_token(ctx, ctx->rank, c->peer, qidx, infos, priv.token);
    if (rdma_create_id(ctx->ch_active, &id, c, RDMA_PS_TCP) != 0) {
        flx_error(NET, ctx->rank, "rdma_create_id failed: %m");
        return FLX_ERR_SYSTEM;
    }
    if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) != 0) {
        flx_error(NET, ctx->rank, "rdma_resolve_addr to rank %d failed: %m", c->peer);
        rdma_destroy_id(id);
        return FLX_ERR_SYSTEM;
    }
    st = expect_event(ctx, ctx->ch_active, RDMA_CM_EVENT_ADDR_RESOLVED, c->peer, deadline);
    if (st == FLX_OK && rdma_resolve_route(id, 2000) != 0)
        st = FLX_ERR_SYSTEM;
    if (st == FLX_OK)
        st = expect_event(ctx, ctx->ch_active, RDMA_CM_EVENT_ROUTE_RESOLVED, c->peer, deadline);
    if (st == FLX_OK)
        st = conn_create_qp(ctx, c, id, qidx);
    if (st != FLX_OK) {
        if (id->qp)
            rdma_destroy_qp(id);
        rdma_destroy_id(id);
        if (qidx == 0) {
            c->id = NULL;
            c->qp = NULL;
        } else {
            c->xid[qidx] = NULL;
            c->xqp[qidx] = NULL;
        }
        return st;
    }
    memset(&param, 0, sizeof(param));
    param.private_data = &priv;
    param.private_data_len = sizeof(priv);
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    if (rdma_connect(id, &param) != 0) {
        flx_error(NET, ctx->rank, "rdma_connect to rank %d failed: %m", c->peer);
        return FLX_ERR_SYSTEM;
    }
    st = expect_event(ctx, ctx->ch_active, RDMA_CM_EVENT_ESTABLISHED, c->peer, deadline);
    if (st == FLX_OK && qidx == 0)
        c->connected = 1;
    return st;
}

/* accept the ranks above us; reject anything else */
static flx_status_t conn_accept_all(tl_ctx_t *ctx, const ib_boot_info_t *infos, double deadline)
{
    int want = (ctx->size - 1 - ctx->rank) * ctx->nqps, established = 0;

    while (established < want) {
        struct rdma_cm_event *ev;
        flx_status_t st = wait_cm_event(ctx, ctx->ch_listen, deadline, &ev);
        if (st != FLX_OK)
            return st;
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
            struct rdma_cm_id *id = ev->id;
            int qidx, peer = ib_conn_claim(ctx, ev->param.conn.private_data,
                                           ev->param.conn.private_data_len, infos, &qidx);
            if (peer < 0) {
                conn_log_reject(ctx, "a connection request with no valid token for this rank "
                                "(not a member of this job)");
                conn_reject(ev);
                continue;
            }
            if (qidx == 0 ? ctx->conns[peer].id != NULL : ctx->conns[peer].xid[qidx] != NULL) {
                char why[96];
                snprintf(why, sizeof(why), "a second connection request for rank %d QP %d (a "
                         "replay?)", peer, qidx);
                conn_log_reject(ctx, why);
                conn_reject(ev);
                continue;
            }
            st = conn_create_qp(ctx, &ctx->conns[peer], id, qidx);
            if (st == FLX_OK) {
                struct rdma_conn_param param;
                memset(&param, 0, sizeof(param));
                param.retry_count = 7;
                param.rnr_retry_count = 7;
                if (rdma_accept(id, &param) != 0) {
                    flx_error(NET, ctx->rank, "rdma_accept of rank %d failed: %m", peer);
                    st = FLX_ERR_SYSTEM;
                }
            }
            rdma_ack_cm_event(ev);
            if (st != FLX_OK)
                return st;
        } else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
            ib_conn_t *c = ev->id->context;
            int primary = c && ev->id == c->id;
            rdma_ack_cm_event(ev);
            if (c) {
                if (primary)
                    c->connected = 1;
                established++;
            }
        } else {
            flx_warn(NET, ctx->rank, "ib: connection event %s (status %d) while accepting",
                     rdma_event_str(ev->event), ev->status);
            rdma_ack_cm_event(ev);
        }
    }
    return FLX_OK;
}

flx_status_t ib_conn_setup(tl_ctx_t *ctx, boot_t *boot)
{
    double deadline = flx_time_now() + ctx->cfg.connect_timeout_s;
    ib_boot_info_t mine, *infos;
    struct sockaddr_in bound;
    flx_status_t st;

    ctx->ch_listen = rdma_create_event_channel();
    ctx->ch_active = rdma_create_event_channel();
    if (ctx->ch_listen == NULL || ctx->ch_active == NULL) {
        flx_error(NET, ctx->rank, "rdma_create_event_channel failed: %m");
        return FLX_ERR_SYSTEM;
    }
    bound = ctx->dev.addr;
    bound.sin_port = 0;
    /* read only after poll() says so; never blocks the progress loop */
    (void)fcntl(ctx->ch_listen->fd, F_SETFL, fcntl(ctx->ch_listen->fd, F_GETFL) | O_NONBLOCK);
    if (rdma_create_id(ctx->ch_listen, &ctx->listen_id, NULL, RDMA_PS_TCP) != 0 ||
        rdma_bind_addr(ctx->listen_id, (struct sockaddr *)&bound) != 0 ||
        rdma_listen(ctx->listen_id, ctx->size + 8) != 0) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &bound.sin_addr, ip, sizeof(ip));
        flx_error(NET, ctx->rank, "ib: cannot listen on %s (%s): %m", ip, ctx->dev.name);
        return FLX_ERR_SYSTEM;
    }
    ctx->verbs = ctx->listen_id->verbs;
    st = ib_resources_create(ctx);
    if (st != FLX_OK)
        return st;
    memset(&mine, 0, sizeof(mine));
    mine.ip = bound.sin_addr.s_addr;
    mine.port = rdma_get_src_port(ctx->listen_id);
    mine.nqps = htons((uint16_t)ctx->nqps);
    randombytes_buf(mine.nonce, sizeof(mine.nonce));
    infos = calloc((size_t)ctx->size, sizeof(*infos));
    if (infos == NULL)
        return FLX_ERR_NO_MEMORY;
    st = boot_allgather(boot, &mine, infos, sizeof(mine));
    for (int j = 0; j < ctx->size && st == FLX_OK; j++) {
        if (ntohs(infos[j].nqps) != ctx->nqps) {
            flx_error(NET, ctx->rank, "FLX_IB_QPS_PER_PEER is %d here but %u on rank %d: it "
                      "must be the same on every rank", ctx->nqps, ntohs(infos[j].nqps), j);
            st = FLX_ERR_MISMATCH;
        }
    }
    ctx->cfg.ib_spin_s = boot_spin(boot, ctx->cfg.ib_spin_s, "ib");
    for (int j = 0; j < ctx->rank && st == FLX_OK; j++)
        for (int q = 0; q < ctx->nqps && st == FLX_OK; q++)
            st = conn_connect(ctx, &ctx->conns[j], q, infos, deadline);
    if (st == FLX_OK)
        st = conn_accept_all(ctx, infos, deadline);
    sodium_memzero(infos, (size_t)ctx->size * sizeof(*infos));
    free(infos);
    return st;
}

void ib_conn_listen_event(tl_ctx_t *ctx)
{
    struct rdma_cm_event *ev;

    while (rdma_get_cm_event(ctx->ch_listen, &ev) == 0) {
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
            conn_log_reject(ctx, "a connection request after setup (every member is "
                            "connected)");
            conn_reject(ev);
        } else { /* an accepted QP's disconnect and the like: nothing to do */
            rdma_ack_cm_event(ev);
        }
    }
}

void ib_conn_teardown(tl_ctx_t *ctx)
{
    for (int p = 0; ctx->conns && p < ctx->size; p++) {
        ib_conn_t *c = &ctx->conns[p];
        for (int q = 1; q < IB_MAX_QPS; q++) {
            if (c->xid[q] == NULL)
                continue;
            rdma_disconnect(c->xid[q]);
            if (c->xid[q]->qp)
                rdma_destroy_qp(c->xid[q]);
            rdma_destroy_id(c->xid[q]);
            c->xid[q] = NULL;
            c->xqp[q] = NULL;
        }
        if (c->id == NULL)
            continue;
        if (c->connected)
            rdma_disconnect(c->id);
        if (c->id->qp)
            rdma_destroy_qp(c->id);
        rdma_destroy_id(c->id);
        c->id = NULL;
        c->qp = NULL;
    }
}

/* last: the verbs context (and so the PD and CQ) hangs off this id */
void ib_conn_close_listener(tl_ctx_t *ctx)
{
    if (ctx->listen_id)
        rdma_destroy_id(ctx->listen_id);
    ctx->listen_id = NULL;
    if (ctx->ch_active)
        rdma_destroy_event_channel(ctx->ch_active);
    if (ctx->ch_listen)
        rdma_destroy_event_channel(ctx->ch_listen);
    ctx->ch_active = ctx->ch_listen = NULL;
}
