/* check_auth.c -- unit tests of the connection handshake (transport/auth.h).
 *
 * Real handshakes run over a socketpair(AF_UNIX, SOCK_STREAM) with both ends
 * non-blocking: one side runs in a thread, the other in the test.  Where a
 * test plays one side by hand it follows the exchange drawn in auth.h and
 * computes the HMACs itself with libsodium, so the wire format is checked
 * too, not only that the two library halves agree with each other. */
#include "common/time.h"
#include "transport/auth.h"
#include "transport/boot_msg.h"
#include "transport/sock.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* a 0.5 s handshake deadline must end the wait, and a failure the peer
 * shows at once (5 s deadline) must come before it: later than this is a
 * deadline not kept, or a failure waited out (a loaded 2-core machine
 * stalls a process ~1 s) */
#define AUTH_LATE_S 3.0
#define CHAL_BYTES (AUTH_NONCE_BYTES + crypto_auth_hmacsha256_BYTES)

/* ---------------------------------------------------------------------- */
/* helpers                                                                 */
/* ---------------------------------------------------------------------- */

static void make_pair(int fds[2])
{
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK), 0);
}

/* Read exactly len bytes within timeout seconds.  Returns the number read:
 * len, fewer when the peer closed, or -1 on timeout. */
static ssize_t read_full(int fd, void *buf, size_t len, double timeout)
{
    double deadline = flx_time_now() + timeout;
    size_t got = 0;

    while (got < len) {
        ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};

        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0)
            return (ssize_t)got;
        if (errno != EAGAIN && errno != EINTR)
            return (ssize_t)got;
        if (flx_time_now() > deadline)
            return -1;
        poll(&pfd, 1, 10);
    }
    return (ssize_t)got;
}

static void write_full(int fd, const void *buf, size_t len)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n = send(fd, (const char *)buf + done, len - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        ck_assert_msg(n < 0 && (errno == EAGAIN || errno == EINTR), "send: %s", strerror(errno));
        poll(&(struct pollfd){.fd = fd, .events = POLLOUT}, 1, 10);
    }
}

/* HMAC(key, role || hello || nonce), as auth.h draws it */
static void proto_mac(const auth_key_t *key, char role, const uint8_t hello[AUTH_HELLO_BYTES],
                      const uint8_t nonce[AUTH_NONCE_BYTES], uint8_t mac[32])
{
    uint8_t msg[1 + AUTH_HELLO_BYTES + AUTH_NONCE_BYTES];

    msg[0] = (uint8_t)role;
    memcpy(msg + 1, hello, AUTH_HELLO_BYTES);
    memcpy(msg + 1 + AUTH_HELLO_BYTES, nonce, AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256(mac, msg, sizeof(msg), key->bytes);
}

/* one side of a handshake, run by the library in a thread */
typedef struct {
    pthread_t tid;
    int accept;          /* 1: auth_accept, 0: auth_connect */
    int fd;
    int close_after;     /* close fd when the call returns */
    auth_key_t key;
    double deadline;
    uint16_t purpose;
    int rank, size;
    flx_status_t st;
    auth_hello_t hello;  /* acceptor's output */
    double elapsed;
} peer_t;

static void *peer_main(void *arg)
{
    peer_t *p = arg;
    double t0 = flx_time_now();

    if (p->accept)
        p->st = auth_accept(p->fd, &p->key, p->deadline, &p->hello);
    else
        p->st = auth_connect(p->fd, &p->key, p->purpose, p->rank, p->size, p->deadline);
    p->elapsed = flx_time_now() - t0;
    if (p->close_after)
        close(p->fd);
    return NULL;
}

static void peer_init(peer_t *p, int accept, int fd, const char *secret, double timeout)
{
    memset(p, 0, sizeof(*p));
    p->accept = accept;
    p->fd = fd;
    p->close_after = 1;
    auth_key_derive(secret, &p->key);
    p->deadline = flx_time_now() + timeout;
    p->purpose = AUTH_PURPOSE_MESH;
    p->rank = 3;
    p->size = 8;
    p->st = FLX_INPROGRESS;
    memset(&p->hello, 0xee, sizeof(p->hello));
}

static void peer_start(peer_t *p)
{
    ck_assert_int_eq(pthread_create(&p->tid, NULL, peer_main, p), 0);
}

static flx_status_t peer_join(peer_t *p)
{
    ck_assert_int_eq(pthread_join(p->tid, NULL), 0);
    return p->st;
}

static int hello_untouched(const auth_hello_t *h)
{
    auth_hello_t sentinel;

    memset(&sentinel, 0xee, sizeof(sentinel));
    return memcmp(h, &sentinel, sizeof(sentinel)) == 0;
}

/* ---------------------------------------------------------------------- */
/* HELLO encoding                                                          */
/* ---------------------------------------------------------------------- */

START_TEST(test_hello_encode_layout)
{
    auth_hello_t h = {.purpose = AUTH_PURPOSE_MESH, .rank = 0x01020304, .size = 0x05060708};
    static const uint8_t head[16] = {0x46, 0x4c, 0x58, 0x42, /* "FLXB" */
                                     0x00, 0x04, 0x00, 0x02, /* version 4, purpose 2 */
                                     0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
    uint8_t wire[AUTH_HELLO_BYTES];

    ck_assert_int_eq(AUTH_HELLO_BYTES, 48);
    for (int i = 0; i < AUTH_NONCE_BYTES; i++)
        h.nonce[i] = (uint8_t)(0xa0 + i);
    auth_hello_encode(&h, wire);
    ck_assert_mem_eq(wire, head, sizeof(head));
    ck_assert_mem_eq(wire + 16, h.nonce, AUTH_NONCE_BYTES);
}
END_TEST

START_TEST(test_hello_roundtrip)
{
    static const struct { uint16_t purpose; int32_t rank, size; } cases[] = {
        {AUTH_PURPOSE_BOOT, 0, 1},    {AUTH_PURPOSE_MESH, 3, 8},
        {AUTH_PURPOSE_BOOT, 7, 8},    {AUTH_PURPOSE_MESH, 0, 2},
        {AUTH_PURPOSE_MESH, (1 << 24) - 1, 1 << 24}, {AUTH_PURPOSE_BOOT, 0, INT32_MAX},
        {AUTH_PURPOSE_MESH2, 1, 2},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        auth_hello_t h = {.purpose = cases[i].purpose, .rank = cases[i].rank,
                          .size = cases[i].size}, out;
        uint8_t wire[AUTH_HELLO_BYTES];

        randombytes_buf(h.nonce, sizeof(h.nonce));
        auth_hello_encode(&h, wire);
        memset(&out, 0, sizeof(out));
        ck_assert_int_eq(auth_hello_decode(wire, &out), FLX_OK);
        ck_assert_uint_eq(out.purpose, cases[i].purpose);
        ck_assert_int_eq(out.rank, cases[i].rank);
        ck_assert_int_eq(out.size, cases[i].size);
        ck_assert_mem_eq(out.nonce, h.nonce, AUTH_NONCE_BYTES);
    }
}
END_TEST

/* a valid wire HELLO with one field replaced must be refused */
static void expect_protocol_error(const uint8_t wire[AUTH_HELLO_BYTES], const char *what)
{
    auth_hello_t out;
    auth_hello_t sentinel;

    memset(&out, 0xee, sizeof(out));
    memset(&sentinel, 0xee, sizeof(sentinel));
    ck_assert_msg(auth_hello_decode(wire, &out) == FLX_ERR_PROTOCOL, "%s accepted", what);
    ck_assert_msg(memcmp(&out, &sentinel, sizeof(out)) == 0, "%s: output written", what);
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

START_TEST(test_hello_reject)
{
    auth_hello_t h = {.purpose = AUTH_PURPOSE_MESH, .rank = 2, .size = 4};
    uint8_t good[AUTH_HELLO_BYTES], w[AUTH_HELLO_BYTES];
    static const uint32_t bad_vp[] = {
        (0u << 16) | AUTH_PURPOSE_MESH, (3u << 16) | AUTH_PURPOSE_MESH,
        (5u << 16) | AUTH_PURPOSE_MESH, (0xffffu << 16) | AUTH_PURPOSE_BOOT, /* bad version */
        (4u << 16) | 0, (4u << 16) | 4, (4u << 16) | 0xffff, /* bad purpose */
    };
    static const int32_t bad_rank_size[][2] = {
        {4, 4}, {5, 4}, {0, 0}, {-1, 4}, {0, -1}, {INT32_MIN, 4}, {1, INT32_MIN}, {3, 0},
    };

    randombytes_buf(h.nonce, sizeof(h.nonce));
    auth_hello_encode(&h, good);
    {
        auth_hello_t out;
        ck_assert_int_eq(auth_hello_decode(good, &out), FLX_OK);
    }
    /* the version of a HELLO with the magic, for the line that names an older build */
    ck_assert_int_eq(auth_hello_version(good), AUTH_VERSION);
    memcpy(w, good, sizeof(w));
    w[5] = 2;
    ck_assert_int_eq(auth_hello_version(w), 2);
    w[0] ^= 0x20;
    ck_assert_int_eq(auth_hello_version(w), -1);
    for (int byte = 0; byte < 4; byte++) {
        memcpy(w, good, sizeof(w));
        w[byte] ^= 0x20;
        expect_protocol_error(w, "bad magic");
    }
    for (size_t i = 0; i < sizeof(bad_vp) / sizeof(bad_vp[0]); i++) {
        memcpy(w, good, sizeof(w));
        put_be32(w + 4, bad_vp[i]);
        expect_protocol_error(w, "bad version/purpose");
    }
    for (size_t i = 0; i < sizeof(bad_rank_size) / sizeof(bad_rank_size[0]); i++) {
        memcpy(w, good, sizeof(w));
        put_be32(w + 8, (uint32_t)bad_rank_size[i][0]);
        put_be32(w + 12, (uint32_t)bad_rank_size[i][1]);
        expect_protocol_error(w, "bad rank/size");
    }
    memset(w, 0, sizeof(w));
    expect_protocol_error(w, "all zeros");
}
END_TEST

START_TEST(test_key_derive)
{
    auth_key_t a, b, c, e, zero;
    char longsecret[1001];

    memset(&zero, 0, sizeof(zero));
    auth_key_derive("correct horse", &a);
    auth_key_derive("correct horse", &b);
    auth_key_derive("correct horsf", &c);
    auth_key_derive("", &e);
    ck_assert_mem_eq(a.bytes, b.bytes, AUTH_KEY_BYTES);
    ck_assert(memcmp(a.bytes, c.bytes, AUTH_KEY_BYTES) != 0);
    ck_assert(memcmp(a.bytes, e.bytes, AUTH_KEY_BYTES) != 0);
    ck_assert(memcmp(e.bytes, zero.bytes, AUTH_KEY_BYTES) != 0);
    memset(longsecret, 'x', 1000);
    longsecret[1000] = '\0';
    auth_key_derive(longsecret, &b);
    longsecret[999] = 'y';
    auth_key_derive(longsecret, &c);
    ck_assert(memcmp(b.bytes, c.bytes, AUTH_KEY_BYTES) != 0);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* handshakes between the two library halves                               */
/* ---------------------------------------------------------------------- */

START_TEST(test_handshake_ok)
{
    static const struct { uint16_t purpose; int rank, size; } cases[] = {
        {AUTH_PURPOSE_MESH, 3, 8}, {AUTH_PURPOSE_BOOT, 0, 1}, {AUTH_PURPOSE_BOOT, 63, 64},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int fds[2];
        peer_t acc, con;

        make_pair(fds);
        peer_init(&acc, 1, fds[1], "job-42-secret", 5);
        peer_init(&con, 0, fds[0], "job-42-secret", 5);
        con.purpose = cases[i].purpose;
        con.rank = cases[i].rank;
        con.size = cases[i].size;
        con.close_after = 0;
        peer_start(&acc);
        peer_main(&con); /* the connector runs in the test's thread */
        ck_assert_int_eq(peer_join(&acc), FLX_OK);
        ck_assert_int_eq(con.st, FLX_OK);
        ck_assert_uint_eq(acc.hello.purpose, cases[i].purpose);
        ck_assert_int_eq(acc.hello.rank, cases[i].rank);
        ck_assert_int_eq(acc.hello.size, cases[i].size);
        close(fds[0]);
    }
}
END_TEST

START_TEST(test_handshake_fresh_nonces)
{
    uint8_t first[AUTH_NONCE_BYTES];

    for (int round = 0; round < 2; round++) {
        int fds[2];
        peer_t acc, con;

        make_pair(fds);
        peer_init(&acc, 1, fds[1], "s", 5);
        peer_init(&con, 0, fds[0], "s", 5);
        peer_start(&acc);
        peer_main(&con);
        ck_assert_int_eq(peer_join(&acc), FLX_OK);
        ck_assert_int_eq(con.st, FLX_OK);
        if (round == 0)
            memcpy(first, acc.hello.nonce, sizeof(first));
        else
            ck_assert(memcmp(first, acc.hello.nonce, sizeof(first)) != 0);
    }
}
END_TEST

START_TEST(test_handshake_wrong_secret)
{
    for (int swap = 0; swap < 2; swap++) {
        int fds[2];
        peer_t acc, con;

        make_pair(fds);
        peer_init(&acc, 1, fds[1], swap ? "beta" : "alpha", 5);
        peer_init(&con, 0, fds[0], swap ? "alpha" : "beta", 5);
        peer_start(&acc);
        peer_main(&con); /* closes its end when it gives up */
        ck_assert_int_eq(con.st, FLX_ERR_AUTH);
        peer_join(&acc);
        /* the acceptor proves itself first, so a real connector detects the
         * mismatch and hangs up before sending its proof: the acceptor
         * must fail (and quickly), never succeed */
        ck_assert_msg(acc.st == FLX_ERR_AUTH || acc.st == FLX_ERR_PEER_LOST,
                      "acceptor: %s", flx_status_name(acc.st));
        ck_assert_msg(acc.elapsed < AUTH_LATE_S, "acceptor failed after %.3f s", acc.elapsed);
        ck_assert(hello_untouched(&acc.hello));
    }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* one side played by hand                                                 */
/* ---------------------------------------------------------------------- */

/* connector by hand: the challenge carries HMAC(k, "A"|HELLO|Na); our proof
 * is HMAC(k, "C"|HELLO|Na), the verdict is one byte 1.  With tamper set the
 * proof has one bit flipped and the acceptor must refuse it. */
static void hand_connector(int tamper)
{
    int fds[2];
    peer_t acc;
    auth_hello_t h = {.purpose = AUTH_PURPOSE_BOOT, .rank = 5, .size = 6};
    uint8_t wire[AUTH_HELLO_BYTES], chal[CHAL_BYTES], mac[32], verdict = 0;

    make_pair(fds);
    peer_init(&acc, 1, fds[1], "hand-made", 5);
    peer_start(&acc);
    randombytes_buf(h.nonce, sizeof(h.nonce));
    auth_hello_encode(&h, wire);
    write_full(fds[0], wire, sizeof(wire));
    ck_assert_int_eq(read_full(fds[0], chal, sizeof(chal), 5), CHAL_BYTES);
    proto_mac(&acc.key, 'A', wire, chal, mac);
    ck_assert_mem_eq(mac, chal + AUTH_NONCE_BYTES, 32);
    proto_mac(&acc.key, 'C', wire, chal, mac);
    if (tamper)
        mac[17] ^= 0x04;
    write_full(fds[0], mac, sizeof(mac));
    if (tamper) {
        ck_assert_int_eq(peer_join(&acc), FLX_ERR_AUTH);
        ck_assert(hello_untouched(&acc.hello));
        /* no verdict: the acceptor hung up */
        ck_assert_int_eq(read_full(fds[0], &verdict, 1, 5), 0);
    } else {
        ck_assert_int_eq(read_full(fds[0], &verdict, 1, 5), 1);
        ck_assert_uint_eq(verdict, 1);
        ck_assert_int_eq(peer_join(&acc), FLX_OK);
        ck_assert_uint_eq(acc.hello.purpose, AUTH_PURPOSE_BOOT);
        ck_assert_int_eq(acc.hello.rank, 5);
        ck_assert_int_eq(acc.hello.size, 6);
        ck_assert_mem_eq(acc.hello.nonce, h.nonce, AUTH_NONCE_BYTES);
    }
    close(fds[0]);
}

START_TEST(test_acceptor_wire_protocol) { hand_connector(0); }
END_TEST

START_TEST(test_acceptor_rejects_bad_proof) { hand_connector(1); }
END_TEST

/* acceptor by hand: a challenge whose MAC is not made with the secret must
 * be refused, and the connector must not reveal its proof */
START_TEST(test_connector_rejects_bad_challenge)
{
    for (int variant = 0; variant < 2; variant++) {
        int fds[2];
        peer_t con;
        uint8_t wire[AUTH_HELLO_BYTES], chal[CHAL_BYTES], extra[64];
        auth_key_t other;
        auth_hello_t h;

        make_pair(fds);
        peer_init(&con, 0, fds[0], "right", 5);
        peer_start(&con);
        ck_assert_int_eq(read_full(fds[1], wire, sizeof(wire), 5), AUTH_HELLO_BYTES);
        ck_assert_int_eq(auth_hello_decode(wire, &h), FLX_OK);
        ck_assert_int_eq(h.rank, 3);
        ck_assert_int_eq(h.size, 8);
        randombytes_buf(chal, AUTH_NONCE_BYTES);
        if (variant == 0) {
            randombytes_buf(chal + AUTH_NONCE_BYTES, 32); /* garbage MAC */
        } else {
            auth_key_derive("wrong", &other); /* a well-formed MAC, other key */
            proto_mac(&other, 'A', wire, chal, chal + AUTH_NONCE_BYTES);
        }
        write_full(fds[1], chal, sizeof(chal));
        ck_assert_int_eq(peer_join(&con), FLX_ERR_AUTH);
        /* the connector closed without sending anything more */
        ck_assert_int_eq(read_full(fds[1], extra, sizeof(extra), 5), 0);
        close(fds[1]);
    }
}
END_TEST

START_TEST(test_acceptor_timeout)
{
    int fds[2];
    auth_key_t key;
    auth_hello_t hello;
    double t0, elapsed;
    flx_status_t st;

    make_pair(fds);
    auth_key_derive("silence", &key);
    memset(&hello, 0xee, sizeof(hello));
    t0 = flx_time_now();
    st = auth_accept(fds[1], &key, t0 + 0.5, &hello);
    elapsed = flx_time_now() - t0;
    ck_assert_int_eq(st, FLX_ERR_TIMED_OUT);
    ck_assert_msg(elapsed >= 0.45 && elapsed < AUTH_LATE_S, "timed out after %.3f s", elapsed);
    ck_assert(hello_untouched(&hello));

    /* half a HELLO, then silence: still a timeout */
    write_full(fds[0], "FLXB\0\1\0\2", 8);
    t0 = flx_time_now();
    st = auth_accept(fds[1], &key, t0 + 0.5, &hello);
    elapsed = flx_time_now() - t0;
    ck_assert_int_eq(st, FLX_ERR_TIMED_OUT);
    ck_assert_msg(elapsed >= 0.45 && elapsed < AUTH_LATE_S, "timed out after %.3f s", elapsed);
    close(fds[0]);
    close(fds[1]);
}
END_TEST

START_TEST(test_connector_timeout)
{
    int fds[2];
    auth_key_t key;
    double t0, elapsed;
    flx_status_t st;
    uint8_t wire[AUTH_HELLO_BYTES];

    make_pair(fds);
    auth_key_derive("silence", &key);
    t0 = flx_time_now();
    st = auth_connect(fds[0], &key, AUTH_PURPOSE_MESH, 1, 2, t0 + 0.5);
    elapsed = flx_time_now() - t0;
    ck_assert_int_eq(st, FLX_ERR_TIMED_OUT);
    ck_assert_msg(elapsed >= 0.45 && elapsed < AUTH_LATE_S, "timed out after %.3f s", elapsed);
    /* the HELLO was sent */
    ck_assert_int_eq(read_full(fds[1], wire, sizeof(wire), 1), AUTH_HELLO_BYTES);
    close(fds[0]);
    close(fds[1]);
}
END_TEST

START_TEST(test_acceptor_garbage)
{
    uint8_t garbage[AUTH_HELLO_BYTES];
    int fds[2];
    auth_key_t key;
    auth_hello_t hello;
    uint8_t extra[8];

    auth_key_derive("k", &key);
    for (int variant = 0; variant < 3; variant++) {
        make_pair(fds);
        if (variant == 0) {
            memset(garbage, 0xa5, sizeof(garbage));
        } else if (variant == 1) {
            randombytes_buf(garbage, sizeof(garbage));
            garbage[0] = 'X'; /* never the magic */
        } else {
            /* right magic, version 7 */
            auth_hello_t h = {.purpose = AUTH_PURPOSE_MESH, .rank = 0, .size = 2};
            auth_hello_encode(&h, garbage);
            garbage[5] = 7;
        }
        write_full(fds[0], garbage, sizeof(garbage));
        memset(&hello, 0xee, sizeof(hello));
        ck_assert_int_eq(auth_accept(fds[1], &key, flx_time_now() + 5, &hello),
                         FLX_ERR_PROTOCOL);
        ck_assert(hello_untouched(&hello));
        close(fds[1]);
        /* nothing was sent back */
        ck_assert_int_eq(read_full(fds[0], extra, sizeof(extra), 1), 0);
        close(fds[0]);
    }
}
END_TEST

/* a connector claiming rank >= size is refused by the acceptor; the
 * connector, cut off before any challenge (nothing about its secret was
 * judged), reports a lost peer */
START_TEST(test_handshake_bad_rank)
{
    int fds[2];
    peer_t acc, con;

    make_pair(fds);
    peer_init(&acc, 1, fds[1], "same", 5);
    peer_init(&con, 0, fds[0], "same", 5);
    con.rank = 8;
    con.size = 8;
    peer_start(&acc);
    peer_main(&con);
    ck_assert_int_eq(peer_join(&acc), FLX_ERR_PROTOCOL);
    ck_assert(hello_untouched(&acc.hello));
    ck_assert_int_eq(con.st, FLX_ERR_PEER_LOST);
}
END_TEST

START_TEST(test_peer_hangs_up)
{
    int fds[2];
    auth_key_t key;
    auth_hello_t hello;
    uint8_t wire[AUTH_HELLO_BYTES];

    auth_key_derive("k", &key);
    /* connector closes before sending anything */
    make_pair(fds);
    close(fds[0]);
    memset(&hello, 0xee, sizeof(hello));
    ck_assert_int_eq(auth_accept(fds[1], &key, flx_time_now() + 5, &hello), FLX_ERR_PEER_LOST);
    ck_assert(hello_untouched(&hello));
    close(fds[1]);

    /* acceptor closes after reading the HELLO, before its challenge: the
     * connector reports a lost peer, not a wrong secret */
    {
        peer_t con;

        make_pair(fds);
        peer_init(&con, 0, fds[0], "k", 5);
        peer_start(&con);
        ck_assert_int_eq(read_full(fds[1], wire, sizeof(wire), 5), AUTH_HELLO_BYTES);
        close(fds[1]);
        ck_assert_int_eq(peer_join(&con), FLX_ERR_PEER_LOST);
        ck_assert_msg(con.elapsed < AUTH_LATE_S, "connector failed after %.3f s", con.elapsed);
    }
}
END_TEST

/* ---- connections per pair and the open-file limit (boot_msg.c) ---------- */

START_TEST(test_fd_need)
{
    /* a member of 5 ranks with 10 open (its rendezvous connection among
     * them): 3 more for one connection per pair, 7 more for two */
    ck_assert_int_eq(boot_fd_need(3, 5, 1, 10), 10 + 3 + BOOT_FD_SPARE);
    ck_assert_int_eq(boot_fd_need(3, 5, 2, 10), 10 + 7 + BOOT_FD_SPARE);
    /* the root already holds all 4 of lane 1's */
    ck_assert_int_eq(boot_fd_need(0, 5, 1, 10), 10 + BOOT_FD_SPARE);
    ck_assert_int_eq(boot_fd_need(0, 5, 2, 10), 10 + 4 + BOOT_FD_SPARE);
    ck_assert_int_eq(boot_fd_need(0, 1, 2, 10), 10 + BOOT_FD_SPARE);
    /* 1000 ranks: two connections to 999 peers */
    ck_assert_int_eq(boot_fd_need(7, 1000, 2, 12), 12 + 1997 + BOOT_FD_SPARE);
    ck_assert_int_eq(boot_fd_fit(3, 5, 10, 10 + 7 + BOOT_FD_SPARE), 2);
    ck_assert_int_eq(boot_fd_fit(3, 5, 10, 10 + 6 + BOOT_FD_SPARE), 1);
    ck_assert_int_eq(boot_fd_fit(3, 5, 10, 10 + 3 + BOOT_FD_SPARE), 1);
    ck_assert_int_eq(boot_fd_fit(3, 5, 10, 10 + 2 + BOOT_FD_SPARE), 0);
    ck_assert_int_eq(boot_fd_fit(3, 5, 10, 1024), 2);
}
END_TEST

static void fds_set(boot_wire_fds_t *e, uint32_t want, uint32_t fit)
{
    e->want = htonl(want);
    e->fit = htonl(fit);
    e->limit = htonl(64);
    e->need = htonl(100);
}

/* the decision on all[0..3] with this rank's want: its status, the
 * connections per pair (0 on an error) and the rank it names (-1: none) */
#define DECIDE_EXPECT(mine, st_, lanes_, who_)                                    \
    do {                                                                          \
        int lanes, who;                                                           \
        ck_assert_int_eq(boot_fds_decide(all, 4, (mine), &lanes, &who), (st_));  \
        ck_assert_int_eq(lanes, (lanes_));                                        \
        ck_assert_int_eq(who, (who_));                                            \
    } while (0)

START_TEST(test_fds_decide)
{
    boot_wire_fds_t all[4];

    for (int r = 0; r < 4; r++)
        fds_set(&all[r], 0, 2);
    DECIDE_EXPECT(0, FLX_OK, 2, -1);
    /* auto: one rank that holds only one connection per pair takes everyone to one */
    fds_set(&all[2], 0, 1);
    fds_set(&all[3], 0, 1);
    DECIDE_EXPECT(0, FLX_OK, 1, 2);
    /* ... and one that holds none fails the job, naming it */
    fds_set(&all[3], 0, 0);
    DECIDE_EXPECT(0, FLX_ERR_SYSTEM, 0, 3);
    fds_set(&all[1], 0, 0);
    DECIDE_EXPECT(0, FLX_ERR_SYSTEM, 0, 1);
    /* explicit 2: a rank that holds only one fails the job */
    for (int r = 0; r < 4; r++)
        fds_set(&all[r], 2, 2);
    DECIDE_EXPECT(2, FLX_OK, 2, -1);
    fds_set(&all[1], 2, 1);
    DECIDE_EXPECT(2, FLX_ERR_SYSTEM, 0, 1);
    /* explicit 1 fits where one does */
    for (int r = 0; r < 4; r++)
        fds_set(&all[r], 1, 1);
    DECIDE_EXPECT(1, FLX_OK, 1, -1);
    /* wants differ: mismatch, naming the first that differs from mine */
    fds_set(&all[2], 2, 2);
    DECIDE_EXPECT(1, FLX_ERR_MISMATCH, 0, 2);
    DECIDE_EXPECT(2, FLX_ERR_MISMATCH, 0, 0);
    fds_set(&all[2], 0, 2); /* auto against explicit 1 */
    DECIDE_EXPECT(1, FLX_ERR_MISMATCH, 0, 2);
    /* out of range: a protocol error, before anything else */
    fds_set(&all[2], 3, 2);
    DECIDE_EXPECT(1, FLX_ERR_PROTOCOL, 0, 2);
    fds_set(&all[2], 1, 7);
    DECIDE_EXPECT(1, FLX_ERR_PROTOCOL, 0, 2);
}
END_TEST

/* ---- the root's address table (boot_msg.c) -------------------------------- */

static void table_set(boot_wire_addr_t *e, uint32_t ip, uint16_t port, uint8_t flags)
{
    memset(e, 0, sizeof(*e));
    e->family = 4;
    memcpy(e->ip, &(uint32_t){htonl(ip)}, 4);
    e->port = htons(port);
    e->flags = flags;
}

START_TEST(test_table_decode)
{
    boot_wire_addr_t t[3];
    sock_addr_t addrs[3], a6;
    int apart = -1;
    char s[SOCK_ADDR_STRLEN];

    /* the root's entry as FLX_ROOT: lane 1 to it is the rendezvous connection */
    table_set(&t[0], 0x7f000001, 29400, 0);
    table_set(&t[1], 0x0a090001, 41000, 0);
    table_set(&t[2], 0x0a090002, 41001, 0);
    ck_assert_int_eq(boot_table_decode(t, sizeof(t), 3, addrs, &apart), FLX_OK);
    ck_assert_int_eq(apart, 0);
    ck_assert_str_eq(sock_addr_str(&addrs[2], s, sizeof(s)), "10.9.0.2:41001");
    ck_assert_str_eq(sock_addr_str(&addrs[1], s, sizeof(s)), "10.9.0.1:41000");
    /* apart: the root's data address, connected to like the others' */
    table_set(&t[0], 0x0a090003, 42000, BOOT_ROOT_APART);
    ck_assert_int_eq(boot_table_decode(t, sizeof(t), 3, addrs, &apart), FLX_OK);
    ck_assert_int_eq(apart, 1);
    ck_assert_str_eq(sock_addr_str(&addrs[0], s, sizeof(s)), "10.9.0.3:42000");
    /* an IPv6 member (an address, scope and port round trip) */
    ck_assert_int_eq(sock_parse_addr("[fd00::5]:41002", &a6), FLX_OK);
    a6.in6.sin6_scope_id = 7;
    boot_addr_encode(&a6, &t[2]);
    ck_assert_int_eq(t[2].family, 6);
    ck_assert_int_eq(boot_table_decode(t, sizeof(t), 3, addrs, &apart), FLX_OK);
    ck_assert_int_eq(addrs[2].sa.sa_family, AF_INET6);
    ck_assert_int_eq(addrs[2].in6.sin6_scope_id, 7);
    ck_assert_int_eq(sock_addr_port(&addrs[2]), 41002);
    ck_assert_int_eq(memcmp(&addrs[2].in6.sin6_addr, &a6.in6.sin6_addr, 16), 0);
    /* refused, nothing written: apart without a port, an unknown flag, a
     * flag on a member's entry, a member without a port, an unknown family,
     * IPv4 with bytes past its 4, a short table */
    apart = -1;
    memset(addrs, 0xab, sizeof(addrs));
    table_set(&t[0], 0x0a090003, 0, BOOT_ROOT_APART);
    ck_assert_int_eq(boot_table_decode(t, sizeof(t), 3, addrs, &apart), FLX_ERR_PROTOCOL);
    table_set(&t[0], 0x0a090003, 42000, 2);
    ck_assert_int_eq(boot_table_decode(t, sizeof(t), 3, addrs, &apart), FLX_ERR_PROTOCOL);
    table_set(&t[0], 0x0a090003, 42000, BOOT_ROOT_APART);
    table_set(&t[1], 0x0a090001, 41000, BOOT_ROOT_APART);
    ck_assert_int_eq(boot_table_decode(t, sizeof(t), 3, addrs, &apart), FLX_ERR_PROTOCOL);
    table_set(&t[1], 0x0a090001, 0, 0);
    ck_assert_int_eq(boot_table_decode(t, sizeof(t), 3, addrs, &apart), FLX_ERR_PROTOCOL);
    table_set(&t[1], 0x0a090001, 41000, 0);
    t[1].family = 5;
    ck_assert_int_eq(boot_table_decode(t, sizeof(t), 3, addrs, &apart), FLX_ERR_PROTOCOL);
    table_set(&t[1], 0x0a090001, 41000, 0);
    t[1].ip[9] = 1;
    ck_assert_int_eq(boot_table_decode(t, sizeof(t), 3, addrs, &apart), FLX_ERR_PROTOCOL);
    table_set(&t[1], 0x0a090001, 41000, 0);
    ck_assert_int_eq(boot_table_decode(t, sizeof(t) - 1, 3, addrs, &apart), FLX_ERR_PROTOCOL);
    ck_assert_int_eq(apart, -1);
    for (size_t i = 0; i < sizeof(addrs); i++)
        ck_assert_uint_eq(((unsigned char *)addrs)[i], 0xab);
}
END_TEST

/* FLX_ROOT's forms: IPv4, [IPv6]; what is refused, and why */
START_TEST(test_parse_addr)
{
    sock_addr_t a;
    char s[SOCK_ADDR_STRLEN];

    ck_assert_int_eq(sock_parse_addr("127.0.0.1:29400", &a), FLX_OK);
    ck_assert_int_eq(a.sa.sa_family, AF_INET);
    ck_assert_str_eq(sock_addr_str(&a, s, sizeof(s)), "127.0.0.1:29400");
    ck_assert_int_eq(sock_parse_addr("[::1]:29401", &a), FLX_OK);
    ck_assert_int_eq(a.sa.sa_family, AF_INET6);
    ck_assert(sock_addr_is_loopback(&a));
    ck_assert_str_eq(sock_addr_str(&a, s, sizeof(s)), "[::1]:29401");
    ck_assert_int_eq(sock_parse_addr("[::]:5", &a), FLX_OK);
    ck_assert(sock_addr_is_any(&a));
    ck_assert_int_eq(sock_parse_addr("0.0.0.0:5", &a), FLX_OK);
    ck_assert(sock_addr_is_any(&a));
    ck_assert(!sock_addr_is_loopback(&a));
    ck_assert_int_eq(sock_parse_addr("127.0.1.1:5", &a), FLX_OK);
    ck_assert(sock_addr_is_loopback(&a));
    ck_assert_int_eq(sock_parse_addr("[::ffff:127.0.0.1]:5", &a), FLX_OK);
    ck_assert(sock_addr_is_loopback(&a));
    const char *bad[] = {"::1:29400", "[::1]", "[::1:29400", "[]:5", "[localhost]:5",
                         "127.0.0.1:+80", "127.0.0.1: 80", "127.0.0.1:0", "127.0.0.1:65536",
                         "127.0.0.1", ":5", "[::1]:x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(sock_parse_addr(bad[i], &a) == FLX_ERR_CONFIG, "%s accepted", bad[i]);
}
END_TEST

static Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");
    TCase *th = tcase_create("hello");
    TCase *tx = tcase_create("handshake");
    TCase *tf = tcase_create("fds");

    tcase_set_timeout(th, 30);
    tcase_add_test(th, test_hello_encode_layout);
    tcase_add_test(th, test_hello_roundtrip);
    tcase_add_test(th, test_hello_reject);
    tcase_add_test(th, test_key_derive);
    suite_add_tcase(s, th);

    tcase_set_timeout(tx, 30);
    tcase_add_test(tx, test_handshake_ok);
    tcase_add_test(tx, test_handshake_fresh_nonces);
    tcase_add_test(tx, test_handshake_wrong_secret);
    tcase_add_test(tx, test_acceptor_wire_protocol);
    tcase_add_test(tx, test_acceptor_rejects_bad_proof);
    tcase_add_test(tx, test_connector_rejects_bad_challenge);
    tcase_add_test(tx, test_acceptor_timeout);
    tcase_add_test(tx, test_connector_timeout);
    tcase_add_test(tx, test_acceptor_garbage);
    tcase_add_test(tx, test_handshake_bad_rank);
    tcase_add_test(tx, test_peer_hangs_up);
    suite_add_tcase(s, tx);

    tcase_set_timeout(tf, 30);
    tcase_add_test(tf, test_fd_need);
    tcase_add_test(tf, test_fds_decide);
    tcase_add_test(tf, test_table_decode);
    tcase_add_test(tf, test_parse_addr);
    suite_add_tcase(s, tf);
    return s;
}

int main(void)
{
    SRunner *sr;
    int failed;

    if (sodium_init() < 0) {
        fprintf(stderr, "check_auth: sodium_init failed\n");
        return EXIT_FAILURE;
    }
    sr = srunner_create(auth_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
