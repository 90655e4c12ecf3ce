/*
 * mlp.c - forward, backward and the optimizer step of the MLP (see mlp.h).
 *
 * With X the layer input (rows x in), W (in x out) and b (out):
 *   forward   Y = X W + b, then ReLU on hidden layers
 *   backward  dW = X^T dY, db = column sums of dY, dX = dY W^T (masked by ReLU)
 * all in row-major cblas_sgemm calls.
 */
#include "mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

int fm_mlp_init(fm_mlp_t *m, int n_layers, const int *widths, size_t max_batch)
{
    memset(m, 0, sizeof *m);
    if (n_layers < 1 || n_layers > FM_MLP_MAX_LAYERS || max_batch == 0) return -1;
    m->n_layers = n_layers;
    m->max_batch = max_batch;
    size_t off = 0, widest = 0;
    for (int l = 0; l <= n_layers; l++) {
        if (widths[l] < 1 || widths[l] > (1 << 20)) return -1;
        m->width[l] = widths[l];
        if ((size_t)widths[l] > widest) widest = (size_t)widths[l];
    }
    for (int l = 0; l < n_layers; l++) {
        m->w_off[l] = off;
        off += (size_t)m->width[l] * (size_t)m->width[l + 1];
        m->b_off[l] = off;
        off += (size_t)m->width[l + 1];
    }
    m->n_params = off;
    m->params = calloc(off, sizeof(float));
    m->grad = calloc(off + 1, sizeof(float));
    m->mom = calloc(off, sizeof(float));
    int ok = m->params && m->grad && m->mom;
    for (int l = 0; l <= n_layers && ok; l++)
        ok = (m->act[l] = calloc(max_batch * (size_t)m->width[l], sizeof(float))) != NULL;
    for (int i = 0; i < 2 && ok; i++)
        ok = (m->dact[i] = calloc(max_batch * widest, sizeof(float))) != NULL;
    if (!ok) {
        fm_mlp_free(m);
        return -1;
    }
    return 0;
}

void fm_mlp_free(fm_mlp_t *m)
{
    free(m->params);
    free(m->grad);
    free(m->mom);
    for (int l = 0; l <= FM_MLP_MAX_LAYERS; l++)
        free(m->act[l]);
    free(m->dact[0]);
    free(m->dact[1]);
    memset(m, 0, sizeof *m);
}

void fm_mlp_init_params(fm_mlp_t *m, uint64_t seed)
{
    fm_rng_t rng;
    fm_rng_seed(&rng, seed);
    memset(m->params, 0, m->n_params * sizeof(float));
    memset(m->mom, 0, m->n_params * sizeof(float));
    for (int l = 0; l < m->n_layers; l++) {
        /* He (Kaiming) uniform: variance 2 / fan_in suits ReLU layers. */
        float bound = sqrtf(6.0f / (float)m->width[l]);
        size_t n = (size_t)m->width[l] * (size_t)m->width[l + 1];
        float *w = m->params + m->w_off[l];
        for (size_t i = 0; i < n; i++)
            w[i] = (2.0f * fm_rng_float(&rng) - 1.0f) * bound;
    }
}

/* Forward through every layer; leaves the logits in act[n_layers]. */
static void forward_layers(fm_mlp_t *m, size_t rows)
{
    for (int l = 0; l < m->n_layers; l++) {
        int in = m->width[l], out = m->width[l + 1];
        const float *w = m->params + m->w_off[l], *b = m->params + m->b_off[l];
        float *x = m->act[l], *y = m->act[l + 1];
        for (size_t r = 0; r < rows; r++)
            memcpy(y + r * (size_t)out, b, (size_t)out * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, out, in, 1.0f, x, in, w,
                    out, 1.0f, y, out);
        if (l + 1 < m->n_layers) {
            size_t n = rows * (size_t)out;
            for (size_t i = 0; i < n; i++)
                y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        }
    }
}

/* Softmax cross-entropy of the logits in act[n_layers]. When dlogits is not NULL it
 * receives scale * (softmax - onehot), the gradient of the scaled summed loss. */
static double softmax_xent(fm_mlp_t *m, size_t rows, const uint8_t *labels, float *dlogits,
                           float scale, size_t *correct)
{
    int k = m->width[m->n_layers];
    double loss = 0.0;
    size_t right = 0;
    for (size_t r = 0; r < rows; r++) {
        const float *z = m->act[m->n_layers] + r * (size_t)k;
        int arg = 0;
        for (int j = 1; j < k; j++)
            if (z[j] > z[arg]) arg = j;
        float zmax = z[arg];
        double sum = 0.0;
        for (int j = 0; j < k; j++)
            sum += exp((double)(z[j] - zmax));
        int y = labels[r];
        loss += log(sum) - (double)(z[y] - zmax);
        right += arg == y;
        if (dlogits) {
            float *d = dlogits + r * (size_t)k;
            for (int j = 0; j < k; j++)
                d[j] = (float)(exp((double)(z[j] - zmax)) / sum) * scale;
            d[y] -= scale;
        }
    }
    if (correct) *correct = right;
    return loss;
}

double fm_mlp_forward(fm_mlp_t *m, size_t rows, const uint8_t *labels, size_t *correct)
{
    if (rows == 0) {
        if (correct) *correct = 0;
        return 0.0;
    }
    forward_layers(m, rows);
    return softmax_xent(m, rows, labels, NULL, 0.0f, correct);
}

/* The slab range of layer l's W and b, plus the loss slot for the last layer. */
static void layer_done(const fm_mlp_t *m, int l, fm_layer_done_fn done, void *ctx)
{
    size_t end = l + 1 < m->n_layers ? m->w_off[l + 1] : m->n_params + 1;
    done(ctx, l, m->w_off[l], end - m->w_off[l]);
}

double fm_mlp_forward_backward(fm_mlp_t *m, size_t rows, const uint8_t *labels, float scale,
                               size_t *correct, fm_layer_done_fn done, void *ctx)
{
    if (rows == 0) {
        memset(m->grad, 0, (m->n_params + 1) * sizeof(float));
        if (correct) *correct = 0;
        for (int l = m->n_layers - 1; l >= 0 && done; l--)
            layer_done(m, l, done, ctx);
        return 0.0;
    }
    forward_layers(m, rows);
    float *dy = m->dact[0], *dx = m->dact[1];
    double loss = softmax_xent(m, rows, labels, dy, scale, correct);
    m->grad[m->n_params] = (float)(loss * (double)scale);
    for (int l = m->n_layers - 1; l >= 0; l--) {
        int in = m->width[l], out = m->width[l + 1];
        const float *w = m->params + m->w_off[l];
        float *dw = m->grad + m->w_off[l], *db = m->grad + m->b_off[l];
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, (int)rows, 1.0f, m->act[l],
                    in, dy, out, 0.0f, dw, out);
        memset(db, 0, (size_t)out * sizeof(float));
        for (size_t r = 0; r < rows; r++) {
            const float *d = dy + r * (size_t)out;
            for (int j = 0; j < out; j++)
                db[j] += d[j];
        }
        /* dx below reads only dy and W, never this layer's gradient, so the range
         * can be handed over before it is computed. */
        if (done) layer_done(m, l, done, ctx);
        if (l == 0) break; /* no one needs the gradient with respect to the pixels */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, in, out, 1.0f, dy, out, w,
                    out, 0.0f, dx, in);
        /* ReLU: the layer's output act[l] is zero exactly where its gradient is cut. */
        const float *a = m->act[l];
        size_t n = rows * (size_t)in;
        for (size_t i = 0; i < n; i++)
            if (a[i] <= 0.0f) dx[i] = 0.0f;
        float *t = dy;
        dy = dx;
        dx = t;
    }
    return loss;
}

void fm_mlp_sgd(fm_mlp_t *m, float lr, float momentum, float weight_decay)
{
    float *p = m->params, *g = m->grad, *v = m->mom;
    for (size_t i = 0; i < m->n_params; i++) {
        v[i] = momentum * v[i] + g[i] + weight_decay * p[i];
        p[i] -= lr * v[i];
    }
}
