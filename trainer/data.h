/* data.h -- training data: MNIST-format IDX files (gzip or plain, read with
 * zlib) such as Debian's Fashion-MNIST, and a synthetic task for tests. */
#ifndef FLX_TRAINER_DATA_H
#define FLX_TRAINER_DATA_H

#include "flexcoll.h"

#include <stddef.h>
#include <stdint.h>

#define FLX_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct {
    size_t n;          /* examples                */
    size_t dim;        /* features per example    */
    size_t rows, cols; /* image shape: rows x cols = dim (1 x dim: not an image) */
    int classes;
    float *x;          /* n x dim, row-major      */
    uint8_t *y;        /* n labels                */
} data_set_t;

/* Load "<dir>/<prefix>-images-idx3-ubyte[.gz]" and the labels file.  A
 * missing, truncated or inconsistent file is FLX_ERR_IO (no memory:
 * FLX_ERR_NO_MEMORY) with one log line naming the file and the problem. */
flx_status_t data_load_idx(const char *dir, const char *prefix, data_set_t *set_p);
/* A learnable synthetic task: n points of dim features in classes Gaussian
 * clusters, deterministic in seed. */
flx_status_t data_synthetic(size_t n, size_t dim, int classes, uint64_t seed,
                            data_set_t *set_p);
void data_free(data_set_t *set);

#endif
