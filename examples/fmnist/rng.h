/*
 * rng.h - the example's small deterministic PRNG: xoshiro256** seeded through
 * splitmix64. The weights are drawn from it (mlp.c); the sample order comes from
 * Tide's elastic sampler (tide_sampler_*), which uses the same generator.
 */
#ifndef FM_RNG_H
#define FM_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} fm_rng_t;

void fm_rng_seed(fm_rng_t *rng, uint64_t seed);
uint64_t fm_rng_next(fm_rng_t *rng);
/* Uniform in [0, bound) without modulo bias; bound must be > 0. */
uint64_t fm_rng_below(fm_rng_t *rng, uint64_t bound);
/* Uniform float in [0, 1), from the top 24 bits. */
float fm_rng_float(fm_rng_t *rng);

#endif /* FM_RNG_H */
