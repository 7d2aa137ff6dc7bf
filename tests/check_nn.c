/* check_nn.c -- the trainer's networks (trainer/nn.c), in one process:
 *
 *   specs         the layouts, descriptions and segments of good specs; bad
 *                 specs and shapes are FLX_ERR_INVALID_ARG with exactly one
 *                 log line and *nn_p untouched
 *   memory        an allocation that fails is FLX_ERR_NO_MEMORY (the
 *                 sanitizer build also sees that nothing leaks)
 *   forward       nn_loss equals a plain double-precision reference of the
 *                 documented layers (weights [out][in] and [k][c][5][5],
 *                 'same' padding, CHW flattening) on non-square inputs
 *   gradients     every parameter of small MLPs and CNNs (several channels,
 *                 non-square images) against central finite differences of
 *                 nn_loss, entries whose step crosses a ReLU/pool kink aside
 *   determinism   same seed, bitwise the same weights; He statistics;
 *                 two passes, bitwise the same gradients
 *   callback      each segment once, last to first, its gradient final at
 *                 the call: a callback that overwrites its segment finds its
 *                 values there afterwards, and the rest is unchanged
 *   learning      a small MLP and a small CNN fit separable tasks by SGD
 *   checkpoint    a model file holds finite weights only: ckpt_save refuses
 *                 NaN, +Inf and -Inf (FLX_ERR_INVALID_ARG, one line naming
 *                 the file and the weight) and leaves the file it would
 *                 replace as it was, with no temporary file beside it
 */
#include "trainer/checkpoint.h"
#include "trainer/nn.h"
#include "trainer/rng.h"

#include <check.h>
#include <cblas.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#ifdef FLX_HAVE_ASAN
/* let a huge allocation fail (NULL) instead of aborting the sanitizer
 * build; visible, or the runtime does not find it under -fvisibility=hidden */
__attribute__((visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:max_allocation_size_mb=1024";
}
#endif

#include "tests/require.h"

/* ---- helpers --------------------------------------------------------------- */

static void fill_normal(float *x, size_t n, uint64_t seed, float scale)
{
    rng_t rng;

    rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * rng_normal(&rng);
}

static void fill_labels(uint8_t *y, size_t n, int classes, uint64_t seed)
{
    rng_t rng;

    rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++)
        y[i] = (uint8_t)(rng_next(&rng) % (uint64_t)classes);
}

/* Adds N(0, 0.1^2) to every parameter: biases leave zero, so a dropped or
 * misplaced bias shows. */
static void jitter(float *p, size_t n, uint64_t seed)
{
    rng_t rng;

    rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++)
        p[i] += 0.1f * rng_normal(&rng);
}

static nn_t *make(const char *spec, size_t c, size_t h, size_t w, int classes, size_t max_batch,
                  uint64_t seed)
{
    nn_t *nn = NULL;
    flx_status_t st = nn_create(spec, c, h, w, classes, max_batch, seed, &nn);

    REQUIRE_MSG(st == FLX_OK && nn != NULL, "nn_create(%s, %zux%zux%zu): %s", spec, c, h, w,
                flx_status_string(st));
    return nn;
}

/* Sends stderr to a temporary file until stderr_end; *saved_p keeps the real one. */
static FILE *stderr_begin(int *saved_p)
{
    FILE *tmp = tmpfile();

    REQUIRE(tmp != NULL);
    fflush(stderr);
    *saved_p = dup(2);
    REQUIRE(*saved_p >= 0 && dup2(fileno(tmp), 2) == 2);
    return tmp;
}

/* Restores stderr; returns the lines written since stderr_begin, the first
 * of them in line (NUL-terminated, no newline) unless line is NULL. */
static int stderr_end(FILE *tmp, int saved, char *line, size_t line_len)
{
    int lines = 0, ch;
    size_t k = 0;

    fflush(stderr);
    REQUIRE(dup2(saved, 2) == 2);
    close(saved);
    rewind(tmp);
    while ((ch = fgetc(tmp)) != EOF) {
        if (line != NULL && lines == 0 && ch != '\n' && k + 1 < line_len)
            line[k++] = (char)ch;
        lines += ch == '\n';
    }
    if (line != NULL)
        line[k] = '\0';
    fclose(tmp);
    return lines;
}

/* The lines written to stderr while st = nn_create(...) runs. */
static int create_logged(const char *spec, size_t c, size_t h, size_t w, int classes,
                         size_t max_batch, flx_status_t *st_p, nn_t **nn_p)
{
    int saved;
    FILE *tmp = stderr_begin(&saved);

    *st_p = nn_create(spec, c, h, w, classes, max_batch, 1, nn_p);
    return stderr_end(tmp, saved, NULL, 0);
}

/* ---- specs ------------------------------------------------------------------ */

START_TEST(test_specs)
{
    static const struct {
        const char *spec;
        size_t c, h, w;
        int classes;
        const char *desc;
        size_t nparams;
        int nsegs;
        const char *names[4];
        size_t lens[4];
    } good[] = {
        {"mlp", 1, 28, 28, 10, "MLP 784-256-256-10", 269322, 3, {"fc1", "fc2", "fc3"},
         {784 * 256 + 256, 256 * 256 + 256, 256 * 10 + 10}},
        {"mlp:7,5", 3, 2, 2, 3, "MLP 12-7-5-3", 7 * 12 + 7 + 5 * 7 + 5 + 3 * 5 + 3, 3,
         {"fc1", "fc2", "fc3"}, {91, 40, 18}},
        {"mlp:1024,1024", 1, 28, 28, 10, "MLP 784-1024-1024-10",
         784 * 1024 + 1024 + 1024 * 1024 + 1024 + 10250, 3, {"fc1", "fc2", "fc3"},
         {784 * 1024 + 1024, 1024 * 1024 + 1024, 10250}},
        {"cnn", 1, 28, 28, 10, "CNN 1x28x28 conv16-pool-conv32-pool-fc128-10", 215370, 4,
         {"conv1", "conv2", "fc1", "fc2"}, {16 * 25 + 16, 32 * 16 * 25 + 32, 32 * 49 * 128 + 128,
                                            1290}},
        {"cnn:2,3,5", 2, 8, 12, 4, "CNN 2x8x12 conv2-pool-conv3-pool-fc5-4",
         102 + 153 + 3 * 2 * 3 * 5 + 5 + 5 * 4 + 4, 4, {"conv1", "conv2", "fc1", "fc2"},
         {102, 153, 95, 24}},
    };

    for (size_t t = 0; t < sizeof(good) / sizeof(good[0]); t++) {
        nn_t *nn = make(good[t].spec, good[t].c, good[t].h, good[t].w, good[t].classes, 8, 1);
        size_t off = 0;

        REQUIRE_MSG(strcmp(nn_describe(nn), good[t].desc) == 0, "%s: '%s'", good[t].spec,
                    nn_describe(nn));
        REQUIRE_MSG(nn_nparams(nn) == good[t].nparams, "%s: %zu parameters", good[t].spec,
                    nn_nparams(nn));
        REQUIRE(nn_nsegments(nn) == good[t].nsegs);
        for (int s = 0; s < nn_nsegments(nn); s++) {
            nn_segment_t sg = nn_segment(nn, s);
            REQUIRE_MSG(sg.off == off && sg.len == good[t].lens[s] &&
                            strcmp(sg.name, good[t].names[s]) == 0,
                        "%s segment %d: %s %zu+%zu", good[t].spec, s, sg.name, sg.off, sg.len);
            off += sg.len;
        }
        REQUIRE(off == nn_nparams(nn));
        REQUIRE(nn_segment(nn, -1).name == NULL && nn_segment(nn, nn_nsegments(nn)).len == 0);
        REQUIRE(nn_params(nn) != NULL && nn_grads(nn) != NULL);
        nn_destroy(nn);
    }
    {   /* eight hidden layers are the most */
        nn_t *nn = make("mlp:3,3,3,3,3,3,3,3", 1, 1, 4, 2, 4, 1);
        REQUIRE(nn_nsegments(nn) == 9 && strcmp(nn_segment(nn, 8).name, "fc9") == 0);
        nn_destroy(nn);
    }
    nn_destroy(NULL);
}
END_TEST

START_TEST(test_bad_specs)
{
    static const struct {
        const char *spec;
        size_t c, h, w;
        int classes;
        size_t max_batch;
    } bad[] = {
        {NULL, 1, 8, 8, 10, 4},          {"", 1, 8, 8, 10, 4},
        {"rnn", 1, 8, 8, 10, 4},         {"MLP", 1, 8, 8, 10, 4},
        {"mlpx", 1, 8, 8, 10, 4},        {"mlp,3", 1, 8, 8, 10, 4},
        {"mlp:", 1, 8, 8, 10, 4},        {"mlp:0", 1, 8, 8, 10, 4},
        {"mlp:4,0", 1, 8, 8, 10, 4},     {"mlp:4,", 1, 8, 8, 10, 4},
        {"mlp:,4", 1, 8, 8, 10, 4},      {"mlp:4,,4", 1, 8, 8, 10, 4},
        {"mlp:-4", 1, 8, 8, 10, 4},      {"mlp:+4", 1, 8, 8, 10, 4},
        {"mlp: 4", 1, 8, 8, 10, 4},      {"mlp:4x", 1, 8, 8, 10, 4},
        {"mlp:4.5", 1, 8, 8, 10, 4},     {"mlp:99999999999999999999999", 1, 8, 8, 10, 4},
        {"mlp:2000000", 1, 8, 8, 10, 4}, {"mlp:1,1,1,1,1,1,1,1,1", 1, 8, 8, 10, 4},
        {"cnn:", 1, 8, 8, 10, 4},        {"cnn:4,4", 1, 8, 8, 10, 4},
        {"cnn:4,4,4,4", 1, 8, 8, 10, 4}, {"cnn:4,0,4", 1, 8, 8, 10, 4},
        {"cnn", 1, 6, 8, 10, 4},         {"cnn", 1, 8, 10, 10, 4},
        {"cnn", 1, 2, 2, 10, 4},         {"mlp", 0, 8, 8, 10, 4},
        {"mlp", 1, 0, 8, 10, 4},         {"mlp", 1, 8, 8, 0, 4},
        {"mlp", 1, 8, 8, 257, 4},        {"mlp", 1, 8, 8, 10, 0},
        /* a GEMM dimension over INT_MAX */
        {"mlp:1048576", 1, 1, 4096, 10, 4},
        {"cnn", 1, 1024, 1024, 10, 4096},
    };
    nn_t *sentinel = (nn_t *)&sentinel, *nn;

    for (size_t t = 0; t < sizeof(bad) / sizeof(bad[0]); t++) {
        flx_status_t st;
        int lines;

        nn = sentinel;
        lines = create_logged(bad[t].spec, bad[t].c, bad[t].h, bad[t].w, bad[t].classes,
                              bad[t].max_batch, &st, &nn);
        REQUIRE_MSG(st == FLX_ERR_INVALID_ARG && nn == sentinel && lines == 1,
                    "'%s' %zux%zux%zu classes %d batch %zu: %s, %d log lines",
                    bad[t].spec ? bad[t].spec : "(null)", bad[t].c, bad[t].h, bad[t].w,
                    bad[t].classes, bad[t].max_batch, flx_status_string(st), lines);
    }
    REQUIRE(nn_create("mlp", 1, 8, 8, 10, 4, 1, NULL) == FLX_ERR_INVALID_ARG);
}
END_TEST

/* Allocations that cannot be had: NO_MEMORY, *nn_p untouched.  The first
 * fails at the parameters, the second at a conv layer's columns after
 * everything before them was allocated. */
START_TEST(test_no_memory)
{
    static const struct {
        const char *spec;
        size_t c, h, w, max_batch;
    } big[] = {
        {"mlp:32768", 1, 1, 32768, 4},         /* 4 GB of parameters            */
        {"cnn", 1, 28, 28, 20000},             /* 6 GB of conv2 columns         */
    };
    nn_t *sentinel = (nn_t *)&sentinel, *nn;

#ifndef FLX_HAVE_ASAN
    struct rlimit rl, old;

    /* the soft limit only, so it can be put back */
    REQUIRE(getrlimit(RLIMIT_AS, &old) == 0);
    rl = old;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)3 << 30)
        rl.rlim_cur = (rlim_t)3 << 30;
    REQUIRE(setrlimit(RLIMIT_AS, &rl) == 0);
#endif
    for (size_t t = 0; t < sizeof(big) / sizeof(big[0]); t++) {
        flx_status_t st;

        nn = sentinel;
        st = nn_create(big[t].spec, big[t].c, big[t].h, big[t].w, 10, big[t].max_batch, 1, &nn);
        REQUIRE_MSG(st == FLX_ERR_NO_MEMORY && nn == sentinel, "%s: %s", big[t].spec,
                    flx_status_string(st));
    }
#ifndef FLX_HAVE_ASAN
    REQUIRE(setrlimit(RLIMIT_AS, &old) == 0);
#endif
}
END_TEST

/* ---- a reference forward pass, in double -------------------------------- */

typedef struct {
    size_t c, h, w;
    double *v;
} ref_t;

static ref_t ref_alloc(size_t c, size_t h, size_t w)
{
    ref_t r = {c, h, w, calloc(c * h * w, sizeof(double))};

    REQUIRE(r.v != NULL);
    return r;
}

/* 'same' 5x5 convolution, weights [k][c][ky][kx] then bias[k] */
static ref_t ref_conv(ref_t in, const float *p, size_t k)
{
    ref_t out = ref_alloc(k, in.h, in.w);
    const float *bias = p + k * in.c * 25;

    for (size_t o = 0; o < k; o++)
        for (size_t y = 0; y < in.h; y++)
            for (size_t x = 0; x < in.w; x++) {
                double s = bias[o];
                for (size_t c = 0; c < in.c; c++)
                    for (int ky = 0; ky < 5; ky++)
                        for (int kx = 0; kx < 5; kx++) {
                            long iy = (long)y + ky - 2, ix = (long)x + kx - 2;
                            if (iy < 0 || ix < 0 || iy >= (long)in.h || ix >= (long)in.w)
                                continue;
                            s += (double)p[((o * in.c + c) * 5 + (size_t)ky) * 5 + (size_t)kx] *
                                 in.v[(c * in.h + (size_t)iy) * in.w + (size_t)ix];
                        }
                out.v[(o * in.h + y) * in.w + x] = s;
            }
    free(in.v);
    return out;
}

static ref_t ref_pool(ref_t in)
{
    ref_t out = ref_alloc(in.c, in.h / 2, in.w / 2);

    for (size_t c = 0; c < in.c; c++)
        for (size_t y = 0; y < out.h; y++)
            for (size_t x = 0; x < out.w; x++) {
                const double *p = in.v + (c * in.h + 2 * y) * in.w + 2 * x;
                out.v[(c * out.h + y) * out.w + x] = fmax(fmax(p[0], p[1]),
                                                          fmax(p[in.w], p[in.w + 1]));
            }
    free(in.v);
    return out;
}

/* dense, weights [out][in] (input flattened C, H, W) then bias[out] */
static ref_t ref_dense(ref_t in, const float *p, size_t out_n)
{
    size_t n = in.c * in.h * in.w;
    ref_t out = ref_alloc(out_n, 1, 1);

    for (size_t o = 0; o < out_n; o++) {
        double s = p[out_n * n + o];
        for (size_t i = 0; i < n; i++)
            s += (double)p[o * n + i] * in.v[i];
        out.v[o] = s;
    }
    free(in.v);
    return out;
}

static void ref_relu(ref_t r)
{
    for (size_t i = 0; i < r.c * r.h * r.w; i++)
        r.v[i] = r.v[i] > 0 ? r.v[i] : 0;
}

/* mean loss; widths: mlp hidden widths, or cnn C1, C2, F */
static double ref_loss(nn_t *nn, int cnn, const size_t *widths, int nw, size_t c, size_t h,
                       size_t w, int classes, const float *x, const uint8_t *y, size_t batch)
{
    const float *p = nn_params(nn);
    double loss = 0;

    for (size_t b = 0; b < batch; b++) {
        ref_t a = ref_alloc(c, h, w);
        double mx = -INFINITY, sum = 0;
        int seg = 0;

        for (size_t i = 0; i < c * h * w; i++)
            a.v[i] = x[b * c * h * w + i];
        if (cnn) {
            a = ref_conv(a, p + nn_segment(nn, seg++).off, widths[0]);
            ref_relu(a);
            a = ref_pool(a);
            a = ref_conv(a, p + nn_segment(nn, seg++).off, widths[1]);
            ref_relu(a);
            a = ref_pool(a);
            a = ref_dense(a, p + nn_segment(nn, seg++).off, widths[2]);
            ref_relu(a);
        } else {
            for (int l = 0; l < nw; l++) {
                a = ref_dense(a, p + nn_segment(nn, seg++).off, widths[l]);
                ref_relu(a);
            }
        }
        a = ref_dense(a, p + nn_segment(nn, seg).off, (size_t)classes);
        for (int k = 0; k < classes; k++)
            mx = fmax(mx, a.v[k]);
        for (int k = 0; k < classes; k++)
            sum += exp(a.v[k] - mx);
        loss += log(sum) + mx - a.v[y[b]];
        free(a.v);
    }
    return loss / (double)batch;
}

START_TEST(test_forward_reference)
{
    static const struct {
        const char *spec;
        int cnn, nw;
        size_t widths[3], c, h, w;
        int classes;
    } nets[] = {
        {"mlp:7,5", 0, 2, {7, 5}, 3, 2, 2, 3},
        {"mlp:9", 0, 1, {9}, 1, 1, 13, 4},
        {"cnn:2,3,5", 1, 3, {2, 3, 5}, 1, 8, 8, 3},
        {"cnn:3,4,6", 1, 3, {3, 4, 6}, 2, 8, 12, 5},
        {"cnn:2,2,4", 1, 3, {2, 2, 4}, 3, 12, 4, 2},
    };
    enum { B = 5 };

    for (size_t t = 0; t < sizeof(nets) / sizeof(nets[0]); t++) {
        size_t n = nets[t].c * nets[t].h * nets[t].w;
        nn_t *nn = make(nets[t].spec, nets[t].c, nets[t].h, nets[t].w, nets[t].classes, B, 7 + t);
        float *x = malloc(B * n * sizeof(float)), *p = nn_params(nn);
        uint8_t y[B];
        double got, want;

        REQUIRE(x != NULL);
        fill_normal(x, B * n, 100 + t, 1.0f);
        fill_labels(y, B, nets[t].classes, 200 + t);
        jitter(p, nn_nparams(nn), 300 + t);
        got = nn_loss(nn, x, y, B);
        want = ref_loss(nn, nets[t].cnn, nets[t].widths, nets[t].nw, nets[t].c, nets[t].h,
                        nets[t].w, nets[t].classes, x, y, B);
        REQUIRE_MSG(fabs(got - want) <= 1e-5 * fabs(want) + 1e-6, "%s: loss %.9g, reference %.9g",
                    nets[t].spec, got, want);
        free(x);
        nn_destroy(nn);
    }
}
END_TEST

/* ---- gradients against finite differences -------------------------------- */

/* Every parameter: g from nn_train_batch against the central difference
 * (L(p+e) - L(p-e)) / 2e of nn_loss.  Per segment, the whole vector must
 * agree to 1 % in norm and each entry to 2 % of itself or 0.5 % of the
 * segment's largest entry; a wrong gradient (transposed, shifted, a missing
 * bias or path) misses by far more.
 *
 * ReLU and max-pooling make the loss piecewise smooth: when p +- e crosses
 * a kink, the central difference means nothing.  That shows as one-sided
 * differences (L(p+e) - L(p)) / e and (L(p) - L(p-e)) / e that disagree by
 * more than the tolerance; such entries are left out, at most 10 % of a
 * segment.  (Whether they disagree depends on the loss only, so a wrong
 * gradient cannot hide there.) */
#define GC_EPS 3e-4f /* relative step: smaller drowns in float rounding, larger hits kinks */
static void grad_check(const char *spec, size_t c, size_t h, size_t w, int classes,
                       size_t batch, uint64_t seed)
{
    nn_t *nn = make(spec, c, h, w, classes, batch, seed);
    size_t n = c * h * w, np = nn_nparams(nn);
    float *x = malloc(batch * n * sizeof(float)), *p = nn_params(nn);
    float *g = malloc(np * sizeof(float));
    double *fd = malloc(np * sizeof(double)), *jump = malloc(np * sizeof(double)), l0;
    uint8_t *y = malloc(batch);

    REQUIRE(x != NULL && g != NULL && fd != NULL && jump != NULL && y != NULL);
    fill_normal(x, batch * n, seed + 1, 1.0f);
    fill_labels(y, batch, classes, seed + 2);
    jitter(p, np, seed + 3);
    REQUIRE(isfinite(nn_train_batch(nn, x, y, batch, NULL, NULL, NULL)));
    memcpy(g, nn_grads(nn), np * sizeof(float));
    l0 = nn_loss(nn, x, y, batch);
    for (size_t i = 0; i < np; i++) {
        float p0 = p[i], eps = GC_EPS * fmaxf(1.0f, fabsf(p0)), up = p0 + eps, down = p0 - eps;
        double lu, ld;

        p[i] = up;
        lu = nn_loss(nn, x, y, batch);
        p[i] = down;
        ld = nn_loss(nn, x, y, batch);
        p[i] = p0;
        fd[i] = (lu - ld) / ((double)up - (double)down);
        jump[i] = fabs((lu - l0) / ((double)up - p0) - (l0 - ld) / ((double)p0 - down));
    }
    for (int s = 0; s < nn_nsegments(nn); s++) {
        nn_segment_t sg = nn_segment(nn, s);
        double diff = 0, norm = 0, big = 0, worst = 0;
        size_t bad = 0, kinks = 0;

        for (size_t i = sg.off; i < sg.off + sg.len; i++)
            big = fmax(big, fabs(fd[i]));
        for (size_t i = sg.off; i < sg.off + sg.len; i++) {
            double e = fabs(g[i] - fd[i]), tol = 2e-2 * fabs(fd[i]) + 5e-3 * big;

            if (jump[i] > tol) {
                kinks++;
                continue;
            }
            norm += fd[i] * fd[i];
            diff += (g[i] - fd[i]) * (g[i] - fd[i]);
            worst = fmax(worst, e / (big > 0 ? big : 1));
            bad += e > tol;
        }
        printf("gradcheck %-10s %zux%zux%zu %-5s %4zu params: |g-fd|/|fd| %.2e, worst entry "
               "%.2e of max, %zu off, %zu at kinks\n", spec, c, h, w, sg.name, sg.len,
               sqrt(diff / (norm > 0 ? norm : 1)), worst, bad, kinks);
        REQUIRE_MSG(norm > 0, "%s %s: the gradient is zero", spec, sg.name);
        REQUIRE_MSG(kinks * 10 <= sg.len, "%s %s: %zu of %zu entries at kinks", spec, sg.name,
                    kinks, sg.len);
        REQUIRE_MSG(sqrt(diff / norm) < 1e-2 && bad == 0,
                    "%s %s: gradient differs from finite differences: relative %.3g, %zu "
                    "entries off", spec, sg.name, sqrt(diff / norm), bad);
    }
    free(y);
    free(jump);
    free(fd);
    free(g);
    free(x);
    nn_destroy(nn);
}

START_TEST(test_grad_mlp)
{
    grad_check("mlp:7,5", 3, 2, 2, 3, 4, 11);
    grad_check("mlp:6", 1, 1, 9, 4, 3, 12);
    grad_check("mlp:5,4,3", 1, 1, 6, 2, 6, 13);
}
END_TEST

START_TEST(test_grad_cnn)
{
    grad_check("cnn:2,3,5", 1, 8, 8, 3, 3, 21);
    grad_check("cnn:2,3,5", 2, 8, 12, 4, 2, 22);
    grad_check("cnn:3,2,4", 3, 12, 4, 3, 2, 23);
}
END_TEST

/* ---- determinism ----------------------------------------------------------- */

START_TEST(test_determinism)
{
    static const char *specs[] = {"mlp:32,16", "cnn:4,6,8"};
    enum { B = 8 };

    for (int t = 0; t < 2; t++) {
        nn_t *a = make(specs[t], 2, 8, 8, 5, B, 42), *b = make(specs[t], 2, 8, 8, 5, B, 42);
        nn_t *d = make(specs[t], 2, 8, 8, 5, B, 43);
        size_t np = nn_nparams(a);
        float x[B * 128], *g = malloc(np * sizeof(float));
        uint8_t y[B];
        size_t ca, cb;
        float la, lb;

        REQUIRE(g != NULL);
        REQUIRE(memcmp(nn_params(a), nn_params(b), np * sizeof(float)) == 0);
        REQUIRE(memcmp(nn_params(a), nn_params(d), np * sizeof(float)) != 0);
        fill_normal(x, B * 128, 5, 1.0f);
        fill_labels(y, B, 5, 6);
        la = nn_train_batch(a, x, y, B, &ca, NULL, NULL);
        memcpy(g, nn_grads(a), np * sizeof(float));
        lb = nn_train_batch(a, x, y, B, &cb, NULL, NULL);
        REQUIRE(la == lb && ca == cb);
        REQUIRE(memcmp(g, nn_grads(a), np * sizeof(float)) == 0);
        lb = nn_train_batch(b, x, y, B, &cb, NULL, NULL);
        REQUIRE(la == lb && ca == cb);
        REQUIRE(memcmp(g, nn_grads(b), np * sizeof(float)) == 0);
        /* the training loss is the forward loss; the count is evaluate's */
        REQUIRE(fabs(nn_loss(a, x, y, B) - la) <= 1e-6 * la);
        REQUIRE(nn_evaluate(a, x, y, B, NULL) == ca);
        free(g);
        nn_destroy(d);
        nn_destroy(b);
        nn_destroy(a);
    }
}
END_TEST

/* He: weights N(0, 2 / fan_in), biases 0. */
START_TEST(test_he_init)
{
    nn_t *nn = make("cnn", 1, 28, 28, 10, 1, 3);
    const float *p = nn_params(nn);
    static const size_t fan_in[4] = {25, 16 * 25, 32 * 49, 128}, outs[4] = {16, 32, 128, 10};

    for (int s = 0; s < 4; s++) {
        nn_segment_t sg = nn_segment(nn, s);
        size_t nw = sg.len - outs[s];
        double sum = 0, sq = 0, sd = sqrt(2.0 / (double)fan_in[s]);

        for (size_t i = 0; i < nw; i++) {
            sum += p[sg.off + i];
            sq += (double)p[sg.off + i] * p[sg.off + i];
        }
        /* 5 standard errors */
        REQUIRE_MSG(fabs(sum / (double)nw) < 5 * sd / sqrt((double)nw) &&
                        fabs(sqrt(sq / (double)nw) / sd - 1) < 5 / sqrt(2.0 * (double)nw),
                    "%s: mean %g, sd %g, want 0, %g", sg.name, sum / (double)nw,
                    sqrt(sq / (double)nw), sd);
        for (size_t i = nw; i < sg.len; i++)
            REQUIRE(p[sg.off + i] == 0);
    }
    nn_destroy(nn);
}
END_TEST

/* nn_evaluate in batches of max_batch equals nn_loss batch by batch; bad
 * batches are refused without touching the gradient. */
START_TEST(test_evaluate_and_bad_batches)
{
    enum { N = 11, MB = 4 };
    nn_t *nn = make("cnn:2,3,5", 1, 8, 8, 3, MB, 9);
    float x[N * 64], *g = nn_grads(nn);
    uint8_t y[N];
    double loss, want = 0;

    fill_normal(x, N * 64, 1, 1.0f);
    fill_labels(y, N, 3, 2);
    for (size_t off = 0; off < N; off += MB) {
        size_t b = N - off < MB ? N - off : MB;
        want += nn_loss(nn, x + off * 64, y + off, b) * (double)b;
    }
    REQUIRE(nn_evaluate(nn, x, y, N, &loss) <= N);
    REQUIRE_MSG(fabs(loss - want) <= 1e-9 * want, "evaluate %.12g, batch by batch %.12g", loss,
                want);
    REQUIRE(nn_evaluate(nn, x, y, 0, &loss) == 0 && loss == 0);

    for (size_t i = 0; i < nn_nparams(nn); i++)
        g[i] = 7;
    REQUIRE(isnan(nn_train_batch(nn, x, y, 0, NULL, NULL, NULL)));
    REQUIRE(isnan(nn_train_batch(nn, x, y, MB + 1, NULL, NULL, NULL)));
    REQUIRE(isnan(nn_train_batch(nn, NULL, y, 1, NULL, NULL, NULL)));
    y[1] = 3;
    REQUIRE(isnan(nn_train_batch(nn, x, y, 2, NULL, NULL, NULL)));
    REQUIRE(isnan(nn_loss(nn, x, y, 2)) && isnan(nn_loss(nn, x, y, MB + 1)));
    REQUIRE(nn_evaluate(nn, x, y, 2, &loss) == 0 && isnan(loss));
    for (size_t i = 0; i < nn_nparams(nn); i++)
        REQUIRE(g[i] == 7);
    nn_destroy(nn);
}
END_TEST

/* ---- the ready callback ---------------------------------------------------- */

typedef struct {
    nn_t *nn;
    int order[16];
    int ncalls;
    float *seen;    /* each segment's gradient at its call */
} ready_log_t;

/* Records the call, keeps the segment's values, and overwrites the segment
 * with a pattern that must survive the rest of backprop. */
static void on_ready(void *ctx, int seg)
{
    ready_log_t *r = ctx;
    nn_segment_t sg = nn_segment(r->nn, seg);
    float *g = nn_grads(r->nn) + sg.off;

    REQUIRE(r->ncalls < 16);
    r->order[r->ncalls++] = seg;
    memcpy(r->seen + sg.off, g, sg.len * sizeof(float));
    for (size_t i = 0; i < sg.len; i++)
        g[i] = -1000.0f - (float)i;
}

START_TEST(test_callback)
{
    static const struct {
        const char *spec;
        size_t c, h, w;
    } nets[] = {{"mlp:16,8,4", 1, 1, 10}, {"cnn:3,4,6", 2, 8, 12}, {"cnn", 1, 28, 28}};
    enum { B = 4 };

    for (size_t t = 0; t < sizeof(nets) / sizeof(nets[0]); t++) {
        nn_t *nn = make(nets[t].spec, nets[t].c, nets[t].h, nets[t].w, 6, B, 17);
        size_t n = nets[t].c * nets[t].h * nets[t].w, np = nn_nparams(nn);
        float *x = malloc(B * n * sizeof(float)), *want = malloc(np * sizeof(float));
        ready_log_t r = {.nn = nn, .seen = calloc(np, sizeof(float))};
        uint8_t y[B];
        int ns = nn_nsegments(nn);

        REQUIRE(x != NULL && want != NULL && r.seen != NULL);
        fill_normal(x, B * n, 8, 1.0f);
        fill_labels(y, B, 6, 9);
        nn_train_batch(nn, x, y, B, NULL, NULL, NULL);
        memcpy(want, nn_grads(nn), np * sizeof(float));
        nn_train_batch(nn, x, y, B, NULL, on_ready, &r);
        REQUIRE_MSG(r.ncalls == ns, "%s: %d calls for %d segments", nets[t].spec, r.ncalls, ns);
        for (int i = 0; i < ns; i++)
            REQUIRE_MSG(r.order[i] == ns - 1 - i, "%s: call %d is segment %d", nets[t].spec, i,
                        r.order[i]);
        /* at its call each segment held its final gradient ... */
        REQUIRE(memcmp(r.seen, want, np * sizeof(float)) == 0);
        /* ... and nothing wrote it afterwards */
        for (int s = 0; s < ns; s++) {
            nn_segment_t sg = nn_segment(nn, s);
            for (size_t i = 0; i < sg.len; i++)
                REQUIRE_MSG(nn_grads(nn)[sg.off + i] == -1000.0f - (float)i,
                            "%s: %s[%zu] written after its callback", nets[t].spec, sg.name, i);
        }
        free(r.seen);
        free(want);
        free(x);
        nn_destroy(nn);
    }
}
END_TEST

/* ---- learning ------------------------------------------------------------- */

/* Plain SGD on batches drawn by gen; the mean loss over a fresh set after. */
typedef void (*gen_fn)(float *x, uint8_t *y, size_t n, rng_t *rng);

static double sgd_fit(nn_t *nn, gen_fn gen, size_t dim, int steps, size_t batch, float lr,
                      double *before_p, double *acc_p)
{
    enum { NTEST = 256 };
    float *x = malloc(NTEST * dim * sizeof(float)), *p = nn_params(nn), *g = nn_grads(nn);
    uint8_t y[NTEST];
    rng_t rng;
    double loss;

    REQUIRE(x != NULL && batch <= NTEST);
    rng_seed(&rng, 1234);
    gen(x, y, NTEST, &rng);
    nn_evaluate(nn, x, y, NTEST, before_p);
    *before_p /= NTEST;
    for (int s = 0; s < steps; s++) {
        gen(x, y, batch, &rng);
        REQUIRE(isfinite(nn_train_batch(nn, x, y, batch, NULL, NULL, NULL)));
        for (size_t i = 0; i < nn_nparams(nn); i++)
            p[i] -= lr * g[i];
    }
    gen(x, y, NTEST, &rng);
    *acc_p = (double)nn_evaluate(nn, x, y, NTEST, &loss) / NTEST;
    free(x);
    return loss / NTEST;
}

/* three Gaussian blobs in 12 dimensions, centres 2 apart per coordinate */
static void gen_blobs(float *x, uint8_t *y, size_t n, rng_t *rng)
{
    static const float centre[3][12] = {
        {1, 1, -1, 1, -1, -1, 1, 1, -1, 1, -1, 1},
        {-1, 1, 1, -1, 1, -1, -1, 1, 1, 1, 1, -1},
        {1, -1, 1, 1, 1, 1, -1, -1, -1, -1, 1, 1},
    };

    for (size_t i = 0; i < n; i++) {
        y[i] = (uint8_t)(rng_next(rng) % 3);
        for (int j = 0; j < 12; j++)
            x[i * 12 + j] = centre[y[i]][j] + 0.5f * rng_normal(rng);
    }
}

/* 8x8 images: a bright horizontal (class 0) or vertical (class 1) bar at a
 * random place, on noise */
static void gen_bars(float *x, uint8_t *y, size_t n, rng_t *rng)
{
    for (size_t i = 0; i < n; i++) {
        float *img = x + i * 64;
        size_t at = rng_next(rng) % 8;

        y[i] = (uint8_t)(rng_next(rng) % 2);
        for (int j = 0; j < 64; j++)
            img[j] = 0.2f * rng_normal(rng);
        for (size_t j = 0; j < 8; j++)
            img[y[i] == 0 ? at * 8 + j : j * 8 + at] += 1.0f;
    }
}

START_TEST(test_learn_mlp)
{
    nn_t *nn = make("mlp:16", 1, 1, 12, 3, 256, 5);
    double before, acc, after = sgd_fit(nn, gen_blobs, 12, 200, 16, 0.1f, &before, &acc);

    printf("learn mlp:16 blobs: loss %.4f -> %.4f, accuracy %.3f\n", before, after, acc);
    REQUIRE_MSG(after < 0.05 && acc >= 0.98, "MLP: loss %.4f -> %.4f, accuracy %.3f", before,
                after, acc);
    nn_destroy(nn);
}
END_TEST

START_TEST(test_learn_cnn)
{
    nn_t *nn = make("cnn:4,4,8", 1, 8, 8, 2, 256, 5);
    double before, acc, after = sgd_fit(nn, gen_bars, 64, 200, 16, 0.05f, &before, &acc);

    printf("learn cnn:4,4,8 bars: loss %.4f -> %.4f, accuracy %.3f\n", before, after, acc);
    REQUIRE_MSG(after < 0.05 && acc >= 0.98, "CNN: loss %.4f -> %.4f, accuracy %.3f", before,
                after, acc);
    nn_destroy(nn);
}
END_TEST

/* ---- checkpoint -------------------------------------------------------------- */

/* The lines written to stderr while *st_p = ckpt_save(...) runs; the first
 * of them in line. */
static int save_logged(const char *path, const float *w, size_t n, flx_status_t *st_p,
                       char *line, size_t line_len)
{
    int saved;
    FILE *tmp = stderr_begin(&saved);

    *st_p = ckpt_save(path, "mlp:4", w, n, 0);
    return stderr_end(tmp, saved, line, line_len);
}

static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    REQUIRE(d != NULL);
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

START_TEST(test_checkpoint)
{
    enum { N = 1000 };
    static float w[N], back[N];
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const size_t at[] = {0, 517, N - 1};
    char dir[] = "/tmp/flx-check-nn.XXXXXX", path[64], line[512], want[128];
    flx_status_t st;

    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/model.bin", dir);
    fill_normal(w, N, 11, 1.0f);
    REQUIRE(save_logged(path, w, N, &st, line, sizeof(line)) == 0 && st == FLX_OK);
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        float keep = w[at[b]];
        int lines;

        w[at[b]] = bad[b];
        lines = save_logged(path, w, N, &st, line, sizeof(line));
        REQUIRE_MSG(st == FLX_ERR_INVALID_ARG, "weight %zu = %g: %s", at[b], (double)bad[b],
                    flx_status_string(st));
        snprintf(want, sizeof(want), "cannot write %s: weight %zu of %d is ", path, at[b], N);
        REQUIRE_MSG(lines == 1 && strstr(line, want) != NULL && strstr(line, "diverged") != NULL,
                    "weight %zu = %g: %d lines, the first '%s'", at[b], (double)bad[b], lines,
                    line);
        w[at[b]] = keep;
        /* the file saved before is whole, and nothing else was left beside it */
        REQUIRE(dir_entries(dir) == 1);
        memset(back, 0, sizeof(back));
        REQUIRE(ckpt_load(path, "mlp:4", back, N, 0) == FLX_OK);
        REQUIRE_MSG(memcmp(back, w, sizeof(w)) == 0, "the model file changed");
    }
    /* and a finite model replaces it */
    w[3] = 42.0f;
    REQUIRE(save_logged(path, w, N, &st, line, sizeof(line)) == 0 && st == FLX_OK);
    REQUIRE(ckpt_load(path, "mlp:4", back, N, 0) == FLX_OK && back[3] == 42.0f);
    REQUIRE(dir_entries(dir) == 1);
    REQUIRE(unlink(path) == 0 && rmdir(dir) == 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nn");
    TCase *tc = tcase_create("local");
    SRunner *sr;
    int failed;

    setvbuf(stdout, NULL, _IOLBF, 0);
    openblas_set_num_threads(1);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_specs);
    tcase_add_test(tc, test_bad_specs);
    tcase_add_test(tc, test_no_memory);
    tcase_add_test(tc, test_forward_reference);
    tcase_add_test(tc, test_grad_mlp);
    tcase_add_test(tc, test_grad_cnn);
    tcase_add_test(tc, test_determinism);
    tcase_add_test(tc, test_he_init);
    tcase_add_test(tc, test_evaluate_and_bad_batches);
    tcase_add_test(tc, test_callback);
    tcase_add_test(tc, test_learn_mlp);
    tcase_add_test(tc, test_learn_cnn);
    tcase_add_test(tc, test_checkpoint);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
