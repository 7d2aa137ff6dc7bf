/* flx-info -- what this flexcoll build can do: version, features, transports,
 * network devices, (-c) every FLX_* knob with its value and help, and
 * (--calibrate, as the ranks of a job) alpha and beta of every link. */
#include "flexcoll.h"
#include "common/config.h"
#include "common/copy.h"
#include "common/stall.h"
#include "tools/cpumap.h"
#ifdef FLX_HAVE_VERBS
#include "transport/ib/ib.h"
#endif

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: flx-info [-c] [--calibrate] [--version] [-h]\n"
                 "  (no option)  version, build features, transports, network devices\n"
                 "  -c           every FLX_* configuration knob: value, default and help\n"
                 "  --calibrate  run as the ranks of a job (flxrun -n N flx-info --calibrate):\n"
                 "               measure alpha and beta of every link, print the matrix and\n"
                 "               the model the collectives choose algorithms with\n"
                 "  --version    print the version and exit\n");
}

static void print_devices(void)
{
    struct ifaddrs *ifs, *it;

    printf("# network interfaces (tcp backend; FLX_SOCKET_IFNAME picks one)\n");
    if (getifaddrs(&ifs) != 0) {
        perror("getifaddrs");
        return;
    }
    /* IPv4 first: it is what FLX_SOCKET_IFNAME takes where an interface has both */
    for (int pass = 0; pass < 2; pass++) {
        int family = pass == 0 ? AF_INET : AF_INET6;
        for (it = ifs; it; it = it->ifa_next) {
            char ip[INET6_ADDRSTRLEN];
            const void *a;
            if (it->ifa_addr == NULL || it->ifa_addr->sa_family != family)
                continue;
            a = family == AF_INET ? (const void *)&((struct sockaddr_in *)it->ifa_addr)->sin_addr
                                  : (const void *)&((struct sockaddr_in6 *)it->ifa_addr)->sin6_addr;
            inet_ntop(family, a, ip, sizeof(ip));
            printf("  %-12s %-26s %s\n", it->ifa_name, ip, (it->ifa_flags & IFF_UP) ? "up" : "down");
        }
    }
    freeifaddrs(ifs);
}

/* every rank measures its links; rank 0 prints the matrices */
static int calibrate(void)
{
    flx_comm_h comm;
    flx_link_model_t *mine, model;
    double *row, *all;
    flx_status_t st;
    int n, rank, rc = 1;

    st = flx_comm_create(NULL, &comm);
    if (st != FLX_OK) {
        fprintf(stderr, "flx-info: --calibrate: flx_comm_create: %s (run it as the ranks of a job: "
                "flxrun -n N flx-info --calibrate)\n", flx_status_string(st));
        return 1;
    }
    n = flx_comm_size(comm);
    rank = flx_comm_rank(comm);
    if (n < 2) {
        fprintf(stderr, "flx-info: --calibrate: a job of one rank has no links to measure; run "
                "it as the ranks of a job: flxrun -n N flx-info --calibrate\n");
        flx_comm_destroy(comm);
        return 1;
    }
    mine = calloc((size_t)n, sizeof(*mine));
    row = calloc(2 * (size_t)n, sizeof(double));
    all = calloc(2 * (size_t)n * (size_t)n, sizeof(double));
    if (mine == NULL || row == NULL || all == NULL) {
        fprintf(stderr, "flx-info: rank %d: out of memory\n", rank);
        goto out; /* the others fail on the calibration with this rank gone */
    }
    st = flx_comm_calibrate(comm, mine);
    for (int j = 0; j < n; j++) {
        row[2 * j] = mine[j].alpha_s;
        row[2 * j + 1] = mine[j].beta_bytes_per_s;
    }
    if (st == FLX_OK)
        st = flx_allgather(comm, row, all, 2 * (size_t)n, FLX_FLOAT64, FLX_ALGO_AUTO);
    if (st == FLX_OK)
        st = flx_comm_link_model(comm, &model);
    if (st != FLX_OK) {
        fprintf(stderr, "flx-info: rank %d: calibration: %s\n", rank, flx_status_string(st));
        goto out;
    }
    if (rank == 0) {
        printf("# links of %d ranks over %s, measured by rank i (row) with rank j (column)\n", n,
               flx_comm_net_name(comm));
        for (int k = 0; k < 2; k++) {
            printf("# %s\n%6s", k ? "beta (GB/s)" : "alpha (us, one way)", "i\\j");
            for (int j = 0; j < n; j++)
                printf(" %8d", j);
            printf("\n");
            for (int i = 0; i < n; i++) {
                printf("%6d", i);
                for (int j = 0; j < n; j++)
                    if (i == j)
                        printf(" %8s", "-");
                    else
                        printf(" %8.3f", all[(size_t)i * 2 * n + 2 * j + k] * (k ? 1e-9 : 1e6));
                printf("\n");
            }
        }
        printf("model: alpha %.3f us, beta %.4f GB/s (the worst link; refreshed from live "
               "timings every FLX_MODEL_REFRESH collectives)\n", model.alpha_s * 1e6,
               model.beta_bytes_per_s * 1e-9);
    }
    {
        /* each allreduce algorithm's fitted model, and what auto picks */
        static const size_t sizes[] = {8, 4096, 65536, 1 << 20, 16 << 20};
        double pred[(sizeof(sizes) / sizeof(sizes[0]))][FLX_ALGO_COUNT];

        for (size_t k = 0; k < (sizeof(sizes) / sizeof(sizes[0])); k++)
            for (int a = 0; a < FLX_ALGO_COUNT; a++)
                pred[k][a] = flx_allreduce_predict(comm, sizes[k] / 4, FLX_FLOAT32, (flx_algo_t)a);
        if (rank == 0) {
            printf("# allreduce, predicted us (each algorithm's own fitted alpha and beta; "
                   "rd on 2 ranks: beta no higher than the ring's)\n");
            printf("%10s %10s %10s %10s %10s %6s\n", "bytes", "ring", "tree", "rd", "hd", "auto");
            for (size_t k = 0; k < (sizeof(sizes) / sizeof(sizes[0])); k++)
                printf("%10zu %10.1f %10.1f %10.1f %10.1f %6s\n", sizes[k], pred[k][1] * 1e6,
                       pred[k][2] * 1e6, pred[k][3] * 1e6, pred[k][4] * 1e6,
                       flx_algo_name(flx_allreduce_algo(comm, sizes[k] / 4, FLX_FLOAT32)));
        }
        /* the same for the allgather: about as many bytes gathered in all,
         * a whole number of floats per rank */
        size_t per[(sizeof(sizes) / sizeof(sizes[0]))];

        for (size_t k = 0; k < (sizeof(sizes) / sizeof(sizes[0])); k++) {
            per[k] = sizes[k] / 4 / (size_t)n ? sizes[k] / 4 / (size_t)n : 1;
            for (int a = 0; a < 2; a++)
                pred[k][a] = flx_allgather_predict(comm, per[k], FLX_FLOAT32,
                                                   a ? FLX_ALGO_RD : FLX_ALGO_RING);
        }
        if (rank == 0) {
            printf("# allgather, predicted us (bytes gathered in all; each algorithm's own "
                   "fit; rd: recursive doubling, Bruck where N is not a power of two)\n");
            printf("%10s %10s %10s %6s\n", "bytes", "ring", "rd", "auto");
            for (size_t k = 0; k < (sizeof(sizes) / sizeof(sizes[0])); k++)
                printf("%10zu %10.1f %10.1f %6s\n", per[k] * 4 * (size_t)n, pred[k][0] * 1e6,
                       pred[k][1] * 1e6,
                       flx_algo_name(flx_allgather_algo(comm, per[k], FLX_FLOAT32)));
        }
    }
    rc = 0;
out:
    free(mine);
    free(row);
    free(all);
    st = flx_comm_destroy(comm);
    return rc || st != FLX_OK;
}

/* The CPUs this process may use, as flxrun --bind core places ranks on them. */
static void print_cpus(void)
{
    cpu_set_t allowed;
    cpumap_t *map = malloc(sizeof(*map));
    char list[1024], topo[160];

    if (map == NULL || sched_getaffinity(0, sizeof(allowed), &allowed) < 0) {
        printf("# cpus: unknown (%s)\n", map == NULL ? "out of memory" : "sched_getaffinity failed");
        free(map);
        return;
    }
    cpumap_read(map, &allowed, CPUMAP_SYSFS);
    printf("# cpus: %s: %s; flxrun binds each rank to whole cores while ranks <= cores, else "
           "to threads of one core, up to one rank a CPU, and beyond that, where the cores divide "
           "the ranks, rank i to core i mod cores, shared (--report-bindings shows where)\n",
           cpumap_list(&allowed, list, sizeof(list)), cpumap_describe(map, topo, sizeof(topo)));
    free(map);
}

/* bytes as "16 KiB", or "200000 bytes" where not whole KiB */
static const char *size_words(size_t bytes, char *buf, size_t len)
{
    if (bytes % 1024)
        snprintf(buf, len, "%zu bytes", bytes);
    else
        snprintf(buf, len, "%zu KiB", bytes >> 10);
    return buf;
}

static int info_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"calibrate", no_argument, 0, 'C'},
                                             {"help", no_argument, 0, 'h'},
                                             {"version", no_argument, 0, 'V'}, {0, 0, 0, 0}};
    flx_config_t cfg;
    flx_ctl_opts_t ctl;
    int show_config = 0, do_calibrate = 0, opt;
    char words[32];

    opterr = 0; /* bad usage is one line, ours */
    while ((opt = getopt_long(argc, argv, "ch", longopts, NULL)) != -1) {
        switch (opt) {
        case 'C': do_calibrate = 1; break;
        case 'c': show_config = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("flexcoll %s\n", flx_version_string()); return 0;
        default:
            fprintf(stderr, "flx-info: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc || (do_calibrate && show_config)) {
        if (optind < argc)
            fprintf(stderr, "flx-info: unexpected argument '%s' (see --help)\n", argv[optind]);
        else
            fprintf(stderr, "flx-info: -c and --calibrate are separate runs (see --help)\n");
        return 2;
    }
    if (do_calibrate)
        return calibrate();
    if (flx_config_load(&cfg) != FLX_OK) {
        fprintf(stderr, "flx-info: the environment holds a malformed FLX_* value (see above)\n");
        return 1;
    }
    if (show_config) {
        flx_config_print(stdout, &cfg);
        return 0;
    }
    printf("# flexcoll %s\n", flx_version_string());
    printf("# build features: %s\n", flx_build_features());
    printf("# transports: tcp (%s, FLX_TCP_SOCKETS%s)%s\n",
           cfg.tcp_sockets == 0 ? "2 connections per pair of ranks, 1 where a rank's open-file "
                                  "limit holds only 1"
           : cfg.tcp_sockets == 1 ? "1 connection per pair of ranks"
                                  : "2 connections per pair of ranks",
           cfg.tcp_sockets == 1 ? ""
           : cfg.tcp_lane == FLX_TCP_LANE_SPLIT
               ? "; the higher rank's long messages on the second, FLX_TCP_LANE=split"
           : cfg.tcp_lane == FLX_TCP_LANE_SHARED
               ? "; the higher rank's long messages on the first, FLX_TCP_LANE=shared"
               : "; the higher rank's long messages on the faster of the two, measured per pair "
                 "while running, FLX_TCP_LANE=auto",
           strstr(flx_build_features(), "verbs") ? ", ib" : "");
    printf("# tcp waiting: busy-polls %.0f us (FLX_SPIN; at most %.0f us, FLX_SPIN_SHARED, where the "
           "job's ranks outnumber their CPUs, unless every rank awaited runs on CPUs apart from "
           "this rank's: another machine, or CPUs its affinity excludes) before sleeping in poll(); with "
           "a short message (under 64 KiB) awaited from one peer only and nothing to write, it "
           "spins on recv() alone\n", cfg.spin_s * 1e6, cfg.spin_shared_s * 1e6);
    if (cfg.tcp_write_max == 0)
        printf("# tcp writes: a long message in sendmsg() calls of as much as the socket takes "
               "(FLX_TCP_WRITE_MAX=0)\n");
    else
        printf("# tcp writes: a long message in sendmsg() calls of at most %s "
               "(FLX_TCP_WRITE_MAX), rounded down to whole segments of its connection (at least "
               "one), so that no write but its last ends in a short segment\n",
               size_words(cfg.tcp_write_max, words, sizeof(words)));
    if (cfg.tcp_notsent_lowat == 0)
        printf("# tcp unsent data: as much as the socket buffer holds (FLX_TCP_NOTSENT_LOWAT=0, the "
               "kernel's net.ipv4.tcp_notsent_lowat)\n");
    else
        printf("# tcp unsent data: a socket takes more of a message only while under %s of "
               "what it holds is not yet sent (FLX_TCP_NOTSENT_LOWAT)\n",
               size_words(cfg.tcp_notsent_lowat, words, sizeof(words)));
    printf("# collectives: allreduce (ring, tree, rd, hd), allgather (ring, rd/Bruck), broadcast "
           "(binomial, chain), reduce_scatter (ring; small on 4+ ranks: an allreduce, rd/tree/hd, "
           "where recursive doubling's fitted alpha and beta say so), barrier (dissemination)\n");
    printf("# out-of-place reduce_scatter: the input is read in place, never copied; this "
           "rank's block is received and reduced straight into the output\n");
    printf("# out-of-place allgather: each chunk of this rank's block is copied into place "
           "right behind its send (ring; rd's first step; Bruck: in its final rotation)");
    if (flx_copy_stream_min() == SIZE_MAX)
        printf(" (memcpy: this CPU has no AVX streaming stores)\n");
    else
        printf(", with streaming stores when the block is over %zu KiB (this core's L2 cache)\n",
               flx_copy_stream_min() / 1024);
    printf("# dtypes: float double half bfloat16 int32 int64; ops: sum prod min max avg\n");
    printf("# compression (flx_gsync_*): ");
    for (int m = 0; m < FLX_COMPRESS_COUNT; m++)
        printf("%s%s", m ? " " : "", flx_compress_name((flx_compress_t)m));
    printf("; top-k collectives: artopk allgather auto\n");
    flx_ctl_opts_default(&ctl);
    printf("# controller (flx_ctl_*): modes %s %s %s; flx-train policies: dense topk-ag artopk "
           "powersgd accordion gravac selsync flex\n",
           flx_ctl_mode_name(FLX_CTL_FLEX), flx_ctl_mode_name(FLX_CTL_ACCORDION),
           flx_ctl_mode_name(FLX_CTL_GRAVAC));
    printf("# controller learning: a rank stopped (Ctrl-Z, SIGSTOP) for over %g s, as a "
           "thread per rank sees it: inside a sync, that sync's times are not learnt; "
           "between two syncs (computing), neither the compute times nor the next sync's "
           "are\n", FLX_STALL_S);
    printf("# flex defaults: weight %g, gain floor %g, eta %g every %d steps, kept fractions",
           ctl.weight, ctl.min_gain, ctl.eta, ctl.interval);
    for (int f = 0; f < ctl.nfractions; f++)
        printf(" %g", ctl.fractions[f]);
    printf("\n");
    printf("# flx-train --policy flex: local steps, SelSync's test picks the steps that sync and "
           "the controller syncs the drift since the last sync (--local-steps off: every "
           "step's gradient); the test's delta shrinks as the rate decays (--delta-decay, "
           "AdaComm's lower error floor); its defaults in flx-train --help\n");
    printf("# flx-train model files: --save FILE writes the trained model (the ranks' mean "
           "where their weights differ), --load FILE starts from one, --epochs 0 only "
           "evaluates (FLXMODEL v1: description, float32 weights, CRC-32)\n");
    printf("# launcher: flxrun -n N [--timeout S] forwards INT TERM HUP QUIT USR1 USR2 to "
           "every rank; Ctrl-Z stops every rank and fg/bg resumes them (the time stopped "
           "counts toward neither --timeout nor FLX_TIMEOUT)\n");
    print_cpus();
    print_devices();
#ifdef FLX_HAVE_VERBS
    ib_dev_print(stdout);
#endif
    return 0;
}

int main(int argc, char **argv)
{
    int rc = info_main(argc, argv);

    /* a report that could not be written (a full disk) fails, said once */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "flx-info: writing to standard output failed\n");
        return rc ? rc : 1;
    }
    return rc;
}
