/* hdr.h -- the tcp backend's wire header as pure functions: decoding the
 * 48 bytes read from a socket and matching a header to a posted receive.
 * No I/O, no state: tcp.c calls them on every message and the fuzz harness
 * (tests/fuzz/fuzz_tcp_hdr.c) calls the very same code. */
#ifndef FLX_TRANSPORT_TCP_HDR_H
#define FLX_TRANSPORT_TCP_HDR_H

#include "transport/tcp/tcp.h"

#define TCP_HDR_BYTES 48 /* sizeof(tcp_hdr_t): 4 bytes of alignment padding before count */

/* tcp_hdr_match: the header belongs to another receive (other seq or step). */
#define TCP_HDR_OTHER 1

/* Decode len bytes of wire header into *hdr_p (buf may be hdr_p itself).
 * FLX_OK for a header of a known type with the right magic; else
 * FLX_ERR_PROTOCOL, *hdr_p untouched and *why_p says what was wrong. */
flx_status_t tcp_hdr_decode(const void *buf, size_t len, tcp_hdr_t *hdr_p,
                            const char **why_p);

/* Does data header h belong to the receive posted with tag for expected
 * bytes?  FLX_OK: yes, its payload goes there.  TCP_HDR_OTHER: another
 * (seq, step).  FLX_ERR_MISMATCH: same collective, different signature
 * (kind, dtype, op, count).  FLX_ERR_PROTOCOL: same (seq, step) but a
 * length other than expected. */
int tcp_hdr_match(const tcp_hdr_t *h, const tl_tag_t *tag, size_t expected);

#endif
