/* flxrun.c -- the local launcher: start N ranks of a program on this host.
 *
 *   flxrun -n N [-t|--timeout S] [--bind auto|core|none] [--] PROG [ARGS...]
 *
 * Contract:
 *  - Forks N children and execvp()s PROG in each, with stdin on /dev/null and
 *    FLX_RANK=i, FLX_SIZE=N, FLX_LOCAL_RANK=i, FLX_LOCAL_SIZE=N,
 *    FLX_ROOT=127.0.0.1:PORT (PORT free when probed) and FLX_JOB_SECRET=64 hex
 *    characters of fresh randomness.  A non-empty FLX_ROOT or FLX_JOB_SECRET
 *    already in flxrun's environment is passed through unchanged.
 *  - Every line a rank writes to stdout (stderr) appears on flxrun's stdout
 *    (stderr) prefixed "[i] ".  A last line without newline is flushed at EOF;
 *    lines longer than FLXRUN_LINE_MAX are split, each piece prefixed.
 *  - Each rank runs in its own process group (led by the rank), so stopping a
 *    rank also stops whatever it started.  Rank processes are reaped only at the
 *    end (their status is peeked with WNOWAIT), so their pids -- and so their
 *    group ids -- cannot be reused while flxrun may still signal them.
 *  - SIGINT, SIGTERM and SIGHUP are forwarded (same signal) to every rank's
 *    group; a second one sends SIGKILL.  SIGUSR1 and SIGUSR2 are forwarded
 *    and change nothing else (Slurm's --signal=USR1@T asks for a checkpoint).
 *  - Job control: SIGTSTP (Ctrl-Z) is forwarded, then flxrun stops itself
 *    (SIGSTOP); SIGCONT (fg, bg) is forwarded.  The ranks stop and go on with
 *    it, and the time stopped does not count toward --timeout, the grace
 *    period or the drain time.  (SIGTTOU keeps its default: caught, a write
 *    to the terminal from the background would be restarted and raise it
 *    again, forever.)
 *  - The first rank that exits non-zero or dies by a signal stops the job:
 *    SIGTERM to every group, SIGKILL after FLXRUN_KILL_GRACE_S seconds.
 *  - --timeout S stops the job the same way after S seconds and exits 124.
 *  - --bind: with `core' rank i runs on its own block of the CPUs flxrun may
 *    use (sched_getaffinity), set before the exec: whole cores [i*K/N,
 *    (i+1)*K/N) of their K cores while N <= K, else CPUs [i*C/N, (i+1)*C/N)
 *    of the C cut at the end of a core, each in the order package, core,
 *    thread that sysfs gives (cpumap.h; with one thread a core, CPU number
 *    order); N > C is bad usage.  `none' leaves the ranks where flxrun is.
 *    The default, `auto', binds as `core' when N <= C; with more ranks than
 *    CPUs and N a multiple of the K cores it puts rank i on every thread of
 *    core i mod K, shared, as `mpirun --map-by core --bind-to
 *    core:overload-allowed' (else it leaves them unbound: a core with one
 *    rank more than the others would hold the job back).  Unbound, two
 *    spinning ranks often share one core: every other call then waits for a
 *    context switch (a 2-rank 512 B allreduce, mean 8.4-9.2 us bound, 18-22
 *    us on one core); and 4 ranks left to the scheduler on 2 CPUs often put
 *    ring neighbours on one CPU, which then takes every step's two halves in
 *    turn (a 4-rank ring allgather of 4 MiB: 3.3-3.5 ms unbound, 2.0-2.1
 *    with ranks 0, 2 on one CPU and 1, 3 on the other).
 *  - --report-bindings prints one line per rank to stderr before the ranks
 *    start: "flxrun: rank i: CPUs LIST (K cores)" (after a line saying the
 *    cores are shared where N > C), or one line saying why the ranks are
 *    not bound.
 *  - Exit status: 0 if every rank exited 0; else the first failure's exit code
 *    (128+signo if it was killed); 124 on timeout; 128+signo if flxrun was
 *    interrupted and no rank failed; 2 on bad usage; 1 if the job could not be
 *    started, or if every rank exited 0 but their output could not be written
 *    (a full disk, a closed stdout; not a pipe whose reader left, as with
 *    `| head`).  A rank whose PROG cannot be executed exits 127.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>                                /* isfinite */
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpumap.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

#define FLXRUN_MAX_RANKS     2048   /* a communicator's most (FLX_SIZE) */
#define FLXRUN_LINE_MAX      4096   /* bytes of one output line before a split */
#define FLXRUN_KILL_GRACE_S  3.0    /* SIGTERM -> SIGKILL */
#define FLXRUN_DRAIN_S       1.0    /* after SIGKILL, wait this long for pipes */
#define FLXRUN_IDLE_S        1.0    /* every rank gone, pipes open, nothing moves:
                                       leftovers of the ranks hold them */
#define FLXRUN_SECRET_BYTES  32
#define FLXRUN_EXIT_USAGE    2
#define FLXRUN_EXIT_START    1
#define FLXRUN_EXIT_OUTPUT   1   /* every rank succeeded, their output was lost */
#define FLXRUN_EXIT_TIMEOUT  124
#define FLXRUN_EXIT_NOEXEC   127

/* Write end of the self-pipe.  The one mutable global: the signal handler
 * has no other way to reach the poll loop. */
static int flxrun_sig_wfd = -1;

static const int flxrun_fwd_signals[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGUSR1,
                                         SIGUSR2, SIGTSTP, SIGCONT};

/* SHARED is auto with more ranks than CPUs and K cores dividing them:
 * rank i on core i mod K. */
typedef enum {
    FLXRUN_BIND_AUTO,
    FLXRUN_BIND_CORE,
    FLXRUN_BIND_SHARED,
    FLXRUN_BIND_NONE
} flxrun_bind_t;

typedef struct {
    long nranks;
    double timeout_s;            /* 0: none */
    flxrun_bind_t bind;          /* resolved to CORE, SHARED or NONE before the ranks start */
    bool report;                 /* --report-bindings */
    const char *unbound_why;     /* why the ranks run unbound, with NONE */
    cpu_set_t cpus;              /* the CPUs flxrun may use, with CORE and SHARED */
    long ncpus;
    cpumap_t map;                /* their cores and packages, with CORE and SHARED */
    char **prog_argv;            /* NULL-terminated, points into argv */
} flxrun_opts_t;

/* One captured pipe: a rank's stdout or stderr. */
typedef struct {
    int fd;                      /* read end; -1 once closed */
    int dst_fd;                  /* STDOUT_FILENO or STDERR_FILENO */
    long rank;
    size_t len;                  /* bytes pending in buf (no newline among them) */
    bool split;                  /* the last piece emitted was a full buffer */
    char buf[FLXRUN_LINE_MAX];
} flxrun_stream_t;

typedef struct {
    pid_t pid;                   /* also the rank's process group id; 0 if never started */
    bool exited;                 /* status known (zombie not yet reaped) */
} flxrun_rank_t;

typedef struct {
    const flxrun_opts_t *opts;
    long nstarted;
    long nexited;
    long nopen;                  /* streams still open */
    flxrun_rank_t *ranks;        /* [nranks] */
    flxrun_stream_t *streams;    /* [2 * nranks]: stdout, stderr of rank i at 2i, 2i+1 */
    struct pollfd *pfds;         /* [1 + 2 * nranks]: self-pipe, then the streams */
    int sig_rfd;
    int exit_code;               /* -1 until decided */
    int interrupt_signo;         /* first forwarded signal, 0 if none */
    int nsignals;
    bool stopping;               /* SIGTERM sent to every group */
    bool killed;                 /* SIGKILL sent to every group */
    double timeout_deadline;     /* monotonic seconds; 0: none */
    double kill_deadline;
    double drain_deadline;
    double last_progress;        /* output last read from a rank or written on */
    unsigned out_closed;         /* 1 << fd: stdout or stderr was closed at the start */
    int out_errno[3];            /* [fd]: why writing the ranks' output there failed; 0 */
} flxrun_job_t;

/* ---- small helpers ------------------------------------------------------ */

/* flxrun's own message while the job runs: written only if stderr takes it
 * now (a reader holding the output back must not stop the timeout, the
 * forwarding of signals or the kill), else dropped. */
static void flxrun_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void flxrun_say(const char *fmt, ...)
{
    char buf[512];
    struct pollfd p = {.fd = STDERR_FILENO, .events = POLLOUT};
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n <= 0 || poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT))
        return;
    (void)write(STDERR_FILENO, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

static double flxrun_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define FLXRUN_USAGE_LINE \
    "usage: flxrun -n N [-t|--timeout S] [--bind auto|core|none] [--report-bindings]\n" \
    "              [--] PROG [ARGS...]\n"

static void flxrun_usage(FILE *f)
{
    fprintf(f,
            FLXRUN_USAGE_LINE
            "Start N local ranks of PROG with FLX_RANK, FLX_SIZE, FLX_LOCAL_RANK,\n"
            "FLX_LOCAL_SIZE, FLX_ROOT and FLX_JOB_SECRET set; prefix their output\n"
            "lines with \"[rank] \".\n"
            "  -n, -np, --np N     number of ranks (1..%d)\n"
            "  -t, --timeout S     stop the job after S seconds (fractional ok), exit 124\n"
            "      --bind MODE     core: rank i runs on whole cores [i*K/N, (i+1)*K/N) of the\n"
            "                      K cores flxrun may use (all their threads), by package;\n"
            "                      with N > K, on threads [i*C/N, (i+1)*C/N) of the C in\n"
            "                      core order, within one core (N <= C); none: unbound;\n"
            "                      auto (default): core if N <= C, else rank i on core\n"
            "                      i mod K, shared, where K divides N, else none\n"
            "      --report-bindings  print each rank's CPUs to stderr before it starts\n"
            "  -h, --help          this help\n"
            "      --version       print the version\n"
            "Ctrl-C, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 go to every rank;\n"
            "Ctrl-Z stops every rank and fg/bg lets them go on (the time stopped is\n"
            "not counted toward --timeout).  The first rank that fails stops the rest.\n",
            FLXRUN_MAX_RANKS);
}

/* ---- options ------------------------------------------------------------ */

static bool flxrun_parse_nranks(const char *s, long *nranks_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 1 || v > FLXRUN_MAX_RANKS)
        return false;
    *nranks_p = v;
    return true;
}

static bool flxrun_parse_timeout(const char *s, double *timeout_p)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v <= 0 || v > 1e9)
        return false;
    *timeout_p = v;
    return true;
}

/* Returns -1 when the job should run, else the exit code for main (help,
 * version: 0; bad usage: 2, message already printed). */
static int flxrun_opts_parse(int argc, char **argv, flxrun_opts_t *opts)
{
    int i;

    opts->nranks = 0;
    opts->timeout_s = 0;
    opts->bind = FLXRUN_BIND_AUTO;
    opts->report = false;
    opts->unbound_why = "--bind none";
    opts->ncpus = 0;
    opts->prog_argv = NULL;

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = NULL;
        enum { OPT_N, OPT_TIMEOUT, OPT_BIND } which;

        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        if (arg[0] != '-' || arg[1] == '\0')
            break;                                   /* PROG */
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            flxrun_usage(stdout);
            return 0;
        }
        if (strcmp(arg, "--version") == 0) {
            printf("flxrun (flexcoll) %s\n", PACKAGE_VERSION);
            return 0;
        }
        if (strcmp(arg, "--report-bindings") == 0) {
            opts->report = true;
            continue;
        }
        if (strcmp(arg, "-n") == 0 || strcmp(arg, "-np") == 0 || strcmp(arg, "--np") == 0) {
            which = OPT_N;
        } else if (strncmp(arg, "--np=", 5) == 0) {
            which = OPT_N;
            val = arg + 5;
        } else if (strncmp(arg, "-n", 2) == 0 && arg[2] >= '0' && arg[2] <= '9') {
            which = OPT_N;
            val = arg + 2;
        } else if (strcmp(arg, "-t") == 0 || strcmp(arg, "--timeout") == 0) {
            which = OPT_TIMEOUT;
        } else if (strncmp(arg, "--timeout=", 10) == 0) {
            which = OPT_TIMEOUT;
            val = arg + 10;
        } else if (strcmp(arg, "--bind") == 0) {
            which = OPT_BIND;
        } else if (strncmp(arg, "--bind=", 7) == 0) {
            which = OPT_BIND;
            val = arg + 7;
        } else if (strcmp(arg, "--hosts") == 0 || strncmp(arg, "--hosts=", 8) == 0) {
            fprintf(stderr, "flxrun: --hosts is not supported yet; only local ranks\n");
            return FLXRUN_EXIT_USAGE;
        } else {
            fprintf(stderr, "flxrun: unknown option '%s'\n", arg);
            goto err_usage;
        }
        if (val == NULL) {
            if (i + 1 >= argc) {
                fprintf(stderr, "flxrun: option '%s' needs a value\n", arg);
                goto err_usage;
            }
            val = argv[++i];
        }
        if (which == OPT_N && !flxrun_parse_nranks(val, &opts->nranks)) {
            fprintf(stderr, "flxrun: bad number of ranks '%s' (want an integer 1..%d)\n",
                    val, FLXRUN_MAX_RANKS);
            goto err_usage;
        }
        if (which == OPT_TIMEOUT && !flxrun_parse_timeout(val, &opts->timeout_s)) {
            fprintf(stderr, "flxrun: bad timeout '%s' (want seconds > 0)\n", val);
            goto err_usage;
        }
        if (which == OPT_BIND) {
            if (strcmp(val, "auto") == 0) {
                opts->bind = FLXRUN_BIND_AUTO;
            } else if (strcmp(val, "core") == 0) {
                opts->bind = FLXRUN_BIND_CORE;
            } else if (strcmp(val, "none") == 0) {
                opts->bind = FLXRUN_BIND_NONE;
            } else {
                fprintf(stderr, "flxrun: bad --bind '%s' (want auto, core or none)\n", val);
                goto err_usage;
            }
        }
    }

    if (opts->nranks == 0) {
        fprintf(stderr, "flxrun: missing -n N\n");
        goto err_usage;
    }
    if (i >= argc) {
        fprintf(stderr, "flxrun: missing PROG\n");
        goto err_usage;
    }
    opts->prog_argv = &argv[i];
    if (opts->bind != FLXRUN_BIND_NONE) {
        if (sched_getaffinity(0, sizeof(opts->cpus), &opts->cpus) < 0) {
            if (opts->bind == FLXRUN_BIND_CORE) {
                fprintf(stderr, "flxrun: --bind core: cannot read this process's CPUs: %s\n",
                        strerror(errno));
                return FLXRUN_EXIT_START;
            }
            opts->bind = FLXRUN_BIND_NONE;
            opts->unbound_why = "this process's CPUs unreadable";
            return -1;
        }
        opts->ncpus = CPU_COUNT(&opts->cpus);
        if (opts->bind == FLXRUN_BIND_CORE && opts->nranks > opts->ncpus) {
            fprintf(stderr, "flxrun: --bind core: %ld ranks on %ld CPUs cannot have one each "
                            "(--bind none lets them share)\n", opts->nranks, opts->ncpus);
            goto err_usage;
        }
        opts->bind = opts->nranks <= opts->ncpus ? FLXRUN_BIND_CORE : FLXRUN_BIND_SHARED;
        cpumap_read(&opts->map, &opts->cpus, CPUMAP_SYSFS);
        /* cores holding one rank more than others would hold the job back
         * (3 ranks on 2 cores: half a core each where unbound gets 2/3) */
        if (opts->bind == FLXRUN_BIND_SHARED && opts->nranks % opts->map.ncores != 0) {
            opts->bind = FLXRUN_BIND_NONE;
            opts->unbound_why = "more ranks than CPUs, not a multiple of the cores";
        }
    }
    return -1;

err_usage:
    fprintf(stderr, FLXRUN_USAGE_LINE "(flxrun --help for more)\n");
    return FLXRUN_EXIT_USAGE;
}

/* ---- job environment ------------------------------------------------------ */

/* Finds a TCP port on 127.0.0.1 that is free right now.  Returns the port, or
 * 0 with errno set. */
static int flxrun_port_probe(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t salen = sizeof(sa);
    int port = 0;
    int fd;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        goto err_close_fd;
    if (getsockname(fd, (struct sockaddr *)&sa, &salen) < 0)
        goto err_close_fd;
    port = ntohs(sa.sin_port);

err_close_fd:
    close(fd);
    return port;
}

/* Fills buf with len random bytes.  Returns 0, or -1 with errno set. */
static int flxrun_random_fill(unsigned char *buf, size_t len)
{
    size_t got = 0;
    int fd;

    while (got < len) {
        ssize_t n = getrandom(buf + got, len - got, 0);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != ENOSYS)
                return -1;
            break;                                   /* old kernel: /dev/urandom */
        }
        got += (size_t)n;
    }
    if (got == len)
        return 0;

    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            goto err_close_fd;
        }
        got += (size_t)n;
    }
    close(fd);
    return 0;

err_close_fd:
    close(fd);
    return -1;
}

static bool flxrun_env_is_set(const char *name)
{
    const char *v = getenv(name);

    return v != NULL && v[0] != '\0';
}

/* Sets the job-wide FLX_* variables in flxrun's own environment (inherited by
 * the ranks).  Returns 0, or -1 after printing why. */
static int flxrun_env_setup(long nranks)
{
    char num[32];

    snprintf(num, sizeof(num), "%ld", nranks);
    if (setenv("FLX_SIZE", num, 1) < 0 || setenv("FLX_LOCAL_SIZE", num, 1) < 0)
        goto err_setenv;

    if (!flxrun_env_is_set("FLX_ROOT")) {
        char root[64];
        int port = flxrun_port_probe();

        if (port == 0) {
            fprintf(stderr, "flxrun: cannot find a free port on 127.0.0.1: %s\n",
                    strerror(errno));
            return -1;
        }
        snprintf(root, sizeof(root), "127.0.0.1:%d", port);
        if (setenv("FLX_ROOT", root, 1) < 0)
            goto err_setenv;
    }

    if (!flxrun_env_is_set("FLX_JOB_SECRET")) {
        static const char hex[] = "0123456789abcdef";
        unsigned char secret[FLXRUN_SECRET_BYTES];
        char text[2 * FLXRUN_SECRET_BYTES + 1];
        int rc;
        size_t i;

        if (flxrun_random_fill(secret, sizeof(secret)) < 0) {
            fprintf(stderr, "flxrun: cannot get random bytes for FLX_JOB_SECRET: %s\n",
                    strerror(errno));
            return -1;
        }
        for (i = 0; i < sizeof(secret); i++) {
            text[2 * i] = hex[secret[i] >> 4];
            text[2 * i + 1] = hex[secret[i] & 0xf];
        }
        text[2 * sizeof(secret)] = '\0';
        rc = setenv("FLX_JOB_SECRET", text, 1);
        explicit_bzero(secret, sizeof(secret));
        explicit_bzero(text, sizeof(text));
        if (rc < 0)
            goto err_setenv;
    }
    return 0;

err_setenv:
    fprintf(stderr, "flxrun: setenv: %s\n", strerror(errno));
    return -1;
}

/* Makes sure fds 0, 1 and 2 are open, so pipes never land on them.
 * Returns a mask of those closed before (1 << fd): output for them is lost,
 * not written to the /dev/null that holds their place. */
static unsigned flxrun_stdio_ensure(void)
{
    unsigned closed = 0;
    int fd;

    do {
        fd = open("/dev/null", O_RDWR);
        if (fd >= 0 && fd <= STDERR_FILENO)
            closed |= 1u << fd;
    } while (fd >= 0 && fd <= STDERR_FILENO);
    if (fd > STDERR_FILENO)
        close(fd);
    return closed;
}

/* Raises the soft fd limit if 2 pipes per rank would not fit. */
static void flxrun_nofile_raise(long nranks)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)(4 * nranks + 64);

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want) ? want : rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
}

/* ---- signals -------------------------------------------------------------- */

static void flxrun_signal_handler(int signo)
{
    int saved_errno = errno;
    unsigned char b = (unsigned char)signo;
    ssize_t n = write(flxrun_sig_wfd, &b, 1);      /* full pipe: a wakeup is pending anyway */

    (void)n;
    errno = saved_errno;
}

/* Creates the self-pipe and installs the handlers.  Returns the read end, or
 * -1 after printing why. */
static int flxrun_signals_install(void)
{
    struct sigaction sa;
    int fds[2];
    size_t i;

    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
        fprintf(stderr, "flxrun: pipe: %s\n", strerror(errno));
        return -1;
    }
    flxrun_sig_wfd = fds[1];

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = flxrun_signal_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (i = 0; i < sizeof(flxrun_fwd_signals) / sizeof(flxrun_fwd_signals[0]); i++)
        sigaction(flxrun_fwd_signals[i], &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);

    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);                   /* a closed stdout must not kill us */
    return fds[0];
}

static void flxrun_signals_block(sigset_t *old_p)
{
    sigset_t set;
    size_t i;

    sigemptyset(&set);
    for (i = 0; i < sizeof(flxrun_fwd_signals) / sizeof(flxrun_fwd_signals[0]); i++)
        sigaddset(&set, flxrun_fwd_signals[i]);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, old_p);
}

/* In a child before exec: default dispositions, the mask flxrun started with. */
static void flxrun_signals_reset(const sigset_t *old)
{
    size_t i;

    for (i = 0; i < sizeof(flxrun_fwd_signals) / sizeof(flxrun_fwd_signals[0]); i++)
        signal(flxrun_fwd_signals[i], SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, old, NULL);
}

/* ---- ranks ---------------------------------------------------------------- */

/* Binds the calling rank to its block of opts->cpus (cpumap_rank).  0, or
 * -1 after one line. */
static int flxrun_rank_bind(const flxrun_opts_t *opts, long rank)
{
    cpu_set_t mine;
    char list[1024];

    cpumap_rank(&opts->map, opts->nranks, rank, &mine);
    if (sched_setaffinity(0, sizeof(mine), &mine) < 0) {
        int err = errno;

        dprintf(STDERR_FILENO, "flxrun: cannot bind rank %ld to CPUs %s of %ld: %s "
                               "(--bind none runs unbound)\n",
                rank, cpumap_list(&mine, list, sizeof(list)), opts->ncpus, strerror(err));
        return -1;
    }
    return 0;
}

/* --report-bindings: each rank's CPUs, or why there are none, on stderr. */
static void flxrun_report_bindings(const flxrun_opts_t *opts)
{
    char list[1024];

    if (opts->bind == FLXRUN_BIND_NONE) {
        cpu_set_t here;

        if (sched_getaffinity(0, sizeof(here), &here) < 0)
            CPU_ZERO(&here);
        fprintf(stderr, "flxrun: %ld rank%s not bound (%s): CPUs %s\n", opts->nranks,
                opts->nranks == 1 ? "" : "s", opts->unbound_why,
                cpumap_list(&here, list, sizeof(list)));
        return;
    }
    fprintf(stderr, "flxrun: %s\n", cpumap_describe(&opts->map, list, sizeof(list)));
    if (opts->bind == FLXRUN_BIND_SHARED)
        fprintf(stderr, "flxrun: %ld ranks on %ld CPUs: rank i on core i mod %d, shared\n",
                opts->nranks, opts->ncpus, opts->map.ncores);
    for (long r = 0; r < opts->nranks; r++) {
        cpu_set_t set;
        int cores = cpumap_rank(&opts->map, opts->nranks, r, &set);

        fprintf(stderr, "flxrun: rank %ld: CPUs %s (%d core%s)\n", r,
                cpumap_list(&set, list, sizeof(list)), cores, cores == 1 ? "" : "s");
    }
}

/* Runs in the child: never returns. */
static void flxrun_rank_exec(const flxrun_opts_t *opts, long rank, int out_wfd, int err_wfd,
                             const sigset_t *old_mask, pid_t parent)
{
    char num[32];
    int null_fd;

    flxrun_signals_reset(old_mask);
    (void)setpgid(0, 0);
    /* flxrun killed outright (SIGKILL) cannot stop the ranks: they go too */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
        _exit(FLXRUN_EXIT_NOEXEC);

    null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0 && null_fd != STDIN_FILENO) {
        dup2(null_fd, STDIN_FILENO);
        close(null_fd);
    }
    if (dup2(out_wfd, STDOUT_FILENO) < 0 || dup2(err_wfd, STDERR_FILENO) < 0)
        _exit(FLXRUN_EXIT_NOEXEC);

    snprintf(num, sizeof(num), "%ld", rank);
    if (setenv("FLX_RANK", num, 1) < 0 || setenv("FLX_LOCAL_RANK", num, 1) < 0) {
        dprintf(STDERR_FILENO, "flxrun: setenv: %s\n", strerror(errno));
        _exit(FLXRUN_EXIT_NOEXEC);
    }
    if (opts->bind != FLXRUN_BIND_NONE && flxrun_rank_bind(opts, rank) < 0)
        _exit(FLXRUN_EXIT_NOEXEC);

    execvp(opts->prog_argv[0], opts->prog_argv);
    dprintf(STDERR_FILENO, "flxrun: cannot execute %s: %s\n", opts->prog_argv[0],
            strerror(errno));
    _exit(FLXRUN_EXIT_NOEXEC);
}

/* Starts rank i with its two pipes.  Returns 0, or -1 after printing why. */
static int flxrun_rank_start(flxrun_job_t *job, long rank, const sigset_t *old_mask)
{
    flxrun_stream_t *out = &job->streams[2 * rank];
    flxrun_stream_t *err = &job->streams[2 * rank + 1];
    int out_fds[2], err_fds[2];
    pid_t pid, parent;

    if (pipe2(out_fds, O_CLOEXEC) < 0)
        goto err_print;
    if (pipe2(err_fds, O_CLOEXEC) < 0)
        goto err_close_out;

    parent = getpid();
    pid = fork();
    if (pid < 0)
        goto err_close_err;
    if (pid == 0)
        flxrun_rank_exec(job->opts, rank, out_fds[1], err_fds[1], old_mask, parent);

    (void)setpgid(pid, pid);                         /* also done by the child: no race */
    close(out_fds[1]);
    close(err_fds[1]);
    fcntl(out_fds[0], F_SETFL, O_NONBLOCK);
    fcntl(err_fds[0], F_SETFL, O_NONBLOCK);

    job->ranks[rank].pid = pid;
    out->fd = out_fds[0];
    out->dst_fd = STDOUT_FILENO;
    out->rank = rank;
    err->fd = err_fds[0];
    err->dst_fd = STDERR_FILENO;
    err->rank = rank;
    job->pfds[1 + 2 * rank] = (struct pollfd){.fd = out->fd, .events = POLLIN};
    job->pfds[2 + 2 * rank] = (struct pollfd){.fd = err->fd, .events = POLLIN};
    job->nopen += 2;
    job->nstarted++;
    return 0;

err_close_err:
    close(err_fds[0]);
    close(err_fds[1]);
err_close_out:
    close(out_fds[0]);
    close(out_fds[1]);
err_print:
    fprintf(stderr, "flxrun: cannot start rank %ld: %s\n", rank, strerror(errno));
    return -1;
}

/* Sends signo to the process group of every started rank.  Ranks are only
 * reaped at the end, so their group ids still belong to this job. */
static void flxrun_job_signal(flxrun_job_t *job, int signo)
{
    long i;

    for (i = 0; i < job->nstarted; i++)
        (void)killpg(job->ranks[i].pid, signo);
}

/* SIGTERM to everybody, SIGKILL after the grace period. */
static void flxrun_job_stop(flxrun_job_t *job)
{
    if (job->stopping)
        return;
    job->stopping = true;
    job->kill_deadline = flxrun_now() + FLXRUN_KILL_GRACE_S;
    flxrun_job_signal(job, SIGTERM);
}

static void flxrun_job_kill(flxrun_job_t *job)
{
    if (job->killed)
        return;
    job->stopping = true;
    job->killed = true;
    job->drain_deadline = flxrun_now() + FLXRUN_DRAIN_S;
    flxrun_job_signal(job, SIGKILL);
}

static void flxrun_rank_exited(flxrun_job_t *job, long rank, const siginfo_t *info)
{
    int code;

    job->ranks[rank].exited = true;
    job->nexited++;
    if (info->si_code == CLD_EXITED) {
        if (info->si_status == 0)
            return;
        code = info->si_status;
    } else {
        code = 128 + info->si_status;
    }
    if (job->exit_code >= 0)
        return;                                      /* not the first failure */
    job->exit_code = code;
    if (!job->stopping && job->interrupt_signo == 0) {
        if (info->si_code == CLD_EXITED)
            flxrun_say("flxrun: rank %ld exited with status %d; stopping the other ranks\n",
                    rank, info->si_status);
        else
            flxrun_say("flxrun: rank %ld killed by signal %d (%s); stopping the other ranks\n",
                    rank, info->si_status, strsignal(info->si_status));
    }
    if (job->interrupt_signo != 0 && !job->stopping) {
        /* every rank already has the forwarded signal: a second one (TERM)
         * would run their handlers twice; SIGKILL after the grace period */
        job->stopping = true;
        job->kill_deadline = flxrun_now() + FLXRUN_KILL_GRACE_S;
        return;
    }
    flxrun_job_stop(job);
}

/* Peeks at every rank that has not exited yet; leaves the zombies in place. */
static void flxrun_job_scan(flxrun_job_t *job)
{
    long i;

    for (i = 0; i < job->nstarted; i++) {
        siginfo_t info;

        if (job->ranks[i].exited)
            continue;
        memset(&info, 0, sizeof(info));
        if (waitid(P_PID, (id_t)job->ranks[i].pid, &info, WEXITED | WNOHANG | WNOWAIT) < 0) {
            if (errno == ECHILD) {                   /* cannot happen; do not hang on it */
                info.si_code = CLD_EXITED;
                info.si_status = FLXRUN_EXIT_NOEXEC;
                flxrun_rank_exited(job, i, &info);
            }
            continue;
        }
        if (info.si_pid == 0)
            continue;                                /* still running */
        flxrun_rank_exited(job, i, &info);
    }
}

/* Waits for every started rank (they are zombies or about to be). */
static void flxrun_job_reap(flxrun_job_t *job)
{
    long i;

    for (i = 0; i < job->nstarted; i++) {
        while (waitpid(job->ranks[i].pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
}

/* ---- signals and deadlines ------------------------------------------------ */

static bool flxrun_job_signals_drain(flxrun_job_t *job);

/* The job ends in failure: a timeout, a rank that failed, a forwarded
 * signal (not the stop that reaps leftovers after every rank succeeded). */
static bool flxrun_job_cut_short(const flxrun_job_t *job)
{
    return job->exit_code >= 0 || job->interrupt_signo != 0;
}

/* Acts on the deadlines that have passed (the timeout, SIGKILL after the
 * grace period); returns the next one (monotonic seconds), or -1. */
static double flxrun_job_deadlines(flxrun_job_t *job)
{
    double now = flxrun_now(), next = -1;

    if (!job->stopping && job->timeout_deadline > 0) {
        if (now >= job->timeout_deadline) {
            if (job->exit_code < 0)
                job->exit_code = FLXRUN_EXIT_TIMEOUT;
            flxrun_job_stop(job);
            flxrun_say("flxrun: timeout after %g s; stopping %ld ranks\n",
                    job->opts->timeout_s, job->nstarted - job->nexited);
        } else {
            next = job->timeout_deadline;
        }
    }
    if (job->stopping && !job->killed) {
        if (now >= job->kill_deadline)
            flxrun_job_kill(job);
        else
            next = job->kill_deadline;
    }
    if (job->nexited == job->nstarted) {
        /* a job cut short whose ranks are all gone: what a stuck reader
         * still holds back is dropped a drain time from now (or the kill) */
        if (flxrun_job_cut_short(job) && job->drain_deadline == 0)
            job->drain_deadline = now + FLXRUN_DRAIN_S;
        if (job->drain_deadline > 0 && (next < 0 || job->drain_deadline < next))
            next = job->drain_deadline;
    }
    return next;
}

/* The poll timeout (ms) until deadline next (-1: none). */
static int flxrun_poll_ms(double next)
{
    double now = flxrun_now();

    if (next < 0)
        return -1;
    if (next - now > 60.0)
        return 60000;                                /* far deadline: just look again */
    return next <= now ? 0 : (int)((next - now) * 1000.0) + 1;   /* round up */
}

/* ---- output --------------------------------------------------------------- */

/* Writes all of buf to fd, PIPE_BUF bytes at a time once poll says fd takes
 * them (a pipe then takes them without blocking), so that while a reader
 * holds the output back, signals are still forwarded and the timeout and
 * the kill still come.  Output that cannot be written is dropped and the
 * job keeps running: quietly where a pipe's reader left (`| head`), else
 * (a full disk, a closed stdout) remembered in out_errno, which fails a
 * job that succeeds. */
static void flxrun_write_all(flxrun_job_t *job, int fd, const char *buf, size_t len)
{
    if (job->out_errno[fd] != 0)
        return;
    if (job->out_closed & (1u << fd)) {
        job->out_errno[fd] = EBADF;
        return;
    }
    while (len > 0) {
        struct pollfd p[2] = {{.fd = fd, .events = POLLOUT}, {.fd = job->sig_rfd, .events = POLLIN}};
        ssize_t n;

        /* a job cut short, everybody gone, the drain time up: the rest is
         * dropped (after a job that succeeded, the reader gets it all) */
        if (flxrun_job_cut_short(job) && job->nexited == job->nstarted &&
            job->drain_deadline > 0 && flxrun_now() >= job->drain_deadline)
            return;
        if (poll(p, 2, flxrun_poll_ms(flxrun_job_deadlines(job))) < 0 && errno != EINTR)
            return;
        if (p[1].revents & POLLIN && flxrun_job_signals_drain(job))
            flxrun_job_scan(job);
        if (p[0].revents & POLLNVAL) {
            job->out_errno[fd] = EBADF;
            return;
        }
        if (p[0].revents & POLLERR) /* a pipe whose reader left */
            return;
        if (!(p[0].revents & (POLLOUT | POLLHUP)))
            continue;
        n = write(fd, buf, len < PIPE_BUF ? len : PIPE_BUF);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            if (errno != EPIPE)
                job->out_errno[fd] = errno;
            return;
        }
        job->last_progress = flxrun_now();
        buf += n;
        len -= (size_t)n;
    }
}

/* Writes "[rank] " + len bytes of line + "\n". */
static void flxrun_stream_emit(flxrun_job_t *job, const flxrun_stream_t *s, const char *line,
                               size_t len)
{
    char out[FLXRUN_LINE_MAX + 32];
    int plen = snprintf(out, sizeof(out), "[%ld] ", s->rank);

    memcpy(out + plen, line, len);
    out[(size_t)plen + len] = '\n';
    flxrun_write_all(job, s->dst_fd, out, (size_t)plen + len + 1);
}

static void flxrun_stream_close(flxrun_job_t *job, flxrun_stream_t *s, struct pollfd *pfd)
{
    if (s->len > 0)
        flxrun_stream_emit(job, s, s->buf, s->len);
    s->len = 0;
    close(s->fd);
    s->fd = -1;
    pfd->fd = -1;
    job->nopen--;
}

/* Reads what is there and emits every complete line; splits a full buffer. */
static void flxrun_stream_read(flxrun_job_t *job, flxrun_stream_t *s, struct pollfd *pfd)
{
    ssize_t n = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
    size_t start = 0;
    size_t i;

    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        flxrun_stream_close(job, s, pfd);
        return;
    }
    if (n == 0) {
        flxrun_stream_close(job, s, pfd);
        return;
    }
    job->last_progress = flxrun_now();
    s->len += (size_t)n;
    for (i = s->len - (size_t)n; i < s->len; i++) {
        if (s->buf[i] == '\n') {
            /* a newline right after a split ends the piece already out */
            if (!(s->split && i == 0))
                flxrun_stream_emit(job, s, s->buf + start, i - start);
            s->split = false;
            start = i + 1;
        }
    }
    if (s->len > 0)
        s->split = false;
    if (start == 0 && s->len == sizeof(s->buf)) {
        flxrun_stream_emit(job, s, s->buf, s->len);       /* over-long line: split it */
        start = s->len;
        s->split = true;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

/* ---- the job -------------------------------------------------------------- */

/* Ctrl-Z: the ranks stop, then flxrun.  Back here after SIGCONT (whose
 * own byte in the self-pipe sends it on to the ranks); the deadlines move
 * by the time the job stood still. */
static void flxrun_job_suspend(flxrun_job_t *job, int signo)
{
    double at = flxrun_now(), stood;

    flxrun_job_signal(job, signo);
    raise(SIGSTOP);
    stood = flxrun_now() - at;
    if (job->timeout_deadline > 0)
        job->timeout_deadline += stood;
    if (job->kill_deadline > 0)
        job->kill_deadline += stood;
    if (job->drain_deadline > 0)
        job->drain_deadline += stood;
    job->last_progress += stood;
}

static void flxrun_job_on_signal(flxrun_job_t *job, int signo)
{
    if (signo == SIGUSR1 || signo == SIGUSR2 || signo == SIGCONT) {
        flxrun_job_signal(job, signo); /* for the ranks (a checkpoint, say; go on) */
        return;
    }
    if (signo == SIGTSTP) {
        flxrun_job_suspend(job, signo);
        return;
    }
    job->nsignals++;
    if (job->nsignals == 1) {
        job->interrupt_signo = signo;
        flxrun_job_signal(job, signo);
    } else {
        flxrun_job_kill(job);
    }
}

/* Drains the self-pipe.  Returns true if a child changed state. */
static bool flxrun_job_signals_drain(flxrun_job_t *job)
{
    unsigned char b[64];
    bool child = false;
    ssize_t n;

    while ((n = read(job->sig_rfd, b, sizeof(b))) > 0) {
        ssize_t i;

        for (i = 0; i < n; i++) {
            if (b[i] == SIGCHLD)
                child = true;
            else
                flxrun_job_on_signal(job, b[i]);
        }
    }
    return child;
}

/* The poll loop: until every rank exited and every pipe closed (or the pipes
 * are held by processes that survived SIGKILL by leaving the group). */
static void flxrun_job_run(flxrun_job_t *job)
{
    nfds_t npfds = (nfds_t)(1 + 2 * job->nstarted);
    bool need_scan = true;

    job->pfds[0] = (struct pollfd){.fd = job->sig_rfd, .events = POLLIN};
    job->last_progress = flxrun_now();
    if (job->opts->timeout_s > 0)
        job->timeout_deadline = flxrun_now() + job->opts->timeout_s;

    for (;;) {
        double next;
        nfds_t k;

        if (need_scan) {
            need_scan = false;
            flxrun_job_scan(job);
        }
        if (job->nexited == job->nstarted) {
            if (job->nopen == 0)
                break;
            /* pipes still open, but nothing read or written for a while:
             * leftovers of the ranks hold them (output still coming from
             * the ranks' pipes is the ranks', and a slow reader gets it) */
            if (flxrun_now() - job->last_progress >= FLXRUN_IDLE_S)
                flxrun_job_stop(job);
        }

        next = flxrun_job_deadlines(job);
        if (job->nexited == job->nstarted && !job->stopping &&
            (next < 0 || job->last_progress + FLXRUN_IDLE_S < next))
            next = job->last_progress + FLXRUN_IDLE_S;
        if (job->killed && job->nexited == job->nstarted && flxrun_now() >= job->drain_deadline)
            break;
        if (poll(job->pfds, npfds, flxrun_poll_ms(next)) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "flxrun: poll: %s\n", strerror(errno));
            flxrun_job_kill(job);
            if (job->exit_code < 0)
                job->exit_code = FLXRUN_EXIT_START;
            break;
        }

        if (job->pfds[0].revents != 0)
            need_scan = flxrun_job_signals_drain(job);
        for (k = 1; k < npfds; k++) {
            if (job->pfds[k].fd >= 0 && job->pfds[k].revents != 0)
                flxrun_stream_read(job, &job->streams[k - 1], &job->pfds[k]);
        }
    }
}

static void flxrun_job_close_streams(flxrun_job_t *job)
{
    long i;

    for (i = 0; i < 2 * job->nstarted; i++) {
        if (job->streams[i].fd >= 0)
            flxrun_stream_close(job, &job->streams[i], &job->pfds[1 + i]);
    }
}

int main(int argc, char **argv)
{
    flxrun_opts_t opts;
    flxrun_job_t job;
    sigset_t old_mask;
    unsigned out_closed;
    long i;
    int rc;

    rc = flxrun_opts_parse(argc, argv, &opts);
    if (rc >= 0)
        return rc;

    out_closed = flxrun_stdio_ensure();
    if (opts.report)
        flxrun_report_bindings(&opts);
    flxrun_nofile_raise(opts.nranks);
    if (flxrun_env_setup(opts.nranks) < 0)
        return FLXRUN_EXIT_START;

    memset(&job, 0, sizeof(job));
    job.opts = &opts;
    job.exit_code = -1;
    job.out_closed = out_closed;
    job.ranks = calloc((size_t)opts.nranks, sizeof(*job.ranks));
    job.streams = calloc(2 * (size_t)opts.nranks, sizeof(*job.streams));
    job.pfds = calloc(1 + 2 * (size_t)opts.nranks, sizeof(*job.pfds));
    if (job.ranks == NULL || job.streams == NULL || job.pfds == NULL) {
        fprintf(stderr, "flxrun: out of memory for %ld ranks\n", opts.nranks);
        rc = FLXRUN_EXIT_START;
        goto err_free_job;
    }

    job.sig_rfd = flxrun_signals_install();
    if (job.sig_rfd < 0) {
        rc = FLXRUN_EXIT_START;
        goto err_free_job;
    }

    /* Signals wait until every rank exists: then forwarding reaches all. */
    flxrun_signals_block(&old_mask);
    for (i = 0; i < opts.nranks; i++) {
        if (flxrun_rank_start(&job, i, &old_mask) < 0) {
            job.exit_code = FLXRUN_EXIT_START;
            flxrun_job_kill(&job);
            break;
        }
    }
    sigprocmask(SIG_SETMASK, &old_mask, NULL);

    flxrun_job_run(&job);
    flxrun_job_close_streams(&job);
    flxrun_job_reap(&job);

    if (job.exit_code >= 0)
        rc = job.exit_code;
    else if (job.interrupt_signo != 0)
        rc = 128 + job.interrupt_signo;
    else
        rc = 0;
    /* the ranks' lines that were lost fail a job that succeeded */
    for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO; fd++) {
        if (job.out_errno[fd] == 0)
            continue;
        fprintf(stderr, "flxrun: the ranks' standard %s could not be written (%s): lines lost\n",
                fd == STDOUT_FILENO ? "output" : "error", strerror(job.out_errno[fd]));
        if (rc == 0)
            rc = FLXRUN_EXIT_OUTPUT;
    }

    close(job.sig_rfd);
    close(flxrun_sig_wfd);
err_free_job:
    free(job.pfds);
    free(job.streams);
    free(job.ranks);
    return rc;
}
