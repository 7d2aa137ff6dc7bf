/* tl.c -- what the backends share: a tag in words for their log lines. */
#include "transport/tl.h"
#include "common/dtype.h"
#include "common/log.h"

#include <stdio.h>

enum { OP_NONE, OP_REDUCE, OP_ROOT, OP_LEADER, OP_PHASE }; /* what a kind's op field holds */

void tl_tag_describe(const tl_tag_t *t, char *buf, size_t len)
{
    static const struct {
        unsigned kind;
        const char *name;
        int op;
    } kinds[] = {
        {TL_KIND_ALLREDUCE, "allreduce", OP_REDUCE},
        {TL_KIND_ALLGATHER, "allgather", OP_NONE},
        {TL_KIND_BCAST, "broadcast", OP_ROOT},
        {TL_KIND_REDUCE_SCATTER, "reduce-scatter", OP_REDUCE},
        {TL_KIND_BARRIER, "barrier", OP_NONE},
        {TL_KIND_CALIBRATE, "model agreement", OP_REDUCE},
        {TL_KIND_ALLGATHERV, "allgatherv", OP_PHASE},
        {TL_KIND_ARTOPK, "AR-Topk exchange", OP_LEADER},
    };
    const unsigned kind = t->kind >> 3, op = t->op;
    const flx_dtype_t dtype = (flx_dtype_t)t->dtype;
    const char *name = NULL;
    char kbuf[32], obuf[40] = "";
    int what = OP_REDUCE; /* an unknown kind: its op as a number */

    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (kinds[i].kind == kind) {
            name = kinds[i].name;
            what = kinds[i].op;
        }
    if (name == NULL) {
        snprintf(kbuf, sizeof(kbuf), "kind %u", kind);
        name = kbuf;
    }
    if (what == OP_REDUCE && flx_op_valid((flx_op_t)op))
        snprintf(obuf, sizeof(obuf), ", %s", flx_op_name((flx_op_t)op));
    else if (what == OP_REDUCE)
        snprintf(obuf, sizeof(obuf), ", op %u", op);
    else if (what == OP_ROOT || what == OP_LEADER)
        snprintf(obuf, sizeof(obuf), ", %s %u", what == OP_ROOT ? "root" : "leader", op);
    else if (what == OP_PHASE)
        snprintf(obuf, sizeof(obuf), op == 0 ? ", the counts" : op == 1 ? ", the blocks"
                                                                       : ", phase %u", op);
    snprintf(buf, len, "%s (%s) of %llu %s%s", name, flx_algo_name((flx_algo_t)(t->kind & 7u)),
             (unsigned long long)t->count,
             flx_dtype_valid(dtype) ? flx_dtype_name(dtype) : "elements of an unknown type", obuf);
}

void tl_log_mismatch(int rank, int peer, const tl_tag_t *theirs, const tl_tag_t *ours)
{
    char t[128], o[128];

    tl_tag_describe(theirs, t, sizeof(t));
    tl_tag_describe(ours, o, sizeof(o));
    flx_error(NET, rank, "collective #%u: rank %d called %s; this rank %s", ours->seq, peer, t, o);
}

void tl_log_stale(int rank, int peer, const tl_tag_t *theirs, uint32_t now)
{
    char t[128];

    tl_tag_describe(theirs, t, sizeof(t));
    flx_error(NET, rank, "collective #%u: rank %d sent step %u of its %s, which this rank "
              "finished without it (the ranks' calls differed); collective #%u fails here",
              theirs->seq, peer, theirs->step, t, now);
}
