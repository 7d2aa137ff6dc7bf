/* fuzz_tcp_hdr.c -- libFuzzer harness for the tcp backend's wire format.
 *
 * Even first byte: one 40-byte header through tcp_hdr_decode, then
 * tcp_hdr_match against a receive described by the next bytes.
 * Odd first byte: the whole receive path of the tcp backend (tl_tcp_ops
 * over a socketpair, rank 0 of 2): the next bytes describe up to four
 * receives posted before the stream arrives and one posted after it; the
 * rest is the byte stream peer 1 "sent" (headers and payloads).  With
 * bit 7 of that first byte the pair has two connections (FLX_TCP_SOCKETS=2:
 * peer 1, the higher rank, may SWITCH between them) and the stream is cut
 * in two at a point bits 2-6 choose: the first part comes on the first
 * connection, the rest on the second.  Any out-of-bounds write into a
 * receive buffer or leak is a finding. */
#include "transport/tcp/hdr.h"
#include "transport/boot.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static flx_config_t fuzz_cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (flx_config_load(&fuzz_cfg) != FLX_OK)
        abort();
    fuzz_cfg.spin_s = 0;
    fuzz_cfg.timeout_s = 1.0;
    fuzz_cfg.tcp_notsent_lowat = 0; /* a TCP option: the unix pairs have none */
    return 0;
}

static void tag_from(const uint8_t *d, tl_tag_t *tag, size_t *len_p)
{
    memset(tag, 0, sizeof(*tag));
    tag->seq = d[0] & 7;
    tag->step = d[1] & 3;
    tag->kind = d[2] & 3;
    tag->dtype = d[3] & 3;
    tag->op = d[4] & 3;
    tag->count = d[5];
    *len_p = d[6];
}

static void fuzz_header(const uint8_t *d, size_t n)
{
    tcp_hdr_t h;
    tl_tag_t tag;
    size_t len;
    const char *why = NULL;
    int m;

    if (n < TCP_HDR_BYTES + 7)
        return;
    if (tcp_hdr_decode(d, TCP_HDR_BYTES, &h, &why) != FLX_OK) {
        if (why == NULL)
            abort();
        return;
    }
    if (h.magic != TCP_MAGIC || h.type < TCP_MSG_DATA || h.type > TCP_MSG_SWITCH)
        abort();
    tag_from(d + TCP_HDR_BYTES, &tag, &len);
    m = tcp_hdr_match(&h, &tag, len);
    if (m == FLX_OK && (h.seq != tag.seq || h.step != tag.step || h.len != len))
        abort();
}

#define FUZZ_RECVS 5

static void fuzz_stream(const uint8_t *d, size_t n)
{
    int sv[2], sv2[2] = {-1, -1}, fds[2], fds2[2] = {-1, -1};
    boot_t boot;
    tl_ctx_t *ctx;
    tl_req_t reqs[FUZZ_RECVS];
    uint8_t *bufs[FUZZ_RECVS] = {NULL};
    int posted[FUZZ_RECVS] = {0};
    int nrecv, lanes;
    unsigned cut;
    size_t off = 0, split;

    if (n < 1 + 7 * FUZZ_RECVS)
        return;
    nrecv = 1 + d[0] % (FUZZ_RECVS - 1);
    lanes = d[0] & 0x80 ? 2 : 1;
    cut = (d[0] >> 2) & 0x1f;
    d++;
    n--;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
        abort();
    if (lanes == 2 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv2) != 0)
        abort();
    fds[0] = -1;
    fds[1] = sv[0];
    fds2[1] = sv2[0];
    memset(&boot, 0, sizeof(boot));
    boot.rank = 0;
    boot.size = 2;
    boot.fds = fds;
    boot.fds2 = fds2;
    boot.lanes = lanes;
    if (tl_tcp_ops.create(&boot, &fuzz_cfg, &ctx) != FLX_OK)
        abort();
    for (int i = 0; i < FUZZ_RECVS; i++) {
        tl_tag_t tag;
        size_t len;
        tag_from(d + 7 * i, &tag, &len);
        bufs[i] = malloc(len ? len : 1);
        if (i < nrecv) {
            (void)tl_tcp_ops.irecv(ctx, 1, &tag, bufs[i], len, &reqs[i]);
            posted[i] = 1;
        }
    }
    d += 7 * FUZZ_RECVS;
    n -= 7 * FUZZ_RECVS;
    split = lanes == 2 ? n * cut / 31 : n;
    while (off < split) {
        ssize_t w = write(sv[1], d + off, split - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    for (off = split; off < n;) {
        ssize_t w = write(sv2[1], d + off, n - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    shutdown(sv[1], SHUT_WR);
    if (lanes == 2)
        shutdown(sv2[1], SHUT_WR);
    for (int round = 0; round < 8 && tl_tcp_ops.error(ctx) == FLX_OK; round++)
        (void)tl_tcp_ops.progress(ctx, 0);
    {   /* a receive posted after its message may have arrived */
        tl_tag_t tag;
        size_t len;
        tag_from(d - 7, &tag, &len);
        (void)tl_tcp_ops.irecv(ctx, 1, &tag, bufs[FUZZ_RECVS - 1], len, &reqs[FUZZ_RECVS - 1]);
        posted[FUZZ_RECVS - 1] = 1;
        for (int round = 0; round < 4 && tl_tcp_ops.error(ctx) == FLX_OK; round++)
            (void)tl_tcp_ops.progress(ctx, 0);
    }
    tl_tcp_ops.destroy(ctx); /* closes sv[0] and sv2[0] */
    close(sv[1]);
    if (lanes == 2)
        close(sv2[1]);
    for (int i = 0; i < FUZZ_RECVS; i++) {
        if (posted[i] && reqs[i].complete && reqs[i].status == FLX_OK &&
            reqs[i].done_bytes > reqs[i].len)
            abort(); /* more bytes than the receive asked for */
        free(bufs[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        fuzz_stream(data + 1, size - 1);
    else
        fuzz_header(data + 1, size - 1);
    return 0;
}
