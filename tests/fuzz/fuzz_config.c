/* fuzz_config.c -- libFuzzer harness for the configuration parser
 * (common/config.c): the input is "NAME=VALUE" (NAME without FLX_; the
 * first byte may instead pick a knob by index), run through flx_config_set
 * on a loaded configuration, through every flx_parse_* value parser, and
 * printed back with flx_config_print as flx-info -c does. */
#include "common/config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const knobs[] = {
    "LOG_LEVEL", "LOG_SUBSYS", "RANK", "SIZE", "ROOT", "JOB_SECRET", "SOCKET_IFNAME", "NET",
    "ALGO", "TIMEOUT", "CONNECT_TIMEOUT", "HANDSHAKE_TIMEOUT", "CHUNK_SIZE", "TCP_SOCKBUF",
    "CALIBRATE", "ALPHA", "BETA", "SPIN", "IB_HCA", "IB_GID_INDEX", "IB_EAGER",
    "IB_RECV_DEPTH", "IB_REG_CACHE", "IB_STAGE_SLOTS", "IB_STAGE_SIZE", "IB_SPIN",
    "IB_QPS_PER_PEER", "IB_LEAVE_PINNED",
};
#define KNOB_COUNT (sizeof(knobs) / sizeof(knobs[0]))

static flx_config_t base;
static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (flx_config_load(&base) != FLX_OK)
        abort();
    devnull = fopen("/dev/null", "w");
    if (devnull == NULL)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), *eq;
    const char *name, *value;
    flx_config_t cfg = base;
    size_t sz;
    double d;
    long l;
    int i;
    unsigned u;

    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (size > 0 && (unsigned char)s[0] >= 0x80) { /* knob by index, rest is the value */
        name = knobs[((unsigned char)s[0] - 0x80) % KNOB_COUNT];
        value = s + 1;
    } else if ((eq = strchr(s, '=')) != NULL) {
        *eq = '\0';
        name = s;
        value = eq + 1;
    } else {
        name = s;
        value = "";
    }
    if (flx_config_set(&cfg, name, value) == FLX_OK)
        flx_config_print(devnull, &cfg);
    (void)flx_parse_size(value, &sz);
    (void)flx_parse_time(value, &d);
    (void)flx_parse_rate(value, &d);
    (void)flx_parse_int(value, -100, 1 << 24, &l);
    (void)flx_parse_bool(value, &i);
    (void)flx_config_parse_log_level(value, &i);
    (void)flx_config_parse_subsys(value, &u);
    free(s);
    return 0;
}
