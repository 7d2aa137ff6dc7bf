/* device.c -- which HCA and port to use, and the IPv4 address rdmacm binds.
 *
 * FLX_IB_HCA=name[:port] picks one; otherwise hwloc prefers an HCA whose
 * locality covers this process's cores, else the first ACTIVE port wins.
 * The address is the IPv4 address whose rdmacm binding lands on that
 * device and port (works for RoCE netdevs and IPoIB alike); with
 * FLX_IB_GID_INDEX, the IPv4-mapped address in that GID entry is used. */
#include "transport/ib/ib.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>
#ifdef FLX_HAVE_HWLOC
#include <hwloc.h>
#include <hwloc/openfabrics-verbs.h>
#endif

static const char *link_layer_name(uint8_t ll)
{
    return ll == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)"
         : ll == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "unknown";
}

static int port_active(struct ibv_context *ctx, int port)
{
    struct ibv_port_attr pa;
    return ibv_query_port(ctx, (uint8_t)port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE;
}

/* 1 when the device's locality includes a core this process may run on */
static int dev_is_local(struct ibv_device *dev)
{
#ifdef FLX_HAVE_HWLOC
    hwloc_topology_t topo;
    hwloc_bitmap_t devset = hwloc_bitmap_alloc(), mine = hwloc_bitmap_alloc();
    int local = 0;

    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0 &&
            hwloc_ibv_get_device_cpuset(topo, dev, devset) == 0 &&
            hwloc_get_cpubind(topo, mine, HWLOC_CPUBIND_PROCESS) == 0)
            local = hwloc_bitmap_intersects(devset, mine);
        hwloc_topology_destroy(topo);
    }
    hwloc_bitmap_free(devset);
    hwloc_bitmap_free(mine);
    return local;
#else
    (void)dev;
    return 0;
#endif
}

/* the IPv4 address whose rdmacm binding lands on name:port */
static flx_status_t dev_find_addr(const char *name, int port, int gid_index,
                                  struct ibv_context *vctx, struct sockaddr_in *addr_p)
{
    struct ifaddrs *ifs, *it;
    flx_status_t st = FLX_ERR_NOT_FOUND;

    if (gid_index >= 0) {
        union ibv_gid gid;
        if (ibv_query_gid(vctx, (uint8_t)port, gid_index, &gid) != 0) {
            flx_error(NET, -1, "FLX_IB_GID_INDEX=%d: no such GID on %s port %d", gid_index,
                      name, port);
            return FLX_ERR_CONFIG;
        }
        /* ::ffff:a.b.c.d */
        if (memcmp(gid.raw, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) != 0) {
            flx_error(NET, -1, "FLX_IB_GID_INDEX=%d on %s port %d is not an IPv4-mapped GID",
                      gid_index, name, port);
            return FLX_ERR_CONFIG;
        }
        memset(addr_p, 0, sizeof(*addr_p));
        addr_p->sin_family = AF_INET;
        memcpy(&addr_p->sin_addr, gid.raw + 12, 4);
        return FLX_OK;
    }
    if (getifaddrs(&ifs) != 0)
        return FLX_ERR_SYSTEM;
    for (it = ifs; it && st != FLX_OK; it = it->ifa_next) {
        struct rdma_cm_id *id;
        struct sockaddr_in a;
        if (it->ifa_addr == NULL || it->ifa_addr->sa_family != AF_INET)
            continue;
        memcpy(&a, it->ifa_addr, sizeof(a));
        a.sin_port = 0;
        if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) != 0)
            continue;
        if (rdma_bind_addr(id, (struct sockaddr *)&a) == 0 && id->verbs &&
            strcmp(ibv_get_device_name(id->verbs->device), name) == 0 &&
            (id->port_num == 0 || id->port_num == port)) {
            *addr_p = a;
            st = FLX_OK;
        }
        rdma_destroy_id(id);
    }
    freeifaddrs(ifs);
    return st;
}

flx_status_t ib_dev_choose(const flx_config_t *cfg, int rank, ib_dev_choice_t *choice_p)
{
    struct ibv_device **devs;
    char want[64] = "";
    int want_port = 0, ndev, best = -1, best_port = 0, best_local = -1;
    flx_status_t st;

    if (cfg->ib_hca[0]) {
        char *colon;
        snprintf(want, sizeof(want), "%s", cfg->ib_hca);
        colon = strchr(want, ':');
        if (colon) {
            *colon = '\0';
            want_port = atoi(colon + 1);
            if (want_port < 1) {
                flx_error(NET, rank, "FLX_IB_HCA=%s: bad port number", cfg->ib_hca);
                return FLX_ERR_CONFIG;
            }
        }
    }
    devs = ibv_get_device_list(&ndev);
    if (devs == NULL || ndev == 0) {
        flx_error(NET, rank, "no RDMA device found (is the driver loaded? SoftRoCE: modprobe "
                  "rdma_rxe; rdma link add rxe0 type rxe netdev IF)");
        if (devs)
            ibv_free_device_list(devs);
        return FLX_ERR_NOT_FOUND;
    }
    for (int d = 0; d < ndev; d++) {
        struct ibv_context *vctx;
        struct ibv_device_attr da;
        const char *name = ibv_get_device_name(devs[d]);
        if (want[0] && strcmp(name, want) != 0)
            continue;
        vctx = ibv_open_device(devs[d]);
        if (vctx == NULL)
            continue;
        if (ibv_query_device(vctx, &da) == 0) {
            for (int p = 1; p <= da.phys_port_cnt; p++) {
                int local;
                if ((want_port && p != want_port) || !port_active(vctx, p))
                    continue;
                local = dev_is_local(devs[d]);
                if (local > best_local) {
                    best = d;
                    best_port = p;
                    best_local = local;
                }
                break;
            }
        }
        ibv_close_device(vctx);
    }
    if (best < 0) {
        flx_error(NET, rank, "no ACTIVE RDMA port%s%s", want[0] ? " on FLX_IB_HCA=" : "",
                  want[0] ? cfg->ib_hca : "");
        ibv_free_device_list(devs);
        return FLX_ERR_NOT_FOUND;
    }
    memset(choice_p, 0, sizeof(*choice_p));
    snprintf(choice_p->name, sizeof(choice_p->name), "%s", ibv_get_device_name(devs[best]));
    choice_p->port = best_port;
    choice_p->gid_index = cfg->ib_gid_index;
    {
        struct ibv_context *vctx = ibv_open_device(devs[best]);
        st = vctx ? dev_find_addr(choice_p->name, best_port, cfg->ib_gid_index, vctx,
                                  &choice_p->addr)
                  : FLX_ERR_SYSTEM;
        if (vctx)
            ibv_close_device(vctx);
    }
    ibv_free_device_list(devs);
    if (st != FLX_OK) {
        flx_error(NET, rank, "%s port %d has no IPv4 address for rdmacm (configure an address "
                  "on its netdev or IPoIB interface)", choice_p->name, best_port);
        return st;
    }
    flx_info(NET, rank, "ib: using %s port %d (%s)", choice_p->name, best_port,
             best_local > 0 ? "local to this process's cores" : "first active port");
    return FLX_OK;
}

int ib_dev_available(void)
{
    struct ibv_device **devs;
    int ndev, found = 0;

    devs = ibv_get_device_list(&ndev);
    for (int d = 0; devs && d < ndev && !found; d++) {
        struct ibv_context *vctx = ibv_open_device(devs[d]);
        struct ibv_device_attr da;
        if (vctx == NULL)
            continue;
        if (ibv_query_device(vctx, &da) == 0)
            for (int p = 1; p <= da.phys_port_cnt && !found; p++)
                found = port_active(vctx, p);
        ibv_close_device(vctx);
    }
    if (devs)
        ibv_free_device_list(devs);
    return found;
}

/* What registration may pin: the locked-memory limit, unless the process
 * holds CAP_IPC_LOCK (root, usually), which pins past it. */
static void print_memlock(FILE *out)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct caps[2];
    char lim[64];

    ib_memlock_str(lim, sizeof(lim));
    if (syscall(SYS_capget, &hdr, caps) == 0 &&
        (caps[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))))
        fprintf(out, "  locked memory: no limit (CAP_IPC_LOCK)\n");
    else if (strcmp(lim, "unlimited") == 0)
        fprintf(out, "  locked memory: unlimited\n");
    else
        fprintf(out, "  locked memory: %s (ulimit -l): staging may shrink and large messages "
                "wait for a slot; raise it for speed\n", lim);
}

void ib_dev_print(FILE *out)
{
    struct ibv_device **devs;
    int ndev;

    devs = ibv_get_device_list(&ndev);
    fprintf(out, "# RDMA devices (ib backend; FLX_IB_HCA=name[:port] picks one)\n");
    if (devs == NULL || ndev == 0) {
        fprintf(out, "  none (no RDMA driver loaded; the tcp backend is used)\n");
        if (devs)
            ibv_free_device_list(devs);
        return;
    }
    for (int d = 0; d < ndev; d++) {
        struct ibv_context *vctx = ibv_open_device(devs[d]);
        struct ibv_device_attr da;
        if (vctx == NULL || ibv_query_device(vctx, &da) != 0) {
            fprintf(out, "  %s: cannot open\n", ibv_get_device_name(devs[d]));
            if (vctx)
                ibv_close_device(vctx);
            continue;
        }
        fprintf(out, "  %s: %d port(s), max_qp %d, max_mr_size %llu, hwloc: %s\n",
                ibv_get_device_name(devs[d]), da.phys_port_cnt, da.max_qp,
                (unsigned long long)da.max_mr_size,
                dev_is_local(devs[d]) ? "local to this process" : "not local / unknown");
        for (int p = 1; p <= da.phys_port_cnt; p++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(vctx, (uint8_t)p, &pa) != 0)
                continue;
            fprintf(out, "    port %d: %s, link layer %s, active MTU %d, max MTU %d\n", p,
                    ibv_port_state_str(pa.state), link_layer_name(pa.link_layer),
                    128 << pa.active_mtu, 128 << pa.max_mtu);
            for (int g = 0; g < pa.gid_tbl_len && g < 16; g++) {
                union ibv_gid gid;
                char s[INET6_ADDRSTRLEN];
                static const uint8_t zero[16];
                if (ibv_query_gid(vctx, (uint8_t)p, g, &gid) != 0 ||
                    memcmp(gid.raw, zero, 16) == 0)
                    continue;
                inet_ntop(AF_INET6, gid.raw, s, sizeof(s));
                fprintf(out, "      gid[%d] %s\n", g, s);
            }
        }
        ibv_close_device(vctx);
    }
    ibv_free_device_list(devs);
    print_memlock(out);
}
