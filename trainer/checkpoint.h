/* checkpoint.h -- flx-train's model files (--save, --load): a model's
 * weights with the description of the model they belong to.
 *
 * Layout, little-endian:
 *   0        "FLXMODEL"                 8 bytes
 *   8        version, 1                 uint32
 *   12       L, description length      uint32 (1 to 255)
 *   16       description                L bytes, nn_describe's, no NUL
 *   16 + L   n, parameters              uint64
 *   24 + L   the weights                n float32
 *   ...      CRC-32 (zlib) of the weights  uint32, the last 4 bytes
 * Weights only: the optimiser's velocity and the controller's state are
 * not in it. */
#ifndef FLX_TRAINER_CHECKPOINT_H
#define FLX_TRAINER_CHECKPOINT_H

#include "flexcoll.h"
#include <stddef.h>

/* Write w[0, n) with desc to path: to a new file beside it (path.XXXXXX),
 * renamed over path once complete and synced, so an existing file is
 * replaced whole or not at all (and keeps its mode).  FLX_ERR_IO (one line
 * naming the file and the system's reason), FLX_ERR_INVALID_ARG (desc
 * empty or longer than 255 bytes, or a weight NaN or infinite: the file
 * it would replace stays); FLX_OK.  rank: for the log line. */
flx_status_t ckpt_save(const char *path, const char *desc, const float *w, size_t n, int rank);

/* Whether ckpt_save could create its file beside path (a file created and
 * removed): FLX_ERR_IO with one line, or FLX_OK.  For a check before
 * training rather than after it. */
flx_status_t ckpt_check_writable(const char *path, int rank);

/* Read path into w[0, n), which is written only when the whole file is
 * good: a regular file (a FIFO is refused, not waited on), its magic,
 * version, description (must equal desc), n, length and CRC.  FLX_ERR_IO
 * (cannot read it), FLX_ERR_INVALID_ARG (not a model file, another model,
 * damaged), FLX_ERR_NO_MEMORY; one line says which and names the file.
 * FLX_OK. */
flx_status_t ckpt_load(const char *path, const char *desc, float *w, size_t n, int rank);

#endif
