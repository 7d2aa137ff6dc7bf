/* tcp.h -- internals of the tcp backend: per peer one non-blocking socket,
 * or two (FLX_TCP_SOCKETS=2, or auto where every rank's open-file limit
 * holds them: the default), a send queue and a receive
 * state machine.
 *
 * Why two: a socket is locked while a call copies into or out of it, and
 * on loopback the packets a send produces are handed to the peer's
 * socket in the same call.  With one socket, two ranks exchanging long
 * messages each hold their end in a long sendmsg while the other's data
 * arrives for it: that data waits in the socket's backlog until the
 * sendmsg ends, and the two transfers take turns instead of overlapping
 * (1 MiB each way: 3x the time).  So of a pair (lo, hi), hi sends its long
 * messages (TCP_SPLIT_MIN and up) on the second connection (while that
 * is the faster way: FLX_TCP_LANE, lane.h); everything
 * else goes on the first, where a short message's reply carries the
 * acknowledgement of its request (on a socket used one way only every
 * short message costs an acknowledgement packet of its own: a microsecond
 * or more on loopback).  A sender's messages keep their order: before a
 * message that goes on the other connection it writes a SWITCH header
 * where it was, and the receiver reads one connection at a time, changing
 * over at a SWITCH.
 *
 * Every message is a 48-byte header followed by its payload.  Small and
 * large messages take the same path (no per-message handshake): the sender
 * writes header and payload with one sendmsg (a long one in several, of
 * whole segments: FLX_TCP_WRITE_MAX, tcp_write_cap); the receiver matches the
 * header to a posted receive and reads the payload straight into the
 * user's buffer, or into a buffer of its own when nothing is posted yet
 * (unexpected message), copied out when the receive is posted. */
#ifndef FLX_TRANSPORT_TCP_H
#define FLX_TRANSPORT_TCP_H

#include "transport/tl.h"
#include "transport/tcp/lane.h"

#define TCP_MAGIC 0x464c5844u /* "FLXD" */

/* SWITCH: the sender's next message comes on the pair's other connection */
enum { TCP_MSG_DATA = 1, TCP_MSG_ERROR = 2, TCP_MSG_BYE = 3, TCP_MSG_SWITCH = 4 };

/* A message this long or longer from the higher rank of a pair goes on the
 * pair's second connection (when there is one). */
#define TCP_SPLIT_MIN ((uint64_t)64 << 10)

typedef struct {
    uint32_t magic;
    uint8_t type;
    uint8_t kind;
    uint8_t dtype;
    uint8_t pad;
    uint16_t op;
    uint16_t pad2;
    uint32_t seq;
    uint32_t step;
    int32_t status;   /* TCP_MSG_ERROR: the sender's failure */
    uint32_t pad3;
    uint64_t count;
    uint64_t len;
} tcp_hdr_t;          /* 48 bytes: 4 of alignment padding before count */

typedef struct tcp_unexp {
    struct tcp_unexp *next;
    tcp_hdr_t hdr;
    void *buf;
    size_t cap;          /* bytes allocated: grows as the payload arrives */
    size_t got;
    tl_req_t *claimed;   /* a receive posted while the payload was arriving */
} tcp_unexp_t;

typedef struct {
    int sock[2];              /* the pair's connections (-1: none)      */
    int fd;                   /* the one the peer's messages come on now */
    int fd_alt;               /* the other one (-1: a single connection) */
    int wfd;                  /* the one ours go out on now             */
    int wfd_long;             /* where long ones go (short: sock[0])    */
    size_t switch_sent;       /* bytes of a SWITCH header written on wfd */
    int peer;
    int bye;                  /* the peer said goodbye                 */
    int errored;              /* the peer reported its failure         */
    int eof;
    int parked;               /* rhdr is a DATA header nobody waits for */
    double parked_at;         /* yet: its payload stays in the socket  */
    tl_req_t *sq_head, *sq_tail;
    tl_req_t *posted_head, *posted_tail;
    tcp_unexp_t *unexp_head, *unexp_tail;
    tcp_hdr_t rhdr;           /* header being received                 */
    size_t rhdr_got;
    tl_req_t *rreq;           /* posted receive taking the payload     */
    tcp_unexp_t *runexp;      /* or the unexpected buffer taking it    */
    char *ra;                 /* read-ahead buffer of fd (ctx's pool)   */
    size_t ra_off, ra_len;    /* [ra_off, ra_len) unused                */
    char *ra_alt;             /* fd_alt's: what was read past a SWITCH  */
    size_t ra_off_alt, ra_len_alt; /* waits there for the switch back  */
    unsigned long reads;      /* recv() calls that returned data or EOF  */
    int lane_auto;            /* this rank picks wfd_long per period     */
    size_t wcap;              /* bytes one write of sq_head takes         */
    int near;                 /* the peer may run on one of our CPUs      */
    tcp_lane_t lane;          /* (the higher rank, FLX_TCP_LANE=auto)    */
} tcp_conn_t;

/* Headers and short payloads are read TCP_READAHEAD bytes at a time into a
 * buffer, so that one recv() usually takes a whole small message (and the
 * next header); a payload at least this long is received straight into
 * its destination. */
#define TCP_READAHEAD 4096

struct tl_ctx {
    int rank;
    int size;
    tcp_conn_t *conns;        /* [size], conns[rank].fd == -1          */
    struct pollfd *pfds;      /* [lanes * size]: each peer's fd, and its wfd */
                              /* when that differs and sends are queued   */
    int *pfd_peer;            /* the peer of pfds[i]                      */
    char *pfd_out;            /* 1: pfds[i] is such a wfd (POLLOUT only)  */
    char *ra_pool;            /* [lanes * size] read-ahead buffers      */
    flx_status_t err;         /* this rank failed: everything fails     */
    int remote_failed;        /* a peer failed at collective remote_seq: */
    uint32_t remote_seq;      /* that one and later ones fail here too   */
    flx_status_t remote_err;
    tl_cur_t cur;             /* newest collective seen in a request     */
    int nparked;              /* connections parked (tcp_conn_t.parked)  */
    unsigned long park_buffered; /* parked messages buffered before their receive */
    double spin_apart_s;      /* the busy-poll while every peer awaited  */
                              /* runs on CPUs apart from ours (FLX_SPIN) */
    flx_config_t cfg;
};

/* The busy-poll of a progress round now: cfg.spin_s (FLX_SPIN, or
 * FLX_SPIN_SHARED where ranks outnumber the cores), but spin_apart_s where
 * that is longer, something is awaited and every peer it is awaited from
 * (a receive posted or being read, a send queued) runs on CPUs apart from
 * ours (!near): a short spin must not keep the core from the rank we wait
 * for, and such a rank does not run on our core; what our spin takes from
 * the ranks that share it (each yield hands it over) costs less than the
 * sleep it saves (4 ranks on 2 cores bound in turn: spin_apart_s in
 * tcp_create). */
double tcp_wait_spin(const tl_ctx_t *ctx);

#endif
