/* allgather_perf.c -- flx-allgather-perf: nccl-tests' all_gather_perf for
 * flexcoll.  The size is the gathered total S = n * count * element size
 * (count per rank); busbw = algbw * (n-1)/n, the share each rank receives. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tools/perf/perf.h"

#include <string.h>

static void allgather_counts(size_t bytes, size_t esize, int nranks, size_t *count_p,
                             size_t *send_bytes_p, size_t *recv_bytes_p)
{
    *count_p = bytes / esize / (size_t)nranks;
    *send_bytes_p = *count_p * esize;
    *recv_bytes_p = *count_p * esize * (size_t)nranks;
}

static double allgather_bus_factor(int nranks)
{
    return nranks > 1 ? (double)(nranks - 1) / nranks : 0.0;
}

/* In place: this rank's block of the result is its input. */
static void *allgather_block(const perf_case_t *c, int rank)
{
    return (char *)c->recvbuf + (size_t)rank * c->send_bytes;
}

static flx_status_t allgather_start(const perf_case_t *c, flx_request_h *req_p)
{
    const void *send = c->in_place ? allgather_block(c, c->rank) : c->sendbuf;

    if (req_p == NULL)
        return flx_allgather(c->comm, send, c->recvbuf, c->count, c->dtype, c->algo);
    return flx_iallgather(c->comm, send, c->recvbuf, c->count, c->dtype, c->algo, req_p);
}

static void allgather_fill(const perf_case_t *c)
{
    perf_poison(c->recvbuf, c->recv_bytes);
    perf_fill_input(c->in_place ? allgather_block(c, c->rank) : c->sendbuf, c->count,
                    c->dtype, FLX_SUM, c->rank);
}

static uint64_t allgather_check(const perf_case_t *c)
{
    uint64_t wrong = 0;

    for (int r = 0; r < c->nranks; r++)
        wrong += perf_count_wrong_input(allgather_block(c, r), c->count, c->dtype, FLX_SUM, r);
    return wrong;
}

static const perf_coll_t allgather_coll = {
    .name = "flx-allgather-perf",
    .coll_name = "allgather",
    .flags = PERF_COLL_USES_ALGO | PERF_COLL_NONBLOCKING | PERF_COLL_ALLGATHER,
    .counts = allgather_counts,
    .bus_factor = allgather_bus_factor,
    .busbw_doc = "algbw * (n-1)/n, size = gathered total",
    .start = allgather_start,
    .fill = allgather_fill,
    .check = allgather_check,
};

int main(int argc, char **argv)
{
    return perf_main(&allgather_coll, argc, argv);
}
