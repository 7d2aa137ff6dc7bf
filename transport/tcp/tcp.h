/* tcp.h -- internals of the tcp backend: one non-blocking socket per peer,
 * a send queue and a receive state machine per connection.
 *
 * Every message is a 48-byte header followed by its payload.  Small and
 * large messages take the same path (no per-message handshake): the sender
 * writes header and payload with one sendmsg; the receiver matches the
 * header to a posted receive and reads the payload straight into the
 * user's buffer, or into a buffer of its own when nothing is posted yet
 * (unexpected message), copied out when the receive is posted. */
#ifndef FLX_TRANSPORT_TCP_H
#define FLX_TRANSPORT_TCP_H

#include "transport/tl.h"

#define TCP_MAGIC 0x464c5844u /* "FLXD" */

enum { TCP_MSG_DATA = 1, TCP_MSG_ERROR = 2, TCP_MSG_BYE = 3 };

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
    int fd;
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
    char *ra;                 /* read-ahead buffer (in the ctx's pool)  */
    size_t ra_off, ra_len;    /* [ra_off, ra_len) unused                */
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
    struct pollfd *pfds;
    int *pfd_peer;
    char *ra_pool;            /* [size] read-ahead buffers              */
    flx_status_t err;         /* this rank failed: everything fails     */
    int remote_failed;        /* a peer failed at collective remote_seq: */
    uint32_t remote_seq;      /* that one and later ones fail here too   */
    flx_status_t remote_err;
    tl_cur_t cur;             /* newest collective seen in a request     */
    int nparked;              /* connections parked (tcp_conn_t.parked)  */
    unsigned long park_buffered; /* parked messages buffered before their receive */
    flx_config_t cfg;
};

#endif
