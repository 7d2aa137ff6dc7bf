/* config.h -- every FLX_* knob in one table: name, default, help, parser.
 * flx_config_load reads the environment once into a flx_config_t; a
 * malformed value is FLX_ERR_CONFIG with a log line naming the variable. */
#ifndef FLX_COMMON_CONFIG_H
#define FLX_COMMON_CONFIG_H

#include "flexcoll.h"

#include <stddef.h>
#include <stdio.h>

typedef struct {
    int log_level;              /* FLX_LOG_LEVEL */
    unsigned log_subsys;        /* FLX_LOG_SUBSYS, bit per flx_subsys_t */
    int rank;                   /* FLX_RANK, -1 = unset */
    int size;                   /* FLX_SIZE, -1 = unset */
    char root[256];             /* FLX_ROOT host:port */
    char job_secret[1024];      /* FLX_JOB_SECRET */
    char socket_ifname[64];     /* FLX_SOCKET_IFNAME */
    int net;                    /* FLX_NET: 0 auto, 1 tcp, 2 ib */
    int algo;                   /* FLX_ALGO, flx_algo_t */
    double timeout_s;           /* FLX_TIMEOUT */
    double connect_timeout_s;   /* FLX_CONNECT_TIMEOUT */
    double handshake_timeout_s; /* FLX_HANDSHAKE_TIMEOUT */
    size_t chunk_size;          /* FLX_CHUNK_SIZE, bytes */
    size_t tcp_sockbuf;         /* FLX_TCP_SOCKBUF, bytes, 0 = kernel */
    size_t tcp_write_max;       /* FLX_TCP_WRITE_MAX: bytes per sendmsg, 0 = no limit */
    size_t tcp_notsent_lowat;   /* FLX_TCP_NOTSENT_LOWAT: 0 = the kernel's */
    double tcp_park_s;          /* FLX_TCP_PARK, 0 = buffer early messages at once */
    int tcp_sockets;            /* FLX_TCP_SOCKETS: connections per pair, 0 auto, 1 or 2 */
    int tcp_lane;               /* FLX_TCP_LANE: FLX_TCP_LANE_* */
    int calibrate;              /* FLX_CALIBRATE */
    double alpha_s;             /* FLX_ALPHA, 0 = measure */
    double beta;                /* FLX_BETA bytes/s, 0 = measure */
    int model_refresh;          /* FLX_MODEL_REFRESH: observations per agreement, 0 = off */
    double spin_s;              /* FLX_SPIN: busy-poll before sleeping */
    double spin_shared_s;       /* FLX_SPIN_SHARED: ... when ranks outnumber cores */
    char ib_hca[64];            /* FLX_IB_HCA name[:port] */
    int ib_gid_index;           /* FLX_IB_GID_INDEX, -1 = rdmacm decides */
    size_t ib_eager;            /* FLX_IB_EAGER: largest eager payload */
    int ib_recv_depth;          /* FLX_IB_RECV_DEPTH: receives posted per peer */
    int ib_reg_cache;           /* FLX_IB_REG_CACHE: cached registrations, 0 = off */
    double ib_spin_s;           /* FLX_IB_SPIN: busy-poll of the CQ before sleeping */
    int ib_stage_slots;         /* FLX_IB_STAGE_SLOTS: staging buffers, 0 = off */
    size_t ib_stage_size;       /* FLX_IB_STAGE_SIZE: bytes per staging buffer */
    int ib_leave_pinned;        /* FLX_IB_LEAVE_PINNED: cache every buffer's registration */
    int ib_qps_per_peer;        /* FLX_IB_QPS_PER_PEER: large writes striped over them */
} flx_config_t;

enum { FLX_NET_AUTO = 0, FLX_NET_TCP = 1, FLX_NET_IB = 2 };
enum { FLX_TCP_LANE_AUTO = 0, FLX_TCP_LANE_SPLIT = 1, FLX_TCP_LANE_SHARED = 2 };

/* Fill cfg with defaults, then overlay the FLX_* environment.  rank is used
 * for the log line only. */
flx_status_t flx_config_load(flx_config_t *cfg_p);
/* Parse one knob's value from a string into cfg (used by the loader and by
 * tests).  name is without the FLX_ prefix. */
flx_status_t flx_config_set(flx_config_t *cfg, const char *name, const char *value);
/* Print every knob with its default, current value and help (flx-info -c). */
void flx_config_print(FILE *out, const flx_config_t *cfg);

/* Value parsers: 0 on success, -1 on malformed input. */
int flx_parse_size(const char *s, size_t *out_p);      /* 8k, 4M, 1G, 64KiB, 100 */
int flx_parse_time(const char *s, double *out_p);
int flx_parse_rate(const char *s, double *out_p);     /* 125M, 1.25G (decimal), bytes/s */      /* 10ms, 30s, 500us, 2m, 1.5 */
int flx_parse_int(const char *s, long min, long max, long *out_p);
int flx_parse_bool(const char *s, int *out_p);         /* 1/0 yes/no on/off true/false */
int flx_config_parse_log_level(const char *s, int *out_p);
int flx_config_parse_subsys(const char *s, unsigned *out_p);

#endif
