/* sampler.c - the elastic sampler: epoch permutations from (seed, epoch) and
 * per-rank slices of the fixed global batch (see tide.h). Ported from the
 * Fashion-MNIST example's sampler, with the same generator and shuffle, so a
 * given (seed, epoch) yields the same order there and here.
 *
 * Only the cursor is state; the permutation is derived from it, regenerated
 * lazily when the epoch it holds is not the cursor's (after a seek, an advance
 * into the next epoch, or a restore of the cursor by the elastic sync). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "elastic/comm.h"
#include "tide.h"

typedef struct {
    uint64_t epoch;
    uint64_t step; /* global batches already taken in this epoch */
} cursor_t;

struct tide_sampler {
    cursor_t cursor; /* registered as elastic state: must stay plain data */
    uint64_t n;
    uint64_t batch;
    uint64_t seed;
    uint64_t perm_epoch;
    int perm_valid;
    uint32_t *perm;
    uint64_t batches;     /* tide_sampler_batch calls, for the progress report */
    uint64_t last_global; /* the size of the global batch of the last one */
};

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

typedef struct {
    uint64_t s[4];
} rng_t;

static void rng_seed(rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rng_next(rng_t *r)
{
    uint64_t *s = r->s;
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

static uint64_t rng_below(rng_t *r, uint64_t bound)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do
        x = rng_next(r);
    while (x >= limit);
    return x % bound;
}

/* A Fisher-Yates shuffle of the identity, driven by (seed, epoch) alone. */
static void permute(tide_sampler_t *s, uint64_t epoch)
{
    rng_t rng;
    uint64_t mix = s->seed;
    uint64_t key = splitmix64(&mix) ^ (epoch * 0xd1342543de82ef95ULL + 0x632be59bd9b4e019ULL);
    rng_seed(&rng, key);
    for (uint64_t i = 0; i < s->n; i++) s->perm[i] = (uint32_t)i;
    for (uint64_t i = s->n - 1; i > 0; i--) {
        uint64_t j = rng_below(&rng, i + 1);
        uint32_t t = s->perm[i];
        s->perm[i] = s->perm[j];
        s->perm[j] = t;
    }
    s->perm_epoch = epoch;
    s->perm_valid = 1;
}

int tide_sampler_create(uint64_t n_samples, uint64_t batch, uint64_t seed, tide_sampler_t **out)
{
    if (!out || n_samples == 0 || batch == 0 || n_samples > UINT32_MAX) return TIDE_EINVAL;
    tide_sampler_t *s = calloc(1, sizeof *s);
    if (!s) return TIDE_ENOMEM;
    s->perm = malloc(n_samples * sizeof *s->perm);
    if (!s->perm) {
        free(s);
        return TIDE_ENOMEM;
    }
    s->n = n_samples;
    s->batch = batch;
    s->seed = seed;
    *out = s;
    return TIDE_OK;
}

void tide_sampler_destroy(tide_sampler_t *s)
{
    if (!s) return;
    free(s->perm);
    free(s);
}

int tide_sampler_register(tide_comm_t *comm, tide_sampler_t *s, const char *name)
{
    if (!s) return TIDE_EINVAL;
    int rc = tide_state_register(comm, name ? name : "tide.sampler", &s->cursor, sizeof s->cursor);
    if (rc == TIDE_OK) comm->sampler = s; /* its batches count the samples of each step */
    return rc;
}

uint64_t tide_sampler_steps_per_epoch(const tide_sampler_t *s)
{
    return s ? (s->n + s->batch - 1) / s->batch : 0;
}

void tide_sampler_cursor(const tide_sampler_t *s, uint64_t *epoch, uint64_t *step)
{
    if (epoch) *epoch = s ? s->cursor.epoch : 0;
    if (step) *step = s ? s->cursor.step : 0;
}

void tide_sampler_seek(tide_sampler_t *s, uint64_t epoch, uint64_t step)
{
    if (!s) return;
    uint64_t steps = tide_sampler_steps_per_epoch(s);
    epoch += step / steps;
    step %= steps;
    s->cursor.epoch = epoch;
    s->cursor.step = step;
}

void tide_sampler_slice(size_t global, int rank, int size, size_t *begin, size_t *count)
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

int tide_sampler_batch(tide_sampler_t *s, int rank, int size, uint32_t *idx, size_t cap,
                       size_t *count, size_t *global)
{
    if (!s || !count || !global || rank < 0 || size <= 0 || rank >= size) return TIDE_EINVAL;
    /* A restored cursor may be out of range (another member's sampler with other
     * constants, or a corrupted state): normalize it rather than read past perm. */
    tide_sampler_seek(s, s->cursor.epoch, s->cursor.step);
    if (!s->perm_valid || s->perm_epoch != s->cursor.epoch) permute(s, s->cursor.epoch);
    uint64_t start = s->cursor.step * s->batch;
    uint64_t g = s->n - start < s->batch ? s->n - start : s->batch;
    size_t b, n;
    tide_sampler_slice((size_t)g, rank, size, &b, &n);
    if (n > cap || (n && !idx)) return TIDE_EINVAL;
    if (n) memcpy(idx, s->perm + start + b, n * sizeof *idx);
    *count = n;
    *global = (size_t)g;
    s->batches++;
    s->last_global = g;
    return TIDE_OK;
}

void tide__sampler_progress(const tide_sampler_t *s, uint64_t *batches, uint64_t *last_global)
{
    *batches = s ? s->batches : 0;
    *last_global = s ? s->last_global : 0;
}

void tide_sampler_advance(tide_sampler_t *s)
{
    if (s) tide_sampler_seek(s, s->cursor.epoch, s->cursor.step + 1);
}
