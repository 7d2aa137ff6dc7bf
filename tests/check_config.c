/* check_config.c -- unit tests of the FLX_* configuration table and its
 * parsers (common/config.h), and of the status names and strings
 * (include/flexcoll.h).
 *
 * Every test starts from an environment without any FLX_* variable (the
 * fixture removes them), and runs in its own process (CK_FORK), so the
 * variables one test sets cannot leak into another. */
#include "common/config.h"
#include "common/log.h"
#include "common/time.h"

#include <check.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static const char *const KNOBS[] = {
    "LOG_LEVEL", "LOG_SUBSYS", "RANK", "SIZE", "ROOT", "JOB_SECRET",
    "SOCKET_IFNAME", "NET", "ALGO", "TIMEOUT", "CONNECT_TIMEOUT",
    "HANDSHAKE_TIMEOUT", "CHUNK_SIZE", "TCP_SOCKBUF", "CALIBRATE", "ALPHA",
    "BETA", "SPIN", "SPIN_SHARED", "TCP_WRITE_MAX", "TCP_NOTSENT_LOWAT",
};
#define NKNOBS (sizeof(KNOBS) / sizeof(KNOBS[0]))

static void clear_flx_env(void)
{
    char name[256];
    int again = 1;

    /* unsetenv edits environ, so restart the scan after each removal */
    while (again) {
        again = 0;
        for (char **e = environ; *e != NULL; e++) {
            const char *eq = strchr(*e, '=');
            size_t len = eq ? (size_t)(eq - *e) : strlen(*e);

            if (strncmp(*e, "FLX_", 4) == 0 && len < sizeof(name)) {
                memcpy(name, *e, len);
                name[len] = '\0';
                unsetenv(name);
                again = 1;
                break;
            }
        }
    }
}

static void setup(void) { clear_flx_env(); }
static void teardown(void) { clear_flx_env(); }

/* ---------------------------------------------------------------------- */
/* value parsers                                                           */
/* ---------------------------------------------------------------------- */

START_TEST(test_parse_size_valid)
{
    static const struct { const char *s; size_t want; } table[] = {
        {"8", 8},
        {"0", 0},
        {"4096", 4096},
        {"4k", 4096},
        {"4K", 4096},
        {"4kb", 4096},
        {"4KB", 4096},
        {"64KiB", 65536},
        {"64kib", 65536},
        {"1M", 1048576},
        {"1m", 1048576},
        {"1.5M", 1572864},
        {"1.5k", 1536},
        {"256k", 262144},
        {"2g", 2147483648ull},
        {"2GiB", 2147483648ull},
        {"1T", 1099511627776ull},
        {"100b", 100},
        {"100B", 100},
        {"1e3", 1000},
    };

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        size_t v = 12345;
        ck_assert_msg(flx_parse_size(table[i].s, &v) == 0, "'%s' rejected", table[i].s);
        ck_assert_msg(v == table[i].want, "'%s' -> %zu, expected %zu", table[i].s, v,
                      table[i].want);
    }
}
END_TEST

START_TEST(test_parse_size_invalid)
{
    static const char *const bad[] = {"",    "abc", "-1",   "4x",   "1.5.2", "k",    "4 k",
                                      "4k ", "4kk", "4bb",  "4ib",  "inf",   "nan",  "-4k",
                                      "1e30", "10000000T", "4Mx", "4MiBs", "12q"};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t v = 777;
        ck_assert_msg(flx_parse_size(bad[i], &v) == -1, "'%s' accepted as %zu", bad[i], v);
        ck_assert_msg(v == 777, "'%s': output written on failure", bad[i]);
    }
    ck_assert_int_eq(flx_parse_size(NULL, &(size_t){0}), -1);
}
END_TEST

START_TEST(test_parse_time)
{
    static const struct { const char *s; double want; } good[] = {
        {"10ms", 0.01}, {"30s", 30},    {"500us", 500e-6}, {"2m", 120},  {"1.5", 1.5},
        {"0", 0},       {"100ns", 1e-7}, {"1min", 60},     {"0.25s", 0.25}, {"5", 5},
    };
    static const char *const bad[] = {"10 ms", "x", "-3s", "", "5h", "3sec", "1.5.2s",
                                      "s", "ms", "10ms ", "inf", "-0.5"};

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        double v = -1;
        ck_assert_msg(flx_parse_time(good[i].s, &v) == 0, "'%s' rejected", good[i].s);
        ck_assert_msg(fabs(v - good[i].want) <= 1e-12 * good[i].want, "'%s' -> %g, expected %g",
                      good[i].s, v, good[i].want);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        double v = 42;
        ck_assert_msg(flx_parse_time(bad[i], &v) == -1, "'%s' accepted as %g", bad[i], v);
        ck_assert(v == 42);
    }
    ck_assert_int_eq(flx_parse_time(NULL, &(double){0}), -1);
}
END_TEST

START_TEST(test_parse_bool)
{
    static const char *const yes[] = {"1", "yes", "YES", "y", "on", "On", "true", "TRUE"};
    static const char *const no[] = {"0", "no", "No", "n", "N", "off", "OFF", "false", "False"};
    static const char *const bad[] = {"", "maybe", "2", "yess", "onn", "-1", " yes", "tru"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        int v = -1;
        ck_assert_msg(flx_parse_bool(yes[i], &v) == 0 && v == 1, "'%s' -> %d", yes[i], v);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        int v = -1;
        ck_assert_msg(flx_parse_bool(no[i], &v) == 0 && v == 0, "'%s' -> %d", no[i], v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int v = 7;
        ck_assert_msg(flx_parse_bool(bad[i], &v) == -1, "'%s' accepted", bad[i]);
        ck_assert_int_eq(v, 7);
    }
    ck_assert_int_eq(flx_parse_bool(NULL, &(int){0}), -1);
}
END_TEST

START_TEST(test_parse_int)
{
    long v = 99;

    ck_assert(flx_parse_int("5", 0, 10, &v) == 0 && v == 5);
    ck_assert(flx_parse_int("0", 0, 10, &v) == 0 && v == 0);
    ck_assert(flx_parse_int("10", 0, 10, &v) == 0 && v == 10);
    ck_assert(flx_parse_int("-5", -10, 10, &v) == 0 && v == -5);
    ck_assert(flx_parse_int("-10", -10, 10, &v) == 0 && v == -10);
    ck_assert(flx_parse_int("16777216", 0, 1 << 24, &v) == 0 && v == 1 << 24);
    v = 99;
    ck_assert_int_eq(flx_parse_int("11", 0, 10, &v), -1);
    ck_assert_int_eq(flx_parse_int("-1", 0, 10, &v), -1);
    ck_assert_int_eq(flx_parse_int("-11", -10, 10, &v), -1);
    ck_assert_int_eq(flx_parse_int("16777217", 0, 1 << 24, &v), -1);
    ck_assert_int_eq(flx_parse_int("", 0, 10, &v), -1);
    ck_assert_int_eq(flx_parse_int("5x", 0, 10, &v), -1);
    ck_assert_int_eq(flx_parse_int("1.5", 0, 10, &v), -1);
    ck_assert_int_eq(flx_parse_int("0x10", 0, 100, &v), -1);
    ck_assert_int_eq(flx_parse_int("abc", 0, 10, &v), -1);
    ck_assert_int_eq(flx_parse_int("99999999999999999999999", 0, 1 << 24, &v), -1);
    ck_assert_int_eq(flx_parse_int("99999999999999999999999", LONG_MIN, LONG_MAX, &v), -1);
    ck_assert_int_eq(flx_parse_int(NULL, 0, 10, &v), -1);
    ck_assert_int_eq(v, 99);
}
END_TEST

START_TEST(test_parse_log_level_subsys)
{
    int l = -1;
    unsigned m = 0;

    ck_assert(flx_config_parse_log_level("error", &l) == 0 && l == FLX_LOG_ERROR);
    ck_assert(flx_config_parse_log_level("warn", &l) == 0 && l == FLX_LOG_WARN);
    ck_assert(flx_config_parse_log_level("INFO", &l) == 0 && l == FLX_LOG_INFO);
    ck_assert(flx_config_parse_log_level("debug", &l) == 0 && l == FLX_LOG_DEBUG);
    ck_assert(flx_config_parse_log_level("trace", &l) == 0 && l == FLX_LOG_TRACE);
    ck_assert_int_eq(flx_config_parse_log_level("loud", &l), -1);
    ck_assert_int_eq(flx_config_parse_log_level("", &l), -1);
    ck_assert_int_eq(flx_config_parse_log_level(NULL, &l), -1);

    ck_assert(flx_config_parse_subsys("all", &m) == 0 && m == ~0u);
    ck_assert(flx_config_parse_subsys("net", &m) == 0 && m == 1u << FLX_SUBSYS_NET);
    ck_assert(flx_config_parse_subsys("init,coll", &m) == 0 &&
              m == ((1u << FLX_SUBSYS_INIT) | (1u << FLX_SUBSYS_COLL)));
    ck_assert(flx_config_parse_subsys("init,net,coll,compress,ctrl,train,tool", &m) == 0 &&
              m == (1u << FLX_SUBSYS_COUNT) - 1);
    m = 5;
    ck_assert_int_eq(flx_config_parse_subsys("disk", &m), -1);
    ck_assert_int_eq(flx_config_parse_subsys("net,disk", &m), -1);
    ck_assert_int_eq(flx_config_parse_subsys("", &m), -1);
    ck_assert_int_eq(flx_config_parse_subsys("ne", &m), -1);
    ck_assert_int_eq(m, 5);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* flx_config_load / flx_config_set                                        */
/* ---------------------------------------------------------------------- */

START_TEST(test_load_defaults)
{
    flx_config_t cfg;

    memset(&cfg, 0xab, sizeof(cfg));
    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    ck_assert(cfg.timeout_s == 30.0);
    ck_assert(cfg.connect_timeout_s == 60.0);
    ck_assert(cfg.handshake_timeout_s == 5.0);
    ck_assert_uint_eq(cfg.chunk_size, 512 * 1024);
    ck_assert_uint_eq(cfg.tcp_sockbuf, 0);
    ck_assert_uint_eq(cfg.tcp_write_max, 128 * 1024);
    ck_assert_uint_eq(cfg.tcp_notsent_lowat, 16 * 1024);
    ck_assert_int_eq(cfg.algo, FLX_ALGO_AUTO);
    ck_assert_int_eq(cfg.algo, 0);
    ck_assert_int_eq(cfg.net, FLX_NET_AUTO);
    ck_assert_int_eq(cfg.net, 0);
    ck_assert_int_eq(cfg.rank, -1);
    ck_assert_int_eq(cfg.size, -1);
    ck_assert_str_eq(cfg.root, "127.0.0.1:29400");
    ck_assert_str_eq(cfg.job_secret, "");
    ck_assert_str_eq(cfg.socket_ifname, "");
    ck_assert_int_eq(cfg.calibrate, 1);
    ck_assert(cfg.alpha_s == 0 && cfg.beta == 0);
    ck_assert(fabs(cfg.spin_s - 2e-3) < 1e-12);
    ck_assert(fabs(cfg.tcp_park_s - 10e-3) < 1e-12);
    ck_assert_int_eq(cfg.tcp_sockets, 0); /* auto */
    ck_assert_int_eq(cfg.log_level, FLX_LOG_WARN);
    ck_assert_uint_eq(cfg.log_subsys, ~0u);
}
END_TEST

START_TEST(test_load_overrides)
{
    flx_config_t cfg;

    setenv("FLX_ALGO", "ring", 1);
    setenv("FLX_CHUNK_SIZE", "1M", 1);
    setenv("FLX_TIMEOUT", "10ms", 1);
    setenv("FLX_CONNECT_TIMEOUT", "2m", 1);
    setenv("FLX_NET", "tcp", 1);
    setenv("FLX_RANK", "3", 1);
    setenv("FLX_SIZE", "8", 1);
    setenv("FLX_ROOT", "10.0.0.1:1234", 1);
    setenv("FLX_JOB_SECRET", "s3cret", 1);
    setenv("FLX_LOG_LEVEL", "debug", 1);
    setenv("FLX_LOG_SUBSYS", "net,coll", 1);
    setenv("FLX_CALIBRATE", "no", 1);
    setenv("FLX_ALPHA", "5us", 1);
    setenv("FLX_BETA", "1G", 1);
    setenv("FLX_TCP_SOCKBUF", "4M", 1);
    setenv("FLX_SPIN", "0", 1);
    setenv("FLX_TCP_PARK", "250us", 1);
    setenv("FLX_TCP_SOCKETS", "1", 1);
    setenv("FLX_TCP_WRITE_MAX", "0", 1);
    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    ck_assert_uint_eq(cfg.tcp_write_max, 0);
    setenv("FLX_TCP_WRITE_MAX", "1m", 1);
    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    ck_assert_uint_eq(cfg.tcp_write_max, 1 << 20);
    setenv("FLX_TCP_NOTSENT_LOWAT", "0", 1);
    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    ck_assert_uint_eq(cfg.tcp_notsent_lowat, 0);
    setenv("FLX_TCP_NOTSENT_LOWAT", "1g", 1);
    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    ck_assert_uint_eq(cfg.tcp_notsent_lowat, 1 << 30);
    unsetenv("FLX_TCP_NOTSENT_LOWAT");
    ck_assert_int_eq(cfg.algo, FLX_ALGO_RING);
    ck_assert_int_eq(cfg.algo, 1);
    ck_assert_uint_eq(cfg.chunk_size, 1048576);
    ck_assert(fabs(cfg.timeout_s - 0.01) < 1e-15);
    ck_assert(cfg.connect_timeout_s == 120);
    ck_assert_int_eq(cfg.net, FLX_NET_TCP);
    ck_assert_int_eq(cfg.rank, 3);
    ck_assert_int_eq(cfg.size, 8);
    ck_assert_str_eq(cfg.root, "10.0.0.1:1234");
    ck_assert_str_eq(cfg.job_secret, "s3cret");
    ck_assert_int_eq(cfg.log_level, FLX_LOG_DEBUG);
    ck_assert_uint_eq(cfg.log_subsys, (1u << FLX_SUBSYS_NET) | (1u << FLX_SUBSYS_COLL));
    ck_assert_int_eq(cfg.calibrate, 0);
    ck_assert(fabs(cfg.alpha_s - 5e-6) < 1e-18);
    ck_assert(cfg.beta == 1e9); /* decimal: 1G = 1e9 bytes/s */
    ck_assert_uint_eq(cfg.tcp_sockbuf, 4 << 20);
    ck_assert(cfg.spin_s == 0);
    ck_assert(fabs(cfg.tcp_park_s - 250e-6) < 1e-18);
    ck_assert_int_eq(cfg.tcp_sockets, 1);
    /* untouched knobs keep their defaults */
    ck_assert(cfg.handshake_timeout_s == 5.0);

    setenv("FLX_ALGO", "tree", 1);
    setenv("FLX_NET", "ib", 1);
    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    ck_assert_int_eq(cfg.algo, FLX_ALGO_TREE);
    ck_assert_int_eq(cfg.net, FLX_NET_IB);
    setenv("FLX_ALGO", "RD", 1);
    setenv("FLX_NET", "auto", 1);
    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    ck_assert_int_eq(cfg.algo, FLX_ALGO_RD);
    ck_assert_int_eq(cfg.net, FLX_NET_AUTO);
}
END_TEST

/* The tcp backend's enumerated knobs, each value as it is stored:
 * FLX_TCP_SOCKETS as the count (0 for auto), FLX_TCP_LANE as FLX_TCP_LANE_*
 * (auto when unset; choices are case-blind). */
START_TEST(test_load_tcp_enums)
{
    static const struct { const char *name, *value; size_t off; int want; } cases[] = {
        {"FLX_TCP_SOCKETS", "auto", offsetof(flx_config_t, tcp_sockets), 0},
        {"FLX_TCP_SOCKETS", "1", offsetof(flx_config_t, tcp_sockets), 1},
        {"FLX_TCP_SOCKETS", "2", offsetof(flx_config_t, tcp_sockets), 2},
        {"FLX_TCP_LANE", NULL, offsetof(flx_config_t, tcp_lane), FLX_TCP_LANE_AUTO},
        {"FLX_TCP_LANE", "auto", offsetof(flx_config_t, tcp_lane), FLX_TCP_LANE_AUTO},
        {"FLX_TCP_LANE", "split", offsetof(flx_config_t, tcp_lane), FLX_TCP_LANE_SPLIT},
        {"FLX_TCP_LANE", "shared", offsetof(flx_config_t, tcp_lane), FLX_TCP_LANE_SHARED},
        {"FLX_TCP_LANE", "SHARED", offsetof(flx_config_t, tcp_lane), FLX_TCP_LANE_SHARED}};
    flx_config_t cfg;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got;
        if (cases[i].value)
            setenv(cases[i].name, cases[i].value, 1);
        else
            unsetenv(cases[i].name);
        ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
        memcpy(&got, (const char *)&cfg + cases[i].off, sizeof(got));
        ck_assert_msg(got == cases[i].want, "%s=%s: %d, expected %d", cases[i].name,
                      cases[i].value ? cases[i].value : "(unset)", got, cases[i].want);
        unsetenv(cases[i].name);
    }
}
END_TEST

/* each malformed value alone makes the load fail and leaves *cfg_p alone */
START_TEST(test_load_malformed)
{
    static const struct { const char *name, *value; } bad[] = {
        {"FLX_TIMEOUT", "abc"},       {"FLX_TIMEOUT", "-3s"},       {"FLX_TIMEOUT", "10 ms"},
        {"FLX_CHUNK_SIZE", "12q"},    {"FLX_CHUNK_SIZE", "-1"},     {"FLX_CHUNK_SIZE", ""},
        {"FLX_ALGO", "fast"},         {"FLX_ALGO", ""},             {"FLX_NET", "udp"},
        {"FLX_LOG_LEVEL", "loud"},    {"FLX_LOG_SUBSYS", "disk"},   {"FLX_RANK", "-3"},
        {"FLX_RANK", "two"},          {"FLX_RANK", "16777217"},     {"FLX_SIZE", "0"},
        {"FLX_CALIBRATE", "maybe"},   {"FLX_SPIN", "fast"},        {"FLX_SPIN", "-1us"},
        {"FLX_HANDSHAKE_TIMEOUT", "5h"}, {"FLX_CONNECT_TIMEOUT", "x"}, {"FLX_ALPHA", "fast"},
        {"FLX_BETA", "10Gbit"},       {"FLX_TCP_SOCKBUF", "4x"},    {"FLX_TCP_PARK", "soon"},
        {"FLX_TCP_PARK", "-5ms"},      {"FLX_TCP_PARK", "2s"},       {"FLX_TCP_SOCKETS", "3"},
        {"FLX_TCP_SOCKETS", "0"},      {"FLX_TCP_SOCKETS", "two"},   {"FLX_TCP_LANE", "both"},
        {"FLX_TCP_LANE", ""},          {"FLX_TCP_WRITE_MAX", "big"}, {"FLX_TCP_WRITE_MAX", "-64k"},
        {"FLX_TCP_NOTSENT_LOWAT", "2g"}, {"FLX_TCP_NOTSENT_LOWAT", "low"},
        {"FLX_IB_EAGER", "2m"},       {"FLX_IB_STAGE_SIZE", "128m"}, {"FLX_IB_STAGE_SLOTS", "-1"},
        {"FLX_IB_STAGE_SLOTS", "4097"},
        /* zero where zero makes no sense, and values that overflow to Inf */
        {"FLX_TIMEOUT", "0"},         {"FLX_CONNECT_TIMEOUT", "0s"}, {"FLX_HANDSHAKE_TIMEOUT", "0ms"},
        {"FLX_CHUNK_SIZE", "0"},      {"FLX_TIMEOUT", "1e308m"},    {"FLX_ALPHA", "1e308min"},
        {"FLX_BETA", "1e300G"},
        /* not plain decimal numbers: hex, blanks, signs; fractions of a byte */
        {"FLX_CHUNK_SIZE", "0x10000"}, {"FLX_CHUNK_SIZE", " 64k"},  {"FLX_CHUNK_SIZE", "1.9"},
        {"FLX_TCP_SOCKBUF", "0.3k"},  {"FLX_BETA", "0x10M"},       {"FLX_BETA", "-0"},
        {"FLX_CONNECT_TIMEOUT", "0x10"}, {"FLX_TIMEOUT", "+5s"},   {"FLX_SIZE", "+3"},
        {"FLX_SIZE", " 3"},           {"FLX_ALPHA", "0x1p-20"},
        /* a pipeline chunk so small that a job would crawl */
        {"FLX_CHUNK_SIZE", "1k"},     {"FLX_CHUNK_SIZE", "4095"},
    };
    char longroot[400];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        flx_config_t cfg, orig;

        memset(&cfg, 0x5c, sizeof(cfg));
        memcpy(&orig, &cfg, sizeof(cfg));
        setenv(bad[i].name, bad[i].value, 1);
        ck_assert_msg(flx_config_load(&cfg) == FLX_ERR_CONFIG, "%s='%s' not rejected",
                      bad[i].name, bad[i].value);
        ck_assert_msg(memcmp(&cfg, &orig, sizeof(cfg)) == 0, "%s='%s': output written",
                      bad[i].name, bad[i].value);
        unsetenv(bad[i].name);
        ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    }
    /* a string longer than its field is rejected, not truncated */
    memset(longroot, 'a', sizeof(longroot) - 1);
    longroot[sizeof(longroot) - 1] = '\0';
    setenv("FLX_ROOT", longroot, 1);
    {
        flx_config_t cfg;
        ck_assert_int_eq(flx_config_load(&cfg), FLX_ERR_CONFIG);
    }
}
END_TEST

START_TEST(test_config_set)
{
    flx_config_t cfg;

    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    ck_assert_int_eq(flx_config_set(&cfg, "NO_SUCH_KNOB", "1"), FLX_ERR_INVALID_ARG);
    ck_assert_int_eq(flx_config_set(&cfg, "FLX_TIMEOUT", "1s"), FLX_ERR_INVALID_ARG);
    ck_assert_int_eq(flx_config_set(&cfg, "", "1"), FLX_ERR_INVALID_ARG);
    ck_assert_int_eq(flx_config_set(&cfg, "TIMEOUT", NULL), FLX_ERR_INVALID_ARG);
    ck_assert(cfg.timeout_s == 30.0);

    ck_assert_int_eq(flx_config_set(&cfg, "TIMEOUT", "5s"), FLX_OK);
    ck_assert(cfg.timeout_s == 5.0);
    ck_assert_int_eq(flx_config_set(&cfg, "TIMEOUT", "bad"), FLX_ERR_CONFIG);
    ck_assert(cfg.timeout_s == 5.0);
    ck_assert_int_eq(flx_config_set(&cfg, "CHUNK_SIZE", "64KiB"), FLX_OK);
    ck_assert_uint_eq(cfg.chunk_size, 65536);
    ck_assert_int_eq(flx_config_set(&cfg, "CHUNK_SIZE", "12q"), FLX_ERR_CONFIG);
    ck_assert_uint_eq(cfg.chunk_size, 65536);
    /* a bounded size: the bound itself is fine, one byte more is not */
    ck_assert_int_eq(flx_config_set(&cfg, "IB_STAGE_SIZE", "64m"), FLX_OK);
    ck_assert_uint_eq(cfg.ib_stage_size, 64u << 20);
    ck_assert_int_eq(flx_config_set(&cfg, "IB_STAGE_SIZE", "67108865"), FLX_ERR_CONFIG);
    ck_assert_uint_eq(cfg.ib_stage_size, 64u << 20);
    ck_assert_int_eq(flx_config_set(&cfg, "ALGO", "hd"), FLX_OK);
    ck_assert_int_eq(cfg.algo, FLX_ALGO_HD);
    ck_assert_int_eq(flx_config_set(&cfg, "ALGO", "rd"), FLX_OK);
    ck_assert_int_eq(cfg.algo, FLX_ALGO_RD);
    ck_assert_int_eq(flx_config_set(&cfg, "ALGO", "fast"), FLX_ERR_CONFIG);
    ck_assert_int_eq(cfg.algo, FLX_ALGO_RD);
    ck_assert_int_eq(flx_config_set(&cfg, "RANK", "7"), FLX_OK);
    ck_assert_int_eq(cfg.rank, 7);
    ck_assert_int_eq(flx_config_set(&cfg, "RANK", "-3"), FLX_ERR_CONFIG);
    ck_assert_int_eq(cfg.rank, 7);
    ck_assert_int_eq(flx_config_set(&cfg, "RANK", ""), FLX_OK); /* empty = unset */
    ck_assert_int_eq(cfg.rank, -1);
    ck_assert_int_eq(flx_config_set(&cfg, "CALIBRATE", "off"), FLX_OK);
    ck_assert_int_eq(cfg.calibrate, 0);
    ck_assert_int_eq(flx_config_set(&cfg, "JOB_SECRET", "abc"), FLX_OK);
    ck_assert_str_eq(cfg.job_secret, "abc");
}
END_TEST

static char *print_config(const flx_config_t *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    ck_assert_ptr_nonnull(f);
    flx_config_print(f, cfg);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_ptr_nonnull(text);
    return text;
}

START_TEST(test_config_print)
{
    flx_config_t cfg;
    char *text;
    char line[64];

    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    text = print_config(&cfg);
    for (size_t i = 0; i < NKNOBS; i++) {
        snprintf(line, sizeof(line), "\nFLX_%s=", KNOBS[i]);
        ck_assert_msg(strstr(text, line) != NULL, "FLX_%s missing from:\n%s", KNOBS[i], text);
    }
    ck_assert_ptr_nonnull(strstr(text, "\nFLX_TIMEOUT=30s    # default: 30s\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nFLX_ALGO=auto    # default: auto\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nFLX_CHUNK_SIZE=512k    # default: 512k\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nFLX_JOB_SECRET=    # default: (unset)\n"));
    /* with nothing set, every value is written as its default is (10ms, not 0.01s; warn,
     * not WARN) */
    for (const char *p = strstr(text, "\nFLX_"); p != NULL; p = strstr(p + 1, "\nFLX_")) {
        char name[64], value[64], dflt[64];
        if (sscanf(p + 1, "FLX_%63[^=]=%63[^ \n]    # default: %63[^\n]", name, value, dflt) == 3)
            ck_assert_msg(strcmp(value, dflt) == 0, "FLX_%s=%s, default %s", name, value, dflt);
        else if (sscanf(p + 1, "FLX_%63[^=]=    # default: %63[^\n]", name, dflt) == 2)
            ck_assert_msg(strcmp(dflt, "(unset)") == 0 || dflt[0] == '\0',
                          "FLX_%s is empty, default %s", name, dflt);
        else
            ck_abort_msg("unreadable line: %.80s", p + 1);
    }
    ck_assert_ptr_nonnull(strstr(text, "\nFLX_SPIN=2ms    # default: 2ms\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nFLX_LOG_LEVEL=warn    # default: warn\n"));
    /* help text and choices */
    ck_assert_ptr_nonnull(strstr(text, "# a collective that makes no progress for this long"));
    ck_assert_ptr_nonnull(strstr(text, "# collective algorithm: auto|ring|tree|rd"));
    ck_assert_ptr_nonnull(strstr(text, "# choices: auto ring tree rd hd\n"));
    ck_assert_ptr_nonnull(strstr(text, "# choices: auto tcp ib\n"));
    ck_assert_ptr_nonnull(strstr(text, "# pipeline chunk"));
    free(text);

    /* a value from the environment is shown with its default */
    setenv("FLX_ALGO", "ring", 1);
    ck_assert_int_eq(flx_config_load(&cfg), FLX_OK);
    text = print_config(&cfg);
    ck_assert_ptr_nonnull(strstr(text, "\nFLX_ALGO=ring    # default: auto\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nFLX_TIMEOUT=30s    # default: 30s\n"));
    free(text);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* status names and strings                                                */
/* ---------------------------------------------------------------------- */

static const struct { flx_status_t st; const char *name, *text; } STATUSES[] = {
#define X_(name, value, text) {name, #name, text},
    FLX_STATUS_LIST(X_)
#undef X_
};
#define NSTATUS (sizeof(STATUSES) / sizeof(STATUSES[0]))

START_TEST(test_status)
{
    ck_assert_int_eq(NSTATUS, 15);
    ck_assert_int_eq(FLX_OK, 0);
    ck_assert_int_eq(FLX_INPROGRESS, 1);
    for (size_t i = 0; i < NSTATUS; i++) {
        const char *s = flx_status_string(STATUSES[i].st);
        const char *n = flx_status_name(STATUSES[i].st);

        ck_assert_ptr_nonnull(s);
        ck_assert_ptr_nonnull(n);
        ck_assert_int_gt(strlen(s), 0);
        ck_assert_str_eq(s, STATUSES[i].text);
        ck_assert_str_eq(n, STATUSES[i].name);
        ck_assert_int_eq(strncmp(n, "FLX_", 4), 0);
        if (i >= 2)
            ck_assert_int_lt(STATUSES[i].st, 0); /* errors are negative */
        for (size_t j = 0; j < i; j++) {
            ck_assert_int_ne(STATUSES[i].st, STATUSES[j].st);
            ck_assert_str_ne(s, flx_status_string(STATUSES[j].st));
            ck_assert_str_ne(n, flx_status_name(STATUSES[j].st));
        }
    }
    ck_assert_str_eq(flx_status_name(FLX_ERR_PEER_LOST), "FLX_ERR_PEER_LOST");
    ck_assert_str_eq(flx_status_string(FLX_ERR_PEER_LOST), "peer lost");
    ck_assert_str_eq(flx_status_string(FLX_ERR_CONFIG), "malformed configuration value");
    /* values outside the list get a fallback that is no real status's */
    {
        static const int unknown[] = {2, 42, -14, -100, 1 << 30, -(1 << 30)};
        for (size_t u = 0; u < sizeof(unknown) / sizeof(unknown[0]); u++) {
            const char *s = flx_status_string((flx_status_t)unknown[u]);
            const char *n = flx_status_name((flx_status_t)unknown[u]);

            ck_assert_ptr_nonnull(s);
            ck_assert_ptr_nonnull(n);
            ck_assert_int_gt(strlen(s), 0);
            ck_assert_int_gt(strlen(n), 0);
            for (size_t i = 0; i < NSTATUS; i++) {
                ck_assert_str_ne(s, STATUSES[i].text);
                ck_assert_str_ne(n, STATUSES[i].name);
            }
        }
    }
}
END_TEST

/* The coarse clock is the precise one a little behind (by a tick or so;
 * more when the host stalls the CPU that keeps time), never ahead, and it
 * moves. */
START_TEST(test_time_coarse)
{
    double start = flx_time_coarse(), c = start;

    for (int i = 0; i < 100000 && c == start; i++) {
        double before = flx_time_now();
        c = flx_time_coarse();
        double after = flx_time_now();
        ck_assert_msg(c <= after + 1e-9 && c > before - 1.0,
                      "coarse %.9f not within 1 s before [%.9f, %.9f]", c, before, after);
        if (c == start)
            usleep(100);
    }
    ck_assert_msg(c > start, "the coarse clock stood still for 100000 reads");
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tp = tcase_create("parsers");
    TCase *tl = tcase_create("load");
    TCase *ts = tcase_create("status");

    tcase_set_timeout(tp, 30);
    tcase_add_checked_fixture(tp, setup, teardown);
    tcase_add_test(tp, test_parse_size_valid);
    tcase_add_test(tp, test_parse_size_invalid);
    tcase_add_test(tp, test_parse_time);
    tcase_add_test(tp, test_parse_bool);
    tcase_add_test(tp, test_parse_int);
    tcase_add_test(tp, test_parse_log_level_subsys);
    suite_add_tcase(s, tp);

    tcase_set_timeout(tl, 30);
    tcase_add_checked_fixture(tl, setup, teardown);
    tcase_add_test(tl, test_load_defaults);
    tcase_add_test(tl, test_load_overrides);
    tcase_add_test(tl, test_load_tcp_enums);
    tcase_add_test(tl, test_load_malformed);
    tcase_add_test(tl, test_config_set);
    tcase_add_test(tl, test_config_print);
    suite_add_tcase(s, tl);

    tcase_set_timeout(ts, 30);
    tcase_add_test(ts, test_status);
    tcase_add_test(ts, test_time_coarse);
    suite_add_tcase(s, ts);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(config_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
