/*
 * rng.c - see rng.h.
 */
#include "rng.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void fm_rng_seed(fm_rng_t *rng, uint64_t seed)
{
    /* splitmix64 never yields four zero words, which xoshiro could not leave. */
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&seed);
}

uint64_t fm_rng_next(fm_rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t fm_rng_below(fm_rng_t *rng, uint64_t bound)
{
    /* Reject the values above the largest multiple of bound, so every residue is
     * equally likely; at most half of the draws are rejected. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do
        x = fm_rng_next(rng);
    while (x >= limit);
    return x % bound;
}

float fm_rng_float(fm_rng_t *rng)
{
    return (float)(fm_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}
