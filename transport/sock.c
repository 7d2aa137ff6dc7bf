/* sock.c -- non-blocking TCP socket helpers. */
#include "transport/sock.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

flx_status_t sock_errno_status(int err)
{
    switch (err) {
    case ECONNRESET:
    case EPIPE:
    case ECONNREFUSED:
    case ENOTCONN:
    case ECONNABORTED:
    case EHOSTUNREACH:
    case ENETUNREACH:
        return FLX_ERR_PEER_LOST;
    case ETIMEDOUT:
        return FLX_ERR_TIMED_OUT;
    case ENOMEM:
    case ENOBUFS:
        return FLX_ERR_NO_MEMORY;
    default:
        return FLX_ERR_SYSTEM;
    }
}

socklen_t sock_addr_len(const sock_addr_t *addr)
{
    return addr->sa.sa_family == AF_INET6 ? sizeof(addr->in6) : sizeof(addr->in);
}

unsigned sock_addr_port(const sock_addr_t *addr)
{
    return ntohs(addr->sa.sa_family == AF_INET6 ? addr->in6.sin6_port : addr->in.sin_port);
}

void sock_addr_set_port(sock_addr_t *addr, unsigned port)
{
    if (addr->sa.sa_family == AF_INET6)
        addr->in6.sin6_port = htons((uint16_t)port);
    else
        addr->in.sin_port = htons((uint16_t)port);
}

int sock_addr_is_any(const sock_addr_t *addr)
{
    if (addr->sa.sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&addr->in6.sin6_addr);
    return addr->in.sin_addr.s_addr == htonl(INADDR_ANY);
}

int sock_addr_is_loopback(const sock_addr_t *addr)
{
    const struct in6_addr *a6 = &addr->in6.sin6_addr;

    if (addr->sa.sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
    return (ntohl(addr->in.sin_addr.s_addr) >> 24) == 127;
}

int sock_addr_same_host(const sock_addr_t *a, const sock_addr_t *b)
{
    if (a->sa.sa_family != b->sa.sa_family)
        return 0;
    if (a->sa.sa_family == AF_INET6)
        return memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, sizeof(a->in6.sin6_addr)) == 0 &&
               a->in6.sin6_scope_id == b->in6.sin6_scope_id;
    return a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
}

/* An IPv4-mapped IPv6 address (an IPv4 peer of an IPv6 wildcard socket)
 * as the IPv4 address it is: a rank without IPv6 can connect to it. */
static void addr_unmap(sock_addr_t *a)
{
    if (a->sa.sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&a->in6.sin6_addr)) {
        sock_addr_t v4 = {.in = {.sin_family = AF_INET, .sin_port = a->in6.sin6_port}};
        memcpy(&v4.in.sin_addr, a->in6.sin6_addr.s6_addr + 12, 4);
        *a = v4;
    }
}

/* fd's local (peer 0) or peer address, unmapped */
static int fd_addr(int fd, int peer, sock_addr_t *addr_p)
{
    socklen_t len = sizeof(*addr_p);
    int rc;

    memset(addr_p, 0, sizeof(*addr_p));
    rc = peer ? getpeername(fd, &addr_p->sa, &len) : getsockname(fd, &addr_p->sa, &len);
    addr_unmap(addr_p);
    return rc;
}

int sock_local_addr(int fd, sock_addr_t *addr_p) { return fd_addr(fd, 0, addr_p); }

int sock_peer_addr(int fd, sock_addr_t *addr_p) { return fd_addr(fd, 1, addr_p); }

const char *sock_addr_str(const sock_addr_t *addr, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?", ifname[IF_NAMESIZE + 1] = "";

    if (addr->sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &addr->in6.sin6_addr, ip, sizeof(ip));
        if (addr->in6.sin6_scope_id != 0 && if_indextoname(addr->in6.sin6_scope_id, ifname + 1))
            ifname[0] = '%';
        snprintf(buf, len, "[%s%s]:%u", ip, ifname, sock_addr_port(addr));
    } else {
        inet_ntop(AF_INET, &addr->in.sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u", ip, sock_addr_port(addr));
    }
    return buf;
}

flx_status_t sock_parse_addr(const char *hostport, sock_addr_t *addr_p)
{
    return sock_resolve(hostport, 0.0, addr_p);
}

flx_status_t sock_resolve(const char *hostport, double deadline, sock_addr_t *addr_p)
{
    struct addrinfo hints, *res, *pick;
    int warned = 0;
    char host[256];
    const char *colon = strrchr(hostport, ':'), *hbeg = hostport, *hend;
    char *end;
    long port;
    int rc;

    if (colon == NULL || colon == hostport) {
        flx_error(INIT, -1, "address '%s' is not host:port", hostport);
        return FLX_ERR_CONFIG;
    }
    port = strtol(colon + 1, &end, 10);
    /* digits only: strtol would take " 80" and "+80" */
    if (*end != '\0' || port <= 0 || port > 65535 ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1)) {
        flx_error(INIT, -1, "address '%s' has no valid port (1..65535)", hostport);
        return FLX_ERR_CONFIG;
    }
    hend = colon;
    if (hostport[0] == '[') { /* [IPv6]:port */
        if (colon[-1] != ']' || colon - hostport < 3) {
            flx_error(INIT, -1, "address '%s' is not [IPv6 address]:port", hostport);
            return FLX_ERR_CONFIG;
        }
        hbeg = hostport + 1;
        hend = colon - 1;
    } else if (memchr(hostport, ':', (size_t)(colon - hostport)) != NULL) {
        flx_error(INIT, -1, "address '%s': an IPv6 address goes in brackets, [addr]:port",
                  hostport);
        return FLX_ERR_CONFIG;
    }
    if ((size_t)(hend - hbeg) >= sizeof(host)) {
        flx_error(INIT, -1, "address '%s': the host name is longer than %zu characters",
                  hostport, sizeof(host) - 1);
        return FLX_ERR_CONFIG;
    }
    memcpy(host, hbeg, (size_t)(hend - hbeg));
    host[hend - hbeg] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = hbeg != hostport ? AF_INET6 : AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (hbeg != hostport)
        hints.ai_flags = AI_NUMERICHOST;
    /* a name not known yet (a container's DNS record that comes with it,
     * a resolver that does not answer yet) is asked again until deadline */
    while ((rc = getaddrinfo(host, NULL, &hints, &res)) == EAI_NONAME || rc == EAI_AGAIN) {
        if (hbeg != hostport || flx_time_now() + 0.25 >= deadline)
            break;
        if (!warned++)
            flx_warn(INIT, -1, "cannot resolve host '%s' of '%s' yet (%s): asking again until "
                     "FLX_CONNECT_TIMEOUT", host, hostport, gai_strerror(rc));
        usleep(250000);
    }
    if (rc != 0) {
        flx_error(INIT, -1, "cannot resolve host '%s' of '%s': %s%s", host, hostport,
                  gai_strerror(rc), warned ? " (still, at FLX_CONNECT_TIMEOUT)" : "");
        return FLX_ERR_CONFIG;
    }
    /* IPv4 first: a name with both kinds of address means what it meant
     * when only IPv4 was understood, on every rank alike */
    for (pick = res; pick && pick->ai_family != AF_INET; pick = pick->ai_next)
        ;
    for (pick = pick ? pick : res; pick && pick->ai_family != AF_INET && pick->ai_family != AF_INET6;)
        pick = pick->ai_next;
    if (pick == NULL) {
        freeaddrinfo(res);
        flx_error(INIT, -1, "host '%s' of '%s' has no IPv4 or IPv6 address", host, hostport);
        return FLX_ERR_CONFIG;
    }
    memset(addr_p, 0, sizeof(*addr_p));
    memcpy(addr_p, pick->ai_addr, pick->ai_addrlen);
    sock_addr_set_port(addr_p, (unsigned)port);
    freeaddrinfo(res);
    return FLX_OK;
}

/* Preference of an interface address for sock_ifname_addr: 3 the family
 * asked for, 2 the other family's, 1 a link-local IPv6 one (it names the
 * interface by this host's index: other hosts need their own). */
static int ifaddr_rank(const struct sockaddr *sa, int family)
{
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
        return 0;
    if (sa->sa_family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr))
        return 1;
    return sa->sa_family == family ? 3 : 2;
}

flx_status_t sock_ifname_addr(const char *ifname, int family, sock_addr_t *addr_p)
{
    struct ifaddrs *ifs, *it;
    int best = 0;

    if (getifaddrs(&ifs) != 0) {
        flx_error(INIT, -1, "getifaddrs failed: %m");
        return FLX_ERR_SYSTEM;
    }
    for (it = ifs; it; it = it->ifa_next) {
        int r = it->ifa_addr && strcmp(it->ifa_name, ifname) == 0
                    ? ifaddr_rank(it->ifa_addr, family) : 0;
        if (r > best) {
            best = r;
            memset(addr_p, 0, sizeof(*addr_p));
            memcpy(addr_p, it->ifa_addr, it->ifa_addr->sa_family == AF_INET6
                                             ? sizeof(struct sockaddr_in6)
                                             : sizeof(struct sockaddr_in));
        }
    }
    freeifaddrs(ifs);
    if (best == 0) {
        flx_error(INIT, -1, "FLX_SOCKET_IFNAME=%s: no such interface with an IPv4 or IPv6 "
                  "address", ifname);
        return FLX_ERR_NOT_FOUND;
    }
    sock_addr_set_port(addr_p, 0);
    return FLX_OK;
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void sock_set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int sock_set_notsent_lowat(int fd, size_t bytes)
{
    int v = bytes > (1u << 30) ? (1 << 30) : (int)bytes;

    return setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof(v));
}

void sock_set_bufsize(int fd, size_t bytes)
{
    int v = bytes > (1u << 30) ? (1 << 30) : (int)bytes;

    if (bytes == 0)
        return;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

/* A whole number from a /proc/sys file, -1 when it cannot be read. */
static long sysctl_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;

    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld", &v) != 1 || v < 0)
        v = -1;
    fclose(f);
    return v;
}

int sock_bufsize_granted(size_t bytes, long *limit_p)
{
    long w = sysctl_long("/proc/sys/net/core/wmem_max");
    long r = sysctl_long("/proc/sys/net/core/rmem_max");
    long limit = w < 0 || r < 0 ? -1 : FLX_MIN(w, r);

    if (limit_p)
        *limit_p = limit;
    return limit >= 0 && (unsigned long)limit >= bytes;
}

flx_status_t sock_listen(const sock_addr_t *addr, int backlog, int *fd_p, sock_addr_t *bound_p)
{
    sock_addr_t bound;
    char as[SOCK_ADDR_STRLEN];
    int one = 1;
    int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        flx_error(NET, -1, "socket() failed: %m");
        return FLX_ERR_SYSTEM;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr->sa.sa_family == AF_INET6) { /* [::] takes IPv4 too, whatever bindv6only says */
        int zero = 0;
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (bind(fd, &addr->sa, sock_addr_len(addr)) != 0) {
        flx_error(NET, -1, "cannot bind %s: %m", sock_addr_str(addr, as, sizeof(as)));
        goto err_close_fd;
    }
    if (listen(fd, backlog) != 0 || set_nonblock(fd) != 0 || sock_local_addr(fd, &bound) != 0) {
        flx_error(NET, -1, "cannot listen on %s: %m", sock_addr_str(addr, as, sizeof(as)));
        goto err_close_fd;
    }
    *fd_p = fd;
    if (bound_p)
        *bound_p = bound;
    return FLX_OK;

err_close_fd:
    close(fd);
    return FLX_ERR_SYSTEM;
}

static flx_status_t wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = events};
        double left = deadline - flx_time_now();
        int rc;

        if (left <= 0)
            return FLX_ERR_TIMED_OUT;
        rc = poll(&pfd, 1, left > 1.0 ? 1000 : (int)(left * 1000) + 1);
        if (rc > 0)
            return FLX_OK;
        if (rc < 0 && errno != EINTR)
            return sock_errno_status(errno);
    }
}

flx_status_t sock_connect(const sock_addr_t *addr, double deadline, int *fd_p)
{
    char as[SOCK_ADDR_STRLEN];
    int last_err = 0;

    while (flx_time_now() < deadline) {
        int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int err = 0;
        socklen_t elen = sizeof(err);

        if (fd < 0) {
            flx_error(NET, -1, "socket() failed: %m");
            return FLX_ERR_SYSTEM;
        }
        if (connect(fd, &addr->sa, sock_addr_len(addr)) != 0) {
            if (errno != EINPROGRESS) {
                err = errno;
            } else if (wait_fd(fd, POLLOUT, deadline) != FLX_OK) {
                err = ETIMEDOUT;
            } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) {
                err = errno;
            }
        }
        if (err == 0) {
            sock_set_nodelay(fd);
            *fd_p = fd;
            return FLX_OK;
        }
        close(fd);
        last_err = err;
        if (err != ECONNREFUSED && err != ETIMEDOUT && err != ECONNRESET)
            break;
        usleep(20000); /* the listener may not be up yet */
    }
    errno = last_err;
    flx_error(NET, -1, "cannot connect to %s: %m", sock_addr_str(addr, as, sizeof(as)));
    return last_err == ECONNREFUSED || last_err == ETIMEDOUT || last_err == 0
               ? FLX_ERR_TIMED_OUT
               : sock_errno_status(last_err);
}

flx_status_t sock_accept(int lfd, double deadline, int *fd_p, sock_addr_t *peer_p)
{
    for (;;) {
        sock_addr_t peer;
        socklen_t plen = sizeof(peer);
        flx_status_t st;
        int fd = accept4(lfd, &peer.sa, &plen, SOCK_CLOEXEC | SOCK_NONBLOCK);

        if (fd >= 0) {
            sock_set_nodelay(fd);
            *fd_p = fd;
            if (peer_p)
                *peer_p = peer;
            return FLX_OK;
        }
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
            flx_error(NET, -1, "accept failed: %m");
            return sock_errno_status(errno);
        }
        st = wait_fd(lfd, POLLIN, deadline);
        if (st != FLX_OK)
            return st;
    }
}

flx_status_t sock_send_all(int fd, const void *buf, size_t len, double deadline)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        flx_status_t st;

        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return sock_errno_status(errno);
        st = wait_fd(fd, POLLOUT, deadline);
        if (st != FLX_OK)
            return st;
    }
    return FLX_OK;
}

flx_status_t sock_recv_all(int fd, void *buf, size_t len, double deadline)
{
    char *p = buf;

    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        flx_status_t st;

        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return FLX_ERR_PEER_LOST;
        if (errno != EAGAIN && errno != EINTR)
            return sock_errno_status(errno);
        st = wait_fd(fd, POLLIN, deadline);
        if (st != FLX_OK)
            return st;
    }
    return FLX_OK;
}
