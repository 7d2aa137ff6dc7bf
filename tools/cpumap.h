/* cpumap.h -- which of the CPUs a process may use share a core, and which
 * CPUs `flxrun --bind core' gives each rank.
 *
 * Linux numbers hardware threads, not cores: on a machine with two threads a
 * core the siblings are often CPU i and i+C/2 (or 2k and 2k+1), and on one
 * with two packages the numbers may alternate between them.  Blocks of CPU
 * numbers can then put two ranks on one core or one rank across packages.
 * The map orders the CPUs by package, then core, then thread, and hands out
 * whole cores, as `mpirun --bind-to core' does:
 *
 *   8 CPUs, siblings i and i+4        order 0 4 | 1 5 | 2 6 | 3 7   (| = core)
 *   -n 4: rank 0 {0,4}, rank 1 {1,5}, rank 2 {2,6}, rank 3 {3,7}
 *   -n 2: rank 0 {0,1,4,5}, rank 1 {2,3,6,7}
 *   -n 8 (more ranks than cores): one thread each, in that order
 *   -n 5: rank 0 {0}, rank 1 {4}, rank 2 {5}, rank 3 {2,6}, rank 4 {3,7}
 *         (threads [i*C/N, (i+1)*C/N) of that order, cut where the core the
 *         block starts in ends, so no rank spans two cores; CPU 1 idles)
 *   -n 9 (more ranks than CPUs): rank i on the whole core i mod 4, shared
 *         (rank 0 {0,4}, rank 1 {1,5}, ..., rank 4 {0,4}, rank 8 {0,4}),
 *         so ring neighbours i and i+1 run on different cores (and N-1
 *         and 0 where K divides N, which flxrun requires of this binding),
 *         as `mpirun --map-by core --bind-to core:overload-allowed'
 *
 * With one thread a core and one package (or no topology in sysfs) this is
 * CPUs [i*C/N, (i+1)*C/N) in number order, as before the map existed.
 * Pure functions over a directory laid out like /sys/devices/system/cpu, so
 * tests can give them any topology.
 */
#ifndef FLX_TOOLS_CPUMAP_H
#define FLX_TOOLS_CPUMAP_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <sched.h>
#include <stddef.h>

#define CPUMAP_SYSFS "/sys/devices/system/cpu"

typedef struct {
    int cpu;
    int package;                 /* physical_package_id; -1 where sysfs does not say */
    int core;                    /* lowest CPU of its core, whether allowed or not */
} cpumap_cpu_t;

typedef struct {
    int ncpus;                   /* CPUs in the allowed set (at most CPU_SETSIZE) */
    int ncores;                  /* cores they belong to */
    int npackages;               /* packages those belong to (unknown ones count as one) */
    int max_threads;             /* most allowed CPUs in one core */
    cpumap_cpu_t cpu[CPU_SETSIZE]; /* [ncpus], by package, core, then CPU number */
} cpumap_t;

/* Fills map with the CPUs of allowed as the files under dir describe them
 * (cpuN/topology/core_cpus_list, else thread_siblings_list; cpuN/topology/
 * physical_package_id, else that of its core's first CPU).  A CPU whose
 * files are missing or malformed is a core of its own in an unknown
 * package.  Never fails. */
void cpumap_read(cpumap_t *map, const cpu_set_t *allowed, const char *dir);

/* The CPUs of rank (0 <= rank < nranks, map->ncpus >= 1) into set: with
 * nranks <= map->ncores, whole cores [rank*K/N, (rank+1)*K/N) of the K in
 * map order; with nranks <= map->ncpus, CPUs [rank*C/N, (rank+1)*C/N) of
 * the C in map order, up to the end of the core the first of them is in
 * (never empty: the block starts differ); with more ranks than CPUs, every
 * CPU of core rank mod K (shared with the ranks K, 2K, ... away).  Returns
 * the number of cores the set touches. */
int cpumap_rank(const cpumap_t *map, long nranks, long rank, cpu_set_t *set);

/* "C CPUs in K cores (at most T threads a core) in P packages" (singular
 * where one) into buf.  Returns buf. */
char *cpumap_describe(const cpumap_t *map, char *buf, size_t len);

/* set as a kernel CPU list ("0-3,8,10-11") into buf; "" for an empty set.
 * Returns buf. */
char *cpumap_list(const cpu_set_t *set, char *buf, size_t len);

/* A kernel CPU list into set; 0, or -1 when s is malformed or empty. */
int cpumap_parse_list(const char *s, cpu_set_t *set);

#endif
