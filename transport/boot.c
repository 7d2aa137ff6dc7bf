/* boot.c -- rendezvous, authentication and the TCP mesh (see boot.h). */
#include "transport/boot.h"
#include "transport/boot_msg.h"
#include "transport/sock.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

/* The soft limit on open files, LONG_MAX if none. */
static long boot_nofile(struct rlimit *rl)
{
    if (getrlimit(RLIMIT_NOFILE, rl) != 0)
        return LONG_MAX;
    return rl->rlim_cur == RLIM_INFINITY || rl->rlim_cur > LONG_MAX ? LONG_MAX
                                                                    : (long)rl->rlim_cur;
}

#define BOOT_PROBE_MAX 65536L /* descriptor numbers probed without /proc */

long boot_open_fds(int use_proc)
{
    struct rlimit rl;
    long n = 0, limit;
    DIR *d = use_proc ? opendir("/proc/self/fd") : NULL;

    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            n += e->d_name[0] != '.';
        closedir(d);
        return n - 1; /* the directory's own */
    }
    /* no /proc (a bare container), or no descriptor left to read it with
     * (EMFILE, ENFILE): ask each number below the limit, which needs none */
    limit = FLX_MIN(boot_nofile(&rl), BOOT_PROBE_MAX);
    for (long fd = 0; fd < limit; fd++)
        n += fcntl((int)fd, F_GETFD) != -1;
    return n;
}

/* Accepted connections still in their handshake.  They wait side by side,
 * each until its own deadline (FLX_HANDSHAKE_TIMEOUT after its accept), and
 * each step runs only once its bytes are all there (SO_RCVLOWAT), so a
 * stranger that stays silent, sends half a message or stops after its HELLO
 * never holds up the ranks behind it. */
#define BOOT_MAX_WAITING 64

typedef struct {
    int n;
    int out_of_fds;                /* accept hit EMFILE: take no more until one leaves */
    uint64_t accepted;             /* connections accepted so far */
    struct {
        int fd;
        int got_hello;             /* challenge sent, the proof is next */
        uint64_t order;            /* its place in accept order (the oldest: least) */
        sock_addr_t peer;
        double deadline;
        auth_accept_state_t auth;
    } c[BOOT_MAX_WAITING];
} boot_waiting_t;

static void waiting_drop(boot_t *boot, boot_waiting_t *w, int i, const char *why)
{
    char ps[SOCK_ADDR_STRLEN];

    flx_warn(INIT, boot->rank, "rejected connection from %s: %s",
             sock_addr_str(&w->c[i].peer, ps, sizeof(ps)), why);
    close(w->c[i].fd);
    w->c[i] = w->c[--w->n];
    w->out_of_fds = 0;
}

static void waiting_close_all(boot_t *boot, boot_waiting_t *w)
{
    while (w->n > 0)
        waiting_drop(boot, w, w->n - 1, "no complete handshake when the bootstrap ended");
}

static void set_lowat(int fd, int bytes)
{
    setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes));
}

/* Make room: the oldest connection that has not sent its HELLO goes (or,
 * every one past it, the oldest), with a busy notice, so that a rank among
 * them connects again instead of failing. */
static void waiting_make_room(boot_t *boot, boot_waiting_t *w)
{
    char ps[SOCK_ADDR_STRLEN];
    int victim = -1;

    /* by accept order: deadlines, clamped to the bootstrap's, can all be equal */
    for (int i = 0; i < w->n; i++)
        if (!w->c[i].got_hello && (victim < 0 || w->c[i].order < w->c[victim].order))
            victim = i;
    if (victim < 0) {
        victim = 0;
        for (int i = 1; i < w->n; i++)
            if (w->c[i].order < w->c[victim].order)
                victim = i;
    }
    flx_warn(INIT, boot->rank, "rejected connection from %s: too many connections waiting to "
             "authenticate (told to try again)", sock_addr_str(&w->c[victim].peer, ps, sizeof(ps)));
    auth_drop_busy(w->c[victim].fd, w->c[victim].got_hello);
    w->c[victim] = w->c[--w->n];
}

/* Take the connections the listener has, at most a quarter of the set per
 * round, so that the waiting ones' handshakes run between the rounds of a
 * flood; room is made as above. */
static flx_status_t waiting_accept(boot_t *boot, int lfd, boot_waiting_t *w, double deadline)
{
    for (int taken = 0; taken < BOOT_MAX_WAITING / 4; taken++) {
        sock_addr_t peer;
        socklen_t plen = sizeof(peer);
        int fd = accept4(lfd, &peer.sa, &plen, SOCK_CLOEXEC | SOCK_NONBLOCK);
        int err = errno;

        if (fd < 0 && err == EMFILE && w->n > 0) {
            /* the connections in their handshake hold descriptors: take no
             * more until one of them leaves (done, or dropped at its
             * deadline); if it was a rank, the next accept tells */
            w->out_of_fds = 1;
            return FLX_OK;
        }
        if (fd < 0 && err == EMFILE) { /* it stays queued: polling again would spin */
            struct rlimit rl;
            flx_error(INIT, boot->rank, "bootstrap: cannot accept a connection: %s (this process "
                      "may open %ld files, RLIMIT_NOFILE; raise it with ulimit -n)",
                      strerror(err), boot_nofile(&rl));
            return FLX_ERR_SYSTEM;
        }
        if (fd < 0 && err == ENFILE) {
            flx_error(INIT, boot->rank, "bootstrap: cannot accept a connection: %s (the "
                      "system's limit, fs.file-max)", strerror(err));
            return FLX_ERR_SYSTEM;
        }
        if (fd < 0)
            return FLX_OK; /* EAGAIN, or an error the next poll reports again */
        if (w->n == BOOT_MAX_WAITING)
            waiting_make_room(boot, w);
        sock_set_nodelay(fd);
        set_lowat(fd, AUTH_HELLO_BYTES); /* readable: the whole HELLO, or EOF */
        w->c[w->n].fd = fd;
        w->c[w->n].got_hello = 0;
        w->c[w->n].order = w->accepted++;
        w->c[w->n].peer = peer;
        w->c[w->n].deadline = FLX_MIN(flx_time_now() + boot->cfg.handshake_timeout_s, deadline);
        w->n++;
    }
    return FLX_OK;
}

/* One step of entry i's handshake, its bytes being there.  1: entry i
 * authenticated (taken out of the set), 0: go on. */
static int waiting_step(boot_t *boot, boot_waiting_t *w, int i, int *fd_p,
                        sock_addr_t *peer_p, auth_hello_t *hello_p)
{
    double step_deadline = FLX_MIN(flx_time_now() + 0.1, w->c[i].deadline);
    flx_status_t st;

    if (!w->c[i].got_hello) {
        st = auth_accept_start(w->c[i].fd, &boot->key, step_deadline, &w->c[i].auth);
        if (st == FLX_OK) {
            w->c[i].got_hello = 1;
            set_lowat(w->c[i].fd, AUTH_MAC_BYTES);
            return 0;
        }
    } else {
        st = auth_accept_finish(w->c[i].fd, &boot->key, step_deadline, &w->c[i].auth, hello_p);
        if (st == FLX_OK) {
            set_lowat(w->c[i].fd, 1);
            *fd_p = w->c[i].fd;
            *peer_p = w->c[i].peer;
            w->c[i] = w->c[--w->n];
            w->out_of_fds = 0;
            return 1;
        }
    }
    if (!w->c[i].got_hello && st == FLX_ERR_PROTOCOL &&
        auth_hello_version(w->c[i].auth.wire) > 0 &&
        auth_hello_version(w->c[i].auth.wire) != AUTH_VERSION) {
        char why[160];
        snprintf(why, sizeof(why), "a flexcoll whose bootstrap protocol is version %d, this "
                 "one's %d (run one build on every rank)", auth_hello_version(w->c[i].auth.wire),
                 AUTH_VERSION);
        waiting_drop(boot, w, i, why);
        return 0;
    }
    waiting_drop(boot, w, i, st == FLX_ERR_AUTH ? "wrong job secret"
                             : st == FLX_ERR_PEER_LOST ? "closed during the handshake"
                                                       : flx_status_string(st));
    return 0;
}

/* The next connection that passes the handshake, waiting until deadline. */
static flx_status_t boot_next_peer(boot_t *boot, int lfd, boot_waiting_t *w, double deadline,
                                   int *fd_p, sock_addr_t *peer_p, auth_hello_t *hello_p)
{
    for (;;) {
        struct pollfd pfds[BOOT_MAX_WAITING + 1];
        double now = flx_time_now(), wake = deadline;
        int nfds = 0, rc;

        for (int i = 0; i < w->n;) {
            if (now >= w->c[i].deadline) {
                waiting_drop(boot, w, i, "no complete handshake within FLX_HANDSHAKE_TIMEOUT");
                continue;
            }
            wake = FLX_MIN(wake, w->c[i].deadline);
            i++;
        }
        if (now >= deadline)
            return FLX_ERR_TIMED_OUT;
        for (int i = 0; i < w->n; i++)
            pfds[nfds++] = (struct pollfd){.fd = w->c[i].fd, .events = POLLIN};
        pfds[nfds++] = (struct pollfd){.fd = lfd, .events = w->out_of_fds ? 0 : POLLIN};
        rc = poll(pfds, (nfds_t)nfds, (int)(FLX_MIN(wake - now, 1.0) * 1000.0) + 1);
        if (rc < 0 && errno != EINTR) {
            flx_error(INIT, boot->rank, "poll failed: %m");
            return FLX_ERR_SYSTEM;
        }
        if (rc <= 0)
            continue;
        /* from the last: taking an entry out moves the last one into its hole */
        for (int i = nfds - 2; i >= 0; i--)
            if (pfds[i].revents && waiting_step(boot, w, i, fd_p, peer_p, hello_p))
                return FLX_OK;
        if (pfds[nfds - 1].revents) {
            flx_status_t st = waiting_accept(boot, lfd, w, deadline);
            if (st != FLX_OK)
                return st;
        }
    }
}

/* The one line for a HELLO that boot_hello_check refused (from ps): which
 * rank it claims and, for a rank claimed twice, where the first claim came
 * from. */
static void boot_hello_refused(boot_t *boot, const auth_hello_t *hello, uint16_t purpose,
                               const int *fds, const char *ps, const char *why)
{
    sock_addr_t first;
    char fs[SOCK_ADDR_STRLEN] = "?";

    if (hello->size != boot->size) {
        flx_error(INIT, boot->rank, "peer %s claims rank %d of a job of %d ranks; this job has "
                  "%d (FLX_SIZE differs?)", ps, hello->rank, hello->size, boot->size);
    } else if (hello->rank >= 0 && hello->rank < boot->size && hello->rank != boot->rank &&
               fds[hello->rank] >= 0 && hello->purpose == purpose) {
        if (sock_peer_addr(fds[hello->rank], &first) == 0)
            sock_addr_str(&first, fs, sizeof(fs));
        flx_error(INIT, boot->rank, "peer %s claims rank %d, which the process at %s already "
                  "holds: two processes claim the rank (FLX_RANK alike, or two jobs with one "
                  "secret and root?)", ps, hello->rank, fs);
    } else {
        flx_error(INIT, boot->rank, "peer %s claims rank %d of %d (purpose %u, expected %u): %s",
                  ps, hello->rank, hello->size, hello->purpose, purpose, why);
    }
}

/* The accept loop of boot_accept_peers: authenticated connections come
 * from boot_next_peer. */
static flx_status_t boot_accept_loop(boot_t *boot, int lfd, uint16_t purpose, int count,
                                     double deadline, boot_waiting_t *waiting)
{
    int *fds = purpose == AUTH_PURPOSE_MESH2 ? boot->fds2 : boot->fds;
    int have = 0;

    while (have < count) {
        sock_addr_t peer;
        auth_hello_t hello;
        char ps[SOCK_ADDR_STRLEN];
        int fd;
        const char *why;
        flx_status_t st = boot_next_peer(boot, lfd, waiting, deadline, &fd, &peer, &hello);

        if (st == FLX_ERR_TIMED_OUT) {
            sock_addr_t at;
            char hint[256] = "";
            /* a host name that resolves to loopback here (Debian's 127.0.1.1
             * line in /etc/hosts): ranks on other hosts cannot come */
            if (purpose == AUTH_PURPOSE_BOOT &&
                sock_local_addr(lfd, &at) == 0 && sock_addr_is_loopback(&at))
                snprintf(hint, sizeof(hint), " (the root listens on %s, a loopback address: "
                         "if the missing ranks run on other hosts, they cannot reach it; set "
                         "FLX_ROOT to an address they reach, or 0.0.0.0 on rank 0)",
                         sock_addr_str(&at, ps, sizeof(ps)));
            flx_error(INIT, boot->rank,
                      "bootstrap: only %d of %d expected ranks connected within %.0f s%s",
                      have, count, boot->cfg.connect_timeout_s, hint);
            return st;
        }
        if (st != FLX_OK)
            return st;
        sock_addr_str(&peer, ps, sizeof(ps));
        st = boot_hello_check(&hello, purpose, boot->rank, boot->size, fds, &why);
        if (st != FLX_OK) {
            boot_hello_refused(boot, &hello, purpose, fds, ps, why);
            close(fd);
            return st;
        }
        if (purpose == AUTH_PURPOSE_BOOT) {
            boot_wire_addr_t w;
            boot_wire_host_t *hosts = boot->hosts;
            st = sock_recv_all(fd, &w, sizeof(w), deadline);
            if (st == FLX_OK)
                st = sock_recv_all(fd, &hosts[hello.rank], sizeof(*hosts), deadline);
            if (st == FLX_OK)
                st = boot_addr_decode(&w, sizeof(w), &boot->addrs[hello.rank]);
            if (st != FLX_OK) {
                flx_warn(INIT, boot->rank, "rank %d (%s) vanished during bootstrap: %s",
                         hello.rank, ps, flx_status_string(st));
                close(fd);
                continue;
            }
        }
        flx_debug(INIT, boot->rank, "rank %d authenticated from %s%s", hello.rank, ps,
                  purpose == AUTH_PURPOSE_MESH2 ? " (second connection)" : "");
        fds[hello.rank] = fd;
        have++;
    }
    return FLX_OK;
}

/* Accept until every expected peer (expect(rank) true) has authenticated.
 * Strangers and failed handshakes are logged and dropped. */
static flx_status_t boot_accept_peers(boot_t *boot, int lfd, uint16_t purpose, int count,
                                      double deadline)
{
    boot_waiting_t waiting = {.n = 0};
    flx_status_t st = boot_accept_loop(boot, lfd, purpose, count, deadline, &waiting);

    waiting_close_all(boot, &waiting);
    return st;
}

/* Rank 0's data address (see boot.h): FLX_SOCKET_IFNAME's; without it, with
 * the wildcard FLX_ROOT, the local address the members reached (the first
 * that is not loopback, if one is), else FLX_ROOT's.  Apart from FLX_ROOT's
 * address, rank 0 listens there for its data connections (*dfd_p) and sets
 * root_apart; at FLX_ROOT's address lane 1 is the rendezvous connection. */
static flx_status_t boot_root_data(boot_t *boot, const sock_addr_t *root, int *dfd_p)
{
    sock_addr_t data = *root;
    char ds[SOCK_ADDR_STRLEN], rs[SOCK_ADDR_STRLEN];
    int found = 0;
    flx_status_t st;

    if (boot->cfg.socket_ifname[0]) {
        st = sock_ifname_addr(boot->cfg.socket_ifname, root->sa.sa_family, &data);
        if (st != FLX_OK)
            return st;
    } else if (sock_addr_is_any(root)) {
        for (int r = 1; r < boot->size; r++) {
            sock_addr_t local;
            if (sock_local_addr(boot->fds[r], &local) != 0)
                continue;
            if (!found || (sock_addr_is_loopback(&data) && !sock_addr_is_loopback(&local)))
                data = local;
            found = 1;
        }
        if (!found) {
            flx_error(INIT, 0, "bootstrap: no local address of the rendezvous connections: %m");
            return FLX_ERR_SYSTEM;
        }
    }
    if (sock_addr_same_host(&data, root))
        return FLX_OK;
    sock_addr_set_port(&data, 0);
    st = sock_listen(&data, boot->size + 16, dfd_p, &data);
    if (st != FLX_OK)
        return st;
    boot->root_apart = 1;
    boot->addrs[0] = data;
    flx_info(INIT, 0, "bootstrap: rank 0 takes its data connections at %s, apart from the "
             "rendezvous at %s%s", sock_addr_str(&data, ds, sizeof(ds)),
             sock_addr_str(root, rs, sizeof(rs)),
             boot->cfg.socket_ifname[0] ? " (FLX_SOCKET_IFNAME)" : "");
    return FLX_OK;
}

/* This process's machine and network namespace (boot_wire_host_t). */
static void boot_host_id(boot_wire_host_t *h)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    struct stat sb;

    memset(h, 0, sizeof(*h));
    if (f) {
        if (fgets(h->boot_id, sizeof(h->boot_id), f) == NULL)
            h->boot_id[0] = '\0';
        fclose(f);
    }
    if (h->boot_id[0] && stat("/proc/self/ns/net", &sb) == 0) {
        uint64_t ino = (uint64_t)sb.st_ino;
        for (int i = 0; i < 8; i++)
            h->netns[i] = (uint8_t)(ino >> (56 - 8 * i));
    } else {
        memset(h, 0, sizeof(*h));
    }
}

/* Two ranks that run in different network namespaces (on different
 * machines, or apart on one): neither reaches the other's loopback.  0 if
 * either is unknown. */
static int boot_hosts_apart(const boot_wire_host_t *a, const boot_wire_host_t *b)
{
    return a->boot_id[0] && b->boot_id[0] && memcmp(a, b, sizeof(*a)) != 0;
}

/* A rank whose data address is loopback (it reached rank 0 over loopback:
 * FLX_ROOT's host resolves to one on rank 0's host, as a host's own name
 * does on Debian, 127.0.1.1; or FLX_SOCKET_IFNAME=lo) cannot be reached by
 * a rank in another network namespace, on another host or not (the boot id
 * and namespace each rank sent; not the addresses they came from, which a
 * proxy or NAT changes).  Stop the job now, saying so, rather than at
 * FLX_CONNECT_TIMEOUT in the mesh. */
static flx_status_t boot_check_loopback(boot_t *boot)
{
    const boot_wire_host_t *hosts = boot->hosts;
    char ls[SOCK_ADDR_STRLEN], rs[SOCK_ADDR_STRLEN] = "?";
    int lo = -1, remote = -1;
    sock_addr_t from;

    for (int r = 0; r < boot->size && lo < 0; r++)
        if (sock_addr_is_loopback(&boot->addrs[r]))
            lo = r;
    for (int r = 0; r < boot->size && lo >= 0 && remote < 0; r++)
        if (boot_hosts_apart(&hosts[r], &hosts[lo]))
            remote = r;
    if (remote < 0)
        return FLX_OK;
    if (remote == 0 || sock_peer_addr(boot->fds[remote], &from) != 0)
        from = boot->addrs[remote];
    flx_error(INIT, 0, "bootstrap: rank %d takes its data connections on %s, a loopback "
              "address, and rank %d runs on another host or network namespace (at %s), which "
              "cannot reach it: %s; set FLX_SOCKET_IFNAME on every rank, or FLX_ROOT to an "
              "address that is not loopback on any host", lo, sock_addr_str(&boot->addrs[lo], ls, sizeof(ls)),
              remote, sock_addr_str(&from, rs, sizeof(rs)),
              lo == 0 ? "FLX_SOCKET_IFNAME names a loopback interface on rank 0"
                      : "it reached rank 0 over loopback (FLX_ROOT's host resolves to a loopback "
                        "address on rank 0's host, as a host's own name does on Debian) or its "
                        "FLX_SOCKET_IFNAME names one");
    return FLX_ERR_CONFIG;
}

/* Rendezvous at root (listening on *lfd_p), then the address table.  Where
 * rank 0's data address is apart, *dfd_p listens on it. */
static flx_status_t boot_root(boot_t *boot, const sock_addr_t *root, int *lfd_p,
                              int *dfd_p, double deadline)
{
    boot_wire_addr_t *table;
    flx_status_t st;
    size_t n;

    if (boot->size < 2) /* boot_create keeps a job of one from here */
        return FLX_ERR_INVALID_ARG;
    n = (size_t)boot->size;
    boot->hosts = calloc(n, sizeof(boot_wire_host_t));
    if (boot->hosts == NULL) {
        flx_error(INIT, 0, "bootstrap: no memory for %d ranks' host ids", boot->size);
        return FLX_ERR_NO_MEMORY;
    }
    boot_host_id(boot->hosts);
    st = sock_listen(root, boot->size + 16, lfd_p, NULL);
    if (st != FLX_OK)
        return st;
    boot->addrs[0] = *root;
    st = boot_accept_peers(boot, *lfd_p, AUTH_PURPOSE_BOOT, boot->size - 1, deadline);
    if (st == FLX_OK)
        st = boot_root_data(boot, root, dfd_p);
    if (st == FLX_OK)
        st = boot_check_loopback(boot);
    if (st != FLX_OK)
        return st;
    table = calloc(n, sizeof(*table));
    if (table == NULL)
        return FLX_ERR_NO_MEMORY;
    for (int r = 0; r < boot->size; r++)
        boot_addr_encode(&boot->addrs[r], &table[r]);
    if (boot->root_apart)
        table[0].flags = BOOT_ROOT_APART;
    for (int r = 1; r < boot->size && st == FLX_OK; r++) {
        st = sock_send_all(boot->fds[r], table, n * sizeof(*table), deadline);
        if (st != FLX_OK)
            flx_error(INIT, 0, "bootstrap: cannot send the address table to rank %d: %s", r,
                      flx_status_string(st));
    }
    free(table);
    return st;
}

/* Connect to addr and authenticate; an acceptor flooded with connections
 * that dropped this one with a busy notice is tried again, after a pause
 * that grows (10 ms doubling to 320 ms, randomised), until deadline. */
static flx_status_t boot_connect_auth(boot_t *boot, const sock_addr_t *addr,
                                      uint16_t purpose, double deadline, int *fd_p,
                                      int *connected_p)
{
    *connected_p = 0;
    for (int tries = 0;; tries++) {
        char as[SOCK_ADDR_STRLEN];
        double pause = (double)(10 << FLX_MIN(tries, 5)) * 1e-3;
        int fd, busy = 0;
        flx_status_t st = sock_connect(addr, deadline, &fd);

        if (st != FLX_OK)
            return st;
        *connected_p = 1;
        st = auth_connect_or_busy(fd, &boot->key, purpose, boot->rank, boot->size, deadline,
                                  &busy);
        if (st == FLX_OK) {
            *fd_p = fd;
            return FLX_OK;
        }
        close(fd);
        pause *= 0.5 + randombytes_uniform(1000) / 1000.0;
        if (!busy || flx_time_now() + pause >= deadline)
            return st;
        flx_warn(INIT, boot->rank, "%s is flooded with connections and dropped ours: trying "
                 "again in %.0f ms", sock_addr_str(addr, as, sizeof(as)), pause * 1e3);
        usleep((useconds_t)(pause * 1e6));
    }
}

static int boot_link_local(const sock_addr_t *a)
{
    return a->sa.sa_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&a->in6.sin6_addr);
}

/* A link-local IPv6 address in the table names its interface by the index
 * on the rank that sent it; here it is this rank's own: its data
 * address's, or its rendezvous connection's, where that is link-local (a
 * link-local job is one link). */
static void boot_local_scopes(boot_t *boot, const sock_addr_t *mine)
{
    sock_addr_t rdv;
    uint32_t scope = 0;

    if (boot_link_local(mine))
        scope = mine->in6.sin6_scope_id;
    else if (sock_local_addr(boot->fds[0], &rdv) == 0 && boot_link_local(&rdv))
        scope = rdv.in6.sin6_scope_id;
    for (int r = 0; r < boot->size && scope != 0; r++)
        if (boot_link_local(&boot->addrs[r]))
            boot->addrs[r].in6.sin6_scope_id = scope;
}

static flx_status_t boot_member(boot_t *boot, const sock_addr_t *root, int *lfd_p,
                                double deadline)
{
    sock_addr_t local;
    boot_wire_addr_t w, *table;
    boot_wire_host_t host;
    uint8_t out[sizeof(boot_wire_addr_t) + sizeof(boot_wire_host_t)];
    char rs[SOCK_ADDR_STRLEN];
    int fd, connected;
    flx_status_t st;

    st = boot_connect_auth(boot, root, AUTH_PURPOSE_BOOT, deadline, &fd, &connected);
    if (st != FLX_OK && !connected) {
        flx_error(INIT, boot->rank, "bootstrap: cannot reach the root %s: %s",
                  sock_addr_str(root, rs, sizeof(rs)), flx_status_string(st));
        return st;
    }
    if (st != FLX_OK) {
        flx_error(INIT, boot->rank, "bootstrap: the root %s %s",
                  sock_addr_str(root, rs, sizeof(rs)),
                  st == FLX_ERR_AUTH ? "failed authentication (different FLX_JOB_SECRET?)"
                  : st == FLX_ERR_PEER_LOST ? "closed the connection before its challenge (it "
                                              "refused this rank's HELLO, dropped it, or exited)"
                                            : flx_status_string(st));
        return st;
    }
    boot->fds[0] = fd;
    /* the data listener: on FLX_SOCKET_IFNAME, else where the root is reached */
    if (sock_local_addr(fd, &local) != 0) {
        flx_error(INIT, boot->rank, "getsockname failed: %m");
        return FLX_ERR_SYSTEM;
    }
    if (boot->cfg.socket_ifname[0]) {
        st = sock_ifname_addr(boot->cfg.socket_ifname, root->sa.sa_family, &local);
        if (st != FLX_OK)
            return st;
    }
    sock_addr_set_port(&local, 0);
    st = sock_listen(&local, boot->size + 16, lfd_p, &local);
    if (st != FLX_OK)
        return st;
    boot_addr_encode(&local, &w);
    boot_host_id(&host);
    memcpy(out, &w, sizeof(w)); /* one send: the address, then the host */
    memcpy(out + sizeof(w), &host, sizeof(host));
    st = sock_send_all(fd, out, sizeof(out), deadline);
    table = st == FLX_OK ? calloc((size_t)boot->size, sizeof(*table)) : NULL;
    if (st == FLX_OK && table == NULL)
        return FLX_ERR_NO_MEMORY;
    if (st == FLX_OK) /* a root that stopped the job may reset the connection already */
        st = sock_recv_all(fd, table, (size_t)boot->size * sizeof(*table), deadline);
    if (st == FLX_OK)
        st = boot_table_decode(table, (size_t)boot->size * sizeof(*table), boot->size,
                               boot->addrs, &boot->root_apart);
    if (st == FLX_OK)
        boot_local_scopes(boot, &local);
    free(table);
    if (st == FLX_ERR_PEER_LOST)
        flx_error(INIT, boot->rank, "bootstrap: the root closed the connection before sending "
                  "the address table: it stopped the job (its log says why) or exited");
    else if (st != FLX_OK)
        flx_error(INIT, boot->rank, "bootstrap: no address table from the root: %s",
                  flx_status_string(st));
    return st;
}

/* With rank 0's data apart, the rendezvous connections have done their work
 * (the address table, the connection counts): they close before the mesh,
 * which makes lane 1 to rank 0 anew; the descriptors they held are those
 * boot_fd_need counts for it. */
static void boot_leave_rendezvous(boot_t *boot)
{
    for (int r = boot->rank == 0 ? 1 : 0; r < (boot->rank == 0 ? boot->size : 1); r++) {
        close(boot->fds[r]);
        boot->fds[r] = -1;
    }
}

/* rank i connects to j < i and accepts from j > i: lane 1 (purpose MESH,
 * fds) from j = 1 (rank 0's is the rendezvous connection) or, with rank 0's
 * data apart, from j = 0; lane 2 (MESH2, fds2) from j = 0 */
static flx_status_t boot_mesh(boot_t *boot, int lfd, uint16_t purpose, double deadline)
{
    int *fds = purpose == AUTH_PURPOSE_MESH2 ? boot->fds2 : boot->fds;
    int from_root = purpose == AUTH_PURPOSE_MESH2 || boot->root_apart;
    char as[SOCK_ADDR_STRLEN];
    flx_status_t st;

    for (int j = from_root ? 0 : 1; j < boot->rank; j++) {
        int fd, connected;
        st = boot_connect_auth(boot, &boot->addrs[j], purpose, deadline, &fd, &connected);
        if (st != FLX_OK && !connected) /* sock_connect said why */
            return st;
        if (st != FLX_OK) {
            flx_error(INIT, boot->rank, "rank %d at %s: %s", j,
                      sock_addr_str(&boot->addrs[j], as, sizeof(as)),
                      st == FLX_ERR_AUTH ? "failed authentication" : flx_status_string(st));
            return st;
        }
        fds[j] = fd;
    }
    if (boot->rank == boot->size - 1 || (boot->rank == 0 && !from_root))
        return FLX_OK;
    return boot_accept_peers(boot, lfd, purpose, boot->size - 1 - boot->rank, deadline);
}

/* Before the rendezvous: raise the soft limit on open files (up to the
 * hard one) where want connections per pair (auto: 2) would not fit under
 * it, the listener and the root's rendezvous connections included. */
static void boot_fd_raise(const boot_t *boot, int want)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* two communicators at once */
    struct rlimit rl;
    long open_now, cur, need;

    pthread_mutex_lock(&lock);
    open_now = boot_open_fds(1);
    cur = boot_nofile(&rl);
    /* as it will be after the rendezvous: its connections and the listener
     * open; room for the strangers the accept loop may hold at once too */
    open_now += 1 + (boot->rank == 0 ? boot->size - 1 : 1);
    need = boot_fd_need(boot->rank, boot->size, want ? want : 2, open_now) + BOOT_MAX_WAITING;
    if (cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= (rlim_t)need ? (rlim_t)need
                                                                                   : rl.rlim_max;
        if ((long)rl.rlim_cur > cur && setrlimit(RLIMIT_NOFILE, &rl) == 0) /* never lower */
            flx_info(INIT, boot->rank, "bootstrap: raised the soft limit on open files from %ld "
                     "to %ld (%d ranks)", cur, (long)rl.rlim_cur, boot->size);
    }
    pthread_mutex_unlock(&lock);
}

static uint32_t boot_u32(long v) { return v < 0 ? 0 : v > (long)UINT32_MAX ? UINT32_MAX : (uint32_t)v; }

static const char *boot_want_name(uint32_t want) { return want == 0 ? "auto" : want == 1 ? "1" : "2"; }

/* The ranks agree on the connections per pair before the mesh, over the
 * rendezvous connections: one that opened a second connection to a rank
 * that expects none would be refused as a stranger, one that waited for a
 * second connection would wait until FLX_CONNECT_TIMEOUT, and one whose
 * open-file limit cannot hold the mesh would fail halfway through it
 * (accept would fail with EMFILE while its peers wait). */
static flx_status_t boot_agree_lanes(boot_t *boot, int want, double deadline)
{
    boot_wire_fds_t mine, *all = calloc((size_t)boot->size, sizeof(*all));
    struct rlimit rl;
    long open_now = boot_open_fds(1), limit = boot_nofile(&rl);
    int lanes, who, peer = 0;
    flx_status_t st = FLX_OK;

    if (all == NULL) {
        flx_error(INIT, boot->rank, "bootstrap: no memory for %d ranks' connection counts",
                  boot->size);
        return FLX_ERR_NO_MEMORY;
    }
    mine.want = htonl((uint32_t)want);
    mine.fit = htonl((uint32_t)boot_fd_fit(boot->rank, boot->size, open_now, limit));
    mine.limit = htonl(boot_u32(limit));
    mine.need = htonl(boot_u32(boot_fd_need(boot->rank, boot->size, want ? want : 1, open_now)));
    /* through the root: every member sends its entry, the root all of them back */
    if (boot->rank == 0) {
        all[0] = mine;
        for (int r = 1; r < boot->size && st == FLX_OK; r++)
            st = sock_recv_all(boot->fds[peer = r], &all[r], sizeof(*all), deadline);
        for (int r = 1; r < boot->size && st == FLX_OK; r++)
            st = sock_send_all(boot->fds[peer = r], all, (size_t)boot->size * sizeof(*all),
                               deadline);
    } else {
        st = sock_send_all(boot->fds[0], &mine, sizeof(mine), deadline);
        if (st == FLX_OK)
            st = sock_recv_all(boot->fds[0], all, (size_t)boot->size * sizeof(*all), deadline);
    }
    if (st != FLX_OK) {
        flx_error(INIT, boot->rank, "bootstrap: the exchange of connection counts with rank %d "
                  "failed: %s", peer, flx_status_string(st));
        free(all);
        return st;
    }
    st = boot_fds_decide(all, boot->size, want, &lanes, &who);
    if (st == FLX_ERR_MISMATCH) {
        flx_error(INIT, boot->rank, "bootstrap: rank %d wants %s connection(s) per pair of ranks "
                  "and this rank %s (FLX_TCP_SOCKETS; the ib backend uses 1): set FLX_TCP_SOCKETS "
                  "and FLX_NET alike on every rank", who, boot_want_name(ntohl(all[who].want)),
                  boot_want_name((uint32_t)want));
    } else if (st == FLX_ERR_SYSTEM) {
        flx_error(INIT, boot->rank, "bootstrap: rank %d may open %u files (RLIMIT_NOFILE) and "
                  "needs %u for %d connection(s) to each of the other %d ranks: raise its limit "
                  "(ulimit -n)%s", who, ntohl(all[who].limit), ntohl(all[who].need),
                  want ? want : 1, boot->size - 1,
                  want == 2 && ntohl(all[who].fit) == 1 ? " or set FLX_TCP_SOCKETS=1 or auto" : "");
    } else if (st == FLX_ERR_PROTOCOL) {
        flx_error(INIT, boot->rank, "bootstrap: rank %d sent a connection count out of range", who);
    } else if (who >= 0) {
        FLX_LOG(boot->rank == 0 ? FLX_LOG_WARN : FLX_LOG_INFO, FLX_SUBSYS_INIT, boot->rank,
                "bootstrap: rank %d may open %u files (RLIMIT_NOFILE): one tcp connection per "
                "pair of ranks, not two (FLX_TCP_SOCKETS=auto; raise the limit for two)", who,
                ntohl(all[who].limit));
    }
    if (st == FLX_OK)
        boot->lanes = lanes;
    free(all);
    return st;
}

#define BOOT_ID_BYTES sizeof(((boot_wire_host_t *)0)->boot_id)

/* This process's CPUs (sched_getaffinity; all online ones if unreadable). */
static void boot_own_cpus(cpu_set_t *set)
{
    if (sched_getaffinity(0, sizeof(*set), set) == 0)
        return;
    CPU_ZERO(set);
    for (long c = 0, n = sysconf(_SC_NPROCESSORS_ONLN); c < n && c < CPU_SETSIZE; c++)
        CPU_SET((int)c, set);
}

/* The ranks of this job on this machine: those with its kernel's boot id
 * (network namespaces share it, and share the cores), and the CPUs they
 * may run on together (the union of their affinity masks: ranks a launcher
 * bound to a core each have as many as there are ranks, unbound ones every
 * core, ranks all confined to one core that one); and which ranks may run
 * on a CPU of ours (near: not known to be elsewhere, with masks that meet).
 * An unreadable id (ours: every rank's) counts that rank as local on this
 * rank's own CPUs: backends then take the cautious choice. */
static flx_status_t boot_local_ranks(boot_t *boot)
{
    struct {
        char id[BOOT_ID_BYTES];
        cpu_set_t cpus; /* the same layout on every rank of one machine */
    } mine, *all = calloc((size_t)boot->size, sizeof(mine));
    boot_wire_host_t host;
    cpu_set_t local;
    flx_status_t st;

    if (all == NULL) {
        flx_error(INIT, boot->rank, "bootstrap: no memory for %d boot ids", boot->size);
        return FLX_ERR_NO_MEMORY;
    }
    boot_host_id(&host);
    memset(&mine, 0, sizeof(mine));
    memcpy(mine.id, host.boot_id, BOOT_ID_BYTES);
    boot_own_cpus(&mine.cpus);
    st = boot_allgather(boot, &mine, all, sizeof(mine));
    local = mine.cpus;
    boot->local_size = 0;
    for (int j = 0; j < boot->size && st == FLX_OK; j++) {
        const int known = mine.id[0] && all[j].id[0]; /* else: may be here, on our CPUs */
        cpu_set_t both;
        if (known && memcmp(all[j].id, mine.id, BOOT_ID_BYTES) != 0) {
            boot->near[j] = 0; /* another machine */
            continue;
        }
        boot->local_size++;
        if (known)
            CPU_OR(&local, &local, &all[j].cpus);
        CPU_AND(&both, &mine.cpus, &all[j].cpus); /* masks apart: never on our CPUs */
        boot->near[j] = CPU_COUNT(&both) > 0;
    }
    boot->local_cpus = CPU_COUNT(&local);
    free(all);
    return st;
}

double boot_spin(const boot_t *boot, double spin_s, const char *backend)
{
    long cores = boot->local_cpus;
    double shared = boot->cfg.spin_shared_s;

    if (cores <= 0 || boot->local_size <= cores || spin_s <= shared)
        return spin_s;
    flx_info(NET, boot->rank, "%s: %d ranks share %ld cores here: busy-poll %g us "
             "(FLX_SPIN_SHARED), not %g ms", backend, boot->local_size, cores, shared * 1e6,
             spin_s * 1e3);
    return shared;
}

flx_status_t boot_create(int rank, int size, const char *root, const char *secret,
                         const flx_config_t *cfg, int want, boot_t **boot_p)
{
    sock_addr_t root_addr;
    double deadline = flx_time_now() + cfg->connect_timeout_s;
    boot_t *boot;
    int lfd = -1, dfd = -1;
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
    boot->lanes = 1;
    boot->fds = malloc((size_t)size * sizeof(*boot->fds));
    boot->fds2 = malloc((size_t)size * sizeof(*boot->fds2));
    for (int r = 0; r < size; r++) { /* before boot_destroy can see them */
        if (boot->fds)
            boot->fds[r] = -1;
        if (boot->fds2)
            boot->fds2[r] = -1;
    }
    boot->addrs = calloc((size_t)size, sizeof(*boot->addrs));
    boot->near = malloc((size_t)size);
    if (boot->fds == NULL || boot->fds2 == NULL || boot->addrs == NULL || boot->near == NULL) {
        st = FLX_ERR_NO_MEMORY;
        goto err_destroy_boot;
    }
    memset(boot->near, 1, (size_t)size); /* not known yet */
    auth_key_derive(secret, &boot->key);
    boot->local_size = 1;
    boot->local_cpus = 0; /* unknown: boot_spin keeps FLX_SPIN */
    if (size == 1) {
        *boot_p = boot;
        return FLX_OK;
    }
    /* the others wait for the root's name as they wait for its listener;
     * rank 0's own name is known or wrong */
    st = sock_resolve(root, rank == 0 ? 0.0 : deadline, &root_addr);
    if (st != FLX_OK)
        goto err_destroy_boot;
    if (cfg->socket_ifname[0]) { /* before anything waits on it: the root too fails at once */
        sock_addr_t ifaddr;
        st = sock_ifname_addr(cfg->socket_ifname, root_addr.sa.sa_family, &ifaddr);
        if (st != FLX_OK)
            goto err_destroy_boot;
    }
    boot_fd_raise(boot, want);
    st = rank == 0 ? boot_root(boot, &root_addr, &lfd, &dfd, deadline)
                   : boot_member(boot, &root_addr, &lfd, deadline);
    if (dfd >= 0) { /* the rendezvous is over: rank 0 listens on its data address */
        close(lfd);
        lfd = dfd;
    }
    free(boot->hosts);
    boot->hosts = NULL;
    if (st == FLX_OK)
        st = boot_agree_lanes(boot, want, deadline);
    if (st == FLX_OK && boot->root_apart)
        boot_leave_rendezvous(boot);
    if (st == FLX_OK)
        st = boot_mesh(boot, lfd, AUTH_PURPOSE_MESH, deadline);
    if (st == FLX_OK && boot->lanes == 2)
        st = boot_mesh(boot, lfd, AUTH_PURPOSE_MESH2, deadline);
    if (lfd >= 0)
        close(lfd);
    if (st == FLX_OK)
        st = boot_local_ranks(boot);
    if (st != FLX_OK)
        goto err_destroy_boot;
    flx_info(INIT, rank, "bootstrap complete: %d ranks connected through %s, %d connection(s) "
             "per pair", size, root, boot->lanes);
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
    for (int r = 0; r < boot->size; r++) {
        if (boot->fds && boot->fds[r] >= 0)
            close(boot->fds[r]);
        if (boot->fds2 && boot->fds2[r] >= 0)
            close(boot->fds2[r]);
    }
    free(boot->fds);
    free(boot->fds2);
    free(boot->addrs);
    free(boot->near);
    free(boot->hosts);
    sodium_memzero(&boot->key, sizeof(boot->key));
    free(boot);
}

int boot_take_fd(boot_t *boot, int peer, int lane)
{
    int *fds = lane == 2 ? boot->fds2 : boot->fds;
    int fd = fds[peer];

    fds[peer] = -1;
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
