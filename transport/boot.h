/* boot.h -- bootstrap: rendezvous at the root, authentication of every
 * peer, and a full mesh of TCP connections that backends adopt.
 *
 *   ranks 1..N-1 --HELLO/auth, data address--> rank 0 (FLX_ROOT)
 *   rank 0 --address table--> everyone
 *   every rank --connections wanted, open-file limit--> rank 0 --all--> everyone
 *   rank i --auth--> rank j for 0 < j < i; accepts from j > i
 *   with two connections per pair (lanes 2):
 *   rank i --auth--> rank j for 0 <= j < i a second time (fds2)
 *
 * Lane 1 to rank 0 is the rendezvous connection, unless rank 0 takes its
 * data connections apart (root_apart: FLX_SOCKET_IFNAME names an address
 * other than FLX_ROOT's, or FLX_ROOT is the wildcard 0.0.0.0): then the
 * rendezvous connections close after the exchange of connection counts and
 * lane 1 to rank 0 is made like the others, to its data address.
 *
 * Listening sockets are closed as soon as the mesh is complete.  A
 * connection that fails the handshake is closed and logged; it does not
 * disturb the job. */
#ifndef FLX_TRANSPORT_BOOT_H
#define FLX_TRANSPORT_BOOT_H

#include "flexcoll.h"
#include "common/config.h"
#include "transport/auth.h"
#include "transport/sock.h"

#include <netinet/in.h>

typedef struct boot {
    int rank;
    int size;
    int *fds;                     /* fds[peer]: authenticated socket, -1 for self */
    int *fds2;                    /* with lanes 2, the pair's second one        */
    int lanes;                    /* connections per pair of ranks: 1 or 2     */
    int root_apart;               /* rank 0's data address is not FLX_ROOT's   */
    sock_addr_t *addrs;           /* every rank's data address                 */
    void *hosts;                  /* rank 0 at the rendezvous: every rank's
                                     boot_wire_host_t, else NULL               */
    int local_size;               /* ranks on this machine (its kernel's boot
                                     id; network namespaces included); all of
                                     them when this rank cannot read its id    */
    int local_cpus;               /* CPUs those ranks may run on together (the
                                     union of their affinity masks); 0 unknown */
    unsigned char *near;          /* near[r]: rank r may run on one of this
                                     rank's CPUs (not known to be on another
                                     machine, affinity masks that meet); 0: on
                                     another machine or on CPUs apart; NULL:
                                     not known for any                       */
    auth_key_t key;
    flx_config_t cfg;
} boot_t;

/* Collective over all ranks; cfg gives root, secret and timeouts.  want
 * (0 auto, 1 or 2): connections per pair of ranks; every rank must ask for
 * the same (FLX_ERR_MISMATCH, logged, otherwise).  Raises the soft limit on
 * open files up to the hard one where the mesh needs it; a rank whose limit
 * still cannot hold it makes every rank fail with FLX_ERR_SYSTEM before the
 * mesh (auto: only if one connection per pair does not fit; two that do
 * not fit mean one, logged).  boot->lanes is the count agreed. */
flx_status_t boot_create(int rank, int size, const char *root, const char *secret,
                         const flx_config_t *cfg, int want, boot_t **boot_p);
/* Closes the sockets still owned by the bootstrap. */
void boot_destroy(boot_t *boot);
/* Every rank contributes len bytes; all_p (size * len) receives rank r's at
 * r * len.  Runs over the authenticated mesh sockets still owned by the
 * bootstrap; used by backends to exchange connection data. */
flx_status_t boot_allgather(boot_t *boot, const void *mine, void *all, size_t len);
/* A backend's busy-poll length: spin_s, or at most FLX_SPIN_SHARED
 * (logged at info, with the backend's name) when this machine's ranks
 * outnumber the cores they may use together (local_cpus) -- a long
 * busy-poll would take the core from the rank it waits for. */
double boot_spin(const boot_t *boot, double spin_s, const char *backend);
/* Descriptors this process has open: counted in /proc/self/fd (use_proc),
 * or where that cannot be read (no /proc, or no descriptor left to read it
 * with; or !use_proc) those below the soft limit on open files, at most
 * the first 65536, each asked with fcntl. */
long boot_open_fds(int use_proc);
/* Hand the socket to peer over to the caller (who closes it): lane 1's,
 * or with lanes 2 lane 2's (boot->fds2). */
int boot_take_fd(boot_t *boot, int peer, int lane);

#endif
