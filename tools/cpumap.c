/* cpumap.c -- the CPUs' cores and packages from sysfs, and the rank blocks of
 * `flxrun --bind core' (contract in cpumap.h). */
#include "cpumap.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cpumap_parse_list(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    while (*s != '\0' && *s != '\n') {
        char *end;
        long a = strtol(s, &end, 10), b = a;

        if (end == s || a < 0)
            return -1;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1 || b < a)
                return -1;
            s = end;
        }
        for (long c = a; c <= b && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, set);
        if (*s == ',')
            s++;
        else if (*s != '\0' && *s != '\n')
            return -1;
    }
    return CPU_COUNT(set) > 0 ? 0 : -1;
}

char *cpumap_list(const cpu_set_t *set, char *buf, size_t len)
{
    size_t used = 0;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE; c++) {
        int last = c;
        int n;

        if (!CPU_ISSET(c, set))
            continue;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set))
            last++;
        n = last == c ? snprintf(buf + used, len - used, "%s%d", used ? "," : "", c)
                      : snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", c, last);
        if (n < 0 || (size_t)n >= len - used) {
            buf[used] = '\0';                /* cut short: whole entries only */
            break;
        }
        used += (size_t)n;
        c = last;
    }
    return buf;
}

char *cpumap_describe(const cpumap_t *map, char *buf, size_t len)
{
    snprintf(buf, len, "%d CPU%s in %d core%s (at most %d thread%s a core) in %d package%s",
             map->ncpus, map->ncpus == 1 ? "" : "s", map->ncores, map->ncores == 1 ? "" : "s",
             map->max_threads, map->max_threads == 1 ? "" : "s", map->npackages,
             map->npackages == 1 ? "" : "s");
    return buf;
}

/* The first line of dir/cpuN/topology/name into buf; false if absent. */
static bool cpumap_topology_file(const char *dir, int cpu, const char *name, char *buf, size_t len)
{
    char path[4096];
    FILE *f;
    bool ok;

    snprintf(path, sizeof(path), "%s/cpu%d/topology/%s", dir, cpu, name);
    f = fopen(path, "r");
    if (f == NULL)
        return false;
    ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    return ok;
}

/* The lowest CPU of cpu's core from the list file name; -1 where it is
 * missing, malformed or does not hold cpu. */
static int cpumap_core_from(const char *dir, int cpu, const char *name)
{
    char line[4096];
    cpu_set_t core;

    if (!cpumap_topology_file(dir, cpu, name, line, sizeof(line)) ||
        cpumap_parse_list(line, &core) < 0 || !CPU_ISSET(cpu, &core))
        return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &core))
            return c;
    return -1;
}

/* The lowest CPU of cpu's core (core_cpus_list, else thread_siblings_list);
 * cpu itself where neither says. */
static int cpumap_core_of(const char *dir, int cpu)
{
    int core = cpumap_core_from(dir, cpu, "core_cpus_list");

    if (core < 0)
        core = cpumap_core_from(dir, cpu, "thread_siblings_list");
    return core < 0 ? cpu : core;
}

static int cpumap_package_of(const char *dir, int cpu)
{
    char line[64], *end;
    long v;

    if (!cpumap_topology_file(dir, cpu, "physical_package_id", line, sizeof(line)))
        return -1;
    v = strtol(line, &end, 10);
    if (end == line || (*end != '\n' && *end != '\0') || v < 0 || v > 1 << 20)
        return -1;
    return (int)v;
}

static int cpumap_cmp(const void *a, const void *b)
{
    const cpumap_cpu_t *x = a, *y = b;

    if (x->package != y->package)
        return x->package < y->package ? -1 : 1;
    if (x->core != y->core)
        return x->core < y->core ? -1 : 1;
    return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

static bool cpumap_same_core(const cpumap_cpu_t *x, const cpumap_cpu_t *y)
{
    return x->package == y->package && x->core == y->core;
}

void cpumap_read(cpumap_t *map, const cpu_set_t *allowed, const char *dir)
{
    int threads = 0;

    map->ncpus = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, allowed))
            continue;
        cpumap_cpu_t *m = &map->cpu[map->ncpus++];

        m->cpu = c;
        m->core = cpumap_core_of(dir, c);
        m->package = cpumap_package_of(dir, c);
        if (m->package < 0 && m->core != c)  /* its core's first CPU may say */
            m->package = cpumap_package_of(dir, m->core);
    }
    qsort(map->cpu, (size_t)map->ncpus, sizeof(map->cpu[0]), cpumap_cmp);
    map->ncores = map->npackages = map->max_threads = 0;
    for (int i = 0; i < map->ncpus; i++) {
        if (i == 0 || map->cpu[i].package != map->cpu[i - 1].package)
            map->npackages++;
        if (i == 0 || !cpumap_same_core(&map->cpu[i], &map->cpu[i - 1])) {
            map->ncores++;
            threads = 0;
        }
        if (++threads > map->max_threads)
            map->max_threads = threads;
    }
}

/* More ranks than CPUs: rank on every thread of core rank mod K (cpumap.h). */
static int cpumap_rank_cycle(const cpumap_t *map, long rank, cpu_set_t *set)
{
    long want, core = -1;

    CPU_ZERO(set);
    if (map->ncores == 0)
        return 0;
    want = rank % map->ncores;
    for (int i = 0; i < map->ncpus; i++) {
        core += i == 0 || !cpumap_same_core(&map->cpu[i], &map->cpu[i - 1]);
        if (core > want)
            break;
        if (core == want)
            CPU_SET(map->cpu[i].cpu, set);
    }
    return 1;
}

int cpumap_rank(const cpumap_t *map, long nranks, long rank, cpu_set_t *set)
{
    bool by_core = nranks <= map->ncores;
    long units = by_core ? map->ncores : map->ncpus;
    long first = rank * units / nranks, end = (rank + 1) * units / nranks;
    long unit = -1;
    int cores = 0;

    if (nranks > map->ncpus)
        return cpumap_rank_cycle(map, rank, set);
    CPU_ZERO(set);
    for (int i = 0; i < map->ncpus; i++) {
        bool new_core = i == 0 || !cpumap_same_core(&map->cpu[i], &map->cpu[i - 1]);

        unit = by_core ? unit + new_core : i;
        if (unit < first)
            continue;
        if (unit >= end || (!by_core && new_core && CPU_COUNT(set) > 0))
            break;                           /* a block of threads stays in one core */
        if (new_core || CPU_COUNT(set) == 0)
            cores++;
        CPU_SET(map->cpu[i].cpu, set);
    }
    return cores;
}
