/* data.c -- IDX loader (plain or gzip, inflated with zlib) and the synthetic task. */
#include "trainer/data.h"
#include "trainer/rng.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAX_BYTES (1u << 30) /* larger data than this is not Fashion-MNIST's kind */

/* An IDX file as it is, or gzip-compressed (one or more members), read
 * with inflate directly: a member counts only once inflate has checked its
 * trailer (CRC and length), which gzread skips when the data ends exactly
 * where the caller stops asking, so a cut trailer read as a good file. */
typedef struct {
    FILE *fp;
    int gz;                  /* gzip: inflated; else read as it is          */
    int ended;               /* gz: the last member ended, trailer checked  */
    const char *err;         /* why the last read came short, NULL: the end */
    z_stream zs;
    unsigned char in[1 << 16];
} idx_in_t;

/* open path, else (only if path does not exist) path.gz; -1 (errno set) if
 * neither opens, or what opens is not a regular file (a FIFO would block
 * the open until a writer came, a device or a directory reads no file:
 * errno EINVAL); fills the name tried */
static int idx_open(idx_in_t *s, const char *dir, const char *name, char *path, size_t len)
{
    struct stat sb;
    int c0, c1, fd;

    memset(s, 0, sizeof(*s));
    snprintf(path, len, "%s/%s", dir, name);
    if (access(path, F_OK) != 0 && errno == ENOENT)
        snprintf(path, len, "%s/%s.gz", dir, name);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: no wait for a writer */
    if (fd < 0)
        return -1;
    if (fstat(fd, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ||
        (s->fp = fdopen(fd, "rb")) == NULL) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    c0 = getc(s->fp);
    c1 = getc(s->fp);
    rewind(s->fp);
    s->gz = c0 == 0x1f && c1 == 0x8b;
    s->ended = 1; /* nothing begun yet */
    if (s->gz && inflateInit2(&s->zs, 15 + 16) != Z_OK) { /* gzip only */
        fclose(s->fp);
        s->fp = NULL; /* the caller tells a failed open by it */
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

static void idx_close(idx_in_t *s)
{
    if (s->gz)
        inflateEnd(&s->zs);
    fclose(s->fp);
}

/* Up to len bytes; fewer only at the end of the input (s->err NULL: a
 * clean end) or on an error (s->err says what). */
static size_t idx_in_read(idx_in_t *s, void *buf, size_t len)
{
    size_t got = 0;

    s->err = NULL;
    if (!s->gz) {
        got = fread(buf, 1, len, s->fp);
        if (got < len && ferror(s->fp))
            s->err = strerror(errno);
        return got;
    }
    s->zs.next_out = buf;
    s->zs.avail_out = (uInt)len;
    while (s->zs.avail_out > 0) {
        int ret;
        if (s->zs.avail_in == 0) {
            size_t n = fread(s->in, 1, sizeof(s->in), s->fp);
            if (n == 0) {
                s->err = ferror(s->fp) ? strerror(errno)
                         : s->ended ? NULL : "unexpected end of file";
                break;
            }
            s->zs.next_in = s->in;
            s->zs.avail_in = (uInt)n;
        }
        if (s->ended) { /* a member begins: another gzip header, or junk */
            if (s->zs.next_in[0] != 0x1f) {
                s->err = "data after the end of the gzip stream";
                break;
            }
            inflateReset(&s->zs);
            s->ended = 0;
        }
        ret = inflate(&s->zs, Z_NO_FLUSH);
        if (ret == Z_STREAM_END) {
            s->ended = 1;
        } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
            s->err = ret == Z_DATA_ERROR ? "corrupt gzip data"
                     : ret == Z_MEM_ERROR ? "out of memory" : "zlib error";
            break;
        }
    }
    return len - s->zs.avail_out;
}

/* what went wrong in a read that came short */
static const char *idx_in_error(const idx_in_t *s)
{
    return s->err ? s->err : "unexpected end of file";
}

static int read_be32(idx_in_t *s, uint32_t *v_p)
{
    uint8_t b[4];

    if (idx_in_read(s, b, 4) != 4)
        return -1;
    *v_p = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    return 0;
}

/* Read an IDX file of unsigned bytes with ndim dimensions. */
static flx_status_t idx_read(const char *dir, const char *name, int ndim, uint32_t *dims,
                             uint8_t **data_p, char *path, size_t plen)
{
    idx_in_t *f = malloc(sizeof(*f));
    uint32_t magic = 0;
    size_t total = 1, got;
    uint8_t *data, extra;

    if (f == NULL) {
        flx_error(TRAIN, -1, "%s/%s: no memory to read it", dir, name);
        return FLX_ERR_NO_MEMORY;
    }
    if (idx_open(f, dir, name, path, plen) != 0 && errno == EINVAL) {
        flx_error(TRAIN, -1, "cannot read %s: not a regular file (a FIFO, a device or a "
                  "directory)", path);
        free(f);
        return FLX_ERR_IO;
    } else if (f->fp == NULL) {
        flx_error(TRAIN, -1, "cannot open %s: %m (install dataset-fashion-mnist or "
                  "pass --data DIR)", path);
        free(f);
        return FLX_ERR_IO;
    }
    if (read_be32(f, &magic) != 0) {
        flx_error(TRAIN, -1, "%s: cannot read the IDX header: %s", path, idx_in_error(f));
        goto err_close;
    }
    if (magic != (0x00000800u | (uint32_t)ndim)) {
        flx_error(TRAIN, -1, "%s: not an IDX file of %d-dimensional unsigned bytes "
                  "(magic 0x%08x)", path, ndim, magic);
        goto err_close;
    }
    for (int i = 0; i < ndim; i++) {
        if (read_be32(f, &dims[i]) != 0 || dims[i] == 0 || dims[i] > (1u << 24)) {
            flx_error(TRAIN, -1, "%s: bad or missing dimension %d", path, i);
            goto err_close;
        }
        if (total > IDX_MAX_BYTES / dims[i]) { /* also keeps the product from wrapping */
            flx_error(TRAIN, -1, "%s: its dimensions make more than %u bytes of data", path,
                      IDX_MAX_BYTES);
            goto err_close;
        }
        total *= dims[i];
    }
    data = malloc(total);
    if (data == NULL) {
        flx_error(TRAIN, -1, "%s: no memory for its %zu data bytes", path, total);
        idx_close(f);
        free(f);
        return FLX_ERR_NO_MEMORY;
    }
    got = idx_in_read(f, data, total);
    if (got != total) {
        flx_error(TRAIN, -1, "%s: %s after %zu of %zu data bytes", path, idx_in_error(f), got,
                  total);
        free(data);
        goto err_close;
    }
    /* and then the end: a gzip stream checked to its trailer, nothing after */
    if (idx_in_read(f, &extra, 1) != 0 || f->err != NULL) {
        flx_error(TRAIN, -1, "%s: %s after its %zu data bytes", path,
                  f->err ? f->err : "more data than its header gives (or a damaged file)",
                  total);
        free(data);
        goto err_close;
    }
    idx_close(f);
    free(f);
    *data_p = data;
    return FLX_OK;

err_close:
    idx_close(f);
    free(f);
    return FLX_ERR_IO;
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
    set.rows = idims[1];
    set.cols = idims[2];
    set.dim = set.rows * set.cols;
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
    data_set_t set = {.n = n, .dim = dim, .rows = 1, .cols = dim, .classes = classes};
    float *centers = malloc((size_t)classes * dim * sizeof(float));
    rng_t rng;

    for (size_t side = 1; side * side <= dim; side++)
        if (side * side == dim) /* a square count of features reads as an image */
            set.rows = set.cols = side;

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
