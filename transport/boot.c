/* boot.c -- rendezvous, authentication and the TCP mesh (see boot.h). */
#include "transport/boot.h"
#include "transport/boot_msg.h"
#include "transport/sock.h"
#include "common/log.h"
#include "common/time.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Accept until every expected peer (expect(rank) true) has authenticated.
 * Strangers and failed handshakes are logged and dropped. */
static flx_status_t boot_accept_peers(boot_t *boot, int lfd, uint16_t purpose, int count,
                                      double deadline)
{
    int have = 0;

    while (have < count) {
        struct sockaddr_in peer;
        auth_hello_t hello;
        char ps[64];
        int fd;
        double hs_deadline;
        const char *why;
        flx_status_t st = sock_accept(lfd, deadline, &fd, &peer);

        if (st == FLX_ERR_TIMED_OUT) {
            flx_error(INIT, boot->rank,
                      "bootstrap: only %d of %d expected ranks connected within %.0f s",
                      have, count, boot->cfg.connect_timeout_s);
            return st;
        }
        if (st != FLX_OK)
            return st;
        sock_addr_str(&peer, ps, sizeof(ps));
        hs_deadline = flx_time_now() + boot->cfg.handshake_timeout_s;
        if (hs_deadline > deadline)
            hs_deadline = deadline;
        st = auth_accept(fd, &boot->key, hs_deadline, &hello);
        if (st != FLX_OK) {
            flx_warn(INIT, boot->rank, "rejected connection from %s: %s", ps,
                     st == FLX_ERR_AUTH ? "wrong job secret" : flx_status_string(st));
            close(fd);
            continue;
        }
        st = boot_hello_check(&hello, purpose, boot->rank, boot->size, boot->fds, &why);
        if (st != FLX_OK) {
            flx_error(INIT, boot->rank,
                      "peer %s claims rank %d of %d (purpose %u); this job has %d ranks: %s",
                      ps, hello.rank, hello.size, hello.purpose, boot->size, why);
            close(fd);
            return st;
        }
        if (purpose == AUTH_PURPOSE_BOOT) {
            boot_wire_addr_t w;
            st = sock_recv_all(fd, &w, sizeof(w), deadline);
            if (st == FLX_OK)
                st = boot_addr_decode(&w, sizeof(w), &boot->addrs[hello.rank]);
            if (st != FLX_OK) {
                flx_warn(INIT, boot->rank, "rank %d (%s) vanished during bootstrap: %s",
                         hello.rank, ps, flx_status_string(st));
                close(fd);
                continue;
            }
        }
        flx_debug(INIT, boot->rank, "rank %d authenticated from %s", hello.rank, ps);
        boot->fds[hello.rank] = fd;
        have++;
    }
    return FLX_OK;
}

static flx_status_t boot_root(boot_t *boot, const struct sockaddr_in *root, int *lfd_p,
                              double deadline)
{
    boot_wire_addr_t *table;
    flx_status_t st;

    st = sock_listen(root, boot->size + 16, lfd_p, NULL);
    if (st != FLX_OK)
        return st;
    boot->addrs[0] = *root;
    st = boot_accept_peers(boot, *lfd_p, AUTH_PURPOSE_BOOT, boot->size - 1, deadline);
    if (st != FLX_OK)
        return st;
    table = calloc((size_t)boot->size, sizeof(*table));
    if (table == NULL)
        return FLX_ERR_NO_MEMORY;
    for (int r = 0; r < boot->size; r++)
        boot_addr_encode(&boot->addrs[r], &table[r]);
    for (int r = 1; r < boot->size && st == FLX_OK; r++) {
        st = sock_send_all(boot->fds[r], table, (size_t)boot->size * sizeof(*table), deadline);
        if (st != FLX_OK)
            flx_error(INIT, 0, "bootstrap: cannot send the address table to rank %d: %s", r,
                      flx_status_string(st));
    }
    free(table);
    return st;
}

static flx_status_t boot_member(boot_t *boot, const struct sockaddr_in *root, int *lfd_p,
                                double deadline)
{
    struct sockaddr_in local;
    socklen_t llen = sizeof(local);
    boot_wire_addr_t w, *table;
    char rs[64];
    int fd;
    flx_status_t st;

    st = sock_connect(root, deadline, &fd);
    if (st != FLX_OK) {
        flx_error(INIT, boot->rank, "bootstrap: cannot reach the root %s: %s",
                  sock_addr_str(root, rs, sizeof(rs)), flx_status_string(st));
        return st;
    }
    boot->fds[0] = fd;
    st = auth_connect(fd, &boot->key, AUTH_PURPOSE_BOOT, boot->rank, boot->size, deadline);
    if (st != FLX_OK) {
        flx_error(INIT, boot->rank, "bootstrap: the root %s %s",
                  sock_addr_str(root, rs, sizeof(rs)),
                  st == FLX_ERR_AUTH ? "failed authentication (different FLX_JOB_SECRET?)"
                                     : flx_status_string(st));
        return st;
    }
    /* the data listener: on FLX_SOCKET_IFNAME, else where the root is reached */
    if (getsockname(fd, (struct sockaddr *)&local, &llen) != 0) {
        flx_error(INIT, boot->rank, "getsockname failed: %m");
        return FLX_ERR_SYSTEM;
    }
    if (boot->cfg.socket_ifname[0]) {
        st = sock_ifname_addr(boot->cfg.socket_ifname, &local.sin_addr);
        if (st != FLX_OK)
            return st;
    }
    local.sin_port = 0;
    st = sock_listen(&local, boot->size + 16, lfd_p, &local);
    if (st != FLX_OK)
        return st;
    boot_addr_encode(&local, &w);
    st = sock_send_all(fd, &w, sizeof(w), deadline);
    if (st != FLX_OK)
        return st;
    table = calloc((size_t)boot->size, sizeof(*table));
    if (table == NULL)
        return FLX_ERR_NO_MEMORY;
    st = sock_recv_all(fd, table, (size_t)boot->size * sizeof(*table), deadline);
    if (st == FLX_OK)
        st = boot_table_decode(table, (size_t)boot->size * sizeof(*table), boot->size,
                               boot->addrs);
    free(table);
    if (st != FLX_OK)
        flx_error(INIT, boot->rank, "bootstrap: no address table from the root: %s",
                  flx_status_string(st));
    return st;
}

/* rank i connects to 0 < j < i and accepts from j > i */
static flx_status_t boot_mesh(boot_t *boot, int lfd, double deadline)
{
    char as[64];
    flx_status_t st;

    for (int j = 1; j < boot->rank; j++) {
        int fd;
        st = sock_connect(&boot->addrs[j], deadline, &fd);
        if (st != FLX_OK)
            return st;
        st = auth_connect(fd, &boot->key, AUTH_PURPOSE_MESH, boot->rank, boot->size, deadline);
        if (st != FLX_OK) {
            flx_error(INIT, boot->rank, "rank %d at %s: %s", j,
                      sock_addr_str(&boot->addrs[j], as, sizeof(as)),
                      st == FLX_ERR_AUTH ? "failed authentication" : flx_status_string(st));
            close(fd);
            return st;
        }
        boot->fds[j] = fd;
    }
    if (boot->rank == 0)
        return FLX_OK;
    return boot_accept_peers(boot, lfd, AUTH_PURPOSE_MESH, boot->size - 1 - boot->rank,
                             deadline);
}

flx_status_t boot_create(int rank, int size, const char *root, const char *secret,
                         const flx_config_t *cfg, boot_t **boot_p)
{
    struct sockaddr_in root_addr;
    double deadline = flx_time_now() + cfg->connect_timeout_s;
    boot_t *boot;
    int lfd = -1;
    flx_status_t st;

    if (sodium_init() < 0) {
        flx_error(INIT, rank, "libsodium failed to initialise");
        return FLX_ERR_SYSTEM;
    }
    boot = calloc(1, sizeof(*boot));
    if (boot == NULL)
        return FLX_ERR_NO_MEMORY;
    boot->rank = rank;
    boot->size = size;
    boot->cfg = *cfg;
    boot->fds = malloc((size_t)size * sizeof(*boot->fds));
    boot->addrs = calloc((size_t)size, sizeof(*boot->addrs));
    if (boot->fds == NULL || boot->addrs == NULL) {
        st = FLX_ERR_NO_MEMORY;
        goto err_destroy_boot;
    }
    for (int r = 0; r < size; r++)
        boot->fds[r] = -1;
    auth_key_derive(secret, &boot->key);
    if (size == 1) {
        *boot_p = boot;
        return FLX_OK;
    }
    st = sock_parse_addr(root, &root_addr);
    if (st != FLX_OK)
        goto err_destroy_boot;
    st = rank == 0 ? boot_root(boot, &root_addr, &lfd, deadline)
                   : boot_member(boot, &root_addr, &lfd, deadline);
    if (st == FLX_OK)
        st = boot_mesh(boot, lfd, deadline);
    if (lfd >= 0)
        close(lfd);
    if (st != FLX_OK)
        goto err_destroy_boot;
    flx_info(INIT, rank, "bootstrap complete: %d ranks connected through %s", size, root);
    *boot_p = boot;
    return FLX_OK;

err_destroy_boot:
    boot_destroy(boot);
    return st;
}

void boot_destroy(boot_t *boot)
{
    if (boot == NULL)
        return;
    for (int r = 0; boot->fds && r < boot->size; r++)
        if (boot->fds[r] >= 0)
            close(boot->fds[r]);
    free(boot->fds);
    free(boot->addrs);
    sodium_memzero(&boot->key, sizeof(boot->key));
    free(boot);
}

int boot_take_fd(boot_t *boot, int peer)
{
    int fd = boot->fds[peer];

    boot->fds[peer] = -1;
    return fd;
}

/* Full mesh exchange: send ours to every peer (lower ranks first so that
 * no pair waits on each other with full buffers), receive from every peer. */
flx_status_t boot_allgather(boot_t *boot, const void *mine, void *all, size_t len)
{
    double deadline = flx_time_now() + boot->cfg.connect_timeout_s;
    char *out = all;
    flx_status_t st = FLX_OK;

    memcpy(out + (size_t)boot->rank * len, mine, len);
    for (int d = 1; d < boot->size && st == FLX_OK; d++) {
        int to = (boot->rank + d) % boot->size;
        int from = (boot->rank - d + boot->size) % boot->size;
        if (boot->fds[to] < 0 || boot->fds[from] < 0) {
            flx_error(INIT, boot->rank, "bootstrap exchange: no connection to rank %d",
                      boot->fds[to] < 0 ? to : from);
            return FLX_ERR_PEER_LOST;
        }
        st = sock_send_all(boot->fds[to], mine, len, deadline);
        if (st == FLX_OK)
            st = sock_recv_all(boot->fds[from], out + (size_t)from * len, len, deadline);
    }
    if (st != FLX_OK)
        flx_error(INIT, boot->rank, "bootstrap exchange of %zu bytes failed: %s", len,
                  flx_status_string(st));
    return st;
}
