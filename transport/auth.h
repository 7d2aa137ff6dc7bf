/* auth.h -- mutual challenge-response authentication of a new connection
 * with the job secret (HMAC-SHA-256, libsodium).  The secret never crosses
 * the wire; both sides contribute a fresh nonce, so nothing can be replayed.
 *
 *   connector                                   acceptor
 *   HELLO{magic,version,purpose,rank,size,Nc} ->
 *                                            <- CHAL{Na, HMAC(k,"A"|HELLO|Na)}
 *   PROOF{HMAC(k,"C"|HELLO|Na)}              ->
 *                                            <- VERDICT{1}
 */
#ifndef FLX_TRANSPORT_AUTH_H
#define FLX_TRANSPORT_AUTH_H

#include "flexcoll.h"

#include <stdint.h>

#define AUTH_KEY_BYTES 32
#define AUTH_NONCE_BYTES 32
#define AUTH_HELLO_BYTES (16 + AUTH_NONCE_BYTES)
#define AUTH_MAGIC 0x464c5842u /* "FLXB" */
#define AUTH_BUSY_MAGIC 0x464c5857u /* "FLXW": in place of a challenge, "too busy, try again" */
#define AUTH_VERDICT_BUSY 2         /* in place of the verdict, the same */
/* 2: the ranks agree on connections per pair before the mesh; 3: IPv6
 * addresses in the table, and rank 0's data apart from the rendezvous;
 * 4: each rank's CPU mask beside its boot id (the local ranks' cores) */
#define AUTH_VERSION 4

/* MESH2: the mesh's second connection of a pair (FLX_TCP_SOCKETS=2) */
enum { AUTH_PURPOSE_BOOT = 1, AUTH_PURPOSE_MESH = 2, AUTH_PURPOSE_MESH2 = 3 };

typedef struct {
    uint8_t bytes[AUTH_KEY_BYTES];
} auth_key_t;

typedef struct {
    uint16_t purpose;
    int32_t rank;
    int32_t size;
    uint8_t nonce[AUTH_NONCE_BYTES];
} auth_hello_t;

/* The key is a hash of the secret string (any length). */
void auth_key_derive(const char *secret, auth_key_t *key_p);
/* Wire form of HELLO and its parser; the parser checks magic, version and
 * purpose and returns FLX_ERR_PROTOCOL for anything else. */
void auth_hello_encode(const auth_hello_t *hello, uint8_t out[AUTH_HELLO_BYTES]);
flx_status_t auth_hello_decode(const uint8_t in[AUTH_HELLO_BYTES], auth_hello_t *hello_p);
/* The protocol version of a HELLO with flexcoll's magic; -1 without it. */
int auth_hello_version(const uint8_t in[AUTH_HELLO_BYTES]);
/* Run the connector's side on connected fd.  FLX_ERR_AUTH when the
 * acceptor cannot prove the secret or refuses ours. */
flx_status_t auth_connect(int fd, const auth_key_t *key, uint16_t purpose, int rank,
                          int size, double deadline);
/* The same; *busy_p is set when the acceptor, flooded with connections,
 * dropped this one with a busy notice (FLX_ERR_PEER_LOST): worth trying
 * again on a new connection. */
flx_status_t auth_connect_or_busy(int fd, const auth_key_t *key, uint16_t purpose, int rank,
                                  int size, double deadline, int *busy_p);
/* The acceptor drops fd for want of room: tell the connector so (instead
 * of its challenge, or instead of its verdict after_hello) and close it
 * without a reset, so the notice is read. */
void auth_drop_busy(int fd, int after_hello);
/* Run the acceptor's side; hello_p tells who the peer claims to be. */
flx_status_t auth_accept(int fd, const auth_key_t *key, double deadline,
                         auth_hello_t *hello_p);

/* The acceptor's side in two halves, for a caller that serves many
 * connections at once (bootstrap): start reads the HELLO and sends the
 * challenge, finish reads the proof and sends the verdict.  auth_accept is
 * start then finish. */
#define AUTH_MAC_BYTES 32
typedef struct {
    uint8_t wire[AUTH_HELLO_BYTES];
    uint8_t chal[AUTH_NONCE_BYTES + AUTH_MAC_BYTES];
    auth_hello_t hello;
} auth_accept_state_t;
flx_status_t auth_accept_start(int fd, const auth_key_t *key, double deadline,
                               auth_accept_state_t *state);
flx_status_t auth_accept_finish(int fd, const auth_key_t *key, double deadline,
                                const auth_accept_state_t *state, auth_hello_t *hello_p);

#endif
