/* auth.c -- challenge-response handshake (see auth.h for the exchange). */
#include "transport/auth.h"
#include "transport/sock.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void auth_key_derive(const char *secret, auth_key_t *key_p)
{
    static const char context[] = "flexcoll job secret v1";

    crypto_generichash(key_p->bytes, sizeof(key_p->bytes), (const uint8_t *)secret,
                       strlen(secret), (const uint8_t *)context, sizeof(context) - 1);
}

static void put32(uint8_t *p, uint32_t v) { v = htonl(v); memcpy(p, &v, 4); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return ntohl(v); }

void auth_hello_encode(const auth_hello_t *hello, uint8_t out[AUTH_HELLO_BYTES])
{
    put32(out, AUTH_MAGIC);
    put32(out + 4, ((uint32_t)AUTH_VERSION << 16) | hello->purpose);
    put32(out + 8, (uint32_t)hello->rank);
    put32(out + 12, (uint32_t)hello->size);
    memcpy(out + 16, hello->nonce, AUTH_NONCE_BYTES);
}

int auth_hello_version(const uint8_t in[AUTH_HELLO_BYTES])
{
    return get32(in) == AUTH_MAGIC ? (int)(get32(in + 4) >> 16) : -1;
}

flx_status_t auth_hello_decode(const uint8_t in[AUTH_HELLO_BYTES], auth_hello_t *hello_p)
{
    uint32_t vp = get32(in + 4);
    auth_hello_t h;

    if (get32(in) != AUTH_MAGIC || (vp >> 16) != AUTH_VERSION)
        return FLX_ERR_PROTOCOL;
    h.purpose = (uint16_t)(vp & 0xffff);
    if (h.purpose != AUTH_PURPOSE_BOOT && h.purpose != AUTH_PURPOSE_MESH &&
        h.purpose != AUTH_PURPOSE_MESH2)
        return FLX_ERR_PROTOCOL;
    h.rank = (int32_t)get32(in + 8);
    h.size = (int32_t)get32(in + 12);
    if (h.size < 1 || h.rank < 0 || h.rank >= h.size)
        return FLX_ERR_PROTOCOL;
    memcpy(h.nonce, in + 16, AUTH_NONCE_BYTES);
    *hello_p = h;
    return FLX_OK;
}

/* HMAC(key, role || hello || nonce) */
static void auth_mac(const auth_key_t *key, char role, const uint8_t hello[AUTH_HELLO_BYTES],
                     const uint8_t nonce[AUTH_NONCE_BYTES],
                     uint8_t mac[crypto_auth_hmacsha256_BYTES])
{
    crypto_auth_hmacsha256_state st;

    crypto_auth_hmacsha256_init(&st, key->bytes, sizeof(key->bytes));
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)&role, 1);
    crypto_auth_hmacsha256_update(&st, hello, AUTH_HELLO_BYTES);
    crypto_auth_hmacsha256_update(&st, nonce, AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_final(&st, mac);
}

flx_status_t auth_connect(int fd, const auth_key_t *key, uint16_t purpose, int rank,
                          int size, double deadline)
{
    int busy;

    return auth_connect_or_busy(fd, key, purpose, rank, size, deadline, &busy);
}

flx_status_t auth_connect_or_busy(int fd, const auth_key_t *key, uint16_t purpose, int rank,
                                  int size, double deadline, int *busy_p)
{
    uint8_t wire[AUTH_HELLO_BYTES];
    uint8_t chal[AUTH_NONCE_BYTES + crypto_auth_hmacsha256_BYTES];
    uint8_t mac[crypto_auth_hmacsha256_BYTES];
    uint8_t verdict = 0;
    auth_hello_t hello = {.purpose = purpose, .rank = rank, .size = size};
    flx_status_t st;

    *busy_p = 0;
    randombytes_buf(hello.nonce, sizeof(hello.nonce));
    auth_hello_encode(&hello, wire);
    st = sock_send_all(fd, wire, sizeof(wire), deadline);
    if (st == FLX_OK)
        st = sock_recv_all(fd, chal, 4, deadline);
    if (st == FLX_OK) {
        st = sock_recv_all(fd, chal + 4, sizeof(chal) - 4, deadline);
        /* the busy notice and a hang-up (a challenge may start with its
         * bytes by chance: then the rest follows) */
        *busy_p = st == FLX_ERR_PEER_LOST && get32(chal) == AUTH_BUSY_MAGIC;
    }
    if (st != FLX_OK) /* closed before its challenge: it judged nothing yet */
        return st;
    auth_mac(key, 'A', wire, chal, mac);
    if (sodium_memcmp(mac, chal + AUTH_NONCE_BYTES, sizeof(mac)) != 0)
        return FLX_ERR_AUTH;
    auth_mac(key, 'C', wire, chal, mac);
    st = sock_send_all(fd, mac, sizeof(mac), deadline);
    if (st == FLX_OK)
        st = sock_recv_all(fd, &verdict, 1, deadline);
    if (st == FLX_OK && verdict == AUTH_VERDICT_BUSY) {
        *busy_p = 1;
        return FLX_ERR_PEER_LOST;
    }
    if (st == FLX_ERR_PEER_LOST || (st == FLX_OK && verdict != 1))
        return FLX_ERR_AUTH;
    return st;
}

void auth_drop_busy(int fd, int after_hello)
{
    uint8_t notice[4], sink[256];
    int drained = 0;

    put32(notice, AUTH_BUSY_MAGIC);
    if (after_hello)
        notice[0] = AUTH_VERDICT_BUSY;
    (void)send(fd, notice, after_hello ? 1 : sizeof(notice), MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(fd, SHUT_WR);
    /* unread bytes at close() would send a reset, which can discard the
     * notice at the other end before it is read: a rank has sent at most
     * its HELLO; a stranger that keeps sending gets its reset */
    while (drained < 16 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
        drained++;
    close(fd);
}

_Static_assert(AUTH_MAC_BYTES == crypto_auth_hmacsha256_BYTES, "HMAC-SHA-256 size");

flx_status_t auth_accept_start(int fd, const auth_key_t *key, double deadline,
                               auth_accept_state_t *state)
{
    flx_status_t st;

    st = sock_recv_all(fd, state->wire, sizeof(state->wire), deadline);
    if (st != FLX_OK)
        return st;
    st = auth_hello_decode(state->wire, &state->hello);
    if (st != FLX_OK)
        return st;
    randombytes_buf(state->chal, AUTH_NONCE_BYTES);
    auth_mac(key, 'A', state->wire, state->chal, state->chal + AUTH_NONCE_BYTES);
    return sock_send_all(fd, state->chal, sizeof(state->chal), deadline);
}

flx_status_t auth_accept_finish(int fd, const auth_key_t *key, double deadline,
                                const auth_accept_state_t *state, auth_hello_t *hello_p)
{
    uint8_t mac[crypto_auth_hmacsha256_BYTES], proof[sizeof(mac)];
    uint8_t verdict = 1;
    flx_status_t st;

    st = sock_recv_all(fd, proof, sizeof(proof), deadline);
    /* a connector that hangs up after our challenge found our proof wrong */
    if (st == FLX_ERR_PEER_LOST)
        return FLX_ERR_AUTH;
    if (st != FLX_OK)
        return st;
    auth_mac(key, 'C', state->wire, state->chal, mac);
    if (sodium_memcmp(mac, proof, sizeof(mac)) != 0)
        return FLX_ERR_AUTH;
    st = sock_send_all(fd, &verdict, 1, deadline);
    if (st != FLX_OK)
        return st;
    *hello_p = state->hello;
    return FLX_OK;
}

flx_status_t auth_accept(int fd, const auth_key_t *key, double deadline,
                         auth_hello_t *hello_p)
{
    auth_accept_state_t state;
    flx_status_t st = auth_accept_start(fd, key, deadline, &state);

    if (st != FLX_OK)
        return st;
    return auth_accept_finish(fd, key, deadline, &state, hello_p);
}
