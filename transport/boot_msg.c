/* boot_msg.c -- checks of the bootstrap's wire messages (see boot_msg.h). */
#include "transport/boot_msg.h"

#include <arpa/inet.h>
#include <string.h>

void boot_addr_encode(const struct sockaddr_in *addr, boot_wire_addr_t *wire_p)
{
    wire_p->ip = addr->sin_addr.s_addr;
    wire_p->port = addr->sin_port;
    wire_p->pad = 0;
}

flx_status_t boot_addr_decode(const void *buf, size_t len, struct sockaddr_in *addr_p)
{
    boot_wire_addr_t w;

    if (buf == NULL || len != sizeof(w))
        return FLX_ERR_PROTOCOL;
    memcpy(&w, buf, sizeof(w));
    if (w.port == 0 || w.pad != 0)
        return FLX_ERR_PROTOCOL;
    memset(addr_p, 0, sizeof(*addr_p));
    addr_p->sin_family = AF_INET;
    addr_p->sin_addr.s_addr = w.ip;
    addr_p->sin_port = w.port;
    return FLX_OK;
}

flx_status_t boot_table_decode(const void *buf, size_t len, int size,
                               struct sockaddr_in *addrs)
{
    const uint8_t *p = buf; /* any alignment: entries are copied out */
    const size_t esz = sizeof(boot_wire_addr_t);
    struct sockaddr_in a;
    boot_wire_addr_t w;

    if (buf == NULL || size < 1 || len / esz != (size_t)size || len % esz != 0)
        return FLX_ERR_PROTOCOL;
    for (int r = 1; r < size; r++)
        if (boot_addr_decode(p + (size_t)r * esz, esz, &a) != FLX_OK)
            return FLX_ERR_PROTOCOL;
    for (int r = 0; r < size; r++) {
        memcpy(&w, p + (size_t)r * esz, esz);
        memset(&addrs[r], 0, sizeof(addrs[r]));
        addrs[r].sin_family = AF_INET;
        addrs[r].sin_addr.s_addr = w.ip;
        addrs[r].sin_port = w.port;
    }
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
