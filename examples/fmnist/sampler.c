/*
 * sampler.c - epoch permutations from (seed, epoch) and per-rank slices of the
 * fixed global batch. See sampler.h for the promise this keeps.
 */
#include "sampler.h"

#include <stdlib.h>
#include <string.h>

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

/* The epoch's permutation depends on (seed, epoch) only: a Fisher-Yates shuffle of
 * the identity driven by a generator seeded from both. */
static void permute(fm_sampler_t *s, uint64_t epoch)
{
    fm_rng_t rng;
    uint64_t mix = s->seed;
    uint64_t key = splitmix64(&mix) ^ (epoch * 0xd1342543de82ef95ULL + 0x632be59bd9b4e019ULL);
    fm_rng_seed(&rng, key);
    for (size_t i = 0; i < s->n_samples; i++)
        s->perm[i] = (uint32_t)i;
    for (size_t i = s->n_samples - 1; i > 0; i--) {
        size_t j = (size_t)fm_rng_below(&rng, (uint64_t)i + 1);
        uint32_t t = s->perm[i];
        s->perm[i] = s->perm[j];
        s->perm[j] = t;
    }
    s->perm_epoch = epoch;
}

int fm_sampler_init(fm_sampler_t *s, size_t n_samples, size_t batch, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    if (n_samples == 0 || batch == 0 || n_samples > UINT32_MAX) return -1;
    s->perm = malloc(n_samples * sizeof *s->perm);
    if (!s->perm) return -1;
    s->n_samples = n_samples;
    s->batch = batch;
    s->seed = seed;
    permute(s, 0);
    return 0;
}

void fm_sampler_free(fm_sampler_t *s)
{
    free(s->perm);
    s->perm = NULL;
}

size_t fm_sampler_steps_per_epoch(const fm_sampler_t *s)
{
    return (s->n_samples + s->batch - 1) / s->batch;
}

void fm_sampler_seek(fm_sampler_t *s, fm_cursor_t c)
{
    size_t steps = fm_sampler_steps_per_epoch(s);
    if (c.step >= steps) {
        c.epoch += c.step / steps;
        c.step %= steps;
    }
    s->cursor = c;
    if (s->perm_epoch != c.epoch) permute(s, c.epoch);
}

void fm_slice(size_t global, int rank, int size, size_t *begin, size_t *count)
{
    if (size <= 0 || rank < 0 || rank >= size) {
        *begin = 0;
        *count = 0;
        return;
    }
    size_t b = global * (size_t)rank / (size_t)size;
    size_t e = global * ((size_t)rank + 1) / (size_t)size;
    *begin = b;
    *count = e - b;
}

void fm_sampler_batch(const fm_sampler_t *s, int rank, int size, uint32_t *idx, size_t *count,
                      size_t *global)
{
    size_t start = (size_t)s->cursor.step * s->batch;
    size_t g = s->n_samples - start < s->batch ? s->n_samples - start : s->batch;
    size_t b, n;
    fm_slice(g, rank, size, &b, &n);
    memcpy(idx, s->perm + start + b, n * sizeof *idx);
    *count = n;
    *global = g;
}

void fm_sampler_advance(fm_sampler_t *s)
{
    fm_cursor_t c = s->cursor;
    c.step++;
    fm_sampler_seek(s, c);
}
