/* bcast_perf.c -- flx-bcast-perf: nccl-tests' broadcast_perf for flexcoll.
 * busbw = algbw.  flx_broadcast works on one buffer; the out-of-place
 * columns time what an out-of-place broadcast costs with it: the root copies
 * sendbuf into recvbuf, then flx_broadcast(recvbuf).  In place: just
 * flx_broadcast(recvbuf).  There is no non-blocking broadcast (-z is 1). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tools/perf/perf.h"

#include <string.h>

static void bcast_counts(size_t bytes, size_t esize, int nranks, size_t *count_p,
                         size_t *send_bytes_p, size_t *recv_bytes_p)
{
    (void)nranks;
    *count_p = bytes / esize;
    *send_bytes_p = *count_p * esize;
    *recv_bytes_p = *count_p * esize;
}

static double bcast_bus_factor(int nranks)
{
    (void)nranks;
    return 1.0;
}

static flx_status_t bcast_start(const perf_case_t *c, flx_request_h *req_p)
{
    if (req_p != NULL)
        return FLX_ERR_UNSUPPORTED;
    if (!c->in_place && c->rank == c->root)
        memcpy(c->recvbuf, c->sendbuf, c->recv_bytes);
    return flx_broadcast(c->comm, c->recvbuf, c->count, c->dtype, c->root);
}

static void bcast_fill(const perf_case_t *c)
{
    perf_poison(c->recvbuf, c->recv_bytes);
    if (c->rank == c->root)
        perf_fill_input(c->in_place ? c->recvbuf : c->sendbuf, c->count, c->dtype, FLX_SUM,
                        c->root);
}

static uint64_t bcast_check(const perf_case_t *c)
{
    return perf_count_wrong_input(c->recvbuf, c->count, c->dtype, FLX_SUM, c->root);
}

static const perf_coll_t bcast_coll = {
    .name = "flx-bcast-perf",
    .coll_name = "broadcast",
    .flags = PERF_COLL_USES_ROOT,
    .counts = bcast_counts,
    .bus_factor = bcast_bus_factor,
    .busbw_doc = "algbw",
    .start = bcast_start,
    .fill = bcast_fill,
    .check = bcast_check,
};

int main(int argc, char **argv)
{
    return perf_main(&bcast_coll, argc, argv);
}
