/* perf.h -- the benchmark engine shared by the flx-*-perf tools.
 *
 * Modelled on nccl-tests' src/common: the engine owns argument parsing, the
 * communicator, buffers, the size sweep, timing, the correctness pass and the
 * report; each tool describes its collective in a perf_coll_t (byte counts,
 * bus-bandwidth factor, how to start one call, how to fill inputs and check
 * outputs) and its main() is one call to perf_main().
 *
 * Output follows nccl-tests: '#' header lines, then one row per size with
 * out-of-place and in-place columns (time algbw busbw #wrong), here followed
 * by min/p50/p99 of the out-of-place iteration times, then the footer
 * "# Out of bounds values" and "# Avg bus bandwidth".
 *
 * Nothing here is global: one perf_engine_t (inside perf.c) per run.
 */
#ifndef FLX_TOOLS_PERF_H
#define FLX_TOOLS_PERF_H

#include "flexcoll.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses of every perf tool. */
enum {
    PERF_EXIT_OK = 0,    /* ran, no wrong elements                     */
    PERF_EXIT_FAIL = 1,  /* library error or wrong elements            */
    PERF_EXIT_USAGE = 2, /* bad argument (message printed)             */
};

/* Results of perf_args_parse besides 0. */
enum {
    PERF_PARSE_HELP = 1,  /* -h: usage printed, exit 0 */
    PERF_PARSE_ERROR = -1 /* bad argument: message printed, exit 2 */
};

/* Command line, nccl-tests style. */
typedef struct {
    size_t min_bytes;     /* -b, default 8                                 */
    size_t max_bytes;     /* -e, default 64M                               */
    size_t step_bytes;    /* -i, used when step_factor == 0                */
    unsigned step_factor; /* -f, >= 2 multiplies; 0 steps by step_bytes    */
    int iters;            /* -n, default 20                                */
    int warmup;           /* -w, default 5                                 */
    int check;            /* -c 0|1, default 1                             */
    int blocking;         /* -z 0|1, default 1                             */
    int root;             /* -r, default 0                                 */
    flx_algo_t algo;      /* -a auto|ring|tree|rd|hd                       */
    int all_algos;        /* -a all: ring, tree, rd, hd, then auto         */
    unsigned dtypes;      /* -d: bit (1u << flx_dtype_t) per type to run   */
    unsigned ops;         /* -o: bit (1u << flx_op_t) per operator to run  */
    const char *csv_path; /* --csv FILE, NULL for none                     */
    int model;            /* --model: the alpha-beta model's prediction    */
                          /* beside each measurement (accept has 'M')      */
} perf_args_t;

/* The nccl-tests defaults above (float, sum, auto). */
void perf_args_default(perf_args_t *args);

/*
 * Parse argv into args (which holds the defaults on entry).  Only the option
 * letters in `accept` are allowed (e.g. "befinwcdoarz"; 'h' and --csv are
 * always accepted, --csv only if 'C' is in accept, --model only if 'M' is).  Returns 0,
 * PERF_PARSE_HELP after printing the usage to stdout, or PERF_PARSE_ERROR
 * after printing a message to stderr.  When quiet is set nothing is printed
 * (non-zero ranks of a job).
 */
int perf_args_parse(perf_args_t *args, const char *prog, const char *accept,
                    int quiet, int argc, char **argv);
/* One line "PROG: what (see --help)" on stderr unless quiet; returns -1 (a
 * parser's bad-argument result). */
int perf_arg_error(const char *prog, int quiet, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The option getopt just refused (missing: its value is missing), as the
 * user typed it: -x, also inside a cluster such as -zn, or --name. */
const char *perf_bad_option(char **argv, int missing, char *buf, size_t len);
/* The usage text for the options in accept. */
void perf_usage(FILE *out, const char *prog, const char *accept, const perf_args_t *defaults);

/* The size after `size` in the sweep; 0 when the sweep is over. */
size_t perf_next_size(const perf_args_t *args, size_t size);

/* Format a time in microseconds the way nccl-tests does (width 7). */
void perf_format_us(char *buf, size_t len, double us);

/* Non-zero when the launcher's environment says this process is a rank other
 * than 0 (before the communicator exists), so argument errors print once. */
int perf_env_nonzero_rank(void);

/* A quiet rank (not rank 0) found the argument error rank 0 reports: it
 * waits PERF_QUIET_WAIT_S, then the caller has it say the error too.
 * Exiting at once, a quiet rank made the launcher (flxrun, mpirun) stop
 * rank 0 before rank 0 had written its line; now the launcher stops the
 * quiet ranks in their wait once rank 0 has exited with the message, and a
 * rank left without a rank 0 still tells. */
#define PERF_QUIET_WAIT_S 2
void perf_quiet_wait(void);

/* ---------------------------------------------------------------------- */
/* Deterministic data for the correctness pass                             */
/* ---------------------------------------------------------------------- */

/*
 * Element i of rank r's input is an integer n(r, i) scaled by 1/8 for the
 * floating types (by 1 for prod, whose inputs are -1, 1 and 2).  The ranges
 * are chosen so that every partial result of every reduction order is exact
 * in the type: |value| <= 1 for half (sums exact up to 256 ranks),
 * <= 0.5 for bfloat16 (up to 64 ranks), <= 16 for the others.  Products
 * are signed powers of two (exact, or Inf in both library and check).
 */
int64_t perf_input_int(flx_dtype_t dtype, flx_op_t op, int rank, size_t i);
/* Write rank's inputs for elements [0, count) into buf. */
void perf_fill_input(void *buf, size_t count, flx_dtype_t dtype, flx_op_t op,
                     int rank);
/* Fill bytes with a pattern no input or result ever has (0xA5...). */
void perf_poison(void *buf, size_t bytes);
/* Number of elements of buf[0, count) that differ from rank's input. */
uint64_t perf_count_wrong_input(const void *buf, size_t count,
                                flx_dtype_t dtype, flx_op_t op, int rank);
/* Number of elements of buf[0, count) that differ from the reduction with op
 * of all nranks inputs (including FLX_AVG's final division, done as
 * flx_reduce_finish does it). */
uint64_t perf_count_wrong_reduce(const void *buf, size_t count,
                                 flx_dtype_t dtype, flx_op_t op, int nranks);
/* The same for elements [first, first + count) of the reduction, held in
 * buf[0, count) (a reduce-scatter's share). */
uint64_t perf_count_wrong_reduce_at(const void *buf, size_t first, size_t count,
                                    flx_dtype_t dtype, flx_op_t op, int nranks);

/* ---------------------------------------------------------------------- */
/* Collective description                                                  */
/* ---------------------------------------------------------------------- */

/* One (size, type, op, placement) case, handed to the tool's callbacks. */
typedef struct {
    flx_comm_h comm;
    int rank;
    int nranks;
    flx_dtype_t dtype;
    flx_op_t op;
    flx_algo_t algo;
    int root;
    int in_place;
    size_t count;      /* the count argument of the call                    */
    size_t send_bytes; /* this rank's input bytes                           */
    size_t recv_bytes; /* result bytes; the S of algbw = S / t              */
    void *sendbuf;     /* engine-owned, at least send_bytes                 */
    void *recvbuf;     /* engine-owned, at least recv_bytes                 */
} perf_case_t;

enum {
    PERF_COLL_USES_OP = 1u << 0,      /* -o matters, redop column shows it   */
    PERF_COLL_USES_ROOT = 1u << 1,    /* -r matters, root column shows it    */
    PERF_COLL_USES_ALGO = 1u << 2,    /* -a is passed to the call            */
    PERF_COLL_NONBLOCKING = 1u << 3,  /* start() can return a request (-z 0) */
    PERF_COLL_ALLREDUCE = 1u << 4,    /* auto algorithm from flx_allreduce_algo */
    PERF_COLL_ALLGATHER = 1u << 5,    /* ... from flx_allgather_algo         */
    PERF_COLL_REDUCE_SCATTER = 1u << 6, /* ... from flx_reduce_scatter_algo  */
};

typedef struct {
    const char *name;      /* tool name, "flx-allreduce-perf"   */
    const char *coll_name; /* "allreduce" (CSV column)          */
    unsigned flags;        /* PERF_COLL_*                       */
    /* For a nominal size in bytes: the call's count and this rank's send
     * and result bytes (nccl-tests' getCollByteCount). */
    void (*counts)(size_t bytes, size_t esize, int nranks, size_t *count_p,
                   size_t *send_bytes_p, size_t *recv_bytes_p);
    /* busbw = algbw * bus_factor(nranks); busbw_doc says so in the header
     * ("algbw * 2(n-1)/n"). */
    double (*bus_factor)(int nranks);
    const char *busbw_doc;
    /* Start one call.  req_p == NULL: blocking; otherwise a non-blocking
     * call whose request is stored in *req_p (only with NONBLOCKING). */
    flx_status_t (*start)(const perf_case_t *c, flx_request_h *req_p);
    /* Write this rank's inputs for c (placement included) and poison the
     * parts of the result buffer the call must overwrite. */
    void (*fill)(const perf_case_t *c);
    /* Wrong elements of this rank's result after one call on fill()ed data. */
    uint64_t (*check)(const perf_case_t *c);
} perf_coll_t;

/* The whole tool: parse argv, create the communicator from the environment,
 * run the sweep, print the report on rank 0.  Returns a PERF_EXIT_* code. */
int perf_main(const perf_coll_t *coll, int argc, char **argv);

/* Median of v[0..n) (n >= 1); sorts v in place. */
double perf_median(double *v, int n);
/* A comma-separated list of kept fractions in (0, 1] into out[0, max):
 * their number, or -1 for an empty list or field, a malformed or out-of-range
 * value, or more than max of them. */
int perf_parse_fractions(const char *s, double *out, int max);
/* Closes csv (NULL: nothing to do), the file at path: 0, or -1 after one
 * line on stderr, prog's, saying that writing it failed (a full disk). */
int perf_csv_close(FILE *csv, const char *path, const char *prog);
/* Flushes standard output: 0, or -1 after one line saying that writing to
 * it failed. */
int perf_stdout_close(const char *prog);

#endif
