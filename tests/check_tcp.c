/* check_tcp.c -- the tcp backend's sending and waiting, one process:
 * tl_tcp_ops over socketpairs standing in for the connections to peers.
 *
 * Writes: with a SOCK_SEQPACKET pair each sendmsg() call arrives as one
 * record, so the pieces a long message is written in (FLX_TCP_WRITE_MAX;
 * no segment size on a unix socket, so the limit itself) can be read back
 * one by one.  Spin: which busy-poll a progress round takes with receives
 * posted from peers near (may share our CPUs) and apart.  FLX_TCP_NOTSENT_LOWAT
 * on a loopback TCP pair, and its one warning where a socket refuses it. */
#include "transport/boot.h"
#include "transport/sock.h"
#include "transport/tcp/tcp.h"
#include "common/config.h"
#include "common/time.h"
#include "tests/mp.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

static flx_config_t base_cfg(void)
{
    flx_config_t cfg;

    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    cfg.timeout_s = 1.0;
    cfg.tcp_sockets = 1;
    cfg.tcp_sockbuf = 0; /* not the environment's: the records below must fit */
    cfg.tcp_notsent_lowat = 0; /* a TCP option: the unix pairs below have none */
    return cfg;
}

/* rank 0 of size ranks; peer p's connection is fds[p] (our end) */
static tl_ctx_t *make_ctx(const flx_config_t *cfg, int size, int *fds, unsigned char *near,
                          int local_size, int local_cpus)
{
    int fds2[8];
    boot_t boot;
    tl_ctx_t *ctx = NULL;

    ck_assert_int_le(size, 8);
    for (int p = 0; p < size; p++)
        fds2[p] = -1;
    memset(&boot, 0, sizeof(boot));
    boot.rank = 0;
    boot.size = size;
    boot.fds = fds;
    boot.fds2 = fds2;
    boot.lanes = 1;
    boot.near = near;
    boot.local_size = local_size;
    boot.local_cpus = local_cpus;
    boot.cfg = *cfg;
    ck_assert_int_eq(tl_tcp_ops.create(&boot, cfg, &ctx), FLX_OK);
    return ctx;
}

/* Sends a message of len bytes to rank 1 with FLX_TCP_WRITE_MAX write_max
 * and reads back the records rank 1's end got without a progress call
 * after the isend (so every piece that fitted was written at once, one
 * call after the other); at most max of them, their sizes in rec[]. */
static int send_pieces(size_t write_max, size_t len, size_t *rec, int max)
{
    flx_config_t cfg = base_cfg();
    int sv[2], fds[2], n = 0;
    tl_ctx_t *ctx;
    tl_req_t req;
    tl_tag_t tag;
    char *buf = malloc(len), *in = malloc(len + 4096);
    ssize_t r;

    ck_assert_ptr_nonnull(buf);
    ck_assert_ptr_nonnull(in);
    memset(buf, 0x5a, len);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, sv), 0);
    {   /* room for the whole message at once: a record is at most the
         * send buffer (net.core.wmem_default, often 208 KiB) */
        int sb = 512 << 10, got = 0;
        socklen_t sl = sizeof(got);
        ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb)), 0);
        ck_assert_int_eq(getsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &got, &sl), 0);
        ck_assert_msg((size_t)got > 2 * (len + 4096), "send buffer %d for %zu bytes", got, len);
    }
    cfg.tcp_write_max = write_max;
    fds[0] = -1;
    fds[1] = sv[0];
    ctx = make_ctx(&cfg, 2, fds, NULL, 2, 0);
    memset(&tag, 0, sizeof(tag));
    tag.seq = 1;
    tag.count = len;
    ck_assert_int_eq(tl_tcp_ops.isend(ctx, 1, &tag, buf, len, &req), FLX_OK);
    while (n < max && (r = recv(sv[1], in, len + 4096, MSG_DONTWAIT)) > 0)
        rec[n++] = (size_t)r;
    ck_assert_msg(req.complete && req.status == FLX_OK, "the send did not finish at once");
    close(sv[1]); /* the peer leaves: destroy does not wait for it */
    tl_tcp_ops.destroy(ctx);
    free(buf);
    free(in);
    return n;
}

/* A 100000-byte message (100048 with its header) with a 40000-byte limit:
 * three writes, 40000, 40000, 20048, all at once; without a limit, or one
 * the message fits in, one write. */
START_TEST(test_write_pieces)
{
    size_t rec[8];
    int n;

    n = send_pieces(40000, 100000, rec, 8);
    ck_assert_int_eq(n, 3);
    ck_assert_uint_eq(rec[0], 40000);
    ck_assert_uint_eq(rec[1], 40000);
    ck_assert_uint_eq(rec[2], 20048);
    n = send_pieces(0, 100000, rec, 8);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(rec[0], 100048);
    n = send_pieces(100048, 100000, rec, 8);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(rec[0], 100048);
    n = send_pieces(100047, 100000, rec, 8); /* one byte over: a second write */
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(rec[0], 100047);
    ck_assert_uint_eq(rec[1], 1);
    n = send_pieces(40000, 10, rec, 8); /* short: header and payload together */
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(rec[0], 58);
}
END_TEST

/* Rank 0 of 3 with peers' connections over two socketpairs; near NULL:
 * not known; end_three closes it all. */
static tl_ctx_t *three(const flx_config_t *cfg, unsigned char *near, int local_cpus, int a[2],
                       int b[2])
{
    int fds[3];

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, a), 0);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, b), 0);
    fds[0] = -1;
    fds[1] = a[0];
    fds[2] = b[0];
    return make_ctx(cfg, 3, fds, near, 3, local_cpus);
}

static void end_three(tl_ctx_t *ctx, const int a[2], const int b[2])
{
    close(a[1]); /* the peers leave: destroy does not wait for them */
    close(b[1]);
    tl_tcp_ops.destroy(ctx);
}

/* Rank 0 of 3, its ranks outnumbering the cores (FLX_SPIN_SHARED 50 us,
 * FLX_SPIN 2 ms): rank 1 apart, rank 2 near.  Nothing awaited, or a
 * receive from rank 2: the short spin; from rank 1 only: the long one;
 * from both, or a send queued to rank 2: the short one.  Not known which
 * are apart: the short one.
 * Ranks no more than the cores: FLX_SPIN whatever is awaited. */
START_TEST(test_wait_spin)
{
    flx_config_t cfg = base_cfg();
    unsigned char near[3] = {1, 0, 1};
    int a[2], b[2];
    tl_ctx_t *ctx;
    tl_req_t r1, r2;
    tl_tag_t tag;
    char x[16], y[16];

    cfg.spin_s = 2e-3;
    cfg.spin_shared_s = 50e-6;
    memset(&tag, 0, sizeof(tag));
    tag.seq = 1;
    tag.count = sizeof(x);

    ctx = three(&cfg, near, 1, a, b);
    ck_assert(tcp_wait_spin(ctx) == 50e-6);
    ck_assert_int_eq(tl_tcp_ops.irecv(ctx, 1, &tag, x, sizeof(x), &r1), FLX_OK);
    ck_assert(tcp_wait_spin(ctx) == 2e-3);
    ck_assert_int_eq(tl_tcp_ops.irecv(ctx, 2, &tag, y, sizeof(y), &r2), FLX_OK);
    ck_assert(tcp_wait_spin(ctx) == 50e-6);
    end_three(ctx, a, b);

    /* a send queued to rank 2 (near; more than its socket takes) counts
     * as awaited too */
    ctx = three(&cfg, near, 1, a, b);
    ck_assert_int_eq(tl_tcp_ops.irecv(ctx, 1, &tag, x, sizeof(x), &r1), FLX_OK);
    ck_assert(tcp_wait_spin(ctx) == 2e-3);
    {
        const size_t big = 16 << 20;
        char *m = calloc(1, big);
        tl_req_t s2;
        tl_tag_t t2 = tag;
        ck_assert_ptr_nonnull(m);
        t2.count = big;
        ck_assert_int_eq(tl_tcp_ops.isend(ctx, 2, &t2, m, big, &s2), FLX_OK);
        ck_assert_msg(!s2.complete, "16 MiB fitted a unix socket's buffer");
        ck_assert(tcp_wait_spin(ctx) == 50e-6);
        end_three(ctx, a, b);
        free(m);
    }

    ctx = three(&cfg, NULL, 1, a, b);
    ck_assert_int_eq(tl_tcp_ops.irecv(ctx, 1, &tag, x, sizeof(x), &r1), FLX_OK);
    ck_assert(tcp_wait_spin(ctx) == 50e-6);
    end_three(ctx, a, b);

    ctx = three(&cfg, near, 4, a, b);
    ck_assert(tcp_wait_spin(ctx) == 2e-3);
    ck_assert_int_eq(tl_tcp_ops.irecv(ctx, 2, &tag, y, sizeof(y), &r2), FLX_OK);
    ck_assert(tcp_wait_spin(ctx) == 2e-3);
    end_three(ctx, a, b);
}
END_TEST

/* FLX_TCP_NOTSENT_LOWAT's socket option (sock_set_notsent_lowat): set and
 * read back on a TCP socket, capped at 1 GiB, 0 leaving the kernel's;
 * refused on a socket that is not TCP. */
START_TEST(test_notsent_lowat)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), fd0 = socket(AF_INET, SOCK_STREAM, 0);
    int sp[2], v = 0, kernel = 0;
    socklen_t len = sizeof(v);

    ck_assert(fd >= 0 && fd0 >= 0);
    ck_assert_int_eq(getsockopt(fd0, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &kernel, &len), 0);
    ck_assert_int_eq(sock_set_notsent_lowat(fd0, 0), 0);
    len = sizeof(v);
    ck_assert_int_eq(getsockopt(fd0, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &len), 0);
    ck_assert_int_eq(v, kernel);
    ck_assert_int_eq(sock_set_notsent_lowat(fd, 16384), 0);
    len = sizeof(v);
    ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &len), 0);
    ck_assert_int_eq(v, 16384);
    ck_assert_int_eq(sock_set_notsent_lowat(fd, (size_t)3 << 30), 0);
    len = sizeof(v);
    ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &len), 0);
    ck_assert_int_eq(v, 1 << 30);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
    ck_assert_int_eq(sock_set_notsent_lowat(sp[0], 16384), -1);
    close(sp[0]);
    close(sp[1]);
    close(fd);
    close(fd0);
}
END_TEST

/* A socket that refuses TCP_NOTSENT_LOWAT (not TCP): the context still
 * works without it, with one warning line for all its connections. */
START_TEST(test_lowat_refused)
{
    flx_config_t cfg = base_cfg();
    char path[] = "/tmp/check_tcp.XXXXXX";
    int a[2], b[2], saved;
    tl_ctx_t *ctx;

    cfg.tcp_notsent_lowat = 16384;
    saved = mp_capture_start(path);
    ctx = three(&cfg, NULL, 0, a, b);
    ck_assert_int_eq(mp_capture_stop(saved, path, "TCP_NOTSENT_LOWAT 16384 refused"), 1);
    end_three(ctx, a, b);
}
END_TEST

/* A connected loopback TCP pair, made as the bootstrap makes its
 * connections (non-blocking, TCP_NODELAY): *ours and *theirs */
static void tcp_pair(int *ours, int *theirs)
{
    sock_addr_t lo = {.in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)}};
    sock_addr_t bound;
    double deadline = flx_time_now() + 5.0;
    int l;

    ck_assert_int_eq(sock_listen(&lo, 1, &l, &bound), FLX_OK);
    ck_assert_int_eq(sock_connect(&bound, deadline, ours), FLX_OK);
    ck_assert_int_eq(sock_accept(l, deadline, theirs, NULL), FLX_OK);
    close(l);
}

static int lowat_of(int fd)
{
    int v = -1;
    socklen_t len = sizeof(v);

    ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &len), 0);
    return v;
}

/* The backend sets FLX_TCP_NOTSENT_LOWAT on a peer's TCP connection when
 * the context is created (0: leaves the kernel's), and a failing rank has
 * the kernel's back after failing (tcp_fail_at resets it before its one
 * non-blocking write of the failure notice; on an empty socket the order
 * does not show) and the peer reads the notice. */
START_TEST(test_create_lowat)
{
    size_t vals[] = { 16384, 1, 0 };

    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        flx_config_t cfg = base_cfg();
        int ours, theirs, fds[2], kernel;
        tl_ctx_t *ctx;
        tcp_hdr_t h;

        tcp_pair(&ours, &theirs);
        kernel = lowat_of(ours);
        cfg.tcp_notsent_lowat = vals[i];
        fds[0] = -1;
        fds[1] = ours;
        ctx = make_ctx(&cfg, 2, fds, NULL, 2, 0);
        ck_assert_int_eq(lowat_of(ours), vals[i] ? (int)vals[i] : kernel);
        (tl_tcp_ops.fail)(ctx, FLX_ERR_ABORTED, 1, "check_tcp"); /* () : check.h defines fail() */
        ck_assert_int_eq(lowat_of(ours), kernel);
        /* within 5 s: a notice that never comes fails the check, not hangs it */
        ck_assert_int_eq(sock_recv_all(theirs, &h, sizeof(h), flx_time_now() + 5.0), FLX_OK);
        ck_assert_uint_eq(h.type, TCP_MSG_ERROR);
        ck_assert_int_eq(h.status, FLX_ERR_ABORTED);
        ck_assert_uint_eq(h.seq, 1);
        close(theirs);
        tl_tcp_ops.destroy(ctx);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tcp");
    TCase *tc = tcase_create("backend");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_write_pieces);
    tcase_add_test(tc, test_wait_spin);
    tcase_add_test(tc, test_notsent_lowat);
    tcase_add_test(tc, test_create_lowat);
    tcase_add_test(tc, test_lowat_refused);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
