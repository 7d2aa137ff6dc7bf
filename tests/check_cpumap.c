/* check_cpumap.c -- unit tests of flxrun's placement of ranks on cores
 * (tools/cpumap.h).
 *
 * Each topology is written as files laid out like /sys/devices/system/cpu
 * (cpuN/topology/core_cpus_list or thread_siblings_list, and
 * physical_package_id) in a fresh directory, the layouts real machines
 * have: siblings i and i+C/2, two packages with alternating numbers, big and
 * little cores, a restricted affinity mask, no topology at all, malformed
 * files.  The expected blocks are written out by hand.  The machine's own
 * /sys is checked for the properties every placement must have. */
#include "tools/cpumap.h"

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    int cpu;
    const char *package;         /* physical_package_id's text; NULL: no file */
    const char *core;            /* core_cpus_list's text; NULL: no file */
    const char *siblings;        /* thread_siblings_list's text; NULL: no file */
} fake_cpu_t;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_int_ge(fprintf(f, "%s\n", text), 0);
    ck_assert_int_eq(fclose(f), 0);
}

/* A sysfs-like tree of the cpus into a fresh directory dir (PATH_MAX). */
static void fake_tree(const fake_cpu_t *cpus, int n, char *dir)
{
    char path[4096];

    strcpy(dir, "/tmp/check_cpumap.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/cpu%d", dir, cpus[i].cpu);
        ck_assert_int_eq(mkdir(path, 0700), 0);
        snprintf(path, sizeof(path), "%s/cpu%d/topology", dir, cpus[i].cpu);
        ck_assert_int_eq(mkdir(path, 0700), 0);
        if (cpus[i].package != NULL) {
            snprintf(path, sizeof(path), "%s/cpu%d/topology/physical_package_id", dir, cpus[i].cpu);
            write_file(path, cpus[i].package);
        }
        if (cpus[i].core != NULL) {
            snprintf(path, sizeof(path), "%s/cpu%d/topology/core_cpus_list", dir, cpus[i].cpu);
            write_file(path, cpus[i].core);
        }
        if (cpus[i].siblings != NULL) {
            snprintf(path, sizeof(path), "%s/cpu%d/topology/thread_siblings_list", dir,
                     cpus[i].cpu);
            write_file(path, cpus[i].siblings);
        }
    }
}

static void fake_tree_remove(const char *dir)
{
    char cmd[4200];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void set_of(const char *list, cpu_set_t *set)
{
    ck_assert_msg(cpumap_parse_list(list, set) == 0, "bad list in the test: %s", list);
}

static void set_all(const fake_cpu_t *cpus, int n, cpu_set_t *set)
{
    CPU_ZERO(set);
    for (int i = 0; i < n; i++)
        CPU_SET(cpus[i].cpu, set);
}

/* rank r of nranks gets want[r] (kernel CPU lists) and touches cores[r] cores */
static void expect_blocks(const cpumap_t *map, long nranks, const char *const *want,
                          const int *cores)
{
    for (long r = 0; r < nranks; r++) {
        cpu_set_t got, expect;
        char g[256];
        int k = cpumap_rank(map, nranks, r, &got);

        set_of(want[r], &expect);
        ck_assert_msg(CPU_EQUAL(&got, &expect), "-n %ld: rank %ld got CPUs %s, want %s", nranks,
                      r, cpumap_list(&got, g, sizeof(g)), want[r]);
        ck_assert_msg(k == cores[r], "-n %ld: rank %ld touches %d cores, want %d", nranks, r, k,
                      cores[r]);
    }
}

/* More ranks than CPUs (N = C + 1 and 2C + 1): ranks 0 to K - 1 take one
 * whole core each, in map order, covering allowed; rank r shares rank
 * r - K's; neighbours r - 1 and r share nothing while K > 1. */
static void check_cycle(const cpumap_t *map, const cpu_set_t *allowed)
{
    for (long n = map->ncpus + 1; n <= 2L * map->ncpus + 1; n += map->ncpus) {
        cpu_set_t all, set, prev, first[CPU_SETSIZE > 256 ? 256 : CPU_SETSIZE];
        int k = map->ncores;

        CPU_ZERO(&prev);
        if (k > (int)(sizeof(first) / sizeof(first[0])))
            return;
        CPU_ZERO(&all);
        for (long r = 0; r < n; r++) {
            cpu_set_t both;

            ck_assert_int_eq(cpumap_rank(map, n, r, &set), 1);
            ck_assert_msg(CPU_COUNT(&set) > 0, "-n %ld: rank %ld has no CPU", n, r);
            if (r < k) {
                CPU_AND(&both, &all, &set);
                ck_assert_msg(CPU_COUNT(&both) == 0, "-n %ld: rank %ld shares a core early", n, r);
                CPU_OR(&all, &all, &set);
                first[r] = set;
                /* one whole core: the map's CPUs of that core, no others */
                for (int i = 0; i < map->ncpus; i++)
                    for (int j = 0; j < map->ncpus; j++)
                        if (map->cpu[i].package == map->cpu[j].package &&
                            map->cpu[i].core == map->cpu[j].core)
                            ck_assert(CPU_ISSET(map->cpu[i].cpu, &set) ==
                                      CPU_ISSET(map->cpu[j].cpu, &set));
            } else {
                ck_assert_msg(CPU_EQUAL(&set, &first[r % k]), "-n %ld: rank %ld not on core %ld",
                              n, r, r % k);
            }
            if (r > 0 && k > 1) {
                CPU_AND(&both, &set, &prev);
                ck_assert_msg(CPU_COUNT(&both) == 0, "-n %ld: ranks %ld and %ld share CPUs", n,
                              r - 1, r);
            }
            prev = set;
        }
        ck_assert_msg(CPU_EQUAL(&all, allowed), "-n %ld: the cores do not cover the CPUs", n);
    }
}

/* What every placement must be, for each N from 1 to C: non-empty blocks,
 * disjoint; while N <= K covering allowed, no core split between two ranks
 * and the ranks' core counts at most one apart; above K each block inside
 * one core, and at N = C one CPU each. */
static void check_properties(const cpumap_t *map, const cpu_set_t *allowed)
{
    ck_assert_int_eq(map->ncpus, CPU_COUNT(allowed));
    for (int i = 0; i < map->ncpus; i++) {
        ck_assert_msg(CPU_ISSET(map->cpu[i].cpu, allowed), "CPU %d not allowed", map->cpu[i].cpu);
        for (int j = 0; j < i; j++)
            ck_assert_int_ne(map->cpu[i].cpu, map->cpu[j].cpu);
    }
    for (long n = 1; n <= map->ncpus; n++) {
        cpu_set_t all, sets[CPU_SETSIZE > 256 ? 256 : CPU_SETSIZE];
        int most = 0, least = 1 << 30;

        if (n > (long)(sizeof(sets) / sizeof(sets[0])))
            break;
        CPU_ZERO(&all);
        for (long r = 0; r < n; r++) {
            cpu_set_t both;
            int k = cpumap_rank(map, n, r, &sets[r]);

            ck_assert_msg(CPU_COUNT(&sets[r]) > 0, "-n %ld: rank %ld has no CPU", n, r);
            CPU_AND(&both, &all, &sets[r]);
            ck_assert_msg(CPU_COUNT(&both) == 0, "-n %ld: rank %ld shares a CPU", n, r);
            CPU_OR(&all, &all, &sets[r]);
            most = k > most ? k : most;
            least = k < least ? k : least;
        }
        if (n > map->ncores) {
            for (long r = 0; r < n; r++) {
                int core = -1, package = -2;

                for (int i = 0; i < map->ncpus; i++) {
                    if (!CPU_ISSET(map->cpu[i].cpu, &sets[r]))
                        continue;
                    ck_assert_msg(package == -2 || (map->cpu[i].package == package &&
                                                    map->cpu[i].core == core),
                                  "-n %ld: rank %ld spans two cores", n, r);
                    package = map->cpu[i].package;
                    core = map->cpu[i].core;
                }
                ck_assert_int_eq(cpumap_rank(map, n, r, &sets[r]), 1);
                if (n == map->ncpus)
                    ck_assert_int_eq(CPU_COUNT(&sets[r]), 1);
            }
            continue;
        }
        ck_assert_msg(CPU_EQUAL(&all, allowed), "-n %ld: the blocks do not cover the CPUs", n);
        ck_assert_msg(most - least <= 1, "-n %ld: %d to %d cores a rank", n, least, most);
        for (int i = 0; i < map->ncpus; i++)
            for (int j = 0; j < map->ncpus; j++) {
                bool same_core = map->cpu[i].package == map->cpu[j].package &&
                                 map->cpu[i].core == map->cpu[j].core;

                if (!same_core)
                    continue;
                for (long r = 0; r < n; r++)
                    ck_assert_msg(CPU_ISSET(map->cpu[i].cpu, &sets[r]) ==
                                      CPU_ISSET(map->cpu[j].cpu, &sets[r]),
                                  "-n %ld: CPUs %d and %d share a core but not a rank", n,
                                  map->cpu[i].cpu, map->cpu[j].cpu);
            }
    }
    check_cycle(map, allowed);
}

static void read_fake(const fake_cpu_t *cpus, int n, const char *allowed_list, cpumap_t *map)
{
    char dir[4096];
    cpu_set_t allowed;

    fake_tree(cpus, n, dir);
    if (allowed_list != NULL)
        set_of(allowed_list, &allowed);
    else
        set_all(cpus, n, &allowed);
    cpumap_read(map, &allowed, dir);
    fake_tree_remove(dir);
    check_properties(map, &allowed);
}

/* 8 CPUs, 4 cores of two threads: siblings i and i+4 (the usual x86 numbering) */
static const fake_cpu_t ht8[] = {
    {0, "0", "0,4", "0,4"}, {1, "0", "1,5", "1,5"}, {2, "0", "2,6", "2,6"}, {3, "0", "3,7", "3,7"},
    {4, "0", "0,4", "0,4"}, {5, "0", "1,5", "1,5"}, {6, "0", "2,6", "2,6"}, {7, "0", "3,7", "3,7"},
};

START_TEST(test_siblings_apart)
{
    cpumap_t *map = malloc(sizeof(*map));

    read_fake(ht8, 8, NULL, map);
    ck_assert_int_eq(map->ncpus, 8);
    ck_assert_int_eq(map->ncores, 4);
    ck_assert_int_eq(map->npackages, 1);
    ck_assert_int_eq(map->max_threads, 2);
    {
        char d[160];

        ck_assert_str_eq(cpumap_describe(map, d, sizeof(d)),
                         "8 CPUs in 4 cores (at most 2 threads a core) in 1 package");
    }
    expect_blocks(map, 1, (const char *[]){"0-7"}, (int[]){4});
    expect_blocks(map, 2, (const char *[]){"0,1,4,5", "2,3,6,7"}, (int[]){2, 2});
    expect_blocks(map, 3, (const char *[]){"0,4", "1,5", "2,3,6,7"}, (int[]){1, 1, 2});
    expect_blocks(map, 4, (const char *[]){"0,4", "1,5", "2,6", "3,7"}, (int[]){1, 1, 1, 1});
    /* more ranks than cores: threads in core order, a block cut where its
     * first core ends (-n 5: rank 1's [1, 3) would take 4 and 1; CPU 1 idles) */
    expect_blocks(map, 5, (const char *[]){"0", "4", "5", "2,6", "3,7"}, (int[]){1, 1, 1, 1, 1});
    expect_blocks(map, 6, (const char *[]){"0", "4", "1,5", "2", "6", "3,7"},
                  (int[]){1, 1, 1, 1, 1, 1});
    expect_blocks(map, 8, (const char *[]){"0", "4", "1", "5", "2", "6", "3", "7"},
                  (int[]){1, 1, 1, 1, 1, 1, 1, 1});
    /* more ranks than CPUs: rank i on the whole core i mod 4 */
    expect_blocks(map, 9,
                  (const char *[]){"0,4", "1,5", "2,6", "3,7", "0,4", "1,5", "2,6", "3,7", "0,4"},
                  (int[]){1, 1, 1, 1, 1, 1, 1, 1, 1});
    free(map);
}
END_TEST

/* the same with only thread_siblings_list (kernels before core_cpus_list) */
START_TEST(test_siblings_old_kernel)
{
    fake_cpu_t old[8];
    cpumap_t *map = malloc(sizeof(*map));

    memcpy(old, ht8, sizeof(old));
    for (int i = 0; i < 8; i++)
        old[i].core = NULL;
    read_fake(old, 8, NULL, map);
    ck_assert_int_eq(map->ncores, 4);
    expect_blocks(map, 4, (const char *[]){"0,4", "1,5", "2,6", "3,7"}, (int[]){1, 1, 1, 1});
    free(map);
}
END_TEST

/* two packages whose CPU numbers alternate, one thread a core */
START_TEST(test_packages_alternate)
{
    static const fake_cpu_t two[] = {
        {0, "0", "0", "0"}, {1, "1", "1", "1"}, {2, "0", "2", "2"}, {3, "1", "3", "3"},
        {4, "0", "4", "4"}, {5, "1", "5", "5"}, {6, "0", "6", "6"}, {7, "1", "7", "7"},
    };
    cpumap_t *map = malloc(sizeof(*map));

    read_fake(two, 8, NULL, map);
    ck_assert_int_eq(map->ncores, 8);
    ck_assert_int_eq(map->npackages, 2);
    ck_assert_int_eq(map->max_threads, 1);
    {
        char d[160];

        ck_assert_str_eq(cpumap_describe(map, d, sizeof(d)),
                         "8 CPUs in 8 cores (at most 1 thread a core) in 2 packages");
    }
    expect_blocks(map, 2, (const char *[]){"0,2,4,6", "1,3,5,7"}, (int[]){4, 4});
    expect_blocks(map, 4, (const char *[]){"0,2", "4,6", "1,3", "5,7"}, (int[]){2, 2, 2, 2});
    free(map);
}
END_TEST

/* big cores of two threads (0-3) and little ones of one (4-7) */
START_TEST(test_hybrid)
{
    static const fake_cpu_t hy[] = {
        {0, "0", "0-1", "0-1"}, {1, "0", "0-1", "0-1"}, {2, "0", "2-3", "2-3"}, {3, "0", "2-3", "2-3"},
        {4, "0", "4", "4"},     {5, "0", "5", "5"},     {6, "0", "6", "6"},     {7, "0", "7", "7"},
    };
    cpumap_t *map = malloc(sizeof(*map));

    read_fake(hy, 8, NULL, map);
    ck_assert_int_eq(map->ncores, 6);
    ck_assert_int_eq(map->max_threads, 2);
    expect_blocks(map, 3, (const char *[]){"0-3", "4,5", "6,7"}, (int[]){2, 2, 2});
    expect_blocks(map, 6, (const char *[]){"0,1", "2,3", "4", "5", "6", "7"},
                  (int[]){1, 1, 1, 1, 1, 1});
    /* [6, 8) would span the little cores 6 and 7 */
    expect_blocks(map, 7, (const char *[]){"0", "1", "2", "3", "4", "5", "6"},
                  (int[]){1, 1, 1, 1, 1, 1, 1});
    free(map);
}
END_TEST

/* an affinity mask that holds one thread of one core and both of another */
START_TEST(test_restricted)
{
    cpumap_t *map = malloc(sizeof(*map));

    read_fake(ht8, 8, "0,1,4", map);
    ck_assert_int_eq(map->ncpus, 3);
    ck_assert_int_eq(map->ncores, 2);
    expect_blocks(map, 2, (const char *[]){"0,4", "1"}, (int[]){1, 1});
    expect_blocks(map, 3, (const char *[]){"0", "4", "1"}, (int[]){1, 1, 1});
    free(map);
}
END_TEST

/* no topology files (a container without /sys): number order, as before */
START_TEST(test_no_topology)
{
    static const fake_cpu_t bare[] = {
        {0, NULL, NULL, NULL}, {1, NULL, NULL, NULL}, {2, NULL, NULL, NULL}, {5, NULL, NULL, NULL}};
    cpumap_t *map = malloc(sizeof(*map));

    read_fake(bare, 4, NULL, map);
    ck_assert_int_eq(map->ncores, 4);
    ck_assert_int_eq(map->npackages, 1);
    expect_blocks(map, 2, (const char *[]){"0,1", "2,5"}, (int[]){2, 2});
    expect_blocks(map, 3, (const char *[]){"0", "1", "2,5"}, (int[]){1, 1, 2});
    /* a directory that does not exist reads the same */
    {
        cpu_set_t allowed;

        set_of("0-2,5", &allowed);
        cpumap_read(map, &allowed, "/nonexistent/check_cpumap");
        check_properties(map, &allowed);
        expect_blocks(map, 2, (const char *[]){"0,1", "2,5"}, (int[]){2, 2});
    }
    free(map);
}
END_TEST

/* malformed or inconsistent files: a malformed core_cpus_list falls back
 * to thread_siblings_list, a missing package to that of the core's first
 * CPU; a CPU neither file places is a core of its own, in an unknown
 * package (placed first), and the others are unaffected */
START_TEST(test_malformed)
{
    static const fake_cpu_t bad[] = {
        {0, "0", "0,2", "0,2"},
        {1, "0", "1,3", "1,3"},
        {2, "0", "0,2", "0,2"},
        {3, "x", "1-", "1-"},            /* neither file parses */
        {4, "0", "5-6", "5-6"},          /* its list does not hold it */
        {5, "0", "5,,6", "5-6"},         /* core_cpus_list malformed */
        {6, NULL, "5,6", NULL},          /* no package: CPU 5's */
    };
    cpumap_t *map = malloc(sizeof(*map));

    read_fake(bad, 7, NULL, map);
    ck_assert_int_eq(map->ncores, 5);
    ck_assert_int_eq(map->npackages, 2);
    ck_assert_int_eq(map->cpu[0].cpu, 3);
    ck_assert_int_eq(map->cpu[0].package, -1);
    expect_blocks(map, 5, (const char *[]){"3", "0,2", "1", "4", "5,6"}, (int[]){1, 1, 1, 1, 1});
    free(map);
}
END_TEST

START_TEST(test_list_format)
{
    static const struct { const char *in, *out; } table[] = {
        {"0", "0"}, {"0-3", "0-3"}, {"0-3,8,10-11", "0-3,8,10-11"}, {"3,1,2", "1-3"},
        {"5,7,9", "5,7,9"}, {"0-1,2-3", "0-3"}, {"1023", "1023"}, {"4\n", "4"},
    };
    static const char *const bad[] = {"", "\n", "a", "3-1", "1,,2", "-1", "1-", "1 2", "2;3"};
    cpu_set_t set;
    char buf[64];

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        ck_assert_msg(cpumap_parse_list(table[i].in, &set) == 0, "'%s' rejected", table[i].in);
        ck_assert_str_eq(cpumap_list(&set, buf, sizeof(buf)), table[i].out);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(cpumap_parse_list(bad[i], &set) == -1, "'%s' accepted", bad[i]);
    /* a buffer too short keeps whole entries only */
    set_of("0,2,4,6,8,10", &set);
    ck_assert_str_eq(cpumap_list(&set, buf, 8), "0,2,4,6");
    ck_assert_str_eq(cpumap_list(&set, buf, 9), "0,2,4,6");
    ck_assert_str_eq(cpumap_list(&set, buf, 10), "0,2,4,6,8");
    ck_assert_str_eq(cpumap_list(&set, buf, 12), "0,2,4,6,8");
    ck_assert_str_eq(cpumap_list(&set, buf, 13), "0,2,4,6,8,10");
    set_of("0-3,10-11", &set);
    ck_assert_str_eq(cpumap_list(&set, buf, 7), "0-3");
    ck_assert_str_eq(cpumap_list(&set, buf, 2), "");
    CPU_ZERO(&set);
    ck_assert_str_eq(cpumap_list(&set, buf, sizeof(buf)), "");
}
END_TEST

/* this machine's own topology: whatever it is, every placement is sound */
START_TEST(test_this_machine)
{
    cpu_set_t allowed;
    cpumap_t *map = malloc(sizeof(*map));

    ck_assert_int_eq(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    cpumap_read(map, &allowed, CPUMAP_SYSFS);
    ck_assert_int_ge(map->ncores, 1);
    ck_assert_int_le(map->ncores, map->ncpus);
    ck_assert_int_ge(map->max_threads, 1);
    check_properties(map, &allowed);
    free(map);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpumap");
    TCase *tc = tcase_create("cpumap");
    SRunner *sr;
    int failed;

    tcase_add_test(tc, test_siblings_apart);
    tcase_add_test(tc, test_siblings_old_kernel);
    tcase_add_test(tc, test_packages_alternate);
    tcase_add_test(tc, test_hybrid);
    tcase_add_test(tc, test_restricted);
    tcase_add_test(tc, test_no_topology);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_list_format);
    tcase_add_test(tc, test_this_machine);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
