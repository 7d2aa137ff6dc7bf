/* boot_msg.c -- checks of the bootstrap's wire messages (see boot_msg.h). */
#include "transport/boot_msg.h"

#include <arpa/inet.h>
#include <string.h>

void boot_addr_encode(const struct sockaddr_in *addr, boot_wire_addr_t *wire_p)
{
    wire_p->ip = addr->sin_addr.s_addr;
    wire_p->port = addr->sin_port;
    wire_p->flags = 0;
}

flx_status_t boot_addr_decode(const void *buf, size_t len, struct sockaddr_in *addr_p)
{
    boot_wire_addr_t w;

    if (buf == NULL || len != sizeof(w))
        return FLX_ERR_PROTOCOL;
    memcpy(&w, buf, sizeof(w));
    if (w.port == 0 || w.flags != 0)
        return FLX_ERR_PROTOCOL;
    memset(addr_p, 0, sizeof(*addr_p));
    addr_p->sin_family = AF_INET;
    addr_p->sin_addr.s_addr = w.ip;
    addr_p->sin_port = w.port;
    return FLX_OK;
}

flx_status_t boot_table_decode(const void *buf, size_t len, int size,
                               struct sockaddr_in *addrs, int *apart_p)
{
    const uint8_t *p = buf; /* any alignment: entries are copied out */
    const size_t esz = sizeof(boot_wire_addr_t);
    struct sockaddr_in a;
    boot_wire_addr_t w;
    int apart;

    if (buf == NULL || size < 1 || len / esz != (size_t)size || len % esz != 0)
        return FLX_ERR_PROTOCOL;
    for (int r = 1; r < size; r++)
        if (boot_addr_decode(p + (size_t)r * esz, esz, &a) != FLX_OK)
            return FLX_ERR_PROTOCOL;
    memcpy(&w, p, esz);
    w.flags = ntohs(w.flags);
    if (w.flags != 0 && (w.flags != BOOT_ROOT_APART || w.port == 0))
        return FLX_ERR_PROTOCOL;
    apart = w.flags == BOOT_ROOT_APART;
    for (int r = 0; r < size; r++) {
        memcpy(&w, p + (size_t)r * esz, esz);
        memset(&addrs[r], 0, sizeof(addrs[r]));
        addrs[r].sin_family = AF_INET;
        addrs[r].sin_addr.s_addr = w.ip;
        addrs[r].sin_port = w.port;
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
