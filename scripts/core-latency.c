/* core-latency.c -- the round trip of one cache line between two CPUs, the
 * cost every byte of a loopback transfer pays once (the sender's core writes
 * it, the receiver's core reads it), and more than once when the kernel
 * reuses a page the other core last wrote.
 *
 *   cc -O2 -pthread -o core-latency core-latency.c
 *   ./core-latency [-n ROUNDS] [-r NRANKS | CPU_A CPU_B]
 *
 * Two threads, one pinned to each CPU, pass a flag back and forth ROUNDS
 * times (default 100000, after a tenth as many unmeasured).  The CPUs: the
 * two named; with -r, the first CPU of each of the blocks [i*C/N, (i+1)*C/N)
 * of the C CPUs this process may use, for ranks 0 and 1 (that is where
 * `flxrun -n NRANKS' binds them with one thread a core; `flxrun
 * --report-bindings' says where it does on any machine, and
 * scripts/compare-mpi.sh passes its CPUs as CPU_A CPU_B), or the first two
 * when NRANKS exceeds C; by default the first two.  Prints
 *
 *   core-to-core round trip CPU 0 <-> CPU 1: 72 ns (100000 rounds)
 *
 * On a physical machine the topology sets it (more across sockets than
 * within one).  In a virtual machine the host may move the virtual CPUs: on
 * the machine flexcoll is measured on it reads 50-110 ns most of the time
 * and about 320-390 ns in spells of minutes, and
 * loopback TCP between ranks on those two CPUs is slower in those spells
 * (scripts/compare-mpi.sh records it beside every pair of runs).
 *
 * Exit 0; 2 for bad arguments; 77 when fewer than two CPUs may be used
 * (nothing to measure); 1 when a thread cannot be pinned.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    _Alignas(64) atomic_int flag; /* 1: the far side's turn, 0: ours */
    char pad[60];
    long rounds;
    int cpu;
    int err; /* the far thread's pthread_setaffinity_np status */
} pingpong_t;

static int pin_self(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *far_side(void *arg)
{
    pingpong_t *pp = arg;

    pp->err = pin_self(pp->cpu);
    if (pp->err != 0) { /* answer anyway, so the near side never waits forever */
        atomic_store(&pp->flag, -1);
        return NULL;
    }
    for (long i = 0; i < pp->rounds; i++) {
        while (atomic_load_explicit(&pp->flag, memory_order_acquire) != 1)
            ;
        atomic_store_explicit(&pp->flag, 0, memory_order_release);
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Parse a non-negative decimal; -1 when s is not one. */
static long parse_count(const char *s)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    return errno || end == s || *end || v < 0 ? -1 : v;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: core-latency [-n ROUNDS] [-r NRANKS | CPU_A CPU_B]\n");
}

int main(int argc, char **argv)
{
    pingpong_t pp = {.rounds = 100000};
    int cpus[2] = {-1, -1}, ncpu = 0;
    pthread_t thread;
    long warm, i;
    double t0, dt;
    long nranks = 0;
    int arg = 1, err;

    if (arg + 1 < argc && strcmp(argv[arg], "-n") == 0) {
        pp.rounds = parse_count(argv[arg + 1]);
        if (pp.rounds <= 0) {
            fprintf(stderr, "core-latency: -n needs a positive number of rounds, not '%s'\n",
                    argv[arg + 1]);
            return 2;
        }
        arg += 2;
    }
    if (arg + 1 < argc && strcmp(argv[arg], "-r") == 0) {
        nranks = parse_count(argv[arg + 1]);
        if (nranks < 2) {
            fprintf(stderr, "core-latency: -r needs a rank count of at least 2, not '%s'\n",
                    argv[arg + 1]);
            return 2;
        }
        arg += 2;
    }
    if (argc - arg == 2 && nranks == 0) {
        for (int k = 0; k < 2; k++) {
            long v = parse_count(argv[arg + k]);
            if (v < 0 || v >= CPU_SETSIZE) {
                fprintf(stderr, "core-latency: '%s' is not a CPU number\n", argv[arg + k]);
                return 2;
            }
            cpus[k] = (int)v;
        }
        if (cpus[0] == cpus[1]) {
            fprintf(stderr, "core-latency: CPU_A and CPU_B are both %d; name two CPUs\n", cpus[0]);
            return 2;
        }
    } else if (argc - arg != 0) {
        usage(stderr);
        return 2;
    } else {
        cpu_set_t set;
        int count, second;
        if (sched_getaffinity(0, sizeof(set), &set) != 0) {
            fprintf(stderr, "core-latency: sched_getaffinity: %s\n", strerror(errno));
            return 1;
        }
        count = CPU_COUNT(&set);
        /* rank 1's block starts at the (C/N)-th CPU when flxrun binds */
        second = nranks >= 2 && nranks <= count ? count / (int)nranks : 1;
        for (int c = 0; c < CPU_SETSIZE && ncpu <= second; c++) {
            if (!CPU_ISSET(c, &set))
                continue;
            if (ncpu == 0)
                cpus[0] = c;
            else if (ncpu == second)
                cpus[1] = c;
            ncpu++;
        }
        if (count < 2) {
            fprintf(stderr, "core-latency: this process may use only CPU %d: nothing to measure\n",
                    cpus[0]);
            return 77;
        }
    }
    if ((err = pin_self(cpus[0])) != 0) {
        fprintf(stderr, "core-latency: cannot run on CPU %d: %s\n", cpus[0], strerror(err));
        return 1;
    }
    warm = pp.rounds / 10;
    pp.cpu = cpus[1];
    pp.rounds += warm;
    atomic_store(&pp.flag, 0);
    if ((err = pthread_create(&thread, NULL, far_side, &pp)) != 0) {
        fprintf(stderr, "core-latency: pthread_create: %s\n", strerror(err));
        return 1;
    }
    t0 = now_s();
    for (i = 0; i < pp.rounds; i++) {
        int f;
        if (i == warm)
            t0 = now_s();
        f = 0; /* hand over unless the far side has given up (-1) */
        if (!atomic_compare_exchange_strong(&pp.flag, &f, 1))
            break;
        while ((f = atomic_load_explicit(&pp.flag, memory_order_acquire)) == 1)
            ;
        if (f < 0)
            break;
    }
    dt = now_s() - t0;
    pthread_join(thread, NULL);
    if (pp.err != 0) {
        fprintf(stderr, "core-latency: cannot run on CPU %d: %s\n", cpus[1], strerror(pp.err));
        return 1;
    }
    printf("core-to-core round trip CPU %d <-> CPU %d: %.0f ns (%ld rounds)\n", cpus[0], cpus[1],
           dt / (double)(pp.rounds - warm) * 1e9, pp.rounds - warm);
    return 0;
}
