/*
 * sampler.h - the fixed-global-batch sampler of the Fashion-MNIST example.
 *
 * The order in which an epoch visits the training set is a permutation drawn from
 * (seed, epoch) alone, and each step takes the next global batch of B samples from
 * it. A rank takes its contiguous slice of that global batch. Neither the order nor
 * the global batches depend on the world size, so a run that changes size between
 * steps sees exactly the samples an undisturbed run sees (DESIGN.md, promise P6).
 *
 * The whole position is the cursor (epoch, step within the epoch): two integers
 * that can be registered with Tide's elastic state and restored with
 * fm_sampler_seek. Everything else in fm_sampler_t is derived from the cursor and
 * the constants given to fm_sampler_init.
 *
 * This module never talks to Tide and never allocates after fm_sampler_init.
 */
#ifndef FM_SAMPLER_H
#define FM_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* A small deterministic PRNG: xoshiro256** seeded through splitmix64. */
typedef struct {
    uint64_t s[4];
} fm_rng_t;

void fm_rng_seed(fm_rng_t *rng, uint64_t seed);
uint64_t fm_rng_next(fm_rng_t *rng);
/* Uniform in [0, bound) without modulo bias; bound must be > 0. */
uint64_t fm_rng_below(fm_rng_t *rng, uint64_t bound);
/* Uniform float in [0, 1), from the top 24 bits. */
float fm_rng_float(fm_rng_t *rng);

/* The position of the sampler; plain data, safe to copy, broadcast or checkpoint. */
typedef struct {
    uint64_t epoch;
    uint64_t step; /* global batches already taken in this epoch */
} fm_cursor_t;

typedef struct {
    size_t n_samples; /* size of the training set */
    size_t batch;     /* the global batch B */
    uint64_t seed;
    fm_cursor_t cursor;
    uint64_t perm_epoch; /* the epoch perm currently holds */
    uint32_t *perm;      /* n_samples entries, owned */
} fm_sampler_t;

/* Returns 0, or -1 when n_samples or batch is 0, or n_samples exceeds UINT32_MAX,
 * or allocation fails. Starts at cursor (0, 0). Free with fm_sampler_free. */
int fm_sampler_init(fm_sampler_t *s, size_t n_samples, size_t batch, uint64_t seed);
void fm_sampler_free(fm_sampler_t *s);

/* Global batches per epoch: ceil(n_samples / batch). The last one of an epoch is
 * short when batch does not divide n_samples, so that every sample is used exactly
 * once per epoch. */
size_t fm_sampler_steps_per_epoch(const fm_sampler_t *s);

/* Moves to an arbitrary cursor (for a restored state); step is clamped into the
 * epoch. Regenerates the permutation if the epoch changed. */
void fm_sampler_seek(fm_sampler_t *s, fm_cursor_t c);

/* The slice of a global batch of `global` samples that rank `rank` of `size` takes:
 * [floor(rank*global/size), floor((rank+1)*global/size)). Sizes differ by at most
 * one, and a rank may get nothing when global < size. */
void fm_slice(size_t global, int rank, int size, size_t *begin, size_t *count);

/* The current global batch: *global is its size (B, or less at the end of an
 * epoch), and this rank's sample indices are written to idx (room for at least
 * `batch` entries), *count of them. Does not move the cursor. */
void fm_sampler_batch(const fm_sampler_t *s, int rank, int size, uint32_t *idx, size_t *count,
                      size_t *global);

/* Moves the cursor one step on, into the next epoch after the last batch. */
void fm_sampler_advance(fm_sampler_t *s);

#endif /* FM_SAMPLER_H */
