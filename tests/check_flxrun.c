/* check_flxrun.c -- runs the real flxrun binary with real shell ranks.
 *
 * The binary is $FLXRUN, default "./flxrun" (make check runs this from the top
 * build directory).  Each test forks flxrun with its stdout and stderr on
 * pipes, optionally sends it signals when its output shows the ranks are
 * ready, and asserts on the exit status, the captured output and the time it
 * took.  The test of a failing rank makes itself a child subreaper, so the
 * ranks' children orphaned by the stop come back to it and can be proven gone.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/cpumap.h"

#define RUN_LIMIT_S     20.0    /* a run that takes longer is killed and fails */
#define TEST_TIMEOUT_S  40

/* Send signo to flxrun once its stdout holds `count` copies of `marker`. */
typedef struct {
    const char *marker;
    int count;
    int signo;
} run_step_t;

typedef struct {
    const char *const *args;     /* after argv[0]; NULL-terminated */
    const char *const *env;      /* "NAME=VALUE" to add; NULL-terminated or NULL */
    const run_step_t *steps;     /* sent in order; NULL or ends with signo 0 */
    int deny_setaffinity;        /* flxrun and its ranks: sched_setaffinity fails (EPERM) */
} run_spec_t;

/* In the child before exec: a seccomp filter under which every
 * sched_setaffinity of this process and its descendants fails with EPERM,
 * so that flxrun's binding meets a real refusal from the kernel.  0, or -1
 * where seccomp filters cannot be installed. */
static int deny_setaffinity(void)
{
    struct sock_filter insns[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sched_setaffinity, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(insns) / sizeof(insns[0]), .filter = insns};

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* exit code of run_flxrun's child where the filter could not be installed */
#define NO_SECCOMP_EXIT 125

typedef struct {
    int code;                    /* exit code; 1000+signo if flxrun itself died */
    char *out;
    size_t out_len;
    char *err;
    size_t err_len;
    double elapsed_s;
} run_result_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *flxrun_path(void)
{
    const char *p = getenv("FLXRUN");

    return (p != NULL && p[0] != '\0') ? p : "./flxrun";
}

static int count_substr(const char *hay, const char *needle)
{
    size_t nlen = strlen(needle);
    int n = 0;

    while ((hay = strstr(hay, needle)) != NULL) {
        n++;
        hay += nlen;
    }
    return n;
}

static void buf_append(char **buf, size_t *len, const char *data, size_t n)
{
    char *p = realloc(*buf, *len + n + 1);

    ck_assert_ptr_nonnull(p);
    memcpy(p + *len, data, n);
    *len += n;
    p[*len] = '\0';
    *buf = p;
}

static void run_result_free(run_result_t *res)
{
    free(res->out);
    free(res->err);
    memset(res, 0, sizeof(*res));
}

/* Runs flxrun per spec; fills res.  The environment of flxrun starts without
 * any FLX_* job variables so each run makes its own. */
static void run_flxrun(const run_spec_t *spec, run_result_t *res)
{
    const char *argv[64];
    int out_fds[2], err_fds[2];
    struct pollfd pfds[2];
    int nsteps_done = 0;
    double start, deadline;
    int status;
    pid_t pid;
    size_t i;

    memset(res, 0, sizeof(*res));
    res->out = calloc(1, 1);
    res->err = calloc(1, 1);
    ck_assert(res->out != NULL && res->err != NULL);

    argv[0] = flxrun_path();
    for (i = 0; spec->args[i] != NULL; i++) {
        ck_assert_uint_lt(i + 2, sizeof(argv) / sizeof(argv[0]));
        argv[i + 1] = spec->args[i];
    }
    argv[i + 1] = NULL;

    ck_assert_int_eq(pipe2(out_fds, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(err_fds, O_CLOEXEC), 0);
    start = now_s();
    deadline = start + RUN_LIMIT_S;
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null_fd = open("/dev/null", O_RDONLY);

        dup2(null_fd, STDIN_FILENO);
        dup2(out_fds[1], STDOUT_FILENO);
        dup2(err_fds[1], STDERR_FILENO);
        unsetenv("FLX_ROOT");
        unsetenv("FLX_JOB_SECRET");
        unsetenv("FLX_RANK");
        unsetenv("FLX_SIZE");
        for (i = 0; spec->env != NULL && spec->env[i] != NULL; i++)
            putenv((char *)spec->env[i]);
        if (spec->deny_setaffinity && deny_setaffinity() != 0) {
            dprintf(STDERR_FILENO, "check_flxrun: no seccomp filter: %s\n", strerror(errno));
            _exit(NO_SECCOMP_EXIT);
        }
        execv(argv[0], (char *const *)argv);
        dprintf(STDERR_FILENO, "check_flxrun: cannot execute %s: %s\n", argv[0],
                strerror(errno));
        _exit(126);
    }
    close(out_fds[1]);
    close(err_fds[1]);

    pfds[0] = (struct pollfd){.fd = out_fds[0], .events = POLLIN};
    pfds[1] = (struct pollfd){.fd = err_fds[0], .events = POLLIN};
    while (pfds[0].fd >= 0 || pfds[1].fd >= 0) {
        double left = deadline - now_s();
        char buf[4096];
        int k;

        if (left <= 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            ck_abort_msg("flxrun %s... still running after %.0f s; stdout:\n%s\nstderr:\n%s",
                         spec->args[0] != NULL ? spec->args[0] : "", RUN_LIMIT_S, res->out,
                         res->err);
        }
        if (poll(pfds, 2, (int)(left * 1000) + 1) < 0) {
            ck_assert_int_eq(errno, EINTR);
            continue;
        }
        for (k = 0; k < 2; k++) {
            ssize_t n;

            if (pfds[k].fd < 0 || pfds[k].revents == 0)
                continue;
            n = read(pfds[k].fd, buf, sizeof(buf));
            if (n <= 0) {
                close(pfds[k].fd);
                pfds[k].fd = -1;
                continue;
            }
            if (k == 0)
                buf_append(&res->out, &res->out_len, buf, (size_t)n);
            else
                buf_append(&res->err, &res->err_len, buf, (size_t)n);
        }
        while (spec->steps != NULL && spec->steps[nsteps_done].signo != 0 &&
               count_substr(res->out, spec->steps[nsteps_done].marker) >=
                   spec->steps[nsteps_done].count) {
            kill(pid, spec->steps[nsteps_done].signo);
            nsteps_done++;
        }
    }

    while (waitpid(pid, &status, 0) < 0)
        ck_assert_int_eq(errno, EINTR);
    res->elapsed_s = now_s() - start;
    if (WIFEXITED(status))
        res->code = WEXITSTATUS(status);
    else
        res->code = 1000 + WTERMSIG(status);
}

/* Runs flxrun with args (NULL-terminated list). */
#define RUN(res, ...)                                                       \
    do {                                                                    \
        const char *const run_args_[] = {__VA_ARGS__, NULL};                \
        const run_spec_t run_spec_ = {.args = run_args_};                   \
        run_flxrun(&run_spec_, (res));                                      \
    } while (0)

/* Number of lines of text equal to line. */
static int count_lines(const char *text, const char *line)
{
    size_t len = strlen(line);
    int n = 0;

    while (*text != '\0') {
        const char *nl = strchr(text, '\n');
        size_t l = nl != NULL ? (size_t)(nl - text) : strlen(text);

        if (l == len && memcmp(text, line, len) == 0)
            n++;
        text += l + (nl != NULL);
    }
    return n;
}

static int count_all_lines(const char *text)
{
    return count_substr(text, "\n");
}

/* ---- temporary directory with pid files ------------------------------------ */

static void tmpdir_make(char *dir, size_t len)
{
    const char *base = getenv("TMPDIR");

    snprintf(dir, len, "%s/check_flxrun.XXXXXX", base != NULL && base[0] ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void tmpdir_remove(const char *dir)
{
    char cmd[512];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static pid_t pidfile_read(const char *dir, const char *name)
{
    char path[512];
    FILE *f;
    long pid = 0;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no pid file %s", path);
    ck_assert_int_eq(fscanf(f, "%ld", &pid), 1);
    fclose(f);
    ck_assert_int_gt(pid, 1);
    return (pid_t)pid;
}

/* True once pid is gone; orphans reparented to us are reaped while waiting. */
static bool pid_gone_within(pid_t pid, double limit_s)
{
    double deadline = now_s() + limit_s;

    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        if (kill(pid, 0) < 0 && errno == ESRCH)
            return true;
        if (now_s() >= deadline)
            return false;
        usleep(10000);
    }
}

/* flxrun with stdout into a pipe that nobody reads (stderr too if err_too,
 * else to /dev/null): pid, and the pipe's read end in *rfd_p. */
static pid_t spawn_stuck(const char *const *args, int err_too, int *rfd_p)
{
    const char *argv[16];
    int fds[2];
    pid_t pid;
    size_t i;

    argv[0] = flxrun_path();
    for (i = 0; args[i] != NULL; i++)
        argv[i + 1] = args[i];
    argv[i + 1] = NULL;
    ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null_fd = open("/dev/null", O_RDWR);
        dup2(null_fd, STDIN_FILENO);
        dup2(fds[1], STDOUT_FILENO);
        dup2(err_too ? fds[1] : null_fd, STDERR_FILENO);
        execv(argv[0], (char *const *)argv);
        _exit(126);
    }
    close(fds[1]);
    *rfd_p = fds[0];
    return pid;
}

/* Waits up to limit_s for pid; its exit code, or -1 (still running: killed). */
static int wait_exit_within(pid_t pid, double limit_s)
{
    double deadline = now_s() + limit_s;
    int status;

    while (now_s() < deadline) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* ---- tests ---------------------------------------------------------------- */

START_TEST(test_hello_env)
{
    run_result_t r;

    RUN(&r, "-n", "3", "--", "sh", "-c", "echo hello $FLX_RANK $FLX_SIZE");
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_int_eq(count_all_lines(r.out), 3);
    ck_assert_int_eq(count_lines(r.out, "[0] hello 0 3"), 1);
    ck_assert_int_eq(count_lines(r.out, "[1] hello 1 3"), 1);
    ck_assert_int_eq(count_lines(r.out, "[2] hello 2 3"), 1);
    ck_assert_str_eq(r.err, "");
    run_result_free(&r);
}
END_TEST

START_TEST(test_np_spellings)
{
    static const char *const forms[][3] = {
        {"-np", "2", NULL}, {"--np", "2", NULL}, {"--np=2", NULL, NULL}, {"-n2", NULL, NULL},
    };
    size_t f;

    for (f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
        const char *args[8];
        run_spec_t spec = {.args = args};
        run_result_t r;
        int a = 0;

        args[a++] = forms[f][0];
        if (forms[f][1] != NULL)
            args[a++] = forms[f][1];
        args[a++] = "sh";
        args[a++] = "-c";
        args[a++] = "echo r$FLX_RANK/$FLX_SIZE";
        args[a] = NULL;
        run_flxrun(&spec, &r);
        ck_assert_msg(r.code == 0, "%s: exit %d, stderr:\n%s", forms[f][0], r.code, r.err);
        ck_assert_int_eq(count_lines(r.out, "[0] r0/2"), 1);
        ck_assert_int_eq(count_lines(r.out, "[1] r1/2"), 1);
        run_result_free(&r);
    }
}
END_TEST

/* Parses "[i] ROOT SECRET LOCAL_RANK LOCAL_SIZE" lines; checks they agree. */
static void check_job_env(const char *out, int nranks, char *secret_p, size_t secret_len)
{
    char root0[128] = "", secret0[128] = "";
    const char *line = out;
    int seen = 0;

    while (*line != '\0') {
        char root[128], secret[128];
        int rank, lrank, lsize, port, i;

        ck_assert_int_eq(sscanf(line, "[%d] %127s %127s %d %d", &rank, root, secret, &lrank,
                                &lsize), 5);
        ck_assert_int_eq(rank, lrank);
        ck_assert_int_eq(lsize, nranks);
        ck_assert_int_eq(sscanf(root, "127.0.0.1:%d", &port), 1);
        ck_assert_int_gt(port, 0);
        ck_assert_int_lt(port, 65536);
        ck_assert_uint_eq(strlen(secret), 64);
        for (i = 0; i < 64; i++)
            ck_assert_msg(isxdigit((unsigned char)secret[i]), "secret %s not hex", secret);
        if (seen == 0) {
            strcpy(root0, root);
            strcpy(secret0, secret);
        }
        ck_assert_str_eq(root, root0);
        ck_assert_str_eq(secret, secret0);
        seen++;
        line = strchr(line, '\n');
        ck_assert_ptr_nonnull(line);
        line++;
    }
    ck_assert_int_eq(seen, nranks);
    ck_assert_uint_gt(secret_len, strlen(secret0));
    strcpy(secret_p, secret0);
}

START_TEST(test_root_and_secret_shared)
{
    static const char *const script =
        "echo $FLX_ROOT $FLX_JOB_SECRET $FLX_LOCAL_RANK $FLX_LOCAL_SIZE";
    char secret1[128], secret2[128];
    run_result_t r;

    RUN(&r, "-n", "4", "sh", "-c", script);
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    check_job_env(r.out, 4, secret1, sizeof(secret1));
    run_result_free(&r);

    RUN(&r, "-n", "2", "sh", "-c", script);
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    check_job_env(r.out, 2, secret2, sizeof(secret2));
    run_result_free(&r);

    ck_assert_str_ne(secret1, secret2);
}
END_TEST

START_TEST(test_preset_root_and_secret_kept)
{
    static const char *const args[] = {"-n", "2", "sh", "-c", "echo $FLX_ROOT $FLX_JOB_SECRET",
                                       NULL};
    static const char *const env[] = {"FLX_ROOT=10.1.2.3:4567", "FLX_JOB_SECRET=given", NULL};
    const run_spec_t spec = {.args = args, .env = env};
    run_result_t r;

    run_flxrun(&spec, &r);
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_int_eq(count_lines(r.out, "[0] 10.1.2.3:4567 given"), 1);
    ck_assert_int_eq(count_lines(r.out, "[1] 10.1.2.3:4567 given"), 1);
    run_result_free(&r);
}
END_TEST

START_TEST(test_rank_failure_stops_others)
{
    char dir[256], script[1024], name[32];
    run_result_t r;
    pid_t pids[6];
    int rank, n = 0, i;

    /* Orphans of stopped ranks come back to this process (the setting is not
     * inherited over check's fork, so it is made here), so they can be
     * reaped and seen gone rather than lingering as someone else's zombies. */
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    tmpdir_make(dir, sizeof(dir));
    /* Ranks 0 and 2 record their shell's pid and a background sleep's pid;
     * rank 1 fails only once both have, so there is something to stop. */
    snprintf(script, sizeof(script),
             "d='%s'; echo $$ > $d/sh.$FLX_RANK.tmp && mv $d/sh.$FLX_RANK.tmp $d/sh.$FLX_RANK; "
             "if [ $FLX_RANK = 1 ]; then "
             "  while [ ! -e $d/sleep.0 ] || [ ! -e $d/sleep.2 ]; do sleep 0.02; done; exit 7; "
             "fi; "
             "sleep 30 & echo $! > $d/sleep.$FLX_RANK.tmp && mv $d/sleep.$FLX_RANK.tmp "
             "$d/sleep.$FLX_RANK; wait",
             dir);
    RUN(&r, "-n", "3", "--", "sh", "-c", script);
    ck_assert_msg(r.code == 7, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(r.elapsed_s < 10.0, "took %.1f s", r.elapsed_s);
    ck_assert_int_eq(count_lines(r.err,
                                 "flxrun: rank 1 exited with status 7; stopping the other ranks"),
                     1);

    for (rank = 0; rank < 3; rank++) {
        snprintf(name, sizeof(name), "sh.%d", rank);
        pids[n++] = pidfile_read(dir, name);
        if (rank == 1)
            continue;
        snprintf(name, sizeof(name), "sleep.%d", rank);
        pids[n++] = pidfile_read(dir, name);
    }
    for (i = 0; i < n; i++)
        ck_assert_msg(pid_gone_within(pids[i], 3.0), "pid %d still exists", (int)pids[i]);
    tmpdir_remove(dir);
    run_result_free(&r);
}
END_TEST

/* A job that succeeds but leaves a process holding its output open: once
 * nothing has moved for a second, the leftover is stopped and flxrun ends
 * with the ranks' status and every line. */
START_TEST(test_success_leftover_holds_pipe)
{
    run_result_t r;

    RUN(&r, "-n", "2", "sh", "-c", "sleep 30 & echo done $FLX_RANK");
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(r.elapsed_s < 8.0, "took %.1f s", r.elapsed_s);
    ck_assert_int_eq(count_lines(r.out, "[0] done 0"), 1);
    ck_assert_int_eq(count_lines(r.out, "[1] done 1"), 1);
    run_result_free(&r);
}
END_TEST

/* Ranks that ignore SIGTERM get SIGKILL after the grace period (3 s). */
START_TEST(test_failure_escalates_to_sigkill)
{
    run_result_t r;

    RUN(&r, "-n", "3", "sh", "-c",
        "trap '' TERM; if [ $FLX_RANK = 2 ]; then sleep 0.2; exit 5; fi; "
        "while :; do sleep 0.05; done");
    ck_assert_msg(r.code == 5, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(r.elapsed_s >= 2.5 && r.elapsed_s < 8.0, "took %.1f s", r.elapsed_s);
    run_result_free(&r);
}
END_TEST

START_TEST(test_rank_killed_by_signal)
{
    run_result_t r;

    RUN(&r, "-n", "3", "sh", "-c", "if [ $FLX_RANK = 0 ]; then kill -9 $$; fi; sleep 30");
    ck_assert_msg(r.code == 128 + SIGKILL, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(r.elapsed_s < 10.0, "took %.1f s", r.elapsed_s);
    ck_assert_msg(strstr(r.err, "flxrun: rank 0 killed by signal 9") != NULL, "stderr:\n%s",
                  r.err);
    run_result_free(&r);
}
END_TEST

START_TEST(test_timeout)
{
    run_result_t r;

    RUN(&r, "--timeout", "1", "-n", "3", "--", "sleep", "30");
    ck_assert_msg(r.code == 124, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(r.elapsed_s >= 0.9 && r.elapsed_s < 5.0, "took %.1f s", r.elapsed_s);
    ck_assert_int_eq(count_lines(r.err, "flxrun: timeout after 1 s; stopping 3 ranks"), 1);
    run_result_free(&r);

    RUN(&r, "-t", "0.3", "-n", "2", "sleep", "30");
    ck_assert_msg(r.code == 124, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(r.elapsed_s < 4.0, "took %.1f s", r.elapsed_s);
    run_result_free(&r);
}
END_TEST

START_TEST(test_timeout_not_reached)
{
    run_result_t r;

    RUN(&r, "--timeout=10", "-n", "2", "sh", "-c", "echo done");
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(r.elapsed_s < 5.0, "took %.1f s", r.elapsed_s);
    ck_assert_int_eq(count_all_lines(r.out), 2);
    run_result_free(&r);
}
END_TEST

/* The ranks trap TERM: they see the forwarded signal and exit 3. */
START_TEST(test_sigterm_forwarded)
{
    static const char *const args[] = {
        "-n", "3", "sh", "-c",
        "trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done", NULL};
    static const run_step_t steps[] = {{"ready", 3, SIGTERM}, {NULL, 0, 0}};
    const run_spec_t spec = {.args = args, .steps = steps};
    run_result_t r;

    run_flxrun(&spec, &r);
    ck_assert_msg(r.code == 3, "exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.out, r.err);
    ck_assert_msg(r.elapsed_s < 5.0, "took %.1f s", r.elapsed_s);
    ck_assert_int_eq(count_lines(r.out, "[0] got TERM"), 1);
    ck_assert_int_eq(count_lines(r.out, "[1] got TERM"), 1);
    ck_assert_int_eq(count_lines(r.out, "[2] got TERM"), 1);
    run_result_free(&r);
}
END_TEST

/* SIGUSR1 and SIGUSR2 reach the ranks and end nothing by themselves (a
 * checkpoint request: flxrun died of SIGUSR1, exit 138, before); here the
 * ranks save and exit 0 at the second. */
START_TEST(test_usr_signals_forwarded)
{
    static const char *const args[] = {
        "-n", "2", "sh", "-c",
        "trap 'echo got USR1' USR1; trap 'echo got USR2; exit 0' USR2; echo ready; "
        "while :; do sleep 0.05; done", NULL};
    static const run_step_t steps[] = {
        {"ready", 2, SIGUSR1}, {"got USR1", 2, SIGUSR2}, {NULL, 0, 0}};
    const run_spec_t spec = {.args = args, .steps = steps};
    run_result_t r;

    run_flxrun(&spec, &r);
    ck_assert_msg(r.code == 0, "exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.out, r.err);
    ck_assert_msg(r.elapsed_s < 5.0, "took %.1f s", r.elapsed_s);
    ck_assert_int_eq(count_lines(r.out, "[0] got USR2"), 1);
    ck_assert_int_eq(count_lines(r.out, "[1] got USR2"), 1);
    run_result_free(&r);
}
END_TEST

/* Ranks that just die from the forwarded signal: 128+signo. */
START_TEST(test_signal_kills_plain_ranks)
{
    static const int signos[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    static const char *const args[] = {"-n", "2", "sh", "-c",
                                       "ulimit -c 0; echo ready; exec sleep 30",
                                       NULL};
    size_t s;

    for (s = 0; s < sizeof(signos) / sizeof(signos[0]); s++) {
        const run_step_t steps[] = {{"ready", 2, signos[s]}, {NULL, 0, 0}};
        const run_spec_t spec = {.args = args, .steps = steps};
        run_result_t r;

        run_flxrun(&spec, &r);
        ck_assert_msg(r.code == 128 + signos[s], "signal %d: exit %d, stderr:\n%s", signos[s],
                      r.code, r.err);
        ck_assert_msg(r.elapsed_s < 5.0, "took %.1f s", r.elapsed_s);
        run_result_free(&r);
    }
}
END_TEST

/* Ranks survive SIGINT (trap without exit); the second SIGINT kills them. */
START_TEST(test_second_sigint_kills)
{
    static const char *const args[] = {
        "-n", "2", "sh", "-c",
        "trap 'echo got INT' INT; trap '' TERM; echo ready; while :; do sleep 0.05; done", NULL};
    static const run_step_t steps[] = {
        {"ready", 2, SIGINT}, {"got INT", 2, SIGINT}, {NULL, 0, 0}};
    const run_spec_t spec = {.args = args, .steps = steps};
    run_result_t r;

    run_flxrun(&spec, &r);
    ck_assert_msg(r.code == 128 + SIGKILL, "exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.out,
                  r.err);
    ck_assert_msg(r.elapsed_s < 5.0, "took %.1f s", r.elapsed_s);
    run_result_free(&r);
}
END_TEST

START_TEST(test_stderr_prefixed_and_partial_lines)
{
    run_result_t r;

    RUN(&r, "-n", "2", "sh", "-c",
        "echo out $FLX_RANK; echo err $FLX_RANK >&2; printf 'tail %s' $FLX_RANK >&2");
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_int_eq(count_all_lines(r.out), 2);
    ck_assert_int_eq(count_lines(r.out, "[0] out 0"), 1);
    ck_assert_int_eq(count_lines(r.out, "[1] out 1"), 1);
    ck_assert_int_eq(count_all_lines(r.err), 4);
    ck_assert_int_eq(count_lines(r.err, "[0] err 0"), 1);
    ck_assert_int_eq(count_lines(r.err, "[1] err 1"), 1);
    ck_assert_int_eq(count_lines(r.err, "[0] tail 0"), 1);
    ck_assert_int_eq(count_lines(r.err, "[1] tail 1"), 1);
    run_result_free(&r);
}
END_TEST

/* A 20000-byte line without newline: split, every piece prefixed, nothing lost. */
START_TEST(test_long_line_split)
{
    run_result_t r;
    const char *line;
    size_t total = 0;

    RUN(&r, "-n", "1", "sh", "-c", "head -c 20000 /dev/zero | tr '\\0' x");
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_int_gt(count_all_lines(r.out), 1);
    for (line = r.out; *line != '\0';) {
        const char *nl = strchr(line, '\n');
        size_t i;

        ck_assert_ptr_nonnull(nl);
        ck_assert_msg(strncmp(line, "[0] ", 4) == 0, "unprefixed piece");
        for (i = 4; line + i < nl; i++)
            ck_assert_int_eq(line[i], 'x');
        total += (size_t)(nl - line) - 4;
        line = nl + 1;
    }
    ck_assert_uint_eq(total, 20000);
    run_result_free(&r);
}
END_TEST

/* A line of exactly 4096 or 8192 bytes (whole buffers) then its newline:
 * one or two pieces, no empty line after them. */
START_TEST(test_buffer_sized_lines)
{
    run_result_t r;

    RUN(&r, "-n", "1", "sh", "-c",
        "head -c 4096 /dev/zero | tr '\\0' x; echo; head -c 8192 /dev/zero | tr '\\0' y; "
        "echo; echo end");
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(count_all_lines(r.out) == 4, "%d lines", count_all_lines(r.out));
    ck_assert_int_eq(count_lines(r.out, "[0] "), 0);
    ck_assert_int_eq(count_lines(r.out, "[0] end"), 1);
    run_result_free(&r);
}
END_TEST

/* Output held back by a reader that does not read: the timeout (exit 124)
 * and a forwarded SIGTERM still come (flxrun waited in write() before), also
 * when its own messages (stderr) go to the same stuck pipe. */
START_TEST(test_stuck_reader)
{
    static const char *const timed[] = {"-n", "1", "-t", "1", "yes", NULL};
    static const char *const plain[] = {"-n", "1", "yes", NULL};
    int rfd, code;
    pid_t pid;

    for (int err_too = 0; err_too < 2; err_too++) {
        double t0 = now_s();
        pid = spawn_stuck(timed, err_too, &rfd);
        code = wait_exit_within(pid, 10.0);
        ck_assert_msg(code == 124, "timeout with a stuck reader (stderr %s): exit %d",
                      err_too ? "too" : "apart", code);
        /* yes dies of the SIGTERM at 1 s; the drain (1 s) starts then, not after
         * the 3 s grace before a SIGKILL that nobody needs (exit at 5 s before) */
        ck_assert_msg(now_s() - t0 < 4.0, "a stuck reader held flxrun %.1f s",
                      now_s() - t0);
        close(rfd);
    }
    pid = spawn_stuck(plain, 1, &rfd);
    {
        /* the first byte of output: flxrun is forwarding, its handlers in
         * place (a fixed 0.5 s once risked a signal before them); then the
         * pipe full again, flxrun in its write: over half the pipe's room
         * and 50 ms without a byte more (a write that does not fit waits
         * whole: 61385 of 65536 bytes stayed) */
        struct pollfd pfd = {.fd = rfd, .events = POLLIN};
        int held = 0, last = -1, still = 0, room = fcntl(rfd, F_GETPIPE_SZ);
        double t0 = now_s();
        char c;

        ck_assert_msg(poll(&pfd, 1, 10000) == 1 && read(rfd, &c, 1) == 1,
                      "no output from flxrun -n 1 yes within 10 s");
        while (still < 5 && now_s() - t0 < 10.0 && ioctl(rfd, FIONREAD, &held) == 0) {
            still = held == last && held > room / 2 ? still + 1 : 0;
            last = held;
            usleep(10000);
        }
        ck_assert_msg(still == 5, "the pipe holds %d of %d bytes, still growing after 10 s",
                      held, room);
    }
    kill(pid, SIGTERM);
    code = wait_exit_within(pid, 10.0);
    ck_assert_msg(code == 128 + SIGTERM, "SIGTERM with a stuck reader: exit %d", code);
    close(rfd);
}
END_TEST

/* flxrun killed outright (SIGKILL, nothing to forward): its ranks go too. */
START_TEST(test_flxrun_killed)
{
    char dir[256], script[512];
    const char *args[] = {"-n", "2", "sh", "-c", script, NULL};
    static const run_step_t steps[] = {{"ready", 2, SIGKILL}, {NULL, 0, 0}};
    const run_spec_t spec = {.args = args, .steps = steps};
    run_result_t r;

    tmpdir_make(dir, sizeof(dir));
    snprintf(script, sizeof(script), "echo $$ > %s/pid.$FLX_RANK; echo ready; exec sleep 30",
             dir);
    run_flxrun(&spec, &r);
    ck_assert_msg(r.code == 1000 + SIGKILL, "exit %d", r.code);
    ck_assert_msg(pid_gone_within(pidfile_read(dir, "pid.0"), 3.0), "rank 0 outlived flxrun");
    ck_assert_msg(pid_gone_within(pidfile_read(dir, "pid.1"), 3.0), "rank 1 outlived flxrun");
    run_result_free(&r);
    tmpdir_remove(dir);
}
END_TEST

/* The state letter of /proc/PID/stat ('R', 'S', 'T'...), or '?'. */
static char proc_state(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return '?';
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* the command may hold spaces */
    return p && p[1] == ' ' ? p[2] : '?';
}

/* True once every pid in pids[n] is in state c, within limit_s. */
static bool procs_in_state(const pid_t *pids, int n, char c, double limit_s)
{
    double deadline = now_s() + limit_s;

    for (;;) {
        int k = 0;
        while (k < n && proc_state(pids[k]) == c)
            k++;
        if (k == n)
            return true;
        if (now_s() >= deadline)
            return false;
        usleep(10000);
    }
}

/* Ctrl-Z: SIGTSTP to flxrun stops every rank and then flxrun itself; after
 * SIGCONT they go on, and the 4 s stopped do not count toward --timeout 6:
 * the job (ranks that sleep, exec'd: a shell that forks would wait in state
 * D for its stopped child) ends by the timeout about 10 s after its start,
 * not 6. */
START_TEST(test_job_control)
{
    static const char *const args[] = {"--timeout", "6", "-n", "2", "sh", "-c",
                                       "echo ready $$; exec sleep 30", NULL};
    char out[4096];
    size_t len = 0;
    pid_t pids[3];
    int rfd, nready = 0, code;
    ssize_t n;
    double t0 = now_s();

    pids[2] = spawn_stuck(args, 0, &rfd);
    while (nready < 2 && now_s() - t0 < 10 &&
           (n = read(rfd, out + len, sizeof(out) - 1 - len)) > 0) {
        const char *p = out;
        len += (size_t)n;
        out[len] = '\0';
        for (nready = 0; (p = strstr(p, "] ready ")) != NULL; p++) {
            ck_assert_int_lt(nready, 2);
            pids[nready++] = (pid_t)atol(p + 8);
        }
    }
    ck_assert_msg(nready == 2, "ranks not ready: %s", out);
    ck_assert_msg(procs_in_state(pids, 2, 'S', 3.0), "ranks not asleep: %c %c",
                  proc_state(pids[0]), proc_state(pids[1]));
    ck_assert_int_eq(kill(pids[2], SIGTSTP), 0);
    ck_assert_msg(procs_in_state(pids, 3, 'T', 3.0), "not stopped: %c %c flxrun %c",
                  proc_state(pids[0]), proc_state(pids[1]), proc_state(pids[2]));
    sleep(4);
    ck_assert_msg(procs_in_state(pids, 3, 'T', 0), "went on while stopped");
    ck_assert_int_eq(kill(pids[2], SIGCONT), 0);
    ck_assert_msg(procs_in_state(pids, 2, 'S', 3.0), "ranks not going on: %c %c",
                  proc_state(pids[0]), proc_state(pids[1]));
    code = wait_exit_within(pids[2], 15.0);
    close(rfd);
    ck_assert_int_eq(code, 124);
    ck_assert_msg(now_s() - t0 > 9.5, "the timeout came %.1f s after the start: the stop "
                  "counted", now_s() - t0);
}
END_TEST

/* Many ranks, many lines each: nothing lost, no line torn. */
START_TEST(test_many_ranks_many_lines)
{
    run_result_t r;
    const char *line;
    int counts[32] = {0};
    int rank;

    RUN(&r, "-n", "32", "sh", "-c",
        "i=0; while [ $i -lt 200 ]; do echo line $FLX_RANK $i; i=$((i+1)); done");
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_int_eq(count_all_lines(r.out), 32 * 200);
    for (line = r.out; *line != '\0'; line = strchr(line, '\n') + 1) {
        int pr, lr, k;

        ck_assert_int_eq(sscanf(line, "[%d] line %d %d", &pr, &lr, &k), 3);
        ck_assert_int_eq(pr, lr);
        ck_assert(pr >= 0 && pr < 32);
        ck_assert_int_eq(k, counts[pr]);     /* in order within a rank */
        counts[pr]++;
    }
    for (rank = 0; rank < 32; rank++)
        ck_assert_int_eq(counts[rank], 200);
    run_result_free(&r);
}
END_TEST

START_TEST(test_bad_usage)
{
    static const char *const cases[][5] = {
        {NULL},
        {"-n", "0", "true", NULL},
        {"-n", "abc", "true", NULL},
        {"-n", "2049", "true", NULL},                /* above a communicator's 2048 */
        {"-n", "-1", "true", NULL},
        {"-n", "3", NULL},
        {"-n", "3", "--", NULL},
        {"true", NULL},
        {"-n", NULL},
        {"--bogus", "-n", "1", "true", NULL},
        {"-n", "1", "--timeout", "-1", "true"},
        {"-n", "1", "--timeout", "x", "true"},
        {"-n", "1", "--bind", "socket", "true"},
        {"-n", "1", "--bind", NULL},
    };
    size_t c;

    for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *args[6] = {NULL};
        const run_spec_t spec = {.args = args};
        run_result_t r;
        size_t a;

        for (a = 0; a < 5 && cases[c][a] != NULL; a++)
            args[a] = cases[c][a];
        run_flxrun(&spec, &r);
        ck_assert_msg(r.code == 2, "case %zu: exit %d", c, r.code);
        ck_assert_msg(strncmp(r.err, "flxrun: ", 8) == 0, "case %zu: stderr:\n%s", c, r.err);
        ck_assert_str_eq(r.out, "");
        run_result_free(&r);
    }
}
END_TEST

START_TEST(test_missing_program)
{
    run_result_t r;

    RUN(&r, "-n", "2", "--", "/nonexistent/flxrun-no-such-prog");
    ck_assert_msg(r.code == 127, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(strstr(r.err, "flxrun: cannot execute /nonexistent/flxrun-no-such-prog: ") !=
                      NULL, "stderr:\n%s", r.err);
    run_result_free(&r);

    RUN(&r, "-n", "1", "flxrun-no-such-prog-in-path");
    ck_assert_msg(r.code == 127, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(strstr(r.err, "[0] flxrun: cannot execute flxrun-no-such-prog-in-path") !=
                      NULL, "stderr:\n%s", r.err);
    run_result_free(&r);
}
END_TEST

START_TEST(test_help_and_version)
{
    run_result_t r;

    RUN(&r, "--help");
    ck_assert_int_eq(r.code, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: flxrun"));
    run_result_free(&r);

    RUN(&r, "-h");
    ck_assert_int_eq(r.code, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: flxrun"));
    run_result_free(&r);

    RUN(&r, "--version");
    ck_assert_int_eq(r.code, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "flxrun"));
    run_result_free(&r);
}
END_TEST

/* Ranks' stdin is /dev/null: a rank reading it sees EOF at once. */
START_TEST(test_stdin_is_dev_null)
{
    run_result_t r;

    RUN(&r, "-n", "2", "sh", "-c", "if read x; then echo got; else echo eof; fi");
    ck_assert_msg(r.code == 0, "exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_int_eq(count_lines(r.out, "[0] eof"), 1);
    ck_assert_int_eq(count_lines(r.out, "[1] eof"), 1);
    run_result_free(&r);
}
END_TEST

/* ---- binding ---------------------------------------------------------------- */

/* Runs flxrun ARGS -n n, each rank printing its Cpus_allowed_list; fills
 * sets[0, n) with the ranks' CPUs.  With report, flxrun's
 * --report-bindings lines must name the same CPUs. */
static void run_bind(const char *bind, bool report, long n, cpu_set_t *sets)
{
    char num[16];
    const char *args[9];
    const run_spec_t spec = {.args = args};
    run_result_t r;
    int a = 0, seen = 0;
    const char *line;

    snprintf(num, sizeof(num), "%ld", n);
    if (bind != NULL)
        args[a++] = bind;
    if (report)
        args[a++] = "--report-bindings";
    args[a++] = "-n";
    args[a++] = num;
    args[a++] = "sed";
    args[a++] = "-n";
    args[a++] = "s/^Cpus_allowed_list:[[:space:]]*//p";
    args[a++] = "/proc/self/status";
    args[a] = NULL;
    run_flxrun(&spec, &r);
    ck_assert_msg(r.code == 0, "%s -n %ld: exit %d, stderr:\n%s", bind ? bind : "", n, r.code,
                  r.err);
    for (line = r.out; *line != '\0'; seen++) {
        int rank, off = 0;

        ck_assert_msg(sscanf(line, "[%d] %n", &rank, &off) == 1 && off > 0, "line: %s", line);
        ck_assert_int_ge(rank, 0);
        ck_assert_int_lt(rank, n);
        ck_assert_msg(cpumap_parse_list(line + off, &sets[rank]) == 0, "bad CPU list: %s", line);
        line = strchr(line, '\n');
        ck_assert_ptr_nonnull(line);
        line++;
    }
    ck_assert_int_eq(seen, n);
    if (report) {
        for (long i = 0; i < n; i++) {
            char want[96], got[1024];
            const char *at;
            cpu_set_t said;

            snprintf(want, sizeof(want), "flxrun: rank %ld: CPUs ", i);
            at = strstr(r.err, want);
            ck_assert_msg(at != NULL, "--report-bindings -n %ld: no line for rank %ld:\n%s", n, i,
                          r.err);
            ck_assert_int_eq(sscanf(at + strlen(want), "%1023s", got), 1);
            ck_assert_msg(cpumap_parse_list(got, &said) == 0 && CPU_EQUAL(&said, &sets[i]),
                          "--report-bindings said rank %ld runs on %s, it ran on others", i, got);
        }
    }
    run_result_free(&r);
}

START_TEST(test_bind)
{
    cpu_set_t mine, all, *sets = calloc(256, sizeof(*sets));
    cpumap_t *map = malloc(sizeof(*map));
    long c, n;

    ck_assert_ptr_nonnull(map);
    ck_assert_ptr_nonnull(sets);
    ck_assert_int_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
    c = CPU_COUNT(&mine);
    cpumap_read(map, &mine, CPUMAP_SYSFS);
    /* as many ranks as CPUs (at most 64), as many as cores, half as many,
     * one: each rank on the block the map gives it (whole cores while the
     * ranks fit them; check_cpumap tests the blocks) */
    const long counts[4] = {c < 64 ? c : 64, map->ncores < 64 ? map->ncores : 64, c / 2, 1};
    for (int t = 0; t < 4; t++) {
        n = counts[t];
        if (n < 1 || (t > 0 && n == counts[t - 1]))
            continue;
        for (int k = 0; k < 2; k++) {
            run_bind(k ? "--bind=core" : NULL, k == 1, n, sets);
            CPU_ZERO(&all);
            for (long i = 0; i < n; i++) {
                cpu_set_t want;
                char w[256], g[256];

                cpumap_rank(map, n, i, &want);
                ck_assert_msg(CPU_EQUAL(&sets[i], &want),
                              "%s -n %ld: rank %ld runs on CPUs %s, not its block %s",
                              k ? "--bind=core" : "auto", n, i, cpumap_list(&sets[i], g, sizeof(g)),
                              cpumap_list(&want, w, sizeof(w)));
                CPU_OR(&all, &all, &sets[i]);
            }
            if (n <= map->ncores || n == c)
                ck_assert_msg(CPU_EQUAL(&all, &mine), "-n %ld: the blocks do not cover the CPUs",
                              n);
        }
    }
    /* more ranks than CPUs, a multiple of the K cores (the first two above
     * C, below 256): rank i on every thread of core i mod K, so ranks i and
     * i + 1 (and N - 1 and 0) never share a core where there are two or
     * more, as --report-bindings says */
    for (int t = 1; t <= 2; t++) {
        n = ((long)c / map->ncores + t) * map->ncores;
        if (n >= 256)
            break;
        for (int k = 0; k < 2; k++) {
            run_bind(k ? "--bind=auto" : NULL, k == 1, n, sets);
            for (long i = 0; i < n; i++) {
                cpu_set_t want, both;
                char w[256], g[256];
                long prev = (i + n - 1) % n;

                cpumap_rank(map, n, i, &want);
                ck_assert_msg(CPU_EQUAL(&sets[i], &want) && CPU_COUNT(&want) > 0,
                              "-n %ld > %ld CPUs: rank %ld runs on CPUs %s, not core %ld's %s", n,
                              c, i, cpumap_list(&sets[i], g, sizeof(g)), i % map->ncores,
                              cpumap_list(&want, w, sizeof(w)));
                if (i >= map->ncores)
                    ck_assert(CPU_EQUAL(&sets[i], &sets[i - map->ncores]));
                CPU_AND(&both, &sets[i], &sets[prev]);
                ck_assert_msg(map->ncores == 1 || CPU_COUNT(&both) == 0,
                              "-n %ld: ranks %ld and %ld share CPUs", n, prev, i);
            }
        }
    }
    /* ... and one more than the first (never a multiple while K > 1):
     * unbound, every rank where flxrun is */
    n = ((long)c / map->ncores + 1) * map->ncores + 1;
    if (n < 256 && map->ncores > 1) {
        run_bind(NULL, false, n, sets);
        for (long i = 0; i < n; i++)
            ck_assert_msg(CPU_EQUAL(&sets[i], &mine), "-n %ld on %d cores: rank %ld bound", n,
                          map->ncores, i);
    }
    {
        char num[16], want[128];
        const char *args[] = {"--report-bindings", "-n", num, "true", NULL};
        const run_spec_t spec = {.args = args};
        run_result_t r;

        snprintf(num, sizeof(num), "%ld", c + 1);
        if ((c + 1) % map->ncores != 0)
            snprintf(want, sizeof(want), "flxrun: %ld ranks not bound (more ranks than CPUs, not "
                     "a multiple of the cores): CPUs ", c + 1);
        else
            snprintf(want, sizeof(want), "flxrun: %ld ranks on %ld CPUs: rank i on core i mod ",
                     c + 1, c);
        run_flxrun(&spec, &r);
        ck_assert_msg(r.code == 0, "--report-bindings -n %ld: exit %d, stderr:\n%s", c + 1, r.code,
                      r.err);
        ck_assert_msg(strstr(r.err, want) != NULL, "stderr:\n%s\nwanted: %s", r.err, want);
        run_result_free(&r);
    }
    free(map);
    /* --report-bindings says when and why the ranks are not bound */
    {
        const char *args[] = {"--report-bindings", "--bind=none", "-n", "2", "true", NULL};
        const run_spec_t spec = {.args = args};
        run_result_t r;

        run_flxrun(&spec, &r);
        ck_assert_msg(r.code == 0, "--report-bindings unbound: exit %d, stderr:\n%s", r.code, r.err);
        ck_assert_msg(strstr(r.err, "flxrun: 2 ranks not bound (--bind none): CPUs ") != NULL,
                      "stderr:\n%s", r.err);
        ck_assert_msg(strstr(r.err, "rank 0: CPUs") == NULL, "a rank reported bound:\n%s", r.err);
        run_result_free(&r);
    }
    /* ... which --bind core refuses: usage, one line, nothing started */
    {
        char num[16], want[96];
        const char *args[] = {"--bind", "core", "-n", num, "echo", "started", NULL};
        const run_spec_t spec = {.args = args};
        run_result_t r;

        snprintf(num, sizeof(num), "%ld", c + 1);
        snprintf(want, sizeof(want), "flxrun: --bind core: %ld ranks on %ld CPUs cannot have one each",
                 c + 1, c);
        run_flxrun(&spec, &r);
        ck_assert_msg(r.code == 2, "--bind core -n %ld: exit %d", c + 1, r.code);
        ck_assert_msg(strncmp(r.err, want, strlen(want)) == 0, "stderr:\n%s", r.err);
        ck_assert_str_eq(r.out, "");
        run_result_free(&r);
    }
    n = c < 64 ? c : 64;
    run_bind("--bind=none", false, n, sets);
    for (long i = 0; i < n; i++)
        ck_assert_msg(CPU_EQUAL(&sets[i], &mine), "--bind none: rank %ld bound", i);
    free(sets);
}
END_TEST

/* A rank the kernel will not bind: one line naming it and its CPUs, exit
 * 127 (a rank that could not start), nothing run, also with more ranks than
 * CPUs that the cores divide (shared cores); --bind none, and more ranks
 * than CPUs that they do not divide (unbound), never ask the kernel and
 * run. */
START_TEST(test_bind_refused)
{
    cpu_set_t mine;
    char num[16], want[1400], list[1024];
    const char *bound[] = {"--bind", "core", "-n", "1", "echo", "started", NULL};
    const char *all[] = {"-n", num, "echo", "started", NULL};
    const char *none[] = {"--bind", "none", "-n", "1", "echo", "started", NULL};
    const char *over[] = {"-n", NULL, "echo", "started", NULL};
    char over_num[24];
    run_spec_t spec = {.args = bound, .deny_setaffinity = 1};
    run_result_t r;
    long c;
    cpumap_t *map = malloc(sizeof(*map));

    ck_assert_int_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
    c = CPU_COUNT(&mine);
    ck_assert_ptr_nonnull(map);
    cpumap_read(map, &mine, CPUMAP_SYSFS);
    run_flxrun(&spec, &r);
    if (r.code == NO_SECCOMP_EXIT && strstr(r.err, "check_flxrun: no seccomp filter") != NULL) {
        fprintf(stderr, "test_bind_refused: skipped: %s", r.err);
        run_result_free(&r);
        free(map);
        return;
    }
    snprintf(want, sizeof(want), "flxrun: cannot bind rank 0 to CPUs %s of %ld: %s (--bind none runs unbound)\n",
             cpumap_list(&mine, list, sizeof(list)), c, strerror(EPERM));
    ck_assert_msg(r.code == 127, "--bind core, setaffinity refused: exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_msg(strstr(r.err, want) != NULL, "stderr:\n%s\nwanted:\n%s", r.err, want);
    ck_assert_str_eq(r.out, "");
    run_result_free(&r);

    /* auto with as many ranks as CPUs (at most 8): every rank refused, the job fails */
    snprintf(num, sizeof(num), "%ld", c < 8 ? c : 8);
    spec.args = all;
    run_flxrun(&spec, &r);
    ck_assert_msg(r.code == 127, "-n %s, setaffinity refused: exit %d, stderr:\n%s", num, r.code, r.err);
    ck_assert_msg(strstr(r.err, "flxrun: cannot bind rank ") != NULL, "stderr:\n%s", r.err);
    ck_assert_msg(strstr(r.out, "started") == NULL, "a rank ran:\n%s", r.out);
    run_result_free(&r);

    spec.args = none;
    run_flxrun(&spec, &r);
    ck_assert_msg(r.code == 0, "--bind none, setaffinity refused: exit %d, stderr:\n%s", r.code, r.err);
    ck_assert_int_eq(count_substr(r.out, "started"), 1);
    run_result_free(&r);

    /* C + 1 (unbound where the cores do not divide it) and the first
     * multiple of the cores above C (shared cores) */
    for (int t = 0; t < 2; t++) {
        long n = t == 0 ? c + 1 : (c / map->ncores + 1) * map->ncores;
        bool shared = n % map->ncores == 0;

        if (n > 256 || (t == 1 && n == c + 1))
            continue;
        snprintf(over_num, sizeof(over_num), "%ld", n);
        over[1] = over_num;
        spec.args = over;
        run_flxrun(&spec, &r);
        if (shared) {
            ck_assert_msg(r.code == 127, "-n %s > CPUs, setaffinity refused: exit %d, stderr:\n%s",
                          over_num, r.code, r.err);
            ck_assert_msg(strstr(r.err, "flxrun: cannot bind rank ") != NULL, "stderr:\n%s",
                          r.err);
            ck_assert_msg(strstr(r.out, "started") == NULL, "a rank ran:\n%s", r.out);
        } else {
            ck_assert_msg(r.code == 0, "-n %s > CPUs, unbound, setaffinity refused: exit %d, "
                          "stderr:\n%s", over_num, r.code, r.err);
            ck_assert_int_eq(count_substr(r.out, "started"), (int)n);
        }
        run_result_free(&r);
    }
    free(map);
}
END_TEST

static Suite *flxrun_suite(void)
{
    Suite *s = suite_create("flxrun");
    TCase *tc_env = tcase_create("env");
    TCase *tc_fail = tcase_create("failure");
    TCase *tc_sig = tcase_create("signals");
    TCase *tc_out = tcase_create("output");
    TCase *tc_usage = tcase_create("usage");

    tcase_add_test(tc_env, test_hello_env);
    tcase_add_test(tc_env, test_np_spellings);
    tcase_add_test(tc_env, test_root_and_secret_shared);
    tcase_add_test(tc_env, test_preset_root_and_secret_kept);
    tcase_add_test(tc_env, test_stdin_is_dev_null);
    tcase_add_test(tc_env, test_bind);
    tcase_add_test(tc_env, test_bind_refused);
    tcase_add_test(tc_fail, test_rank_failure_stops_others);
    tcase_add_test(tc_fail, test_failure_escalates_to_sigkill);
    tcase_add_test(tc_fail, test_rank_killed_by_signal);
    tcase_add_test(tc_fail, test_timeout);
    tcase_add_test(tc_fail, test_timeout_not_reached);
    tcase_add_test(tc_sig, test_sigterm_forwarded);
    tcase_add_test(tc_sig, test_signal_kills_plain_ranks);
    tcase_add_test(tc_sig, test_second_sigint_kills);
    tcase_add_test(tc_sig, test_usr_signals_forwarded);
    tcase_add_test(tc_sig, test_job_control);
    tcase_add_test(tc_sig, test_stuck_reader);
    tcase_add_test(tc_sig, test_success_leftover_holds_pipe);
    tcase_add_test(tc_sig, test_flxrun_killed);
    tcase_add_test(tc_out, test_stderr_prefixed_and_partial_lines);
    tcase_add_test(tc_out, test_long_line_split);
    tcase_add_test(tc_out, test_buffer_sized_lines);
    tcase_add_test(tc_out, test_many_ranks_many_lines);
    tcase_add_test(tc_usage, test_bad_usage);
    tcase_add_test(tc_usage, test_missing_program);
    tcase_add_test(tc_usage, test_help_and_version);

    tcase_set_timeout(tc_env, TEST_TIMEOUT_S);
    tcase_set_timeout(tc_fail, TEST_TIMEOUT_S);
    tcase_set_timeout(tc_sig, TEST_TIMEOUT_S);
    tcase_set_timeout(tc_out, TEST_TIMEOUT_S);
    tcase_set_timeout(tc_usage, TEST_TIMEOUT_S);

    suite_add_tcase(s, tc_env);
    suite_add_tcase(s, tc_fail);
    suite_add_tcase(s, tc_sig);
    suite_add_tcase(s, tc_out);
    suite_add_tcase(s, tc_usage);
    return s;
}

int main(void)
{
    SRunner *sr;
    int nfailed;

    if (access(flxrun_path(), X_OK) != 0) {
        fprintf(stderr, "check_flxrun: %s is not an executable (set FLXRUN): %s\n",
                flxrun_path(), strerror(errno));
        return 99;                                   /* automake: hard error */
    }
    sr = srunner_create(flxrun_suite());
    srunner_run_all(sr, CK_NORMAL);
    nfailed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nfailed == 0 ? 0 : 1;
}
