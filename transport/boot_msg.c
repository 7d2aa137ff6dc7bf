/* boot_msg.c -- checks of the bootstrap's wire messages (see boot_msg.h). */
#include "transport/boot_msg.h"

#include <arpa/inet.h>
#include <string.h>

void boot_addr_encode(const sock_addr_t *addr, boot_wire_addr_t *wire_p)
{
    memset(wire_p, 0, sizeof(*wire_p));
    if (addr->sa.sa_family == AF_INET6) {
        memcpy(wire_p->ip, &addr->in6.sin6_addr, 16);
        wire_p->scope = htonl(addr->in6.sin6_scope_id);
        wire_p->port = addr->in6.sin6_port;
        wire_p->family = 6;
    } else {
        memcpy(wire_p->ip, &addr->in.sin_addr, 4);
        wire_p->port = addr->in.sin_port;
        wire_p->family = 4;
    }
}

/* w as an address, flags aside: FLX_ERR_PROTOCOL unless well formed. */
static flx_status_t wire_addr(const boot_wire_addr_t *w, sock_addr_t *addr_p)
{
    static const uint8_t zero[12];

    if (w->port == 0 || (w->family != 4 && w->family != 6))
        return FLX_ERR_PROTOCOL;
    if (w->family == 4 && (w->scope != 0 || memcmp(w->ip + 4, zero, sizeof(zero)) != 0))
        return FLX_ERR_PROTOCOL;
    memset(addr_p, 0, sizeof(*addr_p));
    if (w->family == 6) {
        addr_p->in6.sin6_family = AF_INET6;
        memcpy(&addr_p->in6.sin6_addr, w->ip, 16);
        addr_p->in6.sin6_scope_id = ntohl(w->scope);
        addr_p->in6.sin6_port = w->port;
    } else {
        addr_p->in.sin_family = AF_INET;
        memcpy(&addr_p->in.sin_addr, w->ip, 4);
        addr_p->in.sin_port = w->port;
    }
    return FLX_OK;
}

flx_status_t boot_addr_decode(const void *buf, size_t len, sock_addr_t *addr_p)
{
    boot_wire_addr_t w;

    if (buf == NULL || len != sizeof(w))
        return FLX_ERR_PROTOCOL;
    memcpy(&w, buf, sizeof(w));
    if (w.flags != 0)
        return FLX_ERR_PROTOCOL;
    return wire_addr(&w, addr_p);
}

flx_status_t boot_table_decode(const void *buf, size_t len, int size, sock_addr_t *addrs,
                               int *apart_p)
{
    const uint8_t *p = buf; /* any alignment: entries are copied out */
    const size_t esz = sizeof(boot_wire_addr_t);
    sock_addr_t a;
    boot_wire_addr_t w;
    int apart;

    if (buf == NULL || size < 1 || len / esz != (size_t)size || len % esz != 0)
        return FLX_ERR_PROTOCOL;
    for (int r = 1; r < size; r++)
        if (boot_addr_decode(p + (size_t)r * esz, esz, &a) != FLX_OK)
            return FLX_ERR_PROTOCOL;
    /* the root's entry: its data address when apart; otherwise what it
     * listens on for the rendezvous, which nobody connects to through the
     * table (the wildcard, say), so only its flags are checked */
    memcpy(&w, p, esz);
    if (w.flags != 0 && (w.flags != BOOT_ROOT_APART || wire_addr(&w, &a) != FLX_OK))
        return FLX_ERR_PROTOCOL;
    apart = w.flags == BOOT_ROOT_APART;
    for (int r = 0; r < size; r++) {
        memcpy(&w, p + (size_t)r * esz, esz);
        if (wire_addr(&w, &addrs[r]) != FLX_OK) /* the root's, not apart */
            memset(&addrs[r], 0, sizeof(addrs[r]));
    }
    *apart_p = apart;
    return FLX_OK;
}

flx_status_t boot_hello_check(const auth_hello_t *hello, uint16_t purpose, int rank,
                              int size, const int *fds, const char **why_p)
{
    if (hello->purpose != purpose) {
        *why_p = "wrong purpose";
        return FLX_ERR_MISMATCH;
    }
    if (hello->size != size) {
        *why_p = "different number of ranks";
        return FLX_ERR_MISMATCH;
    }
    if (hello->rank < 0 || hello->rank >= size || hello->rank == rank) {
        *why_p = "impossible rank";
        return FLX_ERR_MISMATCH;
    }
    if ((purpose == AUTH_PURPOSE_MESH || purpose == AUTH_PURPOSE_MESH2) && hello->rank < rank) {
        *why_p = "a lower rank must wait for this rank's connection";
        return FLX_ERR_MISMATCH;
    }
    if (fds[hello->rank] >= 0) {
        *why_p = "two processes claim the rank";
        return FLX_ERR_MISMATCH;
    }
    return FLX_OK;
}

long boot_fd_need(int rank, int size, int lanes, long open_now)
{
    long peers = size > 1 ? size - 1 : 0, have = rank == 0 ? peers : peers > 0;

    return open_now + (long)lanes * peers - have + BOOT_FD_SPARE;
}

int boot_fd_fit(int rank, int size, long open_now, long limit)
{
    for (int lanes = 2; lanes > 0; lanes--)
        if (boot_fd_need(rank, size, lanes, open_now) <= limit)
            return lanes;
    return 0;
}

flx_status_t boot_fds_decide(const boot_wire_fds_t *all, int size, int mine, int *lanes_p,
                             int *who_p)
{
    int lanes = mine == 0 ? 2 : mine, fell = -1;

    *who_p = -1;
    *lanes_p = 0;
    for (int r = 0; r < size; r++) {
        uint32_t want = ntohl(all[r].want), fit = ntohl(all[r].fit);
        if (want > 2 || fit > 2) {
            *who_p = r;
            return FLX_ERR_PROTOCOL;
        }
        if ((int)want != mine) {
            *who_p = r;
            return FLX_ERR_MISMATCH;
        }
    }
    for (int r = 0; r < size; r++) {
        int fit = (int)ntohl(all[r].fit);
        if (fit >= lanes)
            continue;
        if (mine != 0 || fit == 0) { /* asked for explicitly, or not even one fits */
            *who_p = r;
            return FLX_ERR_SYSTEM;
        }
        lanes = fit; /* auto: one connection per pair */
        if (fell < 0)
            fell = r;
    }
    *lanes_p = lanes;
    *who_p = fell;
    return FLX_OK;
}
