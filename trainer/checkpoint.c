/* checkpoint.c -- flx-train's model files (checkpoint.h). */
#include "trainer/checkpoint.h"
#include "common/dtype.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_MAGIC "FLXMODEL"
#define CKPT_VERSION 1u
#define CKPT_DESC_MAX 255u

/* the weights go out and come in as the host holds them: little-endian hosts only */
static int ckpt_host_ok(const char *path, const char *verb, int rank)
{
    const uint16_t one = 1;

    if (*(const uint8_t *)&one == 1)
        return 1;
    flx_error(TRAIN, rank, "cannot %s %s: model files are little-endian and this host is not",
              verb, path);
    return 0;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* CRC-32 of the weights, in blocks: zlib counts in uInt */
static uint32_t ckpt_crc(const float *w, size_t n)
{
    const unsigned char *p = (const unsigned char *)w;
    size_t left = n * sizeof(float);
    uLong crc = crc32(0L, Z_NULL, 0);

    while (left > 0) {
        uInt m = left > (1u << 30) ? 1u << 30 : (uInt)left;
        crc = crc32(crc, p, m);
        p += m;
        left -= m;
    }
    return (uint32_t)crc;
}

/* a new file in path's folder, path.XXXXXX (mkstemp: its own name, never
 * an existing file or link), the name in *tmp_p (malloc'd); -1 with one
 * line logged */
static int ckpt_tmp_open(const char *path, char **tmp_p, int rank)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 8);
    int fd = -1;

    *tmp_p = NULL;
    if (tmp != NULL) {
        memcpy(tmp, path, plen);
        memcpy(tmp + plen, ".XXXXXX", 8);
        fd = mkstemp(tmp);
    } else {
        errno = ENOMEM;
    }
    if (fd < 0) {
        flx_error(TRAIN, rank, "cannot write %s (a file beside it: %s.XXXXXX): %m", path, path);
        free(tmp);
        return -1;
    }
    *tmp_p = tmp;
    return fd;
}

/* The file a save to path replaces: path, or, where path is a symbolic
 * link, the file it leads to (written through, as a shell's redirection
 * does; replacing the link left its target old).  A malloc'd name, or NULL
 * (said: no memory, or a link that leads nowhere). */
static char *ckpt_target(const char *path, int rank)
{
    struct stat sb;
    char *target;

    if (lstat(path, &sb) != 0 || !S_ISLNK(sb.st_mode)) {
        if ((target = strdup(path)) == NULL)
            flx_error(TRAIN, rank, "cannot write %s: no memory", path);
    } else if ((target = realpath(path, NULL)) == NULL) {
        flx_error(TRAIN, rank, "cannot write %s: a symbolic link that leads to no file (%m)",
                  path);
    }
    return target;
}

flx_status_t ckpt_check_writable(const char *path, int rank)
{
    struct stat sb;
    char *tmp, *target;
    int fd;

    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        flx_error(TRAIN, rank, "cannot write %s: it is not a regular file (a directory, a FIFO "
                  "or a device)", path);
        return FLX_ERR_IO;
    }
    if ((target = ckpt_target(path, rank)) == NULL)
        return FLX_ERR_IO;
    fd = ckpt_tmp_open(target, &tmp, rank);
    free(target);
    if (fd < 0)
        return FLX_ERR_IO;
    close(fd);
    unlink(tmp);
    free(tmp);
    return FLX_OK;
}

/* the mode path has, or a new file's (0666 less the umask) */
static mode_t ckpt_mode(const char *path)
{
    struct stat sb;
    mode_t mask;

    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
        return sb.st_mode & 07777;
    mask = umask(0);
    umask(mask);
    return 0666 & ~mask;
}

flx_status_t ckpt_save(const char *path, const char *desc, const float *w, size_t n, int rank)
{
    size_t len = strlen(desc);
    uint8_t head[16 + CKPT_DESC_MAX + 8], tail[4];
    size_t bad;
    char *tmp, *target;
    FILE *f;
    int fd, ok;

    if (!ckpt_host_ok(path, "write", rank))
        return FLX_ERR_IO;
    if (len == 0 || len > CKPT_DESC_MAX) {
        flx_error(TRAIN, rank, "cannot write %s: the model's description is %zu bytes (1 to %u)",
                  path, len, CKPT_DESC_MAX);
        return FLX_ERR_INVALID_ARG;
    }
    if ((bad = flx_first_nonfinite(w, n)) < n) { /* the file it would replace stays */
        flx_error(TRAIN, rank, "cannot write %s: weight %zu of %zu is %g (the model diverged)",
                  path, bad, n, (double)w[bad]);
        return FLX_ERR_INVALID_ARG;
    }
    memcpy(head, CKPT_MAGIC, 8);
    put_u32(head + 8, CKPT_VERSION);
    put_u32(head + 12, (uint32_t)len);
    memcpy(head + 16, desc, len);
    put_u64(head + 16 + len, (uint64_t)n);
    put_u32(tail, ckpt_crc(w, n));
    if ((target = ckpt_target(path, rank)) == NULL)
        return FLX_ERR_IO;
    fd = ckpt_tmp_open(target, &tmp, rank);
    if (fd < 0) {
        free(target);
        return FLX_ERR_IO;
    }
    f = fdopen(fd, "wb");
    ok = f != NULL && fchmod(fd, ckpt_mode(target)) == 0 &&
         fwrite(head, 1, 24 + len, f) == 24 + len &&
         fwrite(w, sizeof(float), n, f) == n && fwrite(tail, 1, 4, f) == 4 && fflush(f) == 0 &&
         fsync(fd) == 0;
    if (!ok) {
        int err = errno;
        if (f != NULL)
            fclose(f);
        else
            close(fd);
        errno = err;
        flx_error(TRAIN, rank, "cannot write %s (through %s): %m", path, tmp);
        goto err_unlink_tmp;
    }
    if (fclose(f) != 0 || rename(tmp, target) != 0) {
        flx_error(TRAIN, rank, "cannot write %s (through %s): %m", path, tmp);
        goto err_unlink_tmp;
    }
    free(tmp);
    free(target);
    return FLX_OK;

err_unlink_tmp:
    unlink(tmp);
    free(tmp);
    free(target);
    return FLX_ERR_IO;
}

/* the header of an open file, checked against desc and n */
static flx_status_t ckpt_read_head(FILE *f, const char *path, const char *desc, size_t n,
                                   int rank)
{
    uint8_t head[16 + CKPT_DESC_MAX + 8];
    uint32_t version, len;
    uint64_t count;

    if (fread(head, 1, 16, f) != 16 || memcmp(head, CKPT_MAGIC, 8) != 0) {
        flx_error(TRAIN, rank, "%s: not a flx-train model file (no %s header%s)", path,
                  CKPT_MAGIC, ferror(f) ? ": read error" : "");
        return ferror(f) ? FLX_ERR_IO : FLX_ERR_INVALID_ARG;
    }
    version = get_u32(head + 8);
    len = get_u32(head + 12);
    if (version != CKPT_VERSION) {
        flx_error(TRAIN, rank, "%s: model file version %u, this flx-train reads %u", path,
                  version, CKPT_VERSION);
        return FLX_ERR_INVALID_ARG;
    }
    if (len == 0 || len > CKPT_DESC_MAX || fread(head + 16, 1, len + 8, f) != len + 8) {
        flx_error(TRAIN, rank, "%s: damaged model file (its description is cut off)", path);
        return FLX_ERR_INVALID_ARG;
    }
    if (len != strlen(desc) || memcmp(head + 16, desc, len) != 0) {
        flx_error(TRAIN, rank, "%s holds a %.*s, not this run's %s (--model and the data "
                  "must match the run that saved it)", path, (int)len, (const char *)head + 16,
                  desc);
        return FLX_ERR_INVALID_ARG;
    }
    count = get_u64(head + 16 + len);
    if (count != (uint64_t)n) {
        flx_error(TRAIN, rank, "%s: %llu parameters, this run's %s has %zu", path,
                  (unsigned long long)count, desc, n);
        return FLX_ERR_INVALID_ARG;
    }
    return FLX_OK;
}

flx_status_t ckpt_load(const char *path, const char *desc, float *w, size_t n, int rank)
{
    struct stat sb;
    uint8_t tail[4];
    float *buf;
    FILE *f;
    int fd;
    size_t bad;
    flx_status_t st;

    if (!ckpt_host_ok(path, "read", rank))
        return FLX_ERR_IO;
    /* O_NONBLOCK: the open of a FIFO would wait for a writer */
    fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        flx_error(TRAIN, rank, "cannot open %s: %m", path);
        return FLX_ERR_IO;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (f = fdopen(fd, "rb")) == NULL) {
        flx_error(TRAIN, rank, "cannot read %s: not a regular file (a FIFO, a device or a "
                  "directory)", path);
        close(fd);
        return FLX_ERR_IO;
    }
    st = ckpt_read_head(f, path, desc, n, rank);
    if (st != FLX_OK) {
        fclose(f);
        return st;
    }
    buf = malloc(n * sizeof(float));
    if (buf == NULL) {
        flx_error(TRAIN, rank, "%s: no memory for its %zu weights", path, n);
        fclose(f);
        return FLX_ERR_NO_MEMORY;
    }
    if (fread(buf, sizeof(float), n, f) != n || fread(tail, 1, 4, f) != 4) {
        flx_error(TRAIN, rank, "%s: %s", path, ferror(f) ? "read error" : "damaged model file "
                  "(shorter than its header says)");
        st = ferror(f) ? FLX_ERR_IO : FLX_ERR_INVALID_ARG;
    } else if (fgetc(f) != EOF || ferror(f)) {
        flx_error(TRAIN, rank, "%s: %s", path, ferror(f) ? "read error" : "damaged model file "
                  "(longer than its header says)");
        st = ferror(f) ? FLX_ERR_IO : FLX_ERR_INVALID_ARG;
    } else if (get_u32(tail) != ckpt_crc(buf, n)) {
        flx_error(TRAIN, rank, "%s: damaged model file (the weights' CRC-32 does not match)",
                  path);
        st = FLX_ERR_INVALID_ARG;
    } else if ((bad = flx_first_nonfinite(buf, n)) < n) {
        /* a file written by other means (flx-train saves no such model):
         * training from it would stop at the first sync with a line about
         * the gradient, and --epochs 0 would score it without a word */
        flx_error(TRAIN, rank, "%s: weight %zu of %zu is %g: a model file holds finite weights "
                  "only", path, bad, n, (double)buf[bad]);
        st = FLX_ERR_INVALID_ARG;
    }
    fclose(f);
    if (st == FLX_OK)
        memcpy(w, buf, n * sizeof(float));
    free(buf);
    return st;
}
