/* copy.h -- bulk copies of buffers larger than a core's cache. */
#ifndef FLX_COMMON_COPY_H
#define FLX_COMMON_COPY_H

#include <stddef.h>

/* Copies n bytes from src to dst (they must not overlap), writing dst with
 * non-temporal stores where the CPU has AVX, else with memcpy.  The stores
 * go to memory without reading each line in first, and leave the caches to
 * what the caller reads next: for a destination that is not read again soon. */
void flx_copy_stream(void *dst, const void *src, size_t n);

/* Bytes above which a copy is worth streaming: this core's L2 cache
 * (sysconf, 1 MiB where it does not say), or SIZE_MAX where the CPU has no
 * streaming stores. */
size_t flx_copy_stream_min(void);

#endif
