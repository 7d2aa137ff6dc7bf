/* flx-info -- what this flexcoll build can do: version, features, transports,
 * network devices, and (-c) every FLX_* knob with its value and help. */
#include "flexcoll.h"
#include "common/config.h"
#ifdef FLX_HAVE_VERBS
#include "transport/ib/ib.h"
#endif

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: flx-info [-c] [-h]\n"
                 "  (no option)  version, build features, transports, network devices\n"
                 "  -c           every FLX_* configuration knob: value, default and help\n");
}

static void print_devices(void)
{
    struct ifaddrs *ifs, *it;

    printf("# network interfaces (tcp backend; FLX_SOCKET_IFNAME picks one)\n");
    if (getifaddrs(&ifs) != 0) {
        perror("getifaddrs");
        return;
    }
    for (it = ifs; it; it = it->ifa_next) {
        char ip[INET_ADDRSTRLEN];
        if (it->ifa_addr == NULL || it->ifa_addr->sa_family != AF_INET)
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)it->ifa_addr)->sin_addr, ip, sizeof(ip));
        printf("  %-12s %-16s %s\n", it->ifa_name, ip, (it->ifa_flags & IFF_UP) ? "up" : "down");
    }
    freeifaddrs(ifs);
}

int main(int argc, char **argv)
{
    flx_config_t cfg;
    int show_config = 0, opt;

    while ((opt = getopt(argc, argv, "ch")) != -1) {
        switch (opt) {
        case 'c': show_config = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
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
    printf("# transports: tcp%s\n", strstr(flx_build_features(), "verbs") ? ", ib" : "");
    printf("# collectives: allreduce (ring, tree, rd), allgather (ring, rd/Bruck), broadcast "
           "(binomial, chain), reduce_scatter (ring), barrier (dissemination)\n");
    printf("# dtypes: float double half bfloat16 int32 int64; ops: sum prod min max avg\n");
    printf("# compression (flx_gsync_*): ");
    for (int m = 0; m < FLX_COMPRESS_COUNT; m++)
        printf("%s%s", m ? " " : "", flx_compress_name((flx_compress_t)m));
    printf("; top-k collectives: artopk allgather auto\n");
    printf("# controller (flx_ctl_*): modes %s %s %s; flx-train policies: dense topk-ag artopk "
           "powersgd accordion gravac selsync flex\n",
           flx_ctl_mode_name(FLX_CTL_FLEX), flx_ctl_mode_name(FLX_CTL_ACCORDION),
           flx_ctl_mode_name(FLX_CTL_GRAVAC));
    print_devices();
#ifdef FLX_HAVE_VERBS
    ib_dev_print(stdout);
#endif
    return 0;
}
