/* reduce_scatter_perf.c -- flx-reduce-scatter-perf: nccl-tests'
 * reduce_scatter_perf for flexcoll.  The size is every rank's input
 * S = n * count * element size (count: each rank's share of the result);
 * busbw = algbw * (n-1)/n, the share of S each rank sends in a
 * bandwidth-optimal reduce-scatter.  The library picks the algorithm per
 * call (flx_reduce_scatter_algo; FLX_ALGO forces it): the --csv 'algo'
 * column and --model show it.  In place, the input is recvbuf and the
 * result lands at its start (flx_reduce_scatter's in-place convention). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tools/perf/perf.h"

static void reduce_scatter_counts(size_t bytes, size_t esize, int nranks, size_t *count_p,
                                  size_t *send_bytes_p, size_t *recv_bytes_p)
{
    *count_p = bytes / esize / (size_t)nranks;
    *send_bytes_p = *count_p * esize * (size_t)nranks;
    *recv_bytes_p = *send_bytes_p; /* S, and room for the in-place input */
}

static double reduce_scatter_bus_factor(int nranks)
{
    return nranks > 1 ? (double)(nranks - 1) / nranks : 0.0;
}

static flx_status_t reduce_scatter_start(const perf_case_t *c, flx_request_h *req_p)
{
    const void *send = c->in_place ? c->recvbuf : c->sendbuf;

    if (req_p != NULL)
        return FLX_ERR_UNSUPPORTED;
    return flx_reduce_scatter(c->comm, send, c->recvbuf, c->count, c->dtype, c->op);
}

static void reduce_scatter_fill(const perf_case_t *c)
{
    size_t total = c->count * (size_t)c->nranks;

    if (c->in_place) {
        perf_fill_input(c->recvbuf, total, c->dtype, c->op, c->rank);
    } else {
        perf_fill_input(c->sendbuf, total, c->dtype, c->op, c->rank);
        perf_poison(c->recvbuf, c->recv_bytes);
    }
}

/* rank r's result is elements [r * count, (r + 1) * count) of the reduction */
static uint64_t reduce_scatter_check(const perf_case_t *c)
{
    return perf_count_wrong_reduce_at(c->recvbuf, (size_t)c->rank * c->count, c->count,
                                      c->dtype, c->op, c->nranks);
}

static const perf_coll_t reduce_scatter_coll = {
    .name = "flx-reduce-scatter-perf",
    .coll_name = "reduce_scatter",
    .flags = PERF_COLL_USES_OP | PERF_COLL_REDUCE_SCATTER,
    .counts = reduce_scatter_counts,
    .bus_factor = reduce_scatter_bus_factor,
    .busbw_doc = "algbw * (n-1)/n, size = each rank's input",
    .start = reduce_scatter_start,
    .fill = reduce_scatter_fill,
    .check = reduce_scatter_check,
};

int main(int argc, char **argv)
{
    return perf_main(&reduce_scatter_coll, argc, argv);
}
