/* mp.c -- fork real ranks for multi-process tests (see mp.h). */
#include "tests/mp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


void mp_free_root(char *buf, size_t len)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        perror("mp_free_root");
        exit(99);
    }
    close(fd);
    snprintf(buf, len, "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
}

flx_status_t mp_comm_create(int rank, int size, const char *root, flx_comm_h *comm_p)
{
    flx_comm_params_t p = {
        .field_mask = FLX_COMM_PARAM_RANK | FLX_COMM_PARAM_SIZE | FLX_COMM_PARAM_ROOT |
                      FLX_COMM_PARAM_SECRET,
        .rank = rank,
        .size = size,
        .root = root,
        .secret = MP_SECRET,
    };
    return flx_comm_create(&p, comm_p);
}

int mp_nranks_wanted(int n)
{
    const char *v = getenv("FLX_TEST_NRANKS");
    int wanted = 0;

    if (v == NULL || *v == '\0')
        return 1;
    for (const char *p = v;;) {
        char *end;
        long k = strtol(p, &end, 10);
        if (end == p || k < 1 || k > 4096 || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "FLX_TEST_NRANKS=\"%s\": want rank counts like \"5\" or \"1,2,5\"\n",
                    v);
            exit(99);
        }
        wanted |= k == n;
        if (*end == '\0')
            return wanted;
        p = end + 1;
    }
}

void *mp_shared_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED) {
        perror("mp_shared_alloc");
        exit(99);
    }
    return p; /* anonymous: zeroed */
}

int mp_fail(int rank, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "rank %d: ", rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    mp_body_t body;
    mp_raw_body_t raw;
    void *arg;
} mp_job_t;

static int mp_child(const mp_job_t *job, int rank, int size, const char *root)
{
    flx_comm_h comm;
    flx_status_t st;
    int rc;

    if (job->raw)
        return job->raw(rank, size, root, job->arg);
    st = mp_comm_create(rank, size, root, &comm);
    if (st != FLX_OK)
        return mp_fail(rank, "flx_comm_create: %s", flx_status_string(st));
    rc = job->body(comm, rank, size, job->arg);
    st = flx_comm_destroy(comm);
    if (st != FLX_OK && rc == 0)
        rc = mp_fail(rank, "flx_comm_destroy: %s", flx_status_string(st));
    return rc;
}

static int mp_launch(int size, const mp_job_t *job, double timeout_s, int *codes)
{
    char root[64];
    pid_t *pids = calloc((size_t)size, sizeof(pid_t));
    int failed = 0, left = size;
    double deadline = now() + timeout_s;

    mp_free_root(root, sizeof(root));
    fflush(NULL);
    for (int r = 0; r < size; r++) {
        pids[r] = fork();
        if (pids[r] == 0) { /* what a body printed reaches the log even when it is a file */
            int rc = mp_child(job, r, size, root);
            fflush(NULL);
            _exit(rc);
        }
    }
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            for (int r = 0; r < size; r++) {
                if (pids[r] != pid)
                    continue;
                int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                if (codes)
                    codes[r] = code;
                if (code != 0)
                    failed++;
                pids[r] = 0;
                left--;
            }
            continue;
        }
        if (now() > deadline) {
            fprintf(stderr, "mp_run: %d ranks still running after %.0f s: killing them\n",
                    left, timeout_s);
            for (int r = 0; r < size; r++)
                if (pids[r] > 0)
                    kill(pids[r], SIGKILL);
            deadline = now() + 1e9;
        }
        usleep(2000);
    }
    free(pids);
    return failed;
}

int mp_run(int size, mp_body_t body, void *arg, double timeout_s, int *exit_codes_p)
{
    mp_job_t job = {.body = body, .arg = arg};
    return mp_launch(size, &job, timeout_s, exit_codes_p);
}

int mp_run_raw(int size, mp_raw_body_t body, void *arg, double timeout_s, int *exit_codes_p)
{
    mp_job_t job = {.raw = body, .arg = arg};
    return mp_launch(size, &job, timeout_s, exit_codes_p);
}

static int mp_launch_again(int size, const mp_job_t *job, double timeout_s, int tries,
                           const char *name)
{
    int *codes = calloc((size_t)size, sizeof(int)), failed = 0;

    if (codes == NULL) {
        perror("mp_run_again");
        exit(99);
    }
    for (int t = 0; t < tries; t++) {
        int again = 1;

        failed = mp_launch(size, job, timeout_s, codes);
        for (int r = 0; r < size; r++)
            again &= codes[r] == 0 || codes[r] == MP_AGAIN;
        if (failed == 0 || !again)
            break;
        fprintf(stderr, "%s: run %d of at most %d: every rank that failed may have met this "
                "machine, not a bug (MP_AGAIN)\n", name, t + 1, tries);
    }
    free(codes);
    return failed;
}

int mp_run_again(int size, mp_body_t body, void *arg, double timeout_s, int tries,
                 const char *name)
{
    mp_job_t job = {.body = body, .arg = arg};
    return mp_launch_again(size, &job, timeout_s, tries, name);
}

int mp_run_raw_again(int size, mp_raw_body_t body, void *arg, double timeout_s, int tries,
                     const char *name)
{
    mp_job_t job = {.raw = body, .arg = arg};
    return mp_launch_again(size, &job, timeout_s, tries, name);
}

int mp_capture_start(char *path)
{
    int fd = mkstemp(path), saved;

    fflush(stderr);
    saved = dup(2);
    dup2(fd, 2);
    close(fd);
    return saved;
}

int mp_capture_stop(int saved, const char *path, const char *pattern)
{
    char line[512];
    int count = 0;
    FILE *f;

    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f)) {
        count += strstr(line, pattern) != NULL;
        fputs(line, stderr);
    }
    if (f)
        fclose(f);
    unlink(path);
    return count;
}
