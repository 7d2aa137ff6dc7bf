/* sock.h -- non-blocking TCP socket helpers shared by bootstrap and the tcp
 * backend.  errno becomes a flx_status_t here and nowhere else. */
#ifndef FLX_TRANSPORT_SOCK_H
#define FLX_TRANSPORT_SOCK_H

#include "flexcoll.h"

#include <netinet/in.h>
#include <stddef.h>

/* errno of a failed socket call -> status (peer gone, timeout, system). */
flx_status_t sock_errno_status(int err);
/* Resolve "host:port" (IPv4; the port digits only) into addr_p. */
flx_status_t sock_parse_addr(const char *hostport, struct sockaddr_in *addr_p);
/* The same, asking the resolver again every 0.25 s while it does not know
 * the name (EAI_NONAME, EAI_AGAIN) until deadline (monotonic s), with one
 * warning.  FLX_ERR_CONFIG, logged, when it still does not. */
flx_status_t sock_resolve(const char *hostport, double deadline, struct sockaddr_in *addr_p);
/* IPv4 address of interface ifname. */
flx_status_t sock_ifname_addr(const char *ifname, struct in_addr *addr_p);
/* Listening socket bound to addr (port 0: any); actual address in bound_p. */
flx_status_t sock_listen(const struct sockaddr_in *addr, int backlog, int *fd_p,
                         struct sockaddr_in *bound_p);
/* Connect, retrying refused connections until the deadline (monotonic s). */
flx_status_t sock_connect(const struct sockaddr_in *addr, double deadline, int *fd_p);
/* Accept one connection, waiting until the deadline. */
flx_status_t sock_accept(int lfd, double deadline, int *fd_p, struct sockaddr_in *peer_p);
/* Move exactly len bytes, waiting until the deadline. */
flx_status_t sock_send_all(int fd, const void *buf, size_t len, double deadline);
flx_status_t sock_recv_all(int fd, void *buf, size_t len, double deadline);
void sock_set_nodelay(int fd);
void sock_set_bufsize(int fd, size_t bytes);
/* "a.b.c.d:port" into a static-size buffer. */
const char *sock_addr_str(const struct sockaddr_in *addr, char *buf, size_t len);

#endif
