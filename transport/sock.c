/* sock.c -- non-blocking TCP socket helpers. */
#include "transport/sock.h"
#include "common/log.h"
#include "common/time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
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

const char *sock_addr_str(const struct sockaddr_in *addr, char *buf, size_t len)
{
    char ip[INET_ADDRSTRLEN] = "?";

    inet_ntop(AF_INET, &addr->sin_addr, ip, sizeof(ip));
    snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(addr->sin_port));
    return buf;
}

flx_status_t sock_parse_addr(const char *hostport, struct sockaddr_in *addr_p)
{
    return sock_resolve(hostport, 0.0, addr_p);
}

flx_status_t sock_resolve(const char *hostport, double deadline, struct sockaddr_in *addr_p)
{
    struct addrinfo hints, *res;
    int warned = 0;
    char host[256];
    const char *colon = strrchr(hostport, ':');
    char *end;
    long port;
    int rc;

    if (colon == NULL || colon == hostport || (size_t)(colon - hostport) >= sizeof(host)) {
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
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    if (host[0] == '[' || strchr(host, ':') != NULL) {
        flx_error(INIT, -1, "address '%s': IPv6 is not supported; give an IPv4 address or a "
                  "host name with an IPv4 address", hostport);
        return FLX_ERR_CONFIG;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    /* a name not known yet (a container's DNS record that comes with it,
     * a resolver that does not answer yet) is asked again until deadline */
    while ((rc = getaddrinfo(host, NULL, &hints, &res)) == EAI_NONAME || rc == EAI_AGAIN) {
        if (flx_time_now() + 0.25 >= deadline)
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
    memcpy(addr_p, res->ai_addr, sizeof(*addr_p));
    addr_p->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return FLX_OK;
}

flx_status_t sock_ifname_addr(const char *ifname, struct in_addr *addr_p)
{
    struct ifaddrs *ifs, *it;
    flx_status_t st = FLX_ERR_NOT_FOUND;

    if (getifaddrs(&ifs) != 0) {
        flx_error(INIT, -1, "getifaddrs failed: %m");
        return FLX_ERR_SYSTEM;
    }
    for (it = ifs; it; it = it->ifa_next) {
        if (it->ifa_addr && it->ifa_addr->sa_family == AF_INET &&
            strcmp(it->ifa_name, ifname) == 0) {
            *addr_p = ((struct sockaddr_in *)it->ifa_addr)->sin_addr;
            st = FLX_OK;
            break;
        }
    }
    freeifaddrs(ifs);
    if (st != FLX_OK)
        flx_error(INIT, -1, "FLX_SOCKET_IFNAME=%s: no such interface with an IPv4 address",
                  ifname);
    return st;
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

void sock_set_bufsize(int fd, size_t bytes)
{
    int v = bytes > (1u << 30) ? (1 << 30) : (int)bytes;

    if (bytes == 0)
        return;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

flx_status_t sock_listen(const struct sockaddr_in *addr, int backlog, int *fd_p,
                         struct sockaddr_in *bound_p)
{
    struct sockaddr_in bound;
    socklen_t blen = sizeof(bound);
    char as[64];
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        flx_error(NET, -1, "socket() failed: %m");
        return FLX_ERR_SYSTEM;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) != 0) {
        flx_error(NET, -1, "cannot bind %s: %m", sock_addr_str(addr, as, sizeof(as)));
        goto err_close_fd;
    }
    if (listen(fd, backlog) != 0 || set_nonblock(fd) != 0 ||
        getsockname(fd, (struct sockaddr *)&bound, &blen) != 0) {
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

flx_status_t sock_connect(const struct sockaddr_in *addr, double deadline, int *fd_p)
{
    char as[64];
    int last_err = 0;

    while (flx_time_now() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int err = 0;
        socklen_t elen = sizeof(err);

        if (fd < 0) {
            flx_error(NET, -1, "socket() failed: %m");
            return FLX_ERR_SYSTEM;
        }
        if (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) != 0) {
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

flx_status_t sock_accept(int lfd, double deadline, int *fd_p, struct sockaddr_in *peer_p)
{
    for (;;) {
        struct sockaddr_in peer;
        socklen_t plen = sizeof(peer);
        flx_status_t st;
        int fd = accept4(lfd, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC | SOCK_NONBLOCK);

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
