/* rng.h -- small deterministic generator (splitmix64) for initialisation,
 * shuffling and synthetic data: same seed, same numbers, everywhere. */
#ifndef FLX_TRAINER_RNG_H
#define FLX_TRAINER_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s;
} rng_t;

static inline void rng_seed(rng_t *r, uint64_t seed) { r->s = seed * 0x9e3779b97f4a7c15ULL + 1; }

static inline uint64_t rng_next(rng_t *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static inline double rng_uniform(rng_t *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

static inline float rng_normal(rng_t *r)
{
    double u1 = rng_uniform(r) + 1e-300, u2 = rng_uniform(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
