/* sock.h -- non-blocking TCP socket helpers shared by bootstrap and the tcp
 * backend.  errno becomes a flx_status_t here and nowhere else. */
#ifndef FLX_TRANSPORT_SOCK_H
#define FLX_TRANSPORT_SOCK_H

#include "flexcoll.h"

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

/* An IPv4 or IPv6 socket address. */
typedef union {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
} sock_addr_t;

/* errno of a failed socket call -> status (peer gone, timeout, system). */
flx_status_t sock_errno_status(int err);
/* Resolve "host:port" or "[IPv6]:port" (the port digits only) into addr_p:
 * a host name's IPv4 address if it has one, else its IPv6 one. */
flx_status_t sock_parse_addr(const char *hostport, sock_addr_t *addr_p);
/* The same, asking the resolver again every 0.25 s while it does not know
 * the name (EAI_NONAME, EAI_AGAIN) until deadline (monotonic s), with one
 * warning.  FLX_ERR_CONFIG, logged, when it still does not. */
flx_status_t sock_resolve(const char *hostport, double deadline, sock_addr_t *addr_p);
/* An address of interface ifname (name or IPv4 label as getifaddrs gives
 * it), port 0: of family if it has one (AF_INET or AF_INET6), else of the
 * other; a link-local IPv6 one last. */
flx_status_t sock_ifname_addr(const char *ifname, int family, sock_addr_t *addr_p);
/* Listening socket bound to addr (port 0: any); actual address in bound_p. */
flx_status_t sock_listen(const sock_addr_t *addr, int backlog, int *fd_p, sock_addr_t *bound_p);
/* Connect, retrying refused connections until the deadline (monotonic s). */
flx_status_t sock_connect(const sock_addr_t *addr, double deadline, int *fd_p);
/* Accept one connection, waiting until the deadline. */
flx_status_t sock_accept(int lfd, double deadline, int *fd_p, sock_addr_t *peer_p);
/* Move exactly len bytes, waiting until the deadline. */
flx_status_t sock_send_all(int fd, const void *buf, size_t len, double deadline);
flx_status_t sock_recv_all(int fd, void *buf, size_t len, double deadline);
void sock_set_nodelay(int fd);
void sock_set_bufsize(int fd, size_t bytes);
/* TCP_NOTSENT_LOWAT of bytes (0: the kernel's, net.ipv4.tcp_notsent_lowat); 0 ok, -1 refused
 * (errno set).  The socket then takes more of a write only while less
 * than bytes of what it holds is not yet sent (FLX_TCP_NOTSENT_LOWAT). */
int sock_set_notsent_lowat(int fd, size_t bytes);
/* Would the kernel grant SO_SNDBUF and SO_RCVBUF of bytes to an
 * unprivileged socket (net.core.wmem_max and rmem_max at least that)?
 * Setting them turns autotuning off, so a size the kernel would cut
 * down is better not asked for.  0 also when the limits cannot be read;
 * *limit_p (may be NULL) gets the smaller limit, -1 unread. */
int sock_bufsize_granted(size_t bytes, long *limit_p);
/* "a.b.c.d:port" or "[v6%scope]:port" into buf (SOCK_ADDR_STRLEN holds any). */
#define SOCK_ADDR_STRLEN 80
const char *sock_addr_str(const sock_addr_t *addr, char *buf, size_t len);
/* The local (getsockname) or peer (getpeername) address of fd, an
 * IPv4-mapped IPv6 one as IPv4; 0 or -1. */
int sock_local_addr(int fd, sock_addr_t *addr_p);
int sock_peer_addr(int fd, sock_addr_t *addr_p);
/* Size of the family's sockaddr. */
socklen_t sock_addr_len(const sock_addr_t *addr);
/* Port, host order. */
unsigned sock_addr_port(const sock_addr_t *addr);
void sock_addr_set_port(sock_addr_t *addr, unsigned port);
/* 0.0.0.0 or ::; 127.0.0.0/8, ::1 or an IPv4-mapped 127/8; the same
 * address (family, address, IPv6 scope), ports aside. */
int sock_addr_is_any(const sock_addr_t *addr);
int sock_addr_is_loopback(const sock_addr_t *addr);
int sock_addr_same_host(const sock_addr_t *a, const sock_addr_t *b);

#endif
