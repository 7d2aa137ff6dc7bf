/* fuzz_boot.c -- libFuzzer harness for the bootstrap's wire messages: the
 * HELLO decoder and checks (rendezvous and mesh), the rendezvous data
 * addresses and the root's address table, and both sides of the
 * challenge-response handshake run over a socketpair whose far end
 * delivers the input.  Production code only (auth.c, boot_msg.c, sock.c).
 *
 * The first byte picks the message:
 *   0  HELLO (48 bytes) + rank, size, taken ranks -> auth_hello_decode, boot_hello_check
 *   1  one data address (8 bytes)                  -> boot_addr_decode
 *   2  size byte + address table                   -> boot_table_decode
 *   3  what a connector sends                      -> auth_accept
 *   4  what an acceptor answers                    -> auth_connect
 *   5  size, own want + entries (16 bytes each)    -> boot_fds_decide */
#include "transport/auth.h"
#include "transport/boot_msg.h"
#include "common/time.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static auth_key_t fuzz_key;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (sodium_init() < 0)
        abort();
    auth_key_derive("fuzz secret", &fuzz_key);
    return 0;
}

static void fuzz_hello(const uint8_t *d, size_t n)
{
    uint8_t wire[AUTH_HELLO_BYTES];
    auth_hello_t hello;
    int fds[16];
    const char *why = NULL;
    int rank, size;
    uint16_t purpose;

    if (n < AUTH_HELLO_BYTES + 4)
        return;
    memcpy(wire, d, sizeof(wire));
    if (auth_hello_decode(wire, &hello) != FLX_OK)
        return;
    if (hello.rank < 0 || hello.rank >= hello.size || hello.size < 1)
        abort(); /* the decoder let an impossible HELLO through */
    d += AUTH_HELLO_BYTES;
    size = 1 + d[0] % 16;
    rank = d[1] % size;
    for (int r = 0; r < size; r++)
        fds[r] = (d[2] >> (r % 8)) & 1 ? 3 : -1;
    fds[rank] = -1;
    purpose = d[3] % 3 == 0 ? AUTH_PURPOSE_BOOT : d[3] % 3 == 1 ? AUTH_PURPOSE_MESH
                                                               : AUTH_PURPOSE_MESH2;
    if (boot_hello_check(&hello, purpose, rank, size, fds, &why) == FLX_OK) {
        if (hello.rank == rank || hello.rank >= size || fds[hello.rank] >= 0 ||
            hello.purpose != purpose || (purpose != AUTH_PURPOSE_BOOT && hello.rank < rank))
            abort(); /* accepted a HELLO the bootstrap must refuse */
    } else if (why == NULL) {
        abort();
    }
}

static void fuzz_table(const uint8_t *d, size_t n)
{
    sock_addr_t addrs[64];
    int size, apart = -1;

    if (n < 1)
        return;
    size = d[0] % 65;
    if (boot_table_decode(d + 1, n - 1, size, addrs, &apart) == FLX_OK) {
        if (apart != 0 && apart != 1)
            abort();
        for (int r = apart ? 0 : 1; r < size; r++)
            if (sock_addr_port(&addrs[r]) == 0)
                abort();
    } else if (apart != -1) {
        abort();
    }
}

/* Run one side of the handshake on fds[0]; the input arrives on it. */
static void fuzz_handshake(const uint8_t *d, size_t n, int acceptor)
{
    int sv[2];
    auth_hello_t hello;
    size_t off = 0;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
        abort();
    while (off < n) {
        ssize_t w = write(sv[1], d + off, n - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    shutdown(sv[1], SHUT_WR);
    if (acceptor)
        (void)auth_accept(sv[0], &fuzz_key, flx_time_now() + 1.0, &hello);
    else
        (void)auth_connect(sv[0], &fuzz_key, AUTH_PURPOSE_MESH, 1, 4, flx_time_now() + 1.0);
    close(sv[0]);
    close(sv[1]);
}

/* The connection-count decision on any entries: what it returns must
 * follow from them. */
static void fuzz_fds(const uint8_t *d, size_t n)
{
    boot_wire_fds_t all[16];
    int size, mine, lanes, who;
    flx_status_t st;

    if (n < 2)
        return;
    size = 1 + d[0] % 16;
    mine = d[1] % 3;
    if (n - 2 < (size_t)size * sizeof(all[0]))
        return;
    memcpy(all, d + 2, (size_t)size * sizeof(all[0]));
    st = boot_fds_decide(all, size, mine, &lanes, &who);
    if (st == FLX_OK) {
        if (lanes < 1 || lanes > 2 || (mine != 0 && lanes != mine) || who >= size)
            abort();
        for (int r = 0; r < size; r++)
            if ((int)ntohl(all[r].want) != mine || (int)ntohl(all[r].fit) < lanes)
                abort();
        if (who >= 0 && (mine != 0 || lanes != 1 || ntohl(all[who].fit) != 1))
            abort();
        if (mine == 0 && (lanes == 1) != (who >= 0)) /* auto: one exactly when a rank fell */
            abort();
        return;
    }
    if (who < 0 || who >= size)
        abort();
    if (st == FLX_ERR_PROTOCOL ? ntohl(all[who].want) <= 2 && ntohl(all[who].fit) <= 2
        : st == FLX_ERR_MISMATCH ? (int)ntohl(all[who].want) == mine
        : st == FLX_ERR_SYSTEM ? (int)ntohl(all[who].fit) >= (mine ? mine : 1)
                               : 1)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sock_addr_t addr;

    if (size < 1)
        return 0;
    switch (data[0] % 6) {
    case 0: fuzz_hello(data + 1, size - 1); break;
    case 1:
        if (boot_addr_decode(data + 1, size - 1, &addr) == FLX_OK && sock_addr_port(&addr) == 0)
            abort();
        break;
    case 2: fuzz_table(data + 1, size - 1); break;
    case 3: fuzz_handshake(data + 1, size - 1, 1); break;
    case 4: fuzz_handshake(data + 1, size - 1, 0); break;
    case 5: fuzz_fds(data + 1, size - 1); break;
    }
    return 0;
}
