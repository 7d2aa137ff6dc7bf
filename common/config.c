/* config.c -- the FLX_* knob table and its parsers. */
#include "common/config.h"
#include "common/log.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum { CFG_INT, CFG_SIZE, CFG_TIME, CFG_BOOL, CFG_STRING, CFG_ENUM,
               CFG_LOGLEVEL, CFG_SUBSYS, CFG_RATE } cfg_kind_t;

typedef struct {
    const char *name;        /* without FLX_ */
    const char *defval;
    const char *help;
    cfg_kind_t kind;
    size_t offset;
    size_t len;              /* CFG_STRING: buffer size */
    long min, max;           /* CFG_INT bounds; CFG_SIZE: max if > 0;
                                CFG_SIZE, CFG_TIME: min 1 rejects 0;
                                CFG_SIZE: min > 1 is the least size;
                                CFG_TIME: max (seconds) if > 0 */
    const char *const *choices; /* CFG_ENUM, NULL-terminated */
} cfg_field_t;

static const char *const net_choices[] = {"auto", "tcp", "ib", NULL};
static const char *const algo_choices[] = {"auto", "ring", "tree", "rd", "hd", NULL};
static const char *const tcp_sockets_choices[] = {"auto", "1", "2", NULL}; /* index = count */
static const char *const tcp_lane_choices[] = {"auto", "split", "shared", NULL}; /* FLX_TCP_LANE_* */

#define OFF(f) offsetof(flx_config_t, f)
#define SZ(f) sizeof(((flx_config_t *)0)->f)

static const cfg_field_t cfg_table[] = {
    {"LOG_LEVEL", "warn", "log level: error|warn|info|debug|trace", CFG_LOGLEVEL,
     OFF(log_level), 0, 0, 0, NULL},
    {"LOG_SUBSYS", "all", "comma list of subsystems to log: init,net,coll,compress,ctrl,train,tool or all",
     CFG_SUBSYS, OFF(log_subsys), 0, 0, 0, NULL},
    {"RANK", "", "this process's rank (else OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)",
     CFG_INT, OFF(rank), 0, 0, 1 << 24, NULL},
    {"SIZE", "", "number of ranks, at most 2048 (else OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS)",
     CFG_INT, OFF(size), 0, 1, 2048, NULL},
    {"ROOT", "127.0.0.1:29400", "host:port where rank 0 listens for the rendezvous (0.0.0.0: every address of rank 0)",
     CFG_STRING, OFF(root), SZ(root), 0, 0, NULL},
    {"JOB_SECRET", "", "secret shared by the job's ranks; peers prove they know it (never sent)",
     CFG_STRING, OFF(job_secret), SZ(job_secret), 0, 0, NULL},
    {"SOCKET_IFNAME", "", "network interface for data sockets, rank 0's included (default: the one that routes to the root)",
     CFG_STRING, OFF(socket_ifname), SZ(socket_ifname), 0, 0, NULL},
    {"NET", "auto", "transport: auto|tcp|ib (auto: ib when an active RDMA port exists)", CFG_ENUM,
     OFF(net), 0, 0, 0, net_choices},
    {"ALGO", "auto", "collective algorithm: auto|ring|tree|rd|hd (auto: alpha-beta model; hd: allreduce only)", CFG_ENUM,
     OFF(algo), 0, 0, 0, algo_choices},
    {"TIMEOUT", "30s", "a collective that makes no progress for this long fails with FLX_ERR_TIMED_OUT",
     CFG_TIME, OFF(timeout_s), 0, 1, 0, NULL},
    {"CONNECT_TIMEOUT", "60s", "how long bootstrap waits for the root and the other ranks", CFG_TIME,
     OFF(connect_timeout_s), 0, 1, 0, NULL},
    {"HANDSHAKE_TIMEOUT", "5s", "how long an accepted connection may take to authenticate", CFG_TIME,
     OFF(handshake_timeout_s), 0, 1, 0, NULL},
    {"CHUNK_SIZE", "512k", "pipeline chunk of ring, tree and broadcast algorithms (at least 4k)",
     CFG_SIZE, OFF(chunk_size), 0, 4096, 0, NULL},
    {"TCP_SOCKBUF", "0", "SO_SNDBUF/SO_RCVBUF of data sockets (0: kernel autotuning)", CFG_SIZE,
     OFF(tcp_sockbuf), 0, 0, 0, NULL},
    {"TCP_WRITE_MAX", "128k", "tcp: a message longer than this (its 48-byte header and payload "
     "together) is written in sendmsg() calls of at most this many bytes, rounded down to whole "
     "segments of its connection (TCP_MAXSEG, read at the message's start; at least one), so no "
     "write but a message's last ends in a short segment; 0: as much as the socket takes in one "
     "call",
     CFG_SIZE, OFF(tcp_write_max), 0, 0, 0, NULL},
    {"TCP_NOTSENT_LOWAT", "16k", "tcp: TCP_NOTSENT_LOWAT of data sockets: a socket takes more of a "
     "message only while less than this much of what it holds is not yet sent, so a long message "
     "goes out from the sending rank's own writes instead of queueing behind the congestion window "
     "(on loopback the queued part left from the peer's CPU, out of order); 0: the kernel's "
     "default (net.ipv4.tcp_notsent_lowat); at most 1g",
     CFG_SIZE, OFF(tcp_notsent_lowat), 0, 0, 1L << 30, NULL},
    {"TCP_PARK", "10ms", "tcp: a message of 64 KiB or more that arrives before its receive is posted "
     "stays in the socket this long (its receive then takes it straight from the kernel), and "
     "only after that is read into a buffer of its own; 0 buffers it at once; at most 1s (a "
     "failure notice behind a parked message waits as long)",
     CFG_TIME, OFF(tcp_park_s), 0, 0, 1, NULL},
    {"TCP_SOCKETS", "auto", "tcp: connections per pair of ranks: auto|1|2; 2 = the higher rank's "
     "messages of 64 KiB and up go on a second one, so two long sends never wait on one socket's "
     "lock (an exchange of 1 MiB each way took a third of the time on loopback), 1 = one for "
     "everything (half the sockets), auto = 2 unless a rank's open-file limit (raised up to its "
     "hard limit) holds only 1; the same on every rank",
     CFG_ENUM, OFF(tcp_sockets), 0, 0, 0, tcp_sockets_choices},
    {"TCP_LANE", "auto", "tcp, two connections per pair: where the higher rank's messages of 64 KiB "
     "and up go: split = the second connection (the two directions overlap: faster while the two "
     "ranks' cores share a cache), shared = the first, with everything else (the directions take "
     "turns: faster on cores far apart), auto = both measured while running, the faster one "
     "taken, the other tried now and then; auto and shared give the first connection 4 MiB "
     "socket buffers when FLX_TCP_SOCKBUF is 0",
     CFG_ENUM, OFF(tcp_lane), 0, 0, 0, tcp_lane_choices},
    {"CALIBRATE", "yes", "measure alpha and beta when a communicator is created", CFG_BOOL,
     OFF(calibrate), 0, 0, 0, NULL},
    {"ALPHA", "0", "fixed link latency for the cost model (0: measured)", CFG_TIME, OFF(alpha_s), 0,
     0, 0, NULL},
    {"BETA", "0", "fixed link bandwidth for the cost model in bytes/s, decimal units: 125M = 1 Gbit/s (0: measured)",
     CFG_RATE, OFF(beta), 0, 0, 0, NULL},
    {"MODEL_REFRESH", "16", "live model: the ranks agree on alpha and beta from the timings of their "
     "collectives after this many bandwidth-bound ones (0: keep the start values and never "
     "explore the runner-up)", CFG_INT,
     OFF(model_refresh), 0, 0, 1 << 20, NULL},
    {"SPIN", "2ms", "tcp: busy-poll this long (yielding the core) before sleeping in poll(); "
     "FLX_SPIN_SHARED when the job's ranks on this machine outnumber the CPUs (hardware threads) "
     "they may use together (the union of their CPU affinity), except while ranks are awaited "
     "and every one of them runs on CPUs apart from this rank's (another machine, or CPUs its "
     "affinity excludes); "
     "0 sleeps at once",
     CFG_TIME, OFF(spin_s), 0, 0, 0, NULL},
    {"SPIN_SHARED", "50us", "tcp and ib: the busy-poll (at most FLX_SPIN, FLX_IB_SPIN) when the "
     "job's ranks on this machine outnumber the CPUs they may use together: a long one takes the "
     "core from the rank it waits for (tcp: not while every rank awaited runs on CPUs apart from "
     "this rank's)", CFG_TIME, OFF(spin_shared_s), 0, 0, 0, NULL},
    {"IB_HCA", "", "RDMA device and port for the ib backend, name[:port] (default: hwloc-nearest active port)",
     CFG_STRING, OFF(ib_hca), SZ(ib_hca), 0, 0, NULL},
    {"IB_GID_INDEX", "", "GID entry whose IPv4 address rdmacm binds (default: the port's netdev address)",
     CFG_INT, OFF(ib_gid_index), 0, 0, 255, NULL},
    {"IB_EAGER", "8k", "ib: messages up to this size are copied through bounce buffers; larger ones are "
     "RDMA-written into the receiver's buffer (at most 1m)", CFG_SIZE, OFF(ib_eager), 0, 0, 1 << 20, NULL},
    {"IB_RECV_DEPTH", "64", "ib: receives pre-posted per peer (the credits of the flow control)", CFG_INT,
     OFF(ib_recv_depth), 0, 8, 4096, NULL},
    {"IB_REG_CACHE", "256", "ib: registered buffers kept for reuse (least recently used evicted); 0 registers "
     "per message", CFG_INT, OFF(ib_reg_cache), 0, 0, 1 << 20, NULL},
    {"IB_STAGE_SLOTS", "16", "ib: registered staging buffers of FLX_IB_STAGE_SIZE bytes; a large message "
     "whose buffer has no cached registration is copied through one instead of being registered for "
     "that message (allocated at first use); 0 registers per message", CFG_INT, OFF(ib_stage_slots), 0,
     0, 4096, NULL},
    {"IB_STAGE_SIZE", "512k", "ib: size of one staging buffer, the largest message staged (the default "
     "is FLX_CHUNK_SIZE's, so every pipelined chunk fits; at most 64m)", CFG_SIZE, OFF(ib_stage_size), 0,
     0, 1 << 26, NULL},
    {"IB_SPIN", "2ms", "ib: busy-poll the completion queue this long (yielding the core) before sleeping "
     "on the completion channel; FLX_SPIN_SHARED when the job's ranks on this machine outnumber "
     "the CPUs (hardware threads) they may use together", CFG_TIME, OFF(ib_spin_s), 0, 0, 0, NULL},
    {"IB_LEAVE_PINNED", "no", "ib: cache the registration of every buffer, not only flx_mem_register'ed "
     "ones; at program start (it must be in the environment then) glibc is told never to return "
     "malloc'd memory to the system, so an address keeps its pages; only for programs that do not "
     "munmap or malloc_trim buffers they pass to collectives", CFG_BOOL, OFF(ib_leave_pinned), 0,
     0, 0, NULL},
    {"IB_QPS_PER_PEER", "1", "ib: queue pairs per peer; large messages are striped across them (same on "
     "every rank)", CFG_INT, OFF(ib_qps_per_peer), 0, 1, 8, NULL},
};
#define CFG_COUNT (sizeof(cfg_table) / sizeof(cfg_table[0]))

/* A plain decimal number (digits, a point, an exponent): strtod alone
 * would also take leading blanks, a sign, hex ("0x10", "0x1p20"). */
static int parse_double(const char *s, double *out_p, char **end_p)
{
    char *end;
    double v;

    if (!isdigit((unsigned char)s[0]) && !(s[0] == '.' && isdigit((unsigned char)s[1])))
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (end == s || errno != 0 || !isfinite(v) || v < 0)
        return -1;
    for (const char *c = s; c < end; c++)
        if (*c == 'x' || *c == 'X' || *c == 'p' || *c == 'P')
            return -1;
    *out_p = v;
    *end_p = end;
    return 0;
}

int flx_parse_size(const char *s, size_t *out_p)
{
    double v, mult = 1;
    char *end;

    if (s == NULL || parse_double(s, &v, &end) != 0)
        return -1;
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k': mult = 1024.0; end++; break;
    case 'm': mult = 1024.0 * 1024; end++; break;
    case 'g': mult = 1024.0 * 1024 * 1024; end++; break;
    case 't': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    case 'b': break;
    default: return -1;
    }
    if (mult > 1 && (strcasecmp(end, "ib") == 0 || strcasecmp(end, "b") == 0))
        end += strlen(end);
    else if (strcasecmp(end, "b") == 0)
        end++;
    /* a whole number of bytes: "1.5k" is 1536, "1.9" or "0.3k" is no size */
    if (*end != '\0' || v * mult > 9.0e18 || floor(v * mult) != v * mult)
        return -1;
    *out_p = (size_t)(v * mult);
    return 0;
}

int flx_parse_rate(const char *s, double *out_p)
{
    double v, mult = 1;
    char *end;

    if (s == NULL || parse_double(s, &v, &end) != 0)
        return -1;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': mult = 1e3; end++; break;
    case 'M': mult = 1e6; end++; break;
    case 'G': mult = 1e9; end++; break;
    default: return -1;
    }
    if (*end != '\0' || !isfinite(v * mult)) /* 1e308G is not a rate */
        return -1;
    *out_p = v * mult;
    return 0;
}

int flx_parse_time(const char *s, double *out_p)
{
    double v, mult = 1;
    char *end;

    if (s == NULL || parse_double(s, &v, &end) != 0)
        return -1;
    if (*end == '\0' || strcmp(end, "s") == 0) mult = 1;
    else if (strcmp(end, "ms") == 0) mult = 1e-3;
    else if (strcmp(end, "us") == 0) mult = 1e-6;
    else if (strcmp(end, "ns") == 0) mult = 1e-9;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0) mult = 60;
    else return -1;
    if (!isfinite(v * mult)) /* 1e308m */
        return -1;
    *out_p = v * mult;
    return 0;
}

int flx_parse_int(const char *s, long min, long max, long *out_p)
{
    char *end;
    long v;

    if (s == NULL || !(isdigit((unsigned char)s[0]) ||
                       (s[0] == '-' && isdigit((unsigned char)s[1])))) /* no blank, no '+' */
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out_p = v;
    return 0;
}

int flx_parse_bool(const char *s, int *out_p)
{
    static const char *const yes[] = {"1", "yes", "y", "on", "true", NULL};
    static const char *const no[] = {"0", "no", "n", "off", "false", NULL};

    if (s == NULL)
        return -1;
    for (int i = 0; yes[i]; i++)
        if (strcasecmp(s, yes[i]) == 0) { *out_p = 1; return 0; }
    for (int i = 0; no[i]; i++)
        if (strcasecmp(s, no[i]) == 0) { *out_p = 0; return 0; }
    return -1;
}

int flx_config_parse_log_level(const char *s, int *out_p)
{
    if (s == NULL)
        return -1;
    for (int l = FLX_LOG_ERROR; l <= FLX_LOG_TRACE; l++)
        if (strcasecmp(s, flx_log_level_name(l)) == 0) { *out_p = l; return 0; }
    return -1;
}

int flx_config_parse_subsys(const char *s, unsigned *out_p)
{
    unsigned mask = 0;
    const char *p = s;

    if (s == NULL || *s == '\0')
        return -1;
    if (strcasecmp(s, "all") == 0) { *out_p = ~0u; return 0; }
    while (*p) {
        size_t n = strcspn(p, ",");
        int found = 0;
        for (int i = 0; i < FLX_SUBSYS_COUNT; i++) {
            const char *name = flx_subsys_name(i);
            if (n == strlen(name) && strncasecmp(p, name, n) == 0) {
                mask |= 1u << i;
                found = 1;
            }
        }
        if (!found)
            return -1;
        p += n;
        if (*p == ',')
            p++;
    }
    *out_p = mask;
    return 0;
}

static int enum_index(const char *const *choices, const char *s)
{
    for (int i = 0; choices[i]; i++)
        if (strcasecmp(s, choices[i]) == 0)
            return i;
    return -1;
}

static const char *kind_expect(const cfg_field_t *f)
{
    switch (f->kind) {
    case CFG_INT: {
        static __thread char buf[64];
        snprintf(buf, sizeof(buf), "an integer from %ld to %ld", f->min, f->max);
        return buf;
    }
    case CFG_SIZE:
        if (f->min > 1) {
            static __thread char buf[80];
            snprintf(buf, sizeof(buf), "a whole size of at least %ld bytes such as 64k or 4M",
                     f->min);
            return buf;
        }
        return f->min > 0 ? "a nonzero whole size such as 4096, 64k, 4M or 1G"
                          : "a whole size such as 4096, 64k, 4M or 1G";
    case CFG_TIME:
        if (f->max > 0) {
            static __thread char buf[64];
            snprintf(buf, sizeof(buf), "a time of at most %lds such as 500us or 10ms", f->max);
            return buf;
        }
        return f->min > 0 ? "a nonzero time such as 500us, 10ms, 30s or 2m"
                          : "a time such as 500us, 10ms, 30s or 2m";
    case CFG_BOOL: return "yes/no, on/off, true/false or 1/0";
    case CFG_STRING: return "a shorter string";
    case CFG_ENUM: return "one of the listed choices";
    case CFG_LOGLEVEL: return "error, warn, info, debug or trace";
    case CFG_SUBSYS: return "all or a comma list of init,net,coll,compress,ctrl,train,tool";
    case CFG_RATE: return "a rate in bytes/s such as 125M or 1.25G (decimal units)";
    }
    return "a valid value";
}

static int field_parse(const cfg_field_t *f, flx_config_t *cfg, const char *value)
{
    char *base = (char *)cfg + f->offset;
    long l;
    size_t sz;
    double d;
    int i;
    unsigned u;

    switch (f->kind) {
    case CFG_INT:
        /* only knobs whose default is unset may be set to unset */
        if (*value == '\0' && f->defval[0] == '\0') { *(int *)base = -1; return 0; }
        if (flx_parse_int(value, f->min, f->max, &l) != 0) return -1;
        *(int *)base = (int)l;
        return 0;
    case CFG_SIZE:
        if (flx_parse_size(value, &sz) != 0 || (f->max > 0 && sz > (size_t)f->max) ||
            (f->min > 0 && sz == 0) || (f->min > 1 && sz < (size_t)f->min))
            return -1;
        *(size_t *)base = sz;
        return 0;
    case CFG_RATE:
        if (flx_parse_rate(value, &d) != 0) return -1;
        *(double *)base = d;
        return 0;
    case CFG_TIME:
        if (flx_parse_time(value, &d) != 0 || (f->min > 0 && d == 0) ||
            (f->max > 0 && d > (double)f->max)) return -1;
        *(double *)base = d;
        return 0;
    case CFG_BOOL:
        if (flx_parse_bool(value, &i) != 0) return -1;
        *(int *)base = i;
        return 0;
    case CFG_STRING:
        if (strlen(value) >= f->len) return -1;
        strcpy(base, value);
        return 0;
    case CFG_ENUM:
        if ((i = enum_index(f->choices, value)) < 0) return -1;
        *(int *)base = i;
        return 0;
    case CFG_LOGLEVEL:
        if (flx_config_parse_log_level(value, &i) != 0) return -1;
        *(int *)base = i;
        return 0;
    case CFG_SUBSYS:
        if (flx_config_parse_subsys(value, &u) != 0) return -1;
        *(unsigned *)base = u;
        return 0;
    }
    return -1;
}

static const cfg_field_t *field_find(const char *name)
{
    for (size_t i = 0; i < CFG_COUNT; i++)
        if (strcmp(cfg_table[i].name, name) == 0)
            return &cfg_table[i];
    return NULL;
}

flx_status_t flx_config_set(flx_config_t *cfg, const char *name, const char *value)
{
    const cfg_field_t *f = name ? field_find(name) : NULL;

    if (f == NULL || value == NULL) {
        flx_error(INIT, -1, "unknown configuration knob FLX_%s", name ? name : "(null)");
        return FLX_ERR_INVALID_ARG;
    }
    if (field_parse(f, cfg, value) != 0) {
        if (f->offset == OFF(job_secret)) /* never print the secret itself */
            flx_error(INIT, -1, "FLX_%s (%zu characters, not shown) is too long: at most %zu",
                      name, strlen(value), sizeof(cfg->job_secret) - 1);
        else if (f->kind == CFG_SIZE && f->max > 0)
            flx_error(INIT, -1, "FLX_%s='%s' is malformed: expected %s, at most %ld bytes", name,
                      value, kind_expect(f), f->max);
        else
            flx_error(INIT, -1, "FLX_%s='%s' is malformed: expected %s", name, value,
                      kind_expect(f));
        return FLX_ERR_CONFIG;
    }
    return FLX_OK;
}

flx_status_t flx_config_load(flx_config_t *cfg_p)
{
    flx_config_t cfg;
    char env[64];
    flx_status_t st;

    memset(&cfg, 0, sizeof(cfg));
    for (size_t i = 0; i < CFG_COUNT; i++) {
        if (field_parse(&cfg_table[i], &cfg, cfg_table[i].defval) != 0)
            return FLX_ERR_CONFIG; /* a bad default is a bug caught by tests */
    }
    for (size_t i = 0; i < CFG_COUNT; i++) {
        const char *v;
        snprintf(env, sizeof(env), "FLX_%s", cfg_table[i].name);
        v = getenv(env);
        if (v == NULL)
            continue;
        st = flx_config_set(&cfg, cfg_table[i].name, v);
        if (st != FLX_OK)
            return st;
    }
    *cfg_p = cfg;
    return FLX_OK;
}

/* The value of field f in cfg, as it would be written in the environment. */
static void field_format(const cfg_field_t *f, const flx_config_t *cfg, char *buf, size_t len)
{
    const char *base = (const char *)cfg + f->offset;

    switch (f->kind) {
    case CFG_INT:
        if (*(const int *)base < 0) snprintf(buf, len, "%s", "");
        else snprintf(buf, len, "%d", *(const int *)base);
        break;
    case CFG_SIZE: {
        size_t v = *(const size_t *)base;
        const char *units = "kMGT";
        int u = -1;
        while (v && v % 1024 == 0 && u < 3) {
            v /= 1024;
            u++;
        }
        if (u >= 0) snprintf(buf, len, "%zu%c", v, units[u]);
        else snprintf(buf, len, "%zu", v);
        break;
    }
    case CFG_TIME: { /* as the defaults are written: 0, 30s, 10ms, 500us */
        double t = *(const double *)base;
        if (t == 0) snprintf(buf, len, "0");
        else if (t >= 1) snprintf(buf, len, "%gs", t);
        else if (t >= 1e-3) snprintf(buf, len, "%gms", t * 1e3);
        else snprintf(buf, len, "%gus", t * 1e6);
        break;
    }
    case CFG_RATE: snprintf(buf, len, "%g", *(const double *)base); break;
    case CFG_BOOL: snprintf(buf, len, "%s", *(const int *)base ? "yes" : "no"); break;
    case CFG_STRING: snprintf(buf, len, "%s", base); break;
    case CFG_ENUM: snprintf(buf, len, "%s", f->choices[*(const int *)base]); break;
    case CFG_LOGLEVEL: /* lower case, as the default is written */
        snprintf(buf, len, "%s", flx_log_level_name(*(const int *)base));
        for (char *c = buf; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        break;
    case CFG_SUBSYS: {
        unsigned mask = *(const unsigned *)base;
        size_t n = 0;
        if (mask == ~0u) {
            snprintf(buf, len, "all");
            break;
        }
        buf[0] = '\0';
        for (int i = 0; i < FLX_SUBSYS_COUNT && n < len; i++)
            if (mask & (1u << i))
                n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "", flx_subsys_name(i));
        break;
    }
    }
}

void flx_config_print(FILE *out, const flx_config_t *cfg)
{
    for (size_t i = 0; i < CFG_COUNT; i++) {
        const cfg_field_t *f = &cfg_table[i];
        char value[300];

        field_format(f, cfg, value, sizeof(value));
        /* never print the secret itself */
        if (f->offset == OFF(job_secret) && value[0])
            snprintf(value, sizeof(value), "(set, %zu characters)", strlen(cfg->job_secret));
        fprintf(out, "#\n# %s\n", f->help);
        if (f->choices) {
            fprintf(out, "# choices:");
            for (int c = 0; f->choices[c]; c++)
                fprintf(out, " %s", f->choices[c]);
            fprintf(out, "\n");
        }
        fprintf(out, "FLX_%s=%s    # default: %s\n", f->name, value,
                f->defval[0] ? f->defval : "(unset)");
    }
}
