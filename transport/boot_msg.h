/* boot_msg.h -- the bootstrap's wire messages as pure functions: the checks
 * on an authenticated HELLO (rendezvous and mesh) and the data addresses
 * of the rendezvous.  No I/O: boot.c calls them on what it reads and the
 * fuzz harness (tests/fuzz/fuzz_boot.c) calls the same code. */
#ifndef FLX_TRANSPORT_BOOT_MSG_H
#define FLX_TRANSPORT_BOOT_MSG_H

#include "flexcoll.h"
#include "transport/auth.h"
#include "transport/sock.h"

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

/* One rank's data address on the wire (24 bytes; port and scope in
 * network byte order). */
typedef struct {
    uint8_t ip[16];  /* IPv4: the first 4 bytes, the rest zero           */
    uint32_t scope;  /* IPv6 scope id (a link-local address), else 0      */
    uint16_t port;
    uint8_t family;  /* 4 or 6                                             */
    uint8_t flags;   /* 0; the root's entry in the table: BOOT_ROOT_APART or 0 */
} boot_wire_addr_t;
_Static_assert(sizeof(boot_wire_addr_t) == 24, "boot_wire_addr_t is 24 bytes on the wire");

/* In the root's own entry of the table: the root takes its data
 * connections on this address, apart from the rendezvous (FLX_SOCKET_IFNAME
 * names another address, or FLX_ROOT is the wildcard), so lane 1 to it is
 * a connection of its own and not the rendezvous connection. */
#define BOOT_ROOT_APART 1

/* The machine and network namespace a rank runs in, sent after its data
 * address at the rendezvous: its kernel's boot id and the inode of its
 * network namespace.  All zero: unknown (no /proc). */
typedef struct {
    char boot_id[40];
    uint8_t netns[8];
} boot_wire_host_t;
_Static_assert(sizeof(boot_wire_host_t) == 48, "boot_wire_host_t is 48 bytes on the wire");

void boot_addr_encode(const sock_addr_t *addr, boot_wire_addr_t *wire_p);
/* FLX_ERR_PROTOCOL (nothing written) unless len is one wire address of
 * family 4 (no scope, zero padding) or 6, with a non-zero port and no
 * flags. */
flx_status_t boot_addr_decode(const void *buf, size_t len, sock_addr_t *addr_p);
/* The root's table: size wire addresses, rank r's at r.  Every entry but
 * the root's own must decode; the root's has no flags or BOOT_ROOT_APART,
 * and with it decodes as an address too (*apart_p 1; else 0).
 * FLX_ERR_PROTOCOL otherwise, addrs and *apart_p untouched. */
flx_status_t boot_table_decode(const void *buf, size_t len, int size, sock_addr_t *addrs,
                               int *apart_p);

/* May an authenticated HELLO join the job of this rank?  It must be for
 * purpose, of a job of size ranks, from another rank, from a higher rank
 * for the mesh (either connection of a pair), and from a rank that has no
 * connection of this purpose yet (fds[r] < 0).
 * FLX_OK, or FLX_ERR_MISMATCH with *why_p saying which rule failed. */
flx_status_t boot_hello_check(const auth_hello_t *hello, uint16_t purpose, int rank,
                              int size, const int *fds, const char **why_p);

/* ---- connections per pair and the open-file limit -------------------------
 * After the rendezvous every rank sends the root what it wants
 * (FLX_TCP_SOCKETS: 0 auto, 1 or 2; the ib backend 1) and how many
 * connections per pair its open-file limit holds, and gets every rank's
 * entry back; every rank then decides alike (boot_fds_decide). */
#define BOOT_FD_SPARE 16 /* descriptors left to the application at the mesh's peak */

/* One rank's entry on the wire (network byte order, 16 bytes). */
typedef struct {
    uint32_t want;  /* 0 auto, 1 or 2                                     */
    uint32_t fit;   /* most connections per pair its limit holds: 0-2    */
    uint32_t limit; /* its RLIMIT_NOFILE soft limit (at most UINT32_MAX) */
    uint32_t need;  /* descriptors it needs with want (auto: 1) per pair */
} boot_wire_fds_t;
_Static_assert(sizeof(boot_wire_fds_t) == 16, "boot_wire_fds_t is 16 bytes on the wire");

/* Descriptors rank needs open at once for lanes connections to each of the
 * other size - 1 ranks, open_now being open already (the rendezvous
 * connection(s) and the listener among them: the root's size - 1
 * rendezvous connections and a member's one to the root become lane 1's
 * connections to them, or, with the root's data apart, close before lane 1
 * is made anew, one for one), plus BOOT_FD_SPARE.  Pure. */
long boot_fd_need(int rank, int size, int lanes, long open_now);
/* The most connections per pair (2, 1 or 0) that fit under limit.  Pure. */
int boot_fd_fit(int rank, int size, long open_now, long limit);
/* The decision, the same on every rank, from all size entries (wire
 * order) and this rank's own want:
 *   FLX_OK, *lanes_p 1 or 2 (auto: 2 unless a rank's limit holds only 1;
 *     *who_p is then the first such rank, else -1);
 *   FLX_ERR_MISMATCH: *who_p is the first rank whose want differs from mine;
 *   FLX_ERR_SYSTEM: *who_p is the first rank whose limit holds fewer
 *     connections than the job runs with (auto: none);
 *   FLX_ERR_PROTOCOL: an entry out of range (*who_p: its rank). */
flx_status_t boot_fds_decide(const boot_wire_fds_t *all, int size, int mine, int *lanes_p,
                             int *who_p);

#endif
