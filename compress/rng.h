/* rng.h -- the compression layer's deterministic generator (splitmix64).
 *
 * Same seed, same numbers on every rank and every machine: random-k derives
 * one stream per (seed, step) so that all ranks draw the same index set,
 * QSGD derives one per (seed, rank, step) for its stochastic rounding, the
 * approximate top-k samples with its own stream.  State is a value; no
 * globals. */
#ifndef FLX_COMPRESS_RNG_H
#define FLX_COMPRESS_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s;
} cmp_rng_t;

/* A stream for (seed, a, b): distinct (a, b) give independent streams. */
static inline void cmp_rng_seed(cmp_rng_t *r, uint64_t seed, uint64_t a, uint64_t b)
{
    uint64_t z = seed ^ (a * 0xd1b54a32d192ed03ULL) ^ (b * 0x8cb92ba72f3d8dd7ULL);

    z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdULL;
    z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ULL;
    r->s = z ^ (z >> 33);
}

static inline uint64_t cmp_rng_next(cmp_rng_t *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound), bound >= 1, unbiased (Lemire's multiply-shift with
 * rejection). */
static inline uint64_t cmp_rng_below(cmp_rng_t *r, uint64_t bound)
{
    unsigned __int128 m = (unsigned __int128)cmp_rng_next(r) * bound;
    uint64_t lo = (uint64_t)m;

    if (lo < bound) {
        uint64_t thresh = -bound % bound;
        while (lo < thresh) {
            m = (unsigned __int128)cmp_rng_next(r) * bound;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* Uniform float in [0, 1) with 24 random bits. */
static inline float cmp_rng_unit(cmp_rng_t *r)
{
    return (float)(cmp_rng_next(r) >> 40) * 0x1.0p-24f;
}

/* Standard normal (Box-Muller), for PowerSGD's initial Q. */
static inline float cmp_rng_normal(cmp_rng_t *r)
{
    double u1 = ((double)(cmp_rng_next(r) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(cmp_rng_next(r) >> 11) * 0x1.0p-53;

    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
