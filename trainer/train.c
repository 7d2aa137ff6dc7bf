/* flx-train -- data-parallel SGD over flexcoll.
 *
 * Every rank holds the same model (same seed), trains on its shard of each
 * epoch's shuffled training set, and averages gradients with one
 * flx_allreduce per step before a momentum-SGD update, so the weights stay
 * identical on every rank.  Launch with flxrun, mpirun or srun; alone it is
 * one rank. */
#include "flexcoll.h"
#include "common/log.h"
#include "common/time.h"
#include "trainer/data.h"
#include "trainer/mlp.h"
#include "trainer/rng.h"

#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *data_dir;
    int synthetic;
    int epochs;
    size_t batch;
    double lr;
    double momentum;
    double weight_decay;
    size_t hidden[MLP_MAX_LAYERS];
    int nhidden;
    uint64_t seed;
    const char *log_path;
    long max_steps;
    size_t train_limit;
    flx_algo_t algo;
} train_opts_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: flx-train [options]       (launch ranks with flxrun -n N, mpirun or srun)\n"
            "  --data DIR         MNIST-format IDX files (default " FLX_FMNIST_DIR ")\n"
            "  --synthetic        a synthetic 10-class task instead of files\n"
            "  --epochs N         epochs (default 2)\n"
            "  --batch B          examples per rank per step (default 64)\n"
            "  --lr X             learning rate (default 0.05; x0.1 at 50%% and 75%% of epochs)\n"
            "  --momentum X       (default 0.9)        --weight-decay X (default 5e-4)\n"
            "  --hidden A,B,...   hidden layer widths (default 256,256)\n"
            "  --seed S           initialisation and shuffling seed (default 1)\n"
            "  --max-steps N      at most N steps per epoch (quick runs)\n"
            "  --train-limit N    use only the first N training examples\n"
            "  --algo A           allreduce algorithm: auto|ring|tree|rd (default auto)\n"
            "  --log FILE         CSV, one row per step (rank 0)\n");
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
        {0, 0, 0, 0}};
    int c;
    char *end;

    *o = (train_opts_t){.data_dir = FLX_FMNIST_DIR, .epochs = 2, .batch = 64, .lr = 0.05,
                        .momentum = 0.9, .weight_decay = 5e-4, .hidden = {256, 256},
                        .nhidden = 2, .seed = 1, .max_steps = -1};
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        errno = 0;
        switch (c) {
        case 'd': o->data_dir = optarg; break;
        case 'S': o->synthetic = 1; break;
        case 'e': o->epochs = (int)strtol(optarg, &end, 10); if (*end || o->epochs < 1) goto bad; break;
        case 'b': o->batch = strtoul(optarg, &end, 10); if (*end || o->batch < 1 || o->batch > 65536) goto bad; break;
        case 'l': o->lr = strtod(optarg, &end); if (*end || !(o->lr > 0)) goto bad; break;
        case 'm': o->momentum = strtod(optarg, &end); if (*end || o->momentum < 0 || o->momentum >= 1) goto bad; break;
        case 'w': o->weight_decay = strtod(optarg, &end); if (*end || o->weight_decay < 0) goto bad; break;
        case 'H': o->nhidden = parse_list(optarg, o->hidden, MLP_MAX_LAYERS - 1); if (o->nhidden < 0) goto bad; break;
        case 's': o->seed = strtoull(optarg, &end, 10); if (*end) goto bad; break;
        case 'L': o->log_path = optarg; break;
        case 'x': o->max_steps = strtol(optarg, &end, 10); if (*end || o->max_steps < 1) goto bad; break;
        case 't': o->train_limit = strtoul(optarg, &end, 10); if (*end || o->train_limit < 1) goto bad; break;
        case 'a':
            if (!strcmp(optarg, "auto")) o->algo = FLX_ALGO_AUTO;
            else if (!strcmp(optarg, "ring")) o->algo = FLX_ALGO_RING;
            else if (!strcmp(optarg, "tree")) o->algo = FLX_ALGO_TREE;
            else if (!strcmp(optarg, "rd")) o->algo = FLX_ALGO_RD;
            else goto bad;
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        continue;
    bad:
        fprintf(stderr, "flx-train: bad value '%s' for --%s\n", optarg,
                longopts[0].name ? argv[optind - 1] + 2 : "?");
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "flx-train: unexpected argument '%s'\n", argv[optind]);
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
static flx_status_t evaluate(flx_comm_h comm, mlp_t *mlp, const data_set_t *test,
                             double *acc_p, double *loss_p)
{
    int rank = flx_comm_rank(comm), size = flx_comm_size(comm);
    size_t lo = test->n * (size_t)rank / (size_t)size, hi = test->n * (size_t)(rank + 1) / (size_t)size;
    double loss = 0, sums[3];
    flx_status_t st;

    sums[0] = (double)mlp_evaluate(mlp, test->x + lo * test->dim, test->y + lo, hi - lo, &loss);
    sums[1] = loss;
    sums[2] = (double)(hi - lo);
    st = flx_allreduce(comm, sums, sums, 3, FLX_FLOAT64, FLX_SUM, FLX_ALGO_AUTO);
    if (st != FLX_OK)
        return st;
    *acc_p = sums[0] / sums[2];
    *loss_p = sums[1] / sums[2];
    return FLX_OK;
}

int main(int argc, char **argv)
{
    train_opts_t o;
    data_set_t train = {0}, test = {0};
    flx_comm_h comm = NULL;
    mlp_t *mlp = NULL;
    size_t dims[MLP_MAX_LAYERS + 1], *order = NULL;
    float *velocity = NULL, *xb = NULL;
    uint8_t *yb = NULL;
    FILE *log = NULL;
    flx_status_t st;
    int rank, size, rc = 1;
    double t_start, bytes_total = 0;
    long step_global = 0;

    if (parse_opts(argc, argv, &o) != 0)
        return 2;
    openblas_set_num_threads(1);
    st = flx_comm_create(NULL, &comm);
    if (st != FLX_OK) {
        fprintf(stderr, "flx-train: cannot create the communicator: %s\n", flx_status_string(st));
        return 1;
    }
    rank = flx_comm_rank(comm);
    size = flx_comm_size(comm);
    if (o.synthetic) {
        st = data_synthetic(o.train_limit ? o.train_limit : 6000, 32, 10, o.seed, &train);
        if (st == FLX_OK)
            st = data_synthetic(2000, 32, 10, o.seed + 1000, &test);
    } else {
        st = data_load_idx(o.data_dir, "train", &train);
        if (st == FLX_OK)
            st = data_load_idx(o.data_dir, "t10k", &test);
        if (st == FLX_OK && o.train_limit && o.train_limit < train.n)
            train.n = o.train_limit;
    }
    if (st != FLX_OK) {
        fprintf(stderr, "flx-train: rank %d: no data: %s\n", rank, flx_status_string(st));
        goto out;
    }
    dims[0] = train.dim;
    for (int i = 0; i < o.nhidden; i++)
        dims[i + 1] = o.hidden[i];
    dims[o.nhidden + 1] = (size_t)train.classes;
    st = mlp_create(dims, o.nhidden + 1, o.batch > 256 ? o.batch : 256, o.seed, &mlp);
    if (st != FLX_OK) {
        fprintf(stderr, "flx-train: cannot build the model: %s\n", flx_status_string(st));
        goto out;
    }
    /* the gradient lives as long as the run: registered once (ib) */
    st = flx_mem_register(comm, mlp->grads, mlp->nparams * sizeof(float));
    if (st != FLX_OK) {
        fprintf(stderr, "flx-train: cannot register the gradient buffer: %s\n",
                flx_status_string(st));
        goto out;
    }
    velocity = calloc(mlp->nparams, sizeof(float));
    order = malloc(train.n * sizeof(size_t));
    xb = malloc(o.batch * train.dim * sizeof(float));
    yb = malloc(o.batch);
    if (velocity == NULL || order == NULL || xb == NULL || yb == NULL) {
        fprintf(stderr, "flx-train: out of memory\n");
        goto out;
    }
    if (rank == 0 && o.log_path) {
        log = fopen(o.log_path, "w");
        if (log == NULL) {
            fprintf(stderr, "flx-train: cannot write %s: %s\n", o.log_path, strerror(errno));
            goto out;
        }
        fprintf(log, "step,epoch,time_s,loss,collective,algorithm,kept_fraction,bytes,"
                     "select_s,comm_s,compute_s,gain,critical\n");
    }
    if (rank == 0)
        printf("flx-train: %d ranks over %s, %s: %zu train / %zu test examples, MLP %zu",
               size, flx_comm_net_name(comm), o.synthetic ? "synthetic task" : o.data_dir,
               train.n, test.n, dims[0]);
    for (int l = 1; rank == 0 && l <= o.nhidden + 1; l++)
        printf("-%zu", dims[l]);
    if (rank == 0)
        printf(" (%zu parameters), batch %zu per rank\n", mlp->nparams, o.batch);

    t_start = flx_time_now();
    for (int epoch = 0; epoch < o.epochs; epoch++) {
        size_t steps = train.n / (o.batch * (size_t)size);
        double lr = o.lr, loss_sum = 0, t_epoch = flx_time_now(), comm_time = 0, acc, tloss;
        size_t correct = 0, seen = 0;
        flx_algo_t algo = flx_allreduce_algo(comm, mlp->nparams, FLX_FLOAT32);

        if (o.epochs >= 4 && epoch >= o.epochs / 2)
            lr *= 0.1;
        if (o.epochs >= 4 && epoch >= o.epochs * 3 / 4)
            lr *= 0.1;
        if (o.max_steps > 0 && steps > (size_t)o.max_steps)
            steps = (size_t)o.max_steps;
        shuffle(order, train.n, o.seed * 1000003u + (uint64_t)epoch);
        if (o.algo != FLX_ALGO_AUTO)
            algo = o.algo;
        for (size_t s = 0; s < steps; s++, step_global++) {
            double t0 = flx_time_now(), t1, t2;
            size_t c;
            float loss;

            for (size_t i = 0; i < o.batch; i++) {
                size_t ex = order[(s * (size_t)size + (size_t)rank) * o.batch + i];
                memcpy(xb + i * train.dim, train.x + ex * train.dim, train.dim * sizeof(float));
                yb[i] = train.y[ex];
            }
            loss = mlp_train_batch(mlp, xb, yb, o.batch, &c);
            t1 = flx_time_now();
            st = flx_allreduce(comm, mlp->grads, mlp->grads, mlp->nparams, FLX_FLOAT32, FLX_AVG,
                               o.algo);
            if (st != FLX_OK) {
                fprintf(stderr, "flx-train: rank %d: gradient allreduce failed at step %ld: %s\n",
                        rank, step_global, flx_status_string(st));
                goto out;
            }
            t2 = flx_time_now();
            for (size_t i = 0; i < mlp->nparams; i++) {
                float g = mlp->grads[i] + (float)o.weight_decay * mlp->params[i];
                velocity[i] = (float)o.momentum * velocity[i] + g;
                mlp->params[i] -= (float)lr * velocity[i];
            }
            loss_sum += loss;
            correct += c;
            seen += o.batch;
            comm_time += t2 - t1;
            bytes_total += size > 1 ? 2.0 * (size - 1) / size * (double)mlp->nparams * 4 : 0;
            if (log)
                fprintf(log, "%ld,%d,%.6f,%.5f,allreduce,%s,1,%.0f,0,%.6f,%.6f,1,0\n",
                        step_global, epoch + 1, t2 - t_start, loss, flx_algo_name(algo),
                        size > 1 ? 2.0 * (size - 1) / size * (double)mlp->nparams * 4 : 0.0,
                        t2 - t1, t1 - t0);
        }
        st = evaluate(comm, mlp, &test, &acc, &tloss);
        if (st != FLX_OK) {
            fprintf(stderr, "flx-train: rank %d: evaluation failed: %s\n", rank,
                    flx_status_string(st));
            goto out;
        }
        if (rank == 0) {
            double dt = flx_time_now() - t_epoch;
            printf("epoch %d/%d  loss %.4f  train-acc %.2f%%  test-acc %.2f%%  "
                   "images/s %.0f  comm %.0f%%  bytes/rank %.1f MB  lr %.4g  algo %s\n",
                   epoch + 1, o.epochs, steps ? loss_sum / (double)steps : 0.0,
                   seen ? 100.0 * (double)correct / (double)seen : 0.0, 100.0 * acc,
                   (double)(seen * (size_t)size) / dt, dt > 0 ? 100.0 * comm_time / dt : 0.0,
                   bytes_total / 1e6, lr, flx_algo_name(algo));
            fflush(stdout);
        }
    }
    if (rank == 0)
        printf("flx-train: done in %.1f s\n", flx_time_now() - t_start);
    rc = 0;
out:
    if (log)
        fclose(log);
    free(velocity);
    free(order);
    free(xb);
    free(yb);
    if (mlp && comm)
        flx_mem_deregister(comm, mlp->grads);
    mlp_destroy(mlp);
    data_free(&train);
    data_free(&test);
    flx_comm_destroy(comm);
    return rc;
}
