/* data.c -- IDX loader (gzip via zlib) and the synthetic task. */
#include "trainer/data.h"
#include "trainer/rng.h"
#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAX_BYTES (1u << 30) /* larger data than this is not Fashion-MNIST's kind */

/* open path, else (only if path does not exist) path.gz; returns NULL and
 * fills the name tried */
static gzFile idx_open(const char *dir, const char *name, char *path, size_t len)
{
    gzFile f;

    snprintf(path, len, "%s/%s", dir, name);
    if (access(path, F_OK) != 0 && errno == ENOENT)
        snprintf(path, len, "%s/%s.gz", dir, name);
    f = gzopen(path, "rb");
    return f;
}

/* what went wrong in the last gzread (gzerror's own text repeats the path) */
static const char *idx_gz_error(gzFile f)
{
    int err = Z_OK;

    (void)gzerror(f, &err);
    switch (err) {
    case Z_OK:
    case Z_BUF_ERROR: return "unexpected end of file";
    case Z_DATA_ERROR: return "corrupt gzip data";
    case Z_MEM_ERROR: return "out of memory";
    case Z_ERRNO: return strerror(errno);
    default: return "zlib error";
    }
}

static int read_be32(gzFile f, uint32_t *v_p)
{
    uint8_t b[4];

    if (gzread(f, b, 4) != 4)
        return -1;
    *v_p = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    return 0;
}

/* Read an IDX file of unsigned bytes with ndim dimensions. */
static flx_status_t idx_read(const char *dir, const char *name, int ndim, uint32_t *dims,
                             uint8_t **data_p, char *path, size_t plen)
{
    gzFile f = idx_open(dir, name, path, plen);
    uint32_t magic = 0;
    size_t total = 1;
    uint8_t *data;
    int got;

    if (f == NULL) {
        flx_error(TRAIN, -1, "cannot open %s: %m (install dataset-fashion-mnist or "
                  "pass --data DIR)", path);
        return FLX_ERR_IO;
    }
    if (read_be32(f, &magic) != 0) {
        flx_error(TRAIN, -1, "%s: cannot read the IDX header: %s", path, idx_gz_error(f));
        gzclose(f);
        return FLX_ERR_IO;
    }
    if (magic != (0x00000800u | (uint32_t)ndim)) {
        flx_error(TRAIN, -1, "%s: not an IDX file of %d-dimensional unsigned bytes "
                  "(magic 0x%08x)", path, ndim, magic);
        gzclose(f);
        return FLX_ERR_IO;
    }
    for (int i = 0; i < ndim; i++) {
        if (read_be32(f, &dims[i]) != 0 || dims[i] == 0 || dims[i] > (1u << 24)) {
            flx_error(TRAIN, -1, "%s: bad or missing dimension %d", path, i);
            gzclose(f);
            return FLX_ERR_IO;
        }
        if (total > IDX_MAX_BYTES / dims[i]) { /* also keeps the product from wrapping */
            flx_error(TRAIN, -1, "%s: its dimensions make more than %u bytes of data", path,
                      IDX_MAX_BYTES);
            gzclose(f);
            return FLX_ERR_IO;
        }
        total *= dims[i];
    }
    data = malloc(total);
    if (data == NULL) {
        flx_error(TRAIN, -1, "%s: no memory for its %zu data bytes", path, total);
        gzclose(f);
        return FLX_ERR_NO_MEMORY;
    }
    got = gzread(f, data, (unsigned)total);
    if (got < 0 || (size_t)got != total) {
        flx_error(TRAIN, -1, "%s: %s after %d of %zu data bytes", path, idx_gz_error(f),
                  got < 0 ? 0 : got, total);
        gzclose(f);
        free(data);
        return FLX_ERR_IO;
    }
    gzclose(f);
    *data_p = data;
    return FLX_OK;
}

flx_status_t data_load_idx(const char *dir, const char *prefix, data_set_t *set_p)
{
    char name[128], ipath[512], lpath[512];
    uint32_t idims[3], ldims[1];
    uint8_t *pix, *lab;
    data_set_t set = {0};
    flx_status_t st;

    snprintf(name, sizeof(name), "%s-images-idx3-ubyte", prefix);
    st = idx_read(dir, name, 3, idims, &pix, ipath, sizeof(ipath));
    if (st != FLX_OK)
        return st;
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", prefix);
    st = idx_read(dir, name, 1, ldims, &lab, lpath, sizeof(lpath));
    if (st != FLX_OK)
        goto err_free_pix;
    if (ldims[0] != idims[0]) {
        flx_error(TRAIN, -1, "%s has %u labels but %s has %u images", lpath, ldims[0], ipath,
                  idims[0]);
        st = FLX_ERR_IO;
        goto err_free_lab;
    }
    set.n = idims[0];
    set.dim = (size_t)idims[1] * idims[2];
    set.classes = 10;
    for (size_t i = 0; i < set.n; i++) {
        if (lab[i] >= set.classes) {
            flx_error(TRAIN, -1, "%s: label %u of example %zu is not in 0..9", lpath, lab[i], i);
            st = FLX_ERR_IO;
            goto err_free_lab;
        }
    }
    set.x = malloc(set.n * set.dim * sizeof(float));
    if (set.x == NULL) {
        flx_error(TRAIN, -1, "%s: no memory for %zu images as floats", ipath, set.n);
        st = FLX_ERR_NO_MEMORY;
        goto err_free_lab;
    }
    for (size_t i = 0; i < set.n * set.dim; i++)
        set.x[i] = pix[i] * (1.0f / 255.0f);
    set.y = lab;
    free(pix);
    *set_p = set;
    return FLX_OK;

err_free_lab:
    free(lab);
err_free_pix:
    free(pix);
    return st;
}

flx_status_t data_synthetic(size_t n, size_t dim, int classes, uint64_t seed,
                            data_set_t *set_p)
{
    data_set_t set = {.n = n, .dim = dim, .classes = classes};
    float *centers = malloc((size_t)classes * dim * sizeof(float));
    rng_t rng;

    set.x = malloc(n * dim * sizeof(float));
    set.y = malloc(n);
    if (centers == NULL || set.x == NULL || set.y == NULL) {
        free(centers);
        data_free(&set);
        return FLX_ERR_NO_MEMORY;
    }
    rng_seed(&rng, 0x5eedULL); /* the same task for every seed */
    for (size_t i = 0; i < (size_t)classes * dim; i++)
        centers[i] = rng_normal(&rng);
    rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++) {
        int c = (int)(rng_next(&rng) % (uint64_t)classes);
        set.y[i] = (uint8_t)c;
        for (size_t d = 0; d < dim; d++)
            set.x[i * dim + d] = centers[(size_t)c * dim + d] + 1.6f * rng_normal(&rng);
    }
    free(centers);
    *set_p = set;
    return FLX_OK;
}

void data_free(data_set_t *set)
{
    free(set->x);
    free(set->y);
    set->x = NULL;
    set->y = NULL;
}
