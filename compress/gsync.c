/* gsync.c -- the public gradient-sync object (flx_gsync_*): one flat
 * gradient, one compressor, one call per step.
 *
 *   step:  acc = g + e, ||g||, ||acc||, finite?          (ef.c, one pass)
 *          select / encode C(acc)                         (topk.c, quant.c, ...)
 *          communicate, with this rank's bad flag aboard  (artopk.c, sparse_ag.c, ...)
 *          any rank bad -> FLX_ERR_INVALID_ARG everywhere, nothing changed
 *          decompress into grad (sum, or / N for the mean)
 *          e = acc - C(acc): the acc buffer becomes the residual (swap)
 *
 * All buffers are allocated at create (and when the kept fraction grows
 * past what they hold); a step allocates nothing.
 */
#include "compress/cmp.h"
#include "compress/pool.h"
#include "collectives/coll.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GSYNC_QSGD_HEADER 8 /* uint32 flag, uint32 zero */

struct flx_gsync {
    flx_comm_h comm;
    int N;
    int rank;
    size_t n;
    flx_gsync_opts_t o;        /* resolved options                         */
    int index_mode;            /* CMP_INDEX_*                              */
    double c;                  /* kept fraction                            */
    size_t k;                  /* max(1, floor(c n))                       */
    size_t k_alloc;            /* k the buffers hold                       */
    uint64_t step;
    float *e;                  /* residual (error feedback), n             */
    float *acc;                /* g + e, n; becomes the residual           */
    cmp_topk_t *sel;           /* TOPK                                     */
    cmp_artopk_t *ar;          /* TOPK with ARTOPK or AUTO                 */
    cmp_sparse_ag_t *ag;       /* TOPK with ALLGATHER or AUTO              */
    int32_t *idx;              /* k_alloc: local selection / random-k      */
    float *val;                /* k_alloc + 1                              */
    uint64_t *bitmap;          /* RANDK                                    */
    uint16_t *half;            /* FP16 / BF16: n + 1                       */
    char *qblock;              /* QSGD8: header + encoded block            */
    char *qrecv;               /* QSGD8: N blocks                          */
    size_t qbytes;             /* QSGD8: one block with its header         */
    size_t *qcounts;           /* QSGD8: 2 N (counts, displs)              */
    cmp_powersgd_t *ps;        /* POWERSGD                                 */
};

static const char *const gsync_method_names[FLX_COMPRESS_COUNT] = {
    "none", "topk", "randk", "artopk", "fp16", "bf16", "qsgd8", "powersgd"};

const char *flx_compress_name(flx_compress_t method)
{
    return (unsigned)method < FLX_COMPRESS_COUNT ? gsync_method_names[method] : "invalid";
}

const char *flx_gsync_coll_name(flx_gsync_coll_t collective)
{
    switch (collective) {
    case FLX_GSYNC_COLL_AUTO: return "auto";
    case FLX_GSYNC_COLL_ARTOPK: return "artopk";
    case FLX_GSYNC_COLL_ALLGATHER: return "allgather";
    case FLX_GSYNC_COLL_ALLREDUCE: return "allreduce";
    default: return "invalid";
    }
}

void flx_gsync_opts_default(flx_gsync_opts_t *opts)
{
    if (opts == NULL) {
        flx_error(COMPRESS, -1, "flx_gsync_opts_default: opts is NULL");
        return;
    }
    *opts = (flx_gsync_opts_t){
        .field_mask = 0,
        .method = FLX_COMPRESS_NONE,
        .kept_fraction = 0.01,
        .select = FLX_SELECT_APPROX,
        .error_feedback = 1,
        .leader = FLX_LEADER_STAR,
        .index_mode = FLX_INDEX_DEFAULT,
        .collective = FLX_GSYNC_COLL_ARTOPK,
        .powersgd_rank = 4,
        .op = FLX_AVG,
        .seed = 0x5eed,
        .threads = 1,
        .qsgd_bucket = 512,
        .var_ewma = 0.1,
    };
}

/* floor(c n) of the exact product: the rounding of c and of the product
 * must not lose an element (0.29 * 100 is 28.999999999999996 in doubles) */
static size_t gsync_k(double c, size_t n)
{
    double k = floor(c * (double)n * (1 + 4 * DBL_EPSILON));

    return k < 1 ? 1 : k > (double)n ? n : (size_t)k;
}

static int gsync_fraction_ok(double c) { return c > 0 && c <= 1; } /* false for NaN */

/* Defaults overlaid with the fields opts says it sets, then checked. */
static flx_status_t gsync_resolve(const flx_gsync_opts_t *opts, size_t n, int rank,
                                  flx_gsync_opts_t *o)
{
    flx_gsync_opts_default(o);
    if (opts) {
        uint64_t m = opts->field_mask;
        if (m & FLX_GSYNC_OPT_METHOD) o->method = opts->method;
        if (m & FLX_GSYNC_OPT_KEPT_FRACTION) o->kept_fraction = opts->kept_fraction;
        if (m & FLX_GSYNC_OPT_SELECT) o->select = opts->select;
        if (m & FLX_GSYNC_OPT_ERROR_FEEDBACK) o->error_feedback = opts->error_feedback;
        if (m & FLX_GSYNC_OPT_LEADER) o->leader = opts->leader;
        if (m & FLX_GSYNC_OPT_INDEX_MODE) o->index_mode = opts->index_mode;
        if (m & FLX_GSYNC_OPT_COLLECTIVE) o->collective = opts->collective;
        if (m & FLX_GSYNC_OPT_POWERSGD_RANK) o->powersgd_rank = opts->powersgd_rank;
        if (m & FLX_GSYNC_OPT_OP) o->op = opts->op;
        if (m & FLX_GSYNC_OPT_SEED) o->seed = opts->seed;
        if (m & FLX_GSYNC_OPT_THREADS) o->threads = opts->threads;
        if (m & FLX_GSYNC_OPT_QSGD_BUCKET) o->qsgd_bucket = opts->qsgd_bucket;
        if (m & FLX_GSYNC_OPT_VAR_EWMA) o->var_ewma = opts->var_ewma;
        o->field_mask = m;
    }
    if (o->method == FLX_COMPRESS_ARTOPK) {
        o->method = FLX_COMPRESS_TOPK;
        o->collective = FLX_GSYNC_COLL_ARTOPK;
    }
    if (n < 1 || n >= ((size_t)1 << 31)) {
        flx_error(COMPRESS, rank, "flx_gsync_create: n = %zu (need 1 <= n < 2^31: indices "
                  "are int32)", n);
        return FLX_ERR_INVALID_ARG;
    }
    if ((unsigned)o->method >= FLX_COMPRESS_COUNT) {
        flx_error(COMPRESS, rank, "flx_gsync_create: unknown method %d", (int)o->method);
        return FLX_ERR_INVALID_ARG;
    }
    if (!gsync_fraction_ok(o->kept_fraction)) {
        flx_error(COMPRESS, rank, "flx_gsync_create: kept fraction %g is not in (0, 1]",
                  o->kept_fraction);
        return FLX_ERR_INVALID_ARG;
    }
    if (o->select != FLX_SELECT_EXACT && o->select != FLX_SELECT_APPROX) {
        flx_error(COMPRESS, rank, "flx_gsync_create: unknown selection %d", (int)o->select);
        return FLX_ERR_INVALID_ARG;
    }
    if (o->error_feedback != 0 && o->error_feedback != 1) {
        flx_error(COMPRESS, rank, "flx_gsync_create: error_feedback must be 0 or 1, not %d",
                  o->error_feedback);
        return FLX_ERR_INVALID_ARG;
    }
    if ((unsigned)o->leader > FLX_LEADER_VOTE || (unsigned)o->index_mode > FLX_INDEX_PIPELINED) {
        flx_error(COMPRESS, rank, "flx_gsync_create: unknown leader policy %d or index mode %d",
                  (int)o->leader, (int)o->index_mode);
        return FLX_ERR_INVALID_ARG;
    }
    if ((unsigned)o->collective > FLX_GSYNC_COLL_ALLREDUCE) {
        flx_error(COMPRESS, rank, "flx_gsync_create: unknown collective %d", (int)o->collective);
        return FLX_ERR_INVALID_ARG;
    }
    if (o->method == FLX_COMPRESS_TOPK && o->collective != FLX_GSYNC_COLL_AUTO &&
        o->collective != FLX_GSYNC_COLL_ARTOPK && o->collective != FLX_GSYNC_COLL_ALLGATHER) {
        flx_error(COMPRESS, rank, "flx_gsync_create: top-k combines by auto, artopk or "
                  "allgather, not %d", (int)o->collective);
        return FLX_ERR_INVALID_ARG;
    }
    if (o->op != FLX_SUM && o->op != FLX_AVG) {
        flx_error(COMPRESS, rank, "flx_gsync_create: op must be FLX_SUM or FLX_AVG, not %d",
                  (int)o->op);
        return FLX_ERR_INVALID_ARG;
    }
    if (o->powersgd_rank < 1 || o->qsgd_bucket < 1 || !(o->var_ewma > 0 && o->var_ewma <= 1) ||
        o->threads < 0 || o->threads > 256) {
        flx_error(COMPRESS, rank, "flx_gsync_create: PowerSGD rank %d (>= 1), QSGD bucket %u "
                  "(>= 1), VAR EWMA weight %g (in (0, 1]), threads %d (0..256)",
                  o->powersgd_rank, o->qsgd_bucket, o->var_ewma, o->threads);
        return FLX_ERR_INVALID_ARG;
    }
    if (o->method == FLX_COMPRESS_NONE)
        o->error_feedback = 0;
    return FLX_OK;
}

static int gsync_uses_topk(const flx_gsync_h h) { return h->o.method == FLX_COMPRESS_TOPK; }
static int gsync_uses_ar(const flx_gsync_h h)
{
    return gsync_uses_topk(h) && h->o.collective != FLX_GSYNC_COLL_ALLGATHER;
}
static int gsync_uses_ag(const flx_gsync_h h)
{
    return gsync_uses_topk(h) && h->o.collective != FLX_GSYNC_COLL_ARTOPK;
}

/* Buffers that grow with k (create, and set_kept_fraction past k_alloc). */
static flx_status_t gsync_reserve(flx_gsync_h h, size_t k)
{
    flx_status_t st = FLX_OK;
    void *p;

    if (k <= h->k_alloc)
        return FLX_OK;
    if (gsync_uses_topk(h) || h->o.method == FLX_COMPRESS_RANDK) {
        p = realloc(h->idx, k * sizeof(int32_t));
        if (p == NULL)
            return FLX_ERR_NO_MEMORY;
        h->idx = p;
        p = realloc(h->val, (k + 1) * sizeof(float));
        if (p == NULL)
            return FLX_ERR_NO_MEMORY;
        h->val = p;
    }
    if (h->sel)
        st = cmp_topk_reserve(h->sel, k);
    if (st == FLX_OK && h->ar)
        st = cmp_artopk_reserve(h->ar, k);
    if (st == FLX_OK && h->ag)
        st = cmp_sparse_ag_reserve(h->ag, k);
    if (st == FLX_OK)
        h->k_alloc = k;
    return st;
}

/* Frees h: the status of AR-Topk's background index exchange, which it
 * waits for (FLX_OK where none runs). */
static flx_status_t gsync_free(flx_gsync_h h)
{
    flx_status_t st;

    cmp_powersgd_destroy(h->ps);
    cmp_sparse_ag_destroy(h->ag);
    st = cmp_artopk_destroy(h->ar);
    cmp_topk_destroy(h->sel);
    free(h->qcounts);
    free(h->qrecv);
    free(h->qblock);
    free(h->half);
    free(h->bitmap);
    free(h->val);
    free(h->idx);
    free(h->acc);
    free(h->e);
    free(h);
    return st;
}

/* Creation is collective, and so is its failure: every rank says whether
 * it refused its own n or options (its line says why) and, when none did,
 * n and every option that shapes what travels (or what random-k, QSGD and
 * PowerSGD draw from the seed), in one small allreduce of each value and
 * of its complement, whose maximum is then the smallest value's complement.
 * A refusal anywhere: FLX_ERR_INVALID_ARG on every rank; values that
 * differ: FLX_ERR_MISMATCH on every rank, one line naming the first.  The
 * communicator keeps working either way. */
static flx_status_t gsync_agree(flx_comm_h comm, int rank, size_t n, const flx_gsync_opts_t *o,
                                flx_status_t mine)
{
    const int ok = mine == FLX_OK;
    int64_t ewma_bits = 0, v[26];
    const struct {
        const char *name;
        int64_t value;
    } f[13] = {
        {"refusals", !ok},
        {"n", ok ? (int64_t)n : 0},
        {"method", ok ? o->method : 0},
        {"kept elements (kept_fraction x n)", ok ? (int64_t)gsync_k(o->kept_fraction, n) : 0},
        {"select", ok ? o->select : 0},
        {"leader", ok ? o->leader : 0},
        {"index_mode", ok ? o->index_mode : 0},
        {"collective", ok ? o->collective : 0},
        {"powersgd_rank", ok ? o->powersgd_rank : 0},
        {"op", ok ? o->op : 0},
        {"seed", ok ? (int64_t)o->seed : 0},
        {"qsgd_bucket", ok ? (int64_t)o->qsgd_bucket : 0},
        {"var_ewma", ok ? (memcpy(&ewma_bits, &o->var_ewma, sizeof(ewma_bits)), ewma_bits) : 0},
    };
    const int nf = (int)(sizeof(f) / sizeof(f[0]));
    flx_status_t st;

    for (int i = 0; i < nf; i++)
        v[i] = f[i].value;
    st = coll_agree_range(comm, v, (size_t)nf);
    if (!ok || st != FLX_OK)
        return ok ? st : mine;
    if (v[0] != 0) {
        flx_error(COMPRESS, rank, "flx_gsync_create: another rank refused its n or options "
                  "(its line says why): every rank fails");
        return FLX_ERR_INVALID_ARG;
    }
    for (int i = 1; i < nf; i++) {
        int64_t lo = v[nf + i], hi = v[i];
        if (lo == hi)
            continue;
        if (i == nf - 1) { /* a double: its bits travelled */
            double dlo, dhi;
            memcpy(&dlo, &lo, sizeof(dlo));
            memcpy(&dhi, &hi, sizeof(dhi));
            flx_error(COMPRESS, rank, "flx_gsync_create: the ranks' %s differ (this rank %g, "
                      "across the ranks %g to %g): every rank must pass the same n and options",
                      f[i].name, o->var_ewma, dlo, dhi);
        } else {
            flx_error(COMPRESS, rank, "flx_gsync_create: the ranks' %s differ (this rank %lld, "
                      "across the ranks %lld to %lld): every rank must pass the same n and options",
                      f[i].name, (long long)f[i].value, (long long)lo, (long long)hi);
        }
        return FLX_ERR_MISMATCH;
    }
    return FLX_OK;
}

flx_status_t flx_gsync_create(flx_comm_h comm, size_t n, const flx_gsync_opts_t *opts,
                              flx_gsync_h *h_p)
{
    flx_gsync_opts_t o;
    flx_gsync_h h;
    flx_status_t st;
    int rank = flx_comm_rank(comm);

    if (comm == NULL) {
        flx_error(COMPRESS, -1, "flx_gsync_create: comm is NULL");
        return FLX_ERR_INVALID_ARG;
    }
    flx_gsync_opts_default(&o);
    if (h_p == NULL) {
        flx_error(COMPRESS, rank, "flx_gsync_create: h_p is NULL");
        st = FLX_ERR_INVALID_ARG;
    } else {
        st = gsync_resolve(opts, n, rank, &o);
    }
    st = gsync_agree(comm, rank, n, &o, st); /* every rank, also one that refused */
    if (st != FLX_OK)
        return st;
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        flx_error(COMPRESS, rank, "flx_gsync_create: out of memory");
        return FLX_ERR_NO_MEMORY;
    }
    h->o = o;
    h->comm = comm;
    h->N = flx_comm_size(comm);
    h->rank = rank;
    h->n = n;
    h->c = h->o.kept_fraction;
    h->k = gsync_k(h->c, n);
    h->index_mode = h->o.index_mode == FLX_INDEX_SERIAL     ? CMP_INDEX_SERIAL
                    : h->o.index_mode == FLX_INDEX_PREVIOUS ? CMP_INDEX_PREVIOUS
                                                            : CMP_INDEX_PIPELINED;
    st = FLX_ERR_NO_MEMORY;
    if (h->o.error_feedback) {
        h->e = malloc(n * sizeof(float));
        h->acc = malloc(n * sizeof(float));
        if (h->e == NULL || h->acc == NULL)
            goto err_no_memory;
        /* zero residuals; touching both now keeps page faults out of the steps */
        memset(h->e, 0, n * sizeof(float));
        memset(h->acc, 0, n * sizeof(float));
    }
    switch (h->o.method) {
    case FLX_COMPRESS_TOPK: {
        int threads = h->o.threads == 0 ? cmp_pool_ncpus() : h->o.threads;
        st = cmp_topk_create(n, h->k, threads, h->o.seed ^ (uint64_t)rank, &h->sel);
        if (st != FLX_OK)
            goto err_free_gsync;
        if (gsync_uses_ar(h)) {
            cmp_artopk_params_t p = {
                .leader_policy = h->o.leader == FLX_LEADER_VAR    ? CMP_LEADER_VAR
                                 : h->o.leader == FLX_LEADER_VOTE ? CMP_LEADER_VOTE
                                                                  : CMP_LEADER_STAR,
                .index_mode = h->index_mode,
                .select = h->o.select == FLX_SELECT_EXACT ? CMP_SELECT_EXACT : CMP_SELECT_APPROX,
                .var_ewma = h->o.var_ewma,
            };
            st = cmp_artopk_create(comm, n, h->k, &p, h->sel, &h->ar);
            if (st != FLX_OK)
                goto err_free_gsync;
        }
        if (gsync_uses_ag(h)) {
            st = cmp_sparse_ag_create(comm, n, h->k, FLX_ALGO_AUTO, &h->ag);
            if (st != FLX_OK)
                goto err_free_gsync;
        }
        break;
    }
    case FLX_COMPRESS_RANDK:
        h->bitmap = calloc(cmp_randk_words(n), sizeof(uint64_t));
        if (h->bitmap == NULL)
            goto err_no_memory;
        break;
    case FLX_COMPRESS_FP16:
    case FLX_COMPRESS_BF16:
        h->half = malloc((n + 1) * sizeof(uint16_t));
        if (h->half == NULL)
            goto err_no_memory;
        break;
    case FLX_COMPRESS_QSGD8:
        h->qbytes = GSYNC_QSGD_HEADER + cmp_qsgd8_bytes(n, h->o.qsgd_bucket);
        h->qbytes = FLX_DIV_ROUND_UP(h->qbytes, 8) * 8; /* keeps every block aligned */
        h->qblock = calloc(1, h->qbytes);
        h->qrecv = malloc((size_t)h->N * h->qbytes);
        h->qcounts = calloc(2 * (size_t)h->N, sizeof(size_t));
        if (h->qblock == NULL || h->qrecv == NULL || h->qcounts == NULL)
            goto err_no_memory;
        break;
    case FLX_COMPRESS_POWERSGD:
        st = cmp_powersgd_create(comm, n, h->o.powersgd_rank, h->o.seed, &h->ps);
        if (st != FLX_OK)
            goto err_free_gsync;
        break;
    default:
        break;
    }
    st = gsync_reserve(h, h->k);
    if (st != FLX_OK)
        goto err_no_memory;
    *h_p = h;
    return FLX_OK;

err_no_memory:
    flx_error(COMPRESS, rank, "flx_gsync_create: out of memory for a %zu-element gradient "
              "(%s)", n, flx_compress_name(h->o.method));
    st = FLX_ERR_NO_MEMORY;
err_free_gsync:
    gsync_free(h);
    return st;
}

flx_status_t flx_gsync_destroy(flx_gsync_h h)
{
    if (h == NULL)
        return FLX_OK;
    return gsync_free(h); /* a failed index exchange is this call's failure */
}

flx_status_t flx_gsync_set_kept_fraction(flx_gsync_h h, double c)
{
    flx_status_t st;

    if (h == NULL || !gsync_fraction_ok(c)) {
        flx_error(COMPRESS, h ? h->rank : -1, "flx_gsync_set_kept_fraction: %g is not in "
                  "(0, 1]", c);
        return FLX_ERR_INVALID_ARG;
    }
    st = gsync_reserve(h, gsync_k(c, h->n));
    if (st == FLX_ERR_NO_MEMORY)
        flx_error(COMPRESS, h->rank, "flx_gsync_set_kept_fraction: no memory for k = %zu",
                  gsync_k(c, h->n));
    else if (st != FLX_OK) /* the previous step's index exchange, waited for, failed */
        flx_error(COMPRESS, h->rank, "flx_gsync_set_kept_fraction: the previous step's index "
                  "exchange failed (%s)", flx_status_string(st));
    if (st != FLX_OK)
        return st;
    h->c = c;
    h->k = gsync_k(c, h->n);
    return FLX_OK;
}

flx_status_t flx_gsync_set_collective(flx_gsync_h h, flx_gsync_coll_t coll)
{
    if (h == NULL || !gsync_uses_topk(h) ||
        (coll != FLX_GSYNC_COLL_AUTO && coll != FLX_GSYNC_COLL_ARTOPK &&
         coll != FLX_GSYNC_COLL_ALLGATHER)) {
        flx_error(COMPRESS, h ? h->rank : -1, "flx_gsync_set_collective: %s needs top-k and "
                  "one of auto, artopk, allgather", flx_gsync_coll_name(coll));
        return FLX_ERR_INVALID_ARG;
    }
    if ((coll != FLX_GSYNC_COLL_ALLGATHER && h->ar == NULL) ||
        (coll != FLX_GSYNC_COLL_ARTOPK && h->ag == NULL)) {
        flx_error(COMPRESS, h->rank, "flx_gsync_set_collective: %s was not prepared at "
                  "create (create with FLX_GSYNC_COLL_AUTO to switch freely)",
                  flx_gsync_coll_name(coll));
        return FLX_ERR_UNSUPPORTED;
    }
    h->o.collective = coll;
    return FLX_OK;
}

size_t flx_gsync_kept(flx_gsync_h h) { return h ? h->k : 0; }

const float *flx_gsync_residual(flx_gsync_h h) { return h ? h->e : NULL; }

void cmp_gsync_zero_residual(flx_gsync_h h)
{
    if (h->e)
        memset(h->e, 0, h->n * sizeof(float));
}

flx_status_t flx_gsync_flush_residual(flx_gsync_h h, float *grad)
{
    if (h == NULL || grad == NULL) {
        flx_error(COMPRESS, -1, "flx_gsync_flush_residual: NULL %s",
                  h == NULL ? "handle" : "gradient");
        return FLX_ERR_INVALID_ARG;
    }
    if (h->e == NULL)
        return FLX_OK;
    for (size_t i = 0; i < h->n; i++)
        grad[i] += h->e[i];
    memset(h->e, 0, h->n * sizeof(float));
    return FLX_OK;
}

/* ---- the step ----------------------------------------------------------------- */

/* acc = g + e (or g itself without error feedback), sums, finiteness. */
static const float *gsync_accumulate(flx_gsync_h h, const float *grad, cmp_ef_sums_t *sums,
                                     int *bad_p)
{
    const float *acc = grad;

    if (h->o.error_feedback) {
        cmp_ef_accumulate(grad, h->e, h->acc, h->n, sums);
        acc = h->acc;
    } else {
        cmp_ef_accumulate(grad, NULL, NULL, h->n, sums);
    }
    *bad_p = !sums->finite;
    if (*bad_p) {
        size_t i = flx_first_nonfinite(grad, h->n);

        if (i < h->n)
            flx_error(COMPRESS, h->rank, "flx_gsync_step %llu: the gradient (%zu floats) holds "
                      "NaN or Inf (element %zu): every rank fails this step, residuals "
                      "unchanged", (unsigned long long)h->step, h->n, i);
        else /* a finite gradient whose sum with the residual overflows */
            flx_error(COMPRESS, h->rank, "flx_gsync_step %llu: the gradient plus its residual "
                      "overflows float (element %zu): every rank fails this step, residuals "
                      "unchanged", (unsigned long long)h->step, flx_first_nonfinite(acc, h->n));
    }
    return acc;
}

/* Every rank: some rank's gradient was not finite. */
static flx_status_t gsync_fail_bad(flx_gsync_h h, int bad)
{
    if (!bad)
        flx_debug(COMPRESS, h->rank, "flx_gsync_step %llu: another rank's gradient holds NaN "
                  "or Inf", (unsigned long long)h->step);
    return FLX_ERR_INVALID_ARG;
}

/* Every rank: every gradient was finite but the synchronised sum is not
 * (it overflowed float near 3.4e38).  The sum is the same bits on every
 * rank, so every rank fails alike; nothing is committed.  element: where,
 * or h->n when it is not one element (PowerSGD's products). */
static flx_status_t gsync_fail_overflow(flx_gsync_h h, size_t element)
{
    char where[48] = "";

    if (element < h->n)
        snprintf(where, sizeof(where), " at element %zu", element);
    flx_error(COMPRESS, h->rank, "flx_gsync_step %llu: the %s of %d ranks' gradients "
              "overflowed%s (beyond +-3.4e38): every rank fails this step, residuals unchanged",
              (unsigned long long)h->step, flx_compress_name(h->o.method), h->N, where);
    return FLX_ERR_INVALID_ARG;
}

/* The residual update is done: the acc buffer becomes the residual. */
static void gsync_commit_residual(flx_gsync_h h)
{
    float *t = h->e;

    h->e = h->acc;
    h->acc = t;
}

static double gsync_gain(double c2, double acc2)
{
    return acc2 > 0 ? sqrt(c2 / acc2) : 1.0;
}

/* The end of every compressed step: the residual is committed (error
 * feedback), decoding since t1 counted, and the report filled in; c2 is
 * ||C(g + e)||^2, acc2 ||g + e||^2. */
static flx_status_t gsync_done(flx_gsync_h h, flx_gsync_report_t *rep, double t1,
                               flx_gsync_coll_t coll, size_t k, double c2, double acc2)
{
    if (h->o.error_feedback)
        gsync_commit_residual(h);
    rep->decompress_s += flx_time_now() - t1;
    rep->collective = coll;
    rep->k = k;
    rep->gain = gsync_gain(c2, acc2);
    return FLX_OK;
}

/* TOPK with AUTO: the cheaper collective by the cost model.  The same on
 * every rank: the model is agreed, and refreshed only inside collectives;
 * the previous step's index set may still travel in the background, and a
 * refresh inside it would reach some ranks before they read the model and
 * others after, so that request finishes first. */
static flx_gsync_coll_t gsync_pick_topk(flx_gsync_h h)
{
    flx_link_model_t lm;
    double m = (double)h->n, c = (double)h->k / m, t_ar;

    if (h->o.collective != FLX_GSYNC_COLL_AUTO)
        return h->o.collective;
    /* gsync_step_sparse waited for this rank's requests (comm_wait_idle) */
    if (flx_comm_link_model(h->comm, &lm) != FLX_OK)
        return FLX_GSYNC_COLL_ARTOPK;
    switch (h->index_mode) {
    case CMP_INDEX_PIPELINED:
        t_ar = h->o.leader == FLX_LEADER_VOTE
                   ? cmp_model_ar_ring(h->N, m, c, lm.alpha_s, lm.beta_bytes_per_s)
                   : cmp_model_ar_pipe(h->N, m, c, lm.alpha_s, lm.beta_bytes_per_s);
        break;
    case CMP_INDEX_PREVIOUS:
        t_ar = cmp_model_ar_prev(h->N, m, c, lm.alpha_s, lm.beta_bytes_per_s);
        break;
    default:
        t_ar = FLX_MIN(cmp_model_ar_ring(h->N, m, c, lm.alpha_s, lm.beta_bytes_per_s),
                       cmp_model_ar_tree(h->N, m, c, lm.alpha_s, lm.beta_bytes_per_s));
        break;
    }
    return cmp_model_ag(h->N, m, c, lm.alpha_s, lm.beta_bytes_per_s) < t_ar
               ? FLX_GSYNC_COLL_ALLGATHER
               : FLX_GSYNC_COLL_ARTOPK;
}

/* TOPK and RANDK. */
static flx_status_t gsync_step_sparse(flx_gsync_h h, float *grad, flx_gsync_report_t *rep)
{
    const float div = h->o.op == FLX_AVG ? (float)h->N : 1.0f;
    cmp_ef_sums_t sums;
    flx_gsync_coll_t coll = FLX_GSYNC_COLL_ALLREDUCE;
    const int32_t *idx = h->idx;
    const float *val = h->val;
    size_t kk = h->k, j_bad;
    int bad, any_bad = 0;
    double t0, t1, c2;
    const float *acc;
    flx_status_t st;

    if (gsync_uses_topk(h) && h->o.collective == FLX_GSYNC_COLL_AUTO) {
        t0 = flx_time_now(); /* communication time: see gsync_pick_topk */
        comm_wait_idle(h->comm);
        rep->comm_s += flx_time_now() - t0;
    }
    t0 = flx_time_now();
    acc = gsync_accumulate(h, grad, &sums, &bad);

    if (gsync_uses_topk(h)) {
        /* the residual grows the scale of g + e from step to step: tell the
         * approximate selection where its last threshold now lies */
        cmp_topk_hint_scale(h->sel, sqrt(sums.acc2 / (double)h->n));
        coll = gsync_pick_topk(h);
        if (coll != FLX_GSYNC_COLL_ARTOPK && h->ar && (st = cmp_artopk_reset(h->ar)) != FLX_OK)
            return st;
    }
    if (coll == FLX_GSYNC_COLL_ARTOPK) {
        cmp_artopk_result_t res;
        rep->select_s += flx_time_now() - t0;
        st = cmp_artopk_step(h->ar, acc, h->k, h->step, sqrt(sums.g2), bad, &idx, &val,
                             &any_bad, &res);
        if (st != FLX_OK)
            return st;
        kk = res.k_used;
        rep->leader = res.leader;
        rep->select_s += res.select_s;
        rep->comm_s += res.comm_s;
        rep->bytes_sent += res.bytes_sent;
    } else if (coll == FLX_GSYNC_COLL_ALLGATHER) {
        cmp_topk_select(h->sel, acc, h->n, h->k, h->o.select == FLX_SELECT_EXACT
                        ? CMP_SELECT_EXACT : CMP_SELECT_APPROX, h->idx, h->val, NULL);
        t1 = flx_time_now();
        rep->select_s += t1 - t0;
        rep->leader = -1;
        /* the sum lands in grad only if no rank is bad; without error
         * feedback acc is grad, so the energy is taken from the values */
        c2 = 0;
        for (size_t j = 0; j < kk; j++)
            c2 += (double)h->val[j] * h->val[j];
        st = cmp_sparse_ag_step(h->ag, h->idx, h->val, kk, bad, grad, &any_bad,
                                &rep->bytes_sent);
        rep->comm_s += flx_time_now() - t1;
        if (st != FLX_OK)
            return st;
        if (any_bad)
            return gsync_fail_bad(h, bad);
        if ((j_bad = flx_first_nonfinite(grad, h->n)) < h->n)
            return gsync_fail_overflow(h, j_bad);
        t1 = flx_time_now();
        if (div != 1.0f)
            for (size_t i = 0; i < h->n; i++)
                grad[i] /= div;
        if (h->o.error_feedback)
            cmp_ef_update_sparse(h->acc, h->idx, kk);
        return gsync_done(h, rep, t1, coll, kk, c2, sums.acc2);
    } else { /* RANDK: the same indices everywhere, so the values allreduce */
        cmp_randk_select(h->bitmap, h->n, h->k, h->o.seed, h->step, h->idx);
        for (size_t j = 0; j < kk; j++)
            h->val[j] = acc[h->idx[j]];
        h->val[kk] = bad ? 1.0f : 0.0f;
        t1 = flx_time_now();
        rep->select_s += t1 - t0;
        rep->leader = -1;
        st = flx_allreduce(h->comm, h->val, h->val, kk + 1, FLX_FLOAT32, FLX_SUM,
                           FLX_ALGO_AUTO);
        rep->comm_s += flx_time_now() - t1;
        if (st != FLX_OK)
            return st;
        rep->bytes_sent += (uint64_t)cmp_bytes_allreduce(
            flx_allreduce_algo(h->comm, kk + 1, FLX_FLOAT32), h->N, h->rank, 4.0 * (kk + 1));
        any_bad = h->val[kk] != 0.0f;
    }
    if (any_bad)
        return gsync_fail_bad(h, bad);
    /* ARTOPK, RANDK: one index set, summed values */
    if ((j_bad = flx_first_nonfinite(val, kk)) < kk)
        return gsync_fail_overflow(h, (size_t)idx[j_bad]);
    t1 = flx_time_now();
    if (h->o.error_feedback)
        c2 = cmp_ef_update_sparse(h->acc, idx, kk);
    else
        c2 = cmp_ef_sparse_energy(acc, idx, kk); /* acc is grad: before it is overwritten */
    memset(grad, 0, h->n * sizeof(float));
    for (size_t j = 0; j < kk; j++)
        grad[idx[j]] = val[j] / div;
    return gsync_done(h, rep, t1, coll, kk, c2, sums.acc2);
}

/* FP16 / BF16: a half-precision allreduce of the cast gradient. */
static flx_status_t gsync_step_cast(flx_gsync_h h, float *grad, flx_gsync_report_t *rep)
{
    const flx_dtype_t dt = h->o.method == FLX_COMPRESS_FP16 ? FLX_FLOAT16 : FLX_BFLOAT16;
    cmp_ef_sums_t sums;
    size_t i_bad;
    int bad, any_bad;
    double t0 = flx_time_now(), t1, c2;
    const float *acc = gsync_accumulate(h, grad, &sums, &bad);
    float flag;
    flx_status_t st;

    c2 = cmp_cast_encode(acc, h->half, h->n, dt, h->o.error_feedback ? h->acc : NULL, h->N);
    h->half[h->n] = dt == FLX_FLOAT16 ? flx_float_to_half(bad ? 1.0f : 0.0f)
                                      : (uint16_t)(bad ? 0x3f80 : 0);
    t1 = flx_time_now();
    rep->select_s += t1 - t0;
    st = flx_allreduce(h->comm, h->half, h->half, h->n + 1, dt, FLX_SUM, FLX_ALGO_AUTO);
    rep->comm_s += flx_time_now() - t1;
    if (st != FLX_OK)
        return st;
    rep->bytes_sent += (uint64_t)cmp_bytes_allreduce(flx_allreduce_algo(h->comm, h->n + 1, dt),
                                                     h->N, h->rank, 2.0 * (double)(h->n + 1));
    cmp_cast_decode(&h->half[h->n], 1, dt, 1.0f, &flag);
    any_bad = flag != 0.0f;
    if (any_bad)
        return gsync_fail_bad(h, bad);
    /* the sum is the same bits on every rank, so every rank fails alike */
    if ((i_bad = cmp_cast_first_nonfinite(h->half, h->n, dt)) < h->n) {
        flx_error(COMPRESS, h->rank, "flx_gsync_step %llu: the %s sum of %d ranks overflowed "
                  "at element %zu (beyond +-%g): every rank fails this step, residuals "
                  "unchanged", (unsigned long long)h->step, flx_dtype_name(dt), h->N, i_bad,
                  dt == FLX_FLOAT16 ? 65504.0 : 3.39e38);
        return FLX_ERR_INVALID_ARG;
    }
    t1 = flx_time_now();
    cmp_cast_decode(h->half, h->n, dt, h->o.op == FLX_AVG ? (float)h->N : 1.0f, grad);
    return gsync_done(h, rep, t1, FLX_GSYNC_COLL_ALLREDUCE, h->n, c2, sums.acc2);
}

/* QSGD8: every rank's levels and scales by allgather, decoded in rank order. */
static flx_status_t gsync_step_qsgd(flx_gsync_h h, float *grad, flx_gsync_report_t *rep)
{
    const size_t N = (size_t)h->N, bucket = h->o.qsgd_bucket;
    size_t *counts = h->qcounts, *displs = h->qcounts + N, i_bad;
    cmp_ef_sums_t sums;
    cmp_rng_t rng;
    uint32_t head[2] = {0, 0};
    int bad, any_bad = 0;
    double t0 = flx_time_now(), t1, c2;
    const float *acc = gsync_accumulate(h, grad, &sums, &bad);
    flx_status_t st;

    cmp_rng_seed(&rng, h->o.seed, (uint64_t)h->rank + 1, h->step);
    c2 = cmp_qsgd8_encode(acc, h->n, bucket, &rng, h->qblock + GSYNC_QSGD_HEADER,
                          h->o.error_feedback ? h->acc : NULL);
    head[0] = bad ? 1u : 0u;
    memcpy(h->qblock, head, sizeof(head));
    t1 = flx_time_now();
    rep->select_s += t1 - t0;
    st = coll_allgatherv(h->comm, h->qblock, h->qbytes, h->qrecv, N * h->qbytes, counts,
                         displs, FLX_INT64, FLX_ALGO_AUTO);
    rep->comm_s += flx_time_now() - t1;
    if (st != FLX_OK)
        return st;
    rep->bytes_sent += (uint64_t)cmp_bytes_allgather(h->N, (double)h->qbytes);
    for (size_t r = 0; r < N; r++) {
        if (counts[r] != h->qbytes) {
            flx_error(COMPRESS, h->rank, "QSGD: rank %zu sent %zu bytes, expected %zu", r,
                      counts[r], h->qbytes);
            return FLX_ERR_PROTOCOL;
        }
        memcpy(head, h->qrecv + displs[r], sizeof(head));
        any_bad |= head[0] != 0;
    }
    if (any_bad)
        return gsync_fail_bad(h, bad);
    t1 = flx_time_now();
    memset(grad, 0, h->n * sizeof(float));
    for (size_t r = 0; r < N; r++)
        cmp_qsgd8_decode_add(h->qrecv + displs[r] + GSYNC_QSGD_HEADER, h->n, bucket, grad);
    if ((i_bad = flx_first_nonfinite(grad, h->n)) < h->n)
        return gsync_fail_overflow(h, i_bad);
    if (h->o.op == FLX_AVG && h->N > 1)
        for (size_t i = 0; i < h->n; i++)
            grad[i] /= (float)h->N;
    return gsync_done(h, rep, t1, FLX_GSYNC_COLL_ALLGATHER, h->n, c2, sums.acc2);
}

static flx_status_t gsync_step_powersgd(flx_gsync_h h, float *grad, flx_gsync_report_t *rep)
{
    cmp_ef_sums_t sums;
    size_t rows, cols;
    int bad, any_bad = 0, overflow = 0, r;
    double t0 = flx_time_now(), t1, c2 = 0;
    const float *acc = gsync_accumulate(h, grad, &sums, &bad);
    flx_status_t st;

    t1 = flx_time_now();
    rep->select_s += t1 - t0;
    /* products and the two allreduces interleave: all of it counts as comm */
    st = cmp_powersgd_step(h->ps, acc, bad, grad, h->o.error_feedback ? h->acc : NULL,
                           &any_bad, &overflow, &rep->bytes_sent, &c2);
    rep->comm_s += flx_time_now() - t1;
    if (st != FLX_OK)
        return st;
    if (any_bad)
        return gsync_fail_bad(h, bad);
    if (overflow)
        return gsync_fail_overflow(h, h->n);
    t1 = flx_time_now();
    if (h->o.op == FLX_SUM && h->N > 1)
        for (size_t i = 0; i < h->n; i++)
            grad[i] *= (float)h->N;
    cmp_powersgd_shape(h->ps, &rows, &cols, &r);
    return gsync_done(h, rep, t1, FLX_GSYNC_COLL_ALLREDUCE, (rows + cols) * (size_t)r, c2,
                      sums.acc2);
}

/* NONE: the dense allreduce; non-finite input shows as a non-finite sum. */
static flx_status_t gsync_step_dense(flx_gsync_h h, float *grad, flx_gsync_report_t *rep)
{
    double t0 = flx_time_now();
    flx_status_t st;

    st = flx_allreduce(h->comm, grad, grad, h->n, FLX_FLOAT32, h->o.op, FLX_ALGO_AUTO);
    rep->comm_s += flx_time_now() - t0;
    if (st != FLX_OK)
        return st;
    rep->bytes_sent += (uint64_t)cmp_bytes_allreduce(
        flx_allreduce_algo(h->comm, h->n, FLX_FLOAT32), h->N, h->rank, 4.0 * (double)h->n);
    rep->collective = FLX_GSYNC_COLL_ALLREDUCE;
    rep->k = h->n;
    rep->gain = 1.0;
    if (flx_first_nonfinite(grad, h->n) < h->n) {
        flx_error(COMPRESS, h->rank, "flx_gsync_step %llu: the synchronised gradient holds "
                  "NaN or Inf (some rank's gradient did)", (unsigned long long)h->step);
        return FLX_ERR_INVALID_ARG;
    }
    return FLX_OK;
}

flx_status_t flx_gsync_step(flx_gsync_h h, float *grad, flx_gsync_report_t *report_p)
{
    flx_gsync_report_t rep = {0};
    flx_status_t st;

    if (h == NULL || grad == NULL) {
        flx_error(COMPRESS, h ? h->rank : -1, "flx_gsync_step: %s is NULL",
                  h ? "grad_in_out" : "the handle");
        return FLX_ERR_INVALID_ARG;
    }
    rep.step = h->step;
    rep.method = h->o.method;
    rep.leader = -1;
    switch (h->o.method) {
    case FLX_COMPRESS_TOPK:
    case FLX_COMPRESS_RANDK: st = gsync_step_sparse(h, grad, &rep); break;
    case FLX_COMPRESS_FP16:
    case FLX_COMPRESS_BF16: st = gsync_step_cast(h, grad, &rep); break;
    case FLX_COMPRESS_QSGD8: st = gsync_step_qsgd(h, grad, &rep); break;
    case FLX_COMPRESS_POWERSGD: st = gsync_step_powersgd(h, grad, &rep); break;
    default: st = gsync_step_dense(h, grad, &rep); break;
    }
    h->step++;
    if (report_p && st == FLX_OK)
        *report_p = rep;
    return st;
}
