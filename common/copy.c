/* copy.c -- bulk copies with streaming stores (see copy.h). */
#include "common/copy.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx"))) static void copy_stream_avx(char *d, const char *s, size_t n)
{
    size_t head = (size_t)(-(uintptr_t)d & 31), i = 0;

    head = head < n ? head : n;
    memcpy(d, s, head); /* the streaming stores need a 32-byte aligned dst */
    d += head;
    s += head;
    n -= head;
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
        __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        _mm256_stream_si256((__m256i *)(d + i), a);
        _mm256_stream_si256((__m256i *)(d + i + 32), b);
        _mm256_stream_si256((__m256i *)(d + i + 64), c);
        _mm256_stream_si256((__m256i *)(d + i + 96), e);
    }
    _mm_sfence(); /* the streamed stores are ordered before any later store */
    memcpy(d + i, s + i, n - i);
}

static int have_avx(void) { return __builtin_cpu_supports("avx"); }
#else
static int have_avx(void) { return 0; }
#endif

void flx_copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    if (have_avx()) {
        copy_stream_avx(dst, src, n);
        return;
    }
#endif
    memcpy(dst, src, n);
}

size_t flx_copy_stream_min(void)
{
    long l2;

    if (!have_avx())
        return SIZE_MAX;
#ifdef _SC_LEVEL2_CACHE_SIZE
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#else
    l2 = 0;
#endif
    return l2 > 0 ? (size_t)l2 : (size_t)1 << 20;
}
