/* flx-train -- data-parallel SGD over flexcoll.
 *
 * Every rank holds the same model (same seed), trains on its shard of each
 * epoch's shuffled training set and syncs every step by the chosen policy
 * (trainer/sync.c): dense allreduce overlapped with backprop, static
 * Top-k / AR-Topk / PowerSGD, the Accordion and GraVAC rules, SelSync, or
 * flex, the controller (controller/).  Momentum SGD with weight decay and
 * a step or cosine learning-rate schedule.  Launch with flxrun, mpirun or
 * srun; alone it is one rank. */
#include "flexcoll.h"
#include "common/config.h"
#include "common/log.h"
#include "common/time.h"
#include "collectives/coll.h"
#include "trainer/data.h"
#include "trainer/nn.h"
#include "trainer/rng.h"
#include "trainer/checkpoint.h"
#include "trainer/sync.h"

#include <cblas.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LR_STEP = 0, LR_COSINE, LR_CONST };

typedef struct {
    const char *data_dir;
    int synthetic;
    int epochs;
    size_t batch;
    double lr;
    int lr_schedule;
    double momentum;
    double weight_decay;
    char model[128];
    uint64_t seed;
    const char *log_path;
    const char *save_path;    /* --save: the trained model (rank 0 writes it) */
    const char *load_path;    /* --load: the starting weights (rank 0 reads them) */
    long max_steps;
    size_t train_limit;
    long eval_every;
    double time_limit;
    int check_sync;
    int momentum_correction;  /* DGC's, top-k policies only; default off */
    char unused[512];         /* options given that the policy ignores (rank 0 says so) */
    sync_opts_t sync;
} train_opts_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: flx-train [options]       (launch ranks with flxrun -n N, mpirun or srun)\n"
            "data and model:\n"
            "  --data DIR         MNIST-format IDX files (default " FLX_FMNIST_DIR ")\n"
            "  --synthetic        a synthetic 10-class task (64 features, 8x8) instead of files\n"
            "  --model SPEC       mlp, mlp:A,B,... (hidden widths), cnn or cnn:C1,C2,F\n"
            "                     (default mlp:256,256)\n"
            "  --hidden A,B,...   same as --model mlp:A,B,...\n"
            "optimiser:\n"
            "  --epochs N         epochs (default 2); 0: only evaluate the starting weights\n"
            "                     (--load's, else the seed's)\n"
            "  --batch B          examples per rank per step (default 64)\n"
            "  --lr X             learning rate (default 0.05)\n"
            "  --lr-schedule S    step (x0.1 at 50%% and 75%% of the epochs when there are\n"
            "                     4 or more; default), cosine, or const\n"
            "  --momentum X       (default 0.9)        --weight-decay X (default 5e-4)\n"
            "  --momentum-correction on|off\n"
            "                     top-k policies: momentum on each rank before compression,\n"
            "                     zeroed where the rank's values were sent (DGC; default off)\n"
            "  --seed S           initialisation and shuffling seed (default 1)\n"
            "gradient sync:\n"
            "  --policy P         dense, topk-ag, artopk, powersgd, accordion, gravac,\n"
            "                     selsync or flex (default dense)\n"
            "  --algo A           dense allreduce: auto|ring|tree|rd|hd (default auto)\n"
            "  --bucket BYTES     dense: bytes per overlapped allreduce (default 4M)\n"
            "  --kept C           topk-ag, artopk: kept fraction (default 0.01)\n"
            "  --leader L         artopk: star, var or vote (default star)\n"
            "  --psgd-rank R      powersgd: rank (default 4)\n"
            "  --weight W         flex: weight of time against gain, [0, 1] (default 0.6,\n"
            "                     the controller's)\n"
            "  --eta X            accordion, flex: critical-regime threshold (default 0.5)\n"
            "  --local-steps on|off\n"
            "                     flex: every rank steps on its own gradient and SelSync's\n"
            "                     test (--delta) picks the steps that sync the drift since\n"
            "                     the last sync, through the controller (default on); off:\n"
            "                     the controller syncs every step's gradient\n"
            "  --interval N       accordion, flex: syncs per critical test; selsync, flex:\n"
            "                     longest run without a sync unless --max-local (default 50)\n"
            "  --max-local N      selsync, flex: longest run of steps without a sync\n"
            "                     (default: --interval)\n"
            "  --delta X          selsync, flex: norm change that syncs (default 0.3 selsync,\n"
            "                     0.2 flex)\n"
            "  --delta-decay P    selsync, flex: a step's delta is X (lr / --lr)^P, so that\n"
            "                     the ranks sync more often as the rate decays (AdaComm's\n"
            "                     lower error floor; default 0.5 flex, 0 selsync: a fixed\n"
            "                     delta)\n"
            "  --min-gain X       gravac: gain threshold epsilon (default 0.7); flex: the\n"
            "                     smallest gain a compressed sync may keep (default 0.3 with\n"
            "                     local steps, 0.45 without)\n"
            "  --ctl-log FILE     accordion, gravac, flex: every decision with its inputs (rank 0)\n"
            "run:\n"
            "  --max-steps N      at most N steps per epoch (quick runs)\n"
            "  --train-limit N    use only the first N training examples\n"
            "  --eval-every N     also evaluate the test set every N steps\n"
            "  --time-limit S     stop training after S seconds of training time (checked\n"
            "                     every 10 steps)\n"
            "  --log FILE         CSV, one row per step (rank 0)\n"
            "  --save FILE        after training, write the model evaluated last (the\n"
            "                     ranks' mean where their weights differ) to FILE (rank 0)\n"
            "  --load FILE        start from the weights in FILE (written by --save for the\n"
            "                     same --model and data; rank 0 reads it, every rank gets it)\n"
            "  --check-sync       after every synchronised step, fail unless every rank\n"
            "                     holds bit-identical weights (for tests)\n");
}

static int parse_list(const char *s, size_t *out, int max)
{
    int n = 0;
    char *end;

    while (*s) {
        long v;
        if (n == max)
            return -1;
        errno = 0;
        v = strtol(s, &end, 10);
        if (end == s || v <= 0 || v > 1 << 20 || errno)
            return -1;
        out[n++] = (size_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

/* a decimal number in [lo, hi], as FLX_* values are read: a digit or a
 * point and a digit first (no blanks, no sign), no hexadecimal (strtod
 * took " 0.1", "+0.1" and 0x10) */
static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;

    if (!isdigit((unsigned char)s[0]) && !(s[0] == '.' && isdigit((unsigned char)s[1])))
        return -1;
    if (strpbrk(s, "xX") != NULL)
        return -1;
    errno = 0;
    *out = strtod(s, &end);
    return end != s && !*end && !errno && *out >= lo && *out <= hi ? 0 : -1;
}

/* a whole number in [1, max]: no sign, no wrap-around, no trailing text */
static int parse_count(const char *s, long max, long *out)
{
    char *end;
    long v;

    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < 1 || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_opts(int argc, char **argv, train_opts_t *o)
{
    static const struct option longopts[] = {
        {"data", required_argument, 0, 'd'},  {"synthetic", no_argument, 0, 'S'},
        {"epochs", required_argument, 0, 'e'}, {"batch", required_argument, 0, 'b'},
        {"lr", required_argument, 0, 'l'},    {"momentum", required_argument, 0, 'm'},
        {"weight-decay", required_argument, 0, 'w'}, {"hidden", required_argument, 0, 'H'},
        {"seed", required_argument, 0, 's'},  {"log", required_argument, 0, 'L'},
        {"max-steps", required_argument, 0, 'x'}, {"train-limit", required_argument, 0, 't'},
        {"algo", required_argument, 0, 'a'},  {"help", no_argument, 0, 'h'},
        {"model", required_argument, 0, 'M'}, {"policy", required_argument, 0, 'P'},
        {"lr-schedule", required_argument, 0, 'R'}, {"bucket", required_argument, 0, 'B'},
        {"kept", required_argument, 0, 'k'},  {"leader", required_argument, 0, 'E'},
        {"psgd-rank", required_argument, 0, 'r'}, {"weight", required_argument, 0, 'W'},
        {"eta", required_argument, 0, 'n'},   {"interval", required_argument, 0, 'i'},
        {"delta", required_argument, 0, 'D'}, {"min-gain", required_argument, 0, 'g'},
        {"ctl-log", required_argument, 0, 'C'}, {"eval-every", required_argument, 0, 'v'},
        {"local-steps", required_argument, 0, 'O'}, {"max-local", required_argument, 0, 'G'},
        {"delta-decay", required_argument, 0, 'Q'},
        {"time-limit", required_argument, 0, 'T'}, {"check-sync", no_argument, 0, 'Y'},
        {"momentum-correction", required_argument, 0, 'c'},
        {"save", required_argument, 0, 'o'}, {"load", required_argument, 0, 'I'},
        {0, 0, 0, 0}};
    /* the options of some policies only: given with another, a warning (a
     * sweep over policies may pass them all the same arguments) */
#define POLS(a, b, c) ((1u << (a)) | (1u << (b)) | (1u << (c)))
    static const struct {
        int opt;
        unsigned policies;
        const char *which;
    } only[] = {
        {'a', POLS(POL_DENSE, POL_DENSE, POL_DENSE), "dense"},
        {'B', POLS(POL_DENSE, POL_DENSE, POL_DENSE), "dense"},
        {'k', POLS(POL_TOPK_AG, POL_ARTOPK, POL_ARTOPK), "topk-ag or artopk"},
        {'E', POLS(POL_ARTOPK, POL_ARTOPK, POL_ARTOPK), "artopk"},
        {'r', POLS(POL_POWERSGD, POL_POWERSGD, POL_POWERSGD), "powersgd"},
        {'W', POLS(POL_FLEX, POL_FLEX, POL_FLEX), "flex"},
        {'n', POLS(POL_ACCORDION, POL_FLEX, POL_FLEX), "accordion or flex"},
        {'i', POLS(POL_ACCORDION, POL_FLEX, POL_SELSYNC), "accordion, flex or selsync"},
        {'D', POLS(POL_SELSYNC, POL_FLEX, POL_FLEX), "selsync or flex"},
        {'G', POLS(POL_SELSYNC, POL_FLEX, POL_FLEX), "selsync or flex"},
        {'Q', POLS(POL_SELSYNC, POL_FLEX, POL_FLEX), "selsync or flex"},
        {'O', POLS(POL_FLEX, POL_FLEX, POL_FLEX), "flex"},
        {'g', POLS(POL_GRAVAC, POL_FLEX, POL_FLEX), "gravac or flex"},
    };
#undef POLS
    unsigned char given[128] = {0};
    int c, p, opt_index = 0;
    size_t list[8];
    char *end;
    long l;

    *o = (train_opts_t){.data_dir = FLX_FMNIST_DIR, .epochs = 2, .batch = 64, .lr = 0.05,
                        .momentum = 0.9, .weight_decay = 5e-4, .model = "mlp:256,256",
                        .seed = 1, .max_steps = -1};
    o->sync = (sync_opts_t){.policy = POL_DENSE, .algo = FLX_ALGO_AUTO,
                            .bucket_bytes = 4u << 20, .kept = 0.01, .psgd_rank = 4,
                            .leader = FLX_LEADER_STAR, .weight = -1, .eta = 0.5,
                            .interval = 50, .delta = -1, .delta_decay = -1, .min_gain = -1,
                            .local_steps = 1};
    while ((c = getopt_long(argc, argv, "h", longopts, &opt_index)) != -1) {
        errno = 0;
        if (c > 0 && c < 128)
            given[c] = 1;
        switch (c) {
        case 'd': o->data_dir = optarg; break;
        case 'S': o->synthetic = 1; break;
        case 'e':
            if (!strcmp(optarg, "0"))
                l = 0;
            else if (parse_count(optarg, 1000000, &l))
                goto bad;
            o->epochs = (int)l;
            break;
        case 'o': if (!*optarg) goto bad; o->save_path = optarg; break;
        case 'I': if (!*optarg) goto bad; o->load_path = optarg; break;
        case 'b': if (parse_count(optarg, 65536, &l)) goto bad; o->batch = (size_t)l; break;
        case 'l': if (parse_double(optarg, 1e-9, 100, &o->lr)) goto bad; break;
        case 'm': if (parse_double(optarg, 0, 0.999999, &o->momentum)) goto bad; break;
        case 'w': if (parse_double(optarg, 0, 1, &o->weight_decay)) goto bad; break;
        case 'H':
            if (parse_list(optarg, list, 8) < 0 || strlen(optarg) > sizeof(o->model) - 5) goto bad;
            snprintf(o->model, sizeof(o->model), "mlp:%s", optarg);
            break;
        case 'M': if (strlen(optarg) >= sizeof(o->model)) goto bad; strcpy(o->model, optarg); break;
        case 's':
            errno = 0;
            o->seed = strtoull(optarg, &end, 10);
            if (*end || *optarg < '0' || *optarg > '9' || errno) goto bad;
            break;
        case 'L': o->log_path = optarg; break;
        case 'x': if (parse_count(optarg, 1L << 40, &o->max_steps)) goto bad; break;
        case 't': if (parse_count(optarg, 1L << 40, &l)) goto bad; o->train_limit = (size_t)l; break;
        case 'v': if (parse_count(optarg, 1L << 40, &o->eval_every)) goto bad; break;
        case 'T': if (parse_double(optarg, 0.001, 1e7, &o->time_limit)) goto bad; break;
        case 'a':
            if (!strcmp(optarg, "auto")) o->sync.algo = FLX_ALGO_AUTO;
            else if (!strcmp(optarg, "ring")) o->sync.algo = FLX_ALGO_RING;
            else if (!strcmp(optarg, "tree")) o->sync.algo = FLX_ALGO_TREE;
            else if (!strcmp(optarg, "rd")) o->sync.algo = FLX_ALGO_RD;
            else if (!strcmp(optarg, "hd")) o->sync.algo = FLX_ALGO_HD;
            else goto bad;
            break;
        case 'P': if ((p = policy_parse(optarg)) < 0) goto bad; o->sync.policy = (policy_t)p; break;
        case 'R':
            if (!strcmp(optarg, "step")) o->lr_schedule = LR_STEP;
            else if (!strcmp(optarg, "cosine")) o->lr_schedule = LR_COSINE;
            else if (!strcmp(optarg, "const")) o->lr_schedule = LR_CONST;
            else goto bad;
            break;
        case 'B': if (flx_parse_size(optarg, &o->sync.bucket_bytes) || o->sync.bucket_bytes < 1024) goto bad; break;
        case 'k': if (parse_double(optarg, 1e-6, 1, &o->sync.kept)) goto bad; break;
        case 'E':
            if (!strcmp(optarg, "star")) o->sync.leader = FLX_LEADER_STAR;
            else if (!strcmp(optarg, "var")) o->sync.leader = FLX_LEADER_VAR;
            else if (!strcmp(optarg, "vote")) o->sync.leader = FLX_LEADER_VOTE;
            else goto bad;
            break;
        case 'r': if (parse_count(optarg, 1 << 20, &l)) goto bad; o->sync.psgd_rank = (int)l; break;
        case 'W': if (parse_double(optarg, 0, 1, &o->sync.weight)) goto bad; break;
        case 'n': if (parse_double(optarg, 1e-6, 100, &o->sync.eta)) goto bad; break;
        case 'i': if (parse_count(optarg, 1 << 30, &l)) goto bad; o->sync.interval = (int)l; break;
        case 'G': if (parse_count(optarg, 1 << 30, &l)) goto bad; o->sync.max_local = (int)l; break;
        case 'Q': if (parse_double(optarg, 0, 4, &o->sync.delta_decay)) goto bad; break;
        case 'D': if (parse_double(optarg, 0, 100, &o->sync.delta)) goto bad; break;
        case 'g': if (parse_double(optarg, 0, 1, &o->sync.min_gain)) goto bad; break;
        case 'C': o->sync.ctl_log = optarg; break;
        case 'O':
            if (!strcmp(optarg, "on")) o->sync.local_steps = 1;
            else if (!strcmp(optarg, "off")) o->sync.local_steps = 0;
            else goto bad;
            break;
        case 'Y': o->check_sync = 1; break;
        case 'c':
            if (!strcmp(optarg, "on")) o->momentum_correction = 1;
            else if (!strcmp(optarg, "off")) o->momentum_correction = 0;
            else goto bad;
            break;
        case 'h': usage(stdout); exit(0);
        default: /* getopt said which; the 60 lines of usage buried it */
            fprintf(stderr, "flx-train: see --help for the options\n");
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, "flx-train: bad value '%s' for --%s (see --help)\n", optarg,
                longopts[opt_index].name);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "flx-train: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (nn_spec_check(o->model) != FLX_OK) /* its line says why, before any data or rank */
        return -1;
    for (size_t k = 0; k < sizeof(only) / sizeof(only[0]); k++) {
        if (given[only[k].opt] && !(only[k].policies & (1u << o->sync.policy))) {
            size_t used = strlen(o->unused);
            const char *name = "?";
            for (const struct option *lo = longopts; lo->name; lo++)
                if (lo->val == only[k].opt)
                    name = lo->name;
            snprintf(o->unused + used, sizeof(o->unused) - used, "%s--%s (%s)",
                     used ? ", " : "", name, only[k].which);
        }
    }
    if (o->sync.ctl_log && o->sync.policy != POL_ACCORDION && o->sync.policy != POL_GRAVAC &&
        o->sync.policy != POL_FLEX) { /* only the controller's policies decide anything */
        fprintf(stderr, "flx-train: --ctl-log needs a policy the controller runs (accordion, "
                        "gravac or flex), not %s\n", policy_name(o->sync.policy));
        return -1;
    }
    if (o->sync.delta < 0)
        o->sync.delta = o->sync.policy == POL_FLEX ? 0.2 : 0.3;
    if (o->sync.delta_decay < 0)
        o->sync.delta_decay = o->sync.policy == POL_FLEX ? 0.5 : 0;
    for (const char *d = "DGQ"; *d; d++)
        if (o->sync.policy == POL_FLEX && !o->sync.local_steps && given[(int)*d]) {
            size_t used = strlen(o->unused);
            snprintf(o->unused + used, sizeof(o->unused) - used, "%s--%s (selsync, or flex "
                     "with local steps)", used ? ", " : "",
                     *d == 'D' ? "delta" : *d == 'G' ? "max-local" : "delta-decay");
        }
    if (o->momentum_correction && o->sync.policy == POL_FLEX && o->sync.local_steps) {
        fprintf(stderr, "flx-train: --momentum-correction on needs steps that sync the "
                        "gradient: with flex, add --local-steps off (local steps keep each "
                        "rank's velocity)\n");
        return -1;
    }
    if (o->momentum_correction && !sync_policy_topk(o->sync.policy)) {
        fprintf(stderr, "flx-train: --momentum-correction on needs a top-k policy (topk-ag, "
                        "artopk, accordion, gravac or flex), not %s\n",
                policy_name(o->sync.policy));
        return -1;
    }
    return 0;
}
static void shuffle(size_t *idx, size_t n, uint64_t seed)
{
    rng_t rng;

    rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_next(&rng) % i, t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}

/* test accuracy over every rank's shard of the test set */
static flx_status_t evaluate(flx_comm_h comm, nn_t *nn, const data_set_t *test, double *acc_p,
                             double *loss_p)
{
    int rank = flx_comm_rank(comm), size = flx_comm_size(comm);
    size_t lo = test->n * (size_t)rank / (size_t)size, hi = test->n * (size_t)(rank + 1) / (size_t)size;
    double loss = 0, sums[3];
    flx_status_t st;

    sums[0] = (double)nn_evaluate(nn, test->x + lo * test->dim, test->y + lo, hi - lo, &loss);
    sums[1] = loss;
    sums[2] = (double)(hi - lo);
    st = flx_allreduce(comm, sums, sums, 3, FLX_FLOAT64, FLX_SUM, FLX_ALGO_AUTO);
    if (st != FLX_OK)
        return st;
    *acc_p = sums[0] / sums[2];
    *loss_p = sums[1] / sums[2];
    return FLX_OK;
}

/* --check-sync: FLX_OK if every rank's weights hash the same; else one
 * line and FLX_ERR_MISMATCH */
static flx_status_t check_weights(flx_comm_h comm, const float *p, size_t n, long step)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ull;
    double v[2];
    flx_status_t st;

    for (size_t i = 0; i < n * sizeof(float); i++)
        h = (h ^ b[i]) * 1099511628211ull;
    v[0] = (double)(h >> 12);  /* max of x and of -x: equal only if all are */
    v[1] = -(double)(h >> 12);
    st = flx_allreduce(comm, v, v, 2, FLX_FLOAT64, FLX_MAX, FLX_ALGO_AUTO);
    if (st != FLX_OK)
        return st;
    if (v[0] != -v[1]) {
        fprintf(stderr, "flx-train: rank %d: weights differ between ranks after step %ld\n",
                flx_comm_rank(comm), step);
        return FLX_ERR_MISMATCH;
    }
    return FLX_OK;
}

/* the learning rate of step t of total (epoch e of epochs) */
static double lr_at(const train_opts_t *o, int epoch, double t, double total)
{
    double lr = o->lr;

    switch (o->lr_schedule) {
    case LR_COSINE:
        return 0.5 * lr * (1.0 + cos(M_PI * t / total));
    case LR_STEP: /* from the first epoch that starts at or after 50% and 75% */
        if (o->epochs >= 4 && epoch >= 0.5 * o->epochs)
            lr *= 0.1;
        if (o->epochs >= 4 && epoch >= 0.75 * o->epochs)
            lr *= 0.1;
        return lr;
    default:
        return lr;
    }
}

/* channels x height x width of a dataset's examples: square images */
static void data_shape(const data_set_t *d, size_t *c, size_t *h, size_t *w)
{
    *c = 1;
    *h = d->rows;
    *w = d->cols;
}

typedef struct {
    train_opts_t o;
    flx_comm_h comm;
    int rank, size;
    data_set_t train, test;
    nn_t *nn;
    sync_t *sync;
    FILE *log;
    double clock;        /* training time so far, evaluation excluded */
    double t_start;      /* wall clock at the start of training       */
    double bytes_total;
    float *eval_save;    /* the rank's own weights while the mean is evaluated */
} run_t;

static int64_t bits_of(double x)
{
    int64_t b;

    memcpy(&b, &x, sizeof(b));
    return b;
}

static int64_t hash_of(const char *s) /* FNV-1a, 63 bits */
{
    uint64_t h = 1469598103934665603ull;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (int64_t)(h >> 1);
}

/* Every rank must train the same model the same way: a rank with another
 * --seed starts from other weights, another --lr or policy steps apart,
 * and the run would end "successfully" with the ranks' models differing.
 * One agreement on every value's range names the first that differs.  0: go on; -1: every rank stops. */
static int agree_options(run_t *r)
{
    const train_opts_t *o = &r->o;
    const sync_opts_t *so = &o->sync;
    const struct {
        const char *name;
        int64_t v;
    } f[] = {
        {"--seed", (int64_t)o->seed},
        {"--model", hash_of(o->model)},
        {"--synthetic", o->synthetic},
        {"--epochs", o->epochs},
        {"--batch", (int64_t)o->batch},
        {"--lr", bits_of(o->lr)},
        {"--lr-schedule", o->lr_schedule},
        {"--momentum", bits_of(o->momentum)},
        {"--weight-decay", bits_of(o->weight_decay)},
        {"--max-steps", o->max_steps},
        {"--train-limit", (int64_t)o->train_limit},
        {"--eval-every", o->eval_every},
        {"--time-limit", bits_of(o->time_limit)},
        {"--check-sync", o->check_sync},
        {"--save", o->save_path != NULL},
        {"--load", o->load_path != NULL},
        {"--momentum-correction", o->momentum_correction},
        {"--policy", so->policy},
        {"--algo", so->algo},
        {"--bucket", (int64_t)so->bucket_bytes},
        {"--kept", bits_of(so->kept)},
        {"--psgd-rank", so->psgd_rank},
        {"--leader", so->leader},
        {"--weight", bits_of(so->weight)},
        {"--eta", bits_of(so->eta)},
        {"--interval", so->interval},
        {"--max-local", so->max_local},
        {"--delta", bits_of(so->delta)},
        {"--delta-decay", bits_of(so->delta_decay)},
        {"--local-steps", so->local_steps},
        {"--min-gain", bits_of(so->min_gain)},
    };
    enum { NF = sizeof(f) / sizeof(f[0]) };
    int64_t v[2 * NF];
    flx_status_t st;

    for (int i = 0; i < NF; i++)
        v[i] = f[i].v;
    st = coll_agree_range(r->comm, v, NF);
    if (st != FLX_OK) {
        fprintf(stderr, "flx-train: rank %d: cannot agree on the options: %s\n", r->rank,
                flx_status_string(st));
        return -1;
    }
    for (int i = 0; i < NF; i++)
        if (v[i] != v[NF + i]) {
            if (r->rank == 0)
                fprintf(stderr, "flx-train: the ranks were given different %s (every rank "
                        "must train the same model the same way)\n", f[i].name);
            return -1;
        }
    return 0;
}

/* Every rank loaded its own copy of the data: they must agree on whether
 * it loaded and on its shape, or they would take different numbers of
 * steps and call different collectives.  0: go on; -1: every rank stops
 * (the ranks that failed said why). */
static int agree_data(run_t *r, flx_status_t load_st)
{
    static const char *const what[] = {"", "training examples", "training image rows",
                                       "training image columns", "test examples",
                                       "test image rows", "test image columns"};
    const data_set_t *tr = &r->train, *te = &r->test;
    int ok = load_st == FLX_OK;
    int64_t v[14] = {!ok, ok ? (int64_t)tr->n : 0, ok ? (int64_t)tr->rows : 0,
                     ok ? (int64_t)tr->cols : 0, ok ? (int64_t)te->n : 0,
                     ok ? (int64_t)te->rows : 0, ok ? (int64_t)te->cols : 0};
    flx_status_t st = coll_agree_range(r->comm, v, 7);

    if (st != FLX_OK) {
        fprintf(stderr, "flx-train: rank %d: cannot agree on the data: %s\n", r->rank,
                flx_status_string(st));
        return -1;
    }
    if (v[0]) {
        if (ok)
            fprintf(stderr, "flx-train: rank %d: another rank could not load the data\n",
                    r->rank);
        return -1;
    }
    for (int i = 1; i < 7; i++) {
        if (v[i] != v[7 + i]) {
            if (r->rank == 0)
                fprintf(stderr, "flx-train: the ranks loaded different data (%s: %lld on "
                        "one rank, %lld on another); every rank needs the same files\n",
                        what[i], (long long)v[7 + i], (long long)v[i]);
            return -1;
        }
    }
    if (te->rows != tr->rows || te->cols != tr->cols) {
        if (r->rank == 0)
            fprintf(stderr, "flx-train: the test images are %zux%zu but the training images "
                    "%zux%zu (%s)\n", te->rows, te->cols, tr->rows, tr->cols,
                    r->o.synthetic ? "synthetic" : r->o.data_dir);
        return -1;
    }
    return 0;
}

/* Collective: every rank's weights become the ranks' mean.  The one
 * allreduce that both the evaluation and --save use, so that the saved
 * model is the same bits as the one evaluated. */
static flx_status_t weights_mean(run_t *r)
{
    return flx_allreduce(r->comm, nn_params(r->nn), nn_params(r->nn), nn_nparams(r->nn),
                         FLX_FLOAT32, FLX_AVG, FLX_ALGO_RING);
}

/* Collective.  Where the ranks' weights may differ (selsync, flex's local
 * steps, between two syncs) the model evaluated is their mean, computed
 * apart: each rank's own weights come back afterwards, so evaluating does
 * not change the training (each rank testing its own model on its share
 * of the test set would score a mixture of models). */
static int run_evaluate(run_t *r, double *acc_p)
{
    double loss;
    float *params = nn_params(r->nn);
    size_t n = nn_nparams(r->nn);
    int apart = r->eval_save != NULL; /* set up by train() */
    flx_status_t st = FLX_OK;

    if (apart) {
        memcpy(r->eval_save, params, n * sizeof(float));
        st = weights_mean(r);
    }
    if (st == FLX_OK)
        st = evaluate(r->comm, r->nn, &r->test, acc_p, &loss);
    if (apart)
        memcpy(params, r->eval_save, n * sizeof(float));
    if (st != FLX_OK)
        fprintf(stderr, "flx-train: rank %d: evaluation failed: %s\n", r->rank,
                flx_status_string(st));
    return st == FLX_OK ? 0 : -1;
}

/* --load, collective: rank 0 reads the file into the weights (checkpoint.c
 * names what is wrong with it) and every rank gets them; a failure stops
 * every rank.  0: go on; -1: stop. */
static int run_load(run_t *r)
{
    size_t n = nn_nparams(r->nn);
    int32_t bad = 0;
    flx_status_t st = FLX_OK;

    if (r->rank == 0)
        bad = ckpt_load(r->o.load_path, nn_describe(r->nn), nn_params(r->nn), n, 0) != FLX_OK;
    if (r->size > 1) {
        st = flx_allreduce(r->comm, &bad, &bad, 1, FLX_INT32, FLX_MAX, FLX_ALGO_AUTO);
        if (st == FLX_OK && !bad)
            st = flx_broadcast(r->comm, nn_params(r->nn), n, FLX_FLOAT32, 0);
    }
    if (st != FLX_OK)
        fprintf(stderr, "flx-train: rank %d: cannot share the weights of %s: %s\n", r->rank,
                r->o.load_path, flx_status_string(st));
    else if (bad && r->rank != 0)
        fprintf(stderr, "flx-train: rank %d: rank 0 could not load %s\n", r->rank,
                r->o.load_path);
    else if (r->rank == 0 && !bad)
        printf("flx-train: loaded the weights of %s from %s\n", nn_describe(r->nn),
               r->o.load_path);
    return st == FLX_OK && !bad ? 0 : -1;
}

/* --save, collective where the ranks' weights differ: the model the last
 * evaluation tested (their mean by weights_mean, as run_evaluate's, so the
 * same bits), written by rank 0.  0: saved; -1: rank 0 could not (its
 * line says why) or the mean failed. */
static int run_save(run_t *r)
{
    size_t n = nn_nparams(r->nn);
    flx_status_t st = FLX_OK;

    if (r->eval_save != NULL) /* the end of the run: the mean may stay */
        st = weights_mean(r);
    if (st != FLX_OK) {
        fprintf(stderr, "flx-train: rank %d: cannot average the weights to save: %s\n",
                r->rank, flx_status_string(st));
        return -1;
    }
    if (r->rank != 0)
        return 0;
    if (ckpt_save(r->o.save_path, nn_describe(r->nn), nn_params(r->nn), n, 0) != FLX_OK)
        return -1;
    printf("flx-train: saved %s (%zu parameters) to %s\n", nn_describe(r->nn), n,
           r->o.save_path);
    return 0;
}

/* velocity = momentum velocity + gradient + weight decay */
static void momentum_step(const train_opts_t *o, float *velocity, const float *grads,
                          const float *params, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] + (float)o->weight_decay * params[i];
        velocity[i] = (float)o->momentum * velocity[i] + g;
    }
}

/* The optimiser's update, velocity and weights in one pass, block by block
 * while each block is in cache (the same arithmetic per weight as
 * momentum_step followed by x -= lr v, which read the velocity and the
 * weights twice: 4 ranks sharing 2 cores stepped 3-4 ms faster in 24-32).
 * With sq_p (selsync, flex's local steps): also the norm test's sum of
 * squares of the gradient, each block summed (cblas_dsdot: a double sum)
 * before it is stepped, so the gradient is read from memory once rather
 * than twice.  From the first block holding NaN or Inf on, the gradient is
 * zeroed (the blocks before were stepped already: a diverging rank's finite
 * values may still overflow its weights), the norm test tells every rank,
 * and they stop at the next step; the return says whether that happened. */
#define UPDATE_BLOCK 2048
static int update_step(const train_opts_t *o, double lr, float *velocity, float *grads,
                       float *params, size_t n, double *sq_p)
{
    double sq = 0;
    int bad = 0;

    for (size_t b = 0; b < n; b += UPDATE_BLOCK) {
        size_t m = n - b < UPDATE_BLOCK ? n - b : UPDATE_BLOCK;

        if (sq_p && !bad) {
            double part = cblas_dsdot((int)m, grads + b, 1, grads + b, 1);
            bad = !isfinite(part);
            sq += part;
        }
        if (bad) /* this block and every one after it */
            memset(grads + b, 0, m * sizeof(float));
        momentum_step(o, velocity + b, grads + b, params + b, m);
        for (size_t i = b; i < b + m; i++)
            params[i] -= (float)lr * velocity[i];
    }
    if (sq_p)
        *sq_p = sq;
    return bad;
}

static int train(run_t *r)
{
    const train_opts_t *o = &r->o;
    size_t n = nn_nparams(r->nn), *order = NULL, steps_per_epoch;
    float *velocity = calloc(n, sizeof(float)), *xb = malloc(o->batch * r->train.dim * sizeof(float));
    float *params = nn_params(r->nn), *grads = nn_grads(r->nn);
    uint8_t *yb = malloc(o->batch);
    double prev_lr = -1, acc = 0;
    long step = 0, total_steps;
    /* with --epochs 0 the weights are the same everywhere: their mean, a sum
     * divided by N, could move them by an ulp */
    int rc = -1, stop = 0, apart = r->size > 1 && sync_local_models(r->sync) && o->epochs > 0;

    order = malloc(r->train.n * sizeof(size_t));
    if (apart) /* run_evaluate evaluates the ranks' mean */
        r->eval_save = malloc(n * sizeof(float));
    if (velocity == NULL || xb == NULL || yb == NULL || order == NULL ||
        (apart && r->eval_save == NULL)) {
        fprintf(stderr, "flx-train: out of memory\n");
        goto out;
    }
    steps_per_epoch = r->train.n / (o->batch * (size_t)r->size);
    if (o->max_steps > 0 && steps_per_epoch > (size_t)o->max_steps)
        steps_per_epoch = (size_t)o->max_steps;
    total_steps = (long)steps_per_epoch * o->epochs;
    for (int epoch = 0; epoch < o->epochs && !stop; epoch++) {
        double loss_sum = 0, t_epoch = r->clock, comm_time = 0, compute_time = 0, bytes_epoch = 0;
        size_t correct = 0, seen = 0, s;
        char summary[256];

        shuffle(order, r->train.n, o->seed * 1000003u + (uint64_t)epoch);
        for (s = 0; s < steps_per_epoch; s++, step++) {
            double lr = lr_at(o, epoch, (double)step, (double)total_steps), t0, t1, t2, test_acc = -1;
            double grad_sq = 0;
            int grad_bad = 0;
            size_t c;
            float loss;
            sync_report_t rep;
            flx_status_t st;

            /* a decay (a step, or cosine passing 1/10, 1/100, ... of the
             * initial rate): Accordion's low compression for an interval */
            if (prev_lr > 0 && floor(log10(o->lr / lr) + 1e-9) > floor(log10(o->lr / prev_lr) + 1e-9))
                sync_lr_changed(r->sync);
            prev_lr = lr;
            sync_set_lr_ratio(r->sync, lr / o->lr);
            for (size_t i = 0; i < o->batch; i++) {
                size_t ex = order[(s * (size_t)r->size + (size_t)r->rank) * o->batch + i];
                memcpy(xb + i * r->train.dim, r->train.x + ex * r->train.dim,
                       r->train.dim * sizeof(float));
                yb[i] = r->train.y[ex];
            }
            t0 = flx_time_now();
            loss = nn_train_batch(r->nn, xb, yb, o->batch, &c, sync_grad_ready, r->sync);
            t1 = flx_time_now();
            if (o->momentum_correction) { /* each rank's velocity is what it compresses */
                momentum_step(o, velocity, grads, params, n);
                memcpy(grads, velocity, n * sizeof(float));
            }
            st = sync_gradients(r->sync, t1 - t0, &rep);
            if (st == FLX_OK && o->momentum_correction) {
                sync_mask_velocity(r->sync, &rep, velocity);
                for (size_t i = 0; i < n; i++)
                    params[i] -= (float)lr * grads[i];
            } else if (st == FLX_OK) {
                grad_bad = update_step(o, lr, velocity, grads, params, n,
                                       sync_local_models(r->sync) ? &grad_sq : NULL);
            }
            if (st == FLX_OK)
                st = sync_after_update(r->sync, grad_sq, grad_bad, &rep);
            if (st == FLX_OK && o->check_sync && rep.synced)
                st = check_weights(r->comm, params, n, step);
            if (st != FLX_OK) {
                fprintf(stderr, "flx-train: rank %d: gradient sync (%s) failed at step %ld: %s\n",
                        r->rank, policy_name(o->sync.policy), step, flx_status_string(st));
                goto out;
            }
            t2 = flx_time_now();
            r->clock += t2 - t0;
            loss_sum += loss;
            correct += c;
            seen += o->batch;
            comm_time += rep.comm_s;
            compute_time += t1 - t0;
            bytes_epoch += rep.bytes;
            if (o->time_limit > 0 && step % 10 == 9) { /* the ranks' clocks differ: agree */
                double t = r->clock;

                st = flx_allreduce(r->comm, &t, &t, 1, FLX_FLOAT64, FLX_MAX, FLX_ALGO_AUTO);
                if (st != FLX_OK) {
                    fprintf(stderr, "flx-train: rank %d: %s\n", r->rank, flx_status_string(st));
                    goto out;
                }
                stop = t >= o->time_limit;
            }
            if (o->eval_every > 0 && (step + 1) % o->eval_every == 0 && s + 1 < steps_per_epoch &&
                !stop) {
                if (run_evaluate(r, &test_acc) != 0)
                    goto out;
            }
            if (r->log) {
                fprintf(r->log, "%ld,%d,%.6f,%.5f,%s,%s,%.6g,%.0f,%.6f,%.6f,%.6f,%.4f,%d,%d,",
                        step, epoch + 1, r->clock, loss, policy_name(o->sync.policy),
                        rep.collective, rep.kept, rep.bytes, rep.select_s, rep.comm_s, t1 - t0,
                        rep.gain, rep.critical, rep.synced);
                if (test_acc >= 0)
                    fprintf(r->log, "%.2f", 100.0 * test_acc);
                fprintf(r->log, ",%.6f,%.6f,%.6g,%.6f,", rep.decide_s, rep.agree_s, lr,
                        flx_time_now() - r->t_start);
                if (rep.change >= 0) /* selsync, flex's local steps */
                    fprintf(r->log, "%.4g", rep.change);
                fputc('\n', r->log);
            }
            if (stop)
                break;
        }
        if (s < steps_per_epoch)
            s++; /* the step that hit the time limit */
        r->bytes_total += bytes_epoch;
        if (epoch + 1 == o->epochs || stop) { /* the last step's agreement: a NaN there too */
            flx_status_t st = sync_finish(r->sync);
            if (st != FLX_OK) {
                fprintf(stderr, "flx-train: rank %d: gradient sync (%s) failed at the last step: "
                        "%s\n", r->rank, policy_name(o->sync.policy), flx_status_string(st));
                goto out;
            }
        }
        if (run_evaluate(r, &acc) != 0)
            goto out;
        if (r->log) { /* the epoch's evaluation belongs to its last step */
            fprintf(r->log, "%ld,%d,%.6f,,%s,eval,,0,,,,,,,%.2f,,,,%.6f,\n", step - (stop ? 0 : 1),
                    epoch + 1, r->clock, policy_name(o->sync.policy), 100.0 * acc,
                    flx_time_now() - r->t_start);
            fflush(r->log);
        }
        sync_summary(r->sync, summary, sizeof(summary));
        if (r->rank == 0) {
            double dt = r->clock - t_epoch;
            printf("epoch %d/%d  loss %.4f  train-acc %.2f%%  test-acc %.2f%%  images/s %.0f  "
                   "step %.1f ms (compute %.1f, comm %.1f)  sent %.1f MB  lr %.4g  %s: %s\n",
                   epoch + 1, o->epochs, s ? loss_sum / (double)s : 0.0,
                   seen ? 100.0 * (double)correct / (double)seen : 0.0, 100.0 * acc,
                   dt > 0 ? (double)(seen * (size_t)r->size) / dt : 0.0,
                   s ? 1e3 * dt / (double)s : 0.0, s ? 1e3 * compute_time / (double)s : 0.0,
                   s ? 1e3 * comm_time / (double)s : 0.0, bytes_epoch / 1e6, prev_lr,
                   policy_name(o->sync.policy), summary);
            fflush(stdout);
        }
    }
    if (o->epochs == 0 && run_evaluate(r, &acc) != 0) /* --epochs 0: evaluation only */
        goto out;
    if (r->rank == 0)
        printf("flx-train: final test-acc %.2f%%, %.1f s of training, %.1f MB sent per rank\n",
               100.0 * acc, r->clock, r->bytes_total / 1e6);
    if (o->save_path && run_save(r) != 0)
        goto out;
    rc = 0;
out:
    free(velocity);
    free(r->eval_save);
    r->eval_save = NULL;
    free(order);
    free(xb);
    free(yb);
    return rc;
}

int main(int argc, char **argv)
{
    run_t r;
    size_t ch, h, w;
    flx_status_t st;
    int rc = 1;
    double t_start = flx_time_now();

    memset(&r, 0, sizeof(r));
    if (parse_opts(argc, argv, &r.o) != 0)
        return 2;
    openblas_set_num_threads(1);
    st = flx_comm_create(NULL, &r.comm);
    if (st != FLX_OK) {
        fprintf(stderr, "flx-train: cannot create the communicator: %s\n", flx_status_string(st));
        return 1;
    }
    r.rank = flx_comm_rank(r.comm);
    r.size = flx_comm_size(r.comm);
    if (agree_options(&r) != 0)
        goto out;
    if (r.rank == 0 && r.o.unused[0])
        fprintf(stderr, "flx-train: warning: --policy %s ignores %s\n",
                policy_name(r.o.sync.policy), r.o.unused);
    {   /* rank 0 writes the step log and the model: checked first, so every rank stops
         * at once if it cannot (rather than after training, for the model) */
        int32_t bad = 0;
        if (r.rank == 0 && r.o.log_path && (r.log = fopen(r.o.log_path, "w")) == NULL) {
            fprintf(stderr, "flx-train: cannot write %s: %s\n", r.o.log_path, strerror(errno));
            bad = 1;
        }
        if (r.rank == 0 && !bad && r.o.save_path && ckpt_check_writable(r.o.save_path, 0) != FLX_OK)
            bad = 2;
        st = flx_allreduce(r.comm, &bad, &bad, 1, FLX_INT32, FLX_MAX, FLX_ALGO_AUTO);
        if (st != FLX_OK || bad) {
            if (st == FLX_OK && r.rank != 0)
                fprintf(stderr, "flx-train: rank %d: rank 0 cannot write the %s\n", r.rank,
                        bad == 1 ? "step log" : "model file (--save)");
            goto out;
        }
    }
    if (r.o.synthetic) {
        st = data_synthetic(r.o.train_limit ? r.o.train_limit : 6000, 64, 10, r.o.seed, &r.train);
        if (st == FLX_OK)
            st = data_synthetic(2000, 64, 10, r.o.seed + 1000, &r.test);
    } else {
        st = data_load_idx(r.o.data_dir, "train", &r.train);
        if (st == FLX_OK)
            st = data_load_idx(r.o.data_dir, "t10k", &r.test);
        if (st == FLX_OK && r.o.train_limit && r.o.train_limit < r.train.n)
            r.train.n = r.o.train_limit;
    }
    if (st != FLX_OK && r.o.synthetic) /* the IDX loader's own line names the file */
        fprintf(stderr, "flx-train: rank %d: no memory for the synthetic task\n", r.rank);
    if (agree_data(&r, st) != 0)
        goto out;
    if (r.train.n < r.o.batch * (size_t)r.size) {
        fprintf(stderr, "flx-train: %zu training examples are fewer than one step's %zu\n",
                r.train.n, r.o.batch * (size_t)r.size);
        goto out;
    }
    data_shape(&r.train, &ch, &h, &w);
    /* evaluation runs in chunks of max_batch; a CNN keeps every layer's
     * columns for max_batch examples, so it gets just the batch */
    st = nn_create(r.o.model, ch, h, w, r.train.classes,
                   strncmp(r.o.model, "cnn", 3) && r.o.batch < 256 ? 256 : r.o.batch, r.o.seed,
                   &r.nn);
    if (st != FLX_OK) {
        fprintf(stderr, "flx-train: cannot build the model '%s': %s\n", r.o.model,
                flx_status_string(st));
        goto out;
    }
    /* the gradient and the weights live as long as the run: registered once (ib) */
    st = flx_mem_register(r.comm, nn_grads(r.nn), nn_nparams(r.nn) * sizeof(float));
    if (st == FLX_OK)
        st = flx_mem_register(r.comm, nn_params(r.nn), nn_nparams(r.nn) * sizeof(float));
    if (st == FLX_OK && r.o.load_path && run_load(&r) != 0) /* before the sync copies them */
        goto out;
    if (st == FLX_OK)
        st = sync_create(r.comm, r.nn, &r.o.sync, &r.sync);
    if (st != FLX_OK) {
        fprintf(stderr, "flx-train: cannot set up the %s gradient sync: %s\n",
                policy_name(r.o.sync.policy), flx_status_string(st));
        goto out;
    }
    if (r.log) {
        fprintf(r.log, "step,epoch,time_s,loss,policy,collective,kept_fraction,bytes,select_s,"
                       "comm_s,compute_s,gain,critical,synced,test_acc,decide_s,agree_s,lr,wall_s,"
                       "norm_change\n");
    }
    if (r.rank == 0) {
        printf("flx-train: %d ranks over %s, %s: %zu train / %zu test examples, %s "
               "(%zu parameters), batch %zu per rank, policy %s%s\n",
               r.size, flx_comm_net_name(r.comm), r.o.synthetic ? "synthetic task" : r.o.data_dir,
               r.train.n, r.test.n, nn_describe(r.nn), nn_nparams(r.nn), r.o.batch,
               policy_name(r.o.sync.policy),
               r.o.momentum_correction                               ? " with momentum correction"
               : r.o.sync.policy == POL_FLEX && r.o.sync.local_steps ? " with local steps"
                                                                     : "");
        fflush(stdout);
    }
    r.t_start = flx_time_now();
    if (train(&r) == 0)
        rc = 0;
    if (r.rank == 0 && rc == 0)
        printf("flx-train: done in %.1f s\n", flx_time_now() - t_start);
out:
    if (r.log) { /* a write that failed (a full disk) fails the run, not a short log */
        int bad = ferror(r.log), closed = fclose(r.log);
        if (bad || closed != 0) {
            fprintf(stderr, "flx-train: rank %d: writing the step log %s failed%s%s\n", r.rank,
                    r.o.log_path, closed != 0 ? ": " : "", closed != 0 ? strerror(errno) : "");
            rc = 1;
        }
    }
    if (sync_destroy(r.sync) != FLX_OK && rc == 0) { /* the controller's line says why */
        fprintf(stderr, "flx-train: rank %d: the gradient sync did not end cleanly\n", r.rank);
        rc = 1;
    }
    if (r.nn && r.comm) {
        flx_mem_deregister(r.comm, nn_grads(r.nn));
        flx_mem_deregister(r.comm, nn_params(r.nn));
    }
    nn_destroy(r.nn);
    data_free(&r.train);
    data_free(&r.test);
    flx_comm_destroy(r.comm);
    if (fflush(stdout) != 0 || ferror(stdout)) { /* the progress lines went nowhere */
        fprintf(stderr, "flx-train: rank %d: writing to standard output failed\n", r.rank);
        rc = 1;
    }
    return rc;
}
