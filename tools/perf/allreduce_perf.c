/* allreduce_perf.c -- flx-allreduce-perf: nccl-tests' all_reduce_perf for
 * flexcoll.  Size S = count * element size; busbw = algbw * 2(n-1)/n, the
 * bytes each rank must move in a bandwidth-optimal allreduce. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tools/perf/perf.h"

static void allreduce_counts(size_t bytes, size_t esize, int nranks, size_t *count_p,
                             size_t *send_bytes_p, size_t *recv_bytes_p)
{
    (void)nranks;
    *count_p = bytes / esize;
    *send_bytes_p = *count_p * esize;
    *recv_bytes_p = *count_p * esize;
}

static double allreduce_bus_factor(int nranks)
{
    return nranks > 1 ? 2.0 * (nranks - 1) / nranks : 0.0;
}

static flx_status_t allreduce_start(const perf_case_t *c, flx_request_h *req_p)
{
    const void *send = c->in_place ? c->recvbuf : c->sendbuf;

    if (req_p == NULL)
        return flx_allreduce(c->comm, send, c->recvbuf, c->count, c->dtype, c->op, c->algo);
    return flx_iallreduce(c->comm, send, c->recvbuf, c->count, c->dtype, c->op, c->algo,
                          req_p);
}

static void allreduce_fill(const perf_case_t *c)
{
    if (c->in_place) {
        perf_fill_input(c->recvbuf, c->count, c->dtype, c->op, c->rank);
    } else {
        perf_fill_input(c->sendbuf, c->count, c->dtype, c->op, c->rank);
        perf_poison(c->recvbuf, c->recv_bytes);
    }
}

static uint64_t allreduce_check(const perf_case_t *c)
{
    return perf_count_wrong_reduce(c->recvbuf, c->count, c->dtype, c->op, c->nranks);
}

static const perf_coll_t allreduce_coll = {
    .name = "flx-allreduce-perf",
    .coll_name = "allreduce",
    .flags = PERF_COLL_USES_OP | PERF_COLL_USES_ALGO | PERF_COLL_NONBLOCKING |
             PERF_COLL_ALLREDUCE,
    .counts = allreduce_counts,
    .bus_factor = allreduce_bus_factor,
    .busbw_doc = "algbw * 2(n-1)/n",
    .start = allreduce_start,
    .fill = allreduce_fill,
    .check = allreduce_check,
};

int main(int argc, char **argv)
{
    return perf_main(&allreduce_coll, argc, argv);
}
