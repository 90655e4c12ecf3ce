/*
 * selftest.c - checks of the example's math that need no job and no dataset: the
 * promises of Tide's elastic sampler (a permutation per epoch, slices that tile the global batch
 * for any world size, cursors that seek), the MLP's backward pass against finite
 * differences, and the data-parallel identity the trainer relies on: the sum over
 * ranks of each rank's gradient (scaled by 1/B) equals the one-process gradient of
 * the same global batch, for every world size.
 *
 * Exit status 0 when every check passes; each failure is printed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"
#include "rng.h"
#include "tide.h"

static int failures = 0;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static void test_rng(void)
{
    fm_rng_t a, b;
    fm_rng_seed(&a, 42);
    fm_rng_seed(&b, 42);
    int same = 1;
    for (int i = 0; i < 1000; i++)
        same &= fm_rng_next(&a) == fm_rng_next(&b);
    CHECK(same, "the same seed gives different streams");
    unsigned hist[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint64_t v = fm_rng_below(&a, 7);
        CHECK(v < 7, "fm_rng_below(7) gave %llu", (unsigned long long)v);
        if (v < 7) hist[v]++;
        float f = fm_rng_float(&a);
        CHECK(f >= 0.0f && f < 1.0f, "fm_rng_float gave %g", f);
    }
    for (int i = 0; i < 7; i++)
        CHECK(hist[i] > 9000 && hist[i] < 11000, "residue %d drawn %u times of 70000", i, hist[i]);
}

/* The order in which one epoch visits the samples, taken as world size `size`. */
static void epoch_order(tide_sampler_t *s, uint64_t epoch, int size, uint32_t *out, size_t *n_out,
                        size_t n_samples, size_t batch)
{
    size_t steps = tide_sampler_steps_per_epoch(s), n = 0;
    uint32_t *idx = malloc(batch * sizeof *idx);
    for (size_t st = 0; st < steps; st++) {
        tide_sampler_seek(s, epoch, st);
        size_t g0 = 0, before = n;
        for (int r = 0; r < size; r++) {
            size_t count, global;
            CHECK(tide_sampler_batch(s, r, size, idx, batch, &count, &global) == TIDE_OK, "batch");
            CHECK(count <= global / (size_t)size + 1, "rank %d of %d got %zu of %zu", r, size,
                  count, global);
            CHECK(count + 1 >= global / (size_t)size, "rank %d of %d got %zu of %zu", r, size,
                  count, global);
            if (r > 0) CHECK(global == g0, "ranks disagree on the global batch size");
            g0 = global;
            memcpy(out + n, idx, count * sizeof *idx);
            n += count;
        }
        CHECK(n - before == g0, "slices of step %zu cover %zu of %zu samples", st, n - before, g0);
        CHECK(g0 == (st + 1 < steps ? batch : n_samples - st * batch),
              "step %zu has a global batch of %zu", st, g0);
    }
    free(idx);
    *n_out = n;
}

/* The promises of Tide's elastic sampler, which the trainer relies on (P6). */
static void test_sampler(void)
{
    const size_t N = 1000, B = 64; /* 16 steps, the last one of 40 */
    tide_sampler_t *s, *t;
    CHECK(tide_sampler_create(N, B, 7, &s) == TIDE_OK, "create");
    CHECK(tide_sampler_create(N, B, 7, &t) == TIDE_OK, "create");
    CHECK(tide_sampler_steps_per_epoch(s) == 16, "steps per epoch %llu",
          (unsigned long long)tide_sampler_steps_per_epoch(s));
    uint32_t *ref = malloc(N * sizeof *ref), *got = malloc(N * sizeof *got);
    unsigned char *seen = calloc(N, 1);
    size_t n;
    for (uint64_t e = 0; e < 3; e++) {
        epoch_order(s, e, 1, ref, &n, N, B);
        CHECK(n == N, "epoch %llu visits %zu samples", (unsigned long long)e, n);
        memset(seen, 0, N);
        for (size_t i = 0; i < n; i++)
            seen[ref[i]]++;
        size_t once = 0;
        for (size_t i = 0; i < N; i++)
            once += seen[i] == 1;
        CHECK(once == N, "epoch %llu visits only %zu samples exactly once", (unsigned long long)e,
              once);
        /* Any world size sees the same global batches in the same order. */
        for (int size = 2; size <= 70; size += (size < 9 ? 1 : 61)) {
            epoch_order(s, e, size, got, &n, N, B);
            CHECK(n == N && memcmp(ref, got, N * sizeof *ref) == 0,
                  "epoch %llu in %d ranks differs from 1 rank", (unsigned long long)e, size);
        }
        /* A second sampler with the same seed agrees: the order is a function of
         * (seed, epoch) only. */
        epoch_order(t, e, 3, got, &n, N, B);
        CHECK(memcmp(ref, got, N * sizeof *ref) == 0, "same seed, different order");
    }
    /* Epochs and seeds change the order. */
    epoch_order(s, 0, 1, ref, &n, N, B);
    epoch_order(s, 1, 1, got, &n, N, B);
    CHECK(memcmp(ref, got, N * sizeof *ref) != 0, "epochs 0 and 1 have the same order");
    tide_sampler_destroy(t);
    CHECK(tide_sampler_create(N, B, 8, &t) == TIDE_OK, "create");
    epoch_order(t, 0, 1, got, &n, N, B);
    CHECK(memcmp(ref, got, N * sizeof *ref) != 0, "seeds 7 and 8 have the same order");

    /* Advancing walks the steps and rolls into the next epoch. */
    uint64_t ce, cs;
    tide_sampler_seek(s, 0, 0);
    for (int i = 0; i < 16 * 2 + 5; i++)
        tide_sampler_advance(s);
    tide_sampler_cursor(s, &ce, &cs);
    CHECK(ce == 2 && cs == 5, "after 37 steps cursor is (%llu, %llu)", (unsigned long long)ce,
          (unsigned long long)cs);
    tide_sampler_seek(s, 1, 16 + 3);
    tide_sampler_cursor(s, &ce, &cs);
    CHECK(ce == 2 && cs == 3, "seek past the epoch end");

    /* The slice arithmetic, including empty slices when ranks outnumber samples. */
    size_t b, c;
    tide_sampler_slice(10, 3, 4, &b, &c);
    CHECK(b == 7 && c == 3, "slice(10, 3 of 4) = [%zu, +%zu)", b, c);
    tide_sampler_slice(2, 0, 4, &b, &c);
    CHECK(c == 0, "slice(2, 0 of 4) has %zu", c);
    tide_sampler_slice(2, 5, 4, &b, &c);
    CHECK(c == 0, "an out-of-range rank gets samples");
    tide_sampler_destroy(t);
    CHECK(tide_sampler_create(0, 1, 0, &t) != TIDE_OK, "an empty training set is accepted");
    CHECK(tide_sampler_create(10, 0, 0, &t) != TIDE_OK, "a batch of 0 is accepted");

    free(ref);
    free(got);
    free(seen);
    tide_sampler_destroy(s);
}

static void fill_random(fm_mlp_t *m, size_t rows, uint8_t *labels, uint64_t seed)
{
    fm_rng_t rng;
    fm_rng_seed(&rng, seed);
    float *x = fm_mlp_input(m);
    for (size_t i = 0; i < rows * (size_t)m->width[0]; i++)
        x[i] = 2.0f * fm_rng_float(&rng) - 1.0f;
    for (size_t r = 0; r < rows; r++)
        labels[r] = (uint8_t)fm_rng_below(&rng, (uint64_t)m->width[m->n_layers]);
}

typedef struct {
    int n, layer[8];
    size_t off[8], len[8];
} ranges_t;

static void record_range(void *ctx, int layer, size_t off, size_t len)
{
    ranges_t *rg = ctx;
    if (rg->n < 8) {
        rg->layer[rg->n] = layer;
        rg->off[rg->n] = off;
        rg->len[rg->n] = len;
    }
    rg->n++;
}

/* The backward pass against central differences of the loss. */
static void test_gradient(void)
{
    const int widths[] = {5, 7, 6, 3};
    const size_t rows = 4;
    fm_mlp_t m;
    CHECK(fm_mlp_init(&m, 3, widths, rows) == 0, "init");
    fm_mlp_init_params(&m, 3);
    /* Non-zero biases, so that their gradients are exercised away from zero. */
    fm_rng_t rng;
    fm_rng_seed(&rng, 11);
    for (int l = 0; l < m.n_layers; l++)
        for (int j = 0; j < m.width[l + 1]; j++)
            m.params[m.b_off[l] + (size_t)j] = 0.2f * fm_rng_float(&rng) - 0.1f;
    uint8_t labels[4];
    fill_random(&m, rows, labels, 5);
    float *x = malloc(rows * 5 * sizeof *x);
    memcpy(x, fm_mlp_input(&m), rows * 5 * sizeof *x);

    const float scale = 0.25f;
    fm_mlp_forward_backward(&m, rows, labels, scale, NULL, NULL, NULL);
    float *g = malloc(m.n_params * sizeof *g);
    memcpy(g, m.grad, m.n_params * sizeof *g);
    int bad = 0;
    for (size_t i = 0; i < m.n_params; i++) {
        const float eps = 1e-3f;
        float p = m.params[i];
        m.params[i] = p + eps;
        memcpy(fm_mlp_input(&m), x, rows * 5 * sizeof *x);
        double up = fm_mlp_forward(&m, rows, labels, NULL);
        m.params[i] = p - eps;
        memcpy(fm_mlp_input(&m), x, rows * 5 * sizeof *x);
        double down = fm_mlp_forward(&m, rows, labels, NULL);
        m.params[i] = p;
        double num = scale * (up - down) / (2.0 * eps);
        double tol = 2e-4 + 1e-2 * fabs(num);
        if (fabs(num - (double)g[i]) > tol) {
            bad++;
            fprintf(stderr, "  param %zu: backward %.6g, finite difference %.6g\n", i, (double)g[i],
                    num);
        }
    }
    CHECK(bad == 0, "%d of %zu gradients disagree with finite differences", bad, m.n_params);

    /* The per-layer callbacks hand over the whole slab and the loss slot, last layer
     * first, in contiguous ranges; also for a rank with no rows. */
    for (size_t r = 0; r <= rows; r += rows) {
        memcpy(fm_mlp_input(&m), x, rows * 5 * sizeof *x);
        ranges_t rg = {0};
        fm_mlp_forward_backward(&m, r, labels, scale, NULL, record_range, &rg);
        CHECK(rg.n == 3, "%d callbacks for 3 layers", rg.n);
        size_t end = m.n_params + 1;
        for (int i = 0; i < rg.n && i < 3; i++) {
            CHECK(rg.layer[i] == 2 - i, "callback %d is for layer %d", i, rg.layer[i]);
            CHECK(rg.off[i] + rg.len[i] == end, "layer %d ends at %zu, not %zu", rg.layer[i],
                  rg.off[i] + rg.len[i], end);
            end = rg.off[i];
        }
        CHECK(end == 0, "the ranges stop at %zu, not 0", end);
    }
    free(x);
    free(g);
    fm_mlp_free(&m);
}

/* The sum over ranks of slice gradients scaled by 1/B equals the gradient of the
 * whole global batch scaled by 1/B, for any world size: this is what lets the
 * trainer allreduce(SUM) and get the same step at every world size (P6). */
static void test_data_parallel(void)
{
    const int widths[] = {784, 64, 32, 10};
    const size_t B = 128;
    fm_mlp_t m;
    CHECK(fm_mlp_init(&m, 3, widths, B) == 0, "init");
    fm_mlp_init_params(&m, 9);
    uint8_t labels[128];
    fill_random(&m, B, labels, 21);
    float *x = malloc(B * 784 * sizeof *x);
    memcpy(x, fm_mlp_input(&m), B * 784 * sizeof *x);

    double loss_full = fm_mlp_forward_backward(&m, B, labels, 1.0f / (float)B, NULL, NULL, NULL);
    float *full = malloc(m.n_params * sizeof *full);
    memcpy(full, m.grad, m.n_params * sizeof *full);
    double gmax = 0.0;
    for (size_t i = 0; i < m.n_params; i++)
        gmax = fmax(gmax, fabs(full[i]));
    CHECK(gmax > 0.0, "the full-batch gradient is zero");

    double *sum = malloc((m.n_params + 1) * sizeof *sum);
    const int sizes[] = {1, 2, 3, 4, 5, 7, 16, 127, 128, 200};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int n = sizes[k];
        memset(sum, 0, (m.n_params + 1) * sizeof *sum);
        double loss = 0.0;
        for (int r = 0; r < n; r++) {
            size_t b, c;
            tide_sampler_slice(B, r, n, &b, &c);
            memcpy(fm_mlp_input(&m), x + b * 784, c * 784 * sizeof *x);
            loss += fm_mlp_forward_backward(&m, c, labels + b, 1.0f / (float)B, NULL, NULL, NULL);
            for (size_t i = 0; i <= m.n_params; i++)
                sum[i] += m.grad[i];
        }
        double worst = 0.0;
        for (size_t i = 0; i < m.n_params; i++)
            worst = fmax(worst, fabs(sum[i] - (double)full[i]));
        /* Only the summation order differs: allow float rounding relative to the
         * largest gradient entry. */
        CHECK(worst <= 1e-5 * gmax, "%d ranks: gradient differs by %g (largest entry %g)", n, worst,
              gmax);
        CHECK(fabs(loss - loss_full) <= 1e-5 * loss_full, "%d ranks: loss %.9g vs %.9g", n, loss,
              loss_full);
        /* The loss slot, summed like the gradients, is the mean loss of the batch. */
        CHECK(fabs(sum[m.n_params] - loss_full / (double)B) <= 1e-5 * loss_full / (double)B,
              "%d ranks: loss slot %.9g vs %.9g", n, sum[m.n_params], loss_full / (double)B);
    }
    free(sum);
    free(full);
    free(x);
    fm_mlp_free(&m);
}

/* Momentum SGD matches its formula, and init is a function of the seed alone. */
static void test_sgd_and_init(void)
{
    const int widths[] = {3, 4, 2};
    fm_mlp_t a, b;
    CHECK(fm_mlp_init(&a, 2, widths, 2) == 0 && fm_mlp_init(&b, 2, widths, 2) == 0, "init");
    fm_mlp_init_params(&a, 5);
    fm_mlp_init_params(&b, 5);
    CHECK(memcmp(a.params, b.params, a.n_params * sizeof(float)) == 0, "same seed, other init");
    fm_mlp_init_params(&b, 6);
    CHECK(memcmp(a.params, b.params, a.n_params * sizeof(float)) != 0, "seed ignored");
    for (size_t i = 0; i < a.n_params; i++) {
        a.params[i] = 1.0f;
        a.grad[i] = 0.5f;
        a.mom[i] = 2.0f;
    }
    fm_mlp_sgd(&a, 0.1f, 0.9f, 0.01f); /* v = 1.8 + 0.5 + 0.01 = 2.31; p = 1 - 0.231 */
    CHECK(fabsf(a.mom[0] - 2.31f) < 1e-6f && fabsf(a.params[0] - 0.769f) < 1e-6f,
          "sgd gave v=%g p=%g", a.mom[0], a.params[0]);
    fm_mlp_free(&a);
    fm_mlp_free(&b);
}

int main(void)
{
    test_rng();
    test_sampler();
    test_gradient();
    test_data_parallel();
    test_sgd_and_init();
    if (failures) {
        fprintf(stderr, "fmnist-selftest: %d check(s) failed\n", failures);
        return 1;
    }
    printf("fmnist-selftest: all checks passed\n");
    return 0;
}
