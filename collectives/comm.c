/* comm.c -- communicator life cycle: configuration, rank discovery,
 * bootstrap, transport choice, calibration. */
#include "collectives/coll.h"
#include "common/copy.h"
#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef FLX_HAVE_ASAN
#define FEATURE_ASAN ",asan"
#else
#define FEATURE_ASAN ""
#endif
#ifdef FLX_HAVE_VERBS
#define FEATURE_VERBS ",verbs"
#else
#define FEATURE_VERBS ""
#endif
#ifdef FLX_HAVE_HWLOC
#define FEATURE_HWLOC ",hwloc"
#else
#define FEATURE_HWLOC ""
#endif

const char *flx_version_string(void) { return PACKAGE_VERSION; }

int flx_version(void) { return FLX_VERSION_CODE; }

const char *flx_build_features(void)
{
    return "tcp" FEATURE_VERBS FEATURE_HWLOC FEATURE_ASAN;
}

/* One launcher variable pair: both set and valid, neither, or an error. */
static flx_status_t env_rank_pair(const char *rank_var, const char *size_var, int *rank_p,
                                  int *size_p, int *found_p)
{
    const char *rs = getenv(rank_var), *ss = getenv(size_var);
    long rank, size;

    *found_p = 0;
    if (rs == NULL && ss == NULL)
        return FLX_OK;
    if (rs == NULL || ss == NULL || flx_parse_int(ss, 1, 1 << 24, &size) != 0 ||
        flx_parse_int(rs, 0, size - 1, &rank) != 0) {
        flx_error(INIT, -1, "%s='%s' / %s='%s' do not give a rank in [0, size)", rank_var,
                  rs ? rs : "(unset)", size_var, ss ? ss : "(unset)");
        return FLX_ERR_CONFIG;
    }
    *rank_p = (int)rank;
    *size_p = (int)size;
    *found_p = 1;
    return FLX_OK;
}

/* rank and size: parameters, FLX_RANK/FLX_SIZE, Open MPI, PMI, Slurm, else
 * a single rank. */
static flx_status_t comm_resolve_rank(const flx_comm_params_t *params,
                                      const flx_config_t *cfg, int *rank_p, int *size_p)
{
    static const char *const vars[][2] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"},
    };
    int rank = 0, size = 1, found = 0;
    uint64_t mask = params ? params->field_mask : 0;

    if (cfg->rank >= 0 || cfg->size >= 1) {
        rank = cfg->rank;
        size = cfg->size;
        found = 1;
    }
    for (size_t i = 0; i < FLX_ARRAY_SIZE(vars) && !found; i++) {
        flx_status_t st = env_rank_pair(vars[i][0], vars[i][1], &rank, &size, &found);
        if (st != FLX_OK)
            return st;
    }
    if (mask & FLX_COMM_PARAM_RANK)
        rank = params->rank;
    if (mask & FLX_COMM_PARAM_SIZE)
        size = params->size;
    if (size < 1 || rank < 0 || rank >= size) {
        flx_error(INIT, -1, "rank %d and size %d are inconsistent (need 0 <= rank < size; "
                  "set both FLX_RANK and FLX_SIZE)", rank, size);
        return FLX_ERR_INVALID_ARG;
    }
    if (size > COLL_MAX_RANKS) {
        flx_error(INIT, -1, "size %d: a communicator has at most %d ranks", size,
                  COLL_MAX_RANKS);
        return FLX_ERR_INVALID_ARG;
    }
    *rank_p = rank;
    *size_p = size;
    return FLX_OK;
}

static const char *comm_resolve_secret(const flx_comm_params_t *params,
                                       const flx_config_t *cfg, int rank, char *buf, size_t len)
{
    static const char *const job_vars[] = {"OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID",
                                           "PMI_JOBID", "PMIX_NAMESPACE"};

    if (params && (params->field_mask & FLX_COMM_PARAM_SECRET) && params->secret)
        return params->secret;
    if (cfg->job_secret[0])
        return cfg->job_secret;
    for (size_t i = 0; i < FLX_ARRAY_SIZE(job_vars); i++) {
        const char *v = getenv(job_vars[i]), *step = getenv("SLURM_STEP_ID");
        /* the steps of one Slurm allocation share the job id: two run at
         * once on a node would join each other's jobs */
        int with_step = strcmp(job_vars[i], "SLURM_JOB_ID") == 0 && step && *step;

        if (v && *v) {
            if (rank == 0)
                flx_warn(INIT, rank, "FLX_JOB_SECRET is not set: using the launcher's job id "
                         "(%s%s) as the secret, which anyone on the hosts can read", job_vars[i],
                         with_step ? " and SLURM_STEP_ID" : "");
            if (!with_step)
                return v;
            snprintf(buf, len, "slurm %s.%s", v, step);
            return buf;
        }
    }
    return NULL;
}

static flx_status_t comm_pick_net(flx_comm_h comm, const flx_comm_params_t *params)
{
    int net = comm->cfg.net;

    if (params && (params->field_mask & FLX_COMM_PARAM_NET) && params->net) {
        flx_status_t st = flx_config_set(&comm->cfg, "NET", params->net);
        if (st != FLX_OK)
            return st;
        net = comm->cfg.net;
    }
#ifdef FLX_HAVE_VERBS
    if (net == FLX_NET_AUTO && comm->size > 1 && ib_dev_available())
        net = FLX_NET_IB;
    comm->tl = net == FLX_NET_IB ? &tl_ib_ops : &tl_tcp_ops;
#else
    if (net == FLX_NET_IB) {
        flx_error(INIT, comm->rank, "FLX_NET=ib: this build has no ib backend (configure did "
                  "not find libibverbs + librdmacm)");
        return FLX_ERR_UNSUPPORTED;
    }
    comm->tl = &tl_tcp_ops;
#endif
    flx_info(INIT, comm->rank, "transport: %s (FLX_NET=%s)", comm->tl->name,
             net == FLX_NET_IB ? "ib" : net == FLX_NET_TCP ? "tcp" : "auto");
    return FLX_OK;
}

flx_status_t flx_comm_create(const flx_comm_params_t *params, flx_comm_h *comm_p)
{
    const char *root, *secret;
    char step_secret[160];
    flx_comm_h comm;
    flx_status_t st;

    if (comm_p == NULL) {
        flx_error(INIT, -1, "flx_comm_create: comm_p is NULL");
        return FLX_ERR_INVALID_ARG;
    }
    comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return FLX_ERR_NO_MEMORY;
    comm->stream_min = flx_copy_stream_min();
    st = flx_config_load(&comm->cfg);
    if (st != FLX_OK)
        goto err_free_comm;
    st = comm_resolve_rank(params, &comm->cfg, &comm->rank, &comm->size);
    if (st != FLX_OK)
        goto err_free_comm;
    root = params && (params->field_mask & FLX_COMM_PARAM_ROOT) && params->root
               ? params->root
               : comm->cfg.root;
    secret = comm_resolve_secret(params, &comm->cfg, comm->rank, step_secret,
                                 sizeof(step_secret));
    if (secret == NULL && comm->size > 1) {
        flx_error(INIT, comm->rank, "no job secret: set FLX_JOB_SECRET to the same value on "
                  "every rank (flxrun sets a fresh one)");
        st = FLX_ERR_CONFIG;
        goto err_free_comm;
    }
    st = comm_pick_net(comm, params);
    if (st != FLX_OK)
        goto err_free_comm;
    st = boot_create(comm->rank, comm->size, root, secret ? secret : "", &comm->cfg,
                     comm->tl == &tl_tcp_ops ? comm->cfg.tcp_sockets : 1, &comm->boot);
    if (st != FLX_OK)
        goto err_free_comm;
    st = comm->tl->create(comm->boot, &comm->cfg, &comm->tlctx);
    if (st != FLX_OK)
        goto err_destroy_boot;
    pthread_mutex_init(&comm->exec, NULL);
    pthread_mutex_init(&comm->lock, NULL);
    pthread_cond_init(&comm->cond, NULL);
    st = model_setup(comm);
    if (st != FLX_OK)
        goto err_destroy_tl;
    coll_end(comm);
    flx_info(INIT, comm->rank, "communicator ready: rank %d of %d over %s, alpha %.1f us, "
             "beta %.2f GB/s", comm->rank, comm->size, comm->tl->name,
             comm->model.alpha_s * 1e6, comm->model.beta_bytes_per_s / 1e9);
    *comm_p = comm;
    return FLX_OK;

err_destroy_tl:
    pthread_cond_destroy(&comm->cond);
    pthread_mutex_destroy(&comm->lock);
    pthread_mutex_destroy(&comm->exec);
    comm->tl->destroy(comm->tlctx);
    free(comm->scratch[0]); /* the calibration grew them */
    free(comm->scratch[1]);
err_destroy_boot:
    boot_destroy(comm->boot);
err_free_comm:
    free(comm);
    return st;
}

flx_status_t flx_comm_destroy(flx_comm_h comm)
{
    if (comm == NULL)
        return FLX_OK;
    comm_async_stop(comm);
    /* aborted while idle: no goodbye exchange, the peers hear of the abort */
    pthread_mutex_lock(&comm->exec);
    comm_sync_abort(comm);
    pthread_mutex_unlock(&comm->exec);
    comm->tl->destroy(comm->tlctx);
    boot_destroy(comm->boot);
    pthread_cond_destroy(&comm->cond);
    pthread_mutex_destroy(&comm->lock);
    pthread_mutex_destroy(&comm->exec);
    free(comm->scratch[0]); /* the backend, gone now, released their registrations */
    free(comm->scratch[1]);
    free(comm);
    return FLX_OK;
}

int flx_comm_rank(flx_comm_h comm) { return comm ? comm->rank : -1; }
int flx_comm_size(flx_comm_h comm) { return comm ? comm->size : -1; }
const char *flx_comm_net_name(flx_comm_h comm) { return comm ? comm->tl->name : "none"; }

flx_status_t flx_comm_link_model(flx_comm_h comm, flx_link_model_t *model_p)
{
    if (comm == NULL || model_p == NULL) {
        flx_error(COLL, comm ? comm->rank : -1, "flx_comm_link_model: %s is NULL",
                  comm ? "model_p" : "comm");
        return FLX_ERR_INVALID_ARG;
    }
    if (comm_aborted(comm))
        return FLX_ERR_ABORTED;
    pthread_mutex_lock(&comm->lock); /* the live refresh writes it under exec */
    *model_p = comm->model;
    pthread_mutex_unlock(&comm->lock);
    return FLX_OK;
}

/* The backend's registration cache is also used by the collective running
 * in the progress thread: changed under the execution lock, after it. */
static flx_status_t comm_mem_op(flx_comm_h comm, void *ptr, size_t len, int reg)
{
    flx_status_t st;

    if (comm_aborted(comm)) /* flx_comm_destroy releases what is registered */
        return FLX_ERR_ABORTED;
    if (reg ? comm->tl->mem_register == NULL : comm->tl->mem_deregister == NULL)
        return FLX_OK;
    pthread_mutex_lock(&comm->exec);
    st = reg ? comm->tl->mem_register(comm->tlctx, ptr, len)
             : comm->tl->mem_deregister(comm->tlctx, ptr);
    comm_sync_abort(comm); /* an abort that came meanwhile: the peers hear of it now */
    comm_exec_unlock(comm);
    return st;
}

flx_status_t flx_mem_register(flx_comm_h comm, void *ptr, size_t len)
{
    if (comm == NULL || ptr == NULL || len == 0 || (uintptr_t)ptr + len < (uintptr_t)ptr) {
        flx_error(COLL, comm ? comm->rank : -1, "flx_mem_register: NULL, empty or wrapping "
                  "range");
        return FLX_ERR_INVALID_ARG;
    }
    return comm_mem_op(comm, ptr, len, 1);
}

flx_status_t flx_mem_deregister(flx_comm_h comm, void *ptr)
{
    if (comm == NULL || ptr == NULL) {
        flx_error(COLL, comm ? comm->rank : -1, "flx_mem_deregister: NULL argument");
        return FLX_ERR_INVALID_ARG;
    }
    return comm_mem_op(comm, ptr, 0, 0);
}

/* A block of at least *bytes_p; *bytes_p becomes its size.  From
 * SCRATCH_HUGE up it is in whole, aligned huge pages where the kernel has
 * them (madvise): a fresh page costs a fault on its first touch, and on a
 * virtual machine that is dear (16 MiB of 4 KiB pages: 46 ms on the 2-core
 * development VM, the whole of a stalled 4 MiB allgather). */
#define SCRATCH_HUGE ((size_t)2 << 20)
static void *scratch_alloc(size_t *bytes_p)
{
    void *p = NULL;

    if (*bytes_p < SCRATCH_HUGE)
        return malloc(*bytes_p);
    *bytes_p = FLX_DIV_ROUND_UP(*bytes_p, SCRATCH_HUGE) * SCRATCH_HUGE;
    if (posix_memalign(&p, SCRATCH_HUGE, *bytes_p) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, *bytes_p, MADV_HUGEPAGE); /* a hint: without it, small pages */
#endif
    return p;
}

/* Scratch grows rarely and is the library's own: the backend may keep it
 * registered, and forgets the old block before it is freed. */
void *coll_scratch_slot(flx_comm_h comm, int slot, size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes > comm->scratch_len[slot]) {
        void *p;
        if (comm->scratch[slot] && comm->tl->mem_deregister)
            comm->tl->mem_deregister(comm->tlctx, comm->scratch[slot]);
        free(comm->scratch[slot]);
        comm->scratch[slot] = NULL;
        comm->scratch_len[slot] = 0;
        p = scratch_alloc(&bytes);
        if (p == NULL) {
            flx_error(COLL, comm->rank, "out of memory for %zu bytes of scratch", bytes);
            return NULL;
        }
        if (comm->tl->mem_register && comm->tl->mem_register(comm->tlctx, p, bytes) != FLX_OK) {
            free(p);
            return NULL;
        }
        comm->scratch[slot] = p;
        comm->scratch_len[slot] = bytes;
    }
    return comm->scratch[slot];
}

void *coll_scratch(flx_comm_h comm, size_t bytes) { return coll_scratch_slot(comm, 0, bytes); }
