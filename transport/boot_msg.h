/* boot_msg.h -- the bootstrap's wire messages as pure functions: the checks
 * on an authenticated HELLO (rendezvous and mesh) and the data addresses
 * of the rendezvous.  No I/O: boot.c calls them on what it reads and the
 * fuzz harness (tests/fuzz/fuzz_boot.c) calls the same code. */
#ifndef FLX_TRANSPORT_BOOT_MSG_H
#define FLX_TRANSPORT_BOOT_MSG_H

#include "flexcoll.h"
#include "transport/auth.h"

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

/* One rank's data address on the wire (network byte order, 8 bytes). */
typedef struct {
    uint32_t ip;
    uint16_t port;
    uint16_t pad;
} boot_wire_addr_t;

void boot_addr_encode(const struct sockaddr_in *addr, boot_wire_addr_t *wire_p);
/* FLX_ERR_PROTOCOL (nothing written) unless len is one wire address with
 * a non-zero port and zero padding. */
flx_status_t boot_addr_decode(const void *buf, size_t len, struct sockaddr_in *addr_p);
/* The root's table: size wire addresses, rank r's at r.  Every entry but
 * the root's own (rank 0, which nobody connects to through the table) must
 * decode; FLX_ERR_PROTOCOL otherwise, addrs untouched. */
flx_status_t boot_table_decode(const void *buf, size_t len, int size,
                               struct sockaddr_in *addrs);

/* May an authenticated HELLO join the job of this rank?  It must be for
 * purpose, of a job of size ranks, from another rank, from a higher rank
 * for the mesh (either connection of a pair), and from a rank that has no
 * connection of this purpose yet (fds[r] < 0).
 * FLX_OK, or FLX_ERR_MISMATCH with *why_p saying which rule failed. */
flx_status_t boot_hello_check(const auth_hello_t *hello, uint16_t purpose, int rank,
                              int size, const int *fds, const char **why_p);

#endif
