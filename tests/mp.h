/* mp.h -- multi-process test harness: fork N real ranks that connect over
 * real loopback sockets, run a body, and report through exit codes. */
#ifndef FLX_TESTS_MP_H
#define FLX_TESTS_MP_H

#include "flexcoll.h"

/* The job secret of every test rank (mp_comm_create, mp_run). */
#define MP_SECRET "flexcoll-test-secret"

/* The body runs in rank's own process with a fresh communicator; it
 * returns 0 on success (the child's exit code). */
typedef int (*mp_body_t)(flx_comm_h comm, int rank, int size, void *arg);
/* The raw variant creates no communicator (for bootstrap tests). */
typedef int (*mp_raw_body_t)(int rank, int size, const char *root, void *arg);

/* A free loopback port ("127.0.0.1:PORT") in buf. */
void mp_free_root(char *buf, size_t len);
/* Run body on size ranks; returns the number of ranks that failed (exit
 * code != 0, signal, or still running after timeout_s, which are killed).
 * exit_codes_p (size entries, may be NULL) receives each exit code, or
 * 128+signal. */
int mp_run(int size, mp_body_t body, void *arg, double timeout_s, int *exit_codes_p);
int mp_run_raw(int size, mp_raw_body_t body, void *arg, double timeout_s, int *exit_codes_p);
/* A rank's exit code saying that its run may have failed from this machine
 * alone (a rank held off the CPU long enough to look stopped), not from the
 * code under test.  mp_run_again and mp_run_raw_again run body again, at
 * most tries runs in all, while every rank that failed exited with it, and
 * return the last run's count of ranks that failed; name heads the line
 * each retry prints.  A bug of the kind the test is for fails every run;
 * any other failure ends it at once. */
#define MP_AGAIN 2
int mp_run_again(int size, mp_body_t body, void *arg, double timeout_s, int tries,
                 const char *name);
int mp_run_raw_again(int size, mp_raw_body_t body, void *arg, double timeout_s, int tries,
                     const char *name);
/* Create the communicator of a test rank explicitly. */
flx_status_t mp_comm_create(int rank, int size, const char *root, flx_comm_h *comm_p);

/* Whether the rank count n is to be tested: FLX_TEST_NRANKS unset or
 * empty selects every n; otherwise it lists the counts ("5" or "1,2,5").
 * A malformed list exits the test program with a message (status 99). */
int mp_nranks_wanted(int n);

/* stderr into the file mkstemp makes of path (a template) until
 * mp_capture_stop, which puts stderr back, copies the file to it, removes
 * the file and returns how many of its lines hold pattern.
 * mp_capture_start returns the saved descriptor mp_capture_stop takes. */
int mp_capture_start(char *path);
int mp_capture_stop(int saved, const char *path, const char *pattern);

/* bytes of zeroed memory that the ranks forked after it share with this
 * process (MAP_SHARED; free with munmap); exits 99 where it cannot. */
void *mp_shared_alloc(size_t bytes);

/* Print a failure from inside a rank and return 1. */
int mp_fail(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
